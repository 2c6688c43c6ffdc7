//! Debian's `sockperf` as the benchmarks' measuring stick over a veth pair (shmnet-lab's
//! [`Bed`]): a ping-pong from the peer namespace to whatever answers on the measured side,
//! its report parsed; and the small helpers the benchmarks that use it share (starting a
//! party with its log, waiting for its socket, medians).

use crate::running::Running;
use anyhow::{Context, Result, bail};
use serde::Serialize;
use shmnet_lab::servers::bed::Bed;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One sockperf run's figures.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Pingpong {
    /// Median round trip, µs.
    pub p50_us: f64,
    /// 99th percentile round trip, µs.
    pub p99_us: f64,
    /// Round trips per second over sockperf's valid duration.
    pub per_s: f64,
}

/// Starts `cmd`, its standard error into `log` (shown if it fails to come up).
pub fn spawn(cmd: &mut Command, what: &str, log: &Path) -> Result<Running> {
    let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map(Running)
        .with_context(|| format!("starting {what}"))
}

/// Waits until `path` exists (a party's socket: it is up), 10 s at most; else says what
/// the party wrote to `log`.
pub fn wait_for(path: &Path, what: &str, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        if Instant::now() > deadline {
            let said = std::fs::read_to_string(log).unwrap_or_default();
            bail!("{what} did not start: {}", said.trim());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The numbers in sockperf's report.
pub fn parse(out: &str) -> Option<Pingpong> {
    let pct = |p: &str| {
        out.lines()
            .find(|l| l.contains(&format!("percentile {p} =")))
            .and_then(|l| l.rsplit('=').next())
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let valid = out.lines().find(|l| l.contains("[Valid Duration]"))?;
    let field = |name: &str| {
        valid
            .split([';', ' '])
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.trim_end_matches("sec").parse::<f64>().ok())
    };
    let (secs, received) = (field("RunTime=")?, field("ReceivedMessages=")?);
    Some(Pingpong {
        p50_us: pct("50.000")?,
        p99_us: pct("99.000")?,
        per_s: received / secs.max(1e-9),
    })
}

/// `sockperf ping-pong` of `size`-byte messages from the peer to `to:port` (an address or a
/// group) with `extra` options, for `secs` seconds (full round trips); retried for 10 s
/// while the responder is not up yet.
pub fn pingpong(
    bed: &Bed,
    to: &str,
    port: u16,
    size: usize,
    extra: &[&str],
    secs: u64,
) -> Result<Pingpong> {
    let (port, t, m) = (port.to_string(), secs.to_string(), size.to_string());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = bed
            .peer("sockperf")
            .args(["ping-pong", "-i", to, "-p", &port, "-t", &t, "-m", &m])
            .arg("--full-rtt")
            .args(extra)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("running sockperf (is it installed? scripts/setup installs it)")?;
        let text = String::from_utf8_lossy(&out.stdout);
        match parse(&text) {
            Some(p) if out.status.success() && p.per_s > 0.0 => return Ok(p),
            _ if Instant::now() > deadline => bail!(
                "sockperf ping-pong to {to} measured nothing: {}",
                text.lines().last().unwrap_or_default()
            ),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Each figure's median over `runs`.
pub fn summary(runs: &[Pingpong]) -> Pingpong {
    let of = |f: fn(&Pingpong) -> f64| median(runs.iter().map(f).collect());
    Pingpong {
        p50_us: of(|p| p.p50_us),
        p99_us: of(|p| p.p99_us),
        per_s: of(|p| p.per_s),
    }
}

/// The median over rounds of each round's p50 in `a` ÷ the same round's in `b`.
pub fn p50_ratio(a: &[Pingpong], b: &[Pingpong]) -> f64 {
    median(a.iter().zip(b).map(|(x, y)| x.p50_us / y.p50_us).collect())
}

/// `p` as a `&str`.
pub fn path(p: &Path) -> Result<&str> {
    p.to_str().context("a temporary path that is not UTF-8")
}

/// The median (`NaN` of nothing).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
