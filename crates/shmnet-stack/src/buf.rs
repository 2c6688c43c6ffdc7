//! Buffers and buffer chains: the [`BufferPool`] trait the stack works over, and
//! [`HeapPool`], a `Vec`-backed implementation for tests, benchmarks and fuzzing.
//!
//! # Model
//!
//! A pool holds `total()` buffers of `capacity()` bytes each, addressed by a [`BufIdx`].
//! Every buffer has a small header:
//!
//! * `next: Option<BufIdx>` — the link to the next buffer of a chain;
//! * `off: u16` — where the valid bytes start inside the buffer (room before it is headroom);
//! * `len: u16` — how many valid bytes follow `off`.
//!
//! A *chain* is a head buffer and the buffers reachable through `next`; its bytes are the
//! concatenation of each buffer's valid bytes. A received frame is a single buffer; a
//! reassembled datagram is the chain of its fragments' buffers, each narrowed (by `off`/`len`)
//! to its share of the payload — never a copy.
//!
//! # Ownership
//!
//! A buffer index is owned by exactly one party at a time. Whoever owns a buffer must either
//! hand it on or free it; the stack never holds a buffer it does not account for (the tests
//! check `free_count() == total()` once everything is drained).
//!
//! The header fields of a buffer may come from another process (the real pool lives in shared
//! memory), so the stack never trusts `off`/`len`: [`valid`] clamps them to the capacity, and
//! [`BufferPool::free_chain`] is bounded against cycles.

/// The index of a buffer inside its pool: shmnet-chan's, so that the stack, the
/// shared-memory pools and the chain walk name buffers with one type.
pub use shmnet_chan::BufIdx;

/// The default data capacity of a buffer: an MTU-1500 Ethernet frame and headroom fit.
pub const DEFAULT_BUF_CAPACITY: usize = 2048;

/// A store of fixed-size buffers addressed by index.
///
/// Implemented by [`HeapPool`] here and by shmnet-chan's shared-memory pool set. Every method
/// taking a [`BufIdx`] requires that index to be `< total()`; an implementation may panic on
/// an out-of-range index (shared-memory implementations validate indices supplied by a peer
/// before they reach the stack).
pub trait BufferPool {
    /// Take a free buffer; its header is reset (`next = None`, `off = 0`, `len = 0`).
    /// `None` when the pool is empty.
    fn alloc(&mut self) -> Option<BufIdx>;
    /// Return one buffer to the pool (its `next` link is ignored).
    fn free(&mut self, idx: BufIdx);
    /// Return a whole chain to the pool, following `next` links. Bounded: it frees at most
    /// `total()` buffers, so a cyclic chain cannot hang the caller. Returns how many it freed.
    fn free_chain(&mut self, head: BufIdx) -> usize {
        let mut cur = Some(head);
        let mut n = 0;
        while let Some(idx) = cur {
            if n >= self.total() {
                break;
            }
            cur = self.next(idx);
            self.free(idx);
            n += 1;
        }
        n
    }
    /// The chain link of a buffer.
    fn next(&self, idx: BufIdx) -> Option<BufIdx>;
    /// Set the chain link of a buffer.
    fn set_next(&mut self, idx: BufIdx, next: Option<BufIdx>);
    /// Where the valid bytes start.
    fn off(&self, idx: BufIdx) -> u16;
    /// Set where the valid bytes start. `len` is cut so that `off + len` stays within the
    /// capacity (the shared-memory pools keep every range inside its buffer): to move both,
    /// read `len` first, or use `set_window`.
    fn set_off(&mut self, idx: BufIdx, off: u16);
    /// How many valid bytes follow `off`.
    fn len(&self, idx: BufIdx) -> u16;
    /// Set how many valid bytes follow `off`.
    fn set_len(&mut self, idx: BufIdx, len: u16);
    /// `(off, len)` together: pools whose header holds both in one word read it once.
    fn off_len(&self, idx: BufIdx) -> (u16, u16) {
        (self.off(idx), self.len(idx))
    }
    /// Sets `off` and `len` together (`off + len` within the capacity: a pool may cut
    /// `len` to keep it so): pools whose header holds both write it once.
    fn set_off_len(&mut self, idx: BufIdx, off: u16, len: u16) {
        self.set_off(idx, off);
        self.set_len(idx, len);
    }
    /// The whole data area of a buffer (`capacity()` bytes).
    fn data(&self, idx: BufIdx) -> &[u8];
    /// The whole data area of a buffer (`capacity()` bytes), writable.
    fn data_mut(&mut self, idx: BufIdx) -> &mut [u8];
    /// The data capacity of every buffer.
    fn capacity(&self) -> usize;
    /// How many buffers are free now.
    fn free_count(&self) -> usize;
    /// How many buffers the pool has in all.
    fn total(&self) -> usize;
    /// Copy `len` bytes from buffer `src` at `src_off` to buffer `dst` at `dst_off` (two
    /// different buffers; both ranges within the capacity, else nothing is copied and
    /// `false` returned). The stack's one pool-to-pool copy: TCP's segmentation, coalescing
    /// small segments. The default bounces through a small stack array; pools whose memory
    /// allows it copy directly.
    fn copy_between(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
    ) -> bool {
        let cap = self.capacity();
        if src == dst || src_off + len > cap || dst_off + len > cap {
            return false;
        }
        let mut bounce = [0u8; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(bounce.len());
            bounce[..n].copy_from_slice(&self.data(src)[src_off + done..src_off + done + n]);
            self.data_mut(dst)[dst_off + done..dst_off + done + n].copy_from_slice(&bounce[..n]);
            done += n;
        }
        true
    }

