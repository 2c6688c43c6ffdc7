//! ICMP: echo replies and port-unreachable errors, built with smoltcp's `Icmpv4Repr` /
//! `Icmpv4Packet`, the token bucket that rate-limits the errors, and the reading of a
//! router's "fragmentation needed" (RFC 1191 path-MTU discovery).

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    Icmpv4DstUnreachable, Icmpv4Message, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Packet,
};
use std::net::Ipv4Addr;

use crate::Instant;

/// Length of the ICMP header of echo and destination-unreachable messages.
pub const HEADER_LEN: usize = 8;

/// A token bucket: up to `burst` messages at once, then one per `interval` nanoseconds.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    tokens: u32,
    burst: u32,
    interval: u64,
    last: Instant,
}

impl RateLimiter {
    /// A full bucket of `burst` tokens refilled one per `interval` nanoseconds.
    pub fn new(burst: u32, interval: u64) -> RateLimiter {
        RateLimiter {
            tokens: burst,
            burst,
            interval: interval.max(1),
            last: Instant::ZERO,
        }
    }

    /// Take a token if there is one at `now`.
    pub fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.nanos().saturating_sub(self.last.nanos());
        let refill = elapsed / self.interval;
        if refill > 0 {
            self.tokens = (self.tokens as u64 + refill).min(self.burst as u64) as u32;
            self.last = Instant::from_nanos(self.last.nanos() + refill * self.interval);
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }
}

/// The header fields of a received ICMP message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpHeader {
    /// Message type.
    pub msg_type: Icmpv4Message,
    /// Code.
    pub code: u8,
    /// Echo identifier (meaningful for echo messages).
    pub ident: u16,
    /// Echo sequence number (meaningful for echo messages).
    pub seq_no: u16,
}

/// Read the 8-byte header at the start of `bytes`; `None` if shorter.
#[inline]
pub fn parse_header(bytes: &[u8]) -> Option<IcmpHeader> {
    let p = Icmpv4Packet::new_checked(bytes.get(..HEADER_LEN)?).ok()?;
    Some(IcmpHeader {
        msg_type: p.msg_type(),
        code: p.msg_code(),
        ident: p.echo_ident(),
        seq_no: p.echo_seq_no(),
    })
}

/// An echo reply answering (`ident`, `seq_no`) with `data`, checksum filled.
pub fn echo_reply(ident: u16, seq_no: u16, data: &[u8]) -> Vec<u8> {
    let repr = Icmpv4Repr::EchoReply {
        ident,
        seq_no,
        data,
    };
    let mut out = vec![0; repr.buffer_len()];
    repr.emit(
        &mut Icmpv4Packet::new_unchecked(&mut out[..]),
        &ChecksumCapabilities::default(),
    );
    out
}

/// What a "fragmentation needed and DF set" message (type 3, code 4) says of a TCP
/// segment we sent: the path's MTU toward its destination, and the segment it quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragNeeded {
    /// The next hop's MTU (RFC 1191), or — from a router older than RFC 1191, which sends
    /// 0 — the largest plateau below the quoted datagram's length.
    pub mtu: u16,
    /// The quoted datagram's source address (ours, if the segment was ours).
    pub src: Ipv4Addr,
    /// Its destination (the peer).
    pub dst: Ipv4Addr,
    /// The quoted TCP header's source port (our local port).
    pub src_port: u16,
    /// Its destination port (the peer's).
    pub dst_port: u16,
    /// Its sequence number (RFC 5927: checked against what is in flight).
    pub seq: u32,
}

/// RFC 1191's plateau table (section 7): the MTUs to try below a datagram's length when a
/// router does not say the next hop's.
const PLATEAUS: [u16; 10] = [
    32_000, 17_914, 8_166, 4_352, 2_002, 1_492, 1_006, 508, 296, 68,
];

/// What a destination-unreachable message (type 3) quotes of a TCP segment or UDP
/// datagram: its code, the word after the checksum (the next hop's MTU in a
/// "fragmentation needed"), and the quoted packet's addresses, ports and (TCP) sequence
/// number. `None` for any other message, or when the quote is shorter than the IP header
/// and the 8 bytes of transport header it must carry (RFC 792): the message is then
/// useless.
struct Quote {
    code: u8,
    said: u16,
    total_len: u16,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    seq: u32,
}

