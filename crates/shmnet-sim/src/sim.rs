//! The simulator: a [`Machine`]'s caches and TLBs, driven one reference at a time.
//!
//! # Semantics
//!
//! * A reference is split into the lines it touches at its first-level cache's line size;
//!   each line access goes down its path (instruction or data) until a cache holds the line.
//! * **Non-inclusive fills**: the line is put into every level that missed (unless the level
//!   is write-through and the access is a write: no-write-allocate). Nothing is invalidated
//!   in other levels when a line is evicted.
//! * **Write-back**: a write hit marks the line dirty; a write miss fetches the line (as a
//!   read below) and marks it dirty. A dirty victim is written into the next level (a
//!   write-back access there, which allocates without fetching when the line sizes are equal
//!   and with a fetch otherwise; it may evict a dirty line in turn), or to memory from the
//!   last level.
//! * **Write-through, no-write-allocate**: a write hit updates the line (never dirty) and is
//!   passed down; a write miss is passed down without filling.
//! * The order on a miss: fetch from below, then choose the victim, fill, and write the
//!   victim back.
//! * Counted per cache: demand reads, writes and fetches (one per line access), their hits
//!   and misses, with `ccc` the misses by kind (Hill's 3C model, as Dinero IV's `-ccc`:
//!   compulsory: first touch of the line ever; coherence: see maintenance below; capacity:
//!   not compulsory or coherence, and also missed by
//!   a fully associative LRU cache of the same number of lines seeing every access the cache
//!   sees, demand or write-back, with the cache's allocation rule — a write miss in a
//!   no-write-allocate cache brings nothing into it; conflict: the rest), fills, dirty lines
//!   written back out, and write-backs received from above (not demand accesses; counted
//!   apart).
//! * **Uncacheable ranges** ([`Machine::uncacheable`], [`Simulator::set_uncacheable`]): a
//!   line access to an address in one looks in no cache, allocates nothing, changes no
//!   cache's counts or state, and is counted in [`MemoryStats::uncached_reads`] (reads and
//!   instruction fetches) or [`uncached_writes`](MemoryStats::uncached_writes); it costs
//!   `memory.uncached_read_ticks` or `uncached_write_ticks` (whole latency) plus its
//!   translation. Ranges are whole lines of the largest line size, and a range added while
//!   simulating is first flushed from every cache, so no cache ever holds an uncacheable
//!   line.
//! * **Cache maintenance** ([`Op::Clean`], [`Op::CleanInvalidate`], [`Op::Invalidate`],
//!   [`Op::CleanAll`]) acts on the caches of the data path, and is neither a demand access
//!   nor a use (no replacement state changes, nothing is allocated, not counted in
//!   `line_accesses`). A by-address operation is split into the first-level lines its bytes
//!   touch; each is translated by the data TLB like a data reference and costs
//!   `maintenance.line_ticks`; then every level, first to last, acts on its line holding the
//!   address: a clean (also a clean-and-invalidate) finds it dirty, marks it clean and writes
//!   it down — into the nearest lower level that holds the line, which becomes dirty and is
//!   cleaned in turn when its level is reached (free, like any write-back between levels),
//!   or else to memory, for `maintenance.writeback_ticks`; an invalidate (also the second
//!   half of a clean-and-invalidate) discards the line (a dirty one's data is lost, counted
//!   in [`MaintenanceStats::dirty_discarded`]); the slot becomes invalid and is filled first
//!   next. A clean-all examines every line of every data-path cache, first level first, for
//!   `maintenance.walk_ticks` each, and cleans the dirty ones the same way. Counted: per
//!   cache [`CacheStats::maint_writebacks`] and [`CacheStats::invalidations`], in memory
//!   [`MemoryStats::maint_writebacks`], and the operations in [`MaintenanceStats`]. With
//!   `ccc`, a miss on a line discarded by maintenance since it was last referenced is a
//!   *coherence* miss (the fully associative shadow discards it too).
//! * Each cache remembers the last line it touched; a line access to that same line again is
//!   a hit that changes no replacement state under any policy, so it is counted without a
//!   search. This is exact, not an approximation, and it is what makes sequential traces fast.
//!   With `ccc` it also skips the shadow, so the line remembered must be the shadow's most
//!   recent too: a write-through write hit that the shadow misses (and so does not take in)
//!   leaves no line remembered.
//!
//! # Speed
//!
//! [`Simulator::run`] and [`Simulator::access_refs`] take references in batches; for the
//! common configurations they use the fast path of the `lanes` module (binary records
//! decoded as they are simulated, first-level hits on the two most recent lines and pages
//! handled in locals), with results identical to [`Simulator::access_ref`] one at a time.
//! The miss path is compiled once per access kind (`kind`), and stores search sets of up
//! to 16 ways as fixed-size arrays. A first-level miss on a path of write-back caches of
//! one line size (and without miss classification) takes a loop instead of the recursion
//! (`Simulator::plain_miss`), with the same steps in the same order.

use serde::Serialize;

use crate::config::{ConfigError, Machine, Side, UncacheableRange, WritePolicy, check_sets};
use crate::store::{EMPTY, Recent, Shadow, Store};
use crate::timing::PathCosts;
use crate::tlb::{Tlb, TlbStats};
use crate::trace::binary::{RECORD_BYTES, decode_valid};
use crate::trace::{Op, Party, Ref, TraceError, TraceSource};

mod lanes;

/// The most cache levels a machine may have.
pub const MAX_LEVELS: usize = 8;

/// Counts for one cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Demand data-read line accesses.
    pub reads: u64,
    /// Demand write line accesses.
    pub writes: u64,
    /// Demand instruction-fetch line accesses (and fills of instruction lines from above).
    pub ifetches: u64,
    /// Demand accesses that found the line. `hits + misses == reads + writes + ifetches`.
    pub hits: u64,
    /// Demand accesses that did not.
    pub misses: u64,
    /// Misses to a line never referenced before (only with miss classification on).
    pub compulsory: u64,
    /// Misses to a line cache maintenance discarded since it was last referenced (only with
    /// miss classification on).
    pub coherence: u64,
    /// Misses a fully associative LRU cache of the same size also had, less compulsory and
    /// coherence ones.
    pub capacity: u64,
    /// The remaining misses (`misses - compulsory - coherence - capacity` when
    /// classification is on).
    pub conflict: u64,
    /// Lines brought in.
    pub fills: u64,
    /// Dirty lines evicted and written to the next level or memory.
    pub writebacks: u64,
    /// Dirty lines received from the level above.
    pub writebacks_in: u64,
    /// Of those, how many were not present here.
    pub writebacks_in_misses: u64,
    /// Dirty lines written out (to the level below or to memory) by cache maintenance;
    /// not in `writebacks`.
    pub maint_writebacks: u64,
    /// Valid lines discarded by cache maintenance (invalidate, clean and invalidate, a range
    /// made uncacheable).
    pub invalidations: u64,
}

