//! The `server` structure end to end: softnic on the driver thread, the protocol server, and
//! applications in their own processes attached through the control socket.

use shmnet_chan::PageSize;
use shmnet_io::client::{Client, ClientError};
use shmnet_io::driver::softnic::{Pacer, Permit, Softnic, SoftnicConfig, expected_payload};
use shmnet_io::inline::ServeConfig;
use shmnet_io::server::{Placement, Server, ServerOptions, SyncMode};
use shmnet_io::spec::{DriverSpec, SoftnicSpec};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PORT: u16 = 5001;

fn socket_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("shmnet-test-{}-{tag}.sock", std::process::id()))
}

/// Starts this test binary as an application running child entry `entry`.
fn spawn_app(entry: &str, socket: &std::path::Path, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        entry,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("SHMNET_TEST_SOCKET", socket)
    .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn the application")
}

fn child_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// How many messages a paced softnic may send beyond those the application has said it
/// received (it says so every 100): few enough that they all fit at once in the pools (200
/// messages of 10 fragments, of 4,096 buffers) and between the application's delivery ring
/// (256) and its socket's queue, so however long the application or the server is held up,
/// nothing is dropped for want of room; more than 100, so the stream never waits on the
/// application's next report.
const AHEAD: u64 = 200;

/// A softnic pacer that holds message `sent` back until the application has said it
/// received `sent - AHEAD` (kept in `received`): the tests that count every message test
/// delivery, not whether the receiver keeps up with a rate on a busy machine.
struct AheadOfReceiver(Arc<AtomicU64>);

impl Pacer for AheadOfReceiver {
    fn permit(&mut self, sent: u64) -> Permit {
        if sent < self.0.load(Ordering::Acquire) + AHEAD {
            Permit::Go
        } else {
            Permit::Wait
        }
    }

    fn recheck(&self) -> Option<Duration> {
        // Nothing announces the application's progress to the device: look again soon.
        Some(Duration::from_millis(1))
    }
}

/// The count in an application's `got N` line.
fn reported_received(line: &str) -> Option<u64> {
    line.rsplit_once("got ")?.1.trim().parse().ok()
}

/// Where the application's progress goes: nowhere (an unpaced softnic), to a paced softnic
/// of this process, or to a paced driver process's stdin, one count a line.
enum Progress {
    Ignored,
    Shared(Arc<AtomicU64>),
    Pipe(std::process::ChildStdin),
}

impl Progress {
    fn tell(&mut self, received: u64) {
        match self {
            Progress::Ignored => {}
            Progress::Shared(a) => a.store(received, Ordering::Release),
            // A driver process that has gone fails the test by itself.
            Progress::Pipe(p) => drop(writeln!(p, "{received}")),
        }
    }
}

/// Application entry: receives messages and checks every byte; prints `bound` once bound and
/// `got N` every 100 messages; exits after `SHMNET_N` messages (or when the server goes).
#[test]
#[ignore = "application-process entry; run by the parent tests"]
fn app_checked_receiver() {
    let Some(socket) = child_env("SHMNET_TEST_SOCKET") else {
        eprintln!("app_checked_receiver: not started by a parent test; nothing to do");
        return;
    };
    let n: u64 = child_env("SHMNET_N").unwrap().parse().unwrap();
    let size: usize = child_env("SHMNET_SIZE").unwrap().parse().unwrap();
    let client = Client::connect(&socket).expect("attach");
    let sock = client.udp_bind(PORT).expect("bind");
    println!("bound");
    let mut buf = vec![0u8; 65_536];
    let mut want = Vec::new();
    for k in 1..=n {
        let (len, _) = sock
            .recv_timeout(&mut buf, Duration::from_secs(30))
            .expect("a message within 30 s");
        assert_eq!(len, size);
        let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
        expected_payload(seq, size, &mut want);
        assert!(buf[..len] == want[..], "message {seq} corrupt");
        if k % 100 == 0 {
            println!("got {k}");
        }
    }
    println!("done");
}

/// Driver-process entry: attached to the server at `SHMNET_TEST_SOCKET`, it drives the
/// softnic the server's setup describes (a `DriverSpec` over the control socket, not argv).
#[test]
#[ignore = "driver-process entry; run by the parent tests"]
fn driver_process_softnic() {
    let Some(socket) = child_env("SHMNET_TEST_SOCKET") else {
        eprintln!("driver_process_softnic: not started by a parent test; nothing to do");
        return;
    };
    let (attached, setup) =
        shmnet_io::server::attach_driver_process(std::path::Path::new(&socket)).expect("attach");
    let spec = setup.driver.softnic().expect("a softnic spec").clone();
    let nic = Softnic::new(spec.config(setup.ip, setup.checksum, spec.port)).unwrap();
    attached.run(nic).expect("driver");
}

