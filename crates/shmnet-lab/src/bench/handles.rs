//! `shmnet bench handles`: what a translation costs the data plane — a lookup-cache hit
//! (seed 004's VMH cache, [`shmnet_chan::handles`]) per descriptor for each associativity,
//! beside the plain bounds check a server with one static table per application would do,
//! measured in the same run.
//!
//! One application registers a 64 MiB region (a sparse memfd: nothing is touched). The
//! handles are 1,500-byte sends at random page-aligned-or-not offsets over as many distinct
//! pages as fit in half the cache, in a shuffled order, so every lookup hits after one
//! warm-up pass (the misses are served inline here; their cost is `shmnet lab handles`'
//! business). Each figure is the median of repetitions of a timed pass over all handles.

use shmnet_chan::handles::{
    Access, CacheGeometry, Handle, LookupCache, LookupError, Pch, Perms, Region, RegionId,
    RegionTable, SetIndex, TableLimits, Translation,
};
use std::hint::black_box;
use std::time::Instant;

/// C and L of every row (the seed's best trade-off was C16, L64, A4; L here is smaller so
/// that the handles of a pass spread over many sets).
pub const ENTRIES: u32 = 16 * 1024;
/// L.
pub const LINE: u32 = 16;
/// The associativities measured (with shmnet's skewed set index; A = 4 also with the
/// seed's).
pub const WAYS: [u32; 4] = [1, 2, 4, 8];
/// The bar for a hit at A = 4, in nanoseconds per descriptor.
pub const TARGET_NS: f64 = 10.0;

/// One associativity.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// C.
    pub entries: u32,
    /// L.
    pub line: u32,
    /// A.
    pub ways: u32,
    /// The set index: shmnet's skewed one, or (one row, for comparison) the seed's.
    pub index: SetIndex,
    /// Nanoseconds per descriptor translated through the cache (all hits).
    pub lookup_ns: f64,
    /// Nanoseconds per descriptor with a plain bounds check, same handles, same run.
    pub bounds_ns: f64,
    /// Bytes the cache keeps.
    pub cache_bytes: usize,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HandlesReport {
    /// Descriptors per timed pass.
    pub handles: usize,
    /// Timed repetitions per figure, each of several passes (the median is reported).
    pub reps: usize,
    /// One row per associativity.
    pub rows: Vec<Row>,
    /// Whether the A = 4 hit met [`TARGET_NS`].
    pub target_met: Option<bool>,
    /// Why the run could not be made, if it could not.
    pub error: Option<String>,
}

/// Runs the benchmark.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> HandlesReport {
    let reps = if quick { 5 } else { 15 };
    let mut report = HandlesReport {
        handles: 0,
        reps,
        rows: Vec::new(),
        target_met: None,
        error: None,
    };
    let region_bytes: u64 = 64 << 20;
    let mut table = RegionTable::new(
        TableLimits::default(),
        CacheGeometry::new(ENTRIES, LINE, 1).expect("a valid geometry"),
    );
    // A sparse memfd: nothing is touched but the pages the warm-up pins.
    let fd = match Region::create("shmnet-bench-handles", region_bytes) {
        Ok(fd) => fd,
        Err(e) => {
            report.error = Some(format!("creating the region: {e}"));
            return report;
        }
    };
    let app = Pch(1);
    let region = match table.register(app, fd.fd(), Perms::READ_WRITE) {
        Ok(r) => r,
        Err(e) => {
            report.error = Some(format!("registering the region: {e}"));
            return report;
        }
    };
    let handles = handles(app, region, region_bytes, (ENTRIES / 2) as usize);
    report.handles = handles.len();
    let rows = WAYS
        .map(|a| (a, SetIndex::Skewed))
        .into_iter()
        .chain([(4, SetIndex::LowBits)]);
    for (ways, index) in rows {
        progress(&format!("A = {ways}, {index:?}"));
        let geo = CacheGeometry::new(ENTRIES, LINE, ways)
            .expect("a valid geometry")
            .with_index(index);
        let mut cache = LookupCache::new(geo);
        // Warm up: serve every miss inline, until a whole pass hits.
        let mut out = [Translation::NONE; shmnet_chan::handles::cache::MAX_LINE];
        for _ in 0..8 {
            let mut missed = false;
            for h in &handles {
                while let Err(LookupError::Miss(k)) = cache.translate(h, Access::Read) {
                    table.serve_miss(k, &mut out);
                    cache.fill(k, &out[..LINE as usize]);
                    missed = true;
                }
            }
            if !missed {
                break;
            }
        }
        let bounds = Bounds {
            base: handles_base(&mut cache, &handles),
            len: region_bytes,
        };
        let mut lookup = Vec::with_capacity(reps);
        let mut plain = Vec::with_capacity(reps);
        for _ in 0..reps {
            lookup.push(time_per(&handles, |h| {
                cache
                    .translate(h, Access::Read)
                    .map_or(0, |p| p.as_ptr() as usize)
            }));
            plain.push(time_per(&handles, |h| bounds.check(h)));
        }
        report.rows.push(Row {
            entries: ENTRIES,
            line: LINE,
            ways,
            index,
            lookup_ns: median(&mut lookup),
            bounds_ns: median(&mut plain),
            cache_bytes: geo.bytes(),
        });
    }
    report.target_met = report
        .rows
        .iter()
        .find(|r| r.ways == 4 && r.index == SetIndex::Skewed)
        .map(|r| r.lookup_ns <= TARGET_NS);
    report
}

