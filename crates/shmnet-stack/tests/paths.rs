//! The seed's receive path, the send path with fragmentation, ARP resolution and ICMP.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use common::*;
use etherparse::{
    ArpOperation, EtherType, Icmpv4Type, IpNumber, NetSlice, SlicedPacket, TransportSlice,
    defrag::IpDefragPool, icmpv4::DestUnreachableHeader,
};
use shmnet_stack::{
    BufIdx, BufferPool, EthernetAddress, HeapPool, Instant, Interface, NoHook, RecvHook, SendError,
};

const SEED_MSG: usize = 14_792;

/// Records each per-buffer copy the way the residency probe would time it.
#[derive(Default)]
struct Probe {
    calls: Vec<(BufIdx, usize)>,
    open: bool,
}

impl RecvHook for Probe {
    fn on_buffer(&mut self, buf: BufIdx, data: &[u8]) {
        assert!(!self.open && !data.is_empty());
        self.open = true;
        self.calls.push((buf, data.len()));
    }
    fn after_buffer(&mut self, _buf: BufIdx, _data: &[u8]) {
        assert!(self.open);
        self.open = false;
    }
}

#[test]
fn seed_000_ten_fragment_message() {
    for checksum in [false, true] {
        let mut cfg = config();
        cfg.udp_rx_checksum = checksum;
        cfg.rx_queue_limit = 1; // the seed's default queue size
        let mut ifc = Interface::new(cfg);
        let mut pool = HeapPool::with_count(64);
        let s = bind(&mut ifc, 5001);
        let msg = pattern(SEED_MSG, 7);
        let dg = udp_datagram(5000, 5001, &msg, checksum);
        let frames = udp_fragments(0x1234, &dg, 1480);
        assert_eq!(frames.len(), 10);
        assert!(frames.iter().all(|f| f.len() <= 1514));
        for (i, f) in frames.iter().enumerate() {
            let out = feed(&mut ifc, &mut pool, f, Instant::from_millis(i as u64));
            assert!(out.is_empty());
        }
        assert_eq!(ifc.stats().reasm_ok, 1);
        assert_eq!(ifc.udp_queue_len(s).unwrap(), 1);
        let m = ifc.udp_peek(s).unwrap().unwrap();
        assert_eq!(
            (m.len, m.bufs),
            (SEED_MSG, 10),
            "queued as a 10-buffer chain"
        );
        assert_eq!(pool.total() - pool.free_count(), 10, "no copy was made");

        let mut user = vec![0u8; 16 * 1024];
        let mut probe = Probe::default();
        let info = ifc
            .udp_recv(&mut pool, s, &mut user, &mut probe)
            .unwrap()
            .unwrap();
        assert_eq!(info.len, SEED_MSG);
        assert_eq!(&user[..SEED_MSG], &msg[..]);
        assert_eq!(probe.calls.len(), 10, "hook called once per buffer");
        let lens: Vec<usize> = probe.calls.iter().map(|c| c.1).collect();
        assert_eq!(lens[0], 1472);
        assert!(lens[1..].iter().all(|&l| l == 1480));
        assert_eq!(pool.free_count(), pool.total());
    }
}

#[test]
fn queue_limit_counts_overflow() {
    let mut cfg = config();
    cfg.rx_queue_limit = 2;
    let mut ifc = Interface::new(cfg);
    let mut pool = pool();
    let s = bind(&mut ifc, 9);
    for i in 0..5u16 {
        let dg = udp_datagram(1, 9, &pattern(50, i as u8), true);
        feed(
            &mut ifc,
            &mut pool,
            &ip_frame(PEER_IP, OUR_IP, IpNumber::UDP, i, 0, false, &dg),
            Instant::ZERO,
        );
    }
    assert_eq!(ifc.udp_queue_len(s).unwrap(), 2);
    assert_eq!(ifc.stats().queue_full, 3);
    assert_eq!(ifc.udp_overflows(s).unwrap(), 3);
    // Short user buffer: truncated, the rest discarded.
    let mut small = [0u8; 10];
    let info = ifc
        .udp_recv(&mut pool, s, &mut small, &mut NoHook)
        .unwrap()
        .unwrap();
    assert_eq!((info.len, info.msg_len), (10, 50));
    assert_eq!(&small[..], &pattern(50, 0)[..10]);
    assert_conserved(&mut ifc, &mut pool);
}

