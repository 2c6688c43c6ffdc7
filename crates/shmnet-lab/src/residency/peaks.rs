//! The peaks of an overhead histogram, read against the marks as the seed read its lettered
//! peaks ("peak B, at a bin containing 840–849, corresponds to a 100 % clean miss").
//!
//! # What counts as a peak
//!
//! A peak is a local maximum of the bins' counts (a run of equal maxima, a plateau, is one)
//! that passes three tests:
//!
//! 1. **Resolved**: its prominence — its height above the higher of the two valleys that
//!    separate it from higher ground on either side (of equal maxima, the leftmost stands
//!    for them; or from the floor at 0 ticks on the
//!    left, since no overhead is negative; or from the last bin on the right) — is at least
//!    [`MIN_RELATIVE_PROMINENCE`] (60 %) of its height: the valleys either side dip below
//!    40 % of it. Bumps on the flank or the top of a broad cluster are no peaks of their own;
//!    two clusters whose dip stays above that are one.
//! 2. **Significant**: the prominence is at least [`SIGMAS`] (4) standard deviations of the
//!    difference between the top's count and the valley's, the counts taken as Poisson
//!    (variance = count): `top − valley ≥ 4 √(top + valley)`. This is what rejects noise in
//!    a sparse histogram, where a few buffers make a bump of any relative height.
//! 3. **Big enough**: its bins hold at least [`MIN_SHARE_PCT`] (2 %) of all buffers (the
//!    overflow bin included): the seed lettered nothing smaller.
//!
//! Why these numbers: the counts are not smoothed, because the lab's bins are coarse (about
//! a hundred to three times the dirty mark) and a real valley is often one bin wide — the
//! 200-message server run on the 2-vCPU AMD EPYC VM (2026-12-07) had a 41-buffer peak
//! between valleys of 8 and 10, which a five-bin box smeared into its neighbour. The valley
//! is a minimum over noisy bins and so biased low, which is why four deviations and not two:
//! on flat Poisson noise of 100 bins (simulated, 600 histograms per level) the rule found a
//! false peak in none at up to 3 buffers a bin, in 3–5 % at 10–30 and in 1.5 % at 60, where
//! 50 % instead of 60 % let 9 % through; five deviations would have lost the 41-buffer peak
//! (4.3 deviations). Real histograms are a few clusters over a sparse tail, where the rule
//! holds.
//!
//! A peak's bins are those about its top whose counts stand above half its prominence (the
//! full width at half prominence). A maximum at the last bin is not a peak: the distribution
//! goes on into the overflow bin, so its far side is not seen, and the overflow bin itself
//! (interrupts, preemption) is never a peak.
//!
//! # Where a peak lies
//!
//! A peak is read at its tallest bin ([`Reading::of`]). "About" a miss mark means within
//! `δ = max(clean / 10, one bin)` of it: the seed's two alignments of one mbuf moved its
//! marks by 2 % (828 vs 846 cycles) and its peaks were read to a 10-cycle bin, while here the
//! marks are lower quartiles of calibrations on a shared machine, whose 100 % misses spread
//! over some tens of percent; a tenth of the clean mark is the spread one can still call
//! "that mark", and a peak is never located to better than a bin. When the clean and dirty
//! bands would overlap they are split halfway between the marks; when the marks themselves
//! lie within `δ` of each other (as on a machine that buffers write-backs) the machine does
//! not tell a clean miss from a dirty one, and a peak about them reads as a clean miss, the
//! cheaper explanation.

use super::summary::Histogram;
use crate::calibrate::Marks;

/// Least share of all buffers a peak's bins hold, %.
pub const MIN_SHARE_PCT: f64 = 2.0;
/// Poisson standard deviations a peak stands above its valley.
pub const SIGMAS: f64 = 4.0;
/// Least prominence as a fraction of the peak's height.
pub const MIN_RELATIVE_PROMINENCE: f64 = 0.6;

/// Where a peak lies against the marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    /// Its tallest bin holds overheads within the cached mark: totally within cache.
    InCache,
    /// Above the cached mark, below a clean miss (less `δ`): some lines came from a cache.
    PartlyCached,
    /// About a 100 % clean miss.
    CleanMiss,
    /// Between the clean and the dirty bands (only when the marks are more than `2δ`
    /// apart): misses some of whose victims were dirty.
    BetweenMisses,
    /// About a 100 % dirty miss.
    DirtyMiss,
    /// Beyond a dirty miss (plus `δ`): more than cache fills alone explain (a TLB miss,
    /// contention for memory; the seed's J, M and T).
    BeyondDirty,
}

