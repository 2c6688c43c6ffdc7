//! Seed 002's comparison of structures on this machine: `shmnet ttcp` (streaming, one
//! direction at a time) and `shmnet rr` (request–response).
//!
//! A **cell** is one structure × one workload. Its parties are separate processes, started
//! by the harness from this same program — each from a typed [`PartySpec`] (`shmnet serve`'s
//! [`ServeSpec`], or a [`WorkerSpec`]) that the hidden `shmnet party` command reads as JSON on
//! its standard input, so the harness never composes a command line — agreeing through a [`Scoreboard`] on when to start and stop, on the sender's window, and on
//! counts. The harness only watches the board (a page it reads every millisecond) and, when
//! the run is over, reaps every party with `wait4`: CPU time and context switches come from
//! the kernel's accounting of each process, not from anything a party reports.
//!
//! | structure | parties |
//! |---|---|
//! | `kernel` | Linux UDP sockets over loopback: a sender process and a receiver process |
//! | `ipc` | `shmnet serve --structure ipc` (server, softnic as its thread, frames and datagrams copied through Unix sockets) and an application process (rr: two, the echo and the requester) |
//! | `server` | `shmnet serve --structure server` (the server process polling softnic in its own loop, shared windows) and an application process (rr: two) |
//! | `server-thread` | as `server`, softnic on a thread of the server process (`--placement thread`), joined by the IN and OUT queues |
//! | `server-process` | as `server`, softnic in a driver process of its own (`--placement process`, seed 002's layout) |
//! | `server-faithful` | as `server-thread`, the IN and OUT queues seed 002's own (`--sync faithful`: Peterson mutexes, double sub-queues, a condition variable) |
//! | `server-regions` | as `server`, with `--isolation regions`: the application maps only its own rings and registered regions, and the server copies each datagram into a buffer it posted (seed 004) |
//! | `inline` | one process: softnic, the stack and the application (rr: the echo and the requester) in one loop |
//!
//! In ttcp the shmnet structures' wire is `softnic`: it "receives" by writing frames into
//! buffers (the DMA's cost, paid by the driver party) and "transmits" by reading each frame's
//! header and freeing it. In rr it is a loopback softnic, as the kernel's is `lo`: every
//! frame transmitted comes back as received, so the requester is an application like the
//! echo, and every structure runs its stack twice per direction (see [`rr`]).

use crate::scoreboard::{Scoreboard, ScoreboardError};
use shmnet_io::server::{Placement, SyncMode};
use shmnet_io::spec::{
    BenchPart, BenchRole, DriverSpec, Isolation, ServeSpec, ServeStructure, SoftnicSpec,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub(crate) mod party;
mod requester;
pub mod rr;
pub mod tcp;
pub mod ttcp;
pub mod worker;

use party::{Finished, Party, PartyError};
pub use party::{PARTY_COMMAND, PartySpec};
use worker::{InlineJob, WorkerJob, WorkerSpec};

/// The MTU of shmnet's loopback wire over TCP unless told otherwise: Linux's `lo` carries
/// segments of up to 64 KiB, shmnet's are one pool buffer each, which grows with the MTU.
pub const TCP_LOOPBACK_MTU: usize = 16_384;

/// Shortens the calling thread's timer slack to 1 µs; the parties it starts inherit it. They
/// sleep in short waits (a sender held back by its window looks again every few
/// microseconds), which the default 50 µs slack would stretch.
pub fn short_timer_slack() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
}

