//! `shmnet lab`: seed 000's tables on this machine in one run — calibration (Table 1),
//! structures × gap (Table 2), checksum and TLB forcing (Table 3), queue size and load
//! (Table 4), and the seed's three rules put to the test (LIFO buffers, huge pages, one
//! context) plus cached vs non-temporal "DMA". Writes `report.md`, a PNG of histograms per
//! table, and every run's JSON.

use crate::calibrate::{self, Effort, Marks, Table1};
use crate::residency::{self, Cores, Residency, Settings, Structure};
use shmnet_chan::{AllocPolicy, BufferLayout, PageSize};
use shmnet_io::driver::softnic::Dma;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What to run.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// Fewer messages per cell, fewer windows per calibration figure.
    pub quick: bool,
    /// Where the report goes.
    pub out: PathBuf,
    /// This program (the server structure starts `exe serve`).
    pub exe: PathBuf,
}

/// One run of the suite.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Which table it belongs to: `table2`, `table3`, `table4`, `rules`.
    pub table: &'static str,
    /// Its file name and column head.
    pub name: String,
    /// Its settings.
    pub settings: Settings,
}

/// A cell's outcome: the result, or why it could not run.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(untagged)]
pub enum Outcome {
    /// It ran.
    Ran(Box<Residency>),
    /// It could not (e.g. no huge pages reserved).
    Failed {
        /// Why.
        error: String,
    },
}

/// The large gap: one message is long done before the next (the seed used 20 ms; 2 ms is
/// a hundred times this machine's per-message time and keeps the run short).
pub const LARGE_GAP_US: f64 = 2000.0;

/// The structures of Figures 2–3 and Table 2: a name, the structure, its cores, and how
/// the device writes. `hpux` is the seed's HP-UX: a monolithic kernel (here `inline`) whose
/// device writes around the cache (non-temporal stores, as its DMA did).
const STRUCTURES: [(&str, Structure, Cores, Dma); 5] = [
    ("inline", Structure::Inline, Cores::Same, Dma::Cached),
    ("hpux", Structure::Inline, Cores::Same, Dma::NonTemporal),
    ("server-same", Structure::Server, Cores::Same, Dma::Cached),
    ("server-split", Structure::Server, Cores::Split, Dma::Cached),
    (
        "server-regions",
        Structure::ServerRegions,
        Cores::Same,
        Dma::Cached,
    ),
];

/// The loads of Figure 8 and Table 4, as multiples of the knee (the state block at which
/// the load alone takes the large gap per message): stepped finely around it, as the seed
/// stepped 23, 24, 25 bytes per word, with a wider step either side for the shape.
fn load_steps(quick: bool) -> &'static [f64] {
    if quick {
        &[0.5, 1.0, 2.0]
    } else {
        &[0.25, 0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 2.0]
    }
}

/// What the plan depends on that is measured before the cells run.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct PlanInputs {
    /// The state block (bytes per word) at which walking one message takes the large gap
    /// ([`crate::residency::load::knee`]).
    pub knee_load_bytes: usize,
    /// This machine's second-level cache, bytes: what the busy switch partner writes.
    pub l2_bytes: usize,
}

