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
//! All spills together hold at most [`MAX_SPILLED`] bytes; past it, bytes are refused and
//! counted (`spill_refused`): a hostile application that parks gigabytes and dies cannot
//! make the server allocate them.

/// The most bytes every spill together holds (64 MiB: sixteen applications' 4 MiB of parked
/// sends).
pub const MAX_SPILLED: usize = 64 << 20;

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

    /// Appends `data` to connection `idx`'s spill (made if it has none). Returns how many
    /// bytes it took: fewer than `data.len()` when every spill together is full.
    pub(crate) fn add(&mut self, idx: u32, data: &[u8]) -> usize {
        let n = data.len().min(MAX_SPILLED - self.held);
        if n == 0 {
            return 0;
        }
        self.held += n;
        match self.list.iter_mut().find(|s| s.idx == idx) {
            Some(s) => s.bytes.extend_from_slice(&data[..n]),
            None => self.list.push(Spill {
                idx,
                bytes: data[..n].to_vec(),
                sent: 0,
                then: After::Nothing,
            }),
        }
        n
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
    /// many). When all are taken the spill ends and what was to follow it is returned.
    pub(crate) fn drain(&mut self, idx: u32, queue: impl FnOnce(&[u8]) -> usize) -> Option<After> {
        let i = self.list.iter().position(|s| s.idx == idx)?;
        let s = &mut self.list[i];
        let n = queue(&s.bytes[s.sent..]).min(s.bytes.len() - s.sent);
        s.sent += n;
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
        assert_eq!(s.add(3, b"hello "), 6);
        assert_eq!(s.add(3, b"world"), 5);
        assert!(s.holds(3) && !s.holds(4));
        assert!(s.defer(3, After::Close));
        assert!(s.defer(3, After::Shutdown), "a close is not downgraded");
        let mut out = Vec::new();
        assert_eq!(
            s.drain(3, |b| {
                out.extend_from_slice(&b[..4]);
                4
            }),
            None
        );
        assert_eq!(
            s.drain(3, |b| {
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
    fn every_spill_together_is_bounded() {
        let mut s = Spills::default();
        let big = vec![7u8; MAX_SPILLED - 10];
        assert_eq!(s.add(1, &big), big.len());
        assert_eq!(s.add(2, &[0u8; 30]), 10, "only what is left of the bound");
        assert_eq!(s.add(2, &[0u8; 30]), 0);
        s.drop_for(1);
        assert_eq!(s.add(2, &[0u8; 30]), 30);
        s.clear();
        assert!(s.is_empty() && s.held == 0);
    }
}
