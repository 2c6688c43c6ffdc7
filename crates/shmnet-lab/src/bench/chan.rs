//! `shmnet bench chan`: the SPSC queue against rtrb and DPDK's `rte_ring`, and pool
//! allocation by policy and path.
//!
//! Every queue is measured with one protocol, the one `scripts/rte_ring_bench.c` follows too:
//! producer and consumer pinned to different CPUs, released together by a start flag; the
//! producer sends `count` 16-byte descriptors (`buf = seq`, `len = 3·seq`,
//! `flags = seq ^ 0x5a5a5a5a`) in bursts of exactly `burst` (retrying the rest of a partly
//! accepted burst, spinning with `pause` when full); the consumer takes bursts of up to
//! `burst`, checks every descriptor, and spins when empty. The window runs from the
//! producer's TSC read just before its first enqueue to the consumer's just after its last
//! dequeue (the TSC is synchronised across cores), and the same interval on the monotonic
//! clock gives nanoseconds. Medians over repetitions.
//!
//! Beside them, seed 002's own queues ([`shmnet_chan::faithful`]): `faithful-in` (the IN
//! queue, driver → server: the producer gives up on a held lock and changes sub-queue, the
//! consumer spins) and `faithful-out` (server → driver), 1,024 slots in each of their two
//! sub-queues (a producer fills one at a time, so each holds what the other queues hold). The same queues run again with both parties on one CPU (`one_cpu`), as on
//! the seed's uniprocessor: there a side that finds nothing to do yields instead of spinning,
//! so the figures are dominated by the switches between the two threads and show what being
//! preempted inside a critical section costs a lock-based queue.

use crate::tsc;
use shmnet_chan::faithful::{
    Direction, FaithfulConsumer, FaithfulProducer, Pushed, faithful_queue,
};
use shmnet_chan::{
    AllocPolicy, ChannelSpec, Desc, DescLimits, PageSize, PoolSpec, RingSpec, Window,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Slots in every queue measured (the same for all implementations).
pub const CAPACITY: usize = 1024;
/// Bursts measured.
pub const BURSTS: [usize; 3] = [1, 8, 32];
/// Bursts measured with a party preempted (both on one CPU, or the driver's CPU shared).
pub const PREEMPTED_BURSTS: [usize; 2] = [1, 32];

/// What to run.
#[derive(Clone, Debug)]
pub struct ChanOptions {
    /// Fewer elements and repetitions.
    pub quick: bool,
    /// Elements per repetition (default: 10^7, or 10^6 with `quick`).
    pub count: Option<u64>,
    /// Repetitions (default: 5, or 3 with `quick`).
    pub reps: Option<u32>,
    /// CPUs for the producer and the consumer.
    pub cpus: (usize, usize),
    /// The `rte_ring` harness built by `scripts/build-rte-ring-bench`.
    pub rte_ring_bench: Option<PathBuf>,
}

impl Default for ChanOptions {
    fn default() -> Self {
        Self {
            quick: false,
            count: None,
            reps: None,
            cpus: (0, 1),
            rte_ring_bench: None,
        }
    }
}

/// One queue measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SpscRow {
    /// Which queue: `shmnet` (polling), `shmnet+wake` (wake-up mode, consumer busy),
    /// `rtrb`, `rte_ring`.
    #[serde(rename = "impl")]
    pub impl_name: String,
    /// Elements per enqueue/dequeue call.
    pub burst: usize,
    /// Median TSC ticks per element.
    pub ticks_per_elem: f64,
    /// Median nanoseconds per element.
    pub ns_per_elem: f64,
    /// Elements per repetition.
    pub elems: u64,
    /// Repetitions.
    pub reps: u32,
    /// Seed 002's queues only: what their protocols did, per 1,000 elements (medians).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faithful: Option<FaithfulCounts>,
}

/// What seed 002's queue protocols did during a run, per 1,000 elements.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct FaithfulCounts {
    /// Looks at a lock the other side held (the waiting side's spins, producer + consumer).
    pub lock_spins: f64,
    /// Lock entries that waited past the spin phase (64 looks) and began to yield the CPU:
    /// an upper bound on entries that found the holder preempted inside its section.
    pub long_waits: f64,
    /// Changes of sub-queue by the producer (the Enable protocol).
    pub switches: f64,
    /// Enqueues refused because neither sub-queue could be entered (a driver would drop).
    pub busy: f64,
    /// Dequeues by a yielding consumer that found the lock held.
    pub gave_up: f64,
}

