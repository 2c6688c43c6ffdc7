//! A set-associative store of 64-bit keys with a replacement policy: the core shared by the
//! caches (keys are line numbers) and the TLBs (keys are page numbers).
//!
//! Layout: flat arrays indexed by `slot = set * ways + way` — the keys, one replacement word
//! per slot (a use or fill stamp), and the tree-PLRU bits per set. Nothing is allocated per
//! reference. Sets with more than [`SCAN_WAYS`] ways (fully associative TLBs and caches) keep a
//! hash index from key to slot so that a lookup does not scan them.
//!
//! Invariants: a key is in at most one slot; `keys[slot] == EMPTY` iff the slot is invalid;
//! a filled slot becomes invalid only through [`Store::invalidate`] (cache maintenance); for
//! LRU and FIFO, `stamps[slot] == 0` iff the slot is invalid, and valid stamps are distinct;
//! for `ways > SCAN_WAYS`, `index` maps exactly the valid keys to their slots.
//!
//! Sets of 1, 2, 4, 8 or 16 ways are searched as fixed-size arrays ([`Scan`]): unrolled,
//! branch-free, one bounds check.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::config::Replacement;

/// The key of an invalid slot. Line and page numbers are addresses shifted right by at least
/// one bit, so they never reach it.
pub(crate) const EMPTY: u64 = u64::MAX;

/// Sets with at most this many ways are searched by scanning; larger ones use a hash index.
pub(crate) const SCAN_WAYS: usize = 64;

/// A multiplicative hasher for line numbers (they are already well spread in their low bits).
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A `HashMap` keyed by line or page numbers.
pub(crate) type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// The two most recently touched keys of a store and their slots (`EMPTY` when unknown),
/// as the caches and TLBs remember them to skip searches.
///
/// Invariants (kept by the owner): `last != EMPTY` implies the store holds `last` in
/// `last_slot`, the same for `prev`; `prev != EMPTY` implies `last != EMPTY`,
/// `prev != last` and `prev_slot != last_slot`; `last` is the store's most recently used
/// key and `prev` the one used before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recent {
    pub(crate) last: u64,
    pub(crate) last_slot: usize,
    pub(crate) prev: u64,
    pub(crate) prev_slot: usize,
}

impl Recent {
    /// Nothing remembered.
    pub(crate) const NONE: Recent = Recent {
        last: EMPTY,
        last_slot: 0,
        prev: EMPTY,
        prev_slot: 0,
    };
}

/// How [`Store::find`] searches a set, chosen once from the number of ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    One,
    Two,
    Four,
    Eight,
    Sixteen,
    /// Any other number up to [`SCAN_WAYS`].
    Any,
    /// More than [`SCAN_WAYS`]: the hash index.
    Indexed,
}

/// A set-associative store; see the module documentation.
#[derive(Clone)]
pub(crate) struct Store {
    ways: usize,
    scan: Scan,
    set_mask: u64,
    policy: Replacement,
    keys: Vec<u64>,
    /// LRU: stamp of the last use; FIFO: stamp of the fill; otherwise unused.
    stamps: Vec<u64>,
    /// Tree-PLRU bits, `plru_words` u64 words per set; node `i` (1-based heap order) is bit
    /// `i`; a 0 bit says "the victim is on the left", 1 "on the right".
    plru: Vec<u64>,
    plru_words: usize,
    clock: u64,
    rng: fastrand::Rng,
    index: Option<KeyMap<u32>>,
    /// For indexed stores: a direct-mapped memo of key -> slot, checked against `keys`
    /// before use (so a stale entry only costs the index lookup it would have saved).
    hint: Vec<u32>,
    hint_shift: u32,
}

