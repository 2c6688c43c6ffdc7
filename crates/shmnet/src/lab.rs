//! `shmnet calibrate`, `shmnet residency` and `shmnet lab`: seed 000's instruments.

use anyhow::{Context, Result};
use clap::Args;
use shmnet_chan::{AllocPolicy, BufferLayout, PageSize};
use shmnet_io::driver::softnic::Dma;
use shmnet_lab::calibrate::{self, Degeneracy, Effort, Marks};
use shmnet_lab::residency::{self, Cores, Settings, Structure};
use std::path::PathBuf;

#[derive(Args)]
pub struct CalibrateArgs {
    /// A few seconds instead of about ten: fewer windows per figure.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn calibrate(a: CalibrateArgs) -> Result<()> {
    let effort = if a.quick { Effort::QUICK } else { Effort::FULL };
    let pb = crate::spinner(false);
    let t = calibrate::run(effort, &mut |step| {
        pb.set_message(format!("calibrating: {step}"))
    })
    .context("calibrating")?;
    pb.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string(&t)?);
    } else {
        print!("{t}");
    }
    Ok(())
}

#[derive(Args, Clone)]
pub struct ResidencyArgs {
    /// Where the parties run: `inline` (softnic, stack and application in one thread),
    /// `server` (the protocol server and its driver thread in a process of their own; the
    /// application copies each message out of the driver's buffers) or `server-regions` (the
    /// same, the application isolated: the server copies each message into a buffer the
    /// application posted, and the probe times that copy, in the server).
    #[arg(
        long,
        default_value = "inline",
        value_name = "inline|server|server-regions"
    )]
    structure: Structure,
    /// server: `same` (both processes on one CPU, taking turns) or `split` (one CPU each).
    #[arg(long, default_value = "same", value_name = "same|split")]
    cores: Cores,
    /// Messages to send (ten timed buffers each at the default size).
    #[arg(long, default_value_t = 300)]
    messages: u64,
    /// UDP payload bytes per message (14,792: ten 1,480-byte fragments).
    #[arg(long, default_value_t = 14_792)]
    size: usize,
    /// Microseconds from one message to the next; 0 sends back to back (saturates).
    #[arg(long, default_value_t = 2000.0, value_name = "MICROSECONDS")]
    gap: f64,
    /// Generate and verify UDP checksums: the stack reads all the data before the copy-out.
    #[arg(long)]
    checksum: bool,
    /// Touch a word of each buffer's page (sharing no line with its data) just before
    /// timing it, so no TLB miss is timed.
    #[arg(long)]
    tlb_force: bool,
    /// Messages the socket's receive queue holds.
    #[arg(long, default_value_t = 1, value_name = "MESSAGES")]
    queue: usize,
    /// The synthetic application: for each 8-byte word of a message, touch (read and
    /// increment) a random state block of this many bytes. 0: none.
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    load: usize,
    /// The range the state blocks are spread over (default: the last-level cache's size).
    #[arg(long, value_name = "BYTES")]
    load_range: Option<usize>,
    /// Buffer allocation: `lifo` (most recently freed), `fifo` or `random`.
    #[arg(long, default_value = "lifo", value_name = "lifo|fifo|random")]
    alloc: AllocPolicy,
    /// Where the first buffers lie: `contiguous` (each pool's free list starts in index
    /// order, so the first buffers handed out are neighbours in memory: the seed's rule 3) or
    /// `scattered` (a fixed golden-ratio stride through each pool: consecutive buffers on
    /// different pages, spread over the whole pool).
    #[arg(
        long,
        default_value = "contiguous",
        value_name = "contiguous|scattered"
    )]
    layout: BufferLayout,
    /// Pages of the buffer window: `4k` or `2m` (reserved huge pages: as root,
    /// echo 16 > /proc/sys/vm/nr_hugepages).
    #[arg(long, default_value = "4k", value_name = "4k|2m")]
    pages: PageSize,
    /// How softnic writes frames: `cached` stores, or `nt` (non-temporal, around the cache,
    /// as a DMA engine does).
    #[arg(long, default_value = "cached", value_name = "cached|nt")]
    dma: Dma,
    /// The application's CPU (with --cores split the server gets the next one).
    #[arg(long, default_value_t = 0)]
    cpu: usize,
    /// inline: before each message's copy-out, switch to another process on the
    /// application's CPU that writes BYTES of its own memory (0: only the switch) and
    /// switches back — a scheduling point between the stack's last touch of the data (its
    /// checksum, with --checksum) and its use. The switch's own cost is calibrated first.
    #[arg(long, value_name = "BYTES")]
    switch: Option<usize>,
    /// 100 messages instead of 300.
    #[arg(long)]
    quick: bool,
    /// Read the marks from a `shmnet calibrate --json` file instead of measuring them.
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Draw the overhead histogram into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// Record the data path's memory references (the sender's writes, the stack's reads, the
    /// copy-out, the load) into FILE in shmnet's binary trace format, for `shmnet sim`
    /// (inline structure only).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

