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
    ///   parallel shmnet sim sweep --machine sgi-r4400-1994 --shard {}/4 --json t.trc '>' s{}.json ::: 1 2 3 4
    #[command(verbatim_doc_comment)]
    Sweep(SweepArgs),
    /// Put the shards of a sweep (`sweep --shard I/N --json`, one file each) back together
    /// into the whole sweep's tables, JSON or plot; refuses shards of different sweeps,
    /// shards given twice and missing ones.
    ///
    /// Examples:
    ///   shmnet sim sweep-merge s1.json s2.json s3.json s4.json
    ///   shmnet sim sweep-merge --plot sweep.png s*.json
    #[command(verbatim_doc_comment)]
    SweepMerge(SweepMergeArgs),
    /// Simulation speed: a synthetic trace of packet copies (10^8 references by default)
    /// written in the D and binary formats, each read back and simulated on an L1 + L2
    /// machine; references per second, parsing included.
    ///
    /// Examples:
    ///   shmnet sim bench
    ///   shmnet sim bench --refs 10000000 --json
    #[command(verbatim_doc_comment)]
    Bench(BenchArgs),
    /// Seed 001's validation: its eight latency rows (TCP and UDP, send and receive,
    /// checksum off and on) through shmnet's stack, timed here and traced under valgrind's
    /// lackey, simulated beside measured with the error per row and the mean; then the
    /// residency experiment recorded and replayed on this machine (calibrated in the same
    /// run), predicted residency beside measured.
    ///
    /// Examples:
    ///   shmnet sim validate --quick
    ///   shmnet sim validate --quick --skip-residency --json     the eight rows only
    ///   shmnet sim validate --keep /tmp/val      also keeps the residency traces and the machine
    #[command(verbatim_doc_comment)]
    Validate(crate::replay::ValidateArgs),
    /// This machine's memory signature (seed 001's validation lesson): the time of a read
    /// by working-set size (4 KiB to 64 MiB) and stride, dependent (a chase) and
    /// independent (a stream), measured here beside the same references simulated on this
    /// machine built from a calibration taken in the same run (or on --machine).
    ///
    /// Examples:
    ///   shmnet sim signature --quick
    ///   shmnet sim signature --json > sig.json
    #[command(verbatim_doc_comment)]
    Signature(SignatureArgs),
    /// Seed 001's future machines: the eight latency rows traced once and simulated on the
    /// seed's 1994 machine, its 1996 and 1998 projections and a line of machines from then
    /// to this one (calibrated in the run): latency, CPI and time waiting for memory.
    ///
    /// --json prints one object: {"machines": [...], "rows": [{"row", "instructions",
    /// "measured_us", "on": [{"machine", "latency_us", "cpi", "memory_pct"}]}]}.
    ///
    /// Examples:
    ///   shmnet sim future --quick
    ///   shmnet sim future --json > future.json
    #[command(verbatim_doc_comment)]
    Future(crate::replay::rows::RowsArgs),
    /// Seed 001's breakdowns of the eight rows on one machine (the seed's SGI by default):
    /// time waiting for memory, first-level miss rates, perfect instruction cache vs
    /// perfect data cache vs ideal cache, and the instruction mix (load/store, arithmetic,
    /// control, other) as a share of instructions and of time.
    ///
    /// --json prints one object: {"machine", "rows": [{"row", "ticks", "perfect_icache_ticks",
    /// "perfect_dcache_ticks", "ideal_ticks", "memory_pct", "l1i_miss_rate", "l1d_miss_rate",
    /// "mix": [...]}]}.
    ///
    /// Examples:
    ///   shmnet sim breakdown --quick
    ///   shmnet sim breakdown --machine seed001-1998 --json
    #[command(verbatim_doc_comment)]
    Breakdown(crate::replay::breakdown::BreakdownArgs),
    /// Seed 001's sensitivity sweeps on the eight rows: the first level from 8 KiB to 128 KiB
    /// at the machine's second level, associativity 1 to 8 — TCP against UDP, cycles per
    /// message and time waiting for memory.
    ///
    /// --json prints one object: {"machine", "sizes", "ways", "rows": [{"row", "cells":
    /// [{"l1_bytes", "l1_ways", "ticks", "memory_pct"}]}]}.
    ///
    /// Examples:
    ///   shmnet sim row-sweep --quick
    ///   shmnet sim row-sweep --machine sgi-r4400-1994 --l1-size 16K,64K --l1-assoc 1,2 --json
    #[command(verbatim_doc_comment)]
    RowSweep(crate::replay::row_sweep::RowSweepArgs),
    /// One validation row's workload with marked steps, for lackey (used by `validate`).
    #[command(hide = true)]
    RowWorker(crate::replay::rows::RowWorkerArgs),
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
    #[arg(long, value_name = "FILE.png", conflicts_with = "shard")]
    plot: Option<PathBuf>,
    /// Run only the I-th of every N configurations (1-based; sizes outer), for a sweep cut
    /// into N independent jobs; put their `--json` reports back together with
    /// `shmnet sim sweep-merge`.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    shard: Option<shmnet_sim::sweep::Shard>,
    /// The trace file, or `-` for stdin.
    trace: String,
}

