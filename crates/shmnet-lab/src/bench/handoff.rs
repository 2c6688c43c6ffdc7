//! `shmnet bench handoff`: the cross-core hand-off limit — what the server structure's data
//! path would do if it did nothing but move bytes between two cores.
//!
//! A **producer** thread pinned to one CPU plays the driver's DMA: for every message it takes
//! buffers from a pool, writes the message's frames into them and hands each buffer's index
//! to a **consumer** thread pinned to another CPU over an SPSC ring (shmnet-chan's
//! [`heap_ring`], the rings the server uses). The consumer plays the application's `recv`:
//! it copies each frame's payload out into its own receive buffer and hands the buffer back
//! over a second ring; the producer returns it to the pool. There is no protocol work, no
//! system call and no sleep: whatever structure the server has, moving a message from one
//! core to another costs at least this.
//!
//! How it mirrors the server's data path:
//!
//! - **Pool**: the server's data-window pool set, [`PoolSpec::default`] — 4 × 1,024 buffers
//!   of 2 KiB, 8 MiB in all, larger than this machine's L1 and L2 (and the L2 of most) but
//!   within a last-level cache, as the real pool is. Buffers are recycled LIFO (a free stack,
//!   the policy the server's pools default to), so the buffers in use are the ones most
//!   recently freed and the working set is the buffers in flight, not the whole pool.
//! - **Frames**: a message is cut as softnic and a real link cut it: its 8-byte UDP header
//!   and payload in IPv4 fragments of at most 1,480 bytes (MTU 1,500), each fragment a whole
//!   Ethernet frame (14 + 20 header bytes, the first fragment's 8 UDP bytes) at the start of
//!   its own buffer. So 10 B and 1,024 B take one buffer, 8,192 B six and 14,792 B ten. The
//!   producer writes every byte of every frame (a DMA writes the headers too) from a template
//!   built once, and stamps the message's sequence number into its first payload bytes.
//! - **Rings**: 1,024 slots forward (the data window's IN ring), 1,024 back; bursts of up to
//!   32 descriptors, whole messages per burst; both ends poll (no wake-ups).
//! - **Copy-out**: the consumer copies each fragment's payload to its place in a receive
//!   buffer of the message's size and checks the sequence number of every message.
//!
//! Figures are messages per second and payload Gbit/s (UDP payload only, as ttcp counts),
//! from the moment both threads are released to the moment the consumer has the last message;
//! each run lasts a fixed time (not a fixed count), runs of the sizes are interleaved, and
//! the median run is reported. With a single CPU available both threads share it (yielding
//! to each other when stalled) and the report says so: that figure is not a cross-core limit.

use crate::bench::corelat;
use crate::tsc;
use shmnet_chan::ring::heap_ring;
use shmnet_chan::{Consumer, Desc, DescLimits, PoolSpec, Producer};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The message sizes measured by default: ttcp's.
pub const SIZES: [usize; 4] = [10, 1024, 8192, 14_792];
/// Slots in each ring (the data window's IN ring has 1,024).
pub const RING_SLOTS: u32 = 1024;
/// Most descriptors per enqueue (a burst holds whole messages, so at least one message's).
pub const BURST: usize = 32;
/// The link MTU the frames are cut to (IPv4 bytes per frame).
pub const MTU: usize = 1500;
/// Largest UDP payload (what one IPv4 datagram carries).
pub const MAX_SIZE: usize = 65_507;

const ETH: usize = 14;
const IP: usize = 20;
const UDP: usize = 8;
/// Descriptor flag: the first buffer of a message.
const FIRST: u32 = 1;
/// Descriptor flag: the last buffer of a message.
const LAST: u32 = 2;

/// What to run: checked when made (see [`HandoffOptions::new`]), so [`run`] cannot fail.
#[derive(Clone, Debug)]
pub struct HandoffOptions {
    quick: bool,
    sizes: Vec<usize>,
    cpus: Option<(usize, usize)>,
}

impl HandoffOptions {
    /// `quick`: about a second in all (3 runs per size) instead of about 5 s (5 runs per
    /// size). `sizes`: UDP payload sizes, 1 to [`MAX_SIZE`] bytes. `cpus`: producer and
    /// consumer CPUs; `None`: the first two this thread may run on (both on the same one when
    /// only one is allowed).
    pub fn new(
        quick: bool,
        sizes: Vec<usize>,
        cpus: Option<(usize, usize)>,
    ) -> Result<Self, HandoffError> {
        if sizes.is_empty() {
            return Err(HandoffError::NoSizes);
        }
        if let Some(&bad) = sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
            return Err(HandoffError::BadSize(bad));
        }
        if let Some((p, c)) = cpus {
            if p == c {
                return Err(HandoffError::SameCpu(p));
            }
        }
        Ok(Self { quick, sizes, cpus })
    }
}

