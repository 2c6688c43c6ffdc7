//! `shmnet bench capture`: what `shmnet capture` costs the traffic it watches (issue 22).
//!
//! UDP ttcp cells of the `server` structure (softnic as the wire, one application, each
//! party a process; [`shmnet_lab::netbench::ttcp`]) at 10 B and 14,792 B, receive and
//! transmit, in three variants per round:
//!
//! | variant | the cell's server |
//! |---|---|
//! | `off` | no capture |
//! | `miss` | a capture of rx and tx whose filter (`tcp port 22`) matches nothing of the UDP traffic: the cost of looking |
//! | `all` | a capture of rx and tx keeping every whole frame, read by a reader process that discards it (a third process beside the server and the application): the cost of copying, and of the reader's CPU on this machine |
//!
//! The variants run in a different order each round (the VM drifts), and each is compared
//! with `off` of the same round: a ratio holds, an absolute rate does not.

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use shmnet_io::capture::{CaptureSpec, Filter};
use shmnet_lab::netbench::ttcp::{self, Dir, TtcpOptions};
use shmnet_lab::netbench::{Proto, Structure};

/// `shmnet bench capture`'s arguments.
#[derive(Args)]
pub struct CaptureBenchArgs {
    /// Rounds (each runs every variant once).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds per cell (default 1; 0.25 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// One round of quarter-second cells: a smoke run.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The three variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Variant {
    Off,
    Miss,
    All,
}

impl Variant {
    fn capture(self) -> Option<CaptureSpec> {
        let spec = |filter| CaptureSpec {
            rx: true,
            tx: true,
            drops: false,
            snaplen: 0,
            filter,
            ring_bytes: 64 << 20,
        };
        match self {
            Variant::Off => None,
            Variant::Miss => Some(spec(Some(
                Filter::parse(&["tcp".into(), "port".into(), "22".into()]).expect("a valid filter"),
            ))),
            Variant::All => Some(spec(None)),
        }
    }
}

/// One cell's rate in one round.
#[derive(Clone, Debug, Serialize)]
struct Cell {
    round: usize,
    variant: Variant,
    size: usize,
    dir: Dir,
    msgs_per_s: f64,
    cpu_us_per_msg: f64,
}

/// A row of the summary: one size and direction, medians over the rounds.
#[derive(Clone, Debug, Serialize)]
struct Row {
    size: usize,
    dir: Dir,
    off_msgs_per_s: f64,
    miss_msgs_per_s: f64,
    all_msgs_per_s: f64,
    /// `miss ÷ off`, each round against its own `off`: median, min, max.
    miss_over_off: [f64; 3],
    all_over_off: [f64; 3],
}

/// A target of the issue, judged on this run.
#[derive(Serialize)]
struct Target {
    what: String,
    met: bool,
}

#[derive(Serialize)]
struct Report {
    rounds: usize,
    seconds_per_cell: f64,
    cells: Vec<Cell>,
    rows: Vec<Row>,
    targets: Vec<Target>,
    failed: Vec<String>,
}

const SIZES: [usize; 2] = [10, 14_792];
const DIRS: [Dir; 2] = [Dir::Rx, Dir::Tx];

