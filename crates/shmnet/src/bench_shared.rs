//! `shmnet bench shared-driver`: what one driver shared by several protocol servers
//! (`shmnet driver --listen`, issue 19) costs a server, and whether a busy neighbour on the
//! same driver disturbs it.
//!
//! Two namespaces joined by a veth pair (shmnet-lab's [`Bed`]); the peer runs Debian's
//! `sockperf ping-pong` (UDP, 64 B, full round trips) against the measured side, which is,
//! cell by cell in every round:
//!
//! | cell | the measured side |
//! |---|---|
//! | `kernel` | Linux: `sockperf server` on the kernel's address (the baseline) |
//! | `dedicated` | `shmnet serve --placement process` (a driver process of its own) |
//! | `shared` | `shmnet driver --listen` and an IPv4 server attached to it |
//! | `shared-busy` | the same, with an IPv6 server attached beside it which the peer floods with `ping -6 -f -l 32` for the whole cell |
//!
//! The responder is the same program in every cell: Debian's `sockperf server`, on the
//! kernel's sockets or, unmodified, under `shmnet run` on the cell's server.
//!
//! `shared ÷ dedicated` is what sharing costs (the shared loop routes by family and
//! watches several queues); `shared-busy ÷ shared` is what a neighbour's load costs (the
//! two servers share the driver's loop, not their queues or pools).

use crate::running::Running;
use crate::sockperf::{self, Pingpong, median, path, spawn, wait_for};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use shmnet_lab::servers::bed::{Bed, MEASURED_IFACE, MEASURED_IP, PREFIX};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The UDP port sockperf talks to.
const PORT: u16 = 11_111;
/// sockperf's message size.
const SIZE: usize = 64;
/// The IPv6 server's address and the peer's, on the same link.
const SIX: &str = "fd96::1";
const PEER_SIX: &str = "fd96::2";

/// The cells, in the order each round runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cell {
    /// Linux on the measured side.
    Kernel,
    /// A server with a driver process of its own.
    Dedicated,
    /// A server attached to a shared driver.
    Shared,
    /// The same, an IPv6 neighbour on the driver flooded meanwhile.
    SharedBusy,
}

impl Cell {
    const ALL: [Cell; 4] = [
        Cell::Kernel,
        Cell::Dedicated,
        Cell::Shared,
        Cell::SharedBusy,
    ];

