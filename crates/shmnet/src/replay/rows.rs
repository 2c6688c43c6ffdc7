//! Seed 001's validation table for shmnet's own stack: the eight rows (TCP and UDP, send and
//! receive, checksum off and on — [`shmnet_stack::rows`]), each timed natively and traced
//! with valgrind's lackey, the trace simulated on this machine, simulated latency beside
//! measured, the error per row and the mean.
//!
//! # How a row is measured
//!
//! The eight rows run in this process, together ([`native::measure_rows`]): `warmup` untimed
//! messages each, then rounds of a few messages of every row in turn, each timed with the
//! TSC around [`Row::step`] alone, with a throughput probe at each end of a round; the
//! figure is a trimmed mean over the rounds in which this thread had its core to
//! itself (on a VM a sibling hyperthread can halve it), less an empty window's timed in the
//! same rounds.
//!
//! # How a row is traced
//!
//! The same binary runs the same row under `valgrind --tool=lackey --trace-mem=yes` (the
//! hidden `shmnet sim row-worker`): every instruction fetch and data reference, from the
//! first instruction on. The worker prints the addresses of three marker words first, then
//! loads the start marker once, just before it sets the row up, and the begin and end
//! markers around each traced step. The references between a begin marker's load and the
//! next end marker's are the row's (party `stack`). Those before the start marker — the
//! loader, the runtime, parsing the arguments: most of a quick trace — are read and
//! dropped ([`walk`]); everything after it that is not the row's (setting the row up, its
//! warm-up steps, `prepare` and `finish`) is simulated too, so that the caches hold what
//! they would, but not counted.
//!
//! # The two timing models
//!
//! * **In order** (the seed's): the simulator's own — every reference costs the latency of
//!   the level that served it, an L1 hit included, nothing overlaps. On an R4400 that was the
//!   truth; on an out-of-order core that retires several instructions a cycle it counts
//!   most of the work many times over, and the report shows by how much.
//! * **Out of order**: `ticks = a × instructions + c × stores + b × stall`, where `stall` is
//!   the simulator's ticks for the row's references with every first-level hit free (what
//!   the row waited for beyond the L1: L2/L3/memory fills and TLB walks), `a` the ticks an
//!   instruction costs to issue when everything hits, `c` what each store adds to that, and
//!   `b` the share of the stall the core does not overlap. Stores, because every x86 core
//!   since 2011 retires fewer stores a cycle than loads or ALU operations (two or three
//!   load ports, one or two store ports): on the AMD VM the checksum rows, mostly additions,
//!   ran at 0.18 ticks an instruction and the rows that mostly move data at 0.21–0.24, and
//!   neither one rate nor a rate per data reference (loads and stores alike) followed that,
//!   while a rate per store did (leave-one-out 2.4–3.6 % against 3.9–5.3 % per reference
//!   on the same two runs; a separate rate for loads came out 0). The three are fitted by
//!   least squares with none negative ([`fit`]) — for each row on the *other seven*
//!   (leave-one-out), so no row's prediction has seen its own measurement. The error
//!   reported per row is that out-of-sample prediction's.
//!
//! Both use `this-machine` built from the calibration taken in the same run.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::Args;
use shmnet_lab::tsc;
use shmnet_sim::{Machine, Op, Party, Ref, Simulator, TraceSource};
use shmnet_stack::rows::{MESSAGE_BYTES, ROWS, Row, RowSpec};

use super::native;

/// The marker words the worker loads: once before the row is set up, and around each
/// traced step. Distinct statics, each on its own line, read with volatile loads so the
/// compiler keeps every one.
#[repr(align(64))]
struct Marker(u64);
static START: Marker = Marker(0x5eed_0000);
static BEGIN: Marker = Marker(0x5eed_0001);
static END: Marker = Marker(0x5eed_0002);

#[inline(always)]
fn touch(m: &'static Marker) {
    // SAFETY: `m` is a live static; a volatile read of an aligned u64 has no other effect.
    unsafe {
        std::ptr::read_volatile(&m.0);
    }
}

/// Messages of a row: untimed warm-up, then timed or traced ones.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Steps {
    /// Untimed messages first.
    pub warmup: u64,
    /// Measured (native) messages.
    pub measured: u64,
    /// Traced messages (under lackey).
    pub traced: u64,
}

impl Steps {
    /// The counts for a full or quick run.
    pub fn new(quick: bool) -> Steps {
        if quick {
            Steps {
                warmup: 100,
                measured: 2_000,
                traced: 100,
            }
        } else {
            Steps {
                warmup: 200,
                measured: 20_000,
                traced: 400,
            }
        }
    }
}

