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
    let f = EthernetFrame::new_checked(frame).ok()?;
    let r = EthernetRepr::parse(&f).ok()?;
    Some(EthHeader {
        dst: r.dst_addr,
        src: r.src_addr,
        ethertype: r.ethertype,
    })
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
