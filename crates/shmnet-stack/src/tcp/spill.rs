//! What an application wrote before it went away, past its connection's send buffer: kept
//! in the stack's own memory and queued as ACKs make room, the connection's FIN after it.
//!
//! A server's application may die (or drop its client) with sends its server had no room
//! for yet, held in the application's memory — which goes with it. The kernel sends what a
//! process wrote before it exited; so must we. Queuing it all into the pool at once, past
//! the send buffer, once let one dead writer take more buffers than the pool had to spare
//! (bytes were lost beside a receive window that autotuning had grown). Instead the bytes the
//! send buffer cannot take now are copied here (a rare event, off the data path's normal
//! course: the allocation happens once, when the application goes) and go into the send queue
//! under its usual limit, as the peer acknowledges what is ahead of them. A shutdown or close
//! the application asked for after them waits for the last byte.
//!
//! All spills together hold at most [`MAX_SPILLED`] bytes, one connection's at most
//! [`MAX_SPILL`]; past either, bytes are refused and counted (`spill_refused`) and the
//! connection is reset, so its peer never takes a cut stream for a whole one: a hostile
//! application that parks gigabytes and dies cannot make the server allocate them. A spill
//! that a peer stops taking (a zero window, kept open by answered probes) is given up after
//! [`SPILL_PATIENCE_NS`] without progress and its connection reset, as Linux gives up an
//! orphaned socket's probes (`tcp_orphan_retries`): one peer cannot hold the budget for
//! ever. Spills that found no room (no pool buffer) are tried again every
//! [`SPILL_RETRY_NS`], not only when their connection hears from its peer.

use crate::Instant;

/// The most bytes every spill together holds (64 MiB: sixteen applications' 4 MiB of parked
/// sends).
pub const MAX_SPILLED: usize = 64 << 20;

/// The most bytes one connection's spill holds.
pub const MAX_SPILL: usize = 16 << 20;

/// How long a spill may make no progress before its connection is reset.
pub const SPILL_PATIENCE_NS: u64 = 120_000_000_000;

/// How often spills are tried again whatever happens on their connections (nanoseconds).
pub const SPILL_RETRY_NS: u64 = 10_000_000;

/// When spills are next tried again, from `now`.
pub(crate) fn retry_at(now: Instant) -> Instant {
    Instant::from_nanos(now.nanos() + SPILL_RETRY_NS)
}

/// What follows a spill's last byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    /// Nothing was asked yet.
    Nothing,
    /// The application shut its sending side: a FIN.
    Shutdown,
    /// The application closed the connection: a FIN, and the connection is freed once
    /// closed (it is already orphaned).
    Close,
}

/// One connection's bytes waiting for its send buffer.
#[derive(Debug)]
struct Spill {
    /// The connection's slot (spills are dropped when the slot is freed, before it can be
    /// reused).
    idx: u32,
    bytes: Vec<u8>,
    /// Bytes of `bytes` already queued.
    sent: usize,
    then: After,
    /// When bytes last left it for the send queue (or it was made).
    progress: Instant,
}

/// Every connection's spill (few: only connections of applications that went away).
#[derive(Debug, Default)]
pub(crate) struct Spills {
    list: Vec<Spill>,
    held: usize,
}

impl Spills {
    /// Whether no connection has a spill (the data path's only look at them).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether connection `idx` has a spill: new bytes go behind it, not into the queue.
    pub(crate) fn holds(&self, idx: u32) -> bool {
        self.list.iter().any(|s| s.idx == idx)
    }

    /// Whether connection `idx`'s application shut its sending side or closed behind its
    /// spill: it may send nothing more.
    pub(crate) fn ended(&self, idx: u32) -> bool {
        self.list
            .iter()
            .any(|s| s.idx == idx && s.then != After::Nothing)
    }

    /// Appends `data` to connection `idx`'s spill (made if it has none) at `now`. Returns how
    /// many bytes it took: fewer than `data.len()` when its spill or every spill together is
    /// full.
    pub(crate) fn add(&mut self, idx: u32, data: &[u8], now: Instant) -> usize {
        let at = self.list.iter().position(|s| s.idx == idx);
        let own = at.map_or(0, |i| self.list[i].bytes.len() - self.list[i].sent);
        let n = data
            .len()
            .min(MAX_SPILLED - self.held)
            .min(MAX_SPILL.saturating_sub(own));
        if n == 0 {
            return 0;
        }
        self.held += n;
        match at {
            Some(i) => self.list[i].bytes.extend_from_slice(&data[..n]),
            None => self.list.push(Spill {
                idx,
                bytes: data[..n].to_vec(),
                sent: 0,
                then: After::Nothing,
                progress: now,
            }),
        }
        n
    }

