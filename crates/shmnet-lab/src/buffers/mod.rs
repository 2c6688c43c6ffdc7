//! `shmnet lab buffers`: seed 003's experiment (Qu, Gou, Cheng, *Using Uncacheable Memory to
//! Improve Unity Linux Performance*) on this machine — what it costs to keep a network
//! buffer K coherent with a device that does not snoop the caches, by the three methods of
//! its Table I ([`coherence`]), on send and receive, by data length and by how much of the
//! data cache is dirty (its Fig. 1), beside what its equations (1)–(6) predict from per-line
//! costs calibrated here ([`model`]) and what they predict for the seed's own machine.
//!
//! Written here rather than taken from a crate: the methods are cache-maintenance sequences
//! timed with the TSC, the subject of the experiment.
//!
//! One cell is a (direction, method, length, dirty ratio); each sample first reads every
//! line of an L1d-sized region and writes the dirty fraction of them (the seed's `R_d`),
//! reads the application's buffer U (it is in the cache, as the seed assumes), then times:
//! - send: the copy U → K and what the method does before the device may read K;
//! - receive: what the method does to K before the device writes it (timed), the device's
//!   write (not timed: non-temporal stores, so K's lines are not cached, as after a DMA
//!   write), then the stack's reads of the header and the copy K → U (timed).
//!
//! Each cell's figure is the mean of the middle half of its samples (robust as a median, and
//! finer than the counter's step), the empty timing window subtracted.
//! Beside Fig. 1, the side effect its Table I names: cache pollution, an application's
//! working set timed after 32 packets under each method ([`pollution`]).
//!
//! Not built yet (issue 18): the methods on the server's pools and drivers
//! (`--buffers send=nc,…`), an `auto` mode, the TCP stream and request/response analogs of
//! the seed's Fig. 2 and 3, and the seed's machine in shmnet-sim.

pub mod coherence;
pub mod model;
pub mod pollution;
pub mod tcp;
pub mod unity;

use crate::cacheinfo::Sizes;
use crate::mem::{LINE, Paging, Region};
use crate::plot::{Bar, Group, Panel, Scale};
use crate::tsc;
use coherence::{CpuOps, Ctx, Junk, Mode};
use model::{Direction, Params};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Packet lengths of the seed's Fig. 1 range (64 B to 64 KiB, the Ethernet sizes among them).
pub const LENGTHS: [usize; 10] = [64, 128, 256, 512, 1024, 1500, 4096, 9000, 16_384, 65_536];
/// Dirty ratios of the seed's Fig. 1.
pub const DIRTY: [f64; 5] = [0.0, 0.0625, 0.25, 0.5, 1.0];
/// The largest Ethernet frame the seed sizes its receive-side software clean for.
const MAX_FRAME: usize = 1536;

/// What to run.
#[derive(Clone, Debug)]
pub struct BuffersLabOptions {
    /// 51 samples per cell instead of 1,001.
    pub quick: bool,
    /// Where report.md, the PNGs and report.json go.
    pub out: PathBuf,
}

/// The cache geometry the methods use here.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Geometry {
    /// Bytes per line.
    pub line: usize,
    /// The L1d's bytes: the region the whole-cache clean walks and the dirty ratio is of.
    pub cache_bytes: usize,
    /// The L2's bytes and ways: the software clean reads `ways` lines per L2 set of K.
    pub l2_bytes: usize,
    /// The L2's associativity (the kernel's, or 8 where it does not say).
    pub l2_ways: usize,
    /// Whether K and the junk sit on 2 MiB pages (else the junk's L2 sets are K's only by
    /// chance, and the software clean misses some of them).
    pub huge_backed: bool,
    /// The CPU's operations.
    pub ops: CpuOps,
}

/// One cell of Fig. 1.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cell {
    /// Send or receive.
    pub direction: Direction,
    /// The method.
    pub mode: Mode,
    /// Packet bytes.
    pub bytes: usize,
    /// The dirty ratio, percent.
    pub dirty_pct: f64,
    /// Ticks per packet: the mean of the middle half of the samples (see [`quartiles`]),
    /// the empty window subtracted.
    pub ticks: f64,
    /// Lower quartile.
    pub ticks_p25: f64,
    /// Upper quartile.
    pub ticks_p75: f64,
    /// What equations (1)–(6) predict with this machine's calibrated costs, ticks.
    pub predicted_ticks: f64,
    /// (predicted − measured) ÷ measured, percent.
    pub error_pct: f64,
    /// What the same equations predict on the seed's Unity, cycles (NaN for `ch`, which it
    /// did not have).
    pub unity_cycles: f64,
    /// The seed's operation replayed on shmnet-sim's `unity-2010` machine, cycles
    /// ([`unity`]; NaN if the simulator could not run it).
    pub simulated_unity_cycles: f64,
}

