//! Seed 000 on `hp720-1993`: a 1,460-byte buffer that is not in the cache costs 46 or 47
//! line fills of 18 cycles (828 / 846 overhead cycles), or 23 cycles when every victim is
//! dirty (1,058 / 1,081); and a residency replay's histogram of copy-out overheads peaks there.

use shmnet_sim::synth::{Residency, burst_overheads};
use shmnet_sim::trace::{BinaryReader, TraceWriter};
use shmnet_sim::{Machine, Op, Party, Simulator};

const BUF: u64 = 0x3000_0000;
const WORDS: u64 = 1460 / 4;

/// Overhead of loading the buffer at `start` word by word: ticks minus one per word.
fn copy_out(sim: &mut Simulator, start: u64) -> f64 {
    // Force the TLB: a word in the same page, in none of the buffer's lines.
    let page = start & !4095;
    let other = if start - page < 2048 {
        page + 4092
    } else {
        page + 2044
    };
    sim.access(Op::Read, other, 4);
    let t: f64 = (0..WORDS)
        .map(|i| sim.access(Op::Read, start + i * 4, 4))
        .sum();
    t - WORDS as f64
}

#[test]
fn clean_misses_cost_828_or_846() {
    let m = Machine::preset("hp720-1993").unwrap();
    let mut sim = Simulator::new(&m).unwrap();
    assert_eq!(copy_out(&mut sim, BUF), 828.0, "46 lines x 18");
    assert_eq!(copy_out(&mut sim, BUF + 2048 + 16), 846.0, "47 lines x 18");
    // Loaded again: all in the cache, no overhead.
    assert_eq!(copy_out(&mut sim, BUF), 0.0);
}

#[test]
fn dirty_misses_cost_1058_or_1081() {
    let m = Machine::preset("hp720-1993").unwrap();
    for (start, want) in [(BUF, 1058.0), (BUF + 2048 + 16, 1081.0)] {
        let mut sim = Simulator::new(&m).unwrap();
        // Dirty every line of the 256 KiB direct-mapped cache.
        for a in (0..256u64 << 10).step_by(4) {
            sim.access(Op::Write, 0x5000_0000 + a, 4);
        }
        assert_eq!(copy_out(&mut sim, start), want);
    }
}

#[test]
fn a_tlb_miss_adds_88() {
    let m = Machine::preset("hp720-1993").unwrap();
    let mut sim = Simulator::new(&m).unwrap();
    let t: f64 = (0..WORDS)
        .map(|i| sim.access(Op::Read, BUF + i * 4, 4))
        .sum();
    assert_eq!(t - WORDS as f64, 828.0 + 88.0);
}

/// Replays a residency workload through the binary format and returns the histogram of
/// copy-out overheads in 10-cycle bins (the seed's "between 840 and 849"), as (bin, count)
/// sorted by count, largest first, and the overheads.
fn replay(write_fraction: f64) -> (Vec<(u64, usize)>, Vec<f64>) {
    let work = Residency {
        buffers: 60,
        load_bytes: 1 << 20,
        load_touches: 60_000,
        load_write_fraction: write_fraction,
        ..Residency::default()
    };
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    work.generate(|p, o, a, s| w.write(p, o, a, u64::from(s)))
        .unwrap();
    let bytes = w.finish().unwrap();
    let m = Machine::preset("hp720-1993").unwrap();
    let mut sim = Simulator::new(&m).unwrap();
    let mut src = BinaryReader::new(&bytes[..]).unwrap();
    let over = burst_overheads(&mut sim, &mut src, Party::Application, 1.0).unwrap();
    assert_eq!(over.len(), 60);
    let mut bins = std::collections::BTreeMap::new();
    for &o in &over {
        *bins.entry(o as u64 / 10).or_insert(0usize) += 1;
    }
    let mut v: Vec<(u64, usize)> = bins.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    (v, over)
}

#[test]
fn residency_with_a_reading_load_peaks_at_clean_misses() {
    let (bins, over) = replay(0.0);
    let top: Vec<u64> = bins.iter().take(2).map(|b| b.0).collect();
    assert!(top.contains(&82) && top.contains(&84), "{bins:?}");
    let exact = over.iter().filter(|&&o| o == 828.0 || o == 846.0).count();
    assert!(exact * 10 >= over.len() * 9, "{over:?}");
}

#[test]
fn residency_with_a_writing_load_peaks_at_dirty_misses() {
    let (bins, over) = replay(1.0);
    let top: Vec<u64> = bins.iter().take(2).map(|b| b.0).collect();
    assert!(top.contains(&105) && top.contains(&108), "{bins:?}");
    let exact = over.iter().filter(|&&o| o == 1058.0 || o == 1081.0).count();
    assert!(exact * 10 >= over.len() * 9, "{over:?}");
}
