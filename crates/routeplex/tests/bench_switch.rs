//! `routeplex bench switch` end to end: a `routeplex run` child with memif servers, this
//! binary's generator and sinks as memif clients. Checks the JSON contract, not the speed.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["bench", "switch", "--seconds", "0.2", "--json"])
        .args(args)
        .output()
        .expect("run routeplex bench switch")
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = bench(args);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{args:?} failed: {}{out}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

#[test]
fn one_destination_reports_rate_bandwidth_time_and_batch() {
    for size in ["60", "1514"] {
        let j = json(&["--size", size, "--destinations", "1"]);
        for key in ["mpps", "gbps", "ns_per_packet", "batch"] {
            assert!(j[key].is_number(), "--size {size}: no numeric {key:?} in {j}");
        }
        assert!(j["mpps"].as_f64().unwrap() > 0.0, "--size {size}: nothing delivered: {j}");
        assert_eq!(j["size"].as_u64(), Some(size.parse().unwrap()), "{j}");
        assert_eq!(j["batch"].as_u64(), Some(256), "{j}");
    }
}

#[test]
fn flooding_reaches_the_sinks_without_duplicates() {
    let j = json(&["--size", "60", "--destinations", "3", "--batch", "32"]);
    let offered = j["offered_mpps"].as_f64().unwrap();
    let total = j["total_mpps"].as_f64().unwrap();
    assert!(j["mpps"].as_f64().unwrap() > 0.0, "{j}");
    assert_eq!(j["destinations"].as_u64(), Some(3), "{j}");
    // A flooded frame reaches each of the 3 sinks at most once: no copy is made twice.
    assert!(total <= 3.0 * offered * 1.001, "{total} Mpps delivered from {offered} offered: {j}");
    assert_eq!(j["batch"].as_u64(), Some(32), "{j}");
}

#[test]
fn bad_arguments_are_named() {
    for (args, name) in [
        (&["--size", "59"][..], "--size 59"),
        (&["--destinations", "0"][..], "--destinations 0"),
        (&["--batch", "257"][..], "--batch 257"),
    ] {
        let o = bench(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(err.contains(name), "{args:?}: error does not name {name:?}: {err}");
    }
}
