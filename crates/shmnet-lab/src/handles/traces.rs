//! Table III on traces recorded from shmnet's own runs: a live server (`--isolation regions`)
//! records every handle page its data plane translates while applications run
//! [`OwnRun`]'s three workloads; each trace then goes through the 36 configurations like
//! the SPLASH-2-shaped patterns ([`super::sweep`]).
//!
//! - `shmnet-ttcp`: four pairs of applications, each sender streaming 1,000-byte datagrams
//!   to its receiver (through the client library's own send and receive regions);
//! - `shmnet-rr`: four pairs ping-ponging 64-byte datagrams;
//! - `shmnet-file`: one application sending a file-sized region of its own whole, 8 KiB at a
//!   time with `send_from`, to a receiver.

use super::live::{LiveError, Running, US};
use super::workloads::PageRef;
use shmnet_chan::handles::{Perms, Region};
use shmnet_io::client::{Client, ClientError};
use shmnet_io::spec::OnMiss;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The recorded workloads, by name.
pub const OWN_RUNS: [&str; 3] = ["shmnet-ttcp", "shmnet-rr", "shmnet-file"];

/// How much each run does.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct OwnRun {
    /// Datagrams each ttcp sender streams.
    pub stream: u64,
    /// Round trips of each rr pair.
    pub round_trips: u64,
    /// Bytes of the file sent.
    pub file_bytes: u64,
}

/// One recorded trace's size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TraceInfo {
    /// The workload.
    pub workload: String,
    /// Handle pages recorded.
    pub refs: usize,
    /// Distinct (application, page) pairs in them.
    pub distinct_pages: usize,
    /// Applications that made them.
    pub apps: usize,
    /// References that did not fit the recording (0 unless the run outgrew it).
    pub dropped: u64,
}

/// Why a run could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The server.
    #[error(transparent)]
    Live(#[from] LiveError),
    /// An application.
    #[error("an application: {0}")]
    Client(#[from] ClientError),
    /// A region.
    #[error("a region: {0}")]
    Region(#[from] shmnet_chan::handles::RegionError),
    /// An application thread panicked.
    #[error("an application thread failed")]
    Thread,
}

/// Records workload `name` (one of [`OWN_RUNS`]) of size `run`: its trace and its size.
pub fn record(name: &str, run: OwnRun) -> Result<(Vec<PageRef>, TraceInfo), TraceError> {
    let server = Running::start(&format!("trace-{name}"), OnMiss::Buffer, Some(4 << 20))?;
    match name {
        "shmnet-ttcp" => pairs(&server, 4, run.stream, 1_000, false)?,
        "shmnet-rr" => pairs(&server, 4, run.round_trips, 64, true)?,
        _ => file(&server, run.file_bytes)?,
    }
    let t = server.finish();
    let trace: Vec<PageRef> = t
        .refs
        .iter()
        .map(|r| PageRef {
            app: r.app,
            page: r.page,
            access: r.access,
        })
        .collect();
    let mut distinct: Vec<(u16, u64)> = trace.iter().map(|r| (r.app.0, r.page)).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut apps: Vec<u16> = trace.iter().map(|r| r.app.0).collect();
    apps.sort_unstable();
    apps.dedup();
    let info = TraceInfo {
        workload: name.to_string(),
        refs: trace.len(),
        distinct_pages: distinct.len(),
        apps: apps.len(),
        dropped: t.dropped,
    };
    Ok((trace, info))
}

/// `n` pairs: each sender sends `count` datagrams of `size` bytes to its receiver — in a
/// window of 64 (`ttcp`), or one at a time, each answered (`rr`).
fn pairs(
    server: &Running,
    n: usize,
    count: u64,
    size: usize,
    answer: bool,
) -> Result<(), TraceError> {
    let mut threads = Vec::new();
    for _ in 0..n {
        let path = server.path.clone();
        let received = Arc::new(AtomicU64::new(0));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let got = received.clone();
        threads.push(std::thread::spawn(move || -> Result<(), ClientError> {
            let c = Client::connect(&path)?;
            let s = c.udp_bind(0)?;
            let _ = port_tx.send(s.port());
            let mut buf = vec![0u8; 2048];
            for k in 1..=count {
                let (len, from) = s.recv_timeout(&mut buf, Duration::from_secs(30))?;
                got.store(k, Ordering::Release);
                if answer {
                    s.send_to(&buf[..len], from)?;
                }
            }
            Ok(())
        }));
        let port = port_rx.recv().map_err(|_| TraceError::Thread)?;
        let path = server.path.clone();
        threads.push(std::thread::spawn(move || -> Result<(), ClientError> {
            let c = Client::connect(&path)?;
            let s = c.udp_bind(0)?;
            let to = SocketAddrV4::new(US, port);
            let msg = vec![0x5a; size];
            let mut buf = vec![0u8; 2048];
            for k in 0..count {
                while k >= received.load(Ordering::Acquire) + 64 {
                    std::thread::yield_now();
                }
                s.send_to(&msg, to)?;
                if answer {
                    s.recv_timeout(&mut buf, Duration::from_secs(30))?;
                }
            }
            Ok(())
        }));
    }
    for t in threads {
        t.join().map_err(|_| TraceError::Thread)??;
    }
    Ok(())
}

/// One application sends a region of `bytes` whole, 8 KiB per datagram with `send_from`;
/// another receives it.
fn file(server: &Running, bytes: u64) -> Result<(), TraceError> {
    const CHUNK: u64 = 8192;
    let path = server.path.clone();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let chunks = bytes / CHUNK;
    let receiver = std::thread::spawn(move || -> Result<(), ClientError> {
        let c = Client::connect(&path)?;
        let s = c.udp_bind(0)?;
        let _ = port_tx.send(s.port());
        let mut buf = vec![0u8; 65_536];
        for _ in 0..chunks {
            s.recv_timeout(&mut buf, Duration::from_secs(30))?;
        }
        Ok(())
    });
    let port = port_rx.recv().map_err(|_| TraceError::Thread)?;
    let c = Client::connect(&server.path)?;
    let s = c.udp_bind(0)?;
    // The file from offset 8 (the library writes each chunk's destination in the 8 bytes
    // before it: over the end of the chunk already sent).
    let region = Region::create("shmnet-lab-file", chunks * CHUNK + 4096)?;
    let id = c.register(&region, Perms::READ)?;
    let to = SocketAddrV4::new(US, port);
    for k in 0..chunks {
        let off = k * CHUNK + 8;
        s.send_from(&region, id, off, CHUNK as usize, to)?;
    }
    receiver.join().map_err(|_| TraceError::Thread)??;
    Ok(())
}
