//! The batch fast path of [`Simulator::access_refs`] and [`Simulator::run`]: the common
//! configuration with its per-reference state in locals.
//!
//! When the first level is split (one cache per side), each side has its own TLB or none,
//! nothing is perfect, misses are not classified, no huge-page range exists and no
//! first-level cache or TLB uses tree-PLRU, a batch is run through two [`Lane`]s, one per
//! side. A lane holds copies of its first-level cache's and TLB's two most recent keys
//! ([`Pair`]) and counts the hits on them locally. A reference that touches one line and
//! hits both a recent page and a recent line (almost every reference of a copy) is then
//! simulated without touching the simulator's structures except to mark a written line
//! dirty. Anything else hands the lane's state back (`store`), runs the general code, and
//! reloads it (`load`).
//!
//! Why this is exact:
//!
//! * A lane's side owns its cache and TLB (the eligibility test), and the general code for
//!   that side touches no other side's first level, so the copies are never stale while
//!   in use.
//! * Counts are sums of increments, so adding the locally counted ones at the end gives the
//!   same totals.
//! * A hit on the previous line or page makes it the last one without touching the
//!   replacement state; `Store::settle` makes that state exact whenever it is handed back
//!   reordered, before anything could read it (see there).
//! * Ticks are computed with the same floating-point operations, in the same order, as the
//!   general path (`tlb + l1`, then the totals in reference order).
//!
//! The tests below compare batches with one reference at a time, report for report, on
//! machines with and without lanes (including tiny LRU caches where the order of the two
//! recent lines decides victims).

use super::{NO_TLB, PartyRun, Simulator};
use crate::store::Recent;
use crate::trace::{Op, Ref};

/// A [`Recent`] as a lane keeps it: the two keys in a fixed order and which one is the last,
/// so that a hit on either is two comparisons and one store (no swapping).
#[derive(Clone, Copy)]
struct Pair {
    key: [u64; 2],
    slot: [usize; 2],
    /// The index of the last key; the other is the previous one.
    last: usize,
}

impl Pair {
    fn new(r: Recent) -> Pair {
        Pair {
            key: [r.last, r.prev],
            slot: [r.last_slot, r.prev_slot],
            last: 0,
        }
    }

    fn recent(&self) -> Recent {
        let (l, p) = (self.last, self.last ^ 1);
        Recent {
            last: self.key[l],
            last_slot: self.slot[l],
            prev: self.key[p],
            prev_slot: self.slot[p],
        }
    }

    /// Whether `key` (never `EMPTY`, so never matching an empty entry) is one of the two; if
    /// so it becomes the last.
    #[inline(always)]
    fn hit(&mut self, key: u64) -> bool {
        if key == self.key[0] {
            self.last = 0;
            true
        } else if key == self.key[1] {
            self.last = 1;
            true
        } else {
            false
        }
    }

    /// Whether the keys changed order since [`new`](Pair::new): the previous key of then is
    /// the last one now (hits alone cannot change anything else).
    fn reordered(&self) -> bool {
        self.last != 0
    }
}

/// One side's fast-path state for a batch; see the module documentation.
#[derive(Clone, Copy)]
pub(super) struct Lane {
    /// The side's first-level cache (index in `caches`) and its line shift.
    cache: usize,
    shift: u32,
    /// `(1 << shift) - 1`.
    line_mask: u64,
    /// Writes may hit without going down (write-back).
    write_back: bool,
    /// The side's TLB, or [`NO_TLB`], and its page shift.
    tlb: usize,
    page_shift: u32,
    /// The ticks of a reference that hits a recent page and a recent line: the TLB's
    /// first-level hit ticks (0 without a TLB) plus the cache's, added as the general path
    /// adds them.
    hit_ticks: f64,
    /// The ticks of a translation that hits a recent page.
    tlb_hit_ticks: f64,
    /// The first-level cache's hit ticks.
    l1_ticks: f64,
    line: Pair,
    /// Which of `line`'s keys were written by hits not yet marked in the cache's dirty
    /// flags (indexed like `line.key`); see [`flush_dirty`](Simulator::flush_dirty).
    line_dirty: [bool; 2],
    page: Pair,
    /// Hits on a recent line, by op code (read, write, ifetch; the other codes, maintenance,
    /// never hit here, but sizing the array for every code spares a bounds check).
    line_hits: [u64; Op::ALL.len()],
    /// Single-line references that were not such a hit. With `line_hits`, all single-line
    /// references: the lane's line accesses, and its TLB lookups (with a TLB).
    line_misses: u64,
    /// Single-line references whose page was not a recent one (so the others hit the
    /// TLB's first level). Counting these rare events instead of the common ones keeps
    /// counter updates off the fast path.
    page_misses: u64,
}

