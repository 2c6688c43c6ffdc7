//! Ethernet II: reading and writing the 14-byte header with smoltcp's `EthernetFrame`.

use smoltcp::wire::{EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr};

/// Length of an Ethernet II header.
pub const HEADER_LEN: usize = smoltcp::wire::ETHERNET_HEADER_LEN;

/// The header fields of a received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthHeader {
    /// Destination address.
    pub dst: EthernetAddress,
    /// Source address.
    pub src: EthernetAddress,
    /// EtherType.
    pub ethertype: EthernetProtocol,
}

/// Parse the header of `frame`; `None` if it is shorter than a header (a runt).
#[inline]
pub fn parse(frame: &[u8]) -> Option<EthHeader> {
    let hdr = frame.first_chunk::<HEADER_LEN>()?;
    // The EtherType through smoltcp's view; the two addresses are copied straight out of the
    // array (destination first, then source, as in smoltcp's field layout), because
    // smoltcp's address accessors go through `Address::from_bytes`, which is not inlinable
    // across crates and would cost two calls per frame.
    let f = EthernetFrame::new_unchecked(hdr);
    let (dst, rest) = hdr.split_first_chunk::<6>()?;
    let (src, _) = rest.split_first_chunk::<6>()?;
    Some(EthHeader {
        dst: EthernetAddress(*dst),
        src: EthernetAddress(*src),
        ethertype: f.ethertype(),
    })
}

/// The EtherType of `frame`; `None` if it is shorter than a header (a runt). What a driver
/// sorts frames by, without reading the addresses.
#[inline]
pub fn ethertype(frame: &[u8]) -> Option<EthernetProtocol> {
    Some(EthernetFrame::new_unchecked(frame.first_chunk::<HEADER_LEN>()?).ethertype())
}

/// Write an Ethernet header at the start of `buf` (at least [`HEADER_LEN`] bytes).
#[inline]
pub fn write_header(
    buf: &mut [u8],
    src: EthernetAddress,
    dst: EthernetAddress,
    ethertype: EthernetProtocol,
) {
    let repr = EthernetRepr {
        src_addr: src,
        dst_addr: dst,
        ethertype,
    };
    repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..HEADER_LEN]));
}

/// Overwrite only the destination address of the header at the start of `buf`.
pub fn set_dst(buf: &mut [u8], dst: EthernetAddress) {
    EthernetFrame::new_unchecked(&mut buf[..HEADER_LEN]).set_dst_addr(dst);
}
