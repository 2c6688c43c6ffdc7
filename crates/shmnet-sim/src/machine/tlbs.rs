//! The TLBs of a machine built from a calibration: from its `"tlbs"` (the geometry cpuid
//! gave `shmnet calibrate`), level by level, with AMD Zen 4's where it describes none.
//!
//! What the simulator's [`TlbConfig`] can express: one TLB per side (data, instruction) and
//! page size, each with private levels searched in order. So:
//!
//! - a unified second level (Intel's STLB, which serves loads, stores and instruction
//!   fetches, 4 KiB and 2 MiB pages alike) becomes a private copy in each TLB it serves:
//!   its entries are not competed for across sides and page sizes, and its reach is
//!   overstated;
//! - a structure that holds several page sizes is likewise copied per page size;
//! - Intel's store-only first-level data TLB is not modelled (the data TLB is the load
//!   TLB), nor are TLBs for 1 GiB pages (the simulator's huge pages are 2 MiB here);
//! - several structures of one level serving the same side and page size (Alder Lake's two
//!   1,024-entry STLB halves for 4 KiB pages) are merged into one of their summed entries;
//! - a level whose set count is not a power of two is shrunk to the power of two below.
//!
//! Invariant of [`build`]'s result: every level passes [`crate::config::check_sets`], and
//! the data TLB for 4 KiB and 2 MiB pages and the instruction TLB for 4 KiB pages exist.

use serde_json::Value;

use crate::config::{ByteSize, ConfigError, Replacement, Side, TlbConfig, TlbLevelConfig, Ways};

use super::L2_TLB_HIT_TICKS;

const KIB4: u64 = 4 << 10;
const MIB2: u64 = 2 << 20;
const GIB1: u64 = 1 << 30;

/// One entry of the calibration's `"tlbs"`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Listed {
    level: u32,
    kind: String,
    page: u64,
    entries: u64,
    /// 0: fully associative.
    ways: u64,
}

/// Parses `"tlbs"`; an entry without a field is an error, one of no entries is dropped.
pub(super) fn parse(v: Option<&Value>) -> Result<Vec<Listed>, ConfigError> {
    let Some(list) = v.and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for t in list {
        let num = |k: &str| {
            t.get(k).and_then(Value::as_u64).ok_or_else(|| {
                ConfigError::Parse(format!("calibration JSON: a TLB without \"{k}\""))
            })
        };
        let l = Listed {
            level: num("level")? as u32,
            kind: t
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ConfigError::Parse("calibration JSON: a TLB without \"type\"".into())
                })?
                .to_string(),
            page: num("page_bytes")?,
            entries: num("entries")?,
            ways: num("ways")?,
        };
        if l.entries > 0 {
            out.push(l);
        }
    }
    Ok(out)
}

/// Where a machine's TLB geometry came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TlbSource {
    /// All of it from the calibration's `"tlbs"` (cpuid).
    Cpuid,
    /// From cpuid, with some levels assumed from Zen 4.
    Mixed,
    /// All of it assumed from Zen 4.
    Zen4,
}

/// Zen 4's levels: (entries, ways; 0 = full) for the first and second level.
const ZEN4_DTLB: [(u64, u64); 2] = [(72, 0), (3072, 12)];
const ZEN4_ITLB: [(u64, u64); 2] = [(64, 0), (512, 8)];

/// One TLB to build.
struct Spec {
    name: &'static str,
    side: Side,
    page: u64,
    miss: f64,
    /// Zen 4's levels where cpuid describes none; `None`: only built from cpuid.
    zen4: Option<[(u64, u64); 2]>,
}

