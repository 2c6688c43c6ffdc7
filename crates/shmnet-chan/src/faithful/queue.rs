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
//! wired to a window's pools) unless it is given limits ([`FaithfulConsumer::with_limits`]);
//! then a descriptor outside them is refused and counted (`refused`), as the rings' consumer
//! does.

use super::mutex::{AsymMutex, SPIN_BEFORE_YIELD, Side};
use crate::desc::{Desc, DescSlot};
use crate::ring::DescLimits;
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

/// The shared words of a queue: two sub-queues on their own cache lines and the idle flag
/// on a third. `repr(C)` and made only of 32-bit atomics, so zeroed memory is an empty
/// queue, and it can live in memory shared between processes ([`super::memory`]).
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Header {
    sub: [CacheLine<SubQueue>; 2],
    idle: CacheLine<AtomicU32>,
}

/// The bytes of one queue of `capacity` slots per sub-queue: its [`Header`], then each
/// sub-queue's slots (every part 64-byte aligned).
pub(crate) const fn queue_bytes(capacity: u32) -> usize {
    std::mem::size_of::<Header>() + 2 * capacity as usize * std::mem::size_of::<DescSlot>()
}

/// Where a queue's words and slots are, and what keeps that memory alive.
#[derive(Debug)]
struct Shared {
    hdr: std::ptr::NonNull<Header>,
    slots: [std::ptr::NonNull<DescSlot>; 2],
    capacity: u32,
    _backing: Backing,
}

/// The memory behind a queue.
#[derive(Debug)]
enum Backing {
    /// On this process's heap (threads share it): what `Box::into_raw` gave, freed on drop
    /// (raw, so that the pointers `Shared` holds stay valid while the owner moves).
    Heap {
        hdr: *mut Header,
        slots: [*mut [DescSlot]; 2],
    },
    /// In a mapping shared with another process, kept alive by its owner.
    #[cfg(not(loom))]
    Mapped(#[allow(dead_code)] Arc<dyn std::any::Any + Send + Sync>),
}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Backing::Heap { hdr, slots } = *self {
            // SAFETY: both came from `Box::into_raw` in `faithful_queue` and are freed here
            // once, when the last end (the last `Arc<Shared>`) has gone.
            unsafe {
                drop(Box::from_raw(hdr));
                for s in slots {
                    drop(Box::from_raw(s));
                }
            }
        }
    }
}

// SAFETY: the pointers name memory the `Backing` keeps alive for as long as `Shared` lives;
// everything reached through them is atomics (the header) or slots written and read with
// atomics, so sharing between threads is what they are made for.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// What an enqueue did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// This many elements appended (fewer than offered when the sub-queue filled).
    Took(usize),
    /// Neither sub-queue could be entered: nothing appended (the driver drops).
    Busy,
}

/// A producer's counters (private to it, never in shared memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Descriptors taken off the queue and refused: outside the consumer's limits.
    #[serde(default)]
    pub refused: u64,
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
    limits: DescLimits,
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
    let slots = || -> *mut [DescSlot] {
        Box::into_raw((0..capacity).map(|_| DescSlot::default()).collect())
    };
    let hdr = Box::into_raw(Box::new(Header::default()));
    let slots = [slots(), slots()];
    let nonnull = |p: *mut DescSlot| std::ptr::NonNull::new(p).expect("a box is not null");
    let shared = Arc::new(Shared {
        hdr: std::ptr::NonNull::new(hdr).expect("a box is not null"),
        slots: [nonnull(slots[0].cast()), nonnull(slots[1].cast())],
        capacity,
        _backing: Backing::Heap { hdr, slots },
    });
    ends(shared, direction, signal)
}

