//! Congestion control: slow start, fast retransmit and NewReno fast recovery (RFC 5681, RFC
//! 6582), the initial window of RFC 6928 (ten segments), and two ways to grow the window in
//! congestion avoidance: CUBIC (RFC 9438, the default, as on Linux) or Reno's one segment per
//! round trip.
//!
//! The controller sees only events (bytes newly acknowledged, a duplicate ACK, a timeout)
//! and answers with the window; the connection decides what to send. Both algorithms share
//! the recovery machinery and differ in two places: the window after a loss (CUBIC keeps
//! β = 0.7 of it, Reno half) and its growth afterwards (CUBIC's cubic curve towards the
//! window at the last loss, bounded below by Reno's rate as RFC 9438 §4.3 says).

use super::seq::Seq;
use crate::Instant;

/// Duplicate ACKs that trigger fast retransmit (RFC 5681 section 3.2).
pub const DUPACK_THRESHOLD: u8 = 3;

/// What the controller asks the connection to do after a duplicate ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DupAckAction {
    /// Nothing (fewer than three duplicates, or already recovering).
    None,
    /// Retransmit the first unacknowledged segment now: fast recovery began.
    FastRetransmit,
}

/// What the controller asks after an ACK of new data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckAction {
    /// Carry on.
    None,
    /// A partial ACK during recovery (RFC 6582 (3.2) step 5): retransmit the first
    /// unacknowledged segment.
    RetransmitFirst,
}

/// How the window grows in congestion avoidance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// RFC 9438.
    #[default]
    Cubic,
    /// RFC 5681's one segment per window acknowledged.
    Reno,
}

/// CUBIC's constant C (segments per second cubed).
const CUBIC_C: f32 = 0.4;
/// CUBIC's multiplicative decrease.
const CUBIC_BETA: f32 = 0.7;

/// CUBIC's state between losses (RFC 9438 §4), in segments and seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Cubic {
    /// The window just before the last reduction.
    w_max: f32,
    /// Time from the epoch's start until the curve reaches `w_max` again.
    k: f32,
    /// When the current growth epoch began (the first ACK after a reduction).
    epoch: Option<Instant>,
    /// The window at the epoch's start.
    w_epoch: f32,
    /// Reno's window over the same time (the TCP-friendly bound).
    w_est: f32,
}

/// The congestion controller (named for its recovery, which both algorithms share).
///
/// Invariant: `cwnd >= smss` (one segment can always be sent); `recover` is meaningful only
/// while `in_recovery`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NewReno {
    /// Congestion window in bytes.
    pub cwnd: u32,
    /// Slow-start threshold in bytes.
    pub ssthresh: u32,
    /// Consecutive duplicate ACKs.
    pub dupacks: u8,
    /// In fast recovery.
    pub in_recovery: bool,
    /// The highest sequence number sent when recovery began (RFC 6582 `recover`).
    pub recover: Seq,
    /// Bytes acknowledged towards the next congestion-avoidance increase.
    acked_in_ca: u32,
    /// SACK is in use: recovery keeps `cwnd = ssthresh` and the scoreboard decides what to
    /// resend (RFC 6675), instead of NewReno's inflation and partial-ACK retransmission.
    pub sack: bool,
    /// How congestion avoidance grows the window.
    pub algorithm: Algorithm,
    cubic: Cubic,
    /// The window and threshold before the last recovery cut them (`prior_cwnd` 0: nothing
    /// to undo — none yet, or a timeout since).
    prior_cwnd: u32,
    prior_ssthresh: u32,
}

impl NewReno {
    /// A controller for segments of `smss` bytes.
    pub fn new(smss: u16) -> NewReno {
        let smss = u32::from(smss.max(1));
        NewReno {
            cwnd: initial_window(smss),
            ssthresh: u32::MAX,
            dupacks: 0,
            in_recovery: false,
            recover: Seq(0),
            acked_in_ca: 0,
            sack: false,
            algorithm: Algorithm::default(),
            cubic: Cubic::default(),
            prior_cwnd: 0,
            prior_ssthresh: 0,
        }
    }

