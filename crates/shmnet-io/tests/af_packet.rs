//! The `af_packet` driver against real Linux peers: a pair of network namespaces joined by a
//! veth pair, shmnet serving one end (a minimal serving loop written here: driver, stack and
//! application in one thread), the Linux kernel the other.
//!
//! Needs root, `ip`, and for some tests `ping` and `tshark`; without them each test skips
//! with a loud `SKIPPED:` message, or fails when `CI=true`. The refusal without privilege is
//! checked either way: as root, in a child that runs as `nobody`.

mod common;

use common::netns::{NetnsPair, require_commands, require_root_netns};
use shmnet_chan::{ChannelSpec, DriverPools, PoolSpec, Window};
use shmnet_io::driver::af_packet::{AfPacket, AfPacketError, AfPacketOptions};
use shmnet_io::driver::{Driver, RxFrame};
use shmnet_io::pool::ChanPool;
use shmnet_stack::{BufIdx, BufferPool, Config, EthernetAddress, Instant, Interface, NoHook};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The message sizes of the exchange: one byte-sized, one full frame, one in ten fragments.
const SIZES: [usize; 3] = [10, 1472, 14_792];

/// A recognisable payload of `len` bytes, different for each size and tag.
fn payload(len: usize, tag: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(len as u32) as u8 ^ tag)
        .collect()
}

/// shmnet in namespace A: the driver, the pools, the stack, and a serving loop.
struct Node {
    window: Window,
    dp: DriverPools,
    pool: ChanPool,
    iface: Interface,
    drv: AfPacket,
    t0: std::time::Instant,
    rx: Vec<RxFrame>,
    tx: Vec<BufIdx>,
    txu: Vec<u32>,
    total: u32,
}

impl Node {
    /// Opens the driver on `pair.veth_a`; the calling thread must be in namespace A.
    fn new(pair: &NetnsPair, opts: AfPacketOptions) -> Node {
        let window = Window::create(&ChannelSpec {
            rings: vec![],
            pools: PoolSpec {
                pools: 4,
                buffers_per_pool: 1024,
                data_size: 2048,
                ..PoolSpec::default()
            },
            ..ChannelSpec::default()
        })
        .expect("create the window");
        let dp = window.driver_pools().expect("driver pools");
        let pool = ChanPool::new(window.server_pools().expect("server pools"));
        let drv = AfPacket::open(&pair.veth_a, opts)
            .unwrap_or_else(|e| panic!("open af_packet:{}: {e}", pair.veth_a));
        assert_eq!(
            drv.mac(),
            pair.mac_a,
            "the driver reads the interface's MAC"
        );
        let iface = Interface::new(Config::new(
            EthernetAddress(drv.mac()),
            pair.shm_ip,
            pair.prefix,
        ));
        let total = window.buffers().geometry().total();
        Node {
            window,
            dp,
            pool,
            iface,
            drv,
            t0: std::time::Instant::now(),
            rx: Vec::new(),
            tx: Vec::new(),
            txu: Vec::new(),
            total,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.t0.elapsed().as_nanos() as u64)
    }

    /// Transmits what the stack emitted.
    fn flush(&mut self) {
        if self.tx.is_empty() {
            return;
        }
        self.txu.clear();
        self.txu.extend(self.tx.drain(..).map(|b| b.0));
        self.drv
            .tx_burst(&mut self.dp, &self.txu)
            .expect("tx_burst");
    }

    /// One turn of the serving loop; sleeps on the socket for up to `idle` when nothing came.
    fn step(&mut self, idle: Duration) -> usize {
        let n = self
            .drv
            .rx_burst(&mut self.dp, &mut self.rx, 64)
            .expect("rx_burst");
        let now = self.now();
        for f in self.rx.drain(..) {
            self.iface
                .receive(&mut self.pool, BufIdx(f.buf), now, &mut self.tx);
        }
        self.iface.poll(&mut self.pool, now, &mut self.tx);
        self.flush();
        self.pool.pools().drain_deferred(usize::MAX);
        if n == 0 && !idle.is_zero() {
            let fd = self.drv.rx_fd().expect("af_packet has an fd").as_raw_fd();
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live `pollfd`; poll only writes its `revents`.
            unsafe { libc::poll(&mut p, 1, idle.as_millis() as i32) };
        }
        n
    }

