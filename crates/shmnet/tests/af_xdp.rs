//! `--driver af_xdp:IFACE` against the Linux kernel over a veth pair, the kernel keeping its
//! own addresses on shmnet's interface: ping, UDP echo and TCP both ways through AF_XDP in
//! the inline structure and in the server structure (driver polled and as a process of its
//! own); `ping -6` to a dual-stack server; every queue of a four-queue pair served; a link
//! set down and an interface deleted and made again ridden out; the steering program gone
//! from the interface when shmnet stops and when it is killed; the errors a user meets in
//! one line.
//!
//! ```text
//!   namespace A                               namespace B
//!   v0: the kernel at 10.97.N.3/24, and        v1: 10.97.N.2/24, checksum offload off
//!       shmnet at 10.97.N.1 through AF_XDP         (ping, nc, python3)
//! ```
//!
//! The peer's transmit checksum offload is off: frames a veth peer sends with offload leave
//! their UDP and TCP checksums unfinished, and XDP sees them so (docs/xdp.md).
//!
//! Needs root, network namespaces, ping, nc, python3 and ethtool: skips loudly without them,
//! fails under `CI=true`.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

#[path = "common/party.rs"]
mod party;
use party::Party;
// Its `Netns` is one namespace; this bed needs two, made with its `ip`.
#[allow(dead_code)]
#[path = "common/netns.rs"]
mod netns;
use netns::ip;
#[path = "common/served.rs"]
mod served;
use served::{random_file, run_ok};
use std::time::{Duration, Instant};

/// How long a party may take to start, stop or finish a transfer (only a hang reaches it).
const LIMIT: Duration = Duration::from_secs(60);

static SERIAL: Mutex<()> = Mutex::new(());

/// The two namespaces and the veth pair between them; removed when dropped.
struct Bed {
    a: String,
    b: String,
    subnet: u8,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Bed {
    /// A bed whose veth pair has `queues` receive and transmit queues on each end.
    fn new(tag: &str, queues: u32) -> Option<Bed> {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let pid = std::process::id();
        let subnet = (pid % 200 + 20) as u8;
        let bed = Bed {
            a: format!("shmnet-xdp-a-{pid}-{tag}"),
            b: format!("shmnet-xdp-b-{pid}-{tag}"),
            subnet,
            _serial: serial,
        };
        for ns in [&bed.a, &bed.b] {
            let _ = ip(&["netns", "del", ns]);
            if !ip(&["netns", "add", ns]) {
                return None;
            }
        }
        bed.link(queues).then_some(bed)
    }

    /// Makes the veth pair (`queues` queues each way on both ends), addresses it, and
    /// turns the peer's checksum offload off; whether all of it worked.
    fn link(&self, queues: u32) -> bool {
        let q = queues.to_string();
        ip(&[
            "link",
            "add",
            "v0",
            "netns",
            &self.a,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            "v1",
            "netns",
            &self.b,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
        ]) && ip(&[
            "-n",
            &self.a,
            "addr",
            "add",
            &self.kernel_cidr(),
            "dev",
            "v0",
        ]) && ip(&[
            "-n",
            &self.b,
            "addr",
            "add",
            &self.linux_cidr(),
            "dev",
            "v1",
        ]) && ip(&["-n", &self.a, "link", "set", "v0", "up"])
            && ip(&["-n", &self.b, "link", "set", "v1", "up"])
            && ip(&["-n", &self.a, "link", "set", "lo", "up"])
            && self
                .cmd(&self.b, "ethtool")
                .args(["-K", "v1", "tx", "off"])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
    }

    fn shm(&self) -> String {
        format!("10.97.{}.1", self.subnet)
    }
    fn linux(&self) -> String {
        format!("10.97.{}.2", self.subnet)
    }
    fn kernel(&self) -> String {
        format!("10.97.{}.3", self.subnet)
    }
    fn kernel_cidr(&self) -> String {
        format!("{}/24", self.kernel())
    }
    fn linux_cidr(&self) -> String {
        format!("{}/24", self.linux())
    }

    fn cmd(&self, ns: &str, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, prog]);
        c
    }

    fn shmnet(&self, args: &[&str], runtime: &std::path::Path) -> Command {
        let mut c = self.cmd(&self.a, env!("CARGO_BIN_EXE_shmnet"));
        c.args(args).env("SHMNET_RUNTIME_DIR", runtime);
        c
    }

    /// `v0`'s MAC address.
    fn v0_mac(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.a, "link", "show", "v0"])
            .output()
            .expect("ip link show");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .unwrap_or_else(|| panic!("no MAC in {text}"))
            .to_owned()
    }

    /// Whether an XDP program is attached to `v0`.
    fn xdp_attached(&self) -> bool {
        let out = Command::new("ip")
            .args(["-n", &self.a, "link", "show", "v0"])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    }

    /// Waits (10 s at most) until `to` answers one ping: a server that just said it started
    /// binds its socket at its first burst, and until then the steering program passes
    /// frames for it to the kernel (an instant, or as long as the kernel takes to let go of
    /// the queue a killed server held).
    fn wait_answers(&self, to: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.ping(to, 1).is_err() {
            assert!(Instant::now() < deadline, "{to} never answered a ping");
        }
    }

    /// Pings `to` from B `n` times; whether every echo was answered.
    fn ping(&self, to: &str, n: u32) -> Result<(), String> {
        let out = self
            .cmd(&self.b, "ping")
            .args(["-n", "-c", &n.to_string(), "-i", "0.2", "-W", "2", to])
            .output()
            .expect("run ping");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains(&format!("{n} packets transmitted, {n} received")) {
            Ok(())
        } else {
            Err(text)
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn require(test: &str) -> Option<Bed> {
    require_queues(test, 1)
}

fn require_queues(test: &str, queues: u32) -> Option<Bed> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        shmnet_testkit::skip(test, "needs root (network namespaces, AF_XDP)");
        return None;
    }
    for (prog, arg) in [
        ("ping", "-V"),
        ("nc", "-h"),
        ("python3", "-V"),
        ("ethtool", "--version"),
    ] {
        if Command::new(prog)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            shmnet_testkit::skip(test, &format!("needs {prog} (scripts/setup installs it)"));
            return None;
        }
    }
    let bed = Bed::new(test.get(..12).unwrap_or(test), queues);
    if bed.is_none() {
        shmnet_testkit::skip(test, "cannot make two network namespaces with a veth pair");
    }
    bed
}

