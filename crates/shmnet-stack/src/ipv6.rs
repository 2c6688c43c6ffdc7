//! IPv6 on the wire, as far as the stack speaks it (neighbour discovery for its one address,
//! and ICMPv6 echo): the checks of a received header with smoltcp's `Ipv6Packet` and
//! `Ipv6Repr`, the multicast addresses a node listens to and their Ethernet mapping, the
//! ICMPv6 checksum, and the two messages the stack sends — a neighbour advertisement, built
//! with smoltcp's `NdiscRepr`, and an echo reply, made in place from its request with
//! `Icmpv6Packet`.
//!
//! Checksums are the crate's one implementation ([`crate::checksum`]) over the IPv6
//! pseudo-header ([`checksum::pseudo_v6`]). No function here panics on any input bytes.

use std::net::Ipv6Addr;

use smoltcp::wire::{
    EthernetAddress, EthernetProtocol, Icmpv6Message, Icmpv6Packet, IpProtocol, Ipv6Packet,
    Ipv6Repr, NdiscNeighborFlags, NdiscRepr, RawHardwareAddress,
};

use crate::checksum::{self, Sum};
use crate::eth;

/// Length of the IPv6 header (extension headers are not part of it).
pub const HEADER_LEN: usize = smoltcp::wire::IPV6_HEADER_LEN;

/// The link-local all-nodes multicast group, ff02::1 (RFC 4291 section 2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Hop limit of every neighbour-discovery message, sent and required on receipt: a message
/// that crossed a router has a lower one (RFC 4861 section 3.1).
pub const ND_HOP_LIMIT: u8 = 255;

/// Length of an echo message's header: type, code, checksum, identifier, sequence number
/// (RFC 4443 section 4.1).
pub const ECHO_HEADER_LEN: usize = 8;

/// Length of a neighbour advertisement carrying a target link-layer address option for an
/// Ethernet address (RFC 4861 section 4.4): 24 bytes of message, 8 of option.
pub const ADVERT_LEN: usize = 32;

/// Length of the Ethernet frame carrying such an advertisement.
pub const ADVERT_FRAME_LEN: usize = eth::HEADER_LEN + HEADER_LEN + ADVERT_LEN;

/// The solicited-node multicast address of `addr`: ff02::1:ff00:0 with the low 24 bits of
/// `addr` (RFC 4291 section 2.7.1), where neighbour solicitations for `addr` are sent.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// Whether `a` is a solicited-node multicast address (ff02::1:ff00:0/104).
pub fn is_solicited_node(a: Ipv6Addr) -> bool {
    a.octets()[..13] == solicited_node(Ipv6Addr::UNSPECIFIED).octets()[..13]
}

/// The Ethernet address of multicast group `group`: 33:33 and the group's low 32 bits
/// (RFC 2464 section 7).
pub fn multicast_mac(group: Ipv6Addr) -> EthernetAddress {
    let o = group.octets();
    EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// Whether `mac` is an IPv6 multicast Ethernet address (33:33:xx:xx:xx:xx, RFC 2464).
#[inline]
pub fn is_multicast_mac(mac: EthernetAddress) -> bool {
    mac.0[0] == 0x33 && mac.0[1] == 0x33
}

/// Why an IPv6 header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ipv6Error {
    /// Shorter than the 40-byte header.
    #[error("packet shorter than an IPv6 header")]
    Runt,
    /// Version field is not 6.
    #[error("IP version is not 6")]
    BadVersion,
    /// Payload length beyond the packet.
    #[error("IPv6 payload length beyond the frame")]
    BadLength,
}

/// Check and read the IPv6 header at the start of `packet` (an Ethernet payload, possibly
/// padded past the payload length). On success the payload, `payload_len` bytes, follows
/// the header within `packet`.
pub fn parse(packet: &[u8]) -> Result<Ipv6Repr, Ipv6Error> {
    if packet.len() < HEADER_LEN {
        return Err(Ipv6Error::Runt);
    }
    // `new_checked` is smoltcp's length check: the header, and the payload within the packet.
    let p = Ipv6Packet::new_checked(packet).map_err(|_| Ipv6Error::BadLength)?;
    if p.version() != 6 {
        return Err(Ipv6Error::BadVersion);
    }
    Ipv6Repr::parse(&p).map_err(|_| Ipv6Error::BadVersion)
}

/// Whether the ICMPv6 message `msg` (checksum field included) from `src` to `dst` has a
/// right checksum (RFC 4443 section 2.3: the pseudo-header is part of the sum).
pub fn icmpv6_checksum_ok(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> bool {
    let mut s = Sum::of(msg);
    s.add_word(checksum::pseudo_v6(src, dst, IpProtocol::Icmpv6, msg.len()));
    s.value() == 0xffff
}

/// The checksum of ICMPv6 message `msg` (its checksum field zero) from `src` to `dst`.
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut s = Sum::of(msg);
    s.add_word(checksum::pseudo_v6(src, dst, IpProtocol::Icmpv6, msg.len()));
    s.checksum()
}

/// The bytes given cannot hold the frame to write (or, for an echo reply, the message is
/// shorter than an echo header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("buffer too short for the frame")]
pub struct TooShort;

/// The addresses of a frame the stack sends: Ethernet, then IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addressing {
    /// Ethernet source (ours).
    pub src_mac: EthernetAddress,
    /// Ethernet destination.
    pub dst_mac: EthernetAddress,
    /// IPv6 source (ours).
    pub src: Ipv6Addr,
    /// IPv6 destination.
    pub dst: Ipv6Addr,
}

