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
        migration: None,
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

/// `h` as its agent would publish it: it takes migrations, and runs `vrs`.
fn live(mut h: HostRecord, vrs: &[&str]) -> HostRecord {
    let listen = std::net::SocketAddr::new(h.underlay, 9470);
    h.migration = Some(crate::record::MigrationOffer { listen: Some(listen) });
    h.vrs = (vrs.iter())
        .map(|v| crate::record::VrLive {
            name: v.to_string(),
            worker: 0,
            rx_packets: 0,
            forwarded: 0,
            interfaces: 1,
            interfaces_up: 1,
            cpu_share: 0.5,
        })
        .collect();
    h
}

/// Every host runs what the placement gives it (as after each agent applied its share).
fn converged(inp: &mut Inputs, p: &Placement) {
    for h in &mut inp.hosts {
        let mine: Vec<&str> = (p.vrs.iter())
            .filter(|v| v.host.as_ref() == Some(&h.name))
            .map(|v| v.vr.as_str())
            .collect();
        *h = live(h.clone(), &mine);
    }
}

const H3: &[(&str, &str)] = &[("h1", "192.0.2.1"), ("h2", "192.0.2.2"), ("h3", "192.0.2.3")];

#[test]
fn drain_moves_a_vr_live_when_both_hosts_can() {
    let mut inp = inputs(H3);
    let out = plan(&inp, "ctl");
    converged(&mut inp, &out.placement);
    let mut next = after(inp, &out);
    next.cordoned.insert("h1".into());
    let out2 = plan(&next, "ctl");
    let p = &out2.placement;
    // a leaves h1 for h3 (b, same group, is on h2), h1 still runs it: in flight.
    let m = crate::migration::Move {
        vr: "a".into(),
        from: "h1".into(),
        to: "h3".into(),
        addr: "192.0.2.3:9470".parse().unwrap(),
    };
    assert_eq!(p.migrating, std::slice::from_ref(&m));
    assert_eq!(host_of(p, "a").as_deref(), Some("h3"));
    // lan is held by h1 too until a lands: everyone sends to both ends of the move.
    assert_eq!(p.segments[0].hosts, ["h1", "h2", "h3"]);
    let t: HashMap<_, _> = out2.topologies.iter().cloned().collect();
    // h3 does not start a (the migration brings it) but has lan and its VXLAN port.
    assert_eq!(vrs_in(&t["h3"]), ["c"]);
    assert!(t["h3"].contains("name: \"lan\"") && t["h3"].contains("\"192.0.2.1\""), "{}", t["h3"]);
    // h1: no VR, lan kept, and the mark its agent migrates a by.
    assert!(vrs_in(&t["h1"]).is_empty());
    assert!(t["h1"].starts_with(&format!("{HEADER}{}", m.mark())), "{}", t["h1"]);
    assert_eq!(crate::migration::marks(&t["h1"]).unwrap(), [m]);
    assert!(t["h1"].contains("\"192.0.2.3\"") && t["h1"].contains("\"192.0.2.2\""));
    assert!(t["h2"].contains("\"192.0.2.1\"") && t["h2"].contains("\"192.0.2.3\""));
    assert!(render(p).contains("migrating live: a from h1 to h3 (192.0.2.3:9470)"));
    // While h1 still runs it (and while h3 lists it too, built and down), nothing changes.
    let mut mid = after(next, &out2);
    let again = plan(&mid, "ctl");
    assert!(again.topologies.is_empty(), "{:?}", again.topologies);
    mid.hosts[2] = live(mid.hosts[2].clone(), &["a", "c"]);
    assert!(plan(&mid, "ctl").topologies.is_empty());
    // Moved: h1 lists it no more. h3 gets it (it runs it already: its apply changes
    // nothing), h1 loses lan and the mark, h2 sends to h3 only.
    mid.hosts[0] = live(mid.hosts[0].clone(), &[]);
    let out3 = plan(&mid, "ctl");
    assert!(out3.placement.migrating.is_empty());
    assert_eq!(out3.placement.segments[0].hosts, ["h2", "h3"]);
    let t: HashMap<_, _> = out3.topologies.iter().cloned().collect();
    assert_eq!(vrs_in(&t["h3"]), ["a", "c"]);
    assert!(!t["h1"].contains("migrate") && !t["h1"].contains("vxlan"), "{}", t["h1"]);
    assert!(t["h2"].contains("\"192.0.2.3\"") && !t["h2"].contains("\"192.0.2.1\""));
}