    /// `acked` bytes of new data were acknowledged up to `ack` at `now`; `flight` bytes
    /// were in flight before this ACK; `srtt_us` is the smoothed round trip (0: none yet).
    pub fn on_ack(
        &mut self,
        ack: Seq,
        acked: u32,
        flight: u32,
        smss: u16,
        now: Instant,
        srtt_us: u32,
    ) -> AckAction {
        let smss = u32::from(smss.max(1));
        self.dupacks = 0;
        if self.in_recovery {
            if ack.ge(self.recover) {
                // Full acknowledgement: leave recovery. With SACK the window has been
                // ssthresh throughout and stays there (RFC 6675; Linux ends a reduction at
                // ssthresh too). Without, deflate (RFC 6582 (3.2) step 5, option 1):
                // min(ssthresh, max(FlightSize, SMSS) + SMSS). Deflating to what is still
                // out once left a SACK sender one segment wide after every recovery that
                // ended with all acknowledged, and a single loss then cost an RTO.
                self.in_recovery = false;
                self.cwnd = if self.sack {
                    self.ssthresh.max(smss)
                } else {
                    self.ssthresh
                        .min(flight.saturating_sub(acked).max(smss) + smss)
                };
                return AckAction::None;
            }
            if self.sack {
                return AckAction::None;
            }
            // Partial ACK: deflate by the amount acknowledged, add back one segment.
            self.cwnd = self
                .cwnd
                .saturating_sub(acked)
                .saturating_add(smss)
                .max(smss);
            return AckAction::RetransmitFirst;
        }
        if self.cwnd < self.ssthresh {
            // Slow start, counting every byte acknowledged (RFC 3465's byte counting, as
            // Linux's tcp_slow_start does, without RFC 3465's limit of L = 2 segments per
            // ACK), up to ssthresh. Receivers acknowledge a burst at once (ours, and Linux
            // with GRO: one ACK per 10 to 40 segments); with L = 2 such stretch ACKs grew
            // the window by two segments per round trip instead of doubling it — on a 40 ms
            // path, 8 MiB took 116 round trips. Counting bytes, not ACKs, still gives a
            // receiver that splits its ACKs nothing.
            self.cwnd = self
                .cwnd
                .saturating_add(acked.min(self.ssthresh - self.cwnd));
        } else if self.algorithm == Algorithm::Cubic {
            self.cubic_grow(acked, smss, now, srtt_us);
        } else {
            // Congestion avoidance: one segment per window of data acknowledged.
            self.acked_in_ca = self.acked_in_ca.saturating_add(acked);
            if self.acked_in_ca >= self.cwnd {
                self.acked_in_ca -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(smss);
            }
        }
        AckAction::None
    }

    /// RFC 9438 §4.2–4.4: the window follows W(t) = C·(t − K)³ + W_max, looking one round
    /// trip ahead, never below Reno's estimate and never more than half again per round
    /// trip.
    fn cubic_grow(&mut self, acked: u32, smss: u32, now: Instant, srtt_us: u32) {
        let seg = smss as f32;
        let cwnd = self.cwnd as f32 / seg;
        let c = &mut self.cubic;
        let epoch = *c.epoch.get_or_insert(now);
        if c.w_epoch == 0.0 {
            c.w_epoch = cwnd;
            c.w_est = cwnd;
            if c.w_max < cwnd {
                // No loss seen yet (or the window passed it): the curve starts here.
                c.w_max = cwnd;
                c.k = 0.0;
            }
        }
        let rtt = srtt_us as f32 / 1e6;
        let t = now.nanos().saturating_sub(epoch.nanos()) as f32 / 1e9 + rtt;
        let target = (CUBIC_C * (t - c.k).powi(3) + c.w_max).clamp(cwnd, 1.5 * cwnd);
        // Reno's window over the same time, at the rate RFC 9438 §4.3 gives (α_cubic).
        let alpha = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
        c.w_est += alpha * (acked as f32 / seg) / cwnd;
        let next = if target < c.w_est {
            c.w_est
        } else {
            cwnd + (target - cwnd) / cwnd * (acked as f32 / seg)
        };
        let bytes = (next * seg) as u32;
        self.cwnd = bytes.clamp(smss, u32::MAX / 2);
    }

