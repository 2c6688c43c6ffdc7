//! The lab's X11perf: Debian's `Xvfb` in the peer namespace listening on TCP (display
//! [`DISPLAY`], port 6000 + display), and the unmodified `x11perf -dot` client on the
//! measured side — on the kernel's sockets, or under `shmnet run` through the server under
//! test. x11perf's own six repetitions are the six; its dots per second the figure. As in
//! the seed, Xlib packs the dots into requests of its own choosing, so this is the one
//! benchmark whose messages no one sized.

use super::bed::{Bed, PEER_IP};
use super::running::{RunError, Running};
use super::transfer::{PATIENCE, Side};
use super::{Bench, Collected, Cpus, REPETITIONS, ServersOptions};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The X display number in the peer namespace (its own network, so any number is free;
/// `-nolock` and no Unix socket keep it from meeting another X server on this host).
pub const DISPLAY: u16 = 57;

/// Why x11perf could not run.
#[derive(Debug, thiserror::Error)]
pub(super) enum X11Error {
    /// Xvfb could not be started.
    #[error("starting Xvfb in the peer namespace: {0}")]
    Spawn(std::io::Error),
    /// Xvfb did not listen.
    #[error("Xvfb did not listen on TCP port {} within {} s", 6000 + DISPLAY, PATIENCE.as_secs())]
    NotListening,
    /// x11perf failed or did not finish.
    #[error(transparent)]
    Run(#[from] RunError),
    /// x11perf printed no repetition.
    #[error("{what} printed no repetition's rate")]
    NoRates {
        /// Which run.
        what: String,
    },
}

/// Which of the programs are missing, as a reason to skip (`None`: both are installed).
pub(super) fn missing_programs() -> Option<String> {
    let installed = |p: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
    };
    let missing: Vec<&str> = [("Xvfb", "xvfb"), ("x11perf", "x11-apps")]
        .into_iter()
        .filter(|(prog, _)| !installed(prog))
        .map(|(_, pkg)| pkg)
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "needs Debian's {} (apt install {}; scripts/setup does)",
            missing.join(" and "),
            missing.join(" ")
        )
    })
}

/// The X server in the peer namespace, killed on drop.
pub(super) struct Xvfb {
    child: Child,
}

impl Xvfb {
    /// Starts it and waits until it listens.
    pub fn start(bed: &Bed) -> Result<Xvfb, X11Error> {
        let display = format!(":{DISPLAY}");
        let child = bed
            .peer("Xvfb")
            .args([
                &display,
                "-listen",
                "tcp",
                "-nolisten",
                "unix",
                "-nolock",
                "-ac",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(X11Error::Spawn)?;
        let x = Xvfb { child };
        if !bed.wait_peer_listens(6000 + DISPLAY, PATIENCE) {
            return Err(X11Error::NotListening);
        }
        Ok(x)
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The dots per second of every repetition x11perf printed ("N reps @ T msec (R/sec):
/// Dot"; its "trep" summary line left out).
pub(super) fn rates(out: &str) -> Vec<f64> {
    out.lines()
        .filter(|l| l.contains(" reps @ ") && l.trim_end().ends_with("Dot"))
        .filter_map(|l| {
            let open = l.find('(')?;
            let close = l[open..].find("/sec)")? + open;
            l[open + 1..close].trim().parse().ok()
        })
        .collect()
}

/// Seconds per x11perf repetition.
fn seconds(quick: bool) -> u32 {
    if quick { 1 } else { 3 }
}

/// x11perf's six repetitions for the running `side`.
pub(super) fn repetitions(
    o: &ServersOptions,
    bed: &Bed,
    _x: &Xvfb,
    side: &Side,
    cpus: Cpus,
    c: &mut Collected,
    say: &mut dyn FnMut(&str),
) {
    say(&format!("x11perf -dot, {REPETITIONS} repetitions"));
    let before = bed.wire();
    let rates = run(o, side);
    c.at((Bench::X11Dot, cpus, None, side.structure()))
        .add(rates, before, bed.wire());
}

/// Runs x11perf once (six repetitions inside) and reads its rates.
fn run(o: &ServersOptions, side: &Side) -> Result<Vec<f64>, X11Error> {
    let (mut cmd, what) = match side.socket() {
        None => (
            Command::new("x11perf"),
            "x11perf -dot (kernel sockets)".to_string(),
        ),
        Some(sock) => {
            let mut c = Command::new(&o.exe);
            c.arg("run")
                .arg("--server")
                .arg(sock)
                .args(["--", "x11perf"]);
            (
                c,
                format!(
                    "x11perf -dot under shmnet run ({})",
                    side.structure().name()
                ),
            )
        }
    };
    let t = seconds(o.quick);
    cmd.arg("-display")
        .arg(format!("{PEER_IP}:{DISPLAY}"))
        .args(["-dot", "-repeat"])
        .arg(REPETITIONS.to_string())
        .arg("-time")
        .arg(t.to_string())
        .stdin(Stdio::null());
    // x11perf calibrates before it times: a generous bound, against a hang only.
    let limit = Duration::from_secs(120 + 10 * u64::from(t) * REPETITIONS as u64);
    let out = Running::start(&mut cmd, &what, true)?.finish(limit)?;
    let rates = rates(&out);
    if rates.is_empty() {
        return Err(X11Error::NoRates { what });
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_from_each_repetition_and_not_the_summary() {
        let out = "x11perf - X11 performance program, version 1.6.1\n\
                   \n\
                   Sync time adjustment is 0.0279 msecs.\n\
                   \n\
                   300000000 reps @   0.0000 msec (249000000.0/sec): Dot\n\
                   300000000 reps @   0.0000 msec (276000000.0/sec): Dot\n\
                   600000000 trep @   0.0000 msec (262000000.0/sec): Dot\n";
        assert_eq!(rates(out), vec![249e6, 276e6]);
        assert!(rates("no rates here\n").is_empty());
    }
}