/// Driver-process entry: as `driver_process_softnic`, its softnic paced by
/// [`AheadOfReceiver`] on the counts the parent writes to its stdin, one a line.
#[test]
#[ignore = "driver-process entry; run by the parent tests"]
fn driver_process_softnic_paced() {
    let Some(socket) = child_env("SHMNET_TEST_SOCKET") else {
        eprintln!("driver_process_softnic_paced: not started by a parent test; nothing to do");
        return;
    };
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if let Ok(n) = line.trim().parse() {
                r.store(n, Ordering::Release);
            }
        }
    });
    let (attached, setup) =
        shmnet_io::server::attach_driver_process(std::path::Path::new(&socket)).expect("attach");
    let spec = setup.driver.softnic().expect("a softnic spec").clone();
    let nic = Softnic::with_pacer(
        spec.config(setup.ip, setup.checksum, spec.port),
        AheadOfReceiver(received),
    )
    .unwrap();
    attached.run(nic).expect("driver");
}

/// Driver-process entry: attaches, and says it could not open the device it was told.
#[test]
#[ignore = "driver-process entry; run by the parent tests"]
fn driver_process_without_its_device() {
    let Some(socket) = child_env("SHMNET_TEST_SOCKET") else {
        eprintln!("driver_process_without_its_device: not started by a parent test; nothing to do");
        return;
    };
    let (attached, setup) =
        shmnet_io::server::attach_driver_process(std::path::Path::new(&socket)).expect("attach");
    attached.fail(&format!("no device {}", setup.driver.name()));
}

/// Starts a server whose driver process runs entry `entry`; returns it and the driver
/// process's stdin.
fn start_with_process(
    tag: &str,
    count: u64,
    size: usize,
    entry: &str,
    sync: SyncMode,
) -> (Server, std::process::ChildStdin) {
    let mut stdin = None;
    let server = start_with_process_entry(tag, count, size, entry, sync, &mut stdin)
        .expect("start the server with a driver process");
    assert_eq!(server.stats().driver_placement, "process");
    (server, stdin.expect("the driver process's stdin"))
}

fn start_with_process_entry(
    tag: &str,
    count: u64,
    size: usize,
    entry: &str,
    sync: SyncMode,
    stdin: &mut Option<std::process::ChildStdin>,
) -> Result<Server, shmnet_io::server::ServerError> {
    Server::start_with_driver_process(
        SoftnicConfig::default().mac,
        &ServerOptions {
            serve: ServeConfig::default(),
            socket: socket_path(tag),
            page: PageSize::Small,
            ipc: false,
            isolation: shmnet_io::spec::Isolation::Shared,
            on_miss: Default::default(),
            sync,
            placement: Placement::Process,
            limits: Default::default(),
        },
        &DriverSpec::Softnic(SoftnicSpec {
            size,
            count,
            port: PORT,
            gap_us: 20.0,
            ..SoftnicSpec::default()
        }),
        |path| {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([entry, "--exact", "--ignored", "--test-threads=1"])
                .env("SHMNET_TEST_SOCKET", path)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()?;
            *stdin = child.stdin.take();
            Ok(child)
        },
        Duration::from_secs(30),
    )
}

#[test]
fn three_processes_driver_server_application() {
    three_processes("3proc", SyncMode::Modern);
}

/// Seed 002's own layout whole: the driver a process of its own, joined to the server by
/// the seed's queues in memory the two processes share.
#[test]
fn three_processes_joined_by_seed_002s_queues() {
    three_processes("3procf", SyncMode::Faithful);
}