impl ResidencyArgs {
    fn settings(&self) -> Settings {
        let d = Settings::default();
        Settings {
            structure: self.structure,
            cores: self.cores,
            messages: if self.quick {
                self.messages.min(100)
            } else {
                self.messages
            },
            size: self.size,
            gap_us: self.gap,
            checksum: self.checksum,
            tlb_force: self.tlb_force,
            queue: self.queue,
            load_bytes: self.load,
            load_range_bytes: self.load_range.unwrap_or(d.load_range_bytes),
            alloc: self.alloc,
            layout: self.layout,
            pages: self.pages,
            dma: self.dma,
            cpu: self.cpu,
            switch: self
                .switch
                .map(|touch_bytes| shmnet_lab::residency::switch::SwitchSpec { touch_bytes }),
        }
    }
}

/// The marks: from a calibration file, else measured now (a second or two).
pub fn marks(file: Option<&PathBuf>) -> Result<Marks> {
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not JSON from `shmnet calibrate --json`",
                path.display()
            )
        })?;
        let costs: calibrate::BufferCosts = serde_json::from_value(v["buffer"].clone())
            .with_context(|| {
                format!(
                    "{} has no buffer costs: make it with `shmnet calibrate --json > FILE`",
                    path.display()
                )
            })?;
        costs
            .check()
            .with_context(|| format!("{} cannot be used", path.display()))?;
        return Ok(costs.marks());
    }
    let (bytes, offset) = calibrate::DEFAULT_BUFFER;
    let costs = calibrate::buffer_costs(
        bytes,
        offset,
        &shmnet_lab::cacheinfo::Sizes::this(),
        Effort::QUICK,
    )?;
    Ok(costs.marks())
}

/// A command that ran and wrote its results, but whose results do not hold. It ends the
/// program with its own exit status ([`Unsound::exit_code`]), after the results are out.
#[derive(Debug)]
pub enum Unsound {
    /// The marks cannot tell the cache from memory on this machine.
    Degenerate(Degeneracy),
    /// Some of the lab's runs failed (their names and errors).
    RunsFailed(Vec<String>),
}

impl Unsound {
    /// 3: the marks are degenerate; 4: some runs failed (and the marks may be fine).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Degenerate(_) => 3,
            Self::RunsFailed(_) => 4,
        }
    }
}

impl std::fmt::Display for Unsound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Degenerate(d) => write!(f, "{d} (results written anyway; exit status 3)"),
            Self::RunsFailed(runs) => write!(
                f,
                "{} run(s) failed, see the report: {} (exit status 4)",
                runs.len(),
                runs.join("; ")
            ),
        }
    }
}

impl std::error::Error for Unsound {}