impl FaithfulCounts {
    /// Every counter through `f`.
    fn map(self, f: impl Fn(f64) -> f64) -> Self {
        Self {
            lock_spins: f(self.lock_spins),
            long_waits: f(self.long_waits),
            switches: f(self.switches),
            busy: f(self.busy),
            gave_up: f(self.gave_up),
        }
    }

    /// Each counter's median over `reps`.
    fn median(reps: &[Self]) -> Self {
        let med = |field: fn(&Self) -> f64| {
            let mut v: Vec<f64> = reps.iter().map(field).collect();
            tsc::median(&mut v)
        };
        Self {
            lock_spins: med(|c| c.lock_spins),
            long_waits: med(|c| c.long_waits),
            switches: med(|c| c.switches),
            busy: med(|c| c.busy),
            gave_up: med(|c| c.gave_up),
        }
    }
}

/// One pool measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PoolRow {
    /// Allocation policy.
    pub policy: AllocPolicy,
    /// `server` (may wait for the lock) or `driver` (try-lock only).
    pub path: &'static str,
    /// Median nanoseconds per alloc+free pair.
    pub ns_per_pair: f64,
    /// Median TSC ticks per alloc+free pair.
    pub ticks_per_pair: f64,
}

/// Everything `shmnet bench chan` measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChanReport {
    /// Queue figures, producer and consumer on different CPUs.
    pub spsc: Vec<SpscRow>,
    /// Queue figures with both on one CPU (each yields when it finds nothing to do).
    pub one_cpu: Vec<SpscRow>,
    /// Queue figures across CPUs with a busy thread on the producer's (the driver's) CPU.
    pub driver_preempted: Vec<SpscRow>,
    /// The CPU the one-CPU rows ran on (the producer's).
    #[serde(rename = "one_cpu_cpu")]
    pub cpu0: usize,
    /// Uncontended lock+unlock: seed 002's mutex from each side against a CAS lock.
    pub locks: Vec<LockRow>,
    /// Pool figures.
    pub pool: Vec<PoolRow>,
    /// Where it ran.
    pub machine: crate::machine::Machine,
    /// The counter's calibration in this run.
    pub tsc: tsc::Calibration,
    /// Anything the reader should know (a baseline that could not run, an unpinned thread).
    pub notes: Vec<String>,
}

/// The descriptor the benchmark sends as element `seq`.
#[inline]
fn element(seq: u64) -> Desc {
    let s = seq as u32;
    Desc {
        buf: s,
        len: s.wrapping_mul(3),
        flags: s ^ 0x5a5a_5a5a,
        aux: 0,
    }
}

/// A queue under test: a producer end and a consumer end moving `Desc`s.
trait Queue {
    type Tx: Send;
    type Rx: Send;
    fn make(capacity: usize) -> (Self::Tx, Self::Rx);
    fn push(tx: &mut Self::Tx, descs: &[Desc]) -> usize;
    fn pop(rx: &mut Self::Rx, out: &mut [Desc]) -> usize;
    /// The protocol counters of seed 002's queues (raw, for the whole run).
    fn counts(_tx: &Self::Tx, _rx: &Self::Rx) -> Option<FaithfulCounts> {
        None
    }
}

/// shmnet's ring in a window: `WAKE` selects the wake-up mode (the consumer never sleeps
/// here, so it measures what the wake-up check costs the producer).
struct Shmnet<const WAKE: bool>;
struct Rtrb;

fn shmnet_ring(wakeups: bool) -> (shmnet_chan::Producer, shmnet_chan::Consumer) {
    let spec = ChannelSpec {
        rings: vec![RingSpec {
            capacity: CAPACITY as u32,
            wakeups,
        }],
        pools: PoolSpec {
            pools: 1,
            buffers_per_pool: 1,
            data_size: 64,
            policy: AllocPolicy::Lifo,
            ..PoolSpec::default()
        },
        page: PageSize::Small,
    };
    let win = Window::create(&spec).expect("create a benchmark window");
    let tx = win.producer(0).expect("fresh window");
    let rx = win
        .consumer_with_limits(0, DescLimits::OPAQUE)
        .expect("fresh window");
    (tx, rx)
}

