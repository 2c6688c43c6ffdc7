//! Uncacheable ranges and cache-maintenance ops on small machines, every count and tick
//! worked out by hand; the unity-2010 preset against seed 003's parameters.

use shmnet_sim::trace::{BinaryReader, DinReader, TraceWriter, din};
use shmnet_sim::{
    CacheConfig, ConfigError, Machine, MaintenanceConfig, MemoryConfig, Op, Options, Party, Ref,
    Replacement, Side, Simulator, TraceSource, UncacheableRange, Ways, WritePolicy,
};

/// One unified LRU write-back cache of 64 bytes: 16-byte lines, 2 ways, 2 sets (a line's set
/// is bit 4 of its address). Hits 1 tick, memory 10 (12 with a dirty victim); uncacheable
/// reads 50, writes 30; maintenance 2 per line, 1 per line walked, 5 per write-back.
fn small() -> Machine {
    Machine {
        name: "small".into(),
        description: String::new(),
        tick_unit: "ticks".into(),
        caches: vec![CacheConfig::new(
            "C",
            1,
            Side::Unified,
            64,
            16,
            Ways::N(2),
            1.0,
        )],
        tlbs: vec![],
        memory: MemoryConfig {
            uncached_read_ticks: Some(50.0),
            uncached_write_ticks: Some(30.0),
            ..MemoryConfig::new(10.0, 12.0)
        },
        base_page: shmnet_sim::ByteSize(4096),
        huge_pages: vec![],
        uncacheable: vec![UncacheableRange::new(0x100, 0x20)],
        maintenance: MaintenanceConfig {
            line_ticks: 2.0,
            walk_ticks: 1.0,
            writeback_ticks: Some(5.0),
        },
        notes: vec![],
    }
}

fn ccc(m: &Machine) -> Simulator {
    Simulator::with_options(
        m,
        Options {
            ccc: true,
            ..Options::default()
        },
    )
    .unwrap()
}

#[test]
fn uncacheable_references_bypass_every_cache() {
    let mut s = ccc(&small());
    // 0x100..0x120 is uncacheable: every access pays its own cost, nothing is cached.
    assert_eq!(s.access(Op::Read, 0x100, 4), 50.0);
    assert_eq!(s.access(Op::Read, 0x104, 4), 50.0, "never a hit");
    assert_eq!(
        s.access(Op::Write, 0x110, 16),
        30.0,
        "a whole line: one access"
    );
    assert_eq!(s.access(Op::Ifetch, 0x118, 4), 50.0, "a fetch is a read");
    // 8 bytes at 0xf8: the cacheable line 0xf0 (a miss, 10) and the uncacheable 0x100 (50).
    assert_eq!(s.access(Op::Read, 0xf8, 16), 60.0);
    let c = s.cache_stats("C").unwrap();
    assert_eq!((c.reads, c.writes, c.ifetches), (1, 0, 0));
    assert_eq!((c.hits, c.misses, c.fills), (0, 1, 1));
    let m = s.memory_stats();
    assert_eq!((m.uncached_reads, m.uncached_writes, m.fills), (4, 1, 1));
    assert_eq!(s.cached_lines(0x100, 0x20), 0);
    assert_eq!(s.cached_lines(0xf0, 0x30), 1);
    assert!(s.is_uncacheable(0x11f) && !s.is_uncacheable(0x120) && !s.is_uncacheable(0xff));
    let r = s.report();
    assert_eq!(r.line_accesses, 6);
    assert_eq!(r.ticks, 240.0);
}

#[test]
fn uncacheable_costs_default_to_a_memory_access() {
    let mut m = small();
    m.memory = MemoryConfig::new(10.0, 12.0);
    let mut s = Simulator::new(&m).unwrap();
    assert_eq!(s.access(Op::Read, 0x100, 4), 10.0);
    assert_eq!(s.access(Op::Write, 0x100, 4), 10.0);
}