pub fn residency(a: ResidencyArgs) -> Result<()> {
    let settings = a.settings();
    settings.check()?;
    let pb = crate::progress_bar();
    pb.set_message("measuring the marks");
    let marks = marks(a.calibration.as_ref())?;
    let exe = std::env::current_exe().context("finding this program to start the server")?;
    let mut progress = |frac: f64, msg: &str| {
        pb.set_position((frac * 1000.0) as u64);
        pb.set_message(msg.to_string());
    };
    let r = match &a.trace {
        None => residency::run(&settings, marks, &exe, &mut progress)?,
        Some(path) => {
            let (r, records) = residency::run_traced(&settings, marks, &mut progress)?;
            let n = crate::replay::write_trace(path, &records)?;
            pb.suspend(|| eprintln!("trace: {n} records in {}", path.display()));
            r
        }
    };
    pb.finish_and_clear();
    if let Some(path) = &a.plot {
        residency::figure::histograms(
            path,
            "overhead per buffer at copy-out",
            &[(settings.label(), &r)],
            'A',
        )
        .with_context(|| format!("drawing {}", path.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{r}");
        if let Some(path) = &a.plot {
            println!("histogram: {}", path.display());
        }
    }
    match r.degenerate {
        Some(d) => Err(Unsound::Degenerate(d).into()),
        None => Ok(()),
    }
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LabArgs {
    /// Another seed's experiments instead of seed 000's residency suite.
    #[command(subcommand)]
    seed: Option<LabSeed>,
    /// About 6 s instead of about 30: fewer messages per run, fewer calibration
    /// windows.
    #[arg(long)]
    quick: bool,
    /// Where to write report.md, the PNGs and every run's JSON.
    #[arg(long, default_value = "lab-report", value_name = "DIR")]
    out: PathBuf,
    /// Print the summary of every run as one JSON object when done.
    #[arg(long)]
    json: bool,
}

/// Two bars: the runs of the suite, and the current run.
struct Bars {
    all: indicatif::ProgressBar,
    cell: indicatif::ProgressBar,
}

impl shmnet_lab::suite::SuiteProgress for Bars {
    fn cell(&mut self, index: usize, total: usize, name: &str) {
        self.all.set_length(total as u64);
        self.all.set_position(index as u64);
        self.all.set_message(name.to_string());
        self.cell.set_position(0);
    }
    fn step(&mut self, frac: f64, msg: &str) {
        self.cell.set_position((frac * 1000.0) as u64);
        self.cell.set_message(msg.to_string());
    }
}

#[derive(clap::Subcommand)]
enum LabSeed {
    /// Seed 004 (dynamic handle lookup): the lookup cache's 36 configurations (Table III,
    /// Fig. 5) over SPLASH-2-shaped patterns of many applications, checked against
    /// shmnet-sim; the miss penalty (delay and processing) of a live miss thread; the
    /// memory a full translation table would hold against the cache (Fig. 3); the lookup
    /// cost per descriptor. Writes report.md, PNG figures and report.json.
    ///
    /// Example: shmnet lab handles --quick --out handles-report
    Handles(HandlesLabArgs),
    /// Seed 003 (uncacheable memory): what keeping a network buffer coherent with a device
    /// that does not snoop the caches costs, by the seed's three methods (CH: clean the
    /// cache, here per line with clflushopt and as the seed's whole-cache clean; CS: read
    /// junk in the buffer's sets; NC: bypass with non-temporal stores), on send and receive,
    /// by packet length (64 B to 64 KiB) and dirty ratio (0 to 100 %) — the seed's Fig. 1 —
    /// beside its equations (1)–(6) evaluated with per-line costs calibrated in the same
    /// run, and on the seed's own machine. Writes report.md, fig1-send.png,
    /// fig1-receive.png and report.json.
    ///
    /// Example: shmnet lab buffers --quick --out buffers-report
    Buffers(BuffersLabArgs),
    /// Seed 002 (a protocol server over shared memory): its three benchmarks run as it ran
    /// them, six repetitions each with mean and spread, on one CPU (the seed's uniprocessor)
    /// and on two, the kernel and the message-based interface (ipc) measured in the same run:
    /// ttcp over TCP (10 B, 1 KB, 8 KB; kernel, ipc, server, inline) on one host; ttcp
    /// transmit and receive apart, ftp (a file from disk to the other side's /dev/null, each
    /// way) and the unmodified `x11perf -dot` against Xvfb (under `shmnet run`) across a veth
    /// pair between two network namespaces (root; Debian's xvfb and x11-apps for X11perf). Reports the
    /// seed's gap-recovered measure per row and checks its two surprises with counters.
    /// Writes report.md, ttcp.png, ttcp-veth.png, ftp.png, x11perf.png and report.json.
    ///
    /// Example: sudo shmnet lab servers --quick --out servers-report
    Servers(ServersLabArgs),
}

#[derive(Args)]
struct ServersLabArgs {
    /// A few minutes instead of about a quarter of an hour: quarter-second ttcp cells, a
    /// 16 MiB file, one-second x11perf repetitions (still six repetitions of everything).
    #[arg(long)]
    quick: bool,
    /// Where to write report.md, the PNGs and report.json.
    #[arg(long, default_value = "servers-report", value_name = "DIR")]
    out: PathBuf,
    /// Print the report as one JSON object when done.
    #[arg(long)]
    json: bool,
}

fn lab_servers(a: ServersLabArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding this program to start the parties")?;
    let pb = crate::progress_bar();
    let opts = shmnet_lab::servers::ServersOptions {
        quick: a.quick,
        out: a.out,
        exe,
    };
    let report = {
        let pb = pb.clone();
        shmnet_lab::servers::run(&opts, &mut move |f, step| {
            pb.set_position((f * 1000.0) as u64);
            pb.set_message(step.to_string());
        })
    };
    pb.finish_and_clear();
    let report = report.context("running the servers lab")?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{:<13} {:<9} {:>5} {:<7} {:>16} {:>8} {:>6}",
            "benchmark", "CPUs", "size", "struct", "mean ± sd", "÷kernel", "gap"
        );
        for r in &report.rows {
            let v = r.value.as_ref().map_or("did not run".to_string(), |v| {
                format!(
                    "{} ± {:.0} %",
                    shmnet_lab::servers::human(v.mean),
                    v.cv_pct()
                )
            });
            println!(
                "{:<13} {:<9} {:>5} {:<7} {:>16} {:>8} {:>6} {}",
                r.bench.name(),
                r.cpus.name(),
                r.size.map_or(String::new(), |s| s.to_string()),
                r.structure.name(),
                v,
                r.over_kernel.map_or("–".into(), |x| format!("{x:.2}")),
                r.gap_recovered.map_or("–".into(), |x| format!("{x:.2}")),
                r.unit
            );
        }
        for s in &report.skipped {
            println!("skipped: {}", s.why);
        }
        println!(
            "\n{} rows in {:.0} s; report: {}",
            report.rows.len(),
            report.seconds,
            report.report.display()
        );
    }
    // A row that lost any repetition fails the run (its figure is from fewer than six).
    let failed: Vec<String> = report
        .rows
        .iter()
        .filter(|r| !r.failures.is_empty() || r.value.is_none())
        .map(|r| {
            format!(
                "{} {} {}{}: {} of {} repetitions failed",
                r.bench.name(),
                r.cpus.name(),
                r.structure.name(),
                r.size.map_or(String::new(), |s| format!(" {s} B")),
                r.failures.len(),
                report.repetitions
            )
        })
        .chain(report.failures.iter().cloned())
        .collect();
    if !failed.is_empty() {
        return Err(Unsound::RunsFailed(failed).into());
    }
    Ok(())
}

#[derive(Args)]
struct BuffersLabArgs {
    /// 51 samples per cell instead of 1,001 (well under a second instead of a few).
    #[arg(long)]
    quick: bool,
    /// Where to write report.md, the PNGs and report.json.
    #[arg(long, default_value = "buffers-report", value_name = "DIR")]
    out: PathBuf,
    /// Print the report as one JSON object when done.
    #[arg(long)]
    json: bool,
}

fn lab_buffers(a: BuffersLabArgs) -> Result<()> {
    let pb = crate::progress_bar();
    let opts = shmnet_lab::buffers::BuffersLabOptions {
        quick: a.quick,
        out: a.out,
    };
    let report = shmnet_lab::buffers::run(&opts, &mut |f, step| {
        pb.set_position((f * 1000.0) as u64);
        pb.set_message(step.to_string());
    });
    pb.finish_and_clear();
    let report = report.context("running the buffers lab")?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    for v in &report.verdicts {
        println!(
            "{:<8} {:<15} NC cheapest of ch-all/cs/nc in {:>2} of {} cells; at every dirty ratio up to {}",
            v.direction.name(),
            v.source,
            v.nc_cheapest,
            v.cells,
            v.nc_cheapest_up_to
                .map_or_else(|| "no length".to_string(), |b| format!("{b} B")),
        );
    }
    println!(
        "model error {:.0} % (mean |predicted - measured| / measured); report: {}",
        report.model_mean_abs_error_pct,
        report.report.display()
    );
    Ok(())
}

#[derive(Args)]
struct HandlesLabArgs {
    /// Smaller traces and fewer timed misses (about ten seconds instead of a minute).
    #[arg(long)]
    quick: bool,
    /// Where to write report.md, the PNGs and report.json.
    #[arg(long, default_value = "handles-report", value_name = "DIR")]
    out: PathBuf,
    /// Print the report as one JSON object when done.
    #[arg(long)]
    json: bool,
}

fn lab_handles(a: HandlesLabArgs) -> Result<()> {
    let pb = crate::progress_bar();
    let opts = shmnet_lab::handles::HandlesLabOptions {
        quick: a.quick,
        out: a.out,
    };
    let report = shmnet_lab::handles::run(&opts, &mut |f, step| {
        pb.set_position((f * 1000.0) as u64);
        pb.set_message(step.to_string());
    });
    pb.finish_and_clear();
    let report = report.context("running the handle-lookup lab")?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{} workload × configuration runs, live cache and simulator agreed in {}; miss processing p50 {}; report: {}",
            report.sim_checked,
            report.sim_agreed,
            report
                .penalty
                .iter()
                .map(|p| format!("{:.1} µs at L = {}", p.processing_us.p50, p.line))
                .collect::<Vec<_>>()
                .join(", "),
            report.report.display()
        );
    }
    if report.sim_agreed != report.sim_checked {
        anyhow::bail!(
            "the live lookup cache and the simulator disagreed in {} runs: a bug in one of them (see {})",
            report.sim_checked - report.sim_agreed,
            report.report.display()
        );
    }
    Ok(())
}

