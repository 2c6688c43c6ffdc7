//! Exact counts on small traces worked out by hand, for every replacement policy, both write
//! policies, a two-level hierarchy, the TLB and miss classification.

use shmnet_sim::{
    CacheConfig, Machine, MemoryConfig, Op, Options, Replacement, Side, Simulator, TlbConfig,
    TlbLevelConfig, Ways, WritePolicy,
};

/// A machine with one unified cache of `size` bytes, 16-byte lines, and memory costing 10
/// ticks (12 with a dirty victim); hits cost 1.
fn one_cache(size: u64, ways: Ways, rep: Replacement, write: WritePolicy) -> Machine {
    let mut c = CacheConfig::new("C", 1, Side::Unified, size, 16, ways, 1.0);
    c.replacement = rep;
    c.write = write;
    Machine {
        name: "test".into(),
        description: String::new(),
        tick_unit: "ticks".into(),
        caches: vec![c],
        tlbs: vec![],
        memory: MemoryConfig::new(10.0, 12.0),
        base_page: shmnet_sim::ByteSize(4096),
        huge_pages: vec![],
        uncacheable: vec![],
        maintenance: Default::default(),
        notes: vec![],
    }
}

fn run(m: &Machine, trace: &[(Op, u64)]) -> Simulator {
    let mut s = Simulator::with_options(
        m,
        Options {
            ccc: true,
            ..Options::default()
        },
    )
    .unwrap();
    for &(op, a) in trace {
        s.access(op, a, 4);
    }
    s
}

const R: Op = Op::Read;
const W: Op = Op::Write;

#[test]
fn direct_mapped() {
    // 4 sets of one 16-byte line: 0x00 and 0x40 share set 0.
    let m = one_cache(64, Ways::N(1), Replacement::Lru, WritePolicy::WriteBack);
    let s = run(&m, &[(R, 0x00), (R, 0x40), (R, 0x00), (R, 0x10), (R, 0x14)]);
    let st = s.cache_stats("C").unwrap();
    assert_eq!((st.hits, st.misses), (1, 4));
    assert_eq!(s.ticks(), 4.0 * 10.0 + 1.0);
}

#[test]
fn lru_two_ways() {
    // One set of two ways. A B A C B: C evicts B (least recent), B evicts A.
    let m = one_cache(32, Ways::N(2), Replacement::Lru, WritePolicy::WriteBack);
    let (a, b, c) = (0x000, 0x100, 0x200);
    let s = run(&m, &[(R, a), (R, b), (R, a), (R, c), (R, b), (R, c)]);
    let st = s.cache_stats("C").unwrap();
    assert_eq!((st.hits, st.misses), (2, 4));
}

#[test]
fn fifo_two_ways() {
    // A B A C B: C evicts A (filled first) although A was used last; B hits.
    let m = one_cache(32, Ways::N(2), Replacement::Fifo, WritePolicy::WriteBack);
    let (a, b, c) = (0x000, 0x100, 0x200);
    let s = run(&m, &[(R, a), (R, b), (R, a), (R, c), (R, b), (R, a)]);
    let st = s.cache_stats("C").unwrap();
    // Misses: A, B, C, A (A was evicted); hits: A, B.
    assert_eq!((st.hits, st.misses), (2, 4));
}

#[test]
fn tree_plru_differs_from_lru() {
    // One set of 4 ways: A B C D A E B. LRU evicts B for E, so B misses; tree-PLRU's bits
    // point at C (root -> right half after A's use, node 3 -> way 2), so B hits.
    let (a, b, c, d, e) = (0x000, 0x100, 0x200, 0x300, 0x400);
    let trace = [
        (R, a),
        (R, b),
        (R, c),
        (R, d),
        (R, a),
        (R, e),
        (R, b),
        (R, c),
    ];
    let lru = run(
        &one_cache(64, Ways::N(4), Replacement::Lru, WritePolicy::WriteBack),
        &trace,
    );
    let plru = run(
        &one_cache(
            64,
            Ways::N(4),
            Replacement::TreePlru,
            WritePolicy::WriteBack,
        ),
        &trace,
    );
    let (l, p) = (
        lru.cache_stats("C").unwrap(),
        plru.cache_stats("C").unwrap(),
    );
    // LRU: misses A B C D E B C (C was evicted by B), hit A.
    assert_eq!((l.hits, l.misses), (1, 7));
    // PLRU: misses A B C D E C, hits A B.
    assert_eq!((p.hits, p.misses), (2, 6));
}