#[test]
fn no_live_move_without_a_listener_nor_from_a_dead_host() {
    let mut inp = inputs(H3);
    let out = plan(&inp, "ctl");
    converged(&mut inp, &out.placement);
    // h3 takes no migrations: a restarts there (the old path), at once.
    inp.hosts[2].migration = Some(crate::record::MigrationOffer { listen: None });
    let mut next = after(inp.clone(), &out);
    next.cordoned.insert("h1".into());
    let out2 = plan(&next, "ctl");
    assert!(out2.placement.migrating.is_empty());
    let t: HashMap<_, _> = out2.topologies.iter().cloned().collect();
    assert_eq!(vrs_in(&t["h3"]), ["a", "c"]);
    assert!(!t["h1"].contains("migrate"));
    // h1 dead (its key gone): a dead host cannot send; a starts on h3 at once.
    let mut dead = after(inputs_with(&inp), &out);
    dead.hosts.retain(|h| h.name != "h1");
    let out3 = plan(&dead, "ctl");
    assert!(out3.placement.migrating.is_empty());
    let t: HashMap<_, _> = out3.topologies.iter().cloned().collect();
    assert_eq!(vrs_in(&t["h3"]), ["a", "c"]);
}

/// `inp` with every host taking migrations again.
fn inputs_with(inp: &Inputs) -> Inputs {
    let mut i = inp.clone();
    for h in &mut i.hosts {
        let names: Vec<String> = h.vrs.iter().map(|v| v.name.clone()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        *h = live(h.clone(), &names);
    }
    i
}

#[test]
fn rebalance_records_moves_the_leader_then_makes_live() {
    let two = &H3[..2];
    let mut inp = inputs(two);
    let out = plan(&inp, "ctl");
    // a and c on h1 (1.0 of 1.0), b on h2 (0.5).
    assert_eq!(host_of(&out.placement, "c").as_deref(), Some("h1"));
    converged(&mut inp, &out.placement);
    let mut next = after(inp, &out);
    // Balanced as far as 0.5 steps go: nothing to do.
    let (moves, p) = rebalance_plan(&next).unwrap();
    assert!(moves.is_empty() && p.is_none(), "{moves:?}");
    // h3 joins: one of h1's VRs moves there.
    next.hosts.push(live(host("h3", "192.0.2.3"), &[]));
    let (moves, p) = rebalance_plan(&next).unwrap();
    let p = p.unwrap();
    assert_eq!(moves.len(), 1, "{moves:?}");
    let (vr, m) = (&moves[0].vrs[0], &moves[0]);
    assert_eq!((m.from.as_str(), m.to.as_str()), ("h1", "h3"));
    assert_eq!(host_of(&p, vr).as_deref(), Some("h3"));
    // The leader keeps it there and, h1 still running it, moves it live.
    next.prev = Some(p);
    let out2 = plan(&next, "ctl");
    assert_eq!(host_of(&out2.placement, vr).as_deref(), Some("h3"));
    assert_eq!(out2.placement.migrating.len(), 1);
    assert_eq!(&out2.placement.migrating[0].vr, vr);
    // Nothing to rebalance without a document or a placement: said so.
    next.prev = None;
    let e = rebalance_plan(&next).unwrap_err().to_string();
    assert!(e.contains("no placement in etcd yet"), "{e}");
}
