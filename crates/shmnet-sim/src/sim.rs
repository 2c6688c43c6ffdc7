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
//!   and misses, with `ccc` the misses by kind (compulsory: first touch of the line ever;
//!   capacity: also missed by a fully associative LRU cache of the same size seeing the same
//!   accesses; conflict: the rest — Dinero IV's `-ccc`), fills, dirty lines written back out,
//!   and write-backs received from above (not demand accesses; counted apart).
//! * Each cache remembers the last line it touched; a line access to that same line again is
//!   a hit that changes no replacement state under any policy, so it is counted without a
//!   search. This is exact, not an approximation, and it is what makes sequential traces fast.

use serde::Serialize;

use crate::config::{ConfigError, Machine, Side, WritePolicy, check_sets};
use crate::store::{EMPTY, Shadow, Store};
use crate::timing::PathCosts;
use crate::tlb::{Tlb, TlbStats};
use crate::trace::{Op, Party, Ref, TraceError, TraceSource};

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
    /// Misses a fully associative LRU cache of the same size also had, less compulsory ones.
    pub capacity: u64,
    /// The remaining misses (`misses - compulsory - capacity` when classification is on).
    pub conflict: u64,
    /// Lines brought in.
    pub fills: u64,
    /// Dirty lines evicted and written to the next level or memory.
    pub writebacks: u64,
    /// Dirty lines received from the level above.
    pub writebacks_in: u64,
    /// Of those, how many were not present here.
    pub writebacks_in_misses: u64,
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
    /// Dirty lines written back to memory.
    pub writebacks: u64,
    /// Writes passed through to memory by write-through caches.
    pub writes: u64,
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

/// The kind of an access at one level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    Ifetch,
    /// A dirty line from the level above; `whole` if it covers this level's line.
    WriteBack {
        whole: bool,
    },
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
    /// Invariant: `last_key != EMPTY` implies `store.key(last_slot) == last_key`.
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
}

/// A path through the hierarchy: cache indices, first level first.
#[derive(Clone, Copy)]
struct Path {
    idx: [u8; MAX_LEVELS],
    len: usize,
}

/// A TLB choice for an address range with a non-base page size.
struct HugeRange {
    start: u64,
    end: u64,
    data: Option<usize>,
    instr: Option<usize>,
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
}

