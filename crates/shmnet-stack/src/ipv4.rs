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

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = smoltcp::wire::IPV4_HEADER_LEN;

/// The largest IPv4 datagram (header included).
pub const MAX_DATAGRAM: usize = 65_535;

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
#[inline]
pub fn parse(packet: &[u8]) -> Result<Ipv4Header, Ipv4Error> {
    if packet.len() < HEADER_LEN {
        return Err(Ipv4Error::Runt);
    }
    let p = Ipv4Packet::new_unchecked(packet);
    if p.version() != 4 {
        return Err(Ipv4Error::BadVersion);
    }
    p.check_len().map_err(|_| Ipv4Error::BadLength)?;
    // check_len guarantees: HEADER_LEN <= header_len <= total_len <= packet.len().
    if !p.verify_checksum() {
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
        header_len: p.header_len() as usize,
        total_len: p.total_len() as usize,
    })
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
}

/// Write a 20-byte IPv4 header (no options) at the start of `buf` for a packet carrying
/// `payload_len` bytes at fragment offset `frag_offset` (bytes, a multiple of 8), with the
/// header checksum filled in. Don't-fragment is never set.
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