impl Store {
    /// A store of `sets` sets (a power of two) of `ways` ways each, all invalid.
    pub(crate) fn new(sets: u64, ways: u64, policy: Replacement, seed: u64) -> Store {
        let sets = sets as usize;
        let ways = ways as usize;
        let n = sets * ways;
        let plru_words = if policy == Replacement::TreePlru {
            ways.div_ceil(64).max(1)
        } else {
            0
        };
        let scan = match ways {
            1 => Scan::One,
            2 => Scan::Two,
            4 => Scan::Four,
            8 => Scan::Eight,
            16 => Scan::Sixteen,
            w if w > SCAN_WAYS => Scan::Indexed,
            _ => Scan::Any,
        };
        Store {
            ways,
            scan,
            set_mask: sets as u64 - 1,
            policy,
            keys: vec![EMPTY; n],
            stamps: vec![0; n],
            plru: vec![0; sets * plru_words],
            plru_words,
            clock: 0,
            rng: fastrand::Rng::with_seed(seed),
            index: (ways > SCAN_WAYS).then(KeyMap::default),
            hint: if ways > SCAN_WAYS {
                vec![0; (2 * n).next_power_of_two()]
            } else {
                Vec::new()
            },
            hint_shift: 64 - (2 * n).next_power_of_two().trailing_zeros(),
        }
    }

