//! The mean and spread of a benchmark's repetitions, as seed 002 reported its six runs.

/// Repetitions of one figure.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Spread {
    /// Repetitions that produced a figure.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (0 for one repetition).
    pub sd: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none (every repetition failed).
    pub fn of(values: &[f64]) -> Option<Spread> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Spread {
            n,
            mean,
            sd,
            min,
            max,
        })
    }

    /// The standard deviation as a percentage of the mean (0 when the mean is 0).
    pub fn cv_pct(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            100.0 * self.sd / self.mean.abs()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_known_values() {
        let s = Spread::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert_eq!(s.mean, 5.0);
        assert!((s.sd - 2.138_089_935).abs() < 1e-6);
        assert_eq!((s.min, s.max), (2.0, 9.0));
        assert!((s.cv_pct() - 42.761_798_7).abs() < 1e-4);
    }

    #[test]
    fn one_value_has_no_spread_and_none_has_no_figure() {
        let s = Spread::of(&[3.0]).unwrap();
        assert_eq!((s.mean, s.sd, s.min, s.max), (3.0, 0.0, 3.0, 3.0));
        assert_eq!(Spread::of(&[]), None);
    }
}
