//! TCP through the protocol server: two applications of a loopback server — under
//! `--isolation regions`, `--isolation shared` and the `ipc` structure — connect, stream
//! megabytes both ways with every byte checked, half-close, close, and see refused
//! connections fail; sockets closed with bytes still in flight give their memory back.

mod common;

use common::stepped::{self, Kind, US};
use shmnet_io::client::{Client, ClientError, TcpStream};
use shmnet_io::windows::TcpFailure;
use std::net::SocketAddrV4;
use std::time::Duration;

fn server(tag: &str, kind: Kind) -> stepped::Stepped {
    stepped::tcp_loopback(tag, kind, Duration::from_millis(2))
}

/// Byte `i` of the stream named `seed`.
fn byte(seed: u64, i: u64) -> u8 {
    stepped::stream_byte(seed, i)
}

/// Writes `len` bytes of stream `seed` in writes of varied sizes, then shuts down.
fn send_stream(s: &mut TcpStream, seed: u64, len: u64) {
    let mut at = 0u64;
    let mut k = 0usize;
    while at < len {
        let n = ([1usize, 100, 1_460, 8_192, 65_536, 70_000][k % 6] as u64).min(len - at);
        let chunk: Vec<u8> = (at..at + n).map(|i| byte(seed, i)).collect();
        s.write_all(&chunk).expect("write");
        at += n;
        k += 1;
    }
    s.shutdown().expect("shutdown");
}

/// Reads stream `seed` to its end in reads of varied sizes; returns its length.
fn check_stream(s: &mut TcpStream, seed: u64) -> u64 {
    let mut buf = vec![0u8; 100_000];
    let mut at = 0u64;
    let mut k = 0usize;
    loop {
        let want = [7usize, 1_000, 65_536, 100_000][k % 4];
        k += 1;
        let n = s
            .read_timeout(&mut buf[..want], Duration::from_secs(30))
            .expect("read")
            .expect("bytes or the end within 30 s");
        if n == 0 {
            return at;
        }
        for (j, &b) in buf[..n].iter().enumerate() {
            assert_eq!(
                b,
                byte(seed, at + j as u64),
                "byte {} of stream {seed}",
                at + j as u64
            );
        }
        at += n as u64;
    }
}

fn streams_both_ways(kind: Kind) {
    const LEN: u64 = 6 << 20;
    let srv = server("stream", kind);
    let path = srv.path.clone();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let listener = std::thread::spawn(move || {
        let c = Client::connect(&path).expect("attach the listener");
        let l = c.tcp_listen(0, 16).expect("listen");
        port_tx.send(l.port()).unwrap();
        let mut s = l.accept().expect("accept");
        // Echo side: read everything first (the peer shuts down), then send our own stream.
        let got = check_stream(&mut s, 1);
        send_stream(&mut s, 2, LEN / 2);
        s.close().unwrap();
        got
    });
    let port = port_rx.recv().unwrap();
    let c = Client::connect(&srv.path).expect("attach the connector");
    let mut s = c
        .tcp_connect(SocketAddrV4::new(US, port), Duration::from_secs(10))
        .expect("connect");
    assert_eq!(s.peer_addr().port(), port);
    s.set_nodelay(true).unwrap();
    send_stream(&mut s, 1, LEN);
    assert_eq!(
        check_stream(&mut s, 2),
        LEN / 2,
        "{kind:?}: the answer's length"
    );
    assert_eq!(
        listener.join().unwrap(),
        LEN,
        "{kind:?}: the stream's length"
    );
    s.close().unwrap();
    // Nothing listens on port 9 of the server: refused.
    match c.tcp_connect(SocketAddrV4::new(US, 9), Duration::from_secs(10)) {
        Err(ClientError::Connection(TcpFailure::Refused)) => {}
        other => panic!("{kind:?}: a connection to a closed port: {other:?}"),
    }
}

#[test]
fn streams_both_ways_regions() {
    streams_both_ways(Kind::Regions);
}