#[test]
fn random_is_seeded_and_predictable() {
    // One set of two ways holding A (way 0) and B (way 1); C evicts way `rng.usize(..2)` of a
    // generator seeded with the cache's seed: the next access to the evicted line misses.
    let mut m = one_cache(32, Ways::N(2), Replacement::Random, WritePolicy::WriteBack);
    m.caches[0].seed = 42;
    let evicted = fastrand::Rng::with_seed(42).usize(..2);
    let (a, b, c) = (0x000u64, 0x100, 0x200);
    let victim = [a, b][evicted];
    let survivor = [a, b][1 - evicted];
    let s = run(&m, &[(R, a), (R, b), (R, c), (R, c), (R, survivor)]);
    let st = s.cache_stats("C").unwrap();
    assert_eq!((st.hits, st.misses), (2, 3));
    let s2 = run(&m, &[(R, a), (R, b), (R, c), (R, victim)]);
    assert_eq!(s2.cache_stats("C").unwrap().misses, 4);
}

#[test]
fn write_back_counts_dirty_victims() {
    // Two sets of one line; 0x00 and 0x20 share set 0.
    let m = one_cache(32, Ways::N(1), Replacement::Lru, WritePolicy::WriteBack);
    let s = run(&m, &[(W, 0x00), (R, 0x20), (R, 0x00), (W, 0x00), (W, 0x04)]);
    let st = s.cache_stats("C").unwrap();
    assert_eq!((st.hits, st.misses, st.writebacks, st.fills), (2, 3, 1, 3));
    let mem = s.memory_stats();
    assert_eq!((mem.fills, mem.writebacks, mem.writes), (3, 1, 0));
    // W miss 10, R miss with a dirty victim 12, R miss 10, two hits 1 each.
    assert_eq!(s.ticks(), 10.0 + 12.0 + 10.0 + 1.0 + 1.0);
}

#[test]
fn write_through_no_allocate() {
    let m = one_cache(32, Ways::N(1), Replacement::Lru, WritePolicy::WriteThrough);
    let s = run(&m, &[(W, 0x00), (R, 0x20), (R, 0x00), (W, 0x00), (R, 0x40)]);
    let st = s.cache_stats("C").unwrap();
    // W 0x00 misses and is not allocated; R 0x20 and R 0x00 miss and fill; W 0x00 hits and
    // writes through; R 0x40 misses, evicting a clean line.
    assert_eq!((st.hits, st.misses, st.writebacks, st.fills), (1, 4, 0, 3));
    let mem = s.memory_stats();
    assert_eq!((mem.fills, mem.writebacks, mem.writes), (3, 0, 2));
    // Writes cost the hit (write buffer); reads from memory 10.
    assert_eq!(s.ticks(), 1.0 + 10.0 + 10.0 + 1.0 + 10.0);
}

#[test]
fn two_levels_write_back_into_l2() {
    // L1: 2 sets x 1 way x 16 B (2 ticks); L2: 8 sets x 1 way x 16 B (5 ticks); memory 20/30.
    let l1 = CacheConfig::new("L1", 1, Side::Unified, 32, 16, Ways::N(1), 2.0);
    let l2 = CacheConfig::new("L2", 2, Side::Unified, 128, 16, Ways::N(1), 5.0);
    let mut m = one_cache(32, Ways::N(1), Replacement::Lru, WritePolicy::WriteBack);
    m.caches = vec![l1, l2];
    m.memory = MemoryConfig::new(20.0, 30.0);
    let mut s = Simulator::new(&m).unwrap();
    assert_eq!(s.access(W, 0x00, 4), 20.0); // both miss, from memory; L1 line dirty
    assert_eq!(s.access(R, 0x20, 4), 20.0); // L1 set 0 evicts dirty 0x00 into L2 (hit there)
    assert_eq!(s.access(R, 0x00, 4), 5.0); // L1 miss, L2 hit
    // 0x80 maps to L2 set 0 (holding dirty 0x00) and L1 set 0 (holding 0x00, clean).
    assert_eq!(s.access(R, 0x80, 4), 30.0); // from memory, L2's dirty victim goes to memory
    let l1s = s.cache_stats("L1").unwrap().clone();
    let l2s = s.cache_stats("L2").unwrap().clone();
    assert_eq!((l1s.misses, l1s.writebacks), (4, 1));
    assert_eq!(
        (l2s.hits, l2s.misses, l2s.writebacks_in, l2s.writebacks),
        (1, 3, 1, 1)
    );
    assert_eq!(s.memory_stats().writebacks, 1);
}