fn quote(bytes: &[u8], proto: IpProtocol) -> Option<Quote> {
    let p = Icmpv4Packet::new_checked(bytes).ok()?;
    if p.msg_type() != Icmpv4Message::DstUnreachable {
        return None;
    }
    // The quote is cut short of the datagram's total length, so smoltcp's checked view
    // (which wants all of it) does not apply: the lengths it reads are checked here.
    let quoted = bytes.get(HEADER_LEN..)?;
    let ihl = usize::from(quoted.first()? & 0x0f) * 4;
    if ihl < 20 {
        return None;
    }
    let tcp = quoted.get(ihl..)?.get(..8)?;
    let ip = Ipv4Packet::new_unchecked(quoted);
    if ip.version() != 4 || ip.next_header() != proto || ip.frag_offset() != 0 {
        return None;
    }
    Some(Quote {
        code: p.msg_code(),
        said: u16::from_be_bytes([bytes[6], bytes[7]]),
        total_len: ip.total_len(),
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
    })
}

/// Reads a "fragmentation needed" message `bytes` (the ICMP header and what it quotes) about
/// a TCP segment. `None` for anything else, or when the quote is too short to name the
/// segment.
pub fn frag_needed(bytes: &[u8]) -> Option<FragNeeded> {
    let q = quote(bytes, IpProtocol::Tcp)
        .filter(|q| q.code == u8::from(Icmpv4DstUnreachable::FragRequired))?;
    let mtu = if q.said != 0 {
        q.said
    } else {
        PLATEAUS.into_iter().find(|&m| m < q.total_len)?
    };
    Some(FragNeeded {
        mtu,
        src: q.src,
        dst: q.dst,
        src_port: q.src_port,
        dst_port: q.dst_port,
        seq: q.seq,
    })
}

/// How far a destination-unreachable message says a TCP segment of ours got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// Its network (codes 0, 6, 9, 11: `ENETUNREACH` on Linux).
    Net,
    /// Its host, or the way there is administratively closed (codes 1, 2, 7, 8, 10, 12–15:
    /// `EHOSTUNREACH`; Linux says `ENOPROTOOPT`, `EHOSTDOWN` and `ENONET` for 2, 7 and 8).
    Host,
    /// The port: something there refused it (code 3, a firewall's `REJECT`:
    /// `ECONNREFUSED`).
    Port,
}

/// A destination-unreachable message about a TCP segment we sent, other than
/// "fragmentation needed" (code 4) and "source route failed" (5), which say nothing of
/// whether the peer can be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpUnreachable {
    /// What is unreachable.
    pub what: Unreachable,
    /// The quoted datagram's source address (ours, if the segment was ours).
    pub src: Ipv4Addr,
    /// Its destination (the peer).
    pub dst: Ipv4Addr,
    /// The quoted TCP header's source port (our local port).
    pub src_port: u16,
    /// Its destination port (the peer's).
    pub dst_port: u16,
    /// Its sequence number (checked against what the connection sent).
    pub seq: u32,
}

/// Reads a destination-unreachable message `bytes` about a TCP segment (see
/// [`TcpUnreachable`]). `None` for anything else.
pub fn tcp_unreachable(bytes: &[u8]) -> Option<TcpUnreachable> {
    let q = quote(bytes, IpProtocol::Tcp)?;
    let what = match q.code {
        3 => Unreachable::Port,
        0 | 6 | 9 | 11 => Unreachable::Net,
        1 | 2 | 7 | 8 | 10 | 12..=15 => Unreachable::Host,
        _ => return None,
    };
    Some(TcpUnreachable {
        what,
        src: q.src,
        dst: q.dst,
        src_port: q.src_port,
        dst_port: q.dst_port,
        seq: q.seq,
    })
}

/// A destination-unreachable message about a UDP datagram we sent, with a code Linux
/// reports to a connected UDP socket without `IP_RECVERR` (its "hard" errors: 2, 3 and 6–15
/// but 11 and 12). The soft ones (a router's net or host unreachable, 0 and 1, and 11 and
/// 12, "for this type of service") and "fragmentation needed" (4) reach no socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpUnreachable {
    /// What is unreachable.
    pub what: Unreachable,
    /// The quoted datagram's source address (ours, if it was ours).
    pub src: Ipv4Addr,
    /// Its destination (the peer).
    pub dst: Ipv4Addr,
    /// The quoted UDP header's source port (our local port).
    pub src_port: u16,
    /// Its destination port (the peer's).
    pub dst_port: u16,
}

/// Reads a destination-unreachable message `bytes` about a UDP datagram (see
/// [`UdpUnreachable`]). `None` for anything else, and for the soft codes.
pub fn udp_unreachable(bytes: &[u8]) -> Option<UdpUnreachable> {
    let q = quote(bytes, IpProtocol::Udp)?;
    let what = match q.code {
        3 => Unreachable::Port,
        6 | 9 => Unreachable::Net,
        2 | 7 | 8 | 10 | 13..=15 => Unreachable::Host,
        _ => return None,
    };
    Some(UdpUnreachable {
        what,
        src: q.src,
        dst: q.dst,
        src_port: q.src_port,
        dst_port: q.dst_port,
    })
}

