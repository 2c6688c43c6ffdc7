//! Walking buffer chains safely: the one way every party reads a chain a peer may have built.
//!
//! A chain is a head buffer and the buffers reachable through each header's `next` link
//! (see [`crate::pool`]); its bytes are each buffer's `data[off .. off + len]`, in order. The
//! links and lengths lie in shared memory, so a chain may be anything: a cycle, a link to no
//! buffer, a length beyond its buffer. [`Buffers::segments`] turns a chain into validated
//! segments and stops, with a typed [`ChainError`], at the first thing that is wrong:
//!
//! - each header is read once (its `next` and `off_len` words into private copies), so a peer
//!   rewriting it while we walk cannot make a checked value change under us;
//! - an index must name a buffer of this pool set ([`ChainError::BadIndex`]);
//! - `off + len` must fit in the buffer's data area ([`ChainError::BadRange`]);
//! - at most as many links are followed as the pool set has buffers, so a cycle ends in
//!   [`ChainError::TooLong`] instead of a hang;
//! - the walk stops as soon as `max_bytes` have been yielded, without reading further links.
//!
//! A peer can thus make a walk fail or yield wrong bytes, never read outside the window or loop
//! forever.

use crate::desc::{BufIdx, NO_BUF};
use crate::pool::{BufError, Buffers};

/// Why a chain could not be walked to its end (or to the bytes asked for).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A head or `next` link names no buffer of this pool set.
    #[error("the chain links to buffer {0}, which is outside the pool set")]
    BadIndex(BufIdx),
    /// A buffer's header claims bytes outside its data area.
    #[error("buffer {idx} of the chain claims bytes {off}..{end} of a {size}-byte buffer")]
    BadRange {
        /// The buffer.
        idx: BufIdx,
        /// Its claimed start.
        off: u32,
        /// Its claimed end (`off + len`).
        end: u32,
        /// The data size of every buffer.
        size: u32,
    },
    /// More links than the pool set has buffers: the chain has a cycle.
    #[error("the chain is longer than the {0} buffers of the pool set (a cycle)")]
    TooLong(u32),
}

/// A validated piece of a chain: `len` bytes at `off` in buffer `idx`, inside the buffer's
/// data area (`off + len <= data_size`, checked when it was read). Never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    idx: u32,
    off: u32,
    len: u32,
}

impl Segment {
    /// The buffer.
    pub fn idx(&self) -> BufIdx {
        BufIdx(self.idx)
    }

    /// Where the bytes start in the buffer's data area.
    pub fn off(&self) -> usize {
        self.off as usize
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Always `false`: the walk never yields an empty segment (kept for clippy's
    /// `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The validated segments of a chain, in order; see the module docs. Yields at most one
/// `Err`, as its last item.
#[derive(Clone)]
pub struct Segments<'a> {
    bufs: &'a Buffers,
    /// The next buffer to read, or [`NO_BUF`].
    cur: u32,
    /// Bytes still to pass over before yielding any.
    skip: usize,
    /// Bytes still to yield.
    left: usize,
    /// Links followed so far.
    steps: u32,
    done: bool,
}

impl Iterator for Segments<'_> {
    type Item = Result<Segment, ChainError>;

    fn next(&mut self) -> Option<Self::Item> {
        let g = self.bufs.geometry();
        loop {
            if self.done || self.left == 0 || self.cur == NO_BUF {
                self.done = true;
                return None;
            }
            let err = if self.steps >= g.total() {
                Some(ChainError::TooLong(g.total()))
            } else if self.bufs.hdr(self.cur).is_none() {
                Some(ChainError::BadIndex(BufIdx(self.cur)))
            } else {
                None
            };
            if let Some(e) = err {
                self.done = true;
                return Some(Err(e));
            }
            let idx = self.cur;
            let (next, off_len) = self.bufs.raw_link(idx).expect("index checked above");
            self.steps += 1;
            let (off, len) = (off_len & 0xffff, off_len >> 16);
            if off + len > g.data_size {
                self.done = true;
                return Some(Err(ChainError::BadRange {
                    idx: BufIdx(idx),
                    off,
                    end: off + len,
                    size: g.data_size,
                }));
            }
            self.cur = next;
            let (mut off, mut len) = (off as usize, len as usize);
            if self.skip > 0 {
                let k = self.skip.min(len);
                self.skip -= k;
                off += k;
                len -= k;
            }
            if len == 0 {
                continue;
            }
            let len = len.min(self.left);
            self.left -= len;
            return Some(Ok(Segment {
                idx,
                off: off as u32,
                len: len as u32,
            }));
        }
    }
}

impl Buffers {
    /// The validated segments of the chain at `head`, up to `max_bytes` bytes in all (the
    /// last segment is cut short to fit). Ends at the chain's end ([`NO_BUF`]), after
    /// `max_bytes`, or with one `Err` at the first bad link, range or cycle. Empty buffers are
    /// passed over. A `head` of [`BufIdx::NONE`] is an empty chain.
    pub fn segments(&self, head: BufIdx, max_bytes: usize) -> Segments<'_> {
        self.segments_from(head, 0, max_bytes)
    }

