//! Cutting a TCP super-frame into wire-size frames: what a NIC's segmentation offload would
//! have done before the frame reached us.
//!
//! A packet socket sees the kernel's skbs as they are, and a Linux sender on the other end
//! of a veth (or a GRO-merging NIC under us) hands over TCP segments of up to 64 KiB: one
//! frame, one IPv4 header, many MSS' worth of payload. Our buffers hold one wire frame each,
//! so the driver cuts such a frame into frames of at most the MTU: the headers are copied
//! and patched (IPv4 total length, identification and header checksum; TCP sequence number,
//! flags — FIN and PSH on the last piece only, CWR on the first only — and checksum over
//! the piece). The frames that come out are what the wire would have carried.

use shmnet_stack::wire::{EthernetProtocol, IpProtocol, Sum, checksum, eth, ipv4};

/// Where a TCP header's flags and checksum lie.
const TCP_SEQ: usize = 4;
const TCP_FLAGS: usize = 13;
const TCP_CHECKSUM: usize = 16;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;

/// The layout of a TCP/IPv4 frame worth cutting: header lengths and the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Super {
    ip_hlen: usize,
    tcp_hlen: usize,
    /// Payload bytes (after both headers, within the IPv4 total length).
    payload: usize,
}

impl Super {
    /// The layout of `frame` if it is an unfragmented TCP/IPv4 frame (headers in bounds),
    /// else `None`.
    pub fn of(frame: &[u8]) -> Option<Super> {
        if eth::ethertype(frame)? != EthernetProtocol::Ipv4 {
            return None;
        }
        let ip = &frame[eth::HEADER_LEN..];
        let h = ipv4::parse_unverified(ip).ok()?;
        if h.is_fragment() || h.proto != IpProtocol::Tcp {
            return None;
        }
        let tcp = ip.get(h.header_len..h.total_len)?;
        let tcp_hlen = usize::from(*tcp.get(12)? >> 4) * 4;
        if tcp_hlen < 20 || tcp_hlen > tcp.len() {
            return None;
        }
        Some(Super {
            ip_hlen: h.header_len,
            tcp_hlen,
            payload: tcp.len() - tcp_hlen,
        })
    }

    /// Bytes of headers each piece carries.
    pub fn headers(&self) -> usize {
        eth::HEADER_LEN + self.ip_hlen + self.tcp_hlen
    }

    /// The payload per piece so that a piece is at most `max_frame` bytes (0 when even the
    /// headers do not fit).
    pub fn piece(&self, max_frame: usize) -> usize {
        max_frame.saturating_sub(self.headers())
    }

    /// How many pieces of at most `max_frame` bytes.
    pub fn pieces(&self, max_frame: usize) -> usize {
        match self.piece(max_frame) {
            0 => 0,
            p => self.payload.div_ceil(p).max(1),
        }
    }