impl<const WAKE: bool> Queue for Shmnet<WAKE> {
    type Tx = shmnet_chan::Producer;
    type Rx = shmnet_chan::Consumer;
    fn make(_: usize) -> (Self::Tx, Self::Rx) {
        shmnet_ring(WAKE)
    }
    #[inline]
    fn push(tx: &mut Self::Tx, descs: &[Desc]) -> usize {
        tx.enqueue_burst(descs)
    }
    #[inline]
    fn pop(rx: &mut Self::Rx, out: &mut [Desc]) -> usize {
        rx.dequeue_burst(out)
    }
}

impl Queue for Rtrb {
    type Tx = rtrb::Producer<Desc>;
    type Rx = rtrb::Consumer<Desc>;
    fn make(capacity: usize) -> (Self::Tx, Self::Rx) {
        rtrb::RingBuffer::new(capacity)
    }
    #[inline]
    fn push(tx: &mut Self::Tx, descs: &[Desc]) -> usize {
        if descs.len() == 1 {
            return usize::from(tx.push(descs[0]).is_ok());
        }
        let n = descs.len().min(tx.slots());
        if n == 0 {
            return 0;
        }
        match tx.write_chunk_uninit(n) {
            Ok(chunk) => chunk.fill_from_iter(descs[..n].iter().copied()),
            Err(_) => 0,
        }
    }
    #[inline]
    fn pop(rx: &mut Self::Rx, out: &mut [Desc]) -> usize {
        if out.len() == 1 {
            return match rx.pop() {
                Ok(d) => {
                    out[0] = d;
                    1
                }
                Err(_) => 0,
            };
        }
        let n = out.len().min(rx.slots());
        if n == 0 {
            return 0;
        }
        let Ok(chunk) = rx.read_chunk(n) else {
            return 0;
        };
        let (a, b) = chunk.as_slices();
        out[..a.len()].copy_from_slice(a);
        out[a.len()..a.len() + b.len()].copy_from_slice(b);
        chunk.commit_all();
        n
    }
}

/// Seed 002's IN (`IN = true`: driver → server, the producer yields and the consumer waits)
/// or OUT queue (server → driver), [`shmnet_chan::faithful`].
struct Faithful<const IN: bool>;

impl<const IN: bool> Queue for Faithful<IN> {
    type Tx = FaithfulProducer;
    type Rx = FaithfulConsumer;
    fn make(capacity: usize) -> (Self::Tx, Self::Rx) {
        // Each sub-queue as large as the other queues: it holds at most one sub-queue's
        // worth at a time (a producer changes sub-queue when blocked, not when full).
        let dir = if IN { Direction::In } else { Direction::Out };
        faithful_queue(capacity as u32, dir, None)
    }
    #[inline]
    fn push(tx: &mut Self::Tx, descs: &[Desc]) -> usize {
        match tx.enqueue_burst(descs) {
            Pushed::Took(k) => k,
            Pushed::Busy => 0,
        }
    }
    #[inline]
    fn pop(rx: &mut Self::Rx, out: &mut [Desc]) -> usize {
        rx.dequeue_burst(out)
    }
    fn counts(tx: &Self::Tx, rx: &Self::Rx) -> Option<FaithfulCounts> {
        let (p, c) = (tx.stats(), rx.stats());
        Some(FaithfulCounts {
            lock_spins: (p.spins + c.spins) as f64,
            long_waits: (p.long_waits + c.long_waits) as f64,
            switches: p.switches as f64,
            busy: p.busy as f64,
            gave_up: c.gave_up as f64,
        })
    }
}

