//! The stack's view of a shared-memory pool set: [`shmnet_stack::BufferPool`] over
//! shmnet-chan's server-side pools.
//!
//! The stack frees one buffer at a time and walks chains itself; shmnet-chan counts
//! references on chain heads. Every buffer the stack holds has a count of 1, so freeing one
//! buffer is "unlink it, drop its reference". Indices reaching the stack were validated by
//! the ring that carried them (`Window::buffer_limits`); an index that is nevertheless out of
//! range reads as an empty buffer and writes go nowhere — never a panic.

use shmnet_chan::{NO_BUF, ServerPools};
use shmnet_stack::{BufIdx, BufferPool};

/// A pool set seen as the stack's [`BufferPool`].
pub struct ChanPool {
    pools: ServerPools,
    capacity: usize,
    total: usize,
}

impl ChanPool {
    /// Wraps the server's pools.
    pub fn new(pools: ServerPools) -> Self {
        let g = pools.buffers().geometry();
        Self {
            capacity: g.data_size as usize,
            total: g.total() as usize,
            pools,
        }
    }

    /// The buffers, for reading chains the stack handed out ([`shmnet_chan::Buffers::segments`]).
    pub fn buffers(&self) -> &shmnet_chan::Buffers {
        self.pools.buffers()
    }

    /// The pools, for what the stack does not do (draining deferred frees, statistics).
    pub fn pools(&mut self) -> &mut ServerPools {
        &mut self.pools
    }
}

impl ChanPool {
    /// `f(dst range, src range)` over two different buffers; `false` (nothing done) when they
    /// are the same buffer, either index is out of range, or a range passes the capacity.
    fn with_two(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
        f: impl FnOnce(&mut [u8], &[u8]),
    ) -> bool {
        let cap = self.capacity;
        if src == dst || src_off + len > cap || dst_off + len > cap {
            return false;
        }
        let b = self.pools.buffers();
        // SAFETY: the stack owns both buffers (as in `data`), they are different buffers so
        // the slices do not overlap, and `&mut self` keeps any other slice of this pool from
        // living alongside them.
        let (Ok(s), Ok(d)) = (unsafe { b.data(src.0) }, unsafe { b.data_mut(dst.0) }) else {
            return false;
        };
        f(&mut d[dst_off..dst_off + len], &s[src_off..src_off + len]);
        true
    }
}

impl BufferPool for ChanPool {
    fn alloc(&mut self) -> Option<BufIdx> {
        self.pools.alloc().map(BufIdx)
    }

    fn free(&mut self, idx: BufIdx) {
        let _ = self.pools.buffers().set_next(idx.0, NO_BUF);
        self.pools.release(idx.0);
    }

    /// The whole chain in one [`ServerPools::release`]: every buffer the stack holds has a
    /// count of 1, so the chain at `head` is a shmnet-chan chain whose head drops to 0 here,
    /// and the pools free it with one lock per run of buffers from the same pool (the
    /// default, a `free` per buffer, took a lock and a fence per buffer).
    fn free_chain(&mut self, head: BufIdx) -> usize {
        self.pools.release(head.0) as usize
    }

    fn next(&self, idx: BufIdx) -> Option<BufIdx> {
        self.pools.buffers().next(idx.0).map(BufIdx)
    }

    fn set_next(&mut self, idx: BufIdx, next: Option<BufIdx>) {
        let _ = self
            .pools
            .buffers()
            .set_next(idx.0, next.map_or(NO_BUF, |b| b.0));
    }

    fn off(&self, idx: BufIdx) -> u16 {
        self.pools
            .buffers()
            .off_len(idx.0)
            .map_or(0, |(off, _)| off)
    }

    fn set_off(&mut self, idx: BufIdx, off: u16) {
        let b = self.pools.buffers();
        let len = b.off_len(idx.0).map_or(0, |(_, len)| len);
        let off = off.min(self.capacity as u16);
        let len = len.min(self.capacity as u16 - off);
        let _ = b.set_off_len(idx.0, off, len);
    }

    fn len(&self, idx: BufIdx) -> u16 {
        self.pools
            .buffers()
            .off_len(idx.0)
            .map_or(0, |(_, len)| len)
    }

    fn set_len(&mut self, idx: BufIdx, len: u16) {
        let b = self.pools.buffers();
        let off = b.off_len(idx.0).map_or(0, |(off, _)| off);
        let len = len.min(self.capacity as u16 - off);
        let _ = b.set_off_len(idx.0, off, len);
    }

    fn off_len(&self, idx: BufIdx) -> (u16, u16) {
        self.pools.buffers().off_len(idx.0).unwrap_or((0, 0))
    }

    fn set_off_len(&mut self, idx: BufIdx, off: u16, len: u16) {
        let off = off.min(self.capacity as u16);
        let len = len.min(self.capacity as u16 - off);
        let _ = self.pools.buffers().set_off_len(idx.0, off, len);
    }

    fn data(&self, idx: BufIdx) -> &[u8] {
        // SAFETY: the stack owns every buffer whose index it holds (it was allocated here or
        // handed over by the driver through a ring), and the slice's bounds are the buffer's.
        unsafe { self.pools.buffers().data(idx.0) }.unwrap_or(&[])
    }

