//! TCP between shmnet and the Linux kernel over a veth pair: Linux's own clients (Python's
//! socket module, OpenBSD netcat, socat) against shmnet's TCP echo and sink in the inline
//! structure; every byte checked (SHA-256 of what came back, byte counts of what the sink
//! read). Linux's side keeps its segmentation offload on, so its 64 KiB super-frames reach
//! the af_packet driver, which cuts them as a NIC would.
//!
//! Needs root and network namespaces: skips loudly without them, fails under `CI=true`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/netns.rs"]
mod netns;
#[path = "common/served.rs"]
mod served;
use netns::Netns;
use served::{Server, nc_send, random_file, root, run_ok, send_file, wait_ok};

/// The echo client: sends N random bytes while reading the echo in a thread, then checks
/// the echo byte for byte. Prints `ok <bytes>`; exits non-zero on a mismatch or a timeout.
const ECHO_CLIENT: &str = r#"
import socket, os, sys, threading, hashlib
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = os.urandom(n)
s = socket.create_connection((host, port), timeout=60)
got = bytearray()
def reader():
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got.extend(b)
t = threading.Thread(target=reader)
t.start()
s.sendall(data)
s.shutdown(socket.SHUT_WR)
t.join()
if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
    sys.exit(f"echo differs: sent {n} bytes, got {len(got)}")
print("ok", len(got))
"#;

/// The test bed: a veth pair in a namespace, `v0` for shmnet (no kernel address), `v1` with
/// 10.93.0.2/24 for Linux.
fn netns(tag: &str) -> Option<Netns> {
    let ns = Netns::new("shmnet-tcp", tag)?;
    netns::ip(&["-n", &ns.0, "addr", "add", "10.93.0.2/24", "dev", "v1"]).then_some(ns)
}

fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_u64()
        .unwrap_or_else(|| panic!("no {path:?} in {v}"))
}

/// How long a transfer of `bytes` may take: generous (a slow, busy machine moves 10 MB/s at
/// least over a veth), plus start-up.
fn limit(bytes: usize) -> Duration {
    Duration::from_secs(30) + Duration::from_secs((bytes / 10_000_000) as u64 * 2)
}

/// Waits until every Linux socket in `ns` to `peer` has delivered its bytes and shmnet has
/// closed its side (which the sink does only after reading everything): none is established,
/// in FIN-WAIT-1 or -2, CLOSING or LAST-ACK. A client that exited may have left the tail of
/// its stream in its kernel's send buffer.
fn wait_delivered(ns: &Netns, peer: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let mut ss = ns.cmd("ss");
        ss.args(["-Htn", "state", "established", "state", "fin-wait-1"])
            .args(["state", "fin-wait-2"])
            .args(["state", "closing", "state", "last-ack", "dst", peer]);
        let out = ss.output().expect("ss runs");
        assert!(out.status.success(), "ss: {out:?}");
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "the kernel still holds data for {peer} after {limit:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn linux_clients_reach_shmnets_tcp_echo_and_sink() {
    const TEST: &str = "linux_clients_reach_shmnets_tcp_echo_and_sink";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    let Some(ns) = netns("clients") else {
        shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
        return;
    };
    let server = Server::start(&ns, &["--tcp-echo", "7", "--tcp-sink", "9"]);
    const ECHO: usize = 32 << 20;
    const SINK: usize = 16 << 20;

    let mut py = ns.cmd("python3");
    py.args(["-c", ECHO_CLIENT, "10.93.0.1", "7", &ECHO.to_string()]);
    let out = run_ok(py, "python echo client", limit(2 * ECHO));
    assert_eq!(out.trim(), format!("ok {ECHO}"));

    let file = random_file(SINK, "sink");
    let mut nc = ns.cmd("nc");
    nc.args(["-N", "10.93.0.1", "9"])
        .stdin(std::fs::File::open(&file).unwrap());
    run_ok(nc, "nc to the TCP sink", limit(SINK));

    let mut socat = ns.cmd("socat");
    socat.args(["-u", &format!("FILE:{}", file.display()), "TCP:10.93.0.1:9"]);
    run_ok(socat, "socat to the TCP sink", limit(SINK));
    let _ = std::fs::remove_file(&file);
    // socat exits once its last write is in the kernel's send buffer, not once shmnet has it.
    wait_delivered(&ns, "10.93.0.1", limit(SINK));

    let report = server.stop();
    assert_eq!(u(&report, &["apps", "tcp_accepted"]), 3, "{report}");
    assert_eq!(u(&report, &["apps", "tcp_failed"]), 0, "{report}");
    assert_eq!(
        u(&report, &["apps", "tcp_bytes"]),
        (ECHO + 2 * SINK) as u64,
        "every byte the clients sent was read: {report}"
    );
    assert_eq!(u(&report, &["tcp", "bad_checksum"]), 0, "{report}");
}