#[test]
fn streams_both_ways_shared() {
    streams_both_ways(Kind::Shared);
}

#[test]
fn streams_both_ways_ipc() {
    streams_both_ways(Kind::Ipc);
}

/// Many connections at once, each closed by the listener's side with bytes unread, then
/// many more: socket numbers are reused, and no memory is lost (the server's pool is back
/// to where it started).
fn many_connections(kind: Kind) {
    let srv = server("many", kind);
    let c = Client::connect(&srv.path).expect("attach");
    let l = c.tcp_listen(0, 64).expect("listen");
    let to = SocketAddrV4::new(US, l.port());
    for round in 0..3 {
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..20 {
            let mut s = c.tcp_connect(to, Duration::from_secs(10)).expect("connect");
            s.write_all(&[round as u8; 3_000]).unwrap();
            ours.push(s);
            theirs.push(
                l.accept_timeout(Duration::from_secs(10))
                    .unwrap()
                    .expect("accepted"),
            );
        }
        // Read one byte of each and close: the rest is unread (a reset), or in flight.
        for t in &mut theirs {
            let mut b = [0u8; 1];
            assert_eq!(
                t.read_timeout(&mut b, Duration::from_secs(10)).unwrap(),
                Some(1)
            );
            assert_eq!(b[0], round as u8);
        }
        drop(theirs);
        for mut s in ours {
            let mut b = [0u8; 16];
            // The peer went away: the end, or a reset.
            match s.read_timeout(&mut b, Duration::from_secs(10)) {
                Ok(Some(0)) | Err(ClientError::Connection(TcpFailure::Reset)) => {}
                other => panic!("{kind:?}: after the peer closed: {other:?}"),
            }
        }
    }
    let stats = stepped::stats_until(&srv.path, |s| s.apps.iter().all(|a| a.sockets <= 1));
    assert!(
        stats.apps.iter().all(|a| a.sockets <= 1),
        "{kind:?}: only the listener stays open: {:?}",
        stats.apps.iter().map(|a| a.sockets).collect::<Vec<_>>()
    );
}

#[test]
fn many_connections_regions() {
    many_connections(Kind::Regions);
}

#[test]
fn many_connections_shared() {
    many_connections(Kind::Shared);
}

#[test]
fn many_connections_ipc() {
    many_connections(Kind::Ipc);
}

/// Connections answered and ended before any is read, then read in the reverse order: the
/// first read takes everything off the ring (each connection's bytes and its end) and keeps
/// what is not its own. Nothing of it may be lost: the queue of what is kept once counted
/// events against the posted buffers and dropped a connection's bytes past them, which its
/// reader then saw as the end.
fn answered_and_ended_before_any_is_read(kind: Kind) {
    const N: u32 = 200;
    let srv = server("ended", kind);
    let path = srv.path.clone();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let listener = std::thread::spawn(move || {
        let c = Client::connect(&path).expect("attach the listener");
        let l = c.tcp_listen(0, 256).expect("listen");
        port_tx.send(l.port()).unwrap();
        for _ in 0..N {
            let mut s = l
                .accept_timeout(Duration::from_secs(10))
                .unwrap()
                .expect("accepted");
            let b = stepped::read_number(&mut s).to_le_bytes();
            s.write_all(&b).unwrap();
            s.close().unwrap();
        }
    });
    let to = SocketAddrV4::new(US, port_rx.recv().unwrap());
    let c = Client::connect(&srv.path).expect("attach the connector");
    let mut open = Vec::new();
    for i in 0..N {
        let mut s = c.tcp_connect(to, Duration::from_secs(10)).expect("connect");
        s.write_all(&i.to_le_bytes()).unwrap();
        open.push(s);
    }
    listener.join().expect("the listener");
    for (i, s) in open.iter_mut().enumerate().rev() {
        let mut b = [0u8; 8];
        let mut at = 0;
        loop {
            let n = s
                .read_timeout(&mut b[at..], Duration::from_secs(10))
                .unwrap()
                .expect("the answer or the end within 10 s");
            if n == 0 {
                break;
            }
            at += n;
        }
        assert_eq!(at, 4, "{kind:?}: connection {i}: the answer, then the end");
        assert_eq!(u32::from_le_bytes(b[..4].try_into().unwrap()), i as u32);
    }
}

