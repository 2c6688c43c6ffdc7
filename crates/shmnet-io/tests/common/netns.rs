//! A pair of network namespaces joined by a veth pair, made for one test and removed when it
//! ends (also when it panics).
//!
//! ```text
//!   namespace A (shmnet)                     namespace B (Linux)
//!   vetha: up, no address                    vethb: up, 10.77.N.2/24
//!   shmnet answers for 10.77.N.1 through     the kernel's own stack, ping, UDP sockets,
//!   AF_PACKET on vetha                       tshark
//! ```
//!
//! Namespace names carry the pid and a counter, so concurrent test processes never collide;
//! namespaces left behind by a killed earlier run (their pid is gone) are removed on the way.
//! Tests using this fixture run one at a time within a process (a global lock), which keeps
//! timing-sensitive checks (ping deadlines, tshark start-up) honest on small machines.

use std::marker::PhantomData;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

static COUNTER: AtomicU32 = AtomicU32::new(0);
static SERIAL: Mutex<()> = Mutex::new(());

const PREFIX: &str = "shmnet-";

/// The namespace pair. See the [module docs](self).
pub struct NetnsPair {
    /// Namespace where shmnet runs.
    pub ns_a: String,
    /// Namespace of the Linux peer.
    pub ns_b: String,
    /// The veth end in A.
    pub veth_a: String,
    /// The veth end in B.
    pub veth_b: String,
    /// shmnet's address (assigned to no Linux interface; shmnet answers for it).
    pub shm_ip: Ipv4Addr,
    /// The Linux peer's address, on `veth_b`.
    pub linux_ip: Ipv4Addr,
    /// Prefix length of both.
    pub prefix: u8,
    /// MAC of `veth_a`.
    pub mac_a: [u8; 6],
    /// MAC of `veth_b`.
    pub mac_b: [u8; 6],
    made: Vec<String>,
    _serial: MutexGuard<'static, ()>,
}

/// Skips `test` loudly (or fails under `CI=true`): see [`shmnet_testkit::skip`].
fn skip_or_fail(test: &str, reason: &str) {
    shmnet_testkit::skip(
        test,
        &format!("needs root and network namespaces: {reason}"),
    );
}

/// The namespace pair, or `None` after a loud `SKIPPED:` message when this machine cannot
/// make one (not root, no `ip`, no namespaces). Panics instead of skipping when `CI=true`.
pub fn require_root_netns(test: &str) -> Option<NetnsPair> {
    // SAFETY: `geteuid` has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        skip_or_fail(test, &format!("not running as root (euid {euid})"));
        return None;
    }
    if !have_command("ip", &["-V"]) {
        skip_or_fail(
            test,
            "the `ip` command (iproute2) is missing; scripts/setup installs it",
        );
        return None;
    }
    match NetnsPair::new() {
        Ok(p) => Some(p),
        Err(e) => {
            skip_or_fail(test, &format!("could not make the namespace pair: {e}"));
            None
        }
    }
}

/// Whether each command runs; if one does not, skips loudly (or fails under `CI=true`).
pub fn require_commands(test: &str, cmds: &[(&str, &[&str], &str)]) -> bool {
    for (cmd, args, package) in cmds {
        if !have_command(cmd, args) {
            shmnet_testkit::skip(
                test,
                &format!(
                    "`{cmd}` is missing (Debian package {package}; scripts/setup installs it)"
                ),
            );
            return false;
        }
    }
    true
}

fn have_command(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `ip ARGS`, returning stdout or an error with stderr.
fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Removes namespaces an earlier, killed run left behind (their pid no longer exists).
fn reap_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        // shmnet-{a|b}-PID-K
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "delete", &name]);
            }
        }
    }
}

impl NetnsPair {
    /// Makes the pair: two namespaces, the veth pair, addresses, links up.
    pub fn new() -> Result<NetnsPair, String> {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        reap_stale();
        let pid = std::process::id();
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        let subnet = ((pid + k) % 250 + 1) as u8;
        let mut pair = NetnsPair {
            ns_a: format!("{PREFIX}a-{pid}-{k}"),
            ns_b: format!("{PREFIX}b-{pid}-{k}"),
            veth_a: "vetha".into(),
            veth_b: "vethb".into(),
            shm_ip: Ipv4Addr::new(10, 77, subnet, 1),
            linux_ip: Ipv4Addr::new(10, 77, subnet, 2),
            prefix: 24,
            mac_a: [0; 6],
            mac_b: [0; 6],
            made: Vec::new(),
            _serial: serial,
        };
        // From here on, Drop removes whatever was made.
        for ns in [pair.ns_a.clone(), pair.ns_b.clone()] {
            ip(&["netns", "add", &ns])?;
            pair.made.push(ns);
        }
        let (a, b) = (pair.ns_a.clone(), pair.ns_b.clone());
        let (va, vb) = (pair.veth_a.clone(), pair.veth_b.clone());
        ip(&[
            "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b,
        ])?;
        // The shmnet side is Linux-silent: no IPv6 (no router solicitations, no DAD from our
        // MAC), no address.
        let _ = pair.sh(&a, "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6");
        let _ = pair.sh(
            &a,
            &format!("echo 1 > /proc/sys/net/ipv6/conf/{va}/disable_ipv6"),
        );
        let cidr = format!("{}/{}", pair.linux_ip, pair.prefix);
        ip(&["-n", &b, "addr", "add", &cidr, "dev", &vb])?;
        for (ns, dev) in [(&a, "lo"), (&b, "lo"), (&a, va.as_str()), (&b, vb.as_str())] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        pair.mac_a = pair.mac_of(&a, &va)?;
        pair.mac_b = pair.mac_of(&b, &vb)?;
        Ok(pair)
    }

