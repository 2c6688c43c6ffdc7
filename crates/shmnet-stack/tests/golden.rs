//! Golden tests: frames built by etherparse (and byte arrays in the layout of real captures)
//! parse to the expected values; frames we emit parse back with etherparse to what we meant.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};

use common::*;
use etherparse::{
    ArpOperation, EtherType, Icmpv4Type, IpNumber, NetSlice, PacketBuilder, SlicedPacket,
    TransportSlice,
};
use shmnet_stack::{Config, EthernetAddress, HeapPool, Instant, Interface, NoHook};

fn udp_frame(payload: &[u8], src_port: u16, dst_port: u16) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC)
        .ipv4(PEER_IP, OUR_IP, 64)
        .udp(src_port, dst_port);
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

#[test]
fn etherparse_udp_frame_is_delivered() {
    let (mut ifc, mut pool) = (iface(), pool());
    let s = bind(&mut ifc, 7000);
    let out = feed(
        &mut ifc,
        &mut pool,
        &udp_frame(b"hello shmnet", 40000, 7000),
        Instant::ZERO,
    );
    assert!(out.is_empty());
    assert_eq!(ifc.udp_queue_len(s).unwrap(), 1);
    let mut buf = [0u8; 64];
    let info = ifc
        .udp_recv(&mut pool, s, &mut buf, &mut NoHook)
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..info.len], b"hello shmnet");
    assert_eq!(info.msg_len, 12);
    assert_eq!(info.src, SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 40000));
    assert_eq!(ifc.stats().udp_delivered, 1);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn udp_checksum_verified_when_on_ignored_when_off() {
    let mut frame = udp_frame(&pattern(333, 1), 1, 9);
    let n = frame.len();
    frame[n - 1] ^= 0x5a; // corrupt the payload, not the IP header
    let (mut ifc, mut pool) = (iface(), pool());
    let s = bind(&mut ifc, 9);
    feed(&mut ifc, &mut pool, &frame, Instant::ZERO);
    assert_eq!(ifc.stats().udp_bad_checksum, 1);
    assert_eq!(ifc.udp_queue_len(s).unwrap(), 0);
    assert_conserved(&mut ifc, &mut pool);

    let mut cfg = config();
    cfg.udp_rx_checksum = false;
    let mut ifc = Interface::new(cfg);
    let s = bind(&mut ifc, 9);
    feed(&mut ifc, &mut pool, &frame, Instant::ZERO);
    assert_eq!(ifc.stats().udp_bad_checksum, 0);
    assert_eq!(ifc.udp_queue_len(s).unwrap(), 1);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn zero_udp_checksum_means_none() {
    let dg = udp_datagram(5, 6, &pattern(101, 3), false);
    let frame = ip_frame(PEER_IP, OUR_IP, IpNumber::UDP, 1, 0, false, &dg);
    let (mut ifc, mut pool) = (iface(), pool());
    let s = bind(&mut ifc, 6);
    feed(&mut ifc, &mut pool, &frame, Instant::ZERO);
    let mut buf = vec![0u8; 200];
    let info = ifc
        .udp_recv(&mut pool, s, &mut buf, &mut NoHook)
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..info.len], &pattern(101, 3)[..]);
    assert_conserved(&mut ifc, &mut pool);
}

// An ARP request and an ICMP echo request from Linux `ping`, byte for byte in the layout a
// capture shows them (QEMU MACs, 192.168.122.0/24; ping's 56 data bytes: a timeval, then
// 0x10..0x37). Checksums are correct.
const CAPTURED_ARP_REQUEST: &str =
    "ffffffffffff52540012345608060001080006040001525400123456c0a87a01000000000000c0a87a2a";
const CAPTURED_PING: &str = "525400abcdef5254001234560800450000543f1c400040018610c0a87a01c0a87a2a08002ba20b5e000180e23f670000000040e2010000000000101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f3031323334353637";
const CAP_OUR_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
const CAP_PEER_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn capture_iface() -> Interface {
    Interface::new(Config::new(
        EthernetAddress(CAP_OUR_MAC),
        Ipv4Addr::new(192, 168, 122, 42),
        24,
    ))
}

