//! `shmnet sim future`: seed 001's "how will protocols run on future machines?" — the eight
//! rows ([`super::rows`]) traced once under lackey and simulated on the seed's 1994 machine,
//! its 1996 and 1998 projections, and a line of machines from then to this one, each row's
//! latency and CPI on each.
//!
//! Every machine is simulated with the seed's in-order model (every reference at the
//! latency of the level that served it), so the line compares like with like — caches,
//! clocks and memory falling behind — and leaves out what the validation table shows the
//! model misses on an out-of-order core (it overstates this machine's measured latency many
//! times over: the measured row is printed beside). `memory_pct` is the seed's "time
//! waiting for memory": the share of a row's simulated time an ideal cache (every reference
//! a first-level hit) would save.

use anyhow::{Context, Result};
use shmnet_lab::calibrate::{self, Effort};
use shmnet_sim::Machine;
use shmnet_stack::rows::MESSAGE_BYTES;

use super::native;
use super::rows::{self, Simulated, Steps};

/// The line: presets with their year and clock.
pub const LINE: [(&str, u32, f64); 8] = [
    ("sgi-r4400-1994", 1994, 100.0),
    ("seed001-1996", 1996, 200.0),
    ("seed001-1998", 1998, 400.0),
    ("pentium4-2002", 2002, 2400.0),
    ("core2-2006", 2006, 2400.0),
    ("nehalem-2009", 2009, 2660.0),
    ("skylake-2015", 2015, 4000.0),
    ("zen4-2022", 2022, 4500.0),
];

/// One machine of the line.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LineMachine {
    /// Its preset name (`this-machine` for the calibrated one).
    pub name: String,
    /// Its year (this machine: the year of the run).
    pub year: u32,
    /// Its clock, MHz: what a tick is worth (this machine: the TSC's rate).
    pub clock_mhz: f64,
    /// What it is.
    pub description: String,
}

/// A row on one machine.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OnMachine {
    /// The machine.
    pub machine: String,
    /// Simulated ticks (cycles; this machine: TSC ticks) per message, in order.
    pub ticks: f64,
    /// `ticks / clock`, microseconds.
    pub latency_us: f64,
    /// `ticks / instructions` (this machine: ticks, not cycles).
    pub cpi: f64,
    /// Percent of `ticks` an ideal cache would save: waiting for memory.
    pub memory_pct: f64,
}

/// One row across the line.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FutureRow {
    /// `tcp-send-cksum-off`, …
    pub row: String,
    /// Instructions per message (the same on every machine: one trace).
    pub instructions: f64,
    /// Data references per message.
    pub data_refs: f64,
    /// This machine's measured median latency, microseconds.
    pub measured_us: f64,
    /// The row on each machine, in the line's order.
    pub on: Vec<OnMachine>,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Future {
    /// The machines, oldest first, this one last.
    pub machines: Vec<LineMachine>,
    /// The eight rows.
    pub rows: Vec<FutureRow>,
    /// Message bytes.
    pub bytes: usize,
    /// Messages per row.
    pub steps: Steps,
}

fn on(m: &LineMachine, s: &Simulated) -> OnMachine {
    let memory = if s.in_order_ticks > 0.0 {
        100.0 * (s.in_order_ticks - s.ideal_ticks) / s.in_order_ticks
    } else {
        0.0
    };
    OnMachine {
        machine: m.name.clone(),
        ticks: s.in_order_ticks,
        latency_us: s.in_order_ticks / m.clock_mhz,
        cpi: s.in_order_ticks / s.instructions.max(1.0),
        memory_pct: memory,
    }
}

