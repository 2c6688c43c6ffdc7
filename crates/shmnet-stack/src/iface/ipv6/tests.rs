//! Neighbour discovery and ICMPv6 echo through `Interface::receive`: frames built with
//! smoltcp's emitters (its checksums, not ours), answers read back with smoltcp's checked
//! parsers; after every frame, exactly one outcome is counted and every buffer is back.

use std::net::{Ipv4Addr, Ipv6Addr};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, Icmpv6Packet, Icmpv6Repr, IpProtocol,
    Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr, RawHardwareAddress,
};

use crate::buf::chain_to_vec;
use crate::ipv6::{ALL_NODES, multicast_mac, solicited_node};
use crate::{BufIdx, BufferPool, Config, HeapPool, Instant, Interface, Stats, eth};

const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const PEER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
/// The address the peer's solicitation names as its link-layer address (not the frame's
/// source, so the tests tell the two apart).
const PEER_LLADDR: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x22]);
const OUR: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0xdead, 0xbeef);
const PEER: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);
const HEADROOM: usize = 32;

fn config(ipv6: bool) -> Config {
    let mut cfg = Config::new(OUR_MAC, Ipv4Addr::new(10, 0, 0, 1), 24);
    if ipv6 {
        cfg.ipv6 = Some((OUR, 64));
    }
    cfg
}

/// An Ethernet frame carrying `icmp` from `src` to `dst` with hop limit `hop_limit`, every
/// field and the checksum written by smoltcp.
fn icmp_frame(
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    icmp: &Icmpv6Repr,
) -> Vec<u8> {
    let n = icmp.buffer_len();
    let mut f = ip_frame(dst_mac, src, dst, hop_limit, IpProtocol::Icmpv6, n);
    let msg = &mut f[eth::HEADER_LEN + 40..];
    icmp.emit(
        &src,
        &dst,
        &mut Icmpv6Packet::new_unchecked(msg),
        &ChecksumCapabilities::default(),
    );
    f
}

/// Ethernet and IPv6 headers from the peer, then `payload_len` zeros.
fn ip_frame(
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    next_header: IpProtocol,
    payload_len: usize,
) -> Vec<u8> {
    let mut f = vec![0u8; eth::HEADER_LEN + 40 + payload_len];
    eth::write_header(&mut f, PEER_MAC, dst_mac, EthernetProtocol::Ipv6);
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header,
        payload_len,
        hop_limit,
    };
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut f[eth::HEADER_LEN..]));
    f
}

/// A neighbour solicitation for `target` from `src` to `dst`, naming `lladdr`.
fn solicit(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    target: Ipv6Addr,
    lladdr: Option<EthernetAddress>,
) -> Vec<u8> {
    let dst_mac = if dst.is_multicast() {
        multicast_mac(dst)
    } else {
        OUR_MAC
    };
    let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr: lladdr.map(RawHardwareAddress::from),
    });
    icmp_frame(dst_mac, src, dst, hop_limit, &ns)
}

/// Address resolution of our address as Linux does it: to our solicited-node group, with
/// the peer's link-layer address.
fn resolution() -> Vec<u8> {
    solicit(PEER, solicited_node(OUR), 255, OUR, Some(PEER_LLADDR))
}

const ECHO_DATA: &[u8] = b"ping -6 sends a timeval and then 0x10, 0x11, ... up to 56 bytes.";

fn echo_request(dst_mac: EthernetAddress, dst: Ipv6Addr) -> Vec<u8> {
    let req = Icmpv6Repr::EchoRequest {
        ident: 0x1234,
        seq_no: 7,
        data: ECHO_DATA,
    };
    icmp_frame(dst_mac, PEER, dst, 64, &req)
}

/// A test bench: an interface, its pool, and the counters before the last frame.
struct Bench {
    ifc: Interface,
    pool: HeapPool,
}

impl Bench {
    fn new(ipv6: bool) -> Bench {
        Bench {
            ifc: Interface::new(config(ipv6)),
            pool: HeapPool::with_count(16),
        }
    }