/// Builds a queue of `capacity` slots per sub-queue in `mem` ([`queue_bytes`] of them,
/// 64-byte aligned), kept alive by `owner`. Zeroed memory is an empty queue.
///
/// # Safety
///
/// `mem` must point to at least `queue_bytes(capacity)` bytes, 64-byte aligned, that stay
/// mapped while `owner` lives and that nothing accesses except through atomics (another
/// process's queue ends over the same memory).
#[cfg(not(loom))]
pub(crate) unsafe fn faithful_queue_in(
    mem: std::ptr::NonNull<u8>,
    capacity: u32,
    direction: Direction,
    signal: Option<Arc<dyn Signal>>,
    owner: Arc<dyn std::any::Any + Send + Sync>,
) -> (FaithfulProducer, FaithfulConsumer) {
    assert!(
        capacity.is_power_of_two(),
        "queue capacity must be a power of two"
    );
    let hdr = std::mem::size_of::<Header>();
    let per_sub = capacity as usize * std::mem::size_of::<DescSlot>();
    // SAFETY: both offsets are within the `queue_bytes(capacity)` the caller vouches for.
    let (s0, s1) = unsafe { (mem.add(hdr), mem.add(hdr + per_sub)) };
    let shared = Arc::new(Shared {
        hdr: mem.cast(),
        slots: [s0.cast(), s1.cast()],
        capacity,
        _backing: Backing::Mapped(owner),
    });
    ends(shared, direction, signal)
}

/// The two ends of a queue over `shared`.
fn ends(
    shared: Arc<Shared>,
    direction: Direction,
    signal: Option<Arc<dyn Signal>>,
) -> (FaithfulProducer, FaithfulConsumer) {
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
            limits: DescLimits::OPAQUE,
            stats: ConsumerStats::default(),
        },
    )
}

impl Shared {
    /// The shared words.
    #[inline]
    fn hdr(&self) -> &Header {
        // SAFETY: `hdr` points to a live, aligned `Header` (see the constructors) made only of
        // atomics.
        unsafe { self.hdr.as_ref() }
    }

    /// Elements in sub-queue `q` by its indices, `None` if they are impossible. Called
    /// inside `q`'s mutex (or, for the idle look, outside it: then only a hint).
    #[inline]
    fn count(&self, q: usize) -> Option<(u32, u32, u32)> {
        let s = &self.hdr().sub[q];
        let head = s.head.load(Ordering::Acquire);
        let tail = s.tail.load(Ordering::Acquire);
        let n = tail.wrapping_sub(head);
        (n <= self.capacity).then_some((head, tail, n))
    }

