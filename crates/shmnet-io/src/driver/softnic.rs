//! `softnic`: a software device that plays seed 000's sending host.
//!
//! It "receives" UDP messages of a given size and count, addressed to us, cut into MTU-sized
//! IPv4 fragments, with a chosen gap between messages (0: back to back). Each message carries
//! its sequence number in its first 8 payload bytes (little-endian) and a byte pattern after
//! it, so a receiver can check every byte ([`expected_payload`]). The frames of one message are
//! built once, as a template in private memory; per message only the sequence number, the IPv4
//! identification and the checksums are patched, and then the frames are copied into pool
//! buffers — that copy is the device's DMA:
//!
//! - [`Dma::Cached`]: ordinary stores; the data arrives in the cache, as when the receiving
//!   CPU itself copies from a device.
//! - [`Dma::NonTemporal`]: x86 non-temporal stores (`movntdq`), which write around the cache,
//!   as a DMA engine that does not allocate in the CPU's cache does (seed 000's HP-UX device).
//!
//! What is transmitted to it is sunk: counted, checked to be a well-formed Ethernet frame
//! (malformed ones counted), and freed.
//!
//! As a **loopback** ([`SoftnicConfig::loopback`]) it sends nothing of its own: every frame
//! transmitted to it comes back as a received frame, like Linux's `lo`, which hands the same
//! socket buffer back without copying. softnic hands the same pool buffer back (its header's
//! `off`/`len` as the stack left them): a transmitted buffer is the driver's to release, and
//! a received one the driver's to hand over, so the buffer only changes direction. A buffer
//! the driver does not hold alone (another reference to it, or a chain) cannot change hands
//! like that: its frame is copied into a fresh buffer, and the original released.
//!
//! What it sends, and when, can be governed from outside through a [`Pacer`]: a few hooks
//! the device calls (may the traffic start, may the next message start, a message left, a
//! datagram was sunk). The device knows nothing of what is behind them; shmnet-lab's
//! benchmark roles (a sender kept to a window, a sink that counts for the run) are pacers.
//! `Softnic` is generic over its pacer, so the hooks are inlined: an unpaced softnic
//! ([`Unpaced`], the default) pays nothing for them.

use super::{Driver, DriverStats, Family, RxFrame, classify};
use shmnet_chan::DriverPools;
use shmnet_stack::wire::{
    ArpOperation, ArpRepr, EthernetAddress, EthernetProtocol, IpProtocol, Sum, arp, eth, ipv4, udp,
};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// How frames reach the buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dma {
    /// Ordinary stores: the data ends up in the cache.
    #[default]
    Cached,
    /// Non-temporal stores: the data goes around the cache (x86-64; elsewhere: ordinary).
    NonTemporal,
}

impl std::str::FromStr for Dma {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cached" => Ok(Self::Cached),
            "nt" | "non-temporal" => Ok(Self::NonTemporal),
            _ => Err(format!("unknown DMA mode {s:?}: use cached or nt")),
        }
    }
}

/// When a paced softnic's next message is due (`gap` above zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// One gap after the previous message actually left: a receiver that polls late pushes
    /// every later message back, so it never finds more than one message due (the device
    /// slows to the receiver; nothing piles up).
    #[default]
    AfterPrevious,
    /// Message `i` is due `i` gaps after the first, whatever the receiver does: an
    /// independent sending host, as seed 000's. A receiver that falls behind finds several
    /// messages due at once and gets them back to back (a burst of the frames that
    /// arrived while it was busy), so a full socket queue drops them.
    Fixed,
}

/// What the software device sends.
#[derive(Clone, Debug)]
pub struct SoftnicConfig {
    /// The device's own MAC (the destination of the frames it produces).
    pub mac: [u8; 6],
    /// The simulated sender's MAC.
    pub peer_mac: [u8; 6],
    /// The simulated sender's address.
    pub peer_ip: Ipv4Addr,
    /// Our address (the destination).
    pub ip: Ipv4Addr,
    /// Source UDP port.
    pub src_port: u16,
    /// Destination UDP ports, used in turn.
    pub dst_ports: Vec<u16>,
    /// UDP payload bytes per message (at most 65,507).
    pub size: usize,
    /// Messages to send; `None`: without end.
    pub count: Option<u64>,
    /// Gap between the start of one message and the next (0: back to back).
    pub gap: Duration,
    /// When, with a gap, each message is due.
    pub schedule: Schedule,
    /// Link MTU (IPv4 packet bytes per frame).
    pub mtu: usize,
    /// Fill in the UDP checksum (else 0, "none").
    pub checksum: bool,
    /// How frames reach the buffers.
    pub dma: Dma,
    /// If set, nothing is sent until it becomes true (e.g. until an application has bound
    /// its port).
    pub gate: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Be a loopback: send nothing of its own (`count` is ignored) and hand every frame
    /// transmitted to it back as received (see the module's documentation).
    pub loopback: bool,
}

/// What a paced softnic may do next (see [`Pacer::permit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Send the next message.
    Go,
    /// Not yet: the run has not started, or the window is full.
    Wait,
    /// Send nothing more: the run is stopping or the limit is reached.
    Done,
}

