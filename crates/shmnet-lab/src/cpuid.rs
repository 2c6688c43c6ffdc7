//! This CPU's vendor, brand, and cache and TLB geometry as the `cpuid` instruction describes
//! them, so that the simulator can rebuild this machine's TLBs instead of assuming another
//! CPU's.
//!
//! Leaves read (with the `raw-cpuid` crate; the CPU is asked only through it):
//!
//! - Intel: leaf 4 (deterministic cache parameters: one subleaf per cache) and leaf 0x18
//!   (deterministic address translation parameters: one subleaf per TLB, with the page sizes
//!   it holds, ways × sets entries, a fully associative flag, level and type).
//! - AMD (and Hygon): leaf 0x8000_001D (cache topology, the same layout as Intel's leaf 4),
//!   else the legacy descriptors of 0x8000_0005 (L1 caches) and 0x8000_0006 (L2 and L3);
//!   the TLBs from 0x8000_0005 (L1), 0x8000_0006 (L2) and 0x8000_0019 (1 GiB pages).
//!
//! Invariants of what [`decode`] returns: every [`TlbInfo`] has `entries > 0` and a page
//! size of 4 KiB, 2 MiB or 1 GiB (4 MiB pages exist only under 32-bit paging and are not
//! listed; AMD's "2 MiB/4 MiB" fields are listed as 2 MiB); a structure that holds several
//! page sizes is listed once per page size, each time with its whole entry count (the
//! entries are shared). Every [`CacheInfo`] has `size_bytes > 0`. A leaf the CPU (or the
//! hypervisor) does not give, or gives as zeros, contributes nothing: a virtual machine
//! that hides leaf 0x18 yields no TLBs, not an error.
//!
//! The decoding is a pure function of the register values ([`decode`] takes any
//! [`CpuIdReader`]), so the tests feed it encodings from real CPUs; [`read`] asks this one.

use raw_cpuid::{CacheType, CpuId, CpuIdReader, CpuIdResult, DatType};

use crate::cacheinfo::CacheInfo;

/// One TLB (translation lookaside buffer) for one page size.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlbInfo {
    /// 1 for the first level, 2 for the second (Intel's STLB, AMD's L2 TLB), …
    pub level: u32,
    /// `data`, `instruction` or `unified` as for [`CacheInfo`]; on Intel CPUs that split
    /// the first-level data TLB, `load` (loads only) and `store` (stores only).
    #[serde(rename = "type")]
    pub kind: String,
    /// The page size whose translations it holds.
    pub page_bytes: u64,
    /// Translations it holds (shared with the other page sizes it is listed for).
    pub entries: u64,
    /// Associativity; 0 = fully associative.
    pub ways: u64,
}

/// The CPU and its geometry as cpuid describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Geometry {
    /// The vendor string: `GenuineIntel`, `AuthenticAMD`, … (empty without cpuid).
    pub vendor: String,
    /// The brand string, trimmed (empty if the CPU gives none).
    pub brand: String,
    /// The caches, L1 data first (the order of [`crate::cacheinfo::caches`]).
    pub caches: Vec<CacheInfo>,
    /// The TLBs, first level first.
    pub tlbs: Vec<TlbInfo>,
}

const KIB4: u64 = 4 << 10;
const MIB2: u64 = 2 << 20;
const GIB1: u64 = 1 << 30;

/// This CPU's geometry; empty on targets other than x86_64.
pub fn read() -> Geometry {
    #[cfg(target_arch = "x86_64")]
    {
        decode(raw_cpuid::CpuIdReaderNative)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Geometry::default()
    }
}

