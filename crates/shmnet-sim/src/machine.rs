//! Machine presets and the ways a machine is named on the command line: a preset name, a
//! preset file (TOML or JSON), or the JSON that `shmnet calibrate --json` prints.
//!
//! The presets are the files in `crates/shmnet-sim/presets/`, embedded in the binary;
//! `shmnet sim machine NAME` (or [`Machine::to_toml_string`]) prints one to copy and edit.

use std::path::Path;

use serde_json::Value;

use crate::config::{
    ByteSize, CacheConfig, ConfigError, Machine, MaintenanceConfig, MemoryConfig, Replacement,
    Side, Ways, WritePolicy,
};

mod tlbs;
use tlbs::TlbSource;

/// The preset names, with their embedded text.
pub const PRESETS: [(&str, &str); 11] = [
    ("hp720-1993", include_str!("../presets/hp720-1993.toml")),
    (
        "sgi-r4400-1994",
        include_str!("../presets/sgi-r4400-1994.toml"),
    ),
    ("seed001-1996", include_str!("../presets/seed001-1996.toml")),
    ("seed001-1998", include_str!("../presets/seed001-1998.toml")),
    (
        "pentium4-2002",
        include_str!("../presets/pentium4-2002.toml"),
    ),
    ("core2-2006", include_str!("../presets/core2-2006.toml")),
    ("nehalem-2009", include_str!("../presets/nehalem-2009.toml")),
    ("unity-2010", include_str!("../presets/unity-2010.toml")),
    ("skylake-2015", include_str!("../presets/skylake-2015.toml")),
    ("zen4-2022", include_str!("../presets/zen4-2022.toml")),
    ("this-machine", include_str!("../presets/this-machine.json")),
];

/// Why a machine could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// Neither a preset name nor an existing file.
    #[error(
        "{0:?} is neither a preset ({presets}) nor a file; give a preset name, a preset file (.toml or .json) or the output of `shmnet calibrate --json`",
        presets = preset_names().join(", ")
    )]
    Unknown(String),
    /// The file could not be read.
    #[error("reading {path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        err: std::io::Error,
    },
    /// The description is wrong.
    #[error("{path}: {err}")]
    Config {
        /// The preset or file.
        path: String,
        /// What is wrong.
        err: ConfigError,
    },
}

/// The names of the presets.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

/// The Zen 4 cache geometry assumed when a calibration gives no `"caches"`.
const DEFAULT_CACHES: [(u32, &str, u64, u64, u64); 4] = [
    (1, "data", 32 << 10, 64, 8),
    (1, "instruction", 32 << 10, 64, 8),
    (2, "unified", 1 << 20, 64, 8),
    (3, "unified", 32 << 20, 64, 16),
];

/// Latencies assumed when a calibration lacks them (ticks).
const DEFAULT_LOAD: [(&str, f64); 5] = [
    ("l1", 4.0),
    ("l2", 14.0),
    ("l3", 50.0),
    ("dram", 300.0),
    ("dram_dirty", 320.0),
];

/// Ticks assumed for a first-level TLB miss that hits the second level, whatever the CPU
/// (Zen 4: about 7 cycles; an assumption, as a calibration does not measure it).
pub const L2_TLB_HIT_TICKS: f64 = 7.0;

impl Machine {
    /// The preset named `name`.
    pub fn preset(name: &str) -> Option<Machine> {
        let text = PRESETS.iter().find(|(n, _)| *n == name)?.1;
        let m = if name == "this-machine" {
            let mut m = Machine::from_calibration_json(text).ok()?;
            m.description = "the example calibration shipped with shmnet-sim: AMD Zen 4 caches and latencies, TLB geometry assumed (AMD Zen 4: 72-entry fully associative L1 DTLB, 3,072-entry 12-way L2 DTLB, 4 KiB and 2 MiB pages); not this machine's figures".into();
            m.notes.push(
                "built from the example calibration shipped with shmnet-sim (AMD Zen 4 figures, not this machine's: it lists no TLBs, so Zen 4's are assumed); for this machine's own caches, TLBs (from cpuid) and latencies, run `shmnet calibrate --json > cal.json` and pass --machine cal.json"
                    .into(),
            );
            m
        } else {
            Machine::from_toml_str(text).ok()?
        };
        Some(m)
    }

