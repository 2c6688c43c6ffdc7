//! `shmnet bench multicast`: IPv4 multicast through the server against Linux's, the way
//! market-data users of OpenOnload and libvma measure it — Debian's `sockperf ping-pong`
//! to a group, answered to the group — with unicast beside it in the same run.
//!
//! Two namespaces joined by a veth pair (shmnet-lab's [`Bed`]); the peer runs
//! `sockperf ping-pong` (64 B, full round trips); the measured side is, cell by cell in
//! every round, Debian's `sockperf server` — on Linux's sockets, or unmodified under
//! `shmnet run` on `shmnet serve --structure server` (af_packet):
//!
//! | cell | to | the measured side |
//! |---|---|---|
//! | `kernel-unicast` | 10.96.0.1 | Linux |
//! | `kernel-multicast` | 239.96.0.1 | Linux, the group joined on its address |
//! | `server-unicast` | 10.96.0.1 | shmnet |
//! | `server-multicast` | 239.96.0.1 | shmnet, the group joined through the sockets library |
//!
//! In the multicast cells both ends join the group and sockperf's server answers to the
//! group, so every message each way is multicast. The ratios are each round's own.

use crate::sockperf::{self, Pingpong, path, spawn, wait_for};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use shmnet_lab::servers::bed::{Bed, MEASURED_IFACE, MEASURED_IP, PEER_IP, PREFIX};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The UDP port sockperf talks to.
const PORT: u16 = 11_111;
/// sockperf's message size.
const SIZE: usize = 64;
/// The group of the multicast cells.
const GROUP: &str = "239.96.0.1";

/// The cells, in the order each round runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cell {
    /// Linux, to its address.
    KernelUnicast,
    /// Linux, to a group.
    KernelMulticast,
    /// shmnet's server, to its address.
    ServerUnicast,
    /// shmnet's server, to a group.
    ServerMulticast,
}

impl Cell {
    const ALL: [Cell; 4] = [
        Cell::KernelUnicast,
        Cell::KernelMulticast,
        Cell::ServerUnicast,
        Cell::ServerMulticast,
    ];

    fn name(self) -> &'static str {
        match self {
            Cell::KernelUnicast => "kernel-unicast",
            Cell::KernelMulticast => "kernel-multicast",
            Cell::ServerUnicast => "server-unicast",
            Cell::ServerMulticast => "server-multicast",
        }
    }

    fn kernel(self) -> bool {
        matches!(self, Cell::KernelUnicast | Cell::KernelMulticast)
    }

    fn multicast(self) -> bool {
        matches!(self, Cell::KernelMulticast | Cell::ServerMulticast)
    }
}

