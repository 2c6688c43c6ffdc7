//! A connection's byte streams held in pool buffers, never in memory of their own: the
//! receive queue is the chain of the segments' buffers as the driver filled them (each
//! narrowed to its payload), the send queue the chain of buffers the application's bytes
//! were written into; the out-of-order queue a few blocks of such chains.
//!
//! Everything here is intrusive (buffers linked by their `next` field), so a queue costs 16
//! bytes of connection state and no allocation, whatever it holds.

use super::seq::Seq;
use crate::buf::{BufIdx, BufferPool, set_window};

/// A byte stream in a chain of buffers.
///
/// Invariant: `head..=tail` are linked by `next`, `tail`'s `next` is `None`; `bytes` is the
/// sum of their valid lengths and `bufs` their number; both are zero exactly when `head` is
/// `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainQueue {
    head: Option<BufIdx>,
    tail: Option<BufIdx>,
    bytes: u32,
    bufs: u32,
}

/// Where the last segmentation copy ended, so the next one need not walk from the head:
/// buffer `buf` starts `start` bytes into the queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    buf: Option<BufIdx>,
    start: u32,
}

/// Payloads at most this long are copied into the free room of the queue's last buffer
/// instead of holding a buffer of their own: a flood of one-byte segments costs bytes, not
/// buffers.
pub const COALESCE_MAX: usize = 512;

impl ChainQueue {
    /// Bytes queued.
    pub fn bytes(&self) -> u32 {
        self.bytes
    }

    /// Buffers holding them.
    pub fn bufs(&self) -> u32 {
        self.bufs
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// The first buffer.
    pub fn head(&self) -> Option<BufIdx> {
        self.head
    }

    /// Append buffer `idx` (its valid bytes are the data, `len` of them; its `next` is
    /// cleared here). A short payload is copied into the last buffer's free room when it
    /// fits, and `idx` freed.
    pub fn push<P: BufferPool + ?Sized>(&mut self, pool: &mut P, idx: BufIdx, len: u32) {
        if len == 0 {
            pool.free(idx);
            return;
        }
        if let Some(t) = self.tail {
            let (toff, tlen) = (pool.off(t) as usize, pool.len(t) as usize);
            let room = pool.capacity().saturating_sub(toff + tlen);
            if (len as usize) <= COALESCE_MAX.min(room)
                && pool.copy_between(idx, pool.off(idx) as usize, t, toff + tlen, len as usize)
            {
                pool.set_len(t, (tlen + len as usize) as u16);
                self.bytes += len;
                pool.free(idx);
                return;
            }
        }
        pool.set_next(idx, None);
        self.link(pool, idx, idx, len, 1);
    }

    /// Append the chain `head..=tail` of `bytes` bytes in `bufs` buffers.
    pub fn link<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        head: BufIdx,
        tail: BufIdx,
        bytes: u32,
        bufs: u32,
    ) {
        match self.tail {
            Some(t) => pool.set_next(t, Some(head)),
            None => self.head = Some(head),
        }
        self.tail = Some(tail);
        self.bytes += bytes;
        self.bufs += bufs;
    }