/// `n` 1,500-byte handles on distinct pages (one per page, never crossing into a page not in
/// the set), shuffled.
fn handles(app: Pch, region: RegionId, region_bytes: u64, n: usize) -> Vec<Handle> {
    let pages = region_bytes / 4096;
    let mut rng = fastrand::Rng::with_seed(0x4a4d);
    let mut chosen: Vec<u64> = (0..pages).collect();
    rng.shuffle(&mut chosen);
    chosen.truncate(n);
    chosen
        .iter()
        .map(|&p| Handle {
            app,
            region,
            off: p * 4096 + rng.u64(0..(4096 - 1500)),
            len: 1500,
        })
        .collect()
}

/// The region's base in the server's mapping, read back through the warmed cache.
fn handles_base(cache: &mut LookupCache, handles: &[Handle]) -> usize {
    let h = handles[0];
    let p = cache
        .translate(&h, Access::Read)
        .map_or(0, |p| p.as_ptr() as usize);
    p - h.off as usize
}

/// The baseline: one region per application in a flat table, checked by bounds only.
struct Bounds {
    base: usize,
    len: u64,
}

impl Bounds {
    #[inline(never)]
    fn check(&self, h: &Handle) -> usize {
        match h.off.checked_add(u64::from(h.len)) {
            Some(end) if h.region.0 == 0 && h.len > 0 && end <= self.len => {
                self.base + h.off as usize
            }
            _ => 0,
        }
    }
}

/// Passes over the handles per timed repetition (about a millisecond: long enough for the
/// clock, short enough to dodge most interruptions).
const PASSES: usize = 16;

/// Nanoseconds per handle of [`PASSES`] passes of `f` over `handles`.
fn time_per(handles: &[Handle], mut f: impl FnMut(&Handle) -> usize) -> f64 {
    let start = Instant::now();
    let mut sum = 0usize;
    for _ in 0..PASSES {
        for h in handles {
            sum = sum.wrapping_add(f(black_box(h)));
        }
    }
    black_box(sum);
    start.elapsed().as_nanos() as f64 / (PASSES * handles.len()) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl std::fmt::Display for HandlesReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(e) = &self.error {
            return writeln!(f, "handles: could not run: {e}");
        }
        writeln!(
            f,
            "lookup-cache hit per descriptor ({} handles of 1,500 B on distinct pages, median of {} repetitions of {PASSES} passes)",
            self.handles, self.reps
        )?;
        writeln!(
            f,
            "{:>6} {:>4} {:>3} {:>7} {:>11} {:>11} {:>7} {:>10}",
            "C", "L", "A", "index", "hit ns", "bounds ns", "÷", "cache B"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>6} {:>4} {:>3} {:>7} {:>11.2} {:>11.2} {:>7.2} {:>10}",
                r.entries,
                r.line,
                r.ways,
                match r.index {
                    SetIndex::Skewed => "skewed",
                    SetIndex::LowBits => "seed",
                },
                r.lookup_ns,
                r.bounds_ns,
                r.lookup_ns / r.bounds_ns,
                r.cache_bytes
            )?;
        }
        match self.target_met {
            Some(met) => writeln!(
                f,
                "target: a hit at A = 4 costs ≤ {TARGET_NS} ns per descriptor: {}",
                if met { "MET" } else { "NOT MET" }
            ),
            None => Ok(()),
        }
    }
}
