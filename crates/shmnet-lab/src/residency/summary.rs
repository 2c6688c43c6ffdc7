//! From timed buffers to the seed's figures: overheads, the histogram, the summary rows
//! (Tables 2–4), and the distributions by position in the message with two-sample
//! Kolmogorov–Smirnov tests between them.

use super::probe::Sample;
use crate::calibrate::Marks;
use std::collections::BTreeMap;

pub use super::peaks::{Peak, Reading};

/// Bytes in a word for "overhead ticks per word" (x86-64's; the seed's HP 720 had 4).
pub const WORD_BYTES: usize = 8;

/// One buffer's overhead: ticks its load took beyond the same load from L1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Overhead {
    /// Its place in its message.
    pub position: u16,
    /// Bytes.
    pub len: u32,
    /// Overhead ticks (never negative: noise below the in-cache median is 0).
    pub ticks: f64,
}

/// Overheads of `samples`: each first load minus the median second load of buffers of the
/// same length (the in-cache cost, measured in the same run at the same addresses). Returns
/// the overheads and the in-cache medians by length.
pub fn overheads(samples: &[Sample]) -> (Vec<Overhead>, BTreeMap<u32, f64>) {
    let mut hot: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for s in samples {
        hot.entry(s.len).or_default().push(f64::from(s.hot));
    }
    let medians: BTreeMap<u32, f64> = hot
        .into_iter()
        .map(|(len, mut v)| (len, crate::tsc::median(&mut v)))
        .collect();
    let out = samples
        .iter()
        .map(|s| Overhead {
            position: s.position,
            len: s.len,
            ticks: (f64::from(s.cold) - medians[&s.len]).max(0.0),
        })
        .collect();
    (out, medians)
}

/// The overhead histogram.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Histogram {
    /// Width of a bin in ticks; bin `i` holds overheads in `[i * bin_ticks, (i+1) * bin_ticks)`.
    pub bin_ticks: f64,
    /// Buffers per bin.
    pub counts: Vec<u64>,
    /// Buffers beyond the last bin (interrupts, preemption: the seed's "outliers").
    pub overflow: u64,
}

impl Histogram {
    /// Bins of `bin_ticks` up to `limit` ticks.
    pub fn build(overheads: &[Overhead], bin_ticks: f64, limit: f64) -> Self {
        let bins = (limit / bin_ticks).ceil().max(1.0) as usize;
        let mut counts = vec![0u64; bins];
        let mut overflow = 0;
        for o in overheads {
            let i = (o.ticks / bin_ticks) as usize;
            match counts.get_mut(i) {
                Some(c) => *c += 1,
                None => overflow += 1,
            }
        }
        Self {
            bin_ticks,
            counts,
            overflow,
        }
    }

    /// The histogram's peaks, left to right, each read against `marks`: local maxima that
    /// stand out of the noise by the rule of [`super::peaks`] (valleys below 40 % of the top,
    /// four Poisson deviations above the higher, at least 2 % of the buffers; the overflow bin is
    /// never one).
    pub fn peaks(&self, marks: &Marks) -> Vec<Peak> {
        super::peaks::find(self, marks)
    }

    /// The upper end of the binned range.
    pub fn limit(&self) -> f64 {
        self.bin_ticks * self.counts.len() as f64
    }

    /// The histogram's bin width and range for a set of marks: to three times the dirty mark
    /// in about 100 bins, each a whole number of the timer's quantum (so that no bin is
    /// empty only because no reading can fall in it). The seed's figures ran to about twice
    /// the dirty mark with bins of 10 cycles.
    pub fn range_for(marks: &Marks, quantum: f64) -> (f64, f64) {
        let quantum = quantum.max(1.0);
        let limit = (3.0 * marks.dirty).max(100.0);
        let bin = ((limit / 100.0) / quantum).round().max(1.0) * quantum;
        (bin, (limit / bin).ceil() * bin)
    }
}

/// The seed's summary rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// % of buffers totally within cache (overhead ≤ the cached mark).
    pub fully_cached_pct: f64,
    /// % below a 100 % clean miss.
    pub lt_clean_pct: f64,
    /// % below a 100 % dirty miss.
    pub lt_dirty_pct: f64,
    /// % at or above a 100 % dirty miss.
    pub gt_dirty_pct: f64,
    /// Mean overhead ticks per word loaded; overflow-bin buffers left out, as the seed left
    /// out its outliers.
    pub avg_overhead_ticks_per_word: f64,
}