#[test]
fn uncacheable_ranges_are_checked() {
    let mut m = small();
    m.uncacheable = vec![UncacheableRange::new(0x108, 0x10)];
    let e = m.validate().unwrap_err();
    assert!(
        matches!(&e, ConfigError::Geometry { name, detail } if name == "uncacheable" && detail.contains("16-byte lines")),
        "{e}"
    );
    m.uncacheable = vec![UncacheableRange::new(0x100, 0)];
    assert!(m.validate().unwrap_err().to_string().contains("empty"));
    m.uncacheable = vec![UncacheableRange::new(u64::MAX - 15, 32)];
    assert!(
        m.validate()
            .unwrap_err()
            .to_string()
            .contains("past the end")
    );
    // Adding one at run time is checked the same way, and a refusal changes nothing.
    let mut s = Simulator::new(&small()).unwrap();
    assert!(s.set_uncacheable(UncacheableRange::new(0x8, 16)).is_err());
    assert_eq!(s.machine().uncacheable.len(), 1);
    // The preset format: `uncacheable = [...]`, costs in [memory], [maintenance].
    let text = r#"
        name = "t"
        uncacheable = [{ start = "0x1000", len = "4K" }, { start = 8192, len = 64 }]
        [[cache]]
        name = "C"
        level = 1
        side = "unified"
        size = "1K"
        line = 32
        ways = 2
        hit_ticks = 1
        [memory]
        ticks = 22
        dirty_ticks = 34
        uncached_read_ticks = 105
        uncached_write_ticks = 48
        [maintenance]
        walk_ticks = 1
    "#;
    let m = Machine::from_toml_str(text).unwrap();
    assert_eq!(
        m.uncacheable,
        [
            UncacheableRange::new(0x1000, 4096),
            UncacheableRange::new(0x2000, 64)
        ]
    );
    assert_eq!(m.memory.uncached_read(), 105.0);
    assert_eq!(m.maintenance.line_ticks, 0.0, "absent: 0");
    assert_eq!(
        m.maintenance.writeback(&m.memory),
        12.0,
        "absent: dirty - clean"
    );
    let again = Machine::from_toml_str(&m.to_toml_string()).unwrap();
    assert_eq!(again, m);
    let bad = text.replace("walk_ticks = 1", "walk_ticks = -1");
    assert!(Machine::from_toml_str(&bad).is_err());
}

#[test]
fn a_range_made_uncacheable_is_flushed_first() {
    let mut s = Simulator::new(&small()).unwrap();
    assert_eq!(s.access(Op::Write, 0x200, 4), 10.0); // dirty
    assert_eq!(s.access(Op::Read, 0x210, 4), 10.0); // clean
    s.set_uncacheable(UncacheableRange::new(0x200, 0x20))
        .unwrap();
    // Both lines discarded, the dirty one written back; nothing charged.
    assert_eq!(s.cached_lines(0x200, 0x20), 0);
    let c = s.cache_stats("C").unwrap();
    assert_eq!(
        (c.maint_writebacks, c.invalidations, c.writebacks),
        (1, 2, 0)
    );
    assert_eq!(s.memory_stats().maint_writebacks, 1);
    assert_eq!(s.maintenance_stats().uncacheable_flushed, 2);
    assert_eq!(s.ticks(), 20.0);
    assert_eq!(s.access(Op::Read, 0x200, 4), 50.0);
    assert_eq!(s.machine().uncacheable.len(), 2);
}