fn three_processes(tag: &str, sync: SyncMode) {
    let (count, size) = (2_000u64, 14_792usize);
    let (server, stdin) =
        start_with_process(tag, count, size, "driver_process_softnic_paced", sync);
    let mut r = Running {
        server,
        gate: Arc::new(AtomicBool::new(false)),
        progress: Progress::Pipe(stdin),
    };
    let path = socket_path(tag);
    let mut app = spawn_app(
        "app_checked_receiver",
        &path,
        &[
            ("SHMNET_N", count.to_string()),
            ("SHMNET_SIZE", size.to_string()),
        ],
    );
    let exited = serve_app_to_exit(&mut r, &mut app, |r| r.server.start_driver());
    let stats = r.server.stats_json();
    assert!(exited.success(), "application failed: {stats:#}");
    // The driver process reports its counters every 100 ms.
    serve_until(&mut r, |r| {
        r.server.stats_json()["driver"]["driver"]["rx_frames"] == count * 10
    });
    assert!(all_free(&mut r), "buffers leaked: {stats:#}");
    let how = match sync {
        SyncMode::Modern => How::Thread,
        SyncMode::Faithful => How::Faithful,
    };
    check_faithful(&mut r, how, count * 10);
}

/// The driver process learns its device from the server (a `DriverSetup` over the control
/// socket); one that cannot open it says why, and the server reports the driver stopped
/// with that reason.
#[test]
fn a_driver_process_that_cannot_open_its_device_says_why() {
    // The server does not claim to run: starting fails, with the driver's reason.
    match start_with_process_entry(
        "nodev",
        10,
        100,
        "driver_process_without_its_device",
        SyncMode::Modern,
        &mut None,
    ) {
        Err(e) => assert!(
            e.to_string()
                .contains("could not open its device: no device softnic"),
            "{e}"
        ),
        Ok(_) => panic!("the server started without its device"),
    }
}

#[test]
fn a_killed_driver_process_is_reported_and_the_server_keeps_answering() {
    killed_driver("killdrv", SyncMode::Modern);
}

/// Killed perhaps inside one of the queues' mutexes: the server stops using the queues.
#[test]
fn a_killed_driver_process_on_seed_002s_queues_is_reported_and_the_server_keeps_answering() {
    killed_driver("killdrvf", SyncMode::Faithful);
}

fn killed_driver(tag: &str, sync: SyncMode) {
    let (server, _stdin) =
        start_with_process(tag, 1_000_000, 1_472, "driver_process_softnic", sync);
    let mut r = Running {
        server,
        gate: Arc::new(AtomicBool::new(false)),
        progress: Progress::Ignored,
    };
    r.server.start_driver();
    // Let it run a moment, then kill the driver process the hard way.
    serve_until(&mut r, |r| {
        r.server.stats_json()["driver"]["driver"]["rx_frames"]
            .as_u64()
            .unwrap_or(0)
            > 1000
    });
    let pid = r
        .server
        .driver_pid()
        .expect("the driver process is running");
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    serve_until(&mut r, |r| r.server.driver_stopped());
    // With nothing to do, the server sleeps again: no queue of the dead driver keeps it
    // awake.
    let before = r.server.stats().data_plane.sleeps;
    for _ in 0..5 {
        r.server.step();
        r.server.idle(Duration::from_millis(5));
    }
    assert!(
        r.server.stats().data_plane.sleeps > before,
        "{sync:?}: the server no longer sleeps after its driver died"
    );
    // The server still answers on its control socket (the loop must run while we ask).
    let path = socket_path(tag);
    let asker = std::thread::spawn(move || shmnet_io::server::query_stats(&path));
    serve_until(&mut r, |_| asker.is_finished());
    let st = asker.join().unwrap().expect("the server answers");
    assert!(!st.driver_running);
}

struct Running {
    server: Server,
    gate: Arc<AtomicBool>,
    /// Where the application's `got N` lines go.
    progress: Progress,
}

fn start(tag: &str, count: u64, size: usize) -> Running {
    start_as(tag, count, size, How::Polled, false)
}

/// The structure and the driver's placement a test runs.
#[derive(Clone, Copy, PartialEq)]
enum How {
    /// `server`, the driver polled by the server's loop.
    Polled,
    /// `server`, the driver on a thread joined by the IN and OUT queues.
    Thread,
    /// `ipc`.
    Ipc,
    /// `server`, the driver on a thread joined by seed 002's own queues (`--sync faithful`).
    Faithful,
}

