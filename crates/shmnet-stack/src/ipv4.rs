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
///
/// The checks are smoltcp's `check_len` ones (minimal header, IHL at least 5, header within
/// the total length, total length within the packet), and the header checksum is verified
/// over the whole header, options included.
#[inline]
pub fn parse(packet: &[u8]) -> Result<Ipv4Header, Ipv4Error> {
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
    if !checksum_ok(fixed, &packet[HEADER_LEN..header_len]) {
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

/// Whether the RFC 1071 sum of a header (its fixed part and its options, whose length is a
/// multiple of four as the IHL counts 32-bit words) is all ones, as it is when the checksum
/// field is right.
///
/// The header is summed 32 bits at a time, in native byte order, into a 64-bit integer, and
/// the end-around-carry fold is replaced by a remainder: a 32-bit word `hi·2¹⁶ + lo` is
/// congruent to `hi + lo` modulo 0xffff, so the integer sum is congruent to the sum of the
/// 16-bit words, and the folded ones' complement sum of a nonzero integer sum is 0xffff exactly
/// when that sum is a multiple of 0xffff. Byte order does not matter (RFC 1071 section 2:
/// swapping the bytes of every word multiplies the sum by 2⁸ modulo 0xffff, which is
/// invertible, so multiples of 0xffff stay multiples).
#[inline]
fn checksum_ok(fixed: &[u8; HEADER_LEN], options: &[u8]) -> bool {
    let word = |i: usize| {
        u64::from(u32::from_ne_bytes([
            fixed[i],
            fixed[i + 1],
            fixed[i + 2],
            fixed[i + 3],
        ]))
    };
    let mut acc = word(0) + word(4) + word(8) + word(12) + word(16);
    if !options.is_empty() {
        acc += options_sum(options);
    }
    acc != 0 && acc % 0xffff == 0
}

/// The sum of the 32-bit words (native order) of a header's options.
#[cold]
#[inline(never)]
fn options_sum(options: &[u8]) -> u64 {
    options
        .chunks_exact(4)
        .map(|w| u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
        .sum()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast header checksum check agrees with smoltcp's on valid headers, on every
    /// single-bit corruption of them, and on random bytes, options included.
    #[test]
    fn checksum_ok_agrees_with_smoltcp() {
        let mut rng = fastrand::Rng::with_seed(7);
        for round in 0..20_000 {
            let ihl = if round % 4 == 0 { rng.usize(5..=15) } else { 5 };
            let hl = ihl * 4;
            let mut h: Vec<u8> = (0..hl).map(|_| rng.u8(..)).collect();
            h[0] = 0x40 | ihl as u8;
            if round % 2 == 0 {
                let mut p = Ipv4Packet::new_unchecked(&mut h[..]);
                p.fill_checksum();
            }
            let check = |h: &[u8]| {
                let fixed: &[u8; HEADER_LEN] = h[..HEADER_LEN].try_into().unwrap();
                let ours = checksum_ok(fixed, &h[HEADER_LEN..]);
                // What smoltcp's `verify_checksum` computes, over the whole slice (a flipped
                // bit may change the IHL, which `verify_checksum` would read).
                let theirs = smoltcp::wire::checksum::data(h) == !0;
                assert_eq!(ours, theirs, "{h:02x?}");
            };
            check(&h);
            if round % 16 == 0 {
                for bit in 0..hl * 8 {
                    h[bit / 8] ^= 1 << (bit % 8);
                    check(&h);
                    h[bit / 8] ^= 1 << (bit % 8);
                }
            }
        }
    }
}