    /// Hand `frame` to the interface at offset `off` of its buffer; return what it sent
    /// (copied out, buffers freed) and the counters that moved. Checks that every buffer is
    /// back in the pool.
    fn feed_at(&mut self, off: usize, frame: &[u8]) -> (Vec<Vec<u8>>, Vec<(&'static str, u64)>) {
        let free = self.pool.free_count();
        let before = self.ifc.stats().clone();
        let b = self.pool.alloc_with(off, frame).expect("frame fits");
        let mut tx: Vec<BufIdx> = Vec::new();
        self.ifc.receive(&mut self.pool, b, Instant::ZERO, &mut tx);
        let sent = tx
            .into_iter()
            .map(|b| {
                let v = chain_to_vec(&self.pool, b);
                self.pool.free_chain(b);
                v
            })
            .collect();
        assert_eq!(self.pool.free_count(), free, "buffers leaked");
        (sent, moved(&before, self.ifc.stats()))
    }

    fn feed(&mut self, frame: &[u8]) -> (Vec<Vec<u8>>, Vec<(&'static str, u64)>) {
        self.feed_at(HEADROOM, frame)
    }

    /// Feeds a frame that must be refused: nothing sent, and only `rx_frames`, `ipv6_rx`
    /// (when `handed` says the ICMPv6 path saw it) and the drop counter `counter` moved.
    fn refused(&mut self, frame: &[u8], handed: bool, counter: &'static str) {
        let (sent, moved) = self.feed(frame);
        assert!(sent.is_empty(), "{counter}: sent {sent:02x?}");
        let mut want = vec![("rx_frames", 1)];
        if handed {
            want.push(("ipv6_rx", 1));
        }
        want.push((counter, 1));
        assert_eq!(moved, want);
    }
}

/// The counters that differ between `a` and `b`, with the difference.
fn moved(a: &Stats, b: &Stats) -> Vec<(&'static str, u64)> {
    a.fields()
        .into_iter()
        .zip(b.fields())
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, y)| (x.0, y.1 - x.1))
        .collect()
}

/// A frame we sent, read back: its Ethernet addresses, IPv6 header and ICMPv6 message
/// (smoltcp verifies its checksum).
fn read(frame: &[u8]) -> (EthernetAddress, EthernetAddress, Ipv6Repr, Icmpv6Repr<'_>) {
    let e = EthernetFrame::new_checked(frame).unwrap();
    assert_eq!(e.ethertype(), EthernetProtocol::Ipv6);
    let (dst_mac, src_mac) = (e.dst_addr(), e.src_addr());
    let ip_bytes = &frame[eth::HEADER_LEN..];
    let ip_pkt = Ipv6Packet::new_checked(ip_bytes).unwrap();
    let ip = Ipv6Repr::parse(&ip_pkt).unwrap();
    assert_eq!(ip.next_header, IpProtocol::Icmpv6);
    assert_eq!(40 + ip.payload_len, ip_bytes.len(), "no padding sent");
    let msg = Icmpv6Packet::new_checked(&ip_bytes[40..]).unwrap();
    let icmp = Icmpv6Repr::parse(
        &ip.src_addr,
        &ip.dst_addr,
        &msg,
        &ChecksumCapabilities::default(),
    )
    .expect("a well-formed message with a right checksum");
    (dst_mac, src_mac, ip, icmp)
}

/// Checks that `frame` is our advertisement of our address to `to` at `mac` with `flags`.
fn assert_advert(frame: &[u8], mac: EthernetAddress, to: Ipv6Addr, flags: NdiscNeighborFlags) {
    let (dst_mac, src_mac, ip, icmp) = read(frame);
    assert_eq!((dst_mac, src_mac), (mac, OUR_MAC));
    assert_eq!((ip.src_addr, ip.dst_addr, ip.hop_limit), (OUR, to, 255));
    assert_eq!(
        icmp,
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags,
            target_addr: OUR,
            lladdr: Some(RawHardwareAddress::from(OUR_MAC)),
        })
    );
}

#[test]
fn a_solicitation_for_our_address_is_advertised_to_its_link_layer_address() {
    let mut b = Bench::new(true);
    let (sent, moved) = b.feed(&resolution());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].len(), crate::ipv6::ADVERT_FRAME_LEN);
    let flags = NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE;
    assert_advert(&sent[0], PEER_LLADDR, PEER, flags);
    assert_eq!(
        moved,
        [
            ("rx_frames", 1),
            ("tx_frames", 1),
            ("ipv6_rx", 1),
            ("nd_advertisements_sent", 1)
        ]
    );

    // Unicast to our address (a reachability probe) without the option: to the frame's
    // source.
    let (sent, _) = b.feed(&solicit(PEER, OUR, 255, OUR, None));
    assert_advert(&sent[0], PEER_MAC, PEER, flags);
}

