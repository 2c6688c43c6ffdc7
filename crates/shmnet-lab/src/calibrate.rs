//! `shmnet calibrate`: this machine's Table 1 — what the timer costs, what a line costs from
//! each level of the memory system, what a TLB miss costs, how fast `memcpy` runs, and what
//! loading one packet buffer costs hot, from the last-level cache and from memory (clean and
//! behind dirty victims). The residency experiment reads its histograms against these.
//!
//! Method (the seed's Table 1 and Calibrator's, adapted to a machine with prefetchers and
//! out-of-order execution):
//!
//! - Every figure is a TSC window (`lfence; rdtsc` … `rdtscp; lfence`) on a pinned thread;
//!   the empty window's cost is subtracted; medians over many windows are quoted with their
//!   10th and 90th percentiles.
//! - **Line loads** follow a pointer chase through a random cyclic permutation of the lines
//!   of a working set sized to sit in one level (half the L1, half the L2, the geometric mean
//!   of L2 and last level, eight times the last level), on transparent huge pages so that TLB
//!   misses stay out. Each load depends on the one before: no overlap, no prefetch.
//! - **Memory, clean and dirty**: before each window a sweep fills the caches with clean
//!   lines (loads) or dirty ones (stores) of another region; the chase that follows makes
//!   every fill evict one of them. The difference is the write-back a dirty victim costs (the
//!   seed's 18 vs 23 cycles).
//! - **TLB**: one line per 4 KiB page over a span (64 MiB) far larger than the TLBs reach,
//!   minus the same number of lines packed together (same cache footprint, few pages): the
//!   cost of a page walk per load. The same span on 2 MiB pages needs 32 TLB entries, which
//!   is the point of seed 000's "group TLB" rule; its figure is the extra cost that remains.
//!   (A footprint that fits in L1, as Calibrator uses, cannot span more pages than a modern
//!   second-level TLB holds: 1 MiB of lines is used instead, and the packed baseline cancels
//!   it.)
//! - **Buffer loads** use the residency probe's own routine ([`crate::mem::load`]) on a
//!   buffer of the probe's size and alignment: hot (loaded twice, the second timed), after
//!   the buffer was pushed out of L2 into the last level, and after `clflush` with the caches
//!   full of clean or of dirty lines. Their differences from hot are the marks the residency
//!   histograms are read against.

use crate::cacheinfo::{self, CacheInfo, CacheSource, Sizes};
use crate::cpuid::{self, TlbInfo};
use crate::machine::Machine;
use crate::mem::{self, LINE, Paging, Region};
use crate::tsc::{self, Calibration};
use std::time::Duration;

/// How many windows each figure is the median of.
#[derive(Clone, Copy, Debug)]
pub struct Effort {
    /// Windows per figure.
    pub windows: usize,
}

impl Effort {
    /// The published figures.
    pub const FULL: Self = Self { windows: 41 };
    /// A few seconds.
    pub const QUICK: Self = Self { windows: 11 };
}

/// A median with its spread.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    /// 10th percentile.
    pub p10: f64,
    /// 25th percentile (0 in files from before it was recorded).
    #[serde(default)]
    pub p25: f64,
    /// Median.
    pub p50: f64,
    /// 75th percentile (0 in files from before it was recorded).
    #[serde(default)]
    pub p75: f64,
    /// 90th percentile.
    pub p90: f64,
}

impl Spread {
    /// Of a set of samples (sorted in place); all zero when empty.
    pub fn of(v: &mut [f64]) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        let p50 = tsc::median(v);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Self {
            p10: at(0.1),
            p25: at(0.25),
            p50,
            p75: at(0.75),
            p90: at(0.9),
        }
    }
}

/// The timer.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Timer {
    /// Median ticks of an empty window (subtracted from every figure).
    pub overhead_ticks: u64,
    /// The counter's step: no difference smaller than this can be seen.
    pub quantum_ticks: u64,
    /// Ticks per nanosecond of wall-clock time.
    pub ticks_per_ns: f64,
}

/// Ticks to load one line, by where it comes from.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct LineLoads {
    /// From L1.
    pub l1: f64,
    /// From L2.
    pub l2: f64,
    /// From the last-level cache.
    pub l3: f64,
    /// From memory, the line it displaces clean.
    pub dram: f64,
    /// From memory, the line it displaces dirty (written back first).
    pub dram_dirty: f64,
}

/// Ticks a TLB miss adds to a load.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct TlbMiss {
    /// With 4 KiB pages: a page walk.
    #[serde(rename = "4k")]
    pub small: f64,
    /// With 2 MiB pages over the same span (null if the kernel gave no huge pages). Often 0:
    /// the span is 32 huge pages, which many CPUs' second-level TLBs hold whole.
    #[serde(rename = "2m")]
    pub huge: Option<f64>,
}