impl CacheStats {
    /// Demand line accesses.
    pub fn accesses(&self) -> u64 {
        self.reads + self.writes + self.ifetches
    }

    /// `misses / accesses`, 0 when there were none.
    pub fn miss_rate(&self) -> f64 {
        let a = self.accesses();
        if a == 0 {
            0.0
        } else {
            self.misses as f64 / a as f64
        }
    }
}

/// Counts for memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Lines read from memory into the last level.
    pub fills: u64,
    /// Dirty lines written back to memory (evicted victims).
    pub writebacks: u64,
    /// Writes passed through to memory by write-through caches.
    pub writes: u64,
    /// Line accesses (pieces of up to one first-level line) reading or fetching from an
    /// uncacheable range.
    pub uncached_reads: u64,
    /// Line accesses writing to an uncacheable range.
    pub uncached_writes: u64,
    /// Dirty lines written back to memory by cache maintenance (not in `writebacks`).
    pub maint_writebacks: u64,
}

/// Counts and ticks of cache-maintenance operations.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MaintenanceStats {
    /// Lines cleaned by [`Op::Clean`] (first-level lines covered, cached or not).
    pub clean_lines: u64,
    /// Lines covered by [`Op::CleanInvalidate`].
    pub clean_invalidate_lines: u64,
    /// Lines covered by [`Op::Invalidate`].
    pub invalidate_lines: u64,
    /// [`Op::CleanAll`] operations.
    pub clean_alls: u64,
    /// Cache lines examined by clean-alls.
    pub lines_examined: u64,
    /// Dirty lines an invalidate discarded without writing them back (their data lost).
    pub dirty_discarded: u64,
    /// Lines flushed from the caches when a range was made uncacheable while simulating
    /// ([`Simulator::set_uncacheable`]; not charged to any reference).
    pub uncacheable_flushed: u64,
    /// Ticks charged for maintenance (line operations, walks and write-backs; translations
    /// not included).
    pub ticks: f64,
}

/// One cache's report.
#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    /// The cache's name.
    pub name: String,
    /// Its level.
    pub level: u32,
    /// What it holds.
    pub side: Side,
    /// Its counts.
    #[serde(flatten)]
    pub stats: CacheStats,
    /// Demand miss rate.
    pub miss_rate: f64,
}

/// One TLB's report.
#[derive(Debug, Clone, Serialize)]
pub struct TlbReport {
    /// The TLB's name.
    pub name: String,
    /// Its page size.
    pub page_bytes: u64,
    /// Its counts.
    #[serde(flatten)]
    pub stats: TlbStats,
}

/// References and ticks of one party.
#[derive(Debug, Clone, Serialize)]
pub struct PartyReport {
    /// The party.
    pub party: Party,
    /// References it made.
    pub refs: u64,
    /// Ticks they cost.
    pub ticks: f64,
}

/// Everything a run counted; serialisable.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The machine's name.
    pub machine: String,
    /// What a tick is.
    pub tick_unit: String,
    /// References simulated.
    pub refs: u64,
    /// Cache-line accesses they made (a reference spanning lines makes several).
    pub line_accesses: u64,
    /// Total ticks.
    pub ticks: f64,
    /// `ticks / refs`.
    pub ticks_per_ref: f64,
    /// Whether misses were classified (compulsory / capacity / conflict).
    pub ccc: bool,
    /// Per cache, in the machine's order.
    pub caches: Vec<CacheReport>,
    /// Per TLB.
    pub tlbs: Vec<TlbReport>,
    /// Memory.
    pub memory: MemoryStats,
    /// Cache maintenance.
    pub maintenance: MaintenanceStats,
    /// Per party that made references.
    pub parties: Vec<PartyReport>,
    /// Remarks from building the machine.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Options of a simulation beyond the machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Classify misses into compulsory, capacity and conflict (slower: a shadow fully
    /// associative cache per cache and a set of every line seen).
    pub ccc: bool,
    /// Every instruction fetch hits in the first level (seed 001's "perfect I-cache").
    pub perfect_icache: bool,
    /// Every data reference hits in the first level ("perfect D-cache").
    pub perfect_dcache: bool,
}

/// The kinds of an access at one level, as const-generic parameters of the miss path, so
/// that each kind's code is compiled apart with its tests on the kind folded away.
mod kind {
    /// A demand data read.
    pub(super) const READ: u8 = 0;
    /// A demand write.
    pub(super) const WRITE: u8 = 1;
    /// A demand instruction fetch.
    pub(super) const IFETCH: u8 = 2;
    /// A dirty line from the level above, smaller than this level's line.
    pub(super) const WB_PART: u8 = 3;
    /// A dirty line from the level above that covers this level's line.
    pub(super) const WB_WHOLE: u8 = 4;

    /// Whether kind `k` writes.
    pub(super) const fn is_write(k: u8) -> bool {
        matches!(k, WRITE | WB_PART | WB_WHOLE)
    }

    /// Whether kind `k` is a demand access (not a write-back).
    pub(super) const fn is_demand(k: u8) -> bool {
        matches!(k, READ | WRITE | IFETCH)
    }
}

struct Cache {
    name: String,
    level: u32,
    side: Side,
    line_shift: u32,
    write_back: bool,
    store: Store,
    dirty: Vec<bool>,
    /// The line last touched and its slot; `EMPTY` if that line is not resident.
    /// Invariants: `last_key != EMPTY` implies `store.key(last_slot) == last_key`; with a
    /// shadow, it also implies that `last_key` is the shadow's most recently used line (so
    /// a hit on it, which skips the shadow, would change nothing there either). A
    /// write-through write hit that the shadow misses does not allocate there, so it
    /// leaves `last_key` `EMPTY` (see [`Simulator::access_found`]).
    last_key: u64,
    last_slot: usize,
    /// The line touched before it. Invariant: `prev_key != EMPTY` implies
    /// `store.key(prev_slot) == prev_key` and `prev_key != last_key`.
    prev_key: u64,
    prev_slot: usize,
    shadow: Option<Shadow>,
    stats: CacheStats,
}

impl Cache {
    /// The two most recent lines.
    fn recent(&self) -> Recent {
        Recent {
            last: self.last_key,
            last_slot: self.last_slot,
            prev: self.prev_key,
            prev_slot: self.prev_slot,
        }
    }

    /// Takes back the two most recent lines from a batch that tracked them in a [`Recent`],
    /// and, if hits have `reordered` them (without touching the store), makes the
    /// replacement state exact ([`Store::settle`]). Without reordering, the state is what it
    /// was when they were copied out (hits on the last line change nothing).
    fn set_recent(&mut self, r: Recent, reordered: bool) {
        self.last_key = r.last;
        self.last_slot = r.last_slot;
        self.prev_key = r.prev;
        self.prev_slot = r.prev_slot;
        if reordered {
            self.store.settle(&r);
        }
    }

