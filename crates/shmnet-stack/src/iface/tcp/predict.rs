//! Header prediction, the reading half (Van Jacobson's, as Linux's `tcp_rcv_established`
//! compares `pred_flags`): a segment of the shape nearly every segment of an established
//! connection has is read from fixed offsets instead of through smoltcp's option walk.
//!
//! The shape: only ACK set, or ACK and PSH; no reserved bit; a data offset of 5 words
//! (no options), or of 8 holding the timestamp option alone, in either of the two layouts
//! seen on every segment once timestamps are agreed — NOP, NOP, timestamps (Linux, the
//! BSDs: RFC 7323 appendix A), or timestamps, then the end of the list (smoltcp's emitter,
//! so this stack's own segments); both ports non-zero. For every header of that shape, [`predicted`] returns what
//! [`super::parse`] (smoltcp's `TcpRepr::parse`) returns — the tests below hold the two
//! equal on arbitrary headers — and for every other header it returns `None`, so the segment
//! goes the general way. Nothing is decided here about the connection: the segment is
//! processed exactly as if smoltcp had read it.
//!
//! Why not smoltcp alone: its `Repr::parse` walks the options and builds the SACK array for
//! every segment; with the option walk, the lookup and the checks around it, it was about a
//! third of the stack's 130 ns per received segment (`shmnet bench tcp`).

use crate::tcp::{SegIn, Seq};

/// The flags byte of a segment with only ACK set.
const ACK: u8 = 0x10;
/// ... and of one with ACK and PSH.
const ACK_PSH: u8 = 0x18;
/// The data-offset byte of a header without options (5 words, reserved bits clear).
const DOFF_BARE: u8 = 0x50;
/// The data-offset byte of a header with the aligned timestamp option (8 words).
const DOFF_TS: u8 = 0x80;
/// NOP, NOP, timestamps (kind 8, length 10): RFC 7323 appendix A's recommended layout.
const TS_LAYOUT: [u8; 4] = [1, 1, 8, 10];
/// The timestamp option's kind and length, first in the list.
const TS_FIRST: [u8; 2] = [8, 10];

/// Where the timestamps are in a header of 8 words with the timestamp option alone, if it
/// has one of the two layouts: NOP, NOP, TS; or TS, then the end of the list (smoltcp stops
/// reading there: what follows it is padding) or a NOP and then the end or a NOP.
fn timestamps_at(b: &[u8]) -> Option<usize> {
    if b[20..24] == TS_LAYOUT {
        Some(24)
    } else if b[20..22] == TS_FIRST && (b[30] == 0 || (b[30] == 1 && b[31] <= 1)) {
        Some(22)
    } else {
        None
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The segment in `bytes` (its TCP header and payload) if it has the predicted shape:
/// `(segment, source port, destination port, header length)`, as [`super::parse`] gives.
#[inline]
pub(super) fn predicted(bytes: &[u8]) -> Option<(SegIn, u16, u16, usize)> {
    if bytes.len() < 20 || !matches!(bytes[13], ACK | ACK_PSH) {
        return None;
    }
    let (hlen, ts) = match bytes[12] {
        DOFF_BARE => (20, None),
        DOFF_TS if bytes.len() >= 32 => {
            let at = timestamps_at(bytes)?;
            (32, Some((be32(bytes, at), be32(bytes, at + 4))))
        }
        _ => return None,
    };
    let (src, dst) = (be16(bytes, 0), be16(bytes, 2));
    if src == 0 || dst == 0 {
        return None;
    }
    let seg = SegIn {
        seq: Seq(be32(bytes, 4)),
        ack: Some(Seq(be32(bytes, 8))),
        wnd: be16(bytes, 14),
        ts,
        len: (bytes.len() - hlen) as u32,
        ..SegIn::default()
    };
    Some((seg, src, dst, hlen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A header of the predicted shape (or near it: each field may be knocked off it) and
    /// a payload.
    fn near_predicted() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<[u8; 32]>(),
            prop_oneof![Just(DOFF_BARE), Just(DOFF_TS), any::<u8>()],
            prop_oneof![Just(ACK), Just(ACK_PSH), any::<u8>()],
            prop_oneof![Just(TS_LAYOUT), Just([8, 10, 0, 0]), any::<[u8; 4]>()],
            prop_oneof![
                Just([0u8, 0]),
                Just([1, 0]),
                Just([1, 1]),
                Just([1, 8]),
                any::<[u8; 2]>()
            ],
            prop_oneof![Just(None), any::<u16>().prop_map(Some), Just(Some(0))],
            proptest::collection::vec(any::<u8>(), 0..64),
            0usize..40,
        )
            .prop_map(|(mut h, doff, flags, layout, tail, port, payload, cut)| {
                h[12] = doff;
                h[13] = flags;
                h[20..24].copy_from_slice(&layout);
                h[30..32].copy_from_slice(&tail);
                if let Some(p) = port {
                    h[0..2].copy_from_slice(&p.to_be_bytes());
                }
                let mut b = h.to_vec();
                if doff == DOFF_BARE {
                    b.truncate(20);
                }
                b.extend_from_slice(&payload);
                // Sometimes a header cut short.
                if cut < 8 {
                    b.truncate(cut * 4);
                }
                b
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Whatever the prediction reads, smoltcp reads the same.
        #[test]
        fn a_predicted_header_reads_as_smoltcp_reads_it(b in near_predicted()) {
            if let Some(p) = predicted(&b) {
                prop_assert_eq!(Some(p), super::super::parse(&b));
            }
        }

        /// Every header of the predicted shape is predicted (the fast way is not a rare one
        /// by accident).
        #[test]
        fn every_header_of_the_shape_is_predicted(
            fixed in any::<[u8; 20]>(),
            ts in any::<bool>(),
            linux in any::<bool>(),
            psh in any::<bool>(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut b = fixed.to_vec();
            b[12] = if ts { DOFF_TS } else { DOFF_BARE };
            b[13] = if psh { ACK_PSH } else { ACK };
            b[0] |= 1;
            b[2] |= 1;
            if ts && linux {
                b.extend_from_slice(&TS_LAYOUT);
                b.extend_from_slice(&[7; 8]);
            } else if ts {
                b.extend_from_slice(&TS_FIRST);
                b.extend_from_slice(&[7; 8]);
                b.extend_from_slice(&[0, 0]);
            }
            b.extend_from_slice(&payload);
            prop_assert!(predicted(&b).is_some());
            prop_assert_eq!(predicted(&b), super::super::parse(&b));
        }
    }
}
