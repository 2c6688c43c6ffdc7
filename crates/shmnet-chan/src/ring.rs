//! Single-producer single-consumer descriptor rings.
//!
//! # Shared layout ([`RingShared`] followed by `capacity` [`DescSlot`]s)
//!
//! | cache line | written by | holds |
//! |---|---|---|
//! | 0 | producer (the consumer sets and clears bit 32, and clears bit 33) | the head word — bits 0–31 `head`, the free-running index of the next slot the producer fills; bit 32 `sleeping`, the consumer is (about to be) blocked; bit 33 `want_room`, the producer found the ring full and is (about to be) blocked — then the producer's counters |
//! | 1 | nobody | guard |
//! | 2 | consumer | `tail`, the free-running index of the next slot the consumer reads, then the consumer's counters |
//! | 3 | nobody | guard |
//!
//! A party's index and its counters share a line, so one publish dirties one line and the
//! peer's read of the index brings the counters along at no extra cost. The guard lines keep
//! each party's line alone in its 128-byte pair: cores that prefetch the adjacent line (AMD's
//! and Intel's do) would otherwise drag the peer's hot line along — the false sharing DPDK's
//! `RTE_CACHE_GUARD` prevents.
//!
//! # Memory ordering
//!
//! The producer writes slots with relaxed stores, then publishes them with a release write of
//! the head word; the consumer's acquire load of it makes the slots visible. Symmetrically the
//! consumer's release store of `tail` hands the slots back. Each side keeps a cached copy of
//! the peer's index (as rtrb and DPDK do) and re-reads the shared one only when the cache says
//! the ring is full (producer) or empty (consumer).
//!
//! # Wake-ups (seed 002's consumer-idle protocol, with counting events)
//!
//! The consumer's "I am going to sleep" flag shares one atomic word with the producer's
//! `head`, so announcing sleep and looking for work are a single read-modify-write, and so
//! are publishing work and looking for a sleeper:
//!
//! - Consumer: `fetch_or(SLEEPING)` on the head word; if the `head` it returns shows work,
//!   withdraw (`fetch_and(!SLEEPING)`) and go on; otherwise block on the [`Signal`].
//! - Producer (ring with wake-ups): `swap` the new `head` into the word, which also clears
//!   `SLEEPING`; if the old word had it set, raise the signal.
//!
//! Read-modify-writes of one location are totally ordered and each reads its predecessor, so
//! either the consumer's `fetch_or` comes second and sees the new `head` (it does not sleep),
//! or the producer's `swap` comes second and sees `SLEEPING` (it wakes the consumer). No
//! store-buffering pattern, no `SeqCst` fence, and nothing for loom to approximate. On x86 the
//! producer pays one `xchg` per publish, the price a full fence would cost, and nothing while
//! the ring is in polling mode (a plain release store). Events count, so a raise that lands
//! before the consumer blocks makes the block return at once; a spurious wake-up is harmless
//! because the consumer always re-checks the ring. While the consumer is busy the bit is clear
//! and the producer sends nothing (counted as suppressed); each wake-up sent answers one
//! announcement, so `wakeups_sent <= sleeps`.
//!
//! # Room wake-ups (need-wakeup in the other direction)
//!
//! A producer whose ring is full need not spin or poll with a timeout: it announces that it
//! wants room and blocks on a second signal, the *room* signal, which the consumer raises.
//! The announcement is bit 33 (`WANT_ROOM`) of the same head word, so the consumer's side of
//! the protocol costs nothing new on its fast path: it looks at the bit in words it already
//! reads or read-modify-writes.
//!
//! - Producer ([`Producer::prepare_wait_room`]): if the ring is full, `fetch_or(WANT_ROOM)`
//!   on the head word, then re-read `tail`; if room appeared, withdraw
//!   (`fetch_and(!WANT_ROOM)`) and go on; otherwise block on the room signal. Publishing
//!   (which stores or swaps a plain `head` into the word) clears the bit again.
//! - Consumer: whenever it has the head word in hand — the load that refreshes its cached
//!   `head`, the `fetch_or(SLEEPING)` of [`Consumer::prepare_wait`], and, after a burst that
//!   started from a ring it saw full, one extra load — and the bit is set, it clears the bit
//!   with `fetch_and(!WANT_ROOM)` and, if that read-modify-write still found it set, raises
//!   the room signal.
//!
//! Why no wake-up is lost: the producer's `fetch_or` and the consumer's `fetch_or(SLEEPING)`
//! are read-modify-writes of one word. If the consumer's comes second it sees `WANT_ROOM` and
//! raises the signal. If it comes first, the producer's `fetch_or` reads it (acquire after
//! the consumer's release), so the producer's re-read of `tail` sees every slot the consumer
//! freed before announcing its own sleep — and a consumer only sleeps on an empty ring, so the
//! producer finds room and does not block. A consumer that never sleeps keeps refreshing
//! `head` with loads while the ring is empty, and those loads see the bit. So a blocked
//! producer is woken at the latest when the consumer has drained what it had cached or is
//! about to sleep, and at once after a burst from a ring the consumer saw full (the common
//! case: a producer blocks on a full ring). Room is freed in bursts, so waking the producer a
//! little later costs nothing but saves wake-ups.
//!
//! The consumer raises at most once per advance of its `tail`: a bit seen again before it
//! freed anything more is left set and counted as suppressed (no room appeared, so there is
//! nobody to wake yet). A hostile producer that keeps setting the bit therefore costs the
//! consumer at most one eventfd write per burst it dequeues. Each raise answers one
//! announcement, so `room_wakeups_sent <= room_sleeps` for an honest producer.
//!
//! # Untrusted peer
//!
//! Each side keeps its own index privately and only ever *stores* it to shared memory: a peer
//! scribbling on it changes nothing this side relies on. The peer's index is read, and
//! accepted only if the distance it implies is at most `capacity`; otherwise the call counts an
//! index error and behaves as if the ring were full (producer) or empty (consumer). Every
//! descriptor read is checked against [`DescLimits`] before it is returned; refused ones are
//! counted and skipped. The capacity and mask come from the validated private layout, never
//! from shared memory. The wake bits are hints: a peer that sets one costs this side a
//! spurious wake-up (harmless: every waiter re-checks the ring), a peer that clears one can
//! only leave itself asleep.

