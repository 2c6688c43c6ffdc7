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

/// Where a segmentation copy goes: buffer `buf` from byte `off`, with non-temporal stores
/// when `uncached` (seed 003's NC send, [`BufferPool::copy_between_uncached`]).
#[derive(Clone, Copy, Debug)]
pub struct CopyTo {
    /// The frame's buffer.
    pub buf: BufIdx,
    /// Where the payload starts in it.
    pub off: usize,
    /// Store past the caches.
    pub uncached: bool,
}

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

    /// Puts `data` back in front of the queue, in fresh buffers: bytes an application had
    /// taken and gives back unread (a program about to fork or `exec`, so that whichever of
    /// its holders reads next gets them, once). `false`, nothing changed, if the pool has
    /// too few buffers.
    pub fn unread<P: BufferPool + ?Sized>(&mut self, pool: &mut P, data: &[u8]) -> bool {
        let Some(cap) = std::num::NonZeroUsize::new(pool.capacity().min(usize::from(u16::MAX)))
        else {
            return data.is_empty();
        };
        let mut front = ChainQueue::default();
        for chunk in data.chunks(cap.get()) {
            let Some(b) = pool.alloc() else {
                front.clear(pool);
                return false;
            };
            pool.data_mut(b)[..chunk.len()].copy_from_slice(chunk);
            set_window(pool, b, 0, chunk.len());
            front.link(pool, b, b, chunk.len() as u32, 1);
        }
        let (Some(head), Some(tail)) = (front.head, front.tail) else {
            return true; // nothing to put back
        };
        pool.set_next(tail, self.head);
        if self.tail.is_none() {
            self.tail = Some(tail);
        }
        self.head = Some(head);
        self.bytes += front.bytes;
        self.bufs += front.bufs;
        true
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
                let off = usize::from(pool.off(h));
                set_window(pool, h, off + left as usize, (l - left) as usize);
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
    /// `uncached`: with streaming loads, each buffer's lines evicted after its copy (seed
    /// 003's NC receive).
    pub fn read<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        dst: &mut [u8],
        uncached: bool,
    ) -> usize {
        let mut done = 0;
        let mut cur = self.head;
        let mut links = self.bufs;
        while let Some(b) = cur.filter(|_| done < dst.len() && links > 0) {
            let seg = crate::buf::valid(pool, b);
            let n = seg.len().min(dst.len() - done);
            if uncached {
                let ops = shmnet_chan::coherence::CpuOps::cached();
                shmnet_chan::coherence::copy_streaming_evict(
                    ops,
                    &mut dst[done..done + n],
                    &seg[..n],
                );
            } else {
                dst[done..done + n].copy_from_slice(&seg[..n]);
            }
            done += n;
            cur = pool.next(b);
            links -= 1;
        }
        self.consume(pool, done as u32, None);
        done
    }

    /// Copy `len` bytes starting `offset` bytes into the queue to `to` (the segmentation
    /// copy), starting from `cursor` when it is at or before `offset`. Returns the bytes
    /// copied (fewer if the queue is shorter).
    pub fn copy_out<P: BufferPool + ?Sized>(
        &self,
        pool: &mut P,
        offset: u32,
        len: u32,
        to: CopyTo,
        cursor: &mut Cursor,
    ) -> u32 {
        let CopyTo {
            buf: dst,
            off: dst_off,
            uncached,
        } = to;
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
                let copied = if uncached {
                    pool.copy_between_uncached(
                        b,
                        (boff + skip) as usize,
                        dst,
                        dst_off + done as usize,
                        n as usize,
                    )
                } else {
                    pool.copy_between(
                        b,
                        (boff + skip) as usize,
                        dst,
                        dst_off + done as usize,
                        n as usize,
                    )
                };
                if !copied {
                    break;
                }
                if uncached && done > 0 {
                    // Where this piece meets the previous one, both ended and began with
                    // ordinary stores (a non-temporal copy stores only whole lines); the
                    // frame's send maintenance cleans only its headers' lines and its last
                    // line, so these are cleaned here (its fence covers them).
                    let at = dst_off + done as usize;
                    let ops = shmnet_chan::coherence::CpuOps::cached();
                    let data = pool.data(dst);
                    if let Some(edge) = data.get(at.saturating_sub(1)..(at + 1).min(data.len())) {
                        shmnet_chan::coherence::flush_slice_unfenced(ops, edge);
                    }
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

    /// Unlink whole buffers from the front, as many as hold at most `max` bytes (always at
    /// least one): returns the detached chain's head, bytes and buffers, the caller's now. The
    /// zero-copy receive of the server structure hands this chain to the application.
    pub fn detach<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        max: u32,
    ) -> Option<(BufIdx, u32, u32)> {
        let head = self.head?;
        let (mut last, mut bytes, mut bufs) = (head, u32::from(pool.len(head)), 1u32);
        while bufs < self.bufs {
            let Some(n) = pool.next(last) else { break };
            let l = u32::from(pool.len(n));
            if bytes + l > max {
                break;
            }
            (last, bytes, bufs) = (n, bytes + l, bufs + 1);
        }
        self.head = pool.next(last);
        pool.set_next(last, None);
        if self.head.is_none() {
            *self = ChainQueue::default();
        } else {
            self.bytes -= bytes;
            self.bufs -= bufs;
        }
        Some((head, bytes, bufs))
    }

    /// Free every buffer.
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        if let Some(h) = self.head {
            pool.free_chain(h);
        }
        *self = ChainQueue::default();
    }
}

