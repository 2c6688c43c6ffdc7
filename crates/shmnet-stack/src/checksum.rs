//! The Internet checksum (RFC 1071): the one implementation in shmnet. The stack sums UDP
//! datagrams over buffer chains with it, the drivers patch and complete checksums with it
//! (softnic's per-message template, af_packet's offloaded checksums).
//!
//! [`Sum`] accumulates the ones' complement sum of a byte sequence given in pieces of any
//! length and alignment (each piece summed with smoltcp's `checksum::data`); [`checksum`] is
//! the complemented sum of one slice, as it goes in a header field; [`pseudo_v4`] and
//! [`pseudo_v6`] the pseudo-headers' sums. The receive path's IPv4 header check has a
//! faster form of the same arithmetic (32-bit words and a remainder, `ipv4_header_ok`),
//! tested against it.

use std::net::{Ipv4Addr, Ipv6Addr};

use smoltcp::wire::checksum as sm;
use smoltcp::wire::{IPV4_HEADER_LEN, IpProtocol};

/// The longest piece `checksum::data` sums without overflowing its 32-bit accumulator
/// (`2^32 / 0xffff` words, rounded down to a whole kilobyte).
const MAX_PIECE: usize = 128 * 1024;

/// Accumulates the RFC 1071 sum of a byte sequence given in pieces of any length.
///
/// Invariant: `acc <= 0x1fffe` after every call (the sum is folded as it goes), and `odd`
/// says whether the bytes added so far are an odd number, so the next piece starts at an
/// odd position and pairs its bytes the other way round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sum {
    acc: u32,
    odd: bool,
}

impl Sum {
    /// The sum of `bytes`.
    #[inline]
    pub fn of(bytes: &[u8]) -> Sum {
        let mut s = Sum::default();
        s.add(bytes);
        s
    }

    /// Add the next piece.
    #[inline(always)]
    pub fn add(&mut self, bytes: &[u8]) {
        if bytes.len() > MAX_PIECE {
            return self.add_long(bytes);
        }
        self.add_piece(bytes);
    }

    /// [`Sum::add`] for a piece too long to sum at once.
    #[cold]
    #[inline(never)]
    fn add_long(&mut self, bytes: &[u8]) {
        // MAX_PIECE is even: every chunk but the last keeps the parity.
        for c in bytes.chunks(MAX_PIECE) {
            self.add_piece(c);
        }
    }

    /// Adds a piece of at most [`MAX_PIECE`] bytes. Not recursive with [`Sum::add`], so
    /// that `add` stays small enough to be inlined into the loops that call it.
    #[inline(always)]
    fn add_piece(&mut self, bytes: &[u8]) {
        let s = sm::data(bytes);
        // A piece starting at an odd position pairs its bytes the other way round.
        let s = if self.odd { s.swap_bytes() } else { s };
        self.acc += s as u32;
        self.acc = (self.acc & 0xffff) + (self.acc >> 16);
        self.odd ^= bytes.len() % 2 == 1;
    }

    /// Add a 16-bit word computed elsewhere (a pseudo-header sum, a field patched in) as if
    /// it stood at an even position; the parity of the bytes added so far is unchanged.
    #[inline]
    pub fn add_word(&mut self, w: u16) {
        self.acc += w as u32;
        self.acc = (self.acc & 0xffff) + (self.acc >> 16);
    }

    /// The folded sum (not complemented).
    #[inline]
    pub fn value(&self) -> u16 {
        sm::combine(&[self.acc as u16, (self.acc >> 16) as u16])
    }

    /// The checksum to put in a header field: the complemented sum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        !self.value()
    }
}

/// The checksum of `bytes` (its field zero, or not included): what goes in a header.
#[inline]
pub fn checksum(bytes: &[u8]) -> u16 {
    Sum::of(bytes).checksum()
}