/// The suite's cells, in the order they run.
pub fn plan(quick: bool, inputs: PlanInputs) -> Vec<Cell> {
    let messages = if quick { 60 } else { 1000 };
    let base = Settings {
        messages,
        gap_us: LARGE_GAP_US,
        ..Settings::default()
    };
    let gaps = [("large", LARGE_GAP_US), ("small", 0.0)];
    let mut cells = Vec::new();
    let mut add = |table, name: String, s: Settings| {
        cells.push(Cell {
            table,
            name,
            settings: s,
        })
    };
    // Figures 2-3, Table 2: every structure at both gaps.
    for (gname, gap) in gaps {
        for (pname, structure, cores, dma) in STRUCTURES {
            add(
                "table2",
                format!("{pname}-{gname}-gap"),
                Settings {
                    structure,
                    cores,
                    dma,
                    gap_us: gap,
                    ..base.clone()
                },
            );
        }
    }
    // Figures 4-5, Table 3: the seed's Mach, TLB forced, checksum off and on (server, one
    // CPU).
    for (gname, gap) in gaps {
        for checksum in [false, true] {
            add(
                "table3",
                format!(
                    "server-same-tlb-forced{}-{gname}-gap",
                    if checksum { "-checksum" } else { "" }
                ),
                Settings {
                    structure: Structure::Server,
                    tlb_force: true,
                    checksum,
                    gap_us: gap,
                    ..base.clone()
                },
            );
        }
    }
    // Section 3.3, Figure 6: HP-UX with the TLB forced (the seed: no significant change)
    // and with checksumming (the seed: nearly half of the buffers then in cache).
    let hpux = Settings {
        dma: Dma::NonTemporal,
        ..base.clone()
    };
    add(
        "hpux",
        "hpux-tlb-forced-small-gap".into(),
        Settings {
            tlb_force: true,
            gap_us: 0.0,
            ..hpux.clone()
        },
    );
    for (gname, gap) in gaps {
        add(
            "hpux",
            format!("hpux-checksum-{gname}-gap"),
            Settings {
                checksum: true,
                gap_us: gap,
                ..hpux.clone()
            },
        );
    }
    // Section 3.4: BSD with the TLB forced and with checksumming, both gaps.
    for (what, tlb_force, checksum) in [("tlb-forced", true, false), ("checksum", false, true)] {
        for (gname, gap) in gaps {
            add(
                "bsd",
                format!("inline-{what}-{gname}-gap"),
                Settings {
                    tlb_force,
                    checksum,
                    gap_us: gap,
                    ..base.clone()
                },
            );
        }
    }
    // Figure 7: BSD with large socket buffers (the seed's 246,467 bytes: sixteen of its
    // messages), at a large gap and back to back.
    for (gname, gap) in gaps {
        add(
            "fig7",
            format!("inline-queue-16-{gname}-gap"),
            Settings {
                queue: 16,
                gap_us: gap,
                ..base.clone()
            },
        );
    }
    // Figure 8, Table 4: BSD at a large gap with a queue of one, the load stepped finely
    // around the knee; the drop rate beside the overhead.
    // Named by their multiple of the knee, so that runs on different days (whose knees
    // differ) line up by name; the bytes are in the settings.
    add("table4", "inline-load-0-large-gap".into(), base.clone());
    for f in load_steps(quick) {
        let load = ((inputs.knee_load_bytes as f64 * f / 8.0).round() as usize * 8).max(8);
        add(
            "table4",
            format!("inline-load-{f:.2}x-knee-large-gap"),
            Settings {
                load_bytes: load,
                ..base.clone()
            },
        );
    }
    // The rules. Rule 3: many buffers in flight — a 16-message queue before a receiver
    // loaded at the knee, which just keeps up on average and falls behind at every stall,
    // so messages wait in their buffers while the load walks (back to back the interrupts
    // would flood it instead, dropping nearly everything).
    let in_flight = Settings {
        queue: 16,
        load_bytes: inputs.knee_load_bytes,
        ..base.clone()
    };
    for alloc in [AllocPolicy::Lifo, AllocPolicy::Fifo] {
        add(
            "rules",
            format!("alloc-{}", format!("{alloc:?}").to_lowercase()),
            Settings {
                alloc,
                ..in_flight.clone()
            },
        );
    }
    // Rule 3's layout: the same, the buffers laid out contiguously or scattered over the
    // pool (one to a page; LIFO both).
    for layout in [BufferLayout::Contiguous, BufferLayout::Scattered] {
        add(
            "rules",
            format!("layout-{layout}"),
            Settings {
                layout,
                ..in_flight.clone()
            },
        );
    }
    // Rule 1: group TLB entries.
    for (pname, pages) in [("4k", PageSize::Small), ("2m", PageSize::Huge)] {
        add(
            "rules",
            format!("pages-{pname}"),
            Settings {
                structure: Structure::Server,
                pages,
                ..base.clone()
            },
        );
    }
    // Rule 2: touch the data late and in one context. The same structure, the data
    // touched by the stack's checksum; its copy-out follows at once (`inline-checksum-
    // large-gap`, in `bsd`) or after a switch to another process that writes nothing or
    // this machine's L2 of its own.
    for (name, touch_bytes) in [("idle", 0), ("busy", inputs.l2_bytes)] {
        add(
            "rules",
            format!("inline-checksum-switch-{name}-large-gap"),
            Settings {
                checksum: true,
                switch: Some(crate::residency::switch::SwitchSpec { touch_bytes }),
                ..base.clone()
            },
        );
    }
    cells
}

/// What the suite produced.
pub struct SuiteReport {
    /// Table 1.
    pub calibration: Table1,
    /// What the plan was made from.
    pub inputs: PlanInputs,
    /// Every cell with its outcome.
    pub cells: Vec<(Cell, Outcome)>,
    /// Where `report.md` is.
    pub report: PathBuf,
    /// Seconds the whole suite took.
    pub seconds: f64,
}

/// Progress of the suite: the cell (index, total, name), and within it a fraction and a
/// message.
pub trait SuiteProgress {
    /// A cell (or the calibration, index 0) starts.
    fn cell(&mut self, index: usize, total: usize, name: &str);
    /// Within the current cell.
    fn step(&mut self, frac: f64, msg: &str);
}