#[test]
fn split_l1_routes_by_kind() {
    let i = CacheConfig::new("L1I", 1, Side::Instruction, 64, 16, Ways::N(1), 1.0);
    let d = CacheConfig::new("L1D", 1, Side::Data, 64, 16, Ways::N(1), 1.0);
    let mut m = one_cache(32, Ways::N(1), Replacement::Lru, WritePolicy::WriteBack);
    m.caches = vec![i, d];
    let s = run(&m, &[(Op::Ifetch, 0x00), (R, 0x00), (Op::Ifetch, 0x00)]);
    assert_eq!(s.cache_stats("L1I").unwrap().ifetches, 2);
    assert_eq!(s.cache_stats("L1I").unwrap().hits, 1);
    assert_eq!(s.cache_stats("L1D").unwrap().misses, 1);
}

#[test]
fn spanning_reference_touches_each_line() {
    let m = one_cache(1024, Ways::N(1), Replacement::Lru, WritePolicy::WriteBack);
    let mut s = Simulator::new(&m).unwrap();
    // 40 bytes from 0x0c touch lines 0x00, 0x10, 0x20, 0x30.
    assert_eq!(s.access(R, 0x0c, 40), 40.0);
    assert_eq!(s.report().line_accesses, 4);
    assert_eq!(s.access(R, 0x10, 32), 2.0);
}

#[test]
fn miss_kinds() {
    // Two sets of one line. A=0x00, C=0x20 share set 0; B=0x10 is set 1.
    let m = one_cache(32, Ways::N(1), Replacement::Lru, WritePolicy::WriteBack);
    let (a, b, c) = (0x00, 0x10, 0x20);
    // A B C A: three compulsory; the last A also misses in a 2-line fully associative LRU
    // cache ({B, C}): capacity.
    let s = run(&m, &[(R, a), (R, b), (R, c), (R, a)]);
    let st = s.cache_stats("C").unwrap();
    assert_eq!((st.compulsory, st.capacity, st.conflict), (3, 1, 0));
    // A C A: the second A would hit in a 2-line fully associative cache: conflict.
    let s = run(&m, &[(R, a), (R, c), (R, a)]);
    let st = s.cache_stats("C").unwrap();
    assert_eq!((st.compulsory, st.capacity, st.conflict), (2, 0, 1));
}

#[test]
fn miss_kinds_see_every_access_after_a_write_through_write_hit() {
    // One set of two ways, FIFO, write-through (no-write-allocate); the shadow is a 2-line
    // fully associative LRU cache that takes the same accesses with the same allocation.
    let m = one_cache(32, Ways::N(2), Replacement::Fifo, WritePolicy::WriteThrough);
    let (a, b, c) = (0x000, 0x100, 0x200);
    // R A, R B: compulsory. R A: hit (shadow LRU order B, A). R C: compulsory; FIFO evicts
    // A (cache {B, C}), the shadow evicts B ({A, C}). W B: a hit in the cache, a miss in
    // the shadow, which does not allocate on a write. R B: a hit in the cache, but the
    // shadow misses and takes B, evicting A ({C, B}). R A: a miss the shadow also has:
    // capacity, not conflict (the shadow must see R B although the cache hit the line it
    // touched last).
    let s = run(
        &m,
        &[(R, a), (R, b), (R, a), (R, c), (W, b), (R, b), (R, a)],
    );
    let st = s.cache_stats("C").unwrap();
    assert_eq!((st.hits, st.misses), (3, 4));
    assert_eq!((st.compulsory, st.capacity, st.conflict), (3, 1, 0));
}

fn with_tlb(levels: Vec<TlbLevelConfig>, miss: f64) -> Machine {
    let mut m = one_cache(
        1 << 20,
        Ways::N(1),
        Replacement::Lru,
        WritePolicy::WriteBack,
    );
    m.caches[0].hit_ticks = 0.0;
    m.memory = MemoryConfig::new(0.0, 0.0);
    m.tlbs = vec![TlbConfig {
        name: "DTLB".into(),
        side: Side::Data,
        page: shmnet_sim::ByteSize(4096),
        levels,
        miss_ticks: miss,
    }];
    m
}