use crate::desc::{Desc, DescSlot};
use crate::signal::{Signal, WaitOutcome};
use crate::sync::{AtomicU32, AtomicU64, CacheLine, Ordering};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// Counters written by the producer (each a running total).
#[repr(C)]
#[derive(Debug, Default)]
pub struct ProducerCounters {
    enqueued: AtomicU64,
    full: AtomicU64,
    rejected: AtomicU64,
    wakeups_sent: AtomicU64,
    wakeups_suppressed: AtomicU64,
    index_errors: AtomicU64,
    room_sleeps: AtomicU64,
}

/// Counters written by the consumer (each a running total).
#[repr(C)]
#[derive(Debug, Default)]
pub struct ConsumerCounters {
    dequeued: AtomicU64,
    refused: AtomicU64,
    sleeps: AtomicU64,
    index_errors: AtomicU64,
    room_wakeups_sent: AtomicU64,
    room_wakeups_suppressed: AtomicU64,
}

/// The producer's line: its index, then its counters, so a publish dirties one line.
#[repr(C)]
#[derive(Debug, Default)]
struct ProducerLine {
    /// `head` in the low 32 bits, [`SLEEPING`] and [`WANT_ROOM`] above.
    head_word: AtomicU64,
    counters: ProducerCounters,
}

/// The consumer's line: its index, then its counters.
#[repr(C)]
#[derive(Debug, Default)]
struct ConsumerLine {
    tail: AtomicU32,
    counters: ConsumerCounters,
}

/// The control block of a ring, as it lies in shared memory. All-zero bytes are a valid,
/// empty ring.
#[repr(C)]
#[derive(Debug, Default)]
pub struct RingShared {
    producer: CacheLine<ProducerLine>,
    _guard0: CacheLine<()>,
    consumer: CacheLine<ConsumerLine>,
    _guard1: CacheLine<()>,
}

/// The head word's bit that says the consumer announced it will sleep.
const SLEEPING: u64 = 1 << 32;
/// The head word's bit that says the producer found the ring full and will sleep until the
/// consumer frees room.
const WANT_ROOM: u64 = 1 << 33;

// Each party's index and counters fit on its own line.
const _: () = {
    assert!(std::mem::size_of::<ProducerLine>() <= 64);
    assert!(std::mem::size_of::<ConsumerLine>() <= 64);
};

impl RingShared {
    /// Overwrites the indices and the wake bits with arbitrary values, as a hostile peer
    /// might (fault-injection tests only): bit 0 of `bits` is the consumer's `sleeping`, bit 1
    /// the producer's `want_room`.
    #[doc(hidden)]
    pub fn scribble(&self, head: u32, tail: u32, bits: u32) {
        let bit =
            if bits & 1 != 0 { SLEEPING } else { 0 } | if bits & 2 != 0 { WANT_ROOM } else { 0 };
        self.producer
            .head_word
            .store(u64::from(head) | bit, Ordering::Relaxed);
        self.consumer.tail.store(tail, Ordering::Relaxed);
    }

    fn head(&self, order: Ordering) -> u32 {
        self.producer.head_word.load(order) as u32
    }

    fn head_word(&self) -> &AtomicU64 {
        &self.producer.head_word
    }

