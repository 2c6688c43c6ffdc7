//! Two machines on one host: two network namespaces joined by a veth pair, as seed 002 ran
//! its benchmarks between two machines on one Ethernet.
//!
//! - the **measured** namespace holds `v0`, where the structure under test runs: the Linux
//!   kernel with [`MEASURED_IP`] on `v0`, or `shmnet serve` owning `v0` through `AF_PACKET`
//!   with the same address (never both at once: a packet socket on `v0` would tap the
//!   kernel's traffic and slow the baseline);
//! - the **peer** namespace holds `v1` with [`PEER_IP`], where the stock programs on the
//!   other side run (`nc`, `Xvfb`) on the kernel's TCP.
//!
//! Both are removed when the [`Bed`] is dropped (and first, if a crashed run left them).
//! Programs start in a namespace in two ways: the peer's through `ip netns exec` (a
//! [`Command`] built from an argument list), the measured side's from a thread that has
//! entered it ([`Bed::in_measured`]), so that every process it starts — `shmnet party`
//! included — inherits the namespace without any change to how it is started.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The measured side's address (the kernel's on `v0`, or the shmnet server's).
pub const MEASURED_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
/// The peer's address, on `v1`.
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 2);
/// The prefix both addresses share.
pub const PREFIX: u8 = 24;
/// The measured side's interface.
pub const MEASURED_IFACE: &str = "v0";

/// Why the bed could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum BedError {
    /// An `ip` command failed.
    #[error("`ip {args}` failed{}: is iproute2 installed, and is this root?", .said.as_deref().map(|s| format!(" ({s})")).unwrap_or_default())]
    Ip {
        /// Its arguments, for the message.
        args: String,
        /// What it said on standard error.
        said: Option<String>,
    },
    /// Entering the measured namespace failed.
    #[error("entering network namespace {name}: {source}")]
    Enter {
        /// The namespace.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// The thread inside the namespace panicked.
    #[error("the thread inside network namespace {0} panicked")]
    Panicked(String),
}

/// Frames and bytes across the pair, by direction, as `v1` (the peer's end) counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wire {
    /// The measured side → the peer (`v1`'s receive counters): frames (a GSO segment is
    /// one) and bytes, headers included.
    pub sent: (u64, u64),
    /// The peer → the measured side (`v1`'s transmit counters).
    pub received: (u64, u64),
}

impl Wire {
    /// Mean bytes per frame each way between `self` (before) and `after`: (sent, received),
    /// each `None` if no frame crossed that way.
    pub fn bytes_per_frame_until(self, after: Wire) -> (Option<f64>, Option<f64>) {
        let per = |a: (u64, u64), b: (u64, u64)| {
            let frames = b.0.checked_sub(a.0)?;
            let bytes = b.1.checked_sub(a.1)?;
            (frames > 0).then(|| bytes as f64 / frames as f64)
        };
        (
            per(self.sent, after.sent),
            per(self.received, after.received),
        )
    }
}

/// The two namespaces, removed on drop.
pub struct Bed {
    measured: String,
    peer: String,
}

/// Runs `ip args…`.
fn ip(args: &[&str]) -> Result<(), BedError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BedError::Ip {
            args: args.join(" "),
            said: Some(e.to_string()),
        })?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(BedError::Ip {
        args: args.join(" "),
        said: (!said.is_empty()).then_some(said),
    })
}

impl Bed {
    /// Makes the namespaces `shmnet-lab-PID-a` (measured) and `-b` (peer), the veth pair,
    /// and the peer's address; loopback up in both.
    pub fn new() -> Result<Bed, BedError> {
        let pid = std::process::id();
        let bed = Bed {
            measured: format!("shmnet-lab-{pid}-a"),
            peer: format!("shmnet-lab-{pid}-b"),
        };
        bed.remove();
        ip(&["netns", "add", &bed.measured])?;
        ip(&["netns", "add", &bed.peer])?;
        let (a, b) = (bed.measured.as_str(), bed.peer.as_str());
        let peer_cidr = format!("{PEER_IP}/{PREFIX}");
        ip(&[
            "-n",
            a,
            "link",
            "add",
            MEASURED_IFACE,
            "type",
            "veth",
            "peer",
            "name",
            "v1",
            "netns",
            b,
        ])?;
        ip(&["-n", a, "link", "set", MEASURED_IFACE, "up"])?;
        ip(&["-n", b, "link", "set", "v1", "up"])?;
        ip(&["-n", a, "link", "set", "lo", "up"])?;
        ip(&["-n", b, "link", "set", "lo", "up"])?;
        ip(&["-n", b, "addr", "add", &peer_cidr, "dev", "v1"])?;
        Ok(bed)
    }

    fn remove(&self) {
        for ns in [&self.measured, &self.peer] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }

    /// `prog` to be run in the peer namespace (add its arguments).
    pub fn peer(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.peer, prog]);
        c
    }

    /// `prog` to be run in the measured namespace through `ip netns exec` (add its
    /// arguments), which also mounts that namespace's `/sys`, where a program that opens
    /// an interface by name reads its address ([`Bed::in_measured`] does not).
    pub fn measured(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.measured]).arg(prog);
        c
    }

    /// Gives the kernel [`MEASURED_IP`] on `v0` (`on`), or takes it away; either way the
    /// peer forgets the measured side's link address, so nothing stale is used.
    pub fn kernel_address(&self, on: bool) -> Result<(), BedError> {
        let cidr = format!("{MEASURED_IP}/{PREFIX}");
        let verb = if on { "add" } else { "del" };
        ip(&[
            "-n",
            &self.measured,
            "addr",
            verb,
            &cidr,
            "dev",
            MEASURED_IFACE,
        ])?;
        ip(&["-n", &self.peer, "neigh", "flush", "dev", "v1"])
    }

    /// What has crossed the pair so far, read from the kernel's counters of `v1`. veth
    /// counts a GSO segment as one packet: frames here are what each side handed the wire,
    /// whatever their size.
    pub fn wire(&self) -> Option<Wire> {
        let out = Command::new("ip")
            .args(["-n", &self.peer, "-s", "-j", "link", "show", "v1"])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let st = &v[0]["stats64"];
        let n = |dir: &str, what: &str| st[dir][what].as_u64();
        Some(Wire {
            sent: (n("rx", "packets")?, n("rx", "bytes")?),
            received: (n("tx", "packets")?, n("tx", "bytes")?),
        })
    }

    /// Whether something in the peer namespace listens on TCP `port` (asks `ss`).
    pub fn peer_listens(&self, port: u16) -> bool {
        let sport = format!(":{port}");
        self.peer("ss")
            .args(["-Hltn", "sport", "=", &sport])
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
    }

    /// Waits up to `patience` until the peer listens on `port`.
    pub fn wait_peer_listens(&self, port: u16, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        while !self.peer_listens(port) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Runs `f` on a thread inside the measured namespace: every socket it opens and every
    /// process it starts are the measured side's.
    pub fn in_measured<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, BedError> {
        let name = self.measured.clone();
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&name)?;
                Ok(f())
            })
            .join()
            .map_err(|_| BedError::Panicked(name.clone()))?
        })
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Moves the calling thread into the network namespace `name` (made by `ip netns add`).
fn enter(name: &str) -> Result<(), BedError> {
    let err = |source| BedError::Enter {
        name: name.to_string(),
        source,
    };
    let file = std::fs::File::open(format!("/run/netns/{name}")).map_err(err)?;
    // SAFETY: setns on a valid, open namespace file descriptor; it changes only the calling
    // thread's network namespace (CLONE_NEWNET), which this thread owns for its lifetime.
    let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(())
}
