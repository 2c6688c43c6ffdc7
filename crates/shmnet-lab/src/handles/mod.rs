//! `shmnet lab handles`: seed 004's experiments on this machine — what the figures of
//! *Dynamic Handle Lookup in Modern Network Interfaces* become when the NIC is shmnet's
//! protocol server and the lookup cache sits on its data plane (docs/isolation.md).
//!
//! - **Table III / Fig. 5**: the 36 configurations C ∈ {8K, 16K, 32K} × L ∈ {8, 16, 64,
//!   128} × A ∈ {2, 4, 8} over communication patterns shaped like the seed's SPLASH-2
//!   programs ([`workloads`]), many applications sharing one cache; misses split send /
//!   receive and cold / non-cold. Every configuration runs with the seed's set index and with
//!   shmnet's skewed one ([`SetIndex`]), through the live cache and through shmnet-sim's
//!   cache model, and the report says whether they agreed ([`sweep`]).
//! - **Miss penalty**: miss delay and miss processing, live, with percentiles and a figure
//!   ([`penalty`]).
//! - **Fig. 3 analog**: memory a data path holds for translation — a full table (a
//!   translation per registered page) against the lookup cache — for 1, 16 and 256
//!   applications with 64 MiB to 64 GiB registered each (computed from the geometry: the
//!   cache's size does not grow with what is registered, which is the seed's point).
//! - **Lookup cost per descriptor** for each associativity, beside a plain bounds check
//!   ([`crate::bench::handles`], run here again).
//!
//! - **Fig. 4**: ping-pong latency and bandwidth through a live server against the share of
//!   pings sent from cold buffers, drop-on-miss beside buffer-on-miss ([`pingpong`]).
//! - **Fig. 6 analog**: the data plane's translation throughput per configuration and
//!   workload, from this run's parts — each configuration's misses (the sweep), a hit's cost
//!   at its associativity and a miss's measured penalty at its line size.
//!
//! - **Table III on shmnet's own traces**: a live server records every handle page it
//!   translates while applications stream, ping-pong and send a file ([`traces`]); each
//!   trace goes through the 36 configurations like the patterns.

pub mod live;
pub mod penalty;
pub mod pingpong;
pub mod sweep;
pub mod traces;
pub mod workloads;

use crate::plot::{Bar, Group, Panel, Scale};
use shmnet_chan::handles::{CacheGeometry, SetIndex};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;
use workloads::{Shape, WORKLOADS};

/// What to run.
#[derive(Clone, Debug)]
pub struct HandlesLabOptions {
    /// Smaller traces, fewer misses timed (seconds instead of a minute).
    pub quick: bool,
    /// Where report.md, the PNGs and report.json go.
    pub out: PathBuf,
}

/// Fig. 3's analog: one row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MemoryRow {
    /// Applications.
    pub apps: u32,
    /// Bytes each registered.
    pub registered_per_app: u64,
    /// A full table on the data path: 8 bytes per registered page.
    pub full_table_bytes: u64,
    /// The lookup cache at the seed's best configuration (C16K, L64, A4): the same
    /// whatever is registered.
    pub cache_bytes: u64,
}

/// Fig. 6's analog: one workload through one configuration (shmnet's skewed index).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThroughputRow {
    /// The workload.
    pub workload: String,
    /// C.
    pub entries: u32,
    /// L.
    pub line: u32,
    /// A.
    pub ways: u32,
    /// Millions of descriptors per second the data plane would translate if every miss
    /// cost it the measured penalty: references ÷ (references × a hit's ns at A + misses ×
    /// (delay + processing) p50 at L).
    pub mdesc_per_s: f64,
}