/// For one direction and one machine: where bypassing (NC) is the cheapest of the seed's
/// three methods (CH as the seed did it, CS, NC).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    /// Send or receive.
    pub direction: Direction,
    /// "measured here", "model here", "model on Unity" or "simulated Unity".
    pub source: &'static str,
    /// (length, dirty ratio) cells where NC was the cheapest.
    pub nc_cheapest: usize,
    /// Of how many.
    pub cells: usize,
    /// The largest length at which NC is the cheapest at every dirty ratio, if any.
    pub nc_cheapest_up_to: Option<usize>,
    /// Cells where NC also beat per-line CH (this CPU's `clflushopt`); `None` for Unity.
    pub nc_beats_per_line_ch: Option<usize>,
}

/// One method's cost over every cell of Fig. 1 in one direction.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AutoRow {
    /// Send or receive.
    pub direction: Direction,
    /// `ch`, `ch-all`, `cs`, `nc`, `auto` (the model's pick per cell) or `best` (the
    /// cheapest measured per cell: what no method can beat).
    pub method: String,
    /// Mean ticks per packet over the cells, each cell weighted alike.
    pub mean_ticks: f64,
    /// `mean_ticks` ÷ `best`'s.
    pub vs_best: f64,
    /// Cells where this method was the cheapest measured (ties to each).
    pub cheapest_cells: usize,
}

/// The whole run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BuffersLabReport {
    /// The machine.
    pub machine: crate::machine::Machine,
    /// Seconds the lab took.
    pub seconds: f64,
    /// Samples per cell.
    pub samples: usize,
    /// TSC ticks per nanosecond.
    pub ticks_per_ns: f64,
    /// The empty window subtracted from every sample.
    pub empty_window_ticks: u64,
    /// The geometry.
    pub geometry: Geometry,
    /// This machine's per-line costs (ticks per 64-byte line), calibrated in this run.
    pub params: Params,
    /// The seed's machine (cycles per 32-byte line).
    pub unity: Params,
    /// Every cell.
    pub cells: Vec<Cell>,
    /// Mean |error| of the model over every cell, percent.
    pub model_mean_abs_error_pct: f64,
    /// Where NC is cheapest, measured here, modelled here, modelled on Unity and simulated
    /// on Unity.
    pub verdicts: Vec<Verdict>,
    /// Why the simulated Unity has no figures, if it has none.
    pub unity_sim_error: Option<String>,
    /// Cache pollution: a working set's read after 32 packets, by method.
    pub pollution: Vec<pollution::PollutionRow>,
    /// The `auto` method (the calibrated model's pick per packet) beside each fixed method
    /// and the per-cell best, over every cell of Fig. 1.
    pub auto: Vec<AutoRow>,
    /// Fig. 2 and 3 analogs: TCP stream and request/response through shmnet's stack with
    /// each method on its frames.
    pub tcp: tcp::TcpFigures,
    /// The report.
    pub report: PathBuf,
}

/// Why the lab could not run.
#[derive(Debug, thiserror::Error)]
pub enum BuffersLabError {
    /// Memory for the buffers could not be mapped.
    #[error("mapping the lab's buffers: {0}")]
    Map(#[from] crate::mem::MapError),
    /// Writing the report failed.
    #[error("writing {path}: {err}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        err: String,
    },
}

/// The lab's memory: K and the software clean's junk (on one mapping, so that with 2 MiB
/// pages the junk's L2 sets are K's), the L1d-sized region the dirty ratio is of, and U.
struct Buffers {
    _main: Region,
    k: *mut u8,
    junk: Junk,
    cache: Region,
    u: Vec<u8>,
    frame: Vec<u8>,
    huge_backed: bool,
}

/// Bytes K spans (the largest length, and the largest frame the receive clean covers).
const K_BYTES: usize = 65_536;

impl Buffers {
    fn new(sizes: &Sizes, l2_ways: usize) -> Result<Self, crate::mem::MapError> {
        let stride = (sizes.l2 as usize / l2_ways).next_power_of_two().max(4096);
        let junk_at = K_BYTES.next_multiple_of(stride);
        let main = Region::new(junk_at + stride * l2_ways, Paging::Huge)?;
        let huge_backed = main.huge_backed().unwrap_or(false);
        let k = main.ptr();
        // SAFETY: `junk_at + stride * ways` bytes were mapped.
        let junk_base = unsafe { main.ptr().add(junk_at) };
        let cache = Region::new(sizes.l1d as usize, Paging::Small)?;
        let mut rng = fastrand::Rng::with_seed(3);
        Ok(Self {
            _main: main,
            k,
            junk: Junk {
                base: junk_base,
                stride,
                ways: l2_ways,
            },
            cache,
            u: (0..K_BYTES).map(|_| rng.u8(..)).collect(),
            frame: (0..K_BYTES).map(|_| rng.u8(..)).collect(),
            huge_backed,
        })
    }

    fn ctx(&self, ops: CpuOps, l1d: usize) -> Ctx {
        Ctx {
            ops,
            cache: self.cache.ptr(),
            cache_len: l1d,
            junk: self.junk,
            max_frame: MAX_FRAME,
        }
    }