/// `memcpy` bandwidth by size, source and destination in cache (1 MiB: in L2/L3).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Memcpy {
    /// 1,500 bytes.
    #[serde(rename = "1500")]
    pub b1500: f64,
    /// 8 KiB.
    #[serde(rename = "8192")]
    pub b8192: f64,
    /// 1 MiB.
    #[serde(rename = "1048576")]
    pub b1m: f64,
}

/// What loading one packet buffer with the probe's routine costs, in ticks beyond the same
/// load from L1 (the probe's "overhead"), and the marks the residency summary classifies by.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct BufferCosts {
    /// Buffer bytes.
    pub bytes: usize,
    /// Where the data starts within its 64-byte line.
    pub line_offset: usize,
    /// Median ticks of the whole window when the buffer is in L1 (timer overhead included).
    pub hot_ticks: f64,
    /// Overhead when the buffer is in L2 but not in L1.
    #[serde(default)]
    pub l2_overhead: Spread,
    /// Overhead when the buffer is in the last-level cache but not in L2.
    pub llc_overhead: Spread,
    /// Bytes of other data loaded to push the buffer out of L2 into the last level (twice
    /// L2; 0 in files from before it was recorded).
    #[serde(default)]
    pub llc_sweep_bytes: usize,
    /// Overhead when no line is cached and every fill displaces a clean line.
    pub clean_overhead: Spread,
    /// Overhead when no line is cached and every fill displaces a dirty line.
    pub dirty_overhead: Spread,
}

/// The marks a residency histogram is read against, in overhead ticks per buffer.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Marks {
    /// At most this: every line came from some cache ("totally within cache").
    pub cached_max: f64,
    /// A 100 % miss rate on clean lines (the seed's 828–846 cycles).
    pub clean: f64,
    /// A 100 % miss rate on dirty lines (the seed's 1,058–1,081 cycles); never below `clean`.
    pub dirty: f64,
}

/// Why a set of marks cannot classify buffers: the machine, as calibrated, does not tell a
/// buffer in the cache from one in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Degeneracy {
    /// The slowest loads from the last-level cache (the cached mark) are no faster than the
    /// fastest 100 % clean misses: the two distributions overlap, so "in cache" and "below a
    /// clean miss" would count the same buffers.
    CacheOverlapsMiss,
}

impl std::fmt::Display for Degeneracy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CacheOverlapsMiss => f.write_str(
                "this machine cannot tell a buffer in the cache from one in memory: the slower \
                 quarter of loads from the last-level cache (above p75) reaches the faster quarter \
                 of 100 % clean misses (below p25), so the residency percentages mean nothing here",
            ),
        }
    }
}

impl Marks {
    /// `None` when the marks separate the cache from memory; else why they do not.
    pub fn degeneracy(&self) -> Option<Degeneracy> {
        // `!(a < b)` rather than `a >= b`: NaN marks are degenerate too.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let overlap = !(self.cached_max < self.clean) || !(self.clean > 0.0);
        overlap.then_some(Degeneracy::CacheOverlapsMiss)
    }
}

/// How the marks are read off the calibrated distributions, in words for reports: the
/// cached mark at an upper percentile (nearly every load from a cache costs at most this),
/// the miss marks at a lower one (nearly every 100 % miss costs at least this). Between the
/// two lie buffers that were partly cached.
pub const MARK_RULE: &str = "in cache: at most the 75th percentile of loading the buffer from the last-level cache; \
     below a 100 % clean (dirty) miss: below the 25th percentile of loading it with every line missing";

impl BufferCosts {
    /// The marks, read off the calibration's distributions: a buffer is totally within cache
    /// while its overhead is at most the upper quartile (p75) of loading it from the
    /// last-level cache, and below a 100 % clean (dirty) miss while its overhead is below the
    /// lower quartile (p25) of loading it with every line missing behind clean (dirty)
    /// victims. When the two distributions overlap the marks say so ([`Marks::degeneracy`])
    /// rather than being clamped into an order that would hide it.
    ///
    /// Why quartiles and not p90/p10: on a shared VM the last-level load has a long tail
    /// (other tenants evict the buffer between the sweep and the load), which reached the
    /// miss's p10 in about one quick calibration in five on the 2-vCPU AMD EPYC VM
    /// (2026-11-23) while the quartiles stayed apart by a factor of two. The quartiles say
    /// where each level's loads lie; buffers between them were partly cached.
    ///
    /// No mark is clamped: a clean miss that measured no dearer than L1 is degenerate, not
    /// raised to a tick.
    pub fn marks(&self) -> Marks {
        let clean = self.clean_overhead.p25;
        Marks {
            cached_max: self.llc_overhead.p75,
            clean,
            dirty: self.dirty_overhead.p25.max(clean),
        }
    }

