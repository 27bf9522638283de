use super::*;
use control::topology::{PortKind, Topology};

const DOC: &str = "\
hosts:
  - { name: ha, addresses: [10.1.0.2/24], gateways: [10.1.0.1] }
ports:
  - { name: pa, kind: afpacket, host: ha }
  - { name: up, kind: mem }
switches:
  - name: lan
    members:
      - { port: up }
vrs:
  - name: r1
    host: h1
    memory_mib: 64
    reservation: { time_us: 250, period_us: 1000 }
    interfaces:
      - { name: ea, port: pa, mac: \"02:00:00:00:01:01\", addresses: [10.1.0.1/24] }
      - { name: l, switch: lan, mac: \"02:00:00:00:01:02\", addresses: [10.9.0.1/24] }
  - name: r2
    anti_affinity: edge
    cpu_share: 0.5
    interfaces:
      - { name: l, switch: lan, mac: \"02:00:00:00:02:01\", addresses: [10.9.0.2/24] }
      - { name: p, link: r2r3, mac: \"02:00:00:00:02:02\", addresses: [10.23.0.2/24] }
  - name: r3
    anti_affinity: edge
    interfaces:
      - { name: p, link: r2r3, mac: \"02:00:00:00:03:02\", addresses: [10.23.0.3/24] }
";

fn err(text: &str) -> String {
    FleetDoc::parse(text, "f.yaml").unwrap_err().to_string()
}

#[test]
fn hints_units_and_segments() {
    let d = FleetDoc::parse(DOC, "f.yaml").unwrap();
    let r1 = &d.vrs[0];
    assert_eq!((r1.pin.as_deref(), r1.cpu, r1.memory_mib), (Some("h1"), 0.25, 64));
    assert_eq!(r1.ports, ["pa"]);
    assert_eq!(r1.segments, ["lan"]);
    assert!(r1.body.get("host").is_none() && r1.body.get("memory_mib").is_none());
    assert_eq!((d.vrs[1].cpu, d.vrs[1].anti_affinity.as_deref()), (0.5, Some("edge")));
    assert_eq!(d.vrs[2].cpu, 0.0);
    assert_eq!(d.links, ["r2r3"]);
    assert_eq!(d.segment_names(), ["lan", "r2r3"]);
    let u = d.units();
    assert_eq!(u.len(), 3);
    assert_eq!(u[0].pin.as_deref(), Some("h1"));
}

#[test]
fn ports_shared_make_one_unit_with_one_pin() {
    let t = "\
ports: [{ name: p, kind: mem }]
vrs:
  - { name: a, host: h1, cpu_share: 0.1, interfaces: [{ name: e, port: p, vlan: 10, mac: \"02:00:00:00:00:01\", addresses: [10.0.0.1/24] }] }
  - { name: b, cpu_share: 0.2, interfaces: [{ name: e, port: p, vlan: 20, mac: \"02:00:00:00:00:02\", addresses: [10.0.1.1/24] }] }
";
    let d = FleetDoc::parse(t, "f.yaml").unwrap();
    let u = d.units();
    assert_eq!(u.len(), 1);
    assert_eq!(u[0].vrs, ["a", "b"]);
    assert!((u[0].cpu - 0.3).abs() < 1e-9);
    assert_eq!(u[0].pin.as_deref(), Some("h1"));
    let e = err(&t.replace("{ name: b,", "{ name: b, host: h2,"));
    assert!(e.starts_with("f.yaml:4:22: vrs[1].host: VRs a, b share a port"), "{e}");
    assert!(e.contains("pinned to h1 and h2"), "{e}");
}

#[test]
fn errors_name_the_fleet_file_position() {
    // Found by control's parser in the generated topology, led back to the fleet file.
    let e = err(&DOC.replace("02:00:00:00:02:01", "zz"));
    assert!(e.starts_with("f.yaml:22:38: vrs[1].interfaces[0].mac:"), "{e}");
    let e = err(&DOC.replace(
        "switch: lan, mac: \"02:00:00:00:02:01\"",
        "switch: lam, mac: \"02:00:00:00:02:01\"",
    ));
    assert!(e.starts_with("f.yaml:22:28: vrs[1].interfaces[0].switch:"), "{e}");
    assert!(e.contains("lam"), "{e}");
    // A link named where control sees a switch: the position is the link's.
    let e = err(&DOC.replace("addresses: [10.23.0.3/24]", "addresses: [10.9.0.2/24], up: maybe"));
    assert!(e.starts_with("f.yaml:27:"), "{e}");
    // The fleet's own rules.
    let e = err(&DOC.replace("workers", "x").replace("hosts:\n", "workers: 2\nhosts:\n"));
    assert!(e.starts_with("f.yaml:1:1: workers: unknown key"), "{e}");
    let e = err(&DOC.replace("cpu_share: 0.5", "cpu_share: -1"));
    assert!(e.starts_with("f.yaml:20:16: vrs[1].cpu_share: cpu_share -1"), "{e}");
    let e = err(&DOC.replace("host: h1", "host: h/1"));
    assert!(e.starts_with("f.yaml:12:11: vrs[0].host: host \"h/1\""), "{e}");
    let e = err(&DOC.replace(
        "link: r2r3, mac: \"02:00:00:00:03:02\"",
        "link: r2r4, mac: \"02:00:00:00:03:02\"",
    ));
    assert!(e.contains("link \"r2r3\" joins exactly two interfaces, not 1 (r2.p)"), "{e}");
    let e = err(&DOC.replace(
        "link: r2r3, mac: \"02:00:00:00:03:02\"",
        "link: lan, mac: \"02:00:00:00:03:02\"",
    ));
    assert!(e.contains("link \"lan\" has the name of a switch (line 7)"), "{e}");
    let e = err(&DOC.replace(
        "{ name: p, link: r2r3, mac: \"02:00:00:00:02:02\"",
        "{ name: p, link: r2r3, port: up, mac: \"02:00:00:00:02:02\"",
    ));
    assert!(e.contains("on a port, a switch or a link: one of them"), "{e}");
}

fn under(a: &str) -> Underlay {
    Underlay { addr: a.parse().unwrap(), dev: None, netns: None, mtu: None }
}

/// Each VR's host, from `(vr, host)` pairs.
fn placed(at: &[(&str, &str)]) -> HashMap<String, String> {
    at.iter().map(|(v, h)| (v.to_string(), h.to_string())).collect()
}

/// Each host's underlay, from `(host, address)` pairs.
fn underlays(hosts: &[(&str, &str)]) -> HashMap<String, Underlay> {
    hosts.iter().map(|(h, a)| (h.to_string(), under(a))).collect()
}

/// Host `host`'s share of `d`, parsed by control's parser, and its text.
fn topology_of(
    d: &FleetDoc,
    host: &str,
    at: &HashMap<String, String>,
    segs: &[Segment],
    u: &HashMap<String, Underlay>,
) -> (Topology, String) {
    let text = d.host_topology(host, at, segs, u, &BTreeSet::new()).emit();
    let t = Topology::parse(&text, host, Path::new(".")).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (t, text)
}

#[test]
fn stretched_segments_get_vxlan_ports_and_every_host_topology_parses() {
    let d = FleetDoc::parse(DOC, "f.yaml").unwrap();
    let at = placed(&[("r1", "h1"), ("r2", "h2"), ("r3", "h3")]);
    let vnis = crate::placement::vnis(&d.segment_names(), &HashMap::new(), &d.vnis);
    let segs = d.segments(&at, &vnis);
    assert_eq!(
        segs[0],
        Segment {
            name: "lan".into(),
            vni: 10_000,
            hosts: vec!["h1".into(), "h2".into()],
            vteps: Vec::new()
        }
    );
    assert_eq!(
        segs[1],
        Segment {
            name: "r2r3".into(),
            vni: 10_001,
            hosts: vec!["h2".into(), "h3".into()],
            vteps: Vec::new()
        }
    );
    let mut u = underlays(&[("h1", "192.0.2.1"), ("h2", "192.0.2.2"), ("h3", "192.0.2.3")]);
    u.get_mut("h2").unwrap().dev = Some("eth1".into());
    u.get_mut("h2").unwrap().mtu = Some(9000);
    let topo = |h: &str| topology_of(&d, h, &at, &segs, &u).0;
    let h1 = topo("h1");
    assert_eq!(h1.vrs.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["r1"]);
    // The anchor (r1's host) holds the switch's own port, the namespace and r1's port.
    let names: Vec<&str> = h1.ports.iter().map(|p| p.name.as_str()).collect();
    assert!(names.starts_with(&["pa", "up", "vxlan-10000"]), "{names:?}");
    let PortKind::Vxlan(vx) = &h1.ports[2].kind else { panic!() };
    assert_eq!(
        (vx.vni, vx.local.to_string(), vx.remotes.clone()),
        (10_000, "192.0.2.1".into(), vec!["192.0.2.2".parse().unwrap()])
    );
    assert_eq!(h1.hosts.len(), 1);
    // MTU accounting: the stretched interface loses VXLAN's 50 bytes; the local one does not.
    assert_eq!(h1.vrs[0].interfaces[0].mtu, 1500);
    assert_eq!(h1.vrs[0].interfaces[1].mtu, 1450);
    let h2 = topo("h2");
    let names: Vec<&str> = h2.ports.iter().map(|p| p.name.as_str()).collect();
    assert!(!names.contains(&"up") && !names.contains(&"pa"), "{names:?}");
    let PortKind::Vxlan(vx) = &h2.ports.iter().find(|p| p.name == "vxlan-10001").unwrap().kind
    else {
        panic!()
    };
    assert_eq!(
        (vx.dev.as_deref(), vx.underlay_mtu, vx.remotes.clone()),
        (Some("eth1"), 9000, vec!["192.0.2.3".parse().unwrap()])
    );
    // h2's underlay MTU is 9000: both its stretched interfaces get 8950.
    assert_eq!((h2.vrs[0].interfaces[0].mtu, h2.vrs[0].interfaces[1].mtu), (8950, 8950));
    let h3 = topo("h3");
    assert_eq!(h3.switches.len(), 1);
    assert_eq!(h3.switches[0].name, "r2r3");
    // r2 and r3 on one host: the link is a local 2-member switch whose vxlan port has no
    // remotes (it gains them, live, when r3 moves away).
    let at2 = placed(&[("r1", "h1"), ("r2", "h2"), ("r3", "h2")]);
    let segs2 = d.segments(&at2, &vnis);
    let (t, text) = topology_of(&d, "h2", &at2, &segs2, &u);
    let remotes: Vec<(&str, usize)> = (t.ports.iter())
        .filter_map(|p| match &p.kind {
            PortKind::Vxlan(vx) => Some((p.name.as_str(), vx.remotes.len())),
            _ => None,
        })
        .collect();
    assert_eq!(remotes, [("vxlan-10000", 1), ("vxlan-10001", 0)], "{text}");
    // Its interfaces keep the MTU they had while the link was stretched.
    assert_eq!((t.vrs[0].interfaces[1].mtu, t.vrs[1].interfaces[0].mtu), (8950, 8950), "{text}");
    // A host with nothing placed gets an empty topology (its VRs go).
    let (t, _) = topology_of(&d, "h9", &at, &segs, &u);
    assert!(t.vrs.is_empty() && t.ports.is_empty());
}

#[test]
fn the_example_parses_and_places() {
    let text = include_str!("../../../../examples/fleet/fleet.yaml");
    let d = FleetDoc::parse(text, "examples/fleet/fleet.yaml").unwrap();
    assert_eq!(d.links, ["r1-edge1"]);
    let u = d.units();
    assert_eq!((u[1].cpu, u[1].memory_mib), (0.25, 64));
    let hosts: Vec<crate::placement::Capacity> = ["h1", "h2", "h3"]
        .iter()
        .map(|h| crate::placement::Capacity {
            name: h.to_string(),
            cpu: 1.0,
            memory_mib: 1024,
            schedulable: true,
        })
        .collect();
    let p = crate::placement::place(&u, &hosts, &HashMap::new());
    let at: HashMap<String, String> =
        p.iter().filter_map(|x| Some((x.vr.clone(), x.host.clone()?))).collect();
    assert_eq!((at["r1"].as_str(), at["edge1"].as_str(), at["edge2"].as_str()), ("h1", "h2", "h3"));
}

/// A switch's `vteps`: VTEPs that are no routeplex host, sent to by every host holding the
/// segment (beside the other hosts, and alone when one host holds it), never by the host
/// whose underlay it is; control never sees the key. Bad ones name their position.
#[test]
fn vteps_of_a_switch_are_remotes_of_every_host_on_it() {
    let doc = DOC.replace(
        "  - name: lan\n",
        "  - name: lan\n    vteps: [192.0.2.9, 198.51.100.9, 192.0.2.2]\n",
    );
    let d = FleetDoc::parse(&doc, "f.yaml").unwrap();
    let want: Vec<IpAddr> =
        ["192.0.2.9", "198.51.100.9", "192.0.2.2"].iter().map(|a| a.parse().unwrap()).collect();
    assert_eq!(d.vteps["lan"], want);
    assert!(d.switches[0].get("vteps").is_none(), "control never sees vteps");
    let u = underlays(&[("h1", "192.0.2.1"), ("h2", "192.0.2.2")]);
    let remotes = |at: &[(&str, &str)], host: &str| {
        let at = placed(at);
        let vnis = crate::placement::vnis(&d.segment_names(), &HashMap::new(), &d.vnis);
        let segs = d.segments(&at, &vnis);
        assert_eq!(segs[0].vteps, want);
        let (t, text) = topology_of(&d, host, &at, &segs, &u);
        let p = t.ports.iter().find(|p| p.name == "vxlan-10000").expect("lan's vxlan port");
        let PortKind::Vxlan(vx) = &p.kind else { panic!("{text}") };
        vx.remotes.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    // lan on h1 alone: its remotes are the VTEPs (h2's underlay once, as a VTEP).
    let alone = [("r1", "h1"), ("r2", "h1"), ("r3", "h1")];
    assert_eq!(remotes(&alone, "h1"), ["192.0.2.9", "198.51.100.9", "192.0.2.2"]);
    // lan on h1 and h2: each has the other once, and never itself.
    let both = [("r1", "h1"), ("r2", "h2"), ("r3", "h2")];
    assert_eq!(remotes(&both, "h1"), ["192.0.2.2", "192.0.2.9", "198.51.100.9"]);
    assert_eq!(remotes(&both, "h2"), ["192.0.2.1", "192.0.2.9", "198.51.100.9"]);

    let bad = |vteps: &str| {
        err(&DOC.replace("  - name: lan\n", &format!("  - name: lan\n    vteps: {vteps}\n")))
    };
    let e = bad("[192.0.2.300]");
    assert!(
        e.starts_with("f.yaml:8:13: switches[0].vteps[0]:") && e.contains("not an IP address"),
        "{e}"
    );
    let e = bad("[0.0.0.0]");
    assert!(e.contains("vteps: 0.0.0.0 is not a unicast address"), "{e}");
    let e = bad("[239.1.1.1]");
    assert!(e.contains("vteps: 239.1.1.1 is not a unicast address"), "{e}");
    let e = bad("[192.0.2.9, 192.0.2.9]");
    assert!(e.contains("vteps: 192.0.2.9 is named twice"), "{e}");
    let many: Vec<String> = (1..=65).map(|i| format!("10.0.0.{i}")).collect();
    let e = bad(&format!("[{}]", many.join(", ")));
    assert!(e.contains("vteps: at most 64 addresses, found 65"), "{e}");
    let e = bad("nope");
    assert!(e.starts_with("f.yaml:8:"), "{e}");
}

/// A switch's `vni`: the segment's VNI in every host's vxlan port, over what the controller
/// would allocate; control never sees the key. A bad or repeated one names its position.
#[test]
fn a_switch_vni_is_its_segments_on_every_host() {
    let doc = DOC.replace("  - name: lan\n", "  - name: lan\n    vni: 4242\n");
    let d = FleetDoc::parse(&doc, "f.yaml").unwrap();
    assert_eq!(d.vnis["lan"], 4242);
    assert!(d.switches[0].get("vni").is_none(), "control never sees vni");
    let at = placed(&[("r1", "h1"), ("r2", "h2"), ("r3", "h2")]);
    let vnis = crate::placement::vnis(&d.segment_names(), &HashMap::new(), &d.vnis);
    let segs = d.segments(&at, &vnis);
    let lan = segs.iter().find(|s| s.name == "lan").expect("lan stretched");
    assert_eq!(lan.vni, 4242);
    let u = underlays(&[("h1", "192.0.2.1"), ("h2", "192.0.2.2")]);
    for host in ["h1", "h2"] {
        let (t, text) = topology_of(&d, host, &at, &segs, &u);
        let p = t.ports.iter().find(|p| p.name == "vxlan-4242").expect("lan's vxlan port");
        let PortKind::Vxlan(vx) = &p.kind else { panic!("{text}") };
        assert_eq!(vx.vni, 4242, "{text}");
    }

    let bad =
        |v: &str| err(&DOC.replace("  - name: lan\n", &format!("  - name: lan\n    vni: {v}\n")));
    let e = bad("0");
    assert!(e.starts_with("f.yaml:8:10: switches[0].vni:"), "{e}");
    assert!(e.contains("VNI 0 is out of range 1..=16777215"), "{e}");
    let e = bad("16777216");
    assert!(e.contains("VNI 16777216 is out of range 1..=16777215"), "{e}");
    let e = bad("ten");
    assert!(e.contains("must be an integer in 1..=16777215"), "{e}");
    let two =
        DOC.replace("  - name: lan\n", "  - name: lan\n    vni: 7\n  - name: wan\n    vni: 7\n");
    let e = err(&two);
    assert!(e.starts_with("f.yaml:10:10: switches[1].vni:"), "{e}");
    assert!(e.contains("VNI 7 is switch \"lan\"'s already (line 8)"), "{e}");
}
