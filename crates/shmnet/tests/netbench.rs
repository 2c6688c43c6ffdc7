//! `shmnet ttcp` and `shmnet rr` keep their own books: every message a cell sends is counted
//! as received, or as lost in a named place. These run the real commands (every structure,
//! its parties as processes) on small counts; they assert bookkeeping, never speed.

mod common;

use common::{json as shmnet, run, run_on_cpu, u};
use serde_json::Value;

/// sent = received + lost, and the loss counters account for every lost message.
fn check_books(row: &Value, sent_field: &str) {
    let (sent, received, lost) = (u(row, sent_field), u(row, "received"), u(row, "lost"));
    assert_eq!(sent, received + lost, "{row}");
    assert_eq!(u(row, "unaccounted"), 0, "a loss no counter names: {row}");
    if lost > 0 {
        let counted: u64 = row["lost_where"]
            .as_object()
            .expect("lost_where")
            .values()
            .filter_map(Value::as_u64)
            .sum();
        assert!(counted >= lost, "{row}");
    }
}

/// CPU per party: the server structure in each placement reports the server loop, and the
/// driver as a party of its own only where it is one (a thread or a process; a driver polled
/// by the server is the server's work).
fn check_party_split(rows: &[Value], field: &str) {
    for r in rows {
        let parties = r[field]
            .as_object()
            .unwrap_or_else(|| panic!("{field} in {r}"));
        let has = |k: &str| parties.contains_key(k);
        match r["structure"].as_str().expect("structure") {
            "server" | "server-regions" => assert!(has("server") && !has("driver"), "{r}"),
            "server-thread" | "server-process" | "ipc" => {
                assert!(has("server") && has("driver"), "{r}")
            }
            "kernel" | "inline" => assert!(!has("driver"), "{r}"),
            other => panic!("unknown structure {other}: {r}"),
        }
    }
}

