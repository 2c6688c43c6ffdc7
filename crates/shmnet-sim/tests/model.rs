//! A property test: the simulator against a deliberately simple reference model — a `Vec`
//! per set, the victim at the front — on random hierarchies (one to three unified levels,
//! random sizes, lines, associativity, LRU or FIFO, write-back or write-through, with or
//! without an uncacheable range) and random traces, cache-maintenance ops among them. Every
//! count and the total ticks must be identical.

use std::collections::HashSet;

use proptest::prelude::*;
use shmnet_sim::{
    ByteSize, CacheConfig, Machine, MaintenanceConfig, MemoryConfig, Op, Options, Replacement,
    Side, Simulator, UncacheableRange, Ways, WritePolicy,
};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Counts {
    hits: u64,
    misses: u64,
    fills: u64,
    writebacks: u64,
    writebacks_in: u64,
    writebacks_in_misses: u64,
    compulsory: u64,
    coherence: u64,
    capacity: u64,
    conflict: u64,
    maint_writebacks: u64,
    invalidations: u64,
}

struct ModelCache {
    shift: u32,
    ways: usize,
    /// Each set: (line, dirty), the victim first.
    sets: Vec<Vec<(u64, bool)>>,
    lru: bool,
    write_back: bool,
    hit_ticks: u64,
    seen: HashSet<u64>,
    /// Lines maintenance discarded since they were last referenced.
    discarded: HashSet<u64>,
    /// Fully associative LRU of the same capacity, the least recent first.
    fa: Vec<u64>,
    capacity: usize,
    c: Counts,
}

#[derive(Clone, Copy, PartialEq)]
enum Acc {
    Read,
    Write,
    WriteBack { whole: bool },
}

struct Model {
    levels: Vec<ModelCache>,
    mem_ticks: u64,
    mem_dirty: u64,
    dirty_to_mem: bool,
    mem_fills: u64,
    mem_writebacks: u64,
    mem_writes: u64,
    /// The uncacheable range, if any, and the ticks of its reads and writes.
    uncached: Option<(u64, u64)>,
    uncached_ticks: (u64, u64),
    uncached_reads: u64,
    uncached_writes: u64,
    /// Maintenance: ticks per line op, per line walked, per write-back to memory.
    maint_ticks: (u64, u64, u64),
    maint_writebacks: u64,
    dirty_discarded: u64,
}

impl Model {
    fn access(&mut self, d: usize, addr: u64, op: Acc) -> usize {
        if d == self.levels.len() {
            match op {
                Acc::Read => self.mem_fills += 1,
                Acc::Write => self.mem_writes += 1,
                Acc::WriteBack { .. } => {
                    self.mem_writebacks += 1;
                    self.dirty_to_mem = true;
                }
            }
            return d;
        }
        let is_write = op != Acc::Read;
        let demand = !matches!(op, Acc::WriteBack { .. });
        let lc = &mut self.levels[d];
        let line = addr >> lc.shift;
        let allocate = !is_write || lc.write_back;
        let set_i = (line as usize) % lc.sets.len();
        if !demand {
            lc.c.writebacks_in += 1;
        }
        // The shadow.
        let seen = !lc.seen.insert(line);
        let discarded = lc.discarded.remove(&line);
        let fa_pos = lc.fa.iter().position(|&l| l == line);
        let fa_hit = fa_pos.is_some();
        if let Some(p) = fa_pos {
            lc.fa.remove(p);
            lc.fa.push(line);
        } else if allocate {
            if lc.fa.len() == lc.capacity {
                lc.fa.remove(0);
            }
            lc.fa.push(line);
        }
        let set = &mut lc.sets[set_i];
        if let Some(p) = set.iter().position(|&(l, _)| l == line) {
            if demand {
                lc.c.hits += 1;
            }
            if lc.lru {
                let e = set.remove(p);
                set.push(e);
            }
            if is_write {
                if lc.write_back {
                    let p = set.iter().position(|&(l, _)| l == line).unwrap();
                    set[p].1 = true;
                } else {
                    let saved = self.dirty_to_mem;
                    self.access(d + 1, addr, op);
                    self.dirty_to_mem = saved;
                }
            }
            return d;
        }
        if demand {
            lc.c.misses += 1;
            if !seen {
                lc.c.compulsory += 1;
            } else if discarded {
                lc.c.coherence += 1;
            } else if !fa_hit {
                lc.c.capacity += 1;
            } else {
                lc.c.conflict += 1;
            }
        } else {
            lc.c.writebacks_in_misses += 1;
        }
        if !allocate {
            let saved = self.dirty_to_mem;
            self.access(d + 1, addr, op);
            self.dirty_to_mem = saved;
            return d;
        }
        let served = match op {
            Acc::WriteBack { whole: true } => d,
            _ => self.access(d + 1, addr, Acc::Read),
        };
        let lc = &mut self.levels[d];
        let set = &mut lc.sets[set_i];
        let victim = if set.len() == lc.ways {
            Some(set.remove(0))
        } else {
            None
        };
        set.push((line, is_write));
        lc.c.fills += 1;
        if let Some((v, true)) = victim {
            lc.c.writebacks += 1;
            let shift = lc.shift;
            let whole = d + 1 >= self.levels.len() || self.levels[d + 1].shift <= shift;
            self.access(d + 1, v << shift, Acc::WriteBack { whole });
        }
        served
    }