    fn tail(&self) -> &AtomicU32 {
        &self.consumer.tail
    }
}

/// What a consumer accepts in a descriptor. Checked for every descriptor read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescLimits {
    /// Largest acceptable `buf` (inclusive).
    pub max_buf: u32,
    /// Largest acceptable `len` (inclusive).
    pub max_len: u32,
}

impl DescLimits {
    /// Accepts every descriptor: for rings that carry opaque values, not buffer indices.
    pub const OPAQUE: Self = Self {
        max_buf: u32::MAX,
        max_len: u32::MAX,
    };

    /// Whether `d` is within the limits.
    #[inline]
    pub fn accepts(&self, d: &Desc) -> bool {
        d.buf <= self.max_buf && d.len <= self.max_len
    }
}

/// A snapshot of one ring's counters, readable by any party.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RingStats {
    /// Slots in the ring.
    pub capacity: u32,
    /// Descriptors in the ring now (`None` if the indices are inconsistent).
    pub occupancy: Option<u32>,
    /// Descriptors the producer placed.
    pub enqueued: u64,
    /// Enqueue calls that could not place every descriptor offered.
    pub full: u64,
    /// Descriptors the producer could not place (the caller kept them).
    pub rejected: u64,
    /// Wake-ups the producer sent (eventfd writes).
    pub wakeups_sent: u64,
    /// Publishes that sent no wake-up because the consumer was not asleep.
    pub wakeups_suppressed: u64,
    /// Descriptors the consumer accepted.
    pub dequeued: u64,
    /// Descriptors the consumer refused (outside the window's limits).
    pub refused: u64,
    /// Times the consumer announced it would sleep (armed the wake word), including
    /// announcements it withdrew because work arrived during the re-check.
    pub sleeps: u64,
    /// Times either side read an impossible index from its peer.
    pub index_errors: u64,
    /// Times the producer found the ring full and announced it would sleep until room
    /// appeared, including announcements it withdrew because room appeared meanwhile.
    pub room_sleeps: u64,
    /// Room wake-ups the consumer sent (eventfd writes to the producer's room signal).
    pub room_wakeups_sent: u64,
    /// Times the consumer saw the producer's announcement but sent nothing because it had
    /// freed no slot since its last room wake-up (nothing to wake for yet).
    pub room_wakeups_suppressed: u64,
}

impl RingStats {
    /// Reads the counters of the ring at `shared`. Values may be mid-update, or garbage if a
    /// peer scribbled on them: they are statistics, never used for control.
    pub fn read(shared: &RingShared, capacity: u32) -> Self {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let p = &shared.producer.counters;
        let c = &shared.consumer.counters;
        let used = shared
            .head(Ordering::Relaxed)
            .wrapping_sub(shared.tail().load(Ordering::Relaxed));
        Self {
            capacity,
            occupancy: (used <= capacity).then_some(used),
            enqueued: r(&p.enqueued),
            full: r(&p.full),
            rejected: r(&p.rejected),
            wakeups_sent: r(&p.wakeups_sent),
            wakeups_suppressed: r(&p.wakeups_suppressed),
            dequeued: r(&c.dequeued),
            refused: r(&c.refused),
            sleeps: r(&c.sleeps),
            index_errors: r(&p.index_errors).wrapping_add(r(&c.index_errors)),
            room_sleeps: r(&p.room_sleeps),
            room_wakeups_sent: r(&c.room_wakeups_sent),
            room_wakeups_suppressed: r(&c.room_wakeups_suppressed),
        }
    }
}

/// What keeps a ring's memory alive while a handle exists (a mapping, or heap storage).
pub(crate) type KeepAlive = Arc<dyn Send + Sync>;

/// Pointers to a ring's memory, with its capacity taken from the validated layout.
#[derive(Clone)]
pub(crate) struct RingMem {
    shared: NonNull<RingShared>,
    slots: NonNull<DescSlot>,
    capacity: u32,
    _keep: KeepAlive,
}

impl RingMem {
    /// # Safety
    /// `shared` and `slots` point to a `RingShared` and `capacity` `DescSlot`s that stay
    /// mapped and valid for as long as `keep` is alive; `capacity` is a power of two.
    pub(crate) unsafe fn new(
        shared: NonNull<RingShared>,
        slots: NonNull<DescSlot>,
        capacity: u32,
        keep: KeepAlive,
    ) -> Self {
        debug_assert!(capacity.is_power_of_two());
        Self {
            shared,
            slots,
            capacity,
            _keep: keep,
        }
    }

    #[inline]
    fn shared(&self) -> &RingShared {
        // SAFETY: `new`'s contract keeps the control block valid while `_keep` lives, and
        // all access to it goes through atomics.
        unsafe { self.shared.as_ref() }
    }