fn path_of(m: &Machine, ifetch: bool) -> Path {
    let v = m.path(ifetch);
    let mut idx = [0u8; MAX_LEVELS];
    for (d, &i) in v.iter().enumerate() {
        idx[d] = i as u8;
    }
    Path { idx, len: v.len() }
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
        let dpath = path_of(machine, false);
        let ipath = path_of(machine, true);
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
        Ok(Simulator {
            options,
            caches,
            dcost: costs_of(machine, dpath),
            icost: costs_of(machine, ipath),
            dpath,
            ipath,
            tlbs: machine.tlbs.iter().map(Tlb::new).collect(),
            dtlb: tlb_for(machine, base, false),
            itlb: tlb_for(machine, base, true),
            huge,
            mem: MemoryStats::default(),
            dirty_to_mem: false,
            refs: 0,
            line_accesses: 0,
            ticks: 0.0,
            party_refs: [0; 5],
            party_ticks: [0.0; 5],
            machine: machine.clone(),
        })
    }

    /// The machine simulated.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Simulates one reference of `size` bytes (0 counts as 1) at `addr`; returns its ticks.
    #[inline]
    pub fn access(&mut self, op: Op, addr: u64, size: u32) -> f64 {
        self.refs += 1;
        let ifetch = op == Op::Ifetch;
        let path = if ifetch { self.ipath } else { self.dpath };
        let shift = self.caches[usize::from(path.idx[0])].line_shift;
        let first = addr >> shift;
        let last = addr.saturating_add(u64::from(size.max(1)) - 1) >> shift;
        let mut t = self.access_line(op, first << shift, path);
        let mut line = first;
        while line < last {
            line += 1;
            t += self.access_line(op, line << shift, path);
        }
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

    /// Simulates every reference of `source`, calling `progress` with the bytes read after
    /// each batch.
    pub fn run(
        &mut self,
        source: &mut dyn TraceSource,
        mut progress: impl FnMut(u64),
    ) -> Result<(), TraceError> {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            source.next_batch(&mut batch, BATCH)?;
            if batch.is_empty() {
                return Ok(());
            }
            for r in &batch {
                self.access_ref(r);
            }
            progress(source.bytes_read());
        }
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

    /// One line access; returns its ticks.
    #[inline]
    fn access_line(&mut self, op: Op, addr: u64, path: Path) -> f64 {
        self.line_accesses += 1;
        let ifetch = op == Op::Ifetch;
        let mut t = if self.tlbs.is_empty() {
            0.0
        } else {
            self.translate(ifetch, addr)
        };
        let (perfect, costs) = if ifetch {
            (self.options.perfect_icache, &self.icost)
        } else {
            (self.options.perfect_dcache, &self.dcost)
        };
        let l1_ticks = costs.served[0];
        if perfect {
            return t + l1_ticks;
        }
        let c = &mut self.caches[usize::from(path.idx[0])];
        let key = addr >> c.line_shift;
        if key == c.last_key && (op != Op::Write || c.write_back) {
            // The line touched last: a hit that changes no replacement state.
            c.stats.hits += 1;
            match op {
                Op::Read => c.stats.reads += 1,
                Op::Ifetch => c.stats.ifetches += 1,
                Op::Write => {
                    c.stats.writes += 1;
                    c.dirty[c.last_slot] = true;
                }
            }
            return t + l1_ticks;
        }
        if c.shadow.is_none() && (op != Op::Write || c.write_back) {
            // A hit elsewhere in the first level: the same as `access_level` would do.
            let found = if key == c.prev_key {
                Some(c.prev_slot)
            } else {
                c.store.find(key)
            };
            if let Some(slot) = found {
                c.store.touch(slot);
                c.remember(key, slot);
                c.stats.hits += 1;
                match op {
                    Op::Read => c.stats.reads += 1,
                    Op::Ifetch => c.stats.ifetches += 1,
                    Op::Write => {
                        c.stats.writes += 1;
                        c.dirty[slot] = true;
                    }
                }
                return t + l1_ticks;
            }
        }
        self.dirty_to_mem = false;
        let access = match op {
            Op::Read => Access::Read,
            Op::Write => Access::Write,
            Op::Ifetch => Access::Ifetch,
        };
        let served = self.access_level(path, 0, addr, access);
        let costs = if ifetch { &self.icost } else { &self.dcost };
        t += costs.served[served];
        if self.dirty_to_mem {
            t += costs.dirty_extra;
        }
        t
    }

    /// An access at depth `d` of `path`; returns the depth that served it (`path.len` for
    /// memory).
    fn access_level(&mut self, path: Path, d: usize, addr: u64, op: Access) -> usize {
        if d == path.len {
            match op {
                Access::Read | Access::Ifetch => self.mem.fills += 1,
                Access::Write => self.mem.writes += 1,
                Access::WriteBack { .. } => {
                    self.mem.writebacks += 1;
                    self.dirty_to_mem = true;
                }
            }
            return d;
        }
        let ci = usize::from(path.idx[d]);
        let c = &mut self.caches[ci];
        let key = addr >> c.line_shift;
        let is_write = matches!(op, Access::Write | Access::WriteBack { .. });
        let allocate = !is_write || c.write_back;
        match op {
            Access::Read => c.stats.reads += 1,
            Access::Write => c.stats.writes += 1,
            Access::Ifetch => c.stats.ifetches += 1,
            Access::WriteBack { .. } => c.stats.writebacks_in += 1,
        }
        let demand = !matches!(op, Access::WriteBack { .. });
        let slot = if key == c.last_key {
            Some(c.last_slot)
        } else if key == c.prev_key {
            Some(c.prev_slot)
        } else {
            c.store.find(key)
        };
        let shadow = c.shadow.as_mut().map(|s| s.access(key, allocate));
        if let Some(slot) = slot {
            c.store.touch(slot);
            c.remember(key, slot);
            if demand {
                c.stats.hits += 1;
            }
            if is_write {
                if c.write_back {
                    c.dirty[slot] = true;
                } else {
                    self.write_through(path, d, addr, op);
                }
            }
            return d;
        }
        if demand {
            c.stats.misses += 1;
            if let Some(s) = shadow {
                if !s.seen {
                    c.stats.compulsory += 1;
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
            self.write_through(path, d, addr, op);
            return d;
        }
        let served = match op {
            Access::WriteBack { whole: true } => d,
            Access::Ifetch => self.access_level(path, d + 1, addr, Access::Ifetch),
            _ => self.access_level(path, d + 1, addr, Access::Read),
        };
        let c = &mut self.caches[ci];
        let slot = c.store.victim(key);
        let old = c.store.key(slot);
        let victim_dirty = old != EMPTY && c.dirty[slot];
        c.store.fill(slot, key);
        c.dirty[slot] = is_write;
        c.stats.fills += 1;
        if c.prev_slot == slot {
            c.prev_key = EMPTY;
        }
        c.remember(key, slot);
        if victim_dirty {
            c.stats.writebacks += 1;
            let shift = c.line_shift;
            let whole =
                d + 1 >= path.len || self.caches[usize::from(path.idx[d + 1])].line_shift <= shift;
            self.access_level(path, d + 1, old << shift, Access::WriteBack { whole });
        }
        served
    }

    /// Passes a write absorbed by a write-through cache at depth `d` to the next level. A
    /// write buffer is assumed: nothing it causes below is charged to the reference.
    fn write_through(&mut self, path: Path, d: usize, addr: u64, op: Access) {
        let saved = self.dirty_to_mem;
        self.access_level(path, d + 1, addr, op);
        self.dirty_to_mem = saved;
    }
}

/// References handed to the simulator per batch by [`Simulator::run`].
pub const BATCH: usize = 1 << 14;

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
                "\n{:<8} {:>12} {:>12} {:>12}",
                "cache", "compulsory", "capacity", "conflict"
            )?;
            for c in &self.caches {
                writeln!(
                    f,
                    "{:<8} {:>12} {:>12} {:>12}",
                    c.name, c.stats.compulsory, c.stats.capacity, c.stats.conflict
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