    /// [`copy_between`](BufferPool::copy_between) for seed 003's NC send: non-temporal
    /// stores over the whole lines of `dst`'s range, its partial first and last lines
    /// stored ordinarily and left for the caller to clean with the frame's headers
    /// ([`shmnet_chan::coherence::copy_nt_slice_edges_cached`]: fenced, so `dst` may be read at once). The default copies, then evicts the
    /// range's lines; pools whose memory allows it store non-temporally.
    fn copy_between_uncached(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
    ) -> bool {
        if !self.copy_between(src, src_off, dst, dst_off, len) {
            return false;
        }
        let ops = shmnet_chan::coherence::CpuOps::cached();
        shmnet_chan::coherence::clean_slice(ops, &self.data(dst)[dst_off..dst_off + len]);
        true
    }
}

/// The valid bytes of a buffer, `data[off .. off + len]`, clamped to the capacity so that
/// a corrupt header can never cause an out-of-bounds access.
#[inline]
pub fn valid<P: BufferPool + ?Sized>(pool: &P, idx: BufIdx) -> &[u8] {
    let (off, len) = pool.off_len(idx);
    let (off, len) = (off as usize, len as usize);
    let data = pool.data(idx);
    let start = off.min(data.len());
    let end = (off + len).min(data.len());
    &data[start..end]
}

/// Set `off`/`len` of a buffer, both given as `usize`; the caller guarantees
/// `off + len <= capacity() <= u16::MAX`.
#[inline]
pub(crate) fn set_window<P: BufferPool + ?Sized>(
    pool: &mut P,
    idx: BufIdx,
    off: usize,
    len: usize,
) {
    debug_assert!(off + len <= pool.capacity());
    pool.set_off_len(idx, off as u16, len as u16);
}

/// The buffers of the chain at `head` with their valid bytes ([`valid`]), in order: the one
/// walk of a chain in the stack. It follows at most `max_bufs` links and never more than
/// `total()`, so a cyclic chain ends instead of looping.
pub fn chain_segments<P: BufferPool + ?Sized>(
    pool: &P,
    head: BufIdx,
    max_bufs: usize,
) -> ChainSegments<'_, P> {
    ChainSegments {
        pool,
        cur: Some(head),
        left: max_bufs.min(pool.total()),
    }
}

/// The iterator of [`chain_segments`].
#[derive(Debug)]
pub struct ChainSegments<'a, P: ?Sized> {
    pool: &'a P,
    cur: Option<BufIdx>,
    /// Links still allowed.
    left: usize,
}

impl<'a, P: BufferPool + ?Sized> Iterator for ChainSegments<'a, P> {
    type Item = (BufIdx, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let idx = self.cur.filter(|_| self.left > 0)?;
        self.left -= 1;
        self.cur = self.pool.next(idx);
        Some((idx, valid(self.pool, idx)))
    }
}

/// Total valid bytes and number of buffers of a chain, walking at most `total()` links.
pub fn chain_len<P: BufferPool + ?Sized>(pool: &P, head: BufIdx) -> (usize, usize) {
    chain_segments(pool, head, usize::MAX).fold((0, 0), |(bytes, bufs), (_, seg)| {
        (bytes + seg.len(), bufs + 1)
    })
}