/// Segments that arrived beyond `rcv_nxt`, held until the hole before them fills: a list of
/// buffers sorted by sequence number, linked by their `next` field.
///
/// Each buffer's first sequence number is written in the four bytes of headroom just before
/// its valid bytes (a received segment always has its headers there), so the queue itself
/// is 16 bytes whatever it holds. Invariant: the buffers' ranges are disjoint and in
/// increasing order; `bytes` and `bufs` are their totals; `tail` is the last buffer.
/// Bounded by the caller's `max_bufs` (the window bounds the bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ooo {
    head: Option<BufIdx>,
    tail: Option<BufIdx>,
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
    /// No room (the buffer bound), or no headroom to note its place: freed.
    Dropped,
}

/// The sequence number a held buffer starts at (noted in its headroom).
fn seq_of<P: BufferPool + ?Sized>(pool: &P, b: BufIdx) -> Seq {
    let off = pool.off(b) as usize;
    let d = pool.data(b);
    match d.get(off.wrapping_sub(4)..off) {
        Some(w) => Seq(u32::from_ne_bytes([w[0], w[1], w[2], w[3]])),
        None => Seq(0),
    }
}

fn set_seq<P: BufferPool + ?Sized>(pool: &mut P, b: BufIdx, seq: Seq) {
    let off = pool.off(b) as usize;
    if let Some(w) = pool.data_mut(b).get_mut(off.wrapping_sub(4)..off) {
        w.copy_from_slice(&seq.0.to_ne_bytes());
    }
}

