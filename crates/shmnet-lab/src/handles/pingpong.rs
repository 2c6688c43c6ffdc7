//! Seed 004's Fig. 4 on shmnet: ping-pong latency and bandwidth against the lookup-cache
//! miss ratio, drop-on-miss beside buffer-on-miss.
//!
//! A protocol server runs in this process over a loopback softnic with `--isolation
//! regions` and the given miss policy. An echo application (a thread) sends every datagram
//! back; the pinging application registers a region of [`COLD_REGION`] bytes (sparse) and
//! sends each ping with `send_from` from it — from a buffer in its first line (hot, always
//! cached) or, for a chosen fraction of pings, from the next of its many other lines in
//! turn: there are four times as many as the cache holds, so each comes back evicted, and
//! every such ping misses. The miss ratio is controlled by choosing buffers, as the seed
//! did, and measured from the server's counters for the pinging application.
//!
//! Under `buffer` the server holds a send that missed until the miss thread has served its
//! line; under `drop` the send completes as a miss and the client sends it again (waiting
//! 20 µs first, doubling), so the figure shows what each policy costs a round trip.

use super::live::{Running, US};
use shmnet_chan::handles::{CacheGeometry, Perms, Region};
use shmnet_io::client::Client;
use shmnet_io::spec::OnMiss;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bytes of the pinging application's region: four times the lines the server's cache
/// (seed 004's C16K L64 A4) holds, so a line comes back evicted.
pub const COLD_REGION: u64 = 4 * (CacheGeometry::SEED_BEST.entries as u64) * 4096;

/// One cell: a policy, a size, a fraction of pings sent from cold buffers.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PingPongRow {
    /// `buffer` or `drop`.
    pub on_miss: OnMiss,
    /// Bytes of each ping (and pong).
    pub size: usize,
    /// The fraction of pings sent from a cold buffer.
    pub cold_fraction: f64,
    /// Lookup misses per ping sent, from the server's counters for the pinging application
    /// (a ping from a cold buffer misses once; under `drop`, once more for each try made
    /// before its line arrived).
    pub misses_per_ping: f64,
    /// Round trips timed.
    pub round_trips: u64,
    /// Median round trip, µs.
    pub rtt_p50_us: f64,
    /// 99th percentile, µs.
    pub rtt_p99_us: f64,
    /// Mean round trip, µs.
    pub rtt_mean_us: f64,
    /// Ping-pong bandwidth, Mbit/s: a ping and a pong of `size` bytes per mean round trip.
    pub mbit_per_s: f64,
    /// Pings sent again after [`RETRANSMIT`] without a pong (drop-on-miss dropped the ping
    /// or the pong on a receive buffer's miss).
    pub retransmits: u64,
}