    /// A loss: remember the window for CUBIC's curve and return the threshold to fall to.
    fn reduce(&mut self, flight: u32, smss: u32) -> u32 {
        match self.algorithm {
            Algorithm::Reno => (flight / 2).max(2 * smss),
            Algorithm::Cubic => {
                let seg = smss as f32;
                let w = self.cwnd.max(flight) as f32 / seg;
                let c = &mut self.cubic;
                // Fast convergence (RFC 9438 §4.7): a loss before the last peak releases room.
                c.w_max = if w < c.w_max {
                    w * (1.0 + CUBIC_BETA) / 2.0
                } else {
                    w
                };
                c.k = (c.w_max * (1.0 - CUBIC_BETA) / CUBIC_C).cbrt();
                c.epoch = None;
                c.w_epoch = 0.0;
                ((flight as f32 * CUBIC_BETA) as u32).max(2 * smss)
            }
        }
    }

    /// A duplicate ACK arrived; `snd_max` is the highest sequence number sent and `flight`
    /// the bytes in flight.
    pub fn on_dupack(&mut self, snd_max: Seq, flight: u32, smss: u16) -> DupAckAction {
        let smss = u32::from(smss.max(1));
        if self.in_recovery {
            // Inflate: each duplicate means a segment left the network (with SACK the pipe
            // estimate counts that instead).
            if !self.sack {
                self.cwnd = self.cwnd.saturating_add(smss);
            }
            return DupAckAction::None;
        }
        self.dupacks = self.dupacks.saturating_add(1);
        if self.dupacks < DUPACK_THRESHOLD {
            return DupAckAction::None;
        }
        self.enter_recovery(snd_max, flight, smss as u16);
        DupAckAction::FastRetransmit
    }

    /// Loss detected with `flight` bytes out and `snd_max` the highest sent: halve.
    pub fn enter_recovery(&mut self, snd_max: Seq, flight: u32, smss: u16) {
        let smss = u32::from(smss.max(1));
        self.prior_cwnd = self.cwnd;
        self.prior_ssthresh = self.ssthresh;
        self.ssthresh = self.reduce(flight, smss);
        self.cwnd = if self.sack {
            self.ssthresh
        } else {
            self.ssthresh + u32::from(DUPACK_THRESHOLD) * smss
        };
        self.in_recovery = true;
        self.recover = snd_max;
        self.dupacks = 0;
    }

    /// The retransmission timer fired with `flight` bytes outstanding (RFC 5681 (4)).
    pub fn on_timeout(&mut self, flight: u32, smss: u16) {
        let smss = u32::from(smss.max(1));
        self.ssthresh = self.reduce(flight, smss);
        self.cwnd = smss;
        self.dupacks = 0;
        self.in_recovery = false;
        self.acked_in_ca = 0;
        self.prior_cwnd = 0;
    }

    /// Everything in flight is to go again for a reason that is not congestion (a router
    /// said the path's MTU is smaller, and dropped it): leave recovery, keeping the window,
    /// so the resend is paced by `cwnd` over what is sent from now on (Linux's
    /// `tcp_simple_retransmit`).
    pub fn resend_all(&mut self) {
        self.dupacks = 0;
        self.in_recovery = false;
    }

    /// The last recovery was spurious — the peer already had every segment it resent (its
    /// DSACKs said so: RFC 2883, RFC 3708) —: give back the window and threshold it cut, and
    /// leave recovery. Returns whether there was a cut to undo.
    pub fn undo(&mut self) -> bool {
        if self.prior_cwnd == 0 {
            return false;
        }
        self.cwnd = self.cwnd.max(self.prior_cwnd);
        self.ssthresh = self.ssthresh.max(self.prior_ssthresh);
        self.in_recovery = false;
        self.dupacks = 0;
        // CUBIC's curve starts again from the window given back, as if no loss was seen.
        self.cubic = Cubic::default();
        self.prior_cwnd = 0;
        true
    }

    /// The connection was idle longer than a timeout (RFC 5681 section 4.1): restart from
    /// the initial window.
    pub fn on_idle_restart(&mut self, smss: u16) {
        self.cwnd = self.cwnd.min(initial_window(u32::from(smss.max(1))));
    }
}

