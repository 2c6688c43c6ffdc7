//! IPv4 headers: checks on receive and emission on send, with smoltcp's `Ipv4Packet`
//! (a checked view) and `Ipv4Repr` (the emitter).
//!
//! smoltcp's `Ipv4Repr::parse` refuses fragments unless its own reassembly is compiled in,
//! so on receive we use the checked packet view's accessors directly; on send we emit with
//! `Ipv4Repr` and then set identification, flags and fragment offset through the view.

use std::net::Ipv4Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{EthernetAddress, IpProtocol, Ipv4Packet, Ipv4Repr};

use crate::buf::BufIdx;
use crate::checksum;

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = smoltcp::wire::IPV4_HEADER_LEN;

/// The largest IPv4 datagram (header included).
pub const MAX_DATAGRAM: usize = 65_535;

/// Whether `a` and `b` lie in one subnet of `prefix` bits (0: every address; 32 or more:
/// only the same address).
pub fn same_subnet(a: Ipv4Addr, b: Ipv4Addr, prefix: u8) -> bool {
    let mask = match prefix {
        0 => 0,
        p if p >= 32 => u32::MAX,
        p => u32::MAX << (32 - p),
    };
    (u32::from(a) ^ u32::from(b)) & mask == 0
}

/// The fields of a received IPv4 header the stack uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Header {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol of the payload.
    pub proto: IpProtocol,
    /// Identification.
    pub ident: u16,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in bytes.
    pub frag_offset: usize,
    /// Time to live.
    pub ttl: u8,
    /// Header length in bytes (options included).
    pub header_len: usize,
    /// Total length in bytes (header included); the frame may be longer (padding).
    pub total_len: usize,
}

impl Ipv4Header {
    /// Whether this packet is a fragment (of a datagram cut in several).
    pub fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }

    /// Length of the payload carried by this packet.
    pub fn payload_len(&self) -> usize {
        self.total_len - self.header_len
    }
}

/// Why an IPv4 header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ipv4Error {
    /// Shorter than a minimal header.
    #[error("packet shorter than an IPv4 header")]
    Runt,
    /// Version field is not 4.
    #[error("IP version is not 4")]
    BadVersion,
    /// IHL below 5, or total length below the IHL or beyond the frame.
    #[error("IPv4 header or total length inconsistent with the frame")]
    BadLength,
    /// Header checksum wrong.
    #[error("IPv4 header checksum wrong")]
    BadChecksum,
}

/// Check and read the IPv4 header at the start of `packet` (an Ethernet payload, possibly
/// padded). Options are skipped by the header length; they are not interpreted.
///
/// The checks are smoltcp's `check_len` ones (minimal header, IHL at least 5, header within
/// the total length, total length within the packet), and the header checksum is verified
/// over the whole header, options included.
#[inline]
pub fn parse(packet: &[u8]) -> Result<Ipv4Header, Ipv4Error> {
    parse_with(packet, true)
}

/// As [`parse`] without verifying the header checksum: the length checks only. For a party
/// that must find a packet's fields but is not the one to judge its header (a driver
/// completing a transport checksum the kernel left to offload).
#[inline]
pub fn parse_unverified(packet: &[u8]) -> Result<Ipv4Header, Ipv4Error> {
    parse_with(packet, false)
}

#[inline(always)]
fn parse_with(packet: &[u8], verify: bool) -> Result<Ipv4Header, Ipv4Error> {
    // A view over a fixed-size array: the field accessors need no bounds checks.
    let Some(fixed) = packet.first_chunk::<HEADER_LEN>() else {
        return Err(Ipv4Error::Runt);
    };
    let p = Ipv4Packet::new_unchecked(fixed);
    if p.version() != 4 {
        return Err(Ipv4Error::BadVersion);
    }
    let header_len = p.header_len() as usize;
    let total_len = p.total_len() as usize;
    if header_len < HEADER_LEN || header_len > total_len || total_len > packet.len() {
        return Err(Ipv4Error::BadLength);
    }
    // Now HEADER_LEN <= header_len <= total_len <= packet.len().
    if verify && !checksum::ipv4_header_ok(fixed, &packet[HEADER_LEN..header_len]) {
        return Err(Ipv4Error::BadChecksum);
    }
    Ok(Ipv4Header {
        src: p.src_addr(),
        dst: p.dst_addr(),
        proto: p.next_header(),
        ident: p.ident(),
        more_frags: p.more_frags(),
        frag_offset: p.frag_offset() as usize,
        ttl: p.hop_limit(),
        header_len,
        total_len,
    })
}

