//! IPv4 reassembly over buffer chains.
//!
//! Each fragment stays in the buffer it arrived in, narrowed to its payload; a complete
//! datagram is returned as the chain of those buffers linked in offset order.
//!
//! # Invariants
//!
//! * At most `capacity` datagrams in the table (64 by default), keyed by
//!   (source, destination, protocol, identification). A fragment of a new datagram when the
//!   table is full evicts the oldest entry (earliest deadline), freeing its buffers and
//!   counting it ([`Reassembler::evictions`]). Refusing the newcomer instead would let a burst
//!   of incomplete datagrams — lost fragments under overload, or an attacker's — block every
//!   fragmented datagram until the timeout; evicting the oldest sheds the stale ones first,
//!   as Linux does under memory pressure.
//! * A datagram's deadline is fixed when its first fragment arrives (`now + timeout`); later
//!   fragments do not extend it. At the deadline its buffers are freed.
//! * The fragments of a live entry never overlap and all lie within the datagram's total
//!   length once that is known (from the fragment without more-fragments); the payload never
//!   exceeds 65,535 − 20 bytes.
//! * A fragment that overlaps another one (other than an exact, byte-identical duplicate,
//!   which is ignored), or contradicts the known total length, abandons the whole datagram
//!   (RFC 5722): its buffers are freed at once and the entry stays *dead* — discarding any
//!   further fragment of it — until its deadline.
//! * Every buffer handed to [`Reassembler::insert`] is either kept by a live entry, returned
//!   in a complete datagram, or freed before `insert` returns.

use std::net::Ipv4Addr;

use smoltcp::wire::{EthernetAddress, IpProtocol};

use crate::Instant;
use crate::buf::{BufIdx, BufferPool, valid};
use crate::ipv4::{self, Datagram};

/// What identifies the fragments of one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragKey {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol.
    pub proto: IpProtocol,
    /// Identification.
    pub ident: u16,
}

/// One received fragment: `len` payload bytes at offset `offset`, held in `buf`. Offsets and
/// lengths are below 65,536 (checked against [`MAX_PAYLOAD`] before a fragment is kept), so
/// 32 bits hold them: a fragment list entry is 12 bytes.
#[derive(Clone, Copy, Debug)]
struct Frag {
    offset: u32,
    len: u32,
    buf: BufIdx,
}

impl Frag {
    #[inline]
    fn end(&self) -> u32 {
        self.offset + self.len
    }
}

#[derive(Debug)]
enum State {
    /// Collecting fragments, sorted by offset; `have` is the sum of their lengths.
    Live {
        frags: Vec<Frag>,
        total: Option<usize>,
        have: usize,
    },
    /// Abandoned: further fragments are discarded until the deadline.
    Dead,
}

#[derive(Debug)]
struct Entry {
    key: FragKey,
    deadline: Instant,
    ttl: u8,
    src_mac: EthernetAddress,
    state: State,
}

/// The outcome of offering a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Kept; the datagram is not complete yet.
    Held,
    /// The datagram is complete.
    Complete(Datagram),
    /// The fragment was refused and freed.
    Dropped(FragDrop),
}

/// Why a fragment was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragDrop {
    /// Malformed: empty, not a multiple of 8 with more-fragments set, or inconsistent with
    /// the datagram's end (the datagram is abandoned in the last case).
    BadFragment,
    /// Overlaps a fragment already held: the datagram is abandoned.
    Overlap,
    /// The datagram was abandoned earlier.
    Discarded,
    /// Byte-identical duplicate of a fragment already held.
    Duplicate,
    /// The datagram would exceed 65,535 bytes: abandoned.
    Oversize,
    /// Too many fragments for one datagram: abandoned.
    TooManyFrags,
}

