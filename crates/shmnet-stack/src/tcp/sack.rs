//! The sender's SACK scoreboard (RFC 2018, RFC 6675): which ranges above `SND.UNA` the
//! peer reported holding, and from that the holes to resend and the bytes still in the
//! network.
//!
//! Fixed-size (four ranges, 33 bytes of connection state): a block that does not fit drops
//! the lowest range, which the cumulative ACK reaches first. Losing scoreboard information
//! only makes recovery resend more, never less correct.

use super::seq::Seq;

/// Ranges the peer holds, sorted by sequence number from `SND.UNA`, disjoint and not
/// touching (touching ranges are merged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scoreboard {
    ranges: [(Seq, Seq); 4],
    n: u8,
}

impl Scoreboard {
    fn held(&self) -> &[(Seq, Seq)] {
        &self.ranges[..usize::from(self.n)]
    }

    /// Forget everything (after a retransmission timeout the peer may have discarded what
    /// it SACKed: RFC 2018 section 8).
    pub fn clear(&mut self) {
        self.n = 0;
    }

    /// Record the blocks of one ACK; blocks outside `una..=max` (what is in flight) or
    /// empty are ignored, as RFC 2018 allows. Returns how many were taken.
    pub fn take(&mut self, blocks: &[Option<(Seq, Seq)>], una: Seq, max: Seq) -> u32 {
        let mut taken = 0;
        for &(s, e) in blocks.iter().flatten() {
            if !(s.lt(e) && s.ge(una) && e.le(max)) {
                continue;
            }
            taken += 1;
            let mut runs = [(Seq(0), Seq(0)); 5];
            let n = usize::from(self.n);
            runs[..n].copy_from_slice(self.held());
            runs[n] = (s, e);
            let runs = &mut runs[..=n];
            runs.sort_by_key(|r| r.0.since(una));
            let mut merged = 0;
            for i in 0..runs.len() {
                if merged > 0 && runs[i].0.le(runs[merged - 1].1) {
                    runs[merged - 1].1 = runs[merged - 1].1.max(runs[i].1);
                } else {
                    runs[merged] = runs[i];
                    merged += 1;
                }
            }
            let skip = merged.saturating_sub(self.ranges.len());
            let keep = merged - skip;
            self.ranges[..keep].copy_from_slice(&runs[skip..merged]);
            self.n = keep as u8;
        }
        taken
    }

    /// The cumulative ACK moved to `una`: forget what lies at or below it.
    pub fn trim(&mut self, una: Seq) {
        let mut k = 0;
        for i in 0..usize::from(self.n) {
            let (s, e) = self.ranges[i];
            if e.gt(una) {
                self.ranges[k] = (s.max(una), e);
                k += 1;
            }
        }
        self.n = k as u8;
    }

    /// Bytes the peer holds above the cumulative ACK.
    pub fn bytes(&self) -> u32 {
        self.held().iter().map(|r| r.1.since(r.0)).sum()
    }

    /// The first hole at or after `from` below the highest range: what recovery resends
    /// next.
    pub fn next_hole(&self, from: Seq) -> Option<(Seq, Seq)> {
        let mut cur = from;
        for &(s, e) in self.held() {
            if e.le(cur) {
                continue;
            }
            if s.gt(cur) {
                return Some((cur, s));
            }
            cur = e;
        }
        None
    }

    /// Bytes in the holes at or after `from` below the highest range: RFC 6675 counts them
    /// lost (not in the network) until resent.
    pub fn lost_after(&self, from: Seq) -> u32 {
        let mut lost = 0;
        let mut cur = from;
        for &(s, e) in self.held() {
            if e.le(cur) {
                continue;
            }
            if s.gt(cur) {
                lost += s.since(cur);
            }
            cur = e;
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: u32, e: u32) -> Option<(Seq, Seq)> {
        Some((Seq(s), Seq(e)))
    }

    #[test]
    fn blocks_merge_and_holes_are_found_in_order() {
        let mut sb = Scoreboard::default();
        let (una, max) = (Seq(1000), Seq(10_000));
        assert_eq!(sb.take(&[b(3000, 4000), b(6000, 7000), None], una, max), 2);
        // Touching and overlapping blocks merge.
        sb.take(&[b(4000, 4500), b(6500, 8000)], una, max);
        assert_eq!(sb.bytes(), 1500 + 2000);
        assert_eq!(sb.next_hole(una), Some((Seq(1000), Seq(3000))));
        assert_eq!(sb.next_hole(Seq(3000)), Some((Seq(4500), Seq(6000))));
        assert_eq!(sb.next_hole(Seq(6000)), None);
        assert_eq!(sb.lost_after(una), 2000 + 1500);
        sb.trim(Seq(3500));
        assert_eq!(sb.bytes(), 1000 + 2000);
        sb.trim(Seq(9000));
        assert_eq!(sb.bytes(), 0);
    }

    #[test]
    fn blocks_outside_the_flight_are_ignored_and_a_full_board_drops_its_lowest() {
        let mut sb = Scoreboard::default();
        let (una, max) = (Seq(u32::MAX - 100), Seq(20_000));
        // Across the wrap, below SND.UNA, beyond SND.MAX, empty: only the first is taken.
        let taken = sb.take(
            &[
                Some((Seq(u32::MAX - 50), Seq(10))),
                b(5, 4),
                Some((Seq(u32::MAX - 200), Seq(u32::MAX - 150))),
            ],
            una,
            max,
        );
        assert_eq!(taken, 1);
        assert_eq!(sb.bytes(), 61, "u32::MAX - 50 to 10, across the wrap");
        for k in 1..=5 {
            sb.take(&[b(k * 1000, k * 1000 + 10)], una, max);
        }
        assert_eq!(sb.held().len(), 4);
        assert_eq!(sb.held()[0], (Seq(2000), Seq(2010)), "the lowest went");
    }
}