/// How the parties are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Structure {
    /// Linux UDP over loopback, two processes.
    #[serde(rename = "kernel")]
    Kernel,
    /// shmnet, every frame and datagram copied through Unix sockets (seed 002's message-based
    /// device interface).
    #[serde(rename = "ipc")]
    Ipc,
    /// shmnet, server and application sharing windows (seed 002's shared-memory queues),
    /// the driver polled by the server's own loop.
    #[serde(rename = "server")]
    Server,
    /// As [`Structure::Server`], the driver on a thread of the server process.
    #[serde(rename = "server-thread")]
    ServerThread,
    /// As [`Structure::Server`], the driver in a process of its own.
    #[serde(rename = "server-process")]
    ServerProcess,
    /// As [`Structure::ServerThread`], joined by seed 002's own queues (`--sync faithful`).
    #[serde(rename = "server-faithful")]
    ServerFaithful,
    /// As [`Structure::Server`] under `--isolation regions`: the applications map only their
    /// own rings and regions; the server copies each datagram into a buffer they posted.
    #[serde(rename = "server-regions")]
    ServerRegions,
    /// shmnet, driver, stack and application in one thread.
    #[serde(rename = "inline")]
    Inline,
}

impl Structure {
    /// Every structure, in the order tables list them.
    pub const ALL: [Structure; 8] = [
        Structure::Kernel,
        Structure::Ipc,
        Structure::Server,
        Structure::ServerThread,
        Structure::ServerProcess,
        Structure::ServerFaithful,
        Structure::ServerRegions,
        Structure::Inline,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Ipc => "ipc",
            Self::Server => "server",
            Self::ServerThread => "server-thread",
            Self::ServerProcess => "server-process",
            Self::ServerFaithful => "server-faithful",
            Self::ServerRegions => "server-regions",
            Self::Inline => "inline",
        }
    }

    /// For the structures `shmnet serve` runs: its structure and where its driver runs.
    pub fn serve(self) -> Option<(ServeStructure, Placement)> {
        match self {
            Self::Kernel | Self::Inline => None,
            Self::Ipc => Some((ServeStructure::Ipc, Placement::Thread)),
            Self::Server => Some((ServeStructure::Server, Placement::Polled)),
            Self::ServerThread => Some((ServeStructure::Server, Placement::Thread)),
            Self::ServerProcess => Some((ServeStructure::Server, Placement::Process)),
            Self::ServerFaithful => Some((ServeStructure::Server, Placement::Thread)),
            Self::ServerRegions => Some((ServeStructure::Server, Placement::Polled)),
        }
    }

    /// How its driver's queues synchronise.
    pub fn sync(self) -> SyncMode {
        match self {
            Self::ServerFaithful => SyncMode::Faithful,
            _ => SyncMode::Modern,
        }
    }

    /// What its applications may see (docs/isolation.md).
    pub fn isolation(self) -> Isolation {
        match self {
            Self::ServerRegions => Isolation::Regions,
            _ => Isolation::Shared,
        }
    }
}

impl std::str::FromStr for Structure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| {
            format!(
                "unknown structure {s:?}: use kernel, ipc, server, server-thread, server-process, server-faithful, server-regions or inline"
            )
        })
    }
}

/// The transport a run compares the structures over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// Datagrams: every message is one UDP datagram (the default).
    #[default]
    Udp,
    /// One TCP connection per cell: a byte stream of `size`-byte writes (ttcp) or of
    /// requests and replies (rr), every structure running both ends' protocol work over a
    /// loopback wire (see [`tcp`]).
    Tcp,
}

impl Proto {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            _ => Err(format!("unknown protocol {s:?}: use udp or tcp")),
        }
    }
}