#[test]
fn another_nodes_duplicate_address_detection_is_answered_to_all_nodes() {
    let mut b = Bench::new(true);
    let dad = solicit(Ipv6Addr::UNSPECIFIED, solicited_node(OUR), 255, OUR, None);
    let (sent, _) = b.feed(&dad);
    assert_eq!(sent.len(), 1);
    let mac = EthernetAddress([0x33, 0x33, 0, 0, 0, 1]);
    assert_advert(&sent[0], mac, ALL_NODES, NdiscNeighborFlags::OVERRIDE);
    assert_eq!(b.ifc.stats().nd_advertisements_sent, 1);

    // RFC 4861 section 7.1.1: from the unspecified address, no link-layer address option,
    // and only to a solicited-node group.
    let with_option = solicit(
        Ipv6Addr::UNSPECIFIED,
        solicited_node(OUR),
        255,
        OUR,
        Some(PEER_LLADDR),
    );
    b.refused(&with_option, true, "ipv6_bad");
    let to_all = solicit(Ipv6Addr::UNSPECIFIED, ALL_NODES, 255, OUR, None);
    b.refused(&to_all, true, "ipv6_bad");
}

#[test]
fn a_solicitation_that_crossed_a_router_or_is_malformed_is_refused() {
    let mut b = Bench::new(true);
    let routed = solicit(PEER, solicited_node(OUR), 64, OUR, Some(PEER_LLADDR));
    b.refused(&routed, true, "ipv6_bad");

    let mut code = resolution();
    code[eth::HEADER_LEN + 40 + 1] = 1; // code 1, checksum fixed up below
    refill_checksum(&mut code);
    b.refused(&code, true, "ipv6_bad");

    let multicast_target = solicit(PEER, OUR, 255, ALL_NODES, None);
    b.refused(&multicast_target, true, "ipv6_bad");

    // An option of length zero (RFC 4861 section 7.1.1).
    let mut zero_opt = resolution();
    zero_opt[eth::HEADER_LEN + 40 + 24 + 1] = 0;
    refill_checksum(&mut zero_opt);
    b.refused(&zero_opt, true, "ipv6_bad");

    // Shorter than a solicitation's 24 bytes (with its checksum right).
    let mut short = solicit(PEER, OUR, 255, OUR, None);
    short.truncate(short.len() - 1);
    Ipv6Packet::new_unchecked(&mut short[eth::HEADER_LEN..]).set_payload_len(23);
    refill_checksum(&mut short);
    b.refused(&short, true, "ipv6_bad");

    assert_eq!(b.ifc.stats().nd_advertisements_sent, 0);
}

#[test]
fn a_solicitation_for_another_address_is_not_ours() {
    let mut b = Bench::new(true);
    let other = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0x1111, 0xbeef); // same group as ours
    b.refused(
        &solicit(PEER, solicited_node(OUR), 255, other, Some(PEER_LLADDR)),
        true,
        "ipv6_not_for_us",
    );
    b.refused(
        &solicit(PEER, OUR, 255, other, Some(PEER_LLADDR)),
        true,
        "ipv6_not_for_us",
    );
    // Another group altogether is refused before ICMPv6.
    let far = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x77);
    b.refused(
        &solicit(PEER, solicited_node(far), 255, far, Some(PEER_LLADDR)),
        false,
        "ipv6_not_for_us",
    );
}

#[test]
fn an_echo_request_to_our_address_or_all_nodes_is_answered_from_our_address() {
    let mut b = Bench::new(true);
    for (mac, dst) in [(OUR_MAC, OUR), (multicast_mac(ALL_NODES), ALL_NODES)] {
        let mut req = echo_request(mac, dst);
        // Trailing Ethernet padding is not part of the request, nor of the reply.
        req.extend_from_slice(&[0xee; 6]);
        let (sent, moved) = b.feed(&req);
        assert_eq!(sent.len(), 1, "{moved:?}");
        let (dst_mac, src_mac, ip, icmp) = read(&sent[0]);
        assert_eq!((dst_mac, src_mac), (PEER_MAC, OUR_MAC));
        assert_eq!((ip.src_addr, ip.dst_addr, ip.hop_limit), (OUR, PEER, 64));
        assert_eq!(
            icmp,
            Icmpv6Repr::EchoReply {
                ident: 0x1234,
                seq_no: 7,
                data: ECHO_DATA
            }
        );
        assert_eq!(
            moved,
            [
                ("rx_frames", 1),
                ("tx_frames", 1),
                ("ipv6_rx", 1),
                ("icmpv6_echo_replies", 1)
            ]
        );
    }
}