    /// As [`Buffers::segments`], passing over the chain's first `skip` bytes (which may span
    /// several buffers) first; `max_bytes` counts the bytes after them.
    pub fn segments_from(&self, head: BufIdx, skip: usize, max_bytes: usize) -> Segments<'_> {
        Segments {
            bufs: self,
            cur: head.0,
            skip,
            left: max_bytes,
            steps: 0,
            done: false,
        }
    }

    /// Copies the chain at `head`'s bytes, after its first `skip`, into `dst`; returns how
    /// many were copied: `dst.len()`, or fewer if the chain ends first. Fails if the walk
    /// meets a bad link, range or cycle before `dst` is full (see [`Buffers::segments`]).
    pub fn read_chain(
        &self,
        head: BufIdx,
        skip: usize,
        dst: &mut [u8],
    ) -> Result<usize, ChainError> {
        let mut at = 0;
        for seg in self.segments_from(head, skip, dst.len()) {
            let seg = seg?;
            let end = at + seg.len();
            self.read(seg.idx, seg.off(), &mut dst[at..end])
                .expect("a segment lies inside its buffer");
            at = end;
        }
        Ok(at)
    }

    /// The bytes of `seg`, in place in the window.
    ///
    /// # Safety
    /// As for [`Buffers::data`]: the caller must own the chain the segment came from for the
    /// life of the slice. A peer that writes the bytes anyway can change them (the caller must
    /// treat them as untrusted, and a copy it makes may be torn) but not their bounds.
    ///
    /// # Errors
    /// [`BufError`] if `seg` does not fit this pool set (it came from another one).
    pub unsafe fn segment_bytes(&self, seg: Segment) -> Result<&[u8], BufError> {
        // SAFETY: ownership is the caller's promise; `get` keeps the range inside the
        // buffer's data area.
        let data = unsafe { self.data(seg.idx)? };
        data.get(seg.off()..seg.off() + seg.len())
            .ok_or(BufError::OutOfRange {
                off: seg.off(),
                end: seg.off() + seg.len(),
                size: self.geometry().data_size,
            })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::heap::heap_pools;
    use crate::pool::{AllocPolicy, PoolGeometry, ServerPools};

    fn pools(per_pool: u32) -> ServerPools {
        let geo = PoolGeometry {
            pools: 2,
            per_pool,
            data_size: 64,
            free_cap: per_pool.next_power_of_two(),
            policy: AllocPolicy::Lifo,
        };
        heap_pools(geo, None).0
    }

    /// Allocates a chain holding `parts`, one buffer each, at offset 3.
    fn chain_of(s: &mut ServerPools, parts: &[&[u8]]) -> BufIdx {
        let idx: Vec<u32> = parts.iter().map(|_| s.alloc().unwrap()).collect();
        let b = s.buffers();
        for (&i, p) in idx.iter().zip(parts) {
            b.write(i, 3, p).unwrap();
            b.set_off_len(i, 3, p.len() as u16).unwrap();
        }
        BufIdx(b.chain(&idx).unwrap().unwrap())
    }

    #[test]
    fn segments_follow_the_chain_and_stop_at_max_bytes() {
        let mut s = pools(4);
        let head = chain_of(&mut s, &[b"hello ", b"", b"chained ", b"world"]);
        let b = s.buffers();
        let segs: Vec<_> = b.segments(head, usize::MAX).map(Result::unwrap).collect();
        assert_eq!(segs.iter().map(Segment::len).collect::<Vec<_>>(), [6, 8, 5]);
        assert!(segs.iter().all(|g| g.off() == 3));
        let mut out = [0u8; 64];
        let n = b.read_chain(head, 0, &mut out).unwrap();
        assert_eq!(&out[..n], b"hello chained world");
        let n = b.read_chain(head, 4, &mut out[..7]).unwrap();
        assert_eq!(&out[..n], b"o chain");
        let segs: Vec<_> = b.segments_from(head, 6, 3).map(Result::unwrap).collect();
        assert_eq!(segs.len(), 1);
        assert_eq!((segs[0].off(), segs[0].len()), (3, 3));
        assert_eq!(b.segments(BufIdx::NONE, 10).count(), 0);
        assert_eq!(b.segments(head, 0).count(), 0);
        // SAFETY: this test owns the chain.
        let bytes = unsafe { b.segment_bytes(segs[0]) }.unwrap();
        assert_eq!(bytes, b"cha");
    }

    #[test]
    fn a_cycle_ends_in_too_long() {
        let mut s = pools(2);
        let head = chain_of(&mut s, &[b"ab", b"cd"]);
        let b = s.buffers();
        let second = b.next(head.get()).unwrap();
        b.set_next(second, head.get()).unwrap();
        let items: Vec<_> = b.segments(head, usize::MAX).collect();
        assert_eq!(
            items.len(),
            5,
            "4 buffers in the set: 4 segments, then the error"
        );
        assert_eq!(items[4], Err(ChainError::TooLong(4)));
        // Within max_bytes the cycle is never noticed.
        let mut out = [0u8; 6];
        assert_eq!(b.read_chain(head, 0, &mut out), Ok(6));
        assert_eq!(&out, b"abcdab");
        let mut big = [0u8; 100];
        assert_eq!(b.read_chain(head, 0, &mut big), Err(ChainError::TooLong(4)));
    }

    #[test]
    fn bad_links_and_ranges_are_typed_errors() {
        let mut s = pools(2);
        let head = chain_of(&mut s, &[b"ab", b"cd"]);
        let b = s.buffers();
        let second = b.next(head.get()).unwrap();
        b.hdr(second).unwrap().scribble([999, 1, 3 | (2 << 16), 0]);
        let items: Vec<_> = b.segments(head, usize::MAX).collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[2], Err(ChainError::BadIndex(BufIdx(999))));
        // The bad link is not followed when the bytes asked for end before it.
        assert_eq!(b.read_chain(head, 0, &mut [0u8; 4]), Ok(4));
        b.hdr(second)
            .unwrap()
            .scribble([NO_BUF, 1, 60 | (5 << 16), 0]);
        assert_eq!(
            b.read_chain(head, 0, &mut [0u8; 10]),
            Err(ChainError::BadRange {
                idx: BufIdx(second),
                off: 60,
                end: 65,
                size: 64
            })
        );
        assert_eq!(
            b.segments(BufIdx(4), 1).next(),
            Some(Err(ChainError::BadIndex(BufIdx(4))))
        );
    }
}