/// One repetition: `(ticks, ns, counters)` for `count` elements in bursts of `burst`. On
/// one CPU (`cpus.0 == cpus.1`) a side that finds nothing to do yields, so the other runs;
/// across CPUs it spins.
///
/// `hog`: a CPU on which a third thread spins for the whole repetition, so the party pinned
/// there is preempted at whatever point the scheduler's tick finds it — inside its critical
/// section too.
fn run_once<Q: Queue>(
    burst: usize,
    count: u64,
    cpus: (usize, usize),
    hog: Option<usize>,
    pinned: &AtomicBool,
) -> (u64, f64, Option<FaithfulCounts>) {
    let one_cpu = cpus.0 == cpus.1;
    let idle = || {
        if one_cpu {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    };
    let (mut tx, mut rx) = Q::make(CAPACITY);
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    // Set by a thread that panics (a wrong element), so the others stop instead of
    // spinning forever on a queue nobody serves.
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        if let Some(cpu) = hog {
            let (done, failed) = (&done, &failed);
            s.spawn(move || {
                // A hog that cannot be pinned competes with nobody in particular: the row's
                // premise fails, and the note about unpinned threads says so.
                if !tsc::pin_to(cpu) {
                    pinned.store(false, Ordering::Relaxed);
                }
                while !done.load(Ordering::Relaxed) && !failed.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let producer = s.spawn(|| {
            let _flag = FlagOnPanic(&failed);
            if !tsc::pin_to(cpus.0) {
                pinned.store(false, Ordering::Relaxed);
            }
            let mut buf = vec![Desc::default(); burst];
            ready.fetch_add(1, Ordering::AcqRel);
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let w0 = Instant::now();
            let t0 = tsc::start();
            let mut seq = 0u64;
            while seq < count {
                let k = (count - seq).min(burst as u64) as usize;
                for (i, d) in buf[..k].iter_mut().enumerate() {
                    *d = element(seq + i as u64);
                }
                let mut done = 0;
                while done < k {
                    let n = Q::push(&mut tx, &buf[done..k]);
                    if n == 0 {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        idle();
                    }
                    done += n;
                }
                seq += k as u64;
            }
            (t0, w0, tx)
        });
        let consumer = s.spawn(|| {
            let _flag = FlagOnPanic(&failed);
            if !tsc::pin_to(cpus.1) {
                pinned.store(false, Ordering::Relaxed);
            }
            let mut out = vec![Desc::default(); burst];
            ready.fetch_add(1, Ordering::AcqRel);
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let mut seq = 0u64;
            while seq < count {
                let n = Q::pop(&mut rx, &mut out);
                if n == 0 {
                    if failed.load(Ordering::Relaxed) {
                        break;
                    }
                    idle();
                    continue;
                }
                for d in &out[..n] {
                    assert_eq!(*d, element(seq), "queue delivered a wrong element");
                    seq += 1;
                }
            }
            (tsc::stop(), Instant::now(), rx)
        });
        while ready.load(Ordering::Acquire) < 2 {
            std::hint::spin_loop();
        }
        go.store(true, Ordering::Release);
        let (t0, w0, tx) = producer.join().expect("producer thread");
        let (t1, w1, rx) = consumer.join().expect("consumer thread");
        done.store(true, Ordering::Relaxed);
        (
            t1.wrapping_sub(t0),
            (w1 - w0).as_nanos() as f64,
            Q::counts(&tx, &rx),
        )
    })
}

/// Sets its flag when dropped by a panicking thread.
struct FlagOnPanic<'a>(&'a AtomicBool);

impl Drop for FlagOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Per-repetition figures of one queue at one burst, reduced to a row by medians.
struct Samples {
    name: &'static str,
    ticks: Vec<f64>,
    ns: Vec<f64>,
    counts: Vec<FaithfulCounts>,
}

impl Samples {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            ticks: Vec::new(),
            ns: Vec::new(),
            counts: Vec::new(),
        }
    }

    fn push(&mut self, ticks: f64, ns: f64) {
        self.ticks.push(ticks);
        self.ns.push(ns);
    }

    /// Adds one repetition of `count` elements from [`run_once`].
    fn add(&mut self, (t, n, c): (u64, f64, Option<FaithfulCounts>), count: u64) {
        self.push(t as f64 / count as f64, n / count as f64);
        if let Some(c) = c {
            self.counts.push(c.map(|x| x * 1000.0 / count as f64));
        }
    }

    fn row(mut self, burst: usize, count: u64) -> Option<SpscRow> {
        let reps = self.ticks.len() as u32;
        (reps > 0).then(|| SpscRow {
            impl_name: self.name.into(),
            burst,
            ticks_per_elem: tsc::median(&mut self.ticks),
            ns_per_elem: tsc::median(&mut self.ns),
            elems: count,
            reps,
            faithful: (!self.counts.is_empty()).then(|| FaithfulCounts::median(&self.counts)),
        })
    }
}

