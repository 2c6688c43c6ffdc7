//! The lab's transfers across the veth pair: ftp and ttcp.
//!
//! - **ftp**: "a unix kernel from disk on one machine to /dev/null on the other ... six
//!   times in each direction". The file is written once into the output directory (and
//!   removed at the end).
//! - **ttcp** transmit and receive apart, as between the seed's two machines: the measured
//!   side writes (or reads) the stream in messages of the seed's sizes (ttcp's `-l`: 10 B,
//!   1 KB, 8 KB), from a file read in large blocks so the file system stays out of it.
//!
//! The measured side moves the bytes with `shmnet app send-file` and `recv-file`
//! (`--write-size`/`--read-size` for ttcp) — over the kernel's TCP with `--kernel`, else
//! through the shmnet server under test — and the peer is Debian's `nc` on the kernel,
//! writing to /dev/null or reading the file. The figure is the measured program's own
//! report (bytes ÷ seconds from the connection to the end of the stream), so every row is
//! timed by one clock the same way.

use super::bed::{Bed, MEASURED_IFACE, MEASURED_IP, PEER_IP, PREFIX};
use super::running::{RunError, Running};
use super::{Bench, Collected, Cpus, REPETITIONS, ServersOptions};
use crate::netbench::CellError;
use crate::netbench::Structure;
use crate::netbench::party::{Finished, Party, PartyError, PartySpec};
use shmnet_io::spec::{DriverSpec, ServeSpec};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A file the transfers read, on disk.
pub(super) struct TheFile {
    pub path: PathBuf,
    pub bytes: u64,
}

/// The files: ftp's, and one per ttcp size (the 8 KB one is ftp's).
pub(super) struct Files {
    /// ftp's: the seed's "unix kernel" was a few MB; this is enough for a transfer to last
    /// well beyond its connection's set-up at veth speeds.
    pub ftp: TheFile,
    /// ttcp's, by message size: sized so that every structure's transfer lasts a fraction
    /// of a second or more.
    pub ttcp: Vec<(usize, TheFile)>,
}

impl Files {
    /// Writes them into `o.out`.
    pub fn write(o: &ServersOptions) -> std::io::Result<Files> {
        let mib = |quick: usize, full: usize| if o.quick { quick << 20 } else { full << 20 };
        let ftp_bytes = mib(16, 128);
        let ftp = the_file(o, "ftp", ftp_bytes)?;
        let mut ttcp = Vec::new();
        for size in super::ttcp::SIZES {
            let bytes = match size {
                0..=100 => mib(1, 4),
                101..=4096 => mib(8, 32),
                _ => ftp_bytes,
            };
            let f = if bytes == ftp_bytes {
                TheFile {
                    path: ftp.path.clone(),
                    bytes: ftp.bytes,
                }
            } else {
                the_file(o, &format!("ttcp-{size}"), bytes)?
            };
            ttcp.push((size, f));
        }
        Ok(Files { ftp, ttcp })
    }

    /// Removes them.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.ftp.path);
        for (_, f) in &self.ttcp {
            let _ = std::fs::remove_file(&f.path);
        }
    }
}

/// Writes `bytes` pseudo-random bytes (so no layer can compress them) to `o.out/NAME.bin`.
fn the_file(o: &ServersOptions, name: &str, bytes: usize) -> std::io::Result<TheFile> {
    let path = o.out.join(format!("{name}.bin"));
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut data = vec![0u8; bytes];
    for chunk in data.chunks_mut(8) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        chunk.copy_from_slice(&rng.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&path, &data)?;
    Ok(TheFile {
        path,
        bytes: bytes as u64,
    })
}