/// A socket nobody reads holds at most `UDP_POOL_FLOOR` buffers while the pool is scarce
/// (less than an eighth free) and none while it is exhausted: the rest are dropped and
/// counted, and the pool's last part stays for everyone else. With the pool ample the same
/// socket fills to its limit.
#[test]
fn a_socket_nobody_reads_holds_a_few_datagrams_while_the_pool_is_scarce() {
    use shmnet_stack::iface::UDP_POOL_FLOOR;
    let fill = |held: usize| {
        let mut cfg = config();
        cfg.rx_queue_limit = 100;
        let mut ifc = Interface::new(cfg);
        let mut pool = pool();
        let others: Vec<_> = (0..held).map(|_| pool.alloc().unwrap()).collect();
        let s = bind(&mut ifc, 9);
        for i in 0..60u16 {
            let dg = udp_datagram(1, 9, &pattern(50, i as u8), true);
            let frame = ip_frame(PEER_IP, OUR_IP, IpNumber::UDP, i, 0, false, &dg);
            feed(&mut ifc, &mut pool, &frame, Instant::ZERO);
        }
        let queued = ifc.udp_queue_len(s).unwrap();
        let drops = ifc.stats().pool_drops;
        for b in others {
            pool.free(b);
        }
        assert_conserved(&mut ifc, &mut pool);
        (queued, drops)
    };
    // 256 buffers, 230 held by others: scarce; the socket holds its floor's worth (one
    // buffer a datagram here).
    assert_eq!(fill(230), (UDP_POOL_FLOOR, 60 - UDP_POOL_FLOOR as u64));
    // 250 held: exhausted; nothing is queued.
    assert_eq!(fill(250), (0, 60));
    // 200 held: the socket takes the pool down until it is scarce (the level is read once
    // per 32 admissions, so a little past that), then only the floor's worth stays queued.
    let (queued, drops) = fill(200);
    assert!(
        queued > UDP_POOL_FLOOR && queued < 60 && drops > 0,
        "{queued} queued, {drops} dropped"
    );
    assert_eq!(queued as u64 + drops, 60);
    assert_eq!(
        fill(0),
        (60, 0),
        "an ample pool: the socket fills to its limit"
    );
}

fn reassemble_with_etherparse(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut defrag = IpDefragPool::<(), ()>::new();
    let mut out = None;
    for f in frames {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        let h = ip.header().to_header();
        assert_eq!(
            h.calc_header_checksum(),
            h.header_checksum,
            "IP header checksum"
        );
        assert!(f.len() <= 1514, "frame within the MTU");
        if let Some(v) = defrag.process_sliced_packet(&p, (), ()).unwrap() {
            out = Some(v.payload);
        }
    }
    out.expect("etherparse did not complete the datagram")
}

