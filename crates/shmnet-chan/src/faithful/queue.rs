//! Seed 002's IN and OUT queues ("Queues"): two sub-queues, each under its own
//! [`AsymMutex`], the Enable protocol that keeps dequeue order equal to enqueue order when
//! the producer changes sub-queue, and the consumer-idle condition variable whose wake-ups
//! are counting events.
//!
//! # The protocols
//!
//! - **Enqueue.** The producer enters its current sub-queue. If it cannot (it is the
//!   yielding side and the consumer is inside), it enters the *other* sub-queue, appends
//!   there, sets that sub-queue's `enabled` flag, and makes it its current one. The producer
//!   changes sub-queue only when blocked. If it cannot enter either, the elements are
//!   refused ([`Pushed::Busy`]: the seed's driver drops the packet and trusts a retry).
//! - **Dequeue.** The consumer takes from its current sub-queue; when that is empty it looks
//!   at the other's `enabled` flag, and if set it changes to it, clears the flag and takes
//!   from there.
//! - **Idle.** A consumer with nothing to do sets `idle`, looks again, and only then blocks
//!   on the counting [`Signal`]; a producer that appended reads `idle` and raises the signal
//!   when it is set. An event raised before the consumer blocks makes the block return at
//!   once, so none is lost; a `SeqCst` fence between each side's store and load makes the
//!   two looks a Dekker pair (see [`super::mutex`] on why a fence is needed today).
//!
//! # Why the order holds
//!
//! The producer changes from sub-queue A to B only when the consumer holds A, so the
//! consumer is on A then; it leaves A only when A is empty and B is enabled. So the
//! producer's and the consumer's current sub-queues differ by at most one change, everything
//! in A was appended before everything in B, and the consumer drains A before it reads B.
//! When the producer is later blocked on B, the consumer is on B and A is empty: the
//! producer's change back to A cannot overtake anything. loom checks this
//! (`faithful_queue_keeps_order_across_sub_queues`).
//!
//! An IN queue (driver → server) has a yielding producer and a waiting consumer; an OUT
//! queue (server → driver) the reverse. A waiting producer is blocked only when it gives up
//! on a holder that kept the lock for [`super::mutex::SPIN_LIMIT`] looks, so an OUT queue
//! uses one sub-queue unless the driver was stopped inside its critical section (order holds
//! either way); its yielding consumer that finds the lock taken reports nothing now and is
//! counted (`gave_up`).
//!
//! A producer changes sub-queue only when blocked, never when its sub-queue is full: the
//! queue holds at most one sub-queue's capacity at a time.
//!
//! # Untrusted peer
//!
//! A sub-queue's `head` and `tail` are free-running `u32` indices in shared memory; a
//! distance over the capacity is a lie, counted (`index_errors`) and treated as an empty
//! (consumer) or full (producer) sub-queue. The mutex's waiting side gives up on a holder
//! that never lets go ([`super::mutex::SPIN_LIMIT`]). Descriptors are returned as read:
//! unlike the rings' consumer, this one applies no [`crate::DescLimits`] (the queue is not
//! wired to a window's pools), so a caller that takes buffer indices from it must check them.

use super::mutex::{AsymMutex, SPIN_BEFORE_YIELD, Side};
use crate::desc::{Desc, DescSlot};
use crate::signal::Signal;
use crate::sync::{AtomicU32, CacheLine, Ordering, fence};
use std::sync::Arc;

/// One sub-queue's shared words: its mutex, the Enable flag, and its free-running indices
/// (`head`: next to take, `tail`: next to fill), all read and written inside the mutex
/// except `enabled` (set by the producer inside it, read by the consumer outside) and the
/// consumer's idle look at `head`/`tail`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SubQueue {
    mutex: AsymMutex,
    enabled: AtomicU32,
    head: AtomicU32,
    tail: AtomicU32,
}

/// The shared part of a queue: two sub-queues on their own cache lines, the idle flag on a
/// third, and each sub-queue's slots. `repr(C)` and made only of 32- and 64-bit atomics, so
/// zeroed memory is an empty queue and the layout could live in a window as the rings do.
#[derive(Debug)]
struct Shared {
    sub: [CacheLine<SubQueue>; 2],
    idle: CacheLine<AtomicU32>,
    slots: [Box<[DescSlot]>; 2],
    capacity: u32,
}

/// What an enqueue did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// This many elements appended (fewer than offered when the sub-queue filled).
    Took(usize),
    /// Neither sub-queue could be entered: nothing appended (the driver drops).
    Busy,
}

