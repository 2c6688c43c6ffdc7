//! The `af_packet` driver's health: its interface deleted, set down, recreated, or gone for
//! good, under a driver thread that runs as the server's would (burst, then sleep on
//! `rx_fd` for at most 10 ms when idle), in a pair of network namespaces joined by a veth
//! pair. The test thread changes the interface and watches the driver's published stats.
//!
//! Needs root and `ip`; without them each test skips with a loud `SKIPPED:` message, or fails
//! when `CI=true`. Times are printed, never compared with a tight bound: each wait allows 5 s.

mod common;

use common::netns::{NetnsPair, require_root_netns};
use shmnet_chan::{ChannelSpec, PoolSpec, Window};
use shmnet_io::driver::af_packet::{AfPacket, AfPacketOptions, DownReason};
use shmnet_io::driver::{Driver, DriverStats, LinkState, RxFrame};
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long any wait for the driver allows: generous, so a busy machine cannot fail it.
const PATIENCE: Duration = Duration::from_secs(5);

/// What the driver thread publishes after every round.
#[derive(Clone, Debug, Default)]
struct Snap {
    stats: DriverStats,
    /// The thread's CPU time so far (`RUSAGE_THREAD`).
    cpu: Duration,
    reason: Option<DownReason>,
    /// The first `Err` from `rx_burst`, and whether the calls after it (another `rx_burst`, a
    /// `tx_burst` of one buffer) failed too.
    error: Option<String>,
    errors_again: Option<(bool, bool)>,
    /// Whether `rx_fd` was the same descriptor in every round.
    fd_stable: bool,
    rounds: u64,
}

/// What the driver thread found when it stopped.
#[derive(Debug)]
struct End {
    free: u32,
    total: u32,
    stats: DriverStats,
}

fn thread_cpu() -> Duration {
    // SAFETY: `rusage` is a plain C struct; all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is live; RUSAGE_THREAD fills it for the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The driver thread: opens `af_packet` on `veth_a` in namespace A, then — back in the
/// test's own namespace when `leave_namespace`, so a reopen must find namespace A by itself —
/// drives it until `stop`, publishing a [`Snap`] after every round.
fn drive(
    pair: &NetnsPair,
    opts: AfPacketOptions,
    leave_namespace: bool,
    stop: &AtomicBool,
    snap: &Mutex<Snap>,
) -> End {
    let window = Window::create(&ChannelSpec {
        rings: vec![],
        pools: PoolSpec {
            pools: 2,
            buffers_per_pool: 512,
            data_size: 2048,
            ..PoolSpec::default()
        },
        ..ChannelSpec::default()
    })
    .expect("create the window");
    let mut dp = window.driver_pools().expect("driver pools");
    let mut sp = window.server_pools().expect("server pools");
    let total = window.buffers().geometry().total();
    let guard = pair.enter(&pair.ns_a).expect("enter namespace A");
    let mut drv = AfPacket::open(&pair.veth_a, opts)
        .unwrap_or_else(|e| panic!("open af_packet:{}: {e}", pair.veth_a));
    let _stay = (!leave_namespace).then_some(guard);
    let fd0 = drv.rx_fd().expect("af_packet has an fd").as_raw_fd();
    let mut fd_stable = true;
    let mut rx: Vec<RxFrame> = Vec::new();
    let mut rounds = 0u64;
    while !stop.load(Ordering::Relaxed) {
        rx.clear();
        let got = drv.rx_burst(&mut dp, &mut rx, 64);
        for f in &rx {
            dp.release(f.buf);
        }
        let fd = drv.rx_fd().expect("af_packet has an fd").as_raw_fd();
        fd_stable &= fd == fd0;
        rounds += 1;
        let failed = got.as_ref().err().map(|e| e.to_string());
        let again = failed.as_ref().map(|_| {
            let rx_again = drv.rx_burst(&mut dp, &mut rx, 64).is_err();
            let buf = dp.alloc().expect("a free buffer");
            dp.buffers()
                .set_off_len(buf, 0, 60)
                .expect("a 60-byte frame");
            let tx_again = drv.tx_burst(&mut dp, &[buf]).is_err();
            (rx_again, tx_again)
        });
        {
            let mut s = snap.lock().unwrap();
            s.stats = drv.stats();
            s.cpu = thread_cpu();
            s.reason = drv.down_reason();
            s.fd_stable = fd_stable;
            s.rounds = rounds;
            if failed.is_some() {
                s.error = failed;
                s.errors_again = again;
            }
        }
        if got.is_err() {
            // What the server's loop does: stop driving a driver that gave up.
            break;
        }
        if got.is_ok_and(|n| n == 0) {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live `pollfd`; poll only writes its `revents`.
            unsafe { libc::poll(&mut p, 1, 10) };
        }
    }
    sp.drain_deferred(usize::MAX);
    End {
        free: window.buffers().free_count(),
        total,
        stats: drv.stats(),
    }
}

/// Runs the driver thread while `test` runs on this one; returns `test`'s result and the end.
fn with_driver<R>(
    pair: &NetnsPair,
    opts: AfPacketOptions,
    leave_namespace: bool,
    test: impl FnOnce(&Mutex<Snap>) -> R,
) -> (R, End) {
    let stop = AtomicBool::new(false);
    let snap = Mutex::new(Snap::default());
    std::thread::scope(|s| {
        let h = s.spawn(|| drive(pair, opts, leave_namespace, &stop, &snap));
        // If `test` panics, the scope still joins the driver: stop it first.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let r = {
            let _stop = StopOnDrop(&stop);
            test(&snap)
        };
        (r, h.join().expect("the driver thread"))
    })
}

