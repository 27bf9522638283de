//! Building an engine: inconsistent configurations are refused with a `BuildError` (never a
//! panic), consistent ones are accepted.

use crate::common;

use common::*;
use dataplane::config::{NeighborConfig, VrConfig};
use dataplane::{Engine, Vr};
use ports::mem;
use ports::Port;

fn ports(n: usize) -> Vec<Box<dyn Port>> {
    (0..n).map(|i| Box::new(mem::pair(&format!("p{i}"), "h", 4).0) as Box<dyn Port>).collect()
}

#[track_caller]
fn refused(vrs: &[VrConfig], nports: usize, why: &str) {
    match Engine::from_configs(ports(nports), vrs) {
        Ok(_) => panic!("accepted: {why}"),
        Err(e) => assert!(!e.to_string().is_empty(), "{why}: empty message"),
    }
}

#[track_caller]
fn refused_because(vrs: &[VrConfig], nports: usize, needle: &str) {
    match Engine::from_configs(ports(nports), vrs) {
        Ok(_) => panic!("accepted, expected an error mentioning {needle:?}"),
        Err(e) => assert!(e.to_string().contains(needle), "{e} does not mention {needle:?}"),
    }
}

#[test]
fn inconsistent_configurations_are_refused() {
    let mut c = base_vr();
    c.interfaces[2].port = 3;
    refused(&[c], 3, "interface on a port that does not exist");

    let mut c = base_vr();
    c.routes.push(via("100.64.0.0/10", "192.168.77.1"));
    refused(&[c], 3, "gateway on no connected subnet");

    let mut c = base_vr();
    c.routes.push(via_if("100.64.0.0/10", "10.0.0.77", 9));
    refused(&[c], 3, "route through an interface that does not exist");

    let mut c = base_vr();
    c.routes.push(out_iface("100.64.0.0/10", 9));
    refused(&[c], 3, "Iface route to an interface that does not exist");

    let mut c = base_vr();
    c.neighbors.push(NeighborConfig { iface: 7, ip: ip("10.0.0.99"), mac: mac(H3) });
    refused(&[c], 3, "static neighbor on an interface that does not exist");

    let mut c = base_vr();
    c.limits.neighbors = 2;
    refused(&[c], 3, "more static neighbors than the table holds");

    let mut other = base_vr();
    other.name = "r2".into();
    refused(&[base_vr(), other], 3, "two VRs share (port, VLAN, MAC)");

    // Other MACs, same addresses on the same segments: ARP for them could reach one only.
    let mut other = base_vr();
    other.name = "r2".into();
    for f in &mut other.interfaces {
        f.mac.0[0] = 0x06;
    }
    refused_because(&[base_vr(), other], 3, "and address 10.0.0.1");

    let mut c = base_vr();
    c.interfaces[0].mtu = 1279;
    refused_because(&[c], 3, "MTU 1279, outside 1280..=9216");
    let mut c = base_vr();
    c.interfaces[0].mtu = dataplane::config::MAX_MTU + 1;
    refused_because(&[c], 3, "MTU 9217, outside 1280..=9216");

    for burst in [0, 257, 10_000] {
        let r = Engine::with_burst(ports(3), vec![Vr::new(&base_vr()).unwrap()], burst);
        assert!(r.is_err(), "burst {burst} accepted");
    }
}

#[test]
fn consistent_configurations_are_accepted() {
    // Same MAC on another VLAN of the same port, and on another port: distinct interfaces.
    let mut other = base_vr();
    other.name = "r2".into();
    for (i, f) in other.interfaces.iter_mut().enumerate() {
        f.vlan = Some(300 + i as u16);
    }
    let e = Engine::from_configs(ports(3), &[base_vr(), other]).unwrap();
    assert_eq!(e.vrs().len(), 2);
    assert!(e.vr("r2").is_some() && e.vr("nope").is_none());
    assert_eq!(e.port_count(), 3);
    for burst in [1, 2, 256] {
        assert!(Engine::with_burst(ports(3), vec![Vr::new(&base_vr()).unwrap()], burst).is_ok());
    }
    // Static neighbors show up as such.
    let rows = e.vrs()[0].neighbors();
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r.state == dataplane::NeighborState::Static && r.queued == 0));
}

#[test]
fn a_port_is_switched_or_demuxed_never_both() {
    use dataplane::{MemberConfig, MemberMode, Switch, SwitchConfig};
    let sw = |name: &str, ports: &[u16]| {
        Switch::new(&SwitchConfig {
            name: name.into(),
            members: ports
                .iter()
                .map(|&port| MemberConfig { port, mode: MemberMode::Access { vlan: 1 } })
                .collect(),
            statics: Vec::new(),
            mac_limit: 16,
            aging_ms: 1000,
            snooping: true,
            groups: 4,
            group_timeout_ms: 1000,
        })
        .unwrap()
    };
    let vr = || vec![Vr::new(&base_vr()).unwrap()];
    let err = |r: Result<Engine, dataplane::BuildError>| {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert!(err(Engine::build(ports(4), vr(), vec![sw("s", &[0, 3])], 256))
        .contains("port 0 carries VR interfaces"));
    assert!(err(Engine::build(ports(5), vr(), vec![sw("s", &[3, 4]), sw("t", &[4])], 256))
        .contains("switch t: port 4 is already a member of switch s"));
    assert!(err(Engine::build(ports(4), vr(), vec![sw("s", &[3, 9])], 256))
        .contains("port 9 does not exist"));
    assert!(Engine::build(ports(5), vr(), vec![sw("s", &[3, 4])], 256).is_ok());
    let bad_vlan = SwitchConfig {
        name: "v".into(),
        members: vec![MemberConfig { port: 0, mode: MemberMode::Access { vlan: 4095 } }],
        statics: Vec::new(),
        mac_limit: 1,
        aging_ms: 1,
        snooping: false,
        groups: 0,
        group_timeout_ms: 0,
    };
    let e = Switch::new(&bad_vlan).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("VLAN 4095, outside 1..=4094"), "{e}");
}