#[test]
fn send_fragments_seed_message() {
    for checksum in [false, true] {
        let mut ifc = sender(checksum);
        let mut pool = HeapPool::with_count(64);
        let s = ifc.udp_bind_port(5000).unwrap();
        let data = pattern(SEED_MSG, 42);
        let mut tx = Vec::new();
        let dst = SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 5001);
        ifc.udp_send_to(&mut pool, s, &data, dst, Instant::ZERO, &mut tx)
            .unwrap();
        let frames = drain_tx(&mut pool, tx);
        assert_eq!(frames.len(), 10);
        let udp = reassemble_with_etherparse(&frames);
        assert_eq!(udp.len(), 8 + SEED_MSG);
        assert_eq!(&udp[8..], &data[..]);
        let want = udp_datagram_between(OUR_IP, PEER_IP, 5000, 5001, &data, checksum);
        assert_eq!(
            udp, want,
            "header (ports, length, checksum) as etherparse computes it"
        );
        assert_eq!(pool.free_count(), pool.total());

        // And the other way round: our frames fed to a peer stack reassemble there.
        let mut peer_cfg =
            shmnet_stack::Config::new(EthernetAddress(PEER_MAC), Ipv4Addr::from(PEER_IP), 24);
        peer_cfg.udp_rx_checksum = true;
        let mut peer = Interface::new(peer_cfg);
        let ps = peer.udp_bind_port(5001).unwrap();
        for f in frames.iter().rev() {
            let b = pool.alloc_with(0, f).unwrap();
            peer.receive(&mut pool, b, Instant::ZERO, &mut Vec::new());
        }
        let mut buf = vec![0; SEED_MSG];
        let info = peer
            .udp_recv(&mut pool, ps, &mut buf, &mut NoHook)
            .unwrap()
            .unwrap();
        assert_eq!(info.len, SEED_MSG);
        assert_eq!(buf, data);
        assert_eq!(pool.free_count(), pool.total());
    }
}

#[test]
fn send_errors_keep_no_buffers() {
    let mut ifc = iface();
    let mut pool = HeapPool::with_count(5);
    ifc.add_neighbor(
        Ipv4Addr::from(PEER_IP),
        EthernetAddress(PEER_MAC),
        Instant::ZERO,
    );
    let s = ifc.udp_bind_port(1).unwrap();
    let dst = SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 2);
    let mut tx = Vec::new();
    let r = ifc.udp_send_to(&mut pool, s, &[0; SEED_MSG], dst, Instant::ZERO, &mut tx);
    assert_eq!(r, Err(SendError::NoBuffers));
    let r = ifc.udp_send_to(&mut pool, s, &vec![0; 70_000], dst, Instant::ZERO, &mut tx);
    assert_eq!(r, Err(SendError::TooBig));
    let off = SocketAddrV4::new(Ipv4Addr::new(8, 8, 8, 8), 53);
    assert_eq!(
        ifc.udp_send_to(&mut pool, s, b"x", off, Instant::ZERO, &mut tx),
        Err(SendError::NoRoute)
    );
    assert!(tx.is_empty());
    assert_eq!(pool.free_count(), pool.total());
}

fn arp_reply_from_peer() -> Vec<u8> {
    let arp = etherparse::ArpPacket::new(
        etherparse::ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REPLY,
        &PEER_MAC,
        &PEER_IP,
        &OUR_MAC,
        &OUR_IP,
    )
    .unwrap();
    let mut v = etherparse::Ethernet2Header {
        source: PEER_MAC,
        destination: OUR_MAC,
        ether_type: EtherType::ARP,
    }
    .to_bytes()
    .to_vec();
    v.extend_from_slice(&arp.to_bytes());
    v
}

fn arp_request_for(target: [u8; 4]) -> Vec<u8> {
    let arp = etherparse::ArpPacket::new(
        etherparse::ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &PEER_MAC,
        &PEER_IP,
        &[0; 6],
        &target,
    )
    .unwrap();
    let mut v = etherparse::Ethernet2Header {
        source: PEER_MAC,
        destination: [0xff; 6],
        ether_type: EtherType::ARP,
    }
    .to_bytes()
    .to_vec();
    v.extend_from_slice(&arp.to_bytes());
    v
}

fn is_arp_request_for(frame: &[u8], target: [u8; 4]) -> bool {
    let p = SlicedPacket::from_ethernet(frame).unwrap();
    match p.net {
        Some(NetSlice::Arp(a)) => {
            a.operation() == ArpOperation::REQUEST
                && a.target_protocol_addr() == target
                && a.sender_hw_addr() == OUR_MAC
                && frame[..6] == [0xff; 6]
        }
        _ => false,
    }
}

