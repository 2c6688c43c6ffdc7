//! Buffer pools: fixed-size buffers, N pools each with its own lock and free list, try-lock
//! allocation for the driver, a deferred-free queue, and a waiters flag.
//!
//! This is seed 002's "Free Space" with today's atomics.
//!
//! # Shared layout
//!
//! - [`PoolSetShared`]: the waiters word (`want`, the seed's `m_want`) and set-wide counters,
//!   one line of them per side (`Side`): each party counts in a line the other never
//!   writes, so a count on the hot path (a chain handed back, deferred) never takes a line
//!   from the other party's cache.
//! - One [`PoolCtl`] per pool (one cache line): the lock word, the free list's `head` and
//!   `tail`, and the pool's counters — everything an allocation or a free writes, all under
//!   the lock, so taking the lock brings the one line the operation needs.
//! - One free array per pool: `free_cap` (a power of two ≥ buffers per pool) `u32` indices;
//!   the free list is the window `head..tail` of it (free-running indices).
//! - One [`BufHdr`] per buffer (16 bytes, four per line): chain link, reference count, data
//!   offset and length, flags. Headers live apart from data so that walking a chain or
//!   counting references never pulls packet bytes into the cache, and so data slots stay
//!   power-of-two sized.
//! - The data: buffer `i` at `i * data_size` from the data region, which is page-aligned, so
//!   a 2048-byte buffer never crosses a 4 KiB page (one TLB entry per buffer).
//!
//! Buffers are numbered globally; pool `p` owns `p * per_pool .. (p + 1) * per_pool`, so a
//! buffer's pool is a division away (the seed's `mtop`).
//!
//! # Locks
//!
//! A lock word holds 0 (free) or the owner's tag. The server side may wait for a lock
//! (bounded: a peer that dies or scribbles while "holding" one costs the server a counted
//! timeout, never a hang); the driver side only try-locks once and moves on to the next pool,
//! so it never waits, as the seed's asymmetric Peterson lock guaranteed.
//!
//! # Reference counts and chains
//!
//! An allocated buffer has `refcnt >= 1`; a free one has 0. The count of a chain's *head*
//! counts the holders of the whole chain; the other buffers of a chain keep 1. Releasing the
//! last reference frees every buffer of the chain. A driver that releases a chain, or cannot
//! lock the pool, puts the head on the deferred-free queue, which the server drains later;
//! that queue has room for every buffer, so it can never be full in honest operation.
//!
//! # Untrusted peer
//!
//! A free-list count larger than the pool, an index outside the pool, a popped buffer whose
//! count is not 0, a release of a free buffer, a chain longer than the pool set: each is
//! refused and counted, never followed. Memory outside the window is never addressed, because
//! every index is range-checked against the private layout before use.

use crate::desc::{Desc, NO_BUF};
use crate::ring::{Consumer, Producer};
use crate::signal::Signal;
use crate::sync::{AtomicU32, AtomicU64, CacheLine, Ordering, fence};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

/// Which free buffer an allocation returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocPolicy {
    /// The most recently freed buffer: the one most likely still in the cache (default).
    #[default]
    Lifo,
    /// The least recently freed buffer: cycles through the whole pool.
    Fifo,
    /// A uniformly random free buffer.
    Random,
}

#[cfg_attr(loom, allow(dead_code))]
impl AllocPolicy {
    pub(crate) fn code(self) -> u32 {
        match self {
            Self::Lifo => 0,
            Self::Fifo => 1,
            Self::Random => 2,
        }
    }

    pub(crate) fn from_code(code: u32) -> Option<Self> {
        [Self::Lifo, Self::Fifo, Self::Random]
            .into_iter()
            .find(|p| p.code() == code)
    }
}

impl std::str::FromStr for AllocPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lifo" => Ok(Self::Lifo),
            "fifo" => Ok(Self::Fifo),
            "random" => Ok(Self::Random),
            _ => Err(format!("unknown policy {s:?}: use lifo, fifo or random")),
        }
    }
}

/// Lock owner tags.
const UNLOCKED: u32 = 0;
const SERVER: u32 = 1;
const DRIVER: u32 = 2;

/// How long the server spins on a pool lock before yielding, and how long it waits in all.
#[cfg(not(loom))]
const LOCK_SPINS: u32 = 1 << 10;
#[cfg(loom)]
const LOCK_SPINS: u32 = 2;
#[cfg(not(loom))]
const LOCK_PATIENCE: Duration = Duration::from_millis(50);
#[cfg(loom)]
const LOCK_YIELDS: u32 = 16;

/// Set-wide shared state.
#[repr(C)]
#[derive(Debug, Default)]
pub struct PoolSetShared {
    want: CacheLine<AtomicU32>,
    /// Indexed by [`Side`]: each side writes only its own line.
    counters: [CacheLine<SetCounters>; 2],
}

/// Which side of a pool set a handle acts for: the side whose set-wide counters it bumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The owner: [`ServerPools`], and read-only views.
    Server = 0,
    /// The other party: [`DriverPools`].
    Driver = 1,
}

#[repr(C)]
#[derive(Debug, Default)]
struct SetCounters {
    driver_drops: AtomicU64,
    server_empty: AtomicU64,
    want_wakeups: AtomicU64,
    deferred: AtomicU64,
    deferred_lost: AtomicU64,
    bad_chains: AtomicU64,
    bad_releases: AtomicU64,
}

/// One pool's control block: one cache line.
#[repr(C)]
#[derive(Debug, Default)]
pub struct PoolCtl {
    list: CacheLine<FreeList>,
}

