//! The description of a machine: caches, TLBs, memory and their costs, as plain data.
//!
//! A [`Machine`] is what a preset file (TOML or JSON) deserialises into: caches, TLBs,
//! memory, uncacheable ranges ([`UncacheableRange`]) and the costs of cache maintenance
//! ([`MaintenanceConfig`]). It is checked by
//! [`Machine::validate`] (and again by [`Simulator::new`](crate::Simulator::new)) so that every
//! geometry the simulator is built from is consistent: sizes and line sizes are powers of two,
//! the number of sets of every cache and TLB is a power of two, line sizes do not shrink
//! going down the hierarchy, and every level has a cache for both instructions and data.

use serde::{Deserialize, Serialize};

/// Why a machine description cannot be simulated. Every message says what to change.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// A size or count that must be a power of two is not.
    #[error("{what} of {name} is {value}; it must be a power of two (e.g. {suggest})")]
    NotPowerOfTwo {
        /// The cache or TLB.
        name: String,
        /// Which field.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The nearest power of two below.
        suggest: u64,
    },
    /// The geometry does not divide: size is not a multiple of line × ways, or the sets are
    /// not a power of two.
    #[error("{name}: {detail}")]
    Geometry {
        /// The cache or TLB.
        name: String,
        /// What is wrong and what would fix it.
        detail: String,
    },
    /// The levels do not form a hierarchy.
    #[error("hierarchy: {0}")]
    Hierarchy(String),
    /// A cost is negative or not a number.
    #[error("{name}: cost {what} = {value} must be a finite number >= 0")]
    Cost {
        /// The cache, TLB or memory.
        name: String,
        /// Which cost.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// The description could not be parsed.
    #[error("cannot parse the machine description: {0}")]
    Parse(String),
}

/// What a cache or TLB holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Instructions only (an L1 I-cache, an ITLB).
    Instruction,
    /// Data only (an L1 D-cache, a DTLB).
    Data,
    /// Both.
    Unified,
}

impl Side {
    /// Whether a reference of this kind (`ifetch` or not) goes to a cache of this side.
    pub fn serves(self, ifetch: bool) -> bool {
        match self {
            Side::Unified => true,
            Side::Instruction => ifetch,
            Side::Data => !ifetch,
        }
    }
}

/// Which line (or TLB entry) of a full set is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Replacement {
    /// Least recently used.
    #[default]
    Lru,
    /// First in, first out: the line filled longest ago, whatever its use since.
    Fifo,
    /// Uniformly random, from a generator seeded with the cache's `seed` (deterministic).
    Random,
    /// Tree pseudo-LRU: a binary tree of `ways - 1` bits per set; `ways` must be a power of two.
    TreePlru,
}

/// How writes are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicy {
    /// Write-back with write-allocate: a write marks the line dirty; a write miss fetches the
    /// line; a dirty line is written to the next level when it is evicted.
    #[default]
    WriteBack,
    /// Write-through with no-write-allocate: every write is passed to the next level; a
    /// write miss does not bring the line in. Lines are never dirty.
    WriteThrough,
}

/// Associativity: a number of ways, or `"full"` (one set holding every line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Ways {
    /// This many ways per set (1 = direct-mapped).
    N(u32),
    /// Fully associative: written `"full"` in a file.
    Full(FullWord),
}

/// The word `"full"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FullWord {
    /// Fully associative.
    Full,
}

impl Ways {
    /// Fully associative.
    pub const FULL: Ways = Ways::Full(FullWord::Full);

    /// The number of ways for a structure of `entries` lines or entries in all.
    pub fn count(self, entries: u64) -> u64 {
        match self {
            Ways::N(n) => u64::from(n),
            Ways::Full(_) => entries,
        }
    }
}