    fn mac_of(&self, ns: &str, dev: &str) -> Result<[u8; 6], String> {
        let out = ip(&["-n", ns, "-o", "link", "show", dev])?;
        out.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .and_then(parse_mac)
            .ok_or_else(|| format!("no MAC address for {dev} in `{out}`"))
    }

    /// A command that runs `args` inside namespace `ns` (`ip netns exec NS ARGS...`).
    pub fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    /// Runs `args` inside `ns` and returns its stdout; an error carries its stderr.
    pub fn run(&self, ns: &str, args: &[&str]) -> Result<String, String> {
        run(&mut self.exec(ns, args))
    }

    /// Runs a shell command line inside `ns`.
    pub fn sh(&self, ns: &str, line: &str) -> Result<String, String> {
        self.run(ns, &["sh", "-c", line])
    }

    /// Moves the calling thread into namespace `ns` until the guard drops, so the sockets it
    /// opens meanwhile live there (they stay there afterwards).
    pub fn enter(&self, ns: &str) -> Result<NsGuard, String> {
        NsGuard::enter(ns)
    }

    /// Runs `f` on a new thread inside namespace `ns`.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let ns = ns.to_owned();
        std::thread::spawn(move || {
            let _g = NsGuard::enter(&ns).unwrap_or_else(|e| panic!("{e}"));
            f()
        })
    }

    /// Turns the transmit checksum offload of `dev` in `ns` on or off (the `ethtool -K DEV
    /// tx on|off` ioctl), so that frames Linux sends carry complete checksums on the wire.
    pub fn set_tx_checksum(&self, ns: &str, dev: &str, on: bool) -> Result<(), String> {
        let dev = dev.to_owned();
        self.spawn_in(ns, move || set_tx_checksum_here(&dev, on))
            .join()
            .map_err(|_| "the ethtool thread panicked".to_string())?
    }
}

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

const ETHTOOL_STXCSUM: u32 = 0x17;

fn set_tx_checksum_here(dev: &str, on: bool) -> Result<(), String> {
    // SAFETY: plain system call with constant arguments.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a fresh descriptor owned from here on.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let mut val = EthtoolValue {
        cmd: ETHTOOL_STXCSUM,
        data: u32::from(on),
    };
    // SAFETY: `ifreq` is a plain C struct; all-zero bytes are valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(dev.bytes().take(15)) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut val as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the name and the `ethtool_value` that `ifru_data` points at;
    // both live until the call returns.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if r != 0 {
        return Err(format!(
            "SIOCETHTOOL ETHTOOL_STXCSUM on {dev}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth, and so the pair.
        for ns in self.made.drain(..).rev() {
            if let Err(e) = ip(&["netns", "delete", &ns]) {
                eprintln!("warning: could not delete network namespace {ns}: {e}");
            }
        }
    }
}

/// The calling thread's stay in another network namespace; it returns on drop.
pub struct NsGuard {
    home: OwnedFd,
    _not_send: PhantomData<*const ()>,
}

fn open_ns(path: &str) -> Result<OwnedFd, String> {
    std::fs::File::open(path)
        .map(OwnedFd::from)
        .map_err(|e| format!("open {path}: {e}"))
}

fn setns(fd: &OwnedFd, what: &str) -> Result<(), String> {
    // SAFETY: `fd` is an open namespace file; CLONE_NEWNET only switches this thread's
    // network namespace, which is allowed in a multi-threaded process.
    let r = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(format!(
            "setns into {what}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

impl NsGuard {
    fn enter(ns: &str) -> Result<NsGuard, String> {
        let home = open_ns("/proc/thread-self/ns/net")?;
        let target = open_ns(&format!("/run/netns/{ns}"))?;
        setns(&target, ns)?;
        Ok(NsGuard {
            home,
            _not_send: PhantomData,
        })
    }
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        if let Err(e) = setns(&self.home, "the thread's original namespace") {
            eprintln!("warning: {e}");
        }
    }
}
