//! `shmnet bench programs`: unmodified programs under `shmnet run` against the same
//! programs on Linux's loopback, in the same run (issue 17's benchmarks). Both ends of each
//! conversation are on this host: the kernel's over `lo`, shmnet's two programs on one
//! server with `--driver loopback` (its applications reach each other at its address, as
//! over `lo`). And what the interposition itself costs a call on a kernel descriptor.

use crate::running::Running;
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The loopback server's address.
const SERVER_IP: &str = "10.99.0.1";
/// Its MTU: as `shmnet ttcp --proto tcp`'s loopback wire (Linux's `lo` has 65,536 and GSO).
const LOOPBACK_MTU: &str = "16384";

/// One figure: shmnet's, the kernel's, and their ratio, each the median of the rounds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Pair {
    pub shmnet: f64,
    pub kernel: f64,
    /// shmnet ÷ kernel.
    pub ratio: f64,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct ProgramsReport {
    pub machine: shmnet_lab::machine::Machine,
    pub rounds: usize,
    pub seconds: f64,
    /// iperf3, one TCP stream, receiver's Gbit/s.
    pub iperf3_tcp_gbit_s: Pair,
    /// sockperf ping-pong over TCP (no-delay), p50 round trip in µs.
    pub sockperf_tcp_p50_us: Pair,
    /// sockperf ping-pong over UDP (its default), p50 round trip in µs.
    pub sockperf_udp_p50_us: Pair,
    /// iperf3 `-u -l 64 -b 0`: 64-byte datagrams as fast as the sender goes; what arrived.
    pub iperf3_udp_64: UdpFigures,
    /// iperf3 `-u -l 64` at the highest offered rate (stepping down from what arrived at
    /// `-b 0`) that lost at most 0.1 %: datagrams arriving per second (thousands).
    pub iperf3_udp_64_lossless_kpps: Pair,
    /// `fcntl(F_GETFD)` on a pipe: ns per call with the library loaded, without, and the
    /// difference (what the interposition costs a call that is not shmnet's).
    pub interpose_ns: Interpose,
    /// The targets, each met or not in this run.
    pub targets: Vec<Target>,
}

/// A UDP stream's figures: datagrams that arrived per second (thousands), and the share
/// lost on the way (the receiver's count against the sender's), each the median of the
/// rounds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct UdpFigures {
    pub received_kpps: Pair,
    pub loss_pct_shmnet: f64,
    pub loss_pct_kernel: f64,
}

/// The interposition's cost.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Interpose {
    pub with_library: f64,
    pub without: f64,
    pub overhead: f64,
}

/// A target and whether this run met it.
#[derive(Debug, Serialize)]
pub struct Target {
    pub what: String,
    pub met: bool,
}

/// The options.
#[derive(clap::Args, Debug)]
pub struct ProgramsArgs {
    /// One short round (about 15 s) instead of three.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn shmnet_exe() -> Result<PathBuf> {
    std::env::current_exe().context("finding this program")
}

