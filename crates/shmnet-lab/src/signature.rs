//! This machine's memory signature (seed 001's "memory signature for an SGI R4400
//! Challenge", after Saavedra-Barrera): the time of a read by working-set size and stride,
//! measured here and simulated on a machine built from the calibration, cell by cell.
//!
//! Each cell reads a working set of `size` bytes at `stride`, in address order, pass after
//! pass, after one untimed pass that brings it in. Two measured kinds:
//!
//! * **chase**: each read's address comes from the one before (every word holds the index of
//!   the next), so reads cannot overlap: the latency a trace-driven, in-order model
//!   charges, less whatever the prefetchers guess from the regular stride;
//! * **stream**: the same addresses, independent (a sum), so an out-of-order core overlaps
//!   as many misses as it can track: what the core does with protocol code's
//!   independent loads.
//!
//! The simulator sees the same references (the warm-up pass, then the timed passes) and
//! charges each its serving level's latency; its ticks per read in the timed passes are the
//! cell's `simulated` figure. The ratio of each measured kind to it is what the machine
//! overlaps (or prefetches) that the model does not: 1 where the model is exact.
//!
//! A benchmark, not a test: it asserts nothing about speed.

use std::hint::black_box;

use shmnet_sim::{Machine, Op, Simulator};

use crate::tsc;

/// Bytes per word read.
const WORD: usize = 8;

/// Reads a timed sample makes at least (small sets are read over and over).
const MIN_READS: usize = 1 << 18;

/// Reads the simulator is given at least per cell (after the warm-up pass).
const SIM_MIN_READS: usize = 1 << 16;

/// One cell of the signature.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Cell {
    /// Working-set bytes.
    pub size_bytes: usize,
    /// Bytes between successive reads.
    pub stride_bytes: usize,
    /// Dependent reads: median ticks per read, the timer's empty window subtracted.
    pub chase_ticks: f64,
    /// Independent reads: median ticks per read.
    pub stream_ticks: f64,
    /// The simulator's ticks per read for the same references (in order, nothing
    /// overlapped).
    pub simulated_ticks: f64,
}

impl Cell {
    /// measured chase ÷ simulated.
    pub fn chase_ratio(&self) -> f64 {
        self.chase_ticks / self.simulated_ticks
    }

    /// measured stream ÷ simulated.
    pub fn stream_ratio(&self) -> f64 {
        self.stream_ticks / self.simulated_ticks
    }
}

/// The whole signature.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Signature {
    /// The machine simulated.
    pub machine: String,
    /// Every cell, by size then stride.
    pub cells: Vec<Cell>,
    /// The sizes measured.
    pub sizes: Vec<usize>,
    /// The strides measured.
    pub strides: Vec<usize>,
    /// Timed samples per cell (the median is over these).
    pub samples: usize,
}

/// The sizes and strides of a run.
pub fn grid(quick: bool) -> (Vec<usize>, Vec<usize>) {
    let step = if quick { 2 } else { 1 };
    let sizes = (12..=26).step_by(step).map(|p| 1usize << p).collect();
    let strides = vec![8, 64, 256, 4096];
    (sizes, strides)
}

/// The working set as a chase: word `i·stride` holds the index of the next read's word.
fn chase_array(size: usize, stride: usize) -> Vec<u64> {
    let words = size / WORD;
    let step = stride / WORD;
    let mut a = vec![0u64; words];
    let mut i = 0;
    while i < words {
        let next = if i + step < words { i + step } else { 0 };
        a[i] = next as u64;
        i += step;
    }
    a
}

/// Median ticks per read of `reads` dependent reads.
fn time_chase(a: &[u64], reads: usize, samples: usize, empty: u64) -> f64 {
    let mut per = Vec::with_capacity(samples);
    let mut idx = 0usize;
    for _ in 0..samples {
        let t0 = tsc::start();
        for _ in 0..reads {
            // The index comes from the array: each read waits for the last.
            idx = a[idx] as usize;
        }
        let t1 = tsc::stop();
        black_box(idx);
        per.push(t1.wrapping_sub(t0).saturating_sub(empty) as f64 / reads as f64);
    }
    tsc::median(&mut per)
}

/// Median ticks per read of `passes` passes of independent reads at `step` words.
fn time_stream(a: &[u64], step: usize, passes: usize, samples: usize, empty: u64) -> f64 {
    let per_pass = a.len().div_ceil(step);
    let mut per = Vec::with_capacity(samples);
    for _ in 0..samples {
        let mut sum = 0u64;
        let t0 = tsc::start();
        for _ in 0..passes {
            let mut i = 0;
            while i < a.len() {
                sum = sum.wrapping_add(a[i]);
                i += step;
            }
            sum = black_box(sum);
        }
        let t1 = tsc::stop();
        black_box(sum);
        per.push(t1.wrapping_sub(t0).saturating_sub(empty) as f64 / (passes * per_pass) as f64);
    }
    tsc::median(&mut per)
}