/// Copy the bytes of a chain into a `Vec` (tests and diagnostics; not on the data path).
pub fn chain_to_vec<P: BufferPool + ?Sized>(pool: &P, head: BufIdx) -> Vec<u8> {
    let mut out = Vec::new();
    for (_, seg) in chain_segments(pool, head, usize::MAX) {
        out.extend_from_slice(seg);
    }
    out
}

/// A pool of heap buffers: a `Vec` of fixed-size data areas and headers, with a LIFO free
/// list (the most recently freed buffer is the next one allocated, as a warm-cache pool
/// would do).
///
/// It checks its callers: freeing a buffer that is already free panics, because that is a bug
/// in the stack (or the test), never a property of input data. `free_chain` stops at a
/// buffer that is already free, so a cycle ends there.
#[derive(Debug)]
pub struct HeapPool {
    cap: usize,
    data: Vec<u8>,
    hdr: Vec<Header>,
    free: Vec<BufIdx>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Header {
    next: Option<BufIdx>,
    off: u16,
    len: u16,
    in_use: bool,
}

impl HeapPool {
    /// A pool of `count` buffers of `capacity` bytes each.
    ///
    /// # Panics
    /// If `capacity` exceeds `u16::MAX` (offsets are 16-bit) or `count` exceeds `u32::MAX`.
    pub fn new(count: usize, capacity: usize) -> HeapPool {
        assert!(
            capacity <= u16::MAX as usize,
            "buffer capacity must fit in u16"
        );
        assert!(count <= u32::MAX as usize, "buffer count must fit in u32");
        HeapPool {
            cap: capacity,
            data: vec![0; count * capacity],
            hdr: vec![Header::default(); count],
            free: (0..count as u32).rev().map(BufIdx).collect(),
        }
    }

    /// A pool of `count` buffers of [`DEFAULT_BUF_CAPACITY`] bytes.
    pub fn with_count(count: usize) -> HeapPool {
        HeapPool::new(count, DEFAULT_BUF_CAPACITY)
    }

    /// How many buffers are allocated.
    pub fn in_use(&self) -> usize {
        self.hdr.len() - self.free.len()
    }

    /// Whether a buffer is currently allocated.
    pub fn is_allocated(&self, idx: BufIdx) -> bool {
        self.hdr[idx.as_usize()].in_use
    }

    /// `src`'s range and `dst`'s, `len` bytes each: `None` when they are the same buffer or a
    /// range passes the capacity (or the pool).
    fn two_ranges(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
    ) -> Option<(&[u8], &mut [u8])> {
        if src == dst || src_off + len > self.cap || dst_off + len > self.cap {
            return None;
        }
        let from = src.as_usize() * self.cap + src_off;
        let to = dst.as_usize() * self.cap + dst_off;
        if from.max(to) + len > self.data.len() {
            return None;
        }
        // Two different buffers: the ranges lie in disjoint parts of `data`.
        let (a, b) = self.data.split_at_mut(from.max(to));
        Some(if from < to {
            (&a[from..from + len], &mut b[..len])
        } else {
            (&b[..len], &mut a[to..to + len])
        })
    }

    /// Allocate a buffer and fill it with `bytes` at offset `off` (a driver's receive copy).
    /// `None` if the pool is empty or the bytes do not fit.
    pub fn alloc_with(&mut self, off: usize, bytes: &[u8]) -> Option<BufIdx> {
        if off + bytes.len() > self.cap {
            return None;
        }
        let idx = self.alloc()?;
        self.data_mut(idx)[off..off + bytes.len()].copy_from_slice(bytes);
        set_window(self, idx, off, bytes.len());
        Some(idx)
    }
}

impl BufferPool for HeapPool {
    #[inline]
    fn alloc(&mut self) -> Option<BufIdx> {
        let idx = self.free.pop()?;
        self.hdr[idx.as_usize()] = Header {
            next: None,
            off: 0,
            len: 0,
            in_use: true,
        };
        Some(idx)
    }

    #[inline]
    fn free(&mut self, idx: BufIdx) {
        let h = &mut self.hdr[idx.as_usize()];
        assert!(h.in_use, "double free of buffer {}", idx.0);
        h.in_use = false;
        h.next = None;
        self.free.push(idx);
    }

    fn free_chain(&mut self, head: BufIdx) -> usize {
        // `free` for each buffer, with the header looked up once per buffer.
        let total = self.hdr.len();
        let mut cur = Some(head);
        let mut n = 0;
        while let Some(idx) = cur {
            if n >= total {
                break;
            }
            let h = &mut self.hdr[idx.as_usize()];
            if !h.in_use {
                break;
            }
            cur = h.next;
            h.in_use = false;
            h.next = None;
            self.free.push(idx);
            n += 1;
        }
        n
    }

