//! A set-associative store of 64-bit keys with a replacement policy: the core shared by the
//! caches (keys are line numbers) and the TLBs (keys are page numbers).
//!
//! Layout: flat arrays indexed by `slot = set * ways + way` — the keys, one replacement word
//! per slot (a use or fill stamp), and the tree-PLRU bits per set. Nothing is allocated per
//! reference. Sets with more than [`SCAN_WAYS`] ways (fully associative TLBs and caches) keep a
//! hash index from key to slot so that a lookup does not scan them.
//!
//! Invariants: a key is in at most one slot; `keys[slot] == EMPTY` iff the slot is invalid;
//! for `ways > SCAN_WAYS`, `index` maps exactly the valid keys to their slots.

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

/// A set-associative store; see the module documentation.
#[derive(Clone)]
pub(crate) struct Store {
    ways: usize,
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
        Store {
            ways,
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
    #[inline]
    pub(crate) fn find(&self, key: u64) -> Option<usize> {
        if self.index.is_some() {
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
        match self.policy {
            Replacement::Lru => {
                self.clock += 1;
                self.stamps[slot] = self.clock;
            }
            Replacement::TreePlru => self.plru_touch(slot),
            Replacement::Fifo | Replacement::Random => {}
        }
    }

    /// The slot the next fill of `key`'s set goes into: an invalid way if there is one (the
    /// lowest), else the policy's victim. Draws from the generator only for `random` with a
    /// full set.
    pub(crate) fn victim(&mut self, key: u64) -> usize {
        let set = self.set_of(key);
        let base = set * self.ways;
        let ways = &self.keys[base..base + self.ways];
        if let Some(w) = ways.iter().position(|&k| k == EMPTY) {
            return base + w;
        }
        match self.policy {
            Replacement::Lru | Replacement::Fifo => {
                let st = &self.stamps[base..base + self.ways];
                let mut best = 0;
                for (w, &s) in st.iter().enumerate() {
                    if s < st[best] {
                        best = w;
                    }
                }
                base + best
            }
            Replacement::Random => base + self.rng.usize(..self.ways),
            Replacement::TreePlru => base + self.plru_victim(set),
        }
    }

    /// Puts `key` into `slot` (from [`victim`](Store::victim)), replacing what was there;
    /// the new key counts as just used.
    pub(crate) fn fill(&mut self, slot: usize, key: u64) {
        let old = self.keys[slot];
        self.keys[slot] = key;
        if let Some(index) = &mut self.index {
            if old != EMPTY {
                index.remove(&old);
            }
            index.insert(key, slot as u32);
            let h = self.hint_of(key);
            self.hint[h] = slot as u32;
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

/// A fully-associative LRU store of `cap` keys with O(1) operations (a hash index and an
/// intrusive doubly linked list in flat arrays), plus the set of every key ever seen: the
/// shadow that classifies misses into compulsory, capacity and conflict.
pub(crate) struct Shadow {
    cap: usize,
    index: KeyMap<u32>,
    keys: Vec<u64>,
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Most recently used node, or NIL.
    head: u32,
    /// Least recently used node, or NIL.
    tail: u32,
    seen: std::collections::HashSet<u64, BuildHasherDefault<KeyHasher>>,
}

const NIL: u32 = u32::MAX;

/// What the shadow says about a reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShadowResult {
    /// The key had been referenced before.
    pub seen: bool,
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
            head: NIL,
            tail: NIL,
            seen: Default::default(),
        }
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
        if let Some(&n) = self.index.get(&key) {
            if self.head != n {
                self.unlink(n);
                self.push_front(n);
            }
            return ShadowResult { seen, fa_hit: true };
        }
        if allocate {
            let n = if self.keys.len() < self.cap {
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
}