impl Simulator {
    /// Whether [`access_refs`](Simulator::access_refs) may use lanes; see the module
    /// documentation.
    pub(super) fn lanes_ok(&self) -> bool {
        let [d, i] = self.fronts;
        let policies_ok = self
            .fronts
            .iter()
            .all(|f| self.caches[f.cache].store.lazy_touch_ok())
            && self
                .fronts
                .iter()
                .all(|f| f.tlb == NO_TLB || self.tlbs[f.tlb].recent_ok());
        !self.options.ccc
            && !d.perfect
            && !i.perfect
            && self.huge.is_empty()
            && d.cache != i.cache
            && (d.tlb != i.tlb || d.tlb == NO_TLB)
            && policies_ok
    }

    /// [`access_refs`](Simulator::access_refs) through lanes (requires
    /// [`lanes_ok`](Simulator::lanes_ok)), less the count of `refs`.
    #[inline(always)]
    pub(super) fn access_lanes(&mut self, refs: impl Iterator<Item = Ref>) {
        let (mut data, mut instr) = (self.lane(0), self.lane(1));
        let mut ticks = self.ticks;
        // The run in progress starts as party 0's (any would do: its count stays 0 until a
        // reference of it comes).
        let mut run = PartyRun::new(0, &self.party_ticks);
        for r in refs {
            run.enter(
                r.party as usize,
                &mut self.party_refs,
                &mut self.party_ticks,
            );
            // Two inlined copies, one per lane, so that each lane's fields are at fixed
            // places (a lane picked by index makes every field access a select).
            let t = if r.op == Op::Ifetch {
                self.lane_ref(&mut instr, r)
            } else {
                self.lane_ref(&mut data, r)
            };
            ticks += t;
            run.add(t);
        }
        run.store(&mut self.party_refs, &mut self.party_ticks);
        self.ticks = ticks;
        self.finish_lane(data);
        self.finish_lane(instr);
    }

    /// A lane for side `side` (0 data, 1 instruction), its recent keys copied out.
    fn lane(&self, side: usize) -> Lane {
        let f = self.fronts[side];
        let c = &self.caches[f.cache];
        let tlb = self.tlbs.get(f.tlb);
        let tlb_hit_ticks = tlb.map_or(0.0, |t| t.hit0_ticks());
        let mut lane = Lane {
            cache: f.cache,
            shift: f.shift,
            line_mask: (1u64 << f.shift) - 1,
            write_back: c.write_back,
            tlb: f.tlb,
            page_shift: tlb.map_or(0, |t| t.page_shift),
            hit_ticks: tlb_hit_ticks + f.l1_ticks,
            tlb_hit_ticks,
            l1_ticks: f.l1_ticks,
            line: Pair::new(Recent::NONE),
            line_dirty: [false; 2],
            page: Pair::new(Recent::NONE),
            line_hits: [0; Op::ALL.len()],
            line_misses: 0,
            page_misses: 0,
        };
        self.load(&mut lane);
        lane
    }

    /// Copies the recent keys of `lane`'s cache and TLB into it.
    #[inline]
    fn load(&self, lane: &mut Lane) {
        lane.line = Pair::new(self.caches[lane.cache].recent());
        lane.line_dirty = [false; 2];
        if let Some(t) = self.tlbs.get(lane.tlb) {
            lane.page = Pair::new(t.recent());
        }
    }