impl Default for HandoffOptions {
    /// ttcp's sizes, full length, CPUs picked.
    fn default() -> Self {
        Self {
            quick: false,
            sizes: SIZES.to_vec(),
            cpus: None,
        }
    }
}

/// Why the probe did not run.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// A size outside what one UDP datagram carries.
    #[error("cannot probe a {0}-byte message: sizes are 1 to 65,507 bytes (one UDP datagram)")]
    BadSize(usize),
    /// Nothing to measure.
    #[error("no message sizes given: pass at least one")]
    NoSizes,
    /// The same CPU named twice.
    #[error("producer and consumer need different CPUs (got {0} twice); name two with --cpus P,C")]
    SameCpu(usize),
}

/// The probe's figures for one size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HandoffSize {
    /// UDP payload bytes per message.
    pub size: usize,
    /// Messages handed over and copied out per second (median run).
    pub msgs_per_s: f64,
    /// Payload Gbit/s (median run).
    pub gbit_per_s: f64,
    /// Buffers (frames) per message.
    pub buffers_per_msg: usize,
    /// Messages per second of every run, in the order run.
    pub runs_msgs_per_s: Vec<f64>,
}

/// Everything one probe measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HandoffReport {
    /// One entry per size, in the order asked.
    pub sizes: Vec<HandoffSize>,
    /// Producer and consumer CPUs.
    pub cpus: [usize; 2],
    /// Both threads ran on one CPU (only one was available): not a cross-core figure.
    pub shared_cpu: bool,
    /// Both threads were pinned as asked.
    pub pinned: bool,
    /// Buffers in the pool.
    pub pool_buffers: usize,
    /// Bytes per buffer.
    pub buffer_bytes: usize,
    /// Slots per ring.
    pub ring_slots: u32,
    /// Most descriptors per enqueue.
    pub burst: usize,
    /// Runs per size.
    pub runs: usize,
    /// Seconds per run.
    pub seconds_per_run: f64,
    /// The 1-minute load average just before the probe (`/proc/loadavg`; 0 if unreadable):
    /// other work on these CPUs preempts the pinned pair, which then waits for each other.
    pub load_before: f64,
    /// The two CPUs' core-to-core round trip just before the probe, ns
    /// ([`corelat`]: which placement of the CPUs the figures were taken in); `None` on one
    /// CPU or when it could not be measured.
    pub core_rtt_ns_before: Option<f64>,
    /// The same just after the probe.
    pub core_rtt_ns_after: Option<f64>,
    /// Messages whose sequence number or count came out wrong (0 unless the probe is
    /// broken; the figures are void otherwise).
    pub wrong_messages: u64,
    /// Anything the reader should know.
    pub notes: Vec<String>,
}

/// How one message of one size is cut into frames.
struct Plan {
    size: usize,
    /// Each frame's bytes, built once (the template the producer copies, as softnic does).
    frames: Vec<Vec<u8>>,
    /// Where each frame's share of the payload starts in the frame, and its length.
    payload: Vec<(usize, usize)>,
}

impl Plan {
    /// Cuts a `size`-byte UDP message into frames for buffers of `buf_bytes`.
    fn new(size: usize, buf_bytes: usize) -> Self {
        // As `shmnet_stack::frag::build`: fragments of the largest multiple of 8 that fits.
        let max_ip = shmnet_stack::frag::max_ip_packet(MTU, buf_bytes);
        let per_frag = (max_ip.saturating_sub(IP) & !7).max(8);
        let mut frames = Vec::new();
        let mut payload = Vec::new();
        let mut left = size + UDP;
        let mut first = true;
        let mut pattern = 0u8;
        while left > 0 {
            let ip_payload = left.min(per_frag);
            left -= ip_payload;
            let header = ETH + IP + if first { UDP } else { 0 };
            let share = ip_payload - if first { UDP } else { 0 };
            let mut f = vec![0u8; ETH + IP + ip_payload];
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            f[ETH] = 0x45;
            for b in &mut f[header..] {
                *b = pattern;
                pattern = pattern.wrapping_add(1);
            }
            frames.push(f);
            payload.push((header, share));
            first = false;
        }
        Self {
            size,
            frames,
            payload,
        }
    }
}