/// A cell's figures: the median over the rounds of each.
#[derive(Clone, Debug, Serialize)]
pub struct CellFigures {
    /// Which.
    pub cell: Cell,
    /// Each figure's median over the rounds.
    #[serde(flatten)]
    pub figures: Pingpong,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct MulticastReport {
    /// The machine.
    pub machine: shmnet_lab::machine::Machine,
    /// Rounds (each runs every cell once).
    pub rounds: usize,
    /// Seconds sockperf runs per cell.
    pub seconds: u64,
    /// Message bytes.
    pub size: usize,
    /// The group.
    pub group: &'static str,
    /// The cells.
    pub cells: Vec<CellFigures>,
    /// Median over the rounds of each round's `server-multicast` p50 ÷ `kernel-multicast`.
    pub server_over_kernel_multicast_p50: f64,
    /// The same for unicast.
    pub server_over_kernel_unicast_p50: f64,
    /// Median over the rounds of each round's `server-multicast` p50 ÷ `server-unicast`:
    /// what multicast costs the server.
    pub server_multicast_over_unicast_p50: f64,
}

/// `shmnet bench multicast`'s options.
#[derive(clap::Args, Debug)]
pub struct MulticastArgs {
    /// One round of 1 s per cell (about 15 s) instead of three of 3 s.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The options naming the interface to join and send on, for an end at `ip`.
fn on_interface(ip: &str) -> [&str; 4] {
    ["--mc-rx-if", ip, "--mc-tx-if", ip]
}

/// Starts the measured side of `cell` in `dir`: parties stopped when dropped.
fn measured_side(bed: &Bed, cell: Cell, dir: &Path) -> Result<Vec<crate::running::Running>> {
    let ip = MEASURED_IP.to_string();
    let to = if cell.multicast() { GROUP } else { &ip };
    let port = PORT.to_string();
    let file = |suffix: &str| dir.join(format!("{}{suffix}", cell.name()));
    let mut parties = Vec::new();
    let mut responder: Command = if cell.kernel() {
        bed.measured("sockperf")
    } else {
        let sock = file(".sock");
        let cidr = format!("{MEASURED_IP}/{PREFIX}");
        let driver = format!("af_packet:{MEASURED_IFACE}");
        let mut serve = bed.measured(std::env::current_exe().context("finding this program")?);
        serve
            .args(["serve", "--structure", "server", "--driver", &driver])
            .args(["--ip", &cidr, "--socket", path(&sock)?]);
        let log = file("-server.log");
        parties.push(spawn(&mut serve, "the server", &log)?);
        wait_for(&sock, "the server", &log)?;
        let mut run = bed.measured(std::env::current_exe()?);
        run.args(["run", "--server", path(&sock)?, "--", "sockperf"]);
        run
    };
    responder.args(["server", "-i", to, "-p", &port]);
    if cell.multicast() {
        responder.args(on_interface(&ip));
    }
    parties.push(spawn(
        &mut responder,
        "sockperf server",
        &file("-sockperf.log"),
    )?);
    Ok(parties)
}

/// Runs the benchmark; `progress` is told each step.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<MulticastReport> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("shmnet bench multicast needs root (network namespaces, AF_PACKET)");
    }
    let (rounds, secs) = if quick { (1, 1) } else { (3, 3) };
    let bed = Bed::new().context("making the namespaces")?;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("shmnet-bench-multicast-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (measured, peer) = (MEASURED_IP.to_string(), PEER_IP.to_string());
    let mut got: Vec<Vec<Pingpong>> = vec![Vec::new(); Cell::ALL.len()];
    for r in 0..rounds {
        for (i, cell) in Cell::ALL.into_iter().enumerate() {
            progress(&format!("round {}/{rounds}: {}", r + 1, cell.name()));
            if cell.kernel() {
                bed.kernel_address(true)?;
            }
            let parties = measured_side(&bed, cell, &dir)?;
            let figures = if cell.multicast() {
                sockperf::pingpong(&bed, GROUP, PORT, SIZE, &on_interface(&peer), secs)
            } else {
                sockperf::pingpong(&bed, &measured, PORT, SIZE, &[], secs)
            };
            drop(parties);
            if cell.kernel() {
                bed.kernel_address(false)?;
            }
            got[i].push(figures.with_context(|| format!("cell {}", cell.name()))?);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let ratio = |a: Cell, b: Cell| sockperf::p50_ratio(&got[a as usize], &got[b as usize]);
    let cells = Cell::ALL
        .into_iter()
        .map(|cell| CellFigures {
            cell,
            figures: sockperf::summary(&got[cell as usize]),
        })
        .collect();
    Ok(MulticastReport {
        machine: shmnet_lab::machine::Machine::this(),
        rounds,
        seconds: secs,
        size: SIZE,
        group: GROUP,
        cells,
        server_over_kernel_multicast_p50: ratio(Cell::ServerMulticast, Cell::KernelMulticast),
        server_over_kernel_unicast_p50: ratio(Cell::ServerUnicast, Cell::KernelUnicast),
        server_multicast_over_unicast_p50: ratio(Cell::ServerMulticast, Cell::ServerUnicast),
    })
}

impl std::fmt::Display for MulticastReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "IPv4 multicast on {} ({} CPUs): sockperf ping-pong ({} B, full round trips) from a peer namespace over veth, to {} and to the measured side's address; median of {} round(s) of {} s",
            self.machine.cpu, self.machine.cpus, self.size, self.group, self.rounds, self.seconds
        )?;
        writeln!(
            f,
            "{:<17} {:>9} {:>9} {:>14}",
            "", "p50 µs", "p99 µs", "round trips/s"
        )?;
        for c in &self.cells {
            writeln!(
                f,
                "{:<17} {:>9.1} {:>9.1} {:>14.0}",
                c.cell.name(),
                c.figures.p50_us,
                c.figures.p99_us,
                c.figures.per_s
            )?;
        }
        writeln!(
            f,
            "p50 ratios (each round's own): server ÷ kernel, multicast {:.2}, unicast {:.2}; server multicast ÷ unicast {:.2}",
            self.server_over_kernel_multicast_p50,
            self.server_over_kernel_unicast_p50,
            self.server_multicast_over_unicast_p50
        )
    }
}

/// `shmnet bench multicast`.
pub fn bench(a: MulticastArgs) -> Result<()> {
    crate::report_bench(a.quick, a.json, run)
}