const _: () = assert!(
    std::mem::size_of::<PoolCtl>() == 64,
    "a pool's control block is one line"
);

/// The lock, the free list and the pool's counters, on one line: `allocs`, `frees` and
/// `refused` are written under the lock; the two failure counters are rare.
#[repr(C)]
#[derive(Debug, Default)]
struct FreeList {
    lock: AtomicU32,
    head: AtomicU32,
    tail: AtomicU32,
    counters: PoolCounters,
}

#[repr(C)]
#[derive(Debug, Default)]
struct PoolCounters {
    allocs: AtomicU64,
    frees: AtomicU64,
    trylock_failures: AtomicU64,
    lock_timeouts: AtomicU64,
    refused: AtomicU64,
}

/// A buffer's header.
#[repr(C)]
#[derive(Debug, Default)]
pub struct BufHdr {
    next: AtomicU32,
    refcnt: AtomicU32,
    /// `off` in the low 16 bits, `len` in the high 16.
    off_len: AtomicU32,
    flags: AtomicU32,
}

impl BufHdr {
    /// Overwrites the header with arbitrary words (fault-injection tests only).
    #[doc(hidden)]
    pub fn scribble(&self, words: [u32; 4]) {
        self.next.store(words[0], Ordering::Relaxed);
        self.refcnt.store(words[1], Ordering::Relaxed);
        self.off_len.store(words[2], Ordering::Relaxed);
        self.flags.store(words[3], Ordering::Relaxed);
    }
}

/// The shape of a pool set, from the validated layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolGeometry {
    /// Number of pools.
    pub pools: u32,
    /// Buffers in each pool.
    pub per_pool: u32,
    /// Data bytes per buffer (a multiple of 64).
    pub data_size: u32,
    /// Slots in each pool's free array (a power of two ≥ `per_pool`).
    pub free_cap: u32,
    /// The allocation policy.
    pub policy: AllocPolicy,
}

impl PoolGeometry {
    /// Buffers in the whole set.
    pub fn total(&self) -> u32 {
        self.pools * self.per_pool
    }
}

/// Pointers to a pool set's memory.
#[derive(Clone)]
pub(crate) struct PoolMem {
    pub(crate) set: NonNull<PoolSetShared>,
    pub(crate) ctls: NonNull<PoolCtl>,
    pub(crate) free: NonNull<AtomicU32>,
    pub(crate) hdrs: NonNull<BufHdr>,
    pub(crate) data: NonNull<u8>,
    pub(crate) geo: PoolGeometry,
    /// The order the free arrays are filled in (by `reclaim_all`).
    pub(crate) layout: crate::BufferLayout,
    /// Held only to keep the memory mapped while a handle exists.
    #[allow(dead_code)]
    pub(crate) keep: crate::ring::KeepAlive,
}

/// A snapshot of one pool's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolStats {
    /// Buffers owned by the pool.
    pub buffers: u32,
    /// Buffers on its free list now (`None` if the list is inconsistent).
    pub free: Option<u32>,
    /// Successful allocations.
    pub allocs: u64,
    /// Buffers returned to the free list.
    pub frees: u64,
    /// Driver try-locks that found the pool locked.
    pub trylock_failures: u64,
    /// Server lock waits that gave up (a peer held the lock too long).
    pub lock_timeouts: u64,
    /// Free-list entries or frees refused as corrupt.
    pub refused: u64,
}

/// A snapshot of the set-wide counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolSetStats {
    /// Driver allocations that found no buffer in any pool (a dropped packet).
    pub driver_drops: u64,
    /// Server allocations that found every pool empty.
    pub server_empty: u64,
    /// Wake-ups sent to a server waiting for buffers.
    pub want_wakeups: u64,
    /// Chains the driver put on the deferred-free queue.
    pub deferred: u64,
    /// Deferred frees that found the deferred queue full (never in honest operation).
    pub deferred_lost: u64,
    /// Chains whose links were broken (bad index, cycle, wrong count).
    pub bad_chains: u64,
    /// Releases of buffers that were not allocated.
    pub bad_releases: u64,
    /// Per pool.
    pub pools: Vec<PoolStats>,
}

/// Errors of the buffer accessors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BufError {
    /// The index names no buffer of this window.
    #[error("buffer index {0} is outside the pool set")]
    BadIndex(u32),
    /// The byte range does not fit in the buffer.
    #[error("bytes {off}..{end} do not fit in a {size}-byte buffer")]
    OutOfRange {
        /// Start of the range.
        off: usize,
        /// End of the range.
        end: usize,
        /// The buffer's data size.
        size: u32,
    },
}

/// What both parties can do with a pool set: read and write buffer headers and data, walk
/// chains, take references, and read counters. Allocation and freeing are role-specific
/// ([`ServerPools`], [`DriverPools`]).
#[derive(Clone)]
pub struct Buffers {
    mem: PoolMem,
    side: Side,
}

// SAFETY: the shared memory is only accessed through atomics or through byte copies bounded
// by the private geometry, and it is kept alive by the `Send + Sync` keep-alive.
unsafe impl Send for Buffers {}
// SAFETY: every method takes `&self` and touches shared memory only through atomics or
// bounded byte copies, which is sound from several threads at once.
unsafe impl Sync for Buffers {}

impl Buffers {
    pub(crate) fn new(mem: PoolMem, side: Side) -> Self {
        Self { mem, side }
    }

    /// The pool set's shape.
    pub fn geometry(&self) -> PoolGeometry {
        self.mem.geo
    }

    fn set(&self) -> &PoolSetShared {
        // SAFETY: valid while `keep` lives (PoolMem's construction contract); atomics only.
        unsafe { self.mem.set.as_ref() }
    }