/// A fragment as offered to the reassembler.
#[derive(Clone, Copy, Debug)]
pub struct Fragment {
    /// Datagram key.
    pub key: FragKey,
    /// Offset of this fragment's payload, in bytes.
    pub offset: usize,
    /// Payload length in bytes (the buffer's window).
    pub len: usize,
    /// More-fragments flag.
    pub more: bool,
    /// Time to live of this fragment.
    pub ttl: u8,
    /// Ethernet source of the frame.
    pub src_mac: EthernetAddress,
    /// Buffer narrowed to the fragment's payload.
    pub buf: BufIdx,
}

/// The reassembly table. See the module documentation for its invariants.
#[derive(Debug)]
pub struct Reassembler {
    entries: Vec<Entry>,
    /// Emptied fragment lists kept for reuse, so that steady-state reassembly allocates
    /// nothing (at most `capacity` of them).
    spare: Vec<Vec<Frag>>,
    /// No deadline in the table is earlier than this (a lower bound; `expire` is a no-op
    /// before it).
    earliest: Instant,
    capacity: usize,
    /// Entries evicted because the table was full.
    evictions: u64,
    timeout: u64,
    max_frags: usize,
}

/// The largest payload a reassembled datagram may carry.
pub const MAX_PAYLOAD: usize = ipv4::MAX_DATAGRAM - ipv4::HEADER_LEN;

impl Reassembler {
    /// A table of at most `capacity` datagrams, each abandoned `timeout` nanoseconds after its
    /// first fragment, of at most `max_frags` fragments each.
    pub fn new(capacity: usize, timeout: u64, max_frags: usize) -> Reassembler {
        Reassembler {
            entries: Vec::with_capacity(capacity),
            spare: Vec::new(),
            earliest: Instant::from_nanos(u64::MAX),
            capacity,
            evictions: 0,
            timeout,
            max_frags: max_frags.max(1),
        }
    }

