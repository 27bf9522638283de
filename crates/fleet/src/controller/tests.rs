use super::*;
use crate::config::{Offer, Policy};
use crate::placement::Why;
use crate::record::{HostRecord, Load, RECORD_VERSION};

const DOC: &str = "\
switches: [{ name: lan }]
vrs:
  - { name: a, anti_affinity: g, cpu_share: 0.5, interfaces: [{ name: e, switch: lan, mac: \"02:00:00:00:00:0a\", addresses: [10.0.0.1/24] }] }
  - { name: b, anti_affinity: g, cpu_share: 0.5, interfaces: [{ name: e, switch: lan, mac: \"02:00:00:00:00:0b\", addresses: [10.0.0.2/24] }] }
  - { name: c, cpu_share: 0.5, interfaces: [] }
";

fn host(name: &str, addr: &str) -> HostRecord {
    HostRecord {
        v: RECORD_VERSION,
        name: name.into(),
        underlay: addr.parse().unwrap(),
        underlay_dev: None,
        underlay_netns: None,
        underlay_mtu: None,
        offer: Offer { workers: 1, cpu_share: 1.0, memory_mib: 1024 },
        policy: Policy::Fence,
        lease: 1,
        registered_ms: 0,
        updated_ms: 0,
        applied_revision: 0,
        fenced: false,
        load: Load::default(),
        vrs: vec![],
    }
}

fn inputs(hosts: &[(&str, &str)]) -> Inputs {
    Inputs {
        doc: Some((7, DOC.into())),
        hosts: hosts.iter().map(|(n, a)| host(n, a)).collect(),
        ..Default::default()
    }
}

/// The next round's inputs after `out` was written.
fn after(mut inp: Inputs, out: &Outputs) -> Inputs {
    inp.prev = Some(out.placement.clone());
    for (h, t) in &out.topologies {
        inp.desired.insert(h.clone(), t.clone());
    }
    inp
}

fn host_of(p: &Placement, vr: &str) -> Option<String> {
    p.vrs.iter().find(|x| x.vr == vr).unwrap().host.clone()
}

fn vrs_in(text: &str) -> Vec<String> {
    crate::agent::desired_vrs(text).unwrap()
}

#[test]
fn places_writes_each_host_once_and_then_nothing() {
    let inp = inputs(&[("h1", "192.0.2.1"), ("h2", "192.0.2.2")]);
    let out = plan(&inp, "ctl");
    let p = &out.placement;
    assert_eq!((p.revision, p.leader.as_str(), p.error.as_deref()), (7, "ctl", None));
    assert_eq!(host_of(p, "a").as_deref(), Some("h1"));
    assert_eq!(host_of(p, "b").as_deref(), Some("h2"));
    assert_eq!(host_of(p, "c").as_deref(), Some("h1"));
    // lan spans both hosts: one VNI, carried over VXLAN.
    assert_eq!(p.segments[0].hosts, ["h1", "h2"]);
    let t: HashMap<_, _> = out.topologies.iter().cloned().collect();
    assert_eq!(vrs_in(&t["h1"]), ["a", "c"]);
    assert_eq!(vrs_in(&t["h2"]), ["b"]);
    assert!(t["h1"].contains("\"192.0.2.2\"") && t["h1"].starts_with(HEADER), "{}", t["h1"]);
    // Nothing changed: no topology written; the VRs stay, now `kept`, and the round after
    // that changes nothing at all.
    let next = after(inp, &out);
    let again = plan(&next, "ctl");
    assert!(again.topologies.is_empty(), "{:?}", again.topologies);
    assert_eq!(again.placement.hosts(), out.placement.hosts());
    assert!(again.placement.vrs.iter().all(|v| v.why == Why::Kept));
    let third = plan(&after(next, &again), "ctl");
    assert!(third.topologies.is_empty());
    assert_eq!(third.placement, again.placement);
}

#[test]
fn failover_moves_a_dead_hosts_vrs_and_keeps_the_rules() {
    let inp = inputs(&[("h1", "192.0.2.1"), ("h2", "192.0.2.2"), ("h3", "192.0.2.3")]);
    let out = plan(&inp, "ctl");
    assert_eq!(host_of(&out.placement, "a").as_deref(), Some("h1"));
    assert_eq!(host_of(&out.placement, "b").as_deref(), Some("h2"));
    assert_eq!(host_of(&out.placement, "c").as_deref(), Some("h3"));
    // h1's lease ended: its key is gone.
    let mut next = after(inp, &out);
    next.hosts.retain(|h| h.name != "h1");
    let out2 = plan(&next, "ctl");
    let p = &out2.placement;
    // a moves; anti-affinity keeps it off h2 (b); c stays (stable), h3 has room for both.
    assert_eq!(host_of(p, "a").as_deref(), Some("h3"));
    assert_eq!(p.vrs[0].moved_from.as_deref(), Some("h1"));
    assert_eq!((host_of(p, "b").as_deref(), host_of(p, "c").as_deref()), (Some("h2"), Some("h3")));
    let t: HashMap<_, _> = out2.topologies.iter().cloned().collect();
    assert_eq!(vrs_in(&t["h3"]), ["a", "c"]);
    // The dead host's key is emptied: if it comes back it runs nothing placed elsewhere.
    assert!(vrs_in(&t["h1"]).is_empty());
    // h2's VXLAN port now points at h3, not h1.
    assert!(t["h2"].contains("192.0.2.3") && !t["h2"].contains("192.0.2.1"), "{}", t["h2"]);
    // The round after: a is kept on h3 and still says where it came from; nothing is written.
    let again = plan(&after(next.clone(), &out2), "ctl");
    let x = again.placement.vrs.iter().find(|x| x.vr == "a").unwrap();
    assert_eq!((x.host.as_deref(), &x.why), (Some("h3"), &Why::Kept));
    assert_eq!(x.moved_from.as_deref(), Some("h1"));
    assert!(again.topologies.is_empty(), "{:?}", again.topologies);
    let b = again.placement.vrs.iter().find(|x| x.vr == "b").unwrap();
    assert_eq!(b.moved_from, None, "b never moved");
    // h3 gone too: b stays on h2 (stable), so a cannot go there (anti-affinity): unplaced,
    // with the reason; c fits beside b.
    let mut last = after(next, &out2);
    last.hosts.retain(|h| h.name != "h3");
    let p = plan(&last, "ctl").placement;
    let x = p.vrs.iter().find(|x| x.vr == "a").unwrap();
    assert_eq!(x.host, None);
    assert!(
        matches!(&x.why, Why::Unplaced { reason } if reason.contains("anti-affinity group g")),
        "{x:?}"
    );
    assert_eq!(host_of(&p, "c").as_deref(), Some("h2"));
}

#[test]
fn drain_empties_a_cordoned_host() {
    let inp = inputs(&[("h1", "192.0.2.1"), ("h2", "192.0.2.2"), ("h3", "192.0.2.3")]);
    let out = plan(&inp, "ctl");
    let mut next = after(inp, &out);
    next.cordoned.insert("h1".into());
    let out2 = plan(&next, "ctl");
    let p = &out2.placement;
    assert_eq!(p.cordoned, ["h1"]);
    assert!(p.vrs.iter().all(|x| x.host.as_deref() != Some("h1")), "{p:?}");
    let t: HashMap<_, _> = out2.topologies.iter().cloned().collect();
    assert!(vrs_in(&t["h1"]).is_empty());
    // Uncordoned: nothing moves back (stable), but it may take new VRs again.
    let mut back = after(next, &out2);
    back.cordoned.clear();
    let out3 = plan(&back, "ctl");
    assert!(out3.placement.vrs.iter().all(|x| x.host.as_deref() != Some("h1")));
    assert!(out3.topologies.is_empty());
}

#[test]
fn a_bad_document_is_reported_and_writes_nothing() {
    let mut inp = inputs(&[("h1", "192.0.2.1")]);
    inp.doc = Some((9, "vrs: [{ nam: a }]\n".into()));
    let out = plan(&inp, "ctl");
    assert!(out.topologies.is_empty());
    let e = out.placement.error.unwrap();
    assert!(e.starts_with("etcd:/routeplex/fleet/desired@9:1:"), "{e}");
    // No fleet desired state: nothing placed, nothing written.
    inp.doc = None;
    let out = plan(&inp, "ctl");
    assert!(out.topologies.is_empty() && out.placement.vrs.is_empty());
}

#[test]
fn the_dry_run_table_says_why() {
    let mut inp = inputs(&[("h1", "192.0.2.1")]);
    inp.cordoned.insert("h9".into());
    let s = render(&plan(&inp, "ctl").placement);
    assert!(s.contains("least loaded"), "{s}");
    assert!(s.contains("refused: anti-affinity group g"), "{s}");
    assert!(s.contains("cordoned: h9"), "{s}");
}