fn end_of<P: BufferPool + ?Sized>(pool: &P, b: BufIdx) -> Seq {
    seq_of(pool, b).add(u32::from(pool.len(b)))
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
        self.head.is_none()
    }

    /// The contiguous runs held, as `(start, end)`, in sequence order (what SACK reports),
    /// written to `out`; returns how many (at most `out.len()`: the lowest runs).
    pub fn ranges_into<P: BufferPool + ?Sized>(&self, pool: &P, out: &mut [(Seq, Seq)]) -> usize {
        let mut n = 0;
        let mut cur = self.head;
        let mut links = self.bufs;
        while let Some(b) = cur.filter(|_| links > 0) {
            let (s, e) = (seq_of(pool, b), end_of(pool, b));
            if n > 0 && out[n - 1].1 == s {
                out[n - 1].1 = e;
            } else if n < out.len() {
                out[n] = (s, e);
                n += 1;
            } else {
                break;
            }
            cur = pool.next(b);
            links -= 1;
        }
        n
    }

    /// Offer buffer `idx`, whose valid bytes are sequence numbers `start .. start + len`;
    /// at most `max_bufs` buffers are held. Bytes already held are cut from it; held
    /// buffers it covers whole are replaced by it.
    pub fn insert<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        idx: BufIdx,
        start: Seq,
        len: u32,
        max_bufs: u32,
    ) -> OooInsert {
        if self.bufs >= max_bufs || (pool.off(idx) as usize) < 4 {
            pool.free(idx);
            return OooInsert::Dropped;
        }
        let (mut s, mut e) = (start, start.add(len));
        // The last held buffer starting at or before `s` (the tail first: data after a
        // hole usually arrives in order).
        let mut prev = None;
        let mut cur = self.head;
        if let Some(t) = self.tail {
            if seq_of(pool, t).le(s) {
                prev = Some(t);
                cur = None;
            }
        }
        let mut links = self.bufs;
        while let Some(b) = cur.filter(|_| links > 0) {
            if seq_of(pool, b).gt(s) {
                break;
            }
            prev = Some(b);
            cur = pool.next(b);
            links -= 1;
        }
        if let Some(p) = prev {
            let pe = end_of(pool, p);
            if pe.ge(e) {
                pool.free(idx);
                return OooInsert::Duplicate;
            }
            s = s.max(pe);
        }
        // Held buffers after it: drop those it covers, cut it short of the first it does not.
        let mut next = match prev {
            Some(p) => pool.next(p),
            None => self.head,
        };
        while let Some(nb) = next {
            let (ns, ne) = (seq_of(pool, nb), end_of(pool, nb));
            if ns.ge(e) {
                break;
            }
            if ne.le(e) {
                let after = pool.next(nb);
                match prev {
                    Some(p) => pool.set_next(p, after),
                    None => self.head = after,
                }
                if self.tail == Some(nb) {
                    self.tail = prev;
                }
                self.bytes -= u32::from(pool.len(nb));
                self.bufs -= 1;
                pool.set_next(nb, None);
                pool.free(nb);
                next = after;
            } else {
                e = ns;
                break;
            }
        }
        let n = e.since(s);
        if n == 0 {
            pool.free(idx);
            return OooInsert::Duplicate;
        }
        let off = pool.off(idx) as usize + s.since(start) as usize;
        set_window(pool, idx, off, n as usize);
        set_seq(pool, idx, s);
        pool.set_next(idx, next);
        match prev {
            Some(p) => pool.set_next(p, Some(idx)),
            None => self.head = Some(idx),
        }
        if next.is_none() {
            self.tail = Some(idx);
        }
        self.bytes += n;
        self.bufs += 1;
        OooInsert::Held
    }

    /// Take the held data that now continues the stream at `rcv_nxt` (trimmed to begin
    /// exactly there): `(head, tail, bytes, bufs)`, a chain to append to the receive queue.
    /// Buffers wholly before `rcv_nxt` are freed on the way.
    pub fn take_ready<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        rcv_nxt: Seq,
    ) -> Option<(BufIdx, BufIdx, u32, u32)> {
        // Drop what the stream has passed.
        while let Some(h) = self.head {
            if end_of(pool, h).gt(rcv_nxt) {
                break;
            }
            self.pop_head(pool, h);
            pool.free(h);
        }
        let h = self.head?;
        let hs = seq_of(pool, h);
        if hs.gt(rcv_nxt) {
            return None;
        }
        // Trim the first, then take every buffer that follows without a gap.
        let skip = rcv_nxt.since(hs) as u16;
        if skip > 0 {
            let (off, len) = (usize::from(pool.off(h)), usize::from(pool.len(h)));
            set_window(pool, h, off + usize::from(skip), len - usize::from(skip));
            self.bytes -= u32::from(skip);
        }
        let (mut tail, mut bytes, mut bufs) = (h, u32::from(pool.len(h)), 1u32);
        let mut end = rcv_nxt.add(bytes);
        while let Some(nb) = pool.next(tail).filter(|_| bufs < self.bufs) {
            if seq_of(pool, nb) != end {
                break;
            }
            let l = u32::from(pool.len(nb));
            bytes += l;
            end = end.add(l);
            bufs += 1;
            tail = nb;
        }
        self.head = pool.next(tail);
        if self.head.is_none() {
            self.tail = None;
        }
        pool.set_next(tail, None);
        self.bytes -= bytes;
        self.bufs -= bufs;
        Some((h, tail, bytes, bufs))
    }

    fn pop_head<P: BufferPool + ?Sized>(&mut self, pool: &mut P, h: BufIdx) {
        self.head = pool.next(h);
        if self.head.is_none() {
            self.tail = None;
        }
        pool.set_next(h, None);
        self.bytes = self.bytes.saturating_sub(u32::from(pool.len(h)));
        self.bufs = self.bufs.saturating_sub(1);
    }

    /// Free every buffer.
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        if let Some(h) = self.head {
            pool.free_chain(h);
        }
        *self = Ooo::default();
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
        assert_eq!(
            q.copy_out(
                &mut pool,
                150,
                200,
                CopyTo {
                    buf: dst,
                    off: 0,
                    uncached: false
                },
                &mut cursor
            ),
            200
        );
        assert_eq!(&pool.data(dst)[..200], &data[150..350]);
        pool.free(dst);
        assert_eq!(q.consume(&mut pool, 450, Some(&mut cursor)), 450);
        let mut out = vec![0; 2000];
        assert_eq!(q.read(&mut pool, &mut out, false), 550);
        assert_eq!(&out[..550], &data[450..]);
        assert!(q.is_empty());
        assert_eq!(pool.free_count(), pool.total());
    }

    /// Bytes given back come first, then what was queued; into an empty queue they are
    /// the queue; a pool too small for them changes nothing and leaks nothing.
    #[test]
    fn unread_bytes_go_in_front() {
        let mut pool = HeapPool::new(8, 256);
        let mut q = ChainQueue::default();
        let later = buf_with(&mut pool, b"later");
        q.push(&mut pool, later, 5);
        let back: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        assert!(q.unread(&mut pool, &back));
        assert_eq!(q.bytes(), 605);
        assert_eq!(q.bufs(), 4);
        let mut want = back.clone();
        want.extend_from_slice(b"later");
        assert_eq!(chain_to_vec(&pool, q.head().unwrap()), want);
        assert!(!q.unread(&mut pool, &[1; 2000]), "8 buffers cannot hold it");
        assert_eq!(q.bytes(), 605);
        assert_eq!(pool.free_count(), 4);
        q.clear(&mut pool);
        assert!(q.unread(&mut pool, b"alone"));
        assert!(q.unread(&mut pool, b""));
        assert_eq!(chain_to_vec(&pool, q.head().unwrap()), b"alone");
        let mut out = [0u8; 16];
        assert_eq!(q.read(&mut pool, &mut out, false), 5);
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
                    ooo.insert(&mut pool, b, seq, (e - s) as u32, 64);
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