    /// Where level `d`'s copy of the line holding `addr` is: (set, position).
    fn find(&self, d: usize, addr: u64) -> Option<(usize, usize)> {
        let lc = &self.levels[d];
        let line = addr >> lc.shift;
        let set_i = (line as usize) % lc.sets.len();
        lc.sets[set_i]
            .iter()
            .position(|&(l, _)| l == line)
            .map(|p| (set_i, p))
    }

    /// Cleans level `d`'s dirty copy at (set, p): clean, and into the nearest lower
    /// write-back level holding the line (dirty there), or memory. Returns 1 for memory.
    fn clean(&mut self, d: usize, set_i: usize, p: usize) -> u64 {
        let lc = &mut self.levels[d];
        lc.sets[set_i][p].1 = false;
        lc.c.maint_writebacks += 1;
        let addr = lc.sets[set_i][p].0 << lc.shift;
        for e in d + 1..self.levels.len() {
            if let Some((s, q)) = self.find(e, addr) {
                if self.levels[e].write_back {
                    self.levels[e].sets[s][q].1 = true;
                    return 0;
                }
            }
        }
        self.maint_writebacks += 1;
        1
    }

    fn maintain(&mut self, op: Op, addr: u64, size: u32) -> u64 {
        let (line_t, walk_t, wb_t) = self.maint_ticks;
        if op == Op::CleanAll {
            let (mut walked, mut to_mem) = (0, 0);
            for d in 0..self.levels.len() {
                walked += self.levels[d].capacity as u64;
                for s in 0..self.levels[d].sets.len() {
                    for p in 0..self.levels[d].sets[s].len() {
                        if self.levels[d].sets[s][p].1 {
                            to_mem += self.clean(d, s, p);
                        }
                    }
                }
            }
            return walked * walk_t + to_mem * wb_t;
        }
        let shift = self.levels[0].shift;
        let (first, last) = (addr >> shift, (addr + u64::from(size) - 1) >> shift);
        let mut t = 0;
        for line in first..=last {
            let a = line << shift;
            let mut to_mem = 0;
            for d in 0..self.levels.len() {
                let Some((s, p)) = self.find(d, a) else {
                    continue;
                };
                let dirty = self.levels[d].sets[s][p].1;
                if op == Op::Invalidate {
                    self.dirty_discarded += u64::from(dirty);
                } else if dirty {
                    to_mem += self.clean(d, s, p);
                }
                if op != Op::Clean {
                    let lc = &mut self.levels[d];
                    let (l, _) = lc.sets[s].remove(p);
                    lc.c.invalidations += 1;
                    if let Some(f) = lc.fa.iter().position(|&x| x == l) {
                        lc.fa.remove(f);
                    }
                    lc.discarded.insert(l);
                }
            }
            t += line_t + to_mem * wb_t;
        }
        t
    }