    /// Checks costs read from a file (`--calibration`), which is untrusted input: every
    /// figure finite, every spread in order (p10 ≤ p25 ≤ p50 ≤ p75 ≤ p90), a buffer of some
    /// bytes.
    pub fn check(&self) -> Result<(), BadCosts> {
        if self.bytes == 0 {
            return Err(BadCosts::NoBuffer);
        }
        for (name, s) in [
            ("l2_overhead", &self.l2_overhead),
            ("llc_overhead", &self.llc_overhead),
            ("clean_overhead", &self.clean_overhead),
            ("dirty_overhead", &self.dirty_overhead),
        ] {
            let q = [s.p10, s.p25, s.p50, s.p75, s.p90];
            let finite = q.iter().all(|v| v.is_finite());
            if !(finite && q.windows(2).all(|w| w[0] <= w[1])) {
                return Err(BadCosts::Spread(name));
            }
        }
        if !self.hot_ticks.is_finite() {
            return Err(BadCosts::Spread("hot_ticks"));
        }
        Ok(())
    }
}

/// Why buffer costs read from a file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BadCosts {
    /// `bytes` is 0.
    #[error("the buffer has no bytes: make the file with `shmnet calibrate --json > FILE`")]
    NoBuffer,
    /// A spread is not finite or not in order.
    #[error(
        "{0} is not finite or its percentiles are out of order (p10 ≤ p25 ≤ p50 ≤ p75 ≤ p90; files from before shmnet recorded p25 and p75 lack them): make the file with `shmnet calibrate --json > FILE`"
    )]
    Spread(&'static str),
}

/// Where the TLB figures came from.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct TlbMethod {
    /// Bytes spanned by the spread lines.
    pub span_bytes: usize,
    /// Lines visited (one per 4 KiB of the span).
    pub lines: usize,
    /// Whether the 2 MiB measurement really ran on huge pages.
    pub huge_backed: bool,
}

/// The CPU as cpuid names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cpu {
    /// `GenuineIntel`, `AuthenticAMD`, … (empty without cpuid).
    #[serde(default)]
    pub vendor: String,
    /// The brand string.
    #[serde(default)]
    pub brand: String,
}

/// This machine's Table 1.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Table1 {
    /// The machine.
    pub machine: Machine,
    /// The timer.
    pub timer: Timer,
    /// Ticks per line load by level (medians).
    pub line_load_ticks: LineLoads,
    /// Their spread.
    pub line_load_spread: [Spread; 5],
    /// Working set of each line-load figure, bytes (l1, l2, l3, dram).
    pub working_sets: [usize; 4],
    /// The last-level cache this process can really use.
    pub effective_llc: EffectiveLlc,
    /// Ticks a TLB miss adds.
    pub tlb_miss_ticks: TlbMiss,
    /// How the TLB figures were taken.
    pub tlb_method: TlbMethod,
    /// `memcpy` in Gbit/s.
    pub memcpy_gbit_per_s: Memcpy,
    /// The probe's buffer load at the default buffer size (1,480 B).
    pub buffer: BufferCosts,
    /// The marks read off `buffer` ([`BufferCosts::marks`]).
    pub marks: Marks,
    /// Why the marks cannot classify buffers on this machine (null: they can).
    pub degenerate: Option<Degeneracy>,
    /// The CPU, from cpuid.
    pub cpu: Cpu,
    /// The caches, as the kernel describes them (cpuid's where it lists none).
    pub caches: Vec<CacheInfo>,
    /// Where `caches` came from: `sysfs`, `cpuid` or `none`.
    pub cache_source: CacheSource,
    /// The TLBs as cpuid describes them (Intel leaf 0x18; AMD 0x8000_0005/6/19); empty
    /// where it does not (a VM may hide the leaf). Geometry only: what a miss costs is
    /// `tlb_miss_ticks`.
    pub tlbs: Vec<TlbInfo>,
    /// Anything the reader should know (guessed sizes, no huge pages, …).
    pub notes: Vec<String>,
}

/// The buffer the residency experiment times by default: a 1,480-byte IP fragment payload
/// behind 34 bytes of Ethernet and IPv4 header.
pub const DEFAULT_BUFFER: (usize, usize) = (1480, 34);

/// Pins the calling thread to the CPU it is on, and restores its affinity when dropped.
pub struct Pinned {
    old: Option<rustix::thread::CpuSet>,
}

impl Pinned {
    /// Pins to the current CPU (or `cpu`, if given).
    pub fn here(cpu: Option<usize>) -> Self {
        let old = rustix::thread::sched_getaffinity(None).ok();
        let cpu = cpu.unwrap_or_else(rustix::thread::sched_getcpu);
        tsc::pin_to(cpu);
        Self { old }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(set) = &self.old {
            let _ = rustix::thread::sched_setaffinity(None, set);
        }
    }
}

