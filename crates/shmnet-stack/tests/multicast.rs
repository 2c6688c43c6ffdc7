//! IPv4 multicast through the interface: joins and leaves reported by IGMP, queries
//! answered, datagrams to a joined group delivered (and to others not), datagrams sent to
//! a group with the socket's TTL and the group's MAC, and looped back to our own socket.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::{OUR_IP, PEER_IP, assert_conserved, drain_tx, feed, ip_frame, pool, sender};
use etherparse::IpNumber;
use shmnet_stack::igmp::{self, ALL_SYSTEMS, ALL_V3_ROUTERS};
use shmnet_stack::{
    HeapPool, Instant, Interface, MulticastError, MulticastOp, NoHook, SocketHandle,
};

const G: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);

/// `frame` sent to a group: its Ethernet destination made the group's.
fn to_group(mut frame: Vec<u8>, group: Ipv4Addr) -> Vec<u8> {
    frame[..6].copy_from_slice(&igmp::group_mac(group).0);
    frame
}

fn datagram_to(group: Ipv4Addr, port: u16, payload: &[u8]) -> Vec<u8> {
    let dg = common::udp_datagram_between(PEER_IP, group.octets(), 5000, port, payload, true);
    to_group(
        ip_frame(PEER_IP, group.octets(), IpNumber::UDP, 9, 0, false, &dg),
        group,
    )
}

/// The IGMP frames `poll` sends at `now`: (IP destination, IGMP message).
fn polled(ifc: &mut Interface, pool: &mut HeapPool, now: Instant) -> Vec<(Ipv4Addr, Vec<u8>)> {
    let mut tx = Vec::new();
    ifc.poll(pool, now, &mut tx);
    drain_tx(pool, tx)
        .into_iter()
        .map(|f| {
            assert_eq!(
                &f[..6],
                &igmp::group_mac(Ipv4Addr::new(f[30], f[31], f[32], f[33])).0
            );
            assert_eq!((f[23], f[22]), (2, 1), "IGMP, TTL 1");
            (Ipv4Addr::new(f[30], f[31], f[32], f[33]), f[38..].to_vec())
        })
        .collect()
}

fn recv(
    ifc: &mut Interface,
    pool: &mut HeapPool,
    s: SocketHandle,
) -> Option<(Vec<u8>, SocketAddrV4)> {
    let mut buf = vec![0u8; 65_536];
    let r = ifc.udp_recv(pool, s, &mut buf, &mut NoHook).unwrap()?;
    Some((buf[..r.len].to_vec(), r.src))
}