    /// Hands `lane`'s recent keys back to its cache and TLB.
    #[inline]
    fn store(&mut self, lane: &mut Lane) {
        self.flush_dirty(lane);
        self.caches[lane.cache].set_recent(lane.line.recent(), lane.line.reordered());
        if let Some(t) = self.tlbs.get_mut(lane.tlb) {
            t.set_recent(lane.page.recent(), lane.page.reordered());
        }
    }

    /// Marks dirty in the cache the recent lines that hits of `lane` wrote
    /// (`line_dirty`), as those hits would have; required before anything else reads or
    /// replaces the cache's lines (when the recent lines are handed back).
    ///
    /// Exact: a recent line stays in its slot while the lane holds it (nothing fills the
    /// cache until the lines are handed back), nothing but the general code reads dirty
    /// flags, and a flag set twice is set once.
    #[inline]
    fn flush_dirty(&mut self, lane: &mut Lane) {
        if lane.line_dirty != [false; 2] {
            let dirty = &mut self.caches[lane.cache].dirty;
            for i in 0..2 {
                if lane.line_dirty[i] {
                    dirty[lane.line.slot[i]] = true;
                }
            }
            lane.line_dirty = [false; 2];
        }
    }

    /// Hands everything of `lane` back at the end of a batch: recent keys and counts.
    fn finish_lane(&mut self, mut lane: Lane) {
        self.store(&mut lane);
        let [reads, writes, ifetches, ..] = lane.line_hits;
        let hits = reads + writes + ifetches;
        let lines = hits + lane.line_misses;
        self.line_accesses += lines;
        let c = &mut self.caches[lane.cache];
        c.stats.reads += reads;
        c.stats.writes += writes;
        c.stats.ifetches += ifetches;
        c.stats.hits += hits;
        if let Some(t) = self.tlbs.get_mut(lane.tlb) {
            t.count_lookups(lines);
            t.count_recent_hits(lines - lane.page_misses);
        }
    }

    /// The ticks of `r` on its side's `lane`.
    #[inline(always)]
    fn lane_ref(&mut self, lane: &mut Lane, r: Ref) -> f64 {
        // Whether the reference stays in its line, without the general code's saturating
        // end address. When this says it does, its end address did not overflow, so the
        // general code agrees; any other reference (including one the general code would
        // saturate into its first line) takes the general code: exact either way.
        // A size of 0 counts as 1 in the general code; both give `offset + size <= line
        // bytes` here (`offset < line bytes`), so `max(1)` is not needed.
        // Maintenance ops take the general code too (they are not accesses).
        let offset = r.addr & lane.line_mask;
        if offset + u64::from(r.size) > lane.line_mask + 1 || r.op.is_maintenance() {
            return self.lane_general(lane, r);
        }
        let line = r.addr >> lane.shift;
        let write = r.op == Op::Write;
        let line_ok = !write || lane.write_back;
        if lane.tlb == NO_TLB || lane.page.hit(r.addr >> lane.page_shift) {
            if line_ok && lane.line.hit(line) {
                lane.line_hits[usize::from(r.op.code())] += 1;
                if write {
                    lane.line_dirty[lane.line.last] = true;
                }
                return lane.hit_ticks;
            }
            return self.lane_line_slow(lane, r, lane.tlb_hit_ticks);
        }
        let t = self.lane_page_slow(lane, r.addr >> lane.page_shift);
        if line_ok && lane.line.hit(line) {
            lane.line_hits[usize::from(r.op.code())] += 1;
            if write {
                lane.line_dirty[lane.line.last] = true;
            }
            return t + lane.l1_ticks;
        }
        self.lane_line_slow(lane, r, t)
    }

    /// A translation of a page that is not one of the lane's recent ones.
    #[inline(never)]
    fn lane_page_slow(&mut self, lane: &mut Lane, page: u64) -> f64 {
        lane.page_misses += 1;
        let tlb = &mut self.tlbs[lane.tlb];
        tlb.set_recent(lane.page.recent(), lane.page.reordered());
        let t = tlb.lookup_other(page);
        lane.page = Pair::new(tlb.recent());
        t
    }

