//! Live migration between two hosts under traffic, through `routeplex test migration` (so the
//! namespaces tested are the ones measured): two data planes (`routeplex run`) in network
//! namespaces joined by a migration link, the VR's neighbors on one bridge with both; host a
//! streams sequence-numbered UDP (64 B and 1500 B frames, 5 kpps each) to host b through the
//! VR while `routeplex migrate` moves it there and back. The command itself checks after each
//! move that the VR runs at the destination only.
//!
//! Asserted: every packet arrives, once and in order. Packets that reach the source during
//! the handoff are sent on to the destination over the migration link and delivered there
//! ahead of what reaches it directly (`control::migrate`); reordering could only come from a
//! source slower to send on a frame than the switch takes to deliver the next one straight to
//! the destination, which the destination prevents by holding its ports until its own
//! announcements come back through the tunnel (at most `tunnel::HOLD_MAX`), so none is
//! allowed. The handoff gap on the data planes' clock is checked to exist and be positive
//! (the source's last frame before the destination's first); timings are printed, never
//! asserted.
//!
//! Needs root; skipped with a message otherwise. Every name starts with `rsm`.

use std::process::Command;

use serde_json::Value;

fn root() -> bool {
    let ok = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !ok {
        eprintln!("skipped: needs root (network namespaces, veth, a bridge); CI runs as root");
    }
    ok
}

fn values(p: &Value, key: &str) -> Vec<f64> {
    p[key]["values"]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: {p}"))
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

#[test]
fn a_vr_migrates_there_and_back_under_traffic_with_nothing_lost_or_reordered() {
    if !root() {
        return;
    }
    let out = std::env::temp_dir().join(format!("rsm-migration-test-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["test", "migration", "--json", "--reps", "2", "--routes", "0", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "test migration: {stderr}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}{stderr}", String::from_utf8_lossy(&o.stdout))
    });
    println!("{}", v["table"].as_str().unwrap());
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "a point per frame size");
    for p in points {
        for k in ["downtime_ms", "lost", "reordered", "total_ms", "bytes_moved"] {
            assert_eq!(values(p, k).len(), 2, "{k}: a value per repetition: {p}");
            assert!(p[k]["mean"].as_f64().is_some_and(|m| m >= 0.0), "{k}: {p}");
            assert!(p[k].get("ci99").is_some(), "{k}: {p}");
        }
        for q in ["p50", "p99"] {
            assert!(p["rtt_during_ms"][q].get("mean").is_some(), "rtt_during_ms.{q}: {p}");
        }
        // The data planes' own clock: the source's last transit frame before its stop, the
        // destination's first after its commit, one CLOCK_MONOTONIC: every move has both, in
        // that order.
        let gaps = values(p, "handoff_gap_ms");
        assert_eq!(gaps.len(), 2, "handoff_gap_ms: a value per repetition: {p}");
        assert!(gaps.iter().all(|&g| g > 0.0), "handoff_gap_ms: {gaps:?}");
        assert!(values(p, "bytes_moved").iter().all(|&b| b > 0.0));
        assert!(values(p, "total_ms").iter().all(|&t| t > 0.0));
        let sent = values(p, "sent");
        assert!(sent.iter().all(|&s| s > 1000.0), "the streams ran: {sent:?}");
        eprintln!(
            "{}: forwarded by the source {:?}, sink drops {:?}, generator pauses {:?} ms",
            p["label"],
            values(p, "forwarded"),
            values(p, "sink_drops"),
            values(p, "gen_gap_ms")
        );
        assert_eq!(values(p, "lost"), [0.0, 0.0], "lost ({}): {p}", p["label"]);
        assert_eq!(values(p, "reordered"), [0.0, 0.0], "reordered ({}): {p}", p["label"]);
        assert_eq!(values(p, "duplicates"), [0.0, 0.0], "duplicated ({}): {p}", p["label"]);
    }
    assert_eq!(v["seed"]["kvm_downtime_ms"], 170.0);
    for f in v["files"].as_array().unwrap() {
        assert!(std::path::Path::new(f.as_str().unwrap()).is_file(), "{f}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
