//! The OSPF square failure timeline end to end: `routeplex test timeline` runs
//! examples/scenarios/ospf-square.yaml (four VRs, BIRD OSPF with hello 1 s and dead 4 s, the
//! preferred path's link cut at 2 s and back at 5 s) with the example's namespaces, hosts and
//! ports renamed for this run, and the report must show no loss before the cut, loss during
//! it, forwarding back afterwards (a finite reconvergence time), and counters that add up;
//! then examples/scenarios/ospf-square-failures.yaml, every other event kind once (an
//! impairment, a flap, a VR stopped and started, a daemon killed and restarted). Each run
//! has its own names, and they run one after another: side by side, a mirror tap's `down`
//! waited in the kernel (`synchronize_rcu_expedited` in `dev_deactivate_many`) for up to
//! 2.7 s here (once as another run's taps, packet sockets and namespaces were being removed)
//! and 3.3 s in CI, and the daemons learned of the cut only when the link was back; one after
//! another, none of 24 `down`s took 2 ms. Needs root and BIRD; says why it skips
//! otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

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
fn renamed_example(dir: &Path, tag: &str, lab: &str, scenario: &str) -> PathBuf {
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let mut topo = std::fs::read_to_string(ex.join(format!("{lab}/topology.yaml"))).unwrap();
    let mut scen = std::fs::read_to_string(ex.join(scenario)).unwrap();
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
        scen = scen.replace(&format!("port: p{h},"), &format!("port: t{tag}{h},"));
    }
    std::fs::create_dir_all(dir.join(lab)).unwrap();
    std::fs::write(dir.join(format!("{lab}/topology.yaml")), topo).unwrap();
    for r in ["r1", "r2", "r3", "r4"] {
        let conf = format!("{lab}/{r}.conf");
        std::fs::copy(ex.join(&conf), dir.join(&conf)).unwrap();
    }
    let file = dir.join(scenario);
    std::fs::write(&file, scen).unwrap();
    file
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Held by the run in progress (see the module doc).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Whether the test can run here (root, BIRD); prints why not.
fn can_run() -> bool {
    if Command::new("id").arg("-u").output().map_or(true, |o| !o.stdout.starts_with(b"0\n")) {
        eprintln!("skipped: needs root (network namespaces, veth, taps); CI runs as root");
        return false;
    }
    if !have("bird") {
        eprintln!("skipped: BIRD is not installed (scripts/setup installs bird2)");
        return false;
    }
    true
}

/// Runs example `scenario` (its topology and daemon configs in `lab`/) renamed with `tag`
/// (short enough for the kernel's names: "tl" + tag + "r1" and "rp-t" + tag + "a") and
/// returns its JSON report.
fn run_example(lab: &str, scenario: &str, tag: &str) -> Value {
    // A run that failed poisons the lock; the next one still runs.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Dir(std::env::temp_dir().join(format!("routeplex-timeline-test-{tag}")));
    let file = renamed_example(&dir.0, tag, lab, scenario);
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
    r
}

/// What every report must show: each action applied at or after its time without error,
/// `seconds` of 1,000 probes/s per flow, every probe in exactly one window and the windows'
/// losses adding up to the flow's. Returns each flow's name and windows (before the events,
/// then one per action).
fn windows_add_up(r: &Value, seconds: u64) -> Vec<(String, Vec<Value>)> {
    let events = r["events"].as_array().unwrap();
    for e in events {
        assert!(e["result"].get("error").is_none(), "the action failed: {e:#}");
        assert!(e["applied_ms"].as_f64().unwrap() >= e["at_s"].as_f64().unwrap() * 1e3);
        assert!(e["took_ms"].as_f64().is_some_and(|t| t >= 0.0), "{e:#}");
    }
    let gap = r["runner"]["longest_sync_gap_ms"].as_f64().expect("the runner's pace");
    eprintln!("the runner synced routes at most {gap:.1} ms apart");
    let mut out = Vec::new();
    for f in r["flows"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        let (sent, received, lost) = (u(&f["sent"]), u(&f["received"]), u(&f["lost"]));
        assert_eq!(sent, 1000 * seconds, "{name}: {f:#}");
        assert_eq!(received + lost, sent, "{name}: {f:#}");
        assert_eq!(u(&f["stray"]), 0, "{name}: {f:#}");
        let windows: Vec<Value> = std::iter::once(&r["before_events"][name])
            .chain(events.iter().map(|e| &e["flows"][name]))
            .cloned()
            .collect();
        assert_eq!(windows.iter().map(|w| u(&w["sent"])).sum::<u64>(), sent, "{name}");
        assert_eq!(windows.iter().map(|w| u(&w["lost"])).sum::<u64>(), lost, "{name}");
        out.push((name.to_string(), windows));
    }
    out
}

/// The forwarded counter of VR `n` in report `r`.
fn forwarded(r: &Value, n: &str) -> u64 {
    let v = r["vrs"].as_array().unwrap().iter().find(|v| v["name"] == n).unwrap();
    u(&v["counters"]["forwarded"])
}

#[test]
fn ospf_square_reconverges_after_a_cut() {
    if !can_run() {
        return;
    }
    let r = run_example(
        "ospf-square",
        "ospf-square.yaml",
        &format!("{}", std::process::id() % 10_000 * 10),
    );
    assert_eq!(r["timers"]["hello"], "1s");
    assert_eq!(r["timers"]["dead"], "4s");
    cut_and_back(&r);
}

