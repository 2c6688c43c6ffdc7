//! Seed 001's sweeps: the first-level caches' size × associativity, everything else as the
//! machine has it, over one pass of the trace (every configuration is fed each batch).

use serde::Serialize;

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

/// One configuration's results.
#[derive(Debug, Clone, Serialize)]
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

/// A whole sweep.
#[derive(Debug, Clone, Serialize)]
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
    /// One per size × associativity, sizes outer.
    pub cells: Vec<SweepCell>,
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

/// Runs `source` once through every size × associativity of the first level.
pub fn sweep(
    base: &Machine,
    sizes: &[u64],
    ways: &[u32],
    options: Options,
    source: &mut dyn TraceSource,
    mut progress: impl FnMut(u64),
) -> Result<SweepReport, SweepError> {
    let mut sims = Vec::new();
    for &size in sizes {
        for &w in ways {
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
