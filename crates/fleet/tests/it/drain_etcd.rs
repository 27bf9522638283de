//! Drain and rebalance move VRs live, against a real 3-member etcd cluster on loopback (no
//! root): three agents and a controller; `fleet drain` moves a VR by migration (the source's
//! agent migrates it once the destination has applied its share, and the destination never
//! starts it itself); `fleet rebalance` moves one back the same way; a migration the
//! destination refuses falls back to the restart path and is counted.
//!
//! etcd, the agents and the controller are real; the hosts are a double that keeps the VRs
//! its desired topology names and hands a migrated VR to the double listening at the
//! address (what `migrate` does to a data plane is control's tests' business, and
//! crates/routeplex/tests/it/migration.rs counts its frames).

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{hosts, wait, ETCD};
use fleet::controller::{self, ControllerConfig};
use fleet::local::Local;
use fleet::placement::Placement;
use fleet::record::LocalStatus;
use fleet::{Agent, FleetConfig, FleetError};

const TTL_S: u64 = 3;

const FLEET: &str = "\
switches: [{ name: lan }]
vrs:
  - { name: a, anti_affinity: g, cpu_share: 0.25, interfaces: [{ name: e, switch: lan, mac: \"02:00:00:00:00:0a\", addresses: [10.0.0.1/24] }] }
  - { name: b, anti_affinity: g, cpu_share: 0.25, interfaces: [{ name: e, switch: lan, mac: \"02:00:00:00:00:0b\", addresses: [10.0.0.2/24] }] }
  - { name: c, cpu_share: 0.25, interfaces: [] }
";

/// What happened on the hosts, in order: `migrate VR FROM->TO`, `refused VR FROM->TO`,
/// `start VR HOST` (an apply that brought a VR the host did not run).
type Events = Arc<Mutex<Vec<String>>>;

/// A host: runs the VRs its last applied topology names, plus those migrated in.
struct Sim {
    name: String,
    vrs: Mutex<Vec<String>>,
    /// Each apply: whether the topology had a VXLAN port (the segments a VR comes into).
    applied: Mutex<Vec<String>>,
    /// Refuses migrations (as a destination would that fails mid-way).
    refuse: AtomicBool,
    events: Events,
    /// Every host's double by migration address.
    peers: Arc<Mutex<HashMap<SocketAddr, Arc<Sim>>>>,
}

impl Local for Sim {
    fn status(&self) -> Result<LocalStatus, FleetError> {
        let vrs: Vec<serde_json::Value> = (self.vrs.lock().unwrap().iter())
            .map(|v| serde_json::json!({"name": v, "interfaces": [{"name": "e", "up": true}]}))
            .collect();
        LocalStatus::from_json(serde_json::json!({"workers": [{"index": 0}], "vrs": vrs}))
    }

    fn apply(&self, topology: &str, _source: &str) -> Result<(), FleetError> {
        let next = fleet::agent::desired_vrs(topology)?;
        let mut vrs = self.vrs.lock().unwrap();
        for v in next.iter().filter(|v| !vrs.contains(v)) {
            self.events.lock().unwrap().push(format!("start {v} {}", self.name));
        }
        *vrs = next;
        self.applied.lock().unwrap().push(topology.to_string());
        Ok(())
    }

    fn set_up(&self, _vr: &str, _interface: &str, _up: bool) -> Result<(), FleetError> {
        Ok(())
    }

    fn migrate(&self, vr: &str, to: SocketAddr) -> Result<(), FleetError> {
        let dst = self.peers.lock().unwrap().get(&to).cloned().expect("a listener at the address");
        let what = format!("{vr} {}->{}", self.name, dst.name);
        if dst.refuse.load(Ordering::Relaxed) {
            self.events.lock().unwrap().push(format!("refused {what}"));
            return Err(FleetError::Record { what: "migrate".into(), msg: "refused".into() });
        }
        // The destination must hold a's segment already: its restore joins the switch.
        let ready = dst.applied.lock().unwrap().last().is_some_and(|t| t.contains("vxlan"));
        assert!(ready || vr == "c", "{what}: the destination has not applied its share");
        self.vrs.lock().unwrap().retain(|v| v != vr);
        dst.vrs.lock().unwrap().push(vr.to_string());
        self.events.lock().unwrap().push(format!("migrate {what}"));
        Ok(())
    }
}

fn cfg(i: usize, etcd: &[String]) -> FleetConfig {
    let text = format!(
        "migration: {{ listen: 0.0.0.0:9470, secret: 0123456789abcdef0123 }}\nfleet:\n  etcd: [{}]\n  host: h{i}\n  underlay: 192.0.2.{i}\n  offer: {{ workers: 1, cpu_share: 0.5, memory_mib: 256 }}\n  lease_ttl_s: {TTL_S}\n",
        etcd.join(", ")
    );
    FleetConfig::from_topology(&text, "test").unwrap().unwrap()
}

fn placement(etcd: &[String]) -> Option<Placement> {
    fleet::view::read(etcd, Duration::from_millis(500)).ok()?.placement
}

fn host_of(p: &Placement, vr: &str) -> Option<String> {
    p.vrs.iter().find(|v| v.vr == vr)?.host.clone()
}

fn runs(s: &Sim) -> Vec<String> {
    let mut v = s.vrs.lock().unwrap().clone();
    v.sort();
    v
}

/// Whether `host`'s record lists exactly `vrs` (the controller sees what runs there).
fn listed(etcd: &[String], host: &str, vrs: &[String]) -> Option<()> {
    let h = hosts(etcd)?;
    let r = &h.iter().find(|h| h.record.name == host)?.record;
    let mut names: Vec<String> = r.vrs.iter().map(|v| v.name.clone()).collect();
    names.sort();
    (names == vrs).then_some(())
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn drain_and_rebalance_move_vrs_live_and_fall_back_to_a_restart() {
    if !std::path::Path::new(ETCD).exists() {
        eprintln!("skipped: {ETCD} is not installed (scripts/setup installs etcd-server)");
        return;
    }
    let cluster = common::cluster();
    let etcd = cluster.clients.clone();
    let long = Duration::from_secs(30);
    let call = Duration::from_secs(2);
    wait(long, "etcd cluster serving", || hosts(&etcd));

    let events: Events = Arc::default();
    let peers = Arc::new(Mutex::new(HashMap::new()));
    let sims: Vec<Arc<Sim>> = (1..=3)
        .map(|i| {
            let s = Arc::new(Sim {
                name: format!("h{i}"),
                vrs: Mutex::default(),
                applied: Mutex::default(),
                refuse: AtomicBool::new(false),
                events: events.clone(),
                peers: peers.clone(),
            });
            let addr: SocketAddr = format!("192.0.2.{i}:9470").parse().unwrap();
            peers.lock().unwrap().insert(addr, s.clone());
            s
        })
        .collect();
    let agents: Vec<fleet::Handle> =
        (0..3).map(|i| Agent::spawn(cfg(i + 1, &etcd), sims[i].clone(), None).unwrap()).collect();
    wait(long, "three hosts registered", || hosts(&etcd).filter(|h| h.len() == 3));
    let ttl = Duration::from_secs(TTL_S);
    let ctl =
        controller::spawn(ControllerConfig { etcd: etcd.clone(), name: "c".into(), ttl }).unwrap();

    // Placed: a on h1, b on h2 (its group is spread), c on h3; each host runs its share.
    let rev = controller::store(&etcd, FLEET, call).unwrap();
    wait(long, "placed", || placement(&etcd).filter(|p| p.revision == rev));
    for (s, want) in sims.iter().zip([["a"], ["b"], ["c"]]) {
        wait(long, "each host runs its share", || (runs(s) == strs(&want)).then_some(()));
        wait(long, "and says so", || listed(&etcd, &s.name, &strs(&want)));
    }
    events.lock().unwrap().clear();

    // Drain h1: a goes to h3 (h2 holds b of its group), moved live; h3 never starts it.
    controller::cordon(&etcd, "h1", true, call).unwrap();
    wait(long, "a runs on h3 only", || {
        (runs(&sims[2]) == strs(&["a", "c"]) && runs(&sims[0]).is_empty()).then_some(())
    });
    let p = wait(long, "the flight over", || {
        placement(&etcd).filter(|p| p.migrating.is_empty() && host_of(p, "a").is_some())
    });
    assert_eq!(host_of(&p, "a").as_deref(), Some("h3"));
    let view = fleet::view::read(&etcd, call).unwrap();
    let (ev, text) = (events.lock().unwrap().clone(), fleet::view::render(&view, 0));
    assert_eq!(ev, ["migrate a h1->h3"], "{text}\n{:?}", view.hosts);
    wait(long, "h1 counts the move", || (agents[0].status().migrations == 1).then_some(()));
    // h1 keeps nothing of lan once the flight is over.
    wait(long, "h1 applied an empty share", || {
        let a = sims[0].applied.lock().unwrap();
        a.last().filter(|t| !t.contains("vxlan") && !t.contains("migrate")).map(drop)
    });

    // Uncordoned, h1 is empty and h3 full: rebalance moves one of h3's VRs there, live.
    controller::cordon(&etcd, "h1", false, call).unwrap();
    wait(long, "uncordoned", || placement(&etcd).filter(|p| p.cordoned.is_empty()));
    wait(long, "h3's record lists a and c", || listed(&etcd, "h3", &strs(&["a", "c"])));
    let dry = controller::rebalance(&etcd, true, call).unwrap();
    assert_eq!(dry.len(), 1, "{dry:?}");
    assert_eq!((dry[0].from.as_str(), dry[0].to.as_str()), ("h3", "h1"));
    let moved = controller::rebalance(&etcd, false, call).unwrap();
    assert_eq!(moved, dry);
    let vr = moved[0].vrs[0].clone();
    wait(long, "the rebalanced VR runs on h1", || (runs(&sims[0]) == [vr.clone()]).then_some(()));
    assert_eq!(events.lock().unwrap()[1..], [format!("migrate {vr} h3->h1")]);
    let again = controller::rebalance(&etcd, true, call).unwrap();
    assert!(again.is_empty(), "balanced now: {again:?}");

    // A migration the destination refuses: the source removes the VR, the destination then
    // starts it (the restart path), and the source counts the failure.
    events.lock().unwrap().clear();
    wait(long, "h1's record lists it", || listed(&etcd, "h1", std::slice::from_ref(&vr)));
    // Draining h1 sends a to h3 (b, of its group, is on h2), or c to h2 (as loaded as h3,
    // and first by name).
    let (dst, dst_i) = if vr == "a" { ("h3", 2) } else { ("h2", 1) };
    sims[dst_i].refuse.store(true, Ordering::Relaxed);
    controller::cordon(&etcd, "h1", true, call).unwrap();
    wait(long, "the VR restarted on its new host", || {
        runs(&sims[dst_i]).contains(&vr).then_some(())
    });
    assert!(runs(&sims[0]).is_empty());
    assert_eq!(
        *events.lock().unwrap(),
        [format!("refused {vr} h1->{dst}"), format!("start {vr} {dst}")]
    );
    wait(long, "h1 counts the failure", || {
        (agents[0].status().migrations_failed == 1).then_some(())
    });
    ctl.stop();
    drop(agents);
}
