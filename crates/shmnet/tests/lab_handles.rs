//! `shmnet lab handles` (seed 004) end to end: the sweep's 36 configurations for every
//! workload with both set indexes, the live cache and the simulator agreeing on every one,
//! the miss penalty timed for each line size, the ping-pong of Fig. 4 through a live server,
//! Fig. 6's and Fig. 3's rows, and the report on disk. No timing is asserted.

mod common;

use common::{json, u};

#[test]
fn lab_handles_sweeps_times_and_reports() {
    let out = std::env::temp_dir().join(format!("shmnet-lab-handles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let v = json(&[
        "lab",
        "handles",
        "--quick",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let sweep = v["sweep"].as_array().expect("sweep");
    assert_eq!(
        sweep.len(),
        5 * 36 * 2,
        "five workloads, Table III, two set indexes"
    );
    assert_eq!(u(&v, "sim_checked"), 360);
    assert_eq!(
        u(&v, "sim_agreed"),
        360,
        "the live cache and the simulator disagree"
    );
    for r in sweep {
        let refs = u(r, "send_refs") + u(r, "recv_refs");
        let misses =
            u(r, "send_cold") + u(r, "send_noncold") + u(r, "recv_cold") + u(r, "recv_noncold");
        assert!(misses <= refs && misses == u(r, "sim_misses"), "{r}");
        assert!(
            u(r, "send_cold") + u(r, "recv_cold") > 0,
            "a first reference is cold: {r}"
        );
    }
    let pen = v["penalty"].as_array().expect("penalty");
    let lines: Vec<u64> = pen.iter().map(|p| u(p, "line")).collect();
    assert_eq!(lines, [8, 64, 128]);
    for p in pen {
        assert_eq!(u(&p["processing_us"], "count"), 200, "{p}");
        assert!(
            p["processing_us"]["p50"].as_f64().is_some_and(|x| x > 0.0),
            "{p}"
        );
    }
    let mem = v["memory"].as_array().expect("memory");
    assert_eq!(mem.len(), 9);
    for m in mem {
        assert_eq!(
            u(m, "full_table_bytes"),
            u(m, "apps") * u(m, "registered_per_app") / 4096 * 8,
            "{m}"
        );
    }
    assert!(v["lookup"]["rows"].as_array().is_some_and(|r| r.len() == 5));
    // Fig. 4: both policies × 2 sizes × 3 shares of cold pings, every ping answered; a cold
    // ping misses at least once, and a share of 0 after the warm-up misses (almost) never.
    let pp = v["pingpong"].as_array().expect("pingpong");
    assert_eq!(pp.len(), 2 * 2 * 3, "{pp:?}");
    for p in pp {
        assert_eq!(u(p, "round_trips"), 200, "{p}");
        let cold = p["cold_fraction"].as_f64().unwrap();
        let per_ping = p["misses_per_ping"].as_f64().unwrap();
        assert!(per_ping >= cold - 1e-9, "{p}");
        assert!(p["rtt_p50_us"].as_f64().is_some_and(|x| x > 0.0), "{p}");
    }
    // Fig. 6: every skewed-index configuration of every workload.
    assert_eq!(v["throughput"].as_array().map(Vec::len), Some(5 * 36));
    assert_eq!(v["missing"].as_array().map(Vec::len), Some(0));
    // Table III on shmnet's own runs: three recorded traces through both indexes' 36
    // configurations, live cache and simulator agreeing; every recorded run translated.
    let own = v["own_traces"].as_array().expect("own_traces");
    assert_eq!(own.len(), 3 * 36 * 2);
    assert!(own.iter().all(|r| r["agree"] == true), "{own:?}");
    for t in v["own_trace_info"].as_array().expect("own_trace_info") {
        assert!(u(t, "refs") > 1000 && u(t, "apps") >= 2, "{t}");
        assert_eq!(u(t, "dropped"), 0, "{t}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(report.contains("360 of 360"), "{report}");
    assert!(report.contains("## Fig. 4") && report.contains("## Fig. 6"));
    assert!(out.join("report.json").exists());
    assert!(out.join("fig4-pingpong.png").exists());
    let _ = std::fs::remove_dir_all(&out);
}