/// `shmnet serve --driver loopback` on a socket of its own.
fn loopback_server(sock: &Path) -> Result<Running> {
    let child = Command::new(shmnet_exe()?)
        .args(["serve", "--structure", "server", "--driver", "loopback"])
        .args(["--ip", &format!("{SERVER_IP}/24"), "--mtu", LOOPBACK_MTU])
        // Like for like with Linux's lo, which neither makes nor checks checksums (its
        // frames never reach a wire): `--no-checksum` does the same on a loopback only.
        .arg("--no-checksum")
        .arg("--socket")
        .arg(sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting shmnet serve --driver loopback")?;
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        if Instant::now() > deadline {
            bail!("the loopback server did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(running)
}

/// `prog`, under `shmnet run --server sock` when `sock` is given.
fn program(sock: Option<&Path>, prog: &str) -> Result<Command> {
    Ok(match sock {
        Some(s) => {
            let mut c = Command::new(shmnet_exe()?);
            c.args(["run", "--server"]).arg(s).args(["--", prog]);
            c
        }
        None => Command::new(prog),
    })
}

/// Runs `make()` until it succeeds (its server may not listen yet), for 10 s at most;
/// returns its standard output.
fn until_it_runs(what: &str, mut make: impl FnMut() -> Result<Command>) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = make()?
            .stderr(Stdio::null())
            .output()
            .with_context(|| format!("running {what}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let refused = stdout.contains("\"error\":") || stdout.contains("ERROR");
        if out.status.success() && !refused {
            return Ok(stdout);
        }
        if Instant::now() > deadline {
            bail!(
                "{what} failed: {}",
                stdout.lines().last().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One iperf3 test of `secs` with `extra` options (a one-off `iperf3 -s` started for it on
/// `port`): the client's JSON report.
fn iperf3_run(
    sock: Option<&Path>,
    host: &str,
    port: u16,
    secs: f64,
    extra: &[&str],
) -> Result<serde_json::Value> {
    let p = port.to_string();
    let _server = Running(
        program(sock, "iperf3")?
            .args(["-s", "-1", "-p", &p])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -s (is iperf3 installed? scripts/setup installs it)")?,
    );
    let t = format!("{secs}");
    let out = until_it_runs("iperf3 -c", || {
        let mut c = program(sock, "iperf3")?;
        c.args(["-c", host, "-p", &p, "-t", &t, "-J"]).args(extra);
        Ok(c)
    })?;
    serde_json::from_str(&out).context("iperf3's JSON")
}

/// iperf3, one TCP stream for `secs`: the receiver's Gbit/s.
fn iperf3(sock: Option<&Path>, host: &str, port: u16, secs: f64) -> Result<f64> {
    let v = iperf3_run(sock, host, port, secs, &[])?;
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 1e9)
        .context("no end.sum_received.bits_per_second in iperf3's report")
}

/// iperf3 `-u -l 64` for `secs`, offering `kpps` thousand datagrams a second (`None`: as
/// fast as the sender goes, `-b 0`): datagrams received per second (thousands) and the
/// percentage lost.
fn iperf3_udp(
    sock: Option<&Path>,
    host: &str,
    port: u16,
    secs: f64,
    kpps: Option<f64>,
) -> Result<(f64, f64)> {
    // iperf3's -b counts payload bits.
    let rate = kpps.map_or_else(
        || "0".to_string(),
        |k| format!("{}", (k * 1e3 * 64.0 * 8.0) as u64),
    );
    let v = iperf3_run(sock, host, port, secs, &["-u", "-l", "64", "-b", &rate])?;
    let sum = &v["end"]["sum"];
    let field = |k: &str| {
        sum[k]
            .as_f64()
            .with_context(|| format!("no end.sum.{k} in iperf3's UDP report"))
    };
    let (packets, lost, seconds) = (field("packets")?, field("lost_packets")?, field("seconds")?);
    if packets <= 0.0 || seconds <= 0.0 {
        bail!("iperf3 -u sent nothing");
    }
    Ok((
        (packets - lost).max(0.0) / seconds / 1e3,
        100.0 * lost / packets,
    ))
}

/// Loss at or under this share counts as none (iperf3 counts a datagram that came out of
/// order as lost until it comes).
const LOSSLESS_PCT: f64 = 0.1;

/// The highest rate of 64-byte datagrams that arrives whole: offered rates stepping down by
/// 15 % from `from_kpps` (what arrived with the sender unbounded), at most 8 steps; the
/// received rate (thousands a second) at the first whose loss is at most
/// [`LOSSLESS_PCT`], or 0 if none was.
fn iperf3_udp_lossless(
    sock: Option<&Path>,
    host: &str,
    first_port: u16,
    secs: f64,
    from_kpps: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<f64> {
    let mut offer = from_kpps;
    for step in 0..8u16 {
        progress(&format!(
            "UDP without loss: offering {offer:.0} k datagrams/s"
        ));
        let (got, loss) = iperf3_udp(sock, host, first_port + step, secs, Some(offer))?;
        if loss <= LOSSLESS_PCT {
            return Ok(got);
        }
        offer *= 0.85;
    }
    Ok(0.0)
}

/// sockperf ping-pong over TCP (no-delay) or UDP for `secs`: the p50 round trip in µs.
fn sockperf(sock: Option<&Path>, host: &str, port: u16, secs: f64, tcp: bool) -> Result<f64> {
    let p = port.to_string();
    let proto: &[&str] = if tcp { &["--tcp"] } else { &[] };
    // The client's retries cover the time until it listens.
    let _server = Running(
        program(sock, "sockperf")?
            .args(["server", "-i", host, "-p", &p])
            .args(proto)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context(
                "starting sockperf server (is sockperf installed? scripts/setup installs it)",
            )?,
    );
    let t = format!("{}", secs.ceil() as u64);
    let out = until_it_runs("sockperf ping-pong", || {
        let mut c = program(sock, "sockperf")?;
        c.args(["ping-pong", "-i", host, "-p", &p, "-t", &t])
            .args(proto);
        Ok(c)
    })?;
    out.lines()
        .find(|l| l.contains("percentile 50.000"))
        .and_then(|l| l.rsplit('=').next())
        .and_then(|v| v.trim().parse().ok())
        .context("no 50th percentile in sockperf's output")
}

/// ns per `fcntl(F_GETFD)` on a pipe, with the library preloaded or not: this program's
/// own `bench interpose-probe`, median of batches.
fn interpose(with_library: bool) -> Result<f64> {
    let mut c = Command::new(shmnet_exe()?);
    c.args(["bench", "interpose-probe"]);
    if with_library {
        c.env("LD_PRELOAD", crate::run::library()?);
    } else {
        c.env_remove("LD_PRELOAD");
    }
    let out = c.output().context("running the interposition probe")?;
    if !out.status.success() {
        bail!("the interposition probe failed");
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("the probe's ns per call")
}

/// The probe: ns per `fcntl(F_GETFD)` on a pipe, median of 201 batches of 2,000 calls.
pub fn interpose_probe() -> Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    let mut batches: Vec<f64> = (0..201)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..2_000 {
                // SAFETY: F_GETFD on our own pipe's descriptor.
                std::hint::black_box(unsafe { libc::fcntl(fds[0], libc::F_GETFD) });
            }
            t.elapsed().as_nanos() as f64 / 2_000.0
        })
        .collect();
    println!("{:.2}", shmnet_lab::tsc::median(&mut batches));
    Ok(())
}

fn pair(mut shmnet: Vec<f64>, mut kernel: Vec<f64>) -> Pair {
    let s = shmnet_lab::tsc::median(&mut shmnet);
    let k = shmnet_lab::tsc::median(&mut kernel);
    Pair {
        shmnet: s,
        kernel: k,
        ratio: s / k,
    }
}

/// Runs the benchmark, telling `progress` each step.
pub fn run(quick: bool, progress: &mut dyn FnMut(&str)) -> Result<ProgramsReport> {
    crate::run::library()?;
    let (rounds, secs) = if quick { (1, 1.0) } else { (3, 3.0) };
    let sock = std::env::temp_dir().join(format!("shmnet-programs-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let _server = loopback_server(&sock)?;
    let (mut ip_s, mut ip_k, mut sp_s, mut sp_k) = (vec![], vec![], vec![], vec![]);
    let (mut su_s, mut su_k, mut iu_s, mut iu_k) = (vec![], vec![], vec![], vec![]);
    let (mut loss_s, mut loss_k) = (vec![], vec![]);
    let (mut ll_s, mut ll_k) = (vec![], vec![]);
    for r in 0..rounds {
        let port = 21_000 + 10 * r as u16;
        progress(&format!("round {}/{rounds}: iperf3 on the kernel", r + 1));
        ip_k.push(iperf3(None, "127.0.0.1", port, secs)?);
        progress(&format!(
            "round {}/{rounds}: iperf3 under shmnet run",
            r + 1
        ));
        ip_s.push(iperf3(Some(&sock), SERVER_IP, port + 1, secs)?);
        progress(&format!("round {}/{rounds}: sockperf on the kernel", r + 1));
        sp_k.push(sockperf(None, "127.0.0.1", port + 2, secs, true)?);
        progress(&format!(
            "round {}/{rounds}: sockperf under shmnet run",
            r + 1
        ));
        sp_s.push(sockperf(Some(&sock), SERVER_IP, port + 3, secs, true)?);
        progress(&format!("round {}/{rounds}: UDP on the kernel", r + 1));
        su_k.push(sockperf(None, "127.0.0.1", port + 4, secs, false)?);
        let (kpps, loss) = iperf3_udp(None, "127.0.0.1", port + 5, secs, None)?;
        iu_k.push(kpps);
        loss_k.push(loss);
        let ladder = 22_000 + 20 * r as u16;
        ll_k.push(iperf3_udp_lossless(
            None,
            "127.0.0.1",
            ladder,
            secs,
            kpps,
            progress,
        )?);
        progress(&format!("round {}/{rounds}: UDP under shmnet run", r + 1));
        su_s.push(sockperf(Some(&sock), SERVER_IP, port + 6, secs, false)?);
        let (kpps, loss) = iperf3_udp(Some(&sock), SERVER_IP, port + 7, secs, None)?;
        iu_s.push(kpps);
        loss_s.push(loss);
        ll_s.push(iperf3_udp_lossless(
            Some(&sock),
            SERVER_IP,
            ladder + 10,
            secs,
            kpps,
            progress,
        )?);
    }
    progress("the interposition's cost");
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..5 {
        with.push(interpose(true)?);
        without.push(interpose(false)?);
    }
    let (w, wo) = (
        shmnet_lab::tsc::median(&mut with),
        shmnet_lab::tsc::median(&mut without),
    );
    let _ = std::fs::remove_file(&sock);
    let iperf3_tcp_gbit_s = pair(ip_s, ip_k);
    let sockperf_tcp_p50_us = pair(sp_s, sp_k);
    let sockperf_udp_p50_us = pair(su_s, su_k);
    let iperf3_udp_64_lossless_kpps = pair(ll_s, ll_k);
    let iperf3_udp_64 = UdpFigures {
        received_kpps: pair(iu_s, iu_k),
        loss_pct_shmnet: shmnet_lab::tsc::median(&mut loss_s),
        loss_pct_kernel: shmnet_lab::tsc::median(&mut loss_k),
    };
    let interpose_ns = Interpose {
        with_library: w,
        without: wo,
        overhead: w - wo,
    };
    let targets = vec![
        Target {
            what: "iperf3 TCP single stream ≥ 1.5× kernel Gbit/s".into(),
            met: iperf3_tcp_gbit_s.ratio >= 1.5,
        },
        Target {
            what: "sockperf ping-pong p50 ≤ 0.5× kernel".into(),
            met: sockperf_tcp_p50_us.ratio <= 0.5,
        },
        Target {
            what: "sockperf UDP ping-pong p50 ≤ 0.5× kernel".into(),
            met: sockperf_udp_p50_us.ratio <= 0.5,
        },
        Target {
            what: "iperf3 UDP 64-byte datagrams ≥ 5× kernel packets/s, no loss (each at its highest rate losing ≤ 0.1 %)"
                .into(),
            met: iperf3_udp_64_lossless_kpps.ratio >= 5.0,
        },
        Target {
            what: "interposition ≤ 20 ns per call on a kernel descriptor".into(),
            met: interpose_ns.overhead <= 20.0,
        },
    ];
    Ok(ProgramsReport {
        machine: shmnet_lab::machine::Machine::this(),
        rounds,
        seconds: secs,
        iperf3_tcp_gbit_s,
        sockperf_tcp_p50_us,
        sockperf_udp_p50_us,
        iperf3_udp_64,
        iperf3_udp_64_lossless_kpps,
        interpose_ns,
        targets,
    })
}

impl std::fmt::Display for ProgramsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "unmodified programs on {} ({} CPUs): shmnet run on a loopback server ({SERVER_IP}, MTU {LOOPBACK_MTU}, no checksums, as lo) against Linux's lo; median of {} round(s) of {} s",
            self.machine.cpu, self.machine.cpus, self.rounds, self.seconds
        )?;
        writeln!(
            f,
            "{:<34} {:>10} {:>10} {:>8}",
            "", "shmnet", "kernel", "÷kernel"
        )?;
        for (name, p) in [
            ("iperf3 TCP, 1 stream, Gbit/s", self.iperf3_tcp_gbit_s),
            ("sockperf TCP ping-pong p50, µs", self.sockperf_tcp_p50_us),
            ("sockperf UDP ping-pong p50, µs", self.sockperf_udp_p50_us),
            (
                "iperf3 UDP 64 B, k datagrams/s in",
                self.iperf3_udp_64.received_kpps,
            ),
            (
                "  the same without loss (≤ 0.1 %)",
                self.iperf3_udp_64_lossless_kpps,
            ),
        ] {
            writeln!(
                f,
                "{name:<34} {:>10.2} {:>10.2} {:>8.2}",
                p.shmnet, p.kernel, p.ratio
            )?;
        }
        writeln!(
            f,
            "iperf3 UDP 64 B lost: {:.1} % under shmnet run, {:.1} % on the kernel (-b 0: the sender as fast as it goes)",
            self.iperf3_udp_64.loss_pct_shmnet, self.iperf3_udp_64.loss_pct_kernel
        )?;
        writeln!(
            f,
            "interposition: fcntl(F_GETFD) on a pipe {:.1} ns with the library, {:.1} ns without: {:+.1} ns",
            self.interpose_ns.with_library, self.interpose_ns.without, self.interpose_ns.overhead
        )?;
        for t in &self.targets {
            writeln!(
                f,
                "target: {} — {}",
                t.what,
                if t.met { "met" } else { "NOT met" }
            )?;
        }
        Ok(())
    }
}

/// `shmnet bench programs`.
pub fn bench(a: ProgramsArgs) -> Result<()> {
    crate::report_bench(a.quick, a.json, run)
}