#[test]
fn frr_bgp_pairs_reconverge_after_a_cut() {
    if !can_run() {
        return;
    }
    let frr_user = Command::new("id").arg("frr").output().is_ok_and(|o| o.status.success());
    if !Path::new("/usr/lib/frr/bgpd").exists() || !frr_user {
        eprintln!("skipped: FRR is not installed (scripts/setup installs frr)");
        return;
    }
    let tag = format!("{}", std::process::id() % 10_000 * 10 + 2);
    let r = run_example("bgp-pairs", "bgp-pairs.yaml", &tag);
    assert_eq!(r["timers"]["keepalive"], "1s");
    assert_eq!(r["timers"]["hold"], "3s");
    cut_and_back(&r);
}

/// The cut of r1's link to r2 under traffic (at 2 s of 8, back at 5 s) in a square whose
/// preferred path is r1 - r2 - r3: no loss before, loss at the cut, forwarding back before
/// the link is (a finite reconvergence time), windows that add up, and the probes through
/// both paths.
fn cut_and_back(r: &Value) {
    let events = r["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{r:#}");
    assert_eq!(events[0]["action"], "r1.l12 down");
    assert_eq!(events[1]["action"], "r1.l12 up");
    for (name, windows) in windows_add_up(r, 8) {
        let name = name.as_str();
        let before = &windows[0];
        assert_eq!(u(&before["lost"]), 0, "{name}: loss before the cut: {before:#}");
        assert!(u(&before["sent"]) > 0, "{name}: {before:#}");
        let cut = &windows[1];
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
    let vr = |n: &str| forwarded(r, n);
    let delivered: u64 = r["flows"].as_array().unwrap().iter().map(|f| u(&f["received"])).sum();
    assert!(vr("r1") >= delivered && vr("r3") >= delivered, "{r:#}");
    assert!(vr("r2") > 0 && vr("r4") > 0, "{r:#}");
}

#[test]
fn ospf_square_every_event_kind() {
    if !can_run() {
        return;
    }
    let tag = format!("{}", std::process::id() % 10_000 * 10 + 1);
    let r = run_example("ospf-square", "ospf-square-failures.yaml", &tag);
    let events = r["events"].as_array().unwrap();
    let labels: Vec<&str> = events.iter().map(|e| e["action"].as_str().unwrap()).collect();
    let (impair, ends) = (format!("impair t{tag}a"), format!("impair t{tag}a ends"));
    assert_eq!(
        labels,
        [
            impair.as_str(),
            ends.as_str(),
            "r1.l12 down",
            "r1.l12 up",
            "vr r2 stop",
            "vr r2 start",
            "kill r2's daemon",
            "restart r2's daemon",
        ]
    );
    assert_eq!(events[6]["result"]["killed"], "r2", "{:#}", events[6]);
    assert!(u(&events[7]["result"]["pid"]) > 0, "{:#}", events[7]);
    // vr_stop brings down r2's two interfaces.
    assert_eq!(events[4]["result"].as_array().map(Vec::len), Some(2), "{:#}", events[4]);
    let (mut flap_lost, mut stop_lost) = (0, 0);
    for (name, w) in windows_add_up(&r, 36) {
        let (before, impair, down, up, stop, start, kill, restart) =
            (&w[0], &w[1], &w[3], &w[4], &w[5], &w[6], &w[7], &w[8]);
        assert_eq!(u(&before["lost"]), 0, "{name}: loss before the events: {before:#}");
        if name == "hc-ha" {
            // 20 % random loss on what leaves by ha's port, for 0.5 s of the window's 0.55 s
            // (its first 50 ms were sent before the impairment began).
            let share = u(&impair["lost"]) as f64 / u(&impair["sent"]) as f64;
            assert!((0.10..=0.30).contains(&share), "{name}: {share} lost: {impair:#}");
        } else {
            assert_eq!(u(&impair["lost"]), 0, "{name}: the impairment is on ha's port: {impair:#}");
        }
        // Whatever a flow lost at each event, it was back before the next.
        for (what, x) in [("the flap", up), ("r2's stop", stop), ("r2's start", start)] {
            assert_eq!(x["recovered"], true, "{name}: not back after {what}: {x:#}");
        }
        for (what, x) in [("the daemon's kill", kill), ("its restart", restart)] {
            assert_eq!(x["recovered"], true, "{name}: not back after {what}: {x:#}");
        }
        flap_lost += u(&down["lost"]) + u(&up["lost"]);
        stop_lost += u(&stop["lost"]);
        eprintln!(
            "{name}: lost {} at the impairment, {} + {} at the flap, {} when r2 stopped \
             (back after {} ms), {} when it started, {} + {} at the daemon's kill and restart",
            impair["lost"],
            down["lost"],
            up["lost"],
            stop["lost"],
            stop["back_ms"],
            start["lost"],
            kill["lost"],
            restart["lost"]
        );
    }
    // The flap cut the path both flows took; r2's stop, the path of those back on it (by
    // then, as a rule, both), until the dead timers fired.
    assert!(flap_lost > 0 && stop_lost > 0, "{r:#}");
    // While r2 was stopped the probes took r4.
    assert!(forwarded(&r, "r4") > 0, "{r:#}");
}
