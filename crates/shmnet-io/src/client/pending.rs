//! Deliveries read off the receive ring for a socket other than the one being read, kept
//! per socket in ring order until their socket is read.
//!
//! Data deliveries need no bound here: each holds a posted buffer (`--isolation regions`,
//! claimed once in the posted bitmap) or a chain of the server's pool (`shared`), so their
//! number is bounded by that memory. Events hold nothing, so a server repeating them could
//! grow the queues without end: they are counted, and refused past [`MAX_HELD_EVENTS`].

use rustc_hash::FxHashMap;
use shmnet_chan::Desc;
use std::collections::VecDeque;

/// Events kept at most (four per socket number: an honest server sends a connection at most
/// `Connected`, `Eof` or `Failed`, and `Released`; a listener's `Accepted` are bounded by
/// the connections, which are bounded by the numbers).
pub(super) const MAX_HELD_EVENTS: usize = 4 << 16;

/// Per-socket queues of deliveries and events.
///
/// Invariant: `events` is the number of event descriptors in `queues`, `data` the number
/// of the others (deliveries, each holding receive memory).
#[derive(Default)]
pub(super) struct Pending {
    /// By socket number (Fx: a small integer key looked up per delivery).
    queues: FxHashMap<u16, VecDeque<Desc>>,
    events: usize,
    data: usize,
}

impl Pending {
    /// Queues `d` for socket `sock`; `false` (and nothing kept) if it is an event past the
    /// bound.
    pub(super) fn push(&mut self, sock: u16, d: Desc) -> bool {
        if is_event(&d) {
            if self.events >= MAX_HELD_EVENTS {
                return false;
            }
            self.events += 1;
        } else {
            self.data += 1;
        }
        self.queues.entry(sock).or_default().push_back(d);
        true
    }

    /// The sockets something is held for.
    pub(super) fn sockets(&self) -> impl Iterator<Item = u16> + '_ {
        self.queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&s, _)| s)
    }

    /// Deliveries held (each holds receive memory), over every socket.
    pub(super) fn data(&self) -> usize {
        self.data
    }

    /// The oldest item kept for `sock`.
    #[inline]
    pub(super) fn pop(&mut self, sock: u16) -> Option<Desc> {
        // A receiver keeping up holds nothing: no lookup then.
        if self.data == 0 && self.events == 0 {
            return None;
        }
        let d = self.queues.get_mut(&sock)?.pop_front()?;
        if is_event(&d) {
            self.events -= 1;
        } else {
            self.data -= 1;
        }
        Some(d)
    }

    /// Everything kept for `sock`, taken out.
    pub(super) fn take(&mut self, sock: u16) -> VecDeque<Desc> {
        let q = self.queues.remove(&sock).unwrap_or_default();
        let events = q.iter().filter(|d| is_event(d)).count();
        self.events -= events;
        self.data -= q.len() - events;
        q
    }

    /// Whether an item kept for `sock` satisfies `f`.
    pub(super) fn any(&self, sock: u16, f: impl Fn(&Desc) -> bool) -> bool {
        self.queues.get(&sock).is_some_and(|q| q.iter().any(f))
    }
}

fn is_event(d: &Desc) -> bool {
    d.len & crate::windows::RX_EVENT != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: u32) -> Desc {
        Desc {
            len: n,
            ..Desc::default()
        }
    }

    fn event() -> Desc {
        Desc {
            len: crate::windows::RX_EVENT,
            ..Desc::default()
        }
    }

    #[test]
    fn events_are_counted_through_every_way_out() {
        let mut p = Pending::default();
        assert!(p.push(1, data(5)));
        assert!(p.push(1, event()));
        assert!(p.push(2, event()));
        assert_eq!(p.events, 2);
        assert_eq!(p.pop(1).map(|d| d.len), Some(5));
        assert_eq!(p.events, 2);
        assert!(p.pop(1).is_some());
        assert_eq!(p.events, 1);
        assert_eq!(p.take(2).len(), 1);
        assert_eq!(p.events, 0);
        assert!(p.pop(3).is_none());
    }

    #[test]
    fn data_is_never_refused_and_events_stop_at_the_bound() {
        let mut p = Pending::default();
        for i in 0..MAX_HELD_EVENTS {
            assert!(p.push((i % 7) as u16, event()));
        }
        assert!(!p.push(0, event()), "one event past the bound");
        assert!(
            p.push(0, data(1)),
            "data holds memory of its own: never refused here"
        );
        assert!(p.any(0, |d| d.len == 1));
    }
}