    #[inline]
    fn hint_of(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.hint_shift) as usize
    }

    /// The set `key` maps to.
    #[inline]
    pub(crate) fn set_of(&self, key: u64) -> usize {
        (key & self.set_mask) as usize
    }

    /// The key held in `slot`, or [`EMPTY`].
    #[inline]
    pub(crate) fn key(&self, slot: usize) -> u64 {
        self.keys[slot]
    }

    /// The slot holding `key`, if any. Does not change the replacement state.
    ///
    /// Inline for the fixed-size sets; the others in [`find_other`](Store::find_other).
    #[inline(always)]
    pub(crate) fn find(&self, key: u64) -> Option<usize> {
        let set = self.set_of(key);
        let way = match self.scan {
            Scan::One => (self.keys[set] == key).then_some(0),
            Scan::Two => position_of::<2>(&self.keys, set, key),
            Scan::Four => position_of::<4>(&self.keys, set, key),
            Scan::Eight => position_of::<8>(&self.keys, set, key),
            Scan::Sixteen => position_of::<16>(&self.keys, set, key),
            Scan::Any | Scan::Indexed => return self.find_other(key),
        };
        way.map(|w| set * self.ways + w)
    }

    /// [`find`](Store::find) for sets of other sizes.
    #[inline(never)]
    fn find_other(&self, key: u64) -> Option<usize> {
        if self.scan == Scan::Indexed {
            return self.find_indexed(key);
        }
        let base = self.set_of(key) * self.ways;
        self.keys[base..base + self.ways]
            .iter()
            .position(|&k| k == key)
            .map(|w| base + w)
    }

    fn find_indexed(&self, key: u64) -> Option<usize> {
        let h = self.hint[self.hint_of(key)] as usize;
        if self.keys[h] == key {
            return Some(h);
        }
        self.index.as_ref()?.get(&key).map(|&s| s as usize)
    }

    /// Records a use of `slot` (a hit).
    #[inline(always)]
    pub(crate) fn touch(&mut self, slot: usize) {
        if self.policy == Replacement::Lru {
            self.clock += 1;
            self.stamps[slot] = self.clock;
        } else if self.policy == Replacement::TreePlru {
            self.plru_touch(slot);
        }
    }

    /// Whether a hit on the previous key of a [`Recent`] may skip [`touch`](Store::touch),
    /// to be made good by [`settle`](Store::settle): true for every policy but tree-PLRU
    /// (whose bits depend on the order of every touch).
    pub(crate) fn lazy_touch_ok(&self) -> bool {
        self.policy != Replacement::TreePlru
    }

    /// Makes the replacement state exact after hits on the keys of `recent` that only
    /// reordered them (last and previous) without touching the store.
    ///
    /// Exact: only LRU's state depends on touches of resident keys (FIFO and random ignore
    /// them; tree-PLRU is excluded by [`lazy_touch_ok`](Store::lazy_touch_ok)). Under LRU the
    /// true order of use is every other key in stamp order, then `recent.prev`, then
    /// `recent.last` (by `Recent`'s invariants), and restamping those two, in that order,
    /// with the next clock values gives exactly that order; only the order of stamps is
    /// ever used.
    pub(crate) fn settle(&mut self, recent: &Recent) {
        if self.policy == Replacement::Lru {
            if recent.prev != EMPTY {
                self.touch(recent.prev_slot);
            }
            if recent.last != EMPTY {
                self.touch(recent.last_slot);
            }
        }
    }

    /// The slot the next fill of `key`'s set goes into: an invalid way if there is one (the
    /// lowest), else the policy's victim. Draws from the generator only for `random` with a
    /// full set.
    ///
    /// Inline for LRU and FIFO on fixed-size sets; the rest in
    /// [`victim_other`](Store::victim_other).
    #[inline(always)]
    pub(crate) fn victim(&mut self, key: u64) -> usize {
        let set = self.set_of(key);
        if !matches!(self.policy, Replacement::Lru | Replacement::Fifo) {
            return self.victim_other(set);
        }
        // Exact without looking for invalid ways first: a slot's stamp is 0 iff it is
        // invalid (never filled, or reset by `invalidate`; the clock is incremented before
        // it stamps, so valid stamps are >= 1 and distinct). The first minimum is thus
        // the lowest invalid way if there is one, else the least recent (LRU) or oldest
        // (FIFO) line, as the policy asks.
        let way = match self.scan {
            Scan::One => 0,
            Scan::Two => first_min_of::<2>(&self.stamps, set),
            Scan::Four => first_min_of::<4>(&self.stamps, set),
            Scan::Eight => first_min_of::<8>(&self.stamps, set),
            Scan::Sixteen => first_min_of::<16>(&self.stamps, set),
            Scan::Any | Scan::Indexed => return self.victim_other(set),
        };
        set * self.ways + way
    }

    /// [`victim`](Store::victim) in set `set` for the other policies and set sizes.
    #[inline(never)]
    fn victim_other(&mut self, set: usize) -> usize {
        let base = set * self.ways;
        match self.policy {
            Replacement::Lru | Replacement::Fifo => {
                base + first_min(&self.stamps[base..base + self.ways])
            }
            Replacement::Random | Replacement::TreePlru => {
                let ways = &self.keys[base..base + self.ways];
                if let Some(w) = ways.iter().position(|&k| k == EMPTY) {
                    base + w
                } else if self.policy == Replacement::Random {
                    base + self.rng.usize(..self.ways)
                } else {
                    base + self.plru_victim(set)
                }
            }
        }
    }

    /// Puts `key` into `slot` (from [`victim`](Store::victim)), replacing what was there;
    /// the new key counts as just used.
    #[inline(always)]
    pub(crate) fn fill(&mut self, slot: usize, key: u64) {
        let old = std::mem::replace(&mut self.keys[slot], key);
        if self.index.is_some() {
            self.fill_index(slot, old, key);
        }
        match self.policy {
            Replacement::Lru | Replacement::Fifo => {
                self.clock += 1;
                self.stamps[slot] = self.clock;
            }
            Replacement::TreePlru => self.plru_touch(slot),
            Replacement::Random => {}
        }
    }

    /// Makes `slot` invalid (cache maintenance discarding a line): its key becomes
    /// [`EMPTY`] and, for LRU and FIFO, its stamp 0, so the invariants hold and the next fill
    /// of its set takes it first (the lowest invalid way). Tree-PLRU bits are left as they
    /// are (a victim search takes invalid ways before following them).
    pub(crate) fn invalidate(&mut self, slot: usize) {
        let old = std::mem::replace(&mut self.keys[slot], EMPTY);
        if old == EMPTY {
            return;
        }
        self.stamps[slot] = 0;
        if let Some(index) = &mut self.index {
            // A stale `hint` entry is harmless: it is checked against `keys` before use.
            index.remove(&old);
        }
    }

    /// Keeps the index of a large store exact when `slot` changes from `old` to `key`.
    #[inline(never)]
    fn fill_index(&mut self, slot: usize, old: u64, key: u64) {
        if let Some(index) = &mut self.index {
            if old != EMPTY {
                index.remove(&old);
            }
            index.insert(key, slot as u32);
            let h = self.hint_of(key);
            self.hint[h] = slot as u32;
        }
    }

    fn plru_bit(&self, set: usize, node: usize) -> bool {
        let w = &self.plru[set * self.plru_words..];
        w[node / 64] >> (node % 64) & 1 == 1
    }

    fn plru_set(&mut self, set: usize, node: usize, v: bool) {
        let word = &mut self.plru[set * self.plru_words + node / 64];
        if v {
            *word |= 1 << (node % 64);
        } else {
            *word &= !(1 << (node % 64));
        }
    }

    /// Points every node on the way to `slot`'s way away from it.
    #[inline(never)]
    fn plru_touch(&mut self, slot: usize) {
        if self.ways == 1 {
            return;
        }
        let set = slot / self.ways;
        let way = slot % self.ways;
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.ways);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let left = way < mid;
            // The way is on the left: the victim is to be looked for on the right (1).
            self.plru_set(set, node, left);
            if left {
                node *= 2;
                hi = mid;
            } else {
                node = node * 2 + 1;
                lo = mid;
            }
        }
    }

    /// Follows the bits from the root to the way they point at.
    fn plru_victim(&self, set: usize) -> usize {
        let (mut node, mut lo, mut hi) = (1usize, 0usize, self.ways);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if self.plru_bit(set, node) {
                node = node * 2 + 1;
                lo = mid;
            } else {
                node *= 2;
                hi = mid;
            }
        }
        lo
    }
}