#[test]
fn captured_frames_parse_as_etherparse_says() {
    // The oracle's reading of the captures, as a sanity check of the literals themselves.
    let arp = hex(CAPTURED_ARP_REQUEST);
    let p = SlicedPacket::from_ethernet(&arp).unwrap();
    let Some(NetSlice::Arp(a)) = p.net else {
        panic!("not ARP")
    };
    assert_eq!(a.operation(), ArpOperation::REQUEST);
    assert_eq!(a.target_protocol_addr(), &[192, 168, 122, 42]);
    let ping = hex(CAPTURED_PING);
    let p = SlicedPacket::from_ethernet(&ping).unwrap();
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("not IPv4")
    };
    assert_eq!(
        ip.header().to_header().calc_header_checksum(),
        ip.header().header_checksum()
    );
    assert_eq!(
        ones_sum(&ping[34..]),
        0xffff,
        "ICMP checksum of the literal"
    );
}

#[test]
fn captured_arp_request_is_answered() {
    let (mut ifc, mut pool) = (capture_iface(), pool());
    let out = feed(
        &mut ifc,
        &mut pool,
        &hex(CAPTURED_ARP_REQUEST),
        Instant::ZERO,
    );
    assert_eq!(out.len(), 1);
    let p = SlicedPacket::from_ethernet(&out[0]).unwrap();
    let eth = p.link.as_ref().unwrap().to_header().unwrap();
    let eth = eth.ethernet2().unwrap();
    assert_eq!(eth.destination, CAP_PEER_MAC);
    assert_eq!(eth.source, CAP_OUR_MAC);
    assert_eq!(eth.ether_type, EtherType::ARP);
    let Some(NetSlice::Arp(a)) = p.net else {
        panic!("not ARP")
    };
    assert_eq!(a.operation(), ArpOperation::REPLY);
    assert_eq!(a.sender_hw_addr(), &CAP_OUR_MAC);
    assert_eq!(a.sender_protocol_addr(), &[192, 168, 122, 42]);
    assert_eq!(a.target_hw_addr(), &CAP_PEER_MAC);
    assert_eq!(a.target_protocol_addr(), &[192, 168, 122, 1]);
    // The requester was learnt.
    assert_eq!(
        ifc.neighbor(Ipv4Addr::new(192, 168, 122, 1), Instant::ZERO),
        Some(EthernetAddress(CAP_PEER_MAC))
    );
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn captured_ping_is_answered() {
    let (mut ifc, mut pool) = (capture_iface(), pool());
    let req = hex(CAPTURED_PING);
    let out = feed(&mut ifc, &mut pool, &req, Instant::ZERO);
    assert_eq!(out.len(), 1, "{:?}", ifc.stats());
    let f = &out[0];
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let eth = p.link.as_ref().unwrap().to_header().unwrap();
    assert_eq!(eth.ethernet2().unwrap().destination, CAP_PEER_MAC);
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("not IPv4")
    };
    let h = ip.header().to_header();
    assert_eq!(h.source, [192, 168, 122, 42]);
    assert_eq!(h.destination, [192, 168, 122, 1]);
    assert_eq!(h.protocol, IpNumber::ICMP);
    assert_eq!(h.calc_header_checksum(), h.header_checksum);
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("not ICMP")
    };
    match icmp.icmp_type() {
        Icmpv4Type::EchoReply(e) => {
            assert_eq!(e.id, 0x0b5e);
            assert_eq!(e.seq, 1);
        }
        t => panic!("unexpected {t:?}"),
    }
    assert_eq!(icmp.payload(), &req[42..]);
    assert_eq!(ones_sum(&f[34..]), 0xffff, "ICMP checksum");
    assert_eq!(ifc.stats().icmp_echo_replies, 1);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn emitted_udp_parses_back_with_etherparse() {
    for checksum in [false, true] {
        let mut ifc = sender(checksum);
        let mut pool = HeapPool::with_count(64);
        let s = ifc.udp_bind_port(5353).unwrap();
        let data = pattern(777, 9);
        let mut tx = Vec::new();
        ifc.udp_send_to(
            &mut pool,
            s,
            &data,
            SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 6000),
            Instant::ZERO,
            &mut tx,
        )
        .unwrap();
        let out = drain_tx(&mut pool, tx);
        assert_eq!(out.len(), 1);
        let p = SlicedPacket::from_ethernet(&out[0]).unwrap();
        let eth = p.link.as_ref().unwrap().to_header().unwrap();
        let eth = eth.ethernet2().unwrap();
        assert_eq!((eth.source, eth.destination), (OUR_MAC, PEER_MAC));
        let Some(NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        let h = ip.header().to_header();
        assert_eq!((h.source, h.destination), (OUR_IP, PEER_IP));
        assert_eq!(h.calc_header_checksum(), h.header_checksum);
        assert!(!h.is_fragmenting_payload());
        let Some(TransportSlice::Udp(u)) = &p.transport else {
            panic!("not UDP")
        };
        assert_eq!((u.source_port(), u.destination_port()), (5353, 6000));
        assert_eq!(u.payload(), &data[..]);
        if checksum {
            let want = u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap();
            assert_eq!(u.checksum(), want);
        } else {
            assert_eq!(u.checksum(), 0);
        }
        assert_conserved(&mut ifc, &mut pool);
    }
}