/// A byte count, written as a number or as a string with a `K`, `M` or `G` suffix (powers of
/// 1024), e.g. `32768`, `"32K"`, `"1M"`, `"256KiB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses `"32K"`, `"1M"`, `"2MiB"`, `"4096"` (case-insensitive; `B`/`iB` optional).
    pub fn parse(s: &str) -> Option<ByteSize> {
        let t = s.trim().to_ascii_lowercase();
        let t = t
            .strip_suffix("ib")
            .or_else(|| t.strip_suffix('b'))
            .unwrap_or(&t);
        let (num, mult) = match t.chars().last()? {
            'k' => (&t[..t.len() - 1], 1u64 << 10),
            'm' => (&t[..t.len() - 1], 1 << 20),
            'g' => (&t[..t.len() - 1], 1 << 30),
            _ => (t, 1),
        };
        num.trim()
            .parse::<u64>()
            .ok()?
            .checked_mul(mult)
            .map(ByteSize)
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        if b >= 1 << 30 && b % (1 << 30) == 0 {
            write!(f, "{}G", b >> 30)
        } else if b >= 1 << 20 && b % (1 << 20) == 0 {
            write!(f, "{}M", b >> 20)
        } else if b >= 1 << 10 && b % (1 << 10) == 0 {
            write!(f, "{}K", b >> 10)
        } else {
            write!(f, "{b}")
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => ByteSize::parse(&s).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{s:?} is not a byte size; write a number or e.g. \"32K\", \"1M\""
                ))
            }),
        }
    }
}

fn default_seed() -> u64 {
    0x5eed
}

/// One cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// A short name shown in reports, e.g. `"L1D"`.
    pub name: String,
    /// 1 for the level nearest the processor.
    pub level: u32,
    /// What it holds. A level is either one unified cache or an instruction and a data cache.
    pub side: Side,
    /// Capacity in bytes: `sets * ways * line` with a power-of-two number of sets (so a
    /// 12-way cache of 48 KiB is fine).
    pub size: ByteSize,
    /// Line (block) size in bytes; a power of two, not smaller than the level above's.
    pub line: ByteSize,
    /// Associativity, 1 (direct-mapped) to `"full"`.
    pub ways: Ways,
    /// Replacement policy.
    #[serde(default)]
    pub replacement: Replacement,
    /// Write policy.
    #[serde(default)]
    pub write: WritePolicy,
    /// Ticks a reference costs when its line is found in this cache (its whole latency, as
    /// seen by the processor, not an increment over the level above).
    pub hit_ticks: f64,
    /// Seed of the generator for `random` replacement.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

impl CacheConfig {
    /// A write-back LRU cache with the given geometry and hit cost (a convenience for tests
    /// and programs; files say every field).
    pub fn new(
        name: &str,
        level: u32,
        side: Side,
        size: u64,
        line: u64,
        ways: Ways,
        hit_ticks: f64,
    ) -> Self {
        CacheConfig {
            name: name.to_string(),
            level,
            side,
            size: ByteSize(size),
            line: ByteSize(line),
            ways,
            replacement: Replacement::Lru,
            write: WritePolicy::WriteBack,
            hit_ticks,
            seed: default_seed(),
        }
    }

    /// Lines in all.
    pub fn lines(&self) -> u64 {
        self.size.0 / self.line.0.max(1)
    }
}

/// One level of a TLB: `entries` translations in sets of `ways`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbLevelConfig {
    /// Translations held.
    pub entries: u64,
    /// Associativity, 1 to `"full"`.
    pub ways: Ways,
    /// Ticks added to a reference whose translation is found at this level (0 for a first
    /// level that is looked up in parallel with the cache).
    #[serde(default)]
    pub hit_ticks: f64,
    /// Replacement policy.
    #[serde(default)]
    pub replacement: Replacement,
}

/// A TLB for one page size: one or more levels, searched in order; a translation missing
/// from every level costs `miss_ticks` (the page walk or the software handler) and is then
/// put into every level (non-inclusive, like the caches).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlbConfig {
    /// A short name, e.g. `"DTLB"`.
    pub name: String,
    /// Which references it translates.
    pub side: Side,
    /// The page size it maps; a power of two. References use the TLB whose page size is the
    /// one [`Machine::page_bytes`] gives for their address.
    pub page: ByteSize,
    /// The levels, first searched first.
    pub levels: Vec<TlbLevelConfig>,
    /// Ticks a reference pays when no level holds its translation.
    pub miss_ticks: f64,
}

