//! Receive-buffer autotuning, after Linux's `tcp_rcv_space_adjust` ("dynamic right-sizing",
//! Fisk and Feng): once per round trip the receiver measures how many bytes its application
//! took in that round trip; when it took more than in any round trip before, the receive
//! buffer grows to twice that (room for the sender's window to double again, as in slow
//! start) plus sixteen segments. A buffer the application set itself (`SO_RCVBUF`) is never
//! tuned, as on Linux.
//!
//! Without it the window is the configured buffer (256 KiB): on a 40 ms round trip that caps
//! a connection near 50 Mbit/s, where Linux grows its buffer towards 6 MiB. The growth is
//! bounded by [`super::TcpConfig::rcv_buf_max`], by what the agreed window scale can
//! express, and by the pool the receive queue holds its segments in (see
//! `Conn::autotune_rcv_buf`): a buffer is only a promise, the pool is the memory.

use super::seq::Seq;
use crate::buf::BufferPool;

/// The most one connection's buffer may grow to in one direction: an eighth of the pool's
/// buffers, each holding one segment of `smss` bytes.
pub fn pool_share<P: BufferPool + ?Sized>(pool: &P, smss: u32) -> u32 {
    u32::try_from(pool.total() / 8)
        .unwrap_or(u32::MAX)
        .saturating_mul(smss)
}

/// What the tuner remembers between measurements (12 bytes of connection state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcvSpace {
    /// The application's read position when this measurement began.
    start: Seq,
    /// When it began (milliseconds, wrapping).
    at_ms: u32,
    /// The most the application took in one round trip so far; 0 until the first
    /// measurement begins.
    space: u32,
}

/// The shape of one measurement's inputs.
#[derive(Clone, Copy, Debug)]
pub struct Look {
    /// The application's read position now (every byte before it was taken).
    pub taken_to: Seq,
    /// Now (milliseconds, wrapping).
    pub now_ms: u32,
    /// The receiver's round-trip time (milliseconds; 0 is taken as 1).
    pub rtt_ms: u32,
    /// The receive buffer now.
    pub rcv_buf: u32,
    /// The segment size.
    pub smss: u32,
    /// The most the buffer may grow to.
    pub ceiling: u32,
}

impl RcvSpace {
    /// Looks at the application's progress; returns the buffer to grow to, if the round
    /// trip measured now calls for a larger one.
    pub fn look(&mut self, l: Look) -> Option<u32> {
        if self.space == 0 {
            // The first measurement starts here, expecting an initial window's worth
            // (ten segments, Linux's TCP_INIT_CWND) per round trip.
            *self = RcvSpace {
                start: l.taken_to,
                at_ms: l.now_ms,
                space: 10 * l.smss.max(1),
            };
            return None;
        }
        if l.now_ms.wrapping_sub(self.at_ms) < l.rtt_ms.max(1) {
            return None;
        }
        let copied = l.taken_to.since(self.start);
        let mut grow = None;
        if copied > self.space {
            let want = copied
                .saturating_mul(2)
                .saturating_add(16 * l.smss)
                .min(l.ceiling);
            if want > l.rcv_buf {
                grow = Some(want);
            }
            self.space = copied;
        }
        self.start = l.taken_to;
        self.at_ms = l.now_ms;
        grow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(taken_to: u32, now_ms: u32, rcv_buf: u32) -> Look {
        Look {
            taken_to: Seq(taken_to),
            now_ms,
            rtt_ms: 40,
            rcv_buf,
            smss: 1448,
            ceiling: 4 << 20,
        }
    }

    #[test]
    fn a_reader_that_keeps_up_doubles_the_buffer_per_round_trip_up_to_the_ceiling() {
        let mut s = RcvSpace::default();
        assert_eq!(
            s.look(look(1000, 0, 256 << 10)),
            None,
            "the first look starts"
        );
        // Within the round trip: nothing measured.
        assert_eq!(s.look(look(200_000, 39, 256 << 10)), None);
        // A window-limited reader takes the whole buffer each round trip.
        let mut buf = 256u32 << 10;
        let mut at = 1000u32;
        let mut grown = Vec::new();
        for rtt in 1..=8u32 {
            at += buf;
            if let Some(b) = s.look(look(at, 40 * rtt, buf)) {
                assert!(b > buf);
                buf = b;
                grown.push(b);
            }
        }
        assert!(grown.len() >= 3, "grew {grown:?}");
        assert_eq!(buf, 4 << 20, "to the ceiling");
    }

    #[test]
    fn a_slow_reader_never_grows_it() {
        let mut s = RcvSpace::default();
        s.look(look(0, 0, 256 << 10));
        for rtt in 1..=20u32 {
            // Five segments per round trip: under the initial ten.
            assert_eq!(s.look(look(rtt * 5 * 1448, 40 * rtt, 256 << 10)), None);
        }
    }

    #[test]
    fn sequence_and_clock_wrap_around() {
        let mut s = RcvSpace::default();
        s.look(look(u32::MAX - 1000, u32::MAX - 10, 64 << 10));
        let g = s.look(look((u32::MAX - 1000).wrapping_add(300_000), 35, 64 << 10));
        assert_eq!(g, Some(2 * 300_000 + 16 * 1448));
    }
}
