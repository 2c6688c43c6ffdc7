//! The live lookup cache and shmnet-sim's cache model, given the same trace, miss the same
//! references: a lookup cache of C entries in lines of L, A ways, is a cache whose "bytes"
//! are translations — an 8-byte entry per handle page, lines of 8 × L bytes, 8 × C bytes in
//! all, LRU — and whose addresses put the application above every bit the set index uses.
//! That is what lets `shmnet lab handles` sweep the seed's 36 configurations through the
//! simulator and trust the result for the live cache.

use proptest::prelude::*;
use shmnet_chan::handles::{Access, CacheGeometry, Pch, SetIndex};
use shmnet_lab::handles::sweep;
use shmnet_lab::handles::workloads::PageRef;

/// `(application, handle page)` pairs as the lab's references (all sends: the access does
/// not change what misses).
fn refs(trace: &[(u16, u64)]) -> Vec<PageRef> {
    trace
        .iter()
        .map(|&(app, page)| PageRef {
            app: Pch(app),
            page,
            access: Access::Read,
        })
        .collect()
}

/// Misses of the live cache over `trace` (each miss served at once, as the simulator does).
fn live_misses(geo: CacheGeometry, trace: &[(u16, u64)]) -> u64 {
    let r = sweep::live("test", geo, &refs(trace));
    r.send_cold + r.send_noncold + r.recv_cold + r.recv_noncold
}

/// Misses of shmnet-sim's cache model, given the lab's machine and addresses.
fn sim_misses(geo: CacheGeometry, trace: &[(u16, u64)]) -> u64 {
    sweep::simulated(geo, &refs(trace))
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