fn now(snap: &Mutex<Snap>) -> Snap {
    snap.lock().unwrap().clone()
}

/// Waits until `cond` holds for the driver's snapshot (at most [`PATIENCE`]); returns how long
/// it took, or `None`.
fn wait_for(snap: &Mutex<Snap>, cond: impl FnMut(&Snap) -> bool) -> Option<Duration> {
    wait_up_to(snap, PATIENCE, cond)
}

/// Waits until `cond` holds for the driver's snapshot (at most `limit`); returns how long it
/// took, or `None`.
fn wait_up_to(
    snap: &Mutex<Snap>,
    limit: Duration,
    mut cond: impl FnMut(&Snap) -> bool,
) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond(&now(snap)) {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond(&now(snap)).then(|| t0.elapsed())
}

/// Makes namespace B send UDP to shmnet's address without ARP: a permanent neighbour entry
/// for `mac` (the MAC the driver answers for).
fn static_neighbour(pair: &NetnsPair, mac: [u8; 6]) {
    let mac = mac.map(|b| format!("{b:02x}")).join(":");
    pair.run(
        &pair.ns_b,
        &[
            "ip",
            "neigh",
            "replace",
            &pair.shm_ip.to_string(),
            "lladdr",
            &mac,
            "dev",
            &pair.veth_b,
            "nud",
            "permanent",
        ],
    )
    .expect("add the neighbour entry");
}

/// Sends datagrams from namespace B until the driver has received more than `before` frames;
/// returns whether it did within [`PATIENCE`].
fn frames_flow(pair: &NetnsPair, snap: &Mutex<Snap>, before: u64) -> bool {
    let (from, to) = (pair.linux_ip, SocketAddrV4::new(pair.shm_ip, 9));
    let t0 = Instant::now();
    while t0.elapsed() < PATIENCE {
        pair.spawn_in(&pair.ns_b, move || {
            if let Ok(s) = UdpSocket::bind(SocketAddrV4::new(from, 0)) {
                let _ = s.send_to(b"are you there", to);
            }
        })
        .join()
        .expect("the sender thread");
        if wait_quick(snap, |s| s.stats.rx_frames > before) {
            return true;
        }
    }
    false
}