    /// The slot holding line `key`, if any: the remembered lines first, then a search.
    #[inline]
    fn lookup(&self, key: u64) -> Option<usize> {
        if key == self.last_key {
            Some(self.last_slot)
        } else if key == self.prev_key {
            Some(self.prev_slot)
        } else {
            self.store.find(key)
        }
    }

    /// Counts a demand access of `op` by its kind (maintenance ops are not demand accesses
    /// and never come here).
    #[inline(always)]
    fn count(&mut self, op: Op) {
        match op {
            Op::Write => self.stats.writes += 1,
            Op::Ifetch => self.stats.ifetches += 1,
            _ => self.stats.reads += 1,
        }
    }

    /// Discards the line `key` held in `slot` (cache maintenance): the slot becomes invalid
    /// and clean, the recent lines are forgotten if it was one of them (their invariants
    /// name resident lines), and the shadow discards it too.
    fn invalidate(&mut self, slot: usize, key: u64) {
        self.store.invalidate(slot);
        self.dirty[slot] = false;
        self.stats.invalidations += 1;
        if key == self.last_key || key == self.prev_key {
            self.last_key = EMPTY;
            self.prev_key = EMPTY;
        }
        if let Some(s) = &mut self.shadow {
            s.discard(key);
        }
    }

    /// A demand hit on `last_key` (a write only if write-back): counted, the line marked
    /// dirty by a write; no replacement state changes (it is already the most recent use
    /// under every policy, and the shadow's most recent line too, by `last_key`'s
    /// invariant).
    #[inline(always)]
    fn hit_last(&mut self, op: Op) {
        self.stats.hits += 1;
        self.count(op);
        if op == Op::Write {
            self.dirty[self.last_slot] = true;
        }
    }

    /// A demand hit on `prev_key` (a write only if write-back; no shadow): exactly the hit
    /// branch of `access_found` — touch, remember, count, mark dirty on a write.
    #[inline(always)]
    fn hit_prev(&mut self, op: Op) {
        let slot = self.prev_slot;
        self.store.touch(slot);
        // `remember(prev_key, prev_slot)`, which here is a swap: `prev_key != EMPTY` implies
        // `last_key != EMPTY` (they are only emptied together) and `prev_slot != last_slot`.
        debug_assert!(self.last_key != EMPTY && self.last_slot != slot);
        std::mem::swap(&mut self.last_key, &mut self.prev_key);
        std::mem::swap(&mut self.last_slot, &mut self.prev_slot);
        self.stats.hits += 1;
        self.count(op);
        if op == Op::Write {
            self.dirty[slot] = true;
        }
    }

    /// Records that `key` is now in `slot` and was just touched (a hit or a fill), keeping
    /// the invariants of `last_*` and `prev_*`.
    #[inline]
    fn remember(&mut self, key: u64, slot: usize) {
        if key == self.last_key {
            return;
        }
        if self.last_key != EMPTY && self.last_slot != slot {
            self.prev_key = self.last_key;
            self.prev_slot = self.last_slot;
        } else {
            self.prev_key = EMPTY;
        }
        self.last_key = key;
        self.last_slot = slot;
    }

    /// Fills line `key`, which missed and has been fetched, into its victim's slot (`dirty`
    /// or clean) — the one fill of both miss paths, the general and the plain; returns the
    /// victim's key if it was dirty (counted in `writebacks`; the caller writes it down).
    #[inline(always)]
    fn fill_missed(&mut self, key: u64, dirty: bool) -> Option<u64> {
        let slot = self.store.victim(key);
        let old = self.store.key(slot);
        let victim_dirty = old != EMPTY && self.dirty[slot];
        self.store.fill(slot, key);
        self.dirty[slot] = dirty;
        self.stats.fills += 1;
        if self.prev_slot == slot {
            self.prev_key = EMPTY;
        }
        self.remember(key, slot);
        if victim_dirty {
            self.stats.writebacks += 1;
            Some(old)
        } else {
            None
        }
    }
}

/// A path through the hierarchy: cache indices, first level first.
#[derive(Clone, Copy)]
struct Path {
    idx: [u8; MAX_LEVELS],
    len: usize,
    /// Every cache on the path is write-back, has the first level's line size and no
    /// shadow (see [`Simulator::plain_miss`]).
    plain: bool,
}

/// What the per-line fast path needs of one side (data or instruction), precomputed so
/// that a first-level hit reads no `Vec` of costs, paths or TLB choices.
///
/// Invariant: every field is what the general code would compute for that side:
/// `cache == path.idx[0]`, `shift` its line shift, `l1_ticks == costs.served[0]`, `tlb` the
/// base-page TLB of the side (used only when `huge` is empty; otherwise `translate` decides).
#[derive(Clone, Copy)]
struct Front {
    cache: usize,
    shift: u32,
    perfect: bool,
    l1_ticks: f64,
    /// The TLB's index, or [`NO_TLB`].
    tlb: usize,
}

/// `Front::tlb` when the side has no base-page TLB.
const NO_TLB: usize = usize::MAX;

/// A TLB choice for an address range with a non-base page size.
struct HugeRange {
    start: u64,
    end: u64,
    data: Option<usize>,
    instr: Option<usize>,
}

/// One party's run of consecutive references in a batch, its totals kept in locals and
/// stored into the simulator's per-party arrays when another party's reference comes and at
/// the end. Exact: each party's totals get the same additions in the same order as
/// [`Simulator::access_ref`] gives them.
pub(crate) struct PartyRun {
    party: usize,
    refs: u64,
    ticks: f64,
}

impl PartyRun {
    /// A run of `party`, continuing from its total ticks so far.
    #[inline(always)]
    pub(crate) fn new(party: usize, totals: &[f64; 5]) -> PartyRun {
        PartyRun {
            party,
            refs: 0,
            ticks: totals[party],
        }
    }

    /// The next reference is `party`'s: if the run was another party's, store it and start
    /// one of `party`.
    #[inline(always)]
    pub(crate) fn enter(&mut self, party: usize, refs: &mut [u64; 5], ticks: &mut [f64; 5]) {
        if party != self.party {
            self.store(refs, ticks);
            *self = PartyRun::new(party, ticks);
        }
    }

    /// Counts a reference of the run that cost `t`.
    #[inline(always)]
    pub(crate) fn add(&mut self, t: f64) {
        self.ticks += t;
        self.refs += 1;
    }

    /// Stores the run's totals.
    #[inline(always)]
    pub(crate) fn store(&self, refs: &mut [u64; 5], ticks: &mut [f64; 5]) {
        refs[self.party] += self.refs;
        ticks[self.party] = self.ticks;
    }
}

