//! `shmnet bench tcp-setup`: how many TCP connections per second one listener and one
//! connector set up and tear down (`connect` + `accept` + `close` on both sides), through
//! shmnet's `server` structure and through the Linux kernel, in the same run.
//!
//! - **kernel**: a listener thread and a connector thread over 127.0.0.1.
//! - **server** (and **server-shared**): a protocol server stepped on a thread of this
//!   process over a loopback softnic (every frame it sends comes back, as `lo` does for the
//!   kernel: both run both ends' protocol work), and two applications on threads of their
//!   own — the listener and the connector — attached through its control socket, under
//!   `--isolation regions` (the default) and `--isolation shared`.
//!
//! Each connection: the connector connects and waits until established, the listener accepts
//! it, reads one byte and closes; the connector reads the end of the stream and closes. Both
//! sides close in order (no resets), so both leave TIME-WAIT behind as real programs do: the
//! count stays under the ephemeral port range.

use shmnet_chan::PageSize;
use shmnet_io::client::Client;
use shmnet_io::driver::softnic::{Softnic, SoftnicConfig};
use shmnet_io::inline::ServeConfig;
use shmnet_io::server::{Placement, Server, ServerOptions};
use shmnet_io::spec::{Isolation, OnMiss};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One structure's result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SetupRow {
    /// `kernel`, `server` or `server-shared`.
    pub structure: String,
    /// Connections set up and torn down.
    pub connections: u32,
    /// Wall time (s).
    pub seconds: f64,
    /// Connections per second.
    pub per_s: f64,
    /// Why the cell failed, if it did (its figures are then zero).
    pub error: Option<String>,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SetupReport {
    /// One row per structure, the kernel first.
    pub rows: Vec<SetupRow>,
}

/// Why a cell failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A socket call of the kernel's failed.
    #[error("kernel TCP: {0}")]
    Kernel(#[from] std::io::Error),
    /// The shmnet server did not start.
    #[error("starting the server: {0}")]
    Server(#[from] shmnet_io::server::ServerError),
    /// A client call failed.
    #[error("client: {0}")]
    Client(#[from] shmnet_io::client::ClientError),
    /// The softnic could not be made.
    #[error("softnic: {0}")]
    Softnic(String),
    /// The listener did not read the connector's byte.
    #[error("the listener did not read the byte the connector wrote")]
    WrongByte,
    /// A party's thread panicked.
    #[error("a party's thread panicked")]
    Panicked,
}

/// Connections per cell: `quick` or a full run.
pub fn connections(quick: bool) -> u32 {
    if quick { 300 } else { 3_000 }
}

/// A cell: sets up and tears down this many connections, returning the time it took.
type Cell = fn(u32) -> Result<Duration, SetupError>;

/// Runs every cell.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> SetupReport {
    let n = connections(quick);
    let mut rows = Vec::new();
    let cells: [(&str, Cell); 3] = [
        ("kernel", kernel),
        ("server", |n| shmnet(n, Isolation::Regions)),
        ("server-shared", |n| shmnet(n, Isolation::Shared)),
    ];
    for (name, cell) in cells {
        progress(&format!("tcp-setup: {name}, {n} connections"));
        rows.push(match cell(n) {
            Ok(d) => SetupRow {
                structure: name.into(),
                connections: n,
                seconds: d.as_secs_f64(),
                per_s: f64::from(n) / d.as_secs_f64().max(1e-9),
                error: None,
            },
            Err(e) => SetupRow {
                structure: name.into(),
                connections: 0,
                seconds: 0.0,
                per_s: 0.0,
                error: Some(e.to_string()),
            },
        });
    }
    SetupReport { rows }
}

fn kernel(n: u32) -> Result<Duration, SetupError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let acceptor = std::thread::spawn(move || -> std::io::Result<()> {
        for _ in 0..n {
            let (mut s, _) = l.accept()?;
            let mut b = [0u8; 1];
            s.read_exact(&mut b)?;
            drop(s);
        }
        Ok(())
    });
    let start = Instant::now();
    for _ in 0..n {
        let mut s = std::net::TcpStream::connect(addr)?;
        s.write_all(b"x")?;
        let mut b = [0u8; 1];
        // The listener's close: the end of the stream.
        while s.read(&mut b)? != 0 {}
    }
    let d = start.elapsed();
    acceptor.join().map_err(|_| SetupError::Panicked)??;
    Ok(d)
}

/// The server's address on its loopback softnic.
const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

fn shmnet(n: u32, isolation: Isolation) -> Result<Duration, SetupError> {
    let path = std::env::temp_dir().join(format!(
        "shmnet-tcp-setup-{}-{isolation:?}.sock",
        std::process::id()
    ));
    let nic = Softnic::new(SoftnicConfig {
        loopback: true,
        ..SoftnicConfig::default()
    })
    .map_err(|e| SetupError::Softnic(e.to_string()))?;
    let mut server = Server::start(
        nic,
        &ServerOptions {
            serve: ServeConfig {
                ip: US,
                loopback: true,
                ..ServeConfig::default()
            },
            socket: path.clone(),
            page: PageSize::Small,
            ipc: false,
            isolation,
            on_miss: OnMiss::Buffer,
            sync: Default::default(),
            placement: Placement::Polled,
            limits: Default::default(),
        },
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let stepper = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            if server.step() == 0 {
                server.idle(Duration::from_millis(1));
            }
        }
    });
    let result = shmnet_cell(&path, n);
    stop.store(true, Ordering::Relaxed);
    let _ = stepper.join();
    result
}

fn shmnet_cell(path: &std::path::Path, n: u32) -> Result<Duration, SetupError> {
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    let acceptor = std::thread::spawn(move || -> Result<(), SetupError> {
        let c = Client::connect(&p)?;
        let l = c.tcp_listen(0, 128)?;
        let _ = port_tx.send(l.port());
        for _ in 0..n {
            let mut s = l.accept()?;
            let mut b = [0u8; 1];
            if s.read(&mut b)? != 1 || b[0] != b'x' {
                return Err(SetupError::WrongByte);
            }
            s.close()?;
        }
        Ok(())
    });
    let port = port_rx.recv().map_err(|_| SetupError::Panicked)?;
    let c = Client::connect(path)?;
    let to = SocketAddrV4::new(US, port);
    let start = Instant::now();
    for _ in 0..n {
        let mut s = c.tcp_connect(to, Duration::from_secs(10))?;
        s.write_all(b"x")?;
        let mut b = [0u8; 1];
        while s.read(&mut b)? != 0 {}
        s.close()?;
    }
    let d = start.elapsed();
    acceptor.join().map_err(|_| SetupError::Panicked)??;
    Ok(d)
}

impl std::fmt::Display for SetupReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "TCP connection setup and teardown (connect + accept + close, both ends closing in order)"
        )?;
        let kernel = self
            .rows
            .iter()
            .find(|r| r.structure == "kernel" && r.error.is_none())
            .map(|r| r.per_s);
        writeln!(
            f,
            "{:<14} {:>12} {:>10} {:>14} {:>10}",
            "structure", "connections", "seconds", "connections/s", "÷ kernel"
        )?;
        for r in &self.rows {
            match &r.error {
                Some(e) => writeln!(f, "{:<14} failed: {e}", r.structure)?,
                None => writeln!(
                    f,
                    "{:<14} {:>12} {:>10.3} {:>14.0} {:>10}",
                    r.structure,
                    r.connections,
                    r.seconds,
                    r.per_s,
                    kernel.map_or("-".into(), |k| format!("{:.2}", r.per_s / k))
                )?,
            }
        }
        Ok(())
    }
}