/// One impairment profile of the issue: the `--impair` spec, the bytes echoed, and the
/// slowest rate (bit/s) a correct TCP keeps on it even on a slow, busy machine — the bound
/// on the transfer's time is derived from it, with ample room (see [`profile_bound`]). Two profiles move fewer than the issue's
/// 256 MiB, to keep CI within its time: at 5 % loss (both directions, ACKs too) a minimum
/// RTO (200 ms) still comes every few hundred segments, when a probe or its ACK is lost too
/// (about 15 Mbit/s); 25 % reordering behind a 10 ms delay is window-limited (256 KiB per
/// 40 ms round trip: about 50 Mbit/s, docs/tcp.md).
struct Profile {
    name: &'static str,
    impair: Option<&'static str>,
    bytes: usize,
    floor_bit_s: f64,
}

const PROFILES: &[Profile] = &[
    Profile {
        name: "clean",
        impair: None,
        bytes: 256 << 20,
        floor_bit_s: 50e6,
    },
    Profile {
        name: "1% loss",
        impair: Some("loss=1%,seed=11"),
        bytes: 256 << 20,
        floor_bit_s: 20e6,
    },
    Profile {
        name: "5% loss",
        impair: Some("loss=5%,seed=12"),
        bytes: 16 << 20,
        floor_bit_s: 2e6,
    },
    Profile {
        name: "25% reordering, 10 ms delay",
        impair: Some("reorder=25%,delay=10ms,seed=13"),
        bytes: 64 << 20,
        floor_bit_s: 5e6,
    },
    Profile {
        name: "1% duplication",
        impair: Some("dup=1%,seed=14"),
        bytes: 256 << 20,
        floor_bit_s: 50e6,
    },
    Profile {
        name: "0.1% corruption",
        impair: Some("corrupt=0.1%,seed=15"),
        bytes: 256 << 20,
        floor_bit_s: 20e6,
    },
    Profile {
        name: "20 ms delay, 100 Mbit/s",
        impair: Some("delay=20ms,rate=100mbit,seed=16"),
        bytes: 256 << 20,
        floor_bit_s: 20e6,
    },
];

/// How long the echo through profile `p` may take before the test calls it hung: both
/// directions cross the impairment, twice the bytes at the floor rate — five times over, and
/// a minute more for Python to make, send and hash them. A bound on a hang, not a
/// throughput test: a slow or busy machine (CI's, shared) must never reach it.
fn profile_bound(p: &Profile) -> Duration {
    let at_floor = 2.0 * p.bytes as f64 * 8.0 / p.floor_bit_s;
    Duration::from_secs(60) + Duration::from_secs_f64(5.0 * at_floor)
}

#[test]
fn a_linux_client_streams_through_every_impairment_profile_intact() {
    const TEST: &str = "a_linux_client_streams_through_every_impairment_profile_intact";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    let Some(ns) = netns("profiles") else {
        shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
        return;
    };
    for p in PROFILES {
        let mut args = vec!["--tcp-echo", "7"];
        if let Some(i) = p.impair {
            args.extend(["--impair", i]);
        }
        let server = Server::start(&ns, &args);
        let bound = profile_bound(p);
        let mut py = ns.cmd("python3");
        py.args(["-c", ECHO_CLIENT, "10.93.0.1", "7", &p.bytes.to_string()]);
        let t = Instant::now();
        let out = run_ok(py, &format!("echo through {}", p.name), bound);
        let took = t.elapsed();
        assert_eq!(out.trim(), format!("ok {}", p.bytes), "{}", p.name);
        let report = server.stop();
        assert_eq!(
            u(&report, &["apps", "tcp_failed"]),
            0,
            "{}: {report}",
            p.name
        );
        eprintln!(
            "{}: {} bytes each way in {:.2} s ({:.1} Mbit/s), retransmissions: {} by timer, {} \
             fast, {} from SACK, {} tail probes",
            p.name,
            p.bytes,
            took.as_secs_f64(),
            p.bytes as f64 * 8.0 / took.as_secs_f64() / 1e6,
            u(&report, &["tcp", "rto_retransmits"]),
            u(&report, &["tcp", "fast_retransmits"]),
            u(&report, &["tcp", "sack_retransmits"]),
            u(&report, &["tcp", "tail_probes"]),
        );
        if p.impair.is_some_and(|i| i.starts_with("corrupt")) {
            assert!(
                u(&report, &["tcp", "bad_checksum"]) > 0,
                "corrupted frames are caught by the checksum: {report}"
            );
        }
    }
}