/// Why a cell could not run: one line for the report, quoting what a failed party said.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CellError {
    /// A party could not be started.
    #[error(transparent)]
    Party(#[from] PartyError),
    /// The cell's scoreboard could not be made.
    #[error(transparent)]
    Board(#[from] ScoreboardError),
    /// A party exited before every party was ready.
    #[error("{0} exited before the run started")]
    ExitedEarly(&'static str),
    /// The parties were not all ready in time.
    #[error("the parties were not ready after {0} s")]
    NotReady(u64),
    /// The cell could not start (`why`); every party was stopped, and those that failed
    /// said `said`.
    #[error("{why}; {}", said.join("; "))]
    Aborted {
        /// Why it was abandoned.
        why: Box<CellError>,
        /// What each failed party said.
        said: Vec<String>,
    },
    /// A party failed: its exit and the last lines it wrote on standard error.
    #[error("{name} exited with {status}: {said}")]
    PartyFailed {
        /// The party.
        name: &'static str,
        /// `code N`, or `a signal`.
        status: String,
        /// Its last lines, joined by ` | `.
        said: String,
    },
    /// A party exited during the run and left nothing to say why.
    #[error("{0} exited during the run")]
    ExitedDuring(&'static str),
    /// The latency histogram could not be made.
    #[error("the latency histogram: {0}")]
    Histogram(String),
}

/// What every cell of a run shares.
#[derive(Clone, Debug)]
pub struct Launch {
    /// This program (the harness starts its parties from it).
    pub exe: PathBuf,
    /// Checksums in the shmnet structures (the kernel computes none over loopback): UDP's,
    /// and TCP's over the loopback wire.
    pub checksum: bool,
    /// The transport every cell runs over.
    pub proto: Proto,
    /// The MTU of shmnet's wire (the stack's; its pool buffers hold a frame of it).
    pub mtu: usize,
    /// How the shmnet structures' stacks keep frames coherent with the device by hand
    /// (seed 003's methods; none by default).
    pub buffers: shmnet_chan::coherence::BufferModes,
    /// A `shmnet capture` of each shmnet server cell, started before its applications
    /// (`shmnet bench capture`); `None`: no capture.
    pub capture: Option<shmnet_io::capture::CaptureSpec>,
}

/// The parties' part of a cell: what each structure starts, and how each starts it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Roles {
    /// ttcp, messages from the wire to the application.
    Receive,
    /// ttcp, messages from the application to the wire.
    Transmit,
    /// rr with this many requests in flight.
    RequestResponse(u32),
    /// ttcp over TCP: a sender application streams to a receiver application over one
    /// connection through a loopback wire (both ends' work in the cell).
    Stream,
}

/// A cell's running parties and its board.
pub(crate) struct Running {
    pub board: Scoreboard,
    board_path: PathBuf,
    socket: Option<PathBuf>,
    parties: Vec<Party>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.board_path);
        if let Some(s) = &self.socket {
            let _ = std::fs::remove_file(s);
        }
    }
}

/// What a finished cell left: every party's accounting, and the board's counts.
pub(crate) struct Outcome {
    pub parties: Vec<Finished>,
    pub sent: u64,
    pub received: u64,
    pub seconds: f64,
    pub samples: Vec<u32>,
}

/// Starts one party from its spec.
fn spawn(name: &'static str, launch: &Launch, spec: PartySpec) -> Result<Party, CellError> {
    Ok(Party::spawn(name, &launch.exe, &spec)?)
}

