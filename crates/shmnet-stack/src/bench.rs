//! The stack benchmark behind `shmnet bench stack [--quick] [--json]`: receive and send
//! paths for 10 B, 1 KB, 8 KB and 14,792 B UDP messages, checksum off and on, beside a plain
//! `memcpy` (`copy_from_slice`) of the same bytes measured in the same run.
//!
//! This is a benchmark, not a test: it asserts nothing about speed.
//!
//! # What is timed
//!
//! * **rx**: every frame of a batch of messages is handed to [`Interface::receive`]
//!   (Ethernet and IPv4 parse and checks, reassembly, UDP checksum when on, demultiplexing,
//!   queueing: timed as `stack_ns`), then [`Interface::udp_recv`] copies each message out
//!   into a user buffer, buffer by buffer, and frees its chain (timed as `copy_ns`);
//!   `ns_per_msg` covers both. Frames are prebuilt once; the driver's copy of each frame into
//!   its pool buffer happens *before* the timed region, for the whole batch (so, as in
//!   seed 000, the data is in the cache when the stack starts).
//! * **tx**: [`Interface::udp_send_to`] — UDP checksum when on, copying the user's bytes into
//!   pool buffers, fragmenting, writing Ethernet and IPv4 headers, handing the frames to the
//!   sink (a `Vec`). Freeing the transmitted buffers (the driver's job) is outside the timed
//!   region.
//! * **memcpy**: `copy_from_slice` of `size` bytes from one of a batch of distinct,
//!   contiguous, 64-byte-aligned source buffers, written just before the timed region like
//!   the rx frames, into the same (64-byte-aligned) user buffer — the best case for
//!   `memcpy`, so the floor is a strict one. (Left to the allocator's placement, the floor
//!   moved by up to 4x on the development machine, an AMD EPYC VM.)
//!
//! Each figure is the median over several batches of the batch time divided by the number
//! of messages in the batch, timed with `std::time::Instant`.
//!
//! Every message is checked, outside the timed regions: each row says how many messages it
//! put through its path (`messages`) and how many went all the way (`completed`: received
//! whole, or sent without error as the expected frames). A row where they differ timed
//! something other than the path it names; its figures are NaN and `shmnet bench stack`
//! fails.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant as WallClock;

use crate::buf::{BufIdx, BufferPool, HeapPool, chain_to_vec, set_window};
use crate::iface::{Config, Interface};
use crate::socket::{NoHook, SocketHandle};
use crate::{EthernetAddress, Instant};

/// The message sizes measured.
pub const SIZES: [usize; 4] = [10, 1024, 8192, 14_792];

/// One measured configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRow {
    /// UDP payload bytes per message.
    pub size: usize,
    /// UDP checksum generated and verified.
    pub checksum: bool,
    /// Frames per message (fragments).
    pub frames: usize,
    /// Messages put through the path, the untimed warm-up batch included.
    pub messages: usize,
    /// Of those, the ones that went all the way: rx, received whole by the socket; tx, sent
    /// without an error as `frames` frames. Less than `messages` makes the figures NaN.
    pub completed: usize,
    /// Median nanoseconds per message.
    pub ns_per_msg: f64,
    /// `ns_per_msg / size`.
    pub ns_per_byte: f64,
    /// Median nanoseconds per `copy_from_slice` of `size` bytes, same run.
    pub memcpy_ns: f64,
    /// `ns_per_msg / memcpy_ns`.
    pub ratio: f64,
    /// rx only: the part of `ns_per_msg` spent in `receive` (parse, reassembly, demux,
    /// queue); `None` for tx.
    pub stack_ns: Option<f64>,
    /// rx only: the part spent in `udp_recv` (copy-out and free); `None` for tx.
    pub copy_ns: Option<f64>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq)]
pub struct StackBenchReport {
    /// Receive path rows.
    pub rx: Vec<BenchRow>,
    /// Send path rows.
    pub tx: Vec<BenchRow>,
    /// Batches per figure (the median is over these).
    pub batches: usize,
    /// What the rx timed region covers.
    pub rx_timed_region: &'static str,
    /// What the tx timed region covers.
    pub tx_timed_region: &'static str,
}

const RX_REGION: &str = "receive() of every frame (parse, checks, reassembly, demux, queue) + udp_recv() copy-out and free; driver copy into pool buffers excluded";
const TX_REGION: &str = "udp_send_to(): checksum, copy into pool buffers, fragmentation, headers, hand-off to the sink; driver free excluded";

const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PORT: u16 = 5001;