/// The JSON line `rte_ring_bench` prints.
#[derive(serde::Deserialize)]
struct RteOutput {
    ticks_per_elem: Vec<f64>,
    ns_per_elem: Vec<f64>,
    #[serde(default)]
    dpdk_version: String,
}

fn measure_rte_ring(
    bin: &std::path::Path,
    burst: usize,
    count: u64,
    reps: u32,
    cpus: (usize, usize),
) -> Result<(SpscRow, String), String> {
    let out = std::process::Command::new(bin)
        .args([
            "--burst",
            &burst.to_string(),
            "--count",
            &count.to_string(),
            "--reps",
            &reps.to_string(),
            "--capacity",
            &CAPACITY.to_string(),
            "--producer-cpu",
            &cpus.0.to_string(),
            "--consumer-cpu",
            &cpus.1.to_string(),
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut r: RteOutput = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cannot parse {}'s output: {e}", bin.display()))?;
    Ok((
        SpscRow {
            impl_name: "rte_ring".into(),
            burst,
            ticks_per_elem: tsc::median(&mut r.ticks_per_elem),
            ns_per_elem: tsc::median(&mut r.ns_per_elem),
            elems: count,
            reps,
            faithful: None,
        },
        r.dpdk_version,
    ))
}

/// Where to look for the `rte_ring` harness when no path is given.
pub fn default_rte_ring_bench() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("SHMNET_RTE_RING_BENCH") {
        candidates.push(PathBuf::from(p));
    }
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join("rte_ring_bench"));
    }
    // Beside the running binary's profile directory: target/release/shmnet -> target/.
    if let Ok(exe) = std::env::current_exe() {
        if let Some(target) = exe.parent().and_then(|p| p.parent()) {
            candidates.push(target.join("rte_ring_bench"));
        }
    }
    candidates.push(PathBuf::from("target/rte_ring_bench"));
    candidates.into_iter().find(|p| p.is_file())
}

/// One uncontended lock+unlock, measured in one thread.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LockRow {
    /// Which lock.
    pub lock: LockKind,
    /// Median TSC ticks per lock+unlock.
    pub ticks_per_pair: f64,
    /// Median nanoseconds per lock+unlock.
    pub ns_per_pair: f64,
}

/// The locks `shmnet bench chan` times uncontended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockKind {
    /// Seed 002's mutex, the protocol (waiting) side.
    FaithfulWaiting,
    /// Seed 002's mutex, the driver (yielding) side.
    FaithfulYielding,
    /// A compare-and-swap lock released by a store, as the pools use.
    Cas,
}

/// `pairs` uncontended lock+unlock pairs of `lock`: `(ticks, ns)` in all.
fn lock_once(lock: LockKind, pairs: u64) -> (u64, f64) {
    let m = shmnet_chan::faithful::AsymMutex::default();
    let cas = std::sync::atomic::AtomicU32::new(0);
    // Seen by the optimiser as escaping, so its atomics are kept as written.
    let (m, cas) = (std::hint::black_box(&m), std::hint::black_box(&cas));
    match lock {
        LockKind::FaithfulWaiting => time_pairs(pairs, || {
            let _ = std::hint::black_box(m.lock_waiting());
            m.unlock_waiting();
        }),
        LockKind::FaithfulYielding => time_pairs(pairs, || {
            if std::hint::black_box(m.try_lock_yielding()) {
                m.unlock_yielding();
            }
        }),
        LockKind::Cas => time_pairs(pairs, || {
            while cas
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                std::hint::spin_loop();
            }
            cas.store(0, Ordering::Release);
        }),
    }
}