/// Starts a cell's parties and waits until each has said it is ready.
pub(crate) fn start(
    launch: &Launch,
    structure: Structure,
    roles: &Roles,
    size: usize,
    window: u64,
    limit: u64,
    rx_queue: usize,
) -> Result<Running, CellError> {
    let proto = launch.proto;
    let board_path = crate::scoreboard::temp_path(structure.name());
    let samples = if matches!(roles, Roles::RequestResponse(_)) {
        4 << 20
    } else {
        0
    };
    let board = Scoreboard::create(&board_path, window, limit, samples)?;
    let mut run = Running {
        board,
        board_path: board_path.clone(),
        socket: None,
        parties: Vec::new(),
    };
    let worker = |job: WorkerJob| {
        PartySpec::Worker(WorkerSpec {
            board: board_path.clone(),
            job,
        })
    };
    let ready_wanted = match structure.serve() {
        None if structure == Structure::Kernel => {
            let (first, second) = match (*roles, proto) {
                (Roles::RequestResponse(outstanding), Proto::Tcp) => (
                    worker(WorkerJob::KernelTcpEcho),
                    worker(WorkerJob::KernelTcpRr { size, outstanding }),
                ),
                (Roles::Stream, _) | (_, Proto::Tcp) => (
                    worker(WorkerJob::KernelTcpRecv { size }),
                    worker(WorkerJob::KernelTcpSend { size }),
                ),
                (Roles::RequestResponse(outstanding), Proto::Udp) => (
                    worker(WorkerJob::KernelEcho),
                    worker(WorkerJob::KernelRr { size, outstanding }),
                ),
                _ => (
                    worker(WorkerJob::KernelRecv),
                    worker(WorkerJob::KernelSend { size }),
                ),
            };
            run.parties.push(spawn("receiver", launch, first)?);
            run.parties.push(spawn("sender", launch, second)?);
            2
        }
        None => {
            let job = match *roles {
                Roles::Receive => InlineJob::Receive,
                Roles::Transmit => InlineJob::Transmit,
                Roles::Stream => InlineJob::Stream,
                Roles::RequestResponse(outstanding) => InlineJob::RequestResponse { outstanding },
            };
            let inline = worker(if proto == Proto::Tcp || job == InlineJob::Stream {
                WorkerJob::InlineTcp {
                    job,
                    size,
                    checksum: launch.checksum,
                    mtu: launch.mtu,
                    buffers: launch.buffers,
                }
            } else {
                WorkerJob::Inline {
                    job,
                    size,
                    checksum: launch.checksum,
                    rx_queue,
                    buffers: launch.buffers,
                }
            });
            run.parties.push(spawn("inline", launch, inline)?);
            1
        }
        Some((serve_structure, placement)) => {
            let socket = board_path.with_extension("sock");
            run.socket = Some(socket.clone());
            // The applications, in the order they start: rr's echo binds before its
            // requester.
            let s = socket.clone();
            let (role, apps) = match (*roles, proto) {
                (Roles::RequestResponse(outstanding), Proto::Tcp) => (
                    BenchRole::Loopback,
                    vec![
                        ("app", WorkerJob::ShmTcpEcho { socket: s.clone() }),
                        (
                            "requester",
                            WorkerJob::ShmTcpRr {
                                socket: s,
                                size,
                                outstanding,
                            },
                        ),
                    ],
                ),
                (Roles::Stream, _) | (_, Proto::Tcp) => (
                    BenchRole::Loopback,
                    vec![
                        (
                            "receiver",
                            WorkerJob::ShmTcpRecv {
                                socket: s.clone(),
                                size,
                            },
                        ),
                        ("sender", WorkerJob::ShmTcpSend { socket: s, size }),
                    ],
                ),
                (Roles::Receive, Proto::Udp) => (
                    BenchRole::Send,
                    vec![("app", WorkerJob::ShmRecv { socket: s })],
                ),
                (Roles::Transmit, Proto::Udp) => (
                    BenchRole::Sink,
                    vec![("app", WorkerJob::ShmSend { socket: s, size })],
                ),
                (Roles::RequestResponse(outstanding), Proto::Udp) => (
                    BenchRole::Loopback,
                    vec![
                        ("app", WorkerJob::ShmEcho { socket: s.clone() }),
                        (
                            "requester",
                            WorkerJob::ShmRr {
                                socket: s,
                                size,
                                outstanding,
                            },
                        ),
                    ],
                ),
            };
            let serve = ServeSpec {
                structure: serve_structure,
                placement,
                sync: structure.sync(),
                driver: DriverSpec::Softnic(SoftnicSpec {
                    // A loopback generates nothing: over TCP its message size does not
                    // apply (and a TCP write may be larger than a datagram).
                    size: match proto {
                        Proto::Udp => size,
                        Proto::Tcp => SoftnicSpec::default().size,
                    },
                    port: worker::APP_PORT,
                    bench: Some(BenchPart {
                        board: board_path.clone(),
                        role,
                    }),
                    ..SoftnicSpec::default()
                }),
                ip: worker::SERVER_IP,
                prefix: 24,
                checksum: launch.checksum,
                mtu: launch.mtu,
                buffers: launch.buffers,
                cache: crate::cacheinfo::geometry(),
                rx_queue,
                socket: socket.clone(),
                isolation: structure.isolation(),
                json: true,
                ..ServeSpec::default()
            };
            run.parties
                .push(spawn("serve", launch, PartySpec::Serve(Box::new(serve)))?);
            if let Err(e) = wait_until(Duration::from_secs(15), &run, || socket.exists()) {
                return Err(run.abort(e));
            }
            let mut wanted = apps.len() as u64;
            if let Some(spec) = &launch.capture {
                let job = WorkerJob::Capture {
                    socket: socket.clone(),
                    spec: spec.clone(),
                };
                run.parties.push(spawn("capture", launch, worker(job))?);
                wanted += 1;
                // Up before the applications bind (softnic starts sending then).
                if let Err(e) = wait_until(Duration::from_secs(15), &run, || run.board.ready() >= 1)
                {
                    return Err(run.abort(e));
                }
            }
            for (name, job) in apps {
                run.parties.push(spawn(name, launch, worker(job))?);
            }
            wanted
        }
    };
    if let Err(e) = wait_until(Duration::from_secs(15), &run, || {
        run.board.ready() >= ready_wanted
    }) {
        return Err(run.abort(e));
    }
    Ok(run)
}