/// Classifies `overheads` against `marks`. `limit`: overheads above it are outliers, left out
/// of the average (they still count in the percentages, as above the dirty mark).
pub fn summarize(overheads: &[Overhead], marks: &Marks, limit: f64) -> Summary {
    if overheads.is_empty() {
        return Summary::default();
    }
    let n = overheads.len() as f64;
    let pct = |f: &dyn Fn(f64) -> bool| {
        100.0 * overheads.iter().filter(|o| f(o.ticks)).count() as f64 / n
    };
    let inliers: Vec<f64> = overheads
        .iter()
        .filter(|o| o.ticks < limit)
        .map(|o| o.ticks / (o.len as f64 / WORD_BYTES as f64).max(1.0))
        .collect();
    let lt_dirty = pct(&|t| t < marks.dirty);
    Summary {
        fully_cached_pct: pct(&|t| t <= marks.cached_max),
        lt_clean_pct: pct(&|t| t < marks.clean),
        lt_dirty_pct: lt_dirty,
        gt_dirty_pct: 100.0 - lt_dirty,
        avg_overhead_ticks_per_word: if inliers.is_empty() {
            0.0
        } else {
            inliers.iter().sum::<f64>() / inliers.len() as f64
        },
    }
}

/// The distribution of buffers at one position of their message.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Position {
    /// 0: the message's first data buffer.
    pub position: u16,
    /// Buffers at this position.
    pub buffers: u64,
    /// Median overhead ticks.
    pub median_overhead_ticks: f64,
    /// The summary rows of this position alone.
    pub summary: Summary,
}

/// A two-sample Kolmogorov–Smirnov test between two positions.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KsPair {
    /// One position.
    pub a: u16,
    /// The other.
    pub b: u16,
    /// The largest distance between their empirical distribution functions.
    pub d: f64,
    /// The asymptotic p-value of `d` (small: the distributions differ).
    pub p: f64,
}

/// Per-position distributions and the KS test of every pair of positions.
pub fn by_position(
    overheads: &[Overhead],
    marks: &Marks,
    limit: f64,
) -> (Vec<Position>, Vec<KsPair>) {
    let mut groups: BTreeMap<u16, Vec<Overhead>> = BTreeMap::new();
    for o in overheads {
        groups.entry(o.position).or_default().push(*o);
    }
    let positions = groups
        .iter()
        .map(|(&position, v)| {
            let mut t: Vec<f64> = v.iter().map(|o| o.ticks).collect();
            Position {
                position,
                buffers: v.len() as u64,
                median_overhead_ticks: crate::tsc::median(&mut t),
                summary: summarize(v, marks, limit),
            }
        })
        .collect();
    let keys: Vec<u16> = groups.keys().copied().collect();
    let mut pairs = Vec::new();
    for (i, &a) in keys.iter().enumerate() {
        for &b in &keys[i + 1..] {
            let xa: Vec<f64> = groups[&a].iter().map(|o| o.ticks).collect();
            let xb: Vec<f64> = groups[&b].iter().map(|o| o.ticks).collect();
            let (d, p) = ks_two_sample(&xa, &xb);
            pairs.push(KsPair { a, b, d, p });
        }
    }
    (positions, pairs)
}

/// The two-sample Kolmogorov–Smirnov statistic of `a` and `b` and its asymptotic p-value
/// (Numerical Recipes' `kstwo` with Stephens' small-sample correction). Ties are handled by
/// stepping both distribution functions past each distinct value together. `(0, 1)` when
/// either sample is empty.
pub fn ks_two_sample(a: &[f64], b: &[f64]) -> (f64, f64) {
    if a.is_empty() || b.is_empty() {
        return (0.0, 1.0);
    }
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (mut i, mut j, mut d) = (0usize, 0usize, 0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / na - j as f64 / nb).abs());
    }
    let en = (na * nb / (na + nb)).sqrt();
    (d, kolmogorov_q((en + 0.12 + 0.11 / en) * d))
}

