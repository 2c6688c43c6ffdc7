//! ICMP destination-unreachable about our UDP datagrams: kept for the sending socket when
//! its owner asked ([`Interface::udp_keep_errors`]), bounded, taken once, and ignored
//! (counted) when nobody asked or the quote names no socket of ours.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{OUR_IP, PEER_IP, PEER_MAC, drain_tx, feed, pool, sender};
use shmnet_stack::icmp::Unreachable;
use shmnet_stack::socket::{UDP_ERRORS_KEPT, UdpError};
use shmnet_stack::{HeapPool, Instant, Interface, SocketHandle};
use smoltcp::wire::{Icmpv4Packet, IpProtocol, Ipv4Packet};

/// The peer's destination-unreachable with `code` for our frame `ours` (Ethernet, IPv4,
/// UDP), quoting its IP header and eight bytes, as Linux sends it.
fn unreachable_for(ours: &[u8], code: u8) -> Vec<u8> {
    let ip = &ours[14..];
    let quote = &ip[..28];
    let mut icmp = vec![0u8; 8 + quote.len()];
    icmp[0] = 3;
    icmp[1] = code;
    icmp[8..].copy_from_slice(quote);
    Icmpv4Packet::new_unchecked(&mut icmp[..]).fill_checksum();
    let mut frame = vec![0u8; 14 + 20 + icmp.len()];
    frame[..6].copy_from_slice(&ours[6..12]);
    frame[6..12].copy_from_slice(&PEER_MAC);
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut p = Ipv4Packet::new_unchecked(&mut frame[14..]);
    p.set_version(4);
    p.set_header_len(20);
    p.set_total_len((20 + icmp.len()) as u16);
    p.set_hop_limit(64);
    p.set_next_header(IpProtocol::Icmp);
    p.set_src_addr(Ipv4Addr::from(PEER_IP));
    p.set_dst_addr(Ipv4Addr::from(OUR_IP));
    p.fill_checksum();
    frame[34..].copy_from_slice(&icmp);
    frame
}

/// One datagram from `s` to the peer's `port`: the frame that went out.
fn send(ifc: &mut Interface, pool: &mut HeapPool, s: SocketHandle, port: u16) -> Vec<u8> {
    let mut tx = Vec::new();
    let dst = SocketAddrV4::new(Ipv4Addr::from(PEER_IP), port);
    ifc.udp_send_to(pool, s, b"hello", dst, Instant::ZERO, &mut tx)
        .unwrap();
    let mut out = drain_tx(pool, tx);
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn peer(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::from(PEER_IP), port)
}

#[test]
fn a_port_unreachable_is_kept_for_the_socket_that_sent_and_taken_once() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let s = ifc.udp_bind_port(4000).unwrap();
    ifc.udp_keep_errors(s).unwrap();
    assert!(!ifc.udp_errors_waiting());
    let ours = send(&mut ifc, &mut pool, s, 9);
    let answer = feed(
        &mut ifc,
        &mut pool,
        &unreachable_for(&ours, 3),
        Instant::ZERO,
    );
    assert!(answer.is_empty(), "an ICMP error is never answered");
    assert!(ifc.udp_errors_waiting());
    let want = UdpError {
        what: Unreachable::Port,
        to: peer(9),
    };
    assert_eq!(ifc.udp_peek_error(s), Ok(Some(want)));
    assert_eq!(ifc.udp_take_error(s), Ok(Some(want)));
    assert_eq!(ifc.udp_take_error(s), Ok(None));
    assert!(!ifc.udp_errors_waiting());
    assert_eq!(ifc.stats().udp_icmp_errors, 1);
}

#[test]
fn host_and_net_codes_are_told_apart_and_soft_codes_are_not_kept() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let s = ifc.udp_bind_port(4000).unwrap();
    ifc.udp_keep_errors(s).unwrap();
    for (code, what) in [
        // Soft, as on Linux: a connected socket without IP_RECVERR hears nothing of them.
        (0, None),
        (1, None),
        (2, Some(Unreachable::Host)),
        (6, Some(Unreachable::Net)),
        (4, None), // fragmentation needed says nothing of reachability
        (10, Some(Unreachable::Host)),
    ] {
        let ours = send(&mut ifc, &mut pool, s, 7);
        feed(
            &mut ifc,
            &mut pool,
            &unreachable_for(&ours, code),
            Instant::ZERO,
        );
        let got = ifc.udp_take_error(s).unwrap().map(|e| e.what);
        assert_eq!(got, what, "code {code}");
    }
}

#[test]
fn errors_kept_are_bounded_oldest_dropped_and_counted() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let s = ifc.udp_bind_port(4000).unwrap();
    ifc.udp_keep_errors(s).unwrap();
    let extra = 3;
    for port in 0..(UDP_ERRORS_KEPT + extra) as u16 {
        let ours = send(&mut ifc, &mut pool, s, 100 + port);
        feed(
            &mut ifc,
            &mut pool,
            &unreachable_for(&ours, 3),
            Instant::ZERO,
        );
    }
    assert_eq!(ifc.stats().udp_icmp_errors_dropped, extra as u64);
    let mut got = Vec::new();
    while let Some(e) = ifc.udp_take_error(s).unwrap() {
        got.push(e.to.port());
    }
    let want: Vec<u16> = (extra..UDP_ERRORS_KEPT + extra)
        .map(|p| 100 + p as u16)
        .collect();
    assert_eq!(got, want, "the newest are kept, oldest first");
    assert!(!ifc.udp_errors_waiting());
}

#[test]
fn nothing_is_kept_for_a_socket_whose_owner_did_not_ask_or_that_is_gone() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let quiet = ifc.udp_bind_port(4000).unwrap();
    let ours = send(&mut ifc, &mut pool, quiet, 9);
    let before = ifc.stats().icmp_ignored;
    feed(
        &mut ifc,
        &mut pool,
        &unreachable_for(&ours, 3),
        Instant::ZERO,
    );
    assert_eq!(ifc.udp_take_error(quiet), Ok(None));
    assert!(!ifc.udp_errors_waiting());
    assert_eq!(ifc.stats().icmp_ignored, before + 1);

    // Kept, then the socket closes: the count of kept errors goes with it.
    let s = ifc.udp_bind_port(4001).unwrap();
    ifc.udp_keep_errors(s).unwrap();
    let ours = send(&mut ifc, &mut pool, s, 9);
    feed(
        &mut ifc,
        &mut pool,
        &unreachable_for(&ours, 3),
        Instant::ZERO,
    );
    assert!(ifc.udp_errors_waiting());
    ifc.udp_close(&mut pool, s).unwrap();
    assert!(!ifc.udp_errors_waiting());
    // And an error for the closed port reaches nobody.
    feed(
        &mut ifc,
        &mut pool,
        &unreachable_for(&ours, 3),
        Instant::ZERO,
    );
    assert!(!ifc.udp_errors_waiting());
    assert_eq!(ifc.stats().icmp_ignored, before + 2);
}