/// `(ticks, ns)` for `pairs` calls of `pair` (its own loop, so no choice is timed with it).
fn time_pairs(pairs: u64, mut pair: impl FnMut()) -> (u64, f64) {
    let w0 = Instant::now();
    let t0 = tsc::start();
    for _ in 0..pairs {
        pair();
    }
    (tsc::stop().wrapping_sub(t0), w0.elapsed().as_nanos() as f64)
}

/// Alloc+free pairs on one path of a fresh pool set, `pairs` in working sets of 32.
fn pool_once(policy: AllocPolicy, driver: bool, pairs: u64) -> (u64, f64) {
    let spec = ChannelSpec {
        rings: vec![],
        pools: PoolSpec {
            pools: 4,
            buffers_per_pool: 1024,
            data_size: 2048,
            policy,
            ..PoolSpec::default()
        },
        page: PageSize::Small,
    };
    let win = Window::create(&spec).expect("create a benchmark window");
    const SET: usize = 32;
    let mut held = [0u32; SET];
    let rounds = pairs.div_ceil(SET as u64);
    macro_rules! time_path {
        ($pools:expr) => {{
            let mut p = $pools;
            let w0 = Instant::now();
            let t0 = tsc::start();
            for _ in 0..rounds {
                for h in held.iter_mut() {
                    *h = p.alloc().expect("4096 buffers, 32 held");
                }
                for &h in &held {
                    p.release(h);
                }
            }
            (tsc::stop().wrapping_sub(t0), w0.elapsed().as_nanos() as f64)
        }};
    }
    let (t, ns) = if driver {
        time_path!(win.driver_pools().expect("fresh window"))
    } else {
        time_path!(win.server_pools().expect("fresh window"))
    };
    let n = (rounds * SET as u64) as f64;
    (t / n as u64, ns / n)
}

