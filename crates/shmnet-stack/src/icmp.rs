//! ICMP: echo replies and port-unreachable errors, built with smoltcp's `Icmpv4Repr` /
//! `Icmpv4Packet`, and the token bucket that rate-limits the errors.

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{Icmpv4DstUnreachable, Icmpv4Message, Icmpv4Packet, Icmpv4Repr};

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