/// Why a transfer (or starting the side under test) failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum TransferError {
    /// The bed.
    #[error(transparent)]
    Bed(#[from] super::bed::BedError),
    /// A program failed or did not finish.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The file could not be opened.
    #[error("opening {path}: {source}")]
    File {
        /// Which.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server could not be started.
    #[error("starting shmnet serve on {MEASURED_IFACE}: {0}")]
    ServerStart(#[from] PartyError),
    /// The server exited (at start, or at the end when asked to stop).
    #[error("shmnet serve on {MEASURED_IFACE}: {0}")]
    ServerFailed(CellError),
    /// The server did not make its control socket in time.
    #[error("shmnet serve on {MEASURED_IFACE} made no control socket within {} s", PATIENCE.as_secs())]
    ServerNotUp,
    /// The peer's `nc` did not listen.
    #[error("nc -l did not listen in the peer namespace within {} s", PATIENCE.as_secs())]
    PeerNotListening,
    /// The measured program's report could not be read.
    #[error("{what}'s report {said:?}: not the JSON expected")]
    Report {
        /// Which.
        what: String,
        /// What it printed.
        said: String,
    },
}

/// How long a program may take to come up (a server to make its socket, a listener to
/// listen, a receiver to say its port): only a bound against a hang, as a busy machine is
/// slow, not broken.
pub(super) const PATIENCE: Duration = Duration::from_secs(60);

/// The structure under test on the measured side, running.
pub(super) struct Side {
    structure: Structure,
    /// The server (not for the kernel).
    server: Option<Party>,
    /// Its control socket.
    socket: PathBuf,
}

impl Side {
    /// Gives the kernel the address, or starts `shmnet serve` for `structure` on `v0` (from
    /// the calling thread, which must be in the measured namespace).
    pub fn start(
        o: &ServersOptions,
        bed: &Bed,
        structure: Structure,
    ) -> Result<Side, TransferError> {
        let socket = o.out.join(format!("serve-{}.sock", structure.name()));
        let Some((serve_structure, placement)) = structure.serve() else {
            bed.kernel_address(true)?;
            return Ok(Side {
                structure,
                server: None,
                socket,
            });
        };
        let _ = std::fs::remove_file(&socket);
        let spec = ServeSpec {
            structure: serve_structure,
            placement,
            sync: structure.sync(),
            driver: DriverSpec::AfPacket {
                iface: MEASURED_IFACE.into(),
                access: shmnet_io::spec::Access::Packet,
                give_up_after_s: 10.0,
                impair: None,
            },
            ip: MEASURED_IP,
            prefix: PREFIX,
            socket: socket.clone(),
            isolation: structure.isolation(),
            cache: crate::cacheinfo::geometry(),
            json: true,
            ..ServeSpec::default()
        };
        let party = Party::spawn("serve", &o.exe, &PartySpec::Serve(Box::new(spec)))?;
        let deadline = Instant::now() + PATIENCE;
        while !socket.exists() {
            if party.has_exited() {
                let f = party.finish(Duration::from_secs(5));
                return Err(TransferError::ServerFailed(f.failure()));
            }
            if Instant::now() > deadline {
                party.terminate();
                let _ = party.finish(Duration::from_secs(5));
                return Err(TransferError::ServerNotUp);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Side {
            structure,
            server: Some(party),
            socket,
        })
    }

    /// The structure.
    pub fn structure(&self) -> Structure {
        self.structure
    }

    /// `shmnet ARGS…` as a program of this side: `--kernel` or `--socket` appended by the
    /// caller through [`Side::transport`].
    pub fn transport(&self, cmd: &mut Command) {
        match self.server {
            None => cmd.arg("--kernel"),
            Some(_) => cmd.arg("--socket").arg(&self.socket),
        };
    }

    /// The server's control socket (`None` for the kernel).
    pub fn socket(&self) -> Option<&Path> {
        self.server.as_ref().map(|_| self.socket.as_path())
    }

    /// Stops the server in order (or takes the kernel's address away).
    pub fn stop(mut self, bed: &Bed) -> Result<(), TransferError> {
        match self.stop_server() {
            None => Ok(bed.kernel_address(false)?),
            Some(f) if f.code == Some(0) => Ok(()),
            Some(f) => Err(TransferError::ServerFailed(f.failure())),
        }
    }

    /// Asks the server (if any) to stop, reaps it and removes its socket.
    fn stop_server(&mut self) -> Option<Finished> {
        let p = self.server.take()?;
        p.terminate();
        let f = p.finish(Duration::from_secs(10));
        let _ = std::fs::remove_file(&self.socket);
        Some(f)
    }
}

impl Drop for Side {
    /// A side dropped without [`Side::stop`] (a panic, an early return) still stops its
    /// server: nothing keeps `v0`.
    fn drop(&mut self) {
        let _ = self.stop_server();
    }
}

/// MB/s from the last line of `send-file`/`recv-file --json`.
fn rate(out: &str, what: &str) -> Result<f64, TransferError> {
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(last)
        .ok()
        .and_then(|v| v["mbyte_per_s"].as_f64())
        .ok_or_else(|| TransferError::Report {
            what: what.into(),
            said: last.into(),
        })
}

/// How long one transfer may take: generous (a busy machine is slow, not broken: this only
/// bounds a hang).
fn limit(file: &TheFile) -> Duration {
    Duration::from_secs(120 + 2 * file.bytes / (1 << 20))
}

/// The measured side sends the file to `nc -l PORT > /dev/null` in the peer namespace, in
/// writes of `message` bytes if given.
fn transmit(
    o: &ServersOptions,
    bed: &Bed,
    side: &Side,
    file: &TheFile,
    port: u16,
    message: Option<usize>,
) -> Result<f64, TransferError> {
    let port_s = port.to_string();
    let nc = Running::start(
        bed.peer("nc")
            .args(["-l", &port_s])
            .stdin(std::process::Stdio::null()),
        "nc -l in the peer namespace",
        false,
    )?;
    if !bed.wait_peer_listens(port, PATIENCE) {
        return Err(TransferError::PeerNotListening);
    }
    let what = format!("shmnet app send-file ({})", side.structure().name());
    let mut cmd = Command::new(&o.exe);
    cmd.args(["app", "send-file"])
        .arg(format!("{PEER_IP}:{port}"))
        .arg(&file.path)
        .arg("--json");
    if let Some(m) = message {
        cmd.arg("--write-size").arg(m.to_string());
    }
    side.transport(&mut cmd);
    let sent = Running::start(&mut cmd, &what, true)?.finish(limit(file));
    let nc_done = nc.finish(PATIENCE);
    let mb = rate(&sent?, &what)?;
    nc_done?;
    Ok(mb)
}

/// The peer's `nc -N` sends the file to `shmnet app recv-file 0 /dev/null` on the measured
/// side, which reads it in reads of `message` bytes if given.
fn receive(
    o: &ServersOptions,
    bed: &Bed,
    side: &Side,
    file: &TheFile,
    message: Option<usize>,
) -> Result<f64, TransferError> {
    let what = format!("shmnet app recv-file ({})", side.structure().name());
    let mut cmd = Command::new(&o.exe);
    // Its accept is bounded by --timeout; the stream by the limit on nc's side.
    cmd.args(["app", "recv-file", "0", "/dev/null", "--json", "--timeout"])
        .arg(PATIENCE.as_secs().to_string());
    if let Some(m) = message {
        cmd.arg("--read-size").arg(m.to_string());
    }
    side.transport(&mut cmd);
    let recv = Running::start(&mut cmd, &what, true)?;
    // "port N" on its own line once it listens.
    let line = recv.next_line(PATIENCE).unwrap_or_default();
    let Some(port) = line
        .trim()
        .strip_prefix("port ")
        .and_then(|p| p.parse::<u16>().ok())
    else {
        return Err(match recv.finish(Duration::from_secs(5)) {
            Err(e) => e.into(),
            Ok(_) => TransferError::Report {
                what,
                said: line.trim().into(),
            },
        });
    };
    let input = std::fs::File::open(&file.path).map_err(|source| TransferError::File {
        path: file.path.clone(),
        source,
    })?;
    let nc = Running::start(
        bed.peer("nc")
            .args(["-N", &MEASURED_IP.to_string(), &port.to_string()])
            .stdin(input),
        "nc -N in the peer namespace",
        false,
    )?;
    let nc_done = nc.finish(limit(file));
    // The receiver ends once the stream has; its last line is the report.
    let got = recv.finish(PATIENCE);
    nc_done?;
    rate(&got?, &what)
}

/// Six repetitions of ftp and of ttcp each way for the running `side`; ports count up
/// from 5001 (one per transmit: nothing waits on another's TIME-WAIT).
pub(super) fn repetitions(
    o: &ServersOptions,
    bed: &Bed,
    side: &Side,
    files: &Files,
    cpus: Cpus,
    c: &mut Collected,
    say: &mut dyn FnMut(&str),
) {
    let structure = side.structure();
    let mut port = 5001u16;
    let runs = std::iter::once((Bench::FtpTransmit, Bench::FtpReceive, None, &files.ftp)).chain(
        files
            .ttcp
            .iter()
            .map(|(size, f)| (Bench::TtcpTransmit, Bench::TtcpReceive, Some(*size), f)),
    );
    let runs: Vec<_> = runs.collect();
    for rep in 0..REPETITIONS {
        for &(tx, rx, size, file) in &runs {
            let what = |b: Bench| match size {
                Some(s) => format!("{} {s} B {}/{REPETITIONS}", b.name(), rep + 1),
                None => format!("{} {}/{REPETITIONS}", b.name(), rep + 1),
            };
            say(&what(tx));
            let before = bed.wire();
            let sent = transmit(o, bed, side, file, port, size);
            port = port.wrapping_add(1).max(5001);
            c.at((tx, cpus, size, structure))
                .add(sent.map(|v| vec![v]), before, bed.wire());
            say(&what(rx));
            let before = bed.wire();
            let got = receive(o, bed, side, file, size);
            c.at((rx, cpus, size, structure))
                .add(got.map(|v| vec![v]), before, bed.wire());
        }
    }
}