    #[inline]
    fn slot(&self, q: usize, i: u32) -> &DescSlot {
        let k = (i & (self.capacity - 1)) as usize;
        // SAFETY: `slots[q]` points to `capacity` live slots (see the constructors) and `k` is
        // below `capacity`; a slot is only ever reached through its atomics.
        unsafe { &*self.slots[q].as_ptr().add(k) }
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
        let spins = match self.side.enter(&sh.hdr().sub[q].mutex) {
            Some(s) => s,
            None => {
                // Blocked by the consumer: the Enable protocol's change of sub-queue.
                let other = 1 - q;
                match self.side.enter(&sh.hdr().sub[other].mutex) {
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
                sh.hdr().sub[q]
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
                sh.hdr().sub[q].enabled.store(1, Ordering::Release);
                self.current = q;
                self.stats.switches += 1;
            } else {
                // Nothing appended there: the change did not happen.
                self.stats.full += u64::from(!corrupt);
                self.side.leave(&sh.hdr().sub[q].mutex);
                return Pushed::Took(0);
            }
        }
        self.side.leave(&sh.hdr().sub[q].mutex);
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
    /// it is idle. (Every append that finds it idle raises one: a producer that also took
    /// the idle word down, to raise once per sleep, lost a wake-up under loom.)
    #[inline]
    fn wake_if_idle(&mut self) {
        let Some(sig) = &self.signal else { return };
        fence(Ordering::SeqCst);
        if self.shared.hdr().idle.load(Ordering::Acquire) == 1 {
            sig.raise();
            self.stats.wakeups_sent += 1;
        }
    }

    /// This end's counters.
    pub fn stats(&self) -> ProducerStats {
        self.stats
    }

    /// Free slots in the current sub-queue, read outside its mutex: a hint (the consumer
    /// may have taken more since; never fewer were free). 0 if its indices are impossible.
    pub fn free_hint(&self) -> u32 {
        self.shared
            .count(self.current)
            .map_or(0, |(_, _, n)| self.shared.capacity - n)
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
            Some((0, _)) => {}
            // Slots were taken (some perhaps refused): the current sub-queue is not done.
            Some((_, kept)) => return kept,
            // Not entered (or its indices are impossible): whatever it holds comes first,
            // so the other sub-queue must wait.
            None => return 0,
        }
        // Current sub-queue empty: the Enable protocol's other half.
        let other = 1 - self.current;
        if self.shared.hdr().sub[other].enabled.load(Ordering::Acquire) == 1 {
            self.current = other;
            self.shared.hdr().sub[other]
                .enabled
                .store(0, Ordering::Release);
            self.stats.switches += 1;
            return self.take(other, out).map_or(0, |(_, kept)| kept);
        }
        0
    }

    /// Takes one element.
    pub fn dequeue(&mut self) -> Option<Desc> {
        let mut one = [Desc::default()];
        (self.dequeue_burst(&mut one) == 1).then_some(one[0])
    }

    /// Takes from sub-queue `q`: the slots it emptied and the descriptors it kept (those
    /// within the limits, at the front of `out`); `None` if it could not be entered or its
    /// indices are impossible.
    fn take(&mut self, q: usize, out: &mut [Desc]) -> Option<(usize, usize)> {
        let sh = &*self.shared;
        let Some(spins) = self.side.enter(&sh.hdr().sub[q].mutex) else {
            self.stats.gave_up += 1;
            return None;
        };
        self.stats.spins += u64::from(spins);
        self.stats.long_waits += u64::from(spins >= SPIN_BEFORE_YIELD);
        let k = match sh.count(q) {
            Some((head, _, n)) => {
                let k = out.len().min(n as usize);
                // Every slot taken leaves the queue; those outside the limits are refused
                // (counted) and the rest close up in order.
                let mut kept = 0;
                for i in 0..k {
                    let d = sh.slot(q, head.wrapping_add(i as u32)).read();
                    if self.limits.accepts(&d) {
                        out[kept] = d;
                        kept += 1;
                    } else {
                        self.stats.refused += 1;
                    }
                }
                sh.hdr().sub[q]
                    .head
                    .store(head.wrapping_add(k as u32), Ordering::Release);
                Some((k, kept))
            }
            None => {
                self.stats.index_errors += 1;
                None
            }
        };
        self.side.leave(&sh.hdr().sub[q].mutex);
        self.stats.dequeued += k.map_or(0, |(_, kept)| kept) as u64;
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
            || self.shared.hdr().sub[other].enabled.load(Ordering::Acquire) == 1
    }

    /// The condition-variable protocol's consumer half: say idle, look again, and block on
    /// the signal only if there is still nothing (without a signal, returns at once).
    /// Returns whether it blocked on the signal (woken or timed out).
    pub fn wait(&mut self, timeout: Option<std::time::Duration>) -> bool {
        let Some(sig) = self.signal.clone() else {
            return false;
        };
        if !self.prepare_wait() {
            return false;
        }
        sig.wait(timeout);
        self.shared.hdr().idle.store(0, Ordering::Release);
        true
    }

    /// The first half of [`Self::wait`] for a caller that sleeps on several things at once
    /// (`poll` on [`Self::wake_fd`] and others): says idle and looks again. `true`: nothing
    /// to take, sleep (then call [`Self::finish_wait`]); `false`: work arrived, the idle
    /// word is withdrawn already. Without a signal, always `false`.
    pub fn prepare_wait(&mut self) -> bool {
        if self.signal.is_none() {
            return false;
        }
        let idle = &self.shared.hdr().idle;
        idle.store(1, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.has_work() {
            idle.store(0, Ordering::Release);
            return false;
        }
        self.stats.sleeps += 1;
        true
    }

    /// The second half: withdraws the idle word and consumes the events raised meanwhile.
    pub fn finish_wait(&mut self) {
        self.withdraw_idle();
        if let Some(sig) = &self.signal {
            sig.clear();
        }
    }

    /// [`Self::finish_wait`] without consuming the events: for a consumer whose signal
    /// another queue's `finish_wait` clears (two queues, one sleeper, one event).
    pub fn withdraw_idle(&mut self) {
        self.shared.hdr().idle.store(0, Ordering::Release);
    }

    /// The fd that is readable while an event is pending (the signal's), for `poll`.
    #[cfg(not(loom))]
    pub fn wake_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.signal.as_deref().and_then(|s| s.fd())
    }

    /// Refuses descriptors outside `limits` from now on (each counted in `refused`): for a
    /// queue that carries buffer indices from a peer.
    pub fn with_limits(mut self, limits: DescLimits) -> Self {
        self.limits = limits;
        self
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
        for s in &self.shared.hdr().sub {
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

    /// A consumer with limits refuses (and counts) what lies outside them, keeps the rest
    /// in order, and a refused burst does not make it leave its sub-queue early.
    #[test]
    fn limits_refuse_and_count() {
        let (mut tx, rx) = faithful_queue(8, Direction::In, None);
        let mut rx = rx.with_limits(DescLimits {
            max_buf: 10,
            max_len: 100,
        });
        let bad = Desc::new(11, 1);
        let long = Desc::new(1, 101);
        let good = [Desc::new(2, 3), Desc::new(4, 5)];
        assert_eq!(
            tx.enqueue_burst(&[bad, good[0], long, good[1]]),
            Pushed::Took(4)
        );
        let mut out = [Desc::default(); 8];
        assert_eq!(rx.dequeue_burst(&mut out), 2);
        assert_eq!(&out[..2], &good);
        assert_eq!(rx.stats().refused, 2);
        assert_eq!(rx.stats().dequeued, 2);
        assert_eq!(rx.dequeue_burst(&mut out), 0);
        // A burst that takes only refused slots while more wait behind them, and the other
        // sub-queue enabled: the consumer stays where the older elements are.
        assert_eq!(tx.enqueue_burst(&[bad, bad, good[0]]), Pushed::Took(3));
        rx.shared.hdr().sub[1].enabled.store(1, Ordering::Release);
        let mut two = [Desc::default(); 2];
        assert_eq!(rx.dequeue_burst(&mut two), 0, "both refused");
        assert_eq!(
            rx.dequeue_burst(&mut two),
            1,
            "then the good one, from the same sub-queue"
        );
        assert_eq!(two[0], good[0]);
        assert_eq!(rx.stats().switches, 0);
    }

    /// The split wait: idle is announced and withdrawn, an event raised in between is
    /// consumed, and a queue with work refuses to sleep.
    #[test]
    fn prepare_and_finish_wait() {
        let signal: Arc<dyn Signal> = Arc::new(crate::signal::EventFd::new().expect("eventfd"));
        let (mut tx, mut rx) = faithful_queue(8, Direction::In, Some(signal));
        assert!(rx.prepare_wait());
        assert!(tx.enqueue(Desc::new(1, 1)));
        assert_eq!(tx.stats().wakeups_sent, 1);
        assert!(rx.wake_fd().is_some());
        rx.finish_wait();
        assert!(!rx.prepare_wait(), "work is there: no sleep");
        assert_eq!(rx.dequeue(), Some(Desc::new(1, 1)));
        assert!(tx.enqueue(Desc::new(2, 2)));
        assert_eq!(tx.stats().wakeups_sent, 1, "nobody idle: no event");
        assert_eq!(tx.free_hint(), 7);
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