/// Hooks through which something outside the device governs what a softnic sends and
/// learns what it sinks — a benchmark run's rules, say. Every method has the default of an
/// ungoverned device, so a pacer writes only the hooks it needs.
///
/// Called on the device's hot path (once per burst or per message, never per byte): keep
/// them cheap and non-blocking. The device calls them in this order: [`ready`](Self::ready)
/// once per receive burst (after the gate); while it is, [`permit`](Self::permit) before
/// each message, [`sent`](Self::sent) after each, [`finished`](Self::finished) once when
/// `permit` says [`Permit::Done`]; [`sunk`](Self::sunk) at each UDP datagram transmitted to
/// it. After `Done` the device sends nothing more, so `finished` is the last word on `sent`.
/// `Send`, as the device is: it moves to the thread or process that drives it.
pub trait Pacer: Send {
    /// Whether this device sends at all (a pacer that only watches the sink says no: the
    /// device is then [`done`](Softnic::done) from the start).
    #[inline(always)]
    fn sends(&self) -> bool {
        true
    }
    /// May traffic flow yet? Until it says yes, the device sends nothing (ARP replies
    /// excepted) and [`Pacer::recheck`] says when to ask again.
    #[inline(always)]
    fn ready(&mut self) -> bool {
        true
    }
    /// May message number `sent` (counted from 0) start now?
    #[inline(always)]
    fn permit(&mut self, sent: u64) -> Permit {
        let _ = sent;
        Permit::Go
    }
    /// `sent` messages have now left (each message once, in order; a message lost for want
    /// of buffers counts as sent).
    #[inline(always)]
    fn sent(&mut self, sent: u64) {
        let _ = sent;
    }
    /// The device stopped sending after `sent` messages, for good.
    #[inline(always)]
    fn finished(&mut self, sent: u64) {
        let _ = sent;
    }
    /// A UDP datagram was transmitted to the device: `total` since it was made.
    #[inline(always)]
    fn sunk(&mut self, total: u64) {
        let _ = total;
    }
    /// Held back (not [`ready`](Self::ready), or [`Permit::Wait`]): how soon to look again,
    /// for a pacer whose progress no file descriptor announces. `None`: no sooner than
    /// otherwise.
    #[inline(always)]
    fn recheck(&self) -> Option<Duration> {
        None
    }
}

/// No pacer: the device sends `count` messages, as fast as `gap` allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unpaced;

impl Pacer for Unpaced {}

/// An optional pacer: `None` paces nothing.
impl<P: Pacer> Pacer for Option<P> {
    #[inline(always)]
    fn sends(&self) -> bool {
        self.as_ref().is_none_or(P::sends)
    }
    #[inline(always)]
    fn ready(&mut self) -> bool {
        self.as_mut().is_none_or(P::ready)
    }
    #[inline(always)]
    fn permit(&mut self, sent: u64) -> Permit {
        self.as_mut().map_or(Permit::Go, |p| p.permit(sent))
    }
    #[inline(always)]
    fn sent(&mut self, sent: u64) {
        if let Some(p) = self {
            p.sent(sent);
        }
    }
    #[inline(always)]
    fn finished(&mut self, sent: u64) {
        if let Some(p) = self {
            p.finished(sent);
        }
    }
    #[inline(always)]
    fn sunk(&mut self, total: u64) {
        if let Some(p) = self {
            p.sunk(total);
        }
    }
    #[inline(always)]
    fn recheck(&self) -> Option<Duration> {
        self.as_ref().and_then(P::recheck)
    }
}

/// Frames a loopback holds between their transmission and their return (a device's
/// backlog); beyond it a transmitted frame is refused and counted in `tx_errors`.
pub const LOOPBACK_BACKLOG: usize = 256;

impl Default for SoftnicConfig {
    fn default() -> Self {
        Self {
            mac: [0x02, 0x00, 0x00, 0x00, 0x00, 0x01],
            peer_mac: [0x02, 0x00, 0x00, 0x00, 0x00, 0x02],
            peer_ip: Ipv4Addr::new(10, 0, 0, 2),
            ip: Ipv4Addr::new(10, 0, 0, 1),
            src_port: 40000,
            dst_ports: vec![5001],
            size: 14_792,
            count: None,
            gap: Duration::ZERO,
            schedule: Schedule::AfterPrevious,
            mtu: 1500,
            checksum: false,
            dma: Dma::Cached,
            gate: None,
            loopback: false,
        }
    }
}

/// Why a softnic could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SoftnicError {
    /// The message does not fit in an IPv4 datagram.
    #[error("a {0}-byte UDP message does not fit in an IPv4 datagram (at most 65,507 bytes)")]
    TooLarge(usize),
    /// The MTU cannot carry a fragment.
    #[error("MTU {0} is too small (at least 68)")]
    BadMtu(usize),
    /// No destination port.
    #[error("no destination port given")]
    NoPorts,
}

/// The bytes message `seq` carries (what a receiver should find).
pub fn expected_payload(seq: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend((0..size).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)));
    let n = size.min(8);
    out[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
}

/// One frame of the template: an Ethernet header, an IPv4 header without options, and the
/// frame's share of the UDP datagram.
struct TemplateFrame {
    bytes: Vec<u8>,
}

const ETH: usize = eth::HEADER_LEN;
const IP: usize = ipv4::HEADER_LEN;
const UDP: usize = udp::HEADER_LEN;

/// The software device, paced by `P` (see [`Pacer`]; [`Unpaced`] by default).
pub struct Softnic<P: Pacer = Unpaced> {
    cfg: SoftnicConfig,
    pacer: P,
    frames: Vec<TemplateFrame>,
    /// Sum of the UDP header and payload with the destination port and the sequence bytes
    /// zero (both are added per message).
    udp_sum_base: Sum,
    /// The UDP pseudo-header's sum.
    udp_pseudo: u16,
    /// Messages fully produced.
    sent: u64,
    /// Next frame of the current message to produce.
    next_frame: usize,
    /// When the current message may start.
    due: Instant,
    stats: DriverStats,
    sink_malformed: u64,
    /// ARP replies owed to the stack (the simulated peer answers requests for its address).
    arp_replies: std::collections::VecDeque<Vec<u8>>,
    /// UDP datagrams (first fragments) transmitted to the simulated peer.
    sink_udp: u64,
    /// Nothing more to send: a loopback, a pacer that does not send, or one that said
    /// [`Permit::Done`].
    finished: bool,
    /// The last message could not start: the pacer was not ready or said wait.
    waiting: bool,
    /// Loopback: transmitted frames on their way back, oldest first.
    looped: std::collections::VecDeque<RxFrame>,
    /// Loopback: room for a frame that must be copied.
    scratch: Vec<u8>,
}

impl Softnic {
    /// Builds the template for `cfg`, unpaced.
    pub fn new(cfg: SoftnicConfig) -> Result<Self, SoftnicError> {
        Self::with_pacer(cfg, Unpaced)
    }
}

