//! Descriptors: what a queue carries. A descriptor names a buffer; it never holds data.

use crate::sync::{AtomicU64, Ordering};

/// A buffer index that names no buffer (the end of a chain).
pub const NO_BUF: u32 = u32::MAX;

/// The index of a buffer in a pool set: global across the set's pools (buffer `i` lies in
/// pool `i / per_pool`). shmnet's one buffer-index type: the stack's pools
/// (`shmnet_stack::BufferPool`, which re-exports it) and the chain walk
/// ([`crate::Buffers::segments`]) take and return it.
///
/// Only a name: an index read from shared memory may name no buffer, and every use checks
/// it against the party's own geometry. [`BufIdx::NONE`] is the end of a chain.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufIdx(pub u32);

impl BufIdx {
    /// The index that names no buffer ([`NO_BUF`]).
    pub const NONE: BufIdx = BufIdx(NO_BUF);

    /// The index as a `usize`, for indexing.
    #[inline]
    pub const fn as_usize(self) -> usize {
        self.0 as usize
    }

    /// The raw index, as a descriptor or a buffer header carries it.
    #[inline]
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl From<u32> for BufIdx {
    #[inline]
    fn from(i: u32) -> Self {
        BufIdx(i)
    }
}

impl From<BufIdx> for u32 {
    #[inline]
    fn from(i: BufIdx) -> Self {
        i.0
    }
}

impl std::fmt::Display for BufIdx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One queue entry: `{buffer index, length, flags}` plus a word the parties may use for their
/// own purposes (a message tag; 0 when unused). 16 bytes, so four share a cache line.
///
/// A descriptor read from a queue came from another process: its `buf` and `len` are checked
/// against the window's layout before the consumer sees it (see [`crate::ring::DescLimits`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Desc {
    /// Global buffer index in the window's pool set (or any value the queue's limits allow).
    pub buf: u32,
    /// Bytes of the message the descriptor names (for a chain: the whole chain).
    pub len: u32,
    /// Per-message flags; bit meanings belong to the parties (see [`flags`]).
    pub flags: u32,
    /// Free for the parties' use; carried unchanged.
    pub aux: u32,
}

/// Descriptor flag bits used by shmnet's own parties.
pub mod flags {
    /// The buffer heads a chain of more than one buffer.
    pub const CHAIN: u32 = 1 << 0;
}

impl Desc {
    /// A descriptor for buffer `buf` holding `len` bytes.
    pub const fn new(buf: u32, len: u32) -> Self {
        Self {
            buf,
            len,
            flags: 0,
            aux: 0,
        }
    }
}

/// The shared-memory form of a [`Desc`]: two 64-bit words written with relaxed stores
/// (plain moves on x86) and published by the queue's release store of its head.
#[repr(C)]
#[derive(Debug, Default)]
pub struct DescSlot {
    lo: AtomicU64,
    hi: AtomicU64,
}

impl DescSlot {
    #[inline]
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) fn write(&self, d: Desc) {
        self.lo.store(
            u64::from(d.buf) | (u64::from(d.len) << 32),
            Ordering::Relaxed,
        );
        self.hi.store(
            u64::from(d.flags) | (u64::from(d.aux) << 32),
            Ordering::Relaxed,
        );
    }

    #[inline]
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) fn read(&self) -> Desc {
        let lo = self.lo.load(Ordering::Relaxed);
        let hi = self.hi.load(Ordering::Relaxed);
        Desc {
            buf: lo as u32,
            len: (lo >> 32) as u32,
            flags: hi as u32,
            aux: (hi >> 32) as u32,
        }
    }

    /// Writes raw words, as a hostile peer might (tests and fault injection only).
    #[doc(hidden)]
    pub fn scribble(&self, lo: u64, hi: u64) {
        self.lo.store(lo, Ordering::Relaxed);
        self.hi.store(hi, Ordering::Relaxed);
    }
}
