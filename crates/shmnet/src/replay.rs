//! Replaying residency traces (`shmnet residency --trace`) on simulated machines.
//!
//! `shmnet sim residency`: seed 000's histogram for a trace on any machine — the overhead of
//! every buffer the application read at copy-out, against that machine's 100 % clean and
//! dirty miss marks (lines × fill cost).
//!
//! `shmnet sim validate`: seed 001's validation, for shmnet's own data path. The residency
//! experiment runs on this machine with its references recorded; the recording is replayed
//! on `this-machine` (built from a calibration taken in the same run); the simulator's
//! per-buffer overheads at copy-out are classified against the same marks as the measured
//! ones; predicted and measured summary rows are set side by side, with the mean error.
//! Both sides' load times share one baseline, the in-cache time measured in the same run;
//! the error measures are defined in [`compare`].
//!
//! The timing model (what `this-machine` charges per line) is the calibrator's *streaming*
//! cost of each level — the overhead of loading a whole buffer from there, divided by its
//! lines — not the dependent-load latency of a pointer chase: the copy-out is a sequential
//! stream that the prefetchers and out-of-order execution overlap, which a trace-driven
//! model without them cannot reproduce from latencies.

use anyhow::{Context, Result};
use clap::Args;
use shmnet_lab::calibrate::{self, Degeneracy, Effort, Marks, Table1};
use shmnet_lab::residency::summary::{self, Histogram, Overhead, Summary};
use shmnet_lab::residency::trace::{Record, Who};
use shmnet_lab::residency::{self, Residency, Settings};
use shmnet_sim::{Machine, Op, Party, Ref, Simulator, TraceWriter};
use std::path::PathBuf;

pub mod breakdown;
mod compare;
pub mod future;
pub mod native;
pub mod row_sweep;
pub mod rows;

#[derive(Args)]
pub struct ValidateArgs {
    /// 100 messages per setting instead of 1,000, a quick calibration.
    #[arg(long)]
    quick: bool,
    /// Keep each setting's trace (shmnet binary format) and the machine in this directory.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Leave out seed 001's eight latency rows (which need valgrind).
    #[arg(long)]
    skip_rows: bool,
    /// Leave out the residency replay.
    #[arg(long)]
    skip_residency: bool,
}

/// What `shmnet sim validate --json` prints: the eight rows (top level, as the issue names
/// them) and the residency replay beside them.
#[derive(serde::Serialize)]
struct Output {
    #[serde(flatten)]
    rows: Option<rows::RowsReport>,
    /// The machine the rows were simulated on (latency costs).
    #[serde(skip_serializing_if = "Option::is_none")]
    rows_machine: Option<Machine>,
    residency: Option<Validation>,
}

/// One setting's measured and predicted rows.
#[derive(serde::Serialize)]
struct Row {
    setting: String,
    /// Buffers timed (the measured side).
    buffers: u64,
    /// Buffers the simulator timed in the replay (one per application read at copy-out).
    predicted_buffers: u64,
    measured: Summary,
    predicted: Summary,
    /// predicted − measured, percentage points of buffers totally within cache.
    fully_cached_error_points: f64,
    /// The load time of a buffer of the calibrated length, measured and predicted on one
    /// baseline (the analogue of the latency seed 001 validated), and the errors.
    #[serde(flatten)]
    load: compare::Comparison,
    references: u64,
}

#[derive(serde::Serialize)]
struct Validation {
    machine: Machine,
    marks: Marks,
    /// Why the marks cannot classify buffers on this machine (null: they can); when set,
    /// the "% in cache" columns compare nothing.
    degenerate: Option<Degeneracy>,
    /// Bytes per word in the overheads per word.
    word_bytes: usize,
    rows: Vec<Row>,
    /// Mean of |relative error| of the average overhead per word over the settings; `null`
    /// if a setting's measured overhead is zero (its relative error is undefined).
    mean_abs_rel_error_avg_overhead: Option<f64>,
    /// Mean of |predicted − measured overhead| of a buffer, ticks.
    mean_abs_overhead_error_ticks: Option<f64>,
    /// Mean of |error| in points of % totally within cache.
    mean_abs_error_fully_cached_points: Option<f64>,
    /// Mean of |relative error| of the mean buffer load time (seed 001's figure: 4.65 %).
    mean_abs_rel_error_load: Option<f64>,
}