impl<P: Pacer> Softnic<P> {
    /// Builds the template for `cfg`, its sending governed by `pacer`.
    pub fn with_pacer(cfg: SoftnicConfig, pacer: P) -> Result<Self, SoftnicError> {
        if cfg.size > 65_507 {
            return Err(SoftnicError::TooLarge(cfg.size));
        }
        if cfg.mtu < 68 {
            return Err(SoftnicError::BadMtu(cfg.mtu));
        }
        if cfg.dst_ports.is_empty() {
            return Err(SoftnicError::NoPorts);
        }
        let mut payload = Vec::new();
        expected_payload(0, cfg.size, &mut payload);
        let datagram_len = UDP + cfg.size;
        let header = |dst_port| udp::UdpHeader {
            src_port: cfg.src_port,
            dst_port,
            len: datagram_len as u16,
            checksum: 0,
        };
        let mut datagram = vec![0u8; datagram_len];
        udp::write_header(&mut datagram, &header(cfg.dst_ports[0]));
        datagram[UDP..].copy_from_slice(&payload);
        let ip = ipv4::EmitHeader {
            src: cfg.peer_ip,
            dst: cfg.ip,
            proto: IpProtocol::Udp,
            ttl: 64,
            ident: 0,
            dont_frag: false,
        };
        let per_frag = (cfg.mtu - IP) & !7;
        let mut frames = Vec::new();
        let mut off = 0;
        while off < datagram_len || frames.is_empty() {
            let take = per_frag.min(datagram_len - off);
            let more = off + take < datagram_len;
            let mut bytes = vec![0u8; ETH + IP + take];
            eth::write_header(
                &mut bytes,
                EthernetAddress(cfg.peer_mac),
                EthernetAddress(cfg.mac),
                EthernetProtocol::Ipv4,
            );
            ipv4::write_header(&mut bytes[ETH..], &ip, take, off, more);
            bytes[ETH + IP..].copy_from_slice(&datagram[off..off + take]);
            frames.push(TemplateFrame { bytes });
            off += take;
        }
        // The UDP header and payload with the port and the sequence bytes zero; both are
        // added per message.
        let mut udp_sum_base = Sum::default();
        let mut hdr = [0u8; UDP];
        udp::write_header(&mut hdr, &header(0));
        udp_sum_base.add(&hdr);
        let mut zeroed = payload;
        let n = zeroed.len().min(8);
        zeroed[..n].fill(0);
        udp_sum_base.add(&zeroed);
        let udp_pseudo = udp::pseudo(cfg.peer_ip, cfg.ip, datagram_len);
        Ok(Self {
            frames,
            udp_sum_base,
            udp_pseudo,
            sent: 0,
            next_frame: 0,
            due: Instant::now(),
            stats: DriverStats::default(),
            sink_malformed: 0,
            arp_replies: std::collections::VecDeque::new(),
            sink_udp: 0,
            finished: cfg.loopback || !pacer.sends(),
            waiting: false,
            pacer,
            looped: std::collections::VecDeque::new(),
            scratch: Vec::new(),
            cfg,
        })
    }

    /// Frames per message.
    pub fn frames_per_message(&self) -> usize {
        self.frames.len()
    }

    /// Messages fully produced so far.
    pub fn messages_sent(&self) -> u64 {
        self.sent
    }

    /// Whether it will send nothing more: `count` messages produced, or its pacer said
    /// done (or never sends), or it is a loopback.
    #[inline]
    pub fn done(&self) -> bool {
        self.finished || self.cfg.count.is_some_and(|c| self.sent >= c)
    }

    /// Its pacer.
    pub fn pacer(&self) -> &P {
        &self.pacer
    }

    /// Whether it is a loopback.
    #[inline]
    fn is_loopback(&self) -> bool {
        self.cfg.loopback
    }

    /// Transmitted frames that were not well-formed Ethernet frames.
    pub fn sink_malformed(&self) -> u64 {
        self.sink_malformed
    }

    /// UDP datagrams transmitted to the simulated peer (counted at their first fragment).
    pub fn sink_udp(&self) -> u64 {
        self.sink_udp
    }

    /// Looks at a transmitted frame's first bytes (with the stack's wire layer): answers an
    /// ARP request for the peer's address, counts UDP datagrams.
    fn sink(&mut self, head: &[u8]) {
        match classify(head) {
            Ok(Family::Arp) => {
                let Some(ArpRepr::EthernetIpv4 {
                    operation: ArpOperation::Request,
                    source_hardware_addr: sha,
                    source_protocol_addr: spa,
                    target_protocol_addr: tpa,
                    ..
                }) = arp::parse(&head[ETH..])
                else {
                    return;
                };
                if tpa == self.cfg.peer_ip && self.arp_replies.len() < 16 {
                    let peer_mac = EthernetAddress(self.cfg.peer_mac);
                    let reply = ArpRepr::EthernetIpv4 {
                        operation: ArpOperation::Reply,
                        source_hardware_addr: peer_mac,
                        source_protocol_addr: self.cfg.peer_ip,
                        target_hardware_addr: sha,
                        target_protocol_addr: spa,
                    };
                    let mut r = vec![0; arp::FRAME_LEN];
                    arp::emit_frame(&mut r, peer_mac, sha, &reply);
                    self.arp_replies.push_back(r);
                }
            }
            Ok(Family::Ipv4) => {
                // A datagram is counted at its first fragment (offset 0).
                if ipv4::peek(&head[ETH..]) == Some((IpProtocol::Udp, 0)) {
                    self.sink_udp += 1;
                    self.pacer.sunk(self.sink_udp);
                }
            }
            Ok(Family::Ipv6) | Err(_) => {}
        }
    }