/// Starts a server with an in-process softnic; `paced`: held to [`AHEAD`] messages beyond
/// what the application says it received.
fn start_as(tag: &str, count: u64, size: usize, how: How, paced: bool) -> Running {
    let gate = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let nic = Softnic::with_pacer(
        SoftnicConfig {
            size,
            count: Some(count),
            checksum: true,
            dst_ports: vec![PORT],
            gate: Some(gate.clone()),
            // Paced so that a receiver that sleeps and wakes keeps up on a quiet machine
            // (UDP drops what a slow receiver cannot take); the tests that count every
            // message also pace by the receiver's progress (`paced`), as the pools hold only
            // ~20 ms of this: they are about delivery and recovery, not speed.
            gap: Duration::from_micros(50),
            ..SoftnicConfig::default()
        },
        paced.then(|| AheadOfReceiver(received.clone())),
    )
    .unwrap();
    let server = Server::start(
        nic,
        &ServerOptions {
            serve: ServeConfig {
                rx_queue_limit: 1024,
                ..ServeConfig::default()
            },
            socket: socket_path(tag),
            page: PageSize::Small,
            ipc: how == How::Ipc,
            isolation: shmnet_io::spec::Isolation::Shared,
            on_miss: Default::default(),
            sync: if how == How::Faithful {
                shmnet_io::server::SyncMode::Faithful
            } else {
                Default::default()
            },
            placement: if how == How::Polled {
                Placement::Polled
            } else {
                Placement::Thread
            },
            limits: Default::default(),
        },
    )
    .expect("start the server");
    Running {
        server,
        gate,
        progress: if paced {
            Progress::Shared(received)
        } else {
            Progress::Ignored
        },
    }
}

/// Runs the server loop until `done` or 60 s.
fn serve_until(r: &mut Running, mut done: impl FnMut(&mut Running) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(r) {
        assert!(
            Instant::now() < deadline,
            "timed out: {:#}",
            r.server.stats_json()
        );
        if r.server.step() == 0 {
            r.server.idle(Duration::from_millis(5));
        }
    }
}

/// Serves until the application `app` exits, calling `on_bound` when it reports that its
/// port is bound and telling `r.progress` what it reports received; returns how it exited.
fn serve_app_to_exit(
    r: &mut Running,
    app: &mut Child,
    mut on_bound: impl FnMut(&mut Running),
) -> std::process::ExitStatus {
    let out = lines(app);
    let mut exited = None;
    serve_until(r, |r| {
        while let Ok(line) = out.try_recv() {
            if line.ends_with("bound") {
                on_bound(r);
            } else if let Some(n) = reported_received(&line) {
                r.progress.tell(n);
            }
        }
        exited = app.try_wait().unwrap();
        exited.is_some()
    });
    exited.expect("serve_until returns once the application exited")
}

