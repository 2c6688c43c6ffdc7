//! Seed 004's Table III sweep: every configuration of the lookup cache over every workload,
//! misses split by path (send, receive) and kind (cold, non-cold), each configuration run
//! through both the live cache and shmnet-sim's cache model, which must agree.

use super::workloads::PageRef;
use shmnet_chan::handles::{
    Access, CacheGeometry, Handle, LineKey, LookupCache, LookupError, Perms, RegionId, SetIndex,
    Translation,
};
use shmnet_sim::{CacheConfig, Machine, MemoryConfig, Side, Simulator, Ways};
use std::collections::HashSet;
use std::ptr::NonNull;

/// C (entries) of Table III.
pub const ENTRIES: [u32; 3] = [8 * 1024, 16 * 1024, 32 * 1024];
/// L (entries per line) of Table III.
pub const LINES: [u32; 4] = [8, 16, 64, 128];
/// A (ways) of Table III.
pub const WAYS: [u32; 3] = [2, 4, 8];

/// The 36 configurations, in the seed's order (C, then L, then A), with set index `index`.
pub fn configurations(index: SetIndex) -> Vec<CacheGeometry> {
    let mut v = Vec::new();
    for c in ENTRIES {
        for l in LINES {
            for a in WAYS {
                let geo = CacheGeometry::new(c, l, a).expect("Table III's geometries are valid");
                v.push(geo.with_index(index));
            }
        }
    }
    v
}

/// One workload through one configuration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SweepRow {
    /// The workload.
    pub workload: String,
    /// C.
    pub entries: u32,
    /// L.
    pub line: u32,
    /// A.
    pub ways: u32,
    /// How a line picks its set: the seed's low bits, or shmnet's skewed index.
    pub index: SetIndex,
    /// Send references.
    pub send_refs: u64,
    /// Receive references.
    pub recv_refs: u64,
    /// Send misses to lines never referenced before.
    pub send_cold: u64,
    /// Other send misses (capacity and conflict).
    pub send_noncold: u64,
    /// Receive misses to lines never referenced before.
    pub recv_cold: u64,
    /// Other receive misses.
    pub recv_noncold: u64,
    /// Misses over references.
    pub miss_ratio: f64,
    /// The simulator's misses for the same trace.
    pub sim_misses: u64,
    /// Whether the live cache and the simulator missed the same number of times.
    pub agree: bool,
}

/// The live cache's counts for `trace` through `geo` (each miss filled at once).
pub fn live(workload: &str, geo: CacheGeometry, trace: &[PageRef]) -> SweepRow {
    let mut cache = LookupCache::new(geo);
    // Any page-aligned address: nothing is ever read through it.
    let page = Translation::page(
        NonNull::new(4096 as *mut u8).expect("non-null"),
        Perms::READ_WRITE,
    );
    let line = vec![page; geo.line as usize];
    let mut seen: HashSet<LineKey> = HashSet::new();
    let mut row = SweepRow {
        workload: workload.to_string(),
        entries: geo.entries,
        line: geo.line,
        ways: geo.ways,
        index: geo.index,
        send_refs: 0,
        recv_refs: 0,
        send_cold: 0,
        send_noncold: 0,
        recv_cold: 0,
        recv_noncold: 0,
        miss_ratio: 0.0,
        sim_misses: 0,
        agree: false,
    };
    for r in trace {
        let h = Handle {
            app: r.app,
            region: RegionId((r.page >> 32) as u16),
            off: (r.page & 0xffff_ffff) << 12,
            len: 1,
        };
        let send = r.access == Access::Read;
        if send {
            row.send_refs += 1;
        } else {
            row.recv_refs += 1;
        }
        if let Err(LookupError::Miss(k)) = cache.translate(&h, r.access) {
            let cold = seen.insert(k);
            match (send, cold) {
                (true, true) => row.send_cold += 1,
                (true, false) => row.send_noncold += 1,
                (false, true) => row.recv_cold += 1,
                (false, false) => row.recv_noncold += 1,
            }
            cache.fill(k, &line);
        } else {
            seen.insert(cache.line_of(r.app, r.page));
        }
    }
    let misses = row.send_cold + row.send_noncold + row.recv_cold + row.recv_noncold;
    row.miss_ratio = misses as f64 / trace.len().max(1) as f64;
    row
}

