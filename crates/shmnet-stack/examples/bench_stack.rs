//! Run the stack benchmark and print its rows (`cargo run --release -p shmnet-stack
//! --example bench_stack [quick]`). The CLI's `shmnet bench stack` calls the same function.

fn main() {
    let quick = std::env::args().any(|a| a == "quick" || a == "--quick");
    let r = shmnet_stack::bench::run(quick, &mut |line| eprintln!("{line}"));
    println!("rx: {}", r.rx_timed_region);
    println!("tx: {}", r.tx_timed_region);
    println!("median of {} batches", r.batches);
    println!(
        "{:<4} {:>6} {:>5} {:>6} {:>10} {:>9} {:>10} {:>6}",
        "path", "size", "csum", "frames", "ns/msg", "ns/byte", "memcpy ns", "ratio"
    );
    for (path, rows) in [("rx", &r.rx), ("tx", &r.tx)] {
        for row in rows.iter() {
            println!(
                "{:<4} {:>6} {:>5} {:>6} {:>10.0} {:>9.3} {:>10.0} {:>6.2}",
                path,
                row.size,
                row.checksum,
                row.frames,
                row.ns_per_msg,
                row.ns_per_byte,
                row.memcpy_ns,
                row.ratio
            );
        }
    }
}