/// Why the suite failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The output could not be written.
    #[error("writing {0}: {1}")]
    Write(PathBuf, std::io::Error),
    /// The calibration failed.
    #[error("calibrating: {0}")]
    Calibrate(crate::mem::MapError),
}

// The message above includes the cause, so it is not also reported as `source()` (a chain
// printer would repeat it).
impl From<crate::mem::MapError> for SuiteError {
    fn from(e: crate::mem::MapError) -> Self {
        Self::Calibrate(e)
    }
}

/// Runs the suite and writes its report.
pub fn run(opts: &SuiteOptions, p: &mut dyn SuiteProgress) -> Result<SuiteReport, SuiteError> {
    let t0 = std::time::Instant::now();
    let runs_dir = opts.out.join("runs");
    std::fs::create_dir_all(&runs_dir).map_err(|e| SuiteError::Write(runs_dir.clone(), e))?;
    // The knee first (a fraction of a second), so the plan, and the progress bar's
    // length, are known before the calibration.
    let defaults = Settings::default();
    let inputs = PlanInputs {
        knee_load_bytes: crate::residency::load::knee(
            defaults.size,
            defaults.load_range_bytes,
            std::time::Duration::from_secs_f64(LARGE_GAP_US / 1e6),
            1 << 20,
        )?,
        l2_bytes: crate::cacheinfo::Sizes::this().l2 as usize,
    };
    let cells = plan(opts.quick, inputs);
    let total = cells.len() + 1;
    p.cell(0, total, "calibration (Table 1)");
    let effort = if opts.quick {
        Effort::QUICK
    } else {
        Effort::FULL
    };
    let calibration = calibrate::run(effort, &mut |m| p.step(0.0, m))?;
    write(
        &opts.out.join("calibration.json"),
        &serde_json::to_string_pretty(&calibration).unwrap_or_default(),
    )?;
    let marks = calibration.buffer.marks();
    let mut done = Vec::new();
    for (i, cell) in cells.into_iter().enumerate() {
        p.cell(i + 1, total, &cell.name);
        let outcome =
            match residency::run(&cell.settings, marks, &opts.exe, &mut |f, m| p.step(f, m)) {
                Ok(r) => Outcome::Ran(Box::new(r)),
                Err(e) => Outcome::Failed {
                    error: e.to_string(),
                },
            };
        write(
            &runs_dir.join(format!("{}.json", cell.name)),
            &serde_json::to_string(&outcome).unwrap_or_default(),
        )?;
        done.push((cell, outcome));
    }
    let figures = draw_figures(&opts.out, &done);
    let report = opts.out.join("report.md");
    let seconds = t0.elapsed().as_secs_f64();
    write(
        &report,
        &report_md(
            &inputs,
            &calibration,
            &marks,
            &done,
            &figures,
            opts,
            seconds,
        ),
    )?;
    Ok(SuiteReport {
        calibration,
        inputs,
        cells: done,
        report,
        seconds,
    })
}

fn write(path: &Path, text: &str) -> Result<(), SuiteError> {
    std::fs::write(path, text).map_err(|e| SuiteError::Write(path.to_path_buf(), e))
}

/// A table's figure: its file name and lettered peaks, or why it was not drawn.
type Figure = Result<(String, Vec<residency::figure::LetteredPeak>), crate::plot::PlotError>;

/// One PNG per table; returns `(table, file name or error)`.
fn draw_figures(out: &Path, done: &[(Cell, Outcome)]) -> Vec<(&'static str, Figure)> {
    let mut figs = Vec::new();
    for (table, title, _, _) in TABLES {
        let runs: Vec<(String, &Residency)> = done
            .iter()
            .filter(|(c, _)| c.table == table)
            .filter_map(|(c, o)| match o {
                Outcome::Ran(r) => Some((c.name.clone(), r.as_ref())),
                Outcome::Failed { .. } => None,
            })
            .collect();
        if runs.is_empty() {
            continue;
        }
        let file = format!("{table}.png");
        // Each figure letters its peaks from A, panel by panel, as the seed's do.
        let res = residency::figure::histograms(&out.join(&file), title, &runs, 'A')
            .map(|peaks| (file, peaks));
        figs.push((table, res));
    }
    figs
}