    #[inline]
    fn next(&self, idx: BufIdx) -> Option<BufIdx> {
        self.hdr[idx.as_usize()].next
    }

    #[inline]
    fn set_next(&mut self, idx: BufIdx, next: Option<BufIdx>) {
        self.hdr[idx.as_usize()].next = next;
    }

    #[inline]
    fn off(&self, idx: BufIdx) -> u16 {
        self.hdr[idx.as_usize()].off
    }

    #[inline]
    fn set_off(&mut self, idx: BufIdx, off: u16) {
        // As the shared-memory pools do: the range stays inside the buffer.
        let cap = self.cap as u16;
        let h = &mut self.hdr[idx.as_usize()];
        h.off = off.min(cap);
        h.len = h.len.min(cap - h.off);
    }

    #[inline]
    fn len(&self, idx: BufIdx) -> u16 {
        self.hdr[idx.as_usize()].len
    }

    #[inline]
    fn set_len(&mut self, idx: BufIdx, len: u16) {
        self.hdr[idx.as_usize()].len = len;
    }

    #[inline]
    fn data(&self, idx: BufIdx) -> &[u8] {
        let start = idx.as_usize() * self.cap;
        &self.data[start..start + self.cap]
    }

    #[inline]
    fn data_mut(&mut self, idx: BufIdx) -> &mut [u8] {
        let start = idx.as_usize() * self.cap;
        &mut self.data[start..start + self.cap]
    }

    fn copy_between(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
    ) -> bool {
        match self.two_ranges(src, src_off, dst, dst_off, len) {
            Some((s, d)) => {
                d.copy_from_slice(s);
                true
            }
            None => false,
        }
    }

    fn copy_between_uncached(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
    ) -> bool {
        match self.two_ranges(src, src_off, dst, dst_off, len) {
            Some((s, d)) => {
                shmnet_chan::coherence::copy_nt_slice_edges_cached(d, s);
                true
            }
            None => false,
        }
    }

    #[inline]
    fn capacity(&self) -> usize {
        self.cap
    }

    #[inline]
    fn free_count(&self) -> usize {
        self.free.len()
    }

    #[inline]
    fn total(&self) -> usize {
        self.hdr.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_lifo_and_reset() {
        let mut p = HeapPool::new(4, 64);
        let a = p.alloc().unwrap();
        p.set_off(a, 3);
        p.set_len(a, 5);
        p.free(a);
        let b = p.alloc().unwrap();
        assert_eq!(a, b, "LIFO");
        assert_eq!((p.off(b), p.len(b), p.next(b)), (0, 0, None));
        assert_eq!(p.free_count(), 3);
    }

    #[test]
    fn free_chain_is_bounded_on_cycles() {
        let mut p = HeapPool::new(3, 64);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        p.set_next(a, Some(b));
        p.set_next(b, Some(a));
        assert_eq!(p.free_chain(a), 2);
        assert_eq!(p.free_count(), 3);
    }

    #[test]
    fn chain_segments_walk_in_order_and_end_on_cycles() {
        let mut p = HeapPool::new(3, 64);
        let a = p.alloc_with(2, b"ab").unwrap();
        let b = p.alloc_with(0, b"").unwrap();
        let c = p.alloc_with(5, b"cde").unwrap();
        p.set_next(a, Some(b));
        p.set_next(b, Some(c));
        let segs: Vec<_> = chain_segments(&p, a, usize::MAX).collect();
        assert_eq!(segs, [(a, &b"ab"[..]), (b, &b""[..]), (c, &b"cde"[..])]);
        assert_eq!(chain_len(&p, a), (5, 3));
        assert_eq!(chain_to_vec(&p, a), b"abcde");
        assert_eq!(chain_segments(&p, a, 2).count(), 2);
        p.set_next(c, Some(a));
        assert_eq!(
            chain_segments(&p, a, usize::MAX).count(),
            3,
            "bounded by total()"
        );
        assert_eq!(chain_to_vec(&p, b), b"cdeab");
    }

    #[test]
    fn valid_clamps_corrupt_headers() {
        let mut p = HeapPool::new(1, 64);
        let a = p.alloc().unwrap();
        p.set_off(a, 60);
        p.set_len(a, 100);
        assert_eq!(valid(&p, a).len(), 4);
        p.set_off(a, 1000);
        assert!(valid(&p, a).is_empty());
    }
}