/// The Kolmogorov distribution's tail: `Q(λ) = 2 Σ (-1)^(j-1) exp(-2 j² λ²)`.
fn kolmogorov_q(lambda: f64) -> f64 {
    if lambda < 1e-3 {
        return 1.0;
    }
    let mut sum = 0.0;
    let mut sign = 1.0;
    for j in 1..=100 {
        let term = sign * 2.0 * (-2.0 * (j as f64 * lambda).powi(2)).exp();
        sum += term;
        if term.abs() < 1e-10 {
            return sum.clamp(0.0, 1.0);
        }
        sign = -sign;
    }
    1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ticks: &[f64]) -> Vec<Overhead> {
        ticks
            .iter()
            .map(|&t| Overhead {
                position: 0,
                len: 1480,
                ticks: t,
            })
            .collect()
    }

    const MARKS: Marks = Marks {
        cached_max: 50.0,
        clean: 800.0,
        dirty: 1000.0,
    };

    #[test]
    fn rows_classify_known_timings() {
        // 4 in cache, 2 partly missed, 2 between the marks, 2 beyond dirty (one an outlier).
        let o = at(&[
            0.0, 10.0, 50.0, 20.0, 300.0, 700.0, 800.0, 999.0, 1000.0, 99_999.0,
        ]);
        let s = summarize(&o, &MARKS, 3000.0);
        assert_eq!(s.fully_cached_pct, 40.0);
        assert_eq!(s.lt_clean_pct, 60.0);
        assert_eq!(s.lt_dirty_pct, 80.0);
        assert_eq!(s.gt_dirty_pct, 20.0);
        // The outlier is left out of the average: (0+10+50+20+300+700+800+999+1000)/9 ticks
        // over 185 words.
        let want = (3879.0 / 9.0) / 185.0;
        assert!((s.avg_overhead_ticks_per_word - want).abs() < 1e-9);
        assert_eq!(summarize(&[], &MARKS, 1.0), Summary::default());
    }

    #[test]
    fn overheads_subtract_the_in_cache_median_of_their_length() {
        let s = |len, cold, hot| Sample {
            position: 0,
            len,
            cold,
            hot,
        };
        let (o, med) = overheads(&[
            s(100, 500, 100),
            s(100, 90, 110),
            s(100, 300, 120),
            s(8, 60, 50),
        ]);
        assert_eq!(med[&100], 110.0);
        assert_eq!(med[&8], 50.0);
        let t: Vec<f64> = o.iter().map(|o| o.ticks).collect();
        assert_eq!(t, [390.0, 0.0, 190.0, 10.0]);
    }

    #[test]
    fn histogram_counts_add_up_with_the_overflow() {
        let o = at(&[0.0, 9.9, 10.0, 25.0, 29.9, 30.0, 1e6]);
        let h = Histogram::build(&o, 10.0, 30.0);
        assert_eq!(h.counts, [2, 1, 2]);
        assert_eq!(h.overflow, 2);
        assert_eq!(h.counts.iter().sum::<u64>() + h.overflow, o.len() as u64);
    }

    #[test]
    fn ks_tells_apart_what_differs_and_not_what_does_not() {
        let a: Vec<f64> = (0..300).map(|i| (i % 100) as f64).collect();
        let same: Vec<f64> = (0..300).map(|i| ((i * 7) % 100) as f64).collect();
        let shifted: Vec<f64> = a.iter().map(|x| x + 30.0).collect();
        let (d, p) = ks_two_sample(&a, &same);
        assert!(d < 0.01 && p > 0.99, "{d} {p}");
        let (d, p) = ks_two_sample(&a, &shifted);
        assert!((d - 0.3).abs() < 1e-9 && p < 1e-6, "{d} {p}");
        assert_eq!(ks_two_sample(&[], &a), (0.0, 1.0));
    }

    #[test]
    fn positions_are_grouped_and_every_pair_tested() {
        let mut o = at(&[0.0; 20]);
        for (i, x) in o.iter_mut().enumerate() {
            x.position = (i % 4) as u16;
            x.ticks = if x.position == 3 { 900.0 } else { 0.0 };
        }
        let (pos, ks) = by_position(&o, &MARKS, 3000.0);
        assert_eq!(pos.len(), 4);
        assert!(pos.iter().all(|p| p.buffers == 5));
        assert_eq!(pos[3].summary.fully_cached_pct, 0.0);
        assert_eq!(ks.len(), 6);
        let p03 = ks.iter().find(|k| (k.a, k.b) == (0, 3)).unwrap();
        assert_eq!(p03.d, 1.0);
        assert!(p03.p < 0.05);
    }
}
