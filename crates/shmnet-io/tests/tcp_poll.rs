//! `Client::poll`: readiness across many sockets in one wait — a listener with connections
//! to accept, streams with bytes, the end of a stream, a UDP socket with a datagram — under
//! `--isolation regions`, `shared` and the `ipc` structure. Waits are bounded by generous
//! deadlines; nothing here depends on the machine's speed.

mod common;

use common::stepped::{self, Kind, US};
use shmnet_io::client::{
    Client, ClientError, Interest, PollItem, PollSocket, TcpStream, UdpSocket,
};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// Longer than anything here takes on a slow, busy machine.
const PATIENCE: Option<Duration> = Some(Duration::from_secs(10));

fn readiness_across_sockets(kind: Kind) {
    let srv = stepped::tcp_loopback("poll", kind, Duration::from_millis(2));
    let c = Client::connect(&srv.path).expect("attach");
    let peer = Client::connect(&srv.path).expect("attach the peer");
    let l = c.tcp_listen(0, 16).expect("listen");
    let u = c.udp_bind(0).expect("bind");

    // Nothing has come: a look finds nothing, and a short wait times out.
    let mut items = [
        PollItem::new(PollSocket::Listener(&l), Interest::READABLE),
        PollItem::new(PollSocket::Udp(&u), Interest::READABLE),
    ];
    assert_eq!(c.poll(&mut items, Some(Duration::ZERO)).unwrap(), 0);
    let t = Instant::now();
    assert_eq!(
        c.poll(&mut items, Some(Duration::from_millis(30))).unwrap(),
        0
    );
    assert!(t.elapsed() >= Duration::from_millis(30), "it waited");

    // Two connections come in: the listener is readable, the UDP socket is not.
    let to = SocketAddrV4::new(US, l.port());
    let mut a_peer = peer
        .tcp_connect(to, Duration::from_secs(10))
        .expect("connect a");
    let mut b_peer = peer
        .tcp_connect(to, Duration::from_secs(10))
        .expect("connect b");
    assert_eq!(c.poll(&mut items, PATIENCE).unwrap(), 1);
    assert_eq!(items[0].ready(), Interest::READABLE);
    assert_eq!(items[1].ready(), Interest::default());
    let mut a = l.accept().expect("accept a");
    let mut b = l.accept().expect("accept b");

    // Both streams are writable and neither is readable.
    let mut items = [
        PollItem::new(PollSocket::Stream(&a), Interest::BOTH),
        PollItem::new(PollSocket::Stream(&b), Interest::BOTH),
    ];
    assert_eq!(c.poll(&mut items, PATIENCE).unwrap(), 2);
    assert_eq!(items[0].ready(), Interest::WRITABLE);
    assert_eq!(items[1].ready(), Interest::WRITABLE);

    // Bytes on b: b alone is readable.
    b_peer.write_all(b"hello").unwrap();
    let mut items = readable(&a, &b, &u);
    assert_eq!(c.poll(&mut items, PATIENCE).unwrap(), 1);
    assert!(items[1].ready().readable, "{items:?}");
    let mut buf = [0u8; 16];
    let mut got = Vec::new();
    while got.len() < 5 {
        let n = b.read_timeout(&mut buf, Duration::from_secs(10)).unwrap();
        got.extend_from_slice(&buf[..n.expect("the bytes poll saw")]);
    }
    assert_eq!(got, b"hello");

    // A datagram: the UDP socket alone is readable (b's bytes were all read).
    let pu = peer.udp_bind(0).expect("bind the peer");
    pu.send_to(b"ping", SocketAddrV4::new(US, u.port()))
        .unwrap();
    let mut items = readable(&a, &b, &u);
    assert_eq!(c.poll(&mut items, PATIENCE).unwrap(), 1);
    assert!(items[2].ready().readable, "{items:?}");
    let (n, _) = u.recv_timeout(&mut buf, Duration::from_secs(10)).unwrap();
    assert_eq!(&buf[..n], b"ping");

    // The end of a's stream: a is readable, and its read says 0.
    a_peer.shutdown().unwrap();
    let mut items = readable(&a, &b, &u);
    assert_eq!(c.poll(&mut items, PATIENCE).unwrap(), 1);
    assert!(items[0].ready().readable, "{items:?}");
    assert_eq!(
        a.read_timeout(&mut buf, Duration::from_secs(10)).unwrap(),
        Some(0)
    );

    // A socket of another client is refused, not waited on.
    let mut items = [PollItem::new(
        PollSocket::Stream(&b_peer),
        Interest::READABLE,
    )];
    assert!(matches!(
        c.poll(&mut items, Some(Duration::ZERO)),
        Err(ClientError::Refused(_))
    ));
    b_peer.write_all(b"!").unwrap();
    drop((a, b, a_peer, b_peer));
}

/// Readability of streams `a` and `b` and UDP socket `u`, in that order.
fn readable<'a>(a: &'a TcpStream, b: &'a TcpStream, u: &'a UdpSocket) -> [PollItem<'a>; 3] {
    [
        PollItem::new(PollSocket::Stream(a), Interest::READABLE),
        PollItem::new(PollSocket::Stream(b), Interest::READABLE),
        PollItem::new(PollSocket::Udp(u), Interest::READABLE),
    ]
}

#[test]
fn readiness_across_sockets_regions() {
    readiness_across_sockets(Kind::Regions);
}

#[test]
fn readiness_across_sockets_shared() {
    readiness_across_sockets(Kind::Shared);
}

#[test]
fn readiness_across_sockets_ipc() {
    readiness_across_sockets(Kind::Ipc);
}