/// Main memory's costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Ticks of a reference served from memory (the whole latency: the access plus the
    /// line fill).
    pub ticks: f64,
    /// Ticks of a reference served from memory when, during it, a dirty line was written
    /// back to memory (the fill's victim was dirty). Any other reference during which a
    /// dirty line reached memory pays `dirty_ticks - ticks` on top of its own latency.
    pub dirty_ticks: f64,
    /// Ticks of a read or instruction fetch of an address in an [`UncacheableRange`], **per
    /// line access**: a reference is split into the pieces it touches of the first level's
    /// line size, and each piece (up to one line, whatever its bytes) costs this, its whole
    /// latency (seed 003's `C_cr`, "per 8-word transfer" on its 32-byte-line machine: a
    /// trace should then read uncacheable memory a line per reference, as a load-multiple
    /// copy does). Absent: `ticks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncached_read_ticks: Option<f64>,
    /// Ticks of a write to an uncacheable address, per line access as for reads (seed 003's
    /// `C_cw`). Absent: `ticks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncached_write_ticks: Option<f64>,
}

impl MemoryConfig {
    /// Memory with these clean and dirty fill costs, and uncacheable accesses costing a fill.
    pub fn new(ticks: f64, dirty_ticks: f64) -> Self {
        MemoryConfig {
            ticks,
            dirty_ticks,
            uncached_read_ticks: None,
            uncached_write_ticks: None,
        }
    }

    /// Ticks of an uncacheable read line access: `uncached_read_ticks`, else `ticks`.
    pub fn uncached_read(&self) -> f64 {
        self.uncached_read_ticks.unwrap_or(self.ticks)
    }

    /// Ticks of an uncacheable write line access: `uncached_write_ticks`, else `ticks`.
    pub fn uncached_write(&self) -> f64 {
        self.uncached_write_ticks.unwrap_or(self.ticks)
    }
}

/// What cache-maintenance operations ([`Op::Clean`](crate::Op::Clean) and the others) cost.
/// Every field may be left out (a machine without a `[maintenance]` table pays only the
/// write-backs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceConfig {
    /// Ticks of a clean, clean-and-invalidate or invalidate of one line (per first-level
    /// line the operation covers, cached or not: the instruction and its lookup), on top of
    /// its write-back if any. Default 0.
    #[serde(default)]
    pub line_ticks: f64,
    /// Ticks per cache line examined by a clean-all (every line, valid or not, of every
    /// cache on the data path). Default 0.
    #[serde(default)]
    pub walk_ticks: f64,
    /// Ticks per dirty line a maintenance operation writes back to memory (seed 003's
    /// `C_bw`). Write-backs into a lower cache that holds the line are free, as elsewhere.
    /// Absent: `memory.dirty_ticks - memory.ticks`, what a dirty victim adds to a fill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writeback_ticks: Option<f64>,
}

impl MaintenanceConfig {
    /// Ticks per dirty line written back to memory by maintenance, given `memory`.
    pub fn writeback(&self, memory: &MemoryConfig) -> f64 {
        self.writeback_ticks
            .unwrap_or((memory.dirty_ticks - memory.ticks).max(0.0))
    }
}

/// A range of addresses that bypasses every cache (seed 003's uncacheable memory: a page
/// mapped with caching disabled). A reference to it never looks in a cache, never allocates
/// a line, and is counted as an uncached read or write of memory, at
/// [`MemoryConfig::uncached_read_ticks`] / `uncached_write_ticks` per line access.
///
/// Real hardware marks whole pages; the simulator needs only whole lines: `start` and `len`
/// must be multiples of the largest line size of the machine's caches, so that no cache line
/// is partly cacheable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UncacheableRange {
    /// First address, a number or a `"0x…"` string.
    #[serde(with = "hexnum")]
    pub start: u64,
    /// Bytes, a number or e.g. `"4K"`; not 0.
    pub len: ByteSize,
}

