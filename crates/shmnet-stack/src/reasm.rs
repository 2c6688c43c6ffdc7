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
//!
//! # Budget
//!
//! Each fragment holds a whole pool buffer however small it is, so the table's two bounds
//! alone (64 datagrams × 64 fragments) let 4,096 eight-byte fragments hold every buffer of a
//! 4,096-buffer pool until the timeout, and nothing else could be received. Reassembly
//! therefore holds at most a [`Budget`] of buffers and payload bytes, globally and per
//! source address:
//!
//! * Global: `max_buffers` (default: a quarter of the pool's buffers, `pool.total() / 4`;
//!   in a pool of fewer than `4 × max_frags` buffers, 256 by default, raised to `max_frags`
//!   so that one datagram of the most fragments allowed still fits, but never above half
//!   the pool) and `max_bytes` (default: `max_buffers × pool.capacity()`, i.e. no tighter
//!   than the buffers). Defaults are derived from the pool passed to [`Reassembler::insert`] and
//!   [`Reassembler::expire`] (recomputed if a pool of another size is passed).
//! * Per source: `source_max_buffers` (default: a quarter of the global budget, but at least
//!   `max_frags` so that one source can always reassemble one datagram of the most
//!   fragments allowed) and `source_max_bytes` (default: a quarter of the global bytes, but
//!   at least [`MAX_PAYLOAD`]); derived defaults never exceed the global budget.
//! * A fragment that takes its source over the per-source budget evicts that source's oldest
//!   other datagram holding buffers (counted in [`Counters::evicted_source`]); one that takes
//!   the table over the global budget evicts the oldest other datagram of any source
//!   ([`Counters::evicted_budget`]); repeated until within budget. When there is no other
//!   datagram to evict, the fragment's own datagram goes ([`Outcome::Evicted`]): it could
//!   never complete within the budget. An evicted datagram's buffers are freed at once and
//!   its entry stays dead (discarding its later fragments) until its deadline. A fragment
//!   that completes its datagram never evicts anything: the datagram leaves the table.
//! * Under pressure — more than half of either global budget held — the timeout shrinks to
//!   an eighth: [`Reassembler::expire`] also abandons every datagram older than
//!   `timeout / 8` ([`Counters::expired_pressure`]).
//!
//! So one source holds at most a quarter of the budget and leaves room for the others, and a
//! flood from many sources sheds its own oldest (stale) datagrams first while a datagram
//! whose fragments arrive close together — the honest case — completes. The pool keeps at
//! least three quarters of its buffers for everything else. The common path pays a check of
//! the pool's geometry and two counters, and allocates nothing; the per-source sums are taken
//! by a scan of the table only when the whole table holds more than one source may.

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
    /// The fragment was taken, but its datagram alone exceeded the budget (global or of its
    /// source), so the datagram was evicted: its buffers, this one's included, are freed and
    /// the eviction is counted in [`Counters`].
    Evicted,
}

/// How much reassembly may hold; see the module documentation. `None` takes the default
/// derived from the pool (and, per source, from the global budget).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// Buffers held by all incomplete datagrams together (default `pool.total() / 4`, but at
    /// least `max_frags` and at most `pool.total() / 2`).
    pub max_buffers: Option<usize>,
    /// Payload bytes held by all incomplete datagrams together (default
    /// `max_buffers × pool.capacity()`).
    pub max_bytes: Option<usize>,
    /// Buffers held by the datagrams of one source address (default
    /// `max(max_buffers / 4, max_frags)`, at most `max_buffers`).
    pub source_max_buffers: Option<usize>,
    /// Payload bytes held by the datagrams of one source address (default
    /// `max(max_bytes / 4, MAX_PAYLOAD)`, at most `max_bytes`).
    pub source_max_bytes: Option<usize>,
}

/// A [`Budget`] resolved against a pool's geometry.
#[derive(Clone, Copy, Debug, Default)]
struct Limits {
    /// `(total, capacity)` of the pool these were derived from; `None` before the first.
    pool: Option<(usize, usize)>,
    bufs: usize,
    bytes: usize,
    src_bufs: usize,
    src_bytes: usize,
}