/// `shmnet sim future`.
pub fn future(a: rows::RowsArgs) -> Result<()> {
    let chosen = a.rows.selected()?;
    let pb = crate::progress_bar();
    pb.set_message("calibrating");
    let effort = if a.quick { Effort::QUICK } else { Effort::FULL };
    let table = calibrate::run(effort, &mut |m| pb.set_message(format!("calibrating: {m}")))?;
    let mut machines = Vec::new();
    let mut line = Vec::new();
    for (name, year, mhz) in LINE {
        let m = Machine::preset(name).with_context(|| format!("the {name} preset"))?;
        line.push(LineMachine {
            name: name.into(),
            year,
            clock_mhz: mhz,
            description: m.description.clone(),
        });
        machines.push(m);
    }
    let here = Machine::from_calibration_json(&serde_json::to_string(&table)?)
        .map_err(|e| anyhow::anyhow!("building this-machine: {e}"))?;
    line.push(LineMachine {
        name: "this-machine".into(),
        year: this_year(),
        clock_mhz: table.timer.ticks_per_ns * 1000.0,
        description: format!(
            "this machine, calibrated in the run ({}; ticks are the TSC's)",
            here.description
        ),
    });
    machines.push(here);
    let steps = Steps::new(a.quick);
    pb.set_message("timing the rows natively, together in rounds");
    let (timings, _) = native::measure_rows(&chosen, MESSAGE_BYTES, steps)?;
    let mut timed = timings.iter();
    let out = rows::each_row(&chosen, &pb, |spec, dir| {
        let med = timed.next().expect("one timing per row").ticks;
        pb.set_message(format!(
            "{}: tracing, simulating on {} machines",
            spec.name(),
            machines.len()
        ));
        let sims = rows::trace_and_simulate(spec, MESSAGE_BYTES, steps, &machines, dir, false)?;
        Ok(FutureRow {
            row: spec.name(),
            instructions: sims[0].instructions,
            data_refs: sims[0].data_refs,
            measured_us: med / (table.timer.ticks_per_ns * 1000.0),
            on: line.iter().zip(&sims).map(|(m, s)| on(m, s)).collect(),
        })
    })?;
    pb.finish_and_clear();
    let f = Future {
        machines: line,
        rows: out,
        bytes: MESSAGE_BYTES,
        steps,
    };
    if a.json {
        println!("{}", serde_json::to_string(&f)?);
    } else {
        print!("{f}");
    }
    Ok(())
}

/// The current year, from the clock.
fn this_year() -> u32 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Days to a civil year (proleptic Gregorian), exact enough for a label.
    (1970.0 + secs as f64 / (365.2425 * 86_400.0)) as u32
}

impl std::fmt::Display for Future {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Seed 001's future machines: {}-byte messages, the seed's in-order model on every machine",
            self.bytes
        )?;
        for (title, pick) in [
            ("latency, µs", 0usize),
            ("CPI (this machine: TSC ticks per instruction)", 1),
            ("% of the time waiting for memory", 2),
        ] {
            writeln!(f, "\n{title}")?;
            write!(f, "{:<22}", "row")?;
            for m in &self.machines {
                write!(f, " {:>9}", short(&m.name))?;
            }
            if pick == 0 {
                write!(f, " {:>9}", "measured")?;
            }
            writeln!(f)?;
            for r in &self.rows {
                write!(f, "{:<22}", r.row)?;
                for o in &r.on {
                    let v = [o.latency_us, o.cpi, o.memory_pct][pick];
                    if pick == 0 && v < 10.0 {
                        write!(f, " {v:>9.3}")?;
                    } else {
                        write!(f, " {v:>9.1}")?;
                    }
                }
                if pick == 0 {
                    write!(f, " {:>9.3}", r.measured_us)?;
                }
                writeln!(f)?;
            }
        }
        writeln!(
            f,
            "\nmeasured: this machine, natively (the in-order model overstates an out-of-order core: see `shmnet sim validate`)"
        )
    }
}

/// A column label: the year, or `here`.
fn short(name: &str) -> String {
    if name == "this-machine" {
        return "here".into();
    }
    name.rsplit('-').next().unwrap_or(name).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_machine_of_the_line_is_a_preset_and_the_years_run_forward() {
        let mut last = 0;
        for (name, year, mhz) in LINE {
            assert!(Machine::preset(name).is_some(), "{name}");
            assert!(year > last && mhz > 0.0, "{name}");
            last = year;
        }
        assert!(this_year() >= 2026);
    }

    #[test]
    fn a_row_on_a_machine_is_its_ticks_at_its_clock() {
        let m = LineMachine {
            name: "x".into(),
            year: 1994,
            clock_mhz: 100.0,
            description: String::new(),
        };
        let s = Simulated {
            instructions: 1000.0,
            in_order_ticks: 3000.0,
            ideal_ticks: 2400.0,
            ..Simulated::default()
        };
        let o = on(&m, &s);
        assert_eq!((o.latency_us, o.cpi, o.memory_pct), (30.0, 3.0, 20.0));
    }
}
