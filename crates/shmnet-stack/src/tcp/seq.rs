//! Sequence-number arithmetic (RFC 9293 section 3.4): 32-bit numbers compared modulo 2³².
//!
//! `a` is *before* `b` when `b - a`, taken modulo 2³², is in `1 ..= 2³¹ - 1`. The comparison
//! is meaningful only between numbers less than 2³¹ apart, which TCP's windows guarantee
//! (a window is at most 2³⁰ bytes, RFC 7323). [`Seq`] deliberately does not implement
//! `PartialOrd`: the relation is not transitive over the whole space, so it must not be
//! used to sort.

use core::fmt;

/// A TCP sequence number.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Seq(pub u32);

impl Seq {
    /// `self + n`, wrapping.
    #[inline]
    #[must_use]
    pub const fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping.
    #[inline]
    #[must_use]
    pub const fn sub(self, n: u32) -> Seq {
        Seq(self.0.wrapping_sub(n))
    }

    /// The signed distance `self - other`: positive when `self` is after `other`.
    #[inline]
    pub const fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// The distance from `earlier` to `self`, for a caller that knows `earlier` is not
    /// after `self` (0 when it is).
    #[inline]
    pub const fn since(self, earlier: Seq) -> u32 {
        let d = self.diff(earlier);
        if d < 0 { 0 } else { d as u32 }
    }

    /// `self` is strictly before `other`.
    #[inline]
    pub const fn lt(self, other: Seq) -> bool {
        self.diff(other) < 0
    }

    /// `self` is before or equal to `other`.
    #[inline]
    pub const fn le(self, other: Seq) -> bool {
        self.diff(other) <= 0
    }

    /// `self` is strictly after `other`.
    #[inline]
    pub const fn gt(self, other: Seq) -> bool {
        self.diff(other) > 0
    }

    /// `self` is after or equal to `other`.
    #[inline]
    pub const fn ge(self, other: Seq) -> bool {
        self.diff(other) >= 0
    }

    /// The later of the two.
    #[inline]
    #[must_use]
    pub const fn max(self, other: Seq) -> Seq {
        if self.lt(other) { other } else { self }
    }

    /// The earlier of the two.
    #[inline]
    #[must_use]
    pub const fn min(self, other: Seq) -> Seq {
        if self.gt(other) { other } else { self }
    }

    /// `lo <= self < hi` in sequence space (an empty range when `hi <= lo`).
    #[inline]
    pub const fn in_range(self, lo: Seq, hi: Seq) -> bool {
        self.ge(lo) && self.lt(hi)
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.0)
    }
}

impl From<smoltcp::wire::TcpSeqNumber> for Seq {
    fn from(s: smoltcp::wire::TcpSeqNumber) -> Seq {
        Seq(s.0 as u32)
    }
}

impl From<Seq> for smoltcp::wire::TcpSeqNumber {
    fn from(s: Seq) -> smoltcp::wire::TcpSeqNumber {
        smoltcp::wire::TcpSeqNumber(s.0 as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn comparisons_wrap_around_zero() {
        let a = Seq(u32::MAX - 5);
        let b = a.add(10);
        assert_eq!(b, Seq(4));
        assert!(a.lt(b) && b.gt(a) && a.le(a) && a.ge(a));
        assert_eq!(b.diff(a), 10);
        assert_eq!(a.diff(b), -10);
        assert_eq!(b.since(a), 10);
        assert_eq!(a.since(b), 0);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
        assert!(Seq(2).in_range(a, b) && !b.in_range(a, b) && a.in_range(a, b));
    }

    proptest! {
        #[test]
        fn order_agrees_with_integers_within_half_the_space(
            base in any::<u32>(),
            x in 0u32..(1 << 30),
            y in 0u32..(1 << 30),
        ) {
            let (a, b) = (Seq(base).add(x), Seq(base).add(y));
            prop_assert_eq!(a.lt(b), x < y);
            prop_assert_eq!(a.le(b), x <= y);
            prop_assert_eq!(a.gt(b), x > y);
            prop_assert_eq!(a.diff(b) as i64, x as i64 - y as i64);
            prop_assert_eq!(a.max(b), Seq(base).add(x.max(y)));
            prop_assert_eq!(a.add(y).sub(y), a);
            prop_assert_eq!(b.since(a), y.saturating_sub(x));
        }

        #[test]
        fn exactly_one_of_before_equal_after_holds(a in any::<u32>(), b in any::<u32>()) {
            let (a, b) = (Seq(a), Seq(b));
            let n = [a.lt(b), a == b, a.gt(b)].iter().filter(|&&t| t).count();
            // The antipode (b = a + 2^31) is "before" in both directions: the one place the
            // relation is ambiguous, and TCP never compares across it.
            if b.0.wrapping_sub(a.0) == 1 << 31 {
                prop_assert!(a.lt(b) && b.lt(a));
            } else {
                prop_assert_eq!(n, 1);
            }
        }
    }
}