/// Decodes the geometry from the registers `reader` gives for each (leaf, subleaf).
pub fn decode<R: CpuIdReader>(reader: R) -> Geometry {
    let cpuid = CpuId::with_cpuid_reader(reader.clone());
    let vendor = cpuid
        .get_vendor_info()
        .map(|v| v.as_str().trim_matches('\0').to_string())
        .unwrap_or_default();
    let brand = cpuid
        .get_processor_brand_string()
        .map(|b| {
            b.as_str()
                .trim_matches(|c: char| c == '\0' || c.is_whitespace())
                .to_string()
        })
        .unwrap_or_default();
    let amd = matches!(vendor.as_str(), "AuthenticAMD" | "HygonGenuine");
    // Leaf 4 on Intel, 0x8000_001D on AMD: the same layout.
    let mut caches: Vec<CacheInfo> = cpuid
        .get_cache_parameters()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let kind = match c.cache_type() {
                CacheType::Data => "data",
                CacheType::Instruction => "instruction",
                CacheType::Unified => "unified",
                _ => return None,
            };
            let line = c.coherency_line_size() as u64;
            let ways = c.associativity() as u64;
            let size = ways * c.physical_line_partitions() as u64 * line * c.sets() as u64;
            (size > 0).then(|| CacheInfo {
                level: u32::from(c.level()),
                kind: kind.into(),
                size_bytes: size,
                line_bytes: line,
                ways,
            })
        })
        .collect();
    let mut tlbs = Vec::new();
    // Without leaf 0x8000_001D, AMD's legacy cache descriptors.
    let legacy_caches = caches.is_empty();
    if amd {
        let max_ext = reader.cpuid1(0x8000_0000).eax;
        let leaf = |l: u32| (max_ext >= l).then(|| reader.cpuid1(l));
        if let Some(r) = leaf(0x8000_0005) {
            tlbs.extend(amd_l1_tlbs(r));
            if legacy_caches {
                caches.extend(amd_l1_caches(r));
            }
        }
        if let Some(r) = leaf(0x8000_0006) {
            tlbs.extend(amd_l2_tlbs(r));
            if legacy_caches {
                caches.extend(amd_l2_l3_caches(r));
            }
        }
        if let Some(r) = leaf(0x8000_0019) {
            tlbs.extend(amd_1g_tlbs(r));
        }
    } else if let Some(dat) = cpuid.get_deterministic_address_translation_info() {
        for d in dat {
            let kind = match d.cache_type() {
                DatType::DataTLB => "data",
                DatType::InstructionTLB => "instruction",
                DatType::UnifiedTLB => "unified",
                DatType::LoadOnly => "load",
                DatType::StoreOnly => "store",
                _ => continue,
            };
            let entries = u64::from(d.ways()) * u64::from(d.sets());
            let ways = if d.is_fully_associative() {
                0
            } else {
                u64::from(d.ways())
            };
            for (has, page) in [
                (d.has_4k_entries(), KIB4),
                (d.has_2mb_entries(), MIB2),
                (d.has_1gb_entries(), GIB1),
            ] {
                if has && entries > 0 {
                    tlbs.push(TlbInfo {
                        level: u32::from(d.cache_level()),
                        kind: kind.into(),
                        page_bytes: page,
                        entries,
                        ways,
                    });
                }
            }
        }
    }
    caches.sort_by_key(|c| (c.level, c.kind != "data"));
    tlbs.sort_by_key(|t| (t.level, t.page_bytes, t.kind.clone()));
    Geometry {
        vendor,
        brand,
        caches,
        tlbs,
    }
}

/// Bits `lo..=hi` of `v`.
fn bits(v: u32, lo: u32, hi: u32) -> u32 {
    (v >> lo) & (u32::MAX >> (31 - (hi - lo)))
}

/// An associativity as AMD encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmdAssoc {
    /// The cache or TLB is absent or disabled.
    Disabled,
    /// Between `min` and `max` ways (equal when exact).
    Ways {
        /// At least this many.
        min: u64,
        /// At most this many.
        max: u64,
    },
    /// Fully associative.
    Full,
    /// Described by leaf 0x8000_001D instead (L2/L3 code 9).
    SeeLeaf1D,
    /// A reserved code.
    Reserved,
}