    /// Patches the template for message `seq`: IPv4 identification and header checksums of
    /// every fragment, sequence number, port and UDP checksum in the first.
    fn patch(&mut self, seq: u64) {
        let port = self.cfg.dst_ports[(seq % self.cfg.dst_ports.len() as u64) as usize];
        for f in &mut self.frames {
            let ip = f.bytes[ETH..]
                .first_chunk_mut::<IP>()
                .expect("a template frame holds an IPv4 header");
            ipv4::set_ident(ip, seq as u16);
        }
        let first = &mut self.frames[0].bytes;
        let udp = ETH + IP;
        first[udp + 2..udp + 4].copy_from_slice(&port.to_be_bytes());
        let n = self.cfg.size.min(8);
        let seq_bytes = seq.to_le_bytes();
        first[udp + UDP..udp + UDP + n].copy_from_slice(&seq_bytes[..n]);
        let checksum = if self.cfg.checksum {
            let mut padded = [0u8; 8];
            padded[..n].copy_from_slice(&seq_bytes[..n]);
            // The port and the sequence bytes stand at even offsets of the datagram.
            let mut sum = self.udp_sum_base;
            sum.add_word(port);
            sum.add_word(Sum::of(&padded).value());
            udp::finish_tx_checksum(sum, self.udp_pseudo)
        } else {
            0
        };
        first[udp + udp::CHECKSUM_OFFSET..udp + UDP].copy_from_slice(&checksum.to_be_bytes());
    }

    /// Loopback: takes a transmitted frame of `len` bytes, well-formed and of `family`, to
    /// hand back as received. Its own buffer when the driver holds the only reference to a
    /// single buffer; else a copy in a fresh buffer, the original released.
    fn loop_tx(&mut self, pools: &mut DriverPools, buf: u32, len: u16, family: Family) {
        if self.looped.len() >= LOOPBACK_BACKLOG {
            self.stats.tx_errors += 1;
            pools.release(buf);
            return;
        }
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += u64::from(len);
        let b = pools.buffers();
        let back = if b.refcnt(buf) == Some(1) && b.next(buf).is_none() {
            Some(buf)
        } else {
            let copy = self.copy_frame(pools, buf, len);
            pools.release(buf);
            copy
        };
        match back {
            Some(buf) => self.looped.push_back(RxFrame {
                buf,
                len: u32::from(len),
                family,
            }),
            None => self.stats.rx_no_buffer += 1,
        }
    }

    /// Loopback: the frame of `buf` (`len` bytes at its offset) in a fresh buffer at offset 0.
    fn copy_frame(&mut self, pools: &mut DriverPools, buf: u32, len: u16) -> Option<u32> {
        let (off, _) = pools.buffers().off_len(buf)?;
        self.scratch.resize(usize::from(len), 0);
        pools
            .buffers()
            .read(buf, off.into(), &mut self.scratch)
            .ok()?;
        let fresh = pools.alloc()?;
        if self.dma(pools, fresh, &self.scratch) {
            Some(fresh)
        } else {
            pools.release(fresh);
            None
        }
    }

    /// Loopback: hands up to `max` transmitted frames back as received.
    fn loop_rx(&mut self, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let n = max.min(self.looped.len());
        for f in self.looped.drain(..n) {
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += u64::from(f.len);
            out.push(f);
        }
        n
    }

    fn dma(&self, pools: &DriverPools, buf: u32, frame: &[u8]) -> bool {
        let b = pools.buffers();
        if frame.len() > b.geometry().data_size as usize {
            return false;
        }
        let ok = match self.cfg.dma {
            Dma::Cached => b.write(buf, 0, frame).is_ok(),
            Dma::NonTemporal => match b.data_ptr(buf) {
                Ok(dst) => {
                    // SAFETY: the buffer was just allocated to us and is `data_size` bytes
                    // long, which we checked `frame.len()` does not exceed.
                    unsafe { copy_nontemporal(dst.as_ptr(), frame) };
                    true
                }
                Err(_) => false,
            },
        };
        ok && b.set_off_len(buf, 0, frame.len() as u16).is_ok()
    }
}

/// Copies `src` to `dst` with non-temporal stores (64-byte-aligned `dst` assumed, as pool
/// buffers are); the tail under 16 bytes uses ordinary stores.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and 16-byte aligned.
unsafe fn copy_nontemporal(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let chunks = src.len() / 16;
        for i in 0..chunks {
            // SAFETY: `i * 16 + 16 <= src.len()`, so the load is in `src`, and the store is in
            // `dst`'s first `src.len()` bytes, 16-byte aligned because `dst` is.
            unsafe {
                let v = _mm_loadu_si128(src.as_ptr().add(i * 16).cast::<__m128i>());
                _mm_stream_si128(dst.add(i * 16).cast::<__m128i>(), v);
            }
        }
        let done = chunks * 16;
        // SAFETY: the remaining bytes lie within both ranges.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr().add(done), dst.add(done), src.len() - done)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller guarantees `dst` is valid for `src.len()` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len())
    };
}