/// Measures Table 1. `progress` is told what is being measured.
pub fn run(effort: Effort, progress: &mut dyn FnMut(&str)) -> Result<Table1, mem::MapError> {
    let machine = Machine::this();
    let _pin = Pinned::here(None);
    let geometry = cpuid::read();
    let sysfs = cacheinfo::caches();
    let mut notes: Vec<String> = cacheinfo::disagreements(&sysfs, &geometry.caches)
        .into_iter()
        .map(|d| {
            format!("the kernel and cpuid describe a cache differently ({d}); the kernel's is used")
        })
        .collect();
    let (caches, cache_source) = cacheinfo::choose(sysfs, &geometry.caches);
    match cache_source {
        CacheSource::Cpuid => notes.push("the kernel lists no caches (/sys/devices/system/cpu/cpu0/cache): the caches are cpuid's".into()),
        CacheSource::None => notes.push("neither the kernel nor cpuid describes the caches".into()),
        CacheSource::Sysfs => {}
    }
    if geometry.tlbs.is_empty() {
        notes.push(format!(
            "cpuid describes no TLB ({}): the simulator will assume AMD Zen 4's TLB geometry for this calibration",
            if geometry.vendor == "GenuineIntel" {
                "leaf 0x18 absent or all zero, as a hypervisor may make it"
            } else {
                "no TLB leaf answered"
            }
        ));
    }
    let sizes = Sizes::from_caches(&caches);
    if sizes.guessed {
        notes.push(format!(
            "the kernel did not describe every cache: planned with L1d {} KiB, L2 {} KiB, last level {} MiB",
            sizes.l1d >> 10,
            sizes.l2 >> 10,
            sizes.llc >> 20
        ));
    }
    progress("timer");
    let cal = Calibration::measure(Duration::from_millis(50), 20_000);
    let timer = Timer {
        overhead_ticks: cal.empty_window_ticks,
        quantum_ticks: cal.step_ticks,
        ticks_per_ns: cal.ticks_per_ns,
    };
    let empty = cal.empty_window_ticks as f64;

    progress("effective last-level cache");
    let effective_llc = effective_llc(&sizes, effort, empty)?;
    if effective_llc.bytes > 0 && (effective_llc.bytes as u64) < sizes.llc / 2 {
        notes.push(format!(
            "this process gets about {} MiB of the {} MiB last-level cache (other tenants, or partitioning)",
            effective_llc.bytes >> 20,
            sizes.llc >> 20
        ));
    }
    let llc_bytes = effective_llc.bytes as u64;

    progress("line loads: L1, L2, last level");
    let ws = working_sets(&sizes, llc_bytes);
    let mut spreads = [Spread::default(); 5];
    for (i, &bytes) in ws[..3].iter().enumerate() {
        spreads[i] = cached_line_load(bytes, effort, empty)?;
    }
    progress("line loads: memory, clean and dirty victims");
    let sweep_bytes = 2 * (sizes.l2 + sizes.llc) as usize;
    let sweeper = Region::new(sweep_bytes, Paging::Huge)?;
    let (clean, dirty) = memory_line_load(ws[3], &sweeper, sweep_bytes, effort, empty)?;
    spreads[3] = clean;
    spreads[4] = dirty;
    drop(sweeper);
    if !spreads.windows(2).take(3).all(|w| w[0].p50 < w[1].p50) {
        notes.push(format!(
            "line loads do not rise from L1 to memory ({:.0}, {:.0}, {:.0}, {:.0} ticks): a busy machine, or a level this method cannot isolate; read the figures with care",
            spreads[0].p50, spreads[1].p50, spreads[2].p50, spreads[3].p50
        ));
    }

    progress("TLB misses");
    let (tlb, tlb_method) = tlb_miss(effort, empty)?;
    if !tlb_method.huge_backed {
        notes.push(
            "no transparent huge pages were given (see /sys/kernel/mm/transparent_hugepage/enabled): the 2 MiB TLB figure is missing, and line loads may include TLB misses".into(),
        );
    }

    progress("memcpy");
    let gbit = |bytes| memcpy_gbit(bytes, effort, &cal);
    let memcpy = Memcpy {
        b1500: gbit(1500),
        b8192: gbit(8192),
        b1m: gbit(1 << 20),
    };

    progress("buffer loads");
    let buffer = buffer_costs(DEFAULT_BUFFER.0, DEFAULT_BUFFER.1, &sizes, effort)?;
    if llc_bytes > 0 && buffer.llc_sweep_bytes as u64 > llc_bytes / 2 {
        notes.push(format!(
            "pushing the buffer out of L2 takes {} KiB, more than half the {} KiB of last level this process gets: the \"from the last-level cache\" load may come partly from memory",
            buffer.llc_sweep_bytes >> 10,
            llc_bytes >> 10
        ));
    }
    let marks = buffer.marks();
    let degenerate = marks.degeneracy();

    Ok(Table1 {
        machine,
        timer,
        line_load_ticks: LineLoads {
            l1: spreads[0].p50,
            l2: spreads[1].p50,
            l3: spreads[2].p50,
            dram: spreads[3].p50,
            dram_dirty: spreads[4].p50,
        },
        line_load_spread: spreads,
        working_sets: ws,
        effective_llc,
        tlb_miss_ticks: tlb,
        tlb_method,
        memcpy_gbit_per_s: memcpy,
        buffer,
        marks,
        degenerate,
        cpu: Cpu {
            vendor: geometry.vendor,
            brand: geometry.brand,
        },
        caches,
        cache_source,
        tlbs: geometry.tlbs,
        notes,
    })
}

