//! A UDP socket hears the ICMP errors its datagrams draw: a datagram to a port nobody has
//! bound draws the stack's own port unreachable (the loopback carries it back), which
//! reaches the sending application as an `Unreachable` event — [`UdpSocket::take_error`],
//! and readable in `poll` while it waits — under `--isolation regions`, `shared` and the
//! `ipc` structure. A socket that never looks loses nothing but the oldest errors.

mod common;

use common::stepped::{self, Kind, US};
use shmnet_io::client::{Client, Interest, PollItem, PollSocket, UdpSocket, UdpUnreachable};
use shmnet_io::windows::TcpFailure;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// A port no socket of the server is bound to.
const CLOSED: u16 = 9;

/// Waits (at most 10 s, polling) until `s` has an error and takes it.
fn next_error(client: &Client, s: &UdpSocket) -> Option<UdpUnreachable> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let mut items = [PollItem::new(
            PollSocket::Udp(s),
            Interest {
                readable: true,
                writable: false,
            },
        )];
        client
            .poll(&mut items, Some(Duration::from_millis(100)))
            .expect("poll");
        if items[0].ready().readable
            && let Some(e) = s.take_error()
        {
            return Some(e);
        }
    }
    None
}

fn a_datagram_to_a_closed_port_comes_back_as_refused(kind: Kind) {
    let server = stepped::tcp_loopback("udp-errors", kind, Duration::from_micros(200));
    let client = Client::connect(&server.path).expect("attach");
    let s = client.udp_bind(0).expect("bind");
    let other = client.udp_bind(0).expect("bind a second socket");
    assert_eq!(s.take_error(), None);
    let to = SocketAddrV4::new(US, CLOSED);
    s.send_to(b"anyone there?", to).expect("send");
    let e = next_error(&client, &s);
    assert_eq!(
        e,
        Some(UdpUnreachable {
            failure: TcpFailure::Refused,
            peer: to,
        }),
        "{kind:?}: the port unreachable reached the socket that sent"
    );
    assert_eq!(s.take_error(), None, "{kind:?}: an error is taken once");
    assert_eq!(
        other.take_error(),
        None,
        "{kind:?}: only the sender hears it"
    );
    let st = server.stats();
    assert_eq!(st.stack.udp_icmp_errors, 1, "{kind:?}");

    // The socket works on: a datagram to a bound port still arrives.
    s.send_to(b"hello", SocketAddrV4::new(US, other.port()))
        .expect("send to the second socket");
    let mut buf = [0u8; 16];
    let (n, from) = other
        .recv_timeout(&mut buf, Duration::from_secs(10))
        .expect("the datagram");
    assert_eq!((&buf[..n], from.port()), (&b"hello"[..], s.port()));

    // Errors nobody takes are bounded: the library keeps the newest. (The stack sends at
    // most a burst of errors, then one per interval: count what came.) A datagram to the
    // second socket after them arrives behind every error they drew (the loopback keeps
    // order, and the server puts events before datagrams), so when it is read, every error
    // is in the library.
    let burst = 3 * shmnet_stack::socket::UDP_ERRORS_KEPT as u64;
    for _ in 0..burst {
        s.send_to(b"x", to).expect("send");
    }
    let st = stepped::stats_until(&server.path, |st| {
        st.stack.udp_icmp_errors + st.stack.icmp_rate_limited > burst
    });
    let came = st.stack.udp_icmp_errors - 1;
    assert!(
        came >= 1,
        "{kind:?}: no error of the burst came: {:?}",
        st.stack
    );
    s.send_to(b"marker", SocketAddrV4::new(US, other.port()))
        .expect("send the marker");
    let (n, _) = other
        .recv_timeout(&mut buf, Duration::from_secs(10))
        .expect("the marker");
    assert_eq!(&buf[..n], b"marker");
    let mut taken = 0u64;
    while s.take_error().is_some() {
        taken += 1;
    }
    assert_eq!(
        taken,
        came.min(shmnet_stack::socket::UDP_ERRORS_KEPT as u64),
        "{kind:?}: {came} errors came"
    );
    let want = st.stack.udp_icmp_errors;
    // Closing a socket with errors kept leaves nothing behind.
    // (One more error: send until the rate limit lets one through.)
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.stats().stack.udp_icmp_errors == want {
        assert!(Instant::now() < deadline, "{kind:?}: no more errors came");
        s.send_to(b"x", to).expect("send");
        std::thread::sleep(Duration::from_millis(50));
    }
    s.close().expect("close");
    let again = client.udp_bind(0).expect("bind again");
    assert_eq!(
        again.take_error(),
        None,
        "{kind:?}: a new socket starts clean"
    );
}

#[test]
fn a_datagram_to_a_closed_port_comes_back_as_refused_regions() {
    a_datagram_to_a_closed_port_comes_back_as_refused(Kind::Regions);
}

#[test]
fn a_datagram_to_a_closed_port_comes_back_as_refused_shared() {
    a_datagram_to_a_closed_port_comes_back_as_refused(Kind::Shared);
}

#[test]
fn a_datagram_to_a_closed_port_comes_back_as_refused_ipc() {
    a_datagram_to_a_closed_port_comes_back_as_refused(Kind::Ipc);
}