impl Running {
    /// Ends a cell that could not start: every party told to quit and reaped; `why`, with
    /// what any party that failed said.
    fn abort(mut self, why: CellError) -> CellError {
        self.board.set_quit();
        let said: Vec<String> = std::mem::take(&mut self.parties)
            .into_iter()
            .map(|p| p.finish(Duration::from_secs(5)))
            .filter(|f| f.code != Some(0))
            .map(|f| f.failure().to_string())
            .collect();
        CellError::Aborted {
            why: Box::new(why),
            said,
        }
    }
}

/// Waits for `cond`, failing if a party dies or `patience` runs out.
fn wait_until(
    patience: Duration,
    run: &Running,
    mut cond: impl FnMut() -> bool,
) -> Result<(), CellError> {
    let deadline = Instant::now() + patience;
    while !cond() {
        if let Some(p) = run.parties.iter().find(|p| p.has_exited()) {
            return Err(CellError::ExitedEarly(p.name));
        }
        if Instant::now() > deadline {
            return Err(CellError::NotReady(patience.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// How long after `stop` the harness waits at most for the sender to say it has finished
/// (and its count is final) and for what it sent to arrive. A bound against a party that
/// keeps trickling forever, not a measurement: the stall rule (nothing arriving for 2 s once
/// the sender has finished, 10 s before) ends the wait long before it on any machine that is
/// merely slow or busy, so that a slow machine never turns messages in flight into losses.
const SETTLE_CAP: Duration = Duration::from_secs(60);

/// Runs a started cell: `go`, then until the sender has finished (sent `limit` messages, or
/// been told to stop after `seconds`) and said so on the board — its count of sent messages
/// then final — and what it sent has arrived; then `quit`, and every party reaped. The
/// counts are read only once they are settled: the sender finished and every message
/// arrived, or nothing arrived for a while, or [`SETTLE_CAP`] after `stop`.
pub(crate) fn run(
    mut running: Running,
    seconds: Option<f64>,
    progress: &mut dyn FnMut(u64, f64),
) -> Result<Outcome, CellError> {
    let board = &running.board;
    let start = Instant::now();
    board.set_go();
    let mut last_change = (start, 0u64);
    let mut last_shown = start;
    let mut stopped_at = None;
    // Nothing arriving for this long ends the run: 2 s once the sender has finished (what has
    // not come by then is lost, and counted), 10 s while it is still sending (a machine busy
    // with other work must not cut a run short).
    let stall = |finished: bool| Duration::from_secs(if finished { 2 } else { 10 });
    let mut failure = None;
    loop {
        std::thread::sleep(Duration::from_millis(1));
        let now = Instant::now();
        let received = board.received();
        if received != last_change.1 {
            last_change = (now, received);
        }
        if now.duration_since(last_shown) >= Duration::from_millis(200) {
            progress(received, now.duration_since(start).as_secs_f64());
            last_shown = now;
        }
        if stopped_at.is_none()
            && seconds.is_some_and(|s| now.duration_since(start).as_secs_f64() >= s)
        {
            board.set_stop();
            stopped_at = Some(now);
        }
        // `sent` only once the sender has said it is final: a sender may publish it in
        // batches, and a stale count would make messages in flight look lost.
        let finished = board.sender_finished();
        if finished && received >= board.sent() {
            break;
        }
        if stopped_at.is_some_and(|t| now.duration_since(t) > SETTLE_CAP) {
            // The sender never said it finished, or what it sent never all came: count
            // what is on the board.
            break;
        }
        if now.duration_since(last_change.0) > stall(finished) {
            // Nothing arrived for a while: what has not come is lost; say so below.
            break;
        }
        if let Some(p) = running.parties.iter().find(|p| p.has_exited()) {
            failure = Some(p.name);
            break;
        }
    }
    board.set_stop();
    let (sent, received) = (board.sent(), board.received());
    let seconds = last_change.0.duration_since(start).as_secs_f64().max(1e-6);
    board.set_quit();
    let parties: Vec<Finished> = std::mem::take(&mut running.parties)
        .into_iter()
        .map(|p| p.finish(Duration::from_secs(10)))
        .collect();
    if let Some(name) = failure {
        let f = parties
            .iter()
            .find(|p| p.name == name)
            .map(Finished::failure);
        return Err(f.unwrap_or(CellError::ExitedDuring(name)));
    }
    if let Some(bad) = parties.iter().find(|p| p.code != Some(0)) {
        return Err(bad.failure());
    }
    Ok(Outcome {
        parties,
        sent,
        received,
        seconds,
        samples: board.samples(),
    })
}

/// CPU microseconds per message (or transaction: `n` of them), by party. `shmnet serve`'s
/// time is split as its report says: the server loop, the driver (only where the driver is a
/// party of its own: a thread or a process; a polled driver's work is the server's), and the
/// rest `wait4` saw (start-up, the control thread).
pub(crate) fn cpu_by_party(parties: &[Finished], n: f64) -> BTreeMap<String, f64> {
    let mut by_party = BTreeMap::new();
    for p in parties {
        match p.json().filter(|_| p.name == "serve") {
            Some(v) => {
                let s = v["cpu_s"]["server"].as_f64().unwrap_or(0.0);
                let d = v["cpu_s"]["driver"].as_f64().unwrap_or(0.0);
                if v["driver_placement"].as_str() == Some(Placement::Polled.name()) {
                    by_party.insert("server".to_string(), (s + d) * 1e6 / n);
                } else {
                    by_party.insert("server".to_string(), s * 1e6 / n);
                    by_party.insert("driver".to_string(), d * 1e6 / n);
                }
                by_party.insert(
                    "serve (rest)".to_string(),
                    (p.cpu_s - s - d).max(0.0) * 1e6 / n,
                );
            }
            None => {
                by_party.insert(p.name.to_string(), p.cpu_s * 1e6 / n);
            }
        }
    }
    by_party
}

/// Payload Gbit/s of a `memcpy` of `size` bytes from a source that stays in the cache (the
/// copy-out's bound: the best a receiver that copies can do): the median of 9 trials of
/// about `time / 9`. The destination starts 64 bytes past a 4 KiB boundary relative to the
/// source, so that loads do not alias recent stores at the same page offset (which would
/// measure the CPU's store-forwarding guesswork, not the copy).
pub fn memcpy_gbit_per_s(size: usize, time: Duration) -> f64 {
    let src = vec![0x5au8; size + 4096];
    let mut dst = vec![0u8; size + 4096 + 64];
    let src_off = src.as_ptr().align_offset(4096).min(4095);
    let dst_off = (dst.as_ptr().align_offset(4096) + 64).min(4095 + 64);
    let src = &src[src_off..src_off + size];
    let dst = &mut dst[dst_off..dst_off + size];
    let trial = time / 9;
    let mut rates: Vec<f64> = (0..9)
        .map(|_| {
            let mut reps = 0u64;
            let start = Instant::now();
            while start.elapsed() < trial {
                for _ in 0..64 {
                    dst.copy_from_slice(std::hint::black_box(src));
                    std::hint::black_box(&mut *dst);
                }
                reps += 64;
            }
            (reps * size as u64 * 8) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// As [`memcpy_gbit_per_s`], but each copy reads a different `size` bytes of a 256 MiB
/// region, so the source comes from memory, as a copy-out's does when the data has left the
/// cache by the time the application reads it.
pub fn memcpy_cold_gbit_per_s(size: usize, time: Duration) -> f64 {
    const REGION: usize = 256 << 20;
    let stride = size.next_multiple_of(64) + 64;
    let src = vec![0x5au8; REGION];
    let mut dst = vec![0u8; size];
    let slots = (REGION / stride).max(1);
    let (mut reps, mut slot) = (0u64, 0usize);
    let start = Instant::now();
    while start.elapsed() < time {
        for _ in 0..64 {
            let at = slot * stride;
            dst.copy_from_slice(std::hint::black_box(&src[at..at + size]));
            std::hint::black_box(&mut dst);
            slot = (slot + 1) % slots;
        }
        reps += 64;
    }
    (reps * size as u64 * 8) as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// Where messages were lost, by place: every nonzero loss counter the parties and the
/// server reported.
pub(crate) fn losses(parties: &[Finished]) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let mut add = |k: String, v: u64| {
        if v != 0 {
            *out.entry(k).or_insert(0) += v;
        }
    };
    for p in parties {
        let Some(v) = p.json() else { continue };
        if let Some(lost) = v["lost"].as_object() {
            for (k, n) in lost {
                add(k.clone(), n.as_u64().unwrap_or(0));
            }
        }
        // `shmnet serve` (server, ipc) and the inline worker: the driver's and the stack's.
        let drv = if v["driver"]["driver"].is_object() {
            &v["driver"]["driver"]
        } else {
            &v["driver"]
        };
        add(
            "driver: no buffer (frames)".into(),
            drv["rx_no_buffer"].as_u64().unwrap_or(0),
        );
        add(
            "driver: transmit refused (frames)".into(),
            drv["tx_errors"].as_u64().unwrap_or(0),
        );
        add(
            "driver: IN queue full (frames)".into(),
            v["driver"]["in_queue_full"].as_u64().unwrap_or(0),
        );
        add(
            "server: OUT queue full (frames)".into(),
            v["out_queue_full"].as_u64().unwrap_or(0),
        );
        add(
            "ipc: socket full (frames)".into(),
            v["ipc_drops"].as_u64().unwrap_or(0),
        );
        if let Some(stack) = v["stack"].as_object() {
            let drops = shmnet_stack::Stats::default().fields();
            let first = drops.iter().position(|(n, _)| *n == "runt").unwrap_or(0);
            for (name, _) in &drops[first..] {
                // Eviction and timeouts of partial datagrams follow a lost fragment counted
                // where it was lost; counting them too would count one message twice.
                if *name == "reasm_timeout"
                    || *name == "reasm_table_full"
                    || *name == "reasm_evicted_budget"
                    || *name == "reasm_evicted_source"
                    || *name == "reasm_expired_pressure"
                {
                    continue;
                }
                add(format!("stack: {name}"), stack[*name].as_u64().unwrap_or(0));
            }
        }
        if let Some(apps) = v["apps"].as_array() {
            for a in apps {
                add(
                    "server: send refused".into(),
                    a["counters"]["bad_sends"].as_u64().unwrap_or(0),
                );
            }
        }
    }
    out
}