/// The settings validated: the lab's inline runs whose residency is not trivially 100 %.
fn settings(quick: bool) -> Vec<(String, Settings)> {
    let messages = if quick { 100 } else { 1000 };
    let base = Settings {
        messages,
        ..Settings::default()
    };
    let mut v = vec![("inline-large-gap".to_string(), base.clone())];
    // At the large gap, with a queue deep enough that no message is dropped: the load's
    // blocks evict the frames that arrive while it walks (the device interrupts it, as in
    // the lab's Table 4). Back to back, the interrupts would flood the receiver.
    for load in [256, 1024, 4096] {
        v.push((
            format!("inline-queue-16-large-gap-load-{load}"),
            Settings {
                queue: 16,
                load_bytes: load,
                ..base.clone()
            },
        ));
    }
    v
}

/// This machine as the simulator's preset, with each level charged its streaming cost.
fn streaming_machine(t: &Table1) -> Result<Machine> {
    let json = serde_json::to_string(t)?;
    let mut m = Machine::from_calibration_json(&json)
        .map_err(|e| anyhow::anyhow!("building this-machine: {e}"))?;
    let b = &t.buffer;
    let lines = (b.line_offset + b.bytes).div_ceil(64) as f64;
    let l1 = t.line_load_ticks.l1;
    let per_line = |overhead: f64| l1 + overhead.max(0.0) / lines;
    for c in &mut m.caches {
        c.hit_ticks = match c.level {
            1 => l1,
            2 => per_line(b.l2_overhead.p50),
            _ => per_line(b.llc_overhead.p50),
        };
    }
    // The last level as big as this process really gets of it (the calibrator's knee).
    let eff = t.effective_llc.bytes as u64;
    let top = m.caches.iter().map(|c| c.level).max().unwrap_or(1);
    if let Some(c) = m
        .caches
        .iter_mut()
        .find(|c| c.level == top && top > 1 && eff > 0)
    {
        let line = c.line.0;
        let sets = (eff / (16 * line)).max(1);
        let sets = 1u64 << (63 - sets.leading_zeros());
        let ways = ((eff as f64 / (sets * line) as f64).round() as u64).max(1);
        c.size = shmnet_sim::ByteSize(sets * ways * line);
        c.ways = shmnet_sim::Ways::N(ways as u32);
        m.notes.push(format!(
            "the last level is modelled at the {:.1} MiB this process measurably gets ({} sets × {ways} ways), not the {:.0} MiB the kernel reports",
            (sets * ways * line) as f64 / (1 << 20) as f64,
            sets,
            t.caches.iter().filter(|c| c.level == top).map(|c| c.size_bytes).max().unwrap_or(0) as f64 / (1 << 20) as f64
        ));
    }
    m.memory.ticks = per_line(b.clean_overhead.p50);
    m.memory.dirty_ticks = per_line(b.dirty_overhead.p50).max(m.memory.ticks);
    m.name = "this-machine (streaming costs)".into();
    m.notes.push(format!(
        "per-line costs are the calibrated streaming costs of a {}-byte buffer: L1 {:.1}, L2 {:.1}, last level {:.1}, memory {:.1} / {:.1} dirty",
        b.bytes,
        l1,
        per_line(b.l2_overhead.p50),
        per_line(b.llc_overhead.p50),
        m.memory.ticks,
        m.memory.dirty_ticks
    ));
    Ok(m)
}

fn party(w: Who) -> Party {
    match w {
        Who::Sender => Party::Driver,
        Who::Stack => Party::Stack,
        Who::Application => Party::Application,
        Who::Load => Party::Load,
    }
}

/// Writes records as a shmnet binary trace.
pub fn write_trace(path: &std::path::Path, records: &[Record]) -> Result<u64> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = TraceWriter::new(file)?;
    for r in records {
        let op = if r.write { Op::Write } else { Op::Read };
        w.write(party(r.who), op, r.addr, u64::from(r.len))?;
    }
    let n = w.records();
    w.finish()?;
    Ok(n)
}