/// Whether `bytes`, a header or packet that includes its own checksum field, sums to all
/// ones (its checksum is right).
#[inline]
pub fn verify(bytes: &[u8]) -> bool {
    Sum::of(bytes).value() == 0xffff
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
pub(crate) fn ipv4_header_ok(fixed: &[u8; IPV4_HEADER_LEN], options: &[u8]) -> bool {
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

/// The sum of the IPv4 pseudo-header (RFC 768, RFC 793) for `len` bytes of protocol `proto`
/// from `src` to `dst`.
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: IpProtocol, len: usize) -> u16 {
    sm::pseudo_header_v4(&src, &dst, proto, len as u32)
}

/// The sum of the IPv6 pseudo-header (RFC 8200 section 8.1) for `len` bytes of upper-layer
/// protocol `proto` from `src` to `dst` (`len` below 65,536: no jumbograms).
#[inline]
pub fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, proto: IpProtocol, len: usize) -> u16 {
    sm::pseudo_header_v6(&src, &dst, proto, len as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain RFC 1071 sum, 64-bit and folded at the end: the reference.
    fn reference(bytes: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        let mut it = bytes.chunks_exact(2);
        for w in &mut it {
            acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = it.remainder() {
            acc += u64::from(*last) << 8;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn the_rfc_1071_example_sums_to_its_value() {
        // RFC 1071, section 3: 0x0001 0xf203 0xf4f5 0xf6f7 sums to 0xddf2 (folded).
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Sum::of(&bytes).value(), 0xddf2);
        assert_eq!(checksum(&bytes), !0xddf2);
        assert_eq!(Sum::of(&[0xab]).value(), 0xab00);
    }

    #[test]
    fn pieces_at_odd_offsets_sum_like_the_whole() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for cut in [1, 3, 8, 499, 500, 999] {
            let mut s = Sum::default();
            s.add(&bytes[..cut]);
            s.add(&bytes[cut..]);
            assert_eq!(s.value(), Sum::of(&bytes).value(), "cut {cut}");
            assert_eq!(s.value(), reference(&bytes), "cut {cut}");
        }
    }

    #[test]
    fn long_pieces_and_all_ones_sum_like_the_reference() {
        let ones = vec![0xffu8; 3 * MAX_PIECE + 5];
        assert_eq!(Sum::of(&ones).value(), reference(&ones));
        let mut rng = fastrand::Rng::with_seed(3);
        let bytes: Vec<u8> = (0..MAX_PIECE * 2 + 333).map(|_| rng.u8(..)).collect();
        assert_eq!(Sum::of(&bytes).value(), reference(&bytes));
    }

    #[test]
    fn a_filled_checksum_verifies_and_a_word_adds_like_its_bytes() {
        let mut h = [
            0x45u8, 0, 0, 48, 0x12, 0x34, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1,
        ];
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(verify(&h));
        h[3] ^= 1;
        assert!(!verify(&h));
        let mut s = Sum::of(&[1, 2, 3]);
        s.add_word(0x0405);
        let mut t = Sum::of(&[1, 2, 3]);
        t.add(&[0]); // the odd byte's partner
        t.add(&[4, 5]);
        assert_eq!(s.value(), t.value());
    }

    #[test]
    fn the_pseudo_header_sums_its_fields() {
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
        let bytes = [10, 0, 0, 2, 10, 0, 0, 1, 0, 17, 0x01, 0x2c];
        assert_eq!(pseudo_v4(src, dst, IpProtocol::Udp, 300), reference(&bytes));
    }

    /// The fast header checksum check agrees with smoltcp's on valid headers, on every
    /// single-bit corruption of them, and on random bytes, options included.
    #[test]
    fn the_fast_ipv4_header_check_agrees_with_smoltcp() {
        let mut rng = fastrand::Rng::with_seed(7);
        for round in 0..20_000 {
            let ihl = if round % 4 == 0 { rng.usize(5..=15) } else { 5 };
            let hl = ihl * 4;
            let mut h: Vec<u8> = (0..hl).map(|_| rng.u8(..)).collect();
            h[0] = 0x40 | ihl as u8;
            if round % 2 == 0 {
                let mut p = smoltcp::wire::Ipv4Packet::new_unchecked(&mut h[..]);
                p.fill_checksum();
            }
            let check = |h: &[u8]| {
                let fixed: &[u8; IPV4_HEADER_LEN] = h[..IPV4_HEADER_LEN].try_into().unwrap();
                let ours = ipv4_header_ok(fixed, &h[IPV4_HEADER_LEN..]);
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
