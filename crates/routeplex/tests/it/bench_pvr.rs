//! `routeplex bench pipeline --workers 2 --replicas 2 --json`: the keys the issue asks for,
//! no frame reordered or lost, the replicas' counters adding up, and where each thread ran
//! read back from /proc. No figure is asserted (the machine is shared).

use std::process::Command;

#[test]
fn bench_pipeline_with_replicas_prints_scaling_and_reorders_nothing() {
    let dir = std::env::temp_dir().join(format!("rpv-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefixes = dir.join("prefixes.txt");
    let lines: String =
        (0..200u32).map(|i| format!("{}.{}.0.0/16 {}\n", 10 + i / 256, i % 256, i % 8)).collect();
    std::fs::write(&prefixes, lines).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["bench", "pipeline", "--workers", "2", "--replicas", "2", "--packets", "120000"])
        .args(["--flows", "512", "--pairs", "2", "--json", "--prefixes"])
        .arg(&prefixes)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for k in ["mpps", "mpps_per_worker", "scaling", "reordered", "placement", "limited_by"] {
        assert!(!v[k].is_null(), "no {k} in {v}");
    }
    // 2 replicas against 1, interleaved: two pairs, scaling their ratios' median.
    let pairs = v["pairs"]["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{v}");
    assert_eq!(v["scaling"], v["pairs"]["ratio"]["median"]);
    assert_eq!(v["reordered"], 0);
    assert_eq!(v["lost"], 0);
    assert_eq!(v["workers"], 2);
    let r = &v["replicated"];
    let counted: Vec<u64> = r["replica_counters_forwarded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(counted.len(), 2);
    assert!(counted.iter().all(|&n| n > 0));
    assert_eq!(counted.iter().sum::<u64>(), r["forwarded"].as_u64().unwrap());
    // Both workers were seen running, read back from /proc (not assumed from the request).
    let threads = v["placement"]["threads"].as_array().unwrap();
    for w in ["worker 0", "worker 1"] {
        assert!(threads.iter().any(|t| t["role"] == w), "{w} not seen: {}", v["placement"]);
    }
}