    /// Fills the L1d-sized region into the cache, then dirties `dirty` of its lines, spread
    /// evenly; then reads `u_len` bytes of U (the application's buffer is in the cache).
    fn prepare(&mut self, l1d: usize, dirty: f64, u_len: usize) -> u64 {
        let lines = l1d / LINE;
        let dirty_lines = (lines as f64 * dirty).round() as usize;
        let p = self.cache.ptr();
        let mut acc = 0u64;
        for i in 0..lines {
            // SAFETY: `i * LINE < l1d`, inside the region.
            let w = unsafe { p.add(i * LINE).cast::<u64>() };
            // The lines to dirty, spread: line i is dirty when ⌊(i+1)·d/lines⌋ steps.
            let make_dirty = (i + 1) * dirty_lines / lines.max(1) != i * dirty_lines / lines.max(1);
            // SAFETY: as above; the region is ours alone.
            unsafe {
                if make_dirty {
                    w.write_volatile(w.read_volatile().wrapping_add(1));
                } else {
                    acc ^= w.read_volatile();
                }
            }
        }
        for c in self.u[..u_len].chunks(LINE) {
            acc = acc.wrapping_add(u64::from(c[0]));
        }
        std::hint::black_box(acc)
    }
}

/// Per-line costs on this machine, ticks (medians over `windows`).
fn calibrate(b: &mut Buffers, ops: CpuOps, cal: &tsc::Calibration, windows: usize) -> Params {
    const BYTES: usize = 8192;
    let lines = (BYTES / LINE) as f64;
    let empty = cal.empty_window_ticks as f64;
    let k = b.k;
    let time = |f: &mut dyn FnMut(), before: &mut dyn FnMut()| {
        let mut v: Vec<f64> = (0..windows)
            .map(|_| {
                before();
                let t0 = tsc::start();
                f();
                let t1 = tsc::stop();
                ((t1 - t0) as f64 - empty).max(0.0) / lines
            })
            .collect();
        tsc::median(&mut v)
    };
    let read = || {
        // SAFETY: K holds 64 KiB.
        let s = unsafe { std::slice::from_raw_parts(k, BYTES) };
        let mut acc = 0u64;
        for c in s.chunks_exact(8) {
            acc = acc.wrapping_add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        std::hint::black_box(acc);
    };
    let fill = |byte: u8| {
        // SAFETY: K holds 64 KiB, ours alone.
        unsafe { std::ptr::write_bytes(k, byte, BYTES) }
    };
    let flush = || {
        // SAFETY: as above.
        unsafe { coherence::clean(ops, k, BYTES) }
    };
    let src = b.u[..BYTES].to_vec();
    let stream = || {
        // SAFETY: as above; `src` is apart from K.
        unsafe { coherence::copy_nt(ops, k, &src) }
    };
    let c_br = time(&mut || read(), &mut || read());
    let c_bw = time(&mut || fill(0x5a), &mut || fill(0xa5));
    let c_cr = time(&mut || read(), &mut || flush());
    let c_cw_with_read = time(&mut || stream(), &mut || {
        std::hint::black_box(src.iter().step_by(LINE).map(|&x| u64::from(x)).sum::<u64>());
    });
    let c_fl = time(&mut || flush(), &mut || fill(0x11));
    Params {
        line: LINE,
        c_br,
        c_bw,
        c_cr,
        // The streamed copy read its source from the cache: that read is `C_br`.
        c_cw: (c_cw_with_read - c_br).max(0.0),
        c_fl,
        cl_total: 0.0,
        c_way: 0.0,
        max_frame: MAX_FRAME,
    }
}

/// The lower quartile, the mean of the middle half, and the upper quartile of `v`.
///
/// The middle half's mean rather than the median: the counter advances in steps (about 24
/// ticks on the VMs shmnet was developed on), which is the whole cost of a small packet by
/// some methods, so the median of one cell is a whole number of steps. Samples land on
/// either side of a step in proportion to where the true cost lies, and the mean of the
/// middle half recovers it while staying as deaf to outliers (preemption, an interrupt) as
/// the median.
fn quartiles(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let (lo, hi) = (v.len() / 4, v.len() - v.len() / 4);
    let mid = &v[lo..hi.max(lo + 1).min(v.len())];
    let mean = mid.iter().sum::<f64>() / mid.len().max(1) as f64;
    (at(0.25), mean, at(0.75))
}

/// Runs the lab, calling `progress(fraction done, step)` as it goes.
pub fn run(
    opts: &BuffersLabOptions,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<BuffersLabReport, BuffersLabError> {
    let start = Instant::now();
    let samples = if opts.quick { 51 } else { 1001 };
    progress(0.0, "calibrating the counter");
    let cal = tsc::Calibration::measure(
        Duration::from_millis(if opts.quick { 20 } else { 100 }),
        2001,
    );
    let caches = crate::cacheinfo::caches();
    let sizes = Sizes::from_caches(&caches);
    let l2_ways = crate::cacheinfo::l2_ways(&caches);
    let ops = CpuOps::this();
    let _pin = crate::calibrate::Pinned::here(None);
    let mut b = Buffers::new(&sizes, l2_ways)?;
    let l1d = sizes.l1d as usize;
    progress(0.02, "calibrating the per-line costs");
    let mut params = calibrate(&mut b, ops, &cal, samples.max(51));
    params.cl_total = (l1d / LINE) as f64;
    params.c_way = l2_ways as f64;
    let unity = Params::unity();
    let ctx = b.ctx(ops, l1d);
    let empty = cal.empty_window_ticks as f64;
    let total = (Direction::BOTH.len() * LENGTHS.len() * DIRTY.len() * Mode::ALL.len()) as f64;
    let mut cells = Vec::new();
    for dir in Direction::BOTH {
        for &bytes in &LENGTHS {
            for &dirty in &DIRTY {
                for mode in Mode::ALL {
                    progress(
                        0.05 + 0.9 * cells.len() as f64 / total,
                        &format!(
                            "{} {bytes} B, {:.2} % dirty, {}",
                            dir.name(),
                            dirty * 100.0,
                            mode.name()
                        ),
                    );
                    let mut v = Vec::with_capacity(samples);
                    // One sample more than kept: the first only brings K to its steady state.
                    for s in 0..=samples {
                        let t = match dir {
                            Direction::Send => time_send(&mut b, &ctx, mode, bytes, dirty, l1d),
                            Direction::Receive => {
                                time_receive(&mut b, &ctx, mode, bytes, dirty, l1d)
                            }
                        };
                        if s > 0 {
                            v.push((t.0 - t.1 * empty).max(0.0));
                        }
                    }
                    let (p25, p50, p75) = quartiles(&mut v);
                    let predicted = params.predict(dir, mode, bytes, dirty);
                    cells.push(Cell {
                        direction: dir,
                        mode,
                        bytes,
                        dirty_pct: dirty * 100.0,
                        ticks: p50,
                        ticks_p25: p25,
                        ticks_p75: p75,
                        predicted_ticks: predicted,
                        error_pct: (predicted - p50) / p50.max(1.0) * 100.0,
                        unity_cycles: unity.predict(dir, mode, bytes, dirty),
                        simulated_unity_cycles: f64::NAN,
                    });
                }
            }
        }
    }
    progress(
        0.88,
        "replaying the seed's operations on the simulated Unity",
    );
    let simulated = unity::unity_machine().and_then(|m| unity::simulate(&m, &LENGTHS, &DIRTY));
    let unity_sim_error = simulated.as_ref().err().map(ToString::to_string);
    for s in simulated.iter().flatten() {
        if let Some(c) = cells.iter_mut().find(|c| {
            c.direction == s.dir
                && c.mode == s.mode
                && c.bytes == s.bytes
                && c.dirty_pct == s.dirty * 100.0
        }) {
            c.simulated_unity_cycles = s.cycles;
        }
    }
    let model_mean_abs_error_pct =
        cells.iter().map(|c| c.error_pct.abs()).sum::<f64>() / cells.len().max(1) as f64;
    let mut verdicts = Vec::new();
    for dir in Direction::BOTH {
        verdicts.push(verdict(&cells, dir, "measured here", |c| c.ticks));
        verdicts.push(verdict(&cells, dir, "model here", |c| c.predicted_ticks));
        let mut v = verdict(&cells, dir, "model on Unity", |c| c.unity_cycles);
        v.nc_beats_per_line_ch = None;
        verdicts.push(v);
        verdicts.push(verdict(&cells, dir, "simulated Unity", |c| {
            c.simulated_unity_cycles
        }));
    }
    let auto = auto_rows(&cells);
    let geometry = shmnet_chan::coherence::CacheGeometry {
        l1d,
        l2: sizes.l2 as usize,
        l2_ways,
    };
    let tcp = tcp::run(opts.quick, geometry, &mut |step| progress(0.9, step));
    let mut pollution_progress = |step: &str| progress(0.95, step);
    // SAFETY: K's 64 KiB hold the 32 packets' 2 KiB buffers; U and the frame are apart from
    // K; the context's regions live as long as `b`.
    let pollution = unsafe {
        pollution::table(
            [
                ("L1d", l1d, if opts.quick { 21 } else { 401 }),
                ("L2", sizes.l2 as usize, if opts.quick { 11 } else { 101 }),
                ("LLC", sizes.llc as usize, if opts.quick { 5 } else { 21 }),
            ],
            &ctx,
            b.k,
            &mut b.u,
            &b.frame,
            empty,
            &mut pollution_progress,
        )?
    };
    let mut report = BuffersLabReport {
        machine: crate::machine::Machine::this(),
        seconds: 0.0,
        samples,
        ticks_per_ns: cal.ticks_per_ns,
        empty_window_ticks: cal.empty_window_ticks,
        geometry: Geometry {
            line: LINE,
            cache_bytes: l1d,
            l2_bytes: sizes.l2 as usize,
            l2_ways,
            huge_backed: b.huge_backed,
            ops,
        },
        params,
        unity,
        cells,
        model_mean_abs_error_pct,
        verdicts,
        pollution,
        auto,
        tcp,
        unity_sim_error,
        report: opts.out.join("report.md"),
    };
    progress(0.97, "writing the report");
    report.seconds = start.elapsed().as_secs_f64();
    write(&opts.out, &report)?;
    Ok(report)
}

/// `auto` beside the fixed methods: per cell, `auto` costs what the mode the calibrated model
/// predicts cheapest measured in that cell (the pick is a few comparisons, per packet, of
/// numbers computed once), and `best` what the cheapest measured mode did.
fn auto_rows(cells: &[Cell]) -> Vec<AutoRow> {
    let mut rows = Vec::new();
    for dir in Direction::BOTH {
        let mut sums: Vec<(String, f64, usize)> = Mode::ALL
            .iter()
            .map(|m| (m.name().to_owned(), 0.0, 0))
            .chain([("auto".to_owned(), 0.0, 0), ("best".to_owned(), 0.0, 0)])
            .collect();
        let mut n = 0usize;
        for &bytes in &LENGTHS {
            for &dirty in &DIRTY {
                let cell: Vec<&Cell> = cells
                    .iter()
                    .filter(|c| {
                        c.direction == dir && c.bytes == bytes && c.dirty_pct == dirty * 100.0
                    })
                    .collect();
                if cell.len() != Mode::ALL.len() {
                    continue;
                }
                n += 1;
                let best = cell.iter().map(|c| c.ticks).fold(f64::INFINITY, f64::min);
                let pick = cell
                    .iter()
                    .min_by(|a, b| a.predicted_ticks.total_cmp(&b.predicted_ticks))
                    .map_or(f64::NAN, |c| c.ticks);
                for (i, c) in cell.iter().enumerate() {
                    sums[i].1 += c.ticks;
                    sums[i].2 += usize::from(c.ticks <= best);
                }
                let k = Mode::ALL.len();
                sums[k].1 += pick;
                sums[k].2 += usize::from(pick <= best);
                sums[k + 1].1 += best;
                sums[k + 1].2 += 1;
            }
        }
        let best_mean = sums.last().map_or(f64::NAN, |s| s.1 / n.max(1) as f64);
        for (method, sum, cheapest_cells) in sums {
            let mean_ticks = sum / n.max(1) as f64;
            rows.push(AutoRow {
                direction: dir,
                method,
                mean_ticks,
                vs_best: mean_ticks / best_mean,
                cheapest_cells,
            });
        }
    }
    rows
}

/// One send sample: (ticks, timing windows opened).
fn time_send(
    b: &mut Buffers,
    ctx: &Ctx,
    mode: Mode,
    bytes: usize,
    dirty: f64,
    l1d: usize,
) -> (f64, f64) {
    b.prepare(l1d, dirty, bytes);
    let u = &b.u[..bytes];
    let t0 = tsc::start();
    // SAFETY: K holds 64 KiB (≥ bytes) apart from U; the context's regions are mapped.
    let r = unsafe { coherence::send(mode, ctx, u, b.k) };
    let t1 = tsc::stop();
    std::hint::black_box(r);
    ((t1 - t0) as f64, 1.0)
}

/// One receive sample: (ticks, timing windows opened).
fn time_receive(
    b: &mut Buffers,
    ctx: &Ctx,
    mode: Mode,
    bytes: usize,
    dirty: f64,
    l1d: usize,
) -> (f64, f64) {
    b.prepare(l1d, dirty, bytes);
    let t0 = tsc::start();
    // SAFETY: K holds 64 KiB, more than the largest frame; the context's regions are mapped.
    let r0 = unsafe { coherence::before_receive(mode, ctx, b.k, bytes) };
    let t1 = tsc::stop();
    // SAFETY: K holds 64 KiB apart from the frame.
    unsafe { coherence::device_writes(ctx.ops, b.k, &b.frame[..bytes]) };
    let u = &mut b.u[..bytes];
    let t2 = tsc::start();
    // SAFETY: K holds `bytes` the device wrote, apart from U.
    let r1 = unsafe { coherence::receive(mode, ctx, b.k, u) };
    let t3 = tsc::stop();
    std::hint::black_box((r0, r1));
    ((t1 - t0 + t3 - t2) as f64, 2.0)
}

/// Where NC is the cheapest of the seed's methods (CH whole-cache, CS, NC) by `cost`.
fn verdict(
    cells: &[Cell],
    dir: Direction,
    source: &'static str,
    cost: impl Fn(&Cell) -> f64,
) -> Verdict {
    let of = |mode: Mode, bytes: usize, dirty: f64| {
        cells
            .iter()
            .find(|c| {
                c.direction == dir
                    && c.mode == mode
                    && c.bytes == bytes
                    && c.dirty_pct == dirty * 100.0
            })
            .map_or(f64::NAN, &cost)
    };
    let (mut nc_cheapest, mut n, mut beats_ch) = (0, 0, 0);
    let mut up_to = None;
    let mut still = true;
    for &bytes in &LENGTHS {
        let mut all = true;
        for &dirty in &DIRTY {
            let nc = of(Mode::Nc, bytes, dirty);
            let wins = nc < of(Mode::ChAll, bytes, dirty) && nc < of(Mode::Cs, bytes, dirty);
            n += 1;
            nc_cheapest += usize::from(wins);
            beats_ch += usize::from(nc < of(Mode::Ch, bytes, dirty));
            all &= wins;
        }
        still &= all;
        if still {
            up_to = Some(bytes);
        }
    }
    Verdict {
        direction: dir,
        source,
        nc_cheapest,
        cells: n,
        nc_cheapest_up_to: up_to,
        nc_beats_per_line_ch: Some(beats_ch),
    }
}

fn write_err(path: &Path, e: impl std::fmt::Display) -> BuffersLabError {
    BuffersLabError::Write {
        path: path.to_path_buf(),
        err: e.to_string(),
    }
}

/// Writes report.md, report.json and the two Fig. 1 PNGs into `out`.
fn write(out: &Path, r: &BuffersLabReport) -> Result<(), BuffersLabError> {
    std::fs::create_dir_all(out).map_err(|e| write_err(out, e))?;
    let json = out.join("report.json");
    let body = serde_json::to_string_pretty(r).map_err(|e| write_err(&json, e))?;
    std::fs::write(&json, body).map_err(|e| write_err(&json, e))?;
    let mut figures = Vec::new();
    for dir in Direction::BOTH {
        let path = out.join(format!("fig1-{}.png", dir.name()));
        let panels: Vec<Panel> = DIRTY
            .iter()
            .map(|&d| Panel {
                title: format!("{} dirty", pct(d * 100.0)),
                groups: LENGTHS
                    .iter()
                    .map(|&bytes| Group {
                        label: size_label(bytes),
                        bars: Mode::ALL
                            .iter()
                            .filter_map(|&m| {
                                r.cells
                                    .iter()
                                    .find(|c| {
                                        c.direction == dir
                                            && c.mode == m
                                            && c.bytes == bytes
                                            && c.dirty_pct == d * 100.0
                                    })
                                    .map(|c| Bar {
                                        series: m.name().into(),
                                        value: c.ticks,
                                    })
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        // A figure that cannot be drawn (no font) leaves the tables, which say everything.
        match crate::plot::bars(
            &path,
            &format!(
                "Fig. 1 analog: {} cost by length and dirty ratio (ticks per packet)",
                dir.name()
            ),
            "ticks, relative to the costliest method of the length",
            &panels,
            &|v| format!("{v:.0}"),
            Scale::Group,
        ) {
            Ok(()) => figures.push(path),
            Err(e) => figures.push(PathBuf::from(format!(
                "(fig1-{} not drawn: {e})",
                dir.name()
            ))),
        }
    }
    let md = out.join("report.md");
    std::fs::write(&md, markdown(r, &figures)).map_err(|e| write_err(&md, e))
}

fn pct(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.2} %")
    }
}

fn size_label(bytes: usize) -> String {
    if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

/// The Fig. 2 and 3 analogs' tables.
fn tcp_markdown(s: &mut String, t: &tcp::TcpFigures) {
    let _ = writeln!(s, "## Fig. 2 analog: TCP stream by message size\n");
    let _ = writeln!(
        s,
        "Two of shmnet's stacks in one process, one connection, TCP checksums offloaded (as a NIC does: the rows differ only by the method); the wire copies frames between their pools (the device, untimed); timed, the CPU's part on both sides. Gbit/s per CPU second, median of {} runs of {} MiB, and ÷ the seed's CH (its whole-cache clean, `ch-all`) on both sides, as the seed normalises. Methods as send/receive; `ch` is x86's per-line clean, `none` the hardware's coherence.\n",
        t.repetitions,
        t.stream_bytes >> 20
    );
    let names: Vec<&str> = tcp::configurations().iter().map(|c| c.0).collect();
    let _ = writeln!(s, "| message | {} |", names.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(names.len()));
    for &m in &tcp::STREAM_SIZES {
        let _ = write!(s, "| {} |", size_label(m));
        for n in &names {
            if let Some(x) = t.stream.iter().find(|x| x.message == m && x.buffers == *n) {
                let _ = write!(s, " {:.2} ({:.2}) |", x.gbit_per_s, x.vs_ch_all);
            }
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "\n## Fig. 3 analog: TCP request/response\n");
    let _ = writeln!(
        s,
        "The same pair; one side writes the request, the other reads it and writes the response. Transactions per CPU second, median of {} runs of {}, and ÷ `ch-all/ch-all`.\n",
        t.repetitions, t.transactions
    );
    let _ = writeln!(s, "| request / response | {} |", names.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(names.len()));
    for &(q, a) in &tcp::RR_SIZES {
        let _ = write!(s, "| {q} / {a} B |");
        for n in &names {
            if let Some(x) =
                t.rr.iter()
                    .find(|x| x.request == q && x.response == a && x.buffers == *n)
            {
                let _ = write!(s, " {:.0} ({:.2}) |", x.per_s, x.vs_ch_all);
            }
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s);
}

fn markdown(r: &BuffersLabReport, figures: &[PathBuf]) -> String {
    let mut s = String::new();
    let p = &r.params;
    let u = &r.unity;
    let g = &r.geometry;
    let _ = writeln!(
        s,
        "# Seed 003 on this machine: cache-bypassing network buffers\n"
    );
    let _ = writeln!(
        s,
        "{} · {} samples per cell (mean of the middle half, the empty window of {} ticks subtracted) · {:.1} s · TSC {:.3} ticks/ns\n",
        r.machine, r.samples, r.empty_window_ticks, r.seconds, r.ticks_per_ns
    );
    let _ = writeln!(
        s,
        "Methods (seed 003, Table I): **ch** cleans K's own lines (`{}`), **ch-all** is the seed's CH (a whole-cache clean: every line of an L1d-sized region of {} KiB, then K's), **cs** reads {} lines of junk per L2 set of K (L2 {} KiB, {} ways; {}), **nc** bypasses (non-temporal stores on send; {} and K's lines evicted after the copy on receive). The dirty ratio is of the L1d-sized region. Receive times what the method does before the device writes K plus the stack's {} reads of the {}-byte header and the copy K → U.\n",
        if g.ops.clflushopt() {
            "clflushopt"
        } else {
            "clflush"
        },
        g.cache_bytes / 1024,
        g.l2_ways,
        g.l2_bytes / 1024,
        g.l2_ways,
        if g.huge_backed {
            "K and the junk on 2 MiB pages, so the junk's sets are K's"
        } else {
            "no 2 MiB pages: the junk's sets are K's only by chance"
        },
        if g.ops.streaming_loads() {
            "streaming loads"
        } else {
            "ordinary loads"
        },
        coherence::HEADER_READS,
        coherence::HEADER_BYTES,
    );
    let _ = writeln!(s, "## The model's parameters\n");
    let _ = writeln!(
        s,
        "| | this machine (ticks per {}-byte line) | the seed's Unity (cycles per {}-byte line) |",
        p.line, u.line
    );
    let _ = writeln!(s, "|---|---|---|");
    for (name, a, b) in [
        ("C_br, read a cached line", p.c_br, u.c_br),
        ("C_bw, write a cached line", p.c_bw, u.c_bw),
        ("C_cr, read bypassing the cache", p.c_cr, u.c_cr),
        ("C_cw, write bypassing the cache", p.c_cw, u.c_cw),
        ("C_fl, clean one line (not in the seed)", p.c_fl, u.c_fl),
        ("CL_total, lines of the data cache", p.cl_total, u.cl_total),
        ("C_way, associativity", p.c_way, u.c_way),
        ("L_max, lines of the largest frame", p.l_max(), u.l_max()),
    ] {
        let f = |x: f64| {
            if x.is_nan() {
                "—".to_string()
            } else {
                format!("{x:.1}")
            }
        };
        let _ = writeln!(s, "| {name} | {} | {} |", f(a), f(b));
    }
    let _ = writeln!(
        s,
        "\nUnity's data-cache size is not in the paper: 16 KiB (512 lines) is assumed. The model omits write-backs (as the seed says) and prices the software clean's junk reads at C_br, though they miss.\n"
    );
    let _ = writeln!(s, "## Where bypassing is cheapest\n");
    let _ = writeln!(
        s,
        "Of the seed's three methods (ch-all, cs, nc), over the {} lengths × {} dirty ratios. The seed's conclusion: NC pays on send at every size, and on receive only for small packets.\n",
        LENGTHS.len(),
        DIRTY.len()
    );
    let _ = writeln!(
        s,
        "| direction | source | NC cheapest in | NC cheapest at every dirty ratio up to | NC beats per-line ch in |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for v in &r.verdicts {
        let _ = writeln!(
            s,
            "| {} | {} | {} of {} | {} | {} |",
            v.direction.name(),
            v.source,
            v.nc_cheapest,
            v.cells,
            v.nc_cheapest_up_to.map_or("no length".into(), size_label),
            v.nc_beats_per_line_ch
                .map_or("—".into(), |n| format!("{n} of {}", v.cells)),
        );
    }
    let _ = writeln!(
        s,
        "\nMean |error| of the model here, every cell: {:.0} %.\n",
        r.model_mean_abs_error_pct
    );
    let _ = writeln!(
        s,
        "The simulated Unity: each cell's operation replayed as a reference trace on shmnet-sim's `unity-2010` machine (16 KiB 4-way data cache of 32-byte lines, the seed's C_br, C_bw, C_cr, C_cw; NC's K an uncacheable range, CH's cleans and invalidations maintenance operations; what the seed leaves unsaid is assumed as docs/sim.md lists). Unlike equations (1)–(6), it charges NC's header reads on receive, the write-backs of dirty victims, and the whole-cache clean's walk.\n"
    );
    if let Some(e) = &r.unity_sim_error {
        let _ = writeln!(s, "The simulated Unity could not run: {e}.\n");
    }
    for f in figures {
        if f.extension().is_some_and(|e| e == "png") {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let _ = writeln!(s, "![{name}]({name})\n");
        } else {
            let _ = writeln!(s, "{}\n", f.display());
        }
    }
    for dir in Direction::BOTH {
        let _ = writeln!(
            s,
            "## Fig. 1 analog, {}: ticks per packet, measured / model (Unity: model / simulated, cycles)\n",
            dir.name()
        );
        let _ = writeln!(
            s,
            "| bytes | dirty | ch | ch-all | cs | nc | cheapest | Unity: ch-all | cs | nc | cheapest (model / simulated) |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
        for &bytes in &LENGTHS {
            for &dirty in &DIRTY {
                let row: Vec<&Cell> = Mode::ALL
                    .iter()
                    .filter_map(|&m| {
                        r.cells.iter().find(|c| {
                            c.direction == dir
                                && c.mode == m
                                && c.bytes == bytes
                                && c.dirty_pct == dirty * 100.0
                        })
                    })
                    .collect();
                if row.len() != Mode::ALL.len() {
                    continue;
                }
                let best = row
                    .iter()
                    .min_by(|a, b| a.ticks.total_cmp(&b.ticks))
                    .map_or("", |c| c.mode.name());
                let seeds = &row[1..];
                let ubest = seeds
                    .iter()
                    .min_by(|a, b| a.unity_cycles.total_cmp(&b.unity_cycles))
                    .map_or("", |c| c.mode.name());
                let sbest = seeds
                    .iter()
                    .filter(|c| c.simulated_unity_cycles.is_finite())
                    .min_by(|a, b| {
                        a.simulated_unity_cycles
                            .total_cmp(&b.simulated_unity_cycles)
                    })
                    .map_or("", |c| c.mode.name());
                let _ = write!(s, "| {bytes} | {} |", pct(dirty * 100.0));
                for c in &row {
                    let _ = write!(s, " {:.0} / {:.0} |", c.ticks, c.predicted_ticks);
                }
                let _ = write!(s, " {best} |");
                for c in seeds {
                    let _ = write!(
                        s,
                        " {:.0} / {:.0} |",
                        c.unity_cycles, c.simulated_unity_cycles
                    );
                }
                let _ = writeln!(s, " {ubest} / {sbest} |");
            }
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Cache pollution (Table I's side effect)\n");
    let _ = writeln!(
        s,
        "An application's working set W (half a cache) is read into the cache, {} packets of {} bytes go through the method, each through its own 2 KiB buffer, and W is read again: ticks per line of W, and what the packets added to the read with no packets between (the baseline).\n",
        pollution::PACKETS,
        pollution::PACKET_BYTES
    );
    let _ = writeln!(s, "| W | direction | baseline | ch | ch-all | cs | nc |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for cache in ["L1d", "L2", "LLC"] {
        for dir in Direction::BOTH {
            let row: Vec<&pollution::PollutionRow> = r
                .pollution
                .iter()
                .filter(|x| x.cache == cache && x.direction == dir)
                .collect();
            let Some(first) = row.first() else { continue };
            let _ = write!(
                s,
                "| half the {cache} ({} KiB) | {} | {:.1} |",
                first.working_set_bytes / 1024,
                dir.name(),
                first.baseline_ticks_per_line
            );
            for x in &row {
                let _ = write!(s, " {:+.1} |", x.added_ticks_per_line);
            }
            let _ = writeln!(s);
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "## `auto`: the model's pick per packet, against each fixed method\n"
    );
    let _ = writeln!(
        s,
        "Over every cell of Fig. 1 (each weighted alike): mean ticks per packet, ÷ the per-cell best measured, and the cells where each was the cheapest. `auto` takes, per packet, the method equations (1)–(6) with this run's calibrated costs predict cheapest for its length and the dirty ratio.\n"
    );
    let _ = writeln!(
        s,
        "| direction | method | mean ticks | ÷ best | cheapest in cells |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for a in &r.auto {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.2} | {} |",
            a.direction.name(),
            a.method,
            a.mean_ticks,
            a.vs_best,
            a.cheapest_cells
        );
    }
    let _ = writeln!(s);
    tcp_markdown(&mut s, &r.tcp);
    let _ = writeln!(
        s,
        "What this is not: x86 keeps DMA coherent in hardware, so none of these methods is needed here; each is paid to measure it. NC's receive side cannot make K uncacheable from user space (the seed's uncacheable skb needs the kernel): its first read of each line misses, its later header reads hit, where every read went to memory on Unity. See docs/experiments.md."
    );
    s
}
