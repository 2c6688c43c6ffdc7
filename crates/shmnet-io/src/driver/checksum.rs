//! The Internet checksum's arithmetic, shared by the drivers that write or complete
//! checksums (softnic patches its template per message; af_packet completes checksums the
//! kernel left to an offload that a veth never performs).

/// Adds the 16-bit big-endian words of `bytes` to `acc` (one's complement, not yet folded;
/// an odd last byte is padded with zero).
pub(crate) fn sum16(mut acc: u64, bytes: &[u8]) -> u64 {
    let mut it = bytes.chunks_exact(2);
    for w in &mut it {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = it.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a sum to 16 bits (not yet complemented).
pub(crate) fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_1071_example_sums_to_its_value() {
        // RFC 1071, section 3: 0x0001 0xf203 0xf4f5 0xf6f7 sums to 0xddf2 (folded).
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum16(0, &bytes)), 0xddf2);
        assert_eq!(fold(sum16(0, &[0xab])), 0xab00);
    }
}