    /// This side's set-wide counters (the line the other side never writes).
    fn counters(&self) -> &SetCounters {
        &self.set().counters[self.side as usize]
    }

    fn ctl(&self, pool: u32) -> &PoolCtl {
        debug_assert!(pool < self.mem.geo.pools);
        // SAFETY: `pool < pools` (callers derive it from a checked index or loop bound), and
        // `pools` control blocks are valid while `keep` lives.
        unsafe { &*self.mem.ctls.as_ptr().add(pool as usize) }
    }

    fn free_slot(&self, pool: u32, pos: u32) -> &AtomicU32 {
        let g = &self.mem.geo;
        let i = pool as usize * g.free_cap as usize + (pos & (g.free_cap - 1)) as usize;
        // SAFETY: `pool < pools` and the masked position is `< free_cap`, so `i` is inside
        // the `pools * free_cap` free array, valid while `keep` lives.
        unsafe { &*self.mem.free.as_ptr().add(i) }
    }

    /// The header of buffer `idx`, if `idx` names a buffer.
    #[inline]
    pub fn hdr(&self, idx: u32) -> Option<&BufHdr> {
        (idx < self.mem.geo.total()).then(|| {
            // SAFETY: `idx < total`, and `total` headers are valid while `keep` lives.
            unsafe { &*self.mem.hdrs.as_ptr().add(idx as usize) }
        })
    }

    /// Buffer `idx`'s `next` and `off_len` words, each read once (for chain walks).
    pub(crate) fn raw_link(&self, idx: u32) -> Option<(u32, u32)> {
        let h = self.hdr(idx)?;
        Some((
            h.next.load(Ordering::Relaxed),
            h.off_len.load(Ordering::Relaxed),
        ))
    }

    /// The pool that owns buffer `idx` (which must be valid).
    fn pool_of(&self, idx: u32) -> u32 {
        idx / self.mem.geo.per_pool
    }

    /// The next buffer of the chain, or `None` at its end or on a bad index.
    pub fn next(&self, idx: u32) -> Option<u32> {
        let n = self.hdr(idx)?.next.load(Ordering::Relaxed);
        (n < self.mem.geo.total()).then_some(n)
    }

    /// Links `next` (or [`NO_BUF`]) after `idx`.
    pub fn set_next(&self, idx: u32, next: u32) -> Result<(), BufError> {
        let h = self.hdr(idx).ok_or(BufError::BadIndex(idx))?;
        if next != NO_BUF && next >= self.mem.geo.total() {
            return Err(BufError::BadIndex(next));
        }
        h.next.store(next, Ordering::Relaxed);
        Ok(())
    }

    /// `(off, len)` of the valid bytes in buffer `idx`, clamped to the buffer (a peer's
    /// header may say anything).
    #[inline]
    pub fn off_len(&self, idx: u32) -> Option<(u16, u16)> {
        let v = self.hdr(idx)?.off_len.load(Ordering::Relaxed);
        let size = self.mem.geo.data_size;
        let off = (v & 0xffff).min(size);
        let len = (v >> 16).min(size - off);
        Some((off as u16, len as u16))
    }

    /// Sets `(off, len)` of buffer `idx`; the range must fit in the buffer.
    #[inline]
    pub fn set_off_len(&self, idx: u32, off: u16, len: u16) -> Result<(), BufError> {
        let h = self.hdr(idx).ok_or(BufError::BadIndex(idx))?;
        let end = usize::from(off) + usize::from(len);
        if end > self.mem.geo.data_size as usize {
            return Err(BufError::OutOfRange {
                off: off.into(),
                end,
                size: self.mem.geo.data_size,
            });
        }
        h.off_len
            .store(u32::from(off) | (u32::from(len) << 16), Ordering::Relaxed);
        Ok(())
    }

    /// The current reference count of `idx` (statistics and tests; racy by nature).
    pub fn refcnt(&self, idx: u32) -> Option<u32> {
        Some(self.hdr(idx)?.refcnt.load(Ordering::Relaxed))
    }

