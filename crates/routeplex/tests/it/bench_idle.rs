//! `routeplex bench idle` end to end: one VR on memif ports with this binary's clients. Checks
//! the JSON contract and that every single frame came back, not the figures.

use std::process::Command;

#[test]
fn reports_idle_cpu_and_wake_latency_per_mode() {
    let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["bench", "idle", "--seconds", "0.2", "--samples", "5", "--modes", "adaptive,poll"])
        .arg("--json")
        .output()
        .expect("run routeplex bench idle");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "failed: {}{out}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    for key in ["idle_cpu_percent", "wake_p50_us", "wake_p99_us", "wake_floor_p50_us"] {
        assert!(j[key].is_number(), "no numeric {key:?} in {j}");
    }
    // The ratio is the two p99s' (rounding aside), and the verdict follows from it.
    let (p99, floor99) =
        (j["wake_p99_us"].as_f64().unwrap(), j["wake_floor_p99_us"].as_f64().unwrap());
    let ratio = j["wake_p99_over_floor_p99"].as_f64().expect("a numeric ratio");
    assert!(
        (ratio - p99 / floor99).abs() <= 0.01 * ratio + 0.01,
        "{ratio} vs {p99}/{floor99}: {j}"
    );
    assert_eq!(j["goals"]["wake_over_floor_met"].as_bool(), Some(ratio <= 2.0), "{j}");
    assert_eq!(j["mode"], "adaptive", "{j}");
    assert!(j["limited_by"].is_string() && j["method"].is_string(), "{j}");
    let modes = j["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 2, "{j}");
    for m in modes {
        assert_eq!((m["samples"].as_u64(), m["lost"].as_u64()), (Some(5), Some(0)), "{m}");
    }
    assert_eq!(j["poll"]["mode"], "poll", "{j}");
    assert_eq!(j["poll"]["sleeps_per_s"].as_f64(), Some(0.0), "poll mode never sleeps: {j}");
}
