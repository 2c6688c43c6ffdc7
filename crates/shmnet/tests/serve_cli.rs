//! `shmnet serve` and `shmnet app` as a user runs them: SIGTERM stops every structure in
//! order, an idle inline server sleeps, a second server on one interface is refused, and an
//! application binding port 0 is told its port.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "common/netns.rs"]
mod netns;
use netns::Netns;

/// How long the idle servers are watched.
const IDLE_WATCH: Duration = Duration::from_secs(3);

/// The bound on an idle server's CPU time, as a fraction of wall time. An idle server wakes
/// every 50 ms at most (to notice a signal), each wake costing microseconds: well under 1 %.
/// A loop that spins or yields instead of sleeping costs 50–100 %. And an idle sleeper's CPU
/// time does not grow when the machine is busy (it waits longer for a CPU, but that is not
/// its CPU time), so 10 % cannot fail on a slow or loaded machine and still tells a sleeper
/// from a spinner.
const IDLE_CPU_BOUND: f64 = 0.10;

fn temp(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("shmnet-cli-{}-{tag}", std::process::id()))
}

#[path = "common/party.rs"]
mod party;
use party::Party;

/// CPU time of `p` over `IDLE_WATCH` of wall time, as a fraction.
fn idle_cpu_fraction(p: &Party) -> f64 {
    let (c0, t0) = (p.cpu(), Instant::now());
    std::thread::sleep(IDLE_WATCH);
    (p.cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64()
}

/// A softnic sending one message every half second for far longer than the test.
const PACED: [&str; 6] = [
    "--softnic-gap-us",
    "500000",
    "--softnic-count",
    "1000000",
    "--softnic-size",
    "1000",
];

#[test]
fn sigterm_stops_every_structure_in_order_with_its_socket_removed_and_its_counters_printed() {
    let runtime = temp("sigterm");
    for (name, extra) in [
        ("inline", vec!["--sink", "5001"]),
        ("server", vec!["--structure", "server"]),
        (
            "server thread",
            vec!["--structure", "server", "--driver-thread"],
        ),
        ("ipc", vec!["--structure", "ipc"]),
    ] {
        let socket = temp(&format!("{}.sock", name.replace(' ', "-")));
        let socket_s = socket.to_str().unwrap();
        let mut args = vec!["serve", "--json", "--socket", socket_s];
        args.extend(PACED);
        args.extend(&extra);
        let mut p = Party::shmnet(&args, &runtime);
        p.wait_for("shmnet ");
        if name != "inline" {
            assert!(socket.exists(), "{name}: no socket at {socket_s}");
        }
        p.signal(libc::SIGTERM);
        let status = p.wait();
        assert!(status.success(), "{name}: {status}\n{}", p.err());
        assert!(!socket.exists(), "{name}: the socket is left behind");
        let out = p.out();
        let report: serde_json::Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("{name}: no JSON report ({e}): {out:?}"));
        assert!(report.is_object(), "{name}: {report}");
    }
    let _ = std::fs::remove_dir_all(runtime);
}

#[test]
fn an_idle_inline_server_over_softnic_sleeps() {
    let runtime = temp("idle-softnic");
    let mut args = vec!["serve", "--sink", "5001"];
    args.extend(PACED);
    let mut p = Party::shmnet(&args, &runtime);
    p.wait_for("shmnet inline");
    let cpu = idle_cpu_fraction(&p);
    p.signal(libc::SIGTERM);
    assert!(p.wait().success(), "{}", p.err());
    assert!(
        cpu < IDLE_CPU_BOUND,
        "an inline server with a message every 0.5 s used {:.0} % of a CPU",
        cpu * 100.0
    );
    let _ = std::fs::remove_dir_all(runtime);
}