/// RFC 6928: min(10·MSS, max(2·MSS, 14,600)).
fn initial_window(smss: u32) -> u32 {
    (10 * smss).min((2 * smss).max(14_600))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u16 = 1000;

    fn reno() -> NewReno {
        let mut c = NewReno::new(MSS);
        c.algorithm = Algorithm::Reno;
        c
    }

    #[test]
    fn slow_start_counts_every_byte_acknowledged_up_to_ssthresh() {
        let mut c = reno();
        assert_eq!(c.cwnd, 10_000);
        c.on_ack(Seq(1000), 1000, 10_000, MSS, Instant::ZERO, 0);
        assert_eq!(c.cwnd, 11_000);
        // A stretch ACK of eight segments: eight segments more.
        c.on_ack(Seq(9000), 8000, 10_000, MSS, Instant::ZERO, 0);
        assert_eq!(c.cwnd, 19_000);
        c.ssthresh = 20_000;
        c.on_ack(Seq(17_000), 8000, 19_000, MSS, Instant::ZERO, 0);
        assert_eq!(c.cwnd, 20_000, "no further than ssthresh");
    }

    #[test]
    fn congestion_avoidance_adds_one_segment_per_window() {
        let mut c = reno();
        c.ssthresh = 10_000;
        for i in 0..10 {
            c.on_ack(Seq(1000 * (i + 1)), 1000, 10_000, MSS, Instant::ZERO, 0);
        }
        assert_eq!(c.cwnd, 11_000);
    }

    #[test]
    fn three_dupacks_enter_recovery_and_a_full_ack_leaves_it() {
        let mut c = reno();
        let flight = 10_000;
        assert_eq!(c.on_dupack(Seq(10_000), flight, MSS), DupAckAction::None);
        assert_eq!(c.on_dupack(Seq(10_000), flight, MSS), DupAckAction::None);
        assert_eq!(
            c.on_dupack(Seq(10_000), flight, MSS),
            DupAckAction::FastRetransmit
        );
        assert_eq!(c.ssthresh, 5_000);
        assert_eq!(c.cwnd, 8_000);
        c.on_dupack(Seq(10_000), flight, MSS);
        assert_eq!(c.cwnd, 9_000);
        // A partial ACK asks for the next hole.
        assert_eq!(
            c.on_ack(Seq(3_000), 3_000, flight, MSS, Instant::ZERO, 0),
            AckAction::RetransmitFirst
        );
        assert!(c.in_recovery);
        // The full ACK ends recovery with cwnd <= ssthresh.
        assert_eq!(
            c.on_ack(Seq(10_000), 7_000, 7_000, MSS, Instant::ZERO, 0),
            AckAction::None
        );
        assert!(!c.in_recovery);
        assert!(c.cwnd <= c.ssthresh && c.cwnd >= u32::from(MSS));
    }

    #[test]
    fn cubic_keeps_seven_tenths_and_climbs_back_to_the_old_window_in_about_k_seconds() {
        let mut c = NewReno::new(MSS);
        assert_eq!(c.algorithm, Algorithm::Cubic);
        c.cwnd = 100_000;
        c.ssthresh = 100_000;
        let flight = 100_000;
        for _ in 0..3 {
            c.on_dupack(Seq(100_000), flight, MSS);
        }
        assert_eq!(c.ssthresh, 70_000, "β = 0.7");
        // Leave recovery, then ACK a window every 100 ms round trip (long enough that the
        // cubic curve, not the Reno-friendly bound, sets the pace).
        c.on_ack(Seq(100_000), 1000, flight, MSS, Instant::ZERO, 100_000);
        let k = (100.0f32 * 0.3 / 0.4).cbrt();
        let mut at_k = 0;
        let mut ms = 0u64;
        while ms < 20_000 {
            ms += 100;
            let now = Instant::from_millis(ms);
            let window = c.cwnd;
            let mut acked = 0;
            while acked < window {
                c.on_ack(Seq(0), 1000, window, MSS, now, 100_000);
                acked += 1000;
            }
            if at_k == 0 && c.cwnd >= 99_000 {
                at_k = ms;
            }
        }
        let secs = at_k as f32 / 1000.0;
        assert!(
            (secs - k).abs() < 0.35 * k,
            "back near W_max after {secs} s, K = {k} s"
        );
        assert!(
            c.cwnd > 100_000,
            "and beyond it afterwards (probing): {}",
            c.cwnd
        );
    }

    #[test]
    fn a_timeout_collapses_the_window_to_one_segment() {
        let mut c = reno();
        c.on_timeout(20_000, MSS);
        assert_eq!(c.cwnd, 1000);
        assert_eq!(c.ssthresh, 10_000);
    }
}