fn config(mac: EthernetAddress, ip: Ipv4Addr, checksum: bool) -> Config {
    let mut c = Config::new(mac, ip, 24);
    c.udp_rx_checksum = checksum;
    c.udp_tx_checksum = checksum;
    c.rx_queue_limit = 1;
    c
}

/// The benchmark's receiving interface, holding up to `queue_limit` messages on the socket it
/// binds for [`rx_frames`]' messages.
pub fn receiver(checksum: bool, queue_limit: usize) -> (Interface, SocketHandle) {
    let mut cfg = config(OUR_MAC, OUR_IP, checksum);
    cfg.rx_queue_limit = queue_limit;
    let mut ifc = Interface::new(cfg);
    let sock = ifc
        .udp_bind_port(PORT)
        .expect("a fresh interface has every port free");
    (ifc, sock)
}

/// Messages per batch: enough to dwarf the two clock reads, few enough that a batch's frames
/// (one 2 KB buffer each) stay around 100 KB and so in the L2 cache, as when each message is
/// processed soon after it arrived (seed 000's unsaturated case).
pub fn batch_len(size: usize) -> usize {
    match size {
        0..=2000 => 64,
        2001..=9000 => 8,
        _ => 4,
    }
}

/// The median of `v` (NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The frames of one `size`-byte message from the peer to [`receiver`]'s socket, built by a
/// second interface's send path. (Also the workload of `examples/rx_profile`.)
pub fn rx_frames(size: usize, checksum: bool) -> Vec<Vec<u8>> {
    let mut peer = Interface::new(config(PEER_MAC, PEER_IP, checksum));
    let mut pool = HeapPool::with_count(64);
    peer.add_neighbor(OUR_IP, OUR_MAC, Instant::ZERO);
    let Ok(s) = peer.udp_bind_port(5000) else {
        return Vec::new();
    };
    let data: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut tx = Vec::new();
    if peer
        .udp_send_to(
            &mut pool,
            s,
            &data,
            SocketAddrV4::new(OUR_IP, PORT),
            Instant::ZERO,
            &mut tx,
        )
        .is_err()
    {
        return Vec::new();
    }
    tx.into_iter()
        .map(|b| {
            let v = chain_to_vec(&pool, b);
            pool.free_chain(b);
            v
        })
        .collect()
}

/// Headroom the benchmark's driver leaves before each frame: 30 bytes puts the IPv4 payload
/// (after 14 + 20 header bytes) on a 64-byte boundary, the way drivers align the IP header
/// (Linux's `NET_IP_ALIGN`), so the copy-out reads cache-line-aligned data.
pub const RX_HEADROOM: usize = 30;

/// The benchmark's sending interface (the peer of [`rx_frames`]' messages is its
/// neighbour), a socket bound on it, and where to send: what [`udp_send_to`] of
/// [`Interface`] needs to build one message's frames.
///
/// [`udp_send_to`]: Interface::udp_send_to
pub fn sender(checksum: bool) -> Option<(Interface, SocketHandle, SocketAddrV4)> {
    let mut ifc = Interface::new(config(OUR_MAC, OUR_IP, checksum));
    ifc.add_neighbor(PEER_IP, PEER_MAC, Instant::ZERO);
    let s = ifc.udp_bind_port(5000).ok()?;
    Some((ifc, s, SocketAddrV4::new(PEER_IP, PORT)))
}

/// Copy a frame into a fresh pool buffer, as the driver does ([`RX_HEADROOM`] before it).
pub fn load<P: BufferPool + ?Sized>(pool: &mut P, frame: &[u8]) -> Option<BufIdx> {
    let b = pool.alloc()?;
    pool.data_mut(b)[RX_HEADROOM..RX_HEADROOM + frame.len()].copy_from_slice(frame);
    set_window(pool, b, RX_HEADROOM, frame.len());
    Some(b)
}

/// What one path's benchmark measured: ns per message (NaN unless every message completed),
/// frames per message, messages put through and messages completed.
#[derive(Clone, Copy, Debug)]
struct Measured<T> {
    ns: T,
    frames: usize,
    messages: usize,
    completed: usize,
}

impl<T> Measured<T> {
    fn all_completed(&self) -> bool {
        self.completed == self.messages
    }
}

