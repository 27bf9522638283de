//! Meta-test: every drop reason (`VrDrop::ALL`, `PortDrop::ALL`) has a test that triggers it with
//! a crafted packet and asserts the whole counter set. The table is an exhaustive `match`, so a
//! new reason does not compile until it is given a test; the test below checks that each named
//! test exists in its file and that the file asserts that reason.

use dataplane::{PortDrop, VrDrop};

const SOURCES: &[(&str, &str)] = &[
    ("drops.rs", include_str!("drops.rs")),
    ("icmp.rs", include_str!("icmp.rs")),
    ("neighbors.rs", include_str!("neighbors.rs")),
    ("forwarding.rs", include_str!("forwarding.rs")),
    ("multi_vr.rs", include_str!("multi_vr.rs")),
    ("reservation.rs", include_str!("reservation.rs")),
    ("rfc.rs", include_str!("rfc.rs")),
    ("punt.rs", include_str!("punt.rs")),
    ("multipath.rs", include_str!("../multipath.rs")),
    ("ingress.rs", include_str!("ingress.rs")),
];

/// The test (file, function) that covers each VR drop reason.
fn vr_test(d: VrDrop) -> (&'static str, &'static str) {
    match d {
        VrDrop::OverBudget => ("reservation.rs", "packet_budget_forwards_exactly_k_per_period"),
        VrDrop::BatchLimit => ("reservation.rs", "batch_limit_drops_a_vrs_excess_per_burst"),
        VrDrop::IngressQueueFull => {
            ("ingress.rs", "ingress_queue_full_drops_a_vrs_excess_on_a_shared_port")
        }
        VrDrop::UnknownEthertype => ("drops.rs", "unknown_ethertype"),
        VrDrop::ArpMalformed => ("drops.rs", "arp_malformed"),
        VrDrop::ArpNotForUs => ("drops.rs", "arp_not_for_us"),
        VrDrop::Ip4BadLength => ("drops.rs", "ip4_bad_length"),
        VrDrop::Ip4BadOption => ("rfc.rs", "ip4_bad_option"),
        VrDrop::Ip4BadVersion => ("drops.rs", "ip4_bad_version"),
        VrDrop::Ip4BadChecksum => ("drops.rs", "ip4_bad_checksum"),
        VrDrop::Ip6BadLength => ("drops.rs", "ip6_bad_length"),
        VrDrop::Ip6BadVersion => ("drops.rs", "ip6_bad_version"),
        VrDrop::Ip6BadExtHeader => ("drops.rs", "ip6_bad_ext_header"),
        VrDrop::Ip6RoutingHeader => ("rfc.rs", "ip6_routing_header"),
        VrDrop::SourceBeyondScope => ("rfc.rs", "source_beyond_scope"),
        VrDrop::MartianSource => ("drops.rs", "martian_source"),
        VrDrop::MartianDestination => ("drops.rs", "martian_destination"),
        VrDrop::IpMulticast => ("drops.rs", "ip_multicast"),
        VrDrop::TtlExpired => ("icmp.rs", "time_exceeded_v4"),
        VrDrop::NoRoute => ("icmp.rs", "net_unreachable_v4_leaves_by_another_interface"),
        VrDrop::Blackhole => ("drops.rs", "blackhole"),
        VrDrop::DirectedBroadcast => ("drops.rs", "directed_broadcast"),
        VrDrop::NoNeighbor => {
            ("neighbors.rs", "unresolved_next_hop_retransmits_fails_holds_and_retries")
        }
        VrDrop::NeighborTableFull => ("neighbors.rs", "neighbor_table_full"),
        VrDrop::NeighborRateLimited => ("neighbors.rs", "solicitations_are_rate_limited"),
        VrDrop::NeighborQueueFull => {
            ("neighbors.rs", "neighbor_queue_limits_per_next_hop_and_total")
        }
        VrDrop::MtuExceeded => ("icmp.rs", "frag_needed_v4_carries_next_hop_mtu"),
        VrDrop::LocalPortUnreachable => {
            ("icmp.rs", "port_unreachable_v4_from_receiving_interface_address")
        }
        VrDrop::LocalUnsupported => ("drops.rs", "local_unsupported"),
        VrDrop::LocalFragment => ("drops.rs", "local_fragment"),
        VrDrop::ReassemblyTimeout => ("rfc.rs", "reassembly_timeout"),
        VrDrop::ReassemblyOverlap => ("rfc.rs", "reassembly_overlap"),
        VrDrop::ReassemblyTooBig => ("rfc.rs", "reassembly_too_big_and_no_context"),
        VrDrop::ReassemblyNoContext => ("rfc.rs", "reassembly_too_big_and_no_context"),
        VrDrop::IcmpMalformed => ("drops.rs", "icmp_malformed"),
        VrDrop::IcmpNotHandled => ("drops.rs", "icmp_not_handled"),
        VrDrop::NdpInvalid => ("neighbors.rs", "invalid_neighbor_discovery_is_dropped"),
        VrDrop::TxFull => ("drops.rs", "tx_full"),
        VrDrop::InterfaceDown => ("drops.rs", "interface_down"),
        VrDrop::PuntRateLimited => ("punt.rs", "punt_rate_limited"),
        VrDrop::Prohibited => ("multipath.rs", "unreachable_and_prohibit_routes_answer_with_icmp"),
    }
}

fn port_test(d: PortDrop) -> (&'static str, &'static str) {
    match d {
        PortDrop::Runt => ("drops.rs", "runt"),
        PortDrop::VlanUnknown => ("drops.rs", "vlan_unknown"),
        PortDrop::NotForUs => ("drops.rs", "not_for_us"),
    }
}

/// The body of `#[test] fn name()` in `file`, up to the next test.
fn body(file: &str, name: &str) -> &'static str {
    let src = SOURCES
        .iter()
        .find(|(f, _)| *f == file)
        .unwrap_or_else(|| panic!("{file} is not listed"))
        .1;
    let head = format!("#[test]\nfn {name}()");
    let start = src.find(&head).unwrap_or_else(|| panic!("{file} has no test `{name}`"));
    let rest = &src[start + head.len()..];
    let end = rest.find("#[test]").unwrap_or(rest.len());
    &rest[..end]
}

/// `Lab::check` compares every counter; `vr_drops`/`port_drops` (drops.rs) call it per frame.
fn asserts_counters(body: &str) -> bool {
    ["check(", "vr_drops(", "port_drops("].iter().any(|s| body.contains(s))
}

#[test]
fn every_drop_reason_has_a_test() {
    for &d in VrDrop::ALL {
        let (file, name) = vr_test(d);
        let b = body(file, name);
        let variant = format!("VrDrop::{d:?}");
        assert!(b.contains(&variant), "{file}::{name} never mentions {variant}");
        assert!(asserts_counters(b), "{file}::{name} ({}) does not assert the counters", d.name());
    }
    for &d in PortDrop::ALL {
        let (file, name) = port_test(d);
        let b = body(file, name);
        let variant = format!("PortDrop::{d:?}");
        assert!(b.contains(&variant), "{file}::{name} never mentions {variant}");
        assert!(asserts_counters(b), "{file}::{name} ({}) does not assert the counters", d.name());
    }
    assert_eq!(VrDrop::ALL.len(), VrDrop::COUNT);
    assert_eq!(PortDrop::ALL.len(), PortDrop::COUNT);
}