    /// Number of datagrams in the table (dead ones included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The earliest deadline in the table, if any: when [`expire`](Self::expire) next has
    /// work to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.iter().map(|e| e.deadline).min()
    }

    fn recycle(&mut self, mut frags: Vec<Frag>) {
        if self.spare.len() < self.capacity {
            frags.clear();
            self.spare.push(frags);
        }
    }

    /// Free every datagram whose deadline is at or before `now`. Returns how many *live*
    /// datagrams (ones holding fragments) were abandoned.
    #[inline]
    pub fn expire<P: BufferPool + ?Sized>(&mut self, pool: &mut P, now: Instant) -> u64 {
        if now < self.earliest {
            return 0;
        }
        self.expire_slow(pool, now)
    }

    fn expire_slow<P: BufferPool + ?Sized>(&mut self, pool: &mut P, now: Instant) -> u64 {
        let mut n = 0;
        let mut i = 0;
        while i < self.entries.len() {
            if self.entries[i].deadline <= now {
                let e = self.entries.swap_remove(i);
                if let State::Live { frags, .. } = e.state {
                    for f in &frags {
                        pool.free(f.buf);
                    }
                    self.recycle(frags);
                    n += 1;
                }
            } else {
                i += 1;
            }
        }
        self.earliest = self
            .next_deadline()
            .unwrap_or(Instant::from_nanos(u64::MAX));
        n
    }

    /// Free everything (used when tearing down).
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        for e in self.entries.drain(..) {
            if let State::Live { frags, .. } = e.state {
                for f in frags {
                    pool.free(f.buf);
                }
            }
        }
    }

    /// Offer a fragment. The caller has already expired the table at `now`.
    ///
    /// Inlined: the common case ([`try_append`](Self::try_append)) costs no call; the rest
    /// is out of line.
    #[inline]
    pub fn insert<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        frag: Fragment,
        now: Instant,
    ) -> Outcome {
        if self.try_append(&frag) {
            return Outcome::Held;
        }
        self.insert_any(pool, frag, now)
    }

    /// The common case of [`insert`](Self::insert), cheap enough to inline into the caller:
    /// a middle fragment (more-fragments set, end not yet known) of the newest datagram,
    /// arriving in order after the fragments it already has. Returns whether it was kept
    /// (the outcome is then [`Outcome::Held`]); when not, nothing has changed and `insert`
    /// decides — it would have kept such a fragment exactly so. The caller has already
    /// expired the table.
    #[inline]
    pub fn try_append(&mut self, frag: &Fragment) -> bool {
        let max_frags = self.max_frags;
        let Some(e) = self.entries.last_mut() else {
            return false;
        };
        if e.key != frag.key {
            return false;
        }
        let State::Live {
            frags,
            total: None,
            have,
        } = &mut e.state
        else {
            return false;
        };
        let (offset, len) = (frag.offset, frag.len);
        let Some(last) = frags.last() else {
            return false;
        };
        if !frag.more
            || len == 0
            || len % 8 != 0
            || offset + len > MAX_PAYLOAD
            || last.end() as usize > offset
            || frags.len() >= max_frags
        {
            return false;
        }
        // `last.end() <= offset` and `len > 0`, so `last.offset < offset`: it goes at the end,
        // and nothing follows it; the datagram's end is unknown, so it is not complete.
        frags.push(Frag {
            offset: offset as u32,
            len: len as u32,
            buf: frag.buf,
        });
        *have += len;
        e.ttl = frag.ttl;
        e.src_mac = frag.src_mac;
        true
    }

    /// Any fragment: the general case of [`insert`](Self::insert).
    #[inline(never)]
    fn insert_any<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        frag: Fragment,
        now: Instant,
    ) -> Outcome {
        let pos = match self.entries.last() {
            // The datagram being reassembled is usually the newest entry.
            Some(e) if e.key == frag.key => Some(self.entries.len() - 1),
            _ => self.entries.iter().position(|e| e.key == frag.key),
        };
        let end = frag.offset + frag.len;
        if frag.len == 0 || (frag.more && frag.len % 8 != 0) {
            pool.free(frag.buf);
            return Outcome::Dropped(FragDrop::BadFragment);
        }
        if end > MAX_PAYLOAD {
            if let Some(i) = pos {
                self.kill(pool, i);
            }
            pool.free(frag.buf);
            return Outcome::Dropped(FragDrop::Oversize);
        }
        let i = match pos {
            Some(i) => i,
            None => {
                if self.entries.len() >= self.capacity {
                    self.evict_oldest(pool);
                }
                let deadline = Instant::from_nanos(now.nanos().saturating_add(self.timeout));
                self.earliest = self.earliest.min(deadline);
                self.entries.push(Entry {
                    key: frag.key,
                    deadline,
                    ttl: frag.ttl,
                    src_mac: frag.src_mac,
                    state: State::Live {
                        frags: self.spare.pop().unwrap_or_else(|| Vec::with_capacity(16)),
                        total: None,
                        have: 0,
                    },
                });
                self.entries.len() - 1
            }
        };
        let verdict = self.place(pool, i, &frag, end);
        match verdict {
            Ok(true) => Outcome::Complete(self.finish(pool, i)),
            Ok(false) => Outcome::Held,
            Err(FragDrop::Duplicate) => {
                pool.free(frag.buf);
                Outcome::Dropped(FragDrop::Duplicate)
            }
            Err(FragDrop::Discarded) => {
                pool.free(frag.buf);
                Outcome::Dropped(FragDrop::Discarded)
            }
            Err(why) => {
                self.kill(pool, i);
                pool.free(frag.buf);
                Outcome::Dropped(why)
            }
        }
    }

    /// Put `frag` into entry `i`. `Ok(complete?)` when kept; `Err` when refused (the fragment
    /// is not kept; the caller frees it and, for anything but a duplicate or a discard,
    /// abandons the datagram). The caller has checked `end <= MAX_PAYLOAD`.
    fn place<P: BufferPool + ?Sized>(
        &mut self,
        pool: &P,
        i: usize,
        frag: &Fragment,
        end: usize,
    ) -> Result<bool, FragDrop> {
        let max_frags = self.max_frags;
        let e = &mut self.entries[i];
        let State::Live { frags, total, have } = &mut e.state else {
            return Err(FragDrop::Discarded);
        };
        // Both fit in 32 bits: `end <= MAX_PAYLOAD`.
        let (offset, end32) = (frag.offset as u32, end as u32);
        // Where it goes: the first fragment with an offset >= ours (usually the end: fragments
        // tend to arrive in order).
        let at = match frags.last() {
            Some(last) if last.offset < offset => frags.len(),
            None => 0,
            _ => frags.partition_point(|f| f.offset < offset),
        };
        if let Some(next) = frags
            .get(at)
            .filter(|n| n.offset == offset && n.end() == end32)
        {
            // Same place: a duplicate if the bytes agree, else an overlap.
            return if valid(pool, next.buf) == valid(pool, frag.buf) {
                Err(FragDrop::Duplicate)
            } else {
                Err(FragDrop::Overlap)
            };
        }
        if !frag.more {
            if total.is_some_and(|t| t != end) {
                return Err(FragDrop::BadFragment);
            }
            if frags.last().is_some_and(|f| f.end() > end32) {
                return Err(FragDrop::BadFragment);
            }
            *total = Some(end);
        } else if total.is_some_and(|t| end >= t) {
            return Err(FragDrop::BadFragment);
        }
        if at > 0 && frags[at - 1].end() > offset {
            return Err(FragDrop::Overlap);
        }
        if frags.get(at).is_some_and(|next| next.offset < end32) {
            return Err(FragDrop::Overlap);
        }
        if frags.len() >= max_frags {
            return Err(FragDrop::TooManyFrags);
        }
        frags.insert(
            at,
            Frag {
                offset,
                len: end32 - offset,
                buf: frag.buf,
            },
        );
        *have += frag.len;
        e.ttl = frag.ttl;
        e.src_mac = frag.src_mac;
        // No overlaps and every fragment inside [0, total): full coverage iff the sum matches.
        Ok(total.is_some_and(|t| *have == t))
    }

    /// Link the fragments of complete entry `i` and remove it.
    fn finish<P: BufferPool + ?Sized>(&mut self, pool: &mut P, i: usize) -> Datagram {
        let e = self.entries.swap_remove(i);
        let State::Live { frags, total, .. } = e.state else {
            unreachable!("finish is only called on a live entry")
        };
        for w in frags.windows(2) {
            pool.set_next(w[0].buf, Some(w[1].buf));
        }
        if let Some(last) = frags.last() {
            pool.set_next(last.buf, None);
        }
        let dg = Datagram {
            head: frags[0].buf,
            len: total.unwrap_or(0),
            bufs: frags.len(),
            src: e.key.src,
            dst: e.key.dst,
            proto: e.key.proto,
            ident: e.key.ident,
            ttl: e.ttl,
            src_mac: e.src_mac,
        };
        self.recycle(frags);
        dg
    }

    /// Removes the entry with the earliest deadline (the oldest), freeing its fragments.
    fn evict_oldest<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        let Some(i) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].deadline) else {
            return;
        };
        let e = self.entries.swap_remove(i);
        if let State::Live { frags, .. } = e.state {
            for f in &frags {
                pool.free(f.buf);
            }
            self.recycle(frags);
        }
        self.evictions += 1;
    }

    /// Datagrams (live or dead) evicted so far to make room for newer ones.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Abandon entry `i`: free its fragments and mark it dead until its deadline.
    fn kill<P: BufferPool + ?Sized>(&mut self, pool: &mut P, i: usize) {
        let e = &mut self.entries[i];
        if let State::Live { frags, .. } = std::mem::replace(&mut e.state, State::Dead) {
            for f in &frags {
                pool.free(f.buf);
            }
            self.recycle(frags);
        }
    }
}
