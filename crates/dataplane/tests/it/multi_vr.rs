//! Three VRs on one engine, OPTE style: after every step every VR's and every port's counters
//! are compared whole, the accounting invariant is checked, and the tables are dumped on a
//! mismatch.
//!
//! ```text
//!             port 0 (shared)                       uplinks
//!   red   r0  untagged  RA  10.1.0.1/24     r1  port 1  RB  10.9.0.1/24  gw 10.9.0.2 (ARP)
//!   green g0  untagged  GA  10.2.0.1/24     g1  port 3  GB  172.16.0.1/24 gw .2 (static), ring of 2
//!   blue  b0  VLAN 20   RA  10.1.0.1/24     b1  port 2  BB  10.9.0.1/24  gw 10.9.0.2 (static)
//! ```
//! Red and green share port 0 by MAC; blue uses red's MAC on VLAN 20. Red and blue have the same
//! addresses, and so do their hosts: isolation is by VR.

use crate::common;

use common::*;
use dataplane::config::{VrConfig, VrLimits};
use dataplane::{NeighborState, PortDrop, VrDrop};

const RA: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const RB: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 2];
const GA: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 1];
const GB: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 2];
const BB: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
const HR: [u8; 6] = [0x02, 0x10, 0, 0, 0, 1];
const HB: [u8; 6] = [0x02, 0x10, 0, 0, 0, 2];
const HG: [u8; 6] = [0x02, 0x10, 0, 0, 0, 3];
const RGW: [u8; 6] = [0x02, 0x20, 0, 0, 0, 1];
const BGW: [u8; 6] = [0x02, 0x20, 0, 0, 0, 2];
const GGW: [u8; 6] = [0x02, 0x20, 0, 0, 0, 3];
const RED: usize = 0;
const GREEN: usize = 1;
const BLUE: usize = 2;
const BV: u16 = 20;

fn vrs() -> Vec<VrConfig> {
    vec![
        VrConfig {
            name: "red".into(),
            interfaces: vec![
                iface("r0", 0, None, RA, 1500, &["10.1.0.1/24"], &[]),
                iface("r1", 1, None, RB, 1500, &["10.9.0.1/24"], &[]),
            ],
            routes: vec![via("0.0.0.0/0", "10.9.0.2")],
            neighbors: vec![],
            limits: VrLimits::default(),
        },
        VrConfig {
            name: "green".into(),
            interfaces: vec![
                iface("g0", 0, None, GA, 1500, &["10.2.0.1/24"], &[]),
                iface("g1", 3, None, GB, 1500, &["172.16.0.1/24"], &[]),
            ],
            routes: vec![via("0.0.0.0/0", "172.16.0.2")],
            neighbors: vec![neigh(1, "172.16.0.2", GGW), neigh(0, "10.2.0.10", HG)],
            limits: VrLimits::default(),
        },
        VrConfig {
            name: "blue".into(),
            interfaces: vec![
                iface("b0", 0, Some(BV), RA, 1500, &["10.1.0.1/24"], &[]),
                iface("b1", 2, None, BB, 1500, &["10.9.0.1/24"], &[]),
            ],
            routes: vec![via("8.0.0.0/8", "10.9.0.2")],
            neighbors: vec![neigh(1, "10.9.0.2", BGW)],
            limits: VrLimits::default(),
        },
    ]
}