/// Which of the eight rows a command runs (`--row NAME`, repeatable; all by default).
#[derive(Args, Clone, Debug, Default)]
pub struct RowFilter {
    /// Run only this row (tcp-send-cksum-off, …, udp-recv-cksum-on); repeat for more.
    #[arg(long = "row", value_name = "ROW")]
    rows: Vec<String>,
}

impl RowFilter {
    /// The rows chosen, in the seed's order.
    pub fn selected(&self) -> Result<Vec<RowSpec>> {
        for name in &self.rows {
            if RowSpec::parse(name).is_none() {
                bail!(
                    "{name:?} is not a row; the rows are {}",
                    ROWS.map(|r| r.name()).join(", ")
                );
            }
        }
        Ok(ROWS
            .into_iter()
            .filter(|r| self.rows.is_empty() || self.rows.contains(&r.name()))
            .collect())
    }
}

/// What every command on the rows takes: which rows, `--quick`, `--json`.
#[derive(Args, Clone, Debug, Default)]
pub struct RowsArgs {
    #[command(flatten)]
    pub rows: RowFilter,
    /// Fewer messages per row (and a quick calibration where the command calibrates).
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object instead of the table (its fields: the command's help).
    #[arg(long)]
    pub json: bool,
}

/// The machine of a command on the rows (`--machine`, the seed's SGI by default).
#[derive(Args, Clone, Debug)]
pub struct MachineArg {
    /// The machine (preset, file or calibration JSON).
    #[arg(long, default_value = "sgi-r4400-1994")]
    pub machine: String,
}

/// Runs `f` on each of `chosen` in turn, with a private directory for its trace (removed
/// afterwards, whatever `f` returned) and the bar's position at the row; an error names the
/// row. The results are in `chosen`'s order.
pub fn each_row<T>(
    chosen: &[RowSpec],
    pb: &indicatif::ProgressBar,
    mut f: impl FnMut(RowSpec, &Path) -> Result<T>,
) -> Result<Vec<T>> {
    let dir = tempdir()?;
    let out = chosen
        .iter()
        .enumerate()
        .map(|(i, &spec)| {
            pb.set_position((i * 1000 / chosen.len()) as u64);
            f(spec, &dir).with_context(|| format!("tracing {}", spec.name()))
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Fails unless the trace of `spec` held one window per traced step.
pub fn check_windows(spec: RowSpec, windows: u64, steps: Steps) -> Result<()> {
    if windows != steps.traced {
        bail!(
            "{}: the trace holds {windows} marked windows, not {}",
            spec.name(),
            steps.traced
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct RowWorkerArgs {
    /// The row, e.g. tcp-send-cksum-off.
    #[arg(long)]
    row: String,
    /// Message bytes.
    #[arg(long, default_value_t = MESSAGE_BYTES)]
    size: usize,
    /// Untimed messages before the marked ones.
    #[arg(long, default_value_t = 100)]
    warmup: u64,
    /// Marked messages.
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// Copy the process's memory map (`/proc/self/maps`) here before the marked messages, so
    /// that the trace's instruction addresses can be found in their files and decoded.
    #[arg(long, value_name = "FILE")]
    maps: Option<PathBuf>,
}

/// `shmnet sim row-worker`'s arguments, parsed on their own when the command line starts
/// with `sim row-worker` (else `None`: the whole command line's parser takes it).
///
/// The worker runs under lackey, which writes a line (a system call) for every reference:
/// building the parser of all of shmnet's commands would cost about 1.9 million of them,
/// more than the row's warm-up and traced steps together. Help and errors are as clap
/// prints them, under the name `shmnet sim row-worker`.
pub fn worker_args() -> Option<RowWorkerArgs> {
    use clap::Parser;
    #[derive(Parser)]
    #[command(name = "shmnet sim row-worker")]
    struct Worker {
        #[command(flatten)]
        args: RowWorkerArgs,
    }
    let mut args = std::env::args_os().skip(1);
    if args.next()? != "sim" || args.next()? != "row-worker" {
        return None;
    }
    let name = std::ffi::OsString::from("shmnet sim row-worker");
    Some(Worker::parse_from(std::iter::once(name).chain(args)).args)
}

/// The marker addresses, as the worker prints them (one JSON line on stdout).
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default)]
pub struct Markers {
    /// Loaded once, before the row is set up: what comes before it is not simulated.
    pub start: u64,
    /// Loaded just before each marked step.
    pub begin: u64,
    /// Loaded just after it.
    pub end: u64,
}

/// `shmnet sim row-worker`: runs one row with its traced steps between markers (for lackey).
pub fn row_worker(a: RowWorkerArgs) -> Result<()> {
    let spec = RowSpec::parse(&a.row).with_context(|| {
        format!(
            "{:?} is not a row; the rows are {}",
            a.row,
            ROWS.map(|r| r.name()).join(", ")
        )
    })?;
    let m = Markers {
        start: std::ptr::addr_of!(START.0) as u64,
        begin: std::ptr::addr_of!(BEGIN.0) as u64,
        end: std::ptr::addr_of!(END.0) as u64,
    };
    println!("{}", serde_json::to_string(&m)?);
    std::io::stdout().flush()?;
    touch(&START);
    let mut row = Row::new(spec, a.size)?;
    for _ in 0..a.warmup {
        row.prepare();
        row.step();
        row.finish();
    }
    if let Some(path) = &a.maps {
        let maps = std::fs::read("/proc/self/maps").context("reading /proc/self/maps")?;
        std::fs::write(path, maps).with_context(|| format!("writing {}", path.display()))?;
    }
    for _ in 0..a.steps {
        row.prepare();
        touch(&BEGIN);
        row.step();
        touch(&END);
        row.finish();
    }
    let (steps, done) = row.counts();
    if steps != done {
        bail!(
            "{} of {steps} steps of {} did not complete",
            steps - done,
            spec.name()
        );
    }
    Ok(())
}

/// What the simulator made of one row's trace, per traced message.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Simulated {
    /// Instructions executed.
    pub instructions: f64,
    /// Data references (loads and stores; a modify counts as both).
    pub data_refs: f64,
    /// The stores among them.
    pub data_writes: f64,
    /// In-order ticks: every reference at its serving level's latency.
    pub in_order_ticks: f64,
    /// Ticks beyond the first level: the same references with every L1 hit free (0 where
    /// the stall was not asked for).
    pub stall_ticks: f64,
    /// Ticks with an ideal cache: every reference a first-level hit (so in-order − ideal is
    /// seed 001's time waiting for memory).
    pub ideal_ticks: f64,
    /// First-level instruction misses.
    pub l1i_misses: f64,
    /// First-level data misses.
    pub l1d_misses: f64,
    /// Marked windows found in the trace (must equal the traced steps).
    pub windows: u64,
}

/// `machine` with every first-level hit free (for the stall ticks).
fn beyond_l1(machine: &Machine) -> Machine {
    let mut m = machine.clone();
    for c in m.caches.iter_mut().filter(|c| c.level == 1) {
        c.hit_ticks = 0.0;
    }
    m.name = format!("{} (L1 hits free)", machine.name);
    m
}

/// A row's lackey trace on disk (removed when dropped) and the worker's markers.
pub struct Traced {
    /// The lackey log.
    pub log: PathBuf,
    /// The marker words' addresses.
    pub markers: Markers,
}

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Runs `spec` under lackey into `dir`; with `maps`, the worker also copies its memory map
/// there.
pub fn trace_row(
    spec: RowSpec,
    size: usize,
    steps: Steps,
    dir: &Path,
    maps: Option<&Path>,
) -> Result<Traced> {
    // Made first, so that every way out of here removes the log.
    let mut traced = Traced {
        log: dir.join(format!("{}.lackey", spec.name())),
        markers: Markers::default(),
    };
    let exe = std::env::current_exe().context("finding shmnet's own binary")?;
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=lackey")
        .arg("--trace-mem=yes")
        .arg(format!("--log-file={}", traced.log.display()))
        .arg(&exe)
        .args(["sim", "row-worker", "--row", &spec.name()])
        .arg(format!("--size={size}"))
        .arg(format!("--warmup={}", steps.warmup))
        .arg(format!("--steps={}", steps.traced));
    if let Some(m) = maps {
        cmd.arg("--maps").arg(m);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                anyhow::anyhow!(
                    "valgrind is not installed (the rows are traced with its lackey tool): install it with `apt-get install valgrind` or scripts/setup (`shmnet sim validate --skip-rows` leaves the rows out)"
                )
            } else {
                anyhow::Error::new(e).context("starting valgrind")
            }
        })?;
    let mut first = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut first)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "the row worker for {} failed under valgrind ({}): {}",
            spec.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let markers: Markers = serde_json::from_str(first.trim())
        .with_context(|| format!("the row worker printed {first:?}, not its markers"))?;
    traced.markers = markers;
    Ok(traced)
}

/// Runs `spec` under lackey and simulates its trace on every machine of `machines` (with
/// the stall ticks when `with_stall`).
pub fn trace_and_simulate(
    spec: RowSpec,
    size: usize,
    steps: Steps,
    machines: &[Machine],
    dir: &Path,
    with_stall: bool,
) -> Result<Vec<Simulated>> {
    let t = trace_row(spec, size, steps, dir, None)?;
    let sims = simulate_lackey(&t.log, t.markers, machines, with_stall)?;
    for s in &sims {
        check_windows(spec, s.windows, steps)?;
    }
    Ok(sims)
}

/// First-level misses of the simulator's L1 caches: (instruction, data).
fn l1_misses(sim: &Simulator) -> (u64, u64) {
    let mut i = 0;
    let mut d = 0;
    for c in sim.machine().caches.iter().filter(|c| c.level == 1) {
        let m = sim.cache_stats(&c.name).map_or(0, |s| s.misses);
        match c.side {
            shmnet_sim::Side::Instruction => i += m,
            shmnet_sim::Side::Data => d += m,
            shmnet_sim::Side::Unified => d += m,
        }
    }
    (i, d)
}

/// The two simulators of one machine: as given (in order) and with L1 hits free (stall).
struct Pair {
    in_order: Simulator,
    /// Only where the stall is asked for (the validation's model).
    stall: Option<Simulator>,
    ideal: Simulator,
    l1i: u64,
    l1d: u64,
    at_begin: (u64, u64),
}

/// One event of a row's trace as [`walk`] hands it on, in trace order.
pub enum Event<'a> {
    /// A traced step begins: the references up to the next `End` are the row's.
    Begin,
    /// It ends: one window more.
    End,
    /// A reference after the start marker (not a marker's load); `inside` a window or not.
    Ref { r: &'a Ref, inside: bool },
}

/// Walks a row's lackey trace. The references before the start marker's load (the worker's
/// start-up) are read and dropped; from it on, `f` sees every reference and each window's
/// begin and end, the marker loads themselves not. A begin inside a window starts it
/// again; an end outside one is dropped. Returns the windows (begin … end) found: zero if
/// the trace holds no start marker.
pub fn walk(log: &Path, markers: Markers, mut f: impl FnMut(Event<'_>)) -> Result<u64> {
    let file = std::fs::File::open(log).with_context(|| format!("opening {}", log.display()))?;
    let mut src = shmnet_sim::trace::LackeyReader::new(BufReader::with_capacity(1 << 20, file));
    let mut batch = Vec::new();
    let mut started = false;
    let mut inside = false;
    let mut windows = 0u64;
    loop {
        src.next_batch(&mut batch, 1 << 16)?;
        if batch.is_empty() {
            break;
        }
        let mut refs = batch.iter();
        if !started {
            // The start-up: up to and including the start marker's load.
            started = refs
                .by_ref()
                .any(|r| r.op == Op::Read && r.addr == markers.start);
        }
        for r in refs {
            if r.op == Op::Read && r.addr == markers.begin {
                inside = true;
                f(Event::Begin);
            } else if r.op == Op::Read && r.addr == markers.end {
                if inside {
                    inside = false;
                    windows += 1;
                    f(Event::End);
                }
            } else {
                f(Event::Ref { r, inside });
            }
        }
    }
    Ok(windows)
}

/// Simulates a lackey trace whose marked windows are the row's, on every machine (the
/// stall ticks only `with_stall`: a third simulator per machine).
fn simulate_lackey(
    log: &Path,
    markers: Markers,
    machines: &[Machine],
    with_stall: bool,
) -> Result<Vec<Simulated>> {
    let mut pairs = machines
        .iter()
        .map(|m| {
            Ok(Pair {
                in_order: Simulator::new(m)?,
                stall: if with_stall {
                    Some(Simulator::new(&beyond_l1(m))?)
                } else {
                    None
                },
                ideal: Simulator::with_options(
                    m,
                    shmnet_sim::Options {
                        perfect_icache: true,
                        perfect_dcache: true,
                        ..shmnet_sim::Options::default()
                    },
                )?,
                l1i: 0,
                l1d: 0,
                at_begin: (0, 0),
            })
        })
        .collect::<Result<Vec<_>, shmnet_sim::ConfigError>>()?;
    let (mut instr, mut data, mut writes) = (0u64, 0u64, 0u64);
    let windows = walk(log, markers, |e| match e {
        Event::Begin => {
            for p in &mut pairs {
                p.at_begin = l1_misses(&p.in_order);
            }
        }
        Event::End => {
            for p in &mut pairs {
                let now = l1_misses(&p.in_order);
                p.l1i += now.0 - p.at_begin.0;
                p.l1d += now.1 - p.at_begin.1;
            }
        }
        Event::Ref { r, inside } => {
            let r = Ref {
                party: if inside { Party::Stack } else { Party::Other },
                ..*r
            };
            if inside {
                match r.op {
                    Op::Ifetch => instr += 1,
                    Op::Write => {
                        data += 1;
                        writes += 1;
                    }
                    _ => data += 1,
                }
            }
            for p in &mut pairs {
                p.in_order.access_ref(&r);
                if let Some(st) = &mut p.stall {
                    st.access_ref(&r);
                }
                p.ideal.access_ref(&r);
            }
        }
    })?;
    let stack_ticks = |sim: &Simulator| {
        sim.report()
            .parties
            .iter()
            .find(|p| p.party == Party::Stack)
            .map_or(0.0, |p| p.ticks)
    };
    let n = windows.max(1) as f64;
    Ok(pairs
        .iter()
        .map(|p| Simulated {
            instructions: instr as f64 / n,
            data_refs: data as f64 / n,
            data_writes: writes as f64 / n,
            in_order_ticks: stack_ticks(&p.in_order) / n,
            stall_ticks: p.stall.as_ref().map_or(0.0, stack_ticks) / n,
            ideal_ticks: stack_ticks(&p.ideal) / n,
            l1i_misses: p.l1i as f64 / n,
            l1d_misses: p.l1d as f64 / n,
            windows,
        })
        .collect())
}

/// One row of the table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowReport {
    /// `tcp` or `udp`.
    pub protocol: shmnet_stack::rows::Protocol,
    /// `send` or `recv`.
    pub direction: shmnet_stack::rows::Direction,
    /// Checksum on.
    pub checksum: bool,
    /// Message bytes.
    pub bytes: usize,
    /// Measured ticks per message, a trimmed mean over the quiet rounds ([`native`]): the
    /// row's latency on this machine.
    pub measured: f64,
    /// The measured steps' 25th percentile, ticks (less the empty window).
    pub measured_p25: f64,
    /// See `measured_p25`.
    pub measured_p75: f64,
    /// The median over every round, quiet or not ([`native`]): what `measured` would be if
    /// the moments this thread shared its core counted too.
    pub measured_all_rounds: f64,
    /// Simulated ticks per message, out-of-order model, leave-one-out (the headline).
    pub simulated: f64,
    /// `(simulated − measured) / measured`, percent.
    pub error_pct: f64,
    /// Simulated ticks per message, in-order model (the seed's).
    pub in_order: f64,
    /// Its error, percent.
    pub in_order_error_pct: f64,
    /// The fit used for this row (on the other seven): ticks per instruction.
    pub fit_ticks_per_instruction: f64,
    /// Ticks each store adds.
    pub fit_ticks_per_store: f64,
    /// And the share of the stall not overlapped.
    pub fit_stall_share: f64,
    /// What the simulator counted per message.
    #[serde(flatten)]
    pub sim: Simulated,
    /// Measured ticks per instruction (the row's own, for reference).
    pub measured_ticks_per_instruction: f64,
}

/// The table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowsReport {
    /// The rows, in the seed's order.
    pub rows: Vec<RowReport>,
    /// Mean |error_pct| of the out-of-order model (seed 001: 4.65 %).
    pub mean_abs_error_pct: f64,
    /// Mean |in_order_error_pct|.
    pub in_order_mean_abs_error_pct: f64,
    /// The fit on all eight rows: ticks per instruction.
    pub all_rows_ticks_per_instruction: f64,
    /// The fit on all eight rows: ticks each store adds.
    pub all_rows_ticks_per_store: f64,
    /// The fit on all eight rows: share of the stall not overlapped.
    pub all_rows_stall_share: f64,
    /// Messages per row.
    pub steps: Steps,
    /// How much of the native timing this thread had its core to itself ([`native`]).
    pub contention: native::Contention,
    /// TSC ticks per nanosecond (to turn ticks into time).
    pub ticks_per_ns: f64,
    /// Core cycles per TSC tick, measured in the run ([`tsc::core_cycles_per_tick`]);
    /// `null` where it cannot be.
    pub core_cycles_per_tick: Option<f64>,
    /// Instructions per core cycle when everything hits, by the fit on all eight rows: the
    /// rows' instructions over the core cycles of their issue terms (`a × instructions +
    /// c × stores`); `null` without `core_cycles_per_tick`.
    pub all_rows_ipc: Option<f64>,
    /// Additions a core cycle in the run's fastest throughput probe
    /// (`contention.probe_fastest_ticks` and `core_cycles_per_tick`): 3–4 on a core this
    /// thread has to itself (four independent chains; every x86-64 core since 2013 has at
    /// least four ALUs), about half that when a sibling hyperthread was busy for the whole
    /// run — then even the quiet rounds are a shared core's, and the figures with them.
    /// `null` without `core_cycles_per_tick`.
    pub probe_adds_per_cycle: Option<f64>,
}

