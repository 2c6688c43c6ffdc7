//! The interface: configuration, the receive path tying the protocol modules together, the
//! timers, and the socket calls.

use crate::tcp::memory::PoolLevel;
use shmnet_chan::coherence::{BufferModes, CacheGeometry, Maintenance};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use smoltcp::wire::{
    ArpOperation, ArpRepr, EthernetAddress, EthernetProtocol, Icmpv4Message, IpProtocol,
};

use crate::arp::{self, NeighborCache, PendingQueue};
use crate::buf::{BufIdx, BufferPool, set_window, valid};
use crate::checksum::Sum;
use crate::frag::{self, BuildError};
use crate::icmp::{self, RateLimiter};
use crate::ipv4::{self, Datagram, EmitHeader, Ipv4Error};
use crate::reasm::{Budget, FragDrop, FragKey, Fragment, Outcome, Reassembler};
use crate::socket::{
    self, DemuxHasher, Message, RecvHook, RecvInfo, SocketHandle, UdpSocket, demux_key,
};
use crate::stats::Stats;
use crate::tcp::{Tcp, TcpConfig};
use crate::udp::{self, UdpHeader};
use crate::{Instant, eth};

mod ipv6;
mod local_udp;
mod multicast;
mod tcp;

pub(crate) use local_udp::LocalInbound;
pub use local_udp::UDP_LOCAL_HOLD;
pub(crate) use multicast::SocketMulticast;
pub use multicast::{MulticastError, MulticastOp};

/// Where transmitted frames go. Each frame is handed over as the head of a buffer chain
/// whose bytes are the whole Ethernet frame (this stack always emits single-buffer
/// chains); the sink owns it from then on (it transmits and frees it).
pub trait TxSink {
    /// Take one frame.
    fn transmit(&mut self, frame: BufIdx);
}

impl TxSink for Vec<BufIdx> {
    #[inline]
    fn transmit(&mut self, frame: BufIdx) {
        self.push(frame);
    }
}

impl<F: FnMut(BufIdx)> TxSink for F {
    #[inline]
    fn transmit(&mut self, frame: BufIdx) {
        self(frame)
    }
}

/// Configuration of an [`Interface`]. [`Config::new`] gives the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Our Ethernet address.
    pub mac: EthernetAddress,
    /// Our IPv4 address.
    pub ipv4: Ipv4Addr,
    /// Prefix length of our subnet (on-link destinations need no gateway).
    pub prefix_len: u8,
    /// Gateway for off-link destinations, if any.
    pub gateway: Option<Ipv4Addr>,
    /// Our IPv6 address and its prefix length (`None`: IPv6 frames are not ours and are
    /// counted in `unknown_ethertype`, as before the stack spoke IPv6). With an address the
    /// stack answers neighbour solicitations for it and ICMPv6 echo requests, so that a host
    /// on the link can `ping -6` it; nothing else of IPv6 (see `iface/ipv6.rs`). The prefix
    /// length is not used yet (every answer goes to the link-layer address it came from).
    pub ipv6: Option<(std::net::Ipv6Addr, u8)>,
    /// MTU: the largest IP packet per frame (1500).
    pub mtu: usize,
    /// TTL of the packets we send (64).
    pub ttl: u8,
    /// Verify UDP checksums on receive (a zero checksum field always means "none").
    pub udp_rx_checksum: bool,
    /// Compute UDP checksums on send (else the field is zero).
    pub udp_tx_checksum: bool,
    /// Messages a socket queue holds (seed 000's "receive queue size"; default 64).
    pub rx_queue_limit: usize,
    /// Datagrams the reassembly table holds (64).
    pub reasm_capacity: usize,
    /// Reassembly timeout, counted from the first fragment (30 s).
    pub reasm_timeout: Duration,
    /// Fragments one datagram may have (64).
    pub reasm_max_frags: usize,
    /// Buffers all incomplete datagrams together may hold (`None`: a quarter of the buffers
    /// of the pool passed to `receive`, raised to `reasm_max_frags` in a small pool but
    /// never above half of it). Beyond it the oldest is evicted (see the budget in
    /// [`crate::reasm`]'s documentation).
    pub reasm_max_buffers: Option<usize>,
    /// Payload bytes all incomplete datagrams together may hold (`None`: the buffer budget
    /// times the pool's buffer capacity, i.e. no tighter than the buffers).
    pub reasm_max_bytes: Option<usize>,
    /// Buffers the incomplete datagrams of one source address may hold (`None`: a quarter
    /// of the global budget, but at least `reasm_max_frags`, at most the global budget).
    pub reasm_source_max_buffers: Option<usize>,
    /// Payload bytes the incomplete datagrams of one source address may hold (`None`: a
    /// quarter of the global bytes, but at least 65,515, at most the global bytes).
    pub reasm_source_max_bytes: Option<usize>,
    /// Neighbour cache entries (256).
    pub arp_cache_capacity: usize,
    /// How long a learnt neighbour stays valid (60 s).
    pub arp_entry_ttl: Duration,
    /// Frames that may wait for ARP answers, all destinations together (64).
    pub arp_pending_limit: usize,
    /// Interval between ARP requests for the same address (1 s).
    pub arp_retry: Duration,
    /// How long a frame may wait for an ARP answer (3 s).
    pub arp_pending_timeout: Duration,
    /// ICMP error burst (10).
    pub icmp_burst: u32,
    /// One ICMP error token per this interval (100 ms).
    pub icmp_interval: Duration,
    /// The device is a loopback: it hands every transmitted frame back as received, like
    /// Linux's `lo` (off by default). Our own address is then a destination like any other,
    /// reached at our own Ethernet address without ARP (the neighbour cache is not consulted),
    /// and datagrams from it are accepted. On a real wire both stay refused: a send to
    /// ourselves is `Unaddressable`, and a datagram claiming our address as its source is
    /// spoofed (counted in `bad_address`).
    pub loopback: bool,
    /// Host-local flow control for UDP, on a loopback: how long a sender to one of our own
    /// sockets whose queue is full waits for room before what it sends is let through to
    /// overflow (20 ms; `None`: never held, datagrams overflow at once as on a wire). See
    /// [`Interface::udp_local_wait`].
    pub udp_local_hold: Option<Duration>,
    /// TCP's settings (its MSS follows `mtu` when set with [`Config::set_mtu`]).
    pub tcp: TcpConfig,
    /// How frames are kept coherent with the device by hand, per direction (seed 003's CH,
    /// CS and NC; none by default: x86's DMA snoops the caches). See
    /// [`shmnet_chan::coherence::Maintenance`] and `docs/buffers.md`.
    pub buffers: BufferModes,
    /// The caches the whole-cache and software cleans are sized to (with `buffers`).
    pub cache: CacheGeometry,
}