/// The TLBs, their source, and notes on what was read and assumed and what the simulator
/// cannot express.
pub(super) fn build(
    listed: &[Listed],
    miss_4k: f64,
    miss_2m: f64,
    notes: &mut Vec<String>,
) -> (Vec<TlbConfig>, TlbSource) {
    let specs = [
        Spec {
            name: "DTLB",
            side: Side::Data,
            page: KIB4,
            miss: miss_4k,
            zen4: Some(ZEN4_DTLB),
        },
        Spec {
            name: "DTLB2M",
            side: Side::Data,
            page: MIB2,
            miss: miss_2m,
            zen4: Some(ZEN4_DTLB),
        },
        Spec {
            name: "ITLB",
            side: Side::Instruction,
            page: KIB4,
            miss: miss_4k,
            zen4: Some(ZEN4_ITLB),
        },
        Spec {
            name: "ITLB2M",
            side: Side::Instruction,
            page: MIB2,
            miss: miss_2m,
            zen4: None,
        },
    ];
    if listed.is_empty() {
        notes.push(
            "TLB geometry: the calibration lists no TLBs (an older `shmnet calibrate`, or cpuid described none); assumed AMD Zen 4's: data TLB of 72 entries fully associative then 3,072 entries 12-way, for 4 KiB and again for 2 MiB pages; instruction TLB of 64 entries fully associative then 512 entries 8-way, 4 KiB pages".into(),
        );
        let tlbs = specs
            .iter()
            .filter_map(|s| {
                let z = s.zen4?;
                Some(tlb(
                    s,
                    (0..).zip(z).map(|(d, (e, w))| level(e, w, d)).collect(),
                ))
            })
            .collect();
        return (tlbs, TlbSource::Zen4);
    }
    let mut tlbs = Vec::new();
    let (mut read, mut assumed) = (0, 0);
    let mut read_lines = Vec::new();
    let mut levels_of = |s: &Spec, notes: &mut Vec<String>| -> Option<Vec<TlbLevelConfig>> {
        let mut top: Vec<u32> = listed
            .iter()
            .filter(|t| t.page == s.page)
            .map(|t| t.level)
            .collect();
        top.sort_unstable();
        top.dedup();
        let max_level = top.last().copied().unwrap_or(0).max(2);
        let mut out = Vec::new();
        for lv in 1..=max_level {
            match pick(listed, lv, s.side, s.page) {
                Some(p) => {
                    read += 1;
                    read_lines.push(format!("{} L{lv}: {}", s.name, p.from));
                    out.push(fit(s.name, lv, p.entries, p.ways, notes));
                }
                None if lv <= 2 => match s.zen4 {
                    Some(z) => {
                        assumed += 1;
                        let (e, w) = z[lv as usize - 1];
                        notes.push(format!(
                            "{}: cpuid describes no level-{lv} {} TLB for {} pages; assumed AMD Zen 4's ({e} entries, {})",
                            s.name,
                            side_word(s.side),
                            page_word(s.page),
                            ways_word(w)
                        ));
                        out.push(level(e, w, lv - 1));
                    }
                    None if lv == 1 => return None,
                    None => {}
                },
                None => {}
            }
        }
        Some(out)
    };
    for s in &specs {
        match levels_of(s, notes) {
            Some(levels) => tlbs.push(tlb(s, levels)),
            None => notes.push(format!(
                "no {} TLB for {} pages: cpuid describes none (instruction fetches from such pages are not translated)",
                side_word(s.side),
                page_word(s.page)
            )),
        }
    }
    notes.push(format!(
        "TLB geometry read from cpuid (the calibration's \"tlbs\"): {}",
        read_lines.join("; ")
    ));
    if listed
        .iter()
        .any(|t| t.kind == "unified" && matches!(t.page, KIB4 | MIB2))
    {
        notes.push("a unified TLB serves data and instruction fetches (and where cpuid lists it so, 4 KiB and 2 MiB pages) in hardware; the simulator gives each TLB its own copy, so they do not compete for its entries and its reach is overstated".into());
    }
    let stores: Vec<&Listed> = listed.iter().filter(|t| t.kind == "store").collect();
    if !stores.is_empty() {
        notes.push(format!(
            "cpuid's store-only data TLB ({} entries) is not modelled: the simulator has one data TLB per page size, and stores translate in the load TLB",
            stores[0].entries
        ));
    }
    if listed.iter().any(|t| t.page == GIB1) {
        notes.push("cpuid's TLBs for 1 GiB pages are not modelled (the simulator's huge pages here are 2 MiB)".into());
    }
    let source = match (read, assumed) {
        (_, 0) => TlbSource::Cpuid,
        (0, _) => TlbSource::Zen4,
        _ => TlbSource::Mixed,
    };
    (tlbs, source)
}

