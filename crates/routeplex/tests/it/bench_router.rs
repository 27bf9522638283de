//! `routeplex bench router` end to end: a VR with a table on memif servers, this binary's
//! generator and sink as memif clients, and DPDK's l3fwd in the same harness where its source
//! is installed. Checks the JSON contract, not the speed.

use std::process::Command;

/// A small sorted prefix file: 10.1.0.0/24 .. 10.4.255.0/24.
pub(crate) fn prefixes(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = String::from("# bench router test table\n");
    for a in 1..=4 {
        for b in 0..=255 {
            text.push_str(&format!("10.{a}.{b}.0/24 {}\n", 1 + b % 8));
        }
    }
    let f = dir.join("prefixes.txt");
    std::fs::write(&f, text).unwrap();
    f
}

fn run(args: &[&str]) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("rpx-bench-router-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = prefixes(&dir);
    let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["bench", "router", "--seconds", "0.3", "--destinations", "512", "--json"])
        .arg("--prefixes")
        .arg(&file)
        .args(args)
        .output()
        .expect("run routeplex bench router");
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{args:?} failed: {}{out}", String::from_utf8_lossy(&o.stderr));
    let line = out.lines().rev().find(|l| l.starts_with('{')).expect("a JSON line");
    serde_json::from_str(line).expect("JSON")
}

/// The VR forwards the generator's frames to the sink at both sizes and says what limited it
/// (loss is not asserted: at full rate the sink, on the generator's thread, may leave the ring
/// out of the VR full for a moment, and then the VR drops).
#[test]
fn the_vr_forwards_across_its_table_at_both_sizes() {
    let j = run(&[]);
    assert_eq!(j["prefixes"], 1024, "{j}");
    let sizes = j["sizes"].as_array().expect("sizes");
    assert_eq!(sizes.iter().map(|s| s["size"].as_u64().unwrap()).collect::<Vec<_>>(), [60, 1514]);
    for s in sizes {
        let p = &s["routeplex"][0];
        assert!(p["mpps"].as_f64().unwrap() > 0.0, "nothing forwarded: {s}");
        // What the VR's port towards the sink could not hand over, from its own counters.
        assert!(p["lost"].is_u64() && p["dut_tx_full"].is_u64(), "{s}");
        let l = p["limited_by"].as_str().expect("limited_by");
        assert!(["generator", "dut", "ring"].contains(&l), "{s}");
        let threads = p["placement"]["threads"].as_array().expect("placement");
        assert!(threads.iter().any(|t| t["role"] == "routeplex worker"), "{p}");
    }
}

/// `--family ipv6`: the VR holds an IPv6 table and forwards IPv6 frames (at least 70 bytes:
/// the smallest that carries the sequence number).
#[test]
fn the_vr_forwards_ipv6_across_its_table() {
    let dir = std::env::temp_dir().join(format!("rpx-bench-router-v6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    for a in 1..=512u32 {
        text.push_str(&format!("2a00:{a:x}::/32 {}\n", 1 + a % 8));
    }
    let file = dir.join("prefixes6.txt");
    std::fs::write(&file, text).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["bench", "router", "--family", "ipv6", "--sizes", "60", "--seconds", "0.3"])
        .args(["--destinations", "256", "--json", "--prefixes"])
        .arg(&file)
        .output()
        .expect("run routeplex bench router");
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "failed: {}{out}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value =
        serde_json::from_str(out.lines().rev().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!((j["family"].as_str(), j["prefixes"].as_u64()), (Some("ipv6"), Some(512)), "{j}");
    let s = &j["sizes"][0];
    assert_eq!(s["size"], 70, "{s}");
    assert!(s["routeplex"][0]["mpps"].as_f64().unwrap() > 0.0, "nothing forwarded: {s}");
}

/// `--compare l3fwd`: interleaved pairs with l3fwd holding the same table, both sides
/// forwarding, the median ratio of the pairs. Skipped where DPDK's example source is absent
/// (`scripts/setup --bench` installs dpdk-doc).
#[test]
fn compare_l3fwd_reports_both_routers_and_their_ratio() {
    if !std::path::Path::new("/usr/share/dpdk/examples/l3fwd/main.c").is_file() {
        eprintln!("skipped: DPDK's l3fwd source is not installed (scripts/setup --bench installs dpdk-doc)");
        return;
    }
    let j = run(&["--compare", "l3fwd", "--pairs", "2", "--sizes", "60"]);
    let s = &j["sizes"][0];
    let pairs = s["pairs"]["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 2, "{s}");
    for (i, p) in pairs.iter().enumerate() {
        let (a, b) =
            (s["routeplex"][i]["mpps"].as_f64().unwrap(), s["l3fwd"][i]["mpps"].as_f64().unwrap());
        assert!(a > 0.0 && b > 0.0, "a router forwarded nothing: {s}");
        assert_eq!(p["a"].as_f64().unwrap(), a, "{p}");
        assert_eq!(p["b"].as_f64().unwrap(), b, "{p}");
        let threads = s["l3fwd"][i]["placement"]["threads"].as_array().expect("l3fwd placement");
        assert!(
            threads
                .iter()
                .any(|t| t["role"] == "l3fwd lcore 0" && t["samples"].as_u64().unwrap() > 0),
            "{s}"
        );
    }
    let r: Vec<f64> = pairs.iter().map(|p| p["ratio"].as_f64().unwrap()).collect();
    let m = s["ratio_to_l3fwd"].as_f64().unwrap();
    assert!((m - (r[0] + r[1]) / 2.0).abs() <= 1e-9 * m.max(1.0), "{s}");
}
