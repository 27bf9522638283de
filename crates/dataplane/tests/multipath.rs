//! Routes a control plane's kernel holds that a plain next hop cannot say, with byte-exact
//! frames and every counter asserted: an ECMP route spreads flows over its next hops by the
//! flow hash, each flow staying on one (no allocation per packet); unreachable and prohibit
//! routes answer with ICMP destination unreachable (net unreachable / administratively
//! prohibited), rate-limited as every ICMP error.

#[path = "../../ports/tests/alloc_count/mod.rs"]
mod alloc_count;
mod common;

use common::*;
use dataplane::config::RouteTarget;
use dataplane::{Forward, RouteOp, RouteSource, RouteTable, Vr, VrChange, VrDrop};
use etherparse::{icmpv4, icmpv6, Icmpv4Type, Icmpv6Type};

const RINGS: [usize; 3] = [1024, 1024, 1024];

/// The base VR, driven through a route table as the control plane drives it, with `ops`
/// applied (their adjacencies installed before the FIB is published).
fn lab_with(ops: &[RouteOp]) -> (Lab, RouteTable) {
    let cfg = base_vr();
    let mut lab = Lab::new(std::slice::from_ref(&cfg), &RINGS);
    let mut table = RouteTable::new(&cfg).unwrap();
    let vr = Vr::with_routes(&cfg, table.view()).unwrap();
    lab.e.cell_mut().replace_vr(0, vr).unwrap();
    let cell = lab.e.cell_mut();
    table
        .apply(ops, |new| {
            cell.change_vr(0, VrChange::Adjacencies(new.to_vec()))
                .map(drop)
                .map_err(|e| dataplane::InstallError(e.0))
        })
        .unwrap();
    (lab, table)
}

fn via(gw: &str) -> RouteTarget {
    RouteTarget::Via { gateway: ip(gw), iface: None }
}

fn set(prefix: &str, forward: Forward) -> RouteOp {
    RouteOp::Set { prefix: prefix.parse().unwrap(), source: RouteSource::Kernel, forward }
}

/// UDP flow `f` from a host behind lan to 9.1.2.3.
fn flow(f: u16) -> Ip4 {
    Ip4::new("10.0.0.10", "9.1.2.3", 64, 17, udp4("10.0.0.10", "9.1.2.3", 1000 + f, 53, b"ecmp"))
}

#[test]
fn ecmp_spreads_flows_and_keeps_each_on_one_next_hop() {
    // Two equal next hops: the gateway on wan (port 1) and one on v100 (port 2, tagged).
    let paths = Forward::Paths(vec![(via("10.0.1.2"), 1), (via("10.0.2.2"), 1)]);
    let (mut lab, table) = lab_with(&[set("9.0.0.0/8", paths)]);
    assert_eq!(table.counts()[4], (RouteSource::Kernel, 1));
    const FLOWS: u16 = 64;
    let frames: Vec<Vec<u8>> = (0..FLOWS).map(|f| to_vr(M0, H0, None, &flow(f))).collect();
    let by_wan: Vec<Vec<u8>> =
        (0..FLOWS).map(|f| eth(GW, M1, None, ET_IP4, &flow(f).hop().bytes())).collect();
    let by_v100: Vec<Vec<u8>> =
        (0..FLOWS).map(|f| eth(H2, M2, Some(VLAN), ET_IP4, &flow(f).hop().bytes())).collect();
    // Per flow: packets seen on wan and on v100, over three rounds.
    let mut seen = vec![[0u32; 2]; FLOWS as usize];
    for round in 0..3 {
        lab.send(0, &frames);
        if round == 0 {
            lab.run();
        } else {
            // Forwarding by the flow hash allocates nothing (after the first round).
            let allocs = alloc_count::allocations(|| lab.run());
            assert_eq!(allocs, 0, "round {round}");
        }
        for (port, want, k) in [(1, &by_wan, 0), (2, &by_v100, 1)] {
            let got = lab.recv(port);
            for g in &got {
                let f = want.iter().position(|w| w == g).unwrap_or_else(|| {
                    panic!("port {port}: a frame that is no flow's, byte for byte: {g:02x?}")
                });
                seen[f][k] += 1;
                lab.fwd(0, g);
            }
            lab.port[port].tx_packets += got.len() as u64;
        }
        for f in &frames {
            lab.rx(0, f);
        }
    }
    lab.expect_silence();
    lab.check("ecmp");
    for (f, s) in seen.iter().enumerate() {
        assert!(matches!(s, [3, 0] | [0, 3]), "flow {f} went {s:?} (wan, v100)");
    }
    let on_wan = seen.iter().filter(|s| s[0] > 0).count();
    assert!(on_wan > 0 && on_wan < FLOWS as usize, "{on_wan} of {FLOWS} flows on wan");

    // Weighted 3:1, and the route listed by its first next hop, read back whole.
    let (_, table) = lab_with(&[set(
        "9.0.0.0/8",
        Forward::Paths(vec![(via("10.0.1.2"), 3), (via("10.0.2.2"), 1)]),
    )]);
    let ops = table.ops_of(RouteSource::Kernel);
    let wan = RouteTarget::Via { gateway: ip("10.0.1.2"), iface: Some(1) };
    let v100 = RouteTarget::Via { gateway: ip("10.0.2.2"), iface: Some(2) };
    assert_eq!(ops, vec![set("9.0.0.0/8", Forward::Paths(vec![(wan, 11), (v100, 3)]))]);
}