/// The protocol and fragment offset (in bytes) of the IPv4 header at the start of `packet`,
/// read with no check but its length; `None` if shorter than a header. For a party that
/// sees only a frame's first bytes and does not judge it (a sink counting the datagrams
/// sent to it, a tracer telling first fragments from the others).
#[inline]
pub fn peek(packet: &[u8]) -> Option<(IpProtocol, usize)> {
    let p = Ipv4Packet::new_unchecked(packet.first_chunk::<HEADER_LEN>()?);
    Some((p.next_header(), p.frag_offset() as usize))
}

/// Sets the identification of an IPv4 header without options and fills in its header
/// checksum (over the 20 bytes; the IHL is not read): a template's header patched in place.
pub fn set_ident(header: &mut [u8; HEADER_LEN], ident: u16) {
    let mut p = Ipv4Packet::new_unchecked(&mut header[..]);
    p.set_ident(ident);
    p.set_checksum(0);
    let c = checksum::checksum(&header[..]);
    Ipv4Packet::new_unchecked(&mut header[..]).set_checksum(c);
}

/// What to put in an emitted IPv4 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmitHeader {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub proto: IpProtocol,
    /// Time to live.
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// Don't fragment: set on TCP's segments for path-MTU discovery (RFC 1191; a router
    /// that cannot forward one whole says so instead of cutting it), never on datagrams
    /// the stack fragments itself.
    pub dont_frag: bool,
}

/// Write a 20-byte IPv4 header (no options) at the start of `buf` for a packet carrying
/// `payload_len` bytes at fragment offset `frag_offset` (bytes, a multiple of 8), with the
/// header checksum filled in.
pub fn write_header(
    buf: &mut [u8],
    h: &EmitHeader,
    payload_len: usize,
    frag_offset: usize,
    more_frags: bool,
) {
    debug_assert!(frag_offset % 8 == 0 && HEADER_LEN + payload_len <= MAX_DATAGRAM);
    let repr = Ipv4Repr {
        src_addr: h.src,
        dst_addr: h.dst,
        next_header: h.proto,
        payload_len,
        hop_limit: h.ttl,
    };
    let mut p = Ipv4Packet::new_unchecked(&mut buf[..HEADER_LEN]);
    repr.emit(&mut p, &ChecksumCapabilities::ignored());
    p.set_ident(h.ident);
    p.clear_flags();
    p.set_dont_frag(h.dont_frag);
    p.set_more_frags(more_frags);
    p.set_frag_offset(frag_offset as u16);
    p.fill_checksum();
}

/// A received IPv4 datagram, complete: its payload is the chain at `head` (each buffer
/// narrowed to its share of the payload), `len` bytes in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// First buffer of the payload chain.
    pub head: BufIdx,
    /// Payload bytes in the chain.
    pub len: usize,
    /// Number of buffers in the chain.
    pub bufs: usize,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub proto: IpProtocol,
    /// Identification.
    pub ident: u16,
    /// Time to live (of the last fragment).
    pub ttl: u8,
    /// Ethernet source of the (last) frame, used to answer without an ARP round trip.
    pub src_mac: EthernetAddress,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(more_frags: bool, frag_offset: usize) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        let emit = EmitHeader {
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(10, 0, 0, 1),
            proto: IpProtocol::Udp,
            ttl: 64,
            ident: 9,
            dont_frag: false,
        };
        write_header(&mut h, &emit, 0, frag_offset, more_frags);
        h
    }

    #[test]
    fn the_unverified_parse_skips_only_the_checksum() {
        let mut h = header(false, 0);
        assert!(parse(&h).is_ok());
        h[10] ^= 0xff;
        assert_eq!(parse(&h), Err(Ipv4Error::BadChecksum));
        let u = parse_unverified(&h).unwrap();
        assert_eq!(
            (u.proto, u.ident, u.total_len),
            (IpProtocol::Udp, 9, HEADER_LEN)
        );
        h[0] = 0x44; // IHL 4
        assert_eq!(parse_unverified(&h), Err(Ipv4Error::BadLength));
        assert_eq!(parse_unverified(&h[..19]), Err(Ipv4Error::Runt));
    }

    #[test]
    fn peek_reads_protocol_and_offset_and_set_ident_keeps_the_header_valid() {
        let mut h = header(true, 1480);
        assert_eq!(peek(&h), Some((IpProtocol::Udp, 1480)));
        assert_eq!(peek(&h[..19]), None);
        set_ident(&mut h, 0xbeef);
        let p = parse(&h).unwrap();
        assert_eq!((p.ident, p.frag_offset, p.more_frags), (0xbeef, 1480, true));
    }
}
