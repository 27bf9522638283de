//! `routeplex bench fib` and `bench pipeline` without a baseline: one run, which prints the
//! memory and compute probes timed before and after it, so that a figure from a slow-memory
//! minute is seen as such. Checks the JSON contract, not the speed.

use std::process::Command;

fn run(args: &[&str]) -> serde_json::Value {
    let dir =
        std::env::temp_dir().join(format!("rpx-bench-single-{}-{}", args[0], std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = crate::bench_router::prefixes(&dir);
    let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .arg("bench")
        .args(args)
        .arg("--prefixes")
        .arg(&file)
        .arg("--json")
        .output()
        .expect("run routeplex bench");
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{args:?} failed: {}{out}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn probes_around_the_run(j: &serde_json::Value) {
    for when in ["before", "after"] {
        let p = &j["probes"][when];
        for k in ["memory_ns_per_read", "compute_ns_per_step"] {
            assert!(p[k].as_f64().is_some_and(|v| v > 0.0), "probes.{when}.{k}: {j}");
        }
    }
}

#[test]
fn fib_prints_its_lookups_and_the_probes() {
    let j = run(&["fib", "--addresses", "4096", "--rounds", "2"]);
    assert!(j["lookups_per_sec"].as_f64().is_some_and(|v| v > 0.0), "{j}");
    assert_eq!(j["mismatches"], 0, "{j}");
    probes_around_the_run(&j);
}

#[test]
fn pipeline_prints_its_rate_and_the_probes() {
    let j = run(&["pipeline", "--packets", "100000"]);
    assert!(j["mpps"].as_f64().is_some_and(|v| v > 0.0), "{j}");
    assert_eq!(j["allocations"], 0, "no allocation per packet: {j}");
    probes_around_the_run(&j);
}