/// How long the pinger waits for a pong before it sends the ping again: many round trips
/// and several miss penalties.
pub const RETRANSMIT: Duration = Duration::from_millis(2);
/// Retransmissions of one ping before the cell fails.
const MAX_TRIES: u32 = 1000;

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum PingPongError {
    /// The server could not start.
    #[error(transparent)]
    Server(#[from] super::live::LiveError),
    /// A client call failed.
    #[error("{0}")]
    Client(#[from] shmnet_io::client::ClientError),
    /// The region could not be made.
    #[error("the region: {0}")]
    Region(#[from] shmnet_chan::handles::RegionError),
}

/// Runs every cell: both policies × `sizes` × `fractions`, `round_trips` each, calling
/// `progress` with each cell's name.
pub fn run(
    sizes: &[usize],
    fractions: &[f64],
    round_trips: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<PingPongRow>, PingPongError> {
    let mut rows = Vec::new();
    for on_miss in [OnMiss::Buffer, OnMiss::Drop] {
        let server = Running::start(&format!("pingpong-{on_miss:?}"), on_miss, None)?;
        let path = server.path.clone();
        // The echo application, on a thread of its own until the pinger goes.
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let quit = Arc::new(AtomicBool::new(false));
        let quit2 = quit.clone();
        let echo = std::thread::spawn(move || -> Result<(), PingPongError> {
            let c = Client::connect(&path)?;
            let s = c.udp_bind(0)?;
            let _ = port_tx.send(s.port());
            let mut buf = vec![0u8; 65_536];
            while !quit2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = s.recv_timeout(&mut buf, Duration::from_millis(20)) {
                    s.send_to(&buf[..n], from)?;
                }
            }
            Ok(())
        });
        let echo_port = port_rx
            .recv()
            .map_err(|_| shmnet_io::client::ClientError::ServerGone)?;
        let client = Client::connect(&server.path)?;
        let sock = client.udp_bind(0)?;
        let region = Region::create("shmnet-lab-pingpong", COLD_REGION)?;
        let id = client.register(&region, Perms::READ)?;
        let to = SocketAddrV4::new(US, echo_port);
        let line_bytes = u64::from(CacheGeometry::SEED_BEST.line) * 4096;
        let lines = COLD_REGION / line_bytes;
        let mut next_cold = 1u64;
        let mut buf = vec![0u8; 65_536];
        // Warm up: the libraries' own regions and the hot line come into the cache.
        region.write(8, &[0u8; 64])?;
        for _ in 0..64 {
            sock.send_from(&region, id, 8, 64, to)?;
            let _ = sock.recv_timeout(&mut buf, RETRANSMIT);
        }
        while sock.try_recv(&mut buf)?.is_some() {}
        for &size in sizes {
            let payload = vec![0xa5u8; size];
            for &frac in fractions {
                progress(&format!(
                    "ping-pong, {} on a miss, {size} B, {:.0} % cold",
                    if on_miss == OnMiss::Drop {
                        "drop"
                    } else {
                        "buffer"
                    },
                    100.0 * frac
                ));
                let before = shmnet_io::server::query_stats(&server.path)
                    .map_err(|e| shmnet_io::client::ClientError::Protocol(e.to_string()))?;
                let mut rtts = Vec::with_capacity(round_trips as usize);
                let mut retransmits = 0u64;
                // Cold pings spread evenly: ping k is cold when the running share of cold
                // ones falls below the fraction.
                let mut cold = 0u64;
                for k in 0..round_trips {
                    let off = if (cold as f64) < frac * (k + 1) as f64 {
                        cold += 1;
                        let line = next_cold;
                        next_cold = if next_cold + 1 >= lines {
                            1
                        } else {
                            next_cold + 1
                        };
                        line * line_bytes + 8
                    } else {
                        8
                    };
                    region.write(off, &payload)?;
                    let t = Instant::now();
                    // Under drop-on-miss a ping or its pong can be dropped on a receive
                    // buffer's miss: the pinger retransmits, as a transport would.
                    let mut tries = 0;
                    loop {
                        sock.send_from(&region, id, off, size, to)?;
                        match sock.recv_timeout(&mut buf, RETRANSMIT) {
                            Ok(_) => break,
                            Err(shmnet_io::client::ClientError::TimedOut) if tries < MAX_TRIES => {
                                tries += 1;
                                retransmits += 1;
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    rtts.push(t.elapsed().as_secs_f64() * 1e6);
                }
                let after = shmnet_io::server::query_stats(&server.path)
                    .map_err(|e| shmnet_io::client::ClientError::Protocol(e.to_string()))?;
                // The pinger is the application with a region besides the library's two.
                let pinger_misses = |s: &shmnet_io::server::ServerStats| {
                    s.apps
                        .iter()
                        .find(|a| a.regions == 3)
                        .map_or(0, |a| a.counters.send_misses)
                };
                let (m0, m1) = (pinger_misses(&before), pinger_misses(&after));
                rtts.sort_by(f64::total_cmp);
                let pct = |p: f64| rtts[((rtts.len() - 1) as f64 * p).round() as usize];
                let mean = rtts.iter().sum::<f64>() / rtts.len().max(1) as f64;
                rows.push(PingPongRow {
                    on_miss,
                    size,
                    cold_fraction: frac,
                    // Per ping, not per send: a ping sent again after a timeout (its line
                    // now warm) is still one ping. (Per send, one resend of a cold ping
                    // once put a cell of half cold pings at 0.4975 misses each.)
                    misses_per_ping: (m1 - m0) as f64 / round_trips.max(1) as f64,
                    round_trips,
                    rtt_p50_us: pct(0.5),
                    rtt_p99_us: pct(0.99),
                    rtt_mean_us: mean,
                    mbit_per_s: 2.0 * size as f64 * 8.0 / mean.max(1e-9),
                    retransmits,
                });
            }
        }
        quit.store(true, Ordering::Relaxed);
        drop(client);
        let _ = echo.join();
    }
    Ok(rows)
}