    #[inline]
    #[cfg_attr(not(loom), allow(dead_code))]
    fn slot(&self, index: u32) -> &DescSlot {
        let i = (index & (self.capacity - 1)) as usize;
        // SAFETY: `i < capacity`, and `new`'s contract makes `capacity` slots valid while
        // `_keep` lives; slots are only accessed through atomics.
        unsafe { &*self.slots.as_ptr().add(i) }
    }

    /// Writes `descs` into the slots from index `start` on, wrapping at the end.
    #[inline]
    fn write_slots(&self, start: u32, descs: &[Desc]) {
        #[cfg(loom)]
        for (i, d) in descs.iter().enumerate() {
            self.slot(start.wrapping_add(i as u32)).write(*d);
        }
        #[cfg(not(loom))]
        {
            let (first, second) = self.spans(start, descs.len());
            let base = self.slots.as_ptr().cast::<Desc>();
            // SAFETY: `spans` keeps both ranges inside the `capacity` slots. A `DescSlot` is
            // two little-endian `u64`s laid out exactly as a `Desc`'s four `u32`s (checked at
            // compile time below), so a byte copy writes the same value the atomic path would.
            // The slots being written belong to the producer until it publishes `head`, so an
            // honest consumer never reads them concurrently; a hostile one can only see torn
            // values, and the consumer validates its private copy, never the slot.
            unsafe {
                std::ptr::copy_nonoverlapping(descs.as_ptr(), base.add(first.0), first.1);
                std::ptr::copy_nonoverlapping(descs.as_ptr().add(first.1), base, second);
            }
        }
    }

    /// Copies the slots from index `start` on into `out`, wrapping at the end.
    #[inline]
    fn read_slots(&self, start: u32, out: &mut [Desc]) {
        #[cfg(loom)]
        for (i, d) in out.iter_mut().enumerate() {
            *d = self.slot(start.wrapping_add(i as u32)).read();
        }
        #[cfg(not(loom))]
        {
            let (first, second) = self.spans(start, out.len());
            let base = self.slots.as_ptr().cast::<Desc>();
            // SAFETY: as in `write_slots`; the slots being read were published by the
            // producer's release of `head` (acquired by the caller) and are not rewritten by an
            // honest producer until our `tail` store hands them back. The copy lands in private
            // memory, which is what gets validated.
            unsafe {
                std::ptr::copy_nonoverlapping(base.add(first.0), out.as_mut_ptr(), first.1);
                std::ptr::copy_nonoverlapping(base, out.as_mut_ptr().add(first.1), second);
            }
        }
    }

    /// Splits `len` slots from `start` into `(offset, count)` up to the end of the array
    /// and a count from its beginning. `len` must not exceed the capacity.
    #[cfg(not(loom))]
    #[inline]
    fn spans(&self, start: u32, len: usize) -> ((usize, usize), usize) {
        let cap = self.capacity as usize;
        debug_assert!(len <= cap);
        let off = (start & (self.capacity - 1)) as usize;
        let first = len.min(cap - off);
        ((off, first), len - first)
    }
}

// The byte copies above rely on a slot having a descriptor's layout.
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<DescSlot>() == std::mem::size_of::<Desc>());
    assert!(cfg!(target_endian = "little"));
};

/// Builds a ring on the heap, for in-process use, tests and loom models. `signal`: the
/// consumer's wake-up signal (`None`: the consumer busy-polls). The producer cannot sleep
/// for room (see [`heap_ring_with_room`]).
pub fn heap_ring(
    capacity: u32,
    signal: Option<Arc<dyn Signal>>,
    limits: DescLimits,
) -> (Producer, Consumer) {
    heap_ring_with_room(capacity, signal, None, limits)
}

/// Builds a ring on the heap with wake-ups in both directions: `signal` wakes the consumer
/// when descriptors arrive, `room` wakes the producer when slots are freed (`None`: that side
/// cannot sleep and busy-polls).
pub fn heap_ring_with_room(
    capacity: u32,
    signal: Option<Arc<dyn Signal>>,
    room: Option<Arc<dyn Signal>>,
    limits: DescLimits,
) -> (Producer, Consumer) {
    assert!(
        capacity.is_power_of_two(),
        "ring capacity must be a power of two"
    );
    struct HeapRing {
        shared: Box<RingShared>,
        slots: Box<[DescSlot]>,
    }
    let ring = Arc::new(HeapRing {
        shared: Box::default(),
        slots: (0..capacity).map(|_| DescSlot::default()).collect(),
    });
    let shared = NonNull::from(&*ring.shared);
    let slots = NonNull::from(&ring.slots[0]);
    // SAFETY: both allocations live inside `ring`, which the handles keep alive, and are
    // never moved (boxed); `capacity` slots were allocated and it is a power of two.
    let mem = unsafe { RingMem::new(shared, slots, capacity, ring) };
    (
        Producer::new(mem.clone(), signal.clone(), room.clone()),
        Consumer::new(mem, signal, room, limits),
    )
}