/// Reads the child's stdout lines on a thread; returns a receiver of lines. (The child is a
/// test harness: its first line of ours shares a line with the harness's "test … ".)
fn lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn all_free(r: &mut Running) -> bool {
    let total = r.server.data_window().layout().pool_geometry().total();
    for _ in 0..100 {
        r.server.step();
        if r.server.data_window().buffers().free_count() == total {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Application entry: echoes `SHMNET_N` datagrams back to their senders.
#[test]
#[ignore = "application-process entry; run by the parent tests"]
fn app_echo() {
    let Some(socket) = child_env("SHMNET_TEST_SOCKET") else {
        eprintln!("app_echo: not started by a parent test; nothing to do");
        return;
    };
    let n: u64 = child_env("SHMNET_N").unwrap().parse().unwrap();
    let client = Client::connect(&socket).expect("attach");
    let sock = client.udp_bind(PORT).expect("bind");
    println!("bound");
    let mut buf = vec![0u8; 65_536];
    for _ in 0..n {
        let (len, from) = sock
            .recv_timeout(&mut buf, Duration::from_secs(30))
            .expect("a message within 30 s");
        sock.send_to(&buf[..len], from).expect("echo");
    }
    println!("done");
}

fn receive_all(tag: &str, how: How) {
    let (count, size) = (3_000u64, 14_792usize);
    let mut r = start_as(tag, count, size, how, true);
    let path = socket_path(tag);
    let mut app = spawn_app(
        "app_checked_receiver",
        &path,
        &[
            ("SHMNET_N", count.to_string()),
            ("SHMNET_SIZE", size.to_string()),
        ],
    );
    let exited = serve_app_to_exit(&mut r, &mut app, |r| r.gate.store(true, Ordering::Release));
    let status = exited;
    let stats = r.server.stats_json();
    assert!(status.success(), "application failed: {status}: {stats:#}");
    assert!(all_free(&mut r), "buffers leaked: {stats:#}");
    check_faithful(&mut r, how, count);
}

/// Under `--sync faithful` every frame crossed seed 002's queues: the IPv4 IN queue's two
/// ends agree on at least `frames` (and the stats say which sync ran). The driver publishes
/// its counters when idle, so the ends are waited for until they agree.
fn check_faithful(r: &mut Running, how: How, frames: u64) {
    let st = r.server.stats();
    if how != How::Faithful {
        assert_eq!(st.sync, "modern");
        assert!(st.faithful.is_none() && st.driver.faithful.is_none());
        return;
    }
    assert_eq!(st.sync, "faithful");
    serve_until(r, |r| {
        let st = r.server.stats();
        let (Some(server), Some(driver)) = (st.faithful, st.driver.faithful) else {
            return false;
        };
        server.in_ip.dequeued == driver.in_ip.enqueued && driver.out.dequeued == server.out.enqueued
    });
    let st = r.server.stats();
    let server = st.faithful.expect("the server's side of the queues");
    assert!(server.in_ip.dequeued >= frames, "{server:?}");
    assert_eq!(server.in_ip.refused + server.in_ip.index_errors, 0);
}

#[test]
fn an_application_process_receives_every_message_intact() {
    receive_all("intact", How::Polled);
}

#[test]
fn an_application_process_receives_every_message_intact_from_a_driver_thread() {
    receive_all("intactthr", How::Thread);
}

#[test]
fn an_application_process_receives_every_message_intact_through_seed_002s_queues() {
    receive_all("intactfaith", How::Faithful);
}

#[test]
fn the_ipc_structure_delivers_every_message_intact_too() {
    receive_all("ipc", How::Ipc);
}

fn echo_all(tag: &str, how: How) {
    let (count, size) = (500u64, 1_472usize);
    let mut r = start_as(tag, count, size, how, false);
    let mut app = spawn_app(
        "app_echo",
        &socket_path(tag),
        &[("SHMNET_N", count.to_string())],
    );
    let exited = serve_app_to_exit(&mut r, &mut app, |r| r.gate.store(true, Ordering::Release));
    assert!(exited.success(), "{:#}", r.server.stats_json());
    // Every echo left as a frame through the driver (plus the ARP request that found the
    // simulated peer), checked as well-formed by softnic's sink.
    serve_until(&mut r, |r| {
        let st = r.server.stats();
        st.driver.driver.tx_frames > count && st.driver.driver.tx_errors == 0
    });
    assert!(
        all_free(&mut r),
        "buffers leaked: {:#}",
        r.server.stats_json()
    );
    check_faithful(&mut r, how, count);
}

#[test]
fn an_echo_application_sends_through_the_server() {
    echo_all("echo", How::Polled);
}

#[test]
fn an_echo_application_sends_through_the_server_and_a_driver_thread() {
    echo_all("echothr", How::Thread);
}

#[test]
fn an_echo_application_sends_through_seed_002s_queues() {
    echo_all("echofaith", How::Faithful);
}

#[test]
fn an_echo_application_sends_through_ipc() {
    echo_all("echoipc", How::Ipc);
}

#[test]
fn a_killed_application_gives_everything_back_and_the_server_serves_the_next() {
    let (count, size) = (4_000u64, 1_472usize);
    let mut r = start("kill", count, size);
    let path = socket_path("kill");
    // The first application is killed mid-stream, holding deliveries it has not read.
    let mut first = spawn_app(
        "app_checked_receiver",
        &path,
        &[
            ("SHMNET_N", count.to_string()),
            ("SHMNET_SIZE", size.to_string()),
        ],
    );
    let out = lines(&mut first);
    serve_until(&mut r, |r| match out.try_recv() {
        Ok(line) if line.ends_with("bound") => {
            r.gate.store(true, Ordering::Release);
            false
        }
        Ok(line) => line.ends_with("got 500"),
        Err(_) => false,
    });
    first.kill().unwrap();
    let status = first.wait().unwrap();
    assert_eq!(status.signal(), Some(9));
    serve_until(&mut r, |r| r.server.apps_attached() == 0);
    // A second application gets what is still to come, intact.
    r.gate.store(false, Ordering::Release);
    let mut second = spawn_app(
        "app_checked_receiver",
        &path,
        &[
            ("SHMNET_N", "200".into()),
            ("SHMNET_SIZE", size.to_string()),
        ],
    );
    let exited = serve_app_to_exit(&mut r, &mut second, |r| {
        r.gate.store(true, Ordering::Release)
    });
    assert!(exited.success());
    // Stop softnic (its messages are single frames, so none is left half-sent), let what is in
    // flight drain (no socket: counted drops), then check the pools.
    r.gate.store(false, Ordering::Release);
    serve_until(&mut r, |r| r.server.apps_attached() == 0);
    let stats = r.server.stats_json();
    assert!(all_free(&mut r), "buffers leaked: {stats:#}");
}

#[test]
fn a_client_without_a_server_is_told_what_to_do() {
    let err = Client::connect(socket_path("nobody"))
        .err()
        .expect("no server");
    let msg = err.to_string();
    assert!(msg.contains("shmnet serve"), "{msg}");
    assert!(matches!(err, ClientError::Control(_)));
}

/// Starts a server whose control plane has `limits`, its softnic idle.
fn start_limited(tag: &str, limits: shmnet_io::server::ControlLimits) -> Server {
    let nic = Softnic::new(SoftnicConfig {
        count: Some(0),
        ..SoftnicConfig::default()
    })
    .unwrap();
    Server::start(
        nic,
        &ServerOptions {
            serve: ServeConfig::default(),
            socket: socket_path(tag),
            page: PageSize::Small,
            ipc: false,
            isolation: shmnet_io::spec::Isolation::Shared,
            on_miss: Default::default(),
            sync: Default::default(),
            placement: Placement::Polled,
            limits,
        },
    )
    .expect("start the server")
}

/// Steps `server` on a thread of its own until `stop`.
fn serve_in_background(
    mut server: Server,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Server> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if server.step() == 0 {
                server.idle(Duration::from_millis(5));
            }
        }
        server
    })
}