/// rx figures: (total, stack part, copy-out part) in ns per message.
fn bench_rx(size: usize, checksum: bool, batches: usize) -> Measured<[f64; 3]> {
    let frames = rx_frames(size, checksum);
    let n = batch_len(size);
    let mut pool = HeapPool::with_count(n * frames.len() + 64);
    let (mut ifc, s) = receiver(checksum, n);
    let mut user_store = vec![0u8; USER_LEN + 64];
    let user = aligned(&mut user_store, USER_LEN);
    let mut loaded: Vec<BufIdx> = Vec::with_capacity(n * frames.len());
    let mut tx: Vec<BufIdx> = Vec::new();
    let (mut total, mut stack, mut copy) = (Vec::new(), Vec::new(), Vec::new());
    let mut delivered = 0;
    // One untimed warm-up batch, then the timed ones.
    for batch in 0..=batches {
        loaded.clear();
        for _ in 0..n {
            for f in &frames {
                if let Some(b) = load(&mut pool, f) {
                    loaded.push(b);
                }
            }
        }
        let now = Instant::from_nanos(batch as u64);
        let t0 = WallClock::now();
        for &b in &loaded {
            ifc.receive(&mut pool, b, now, &mut tx);
        }
        let t1 = WallClock::now();
        for _ in 0..n {
            if let Ok(Some(info)) = ifc.udp_recv(&mut pool, s, user, &mut NoHook) {
                delivered += usize::from(black_box(info.len) == size);
            }
        }
        let t2 = WallClock::now();
        black_box(&user);
        for b in tx.drain(..) {
            pool.free_chain(b);
        }
        if batch > 0 {
            let per = |d: std::time::Duration| d.as_nanos() as f64 / n as f64;
            total.push(per(t2 - t0));
            stack.push(per(t1 - t0));
            copy.push(per(t2 - t1));
        }
    }
    let mut m = Measured {
        ns: [median(total), median(stack), median(copy)],
        frames: frames.len(),
        messages: n * (batches + 1),
        completed: delivered,
    };
    if !m.all_completed() {
        // Something was dropped: the figure would not be the path we mean to measure.
        m.ns = [f64::NAN; 3];
    }
    m
}

/// The frames one `size`-byte UDP message takes: the UDP header and payload cut into IPv4
/// fragments of at most 1,480 bytes.
pub fn frames_per_message(size: usize) -> usize {
    (size + 8).div_ceil(1480)
}

/// tx figure: ns per message.
fn bench_tx(size: usize, checksum: bool, batches: usize) -> Measured<f64> {
    let pool = HeapPool::with_count(batch_len(size) * frames_per_message(size) + 64);
    bench_tx_from(pool, size, checksum, batches)
}

/// [`bench_tx`] with the pool given (so a test can starve it).
fn bench_tx_from(mut pool: HeapPool, size: usize, checksum: bool, batches: usize) -> Measured<f64> {
    let n = batch_len(size);
    let frames_per_msg = frames_per_message(size);
    let Some((mut ifc, s, dst)) = sender(checksum) else {
        return Measured {
            ns: f64::NAN,
            frames: 0,
            messages: 0,
            completed: 0,
        };
    };
    let mut data_store = vec![0u8; size + 64];
    let data = aligned(&mut data_store, size);
    for (i, b) in data.iter_mut().enumerate() {
        *b = i as u8;
    }
    let data = &*data;
    let mut tx: Vec<BufIdx> = Vec::with_capacity(n * frames_per_msg);
    let mut results = Vec::with_capacity(n);
    let mut per_msg = Vec::with_capacity(batches);
    let mut completed = 0;
    for batch in 0..=batches {
        let now = Instant::from_nanos(batch as u64);
        results.clear();
        let t0 = WallClock::now();
        for _ in 0..n {
            let r = ifc.udp_send_to(&mut pool, s, black_box(data), dst, now, &mut tx);
            results.push(r.is_ok());
        }
        let dt = t0.elapsed().as_nanos() as f64;
        // Outside the timed region: every send succeeded and emitted the frames it should.
        if tx.len() == n * frames_per_msg {
            completed += results.iter().filter(|&&ok| ok).count();
        }
        for b in tx.drain(..) {
            pool.free_chain(b);
        }
        if batch > 0 {
            per_msg.push(dt / n as f64);
        }
    }
    let messages = n * (batches + 1);
    Measured {
        ns: if completed == messages {
            median(per_msg)
        } else {
            f64::NAN
        },
        frames: frames_per_msg,
        messages,
        completed,
    }
}