/// A lookup cache seen as a cache of 8-byte translations: 8 × C bytes in lines of 8 × L,
/// A ways, LRU.
pub fn sim_machine(geo: CacheGeometry) -> Machine {
    Machine {
        name: format!("lookup-cache-C{}-L{}-A{}", geo.entries, geo.line, geo.ways),
        description: "seed 004's VMH lookup cache as a cache of 8-byte translations".into(),
        tick_unit: "ticks".into(),
        caches: vec![CacheConfig::new(
            "VMH",
            1,
            Side::Unified,
            8 * u64::from(geo.entries),
            8 * u64::from(geo.line),
            Ways::N(geo.ways),
            1.0,
        )],
        tlbs: Vec::new(),
        memory: MemoryConfig {
            ticks: 100.0,
            dirty_ticks: 100.0,
            uncached_read_ticks: None,
            uncached_write_ticks: None,
        },
        base_page: shmnet_sim::ByteSize(4096),
        huge_pages: Vec::new(),
        notes: Vec::new(),
        uncacheable: Vec::new(),
        maintenance: Default::default(),
    }
}

/// The simulator's misses for `trace` through `geo`: handle page `p` of application `a` at
/// address `(a << 48 | p') × 8`, where `p'` is `p` with its line number as the set index
/// sees it ([`CacheGeometry::index_line`]), so the set comes from the same bits and the
/// application sits in the tag, as in the live cache.
pub fn simulated(geo: CacheGeometry, trace: &[PageRef]) -> u64 {
    let mut sim = Simulator::new(&sim_machine(geo)).expect("a valid machine");
    let shift = geo.line.trailing_zeros();
    for r in trace {
        let line = geo.index_line(r.app, r.page >> shift);
        let page = line << shift | (r.page & (u64::from(geo.line) - 1));
        let addr = (u64::from(r.app.0) << 48 | page) * 8;
        sim.access(shmnet_sim::Op::Read, addr, 1);
    }
    sim.report().caches[0].stats.misses
}

/// Both, joined.
pub fn run(workload: &str, geo: CacheGeometry, trace: &[PageRef]) -> SweepRow {
    let mut row = live(workload, geo, trace);
    row.sim_misses = simulated(geo, trace);
    row.agree =
        row.sim_misses == row.send_cold + row.send_noncold + row.recv_cold + row.recv_noncold;
    row
}

#[cfg(test)]
mod tests {
    use super::super::workloads::{Shape, trace};
    use super::*;

    #[test]
    fn table_iii_has_36_configurations() {
        assert_eq!(configurations(SetIndex::LowBits).len(), 36);
    }

    #[test]
    fn live_and_simulated_agree_and_misses_split_whole() {
        let t = trace(
            "radix",
            Shape {
                apps: 4,
                pages: 4096,
                messages: 5000,
            },
        )
        .unwrap();
        for index in [SetIndex::LowBits, SetIndex::Skewed] {
            let geo = CacheGeometry::new(8192, 16, 2).unwrap().with_index(index);
            assert!(run("radix", geo, &t).agree, "{index:?}");
        }
        let row = run("radix", CacheGeometry::new(8192, 16, 2).unwrap(), &t);
        assert_eq!(row.send_refs + row.recv_refs, t.len() as u64);
        assert!(row.send_cold > 0 && row.recv_cold > 0, "{row:?}");
        assert!(row.miss_ratio > 0.0 && row.miss_ratio < 1.0, "{row:?}");
    }

    #[test]
    fn the_skewed_index_keeps_applications_from_colliding() {
        // Eight applications trading the same few pages: in the seed's index they all
        // fall in one set.
        let t = trace(
            "water",
            Shape {
                apps: 8,
                pages: 256,
                messages: 20_000,
            },
        )
        .unwrap();
        let geo = CacheGeometry::new(8192, 8, 2).unwrap();
        let seed = live("water", geo.with_index(SetIndex::LowBits), &t);
        let skewed = live("water", geo.with_index(SetIndex::Skewed), &t);
        assert!(
            skewed.miss_ratio < seed.miss_ratio / 4.0,
            "{seed:?} {skewed:?}"
        );
        assert_eq!(skewed.send_noncold + skewed.recv_noncold, 0, "{skewed:?}");
    }

    #[test]
    fn longer_lines_prefetch_a_stream() {
        let t = trace(
            "fft",
            Shape {
                apps: 4,
                pages: 4096,
                messages: 8000,
            },
        )
        .unwrap();
        let short = live("fft", CacheGeometry::new(8192, 8, 4).unwrap(), &t);
        let long = live("fft", CacheGeometry::new(8192, 128, 4).unwrap(), &t);
        assert!(long.miss_ratio < short.miss_ratio, "{short:?} {long:?}");
    }
}