    /// Serves until `done` says so or `limit` passes; returns whether `done` did.
    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Node) -> bool) -> bool {
        let end = std::time::Instant::now() + limit;
        while std::time::Instant::now() < end {
            if done(self) {
                return true;
            }
            self.step(Duration::from_millis(5));
        }
        done(self)
    }

    /// Sends `data` from socket `h` to `to`.
    fn send(&mut self, h: shmnet_stack::SocketHandle, data: &[u8], to: SocketAddrV4) {
        let now = self.now();
        self.iface
            .udp_send_to(&mut self.pool, h, data, to, now, &mut self.tx)
            .unwrap_or_else(|e| panic!("udp_send_to of {} bytes: {e}", data.len()));
        self.flush();
    }

    /// Frees everything the stack holds and checks that every buffer is back.
    fn finish(mut self) {
        // Let frames in flight settle, then empty the ring and the stack.
        let settle = std::time::Instant::now() + Duration::from_millis(100);
        while std::time::Instant::now() < settle {
            self.step(Duration::from_millis(5));
        }
        self.iface.clear(&mut self.pool);
        self.pool.pools().drain_deferred(usize::MAX);
        let free = self.window.buffers().free_count();
        let st = self.drv.stats();
        eprintln!(
            "driver: {st:?}; checksums completed: {}",
            self.drv.csum_completed()
        );
        eprintln!("stack: {:?}", self.iface.stats());
        assert_eq!(
            st.rx_bad_ring, 0,
            "the kernel's ring headers were all sound"
        );
        assert_eq!(
            free,
            self.total,
            "every pool buffer is free again ({} of {} held)",
            self.total - free,
            self.total
        );
        assert_eq!(self.pool.free_count(), self.pool.total());
    }
}