#[test]
fn arp_request_for_other_address_is_not_answered() {
    let (mut ifc, mut pool) = (iface(), pool());
    let out = feed(
        &mut ifc,
        &mut pool,
        &arp_request_for([10, 0, 0, 99]),
        Instant::ZERO,
    );
    assert!(out.is_empty());
    assert_eq!(ifc.neighbor(Ipv4Addr::from(PEER_IP), Instant::ZERO), None);
    let out = feed(&mut ifc, &mut pool, &arp_request_for(OUR_IP), Instant::ZERO);
    assert_eq!(out.len(), 1);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn arp_resolves_before_sending_and_releases_the_queue() {
    let (mut ifc, mut pool) = (iface(), pool());
    let s = ifc.udp_bind_port(1000).unwrap();
    let dst = SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 2000);
    let mut tx = Vec::new();
    ifc.udp_send_to(&mut pool, s, &pattern(3000, 1), dst, Instant::ZERO, &mut tx)
        .unwrap();
    ifc.udp_send_to(&mut pool, s, b"second", dst, Instant::ZERO, &mut tx)
        .unwrap();
    let out = drain_tx(&mut pool, tx);
    assert_eq!(out.len(), 1, "one ARP request, data frames held");
    assert!(is_arp_request_for(&out[0], PEER_IP));
    assert_eq!(ifc.arp_pending_len(), 4); // 3 fragments + 1

    // Retry after the interval.
    let mut tx = Vec::new();
    ifc.poll(&mut pool, Instant::from_millis(1001), &mut tx);
    let out = drain_tx(&mut pool, tx);
    assert_eq!(out.len(), 1);
    assert!(is_arp_request_for(&out[0], PEER_IP));

    // The reply releases the queue, in order, addressed to the peer.
    let out = feed(
        &mut ifc,
        &mut pool,
        &arp_reply_from_peer(),
        Instant::from_millis(1500),
    );
    assert_eq!(out.len(), 4);
    for f in &out {
        assert_eq!(&f[..6], &PEER_MAC);
    }
    let p = SlicedPacket::from_ethernet(&out[3]).unwrap();
    let Some(TransportSlice::Udp(u)) = p.transport else {
        panic!("not UDP")
    };
    assert_eq!(u.payload(), b"second");
    assert_eq!(
        reassemble_with_etherparse(&out[..3])[8..],
        pattern(3000, 1)[..]
    );
    assert_eq!(ifc.arp_pending_len(), 0);

    // Now resolved: sent at once.
    let mut tx = Vec::new();
    ifc.udp_send_to(&mut pool, s, b"third", dst, Instant::from_secs(2), &mut tx)
        .unwrap();
    assert_eq!(drain_tx(&mut pool, tx).len(), 1);

    // Entries expire (60 s by default): a request again.
    let later = Instant::from_millis(1500).after(Duration::from_secs(61));
    let mut tx = Vec::new();
    ifc.poll(&mut pool, later, &mut tx);
    assert_eq!(ifc.neighbor(Ipv4Addr::from(PEER_IP), later), None);
    ifc.udp_send_to(&mut pool, s, b"fourth", dst, later, &mut tx)
        .unwrap();
    let out = drain_tx(&mut pool, tx);
    assert_eq!(out.len(), 1);
    assert!(is_arp_request_for(&out[0], PEER_IP));
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn arp_pending_queue_is_bounded_and_times_out() {
    let mut cfg = config();
    cfg.arp_pending_limit = 8;
    let mut ifc = Interface::new(cfg);
    let mut pool = pool();
    let s = ifc.udp_bind_port(1000).unwrap();
    let dst = SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 2000);
    let mut tx = Vec::new();
    ifc.udp_send_to(&mut pool, s, &pattern(5000, 1), dst, Instant::ZERO, &mut tx)
        .unwrap(); // 4 frames
    ifc.udp_send_to(&mut pool, s, &pattern(4000, 1), dst, Instant::ZERO, &mut tx)
        .unwrap(); // 3 frames
    let r = ifc.udp_send_to(&mut pool, s, &pattern(3000, 1), dst, Instant::ZERO, &mut tx);
    assert_eq!(r, Err(SendError::ArpQueueFull));
    assert_eq!(ifc.arp_pending_len(), 7);
    assert_eq!(ifc.stats().arp_queue_full, 3);
    drain_tx(&mut pool, tx);
    // No answer within 3 s: dropped, buffers back.
    let mut tx = Vec::new();
    ifc.poll(&mut pool, Instant::from_secs(3), &mut tx);
    drain_tx(&mut pool, tx);
    assert_eq!(ifc.arp_pending_len(), 0);
    assert_eq!(ifc.stats().arp_timeout, 7);
    assert_eq!(pool.free_count(), pool.total());
}

