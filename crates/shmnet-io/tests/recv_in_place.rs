//! `UdpSocket::recv_in_place`: a datagram lent where it lies — a posted buffer of the
//! application's own region (`--isolation regions`), a chain of the driver's pool buffers
//! (`--isolation shared`) — has the bytes sent, its source, and its memory goes back when
//! the closure returns (many more datagrams than there are buffers get through).

mod common;

use common::stepped::{self, US, stats_until};
use shmnet_io::client::{Client, ClientError, Lent, UdpSocket};
use shmnet_io::spec::{Isolation, OnMiss};
use std::net::SocketAddrV4;
use std::time::Duration;

/// The bytes of datagram `k` of `len` bytes.
fn pattern(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k * 13 + i * 5) as u8).collect()
}

/// What a closure sees of a lent datagram: its bytes gathered, its source, whether they
/// came in one run, and what a short `copy_to` copies.
fn look(d: &Lent<'_>) -> (Vec<u8>, SocketAddrV4, bool, Vec<u8>) {
    let gathered: Vec<u8> = d.segments().flatten().copied().collect();
    assert_eq!(gathered.len(), d.len());
    assert_eq!(d.is_empty(), gathered.is_empty());
    let mut short = [0u8; 10];
    let n = d.copy_to(&mut short);
    assert_eq!(n, d.len().min(10));
    (
        gathered,
        d.source(),
        d.contiguous().is_some(),
        short[..n].to_vec(),
    )
}

/// A loopback server isolating as `isolation` says, and two applications with a socket
/// each (the clients are kept alive by their sockets).
fn pair(tag: &str, isolation: Isolation) -> (stepped::Stepped, UdpSocket, UdpSocket) {
    let r = stepped::loopback(
        &format!("{tag}-{isolation:?}"),
        isolation,
        OnMiss::Buffer,
        Duration::from_millis(5),
    );
    let a = Client::connect(&r.path).expect("attach a");
    let b = Client::connect(&r.path).expect("attach b");
    assert_eq!(b.is_isolated(), isolation == Isolation::Regions);
    let sa = a.udp_bind(0).unwrap();
    let sb = b.udp_bind(0).unwrap();
    (r, sa, sb)
}

fn lends_every_size(isolation: Isolation) {
    let (_r, sa, sb) = pair("in-place", isolation);
    let to_b = SocketAddrV4::new(US, sb.port());
    let from_a = SocketAddrV4::new(US, sa.port());
    let wait = Duration::from_secs(10);
    for (k, len) in [0, 1, 1_472, 2_041, 8_000, 14_792, 65_507]
        .into_iter()
        .enumerate()
    {
        let msg = pattern(k, len);
        sa.send_to(&msg, to_b).unwrap();
        let (bytes, src, contiguous, short) = sb.recv_in_place_timeout(wait, look).unwrap();
        assert_eq!(src, from_a, "the source of {len} B");
        assert!(bytes == msg, "the bytes of {len} B");
        assert_eq!(short[..], msg[..len.min(10)]);
        if isolation == Isolation::Regions {
            assert!(contiguous, "a posted buffer is one run ({len} B)");
        }
    }
    // Many more datagrams than posted buffers or pool buffers a socket may hold: each is
    // given back when its closure returns, or the stream would stop. Every other one is
    // read by `recv`, which shares the path.
    let mut buf = vec![0u8; 2_000];
    for k in 0..3_000 {
        let msg = pattern(k, 1_000 + k % 900);
        sa.send_to(&msg, to_b).unwrap();
        if k % 2 == 0 {
            let ok = sb
                .recv_in_place_timeout(wait, |d| d.segments().flatten().eq(msg.iter()))
                .unwrap();
            assert!(ok, "datagram {k}");
        } else {
            let (n, _) = sb.recv_timeout(&mut buf, wait).unwrap();
            assert!(buf[..n] == msg[..], "datagram {k}");
        }
    }
    // Nothing waiting: a timeout, and the closure never runs.
    let r = sb.recv_in_place_timeout(Duration::from_millis(20), |_| panic!("nothing came"));
    assert!(matches!(r, Err(ClientError::TimedOut)), "{r:?}");
}

/// A closure that panics still gives the memory back: more large datagrams than there are
/// large posted buffers (32), each read by a closure that panics, and the stream goes on.
fn a_panicking_closure_loses_nothing(isolation: Isolation) {
    let (r, sa, sb) = pair("in-place-panic", isolation);
    let to_b = SocketAddrV4::new(US, sb.port());
    let msg = pattern(7, 14_792);
    for k in 0..100 {
        sa.send_to(&msg, to_b).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sb.recv_in_place_timeout(Duration::from_secs(10), |_| panic!("the closure fails"))
        }));
        assert!(r.is_err(), "datagram {k}: the panic goes on to the caller");
    }
    sa.send_to(&msg, to_b).unwrap();
    let ok = sb
        .recv_in_place_timeout(Duration::from_secs(10), |d| {
            d.segments().flatten().eq(msg.iter())
        })
        .unwrap();
    assert!(ok, "the stream goes on after 100 panics");
    // And the server holds nothing lent out (shared windows: every chain came back). Chains
    // read go back in small bursts, and all of them at the next look that finds nothing.
    assert!(matches!(sb.try_recv(&mut [0u8; 16]), Ok(None)));
    let s = stats_until(&r.path, |s| s.apps.iter().all(|x| x.holding == 0));
    assert!(
        s.apps.iter().all(|x| x.holding == 0),
        "a chain was never given back"
    );
}

#[test]
fn a_panicking_closure_gives_the_posted_buffer_back() {
    a_panicking_closure_loses_nothing(Isolation::Regions);
}

#[test]
fn a_panicking_closure_gives_the_chain_back() {
    a_panicking_closure_loses_nothing(Isolation::Shared);
}

#[test]
fn an_isolated_application_borrows_its_posted_buffer() {
    lends_every_size(Isolation::Regions);
}

#[test]
fn a_shared_window_application_borrows_the_pool_chain() {
    lends_every_size(Isolation::Shared);
}