#[test]
fn an_application_binding_port_0_is_told_its_port() {
    let runtime = temp("port0");
    let socket = temp("port0.sock");
    let socket_s = socket.to_str().unwrap();
    let mut args = vec!["serve", "--structure", "server", "--socket", socket_s];
    args.extend(PACED);
    let mut server = Party::shmnet(&args, &runtime);
    server.wait_for("shmnet server structure");
    let mut app = Party::shmnet(
        &[
            "app",
            "sink",
            "--port",
            "0",
            "--socket",
            socket_s,
            "--timeout",
            "0.5",
            "--json",
        ],
        &runtime,
    );
    let status = app.wait();
    assert!(status.success(), "{}", app.err());
    let out = app.out();
    let mut lines = out.lines();
    let port: u16 = lines
        .next()
        .and_then(|l| l.strip_prefix("port "))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no `port N` line first: {out:?}"));
    assert!(port >= 49152, "an ephemeral port, got {port}");
    let report: serde_json::Value = serde_json::from_str(lines.next().unwrap_or("")).unwrap();
    assert_eq!(report["stopped"], "--timeout of silence", "{report}");
    server.signal(libc::SIGTERM);
    assert!(server.wait().success(), "{}", server.err());
    let _ = std::fs::remove_dir_all(runtime);
}

impl Netns {
    fn shmnet(&self, args: &[&str], runtime: &std::path::Path) -> Party {
        Party::spawn(
            self.cmd(env!("CARGO_BIN_EXE_shmnet"))
                .args(args)
                .env("SHMNET_RUNTIME_DIR", runtime),
        )
    }
}

#[test]
fn on_a_real_interface_an_idle_server_sleeps_and_a_second_one_is_refused() {
    const TEST: &str = "on_a_real_interface_an_idle_server_sleeps_and_a_second_one_is_refused";
    let Some(ns) = root_netns(TEST, "iface") else {
        return;
    };
    let runtime = temp("iface");
    let serve = ["serve", "--driver", "af_packet:v0", "--ip", "10.78.0.1/24"];
    let mut first = ns.shmnet(&[&serve[..], &["--echo", "7"]].concat(), &runtime);
    first.wait_for("shmnet inline on v0");
    let cpu = idle_cpu_fraction(&first);
    assert!(
        cpu < IDLE_CPU_BOUND,
        "an idle inline server on af_packet used {:.0} % of a CPU",
        cpu * 100.0
    );

    // Refused in every structure, naming the first server's pid.
    let pid = first.child.id().to_string();
    for extra in [
        &[][..],
        &["--structure", "server"][..],
        &["--structure", "server", "--driver-thread"][..],
        &["--structure", "ipc"][..],
    ] {
        let socket = temp("second.sock");
        let args = [&serve[..], extra, &["--socket", socket.to_str().unwrap()]].concat();
        let mut second = ns.shmnet(&args, &runtime);
        let status = second.wait();
        assert!(!status.success(), "{extra:?}: a second server started");
        let err = second.err();
        assert!(
            err.contains("already serves v0") && err.contains(&format!("pid {pid}")),
            "{extra:?}: {err}"
        );
    }
    // --force runs beside it, warning loudly.
    let mut forced = ns.shmnet(&[&serve[..], &["--force"]].concat(), &runtime);
    forced.wait_for("shmnet inline on v0");
    assert!(forced.err().contains("WARNING"), "{}", forced.err());
    forced.signal(libc::SIGTERM);
    assert!(forced.wait().success(), "{}", forced.err());

    first.signal(libc::SIGTERM);
    assert!(first.wait().success(), "{}", first.err());
    assert!(
        first.out().contains("inline over af_packet:v0"),
        "{}",
        first.out()
    );
    // Once the first is gone, the interface is free again.
    let mut again = ns.shmnet(&serve, &runtime);
    again.wait_for("shmnet inline on v0");
    again.signal(libc::SIGTERM);
    assert!(again.wait().success(), "{}", again.err());
    let _ = std::fs::remove_dir_all(runtime);
}

#[test]
fn an_idle_server_structure_sleeps_in_every_placement() {
    for (structure, placement, sync) in [
        ("server", "polled", "modern"),
        ("server", "thread", "modern"),
        ("server", "thread", "faithful"),
        ("server", "process", "modern"),
        ("server", "process", "faithful"),
        ("ipc", "thread", "modern"),
    ] {
        let runtime = temp(&format!("idle-{structure}-{placement}-{sync}"));
        let mut args = vec![
            "serve",
            "--structure",
            structure,
            "--placement",
            placement,
            "--sync",
            sync,
        ];
        args.extend(PACED);
        let mut p = Party::shmnet(&args, &runtime);
        p.wait_for(&format!("shmnet {structure} structure"));
        // With no application bound, softnic waits; the server, its control plane and its
        // driver (thread or process: the process's CPU is read from its own /proc entry)
        // must all be asleep.
        let cpu = idle_cpu_fraction(&p);
        p.signal(libc::SIGTERM);
        assert!(p.wait().success(), "{placement}: {}", p.err());
        println!(
            "idle {structure} structure, driver {placement}, {sync} queues: {:.2} % of a CPU",
            cpu * 100.0
        );
        assert!(
            cpu < IDLE_CPU_BOUND,
            "an idle {structure} structure (driver {placement}, {sync} queues) used {:.0} % of a CPU",
            cpu * 100.0
        );
        let _ = std::fs::remove_dir_all(runtime);
    }
}