#[test]
fn answered_and_ended_before_any_is_read_regions() {
    answered_and_ended_before_any_is_read(Kind::Regions);
}

#[test]
fn answered_and_ended_before_any_is_read_shared() {
    answered_and_ended_before_any_is_read(Kind::Shared);
}

#[test]
fn answered_and_ended_before_any_is_read_ipc() {
    answered_and_ended_before_any_is_read(Kind::Ipc);
}

/// Buffer sizes set on a listener (for what it accepts) and on a connection carry through
/// every transport: each is taken (none counted refused), and a stream through the least
/// buffers both ways keeps every byte.
fn buffer_sizes(kind: Kind) {
    const LEN: u64 = 1 << 20;
    let srv = server("buffers", kind);
    let path = srv.path.clone();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let (got_tx, got_rx) = std::sync::mpsc::channel();
    let (checked_tx, checked_rx) = std::sync::mpsc::channel::<()>();
    let listener = std::thread::spawn(move || {
        let c = Client::connect(&path).expect("attach the listener");
        let l = c.tcp_listen(0, 16).expect("listen");
        assert_eq!(l.set_recv_buffer(1).unwrap(), shmnet_stack::tcp::MIN_BUFFER);
        assert_eq!(l.set_send_buffer(6_000).unwrap(), 6_000);
        port_tx.send(l.port()).unwrap();
        let mut s = l.accept().expect("accept");
        let got = check_stream(&mut s, 3);
        send_stream(&mut s, 4, LEN);
        s.close().unwrap();
        got_tx.send(got).unwrap();
        // Attached until its counters were read.
        let _ = checked_rx.recv();
    });
    let port = port_rx.recv().unwrap();
    let c = Client::connect(&srv.path).expect("attach the connector");
    let mut s = c
        .tcp_connect(SocketAddrV4::new(US, port), Duration::from_secs(10))
        .expect("connect");
    assert_eq!(
        s.set_send_buffer(u32::MAX).unwrap(),
        shmnet_stack::tcp::MAX_BUFFER
    );
    assert_eq!(s.set_send_buffer(5_000).unwrap(), 5_000);
    assert_eq!(s.set_recv_buffer(9_000).unwrap(), 9_000);
    send_stream(&mut s, 3, LEN);
    assert_eq!(
        check_stream(&mut s, 4),
        LEN,
        "{kind:?}: the answer's length"
    );
    assert_eq!(got_rx.recv().unwrap(), LEN, "{kind:?}: the stream's length");
    s.close().unwrap();
    let stats = stepped::stats(&srv.path);
    checked_tx.send(()).unwrap();
    listener.join().unwrap();
    assert_eq!(stats.apps.len(), 2, "{kind:?}: both applications attached");
    for a in &stats.apps {
        assert_eq!(
            a.counters.tcp_bad_ops, 0,
            "{kind:?}: every option taken: {a:?}"
        );
    }
}

#[test]
fn buffer_sizes_regions() {
    buffer_sizes(Kind::Regions);
}

#[test]
fn buffer_sizes_shared() {
    buffer_sizes(Kind::Shared);
}

#[test]
fn buffer_sizes_ipc() {
    buffer_sizes(Kind::Ipc);
}

// ---------------------------------------------------------------- closing with a linger