/// Working sets that sit in L1, L2, the last level, and memory. `llc_bytes`: the effective
/// last-level cache (what this process really gets; the reported size when 0), which the
/// last level's working set must stay inside.
fn working_sets(s: &Sizes, llc_bytes: u64) -> [usize; 4] {
    let llc = if llc_bytes == 0 { s.llc } else { llc_bytes };
    let l1 = (s.l1d / 2) as usize;
    let l2 = ((s.l2 / 2).max(s.l1d * 4)) as usize;
    let mid = ((s.l2 as f64 * llc as f64).sqrt() as u64).next_power_of_two() / 2;
    let l3 = (mid.max(s.l2 * 2)) as usize;
    let dram = ((s.llc * 8).clamp(64 << 20, 1 << 30)) as usize;
    [l1, l2, l3, dram]
}

/// The offsets of every line of `bytes`.
fn all_lines(bytes: usize) -> Vec<usize> {
    (0..bytes / LINE).map(|i| i * LINE).collect()
}

/// The last-level cache this process can really use, and the latency curve it was read
/// from.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct EffectiveLlc {
    /// The largest working set whose chase stays nearer the last level's latency than
    /// memory's (0: not measured).
    pub bytes: usize,
    /// `(working set bytes, median ticks per load)`, from twice L2 to twice the last level.
    pub curve: Vec<(usize, f64)>,
}

/// Finds the effective last-level cache: on a shared or virtual machine, other tenants (or
/// cache partitioning) can leave a process far less than the size the kernel reports. A
/// chase over working sets from twice L2 to twice the last level, in steps of √2; the
/// capacity is the largest set whose latency stays below twice that of the smallest (which
/// sits in the last level): beyond the knee, loads go to memory.
fn effective_llc(sizes: &Sizes, effort: Effort, empty: f64) -> Result<EffectiveLlc, mem::MapError> {
    let mut knee = f64::INFINITY;
    let (lo, hi) = ((sizes.l2 * 2) as f64, (sizes.llc * 2) as f64);
    let mut curve = Vec::new();
    let mut size = lo;
    let mut bytes = 0;
    while size <= hi * 1.01 {
        let ws = (size as usize).next_multiple_of(LINE * 64);
        let t = cached_line_load(
            ws,
            Effort {
                windows: effort.windows.min(11),
            },
            empty,
        )?
        .p50;
        if curve.is_empty() {
            knee = 2.0 * t;
        }
        curve.push((ws, t));
        if t < knee {
            bytes = ws;
        }
        size *= std::f64::consts::SQRT_2;
    }
    Ok(EffectiveLlc { bytes, curve })
}

fn cached_line_load(bytes: usize, effort: Effort, empty: f64) -> Result<Spread, mem::MapError> {
    let r = Region::new(bytes, Paging::Huge)?;
    let lines = all_lines(bytes);
    let mut p = mem::build_chase(&r, &lines, bytes as u64);
    let steps = lines.len().clamp(4096, 1 << 16);
    // SAFETY: `p` is a chase on `r`, alive for this function.
    p = unsafe { mem::chase(p, lines.len() * 2) };
    let mut v = Vec::with_capacity(effort.windows);
    for _ in 0..effort.windows {
        let t0 = tsc::start();
        // SAFETY: as above.
        p = unsafe { mem::chase(p, steps) };
        let t1 = tsc::stop();
        v.push(((t1 - t0) as f64 - empty) / steps as f64);
    }
    Ok(Spread::of(&mut v))
}

/// Ticks per load from memory behind clean and behind dirty victims.
fn memory_line_load(
    bytes: usize,
    sweeper: &Region,
    sweep_bytes: usize,
    effort: Effort,
    empty: f64,
) -> Result<(Spread, Spread), mem::MapError> {
    let r = Region::new(bytes, Paging::Huge)?;
    let lines = all_lines(bytes);
    let mut p = mem::build_chase(&r, &lines, 1);
    // Few loads per window, far fewer than the lines the caches hold, so that nearly every
    // fill displaces a line of the sweep rather than one of the chase's own.
    let steps = 2048;
    let mut clean = Vec::new();
    let mut dirty = Vec::new();
    for i in 0..effort.windows * 2 {
        let is_dirty = i % 2 == 1;
        mem::sweep(sweeper, sweep_bytes, is_dirty);
        let t0 = tsc::start();
        // SAFETY: `p` is a chase on `r`, alive for this function.
        p = unsafe { mem::chase(p, steps) };
        let t1 = tsc::stop();
        let per = ((t1 - t0) as f64 - empty) / steps as f64;
        if is_dirty {
            dirty.push(per)
        } else {
            clean.push(per)
        }
    }
    Ok((Spread::of(&mut clean), Spread::of(&mut dirty)))
}