/// The simulator. Build with [`Simulator::new`]; feed with [`access`](Simulator::access),
/// [`access_ref`](Simulator::access_ref) or [`run`](Simulator::run); read with
/// [`report`](Simulator::report).
pub struct Simulator {
    machine: Machine,
    options: Options,
    caches: Vec<Cache>,
    dpath: Path,
    ipath: Path,
    /// The data side's [`Front`], then the instruction side's (index `ifetch as usize`).
    fronts: [Front; 2],
    dcost: PathCosts,
    icost: PathCosts,
    tlbs: Vec<Tlb>,
    dtlb: Option<usize>,
    itlb: Option<usize>,
    huge: Vec<HugeRange>,
    mem: MemoryStats,
    /// Set when a dirty line reaches memory during the current line access.
    dirty_to_mem: bool,
    refs: u64,
    line_accesses: u64,
    ticks: f64,
    party_refs: [u64; 5],
    party_ticks: [f64; 5],
    /// [`access_refs`](Simulator::access_refs) may use the lanes of `lanes.rs`.
    lanes: bool,
    /// The uncacheable ranges as sorted, disjoint, non-adjacent `(start, end)` pairs.
    uncached: Vec<(u64, u64)>,
    /// Ticks of an uncacheable read (or fetch) and write line access.
    uncached_ticks: [f64; 2],
    /// Maintenance costs: per line operation, per line walked, per write-back to memory.
    maint_line_ticks: f64,
    maint_walk_ticks: f64,
    maint_writeback_ticks: f64,
    maint: MaintenanceStats,
}