/// Runs the benchmark.
pub fn bench(a: CaptureBenchArgs) -> Result<()> {
    let rounds = if a.quick { 1 } else { a.rounds.max(1) };
    let seconds = a.seconds.unwrap_or(if a.quick { 0.25 } else { 1.0 });
    shmnet_lab::netbench::short_timer_slack();
    let exe = std::env::current_exe().context("finding this program to start the parties")?;
    let mut cells = Vec::new();
    let mut failed = Vec::new();
    let orders = [
        [Variant::Off, Variant::Miss, Variant::All],
        [Variant::All, Variant::Off, Variant::Miss],
        [Variant::Miss, Variant::All, Variant::Off],
    ];
    for round in 0..rounds {
        for variant in orders[round % orders.len()] {
            if !a.json {
                eprintln!("round {}/{rounds}: capture {variant:?}", round + 1);
            }
            let o = TtcpOptions {
                launch: shmnet_lab::netbench::Launch {
                    exe: exe.clone(),
                    checksum: false,
                    proto: Proto::Udp,
                    mtu: 1500,
                    buffers: Default::default(),
                    capture: variant.capture(),
                },
                structures: vec![Structure::Server],
                sizes: SIZES.to_vec(),
                dirs: DIRS.to_vec(),
                count: None,
                seconds,
                window: None,
                quick: true,
            };
            let report = ttcp::run(&o, &mut |_| {});
            failed.extend(report.failed.iter().map(|f| format!("{variant:?}: {f}")));
            for r in report.rows {
                cells.push(Cell {
                    round,
                    variant,
                    size: r.size,
                    dir: r.dir,
                    msgs_per_s: r.msgs_per_s,
                    cpu_us_per_msg: r.cpu_s_per_msg * 1e6,
                });
            }
        }
    }
    let rows = summarise(&cells, rounds);
    // Issue 22: a capture whose filter matches nothing costs at most 5 %, at every size
    // and direction (the median of the rounds' ratios).
    let targets = vec![Target {
        what: "a capture whose filter matches nothing costs ≤ 5 % of msgs/s (miss ÷ off ≥ 0.95 at every size and direction)".into(),
        met: !rows.is_empty() && rows.iter().all(|r| r.miss_over_off[0] >= 0.95),
    }];
    let report = Report {
        rounds,
        seconds_per_cell: seconds,
        cells,
        rows,
        targets,
        failed,
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    println!(
        "capture's cost: UDP ttcp, server structure, {rounds} round(s) of {seconds} s cells; msgs/s medians, ratios each round against its own `off`"
    );
    println!("| size | dir | off | miss | miss ÷ off | all | all ÷ off |");
    println!("|---|---|---|---|---|---|---|");
    let range = |r: [f64; 3]| format!("{:.2} [{:.2}–{:.2}]", r[0], r[1], r[2]);
    for r in &report.rows {
        println!(
            "| {} | {:?} | {:.0} | {:.0} | {} | {:.0} | {} |",
            r.size,
            r.dir,
            r.off_msgs_per_s,
            r.miss_msgs_per_s,
            range(r.miss_over_off),
            r.all_msgs_per_s,
            range(r.all_over_off)
        );
    }
    for t in &report.targets {
        println!(
            "Target (issue 22): {}: {}",
            t.what,
            if t.met { "met" } else { "not met" }
        );
    }
    for f in &report.failed {
        println!("failed: {f}");
    }
    Ok(())
}

fn summarise(cells: &[Cell], rounds: usize) -> Vec<Row> {
    let rate = |round: usize, v: Variant, size: usize, dir: Dir| {
        cells
            .iter()
            .find(|c| c.round == round && c.variant == v && c.size == size && c.dir == dir)
            .map(|c| c.msgs_per_s)
    };
    let mut rows = Vec::new();
    for size in SIZES {
        for dir in DIRS {
            let per = |v: Variant| -> Vec<f64> {
                (0..rounds).filter_map(|r| rate(r, v, size, dir)).collect()
            };
            let ratio = |v: Variant| -> [f64; 3] {
                let rs: Vec<f64> = (0..rounds)
                    .filter_map(|r| {
                        Some(rate(r, v, size, dir)? / rate(r, Variant::Off, size, dir)?)
                    })
                    .collect();
                spread(rs)
            };
            rows.push(Row {
                size,
                dir,
                off_msgs_per_s: spread(per(Variant::Off))[0],
                miss_msgs_per_s: spread(per(Variant::Miss))[0],
                all_msgs_per_s: spread(per(Variant::All))[0],
                miss_over_off: ratio(Variant::Miss),
                all_over_off: ratio(Variant::All),
            });
        }
    }
    rows
}

/// Median, min, max (NaN when empty).
fn spread(mut v: Vec<f64>) -> [f64; 3] {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return [f64::NAN; 3];
    }
    // Sorts `v` too.
    let median = shmnet_lab::tsc::median(&mut v);
    [median, v[0], v[v.len() - 1]]
}
