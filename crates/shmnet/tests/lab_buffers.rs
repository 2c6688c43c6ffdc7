//! `shmnet lab buffers` (seed 003) end to end: every cell of Fig. 1 measured and modelled
//! (both directions, four methods, ten lengths, five dirty ratios), the seed's machine
//! modelled beside, the verdicts, and the report, figures and JSON on disk. No timing is
//! asserted: which method is cheapest is this machine's answer, not the test's.

mod common;

use common::{json, u};

#[test]
fn lab_buffers_measures_models_and_reports_every_cell() {
    let out = std::env::temp_dir().join(format!("shmnet-lab-buffers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let v = json(&[
        "lab",
        "buffers",
        "--quick",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let cells = v["cells"].as_array().expect("cells");
    assert_eq!(
        cells.len(),
        2 * 4 * 10 * 5,
        "directions × methods × lengths × dirty ratios"
    );
    for c in cells {
        for k in ["ticks", "ticks_p25", "ticks_p75", "predicted_ticks"] {
            let x = c[k].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x >= 0.0, "{k} in {c}");
        }
        assert!(c["ticks_p25"].as_f64() <= c["ticks_p75"].as_f64(), "{c}");
        let mode = c["mode"].as_str().expect("mode");
        assert!(["ch", "ch-all", "cs", "nc"].contains(&mode), "{c}");
        // The seed's machine had no per-line clean: its ch is not modelled.
        let unity = c["unity_cycles"].as_f64();
        assert_eq!(
            unity.is_none() || unity.is_some_and(f64::is_nan),
            mode == "ch",
            "{c}"
        );
        assert!(["send", "receive"].contains(&c["direction"].as_str().unwrap()));
        let sim = c["simulated_unity_cycles"].as_f64().unwrap_or(f64::NAN);
        assert!(
            sim.is_finite() && sim > 0.0,
            "simulated_unity_cycles in {c}"
        );
    }
    for k in ["c_br", "c_bw", "c_cr", "c_cw", "c_fl", "cl_total", "c_way"] {
        let x = v["params"][k].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x >= 0.0, "params.{k}: {}", v["params"]);
    }
    assert_eq!(v["unity"]["c_br"], 22.0, "the seed's parameters");
    let verdicts = v["verdicts"].as_array().expect("verdicts");
    assert_eq!(
        verdicts.len(),
        8,
        "two directions × measured, model here, model on Unity, simulated Unity"
    );
    assert!(v["unity_sim_error"].is_null(), "{}", v["unity_sim_error"]);
    for x in verdicts {
        assert!(x["nc_cheapest"].as_u64() <= x["cells"].as_u64(), "{x}");
        assert_eq!(u(x, "cells"), 50);
    }
    let pollution = v["pollution"].as_array().expect("pollution");
    assert_eq!(
        pollution.len(),
        3 * 2 * 4,
        "three working sets × directions × methods"
    );
    for p in pollution {
        for k in [
            "ticks_per_line",
            "baseline_ticks_per_line",
            "added_ticks_per_line",
        ] {
            assert!(p[k].as_f64().is_some_and(f64::is_finite), "{k} in {p}");
        }
    }
    // auto beside each fixed method and the per-cell best: per direction, the four
    // methods, auto and best; nothing beats the best.
    let auto = v["auto"].as_array().expect("auto");
    assert_eq!(auto.len(), 2 * 6, "{auto:?}");
    for a in auto {
        let r = a["vs_best"].as_f64().unwrap_or(f64::NAN);
        assert!(r.is_finite() && r >= 1.0 - 1e-9, "{a}");
        assert!(u(a, "cheapest_cells") <= 50, "{a}");
    }
    // Fig. 2 and 3 analogs: every configuration at every size moved every byte, and the
    // baseline divides itself to 1.
    let stream = v["tcp"]["stream"].as_array().expect("tcp.stream");
    let rr = v["tcp"]["rr"].as_array().expect("tcp.rr");
    assert_eq!(stream.len(), 6 * 6, "sizes × configurations");
    assert_eq!(rr.len(), 5 * 6, "size pairs × configurations");
    for row in stream.iter().chain(rr) {
        assert_eq!(row["verified"], true, "{row}");
        let rate = row["gbit_per_s"].as_f64().or(row["per_s"].as_f64());
        assert!(rate.is_some_and(|x| x.is_finite() && x > 0.0), "{row}");
        if row["buffers"] == "ch-all/ch-all" {
            assert!(
                (row["vs_ch_all"].as_f64().unwrap() - 1.0).abs() < 1e-9,
                "{row}"
            );
        }
    }
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for needle in [
        "Fig. 2 analog",
        "Fig. 3 analog",
        "`auto`",
        "Fig. 1 analog, send",
        "Fig. 1 analog, receive",
        "C_br",
        "Unity",
        "cheapest",
    ] {
        assert!(report.contains(needle), "report.md lacks {needle}");
    }
    assert!(out.join("report.json").exists());
    for f in ["fig1-send.png", "fig1-receive.png"] {
        let png = std::fs::read(out.join(f)).unwrap_or_default();
        assert!(png.starts_with(b"\x89PNG"), "{f} is not a PNG");
    }
    let _ = std::fs::remove_dir_all(&out);
}