/// The way of set `set` of `keys` (sets of exactly `N` ways) holding `key`; a fixed-size
/// array, so the search is unrolled with one bounds check.
#[inline(always)]
fn position_of<const N: usize>(keys: &[u64], set: usize, key: u64) -> Option<usize> {
    let ways: &[u64; N] = keys[set * N..set * N + N].try_into().expect("N keys");
    // A select per way, from the last to the first (a compare and a conditional move each:
    // no branch per way, so no misprediction on where a hit is). A key is in at most one
    // way, so the result is that way whatever the order.
    let mut found = N;
    for w in (0..N).rev() {
        if ways[w] == key {
            found = w;
        }
    }
    (found < N).then_some(found)
}

/// The bits of a way number in [`first_min_of`]'s packed values (`N <= 16`).
const WAY_BITS: u32 = 4;

/// [`first_min`] of set `set` of `v` (sets of exactly `N <= 16` stamps; a fixed-size
/// array, so the loop is unrolled and branch-free, with one bounds check).
///
/// Exact: each stamp is packed with its way as `stamp << 4 | way` and the smallest packed
/// value taken. Stamps stay below 2^60 (the clock grows by one per touch or fill, and 2^60
/// of those would take decades), so packing keeps their order, and among equal stamps the
/// lowest way is the smallest: the first minimum, as [`first_min`] finds it.
#[inline(always)]
fn first_min_of<const N: usize>(v: &[u64], set: usize) -> usize {
    const { assert!(N <= 1 << WAY_BITS) };
    let v: &[u64; N] = v[set * N..set * N + N].try_into().expect("N values");
    let mut min = u64::MAX;
    for (w, &s) in v.iter().enumerate() {
        debug_assert!(s < 1 << (64 - WAY_BITS));
        min = min.min(s << WAY_BITS | w as u64);
    }
    (min & ((1 << WAY_BITS) - 1)) as usize
}