/// The 8-bit L1 associativity field of 0x8000_0005: 1 direct mapped, n n-way, 0xFF fully
/// associative, 0 reserved (treated as absent).
pub fn amd_l1_assoc(code: u32) -> AmdAssoc {
    match code {
        0 => AmdAssoc::Disabled,
        0xff => AmdAssoc::Full,
        n => AmdAssoc::Ways {
            min: u64::from(n),
            max: u64::from(n),
        },
    }
}

/// The 4-bit L2/L3 cache and TLB associativity field of 0x8000_0006 and 0x8000_0019 (AMD
/// APM vol. 3, appendix E, the L2/L3 associativity encoding). Where a code names a range of
/// ways (newer revisions: 6h is "8 to 15 ways"), both ends are returned.
pub fn amd_l2_assoc(code: u32) -> AmdAssoc {
    let ways = |min, max| AmdAssoc::Ways { min, max };
    match code {
        0x0 => AmdAssoc::Disabled,
        0x1 => ways(1, 1),
        0x2 => ways(2, 2),
        0x3 => ways(3, 3),
        0x4 => ways(4, 5),
        0x5 => ways(6, 7),
        0x6 => ways(8, 15),
        0x8 => ways(16, 31),
        0x9 => AmdAssoc::SeeLeaf1D,
        0xa => ways(32, 47),
        0xb => ways(48, 63),
        0xc => ways(64, 95),
        0xd => ways(96, 127),
        0xe => ways(128, 255),
        0xf => AmdAssoc::Full,
        _ => AmdAssoc::Reserved,
    }
}

/// The way count to record for a structure of `entries` with associativity `a`: 0 for fully
/// associative; within a range, the fewest ways that divide the entries into a power-of-two
/// number of sets (how set-indexed hardware is built), else the range's lower end. `None`
/// when the structure is absent or its associativity is not given here.
pub fn amd_ways(a: AmdAssoc, entries: u64) -> Option<u64> {
    match a {
        AmdAssoc::Full => Some(0),
        AmdAssoc::Ways { min, max } => Some(
            (min..=max)
                .find(|&w| entries % w == 0 && (entries / w).is_power_of_two())
                .unwrap_or(min),
        ),
        AmdAssoc::Disabled | AmdAssoc::SeeLeaf1D | AmdAssoc::Reserved => None,
    }
}

/// A TLB from an (associativity, entries) field pair, if present.
fn amd_tlb(level: u32, kind: &str, page: u64, assoc: AmdAssoc, entries: u32) -> Option<TlbInfo> {
    let entries = u64::from(entries);
    let ways = amd_ways(assoc, entries)?;
    (entries > 0).then(|| TlbInfo {
        level,
        kind: kind.into(),
        page_bytes: page,
        entries,
        ways,
    })
}

/// The first-level TLBs of leaf 0x8000_0005: EAX for 2 MiB (and 4 MiB) pages, EBX for 4 KiB;
/// in each, data associativity in bits 31:24, data entries 23:16, instruction associativity
/// 15:8, instruction entries 7:0.
pub fn amd_l1_tlbs(r: CpuIdResult) -> Vec<TlbInfo> {
    let mut v = Vec::new();
    for (reg, page) in [(r.ebx, KIB4), (r.eax, MIB2)] {
        v.extend(amd_tlb(
            1,
            "data",
            page,
            amd_l1_assoc(bits(reg, 24, 31)),
            bits(reg, 16, 23),
        ));
        v.extend(amd_tlb(
            1,
            "instruction",
            page,
            amd_l1_assoc(bits(reg, 8, 15)),
            bits(reg, 0, 7),
        ));
    }
    v
}