/// The producing end of a ring. Exactly one may exist per ring.
pub struct Producer {
    mem: RingMem,
    head: u32,
    cached_tail: u32,
    signal: Option<Arc<dyn Signal>>,
    /// Raised by the consumer when it frees room after this producer announced it wants some.
    room: Option<Arc<dyn Signal>>,
    enqueued: u64,
    full: u64,
    rejected: u64,
    wakeups_sent: u64,
    wakeups_suppressed: u64,
    index_errors: u64,
    room_sleeps: u64,
}

// SAFETY: the handle owns its private state; the shared memory it points to is only accessed
// through atomics and is kept alive by `mem`'s keep-alive, which is `Send + Sync`.
unsafe impl Send for Producer {}

impl Producer {
    /// `signal`: `Some` for a ring with wake-ups, `None` for a busy-polled ring. `room`: the
    /// signal this producer sleeps on when the ring is full (`None`: it cannot sleep).
    pub(crate) fn new(
        mem: RingMem,
        signal: Option<Arc<dyn Signal>>,
        room: Option<Arc<dyn Signal>>,
    ) -> Self {
        let s = mem.shared();
        // Resume from what is published: a fresh ring reads 0. The peer's tail is not
        // trusted here; it is checked at first use.
        let head = s.head(Ordering::Relaxed);
        Self {
            head,
            cached_tail: head,
            signal,
            room,
            enqueued: s.producer.counters.enqueued.load(Ordering::Relaxed),
            full: 0,
            rejected: 0,
            wakeups_sent: 0,
            wakeups_suppressed: 0,
            index_errors: 0,
            room_sleeps: 0,
            mem,
        }
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> u32 {
        self.mem.capacity
    }

    /// Free slots, refreshing the cached tail. 0 if the consumer's tail is impossible.
    pub fn free_slots(&mut self) -> u32 {
        self.refresh_tail();
        self.cached_room()
    }

    /// At least `want` free slots if the ring has them: the cached copy of the consumer's
    /// tail answers when it already shows `want`, and the shared tail (a cache line the
    /// consumer writes) is read only when it does not. Fewer than `want` means that many.
    #[inline]
    pub fn room_for(&mut self, want: u32) -> u32 {
        if self.cached_room() < want {
            self.refresh_tail();
        }
        self.cached_room()
    }

    #[inline]
    fn cached_room(&self) -> u32 {
        self.mem.capacity - self.head.wrapping_sub(self.cached_tail)
    }

    /// Re-reads the consumer's tail, accepting it only if it is consistent with our head.
    #[inline]
    fn refresh_tail(&mut self) {
        let tail = self.mem.shared().tail().load(Ordering::Acquire);
        if self.head.wrapping_sub(tail) <= self.mem.capacity {
            self.cached_tail = tail;
        } else {
            // A consumer that claims to have read slots we never wrote: trust nothing and
            // keep the old (consistent) value, so the ring looks full, not corrupt.
            self.index_errors += 1;
            self.mem
                .shared()
                .producer
                .counters
                .index_errors
                .store(self.index_errors, Ordering::Relaxed);
        }
    }

    /// Places as many of `descs` as fit, in order, and returns how many. Never waits: the
    /// caller keeps what was not placed (a full ring is counted, not an error).
    #[inline]
    pub fn enqueue_burst(&mut self, descs: &[Desc]) -> usize {
        let want = descs.len().min(u32::MAX as usize) as u32;
        let mut free = self.mem.capacity - self.head.wrapping_sub(self.cached_tail);
        if free < want {
            self.refresh_tail();
            free = self.mem.capacity - self.head.wrapping_sub(self.cached_tail);
        }
        let n = free.min(want);
        self.mem.write_slots(self.head, &descs[..n as usize]);
        if n > 0 {
            self.head = self.head.wrapping_add(n);
            self.enqueued += u64::from(n);
            if self.signal.is_some() {
                self.publish_and_wake();
            } else {
                let word = self.mem.shared().head_word();
                word.store(u64::from(self.head), Ordering::Release);
            }
        }
        if n < want {
            self.full += 1;
            self.rejected += u64::from(want - n);
        }
        self.publish_counters();
        n as usize
    }

    /// Places one descriptor, or gives it back if the ring is full.
    #[inline]
    pub fn enqueue(&mut self, d: Desc) -> Result<(), Desc> {
        if self.enqueue_burst(std::slice::from_ref(&d)) == 1 {
            Ok(())
        } else {
            Err(d)
        }
    }

    /// Publishes `head` and wakes the consumer if it announced it would sleep (see the
    /// module docs: one read-modify-write does both).
    #[inline]
    fn publish_and_wake(&mut self) {
        let old = self
            .mem
            .shared()
            .head_word()
            .swap(u64::from(self.head), Ordering::AcqRel);
        if old & SLEEPING != 0 {
            if let Some(signal) = &self.signal {
                signal.raise();
            }
            self.wakeups_sent += 1;
        } else {
            self.wakeups_suppressed += 1;
        }
    }

    #[inline]
    fn publish_counters(&self) {
        let c = &self.mem.shared().producer.counters;
        c.enqueued.store(self.enqueued, Ordering::Relaxed);
        if self.full != 0 {
            c.full.store(self.full, Ordering::Relaxed);
            c.rejected.store(self.rejected, Ordering::Relaxed);
        }
        if self.signal.is_some() {
            c.wakeups_sent.store(self.wakeups_sent, Ordering::Relaxed);
            c.wakeups_suppressed
                .store(self.wakeups_suppressed, Ordering::Relaxed);
        }
    }

    /// Sleeps until the ring has a free slot or `timeout` passes, following the room
    /// protocol (see the module docs). Returns at once if a slot is free. A producer without
    /// a room signal cannot sleep: it returns [`WaitOutcome::Woken`] at once so the caller
    /// simply tries again. A spurious [`WaitOutcome::Woken`] is possible (the caller retries
    /// its enqueue and waits again if the ring is still full).
    pub fn wait_room(&mut self, timeout: Option<Duration>) -> WaitOutcome {
        let Some(room) = self.room.clone() else {
            crate::sync::spin_hint();
            return WaitOutcome::Woken;
        };
        if !self.prepare_wait_room() {
            return WaitOutcome::Woken;
        }
        let outcome = room.wait(timeout);
        // A consumer that woke us already cleared the bit; after a timeout (or a wake-up left
        // over from an announcement withdrawn earlier) it may still be set.
        self.withdraw_room();
        outcome
    }

    /// The first half of a wait for room among several things: announces that this producer
    /// is going to sleep until the consumer frees a slot, exactly as [`Producer::wait_room`]
    /// does, but does not block. Returns `false` (announcement withdrawn, or never made) if a
    /// slot is free, or this producer has no room signal. After `true`, the caller blocks on
    /// [`Producer::room_fd`] among its other fds, and must then call
    /// [`Producer::finish_wait_room`].
    pub fn prepare_wait_room(&mut self) -> bool {
        if self.room.is_none() || self.free_slots() != 0 {
            return false;
        }
        // Announce; the consumer sees the bit in its next look at the head word.
        let s = self.mem.shared();
        s.head_word().fetch_or(WANT_ROOM, Ordering::AcqRel);
        self.room_sleeps += 1;
        s.producer
            .counters
            .room_sleeps
            .store(self.room_sleeps, Ordering::Relaxed);
        // Re-check after announcing: a consumer that freed room before it could see the bit
        // published its tail before its own read-modify-write of the head word, which our
        // `fetch_or` (acquire) read or preceded (see the module docs).
        if self.free_slots() != 0 {
            self.withdraw_room();
            return false;
        }
        true
    }

    /// The second half of a multi-wait for room: withdraws the announcement (a consumer that
    /// woke us already did) and consumes the pending event, so the next wait starts clean.
    pub fn finish_wait_room(&mut self) {
        self.withdraw_room();
        if let Some(s) = &self.room {
            s.clear();
        }
    }

    fn withdraw_room(&self) {
        self.mem
            .shared()
            .head_word()
            .fetch_and(!WANT_ROOM, Ordering::Relaxed);
    }

    /// The fd that becomes readable when the consumer frees room for this producer (rings
    /// with room wake-ups on real eventfds only).
    #[cfg(not(loom))]
    pub fn room_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.room.as_ref().and_then(|s| s.fd())
    }