/// The pool's memory: `buffers` buffers of `size` bytes, 64-byte aligned.
///
/// Invariant: a buffer's bytes are touched by one thread at a time — whoever holds its
/// index: the producer (its free stack and the burst it is filling) or the consumer (from
/// dequeuing it to handing it back). An index changes hands only through a ring, whose
/// release store of its index and acquire load on the other side order the bytes written
/// before the hand-over before those read after it.
struct Arena {
    mem: Box<[UnsafeCell<u8>]>,
    start: usize,
    buffers: usize,
    size: usize,
}

// SAFETY: the bytes are shared between the two threads only as the invariant above says:
// never by both at once, and ordered by the rings' release/acquire hand-overs.
unsafe impl Sync for Arena {}

impl Arena {
    /// A pool of `buffers` × `size` bytes, every page touched (no fault during a run).
    fn new(buffers: usize, size: usize) -> Self {
        let mem: Box<[UnsafeCell<u8>]> = (0..buffers * size + 64)
            .map(|_| UnsafeCell::new(0x5a))
            .collect();
        let start = (mem.as_ptr() as *const u8).align_offset(64).min(63);
        Self {
            mem,
            start,
            buffers,
            size,
        }
    }

    /// The first byte of buffer `i`, or `None` if there is no such buffer.
    fn ptr(&self, i: u32) -> Option<*mut u8> {
        let i = i as usize;
        (i < self.buffers).then(|| self.mem[self.start + i * self.size].get())
    }
}

/// What the two threads of one run share besides the rings.
struct Control {
    ready: AtomicUsize,
    go: AtomicBool,
    stop: AtomicBool,
    /// Messages the producer enqueued, once it has stopped (`u64::MAX` before).
    sent: AtomicU64,
    pinned: AtomicBool,
    /// Stalls yield the CPU (both threads on one).
    shared: bool,
}