/// Each table's figure title and report section: (table, figure title, heading, text).
const TABLES: [(&str, &str, &str, &str); 7] = [
    (
        "table2",
        "Figures 2-3, Table 2: structures × inter-message gap",
        "## Figures 2–3 and Table 2: structures × inter-message gap",
        "The seed compared BSD (monolithic), HP-UX (monolithic, its device writing into memory \
         around the cache) and Mach (a user-level server). Here: `inline` (softnic, stack and \
         application in one thread: BSD), `hpux` (the same with softnic's frames written by \
         non-temporal stores, around the cache, as HP-UX's DMA did), `server-same` (the \
         protocol server and the application as two processes on one CPU, taking turns: \
         Mach), `server-split` (one CPU each) and `server-regions` (the application isolated: \
         the server copies each message into its buffer, and that copy is timed). Large gap: \
         2 ms; small: back to back. The sender is independent of the receiver (message i is \
         due i gaps after the first), so a receiver that stalls for longer than a gap drops \
         what piles up, as the seed's did. With a small gap and a one-message queue the \
         share of messages received is set by construction (the driver takes up to 32 frames, \
         3.2 messages, per poll and the queue keeps one), not by the structure's speed: \
         compare the small-gap columns by where the received buffers were (the rows).",
    ),
    (
        "table3",
        "Figures 4-5, Table 3: server, TLB forced, checksum off and on",
        "## Figures 4–5 and Table 3: TLB forced, checksum off and on (server, one CPU)",
        "The seed's Mach with the TLB forced. The checksum makes the server read every byte \
         before the hand-off; forcing touches each buffer's page first so no TLB miss is \
         timed.",
    ),
    (
        "hpux",
        "Section 3.3, Figure 6: HP-UX's analog, TLB forced and with checksumming",
        "## Section 3.3 and Figure 6: HP-UX's analog",
        "The seed found HP-UX's excess beyond a dirty miss unchanged by forcing the TLB (so not \
         TLB misses: delayed line fills), and with checksumming nearly half of its buffers \
         totally within the cache at a small gap (the checksum loads the data that DMA wrote \
         around the cache, one scheduling point before the copy-out). Compare with `hpux-*` \
         in Table 2.",
    ),
    (
        "bsd",
        "Section 3.4: BSD's analog, TLB forced and with checksumming",
        "## Section 3.4: BSD's analog, TLB forced and with checksumming",
        "The seed's BSD went from 70 % (large gap) and 60 % (small) of buffers in cache to 80 % \
         at both gaps with the TLB forced, and lost a little with checksumming at a large \
         gap. Compare with `inline-*` in Table 2.",
    ),
    (
        "fig7",
        "Figure 7: BSD with large socket buffers",
        "## Figure 7: large socket buffers (inline)",
        "The seed raised BSD's socket buffer to 246,467 bytes (sixteen of its messages): \
         buffered instead of dropped, a message waits longer in the cache before its \
         copy-out. Here a queue of 16 messages, at a large gap and back to back.",
    ),
    (
        "table4",
        "Figure 8, Table 4: BSD under increasing load",
        "## Figure 8 and Table 4: increasing load (inline, large gap, queue of one)",
        "The seed's synthetic application: for each word of a message, read and increment a \
         random state block of N bytes in a range the size of the cache (here the last-level \
         cache). The seed stepped N finely (23, 24, 25 bytes per 4-byte word) across the load \
         at which its receiver began to drop, and found its cache utilisation fall ten-fold \
         within 10 %. Here N steps across this machine's knee — the block at which the load \
         alone takes the 2 ms gap per message, measured before the run — and the drop rate \
         stands beside the overhead. The application walks its load in pieces of 32 words \
         with the device polled between them, as BSD's interrupts preempted the seed's \
         application: frames that fall due meanwhile are received onto the queue (and \
         dropped if it is full), and the rest of the walk can evict them.",
    ),
    (
        "rules",
        "The rules: allocation, pages, one context",
        "## The seed's rules",
        "LIFO vs FIFO buffers and buffers laid out contiguously vs scattered one to a page over \
         the pool (inline, large gap, a 16-message queue, the load at Table 4's knee: many \
         buffers in flight; `layout-contiguous` repeats `alloc-lifo`'s settings, so the two \
         differ by this run's noise alone); 4 KiB vs 2 MiB pages (server, one CPU, large gap); and the data touched \
         late and in one context: the stack's checksum followed at once by the copy-out \
         (`inline-checksum-large-gap`, Section 3.4) or by a switch to another process on the \
         same CPU, which writes nothing (`idle`) or this machine's L2 of its own memory \
         (`busy`) before handing the CPU back.",
    ),
];

/// Reads one summary row.
type Row = fn(&residency::summary::Summary) -> f64;

/// The seed's rows: name, value, digits.
const ROWS: [(&str, Row, usize); 5] = [
    ("% buffers totally within cache", |s| s.fully_cached_pct, 1),
    (
        "% buffers less than 100 % clean miss",
        |s| s.lt_clean_pct,
        1,
    ),
    (
        "% buffers less than 100 % dirty miss",
        |s| s.lt_dirty_pct,
        1,
    ),
    (
        "% buffers greater than 100 % dirty miss",
        |s| s.gt_dirty_pct,
        1,
    ),
    (
        "average overhead ticks per word (8 B)",
        |s| s.avg_overhead_ticks_per_word,
        3,
    ),
];