impl Config {
    /// A configuration with the defaults documented on each field.
    pub fn new(mac: EthernetAddress, ipv4: Ipv4Addr, prefix_len: u8) -> Config {
        Config {
            mac,
            ipv4,
            prefix_len,
            gateway: None,
            ipv6: None,
            mtu: 1500,
            ttl: 64,
            udp_rx_checksum: true,
            udp_tx_checksum: true,
            rx_queue_limit: 64,
            reasm_capacity: 64,
            reasm_timeout: Duration::from_secs(30),
            reasm_max_frags: 64,
            reasm_max_buffers: None,
            reasm_max_bytes: None,
            reasm_source_max_buffers: None,
            reasm_source_max_bytes: None,
            arp_cache_capacity: 256,
            arp_entry_ttl: Duration::from_secs(60),
            arp_pending_limit: 64,
            arp_retry: Duration::from_secs(1),
            arp_pending_timeout: Duration::from_secs(3),
            icmp_burst: 10,
            icmp_interval: Duration::from_millis(100),
            loopback: false,
            udp_local_hold: Some(UDP_LOCAL_HOLD),
            tcp: TcpConfig::default(),
            buffers: BufferModes::default(),
            cache: CacheGeometry::default(),
        }
    }

    /// Sets the MTU and the MSS TCP announces with it (the MTU less the IPv4 and TCP
    /// headers). The MSS is still capped by what one pool buffer holds when a connection
    /// starts.
    pub fn set_mtu(&mut self, mtu: usize) {
        self.mtu = mtu;
        let mss = mtu.saturating_sub(crate::ipv4::HEADER_LEN + 20);
        self.tcp.mss = mss.clamp(64, usize::from(u16::MAX)) as u16;
    }
}

/// Why `udp_bind` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// Another socket is bound to that address and port.
    #[error("address in use")]
    AddressInUse,
    /// The address is neither ours nor unspecified.
    #[error("address not available")]
    AddressNotAvailable,
    /// No ephemeral port left.
    #[error("no ephemeral port free")]
    NoPortsLeft,
}

/// Why `udp_recv` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// No such socket.
    #[error("invalid socket handle")]
    InvalidHandle,
}

/// Why `udp_send_to` failed. Nothing was sent and no buffer is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No such socket.
    #[error("invalid socket handle")]
    InvalidHandle,
    /// Destination address unspecified, multicast, or our own on a device that is not a
    /// loopback ([`Config::loopback`]), or port zero.
    #[error("destination unaddressable")]
    Unaddressable,
    /// The message does not fit in one IPv4 datagram.
    #[error("message too big for a UDP datagram")]
    TooBig,
    /// The pool ran out of buffers.
    #[error("no free buffer")]
    NoBuffers,
    /// Destination off-link and no gateway.
    #[error("no route to host")]
    NoRoute,
    /// The frames would have to wait for ARP but the pending queue is full.
    #[error("ARP pending queue full")]
    ArpQueueFull,
    /// MTU or buffer capacity too small.
    #[error("MTU or buffer capacity too small")]
    MtuTooSmall,
}

impl From<BuildError> for SendError {
    fn from(e: BuildError) -> SendError {
        match e {
            BuildError::NoBuffers => SendError::NoBuffers,
            BuildError::TooBig => SendError::TooBig,
            BuildError::MtuTooSmall => SendError::MtuTooSmall,
        }
    }
}

/// One Ethernet interface with one IPv4 address, and its UDP sockets.
#[derive(Debug)]
pub struct Interface {
    cfg: Config,
    stats: Stats,
    neighbors: NeighborCache,
    pending: PendingQueue,
    reasm: Reassembler,
    tcp: Tcp,
    sockets: Vec<Option<UdpSocket>>,
    demux: HashMap<u64, (SocketAddrV4, usize), BuildHasherDefault<DemuxHasher>>,
    icmp_limit: RateLimiter,
    next_ident: u16,
    next_ephemeral: u16,
    scratch: Vec<BufIdx>,
    /// Our subnet's broadcast address when the prefix is shorter than 31 bits, else the
    /// limited broadcast (computed once: the configuration never changes).
    subnet_bcast: Ipv4Addr,
    /// The pool's level as UDP's admission last read it ([`UdpLevel`]).
    udp_level: UdpLevel,
    /// The frames' cache maintenance when [`Config::buffers`] asks for any (its regions
    /// allocated here, once).
    maintenance: Option<Box<Maintenance>>,
    /// ICMP errors the UDP sockets keep, over all of them (invariant: the sum of their
    /// `errors` lengths).
    udp_errors_kept: usize,
    /// The IPv4 multicast groups the sockets joined, and the IGMP reports owed.
    groups: crate::igmp::Groups,
}

/// Pool buffers a socket's queue may hold while the pool is scarce (less than an eighth
/// free, `tcp::memory`): past them arriving datagrams are dropped and counted in
/// `pool_drops` (an empty queue takes one datagram whatever its size); while the pool is
/// exhausted (less than a thirty-second free) every datagram is. Sockets nobody reads then
/// cannot take the pool's last part, which ACKs, resets and everyone's datagrams need.
pub const UDP_POOL_FLOOR: usize = 16;

/// The pool's level as UDP's admission last read it. The read touches every pool's shared
/// counters, so one serves the next [`UDP_LEVEL_REUSE`] buffers admitted, or a millisecond:
/// however stale, it is wrong by that much at most.
#[derive(Clone, Copy, Debug, Default)]
struct UdpLevel {
    level: PoolLevel,
    /// Buffers it may still serve.
    left: usize,
    read_at: Instant,
}

/// Buffers one read of the pool's level serves ([`UdpLevel`]).
const UDP_LEVEL_REUSE: usize = 32;

fn subnet_broadcast(ip: Ipv4Addr, prefix_len: u8) -> Ipv4Addr {
    let mask = match prefix_len {
        0 => 0,
        p if p >= 32 => u32::MAX,
        p => u32::MAX << (32 - p),
    };
    Ipv4Addr::from(u32::from(ip) | !mask)
}