    fn reference(&mut self, op: Op, addr: u64, size: u32) -> u64 {
        if op.is_maintenance() {
            return self.maintain(op, addr, size);
        }
        let shift = self.levels[0].shift;
        let (first, last) = (addr >> shift, (addr + u64::from(size) - 1) >> shift);
        let mut t = 0;
        for line in first..=last {
            if let Some((start, end)) = self.uncached {
                if (start..end).contains(&(line << shift)) {
                    if op == Op::Write {
                        self.uncached_writes += 1;
                        t += self.uncached_ticks.1;
                    } else {
                        self.uncached_reads += 1;
                        t += self.uncached_ticks.0;
                    }
                    continue;
                }
            }
            self.dirty_to_mem = false;
            let acc = if op == Op::Write {
                Acc::Write
            } else {
                Acc::Read
            };
            let served = self.access(0, line << shift, acc);
            t += if served == self.levels.len() {
                self.mem_ticks
            } else {
                self.levels[served].hit_ticks
            };
            if self.dirty_to_mem {
                t += self.mem_dirty - self.mem_ticks;
            }
        }
        t
    }
}

#[derive(Debug, Clone)]
struct Level {
    sets_log2: u32,
    ways: u32,
    line_log2: u32,
    lru: bool,
    write_back: bool,
}

fn level() -> impl Strategy<Value = Level> {
    (
        0u32..4,
        1u32..6,
        4u32..7,
        any::<bool>(),
        prop::bool::weighted(0.75),
    )
        .prop_map(|(sets_log2, ways, line_log2, lru, write_back)| Level {
            sets_log2,
            ways,
            line_log2,
            lru,
            write_back,
        })
}

fn hierarchy() -> impl Strategy<Value = Vec<Level>> {
    prop::collection::vec(level(), 1..=3).prop_map(|mut v| {
        // Lines must not shrink going down; sort them so.
        let mut lines: Vec<u32> = v.iter().map(|l| l.line_log2).collect();
        lines.sort_unstable();
        for (l, s) in v.iter_mut().zip(lines) {
            l.line_log2 = s;
        }
        v
    })
}

fn trace() -> impl Strategy<Value = Vec<(Op, u64, u32)>> {
    let op = prop_oneof![
        4 => Just(Op::Read),
        3 => Just(Op::Write),
        1 => Just(Op::Ifetch),
        1 => prop_oneof![
            Just(Op::Clean),
            Just(Op::CleanInvalidate),
            Just(Op::Invalidate),
            Just(Op::CleanAll),
        ],
    ];
    prop::collection::vec((op, 0u64..4096, 1u32..48), 1..400)
}

fn machine(levels: &[Level], uncached: bool) -> Machine {
    let caches = levels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let line = 1u64 << l.line_log2;
            let size = (1u64 << l.sets_log2) * u64::from(l.ways) * line;
            let mut c = CacheConfig::new(
                &format!("L{}", i + 1),
                i as u32 + 1,
                Side::Unified,
                size,
                line,
                Ways::N(l.ways),
                (i as f64 + 1.0) * 3.0,
            );
            c.replacement = if l.lru {
                Replacement::Lru
            } else {
                Replacement::Fifo
            };
            c.write = if l.write_back {
                WritePolicy::WriteBack
            } else {
                WritePolicy::WriteThrough
            };
            c
        })
        .collect();
    Machine {
        name: "random".into(),
        description: String::new(),
        tick_unit: "ticks".into(),
        caches,
        tlbs: vec![],
        memory: MemoryConfig {
            uncached_read_ticks: Some(70.0),
            uncached_write_ticks: Some(40.0),
            ..MemoryConfig::new(100.0, 130.0)
        },
        base_page: ByteSize(4096),
        huge_pages: vec![],
        // Whole lines of any size the strategy makes (at most 64 bytes).
        uncacheable: if uncached {
            vec![UncacheableRange::new(0x400, 0x200)]
        } else {
            vec![]
        },
        maintenance: MaintenanceConfig {
            line_ticks: 2.0,
            walk_ticks: 1.0,
            writeback_ticks: Some(7.0),
        },
        notes: vec![],
    }
}

