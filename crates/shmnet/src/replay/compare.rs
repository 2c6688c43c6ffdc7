//! The arithmetic of `shmnet sim validate`: one setting's measured and predicted overheads
//! set on one baseline, and the errors between them.
//!
//! A buffer's load time is its in-cache load time plus its overhead. Both sides take the
//! in-cache time *measured in the same run* for buffers of that length (the probe's median
//! second load, the timer's own overhead subtracted); only the overhead differs — measured by
//! the probe, or predicted by the simulator. So a setting whose predicted and measured
//! overheads are both zero has exactly 0 error, and the difference of the load times is the
//! difference of the overheads.
//!
//! The errors of one setting, for a buffer of `len` bytes (`len / 8` words):
//!
//! - `load_rel_error` = (predicted − measured load ticks) / measured load ticks. The
//!   denominator is never zero: the in-cache time must be above the timer's own overhead.
//! - `overhead_error_ticks` = predicted − measured overhead of the buffer, in ticks: the
//!   absolute error, defined when the measured overhead is zero.
//! - `avg_overhead_rel_error` = (predicted − measured) / measured overhead per word, or
//!   `None` (`null` in JSON) when the measured overhead is zero: a relative error on a zero
//!   denominator is absent, never 0 %.

use shmnet_lab::residency::summary::WORD_BYTES;

/// Why a setting's errors cannot be computed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// No buffer of the compared length was timed, so there is no in-cache baseline.
    #[error(
        "the run timed no {len}-byte buffer (only {timed:?} bytes), so their in-cache load time is unknown: validate needs settings whose fragments have the calibrated buffer's length"
    )]
    NoInCacheTime { len: u32, timed: Vec<u32> },
    /// The in-cache median is not above the timer's own overhead: no load time to compare.
    #[error(
        "{len}-byte buffers loaded from cache in {in_cache:.1} ticks, not above the timer's own {timer:.1}: rerun when the machine is quieter"
    )]
    NoLoadTime { len: u32, in_cache: f64, timer: f64 },
}

/// One setting's measured and predicted load time of a buffer, and the errors.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Comparison {
    /// The buffer compared (the calibrated buffer's length).
    pub buffer_bytes: u32,
    /// Its in-cache load ticks measured in this run (timer overhead subtracted): the
    /// baseline both sides share.
    pub in_cache_ticks: f64,
    /// `in_cache_ticks` + the measured mean overhead per word × its words.
    pub measured_load_ticks: f64,
    /// `in_cache_ticks` + the predicted mean overhead per word × its words.
    pub predicted_load_ticks: f64,
    /// (predicted − measured) / measured load ticks.
    pub load_rel_error: f64,
    /// Predicted − measured overhead of the buffer, ticks.
    pub overhead_error_ticks: f64,
    /// (predicted − measured) / measured overhead per word; `None` when the measured
    /// overhead is zero.
    pub avg_overhead_rel_error: Option<f64>,
}

/// Compares one setting for a buffer of `len` bytes. `in_cache`: the run's median in-cache
/// load ticks by buffer length, timer overhead included; `timer`: that overhead;
/// `measured` and `predicted`: mean overhead ticks per word (8 bytes).
pub fn compare(
    in_cache: &[(u32, f64)],
    timer: f64,
    len: u32,
    measured: f64,
    predicted: f64,
) -> Result<Comparison, CompareError> {
    let raw = in_cache
        .iter()
        .find(|(l, _)| *l == len)
        .map(|(_, t)| *t)
        .ok_or_else(|| CompareError::NoInCacheTime {
            len,
            timed: in_cache.iter().map(|(l, _)| *l).collect(),
        })?;
    let hot = raw - timer;
    if hot.is_nan() || hot <= 0.0 {
        return Err(CompareError::NoLoadTime {
            len,
            in_cache: raw,
            timer,
        });
    }
    let words = f64::from(len) / WORD_BYTES as f64;
    let measured_load = hot + measured * words;
    let predicted_load = hot + predicted * words;
    Ok(Comparison {
        buffer_bytes: len,
        in_cache_ticks: hot,
        measured_load_ticks: measured_load,
        predicted_load_ticks: predicted_load,
        load_rel_error: (predicted_load - measured_load) / measured_load,
        overhead_error_ticks: (predicted - measured) * words,
        avg_overhead_rel_error: (measured > 0.0).then(|| (predicted - measured) / measured),
    })
}