/// Runs `ping` from namespace B at shmnet while serving; returns ping's output.
fn ping_from_b(pair: &NetnsPair, node: &mut Node, count: u32) -> String {
    let child = pair
        .exec(
            &pair.ns_b,
            &[
                "ping",
                "-n",
                "-c",
                &count.to_string(),
                "-i",
                "0.2",
                "-W",
                "2",
                &pair.shm_ip.to_string(),
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ping");
    let mut child = Some(child);
    let mut status = None;
    node.run_until(Duration::from_secs(30), |_| {
        if let Some(s) = child.as_mut().unwrap().try_wait().expect("wait for ping") {
            status = Some(s);
            return true;
        }
        false
    });
    let mut child = child.take().unwrap();
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("ping output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.is_some(), "ping did not finish in time:\n{text}");
    text
}

/// Linux (namespace B) sends each of `SIZES` to shmnet's port; checks each arrives intact.
fn linux_to_shmnet(pair: &NetnsPair, node: &mut Node, port: u16) {
    let h = node.iface.udp_bind_port(port).expect("bind in the stack");
    let (from, to) = (pair.linux_ip, SocketAddrV4::new(pair.shm_ip, port));
    let sender = pair.spawn_in(&pair.ns_b, move || {
        let s = UdpSocket::bind(SocketAddrV4::new(from, 0)).expect("bind in B");
        for (k, len) in SIZES.into_iter().enumerate() {
            s.send_to(&payload(len, 0xa5), to).expect("send from B");
            // Room for ARP on the first one, and an order the receiver can rely on.
            std::thread::sleep(Duration::from_millis(if k == 0 { 200 } else { 50 }));
        }
        s.local_addr().unwrap()
    });
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 65_536];
    node.run_until(Duration::from_secs(10), |n| {
        while let Some(info) = n
            .iface
            .udp_recv(&mut n.pool, h, &mut buf, &mut NoHook)
            .expect("udp_recv")
        {
            assert_eq!(info.len, info.msg_len, "the buffer held the whole message");
            got.push(buf[..info.len].to_vec());
        }
        got.len() >= SIZES.len()
    });
    let src = sender.join().expect("sender thread");
    let lens: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(
        lens,
        SIZES.to_vec(),
        "every datagram from {src} arrived, in order (stack: {:?}, driver: {:?})",
        node.iface.stats(),
        node.drv.stats()
    );
    for (m, len) in got.iter().zip(SIZES) {
        assert!(
            *m == payload(len, 0xa5),
            "the {len}-byte datagram is intact"
        );
    }
    node.iface
        .udp_close(&mut node.pool, h)
        .expect("close the socket");
}

/// shmnet sends each of `SIZES` to a Linux socket in namespace B; checks each arrives intact.
fn shmnet_to_linux(pair: &NetnsPair, node: &mut Node, port: u16) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let at = SocketAddrV4::new(pair.linux_ip, port);
    let receiver = pair.spawn_in(&pair.ns_b, move || {
        let s = UdpSocket::bind(at).expect("bind in B");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while got.len() < SIZES.len() {
            match s.recv_from(&mut buf) {
                Ok((n, from)) => got.push((buf[..n].to_vec(), from)),
                Err(e) => panic!("Linux received {} of {}: {e}", got.len(), SIZES.len()),
            }
        }
        got
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("receiver ready");
    let h = node.iface.udp_bind_port(0).expect("bind in the stack");
    let local = node.iface.udp_local_addr(h).unwrap();
    for len in SIZES {
        node.send(h, &payload(len, 0x3c), at);
    }
    node.run_until(Duration::from_secs(12), |_| receiver.is_finished());
    let got = receiver.join().expect("receiver thread");
    for ((m, from), len) in got.iter().zip(SIZES) {
        assert_eq!(m.len(), len, "datagrams arrive in order");
        assert!(
            *m == payload(len, 0x3c),
            "the {len}-byte datagram is intact"
        );
        assert_eq!(from.port(), local.port());
        assert_eq!(from.ip(), std::net::IpAddr::V4(pair.shm_ip));
    }
    node.iface
        .udp_close(&mut node.pool, h)
        .expect("close the socket");
}

fn setup(test: &str) -> Option<(NetnsPair, Node, common::netns::NsGuard)> {
    setup_with(test, AfPacketOptions::default())
}

fn setup_with(
    test: &str,
    opts: AfPacketOptions,
) -> Option<(NetnsPair, Node, common::netns::NsGuard)> {
    let pair = require_root_netns(test)?;
    let guard = pair.enter(&pair.ns_a).expect("enter namespace A");
    let node = Node::new(&pair, opts);
    Some((pair, node, guard))
}

#[test]
fn linux_pings_shmnet_and_every_echo_is_answered() {
    let test = "linux_pings_shmnet_and_every_echo_is_answered";
    if !require_commands(test, &[("ping", &["-V"], "iputils-ping")]) {
        return;
    }
    let Some((pair, mut node, _ns)) = setup(test) else {
        return;
    };
    let out = ping_from_b(&pair, &mut node, 5);
    if let Some(rtt) = out.lines().find(|l| l.starts_with("rtt")) {
        eprintln!("ping {}: {rtt}", pair.shm_ip);
    }
    assert!(
        out.contains("5 packets transmitted, 5 received, 0% packet loss"),
        "every echo answered:\n{out}"
    );
    assert_eq!(node.iface.stats().icmp_echo_replies, 5, "{out}");
    node.finish();
}

#[test]
fn linux_udp_sockets_send_to_shmnet_intact() {
    let Some((pair, mut node, _ns)) = setup("linux_udp_sockets_send_to_shmnet_intact") else {
        return;
    };
    linux_to_shmnet(&pair, &mut node, 7000);
    node.finish();
}

#[test]
fn shmnet_sends_to_linux_udp_sockets_intact() {
    let Some((pair, mut node, _ns)) = setup("shmnet_sends_to_linux_udp_sockets_intact") else {
        return;
    };
    shmnet_to_linux(&pair, &mut node, 7001);
    node.finish();
}

#[test]
fn a_full_ring_is_counted_as_device_drops() {
    // Two 4 KiB blocks of 2 KiB slots hold four frames; Linux sends many more while shmnet
    // is not looking.
    let opts = AfPacketOptions {
        rx_blocks: 2,
        rx_block_size: 4096,
        rx_frame_size: 2048,
        ..AfPacketOptions::default()
    };
    let Some((pair, mut node, _ns)) = setup_with("a_full_ring_is_counted_as_device_drops", opts)
    else {
        return;
    };
    let sent = 1000u64;
    let h = node.iface.udp_bind_port(7300).expect("bind");
    let (from, to) = (pair.linux_ip, SocketAddrV4::new(pair.shm_ip, 7300));
    let (warm_tx, warm_rx) = std::sync::mpsc::channel::<()>();
    let sender = pair.spawn_in(&pair.ns_b, move || {
        let s = UdpSocket::bind(SocketAddrV4::new(from, 0)).unwrap();
        s.send_to(b"warm-up", to).unwrap();
        warm_rx.recv().unwrap();
        for _ in 0..sent {
            s.send_to(&[7u8; 64], to).unwrap();
        }
    });
    let mut buf = vec![0u8; 2048];
    assert!(
        node.run_until(Duration::from_secs(5), |n| {
            n.iface
                .udp_recv(&mut n.pool, h, &mut buf, &mut NoHook)
                .unwrap()
                .is_some()
        }),
        "the warm-up datagram (and so ARP) went through"
    );
    let before = node.drv.stats();
    warm_tx.send(()).unwrap();
    sender.join().unwrap();
    let mut got = 0u64;
    node.run_until(Duration::from_millis(500), |n| {
        while n
            .iface
            .udp_recv(&mut n.pool, h, &mut buf, &mut NoHook)
            .unwrap()
            .is_some()
        {
            got += 1;
        }
        false
    });
    let st = node.drv.stats();
    let drops = st.rx_device_drops - before.rx_device_drops;
    eprintln!("sent {sent}, received {got}, device drops {drops}");
    assert!(got < sent, "a two-block ring cannot hold {sent} frames");
    assert!(drops > 0, "the kernel's drops are counted");
    assert!(
        got + drops >= sent,
        "every datagram is either received or counted as a device drop"
    );
    node.finish();
}

#[test]
fn open_errors_say_what_to_do() {
    let Some(pair) = require_root_netns("open_errors_say_what_to_do") else {
        return;
    };
    let _ns = pair.enter(&pair.ns_a).expect("enter namespace A");
    let msg = |r: Result<AfPacket, AfPacketError>| match r {
        Ok(_) => panic!("opened"),
        Err(e) => e.to_string(),
    };
    let e = msg(AfPacket::open("nosuch0", AfPacketOptions::default()));
    assert!(e.contains("no interface named \"nosuch0\""), "{e}");
    let e = msg(AfPacket::open("lo", AfPacketOptions::default()));
    assert!(e.contains("not an Ethernet device"), "{e}");
    pair.run(&pair.ns_a, &["ip", "link", "set", &pair.veth_a, "down"])
        .unwrap();
    let e = msg(AfPacket::open(&pair.veth_a, AfPacketOptions::default()));
    assert!(
        e.contains(&format!("`ip link set {} up`", pair.veth_a)),
        "{e}"
    );
}

/// Set in the environment of the unprivileged child [`without_privilege_the_error_says_what_is_needed`]
/// starts when run as root.
const UNPRIVILEGED_CHILD: &str = "SHMNET_TEST_UNPRIVILEGED_CHILD";

/// The user and group the child runs as: `nobody` and `nogroup` on Debian.
const NOBODY: u32 = 65534;

/// Whether this process may open packet sockets: root, or `CAP_NET_RAW` in its effective set.
fn may_open_packet_sockets() -> bool {
    const CAP_NET_RAW: u32 = 13;
    // SAFETY: `geteuid` has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapEff in /proc/self/status");
    root || cap_eff & (1 << CAP_NET_RAW) != 0
}

/// Without root or `CAP_NET_RAW` the driver is refused with an error naming what is needed.
/// Run as root (as CI runs), the check runs in a child: this test binary again, limited to
/// this test, as `nobody:nogroup` with no supplementary groups, so the unprivileged path is
/// tested wherever the suite runs.
#[test]
fn without_privilege_the_error_says_what_is_needed() {
    const TEST: &str = "without_privilege_the_error_says_what_is_needed";
    if !may_open_packet_sockets() {
        if std::env::var_os(UNPRIVILEGED_CHILD).is_some() {
            // The child checks it really is what its parent asked for.
            // SAFETY: these calls have no preconditions; `getgroups(0, NULL)` only counts.
            let (uid, euid, gid, groups) = unsafe {
                (
                    libc::getuid(),
                    libc::geteuid(),
                    libc::getgid(),
                    libc::getgroups(0, std::ptr::null_mut()),
                )
            };
            assert_eq!((uid, euid, gid, groups), (NOBODY, NOBODY, NOBODY, 0));
        }
        let e = AfPacket::open("lo", AfPacketOptions::default())
            .err()
            .expect("an unprivileged process cannot open a packet socket");
        assert!(matches!(e, AfPacketError::NeedsPrivilege), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("CAP_NET_RAW") && e.contains("root"), "{e}");
        return;
    }
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        shmnet_testkit::skip(
            TEST,
            "this process has CAP_NET_RAW without being root, so it can neither see the \
             refusal nor drop to another user",
        );
        return;
    }
    assert!(
        std::env::var_os(UNPRIVILEGED_CHILD).is_none(),
        "the child kept its privileges"
    );
    // A copy of this binary where nobody can reach it: the checkout may sit below a
    // directory only root may enter (/root is 0700).
    let dir = std::env::temp_dir().join(format!("shmnet-as-nobody-{}", std::process::id()));
    let exe = dir.join("af_packet-test");
    let copied = (|| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        std::fs::copy(std::env::current_exe()?, &exe)?;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))
    })();
    if let Err(e) = copied {
        let _ = std::fs::remove_dir_all(&dir);
        shmnet_testkit::skip(
            TEST,
            &format!("could not copy this test binary to {}: {e}", dir.display()),
        );
        return;
    }
    // `uid` makes the child call setgroups(0) (it is root when it does), setgid, then
    // setuid: no supplementary groups, no capabilities left. The child asserts all three.
    let out = shmnet_testkit::spawn_copied(
        Command::new(&exe)
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(UNPRIVILEGED_CHILD, "1")
            .current_dir("/")
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .and_then(|child| child.wait_with_output());
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            shmnet_testkit::skip(
                TEST,
                &format!(
                    "could not run {} as uid and gid {NOBODY} (it must be readable and \
                     executable by nobody): {e}",
                    exe.display()
                ),
            );
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the unprivileged child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(&format!("test {TEST} ... ok")) && stdout.contains("1 passed"),
        "the unprivileged child ran the test:\n{stdout}\n{stderr}"
    );
}