impl<P: Pacer> Driver for Softnic<P> {
    fn rx_burst(
        &mut self,
        pools: &mut dyn super::RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        if self.is_loopback() {
            return Ok(self.loop_rx(out, max));
        }
        // The softnic is an IPv4 device: everything it makes is IPv4 or ARP, which one
        // server takes together ([`super::Families`]).
        let Some(pools) = pools.pools_for(Family::Ipv4) else {
            return Ok(0);
        };
        let mut produced = 0;
        while produced < max {
            let Some(reply) = self.arp_replies.pop_front() else {
                break;
            };
            let Some(buf) = pools.alloc() else {
                self.stats.rx_no_buffer += 1;
                continue;
            };
            if self.dma(pools, buf, &reply) {
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += reply.len() as u64;
                out.push(RxFrame {
                    buf,
                    len: reply.len() as u32,
                    family: Family::Arp,
                });
                produced += 1;
            } else {
                pools.release(buf);
            }
        }
        if let Some(g) = &self.cfg.gate {
            if !g.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(produced);
            }
        }
        if !self.pacer.ready() {
            self.waiting = true;
            return Ok(produced);
        }
        self.waiting = false;
        // Buffers are taken from the pools a burst at a time (one lock per pool, not per
        // frame); any the loop did not fill go back before returning.
        let mut stash = Stash::default();
        while produced < max && !self.done() {
            if self.next_frame == 0 {
                match self.pacer.permit(self.sent) {
                    Permit::Go => {}
                    Permit::Wait => {
                        self.waiting = true;
                        break;
                    }
                    Permit::Done => {
                        self.finished = true;
                        self.pacer.finished(self.sent);
                        break;
                    }
                }
                if !self.cfg.gap.is_zero() {
                    let now = Instant::now();
                    if now < self.due {
                        break;
                    }
                    self.due = match self.cfg.schedule {
                        Schedule::AfterPrevious => now.max(self.due) + self.cfg.gap,
                        // Anchored at the first message, not at the device's making (a
                        // gated device would otherwise start with a burst).
                        Schedule::Fixed if self.sent == 0 => now + self.cfg.gap,
                        Schedule::Fixed => self.due + self.cfg.gap,
                    };
                }
                self.patch(self.sent);
            }
            if stash.used == stash.have {
                let mut want = (max - produced).min(stash.bufs.len());
                if !self.cfg.gap.is_zero() {
                    // Paced: this call sends the rest of one message at most.
                    want = want.min(self.frames.len() - self.next_frame);
                }
                stash.have = pools.alloc_burst(&mut stash.bufs[..want]);
                stash.used = 0;
            }
            let Some(buf) = stash.take() else {
                // The device has nowhere to put the frame: it is lost, as on a real NIC,
                // and so is the rest of the message.
                self.stats.rx_no_buffer += 1;
                self.next_frame = 0;
                self.sent += 1;
                self.pacer.sent(self.sent);
                continue;
            };
            let frame = &self.frames[self.next_frame].bytes;
            let len = frame.len();
            if !self.dma(pools, buf, frame) {
                pools.release(buf);
                self.stats.rx_no_buffer += 1;
            } else {
                self.stats.rx_frames += 1;
                self.stats.rx_bytes += len as u64;
                out.push(RxFrame {
                    buf,
                    len: len as u32,
                    family: Family::Ipv4,
                });
                produced += 1;
            }
            self.next_frame += 1;
            if self.next_frame == self.frames.len() {
                self.next_frame = 0;
                self.sent += 1;
                self.pacer.sent(self.sent);
            }
        }
        // Most recently taken first back, so the pool's LIFO order is as it was.
        for &b in stash.bufs[stash.used..stash.have].iter().rev() {
            pools.release(b);
        }
        #[cfg(target_arch = "x86_64")]
        if self.cfg.dma == Dma::NonTemporal && produced > 0 {
            // SAFETY: `sfence` only orders stores; it makes the non-temporal stores visible
            // before the descriptors that name the buffers are published.
            unsafe { core::arch::x86_64::_mm_sfence() };
        }
        Ok(produced)
    }

    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
        let mut scratch = [0u8; 64];
        for &buf in frames {
            let b = pools.buffers();
            match b.off_len(buf) {
                Some((off, len)) => {
                    let head = usize::from(len).min(scratch.len());
                    let family = b
                        .read(buf, off.into(), &mut scratch[..head])
                        .ok()
                        .and_then(|()| classify(&scratch[..head]).ok());
                    match family {
                        Some(family) if self.is_loopback() => {
                            // The buffer is the loopback's now: it comes back as received.
                            self.loop_tx(pools, buf, len, family);
                            continue;
                        }
                        Some(_) => {
                            self.stats.tx_frames += 1;
                            self.stats.tx_bytes += u64::from(len);
                            self.sink(&scratch[..head]);
                        }
                        None => {
                            self.sink_malformed += 1;
                            self.stats.tx_errors += 1;
                        }
                    }
                }
                None => self.stats.tx_errors += 1,
            }
            pools.release(buf);
        }
        Ok(())
    }

    fn rx_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        None
    }

    fn idle_hint(&self) -> Option<Duration> {
        let gated = self
            .cfg
            .gate
            .as_ref()
            .is_some_and(|g| !g.load(std::sync::atomic::Ordering::Acquire));
        // A sender held back by its pacer may learn of progress from no file descriptor:
        // look again when the pacer says.
        if self.waiting && !self.done() {
            if let Some(soon) = self.pacer.recheck() {
                return Some(soon);
            }
        }
        if !self.looped.is_empty() {
            return Some(Duration::ZERO);
        }
        // Only a paced softnic knows when it will have more: back to back, it always has.
        if self.done() || gated || self.cfg.gap.is_zero() || !self.arp_replies.is_empty() {
            return None;
        }
        Some(self.due.saturating_duration_since(Instant::now()))
    }

    fn tx_room(&self) -> Option<usize> {
        // A loopback's backlog is its transmit queue; a generator sinks what it is sent.
        self.is_loopback()
            .then(|| LOOPBACK_BACKLOG.saturating_sub(self.looped.len()))
    }

    fn stats(&self) -> DriverStats {
        self.stats.clone()
    }

    fn mac(&self) -> [u8; 6] {
        self.cfg.mac
    }
}

/// Buffers allocated for one `rx_burst` call: `bufs[used..have]` are ours and not yet
/// filled.
#[derive(Default)]
struct Stash {
    bufs: [u32; 32],
    have: usize,
    used: usize,
}