/// What the reassembler abandoned on its own initiative, cumulative. Timeouts are returned
/// by [`Reassembler::expire`] instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Datagrams (live or dead) evicted because the table was full.
    pub table_full: u64,
    /// Datagrams evicted to keep within the global budget.
    pub evicted_budget: u64,
    /// Datagrams evicted to keep one source within its budget.
    pub evicted_source: u64,
    /// Datagrams abandoned under pressure, older than an eighth of the timeout.
    pub expired_pressure: u64,
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
    /// Evictions and early expiries so far.
    counters: Counters,
    timeout: u64,
    max_frags: usize,
    budget: Budget,
    /// `budget` resolved against the last pool seen (all zero before: nothing fits, so
    /// [`try_append`](Self::try_append) defers to `insert`, which resolves it).
    limits: Limits,
    /// Buffers held by live entries.
    held_bufs: usize,
    /// Payload bytes held by live entries.
    held_bytes: usize,
}

/// The largest payload a reassembled datagram may carry.
pub const MAX_PAYLOAD: usize = ipv4::MAX_DATAGRAM - ipv4::HEADER_LEN;

impl Reassembler {
    /// A table of at most `capacity` datagrams, each abandoned `timeout` nanoseconds after its
    /// first fragment, of at most `max_frags` fragments each, within the default [`Budget`]
    /// (see [`with_budget`](Self::with_budget)).
    pub fn new(capacity: usize, timeout: u64, max_frags: usize) -> Reassembler {
        Reassembler {
            entries: Vec::with_capacity(capacity),
            spare: Vec::new(),
            earliest: Instant::from_nanos(u64::MAX),
            capacity,
            counters: Counters::default(),
            timeout,
            max_frags: max_frags.max(1),
            budget: Budget::default(),
            limits: Limits::default(),
            held_bufs: 0,
            held_bytes: 0,
        }
    }

    /// The same table holding at most `budget` (the module documentation has the policy).
    pub fn with_budget(mut self, budget: Budget) -> Reassembler {
        self.budget = budget;
        self.limits = Limits::default();
        self
    }

    /// Derive the limits from `pool` unless they already were from a pool of its geometry.
    #[inline]
    fn resolve<P: BufferPool + ?Sized>(&mut self, pool: &P) {
        let geometry = (pool.total(), pool.capacity());
        if self.limits.pool != Some(geometry) {
            self.resolve_slow(geometry);
        }
    }

    #[cold]
    fn resolve_slow(&mut self, (total, capacity): (usize, usize)) {
        let b = self.budget;
        let bufs = b
            .max_buffers
            .unwrap_or((total / 4).max(self.max_frags).min(total / 2));
        let bytes = b.max_bytes.unwrap_or(bufs.saturating_mul(capacity));
        self.limits = Limits {
            pool: Some((total, capacity)),
            bufs,
            bytes,
            src_bufs: b
                .source_max_buffers
                .unwrap_or((bufs / 4).max(self.max_frags))
                .min(bufs),
            src_bytes: b
                .source_max_bytes
                .unwrap_or((bytes / 4).max(MAX_PAYLOAD))
                .min(bytes),
        };
    }

    /// Buffers and payload bytes held by incomplete datagrams now.
    pub fn held(&self) -> (usize, usize) {
        (self.held_bufs, self.held_bytes)
    }

    /// The budget in force as `(buffers, bytes, buffers per source, bytes per source)`, as
    /// resolved against the last pool passed in (all zero before any).
    pub fn limits(&self) -> (usize, usize, usize, usize) {
        let l = &self.limits;
        (l.bufs, l.bytes, l.src_bufs, l.src_bytes)
    }

    /// Evictions and early expiries so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// More than half of either global budget held: the timeout shrinks to an eighth.
    #[inline]
    fn under_pressure(&self) -> bool {
        self.held_bufs > self.limits.bufs / 2 || self.held_bytes > self.limits.bytes / 2
    }

    /// How much earlier than its deadline a datagram expires under pressure.
    #[inline]
    fn pressure_advance(&self) -> u64 {
        self.timeout - self.timeout / 8
    }

