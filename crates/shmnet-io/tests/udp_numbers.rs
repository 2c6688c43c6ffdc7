//! UDP socket numbers are reused as TCP's are: only once the server's `Released` for the old
//! socket was read, so that a datagram delivered to a socket before its close never reaches
//! the socket that takes its number next, and a process can bind and close UDP sockets for
//! ever (numbers used to be never reused: after 65,535 binds, every bind failed with
//! `EADDRINUSE`). Under `--isolation regions`, `shared` and the `ipc` structure.

mod common;

use common::stepped::{self, Kind, US};
use shmnet_io::client::Client;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// Datagrams for the closed socket, left unread on the application's ring or queues.
const OLD: u64 = 64;

/// Deliveries the server placed for its applications, over all of them.
fn delivered(s: &shmnet_io::server::ServerStats) -> u64 {
    s.apps.iter().map(|a| a.counters.delivered).sum()
}

/// A socket that receives [`OLD`] datagrams and is closed unread; the next bind takes its
/// number (checked, so that the test means what it says), and the first datagram it reads
/// is one sent to it, not one of the old socket's.
fn old_datagrams_never_reach_the_new_socket(kind: Kind) {
    let server = stepped::tcp_loopback("udp-numbers", kind, Duration::from_micros(200));
    let app = Client::connect(&server.path).expect("attach the application");
    let sender = Client::connect(&server.path).expect("attach the sender");
    let from = sender.udp_bind(0).expect("bind the sender");
    let old = app.udp_bind(0).expect("bind the old socket");
    let number = old.number();
    let before = delivered(&server.stats());
    for i in 0..OLD {
        from.send_to(&i.to_le_bytes(), SocketAddrV4::new(US, old.port()))
            .expect("send to the old socket");
    }
    // Every old datagram is the application's (on its ring, its data socket or in its
    // queues) before the close.
    let s = stepped::stats_until(&server.path, |s| delivered(s) >= before + OLD);
    assert!(
        delivered(&s) >= before + OLD,
        "{kind:?}: the old socket's datagrams were not delivered: {:?}",
        s.apps
    );
    old.close().expect("close the old socket");
    // The number comes back once its release is delivered: bind until it does (a bind
    // before that takes a fresh number, closed again at once).
    let deadline = Instant::now() + Duration::from_secs(10);
    let new = loop {
        let s = app.udp_bind(0).expect("bind");
        if s.number() == number {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "{kind:?}: number {number} was never given again"
        );
        s.close().expect("close a socket with another number");
        std::thread::sleep(Duration::from_millis(1));
    };
    let fresh = u64::MAX;
    from.send_to(&fresh.to_le_bytes(), SocketAddrV4::new(US, new.port()))
        .expect("send to the new socket");
    let mut buf = [0u8; 64];
    let (n, _) = new
        .recv_timeout(&mut buf, Duration::from_secs(10))
        .expect("the new socket's datagram");
    assert_eq!(
        (n, u64::from_le_bytes(buf[..8].try_into().unwrap())),
        (8, fresh),
        "{kind:?}: the new socket read a datagram sent to the old one"
    );
}

#[test]
fn old_datagrams_never_reach_the_new_socket_regions() {
    old_datagrams_never_reach_the_new_socket(Kind::Regions);
}

#[test]
fn old_datagrams_never_reach_the_new_socket_shared() {
    old_datagrams_never_reach_the_new_socket(Kind::Shared);
}

#[test]
fn old_datagrams_never_reach_the_new_socket_ipc() {
    old_datagrams_never_reach_the_new_socket(Kind::Ipc);
}

/// More binds (each closed before the next) than there are socket numbers: every one
/// succeeds, and the server's table stays small.
fn binds_outnumber_the_numbers(kind: Kind) {
    const BINDS: u32 = 70_000;
    let server = stepped::tcp_loopback("udp-binds", kind, Duration::from_micros(200));
    let app = Client::connect(&server.path).expect("attach the application");
    let mut highest = 0;
    for k in 0..BINDS {
        let s = app
            .udp_bind(0)
            .unwrap_or_else(|e| panic!("{kind:?}: bind {k} of {BINDS} failed: {e}"));
        highest = highest.max(s.number());
        s.close()
            .unwrap_or_else(|e| panic!("{kind:?}: close {k} failed: {e}"));
    }
    // A number waits for its release at most a few rounds: a handful in use at once.
    assert!(
        highest < 1024,
        "{kind:?}: {BINDS} binds one at a time used numbers up to {highest}"
    );
}

#[test]
fn binds_outnumber_the_numbers_shared() {
    binds_outnumber_the_numbers(Kind::Shared);
}

#[test]
fn binds_outnumber_the_numbers_ipc() {
    binds_outnumber_the_numbers(Kind::Ipc);
}

#[test]
fn binds_outnumber_the_numbers_regions() {
    binds_outnumber_the_numbers(Kind::Regions);
}