/// A markdown table of the summary rows, one column per cell.
fn summary_table(cells: &[&(Cell, Outcome)]) -> String {
    let mut t = String::from("| observation |");
    for (c, _) in cells {
        let _ = write!(t, " {} |", c.name);
    }
    t.push_str("\n|---|");
    t.push_str(&"---:|".repeat(cells.len()));
    t.push('\n');
    for (name, get, digits) in ROWS {
        let _ = write!(t, "| {name} |");
        for (_, o) in cells {
            match o {
                Outcome::Ran(r) => {
                    let _ = write!(t, " {:.*} |", digits, get(&r.summary));
                }
                Outcome::Failed { .. } => t.push_str(" — |"),
            }
        }
        t.push('\n');
    }
    t.push_str("| messages sent / received / dropped at the queue |");
    for (_, o) in cells {
        match o {
            Outcome::Ran(r) => {
                let m = &r.messages;
                let _ = write!(t, " {} / {} / {} |", m.sent, m.received, m.queue_full);
            }
            Outcome::Failed { .. } => t.push_str(" — |"),
        }
    }
    t.push('\n');
    t.push_str("| % messages dropped at the queue |");
    for (_, o) in cells {
        match o {
            Outcome::Ran(r) => {
                let m = &r.messages;
                let _ = write!(
                    t,
                    " {:.1} |",
                    100.0 * m.queue_full as f64 / m.sent.max(1) as f64
                );
            }
            Outcome::Failed { .. } => t.push_str(" — |"),
        }
    }
    t.push('\n');
    for (c, o) in cells {
        if let Outcome::Failed { error } = o {
            let _ = writeln!(t, "\n`{}` did not run: {error}", c.name);
        }
    }
    t
}

fn find<'a>(done: &'a [(Cell, Outcome)], name: &str) -> Option<&'a Residency> {
    done.iter()
        .find(|(c, _)| c.name == name)
        .and_then(|(_, o)| match o {
            Outcome::Ran(r) => Some(r.as_ref()),
            Outcome::Failed { .. } => None,
        })
}

/// What a comparison of two runs found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    /// The advised run's overhead is below three quarters of the other's.
    Holds,
    /// It is above five quarters of the other's.
    Contradicted,
    /// Within 25 % either way: about what one run differs from the next on a shared VM.
    NoClearDifference,
    /// A run failed.
    NotMeasured,
}

/// One of the seed's rules put to the test: the run its advice prefers against the other.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    /// The rule, in words.
    pub rule: &'static str,
    /// The run the rule prefers.
    pub better: &'static str,
    /// The run it advises against.
    pub worse: &'static str,
    /// What this machine says.
    pub finding: Finding,
    /// Average overhead ticks per word of each (`better`, `worse`).
    pub ticks_per_word: Option<(f64, f64)>,
    /// % of buffers totally within cache of each.
    pub cached_pct: Option<(f64, f64)>,
}

/// Compares `better` (the rule's advice) with `worse` by average overhead per word, with a
/// 25 % margin (about the run-to-run spread on a shared 2-CPU VM) below which it is called
/// no clear difference.
fn verdict(
    done: &[(Cell, Outcome)],
    better: &'static str,
    worse: &'static str,
    rule: &'static str,
) -> Verdict {
    let (Some(b), Some(w)) = (find(done, better), find(done, worse)) else {
        return Verdict {
            rule,
            better,
            worse,
            finding: Finding::NotMeasured,
            ticks_per_word: None,
            cached_pct: None,
        };
    };
    let (bo, wo) = (
        b.summary.avg_overhead_ticks_per_word,
        w.summary.avg_overhead_ticks_per_word,
    );
    let finding = if bo < wo * 0.75 {
        Finding::Holds
    } else if bo > wo * 1.25 {
        Finding::Contradicted
    } else {
        Finding::NoClearDifference
    };
    Verdict {
        rule,
        better,
        worse,
        finding,
        ticks_per_word: Some((bo, wo)),
        cached_pct: Some((b.summary.fully_cached_pct, w.summary.fully_cached_pct)),
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.finding {
            Finding::Holds => "holds here",
            Finding::Contradicted => "is contradicted here",
            Finding::NoClearDifference => {
                "makes no clear difference here (within 25 %, about what one run differs from the next)"
            }
            Finding::NotMeasured => {
                return write!(f, "{}: not measured (a run failed; see above).", self.rule);
            }
        };
        let ((bo, wo), (bc, wc)) = (
            self.ticks_per_word.unwrap_or_default(),
            self.cached_pct.unwrap_or_default(),
        );
        write!(
            f,
            "{} {how}: `{}` {bo:.3} ticks/word and {bc:.1} % of buffers in cache, `{}` {wo:.3} and {wc:.1} %.",
            self.rule, self.better, self.worse
        )
    }
}

