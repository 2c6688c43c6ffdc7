//! The live lookup cache and shmnet-sim's cache model, given the same trace, miss the same
//! references: a lookup cache of C entries in lines of L, A ways, is a cache whose "bytes"
//! are translations — an 8-byte entry per handle page, lines of 8 × L bytes, 8 × C bytes in
//! all, LRU — and whose addresses put the application above every bit the set index uses.
//! That is what lets `shmnet lab handles` sweep the seed's 36 configurations through the
//! simulator and trust the result for the live cache.

use proptest::prelude::*;
use shmnet_chan::handles::{
    Access, CacheGeometry, Handle, LookupCache, LookupError, Pch, Perms, RegionId, SetIndex,
    Translation,
};
use shmnet_sim::{CacheConfig, Machine, MemoryConfig, Side, Simulator, Ways};
use std::ptr::NonNull;

/// The simulator's address of handle page `page` of `app`: with the seed's index, the page
/// itself; with the skewed one, the page with its line number as the index sees it.
fn sim_addr(geo: CacheGeometry, app: u16, page: u64) -> u64 {
    let shift = geo.line.trailing_zeros();
    let line = geo.index_line(Pch(app), page >> shift);
    (u64::from(app) << 48 | line << shift | (page & (u64::from(geo.line) - 1))) * 8
}

fn machine(geo: CacheGeometry) -> Machine {
    Machine {
        name: "lookup-cache".into(),
        description: "a lookup cache seen as a cache of 8-byte translations".into(),
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
        },
        base_page: shmnet_sim::ByteSize(4096),
        huge_pages: Vec::new(),
        notes: Vec::new(),
    }
}

/// Misses of the live cache over `trace` (each miss served at once, as the simulator does).
fn live_misses(geo: CacheGeometry, trace: &[(u16, u64)]) -> u64 {
    let mut cache = LookupCache::new(geo);
    let page = Translation::page(NonNull::new(4096 as *mut u8).unwrap(), Perms::READ_WRITE);
    let line = vec![page; geo.line as usize];
    for &(app, p) in trace {
        let h = Handle {
            app: Pch(app),
            region: RegionId((p >> 32) as u16),
            off: (p & 0xffff_ffff) << 12,
            len: 1,
        };
        if let Err(LookupError::Miss(k)) = cache.translate(&h, Access::Read) {
            cache.fill(k, &line);
        }
    }
    let s = cache.stats();
    s.misses[0]
}

fn sim_misses(geo: CacheGeometry, trace: &[(u16, u64)]) -> u64 {
    let mut sim = Simulator::new(&machine(geo)).expect("a valid machine");
    for &(app, p) in trace {
        sim.access(shmnet_sim::trace::Op::Read, sim_addr(geo, app, p), 1);
    }
    sim.report().caches[0].stats.misses
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_same_trace_misses_the_same_in_both(
        (c, l, a) in (6u32..11, 0u32..5, 0u32..4),
        skewed in any::<bool>(),
        trace in prop::collection::vec((1u16..4, prop_oneof![0u64..300, (0u64..3).prop_map(|r| r << 32 | 7)]), 1..600),
    ) {
        let (line, ways) = (1 << l, 1 << a);
        prop_assume!(1u32 << c >= line * ways);
        let index = if skewed { SetIndex::Skewed } else { SetIndex::LowBits };
        let geo = CacheGeometry::new(1 << c, line, ways).unwrap().with_index(index);
        prop_assert_eq!(live_misses(geo, &trace), sim_misses(geo, &trace));
    }
}

#[test]
fn the_seeds_best_configuration_agrees_on_a_long_strided_trace() {
    // C16K, L64, A4 (the seed's pick) over three applications streaming through 64 MiB each.
    let trace: Vec<(u16, u64)> = (0..60_000u64)
        .map(|i| ((i % 3) as u16 + 1, (i * 7) % 16_384))
        .collect();
    for index in [SetIndex::LowBits, SetIndex::Skewed] {
        let geo = CacheGeometry::new(16 * 1024, 64, 4)
            .unwrap()
            .with_index(index);
        let live = live_misses(geo, &trace);
        assert_eq!(live, sim_misses(geo, &trace), "{index:?}");
        assert!(
            live > 0 && live < trace.len() as u64,
            "a trace that both hits and misses"
        );
    }
}