    /// Whether this producer can sleep for room (it has a room signal).
    pub fn can_wait_room(&self) -> bool {
        self.room.is_some()
    }

    /// A snapshot of this ring's shared counters.
    pub fn stats(&self) -> RingStats {
        RingStats::read(self.mem.shared(), self.mem.capacity)
    }

    /// Empties the ring by fiat: publishes this side's head as both head and tail and clears
    /// the wake word. For the window's owner when a peer has gone (descriptors it had not
    /// read are abandoned; their buffers come back with [`crate::ServerPools::reclaim_all`]).
    /// A peer that attaches afterwards starts from a consistent, empty ring.
    pub fn resync(&mut self) {
        let s = self.mem.shared();
        s.tail().store(self.head, Ordering::Relaxed);
        s.head_word().store(u64::from(self.head), Ordering::Release);
        self.cached_tail = self.head;
    }
}

/// The consuming end of a ring. Exactly one may exist per ring.
pub struct Consumer {
    mem: RingMem,
    tail: u32,
    cached_head: u32,
    signal: Option<Arc<dyn Signal>>,
    /// The producer's room signal, raised when this consumer frees room for a producer that
    /// announced it is waiting for some.
    room: Option<Arc<dyn Signal>>,
    /// `tail` when this consumer last raised `room` (`None`: never): it raises at most once
    /// per advance of `tail`.
    room_raised_at: Option<u32>,
    limits: DescLimits,
    dequeued: u64,
    refused: u64,
    sleeps: u64,
    index_errors: u64,
    room_wakeups_sent: u64,
    room_wakeups_suppressed: u64,
}

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