    /// A line access that is not a hit on one of the lane's recent lines; `t` the ticks of
    /// its translation.
    #[inline(never)]
    fn lane_line_slow(&mut self, lane: &mut Lane, r: Ref, t: f64) -> f64 {
        lane.line_misses += 1;
        self.flush_dirty(lane);
        self.caches[lane.cache].set_recent(lane.line.recent(), lane.line.reordered());
        let t = self.access_line_slow(r.op, r.addr, t);
        lane.line = Pair::new(self.caches[lane.cache].recent());
        lane.line_dirty = [false; 2];
        t
    }

    /// A reference spanning lines, or a maintenance op: the general code, the lane's state
    /// handed back around it.
    #[inline(never)]
    fn lane_general(&mut self, lane: &mut Lane, r: Ref) -> f64 {
        self.store(lane);
        let t = self.ref_ticks(r.op, r.addr, r.size);
        self.load(lane);
        t
    }
}

#[cfg(test)]
mod tests {
    //! The batch path against `access_ref` one reference at a time: identical reports (every
    //! count, and the ticks bit for bit) on random traces over machines that use lanes and
    //! machines that do not.

    use crate::config::{Machine, Replacement, WritePolicy};
    use crate::sim::{Options, Simulator};
    use crate::trace::{Op, Party, Ref};

