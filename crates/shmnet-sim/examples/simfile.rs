//! Profiling aid: the binary half of `shmnet sim bench` on a file kept between runs:
//! `cargo run --release -p shmnet-sim --example simfile FILE [REFS]` writes the benchmark's
//! packet-copy trace to FILE if it does not exist (REFS references, default 10^8), then
//! times reading and simulating it as the benchmark does.

use std::fs::File;
use std::io::BufWriter;
use std::time::Instant;

use shmnet_sim::trace::{self, Format, TraceWriter};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: simfile FILE [REFS]");
    let refs = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000_000u64);
    if std::fs::metadata(&path).is_err() {
        let mut w = TraceWriter::new(BufWriter::new(File::create(&path)?))?;
        shmnet_sim::synth::PacketCopies::default()
            .generate(refs, |p, o, a, s| w.write(p, o, a, u64::from(s)))?;
        w.finish()?;
    }
    let m = shmnet_sim::bench::bench_machine();
    let start = Instant::now();
    let (_, mut src) = trace::open(Box::new(File::open(&path)?), Some(Format::Shmnet))
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut sim = shmnet_sim::Simulator::new(&m).expect("valid");
    sim.run(src.as_mut(), |_| {})
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let s = start.elapsed().as_secs_f64();
    println!(
        "{:.1} M refs/s, ticks_per_ref {:?}",
        sim.refs() as f64 / s / 1e6,
        sim.report().ticks_per_ref
    );
    Ok(())
}