#[test]
fn tshark_finds_no_malformed_segment_in_shmnets_tcp() {
    const TEST: &str = "tshark_finds_no_malformed_segment_in_shmnets_tcp";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    if Command::new("tshark").arg("--version").output().is_err() {
        shmnet_testkit::skip(TEST, "tshark is not installed (scripts/setup installs it)");
        return;
    }
    let Some(ns) = netns("tshark") else {
        shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
        return;
    };
    let pcap = std::env::temp_dir().join(format!("shmnet-tcp-{}.pcap", std::process::id()));
    let server = Server::start(&ns, &["--tcp-echo", "7", "--impair", "loss=1%,seed=21"]);
    let mut cap = ns
        .cmd("dumpcap")
        .args(["-q", "-i", "v0", "-f", "tcp", "-w"])
        .arg(&pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dumpcap");
    // dumpcap needs a moment to attach; a few lost first frames would not matter.
    std::thread::sleep(Duration::from_millis(1500));
    let mut py = ns.cmd("python3");
    py.args(["-c", ECHO_CLIENT, "10.93.0.1", "7", "2000000"]);
    run_ok(py, "echo while capturing", limit(4_000_000) * 4);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(cap.id() as i32, libc::SIGINT) };
    let _ = cap.wait();
    server.stop();
    let count = |filter: &str| -> usize {
        let out = Command::new("tshark")
            .args(["-n", "-o", "tcp.check_checksum:TRUE", "-r"])
            .arg(&pcap)
            .args(["-Y", filter])
            .output()
            .expect("run tshark");
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    let from_shmnet = count("ip.src == 10.93.0.1 && tcp");
    assert!(
        from_shmnet > 1000,
        "the capture holds shmnet's segments: {from_shmnet}"
    );
    assert_eq!(count("_ws.malformed"), 0, "malformed segments");
    assert_eq!(
        count("ip.src == 10.93.0.1 && tcp.checksum.status == 0"),
        0,
        "shmnet's segments with a bad checksum"
    );
    let _ = std::fs::remove_file(&pcap);
}

/// Seed 002's ftp through the `server` and `ipc` structures: `shmnet app recv-file` takes a
/// file from Linux's `nc`, `shmnet app send-file` gives one to Linux's `nc -l`, every byte
/// compared.
#[test]
fn files_cross_the_server_structures_to_and_from_linux() {
    const TEST: &str = "files_cross_the_server_structures_to_and_from_linux";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    const BYTES: usize = 48 << 20;
    let file = random_file(BYTES, "ftp");
    for structure in ["server", "ipc"] {
        let Some(ns) = netns(&format!("ftp-{structure}")) else {
            shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
            return;
        };
        let sock = std::env::temp_dir().join(format!(
            "shmnet-ftp-{}-{structure}.sock",
            std::process::id()
        ));
        let sock_arg = sock.to_str().unwrap().to_string();
        let server = Server::start(&ns, &["--structure", structure, "--socket", &sock_arg]);
        let shmnet = env!("CARGO_BIN_EXE_shmnet");

        // Linux → shmnet.
        let got = std::env::temp_dir().join(format!("shmnet-ftp-{}-in", std::process::id()));
        let mut recv = Command::new(shmnet);
        recv.args(["app", "recv-file", "5001"])
            .arg(&got)
            .args(["--socket", &sock_arg, "--json", "--timeout", "30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let recv = recv.spawn().expect("start recv-file");
        nc_send(&ns, &file, "10.93.0.1", 5001, structure);
        let out = wait_ok(recv, "recv-file", limit(BYTES));
        let report: serde_json::Value = serde_json::from_str(out.trim()).expect("its report");
        assert_eq!(
            u(&report, &["bytes"]),
            BYTES as u64,
            "{structure}: {report}"
        );
        assert!(
            std::fs::read(&got).unwrap() == std::fs::read(&file).unwrap(),
            "{structure}: the file nc sent arrived changed"
        );

        // shmnet → Linux.
        let mut listen = ns.cmd("nc");
        listen
            .args(["-l", "10.93.0.2", "5002"])
            .stdout(std::fs::File::create(&got).unwrap())
            .stderr(Stdio::null());
        let listen = listen.spawn().expect("start nc -l");
        let report = send_file("10.93.0.2:5002", &file, &sock_arg, structure);
        assert_eq!(
            u(&report, &["bytes"]),
            BYTES as u64,
            "{structure}: {report}"
        );
        wait_ok(listen, "nc -l", limit(BYTES));
        assert!(
            std::fs::read(&got).unwrap() == std::fs::read(&file).unwrap(),
            "{structure}: the file send-file sent arrived changed"
        );
        let _ = std::fs::remove_file(&got);
        drop(server);
        let _ = std::fs::remove_file(&sock);
    }
    let _ = std::fs::remove_file(&file);
}

/// The SYN-flood test's Linux side, one script (run from a file: it starts itself again as
/// the flooder; `time.monotonic` is the system's monotonic clock in both processes):
///
/// * `flood IFACE DST_MAC DST PORT N SEED`: sends N SYNs to DST:PORT from random addresses
///   off the subnet (answered through the gateway, this end of the veth, whose kernel drops
///   them: it does not forward) and random ports, frames built here and written to an
///   AF_PACKET socket as fast as it takes them. Prints `sending` when it starts, then
///   `{"start": t, "end": t, "sent": n}`.
/// * `main IFACE DST_MAC DST PORT N SECONDS`: an honest connection streams to DST:PORT for
///   SECONDS, sampled every 50 ms; after a third of them the flood starts, and once it has
///   begun a second honest connection opens and sends 1 MiB. Prints one JSON object: the
///   samples `[t, bytes]`, the flood's report, the second connection's time to connect and
///   bytes, and the bytes of both.
const FLOOD_SCRIPT: &str = r#"
import socket, os, sys, time, struct, random, threading, json, subprocess

def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff

def flood(iface, dst_mac, dst, port, n, seed):
    rnd = random.Random(seed)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    src_mac = s.getsockname()[4]
    dmac = bytes.fromhex(dst_mac.replace(":", ""))
    daddr = socket.inet_aton(dst)
    frames = []
    for i in range(n):
        while True:
            a = rnd.randrange(0x01000000, 0xe0000000)
            if a >> 24 not in (10, 127):
                break
        saddr = struct.pack("!I", a)
        sport = rnd.randrange(1024, 65536)
        opts = struct.pack("!BBH", 2, 4, 1460)  # MSS, as a bare SYN tool sends
        tcp = struct.pack("!HHIIBBHHH", sport, port, rnd.getrandbits(32), 0,
                          (5 + len(opts) // 4) << 4, 0x02, 64240, 0, 0) + opts
        pseudo = saddr + daddr + struct.pack("!BBH", 0, 6, len(tcp))
        c = csum(pseudo + tcp)
        tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), i & 0xffff, 0, 64, 6, 0,
                         saddr, daddr)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        frames.append(dmac + src_mac + b"\x08\x00" + ip + tcp)
    print("sending", flush=True)
    start = time.monotonic()
    sent = 0
    for f in frames:
        while True:
            try:
                s.send(f)
                sent += 1
                break
            except BlockingIOError:
                time.sleep(0.0001)
            except OSError:  # ENOBUFS: the device queue is full for a moment
                time.sleep(0.0001)
    print(json.dumps({"start": start, "end": time.monotonic(), "sent": sent}))

def main(iface, dst_mac, dst, port, n, seconds):
    block = os.urandom(1 << 16)
    total = [0]
    stop = threading.Event()
    s = socket.create_connection((dst, port), timeout=30)
    def stream():
        while not stop.is_set():
            s.sendall(block)
            total[0] += len(block)
    t = threading.Thread(target=stream)
    t.start()
    samples = []
    started = time.monotonic()
    def sample():
        while not stop.is_set():
            samples.append([time.monotonic(), total[0]])
            time.sleep(0.05)
    st = threading.Thread(target=sample)
    st.start()
    time.sleep(seconds / 3)
    fl = subprocess.Popen([sys.executable, __file__, "flood", iface, dst_mac, dst,
                           str(port), str(n), "7"], stdout=subprocess.PIPE, text=True)
    # The second connection opens once the flood has begun.
    assert fl.stdout.readline().strip() == "sending"
    time.sleep(0.05)
    t0 = time.monotonic()
    c = socket.create_connection((dst, port), timeout=30)
    connected = time.monotonic()
    c.sendall(os.urandom(1 << 20))
    c.close()
    out, _ = fl.communicate(timeout=120)
    report = json.loads(out)
    assert fl.returncode == 0
    while time.monotonic() < started + seconds:
        time.sleep(0.05)
    stop.set()
    t.join()
    st.join()
    s.shutdown(socket.SHUT_WR)
    s.close()
    print(json.dumps({"samples": samples, "flood": report, "second_at": t0,
                      "second_connect_s": connected - t0, "second_bytes": 1 << 20,
                      "stream_bytes": total[0]}))

if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "flood":
        flood(a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6]))
    else:
        main(a[1], a[2], a[3], int(a[4]), int(a[5]), float(a[6]))
"#;

/// The Ethernet address of shmnet's end of the veth (`v0`).
fn v0_mac(ns: &Netns) -> String {
    let out = ns.cmd("cat").arg("/sys/class/net/v0/address").output();
    String::from_utf8_lossy(&out.expect("read v0's address").stdout)
        .trim()
        .to_string()
}

/// The bytes the stream had sent by time `t`, from the samples (the last one at or before).
fn sent_by(samples: &[(f64, f64)], t: f64) -> f64 {
    samples
        .iter()
        .take_while(|s| s.0 <= t)
        .last()
        .map_or(0.0, |s| s.1)
}

#[test]
fn a_syn_flood_from_random_sources_leaves_an_honest_stream_going() {
    const TEST: &str = "a_syn_flood_from_random_sources_leaves_an_honest_stream_going";
    const SYNS: usize = 100_000;
    const SECONDS: f64 = 9.0;
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    let Some(ns) = netns("flood") else {
        shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
        return;
    };
    let mac = v0_mac(&ns);
    let script = std::env::temp_dir().join(format!("shmnet-flood-{}.py", std::process::id()));
    std::fs::write(&script, FLOOD_SCRIPT).expect("write the flood script");
    let server = Server::start(&ns, &["--tcp-sink", "9", "--gateway", "10.93.0.2"]);
    let mut py = ns.cmd("python3");
    py.arg(&script)
        .args(["main", "v1", &mac, "10.93.0.1", "9", &SYNS.to_string()])
        .arg(SECONDS.to_string());
    let out = run_ok(py, "the honest stream under a SYN flood", limit(0) * 4);
    let _ = std::fs::remove_file(&script);
    let r: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("{v} in {r}"));
    let samples: Vec<(f64, f64)> = r["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| (f(&s[0]), f(&s[1])))
        .collect();
    let (start, end) = (f(&r["flood"]["start"]), f(&r["flood"]["end"]));
    let sent = r["flood"]["sent"].as_u64().expect("sent");
    assert_eq!(sent, SYNS as u64, "the flooder sent every SYN");
    let rate = |a: f64, b: f64| (sent_by(&samples, b) - sent_by(&samples, a)) * 8.0 / (b - a);
    let before = rate(start - 2.0, start);
    let during = rate(start, end.max(start + 0.5));
    let after = rate(end + 0.5, samples.last().expect("samples").0);
    // The longest time the stream made no progress.
    let mut stall = 0f64;
    let mut since = samples[0];
    for &s in &samples[1..] {
        if s.1 > since.1 {
            since = s;
        }
        stall = stall.max(s.0 - since.0);
    }
    wait_delivered(&ns, "10.93.0.1", limit(0));
    let report = server.stop();
    let stream = r["stream_bytes"].as_u64().expect("stream bytes");
    let second = r["second_bytes"].as_u64().expect("second bytes");
    eprintln!(
        "{SYNS} SYNs in {:.2} s ({:.0}/s); the stream: {:.2} Gbit/s before, {:.2} during, {:.2} \
         after; longest stall {:.0} ms; a new connection during the flood connected in {:.1} ms; \
         SYN cookies sent {}, accepted {}; segments in {}",
        end - start,
        SYNS as f64 / (end - start),
        before / 1e9,
        during / 1e9,
        after / 1e9,
        stall * 1e3,
        f(&r["second_connect_s"]) * 1e3,
        u(&report, &["tcp", "syn_cookies_sent"]),
        u(&report, &["tcp", "syn_cookies_accepted"]),
        u(&report, &["tcp", "segs_in"]),
    );
    assert!(
        u(&report, &["tcp", "syn_cookies_sent"]) > 0,
        "a full half-open queue is answered with cookies: {report}"
    );
    assert_eq!(u(&report, &["apps", "tcp_accepted"]), 2, "{report}");
    assert_eq!(u(&report, &["apps", "tcp_failed"]), 0, "{report}");
    assert_eq!(
        u(&report, &["apps", "tcp_bytes"]),
        stream + second,
        "every byte of both honest connections was read: {report}"
    );
    assert!(
        during > 0.0 && after > 0.0,
        "the stream kept going: {before} bit/s before, {during} during, {after} after"
    );
    assert!(stall < 2.0, "the stream stalled for {stall:.2} s");
}

/// A jumbo MTU over af_packet: both ends of the veth at 9,000, `serve --mtu 9000`: shmnet
/// offers an MSS of 8,960, Linux's echo client sends 64 MiB that come back whole, and
/// shmnet's own segments carry jumbo payloads. Asking for more than the interface's MTU
/// fails at once, saying how to raise it.
#[test]
fn a_jumbo_mtu_carries_segments_of_8960_bytes() {
    const TEST: &str = "a_jumbo_mtu_carries_segments_of_8960_bytes";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    let Some(ns) = netns("jumbo") else {
        shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
        return;
    };
    let refused = ns
        .cmd(env!("CARGO_BIN_EXE_shmnet"))
        .args(["serve", "--driver", "af_packet:v0", "--ip", "10.93.0.1/24"])
        .args(["--mtu", "9000", "--tcp-echo", "7", "--duration", "5"])
        .output()
        .expect("run shmnet serve");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("ip link set v0 mtu 9000"),
        "{err}"
    );
    for dev in ["v0", "v1"] {
        assert!(netns::ip(&["-n", &ns.0, "link", "set", dev, "mtu", "9000"]));
    }
    let server = Server::start(&ns, &["--tcp-echo", "7", "--mtu", "9000"]);
    const BYTES: usize = 64 << 20;
    let mut py = ns.cmd("python3");
    py.args(["-c", ECHO_CLIENT, "10.93.0.1", "7", &BYTES.to_string()]);
    let out = run_ok(py, "the echo over a jumbo MTU", limit(2 * BYTES));
    assert_eq!(out.trim(), format!("ok {BYTES}"));
    let report = server.stop();
    let (bytes, segs) = (
        u(&report, &["tcp", "bytes_out"]),
        u(&report, &["tcp", "segs_out"]),
    );
    assert!(bytes >= BYTES as u64, "{report}");
    assert!(
        bytes / segs > 4000,
        "shmnet's segments carry jumbo payloads: {bytes} bytes in {segs} segments"
    );
}

