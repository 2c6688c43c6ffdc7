//! `shmnet lab servers`: seed 002's three benchmarks — ttcp, ftp and X11perf's dot test —
//! run the way it ran them: six repetitions of each, reported with their mean and spread, on
//! one CPU (the seed's 386 was a uniprocessor: every party pinned to one core) and on two,
//! beside the kernel and the message-based interface (`ipc`) measured in the same run, with
//! the seed's own summary measure for each row — the share of the gap from the message-based
//! interface to the kernel that the shared-memory server recovers.
//!
//! - **ttcp** ([`ttcp`]), over TCP on one host: 10 B, 1 KB and 8 KB writes on one
//!   connection for `kernel` (two processes over 127.0.0.1), `ipc`, `server` and `inline`
//!   (shmnet over a loopback wire) — `shmnet ttcp --proto tcp`'s cells. On one host both ends
//!   are the structure's, so a cell is transmit and receive at once (the kernel's over `lo`
//!   is too); the seed's separate transmit and receive need the second machine.
//! - **ttcp**, **ftp** ([`transfer`]) and **X11perf** ([`x11`]) across a veth pair between
//!   two network namespaces ([`bed`]), the structure under test on one side and stock Debian
//!   programs on the other: ttcp transmit and receive apart (the measured side writes, or
//!   reads, the seed's message sizes), a file read from disk sent to `nc` writing /dev/null
//!   and back (six times each direction, with `shmnet app send-file`/`recv-file`, `--kernel`
//!   for the baseline), and the unmodified `x11perf -dot` client (six repetitions) drawing on
//!   `Xvfb` listening on TCP, on the kernel's sockets or under `shmnet run`. Needs root
//!   (namespaces, `AF_PACKET`); skipped with the reason otherwise, and X11perf when `xvfb` or
//!   `x11-apps` is missing.
//!
//! Beside the seed's three systems, every section runs the shared-memory server twice more
//! with its driver on a thread, so that the two synchronisations compare like for like:
//! `server-thread` (the IN and OUT queues the channel's wait-free rings) and
//! `server-faithful` (seed 002's own queues: Peterson mutexes, double sub-queues, a
//! condition variable — `shmnet serve --sync faithful`). [`ServersReport::sync`] gives the
//! ratio of each pair. `server` itself polls its driver in its own loop (no queue at all).
//!
//! The figures are the programs' own: ttcp's cells, the transfer reports of `send-file` and
//! `recv-file`, x11perf's dots per second. On one host the repetitions alternate between one
//! CPU and two, so that a machine that drifts during the run drifts both alike. Across the
//! pair they run in blocks — for each CPU setting, the kernel's six, then ipc's, then the
//! server's — because each block starts its structure once (a server, or the kernel's
//! address on `v0`); a drift between blocks shows as a spread of the ratios, not within a
//! row. On one CPU the peer's programs (`nc`, Xvfb) share the core too, as they inherit the
//! pin: harsher than the seed's second machine, which was never the limit.

pub mod bed;
mod report;
mod running;
pub use report::human;
pub mod spread;
mod transfer;
mod ttcp;
mod x11;

use crate::netbench::Structure;
use spread::Spread;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Seed 002's repetitions of every benchmark.
pub const REPETITIONS: usize = 6;

/// What to run.
#[derive(Clone, Debug)]
pub struct ServersOptions {
    /// Short cells, a small file, one-second x11perf repetitions (the whole lab in a few
    /// minutes), still six repetitions of each.
    pub quick: bool,
    /// Where report.md, the charts and report.json go.
    pub out: PathBuf,
    /// This program (the parties, the file transfers and `shmnet run` start from it).
    pub exe: PathBuf,
}

/// How many CPUs every party of a row may run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cpus {
    /// One core, as on the seed's uniprocessor: every party takes turns on it.
    One,
    /// Two cores.
    Two,
}

impl Cpus {
    /// For tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::One => "one CPU",
            Self::Two => "two CPUs",
        }
    }

    fn count(self) -> usize {
        match self {
            Self::One => 1,
            Self::Two => 2,
        }
    }
}