    fn data_mut(&mut self, idx: BufIdx) -> &mut [u8] {
        // SAFETY: as in `data`; `&mut self` keeps any other slice from this pool from living
        // alongside this one.
        unsafe { self.pools.buffers().data_mut(idx.0) }.unwrap_or(&mut [])
    }

    /// Directly from one buffer to the other (the trait's default bounces through a small
    /// array on the stack: two copies where one does).
    fn copy_between(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
    ) -> bool {
        self.with_two(src, src_off, dst, dst_off, len, |d, s| d.copy_from_slice(s))
    }

    fn copy_between_uncached(
        &mut self,
        src: BufIdx,
        src_off: usize,
        dst: BufIdx,
        dst_off: usize,
        len: usize,
    ) -> bool {
        self.with_two(src, src_off, dst, dst_off, len, |d, s| {
            shmnet_chan::coherence::copy_nt_slice_edges_cached(d, s)
        })
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn free_count(&self) -> usize {
        self.pools.buffers().free_count() as usize
    }

    fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmnet_chan::heap::heap_pools;
    use shmnet_chan::{AllocPolicy, PoolGeometry};

    fn pool() -> ChanPool {
        let (server, _driver) = heap_pools(
            PoolGeometry {
                pools: 2,
                per_pool: 4,
                data_size: 256,
                free_cap: 4,
                policy: AllocPolicy::Lifo,
            },
            None,
        );
        ChanPool::new(server)
    }

    /// A chain of `n` buffers built as the stack builds one (each allocated with count 1).
    fn chain(p: &mut ChanPool, n: usize) -> BufIdx {
        let bufs: Vec<BufIdx> = (0..n).map(|_| p.alloc().unwrap()).collect();
        for w in bufs.windows(2) {
            p.set_next(w[0], Some(w[1]));
        }
        bufs[0]
    }

    /// The direct copies between two buffers, cached and not: the bytes land where asked,
    /// and the same buffer, an index past the pools or a range past the capacity copy
    /// nothing and say so.
    #[test]
    fn copies_between_buffers_carry_the_bytes_and_refuse_what_is_out_of_bounds() {
        let mut p = pool();
        let (a, b) = (p.alloc().unwrap(), p.alloc().unwrap());
        for (i, x) in p.data_mut(a).iter_mut().enumerate() {
            *x = i as u8;
        }
        for uncached in [false, true] {
            p.data_mut(b).fill(0);
            let copy = |p: &mut ChanPool, src, so, dst, d, n| {
                if uncached {
                    p.copy_between_uncached(src, so, dst, d, n)
                } else {
                    p.copy_between(src, so, dst, d, n)
                }
            };
            assert!(copy(&mut p, a, 3, b, 70, 150));
            assert_eq!(&p.data(b)[70..220], &p.data(a)[3..153]);
            assert!(p.data(b)[..70].iter().all(|&x| x == 0));
            assert!(p.data(b)[220..].iter().all(|&x| x == 0));
            assert!(copy(&mut p, a, 0, b, 0, 256), "a whole buffer");
            assert!(copy(&mut p, a, 256, b, 0, 0), "nothing, at the end");
            assert!(!copy(&mut p, a, 0, a, 10, 5), "the same buffer");
            assert!(
                !copy(&mut p, a, 200, b, 0, 57),
                "past the source's capacity"
            );
            assert!(
                !copy(&mut p, a, 0, b, 255, 2),
                "past the destination's capacity"
            );
            assert!(!copy(&mut p, BufIdx(999), 0, b, 0, 1), "no such source");
            assert!(
                !copy(&mut p, a, 0, BufIdx(999), 0, 1),
                "no such destination"
            );
        }
    }

    #[test]
    fn free_chain_frees_every_buffer_across_pools_at_once() {
        let mut p = pool();
        let head = chain(&mut p, 6); // more than one pool's 4
        assert_eq!(p.free_count(), 2);
        assert_eq!(p.free_chain(head), 6);
        assert_eq!(p.free_count(), 8);
        let s = p.buffers().stats();
        assert_eq!((s.bad_chains, s.bad_releases), (0, 0));
    }

    #[test]
    fn free_chain_of_a_shared_chain_drops_one_reference() {
        let mut p = pool();
        let head = chain(&mut p, 3);
        p.buffers().retain(head.0).unwrap();
        assert_eq!(p.free_chain(head), 0, "another holder keeps it");
        assert_eq!(p.free_count(), 5);
        assert_eq!(p.free_chain(head), 3, "the last reference frees it whole");
        assert_eq!(p.free_count(), 8);
    }

    #[test]
    fn free_chain_refuses_a_freed_chain() {
        let mut p = pool();
        let head = chain(&mut p, 2);
        assert_eq!(p.free_chain(head), 2);
        assert_eq!(
            p.free_chain(head),
            0,
            "already free: refused, not freed twice"
        );
        assert_eq!(p.free_count(), 8);
        assert_eq!(p.buffers().stats().bad_releases, 1);
    }
}