/// A level cpuid describes, merged from its structures.
struct Picked {
    entries: u64,
    ways: u64,
    from: String,
}

/// The structures of `level` that translate `page` for `side`: the side's own (`data` or
/// `load` for data, `instruction`) if any, else `unified`; several are merged.
fn pick(listed: &[Listed], level: u32, side: Side, page: u64) -> Option<Picked> {
    let own: &[&str] = match side {
        Side::Data => &["data", "load"],
        Side::Instruction => &["instruction"],
        Side::Unified => &[],
    };
    let at = |kinds: &[&str]| -> Vec<&Listed> {
        listed
            .iter()
            .filter(|t| t.level == level && t.page == page && kinds.contains(&t.kind.as_str()))
            .collect()
    };
    let mut found = at(own);
    if found.is_empty() {
        found = at(&["unified"]);
    }
    let first = found.first()?;
    let entries: u64 = found.iter().map(|t| t.entries).sum();
    let ways = if found.iter().all(|t| t.ways == 0) {
        0
    } else {
        found.iter().map(|t| t.ways).max().unwrap_or(0)
    };
    let mut from = format!("{} entries, {} ({})", entries, ways_word(ways), first.kind);
    if found.len() > 1 {
        let parts: Vec<String> = found.iter().map(|t| t.entries.to_string()).collect();
        from.push_str(&format!(
            ", {} structures merged: {}",
            found.len(),
            parts.join(" + ")
        ));
    }
    Some(Picked {
        entries,
        ways,
        from,
    })
}

/// A level of `entries` in sets of `ways` (0: full), shrunk to a power-of-two set count
/// with a note where needed.
fn fit(name: &str, lv: u32, entries: u64, ways: u64, notes: &mut Vec<String>) -> TlbLevelConfig {
    if ways == 0 || ways >= entries {
        return level(entries, 0, lv - 1);
    }
    let sets = entries / ways;
    if entries % ways == 0 && sets.is_power_of_two() {
        return level(entries, ways, lv - 1);
    }
    let fixed = 1u64 << (63 - sets.max(1).leading_zeros());
    notes.push(format!(
        "{name} L{lv}: {entries} entries in {ways}-way sets make {} sets, not a power of two; simulated with {fixed} sets ({} entries)",
        entries as f64 / ways as f64,
        fixed * ways
    ));
    level(fixed * ways, ways, lv - 1)
}

/// A level; `depth` 0 is the first (looked up with the cache, no cost), deeper ones cost
/// [`L2_TLB_HIT_TICKS`] (assumed).
fn level(entries: u64, ways: u64, depth: u32) -> TlbLevelConfig {
    TlbLevelConfig {
        entries,
        ways: if ways == 0 {
            Ways::FULL
        } else {
            Ways::N(ways as u32)
        },
        hit_ticks: if depth == 0 { 0.0 } else { L2_TLB_HIT_TICKS },
        replacement: Replacement::Lru,
    }
}

fn tlb(s: &Spec, levels: Vec<TlbLevelConfig>) -> TlbConfig {
    TlbConfig {
        name: s.name.into(),
        side: s.side,
        page: ByteSize(s.page),
        levels,
        miss_ticks: s.miss,
    }
}

fn side_word(s: Side) -> &'static str {
    match s {
        Side::Data => "data",
        Side::Instruction => "instruction",
        Side::Unified => "unified",
    }
}

fn page_word(p: u64) -> &'static str {
    match p {
        KIB4 => "4 KiB",
        MIB2 => "2 MiB",
        _ => "other",
    }
}

fn ways_word(w: u64) -> String {
    if w == 0 {
        "fully associative".into()
    } else {
        format!("{w}-way")
    }
}