impl Control {
    #[inline]
    fn stall(&self) {
        if self.shared {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    fn wait_for_go(&self) {
        self.ready.fetch_add(1, Ordering::AcqRel);
        while !self.go.load(Ordering::Acquire) {
            std::hint::spin_loop();
            if self.shared {
                std::thread::yield_now();
            }
        }
    }
}

/// The producer: fills buffers with whole messages and enqueues them until told to stop;
/// takes back what the consumer returns. Returns the messages it enqueued.
fn produce(
    arena: &Arena,
    plan: &Plan,
    mut tx: Producer,
    mut back: Consumer,
    ctl: &Control,
    cpu: usize,
) -> u64 {
    if !tsc::pin_to(cpu) {
        ctl.pinned.store(false, Ordering::Relaxed);
    }
    // The free stack: LIFO, buffer 0 on top.
    let mut free: Vec<u32> = (0..arena.buffers as u32).rev().collect();
    let frames = plan.frames.len();
    let burst = BURST.max(frames);
    let mut batch: Vec<Desc> = Vec::with_capacity(burst);
    let mut returned = vec![Desc::default(); RING_SLOTS as usize];
    let mut reclaim = |free: &mut Vec<u32>, back: &mut Consumer| {
        let n = back.dequeue_burst(&mut returned);
        free.extend(returned[..n].iter().map(|d| d.buf));
    };
    let mut seq = 0u64;
    ctl.wait_for_go();
    while !ctl.stop.load(Ordering::Relaxed) {
        reclaim(&mut free, &mut back);
        batch.clear();
        while batch.len() + frames <= burst && free.len() >= frames {
            for (k, frame) in plan.frames.iter().enumerate() {
                let Some(b) = free.pop() else { break };
                let Some(dst) = arena.ptr(b) else { continue };
                // SAFETY: `b` came off our free stack, so we hold it (see `Arena`); the frame
                // (at most MTU + 14 bytes, checked by `Plan::new`'s geometry) fits its
                // `arena.size` bytes; template and buffer do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(frame.as_ptr(), dst, frame.len());
                    if k == 0 {
                        let (at, len) = plan.payload[0];
                        let stamp = seq.to_le_bytes();
                        std::ptr::copy_nonoverlapping(stamp.as_ptr(), dst.add(at), len.min(8));
                    }
                }
                let mut flags = 0;
                if k == 0 {
                    flags |= FIRST;
                }
                if k + 1 == frames {
                    flags |= LAST;
                }
                batch.push(Desc {
                    buf: b,
                    len: frame.len() as u32,
                    flags,
                    aux: k as u32,
                });
            }
            seq += 1;
        }
        if batch.is_empty() {
            ctl.stall();
            continue;
        }
        let mut done = 0;
        while done < batch.len() {
            let n = tx.enqueue_burst(&batch[done..]);
            if n == 0 {
                // Keep taking buffers back while waiting, so the consumer never waits on us.
                reclaim(&mut free, &mut back);
                ctl.stall();
            }
            done += n;
        }
    }
    ctl.sent.store(seq, Ordering::Release);
    seq
}

/// What the consumer counted.
struct Received {
    messages: u64,
    wrong: u64,
    end: Instant,
}

/// The consumer: copies every message out and returns its buffers, until it has every
/// message the producer sent.
fn consume(
    arena: &Arena,
    plan: &Plan,
    mut rx: Consumer,
    mut back: Producer,
    ctl: &Control,
    cpu: usize,
) -> Received {
    if !tsc::pin_to(cpu) {
        ctl.pinned.store(false, Ordering::Relaxed);
    }
    // The application's receive buffer, cache-line aligned.
    let mut store = vec![0u8; plan.size + 64];
    let at = store.as_ptr().align_offset(64).min(63);
    let app = &mut store[at..at + plan.size];
    let mut inbox = vec![Desc::default(); BURST.max(plan.frames.len())];
    let (mut messages, mut wrong) = (0u64, 0u64);
    let mut offset = 0usize;
    let mut expect_next = 0usize;
    ctl.wait_for_go();
    loop {
        let n = rx.dequeue_burst(&mut inbox);
        if n == 0 {
            let sent = ctl.sent.load(Ordering::Acquire);
            // The producer stored `sent` after its last enqueue: an empty ring now means we
            // have everything it sent.
            if sent != u64::MAX && rx.available() == 0 {
                wrong += sent.abs_diff(messages);
                break;
            }
            ctl.stall();
            continue;
        }
        for d in &inbox[..n] {
            let k = d.aux as usize;
            let (from, len) = plan.payload.get(k).copied().unwrap_or((0, 0));
            let ok = k == expect_next
                && (d.flags & FIRST != 0) == (k == 0)
                && d.len as usize == plan.frames.get(k).map_or(0, Vec::len)
                && offset + len <= app.len();
            match arena.ptr(d.buf) {
                Some(src) if ok => {
                    // SAFETY: we hold `d.buf` from its dequeue until we hand it back below
                    // (see `Arena`); `from + len` is within the frame, which fits the buffer;
                    // `offset + len` was checked against the receive buffer, private to us.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.add(from),
                            app.as_mut_ptr().add(offset),
                            len,
                        )
                    };
                    offset += len;
                    expect_next = k + 1;
                }
                _ => wrong += 1,
            }
            if d.flags & LAST != 0 {
                let n = plan.size.min(8);
                let mut seq = [0u8; 8];
                seq[..n].copy_from_slice(&app[..n]);
                let want = messages.to_le_bytes();
                if offset != plan.size || seq[..n] != want[..n] {
                    wrong += 1;
                }
                messages += 1;
                offset = 0;
                expect_next = 0;
            }
        }
        std::hint::black_box(&mut *app);
        let mut done = 0;
        while done < n {
            let k = back.enqueue_burst(&inbox[done..n]);
            if k == 0 {
                if ctl.sent.load(Ordering::Acquire) != u64::MAX {
                    // The producer has stopped and takes nothing back any more.
                    break;
                }
                ctl.stall();
            }
            done += k;
        }
    }
    Received {
        messages,
        wrong,
        end: Instant::now(),
    }
}