/// `shmnet sim sweep-merge`.
#[derive(Args)]
pub struct SweepMergeArgs {
    /// Print one JSON object (the whole sweep) instead of tables.
    #[arg(long)]
    json: bool,
    /// Also draw the merged sweep into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// The shards' `shmnet sim sweep --shard I/N --json` outputs, every shard once, any order.
    #[arg(required = true)]
    reports: Vec<PathBuf>,
}

fn parse_shard(s: &str) -> Result<shmnet_sim::sweep::Shard, String> {
    shmnet_sim::sweep::Shard::parse(s).map_err(|e| e.to_string())
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

/// `shmnet sim signature`.
#[derive(Args)]
pub struct SignatureArgs {
    /// Every other size and fewer samples, a quick calibration.
    #[arg(long)]
    quick: bool,
    /// Simulate on this machine (preset, file or calibration JSON) instead of this one
    /// calibrated in the run.
    #[arg(long)]
    machine: Option<String>,
    /// Print one JSON object: {"machine", "cells": [{"size_bytes", "stride_bytes",
    /// "chase_ticks", "stream_ticks", "simulated_ticks"}], ...}.
    #[arg(long)]
    json: bool,
}

fn signature(a: SignatureArgs) -> Result<()> {
    use shmnet_lab::calibrate::{self, Effort};
    let pb = crate::progress_bar();
    pb.set_message("calibrating");
    let effort = if a.quick { Effort::QUICK } else { Effort::FULL };
    let table = calibrate::run(effort, &mut |m| pb.set_message(format!("calibrating: {m}")))?;
    let machine = match &a.machine {
        Some(m) => Machine::load(m)?,
        None => Machine::from_calibration_json(&serde_json::to_string(&table)?)
            .map_err(|e| anyhow::anyhow!("building this-machine: {e}"))?,
    };
    let sig = shmnet_lab::signature::run(
        &machine,
        a.quick,
        table.timer.overhead_ticks,
        &mut |f, m| {
            pb.set_position((f * 1000.0) as u64);
            pb.set_message(m.to_string());
        },
    )?;
    pb.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string(&sig)?);
    } else {
        print!("{sig}");
        for n in &machine.notes {
            println!("note: {n}");
        }
    }
    Ok(())
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

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
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
        SimCmd::RowWorker(a) => crate::replay::rows::row_worker(a),
        SimCmd::Signature(a) => signature(a),
        SimCmd::SweepMerge(a) => sweep_merge(a),
        SimCmd::Future(a) => crate::replay::future::future(a),
        SimCmd::Breakdown(a) => crate::replay::breakdown::breakdown(a),
        SimCmd::RowSweep(a) => crate::replay::row_sweep::row_sweep(a),
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
    let result = shmnet_sim::sweep::sweep(
        &m,
        &a.l1_size,
        &a.l1_assoc,
        options,
        a.shard,
        src.as_mut(),
        |b| bar.set_position(b),
    );
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

fn sweep_merge(a: SweepMergeArgs) -> Result<()> {
    let mut reports = Vec::new();
    for p in &a.reports {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let r: shmnet_sim::sweep::SweepReport =
            serde_json::from_str(text.trim()).with_context(|| {
                format!(
                    "{} is not the JSON of `shmnet sim sweep --shard I/N --json`",
                    p.display()
                )
            })?;
        reports.push(r);
    }
    let report = shmnet_sim::sweep::merge(reports)?;
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