/// Replays references; returns the predicted overhead of every timed buffer (the
/// application's reads: one per buffer at copy-out), placed in its message (the
/// application's write of the copy ends a message).
///
/// Also returns how many first-level lines each timed buffer spans.
fn predict(
    machine: &Machine,
    refs: impl Iterator<Item = Result<Ref>>,
) -> Result<(Vec<Overhead>, Vec<u64>)> {
    let mut sim = Simulator::new(machine).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (l1, line) = l1_hit(machine);
    let mut out = Vec::new();
    let mut spans = Vec::new();
    let mut position = 0u16;
    for r in refs {
        let r = r?;
        let t = sim.access_ref(&r);
        match (r.party, r.op) {
            (Party::Application, Op::Read) => {
                let n = lines(r.addr, r.size, line);
                spans.push(n);
                out.push(Overhead {
                    position,
                    len: r.size,
                    ticks: (t - n as f64 * l1).max(0.0),
                });
                position = position.saturating_add(1);
            }
            (Party::Application, Op::Write) => position = 0,
            _ => {}
        }
    }
    Ok((out, spans))
}

/// The first-level data cache's hit cost and line size.
fn l1_hit(machine: &Machine) -> (f64, u64) {
    machine
        .caches
        .iter()
        .filter(|c| c.level == 1 && c.side != shmnet_sim::Side::Instruction)
        .map(|c| (c.hit_ticks, c.line.0))
        .next()
        .unwrap_or((0.0, 64))
}

/// Lines of `line` bytes that `size` bytes at `addr` touch.
fn lines(addr: u64, size: u32, line: u64) -> u64 {
    (addr + u64::from(size.max(1)) - 1) / line - addr / line + 1
}

fn refs_of(records: &[Record]) -> impl Iterator<Item = Result<Ref>> + '_ {
    records.iter().map(|r| {
        Ok(Ref {
            party: party(r.who),
            op: if r.write { Op::Write } else { Op::Read },
            size: r.len,
            addr: r.addr,
        })
    })
}

pub fn validate(a: ValidateArgs) -> Result<()> {
    if a.skip_rows && a.skip_residency {
        anyhow::bail!("--skip-rows and --skip-residency leave nothing to validate; drop one");
    }
    let pb = crate::progress_bar();
    pb.set_message("calibrating");
    let effort = if a.quick { Effort::QUICK } else { Effort::FULL };
    let table = calibrate::run(effort, &mut |m| pb.set_message(format!("calibrating: {m}")))?;
    let mut out = Output {
        rows: None,
        rows_machine: None,
        residency: None,
    };
    if !a.skip_rows {
        let machine = Machine::from_calibration_json(&serde_json::to_string(&table)?)
            .map_err(|e| anyhow::anyhow!("building this-machine: {e}"))?;
        let r = rows::run(&machine, a.quick, table.timer.ticks_per_ns, &pb)?;
        out.rows = Some(r);
        out.rows_machine = Some(machine);
    }
    if !a.skip_residency {
        out.residency = Some(residency_validation(&a, &table, &pb)?);
    }
    pb.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    if let Some(r) = &out.rows {
        println!("{r}");
    }
    if let Some(v) = &out.residency {
        print_residency(v);
    }
    Ok(())
}