#[test]
fn clean_writes_back_and_keeps_the_line() {
    let mut s = Simulator::new(&small()).unwrap();
    s.access(Op::Write, 0x00, 4); // miss, 10, dirty
    // 2 for the line + 5 for its write-back.
    assert_eq!(s.access(Op::Clean, 0x00, 4), 7.0);
    assert_eq!(s.access(Op::Read, 0x00, 4), 1.0, "still valid");
    assert_eq!(
        s.access(Op::Clean, 0x00, 4),
        2.0,
        "clean now: nothing to write"
    );
    // 32 bytes: lines 0x00 and 0x10 (the latter not cached): 2 + 2.
    assert_eq!(s.access(Op::Clean, 0x00, 32), 4.0);
    // Two more lines in set 0 evict 0x00, which is clean: no victim write-back.
    s.access(Op::Read, 0x40, 4);
    s.access(Op::Read, 0x80, 4);
    assert_eq!(s.memory_stats().writebacks, 0);
    assert_eq!(s.memory_stats().maint_writebacks, 1);
    let c = s.cache_stats("C").unwrap();
    assert_eq!((c.maint_writebacks, c.invalidations), (1, 0));
    let mt = s.maintenance_stats();
    assert_eq!((mt.clean_lines, mt.ticks), (4, 13.0));
    // Maintenance is no demand access.
    assert_eq!(c.accesses(), 4);
}

#[test]
fn clean_and_invalidate_writes_back_and_discards() {
    let mut s = ccc(&small());
    s.access(Op::Write, 0x00, 4);
    assert_eq!(s.access(Op::CleanInvalidate, 0x00, 1), 7.0);
    assert_eq!(s.cached_lines(0x00, 16), 0);
    assert_eq!(s.access(Op::Read, 0x00, 4), 10.0, "a miss again");
    let c = s.cache_stats("C").unwrap();
    assert_eq!((c.maint_writebacks, c.invalidations), (1, 1));
    assert_eq!(
        (c.compulsory, c.coherence, c.capacity, c.conflict),
        (1, 1, 0, 0),
        "the miss after the discard is a coherence miss"
    );
    assert_eq!(s.memory_stats().maint_writebacks, 1);
}

#[test]
fn invalidate_discards_dirty_data_and_frees_the_way() {
    let mut s = Simulator::new(&small()).unwrap();
    s.access(Op::Write, 0x00, 4);
    assert_eq!(s.access(Op::Invalidate, 0x00, 4), 2.0, "no write-back");
    let mt = s.maintenance_stats();
    assert_eq!((mt.invalidate_lines, mt.dirty_discarded), (1, 1));
    assert_eq!(s.memory_stats().maint_writebacks, 0);
    // Set 0: 0x00 and 0x40, then 0x00 used again (0x40 is the LRU); discarding 0x00 frees
    // its way, which 0x80 takes instead of evicting 0x40.
    let mut s = Simulator::new(&small()).unwrap();
    for a in [0x00, 0x40, 0x00] {
        s.access(Op::Read, a, 4);
    }
    s.access(Op::Invalidate, 0x00, 4);
    assert_eq!(s.access(Op::Read, 0x80, 4), 10.0);
    assert_eq!(s.access(Op::Read, 0x40, 4), 1.0, "0x40 stayed");
    assert_eq!(s.memory_stats().writebacks, 0);
}

#[test]
fn clean_all_walks_every_line_and_cleans_the_dirty_ones() {
    let mut s = Simulator::new(&small()).unwrap();
    s.access(Op::Write, 0x00, 4);
    s.access(Op::Write, 0x10, 4);
    s.access(Op::Read, 0x40, 4);
    // 4 lines walked at 1, 2 write-backs at 5; address and size ignored.
    assert_eq!(s.access(Op::CleanAll, 0xdead_beef, 1), 14.0);
    for a in [0x00, 0x10, 0x40] {
        assert_eq!(s.access(Op::Read, a, 4), 1.0, "{a:#x} stays valid");
    }
    assert_eq!(s.access(Op::CleanAll, 0, 1), 4.0, "nothing dirty left");
    let mt = s.maintenance_stats();
    assert_eq!((mt.clean_alls, mt.lines_examined, mt.ticks), (2, 8, 18.0));
    assert_eq!(s.memory_stats().maint_writebacks, 2);
    assert_eq!(s.cache_stats("C").unwrap().maint_writebacks, 2);
}

