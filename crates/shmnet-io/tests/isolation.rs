//! `--isolation regions` (issue 15, docs/isolation.md): applications that map nothing of the
//! server's exchange datagrams through their own registered regions — sends by handle,
//! receives copied by the server into buffers they posted — under both miss policies.

mod common;

use common::stepped::{self, US, stats};
use shmnet_io::client::Client;
use shmnet_io::server::ServerStats;
use shmnet_io::spec::{Isolation, OnMiss};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

fn start(tag: &str, on_miss: OnMiss) -> stepped::Stepped {
    stepped::loopback(
        &format!("isolation-{tag}"),
        Isolation::Regions,
        on_miss,
        Duration::from_millis(5),
    )
}

/// The bytes of datagram `k` of `len` bytes.
fn pattern(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k * 31 + i * 7) as u8).collect()
}

fn every_size_both_ways(on_miss: OnMiss) {
    let r = start(&format!("{on_miss:?}"), on_miss);
    let a = Client::connect(&r.path).expect("attach a");
    let b = Client::connect(&r.path).expect("attach b");
    assert!(a.is_isolated() && b.is_isolated());
    assert_eq!(a.window_sizes().0, 0, "no data window is mapped");
    let sa = a.udp_bind(0).unwrap();
    let sb = b.udp_bind(0).unwrap();
    let to_b = SocketAddrV4::new(US, sb.port());
    let mut buf = vec![0u8; 70_000];
    // Sizes across both post classes and their edges, the largest datagram last.
    let sizes = [0, 1, 100, 1_472, 2_040, 2_041, 8_000, 14_792, 65_507];
    // Under drop-on-miss a datagram that finds its posted buffer's line cold is dropped
    // (seed 004: the transport retransmits): send again, as an application over UDP would.
    // Under buffer-on-miss the first send arrives.
    let tries = if on_miss == OnMiss::Drop { 50 } else { 1 };
    let wait = if on_miss == OnMiss::Drop {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(10)
    };
    let exchange = |from: &shmnet_io::client::UdpSocket,
                    to: &shmnet_io::client::UdpSocket,
                    msg: &[u8],
                    buf: &mut [u8]| {
        for _ in 0..tries {
            from.send_to(msg, SocketAddrV4::new(US, to.port())).unwrap();
            if let Ok((n, src)) = to.recv_timeout(buf, wait) {
                assert_eq!(src, SocketAddrV4::new(US, from.port()), "its source");
                assert_eq!(n, msg.len());
                assert!(buf[..n] == msg[..], "the bytes of {} B", msg.len());
                return;
            }
        }
        panic!("{} B never arrived in {tries} tries", msg.len());
    };
    for (k, &len) in sizes.iter().enumerate() {
        let msg = pattern(k, len);
        exchange(&sa, &sb, &msg, &mut buf);
        exchange(&sb, &sa, &msg, &mut buf);
    }
    // A stream more than the posted buffers and the send region hold at once, in bursts;
    // each burst is over when every datagram was received or counted dropped.
    const N: usize = 5_000;
    const BURST: usize = 100;
    let dropped_at_b = |s: &ServerStats| {
        s.apps
            .iter()
            .find(|x| x.pch == Some(1))
            .map_or(0, |x| x.counters.recv_dropped as usize)
    };
    let dropped_before = dropped_at_b(&stats(&r.path));
    let (mut got, mut sent) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sent < N {
        for _ in 0..BURST {
            sa.send_to(&pattern(sent, 1_000), to_b).unwrap();
            sent += 1;
        }
        loop {
            if let Some((n, _)) = sb.try_recv(&mut buf).unwrap() {
                assert_eq!(n, 1_000);
                got += 1;
                continue;
            }
            if got + dropped_at_b(&stats(&r.path)) - dropped_before >= sent {
                break;
            }
            assert!(Instant::now() < deadline, "{got} of {sent} received");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let s = stats(&r.path);
    let dropped = dropped_at_b(&s) - dropped_before;
    let bc = &s.apps.iter().find(|x| x.pch == Some(1)).unwrap().counters;
    eprintln!(
        "{on_miss:?}: {got} of {N} received; b: {bc:?}; lookup {:?}",
        s.lookup
    );
    assert_eq!(a.region_errors(), (0, 0));
    assert_eq!(b.region_errors(), (0, 0));
    // Drop-on-miss may lose the datagrams that arrive while a posted buffer's line is
    // brought in; buffer-on-miss loses none. The stack's queue never overflows here.
    match on_miss {
        OnMiss::Buffer => assert_eq!((got, dropped), (N, 0)),
        OnMiss::Drop => assert_eq!(got + dropped, N, "each one received or counted"),
    }
}

#[test]
fn isolated_applications_exchange_every_size_dropping_on_a_miss() {
    every_size_both_ways(OnMiss::Drop);
}

#[test]
fn isolated_applications_exchange_every_size_buffering_on_a_miss() {
    every_size_both_ways(OnMiss::Buffer);
}

/// `send_from` (the application's own region, by handle) beside the library's sends, in
/// the isolated model: each ping from a line never used before misses once, is held until
/// its line arrives (buffer-on-miss) and goes out; the echo's replies use the library's own
/// regions.
#[test]
fn isolated_send_from_its_own_region_pings_and_pongs() {
    let r = start("send-from", OnMiss::Buffer);
    let a = Client::connect(&r.path).unwrap();
    let b = Client::connect(&r.path).unwrap();
    let sa = a.udp_bind(0).unwrap();
    let sb = b.udp_bind(0).unwrap();
    let region = shmnet_chan::handles::Region::create("own", 8 << 20).unwrap();
    let id = a
        .register(&region, shmnet_chan::handles::Perms::READ)
        .unwrap();
    assert_eq!(id.0, 2, "after the library's send and receive regions");
    let mut buf = [0u8; 2048];
    for k in 0..8u64 {
        let off = k * (256 << 10) + 8;
        let msg = pattern(k as usize, 1_000);
        region.write(off, &msg).unwrap();
        sa.send_from(
            &region,
            id,
            off,
            msg.len(),
            SocketAddrV4::new(US, sb.port()),
        )
        .unwrap();
        let (n, from) = sb.recv_timeout(&mut buf, Duration::from_secs(10)).unwrap();
        assert!(buf[..n] == msg[..]);
        sb.send_to(&buf[..n], from).unwrap();
        let (n, _) = sa.recv_timeout(&mut buf, Duration::from_secs(10)).unwrap();
        assert!(buf[..n] == msg[..]);
    }
    let s = stats(&r.path);
    let app = s.apps.iter().find(|x| x.regions == 3).unwrap();
    assert_eq!(app.counters.sent, 8);
    assert!(
        app.counters.send_misses >= 8,
        "each new line missed once: {:?}",
        app.counters
    );
}

/// Request-response pairs whose applications sleep soon (`set_spin_polls(16)`: with 0
/// they are asleep when most replies come, with the default they rarely sleep) under both
/// isolations: every reply wakes its waiter. A delivery the waiting receive read off the
/// ring after its last look and before it slept (a regression: the completions' reap came
/// there) was left in its socket's queue while the waiter slept out its timeout: this
/// failed in each of four runs before the fix.
#[test]
fn conversations_that_sleep_soon_never_wait_out_a_wake_up() {
    const PAIRS: usize = 3;
    const ROUND_TRIPS: u32 = 20_000;
    for isolation in [Isolation::Regions, Isolation::Shared] {
        let r = stepped::loopback(
            &format!("sleepers-{isolation:?}"),
            isolation,
            OnMiss::Buffer,
            Duration::from_millis(5),
        );
        let mut threads = Vec::new();
        for _ in 0..PAIRS {
            let (port_tx, port_rx) = std::sync::mpsc::channel();
            let path = r.path.clone();
            threads.push(std::thread::spawn(move || {
                let c = Client::connect(&path).unwrap();
                c.set_spin_polls(16);
                let s = c.udp_bind(0).unwrap();
                port_tx.send(s.port()).unwrap();
                let mut buf = [0u8; 64];
                for k in 0..ROUND_TRIPS {
                    let (n, from) = s
                        .recv_timeout(&mut buf, Duration::from_secs(10))
                        .unwrap_or_else(|e| panic!("{isolation:?}: request {k}: {e}"));
                    s.send_to(&buf[..n], from).unwrap();
                }
            }));
            let port = port_rx.recv().unwrap();
            let path = r.path.clone();
            threads.push(std::thread::spawn(move || {
                let c = Client::connect(&path).unwrap();
                c.set_spin_polls(16);
                let s = c.udp_bind(0).unwrap();
                let to = SocketAddrV4::new(US, port);
                let mut buf = [0u8; 64];
                for k in 0..ROUND_TRIPS {
                    s.send_to(&k.to_le_bytes(), to).unwrap();
                    let (n, _) = s
                        .recv_timeout(&mut buf, Duration::from_secs(10))
                        .unwrap_or_else(|e| panic!("{isolation:?}: reply {k}: {e}"));
                    assert_eq!(buf[..n], k.to_le_bytes());
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
    }
}
