//! Punt and inject: a VR interface with a Linux control-plane mirror hands what the data plane
//! does not answer itself (TCP/UDP to its addresses, other protocols, link-local multicast,
//! ICMP it does not answer, ARP replies and neighbor advertisements) to the mirror's port,
//! unchanged but untagged, within a per-VR token bucket; frames from the mirror leave by the
//! interface's port with its VLAN tag and MAC. Interfaces without a mirror behave as before.

use crate::common;

use common::*;
use dataplane::VrDrop;
use etherparse::Icmpv6Type;

/// Ports 0..=2 as in `base_vr`; 3 mirrors `lan` (port 0), 4 mirrors `v100` (port 2, VLAN 100).
const RINGS: [usize; 5] = [256; 5];
const LAN_MIRROR: usize = 3;
const V100_MIRROR: usize = 4;

fn lab(mirror_v100: bool) -> Lab {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    lab.e.cell_mut().attach_mirror(0, 0, LAN_MIRROR as u16).unwrap();
    if mirror_v100 {
        lab.e.cell_mut().attach_mirror(0, 2, V100_MIRROR as u16).unwrap();
    }
    lab
}

fn tcp_syn(src: &str, dst: &str) -> Ip4 {
    let mut p = Ip4::new(src, dst, 64, 6, vec![0; 20]);
    p.payload[12] = 0x50;
    p.payload[13] = 0x02;
    p
}

/// Sends `f` on `port`; it must come out of `mirror` as `want`, counted as punted.
#[track_caller]
fn punted(lab: &mut Lab, port: usize, mirror: usize, f: &[u8], want: &[u8], what: &str) {
    lab.send(port, &[f]);
    lab.run();
    lab.expect(mirror, &[want]);
    lab.expect_silence();
    lab.rx(0, f);
    lab.c(0).local_in += 1;
    lab.c(0).punted += 1;
    lab.check(what);
}

#[test]
fn what_the_data_plane_does_not_answer_goes_to_the_mirror() {
    let mut lab = lab(true);
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let frames = [
        ("TCP SYN (BGP, SSH)", to_vr(M0, H0, None, &tcp_syn("10.0.0.10", "10.0.0.1"))),
        ("UDP (BFD)", to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "10.0.0.1", 255, b"bfd"))),
        ("GRE", to_vr(M0, H0, None, &Ip4::new("10.0.0.10", "10.0.1.1", 64, 47, vec![0; 8]))),
        (
            "echo reply",
            to_vr(M0, H0, None, &Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_rep(7, 1, b"hi"))),
        ),
        (
            "OSPF hello to 224.0.0.5",
            eth(
                [0x01, 0, 0x5e, 0, 0, 5],
                H0,
                None,
                ET_IP4,
                &Ip4::new("10.0.0.10", "224.0.0.5", 1, 89, vec![0; 44]).bytes(),
            ),
        ),
        ("IPv6 TCP", to_vr6(M0, H0, None, &Ip6::new(h, r, 64, 6, vec![0; 20]))),
        (
            "OSPFv3 to ff02::5",
            eth(
                [0x33, 0x33, 0, 0, 0, 5],
                H0,
                None,
                ET_IP6,
                &Ip6::new(eui64_ll(H0), a6("ff02::5"), 1, 89, vec![0; 16]).bytes(),
            ),
        ),
        (
            "IPv6 echo reply",
            to_vr6(M0, H0, None, &Ip6::new(h, r, 64, 58, echo6_rep(h, r, 7, 1, b"hi"))),
        ),
        (
            "router advertisement to ff02::1",
            eth(
                [0x33, 0x33, 0, 0, 0, 1],
                H0,
                None,
                ET_IP6,
                &Ip6::new(
                    eui64_ll(H0),
                    a6("ff02::1"),
                    255,
                    58,
                    icmp6(
                        Icmpv6Type::RouterAdvertisement(
                            etherparse::icmpv6::RouterAdvertisementHeader {
                                cur_hop_limit: 64,
                                managed_address_config: false,
                                other_config: false,
                                router_lifetime: 0,
                            },
                        ),
                        eui64_ll(H0),
                        a6("ff02::1"),
                        &[0; 8],
                    ),
                )
                .bytes(),
            ),
        ),
    ];
    for (what, f) in &frames {
        punted(&mut lab, 0, LAN_MIRROR, f, f, what);
    }
    // Tagged on the wire, untagged into the mirror.
    let f = to_vr(M2, H2, Some(VLAN), &tcp_syn("10.0.2.2", "10.0.2.1"));
    let want = to_vr(M2, H2, None, &tcp_syn("10.0.2.2", "10.0.2.1"));
    punted(&mut lab, 2, V100_MIRROR, &f, &want, "tagged TCP");
    // An ARP reply to the VR is learned by the data plane and handed on, so the mirror's
    // kernel learns its neighbor too.
    let f = pad60(eth(M0, H3, None, ET_ARP, &arp(2, H3, "10.0.0.20", M0, "10.0.0.1")));
    lab.c(0).neighbors_learned += 1;
    punted(&mut lab, 0, LAN_MIRROR, &f, &f, "ARP reply");
    assert_eq!(lab.neighbor(0, "10.0.0.20").map(|n| n.mac), Some(Some(mac(H3))));
}

