//! Profiling aid: simulates an in-memory binary packet-copy trace (no file I/O):
//! `cargo run --release -p shmnet-sim --example simbin [REFS]`.

use std::time::Instant;

use shmnet_sim::trace::{BinaryReader, TraceWriter};

fn main() {
    let refs = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000_000u64);
    let mut w = TraceWriter::new(Vec::new()).expect("in memory");
    shmnet_sim::synth::PacketCopies::default()
        .generate(refs, |p, o, a, s| w.write(p, o, a, u64::from(s)))
        .expect("in memory");
    let bytes = w.finish().expect("in memory");
    let m = shmnet_sim::bench::bench_machine();
    for _ in 0..3 {
        let start = Instant::now();
        let mut src = BinaryReader::new(&bytes[..]).expect("valid");
        let mut sim = shmnet_sim::Simulator::new(&m).expect("valid");
        sim.run(&mut src, |_| {}).expect("valid");
        let s = start.elapsed().as_secs_f64();
        println!("{:.1} M refs/s", sim.refs() as f64 / s / 1e6);
        if std::env::var_os("SIMBIN_REPORT").is_some() {
            print!("{}", sim.report());
        }
    }
}