/// SIGTERM, then the exit status and what it printed on stdout.
fn stop(mut p: Party) -> (std::process::ExitStatus, String) {
    p.signal(libc::SIGTERM);
    let status = p.wait();
    (status, p.out())
}

fn runtime(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("shmnet-xdp-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // shmnet keeps its runtime directory private, and refuses one open to others.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// A UDP datagram from B to shmnet's echo on port 7 comes back.
fn udp_echo(bed: &Bed) {
    let py = "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
              s.settimeout(2)\nfor i in range(5):\n  s.sendto(b'xdp-echo',(sys.argv[1],7))\n  \
              try:\n    print(s.recv(100).decode()); break\n  except socket.timeout: pass\n";
    let mut c = bed.cmd(&bed.b, "python3");
    c.args(["-c", py, &bed.shm()]);
    let out = run_ok(c, "UDP echo from Linux", LIMIT);
    assert_eq!(out.trim(), "xdp-echo", "the echo came back");
}

/// B sends `bytes` random bytes to shmnet's TCP echo on port 8 and reads them back at
/// once; they came back whole.
fn tcp_echo(bed: &Bed, bytes: usize) {
    let py = r#"
import socket, os, sys, threading, hashlib
data = os.urandom(int(sys.argv[2]))
s = socket.create_connection((sys.argv[1], 8), timeout=30)
got = bytearray()
def reader():
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got.extend(b)
t = threading.Thread(target=reader); t.start()
s.sendall(data); s.shutdown(socket.SHUT_WR); t.join()
print("ok" if hashlib.sha256(got).digest() == hashlib.sha256(data).digest() else f"differs {len(got)}")
"#;
    let mut c = bed.cmd(&bed.b, "python3");
    c.args(["-c", py, &bed.shm(), &bytes.to_string()]);
    assert_eq!(run_ok(c, "TCP echo", LIMIT).trim(), "ok");
}

/// Linux's `nc` sends `file` to shmnet's port `port` (until it connects).
fn nc_send(bed: &Bed, file: &std::path::Path, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut nc = bed.cmd(&bed.b, "nc");
        nc.args(["-N", &bed.shm(), &port.to_string()])
            .stdin(std::fs::File::open(file).unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if nc.status().expect("run nc").success() {
            return;
        }
        assert!(Instant::now() < deadline, "nc never connected");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Free and total buffers over the pools of a report's `window.pools.pools`.
fn free_and_total(pools: &serde_json::Value) -> (u64, u64) {
    pools.as_array().unwrap().iter().fold((0, 0), |(f, t), p| {
        (f + u(p, &["free"]), t + u(p, &["buffers"]))
    })
}

fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_u64()
        .unwrap_or_else(|| panic!("no {path:?} in {v}"))
}

/// Ping, UDP echo, and TCP both ways through AF_XDP in the server structure (the driver
/// polled by the server, and as a process of its own), while the kernel keeps answering
/// on its own address on the same interface; the steering program leaves with the server,
/// and with a driver process killed with SIGKILL (the server then stops, saying so).
#[test]
fn af_xdp_carries_ping_udp_and_tcp_beside_the_kernels_own_address() {
    const TEST: &str = "af_xdp_carries_ping_udp_and_tcp_beside_the_kernels_own_address";
    let Some(bed) = require(TEST) else { return };
    const BYTES: usize = 16 << 20;
    for placement in ["polled", "process"] {
        let rt = runtime(placement);
        let sock = rt.join("s.sock");
        let sock_s = sock.to_str().unwrap().to_string();
        let cidr = format!("{}/24", bed.shm());
        let mut server = Party::spawn(&mut bed.shmnet(
            &[
                "serve",
                "--structure",
                "server",
                "--placement",
                placement,
                "--driver",
                "af_xdp:v0",
                "--ip",
                &cidr,
                "--socket",
                &sock_s,
            ],
            &rt,
        ));
        server.wait_for("control socket");
        assert!(
            bed.xdp_attached(),
            "{placement}: the steering program is on v0"
        );
        let mut echo = Party::spawn(
            &mut bed.shmnet(&["app", "echo", "--port", "7", "--socket", &sock_s], &rt),
        );
        echo.wait_for("bound");
        bed.wait_answers(&bed.shm());
        bed.ping(&bed.shm(), 5)
            .unwrap_or_else(|e| panic!("{placement}: ping shmnet: {e}"));
        bed.ping(&bed.kernel(), 3)
            .unwrap_or_else(|e| panic!("{placement}: the kernel's own address: {e}"));
        // The echo application may still be binding: the client retries for 10 s.
        udp_echo(&bed);

        // Linux → shmnet: nc into `shmnet app recv-file`.
        let sent = random_file(BYTES, &format!("xdp-{placement}"));
        let got = rt.join("got");
        let mut recv = bed.shmnet(
            &[
                "app",
                "recv-file",
                "9",
                got.to_str().unwrap(),
                "--socket",
                &sock_s,
            ],
            &rt,
        );
        recv.stdout(Stdio::null()).stderr(Stdio::null());
        let mut recv = recv.spawn().expect("recv-file");
        nc_send(&bed, &sent, 9);
        let deadline = Instant::now() + LIMIT;
        while recv.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{placement}: recv-file did not finish"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            std::fs::read(&got).unwrap() == std::fs::read(&sent).unwrap(),
            "{placement}: the file Linux sent arrived intact"
        );

        // shmnet → Linux: `shmnet app send-file` to nc -l.
        let back = rt.join("back");
        let mut listen = bed.cmd(&bed.b, "nc");
        listen
            .args(["-l", "-N", &bed.linux(), "5001"])
            .stdout(std::fs::File::create(&back).unwrap())
            .stderr(Stdio::null());
        let mut listen = listen.spawn().expect("nc -l");
        std::thread::sleep(Duration::from_millis(300));
        let to = format!("{}:5001", bed.linux());
        run_ok(
            bed.shmnet(
                &[
                    "app",
                    "send-file",
                    &to,
                    sent.to_str().unwrap(),
                    "--socket",
                    &sock_s,
                ],
                &rt,
            ),
            "send-file to Linux",
            LIMIT,
        );
        let deadline = Instant::now() + LIMIT;
        while listen.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{placement}: nc -l did not finish"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            std::fs::read(&back).unwrap() == std::fs::read(&sent).unwrap(),
            "{placement}: the file shmnet sent arrived intact"
        );
        let _ = std::fs::remove_file(&sent);

        let out = run_ok(
            bed.shmnet(&["stats", "--json", "--socket", &sock_s], &rt),
            "shmnet stats",
            LIMIT,
        );
        let st: serde_json::Value = serde_json::from_str(&out).expect("stats JSON");
        let drv = &st["driver"]["driver"];
        let xdp = &drv["xdp"];
        assert!(
            matches!(xdp["mode"].as_str(), Some("native" | "generic")),
            "{placement}: {xdp}"
        );
        assert!(
            u(xdp, &["fill_level"]) > 0,
            "{placement}: the fill ring is stocked: {xdp}"
        );
        assert!(u(drv, &["rx_frames"]) > (BYTES / 1500) as u64, "{drv}");
        assert_eq!(u(drv, &["rx_bad_ring"]), 0, "{drv}");
        drop(echo);
        if placement == "process" {
            // kill -9 of the driver process: the kernel detaches the program with its link
            // and takes its UMEM back; the server says the driver went away and stops.
            let pid = server.child.id();
            let children =
                std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
            let driver: i32 = children
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .expect("the driver process");
            // SAFETY: a signal to the server's child, which the server has not reaped yet.
            assert_eq!(unsafe { libc::kill(driver, libc::SIGKILL) }, 0);
            let deadline = Instant::now() + Duration::from_secs(10);
            while bed.xdp_attached() {
                assert!(
                    Instant::now() < deadline,
                    "the program outlived its killed driver"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let deadline = Instant::now() + LIMIT;
            let status = loop {
                if let Some(s) = server.child.try_wait().unwrap() {
                    break s;
                }
                assert!(Instant::now() < deadline, "the server outlived its driver");
                std::thread::sleep(Duration::from_millis(20));
            };
            std::thread::sleep(Duration::from_millis(100));
            assert!(!status.success(), "exit {status}");
            assert!(
                server.err().contains("the driver went away"),
                "{}",
                server.err()
            );
        } else {
            let (status, _) = stop(server);
            assert!(status.success(), "{placement}: exit {status}");
        }
        assert!(
            !bed.xdp_attached(),
            "{placement}: the program left with the server"
        );
        bed.ping(&bed.kernel(), 2)
            .unwrap_or_else(|e| panic!("{placement}: the kernel after shmnet: {e}"));
        let _ = std::fs::remove_dir_all(&rt);
    }
}

/// The inline structure through AF_XDP: ping and a TCP echo checked byte for byte, every pool
/// buffer back at the end (the fill ring's included); a `kill -9` leaves the interface to
/// the kernel, and a new server takes it again.
#[test]
fn af_xdp_inline_gives_every_buffer_back_and_a_killed_server_leaves_the_interface() {
    const TEST: &str =
        "af_xdp_inline_gives_every_buffer_back_and_a_killed_server_leaves_the_interface";
    let Some(bed) = require(TEST) else { return };
    let rt = runtime("inline");
    let cidr = format!("{}/24", bed.shm());
    let serve = [
        "serve",
        "--driver",
        "af_xdp:v0",
        "--ip",
        &cidr,
        "--tcp-echo",
        "8",
        "--json",
    ];
    let mut server = Party::spawn(&mut bed.shmnet(&serve, &rt));
    server.wait_for("Ctrl-C to stop");
    assert!(server.err().contains("(af_xdp)"), "{}", server.err());
    bed.wait_answers(&bed.shm());
    bed.ping(&bed.shm(), 3).expect("ping shmnet");
    tcp_echo(&bed, 8 << 20);
    let (status, out) = stop(server);
    assert!(status.success(), "exit {status}");
    let report: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("report");
    let pools = &report["window"]["pools"]["pools"];
    let (free, total) = free_and_total(pools);
    assert_eq!(
        free, total,
        "every buffer is back, the fill ring's too: {pools}"
    );
    assert!(!bed.xdp_attached());

    // kill -9: the kernel detaches the program with the dead process's link.
    let mut server = Party::spawn(&mut bed.shmnet(&serve, &rt));
    server.wait_for("Ctrl-C to stop");
    assert!(bed.xdp_attached());
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while bed.xdp_attached() {
        assert!(
            Instant::now() < deadline,
            "the program outlived its killed server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    bed.ping(&bed.kernel(), 2)
        .expect("the kernel keeps its address");
    let mut again = Party::spawn(&mut bed.shmnet(&serve, &rt));
    again.wait_for("Ctrl-C to stop");
    bed.wait_answers(&bed.shm());
    bed.ping(&bed.shm(), 2)
        .expect("a new server answers every echo");
    let (status, _) = stop(again);
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&rt);
}

/// On an interface with four queues, `af_xdp:v0` serves every one: the peer's flows,
/// spread over the queues by its transmit hash (veth's RSS), are all answered, and each
/// queue's frames are counted on its own. `af_xdp:v0:2` serves that queue alone: the frames
/// hashed to it reach shmnet, and those for shmnet on the others go to the kernel, which
/// drops them.
#[test]
fn af_xdp_serves_every_queue_of_a_multiqueue_interface() {
    const TEST: &str = "af_xdp_serves_every_queue_of_a_multiqueue_interface";
    const QUEUES: u32 = 4;
    const FLOWS: usize = 32;
    let Some(bed) = require_queues(TEST, QUEUES) else {
        return;
    };
    let rt = runtime("queues");
    let cidr = format!("{}/24", bed.shm());
    let mut server = Party::spawn(&mut bed.shmnet(
        &[
            "serve",
            "--driver",
            "af_xdp:v0",
            "--ip",
            &cidr,
            "--echo",
            "7",
            "--tcp-echo",
            "8",
            "--json",
        ],
        &rt,
    ));
    server.wait_for("Ctrl-C to stop");
    bed.wait_answers(&bed.shm());
    // Each flow is its own socket (its own source port, so its own hash and queue); each
    // sends until its echo comes back, and says how many tries that took.
    let py = r#"
import socket, sys
flows = int(sys.argv[2])
answered = 0
for f in range(flows):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    msg = b'flow-%d' % f
    for _ in range(5):
        s.sendto(msg, (sys.argv[1], 7))
        try:
            if s.recv(100) == msg:
                answered += 1
                break
        except socket.timeout:
            pass
print(answered)
"#;
    let mut c = bed.cmd(&bed.b, "python3");
    c.args(["-c", py, &bed.shm(), &FLOWS.to_string()]);
    let answered: usize = run_ok(c, "UDP echoes from many flows", LIMIT)
        .trim()
        .parse()
        .expect("a count");
    assert_eq!(answered, FLOWS, "every flow's echo came back");
    // And a TCP stream, checked byte for byte, on whichever queue its hash picks.
    tcp_echo(&bed, 4 << 20);
    let (status, out) = stop(server);
    assert!(status.success(), "exit {status}");
    let report: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("report");
    let xdp = &report["driver_stats"]["xdp"];
    let queues = xdp["queues"].as_array().unwrap_or_else(|| panic!("{xdp}"));
    assert_eq!(
        queues.iter().map(|q| u(q, &["queue"])).collect::<Vec<_>>(),
        (0..u64::from(QUEUES)).collect::<Vec<_>>(),
        "every queue is served: {xdp}"
    );
    eprintln!("every queue served: {}", xdp["queues"]);
    let busy = queues.iter().filter(|q| u(q, &["rx_frames"]) > 0).count();
    // 32 flows all hashed onto one of four queues: a chance of 4 × 4^-32.
    assert!(busy >= 2, "the flows arrived on several queues: {xdp}");
    let pools = &report["window"]["pools"]["pools"];
    let (free, total) = free_and_total(pools);
    assert_eq!(free, total, "every fill ring's buffers are back: {pools}");

    // One queue only: flows hashed elsewhere are the kernel's (which does not hold the
    // address), so fewer are answered, and only queue 2 is counted.
    let mut server = Party::spawn(&mut bed.shmnet(
        &[
            "serve",
            "--driver",
            "af_xdp:v0:2",
            "--ip",
            &cidr,
            "--echo",
            "7",
            "--json",
        ],
        &rt,
    ));
    server.wait_for("Ctrl-C to stop");
    let py_one = py_flows_once();
    let mut c = bed.cmd(&bed.b, "python3");
    c.args(["-c", &py_one, &bed.shm(), &FLOWS.to_string()]);
    let answered: usize = run_ok(c, "UDP echoes to one queue", LIMIT)
        .trim()
        .parse()
        .expect("a count");
    let (status, out) = stop(server);
    assert!(status.success(), "exit {status}");
    let report: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("report");
    let xdp = &report["driver_stats"]["xdp"];
    let queues = xdp["queues"].as_array().unwrap_or_else(|| panic!("{xdp}"));
    eprintln!(
        "queue 2 alone: {answered} of {FLOWS} flows answered; {}",
        xdp["queues"]
    );
    assert_eq!(queues.len(), 1, "{xdp}");
    assert_eq!(u(&queues[0], &["queue"]), 2, "{xdp}");
    // 32 flows, each hashed to one of four queues: none on queue 2 has a chance of about
    // 10^-4. (Few or none are answered: shmnet's ARP request for the peer is answered on
    // whichever queue the peer's hash picks, usually not queue 2 — docs/xdp.md says how to
    // steer a NIC's traffic to one queue.)
    assert!(
        u(&queues[0], &["rx_frames"]) > 0,
        "the frames hashed to queue 2 reached shmnet: {xdp}"
    );
    assert!(
        answered < FLOWS,
        "with one queue of four served, some flows went unanswered ({answered} of {FLOWS})"
    );
    let _ = std::fs::remove_dir_all(&rt);
}

/// The interface set down and up, then deleted and made again: the server rides both out
/// (reopening the new interface, saying so on stderr), answers again after each, and ends
/// with every buffer back; with `--give-up-after 1` and the interface gone for good it
/// gives up and exits non-zero, saying why.
#[test]
fn af_xdp_rides_out_a_link_set_down_and_an_interface_deleted_and_made_again() {
    const TEST: &str = "af_xdp_rides_out_a_link_set_down_and_an_interface_deleted_and_made_again";
    let Some(bed) = require(TEST) else { return };
    let rt = runtime("reopen");
    let cidr = format!("{}/24", bed.shm());
    let mut server = Party::spawn(&mut bed.shmnet(
        &[
            "serve",
            "--driver",
            "af_xdp:v0",
            "--ip",
            &cidr,
            "--echo",
            "7",
            "--json",
        ],
        &rt,
    ));
    server.wait_for("Ctrl-C to stop");
    bed.wait_answers(&bed.shm());

    assert!(ip(&["-n", &bed.a, "link", "set", "v0", "down"]));
    assert!(bed.ping(&bed.shm(), 1).is_err(), "answered while down");
    assert!(ip(&["-n", &bed.a, "link", "set", "v0", "up"]));
    bed.wait_answers(&bed.shm());
    udp_echo(&bed);

    assert!(ip(&["-n", &bed.a, "link", "del", "v0"]));
    server.wait_for("the interface went away");
    assert!(bed.link(1), "make the pair again");
    server.wait_for("the interface is back");
    bed.wait_answers(&bed.shm());
    udp_echo(&bed);
    assert!(bed.xdp_attached(), "the program is on the new interface");

    let (status, out) = stop(server);
    assert!(status.success(), "exit {status}");
    let report: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("report");
    let d = &report["driver_stats"];
    assert_eq!(d["link"], "up", "{d}");
    assert_eq!(u(d, &["reopens"]), 1, "{d}");
    assert!(u(d, &["link_down_events"]) >= 2, "set down, then gone: {d}");
    let pools = &report["window"]["pools"]["pools"];
    let (free, total) = free_and_total(pools);
    assert_eq!(
        free, total,
        "every buffer is back across the reopen: {pools}"
    );

    // Gone for good: the driver gives up after --give-up-after. (The server before kept the
    // first interface's MAC; this one answers with the new interface's, which the peer
    // must learn afresh.)
    assert!(ip(&["-n", &bed.b, "neigh", "flush", "dev", "v1"]));
    let mut server = Party::spawn(&mut bed.shmnet(
        &[
            "serve",
            "--driver",
            "af_xdp:v0",
            "--ip",
            &cidr,
            "--echo",
            "7",
            "--give-up-after",
            "1",
        ],
        &rt,
    ));
    server.wait_for("Ctrl-C to stop");
    bed.wait_answers(&bed.shm());
    assert!(ip(&["-n", &bed.a, "link", "del", "v0"]));
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the server never gave up");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(!status.success(), "exit {status}");
    assert!(server.err().contains("giving up after"), "{}", server.err());
    let _ = std::fs::remove_dir_all(&rt);
}

/// A Python program that sends one datagram on each of `argv[2]` flows to `argv[1]`:7 (ARP
/// resolved first by a flow that retries), and prints how many were answered.
fn py_flows_once() -> String {
    r#"
import socket, sys
flows = int(sys.argv[2])
answered = 0
for f in range(flows):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.3)
    msg = b'one-%d' % f
    s.sendto(msg, (sys.argv[1], 7))
    try:
        if s.recv(100) == msg:
            answered += 1
    except socket.timeout:
        pass
print(answered)
"#
    .to_owned()
}

/// A dual-stack server through AF_XDP: `ping -6` from Linux reaches shmnet's IPv6 address
/// (the neighbour solicitation for it steered to shmnet, answered by its IPv6 side) while
/// the kernel keeps answering on its own IPv6 address on the same interface, and IPv4 goes
/// on beside both.
#[test]
fn af_xdp_carries_ipv6_beside_the_kernels_own_ipv6_address() {
    const TEST: &str = "af_xdp_carries_ipv6_beside_the_kernels_own_ipv6_address";
    let Some(bed) = require(TEST) else { return };
    let v6 = |host: u8| format!("fd00:97:{}::{host}", bed.subnet);
    assert!(ip(&[
        "-n",
        &bed.a,
        "addr",
        "add",
        &format!("{}/64", v6(3)),
        "dev",
        "v0",
        "nodad"
    ]));
    assert!(ip(&[
        "-n",
        &bed.b,
        "addr",
        "add",
        &format!("{}/64", v6(2)),
        "dev",
        "v1",
        "nodad"
    ]));
    let rt = runtime("ipv6");
    let cidr = format!("{}/24", bed.shm());
    let cidr6 = format!("{}/64", v6(1));
    let mut server = Party::spawn(&mut bed.shmnet(
        &[
            "serve",
            "--driver",
            "af_xdp:v0",
            "--ip",
            &cidr,
            "--ip6",
            &cidr6,
            "--echo",
            "7",
            "--json",
        ],
        &rt,
    ));
    server.wait_for("Ctrl-C to stop");
    bed.wait_answers(&bed.shm());
    let ping6 = |to: &str, n: u32| {
        let out = bed
            .cmd(&bed.b, "ping")
            .args(["-6", "-n", "-c", &n.to_string(), "-i", "0.2", "-W", "2", to])
            .output()
            .expect("run ping -6");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains(&format!("{n} packets transmitted, {n} received"))
            .then_some(())
            .ok_or(text)
    };
    // The first echo may go before the neighbour entry is made.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ping6(&v6(1), 1).is_err() {
        assert!(
            Instant::now() < deadline,
            "shmnet's IPv6 address never answered"
        );
    }
    ping6(&v6(1), 5).unwrap_or_else(|e| panic!("ping -6 shmnet: {e}"));
    ping6(&v6(3), 3).unwrap_or_else(|e| panic!("ping -6 the kernel's own address: {e}"));
    bed.ping(&bed.shm(), 3).expect("IPv4 beside it");
    udp_echo(&bed);
    let (status, out) = stop(server);
    assert!(status.success(), "exit {status}");
    let report: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("report");
    let pools = &report["window"]["pools"]["pools"];
    let (free, total) = free_and_total(pools);
    assert_eq!(free, total, "every buffer is back: {pools}");
    let _ = std::fs::remove_dir_all(&rt);
}

/// What a user gets wrong is refused at start, in one line that says what to do.
#[test]
fn af_xdp_refusals_say_what_to_do() {
    const TEST: &str = "af_xdp_refusals_say_what_to_do";
    let Some(bed) = require(TEST) else { return };
    let rt = runtime("refusals");
    let cidr = format!("{}/24", bed.shm());
    for (driver, extra, says) in [
        (
            "af_xdp:nosuch0",
            &[][..] as &[&str],
            "no interface named \"nosuch0\"",
        ),
        ("af_xdp:v0:7", &[][..], "has no receive queue 7"),
        ("xdp:v0", &[][..], "unknown driver"),
    ] {
        let mut c = bed.shmnet(
            &[
                "serve",
                "--driver",
                driver,
                "--ip",
                &cidr,
                "--echo",
                "7",
                "--duration",
                "3",
            ],
            &rt,
        );
        c.args(extra);
        let out = c.output().expect("run shmnet serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{driver} {extra:?} started: {err}");
        assert!(err.contains(says), "{driver} {extra:?}: {err}");
        assert!(
            !bed.xdp_attached(),
            "{driver}: nothing left on the interface"
        );
    }
    let _ = std::fs::remove_dir_all(&rt);
}

/// Blasts `size`-byte UDP datagrams from namespace `ns` to `to` for `secs` with `sendmmsg`
/// (64 a call); returns how many the kernel took.
fn blast(ns: &str, to: std::net::SocketAddrV4, size: usize, secs: f64) -> u64 {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("open the namespace");
        // SAFETY: setns on this thread only, with a namespace fd we hold open.
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(to).unwrap();
        let buf = vec![0x5au8; size];
        const BATCH: usize = 64;
        // SAFETY: plain C structs for which all-zero bytes are valid.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (v, m) in iov.iter_mut().zip(msgs.iter_mut()) {
            v.iov_base = buf.as_ptr() as *mut libc::c_void;
            v.iov_len = size;
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut sent = 0u64;
        while Instant::now() < end {
            // SAFETY: BATCH headers, each pointing at one iovec over `buf`, all live.
            let n = unsafe { libc::sendmmsg(s.as_raw_fd(), msgs.as_mut_ptr(), BATCH as u32, 0) };
            if n > 0 {
                sent += n as u64;
            }
        }
        sent
    })
    .join()
    .expect("sender")
}