impl UncacheableRange {
    /// `len` bytes from `start`.
    pub fn new(start: u64, len: u64) -> Self {
        UncacheableRange {
            start,
            len: ByteSize(len),
        }
    }

    /// The end address (exclusive), saturating.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len.0)
    }

    /// Whether `addr` is in the range.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end()).contains(&addr)
    }
}

/// A range of addresses mapped with pages of another size (e.g. 2 MiB huge pages).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageRange {
    /// First address (inclusive), a number or a `"0x…"` string.
    #[serde(with = "hexnum")]
    pub start: u64,
    /// End address (exclusive).
    #[serde(with = "hexnum")]
    pub end: u64,
    /// Page size within the range.
    pub page: ByteSize,
}

/// (De)serialises a u64 from a number or a hex string.
mod hexnum {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(n),
            Raw::S(s) => {
                let t = s.trim();
                let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => t.parse(),
                };
                r.map_err(|_| serde::de::Error::custom(format!("{s:?} is not an address")))
            }
        }
    }
}

fn default_base_page() -> ByteSize {
    ByteSize(4096)
}

/// A machine: its caches, TLBs, memory and costs.
///
/// Invariant once [`validate`](Machine::validate)d: the levels are numbered 1..=n without
/// gaps; each level is one unified cache or one instruction plus one data cache; every line
/// size, page size and set count is a power of two; line sizes do not shrink with depth;
/// every cost is finite and >= 0; every uncacheable range is whole lines of the largest
/// line size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// The machine's name, e.g. `"hp720-1993"`.
    pub name: String,
    /// One line about what it is and where the figures come from.
    #[serde(default)]
    pub description: String,
    /// What a tick is on this machine (e.g. `"cycles at 50 MHz"`, `"TSC ticks"`).
    #[serde(default = "default_unit")]
    pub tick_unit: String,
    /// The caches, any order.
    #[serde(rename = "cache")]
    pub caches: Vec<CacheConfig>,
    /// The TLBs (may be empty: no translation is modelled).
    #[serde(default, rename = "tlb")]
    pub tlbs: Vec<TlbConfig>,
    /// Memory.
    pub memory: MemoryConfig,
    /// The page size of addresses outside every `huge_pages` range.
    #[serde(default = "default_base_page")]
    pub base_page: ByteSize,
    /// Address ranges mapped with larger pages (they use the TLB of that page size).
    #[serde(default, rename = "huge_pages")]
    pub huge_pages: Vec<PageRange>,
    /// Address ranges that bypass the caches (may overlap; see [`UncacheableRange`]). More
    /// can be added while simulating, with
    /// [`Simulator::set_uncacheable`](crate::Simulator::set_uncacheable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncacheable: Vec<UncacheableRange>,
    /// The costs of cache-maintenance operations.
    #[serde(default)]
    pub maintenance: MaintenanceConfig,
    /// Remarks made while the machine was built (e.g. defaults assumed); shown by reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn default_unit() -> String {
    "ticks".to_string()
}

fn pow2_check(name: &str, what: &'static str, value: u64) -> Result<(), ConfigError> {
    if value.is_power_of_two() {
        Ok(())
    } else {
        Err(ConfigError::NotPowerOfTwo {
            name: name.to_string(),
            what,
            value,
            suggest: if value == 0 {
                1
            } else {
                1 << (63 - value.leading_zeros())
            },
        })
    }
}

fn cost_check(name: &str, what: &'static str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::Cost {
            name: name.to_string(),
            what,
            value,
        })
    }
}