    /// The connection of the `i`th spill (in no particular order), to try them all again.
    pub(crate) fn idx_at(&self, i: usize) -> Option<u32> {
        self.list.get(i).map(|s| s.idx)
    }

    /// A connection whose spill made no progress for [`SPILL_PATIENCE_NS`] at `now`.
    pub(crate) fn stalled(&self, now: Instant) -> Option<u32> {
        self.list
            .iter()
            .find(|s| now.nanos().saturating_sub(s.progress.nanos()) > SPILL_PATIENCE_NS)
            .map(|s| s.idx)
    }

    /// Records that `then` follows connection `idx`'s spill; `false` if it has none (the
    /// caller does it now). A close outranks a shutdown.
    pub(crate) fn defer(&mut self, idx: u32, then: After) -> bool {
        let Some(s) = self.list.iter_mut().find(|s| s.idx == idx) else {
            return false;
        };
        if s.then != After::Close {
            s.then = then;
        }
        true
    }

    /// Connection `idx`'s waiting bytes, for `queue` to take what it can (it returns how
    /// many) at `now`. When all are taken the spill ends and what was to follow it is
    /// returned.
    pub(crate) fn drain(
        &mut self,
        idx: u32,
        now: Instant,
        queue: impl FnOnce(&[u8]) -> usize,
    ) -> Option<After> {
        let i = self.list.iter().position(|s| s.idx == idx)?;
        let s = &mut self.list[i];
        let n = queue(&s.bytes[s.sent..]).min(s.bytes.len() - s.sent);
        s.sent += n;
        if n > 0 {
            s.progress = now;
        }
        if s.sent < s.bytes.len() {
            return None;
        }
        let done = self.list.swap_remove(i);
        self.held -= done.bytes.len();
        Some(done.then)
    }

    /// Drops connection `idx`'s spill (it was reset, or freed).
    pub(crate) fn drop_for(&mut self, idx: u32) {
        if let Some(i) = self.list.iter().position(|s| s.idx == idx) {
            let s = self.list.swap_remove(i);
            self.held -= s.bytes.len();
        }
    }

    /// Drops every spill.
    pub(crate) fn clear(&mut self) {
        self.list.clear();
        self.held = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spill_drains_in_order_and_hands_back_what_follows_it() {
        let mut s = Spills::default();
        let t = Instant::from_nanos(1);
        assert_eq!(s.add(3, b"hello ", t), 6);
        assert_eq!(s.add(3, b"world", t), 5);
        assert!(s.holds(3) && !s.holds(4));
        assert!(s.defer(3, After::Close));
        assert!(s.defer(3, After::Shutdown), "a close is not downgraded");
        let mut out = Vec::new();
        assert_eq!(
            s.drain(3, t, |b| {
                out.extend_from_slice(&b[..4]);
                4
            }),
            None
        );
        assert!(s.ended(3));
        assert_eq!(
            s.drain(3, t, |b| {
                out.extend_from_slice(b);
                b.len()
            }),
            Some(After::Close)
        );
        assert_eq!(out, b"hello world");
        assert!(s.is_empty() && s.held == 0);
        assert!(!s.defer(3, After::Close), "no spill: the caller acts now");
    }

    #[test]
    fn every_spill_together_and_each_alone_is_bounded() {
        let mut s = Spills::default();
        let t = Instant::from_nanos(1);
        let big = vec![7u8; MAX_SPILL];
        for idx in 0..(MAX_SPILLED / MAX_SPILL) as u32 {
            assert_eq!(s.add(idx, &big, t), MAX_SPILL);
        }
        assert_eq!(s.add(0, &[0u8; 30], t), 0, "its own bound");
        assert_eq!(s.add(99, &[0u8; 30], t), 0, "every spill's bound");
        s.drop_for(1);
        assert_eq!(s.add(99, &[0u8; 30], t), 30);
        s.clear();
        assert!(s.is_empty() && s.held == 0);
    }

    #[test]
    fn a_spill_without_progress_is_found_stalled() {
        let mut s = Spills::default();
        let t0 = Instant::from_nanos(1);
        s.add(5, b"abc", t0);
        let later = Instant::from_nanos(1 + SPILL_PATIENCE_NS / 2);
        assert_eq!(s.stalled(later), None);
        assert_eq!(s.drain(5, later, |_| 1), None, "progress at `later`");
        let t = Instant::from_nanos(1 + SPILL_PATIENCE_NS + 2);
        assert_eq!(s.stalled(t), None, "it moved half a patience ago");
        let t = Instant::from_nanos(2 + SPILL_PATIENCE_NS / 2 + SPILL_PATIENCE_NS);
        assert_eq!(s.stalled(t), Some(5));
        assert_eq!(s.idx_at(0), Some(5));
        assert_eq!(s.idx_at(1), None);
    }
}