    /// A preset name, or a path to a preset file (`.toml`, or JSON with the preset's fields)
    /// or to the output of `shmnet calibrate --json`.
    pub fn load(spec: &str) -> Result<Machine, MachineError> {
        if PRESETS.iter().any(|(n, _)| *n == spec) {
            return Machine::preset(spec).ok_or_else(|| MachineError::Unknown(spec.into()));
        }
        let path = Path::new(spec);
        if !path.exists() {
            return Err(MachineError::Unknown(spec.into()));
        }
        let text = std::fs::read_to_string(path).map_err(|err| MachineError::Io {
            path: spec.into(),
            err,
        })?;
        Machine::from_text(&text).map_err(|err| MachineError::Config {
            path: spec.into(),
            err,
        })
    }

    /// Parses a machine from text in any accepted form: TOML preset, JSON preset, or
    /// calibration JSON (recognised by its `"line_load_ticks"`, `"timer"` or
    /// `"caches"` with `"size_bytes"`).
    pub fn from_text(text: &str) -> Result<Machine, ConfigError> {
        if !text.trim_start().starts_with('{') {
            return Machine::from_toml_str(text);
        }
        let v: Value = serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let calibration = v.get("line_load_ticks").is_some()
            || v.get("timer").is_some()
            || v.get("tlb_miss_ticks").is_some();
        if calibration {
            Machine::from_calibration_json(text)
        } else {
            Machine::from_json_str(text)
        }
    }

