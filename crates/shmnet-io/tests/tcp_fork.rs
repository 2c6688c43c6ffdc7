//! TCP sockets shared by a fork (docs/preload.md, "fork"), through the client API: a
//! "parent" application takes a ticket, a "child" application adopts it, and both hold
//! the parent's listener and connections — as a forked child holds inherited descriptors.
//! Three clients in one thread play parent, child and the peer, on a loopback server
//! stepped on its own thread, under each transport.

mod common;

use common::stepped::{self, Kind, US};
use shmnet_io::client::{Adopted, Client, ClientError, ForkTicket, TcpListener, TcpStream};
use std::net::SocketAddrV4;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(10);

fn read_some(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let n = s
        .read_timeout(&mut buf, PATIENCE)
        .expect("read")
        .expect("bytes or the end within 10 s");
    buf[..n].to_vec()
}

/// What a child adopted, each with its number in the parent: listeners, then connections.
type Inherited = (Vec<(u16, TcpListener)>, Vec<(u16, TcpStream)>);

fn adopt(child: &Client, ticket: ForkTicket) -> Inherited {
    let mut ls = Vec::new();
    let mut ss = Vec::new();
    for (parent, a) in child.adopt(ticket).expect("adopt") {
        match a {
            Adopted::Listener(l) => ls.push((parent, l)),
            Adopted::Stream(s) => ss.push((parent, s)),
        }
    }
    (ls, ss)
}

/// The pattern of a server that forks per connection (socat `fork`, Python's
/// `ForkingMixIn`, sshd, inetd): the parent accepts, forks, closes its copy of the
/// connection and goes back to accepting; the child serves the connection and leaves the
/// listener alone.
fn fork_per_connection(kind: Kind) {
    let srv = stepped::tcp_loopback("fork-per-conn", kind, Duration::from_millis(2));
    let parent = Client::connect(&srv.path).expect("attach the parent");
    let peer = Client::connect(&srv.path).expect("attach the peer");
    let l = parent.tcp_listen(0, 8).expect("listen");
    let to = SocketAddrV4::new(US, l.port());
    let mut p1 = peer.tcp_connect(to, PATIENCE).expect("connect");
    p1.write_all(b"before the fork").unwrap();
    let mut s = l.accept().expect("accept");
    let mut got = Vec::new();
    while got.len() < 15 {
        got.extend(read_some(&mut s));
    }
    assert_eq!(
        got, b"before the fork",
        "{kind:?}: the parent reads before it forks"
    );
    let (s_number, l_number) = (s.number(), l.number());

    let ticket = parent
        .prepare_fork(&[l_number, s_number], Vec::new)
        .expect("a fork ticket")
        .0;
    let child = Client::connect(&srv.path).expect("attach the child");
    // The parent closes its copy at once: the child's hold keeps the connection.
    s.close().unwrap();
    let (ls, mut ss) = adopt(&child, ticket);
    assert_eq!(ls.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [l_number]);
    assert_eq!(ss.len(), 1, "{kind:?}: the accepted connection is shared");
    assert_eq!(ss[0].0, s_number);
    assert!(
        matches!(child.adopt(ticket), Err(ClientError::Refused(_))),
        "{kind:?}: a ticket is good once"
    );
    let cs = &mut ss[0].1;
    // What comes after the fork goes to whoever reads: the child.
    p1.write_all(b"after the fork").unwrap();
    let mut got = Vec::new();
    while got.len() < 14 {
        got.extend(read_some(cs));
    }
    assert_eq!(got, b"after the fork", "{kind:?}");
    cs.write_all(b"from the child").unwrap();
    let mut echo = Vec::new();
    while echo.len() < 14 {
        echo.extend(read_some(&mut p1));
    }
    assert_eq!(echo, b"from the child");

    // The parent accepts the next connection; the child's copy of the listener is silent.
    let mut p2 = peer.tcp_connect(to, PATIENCE).expect("second connect");
    let mut s2 = l
        .accept_timeout(PATIENCE)
        .expect("accept")
        .expect("the parent accepts the next connection");
    p2.write_all(b"second").unwrap();
    assert_eq!(read_some(&mut s2), b"second");
    // The child leaves: its close ends the first connection (the parent's went before).
    drop(ls);
    ss.clear();
    let mut buf = [0u8; 16];
    assert_eq!(
        p1.read_timeout(&mut buf, PATIENCE).expect("read"),
        Some(0),
        "{kind:?}: the peer sees the end once both holders closed"
    );
    // The listener is the parent's alone again and still listens.
    let _p3 = peer.tcp_connect(to, PATIENCE).expect("third connect");
    assert!(l.accept_timeout(PATIENCE).expect("accept").is_some());
    let st = srv.stats();
    assert_eq!(st.forks.forks, 1);
    assert_eq!(st.forks.adopted, 1);
    assert_eq!(st.forks.refused, 1);
    assert!(st.forks.resumes >= 2, "{kind:?}: {:?}", st.forks);
}