/// The second-level TLBs of leaf 0x8000_0006: EAX for 2 MiB pages, EBX for 4 KiB; in each,
/// data associativity (L2 encoding) in bits 31:28, data entries 27:16, instruction
/// associativity 15:12, instruction entries 11:0.
pub fn amd_l2_tlbs(r: CpuIdResult) -> Vec<TlbInfo> {
    amd_wide_tlbs(2, [(r.ebx, KIB4), (r.eax, MIB2)])
}

/// The 1 GiB-page TLBs of leaf 0x8000_0019: EAX the first level, EBX the second, in the
/// layout of 0x8000_0006.
pub fn amd_1g_tlbs(r: CpuIdResult) -> Vec<TlbInfo> {
    let mut v = amd_wide_tlbs(1, [(r.eax, GIB1)]);
    v.extend(amd_wide_tlbs(2, [(r.ebx, GIB1)]));
    v
}

fn amd_wide_tlbs<const N: usize>(level: u32, regs: [(u32, u64); N]) -> Vec<TlbInfo> {
    let mut v = Vec::new();
    for (reg, page) in regs {
        v.extend(amd_tlb(
            level,
            "data",
            page,
            amd_l2_assoc(bits(reg, 28, 31)),
            bits(reg, 16, 27),
        ));
        v.extend(amd_tlb(
            level,
            "instruction",
            page,
            amd_l2_assoc(bits(reg, 12, 15)),
            bits(reg, 0, 11),
        ));
    }
    v
}

/// The L1 caches of leaf 0x8000_0005 (for CPUs without leaf 0x8000_001D): ECX the data
/// cache, EDX the instruction cache; size in KiB in bits 31:24, associativity (L1 encoding)
/// 23:16, line bytes 7:0.
pub fn amd_l1_caches(r: CpuIdResult) -> Vec<CacheInfo> {
    [(r.ecx, "data"), (r.edx, "instruction")]
        .into_iter()
        .filter_map(|(reg, kind)| {
            amd_cache(
                1,
                kind,
                u64::from(bits(reg, 24, 31)) << 10,
                amd_l1_assoc(bits(reg, 16, 23)),
                bits(reg, 0, 7),
            )
        })
        .collect()
}

/// The L2 and L3 of leaf 0x8000_0006 (for CPUs without leaf 0x8000_001D): ECX the L2 (KiB in
/// bits 31:16), EDX the L3 (units of 512 KiB in bits 31:18); associativity (L2 encoding) in
/// 15:12, line bytes in 7:0. A cache whose associativity is "see 0x8000_001D" is listed with
/// `ways` 0 (unknown).
pub fn amd_l2_l3_caches(r: CpuIdResult) -> Vec<CacheInfo> {
    let l2 = amd_cache(
        2,
        "unified",
        u64::from(bits(r.ecx, 16, 31)) << 10,
        amd_l2_assoc(bits(r.ecx, 12, 15)),
        bits(r.ecx, 0, 7),
    );
    let l3 = amd_cache(
        3,
        "unified",
        u64::from(bits(r.edx, 18, 31)) * (512 << 10),
        amd_l2_assoc(bits(r.edx, 12, 15)),
        bits(r.edx, 0, 7),
    );
    l2.into_iter().chain(l3).collect()
}

fn amd_cache(level: u32, kind: &str, size: u64, assoc: AmdAssoc, line: u32) -> Option<CacheInfo> {
    let line = u64::from(line);
    if size == 0 || line == 0 || assoc == AmdAssoc::Disabled {
        return None;
    }
    let lines = size / line;
    let ways = match amd_ways(assoc, lines) {
        Some(0) => lines,
        Some(w) => w,
        None => 0,
    };
    Some(CacheInfo {
        level,
        kind: kind.into(),
        size_bytes: size,
        line_bytes: line,
        ways,
    })
}