    /// Builds a machine from the JSON `shmnet calibrate --json` prints: the hierarchy from
    /// `"caches"` (Zen 4 defaults when absent, with a note saying so), latencies from
    /// `"line_load_ticks"` (`l1`, `l2`, `l3` per level, `dram` and `dram_dirty` for memory),
    /// TLB miss costs from `"tlb_miss_ticks"` (`4k`, `2m`), and the TLB geometry from
    /// `"tlbs"` (what cpuid told the calibrator: level, type, page_bytes, entries, ways)
    /// when it is present and not empty — see [`tlbs`] for what the simulator can express of
    /// it — else AMD Zen 4's: a data TLB of 72 entries fully associative, then 3,072 entries
    /// 12-way, for 4 KiB pages and again for 2 MiB pages, an instruction TLB of 64 then 512
    /// 8-way entries. A TLB level cpuid does not describe is Zen 4's, with a note.
    ///
    /// Assumed, and editable in the printed TOML: every cache write-back LRU; every TLB LRU;
    /// a first-level TLB miss that hits the second level costs [`L2_TLB_HIT_TICKS`]. A
    /// geometry whose set count is not a power of two is shrunk to the power of two below,
    /// with a note. The notes say, group by group, what was read (and from where), what was
    /// measured and what was assumed; the description names Zen 4 only where it is assumed.
    pub fn from_calibration_json(text: &str) -> Result<Machine, ConfigError> {
        let v: Value = serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let mut notes = Vec::new();
        let load = v.get("line_load_ticks");
        let mut caches_assumed = false;
        let raw_caches: Vec<(u32, String, u64, u64, u64)> = match v
            .get("caches")
            .and_then(Value::as_array)
        {
            Some(list) if !list.is_empty() => list
                .iter()
                .map(|c| {
                    let num = |k: &str| c.get(k).and_then(Value::as_u64);
                    Ok((
                        num("level").ok_or_else(|| bad("a cache without \"level\""))? as u32,
                        c.get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("unified")
                            .to_string(),
                        num("size_bytes").ok_or_else(|| bad("a cache without \"size_bytes\""))?,
                        num("line_bytes").unwrap_or(64),
                        num("ways").unwrap_or(0),
                    ))
                })
                .collect::<Result<_, ConfigError>>()?,
            _ => {
                caches_assumed = true;
                notes.push(
                        "the calibration lists no caches; assumed AMD Zen 4's: 32 KiB 8-way L1 I and D, 1 MiB 8-way L2, 32 MiB 16-way L3, 64-byte lines"
                            .into(),
                    );
                DEFAULT_CACHES
                    .iter()
                    .map(|&(l, t, s, b, w)| (l, t.to_string(), s, b, w))
                    .collect()
            }
        };
        let cache_list: Vec<String> = raw_caches
            .iter()
            .map(|(level, kind, size, _, ways)| {
                format!("L{level} {kind} {} KiB {ways}-way", size >> 10)
            })
            .collect();
        let mut caches = Vec::new();
        for (level, kind, size, line, ways) in raw_caches {
            let side = match kind.as_str() {
                "data" => Side::Data,
                "instruction" => Side::Instruction,
                _ => Side::Unified,
            };
            let name = match side {
                Side::Data => format!("L{level}D"),
                Side::Instruction => format!("L{level}I"),
                Side::Unified => format!("L{level}"),
            };
            let line = if line.is_power_of_two() { line } else { 64 };
            let lines = (size / line).max(1);
            let ways = if ways == 0 || ways > lines {
                lines
            } else {
                ways
            };
            let mut sets = (lines / ways).max(1);
            if !sets.is_power_of_two() {
                let fixed = 1u64 << (63 - sets.leading_zeros());
                notes.push(format!(
                    "{name}: {size} bytes in {ways}-way sets of {line}-byte lines make {sets} sets, not a power of two; simulated with {fixed} sets ({} bytes)",
                    fixed * ways * line
                ));
                sets = fixed;
            }
            let hit = tick(load, &format!("l{level}"), &mut notes);
            let mut c = CacheConfig::new(
                &name,
                level,
                side,
                sets * ways * line,
                line,
                Ways::N(ways as u32),
                hit,
            );
            c.replacement = Replacement::Lru;
            c.write = WritePolicy::WriteBack;
            caches.push(c);
        }
        // A level 1 with only one side: give it the other side too.
        let l1_data = caches.iter().any(|c| c.level == 1 && c.side == Side::Data);
        let l1_instr = caches
            .iter()
            .any(|c| c.level == 1 && c.side == Side::Instruction);
        if l1_data != l1_instr {
            let from = caches
                .iter()
                .find(|c| c.level == 1 && c.side != Side::Unified)
                .cloned()
                .ok_or_else(|| bad("no level-1 cache"))?;
            let mut twin = from.clone();
            twin.side = if l1_data {
                Side::Instruction
            } else {
                Side::Data
            };
            twin.name = if l1_data { "L1I".into() } else { "L1D".into() };
            notes.push(format!(
                "the calibration has no level-1 {} cache; assumed one like {}",
                if l1_data { "instruction" } else { "data" },
                from.name
            ));
            caches.push(twin);
        }
        let slowest = monotone_levels(&mut caches, &mut notes);
        let mut dram = tick(load, "dram", &mut notes);
        if dram < slowest {
            notes.push(format!(
                "memory measured at {dram:.1} ticks, below the last cache level's {slowest:.1} (a noisy calibration): simulated at {slowest:.1}"
            ));
            dram = slowest;
        }
        let mut dram_dirty = tick(load, "dram_dirty", &mut notes);
        if dram_dirty < dram {
            notes.push(format!(
                "a dirty miss measured at {dram_dirty:.1} ticks, below a clean one's {dram:.1}: simulated at {dram:.1}"
            ));
            dram_dirty = dram;
        }
        let tlb = v.get("tlb_miss_ticks");
        let miss_4k = tlb_tick(tlb, "4k", 30.0, &mut notes);
        let miss_2m = tlb_tick(tlb, "2m", miss_4k, &mut notes);
        let listed = tlbs::parse(v.get("tlbs"))?;
        let (tlbs, tlb_source) = tlbs::build(&listed, miss_4k, miss_2m, &mut notes);
        let cpu = v.get("cpu");
        let field = |k: &str| {
            cpu.and_then(|c| c.get(k))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let on = match (field("brand"), field("vendor")) {
            (Some(b), _) | (None, Some(b)) => format!(" on {b}"),
            (None, None) => String::new(),
        };
        let cache_from = match (
            caches_assumed,
            v.get("cache_source").and_then(Value::as_str),
        ) {
            (true, _) => "assumed (AMD Zen 4)".to_string(),
            (false, Some("sysfs")) => "read from the kernel (sysfs)".to_string(),
            (false, Some("cpuid")) => "read from cpuid".to_string(),
            (false, _) => "from the calibration's \"caches\" (source not recorded)".to_string(),
        };
        notes.push(format!("caches {cache_from}: {}", cache_list.join(", ")));
        let measured: Vec<String> = ["l1", "l2", "l3", "dram", "dram_dirty"]
            .iter()
            .filter_map(|k| {
                let x = load.and_then(|l| l.get(*k)).and_then(Value::as_f64)?;
                Some(format!("{k} {x:.1}"))
            })
            .chain(["4k", "2m"].iter().filter_map(|k| {
                let x = tlb.and_then(|t| t.get(*k)).and_then(Value::as_f64)?;
                Some(format!("page walk {k} {x:.1}"))
            }))
            .collect();
        if !measured.is_empty() {
            notes.push(format!(
                "measured by the calibration (ticks): {} (line_load_ticks: cache hit and memory costs; tlb_miss_ticks: a TLB miss's page walk)",
                measured.join(", ")
            ));
        }
        notes.push(format!(
            "assumed, not measured: a first-level TLB miss that hits the second level costs {L2_TLB_HIT_TICKS} ticks; LRU replacement in every cache and TLB; write-back, write-allocate caches; caches and TLBs filled at every level that missed (non-inclusive)"
        ));
        let tlb_words = match tlb_source {
            TlbSource::Cpuid => "TLBs from cpuid".to_string(),
            TlbSource::Mixed => {
                "TLBs from cpuid, the levels it did not describe assumed from AMD Zen 4".to_string()
            }
            TlbSource::Zen4 => "TLB geometry assumed (AMD Zen 4: 72-entry fully associative L1 DTLB, 3,072-entry 12-way L2 DTLB, 4 KiB and 2 MiB pages)".to_string(),
        };
        let cache_words = if caches_assumed {
            "caches assumed (AMD Zen 4)".to_string()
        } else {
            format!("caches {}", cache_from.trim_start_matches("read "))
        };
        let m = Machine {
            name: "this-machine".into(),
            description: format!(
                "built from `shmnet calibrate --json`{on}: {cache_words}; {tlb_words}; latencies measured (the notes say what is assumed)"
            ),
            tick_unit: "TSC ticks".into(),
            caches,
            tlbs,
            memory: MemoryConfig::new(dram, dram_dirty.max(dram)),
            base_page: ByteSize(4096),
            huge_pages: Vec::new(),
            uncacheable: Vec::new(),
            maintenance: MaintenanceConfig::default(),
            notes,
        };
        m.validate()?;
        Ok(m)
    }
}

/// `line_load_ticks.KEY`, or the default with a note.
fn tick(load: Option<&Value>, key: &str, notes: &mut Vec<String>) -> f64 {
    match load.and_then(|l| l.get(key)).and_then(Value::as_f64) {
        Some(x) => x,
        None => {
            let d = DEFAULT_LOAD
                .iter()
                .find(|(k, _)| *k == key)
                .map_or(DEFAULT_LOAD[3].1, |(_, x)| *x);
            notes.push(format!(
                "line_load_ticks.{key} missing from the calibration; assumed {d}"
            ));
            d
        }
    }
}

/// `tlb_miss_ticks.KEY`, or `default` with a note.
fn tlb_tick(tlb: Option<&Value>, key: &str, default: f64, notes: &mut Vec<String>) -> f64 {
    match tlb.and_then(|t| t.get(key)).and_then(Value::as_f64) {
        Some(x) => x,
        None => {
            notes.push(format!(
                "tlb_miss_ticks.{key} missing from the calibration; assumed {default}"
            ));
            default
        }
    }
}

fn bad(s: &str) -> ConfigError {
    ConfigError::Parse(format!("calibration JSON: {s}"))
}

/// Makes the calibrated hit costs grow with the level, as they do in every hierarchy: a
/// level measured faster than the one above it (a calibration taken on a busy machine can
/// be) is simulated at the level above's cost, with a note. Without this a larger working
/// set could cost less per read, where LRU caches only ever miss more. Returns the slowest
/// level's cost (0 with no caches).
fn monotone_levels(caches: &mut [CacheConfig], notes: &mut Vec<String>) -> f64 {
    let mut order: Vec<usize> = (0..caches.len()).collect();
    order.sort_by_key(|&i| caches[i].level);
    // Per level, the slowest of its caches (L1D and L1I) bounds every level below.
    let mut floor = 0.0f64;
    let mut k = 0;
    while k < order.len() {
        let level = caches[order[k]].level;
        let same: Vec<usize> = order[k..]
            .iter()
            .copied()
            .take_while(|&i| caches[i].level == level)
            .collect();
        let mut slowest_here = 0.0f64;
        for &i in &same {
            let c = &mut caches[i];
            if c.hit_ticks < floor {
                notes.push(format!(
                    "{} measured at {:.1} ticks, below the level above's {floor:.1} (a noisy calibration): simulated at {floor:.1}",
                    c.name, c.hit_ticks
                ));
                c.hit_ticks = floor;
            }
            slowest_here = slowest_here.max(c.hit_ticks);
        }
        floor = floor.max(slowest_here);
        k += same.len();
    }
    floor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_loads() {
        for name in preset_names() {
            let m = Machine::preset(name).unwrap_or_else(|| panic!("{name}"));
            m.validate().unwrap();
            // And survives a round trip through TOML, as a user would copy it.
            let again = Machine::from_toml_str(&m.to_toml_string()).unwrap();
            assert_eq!(again.caches, m.caches, "{name}");
            assert_eq!(again.tlbs, m.tlbs, "{name}");
        }
    }

    #[test]
    fn calibration_without_caches_falls_back_and_says_so() {
        let m = Machine::from_calibration_json(
            r#"{"line_load_ticks": {"l1": 4.0, "l2": 12.0, "dram": 200.0, "dram_dirty": 210.0}}"#,
        )
        .unwrap();
        assert_eq!(m.depth(), 3);
        assert!(m.notes.iter().any(|n| n.contains("no caches")));
        assert!(m.notes.iter().any(|n| n.contains("l3")));
        assert_eq!(m.memory.ticks, 200.0);
    }

    #[test]
    fn a_noisy_calibration_is_made_to_grow_with_the_level_and_says_so() {
        // L3 measured faster than L2, memory faster than L3, a dirty miss faster than a
        // clean one: each is simulated at the level above's cost.
        let m = Machine::from_calibration_json(
            r#"{"line_load_ticks": {"l1": 4, "l2": 20, "l3": 15, "dram": 12, "dram_dirty": 10},
                "caches": [{"level": 1, "type": "data", "size_bytes": 32768, "line_bytes": 64, "ways": 8},
                           {"level": 1, "type": "instruction", "size_bytes": 32768, "line_bytes": 64, "ways": 8},
                           {"level": 2, "type": "unified", "size_bytes": 524288, "line_bytes": 64, "ways": 8},
                           {"level": 3, "type": "unified", "size_bytes": 33554432, "line_bytes": 64, "ways": 16}]}"#,
        )
        .unwrap();
        let hit = |name: &str| m.caches.iter().find(|c| c.name == name).unwrap().hit_ticks;
        assert_eq!(hit("L1D"), 4.0);
        assert_eq!(hit("L2"), 20.0);
        assert_eq!(hit("L3"), 20.0);
        assert_eq!(m.memory.ticks, 20.0);
        assert!(
            m.notes.iter().any(|n| n.contains("L3 measured at 15.0")),
            "{:?}",
            m.notes
        );
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("memory measured at 12.0"))
        );
        // A calibration that already grows is left as it is.
        let m = Machine::from_calibration_json(ALDER_LAKE).unwrap();
        assert!(
            !m.notes.iter().any(|n| n.contains("noisy")),
            "{:?}",
            m.notes
        );
    }

    #[test]
    fn calibration_with_odd_geometry_is_made_simulable() {
        let m = Machine::from_calibration_json(
            r#"{"line_load_ticks": {"l1": 4, "l2": 14, "dram": 300, "dram_dirty": 320},
                "tlb_miss_ticks": {"4k": 30, "2m": 1},
                "caches": [{"level": 1, "type": "data", "size_bytes": 49152, "line_bytes": 64, "ways": 12},
                           {"level": 2, "type": "unified", "size_bytes": 2097152, "line_bytes": 64, "ways": 16}]}"#,
        )
        .unwrap();
        assert!(m.caches.iter().any(|c| c.name == "L1I"), "twin made");
        assert!(m.notes.iter().any(|n| n.contains("no level-1 instruction")));
        crate::Simulator::new(&m).unwrap();
    }

    /// What `shmnet calibrate --json` prints on an Intel Core i7-12700K (leaf 0x18 as
    /// shmnet-lab's cpuid tests decode it), less the figures these tests do not need.
    const ALDER_LAKE: &str = r#"{"line_load_ticks": {"l1": 5, "l2": 16, "l3": 60, "dram": 350, "dram_dirty": 360},
        "tlb_miss_ticks": {"4k": 25, "2m": 3},
        "cpu": {"vendor": "GenuineIntel", "brand": "12th Gen Intel(R) Core(TM) i7-12700K"},
        "cache_source": "sysfs",
        "caches": [{"level": 1, "type": "data", "size_bytes": 49152, "line_bytes": 64, "ways": 12},
                   {"level": 1, "type": "instruction", "size_bytes": 32768, "line_bytes": 64, "ways": 8},
                   {"level": 2, "type": "unified", "size_bytes": 1310720, "line_bytes": 64, "ways": 10}],
        "tlbs": [{"level": 1, "type": "instruction", "page_bytes": 4096, "entries": 256, "ways": 8},
                 {"level": 1, "type": "load", "page_bytes": 4096, "entries": 64, "ways": 4},
                 {"level": 1, "type": "store", "page_bytes": 4096, "entries": 16, "ways": 0},
                 {"level": 1, "type": "instruction", "page_bytes": 2097152, "entries": 32, "ways": 8},
                 {"level": 1, "type": "load", "page_bytes": 2097152, "entries": 32, "ways": 4},
                 {"level": 1, "type": "store", "page_bytes": 2097152, "entries": 16, "ways": 0},
                 {"level": 1, "type": "load", "page_bytes": 1073741824, "entries": 8, "ways": 0},
                 {"level": 2, "type": "unified", "page_bytes": 4096, "entries": 1024, "ways": 8},
                 {"level": 2, "type": "unified", "page_bytes": 4096, "entries": 1024, "ways": 8},
                 {"level": 2, "type": "unified", "page_bytes": 2097152, "entries": 1024, "ways": 8},
                 {"level": 2, "type": "unified", "page_bytes": 1073741824, "entries": 1024, "ways": 8}]}"#;

    fn geometry(m: &Machine, name: &str) -> Vec<(u64, Ways, f64)> {
        let t = m
            .tlbs
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        t.levels
            .iter()
            .map(|l| (l.entries, l.ways, l.hit_ticks))
            .collect()
    }

    #[test]
    fn calibration_with_intel_tlbs_builds_them() {
        let m = Machine::from_calibration_json(ALDER_LAKE).unwrap();
        let h = L2_TLB_HIT_TICKS;
        // The load TLB, then both STLB halves merged (2 × 1,024, 8-way).
        assert_eq!(
            geometry(&m, "DTLB"),
            [(64, Ways::N(4), 0.0), (2048, Ways::N(8), h)]
        );
        assert_eq!(
            geometry(&m, "DTLB2M"),
            [(32, Ways::N(4), 0.0), (1024, Ways::N(8), h)]
        );
        // The unified STLB serves instruction fetches too.
        assert_eq!(
            geometry(&m, "ITLB"),
            [(256, Ways::N(8), 0.0), (2048, Ways::N(8), h)]
        );
        assert_eq!(
            geometry(&m, "ITLB2M"),
            [(32, Ways::N(8), 0.0), (1024, Ways::N(8), h)]
        );
        let dtlb2m = m.tlbs.iter().find(|t| t.name == "DTLB2M").unwrap();
        assert_eq!((dtlb2m.page.0, dtlb2m.miss_ticks), (2 << 20, 3.0));
        assert!(!m.description.contains("Zen"), "{}", m.description);
        assert!(m.description.contains("i7-12700K") && m.description.contains("TLBs from cpuid"));
        let has = |s: &str| m.notes.iter().any(|n| n.contains(s));
        assert!(has("TLB geometry read from cpuid"), "{:#?}", m.notes);
        assert!(has("caches read from the kernel (sysfs)"));
        assert!(has("measured by the calibration") && has("page walk 4k 25.0"));
        assert!(has("assumed, not measured") && has("LRU"));
        assert!(has("store-only") && has("unified TLB") && has("1 GiB"));
        assert!(
            !m.notes.iter().any(|n| n.contains("Zen 4")),
            "{:#?}",
            m.notes
        );
        crate::Simulator::new(&m).unwrap();
        let again = Machine::from_toml_str(&m.to_toml_string()).unwrap();
        assert_eq!(again.tlbs, m.tlbs);
    }

    #[test]
    fn calibration_without_tlbs_assumes_zen4_and_says_so() {
        let m = Machine::from_calibration_json(
            r#"{"line_load_ticks": {"l1": 4, "l2": 14, "l3": 50, "dram": 300, "dram_dirty": 320},
                "tlb_miss_ticks": {"4k": 30, "2m": 1}}"#,
        )
        .unwrap();
        assert_eq!(
            geometry(&m, "DTLB"),
            [(72, Ways::FULL, 0.0), (3072, Ways::N(12), L2_TLB_HIT_TICKS)]
        );
        assert_eq!(
            geometry(&m, "ITLB"),
            [(64, Ways::FULL, 0.0), (512, Ways::N(8), L2_TLB_HIT_TICKS)]
        );
        assert_eq!(m.tlbs.len(), 3, "no 2 MiB instruction TLB, as before");
        assert!(m.description.contains("TLB geometry assumed (AMD Zen 4"));
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("lists no TLBs") && n.contains("assumed AMD Zen 4")),
            "{:#?}",
            m.notes
        );
        // An empty list is the same as none.
        let empty = Machine::from_calibration_json(
            r#"{"tlb_miss_ticks": {"4k": 30, "2m": 1}, "tlbs": []}"#,
        )
        .unwrap();
        assert_eq!(empty.tlbs, m.tlbs);
    }

    #[test]
    fn tlb_levels_cpuid_does_not_describe_are_assumed_level_by_level() {
        let m = Machine::from_calibration_json(
            r#"{"line_load_ticks": {"l1": 4},
                "tlbs": [{"level": 1, "type": "data", "page_bytes": 4096, "entries": 48, "ways": 0},
                         {"level": 2, "type": "data", "page_bytes": 4096, "entries": 1536, "ways": 6}]}"#,
        )
        .unwrap();
        // 1,536 / 6 = 256 sets: kept.
        assert_eq!(
            geometry(&m, "DTLB"),
            [(48, Ways::FULL, 0.0), (1536, Ways::N(6), L2_TLB_HIT_TICKS)]
        );
        assert_eq!(geometry(&m, "DTLB2M")[0], (72, Ways::FULL, 0.0));
        assert!(
            m.description
                .contains("levels it did not describe assumed from AMD Zen 4")
        );
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("DTLB2M: cpuid describes no level-1 data TLB for 2 MiB"))
        );
        crate::Simulator::new(&m).unwrap();
    }

    #[test]
    fn odd_tlb_geometry_is_made_simulable_and_bad_entries_refused() {
        let m = Machine::from_calibration_json(
            r#"{"tlbs": [{"level": 1, "type": "data", "page_bytes": 4096, "entries": 96, "ways": 6},
                         {"level": 2, "type": "unified", "page_bytes": 4096, "entries": 3072, "ways": 8}]}"#,
        )
        .unwrap();
        assert_eq!(
            geometry(&m, "DTLB"),
            [(96, Ways::N(6), 0.0), (2048, Ways::N(8), L2_TLB_HIT_TICKS)]
        );
        assert!(m.notes.iter().any(|n| n.contains("not a power of two")));
        crate::Simulator::new(&m).unwrap();
        let e = Machine::from_calibration_json(
            r#"{"tlbs": [{"level": 1, "type": "data", "entries": 8, "ways": 0}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("page_bytes"), "{e}");
    }

    #[test]
    fn unknown_machine_says_what_to_do() {
        let e = Machine::load("no-such-machine").unwrap_err().to_string();
        assert!(e.contains("hp720-1993") && e.contains("calibrate"), "{e}");
    }
}