/// A port-unreachable message quoting `quoted` (the offending IP header and the first
/// 8 bytes of its payload), checksum filled.
pub fn port_unreachable(quoted: &[u8]) -> Vec<u8> {
    let mut out = vec![0; HEADER_LEN + quoted.len()];
    let mut p = Icmpv4Packet::new_unchecked(&mut out[..]);
    p.set_msg_type(Icmpv4Message::DstUnreachable);
    p.set_msg_code(Icmpv4DstUnreachable::PortUnreachable.into());
    p.data_mut().copy_from_slice(quoted);
    p.fill_checksum();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "fragmentation needed" saying `mtu`, quoting a TCP segment of `total` bytes
    /// 10.0.0.1:4000 → 10.0.0.2:80 with sequence number 77, `tcp_bytes` of its header.
    fn message(mtu: u16, total: u16, proto: IpProtocol, tcp_bytes: usize) -> Vec<u8> {
        let mut quoted = vec![0u8; 20 + tcp_bytes];
        let mut ip = Ipv4Packet::new_unchecked(&mut quoted[..20]);
        ip.set_version(4);
        ip.set_header_len(20);
        ip.set_total_len(total);
        ip.set_next_header(proto);
        ip.set_src_addr(Ipv4Addr::new(10, 0, 0, 1));
        ip.set_dst_addr(Ipv4Addr::new(10, 0, 0, 2));
        let tcp = [0x0f, 0xa0, 0x00, 0x50, 0, 0, 0, 77];
        let n = tcp_bytes.min(8);
        quoted[20..20 + n].copy_from_slice(&tcp[..n]);
        let mut out = vec![0u8; HEADER_LEN + quoted.len()];
        let mut p = Icmpv4Packet::new_unchecked(&mut out[..]);
        p.set_msg_type(Icmpv4Message::DstUnreachable);
        p.set_msg_code(Icmpv4DstUnreachable::FragRequired.into());
        p.data_mut().copy_from_slice(&quoted);
        out[6..8].copy_from_slice(&mtu.to_be_bytes());
        out
    }

    #[test]
    fn a_routers_frag_needed_names_the_mtu_and_the_quoted_segment() {
        let f = frag_needed(&message(1280, 1500, IpProtocol::Tcp, 8)).unwrap();
        assert_eq!(
            f,
            FragNeeded {
                mtu: 1280,
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                src_port: 4000,
                dst_port: 80,
                seq: 77,
            }
        );
    }

    #[test]
    fn a_router_that_says_no_mtu_gets_the_plateau_below_the_datagram() {
        assert_eq!(
            frag_needed(&message(0, 1500, IpProtocol::Tcp, 8))
                .unwrap()
                .mtu,
            1492
        );
        assert_eq!(
            frag_needed(&message(0, 1492, IpProtocol::Tcp, 8))
                .unwrap()
                .mtu,
            1006
        );
        assert_eq!(frag_needed(&message(0, 68, IpProtocol::Tcp, 8)), None);
    }

    #[test]
    fn a_short_quote_another_protocol_or_another_code_is_not_read() {
        assert_eq!(frag_needed(&message(1280, 1500, IpProtocol::Tcp, 7)), None);
        assert_eq!(frag_needed(&message(1280, 1500, IpProtocol::Udp, 8)), None);
        let mut port = message(1280, 1500, IpProtocol::Tcp, 8);
        port[1] = Icmpv4DstUnreachable::PortUnreachable.into();
        assert_eq!(frag_needed(&port), None);
    }

    #[test]
    fn a_udp_datagrams_hard_errors_are_read_and_soft_ones_are_not() {
        let with_code = |proto, code: u8, bytes| {
            let mut m = message(0, 100, proto, bytes);
            m[1] = code;
            m
        };
        let port = udp_unreachable(&with_code(IpProtocol::Udp, 3, 8)).unwrap();
        assert_eq!(
            port,
            UdpUnreachable {
                what: Unreachable::Port,
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                src_port: 4000,
                dst_port: 80,
            }
        );
        for (code, what) in [
            (2, Some(Unreachable::Host)),
            (6, Some(Unreachable::Net)),
            (9, Some(Unreachable::Net)),
            (10, Some(Unreachable::Host)),
            (13, Some(Unreachable::Host)),
            (0, None),
            (1, None),
            (4, None),
            (5, None),
            (11, None),
            (12, None),
            (16, None),
        ] {
            let got = udp_unreachable(&with_code(IpProtocol::Udp, code, 8)).map(|u| u.what);
            assert_eq!(got, what, "code {code}");
        }
        assert_eq!(udp_unreachable(&with_code(IpProtocol::Tcp, 3, 8)), None);
        assert_eq!(udp_unreachable(&with_code(IpProtocol::Udp, 3, 7)), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_read_without_a_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            let _ = frag_needed(&bytes);
            let _ = udp_unreachable(&bytes);
        }
    }
}