#[test]
fn large_ping_is_answered_in_fragments() {
    let (mut ifc, mut pool) = (iface(), pool());
    let data = pattern(3000, 5);
    let mut icmp = etherparse::Icmpv4Header::with_checksum(
        Icmpv4Type::EchoRequest(etherparse::IcmpEchoHeader { id: 77, seq: 3 }),
        &data,
    )
    .to_bytes()
    .to_vec();
    icmp.extend_from_slice(&data);
    let mut out = Vec::new();
    for (off, more, bytes) in cut(&icmp, 1480) {
        let f = ip_frame(PEER_IP, OUR_IP, IpNumber::ICMP, 9, off, more, &bytes);
        out.extend(feed(&mut ifc, &mut pool, &f, Instant::ZERO));
    }
    assert_eq!(out.len(), 3);
    let reply = reassemble_with_etherparse(&out);
    assert_eq!(ones_sum(&reply), 0xffff);
    let (h, rest) = etherparse::Icmpv4Header::from_slice(&reply).unwrap();
    assert_eq!(
        h.icmp_type,
        Icmpv4Type::EchoReply(etherparse::IcmpEchoHeader { id: 77, seq: 3 })
    );
    assert_eq!(rest, &data[..]);
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn port_unreachable_for_closed_port_rate_limited() {
    let (mut ifc, mut pool) = (iface(), pool());
    let dg = udp_datagram(4444, 9999, b"anyone?", true);
    let frame = ip_frame(PEER_IP, OUR_IP, IpNumber::UDP, 0x77, 0, false, &dg);
    let out = feed(&mut ifc, &mut pool, &frame, Instant::ZERO);
    assert_eq!(out.len(), 1);
    let p = SlicedPacket::from_ethernet(&out[0]).unwrap();
    assert_eq!(&out[0][..6], &PEER_MAC);
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("not IPv4")
    };
    let h = ip.header().to_header();
    assert_eq!(
        (h.source, h.destination, h.protocol),
        (OUR_IP, PEER_IP, IpNumber::ICMP)
    );
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("not ICMP")
    };
    assert_eq!(
        icmp.icmp_type(),
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port)
    );
    assert_eq!(ones_sum(&out[0][34..]), 0xffff);
    // The quote: the offending IP header and the UDP header.
    let quoted = icmp.payload();
    let (qh, qrest) = etherparse::Ipv4Header::from_slice(quoted).unwrap();
    assert_eq!(
        (qh.source, qh.destination, qh.identification),
        (PEER_IP, OUR_IP, 0x77)
    );
    assert_eq!(&qrest[..8], &dg[..8]);

    // Burst of 10, then limited; one token per 100 ms.
    let mut sent = 1;
    for _ in 0..19 {
        sent += feed(&mut ifc, &mut pool, &frame, Instant::ZERO).len();
    }
    assert_eq!(sent, 10);
    assert_eq!(ifc.stats().icmp_rate_limited, 10);
    assert_eq!(
        feed(&mut ifc, &mut pool, &frame, Instant::from_millis(100)).len(),
        1
    );
    assert_eq!(
        feed(&mut ifc, &mut pool, &frame, Instant::from_millis(100)).len(),
        0
    );
    assert_eq!(ifc.stats().no_socket, 22);

    // Never for broadcasts.
    let b = ip_frame(PEER_IP, [10, 0, 0, 255], IpNumber::UDP, 1, 0, false, &dg);
    assert!(feed(&mut ifc, &mut pool, &b, Instant::from_secs(10)).is_empty());
    assert_conserved(&mut ifc, &mut pool);
}

