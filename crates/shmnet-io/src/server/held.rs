//! Which chain heads an application holds: one bit per buffer of the data window.
//!
//! The server records every chain it delivers until the application gives it back, so that
//! a return of a chain the application was never given is refused, and the chains of an
//! application that dies are freed. A bitmap sized to the data window makes both an O(1)
//! bit operation with no hashing and no allocation after attach.

/// A set of buffer indices below a fixed bound.
pub(crate) struct Held {
    bits: Vec<u64>,
    total: u32,
    count: usize,
}

impl Held {
    /// An empty set for indices `0..total`.
    pub(crate) fn new(total: u32) -> Self {
        Self {
            bits: vec![0; (total as usize).div_ceil(64)],
            total,
            count: 0,
        }
    }

    fn slot(&mut self, idx: u32) -> Option<(&mut u64, u64)> {
        if idx >= self.total {
            return None;
        }
        let word = self.bits.get_mut(idx as usize / 64)?;
        Some((word, 1u64 << (idx % 64)))
    }

    /// Adds `idx`; `false` if it was already there or is out of range.
    pub(crate) fn insert(&mut self, idx: u32) -> bool {
        let Some((word, bit)) = self.slot(idx) else {
            return false;
        };
        let fresh = *word & bit == 0;
        *word |= bit;
        self.count += usize::from(fresh);
        fresh
    }

    /// Removes `idx`; `false` if it was not there.
    pub(crate) fn remove(&mut self, idx: u32) -> bool {
        let Some((word, bit)) = self.slot(idx) else {
            return false;
        };
        let was = *word & bit != 0;
        *word &= !bit;
        self.count -= usize::from(was);
        was
    }

    /// How many indices are held.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Empties the set, returning what it held in increasing order.
    pub(crate) fn take_all(&mut self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.count);
        for (w, word) in self.bits.iter_mut().enumerate() {
            let mut v = std::mem::take(word);
            while v != 0 {
                let b = v.trailing_zeros();
                out.push(w as u32 * 64 + b);
                v &= v - 1;
            }
        }
        self.count = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Held;
    use std::collections::BTreeSet;

    #[test]
    fn behaves_like_a_set_and_refuses_out_of_range() {
        let mut h = Held::new(130);
        let mut model = BTreeSet::new();
        let mut rng = 0x9e37_79b9_u32;
        for _ in 0..10_000 {
            rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let idx = (rng >> 8) % 140;
            if rng & 1 == 0 {
                assert_eq!(h.insert(idx), idx < 130 && model.insert(idx));
            } else {
                assert_eq!(h.remove(idx), model.remove(&idx));
            }
            assert_eq!(h.len(), model.len());
        }
        assert_eq!(h.take_all(), model.into_iter().collect::<Vec<_>>());
        assert_eq!(h.len(), 0);
        assert!(!h.remove(3));
    }
}