/// A producer's counters (private to it, never in shared memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProducerStats {
    /// Elements appended.
    pub enqueued: u64,
    /// Times the current sub-queue was held by the consumer and the producer changed to
    /// the other (the Enable protocol).
    pub switches: u64,
    /// Enqueues refused because neither sub-queue could be entered.
    pub busy: u64,
    /// Enqueues that found the sub-queue full.
    pub full: u64,
    /// Looks at a held lock (waiting side only).
    pub spins: u64,
    /// Entries that waited long enough to give the CPU away (waiting side only): the
    /// holder was most likely preempted inside its critical section.
    pub long_waits: u64,
    /// Events raised because the consumer was idle.
    pub wakeups_sent: u64,
    /// Impossible indices read from shared memory.
    pub index_errors: u64,
}

/// A consumer's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConsumerStats {
    /// Elements taken.
    pub dequeued: u64,
    /// Changes to the other sub-queue after finding it enabled.
    pub switches: u64,
    /// Dequeues that could not enter the sub-queue (yielding side only).
    pub gave_up: u64,
    /// Looks at a held lock (waiting side only).
    pub spins: u64,
    /// Entries that waited long enough to give the CPU away (waiting side only).
    pub long_waits: u64,
    /// Times it blocked on the signal.
    pub sleeps: u64,
    /// Impossible indices read from shared memory.
    pub index_errors: u64,
}

/// The producing end.
#[derive(Debug)]
pub struct FaithfulProducer {
    shared: Arc<Shared>,
    side: Side,
    current: usize,
    signal: Option<Arc<dyn Signal>>,
    stats: ProducerStats,
}

/// The consuming end.
#[derive(Debug)]
pub struct FaithfulConsumer {
    shared: Arc<Shared>,
    side: Side,
    current: usize,
    signal: Option<Arc<dyn Signal>>,
    stats: ConsumerStats,
}

/// Which way a queue runs, naming the seed's two kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Driver → server: the producer yields, the consumer waits.
    In,
    /// Server → driver: the producer waits, the consumer yields.
    Out,
}

/// Builds a queue of `capacity` slots per sub-queue (a power of two) on the heap. With a
/// `signal` the consumer can sleep ([`FaithfulConsumer::wait`]) and the producer raises it
/// when the consumer is idle.
pub fn faithful_queue(
    capacity: u32,
    direction: Direction,
    signal: Option<Arc<dyn Signal>>,
) -> (FaithfulProducer, FaithfulConsumer) {
    assert!(
        capacity.is_power_of_two(),
        "queue capacity must be a power of two"
    );
    let slots = || (0..capacity).map(|_| DescSlot::default()).collect();
    let shared = Arc::new(Shared {
        sub: Default::default(),
        idle: CacheLine::default(),
        slots: [slots(), slots()],
        capacity,
    });
    let (ps, cs) = match direction {
        Direction::In => (Side::Yielding, Side::Waiting),
        Direction::Out => (Side::Waiting, Side::Yielding),
    };
    (
        FaithfulProducer {
            shared: shared.clone(),
            side: ps,
            current: 0,
            signal: signal.clone(),
            stats: ProducerStats::default(),
        },
        FaithfulConsumer {
            shared,
            side: cs,
            current: 0,
            signal,
            stats: ConsumerStats::default(),
        },
    )
}

impl Shared {
    /// Elements in sub-queue `q` by its indices, `None` if they are impossible. Called
    /// inside `q`'s mutex (or, for the idle look, outside it: then only a hint).
    #[inline]
    fn count(&self, q: usize) -> Option<(u32, u32, u32)> {
        let s = &self.sub[q];
        let head = s.head.load(Ordering::Acquire);
        let tail = s.tail.load(Ordering::Acquire);
        let n = tail.wrapping_sub(head);
        (n <= self.capacity).then_some((head, tail, n))
    }

    #[inline]
    fn slot(&self, q: usize, i: u32) -> &DescSlot {
        &self.slots[q][(i & (self.capacity - 1)) as usize]
    }
}