#[test]
fn three_vrs_share_ports_and_stay_isolated() {
    let mut lab = Lab::new(&vrs(), &[64, 64, 64, 2]);
    lab.now = 10 * MS;

    // Step 1: ARP. Each broadcast request reaches exactly the VR interface owning its target.
    let a_red = arp_request_frame(HR, "10.1.0.10", "10.1.0.1", None);
    let a_blue = arp_request_frame(HB, "10.1.0.10", "10.1.0.1", Some(BV));
    let a_green = arp_request_frame(HG, "10.2.0.10", "10.2.0.1", None);
    lab.send(0, &[a_red.clone(), a_blue.clone(), a_green.clone()]);
    lab.run();
    lab.expect(
        0,
        &[
            eth(HR, RA, None, ET_ARP, &arp(2, RA, "10.1.0.1", HR, "10.1.0.10")),
            eth(HB, RA, Some(BV), ET_ARP, &arp(2, RA, "10.1.0.1", HB, "10.1.0.10")),
            eth(HG, GA, None, ET_ARP, &arp(2, GA, "10.2.0.1", HG, "10.2.0.10")),
        ],
    );
    lab.expect_silence();
    for (v, f) in [(RED, &a_red), (BLUE, &a_blue), (GREEN, &a_green)] {
        lab.rx(v, f);
        let c = lab.c(v);
        c.local_in += 1;
        c.neighbor_replies += 1;
        // green's host is a static neighbor: not learned
        c.neighbors_learned += (v != GREEN) as u64;
    }
    lab.check("1: ARP");
    let red_host = lab.neighbor(RED, "10.1.0.10").unwrap();
    let blue_host = lab.neighbor(BLUE, "10.1.0.10").unwrap();
    assert_eq!((red_host.mac, red_host.state), (Some(mac(HR)), NeighborState::Stale));
    assert_eq!((blue_host.mac, blue_host.state), (Some(mac(HB)), NeighborState::Stale));

    // Step 2: the same destination, three VRs, three ways out. Red's gateway is unresolved.
    let p_red = udp4_pkt("10.1.0.10", "8.8.8.8", 64, b"red");
    let p_blue = udp4_pkt("10.1.0.10", "8.8.8.8", 64, b"blue");
    let p_green = udp4_pkt("10.2.0.10", "8.8.8.8", 64, b"green");
    let f_red = to_vr(RA, HR, None, &p_red);
    let f_blue = to_vr(RA, HB, Some(BV), &p_blue);
    let f_green = to_vr(GA, HG, None, &p_green);
    lab.send(0, &[f_red.clone(), f_blue.clone(), f_green.clone()]);
    lab.run();
    lab.expect(
        1,
        &[eth(BROADCAST, RB, None, ET_ARP, &arp(1, RB, "10.9.0.1", ZERO_MAC, "10.9.0.2"))],
    );
    let o_blue = eth(BGW, BB, None, ET_IP4, &p_blue.hop().bytes());
    let o_green = eth(GGW, GB, None, ET_IP4, &p_green.hop().bytes());
    lab.expect(2, &[&o_blue]);
    lab.expect(3, &[&o_green]);
    lab.expect_silence();
    lab.rx(RED, &f_red);
    lab.c(RED).queued += 1;
    lab.c(RED).neighbor_requests += 1;
    lab.transit_queued[RED] = 1;
    lab.queued[RED] = 1;
    lab.rx(BLUE, &f_blue);
    lab.fwd(BLUE, &o_blue);
    lab.rx(GREEN, &f_green);
    lab.fwd(GREEN, &o_green);
    lab.check("2: routed per VR, red resolving");
    assert_eq!(lab.neighbor(RED, "10.9.0.2").unwrap().state, NeighborState::Incomplete);

    // Red's gateway answers: the queued packet leaves.
    lab.now += MS;
    let rep = pad60(eth(RB, RGW, None, ET_ARP, &arp(2, RGW, "10.9.0.2", RB, "10.9.0.1")));
    lab.send(1, &[&rep]);
    lab.run();
    let o_red = eth(RGW, RB, None, ET_IP4, &p_red.hop().bytes());
    lab.expect(1, &[&o_red]);
    lab.expect_silence();
    lab.rx(RED, &rep);
    lab.fwd(RED, &o_red);
    lab.c(RED).local_in += 1;
    lab.c(RED).neighbors_learned += 1;
    lab.transit_queued[RED] = 0;
    lab.queued[RED] = 0;
    lab.check("2b: red resolved");

    // Step 3: TTL expiry in green, no route in blue, pings to red and blue (same address).
    let ttl1 = udp4_pkt("10.2.0.10", "8.8.4.4", 1, b"dies in green");
    let lost = udp4_pkt("10.1.0.10", "9.9.9.9", 64, b"no route in blue");
    let ping_red = Ip4::new("10.1.0.10", "10.1.0.1", 64, 1, echo4_req(1, 1, b"red?"));
    let ping_blue = Ip4::new("10.1.0.10", "10.1.0.1", 64, 1, echo4_req(2, 1, b"blue?"));
    let frames = vec![
        to_vr(GA, HG, None, &ttl1),
        to_vr(RA, HB, Some(BV), &lost),
        to_vr(RA, HR, None, &ping_red),
        to_vr(RA, HB, Some(BV), &ping_blue),
    ];
    lab.send(0, &frames);
    lab.run();
    let rep = |src: &str, id: u16, icmp: Vec<u8>| {
        Ip4 { id, ..Ip4::new(src, "10.1.0.10", 64, 1, icmp) }.bytes()
    };
    // Red and blue learned their hosts from ARP requests (stale): the replies are their first
    // use, so each VR also probes its host by unicast.
    let probe = |vlan, h| eth(h, RA, vlan, ET_ARP, &arp(1, RA, "10.1.0.1", ZERO_MAC, "10.1.0.10"));
    lab.expect_then_any(
        0,
        &[
            eth(
                HG,
                GA,
                None,
                ET_IP4,
                &icmp4_error("10.2.0.1", a4("10.2.0.10"), 1, ttl_exceeded4(), &ttl1.bytes()),
            ),
            eth(
                HB,
                RA,
                Some(BV),
                ET_IP4,
                &icmp4_error("10.1.0.1", a4("10.1.0.10"), 1, net_unreach4(), &lost.bytes()),
            ),
            eth(HR, RA, None, ET_IP4, &rep("10.1.0.1", 1, echo4_rep(1, 1, b"red?"))),
            eth(HB, RA, Some(BV), ET_IP4, &rep("10.1.0.1", 2, echo4_rep(2, 1, b"blue?"))),
        ],
        &[probe(None, HR), probe(Some(BV), HB)],
    );
    lab.c(RED).neighbor_requests += 1;
    lab.c(BLUE).neighbor_requests += 1;
    lab.expect_silence();
    lab.rx(GREEN, &frames[0]);
    lab.drop(GREEN, VrDrop::TtlExpired);
    lab.c(GREEN).icmp_errors += 1;
    lab.rx(BLUE, &frames[1]);
    lab.drop(BLUE, VrDrop::NoRoute);
    lab.c(BLUE).icmp_errors += 1;
    for (v, f) in [(RED, &frames[2]), (BLUE, &frames[3])] {
        lab.rx(v, f);
        lab.c(v).local_in += 1;
        lab.c(v).echo_replies += 1;
    }
    lab.check("3: errors and pings");

    // Step 4: green's uplink ring holds 2 frames: 2 of 4 leave, 2 count tx_full.
    let pkts: Vec<Ip4> = (0..4).map(|i| udp4_pkt("10.2.0.10", "1.1.1.1", 64, &[i])).collect();
    let frames: Vec<Vec<u8>> = pkts.iter().map(|p| to_vr(GA, HG, None, p)).collect();
    lab.send(0, &frames);
    lab.run();
    let outs: Vec<Vec<u8>> =
        pkts.iter().map(|p| eth(GGW, GB, None, ET_IP4, &p.hop().bytes())).collect();
    lab.expect(3, &outs[..2]);
    lab.expect_silence();
    for (i, f) in frames.iter().enumerate() {
        lab.rx(GREEN, f);
        if i < 2 {
            lab.fwd(GREEN, &outs[i]);
        } else {
            lab.drop(GREEN, VrDrop::TxFull);
        }
    }
    lab.check("4: full ring");

    // Step 5: classification drops on the shared port, and blue's addresses on red's VLAN.
    let stray = [
        to_vr([0x02, 0xee, 0, 0, 0, 1], HR, None, &p_red),
        to_vr(RA, HR, Some(30), &p_red),
        arp_request_frame(HR, "10.1.0.10", "10.9.0.1", None), // an uplink address, not on port 0
        arp_request_frame(HG, "10.2.0.10", "10.2.0.1", Some(BV)), // green's address on blue's VLAN
        vec![0; 10],
    ];
    lab.send(0, &stray);
    lab.run();
    lab.expect_silence();
    lab.pdrop(0, PortDrop::NotForUs);
    lab.pdrop(0, PortDrop::VlanUnknown);
    lab.pdrop(0, PortDrop::NotForUs);
    lab.pdrop(0, PortDrop::NotForUs);
    lab.pdrop(0, PortDrop::Runt);
    lab.check("5: classification");

    // Step 6: red's host pings blue's uplink address through red: red answers only for its own
    // addresses, so it is routed out of red's uplink, not delivered to blue.
    let p = Ip4::new("10.1.0.10", "10.9.0.3", 64, 1, echo4_req(3, 3, b"cross?"));
    let f = to_vr(RA, HR, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    // 10.9.0.3 is on red's connected uplink subnet: it is resolved, not sent to the gateway.
    lab.expect(
        1,
        &[eth(BROADCAST, RB, None, ET_ARP, &arp(1, RB, "10.9.0.1", ZERO_MAC, "10.9.0.3"))],
    );
    lab.expect_silence();
    lab.rx(RED, &f);
    lab.c(RED).queued += 1;
    lab.c(RED).neighbor_requests += 1;
    lab.transit_queued[RED] = 1;
    lab.queued[RED] = 1;
    lab.check("6: no leak between VRs");

    // Step 7: time passes; red's request fails after 3 tries (1 s apart), the rest is quiet.
    for s in 1..=3u64 {
        lab.run_at(lab.now + 1_000 * MS);
        if s < 3 {
            lab.expect(
                1,
                &[eth(BROADCAST, RB, None, ET_ARP, &arp(1, RB, "10.9.0.1", ZERO_MAC, "10.9.0.3"))],
            );
            lab.c(RED).neighbor_requests += 1;
        } else {
            // The packet is answered with host unreachable (RFC 1812 §4.3.3.1), red's second
            // ICMP message; its requester's entry is stale by now, so a unicast probe follows.
            let t = etherparse::Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::Host,
            );
            let err = icmp4_error("10.1.0.1", p.src, 2, t, &p.bytes());
            lab.expect(
                0,
                &[
                    eth(HR, RA, None, ET_IP4, &err),
                    eth(HR, RA, None, ET_ARP, &arp(1, RA, "10.1.0.1", ZERO_MAC, "10.1.0.10")),
                ],
            );
            lab.c(RED).icmp_errors += 1;
            lab.c(RED).neighbor_requests += 1;
        }
        lab.expect_silence();
    }
    lab.drop(RED, VrDrop::NoNeighbor);
    lab.transit_queued[RED] = 0;
    lab.queued[RED] = 0;
    lab.check("7: red's neighbor failed");
}