/// Which benchmark a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bench {
    /// ttcp over TCP on one host (both ends the structure's).
    Ttcp,
    /// ttcp across the veth pair: the measured side writes the messages, Linux reads.
    TtcpTransmit,
    /// ttcp across the veth pair: Linux sends, the measured side reads the messages.
    TtcpReceive,
    /// ftp, the measured side sending the file to the peer's /dev/null.
    FtpTransmit,
    /// ftp, the peer sending the file to the measured side's /dev/null.
    FtpReceive,
    /// x11perf -dot from the measured side to the peer's X server.
    X11Dot,
}

impl Bench {
    /// For tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ttcp => "ttcp",
            Self::TtcpTransmit => "ttcp transmit",
            Self::TtcpReceive => "ttcp receive",
            Self::FtpTransmit => "ftp transmit",
            Self::FtpReceive => "ftp receive",
            Self::X11Dot => "x11perf -dot",
        }
    }

    /// The unit of its figure.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Ttcp => "Gbit/s",
            Self::TtcpTransmit | Self::TtcpReceive | Self::FtpTransmit | Self::FtpReceive => "MB/s",
            Self::X11Dot => "dots/s",
        }
    }

    /// Where it runs.
    pub fn wire(self) -> &'static str {
        match self {
            Self::Ttcp => "loopback, one host",
            _ => "veth between two namespaces",
        }
    }
}

/// One row of the report: a benchmark × CPUs × size × structure over its repetitions.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// The benchmark.
    pub bench: Bench,
    /// Where its parties ran.
    pub cpus: Cpus,
    /// ttcp's message size in bytes (`None` for ftp and X11perf).
    pub size: Option<usize>,
    /// The structure measured.
    pub structure: Structure,
    /// The figure's unit ([`Bench::unit`]).
    pub unit: &'static str,
    /// The figure over the repetitions that ran (`None`: none did).
    pub value: Option<Spread>,
    /// The mean ÷ the kernel row's mean, same run.
    pub over_kernel: Option<f64>,
    /// Seed 002's measure on the means: `(this − ipc) ÷ (kernel − ipc)` — 0 at ipc, 1 at the
    /// kernel (the seed's server: about 0.5 on transmit, 1.1 on 10-byte receives). `None`
    /// without both baselines or when they are within 10 % of each other.
    pub gap_recovered: Option<f64>,
    /// ttcp: voluntary context switches (sleeps) per message, every party — the seed's
    /// second surprise, whether the shared-memory server avoids wake-ups.
    pub sleeps_per_msg: Option<Spread>,
    /// ttcp: CPU microseconds per message, every party.
    pub cpu_us_per_msg: Option<Spread>,
    /// ttcp: messages sent and never received, over every repetition — the seed's first
    /// surprise (its 8 KB receives fell short), counted.
    pub lost: u64,
    /// ftp and X11perf: mean bytes per frame the measured side handed the veth pair during
    /// a repetition (headers included; veth counts a GSO segment as one frame).
    pub wire_bytes_per_frame_sent: Option<Spread>,
    /// The same for the frames the peer (Linux) handed the pair towards the measured side.
    pub wire_bytes_per_frame_received: Option<Spread>,
    /// Repetitions that failed, with why.
    pub failures: Vec<String>,
}

/// One row's two synchronisations: `server-faithful` (seed 002's queues) against
/// `server-thread` (the rings), both with the driver on a thread of the server.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SyncCompared {
    /// The benchmark.
    pub bench: Bench,
    /// Where its parties ran.
    pub cpus: Cpus,
    /// ttcp's message size (`None` for ftp and X11perf).
    pub size: Option<usize>,
    /// The faithful row's mean ÷ the modern row's mean (above 1: the seed's queues faster).
    pub faithful_over_modern: f64,
    /// ttcp: CPU µs per message, modern then faithful (means).
    pub cpu_us_per_msg: Option<(f64, f64)>,
    /// ttcp: sleeps per message, modern then faithful (means).
    pub sleeps_per_msg: Option<(f64, f64)>,
}

