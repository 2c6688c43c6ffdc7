//! Seed 002's comparison of structures on this machine: `shmnet ttcp` (streaming, one
//! direction at a time) and `shmnet rr` (request–response).
//!
//! A **cell** is one structure × one workload. Its parties are separate processes, started
//! by the harness from this same program (`shmnet serve`, and the hidden `shmnet worker`),
//! agreeing through a [`Scoreboard`] on when to start and stop, on the sender's window, and on
//! counts. The harness only watches the board (a page it reads every millisecond) and, when
//! the run is over, reaps every party with `wait4`: CPU time and context switches come from
//! the kernel's accounting of each process, not from anything a party reports.
//!
//! | structure | parties |
//! |---|---|
//! | `kernel` | Linux UDP sockets over loopback: a sender process and a receiver process |
//! | `ipc` | `shmnet serve --structure ipc` (server, softnic as its thread, frames and datagrams copied through Unix sockets) and an application process (rr: two, the echo and the requester) |
//! | `server` | `shmnet serve --structure server` (server process + softnic driver process, shared windows) and an application process (rr: two) |
//! | `inline` | one process: softnic, the stack and the application (rr: the echo and the requester) in one loop |
//!
//! In ttcp the shmnet structures' wire is `softnic`: it "receives" by writing frames into
//! buffers (the DMA's cost, paid by the driver party) and "transmits" by reading each frame's
//! header and freeing it. In rr it is a loopback softnic, as the kernel's is `lo`: every
//! frame transmitted comes back as received, so the requester is an application like the
//! echo, and every structure runs its stack twice per direction (see [`rr`]).

use shmnet_io::scoreboard::Scoreboard;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod party;
mod requester;
pub mod rr;
pub mod ttcp;
pub mod worker;

use party::{Finished, Party};

/// How the parties are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Structure {
    /// Linux UDP over loopback, two processes.
    Kernel,
    /// shmnet, every frame and datagram copied through Unix sockets (seed 002's message-based
    /// device interface).
    Ipc,
    /// shmnet, driver, server and application sharing windows (seed 002's shared-memory
    /// queues).
    Server,
    /// shmnet, driver, stack and application in one thread.
    Inline,
}

impl Structure {
    /// Every structure, in the order tables list them.
    pub const ALL: [Structure; 4] = [
        Structure::Kernel,
        Structure::Ipc,
        Structure::Server,
        Structure::Inline,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Ipc => "ipc",
            Self::Server => "server",
            Self::Inline => "inline",
        }
    }
}

impl std::str::FromStr for Structure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown structure {s:?}: use kernel, ipc, server or inline"))
    }
}

/// What every cell of a run shares.
#[derive(Clone, Debug)]
pub struct Launch {
    /// This program (the harness starts its parties from it).
    pub exe: PathBuf,
    /// UDP checksums in the shmnet structures (the kernel computes none over loopback).
    pub checksum: bool,
}