#[test]
fn the_control_plane_caps_connections_and_still_answers_stats() {
    use shmnet_io::control::{self, Request, Response};
    let limits = shmnet_io::server::ControlLimits {
        max_connections: 4,
        hello_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let server = start_limited("cap", limits);
    let stop = Arc::new(AtomicBool::new(false));
    let t = serve_in_background(server, stop.clone());
    let path = socket_path("cap");
    // Four connections that never say anything fill the server.
    let idle: Vec<_> = (0..4).map(|_| control::connect(&path).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    // The fifth is told why, in one line, and closed.
    let fifth = control::connect(&path).unwrap();
    control::send(
        &fifth,
        &Request::Hello {
            version: control::PROTOCOL_VERSION,
        },
    )
    .unwrap();
    match control::recv_blocking::<Response>(&fifth).unwrap() {
        Response::Error(e) => assert!(e.contains("--max-connections"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // `shmnet stats` is still answered. At the cap the server waits 10 ms for the request
    // (it must not wait long on a silent connection there); an asker descheduled between
    // its connect and its request is refused like anyone else, so a busy machine may need
    // another try.
    let st = (0..50)
        .find_map(|_| shmnet_io::server::query_stats(&path).ok())
        .expect("stats answered at the cap");
    assert!(st.control.refused_full >= 2, "{:?}", st.control);
    assert_eq!(st.control.open, 4);
    drop(idle);
    stop.store(true, Ordering::Relaxed);
    drop(t.join().unwrap());
}

#[test]
fn a_connection_that_never_says_hello_is_closed() {
    use shmnet_io::control;
    let limits = shmnet_io::server::ControlLimits {
        max_connections: 16,
        // Long enough that the application below, which says Hello as soon as it has
        // connected, is never late for it on a busy machine (and the stats asker neither).
        hello_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let server = start_limited("hello", limits);
    let stop = Arc::new(AtomicBool::new(false));
    let t = serve_in_background(server, stop.clone());
    let path = socket_path("hello");
    let silent = control::connect(&path).unwrap();
    // The server hangs up on it (a blocking recv returns the hang-up), well within 30 s.
    rustix::net::sockopt::set_socket_timeout(
        &silent,
        rustix::net::sockopt::Timeout::Recv,
        Some(Duration::from_secs(30)),
    )
    .unwrap();
    let mut buf = [0u8; 16];
    let got = rustix::net::recv(&silent, &mut buf, rustix::net::RecvFlags::empty());
    assert!(matches!(got, Ok((0, _))), "expected a hang-up, got {got:?}");
    let st = shmnet_io::server::query_stats(&path).unwrap();
    assert_eq!(st.control.hello_timeouts, 1, "{:?}", st.control);
    // An application that does say Hello in time is served.
    let client = shmnet_io::client::Client::connect(&path).expect("attach");
    let sock = client.udp_bind(0).expect("bind any port");
    assert!(sock.port() >= 49152, "port {}", sock.port());
    stop.store(true, Ordering::Relaxed);
    drop(t.join().unwrap());
}
