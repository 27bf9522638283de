//! The OSPF square failure timeline end to end: `routeplex test timeline` runs
//! examples/scenarios/ospf-square.yaml (four VRs, BIRD OSPF with hello 1 s and dead 4 s, the
//! preferred path's link cut at 2 s and back at 5 s) with the example's namespaces, hosts and
//! ports renamed for this run, and the report must show no loss before the cut, loss during
//! it, forwarding back afterwards (a finite reconvergence time), and counters that add up.
//! Needs root and BIRD; says why it skips otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Removes the run's files when dropped.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The example with every name the kernel sees (host and control-plane namespaces, the
/// ports' veths) made this run's own, written to `dir`.
fn renamed_example(dir: &Path, tag: &str) -> PathBuf {
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let mut topo = std::fs::read_to_string(ex.join("ospf-square/topology.yaml")).unwrap();
    let mut scen = std::fs::read_to_string(ex.join("ospf-square.yaml")).unwrap();
    for r in ["r1", "r2", "r3", "r4"] {
        topo = topo.replace(&format!("netns: {r} }}"), &format!("netns: tl{tag}{r} }}"));
    }
    for h in ["a", "c"] {
        for (from, to) in [
            (format!("name: h{h},"), format!("name: tl{tag}h{h},")),
            (format!("host: h{h} "), format!("host: tl{tag}h{h} ")),
            (format!("name: p{h},"), format!("name: t{tag}{h},")),
            (format!("port: p{h},"), format!("port: t{tag}{h},")),
        ] {
            assert!(topo.contains(&from), "the example has no {from:?}");
            topo = topo.replace(&from, &to);
        }
        let from = format!("from: h{h},");
        assert!(scen.contains(&from), "the example has no {from:?}");
        scen = scen.replace(&from, &format!("from: tl{tag}h{h},"));
    }
    std::fs::create_dir_all(dir.join("ospf-square")).unwrap();
    std::fs::write(dir.join("ospf-square/topology.yaml"), topo).unwrap();
    for r in ["r1", "r2", "r3", "r4"] {
        let conf = format!("ospf-square/{r}.conf");
        std::fs::copy(ex.join(&conf), dir.join(&conf)).unwrap();
    }
    let file = dir.join("ospf-square.yaml");
    std::fs::write(&file, scen).unwrap();
    file
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn ospf_square_reconverges_after_a_cut() {
    if Command::new("id").arg("-u").output().map_or(true, |o| !o.stdout.starts_with(b"0\n")) {
        eprintln!("skipped: needs root (network namespaces, veth, taps); CI runs as root");
        return;
    }
    if !have("bird") {
        eprintln!("skipped: BIRD is not installed (scripts/setup installs bird2)");
        return;
    }
    // Short enough for the kernel's names: "tl" + tag + "r1" and "rp-t" + tag + "a".
    let tag = format!("{}", std::process::id() % 100_000);
    let dir = Dir(std::env::temp_dir().join(format!("routeplex-timeline-test-{tag}")));
    let file = renamed_example(&dir.0, &tag);
    let out = Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .args(["test", "timeline", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "routeplex test timeline failed:\n{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    eprintln!("{r:#}");
    assert_eq!(r["timers"]["hello"], "1s");
    assert_eq!(r["timers"]["dead"], "4s");
    let events = r["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{r:#}");
    assert_eq!(events[0]["action"], "r1.l12 down");
    assert_eq!(events[1]["action"], "r1.l12 up");
    for e in events {
        assert!(e["result"].get("error").is_none(), "the action failed: {e:#}");
        assert!(e["applied_ms"].as_f64().unwrap() >= e["at_s"].as_f64().unwrap() * 1e3);
    }
    for f in r["flows"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        let (sent, received, lost) = (u(&f["sent"]), u(&f["received"]), u(&f["lost"]));
        // 1,000 probes/s for 8 s.
        assert_eq!(sent, 8000, "{name}: {f:#}");
        assert_eq!(received + lost, sent, "{name}: {f:#}");
        assert_eq!(u(&f["stray"]), 0, "{name}: {f:#}");
        // Every probe is in exactly one window; their losses add up to the flow's.
        let windows: Vec<&Value> = std::iter::once(&r["before_events"][name])
            .chain(events.iter().map(|e| &e["flows"][name]))
            .collect();
        assert_eq!(windows.iter().map(|w| u(&w["sent"])).sum::<u64>(), sent, "{name}");
        assert_eq!(windows.iter().map(|w| u(&w["lost"])).sum::<u64>(), lost, "{name}");
        let before = windows[0];
        assert_eq!(u(&before["lost"]), 0, "{name}: loss before the cut: {before:#}");
        assert!(u(&before["sent"]) > 0, "{name}: {before:#}");
        let cut = windows[1];
        assert!(u(&cut["lost"]) > 0, "{name}: nothing lost when the link was cut: {cut:#}");
        assert_eq!(cut["recovered"], true, "{name}: not back before the link came up: {cut:#}");
        let back = cut["back_ms"].as_f64().expect("a finite reconvergence time");
        let (first, last) =
            (cut["first_loss_ms"].as_f64().unwrap(), cut["last_loss_ms"].as_f64().unwrap());
        assert!(first <= last && last < back, "{name}: {cut:#}");
        // serde_json reads floats to within an ulp or so.
        let outage = cut["outage_ms"].as_f64().unwrap();
        assert!((outage - (last - first)).abs() < 1e-6, "{name}: {cut:#}");
        assert!(u(&cut["gaps"]) >= 1 && u(&cut["gaps"]) <= u(&cut["lost"]), "{name}: {cut:#}");
        assert!(back < cut["end_ms"].as_f64().unwrap() - cut["start_ms"].as_f64().unwrap());
        eprintln!(
            "{name}: {} probes lost at the cut, forwarding back after {back:.0} ms",
            cut["lost"]
        );
    }
    // The probes went through the VRs: r1 and r3 forwarded at least every probe delivered
    // through them, r2 most (the preferred path), r4 some (the detour during the cut).
    let vr = |n: &str| {
        let v = r["vrs"].as_array().unwrap().iter().find(|v| v["name"] == n).unwrap();
        u(&v["counters"]["forwarded"])
    };
    let delivered: u64 = r["flows"].as_array().unwrap().iter().map(|f| u(&f["received"])).sum();
    assert!(vr("r1") >= delivered && vr("r3") >= delivered, "{r:#}");
    assert!(vr("r2") > 0 && vr("r4") > 0, "{r:#}");
}