/// The seed's rules as this run tested them.
pub fn verdicts(done: &[(Cell, Outcome)]) -> Vec<Verdict> {
    vec![
        verdict(
            done,
            "alloc-lifo",
            "alloc-fifo",
            "Rule 3 (allocate buffers LIFO)",
        ),
        verdict(
            done,
            "layout-contiguous",
            "layout-scattered",
            "Rule 3 (lay buffers out contiguously)",
        ),
        verdict(
            done,
            "pages-2m",
            "pages-4k",
            "Rule 1 (use group TLB entries: 2 MiB pages)",
        ),
        verdict(
            done,
            "inline-checksum-large-gap",
            "inline-checksum-switch-busy-large-gap",
            "Rule 2, touch late and in one context (the copy-out at once after the checksum, against after a switch to a busy process)",
        ),
        verdict(
            done,
            "inline-small-gap",
            "server-same-small-gap",
            "Rule 2, all in the application's context (inline against a separate server)",
        ),
        verdict(
            done,
            "inline-large-gap",
            "hpux-large-gap",
            "Bringing data into the cache on arrival (cached against non-temporal DMA)",
        ),
    ]
}

/// A pair of runs the seed compared, with what it found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Comparison {
    /// The table (report section) it belongs to.
    pub table: &'static str,
    /// What is compared, in words.
    pub what: &'static str,
    /// The run with the change.
    pub run: &'static str,
    /// The run without it.
    pub against: &'static str,
    /// What the seed measured or said.
    pub seed: &'static str,
    /// % of buffers totally within cache (`run`, `against`); `None` when either failed.
    pub cached_pct: Option<(f64, f64)>,
    /// Average overhead ticks per word (`run`, `against`).
    pub ticks_per_word: Option<(f64, f64)>,
}

/// The seed's comparisons, section by section: (table, what, run, against, the seed).
const COMPARISONS: [(&str, &str, &str, &str, &str); 14] = [
    (
        "table2",
        "a user-level server against the monolithic path, large gap",
        "server-same-large-gap",
        "inline-large-gap",
        "Mach 5 % in cache and 0.96 cycles/word against BSD's 70 % and 0.13",
    ),
    (
        "table2",
        "a user-level server against the monolithic path, small gap",
        "server-same-small-gap",
        "inline-small-gap",
        "Mach 0.2 % and 1.7 against BSD's 60 % and 0.45",
    ),
    (
        "table2",
        "DMA around the cache (HP-UX) against into it (BSD), small gap",
        "hpux-small-gap",
        "inline-small-gap",
        "HP-UX 0 % and 3.0 against BSD's 60 % and 0.45 (2.4 at a large gap)",
    ),
    (
        "table3",
        "the TLB forced, server, small gap",
        "server-same-tlb-forced-small-gap",
        "server-same-small-gap",
        "Mach 0.2 % → 1 % in cache, 1.7 → 1.3 cycles/word",
    ),
    (
        "table3",
        "checksumming with the TLB forced, server, large gap",
        "server-same-tlb-forced-checksum-large-gap",
        "server-same-tlb-forced-large-gap",
        "Mach 11 % → 30 %, 0.6 → 0.3",
    ),
    (
        "hpux",
        "the TLB forced, HP-UX, small gap",
        "hpux-tlb-forced-small-gap",
        "hpux-small-gap",
        "no significant change (the excess is delayed line fills, not TLB misses)",
    ),
    (
        "hpux",
        "checksumming, HP-UX, small gap",
        "hpux-checksum-small-gap",
        "hpux-small-gap",
        "0 % → nearly 50 % in cache (Mach, likewise: 6 %)",
    ),
    (
        "bsd",
        "the TLB forced, BSD, large gap",
        "inline-tlb-forced-large-gap",
        "inline-large-gap",
        "70 % → 80 %",
    ),
    (
        "bsd",
        "the TLB forced, BSD, small gap",
        "inline-tlb-forced-small-gap",
        "inline-small-gap",
        "60 % → 80 %",
    ),
    (
        "bsd",
        "checksumming, BSD, large gap",
        "inline-checksum-large-gap",
        "inline-large-gap",
        "70 % → 60 %: a slight decrease",
    ),
    (
        "fig7",
        "sixteen messages of socket buffer, BSD, small gap",
        "inline-queue-16-small-gap",
        "inline-small-gap",
        "60 % → 52 %: a small change, BSD's buffers interfering little",
    ),
    (
        "fig7",
        "sixteen messages of socket buffer, BSD, large gap",
        "inline-queue-16-large-gap",
        "inline-large-gap",
        "not reported apart (the seed's figure shows both gaps)",
    ),
    (
        "table4",
        "the load a tenth either side of the knee (not in --quick)",
        "inline-load-1.10x-knee-large-gap",
        "inline-load-0.90x-knee-large-gap",
        "23 → 25 bytes per word: 5 % → 0.3 % in cache, 0.6 → 1.3 cycles/word, and drops beginning",
    ),
    (
        "table4",
        "twice the knee against none",
        "inline-load-2.00x-knee-large-gap",
        "inline-load-0-large-gap",
        "loads of 23-25 bytes per word: overheads 4.6-10 times the unloaded BSD's, like unloaded Mach's",
    ),
];

