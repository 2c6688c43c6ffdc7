//! Seeing inside a running server: `shmnet sockets` lists what unmodified programs under
//! `shmnet run` hold, as `ss` would; `shmnet serve --metrics` serves counters that move
//! with `shmnet stats`.
//!
//! No root needed: a loopback server (`--driver loopback`). The programs are Debian's
//! (netcat-openbsd; scripts/setup installs it as root): without them the sockets test
//! skips loudly, and fails under `CI=true`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/loopback.rs"]
mod loopback;
use loopback::{Killed, SHMNET, all_installed, installed, library, loopback_server, under_shmnet};

/// `shmnet sockets --socket SOCK` with `args`: its standard output.
fn sockets(sock: &str, args: &[&str]) -> String {
    let out = Command::new(SHMNET)
        .args(["sockets", "--socket", sock])
        .args(args)
        .output()
        .expect("run shmnet sockets");
    assert!(
        out.status.success(),
        "shmnet sockets failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn listing(sock: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(&sockets(sock, &["--json"])).expect("--json is JSON");
    v["sockets"].as_array().expect("a sockets array").clone()
}

/// Polls `f` every 20 ms for 10 s at most, until it gives a value.
fn until<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    until_within(what, Duration::from_secs(10), f)
}

/// Polls `f` every 20 ms for `patience` at most, until it gives a value.
fn until_within<T>(what: &str, patience: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// netcat listening and netcat connected, both under `shmnet run`: `shmnet sockets` lists
/// the listener, both ends of the connection with their processes, and — once the client
/// is killed — its end without an owner while the listener's end waits in CLOSE-WAIT.
#[test]
fn shmnet_sockets_lists_what_programs_under_shmnet_run_hold() {
    let test = "shmnet_sockets_lists_what_programs_under_shmnet_run_hold";
    if !installed("nc") {
        shmnet_testkit::skip(
            test,
            "needs netcat-openbsd (scripts/setup installs it as root)",
        );
        return;
    }
    library();
    let (_server, sock) = loopback_server("observe-ss", &[]);
    let mut listen = under_shmnet(&sock, "nc");
    listen
        .args(["-l", "10.99.0.1", "5001"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let listener = Killed(listen.spawn().expect("start nc -l"));
    let lpid = listener.0.id() as i64;
    until("the listener listed", || {
        listing(&sock)
            .iter()
            .any(|e| e["state"] == "listen" && e["local"] == "10.99.0.1:5001")
            .then_some(())
    });
    let mut connect = under_shmnet(&sock, "nc");
    connect
        .args(["10.99.0.1", "5001"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let client = Killed(connect.spawn().expect("start nc"));
    let cpid = client.0.id() as i64;
    let all = until("both ends established", || {
        let all = listing(&sock);
        let n = all.iter().filter(|e| e["state"] == "established").count();
        (n == 2).then_some(all)
    });
    let owner = |e: &serde_json::Value| e["owners"][0]["pid"].as_i64();
    let listener_entry = all.iter().find(|e| e["state"] == "listen").unwrap();
    assert_eq!(owner(listener_entry), Some(lpid), "{all:?}");
    let (theirs, ours): (Vec<_>, Vec<_>) = all
        .iter()
        .filter(|e| e["state"] == "established")
        .partition(|e| e["local"] == "10.99.0.1:5001");
    assert_eq!(owner(theirs[0]), Some(lpid), "the accepted end: {all:?}");
    assert_eq!(owner(ours[0]), Some(cpid), "the connecting end: {all:?}");
    assert_eq!(ours[0]["remote"], "10.99.0.1:5001");
    assert_eq!(theirs[0]["remote"], ours[0]["local"]);
    assert!(ours[0]["tcp"]["mss"].as_u64().unwrap() > 0);

    // The table reads like ss's, process names and all.
    let text = sockets(&sock, &["--tcp"]);
    let row = |state: &str| {
        text.lines()
            .find(|l| l.contains(state))
            .unwrap_or_else(|| panic!("no {state} row in:\n{text}"))
            .to_owned()
    };
    assert!(text.starts_with("Netid State"), "{text}");
    assert!(
        row("LISTEN").contains(&format!("(\"nc\",pid={lpid},")),
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| l.contains("ESTAB")).count(), 2);
    let info = sockets(&sock, &["--tcp", "--info"]);
    assert!(info.contains("cwnd:") && info.contains("rto:"), "{info}");
    let only_listening = sockets(&sock, &["--listening"]);
    assert!(
        !only_listening.contains("ESTAB") && only_listening.contains("LISTEN"),
        "{only_listening}"
    );

    // The client goes: its end is closed in order (netcat -l then ends too, at the end of
    // its input), and no one holds it any more.
    let client_port = ours[0]["local"].as_str().unwrap().to_owned();
    drop(client);
    let mine = until("the client's end listed without an owner", || {
        let all = listing(&sock);
        let mine = all.iter().find(|e| e["local"] == client_port.as_str())?;
        mine["owners"].as_array()?.is_empty().then(|| mine.clone())
    });
    assert!(
        ["fin-wait1", "fin-wait2", "time-wait"].contains(&mine["state"].as_str().unwrap()),
        "{mine}"
    );
    let text = sockets(&sock, &[]);
    let row = text
        .lines()
        .find(|l| l.contains(&client_port) && l.contains("10.99.0.1:5001"))
        .unwrap_or_else(|| panic!("no row for {client_port}:\n{text}"));
    assert!(
        !row.contains("users:"),
        "an unowned socket shows no process: {row}"
    );
    drop(listener);
}

/// A tiny HTTP GET of `path` on `addr`: the status line's code and the body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).expect("connect to --metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read the answer");
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (code, body)
}

/// The value of the series `name` (no labels) in a scrape.
fn series(body: &str, name: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in the scrape:\n{body}")) as u64
}

fn stats(sock: &str) -> serde_json::Value {
    let out = Command::new(SHMNET)
        .args(["stats", "--json", "--socket", sock])
        .output()
        .expect("shmnet stats");
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("stats JSON")
}

/// `--metrics` during a file transfer between two applications of the server: every
/// scrape is the OpenMetrics format, counters and gauges typed, and a counter read by a
/// scrape lies between what `shmnet stats` said just before it and just after.
#[test]
fn metrics_move_with_shmnet_stats_during_traffic() {
    let (server, sock, addr) = metrics_server("observe-metrics");
    let (code, _) = http_get(&addr, "/");
    assert_eq!(code, 404, "only /metrics is served");
    let file = std::env::temp_dir().join(format!("shmnet-metrics-{}.bin", std::process::id()));
    std::fs::write(&file, vec![0x5a; 64 << 20]).unwrap();
    let out = file.with_extension("out");
    let recv = Killed(
        Command::new(SHMNET)
            .args(["app", "recv-file", "5002"])
            .arg(&out)
            .args(["--socket", &sock, "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("recv-file"),
    );
    let name = "shmnet_driver_rx_frames_total";
    // One scrape, checked against `shmnet stats` read just before and just after it.
    let scrape = || {
        let before = stats(&sock)["driver"]["driver"]["rx_frames"]
            .as_u64()
            .unwrap();
        let (code, body) = http_get(&addr, "/metrics");
        let after = stats(&sock)["driver"]["driver"]["rx_frames"]
            .as_u64()
            .unwrap();
        assert_eq!(code, 200);
        assert!(body.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
        assert!(body.contains("# TYPE shmnet_driver_rx_frames counter"));
        assert!(body.contains("# TYPE shmnet_tcp_connections gauge"));
        let scraped = series(&body, name);
        assert!(
            before <= scraped && scraped <= after,
            "{name}: stats {before}, scrape {scraped}, stats {after}"
        );
        scraped
    };
    let first = scrape();
    let mut send = Command::new(SHMNET);
    send.args(["app", "send-file", "10.99.0.1:5002"])
        .arg(&file)
        .args(["--socket", &sock, "--json", "--write-size", "1024"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut sender = until("send-file connects", || {
        let mut c = send.spawn().ok()?;
        std::thread::sleep(Duration::from_millis(200));
        match c.try_wait() {
            Ok(Some(st)) if !st.success() => None, // not listening yet: try again
            _ => Some(c),
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(sender.try_wait(), Ok(Some(_))) {
        assert!(
            Instant::now() < deadline,
            "send-file did not finish in 60 s"
        );
        scrape();
        std::thread::sleep(Duration::from_millis(20));
    }
    let last = scrape();
    // 64 MiB cannot cross in fewer frames than of 64 KiB each.
    assert!(
        last - first >= (64 << 20) / 65_536,
        "{name} moved from {first} to {last} over a 64 MiB transfer"
    );
    let sent = sender.wait().expect("send-file ends");
    assert!(sent.success(), "send-file failed");
    drop(recv);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&out);
    drop(server);
}

/// A loopback server with `--metrics 127.0.0.1:0`: it, its control socket, and the address
/// it says it serves metrics on.
fn metrics_server(tag: &str) -> (Killed, String, String) {
    let sock = std::env::temp_dir()
        .join(format!("shmnet-obs-{}-{tag}.sock", std::process::id()))
        .to_str()
        .unwrap()
        .to_string();
    let mut child = Command::new(SHMNET)
        .args(["serve", "--structure", "server", "--driver", "loopback"])
        .args([
            "--ip",
            "10.99.0.1/24",
            "--socket",
            &sock,
            "--metrics",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start shmnet serve --metrics");
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut err, &mut line).unwrap_or(0) > 0 {
        if let Some(rest) = line.trim().strip_prefix("metrics at http://") {
            addr = rest.strip_suffix("/metrics").map(str::to_owned);
            break;
        }
        line.clear();
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let addr = addr.unwrap_or_else(|| panic!("no `metrics at` line: {line}"));
    (Killed(child), sock, addr)
}

/// The inline structure has no control socket: `--metrics` is refused with a reason.
#[test]
fn metrics_on_the_inline_structure_is_refused_with_a_reason() {
    let out = Command::new(SHMNET)
        .args(["serve", "--structure", "inline", "--metrics", "127.0.0.1:0"])
        .output()
        .expect("run shmnet serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--metrics needs --structure server"), "{err}");
}

/// A running `shmnet capture` and how it ended.
struct Capturing {
    child: std::process::Child,
}

impl Capturing {
    /// Starts `shmnet capture --socket SOCK ARGS` and waits for it to say it captures.
    fn start(sock: &str, args: &[&str]) -> Capturing {
        let mut child = Command::new(SHMNET)
            .args(["capture", "--socket", sock])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shmnet capture");
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(line.starts_with("capturing on"), "shmnet capture: {line}");
        // The rest of stderr (the summary) is read when it ends.
        child.stderr = Some(std::process::ChildStderr::from(std::os::fd::OwnedFd::from(
            err.into_inner(),
        )));
        Capturing { child }
    }

    /// SIGINT (as Ctrl-C), then its stdout and its summary line.
    fn stop(self) -> (String, String) {
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let out = self.child.wait_with_output().expect("shmnet capture ends");
        assert!(
            out.status.success(),
            "shmnet capture: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// The frames and bytes tshark reads in `file`, per pcapng interface name.
fn tshark_counts(file: &std::path::Path) -> std::collections::HashMap<String, (u64, u64)> {
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.interface_name",
            "-e",
            "frame.len",
        ])
        .stderr(Stdio::null())
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark could not read {}",
        file.display()
    );
    let mut by = std::collections::HashMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = l.split('\t');
        let (Some(name), Some(len)) = (it.next(), it.next()) else {
            continue;
        };
        let e = by.entry(name.to_owned()).or_insert((0, 0));
        e.0 += 1;
        e.1 += len.parse::<u64>().unwrap_or(0);
    }
    by
}

/// The driver's receive frames and bytes, and the frames the server handed it to send:
/// those it sent, those it refused (the loopback wire's backlog was full) and those the
/// OUT queue had no room for.
fn driver_counts(sock: &str) -> (u64, u64, u64, u64) {
    let st = stats(sock);
    let d = &st["driver"]["driver"];
    let n = |k: &str| d[k].as_u64().unwrap();
    let handed = n("tx_frames") + n("tx_errors") + st["out_queue_full"].as_u64().unwrap();
    (n("rx_frames"), n("rx_bytes"), handed, n("tx_bytes"))
}

/// Sends `bytes` of a file over TCP between two applications of the server at `sock`, to
/// port `port`; returns once the sender is done.
fn transfer(sock: &str, port: u16, bytes: usize) {
    let file = std::env::temp_dir().join(format!("shmnet-cap-{}-{port}.bin", std::process::id()));
    std::fs::write(&file, vec![0xa5; bytes]).unwrap();
    let out = file.with_extension("out");
    let recv = Killed(
        Command::new(SHMNET)
            .args(["app", "recv-file", &port.to_string()])
            .arg(&out)
            .args(["--socket", sock])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("recv-file"),
    );
    until("send-file completes", || {
        let st = Command::new(SHMNET)
            .args(["app", "send-file", &format!("10.99.0.1:{port}")])
            .arg(&file)
            .args(["--socket", sock])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        st.success().then_some(())
    });
    drop(recv);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&out);
}

/// A capture of both directions during a file transfer: tshark reads every frame of the
/// file, and its frames per direction (and bytes received) are exactly what the driver
/// counted meanwhile — nothing lost, nothing made up.
#[test]
fn a_capture_during_a_transfer_holds_every_frame_the_driver_counted() {
    let test = "a_capture_during_a_transfer_holds_every_frame_the_driver_counted";
    if !all_installed(test, &["tshark"]) {
        return;
    }
    let (_server, sock) = loopback_server("observe-cap", &[]);
    let file = std::env::temp_dir().join(format!("shmnet-cap-{}.pcapng", std::process::id()));
    let cap = Capturing::start(&sock, &["-w", file.to_str().unwrap(), "--ring-mib", "64"]);
    let before = driver_counts(&sock);
    transfer(&sock, 5004, 4 << 20);
    // The connection's last segments (the receiver was killed) settle first.
    let after = until("the driver's counters settle", || {
        let a = driver_counts(&sock);
        std::thread::sleep(Duration::from_millis(300));
        (driver_counts(&sock) == a).then_some(a)
    });
    // What the ring holds is read before the capture ends.
    std::thread::sleep(Duration::from_millis(300));
    let (_, summary) = cap.stop();
    assert!(summary.contains(" 0 lost"), "{summary}");
    let got = tshark_counts(&file);
    let rx = got.get("shmnet-rx").copied().unwrap_or_default();
    let tx = got.get("shmnet-tx").copied().unwrap_or_default();
    assert_eq!(
        rx,
        (after.0 - before.0, after.1 - before.1),
        "rx frames and bytes"
    );
    assert_eq!(tx.0, after.2 - before.2, "tx frames: {tx:?}");
    // Bytes of the frames the device refused are not in its count.
    assert!(tx.1 >= after.3 - before.3, "tx bytes: {tx:?}");
    assert!(
        rx.0 > 2_000,
        "a 4 MiB transfer is thousands of frames: {rx:?}"
    );
    // Every segment is well formed to tshark.
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(&file)
        .args(["-Y", "_ws.malformed || _ws.expert.severity == error"])
        .stderr(Stdio::null())
        .output()
        .expect("tshark");
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "malformed frames: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_file(&file);
}

/// `shmnet capture -w - | tshark -r -`, a count, and a filter that matches nothing of a
/// TCP transfer beside one that matches all of it.
#[test]
fn a_capture_pipes_into_tshark_and_filters_like_tcpdump() {
    let test = "a_capture_pipes_into_tshark_and_filters_like_tcpdump";
    if !all_installed(test, &["tshark"]) {
        return;
    }
    let (_server, sock) = loopback_server("observe-pipe", &[]);
    let mut cap = Command::new(SHMNET)
        .args([
            "capture", "--socket", &sock, "-w", "-", "-c", "20", "tcp", "port", "5005",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("shmnet capture -w -");
    let tshark = Command::new("tshark")
        .args(["-r", "-", "-T", "fields", "-e", "tcp.port"])
        .stdin(cap.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tshark -r -");
    let none = Capturing::start(&sock, &["udp"]);
    let all = Capturing::start(&sock, &["--json", "tcp", "and", "port", "5005"]);
    std::thread::sleep(Duration::from_millis(100));
    transfer(&sock, 5005, 256 << 10);
    std::thread::sleep(Duration::from_millis(300));
    assert!(cap.wait().unwrap().success(), "-c 20 ends the capture");
    let out = tshark.wait_with_output().unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 20, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("5005")), "{lines:?}");
    let (out, summary) = none.stop();
    assert!(
        out.is_empty() && summary.starts_with("0 frames captured"),
        "{summary}"
    );
    let (out, _) = all.stop();
    let frames: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line per frame"))
        .collect();
    assert!(frames.len() > 100, "{}", frames.len());
    assert!(
        frames
            .iter()
            .all(|f| f["summary"].as_str().unwrap().contains("5005"))
    );
}

/// Frames the stack refuses are captured with the counter that refused them: a SYN to a
/// port nobody listens on is TCP's `no_socket`, a pcapng comment tshark shows.
#[test]
fn a_dropped_frame_is_captured_with_its_reason() {
    let test = "a_dropped_frame_is_captured_with_its_reason";
    if !all_installed(test, &["tshark"]) {
        return;
    }
    let (_server, sock) = loopback_server("observe-drop", &[]);
    let file = std::env::temp_dir().join(format!("shmnet-drop-{}.pcapng", std::process::id()));
    let cap = Capturing::start(&sock, &["--point", "drop", "-w", file.to_str().unwrap()]);
    let st = Command::new(SHMNET)
        .args([
            "app",
            "send-file",
            "10.99.0.1:5999",
            "/dev/null",
            "--socket",
            &sock,
        ])
        .args(["--connect-timeout", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("send-file");
    assert!(!st.success(), "nobody listens on 5999");
    std::thread::sleep(Duration::from_millis(300));
    cap.stop();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args([
            "-T",
            "fields",
            "-e",
            "frame.comment",
            "-e",
            "tcp.dstport",
            "-e",
            "tcp.flags.syn",
        ])
        .stderr(Stdio::null())
        .output()
        .expect("tshark");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("dropped: tcp_no_socket\t5999")),
        "{text}"
    );
    let _ = std::fs::remove_file(&file);
}

/// A filter outside the subset is refused before anything starts, saying what the subset
/// has.
#[test]
fn a_filter_outside_the_subset_is_refused_with_what_it_has() {
    let out = Command::new(SHMNET)
        .args([
            "capture",
            "--socket",
            "/nonexistent.sock",
            "net",
            "10.0.0.0/8",
        ])
        .output()
        .expect("shmnet capture");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`net` is not part of shmnet's filter subset"),
        "{err}"
    );
}

/// README.md's "Seeing inside a running server" is a test: its commands, with this run's
/// own control socket, capture file and metrics port.
#[test]
fn readme_seeing_inside_a_running_server() {
    let test = "readme_seeing_inside_a_running_server";
    if !installed("iperf3") || !installed("tshark") || !installed("curl") {
        shmnet_testkit::skip(
            test,
            "needs iperf3, tshark and curl (scripts/setup installs them as root)",
        );
        return;
    }
    library();
    // A free port for --metrics: bound and let go (the server binds it a moment later).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pcap = std::env::temp_dir().join(format!("shmnet-readme-{}.pcapng", std::process::id()));
    loopback::readme_section(
        "## Seeing inside a running server",
        "/tmp/shmnet-obs.sock",
        &[
            ("127.0.0.1:9464", format!("127.0.0.1:{port}")),
            ("/tmp/shmnet-obs.pcapng", pcap.to_str().unwrap().to_owned()),
        ],
    );
    let _ = std::fs::remove_file(&pcap);
}

/// `tmux capture-pane` of session `s`: the screen as text.
fn screen(s: &str) -> String {
    let out = Command::new("tmux")
        .args(["capture-pane", "-p", "-t", s])
        .output()
        .expect("tmux capture-pane");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `shmnet top` in a terminal tmux draws, while iperf3 under `shmnet run` streams: the
/// screen shows the traffic through the driver and both applications with their pids, and
/// `q` ends it.
#[test]
fn shmnet_top_shows_the_traffic_and_quits_on_q() {
    let test = "shmnet_top_shows_the_traffic_and_quits_on_q";
    if !installed("tmux") || !installed("iperf3") {
        shmnet_testkit::skip(
            test,
            "needs tmux and iperf3 (scripts/setup installs them as root)",
        );
        return;
    }
    library();
    let (_server, sock) = loopback_server("observe-top", &[]);
    let session = format!("shmnet-top-{}", std::process::id());
    let mut iperf_s = under_shmnet(&sock, "iperf3");
    iperf_s
        .args(["-s", "-1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _server_side = Killed(iperf_s.spawn().expect("iperf3 -s"));
    std::thread::sleep(Duration::from_millis(500));
    let mut iperf_c = under_shmnet(&sock, "iperf3");
    iperf_c
        // Longer than the test needs (it is killed at the end): on a loaded machine the
        // screen may take a while to show it, and must find it still streaming.
        .args(["-c", "10.99.0.1", "-t", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let client = Killed(iperf_c.spawn().expect("iperf3 -c"));
    let cpid = client.0.id();
    let started = Command::new("tmux")
        .args(["new-session", "-d", "-s", &session, "-x", "120", "-y", "34"])
        .arg(format!("{SHMNET} top --socket {sock}"))
        .status()
        .expect("tmux new-session");
    assert!(started.success());
    struct Session(String);
    impl Drop for Session {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .stderr(Stdio::null())
                .status();
        }
    }
    let _guard = Session(session.clone());
    let shown = until_within(
        "top shows the stream and the client",
        Duration::from_secs(40),
        || {
            let s = screen(&session);
            let streaming = s
                .lines()
                .any(|l| l.contains("│rx ") && !l.contains("│rx 0 frames/s"));
            (s.contains("shmnet top") && streaming && s.contains(&format!("│{cpid} "))).then_some(s)
        },
    );
    assert!(shown.contains(" applications "), "{shown}");
    assert!(shown.contains("drops by reason"), "{shown}");
    let q = Command::new("tmux")
        .args(["send-keys", "-t", &session, "q"])
        .status()
        .expect("tmux send-keys");
    assert!(q.success());
    until("top quits on q", || {
        let alive = Command::new("tmux")
            .args(["has-session", "-t", &session])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        (!alive).then_some(())
    });
    drop(client);
}

/// What a hostile HTTP client does to `--metrics` costs the server nothing: a request
/// claiming a 100 GB body is answered (its body never read), idle connections are closed
/// after their timeout, other methods and paths are refused, and the server goes on.
#[test]
fn metrics_survive_hostile_http_clients() {
    use std::io::Write;
    let (_server, sock, addr) = metrics_server("observe-hostile-http");
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp:.80}");
    // Idle connections that never send a request: closed by the server, never held.
    let idle: Vec<_> = (0..32)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let (code, body) = http_get(&addr, "/metrics");
    assert_eq!(code, 200);
    assert!(body.ends_with("# EOF\n"));
    drop(idle);
    let mut post = std::net::TcpStream::connect(&addr).unwrap();
    post.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut resp = String::new();
    let _ = post.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 405"), "{resp}");
    let (code, _) = http_get(&addr, "/../etc/passwd");
    assert_eq!(code, 404);
    let mut big = std::net::TcpStream::connect(&addr).unwrap();
    let _ = big.write_all(
        format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000)).as_bytes(),
    );
    let mut resp = String::new();
    let _ = big.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 431"), "{resp:.80}");
    assert_eq!(
        stats(&sock)["structure"],
        "server",
        "the server still answers"
    );
}

/// A forked child that adopts its parent's listener and accepts on it is listed under its
/// own pid (the kernel's credentials on its messages), not its parent's: `ss -p`'s use.
#[test]
fn a_forked_child_is_listed_under_its_own_pid() {
    let test = "a_forked_child_is_listed_under_its_own_pid";
    if !installed("python3") {
        shmnet_testkit::skip(test, "needs python3");
        return;
    }
    library();
    let (_server, sock) = loopback_server("observe-fork", &[]);
    const PROGRAM: &str = r#"
import socket, os, time
l = socket.socket(); l.bind(('10.99.0.1', 5210)); l.listen(8)
pid = os.fork()
if pid == 0:
    c, a = l.accept()
    print("child", os.getpid(), flush=True)
    time.sleep(20); os._exit(0)
print("parent", os.getpid(), flush=True)
time.sleep(20)
"#;
    let mut forking = under_shmnet(&sock, "python3");
    forking
        .args(["-c", PROGRAM])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut forking = Killed(forking.spawn().expect("python3 under shmnet run"));
    let mut out = std::io::BufReader::new(forking.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("parent"), "{line}");
    let mut connect = under_shmnet(&sock, "python3");
    connect
        .args([
            "-c",
            "import socket,time; s=socket.create_connection(('10.99.0.1',5210)); time.sleep(20)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _client = Killed(connect.spawn().expect("the client"));
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let child: i64 = line
        .strip_prefix("child ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the child says its pid: {line}"));
    let accepted = until("the accepted end listed", || {
        listing(&sock)
            .into_iter()
            .find(|e| e["state"] == "established" && e["local"] == "10.99.0.1:5210")
    });
    let owners: Vec<i64> = accepted["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(owners, vec![child], "{accepted}");
}