/// The simulator's ticks per read for a warm-up pass then enough passes of `size` at
/// `stride` (the addresses as one allocation at a page boundary would have them).
fn simulate(machine: &Machine, size: usize, stride: usize) -> Result<f64, shmnet_sim::ConfigError> {
    let mut sim = Simulator::new(machine)?;
    let base: u64 = 0x1000_0000;
    let per_pass = size.div_ceil(stride);
    let passes = SIM_MIN_READS.div_ceil(per_pass).max(1);
    for off in (0..size).step_by(stride) {
        sim.access(Op::Read, base + off as u64, WORD as u32);
    }
    let before = sim.ticks();
    for _ in 0..passes {
        for off in (0..size).step_by(stride) {
            sim.access(Op::Read, base + off as u64, WORD as u32);
        }
    }
    Ok((sim.ticks() - before) / (passes * per_pass) as f64)
}

/// Measures and simulates every cell. `progress` gets (fraction done, what).
pub fn run(
    machine: &Machine,
    quick: bool,
    empty_window_ticks: u64,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<Signature, shmnet_sim::ConfigError> {
    let (sizes, strides) = grid(quick);
    let samples = if quick { 5 } else { 11 };
    let mut cells = Vec::new();
    let total = sizes.len() * strides.len();
    for (si, &size) in sizes.iter().enumerate() {
        for (ti, &stride) in strides.iter().enumerate() {
            if stride > size {
                continue;
            }
            progress(
                (si * strides.len() + ti) as f64 / total as f64,
                &format!("{size} bytes at stride {stride}"),
            );
            let a = chase_array(size, stride);
            let per_pass = size / stride;
            let passes = MIN_READS.div_ceil(per_pass).max(2);
            // The untimed pass that brings the set in.
            black_box(time_stream(&a, stride / WORD, 1, 1, 0));
            let chase = time_chase(&a, passes * per_pass, samples, empty_window_ticks);
            let stream = time_stream(&a, stride / WORD, passes, samples, empty_window_ticks);
            cells.push(Cell {
                size_bytes: size,
                stride_bytes: stride,
                chase_ticks: chase,
                stream_ticks: stream,
                simulated_ticks: simulate(machine, size, stride)?,
            });
        }
    }
    Ok(Signature {
        machine: machine.name.clone(),
        cells,
        sizes,
        strides,
        samples,
    })
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "Memory signature: ticks per read, measured dependent (chase) / independent (stream) / simulated on {}",
            self.machine
        )?;
        write!(f, "{:>10}", "size")?;
        for s in &self.strides {
            write!(f, " {:>22}", format!("stride {s}"))?;
        }
        writeln!(f)?;
        for &size in &self.sizes {
            write!(f, "{:>10}", human(size))?;
            for &stride in &self.strides {
                match self
                    .cells
                    .iter()
                    .find(|c| c.size_bytes == size && c.stride_bytes == stride)
                {
                    Some(c) => write!(
                        f,
                        " {:>22}",
                        format!(
                            "{:.1} / {:.1} / {:.1}",
                            c.chase_ticks, c.stream_ticks, c.simulated_ticks
                        )
                    )?,
                    None => write!(f, " {:>22}", "—")?,
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// `4K`, `1M`, …
fn human(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{}M", b >> 20)
    } else {
        format!("{}K", b >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_visits_every_strided_word_and_returns() {
        let a = chase_array(4096, 256);
        let mut idx = 0;
        let mut seen = Vec::new();
        for _ in 0..16 {
            seen.push(idx);
            idx = a[idx] as usize;
        }
        assert_eq!(idx, 0, "back at the start after size / stride reads");
        assert_eq!(seen, (0..16).map(|i| i * 32).collect::<Vec<_>>());
    }

    #[test]
    fn a_set_within_the_first_level_costs_its_hit_time_when_simulated() {
        let m = Machine::preset("hp720-1993").unwrap();
        let l1 = m.caches.iter().find(|c| c.level == 1).unwrap();
        let t = simulate(&m, 4096, 64).unwrap();
        assert!((t - l1.hit_ticks).abs() < 1e-9, "{t} vs {}", l1.hit_ticks);
        // Far past every cache, at a line's stride, every read is a miss.
        let big = simulate(&m, 64 << 20, 4096).unwrap();
        assert!(big > 10.0 * t, "{big} vs {t}");
    }
}