/// One run of `plan` for `time`: messages per second and wrong messages.
fn run_once(
    arena: &Arena,
    plan: &Plan,
    time: Duration,
    cpus: [usize; 2],
    ctl: &Control,
) -> (f64, u64) {
    let limits = DescLimits {
        max_buf: arena.buffers as u32 - 1,
        max_len: arena.size as u32,
    };
    let (tx, rx) = heap_ring(RING_SLOTS, None, limits);
    let (back_tx, back_rx) = heap_ring(RING_SLOTS, None, limits);
    ctl.ready.store(0, Ordering::Relaxed);
    ctl.go.store(false, Ordering::Relaxed);
    ctl.stop.store(false, Ordering::Relaxed);
    ctl.sent.store(u64::MAX, Ordering::Relaxed);
    std::thread::scope(|s| {
        let producer = s.spawn(|| produce(arena, plan, tx, back_rx, ctl, cpus[0]));
        let consumer = s.spawn(|| consume(arena, plan, rx, back_tx, ctl, cpus[1]));
        while ctl.ready.load(Ordering::Acquire) < 2 {
            std::thread::sleep(Duration::from_micros(50));
        }
        let t0 = Instant::now();
        ctl.go.store(true, Ordering::Release);
        std::thread::sleep(time);
        ctl.stop.store(true, Ordering::Relaxed);
        let sent = producer.join().unwrap_or(0);
        let Ok(got) = consumer.join() else {
            return (0.0, sent.max(1));
        };
        let secs = got.end.duration_since(t0).as_secs_f64().max(1e-9);
        (got.messages as f64 / secs, got.wrong)
    })
}

/// Runs the probe, calling `progress` with a line before each run.
pub fn run(opts: &HandoffOptions, progress: &mut dyn FnMut(&str)) -> HandoffReport {
    let cpus = match opts.cpus {
        Some((p, c)) => [p, c],
        None => corelat::pick_cpus(),
    };
    let core_rtt_ns_before = corelat::round_trip_ns(cpus);
    let shared = cpus[0] == cpus[1];
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let spec = PoolSpec::default();
    let buffers = (spec.pools * spec.buffers_per_pool) as usize;
    let buffer_bytes = spec.data_size as usize;
    // Time, not counts: about a second in all when quick, whatever this machine's speed.
    let runs = if opts.quick { 3 } else { 5 };
    let time = if opts.quick {
        (Duration::from_secs(1) / (runs * opts.sizes.len()) as u32)
            .clamp(Duration::from_millis(20), Duration::from_millis(80))
    } else {
        Duration::from_millis(200)
    };
    let arena = Arena::new(buffers, buffer_bytes);
    let plans: Vec<Plan> = opts
        .sizes
        .iter()
        .map(|&s| Plan::new(s, buffer_bytes))
        .collect();
    let ctl = Control {
        ready: AtomicUsize::new(0),
        go: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        sent: AtomicU64::new(u64::MAX),
        pinned: AtomicBool::new(true),
        shared,
    };
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); plans.len()];
    let mut wrong = 0;
    // Runs interleaved across sizes (A B C D, A B C D, ...), so that noise from a neighbour
    // lands on every size alike.
    for rep in 0..runs {
        for (plan, rates) in plans.iter().zip(&mut rates) {
            progress(&format!("hand-off {} B, run {}/{runs}", plan.size, rep + 1));
            let (rate, bad) = run_once(&arena, plan, time, cpus, &ctl);
            rates.push(rate);
            wrong += bad;
        }
    }
    let sizes: Vec<HandoffSize> = plans
        .iter()
        .zip(rates)
        .map(|(plan, runs_msgs_per_s)| {
            let msgs_per_s = tsc::median(&mut runs_msgs_per_s.clone());
            HandoffSize {
                size: plan.size,
                msgs_per_s,
                gbit_per_s: msgs_per_s * plan.size as f64 * 8.0 / 1e9,
                buffers_per_msg: plan.frames.len(),
                runs_msgs_per_s,
            }
        })
        .collect();
    let pinned = ctl.pinned.load(Ordering::Relaxed);
    let core_rtt_ns_after = corelat::round_trip_ns(cpus);
    let mut notes = Vec::new();
    if let (Some(a), Some(b)) = (core_rtt_ns_before, core_rtt_ns_after) {
        if !corelat::same_placement(a, b) {
            notes.push(format!(
                "the two CPUs' core-to-core round trip changed from {a:.0} ns to {b:.0} ns during the probe: the machine moved them (a virtual machine's vCPUs), and cross-core figures differ severalfold between placements"
            ));
        }
    }
    if shared {
        notes.push(format!(
            "only CPU {} is available: producer and consumer shared it, so these figures are not a cross-core limit",
            cpus[0]
        ));
    }
    if !pinned {
        notes.push(format!(
            "could not pin to CPUs {} and {}: figures are from unpinned threads",
            cpus[0], cpus[1]
        ));
    }
    let spread = sizes_spread(&sizes);
    if spread > 1.5 {
        notes.push(format!(
            "runs of one size differ by up to {spread:.1}× (load average {load_before:.2} before the probe): other work shares these CPUs, so read these figures with care"
        ));
    }
    if wrong > 0 {
        notes.push(format!(
            "{wrong} message(s) arrived wrong: the probe is broken and its figures are void"
        ));
    }
    HandoffReport {
        sizes,
        cpus,
        shared_cpu: shared,
        pinned,
        pool_buffers: buffers,
        buffer_bytes,
        ring_slots: RING_SLOTS,
        burst: BURST,
        runs,
        seconds_per_run: time.as_secs_f64(),
        load_before,
        core_rtt_ns_before,
        core_rtt_ns_after,
        wrong_messages: wrong,
        notes,
    }
}

