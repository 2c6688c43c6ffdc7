//! `shmnet calibrate`, `shmnet residency` and `shmnet lab` run end to end and keep their
//! books: every buffer copied is in the histogram, every message sent is received or counted
//! as dropped, the JSON has the fields the issue names. No test asserts a timing.

mod common;

use common::{json, run, u};
use serde_json::Value;

/// The histogram holds every buffer timed; the messages add up; the rows are percentages
/// in order; every position is there.
fn check_run(r: &Value, messages: u64) {
    let buffers = u(r, "buffers");
    let h = &r["histogram"];
    let binned: u64 = h["counts"]
        .as_array()
        .expect("counts")
        .iter()
        .map(|c| c.as_u64().expect("a count"))
        .sum();
    assert_eq!(binned + u(h, "overflow"), buffers, "{h}");
    assert!(h["bin_ticks"].as_f64().unwrap() > 0.0);
    let m = &r["messages"];
    assert_eq!(u(m, "sent"), messages, "{m}");
    assert_eq!(
        u(m, "sent"),
        u(m, "received") + u(m, "queue_full") + u(m, "lost_elsewhere"),
        "{m}"
    );
    assert_eq!(u(m, "lost_elsewhere"), 0, "{m}");
    // Ten data buffers per 14,792-byte message.
    assert_eq!(buffers, u(m, "received") * 10, "{r}");
    let s = &r["summary"];
    let pct = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k} in {s}"));
    let (a, b, c, d) = (
        pct("fully_cached_pct"),
        pct("lt_clean_pct"),
        pct("lt_dirty_pct"),
        pct("gt_dirty_pct"),
    );
    assert!(0.0 <= a && a <= b && b <= c && c <= 100.0, "{s}");
    assert!((c + d - 100.0).abs() < 1e-6, "{s}");
    assert!(pct("avg_overhead_ticks_per_word") >= 0.0);
    let positions = r["positions"].as_array().expect("positions");
    assert_eq!(positions.len(), 10, "{r}");
    let per_position: u64 = positions.iter().map(|p| u(p, "buffers")).sum();
    assert_eq!(per_position, buffers);
    assert_eq!(
        r["ks"].as_array().expect("ks").len(),
        45,
        "every pair of ten positions"
    );
    assert!(r["settings"].is_object());
}

#[test]
fn a_quick_inline_run_accounts_for_every_buffer() {
    let r = json(&["residency", "--quick", "--json"]);
    check_run(&r, 100);
    // One message at a time with a large gap: nothing is dropped.
    assert_eq!(u(&r["messages"], "queue_full"), 0);
}

#[test]
fn the_server_structure_on_two_cpus_with_every_knob() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        shmnet_testkit::skip(
            "the_server_structure_on_two_cpus_with_every_knob",
            &format!("--cores split needs two CPUs; this process may use {cpus}"),
        );
        return;
    }
    let r = json(&[
        "residency",
        "--structure=server",
        "--cores=split",
        "--messages=40",
        "--gap=0",
        "--queue=16",
        "--checksum",
        "--tlb-force",
        "--load=64",
        "--alloc=fifo",
        "--dma=nt",
        "--json",
    ]);
    check_run(&r, 40);
    let s = &r["settings"];
    assert_eq!(s["structure"], "server");
    assert_eq!(s["cores"], "split");
    assert_eq!(s["dma"], "non_temporal");
}