#[test]
fn ecmp_next_hops_are_freed_with_their_route() {
    // Gateways no other route uses.
    let paths = Forward::Paths(vec![(via("10.0.1.3"), 1), (via("10.0.1.4"), 1)]);
    let (_, mut table) = lab_with(&[]);
    let base = table.next_hops();
    table
        .apply(&[set("9.0.0.0/8", paths.clone())], |n| {
            assert_eq!(n.len(), 3, "two gateways and the multipath adjacency");
            Ok(())
        })
        .unwrap();
    // Shared by a second route: nothing new.
    table
        .apply(&[set("7.0.0.0/8", paths)], |n| {
            assert!(n.is_empty());
            Ok(())
        })
        .unwrap();
    assert_eq!(table.next_hops(), base + 3);
    let del = |p: &str| RouteOp::Delete { prefix: p.parse().unwrap(), source: RouteSource::Kernel };
    table.apply(&[del("9.0.0.0/8")], |_| Ok(())).unwrap();
    assert_eq!(table.next_hops(), base + 3, "still used by 7/8");
    table.apply(&[del("7.0.0.0/8")], |_| Ok(())).unwrap();
    assert_eq!(table.next_hops(), base, "the group and its gateways were freed");
    // Bad sets are refused whole.
    let bh = Forward::Paths(vec![(via("10.0.1.2"), 1), (RouteTarget::Blackhole, 1)]);
    let e = table.apply(&[set("9.0.0.0/8", bh)], |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("cannot be a blackhole"), "{e}");
    let many: Vec<_> = (0..15).map(|k| (via(&format!("10.0.1.{}", 10 + k)), 1)).collect();
    let e = table.apply(&[set("9.0.0.0/8", Forward::Paths(many))], |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("15 next hops: at most 14"), "{e}");
}

fn prohibited4() -> Icmpv4Type {
    Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::FilterProhibited)
}

#[test]
fn unreachable_and_prohibit_routes_answer_with_icmp() {
    let (mut lab, _) = lab_with(&[
        set("9.9.0.0/16", Forward::Unreachable),
        set("9.8.0.0/16", Forward::Prohibit),
        set("2a00::/16", Forward::Prohibit),
        set("2a01::/16", Forward::Unreachable),
    ]);
    let cases = [
        ("9.9.1.1", net_unreach4(), VrDrop::NoRoute),
        ("9.8.1.1", prohibited4(), VrDrop::Prohibited),
    ];
    for (id, (dst, t, why)) in cases.into_iter().enumerate() {
        let p = udp4_pkt("10.0.0.10", dst, 64, b"rejected");
        let f = to_vr(M0, H0, None, &p);
        let err = icmp4_error("10.0.0.1", a4("10.0.0.10"), id as u16 + 1, t, &p.bytes());
        lab.send(0, std::slice::from_ref(&f));
        lab.run();
        lab.expect(0, &[eth(H0, M0, None, ET_IP4, &err)]);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, why);
        lab.c(0).icmp_errors += 1;
        lab.check(dst);
    }
    let v6 = [
        ("2a00::1", icmpv6::DestUnreachableCode::Prohibited, VrDrop::Prohibited),
        ("2a01::1", icmpv6::DestUnreachableCode::NoRoute, VrDrop::NoRoute),
    ];
    for (dst, code, why) in v6 {
        let p = udp6_pkt("2001:db8::10", dst, 64, b"rejected");
        let f = to_vr6(M0, H0, None, &p);
        let t = Icmpv6Type::DestinationUnreachable(code);
        let err = icmp6_error("2001:db8::1", a6("2001:db8::10"), t, &p.bytes());
        lab.send(0, std::slice::from_ref(&f));
        lab.run();
        lab.expect(0, &[eth(H0, M0, None, ET_IP6, &err)]);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, why);
        lab.c(0).icmp_errors += 1;
        lab.check(dst);
    }
    // A burst beyond the ICMP error budget: the rest are dropped silently, still counted.
    let burst = 300usize;
    let frames: Vec<Vec<u8>> = (0..burst)
        .map(|k| to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "9.8.1.1", 64, &[k as u8; 8])))
        .collect();
    lab.send(0, &frames);
    lab.run();
    let sent = lab.recv(0).len();
    lab.port[0].tx_packets += sent as u64;
    assert!(sent > 0 && sent < burst, "{sent} errors for {burst} packets");
    for f in &frames {
        lab.rx(0, f);
        lab.drop(0, VrDrop::Prohibited);
    }
    lab.c(0).icmp_errors += sent as u64;
    lab.c(0).icmp_errors_suppressed += (burst - sent) as u64;
    lab.check("rate limited");
}