#[test]
fn what_the_data_plane_answers_stays_there() {
    let mut lab = lab(false);
    // Echo requests are answered by the data plane, not punted.
    let req = to_vr(M0, H0, None, &Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 1, b"x")));
    lab.send(0, &[&req]);
    lab.run();
    assert_eq!(lab.recv(0).len(), 1, "one echo reply");
    lab.port[0].tx_packets += 1;
    lab.expect_silence();
    lab.rx(0, &req);
    lab.c(0).local_in += 1;
    lab.c(0).echo_replies += 1;
    lab.check("echo request answered");
    // ARP requests for the VR's address are answered by the data plane.
    let f = arp_request_frame(H0, "10.0.0.10", "10.0.0.1", None);
    lab.send(0, &[&f]);
    lab.run();
    assert_eq!(lab.recv(0).len(), 1, "one ARP reply");
    lab.port[0].tx_packets += 1;
    lab.expect_silence();
    lab.rx(0, &f);
    lab.c(0).local_in += 1;
    lab.c(0).neighbor_replies += 1;
    lab.check("ARP request answered");
    // Transit traffic is forwarded.
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x");
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    let out = eth(GW, M1, None, ET_IP4, &p.hop().bytes());
    lab.expect(1, &[&out]);
    lab.rx(0, &f);
    lab.fwd(0, &out);
    lab.check("transit forwarded");
    // An interface without a mirror keeps the old behaviour.
    let f = to_vr(M2, H2, Some(VLAN), &tcp_syn("10.0.2.2", "10.0.2.1"));
    lab.send(2, &[&f]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f);
    lab.drop(0, VrDrop::LocalUnsupported);
    lab.check("no mirror on v100");
    // Link-local multicast on a segment without a mirror is not for us.
    let f = eth(
        [0x01, 0, 0x5e, 0, 0, 5],
        H2,
        Some(VLAN),
        ET_IP4,
        &Ip4::new("10.0.2.2", "224.0.0.5", 1, 89, vec![0; 44]).bytes(),
    );
    lab.send(2, &[&f]);
    lab.run();
    lab.expect_silence();
    lab.pdrop(2, dataplane::PortDrop::NotForUs);
    lab.check("multicast without a mirror");
}