/// Below this many additions a cycle in the fastest probe, the report says the core was
/// shared for the whole run (halfway between a quiet core's 3.5 and a shared one's 1.75
/// on the AMD VM).
const SHARED_THROUGHOUT_ADDS_PER_CYCLE: f64 = 2.5;

/// The terms of the out-of-order model, in [`Fit`]'s order.
const TERMS: usize = 3;

/// The out-of-order model's coefficients: ticks per instruction, per store, and per tick of
/// stall beyond the L1. None is negative.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fit {
    per_instruction: f64,
    per_store: f64,
    stall_share: f64,
}

impl Fit {
    fn terms(sim: &Simulated) -> [f64; TERMS] {
        [sim.instructions, sim.data_writes, sim.stall_ticks]
    }

    fn predict(&self, x: &[f64; TERMS]) -> f64 {
        self.per_instruction * x[0] + self.per_store * x[1] + self.stall_share * x[2]
    }
}

/// Non-negative least squares `y ≈ Σ cₖ·xₖ`, every `cₖ ≥ 0`, over `points`.
///
/// With three terms the active set can be enumerated: for each non-empty subset of the
/// terms, the unconstrained least squares on that subset; the answer is the feasible one (no
/// negative coefficient) with the least residual. That is exact — the constrained optimum
/// is the unconstrained optimum on the subset of its positive coefficients, which is
/// feasible, and every feasible candidate is a point the optimum is no worse than. A
/// subset whose normal equations are singular (a term that is zero in every point) is
/// skipped; with none feasible the answer is all zeros.
fn fit(points: &[([f64; TERMS], f64)]) -> Fit {
    let mut best: Option<(f64, [f64; TERMS])> = None;
    for mask in 1u32..(1 << TERMS) {
        let idx: Vec<usize> = (0..TERMS).filter(|k| mask & (1 << k) != 0).collect();
        let Some(c) = least_squares(points, &idx) else {
            continue;
        };
        if c.iter().any(|&v| v < 0.0) {
            continue;
        }
        let mut coef = [0.0; TERMS];
        for (&k, &v) in idx.iter().zip(&c) {
            coef[k] = v;
        }
        let residual: f64 = points
            .iter()
            .map(|(x, y)| {
                let e = x.iter().zip(&coef).map(|(a, b)| a * b).sum::<f64>() - y;
                e * e
            })
            .sum();
        if best.is_none_or(|(r, _)| residual < r) {
            best = Some((residual, coef));
        }
    }
    let c = best.map_or([0.0; TERMS], |(_, c)| c);
    Fit {
        per_instruction: c[0],
        per_store: c[1],
        stall_share: c[2],
    }
}

