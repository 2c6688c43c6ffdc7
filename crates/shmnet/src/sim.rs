//! `shmnet sim`: the cache/TLB simulator's command line (crate `shmnet-sim`).

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use shmnet_sim::trace::{self, Format};
use shmnet_sim::{ByteSize, Machine, Options, Simulator};

/// The simulator's subcommands.
#[derive(Subcommand)]
pub enum SimCmd {
    /// Simulate a trace on a machine and print every cache's, TLB's and party's counts.
    ///
    /// TRACE is a Dinero IV din/D file, valgrind lackey output, or a shmnet binary trace
    /// (format guessed from its first bytes unless --format is given); `-` reads stdin.
    ///
    /// Examples:
    ///   shmnet sim run --machine hp720-1993 trace.trc
    ///   shmnet sim run --machine sgi-r4400-1994 --ccc app.din
    ///   valgrind --tool=lackey --trace-mem=yes --log-file=ls.lackey ls
    ///   shmnet sim run --machine this-machine --json ls.lackey
    ///   shmnet calibrate --json > cal.json; shmnet sim run --machine cal.json trace.trc
    ///   shmnet sim machine hp720-1993 > my.toml   (edit, then --machine my.toml)
    #[command(verbatim_doc_comment)]
    Run(RunArgs),
    /// Seed 001's sweeps: first-level size × associativity over one pass of a trace,
    /// printing miss-rate and ticks-per-reference tables (and drawing them with --plot).
    ///
    /// Every first-level cache (instruction and data, or the unified one) takes each size
    /// and associativity; the rest of the machine stays as it is.
    ///
    /// Examples:
    ///   shmnet sim sweep --machine sgi-r4400-1994 trace.trc
    ///   shmnet sim sweep --machine sgi-r4400-1994 --perfect-icache --plot dcache.png trace.din
    ///   shmnet sim sweep --machine hp720-1993 --l1-size 64K,128K,256K --l1-assoc 1,2 --json t.trc
    #[command(verbatim_doc_comment)]
    Sweep(SweepArgs),
    /// Simulation speed: a synthetic trace of packet copies (10^8 references by default)
    /// written in the D and binary formats, each read back and simulated on an L1 + L2
    /// machine; references per second, parsing included.
    ///
    /// Examples:
    ///   shmnet sim bench
    ///   shmnet sim bench --refs 10000000 --json
    #[command(verbatim_doc_comment)]
    Bench(BenchArgs),
    /// Seed 001's validation for shmnet's data path: run the residency experiment with its
    /// references recorded, replay them on this machine (calibrated in the same run), and
    /// set the predicted residency beside the measured one, with the mean error.
    ///
    /// Examples:
    ///   shmnet sim validate --quick
    ///   shmnet sim validate --keep /tmp/val      also keeps the traces and the machine
    #[command(verbatim_doc_comment)]
    Validate(crate::replay::ValidateArgs),
    /// Seed 000's histogram for a residency trace on any machine: the overhead of every
    /// buffer the application read at copy-out, against the machine's 100 % clean and dirty
    /// miss marks (its lines × its fill costs).
    ///
    /// Examples:
    ///   shmnet residency --gap 0 --queue 16 --load 256 --trace res.trc
    ///   shmnet sim residency --machine hp720-1993 --plot hp720.png res.trc
    #[command(verbatim_doc_comment)]
    Residency(crate::replay::ResidencyReplayArgs),
    /// Print a machine (preset, file or calibration) as an editable TOML preset.
    ///
    /// Examples:
    ///   shmnet sim machine hp720-1993 > hp720-bsd.toml     then set miss_ticks = 91
    ///   shmnet sim machine cal.json                         this machine, from `shmnet calibrate --json`
    #[command(verbatim_doc_comment)]
    Machine(MachineArgs),
}

/// `shmnet sim run`.
#[derive(Args)]
pub struct RunArgs {
    /// A preset (hp720-1993, sgi-r4400-1994, this-machine), a preset file (.toml or .json),
    /// or the output of `shmnet calibrate --json`.
    #[arg(long, short, value_name = "MACHINE")]
    machine: String,
    /// The trace's format (default: guessed from its first bytes).
    #[arg(long, value_parser = parse_format)]
    format: Option<Format>,
    /// Classify misses into compulsory, capacity and conflict (slower).
    #[arg(long)]
    ccc: bool,
    /// Every instruction fetch hits the first level.
    #[arg(long)]
    perfect_icache: bool,
    /// Every data reference hits the first level.
    #[arg(long)]
    perfect_dcache: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// The trace file, or `-` for stdin.
    trace: String,
}

/// `shmnet sim sweep`.
#[derive(Args)]
pub struct SweepArgs {
    /// The base machine (as for `run`).
    #[arg(long, short, value_name = "MACHINE")]
    machine: String,
    /// First-level sizes.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "8K,16K,32K,64K,128K")]
    l1_size: Vec<u64>,
    /// First-level associativities.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    l1_assoc: Vec<u32>,
    /// Every instruction fetch hits the first level (data effects alone).
    #[arg(long, conflicts_with = "perfect_dcache")]
    perfect_icache: bool,
    /// Every data reference hits the first level (instruction effects alone).
    #[arg(long)]
    perfect_dcache: bool,
    /// The trace's format (default: guessed).
    #[arg(long, value_parser = parse_format)]
    format: Option<Format>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Also draw the sweep into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// The trace file, or `-` for stdin.
    trace: String,
}