#[test]
fn calibrate_json_has_the_fields_the_issue_names() {
    let t = json(&["calibrate", "--quick", "--json"]);
    for k in ["overhead_ticks", "quantum_ticks"] {
        assert!(t["timer"][k].as_u64().is_some(), "timer.{k}: {t}");
    }
    for k in ["l1", "l2", "l3", "dram", "dram_dirty"] {
        assert!(
            t["line_load_ticks"][k].as_f64().is_some(),
            "line_load_ticks.{k}"
        );
    }
    assert!(t["tlb_miss_ticks"]["4k"].as_f64().is_some());
    let two_m = t["tlb_miss_ticks"]
        .get("2m")
        .expect("2m present (null without THP)");
    if two_m.is_null() {
        shmnet_testkit::skip(
            "calibrate_json_has_the_fields_the_issue_names",
            "the kernel gave the calibrator no transparent huge pages, so tlb_miss_ticks.2m \
             is null (/sys/kernel/mm/transparent_hugepage/enabled must be madvise or always)",
        );
    } else {
        assert!(two_m.as_f64().is_some_and(|v| v > 0.0), "2m: {two_m}");
    }
    for k in ["1500", "8192", "1048576"] {
        assert!(t["memcpy_gbit_per_s"][k].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn the_lab_writes_its_report_figures_and_runs() {
    let dir = std::env::temp_dir().join(format!("shmnet-lab-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = json(&["lab", "--quick", "--json", "--out", dir.to_str().unwrap()]);
    let runs = r["runs"].as_object().expect("runs");
    assert!(runs.len() >= 15, "{r}");
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    for needle in ["Table 1", "Table 2", "Table 3", "Table 4", "rules"] {
        assert!(report.contains(needle), "report.md lacks {needle}");
    }
    for png in ["table2.png", "table3.png", "table4.png", "rules.png"] {
        let bytes = std::fs::read(dir.join(png)).unwrap_or_default();
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
    // Every run left its JSON; a run that could not says why. The only reason a run may
    // give is a machine without reserved huge pages (the 2 MiB-page rule): that run is
    // skipped, loudly, and fails the test under CI=true (scripts/test reserves them as
    // root). Any other error fails the test.
    let mut not_run = Vec::new();
    for (name, v) in runs {
        let text = std::fs::read_to_string(dir.join("runs").join(format!("{name}.json")))
            .unwrap_or_else(|e| panic!("runs/{name}.json: {e}"));
        let saved: Value = serde_json::from_str(&text).expect("run JSON parses");
        match v.get("error") {
            None => check_run(&saved, saved["settings"]["messages"].as_u64().unwrap()),
            Some(error) => {
                let error = error.as_str().expect("the error is a message");
                assert_eq!(saved["error"].as_str(), Some(error), "{name}: {saved}");
                assert!(
                    error.contains("huge pages"),
                    "{name} failed for a reason other than missing huge pages: {error}"
                );
                not_run.push(format!("{name} ({error})"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !not_run.is_empty() {
        shmnet_testkit::skip(
            "the_lab_writes_its_report_figures_and_runs",
            &format!("these runs could not run: {}", not_run.join("; ")),
        );
    }
}

#[test]
fn settings_that_mean_nothing_are_refused_with_what_to_do() {
    let out = run(&["residency", "--cores=split"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--structure server"), "{err}");
    let out = run(&["residency", "--queue=0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--queue"));
    let out = run(&["residency", "--calibration=/nonexistent.json"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.json"));
}

#[test]
fn a_recorded_trace_replays_on_the_seed_machine_at_the_seed_marks() {
    let trace = std::env::temp_dir().join(format!("shmnet-res-{}.trc", std::process::id()));
    let path = trace.to_str().unwrap();
    let r = json(&[
        "residency",
        "--quick",
        "--gap=0",
        "--queue=16",
        "--load=256",
        "--trace",
        path,
        "--json",
    ]);
    check_run(&r, 100);
    let s = json(&["sim", "residency", "--machine=hp720-1993", "--json", path]);
    // 1,480 bytes 34 bytes into a buffer span 47 lines of 32 bytes: 47 × 18 and 47 × 23,
    // the seed's own 100 % clean and dirty miss overheads.
    assert_eq!(s["marks"]["clean"].as_f64(), Some(846.0), "{s}");
    assert_eq!(s["marks"]["dirty"].as_f64(), Some(1081.0), "{s}");
    let h = &s["histogram"];
    let binned: u64 = h["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(
        binned + u(h, "overflow"),
        u(&r, "buffers"),
        "one simulated buffer per timed one"
    );
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn tracing_is_refused_where_the_parties_are_elsewhere() {
    let out = run(&["residency", "--structure=server", "--trace=/tmp/never.trc"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("inline structure only"));
    assert!(!std::path::Path::new("/tmp/never.trc").exists());
}

#[test]
fn validation_sets_predicted_beside_measured() {
    let v = json(&["sim", "validate", "--quick", "--json"]);
    let rows = v["rows"].as_array().expect("rows");
    assert!(rows.len() >= 3, "at least three settings: {v}");
    for r in rows {
        for side in ["measured", "predicted"] {
            let pct = r[side]["fully_cached_pct"].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&pct), "{r}");
        }
        assert_eq!(u(r, "buffers"), 1000, "{r}");
    }
    assert!(
        v["mean_abs_error_fully_cached_points"]
            .as_f64()
            .unwrap()
            .is_finite()
    );
}