#[test]
fn ttcp_runs_every_cell_and_every_message_sent_is_received() {
    let v = shmnet(&["ttcp", "--quick", "--count", "3000", "--json"]);
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(
        rows.len(),
        7 * 4 * 2,
        "7 structures (server in 3 placements and isolated) × 4 sizes × 2 directions"
    );
    for r in rows {
        for k in [
            "structure",
            "size",
            "dir",
            "msgs_per_s",
            "gbit_per_s",
            "cpu_s_per_msg",
            "lost",
        ] {
            assert!(!r[k].is_null(), "{k} missing in {r}");
        }
        check_books(r, "sent");
        // With the window on, nothing is lost: every queue on the way holds the window.
        assert_eq!(u(r, "sent"), 3000, "{r}");
        assert_eq!(u(r, "lost"), 0, "{r}");
        assert!(r["cpu_s_per_msg"].as_f64().unwrap() > 0.0, "{r}");
    }
    check_party_split(rows, "cpu_us_per_msg_by_party");
    let memcpy = v["memcpy"].as_array().expect("memcpy");
    assert_eq!(memcpy.len(), 4);
    assert!(!v["targets"].as_array().expect("targets").is_empty());
    // The hand-off probe ran at every size, and every row is set against it.
    let handoff = v["handoff"]["sizes"].as_array().expect("handoff sizes");
    assert_eq!(handoff.len(), 4, "{v}");
    assert_eq!(u(&v["handoff"], "wrong_messages"), 0, "{v}");
    let two_cpus = v["handoff"]["cpus"][0] != v["handoff"]["cpus"][1];
    for r in rows {
        for k in ["handoff_gbit_per_s", "handoff_msgs_per_s", "over_handoff"] {
            assert!(r[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {r}");
        }
        // The server's receive cells get their own probes, just before and after them (where
        // there are two CPUs to probe).
        let paired = r["structure"] == "server" && r["dir"] == "rx" && two_cpus;
        assert_eq!(r["handoff_adjacent"].as_bool(), Some(paired), "{r}");
        // The placement is measured around every cell where there are two CPUs (a stalled
        // round trip, on a busy machine, leaves it unmeasured and the cell unstable).
        let rtts = ["core_rtt_ns_before", "core_rtt_ns_after"].map(|k| r[k].as_f64());
        if r["placement_stable"].as_bool() == Some(true) {
            assert!(
                two_cpus && rtts.iter().all(|t| t.is_some_and(|t| t > 0.0)),
                "{r}"
            );
        }
    }
    // A target is met only where it is judged.
    for t in v["targets"].as_array().expect("targets") {
        let judged = t["judged"].as_bool().expect("judged");
        if !judged {
            assert_eq!(t["met"].as_bool(), Some(false), "{t}");
        }
    }
    check_gap_measure(rows);
}

/// Seed 002's gap measure: where a row has one, it is `(this − ipc) ÷ (kernel − ipc)` of the
/// same run's cells at its size and direction; where it has none, ipc and the kernel are
/// within 10 % of each other.
fn check_gap_measure(rows: &[Value]) {
    let gbit = |st: &str, r: &Value| {
        rows.iter()
            .find(|x| x["structure"] == st && x["size"] == r["size"] && x["dir"] == r["dir"])
            .and_then(|x| x["gbit_per_s"].as_f64())
            .unwrap_or_else(|| panic!("no {st} cell beside {r}"))
    };
    for r in rows {
        let (k, i) = (gbit("kernel", r), gbit("ipc", r));
        let this = r["gbit_per_s"].as_f64().expect("gbit_per_s");
        match r["gap_recovered"].as_f64() {
            Some(g) => {
                let want = (this - i) / (k - i);
                assert!(
                    (g - want).abs() <= 1e-9 * want.abs().max(1.0),
                    "{g} vs {want}: {r}"
                );
            }
            None => assert!((k - i).abs() <= 0.1 * k.max(i), "no gap measure: {r}"),
        }
    }
}

/// Seed 002's uniprocessor: every party on one CPU (the affinity every process inherits).
/// The cells run and keep their books, nothing claims a cross-core placement, and no
/// target is judged.
#[test]
fn ttcp_on_one_cpu_runs_every_party_there() {
    let out = run_on_cpu(
        0,
        &[
            "ttcp",
            "--quick",
            "--count",
            "2000",
            "--structure",
            "kernel,ipc,server,inline",
            "--size",
            "10,8192",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4 * 2 * 2, "{v}");
    for r in rows {
        check_books(r, "sent");
        assert!(
            r["core_rtt_ns_before"].is_null(),
            "one CPU has no round trip: {r}"
        );
        assert_eq!(r["placement_stable"].as_bool(), Some(false), "{r}");
        assert_eq!(r["handoff_adjacent"].as_bool(), Some(false), "{r}");
    }
    assert_eq!(v["handoff"]["cpus"][0], v["handoff"]["cpus"][1], "{v}");
    for t in v["targets"].as_array().expect("targets") {
        assert_eq!(t["judged"].as_bool(), Some(false), "{t}");
    }
    check_gap_measure(rows);
}

/// The hand-off probe's JSON: every size with positive figures, the CPUs it ran on, and no
/// message delivered wrong.
#[test]
fn bench_handoff_reports_every_size() {
    let v = shmnet(&["bench", "handoff", "--quick", "--json"]);
    let sizes = v["sizes"].as_array().expect("sizes");
    let want = [10, 1024, 8192, 14_792];
    assert_eq!(sizes.len(), want.len(), "{v}");
    for (s, size) in sizes.iter().zip(want) {
        assert_eq!(u(s, "size"), size, "{s}");
        assert!(u(s, "buffers_per_msg") >= 1, "{s}");
        for k in ["msgs_per_s", "gbit_per_s"] {
            assert!(s[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {s}");
        }
    }
    let cpus = v["cpus"].as_array().expect("cpus");
    assert_eq!(cpus.len(), 2, "{v}");
    let shared = v["shared_cpu"].as_bool().expect("shared_cpu");
    assert_eq!(shared, cpus[0] == cpus[1], "{v}");
    assert_eq!(u(&v, "wrong_messages"), 0, "{v}");
    if !shared {
        for k in ["core_rtt_ns_before", "core_rtt_ns_after"] {
            assert!(
                v[k].is_null() || v[k].as_f64().is_some_and(|x| x > 0.0),
                "{k} in {v}"
            );
        }
    }
}

/// The handle-lookup benchmark's JSON: a row per associativity, each with positive figures
/// for the lookup and its baseline, and a verdict on the A = 4 target.
#[test]
fn bench_handles_reports_every_associativity() {
    let v = shmnet(&["bench", "handles", "--quick", "--json"]);
    assert!(v["error"].is_null(), "{v}");
    let rows = v["rows"].as_array().expect("rows");
    let ways: Vec<(u64, &str)> = rows
        .iter()
        .map(|r| (u(r, "ways"), r["index"].as_str().unwrap_or("?")))
        .collect();
    assert_eq!(
        ways,
        [
            (1, "skewed"),
            (2, "skewed"),
            (4, "skewed"),
            (8, "skewed"),
            (4, "low_bits")
        ],
        "{v}"
    );
    for r in rows {
        for k in ["lookup_ns", "bounds_ns"] {
            assert!(r[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {r}");
        }
        assert!(u(r, "cache_bytes") > 0, "{r}");
    }
    assert!(v["target_met"].is_boolean(), "{v}");
    assert!(u(&v, "handles") > 0, "{v}");
}

#[test]
fn ttcp_without_a_window_names_the_place_of_every_loss() {
    let v = shmnet(&[
        "ttcp",
        "--structure",
        "kernel,server,inline",
        "--size",
        "10",
        "--dir",
        "rx",
        "--window",
        "0",
        "--count",
        "200000",
        "--json",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{v}");
    for r in rows {
        check_books(r, "sent");
        assert!(u(r, "received") > 0, "{r}");
    }
}

/// A run for a time stops its sender mid-stream; the counts are read only once the sender
/// has published its final one and what it sent has arrived, so nothing looks lost that was
/// not (the inline sender, say, publishes `sent` once per batch of 32).
#[test]
fn ttcp_for_a_time_settles_its_counts_before_reading_them() {
    let v = shmnet(&[
        "ttcp",
        "--quick",
        "--seconds",
        "0.3",
        "--size",
        "10,14792",
        "--json",
    ]);
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(
        rows.len(),
        7 * 2 * 2,
        "7 structures × 2 sizes × 2 directions"
    );
    for r in rows {
        check_books(r, "sent");
        assert!(u(r, "sent") > 0, "{r}");
    }
}

/// Every structure's requester is an application timing its own transactions over a
/// loopback wire (the kernel's `lo`, a loopback softnic for shmnet).
#[test]
fn rr_times_every_transaction_and_loses_none() {
    let v = shmnet(&["rr", "--quick", "--count", "2000", "--json"]);
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 7 * 2, "7 structures × (1 and 16 in flight)");
    for r in rows {
        check_books(r, "sent");
        assert_eq!(u(r, "lost"), 0, "{r}");
        assert_eq!(u(r, "samples"), u(r, "received"), "every reply timed: {r}");
        let (p50, p99) = (r["p50_us"].as_f64().unwrap(), r["p99_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{r}");
        // A stable placement was measured on both sides of the cell.
        if r["placement_stable"].as_bool() == Some(true) {
            for k in ["core_rtt_ns_before", "core_rtt_ns_after"] {
                assert!(r[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {r}");
            }
        }
    }
    check_party_split(rows, "cpu_us_per_txn_by_party");
    // A target is met only where it is judged.
    for t in v["targets"].as_array().expect("targets") {
        if t["judged"].as_bool() == Some(false) {
            assert_eq!(t["met"].as_bool(), Some(false), "{t}");
        }
    }
}

#[test]
fn bad_arguments_are_refused_with_a_hint() {
    for (args, hint) in [
        (
            &["ttcp", "--structure", "kernal"][..],
            "use kernel, ipc, server, server-thread, server-process, server-faithful, server-regions or inline",
        ),
        (&["ttcp", "--size", "70000"][..], "1 to 65,507"),
        (&["rr", "--outstanding", "0"][..], "1 to 128"),
        (&["rr", "--outstanding", "129"][..], "loopback wire holds"),
        (&["bench", "handoff", "--size", "0"][..], "1 to 65,507"),
    ] {
        let out = run(args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(hint), "{args:?}: {err}");
    }
}