#[test]
fn fork_per_connection_shared() {
    fork_per_connection(Kind::Shared);
}

#[test]
fn fork_per_connection_regions() {
    fork_per_connection(Kind::Regions);
}

#[test]
fn fork_per_connection_ipc() {
    fork_per_connection(Kind::Ipc);
}

/// Bytes delivered to the parent and not read at the fork go back to the server
/// (`Request::Unread`): the holder that reads next — here the child — gets them, once; the
/// parent does not read them again. (Copied into both processes' memory, as before, both
/// read them: a shell that read a line and then started a command read it twice.)
fn delivered_bytes_are_read_once(kind: Kind) {
    let srv = stepped::tcp_loopback("fork-unread", kind, Duration::from_millis(2));
    let parent = Client::connect(&srv.path).expect("attach the parent");
    let peer = Client::connect(&srv.path).expect("attach the peer");
    let l = parent.tcp_listen(0, 8).expect("listen");
    let mut p1 = peer
        .tcp_connect(SocketAddrV4::new(US, l.port()), PATIENCE)
        .expect("connect");
    let mut s = l.accept().expect("accept");
    p1.write_all(b"first").unwrap();
    assert_eq!(read_some(&mut s), b"first", "{kind:?}");
    p1.write_all(b"delivered").unwrap();
    // Long enough for the server to deliver them to the parent, unread.
    std::thread::sleep(Duration::from_millis(100));
    let number = s.number();
    let mut taken = Vec::new();
    let (ticket, kept) = parent
        .prepare_fork(&[number], || {
            let mut buf = [0u8; 64];
            while let Ok(Some(n)) = s.try_read(&mut buf) {
                if n == 0 {
                    break;
                }
                taken.extend_from_slice(&buf[..n]);
            }
            vec![(number, taken.clone())]
        })
        .expect("a ticket");
    assert_eq!(taken, b"delivered", "{kind:?}: they had been delivered");
    assert!(kept.is_empty(), "{kind:?}: the server took them back");
    let child = Client::connect(&srv.path).expect("attach the child");
    let (_, mut ss) = adopt(&child, ticket);
    let cs = &mut ss[0].1;
    let mut got = Vec::new();
    while got.len() < 9 {
        got.extend(read_some(cs));
    }
    assert_eq!(got, b"delivered", "{kind:?}: the child reads them");
    let mut buf = [0u8; 64];
    assert_eq!(
        s.read_timeout(&mut buf, Duration::from_millis(300))
            .expect("read"),
        None,
        "{kind:?}: the parent does not read them again"
    );
    p1.write_all(b"more").unwrap();
    assert_eq!(
        read_some(&mut s),
        b"more",
        "{kind:?}: what comes next is the parent's"
    );
}

#[test]
fn delivered_bytes_are_read_once_shared() {
    delivered_bytes_are_read_once(Kind::Shared);
}

#[test]
fn delivered_bytes_are_read_once_regions() {
    delivered_bytes_are_read_once(Kind::Regions);
}

#[test]
fn delivered_bytes_are_read_once_ipc() {
    delivered_bytes_are_read_once(Kind::Ipc);
}