#[test]
fn a_wrong_checksum_or_another_protocol_is_refused() {
    let mut b = Bench::new(true);
    let mut bad = echo_request(OUR_MAC, OUR);
    let n = bad.len();
    bad[n - 1] ^= 0x40;
    b.refused(&bad, true, "ipv6_bad");
    let mut ns = resolution();
    ns[eth::HEADER_LEN + 40 + 8] ^= 1; // the target
    b.refused(&ns, true, "ipv6_bad");

    let udp = ip_frame(OUR_MAC, PEER, OUR, 64, IpProtocol::Udp, 12);
    b.refused(&udp, false, "ipv6_unsupported");
    let hop_by_hop = ip_frame(OUR_MAC, PEER, OUR, 1, IpProtocol::HopByHop, 8);
    b.refused(&hop_by_hop, false, "ipv6_unsupported");
}

#[test]
fn malformed_headers_and_strangers_are_counted_once() {
    let mut b = Bench::new(true);
    let req = echo_request(OUR_MAC, OUR);
    b.refused(&req[..eth::HEADER_LEN + 39], false, "runt");
    b.refused(&req[..req.len() - 1], false, "ipv6_bad"); // payload length beyond the frame
    let mut v4 = req.clone();
    v4[eth::HEADER_LEN] = 0x45;
    b.refused(&v4, false, "ipv6_bad");
    b.refused(
        &echo_request(multicast_mac(ALL_NODES), "ff02::fb".parse().unwrap()),
        false,
        "ipv6_not_for_us",
    );
    let mut spoofed = req.clone();
    spoofed[eth::HEADER_LEN + 8..eth::HEADER_LEN + 24].copy_from_slice(&OUR.octets());
    b.refused(&spoofed, false, "ipv6_bad");
    let from_group = Icmpv6Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data: b"",
    };
    b.refused(
        &icmp_frame(OUR_MAC, ALL_NODES, OUR, 64, &from_group),
        false,
        "ipv6_bad",
    );
    // Nobody to answer: a request from the unspecified address.
    b.refused(
        &icmp_frame(OUR_MAC, Ipv6Addr::UNSPECIFIED, OUR, 64, &from_group),
        true,
        "ipv6_bad",
    );
    // An IPv4 frame to an IPv6 multicast MAC is not ours.
    let mut v4_frame = req.clone();
    v4_frame[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    v4_frame[12..14].copy_from_slice(&[0x08, 0x00]);
    b.refused(&v4_frame, false, "not_for_us");
    // Another host's unicast MAC.
    let mut other = req;
    other[0] = 0x04;
    b.refused(&other, false, "not_for_us");
}

#[test]
fn other_icmpv6_messages_are_consumed_without_an_answer() {
    let mut b = Bench::new(true);
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::OVERRIDE,
        target_addr: PEER,
        lladdr: Some(RawHardwareAddress::from(PEER_MAC)),
    });
    let reply = Icmpv6Repr::EchoReply {
        ident: 1,
        seq_no: 2,
        data: b"x",
    };
    let rs = Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit { lladdr: None });
    for m in [na, reply, rs] {
        let (sent, moved) = b.feed(&icmp_frame(
            multicast_mac(ALL_NODES),
            PEER,
            ALL_NODES,
            255,
            &m,
        ));
        assert!(sent.is_empty());
        assert_eq!(
            moved,
            [("rx_frames", 1), ("ipv6_rx", 1), ("icmpv6_other", 1)],
            "{m:?}"
        );
    }
    // A type smoltcp does not know (a node information query, RFC 4620), checksum right.
    let mut unknown = icmp_frame(OUR_MAC, PEER, OUR, 64, &reply);
    unknown[eth::HEADER_LEN + 40] = 139;
    refill_checksum(&mut unknown);
    let (sent, moved) = b.feed(&unknown);
    assert!(sent.is_empty());
    assert_eq!(moved.last(), Some(&("icmpv6_other", 1)));
}

#[test]
fn without_an_ipv6_address_ipv6_frames_are_not_ours() {
    let mut b = Bench::new(false);
    b.refused(&echo_request(OUR_MAC, OUR), false, "unknown_ethertype");
    b.refused(&resolution(), false, "not_for_us");
    assert_eq!(b.ifc.stats().ipv6_rx, 0);
}