/// A seed from a MAC address (IGMP's report delays differ between hosts).
fn mac_seed(mac: EthernetAddress) -> u64 {
    mac.0.iter().fold(0u64, |a, &b| a << 8 | u64::from(b))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

const EPHEMERAL_FIRST: u16 = 49152;

impl Interface {
    /// An interface with configuration `cfg`.
    pub fn new(cfg: Config) -> Interface {
        Interface {
            stats: Stats::default(),
            neighbors: NeighborCache::new(cfg.arp_cache_capacity),
            pending: PendingQueue::new(cfg.arp_pending_limit),
            reasm: Reassembler::new(
                cfg.reasm_capacity,
                nanos(cfg.reasm_timeout),
                cfg.reasm_max_frags,
            )
            .with_budget(Budget {
                max_buffers: cfg.reasm_max_buffers,
                max_bytes: cfg.reasm_max_bytes,
                source_max_buffers: cfg.reasm_source_max_buffers,
                source_max_bytes: cfg.reasm_source_max_bytes,
            }),
            tcp: Tcp::new(cfg.tcp.clone()),
            sockets: Vec::new(),
            demux: HashMap::default(),
            icmp_limit: RateLimiter::new(cfg.icmp_burst, nanos(cfg.icmp_interval)),
            next_ident: 1,
            next_ephemeral: EPHEMERAL_FIRST,
            scratch: Vec::new(),
            subnet_bcast: if cfg.prefix_len < 31 {
                subnet_broadcast(cfg.ipv4, cfg.prefix_len)
            } else {
                Ipv4Addr::BROADCAST
            },
            udp_level: UdpLevel::default(),
            maintenance: (!cfg.buffers.is_none())
                .then(|| Box::new(Maintenance::new(cfg.buffers, cfg.cache))),
            udp_errors_kept: 0,
            groups: crate::igmp::Groups::new(mac_seed(cfg.mac)),
            cfg,
        }
    }

    /// The pool's level for admitting a datagram of `bufs` buffers ([`UdpLevel`]).
    fn udp_pool_level<P: BufferPool + ?Sized>(
        &mut self,
        pool: &P,
        bufs: usize,
        now: Instant,
    ) -> PoolLevel {
        let l = &mut self.udp_level;
        if l.left < bufs || now.nanos().saturating_sub(l.read_at.nanos()) > 1_000_000 {
            l.level = PoolLevel::of(pool);
            l.left = UDP_LEVEL_REUSE;
            l.read_at = now;
        }
        l.left = l.left.saturating_sub(bufs);
        l.level
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Datagrams in the reassembly table.
    pub fn reasm_len(&self) -> usize {
        self.reasm.len()
    }

    /// Buffers and payload bytes held by incomplete datagrams in the reassembly table.
    pub fn reasm_held(&self) -> (usize, usize) {
        self.reasm.held()
    }

    /// The evictions and early expiries the reassembler counts itself, into the stats.
    fn copy_reasm_counters(&mut self) {
        let c = self.reasm.counters();
        self.stats.reasm_table_full = c.table_full;
        self.stats.reasm_evicted_budget = c.evicted_budget;
        self.stats.reasm_evicted_source = c.evicted_source;
        self.stats.reasm_expired_pressure = c.expired_pressure;
    }

    /// Frames waiting for ARP.
    pub fn arp_pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The Ethernet address cached for `ip`, if valid at `now`.
    pub fn neighbor(&self, ip: Ipv4Addr, now: Instant) -> Option<EthernetAddress> {
        self.neighbors.lookup(ip, now)
    }

    /// Add a neighbour by hand (static entry valid for the configured entry lifetime).
    pub fn add_neighbor(&mut self, ip: Ipv4Addr, mac: EthernetAddress, now: Instant) {
        let exp = now.after(self.cfg.arp_entry_ttl);
        self.neighbors.insert(ip, mac, now, exp);
    }

    fn on_link(&self, ip: Ipv4Addr) -> bool {
        ipv4::same_subnet(ip, self.cfg.ipv4, self.cfg.prefix_len)
    }

    #[inline]
    fn is_broadcast(&self, ip: Ipv4Addr) -> bool {
        ip.is_broadcast() || ip == self.subnet_bcast
    }

    // ------------------------------------------------------------------ receive path

    /// Process one received frame: a single buffer whose valid bytes (`off`, `len`) are the
    /// Ethernet frame (without FCS). The stack owns the buffer from now on. Frames to send
    /// in answer go to `tx` — except TCP's, which wait for the next [`Interface::poll`] or
    /// [`Interface::flush`], so that a burst of segments is answered once.
    pub fn receive<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        frame: BufIdx,
        now: Instant,
        tx: &mut T,
    ) {
        self.stats.rx_frames += 1;
        if pool.next(frame).is_some() || {
            let (off, len) = pool.off_len(frame);
            off as usize + len as usize > pool.capacity()
        } {
            self.stats.bad_buffer += 1;
            pool.free_chain(frame);
            return;
        }
        if let Some(m) = &self.maintenance {
            if m.modes().recv.is_some() {
                black_box(m.after_device_writes(valid(pool, frame)));
                self.stats.maintained_rx += 1;
            }
        }
        let Some(eh) = eth::parse(valid(pool, frame)) else {
            self.stats.runt += 1;
            pool.free(frame);
            return;
        };
        if eh.dst != self.cfg.mac
            && !eh.dst.is_broadcast()
            && !self.ipv6_multicast(&eh)
            && !self.ipv4_multicast(&eh)
        {
            self.stats.not_for_us += 1;
            pool.free(frame);
            return;
        }
        match eh.ethertype {
            EthernetProtocol::Arp => self.rx_arp(pool, frame, now, tx),
            EthernetProtocol::Ipv4 => self.rx_ipv4(pool, frame, eh.src, now, tx),
            EthernetProtocol::Ipv6 => self.rx_ipv6(pool, frame, eh.src, tx),
            _ => {
                self.stats.unknown_ethertype += 1;
                pool.free(frame);
            }
        }
    }

    /// Whether a frame to a multicast Ethernet address may be ours: with an IPv6 address,
    /// an IPv6 frame to 33:33:xx:xx:xx:xx (its IPv6 destination decides, in `rx_ipv6`).
    #[inline]
    fn ipv6_multicast(&self, eh: &eth::EthHeader) -> bool {
        self.cfg.ipv6.is_some()
            && eh.ethertype == EthernetProtocol::Ipv6
            && crate::ipv6::is_multicast_mac(eh.dst)
    }

    /// Whether a frame to a multicast Ethernet address may be ours: an IPv4 frame to
    /// 01:00:5e:xx:xx:xx while a socket is in a group (its IPv4 destination decides, in
    /// `rx_ipv4`).
    #[inline]
    fn ipv4_multicast(&self, eh: &eth::EthHeader) -> bool {
        !self.groups.is_empty()
            && eh.ethertype == EthernetProtocol::Ipv4
            && eh.dst.0[..3] == [0x01, 0x00, 0x5e]
    }

    #[inline(never)]
    fn rx_arp<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        frame: BufIdx,
        now: Instant,
        tx: &mut T,
    ) {
        let bytes = &valid(pool, frame)[eth::HEADER_LEN..];
        let Some(repr) = arp::parse(bytes) else {
            self.stats.arp_bad += 1;
            pool.free(frame);
            return;
        };
        let ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr: sha,
            source_protocol_addr: spa,
            target_protocol_addr: tpa,
            ..
        } = repr
        else {
            self.stats.arp_bad += 1;
            pool.free(frame);
            return;
        };
        if !sha.is_unicast() || spa == self.cfg.ipv4 || spa.is_broadcast() || spa.is_multicast() {
            self.stats.arp_bad += 1;
            pool.free(frame);
            return;
        }
        let for_us = tpa == self.cfg.ipv4;
        if !spa.is_unspecified() && (for_us || self.neighbors.contains(spa)) {
            let exp = now.after(self.cfg.arp_entry_ttl);
            self.neighbors.insert(spa, sha, now, exp);
            self.stats.arp_learnt += 1;
            for f in self.pending.take_for(spa) {
                eth::set_dst(pool.data_mut(f), sha);
                self.stats.tx_frames += 1;
                self.maintain_tx(pool, f, usize::MAX);
                tx.transmit(f);
            }
        }
        if for_us && operation == ArpOperation::Request && pool.capacity() >= 42 {
            let reply = ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: self.cfg.mac,
                source_protocol_addr: self.cfg.ipv4,
                target_hardware_addr: sha,
                target_protocol_addr: spa,
            };
            // The request's buffer carries the reply.
            arp::write_arp(pool, frame, self.cfg.mac, sha, &reply);
            self.stats.arp_replies_sent += 1;
            self.stats.tx_frames += 1;
            self.maintain_tx(pool, frame, usize::MAX);
            tx.transmit(frame);
        } else {
            pool.free(frame);
        }
    }

    fn rx_ipv4<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        frame: BufIdx,
        src_mac: EthernetAddress,
        now: Instant,
        tx: &mut T,
    ) {
        let h = match ipv4::parse(&valid(pool, frame)[eth::HEADER_LEN..]) {
            Ok(h) => h,
            Err(e) => {
                match e {
                    Ipv4Error::Runt => self.stats.runt += 1,
                    Ipv4Error::BadVersion => self.stats.bad_version += 1,
                    Ipv4Error::BadLength => self.stats.bad_length += 1,
                    Ipv4Error::BadChecksum => self.stats.bad_checksum += 1,
                }
                pool.free(frame);
                return;
            }
        };
        if h.dst != self.cfg.ipv4
            && !self.is_broadcast(h.dst)
            && !(h.dst.is_multicast() && self.groups.contains(h.dst))
        {
            self.stats.not_for_us += 1;
            pool.free(frame);
            return;
        }
        if (h.src == self.cfg.ipv4 && !self.cfg.loopback)
            || self.is_broadcast(h.src)
            || h.src.is_multicast()
        {
            self.stats.bad_address += 1;
            pool.free(frame);
            return;
        }
        if h.ttl == 0 {
            self.stats.ttl += 1;
            pool.free(frame);
            return;
        }
        // Narrow the buffer to the IP payload; options are skipped by the header length.
        let off = pool.off(frame) as usize + eth::HEADER_LEN + h.header_len;
        set_window(pool, frame, off, h.payload_len());
        if h.is_fragment() {
            self.stats.frags_received += 1;
            self.stats.reasm_timeout += self.reasm.expire(pool, now);
            let frag = Fragment {
                key: FragKey {
                    src: h.src,
                    dst: h.dst,
                    proto: h.proto,
                    ident: h.ident,
                },
                offset: h.frag_offset,
                len: h.payload_len(),
                more: h.more_frags,
                ttl: h.ttl,
                src_mac,
                buf: frame,
            };
            match self.reasm.insert(pool, frag, now) {
                // An eviction is counted by the reassembler, copied below.
                Outcome::Held | Outcome::Evicted => {}
                Outcome::Complete(dg) => {
                    self.stats.reasm_ok += 1;
                    self.dispatch(pool, dg, now, tx);
                }
                Outcome::Dropped(why) => {
                    let c = match why {
                        FragDrop::BadFragment => &mut self.stats.bad_fragment,
                        FragDrop::Overlap => &mut self.stats.reasm_overlap,
                        FragDrop::Discarded => &mut self.stats.reasm_discarded,
                        FragDrop::Duplicate => &mut self.stats.reasm_duplicate,
                        FragDrop::Oversize => &mut self.stats.reasm_oversize,
                        FragDrop::TooManyFrags => &mut self.stats.reasm_too_many_frags,
                    };
                    *c += 1;
                }
            }
            self.copy_reasm_counters();
        } else {
            let dg = Datagram {
                head: frame,
                len: h.payload_len(),
                bufs: 1,
                src: h.src,
                dst: h.dst,
                proto: h.proto,
                ident: h.ident,
                ttl: h.ttl,
                src_mac,
            };
            self.dispatch(pool, dg, now, tx);
        }
    }

    fn dispatch<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        dg: Datagram,
        now: Instant,
        tx: &mut T,
    ) {
        match dg.proto {
            IpProtocol::Udp => self.rx_udp(pool, dg, now, tx),
            IpProtocol::Icmp => self.rx_icmp(pool, dg, now, tx),
            // TCP is between two addresses: a segment to a broadcast or group address is
            // nobody's.
            IpProtocol::Tcp if dg.dst == self.cfg.ipv4 => self.rx_tcp(pool, dg, now, tx),
            IpProtocol::Tcp => {
                self.stats.not_for_us += 1;
                pool.free_chain(dg.head);
            }
            // A query may come to our own address too (RFC 3376 §4.1.12).
            IpProtocol::Igmp if dg.dst.is_multicast() || dg.dst == self.cfg.ipv4 => {
                self.rx_igmp(pool, dg, now)
            }
            _ => {
                self.stats.unknown_protocol += 1;
                pool.free_chain(dg.head);
            }
        }
    }

    fn rx_udp<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        mut dg: Datagram,
        now: Instant,
        tx: &mut T,
    ) {
        let Some(uh) = udp::parse_header(valid(pool, dg.head)) else {
            self.stats.runt += 1;
            pool.free_chain(dg.head);
            return;
        };
        let ulen = uh.len as usize;
        if ulen < udp::HEADER_LEN || ulen > dg.len {
            self.stats.bad_length += 1;
            pool.free_chain(dg.head);
            return;
        }
        if ulen < dg.len {
            trim_chain(pool, &mut dg, ulen);
        }
        if self.cfg.udp_rx_checksum
            && uh.checksum != 0
            && !udp::verify_chain(pool, dg.head, dg.bufs, dg.src, dg.dst, ulen)
        {
            self.stats.udp_bad_checksum += 1;
            pool.free_chain(dg.head);
            return;
        }
        let Some(si) = self.udp_socket_for(dg.dst, uh.dst_port) else {
            self.stats.no_socket += 1;
            if dg.dst == self.cfg.ipv4 && uh.dst_port != 0 {
                self.port_unreachable(pool, &dg, &uh, now, tx);
            }
            pool.free_chain(dg.head);
            return;
        };
        // Narrow the first buffer past the UDP header.
        let (head_off, head_len) = pool.off_len(dg.head);
        let off = head_off as usize + udp::HEADER_LEN;
        let first_len = head_len as usize - udp::HEADER_LEN;
        set_window(pool, dg.head, off, first_len);
        let msg = Message {
            head: dg.head,
            len: ulen - udp::HEADER_LEN,
            bufs: dg.bufs,
            src: SocketAddrV4::new(dg.src, uh.src_port),
        };
        let level = self.udp_pool_level(pool, dg.bufs, now);
        let Some(s) = self.sockets.get_mut(si).and_then(Option::as_mut) else {
            self.stats.no_socket += 1;
            pool.free_chain(dg.head);
            return;
        };
        if dg.src == self.cfg.ipv4 {
            // Ours, through the loopback (only a loopback accepts our own source): it has
            // arrived, queued or not.
            s.from_host.arrived(now);
        }
        let refused = match level {
            PoolLevel::Exhausted | PoolLevel::Reserved => true,
            PoolLevel::Scarce => s.queued_bufs > 0 && s.queued_bufs + dg.bufs > UDP_POOL_FLOOR,
            _ => false,
        };
        if refused {
            self.stats.pool_drops += 1;
            pool.free_chain(dg.head);
            return;
        }
        match s.push(msg) {
            Ok(()) => self.stats.udp_delivered += 1,
            Err(m) => {
                self.stats.queue_full += 1;
                pool.free_chain(m.head);
            }
        }
    }

    fn port_unreachable<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        dg: &Datagram,
        uh: &UdpHeader,
        now: Instant,
        tx: &mut T,
    ) {
        if !self.icmp_limit.allow(now) {
            self.stats.icmp_rate_limited += 1;
            return;
        }
        // Quote the offending datagram's header (rebuilt without options) and the first
        // eight bytes of its payload (the UDP header).
        let mut quoted = [0u8; ipv4::HEADER_LEN + udp::HEADER_LEN];
        let orig = EmitHeader {
            src: dg.src,
            dst: dg.dst,
            proto: IpProtocol::Udp,
            ttl: dg.ttl,
            ident: dg.ident,
            dont_frag: false,
        };
        ipv4::write_header(&mut quoted, &orig, dg.len, 0, false);
        udp::write_header(&mut quoted[ipv4::HEADER_LEN..], uh);
        let msg = icmp::port_unreachable(&quoted);
        let hdr = self.emit_header(dg.src, IpProtocol::Icmp);
        if self
            .send_ip(pool, &hdr, &msg, &[], None, Some(dg.src_mac), now, tx)
            .is_ok()
        {
            self.stats.icmp_unreach_sent += 1;
        }
    }

    fn rx_icmp<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        dg: Datagram,
        now: Instant,
        tx: &mut T,
    ) {
        let Some(ih) = icmp::parse_header(valid(pool, dg.head)) else {
            self.stats.runt += 1;
            pool.free_chain(dg.head);
            return;
        };
        if udp::chain_sum(pool, dg.head, dg.len, dg.bufs).value() != 0xffff {
            self.stats.icmp_bad_checksum += 1;
            pool.free_chain(dg.head);
            return;
        }
        if ih.msg_type == Icmpv4Message::DstUnreachable && dg.dst == self.cfg.ipv4 {
            self.rx_dst_unreachable(pool, dg, now, tx);
            return;
        }
        if ih.msg_type != Icmpv4Message::EchoRequest || ih.code != 0 || dg.dst != self.cfg.ipv4 {
            self.stats.icmp_ignored += 1;
            pool.free_chain(dg.head);
            return;
        }
        let mut data = crate::buf::chain_to_vec(pool, dg.head);
        data.truncate(dg.len);
        pool.free_chain(dg.head);
        let reply = icmp::echo_reply(ih.ident, ih.seq_no, &data[icmp::HEADER_LEN..]);
        let hdr = self.emit_header(dg.src, IpProtocol::Icmp);
        if self
            .send_ip(pool, &hdr, &reply, &[], None, Some(dg.src_mac), now, tx)
            .is_ok()
        {
            self.stats.icmp_echo_replies += 1;
        }
    }

    /// A destination-unreachable message (checksum verified, addressed to us). A router's
    /// "fragmentation needed" about one of our TCP segments lowers its connection's MSS
    /// ([`crate::tcp::conn::Conn::on_frag_needed`] checks it) and resends what was in
    /// flight at once. Any other about a connection's SYN while it opens ends it with the
    /// matching error ([`crate::tcp::conn::Conn::on_unreachable`]): a `connect` to a host
    /// behind a firewall's `REJECT`, or that a router cannot reach, fails at once instead
    /// of after its SYN retries. Every other one is ignored and counted (a UDP socket has
    /// no error queue, and TCP does not abort on hard errors during a connection, RFC 1122
    /// 4.2.3.9).
    fn rx_dst_unreachable<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        dg: Datagram,
        now: Instant,
        tx: &mut T,
    ) {
        // The header and the quote (a 60-byte IP header at most and 8 bytes of TCP): the
        // first buffer holds them whenever the message has them.
        let head = valid(pool, dg.head);
        let msg = &head[..head.len().min(dg.len).min(icmp::HEADER_LEN + 68)];
        let said = icmp::frag_needed(msg);
        let unreachable = icmp::tcp_unreachable(msg);
        let udp = icmp::udp_unreachable(msg);
        pool.free_chain(dg.head);
        if let Some(u) = unreachable {
            self.tcp_unreachable(pool, u, now, tx);
            return;
        }
        if let Some(u) = udp {
            self.udp_unreachable(u);
            return;
        }
        let Some(f) = said else {
            self.stats.icmp_ignored += 1;
            return;
        };
        if !self.tcp.cfg.pmtu_discovery {
            self.stats.icmp_ignored += 1;
            return;
        }
        let remote = std::net::SocketAddrV4::new(f.dst, f.dst_port);
        let idx = (f.src == self.cfg.ipv4)
            .then(|| self.tcp.lookup(remote, f.src_port))
            .flatten();
        let lowered = idx.and_then(|idx| {
            let (c, _, ctr) = self.tcp.parts(idx)?;
            Some((
                idx,
                c.on_frag_needed(f.mtu, crate::tcp::seq::Seq(f.seq), ctr),
            ))
        });
        match lowered {
            Some((idx, true)) => {
                // Connections to the same place start within it (for ten minutes).
                self.tcp.paths.learn(f.dst, f.mtu, now);
                self.tcp_after(pool, idx, now, tx);
            }
            Some((_, false)) => {}
            None => self.tcp.counters.frag_needed_ignored += 1,
        }
    }

    /// Destination-unreachable message `u` (a hard error) about a UDP datagram: kept for
    /// the socket bound to its source port, if one is and the datagram was from our
    /// address; counted ignored otherwise. Which socket of the application hears it (a
    /// connected one, as Linux's) is the application's business.
    fn udp_unreachable(&mut self, u: icmp::UdpUnreachable) {
        let si = (u.src == self.cfg.ipv4)
            .then(|| self.udp_socket_for(u.src, u.src_port))
            .flatten();
        let Some(s) = si
            .and_then(|si| self.sockets.get_mut(si))
            .and_then(Option::as_mut)
            .filter(|s| s.keeps_errors)
        else {
            self.stats.icmp_ignored += 1;
            return;
        };
        if s.errors.len() >= crate::socket::UDP_ERRORS_KEPT {
            s.errors.pop_front();
            self.udp_errors_kept -= 1;
            self.stats.udp_icmp_errors_dropped += 1;
        }
        s.errors.push_back(crate::socket::UdpError {
            what: u.what,
            to: std::net::SocketAddrV4::new(u.dst, u.dst_port),
        });
        self.udp_errors_kept += 1;
        self.stats.udp_icmp_errors += 1;
    }

    /// Destination-unreachable message `u` about a TCP segment (see
    /// [`Interface::rx_dst_unreachable`]), or a SYN whose next hop never answered ARP
    /// ([`unresolved_syn`]).
    fn tcp_unreachable<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        u: icmp::TcpUnreachable,
        now: Instant,
        tx: &mut T,
    ) {
        let remote = SocketAddrV4::new(u.dst, u.dst_port);
        let found = (u.src == self.cfg.ipv4)
            .then(|| self.tcp.lookup(remote, u.src_port))
            .flatten();
        let Some(idx) = found else {
            self.tcp.counters.unreachable_ignored += 1;
            return;
        };
        let ended = self.tcp.parts(idx).is_some_and(|(c, _, ctr)| {
            c.on_unreachable(pool, u.what, crate::tcp::seq::Seq(u.seq), ctr)
        });
        if ended {
            self.tcp_after(pool, idx, now, tx);
        }
    }

    // ------------------------------------------------------------------ timers

    /// Run the timers at `now`: abandon reassemblies past their deadline, drop frames that
    /// waited too long for ARP, repeat ARP requests, expire neighbour entries; and TCP's:
    /// first what the segments received since the last call answer (see
    /// [`Interface::flush`]), then its retransmission, delayed-ACK, persist and TIME-WAIT
    /// timers. Call it after every burst of [`Interface::receive`].
    pub fn poll<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        now: Instant,
        tx: &mut T,
    ) {
        self.stats.reasm_timeout += self.reasm.expire(pool, now);
        self.copy_reasm_counters();
        let (dead, again) = self.pending.expire(
            now,
            nanos(self.cfg.arp_pending_timeout),
            nanos(self.cfg.arp_retry),
        );
        for f in dead {
            self.stats.arp_timeout += 1;
            let syn = unresolved_syn(valid(pool, f));
            pool.free(f);
            if let Some(u) = syn {
                self.tcp_unreachable(pool, u, now, tx);
            }
        }
        for ip in again {
            self.send_arp_request(pool, ip, tx);
        }
        self.neighbors.expire(now);
        self.send_igmp_due(pool, now, tx);
        self.tcp_poll(pool, now, tx);
    }

    /// When [`poll`](Self::poll) next has work (a reassembly deadline or an ARP wait), if
    /// anything is pending.
    pub fn poll_at(&self) -> Option<Instant> {
        let reasm = self.reasm.next_deadline();
        let arp = self.pending.next_deadline(
            nanos(self.cfg.arp_pending_timeout),
            nanos(self.cfg.arp_retry),
        );
        [reasm, arp, self.tcp.poll_at(), self.groups.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Free every buffer the interface holds (reassembly, ARP queue, socket queues) and
    /// close every socket.
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        self.reasm.clear(pool);
        self.tcp.clear(pool);
        for f in self.pending.drain() {
            pool.free(f);
        }
        for s in self.sockets.iter_mut().filter_map(Option::take) {
            for m in s.queue {
                pool.free_chain(m.head);
            }
        }
        self.demux.clear();
        self.groups = crate::igmp::Groups::new(mac_seed(self.cfg.mac));
    }

    // ------------------------------------------------------------------ send path

    fn emit_header(&mut self, dst: Ipv4Addr, proto: IpProtocol) -> EmitHeader {
        let ident = self.next_ident;
        self.next_ident = self.next_ident.wrapping_add(1);
        EmitHeader {
            src: self.cfg.ipv4,
            dst,
            proto,
            ttl: self.cfg.ttl,
            ident,
            dont_frag: false,
        }
    }

    fn send_arp_request<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        target: Ipv4Addr,
        tx: &mut T,
    ) {
        if pool.capacity() < eth::HEADER_LEN + arp::ARP_LEN {
            self.stats.no_buffers += 1;
            return;
        }
        let Some(b) = pool.alloc() else {
            self.stats.no_buffers += 1;
            return;
        };
        let repr = arp::request_repr(self.cfg.mac, self.cfg.ipv4, target);
        arp::write_arp(pool, b, self.cfg.mac, EthernetAddress::BROADCAST, &repr);
        self.stats.arp_requests_sent += 1;
        self.stats.tx_frames += 1;
        self.maintain_tx(pool, b, usize::MAX);
        tx.transmit(b);
    }

    /// Build and send (or queue for ARP) one IP datagram carrying `prefix` then `parts`.
    /// With `udp_pseudo` (the pseudo-header sum), `prefix` is a UDP header whose checksum
    /// field is zero, and the checksum is computed over the bytes as copied into the frames
    /// and written into the first one.
    #[allow(clippy::too_many_arguments)]
    fn send_ip<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        hdr: &EmitHeader,
        prefix: &[u8],
        parts: &[&[u8]],
        udp_pseudo: Option<u16>,
        dst_mac: Option<EthernetAddress>,
        now: Instant,
        tx: &mut T,
    ) -> Result<(), SendError> {
        let (mac, next_hop) = self.route(hdr.dst, dst_mac, now)?;
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        let mut sum = Sum::default();
        let built = frag::build_gather(
            pool,
            self.cfg.mac,
            mac.unwrap_or(EthernetAddress([0; 6])),
            hdr,
            prefix,
            parts,
            self.cfg.mtu,
            &mut frames,
            udp_pseudo.is_some().then_some(&mut sum),
        );
        if let (Ok(_), Some(pseudo), Some(&first)) = (&built, udp_pseudo, frames.first()) {
            // The UDP header is whole in the first frame (every fragment but the last
            // carries a multiple of 8 bytes, and the header is 8).
            let at = eth::HEADER_LEN + ipv4::HEADER_LEN + udp::CHECKSUM_OFFSET;
            let c = udp::finish_tx_checksum(sum, pseudo).to_be_bytes();
            pool.data_mut(first)[at..at + 2].copy_from_slice(&c);
        }
        let res = match built {
            Err(e) => {
                if e == BuildError::NoBuffers {
                    self.stats.no_buffers += 1;
                }
                Err(e.into())
            }
            Ok(n) => {
                if n > 1 {
                    self.stats.frags_sent += n as u64;
                }
                self.emit_frames(pool, &frames, mac, next_hop, now, tx, usize::MAX)
            }
        };
        frames.clear();
        self.scratch = frames;
        res
    }

    /// Where a datagram to `dst` goes: the next hop's Ethernet address when known (`None`:
    /// ARP must resolve `hop` first) and the hop.
    fn route(
        &mut self,
        dst: Ipv4Addr,
        dst_mac: Option<EthernetAddress>,
        now: Instant,
    ) -> Result<(Option<EthernetAddress>, Ipv4Addr), SendError> {
        Ok(match dst_mac {
            Some(m) => (Some(m), dst),
            None if self.cfg.loopback && dst == self.cfg.ipv4 => (Some(self.cfg.mac), dst),
            None if self.is_broadcast(dst) => (Some(EthernetAddress::BROADCAST), dst),
            None if dst.is_multicast() => (Some(crate::igmp::group_mac(dst)), dst),
            None => {
                let hop = if self.on_link(dst) {
                    dst
                } else if let Some(gw) = self.cfg.gateway {
                    gw
                } else {
                    self.stats.no_route += 1;
                    return Err(SendError::NoRoute);
                };
                (self.neighbors.lookup(hop, now), hop)
            }
        })
    }

    /// Hand built `frames` (their Ethernet destination already `mac` when it is known) to
    /// The send side's cache maintenance of `frame` ([`Config::buffers`]) just before it goes
    /// to the device: every buffer of its chain, the first one's first `cached_prefix` bytes
    /// written with ordinary stores (the rest non-temporally under NC: TCP's payload), the
    /// others' wholly. Every frame the stack transmits passes here.
    fn maintain_tx<P: BufferPool + ?Sized>(
        &mut self,
        pool: &P,
        frame: BufIdx,
        cached_prefix: usize,
    ) {
        let Some(m) = self
            .maintenance
            .as_ref()
            .filter(|m| m.modes().send.is_some())
        else {
            return;
        };
        let mut prefix = cached_prefix;
        let mut cur = Some(frame);
        // Bounded like every chain walk: a frame has at most a pool's buffers.
        for _ in 0..pool.total() {
            let Some(b) = cur else { break };
            black_box(m.before_device_reads(valid(pool, b), prefix));
            self.stats.maintained_tx += 1;
            prefix = usize::MAX;
            cur = pool.next(b);
        }
    }

    /// `tx`, or queue them until ARP resolves `next_hop`.
    ///
    /// A frame sent now gets the send side's cache maintenance ([`Interface::maintain_tx`]),
    /// its first `cached_prefix` bytes written with ordinary stores; a queued one gets it
    /// (wholly) when ARP releases it, after its destination address is written.
    #[allow(clippy::too_many_arguments)]
    fn emit_frames<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        frames: &[BufIdx],
        mac: Option<EthernetAddress>,
        next_hop: Ipv4Addr,
        now: Instant,
        tx: &mut T,
        cached_prefix: usize,
    ) -> Result<(), SendError> {
        let n = frames.len();
        if mac.is_some() {
            self.stats.tx_frames += n as u64;
            for &f in frames {
                self.maintain_tx(pool, f, cached_prefix);
                tx.transmit(f);
            }
            Ok(())
        } else if self.pending.room() < n {
            self.stats.arp_queue_full += n as u64;
            for &f in frames {
                pool.free(f);
            }
            Err(SendError::ArpQueueFull)
        } else {
            for &f in frames {
                // Cannot fail: room was checked.
                if let Err(f) = self.pending.push(next_hop, f, now) {
                    pool.free(f);
                }
            }
            if self
                .pending
                .should_request(next_hop, now, nanos(self.cfg.arp_retry))
            {
                self.send_arp_request(pool, next_hop, tx);
            }
            Ok(())
        }
    }

    // ------------------------------------------------------------------ sockets

    /// Bind a UDP socket to `local` (our address or unspecified; port 0 picks an ephemeral
    /// port).
    pub fn udp_bind(&mut self, local: SocketAddrV4) -> Result<SocketHandle, BindError> {
        if !local.ip().is_unspecified() && *local.ip() != self.cfg.ipv4 {
            return Err(BindError::AddressNotAvailable);
        }
        let mut local = local;
        if local.port() == 0 {
            let span = (u16::MAX - EPHEMERAL_FIRST) as u32 + 1;
            let mut found = None;
            for _ in 0..span {
                let p = self.next_ephemeral;
                self.next_ephemeral = if p == u16::MAX {
                    EPHEMERAL_FIRST
                } else {
                    p + 1
                };
                if !self.port_in_use(p) {
                    found = Some(p);
                    break;
                }
            }
            local.set_port(found.ok_or(BindError::NoPortsLeft)?);
        } else if self
            .demux
            .contains_key(&demux_key(*local.ip(), local.port()))
            || (local.ip().is_unspecified() && self.port_in_use(local.port()))
            || self
                .demux
                .contains_key(&demux_key(Ipv4Addr::UNSPECIFIED, local.port()))
        {
            return Err(BindError::AddressInUse);
        }
        let sock = UdpSocket::new(local, self.cfg.rx_queue_limit);
        let i = match self.sockets.iter().position(Option::is_none) {
            Some(i) => {
                self.sockets[i] = Some(sock);
                i
            }
            None => {
                self.sockets.push(Some(sock));
                self.sockets.len() - 1
            }
        };
        self.demux
            .insert(demux_key(*local.ip(), local.port()), (local, i));
        Ok(SocketHandle(i))
    }

    fn port_in_use(&self, port: u16) -> bool {
        self.demux.values().any(|(a, _)| a.port() == port)
    }

    /// Bind to `port` on every address of the interface.
    pub fn udp_bind_port(&mut self, port: u16) -> Result<SocketHandle, BindError> {
        self.udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
    }

    /// The local address a socket is bound to.
    pub fn udp_local_addr(&self, h: SocketHandle) -> Result<SocketAddrV4, RecvError> {
        Ok(self.socket(h)?.local)
    }

    /// Close a socket, freeing the messages on its queue.
    pub fn udp_close<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        h: SocketHandle,
    ) -> Result<(), RecvError> {
        let s = self
            .sockets
            .get_mut(h.0)
            .and_then(Option::take)
            .ok_or(RecvError::InvalidHandle)?;
        self.demux.remove(&demux_key(*s.local.ip(), s.local.port()));
        self.udp_errors_kept -= s.errors.len();
        // Its groups' leaves are due at once: at the next `poll`, whatever its time.
        self.leave_all(&s.multicast.groups, Instant::ZERO);
        for m in s.queue {
            pool.free_chain(m.head);
        }
        Ok(())
    }

    /// The index of the UDP socket a datagram to `addr:port` is delivered to: one bound to
    /// that address, else one bound to any address.
    fn udp_socket_for(&self, addr: Ipv4Addr, port: u16) -> Option<usize> {
        self.demux
            .get(&demux_key(addr, port))
            .or_else(|| self.demux.get(&demux_key(Ipv4Addr::UNSPECIFIED, port)))
            .map(|&(_, i)| i)
    }

    fn socket(&self, h: SocketHandle) -> Result<&UdpSocket, RecvError> {
        self.sockets
            .get(h.0)
            .and_then(Option::as_ref)
            .ok_or(RecvError::InvalidHandle)
    }

    /// Messages waiting on a socket.
    pub fn udp_queue_len(&self, h: SocketHandle) -> Result<usize, RecvError> {
        Ok(self.socket(h)?.queue.len())
    }

    /// Bytes of the messages waiting on a socket.
    pub fn udp_queued_bytes(&self, h: SocketHandle) -> Result<usize, RecvError> {
        Ok(self.socket(h)?.queue.iter().map(|m| m.len).sum())
    }

    /// Messages a socket refused because its queue was full.
    pub fn udp_overflows(&self, h: SocketHandle) -> Result<u64, RecvError> {
        Ok(self.socket(h)?.overflows)
    }

    /// The message at the head of a socket's queue, without taking it (its chain stays owned
    /// by the socket).
    pub fn udp_peek(&self, h: SocketHandle) -> Result<Option<Message>, RecvError> {
        Ok(self.socket(h)?.queue.front().copied())
    }

    /// Take the next message off a socket's queue and copy it into `dst` buffer by buffer,
    /// calling `hook` around each buffer's copy; its buffers go back to the pool. `Ok(None)`
    /// when the queue is empty.
    pub fn udp_recv<P: BufferPool + ?Sized, H: RecvHook + ?Sized>(
        &mut self,
        pool: &mut P,
        h: SocketHandle,
        dst: &mut [u8],
        hook: &mut H,
    ) -> Result<Option<RecvInfo>, RecvError> {
        let Some(msg) = self.udp_recv_chain(h)? else {
            return Ok(None);
        };
        let len = socket::copy_out(pool, &msg, dst, hook);
        self.stats.udp_read += 1;
        Ok(Some(RecvInfo {
            len,
            msg_len: msg.len,
            src: msg.src,
        }))
    }

    /// Keeps the ICMP errors about UDP socket `h`'s datagrams for its owner to take
    /// ([`Interface::udp_take_error`]); without this they are counted ignored, so a
    /// socket nobody asks about never holds one.
    pub fn udp_keep_errors(&mut self, h: SocketHandle) -> Result<(), RecvError> {
        self.sockets
            .get_mut(h.0)
            .and_then(Option::as_mut)
            .ok_or(RecvError::InvalidHandle)?
            .keeps_errors = true;
        Ok(())
    }

    /// The oldest ICMP error kept for UDP socket `h` ([`crate::socket::UdpError`]), without
    /// taking it.
    pub fn udp_peek_error(
        &self,
        h: SocketHandle,
    ) -> Result<Option<crate::socket::UdpError>, RecvError> {
        Ok(self.socket(h)?.errors.front().copied())
    }

    /// Takes the oldest ICMP error kept for UDP socket `h`.
    pub fn udp_take_error(
        &mut self,
        h: SocketHandle,
    ) -> Result<Option<crate::socket::UdpError>, RecvError> {
        let s = self
            .sockets
            .get_mut(h.0)
            .and_then(Option::as_mut)
            .ok_or(RecvError::InvalidHandle)?;
        let e = s.errors.pop_front();
        if e.is_some() {
            self.udp_errors_kept -= 1;
        }
        Ok(e)
    }

    /// Whether any UDP socket keeps an ICMP error (one load: callers skip looking at every
    /// socket when none does).
    pub fn udp_errors_waiting(&self) -> bool {
        self.udp_errors_kept > 0
    }

    /// Take the next message off a socket's queue without copying: the caller owns its
    /// chain and must free it (`pool.free_chain(msg.head)`).
    pub fn udp_recv_chain(&mut self, h: SocketHandle) -> Result<Option<Message>, RecvError> {
        let s = self
            .sockets
            .get_mut(h.0)
            .and_then(Option::as_mut)
            .ok_or(RecvError::InvalidHandle)?;
        Ok(s.pop())
    }

    /// Send `data` from socket `h` to `dst`: copy it into pool buffers, fragmenting to the
    /// MTU, and hand the frames to `tx` — or queue them until ARP resolves the next hop.
    /// [`Interface::udp_send_gather`] with one slice.
    pub fn udp_send_to<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: SocketHandle,
        data: &[u8],
        dst: SocketAddrV4,
        now: Instant,
        tx: &mut T,
    ) -> Result<(), SendError> {
        self.udp_send_gather(pool, h, &[data], dst, now, tx)
    }

    /// Send one datagram whose payload is the concatenation of `parts`, taken where they lie
    /// (e.g. the segments of a chain in an application's window): each byte is copied once,
    /// into the frames' pool buffers, fragmenting to the MTU, and the frames go to `tx` — or
    /// are queued until ARP resolves the next hop.
    ///
    /// The UDP checksum (when [`Config::udp_tx_checksum`] is on) is computed over the bytes
    /// as copied into the frames, so the datagram sent is always self-consistent: an
    /// application that rewrites its bytes during the send can corrupt only what it sends.
    pub fn udp_send_gather<P: BufferPool + ?Sized, T: TxSink + ?Sized>(
        &mut self,
        pool: &mut P,
        h: SocketHandle,
        parts: &[&[u8]],
        dst: SocketAddrV4,
        now: Instant,
        tx: &mut T,
    ) -> Result<(), SendError> {
        let src_port = self
            .socket(h)
            .map_err(|_| SendError::InvalidHandle)?
            .local
            .port();
        if dst.ip().is_unspecified()
            || dst.port() == 0
            || (*dst.ip() == self.cfg.ipv4 && !self.cfg.loopback)
        {
            return Err(SendError::Unaddressable);
        }
        let ulen = parts
            .iter()
            .try_fold(udp::HEADER_LEN, |t, p| t.checked_add(p.len()))
            .filter(|&l| l <= ipv4::MAX_DATAGRAM - ipv4::HEADER_LEN)
            .ok_or(SendError::TooBig)?;
        let uh = UdpHeader {
            src_port,
            dst_port: dst.port(),
            len: ulen as u16,
            checksum: 0,
        };
        let mut hbytes = [0u8; udp::HEADER_LEN];
        udp::write_header(&mut hbytes, &uh);
        let pseudo = self
            .cfg
            .udp_tx_checksum
            .then(|| udp::pseudo(self.cfg.ipv4, *dst.ip(), ulen));
        let mut hdr = self.emit_header(*dst.ip(), IpProtocol::Udp);
        let (mut looped, mut wire) = (false, true);
        if dst.ip().is_multicast() {
            let (ttl, on) = self.multicast_of(h);
            hdr.ttl = ttl;
            looped = on && !self.cfg.loopback && self.groups.contains(*dst.ip());
            // TTL 0: this host's sockets only, as on Linux.
            wire = ttl > 0;
        }
        if wire {
            self.send_ip(pool, &hdr, &hbytes, parts, pseudo, None, now, tx)?;
        }
        self.stats.udp_sent += 1;
        if looped {
            self.loop_multicast(pool, parts, src_port, dst, now);
        }
        self.note_local_send(dst, now);
        Ok(())
    }
}