/// Checks a set-associative geometry of `entries` entries in sets of `ways`; returns the
/// number of sets.
pub(crate) fn check_sets(
    name: &str,
    entries: u64,
    ways: Ways,
    replacement: Replacement,
) -> Result<u64, ConfigError> {
    if entries == 0 {
        return Err(ConfigError::Geometry {
            name: name.to_string(),
            detail: "holds no lines or entries; give a size of at least one line".into(),
        });
    }
    let w = ways.count(entries);
    if w == 0 || entries % w != 0 {
        return Err(ConfigError::Geometry {
            name: name.to_string(),
            detail: format!(
                "{entries} lines or entries do not divide into sets of {w} ways; pick ways that divide {entries}, or \"full\""
            ),
        });
    }
    let sets = entries / w;
    if !sets.is_power_of_two() {
        return Err(ConfigError::Geometry {
            name: name.to_string(),
            detail: format!(
                "{entries} lines or entries in sets of {w} ways make {sets} sets; the number of sets must be a power of two"
            ),
        });
    }
    if w > u64::from(u32::MAX) {
        return Err(ConfigError::Geometry {
            name: name.to_string(),
            detail: format!("{w} ways is too many"),
        });
    }
    if replacement == Replacement::TreePlru && !w.is_power_of_two() {
        return Err(ConfigError::Geometry {
            name: name.to_string(),
            detail: format!("tree-plru needs a power-of-two number of ways, not {w}; use lru"),
        });
    }
    Ok(sets)
}

impl Machine {
    /// Parses a machine from TOML (the preset format).
    pub fn from_toml_str(s: &str) -> Result<Machine, ConfigError> {
        let m: Machine = toml::from_str(s).map_err(|e| ConfigError::Parse(e.to_string()))?;
        m.validate()?;
        Ok(m)
    }

    /// Parses a machine from JSON (the same fields as the TOML presets).
    pub fn from_json_str(s: &str) -> Result<Machine, ConfigError> {
        let m: Machine = serde_json::from_str(s).map_err(|e| ConfigError::Parse(e.to_string()))?;
        m.validate()?;
        Ok(m)
    }

    /// This machine as TOML, to copy and edit.
    pub fn to_toml_string(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot write TOML: {e}\n"))
    }

    /// The number of cache levels.
    pub fn depth(&self) -> u32 {
        self.caches.iter().map(|c| c.level).max().unwrap_or(0)
    }

    /// The caches an instruction fetch (`ifetch`) or a data reference passes through, level 1
    /// first, as indices into [`caches`](Machine::caches). Valid only after validation.
    pub fn path(&self, ifetch: bool) -> Vec<usize> {
        (1..=self.depth())
            .filter_map(|l| {
                self.caches
                    .iter()
                    .position(|c| c.level == l && c.side.serves(ifetch))
            })
            .collect()
    }

    /// The page size of the page holding `addr`.
    pub fn page_bytes(&self, addr: u64) -> u64 {
        self.huge_pages
            .iter()
            .find(|r| (r.start..r.end).contains(&addr))
            .map_or(self.base_page.0, |r| r.page.0)
    }

    /// The largest line size of any cache (an uncacheable range is made of whole lines of
    /// it).
    pub fn largest_line(&self) -> u64 {
        self.caches.iter().map(|c| c.line.0).max().unwrap_or(1)
    }

    /// Checks that `r` can be made uncacheable on this machine: not empty, not past the end
    /// of the address space, and made of whole lines of [`largest_line`](Machine::largest_line).
    pub fn check_uncacheable(&self, r: &UncacheableRange) -> Result<(), ConfigError> {
        let line = self.largest_line();
        let bad = |detail: String| ConfigError::Geometry {
            name: "uncacheable".into(),
            detail,
        };
        if r.len.0 == 0 {
            return Err(bad(format!(
                "range at {:#x} is empty; give a len of at least one line ({line} bytes)",
                r.start
            )));
        }
        if r.start.checked_add(r.len.0).is_none() {
            return Err(bad(format!(
                "range {:#x} + {} runs past the end of the address space",
                r.start, r.len.0
            )));
        }
        if r.start % line != 0 || r.len.0 % line != 0 {
            return Err(bad(format!(
                "range {:#x} + {} is not made of whole {line}-byte lines (the largest line of the machine); align start and len to {line}",
                r.start, r.len.0
            )));
        }
        Ok(())
    }