    fn name(self) -> &'static str {
        match self {
            Cell::Kernel => "kernel",
            Cell::Dedicated => "dedicated",
            Cell::Shared => "shared",
            Cell::SharedBusy => "shared-busy",
        }
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
    /// `shared-busy` only: the neighbour's flood, ICMPv6 echoes answered per second.
    pub neighbour_echoes_per_s: Option<f64>,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct SharedDriverReport {
    /// The machine.
    pub machine: shmnet_lab::machine::Machine,
    /// Rounds (each runs every cell once).
    pub rounds: usize,
    /// Seconds sockperf runs per cell.
    pub seconds: u64,
    /// Message bytes.
    pub size: usize,
    /// The cells.
    pub cells: Vec<CellFigures>,
    /// Median over the rounds of each round's `shared` p50 ÷ its `dedicated` p50.
    pub shared_over_dedicated_p50: f64,
    /// Median over the rounds of each round's `shared-busy` p50 ÷ its `shared` p50.
    pub busy_over_shared_p50: f64,
    /// Median over the rounds of each round's `dedicated` p50 ÷ its `kernel` p50.
    pub dedicated_over_kernel_p50: f64,
}

/// `shmnet bench shared-driver`'s options.
#[derive(clap::Args, Debug)]
pub struct SharedDriverArgs {
    /// One round of 1 s per cell (about 15 s) instead of three of 3 s.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `shmnet` itself, with `args`, in the measured namespace.
fn shmnet(bed: &Bed, args: &[&str]) -> Result<Command> {
    let mut c = bed.measured(std::env::current_exe().context("finding this program")?);
    c.args(args);
    Ok(c)
}

/// Everything one cell starts on the measured side, stopped when dropped (in reverse).
type Parties = Vec<Running>;

/// Starts the measured side of `cell` in `dir`.
fn measured_side(bed: &Bed, cell: Cell, dir: &Path) -> Result<Parties> {
    let cidr = format!("{MEASURED_IP}/{PREFIX}");
    let cidr6 = format!("{SIX}/64");
    let file = |suffix: &str| dir.join(format!("{}{suffix}", cell.name()));
    let (sock, drv, six) = (file(".sock"), file(".drv"), file("-six.sock"));
    let (s, d, s6) = (path(&sock)?, path(&drv)?, path(&six)?);
    let port = PORT.to_string();
    let ip = MEASURED_IP.to_string();
    let mut parties = Parties::new();
    // Starts `cmd` as party `tag` and, if it makes a socket at `up`, waits for it.
    let mut start = |cmd: &mut Command, tag: &str, up: Option<&Path>| -> Result<()> {
        let log = file(&format!("-{tag}.log"));
        parties.push(spawn(cmd, tag, &log)?);
        up.map_or(Ok(()), |up| wait_for(up, tag, &log))
    };
    // `shmnet serve --structure server` with `more` options.
    let serve = |more: &[&str]| {
        let mut c = shmnet(bed, &["serve", "--structure", "server"])?;
        c.args(more);
        anyhow::Ok(c)
    };
    match cell {
        Cell::Kernel => {
            // sockperf's own server on Linux's sockets: nothing of shmnet's runs.
            start(
                bed.measured("sockperf")
                    .args(["server", "-i", &ip, "-p", &port]),
                "sockperf",
                None,
            )?;
            return Ok(parties);
        }
        Cell::Dedicated => {
            let driver = format!("af_packet:{MEASURED_IFACE}");
            let args = [
                "--placement",
                "process",
                "--driver",
                &driver,
                "--ip",
                &cidr,
                "--socket",
                s,
            ];
            start(&mut serve(&args)?, "server", Some(&sock))?;
        }
        Cell::Shared | Cell::SharedBusy => {
            let listen = ["driver", "--listen", d, "--device", MEASURED_IFACE];
            start(&mut shmnet(bed, &listen)?, "driver", Some(&drv))?;
            let four = [
                "--attach", d, "--family", "ipv4", "--ip", &cidr, "--socket", s,
            ];
            start(&mut serve(&four)?, "server", Some(&sock))?;
            if cell == Cell::SharedBusy {
                let six_args = [
                    "--attach", d, "--family", "ipv6", "--ip6", &cidr6, "--socket", s6,
                ];
                start(&mut serve(&six_args)?, "neighbour", Some(&six))?;
            }
        }
    }
    // The responder is the kernel cell's: Debian's sockperf server, unmodified, under
    // `shmnet run` (sockperf's client wants its own server's replies, not a bare echo).
    let run = ["run", "--server", s, "--", "sockperf", "server"];
    start(
        shmnet(bed, &run)?.args(["-i", &ip, "-p", &port]),
        "sockperf",
        None,
    )?;
    Ok(parties)
}

/// The peer's `ping -6 -f -l 32` at the IPv6 neighbour, for `secs` (+1: it outlasts sockperf).
fn flood(bed: &Bed, secs: u64) -> Result<Child> {
    bed.peer("ping")
        // -l 32: 32 echoes in flight, so the flood is not paced by one round trip at a time.
        .args([
            "-6",
            "-f",
            "-l",
            "32",
            "-q",
            "-w",
            &(secs + 1).to_string(),
            SIX,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting ping -6 -f (is iputils-ping installed?)")
}

/// Echo replies per second from `ping -f -q`'s summary.
fn flood_rate(out: &str) -> Option<f64> {
    // "N packets transmitted, M received, …, time Tms"
    let line = out.lines().find(|l| l.contains("packets transmitted"))?;
    let received: f64 = line
        .split(',')
        .find(|p| p.trim_end().ends_with("received"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let ms: f64 = line
        .rsplit("time ")
        .next()?
        .trim_end_matches("ms")
        .trim()
        .parse()
        .ok()?;
    Some(received / (ms / 1e3).max(1e-9))
}

/// Runs the benchmark; `progress` is told each step.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<SharedDriverReport> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("shmnet bench shared-driver needs root (network namespaces, AF_PACKET)");
    }
    let (rounds, secs) = if quick { (1, 1) } else { (3, 3) };
    let bed = Bed::new().context("making the namespaces")?;
    bed.peer("ip")
        .args([
            "-6",
            "addr",
            "add",
            &format!("{PEER_SIX}/64"),
            "dev",
            "v1",
            "nodad",
        ])
        .status()
        .context("giving the peer an IPv6 address")?;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("shmnet-bench-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut got: Vec<Vec<Pingpong>> = vec![Vec::new(); Cell::ALL.len()];
    let mut neighbour = Vec::new();
    for r in 0..rounds {
        for (i, cell) in Cell::ALL.into_iter().enumerate() {
            progress(&format!("round {}/{rounds}: {}", r + 1, cell.name()));
            if cell == Cell::Kernel {
                bed.kernel_address(true)?;
            }
            let parties = measured_side(&bed, cell, &dir)?;
            let flooding = (cell == Cell::SharedBusy)
                .then(|| flood(&bed, secs))
                .transpose()?;
            let figures = sockperf::pingpong(&bed, &MEASURED_IP.to_string(), PORT, SIZE, &[], secs);
            if let Some(f) = flooding {
                let out = f.wait_with_output().context("waiting for ping -6 -f")?;
                neighbour.push(flood_rate(&String::from_utf8_lossy(&out.stdout)).unwrap_or(0.0));
            }
            drop(parties);
            if cell == Cell::Kernel {
                bed.kernel_address(false)?;
            }
            got[i].push(figures?);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let ratio = |a: Cell, b: Cell| sockperf::p50_ratio(&got[a as usize], &got[b as usize]);
    let cells = Cell::ALL
        .into_iter()
        .map(|cell| CellFigures {
            cell,
            figures: sockperf::summary(&got[cell as usize]),
            neighbour_echoes_per_s: (cell == Cell::SharedBusy).then(|| median(neighbour.clone())),
        })
        .collect();
    Ok(SharedDriverReport {
        machine: shmnet_lab::machine::Machine::this(),
        rounds,
        seconds: secs,
        size: SIZE,
        cells,
        shared_over_dedicated_p50: ratio(Cell::Shared, Cell::Dedicated),
        busy_over_shared_p50: ratio(Cell::SharedBusy, Cell::Shared),
        dedicated_over_kernel_p50: ratio(Cell::Dedicated, Cell::Kernel),
    })
}

impl std::fmt::Display for SharedDriverReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "one driver, several servers, on {} ({} CPUs): sockperf UDP ping-pong ({} B, full round trips) from a peer namespace over veth; median of {} round(s) of {} s",
            self.machine.cpu, self.machine.cpus, self.size, self.rounds, self.seconds
        )?;
        writeln!(
            f,
            "{:<12} {:>9} {:>9} {:>12}",
            "", "p50 µs", "p99 µs", "round trips/s"
        )?;
        for c in &self.cells {
            write!(
                f,
                "{:<12} {:>9.1} {:>9.1} {:>12.0}",
                c.cell.name(),
                c.figures.p50_us,
                c.figures.p99_us,
                c.figures.per_s
            )?;
            match c.neighbour_echoes_per_s {
                Some(n) => writeln!(f, "   (IPv6 neighbour answering {n:.0} pings/s)")?,
                None => writeln!(f)?,
            }
        }
        writeln!(
            f,
            "p50 ratios (each round's own): shared ÷ dedicated {:.2}, shared-busy ÷ shared {:.2}, dedicated ÷ kernel {:.2}",
            self.shared_over_dedicated_p50,
            self.busy_over_shared_p50,
            self.dedicated_over_kernel_p50
        )
    }
}

/// `shmnet bench shared-driver`.
pub fn bench(a: SharedDriverArgs) -> Result<()> {
    crate::report_bench(a.quick, a.json, run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockperf_and_ping_summaries_parse() {
        let sp = "sockperf: [Valid Duration] RunTime=0.548 sec; SentMessages=25844; ReceivedMessages=25844\n\
                  sockperf: ---> percentile 99.000 =   28.562\n\
                  sockperf: ---> percentile 50.000 =   15.492\n";
        let p = sockperf::parse(sp).unwrap();
        assert_eq!((p.p50_us, p.p99_us), (15.492, 28.562));
        assert!((p.per_s - 25844.0 / 0.548).abs() < 1e-6);
        assert!(sockperf::parse("sockperf: nothing measured").is_none());
        let ping = "--- fd96::1 ping statistics ---\n\
                    5000 packets transmitted, 4990 received, 0.2% packet loss, time 2000ms\n";
        assert_eq!(flood_rate(ping), Some(2495.0));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