/// L1: 32 bytes, 16-byte lines, 2 ways (one set); L2: 128 bytes direct-mapped (8 sets).
fn two_levels() -> Machine {
    let mut m = small();
    m.caches = vec![
        CacheConfig::new("L1", 1, Side::Unified, 32, 16, Ways::N(2), 1.0),
        CacheConfig::new("L2", 2, Side::Unified, 128, 16, Ways::N(1), 4.0),
    ];
    m.uncacheable.clear();
    m
}

#[test]
fn a_clean_cascades_through_the_levels_that_hold_the_line() {
    // Both levels hold 0x00 (L1 dirty, L2 clean): L1's copy goes into L2's, which is then
    // cleaned to memory: one write-back reaches memory.
    let mut s = Simulator::new(&two_levels()).unwrap();
    s.access(Op::Write, 0x00, 4);
    assert_eq!(s.access(Op::Clean, 0x00, 4), 2.0 + 5.0);
    let (l1, l2) = (s.cache_stats("L1").unwrap(), s.cache_stats("L2").unwrap());
    assert_eq!((l1.maint_writebacks, l2.maint_writebacks), (1, 1));
    assert_eq!(s.memory_stats().maint_writebacks, 1);

    // L2 lost the line (0x80 shares its L2 set, not L1's way): L1's dirty copy goes
    // straight to memory, and L2 is not filled.
    let mut s = Simulator::new(&two_levels()).unwrap();
    s.access(Op::Write, 0x00, 4);
    s.access(Op::Read, 0x80, 4);
    assert_eq!(s.cached_lines(0x00, 16), 1, "L1 only");
    assert_eq!(s.access(Op::CleanInvalidate, 0x00, 4), 2.0 + 5.0);
    let (l1, l2) = (s.cache_stats("L1").unwrap(), s.cache_stats("L2").unwrap());
    assert_eq!((l1.maint_writebacks, l2.maint_writebacks), (1, 0));
    assert_eq!((l1.invalidations, l2.invalidations), (1, 0));
    assert_eq!(s.cached_lines(0x00, 16), 0);

    // A clean-all walks both levels (2 + 8 lines): L1's two dirty lines cascade into L2's
    // copies, and those two reach memory.
    let mut s = Simulator::new(&two_levels()).unwrap();
    s.access(Op::Write, 0x00, 4);
    s.access(Op::Write, 0x10, 4);
    assert_eq!(s.access(Op::CleanAll, 0, 1), 10.0 + 2.0 * 5.0);
    let (l1, l2) = (s.cache_stats("L1").unwrap(), s.cache_stats("L2").unwrap());
    assert_eq!((l1.maint_writebacks, l2.maint_writebacks), (2, 2));
    assert_eq!(s.memory_stats().maint_writebacks, 2);
}

#[test]
fn maintenance_by_address_is_translated_like_data() {
    // hp720-1993: a 76-entry data TLB, 88 cycles a walk; no [maintenance]: lines free,
    // write-backs at dirty - clean = 24 - 19 = 5.
    let m = Machine::preset("hp720-1993").unwrap();
    let mut s = Simulator::new(&m).unwrap();
    assert_eq!(s.access(Op::Clean, 0x5000, 4), 88.0);
    assert_eq!(s.access(Op::Write, 0x5000, 4), 19.0);
    assert_eq!(s.access(Op::Clean, 0x5000, 4), 5.0);
    assert_eq!(s.tlb_stats("DTLB").unwrap().lookups, 3);
    assert_eq!(s.access(Op::CleanAll, 0x9_0000, 1), 0.0, "not translated");
    assert_eq!(s.tlb_stats("DTLB").unwrap().lookups, 3);
}