#[test]
fn bind_rules() {
    let mut ifc = iface();
    let a = ifc.udp_bind_port(53).unwrap();
    assert_eq!(
        ifc.udp_bind_port(53),
        Err(shmnet_stack::BindError::AddressInUse)
    );
    assert_eq!(
        ifc.udp_bind(SocketAddrV4::new(Ipv4Addr::from(OUR_IP), 53)),
        Err(shmnet_stack::BindError::AddressInUse)
    );
    assert_eq!(
        ifc.udp_bind(SocketAddrV4::new(Ipv4Addr::new(1, 2, 3, 4), 54)),
        Err(shmnet_stack::BindError::AddressNotAvailable)
    );
    let e = ifc.udp_bind_port(0).unwrap();
    assert!(ifc.udp_local_addr(e).unwrap().port() >= 49152);
    let mut pool = HeapPool::with_count(1);
    ifc.udp_close(&mut pool, a).unwrap();
    assert!(ifc.udp_bind_port(53).is_ok());
    assert_eq!(pool.free_count(), pool.total());
}

/// On a loopback device a datagram to our own address goes out at our own MAC without ARP,
/// and fed back as received it reaches the socket bound to its port; on a wire both the send
/// and such a datagram are refused.
#[test]
fn a_loopback_device_reaches_our_own_address_and_a_wire_does_not() {
    let ours = SocketAddrV4::new(Ipv4Addr::from(OUR_IP), 5001);
    for loopback in [true, false] {
        let mut cfg = config();
        cfg.loopback = loopback;
        let mut ifc = Interface::new(cfg);
        let mut pool = pool();
        let from = bind(&mut ifc, 40001);
        let to = bind(&mut ifc, 5001);
        let mut tx: Vec<BufIdx> = Vec::new();
        let sent = ifc.udp_send_to(&mut pool, from, b"0123456789", ours, Instant::ZERO, &mut tx);
        if !loopback {
            assert_eq!(sent, Err(SendError::Unaddressable));
            assert!(tx.is_empty());
            // A frame from our own address arriving on a wire is spoofed.
            let dg = udp_datagram(40001, 5001, b"0123456789", false);
            let f = ip_frame(OUR_IP, OUR_IP, IpNumber::UDP, 7, 0, false, &dg);
            assert!(feed(&mut ifc, &mut pool, &f, Instant::ZERO).is_empty());
            assert_eq!(ifc.stats().bad_address, 1);
            assert_eq!(ifc.udp_queue_len(to).unwrap(), 0);
            continue;
        }
        sent.unwrap();
        assert_eq!(tx.len(), 1, "no ARP request, the datagram itself");
        assert_eq!(ifc.stats().arp_requests_sent, 0);
        let frame = shmnet_stack::buf::chain_to_vec(&pool, tx[0]);
        let p = SlicedPacket::from_ethernet(&frame).unwrap();
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = &p.link else {
            panic!("not Ethernet")
        };
        assert_eq!((eth.destination(), eth.source()), (OUR_MAC, OUR_MAC));
        // The loopback hands the same buffer back.
        let mut out: Vec<BufIdx> = Vec::new();
        ifc.receive(&mut pool, tx[0], Instant::ZERO, &mut out);
        assert!(out.is_empty());
        let mut user = [0u8; 64];
        let info = ifc
            .udp_recv(&mut pool, to, &mut user, &mut NoHook)
            .unwrap()
            .expect("delivered to the bound port");
        assert_eq!(&user[..info.len], b"0123456789");
        assert_eq!(info.src, SocketAddrV4::new(Ipv4Addr::from(OUR_IP), 40001));
        assert_eq!(ifc.stats().bad_address, 0);
        assert_eq!(pool.free_count(), pool.total());
    }
}