fn bench_memcpy(size: usize, batches: usize) -> f64 {
    let n = batch_len(size);
    let stride = size.div_ceil(64) * 64;
    let mut src_store = vec![0u8; n * stride + 64];
    let srcs = aligned(&mut src_store, n * stride);
    let mut user_store = vec![0u8; USER_LEN + 64];
    let user = aligned(&mut user_store, USER_LEN);
    let mut per_msg = Vec::with_capacity(batches);
    for batch in 0..=batches {
        // Written just before, as the driver writes the rx frames.
        for (i, s) in srcs.chunks_mut(stride).enumerate() {
            s.fill((i + batch) as u8);
        }
        let t0 = WallClock::now();
        for s in srcs.chunks(stride) {
            user[..size].copy_from_slice(black_box(&s[..size]));
            black_box(&user);
        }
        let dt = t0.elapsed().as_nanos() as f64;
        if batch > 0 {
            per_msg.push(dt / n as f64);
        }
    }
    median(per_msg)
}

/// Size of the user buffer messages are copied into.
const USER_LEN: usize = 65_536;

/// The first `len` bytes of `v` from its first 64-byte boundary (`v` has 64 spare bytes):
/// every figure copies between cache-line-aligned buffers, so that the allocator's
/// placement (and `memcpy`'s sensitivity to relative alignment) does not move the floor.
fn aligned(v: &mut [u8], len: usize) -> &mut [u8] {
    let skew = v.as_ptr().align_offset(64).min(64);
    &mut v[skew..skew + len]
}

/// Run the benchmark. `quick` uses fewer batches. `progress` receives a line per figure.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> StackBenchReport {
    let batches = if quick { 51 } else { 401 };
    let mut rx = Vec::new();
    let mut tx = Vec::new();
    for &size in &SIZES {
        let memcpy_ns = bench_memcpy(size, batches);
        for checksum in [false, true] {
            let row = |m: Measured<f64>, parts: Option<(f64, f64)>| BenchRow {
                size,
                checksum,
                frames: m.frames,
                messages: m.messages,
                completed: m.completed,
                ns_per_msg: m.ns,
                ns_per_byte: m.ns / size as f64,
                memcpy_ns,
                ratio: m.ns / memcpy_ns,
                stack_ns: parts.map(|p| p.0),
                copy_ns: parts.map(|p| p.1),
            };
            let m = bench_rx(size, checksum, batches);
            let [ns, st, cp] = m.ns;
            let r = row(
                Measured {
                    ns,
                    frames: m.frames,
                    messages: m.messages,
                    completed: m.completed,
                },
                Some((st, cp)),
            );
            progress(&format!(
                "rx size={size} checksum={checksum}: {:.0} ns/msg = stack {:.0} + copy-out {:.0} (memcpy {:.0} ns, x{:.2})",
                r.ns_per_msg, st, cp, r.memcpy_ns, r.ratio
            ));
            rx.push(r);
            let t = row(bench_tx(size, checksum, batches), None);
            progress(&format!(
                "tx size={size} checksum={checksum}: {:.0} ns/msg (memcpy {:.0} ns, x{:.2})",
                t.ns_per_msg, t.memcpy_ns, t.ratio
            ));
            tx.push(t);
        }
    }
    StackBenchReport {
        rx,
        tx,
        batches,
        rx_timed_region: RX_REGION,
        tx_timed_region: TX_REGION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rx_frames_match_the_seed() {
        assert_eq!(rx_frames(14_792, false).len(), 10);
        assert_eq!(rx_frames(10, true).len(), 1);
    }

    #[test]
    fn quick_paths_run() {
        // Behaviour only (the paths work end to end), not speed.
        let m = bench_rx(8192, true, 1);
        assert!(m.ns.iter().all(|x| x.is_finite()), "{m:?}");
        assert_eq!((m.frames, m.completed, m.messages), (6, 16, 16));
        let m = bench_tx(14_792, false, 1);
        assert!(m.ns.is_finite(), "{m:?}");
        assert_eq!((m.frames, m.completed, m.messages), (10, 8, 8));
    }

    #[test]
    fn frames_per_message_matches_what_the_stack_emits() {
        for size in SIZES.into_iter().chain([0, 1472, 1473, 2952, 2953]) {
            assert_eq!(
                rx_frames(size, false).len(),
                frames_per_message(size),
                "{size}"
            );
        }
    }

    #[test]
    fn failing_sends_are_counted_and_not_timed() {
        // A pool too small for one 14,792-byte message (ten frames): every send fails.
        let m = bench_tx_from(HeapPool::with_count(4), 14_792, false, 3);
        assert_eq!((m.completed, m.messages), (0, 16), "{m:?}");
        assert!(
            m.ns.is_nan(),
            "a failing send is not timed as if it worked: {m:?}"
        );
        // Room for two of the batch's four messages: half of them fail.
        let m = bench_tx_from(HeapPool::with_count(25), 14_792, false, 3);
        assert!(m.completed < m.messages && m.ns.is_nan(), "{m:?}");
    }
}