/// The Python that has scapy: Debian's (`python3-scapy`, which scripts/setup installs); a
/// `python3` earlier on the PATH (pyenv's, say) may not.
const SCAPY_PYTHON: &str = "/usr/bin/python3";

/// TCP edge cases over the wire, each segment crafted by scapy (`tests/scapy/tcp_edges.py`,
/// which says what each case checks): options agreed or not and the MSS kept (536 without
/// one, the peer's 536), window scale 0 and 14, a zero window then opened, RST in
/// SYN-RECEIVED and ESTABLISHED (exact, and in-window drawing a challenge ACK), a SYN on an
/// open connection, an ACK of unsent data, blind out-of-window data, malformed offsets and
/// options, a transfer across the sequence wrap. The peer has an address and MAC the kernel
/// does not own (the script answers ARP), so no kernel RST gets in the way.
#[test]
fn scapy_crafted_segments_meet_the_rfc_at_the_server() {
    const TEST: &str = "scapy_crafted_segments_meet_the_rfc_at_the_server";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    let has_scapy = Command::new(SCAPY_PYTHON)
        .args(["-c", "import scapy.all"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_scapy {
        shmnet_testkit::skip(
            TEST,
            "scapy is not installed (scripts/setup installs python3-scapy)",
        );
        return;
    }
    let Some(ns) = netns("scapy") else {
        shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
        return;
    };
    let mac = v0_mac(&ns);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scapy/tcp_edges.py");
    let server = Server::start(&ns, &["--tcp-echo", "7"]);
    let mut py = ns.cmd(SCAPY_PYTHON);
    py.args([script, "v1", "10.93.0.1", &mac]);
    let out = run_ok(py, "the scapy cases", Duration::from_secs(180));
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(oks >= 12, "every case ran: {out}");
    let report = server.stop();
    assert!(
        u(&report, &["tcp", "malformed"]) >= 3,
        "malformed segments counted: {report}"
    );
    assert!(u(&report, &["tcp", "challenge_acks"]) >= 2, "{report}");
    assert!(u(&report, &["tcp", "ack_unsent"]) >= 1, "{report}");
}

/// Path-MTU discovery against a Linux router: shmnet (`server` structure, MTU 1,500) sends
/// a file to Linux's `nc -l` in a second namespace behind the first one's kernel, which
/// forwards onto a link of MTU 1,280. shmnet's segments go with don't-fragment, so the
/// router answers the first large ones with "fragmentation needed" instead of cutting them;
/// shmnet's MSS comes down to the path's, and every byte arrives. The router fragmented
/// nothing.
#[test]
fn shmnet_learns_a_narrow_paths_mtu_from_a_linux_router() {
    const TEST: &str = "shmnet_learns_a_narrow_paths_mtu_from_a_linux_router";
    if !root() {
        shmnet_testkit::skip(TEST, "needs root (network namespaces, AF_PACKET)");
        return;
    }
    let (Some(ns), Some(far)) = (netns("pmtu"), Netns::new("shmnet-tcp", "pmtu-far")) else {
        shmnet_testkit::skip(TEST, "cannot make network namespaces with veth pairs");
        return;
    };
    let sh = |n: &Netns, line: &str| {
        let st = n.cmd("sh").args(["-c", line]).status().expect("run sh");
        assert!(st.success(), "{line}: {st}");
    };
    assert!(netns::ip(&[
        "-n", &ns.0, "link", "add", "w1", "type", "veth", "peer", "name", "w0", "netns", &far.0,
    ]));
    // The kernel forwards between v1 and w1, but not what arrives on v0 (shmnet's end,
    // which has no address of its own): frames Linux sends shmnet would otherwise come back
    // in on v0 and be forwarded out of v1 again, each one looping until its TTL ran out.
    sh(
        &ns,
        "ip addr add 10.94.0.1/24 dev w1 && ip link set w1 mtu 1280 up \
         && sysctl -qw net.ipv4.ip_forward=1 && sysctl -qw net.ipv4.conf.v0.forwarding=0",
    );
    sh(
        &far,
        "ip addr add 10.94.0.2/24 dev w0 && ip link set w0 up \
         && ip route add default via 10.94.0.1",
    );
    let sock = std::env::temp_dir().join(format!("shmnet-pmtu-{}.sock", std::process::id()));
    let sock_arg = sock.to_str().unwrap().to_string();
    let server = Server::start(
        &ns,
        &[
            "--structure",
            "server",
            "--socket",
            &sock_arg,
            "--gateway",
            "10.93.0.2",
        ],
    );
    const BYTES: usize = 8 << 20;
    let file = random_file(BYTES, "pmtu");
    let got = std::env::temp_dir().join(format!("shmnet-pmtu-{}-got", std::process::id()));
    let mut listen = far.cmd("nc");
    listen
        .args(["-l", "10.94.0.2", "5003"])
        .stdout(std::fs::File::create(&got).unwrap())
        .stderr(Stdio::null());
    let listen = listen.spawn().expect("start nc -l");
    send_file("10.94.0.2:5003", &file, &sock_arg, "pmtu");
    wait_ok(listen, "nc -l", limit(BYTES));
    assert!(
        std::fs::read(&got).unwrap() == std::fs::read(&file).unwrap(),
        "the file arrived changed"
    );
    let snmp = ns
        .cmd("cat")
        .arg("/proc/net/snmp")
        .output()
        .expect("read snmp");
    let snmp = String::from_utf8_lossy(&snmp.stdout);
    let ip: Vec<Vec<&str>> = snmp
        .lines()
        .filter(|l| l.starts_with("Ip: "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let col = ip[0]
        .iter()
        .position(|&k| k == "FragCreates")
        .expect("FragCreates");
    assert_eq!(ip[1][col], "0", "the router fragmented nothing: {snmp}");
    let report = server.stop();
    assert!(u(&report, &["tcp", "pmtu_lowered"]) >= 1, "{report}");
    let _ = std::fs::remove_file(&got);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&sock);
}