    /// Checks everything [`Machine`]'s invariant promises; the error says what to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.caches.is_empty() {
            return Err(ConfigError::Hierarchy(
                "no caches; give at least one [[cache]]".into(),
            ));
        }
        for c in &self.caches {
            pow2_check(&c.name, "line", c.line.0)?;
            if c.size.0 % c.line.0 != 0 {
                return Err(ConfigError::Geometry {
                    name: c.name.clone(),
                    detail: format!(
                        "size {} is not a whole number of {}-byte lines",
                        c.size.0, c.line.0
                    ),
                });
            }
            if c.line.0 > c.size.0 {
                return Err(ConfigError::Geometry {
                    name: c.name.clone(),
                    detail: format!("line {} is larger than the cache {}", c.line, c.size),
                });
            }
            check_sets(&c.name, c.lines(), c.ways, c.replacement)?;
            cost_check(&c.name, "hit_ticks", c.hit_ticks)?;
            if c.level == 0 {
                return Err(ConfigError::Hierarchy(format!(
                    "{}: levels start at 1",
                    c.name
                )));
            }
        }
        let depth = self.depth();
        if depth as usize > crate::sim::MAX_LEVELS {
            return Err(ConfigError::Hierarchy(format!(
                "{depth} levels; at most {} are supported",
                crate::sim::MAX_LEVELS
            )));
        }
        for l in 1..=depth {
            let at: Vec<&CacheConfig> = self.caches.iter().filter(|c| c.level == l).collect();
            let unified = at.iter().filter(|c| c.side == Side::Unified).count();
            let instr = at.iter().filter(|c| c.side == Side::Instruction).count();
            let data = at.iter().filter(|c| c.side == Side::Data).count();
            let ok = (unified == 1 && instr == 0 && data == 0)
                || (unified == 0 && instr == 1 && data == 1);
            if !ok {
                return Err(ConfigError::Hierarchy(format!(
                    "level {l} has {unified} unified, {instr} instruction and {data} data caches; \
                     each level needs one unified cache, or one instruction and one data cache"
                )));
            }
        }
        for ifetch in [false, true] {
            let path = self.path(ifetch);
            for w in path.windows(2) {
                let (a, b) = (&self.caches[w[0]], &self.caches[w[1]]);
                if b.line.0 < a.line.0 {
                    return Err(ConfigError::Hierarchy(format!(
                        "{} has {}-byte lines but {} below it has {}-byte lines; lines must not shrink going down",
                        a.name, a.line.0, b.name, b.line.0
                    )));
                }
            }
        }
        cost_check("memory", "ticks", self.memory.ticks)?;
        cost_check("memory", "dirty_ticks", self.memory.dirty_ticks)?;
        cost_check("memory", "uncached_read_ticks", self.memory.uncached_read())?;
        cost_check(
            "memory",
            "uncached_write_ticks",
            self.memory.uncached_write(),
        )?;
        let mt = &self.maintenance;
        cost_check("maintenance", "line_ticks", mt.line_ticks)?;
        cost_check("maintenance", "walk_ticks", mt.walk_ticks)?;
        cost_check("maintenance", "writeback_ticks", mt.writeback(&self.memory))?;
        for r in &self.uncacheable {
            self.check_uncacheable(r)?;
        }
        pow2_check("base_page", "size", self.base_page.0)?;
        for t in &self.tlbs {
            pow2_check(&t.name, "page", t.page.0)?;
            if t.levels.is_empty() {
                return Err(ConfigError::Geometry {
                    name: t.name.clone(),
                    detail: "a TLB needs at least one level".into(),
                });
            }
            for lv in &t.levels {
                check_sets(&t.name, lv.entries, lv.ways, lv.replacement)?;
                cost_check(&t.name, "hit_ticks", lv.hit_ticks)?;
            }
            cost_check(&t.name, "miss_ticks", t.miss_ticks)?;
        }
        for r in &self.huge_pages {
            pow2_check("huge_pages", "page", r.page.0)?;
            if r.start >= r.end {
                return Err(ConfigError::Geometry {
                    name: "huge_pages".into(),
                    detail: format!("range {:#x}..{:#x} is empty", r.start, r.end),
                });
            }
        }
        Ok(())
    }
}
