//! `routeplex bench routes` end to end: churn through control while the VR forwards. Checks
//! the JSON contract and that the published FIB equals the RIB afterwards, not the speed.

use std::process::Command;

#[test]
fn churn_leaves_the_fib_equal_to_the_rib_and_says_what_limited_it() {
    let dir = std::env::temp_dir().join(format!("rpx-bench-routes-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = super::bench_router::prefixes(&dir);
    // Shorter prefixes over the /24s, so that a change recompiles slots under a covering route.
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("10.0.0.0/8 3\n10.2.0.0/16 5\n");
    std::fs::write(&file, text).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["bench", "routes", "--batch", "200", "--seconds", "0.3", "--pairs", "1", "--json"])
        .arg("--prefixes")
        .arg(&file)
        .output()
        .expect("run routeplex bench routes");
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "failed: {}{out}", String::from_utf8_lossy(&o.stderr));
    let line = out.lines().rev().find(|l| l.starts_with('{')).expect("a JSON line");
    let j: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(j["mismatches"], 0, "{j}");
    assert!(j["checked"].as_u64().unwrap() >= 2 * 1026, "{j}");
    assert_eq!(j["routes"], 1026, "every withdrawn prefix is back: {j}");
    assert!(j["updates"].as_u64().unwrap() > 0, "{j}");
    assert!(j["updates_per_cpu_sec"].as_f64().unwrap() > 0.0, "{j}");
    let share = &j["generator_cpu_share"];
    assert!(share["before"].as_f64().unwrap() > 0.0 && share["during"].is_f64(), "{j}");
    assert!(j["limited_by"].as_str().is_some_and(|l| !l.is_empty()), "{j}");
    let threads = j["placement"]["threads"].as_array().expect("placement");
    assert!(threads.iter().any(|t| t["role"] == "worker (forwarding)"), "{j}");
}