pub fn lab(a: LabArgs) -> Result<()> {
    match a.seed {
        Some(LabSeed::Handles(h)) => return lab_handles(h),
        Some(LabSeed::Buffers(b)) => return lab_buffers(b),
        Some(LabSeed::Servers(b)) => return lab_servers(b),
        None => {}
    }
    let exe = std::env::current_exe().context("finding this program to start the server")?;
    let multi = indicatif::MultiProgress::new();
    let all = multi.add(indicatif::ProgressBar::new(1));
    all.set_style(
        indicatif::ProgressStyle::with_template("run {pos}/{len} {bar:30} {elapsed} {msg}")
            .expect("a valid template"),
    );
    let cell = multi.add(crate::progress_bar());
    all.enable_steady_tick(std::time::Duration::from_millis(200));
    let mut bars = Bars { all, cell };
    let opts = shmnet_lab::suite::SuiteOptions {
        quick: a.quick,
        out: a.out.clone(),
        exe,
    };
    let report = shmnet_lab::suite::run(&opts, &mut bars)?;
    bars.cell.finish_and_clear();
    bars.all.finish_and_clear();
    if a.json {
        let cells: serde_json::Map<String, serde_json::Value> = report
            .cells
            .iter()
            .map(|(c, o)| {
                let v = match o {
                    shmnet_lab::suite::Outcome::Ran(r) => serde_json::json!({
                        "table": c.table,
                        "settings": r.settings,
                        "summary": r.summary,
                        "messages": r.messages,
                        "switch": r.switch,
                    }),
                    shmnet_lab::suite::Outcome::Failed { error } => {
                        serde_json::json!({"table": c.table, "error": error})
                    }
                };
                (c.name.clone(), v)
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "report": report.report,
                "seconds": report.seconds,
                "calibration": report.calibration,
                "marks": report.calibration.marks,
                "degenerate": report.calibration.degenerate,
                "failed": failed_runs(&report),
                "knee_load_bytes": report.inputs.knee_load_bytes,
                "verdicts": shmnet_lab::suite::verdicts(&report.cells),
                "comparisons": shmnet_lab::suite::comparisons(&report.cells),
                "switches": shmnet_lab::suite::switch_findings(&report.cells),
                "runs": cells,
            })
        );
        return lab_status(&report);
    }
    println!(
        "{:<40} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "run", "% cached", "< clean", "< dirty", "> dirty", "ticks/word"
    );
    for (c, o) in &report.cells {
        match o {
            shmnet_lab::suite::Outcome::Ran(r) => {
                let s = &r.summary;
                println!(
                    "{:<40} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.3}",
                    c.name,
                    s.fully_cached_pct,
                    s.lt_clean_pct,
                    s.lt_dirty_pct,
                    s.gt_dirty_pct,
                    s.avg_overhead_ticks_per_word
                );
            }
            shmnet_lab::suite::Outcome::Failed { error } => {
                println!("{:<40} did not run: {error}", c.name)
            }
        }
    }
    println!(
        "\n{} runs in {:.0} s; report: {}",
        report.cells.len(),
        report.seconds,
        report.report.display()
    );
    lab_status(&report)
}

/// The runs that failed, as `name: error`.
fn failed_runs(report: &shmnet_lab::suite::SuiteReport) -> Vec<String> {
    report
        .cells
        .iter()
        .filter_map(|(c, o)| match o {
            shmnet_lab::suite::Outcome::Failed { error } => Some(format!("{}: {error}", c.name)),
            shmnet_lab::suite::Outcome::Ran(_) => None,
        })
        .collect()
}

/// The lab's exit: degenerate marks first (nothing in the report means what it says), then
/// failed runs.
fn lab_status(report: &shmnet_lab::suite::SuiteReport) -> Result<()> {
    if let Some(d) = report.calibration.degenerate {
        return Err(Unsound::Degenerate(d).into());
    }
    let failed = failed_runs(report);
    if !failed.is_empty() {
        return Err(Unsound::RunsFailed(failed).into());
    }
    Ok(())
}