/// The residency replay: the lab's settings recorded, replayed on this machine's streaming
/// costs, predicted beside measured.
fn residency_validation(
    a: &ValidateArgs,
    table: &Table1,
    pb: &indicatif::ProgressBar,
) -> Result<Validation> {
    let marks = table.buffer.marks();
    let machine = streaming_machine(table)?;
    if let Some(dir) = &a.keep {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("this-machine.toml"), machine.to_toml_string())?;
        std::fs::write(
            dir.join("calibration.json"),
            serde_json::to_string_pretty(table)?,
        )?;
    }
    let mut rows = Vec::new();
    let all = settings(a.quick);
    for (i, (name, s)) in all.iter().enumerate() {
        let (measured, records): (Residency, Vec<Record>) =
            residency::run_traced(s, marks, &mut |f, m| {
                pb.set_position(((i as f64 + f) / all.len() as f64 * 1000.0) as u64);
                pb.set_message(format!("{name}: {m}"));
            })?;
        if let Some(dir) = &a.keep {
            write_trace(&dir.join(format!("{name}.trc")), &records)?;
        }
        pb.set_message(format!("{name}: simulating {} references", records.len()));
        let (predicted, _) = predict(&machine, refs_of(&records))?;
        let (_, limit) = Histogram::range_for(&marks, 1.0);
        let p = summary::summarize(&predicted, &marks, limit);
        let m = measured.summary;
        // The load time of a buffer of the calibrated kind (the typical fragment).
        let load = compare::compare(
            &measured.in_cache_ticks,
            table.timer.overhead_ticks as f64,
            table.buffer.bytes as u32,
            m.avg_overhead_ticks_per_word,
            p.avg_overhead_ticks_per_word,
        )
        .with_context(|| format!("validating {name}"))?;
        rows.push(Row {
            setting: name.clone(),
            buffers: measured.buffers,
            predicted_buffers: predicted.len() as u64,
            fully_cached_error_points: p.fully_cached_pct - m.fully_cached_pct,
            load,
            measured: m,
            predicted: p,
            references: records.len() as u64,
        });
    }
    let v = Validation {
        mean_abs_rel_error_load: compare::mean_abs(rows.iter().map(|r| r.load.load_rel_error)),
        mean_abs_rel_error_avg_overhead: compare::mean_abs_all(
            rows.iter().map(|r| r.load.avg_overhead_rel_error),
        ),
        mean_abs_overhead_error_ticks: compare::mean_abs(
            rows.iter().map(|r| r.load.overhead_error_ticks),
        ),
        mean_abs_error_fully_cached_points: compare::mean_abs(
            rows.iter().map(|r| r.fully_cached_error_points),
        ),
        machine,
        degenerate: marks.degeneracy(),
        marks,
        word_bytes: summary::WORD_BYTES,
        rows,
    };
    Ok(v)
}

/// Prints the residency replay's table.
fn print_residency(v: &Validation) {
    if let Some(d) = v.degenerate {
        println!("WARNING: {d}; the % in cache columns compare nothing");
    }
    println!(
        "{:<38} {:>15} {:>7} {:>15} {:>7} {:>9} {:>13}",
        "setting", "load ticks", "error", "ticks/word", "error", "overhead", "% in cache"
    );
    println!(
        "{:<38} {:>15} {:>7} {:>15} {:>7} {:>9} {:>13}",
        "", "meas. / pred.", "", "meas. / pred.", "", "error", "meas. / pred."
    );
    for r in &v.rows {
        println!(
            "{:<38} {:>7.0} / {:<5.0} {:>7} {:>7.3} / {:<5.3} {:>7} {:>9.1} {:>5.1} / {:<5.1}",
            r.setting,
            r.load.measured_load_ticks,
            r.load.predicted_load_ticks,
            percent(Some(r.load.load_rel_error)),
            r.measured.avg_overhead_ticks_per_word,
            r.predicted.avg_overhead_ticks_per_word,
            percent(r.load.avg_overhead_rel_error),
            r.load.overhead_error_ticks,
            r.measured.fully_cached_pct,
            r.predicted.fully_cached_pct
        );
    }
    let bytes = v.rows.first().map_or(0, |r| r.load.buffer_bytes);
    println!(
        "\nmean |error|: {} of a {bytes}-byte buffer's load time (seed 001 validated latency to 4.65 %), {} of the overhead per word, {:.1} ticks of its overhead, {:.1} points of % buffers in cache",
        percent(v.mean_abs_rel_error_load),
        percent(v.mean_abs_rel_error_avg_overhead),
        v.mean_abs_overhead_error_ticks.unwrap_or(f64::NAN),
        v.mean_abs_error_fully_cached_points.unwrap_or(f64::NAN)
    );
    println!(
        "load ticks: the in-cache time measured in this run + the measured or predicted overhead; an error shown as — has a zero measured overhead as its denominator"
    );
    for note in &v.machine.notes {
        println!("note: {note}");
    }
}