/// Unconstrained least squares on the terms `idx` (normal equations, Gaussian elimination
/// with partial pivoting); `None` when they are singular.
fn least_squares(points: &[([f64; TERMS], f64)], idx: &[usize]) -> Option<Vec<f64>> {
    let n = idx.len();
    // The augmented normal matrix [XᵀX | Xᵀy].
    let mut m = vec![vec![0.0; n + 1]; n];
    for (x, y) in points {
        for (r, &i) in idx.iter().enumerate() {
            for (c, &j) in idx.iter().enumerate() {
                m[r][c] += x[i] * x[j];
            }
            m[r][n] += x[i] * y;
        }
    }
    let scale = (0..n).map(|i| m[i][i]).fold(0.0, f64::max);
    for col in 0..n {
        let pivot = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() <= 1e-12 * scale || scale == 0.0 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let k = row[col] / pivot_row[col];
                for (v, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *v -= k * p;
                }
            }
        }
    }
    Some((0..n).map(|i| m[i][n] / m[i][i]).collect())
}

fn pct(sim: f64, meas: f64) -> f64 {
    100.0 * (sim - meas) / meas
}

/// Runs the eight rows: measured, traced, simulated on `machine`, and fitted.
pub fn run(
    machine: &Machine,
    quick: bool,
    ticks_per_ns: f64,
    pb: &indicatif::ProgressBar,
) -> Result<RowsReport> {
    let steps = Steps::new(quick);
    pb.set_message("timing the eight rows natively, together in rounds");
    let (timings, contention) = native::measure_rows(&ROWS, MESSAGE_BYTES, steps)?;
    let mut timed = timings.iter();
    let raw = each_row(&ROWS, pb, |spec, dir| {
        let t = *timed.next().expect("one timing per row");
        let (med, p25, p75) = (t.ticks, t.p25, t.p75);
        pb.set_message(format!("{}: tracing under valgrind lackey", spec.name()));
        let mut sim = trace_and_simulate(
            spec,
            MESSAGE_BYTES,
            steps,
            std::slice::from_ref(machine),
            dir,
            true,
        )?;
        Ok((spec, med, p25, p75, sim.remove(0), t.all_rounds))
    })?;
    let points: Vec<([f64; TERMS], f64)> = raw.iter().map(|r| (Fit::terms(&r.4), r.1)).collect();
    let all = fit(&points);
    let rows: Vec<RowReport> = raw
        .iter()
        .enumerate()
        .map(|(i, (spec, med, p25, p75, sim, all_rounds))| {
            let others: Vec<_> = points
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| *p)
                .collect();
            let f = fit(&others);
            let simulated = f.predict(&Fit::terms(sim));
            RowReport {
                protocol: spec.protocol,
                direction: spec.direction,
                checksum: spec.checksum,
                bytes: MESSAGE_BYTES,
                measured: *med,
                measured_p25: *p25,
                measured_p75: *p75,
                measured_all_rounds: *all_rounds,
                simulated,
                error_pct: pct(simulated, *med),
                in_order: sim.in_order_ticks,
                in_order_error_pct: pct(sim.in_order_ticks, *med),
                fit_ticks_per_instruction: f.per_instruction,
                fit_ticks_per_store: f.per_store,
                fit_stall_share: f.stall_share,
                sim: *sim,
                measured_ticks_per_instruction: med / sim.instructions.max(1.0),
            }
        })
        .collect();
    let mean = |f: &dyn Fn(&RowReport) -> f64| {
        rows.iter().map(|r| f(r).abs()).sum::<f64>() / rows.len().max(1) as f64
    };
    let core_cycles_per_tick = tsc::core_cycles_per_tick(21);
    let probe_adds_per_cycle = core_cycles_per_tick
        .filter(|_| contention.probe_fastest_ticks > 0)
        .map(|c| tsc::PROBE_ADDS as f64 / (contention.probe_fastest_ticks as f64 * c));
    Ok(RowsReport {
        core_cycles_per_tick,
        probe_adds_per_cycle,
        all_rows_ipc: core_cycles_per_tick.and_then(|c| {
            let (instr, issue) = raw.iter().fold((0.0, 0.0), |(i, t), r| {
                (
                    i + r.4.instructions,
                    t + all.per_instruction * r.4.instructions + all.per_store * r.4.data_writes,
                )
            });
            (issue > 0.0).then(|| instr / (issue * c))
        }),
        mean_abs_error_pct: mean(&|r| r.error_pct),
        in_order_mean_abs_error_pct: mean(&|r| r.in_order_error_pct),
        all_rows_ticks_per_instruction: all.per_instruction,
        all_rows_ticks_per_store: all.per_store,
        all_rows_stall_share: all.stall_share,
        rows,
        steps,
        contention,
        ticks_per_ns,
    })
}