#[test]
fn tlb_fully_associative_lru() {
    let m = with_tlb(
        vec![TlbLevelConfig {
            entries: 2,
            ways: Ways::FULL,
            hit_ticks: 0.0,
            replacement: Replacement::Lru,
        }],
        10.0,
    );
    let mut s = Simulator::new(&m).unwrap();
    // Pages 0 1 0 2 1: 0 m, 1 m, 0 h, 2 m (evicts 1), 1 m.
    let ticks: Vec<f64> = [0u64, 1, 0, 2, 1]
        .iter()
        .map(|p| s.access(R, p * 4096 + 8, 4))
        .collect();
    assert_eq!(ticks, [10.0, 10.0, 0.0, 10.0, 10.0]);
    let t = s.tlb_stats("DTLB").unwrap();
    assert_eq!((t.lookups, t.hits.clone(), t.misses), (5, vec![1], 4));
    // Instruction fetches are not translated by a data TLB.
    assert_eq!(s.access(Op::Ifetch, 9 * 4096, 4), 0.0);
}

#[test]
fn tlb_two_levels() {
    let m = with_tlb(
        vec![
            TlbLevelConfig {
                entries: 1,
                ways: Ways::N(1),
                hit_ticks: 0.0,
                replacement: Replacement::Lru,
            },
            TlbLevelConfig {
                entries: 4,
                ways: Ways::N(2),
                hit_ticks: 3.0,
                replacement: Replacement::Lru,
            },
        ],
        20.0,
    );
    let mut s = Simulator::new(&m).unwrap();
    let ticks: Vec<f64> = [0u64, 1, 0, 0, 2, 4, 0]
        .iter()
        .map(|p| s.access(R, p * 4096, 4))
        .collect();
    // 0 walk; 1 walk; 0 in L2 (+3); 0 in L1; 2 walk; 4 walk (L2 set 0 = {0, 2} -> evicts 0);
    // 0 walk again.
    assert_eq!(ticks, [20.0, 20.0, 3.0, 0.0, 20.0, 20.0, 20.0]);
    assert_eq!(s.tlb_stats("DTLB").unwrap().hits, vec![1, 1]);
}

#[test]
fn huge_pages_use_their_own_tlb() {
    let mut m = with_tlb(
        vec![TlbLevelConfig {
            entries: 1,
            ways: Ways::FULL,
            hit_ticks: 0.0,
            replacement: Replacement::Lru,
        }],
        10.0,
    );
    let mut huge = m.tlbs[0].clone();
    huge.name = "DTLB2M".into();
    huge.page = shmnet_sim::ByteSize(2 << 20);
    huge.miss_ticks = 1.0;
    m.tlbs.push(huge);
    m.huge_pages.push(shmnet_sim::PageRange {
        start: 1 << 30,
        end: (1 << 30) + (8 << 20),
        page: shmnet_sim::ByteSize(2 << 20),
    });
    let mut s = Simulator::new(&m).unwrap();
    // 4 KiB pages thrash the 1-entry 4K TLB; the huge range is one 2 MiB page.
    let small: f64 = (0..4).map(|i| s.access(R, i * 4096, 4)).sum();
    let big: f64 = (0..4).map(|i| s.access(R, (1 << 30) + i * 4096, 4)).sum();
    assert_eq!((small, big), (40.0, 1.0));
}

#[test]
fn bad_geometry_is_a_clear_error() {
    let m = one_cache(96, Ways::N(1), Replacement::Lru, WritePolicy::WriteBack);
    let e = Simulator::new(&m).err().unwrap().to_string();
    assert!(e.contains("power of two"), "{e}");
    let mut m = one_cache(64, Ways::N(3), Replacement::Lru, WritePolicy::WriteBack);
    let e = Simulator::new(&m).err().unwrap().to_string();
    assert!(e.contains("ways"), "{e}");
    m.caches[0].ways = Ways::N(4);
    m.caches[0].replacement = Replacement::TreePlru;
    Simulator::new(&m).unwrap();
    m.caches[0].line = shmnet_sim::ByteSize(24);
    let e = Simulator::new(&m).err().unwrap().to_string();
    assert!(e.contains("line") && e.contains("power of two"), "{e}");
}