/// A fraction as a percentage, or "—" where it is undefined.
fn percent(f: Option<f64>) -> String {
    f.map_or_else(|| "—".to_string(), |f| format!("{:.1}%", 100.0 * f))
}

#[derive(Args)]
pub struct ResidencyReplayArgs {
    /// The machine: a preset (hp720-1993, sgi-r4400-1994, this-machine), a preset file, or a
    /// `shmnet calibrate --json` output.
    #[arg(long, default_value = "hp720-1993")]
    machine: String,
    /// A trace written by `shmnet residency --trace FILE`.
    trace: PathBuf,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Draw the histogram into this PNG.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
}

pub fn residency_replay(a: ResidencyReplayArgs) -> Result<()> {
    let machine = Machine::load(&a.machine)?;
    let file =
        std::fs::File::open(&a.trace).with_context(|| format!("opening {}", a.trace.display()))?;
    let (_, mut src) = shmnet_sim::trace::open(Box::new(std::io::BufReader::new(file)), None)?;
    let mut batch = Vec::new();
    let mut all = Vec::new();
    loop {
        src.next_batch(&mut batch, 1 << 16)?;
        if batch.is_empty() {
            break;
        }
        all.extend_from_slice(&batch);
    }
    let (over, mut spans) = predict(&machine, all.into_iter().map(Ok))?;
    if over.is_empty() {
        anyhow::bail!(
            "{} holds no application reads: record one with `shmnet residency --trace FILE`",
            a.trace.display()
        );
    }
    // The machine's marks for the median buffer: the lines it spans × the fill costs.
    let mut lens: Vec<u32> = over.iter().map(|o| o.len).collect();
    lens.sort_unstable();
    let len = lens[lens.len() / 2];
    spans.sort_unstable();
    let (l1, line) = l1_hit(&machine);
    let n_lines = spans[spans.len() / 2] as f64;
    let fill = machine.memory.ticks - l1;
    let marks = Marks {
        cached_max: fill / 2.0,
        clean: n_lines * fill,
        dirty: n_lines * (machine.memory.dirty_ticks - l1).max(fill),
    };
    let settings = Settings::default();
    let (bin, limit) = Histogram::range_for(&marks, 1.0);
    let bin = bin.max(10.0).round();
    let hist = Histogram::build(&over, bin, limit);
    let result = Residency {
        degenerate: marks.degeneracy(),
        buffers: over.len() as u64,
        summary: summary::summarize(&over, &marks, limit),
        positions: summary::by_position(&over, &marks, limit).0,
        ks: vec![],
        peaks: hist.peaks(&marks),
        histogram: hist,
        messages: Default::default(),
        in_cache_ticks: vec![],
        unforced: 0,
        unrecorded: 0,
        switch: None,
        switches: 0,
        word_bytes: summary::WORD_BYTES,
        seconds: 0.0,
        settings,
        marks,
    };
    if let Some(p) = &a.plot {
        residency::figure::histograms(
            p,
            &format!("{} on {}", a.trace.display(), machine.name),
            &[(machine.name.clone(), &result)],
            'A',
        )?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "machine": machine.name,
                "buffers": result.buffers,
                "marks": marks,
                "degenerate": result.degenerate,
                "histogram": result.histogram,
                "summary": result.summary,
                "peaks": result.peaks,
            })
        );
        return Ok(());
    }
    let s = &result.summary;
    println!(
        "{} buffers of {} on {}: marks (overhead {}) 100 % clean miss {:.0}, 100 % dirty miss {:.0} ({} lines of {} B)",
        result.buffers,
        len,
        machine.name,
        machine.tick_unit,
        marks.clean,
        marks.dirty,
        n_lines,
        line
    );
    if let Some(d) = result.degenerate {
        println!("WARNING: {d}");
    }
    println!(
        "% totally within cache {:.1}, < clean {:.1}, < dirty {:.1}, > dirty {:.1}; {:.3} overhead per word (8 B)",
        s.fully_cached_pct,
        s.lt_clean_pct,
        s.lt_dirty_pct,
        s.gt_dirty_pct,
        s.avg_overhead_ticks_per_word
    );
    println!("peaks (bins of {bin:.0}):");
    for p in &result.peaks {
        println!("  {p}");
    }
    Ok(())
}