/// `ranges` as sorted, disjoint, non-adjacent `(start, end)` pairs.
fn merged(ranges: &[UncacheableRange]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges.iter().map(|r| (r.start, r.end())).collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn path_of(m: &Machine, ifetch: bool) -> Path {
    let v = m.path(ifetch);
    let mut idx = [0u8; MAX_LEVELS];
    for (d, &i) in v.iter().enumerate() {
        idx[d] = i as u8;
    }
    Path {
        idx,
        len: v.len(),
        plain: false,
    }
}

/// Whether `path` is plain (its field's invariant) among `caches`.
fn is_plain(caches: &[Cache], path: Path) -> bool {
    let first = caches[usize::from(path.idx[0])].line_shift;
    path.idx[..path.len].iter().all(|&i| {
        let c = &caches[usize::from(i)];
        c.write_back && c.line_shift == first && c.shadow.is_none()
    })
}

fn costs_of(m: &Machine, p: Path) -> PathCosts {
    let mut served: Vec<f64> = (0..p.len)
        .map(|d| m.caches[usize::from(p.idx[d])].hit_ticks)
        .collect();
    served.push(m.memory.ticks);
    PathCosts {
        served,
        dirty_extra: (m.memory.dirty_ticks - m.memory.ticks).max(0.0),
    }
}

fn tlb_for(m: &Machine, page: u64, ifetch: bool) -> Option<usize> {
    m.tlbs
        .iter()
        .position(|t| t.page.0 == page && t.side.serves(ifetch))
}

impl Simulator {
    /// A simulator of `machine` with default [`Options`], all caches and TLBs empty.
    pub fn new(machine: &Machine) -> Result<Simulator, ConfigError> {
        Simulator::with_options(machine, Options::default())
    }

    /// A simulator of `machine` with `options`.
    pub fn with_options(machine: &Machine, options: Options) -> Result<Simulator, ConfigError> {
        machine.validate()?;
        if machine.caches.len() > usize::from(u8::MAX) {
            return Err(ConfigError::Hierarchy("more than 255 caches".into()));
        }
        let caches = machine
            .caches
            .iter()
            .map(|c| {
                let sets = check_sets(&c.name, c.lines(), c.ways, c.replacement)?;
                let ways = c.lines() / sets;
                Ok(Cache {
                    name: c.name.clone(),
                    level: c.level,
                    side: c.side,
                    line_shift: c.line.0.trailing_zeros(),
                    write_back: c.write == WritePolicy::WriteBack,
                    store: Store::new(sets, ways, c.replacement, c.seed),
                    dirty: vec![false; c.lines() as usize],
                    last_key: EMPTY,
                    last_slot: 0,
                    prev_key: EMPTY,
                    prev_slot: 0,
                    shadow: options.ccc.then(|| Shadow::new(c.lines())),
                    stats: CacheStats::default(),
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let mut dpath = path_of(machine, false);
        let mut ipath = path_of(machine, true);
        dpath.plain = is_plain(&caches, dpath);
        ipath.plain = is_plain(&caches, ipath);
        let base = machine.base_page.0;
        let huge = machine
            .huge_pages
            .iter()
            .map(|r| HugeRange {
                start: r.start,
                end: r.end,
                data: tlb_for(machine, r.page.0, false),
                instr: tlb_for(machine, r.page.0, true),
            })
            .collect();
        let front = |path: Path, costs: &PathCosts, tlb: Option<usize>, perfect: bool| Front {
            cache: usize::from(path.idx[0]),
            shift: caches[usize::from(path.idx[0])].line_shift,
            l1_ticks: costs.served[0],
            tlb: tlb.unwrap_or(NO_TLB),
            perfect,
        };
        let (dcost, icost) = (costs_of(machine, dpath), costs_of(machine, ipath));
        let (dtlb, itlb) = (tlb_for(machine, base, false), tlb_for(machine, base, true));
        let dfront = front(dpath, &dcost, dtlb, options.perfect_dcache);
        let ifront = front(ipath, &icost, itlb, options.perfect_icache);
        let mut sim = Simulator {
            options,
            caches,
            dcost,
            icost,
            dpath,
            ipath,
            fronts: [dfront, ifront],
            tlbs: machine.tlbs.iter().map(Tlb::new).collect(),
            dtlb,
            itlb,
            huge,
            mem: MemoryStats::default(),
            dirty_to_mem: false,
            refs: 0,
            line_accesses: 0,
            ticks: 0.0,
            party_refs: [0; 5],
            party_ticks: [0.0; 5],
            machine: machine.clone(),
            lanes: false,
            uncached: merged(&machine.uncacheable),
            uncached_ticks: [
                machine.memory.uncached_read(),
                machine.memory.uncached_write(),
            ],
            maint_line_ticks: machine.maintenance.line_ticks,
            maint_walk_ticks: machine.maintenance.walk_ticks,
            maint_writeback_ticks: machine.maintenance.writeback(&machine.memory),
            maint: MaintenanceStats::default(),
        };
        sim.lanes = sim.lanes_ok();
        Ok(sim)
    }

    /// The machine simulated.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Simulates one reference of `size` bytes (0 counts as 1) at `addr`; returns its ticks.
    #[inline]
    pub fn access(&mut self, op: Op, addr: u64, size: u32) -> f64 {
        self.refs += 1;
        let t = self.ref_ticks(op, addr, size);
        self.ticks += t;
        t
    }

    /// [`access`](Simulator::access) for a trace record; also counts it for its party.
    #[inline]
    pub fn access_ref(&mut self, r: &Ref) -> f64 {
        let t = self.access(r.op, r.addr, r.size);
        self.party_refs[r.party as usize] += 1;
        self.party_ticks[r.party as usize] += t;
        t
    }

    /// Simulates `refs` in order: exactly what [`access_ref`](Simulator::access_ref) on each
    /// would do (every count identical, and the ticks summed in the same order, so the
    /// floating-point totals are bit for bit the same), but faster.
    pub fn access_refs(&mut self, refs: &[Ref]) {
        self.refs += refs.len() as u64;
        if self.lanes {
            return self.access_lanes(refs.iter().copied());
        }
        // The running totals live in registers for the batch. Exact: each accumulator gets
        // the same additions in the same order as with `access_ref`; a party's total is
        // loaded when a run of its references starts and stored when the run ends.
        let mut ticks = self.ticks;
        let first = refs.first().map_or(0, |r| r.party as usize);
        let mut run = PartyRun::new(first, &self.party_ticks);
        for r in refs {
            run.enter(
                r.party as usize,
                &mut self.party_refs,
                &mut self.party_ticks,
            );
            let t = self.ref_ticks(r.op, r.addr, r.size);
            ticks += t;
            run.add(t);
        }
        run.store(&mut self.party_refs, &mut self.party_ticks);
        self.ticks = ticks;
    }

    /// Simulates every reference of `source`, calling `progress` with the bytes read after
    /// each batch.
    pub fn run(
        &mut self,
        source: &mut dyn TraceSource,
        mut progress: impl FnMut(u64),
    ) -> Result<(), TraceError> {
        if self.lanes {
            // Binary records decoded as they are simulated (no `Vec<Ref>` in between), in
            // slices small enough to stay in the first-level data cache from their check to
            // their simulation; progress is reported about every `BATCH` references.
            let mut since_progress = 0;
            while let Some(records) = source.next_records(RECORDS) {
                let records = records?;
                if records.is_empty() {
                    progress(source.bytes_read());
                    return Ok(());
                }
                let n = self.access_records(records);
                since_progress += n;
                if since_progress >= BATCH {
                    since_progress = 0;
                    progress(source.bytes_read());
                }
            }
        }
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            source.next_batch(&mut batch, BATCH)?;
            if batch.is_empty() {
                return Ok(());
            }
            self.access_refs(&batch);
            progress(source.bytes_read());
        }
    }

    /// Simulates binary `records` (whole and checked valid) through the lanes; returns how
    /// many there were. Never inlined, so that the hot loop is compiled the same whatever
    /// calls [`run`](Simulator::run).
    #[inline(never)]
    fn access_records(&mut self, records: &[u8]) -> usize {
        let n = records.len() / RECORD_BYTES;
        self.refs += n as u64;
        self.access_lanes(records.chunks_exact(RECORD_BYTES).map(decode_valid));
        n
    }

    /// The ticks of one reference (counted in `refs` and `ticks` by the caller).
    #[inline(always)]
    fn ref_ticks(&mut self, op: Op, addr: u64, size: u32) -> f64 {
        if op.is_maintenance() {
            return self.maintain(op, addr, size);
        }
        let side = usize::from(op == Op::Ifetch);
        let shift = self.fronts[side].shift;
        let first = addr >> shift;
        let last = addr.saturating_add(u64::from(size.max(1)) - 1) >> shift;
        let mut t = self.access_line(op, first << shift, side);
        let mut line = first;
        while line < last {
            line += 1;
            t += self.access_line(op, line << shift, side);
        }
        t
    }

    /// Total ticks so far.
    pub fn ticks(&self) -> f64 {
        self.ticks
    }

    /// References so far.
    pub fn refs(&self) -> u64 {
        self.refs
    }

    /// The counts of the cache named `name`.
    pub fn cache_stats(&self, name: &str) -> Option<&CacheStats> {
        self.caches
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.stats)
    }

    /// The counts of the TLB named `name`.
    pub fn tlb_stats(&self, name: &str) -> Option<&TlbStats> {
        self.tlbs.iter().find(|t| t.name == name).map(|t| &t.stats)
    }

    /// Memory's counts.
    pub fn memory_stats(&self) -> &MemoryStats {
        &self.mem
    }

    /// Cache maintenance's counts.
    pub fn maintenance_stats(&self) -> &MaintenanceStats {
        &self.maint
    }

    /// Lines overlapping `len` bytes from `start` that the caches hold, summed over every
    /// cache (a line held at two levels counts twice): how much of a buffer is cached.
    pub fn cached_lines(&self, start: u64, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        let end = start.saturating_add(len - 1);
        self.caches
            .iter()
            .map(|c| {
                let (first, last) = (start >> c.line_shift, end >> c.line_shift);
                if last - first < c.dirty.len() as u64 {
                    (first..=last)
                        .filter(|&k| c.store.find(k).is_some())
                        .count() as u64
                } else {
                    (0..c.dirty.len())
                        .filter(|&s| {
                            let k = c.store.key(s);
                            k != EMPTY && (first..=last).contains(&k)
                        })
                        .count() as u64
                }
            })
            .sum()
    }

    /// Whether `addr` is in an uncacheable range.
    pub fn is_uncacheable(&self, addr: u64) -> bool {
        let i = self.uncached.partition_point(|&(_, end)| end <= addr);
        self.uncached
            .get(i)
            .is_some_and(|&(start, _)| start <= addr)
    }

    /// Makes `range` uncacheable from now on (a buffer remapped with caching disabled).
    ///
    /// As an operating system must before it changes a page's cacheability, every line of
    /// the range held by any cache is flushed first: a dirty one is cleaned down the data
    /// path as [`Op::CleanInvalidate`] would, and every one is discarded. Those write-backs
    /// and discards are counted ([`MaintenanceStats::uncacheable_flushed`],
    /// [`CacheStats::maint_writebacks`], [`MemoryStats::maint_writebacks`]) but charged to
    /// no reference: this is set-up, not part of the trace. The range is added to the
    /// machine ([`machine`](Simulator::machine)). Refused, changing nothing, unless it is
    /// whole lines of the machine's largest line size
    /// ([`Machine::check_uncacheable`]).
    pub fn set_uncacheable(&mut self, range: UncacheableRange) -> Result<(), ConfigError> {
        self.machine.check_uncacheable(&range)?;
        let (start, end) = (range.start, range.end());
        let in_range = |key: u64, shift: u32| (start..end).contains(&(key << shift));
        // The data path first, first level first, so dirty lines cascade down as a clean
        // does; then the caches only instructions reach (never dirty).
        let dpath = self.dpath;
        for d in 0..dpath.len {
            let ci = usize::from(dpath.idx[d]);
            let shift = self.caches[ci].line_shift;
            for slot in 0..self.caches[ci].dirty.len() {
                let key = self.caches[ci].store.key(slot);
                if key == EMPTY || !in_range(key, shift) {
                    continue;
                }
                if self.caches[ci].dirty[slot] {
                    self.clean_slot(dpath, d, slot);
                }
                self.caches[ci].invalidate(slot, key);
                self.maint.uncacheable_flushed += 1;
            }
        }
        for ci in 0..self.caches.len() {
            if dpath.idx[..dpath.len].contains(&(ci as u8)) {
                continue;
            }
            let shift = self.caches[ci].line_shift;
            for slot in 0..self.caches[ci].dirty.len() {
                let key = self.caches[ci].store.key(slot);
                if key != EMPTY && in_range(key, shift) {
                    debug_assert!(!self.caches[ci].dirty[slot], "only the data path dirties");
                    self.caches[ci].invalidate(slot, key);
                    self.maint.uncacheable_flushed += 1;
                }
            }
        }
        self.machine.uncacheable.push(range);
        self.uncached = merged(&self.machine.uncacheable);
        Ok(())
    }

    /// The ticks of an access of `op` to an uncacheable line (counted in memory's stats).
    #[inline(never)]
    fn uncached_access(&mut self, op: Op) -> f64 {
        if op == Op::Write {
            self.mem.uncached_writes += 1;
            self.uncached_ticks[1]
        } else {
            self.mem.uncached_reads += 1;
            self.uncached_ticks[0]
        }
    }

    /// The ticks of maintenance reference `op` (a maintenance op) of `size` bytes at `addr`.
    #[inline(never)]
    fn maintain(&mut self, op: Op, addr: u64, size: u32) -> f64 {
        if op == Op::CleanAll {
            return self.clean_all();
        }
        let Front { shift, tlb, .. } = self.fronts[0];
        let first = addr >> shift;
        let last = addr.saturating_add(u64::from(size.max(1)) - 1) >> shift;
        let mut t = 0.0;
        let mut own = 0.0;
        for line in first..=last {
            let a = line << shift;
            t += self.tlb_ticks(false, tlb, a);
            let written = self.maintain_line(op, a);
            let cost = self.maint_line_ticks + written as f64 * self.maint_writeback_ticks;
            own += cost;
            t += cost;
        }
        let lines = last - first + 1;
        match op {
            Op::Clean => self.maint.clean_lines += lines,
            Op::CleanInvalidate => self.maint.clean_invalidate_lines += lines,
            _ => self.maint.invalidate_lines += lines,
        }
        self.maint.ticks += own;
        t
    }

    /// [`Op::Clean`], [`Op::CleanInvalidate`] or [`Op::Invalidate`] of the line holding
    /// `addr`, at every level of the data path; returns the dirty lines it wrote to memory.
    fn maintain_line(&mut self, op: Op, addr: u64) -> u64 {
        let path = self.dpath;
        let mut to_memory = 0;
        for d in 0..path.len {
            let ci = usize::from(path.idx[d]);
            let c = &self.caches[ci];
            let key = addr >> c.line_shift;
            let Some(slot) = c.lookup(key) else {
                continue;
            };
            let dirty = c.dirty[slot];
            if op == Op::Invalidate {
                if dirty {
                    self.maint.dirty_discarded += 1;
                }
            } else if dirty {
                to_memory += self.clean_slot(path, d, slot);
            }
            if op != Op::Clean {
                self.caches[ci].invalidate(slot, key);
            }
        }
        to_memory
    }

    /// [`Op::CleanAll`]: every line of every data-path cache examined, first level first,
    /// the dirty ones cleaned; returns its ticks.
    fn clean_all(&mut self) -> f64 {
        let path = self.dpath;
        let mut examined = 0u64;
        let mut to_memory = 0u64;
        for d in 0..path.len {
            let ci = usize::from(path.idx[d]);
            let n = self.caches[ci].dirty.len();
            examined += n as u64;
            for slot in 0..n {
                if self.caches[ci].dirty[slot] {
                    to_memory += self.clean_slot(path, d, slot);
                }
            }
        }
        self.maint.clean_alls += 1;
        self.maint.lines_examined += examined;
        let t =
            examined as f64 * self.maint_walk_ticks + to_memory as f64 * self.maint_writeback_ticks;
        self.maint.ticks += t;
        t
    }

    /// Cleans the dirty line in `slot` of the cache at depth `d` of `path`: marks it clean
    /// and writes it down, into the nearest lower level that holds it (which becomes dirty
    /// if write-back; a write-through one passes it on), or to memory. Returns 1 if it
    /// reached memory, else 0.
    fn clean_slot(&mut self, path: Path, d: usize, slot: usize) -> u64 {
        let c = &mut self.caches[usize::from(path.idx[d])];
        debug_assert!(c.dirty[slot] && c.store.key(slot) != EMPTY);
        c.dirty[slot] = false;
        c.stats.maint_writebacks += 1;
        let addr = c.store.key(slot) << c.line_shift;
        for e in d + 1..path.len {
            let below = &mut self.caches[usize::from(path.idx[e])];
            if let Some(s) = below.lookup(addr >> below.line_shift) {
                if below.write_back {
                    below.dirty[s] = true;
                    return 0;
                }
            }
        }
        self.mem.maint_writebacks += 1;
        1
    }

    /// Everything counted so far.
    pub fn report(&self) -> Report {
        Report {
            machine: self.machine.name.clone(),
            tick_unit: self.machine.tick_unit.clone(),
            refs: self.refs,
            line_accesses: self.line_accesses,
            ticks: self.ticks,
            ticks_per_ref: if self.refs == 0 {
                0.0
            } else {
                self.ticks / self.refs as f64
            },
            ccc: self.options.ccc,
            caches: self
                .caches
                .iter()
                .map(|c| CacheReport {
                    name: c.name.clone(),
                    level: c.level,
                    side: c.side,
                    miss_rate: c.stats.miss_rate(),
                    stats: c.stats.clone(),
                })
                .collect(),
            tlbs: self
                .tlbs
                .iter()
                .map(|t| TlbReport {
                    name: t.name.clone(),
                    page_bytes: 1 << t.page_shift,
                    stats: t.stats.clone(),
                })
                .collect(),
            memory: self.mem.clone(),
            maintenance: self.maint.clone(),
            parties: Party::ALL
                .iter()
                .filter(|&&p| self.party_refs[p as usize] > 0)
                .map(|&p| PartyReport {
                    party: p,
                    refs: self.party_refs[p as usize],
                    ticks: self.party_ticks[p as usize],
                })
                .collect(),
            notes: self.machine.notes.clone(),
        }
    }

    /// Ticks added by translating the page of `addr`.
    #[inline]
    fn translate(&mut self, ifetch: bool, addr: u64) -> f64 {
        let mut tlb = if ifetch { self.itlb } else { self.dtlb };
        if !self.huge.is_empty() {
            if let Some(r) = self.huge.iter().find(|r| (r.start..r.end).contains(&addr)) {
                tlb = if ifetch { r.instr } else { r.data };
            }
        }
        match tlb {
            Some(i) => self.tlbs[i].lookup(addr),
            None => 0.0,
        }
    }

    /// Ticks of the translation of `addr` for `front`'s side.
    #[inline(always)]
    fn tlb_ticks(&mut self, ifetch: bool, tlb: usize, addr: u64) -> f64 {
        if !self.huge.is_empty() {
            return self.translate(ifetch, addr);
        }
        match self.tlbs.get_mut(tlb) {
            Some(t) => t.lookup(addr),
            None => 0.0,
        }
    }

    /// One line access; returns its ticks.
    ///
    /// Inline, it handles a first-level hit on the line touched last or the one before it
    /// (what almost every reference of a copy is); anything else goes to
    /// [`access_line_slow`](Simulator::access_line_slow).
    #[inline(always)]
    fn access_line(&mut self, op: Op, addr: u64, side: usize) -> f64 {
        self.line_accesses += 1;
        let Front {
            cache,
            shift,
            perfect,
            l1_ticks,
            tlb,
        } = self.fronts[side];
        let t = self.tlb_ticks(side == 1, tlb, addr);
        if perfect {
            if !self.uncached.is_empty() && self.is_uncacheable(addr) {
                return t + self.uncached_access(op);
            }
            return t + l1_ticks;
        }
        let c = &mut self.caches[cache];
        let key = addr >> shift;
        if op != Op::Write || c.write_back {
            if key == c.last_key {
                // The line touched last: a hit that changes no replacement state.
                c.hit_last(op);
                return t + l1_ticks;
            }
            if key == c.prev_key && c.shadow.is_none() {
                // The line touched before it: a hit, as `access_found` would count it.
                c.hit_prev(op);
                return t + l1_ticks;
            }
        }
        self.access_line_slow(op, addr, t)
    }

    /// The rest of [`access_line`](Simulator::access_line) after translation (`t` ticks):
    /// a search of the first level, and the hierarchy below on a miss.
    ///
    /// An uncacheable line never is in a cache (see [`set_uncacheable`]), so it cannot be
    /// one of the recent lines [`access_line`] and the lanes take as hits: checking for it
    /// here alone is exact.
    ///
    /// [`set_uncacheable`]: Simulator::set_uncacheable
    /// [`access_line`]: Simulator::access_line
    #[inline(never)]
    fn access_line_slow(&mut self, op: Op, addr: u64, mut t: f64) -> f64 {
        debug_assert!(!op.is_maintenance());
        if !self.uncached.is_empty() && self.is_uncacheable(addr) {
            return t + self.uncached_access(op);
        }
        let ifetch = op == Op::Ifetch;
        let path = if ifetch { self.ipath } else { self.dpath };
        let c = &self.caches[usize::from(path.idx[0])];
        let key = addr >> c.line_shift;
        let slot = c.lookup(key);
        self.dirty_to_mem = false;
        let served = match op {
            // A first-level miss on a plain path: the loop of `plain_miss`.
            _ if path.plain && slot.is_none() => self.plain_miss(path, key, op),
            Op::Write => self.access_found::<{ kind::WRITE }>(path, 0, addr, slot),
            Op::Ifetch => self.access_found::<{ kind::IFETCH }>(path, 0, addr, slot),
            // A read (maintenance ops never come here).
            _ => self.access_found::<{ kind::READ }>(path, 0, addr, slot),
        };
        let costs = if ifetch { &self.icost } else { &self.dcost };
        t += costs.served[served];
        if self.dirty_to_mem {
            t += costs.dirty_extra;
        }
        t
    }

    /// An access of kind `K` (see [`kind`]) at depth `d` of `path`; returns the depth that
    /// served it (`path.len` for memory).
    fn access_level<const K: u8>(&mut self, path: Path, d: usize, addr: u64) -> usize {
        if d == path.len {
            match K {
                kind::READ | kind::IFETCH => self.mem.fills += 1,
                kind::WRITE => self.mem.writes += 1,
                _ => {
                    self.mem.writebacks += 1;
                    self.dirty_to_mem = true;
                }
            }
            return d;
        }
        let c = &self.caches[usize::from(path.idx[d])];
        let slot = c.lookup(addr >> c.line_shift);
        self.access_found::<K>(path, d, addr, slot)
    }

    /// [`access_level`](Simulator::access_level) once the line has been looked up at depth
    /// `d < path.len`: `slot` is where it is, if anywhere.
    fn access_found<const K: u8>(
        &mut self,
        path: Path,
        d: usize,
        addr: u64,
        slot: Option<usize>,
    ) -> usize {
        let ci = usize::from(path.idx[d]);
        let c = &mut self.caches[ci];
        let key = addr >> c.line_shift;
        let is_write = kind::is_write(K);
        let demand = kind::is_demand(K);
        let allocate = !is_write || c.write_back;
        match K {
            kind::READ => c.stats.reads += 1,
            kind::WRITE => c.stats.writes += 1,
            kind::IFETCH => c.stats.ifetches += 1,
            _ => c.stats.writebacks_in += 1,
        }
        let shadow = c.shadow.as_mut().map(|s| s.access(key, allocate));
        if let Some(slot) = slot {
            c.store.touch(slot);
            if shadow.is_some_and(|s| !s.fa_hit && !allocate) {
                // A write-through write hit the shadow missed and (no-write-allocate) did not
                // take in: the line is not the shadow's most recent, so it must not be
                // `last_key` (whose hits skip the shadow). Forget both recent lines, as a
                // no-allocate miss does; the next access to them searches and goes through
                // the shadow.
                c.last_key = EMPTY;
                c.prev_key = EMPTY;
            } else {
                c.remember(key, slot);
            }
            if demand {
                c.stats.hits += 1;
            }
            if is_write {
                if c.write_back {
                    c.dirty[slot] = true;
                } else {
                    self.write_through::<K>(path, d, addr);
                }
            }
            return d;
        }
        if demand {
            c.stats.misses += 1;
            if let Some(s) = shadow {
                if !s.seen {
                    c.stats.compulsory += 1;
                } else if s.discarded {
                    c.stats.coherence += 1;
                } else if !s.fa_hit {
                    c.stats.capacity += 1;
                } else {
                    c.stats.conflict += 1;
                }
            }
        } else {
            c.stats.writebacks_in_misses += 1;
        }
        if !allocate {
            c.last_key = EMPTY;
            c.prev_key = EMPTY;
            self.write_through::<K>(path, d, addr);
            return d;
        }
        let served = match K {
            kind::WB_WHOLE => d,
            kind::IFETCH => self.access_level::<{ kind::IFETCH }>(path, d + 1, addr),
            _ => self.access_level::<{ kind::READ }>(path, d + 1, addr),
        };
        let c = &mut self.caches[ci];
        if let Some(old) = c.fill_missed(key, is_write) {
            let shift = c.line_shift;
            let whole =
                d + 1 >= path.len || self.caches[usize::from(path.idx[d + 1])].line_shift <= shift;
            if whole {
                self.access_level::<{ kind::WB_WHOLE }>(path, d + 1, old << shift);
            } else {
                self.access_level::<{ kind::WB_PART }>(path, d + 1, old << shift);
            }
        }
        served
    }

    /// [`access_found`](Simulator::access_found) of a demand access of `op` to line `key`
    /// that missed the first level of a plain `path` (all write-back, one line size, no
    /// shadow), without the generality those rule out: no write-through branch, no line
    /// size conversion, the same key at every level, and a loop instead of recursion.
    ///
    /// Exact: the same steps in the same order as the recursive code. Going down, each
    /// level counts the access as a read (an instruction fetch for `Ifetch`) and is looked
    /// up, until one holds the line (a touched, remembered hit) or memory fills it. Coming
    /// back up, every level that missed, deepest first, chooses its victim, is filled (dirty
    /// only at the first level for a write) and writes a dirty victim down
    /// ([`plain_write_back`](Simulator::plain_write_back)), before the level above does
    /// the same. The recursion also looks every level up before filling any (a level is
    /// looked up before the levels below it are, and filled after they are), and a fill
    /// or write-back only touches the level filled and those below it (a path holds a cache
    /// once), so doing all the lookups first changes nothing.
    #[inline(always)]
    fn plain_miss(&mut self, path: Path, key: u64, op: Op) -> usize {
        let c = &mut self.caches[usize::from(path.idx[0])];
        c.count(op);
        c.stats.misses += 1;
        let mut served = path.len;
        for d in 1..path.len {
            let c = &mut self.caches[usize::from(path.idx[d])];
            if op == Op::Ifetch {
                c.stats.ifetches += 1;
            } else {
                c.stats.reads += 1;
            }
            if let Some(slot) = c.lookup(key) {
                c.store.touch(slot);
                c.remember(key, slot);
                c.stats.hits += 1;
                served = d;
                break;
            }
            c.stats.misses += 1;
        }
        if served == path.len {
            self.mem.fills += 1;
        }
        for d in (0..served).rev() {
            let dirty = d == 0 && op == Op::Write;
            if let Some(old) = self.caches[usize::from(path.idx[d])].fill_missed(key, dirty) {
                self.plain_write_back(path, d + 1, old);
            }
        }
        served
    }

    /// The write-back of dirty line `key` into depth `d` of a plain `path` (a `WB_WHOLE`
    /// access there: allocated without a fetch, since the line sizes are equal), and of the
    /// dirty victims it evicts in turn, down to memory.
    fn plain_write_back(&mut self, path: Path, mut d: usize, mut key: u64) {
        while d < path.len {
            let c = &mut self.caches[usize::from(path.idx[d])];
            c.stats.writebacks_in += 1;
            if let Some(slot) = c.lookup(key) {
                c.store.touch(slot);
                c.remember(key, slot);
                c.dirty[slot] = true;
                return;
            }
            c.stats.writebacks_in_misses += 1;
            match c.fill_missed(key, true) {
                Some(old) => key = old,
                None => return,
            }
            d += 1;
        }
        self.mem.writebacks += 1;
        self.dirty_to_mem = true;
    }

    /// Passes a write absorbed by a write-through cache at depth `d` to the next level. A
    /// write buffer is assumed: nothing it causes below is charged to the reference.
    fn write_through<const K: u8>(&mut self, path: Path, d: usize, addr: u64) {
        let saved = self.dirty_to_mem;
        self.access_level::<K>(path, d + 1, addr);
        self.dirty_to_mem = saved;
    }
}

/// References handed to the simulator per batch by [`Simulator::run`].
pub const BATCH: usize = 1 << 14;

/// Binary records checked and simulated at a time by [`Simulator::run`] (24 KiB).
const RECORDS: usize = 1 << 11;

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "machine {}: {} references, {} line accesses, {:.0} {} ({:.3} per reference)",
            self.machine,
            self.refs,
            self.line_accesses,
            self.ticks,
            self.tick_unit,
            self.ticks_per_ref
        )?;
        writeln!(
            f,
            "\n{:<8} {:>5} {:>12} {:>12} {:>12} {:>12} {:>9} {:>11}",
            "cache", "level", "reads", "writes", "ifetches", "misses", "miss %", "writebacks"
        )?;
        for c in &self.caches {
            writeln!(
                f,
                "{:<8} {:>5} {:>12} {:>12} {:>12} {:>12} {:>9.3} {:>11}",
                c.name,
                c.level,
                c.stats.reads,
                c.stats.writes,
                c.stats.ifetches,
                c.stats.misses,
                100.0 * c.miss_rate,
                c.stats.writebacks
            )?;
        }
        if self.ccc {
            writeln!(
                f,
                "\n{:<8} {:>12} {:>12} {:>12} {:>12}",
                "cache", "compulsory", "coherence", "capacity", "conflict"
            )?;
            for c in &self.caches {
                writeln!(
                    f,
                    "{:<8} {:>12} {:>12} {:>12} {:>12}",
                    c.name,
                    c.stats.compulsory,
                    c.stats.coherence,
                    c.stats.capacity,
                    c.stats.conflict
                )?;
            }
        }
        if !self.tlbs.is_empty() {
            writeln!(
                f,
                "\n{:<8} {:>8} {:>12} {:>24} {:>12}",
                "tlb", "page", "lookups", "hits by level", "misses"
            )?;
            for t in &self.tlbs {
                let hits: Vec<String> = t.stats.hits.iter().map(u64::to_string).collect();
                writeln!(
                    f,
                    "{:<8} {:>8} {:>12} {:>24} {:>12}",
                    t.name,
                    crate::config::ByteSize(t.page_bytes).to_string(),
                    t.stats.lookups,
                    hits.join(" / "),
                    t.stats.misses
                )?;
            }
        }
        writeln!(
            f,
            "\nmemory: {} line fills, {} dirty write-backs, {} write-through writes",
            self.memory.fills, self.memory.writebacks, self.memory.writes
        )?;
        let m = &self.memory;
        if m.uncached_reads + m.uncached_writes > 0 {
            writeln!(
                f,
                "uncacheable: {} line reads, {} line writes",
                m.uncached_reads, m.uncached_writes
            )?;
        }
        let mt = &self.maintenance;
        if mt.clean_lines
            + mt.clean_invalidate_lines
            + mt.invalidate_lines
            + mt.clean_alls
            + mt.uncacheable_flushed
            > 0
        {
            writeln!(
                f,
                "maintenance: {} lines cleaned, {} cleaned and invalidated, {} invalidated ({} dirty discarded), {} clean-alls ({} lines examined), {} write-backs to memory, {:.0} {}",
                mt.clean_lines,
                mt.clean_invalidate_lines,
                mt.invalidate_lines,
                mt.dirty_discarded,
                mt.clean_alls,
                mt.lines_examined,
                m.maint_writebacks,
                mt.ticks,
                self.tick_unit
            )?;
        }
        if self.parties.len() > 1
            || self
                .parties
                .first()
                .is_some_and(|p| p.party != Party::Other)
        {
            writeln!(f, "\n{:<12} {:>14} {:>16}", "party", "refs", "ticks")?;
            for p in &self.parties {
                writeln!(f, "{:<12} {:>14} {:>16.0}", p.party.name(), p.refs, p.ticks)?;
            }
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}