/// Runs the whole benchmark, calling `progress` with a line before each step.
pub fn run(opts: &ChanOptions, progress: &mut dyn FnMut(&str)) -> ChanReport {
    let count = opts
        .count
        .unwrap_or(if opts.quick { 1_000_000 } else { 10_000_000 });
    let reps = opts.reps.unwrap_or(if opts.quick { 3 } else { 5 });
    let pinned = AtomicBool::new(true);
    let mut notes = Vec::new();
    progress("calibrating the TSC");
    let cal = tsc::Calibration::measure(
        Duration::from_millis(if opts.quick { 50 } else { 200 }),
        10_000,
    );
    let rte = opts.rte_ring_bench.clone().or_else(default_rte_ring_bench);
    if rte.is_none() {
        notes.push(
            "rte_ring baseline not measured: build its harness with scripts/build-rte-ring-bench (needs Debian's dpdk-dev)".into(),
        );
    }
    // Repetitions are interleaved across implementations (A B C D, A B C D, ...) so that a
    // burst of noise from a neighbour on a shared machine lands on all of them alike.
    let mut spsc = Vec::new();
    for burst in BURSTS {
        let mut ours = Samples::new("shmnet");
        let mut wake = Samples::new("shmnet+wake");
        let mut theirs = Samples::new("rtrb");
        let mut dpdk = Samples::new("rte_ring");
        let mut seed_in = Samples::new("faithful-in");
        let mut seed_out = Samples::new("faithful-out");
        for rep in 0..reps {
            progress(&format!(
                "spsc burst {burst}, repetition {}/{reps}",
                rep + 1
            ));
            ours.add(
                run_once::<Shmnet<false>>(burst, count, opts.cpus, None, &pinned),
                count,
            );
            wake.add(
                run_once::<Shmnet<true>>(burst, count, opts.cpus, None, &pinned),
                count,
            );
            theirs.add(
                run_once::<Rtrb>(burst, count, opts.cpus, None, &pinned),
                count,
            );
            seed_in.add(
                run_once::<Faithful<true>>(burst, count, opts.cpus, None, &pinned),
                count,
            );
            seed_out.add(
                run_once::<Faithful<false>>(burst, count, opts.cpus, None, &pinned),
                count,
            );
            if let Some(bin) = &rte {
                match measure_rte_ring(bin, burst, count, 1, opts.cpus) {
                    Ok((row, version)) => {
                        let note = format!(
                            "rte_ring from DPDK {version}, its header-inline code compiled by scripts/build-rte-ring-bench"
                        );
                        if !notes.contains(&note) {
                            notes.push(note);
                        }
                        dpdk.push(row.ticks_per_elem, row.ns_per_elem);
                    }
                    Err(e) => notes.push(format!("rte_ring burst {burst} not measured: {e}")),
                }
            }
        }
        spsc.extend(
            [ours, wake, theirs, dpdk, seed_in, seed_out]
                .into_iter()
                .filter_map(|s| s.row(burst, count)),
        );
    }
    // Seed 002's situations where a party is preempted: both parties on one CPU, as on the
    // seed's uniprocessor (each runs only when the other yields or is preempted), and across
    // CPUs with a busy thread sharing the driver's (the producer's) CPU, so the driver is
    // preempted at random points — inside its critical section too, where seed 002's
    // waiting side spins until the lock is let go.
    // (A driver preempted needs runs of many scheduler ticks: the whole count.)
    let mut one_cpu = Vec::new();
    let mut driver_preempted = Vec::new();
    for (label, cpus, hog, extra_count, out) in [
        (
            "one CPU",
            (opts.cpus.0, opts.cpus.0),
            None,
            count / 10,
            &mut one_cpu,
        ),
        (
            "driver preempted",
            opts.cpus,
            Some(opts.cpus.0),
            count,
            &mut driver_preempted,
        ),
    ] {
        for burst in PREEMPTED_BURSTS {
            let mut ours = Samples::new("shmnet");
            let mut theirs = Samples::new("rtrb");
            let mut seed_in = Samples::new("faithful-in");
            for rep in 0..reps {
                progress(&format!(
                    "{label}, burst {burst}, repetition {}/{reps}",
                    rep + 1
                ));
                let c = extra_count;
                ours.add(run_once::<Shmnet<false>>(burst, c, cpus, hog, &pinned), c);
                theirs.add(run_once::<Rtrb>(burst, c, cpus, hog, &pinned), c);
                seed_in.add(run_once::<Faithful<true>>(burst, c, cpus, hog, &pinned), c);
            }
            out.extend(
                [ours, theirs, seed_in]
                    .into_iter()
                    .filter_map(|s| s.row(burst, extra_count)),
            );
        }
    }
    if !pinned.load(Ordering::Relaxed) {
        notes.push(format!(
            "could not pin to CPUs {} and {}: figures are from unpinned threads",
            opts.cpus.0, opts.cpus.1
        ));
    }
    let pairs: u64 = if opts.quick { 200_000 } else { 2_000_000 };
    let mut locks = Vec::new();
    for lock in [
        LockKind::FaithfulWaiting,
        LockKind::FaithfulYielding,
        LockKind::Cas,
    ] {
        progress(&format!("lock {lock:?}"));
        let (mut ticks, mut ns) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let (t, n) = lock_once(lock, pairs);
            ticks.push(t as f64 / pairs as f64);
            ns.push(n / pairs as f64);
        }
        locks.push(LockRow {
            lock,
            ticks_per_pair: tsc::median(&mut ticks),
            ns_per_pair: tsc::median(&mut ns),
        });
    }
    let mut pool = Vec::new();
    for policy in [AllocPolicy::Lifo, AllocPolicy::Fifo] {
        for (path, driver) in [("server", false), ("driver", true)] {
            progress(&format!("pool {policy:?} {path} path"));
            let mut ns = Vec::new();
            let mut ticks = Vec::new();
            for _ in 0..reps {
                let (t, n) = pool_once(policy, driver, pairs);
                ticks.push(t as f64);
                ns.push(n);
            }
            pool.push(PoolRow {
                policy,
                path,
                ns_per_pair: tsc::median(&mut ns),
                ticks_per_pair: tsc::median(&mut ticks),
            });
        }
    }
    ChanReport {
        spsc,
        one_cpu,
        driver_preempted,
        cpu0: opts.cpus.0,
        locks,
        pool,
        machine: crate::machine::Machine::this(),
        tsc: cal,
        notes,
    }
}

impl ChanReport {
    fn row(&self, name: &str, burst: usize) -> Option<&SpscRow> {
        self.spsc
            .iter()
            .find(|r| r.impl_name == name && r.burst == burst)
    }