/// Connects to `socket` without blocking; `false` when the server's backlog is full.
fn connect_nonblocking(socket: &std::path::Path) -> Option<std::os::fd::OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .ok()?;
    let addr = SocketAddrUnix::new(socket).ok()?;
    rustix::net::connect(&fd, &addr).ok()?;
    Some(fd)
}

#[test]
fn stats_answers_when_the_server_is_out_of_file_descriptors() {
    // Enough fds here for every connection the test opens.
    // SAFETY: get/setrlimit on our own process with a valid struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max.min(4096);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    let runtime = temp("fd-limit");
    let socket = runtime.join("s.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shmnet"));
    cmd.args([
        "serve",
        "--structure",
        "server",
        "--max-connections",
        "5000",
        "--hello-timeout",
        "600",
        "--socket",
        socket.to_str().unwrap(),
    ])
    .args(PACED)
    .env("SHMNET_RUNTIME_DIR", &runtime);
    // SAFETY: the closure only calls setrlimit, which is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let r = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            Ok(())
        });
    }
    let mut p = Party::spawn(&mut cmd);
    p.wait_for("shmnet server structure");
    // Idle connections until the server is out of fds and its backlog is full.
    // A full backlog refuses a connect until the server accepts more: try again for a while.
    let mut idle = Vec::new();
    let mut refused_since = None;
    while idle.len() < 1_000 {
        match connect_nonblocking(&socket) {
            Some(fd) => {
                idle.push(fd);
                refused_since = None;
            }
            None => {
                let since = *refused_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(500) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
        .args(["stats", "--json", "--socket", socket.to_str().unwrap()])
        .env("SHMNET_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "stats failed with {} idle connections: {}",
        idle.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        st["control"]["fd_exhausted"].as_u64().unwrap_or(0) > 0,
        "the server never ran out of fds: {}",
        st["control"]
    );
    println!(
        "stats answered in {:.1} ms with {} connections made, the server out of fds",
        took.as_secs_f64() * 1e3,
        idle.len()
    );
    // Out of fds, it does not spin.
    let cpu = idle_cpu_fraction(&p);
    println!("server at its fd limit: {:.2} % of a CPU", cpu * 100.0);
    assert!(
        cpu < IDLE_CPU_BOUND,
        "a server out of fds used {:.0} % of a CPU",
        cpu * 100.0
    );
    drop(idle);
    p.signal(libc::SIGTERM);
    assert!(p.wait().success(), "{}", p.err());
    let _ = std::fs::remove_dir_all(runtime);
}

/// `--sync faithful` where seed 002's queues do not exist (no driver apart from the
/// server's loop) is refused before anything starts, in one line that says what to use.
#[test]
fn faithful_sync_without_a_driver_apart_is_refused_with_what_to_do() {
    for (structure, placement, named) in [
        ("server", "polled", "polled placement"),
        ("ipc", "thread", "ipc structure"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
            .args([
                "serve",
                "--structure",
                structure,
                "--placement",
                placement,
                "--sync",
                "faithful",
                "--socket",
                "/nonexistent/never-made.sock",
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("--placement thread or process"), "{err}");
        assert!(err.contains(named), "{err}");
    }
}

#[test]
fn an_error_is_one_line_that_says_its_cause_once() {
    let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
        .args(["stats", "--socket", "/nonexistent/shmnet.sock"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(
        err.matches("cannot reach a shmnet server").count(),
        1,
        "{err}"
    );
}

#[test]
fn a_server_whose_interface_goes_away_reports_it_and_exits_non_zero_when_it_gives_up() {
    const TEST: &str =
        "a_server_whose_interface_goes_away_reports_it_and_exits_non_zero_when_it_gives_up";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        shmnet_testkit::skip(TEST, "needs root (a network namespace, AF_PACKET)");
        return;
    }
    for placement in ["polled", "thread", "process"] {
        let Some(ns) = Netns::new("shmnet-cli", &format!("gone-{placement}")) else {
            shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
            return;
        };
        let runtime = temp(&format!("gone-{placement}"));
        let socket = runtime.join("s.sock");
        let mut server = ns.shmnet(
            &[
                "serve",
                "--structure",
                "server",
                "--placement",
                placement,
                "--driver",
                "af_packet:v0",
                "--ip",
                "10.79.0.1/24",
                // Long enough that a busy machine sees it report the link down before it
                // gives up and exits (the test waits it out: 10 s per placement).
                "--give-up-after",
                "10",
                "--socket",
                socket.to_str().unwrap(),
            ],
            &runtime,
        );
        server.wait_for("shmnet server structure");
        let stats = || -> Option<serde_json::Value> {
            let out = ns
                .cmd(env!("CARGO_BIN_EXE_shmnet"))
                .args(["stats", "--json", "--socket", socket.to_str().unwrap()])
                .env("SHMNET_RUNTIME_DIR", &runtime)
                .output()
                .ok()?;
            serde_json::from_slice(&out.stdout).ok()
        };
        let link =
            |st: &serde_json::Value| st["driver"]["driver"]["link"].as_str().map(String::from);
        assert_eq!(
            link(&stats().expect("stats")).as_deref(),
            Some("up"),
            "{placement}"
        );
        // The interface goes away: the server says so (stats and a log line), then gives up
        // and exits non-zero.
        assert!(
            Command::new("ip")
                .args(["-n", &ns.0, "link", "del", "v0"])
                .status()
                .unwrap()
                .success()
        );
        let gone_at = Instant::now();
        let mut seen_down = None;
        while seen_down.is_none() && gone_at.elapsed() < Duration::from_secs(30) {
            match stats().as_ref().and_then(link).as_deref() {
                Some("down") | Some("failed") => seen_down = Some(gone_at.elapsed()),
                _ => {
                    if let Ok(Some(s)) = server.child.try_wait() {
                        panic!(
                            "{placement}: exited ({s}) before its stats said the link was down: {}",
                            server.err()
                        );
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        println!("{placement}: reported down after {seen_down:?}");
        assert!(
            seen_down.is_some(),
            "{placement}: never reported down: {}",
            server.err()
        );
        let status = server.wait();
        assert!(
            !status.success(),
            "{placement}: exited 0 after its driver gave up"
        );
        let err = server.err();
        assert!(
            err.contains("went away") && err.contains("the driver stopped"),
            "{placement}: {err}"
        );
        let _ = std::fs::remove_dir_all(runtime);
    }
}

/// `--max-regions` reaches the server: an application registers up to that many regions
/// (the client library's send and receive regions, then two of its own), the next is
/// refused in one line naming the limit, and `shmnet stats` shows them.
#[test]
fn serve_caps_the_regions_an_application_registers() {
    use shmnet_chan::handles::{Perms, Region};
    let runtime = temp("regions");
    let socket = runtime.join("s.sock");
    let mut p = Party::shmnet(
        &[
            "serve",
            "--structure",
            "server",
            "--max-regions",
            "4",
            "--socket",
            socket.to_str().unwrap(),
        ],
        &runtime,
    );
    p.wait_for("shmnet server structure");
    let client = shmnet_io::client::Client::connect(&socket).expect("attach");
    let region = Region::create("cli-test", 8192).unwrap();
    for _ in 0..2 {
        client
            .register(&region, Perms::READ_WRITE)
            .expect("within the cap");
    }
    let err = client
        .register(&region, Perms::READ_WRITE)
        .expect_err("past the cap")
        .to_string();
    assert!(err.contains("at most 4"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
        .args(["stats", "--socket", socket.to_str().unwrap()])
        .env("SHMNET_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("registered regions: 4 (") && text.contains("pinned, 1 refused"),
        "{text}"
    );
    drop(client);
    p.signal(libc::SIGTERM);
    assert!(p.wait().success(), "{}", p.err());
}

/// What `ping -q` said: packets sent, replies received, and the smallest round trip (ms).
fn ping_summary(out: &str) -> (u64, u64, Option<f64>) {
    let mut sent_received = (0, 0);
    let mut min_rtt = None;
    for line in out.lines() {
        if let Some((sent, rest)) = line.split_once(" packets transmitted, ") {
            let received = rest.split_once(' ').map_or("", |(r, _)| r);
            sent_received = (sent.trim().parse().unwrap(), received.parse().unwrap());
        }
        if let Some((_, v)) = line.split_once("min/avg/max/mdev = ") {
            min_rtt = v.split('/').next().and_then(|m| m.parse().ok());
        }
    }
    (sent_received.0, sent_received.1, min_rtt)
}

/// `--impair` on a real interface, as a user tests an application under loss: the kernel
/// pings shmnet through `loss=20%,delay=20ms` in every structure and placement. Each ping
/// crosses the impairment twice (the request received, the reply sent), so about
/// 1 - 0.8² = 36 % of pings are lost, and no round trip is under 40 ms (20 ms each way).
#[test]
fn impair_loses_and_delays_the_kernels_pings_both_ways_in_every_structure() {
    const TEST: &str = "impair_loses_and_delays_the_kernels_pings_both_ways_in_every_structure";
    const PINGS: u64 = 200;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        shmnet_testkit::skip(TEST, "needs root (a network namespace, AF_PACKET)");
        return;
    }
    for (structure, placement, sync) in [
        ("inline", "polled", "modern"),
        ("server", "polled", "modern"),
        ("server", "thread", "modern"),
        ("server", "process", "modern"),
        ("server", "process", "faithful"),
        ("ipc", "thread", "modern"),
    ] {
        let what = format!("{structure}/{placement}/{sync}");
        let Some(ns) = Netns::new(
            "shmnet-cli",
            &format!("impair-{structure}-{placement}-{sync}"),
        ) else {
            shmnet_testkit::skip(TEST, "cannot make a network namespace with a veth pair");
            return;
        };
        // The kernel's end: an address on v1, and shmnet's MAC known, so that the kernel
        // never needs an ARP answer through the impairment.
        ip_ok(&["-n", &ns.0, "addr", "add", "10.80.0.2/24", "dev", "v1"]);
        let link = ip_ok(&["-n", &ns.0, "link", "show", "v0"]);
        let mac = link
            .split_once("link/ether ")
            .and_then(|(_, r)| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no MAC for v0: {link}"))
            .to_string();
        ip_ok(&[
            "-n",
            &ns.0,
            "neigh",
            "replace",
            "10.80.0.1",
            "lladdr",
            &mac,
            "dev",
            "v1",
            "nud",
            "permanent",
        ]);
        let runtime = temp(&format!("impair-{structure}-{placement}-{sync}"));
        let socket = runtime.join("s.sock");
        let mut server = ns.shmnet(
            &[
                "serve",
                "--json",
                "--structure",
                structure,
                "--placement",
                placement,
                "--sync",
                sync,
                "--driver",
                "af_packet:v0",
                "--ip",
                "10.80.0.1/24",
                "--impair",
                "loss=20%,delay=20ms,seed=1",
                "--socket",
                socket.to_str().unwrap(),
            ],
            &runtime,
        );
        server.wait_for("impairing the frames both ways: loss=20%,delay=20ms,seed=1");
        let ping = |args: &[&str]| {
            let out = ns
                .cmd("ping")
                .args(["-q", "-n"])
                .args(args)
                .arg("10.80.0.1")
                .output()
                .unwrap();
            ping_summary(&String::from_utf8_lossy(&out.stdout))
        };
        // shmnet learns the kernel's MAC by ARP, through the impairment: until one ping is
        // answered.
        let answered = (0..50).any(|_| ping(&["-c", "1", "-W", "1"]).1 == 1);
        assert!(
            answered,
            "{what}: no ping answered in 50 tries: {}",
            server.err()
        );
        let (sent, received, min_rtt) = ping(&["-c", &PINGS.to_string(), "-i", "0.01", "-W", "2"]);
        assert_eq!(sent, PINGS, "{what}");
        let lost = sent - received;
        // Binomial(200, 0.36): sigma 6.8 pings; 6 sigma either way.
        let (p, n) = (1.0 - 0.8f64 * 0.8, sent as f64);
        let six_sigma = 6.0 * (n * p * (1.0 - p)).sqrt();
        println!(
            "{what}: {lost} of {sent} pings lost ({:.0} %, expected {:.0} % ± {:.0}), min RTT {min_rtt:?} ms",
            lost as f64 / n * 100.0,
            p * 100.0,
            six_sigma / n * 100.0
        );
        assert!(
            (lost as f64 - n * p).abs() <= six_sigma,
            "{what}: {lost} of {sent} pings lost; expected {:.0} ± {six_sigma:.0}",
            n * p
        );
        let min_rtt = min_rtt.unwrap_or_else(|| panic!("{what}: no RTT"));
        assert!(min_rtt >= 40.0, "{what}: a round trip of {min_rtt} ms");

        // The counters, live (server structures) and in the final report.
        let impair_of = |v: &serde_json::Value| -> serde_json::Value {
            match structure {
                "inline" => v["driver_stats"]["impair"].clone(),
                _ => v["driver"]["driver"]["impair"].clone(),
            }
        };
        if structure != "inline" {
            let out = Command::new(env!("CARGO_BIN_EXE_shmnet"))
                .args(["stats", "--json", "--socket", socket.to_str().unwrap()])
                .env("SHMNET_RUNTIME_DIR", &runtime)
                .output()
                .unwrap();
            let st: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{what}: stats: {e}: {out:?}"));
            assert!(
                impair_of(&st)["rx"]["seen"].as_u64().unwrap_or(0) >= received,
                "{what}: {st}"
            );
        }
        server.signal(libc::SIGTERM);
        assert!(server.wait().success(), "{what}: {}", server.err());
        let report: serde_json::Value = serde_json::from_str(server.out().trim())
            .unwrap_or_else(|e| panic!("{what}: no JSON report ({e}): {}", server.out()));
        let imp = impair_of(&report);
        for dir in ["rx", "tx"] {
            let d = &imp[dir];
            let n = |k: &str| {
                d[k].as_u64()
                    .unwrap_or_else(|| panic!("{what}: {dir}.{k}: {report}"))
            };
            assert!(n("dropped_loss") > 0, "{what}: {dir}: {d}");
            assert!(n("delayed") >= received, "{what}: {dir}: {d}");
            assert_eq!(
                n("seen"),
                n("passed") + n("dropped_loss") + n("held"),
                "{what}: {dir}: {d}"
            );
        }
        let _ = std::fs::remove_dir_all(runtime);
    }
}

/// Runs `ip args…`, which must succeed; returns what it printed.
fn ip_ok(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace with a veth pair for test `test`, or `None` (the test skipped, loudly)
/// when this is not root or the namespace cannot be made.
fn root_netns(test: &str, tag: &str) -> Option<Netns> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        shmnet_testkit::skip(test, "needs root (a network namespace, AF_PACKET)");
        return None;
    }
    let ns = Netns::new("shmnet-cli", tag);
    if ns.is_none() {
        shmnet_testkit::skip(test, "cannot make a network namespace with a veth pair");
    }
    ns
}

/// Prints a party's stderr if the test fails while it is in scope.
struct ShowOnPanic(&'static str, Arc<Mutex<String>>);

impl Drop for ShowOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{} said:\n{}",
                self.0,
                self.1.lock().map(|s| s.clone()).unwrap_or_default()
            );
        }
    }
}

/// `ping` (or `ping -6`) in `ns` with `args`: whether every one was answered.
fn pings_answered(ns: &Netns, args: &[&str]) -> bool {
    let out = ns.cmd("ping").args(args).output().unwrap();
    let (sent, received, _) = ping_summary(&String::from_utf8_lossy(&out.stdout));
    if sent == 0 || sent != received {
        eprintln!(
            "ping {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    sent > 0 && sent == received
}

/// Seed 002's several protocol servers on one driver: `shmnet driver --listen` drives v0 for
/// an IPv4 server and an IPv6 server, each attached with `--attach`. Linux pings both; a
/// third server asking for a family already taken is refused with what to do; `kill -9` of
/// either server leaves the other answering every ping, and the killed one, started again,
/// answers again (the restarted IPv4 server joined by seed 002's own queues, `--sync
/// faithful`).
#[test]
fn two_servers_share_one_driver_by_family_and_each_survives_the_others_death() {
    const TEST: &str = "two_servers_share_one_driver_by_family_and_each_survives_the_others_death";
    let Some(ns) = root_netns(TEST, "shared") else {
        return;
    };
    ip_ok(&["-n", &ns.0, "addr", "add", "10.81.0.2/24", "dev", "v1"]);
    ip_ok(&[
        "-n",
        &ns.0,
        "-6",
        "addr",
        "add",
        "fd81::2/64",
        "dev",
        "v1",
        "nodad",
    ]);
    let runtime = temp("shared");
    let drv_sock = runtime.join("v0.drv");
    let drv_path = drv_sock.to_str().unwrap().to_string();
    let mut driver = ns.shmnet(
        &["driver", "--listen", &drv_path, "--device", "v0", "--json"],
        &runtime,
    );
    driver.wait_for("Ctrl-C to stop");
    // On failure, what the driver said of each server (attached, went away, refused why).
    let _show = ShowOnPanic("the shared driver", Arc::clone(&driver.stderr));
    // `sync` is the server's --sync: the driver joins either kind of queue.
    let start = |family: &str, tag: &str, sync: &str| {
        let sock = runtime.join(format!("{tag}.sock"));
        let mut args = vec![
            "serve",
            "--json",
            "--structure",
            "server",
            "--attach",
            &drv_path,
            "--family",
            family,
            "--socket",
            sock.to_str().unwrap(),
            "--sync",
            sync,
        ];
        args.extend(match family {
            "ipv4" => ["--ip", "10.81.0.1/24"],
            _ => ["--ip6", "fd81::1/64"],
        });
        let mut p = ns.shmnet(&args, &runtime);
        p.wait_for("; data window");
        p
    };
    let v4 = ["-c", "5", "-i", "0.1", "-W", "2", "10.81.0.1"];
    let v6 = ["-6", "-c", "5", "-i", "0.1", "-W", "2", "fd81::1"];
    let mut four = start("ipv4", "four", "modern");
    let mut six = start("ipv6", "six", "modern");
    assert!(pings_answered(&ns, &v4), "IPv4 server: {}", four.err());
    assert!(pings_answered(&ns, &v6), "IPv6 server: {}", six.err());

    // A second IPv6 server is refused, and says what to do.
    let mut again = ns.shmnet(
        &[
            "serve",
            "--structure",
            "server",
            "--attach",
            &drv_path,
            "--ip6",
            "fd81::9/64",
            "--socket",
            runtime.join("again.sock").to_str().unwrap(),
        ],
        &runtime,
    );
    assert!(
        !again.wait().success(),
        "a second server for IPv6 was let in"
    );
    assert!(
        again
            .err()
            .contains("already gives its ipv4+ipv6 frames to other servers"),
        "{}",
        again.err()
    );

    // kill -9 of the IPv6 server: IPv4 goes on, IPv6 stops; a new IPv6 server answers.
    six.signal(libc::SIGKILL);
    six.wait();
    assert!(pings_answered(&ns, &v4), "IPv4 after the IPv6 server died");
    assert!(
        !pings_answered(&ns, &["-6", "-c", "1", "-W", "1", "fd81::1"]),
        "a dead server answered"
    );
    let mut six = start("ipv6", "six2", "modern");
    assert!(
        pings_answered(&ns, &v6),
        "restarted IPv6 server: {}",
        six.err()
    );

    // And the other way round.
    four.signal(libc::SIGKILL);
    four.wait();
    assert!(pings_answered(&ns, &v6), "IPv6 after the IPv4 server died");
    let mut four = start("ipv4", "four2", "faithful");
    assert!(
        pings_answered(&ns, &v4),
        "restarted IPv4 server: {}",
        four.err()
    );

    for p in [&mut four, &mut six] {
        p.signal(libc::SIGTERM);
        assert!(p.wait().success(), "{}", p.err());
    }
    driver.signal(libc::SIGTERM);
    assert!(driver.wait().success(), "{}", driver.err());
    let out = driver.out();
    let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    // Every server that attached either went away or is still listed (its watcher had
    // not seen the hang-up yet when the driver stopped).
    assert_eq!(report["attached"], 4, "{report}");
    let listed = report["serving"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(report["detached"].as_u64().unwrap() + listed, 4, "{report}");
    assert!(report["refused"].as_u64() >= Some(1), "{report}");
    assert!(!drv_sock.exists(), "the driver left its socket behind");
    let _ = std::fs::remove_dir_all(runtime);
}