    /// Random references with the locality of copies: a few streams walking forwards by
    /// small steps, jumps, sizes that sometimes span lines, and now and then a
    /// cache-maintenance op.
    fn trace(seed: u64, n: usize) -> Vec<Ref> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut streams = [0x1000u64, 0x20_0000, 0x40_0000, 0x7f_f000];
        (0..n)
            .map(|_| {
                let s = rng.usize(..streams.len());
                if rng.u32(..100) < 3 {
                    streams[s] = rng.u64(..1 << 24) & !3;
                } else {
                    streams[s] += rng.u64(..12);
                }
                let op = match (s, rng.u32(..10), rng.u32(..64)) {
                    (_, _, 0) => Op::ALL[3 + rng.usize(..4)],
                    (0, _, _) => Op::Ifetch,
                    (_, 0..=3, _) => Op::Write,
                    _ => Op::Read,
                };
                let size = match rng.u32(..20) {
                    0 => rng.u32(..300),
                    1 => 0,
                    _ => 1 << rng.u32(..4),
                };
                Ref {
                    party: Party::ALL[rng.usize(..5)],
                    op,
                    size,
                    addr: streams[s],
                }
            })
            .collect()
    }

    /// The presets, shrunk so that misses are frequent, with variations of policies, and
    /// with a range of the second stream's addresses uncacheable.
    fn machines() -> Vec<Machine> {
        let mut out = Vec::new();
        for name in ["this-machine", "hp720-1993", "sgi-r4400-1994", "unity-2010"] {
            let m = Machine::preset(name).unwrap();
            out.push(m.clone());
            let mut nc = m.clone();
            nc.uncacheable
                .push(crate::UncacheableRange::new(0x20_0000, 0x1000));
            nc.maintenance.line_ticks = 3.0;
            nc.maintenance.walk_ticks = 0.5;
            out.push(nc);
            for (i, rep) in [
                Replacement::Fifo,
                Replacement::Random,
                Replacement::TreePlru,
            ]
            .into_iter()
            .enumerate()
            {
                let mut v = m.clone();
                for c in &mut v.caches {
                    c.size = crate::ByteSize(c.size.0 / 64);
                    c.replacement = rep;
                    if i == 0 && c.level == 1 {
                        c.write = WritePolicy::WriteThrough;
                    }
                }
                // Fully associative TLB levels of 72 entries cannot be tree-PLRU.
                for t in v.tlbs.iter_mut().filter(|_| rep != Replacement::TreePlru) {
                    for l in &mut t.levels {
                        l.replacement = rep;
                    }
                }
                out.push(v);
            }
            let mut small = m.clone();
            for c in &mut small.caches {
                c.size = crate::ByteSize(c.size.0 / 32);
            }
            out.push(small);
            // Tiny LRU caches of two and four ways, where the order of the two most recent
            // lines decides victims (what `Store::settle` must get right).
            for ways in [2, 4] {
                let mut tiny = m.clone();
                for c in &mut tiny.caches {
                    c.size = crate::ByteSize(c.line.0 * ways * 4);
                    c.ways = crate::Ways::N(ways as u32);
                    c.replacement = Replacement::Lru;
                }
                for t in &mut tiny.tlbs {
                    for l in &mut t.levels {
                        l.entries = 4;
                        l.ways = crate::Ways::N(2);
                        l.replacement = Replacement::Lru;
                    }
                }
                out.push(tiny);
            }
        }
        out
    }

    fn report(s: &Simulator) -> String {
        serde_json::to_string(&s.report()).unwrap()
    }

    #[test]
    fn batches_equal_one_at_a_time() {
        let mut used_lanes = false;
        for (i, m) in machines().iter().enumerate() {
            for options in [
                Options::default(),
                Options {
                    ccc: true,
                    ..Options::default()
                },
            ] {
                let refs = trace(i as u64, 20_000);
                let mut one = Simulator::with_options(m, options).unwrap();
                let mut batch = Simulator::with_options(m, options).unwrap();
                used_lanes |= batch.lanes;
                let mut rng = fastrand::Rng::with_seed(99);
                let mut rest = &refs[..];
                let mut made_uncacheable = false;
                while !rest.is_empty() {
                    // Half way, a range of the third stream's is made uncacheable (its
                    // lines flushed) in both.
                    if !made_uncacheable && rest.len() < refs.len() / 2 {
                        made_uncacheable = true;
                        let r = crate::UncacheableRange::new(0x40_0000, 0x2000);
                        one.set_uncacheable(r).unwrap();
                        batch.set_uncacheable(r).unwrap();
                    }
                    let n = rng.usize(..=rest.len().min(3000));
                    let (now, later) = rest.split_at(n);
                    for r in now {
                        one.access_ref(r);
                    }
                    batch.access_refs(now);
                    // Now and then a single reference between batches.
                    if let Some(r) = later.first() {
                        one.access_ref(r);
                        batch.access_ref(r);
                        rest = &later[1..];
                    } else {
                        rest = later;
                    }
                }
                assert_eq!(report(&one), report(&batch), "machine {} ({i})", m.name);
                assert_eq!(one.ticks().to_bits(), batch.ticks().to_bits());
            }
        }
        assert!(used_lanes, "some machine must use lanes");
    }

    #[test]
    fn run_on_binary_records_equals_one_at_a_time() {
        for (i, m) in machines().iter().enumerate() {
            // Sizes of 0 are not recorded by the binary format.
            let refs: Vec<Ref> = trace(i as u64 + 100, 30_000)
                .into_iter()
                .filter(|r| r.size > 0)
                .collect();
            let mut w = crate::TraceWriter::new(Vec::new()).unwrap();
            for r in &refs {
                w.write(r.party, r.op, r.addr, u64::from(r.size)).unwrap();
            }
            let bytes = w.finish().unwrap();
            let mut one = Simulator::new(m).unwrap();
            for r in &refs {
                one.access_ref(r);
            }
            let mut run = Simulator::new(m).unwrap();
            let mut src = crate::trace::BinaryReader::new(&bytes[..]).unwrap();
            run.run(&mut src, |_| {}).unwrap();
            assert_eq!(report(&one), report(&run), "machine {} ({i})", m.name);
        }
    }

    #[test]
    fn plain_miss_path_equals_the_general_one() {
        // The same references with the plain miss path (`Simulator::plain_miss`) and with
        // it turned off (the recursive `access_found` for every miss): identical reports.
        let mut used_plain = false;
        for (i, m) in machines().iter().enumerate() {
            let refs = trace(i as u64 + 200, 20_000);
            let mut plain = Simulator::new(m).unwrap();
            let mut general = Simulator::new(m).unwrap();
            used_plain |= plain.dpath.plain || plain.ipath.plain;
            general.dpath.plain = false;
            general.ipath.plain = false;
            plain.access_refs(&refs);
            for r in &refs {
                general.access_ref(r);
            }
            assert_eq!(report(&plain), report(&general), "machine {} ({i})", m.name);
            assert_eq!(plain.ticks().to_bits(), general.ticks().to_bits());
        }
        assert!(used_plain, "some machine must have a plain path");
    }
}