/// Host-local flow control (`Interface::udp_local_wait`): on a loopback a sender to one of
/// our own sockets is told to wait once the socket's queue, with what is on its way to it,
/// is full; reading makes room; a socket full for the whole hold lets senders through (one
/// episode, counted) until it has room again; an in-flight count that never comes back is
/// forgotten. Nothing of this applies on a wire or to another address.
#[test]
fn a_local_sender_waits_for_a_full_socket_of_ours_for_the_hold_at_most() {
    let hold = Duration::from_millis(20);
    let mut cfg = config();
    cfg.loopback = true;
    cfg.rx_queue_limit = 4;
    cfg.udp_local_hold = Some(hold);
    let mut ifc = Interface::new(cfg);
    let mut pool = pool();
    let from = bind(&mut ifc, 40001);
    let to = bind(&mut ifc, 5001);
    let ours = SocketAddrV4::new(Ipv4Addr::from(OUR_IP), 5001);
    let ms = Instant::from_millis;
    let mut wire: Vec<BufIdx> = Vec::new();
    // Four sent, none back yet: the queue is full counting what is on its way.
    for _ in 0..4 {
        assert!(!ifc.udp_local_wait(ours, ms(1)));
        ifc.udp_send_to(&mut pool, from, b"x", ours, ms(1), &mut wire)
            .unwrap();
    }
    assert!(ifc.udp_local_wait(ours, ms(1)), "four on their way");
    assert_eq!(ifc.stats().udp_local_held, 1);
    // They arrive: still full.
    let mut out: Vec<BufIdx> = Vec::new();
    for b in wire.drain(..) {
        ifc.receive(&mut pool, b, ms(2), &mut out);
    }
    assert_eq!(ifc.udp_queue_len(to).unwrap(), 4);
    assert!(ifc.udp_local_wait(ours, ms(2)));
    // A read makes room for one.
    let mut user = [0u8; 8];
    ifc.udp_recv(&mut pool, to, &mut user, &mut NoHook)
        .unwrap()
        .unwrap();
    assert!(!ifc.udp_local_wait(ours, ms(3)));
    ifc.udp_send_to(&mut pool, from, b"x", ours, ms(3), &mut wire)
        .unwrap();
    assert!(ifc.udp_local_wait(ours, ms(3)), "full again: a new episode");
    assert_eq!(ifc.stats().udp_local_held, 2);
    // Full for the whole hold: senders go on, once counted.
    assert!(ifc.udp_local_wait(ours, ms(3 + 19)));
    assert!(!ifc.udp_local_wait(ours, ms(3 + 21)));
    assert!(!ifc.udp_local_wait(ours, ms(3 + 22)));
    assert_eq!(ifc.stats().udp_local_hold_expired, 1);
    // The datagram on its way never comes back (a device that lost it): after 50 ms
    // without movement it no longer counts, and the socket has room for one.
    wire.clear();
    assert!(
        !ifc.udp_local_wait(ours, ms(30)),
        "three queued and one on its way: full, but past the hold since it last had room"
    );
    assert!(
        !ifc.udp_local_wait(ours, ms(3 + 51)),
        "the lost one is forgotten"
    );
    ifc.udp_send_to(&mut pool, from, b"x", ours, ms(55), &mut wire)
        .unwrap();
    assert!(
        ifc.udp_local_wait(ours, ms(55)),
        "it had room again: holding resumes"
    );
    assert_eq!(ifc.stats().udp_local_held, 3);
    // Another address, or a wire: never held.
    let other = SocketAddrV4::new(Ipv4Addr::from(PEER_IP), 5001);
    assert!(!ifc.udp_local_wait(other, ms(60)));
    let mut wired = config();
    wired.rx_queue_limit = 0;
    let mut ifc = Interface::new(wired);
    bind(&mut ifc, 5001);
    assert!(!ifc.udp_local_wait(ours, ms(60)));
}
