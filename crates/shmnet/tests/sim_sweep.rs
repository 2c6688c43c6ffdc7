//! A sweep cut into independent jobs: `shmnet sim sweep --shard I/N` run by GNU parallel (as
//! docs/sim.md shows), merged by `shmnet sim sweep-merge` into exactly the sweep one process
//! computes; and the merge refusing what is not one sweep's shards.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::{json, run, u};
use serde_json::Value;

/// A Dinero `din` trace: fetches through a 24 KiB code loop, reads and writes scattered over
/// 192 KiB — enough that the first-level geometry matters.
fn write_trace(path: &Path) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create trace"));
    let mut x: u64 = 12345;
    for i in 0..60_000u64 {
        writeln!(f, "2 {:x}", 0x40_0000 + (i * 4) % (24 << 10)).unwrap();
        if i % 2 == 0 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let label = if i % 6 == 0 { 1 } else { 0 };
            writeln!(f, "{label} {:x}", 0x1000_0000 + (x >> 33) % (192 << 10)).unwrap();
        }
    }
}

const SWEEP: [&str; 6] = [
    "--machine",
    "sgi-r4400-1994",
    "--l1-size",
    "8K,16K,32K,64K",
    "--l1-assoc",
    "1,2,4",
];

#[test]
fn sweep_shards_run_under_gnu_parallel_and_merge_into_the_whole_sweep() {
    let test = "sweep_shards_run_under_gnu_parallel_and_merge_into_the_whole_sweep";
    if Command::new("parallel").arg("--version").output().is_err() {
        shmnet_testkit::skip(
            test,
            "GNU parallel is not installed (scripts/setup installs it)",
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("shmnet-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.din");
    write_trace(&trace);
    let trace_s = trace.to_str().unwrap();
    let mut whole_args = vec!["sim", "sweep"];
    whole_args.extend(SWEEP);
    whole_args.extend(["--json", trace_s]);
    let whole = json(&whole_args);

    // As the docs show it: one job per shard, each writing its JSON.
    let job = format!(
        "{} sim sweep {} --shard {{}}/5 --json {} > {}/s{{}}.json",
        env!("CARGO_BIN_EXE_shmnet"),
        SWEEP.join(" "),
        trace_s,
        dir.display()
    );
    let out = Command::new("parallel")
        .args(["--will-cite", "--halt", "now,fail=1", &job, ":::"])
        .args(["1", "2", "3", "4", "5"])
        .output()
        .expect("run parallel");
    assert!(
        out.status.success(),
        "parallel: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shards: Vec<String> = (1..=5)
        .map(|i| dir.join(format!("s{i}.json")).to_str().unwrap().to_string())
        .collect();
    let mut sizes = Vec::new();
    for s in &shards {
        let v: Value = serde_json::from_str(std::fs::read_to_string(s).unwrap().trim())
            .unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(u(&v["shard"], "count"), 5, "{v}");
        sizes.push(v["cells"].as_array().unwrap().len());
    }
    // 12 configurations over 5 shards: every one run once, none twice.
    assert_eq!(sizes.iter().sum::<usize>(), 12, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n == 2 || n == 3), "{sizes:?}");

    let mut merge_args = vec!["sim", "sweep-merge", "--json"];
    // Any order.
    merge_args.extend(shards.iter().rev().map(String::as_str));
    let merged = json(&merge_args);
    assert_eq!(
        merged["cells"], whole["cells"],
        "merged: {merged}\nwhole: {whole}"
    );
    assert!(merged["shard"].is_null());

    // A shard missing, or given twice: refused, saying which.
    let out = run(&[
        "sim",
        "sweep-merge",
        &shards[0],
        &shards[1],
        &shards[2],
        &shards[3],
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing") && err.contains('5'), "{err}");
    let out = run(&["sim", "sweep-merge", &shards[0], &shards[0]]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("twice"));
    // The whole sweep is not a shard.
    std::fs::write(dir.join("whole.json"), whole.to_string()).unwrap();
    let out = run(&[
        "sim",
        "sweep-merge",
        dir.join("whole.json").to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a shard"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_shard_outside_its_count_is_refused_with_the_syntax() {
    let out = run(&[
        "sim",
        "sweep",
        "--machine",
        "sgi-r4400-1994",
        "--shard",
        "6/5",
        "-",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("I/N"), "{err}");
}