#[test]
fn a_joined_group_is_heard_and_reported_and_a_left_one_is_not() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let s = ifc.udp_bind_port(5353).unwrap();
    // Before the join: not ours.
    assert!(
        feed(
            &mut ifc,
            &mut pool,
            &datagram_to(G, 5353, b"early"),
            Instant::ZERO
        )
        .is_empty()
    );
    assert_eq!(recv(&mut ifc, &mut pool, s), None);
    let t = Instant::from_secs(1);
    ifc.udp_multicast(s, MulticastOp::Join(G), t).unwrap();
    assert_eq!(
        ifc.udp_multicast(s, MulticastOp::Join(G), t),
        Err(MulticastError::AlreadyJoined)
    );
    assert_eq!(
        ifc.udp_multicast(s, MulticastOp::Join(Ipv4Addr::from(OUR_IP)), t),
        Err(MulticastError::NotMulticast)
    );
    assert!(ifc.poll_at().is_some_and(|at| at <= t), "the report is due");
    let sent = polled(&mut ifc, &mut pool, t);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, ALL_V3_ROUTERS);
    assert_eq!(
        (sent[0].1[0], sent[0].1[8]),
        (0x22, 4),
        "v3 report, CHANGE_TO_EXCLUDE"
    );
    // Heard now; another group still is not.
    feed(
        &mut ifc,
        &mut pool,
        &datagram_to(G, 5353, b"to the group"),
        t,
    );
    feed(
        &mut ifc,
        &mut pool,
        &datagram_to(Ipv4Addr::new(239, 9, 9, 9), 5353, b"no"),
        t,
    );
    assert_eq!(
        recv(&mut ifc, &mut pool, s),
        Some((
            b"to the group".to_vec(),
            SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 5000)
        ))
    );
    assert_eq!(recv(&mut ifc, &mut pool, s), None);
    // No port-unreachable for a group datagram nobody is bound for.
    assert!(feed(&mut ifc, &mut pool, &datagram_to(G, 9999, b"x"), t).is_empty());
    // The repetition, then nothing.
    let again = ifc.poll_at().unwrap();
    assert_eq!(polled(&mut ifc, &mut pool, again).len(), 1);
    assert_eq!(ifc.poll_at(), None);
    // Closing leaves: the leave is reported.
    ifc.udp_close(&mut pool, s).unwrap();
    assert!(!ifc.in_group(G));
    let sent = polled(&mut ifc, &mut pool, again);
    assert_eq!(
        (sent.len(), sent[0].1[8]),
        (1, 3),
        "CHANGE_TO_INCLUDE: a leave"
    );
    let s = ifc.udp_bind_port(5353).unwrap();
    feed(&mut ifc, &mut pool, &datagram_to(G, 5353, b"late"), again);
    assert_eq!(recv(&mut ifc, &mut pool, s), None);
    assert_eq!(ifc.stats().igmp_joins, 1);
    assert_eq!(ifc.stats().igmp_leaves, 1);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn a_query_is_answered_and_a_bad_one_counted() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let s = ifc.udp_bind_port(4000).unwrap();
    ifc.udp_multicast(s, MulticastOp::Join(G), Instant::ZERO)
        .unwrap();
    while let Some(at) = ifc.poll_at() {
        polled(&mut ifc, &mut pool, at);
    }
    // An IGMPv2 general query to all-systems, 10 s to answer.
    let mut q = vec![0x11, 100, 0, 0, 0, 0, 0, 0];
    let c = shmnet_stack::checksum::checksum(&q);
    q[2..4].copy_from_slice(&c.to_be_bytes());
    let query = to_group(
        ip_frame(
            PEER_IP,
            ALL_SYSTEMS.octets(),
            IpNumber::IGMP,
            1,
            0,
            false,
            &q,
        ),
        ALL_SYSTEMS,
    );
    let now = Instant::from_secs(10);
    assert!(
        feed(&mut ifc, &mut pool, &query, now).is_empty(),
        "answered later"
    );
    let at = ifc.poll_at().unwrap();
    assert!(at >= now && at <= now.after(std::time::Duration::from_secs(10)));
    let sent = polled(&mut ifc, &mut pool, at);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, G, "an IGMPv2 report goes to its group");
    assert_eq!((sent[0].1[0], &sent[0].1[4..8]), (0x16, &G.octets()[..]));
    assert_eq!(ifc.stats().igmp_queries, 1);
    let mut bad = query.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    feed(&mut ifc, &mut pool, &bad, now);
    assert_eq!(ifc.stats().igmp_bad, 1);
    // A query to our own address is heard too (RFC 3376 4.1.12).
    let unicast = ip_frame(PEER_IP, OUR_IP, IpNumber::IGMP, 2, 0, false, &q);
    feed(&mut ifc, &mut pool, &unicast, now);
    assert_eq!(ifc.stats().igmp_queries, 2);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn a_send_to_a_group_goes_to_its_mac_with_the_sockets_ttl_and_loops_back() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let s = ifc.udp_bind_port(6000).unwrap();
    let to = SocketAddrV4::new(G, 6000);
    let mut tx = Vec::new();
    ifc.udp_send_to(&mut pool, s, b"one", to, Instant::ZERO, &mut tx)
        .unwrap();
    let f = drain_tx(&mut pool, std::mem::take(&mut tx));
    assert_eq!(f.len(), 1);
    assert_eq!(&f[0][..6], &igmp::group_mac(G).0);
    assert_eq!(f[0][22], 1, "TTL 1 by default");
    assert_eq!(
        recv(&mut ifc, &mut pool, s),
        None,
        "not in the group: no loop"
    );
    ifc.udp_multicast(s, MulticastOp::Ttl(7), Instant::ZERO)
        .unwrap();
    ifc.udp_multicast(s, MulticastOp::Join(G), Instant::ZERO)
        .unwrap();
    let big = common::pattern(3000, 5);
    ifc.udp_send_to(&mut pool, s, &big, to, Instant::ZERO, &mut tx)
        .unwrap();
    let f = drain_tx(&mut pool, std::mem::take(&mut tx));
    assert_eq!(f.len(), 3, "fragmented to the MTU");
    assert!(f.iter().all(|f| f[22] == 7), "the socket's TTL");
    let (got, from) = recv(&mut ifc, &mut pool, s).expect("looped back");
    assert_eq!(got, big);
    assert_eq!(from, SocketAddrV4::new(Ipv4Addr::from(OUR_IP), 6000));
    // TTL 0: this host only (looped back, nothing on the wire), as on Linux.
    ifc.udp_multicast(s, MulticastOp::Ttl(0), Instant::ZERO)
        .unwrap();
    ifc.udp_send_to(&mut pool, s, b"here only", to, Instant::ZERO, &mut tx)
        .unwrap();
    assert!(drain_tx(&mut pool, std::mem::take(&mut tx)).is_empty());
    assert_eq!(recv(&mut ifc, &mut pool, s).unwrap().0, b"here only");
    ifc.udp_multicast(s, MulticastOp::Loop(false), Instant::ZERO)
        .unwrap();
    ifc.udp_send_to(&mut pool, s, b"quiet", to, Instant::ZERO, &mut tx)
        .unwrap();
    drain_tx(&mut pool, std::mem::take(&mut tx));
    assert_eq!(recv(&mut ifc, &mut pool, s), None, "loop off");
    assert_eq!(ifc.stats().multicast_looped, 2);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn tcp_to_a_group_is_nobodys_and_membership_is_bounded() {
    let (mut ifc, mut pool) = (sender(true), pool());
    let s = ifc.udp_bind_port(7000).unwrap();
    ifc.udp_multicast(s, MulticastOp::Join(G), Instant::ZERO)
        .unwrap();
    let l = ifc.tcp_listen(80, 8).unwrap();
    let syn = [0u8; 20];
    let before = ifc.stats().not_for_us;
    let answer = feed(
        &mut ifc,
        &mut pool,
        &to_group(
            ip_frame(PEER_IP, G.octets(), IpNumber::TCP, 3, 0, false, &syn),
            G,
        ),
        Instant::ZERO,
    );
    assert!(answer.is_empty());
    assert_eq!(ifc.stats().not_for_us, before + 1);
    let _ = l;
    for i in 1..igmp::MAX_SOCKET_GROUPS as u32 {
        ifc.udp_multicast(
            s,
            MulticastOp::Join(Ipv4Addr::from(0xef00_0100 + i)),
            Instant::ZERO,
        )
        .unwrap();
    }
    assert_eq!(
        ifc.udp_multicast(
            s,
            MulticastOp::Join(Ipv4Addr::new(239, 200, 0, 1)),
            Instant::ZERO
        ),
        Err(MulticastError::TooMany)
    );
    assert_eq!(ifc.udp_groups(s).unwrap().len(), igmp::MAX_SOCKET_GROUPS);
    assert_eq!(
        ifc.udp_multicast(
            s,
            MulticastOp::Leave(Ipv4Addr::new(239, 200, 0, 1)),
            Instant::ZERO
        ),
        Err(MulticastError::NotJoined)
    );
    assert_conserved(&mut ifc, &mut pool);
}