impl TlbInfo {
    /// One line for a report: `L1 data TLB, 4 KiB pages: 64 entries, 4-way`.
    pub fn describe(&self) -> String {
        let page = match self.page_bytes {
            p if p >= GIB1 => format!("{} GiB", p / GIB1),
            p if p >= 1 << 20 => format!("{} MiB", p >> 20),
            p => format!("{} KiB", p >> 10),
        };
        let assoc = if self.ways == 0 {
            "fully associative".to_string()
        } else {
            format!("{}-way", self.ways)
        };
        let kind = match self.kind.as_str() {
            "load" => "data (loads only)",
            "store" => "data (stores only)",
            k => k,
        };
        format!(
            "L{} {kind} TLB, {page} pages: {} entries, {assoc}",
            self.level, self.entries
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader answering from a table of (leaf, subleaf, [eax, ebx, ecx, edx]); zeros
    /// elsewhere, as a CPU does for an invalid subleaf.
    fn table(rows: &'static [(u32, u32, [u32; 4])]) -> impl CpuIdReader {
        move |leaf: u32, sub: u32| {
            let r = rows
                .iter()
                .find(|(l, s, _)| *l == leaf && (*s == sub || !subleaved(leaf)))
                .map_or([0; 4], |(_, _, r)| *r);
            CpuIdResult {
                eax: r[0],
                ebx: r[1],
                ecx: r[2],
                edx: r[3],
            }
        }
    }

    fn subleaved(leaf: u32) -> bool {
        matches!(leaf, 4 | 0x18 | 0x8000_001d)
    }

    /// "GenuineIntel" / "AuthenticAMD" as leaf 0 gives them in EBX, ECX, EDX (read EBX, EDX, ECX).
    const INTEL: [u32; 3] = [0x756e_6547, 0x6c65_746e, 0x4965_6e69];
    const AMD: [u32; 3] = [0x6874_7541, 0x444d_4163, 0x6974_6e65];

    fn tlb(level: u32, kind: &str, page: u64, entries: u64, ways: u64) -> TlbInfo {
        TlbInfo {
            level,
            kind: kind.into(),
            page_bytes: page,
            entries,
            ways,
        }
    }

    fn cache(level: u32, kind: &str, size: u64, ways: u64) -> CacheInfo {
        CacheInfo {
            level,
            kind: kind.into(),
            size_bytes: size,
            line_bytes: 64,
            ways,
        }
    }

    /// The CPU these were written on (an Intel Xeon KVM guest, 2026): leaf 4 as dumped
    /// there, leaf 0x18 hidden by the hypervisor (all zeros). Leaf 4 by hand (SDM vol. 2A,
    /// CPUID leaf 04H): EAX 4:0 type, 7:5 level; EBX 11:0 line − 1, 21:12 partitions − 1,
    /// 31:22 ways − 1; ECX sets − 1. Subleaf 0: EAX 0x121 → data, level 1; EBX 0x02c0003f →
    /// 64-byte lines, 1 partition, 12 ways; ECX 0x3f → 64 sets: 48 KiB.
    const XEON_VM: &[(u32, u32, [u32; 4])] = &[
        (0, 0, [0x24, INTEL[0], INTEL[1], INTEL[2]]),
        (4, 0, [0x0400_0121, 0x02c0_003f, 0x0000_003f, 0]),
        (4, 1, [0x0400_0122, 0x03c0_003f, 0x0000_003f, 0]),
        (4, 2, [0x0400_0143, 0x03c0_003f, 0x0000_07ff, 0]),
        (4, 3, [0x0400_4163, 0x03c0_003f, 0x0007_7fff, 0]),
        (0x8000_0000, 0, [0x8000_0008, 0, 0, 0]),
    ];

    #[test]
    fn intel_leaf_4_as_this_vm_gives_it() {
        let g = decode(table(XEON_VM));
        assert_eq!(g.vendor, "GenuineIntel");
        assert_eq!(
            g.caches,
            [
                cache(1, "data", 48 << 10, 12),
                cache(1, "instruction", 64 << 10, 16),
                cache(2, "unified", 2 << 20, 16),
                cache(3, "unified", 480 << 20, 16),
            ]
        );
        assert!(
            g.tlbs.is_empty(),
            "a hidden leaf 0x18 is no TLB, not an error"
        );
    }

    /// Leaf 0x18 of an Intel Core i7-12700K (Alder Lake, Golden Cove core), as dumped in
    /// raw-cpuid's test data. By hand (SDM vol. 2A, CPUID leaf 18H): EAX of subleaf 0 the
    /// last subleaf; EBX bit 0 4 KiB, 1 2 MiB, 2 4 MiB, 3 1 GiB, 31:16 ways; ECX sets; EDX
    /// 4:0 type (1 data, 2 instruction, 3 unified, 4 load only, 5 store only), 7:5 level,
    /// bit 8 fully associative. Subleaf 1: EBX 0x00080001 (4 KiB, 8 ways), ECX 32 sets, EDX
    /// 0x22 (instruction, level 1): a 256-entry 8-way ITLB. Subleaf 3: EBX 0x0010000f (every
    /// page size, 16 ways), 1 set, EDX 0x125 (store only, level 1, fully associative).
    /// Subleaf 7: EBX 0x00080007 (4 KiB, 2 MiB, 4 MiB; 8 ways), 128 sets, EDX 0x43 (unified,
    /// level 2): a 1,024-entry STLB; subleaf 8 another, for 4 KiB and 1 GiB.
    const ALDER_LAKE: &[(u32, u32, [u32; 4])] = &[
        (0, 0, [0x20, INTEL[0], INTEL[1], INTEL[2]]),
        (0x18, 0, [8, 0, 0, 0]),
        (0x18, 1, [0, 0x0008_0001, 0x20, 0x4022]),
        (0x18, 2, [0, 0x0008_0006, 0x04, 0x4022]),
        (0x18, 3, [0, 0x0010_000f, 0x01, 0x4125]),
        (0x18, 4, [0, 0x0004_0001, 0x10, 0x4024]),
        (0x18, 5, [0, 0x0004_0006, 0x08, 0x4024]),
        (0x18, 6, [0, 0x0008_0008, 0x01, 0x4124]),
        (0x18, 7, [0, 0x0008_0007, 0x80, 0x4043]),
        (0x18, 8, [0, 0x0008_0009, 0x80, 0x4043]),
        (0x8000_0000, 0, [0x8000_0008, 0, 0, 0]),
    ];

    #[test]
    fn intel_leaf_0x18_every_subleaf_and_page_size() {
        let g = decode(table(ALDER_LAKE));
        let want = [
            tlb(1, "instruction", KIB4, 256, 8),
            tlb(1, "load", KIB4, 64, 4),
            tlb(1, "store", KIB4, 16, 0),
            tlb(1, "instruction", MIB2, 32, 8),
            tlb(1, "load", MIB2, 32, 4),
            tlb(1, "store", MIB2, 16, 0),
            tlb(1, "load", GIB1, 8, 0),
            tlb(1, "store", GIB1, 16, 0),
            tlb(2, "unified", KIB4, 1024, 8),
            tlb(2, "unified", KIB4, 1024, 8),
            tlb(2, "unified", MIB2, 1024, 8),
            tlb(2, "unified", GIB1, 1024, 8),
        ];
        assert_eq!(g.tlbs, want);
        assert_eq!(
            g.tlbs[2].describe(),
            "L1 data (stores only) TLB, 4 KiB pages: 16 entries, fully associative"
        );
    }

    /// An AMD Ryzen 5 3600X (Zen 2), as dumped in raw-cpuid's test data. By hand (AMD APM
    /// vol. 3, appendix E): 0x8000_0005 EBX 0xff40ff40 → 4 KiB L1 DTLB and ITLB of 0x40 = 64
    /// entries, associativity 0xFF (fully); EAX the same for 2 MiB. 0x8000_0006 EBX
    /// 0x68006400 → 4 KiB L2 DTLB code 6 (8 to 15 ways), 0x800 = 2,048 entries, L2 ITLB code 6,
    /// 0x400 = 1,024; EAX 0x48006400 → 2 MiB L2 DTLB code 4 (4 to 5 ways), 2,048 entries.
    /// 0x8000_0019 EAX 0xf040f040 → 1 GiB L1 TLBs of 64 entries, fully associative; EBX 0 →
    /// no 1 GiB L2. 0x8000_001D has Intel's leaf-4 layout: subleaf 3 EAX 0x14163 (unified,
    /// level 3), EBX 0x03c0003f (16 ways), ECX 0x3fff (16,384 sets): 16 MiB.
    const ZEN2: &[(u32, u32, [u32; 4])] = &[
        (0, 0, [0x10, AMD[0], AMD[1], AMD[2]]),
        (0x8000_0000, 0, [0x8000_0020, AMD[0], AMD[1], AMD[2]]),
        (
            0x8000_0005,
            0,
            [0xff40_ff40, 0xff40_ff40, 0x2008_0140, 0x2008_0140],
        ),
        (
            0x8000_0006,
            0,
            [0x4800_6400, 0x6800_6400, 0x0200_6140, 0x0100_9140],
        ),
        (0x8000_0019, 0, [0xf040_f040, 0, 0, 0]),
        (0x8000_001d, 0, [0x4121, 0x01c0_003f, 0x003f, 0]),
        (0x8000_001d, 1, [0x4122, 0x01c0_003f, 0x003f, 0]),
        (0x8000_001d, 2, [0x4143, 0x01c0_003f, 0x03ff, 2]),
        (0x8000_001d, 3, [0x0001_4163, 0x03c0_003f, 0x3fff, 1]),
    ];

    #[test]
    fn amd_zen2_caches_from_0x8000001d_and_tlbs_from_the_descriptors() {
        let g = decode(table(ZEN2));
        assert_eq!(g.vendor, "AuthenticAMD");
        assert_eq!(
            g.caches,
            [
                cache(1, "data", 32 << 10, 8),
                cache(1, "instruction", 32 << 10, 8),
                cache(2, "unified", 512 << 10, 8),
                cache(3, "unified", 16 << 20, 16),
            ]
        );
        assert_eq!(
            g.tlbs,
            [
                tlb(1, "data", KIB4, 64, 0),
                tlb(1, "instruction", KIB4, 64, 0),
                tlb(1, "data", MIB2, 64, 0),
                tlb(1, "instruction", MIB2, 64, 0),
                tlb(1, "data", GIB1, 64, 0),
                tlb(1, "instruction", GIB1, 64, 0),
                // 2,048 / 8 = 256 sets; 1,024 / 8 = 128; 2,048 / 4 = 512.
                tlb(2, "data", KIB4, 2048, 8),
                tlb(2, "instruction", KIB4, 1024, 8),
                tlb(2, "data", MIB2, 2048, 4),
                tlb(2, "instruction", MIB2, 1024, 8),
            ]
        );
    }

    /// An AMD Ryzen 9 8940HX (Zen 4), as dumped by hand with `__get_cpuid_count` (published
    /// in a public hardware-parameter note), without leaf 0x8000_001D here so that the
    /// caches come from the legacy descriptors. 0x8000_0005 EBX 0xff48ff40 → 72-entry fully
    /// associative 4 KiB L1 DTLB, 64-entry ITLB; ECX 0x20080140 → 32 KiB L1D, 8-way, 64-byte
    /// lines. 0x8000_0006 EBX 0x6c004200 → 4 KiB L2 DTLB code 6 (8 to 15 ways) with 0xc00 =
    /// 3,072 entries: 12 ways make 256 sets; L2 ITLB code 4 (4 to 5 ways), 512 entries. EAX
    /// 0x5c002200 → 2 MiB L2 DTLB code 5 (6 to 7 ways), 3,072 entries: 6 ways, 512 sets; L2
    /// ITLB code 2 (2 ways), 512. ECX 0x04006140 → 1,024 KiB L2, code 6, 64-byte lines. EDX
    /// 0x02009140 → L3 of 0x80 × 512 KiB = 64 MiB, code 9 ("see 0x8000_001D"): ways unknown.
    /// 0x8000_0019 EBX 0xf0400000 → a 64-entry fully associative 1 GiB L2 DTLB.
    const ZEN4: &[(u32, u32, [u32; 4])] = &[
        (0, 0, [0x10, AMD[0], AMD[1], AMD[2]]),
        (0x8000_0000, 0, [0x8000_0019, AMD[0], AMD[1], AMD[2]]),
        (
            0x8000_0005,
            0,
            [0xff48_ff40, 0xff48_ff40, 0x2008_0140, 0x2008_0140],
        ),
        (
            0x8000_0006,
            0,
            [0x5c00_2200, 0x6c00_4200, 0x0400_6140, 0x0200_9140],
        ),
        (0x8000_0019, 0, [0xf048_f040, 0xf040_0000, 0, 0]),
    ];

    #[test]
    fn amd_zen4_from_the_legacy_descriptors() {
        let g = decode(table(ZEN4));
        assert_eq!(
            g.caches,
            [
                cache(1, "data", 32 << 10, 8),
                cache(1, "instruction", 32 << 10, 8),
                cache(2, "unified", 1 << 20, 8),
                cache(3, "unified", 64 << 20, 0),
            ]
        );
        let l2: Vec<&TlbInfo> = g.tlbs.iter().filter(|t| t.level == 2).collect();
        assert_eq!(
            l2,
            [
                &tlb(2, "data", KIB4, 3072, 12),
                &tlb(2, "instruction", KIB4, 512, 4),
                &tlb(2, "data", MIB2, 3072, 6),
                &tlb(2, "instruction", MIB2, 512, 2),
                &tlb(2, "data", GIB1, 64, 0),
            ]
        );
        assert!(g.tlbs.contains(&tlb(1, "data", KIB4, 72, 0)));
        assert!(g.tlbs.contains(&tlb(1, "data", GIB1, 72, 0)));
    }

    #[test]
    fn amd_associativity_code_table() {
        use AmdAssoc::*;
        let w = |min, max| Ways { min, max };
        let want = [
            Disabled,
            w(1, 1),
            w(2, 2),
            w(3, 3),
            w(4, 5),
            w(6, 7),
            w(8, 15),
            Reserved,
            w(16, 31),
            SeeLeaf1D,
            w(32, 47),
            w(48, 63),
            w(64, 95),
            w(96, 127),
            w(128, 255),
            Full,
        ];
        for (code, a) in want.into_iter().enumerate() {
            assert_eq!(amd_l2_assoc(code as u32), a, "code {code:#x}");
        }
        assert_eq!(amd_l1_assoc(0xff), Full);
        assert_eq!(amd_l1_assoc(1), w(1, 1));
        assert_eq!(amd_l1_assoc(0), Disabled);
        // Within a range: the fewest ways that make a power-of-two set count, else the low end.
        assert_eq!(amd_ways(w(8, 15), 3072), Some(12));
        assert_eq!(amd_ways(w(8, 15), 2048), Some(8));
        assert_eq!(amd_ways(w(8, 15), 1000), Some(8));
        assert_eq!(amd_ways(Full, 64), Some(0));
        assert_eq!(amd_ways(SeeLeaf1D, 64), None);
    }

    #[test]
    fn no_cpuid_answers_is_an_empty_geometry() {
        let g = decode(table(&[]));
        assert_eq!(g, Geometry::default());
    }

    #[test]
    fn this_cpu_decodes_without_panicking() {
        let g = read();
        assert!(g.tlbs.iter().all(|t| t.entries > 0));
        assert!(g.caches.iter().all(|c| c.size_bytes > 0));
    }
}
