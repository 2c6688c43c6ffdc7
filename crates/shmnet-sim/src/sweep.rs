//! Seed 001's sweeps: the first-level caches' size × associativity, everything else as the
//! machine has it, over one pass of the trace (every configuration is fed each batch).
//!
//! A sweep's configurations are independent jobs: [`Shard`] `I/N` runs every N-th of them
//! (the I-th, counting from 1, sizes outer and associativities inner), so N processes — a
//! Slurm job array, GNU parallel — each read the trace once for a share of the grid, and
//! [`merge`] puts their reports back together, checking that they are one sweep's shards.

use serde::{Deserialize, Serialize};

use crate::config::{ByteSize, ConfigError, Machine, Side, Ways};
use crate::sim::{BATCH, Options, Simulator};
use crate::trace::{TraceError, TraceSource};

/// Why a sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A configuration of the sweep is not a valid machine.
    #[error("L1 {size} bytes, {ways}-way: {err}")]
    Config {
        /// The first-level size tried.
        size: u64,
        /// The associativity tried.
        ways: u32,
        /// What is wrong.
        err: ConfigError,
    },
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// Which share of a sweep's configurations one job runs: the `index`-th of every `count`
/// (1-based, as `split -n K/N` counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 1 ..= `count`.
    pub index: u32,
    /// How many shards the sweep is cut into.
    pub count: u32,
}

/// Why a shard could not be read or shards could not be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// `--shard` is not `I/N` with 1 ≤ I ≤ N.
    #[error("{0:?} is not a shard: write I/N with 1 <= I <= N, e.g. 3/8")]
    Syntax(String),
    /// Nothing to merge.
    #[error("no sweep reports to merge")]
    Empty,
    /// A report is not a shard (it ran the whole grid).
    #[error("report {0} is not a shard (run each job with --shard I/N)")]
    NotAShard(usize),
    /// Two reports differ in what was swept.
    #[error("report {index} is not a shard of the same sweep as report 1: its {what} differs")]
    Mismatch {
        /// The report (1-based, in the order given).
        index: usize,
        /// What differs.
        what: &'static str,
    },
    /// A shard is given twice.
    #[error("shard {0} is given twice")]
    Duplicate(u32),
    /// Shards are missing.
    #[error("shards {missing:?} of {count} are missing")]
    Missing {
        /// Their indexes.
        missing: Vec<u32>,
        /// Of how many.
        count: u32,
    },
}

impl Shard {
    /// Parses `I/N`.
    pub fn parse(s: &str) -> Result<Shard, ShardError> {
        let bad = || ShardError::Syntax(s.to_string());
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether configuration `k` (0-based, sizes outer) is this shard's.
    pub fn takes(&self, k: usize) -> bool {
        k % self.count as usize == (self.index - 1) as usize
    }
}

/// One configuration's results.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SweepCell {
    /// Size of each first-level cache.
    pub l1_bytes: u64,
    /// Their associativity.
    pub l1_ways: u32,
    /// References.
    pub refs: u64,
    /// First-level demand misses / accesses, all first-level caches together.
    pub l1_miss_rate: f64,
    /// The instruction cache's miss rate (split first level only).
    pub l1i_miss_rate: Option<f64>,
    /// The data cache's miss rate (split first level only).
    pub l1d_miss_rate: Option<f64>,
    /// Total ticks.
    pub ticks: f64,
    /// Ticks per reference.
    pub ticks_per_ref: f64,
}

/// A whole sweep, or one shard of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepReport {
    /// The base machine.
    pub machine: String,
    /// What a tick is.
    pub tick_unit: String,
    /// Instruction fetches all hit.
    pub perfect_icache: bool,
    /// Data references all hit.
    pub perfect_dcache: bool,
    /// The sizes swept.
    pub sizes: Vec<u64>,
    /// The associativities swept.
    pub ways: Vec<u32>,
    /// One per size × associativity, sizes outer (a shard's only).
    pub cells: Vec<SweepCell>,
    /// The shard this report holds; `null` for the whole grid.
    #[serde(default)]
    pub shard: Option<Shard>,
}

impl SweepReport {
    /// The cell for `size` and `ways`.
    pub fn cell(&self, size: u64, ways: u32) -> Option<&SweepCell> {
        self.cells
            .iter()
            .find(|c| c.l1_bytes == size && c.l1_ways == ways)
    }
}

/// `m` with every first-level cache resized to `size` bytes and `ways` ways.
pub fn with_l1(m: &Machine, size: u64, ways: u32) -> Result<Machine, ConfigError> {
    let mut m = m.clone();
    for c in m.caches.iter_mut().filter(|c| c.level == 1) {
        c.size = ByteSize(size);
        c.ways = Ways::N(ways);
    }
    m.validate()?;
    Ok(m)
}

