//! The server structure: `shmnet serve --structure server --placement thread` (the protocol
//! server, softnic as its driver thread; started from a typed [`ServeSpec`] through the hidden
//! `shmnet party` command, not a command line) in a process of its own, the application — with the
//! probe — in this one, attached over the control socket and reading the buffers where the
//! driver put them. `--cores same` puts both processes on one CPU (they take turns: the
//! seed's scheduling points); `split` gives the server the other CPU.
//!
//! `server-regions` isolates the application (`--isolation regions`): the server copies
//! each message into a buffer the application posted, so the copy seed 000 times happens in
//! the server's process. The probe runs there ([`ServeSpec::copy_probe`]), the application
//! reads each message in place (and runs the synthetic load over it), and when the run is
//! over the server is stopped in order and its probe read back.

use super::{AppSide, Messages, RunError, Settings};
use super::{Structure, probe::Probe};
use crate::calibrate::Pinned;
use crate::netbench::{PARTY_COMMAND, PartySpec};
use shmnet_io::client::{Client, ClientError};
use shmnet_io::server::Placement;
use shmnet_io::spec::{
    CopyProbeSpec, DriverSpec, Isolation, ServeSpec, ServeStructure, SoftnicSpec,
};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The port softnic sends to.
const PORT: u16 = 5001;

/// The server process; killed and reaped, its socket removed, whatever happens.
struct ServerProcess {
    child: Child,
    socket: PathBuf,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(probe_path(&self.socket));
    }
}

impl ServerProcess {
    /// Stops the server in order (SIGTERM; it writes its probe as it exits) and reads the
    /// probe it wrote.
    fn stop_and_read_probe(&mut self) -> Result<Probe, RunError> {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                return Err(RunError::Setup(
                    "the server did not stop within 20 s of SIGTERM".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let path = probe_path(&self.socket);
        let read = std::fs::read(&path);
        let _ = std::fs::remove_file(&path);
        let bytes = read.map_err(|e| {
            // Why the server wrote nothing is in what it said as it exited.
            let why = self.exited().unwrap_or_default();
            RunError::Setup(format!(
                "reading the server's probe {}: {e} {why}",
                path.display()
            ))
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| RunError::Setup(format!("the server's probe {}: {e}", path.display())))
    }

    /// What it said on standard error, if it has exited.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(e) = self.child.stderr.as_mut() {
                    let _ = e.read_to_string(&mut err);
                }
                Some(format!("the server exited ({status}): {}", err.trim()))
            }
            _ => None,
        }
    }
}

/// Where the server writes its probe (`server-regions`).
fn probe_path(socket: &Path) -> PathBuf {
    socket.with_extension("probe.json")
}

/// What the server process runs.
fn serve_spec(s: &Settings, socket: &Path) -> ServeSpec {
    let isolated = s.structure == Structure::ServerRegions;
    ServeSpec {
        structure: ServeStructure::Server,
        placement: Placement::Thread,
        driver: DriverSpec::Softnic(SoftnicSpec {
            size: s.size,
            count: s.messages,
            gap_us: s.gap_us,
            // An independent sender, as in the inline structure (run_inline.rs).
            schedule: shmnet_io::driver::softnic::Schedule::Fixed,
            port: PORT,
            dma: s.dma,
            ..SoftnicSpec::default()
        }),
        rx_queue: s.queue,
        page: s.pages,
        alloc: Some(s.alloc),
        layout: s.layout,
        socket: socket.to_path_buf(),
        checksum: s.checksum,
        // `server`: the lab times the application's copy out of the driver's buffers (seed
        // 000). `server-regions`: the server's copy into the application's buffers.
        isolation: if isolated {
            Isolation::Regions
        } else {
            Isolation::Shared
        },
        copy_probe: isolated.then(|| CopyProbeSpec {
            capacity: s.messages as usize * super::fragments(s.size),
            tlb_force: s.tlb_force,
            out: probe_path(socket),
        }),
        ..ServeSpec::default()
    }
}