    /// Copy as much of `data` as fits under `limit` queued bytes, filling the last buffer's
    /// room first and then fresh buffers (from offset `headroom`, so a buffer can later be
    /// sent as it is). Returns the bytes taken (fewer when the pool runs dry).
    pub fn write<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        data: &[u8],
        limit: u32,
        headroom: usize,
    ) -> usize {
        let cap = pool.capacity();
        let want = data.len().min(limit.saturating_sub(self.bytes) as usize);
        let mut done = 0;
        if let Some(t) = self.tail {
            let (off, len) = (pool.off(t) as usize, pool.len(t) as usize);
            let n = cap.saturating_sub(off + len).min(want);
            if n > 0 {
                pool.data_mut(t)[off + len..off + len + n].copy_from_slice(&data[..n]);
                pool.set_len(t, (len + n) as u16);
                self.bytes += n as u32;
                done = n;
            }
        }
        let room = cap.saturating_sub(headroom);
        while done < want && room > 0 {
            let Some(b) = pool.alloc() else { break };
            let n = (want - done).min(room);
            pool.data_mut(b)[headroom..headroom + n].copy_from_slice(&data[done..done + n]);
            set_window(pool, b, headroom, n);
            self.link(pool, b, b, n as u32, 1);
            done += n;
        }
        done
    }

    /// Drop the first `n` bytes (all of them if fewer are queued): whole buffers go back to
    /// the pool, a partly consumed one is narrowed. Returns the bytes dropped.
    pub fn consume<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        n: u32,
        cursor: Option<&mut Cursor>,
    ) -> u32 {
        let n = n.min(self.bytes);
        let mut left = n;
        while left > 0 {
            let Some(h) = self.head else { break };
            let l = u32::from(pool.len(h));
            if l <= left {
                left -= l;
                self.pop_head(pool, h);
            } else {
                pool.set_off(h, pool.off(h) + left as u16);
                pool.set_len(h, (l - left) as u16);
                self.bytes -= left;
                left = 0;
            }
        }
        // An empty buffer at the head (a zero-length write cannot make one, but a peer's
        // header could) is dropped too, so `head` always has bytes.
        while let Some(h) = self.head.filter(|&h| pool.len(h) == 0) {
            self.pop_head(pool, h);
        }
        if let Some(c) = cursor {
            if c.start >= n && c.buf.is_some() {
                c.start -= n;
            } else {
                *c = Cursor::default();
            }
        }
        n - left
    }

    fn pop_head<P: BufferPool + ?Sized>(&mut self, pool: &mut P, h: BufIdx) {
        let l = u32::from(pool.len(h));
        self.head = pool.next(h);
        if self.head.is_none() {
            self.tail = None;
        }
        pool.set_next(h, None);
        pool.free(h);
        self.bytes = self.bytes.saturating_sub(l);
        self.bufs = self.bufs.saturating_sub(1);
        if self.head.is_none() {
            self.bytes = 0;
            self.bufs = 0;
        }
    }

    /// Copy bytes from the front into `dst` and drop them; returns how many.
    pub fn read<P: BufferPool + ?Sized>(&mut self, pool: &mut P, dst: &mut [u8]) -> usize {
        let mut done = 0;
        let mut cur = self.head;
        let mut links = self.bufs;
        while let Some(b) = cur.filter(|_| done < dst.len() && links > 0) {
            let seg = crate::buf::valid(pool, b);
            let n = seg.len().min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&seg[..n]);
            done += n;
            cur = pool.next(b);
            links -= 1;
        }
        self.consume(pool, done as u32, None);
        done
    }

    /// Copy `len` bytes starting `offset` bytes into the queue to buffer `dst` at
    /// `dst_off` (the segmentation copy), starting from `cursor` when it is at or before
    /// `offset`. Returns the bytes copied (fewer if the queue is shorter).
    pub fn copy_out<P: BufferPool + ?Sized>(
        &self,
        pool: &mut P,
        offset: u32,
        len: u32,
        dst: BufIdx,
        dst_off: usize,
        cursor: &mut Cursor,
    ) -> u32 {
        let (mut cur, mut start) = match cursor.buf {
            Some(b) if cursor.start <= offset => (Some(b), cursor.start),
            _ => (self.head, 0),
        };
        let mut links = self.bufs;
        let mut done = 0u32;
        while let Some(b) = cur.filter(|_| done < len && links > 0) {
            let (boff, blen) = (pool.off(b) as u32, u32::from(pool.len(b)));
            let pos = offset + done;
            if pos < start + blen {
                let skip = pos - start;
                let n = (blen - skip).min(len - done);
                if !pool.copy_between(
                    b,
                    (boff + skip) as usize,
                    dst,
                    dst_off + done as usize,
                    n as usize,
                ) {
                    break;
                }
                done += n;
                *cursor = Cursor {
                    buf: Some(b),
                    start,
                };
                if done == len {
                    break;
                }
            }
            start += blen;
            cur = pool.next(b);
            links -= 1;
        }
        done
    }

    /// Free every buffer.
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        if let Some(h) = self.head {
            pool.free_chain(h);
        }
        *self = ChainQueue::default();
    }
}

/// Number of out-of-order blocks a connection keeps (as many as a SACK option can report
/// with timestamps on, plus one).
pub const OOO_BLOCKS: usize = 4;

/// One run of contiguous out-of-order data: sequence numbers `start..end` in the chain
/// `head..=tail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    start: Seq,
    end: Seq,
    head: BufIdx,
    tail: BufIdx,
    bufs: u32,
}

/// Segments that arrived beyond `rcv_nxt`, held until the hole before them fills.
///
/// Bounded: at most [`OOO_BLOCKS`] runs; a segment that would need another run, or that
/// overlaps a run on both sides, is dropped (the sender will send it again). Invariant:
/// blocks are disjoint and non-adjacent (adjacent runs are merged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ooo {
    blocks: [Option<Block>; OOO_BLOCKS],
    bytes: u32,
    bufs: u32,
}

/// What became of a segment offered to the out-of-order queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OooInsert {
    /// Held.
    Held,
    /// Every byte was already held: freed.
    Duplicate,
    /// No room (too many runs, or an overlap the queue does not split): freed.
    Dropped,
}