/// Write the Ethernet and IPv6 headers of a frame carrying `msg_len` bytes of ICMPv6 at the
/// start of `frame` (at least [`eth::HEADER_LEN`] + [`HEADER_LEN`] bytes).
fn write_headers(frame: &mut [u8], a: &Addressing, hop_limit: u8, msg_len: usize) {
    eth::write_header(frame, a.src_mac, a.dst_mac, EthernetProtocol::Ipv6);
    let repr = Ipv6Repr {
        src_addr: a.src,
        dst_addr: a.dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: msg_len,
        hop_limit,
    };
    let ip = &mut frame[eth::HEADER_LEN..eth::HEADER_LEN + HEADER_LEN];
    repr.emit(&mut Ipv6Packet::new_unchecked(ip));
}

/// Write at the start of `buf` the Ethernet frame of a neighbour advertisement for
/// `target` with `flags`, carrying our Ethernet address (`a.src_mac`) in a target
/// link-layer address option, hop limit 255 (RFC 4861 sections 4.4 and 7.2.4). Returns
/// its length, [`ADVERT_FRAME_LEN`].
pub fn write_advert(
    buf: &mut [u8],
    a: &Addressing,
    flags: NdiscNeighborFlags,
    target: Ipv6Addr,
) -> Result<usize, TooShort> {
    let frame = buf.get_mut(..ADVERT_FRAME_LEN).ok_or(TooShort)?;
    write_headers(frame, a, ND_HOP_LIMIT, ADVERT_LEN);
    let msg = &mut frame[eth::HEADER_LEN + HEADER_LEN..];
    let repr = NdiscRepr::NeighborAdvert {
        flags,
        target_addr: target,
        lladdr: Some(RawHardwareAddress::from(a.src_mac)),
    };
    let mut p = Icmpv6Packet::new_unchecked(&mut msg[..]);
    repr.emit(&mut p);
    p.set_checksum(0);
    let c = icmpv6_checksum(a.src, a.dst, msg);
    Icmpv6Packet::new_unchecked(msg).set_checksum(c);
    Ok(ADVERT_FRAME_LEN)
}

/// Turn the Ethernet frame at the start of `frame`, an echo request whose ICMPv6 message is
/// `msg_len` bytes, into its echo reply in place (RFC 4443 section 4.2: identifier,
/// sequence number and data unchanged), addressed by `a`, with hop limit `hop_limit`.
/// Returns the reply frame's length (Ethernet padding after the request is not part of it).
pub fn echo_reply_in_place(
    frame: &mut [u8],
    a: &Addressing,
    hop_limit: u8,
    msg_len: usize,
) -> Result<usize, TooShort> {
    if msg_len < ECHO_HEADER_LEN {
        return Err(TooShort);
    }
    let len = (eth::HEADER_LEN + HEADER_LEN)
        .checked_add(msg_len)
        .ok_or(TooShort)?;
    let frame = frame.get_mut(..len).ok_or(TooShort)?;
    let msg = &mut frame[eth::HEADER_LEN + HEADER_LEN..];
    // The setters below touch the first four bytes only.
    let mut p = Icmpv6Packet::new_unchecked(&mut msg[..]);
    p.set_msg_type(Icmpv6Message::EchoReply);
    p.set_msg_code(0);
    p.set_checksum(0);
    let c = icmpv6_checksum(a.src, a.dst, msg);
    Icmpv6Packet::new_unchecked(msg).set_checksum(c);
    write_headers(frame, a, hop_limit, msg_len);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solicited_node_and_multicast_mac_follow_the_rfcs() {
        // RFC 4291's example: 4037::01:800:200E:8C6C → FF02::1:FF0E:8C6C.
        let a: Ipv6Addr = "4037::1:800:200e:8c6c".parse().unwrap();
        assert_eq!(
            solicited_node(a),
            "ff02::1:ff0e:8c6c".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            multicast_mac(solicited_node(a)),
            EthernetAddress([0x33, 0x33, 0xff, 0x0e, 0x8c, 0x6c])
        );
        assert_eq!(
            multicast_mac(ALL_NODES),
            EthernetAddress([0x33, 0x33, 0, 0, 0, 1])
        );
        assert!(is_solicited_node(solicited_node(a)));
        assert!(!is_solicited_node(ALL_NODES) && !is_solicited_node(a));
        assert!(is_multicast_mac(multicast_mac(ALL_NODES)));
        assert!(!is_multicast_mac(EthernetAddress::BROADCAST));
    }

    #[test]
    fn a_header_is_refused_for_its_length_or_version() {
        let mut p = vec![0u8; HEADER_LEN + 8 + 6]; // 6 bytes of padding
        let repr = Ipv6Repr {
            src_addr: "fe80::1".parse().unwrap(),
            dst_addr: ALL_NODES,
            next_header: IpProtocol::Icmpv6,
            payload_len: 8,
            hop_limit: 255,
        };
        repr.emit(&mut Ipv6Packet::new_unchecked(&mut p[..]));
        assert_eq!(parse(&p), Ok(repr));
        assert_eq!(parse(&p[..HEADER_LEN - 1]), Err(Ipv6Error::Runt));
        assert_eq!(parse(&p[..HEADER_LEN + 7]), Err(Ipv6Error::BadLength));
        p[0] = 0x40;
        assert_eq!(parse(&p), Err(Ipv6Error::BadVersion));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused_without_a_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120)) {
            if let Ok(h) = parse(&bytes) {
                proptest::prop_assert!(HEADER_LEN + h.payload_len <= bytes.len());
            }
            let mut b = bytes.clone();
            let a = Addressing {
                src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8::2".parse().unwrap(),
            };
            let n = b.len().saturating_sub(eth::HEADER_LEN + HEADER_LEN);
            let _ = echo_reply_in_place(&mut b, &a, 64, n);
            let _ = write_advert(&mut b, &a, NdiscNeighborFlags::OVERRIDE, a.src);
        }
    }
}
