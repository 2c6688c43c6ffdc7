//! Scratch hostile-review tests (not to be committed).

use shmnet_chan::handles::RegionId;
use shmnet_chan::handoff::recv_window;
use shmnet_chan::{PageSize, RingStats, Window};
use shmnet_io::client::Client;
use shmnet_io::control::{self, PROTOCOL_VERSION, Request, Response};
use shmnet_io::driver::softnic::{Softnic, SoftnicConfig};
use shmnet_io::inline::ServeConfig;
use shmnet_io::server::{Placement, Server, ServerOptions, ServerStats};
use shmnet_io::spec::{Isolation, OnMiss};
use shmnet_io::windows;
use rustix::fd::OwnedFd;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

struct Running {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(tag: &str, on_miss: OnMiss) -> Running {
    let path = std::env::temp_dir().join(format!(
        "shmnet-test-{}-zzscratch-{tag}.sock",
        std::process::id()
    ));
    let nic = Softnic::new(SoftnicConfig {
        loopback: true,
        ..SoftnicConfig::default()
    })
    .unwrap();
    let mut server = Server::start(
        nic,
        &ServerOptions {
            serve: ServeConfig {
                ip: US,
                loopback: true,
                rx_queue_limit: 1024,
                ..ServeConfig::default()
            },
            socket: path.clone(),
            page: PageSize::Small,
            ipc: false,
            isolation: Isolation::Regions,
            on_miss,
            placement: Placement::Polled,
            limits: Default::default(),
        },
    )
    .expect("start the server");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread = std::thread::spawn(move || {
        while !stop2.load(Ordering::Relaxed) {
            if server.step() == 0 {
                // What `shmnet serve` does.
                server.idle(Duration::from_millis(50));
            }
        }
    });
    Running {
        path,
        stop,
        thread: Some(thread),
    }
}

fn stats(path: &Path) -> ServerStats {
    shmnet_io::server::query_stats(path).expect("stats answered")
}

/// A raw application: Hello, its window, one bound socket.
fn raw_attach(path: &Path) -> (OwnedFd, Window, u16) {
    let (ctl, _) = control::connect_checked(path).expect("connect");
    let call = |req: &Request| {
        control::send(&ctl, req).unwrap();
        control::recv_blocking::<Response>(rustix::fd::AsFd::as_fd(&ctl)).unwrap()
    };
    match call(&Request::Hello {
        version: PROTOCOL_VERSION,
    }) {
        Response::Welcome { isolated: true, .. } => {}
        other => panic!("expected an isolated Welcome, got {other:?}"),
    }
    let win = recv_window(&ctl).expect("its window");
    let socket = match call(&Request::Bind { port: 0 }) {
        Response::Bound { socket, .. } => socket as u16,
        other => panic!("{other:?}"),
    };
    (ctl, win, socket)
}

fn rate(a: &ServerStats, b: &ServerStats, dt: f64) -> (f64, f64) {
    (
        (b.data_plane.rounds - a.data_plane.rounds) as f64 / dt,
        (b.data_plane.sleeps - a.data_plane.sleeps) as f64 / dt,
    )
}

/// One write to the eventfds of its window keeps the data plane from ever sleeping again:
/// the post rings' wake fds are polled even when not armed, and only cleared when armed.
#[test]
fn zz_eventfd_write_makes_the_data_plane_spin() {
    let r = start("spin", OnMiss::Buffer);
    let (_ctl, win, _sock) = raw_attach(&r.path);
    std::thread::sleep(Duration::from_millis(300));
    let s0 = stats(&r.path);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let s1 = stats(&r.path);
    let base = rate(&s0, &s1, t0.elapsed().as_secs_f64());
    eprintln!("baseline idle: rounds/s {:.0}, sleeps/s {:.0}", base.0, base.1);
    // Ring every eventfd of the window once.
    let (_, sigs) = win.fds();
    eprintln!("window signal fds: {}", sigs.len());
    for fd in &sigs {
        let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
    }
    std::thread::sleep(Duration::from_millis(200));
    let s2 = stats(&r.path);
    let t2 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let s3 = stats(&r.path);
    let after = rate(&s2, &s3, t2.elapsed().as_secs_f64());
    eprintln!("after one eventfd write each: rounds/s {:.0}, sleeps/s {:.0}", after.0, after.1);
    assert!(
        after.1 < 10.0 * base.1.max(50.0),
        "the data plane no longer sleeps: {after:?} vs {base:?}"
    );
}

/// A hostile application that keeps REQ looking full of junk and RX looking empty keeps the
/// data plane in its `take` forever: nobody else is served while it runs.
#[test]
fn zz_eventfd_which() {
    let r = start("which", OnMiss::Buffer);
    for i in 0..9 {
        let (ctl, win, _sock) = raw_attach(&r.path);
        std::thread::sleep(Duration::from_millis(100));
        let (_, sigs) = win.fds();
        let _ = rustix::io::write(&sigs[i], &1u64.to_ne_bytes());
        std::thread::sleep(Duration::from_millis(100));
        let s0 = stats(&r.path);
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        let s1 = stats(&r.path);
        let x = rate(&s0, &s1, t0.elapsed().as_secs_f64());
        eprintln!("fd {i}: rounds/s {:.0}, sleeps/s {:.0}", x.0, x.1);
        drop(win);
        drop(ctl);
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn zz_hostile_ring_indices_starve_everyone() {
    let r = start("livelock", OnMiss::Buffer);
    let a = Client::connect(&r.path).unwrap();
    let b = Client::connect(&r.path).unwrap();
    let sa = a.udp_bind(0).unwrap();
    let sb = b.udp_bind(0).unwrap();
    let to_b = SocketAddrV4::new(US, sb.port());
    let mut buf = [0u8; 2048];
    for _ in 0..5 {
        sa.send_to(b"warm", to_b).unwrap();
        sb.recv_timeout(&mut buf, Duration::from_secs(5)).unwrap();
    }
    let t = Instant::now();
    sa.send_to(b"ping", to_b).unwrap();
    sb.recv_timeout(&mut buf, Duration::from_secs(5)).unwrap();
    eprintln!("baseline one-way: {:?}", t.elapsed());

    let go = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let path = r.path.clone();
    let (go2, done2) = (go.clone(), done.clone());
    let attack = Duration::from_secs(2);
    let hostile = std::thread::spawn(move || {
        let (_ctl, win, _sock) = raw_attach(&path);
        let h = win.hostile();
        go2.store(true, Ordering::Release);
        let end = Instant::now() + attack;
        let mut iters = 0u64;
        while Instant::now() < end {
            for _ in 0..1000 {
                let req = h.ring(Some(windows::REQ));
                let deq = RingStats::read(req, windows::APP_RING).dequeued as u32;
                // Always a full ring of (zeroed: not-a-handle) descriptors.
                req.scribble(deq.wrapping_add(windows::APP_RING), deq, 0);
                let rx = h.ring(Some(windows::RX));
                let enq = RingStats::read(rx, windows::APP_RING).enqueued as u32;
                // Everything it was given, consumed at once.
                rx.scribble(enq, enq, 0);
                iters += 1;
            }
        }
        done2.store(true, Ordering::Release);
        let req = h.ring(Some(windows::REQ));
        let deq = RingStats::read(req, windows::APP_RING).dequeued;
        // Leave the ring empty.
        req.scribble(deq as u32, deq as u32, 0);
        eprintln!("hostile: {iters} scribbles, server dequeued {deq} junk descriptors");
        std::thread::sleep(Duration::from_millis(300));
    });
    while !go.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    sa.send_to(b"ping", to_b).unwrap();
    let got = sb.recv_timeout(&mut buf, Duration::from_secs(10));
    let waited = t.elapsed();
    let hostile_done = done.load(Ordering::Acquire);
    eprintln!("one-way during the attack: {waited:?} ({got:?}); attack over when it arrived: {hostile_done}");
    let st = Instant::now();
    let s = shmnet_io::server::query_stats(&r.path);
    eprintln!("stats right after: {:?} in {:?}", s.as_ref().map(|s| s.apps.iter().map(|a| a.counters.bad_sends).collect::<Vec<_>>()), st.elapsed());
    hostile.join().unwrap();
    assert!(
        waited < Duration::from_millis(500),
        "an honest datagram waited {waited:?} while a hostile application scribbled its indices"
    );
}

/// Buffer-on-miss: a send held on a miss whose fill comes back stale (the application
/// registered or unregistered something meanwhile) is never retried, because stale fills do
/// not move the fill count; the data plane busy-polls meanwhile.
#[test]
fn zz_a_held_send_whose_fill_goes_stale_is_stuck() {
    let r = start("stale", OnMiss::Buffer);
    let a = Client::connect(&r.path).unwrap();
    let b = Client::connect(&r.path).unwrap();
    let sa = a.udp_bind(0).unwrap();
    let sb = b.udp_bind(0).unwrap();
    let to_b = SocketAddrV4::new(US, sb.port());
    let mut buf = [0u8; 2048];
    sa.send_to(b"warm", to_b).unwrap();
    sb.recv_timeout(&mut buf, Duration::from_secs(5)).unwrap();
    let mut stuck_at = None;
    for k in 0..300u32 {
        sa.send_to(&k.to_le_bytes(), to_b).unwrap();
        // A little jitter, so the Unregister lands at various points of the miss.
        let spin = Instant::now() + Duration::from_micros(u64::from(k % 7) * 10);
        while Instant::now() < spin {}
        // An Unregister of a region it does not have: refused, but it drops the
        // application's lines and bumps its generation first.
        let _ = a.unregister(RegionId(60_000));
        match sb.recv_timeout(&mut buf, Duration::from_millis(500)) {
            Ok((n, _)) => assert_eq!(&buf[..n], &k.to_le_bytes()),
            Err(_) => {
                stuck_at = Some(k);
                break;
            }
        }
    }
    let s0 = stats(&r.path);
    eprintln!("misses: {:?}", s0.misses);
    let Some(k) = stuck_at else {
        eprintln!("never stuck in 300 tries");
        return;
    };
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let s1 = stats(&r.path);
    let (rounds, sleeps) = rate(&s0, &s1, t0.elapsed().as_secs_f64());
    eprintln!("stuck at send {k}; data plane meanwhile: rounds/s {rounds:.0}, sleeps/s {sleeps:.0}");
    // Still nothing after 3 more seconds, and later sends of a queue behind it.
    sa.send_to(b"behind", to_b).unwrap();
    let later = sb.recv_timeout(&mut buf, Duration::from_secs(3));
    eprintln!("3 s later: {later:?}");
    // Another application's miss moves the fill count: then it goes.
    let c = Client::connect(&r.path).unwrap();
    let scc = c.udp_bind(0).unwrap();
    scc.send_to(b"kick", to_b).unwrap();
    let mut got = Vec::new();
    while let Ok((n, _)) = sb.recv_timeout(&mut buf, Duration::from_secs(2)) {
        got.push(buf[..n].to_vec());
    }
    eprintln!("after another application's miss, b got {} datagrams: {got:?}", got.len());
    assert!(later.is_ok(), "a held send was stuck for good (send {k})");
}
