//! Simulation speed without the command line: `cargo run --release -p shmnet-sim --example
//! bench [REFS]` (default 10^8), the same as `shmnet sim bench`.

fn main() -> std::io::Result<()> {
    let refs = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000_000u64);
    let mut last = String::new();
    let report = shmnet_sim::bench::run(refs, &std::env::temp_dir(), &mut |step, _| {
        if step != last {
            eprintln!("{step}…");
            last = step.to_string();
        }
    })?;
    print!("{report}");
    println!(
        "{}",
        serde_json::to_string(&report.rows).unwrap_or_default()
    );
    Ok(())
}