/// The page-walk cost per load with 4 KiB pages, and what remains of it on 2 MiB pages.
fn tlb_miss(effort: Effort, empty: f64) -> Result<(TlbMiss, TlbMethod), mem::MapError> {
    const SPAN: usize = 64 << 20;
    let lines = SPAN / 4096;
    // One line per page, its offset in the page stepping once every 32 pages, so that the
    // lines' addresses (physical ones too, on 2 MiB pages) spread over 2,048 consecutive
    // sets — as many as a 1 MiB L2 has — as the packed lines do; line `i % 64` in page `i`
    // would crowd 64 sets.
    let spread: Vec<usize> = (0..lines)
        .map(|i| i * 4096 + ((i >> 5) % 64) * LINE)
        .collect();
    let packed = all_lines(lines * LINE);
    let time = |r: &Region, offsets: &[usize]| {
        let mut p = mem::build_chase(r, offsets, 3);
        // SAFETY: `p` is a chase on `r`, which outlives this closure's use of it.
        p = unsafe { mem::chase(p, offsets.len() * 2) };
        let mut v = Vec::with_capacity(effort.windows);
        for _ in 0..effort.windows {
            let t0 = tsc::start();
            // SAFETY: as above.
            p = unsafe { mem::chase(p, offsets.len()) };
            let t1 = tsc::stop();
            v.push(((t1 - t0) as f64 - empty) / offsets.len() as f64);
        }
        tsc::median(&mut v)
    };
    let packed_region = Region::new(lines * LINE, Paging::Small)?;
    let base = time(&packed_region, &packed);
    drop(packed_region);
    let small = Region::new(SPAN, Paging::Small)?;
    let small_cost = time(&small, &spread);
    drop(small);
    let huge = Region::new(SPAN, Paging::Huge)?;
    let huge_backed = huge.huge_backed().unwrap_or(false);
    let huge_cost = time(&huge, &spread);
    Ok((
        TlbMiss {
            small: (small_cost - base).max(0.0),
            huge: huge_backed.then(|| (huge_cost - base).max(0.0)),
        },
        TlbMethod {
            span_bytes: SPAN,
            lines,
            huge_backed,
        },
    ))
}