/// Cut the chain of `dg` to its first `len` bytes, freeing the buffers beyond.
fn trim_chain<P: BufferPool + ?Sized>(pool: &mut P, dg: &mut Datagram, len: usize) {
    let mut left = len;
    let mut cur = dg.head;
    let mut n = 1;
    loop {
        let l = pool.len(cur) as usize;
        if l >= left || n >= dg.bufs {
            pool.set_len(cur, left.min(l) as u16);
            if let Some(rest) = pool.next(cur) {
                pool.set_next(cur, None);
                pool.free_chain(rest);
            }
            break;
        }
        left -= l;
        match pool.next(cur) {
            Some(nx) => {
                cur = nx;
                n += 1;
            }
            None => break,
        }
    }
    dg.len = len;
    dg.bufs = n;
}

/// A TCP SYN (not a SYN-ACK) of ours in `frame`, dropped because its next hop never
/// answered ARP, read as the "host unreachable" Linux reports to itself then
/// (`arp_error_report`): a `connect` to an address nobody holds fails with `EHOSTUNREACH`
/// when ARP gives up ([`Config::arp_pending_timeout`], 3 s as Linux's three probes), not
/// after the SYN's retries. `None` for any other frame.
fn unresolved_syn(frame: &[u8]) -> Option<icmp::TcpUnreachable> {
    if eth::ethertype(frame)? != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = frame.get(eth::HEADER_LEN..)?;
    let h = ipv4::parse_unverified(ip).ok()?;
    if h.proto != IpProtocol::Tcp || h.is_fragment() {
        return None;
    }
    let tcp = ip.get(h.header_len..h.total_len)?.get(..14)?;
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    if tcp[13] & (SYN | ACK) != SYN {
        return None;
    }
    Some(icmp::TcpUnreachable {
        what: icmp::Unreachable::Host,
        src: h.src,
        dst: h.dst,
        src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
    })
}