/// `close_linger` (`SO_LINGER` with a time). The writer fills every buffer between it and
/// a reader that does not read (until writes take nothing and the server has probed the
/// shut window: the connection holds bytes the reader must read before any more can go),
/// so bytes it wrote are unacknowledged when it closes: `Acknowledged` then comes only
/// after the reader, told to start reading 300 ms after the close began, has read; with a
/// patience of 200 ms and the reader told to start only once the close has returned,
/// `TimedOut` — and the stream still arrives whole, though the writer then goes away.
/// `Failed(Reset)` when the closer has bytes it did not read, the peer seeing the reset.
fn lingering_closes(kind: Kind) {
    use shmnet_io::client::{Interest, Linger, PollItem, PollSocket};
    let srv = server(&format!("linger-{kind:?}"), kind);
    let path = srv.path.clone();
    let late = Duration::from_millis(300);
    for (seed, patience) in [
        (21u64, Duration::from_secs(20)),
        (22, Duration::from_millis(200)),
    ] {
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let p = path.clone();
        let reader = std::thread::spawn(move || {
            let c = Client::connect(&p).expect("attach the reader");
            let l = c.tcp_listen(0, 4).expect("listen");
            port_tx.send(l.port()).unwrap();
            let mut s = l.accept().expect("accept");
            go_rx.recv().unwrap();
            std::thread::sleep(late);
            check_stream(&mut s, seed)
        });
        let c = Client::connect(&path).expect("attach the writer");
        let to = SocketAddrV4::new(US, port_rx.recv().unwrap());
        let mut s = c.tcp_connect(to, Duration::from_secs(10)).expect("connect");
        // The window is shut once the server has sent a zero-window probe on this
        // connection (the only one of this server with bytes to send): it had bytes the
        // window left no room for, and no more room comes until the reader reads.
        let probes = stepped::stats(&path).tcp.window_probes;
        let filling = std::time::Instant::now();
        let mut written = 0u64;
        loop {
            let chunk: Vec<u8> = (written..written + 65_536).map(|i| byte(seed, i)).collect();
            let n = s.try_write(&chunk).expect("try_write");
            written += n as u64;
            if n == 0 {
                if stepped::stats(&path).tcp.window_probes > probes {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                written < 1 << 30,
                "{kind:?}: a reader that never reads took 1 GiB"
            );
            assert!(
                filling.elapsed() < Duration::from_secs(30),
                "{kind:?}: the window never shut in 30 s ({written} bytes written)"
            );
        }
        // The reader reads only after its go: before the close when its patience is long
        // (and in `ipc`, whose close may wait for the reader: below), else once the close
        // has returned, so the close cannot be acknowledged however slow the machine.
        let go_first = seed == 21 || kind == Kind::Ipc;
        let t0 = std::time::Instant::now();
        if go_first {
            go_tx.send(()).unwrap();
        }
        let how = s.close_linger(patience).expect("close_linger");
        let waited = t0.elapsed();
        if !go_first {
            go_tx.send(()).unwrap();
        }
        // The writer goes away while its connection may still linger: the server closes
        // it in order all the same.
        drop(c);
        assert_eq!(
            reader.join().expect("reader"),
            written,
            "{kind:?}: the stream whole"
        );
        if seed == 21 {
            assert_eq!(how, Linger::Acknowledged, "{kind:?}: after {waited:?}");
            assert!(
                waited >= late,
                "{kind:?}: acknowledged after {waited:?}, before the reader (starting after \
                 {late:?}) read any of the {written} bytes that filled every buffer"
            );
        } else if kind == Kind::Ipc && how == Linger::Acknowledged {
            // ipc's known limit (docs/tcp.md): the server reads no packet of ours while it
            // holds a send the connection has no room for, so the close itself waits until
            // the reader reads — and then is acknowledged.
            assert!(waited >= late, "{kind:?}: acknowledged after {waited:?}");
        } else {
            assert_eq!(how, Linger::TimedOut, "{kind:?}: after {waited:?}");
            assert!(waited >= patience, "{kind:?}: gave up after {waited:?}");
        }
    }

    // Bytes the closer never read: the close resets the connection.
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let p = path.clone();
    let peer = std::thread::spawn(move || {
        let c = Client::connect(&p).expect("attach the peer");
        let l = c.tcp_listen(0, 4).expect("listen");
        port_tx.send(l.port()).unwrap();
        let mut s = l.accept().expect("accept");
        s.write_all(b"unread").expect("write");
        let mut b = [0u8; 16];
        s.read_timeout(&mut b, Duration::from_secs(10))
    });
    let c = Client::connect(&path).expect("attach the closer");
    let to = SocketAddrV4::new(US, port_rx.recv().unwrap());
    let s = c.tcp_connect(to, Duration::from_secs(10)).expect("connect");
    let mut items = [PollItem::new(PollSocket::Stream(&s), Interest::READABLE)];
    assert_eq!(
        c.poll(&mut items, Some(Duration::from_secs(10)))
            .expect("poll"),
        1,
        "{kind:?}: the peer's bytes arrive"
    );
    assert_eq!(
        s.close_linger(Duration::from_secs(10))
            .expect("close_linger"),
        Linger::Failed(TcpFailure::Reset),
        "{kind:?}: a close with bytes unread"
    );
    match peer.join().expect("peer") {
        Err(ClientError::Connection(TcpFailure::Reset)) => {}
        other => panic!("{kind:?}: the peer should see the reset, saw {other:?}"),
    }
    drop(c);
    let after = stepped::stats_until(&path, |s| s.apps_total == 0);
    assert_eq!(after.apps_total, 0, "{kind:?}: every application detached");
}

#[test]
fn lingering_closes_regions() {
    lingering_closes(Kind::Regions);
}

#[test]
fn lingering_closes_shared() {
    lingering_closes(Kind::Shared);
}

#[test]
fn lingering_closes_ipc() {
    lingering_closes(Kind::Ipc);
}

/// The listen backlog bounds what the server announces: with a backlog of 2 and an
/// application that does not accept, two connections are announced, two more wait in the
/// stack's accept queue, and later SYNs are dropped (`listen_overflow`) — as a kernel's
/// full backlog does — until the application takes some; then every connection comes in.
fn backlog_bounds_what_is_announced(kind: Kind) {
    const CONNECTS: usize = 8;
    let srv = server("backlog", kind);
    let c = Client::connect(&srv.path).expect("attach");
    let l = c.tcp_listen(0, 2).expect("listen");
    let to = SocketAddrV4::new(US, l.port());
    let path = srv.path.clone();
    let connector = std::thread::spawn(move || {
        let c = Client::connect(&path).expect("attach the connector");
        (0..CONNECTS)
            .map(|_| c.tcp_connect(to, Duration::from_secs(20)).map(|_| ()))
            .collect::<Vec<_>>()
    });
    let stats = stepped::stats_until(&srv.path, |s| s.tcp.listen_overflow > 0);
    assert!(
        stats.tcp.listen_overflow > 0,
        "{kind:?}: SYNs past the backlog are dropped while nobody accepts: {:?}",
        stats.tcp
    );
    for k in 0..CONNECTS {
        l.accept_timeout(Duration::from_secs(20))
            .unwrap()
            .unwrap_or_else(|| panic!("{kind:?}: connection {k} accepted"));
    }
    let made = connector.join().unwrap();
    assert!(made.iter().all(Result::is_ok), "{kind:?}: {made:?}");
}

#[test]
fn backlog_bounds_what_is_announced_regions() {
    backlog_bounds_what_is_announced(Kind::Regions);
}

#[test]
fn backlog_bounds_what_is_announced_shared() {
    backlog_bounds_what_is_announced(Kind::Shared);
}

#[test]
fn backlog_bounds_what_is_announced_ipc() {
    backlog_bounds_what_is_announced(Kind::Ipc);
}

/// A connection started without waiting (`tcp_connect_start`, a non-blocking `connect`)
/// is not writable until its handshake ends, then connected; one the listener accepts and
/// resets at once was still established first — `connected` says so, and the reset is the
/// next call's (a blocking `connect` under `shmnet run` once failed with ECONNRESET when
/// the reset came before it looked); one to a port nobody listens on is refused.
fn connects_started_without_waiting(kind: Kind) {
    let srv = server("connect-start", kind);
    let path = srv.path.clone();
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let listener = std::thread::spawn(move || {
        let c = Client::connect(&path).expect("attach the listener");
        let l = c.tcp_listen(0, 16).expect("listen");
        port_tx.send(l.port()).unwrap();
        let s = l
            .accept_timeout(Duration::from_secs(10))
            .unwrap()
            .expect("accepted");
        s.abort().expect("reset it");
        // Stay attached until the connector has looked.
        let _ = done_rx.recv_timeout(Duration::from_secs(30));
    });
    let to = SocketAddrV4::new(US, port_rx.recv().unwrap());
    let c = Client::connect(&srv.path).expect("attach the connector");
    let mut s = c.tcp_connect_start(to).expect("start a connect");
    // The handshake and the reset both queued before the first look: the server counts the
    // reset in the round that delivers it.
    let st = stepped::stats_until(&srv.path, |st| st.tcp.resets_received > 0);
    assert!(
        st.tcp.resets_received > 0,
        "{kind:?}: the listener's reset reached the connection: {:?}",
        st.tcp
    );
    assert!(
        matches!(s.connected(), Ok(true)),
        "{kind:?}: established before it was reset"
    );
    let mut buf = [0u8; 8];
    let read = s.read_timeout(&mut buf, Duration::from_secs(10));
    assert!(
        matches!(read, Err(ClientError::Connection(TcpFailure::Reset))),
        "{kind:?}: then the reset: {read:?}"
    );
    done_tx.send(()).unwrap();
    listener.join().expect("the listener");
    // Nobody listens on the port now: refused.
    let mut r = c.tcp_connect_start(to).expect("start a connect");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let outcome = loop {
        match r.connected() {
            Ok(false) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            other => break other,
        }
    };
    assert!(
        matches!(outcome, Err(ClientError::Connection(TcpFailure::Refused))),
        "{kind:?}: refused: {outcome:?}"
    );
}

#[test]
fn connects_started_without_waiting_regions() {
    connects_started_without_waiting(Kind::Regions);
}

#[test]
fn connects_started_without_waiting_shared() {
    connects_started_without_waiting(Kind::Shared);
}

#[test]
fn connects_started_without_waiting_ipc() {
    connects_started_without_waiting(Kind::Ipc);
}

/// A UDP socket the application never reads must not take all the memory its other
/// sockets receive into: another application floods it while a connection of the same
/// application waits for bytes, which must arrive. Past a bound the library drops the
/// unread socket's oldest datagrams and counts them, as a kernel drops what overflows a
/// socket's receive buffer. (Found by iperf3 -u -b 0 under `shmnet run`: after the test its
/// server stopped reading the UDP socket, the datagrams still coming held every posted
/// buffer, and the results on the control connection never reached it — both ends waited
/// for ever.)
fn an_unread_udp_socket_cannot_starve_a_connection(kind: Kind) {
    const FLOOD: usize = 5_000;
    let srv = server("unread-udp", kind);
    let path = srv.path.clone();
    let (ports_tx, ports_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let c = Client::connect(&path).expect("attach the reader");
        let unread = c.udp_bind(0).expect("bind the unread socket");
        let l = c.tcp_listen(0, 4).expect("listen");
        ports_tx.send((unread.port(), l.port())).unwrap();
        let mut s = l
            .accept_timeout(Duration::from_secs(30))
            .unwrap()
            .expect("accepted");
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while got.len() < 5 {
            match s.read_timeout(&mut buf, Duration::from_secs(10)) {
                Ok(Some(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                other => panic!("{kind:?}: the connection's bytes: {other:?}"),
            }
        }
        let overflows = c.udp_overflows();
        drop(unread);
        (got, overflows)
    });
    let (udp_port, tcp_port) = ports_rx.recv().unwrap();
    let c = Client::connect(&srv.path).expect("attach the flooder");
    let u = c.udp_bind(0).expect("bind");
    for _ in 0..FLOOD {
        u.send_to(&[1u8; 100], SocketAddrV4::new(US, udp_port))
            .expect("send");
    }
    let mut s = c
        .tcp_connect(SocketAddrV4::new(US, tcp_port), Duration::from_secs(10))
        .expect("connect");
    s.write_all(b"hello").expect("write");
    let (got, overflows) = reader.join().expect("the reader");
    assert_eq!(got, b"hello", "{kind:?}");
    assert!(
        overflows > 0,
        "{kind:?}: the flood was bounded ({overflows} dropped)"
    );
}

#[test]
fn an_unread_udp_socket_cannot_starve_a_connection_regions() {
    an_unread_udp_socket_cannot_starve_a_connection(Kind::Regions);
}

#[test]
fn an_unread_udp_socket_cannot_starve_a_connection_shared() {
    an_unread_udp_socket_cannot_starve_a_connection(Kind::Shared);
}

/// Bytes waiting for a large posted buffer — their application reads nothing, so its large
/// posts are used up, while it keeps looking at its sockets (and so takes what comes on
/// its ring) and all its small posts are there — let the data plane sleep: only the post
/// ring they wait for is armed. Arming both failed on the small ring, full of posts nobody
/// wanted then, and the data plane never slept (a stalled asyncio echo under `shmnet run`
/// kept the server at 56 % of a CPU).
#[test]
fn bytes_waiting_for_large_posts_let_the_data_plane_sleep() {
    use shmnet_io::client::{Interest, PollItem, PollSocket};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, mpsc};
    let srv = stepped::tcp_loopback("large-posts", Kind::Regions, Duration::from_millis(20));
    let (port_tx, port_rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let (path, stop2) = (srv.path.clone(), stop.clone());
    // The reader: accepts, never reads, but looks at its connection now and then.
    let reader = std::thread::spawn(move || {
        let c = Client::connect(&path).expect("attach the reader");
        let l = c.tcp_listen(0, 4).expect("listen");
        port_tx.send(l.port()).unwrap();
        let s = l
            .accept_timeout(Duration::from_secs(20))
            .expect("accept")
            .expect("the writer connects");
        while !stop2.load(Ordering::Acquire) {
            let mut items = [PollItem::new(
                PollSocket::Stream(&s),
                Interest {
                    readable: false,
                    writable: true,
                },
            )];
            let _ = c.poll(&mut items, Some(Duration::ZERO));
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let port = port_rx.recv().unwrap();
    let c = Client::connect(&srv.path).expect("attach the writer");
    let mut w = c
        .tcp_connect(SocketAddrV4::new(US, port), Duration::from_secs(20))
        .expect("connect");
    // Write until the connection takes nothing for half a second: the reader's large
    // posts, its receive window and the writer's send buffer are full.
    let data = vec![7u8; 65_536];
    let mut idle_since = std::time::Instant::now();
    while idle_since.elapsed() < Duration::from_millis(500) {
        match w.try_write(&data) {
            Ok(0) => std::thread::sleep(Duration::from_millis(5)),
            Ok(_) => idle_since = std::time::Instant::now(),
            Err(e) => panic!("write: {e}"),
        }
    }
    let before = srv.stats();
    std::thread::sleep(Duration::from_secs(1));
    let after = srv.stats();
    let rounds = after.data_plane.rounds - before.data_plane.rounds;
    let sleeps = after.data_plane.sleeps - before.data_plane.sleeps;
    // Sleeping, each round that finds nothing is followed by a sleep (a spinning loop makes
    // hundreds of thousands of rounds a second and no sleep at all, however slow the
    // machine); a few dozen rounds per sleep allow for the spin before each sleep.
    assert!(
        sleeps > 0 && rounds <= 64 * sleeps + 1_000,
        "{rounds} rounds and {sleeps} sleeps in a second with the stream stalled"
    );
    stop.store(true, Ordering::Release);
    reader.join().expect("the reader");
    w.abort().unwrap();
}