#[test]
fn maintenance_ops_travel_in_binary_traces_only() {
    let refs: Vec<Ref> = Op::ALL
        .iter()
        .enumerate()
        .map(|(i, &op)| Ref {
            party: Party::Driver,
            op,
            size: 4 + i as u32,
            addr: 0x40 * i as u64,
        })
        .collect();
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    for r in &refs {
        w.write(r.party, r.op, r.addr, u64::from(r.size)).unwrap();
    }
    let bytes = w.finish().unwrap();
    // The clean-and-invalidate record: party 0, op 4, size 8, address 0x100.
    assert_eq!(
        &bytes[16 + 4 * 12..16 + 5 * 12],
        &[0, 4, 8, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    );
    let mut rd = BinaryReader::new(&bytes[..]).unwrap();
    let mut got = Vec::new();
    rd.next_batch(&mut got, 100).unwrap();
    assert_eq!(got, refs);
    // Run from the file equals one at a time.
    let m = Machine::preset("unity-2010").unwrap();
    let mut one = Simulator::new(&m).unwrap();
    for r in &refs {
        one.access_ref(r);
    }
    let mut run = Simulator::new(&m).unwrap();
    run.run(&mut BinaryReader::new(&bytes[..]).unwrap(), |_| {})
        .unwrap();
    assert_eq!(
        serde_json::to_string(&one.report()).unwrap(),
        serde_json::to_string(&run.report()).unwrap()
    );
    // Dinero has no label for them: refused both ways.
    let mut text = Vec::new();
    assert!(din::write_ref(&mut text, Op::Clean, 0, 4).is_err());
    let mut out = Vec::new();
    assert!(
        DinReader::new(&b"3 1000 4\n"[..])
            .next_batch(&mut out, 10)
            .is_err()
    );
    // An op code past the last is still an error.
    let mut bad = bytes.clone();
    bad[16 + 1] = Op::MAX_CODE + 1;
    let mut rd = BinaryReader::new(&bad[..]).unwrap();
    let e = rd.next_batch(&mut out, 10).unwrap_err().to_string();
    assert!(e.contains("op 7 is not 0..=6"), "{e}");
    assert_eq!(
        serde_json::to_string(&Op::CleanAll).unwrap(),
        "\"clean-all\""
    );
    assert_eq!(serde_json::to_string(&Op::Ifetch).unwrap(), "\"ifetch\"");
}

#[test]
fn unity_2010_is_the_seeds_machine() {
    let m = Machine::preset("unity-2010").unwrap();
    let l1d = m
        .caches
        .iter()
        .find(|c| c.side == Side::Data && c.level == 1)
        .unwrap();
    assert_eq!((l1d.size.0, l1d.line.0, l1d.lines()), (16 << 10, 32, 512));
    assert_eq!(l1d.ways, Ways::N(4));
    assert_eq!(
        (l1d.write, l1d.replacement),
        (WritePolicy::WriteBack, Replacement::Lru)
    );
    assert_eq!(m.depth(), 1);
    // C_br, C_br + C_bw, C_cr, C_cw, and C_bw per maintenance write-back.
    assert_eq!((m.memory.ticks, m.memory.dirty_ticks), (22.0, 34.0));
    assert_eq!(
        (m.memory.uncached_read(), m.memory.uncached_write()),
        (105.0, 48.0)
    );
    assert_eq!(m.maintenance.writeback(&m.memory), 12.0);
    // The whole-cache clean with n dirty lines: 512 lines walked at 1 + n × C_bw.
    let mut s = Simulator::new(&m).unwrap();
    for i in 0..100u64 {
        s.access(Op::Write, 0x10_0000 + 32 * i, 4);
    }
    assert_eq!(s.access(Op::CleanAll, 0, 1), 512.0 + 100.0 * 12.0);
    // A line of uncacheable memory, read and written a line at a time: C_cr, C_cw.
    s.set_uncacheable(UncacheableRange::new(0x20_0000, 4096))
        .unwrap();
    assert_eq!(s.access(Op::Read, 0x20_0000, 32), 105.0);
    assert_eq!(s.access(Op::Write, 0x20_0020, 32), 48.0);
}