/// The parties' part of a cell: what each structure starts, and how each starts it.
pub(crate) enum Roles {
    /// ttcp, messages from the wire to the application.
    Receive,
    /// ttcp, messages from the application to the wire.
    Transmit,
    /// rr with this many requests in flight.
    RequestResponse(u32),
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

fn arg(k: &str, v: impl std::fmt::Display) -> String {
    format!("--{k}={v}")
}

/// Starts one party; the cell's errors are still lines of text (the harness quotes what
/// its parties said).
fn spawn(name: &'static str, exe: &std::path::Path, args: &[String]) -> Result<Party, String> {
    Party::spawn(name, exe, args).map_err(|e| e.to_string())
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
) -> Result<Running, String> {
    let board_path = shmnet_io::scoreboard::temp_path(structure.name());
    let samples = if matches!(roles, Roles::RequestResponse(_)) {
        4 << 20
    } else {
        0
    };
    let board =
        Scoreboard::create(&board_path, window, limit, samples).map_err(|e| e.to_string())?;
    let mut run = Running {
        board,
        board_path: board_path.clone(),
        socket: None,
        parties: Vec::new(),
    };
    let b = arg("board", board_path.display());
    let exe = &launch.exe;
    let worker = |job: &str, extra: Vec<String>| {
        let mut v = vec!["worker".to_string(), job.to_string(), b.clone()];
        v.extend(extra);
        v
    };
    let ready_wanted = match structure {
        Structure::Kernel => {
            let (first, second) = match roles {
                Roles::RequestResponse(n) => (
                    worker("kernel-echo", vec![]),
                    worker("kernel-rr", vec![arg("size", size), arg("outstanding", n)]),
                ),
                _ => (
                    worker("kernel-recv", vec![]),
                    worker("kernel-send", vec![arg("size", size)]),
                ),
            };
            run.parties.push(spawn("receiver", exe, &first)?);
            run.parties.push(spawn("sender", exe, &second)?);
            2
        }
        Structure::Inline => {
            let job = match roles {
                Roles::Receive => "rx".to_string(),
                Roles::Transmit => "tx".to_string(),
                Roles::RequestResponse(n) => format!("rr:{n}"),
            };
            let mut extra = vec![
                arg("job-kind", job),
                arg("size", size),
                arg("rx-queue", rx_queue),
            ];
            if launch.checksum {
                extra.push("--checksum".into());
            }
            run.parties
                .push(spawn("inline", exe, &worker("inline", extra))?);
            1
        }
        Structure::Server | Structure::Ipc => {
            let socket = board_path.with_extension("sock");
            run.socket = Some(socket.clone());
            // The applications, in the order they start: rr's echo binds before its
            // requester.
            let (role, apps) = match roles {
                Roles::Receive => ("send", vec![("app", worker("shm-recv", vec![]))]),
                Roles::Transmit => (
                    "sink",
                    vec![("app", worker("shm-send", vec![arg("size", size)]))],
                ),
                Roles::RequestResponse(n) => (
                    "loopback",
                    vec![
                        ("app", worker("shm-echo", vec![])),
                        (
                            "requester",
                            worker("shm-rr", vec![arg("size", size), arg("outstanding", n)]),
                        ),
                    ],
                ),
            };
            let mut serve = vec![
                "serve".to_string(),
                arg("structure", structure.name()),
                arg("socket", socket.display()),
                arg("ip", format!("{}/24", worker::SERVER_IP)),
                b.replace("--board", "--softnic-board"),
                arg("softnic-role", role),
                arg("softnic-size", size),
                arg("softnic-port", worker::APP_PORT),
                arg("rx-queue", rx_queue),
                "--json".into(),
            ];
            if !launch.checksum {
                serve.push("--no-checksum".into());
            }
            run.parties.push(spawn("serve", exe, &serve)?);
            if let Err(e) = wait_until(Duration::from_secs(15), &run, || socket.exists()) {
                return Err(run.abort(e));
            }
            let wanted = apps.len() as u64;
            for (name, mut app) in apps {
                app.push(arg("socket", socket.display()));
                run.parties.push(spawn(name, exe, &app)?);
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
    fn abort(mut self, why: String) -> String {
        self.board.set_quit();
        let said: Vec<String> = std::mem::take(&mut self.parties)
            .into_iter()
            .map(|p| p.finish(Duration::from_secs(5)))
            .filter(|f| f.code != Some(0))
            .map(|f| f.failure())
            .collect();
        format!("{why}; {}", said.join("; "))
    }
}

/// Waits for `cond`, failing if a party dies or `patience` runs out.
fn wait_until(
    patience: Duration,
    run: &Running,
    mut cond: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + patience;
    while !cond() {
        if let Some(p) = run.parties.iter().find(|p| p.has_exited()) {
            return Err(format!("{} exited before the run started", p.name));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the parties were not ready after {} s",
                patience.as_secs()
            ));
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
) -> Result<Outcome, String> {
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
        return Err(f.unwrap_or_else(|| format!("{name} exited during the run")));
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
                if *name == "reasm_timeout" || *name == "reasm_table_full" {
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
