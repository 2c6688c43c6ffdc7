//! UDP: header fields through smoltcp's `UdpPacket` view, and the Internet checksum over a
//! buffer chain ([`crate::checksum::Sum`] over each buffer, combined).

use std::net::Ipv4Addr;

use smoltcp::wire::{IpProtocol, UdpPacket};

use crate::buf::{BufIdx, BufferPool, chain_segments};
use crate::checksum::{Sum, pseudo_v4};

/// Length of a UDP header.
pub const HEADER_LEN: usize = smoltcp::wire::UDP_HEADER_LEN;

/// Where the checksum field lies in a UDP header.
pub const CHECKSUM_OFFSET: usize = 6;

/// The fields of a UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Length field (header included).
    pub len: u16,
    /// Checksum field (0: none).
    pub checksum: u16,
}

/// Read the header at the start of `bytes`; `None` if shorter than a header.
#[inline]
pub fn parse_header(bytes: &[u8]) -> Option<UdpHeader> {
    let hdr = bytes.get(..HEADER_LEN)?;
    // The header-field accessors read only the first 8 bytes, which we have.
    let p = UdpPacket::new_unchecked(hdr);
    Some(UdpHeader {
        src_port: p.src_port(),
        dst_port: p.dst_port(),
        len: p.len(),
        checksum: p.checksum(),
    })
}

/// Write a header into `buf[..8]`.
#[inline]
pub fn write_header(buf: &mut [u8], h: &UdpHeader) {
    let mut p = UdpPacket::new_unchecked(&mut buf[..HEADER_LEN]);
    p.set_src_port(h.src_port);
    p.set_dst_port(h.dst_port);
    p.set_len(h.len);
    p.set_checksum(h.checksum);
}

/// The sum of the first `len` bytes of the chain at `head` (at most `bufs` buffers).
pub fn chain_sum<P: BufferPool + ?Sized>(pool: &P, head: BufIdx, len: usize, bufs: usize) -> Sum {
    let mut sum = Sum::default();
    let mut left = len;
    for (_, seg) in chain_segments(pool, head, bufs) {
        if left == 0 {
            break;
        }
        let k = seg.len().min(left);
        sum.add(&seg[..k]);
        left -= k;
    }
    sum
}

/// The pseudo-header sum for UDP over IPv4.
pub fn pseudo(src: Ipv4Addr, dst: Ipv4Addr, udp_len: usize) -> u16 {
    pseudo_v4(src, dst, IpProtocol::Udp, udp_len)
}

/// Whether a received datagram of `udp_len` bytes (header included) in the chain at `head`
/// carries a correct checksum. A zero checksum field means "none" and is accepted by the
/// caller before this is called.
pub fn verify_chain<P: BufferPool + ?Sized>(
    pool: &P,
    head: BufIdx,
    bufs: usize,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    udp_len: usize,
) -> bool {
    let mut sum = chain_sum(pool, head, udp_len, bufs);
    sum.add_word(pseudo(src, dst, udp_len));
    sum.value() == 0xffff
}

/// The checksum to put in a header for `header` (with its checksum field zero) and `data`.
/// A computed zero is sent as 0xffff (RFC 768).
pub fn tx_checksum(src: Ipv4Addr, dst: Ipv4Addr, header: &[u8], data: &[u8]) -> u16 {
    let mut sum = Sum::default();
    sum.add(header);
    sum.add(data);
    finish_tx_checksum(sum, pseudo(src, dst, header.len() + data.len()))
}

/// The checksum to put in a header, from `sum` (of the header with its checksum field zero
/// and the data) and the pseudo-header sum. A computed zero is sent as 0xffff (RFC 768).
pub fn finish_tx_checksum(mut sum: Sum, pseudo: u16) -> u16 {
    sum.add_word(pseudo);
    match !sum.value() {
        0 => 0xffff,
        c => c,
    }
}
