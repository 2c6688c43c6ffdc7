//! The retransmission timer (RFC 6298): a smoothed round-trip time, its variation, and the
//! timeout derived from them, with Karn's rule (no sample from a retransmitted segment) and
//! exponential backoff.
//!
//! Times are kept in microseconds as `u32` (71 minutes at most), so the estimator is 16
//! bytes of connection state.

/// RFC 6298's lower bound on the timeout is 1 s; Linux uses 200 ms, and so do we: on the
/// networks shmnet runs on a second of silence after one loss costs more than a spurious
/// retransmission.
pub const MIN_RTO_US: u32 = 200_000;
/// Upper bound on the timeout (RFC 6298 (2.5): at least 60 s).
pub const MAX_RTO_US: u32 = 60_000_000;
/// The timeout before the first sample (RFC 6298 (2.1)).
pub const INITIAL_RTO_US: u32 = 1_000_000;
/// Clock granularity G (RFC 6298 (2.2)): our clock is in nanoseconds, so 1 µs.
const GRANULARITY_US: u32 = 1;

/// Round-trip estimator and retransmission timeout.
///
/// Invariant: `MIN_RTO_US <= base_rto_us <= MAX_RTO_US`; the timeout in force is
/// `base_rto_us << backoff`, capped at `MAX_RTO_US`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rtt {
    /// Smoothed RTT (µs); 0 until the first sample.
    srtt_us: u32,
    /// RTT variation (µs).
    rttvar_us: u32,
    /// The timeout before backoff (µs).
    base_rto_us: u32,
    /// Consecutive timeouts (each doubles the timeout).
    backoff: u8,
}

impl Default for Rtt {
    fn default() -> Self {
        Rtt {
            srtt_us: 0,
            rttvar_us: 0,
            base_rto_us: INITIAL_RTO_US,
            backoff: 0,
        }
    }
}

impl Rtt {
    /// Take a round-trip sample of `sample_us` microseconds (RFC 6298 (2.2), (2.3)). Clears
    /// the backoff: an acknowledgement of new data arrived.
    pub fn sample(&mut self, sample_us: u32) {
        let r = sample_us.max(1);
        if self.srtt_us == 0 {
            self.srtt_us = r;
            self.rttvar_us = r / 2;
        } else {
            // RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|; SRTT <- 7/8 SRTT + 1/8 R'.
            let err = self.srtt_us.abs_diff(r);
            self.rttvar_us = (3 * (self.rttvar_us as u64) / 4 + err as u64 / 4) as u32;
            self.srtt_us = (7 * (self.srtt_us as u64) / 8 + r as u64 / 8) as u32;
        }
        let rto = self.srtt_us as u64 + (4 * self.rttvar_us as u64).max(GRANULARITY_US as u64);
        self.base_rto_us = rto.clamp(MIN_RTO_US as u64, MAX_RTO_US as u64) as u32;
        self.backoff = 0;
    }

    /// The timeout fired: double it (RFC 6298 (5.5)).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(30);
    }

    /// New data was acknowledged without a sample (Karn): keep the estimate, but the
    /// path is alive, so the backoff ends.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// Consecutive timeouts so far.
    pub fn backoffs(&self) -> u8 {
        self.backoff
    }

    /// The timeout in force, in microseconds.
    pub fn rto_us(&self) -> u32 {
        let t = (self.base_rto_us as u64) << self.backoff;
        t.min(MAX_RTO_US as u64) as u32
    }

    /// The smoothed RTT in microseconds (0 before the first sample).
    pub fn srtt_us(&self) -> u32 {
        self.srtt_us
    }

    /// The RTT variation in microseconds.
    pub fn rttvar_us(&self) -> u32 {
        self.rttvar_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_sets_srtt_and_half_variation() {
        let mut r = Rtt::default();
        assert_eq!(r.rto_us(), INITIAL_RTO_US);
        r.sample(100_000);
        assert_eq!(r.srtt_us(), 100_000);
        assert_eq!(r.rttvar_us(), 50_000);
        assert_eq!(r.rto_us(), 300_000);
    }

    #[test]
    fn steady_samples_converge_and_respect_the_floor() {
        let mut r = Rtt::default();
        for _ in 0..100 {
            r.sample(1_000);
        }
        assert!(r.srtt_us().abs_diff(1_000) <= 8);
        assert_eq!(r.rto_us(), MIN_RTO_US);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_a_sample_clears_it() {
        let mut r = Rtt::default();
        r.sample(100_000);
        r.back_off();
        assert_eq!(r.rto_us(), 600_000);
        for _ in 0..40 {
            r.back_off();
        }
        assert_eq!(r.rto_us(), MAX_RTO_US);
        r.sample(100_000);
        assert_eq!(r.backoffs(), 0);
        assert!(r.rto_us() < 1_000_000);
    }
}