impl Reading {
    /// The reading of a peak whose tallest bin is `[lo, hi)` ticks, against `marks`.
    /// Degenerate marks ([`Marks::degeneracy`]) give readings that mean nothing, as they give
    /// percentages that mean nothing.
    pub fn of(lo: f64, hi: f64, marks: &Marks) -> Self {
        let x = (lo + hi) / 2.0;
        let (clean, dirty) = (marks.clean, marks.dirty);
        let d = (clean / 10.0).max(hi - lo);
        if lo <= marks.cached_max {
            Self::InCache
        } else if x < clean - d {
            Self::PartlyCached
        } else if dirty - clean <= d {
            if x <= dirty + d {
                Self::CleanMiss
            } else {
                Self::BeyondDirty
            }
        } else {
            let clean_top = if dirty - clean < 2.0 * d {
                (clean + dirty) / 2.0
            } else {
                clean + d
            };
            if x < clean_top {
                Self::CleanMiss
            } else if x < dirty - d {
                Self::BetweenMisses
            } else if x <= dirty + d {
                Self::DirtyMiss
            } else {
                Self::BeyondDirty
            }
        }
    }
}

impl std::fmt::Display for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::InCache => "totally in cache",
            Self::PartlyCached => "partly cached",
            Self::CleanMiss => "about a 100 % clean miss",
            Self::BetweenMisses => "between a clean and a dirty miss",
            Self::DirtyMiss => "about a 100 % dirty miss",
            Self::BeyondDirty => "beyond a 100 % dirty miss",
        })
    }
}

/// One peak of a histogram.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Peak {
    /// The lower edge of its first bin, ticks.
    pub lo_ticks: f64,
    /// The upper edge of its last bin, ticks.
    pub hi_ticks: f64,
    /// The middle of its tallest bin, ticks: where it is read against the marks.
    pub top_ticks: f64,
    /// Buffers in its bins.
    pub buffers: u64,
    /// Their share of all the histogram's buffers (the overflow bin included), %.
    pub share_pct: f64,
    /// Where it lies against the marks.
    pub reading: Reading,
}

impl std::fmt::Display for Peak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0}–{:.0} ticks (top {:.0}): {} buffers ({:.1} %), {}",
            self.lo_ticks,
            self.hi_ticks,
            self.top_ticks,
            self.buffers,
            self.share_pct,
            self.reading
        )
    }
}

/// The peaks of `h`, left to right (see the module's doc for the rule).
pub fn find(h: &Histogram, marks: &Marks) -> Vec<Peak> {
    let c = &h.counts;
    let n = c.len();
    let total = c.iter().sum::<u64>() + h.overflow;
    if n == 0 || total == 0 {
        return vec![];
    }
    let s: Vec<f64> = c.iter().map(|&x| x as f64).collect();
    let mut out = Vec::new();
    let mut a = 0;
    while a < n {
        let mut b = a;
        while b + 1 < n && s[b + 1] == s[a] {
            b += 1;
        }
        let rises = a == 0 || s[a - 1] < s[a];
        // `b + 1 < n`: a maximum at the last bin has its far side in the overflow.
        let falls = b + 1 < n && s[b + 1] < s[b];
        if rises && falls && s[a] > 0.0 {
            if let Some(p) = judge(h, &s, a, b, total, marks) {
                out.push(p);
            }
        }
        a = b + 1;
    }
    out
}

