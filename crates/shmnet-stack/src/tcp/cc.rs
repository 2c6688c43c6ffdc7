//! Congestion control: slow start, congestion avoidance, fast retransmit and NewReno fast
//! recovery (RFC 5681, RFC 6582), with the initial window of RFC 6928 (ten segments).
//!
//! The controller sees only events (bytes newly acknowledged, a duplicate ACK, a timeout)
//! and answers with the window; the connection decides what to send. The controller is a
//! trait-free struct for now; CUBIC (RFC 9438) will be the second implementation behind the
//! same events.

use super::seq::Seq;

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

/// NewReno state.
///
/// Invariant: `cwnd >= smss` (one segment can always be sent); `recover` is meaningful only
/// while `in_recovery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
        }
    }

    /// `acked` bytes of new data were acknowledged up to `ack`; `flight` bytes were in
    /// flight before this ACK.
    pub fn on_ack(&mut self, ack: Seq, acked: u32, flight: u32, smss: u16) -> AckAction {
        let smss = u32::from(smss.max(1));
        self.dupacks = 0;
        if self.in_recovery {
            if ack.ge(self.recover) {
                // Full acknowledgement: leave recovery (RFC 6582 (3.2) step 5, option 1).
                self.in_recovery = false;
                self.cwnd = self
                    .ssthresh
                    .min(flight.saturating_sub(acked) + smss)
                    .max(smss);
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
            // Slow start, with appropriate byte counting (RFC 3465, L = 2 segments).
            self.cwnd = self.cwnd.saturating_add(acked.min(2 * smss));
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
        self.ssthresh = (flight / 2).max(2 * smss);
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
        self.ssthresh = (flight / 2).max(2 * smss);
        self.cwnd = smss;
        self.dupacks = 0;
        self.in_recovery = false;
        self.acked_in_ca = 0;
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

    #[test]
    fn slow_start_grows_by_at_most_two_segments_per_ack() {
        let mut c = NewReno::new(MSS);
        assert_eq!(c.cwnd, 10_000);
        c.on_ack(Seq(1000), 1000, 10_000, MSS);
        assert_eq!(c.cwnd, 11_000);
        c.on_ack(Seq(9000), 8000, 10_000, MSS);
        assert_eq!(c.cwnd, 13_000);
    }

    #[test]
    fn congestion_avoidance_adds_one_segment_per_window() {
        let mut c = NewReno::new(MSS);
        c.ssthresh = 10_000;
        for i in 0..10 {
            c.on_ack(Seq(1000 * (i + 1)), 1000, 10_000, MSS);
        }
        assert_eq!(c.cwnd, 11_000);
    }

    #[test]
    fn three_dupacks_enter_recovery_and_a_full_ack_leaves_it() {
        let mut c = NewReno::new(MSS);
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
            c.on_ack(Seq(3_000), 3_000, flight, MSS),
            AckAction::RetransmitFirst
        );
        assert!(c.in_recovery);
        // The full ACK ends recovery with cwnd <= ssthresh.
        assert_eq!(c.on_ack(Seq(10_000), 7_000, 7_000, MSS), AckAction::None);
        assert!(!c.in_recovery);
        assert!(c.cwnd <= c.ssthresh && c.cwnd >= u32::from(MSS));
    }

    #[test]
    fn a_timeout_collapses_the_window_to_one_segment() {
        let mut c = NewReno::new(MSS);
        c.on_timeout(20_000, MSS);
        assert_eq!(c.cwnd, 1000);
        assert_eq!(c.ssthresh, 10_000);
    }
}