impl Stash {
    fn take(&mut self) -> Option<u32> {
        let b = *self.bufs[..self.have].get(self.used)?;
        self.used += 1;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use shmnet_chan::heap::heap_pools;
    use shmnet_chan::{AllocPolicy, PoolGeometry};

    fn pools() -> (shmnet_chan::ServerPools, DriverPools) {
        pools_of(64)
    }

    fn pools_of(per_pool: u32) -> (shmnet_chan::ServerPools, DriverPools) {
        heap_pools(
            PoolGeometry {
                pools: 2,
                per_pool,
                data_size: 2048,
                free_cap: per_pool.next_power_of_two(),
                policy: AllocPolicy::Lifo,
            },
            None,
        )
    }

    #[test]
    fn a_large_message_arrives_as_mtu_fragments_that_reassemble_to_the_pattern() {
        for checksum in [false, true] {
            let cfg = SoftnicConfig {
                size: 14_792,
                count: Some(3),
                checksum,
                ..SoftnicConfig::default()
            };
            let mut nic = Softnic::new(cfg).unwrap();
            assert_eq!(nic.frames_per_message(), 10);
            let (_server, mut drv) = pools();
            let mut out = Vec::new();
            for seq in 0..3u64 {
                out.clear();
                assert_eq!(nic.rx_burst(&mut drv, &mut out, 10).unwrap(), 10);
                let mut defrag = etherparse::defrag::IpDefragPool::<(), ()>::new();
                let mut whole = None;
                for f in &out {
                    let mut bytes = vec![0u8; f.len as usize];
                    drv.buffers().read(f.buf, 0, &mut bytes).unwrap();
                    let p = SlicedPacket::from_ethernet(&bytes).unwrap();
                    let Some(NetSlice::Ipv4(ip)) = &p.net else {
                        panic!("not IPv4")
                    };
                    assert!(ip.header().is_fragmenting_payload());
                    if let Some(done) = defrag.process_sliced_packet(&p, (), ()).unwrap() {
                        whole = Some(done.payload);
                    }
                    drv.release(f.buf);
                }
                let dgram = whole.expect("reassembled");
                let udp = etherparse::UdpSlice::from_slice(&dgram).unwrap();
                let mut want = Vec::new();
                expected_payload(seq, 14_792, &mut want);
                assert_eq!(udp.payload(), &want[..]);
                if checksum {
                    let c = udp
                        .to_header()
                        .calc_checksum_ipv4_raw([10, 0, 0, 2], [10, 0, 0, 1], udp.payload())
                        .unwrap();
                    assert_eq!(udp.checksum(), c, "UDP checksum of message {seq}");
                } else {
                    assert_eq!(udp.checksum(), 0);
                }
                let _ = TransportSlice::Udp(udp);
            }
            assert!(nic.done());
            assert_eq!(nic.rx_burst(&mut drv, &mut out, 10).unwrap(), 0);
        }
    }

    /// A receiver that polls late gets one message from a device that schedules after the
    /// previous message, and every message that fell due meanwhile from one on a fixed
    /// schedule (an independent sender). Bounds only from below and by the count: a slow
    /// machine sleeps longer, which can only make more messages due.
    #[test]
    fn a_fixed_schedule_delivers_what_fell_due_while_the_receiver_was_late() {
        for schedule in [Schedule::AfterPrevious, Schedule::Fixed] {
            let mut nic = Softnic::new(SoftnicConfig {
                size: 100,
                count: Some(5),
                gap: Duration::from_millis(20),
                schedule,
                ..SoftnicConfig::default()
            })
            .unwrap();
            let (_server, mut drv) = pools();
            let mut out = Vec::new();
            assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 1);
            std::thread::sleep(Duration::from_millis(70));
            out.clear();
            let n = nic.rx_burst(&mut drv, &mut out, 32).unwrap();
            match schedule {
                Schedule::AfterPrevious => assert_eq!(n, 1, "one message, late"),
                Schedule::Fixed => assert!((3..=4).contains(&n), "{n} messages due after 70 ms"),
            }
            for f in &out {
                drv.release(f.buf);
            }
        }
    }

    /// A burst takes buffers a burst at a time and gives back every one it did not fill,
    /// paced or not: after each call the pool holds all but the frames handed out.
    #[test]
    fn a_burst_gives_back_every_buffer_it_did_not_fill() {
        for gap in [Duration::ZERO, Duration::from_secs(3600)] {
            let cfg = SoftnicConfig {
                size: 8192,
                count: Some(5),
                gap,
                ..SoftnicConfig::default()
            };
            let mut nic = Softnic::new(cfg).unwrap();
            let (_server, mut drv) = pools();
            let total = drv.buffers().free_count();
            let mut out = Vec::new();
            for max in [1, 4, 32, 32, 32] {
                out.clear();
                let n = nic.rx_burst(&mut drv, &mut out, max).unwrap();
                assert_eq!(n, out.len());
                assert_eq!(drv.buffers().free_count(), total - n as u32, "gap {gap:?}");
                for f in &out {
                    drv.release(f.buf);
                }
                assert_eq!(drv.buffers().free_count(), total, "gap {gap:?}");
            }
        }
    }

    /// Every size (odd, under the 8 sequence bytes, one and several fragments) and port
    /// gets IPv4 header and UDP checksums that etherparse, an independent implementation,
    /// computes too.
    #[test]
    fn patched_checksums_match_etherparse_for_every_size_and_port() {
        for size in [0usize, 1, 7, 8, 9, 1471, 1472, 1473, 3001] {
            let mut nic = Softnic::new(SoftnicConfig {
                size,
                count: Some(4),
                checksum: true,
                dst_ports: vec![5001, 7],
                ..SoftnicConfig::default()
            })
            .unwrap();
            let (_server, mut drv) = pools();
            for seq in 0..4u64 {
                let mut out = Vec::new();
                let per = nic.frames_per_message();
                assert_eq!(nic.rx_burst(&mut drv, &mut out, per).unwrap(), per);
                let mut defrag = etherparse::defrag::IpDefragPool::<(), ()>::new();
                let mut whole = None;
                for f in &out {
                    let mut bytes = vec![0u8; f.len as usize];
                    drv.buffers().read(f.buf, 0, &mut bytes).unwrap();
                    drv.release(f.buf);
                    let p = SlicedPacket::from_ethernet(&bytes).unwrap();
                    let Some(NetSlice::Ipv4(ip)) = &p.net else {
                        panic!("not IPv4")
                    };
                    let h = ip.header().to_header();
                    assert_eq!(h.identification, seq as u16);
                    assert_eq!(
                        h.header_checksum,
                        h.calc_header_checksum(),
                        "IPv4 header checksum, size {size} message {seq}"
                    );
                    if per == 1 {
                        let Some(TransportSlice::Udp(u)) = &p.transport else {
                            panic!("not UDP")
                        };
                        whole = Some(u.slice().to_vec());
                    } else if let Some(done) = defrag.process_sliced_packet(&p, (), ()).unwrap() {
                        whole = Some(done.payload);
                    }
                }
                let dgram = whole.expect("a whole datagram");
                let udp = etherparse::UdpSlice::from_slice(&dgram).unwrap();
                assert_eq!(udp.destination_port(), [5001, 7][seq as usize % 2]);
                let mut want = Vec::new();
                expected_payload(seq, size, &mut want);
                assert_eq!(udp.payload(), &want[..]);
                let c = udp
                    .to_header()
                    .calc_checksum_ipv4_raw([10, 0, 0, 2], [10, 0, 0, 1], udp.payload())
                    .unwrap();
                assert_eq!(udp.checksum(), c, "UDP checksum, size {size} message {seq}");
            }
        }
    }