/// The mean of the absolute values, or `None` for no values.
pub fn mean_abs(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v.abs(), n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The mean of the absolute values, or `None` if any is absent (or there are none).
pub fn mean_abs_all(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let all: Option<Vec<f64>> = values.into_iter().collect();
    mean_abs(all?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1,480 bytes: 185 words of 8 bytes. In cache 130 ticks, timer 30: a baseline of 100.
    const LEN: u32 = 1480;
    const IN_CACHE: [(u32, f64); 2] = [(1472, 500.0), (1480, 130.0)];

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn zero_predicted_and_zero_measured_overhead_is_no_error() {
        let c = compare(&IN_CACHE, 30.0, LEN, 0.0, 0.0).unwrap();
        assert_eq!(c.in_cache_ticks, 100.0);
        assert_eq!(c.measured_load_ticks, 100.0);
        assert_eq!(c.predicted_load_ticks, 100.0);
        assert_eq!(c.load_rel_error, 0.0);
        assert_eq!(c.overhead_error_ticks, 0.0);
        assert_eq!(c.avg_overhead_rel_error, None, "0/0 is absent, not 0 %");
    }

    #[test]
    fn a_known_offset_gives_the_known_error() {
        // Measured 0.25/word × 185 = 46.25 ticks, predicted 0.5/word × 185 = 92.5 ticks.
        // Loads 146.25 and 192.5: error 46.25 / 146.25 = 37 / 117.
        let c = compare(&IN_CACHE, 30.0, LEN, 0.25, 0.5).unwrap();
        assert_eq!(c.measured_load_ticks, 146.25);
        assert_eq!(c.predicted_load_ticks, 192.5);
        assert!(close(c.load_rel_error, 37.0 / 117.0), "{c:?}");
        assert_eq!(c.overhead_error_ticks, 46.25);
        assert_eq!(c.avg_overhead_rel_error, Some(1.0));
        // Predicting no overhead at all for the same measurement: −37/117, −100 %.
        let c = compare(&IN_CACHE, 30.0, LEN, 0.25, 0.0).unwrap();
        assert_eq!(c.predicted_load_ticks, 100.0);
        assert!(close(c.load_rel_error, -37.0 / 117.0), "{c:?}");
        assert_eq!(c.overhead_error_ticks, -46.25);
        assert_eq!(c.avg_overhead_rel_error, Some(-1.0));
    }

    #[test]
    fn a_zero_measured_overhead_still_shows_the_predicted_one() {
        // Predicted 0.4/word × 185 = 74 ticks over a baseline of 100: +74 %.
        let c = compare(&IN_CACHE, 30.0, LEN, 0.0, 0.4).unwrap();
        assert!(close(c.load_rel_error, 0.74), "{c:?}");
        assert!(close(c.overhead_error_ticks, 74.0), "{c:?}");
        assert_eq!(c.avg_overhead_rel_error, None);
    }

    #[test]
    fn the_baseline_is_the_in_cache_time_of_that_length() {
        // 1,472 bytes: 184 words, in cache 500 − 30 = 470 ticks.
        let c = compare(&IN_CACHE, 30.0, 1472, 0.5, 0.5).unwrap();
        assert_eq!(c.in_cache_ticks, 470.0);
        assert_eq!(c.measured_load_ticks, 470.0 + 92.0);
        assert_eq!(c.load_rel_error, 0.0);
    }

    #[test]
    fn a_missing_length_is_an_error_not_a_zero() {
        let e = compare(&[(1472, 120.0)], 30.0, LEN, 0.25, 0.5).unwrap_err();
        assert_eq!(
            e,
            CompareError::NoInCacheTime {
                len: 1480,
                timed: vec![1472]
            }
        );
        assert!(e.to_string().contains("1480-byte"), "{e}");
        assert!(matches!(
            compare(&[], 30.0, LEN, 0.0, 0.0),
            Err(CompareError::NoInCacheTime { .. })
        ));
    }

    #[test]
    fn an_in_cache_time_within_the_timer_overhead_is_an_error() {
        assert_eq!(
            compare(&[(LEN, 30.0)], 30.0, LEN, 0.25, 0.5),
            Err(CompareError::NoLoadTime {
                len: LEN,
                in_cache: 30.0,
                timer: 30.0
            })
        );
    }

    #[test]
    fn means_of_absolute_errors() {
        assert_eq!(mean_abs([0.125, -0.375, 0.5, -0.0]), Some(0.25));
        assert_eq!(mean_abs([]), None);
        assert_eq!(mean_abs_all([Some(-0.5), Some(1.5)]), Some(1.0));
        assert_eq!(mean_abs_all([Some(0.5), None]), None, "an absent error");
        assert_eq!(mean_abs_all([]), None);
    }
}