impl FaithfulProducer {
    /// Appends as many of `descs` as fit, under one entry of the mutex.
    pub fn enqueue_burst(&mut self, descs: &[Desc]) -> Pushed {
        if descs.is_empty() {
            return Pushed::Took(0);
        }
        let sh = &*self.shared;
        let mut q = self.current;
        let spins = match self.side.enter(&sh.sub[q].mutex) {
            Some(s) => s,
            None => {
                // Blocked by the consumer: the Enable protocol's change of sub-queue.
                let other = 1 - q;
                match self.side.enter(&sh.sub[other].mutex) {
                    Some(s) => {
                        q = other;
                        s
                    }
                    None => {
                        self.stats.busy += 1;
                        return Pushed::Busy;
                    }
                }
            }
        };
        self.stats.spins += u64::from(spins);
        self.stats.long_waits += u64::from(spins >= SPIN_BEFORE_YIELD);
        let (took, corrupt) = match sh.count(q) {
            Some((_, tail, n)) => {
                let k = descs.len().min((sh.capacity - n) as usize);
                for (i, d) in descs[..k].iter().enumerate() {
                    sh.slot(q, tail.wrapping_add(i as u32)).write(*d);
                }
                sh.sub[q]
                    .tail
                    .store(tail.wrapping_add(k as u32), Ordering::Release);
                (k, false)
            }
            None => {
                self.stats.index_errors += 1;
                (0, true)
            }
        };
        if q != self.current {
            if took > 0 {
                sh.sub[q].enabled.store(1, Ordering::Release);
                self.current = q;
                self.stats.switches += 1;
            } else {
                // Nothing appended there: the change did not happen.
                self.stats.full += u64::from(!corrupt);
                self.side.leave(&sh.sub[q].mutex);
                return Pushed::Took(0);
            }
        }
        self.side.leave(&sh.sub[q].mutex);
        if took < descs.len() && !corrupt {
            self.stats.full += 1;
        }
        self.stats.enqueued += took as u64;
        if took > 0 {
            self.wake_if_idle();
        }
        Pushed::Took(took)
    }

    /// Appends one element: `true` if it was taken.
    pub fn enqueue(&mut self, d: Desc) -> bool {
        self.enqueue_burst(&[d]) == Pushed::Took(1)
    }

    /// The condition-variable protocol's producer half: raise an event if the consumer said
    /// it is idle.
    #[inline]
    fn wake_if_idle(&mut self) {
        let Some(sig) = &self.signal else { return };
        fence(Ordering::SeqCst);
        if self.shared.idle.load(Ordering::Acquire) == 1 {
            sig.raise();
            self.stats.wakeups_sent += 1;
        }
    }

    /// This end's counters.
    pub fn stats(&self) -> ProducerStats {
        self.stats
    }

    /// Which side of the mutexes this end plays.
    pub fn side(&self) -> Side {
        self.side
    }
}

impl FaithfulConsumer {
    /// Takes up to `out.len()` elements in enqueue order; returns how many.
    pub fn dequeue_burst(&mut self, out: &mut [Desc]) -> usize {
        if out.is_empty() {
            return 0;
        }
        match self.take(self.current, out) {
            Some(0) => {}
            Some(got) => return got,
            // Not entered (or its indices are impossible): whatever it holds comes first,
            // so the other sub-queue must wait.
            None => return 0,
        }
        // Current sub-queue empty: the Enable protocol's other half.
        let other = 1 - self.current;
        if self.shared.sub[other].enabled.load(Ordering::Acquire) == 1 {
            self.current = other;
            self.shared.sub[other].enabled.store(0, Ordering::Release);
            self.stats.switches += 1;
            return self.take(other, out).unwrap_or(0);
        }
        0
    }

    /// Takes one element.
    pub fn dequeue(&mut self) -> Option<Desc> {
        let mut one = [Desc::default()];
        (self.dequeue_burst(&mut one) == 1).then_some(one[0])
    }

    /// Takes from sub-queue `q`: `None` if it could not be entered or its indices are
    /// impossible.
    fn take(&mut self, q: usize, out: &mut [Desc]) -> Option<usize> {
        let sh = &*self.shared;
        let Some(spins) = self.side.enter(&sh.sub[q].mutex) else {
            self.stats.gave_up += 1;
            return None;
        };
        self.stats.spins += u64::from(spins);
        self.stats.long_waits += u64::from(spins >= SPIN_BEFORE_YIELD);
        let k = match sh.count(q) {
            Some((head, _, n)) => {
                let k = out.len().min(n as usize);
                for (i, o) in out[..k].iter_mut().enumerate() {
                    *o = sh.slot(q, head.wrapping_add(i as u32)).read();
                }
                sh.sub[q]
                    .head
                    .store(head.wrapping_add(k as u32), Ordering::Release);
                Some(k)
            }
            None => {
                self.stats.index_errors += 1;
                None
            }
        };
        self.side.leave(&sh.sub[q].mutex);
        self.stats.dequeued += k.unwrap_or(0) as u64;
        k
    }

    /// Whether a dequeue could take something now: the current sub-queue looks non-empty,
    /// or the other is enabled (read outside the mutexes). Only what [`Self::dequeue_burst`]
    /// can reach counts, so a peer's impossible indices cannot keep the consumer awake.
    fn has_work(&self) -> bool {
        let other = 1 - self.current;
        self.shared
            .count(self.current)
            .is_some_and(|(_, _, n)| n > 0)
            || self.shared.sub[other].enabled.load(Ordering::Acquire) == 1
    }