/// The peak whose top is the plateau `a..=b`, if it passes the three tests.
fn judge(h: &Histogram, s: &[f64], a: usize, b: usize, total: u64, marks: &Marks) -> Option<Peak> {
    let n = s.len();
    let top = s[a];
    // The valley on each side: the lowest point before higher ground. On the left, with no
    // higher ground, the floor at 0 ticks; on the right, the lowest point to the last bin.
    // Of equal maxima the leftmost stands for them: an equal bin counts as higher ground on
    // the left, not on the right.
    let left = match (0..a).rev().find(|&j| s[j] >= top) {
        Some(j) => s[j..a].iter().copied().fold(top, f64::min),
        None => 0.0,
    };
    let right_end = (b + 1..n).find(|&j| s[j] > top).unwrap_or(n);
    let right = s[b + 1..right_end].iter().copied().fold(top, f64::min);
    let valley = left.max(right);
    let prominence = top - valley;
    if prominence < MIN_RELATIVE_PROMINENCE * top || prominence < SIGMAS * (top + valley).sqrt() {
        return None;
    }
    let level = valley + prominence / 2.0;
    let (mut lo, mut hi) = (a, b);
    while lo > 0 && s[lo - 1] > level {
        lo -= 1;
    }
    while hi + 1 < n && s[hi + 1] > level {
        hi += 1;
    }
    let c = &h.counts;
    let buffers: u64 = c[lo..=hi].iter().sum();
    let share_pct = 100.0 * buffers as f64 / total as f64;
    if share_pct < MIN_SHARE_PCT {
        return None;
    }
    // The tallest bin; of several equally tall, the middle one.
    let most = c[lo..=hi].iter().copied().max().unwrap_or(0);
    let tall: Vec<usize> = (lo..=hi).filter(|&i| c[i] == most).collect();
    let t = tall[tall.len() / 2];
    let w = h.bin_ticks;
    Some(Peak {
        lo_ticks: lo as f64 * w,
        hi_ticks: (hi + 1) as f64 * w,
        top_ticks: (t as f64 + 0.5) * w,
        buffers,
        share_pct,
        reading: Reading::of(t as f64 * w, (t + 1) as f64 * w, marks),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKS: Marks = Marks {
        cached_max: 50.0,
        clean: 800.0,
        dirty: 1000.0,
    };

    fn hist(counts: Vec<u64>, overflow: u64) -> Histogram {
        Histogram {
            bin_ticks: 10.0,
            counts,
            overflow,
        }
    }

    /// A bell of `n` buffers at bin `at` with about `sd` bins' spread, added to `c`.
    fn bell(c: &mut [u64], at: usize, sd: f64, n: f64) {
        let w: Vec<f64> = (0..c.len())
            .map(|i| (-((i as f64 - at as f64) / sd).powi(2) / 2.0).exp())
            .collect();
        let sum: f64 = w.iter().sum();
        for (x, w) in c.iter_mut().zip(w) {
            *x += (n * w / sum).round() as u64;
        }
    }

    /// Deterministic noise: `lo..=hi` per bin from a small LCG.
    fn noise(c: &mut [u64], lo: u64, hi: u64, seed: u64) {
        let mut x = seed;
        for v in c.iter_mut() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *v += lo + (x >> 33) % (hi - lo + 1);
        }
    }

    #[test]
    fn two_clusters_are_two_peaks_read_against_the_marks() {
        let mut c = vec![0u64; 300];
        bell(&mut c, 1, 1.0, 1000.0);
        bell(&mut c, 84, 2.0, 2000.0);
        noise(&mut c, 0, 2, 7);
        let p = find(&hist(c, 40), &MARKS);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].reading, Reading::InCache);
        assert_eq!(p[1].reading, Reading::CleanMiss);
        assert!(
            p[1].lo_ticks <= 840.0 && 850.0 <= p[1].hi_ticks,
            "{:?}",
            p[1]
        );
        assert!(p[0].share_pct > 25.0 && p[1].share_pct > 40.0, "{p:?}");
        assert!(p[0].hi_ticks <= p[1].lo_ticks);
    }

    #[test]
    fn flat_noise_has_no_peak() {
        for (lo, hi, seed) in [(20, 40, 1), (0, 3, 2), (200, 260, 3), (0, 1, 4)] {
            let mut c = vec![0u64; 100];
            noise(&mut c, lo, hi, seed);
            let p = find(&hist(c, 0), &MARKS);
            assert!(p.is_empty(), "noise {lo}..={hi}: {p:?}");
        }
        assert!(find(&hist(vec![0; 50], 0), &MARKS).is_empty());
        assert!(find(&hist(vec![], 0), &MARKS).is_empty());
    }

    #[test]
    fn a_plateau_is_one_peak_across_its_width() {
        let mut c = vec![0u64; 100];
        c[30..40].fill(100);
        let p = find(&hist(c, 0), &MARKS);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!((p[0].lo_ticks, p[0].hi_ticks), (300.0, 400.0));
        assert_eq!(p[0].buffers, 1000);
        assert_eq!(p[0].share_pct, 100.0);
        assert_eq!(p[0].reading, Reading::PartlyCached);
    }

    #[test]
    fn a_noisy_plateau_is_one_peak() {
        let mut c = vec![0u64; 100];
        noise(&mut c[20..40], 90, 110, 5);
        let p = find(&hist(c, 0), &MARKS);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!((p[0].lo_ticks, p[0].hi_ticks), (200.0, 400.0));
    }

    /// The 200-message server run of the VM (2026-12-07): in cache, partly cached, and a
    /// broad hump below the clean mark, over a sparse tail.
    #[test]
    fn a_measured_histogram_has_its_three_peaks() {
        let mut c = vec![
            34u64, 28, 57, 22, 8, 41, 29, 19, 10, 15, 35, 48, 38, 38, 37, 28, 28, 12, 10, 2, 4, 1,
            5, 1, 4, 0, 2, 4, 1, 2, 1, 5, 2, 0, 1, 1, 0, 0, 2, 0,
        ];
        c.resize(40, 0);
        let h = Histogram {
            bin_ticks: 27.6,
            counts: c,
            overflow: 55,
        };
        let marks = Marks {
            cached_max: 98.0,
            clean: 367.0,
            dirty: 368.0,
        };
        let p = find(&h, &marks);
        let r: Vec<Reading> = p.iter().map(|p| p.reading).collect();
        assert_eq!(
            r,
            [
                Reading::InCache,
                Reading::PartlyCached,
                Reading::PartlyCached
            ],
            "{p:?}"
        );
    }

    #[test]
    fn the_overflow_bin_and_a_rise_into_it_are_no_peak() {
        // Everything beyond the range: the overflow bin is not a peak.
        let mut c = vec![0u64; 100];
        noise(&mut c, 0, 1, 9);
        assert!(find(&hist(c.clone(), 5000), &MARKS).is_empty());
        // A cluster whose top is at the last bin: its far side is in the overflow.
        bell(&mut c, 99, 2.0, 3000.0);
        assert!(find(&hist(c.clone(), 3000), &MARKS).is_empty());
        // The same cluster inside the range is one.
        c.rotate_left(20);
        assert_eq!(find(&hist(c, 3000), &MARKS).len(), 1);
    }

    #[test]
    fn small_and_shallow_bumps_are_not_peaks() {
        // 1.5 % of the buffers in a clean spike: below the share.
        let mut c = vec![0u64; 100];
        bell(&mut c, 5, 1.0, 9850.0);
        c[60] += 150;
        assert_eq!(find(&hist(c, 0), &MARKS).len(), 1);
        // Two bells whose dip stays above half the smaller: one peak.
        let mut c = vec![0u64; 100];
        bell(&mut c, 40, 4.0, 5000.0);
        bell(&mut c, 48, 4.0, 5000.0);
        assert_eq!(find(&hist(c, 0), &MARKS).len(), 1);
        // Far enough apart to dip: two.
        let mut c = vec![0u64; 100];
        bell(&mut c, 30, 3.0, 5000.0);
        bell(&mut c, 60, 3.0, 5000.0);
        assert_eq!(find(&hist(c, 0), &MARKS).len(), 2);
    }

    #[test]
    fn readings_follow_the_marks() {
        let r = |x: f64| Reading::of(x - 5.0, x + 5.0, &MARKS);
        // δ = 80 ticks: clean band 720..880 (up to the split at 900 when the bands touch:
        // here they are 200 apart, so clean ends at 880), between 880..920, dirty 920..1080.
        assert_eq!(r(5.0), Reading::InCache);
        assert_eq!(r(54.0), Reading::InCache);
        assert_eq!(r(60.0), Reading::PartlyCached);
        assert_eq!(r(715.0), Reading::PartlyCached);
        assert_eq!(r(725.0), Reading::CleanMiss);
        assert_eq!(r(875.0), Reading::CleanMiss);
        assert_eq!(r(900.0), Reading::BetweenMisses);
        assert_eq!(r(925.0), Reading::DirtyMiss);
        assert_eq!(r(1075.0), Reading::DirtyMiss);
        assert_eq!(r(1085.0), Reading::BeyondDirty);
        // Marks 100 apart (< 2δ): split halfway.
        let close = Marks {
            dirty: 900.0,
            ..MARKS
        };
        assert_eq!(Reading::of(840.0, 850.0, &close), Reading::CleanMiss);
        assert_eq!(Reading::of(850.0, 860.0, &close), Reading::DirtyMiss);
        // Marks within δ: the machine does not tell them apart; a clean miss.
        let same = Marks {
            dirty: 820.0,
            ..MARKS
        };
        assert_eq!(Reading::of(890.0, 900.0, &same), Reading::CleanMiss);
        assert_eq!(Reading::of(910.0, 920.0, &same), Reading::BeyondDirty);
    }
}