/// Runs `source` once through every size × associativity of the first level (or, with a
/// shard, through that shard's share of them).
pub fn sweep(
    base: &Machine,
    sizes: &[u64],
    ways: &[u32],
    options: Options,
    shard: Option<Shard>,
    source: &mut dyn TraceSource,
    mut progress: impl FnMut(u64),
) -> Result<SweepReport, SweepError> {
    let mut sims = Vec::new();
    let grid = sizes
        .iter()
        .flat_map(|&s| ways.iter().map(move |&w| (s, w)));
    for (k, (size, w)) in grid.enumerate() {
        if shard.is_some_and(|sh| !sh.takes(k)) {
            continue;
        }
        {
            let m =
                with_l1(base, size, w).map_err(|err| SweepError::Config { size, ways: w, err })?;
            let sim = Simulator::with_options(&m, options).map_err(|err| SweepError::Config {
                size,
                ways: w,
                err,
            })?;
            sims.push((size, w, sim));
        }
    }
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        source.next_batch(&mut batch, BATCH)?;
        if batch.is_empty() {
            break;
        }
        for (_, _, sim) in &mut sims {
            for r in &batch {
                sim.access_ref(r);
            }
        }
        progress(source.bytes_read());
    }
    let cells = sims
        .iter()
        .map(|(size, w, sim)| {
            let rep = sim.report();
            let l1: Vec<_> = rep.caches.iter().filter(|c| c.level == 1).collect();
            let (acc, miss) = l1.iter().fold((0u64, 0u64), |(a, m), c| {
                (a + c.stats.accesses(), m + c.stats.misses)
            });
            let side_rate = |s: Side| l1.iter().find(|c| c.side == s).map(|c| c.miss_rate);
            SweepCell {
                l1_bytes: *size,
                l1_ways: *w,
                refs: rep.refs,
                l1_miss_rate: if acc == 0 {
                    0.0
                } else {
                    miss as f64 / acc as f64
                },
                l1i_miss_rate: side_rate(Side::Instruction),
                l1d_miss_rate: side_rate(Side::Data),
                ticks: rep.ticks,
                ticks_per_ref: rep.ticks_per_ref,
            }
        })
        .collect();
    Ok(SweepReport {
        machine: base.name.clone(),
        tick_unit: base.tick_unit.clone(),
        perfect_icache: options.perfect_icache,
        perfect_dcache: options.perfect_dcache,
        sizes: sizes.to_vec(),
        ways: ways.to_vec(),
        cells,
        shard,
    })
}

/// Puts the shards of one sweep back together: every report a shard of the same count, of
/// the same machine, options, sizes and associativities, and of the same trace (the same
/// references in every cell); every shard once. The cells come back in the grid's order.
pub fn merge(reports: Vec<SweepReport>) -> Result<SweepReport, ShardError> {
    let first = reports.first().ok_or(ShardError::Empty)?;
    let count = first.shard.ok_or(ShardError::NotAShard(1))?.count;
    // The trace's reference count, from the first report that ran a configuration.
    let refs = reports.iter().find_map(|r| r.cells.first()).map(|c| c.refs);
    let mut seen = vec![false; count as usize];
    for (i, r) in reports.iter().enumerate() {
        let index = i + 1;
        let sh = r.shard.ok_or(ShardError::NotAShard(index))?;
        let mismatch = |what| ShardError::Mismatch { index, what };
        if sh.count != count {
            return Err(mismatch("shard count"));
        }
        if r.machine != first.machine || r.tick_unit != first.tick_unit {
            return Err(mismatch("machine"));
        }
        if (r.perfect_icache, r.perfect_dcache) != (first.perfect_icache, first.perfect_dcache) {
            return Err(mismatch("perfect-cache option"));
        }
        if r.sizes != first.sizes || r.ways != first.ways {
            return Err(mismatch("grid of sizes and associativities"));
        }
        if r.cells.iter().any(|c| Some(c.refs) != refs) {
            return Err(mismatch("trace (its reference count)"));
        }
        let slot = &mut seen[(sh.index - 1) as usize];
        if *slot {
            return Err(ShardError::Duplicate(sh.index));
        }
        *slot = true;
    }
    let missing: Vec<u32> = (1..=count).filter(|&i| !seen[(i - 1) as usize]).collect();
    if !missing.is_empty() {
        return Err(ShardError::Missing { missing, count });
    }
    let mut cells = Vec::new();
    for &size in &first.sizes {
        for &w in &first.ways {
            if let Some(c) = reports.iter().find_map(|r| r.cell(size, w)) {
                cells.push(c.clone());
            }
        }
    }
    Ok(SweepReport {
        cells,
        shard: None,
        ..first.clone()
    })
}

/// How a table shows a cell.
type Column = fn(&SweepCell) -> String;

