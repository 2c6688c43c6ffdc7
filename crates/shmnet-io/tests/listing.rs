//! `shmnet sockets`' listing ([`shmnet_io::server::query_sockets`]): every socket of a
//! loopback server, once, with its owners and state — across more pages than one, and for
//! connections whose application has closed them.

mod common;

use common::stepped::{self, Kind, US};
use shmnet_io::client::Client;
use shmnet_io::server::listing::{PAGE_ENTRIES, Proto, SocketEntry, SocketState};
use shmnet_stack::tcp::State;
use std::collections::HashSet;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

fn listing(path: &std::path::Path) -> Vec<SocketEntry> {
    shmnet_io::server::query_sockets(path).expect("the listing is answered")
}

/// Every socket once: more UDP sockets and connections than a page holds, each listed with
/// its application's pid, the connections in pairs with mirrored addresses.
fn lists_every_socket_once(kind: Kind) {
    let srv = stepped::tcp_loopback("listing", kind, Duration::from_millis(2));
    let c = Client::connect(&srv.path).expect("attach");
    let udp: Vec<_> = (0..PAGE_ENTRIES + 10)
        .map(|_| c.udp_bind(0).expect("bind"))
        .collect();
    let l = c.tcp_listen(0, 64).expect("listen");
    let to = SocketAddrV4::new(US, l.port());
    let mut conns = Vec::new();
    for _ in 0..PAGE_ENTRIES / 2 + 5 {
        let s = c.tcp_connect(to, Duration::from_secs(10)).expect("connect");
        let t = l
            .accept_timeout(Duration::from_secs(10))
            .unwrap()
            .expect("accepted");
        conns.push((s, t));
    }
    let all = listing(&srv.path);
    let pid = std::process::id() as i32;
    let key = |e: &SocketEntry| (e.proto == Proto::Tcp, e.local, e.remote);
    let unique: HashSet<_> = all.iter().map(key).collect();
    assert_eq!(unique.len(), all.len(), "{kind:?}: a socket listed twice");
    let udp_ports: HashSet<u16> = udp.iter().map(|u| u.port()).collect();
    let listed_udp: HashSet<u16> = all
        .iter()
        .filter(|e| e.proto == Proto::Udp)
        .map(|e| e.local.port())
        .collect();
    assert_eq!(listed_udp, udp_ports, "{kind:?}: the UDP sockets");
    let listeners: Vec<_> = all
        .iter()
        .filter(|e| e.state == SocketState::Listen)
        .collect();
    assert_eq!(listeners.len(), 1, "{kind:?}");
    assert_eq!(listeners[0].local, to);
    assert_eq!(listeners[0].send_q, 64, "{kind:?}: the backlog");
    let established: Vec<_> = all
        .iter()
        .filter(|e| e.state == SocketState::Tcp(State::Established))
        .collect();
    assert_eq!(established.len(), 2 * conns.len(), "{kind:?}");
    for e in &established {
        let remote = e.remote.expect("a connection has a peer");
        assert!(
            established
                .iter()
                .any(|o| o.local == remote && o.remote == Some(e.local)),
            "{kind:?}: {e:?} has no mirror"
        );
        assert_eq!(e.owners.len(), 1, "{kind:?}: {e:?}");
        assert!(e.tcp.is_some_and(|t| t.mss > 0));
    }
    assert!(all.iter().all(|e| e.owners.iter().all(|o| o.pid == pid)));
    drop(udp);
    drop(conns);
}

#[test]
fn lists_every_socket_once_regions() {
    lists_every_socket_once(Kind::Regions);
}

#[test]
fn lists_every_socket_once_shared() {
    lists_every_socket_once(Kind::Shared);
}

#[test]
fn lists_every_socket_once_ipc() {
    lists_every_socket_once(Kind::Ipc);
}

/// A connection its application closed stays listed, held by nobody, until it is gone;
/// its peer, still open, is in CLOSE-WAIT.
#[test]
fn closed_connections_are_listed_without_an_owner() {
    let srv = stepped::tcp_loopback("orphans", Kind::Regions, Duration::from_millis(2));
    let a = Client::connect(&srv.path).expect("attach");
    let b = Client::connect(&srv.path).expect("attach");
    let l = b.tcp_listen(0, 8).expect("listen");
    let s = a
        .tcp_connect(SocketAddrV4::new(US, l.port()), Duration::from_secs(10))
        .expect("connect");
    let t = l
        .accept_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("accepted");
    let ours = SocketAddrV4::new(US, s.local_port());
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (orphan, peer) = loop {
        let all = listing(&srv.path);
        let find = |local: SocketAddrV4| all.iter().find(|e| e.local == local).cloned();
        if let (Some(o), Some(p)) = (find(ours), find(SocketAddrV4::new(US, t.local_port())))
            && o.owners.is_empty()
            && p.state == SocketState::Tcp(State::CloseWait)
        {
            break (o, p);
        }
        assert!(
            Instant::now() < deadline,
            "the closed connection never showed up unowned: {all:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(orphan.state, SocketState::Tcp(State::FinWait2));
    assert_eq!(peer.owners.len(), 1);
    drop(t);
}