/// The benchmark behind docs/benchmarks.md "af_xdp against af_packet": a Linux sender in
/// namespace B blasts UDP datagrams (64-byte frames, and full 1,514-byte frames) at an
/// inline shmnet UDP sink through each driver, the two drivers interleaved, three rounds;
/// and, as the baselines in the same run, at a Linux UDP socket on the kernel's own address
/// on the same interface, and at an XDP program that counts and drops every frame (the
/// ceiling: what `xdp-bench drop` measures). Prints received packets/s, Gbit/s and the
/// server's CPU per packet.
///
/// `cargo test --release -p shmnet --test af_xdp -- --ignored --nocapture`
#[test]
#[ignore = "a benchmark: run it by hand (see docs/benchmarks.md)"]
fn bench_af_xdp_against_af_packet() {
    const TEST: &str = "bench_af_xdp_against_af_packet";
    let Some(bed) = require(TEST) else { return };
    let rt = runtime("bench");
    let cidr = format!("{}/24", bed.shm());
    const SECS: f64 = 3.0;
    let mut rows: Vec<(String, usize, f64, f64, f64)> = Vec::new();
    for size in [18usize, 1472] {
        for round in 0..3 {
            let order: [&str; 2] = if round % 2 == 0 {
                ["af_packet:v0", "af_xdp:v0"]
            } else {
                ["af_xdp:v0", "af_packet:v0"]
            };
            for driver in order {
                let mut server = Party::spawn(&mut bed.shmnet(
                    &[
                        "serve", "--driver", driver, "--ip", &cidr, "--sink", "9", "--json",
                    ],
                    &rt,
                ));
                server.wait_for("Ctrl-C to stop");
                // ARP resolved before the clock starts (the first echo may wait for it).
                let _ = bed.ping(&bed.shm(), 3);
                let cpu0 = server.cpu();
                let to = std::net::SocketAddrV4::new(bed.shm().parse().unwrap(), 9);
                let sent = blast(&bed.b, to, size, SECS);
                let cpu = (server.cpu() - cpu0).as_secs_f64();
                let (_, out) = stop(server);
                let report: serde_json::Value =
                    serde_json::from_str(out.lines().last().unwrap_or_default()).unwrap();
                let got = u(&report, &["apps", "messages"]) as f64;
                if got == 0.0 {
                    println!("{driver}: nothing arrived: {}", report["driver_stats"]);
                    println!("stack: {}", report["stack"]);
                }
                let pps = got / SECS;
                let frame = (size + 42).max(60) as f64;
                let gbit = pps * frame * 8.0 / 1e9;
                let ns_per = cpu * 1e9 / got.max(1.0);
                println!(
                    "{driver:14} {size:5} B: sent {sent:9} got {got:9.0} ({:5.1} %) {pps:10.0} pps \
                     {gbit:6.3} Gbit/s, server {ns_per:7.0} ns CPU a packet",
                    100.0 * got / sent.max(1) as f64
                );
                rows.push((driver.to_string(), size, pps, gbit, ns_per));
            }
            // The kernel's own UDP socket on v0's kernel address, same sender.
            let at = bed.kernel();
            let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (c2, s2, ns) = (count.clone(), stop.clone(), bed.a.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let reader = std::thread::spawn(move || {
                use std::os::fd::AsRawFd;
                let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
                // SAFETY: setns on this thread only, with a namespace fd we hold open.
                assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
                let s = std::net::UdpSocket::bind(format!("{at}:9")).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                ready_tx.send(()).unwrap();
                let mut buf = [0u8; 2048];
                while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                    if s.recv(&mut buf).is_ok() {
                        c2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
            ready_rx.recv().unwrap();
            let to = std::net::SocketAddrV4::new(bed.kernel().parse().unwrap(), 9);
            let sent = blast(&bed.b, to, size, SECS);
            std::thread::sleep(Duration::from_millis(200));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap();
            let got = count.load(std::sync::atomic::Ordering::Relaxed) as f64;
            let pps = got / SECS;
            let gbit = pps * (size + 42).max(60) as f64 * 8.0 / 1e9;
            println!(
                "{:14} {size:5} B: sent {sent:9} got {got:9.0} ({:5.1} %) {pps:10.0} pps {gbit:6.3} Gbit/s",
                "kernel socket",
                100.0 * got / sent.max(1) as f64
            );
            rows.push(("kernel".into(), size, pps, gbit, f64::NAN));

            // The ceiling: an XDP program that counts and drops every frame (what
            // `xdp-bench drop` does), same sender, to a neighbour entry made permanent
            // (the program drops ARP too).
            let mac = bed.v0_mac();
            assert!(ip(&[
                "-n",
                &bed.b,
                "neigh",
                "replace",
                &bed.kernel(),
                "lladdr",
                &mac,
                "dev",
                "v1",
                "nud",
                "permanent"
            ]));
            let ns = bed.a.clone();
            let counter = std::thread::spawn(move || {
                use std::os::fd::AsRawFd;
                let f = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
                // SAFETY: setns on this thread only, with a namespace fd we hold open.
                assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
                // SAFETY: a NUL-terminated name.
                let ifindex = unsafe { libc::if_nametoindex(c"v0".as_ptr()) };
                shmnet_io::driver::af_xdp::program::DropCounter::attach("v0", ifindex)
                    .expect("attach the drop counter")
            })
            .join()
            .unwrap();
            let before = counter.count();
            let sent = blast(&bed.b, to, size, SECS);
            std::thread::sleep(Duration::from_millis(100));
            let got = (counter.count() - before) as f64;
            drop(counter);
            let pps = got / SECS;
            let gbit = pps * (size + 42).max(60) as f64 * 8.0 / 1e9;
            println!(
                "{:14} {size:5} B: sent {sent:9} got {got:9.0} ({:5.1} %) {pps:10.0} pps {gbit:6.3} Gbit/s",
                "XDP drop",
                100.0 * got / sent.max(1) as f64
            );
            rows.push(("ceiling".into(), size, pps, gbit, f64::NAN));
            assert!(ip(&[
                "-n",
                &bed.b,
                "neigh",
                "del",
                &bed.kernel(),
                "dev",
                "v1"
            ]));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!("\nmedians of three rounds:");
    for size in [18usize, 1472] {
        let pick = |d: &str, k: usize| {
            let mut v: Vec<f64> = rows
                .iter()
                .filter(|r| r.0.starts_with(d) && r.1 == size)
                .map(|r| [r.2, r.3, r.4][k])
                .collect();
            median(&mut v)
        };
        let (p, x, k) = (pick("af_packet", 0), pick("af_xdp", 0), pick("kernel", 0));
        let c = pick("ceiling", 0);
        println!(
            "{size:5} B: af_packet {p:9.0} pps {:5.0} ns/pkt | af_xdp {x:9.0} pps {:5.0} ns/pkt | \
             kernel socket {k:9.0} pps | XDP drop {c:9.0} pps | af_xdp/af_packet {:.2}x pps, \
             {:.2}x CPU a packet | af_xdp/ceiling {:.2}",
            pick("af_packet", 2),
            pick("af_xdp", 2),
            x / p,
            pick("af_xdp", 2) / pick("af_packet", 2),
            x / c
        );
    }
    let _ = std::fs::remove_dir_all(&rt);
}