/// The largest ratio of a size's fastest run to its slowest.
fn sizes_spread(sizes: &[HandoffSize]) -> f64 {
    sizes
        .iter()
        .map(|s| {
            let (lo, hi) = s
                .runs_msgs_per_s
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(lo, hi), &r| {
                    (lo.min(r), hi.max(r))
                });
            if lo > 0.0 { hi / lo } else { 1.0 }
        })
        .fold(1.0, f64::max)
}

impl HandoffReport {
    /// The figures for `size`, if it was measured.
    pub fn size(&self, size: usize) -> Option<&HandoffSize> {
        self.sizes.iter().find(|s| s.size == size)
    }
}

impl std::fmt::Display for HandoffReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Cross-core hand-off: producer on CPU {} writes frames into a LIFO pool of {} × {} B buffers, consumer on CPU {} copies them out; {}-slot rings, bursts ≤ {} (median of {} runs × {:.0} ms){}",
            self.cpus[0],
            self.pool_buffers,
            self.buffer_bytes,
            self.cpus[1],
            self.ring_slots,
            self.burst,
            self.runs,
            self.seconds_per_run * 1e3,
            if self.shared_cpu {
                " — SHARED CPU"
            } else {
                ""
            }
        )?;
        if let (Some(a), Some(b)) = (self.core_rtt_ns_before, self.core_rtt_ns_after) {
            writeln!(
                f,
                "core-to-core round trip: {a:.0} ns before, {b:.0} ns after (cross-core figures hold only for that placement)"
            )?;
        }
        writeln!(
            f,
            "{:>6} {:>8} {:>12} {:>9}",
            "size", "buffers", "msgs/s", "Gbit/s"
        )?;
        for s in &self.sizes {
            writeln!(
                f,
                "{:>6} {:>8} {:>12.0} {:>9.2}",
                s.size, s.buffers_per_msg, s.msgs_per_s, s.gbit_per_s
            )?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_into_mtu_fragments_as_the_wire_cuts_them() {
        let frames = |size| Plan::new(size, 2048).frames.len();
        assert_eq!(frames(10), 1);
        assert_eq!(frames(1024), 1);
        assert_eq!(frames(8192), 6);
        assert_eq!(frames(14_792), 10);
        for size in [1, 10, 1472, 1473, 8192, 14_792, MAX_SIZE] {
            let p = Plan::new(size, 2048);
            assert_eq!(
                p.frames.len(),
                shmnet_stack::bench::frames_per_message(size)
            );
            let payload: usize = p.payload.iter().map(|&(_, n)| n).sum();
            assert_eq!(payload, size, "{size}");
            for (f, &(at, n)) in p.frames.iter().zip(&p.payload) {
                assert!(f.len() <= 2048 && at + n == f.len(), "{size}");
            }
        }
    }

    #[test]
    fn every_message_arrives_whole_and_in_order() {
        let opts = HandoffOptions::new(true, vec![1, 10, 14_792], None).expect("valid options");
        let r = run(&opts, &mut |_| {});
        assert_eq!(r.wrong_messages, 0, "{r:?}");
        assert_eq!(r.sizes.len(), 3);
        for s in &r.sizes {
            assert!(s.msgs_per_s > 0.0 && s.gbit_per_s > 0.0, "{s:?}");
            assert_eq!(s.runs_msgs_per_s.len(), 3);
        }
    }

    #[test]
    fn bad_options_are_refused() {
        let bad = |sizes: Vec<usize>, cpus| HandoffOptions::new(true, sizes, cpus).unwrap_err();
        assert!(matches!(bad(vec![], None), HandoffError::NoSizes));
        assert!(matches!(bad(vec![0], None), HandoffError::BadSize(0)));
        assert!(matches!(
            bad(vec![70_000], None),
            HandoffError::BadSize(70_000)
        ));
        assert!(matches!(
            bad(vec![10], Some((1, 1))),
            HandoffError::SameCpu(1)
        ));
    }
}
