//! `shmnet bench capture`: what `shmnet capture` costs the traffic it watches (issue 22).
//!
//! UDP ttcp cells of the `server` structure (softnic as the wire, one application, each
//! party a process; [`shmnet_lab::netbench::ttcp`]) at 10 B and 14,792 B, receive and
//! transmit, in three variants per round:
//!
//! | variant | the cell's server |
//! |---|---|
//! | `off`, `off_again` | no capture (twice: `off_again ÷ off` is the floor under the other ratios) |
//! | `miss` | a capture of rx and tx whose filter (`tcp port 22`) matches nothing of the UDP traffic: the cost of looking |
//! | `all` | a capture of rx and tx keeping every whole frame, read by a reader process that discards it (a third process beside the server and the application): the cost of copying, and of the reader's CPU on this machine |
//!
//! Each cell (size and direction) runs its three variants back to back, in a different
//! order each round (the VM drifts), and each is compared with `off` of the same cell and
//! round: a ratio holds, an absolute rate does not.
//!
//! On a shared 2-vCPU machine those ratios move by more than the 5 % the issue allows, so
//! the run first times the taps where nothing else moves: the data plane's own receive and
//! transmit taps around the stack's UDP paths, in one thread, beside the stack alone timed
//! twice (the noise floor) — [`shmnet_io::server::tap_cost`]. Both are reported and both
//! are judged.

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use shmnet_io::capture::{CaptureSpec, Filter};
use shmnet_io::server::tap_cost;
use shmnet_lab::netbench::ttcp::{self, Dir, TtcpOptions};
use shmnet_lab::netbench::{Proto, Structure};

/// `shmnet bench capture`'s arguments.
#[derive(Args)]
pub struct CaptureBenchArgs {
    /// Rounds (each runs every cell's variants once).
    #[arg(long, default_value_t = 5)]
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
    /// No capture again, in the same round: the noise floor (`off_again ÷ off`).
    OffAgain,
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
            Variant::Off | Variant::OffAgain => None,
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
    /// The server party's CPU per message (0 if the cell did not report it).
    server_cpu_us_per_msg: f64,
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
    /// `off_again ÷ off`: what two runs of the same cell with no capture differ by, the
    /// floor under the other ratios.
    off_again_over_off: [f64; 3],
    /// The server party's CPU µs per message with no capture (median of the rounds).
    off_server_cpu_us_per_msg: f64,
    /// What the data plane's taps add per message with a filter that matches nothing
    /// (`miss − off` of the one-thread measure, per message) ÷ the server's CPU per message
    /// with no capture: the taps' share of the server's work. The server polls when it has
    /// nothing to do, so its CPU per message is its work only while it is the busy party;
    /// where it waits on another, this share understates the taps' cost (the one-thread
    /// `miss ÷ none` is the bound the other way).
    miss_share_of_server: f64,
}

/// A target of the issue, judged on this run.
#[derive(Serialize)]
struct Target {
    what: String,
    met: bool,
}

