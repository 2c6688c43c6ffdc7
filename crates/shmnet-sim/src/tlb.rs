//! Translation lookaside buffers: one [`Tlb`] per page size and side, with one or more
//! levels searched in order.
//!
//! A translation missing from a level is put into that level when it is found below (or
//! walked), so every level that missed is filled, as in the caches. The most recently used
//! page is remembered: a reference to the same page again is a first-level hit and changes
//! no replacement state (for every policy a repeated hit on the most recent entry is a no-op),
//! so it is counted without a search.

use serde::Serialize;

use crate::config::{TlbConfig, check_sets};
use crate::store::{EMPTY, Recent, Store};

/// Counts for one TLB.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TlbStats {
    /// Translations asked for (one per cache line a reference touches).
    pub lookups: u64,
    /// Lookups satisfied by each level, first level first.
    pub hits: Vec<u64>,
    /// Lookups no level could satisfy (page walks).
    pub misses: u64,
}

/// A TLB; see the module documentation.
pub(crate) struct Tlb {
    pub(crate) name: String,
    pub(crate) page_shift: u32,
    levels: Vec<Store>,
    /// Ticks added when the translation is found at each level.
    hit_ticks: Vec<f64>,
    /// `hit_ticks[0]`, kept apart for the inline path.
    hit0_ticks: f64,
    miss_ticks: f64,
    last_page: u64,
    /// The first-level slot of `last_page`, and the page before it and its slot; see
    /// [`Tlb::remember`].
    last_slot: usize,
    prev_page: u64,
    prev_slot: usize,
    pub(crate) stats: TlbStats,
}

impl Tlb {
    pub(crate) fn new(c: &TlbConfig) -> Tlb {
        let levels = c
            .levels
            .iter()
            .map(|l| {
                let sets = check_sets(&c.name, l.entries, l.ways, l.replacement)
                    .expect("validated before");
                Store::new(sets, l.entries / sets, l.replacement, 0x71b)
            })
            .collect::<Vec<_>>();
        Tlb {
            name: c.name.clone(),
            page_shift: c.page.0.trailing_zeros(),
            hit_ticks: c.levels.iter().map(|l| l.hit_ticks).collect(),
            hit0_ticks: c.levels.first().map_or(0.0, |l| l.hit_ticks),
            miss_ticks: c.miss_ticks,
            last_page: EMPTY,
            last_slot: 0,
            prev_page: EMPTY,
            prev_slot: 0,
            stats: TlbStats {
                hits: vec![0; levels.len()],
                ..TlbStats::default()
            },
            levels,
        }
    }

    /// Translates the page of `addr`; returns the ticks it adds to the reference.
    ///
    /// Inline, the two most recent pages; the rest in [`lookup_other`](Tlb::lookup_other).
    #[inline(always)]
    pub(crate) fn lookup(&mut self, addr: u64) -> f64 {
        let page = addr >> self.page_shift;
        self.stats.lookups += 1;
        if page == self.last_page {
            self.stats.hits[0] += 1;
            return self.hit0_ticks;
        }
        if page == self.prev_page {
            // The page before it: a first-level hit (touch, then it becomes the last page).
            let slot = self.prev_slot;
            self.levels[0].touch(slot);
            // `remember(page, slot)`, which here is a swap (`prev_page != EMPTY` implies
            // `last_page != EMPTY`, in another slot).
            debug_assert!(self.last_page != EMPTY && self.last_slot != slot);
            std::mem::swap(&mut self.last_page, &mut self.prev_page);
            std::mem::swap(&mut self.last_slot, &mut self.prev_slot);
            self.stats.hits[0] += 1;
            return self.hit0_ticks;
        }
        self.lookup_other(page)
    }

    /// The two most recent first-level pages.
    pub(crate) fn recent(&self) -> Recent {
        Recent {
            last: self.last_page,
            last_slot: self.last_slot,
            prev: self.prev_page,
            prev_slot: self.prev_slot,
        }
    }

    /// Takes back the two most recent pages from a batch that tracked them in a [`Recent`]
    /// (lookups of them counted by [`count_recent_hits`](Tlb::count_recent_hits)), and, if
    /// hits have `reordered` them, makes the first level's replacement state exact
    /// ([`Store::settle`]; as for the caches' `set_recent`).
    pub(crate) fn set_recent(&mut self, r: Recent, reordered: bool) {
        self.last_page = r.last;
        self.last_slot = r.last_slot;
        self.prev_page = r.prev;
        self.prev_slot = r.prev_slot;
        if reordered {
            self.levels[0].settle(&r);
        }
    }

    /// Whether lookups may be tracked in a [`Recent`] (see [`Store::lazy_touch_ok`]).
    pub(crate) fn recent_ok(&self) -> bool {
        self.levels[0].lazy_touch_ok()
    }

    /// The ticks of a first-level hit.
    pub(crate) fn hit0_ticks(&self) -> f64 {
        self.hit0_ticks
    }

    /// Counts `n` lookups that hit one of the two most recent pages.
    pub(crate) fn count_recent_hits(&mut self, n: u64) {
        self.stats.hits[0] += n;
    }

    /// Counts `n` lookups (every lookup is counted once here or by [`lookup`](Tlb::lookup)).
    pub(crate) fn count_lookups(&mut self, n: u64) {
        self.stats.lookups += n;
    }

    /// [`lookup`](Tlb::lookup) of a page that is neither of the two most recent, less the
    /// count of the lookup.
    #[inline(never)]
    pub(crate) fn lookup_other(&mut self, page: u64) -> f64 {
        let found = self.levels[0].find(page);
        match found {
            Some(slot) => {
                self.levels[0].touch(slot);
                self.remember(page, slot);
                self.stats.hits[0] += 1;
                self.hit_ticks[0]
            }
            None => {
                let t = self.lookup_slow(page);
                let slot = self.levels[0].find(page).expect("just filled");
                if slot == self.prev_slot {
                    self.prev_page = EMPTY;
                }
                self.remember(page, slot);
                t
            }
        }
    }

    /// Keeps `last_*` and `prev_*` (the two most recent first-level entries) exact:
    /// `last_page != EMPTY` implies `levels[0].key(last_slot) == last_page`, and the same for
    /// `prev_*`, with `prev_page != last_page`.
    #[inline]
    fn remember(&mut self, page: u64, slot: usize) {
        if self.last_page != EMPTY && self.last_slot != slot && self.last_page != page {
            self.prev_page = self.last_page;
            self.prev_slot = self.last_slot;
        } else if self.last_page != page {
            self.prev_page = EMPTY;
        }
        self.last_page = page;
        self.last_slot = slot;
    }

    #[cold]
    fn lookup_slow(&mut self, page: u64) -> f64 {
        let mut found = None;
        for (i, l) in self.levels.iter_mut().enumerate() {
            if let Some(slot) = l.find(page) {
                l.touch(slot);
                found = Some(i);
                break;
            }
        }
        let upto = found.unwrap_or(self.levels.len());
        for l in &mut self.levels[..upto] {
            let v = l.victim(page);
            l.fill(v, page);
        }
        match found {
            Some(i) => {
                self.stats.hits[i] += 1;
                self.hit_ticks[i]
            }
            None => {
                self.stats.misses += 1;
                self.miss_ticks
            }
        }
    }
}