/// The pattern of a pre-forking server (nginx, Apache's prefork, gunicorn): the parent
/// listens and forks workers, and a worker accepts. The parent dies: the listener lives on
/// in the worker.
#[test]
fn workers_keep_a_listener_whose_parent_died() {
    let srv = stepped::tcp_loopback("fork-workers", Kind::Shared, Duration::from_millis(2));
    let peer = Client::connect(&srv.path).expect("attach the peer");
    let parent = Client::connect(&srv.path).expect("attach the parent");
    let l = parent.tcp_listen(0, 8).expect("listen");
    let to = SocketAddrV4::new(US, l.port());
    let t1 = parent
        .prepare_fork(&[l.number()], Vec::new)
        .expect("ticket 1")
        .0;
    let w1 = Client::connect(&srv.path).expect("worker 1");
    let (mut l1, _) = adopt(&w1, t1);
    let t2 = parent
        .prepare_fork(&[l.number()], Vec::new)
        .expect("ticket 2")
        .0;
    let w2 = Client::connect(&srv.path).expect("worker 2");
    let (mut l2, _) = adopt(&w2, t2);
    // The parent goes (its process ends: its client and listener with it).
    drop(l);
    drop(parent);
    // Worker 1 accepts first: it claims the listener.
    let (_, l1) = l1.pop().unwrap();
    assert!(l1.try_accept().unwrap().is_none());
    let mut a = peer
        .tcp_connect(to, PATIENCE)
        .expect("connect to the workers");
    let mut s = l1
        .accept_timeout(PATIENCE)
        .unwrap()
        .expect("worker 1 accepts");
    a.write_all(b"to a worker").unwrap();
    assert_eq!(read_some(&mut s), b"to a worker");
    // Worker 2 claims it next and gets the next connection.
    let (_, l2) = l2.pop().unwrap();
    assert!(l2.try_accept().unwrap().is_none());
    let _b = peer.tcp_connect(to, PATIENCE).expect("connect again");
    assert!(l2.accept_timeout(PATIENCE).unwrap().is_some());
    // Both workers close: nothing listens any more.
    drop(l1);
    drop(l2);
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        match peer.tcp_connect(to, PATIENCE) {
            Err(ClientError::Connection(_)) => break,
            Ok(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => panic!("a connection to a listener every holder closed: {other:?}"),
        }
    }
}

/// A fork's requests from an application that lies: numbers that name nothing, a UDP
/// socket, a listener twice; tickets guessed, or used twice. Nothing is shared that should
/// not be, and every refusal is counted.
#[test]
fn lying_fork_requests_are_refused() {
    let srv = stepped::tcp_loopback("fork-lies", Kind::Shared, Duration::from_millis(2));
    let parent = Client::connect(&srv.path).expect("attach the parent");
    let l = parent.tcp_listen(0, 8).expect("listen");
    let u = parent.udp_bind(0).expect("a UDP socket");
    let _ = u;
    let ticket = parent
        .prepare_fork(&[l.number(), l.number(), 9_999, 65_535, 0], Vec::new)
        .expect("a ticket for what can be shared")
        .0;
    let child = Client::connect(&srv.path).expect("attach the child");
    for guess in [0, 1, ticket.0 ^ 1, u64::MAX] {
        assert!(
            matches!(child.adopt(ForkTicket(guess)), Err(ClientError::Refused(_))),
            "a guessed ticket {guess:#x}"
        );
    }
    let (ls, ss) = adopt(&child, ticket);
    assert_eq!(ls.len(), 1, "the listener once");
    assert!(ss.is_empty());
    assert!(matches!(child.adopt(ticket), Err(ClientError::Refused(_))));
    let st = srv.stats();
    assert_eq!(st.forks.refused, 5, "{:?}", st.forks);
    assert_eq!(st.forks.adopted, 1);
    let parent_app = st
        .apps
        .iter()
        .find(|a| a.counters.tcp_bad_ops > 0)
        .expect("the parent's refused numbers counted");
    // 9,999 and 65,535 name nothing; 0 may be the listener or the UDP socket (the first
    // socket made), which is not shareable.
    assert!(
        parent_app.counters.tcp_bad_ops >= 2,
        "{:?}",
        parent_app.counters
    );
}

