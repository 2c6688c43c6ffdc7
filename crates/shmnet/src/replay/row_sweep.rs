//! `shmnet sim row-sweep`: seed 001's sensitivity figures on the eight rows — the first
//! level from 8 KiB to 128 KiB at the machine's second level, associativity 1 to 8, TCP
//! against UDP. Each row is traced once under lackey ([`super::rows`]) and its windows
//! simulated on every configuration ([`shmnet_sim::sweep::with_l1`]) in one pass.

use anyhow::{Context, Result};
use clap::Args;
use shmnet_sim::{ByteSize, Machine};
use shmnet_stack::rows::MESSAGE_BYTES;

use super::rows::{self, Steps};

#[derive(Args)]
pub struct RowSweepArgs {
    // The base machine: its first level is swept.
    #[command(flatten)]
    machine: rows::MachineArg,
    /// First-level sizes.
    #[arg(long, value_delimiter = ',', value_parser = crate::sim::parse_size, default_value = "8K,16K,32K,64K,128K")]
    l1_size: Vec<u64>,
    /// First-level associativities.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    l1_assoc: Vec<u32>,
    #[command(flatten)]
    common: rows::RowsArgs,
}

/// One configuration of one row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cell {
    /// First-level size (each of I and D).
    pub l1_bytes: u64,
    /// Their associativity.
    pub l1_ways: u32,
    /// Ticks per message, in order.
    pub ticks: f64,
    /// Percent of them an ideal cache would save.
    pub memory_pct: f64,
}

/// One row's sweep.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowCells {
    /// `tcp-send-cksum-off`, …
    pub row: String,
    /// Sizes outer, associativities inner.
    pub cells: Vec<Cell>,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowSweep {
    /// The base machine.
    pub machine: String,
    /// What a tick is.
    pub tick_unit: String,
    /// The sizes swept.
    pub sizes: Vec<u64>,
    /// The associativities swept.
    pub ways: Vec<u32>,
    /// Every row.
    pub rows: Vec<RowCells>,
    /// Messages per row.
    pub steps: Steps,
}

/// `shmnet sim row-sweep`.
pub fn row_sweep(a: RowSweepArgs) -> Result<()> {
    let chosen = a.common.rows.selected()?;
    if a.l1_size.is_empty() || a.l1_assoc.is_empty() {
        anyhow::bail!("give at least one --l1-size and one --l1-assoc");
    }
    let base = Machine::load(&a.machine.machine)?;
    let mut grid = Vec::new();
    let mut machines = Vec::new();
    for &size in &a.l1_size {
        for &w in &a.l1_assoc {
            machines.push(
                shmnet_sim::sweep::with_l1(&base, size, w)
                    .with_context(|| format!("L1 of {} bytes, {w}-way", size))?,
            );
            grid.push((size, w));
        }
    }
    let steps = Steps::new(a.common.quick);
    let pb = crate::progress_bar();
    let out = rows::each_row(&chosen, &pb, |spec, dir| {
        pb.set_message(format!(
            "{}: tracing, simulating {} configurations",
            spec.name(),
            machines.len()
        ));
        let sims = rows::trace_and_simulate(spec, MESSAGE_BYTES, steps, &machines, dir, false)?;
        Ok(RowCells {
            row: spec.name(),
            cells: grid
                .iter()
                .zip(&sims)
                .map(|(&(l1_bytes, l1_ways), s)| Cell {
                    l1_bytes,
                    l1_ways,
                    ticks: s.in_order_ticks,
                    memory_pct: if s.in_order_ticks > 0.0 {
                        100.0 * (s.in_order_ticks - s.ideal_ticks) / s.in_order_ticks
                    } else {
                        0.0
                    },
                })
                .collect(),
        })
    })?;
    pb.finish_and_clear();
    let r = RowSweep {
        machine: base.name.clone(),
        tick_unit: base.tick_unit.clone(),
        sizes: a.l1_size,
        ways: a.l1_assoc,
        rows: out,
        steps,
    };
    if a.common.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{r}");
    }
    Ok(())
}

impl std::fmt::Display for RowSweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Seed 001's sweeps on {}: {} per message by first-level size (rows) and associativity (columns)",
            self.machine, self.tick_unit
        )?;
        for r in &self.rows {
            writeln!(f, "\n{}", r.row)?;
            write!(f, "{:>8}", "L1")?;
            for w in &self.ways {
                write!(f, " {:>16}", format!("{w}-way (mem %)"))?;
            }
            writeln!(f)?;
            for &s in &self.sizes {
                write!(f, "{:>8}", ByteSize(s).to_string())?;
                for &w in &self.ways {
                    match r.cells.iter().find(|c| c.l1_bytes == s && c.l1_ways == w) {
                        Some(c) => write!(
                            f,
                            " {:>16}",
                            format!("{:.0} ({:.0})", c.ticks, c.memory_pct)
                        )?,
                        None => write!(f, " {:>16}", "-")?,
                    }
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}