/// The index of the first minimum of `v` (non-empty).
#[inline]
fn first_min(v: &[u64]) -> usize {
    let min = v.iter().copied().min().unwrap_or(0);
    v.iter().position(|&s| s == min).unwrap_or(0)
}

/// A fully-associative LRU store of `cap` keys with O(1) operations (a hash index and an
/// intrusive doubly linked list in flat arrays), plus the set of every key ever seen and the
/// set of keys discarded by cache maintenance since they were last referenced: the shadow
/// that classifies misses into compulsory, coherence, capacity and conflict.
pub(crate) struct Shadow {
    cap: usize,
    index: KeyMap<u32>,
    keys: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Nodes freed by [`discard`](Shadow::discard), to be reused before new ones.
    free: Vec<u32>,
    /// Most recently used node, or NIL.
    head: u32,
    /// Least recently used node, or NIL.
    tail: u32,
    seen: std::collections::HashSet<u64, BuildHasherDefault<KeyHasher>>,
    discarded: std::collections::HashSet<u64, BuildHasherDefault<KeyHasher>>,
}

const NIL: u32 = u32::MAX;

/// What the shadow says about a reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShadowResult {
    /// The key had been referenced before.
    pub seen: bool,
    /// Cache maintenance had discarded the key since it was last referenced.
    pub discarded: bool,
    /// A fully associative LRU cache of the same capacity held it.
    pub fa_hit: bool,
}

impl Shadow {
    /// A shadow of `cap` lines.
    pub(crate) fn new(cap: u64) -> Shadow {
        Shadow {
            cap: cap as usize,
            index: KeyMap::default(),
            keys: Vec::new(),
            prev: Vec::new(),
            next: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            seen: Default::default(),
            discarded: Default::default(),
        }
    }

    /// Cache maintenance discarded `key` from the cache: the fully associative cache loses
    /// it too, and the next reference to it is told so (`discarded`).
    pub(crate) fn discard(&mut self, key: u64) {
        if let Some(n) = self.index.remove(&key) {
            self.unlink(n);
            self.free.push(n);
        }
        self.discarded.insert(key);
    }

    fn unlink(&mut self, n: u32) {
        let (p, x) = (self.prev[n as usize], self.next[n as usize]);
        if p == NIL {
            self.head = x;
        } else {
            self.next[p as usize] = x;
        }
        if x == NIL {
            self.tail = p;
        } else {
            self.prev[x as usize] = p;
        }
    }

    fn push_front(&mut self, n: u32) {
        self.prev[n as usize] = NIL;
        self.next[n as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = n;
        }
        self.head = n;
        if self.tail == NIL {
            self.tail = n;
        }
    }