/// The seed's comparisons as this run measured them.
pub fn comparisons(done: &[(Cell, Outcome)]) -> Vec<Comparison> {
    COMPARISONS
        .iter()
        .map(|&(table, what, run, against, seed)| {
            let both = find(done, run).zip(find(done, against));
            Comparison {
                table,
                what,
                run,
                against,
                seed,
                cached_pct: both
                    .map(|(a, b)| (a.summary.fully_cached_pct, b.summary.fully_cached_pct)),
                ticks_per_word: both.map(|(a, b)| {
                    (
                        a.summary.avg_overhead_ticks_per_word,
                        b.summary.avg_overhead_ticks_per_word,
                    )
                }),
            }
        })
        .collect()
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.cached_pct, self.ticks_per_word) {
            (Some((ca, cb)), Some((ta, tb))) => write!(
                f,
                "{}: `{}` against `{}`: {cb:.1} % → {ca:.1} % of buffers in cache, {tb:.3} → {ta:.3} ticks/word. The seed: {}.",
                self.what, self.run, self.against, self.seed
            ),
            _ => write!(
                f,
                "{}: not measured in this run. The seed: {}.",
                self.what, self.seed
            ),
        }
    }
}

/// What a switch between the data's last touch and its use cost in residency, against what
/// the switch itself costs (both calibrated in this run).
#[derive(Clone, Debug, serde::Serialize)]
pub struct SwitchFinding {
    /// The run with the switch.
    pub run: &'static str,
    /// Bytes the partner wrote each time it ran.
    pub partner_touch_bytes: usize,
    /// One switch, calibrated before the run (ticks).
    pub switch_ticks: f64,
    /// Overhead ticks per message added by the switch: the two runs' mean overhead per word
    /// apart, times the words of a message.
    pub residency_ticks_per_message: f64,
    /// That, as a share of the two switches a message costs.
    pub share_of_switches_pct: f64,
}

/// The residency the switches cost beside what they cost themselves.
pub fn switch_findings(done: &[(Cell, Outcome)]) -> Vec<SwitchFinding> {
    let Some(base) = find(done, "inline-checksum-large-gap") else {
        return vec![];
    };
    [
        "inline-checksum-switch-idle-large-gap",
        "inline-checksum-switch-busy-large-gap",
    ]
    .into_iter()
    .filter_map(|run| {
        let r = find(done, run)?;
        let cost = r.switch?;
        let words = r.settings.size.div_ceil(r.word_bytes) as f64;
        let per_message = (r.summary.avg_overhead_ticks_per_word
            - base.summary.avg_overhead_ticks_per_word)
            * words;
        Some(SwitchFinding {
            run,
            partner_touch_bytes: cost.touch_bytes,
            switch_ticks: cost.switch_ticks,
            residency_ticks_per_message: per_message,
            share_of_switches_pct: 100.0 * per_message / (2.0 * cost.switch_ticks).max(1.0),
        })
    })
    .collect()
}