    /// Write piece `i` of `frame` (cut to frames of at most `max_frame` bytes) into `dst`;
    /// returns its length, or `None` if `dst` is too small or there is no such piece.
    pub fn write_piece(
        &self,
        frame: &[u8],
        max_frame: usize,
        i: usize,
        dst: &mut [u8],
    ) -> Option<usize> {
        let per = self.piece(max_frame);
        let n = self.pieces(max_frame);
        if per == 0 || i >= n {
            return None;
        }
        let start = i * per;
        let len = per.min(self.payload - start);
        let hdrs = self.headers();
        let total = hdrs + len;
        let dst = dst.get_mut(..total)?;
        dst[..hdrs].copy_from_slice(frame.get(..hdrs)?);
        dst[hdrs..].copy_from_slice(frame.get(hdrs + start..hdrs + start + len)?);
        let ip_at = eth::HEADER_LEN;
        let tcp_at = ip_at + self.ip_hlen;
        // IPv4: total length, identification (one per piece, as TSO numbers them), checksum.
        let ip_len = (self.ip_hlen + self.tcp_hlen + len) as u16;
        dst[ip_at + 2..ip_at + 4].copy_from_slice(&ip_len.to_be_bytes());
        let ident = u16::from_be_bytes([dst[ip_at + 4], dst[ip_at + 5]]).wrapping_add(i as u16);
        dst[ip_at + 4..ip_at + 6].copy_from_slice(&ident.to_be_bytes());
        dst[ip_at + 10..ip_at + 12].fill(0);
        let c = checksum::checksum(&dst[ip_at..tcp_at]);
        dst[ip_at + 10..ip_at + 12].copy_from_slice(&c.to_be_bytes());
        // TCP: sequence number, flags, checksum.
        let seq = u32::from_be_bytes(
            dst[tcp_at + TCP_SEQ..tcp_at + TCP_SEQ + 4]
                .try_into()
                .ok()?,
        )
        .wrapping_add(start as u32);
        dst[tcp_at + TCP_SEQ..tcp_at + TCP_SEQ + 4].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < n {
            dst[tcp_at + TCP_FLAGS] &= !(FIN | PSH);
        }
        if i > 0 {
            dst[tcp_at + TCP_FLAGS] &= !CWR;
        }
        dst[tcp_at + TCP_CHECKSUM..tcp_at + TCP_CHECKSUM + 2].fill(0);
        let src = std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&dst[ip_at + 12..ip_at + 16]).ok()?);
        let dstip =
            std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&dst[ip_at + 16..ip_at + 20]).ok()?);
        let tcp_len = self.tcp_hlen + len;
        let mut sum = Sum::default();
        sum.add_word(checksum::pseudo_v4(src, dstip, IpProtocol::Tcp, tcp_len));
        sum.add(&dst[tcp_at..tcp_at + tcp_len]);
        let c = sum.checksum();
        dst[tcp_at + TCP_CHECKSUM..tcp_at + TCP_CHECKSUM + 2].copy_from_slice(&c.to_be_bytes());
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

    fn super_frame(payload: &[u8], fin: bool) -> Vec<u8> {
        let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
            .tcp(40000, 7, 1_000_000, 65535)
            .ack(77)
            .psh()
            .cwr()
            .options(&[etherparse::TcpOptionElement::Timestamp(1, 2)])
            .unwrap();
        if fin {
            b = b.fin();
        }
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    #[test]
    fn a_super_frame_is_cut_into_valid_wire_frames_carrying_the_same_stream() {
        let payload: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
        let frame = super_frame(&payload, true);
        let s = Super::of(&frame).unwrap();
        let max = 1514;
        let n = s.pieces(max);
        assert_eq!(n, payload.len().div_ceil(1514 - s.headers()));
        let mut stream = Vec::new();
        let mut buf = vec![0u8; 2048];
        for i in 0..n {
            let len = s.write_piece(&frame, max, i, &mut buf).unwrap();
            assert!(len <= max);
            let p = SlicedPacket::from_ethernet(&buf[..len]).unwrap();
            let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
                panic!("not IPv4")
            };
            assert_eq!(
                ip.header().header_checksum(),
                ip.header().to_header().calc_header_checksum()
            );
            let Some(TransportSlice::Tcp(t)) = p.transport else {
                panic!("not TCP")
            };
            let want = t
                .to_header()
                .calc_checksum_ipv4(&ip.header().to_header(), t.payload())
                .unwrap();
            assert_eq!(t.checksum(), want, "piece {i}");
            assert_eq!(t.sequence_number(), 1_000_000 + stream.len() as u32);
            assert_eq!(t.fin(), i + 1 == n);
            assert_eq!(t.psh(), i + 1 == n);
            assert_eq!(t.cwr(), i == 0);
            stream.extend_from_slice(t.payload());
        }
        assert_eq!(stream, payload);
        assert!(s.write_piece(&frame, max, n, &mut buf).is_none());
    }

    #[test]
    fn anything_but_unfragmented_tcp_is_left_alone() {
        let mut out = Vec::new();
        PacketBuilder::ethernet2([2; 6], [1; 6])
            .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
            .udp(1, 2)
            .write(&mut out, &[0; 3000])
            .unwrap();
        assert!(Super::of(&out).is_none());
        assert!(Super::of(&out[..20]).is_none());
    }
}