const MARKER: &[u8] = b"shmnet capture marker";

/// tshark on B's veth end, started before and stopped after the test's exchange.
struct Capture {
    child: Child,
    file: std::path::PathBuf,
}

impl Capture {
    fn start(pair: &NetnsPair) -> Capture {
        let file = std::env::temp_dir().join(format!("{}.pcapng", pair.ns_b));
        let _ = std::fs::remove_file(&file);
        let mut child = pair
            .exec(
                &pair.ns_b,
                &[
                    "tshark",
                    "-n",
                    "-i",
                    &pair.veth_b,
                    "-w",
                    file.to_str().unwrap(),
                ],
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tshark");
        // tshark says "Capturing on 'IFACE'" once dumpcap has the interface open.
        let err = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut seen = false;
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if !seen && line.contains("Capturing on") {
                    seen = true;
                    let _ = tx.send(Ok(()));
                } else if !seen {
                    let _ = tx.send(Err(line));
                }
            }
        });
        let mut said = Vec::new();
        let end = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(())) => break,
                Ok(Err(line)) => said.push(line),
                Err(_) => {
                    let _ = child.kill();
                    panic!("tshark did not start capturing: {said:?}");
                }
            }
        }
        let cap = Capture { child, file };
        cap.sync(pair);
        cap
    }

    /// "Capturing on" comes a little before frames really reach the file. Linux in B
    /// broadcasts marker datagrams (to the discard port) until one shows up in the file,
    /// which dumpcap flushes every half second; only then does the exchange start.
    fn sync(&self, pair: &NetnsPair) {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let bcast = std::net::Ipv4Addr::from(u32::from(pair.linux_ip) | 0xff);
        let (from, flag) = (pair.linux_ip, stop.clone());
        let marker = pair.spawn_in(&pair.ns_b, move || {
            let s = UdpSocket::bind(SocketAddrV4::new(from, 0)).expect("bind in B");
            s.set_broadcast(true).unwrap();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = s.send_to(MARKER, SocketAddrV4::new(bcast, 9));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let end = std::time::Instant::now() + Duration::from_secs(30);
        let mut seen = false;
        while !seen && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(250));
            seen = std::fs::metadata(&self.file).is_ok_and(|m| m.len() > 0)
                // A file still being written may end in a partial block; tshark then fails
                // after printing every complete frame, which is all this needs.
                && !tshark_query(&self.file, "udp.dstport == 9").1.is_empty();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        marker.join().expect("marker thread");
        assert!(seen, "tshark captured none of the marker datagrams");
    }

    /// Stops the capture (SIGINT, so the file is complete) and returns the file.
    fn stop(mut self) -> std::path::PathBuf {
        // `ip netns exec` execs tshark, so the child is tshark itself.
        // SAFETY: sends a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let end = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if self.child.try_wait().expect("wait for tshark").is_some() {
                break;
            }
            if std::time::Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("tshark did not stop");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.file.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads a capture back with tshark, checksum verification on, and the given display filter:
/// whether tshark succeeded, the matching frames (one line each), and what it said on stderr.
fn tshark_query(file: &std::path::Path, filter: &str) -> (bool, Vec<String>, String) {
    let out = Command::new("tshark")
        .args(["-n", "-r", file.to_str().unwrap()])
        .args(["-o", "ip.check_checksum:TRUE"])
        .args(["-o", "udp.check_checksum:TRUE"])
        .args(["-o", "ip.defragment:TRUE"])
        .args(["-Y", filter])
        .stdin(Stdio::null())
        .output()
        .expect("run tshark -r");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    (
        out.status.success(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// As [`tshark_query`], for a finished capture: tshark must read all of it.
fn tshark_read(file: &std::path::Path, filter: &str) -> Vec<String> {
    let (ok, lines, err) = tshark_query(file, filter);
    assert!(ok, "tshark -r {} failed: {err}", file.display());
    lines
}

#[test]
fn tshark_finds_no_malformed_packet_and_no_bad_checksum() {
    let test = "tshark_finds_no_malformed_packet_and_no_bad_checksum";
    if !require_commands(
        test,
        &[
            ("ping", &["-V"], "iputils-ping"),
            ("tshark", &["-v"], "tshark"),
        ],
    ) {
        return;
    }
    let Some((pair, mut node, _ns)) = setup(test) else {
        return;
    };
    // Linux hands its UDP checksums to the veth "hardware", which never computes them: on
    // the wire (and in the capture) they would be wrong. Turn the offload off so every frame
    // in the capture, Linux's and ours, must carry a correct checksum.
    pair.set_tx_checksum(&pair.ns_b, &pair.veth_b, false)
        .expect("turn off tx checksum offload on B's veth");
    let cap = Capture::start(&pair);
    let out = ping_from_b(&pair, &mut node, 3);
    assert!(out.contains(" 0% packet loss"), "{out}");
    linux_to_shmnet(&pair, &mut node, 7000);
    shmnet_to_linux(&pair, &mut node, 7001);
    // Let the last frames reach the capture.
    node.run_until(Duration::from_millis(300), |_| false);
    let file = cap.stop();

    let shm = pair.shm_ip.to_string();
    let all = tshark_read(&file, "frame");
    let bad = tshark_read(
        &file,
        "_ws.malformed || _ws.expert.severity >= \"Error\" \
         || ip.checksum.status == \"Bad\" || udp.checksum.status == \"Bad\" \
         || icmp.checksum.status == \"Bad\"",
    );
    let replies = tshark_read(&file, &format!("icmp.type == 0 && ip.src == {shm}"));
    let ours = tshark_read(&file, &format!("udp && ip.src == {shm}"));
    let frags = tshark_read(
        &file,
        &format!("ip.src == {shm} && (ip.flags.mf == 1 || ip.frag_offset > 0)"),
    );
    let verified = tshark_read(&file, "udp.checksum.status == \"Good\"");
    eprintln!(
        "capture {}: {} frames, {} from shmnet's UDP, {} of its fragments, {} UDP checksums \
         verified good",
        file.display(),
        all.len(),
        ours.len(),
        frags.len(),
        verified.len()
    );
    assert!(
        bad.is_empty(),
        "tshark flags these frames:\n{}",
        bad.join("\n")
    );
    assert_eq!(
        replies.len(),
        3,
        "the capture holds our echo replies:\n{}",
        all.join("\n")
    );
    assert_eq!(ours.len(), 3, "the capture holds our three datagrams");
    assert_eq!(
        frags.len(),
        10,
        "our 14,792-byte datagram went as ten fragments"
    );
    assert!(
        verified.len() >= 6,
        "tshark verified the UDP checksums both ways:\n{}",
        all.join("\n")
    );
    let _ = std::fs::remove_file(&file);
    node.finish();
}

/// A first look at receive throughput: Linux in B sends `SHMNET_AFP_N` (100,000) 64-byte
/// datagrams as fast as it can; shmnet receives what it can. Prints received/sent. Run with
/// `cargo test -p shmnet-io --test af_packet -- --ignored --nocapture measure`.
#[test]
#[ignore = "a measurement, not a test"]
fn measure_linux_sender_throughput() {
    let Some((pair, mut node, _ns)) = setup("measure_linux_sender_throughput") else {
        return;
    };
    let n: u64 = std::env::var("SHMNET_AFP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let port = 7100;
    let h = node.iface.udp_bind_port(port).expect("bind");
    let (from, to) = (pair.linux_ip, SocketAddrV4::new(pair.shm_ip, port));
    // Resolve ARP first so the burst is not queued behind it.
    let warm = pair.spawn_in(&pair.ns_b, move || {
        let s = UdpSocket::bind(SocketAddrV4::new(from, 0)).unwrap();
        s.send_to(&[0u8; 64], to).unwrap();
    });
    let mut buf = vec![0u8; 2048];
    node.run_until(Duration::from_secs(5), |n| {
        n.iface
            .udp_recv(&mut n.pool, h, &mut buf, &mut NoHook)
            .unwrap()
            .is_some()
    });
    warm.join().unwrap();
    let before = node.drv.stats();
    let senders: u64 = std::env::var("SHMNET_AFP_SENDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let per_sender = n / senders;
    let n = per_sender * senders;
    let threads: Vec<_> = (0..senders)
        .map(|_| {
            pair.spawn_in(&pair.ns_b, move || {
                let s = UdpSocket::bind(SocketAddrV4::new(from, 0)).unwrap();
                let msg = [0x42u8; 64];
                let t = std::time::Instant::now();
                let mut sent = 0u64;
                let mut refused = 0u64;
                for _ in 0..per_sender {
                    match s.send_to(&msg, to) {
                        Ok(_) => sent += 1,
                        Err(_) => refused += 1,
                    }
                }
                (sent, refused, t.elapsed())
            })
        })
        .collect();
    let sender = std::thread::spawn(move || {
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .fold((0, 0, Duration::ZERO), |a, b| {
                (a.0 + b.0, a.1 + b.1, a.2.max(b.2))
            })
    });
    let mut got = 0u64;
    let t = std::time::Instant::now();
    let mut last = t;
    loop {
        let k = node.step(Duration::from_millis(1));
        while node
            .iface
            .udp_recv(&mut node.pool, h, &mut buf, &mut NoHook)
            .unwrap()
            .is_some()
        {
            got += 1;
            last = std::time::Instant::now();
        }
        if sender.is_finished() && k == 0 && last.elapsed() > Duration::from_millis(300) {
            break;
        }
    }
    let (sent, refused, send_time) = sender.join().unwrap();
    let recv_time = last.duration_since(t);
    let st = node.drv.stats();
    println!(
        "Linux ({senders} sender threads) sent {sent} of {n} 64-byte datagrams ({refused} \
         refused) in {:.3} s = {:.0}/s",
        send_time.as_secs_f64(),
        sent as f64 / send_time.as_secs_f64()
    );
    println!(
        "shmnet received {got}/{sent} ({:.1}%) in {:.3} s = {:.0} messages/s",
        100.0 * got as f64 / sent as f64,
        recv_time.as_secs_f64(),
        got as f64 / recv_time.as_secs_f64()
    );
    println!(
        "drops: device (ring full) {}, no buffer {}, socket queue overflows {}",
        st.rx_device_drops - before.rx_device_drops,
        st.rx_no_buffer - before.rx_no_buffer,
        node.iface.udp_overflows(h).unwrap()
    );
    node.finish();
}

/// Probes the zero-copy transmit quirk described in the driver's docs: shmnet sends
/// `SHMNET_AFP_N` (2,000) distinct 1,000-byte datagrams to a Linux socket that reads none of
/// them until all are sent, then checks every one. Prints how many came back altered.
#[test]
#[ignore = "a probe of kernel behaviour, not a test"]
fn probe_tx_slot_reuse_with_a_slow_linux_reader() {
    let Some((pair, mut node, _ns)) = setup("probe_tx_slot_reuse_with_a_slow_linux_reader") else {
        return;
    };
    let n: u32 = std::env::var("SHMNET_AFP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let at = SocketAddrV4::new(pair.linux_ip, 7200);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let receiver = pair.spawn_in(&pair.ns_b, move || {
        let s = UdpSocket::bind(at).expect("bind in B");
        let big: libc::c_int = 64 << 20;
        // SAFETY: a live int of the size passed.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&big as *const libc::c_int).cast(),
                4,
            )
        };
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        let (mut good, mut bad) = (0u32, 0u32);
        let mut buf = vec![0u8; 2048];
        while let Ok(k) = s.recv(&mut buf) {
            let seq = u32::from_le_bytes(buf[..4].try_into().unwrap());
            let want = payload(1000, seq as u8);
            if k == 1000 && buf[4..k] == want[4..] {
                good += 1;
            } else {
                bad += 1;
            }
        }
        (good, bad)
    });
    ready_rx.recv().unwrap();
    let now = node.now();
    node.iface
        .add_neighbor(pair.linux_ip, EthernetAddress(pair.mac_b), now);
    let h = node.iface.udp_bind_port(0).unwrap();
    for seq in 0..n {
        let mut m = payload(1000, seq as u8);
        m[..4].copy_from_slice(&seq.to_le_bytes());
        node.send(h, &m, at);
        node.step(Duration::ZERO);
    }
    node.run_until(Duration::from_millis(300), |_| false);
    go_tx.send(()).unwrap();
    let (good, bad) = receiver.join().unwrap();
    println!(
        "sent {n} through a {}-slot TX ring; Linux read {good} intact and {bad} altered",
        256
    );
    node.finish();
}