    /// Free the fragments of a live entry, uncount them, and keep the list for reuse.
    fn release<P: BufferPool + ?Sized>(&mut self, pool: &mut P, frags: Vec<Frag>, have: usize) {
        for f in &frags {
            pool.free(f.buf);
        }
        self.held_bufs = self.held_bufs.saturating_sub(frags.len());
        self.held_bytes = self.held_bytes.saturating_sub(have);
        self.recycle(frags);
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
    /// work to do (under pressure, the shortened one).
    pub fn next_deadline(&self) -> Option<Instant> {
        let d = self.entries.iter().map(|e| e.deadline).min()?;
        if self.under_pressure() {
            Some(Instant::from_nanos(
                d.nanos().saturating_sub(self.pressure_advance()),
            ))
        } else {
            Some(d)
        }
    }

    fn recycle(&mut self, mut frags: Vec<Frag>) {
        if self.spare.len() < self.capacity {
            frags.clear();
            self.spare.push(frags);
        }
    }

    /// Free every datagram whose deadline is at or before `now` and, under pressure (more
    /// than half the budget held), every one older than an eighth of the timeout. Returns
    /// how many *live* datagrams (ones holding fragments) were abandoned at their deadline;
    /// the early ones are counted in [`Counters::expired_pressure`].
    #[inline]
    pub fn expire<P: BufferPool + ?Sized>(&mut self, pool: &mut P, now: Instant) -> u64 {
        self.resolve(pool);
        let horizon = if self.under_pressure() {
            Instant::from_nanos(now.nanos().saturating_add(self.pressure_advance()))
        } else {
            now
        };
        if horizon < self.earliest {
            return 0;
        }
        self.expire_slow(pool, now, horizon)
    }

    /// Removes the entries whose deadline is at or before `horizon` (`now`, or later under
    /// pressure); those past `now` itself are the early expiries.
    fn expire_slow<P: BufferPool + ?Sized>(
        &mut self,
        pool: &mut P,
        now: Instant,
        horizon: Instant,
    ) -> u64 {
        let mut n = 0;
        let mut i = 0;
        while i < self.entries.len() {
            let deadline = self.entries[i].deadline;
            if deadline <= horizon {
                let e = self.entries.swap_remove(i);
                if let State::Live { frags, have, .. } = e.state {
                    self.release(pool, frags, have);
                    if deadline <= now {
                        n += 1;
                    } else {
                        self.counters.expired_pressure += 1;
                    }
                }
            } else {
                i += 1;
            }
        }
        self.earliest = self
            .entries
            .iter()
            .map(|e| e.deadline)
            .min()
            .unwrap_or(Instant::from_nanos(u64::MAX));
        n
    }

    /// Free everything (used when tearing down).
    pub fn clear<P: BufferPool + ?Sized>(&mut self, pool: &mut P) {
        let mut entries = std::mem::take(&mut self.entries);
        for e in entries.drain(..) {
            if let State::Live { frags, have, .. } = e.state {
                self.release(pool, frags, have);
            }
        }
        self.entries = entries;
        self.earliest = Instant::from_nanos(u64::MAX);
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
        self.resolve(pool);
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
    /// expired the table. It also defers unless the whole table, this fragment included,
    /// stays within the budget of one source (which implies every budget), so that the
    /// budget's bookkeeping beyond two counters is `insert`'s.
    #[inline]
    pub fn try_append(&mut self, frag: &Fragment) -> bool {
        let max_frags = self.max_frags;
        if self.held_bufs >= self.limits.src_bufs
            || self.held_bytes.saturating_add(frag.len) > self.limits.src_bytes
        {
            return false;
        }
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
        self.held_bufs += 1;
        self.held_bytes += len;
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
            Ok(false) if self.enforce_budget(pool, i) => Outcome::Held,
            Ok(false) => Outcome::Evicted,
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
        let complete = total.is_some_and(|t| *have == t);
        self.held_bufs += 1;
        self.held_bytes += frag.len;
        Ok(complete)
    }

    /// Link the fragments of complete entry `i` and remove it.
    fn finish<P: BufferPool + ?Sized>(&mut self, pool: &mut P, i: usize) -> Datagram {
        let e = self.entries.swap_remove(i);
        let State::Live { frags, total, have } = e.state else {
            unreachable!("finish is only called on a live entry")
        };
        // The buffers leave the table in the datagram.
        self.held_bufs = self.held_bufs.saturating_sub(frags.len());
        self.held_bytes = self.held_bytes.saturating_sub(have);
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
        if let State::Live { frags, have, .. } = e.state {
            self.release(pool, frags, have);
        }
        self.counters.table_full += 1;
    }

    /// Datagrams (live or dead) evicted so far to make room for newer ones
    /// ([`Counters::table_full`]).
    pub fn evictions(&self) -> u64 {
        self.counters.table_full
    }

    /// Abandon entry `i`: free its fragments and mark it dead until its deadline.
    fn kill<P: BufferPool + ?Sized>(&mut self, pool: &mut P, i: usize) {
        let e = &mut self.entries[i];
        if let State::Live { frags, have, .. } = std::mem::replace(&mut e.state, State::Dead) {
            self.release(pool, frags, have);
        }
    }

    /// Buffers and payload bytes entry `i` holds (zero for a dead one).
    fn holding(&self, i: usize) -> (usize, usize) {
        match &self.entries[i].state {
            State::Live { frags, have, .. } => (frags.len(), *have),
            State::Dead => (0, 0),
        }
    }

    /// Entry `i` has just taken a fragment: evict until the table is within its budget —
    /// the oldest other datagram of the same source while that source is over its own
    /// budget, else the oldest other datagram of any source while the table is over the
    /// global one; entry `i` itself when no other datagram holds anything. Returns whether
    /// entry `i` survived. Each round frees at least one buffer, so this ends.
    fn enforce_budget<P: BufferPool + ?Sized>(&mut self, pool: &mut P, i: usize) -> bool {
        let lim = self.limits;
        if self.held_bufs <= lim.src_bufs && self.held_bytes <= lim.src_bytes {
            // The whole table fits one source's budget, so every budget holds.
            return true;
        }
        let src = self.entries[i].key.src;
        let (mut src_bufs, mut src_bytes) = (0, 0);
        for j in 0..self.entries.len() {
            if self.entries[j].key.src == src {
                let (b, y) = self.holding(j);
                src_bufs += b;
                src_bytes += y;
            }
        }
        loop {
            let by_source = src_bufs > lim.src_bufs || src_bytes > lim.src_bytes;
            if !by_source && self.held_bufs <= lim.bufs && self.held_bytes <= lim.bytes {
                return true;
            }
            let victim = (0..self.entries.len())
                .filter(|&j| {
                    j != i
                        && self.holding(j).0 > 0
                        && (!by_source || self.entries[j].key.src == src)
                })
                .min_by_key(|&j| self.entries[j].deadline)
                .unwrap_or(i);
            if by_source {
                self.counters.evicted_source += 1;
            } else {
                self.counters.evicted_budget += 1;
            }
            if self.entries[victim].key.src == src {
                let (b, y) = self.holding(victim);
                src_bufs -= b;
                src_bytes -= y;
            }
            self.kill(pool, victim);
            if victim == i {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::HeapPool;

    const TIMEOUT: u64 = 30_000_000_000;
    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    fn key(src: u8, ident: u16) -> FragKey {
        FragKey {
            src: Ipv4Addr::new(10, 0, 1, src),
            dst: Ipv4Addr::new(10, 0, 0, 1),
            proto: IpProtocol::Udp,
            ident,
        }
    }

    /// A fragment of `len` bytes (a value derived from the key) at `offset`, in a fresh
    /// buffer of `pool`.
    fn frag(pool: &mut HeapPool, key: FragKey, offset: usize, len: usize, more: bool) -> Fragment {
        let bytes = vec![key.ident as u8 ^ key.src.octets()[3]; len];
        let buf = pool
            .alloc_with(0, &bytes)
            .expect("the test's pool is big enough");
        Fragment {
            key,
            offset,
            len,
            more,
            ttl: 64,
            src_mac: MAC,
            buf,
        }
    }

    /// Offers fragment `f` at `now` after expiring, as the interface does.
    fn offer(r: &mut Reassembler, pool: &mut HeapPool, f: Fragment, now: Instant) -> Outcome {
        r.expire(pool, now);
        r.insert(pool, f, now)
    }

    /// Buffers held by incomplete datagrams of `src`, counted from the table itself.
    fn held_by(r: &Reassembler, src: u8) -> usize {
        let src = Ipv4Addr::new(10, 0, 1, src);
        (0..r.entries.len())
            .filter(|&i| r.entries[i].key.src == src)
            .map(|i| r.holding(i).0)
            .sum()
    }

    /// An honest three-fragment datagram from `src`, offered whole: it must complete.
    fn honest(r: &mut Reassembler, pool: &mut HeapPool, src: u8, ident: u16, now: Instant) {
        let k = key(src, ident);
        for (off, more) in [(0, true), (800, true)] {
            let f = frag(pool, k, off, 800, more);
            assert_eq!(offer(r, pool, f, now), Outcome::Held);
        }
        let f = frag(pool, k, 1600, 100, false);
        match offer(r, pool, f, now) {
            Outcome::Complete(dg) => {
                assert_eq!((dg.len, dg.bufs), (1700, 3));
                pool.free_chain(dg.head);
            }
            o => panic!("honest datagram not completed: {o:?}"),
        }
    }

    /// The 4,096-buffer pool of the attack (small buffers: only the count matters here).
    fn attack_pool() -> HeapPool {
        HeapPool::new(4096, 2048)
    }

    #[test]
    fn default_budget_is_a_quarter_of_the_pool_and_a_quarter_of_that_per_source() {
        let mut pool = attack_pool();
        let mut r = Reassembler::new(64, TIMEOUT, 64);
        r.expire(&mut pool, Instant::ZERO);
        assert_eq!(r.limits(), (1024, 1024 * 2048, 256, 1024 * 2048 / 4));
        // A small pool still fits one datagram of the most fragments, but never more than half.
        r.expire(&mut HeapPool::new(128, 2048), Instant::ZERO);
        assert_eq!(r.limits(), (64, 64 * 2048, 64, MAX_PAYLOAD));
        r.expire(&mut HeapPool::new(40, 2048), Instant::ZERO);
        assert_eq!(r.limits().0, 20);
        // Explicit values win; derived per-source ones never exceed the global ones.
        let mut r = Reassembler::new(64, TIMEOUT, 64).with_budget(Budget {
            max_buffers: Some(100),
            max_bytes: Some(5000),
            ..Budget::default()
        });
        r.expire(&mut pool, Instant::ZERO);
        assert_eq!(r.limits(), (100, 5000, 64, 5000));
    }

    #[test]
    fn a_flood_from_one_source_holds_at_most_its_share_and_others_still_reassemble() {
        let mut pool = attack_pool();
        let mut r = Reassembler::new(64, TIMEOUT, 64);
        let mut now = Instant::ZERO;
        // 64 datagrams × 64 eight-byte fragments (offset 0 never comes), round robin, with an
        // honest datagram from another source every 256 fragments.
        for k in 0..64usize {
            for d in 0..64u16 {
                let f = frag(&mut pool, key(66, d), 8 + 8 * k, 8, true);
                let o = offer(&mut r, &mut pool, f, now);
                assert!(
                    matches!(o, Outcome::Held | Outcome::Dropped(FragDrop::Discarded)),
                    "{o:?}"
                );
                assert!(held_by(&r, 66) <= 256);
                assert!(r.held().0 <= 256);
                assert_eq!(pool.free_count(), pool.total() - r.held().0);
                now = Instant::from_nanos(now.nanos() + 1000);
            }
            if k % 4 == 3 {
                honest(&mut r, &mut pool, 7, k as u16, now);
            }
        }
        let c = r.counters();
        assert!(c.evicted_source > 0, "{c:?}");
        assert_eq!((c.evicted_budget, c.expired_pressure), (0, 0), "{c:?}");
        r.clear(&mut pool);
        assert_eq!(r.held(), (0, 0));
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn a_flood_from_many_sources_holds_at_most_the_budget_and_the_newest_reassembles() {
        let mut pool = attack_pool();
        let mut r = Reassembler::new(64, TIMEOUT, 64);
        let mut now = Instant::ZERO;
        // 64 sources × one datagram of 64 fragments each: every source within its share,
        // all of them together four times the global budget.
        for k in 0..64usize {
            for s in 0..64u8 {
                let f = frag(&mut pool, key(100 + s, 1), 8 + 8 * k, 8, true);
                let o = offer(&mut r, &mut pool, f, now);
                assert!(
                    matches!(o, Outcome::Held | Outcome::Dropped(FragDrop::Discarded)),
                    "{o:?}"
                );
                assert!(r.held().0 <= 1024);
                assert_eq!(pool.free_count(), pool.total() - r.held().0);
                now = Instant::from_nanos(now.nanos() + 1000);
            }
            if k % 4 == 3 {
                honest(&mut r, &mut pool, 7, k as u16, now);
            }
        }
        let c = r.counters();
        assert!(c.evicted_budget > 0, "{c:?}");
        assert_eq!(c.evicted_source, 0, "{c:?}");
        r.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn a_datagram_alone_over_the_budget_is_evicted_itself() {
        let mut pool = HeapPool::new(64, 2048);
        let mut r = Reassembler::new(64, TIMEOUT, 64).with_budget(Budget {
            max_buffers: Some(4),
            ..Budget::default()
        });
        let k = key(1, 1);
        for i in 0..4 {
            let f = frag(&mut pool, k, 8 * i, 8, true);
            assert_eq!(offer(&mut r, &mut pool, f, Instant::ZERO), Outcome::Held);
        }
        let f = frag(&mut pool, k, 32, 8, true);
        assert_eq!(offer(&mut r, &mut pool, f, Instant::ZERO), Outcome::Evicted);
        assert_eq!(r.counters().evicted_source, 1);
        assert_eq!(pool.free_count(), pool.total());
        // The rest of it is discarded until the deadline.
        let f = frag(&mut pool, k, 40, 8, false);
        assert_eq!(
            offer(&mut r, &mut pool, f, Instant::ZERO),
            Outcome::Dropped(FragDrop::Discarded)
        );
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn the_byte_budget_evicts_the_oldest_datagram_of_another_source() {
        let mut pool = HeapPool::new(64, 2048);
        let mut r = Reassembler::new(64, TIMEOUT, 64).with_budget(Budget {
            max_bytes: Some(1000),
            ..Budget::default()
        });
        for (i, src) in [(0, 1), (1, 1), (0, 2)] {
            let f = frag(&mut pool, key(src, 1), 400 * i, 400, true);
            assert_eq!(offer(&mut r, &mut pool, f, Instant::ZERO), Outcome::Held);
        }
        // 1,200 bytes > 1,000: source 1's datagram, the oldest, went.
        assert_eq!(r.counters().evicted_budget, 1);
        assert_eq!(r.held(), (1, 400));
        assert_eq!((held_by(&r, 1), held_by(&r, 2)), (0, 1));
        r.clear(&mut pool);
        assert_eq!(pool.free_count(), pool.total());
    }

    #[test]
    fn under_pressure_the_timeout_shrinks_to_an_eighth() {
        let mut pool = HeapPool::new(64, 2048);
        let mut r = Reassembler::new(64, TIMEOUT, 64).with_budget(Budget {
            max_buffers: Some(16),
            ..Budget::default()
        });
        // Eight buffers: half the budget, not above it — no pressure.
        for i in 0..8 {
            let f = frag(&mut pool, key(1, 1), 8 * i, 8, true);
            assert_eq!(offer(&mut r, &mut pool, f, Instant::ZERO), Outcome::Held);
        }
        let eighth = Instant::from_nanos(TIMEOUT / 8);
        assert_eq!(r.next_deadline(), Some(Instant::from_nanos(TIMEOUT)));
        assert_eq!(r.expire(&mut pool, eighth), 0);
        assert_eq!(r.held().0, 8);
        // A ninth (from another datagram, a little later): pressure.
        let later = Instant::from_nanos(TIMEOUT / 8 + 5);
        let f = frag(&mut pool, key(2, 1), 0, 8, true);
        assert_eq!(offer(&mut r, &mut pool, f, later), Outcome::Held);
        assert_eq!(r.next_deadline(), Some(eighth));
        // The first datagram is now too old; the second is not yet.
        assert_eq!(r.expire(&mut pool, later), 0);
        assert_eq!(r.counters().expired_pressure, 1);
        assert_eq!(r.held().0, 1);
        // Back under half the budget: the normal deadline again.
        let deadline = later.nanos() + TIMEOUT;
        assert_eq!(r.next_deadline(), Some(Instant::from_nanos(deadline)));
        assert_eq!(r.expire(&mut pool, Instant::from_nanos(deadline - 1)), 0);
        assert_eq!(r.held().0, 1);
        assert_eq!(r.expire(&mut pool, Instant::from_nanos(deadline)), 1);
        assert_eq!(r.counters().expired_pressure, 1);
        assert_eq!(pool.free_count(), pool.total());
    }
}