impl Ooo {
    /// Bytes held.
    pub fn bytes(&self) -> u32 {
        self.bytes
    }

    /// Buffers held.
    pub fn bufs(&self) -> u32 {
        self.bufs
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.bufs == 0
    }

    /// The runs held, as `(start, end)`, most recent first is not tracked: in slot order.
    pub fn ranges(&self) -> impl Iterator<Item = (Seq, Seq)> + '_ {
        self.blocks.iter().flatten().map(|b| (b.start, b.end))
    }

    /// Offer buffer `idx`, whose valid bytes are sequence numbers `start .. start + len`.
    pub fn insert<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        idx: BufIdx,
        start: Seq,
        len: u32,
    ) -> OooInsert {
        let (mut s, mut e) = (start, start.add(len));
        for b in self.blocks.iter().flatten() {
            if s.ge(b.start) && e.le(b.end) {
                pool.free(idx);
                return OooInsert::Duplicate;
            }
            if s.lt(b.end) && e.gt(b.start) {
                if s.lt(b.start) && e.le(b.end) {
                    e = b.start;
                } else if s.ge(b.start) && e.gt(b.end) {
                    s = b.end;
                } else {
                    pool.free(idx);
                    return OooInsert::Dropped;
                }
            }
        }
        let front = s.since(start);
        let n = e.since(s);
        if n == 0 {
            pool.free(idx);
            return OooInsert::Duplicate;
        }
        let off = pool.off(idx) as usize + front as usize;
        set_window(pool, idx, off, n as usize);
        pool.set_next(idx, None);
        let after = self
            .blocks
            .iter()
            .position(|b| b.is_some_and(|b| b.end == s));
        let before = self
            .blocks
            .iter()
            .position(|b| b.is_some_and(|b| b.start == e));
        match (after, before) {
            (Some(a), Some(bi)) => {
                let b = self.blocks[bi].take().expect("found above");
                let blk = self.blocks[a].as_mut().expect("found above");
                pool.set_next(blk.tail, Some(idx));
                pool.set_next(idx, Some(b.head));
                blk.tail = b.tail;
                blk.end = b.end;
                blk.bufs += b.bufs + 1;
            }
            (Some(a), None) => {
                let blk = self.blocks[a].as_mut().expect("found above");
                pool.set_next(blk.tail, Some(idx));
                blk.tail = idx;
                blk.end = e;
                blk.bufs += 1;
            }
            (None, Some(bi)) => {
                let blk = self.blocks[bi].as_mut().expect("found above");
                pool.set_next(idx, Some(blk.head));
                blk.head = idx;
                blk.start = s;
                blk.bufs += 1;
            }
            (None, None) => {
                let Some(slot) = self.blocks.iter_mut().find(|b| b.is_none()) else {
                    pool.free(idx);
                    return OooInsert::Dropped;
                };
                *slot = Some(Block {
                    start: s,
                    end: e,
                    head: idx,
                    tail: idx,
                    bufs: 1,
                });
            }
        }
        self.bytes += n;
        self.bufs += 1;
        OooInsert::Held
    }

    /// Take the run that starts at or before `rcv_nxt`, trimmed to begin exactly there:
    /// `(head, tail, bytes, bufs)`, to be appended to the receive queue. Runs wholly before
    /// `rcv_nxt` are freed on the way.
    pub fn take_ready<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        rcv_nxt: Seq,
    ) -> Option<(BufIdx, BufIdx, u32, u32)> {
        loop {
            let i = self
                .blocks
                .iter()
                .position(|b| b.is_some_and(|b| b.start.le(rcv_nxt)))?;
            let b = self.blocks[i].take().expect("found above");
            let bytes = b.end.since(b.start);
            self.bytes -= bytes;
            self.bufs -= b.bufs;
            if b.end.le(rcv_nxt) {
                pool.free_chain(b.head);
                continue;
            }
            let mut q = ChainQueue {
                head: Some(b.head),
                tail: Some(b.tail),
                bytes,
                bufs: b.bufs,
            };
            q.consume(pool, rcv_nxt.since(b.start), None);
            return match (q.head, q.tail) {
                (Some(h), Some(t)) => Some((h, t, q.bytes, q.bufs)),
                _ => None,
            };
        }
    }

    /// Free every buffer.
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        for b in self.blocks.iter_mut().filter_map(Option::take) {
            pool.free_chain(b.head);
        }
        self.bytes = 0;
        self.bufs = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{HeapPool, chain_to_vec};
    use proptest::prelude::*;

    fn buf_with(pool: &mut HeapPool, bytes: &[u8]) -> BufIdx {
        pool.alloc_with(64, bytes).expect("pool has room")
    }

    #[test]
    fn write_fills_the_tail_then_new_buffers_and_consume_frees_them() {
        let mut pool = HeapPool::new(16, 256);
        let mut q = ChainQueue::default();
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        assert_eq!(q.write(&mut pool, &data[..100], 10_000, 56), 100);
        assert_eq!(q.write(&mut pool, &data[100..], 10_000, 56), 900);
        assert_eq!(q.bytes(), 1000);
        assert_eq!(chain_to_vec(&pool, q.head().unwrap()), data);
        let mut cursor = Cursor::default();
        let dst = pool.alloc().unwrap();
        assert_eq!(q.copy_out(&mut pool, 150, 200, dst, 0, &mut cursor), 200);
        assert_eq!(&pool.data(dst)[..200], &data[150..350]);
        pool.free(dst);
        assert_eq!(q.consume(&mut pool, 450, Some(&mut cursor)), 450);
        let mut out = vec![0; 2000];
        assert_eq!(q.read(&mut pool, &mut out), 550);
        assert_eq!(&out[..550], &data[450..]);
        assert!(q.is_empty());
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn the_write_limit_bounds_the_queue() {
        let mut pool = HeapPool::new(16, 256);
        let mut q = ChainQueue::default();
        assert_eq!(q.write(&mut pool, &[7; 500], 300, 0), 300);
        assert_eq!(q.write(&mut pool, &[7; 500], 300, 0), 0);
        q.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn small_segments_are_coalesced_into_the_last_buffer() {
        let mut pool = HeapPool::new(16, 512);
        let mut q = ChainQueue::default();
        for i in 0..100u8 {
            let b = buf_with(&mut pool, &[i]);
            q.push(&mut pool, b, 1);
        }
        assert_eq!(q.bytes(), 100);
        assert_eq!(q.bufs(), 1);
        let expect: Vec<u8> = (0..100).collect();
        assert_eq!(chain_to_vec(&pool, q.head().unwrap()), expect);
        q.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }

    proptest! {
        /// Segments of a stream offered in any order, with duplicates and overlaps, come out
        /// as the stream (what the out-of-order queue could not hold is re-offered, as a
        /// sender retransmits), and no buffer is lost.
        #[test]
        fn any_arrival_order_reassembles_the_stream(
            cuts in proptest::collection::vec(1usize..300, 1..40),
            order in proptest::collection::vec(any::<u16>(), 80),
            base in any::<u32>(),
        ) {
            let mut pool = HeapPool::new(256, 512);
            let stream: Vec<u8> = (0..cuts.iter().sum::<usize>()).map(|i| (i * 31 % 251) as u8).collect();
            let mut segs = Vec::new();
            let mut at = 0usize;
            for &c in &cuts {
                // Each segment overlaps the previous one by up to 10 bytes.
                let s = at.saturating_sub(c % 11);
                segs.push((s, at + c));
                at += c;
            }
            let isn = Seq(base);
            let mut rcv_nxt = isn;
            let mut rx = ChainQueue::default();
            let mut ooo = Ooo::default();
            let mut k = 0;
            while rcv_nxt.since(isn) < stream.len() as u32 {
                // A random order first, then every segment in turn (as retransmission would).
                let pick = order.get(k).map_or(k, |&o| o as usize);
                let (s, e) = segs[pick % segs.len()];
                k += 1;
                prop_assert!(k < 100_000, "no progress");
                let seq = isn.add(s as u32);
                let end = isn.add(e as u32);
                if end.le(rcv_nxt) {
                    continue;
                }
                let b = buf_with(&mut pool, &stream[s..e]);
                if seq.le(rcv_nxt) {
                    let skip = rcv_nxt.since(seq);
                    pool.set_off(b, pool.off(b) + skip as u16);
                    pool.set_len(b, (e - s) as u16 - skip as u16);
                    rx.push(&mut pool, b, (e - s) as u32 - skip);
                    rcv_nxt = end;
                    while let Some((h, t, n, bufs)) = ooo.take_ready(&mut pool, rcv_nxt) {
                        rx.link(&mut pool, h, t, n, bufs);
                        rcv_nxt = rcv_nxt.add(n);
                    }
                } else {
                    ooo.insert(&mut pool, b, seq, (e - s) as u32);
                }
            }
            prop_assert_eq!(chain_to_vec(&pool, rx.head().unwrap()), stream.clone());
            prop_assert_eq!(rx.bytes() as usize, stream.len());
            rx.clear(&mut pool);
            ooo.clear(&mut pool);
            prop_assert_eq!(pool.free_count(), pool.total());
        }
    }
}
