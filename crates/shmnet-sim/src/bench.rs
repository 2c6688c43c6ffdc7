//! `shmnet sim bench`: simulation speed, in references per second, parsing included.
//!
//! A synthetic packet-copy trace ([`PacketCopies`]) is written to two temporary files, one
//! in Dinero's `D` format and one in shmnet's binary format; each is then read back and
//! simulated on [`bench_machine`] (first and second level only), timed from opening the
//! file to the last reference. The files are removed afterwards. A benchmark, not a test:
//! it prints figures and asserts nothing.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::config::Machine;
use crate::sim::Simulator;
use crate::synth::PacketCopies;
use crate::trace::{self, Format, TraceWriter, din};

/// One format's figure.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// `"din"` or `"shmnet"`.
    pub format: Format,
    /// References simulated.
    pub refs: u64,
    /// References per second, reading and parsing included.
    pub refs_per_s: f64,
    /// Seconds taken.
    pub seconds: f64,
    /// Bytes of the trace file.
    pub file_bytes: u64,
    /// Ticks per reference the simulation gave (the same for both formats).
    pub ticks_per_ref: f64,
}

/// The benchmark's report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The machine simulated.
    pub machine: String,
    /// One row per format.
    pub rows: Vec<BenchRow>,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulation speed on {} (synthetic packet copies; reading and parsing included)",
            self.machine
        )?;
        writeln!(
            f,
            "{:<8} {:>14} {:>10} {:>16} {:>14}",
            "format", "refs", "seconds", "refs/s", "file MB"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<8} {:>14} {:>10.2} {:>16.0} {:>14.1}",
                serde_json::to_value(r.format)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                r.refs,
                r.seconds,
                r.refs_per_s,
                r.file_bytes as f64 / 1e6
            )?;
        }
        Ok(())
    }
}

/// The benchmark's machine: this-machine's first and second levels and its TLBs.
pub fn bench_machine() -> Machine {
    let mut m = Machine::preset("this-machine").expect("the this-machine preset is valid");
    m.caches.retain(|c| c.level <= 2);
    m.name = "this-machine L1 + L2".into();
    m.notes.clear();
    m
}

/// Removes a file when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the benchmark with `refs` references, the temporary files in `dir`; `progress`
/// gets a step name and a fraction done.
pub fn run(refs: u64, dir: &Path, progress: &mut dyn FnMut(&str, f64)) -> io::Result<BenchReport> {
    let stem = format!("shmnet-sim-bench-{}", std::process::id());
    let din_file = TempFile(dir.join(format!("{stem}.din")));
    let bin_file = TempFile(dir.join(format!("{stem}.trc")));
    {
        let mut d = BufWriter::with_capacity(1 << 20, File::create(&din_file.0)?);
        let mut b = TraceWriter::new(BufWriter::new(File::create(&bin_file.0)?))?;
        let mut n = 0u64;
        let step = (refs / 100).max(1);
        PacketCopies::default().generate(refs, |party, op, addr, size| -> io::Result<()> {
            din::write_ref(&mut d, op, addr, size)?;
            b.write(party, op, addr, u64::from(size))?;
            n += 1;
            if n % step == 0 {
                progress("writing the traces", n as f64 / refs as f64);
            }
            Ok(())
        })?;
        d.flush()?;
        b.finish()?.flush()?;
    }
    // Written back before timing: otherwise the kernel writes the 2.4 GB of traces back to
    // disk while they are being read and competes for the CPUs (the timed reads still come
    // through the page cache, as a trace that was recorded just before would).
    progress("syncing the traces", 1.0);
    File::open(&din_file.0)?.sync_all()?;
    File::open(&bin_file.0)?.sync_all()?;
    let machine = bench_machine();
    let mut rows = Vec::new();
    for (format, path) in [(Format::Din, &din_file.0), (Format::Shmnet, &bin_file.0)] {
        let file_bytes = std::fs::metadata(path)?.len();
        let name = match format {
            Format::Din => "simulating the D trace",
            _ => "simulating the binary trace",
        };
        let start = Instant::now();
        let (_, mut src) = trace::open(Box::new(File::open(path)?), Some(format))
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut sim = Simulator::new(&machine).map_err(|e| io::Error::other(e.to_string()))?;
        sim.run(src.as_mut(), |b| {
            progress(name, b as f64 / file_bytes as f64)
        })
        .map_err(|e| io::Error::other(e.to_string()))?;
        let seconds = start.elapsed().as_secs_f64();
        rows.push(BenchRow {
            format,
            refs: sim.refs(),
            refs_per_s: sim.refs() as f64 / seconds,
            seconds,
            file_bytes,
            ticks_per_ref: sim.report().ticks_per_ref,
        });
    }
    Ok(BenchReport {
        machine: machine.name,
        rows,
    })
}