    /// An ARP request for the simulated peer's address, transmitted to the device, is
    /// answered with a reply from the peer that etherparse reads back.
    #[test]
    fn the_sink_answers_an_arp_request_for_the_peer() {
        let cfg = SoftnicConfig {
            count: Some(0),
            ..SoftnicConfig::default()
        };
        let mut nic = Softnic::new(cfg.clone()).unwrap();
        let (_server, mut drv) = pools();
        let ask = |nic: &mut Softnic, drv: &mut DriverPools, target: Ipv4Addr| {
            let req = arp::request_repr(EthernetAddress(cfg.mac), cfg.ip, target);
            let mut f = vec![0u8; arp::FRAME_LEN];
            arp::emit_frame(
                &mut f,
                EthernetAddress(cfg.mac),
                EthernetAddress([0xff; 6]),
                &req,
            );
            let b = drv.alloc().unwrap();
            drv.buffers().write(b, 0, &f).unwrap();
            drv.buffers().set_off_len(b, 0, f.len() as u16).unwrap();
            nic.tx_burst(drv, &[b]).unwrap();
        };
        ask(&mut nic, &mut drv, Ipv4Addr::new(10, 0, 0, 9)); // not the peer: no answer
        ask(&mut nic, &mut drv, cfg.peer_ip);
        let mut out = Vec::new();
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 8).unwrap(), 1);
        assert_eq!(out[0].family, Family::Arp);
        let mut bytes = vec![0u8; out[0].len as usize];
        drv.buffers().read(out[0].buf, 0, &mut bytes).unwrap();
        drv.release(out[0].buf);
        let (eth, rest) = etherparse::Ethernet2Header::from_slice(&bytes).unwrap();
        assert_eq!((eth.destination, eth.source), (cfg.mac, cfg.peer_mac));
        let a = etherparse::ArpPacketSlice::from_slice(rest).unwrap();
        assert_eq!(a.operation(), etherparse::ArpOperation::REPLY);
        assert_eq!(a.sender_hw_addr(), &cfg.peer_mac);
        assert_eq!(a.sender_protocol_addr(), &cfg.peer_ip.octets());
        assert_eq!(a.target_hw_addr(), &cfg.mac);
        assert_eq!(a.target_protocol_addr(), &cfg.ip.octets());
        assert_eq!(nic.stats().tx_frames, 2);
        assert_eq!(nic.sink_malformed(), 0);
    }

    #[test]
    fn an_empty_pool_drops_frames_and_counts_them() {
        let cfg = SoftnicConfig {
            size: 10,
            count: Some(200),
            ..SoftnicConfig::default()
        };
        let mut nic = Softnic::new(cfg).unwrap();
        let (_server, mut drv) = pools();
        let mut out = Vec::new();
        while !nic.done() {
            nic.rx_burst(&mut drv, &mut out, 32).unwrap();
        }
        assert_eq!(out.len(), 128, "every buffer used");
        assert_eq!(nic.stats().rx_no_buffer, 72);
    }

    /// A frame with an IPv4 header (addresses 10.0.0.1 to itself) and 8 bytes of UDP, written
    /// into a fresh buffer at `off`.
    fn frame_at(drv: &mut DriverPools, off: u16, tag: u8) -> (u32, Vec<u8>) {
        let mut f = vec![0u8; ETH + IP + UDP + 4];
        f[..6].copy_from_slice(&SoftnicConfig::default().mac);
        f[6..12].copy_from_slice(&SoftnicConfig::default().mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[ETH] = 0x45;
        f[ETH + 9] = 17;
        f[ETH + IP + UDP..].fill(tag);
        let b = drv.alloc().unwrap();
        drv.buffers().write(b, off.into(), &f).unwrap();
        drv.buffers().set_off_len(b, off, f.len() as u16).unwrap();
        (b, f)
    }

    fn loopback() -> Softnic {
        Softnic::new(SoftnicConfig {
            loopback: true,
            ..SoftnicConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn a_loopback_hands_each_transmitted_buffer_back_as_received_in_order() {
        let mut nic = loopback();
        assert!(nic.done(), "a loopback sends nothing of its own");
        let (_server, mut drv) = pools();
        let free = drv.buffers().free_count();
        let (first, f1) = frame_at(&mut drv, 30, 1);
        let (second, f2) = frame_at(&mut drv, 0, 2);
        let mut out = Vec::new();
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 0);
        assert_eq!(nic.idle_hint(), None);
        nic.tx_burst(&mut drv, &[first, second]).unwrap();
        assert_eq!(nic.idle_hint(), Some(Duration::ZERO), "it has frames");
        assert_eq!(
            nic.rx_burst(&mut drv, &mut out, 1).unwrap(),
            1,
            "at most max"
        );
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 1);
        let bufs: Vec<u32> = out.iter().map(|f| f.buf).collect();
        assert_eq!(bufs, [first, second], "the same buffers, in order: no copy");
        for (f, bytes) in out.iter().zip([&f1, &f2]) {
            assert_eq!(f.family, Family::Ipv4);
            assert_eq!(f.len as usize, bytes.len());
            let (off, len) = drv.buffers().off_len(f.buf).unwrap();
            let mut got = vec![0u8; len.into()];
            drv.buffers().read(f.buf, off.into(), &mut got).unwrap();
            assert_eq!(&got, bytes, "the frame where the stack left it");
        }
        assert_eq!(
            drv.buffers().free_count(),
            free - 2,
            "nothing freed, nothing taken"
        );
        let st = nic.stats();
        assert_eq!((st.tx_frames, st.rx_frames, st.tx_errors), (2, 2, 0));
        assert_eq!(nic.sink_udp(), 0, "a loopback sinks nothing");
    }

    #[test]
    fn a_loopback_copies_a_buffer_it_does_not_hold_alone_and_refuses_beyond_its_backlog() {
        let mut nic = loopback();
        let (_server, mut drv) = pools_of(LOOPBACK_BACKLOG as u32);
        // Another holder: the buffer cannot change hands, so its frame is copied.
        let (shared, f) = frame_at(&mut drv, 30, 3);
        drv.buffers().retain(shared).unwrap();
        nic.tx_burst(&mut drv, &[shared]).unwrap();
        assert_eq!(
            drv.buffers().refcnt(shared),
            Some(1),
            "our reference dropped"
        );
        let mut out = Vec::new();
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 1);
        assert_ne!(out[0].buf, shared);
        assert_eq!(drv.buffers().off_len(out[0].buf), Some((0, f.len() as u16)));
        let mut got = vec![0u8; f.len()];
        drv.buffers().read(out[0].buf, 0, &mut got).unwrap();
        assert_eq!(got, f);
        drv.release(out[0].buf);
        drv.release(shared);
        // A full backlog refuses (and counts) what comes next.
        let frames: Vec<u32> = (0..LOOPBACK_BACKLOG + 3)
            .map(|_| frame_at(&mut drv, 0, 4).0)
            .collect();
        nic.tx_burst(&mut drv, &frames).unwrap();
        assert_eq!(nic.stats().tx_errors, 3);
        out.clear();
        while nic.rx_burst(&mut drv, &mut out, 32).unwrap() > 0 {}
        assert_eq!(out.len(), LOOPBACK_BACKLOG);
    }

    /// A pacer that lets `allow` messages through, then says done; it records every hook.
    #[derive(Default)]
    struct Script {
        ready: bool,
        allow: u64,
        hold: bool,
        sent: Vec<u64>,
        finished: Option<u64>,
        sunk: u64,
    }

    impl Pacer for Script {
        fn ready(&mut self) -> bool {
            self.ready
        }
        fn permit(&mut self, sent: u64) -> Permit {
            match () {
                () if sent >= self.allow => Permit::Done,
                () if self.hold => Permit::Wait,
                () => Permit::Go,
            }
        }
        fn sent(&mut self, sent: u64) {
            self.sent.push(sent);
        }
        fn finished(&mut self, sent: u64) {
            self.finished = Some(sent);
        }
        fn sunk(&mut self, total: u64) {
            self.sunk = total;
        }
        fn recheck(&self) -> Option<Duration> {
            Some(Duration::from_micros(7))
        }
    }

    #[test]
    fn a_pacer_starts_holds_and_stops_the_device_and_hears_every_message() {
        let mut nic = Softnic::with_pacer(
            SoftnicConfig {
                size: 10,
                count: None,
                ..SoftnicConfig::default()
            },
            Script {
                allow: 3,
                ..Script::default()
            },
        )
        .unwrap();
        let (_server, mut drv) = pools();
        let mut out = Vec::new();
        assert_eq!(
            nic.rx_burst(&mut drv, &mut out, 32).unwrap(),
            0,
            "not ready"
        );
        assert_eq!(nic.idle_hint(), Some(Duration::from_micros(7)), "held back");
        nic.pacer.ready = true;
        nic.pacer.hold = true;
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 0, "wait");
        assert!(!nic.done());
        nic.pacer.hold = false;
        assert_eq!(nic.rx_burst(&mut drv, &mut out, 32).unwrap(), 3);
        assert!(nic.done(), "done when the pacer says, with no count");
        assert_eq!(nic.pacer().sent, [1, 2, 3]);
        assert_eq!(nic.pacer().finished, Some(3));
        assert_eq!(nic.idle_hint(), None, "done: nothing to look for");
        let (f, _) = frame_at(&mut drv, 0, 0);
        nic.tx_burst(&mut drv, &[f]).unwrap();
        assert_eq!(nic.pacer().sunk, 1, "told of the datagram sunk");
        for f in out {
            drv.release(f.buf);
        }
    }

    /// A pacer that does not send makes the device done from the start.
    #[test]
    fn a_pacer_that_does_not_send_leaves_the_device_done() {
        struct Quiet;
        impl Pacer for Quiet {
            fn sends(&self) -> bool {
                false
            }
        }
        let nic = Softnic::with_pacer(SoftnicConfig::default(), Quiet).unwrap();
        assert!(nic.done());
        let none: Option<Quiet> = None;
        assert!(
            !Softnic::with_pacer(SoftnicConfig::default(), none)
                .unwrap()
                .done()
        );
    }

    #[test]
    fn nontemporal_dma_delivers_the_same_bytes() {
        let mk = |dma| {
            let mut nic = Softnic::new(SoftnicConfig {
                size: 3000,
                count: Some(1),
                dma,
                ..SoftnicConfig::default()
            })
            .unwrap();
            let (_server, mut drv) = pools();
            let mut out = Vec::new();
            nic.rx_burst(&mut drv, &mut out, 8).unwrap();
            out.iter()
                .map(|f| {
                    let mut b = vec![0u8; f.len as usize];
                    drv.buffers().read(f.buf, 0, &mut b).unwrap();
                    b
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(mk(Dma::Cached), mk(Dma::NonTemporal));
    }
}
