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

use crate::tsc;
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
    /// Queue figures.
    pub spsc: Vec<SpscRow>,
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

/// One repetition: `(ticks, ns)` for `count` elements in bursts of `burst`.
fn run_once<Q: Queue>(
    burst: usize,
    count: u64,
    cpus: (usize, usize),
    pinned: &AtomicBool,
) -> (u64, f64) {
    let (mut tx, mut rx) = Q::make(CAPACITY);
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    std::thread::scope(|s| {
        let producer = s.spawn(|| {
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
                        std::hint::spin_loop();
                    }
                    done += n;
                }
                seq += k as u64;
            }
            (t0, w0)
        });
        let consumer = s.spawn(|| {
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
                    std::hint::spin_loop();
                    continue;
                }
                for d in &out[..n] {
                    assert_eq!(*d, element(seq), "queue delivered a wrong element");
                    seq += 1;
                }
            }
            (tsc::stop(), Instant::now())
        });
        while ready.load(Ordering::Acquire) < 2 {
            std::hint::spin_loop();
        }
        go.store(true, Ordering::Release);
        let (t0, w0) = producer.join().expect("producer thread");
        let (t1, w1) = consumer.join().expect("consumer thread");
        (t1.wrapping_sub(t0), (w1 - w0).as_nanos() as f64)
    })
}

/// Per-repetition figures of one queue at one burst, reduced to a row by medians.
struct Samples {
    name: &'static str,
    ticks: Vec<f64>,
    ns: Vec<f64>,
}

impl Samples {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            ticks: Vec::new(),
            ns: Vec::new(),
        }
    }

    fn push(&mut self, ticks: f64, ns: f64) {
        self.ticks.push(ticks);
        self.ns.push(ns);
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

/// Alloc+free pairs on one path of a fresh pool set, `pairs` in working sets of 32.
fn pool_once(policy: AllocPolicy, driver: bool, pairs: u64) -> (u64, f64) {
    let spec = ChannelSpec {
        rings: vec![],
        pools: PoolSpec {
            pools: 4,
            buffers_per_pool: 1024,
            data_size: 2048,
            policy,
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
        for rep in 0..reps {
            progress(&format!(
                "spsc burst {burst}, repetition {}/{reps}",
                rep + 1
            ));
            let per = |(t, n): (u64, f64)| (t as f64 / count as f64, n / count as f64);
            let (t, n) = per(run_once::<Shmnet<false>>(burst, count, opts.cpus, &pinned));
            ours.push(t, n);
            let (t, n) = per(run_once::<Shmnet<true>>(burst, count, opts.cpus, &pinned));
            wake.push(t, n);
            let (t, n) = per(run_once::<Rtrb>(burst, count, opts.cpus, &pinned));
            theirs.push(t, n);
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
            [ours, wake, theirs, dpdk]
                .into_iter()
                .filter_map(|s| s.row(burst, count)),
        );
    }
    if !pinned.load(Ordering::Relaxed) {
        notes.push(format!(
            "could not pin to CPUs {} and {}: figures are from unpinned threads",
            opts.cpus.0, opts.cpus.1
        ));
    }
    let pairs: u64 = if opts.quick { 200_000 } else { 2_000_000 };
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
        writeln!(
            f,
            "{:<12} {:>6} {:>14} {:>12}",
            "impl", "burst", "ticks/elem", "ns/elem"
        )?;
        for r in &self.spsc {
            writeln!(
                f,
                "{:<12} {:>6} {:>14.2} {:>12.2}",
                r.impl_name, r.burst, r.ticks_per_elem, r.ns_per_elem
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
