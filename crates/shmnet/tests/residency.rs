//! `shmnet calibrate`, `shmnet residency` and `shmnet lab` run end to end and keep their
//! books: every buffer copied is in the histogram, every message sent is received or counted
//! as dropped, the JSON has the fields the issue names, and the exit status says what the JSON
//! does (degenerate marks: 3; a failed lab run: 4). No test asserts a timing: whether this
//! machine's marks separate the cache from memory is measured, so the tests check that the
//! flag, the report and the exit status agree, whichever way it went.

mod common;

use common::{json, run, u};
use serde_json::Value;

/// Runs a residency or lab command with `--json` and checks that its exit status matches what
/// its JSON says: 3 when the marks are degenerate (and stderr says why), else 4 when a lab run
/// failed, else 0.
fn judged(args: &[&str]) -> Value {
    let out = run(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("shmnet {args:?}: not JSON ({e}): {stdout}\n{stderr}"));
    let degenerate = !v["degenerate"].is_null();
    let failed = v["failed"].as_array().is_some_and(|f| !f.is_empty());
    let want = if degenerate {
        3
    } else if failed {
        4
    } else {
        0
    };
    assert_eq!(
        out.status.code(),
        Some(want),
        "shmnet {args:?}: degenerate {degenerate}, failed runs {failed}: {stderr}"
    );
    if degenerate {
        assert!(stderr.contains("cannot tell"), "{stderr}");
    }
    v
}

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
    // "In cache" is a subset of "below a clean miss" exactly when the marks are not
    // degenerate; the rest holds by construction.
    if r["degenerate"].is_null() {
        assert!(a <= b, "{s} with marks {}", r["marks"]);
    } else {
        assert_eq!(r["degenerate"], "cache_overlaps_miss", "{r}");
    }
    assert!(0.0 <= a && b <= c && c <= 100.0, "{s}");
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
    let r = judged(&["residency", "--quick", "--json"]);
    check_run(&r, 100);
    // One message at a time with a large gap. The sender keeps its own schedule (an
    // independent host), so a receiver preempted for longer than a gap on a busy machine
    // drops a message at its one-message queue; the books still balance (check_run), and
    // most messages arrive on any machine that runs the test at all.
    let m = &r["messages"];
    assert!(u(m, "received") > u(m, "queue_full"), "{m}");
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
    let r = judged(&[
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

/// `server-regions`: the probe runs in the server's process around its copy into the
/// isolated application's posted buffers, and comes back whole when the server stops: every
/// buffer of every message is timed there, with the TLB forced and a load over each message
/// read in place.
#[test]
fn the_isolated_server_structure_times_the_servers_copy() {
    let r = judged(&[
        "residency",
        "--structure=server-regions",
        "--messages=40",
        "--gap=500",
        "--tlb-force",
        "--load=64",
        "--json",
    ]);
    check_run(&r, 40);
    assert_eq!(r["settings"]["structure"], "server-regions");
}

/// `--layout scattered` reaches the settings (and the server structure's pools); the peaks
/// are reported, each within the histogram and with a reading.
#[test]
fn the_buffer_layout_is_a_knob_and_the_peaks_are_reported() {
    for structure in ["inline", "server"] {
        let r = judged(&[
            "residency",
            "--structure",
            structure,
            "--layout",
            "scattered",
            "--messages",
            "20",
            "--gap",
            "0",
            "--json",
        ]);
        check_run(&r, 20);
        assert_eq!(r["settings"]["layout"], "scattered", "{structure}");
        let limit = r["histogram"]["bin_ticks"].as_f64().unwrap()
            * r["histogram"]["counts"].as_array().unwrap().len() as f64;
        for p in r["peaks"].as_array().expect("peaks") {
            assert!(
                f(p, "lo_ticks") < f(p, "hi_ticks") && f(p, "hi_ticks") <= limit,
                "{p}"
            );
            assert!(
                (f(p, "lo_ticks")..=f(p, "hi_ticks")).contains(&f(p, "top_ticks")),
                "{p}"
            );
            assert!(
                u(p, "buffers") <= u(&r, "buffers") && f(p, "share_pct") >= 2.0,
                "{p}"
            );
            assert!(p["reading"].is_string(), "{p}");
        }
    }
    let r = judged(&["residency", "--messages", "20", "--json"]);
    assert_eq!(r["settings"]["layout"], "contiguous");
    let out = run(&["residency", "--layout", "diagonal"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("contiguous"));
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
        // Zero is an honest answer: 64 MiB is 32 huge pages, which the second-level TLB of
        // many CPUs holds whole (CI's machine measured 0.0), so the walk may never happen.
        assert!(
            two_m.as_f64().is_some_and(|v| v.is_finite() && v >= 0.0),
            "2m: {two_m}"
        );
    }
    for k in ["1500", "8192", "1048576"] {
        assert!(t["memcpy_gbit_per_s"][k].as_f64().unwrap() > 0.0);
    }
    for k in ["cached_max", "clean", "dirty"] {
        assert!(t["marks"][k].as_f64().is_some(), "marks.{k}: {t}");
    }
    assert!(
        t["degenerate"].is_null() || t["degenerate"] == "cache_overlaps_miss",
        "{t}"
    );
    assert!(t["timer"]["quantum_ticks"].as_u64().unwrap() >= 1);
}

#[test]
fn the_lab_writes_its_report_figures_and_runs() {
    let dir = std::env::temp_dir().join(format!("shmnet-lab-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = judged(&["lab", "--quick", "--json", "--out", dir.to_str().unwrap()]);
    let runs = r["runs"].as_object().expect("runs");
    assert!(runs.len() >= 15, "{r}");
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    for needle in [
        "Table 1",
        "Table 2",
        "Table 3",
        "Section 3.3 and Figure 6",
        "Section 3.4",
        "Figure 7",
        "Figure 8 and Table 4",
        "rules",
        "% messages dropped at the queue",
    ] {
        assert!(report.contains(needle), "report.md lacks {needle}");
    }
    // Table 4's loads step across the knee measured in the run.
    let knee = r["knee_load_bytes"].as_u64().expect("knee_load_bytes");
    assert!(knee >= 8 && knee % 8 == 0, "{knee}");
    let loads: Vec<u64> = runs
        .values()
        .filter(|v| v["table"] == "table4")
        .filter_map(|v| v["settings"]["load_bytes"].as_u64())
        .collect();
    assert!(
        loads.contains(&0),
        "Table 4 has its unloaded column: {loads:?}"
    );
    assert!(
        loads.iter().any(|&l| l > 0 && l < knee) && loads.iter().any(|&l| l > knee),
        "Table 4's loads lie either side of the knee {knee}: {loads:?}"
    );
    for (name, touch) in [
        ("inline-checksum-switch-idle-large-gap", false),
        ("inline-checksum-switch-busy-large-gap", true),
    ] {
        let sw = &runs[name]["switch"];
        assert!(sw["switch_ticks"].as_f64().unwrap() > 0.0, "{name}: {sw}");
        assert_eq!(
            sw["touch_bytes"].as_u64().unwrap() > 0,
            touch,
            "{name}: {sw}"
        );
    }
    let verdicts = r["verdicts"].as_array().expect("verdicts");
    assert_eq!(verdicts.len(), 6, "{verdicts:?}");
    for v in verdicts {
        let f = v["finding"].as_str().unwrap();
        assert!(
            [
                "holds",
                "contradicted",
                "no_clear_difference",
                "not_measured"
            ]
            .contains(&f),
            "{v}"
        );
    }
    assert_eq!(r["switches"].as_array().map(Vec::len), Some(2), "{r}");
    // Every comparison names runs of the plan (the two only a full run has aside).
    for c in r["comparisons"].as_array().expect("comparisons") {
        for k in ["run", "against"] {
            let name = c[k].as_str().unwrap();
            assert!(
                runs.contains_key(name) || name.contains("0.90x") || name.contains("1.10x"),
                "comparison {c} names {name}, which is not a run"
            );
        }
    }
    assert_eq!(
        report.contains("The marks are degenerate"),
        !r["degenerate"].is_null(),
        "report.md and the JSON disagree on the marks"
    );
    for f in r["failed"].as_array().expect("failed") {
        let name = f.as_str().unwrap().split(':').next().unwrap();
        assert!(
            runs[name]["error"].is_string(),
            "{name} failed but has no error"
        );
    }
    for png in [
        "table2.png",
        "table3.png",
        "hpux.png",
        "bsd.png",
        "fig7.png",
        "table4.png",
        "rules.png",
    ] {
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

/// A calibration file in which loading the buffer from the last-level cache is slower than
/// loading it from memory (as the issue's Intel machine measured) makes residency say the
/// marks are degenerate, in its JSON, its text and its exit status; one whose distributions
/// are apart classifies with them as they are.
#[test]
fn degenerate_marks_are_flagged_in_the_json_the_text_and_the_exit_status() {
    // p25 and p75 halfway between the median and p10 and p90.
    let spread = |p10: f64, p50: f64, p90: f64| {
        serde_json::json!({"p10": p10, "p25": (p10 + p50) / 2.0, "p50": p50,
                           "p75": (p50 + p90) / 2.0, "p90": p90})
    };
    let file = |name: &str, llc: Value, clean: Value| {
        let path = std::env::temp_dir().join(format!("shmnet-{name}-{}.json", std::process::id()));
        let v = serde_json::json!({"buffer": {
            "bytes": 1480, "line_offset": 34, "hot_ticks": 150.0,
            "llc_overhead": llc, "clean_overhead": clean,
            "dirty_overhead": spread(2300.0, 2400.0, 2700.0),
        }});
        std::fs::write(&path, v.to_string()).unwrap();
        path
    };
    let bad = file(
        "degenerate",
        spread(2900.0, 3210.0, 3600.0),
        spread(2100.0, 2220.0, 2500.0),
    );
    let arg = format!("--calibration={}", bad.display());
    let r = judged(&["residency", "--quick", "--json", &arg]);
    assert_eq!(r["degenerate"], "cache_overlaps_miss");
    assert_eq!(
        r["marks"]["cached_max"].as_f64(),
        Some(3405.0),
        "p75 of the cached load"
    );
    assert_eq!(
        r["marks"]["clean"].as_f64(),
        Some(2160.0),
        "p25 of the clean miss"
    );
    let text = run(&["residency", "--quick", &arg]);
    assert_eq!(text.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&text.stdout).contains("WARNING: this machine cannot tell"));

    let good = file(
        "distinct",
        spread(50.0, 75.0, 120.0),
        spread(300.0, 340.0, 500.0),
    );
    let arg = format!("--calibration={}", good.display());
    let r = judged(&["residency", "--quick", "--json", &arg]);
    assert!(r["degenerate"].is_null(), "{r}");
    assert_eq!(r["marks"]["cached_max"].as_f64(), Some(97.5));
    assert_eq!(r["marks"]["clean"].as_f64(), Some(320.0));
    assert_eq!(r["marks"]["dirty"].as_f64(), Some(2350.0));
    // A file is untrusted input: percentiles out of order are refused with what to do.
    let garbled = file(
        "garbled",
        spread(500.0, 300.0, 100.0),
        spread(300.0, 340.0, 500.0),
    );
    let out = run(&[
        "residency",
        "--quick",
        &format!("--calibration={}", garbled.display()),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("llc_overhead") && err.contains("shmnet calibrate --json"),
        "{err}"
    );
    for f in [bad, good, garbled] {
        let _ = std::fs::remove_file(f);
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
    let out = run(&["residency", "--structure=server", "--switch=0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--switch puts a switch into the inline"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--switch`: one switch to the partner per message received, the switch's cost calibrated
/// and reported.
#[test]
fn a_switch_before_each_copy_out_is_counted_and_its_cost_calibrated() {
    let r = judged(&[
        "residency",
        "--messages=20",
        "--checksum",
        "--switch=65536",
        "--json",
    ]);
    check_run(&r, 20);
    let sw = &r["switch"];
    assert_eq!(sw["touch_bytes"], 65536, "{sw}");
    assert_eq!(sw["rounds"], 200, "{sw}");
    let (rt, one) = (
        sw["round_trip_ticks"].as_f64().unwrap(),
        sw["switch_ticks"].as_f64().unwrap(),
    );
    assert!(one > 0.0 && (rt - 2.0 * one).abs() < 1e-6, "{sw}");
    assert_eq!(r["switches"], r["messages"]["received"], "{r}");
    let without = judged(&["residency", "--messages=20", "--checksum", "--json"]);
    assert!(
        without["switch"].is_null() && without["switches"] == 0,
        "{without}"
    );
}

#[test]
fn a_recorded_trace_replays_on_the_seed_machine_at_the_seed_marks() {
    let trace = std::env::temp_dir().join(format!("shmnet-res-{}.trc", std::process::id()));
    let path = trace.to_str().unwrap();
    let r = judged(&[
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

/// `a` equals `b` but for rounding.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// A number field of `v`, which must be there.
fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// The mean of |x| over `xs`.
fn mean_abs(xs: &[f64]) -> f64 {
    xs.iter().map(|x| x.abs()).sum::<f64>() / xs.len() as f64
}

/// What `shmnet sim validate` says when a setting's in-cache load time, measured in the
/// run, is not above the timer's own overhead (a busy machine's noise): it has no baseline
/// to compare on and asks to be rerun.
const RERUN_WHEN_QUIETER: &str = "rerun when the machine is quieter";

/// Runs `shmnet sim validate --quick --json`, again (three runs at most) while it says
/// [`RERUN_WHEN_QUIETER`]: its JSON, or `None` if every run said so. That outcome is checked
/// for its shape — status 1, no JSON, one line naming the setting and what to do — and
/// any other failure fails the test.
fn validate_json() -> Option<Value> {
    const ARGS: [&str; 5] = ["sim", "validate", "--quick", "--json", "--skip-rows"];
    for attempt in 1..=3 {
        let out = run(&ARGS);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return Some(
                serde_json::from_str(stdout.trim())
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}")),
            );
        }
        assert!(
            stderr.contains(RERUN_WHEN_QUIETER),
            "shmnet {ARGS:?} failed ({}): {stderr}\n{stdout}",
            out.status
        );
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stdout.trim().is_empty(),
            "JSON of a run that failed: {stdout}"
        );
        let line = stderr.trim_end();
        assert_eq!(line.lines().count(), 1, "one line: {stderr}");
        assert!(line.starts_with("shmnet: validating "), "{stderr}");
        eprintln!("validate, run {attempt} of 3: {line}");
    }
    eprintln!(
        "NOTE: validation_sets_predicted_beside_measured: this machine was too busy for \
         `shmnet sim validate` three times running; its refusal was checked, its JSON was not"
    );
    None
}

/// Every row sets as many predicted buffers beside as many measured ones, on one baseline,
/// and every error in the JSON is the arithmetic of the JSON's own fields. Nothing here
/// bounds an error: how large it is, is a measurement.
#[test]
fn validation_sets_predicted_beside_measured() {
    let Some(all) = validate_json() else {
        return;
    };
    assert!(all["rows"].is_null(), "--skip-rows ran the rows: {all}");
    let v = &all["residency"];
    let rows = v["rows"].as_array().expect("rows");
    assert!(rows.len() >= 3, "at least three settings: {v}");
    let word = u(v, "word_bytes") as f64;
    for r in rows {
        assert!(r["setting"].is_string(), "{r}");
        assert!(u(r, "references") > 0, "{r}");
        // Up to 100 messages of ten buffers: the sender keeps its schedule, so a receiver
        // preempted for longer than a gap (a busy machine) drops one at a full queue.
        let buffers = u(r, "buffers");
        assert!(buffers > 0 && buffers <= 1000 && buffers % 10 == 0, "{r}");
        assert_eq!(
            u(r, "predicted_buffers"),
            u(r, "buffers"),
            "one simulated buffer per timed one: {r}"
        );
        for side in ["measured", "predicted"] {
            let pct = f(&r[side], "fully_cached_pct");
            assert!((0.0..=100.0).contains(&pct), "{r}");
            assert!(f(&r[side], "avg_overhead_ticks_per_word") >= 0.0, "{r}");
        }
        let (m, p) = (
            f(&r["measured"], "avg_overhead_ticks_per_word"),
            f(&r["predicted"], "avg_overhead_ticks_per_word"),
        );
        // Both load times: the same in-cache baseline plus each side's overhead.
        let words = u(r, "buffer_bytes") as f64 / word;
        let hot = f(r, "in_cache_ticks");
        assert!(hot > 0.0, "{r}");
        let (ml, pl) = (f(r, "measured_load_ticks"), f(r, "predicted_load_ticks"));
        assert!(same(ml, hot + m * words), "measured load: {r}");
        assert!(same(pl, hot + p * words), "predicted load: {r}");
        assert!(same(f(r, "load_rel_error"), (pl - ml) / ml), "{r}");
        assert!(same(f(r, "overhead_error_ticks"), (p - m) * words), "{r}");
        assert!(same(f(r, "overhead_error_ticks"), pl - ml), "{r}");
        // A relative error over a zero measured overhead is absent, never 0 %.
        let rel = &r["avg_overhead_rel_error"];
        if m > 0.0 {
            assert!(same(rel.as_f64().expect("a number"), (p - m) / m), "{r}");
        } else {
            assert!(rel.is_null(), "{r}");
        }
        assert!(
            same(
                f(r, "fully_cached_error_points"),
                f(&r["predicted"], "fully_cached_pct") - f(&r["measured"], "fully_cached_pct")
            ),
            "{r}"
        );
    }
    let col = |k: &str| -> Vec<f64> { rows.iter().map(|r| f(r, k)).collect() };
    assert!(
        same(
            f(v, "mean_abs_rel_error_load"),
            mean_abs(&col("load_rel_error"))
        ),
        "{v}"
    );
    assert!(
        same(
            f(v, "mean_abs_overhead_error_ticks"),
            mean_abs(&col("overhead_error_ticks"))
        ),
        "{v}"
    );
    assert!(
        same(
            f(v, "mean_abs_error_fully_cached_points"),
            mean_abs(&col("fully_cached_error_points"))
        ),
        "{v}"
    );
    let rels: Option<Vec<f64>> = rows
        .iter()
        .map(|r| r["avg_overhead_rel_error"].as_f64())
        .collect();
    match rels {
        Some(rels) => assert!(
            same(f(v, "mean_abs_rel_error_avg_overhead"), mean_abs(&rels)),
            "{v}"
        ),
        None => assert!(v["mean_abs_rel_error_avg_overhead"].is_null(), "{v}"),
    }
}

/// Seed 001's eight rows: each traced under lackey (its marked windows all found), timed,
/// and set beside its simulation; the checksum is work the trace sees on every row; every
/// error is the JSON's own arithmetic. Nothing bounds an error: its size is a measurement.
#[test]
fn validation_rows_set_simulated_beside_measured() {
    let test = "validation_rows_set_simulated_beside_measured";
    if !valgrind_or_skip(test) {
        return;
    }
    let v = json(&["sim", "validate", "--quick", "--skip-residency", "--json"]);
    assert!(v["residency"].is_null(), "--skip-residency ran it: {v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 8, "{v}");
    let traced = u(&v["steps"], "traced");
    let mut names = std::collections::HashSet::new();
    for r in rows {
        let name = format!(
            "{}-{}-{}",
            r["protocol"].as_str().expect("protocol"),
            r["direction"].as_str().expect("direction"),
            r["checksum"].as_bool().expect("checksum")
        );
        assert!(names.insert(name.clone()), "{name} twice: {v}");
        assert_eq!(u(r, "windows"), traced, "every traced step found: {r}");
        assert!(f(r, "instructions") > 100.0, "{r}");
        assert!(f(r, "data_refs") > 0.0, "{r}");
        assert!(f(r, "measured") > 0.0, "{r}");
        assert!(f(r, "measured_p25") <= f(r, "measured_p75"), "{r}");
        let (m, s) = (f(r, "measured"), f(r, "simulated"));
        assert!(same(f(r, "error_pct"), 100.0 * (s - m) / m), "{r}");
        assert!(
            same(
                f(r, "in_order_error_pct"),
                100.0 * (f(r, "in_order") - m) / m
            ),
            "{r}"
        );
        assert!(
            same(
                s,
                f(r, "fit_ticks_per_instruction") * f(r, "instructions")
                    + f(r, "fit_ticks_per_store") * f(r, "data_writes")
                    + f(r, "fit_stall_share") * f(r, "stall_ticks")
            ),
            "{r}"
        );
        for coef in [
            "fit_ticks_per_instruction",
            "fit_ticks_per_store",
            "fit_stall_share",
        ] {
            assert!(f(r, coef) >= 0.0, "{coef}: {r}");
        }
        assert!(f(r, "stall_ticks") <= f(r, "in_order"), "{r}");
    }
    for proto in ["tcp", "udp"] {
        for dir in ["send", "recv"] {
            let instr = |on: bool| {
                rows.iter()
                    .find(|r| {
                        r["protocol"] == proto && r["direction"] == dir && r["checksum"] == on
                    })
                    .map(|r| f(r, "instructions"))
                    .expect("the row")
            };
            assert!(
                instr(true) > instr(false),
                "{proto} {dir}: the checksum is work the trace must see: {v}"
            );
        }
    }
    for r in rows {
        assert!(f(r, "data_writes") <= f(r, "data_refs"), "{r}");
    }
    // The empty window is timed in the rounds, and the probe's rate is reported with the
    // core clock it needs.
    assert!(f(&v["contention"], "empty_window_ticks") > 0.0, "{v}");
    assert_eq!(
        v["probe_adds_per_cycle"].is_null(),
        v["core_cycles_per_tick"].is_null(),
        "{v}"
    );
    let errs: Vec<f64> = rows.iter().map(|r| f(r, "error_pct")).collect();
    assert!(same(f(&v, "mean_abs_error_pct"), mean_abs(&errs)), "{v}");
}

/// The memory signature: every cell of the grid measured and simulated, and the simulated
/// cost of a read never falls as the working set grows at one stride (LRU caches read in
/// passes: once a set no longer fits a level, every pass misses it there). Nothing bounds a
/// measured figure or its ratio to the simulated one.
#[test]
fn memory_signature_measures_and_simulates_every_cell() {
    let v = json(&["sim", "signature", "--quick", "--json"]);
    let sizes: Vec<u64> = v["sizes"]
        .as_array()
        .expect("sizes")
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    let strides: Vec<u64> = v["strides"]
        .as_array()
        .expect("strides")
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    let cells = v["cells"].as_array().expect("cells");
    let want = sizes
        .iter()
        .map(|&s| strides.iter().filter(|&&t| t <= s).count())
        .sum::<usize>();
    assert_eq!(cells.len(), want, "{v}");
    for &stride in &strides {
        let mut last = 0.0;
        for &size in sizes.iter().filter(|&&s| s >= stride) {
            let c = cells
                .iter()
                .find(|c| u(c, "size_bytes") == size && u(c, "stride_bytes") == stride)
                .unwrap_or_else(|| panic!("no cell {size} at {stride}: {v}"));
            for k in ["chase_ticks", "stream_ticks", "simulated_ticks"] {
                assert!(f(c, k).is_finite() && f(c, k) > 0.0, "{k}: {c}");
            }
            let sim = f(c, "simulated_ticks");
            assert!(
                sim >= last - 1e-9,
                "simulated cost fell as the set grew: {c} after {last}"
            );
            last = sim;
        }
    }
}

/// Seed 001's breakdowns: on the seed's machine a perfect cache never costs more than the
/// real one and an ideal one never more than either (LRU is a stack algorithm: taking
/// references away never adds misses), waiting for memory is what the ideal cache saves,
/// and every traced instruction is found in its file and decoded into the mix.
#[test]
fn breakdown_sets_perfect_and_ideal_caches_beside_the_machine() {
    let test = "breakdown_sets_perfect_and_ideal_caches_beside_the_machine";
    if !valgrind_or_skip(test) {
        return;
    }
    // Two rows (one of each protocol and direction) keep the test short; `--row` is how.
    let v = json(&[
        "sim",
        "breakdown",
        "--quick",
        "--row",
        "tcp-send-cksum-on",
        "--row",
        "udp-recv-cksum-off",
        "--json",
    ]);
    assert_eq!(v["machine"], "sgi-r4400-1994", "{v}");
    let rows = v["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().map(|r| r["row"].as_str().unwrap()).collect();
    assert_eq!(names, ["tcp-send-cksum-on", "udp-recv-cksum-off"], "{v}");
    for r in rows {
        let (base, pi, pd, ideal) = (
            f(r, "ticks"),
            f(r, "perfect_icache_ticks"),
            f(r, "perfect_dcache_ticks"),
            f(r, "ideal_ticks"),
        );
        let tol = 1e-6 * base;
        assert!(ideal > 0.0 && ideal <= pi + tol && pi <= base + tol, "{r}");
        assert!(ideal <= pd + tol && pd <= base + tol, "{r}");
        assert!(
            same(f(r, "memory_pct"), 100.0 * (base - ideal) / base),
            "{r}"
        );
        for k in ["l1i_miss_rate", "l1d_miss_rate"] {
            assert!((0.0..=1.0).contains(&f(r, k)), "{k}: {r}");
        }
        let mix = r["mix"].as_array().expect("mix");
        let total: f64 = mix.iter().map(|m| f(m, "pct_instructions")).sum();
        assert!(
            (total - 100.0).abs() < 1e-6,
            "the mix covers every instruction: {r}"
        );
        let time: f64 = mix.iter().map(|m| f(m, "pct_ticks")).sum();
        assert!((time - 100.0).abs() < 1e-6, "and all the time: {r}");
        let unknown = mix
            .iter()
            .find(|m| m["class"] == "unknown")
            .map_or(0.0, |m| f(m, "pct_instructions"));
        assert!(unknown < 1.0, "instructions not found or not decoded: {r}");
        for class in ["load-store", "arithmetic", "control"] {
            let m = mix.iter().find(|m| m["class"] == class).expect(class);
            assert!(f(m, "pct_instructions") > 0.0, "{class}: {r}");
        }
    }
}

/// Seed 001's sweeps on the eight rows: every configuration reported for every row, and at
/// one associativity a larger first level never costs a row more (LRU keeps what a smaller
/// set-refinement keeps; 1 % allowed for the unified second level seeing other victims).
#[test]
fn row_sweep_covers_the_grid_and_larger_caches_never_cost_more() {
    let test = "row_sweep_covers_the_grid_and_larger_caches_never_cost_more";
    if !valgrind_or_skip(test) {
        return;
    }
    let v = json(&[
        "sim",
        "row-sweep",
        "--quick",
        "--l1-size",
        "8K,64K",
        "--l1-assoc",
        "1,4",
        "--json",
        "--row",
        "tcp-recv-cksum-off",
        "--row",
        "udp-send-cksum-on",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{v}");
    // A row that does not exist is refused before anything is traced, naming the rows.
    let out = run(&["sim", "row-sweep", "--row", "tcp-send", "--quick"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a row") && err.contains("udp-recv-cksum-on"),
        "{err}"
    );
    for r in rows {
        let cells = r["cells"].as_array().expect("cells");
        assert_eq!(cells.len(), 4, "{r}");
        let at = |size: u64, ways: u64| {
            let c = cells
                .iter()
                .find(|c| u(c, "l1_bytes") == size && u(c, "l1_ways") == ways)
                .unwrap_or_else(|| panic!("no {size} {ways}-way: {r}"));
            (f(c, "ticks"), f(c, "memory_pct"))
        };
        for ways in [1, 4] {
            let (small, _) = at(8 << 10, ways);
            let (big, _) = at(64 << 10, ways);
            assert!(big > 0.0 && big <= small * 1.01, "{ways}-way: {r}");
        }
    }
}

/// Whether valgrind is here (the rows are traced with its lackey); if not, `test` is skipped
/// loudly (a failure under CI=true).
fn valgrind_or_skip(test: &str) -> bool {
    let here = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok();
    if !here {
        shmnet_testkit::skip(
            test,
            "valgrind is not installed (scripts/setup installs it)",
        );
    }
    here
}