/// Pre-forked workers that all wait in `accept` on one listener: each connection goes to a
/// worker that waits, so while one worker serves a slow client the next client is taken by
/// another (found by a hostile test: every connection once went to the last worker to
/// claim the listener, and a second client waited behind the first's).
#[test]
fn each_connection_goes_to_a_worker_that_waits() {
    let srv = stepped::tcp_loopback("fork-waiters", Kind::Shared, Duration::from_millis(2));
    let peer = Client::connect(&srv.path).expect("attach the peer");
    let parent = Client::connect(&srv.path).expect("attach the parent");
    let l = parent.tcp_listen(0, 8).expect("listen");
    let to = SocketAddrV4::new(US, l.port());
    let mut workers = Vec::new();
    for _ in 0..3 {
        let t = parent
            .prepare_fork(&[l.number()], Vec::new)
            .expect("a ticket")
            .0;
        let w = Client::connect(&srv.path).expect("a worker");
        let (mut ls, _) = adopt(&w, t);
        workers.push((w, ls.pop().expect("the listener").1));
    }
    drop(l); // the parent closes its copy, as prefork servers do
    // Workers 0 and 1 wait (a look that finds nothing asks for a connection); 2 does not.
    for (_, wl) in &workers[..2] {
        assert!(wl.try_accept().unwrap().is_none());
    }
    let _a = peer.tcp_connect(to, PATIENCE).expect("client A");
    let _slow = workers[0]
        .1
        .accept_timeout(PATIENCE)
        .unwrap()
        .expect("worker 0, the first to wait, takes A");
    // Worker 0 is busy with A; B goes to worker 1, which waits.
    let _b = peer.tcp_connect(to, PATIENCE).expect("client B");
    assert!(
        workers[1].1.accept_timeout(PATIENCE).unwrap().is_some(),
        "worker 1 takes B while worker 0 serves A"
    );
    // Nobody waits now: C waits in the stack until worker 2 asks.
    let _c = peer.tcp_connect(to, PATIENCE).expect("client C");
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        workers[2].1.accept_timeout(PATIENCE).unwrap().is_some(),
        "C is taken by the worker that asks for it"
    );
    assert_eq!(
        srv.stats().forks.shared_now,
        1,
        "the listener, shared by the workers"
    );
}

/// A child that never makes a call on a socket — it exits, or `exec`s another program —
/// lets its parent's sockets go when the connection made for it closes, not when its
/// ticket would expire: a connection the parent closed ends at once (found by a hostile
/// test: 10 s late), and while the child lives it keeps the connection, however long.
#[test]
fn a_child_that_never_adopts_lets_go_when_its_connection_closes() {
    let srv = stepped::tcp_loopback("fork-abandon", Kind::Shared, Duration::from_millis(2));
    let peer = Client::connect(&srv.path).expect("attach the peer");
    let parent = Client::connect(&srv.path).expect("attach the parent");
    let l = parent.tcp_listen(0, 8).expect("listen");
    let mut p = peer
        .tcp_connect(SocketAddrV4::new(US, l.port()), PATIENCE)
        .expect("connect");
    let s = l.accept().expect("accept");
    let ticket = parent
        .prepare_fork(&[l.number(), s.number()], Vec::new)
        .expect("a ticket")
        .0;
    let for_child = Client::reserve_for_child(&srv.path, ticket).expect("the child's connection");
    s.close().unwrap();
    // Past the 10 s a ticket lasts alone: the child's connection keeps it.
    let mut buf = [0u8; 8];
    let quiet = Duration::from_millis(300) + shmnet_io::control::FORK_TICKET_LIFETIME;
    assert_eq!(
        p.read_timeout(&mut buf, quiet).expect("read"),
        None,
        "the child still holds the connection"
    );
    let t0 = std::time::Instant::now();
    drop(for_child); // the child exits
    assert_eq!(p.read_timeout(&mut buf, PATIENCE).expect("read"), Some(0));
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the end came {:?} after the child went",
        t0.elapsed()
    );
    let f = srv.stats().forks;
    assert_eq!((f.abandoned, f.expired, f.shared_now), (1, 0, 0), "{f:?}");
}