    /// Adds a holder to the chain headed by `idx` (which must be allocated).
    pub fn retain(&self, idx: u32) -> Result<(), BufError> {
        let h = self.hdr(idx).ok_or(BufError::BadIndex(idx))?;
        h.refcnt.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Links `bufs` into a chain in order (the last one ends it) and returns its head.
    pub fn chain(&self, bufs: &[u32]) -> Result<Option<u32>, BufError> {
        for w in bufs.windows(2) {
            self.set_next(w[0], w[1])?;
        }
        if let Some(&last) = bufs.last() {
            self.set_next(last, NO_BUF)?;
        }
        Ok(bufs.first().copied())
    }

    /// A pointer to the first data byte of buffer `idx`.
    #[inline]
    pub fn data_ptr(&self, idx: u32) -> Result<NonNull<u8>, BufError> {
        if idx >= self.mem.geo.total() {
            return Err(BufError::BadIndex(idx));
        }
        let off = idx as usize * self.mem.geo.data_size as usize;
        // SAFETY: `idx < total`, so `off + data_size` is inside the data region.
        Ok(unsafe { self.mem.data.add(off) })
    }

    fn range(&self, idx: u32, off: usize, len: usize) -> Result<*mut u8, BufError> {
        let size = self.mem.geo.data_size;
        let end = off.checked_add(len).filter(|&e| e <= size as usize);
        let Some(_) = end else {
            return Err(BufError::OutOfRange {
                off,
                end: off.saturating_add(len),
                size,
            });
        };
        // SAFETY: `off + len <= data_size`, so the result stays inside buffer `idx`.
        Ok(unsafe { self.data_ptr(idx)?.as_ptr().add(off) })
    }

    /// Copies `src` into buffer `idx` at `off`.
    pub fn write(&self, idx: u32, off: usize, src: &[u8]) -> Result<(), BufError> {
        let dst = self.range(idx, off, src.len())?;
        // SAFETY: `range` checked that `dst..dst+len` lies inside buffer `idx` in the window;
        // `src` is private memory, so the two cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Copies bytes of buffer `idx` from `off` into `dst`.
    pub fn read(&self, idx: u32, off: usize, dst: &mut [u8]) -> Result<(), BufError> {
        let src = self.range(idx, off, dst.len())?;
        // SAFETY: as in `write`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The whole data area of buffer `idx` as a slice.
    ///
    /// # Safety
    /// The caller must own the buffer (it allocated it, or received its descriptor and has
    /// not passed it on) for the life of the slice. A hostile peer that writes the buffer
    /// anyway can change its bytes but not its bounds: code reading the slice must check
    /// every value it uses, as it would for any packet.
    pub unsafe fn data(&self, idx: u32) -> Result<&[u8], BufError> {
        let p = self.data_ptr(idx)?;
        // SAFETY: the buffer's `data_size` bytes are inside the window; ownership is the
        // caller's promise.
        Ok(unsafe { std::slice::from_raw_parts(p.as_ptr(), self.mem.geo.data_size as usize) })
    }

    /// The whole data area of buffer `idx` as a mutable slice.
    ///
    /// # Safety
    /// As for [`Buffers::data`], and no other slice of this buffer may be alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn data_mut(&self, idx: u32) -> Result<&mut [u8], BufError> {
        let p = self.data_ptr(idx)?;
        // SAFETY: as in `data`; exclusivity is the caller's promise.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), self.mem.geo.data_size as usize) })
    }

    /// Buffers on the free lists now (reads shared counts; a corrupt list counts as empty).
    pub fn free_count(&self) -> u32 {
        (0..self.mem.geo.pools)
            .map(|p| self.list_len(p).unwrap_or(0))
            .sum()
    }

    fn list_len(&self, pool: u32) -> Option<u32> {
        let l = &self.ctl(pool).list;
        let n = l
            .tail
            .load(Ordering::Relaxed)
            .wrapping_sub(l.head.load(Ordering::Relaxed));
        (n <= self.mem.geo.per_pool).then_some(n)
    }

    /// A snapshot of every counter of the pool set.
    pub fn stats(&self) -> PoolSetStats {
        let [s, d] = &self.set().counters;
        // Shared words: a peer may have written anything there, so the sum saturates.
        let r = |f: fn(&SetCounters) -> &AtomicU64| {
            f(s).load(Ordering::Relaxed)
                .saturating_add(f(d).load(Ordering::Relaxed))
        };
        PoolSetStats {
            driver_drops: r(|c| &c.driver_drops),
            server_empty: r(|c| &c.server_empty),
            want_wakeups: r(|c| &c.want_wakeups),
            deferred: r(|c| &c.deferred),
            deferred_lost: r(|c| &c.deferred_lost),
            bad_chains: r(|c| &c.bad_chains),
            bad_releases: r(|c| &c.bad_releases),
            pools: (0..self.mem.geo.pools)
                .map(|p| {
                    let pc = &self.ctl(p).list.counters;
                    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
                    PoolStats {
                        buffers: self.mem.geo.per_pool,
                        free: self.list_len(p),
                        allocs: r(&pc.allocs),
                        frees: r(&pc.frees),
                        trylock_failures: r(&pc.trylock_failures),
                        lock_timeouts: r(&pc.lock_timeouts),
                        refused: r(&pc.refused),
                    }
                })
                .collect(),
        }
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    // ---- free-list operations; the caller holds the pool's lock ----

    /// Pops one buffer from `pool`'s free list by `policy`, skipping (and counting) entries
    /// that are out of range or not free.
    fn pop_locked(&self, pool: u32, rng: &mut fastrand::Rng) -> Option<u32> {
        let g = self.mem.geo;
        let ctl = self.ctl(pool);
        let first = pool * g.per_pool;
        // Each pass consumes one entry, so a corrupt list cannot keep us here.
        for _ in 0..=g.per_pool {
            let head = ctl.list.head.load(Ordering::Relaxed);
            let tail = ctl.list.tail.load(Ordering::Relaxed);
            let count = tail.wrapping_sub(head);
            if count == 0 {
                return None;
            }
            if count > g.per_pool {
                Self::bump(&ctl.list.counters.refused);
                return None;
            }
            let idx = match g.policy {
                AllocPolicy::Fifo => {
                    ctl.list.head.store(head.wrapping_add(1), Ordering::Relaxed);
                    self.free_slot(pool, head).load(Ordering::Relaxed)
                }
                AllocPolicy::Lifo | AllocPolicy::Random => {
                    let last = tail.wrapping_sub(1);
                    if g.policy == AllocPolicy::Random && count > 1 {
                        let pick = head.wrapping_add(rng.u32(..count));
                        let a = self.free_slot(pool, pick);
                        let b = self.free_slot(pool, last);
                        let va = a.load(Ordering::Relaxed);
                        a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
                        b.store(va, Ordering::Relaxed);
                    }
                    ctl.list.tail.store(last, Ordering::Relaxed);
                    self.free_slot(pool, last).load(Ordering::Relaxed)
                }
            };
            if idx < first || idx - first >= g.per_pool {
                Self::bump(&ctl.list.counters.refused);
                continue;
            }
            let Some(h) = self.hdr(idx) else { continue };
            // Under the pool's lock, and no honest party writes a free buffer's count: a
            // load and a store do what a compare-exchange would, without waiting for the
            // line (see `free_chain_server_holding`).
            if h.refcnt.load(Ordering::Relaxed) != 0 {
                Self::bump(&ctl.list.counters.refused);
                continue;
            }
            h.refcnt.store(1, Ordering::Relaxed);
            h.next.store(NO_BUF, Ordering::Relaxed);
            h.off_len.store(0, Ordering::Relaxed);
            h.flags.store(0, Ordering::Relaxed);
            let a = &ctl.list.counters.allocs;
            a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            return Some(idx);
        }
        None
    }

    /// Puts `idx` (whose count is already 0) on its pool's free list.
    fn push_locked(&self, pool: u32, idx: u32) -> bool {
        let ctl = self.ctl(pool);
        let head = ctl.list.head.load(Ordering::Relaxed);
        let tail = ctl.list.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(head) >= self.mem.geo.per_pool {
            Self::bump(&ctl.list.counters.refused);
            return false;
        }
        self.free_slot(pool, tail).store(idx, Ordering::Relaxed);
        ctl.list.tail.store(tail.wrapping_add(1), Ordering::Relaxed);
        let f = &ctl.list.counters.frees;
        f.store(f.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        true
    }

    fn try_lock(&self, pool: u32, owner: u32) -> bool {
        self.ctl(pool)
            .list
            .lock
            .compare_exchange(UNLOCKED, owner, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The server's lock: spins, then yields, then gives up (counted) after a bound, so a
    /// dead or hostile peer holding the word cannot hang the server.
    fn lock_server(&self, pool: u32) -> bool {
        for _ in 0..LOCK_SPINS {
            if self.try_lock(pool, SERVER) {
                return true;
            }
            crate::sync::spin_hint();
        }
        #[cfg(not(loom))]
        {
            let start = std::time::Instant::now();
            while start.elapsed() < LOCK_PATIENCE {
                if self.try_lock(pool, SERVER) {
                    return true;
                }
                crate::sync::yield_now();
            }
        }
        #[cfg(loom)]
        for _ in 0..LOCK_YIELDS {
            if self.try_lock(pool, SERVER) {
                return true;
            }
            crate::sync::yield_now();
        }
        Self::bump(&self.ctl(pool).list.counters.lock_timeouts);
        false
    }

    /// Takes or drops a pool's lock as the server would, from outside any operation, so
    /// tests can make the driver find a pool locked.
    #[doc(hidden)]
    pub fn debug_set_lock(&self, pool: u32, locked: bool) -> bool {
        if pool >= self.mem.geo.pools {
            return false;
        }
        if locked {
            self.try_lock(pool, SERVER)
        } else {
            self.unlock(pool);
            true
        }
    }

    fn unlock(&self, pool: u32) {
        self.ctl(pool).list.lock.store(UNLOCKED, Ordering::Release);
    }

    /// Drops one reference to the chain headed by `head`. Returns `Some(head)` when that was
    /// the last reference (the chain must now be freed), `None` otherwise or on a refused
    /// release (counted).
    fn unref(&self, head: u32) -> Option<u32> {
        let Some(h) = self.hdr(head) else {
            Self::bump(&self.counters().bad_releases);
            return None;
        };
        let mut cur = h.refcnt.load(Ordering::Relaxed);
        loop {
            if cur == 0 {
                Self::bump(&self.counters().bad_releases);
                return None;
            }
            match h
                .refcnt
                .compare_exchange_weak(cur, cur - 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return (cur == 1).then_some(head),
                Err(now) => cur = now,
            }
        }
    }

    /// Frees every buffer of the chain at `head` (whose count already reached 0) on the
    /// server path, holding each pool's lock across consecutive buffers of the same pool.
    /// Returns the number of buffers freed.
    fn free_chain_server(&self, head: u32) -> u32 {
        let mut locked = None;
        let freed = self.free_chain_server_holding(head, &mut locked);
        if let Some(p) = locked {
            self.unlock(p);
        }
        freed
    }

    /// [`Buffers::free_chain_server`], starting with the lock of pool `locked` held (if
    /// any) and leaving the last pool's lock held in `locked`, so that a burst of chains
    /// takes one lock per run of buffers of one pool, not one per chain.
    fn free_chain_server_holding(&self, head: u32, locked: &mut Option<u32>) -> u32 {
        let total = self.mem.geo.total();
        let mut freed = 0;
        let mut cur = head;
        let mut first = true;
        while cur != NO_BUF {
            if freed >= total || cur >= total {
                Self::bump(&self.counters().bad_chains);
                break;
            }
            let h = self.hdr(cur).expect("checked against total");
            let next = h.next.load(Ordering::Relaxed);
            // The head's count already went to 0; every other link must hold exactly 1.
            // A load and a store, not a compare-exchange: no honest party writes the count
            // of a chain's inner link (only heads count holders), so the two differ only
            // under a peer scribbling on it, which either way frees the buffer or stops the
            // walk (counted); and a store retires at once where a locked instruction waits
            // for the line, which the application that read the chain last still shares.
            // Ordering comes from the head's count (`unref`'s release and acquire), the
            // deferred-free ring's hand-over where a driver deferred the chain, and the pool
            // lock, not from this word.
            if !first {
                if h.refcnt.load(Ordering::Relaxed) != 1 {
                    Self::bump(&self.counters().bad_chains);
                    break;
                }
                h.refcnt.store(0, Ordering::Relaxed);
            }
            first = false;
            let pool = self.pool_of(cur);
            if *locked != Some(pool) {
                if let Some(p) = locked.take() {
                    self.unlock(p);
                }
                if !self.lock_server(pool) {
                    // Leaked until the owner rebuilds the pools; counted as a lock timeout.
                    break;
                }
                *locked = Some(pool);
            }
            if self.push_locked(pool, cur) {
                freed += 1;
            }
            cur = next;
        }
        freed
    }

    /// Counts `freed` buffers against what a waiting party wants, and wakes it when they
    /// bring the count to zero. The `want` word is a countdown: 0 when nobody waits, else the
    /// buffers still to come back before the waiter is woken (1: at the first). Waking a
    /// writer only when a batch has come back, as Linux wakes a blocked writer only when a
    /// third of its send buffer is free, keeps a writer that outruns the network from being
    /// woken (a system call for the releaser, two context switches) per freed buffer.
    fn notify_want(&self, freed: u32, signal: Option<&Arc<dyn Signal>>) {
        fence(Ordering::SeqCst);
        let want = &self.set().want;
        let mut cur = want.load(Ordering::Relaxed);
        while cur != 0 {
            let next = cur.saturating_sub(freed.max(1));
            match want.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    if next == 0 {
                        if let Some(s) = signal {
                            s.raise();
                        }
                        Self::bump(&self.counters().want_wakeups);
                    }
                    return;
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Whether a party waits for buffers (the `want` word is set).
    fn wanted(&self) -> bool {
        self.set().want.load(Ordering::Relaxed) != 0
    }

    /// The buffers of the chain headed by `head`, counted along its links (at most every
    /// buffer of the set: a loop in untrusted links ends the count).
    fn chain_len(&self, head: u32) -> u32 {
        let total = self.mem.geo.total();
        let mut n = 0;
        let mut cur = head;
        while cur != NO_BUF && n < total {
            let Some(h) = self.hdr(cur) else { break };
            n += 1;
            cur = h.next.load(Ordering::Relaxed);
        }
        n
    }
}

/// The server's (protocol side's) view of the pool set: may wait for locks and for buffers,
/// drains the deferred-free queue.
pub struct ServerPools {
    bufs: Buffers,
    deferred: Consumer,
    want_signal: Option<Arc<dyn Signal>>,
    rng: fastrand::Rng,
    start: u32,
}

impl ServerPools {
    pub(crate) fn new(
        bufs: Buffers,
        deferred: Consumer,
        want_signal: Option<Arc<dyn Signal>>,
    ) -> Self {
        Self {
            bufs,
            deferred,
            want_signal,
            rng: fastrand::Rng::with_seed(0x5eed_0001),
            start: 0,
        }
    }

    /// Buffer access shared with the driver.
    pub fn buffers(&self) -> &Buffers {
        &self.bufs
    }

    /// Allocates one buffer (count 1, no chain, empty), trying each pool in turn.
    pub fn alloc(&mut self) -> Option<u32> {
        let pools = self.bufs.mem.geo.pools;
        for k in 0..pools {
            let p = (self.start + k) % pools;
            if !self.bufs.lock_server(p) {
                continue;
            }
            let got = self.bufs.pop_locked(p, &mut self.rng);
            self.bufs.unlock(p);
            if got.is_some() {
                self.start = p;
                return got;
            }
        }
        Buffers::bump(&self.bufs.counters().server_empty);
        None
    }

    /// Allocates one buffer, first draining the deferred-free queue and then sleeping (the
    /// seed's `m_want`) until buffers come back or `timeout` passes.
    pub fn alloc_wait(&mut self, timeout: Option<Duration>) -> Option<u32> {
        loop {
            if let Some(b) = self.alloc() {
                return Some(b);
            }
            if self.drain_deferred(usize::MAX) > 0 {
                continue;
            }
            self.set_want(1);
            fence(Ordering::SeqCst);
            // Re-check after announcing, so a free that ran before the announcement is seen.
            if let Some(b) = self.alloc() {
                self.set_want(0);
                return Some(b);
            }
            if self.drain_deferred(usize::MAX) > 0 {
                self.set_want(0);
                continue;
            }
            let signal = self.want_signal.clone()?;
            if signal.wait(timeout) == crate::signal::WaitOutcome::TimedOut {
                self.set_want(0);
                return self.alloc();
            }
        }
    }

    /// Waits until `n` buffers are free (draining the deferred-free queue), sleeping until
    /// the releasers have given back what was missing — one wake-up for the lot, not one per
    /// buffer — or `timeout` passes. Returns whether `n` are free; `n` beyond the whole set
    /// is never reached, so ask for no more than the set holds ([`PoolGeometry::total`]).
    pub fn wait_for_free(&mut self, n: u32, timeout: Option<Duration>) -> bool {
        loop {
            self.drain_deferred(usize::MAX);
            let free = self.bufs.free_count();
            if free >= n {
                return true;
            }
            self.set_want(n - free);
            fence(Ordering::SeqCst);
            // Re-check after announcing, so a free that ran before the announcement is seen.
            if self.drain_deferred(usize::MAX) > 0 || self.bufs.free_count() >= n {
                self.set_want(0);
                continue;
            }
            let Some(signal) = self.want_signal.clone() else {
                self.set_want(0);
                return false;
            };
            if signal.wait(timeout) == crate::signal::WaitOutcome::TimedOut {
                self.set_want(0);
                self.drain_deferred(usize::MAX);
                return self.bufs.free_count() >= n;
            }
        }
    }

    fn set_want(&self, v: u32) {
        self.bufs.set().want.store(v, Ordering::Relaxed);
    }

    /// Drops one reference to the chain headed by `head`, freeing the whole chain when it was
    /// the last (one lock per run of buffers from the same pool, one wake-up check). Returns
    /// how many buffers went back. Refused releases are counted.
    pub fn release(&mut self, head: u32) -> u32 {
        self.release_burst(std::slice::from_ref(&head))
    }

    /// [`ServerPools::release`] for each of `heads`, with one lock per run of buffers of
    /// the same pool and one wake-up check (a full fence) for the lot. Returns how many
    /// buffers went back.
    pub fn release_burst(&mut self, heads: &[u32]) -> u32 {
        let mut locked = None;
        let mut freed = 0;
        for &head in heads {
            if let Some(h) = self.bufs.unref(head) {
                freed += self.bufs.free_chain_server_holding(h, &mut locked);
            }
        }
        if let Some(p) = locked {
            self.bufs.unlock(p);
        }
        if freed > 0 {
            self.bufs.notify_want(freed, self.want_signal.as_ref());
        }
        freed
    }

    /// Frees up to `max` chains the driver deferred; returns how many buffers went back.
    pub fn drain_deferred(&mut self, max: usize) -> u32 {
        let mut freed = 0;
        let mut batch = [Desc::default(); 32];
        let mut left = max;
        while left > 0 {
            let n = self.deferred.dequeue_burst(&mut batch[..left.min(32)]);
            if n == 0 {
                break;
            }
            for d in &batch[..n] {
                if d.len == HANDED_BACK {
                    // A reference the driver handed back (`DriverPools::hand_back_burst`):
                    // dropped here, on the owner's side.
                    if let Some(h) = self.bufs.unref(d.buf) {
                        freed += self.bufs.free_chain_server(h);
                    }
                    continue;
                }
                // The driver took the count to 0 before deferring; a head that is not at 0 is
                // a lie from the peer and is refused.
                match self.bufs.hdr(d.buf) {
                    Some(h) if h.refcnt.load(Ordering::Relaxed) == 0 => {
                        freed += self.bufs.free_chain_server(d.buf)
                    }
                    _ => Buffers::bump(&self.bufs.counters().bad_releases),
                }
            }
            left -= n;
        }
        if freed > 0 {
            self.bufs.notify_want(freed, self.want_signal.as_ref());
        }
        freed
    }

    /// Chains waiting on the deferred-free queue.
    pub fn deferred_pending(&mut self) -> u32 {
        self.deferred.available()
    }

    /// A handle that frees on the server path from any thread (e.g. a receive thread while
    /// another thread allocates).
    pub fn releaser(&self) -> Releaser {
        Releaser {
            bufs: self.bufs.clone(),
            want_signal: self.want_signal.clone(),
        }
    }

    /// Rebuilds every pool from scratch: each buffer for which `held` is false becomes free
    /// (count 0, no chain), every lock word is cleared, and the deferred-free queue is emptied.
    /// The free buffers go on each free array in the window's [`crate::BufferLayout`] order,
    /// as when the window was created. Returns how many buffers are free afterwards.
    ///
    /// This is how the window's owner takes back what a dead or misbehaving peer held or
    /// scribbled on. It must only be called while no other party is attached (nothing else
    /// can be allocating, freeing or holding buffers), and `held` must name every buffer this
    /// party still uses.
    pub fn reclaim_all(&mut self, held: impl Fn(u32) -> bool) -> u32 {
        let g = self.bufs.mem.geo;
        let mut free_total = 0;
        for p in 0..g.pools {
            let ctl = self.bufs.ctl(p);
            let mut n = 0;
            for idx in self
                .bufs
                .mem
                .layout
                .order(g.per_pool)
                .map(|b| p * g.per_pool + b)
            {
                if held(idx) {
                    continue;
                }
                let h = self.bufs.hdr(idx).expect("index below total");
                h.scribble([NO_BUF, 0, 0, 0]);
                self.bufs.free_slot(p, n).store(idx, Ordering::Relaxed);
                n += 1;
            }
            ctl.init_full(n);
            free_total += n;
        }
        self.deferred.resync();
        self.bufs.notify_want(free_total, self.want_signal.as_ref());
        free_total
    }
}

/// Frees chains on the server path; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Releaser {
    bufs: Buffers,
    want_signal: Option<Arc<dyn Signal>>,
}

impl Releaser {
    /// As [`ServerPools::release`].
    pub fn release(&self, head: u32) {
        if let Some(h) = self.bufs.unref(head) {
            let freed = self.bufs.free_chain_server(h);
            self.bufs.notify_want(freed, self.want_signal.as_ref());
        }
    }

    /// Buffer access.
    pub fn buffers(&self) -> &Buffers {
        &self.bufs
    }
}

/// The driver's view of the pool set: never waits. Allocation try-locks each pool once and
/// counts a drop when none gives a buffer; a release it cannot complete at once goes to the
/// deferred-free queue.
pub struct DriverPools {
    bufs: Buffers,
    deferred: Producer,
    want_signal: Option<Arc<dyn Signal>>,
    rng: fastrand::Rng,
    start: u32,
}

impl DriverPools {
    pub(crate) fn new(
        bufs: Buffers,
        deferred: Producer,
        want_signal: Option<Arc<dyn Signal>>,
    ) -> Self {
        Self {
            bufs,
            deferred,
            want_signal,
            rng: fastrand::Rng::with_seed(0x5eed_0002),
            start: 0,
        }
    }

    /// Buffer access shared with the server.
    pub fn buffers(&self) -> &Buffers {
        &self.bufs
    }

    /// Allocates one buffer, or counts a drop and returns `None`. Never waits.
    #[inline]
    pub fn alloc(&mut self) -> Option<u32> {
        let mut one = [0u32; 1];
        (self.alloc_burst(&mut one) == 1).then_some(one[0])
    }

    /// Allocates up to `out.len()` buffers into `out`, taking each pool's lock once (where
    /// [`alloc`](Self::alloc) takes it per buffer); returns how many. Counts a drop when it
    /// got none. Never waits. The caller owns every buffer returned and must use or
    /// [`release`](Self::release) each.
    pub fn alloc_burst(&mut self, out: &mut [u32]) -> usize {
        let pools = self.bufs.mem.geo.pools;
        let mut got = 0;
        for k in 0..pools {
            if got == out.len() {
                break;
            }
            let p = (self.start + k) % pools;
            if !self.bufs.try_lock(p, DRIVER) {
                Buffers::bump(&self.bufs.ctl(p).list.counters.trylock_failures);
                continue;
            }
            while got < out.len() {
                let Some(b) = self.bufs.pop_locked(p, &mut self.rng) else {
                    break;
                };
                out[got] = b;
                got += 1;
            }
            self.bufs.unlock(p);
            if got == out.len() {
                self.start = p;
            }
        }
        if got == 0 && !out.is_empty() {
            Buffers::bump(&self.bufs.counters().driver_drops);
        }
        got
    }

    /// Drops one reference to the chain headed by `head`. When it was the last, a single
    /// buffer goes straight back to its pool if the pool's lock is free; a chain, or a buffer
    /// whose pool is locked, goes to the deferred-free queue for the server. Never waits.
    #[inline]
    pub fn release(&mut self, head: u32) {
        let Some(h) = self.bufs.unref(head) else {
            return;
        };
        let hdr = self.bufs.hdr(h).expect("unref checked the index");
        if hdr.next.load(Ordering::Relaxed) == NO_BUF {
            let pool = self.bufs.pool_of(h);
            if self.bufs.try_lock(pool, DRIVER) {
                self.bufs.push_locked(pool, h);
                self.bufs.unlock(pool);
                self.bufs.notify_want(1, self.want_signal.as_ref());
                return;
            }
            Buffers::bump(&self.bufs.ctl(pool).list.counters.trylock_failures);
        }
        let c = self.bufs.counters();
        // The buffers a deferred chain will give back, counted only for a waiter.
        let freed = if self.bufs.wanted() {
            self.bufs.chain_len(h)
        } else {
            1
        };
        if self.deferred.enqueue(Desc::new(h, 0)).is_ok() {
            Buffers::bump(&c.deferred);
            self.bufs.notify_want(freed, self.want_signal.as_ref());
        } else {
            Buffers::bump(&c.deferred_lost);
        }
    }

    /// Hands the references to the chains `heads` back to the server side of the pool set
    /// (the party that allocated them), which drops them when it drains the deferred-free
    /// queue: this side writes one queue slot per chain and touches no buffer header, no
    /// lock and no free list — the lines the owner allocates from stay in the owner's
    /// cache. One wake-up check for the lot. Never waits; a chain that finds the queue full
    /// (never in honest operation: it has room for every buffer) is counted lost.
    pub fn hand_back_burst(&mut self, heads: &[u32]) {
        let mut descs = [Desc::default(); 32];
        let mut handed = 0u32;
        for part in heads.chunks(descs.len()) {
            for (d, &h) in descs.iter_mut().zip(part) {
                *d = Desc::new(h, HANDED_BACK);
            }
            let placed = self.deferred.enqueue_burst(&descs[..part.len()]);
            let c = self.bufs.counters();
            c.deferred.fetch_add(placed as u64, Ordering::Relaxed);
            if placed < part.len() {
                c.deferred_lost
                    .fetch_add((part.len() - placed) as u64, Ordering::Relaxed);
            }
            // The buffers they will give back, counted along the chains only for a waiter.
            handed += if self.bufs.wanted() {
                part[..placed].iter().map(|&h| self.bufs.chain_len(h)).sum()
            } else {
                placed as u32
            };
        }
        if handed > 0 {
            self.bufs.notify_want(handed, self.want_signal.as_ref());
        }
    }

    /// Seeds the random policy's generator (for reproducible experiments).
    pub fn seed(&mut self, seed: u64) {
        self.rng = fastrand::Rng::with_seed(seed);
    }
}

/// `Desc::len` of a deferred-free entry that hands a reference back rather than a chain
/// already at count 0 (see [`DriverPools::hand_back_burst`]). It gives the queue's producer
/// no power it lacked: that party maps the headers and may already drop any reference
/// ([`DriverPools::release`]); the drop is still checked (`unref` refuses a free buffer).
const HANDED_BACK: u32 = 1;

impl ServerPools {
    /// Seeds the random policy's generator (for reproducible experiments).
    pub fn seed(&mut self, seed: u64) {
        self.rng = fastrand::Rng::with_seed(seed);
    }
}

impl PoolCtl {
    /// Marks a freshly filled free array of `n` entries as the pool's free list.
    pub(crate) fn init_full(&self, n: u32) {
        self.list.head.store(0, Ordering::Relaxed);
        self.list.tail.store(n, Ordering::Relaxed);
        self.list.lock.store(UNLOCKED, Ordering::Relaxed);
    }

    /// Overwrites the lock word and free-list indices (fault-injection tests only).
    #[doc(hidden)]
    pub fn scribble(&self, lock: u32, head: u32, tail: u32) {
        self.list.lock.store(lock, Ordering::Relaxed);
        self.list.head.store(head, Ordering::Relaxed);
        self.list.tail.store(tail, Ordering::Relaxed);
    }
}
