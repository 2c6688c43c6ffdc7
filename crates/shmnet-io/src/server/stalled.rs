//! Requests an application queued that must wait their turn in the server: a send whose
//! handle missed in the lookup cache (`--on-miss buffer`), a datagram whose receiver on
//! this host is full (host-local flow control, `shmnet_stack::Interface::udp_local_wait`).
//! They have left the application's request ring already; here they keep their order and
//! go before anything behind them, so the application's requests are carried out in the
//! order it made them, and while any wait nothing newer is taken (the ring fills and the
//! application's sends wait for room, as a blocking send waits for a full socket).

use super::transport::BURST;
use shmnet_chan::Desc;

/// Requests taken off an application's ring that wait, oldest first.
///
/// Invariant: `n <= BURST`; `descs[..n]` are the held requests in the order they were made.
pub(crate) struct Stalled {
    descs: [Desc; BURST],
    n: usize,
}

impl Stalled {
    pub(crate) fn new() -> Self {
        Self {
            descs: [Desc::default(); BURST],
            n: 0,
        }
    }

    /// Whether any request waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Copies the oldest waiting requests into `batch` (as many as fit); returns how many.
    /// They stay held until [`Stalled::settle`] says they went.
    pub(crate) fn fill(&self, batch: &mut [Desc]) -> usize {
        let k = self.n.min(batch.len());
        batch[..k].copy_from_slice(&self.descs[..k]);
        k
    }

    /// After `batch[..n]` was tried and its first `took` were carried out: a batch that came
    /// from [`Stalled::fill`] loses those from the front of the held list; a batch fresh
    /// from the ring (nothing was held) leaves its untried rest held.
    pub(crate) fn settle(&mut self, batch: &[Desc], n: usize, took: usize, from_held: bool) {
        debug_assert!(took <= n && n <= BURST);
        if from_held {
            self.descs.copy_within(took..self.n, 0);
            self.n -= took;
        } else if took < n {
            self.descs[..n - took].copy_from_slice(&batch[took..n]);
            self.n = n - took;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(i: u32) -> Desc {
        Desc::new(i, 0)
    }

    #[test]
    fn held_requests_keep_their_order_and_leave_from_the_front() {
        let mut s = Stalled::new();
        let fresh = [d(1), d(2), d(3), d(4)];
        s.settle(&fresh, 4, 1, false);
        let mut batch = [Desc::default(); BURST];
        assert_eq!(s.fill(&mut batch[..2]), 2);
        assert_eq!(&batch[..2], &[d(2), d(3)]);
        // Of the two tried, one went: 3 and 4 are still held, in order.
        s.settle(&batch, 2, 1, true);
        let n = s.fill(&mut batch);
        assert_eq!(&batch[..n], &[d(3), d(4)]);
        s.settle(&batch, n, n, true);
        assert!(s.is_empty());
    }

    #[test]
    fn a_fresh_batch_that_all_went_holds_nothing() {
        let mut s = Stalled::new();
        s.settle(&[d(7), d(8)], 2, 2, false);
        assert!(s.is_empty());
    }
}