impl Consumer {
    /// `signal`: this consumer's wake-up signal (`None`: it busy-polls); `room`: the
    /// producer's room signal (`None`: the producer cannot sleep for room).
    pub(crate) fn new(
        mem: RingMem,
        signal: Option<Arc<dyn Signal>>,
        room: Option<Arc<dyn Signal>>,
        limits: DescLimits,
    ) -> Self {
        let tail = mem.shared().tail().load(Ordering::Relaxed);
        Self {
            tail,
            cached_head: tail,
            signal,
            room,
            room_raised_at: None,
            limits,
            dequeued: 0,
            refused: 0,
            sleeps: 0,
            index_errors: 0,
            room_wakeups_sent: 0,
            room_wakeups_suppressed: 0,
            mem,
        }
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> u32 {
        self.mem.capacity
    }

    /// Re-reads the producer's head; returns how many descriptors are readable. An
    /// impossible head is counted and treated as "nothing new". Answers a producer waiting
    /// for room.
    #[inline]
    fn refresh_head(&mut self) -> u32 {
        let word = self.mem.shared().head_word().load(Ordering::Acquire);
        let avail = self.accept_head(word as u32);
        self.check_room(word);
        avail
    }

    /// If `word` (the head word, just read) says the producer waits for room, wakes it —
    /// unless nothing was freed since the last room wake-up. Free when the bit is clear (one
    /// test of a word already in hand).
    #[inline]
    fn check_room(&mut self, word: u64) {
        if word & WANT_ROOM != 0 && self.room.is_some() {
            self.wake_room();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake_room(&mut self) {
        let c = &self.mem.shared().consumer.counters;
        if self.room_raised_at == Some(self.tail) {
            // No slot freed since our last raise: there is no room to wake the producer for,
            // and the bit stays set so that the look after our next burst answers it.
            self.room_wakeups_suppressed += 1;
            c.room_wakeups_suppressed
                .store(self.room_wakeups_suppressed, Ordering::Relaxed);
            return;
        }
        let old = self
            .mem
            .shared()
            .head_word()
            .fetch_and(!WANT_ROOM, Ordering::AcqRel);
        if old & WANT_ROOM != 0 {
            if let Some(room) = &self.room {
                room.raise();
            }
            self.room_raised_at = Some(self.tail);
            self.room_wakeups_sent += 1;
            c.room_wakeups_sent
                .store(self.room_wakeups_sent, Ordering::Relaxed);
        }
    }

    /// Adopts a `head` read from the peer if it is consistent with our tail; returns how many
    /// descriptors are readable.
    #[inline]
    fn accept_head(&mut self, head: u32) -> u32 {
        let avail = head.wrapping_sub(self.tail);
        if avail <= self.mem.capacity {
            self.cached_head = head;
            avail
        } else {
            self.index_errors += 1;
            self.mem
                .shared()
                .consumer
                .counters
                .index_errors
                .store(self.index_errors, Ordering::Relaxed);
            self.cached_head.wrapping_sub(self.tail)
        }
    }

    /// Descriptors readable now (refreshing the cached head).
    pub fn available(&mut self) -> u32 {
        self.refresh_head()
    }

    /// Moves up to `out.len()` descriptors out of the ring into `out` and returns how many
    /// were accepted. Descriptors outside the limits are consumed, counted as refused, and
    /// not returned, so the result can be 0 while the ring was not empty.
    #[inline]
    pub fn dequeue_burst(&mut self, out: &mut [Desc]) -> usize {
        let want = out.len().min(u32::MAX as usize) as u32;
        let mut avail = self.cached_head.wrapping_sub(self.tail);
        // The head word if this call read it (0: not read).
        let mut word = 0;
        if avail < want {
            word = self.mem.shared().head_word().load(Ordering::Acquire);
            avail = self.accept_head(word as u32);
        }
        let n = avail.min(want);
        if n == 0 {
            self.check_room(word);
            return 0;
        }
        // A ring we see full is one a producer may be blocked on: look for its announcement
        // once this burst has freed room (the only extra load, and only on a full ring).
        let was_full = avail == self.mem.capacity && self.room.is_some();
        let out = &mut out[..n as usize];
        self.mem.read_slots(self.tail, out);
        // Validate the private copies; compact only if something was refused (rare).
        let mut accepted = out.len();
        if !out.iter().all(|d| self.limits.accepts(d)) {
            accepted = 0;
            for i in 0..out.len() {
                if self.limits.accepts(&out[i]) {
                    out[accepted] = out[i];
                    accepted += 1;
                } else {
                    self.refused += 1;
                }
            }
        }
        self.tail = self.tail.wrapping_add(n);
        let s = self.mem.shared();
        s.tail().store(self.tail, Ordering::Release);
        self.dequeued += accepted as u64;
        s.consumer
            .counters
            .dequeued
            .store(self.dequeued, Ordering::Relaxed);
        if accepted < n as usize {
            s.consumer
                .counters
                .refused
                .store(self.refused, Ordering::Relaxed);
        }
        if was_full {
            word = s.head_word().load(Ordering::Relaxed);
        }
        self.check_room(word);
        accepted
    }

    /// Takes one descriptor, if any is readable and acceptable.
    #[inline]
    pub fn dequeue(&mut self) -> Option<Desc> {
        let mut d = [Desc::default()];
        (self.dequeue_burst(&mut d) == 1).then_some(d[0])
    }

    /// Sleeps until the ring has something to read or `timeout` passes, following the
    /// consumer-idle protocol (see the module docs). Returns at once if the ring is not
    /// empty. A ring in polling mode cannot sleep: it returns [`WaitOutcome::Woken`] at once
    /// so the caller simply polls again.
    pub fn wait(&mut self, timeout: Option<Duration>) -> WaitOutcome {
        let Some(signal) = self.signal.clone() else {
            crate::sync::spin_hint();
            return WaitOutcome::Woken;
        };
        if !self.prepare_wait() {
            return WaitOutcome::Woken;
        }
        let outcome = signal.wait(timeout);
        // A producer that woke us already cleared the bit; after a timeout it is still set.
        if outcome == WaitOutcome::TimedOut {
            self.mem
                .shared()
                .head_word()
                .fetch_and(!SLEEPING, Ordering::Relaxed);
        }
        outcome
    }

    /// The first half of a wait on several things at once: announces that this consumer is
    /// going to sleep, exactly as [`Consumer::wait`] does, but does not block. Returns `false`
    /// (announcement withdrawn) if the ring already has work, or cannot sleep (polling mode).
    /// After `true`, the caller blocks on [`Consumer::wake_fd`] among its other fds, and must
    /// then call [`Consumer::finish_wait`].
    pub fn prepare_wait(&mut self) -> bool {
        if self.signal.is_none() || self.refresh_head() != 0 {
            return false;
        }
        // Announce sleep and look for work in one step (see the module docs).
        let word = self
            .mem
            .shared()
            .head_word()
            .fetch_or(SLEEPING, Ordering::AcqRel);
        // Counted at the announcement, not at the block: the producer may answer an
        // announcement that is then withdrawn, and every wake-up sent must match one.
        self.sleeps += 1;
        let sleeps = self.sleeps;
        let s = self.mem.shared();
        s.consumer.counters.sleeps.store(sleeps, Ordering::Relaxed);
        // The read-modify-write that makes room wake-ups reliable (see the module docs).
        self.check_room(word);
        if self.accept_head(word as u32) != 0 {
            self.mem
                .shared()
                .head_word()
                .fetch_and(!SLEEPING, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The second half of a multi-wait: withdraws the announcement (a producer that woke us
    /// already did) and consumes the pending event, so the next wait starts clean.
    pub fn finish_wait(&mut self) {
        self.mem
            .shared()
            .head_word()
            .fetch_and(!SLEEPING, Ordering::Relaxed);
        if let Some(s) = &self.signal {
            s.clear();
        }
    }

    /// The fd that becomes readable when the producer wakes this consumer (rings with
    /// wake-ups on real eventfds only).
    #[cfg(not(loom))]
    pub fn wake_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.signal.as_ref().and_then(|s| s.fd())
    }

    /// A snapshot of this ring's shared counters.
    pub fn stats(&self) -> RingStats {
        RingStats::read(self.mem.shared(), self.mem.capacity)
    }

    /// Empties the ring by fiat, discarding what the peer had queued: publishes this side's
    /// tail as both head and tail and clears the wake word. See [`Producer::resync`].
    pub fn resync(&mut self) {
        let s = self.mem.shared();
        s.head_word().store(u64::from(self.tail), Ordering::Relaxed);
        s.tail().store(self.tail, Ordering::Release);
        self.cached_head = self.tail;
    }
}