/// Whether `cond` holds within 100 ms.
fn wait_quick(snap: &Mutex<Snap>, cond: impl Fn(&Snap) -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(100) {
        if cond(&now(snap)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Recreates the veth pair with the same names (new MACs, new indices), as the fixture made
/// it.
fn recreate_veth(pair: &NetnsPair) {
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (a, b, va, vb) = (&pair.ns_a, &pair.ns_b, &pair.veth_a, &pair.veth_b);
    ip(&[
        "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb, "netns", b,
    ]);
    let _ = pair.sh(
        a,
        &format!("echo 1 > /proc/sys/net/ipv6/conf/{va}/disable_ipv6"),
    );
    let cidr = format!("{}/{}", pair.linux_ip, pair.prefix);
    ip(&["-n", b, "addr", "add", &cidr, "dev", vb]);
    ip(&["-n", a, "link", "set", va, "up"]);
    ip(&["-n", b, "link", "set", vb, "up"]);
}

fn check_end(end: &End) {
    eprintln!("driver at the end: {:?}", end.stats);
    assert_eq!(
        end.free,
        end.total,
        "every pool buffer is free again ({} of {} held)",
        end.total - end.free,
        end.total
    );
}

#[test]
fn a_deleted_interface_is_down_at_once_costs_no_cpu_and_comes_back() {
    let Some(pair) =
        require_root_netns("a_deleted_interface_is_down_at_once_costs_no_cpu_and_comes_back")
    else {
        return;
    };
    static_neighbour(&pair, pair.mac_a);
    // The driver thread leaves namespace A after opening: the reopen must go back there.
    let ((), end) = with_driver(&pair, AfPacketOptions::default(), true, |snap| {
        assert!(
            frames_flow(&pair, snap, 0),
            "frames arrive before anything happens"
        );
        assert_eq!(now(snap).stats.link, LinkState::Up);

        pair.run(&pair.ns_a, &["ip", "link", "del", &pair.veth_a])
            .expect("delete the veth");
        let took = wait_for(snap, |s| s.stats.link == LinkState::Down);
        eprintln!("deleted: reported down after {took:?}");
        let s = now(snap);
        assert!(took.is_some(), "reported down within {PATIENCE:?}: {s:?}");
        assert_eq!(s.stats.link_down_events, 1);
        // The kernel sets a deleted interface down before it unregisters it: a look between
        // the two says "set down", and the first reopen, finding no such interface, corrects
        // it.
        let gone = |s: &Snap| {
            matches!(
                s.reason,
                Some(DownReason::Gone | DownReason::Error(libc::ENETDOWN))
            )
        };
        let explained = wait_for(snap, gone);
        let s = now(snap);
        assert!(explained.is_some(), "the reason says gone: {:?}", s.reason);

        // Down, the driver thread sleeps: measure its CPU over one second.
        let (c0, r0, t0) = (s.cpu, s.rounds, Instant::now());
        std::thread::sleep(Duration::from_secs(1));
        let s = now(snap);
        let (cpu, wall) = (s.cpu - c0, t0.elapsed());
        eprintln!(
            "down for {wall:?}: the driver thread used {cpu:?} of CPU in {} rounds",
            s.rounds - r0
        );
        assert!(
            cpu < wall / 2,
            "the driver does not spin while its device is gone ({cpu:?} of CPU in {wall:?})"
        );
        assert_eq!(
            s.stats.link,
            LinkState::Down,
            "still down: nothing came back"
        );

        recreate_veth(&pair);
        let took = wait_for(snap, |s| s.stats.link == LinkState::Up);
        eprintln!("recreated: reported up after {took:?}");
        let s = now(snap);
        assert!(took.is_some(), "reported up within {PATIENCE:?}: {s:?}");
        assert_eq!(s.stats.reopens, 1);
        assert_eq!(s.stats.link_down_events, 1);
        assert!(s.reason.is_none());
        assert!(
            s.fd_stable,
            "rx_fd stays the same descriptor across the reopen"
        );

        // The new veth has a new MAC; B still addresses the old one, which the driver keeps
        // answering for.
        assert!(
            frames_flow(&pair, snap, s.stats.rx_frames),
            "frames arrive again after the reopen: {:?}",
            now(snap)
        );
    });
    check_end(&end);
}

#[test]
fn an_interface_set_down_is_down_and_resumes_when_set_up() {
    let Some(pair) = require_root_netns("an_interface_set_down_is_down_and_resumes_when_set_up")
    else {
        return;
    };
    static_neighbour(&pair, pair.mac_a);
    let ((), end) = with_driver(&pair, AfPacketOptions::default(), false, |snap| {
        assert!(
            frames_flow(&pair, snap, 0),
            "frames arrive before anything happens"
        );
        pair.run(&pair.ns_a, &["ip", "link", "set", &pair.veth_a, "down"])
            .expect("set the veth down");
        let took = wait_for(snap, |s| s.stats.link == LinkState::Down);
        eprintln!("set down: reported down after {took:?}");
        let s = now(snap);
        assert!(took.is_some(), "reported down within {PATIENCE:?}: {s:?}");
        assert!(
            matches!(
                s.reason,
                Some(DownReason::SetDown | DownReason::Error(libc::ENETDOWN))
            ),
            "{:?}",
            s.reason
        );

        pair.run(&pair.ns_a, &["ip", "link", "set", &pair.veth_a, "up"])
            .expect("set the veth up");
        let took = wait_for(snap, |s| s.stats.link == LinkState::Up);
        eprintln!("set up: reported up after {took:?}");
        let s = now(snap);
        assert!(took.is_some(), "reported up within {PATIENCE:?}: {s:?}");
        assert_eq!((s.stats.link_down_events, s.stats.reopens), (1, 1));
        assert!(
            frames_flow(&pair, snap, s.stats.rx_frames),
            "frames arrive again: {:?}",
            now(snap)
        );
    });
    check_end(&end);
}

#[test]
fn an_interface_gone_for_good_makes_the_driver_give_up() {
    let Some(pair) = require_root_netns("an_interface_gone_for_good_makes_the_driver_give_up")
    else {
        return;
    };
    // The driver's clock starts when it sees the veth set down, before the test deletes it:
    // the give-up time must outlast the gap between the two (a wait for the report and an
    // `ip link del`), however busy the machine, or the driver gives up on a veth that is only
    // down and says so.
    const GIVE_UP: Duration = Duration::from_secs(5);
    let opts = AfPacketOptions {
        reopen_every: Duration::from_millis(50),
        give_up_after: Some(GIVE_UP),
        ..AfPacketOptions::default()
    };
    let ((), end) = with_driver(&pair, opts, false, |snap| {
        assert!(
            wait_for(snap, |s| s.rounds > 0).is_some(),
            "the driver runs"
        );
        // Set down first, then deleted (as `ip link del` does, in two steps the driver can
        // see apart): the reason it gives up with is the later, truer one.
        pair.run(&pair.ns_a, &["ip", "link", "set", &pair.veth_a, "down"])
            .expect("set the veth down");
        assert!(
            wait_for(snap, |s| s.reason == Some(DownReason::SetDown)).is_some(),
            "reported set down: {:?}",
            now(snap).reason
        );
        pair.run(&pair.ns_a, &["ip", "link", "del", &pair.veth_a])
            .expect("delete the veth");
        // The driver thread stops by itself on the error.
        let limit = GIVE_UP + PATIENCE;
        let took = wait_up_to(snap, limit, |s| s.error.is_some());
        eprintln!(
            "deleted for good: rx_burst returned Err after {took:?} (give-up time {GIVE_UP:?})"
        );
        let s = now(snap);
        assert!(
            took.is_some(),
            "rx_burst returns Err within {limit:?}: {s:?}"
        );
        let e = s.error.unwrap();
        assert!(e.contains("gave up") && e.contains(&pair.veth_a), "{e}");
        assert_eq!(
            s.errors_again,
            Some((true, true)),
            "rx_burst and tx_burst keep returning Err"
        );
        assert_eq!(s.stats.link, LinkState::Failed);
        assert_eq!(s.reason, Some(DownReason::Gone), "a reopen found it gone");
    });
    assert_eq!(end.stats.link, LinkState::Failed);
    // The buffer given to the failing tx_burst was released.
    check_end(&end);
}
