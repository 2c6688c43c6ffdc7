//! Building outgoing IPv4 packets as Ethernet frames, fragmenting to the MTU.
//!
//! The payload is given as a gather list of slices (e.g. a UDP header and the user's data,
//! wherever the user's bytes lie); each frame gets its own pool buffer holding the Ethernet
//! header, a 20-byte IPv4 header and its share of the payload, copied in once. Fragment
//! payloads are multiples of 8 bytes except the last. On request the payload is summed
//! (RFC 1071) as copied, from the copy, so a checksum over it matches what is sent even if
//! the source bytes change meanwhile.

use smoltcp::wire::{EthernetAddress, EthernetProtocol};

use crate::buf::{BufIdx, BufferPool, set_window};
use crate::checksum::Sum;
use crate::{eth, ipv4};

/// Why frames could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The pool ran out of buffers; nothing was kept.
    #[error("no free buffer")]
    NoBuffers,
    /// The payload does not fit in one IPv4 datagram.
    #[error("payload exceeds the IPv4 maximum")]
    TooBig,
    /// Buffers or MTU too small to carry even 8 bytes of payload per fragment.
    #[error("MTU or buffer capacity too small")]
    MtuTooSmall,
}

/// The largest IP packet (header included) one frame of this pool can carry at this MTU.
pub fn max_ip_packet(mtu: usize, capacity: usize) -> usize {
    mtu.min(capacity.saturating_sub(eth::HEADER_LEN))
        .min(ipv4::MAX_DATAGRAM)
}

/// Build the frames of one datagram into `out` (appended in order). On error every buffer
/// allocated here has been freed again and `out` is as it was.
#[allow(clippy::too_many_arguments)]
pub fn build<P: BufferPool + ?Sized>(
    pool: &mut P,
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    hdr: &ipv4::EmitHeader,
    parts: &[&[u8]],
    mtu: usize,
    out: &mut Vec<BufIdx>,
) -> Result<usize, BuildError> {
    build_gather(pool, src_mac, dst_mac, hdr, &[], parts, mtu, out, None)
}

/// As [`build`], for the payload `prefix` followed by `parts`; when `sum` is given, the
/// payload bytes are added to it from the frames they were copied into.
#[allow(clippy::too_many_arguments)]
pub fn build_gather<P: BufferPool + ?Sized>(
    pool: &mut P,
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    hdr: &ipv4::EmitHeader,
    prefix: &[u8],
    parts: &[&[u8]],
    mtu: usize,
    out: &mut Vec<BufIdx>,
    mut sum: Option<&mut Sum>,
) -> Result<usize, BuildError> {
    let total = parts
        .iter()
        .try_fold(prefix.len(), |t, p| t.checked_add(p.len()))
        .filter(|&t| t <= ipv4::MAX_DATAGRAM - ipv4::HEADER_LEN)
        .ok_or(BuildError::TooBig)?;
    let max_pkt = max_ip_packet(mtu, pool.capacity());
    let chunk = if ipv4::HEADER_LEN + total <= max_pkt {
        total.max(1)
    } else {
        (max_pkt.saturating_sub(ipv4::HEADER_LEN)) & !7
    };
    if chunk == 0 {
        return Err(BuildError::MtuTooSmall);
    }
    let start = out.len();
    let mut pos = 0; // payload position
    // The rest of the piece being copied, and the pieces after it.
    let mut piece: &[u8] = prefix;
    let mut rest = parts.iter();
    loop {
        let n = chunk.min(total - pos);
        let Some(idx) = pool.alloc() else {
            for b in out.drain(start..) {
                pool.free(b);
            }
            return Err(BuildError::NoBuffers);
        };
        let more = pos + n < total;
        let frame_len = eth::HEADER_LEN + ipv4::HEADER_LEN + n;
        let data = &mut pool.data_mut(idx)[..frame_len];
        eth::write_header(data, src_mac, dst_mac, EthernetProtocol::Ipv4);
        ipv4::write_header(&mut data[eth::HEADER_LEN..], hdr, n, pos, more);
        // Gather-copy n bytes of payload (the pieces hold `total - pos >= n` bytes).
        let payload = &mut data[eth::HEADER_LEN + ipv4::HEADER_LEN..];
        let mut dst = &mut payload[..];
        while !dst.is_empty() {
            if piece.is_empty() {
                match rest.next() {
                    Some(p) => piece = p,
                    None => break, // unreachable: the pieces hold `total` bytes
                }
                continue;
            }
            let k = piece.len().min(dst.len());
            dst[..k].copy_from_slice(&piece[..k]);
            dst = &mut dst[k..];
            piece = &piece[k..];
        }
        if let Some(sum) = sum.as_deref_mut() {
            sum.add(payload);
        }
        set_window(pool, idx, 0, frame_len);
        out.push(idx);
        pos += n;
        if !more {
            break;
        }
    }
    Ok(out.len() - start)
}
