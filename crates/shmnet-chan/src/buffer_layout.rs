//! Where a pool's free list starts: the order its buffers take in the pool's free array when
//! the pool is filled (created, or rebuilt by [`crate::ServerPools::reclaim_all`]).
//!
//! Seed 000's third rule: "network buffers should be laid out contiguously and allocated in
//! a LIFO manner, so as to minimize self-interference". The allocation order is the pool's
//! [`crate::AllocPolicy`]; this is the layout. With [`BufferLayout::Contiguous`] the free
//! array starts in index order, so the first buffers handed out (by any policy) are
//! neighbours in memory — a few consecutive 4 KiB pages, which a direct-mapped or low-way
//! cache holds without the buffers evicting one another. [`BufferLayout::Scattered`] is the
//! rule's counter-experiment: consecutive allocations from a fresh pool land far apart, on
//! different pages spread over the whole pool's data, as buffers do in a pool that has been
//! churned for a while.
//!
//! [`BufferLayout::order`] is the one place the order is computed; every filler of free
//! arrays (the window's creator, the heap-backed pools, `reclaim_all`) takes it from there.

/// How a pool's buffers are ordered in its free array when it is filled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BufferLayout {
    /// Index order: the first allocations are adjacent in memory (the seed's rule; default).
    #[default]
    Contiguous,
    /// Bit-reversal order through the pool: consecutive allocations far apart, every prefix
    /// spread evenly over the pool's data (see [`BufferLayout::order`]).
    Scattered,
}

/// A name that is not a layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown buffer layout {0:?}: use contiguous or scattered")]
pub struct UnknownLayout(pub String);

impl std::str::FromStr for BufferLayout {
    type Err = UnknownLayout;
    fn from_str(s: &str) -> Result<Self, UnknownLayout> {
        match s {
            "contiguous" => Ok(Self::Contiguous),
            "scattered" => Ok(Self::Scattered),
            _ => Err(UnknownLayout(s.to_string())),
        }
    }
}

impl std::fmt::Display for BufferLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Contiguous => "contiguous",
            Self::Scattered => "scattered",
        })
    }
}

#[cfg_attr(loom, allow(dead_code))]
impl BufferLayout {
    pub(crate) fn code(self) -> u32 {
        match self {
            Self::Contiguous => 0,
            Self::Scattered => 1,
        }
    }

    /// The layout a header's code names; `None` for a code no layout has (a header is
    /// untrusted input).
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        [Self::Contiguous, Self::Scattered]
            .into_iter()
            .find(|l| l.code() == code)
    }

    /// The buffers of a pool of `per_pool`, as offsets from the pool's first buffer, in the
    /// order its free array starts in: slot `i` holds the `i`-th item.
    ///
    /// Invariant: a permutation of `0..per_pool` — every buffer exactly once — for either
    /// layout and every `per_pool` (0 gives nothing).
    ///
    /// `Scattered` is the bit-reversal (van der Corput) order of `0..P`, `P` the power of two
    /// at or above `per_pool`, skipping the values `per_pool..P`: `0, P/2, P/4, 3P/4, P/8…`.
    /// Its first `2^k` items are the multiples of `P / 2^k`, so every prefix is spread evenly
    /// over the pool: the first `m` buffers lie at least `P / 4m` apart (exactly `P / 2^k`
    /// for a pool of a power of two), which puts the first half of a pool of 2 KiB buffers
    /// one to a 4 KiB page. Read from its end — a LIFO pool hands out its last slot first —
    /// it is the mirror image (`P − 1 − x`) of the same sequence, as evenly spread. Two
    /// consecutive items are at least a seventh of the pool apart (a quarter for a power of
    /// two). A golden-ratio stride (`i ↦ i·K mod n`) was the first candidate and was
    /// rejected: `K` rounded to an integer drifts, and at 1,024 buffers the 56th allocation
    /// came back to the first one's page.
    pub fn order(self, per_pool: u32) -> impl Iterator<Item = u32> {
        let n = per_pool;
        let bits = n.max(1).next_power_of_two().trailing_zeros();
        let scattered = self == Self::Scattered && bits > 0;
        let raw_end = if scattered {
            1u64 << bits
        } else {
            u64::from(n)
        };
        (0..raw_end)
            .map(move |j| {
                let j = j as u32;
                if scattered {
                    // `0 < bits ≤ 22`, so the shift is in range.
                    j.reverse_bits() >> (32 - bits)
                } else {
                    j
                }
            })
            .filter(move |&b| b < n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_is_a_permutation() {
        for n in (0..70).chain([255, 256, 1000, 1024, 4096, 65_537]) {
            for l in [BufferLayout::Contiguous, BufferLayout::Scattered] {
                let mut seen = vec![false; n as usize];
                let mut count = 0;
                for b in l.order(n) {
                    assert!(!seen[b as usize], "{l:?} {n}: {b} twice");
                    seen[b as usize] = true;
                    count += 1;
                }
                assert_eq!(count, n, "{l:?} {n}");
            }
        }
    }

    #[test]
    fn contiguous_is_index_order() {
        assert!(BufferLayout::Contiguous.order(300).eq(0..300));
    }

    #[test]
    fn scattered_neighbours_are_far_apart_and_prefixes_spread() {
        for n in (3u32..600).chain([1000, 1024, 1500, 4096, 65_537]) {
            let v: Vec<u32> = BufferLayout::Scattered.order(n).collect();
            for w in v.windows(2) {
                assert!(7 * w[0].abs_diff(w[1]) >= n, "{n}: {} then {}", w[0], w[1]);
            }
            // The first m, from either end, at least P / 4m apart.
            let p = n.next_power_of_two() as usize;
            for m in [2usize, 4, 16, 64] {
                let m = m.min(v.len());
                for mut e in [v[..m].to_vec(), v[v.len() - m..].to_vec()] {
                    e.sort_unstable();
                    let gap = e.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(u32::MAX);
                    assert!(gap as usize * 4 * m >= p, "{n}, first {m}: gap {gap}");
                }
            }
        }
        let v: Vec<u32> = BufferLayout::Scattered.order(8).collect();
        assert_eq!(v, [0, 4, 2, 6, 1, 5, 3, 7]);
    }

    #[cfg(not(loom))]
    #[test]
    fn heap_pools_start_in_the_layout_order() {
        let geo = crate::PoolGeometry {
            pools: 2,
            per_pool: 8,
            data_size: 64,
            free_cap: 8,
            policy: crate::AllocPolicy::Fifo,
        };
        let (mut server, _driver) =
            crate::heap::heap_pools_laid_out(geo, BufferLayout::Scattered, None);
        let got: Vec<u32> = (0..16).map(|_| server.alloc().unwrap()).collect();
        assert_eq!(got[..8], [0, 4, 2, 6, 1, 5, 3, 7]);
        assert_eq!(got[8..], [8, 12, 10, 14, 9, 13, 11, 15]);
    }

    #[test]
    fn names_parse_and_codes_round_trip() {
        for l in [BufferLayout::Contiguous, BufferLayout::Scattered] {
            assert_eq!(l.to_string().parse::<BufferLayout>(), Ok(l));
            assert_eq!(BufferLayout::from_code(l.code()), Some(l));
        }
        assert!(BufferLayout::from_code(7).is_none());
        assert!("diagonal".parse::<BufferLayout>().is_err());
    }
}