impl std::fmt::Display for SweepReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let perfect = match (self.perfect_icache, self.perfect_dcache) {
            (true, true) => ", perfect I- and D-caches",
            (true, false) => ", perfect I-cache",
            (false, true) => ", perfect D-cache",
            _ => "",
        };
        let refs = self.cells.first().map_or(0, |c| c.refs);
        writeln!(
            f,
            "sweep of the first-level caches on {}{perfect}: {refs} references",
            self.machine
        )?;
        let tables: [(&str, Column); 2] = [
            ("L1 miss rate (%)", |c| {
                format!("{:.3}", 100.0 * c.l1_miss_rate)
            }),
            ("ticks per reference", |c| format!("{:.3}", c.ticks_per_ref)),
        ];
        for (title, value) in tables {
            let title = if title.starts_with("ticks") {
                format!("{} per reference", self.tick_unit)
            } else {
                title.to_string()
            };
            writeln!(f, "\n{title}")?;
            write!(f, "{:>10}", "L1 size")?;
            for w in &self.ways {
                write!(f, " {:>10}", format!("{w}-way"))?;
            }
            writeln!(f)?;
            for &s in &self.sizes {
                write!(f, "{:>10}", ByteSize(s).to_string())?;
                for &w in &self.ways {
                    let v = self.cell(s, w).map_or("-".into(), value);
                    write!(f, " {v:>10}")?;
                }
                writeln!(f)?;
            }
        }
        if self.cells.iter().any(|c| c.l1i_miss_rate.is_some()) {
            writeln!(f, "\nL1 instruction / data miss rates (%)")?;
            write!(f, "{:>10}", "L1 size")?;
            for w in &self.ways {
                write!(f, " {:>15}", format!("{w}-way"))?;
            }
            writeln!(f)?;
            for &s in &self.sizes {
                write!(f, "{:>10}", ByteSize(s).to_string())?;
                for &w in &self.ways {
                    let v = self.cell(s, w).map_or("-".into(), |c| {
                        format!(
                            "{:.2} / {:.2}",
                            100.0 * c.l1i_miss_rate.unwrap_or(0.0),
                            100.0 * c.l1d_miss_rate.unwrap_or(0.0)
                        )
                    });
                    write!(f, " {v:>15}")?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Op, Party, Ref};

    /// A source over a fixed list of references.
    struct Refs(Vec<Ref>, bool);

    impl TraceSource for Refs {
        fn next_batch(&mut self, out: &mut Vec<Ref>, _max: usize) -> Result<(), TraceError> {
            out.clear();
            if !self.1 {
                out.extend_from_slice(&self.0);
                self.1 = true;
            }
            Ok(())
        }
        fn bytes_read(&self) -> u64 {
            0
        }
    }

    fn trace() -> Vec<Ref> {
        (0..20_000u64)
            .map(|i| Ref {
                party: Party::Other,
                op: if i % 3 == 0 { Op::Ifetch } else { Op::Read },
                size: 4,
                addr: 0x1000 + (i * 2_654_435_761) % (256 << 10),
            })
            .collect()
    }

    fn run(shard: Option<Shard>) -> SweepReport {
        let m = Machine::preset("sgi-r4400-1994").unwrap();
        sweep(
            &m,
            &[8 << 10, 16 << 10, 32 << 10],
            &[1, 2, 4],
            Options::default(),
            shard,
            &mut Refs(trace(), false),
            |_| {},
        )
        .unwrap()
    }

    #[test]
    fn shards_merge_into_the_whole_sweep() {
        let whole = run(None);
        let parts: Vec<_> = [3, 1, 2, 4]
            .iter()
            .map(|&i| run(Some(Shard { index: i, count: 4 })))
            .collect();
        assert_eq!(parts.iter().map(|p| p.cells.len()).sum::<usize>(), 9);
        let merged = merge(parts).unwrap();
        assert_eq!(merged.cells, whole.cells);
        assert_eq!(merged.shard, None);
    }

    #[test]
    fn merging_refuses_what_is_not_one_sweep() {
        let sh = |i, n| run(Some(Shard { index: i, count: n }));
        assert_eq!(
            merge(vec![sh(1, 2)]).unwrap_err(),
            ShardError::Missing {
                missing: vec![2],
                count: 2
            }
        );
        assert_eq!(
            merge(vec![sh(1, 2), sh(1, 2)]).unwrap_err(),
            ShardError::Duplicate(1)
        );
        assert!(matches!(
            merge(vec![sh(1, 2), sh(2, 3)]).unwrap_err(),
            ShardError::Mismatch { index: 2, .. }
        ));
        assert_eq!(
            merge(vec![run(None)]).unwrap_err(),
            ShardError::NotAShard(1)
        );
        assert_eq!(merge(Vec::new()).unwrap_err(), ShardError::Empty);
    }

    #[test]
    fn shard_syntax() {
        assert_eq!(Shard::parse("3/8"), Ok(Shard { index: 3, count: 8 }));
        for bad in ["0/8", "9/8", "3", "a/b", "3/0"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }
}