proptest! {
    // The default config: 256 cases unless PROPTEST_CASES says otherwise (an explicit
    // `cases` here would make proptest ignore that variable). Failures found are kept in
    // model.proptest-regressions and replayed first on every run.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn simulator_matches_reference_model(
        levels in hierarchy(),
        trace in trace(),
        uncached in any::<bool>(),
    ) {
        let m = machine(&levels, uncached);
        let mut sim = Simulator::with_options(&m, Options { ccc: true, ..Options::default() }).unwrap();
        let mut model = Model {
            levels: m.caches.iter().map(|c| {
                let ways = match c.ways { Ways::N(n) => n as usize, Ways::Full(_) => unreachable!() };
                ModelCache {
                    shift: c.line.0.trailing_zeros(),
                    ways,
                    sets: vec![Vec::new(); c.lines() as usize / ways],
                    lru: c.replacement == Replacement::Lru,
                    write_back: c.write == WritePolicy::WriteBack,
                    hit_ticks: c.hit_ticks as u64,
                    seen: HashSet::new(),
                    discarded: HashSet::new(),
                    fa: Vec::new(),
                    capacity: c.lines() as usize,
                    c: Counts::default(),
                }
            }).collect(),
            mem_ticks: 100,
            mem_dirty: 130,
            dirty_to_mem: false,
            mem_fills: 0,
            mem_writebacks: 0,
            mem_writes: 0,
            uncached: uncached.then_some((0x400, 0x600)),
            uncached_ticks: (70, 40),
            uncached_reads: 0,
            uncached_writes: 0,
            maint_ticks: (2, 1, 7),
            maint_writebacks: 0,
            dirty_discarded: 0,
        };
        // Without classification the first level takes its faster hit paths: same counts.
        let mut fast = Simulator::new(&m).unwrap();
        let mut model_ticks = 0u64;
        for &(op, addr, size) in &trace {
            let t = sim.access(op, addr, size);
            prop_assert_eq!(fast.access(op, addr, size), t);
            let mt = model.reference(op, addr, size);
            prop_assert_eq!(t, mt as f64, "ticks of {:?} {:#x} {}", op, addr, size);
            model_ticks += mt;
        }
        prop_assert_eq!(sim.ticks(), model_ticks as f64);
        for (i, lc) in model.levels.iter().enumerate() {
            let s = sim.cache_stats(&format!("L{}", i + 1)).unwrap();
            let got = Counts {
                hits: s.hits,
                misses: s.misses,
                fills: s.fills,
                writebacks: s.writebacks,
                writebacks_in: s.writebacks_in,
                writebacks_in_misses: s.writebacks_in_misses,
                compulsory: s.compulsory,
                coherence: s.coherence,
                capacity: s.capacity,
                conflict: s.conflict,
                maint_writebacks: s.maint_writebacks,
                invalidations: s.invalidations,
            };
            prop_assert_eq!(&got, &lc.c, "level {}", i + 1);
            let f = fast.cache_stats(&format!("L{}", i + 1)).unwrap();
            prop_assert_eq!(
                (f.hits, f.misses, f.fills, f.writebacks, f.writebacks_in),
                (s.hits, s.misses, s.fills, s.writebacks, s.writebacks_in)
            );
        }
        let mem = sim.memory_stats();
        prop_assert_eq!(
            (mem.fills, mem.writebacks, mem.writes),
            (model.mem_fills, model.mem_writebacks, model.mem_writes)
        );
        prop_assert_eq!(
            (mem.uncached_reads, mem.uncached_writes, mem.maint_writebacks),
            (model.uncached_reads, model.uncached_writes, model.maint_writebacks)
        );
        prop_assert_eq!(sim.maintenance_stats().dirty_discarded, model.dirty_discarded);
        prop_assert_eq!(fast.memory_stats(), mem);
    }
}