#[test]
fn an_advertisement_is_written_where_the_buffer_has_room() {
    // A solicitation without options ends at the buffer's end: the advertisement, 8 bytes
    // longer, is written from the buffer's start.
    let mut b = Bench::new(true);
    let ns = solicit(PEER, OUR, 255, OUR, None);
    let off = crate::DEFAULT_BUF_CAPACITY - ns.len();
    let (sent, _) = b.feed_at(off, &ns);
    let flags = NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE;
    assert_advert(&sent[0], PEER_MAC, PEER, flags);

    // A pool whose buffers cannot hold it: counted, freed.
    let mut small = Bench {
        ifc: Interface::new(config(true)),
        pool: HeapPool::new(4, ns.len()),
    };
    let (sent, moved) = small.feed_at(0, &ns);
    assert!(sent.is_empty());
    assert_eq!(moved, [("rx_frames", 1), ("ipv6_rx", 1), ("no_buffers", 1)]);
}

#[test]
fn an_echo_reply_beyond_the_mtu_is_not_sent() {
    let mut cfg = config(true);
    cfg.mtu = 40 + 8 + ECHO_DATA.len() - 1;
    let mut b = Bench {
        ifc: Interface::new(cfg),
        pool: HeapPool::with_count(4),
    };
    b.refused(&echo_request(OUR_MAC, OUR), true, "ipv6_unsupported");
}

#[test]
fn the_fuzz_harness_reaches_the_ipv6_path() {
    // The harness's address (its MAC is ours here too).
    let ours = crate::fuzzing::IPV6;
    let frames = [
        solicit(PEER, solicited_node(ours), 255, ours, Some(PEER_LLADDR)),
        icmp_frame(
            OUR_MAC,
            PEER,
            ours,
            64,
            &Icmpv6Repr::EchoRequest {
                ident: 1,
                seq_no: 1,
                data: b"fuzz",
            },
        ),
    ];
    let mut input = Vec::new();
    for f in &frames {
        input.push(0u8);
        input.extend_from_slice(&(f.len() as u16).to_le_bytes());
        input.extend_from_slice(f);
    }
    let st = crate::fuzzing::stack_rx(&input);
    assert_eq!(
        (st.nd_advertisements_sent, st.icmpv6_echo_replies),
        (1, 1),
        "{st:?}"
    );
}

proptest::proptest! {
    /// Any corruption of a solicitation or an echo request: no panic, every buffer back,
    /// and exactly one outcome counted — one drop counter, or one answer sent, or one
    /// message consumed.
    #[test]
    fn a_mangled_ipv6_frame_has_exactly_one_outcome(
        which in 0usize..3,
        flips in proptest::collection::vec((0usize..200, proptest::prelude::any::<u8>()), 1..6),
        cut in 0usize..200,
    ) {
        let mut f = match which {
            0 => resolution(),
            1 => echo_request(OUR_MAC, OUR),
            _ => solicit(Ipv6Addr::UNSPECIFIED, solicited_node(OUR), 255, OUR, None),
        };
        for (at, x) in flips {
            // The EtherType stays IPv6: ARP and IPv4 have outcomes of their own.
            if at < f.len() && !(12..14).contains(&at) {
                f[at] ^= x;
            }
        }
        f.truncate(f.len() - cut.min(f.len() - 14));
        let mut b = Bench::new(true);
        let (sent, _) = b.feed(&f);
        let st = b.ifc.stats();
        let answers = st.nd_advertisements_sent + st.icmpv6_echo_replies;
        proptest::prop_assert_eq!(answers, sent.len() as u64);
        proptest::prop_assert_eq!(st.total_drops() + answers + st.icmpv6_other, 1, "{:?}", st);
        for s in &sent {
            let _ = read(s);
        }
    }
}

/// Recomputes the ICMPv6 checksum of `frame` after an edit (smoltcp's).
fn refill_checksum(frame: &mut [u8]) {
    let ip = Ipv6Packet::new_checked(&frame[eth::HEADER_LEN..]).unwrap();
    let (src, dst, n) = (ip.src_addr(), ip.dst_addr(), usize::from(ip.payload_len()));
    let msg = &mut frame[eth::HEADER_LEN + 40..eth::HEADER_LEN + 40 + n];
    Icmpv6Packet::new_unchecked(msg).fill_checksum(&src, &dst);
}