#[test]
fn ip_options_are_skipped_by_ihl() {
    let payload = udp_datagram(1, 2, b"opts", true);
    let mut ip =
        etherparse::Ipv4Header::new(payload.len() as u16, 64, IpNumber::UDP, PEER_IP, OUR_IP)
            .unwrap();
    ip.options = [1u8, 1, 1, 0][..].try_into().unwrap(); // NOP NOP NOP EOL
    ip.set_payload_len(payload.len()).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let mut frame = etherparse::Ethernet2Header {
        source: PEER_MAC,
        destination: OUR_MAC,
        ether_type: EtherType::IPV4,
    }
    .to_bytes()
    .to_vec();
    frame.extend_from_slice(&ip.to_bytes());
    frame.extend_from_slice(&payload);
    frame.extend_from_slice(&[0; 6]); // Ethernet padding beyond the IP total length
    let (mut ifc, mut pool) = (iface(), pool());
    let s = bind(&mut ifc, 2);
    feed(&mut ifc, &mut pool, &frame, Instant::ZERO);
    let mut buf = [0u8; 16];
    let info = ifc.udp_recv(&mut pool, s, &mut buf, &mut NoHook).unwrap();
    let info = info.unwrap_or_else(|| panic!("{:?}", ifc.stats()));
    assert_eq!(&buf[..info.len], b"opts");
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn refused_frames_are_counted_and_freed() {
    let (mut ifc, mut pool) = (iface(), pool());
    let _s = bind(&mut ifc, 9);
    let good = udp_frame(b"x", 1, 9);
    let now = Instant::ZERO;

    feed(&mut ifc, &mut pool, &good[..10], now);
    assert_eq!(ifc.stats().runt, 1);

    let mut f = good.clone();
    f[24] ^= 1; // IP header checksum
    feed(&mut ifc, &mut pool, &f, now);
    assert_eq!(ifc.stats().bad_checksum, 1);

    let mut f = good.clone();
    f[14] = 0x65; // version 6
    feed(&mut ifc, &mut pool, &f, now);
    assert_eq!(ifc.stats().bad_version, 1);

    let mut f = good.clone();
    f[12] = 0x86;
    f[13] = 0xdd;
    feed(&mut ifc, &mut pool, &f, now);
    assert_eq!(ifc.stats().unknown_ethertype, 1);

    let mut f = good.clone();
    f[0] = 0x04; // someone else's unicast MAC
    feed(&mut ifc, &mut pool, &f, now);
    assert_eq!(ifc.stats().not_for_us, 1);

    let other = ip_frame(
        PEER_IP,
        [10, 0, 0, 77],
        IpNumber::UDP,
        1,
        0,
        false,
        &udp_datagram(1, 9, b"x", false),
    );
    feed(&mut ifc, &mut pool, &other, now);
    assert_eq!(ifc.stats().not_for_us, 2);

    let sctp = ip_frame(PEER_IP, OUR_IP, IpNumber::SCTP, 1, 0, false, &[0; 20]);
    feed(&mut ifc, &mut pool, &sctp, now);
    assert_eq!(ifc.stats().unknown_protocol, 1);

    let mut f = ip_frame(
        PEER_IP,
        OUR_IP,
        IpNumber::UDP,
        1,
        0,
        false,
        &udp_datagram(1, 9, b"x", false),
    );
    f[22] = 0; // TTL
    f[24] = 0;
    f[25] = 0;
    let c = !ones_sum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    feed(&mut ifc, &mut pool, &f, now);
    assert_eq!(ifc.stats().ttl, 1);

    // UDP length field larger than the datagram.
    let mut dg = udp_datagram(1, 9, b"abc", false);
    dg[5] = 200;
    feed(
        &mut ifc,
        &mut pool,
        &ip_frame(PEER_IP, OUR_IP, IpNumber::UDP, 1, 0, false, &dg),
        now,
    );
    assert_eq!(ifc.stats().bad_length, 1);

    assert_eq!(ifc.stats().udp_delivered, 0);
    assert_eq!(ifc.stats().total_drops(), 9);
    assert_conserved(&mut ifc, &mut pool);
}