    /// References `key`; `allocate` says whether a miss brings it in (false for a write miss
    /// in a no-write-allocate cache).
    pub(crate) fn access(&mut self, key: u64, allocate: bool) -> ShadowResult {
        let seen = !self.seen.insert(key);
        let discarded = !self.discarded.is_empty() && self.discarded.remove(&key);
        if let Some(&n) = self.index.get(&key) {
            if self.head != n {
                self.unlink(n);
                self.push_front(n);
            }
            return ShadowResult {
                seen,
                discarded,
                fa_hit: true,
            };
        }
        if allocate {
            // A freed node exists only while fewer than `cap` keys are held.
            let n = if let Some(n) = self.free.pop() {
                self.keys[n as usize] = key;
                n
            } else if self.keys.len() < self.cap {
                self.keys.push(key);
                self.prev.push(NIL);
                self.next.push(NIL);
                (self.keys.len() - 1) as u32
            } else {
                let n = self.tail;
                self.unlink(n);
                self.index.remove(&self.keys[n as usize]);
                self.keys[n as usize] = key;
                n
            };
            self.index.insert(key, n);
            self.push_front(n);
        }
        ShadowResult {
            seen,
            discarded,
            fa_hit: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plru_four_ways_hand_worked() {
        // One set of 4 ways. Fill A B C D (ways 0..3), touch A, then two misses.
        let mut s = Store::new(1, 4, Replacement::TreePlru, 0);
        for (i, k) in [10u64, 11, 12, 13].into_iter().enumerate() {
            let v = s.victim(k);
            assert_eq!(v, i, "invalid ways fill in order");
            s.fill(v, k);
        }
        // After filling way 3 last: root points left (victim among 0,1), node2 was set by
        // way 1's fill to point left (way 0). So the victim is way 0.
        assert_eq!(s.victim(14), 0);
        s.touch(0); // A used: root -> right; node 2 -> way 1.
        // Right subtree: node 3 was set by way 3's fill to point at way 2.
        assert_eq!(s.victim(14), 2);
        s.fill(2, 14); // root -> left; node 3 -> way 3.
        assert_eq!(s.victim(15), 1);
    }

    #[test]
    fn big_sets_use_the_index() {
        let mut s = Store::new(1, 100, Replacement::Lru, 0);
        for k in 0..100u64 {
            let v = s.victim(k);
            s.fill(v, k);
        }
        assert_eq!(s.find(42), Some(42));
        s.touch(0);
        let v = s.victim(1000);
        assert_eq!(s.key(v), 1, "key 0 was used again; 1 is the LRU");
        s.fill(v, 1000);
        assert_eq!(s.find(1), None);
        assert_eq!(s.find(1000), Some(1));
    }

    #[test]
    fn shadow_is_fully_associative_lru() {
        let mut s = Shadow::new(2);
        assert_eq!(
            s.access(1, true),
            ShadowResult {
                seen: false,
                discarded: false,
                fa_hit: false
            }
        );
        s.access(2, true);
        assert!(s.access(1, true).fa_hit);
        s.access(3, true); // evicts 2
        let r = s.access(2, true);
        assert!(r.seen && !r.fa_hit);
        assert!(!s.access(1, true).fa_hit, "1 was evicted by 2");
    }

    #[test]
    fn invalidated_slots_are_filled_first_under_every_policy() {
        for policy in [
            Replacement::Lru,
            Replacement::Fifo,
            Replacement::Random,
            Replacement::TreePlru,
        ] {
            // One set of 4 ways, full; way 2 invalidated: the next fill goes there, and the
            // line filled counts as just used (LRU: the victim after it is way 0's).
            let mut s = Store::new(1, 4, policy, 1);
            for k in 10..14u64 {
                let v = s.victim(k);
                s.fill(v, k);
            }
            s.invalidate(2);
            assert_eq!(s.find(12), None, "{policy:?}");
            assert_eq!(s.victim(20), 2, "{policy:?}");
            s.fill(2, 20);
            assert_eq!(s.find(20), Some(2));
            if policy == Replacement::Lru || policy == Replacement::Fifo {
                assert_eq!(s.victim(21), 0, "{policy:?}");
            }
        }
        // A large (indexed) store forgets the key.
        let mut s = Store::new(1, 100, Replacement::Lru, 0);
        for k in 0..100u64 {
            let v = s.victim(k);
            s.fill(v, k);
        }
        s.invalidate(42);
        assert_eq!(s.find(42), None);
        assert_eq!(s.victim(500), 42);
    }

    #[test]
    fn shadow_discard_frees_the_line_and_says_so_once() {
        let mut s = Shadow::new(2);
        s.access(1, true);
        s.access(2, true);
        s.discard(1);
        s.access(3, true); // takes the freed node: 2 stays
        assert!(s.access(2, true).fa_hit);
        let r = s.access(1, true);
        assert!(r.seen && r.discarded && !r.fa_hit);
        assert!(!s.access(1, true).discarded, "told once");
    }
}