/// Everything the lab measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HandlesLabReport {
    /// The workloads' size.
    pub shape: Shape,
    /// Table III: every workload through every configuration.
    pub sweep: Vec<sweep::SweepRow>,
    /// Configurations where the live cache and the simulator agreed, of all run.
    pub sim_agreed: usize,
    /// Configurations run (workloads × 36 × 2 set indexes).
    pub sim_checked: usize,
    /// The miss penalty by line size.
    pub penalty: Vec<penalty::PenaltyRow>,
    /// Fig. 3's analog.
    pub memory: Vec<MemoryRow>,
    /// The lookup cost per descriptor.
    pub lookup: crate::bench::handles::HandlesReport,
    /// Fig. 4: ping-pong through a live server.
    pub pingpong: Vec<pingpong::PingPongRow>,
    /// Fig. 6's analog: translation throughput per configuration.
    pub throughput: Vec<ThroughputRow>,
    /// Table III on traces recorded from shmnet's own runs.
    pub own_traces: Vec<sweep::SweepRow>,
    /// Those traces' sizes.
    pub own_trace_info: Vec<traces::TraceInfo>,
    /// Figures of the seed not produced yet, and why.
    pub missing: Vec<String>,
    /// Seconds the lab took.
    pub seconds: f64,
    /// Where the report went.
    pub report: PathBuf,
}