fn report_md(
    inputs: &PlanInputs,
    cal: &Table1,
    marks: &Marks,
    done: &[(Cell, Outcome)],
    figures: &[(&'static str, Figure)],
    opts: &SuiteOptions,
    seconds: f64,
) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "# The residency lab (seed 000) on this machine\n");
    let _ = writeln!(
        r,
        "Machine: {}. Command: `shmnet lab{} --out {}`; {:.0} s. Every run's JSON is in `runs/`, \
         the calibration in `calibration.json`. Times are TSC ticks ({:.3} per ns); on a virtual \
         machine they are not core cycles.\n",
        cal.machine,
        if opts.quick { " --quick" } else { "" },
        opts.out.display(),
        seconds,
        cal.timer.ticks_per_ns
    );
    let _ = writeln!(r, "## Table 1: costs\n");
    let _ = writeln!(r, "```\n{cal}```\n");
    if let Some(d) = marks.degeneracy() {
        let _ = writeln!(
            r,
            "> **The marks are degenerate: {d}.** Every percentage below is printed as measured, \
             but none of them says where the data was. `shmnet lab` exits with status 3.\n"
        );
    }
    let _ = writeln!(
        r,
        "Marks for a 1,480-byte buffer (overhead beyond the same load from L1): totally within \
         cache ≤ {:.0} ticks; 100 % clean miss {:.0}; 100 % dirty miss {:.0}. They are read off \
         the calibration's distributions ({}). The seed's were 0, 828–846 and 1,058–1,081 \
         cycles for 1,460 bytes on a 1993 machine without prefetchers: there a miss cost 18–23 \
         cycles per 32-byte line, one after the other; here the prefetchers stream a buffer in, \
         so a 100 % miss costs far less than lines × latency.\n",
        marks.cached_max,
        marks.clean,
        marks.dirty,
        calibrate::MARK_RULE
    );
    for (table, title, head, text) in TABLES {
        let cells: Vec<&(Cell, Outcome)> = done.iter().filter(|(c, _)| c.table == table).collect();
        let _ = writeln!(r, "{head}\n\n{text}\n");
        if table == "table4" {
            let loads: Vec<String> = cells
                .iter()
                .map(|(c, _)| format!("`{}` {} B", c.name, c.settings.load_bytes))
                .collect();
            let _ = writeln!(
                r,
                "The knee measured before the run: {} bytes per word (the load alone takes the \
                 2 ms gap per message at that block). The loads, bytes per word: {}.\n",
                inputs.knee_load_bytes,
                loads.join(", ")
            );
        }
        let _ = writeln!(r, "{}", summary_table(&cells));
        for c in comparisons(done).iter().filter(|c| c.table == table) {
            let _ = writeln!(r, "- {c}");
        }
        let _ = writeln!(r);
        match figures.iter().find(|(t, _)| *t == table) {
            Some((_, Ok((file, peaks)))) => {
                let _ = writeln!(r, "![{title}]({file})\n");
                if !peaks.is_empty() {
                    let _ = writeln!(
                        r,
                        "The figure's peaks, lettered as the seed's are, read against the marks:\n\n{}",
                        residency::figure::peaks_table(peaks)
                    );
                }
            }
            Some((_, Err(e))) => {
                let _ = writeln!(r, "(figure not drawn: {e})\n");
            }
            None => {}
        }
    }
    let _ = writeln!(r, "## What this machine says about the rules\n");
    for v in verdicts(done) {
        let _ = writeln!(r, "- {v}");
    }
    let switches = switch_findings(done);
    if !switches.is_empty() {
        let _ = writeln!(
            r,
            "\nA switch between the data's last touch and its use, against the switch's own cost \
             (calibrated with the same partner before each run: the median round trip, halved; \
             the residency cost is the mean overhead per word above `inline-checksum-large-gap`'s, \
             times the words of a message):\n"
        );
        let _ = writeln!(
            r,
            "| run | partner writes | one switch, ticks | residency cost per message, ticks | as % of the message's two switches |"
        );
        let _ = writeln!(r, "|---|---:|---:|---:|---:|");
        for f in &switches {
            let _ = writeln!(
                r,
                "| {} | {} KiB | {:.0} | {:.0} | {:.1} % |",
                f.run,
                f.partner_touch_bytes >> 10,
                f.switch_ticks,
                f.residency_ticks_per_message,
                f.share_of_switches_pct
            );
        }
    }
    let _ = writeln!(r, "\n## Position in the message\n");
    let _ = writeln!(
        r,
        "The seed found earlier fragments less resident (KS p < 0.05 between fragments at least \
         four apart, none between neighbours). Here, per cell: adjacent pairs and pairs at least \
         four apart whose distributions differ at p < 0.05.\n"
    );
    let _ = writeln!(
        r,
        "| cell | adjacent pairs differing | ≥ 4 apart differing | first vs last buffer, % in cache |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|");
    for (c, o) in done {
        if let Outcome::Ran(res) = o {
            let near: Vec<_> = res.ks.iter().filter(|k| k.b - k.a == 1).collect();
            let far: Vec<_> = res.ks.iter().filter(|k| k.b - k.a >= 4).collect();
            let sig = |v: &[&residency::summary::KsPair]| v.iter().filter(|k| k.p < 0.05).count();
            let first = res
                .positions
                .first()
                .map_or(0.0, |p| p.summary.fully_cached_pct);
            let last = res
                .positions
                .last()
                .map_or(0.0, |p| p.summary.fully_cached_pct);
            let _ = writeln!(
                r,
                "| {} | {} of {} | {} of {} | {:.0} % vs {:.0} % |",
                c.name,
                sig(&near),
                near.len(),
                sig(&far),
                far.len(),
                first,
                last
            );
        }
    }
    r
}
