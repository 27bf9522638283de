//! `routeplex bench idle` end to end: one VR on memif ports with this binary's clients. Checks
//! the JSON contract (the first mode and the floor in interleaved pairs) and that every single
//! frame came back, not the figures.

use std::process::Command;

#[test]
fn reports_idle_cpu_and_wake_latency_per_mode() {
    let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["bench", "idle", "--seconds", "0.2", "--samples", "5", "--pairs", "2"])
        .args(["--modes", "adaptive,poll"])
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
    // The ratio is the median of the pairs' (rounding aside), each pair's its two p99s', and
    // the verdict follows from it.
    let pairs = j["pairs"]["pairs"].as_array().expect("the pairs");
    assert_eq!(pairs.len(), 2, "{j}");
    for p in pairs {
        let (a, b, r) = (p["a"].as_f64().unwrap(), p["b"].as_f64().unwrap(), p["ratio"].as_f64());
        assert_eq!(r, Some(a / b), "{p}");
        assert!(p["a_probes"]["memory_ns_per_read"].as_f64().unwrap() > 0.0, "{p}");
    }
    let median = j["pairs"]["ratio"]["median"].as_f64().expect("the pairs' median ratio");
    let ratio = j["wake_p99_over_floor_p99"].as_f64().expect("a numeric ratio");
    assert!((ratio - median).abs() <= 0.006, "{ratio} vs the pairs' {median}: {j}");
    assert_eq!(j["goals"]["wake_over_floor_met"].as_bool(), Some(ratio <= 2.0), "{j}");
    assert_eq!(j["mode"], "adaptive", "{j}");
    assert!(j["limited_by"].is_string() && j["method"].is_string(), "{j}");
    let modes = j["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 2, "{j}");
    // The first mode's samples are those of both its trials; poll ran once.
    for (m, n) in modes.iter().zip([10, 5]) {
        assert_eq!((m["samples"].as_u64(), m["lost"].as_u64()), (Some(n), Some(0)), "{m}");
    }
    assert_eq!(j["poll"]["mode"], "poll", "{j}");
    assert_eq!(j["poll"]["sleeps_per_s"].as_f64(), Some(0.0), "poll mode never sleeps: {j}");
}