#[derive(Serialize)]
struct Report {
    /// The taps timed in one thread ([`tap_cost`]), rx and tx at each size.
    data_plane: Vec<tap_cost::TapCost>,
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
    let batches = if a.quick { 201 } else { 2001 };
    if !a.json {
        eprintln!("the data plane's taps, one thread, {batches} batches per variant");
    }
    let data_plane: Vec<tap_cost::TapCost> = SIZES
        .iter()
        .flat_map(|&size| [tap_cost::rx(size, batches), tap_cost::tx(size, batches)])
        .flatten()
        .collect();
    let orders = [
        [Variant::Off, Variant::Miss, Variant::OffAgain, Variant::All],
        [Variant::All, Variant::Off, Variant::Miss, Variant::OffAgain],
        [Variant::OffAgain, Variant::All, Variant::Off, Variant::Miss],
        [Variant::Miss, Variant::OffAgain, Variant::All, Variant::Off],
    ];
    for round in 0..rounds {
        for (i, (size, dir)) in SIZES
            .iter()
            .flat_map(|&size| DIRS.iter().map(move |&dir| (size, dir)))
            .enumerate()
        {
            for variant in orders[(round + i) % orders.len()] {
                if !a.json {
                    eprintln!(
                        "round {}/{rounds}: {size} B {dir:?}, capture {variant:?}",
                        round + 1
                    );
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
                    sizes: vec![size],
                    dirs: vec![dir],
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
                        server_cpu_us_per_msg: r
                            .cpu_us_per_msg_by_party
                            .get("server")
                            .copied()
                            .unwrap_or(0.0),
                    });
                }
            }
        }
    }
    let mut rows = summarise(&cells, rounds);
    for r in &mut rows {
        let dir = match r.dir {
            Dir::Rx => "rx",
            _ => "tx",
        };
        if let Some(t) = data_plane.iter().find(|t| t.size == r.size && t.dir == dir) {
            r.miss_share_of_server = (t.miss_ns - t.off_ns) / (r.off_server_cpu_us_per_msg * 1e3);
        }
    }
    // Issue 22: a capture whose filter matches nothing costs at most 5 %, at every size
    // and direction (the median of the rounds' ratios).
    // "Nothing measurable": off's difference from the stack alone is no larger than the
    // stack's from itself timed again (or 1 %, the least this measure resolves).
    let within_noise = |t: &tap_cost::TapCost| {
        (t.off_over_none - 1.0).abs() <= (t.none_again_over_none - 1.0).abs().max(0.01)
    };
    let targets = vec![
        Target {
            what: "with no capture the data plane's taps cost nothing measurable (off ÷ none within the noise floor none_again ÷ none, or 1 %, at every size and direction)".into(),
            met: !data_plane.is_empty() && data_plane.iter().all(within_noise),
        },
        Target {
            what: "in the data plane a capture whose filter matches nothing costs ≤ 5 % of the server's work (miss_share_of_server ≤ 0.05 at every size and direction)".into(),
            met: !rows.is_empty() && rows.iter().all(|r| r.miss_share_of_server <= 0.05),
        },
        Target {
            what: "in ttcp a capture whose filter matches nothing costs ≤ 5 % of msgs/s (miss ÷ off ≥ 0.95 at every size and direction)".into(),
            met: !rows.is_empty() && rows.iter().all(|r| r.miss_over_off[0] >= 0.95),
        },
    ];
    let report = Report {
        data_plane,
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
        "the data plane's taps, one thread: median ns per message ({batches} batches per variant)"
    );
    println!("| size | dir | none | none again ÷ none | off ÷ none | miss ÷ none |");
    println!("|---|---|---|---|---|---|");
    for t in &report.data_plane {
        println!(
            "| {} | {} | {:.1} | {:.3} | {:.3} | {:.3} |",
            t.size, t.dir, t.none_ns, t.none_again_over_none, t.off_over_none, t.miss_over_none
        );
    }
    println!();
    println!(
        "capture's cost: UDP ttcp, server structure, {rounds} round(s) of {seconds} s cells; msgs/s medians, ratios each round against its own `off`"
    );
    println!(
        "| size | dir | off | off again ÷ off | miss | miss ÷ off | all | all ÷ off | server µs/msg (off) | taps' share (miss) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let range = |r: [f64; 3]| format!("{:.2} [{:.2}–{:.2}]", r[0], r[1], r[2]);
    for r in &report.rows {
        println!(
            "| {} | {:?} | {:.0} | {} | {:.0} | {} | {:.0} | {} | {:.3} | {:.1} % |",
            r.size,
            r.dir,
            r.off_msgs_per_s,
            range(r.off_again_over_off),
            r.miss_msgs_per_s,
            range(r.miss_over_off),
            r.all_msgs_per_s,
            range(r.all_over_off),
            r.off_server_cpu_us_per_msg,
            r.miss_share_of_server * 100.0
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
    let server_cpu = |round: usize, v: Variant, size: usize, dir: Dir| {
        cells
            .iter()
            .find(|c| c.round == round && c.variant == v && c.size == size && c.dir == dir)
            .map(|c| c.server_cpu_us_per_msg)
            .filter(|&x| x > 0.0)
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
                off_again_over_off: ratio(Variant::OffAgain),
                all_over_off: ratio(Variant::All),
                off_server_cpu_us_per_msg: spread(
                    (0..rounds)
                        .filter_map(|r| server_cpu(r, Variant::Off, size, dir))
                        .collect(),
                )[0],
                miss_share_of_server: f64::NAN,
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