    /// The condition-variable protocol's consumer half: say idle, look again, and block on
    /// the signal only if there is still nothing (without a signal, returns at once).
    /// Returns whether it blocked on the signal (woken or timed out).
    pub fn wait(&mut self, timeout: Option<std::time::Duration>) -> bool {
        let Some(sig) = self.signal.clone() else {
            return false;
        };
        let idle = &self.shared.idle;
        idle.store(1, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.has_work() {
            idle.store(0, Ordering::Release);
            return false;
        }
        self.stats.sleeps += 1;
        sig.wait(timeout);
        idle.store(0, Ordering::Release);
        true
    }

    /// This end's counters.
    pub fn stats(&self) -> ConsumerStats {
        self.stats
    }

    /// Which side of the mutexes this end plays.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Writes impossible indices into both sub-queues, as a hostile peer might (tests only).
    #[doc(hidden)]
    pub fn scribble_indices(&self, head: u32, tail: u32) {
        for s in &self.shared.sub {
            s.head.store(head, Ordering::Relaxed);
            s.tail.store(tail, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn desc(i: u32) -> Desc {
        Desc {
            buf: i,
            len: i.wrapping_mul(7),
            flags: !i,
            aux: i ^ 0xa5a5_a5a5,
        }
    }

    /// Two threads, many elements, bursts of odd sizes: everything arrives once and in
    /// order, in both directions (whichever side yields).
    #[test]
    fn threads_get_every_element_in_order_both_ways() {
        for direction in [Direction::In, Direction::Out] {
            let (mut tx, mut rx) = faithful_queue(64, direction, None);
            const N: u32 = 200_000;
            let producer = std::thread::spawn(move || {
                let mut next = 0;
                while next < N {
                    let burst: Vec<Desc> = (next..(next + 7).min(N)).map(desc).collect();
                    match tx.enqueue_burst(&burst) {
                        Pushed::Took(k) => next += k as u32,
                        Pushed::Busy => std::thread::yield_now(),
                    }
                }
                tx.stats()
            });
            let mut out = [Desc::default(); 5];
            let mut got = 0;
            while got < N {
                let k = rx.dequeue_burst(&mut out);
                for d in &out[..k] {
                    assert_eq!(*d, desc(got), "{direction:?}");
                    got += 1;
                }
                if k == 0 {
                    std::thread::yield_now();
                }
            }
            let ps = producer.join().unwrap();
            assert_eq!(ps.enqueued, u64::from(N));
            assert_eq!(rx.stats().dequeued, u64::from(N));
            assert!(rx.stats().switches <= ps.switches, "{direction:?}");
        }
    }

    /// Impossible indices written by a peer are counted and read as an empty (consumer) or
    /// full (producer) queue; nothing panics, and fixed indices work again.
    #[test]
    fn lying_indices_are_counted_not_followed() {
        let (mut tx, mut rx) = faithful_queue(8, Direction::In, None);
        rx.scribble_indices(0, 1000);
        assert_eq!(rx.dequeue(), None);
        assert_eq!(rx.stats().index_errors, 1);
        assert_eq!(tx.enqueue_burst(&[desc(1)]), Pushed::Took(0));
        assert_eq!(tx.stats().index_errors, 1);
        rx.scribble_indices(5, 5);
        assert!(tx.enqueue(desc(2)));
        assert_eq!(rx.dequeue(), Some(desc(2)));
    }

    /// A consumer whose current sub-queue a peer filled with impossible indices sleeps (it
    /// has nothing it can take) instead of spinning on work it cannot reach.
    #[test]
    fn lying_indices_do_not_keep_the_consumer_awake() {
        let signal: Arc<dyn Signal> = Arc::new(crate::signal::EventFd::new().expect("eventfd"));
        let (_tx, mut rx) = faithful_queue(8, Direction::In, Some(signal));
        rx.scribble_indices(0, 1000);
        let t0 = std::time::Instant::now();
        assert!(rx.wait(Some(std::time::Duration::from_millis(20))));
        assert!(t0.elapsed() >= std::time::Duration::from_millis(15));
        assert_eq!(rx.stats().sleeps, 1);
    }

    /// A full sub-queue takes what fits and says so.
    #[test]
    fn a_full_queue_takes_what_fits() {
        let (mut tx, mut rx) = faithful_queue(4, Direction::In, None);
        let six: Vec<Desc> = (0..6).map(desc).collect();
        assert_eq!(tx.enqueue_burst(&six), Pushed::Took(4));
        assert_eq!(tx.stats().full, 1);
        let mut out = [Desc::default(); 8];
        assert_eq!(rx.dequeue_burst(&mut out), 4);
        assert_eq!(&out[..4], &six[..4]);
    }
}
