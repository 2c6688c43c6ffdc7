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
    }
    for k in ["c_br", "c_bw", "c_cr", "c_cw", "c_fl", "cl_total", "c_way"] {
        let x = v["params"][k].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x >= 0.0, "params.{k}: {}", v["params"]);
    }
    assert_eq!(v["unity"]["c_br"], 22.0, "the seed's parameters");
    let verdicts = v["verdicts"].as_array().expect("verdicts");
    assert_eq!(
        verdicts.len(),
        6,
        "two directions × measured, model here, model on Unity"
    );
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
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for needle in [
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