    /// The two targets, as ratios measured in this run.
    pub fn verdicts(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let (Some(s), Some(r)) = (self.row("shmnet", 32), self.row("rte_ring", 32)) {
            let ratio = s.ticks_per_elem / r.ticks_per_elem;
            v.push(format!(
                "burst 32: shmnet {:.2} vs rte_ring {:.2} ticks/elem = {ratio:.2}x (target <= 1.00x): {}",
                s.ticks_per_elem,
                r.ticks_per_elem,
                if ratio <= 1.0 { "met" } else { "NOT met" }
            ));
        }
        if let (Some(s), Some(r)) = (self.row("shmnet", 1), self.row("rtrb", 1)) {
            let ratio = s.ticks_per_elem / r.ticks_per_elem;
            v.push(format!(
                "burst 1: shmnet {:.2} vs rtrb {:.2} ticks/elem = {ratio:.2}x (target <= 1.50x): {}",
                s.ticks_per_elem,
                r.ticks_per_elem,
                if ratio <= 1.5 { "met" } else { "NOT met" }
            ));
        }
        v
    }
}

/// The queue table: seed 002's rows with what their protocols did per 1,000 elements.
fn write_rows(f: &mut std::fmt::Formatter<'_>, rows: &[SpscRow]) -> std::fmt::Result {
    writeln!(
        f,
        "{:<12} {:>6} {:>14} {:>12}   per 1,000 elements (seed 002's queues)",
        "impl", "burst", "ticks/elem", "ns/elem"
    )?;
    for r in rows {
        write!(
            f,
            "{:<12} {:>6} {:>14.2} {:>12.2}",
            r.impl_name, r.burst, r.ticks_per_elem, r.ns_per_elem
        )?;
        if let Some(c) = r.faithful {
            write!(
                f,
                "   lock spins {:.1}, long waits {:.2}, sub-queue changes {:.2}, refused {:.2}, gave up {:.1}",
                c.lock_spins, c.long_waits, c.switches, c.busy, c.gave_up
            )?;
        }
        writeln!(f)?;
    }
    Ok(())
}

impl std::fmt::Display for ChanReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "machine: {}", self.machine)?;
        writeln!(
            f,
            "TSC: {:.4} ticks/ns, empty window {} ticks, step {} ticks",
            self.tsc.ticks_per_ns, self.tsc.empty_window_ticks, self.tsc.step_ticks
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "SPSC queue, {CAPACITY} slots, 16-byte descriptors, producer and consumer on different CPUs (median of {} reps x {} elements)",
            self.spsc.first().map_or(0, |r| r.reps),
            self.spsc.first().map_or(0, |r| r.elems)
        )?;
        write_rows(f, &self.spsc)?;
        let cpu = self.cpu0;
        for (title, rows) in [
            (
                format!("Both on CPU {cpu} (each yields when it finds nothing to do)"),
                &self.one_cpu,
            ),
            (
                format!("Driver preempted: a busy thread shares the producer's CPU {cpu}"),
                &self.driver_preempted,
            ),
        ] {
            if let Some(first) = rows.first() {
                writeln!(f)?;
                writeln!(f, "{title}, {} elements", first.elems)?;
                write_rows(f, rows)?;
            }
        }
        writeln!(f)?;
        writeln!(f, "Uncontended lock+unlock (one thread)")?;
        for l in &self.locks {
            writeln!(
                f,
                "{:<18} {:>8.1} ticks {:>8.2} ns",
                format!("{:?}", l.lock),
                l.ticks_per_pair,
                l.ns_per_pair
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Pool alloc+free pairs (working set of 32 buffers, one thread)"
        )?;
        writeln!(
            f,
            "{:<8} {:<8} {:>12} {:>14}",
            "policy", "path", "ns/pair", "ticks/pair"
        )?;
        for r in &self.pool {
            writeln!(
                f,
                "{:<8} {:<8} {:>12.2} {:>14.1}",
                format!("{:?}", r.policy).to_lowercase(),
                r.path,
                r.ns_per_pair,
                r.ticks_per_pair
            )?;
        }
        let verdicts = self.verdicts();
        if !verdicts.is_empty() {
            writeln!(f)?;
            for v in verdicts {
                writeln!(f, "{v}")?;
            }
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}