/// A benchmark section that could not run at all, and why.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Skipped {
    /// The benchmarks it held.
    pub benches: Vec<Bench>,
    /// Why (what to install or how to run).
    pub why: String,
}

/// Everything `shmnet lab servers` measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ServersReport {
    /// Where it ran.
    pub machine: crate::machine::Machine,
    /// Repetitions of each row.
    pub repetitions: usize,
    /// `--quick`.
    pub quick: bool,
    /// Every row, by benchmark, CPUs, size and structure.
    pub rows: Vec<Row>,
    /// Sections that did not run.
    pub skipped: Vec<Skipped>,
    /// Rows the issue asks for that shmnet cannot run yet, with why.
    pub not_built: Vec<String>,
    /// Failures outside any one row (a server that did not start, a cell that failed).
    pub failures: Vec<String>,
    /// Seed 002's synchronisation beside the modern rings: per benchmark, CPUs and size.
    pub sync: Vec<SyncCompared>,
    /// ftp's file, bytes (ttcp's across the pair: a fraction of it at small sizes).
    pub file_bytes: u64,
    /// Seconds the lab took.
    pub seconds: f64,
    /// report.md.
    pub report: PathBuf,
}

/// Why the lab could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ServersError {
    /// The output directory or a file in it.
    #[error("{path}: {source}")]
    Io {
        /// Which.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The report could not be encoded.
    #[error("encoding report.json: {0}")]
    Json(#[from] serde_json::Error),
}

/// The repetitions of one row as they come in.
#[derive(Default)]
struct Samples {
    values: Vec<f64>,
    sleeps: Vec<f64>,
    cpu_us: Vec<f64>,
    wire_sent: Vec<f64>,
    wire_received: Vec<f64>,
    lost: u64,
    failures: Vec<String>,
}

/// A row's identity.
type Key = (Bench, Cpus, Option<usize>, Structure);

/// The samples of every row, filled by the sections.
#[derive(Default)]
struct Collected {
    rows: BTreeMap<Key, Samples>,
    failures: Vec<String>,
    skipped: Vec<Skipped>,
    file_bytes: u64,
}

impl Samples {
    /// Files one run's figures (one per repetition it held), with what crossed the wire
    /// meanwhile.
    fn add<E: std::fmt::Display>(
        &mut self,
        outcome: Result<Vec<f64>, E>,
        before: Option<bed::Wire>,
        after: Option<bed::Wire>,
    ) {
        match outcome {
            Ok(v) => {
                self.values.extend(v);
                if let Some((b, a)) = before.zip(after) {
                    let (sent, received) = b.bytes_per_frame_until(a);
                    self.wire_sent.extend(sent);
                    self.wire_received.extend(received);
                }
            }
            Err(e) => self.failures.push(e.to_string()),
        }
    }
}

impl Collected {
    fn at(&mut self, key: Key) -> &mut Samples {
        self.rows.entry(key).or_default()
    }
}

/// What the lab tells its caller while it runs: the fraction done, and what runs.
pub type Progress<'a> = &'a mut (dyn FnMut(f64, &str) + Send);

/// The CPU settings this machine allows: two only where two CPUs are allowed.
fn cpu_settings() -> Vec<Cpus> {
    if crate::bench::corelat::allowed_cpus().len() >= 2 {
        vec![Cpus::One, Cpus::Two]
    } else {
        vec![Cpus::One]
    }
}

/// Pins the calling thread (and so every process it starts) to the first `cpus` CPUs it
/// may use, until dropped.
struct Pinned {
    old: Option<rustix::thread::CpuSet>,
}

impl Pinned {
    fn to(cpus: Cpus) -> Pinned {
        let old = rustix::thread::sched_getaffinity(None).ok();
        let mut set = rustix::thread::CpuSet::new();
        for c in crate::bench::corelat::allowed_cpus()
            .into_iter()
            .take(cpus.count())
        {
            set.set(c);
        }
        let _ = rustix::thread::sched_setaffinity(None, &set);
        Pinned { old }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(set) = &self.old {
            let _ = rustix::thread::sched_setaffinity(None, set);
        }
    }
}

/// Runs the lab; `progress` hears the fraction done and what runs. Writes report.md,
/// report.json and the charts into `o.out`.
pub fn run(o: &ServersOptions, progress: Progress) -> Result<ServersReport, ServersError> {
    let start = Instant::now();
    std::fs::create_dir_all(&o.out).map_err(|source| ServersError::Io {
        path: o.out.clone(),
        source,
    })?;
    let settings = cpu_settings();
    let mut c = Collected::default();
    // ttcp on one host takes about a third of the lab's time, the veth sections the rest.
    for rep in 0..REPETITIONS {
        for (i, &cpus) in settings.iter().enumerate() {
            let done = (rep * settings.len() + i) as f64 / (REPETITIONS * settings.len()) as f64;
            let _pin = Pinned::to(cpus);
            ttcp::repetition(o, cpus, &mut c, &mut |what| {
                progress(
                    done / 3.0,
                    &format!(
                        "ttcp, {}, repetition {}/{REPETITIONS}: {what}",
                        cpus.name(),
                        rep + 1
                    ),
                )
            });
        }
    }
    veth_sections(o, &settings, &mut c, &mut |f, what| {
        progress((1.0 + 2.0 * f) / 3.0, what)
    });
    let mut report = ServersReport {
        machine: crate::machine::Machine::this(),
        repetitions: REPETITIONS,
        quick: o.quick,
        rows: rows(c.rows),
        sync: Vec::new(),
        skipped: c.skipped,
        not_built: not_built(),
        failures: c.failures,
        file_bytes: c.file_bytes,
        seconds: 0.0,
        report: o.out.join("report.md"),
    };
    report.sync = sync_compared(&report.rows);
    report.seconds = start.elapsed().as_secs_f64();
    report::write(&report, &o.out)?;
    Ok(report)
}

/// ftp and X11perf across the veth pair, or why not.
fn veth_sections(o: &ServersOptions, settings: &[Cpus], c: &mut Collected, progress: Progress) {
    let veth = [
        Bench::TtcpTransmit,
        Bench::TtcpReceive,
        Bench::FtpTransmit,
        Bench::FtpReceive,
        Bench::X11Dot,
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        c.skipped.push(Skipped {
            benches: veth.to_vec(),
            why: "needs root: network namespaces, a veth pair and AF_PACKET (run as root)".into(),
        });
        return;
    }
    let bed = match bed::Bed::new() {
        Ok(b) => b,
        Err(e) => {
            c.skipped.push(Skipped {
                benches: veth.to_vec(),
                why: e.to_string(),
            });
            return;
        }
    };
    let x11 = x11::missing_programs();
    if let Some(why) = &x11 {
        c.skipped.push(Skipped {
            benches: vec![Bench::X11Dot],
            why: why.clone(),
        });
    }
    let files = match transfer::Files::write(o) {
        Ok(f) => f,
        Err(e) => {
            c.skipped.push(Skipped {
                benches: veth.to_vec(),
                why: format!(
                    "writing the files to transfer into {}: {e}",
                    o.out.display()
                ),
            });
            return;
        }
    };
    c.file_bytes = files.ftp.bytes;
    let systems = [
        Structure::Kernel,
        Structure::Ipc,
        Structure::Server,
        Structure::ServerThread,
        Structure::ServerFaithful,
    ];
    let steps = (settings.len() * systems.len()) as f64;
    let mut step = 0.0;
    for &cpus in settings {
        let outcome = bed.in_measured(|| {
            let _pin = Pinned::to(cpus);
            let xvfb = match x11 {
                None => Some(x11::Xvfb::start(&bed)),
                Some(_) => None,
            };
            for structure in systems {
                let mut say = |what: &str| {
                    progress(
                        step / steps,
                        &format!("{}, {}: {what}", cpus.name(), structure.name()),
                    )
                };
                let side = match transfer::Side::start(o, &bed, structure) {
                    Ok(s) => s,
                    Err(e) => {
                        c.failures
                            .push(format!("{} on {}: {e}", structure.name(), cpus.name()));
                        step += 1.0;
                        continue;
                    }
                };
                transfer::repetitions(o, &bed, &side, &files, cpus, c, &mut say);
                match &xvfb {
                    Some(Ok(x)) => x11::repetitions(o, &bed, x, &side, cpus, c, &mut say),
                    Some(Err(e)) => c
                        .at((Bench::X11Dot, cpus, None, structure))
                        .failures
                        .push(e.to_string()),
                    None => {}
                }
                if let Err(e) = side.stop(&bed) {
                    c.failures
                        .push(format!("{} on {}: {e}", structure.name(), cpus.name()));
                }
                step += 1.0;
            }
        });
        if let Err(e) = outcome {
            c.failures.push(format!("{}: {e}", cpus.name()));
        }
    }
    files.remove();
}

/// The rows from their samples, with each row's ratios to its own kernel and ipc rows.
fn rows(samples: BTreeMap<Key, Samples>) -> Vec<Row> {
    let mean = |k: &Key, s: Structure| -> Option<f64> {
        let key = (k.0, k.1, k.2, s);
        samples
            .get(&key)
            .and_then(|x| Spread::of(&x.values))
            .map(|v| v.mean)
    };
    let mut out = Vec::with_capacity(samples.len());
    for (key, s) in &samples {
        let value = Spread::of(&s.values);
        let kernel = mean(key, Structure::Kernel);
        let ipc = mean(key, Structure::Ipc);
        let this = value.as_ref().map(|v| v.mean);
        out.push(Row {
            bench: key.0,
            cpus: key.1,
            size: key.2,
            structure: key.3,
            unit: key.0.unit(),
            over_kernel: this.zip(kernel.filter(|&k| k > 0.0)).map(|(t, k)| t / k),
            gap_recovered: match (this, ipc, kernel) {
                (Some(t), Some(i), Some(k))
                    if !matches!(key.3, Structure::Ipc | Structure::Kernel) =>
                {
                    crate::netbench::ttcp::gap_recovered(t, i, k)
                }
                _ => None,
            },
            value,
            sleeps_per_msg: Spread::of(&s.sleeps),
            cpu_us_per_msg: Spread::of(&s.cpu_us),
            wire_bytes_per_frame_sent: Spread::of(&s.wire_sent),
            wire_bytes_per_frame_received: Spread::of(&s.wire_received),
            lost: s.lost,
            failures: s.failures.clone(),
        });
    }
    out
}

/// Each row measured with both synchronisations, faithful against modern.
fn sync_compared(rows: &[Row]) -> Vec<SyncCompared> {
    let mean = |s: &Option<Spread>| s.as_ref().map(|v| v.mean);
    let mut out = Vec::new();
    for f in rows
        .iter()
        .filter(|r| r.structure == Structure::ServerFaithful)
    {
        let Some(m) = rows.iter().find(|r| {
            r.structure == Structure::ServerThread
                && (r.bench, r.cpus, r.size) == (f.bench, f.cpus, f.size)
        }) else {
            continue;
        };
        let (Some(fv), Some(mv)) = (mean(&f.value), mean(&m.value).filter(|&v| v > 0.0)) else {
            continue;
        };
        out.push(SyncCompared {
            bench: f.bench,
            cpus: f.cpus,
            size: f.size,
            faithful_over_modern: fv / mv,
            cpu_us_per_msg: mean(&m.cpu_us_per_msg).zip(mean(&f.cpu_us_per_msg)),
            sleeps_per_msg: mean(&m.sleeps_per_msg).zip(mean(&f.sleeps_per_msg)),
        });
    }
    out
}

/// What the issue asks for that this lab cannot run yet (nothing now: kept so that a row
/// that cannot run is said so in the report, not left out).
fn not_built() -> Vec<String> {
    Vec::new()
}