#[test]
fn mirror_frames_leave_by_the_interface_with_its_tag_and_mac() {
    let mut lab = lab(true);
    let p = tcp_syn("10.0.0.1", "10.0.0.10");
    // The kernel writes the interface's MAC; the data plane enforces it either way.
    let f = to_vr(H0, [0x02, 9, 9, 9, 9, 9], None, &p);
    lab.send(LAN_MIRROR, &[&f]);
    lab.run();
    lab.expect(0, &[to_vr(H0, M0, None, &p)]);
    lab.expect_silence();
    lab.c(0).injected += 1;
    lab.check("injected on lan");
    let p = tcp_syn("10.0.2.1", "10.0.2.2");
    lab.send(V100_MIRROR, &[to_vr(H2, M2, None, &p)]);
    lab.run();
    lab.expect(2, &[to_vr(H2, M2, Some(VLAN), &p)]);
    lab.expect_silence();
    lab.c(0).injected += 1;
    lab.check("injected on v100, tagged");
    // Down interface: nothing leaves.
    lab.e.cell_mut().change_vr(0, dataplane::VrChange::Up(0, false)).unwrap();
    lab.send(LAN_MIRROR, &[to_vr(H0, M0, None, &tcp_syn("10.0.0.1", "10.0.0.10"))]);
    lab.run();
    lab.expect_silence();
    lab.c(0).generated_dropped += 1;
    lab.check("interface down");
}

#[test]
fn punt_rate_limited() {
    let mut lab = lab(false);
    lab.e.cell_mut().set_punt_limit(0, 1000, 5).unwrap();
    // A burst of 40 SYNs at the VR with 40 transit packets between them, all at one instant:
    // the first 5 SYNs are punted, the rest dropped, and every transit packet forwarded.
    let syn = to_vr(M0, H0, None, &tcp_syn("10.0.0.10", "10.0.0.1"));
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x");
    let transit = to_vr(M0, H0, None, &p);
    let out = eth(GW, M1, None, ET_IP4, &p.hop().bytes());
    let mut frames = Vec::new();
    for _ in 0..40 {
        frames.push(syn.clone());
        frames.push(transit.clone());
    }
    lab.send(0, &frames);
    lab.run();
    lab.expect(LAN_MIRROR, &vec![syn.clone(); 5]);
    lab.expect(1, &vec![out.clone(); 40]);
    lab.expect_silence();
    for _ in 0..40 {
        lab.rx(0, &syn);
        lab.rx(0, &transit);
        lab.fwd(0, &out);
    }
    lab.c(0).local_in += 5;
    lab.c(0).punted += 5;
    lab.c(0).drops[VrDrop::PuntRateLimited as usize] += 35;
    lab.check("punt_rate_limited");
    // 10 ms later the bucket has 10 tokens again (capped at 5).
    lab.send(0, &vec![syn.clone(); 8]);
    lab.run_at(10_000_000);
    lab.expect(LAN_MIRROR, &vec![syn.clone(); 5]);
    lab.expect_silence();
    for _ in 0..8 {
        lab.rx(0, &syn);
    }
    lab.c(0).local_in += 5;
    lab.c(0).punted += 5;
    lab.c(0).drops[VrDrop::PuntRateLimited as usize] += 3;
    lab.check("refilled to the burst");
}

#[test]
fn a_rebuilt_vr_keeps_its_mirrors() {
    let mut lab = lab(false);
    let mut cfg = base_vr();
    cfg.routes.clear();
    let new = dataplane::Vr::new(&cfg).unwrap();
    lab.e.cell_mut().replace_vr(0, new).unwrap();
    let f = to_vr(M0, H0, None, &tcp_syn("10.0.0.10", "10.0.0.1"));
    punted(&mut lab, 0, LAN_MIRROR, &f, &f, "punted after the rebuild");
    lab.send(LAN_MIRROR, &[to_vr(H0, M0, None, &tcp_syn("10.0.0.1", "10.0.0.10"))]);
    lab.run();
    lab.expect(0, &[to_vr(H0, M0, None, &tcp_syn("10.0.0.1", "10.0.0.10"))]);
    lab.c(0).injected += 1;
    lab.check("injected after the rebuild");
}