pub(super) fn run(
    s: &Settings,
    app: &mut AppSide,
    exe: &Path,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<Messages, RunError> {
    let socket = std::env::temp_dir().join(format!(
        "shmnet-residency-{}-{}.sock",
        std::process::id(),
        fastrand::u32(..)
    ));
    // The server inherits the CPU this thread is pinned to when it starts it.
    let _restore = Pinned::here(Some(s.server_cpu()));
    let spec = serde_json::to_vec(&PartySpec::Serve(Box::new(serve_spec(s, &socket))))
        .map_err(|e| RunError::Setup(format!("writing the server's spec: {e}")))?;
    let mut child = Command::new(exe)
        .arg(PARTY_COMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "0")
        .spawn()
        .map_err(|e| RunError::Setup(format!("starting {} serve: {e}", exe.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A few hundred bytes: the pipe holds them whole. If the server died already, its
        // exit and what it said are reported below.
        let _ = stdin.write_all(&spec);
    }
    let mut server = ServerProcess {
        child,
        socket: socket.clone(),
    };
    crate::tsc::pin_to(s.cpu);

    progress(0.0, "waiting for the server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let client = loop {
        match Client::connect(&socket) {
            Ok(c) => break c,
            Err(e) => {
                if let Some(why) = server.exited() {
                    return Err(RunError::Setup(why));
                }
                if Instant::now() > deadline {
                    return Err(RunError::Setup(format!(
                        "the server did not open {} within 20 s: {e}",
                        socket.display()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let sock = client
        .udp_bind(PORT)
        .map_err(|e| RunError::Setup(format!("binding UDP port {PORT}: {e}")))?;
    let mut buf = vec![0u8; 65_536];
    let isolated = s.structure == Structure::ServerRegions;
    let per_message = super::fragments(s.size) as u64;
    let accounted = |stats: &shmnet_io::server::ServerStats, received: u64| {
        received + stats.stack.queue_full >= s.messages
    };
    let mut last_report = Instant::now();
    let mut last_message = Instant::now();
    let mut received = 0u64;
    while received < s.messages {
        let got = if isolated {
            // The server's probe timed the copy; the message is read where it lies.
            sock.recv_in_place_timeout(Duration::from_millis(200), |d| {
                app.message_done(d.contiguous().unwrap_or_default())
            })
        } else {
            sock.recv_with_hook(&mut buf, Duration::from_millis(200), app)
                .map(|(n, _)| app.message_done(&buf[..n]))
        };
        match got {
            Ok(()) => {
                received += 1;
                last_message = Instant::now();
            }
            Err(ClientError::TimedOut) => {
                // Nothing for a while: stop once the server has accounted for every message
                // (the rest were dropped at its full socket queue), or after ten quiet
                // seconds (then the shortfall shows as lost elsewhere).
                let stats = shmnet_io::server::query_stats(&socket).unwrap_or_default();
                let patience =
                    Duration::from_secs(10).max(Duration::from_secs_f64(s.gap_us * 20.0 / 1e6));
                if accounted(&stats, received) || last_message.elapsed() > patience {
                    break;
                }
            }
            Err(e) => {
                let why = server.exited().unwrap_or_default();
                return Err(RunError::Setup(format!("receiving: {e} {why}")));
            }
        }
        if last_report.elapsed() > Duration::from_millis(100) {
            progress(
                received as f64 / s.messages as f64,
                &format!("{received} of {} messages", s.messages),
            );
            last_report = Instant::now();
        }
    }
    // The driver publishes its counters when it goes idle (or every 64 rounds), so a query
    // made just after the last message arrived can see an older count than what arrived.
    // Read until the counts cover every message received (or they stop moving: 2 s, a bound
    // no idle driver needs, since it publishes within one 10 ms idle wait).
    let read_counts = || -> Result<(u64, u64), RunError> {
        let stats = shmnet_io::server::query_stats(&socket)
            .map_err(|e| RunError::Setup(format!("reading the server's counters: {e}")))?;
        let frames = stats.driver.driver.rx_frames;
        let queue_full = stats.stack.queue_full;
        Ok(((frames / per_message).min(s.messages), queue_full))
    };
    let settle_by = Instant::now() + Duration::from_secs(2);
    let (sent, queue_full) = loop {
        let (sent, queue_full) = read_counts()?;
        if sent >= received + queue_full || Instant::now() > settle_by {
            break (sent, queue_full);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drop(sock);
    drop(client);
    if isolated {
        app.probe = server.stop_and_read_probe()?;
    }
    drop(server);
    Ok(Messages {
        sent,
        received,
        queue_full,
        lost_elsewhere: sent.saturating_sub(received + queue_full),
        frames_during_load: 0,
    })
}