/// `memcpy` of `bytes` between two warm buffers, Gbit/s (median window).
fn memcpy_gbit(bytes: usize, effort: Effort, cal: &Calibration) -> f64 {
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    let reps = ((1 << 20) / bytes).clamp(1, 1000);
    dst.copy_from_slice(&src);
    let mut v = Vec::with_capacity(effort.windows);
    for _ in 0..effort.windows {
        let t0 = tsc::start();
        for _ in 0..reps {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        let t1 = tsc::stop();
        let ns = cal.ns((t1 - t0).saturating_sub(cal.empty_window_ticks).max(1) as f64);
        v.push((bytes * reps * 8) as f64 / ns);
    }
    tsc::median(&mut v)
}

/// How much to load to push a buffer out of L2 and leave it in the last level: twice L2
/// (every set of L2 refilled twice over) and no more, so that the sweep itself evicts as
/// little of the last level as it can. Where that is more than half the effective last
/// level, the buffer may be pushed to memory: [`run`] notes it, and the marks' overlap check
/// ([`Marks::degeneracy`]) says what it did to them.
fn llc_sweep_bytes(sizes: &Sizes) -> usize {
    (sizes.l2 * 2) as usize
}

/// What loading a `bytes` buffer starting `line_offset` bytes into a line costs, hot, from
/// L2, from the last-level cache and from memory.
pub fn buffer_costs(
    bytes: usize,
    line_offset: usize,
    sizes: &Sizes,
    effort: Effort,
) -> Result<BufferCosts, mem::MapError> {
    let _pin = Pinned::here(None);
    // Each sample costs a few sweeps of L2's size (well under a millisecond); enough samples
    // that the marks' 10th and 90th percentiles are stable from run to run.
    let samples = effort.windows * 25;
    let buf_region = Region::new(bytes + 2 * LINE, Paging::Small)?;
    // SAFETY: `line_offset % 64 + bytes` fits the region (2 MiB).
    let src = unsafe { buf_region.ptr().add(line_offset % LINE) };
    let sweep_l2 = (sizes.l2 * 2) as usize;
    let push_to_llc = llc_sweep_bytes(sizes);
    let push_to_l2 = (sizes.l1d * 4).min(sizes.l2 / 2) as usize;
    let sweeper = Region::new(sweep_l2.max(push_to_llc), Paging::Huge)?;
    let timed = || {
        let t0 = tsc::start();
        // SAFETY: `src .. src + bytes` is inside `buf_region`.
        unsafe { mem::load(src, bytes) };
        let t1 = tsc::stop();
        (t1 - t0) as f64
    };
    let (mut hot, mut l2, mut llc, mut clean, mut dirty) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..samples {
        timed();
        hot.push(timed());
        mem::sweep(&sweeper, push_to_l2, false);
        l2.push(timed());
        mem::sweep(&sweeper, push_to_llc, false);
        llc.push(timed());
        mem::sweep(&sweeper, sweep_l2, false);
        // SAFETY: the buffer's lines are mapped.
        unsafe { mem::flush(src, bytes) };
        clean.push(timed());
        mem::sweep(&sweeper, sweep_l2, true);
        // SAFETY: as above.
        unsafe { mem::flush(src, bytes) };
        dirty.push(timed());
    }
    let hot_ticks = tsc::median(&mut hot);
    let over = |v: &mut Vec<f64>| {
        let mut o: Vec<f64> = v.iter().map(|t| t - hot_ticks).collect();
        Spread::of(&mut o)
    };
    Ok(BufferCosts {
        bytes,
        line_offset: line_offset % LINE,
        hot_ticks,
        l2_overhead: over(&mut l2),
        llc_overhead: over(&mut llc),
        llc_sweep_bytes: push_to_llc,
        clean_overhead: over(&mut clean),
        dirty_overhead: over(&mut dirty),
    })
}

impl std::fmt::Display for Table1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = &self.timer;
        writeln!(f, "Table 1 on {}", self.machine)?;
        writeln!(
            f,
            "timer: empty window {} ticks, quantum {} ticks, {:.3} ticks/ns",
            t.overhead_ticks, t.quantum_ticks, t.ticks_per_ns
        )?;
        writeln!(
            f,
            "\n{:<38} {:>9} {:>9} {:>9} {:>9}",
            "event", "ticks", "p10", "p90", "ns"
        )?;
        let names = [
            "line load from L1",
            "line load from L2",
            "line load from last-level cache",
            "line fill from memory, clean victim",
            "line fill from memory, dirty victim",
        ];
        for (name, s) in names.iter().zip(&self.line_load_spread) {
            writeln!(
                f,
                "{name:<38} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                s.p50,
                s.p10,
                s.p90,
                s.p50 / t.ticks_per_ns
            )?;
        }
        let tl = &self.tlb_miss_ticks;
        writeln!(
            f,
            "{:<38} {:>9.1} {:>9} {:>9} {:>9.1}",
            "TLB miss, 4 KiB pages (page walk)",
            tl.small,
            "",
            "",
            tl.small / t.ticks_per_ns
        )?;
        match tl.huge {
            Some(h) => writeln!(
                f,
                "{:<38} {:>9.1} {:>9} {:>9} {:>9.1}",
                "same span on 2 MiB pages",
                h,
                "",
                "",
                h / t.ticks_per_ns
            )?,
            None => writeln!(f, "{:<38} {:>9}", "same span on 2 MiB pages", "n/a")?,
        }
        let b = &self.buffer;
        writeln!(
            f,
            "\nloading one {} B buffer (the residency probe's load), overhead beyond L1 ({:.0} ticks):",
            b.bytes, b.hot_ticks
        )?;
        for (name, s) in [
            ("from L2", &b.l2_overhead),
            ("from the last-level cache", &b.llc_overhead),
            ("100 % clean miss", &b.clean_overhead),
            ("100 % dirty miss", &b.dirty_overhead),
        ] {
            writeln!(
                f,
                "  {name:<36} {:>9.0} {:>9.0} {:>9.0}",
                s.p50, s.p10, s.p90
            )?;
        }
        let k = &self.marks;
        writeln!(
            f,
            "  marks: in cache ≤ {:.0}, 100 % clean miss {:.0}, 100 % dirty miss {:.0} ({MARK_RULE}; last-level sweep {} KiB)",
            k.cached_max,
            k.clean,
            k.dirty,
            b.llc_sweep_bytes >> 10
        )?;
        if let Some(d) = self.degenerate {
            writeln!(f, "  WARNING: {d}")?;
        }
        let m = &self.memcpy_gbit_per_s;
        writeln!(
            f,
            "\nmemcpy: {:.0} Gbit/s at 1,500 B, {:.0} at 8 KiB, {:.0} at 1 MiB",
            m.b1500, m.b8192, m.b1m
        )?;
        let ws = self.working_sets;
        writeln!(
            f,
            "working sets: {} KiB, {} KiB, {} MiB, {} MiB; TLB span {} MiB ({} lines, 2 MiB pages {})",
            ws[0] >> 10,
            ws[1] >> 10,
            ws[2] >> 20,
            ws[3] >> 20,
            self.tlb_method.span_bytes >> 20,
            self.tlb_method.lines,
            if self.tlb_method.huge_backed {
                "given"
            } else {
                "refused"
            }
        )?;
        let source = match self.cache_source {
            CacheSource::Sysfs => "the kernel",
            CacheSource::Cpuid => "cpuid",
            CacheSource::None => "nowhere",
        };
        let caches: Vec<String> = self
            .caches
            .iter()
            .map(|c| {
                let kind = match c.kind.as_str() {
                    "data" => "D",
                    "instruction" => "I",
                    _ => "",
                };
                format!(
                    "L{}{kind} {} KiB {}-way",
                    c.level,
                    c.size_bytes >> 10,
                    c.ways
                )
            })
            .collect();
        writeln!(
            f,
            "cpu: {} ({}); caches from {source}: {}",
            if self.cpu.brand.is_empty() {
                "?"
            } else {
                &self.cpu.brand
            },
            if self.cpu.vendor.is_empty() {
                "no cpuid"
            } else {
                &self.cpu.vendor
            },
            caches.join(", ")
        )?;
        if self.tlbs.is_empty() {
            writeln!(f, "TLBs: cpuid describes none")?;
        }
        for t in &self.tlbs {
            writeln!(f, "TLB (cpuid): {}", t.describe())?;
        }
        let e = &self.effective_llc;
        if e.bytes > 0 {
            let curve: Vec<String> = e
                .curve
                .iter()
                .map(|(b, t)| format!("{:.1} MiB {t:.0}", *b as f64 / (1 << 20) as f64))
                .collect();
            writeln!(
                f,
                "effective last-level cache: {:.1} MiB (ticks per load by working set: {})",
                e.bytes as f64 / (1 << 20) as f64,
                curve.join(", ")
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
    fn spread_orders_its_percentiles() {
        let mut v: Vec<f64> = (0..101).rev().map(f64::from).collect();
        let s = Spread::of(&mut v);
        assert_eq!(
            (s.p10, s.p25, s.p50, s.p75, s.p90),
            (10.0, 25.0, 50.0, 75.0, 90.0)
        );
        assert_eq!(Spread::of(&mut []), Spread::default());
    }

    fn costs(llc: Spread, clean: Spread, dirty: Spread) -> BufferCosts {
        BufferCosts {
            llc_overhead: llc,
            clean_overhead: clean,
            dirty_overhead: dirty,
            ..BufferCosts::default()
        }
    }

    fn spread(p10: f64, p25: f64, p50: f64, p75: f64, p90: f64) -> Spread {
        Spread {
            p10,
            p25,
            p50,
            p75,
            p90,
        }
    }

    #[test]
    fn marks_come_from_the_upper_cached_and_lower_miss_quartiles() {
        let b = costs(
            spread(60.0, 70.0, 75.0, 120.0, 170.0),
            spread(300.0, 320.0, 340.0, 400.0, 540.0),
            spread(280.0, 300.0, 390.0, 450.0, 610.0),
        );
        let m = b.marks();
        assert_eq!(m.cached_max, 120.0);
        assert_eq!(m.clean, 320.0);
        assert_eq!(
            m.dirty, 320.0,
            "a dirty mark below the clean one is raised to it"
        );
        assert_eq!(m.degeneracy(), None);
    }

    /// The machine the issue reported: the last-level load (3,210 ticks) above the clean
    /// miss (2,220). The marks are not clamped into an order; they say they are degenerate.
    #[test]
    fn overlapping_distributions_are_reported_not_clamped() {
        let b = costs(
            spread(2900.0, 3000.0, 3210.0, 3400.0, 3600.0),
            spread(2100.0, 2150.0, 2220.0, 2300.0, 2500.0),
            spread(2300.0, 2350.0, 2400.0, 2500.0, 2700.0),
        );
        let m = b.marks();
        assert_eq!(m.degeneracy(), Some(Degeneracy::CacheOverlapsMiss));
        assert!(m.cached_max > m.clean, "{m:?}");
        // Overlapping quartiles are degenerate too: the upper quartile of the cached load
        // reaches the lower quartile of the miss.
        let quartiles = costs(
            spread(60.0, 70.0, 75.0, 330.0, 400.0),
            spread(300.0, 320.0, 340.0, 400.0, 540.0),
            spread(330.0, 350.0, 390.0, 450.0, 610.0),
        );
        assert_eq!(
            quartiles.marks().degeneracy(),
            Some(Degeneracy::CacheOverlapsMiss)
        );
        // A long tail alone is not: p90 of the cached load above p10 of the miss.
        let tail = costs(
            spread(60.0, 70.0, 75.0, 120.0, 330.0),
            spread(300.0, 320.0, 340.0, 400.0, 540.0),
            spread(330.0, 350.0, 390.0, 450.0, 610.0),
        );
        assert_eq!(tail.marks().degeneracy(), None);
    }

    #[test]
    fn working_sets_sit_in_their_levels() {
        let s = Sizes {
            l1d: 32 << 10,
            l2: 1 << 20,
            llc: 32 << 20,
            guessed: false,
        };
        for effective in [0, 6 << 20, 32 << 20] {
            let [l1, l2, l3, dram] = working_sets(&s, effective);
            let llc = if effective == 0 {
                32 << 20
            } else {
                effective as usize
            };
            assert!(l1 < (32 << 10));
            assert!(l2 > (32 << 10) && l2 < (1 << 20));
            assert!(l3 > (1 << 20) && l3 < llc, "{l3} in {llc}");
            assert!(dram > (32 << 20));
        }
    }
}