/// A private directory for the traces (0700), removed by the caller.
pub fn tempdir() -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let d = base.join(format!("shmnet-rows-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(anyhow::Error::new(e).context("creating a directory for the traces"));
            }
        }
    }
    bail!(
        "no free directory name for the traces under {}",
        base.display()
    )
}

impl std::fmt::Display for RowsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Seed 001's validation: {}-byte messages through shmnet's stack, ticks per message (trimmed mean of {} measured in quiet rounds, less an empty window; {} traced under lackey)",
            self.rows.first().map_or(0, |r| r.bytes),
            self.contention.quiet_steps,
            self.steps.traced
        )?;
        let c = &self.contention;
        writeln!(
            f,
            "native timing: {} of {} rounds quiet (throughput probe within {:.2}× of its fastest, {} ticks; median {}): the core was shared {:.0} % of the time",
            c.quiet_rounds,
            c.rounds,
            c.quiet_slack,
            c.probe_fastest_ticks,
            c.probe_median_ticks,
            100.0 * (1.0 - c.quiet_rounds as f64 / c.rounds.max(1) as f64)
        )?;
        if let Some(apc) = self.probe_adds_per_cycle {
            if apc < SHARED_THROUGHOUT_ADDS_PER_CYCLE {
                writeln!(
                    f,
                    "note: the fastest probe ran {apc:.1} additions a cycle (a core of its own runs 3-4): the core was shared for the whole run, and these figures are a shared core's; run again"
                )?;
            }
        }
        writeln!(
            f,
            "{:<22} {:>9} {:>10} {:>7} {:>10} {:>8} {:>8} {:>7} {:>8}",
            "row",
            "measured",
            "simulated",
            "error",
            "in order",
            "error",
            "instr",
            "stall",
            "tick/ins"
        )?;
        for r in &self.rows {
            let spec = RowSpec {
                protocol: r.protocol,
                direction: r.direction,
                checksum: r.checksum,
            };
            writeln!(
                f,
                "{:<22} {:>9.0} {:>10.0} {:>6.1}% {:>10.0} {:>7.0}% {:>8.0} {:>7.0} {:>8.3}",
                spec.name(),
                r.measured,
                r.simulated,
                r.error_pct,
                r.in_order,
                r.in_order_error_pct,
                r.sim.instructions,
                r.sim.stall_ticks,
                r.measured_ticks_per_instruction
            )?;
        }
        writeln!(
            f,
            "mean |error| {:.2} % (out-of-order model, each row predicted from a fit on the other seven; seed 001: 4.65 %); in-order model {:.0} %",
            self.mean_abs_error_pct, self.in_order_mean_abs_error_pct
        )?;
        write!(
            f,
            "fit on all eight rows: {:.3} ticks per instruction + {:.3} per store + {:.2} × the ticks beyond the L1",
            self.all_rows_ticks_per_instruction,
            self.all_rows_ticks_per_store,
            self.all_rows_stall_share
        )?;
        match (self.core_cycles_per_tick, self.all_rows_ipc) {
            (Some(c), Some(ipc)) => writeln!(
                f,
                " ({c:.2} core cycles a tick, measured: {ipc:.1} instructions a cycle)"
            ),
            _ => writeln!(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(coef: [f64; TERMS], xs: &[[f64; TERMS]]) -> Vec<([f64; TERMS], f64)> {
        xs.iter()
            .map(|x| (*x, x.iter().zip(&coef).map(|(a, b)| a * b).sum()))
            .collect()
    }

    const XS: [[f64; TERMS]; 5] = [
        [100.0, 40.0, 10.0],
        [200.0, 60.0, 5.0],
        [300.0, 150.0, 40.0],
        [50.0, 30.0, 0.0],
        [400.0, 90.0, 20.0],
    ];

    #[test]
    fn the_fit_recovers_a_linear_model_exactly() {
        let f = fit(&points([0.12, 0.19, 0.5], &XS));
        for (got, want) in [
            (f.per_instruction, 0.12),
            (f.per_store, 0.19),
            (f.stall_share, 0.5),
        ] {
            assert!((got - want).abs() < 1e-9, "{f:?}");
        }
        assert!((f.predict(&[10.0, 20.0, 30.0]) - (1.2 + 3.8 + 15.0)).abs() < 1e-9);
    }

    #[test]
    fn the_fit_keeps_every_coefficient_non_negative_and_is_the_best_such() {
        // A term that only lowers the time would need a negative coefficient: it is
        // dropped, and the others are the least squares without it.
        let pts = points([0.3, 0.2, -0.5], &XS);
        let f = fit(&pts);
        assert_eq!(f.stall_share, 0.0, "{f:?}");
        assert!(f.per_instruction >= 0.0 && f.per_store >= 0.0, "{f:?}");
        let residual = |f: &Fit| {
            pts.iter()
                .map(|(x, y)| (f.predict(x) - y).powi(2))
                .sum::<f64>()
        };
        // No non-negative point on a grid around it does better.
        let r = residual(&f);
        for i in 0..=20 {
            for j in 0..=20 {
                for k in 0..=10 {
                    let g = Fit {
                        per_instruction: i as f64 * 0.05,
                        per_store: j as f64 * 0.05,
                        stall_share: k as f64 * 0.05,
                    };
                    assert!(residual(&g) >= r - 1e-9, "{g:?} beats {f:?}");
                }
            }
        }
        // A term that is zero everywhere cannot be fitted and gets nothing.
        let zero: Vec<_> = XS.iter().map(|x| [x[0], x[1], 0.0]).collect();
        let f = fit(&points([0.1, 0.2, 0.7], &zero));
        assert_eq!(f.stall_share, 0.0);
        assert!((f.per_instruction - 0.1).abs() < 1e-9, "{f:?}");
    }
}