/// `shmnet sim bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// References in the synthetic trace.
    #[arg(long, default_value_t = 100_000_000)]
    refs: u64,
    /// Where the temporary trace files go (about 30 bytes per reference; removed after).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print the rows as JSON: [{"format", "refs", "refs_per_s", ...}].
    #[arg(long)]
    json: bool,
}

/// `shmnet sim machine`.
#[derive(Args)]
pub struct MachineArgs {
    /// A preset name, preset file or calibration JSON.
    machine: String,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

fn parse_size(s: &str) -> Result<u64, String> {
    ByteSize::parse(s)
        .map(|b| b.0)
        .ok_or_else(|| format!("{s:?} is not a size; write e.g. 8K, 16K, 1M"))
}

/// Runs a `shmnet sim` subcommand.
pub fn run(cmd: SimCmd) -> Result<()> {
    match cmd {
        SimCmd::Run(a) => run_trace(a),
        SimCmd::Sweep(a) => sweep(a),
        SimCmd::Bench(a) => bench(a),
        SimCmd::Validate(a) => crate::replay::validate(a),
        SimCmd::Residency(a) => crate::replay::residency_replay(a),
        SimCmd::Machine(a) => {
            let m = Machine::load(&a.machine)?;
            for n in &m.notes {
                eprintln!("note: {n}");
            }
            print!("{}", m.to_toml_string());
            Ok(())
        }
    }
}

/// Traces shorter than this get no progress bar.
const BAR_BYTES: u64 = 32 << 20;

/// Opens TRACE (a path or `-`) and a progress bar sized to it.
fn open_trace(
    path: &str,
    format: Option<Format>,
) -> Result<(Format, Box<dyn trace::TraceSource + Send>, ProgressBar)> {
    let (input, len): (Box<dyn Read + Send>, Option<u64>) = if path == "-" {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = File::open(path).with_context(|| format!("opening the trace {path}"))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(f), len)
    };
    let (format, src) = trace::open(input, format).with_context(|| format!("reading {path}"))?;
    let bar = match len {
        Some(n) if n < BAR_BYTES => ProgressBar::hidden(),
        Some(n) => {
            let b = ProgressBar::new(n);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} {bytes}/{total_bytes} {wide_bar} {binary_bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        }
        None => {
            let b = ProgressBar::new_spinner();
            b.set_style(
                ProgressStyle::with_template("{spinner} {bytes} read, {binary_bytes_per_sec}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b
        }
    };
    Ok((format, src, bar))
}

fn load_machine(spec: &str) -> Result<Machine> {
    Ok(Machine::load(spec)?)
}

fn run_trace(a: RunArgs) -> Result<()> {
    let m = load_machine(&a.machine)?;
    let options = Options {
        ccc: a.ccc,
        perfect_icache: a.perfect_icache,
        perfect_dcache: a.perfect_dcache,
    };
    let mut sim =
        Simulator::with_options(&m, options).with_context(|| format!("machine {}", a.machine))?;
    let (_, mut src, bar) = open_trace(&a.trace, a.format)?;
    let result = sim.run(src.as_mut(), |b| bar.set_position(b));
    bar.finish_and_clear();
    result.with_context(|| format!("simulating {}", a.trace))?;
    let report = sim.report();
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}

fn sweep(a: SweepArgs) -> Result<()> {
    if a.l1_size.is_empty() || a.l1_assoc.is_empty() {
        bail!("give at least one --l1-size and one --l1-assoc");
    }
    let m = load_machine(&a.machine)?;
    let options = Options {
        ccc: false,
        perfect_icache: a.perfect_icache,
        perfect_dcache: a.perfect_dcache,
    };
    let (_, mut src, bar) = open_trace(&a.trace, a.format)?;
    let result =
        shmnet_sim::sweep::sweep(&m, &a.l1_size, &a.l1_assoc, options, src.as_mut(), |b| {
            bar.set_position(b)
        });
    bar.finish_and_clear();
    let report = result.with_context(|| format!("sweeping {}", a.trace))?;
    if let Some(path) = &a.plot {
        shmnet_sim::plot::sweep_png(&report, path)
            .with_context(|| format!("drawing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}

fn bench(a: BenchArgs) -> Result<()> {
    if a.refs == 0 {
        bail!("--refs must be at least 1");
    }
    let dir = a.dir.unwrap_or_else(std::env::temp_dir);
    let bar = ProgressBar::new(1000);
    bar.set_style(
        ProgressStyle::with_template("{msg:32} {wide_bar} {percent}%")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = shmnet_sim::bench::run(a.refs, &dir, &mut |step, frac| {
        bar.set_message(step.to_string());
        bar.set_position((frac * 1000.0) as u64);
    })
    .with_context(|| {
        format!(
            "writing or reading the temporary traces in {}",
            dir.display()
        )
    })?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string(&report.rows)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