/// Why the lab could not finish.
#[derive(Debug, thiserror::Error)]
pub enum HandlesLabError {
    /// Measuring the miss penalty failed.
    #[error("measuring the miss penalty: {0}")]
    Penalty(#[from] penalty::PenaltyError),
    /// The ping-pong could not run.
    #[error("the ping-pong (Fig. 4): {0}")]
    PingPong(#[from] pingpong::PingPongError),
    /// A run of shmnet's own could not be recorded.
    #[error("recording shmnet's own run: {0}")]
    Trace(#[from] traces::TraceError),
    /// The lookup benchmark could not run.
    #[error("the lookup benchmark: {0}")]
    Lookup(String),
    /// Writing the report failed.
    #[error("writing {path}: {err}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        err: String,
    },
}

/// Runs the lab, calling `progress(fraction done, step)` as it goes.
pub fn run(
    opts: &HandlesLabOptions,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<HandlesLabReport, HandlesLabError> {
    let start = Instant::now();
    let shape = if opts.quick {
        Shape {
            apps: 8,
            pages: 4096,
            messages: 60_000,
        }
    } else {
        Shape {
            apps: 16,
            pages: 16_384,
            messages: 400_000,
        }
    };
    let mut configs = sweep::configurations(SetIndex::LowBits);
    configs.extend(sweep::configurations(SetIndex::Skewed));
    let mut rows = Vec::new();
    let total = (WORKLOADS.len() * configs.len()) as f64;
    for (w, name) in WORKLOADS.iter().enumerate() {
        let trace = workloads::trace(name, shape).expect("a known workload");
        for (c, geo) in configs.iter().enumerate() {
            let done = (w * configs.len() + c) as f64 / total;
            progress(
                0.6 * done,
                &format!("{name}: C{} L{} A{}", geo.entries, geo.line, geo.ways),
            );
            rows.push(sweep::run(name, *geo, &trace));
        }
    }
    let sim_agreed = rows.iter().filter(|r| r.agree).count();
    let misses = if opts.quick { 200 } else { 2000 };
    let mut pen = Vec::new();
    for (i, line) in [8u32, 64, 128].into_iter().enumerate() {
        progress(0.6 + 0.05 * i as f64, &format!("miss penalty, L = {line}"));
        pen.push(penalty::measure(line, 4, misses)?);
    }
    progress(0.75, "lookup cost per descriptor");
    let lookup = crate::bench::handles::run(opts.quick, &mut |_| {});
    if let Some(e) = &lookup.error {
        return Err(HandlesLabError::Lookup(e.clone()));
    }
    let (sizes, fractions, trips): (&[usize], &[f64], u64) = if opts.quick {
        (&[64, 1400], &[0.0, 0.1, 0.5], 200)
    } else {
        (&[64, 1400, 8192], &[0.0, 0.01, 0.1, 0.25, 0.5, 1.0], 1000)
    };
    let pingpong = pingpong::run(sizes, fractions, trips, &mut |what| progress(0.8, what))?;
    let throughput = fig6(&rows, &pen, &lookup);
    let own = if opts.quick {
        traces::OwnRun {
            stream: 2_000,
            round_trips: 1_000,
            file_bytes: 8 << 20,
        }
    } else {
        traces::OwnRun {
            stream: 20_000,
            round_trips: 10_000,
            file_bytes: 64 << 20,
        }
    };
    let mut own_traces = Vec::new();
    let mut own_trace_info = Vec::new();
    for name in traces::OWN_RUNS {
        progress(0.9, &format!("recording {name}"));
        let (trace, info) = traces::record(name, own)?;
        for geo in &configs {
            own_traces.push(sweep::run(name, *geo, &trace));
        }
        own_trace_info.push(info);
    }
    let cache_bytes = CacheGeometry::SEED_BEST.bytes() as u64;
    let memory = [1u32, 16, 256]
        .into_iter()
        .flat_map(|apps| {
            [64u64 << 20, 1 << 30, 64 << 30].map(|per| MemoryRow {
                apps,
                registered_per_app: per,
                full_table_bytes: u64::from(apps) * (per / 4096) * 8,
                cache_bytes,
            })
        })
        .collect();
    let mut report = HandlesLabReport {
        shape,
        sim_checked: rows.len(),
        sweep: rows,
        sim_agreed,
        penalty: pen,
        memory,
        lookup,
        pingpong,
        throughput,
        own_traces,
        own_trace_info,
        missing: Vec::new(),
        seconds: 0.0,
        report: opts.out.join("report.md"),
    };
    progress(0.98, "writing the report");
    report.seconds = start.elapsed().as_secs_f64();
    write(&opts.out, &report)?;
    Ok(report)
}

/// Fig. 6's analog from this run's parts (see [`ThroughputRow`]).
fn fig6(
    sweep: &[sweep::SweepRow],
    pen: &[penalty::PenaltyRow],
    lookup: &crate::bench::handles::HandlesReport,
) -> Vec<ThroughputRow> {
    // A miss's cost at line size `l`: the measured (delay + processing) p50, interpolated
    // linearly in L between the sizes measured.
    let at = |l: u32| {
        let pts: Vec<(f64, f64)> = pen
            .iter()
            .map(|p| (f64::from(p.line), p.delay_us.p50 + p.processing_us.p50))
            .collect();
        let l = f64::from(l);
        pts.windows(2)
            .find(|w| l >= w[0].0 && l <= w[1].0)
            .map(|w| w[0].1 + (w[1].1 - w[0].1) * (l - w[0].0) / (w[1].0 - w[0].0))
            .or_else(|| pts.iter().find(|p| p.0 == l).map(|p| p.1))
            .unwrap_or_else(|| pts.last().map_or(0.0, |p| p.1))
    };
    let hit_ns = |ways: u32| {
        lookup
            .rows
            .iter()
            .find(|r| r.ways == ways && r.index == SetIndex::Skewed)
            .map_or(0.0, |r| r.lookup_ns)
    };
    sweep
        .iter()
        .filter(|x| x.index == SetIndex::Skewed)
        .map(|x| {
            let refs = (x.send_refs + x.recv_refs) as f64;
            let misses = (x.send_cold + x.send_noncold + x.recv_cold + x.recv_noncold) as f64;
            let secs = refs * hit_ns(x.ways) * 1e-9 + misses * at(x.line) * 1e-6;
            ThroughputRow {
                workload: x.workload.clone(),
                entries: x.entries,
                line: x.line,
                ways: x.ways,
                mdesc_per_s: refs / secs.max(1e-12) / 1e6,
            }
        })
        .collect()
}

fn write_err(path: &Path, e: impl std::fmt::Display) -> HandlesLabError {
    HandlesLabError::Write {
        path: path.to_path_buf(),
        err: e.to_string(),
    }
}

/// report.md, report.json, fig5-misses.png and miss-penalty.png in `dir`.
fn write(dir: &Path, r: &HandlesLabReport) -> Result<(), HandlesLabError> {
    std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
    let json = dir.join("report.json");
    std::fs::write(
        &json,
        serde_json::to_vec_pretty(r).map_err(|e| write_err(&json, e))?,
    )
    .map_err(|e| write_err(&json, e))?;
    let fig5 = dir.join("fig5-misses.png");
    let panels: Vec<Panel> = WORKLOADS
        .iter()
        .map(|w| Panel {
            title: (*w).to_string(),
            groups: sweep::ENTRIES
                .iter()
                .flat_map(|&c| sweep::LINES.iter().map(move |&l| (c, l)))
                .map(|(c, l)| Group {
                    label: format!("C{}K L{l}", c / 1024),
                    bars: r
                        .sweep
                        .iter()
                        .filter(|x| {
                            x.workload == *w
                                && x.entries == c
                                && x.line == l
                                && x.index == SetIndex::LowBits
                        })
                        .map(|x| Bar {
                            series: format!("A{}", x.ways),
                            value: 100.0 * x.miss_ratio,
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let figures = match crate::plot::bars(
        &fig5,
        "lookup-cache misses by configuration (seed 004, Fig. 5)",
        "miss % ÷ the panel's largest",
        &panels,
        &|v| format!("{v:.1}"),
        Scale::Panel,
    ) {
        Ok(()) => {
            let pen = dir.join("miss-penalty.png");
            let groups = r
                .penalty
                .iter()
                .map(|p| Group {
                    label: format!("L = {}", p.line),
                    bars: vec![
                        Bar {
                            series: "delay p50".into(),
                            value: p.delay_us.p50,
                        },
                        Bar {
                            series: "delay p99".into(),
                            value: p.delay_us.p99,
                        },
                        Bar {
                            series: "processing p50".into(),
                            value: p.processing_us.p50,
                        },
                        Bar {
                            series: "processing p99".into(),
                            value: p.processing_us.p99,
                        },
                    ],
                })
                .collect();
            crate::plot::bars(
                &pen,
                "miss penalty, µs",
                "µs ÷ the largest",
                &[Panel {
                    title: "miss delay and processing".into(),
                    groups,
                }],
                &|v| format!("{v:.0}"),
                Scale::Panel,
            )
            .map(|()| "Figures: `fig5-misses.png`, `miss-penalty.png`.".to_string())
            .unwrap_or_else(|e| format!("The miss-penalty figure could not be drawn: {e}."))
        }
        Err(e) => format!("Figures could not be drawn: {e}."),
    };
    let fig4 = dir.join("fig4-pingpong.png");
    let mut sizes: Vec<usize> = r.pingpong.iter().map(|p| p.size).collect();
    sizes.dedup();
    let mut fractions: Vec<f64> = r.pingpong.iter().map(|p| p.cold_fraction).collect();
    fractions.sort_by(f64::total_cmp);
    fractions.dedup();
    let panels4: Vec<Panel> = sizes
        .iter()
        .map(|&size| Panel {
            title: format!("{size} B"),
            groups: fractions
                .iter()
                .map(|&f| Group {
                    label: format!("{:.0} % cold", 100.0 * f),
                    bars: r
                        .pingpong
                        .iter()
                        .filter(|p| p.size == size && p.cold_fraction == f)
                        .map(|p| Bar {
                            series: format!("{:?} on a miss, RTT p50 µs", p.on_miss).to_lowercase(),
                            value: p.rtt_p50_us,
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let figures = match crate::plot::bars(
        &fig4,
        "ping-pong round trip against the share of cold buffers (seed 004, Fig. 4)",
        "µs ÷ the panel's largest",
        &panels4,
        &|v| format!("{v:.0}"),
        Scale::Panel,
    ) {
        Ok(()) => format!("{figures} Fig. 4: `fig4-pingpong.png`."),
        Err(e) => format!("{figures} Fig. 4 could not be drawn: {e}."),
    };
    let md = markdown(r, &figures);
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|e| write_err(&path, e))
}

/// A markdown table with a row per configuration of Table III (C, L, A) and a column per
/// workload in `columns`, each cell `cell(configuration, workload)`.
fn config_table(s: &mut String, columns: &[&str], cell: impl Fn(&CacheGeometry, &str) -> String) {
    let _ = write!(s, "| C | L | A |");
    for w in columns {
        let _ = write!(s, " {w} |");
    }
    let _ = writeln!(s, "\n|---|---|---|{}", "---|".repeat(columns.len()));
    for geo in sweep::configurations(SetIndex::LowBits) {
        let _ = write!(
            s,
            "| {}K | {} | {} |",
            geo.entries / 1024,
            geo.line,
            geo.ways
        );
        for w in columns {
            let _ = write!(s, " {} |", cell(&geo, w));
        }
        let _ = writeln!(s);
    }
}

/// The miss ratio (%, `digits` decimals) of workload `w` at configuration `geo` with set
/// index `index` among `rows`, or a dash.
fn sweep_cell(
    rows: &[sweep::SweepRow],
    w: &str,
    geo: &CacheGeometry,
    index: SetIndex,
    digits: usize,
) -> String {
    rows.iter()
        .find(|x| {
            x.workload == w
                && x.entries == geo.entries
                && x.line == geo.line
                && x.ways == geo.ways
                && x.index == index
        })
        .map_or("—".to_string(), |x| {
            format!("{:.digits$}", 100.0 * x.miss_ratio)
        })
}

fn markdown(r: &HandlesLabReport, figures: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Handle lookup: seed 004 on this machine\n");
    let _ = writeln!(
        s,
        "`shmnet lab handles`: {} applications sharing one lookup cache, two regions of {} pages each, {} messages (a send and a receive reference each), in {:.0} s. {figures}\n",
        r.shape.apps, r.shape.pages, r.shape.messages, r.seconds
    );
    let _ = writeln!(s, "## Table III / Fig. 5: misses by configuration\n");
    let _ = writeln!(
        s,
        "Miss ratio (%) of every workload through every configuration, with the seed's set index (the low bits of the line number) / shmnet's skewed index (XORed with a hash of application and region). The live cache and shmnet-sim's cache model agreed on the miss count in **{} of {}** runs.\n",
        r.sim_agreed, r.sim_checked
    );
    config_table(&mut s, &WORKLOADS, |geo, w| {
        let pct = |index| sweep_cell(&r.sweep, w, geo, index, 2);
        format!("{} / {}", pct(SetIndex::LowBits), pct(SetIndex::Skewed))
    });
    let _ = writeln!(
        s,
        "\nMisses split by path and kind at the seed's pick, C16K L64 A4, with the seed's index:\n"
    );
    let _ = writeln!(
        s,
        "| workload | send refs | send cold | send other | recv cold | recv other |\n|---|---|---|---|---|---|"
    );
    for x in r.sweep.iter().filter(|x| {
        x.entries == 16 * 1024 && x.line == 64 && x.ways == 4 && x.index == SetIndex::LowBits
    }) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            x.workload, x.send_refs, x.send_cold, x.send_noncold, x.recv_cold, x.recv_noncold
        );
    }
    let _ = writeln!(s, "\n## Miss penalty\n");
    let _ = writeln!(
        s,
        "Live: a miss thread serving misses from a registration table of sparse memfd regions; each miss pins (and first touches) a line of L pages. µs.\n"
    );
    let _ = writeln!(
        s,
        "| L | delay p50 | p90 | p99 | max | processing p50 | p90 | p99 | max | pin failures |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for p in &r.penalty {
        let (d, q) = (&p.delay_us, &p.processing_us);
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            p.line, d.p50, d.p90, d.p99, d.max, q.p50, q.p90, q.p99, q.max, p.pin_failures
        );
    }
    let _ = writeln!(
        s,
        "\nThe seed saw 0–50 µs of delay and 5–500 µs of processing.\n"
    );
    let _ = writeln!(s, "## Table III on shmnet's own runs\n");
    let _ = writeln!(
        s,
        "A live server recorded every handle page its data plane translated while applications ran (`shmnet-ttcp`: four pairs streaming 1,000-byte datagrams; `shmnet-rr`: four pairs ping-ponging 64 bytes; `shmnet-file`: a file-sized region sent whole with `send_from`, 8 KiB a datagram). Miss ratio (%), the seed's index / the skewed one.\n"
    );
    let _ = writeln!(
        s,
        "| workload | references | distinct pages | applications | not recorded |\n|---|---|---|---|---|"
    );
    for t in &r.own_trace_info {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            t.workload, t.refs, t.distinct_pages, t.apps, t.dropped
        );
    }
    let _ = writeln!(s);
    config_table(&mut s, &traces::OWN_RUNS, |geo, w| {
        let pct = |index| sweep_cell(&r.own_traces, w, geo, index, 3);
        format!("{} / {}", pct(SetIndex::LowBits), pct(SetIndex::Skewed))
    });
    let agreed = r.own_traces.iter().filter(|x| x.agree).count();
    let _ = writeln!(
        s,
        "\nThe live cache and shmnet-sim agreed on **{agreed} of {}** of these runs.\n",
        r.own_traces.len()
    );
    let _ = writeln!(s, "## Fig. 4: ping-pong against the miss ratio\n");
    let _ = writeln!(
        s,
        "A live server (loopback softnic, `--isolation regions`); the pinger sends each ping with `send_from` from its own region, a share of them from buffers in lines the cache has evicted (chosen, as the seed did); an echo application answers. Misses per ping from the server's counters; round trips in µs; bandwidth counts a ping and a pong per mean round trip. Under drop-on-miss a ping or pong dropped on a receive buffer's miss is sent again after {} ms (retransmits). The cells share one region and run in order (sizes, then shares): a line's first miss pins — and first touches — its pages, while a line missed again later finds them allocated and costs far less, so later cells' misses are cheaper than the first ones'.\n",
        pingpong::RETRANSMIT.as_millis()
    );
    let _ = writeln!(
        s,
        "| on a miss | size B | cold pings | misses/ping | RTT p50 | p99 | mean | Mbit/s | retransmits |\n|---|---|---|---|---|---|---|---|---|"
    );
    for p in &r.pingpong {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} % | {:.3} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            if p.on_miss == shmnet_io::spec::OnMiss::Drop {
                "drop"
            } else {
                "buffer"
            },
            p.size,
            100.0 * p.cold_fraction,
            p.misses_per_ping,
            p.rtt_p50_us,
            p.rtt_p99_us,
            p.rtt_mean_us,
            p.mbit_per_s,
            p.retransmits
        );
    }
    let _ = writeln!(
        s,
        "\n## Fig. 6 analog: translation throughput by configuration\n"
    );
    let _ = writeln!(
        s,
        "Millions of descriptors per second the data plane would translate if each miss cost it the penalty measured above (delay + processing p50, interpolated in L) and each hit the lookup cost measured below at its associativity; shmnet's skewed index.\n"
    );
    config_table(&mut s, &WORKLOADS, |geo, w| {
        r.throughput
            .iter()
            .find(|x| {
                x.workload == w
                    && x.entries == geo.entries
                    && x.line == geo.line
                    && x.ways == geo.ways
            })
            .map_or("—".to_string(), |x| match x.mdesc_per_s {
                v if v >= 10.0 => format!("{v:.0}"),
                v if v >= 1.0 => format!("{v:.1}"),
                v => format!("{v:.3}"),
            })
    });
    let _ = writeln!(
        s,
        "\n## Fig. 3 analog: translation state on the data path\n"
    );
    let _ = writeln!(
        s,
        "| applications | registered each | full table | lookup cache (C16K L64 A4) | full ÷ cache |\n|---|---|---|---|---|"
    );
    for m in &r.memory {
        let _ = writeln!(
            s,
            "| {} | {} MiB | {:.1} MiB | {:.2} MiB | {:.0}× |",
            m.apps,
            m.registered_per_app >> 20,
            m.full_table_bytes as f64 / f64::from(1 << 20),
            m.cache_bytes as f64 / f64::from(1 << 20),
            m.full_table_bytes as f64 / m.cache_bytes as f64
        );
    }
    let _ = writeln!(
        s,
        "\n## Lookup cost per descriptor\n\n```\n{}```\n",
        r.lookup
    );
    if !r.missing.is_empty() {
        let _ = writeln!(s, "## Not yet measured\n");
        for m in &r.missing {
            let _ = writeln!(s, "- {m}");
        }
    }
    s
}
