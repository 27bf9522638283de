//! Neighbors: ARP (RFC 826) and neighbor discovery (RFC 4861) — replies built in place,
//! requests and solicitations, queues while resolving, retransmission, failure and hold, stale
//! entries and unicast probes, table limits and eviction, static entries, validation.

use crate::common;

use common::*;
use dataplane::config::VrConfig;
use dataplane::{NeighborState, PortDrop, VrDrop};
use etherparse::{Icmpv4Type, Icmpv6Type};

const RINGS: [usize; 3] = [64, 64, 64];
/// A start time well away from zero.
const T: u64 = 1_000 * MS;

/// base_vr with small limits and a second subnet on lan.
fn nvr() -> VrConfig {
    let mut c = base_vr();
    c.limits = small_limits();
    c.interfaces[0].ipv4.push("172.16.0.1/24".parse().unwrap());
    c
}

fn lab() -> Lab {
    let mut lab = Lab::new(&[nvr()], &RINGS);
    lab.now = T;
    lab
}

/// The broadcast ARP request the VR sends.
fn arp_req_out(m: [u8; 6], vlan: Option<u16>, spa: &str, tpa: &str) -> Vec<u8> {
    eth(BROADCAST, m, vlan, ET_ARP, &arp(1, m, spa, ZERO_MAC, tpa))
}

/// A host's ARP reply to the VR.
fn arp_reply_in(to: [u8; 6], from: [u8; 6], spa: &str, tpa: &str) -> Vec<u8> {
    pad60(eth(to, from, None, ET_ARP, &arp(2, from, spa, to, tpa)))
}

/// The multicast neighbor solicitation the VR sends from interface MAC `m` for `target`.
fn ns_out(m: [u8; 6], vlan: Option<u16>, target: &str) -> Vec<u8> {
    let (src, t) = (eui64_ll(m), a6(target));
    let g = solicited_node(t);
    let ip = Ip6::new(src, g, 255, 58, ns_msg(src, g, t, &lla_opt(1, m)));
    eth(mcast_mac(g), m, vlan, ET_IP6, &ip.bytes())
}

/// A transit packet from beyond the gateway to `dst`, and what leaves lan for `to`.
fn transit(dst: &str, tag: u8) -> (Ip4, Vec<u8>) {
    let p = udp4_pkt("8.8.8.8", dst, 64, &[tag; 11]);
    let f = to_vr(M1, GW, None, &p);
    (p, f)
}

/// The host unreachable (RFC 1812 §4.3.3.1) the VR sends back to GW about `p`, a transit
/// packet from 8.8.8.8 whose next hop did not answer: from wan's address, quoting `p` as it
/// arrived, the VR's `ident`-th ICMP message.
fn host_unreach(p: &Ip4, ident: u16) -> Vec<u8> {
    let t = Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::Host);
    eth(GW, M1, None, ET_IP4, &icmp4_error("10.0.1.1", p.src, ident, t, &p.bytes()))
}

fn on_lan(to: [u8; 6], p: &Ip4) -> Vec<u8> {
    eth(to, M0, None, ET_IP4, &p.hop().bytes())
}

#[track_caller]
fn state(lab: &Lab, addr: &str) -> (Option<NeighborState>, Option<[u8; 6]>) {
    match lab.neighbor(0, addr) {
        Some(r) => (Some(r.state), r.mac.map(|m| m.0)),
        None => (None, None),
    }
}

// ---------------------------------------------------------------------------------------------
// ARP

#[test]
fn arp_request_gets_reply_in_place() {
    let mut lab = lab();
    // sha differs from the Ethernet source: the reply goes to the sha (RFC 826).
    let req =
        pad60(eth(BROADCAST, H3, None, ET_ARP, &arp(1, H4, "10.0.0.33", ZERO_MAC, "10.0.0.1")));
    let rep = eth(H4, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H4, "10.0.0.33"));
    assert_eq!(rep.len(), 42, "no padding");
    lab.send(0, &[&req]);
    lab.run();
    lab.expect(0, &[rep]);
    lab.expect_silence();
    lab.rx(0, &req);
    let c = lab.c(0);
    c.local_in += 1;
    c.neighbor_replies += 1;
    c.neighbors_learned += 1;
    lab.check("arp request");
    // A request does not prove the requester hears us: the entry is stale (RFC 4861 §7.2.3,
    // as Linux does for ARP), usable at once.
    assert_eq!(state(&lab, "10.0.0.33"), (Some(NeighborState::Stale), Some(H4)));

    // The learned entry is used at once, without a broadcast request; its first use sends a
    // unicast probe to the learned MAC.
    let (p, f) = transit("10.0.0.33", 1);
    lab.send(1, &[&f]);
    lab.run();
    let o = on_lan(H4, &p);
    let probe = eth(H4, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, "10.0.0.33"));
    lab.expect(0, &[&o, &probe]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.fwd(0, &o);
    lab.c(0).neighbor_requests += 1;
    lab.check("forward to the learned requester");

    // Its answer confirms the entry.
    let rep = arp_reply_in(M0, H4, "10.0.0.33", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("confirmed");
    assert_eq!(state(&lab, "10.0.0.33"), (Some(NeighborState::Reachable), Some(H4)));

    // The second subnet of lan; a unicast request (cache refresh); a priority-tagged request.
    let req2 = arp_request_frame(H3, "172.16.0.7", "172.16.0.1", None);
    let req3 = pad60(eth(M0, H3, None, ET_ARP, &arp(1, H3, "10.0.0.34", ZERO_MAC, "10.0.0.1")));
    let req4 = arp_request_frame(H3, "10.0.0.35", "10.0.0.1", Some(0));
    lab.send(0, &[req2.clone(), req3.clone(), req4.clone()]);
    lab.run();
    lab.expect(
        0,
        &[
            eth(H3, M0, None, ET_ARP, &arp(2, M0, "172.16.0.1", H3, "172.16.0.7")),
            eth(H3, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H3, "10.0.0.34")),
            eth(H3, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H3, "10.0.0.35")),
        ],
    );
    for f in [&req2, &req3, &req4] {
        lab.rx(0, f);
    }
    let c = lab.c(0);
    c.local_in += 3;
    c.neighbor_replies += 3;
    c.neighbors_learned += 3;
    lab.check("more requests");
}

#[test]
fn arp_reply_on_vlan_interface() {
    let mut lab = lab();
    let req = arp_request_frame(H2, "10.0.2.9", "10.0.2.1", Some(VLAN));
    lab.send(2, &[&req]);
    lab.run();
    let rep = eth(H2, M2, Some(VLAN), ET_ARP, &arp(2, M2, "10.0.2.1", H2, "10.0.2.9"));
    assert_eq!(rep.len(), 46);
    lab.expect(2, &[rep]);
    lab.expect_silence();
    lab.rx(0, &req);
    let c = lab.c(0);
    c.local_in += 1;
    c.neighbor_replies += 1;
    c.neighbors_learned += 1;
    lab.check("vlan arp");
}

#[test]
fn arp_from_off_subnet_sender_is_answered_but_not_learned() {
    let mut lab = lab();
    let req = arp_request_frame(H3, "192.168.9.9", "10.0.0.1", None);
    lab.send(0, &[&req]);
    lab.run();
    lab.expect(0, &[eth(H3, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H3, "192.168.9.9"))]);
    lab.rx(0, &req);
    lab.c(0).local_in += 1;
    lab.c(0).neighbor_replies += 1;
    lab.check("off-subnet request");
    assert_eq!(state(&lab, "192.168.9.9"), (None, None));

    let rep = arp_reply_in(M0, H3, "192.168.9.10", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.check("off-subnet reply");
    assert_eq!(state(&lab, "192.168.9.10"), (None, None));
}

#[test]
fn arp_resolution_queues_then_flushes_in_order() {
    let mut lab = lab();
    let (p1, f1) = transit("10.0.0.20", 1);
    let (p2, f2) = transit("10.0.0.20", 2);
    let (_, f3) = transit("10.0.0.20", 3);
    lab.send(1, &[f1.clone(), f2.clone(), f3.clone()]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.20")]);
    lab.expect_silence();
    for f in [&f1, &f2, &f3] {
        lab.rx(0, f);
    }
    let c = lab.c(0);
    c.queued += 2;
    c.neighbor_requests += 1;
    lab.drop(0, VrDrop::NeighborQueueFull); // queue_per_neighbor = 2
    lab.transit_queued[0] = 2;
    lab.queued[0] = 2;
    lab.check("queued");
    assert_eq!(state(&lab, "10.0.0.20"), (Some(NeighborState::Incomplete), None));

    let rep = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    let (o1, o2) = (on_lan(H3, &p1), on_lan(H3, &p2));
    lab.expect(0, &[o1.clone(), o2.clone()]);
    lab.expect_silence();
    lab.rx(0, &rep);
    lab.fwd(0, &o1);
    lab.fwd(0, &o2);
    let c = lab.c(0);
    c.local_in += 1;
    c.neighbors_learned += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("resolved");
    assert_eq!(state(&lab, "10.0.0.20"), (Some(NeighborState::Reachable), Some(H3)));
}

#[test]
fn arp_request_sender_is_the_address_on_the_targets_subnet() {
    let mut lab = lab();
    let (_, f1) = transit("172.16.0.5", 1);
    let (_, f2) = transit("203.0.113.5", 2); // Iface(lan): on no subnet of lan
    lab.send(1, &[f1.clone(), f2.clone()]);
    lab.run();
    lab.expect_unordered(
        0,
        &[
            arp_req_out(M0, None, "172.16.0.1", "172.16.0.5"),
            arp_req_out(M0, None, "10.0.0.1", "203.0.113.5"),
        ],
    );
    lab.rx(0, &f1);
    lab.rx(0, &f2);
    let c = lab.c(0);
    c.queued += 2;
    c.neighbor_requests += 2;
    lab.transit_queued[0] = 2;
    lab.queued[0] = 2;
    lab.check("two requests");

    // On a VLAN interface the request is tagged.
    let mut c = nvr();
    c.routes.push(out_iface("100.64.0.0/10", 2));
    let mut lab = Lab::new(&[c], &RINGS);
    let (_, f) = transit("100.64.0.1", 3);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(2, &[arp_req_out(M2, Some(VLAN), "10.0.2.1", "100.64.0.1")]);
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("vlan request");
}

#[test]
fn arp_not_for_us_only_refreshes_known_entries() {
    let mut lab = lab();
    let req = arp_request_frame(H3, "10.0.0.33", "10.0.0.1", None);
    lab.send(0, &[&req]);
    lab.run();
    lab.expect(0, &[eth(H3, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H3, "10.0.0.33"))]);
    lab.rx(0, &req);
    let c = lab.c(0);
    c.local_in += 1;
    c.neighbor_replies += 1;
    c.neighbors_learned += 1;
    lab.check("learned");

    // Unicast to our MAC but for another address: a known sender's new MAC is merged (RFC 826),
    // unknown senders are not added; nothing is sent.
    let moved = pad60(eth(M0, H4, None, ET_ARP, &arp(1, H4, "10.0.0.33", ZERO_MAC, "10.0.0.99")));
    let stranger =
        pad60(eth(M0, H4, None, ET_ARP, &arp(1, H4, "10.0.0.44", ZERO_MAC, "10.0.0.99")));
    let stranger_reply =
        pad60(eth(M0, H4, None, ET_ARP, &arp(2, H4, "10.0.0.55", M0, "10.0.0.99")));
    lab.send(0, &[moved.clone(), stranger.clone(), stranger_reply.clone()]);
    lab.run();
    lab.expect_silence();
    for f in [&moved, &stranger, &stranger_reply] {
        lab.rx(0, f);
        lab.drop(0, VrDrop::ArpNotForUs);
    }
    lab.c(0).neighbors_learned += 1; // the merge updated an entry
    lab.check("not for us");
    assert_eq!(state(&lab, "10.0.0.33"), (Some(NeighborState::Stale), Some(H4)));
    assert_eq!(state(&lab, "10.0.0.44"), (None, None));
    assert_eq!(state(&lab, "10.0.0.55"), (None, None));

    let (p, f) = transit("10.0.0.33", 1);
    lab.send(1, &[&f]);
    lab.run();
    let o = on_lan(H4, &p);
    let probe = eth(H4, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, "10.0.0.33"));
    lab.expect(0, &[&o, &probe]);
    lab.rx(0, &f);
    lab.fwd(0, &o);
    lab.c(0).neighbor_requests += 1;
    lab.check("forward to the moved neighbor");
}

#[test]
fn announcements_move_known_neighbors_only() {
    let mut lab = lab();
    // Learn 10.0.0.33 and 2001:db8::33 at H3 (requests to us).
    let (h6, r6) = (a6("2001:db8::33"), a6("2001:db8::1"));
    let g = solicited_node(r6);
    let ns = Ip6::new(h6, g, 255, 58, ns_msg(h6, g, r6, &lla_opt(1, H3)));
    let req = arp_request_frame(H3, "10.0.0.33", "10.0.0.1", None);
    let ns_in = eth(mcast_mac(g), H3, None, ET_IP6, &ns.bytes());
    lab.send(0, &[&req, &ns_in]);
    lab.run();
    assert_eq!(lab.recv(0).len(), 2, "an ARP reply and an NA");
    lab.port[0].tx_packets += 2;
    for f in [&req, &ns_in] {
        lab.rx(0, f);
    }
    let c = lab.c(0);
    c.local_in += 2;
    c.neighbor_replies += 2;
    c.neighbors_learned += 2;
    lab.check("learned");

    // The host changes MAC to H4 and announces it: a gratuitous ARP (broadcast, sender address
    // = target address) and an unsolicited NA with Override to ff02::1. Both reach the VR
    // although neither asks for its addresses, and move the entries. A stranger's
    // announcements make no entry.
    let all = a6("ff02::1");
    let na = |who: [u8; 16], m| {
        let ip = Ip6::new(
            who,
            all,
            255,
            58,
            na_msg(who, all, who, (false, false, true), &lla_opt(2, m)),
        );
        eth(mcast_mac(all), m, None, ET_IP6, &ip.bytes())
    };
    let garp = arp_request_frame(H4, "10.0.0.33", "10.0.0.33", None);
    let stranger = arp_request_frame(H4, "10.0.0.44", "10.0.0.44", None);
    let (na33, na44) = (na(h6, H4), na(a6("2001:db8::44"), H4));
    lab.send(0, &[&garp, &stranger, &na33, &na44]);
    lab.run();
    lab.expect_silence();
    for f in [&garp, &stranger, &na33, &na44] {
        lab.rx(0, f);
    }
    let c = lab.c(0);
    c.local_in += 4;
    c.neighbors_learned += 2;
    lab.check("announced");
    assert_eq!(state(&lab, "10.0.0.33"), (Some(NeighborState::Stale), Some(H4)));
    assert_eq!(state(&lab, "2001:db8::33"), (Some(NeighborState::Stale), Some(H4)));
    assert_eq!(state(&lab, "10.0.0.44"), (None, None));
    assert_eq!(state(&lab, "2001:db8::44"), (None, None));

    // Off every subnet of the port: not ours to hear, dropped at demux.
    let off = arp_request_frame(H4, "192.0.2.9", "192.0.2.9", None);
    lab.send(0, &[&off]);
    lab.run();
    lab.pdrop(0, PortDrop::NotForUs);
    lab.check("announcement off our subnets");
}

#[test]
fn static_neighbors_are_never_overwritten() {
    let mut lab = lab();
    // 10.0.0.10 / 2001:db8::10 are static at H0. A request from that address with another MAC
    // is answered (to its sender) but does not move the entry; nor do replies and adverts.
    let req = arp_request_frame(H3, "10.0.0.10", "10.0.0.1", None);
    let rep = arp_reply_in(M0, H3, "10.0.0.10", "10.0.0.1");
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let na = to_vr6(
        M0,
        H3,
        None,
        &Ip6::new(h, r, 255, 58, na_msg(h, r, h, (false, true, true), &lla_opt(2, H3))),
    );
    let (r6, s6) = (a6("2001:db8::1"), solicited_node(a6("2001:db8::1")));
    let ns = eth(
        mcast_mac(s6),
        H3,
        None,
        ET_IP6,
        &Ip6::new(h, s6, 255, 58, ns_msg(h, s6, r6, &lla_opt(1, H3))).bytes(),
    );
    lab.send(0, &[req.clone(), rep.clone(), na.clone(), ns.clone()]);
    lab.run();
    let na_out = Ip6::new(r6, h, 255, 58, na_msg(r6, h, r6, (true, true, true), &lla_opt(2, M0)));
    lab.expect(
        0,
        &[
            eth(H3, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H3, "10.0.0.10")),
            eth(H3, M0, None, ET_IP6, &na_out.bytes()),
        ],
    );
    for f in [&req, &rep, &na, &ns] {
        lab.rx(0, f);
    }
    let c = lab.c(0);
    c.local_in += 4;
    c.neighbor_replies += 2;
    lab.check("static entries hold");
    assert_eq!(state(&lab, "10.0.0.10"), (Some(NeighborState::Static), Some(H0)));
    assert_eq!(state(&lab, "2001:db8::10"), (Some(NeighborState::Static), Some(H0)));

    // Still used, and never expires.
    lab.now += 1_000_000 * MS;
    let (p, f) = transit("10.0.0.10", 1);
    lab.send(1, &[&f]);
    lab.run();
    let o = on_lan(H0, &p);
    lab.expect(0, &[&o]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.fwd(0, &o);
    lab.check("static still used");
}

#[test]
fn unresolved_next_hop_retransmits_fails_holds_and_retries() {
    let mut lab = lab();
    // A generated packet (echo reply to an unresolved requester) and a transit packet.
    let ping = Ip4::new("10.0.0.21", "10.0.0.1", 64, 1, echo4_req(1, 1, b"who?"));
    let fping = to_vr(M0, H3, None, &ping);
    lab.send(0, &[&fping]);
    let (p1, f1) = transit("10.0.0.20", 1);
    lab.send(1, &[&f1]);
    lab.run();
    let req20 = arp_req_out(M0, None, "10.0.0.1", "10.0.0.20");
    let req21 = arp_req_out(M0, None, "10.0.0.1", "10.0.0.21");
    lab.expect(0, &[req21.clone(), req20.clone()]);
    lab.expect_silence();
    lab.rx(0, &fping);
    lab.rx(0, &f1);
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    c.queued += 2;
    c.neighbor_requests += 2;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 2;
    lab.check("first requests");

    lab.run_at(T + 5 * MS);
    lab.expect_silence();
    lab.check("nothing before the retransmit interval");

    for k in 1..3u64 {
        lab.run_at(T + k * 10 * MS);
        lab.expect_unordered(0, &[req20.clone(), req21.clone()]);
        lab.expect_silence();
        lab.c(0).neighbor_requests += 2;
        lab.check(&format!("retransmission {k}"));
        assert_eq!(state(&lab, "10.0.0.20").0, Some(NeighborState::Incomplete));
    }

    // Three requests in all, unanswered: the entries fail and their queues are dropped; the
    // transit packet is answered with host unreachable (the echo reply was the VR's first
    // ICMP message), the VR's own echo reply is not.
    lab.run_at(T + 30 * MS);
    lab.expect(1, &[host_unreach(&p1, 2)]);
    lab.expect_silence();
    lab.drop(0, VrDrop::NoNeighbor);
    lab.c(0).icmp_errors += 1;
    lab.c(0).generated_dropped += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("failed");
    assert_eq!(state(&lab, "10.0.0.20").0, Some(NeighborState::Failed));

    // During the hold, packets to it drop at once, without a request, and are answered.
    lab.now = T + 35 * MS;
    let (p2, f2) = transit("10.0.0.20", 2);
    lab.send(1, &[&f2]);
    lab.run();
    lab.expect(1, &[host_unreach(&p2, 3)]);
    lab.expect_silence();
    lab.rx(0, &f2);
    lab.c(0).icmp_errors += 1;
    lab.drop(0, VrDrop::NoNeighbor);
    lab.check("held");

    // After the hold (3 × 10 ms + 30 ms), resolution starts again.
    lab.now = T + 60 * MS;
    let (p3, f3) = transit("10.0.0.20", 3);
    lab.send(1, &[&f3]);
    lab.run();
    lab.expect(0, &[&req20]);
    lab.rx(0, &f3);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("retried after the hold");

    // Answered this time: the packet leaves.
    lab.now = T + 61 * MS;
    let rep = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    let o = on_lan(H3, &p3);
    lab.expect(0, &[&o]);
    lab.rx(0, &rep);
    lab.fwd(0, &o);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("resolved");
}

#[test]
fn neighbor_queue_limits_per_next_hop_and_total() {
    let mut lab = lab(); // 2 per next hop, 3 in all
    let frames: Vec<_> = (0..3)
        .map(|i| transit("10.0.0.20", i).1)
        .chain((0..2).map(|i| transit("10.0.0.21", 10 + i).1))
        .collect();
    lab.send(1, &frames);
    lab.run();
    lab.expect_unordered(
        0,
        &[
            arp_req_out(M0, None, "10.0.0.1", "10.0.0.20"),
            arp_req_out(M0, None, "10.0.0.1", "10.0.0.21"),
        ],
    );
    for f in &frames {
        lab.rx(0, f);
    }
    let c = lab.c(0);
    c.queued += 3;
    c.neighbor_requests += 2;
    lab.drop(0, VrDrop::NeighborQueueFull);
    lab.drop(0, VrDrop::NeighborQueueFull);
    lab.transit_queued[0] = 3;
    lab.queued[0] = 3;
    lab.check("queue limits");
    assert_eq!(lab.neighbor(0, "10.0.0.20").unwrap().queued, 2);
    assert_eq!(lab.neighbor(0, "10.0.0.21").unwrap().queued, 1);
}

#[test]
fn stale_entry_is_used_and_probed_by_unicast_then_resolved_anew_then_fails() {
    let mut lab = lab(); // reachable 100 ms, retrans 10 ms, 3 probes, hold 30 ms
                         // An ARP reply to us: reachable from T.
    let rep = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("learned at T");

    let probe = eth(H3, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, "10.0.0.20"));
    // (time after T in ms, unicast probe expected)
    for (ms, probed) in [(50u64, false), (100, true), (105, false), (110, true), (120, true)] {
        lab.now = T + ms * MS;
        let (p, f) = transit("10.0.0.20", ms as u8);
        lab.send(1, &[&f]);
        lab.run();
        let o = on_lan(H3, &p);
        let mut want = vec![o.clone()];
        if probed {
            want.push(probe.clone());
            lab.c(0).neighbor_requests += 1;
        }
        lab.expect(0, &want);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.fwd(0, &o);
        lab.check(&format!("T+{ms}ms"));
        let st = state(&lab, "10.0.0.20").0;
        assert_eq!(
            st,
            Some(if ms < 100 { NeighborState::Reachable } else { NeighborState::Stale }),
            "T+{ms}"
        );
    }
    // Three unicast probes unanswered: resolved anew by broadcast (the neighbor may have a new
    // MAC); its packets wait, none goes to the MAC that stopped answering, none is answered
    // with unreachable yet.
    let req = arp_req_out(M0, None, "10.0.0.1", "10.0.0.20");
    let (p130, f) = transit("10.0.0.20", 130);
    lab.now = T + 130 * MS;
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[&req]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("T+130ms: resolving again");
    assert_eq!(state(&lab, "10.0.0.20").0, Some(NeighborState::Incomplete));
    for ms in [140u64, 150] {
        lab.run_at(T + ms * MS);
        lab.expect(0, &[&req]);
        lab.expect_silence();
        lab.c(0).neighbor_requests += 1;
        lab.check(&format!("T+{ms}ms: request retransmitted"));
    }
    // That stays silent too: only now does the entry fail and the waiting packet get its
    // host unreachable (the VR's first ICMP message).
    lab.run_at(T + 160 * MS);
    lab.expect(1, &[host_unreach(&p130, 1)]);
    lab.expect_silence();
    lab.drop(0, VrDrop::NoNeighbor);
    lab.c(0).icmp_errors += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("T+160ms: failed");
    assert_eq!(state(&lab, "10.0.0.20").0, Some(NeighborState::Failed));
    // Packets drop during the hold (30 ms), each answered with host unreachable; none leaves
    // for the failed entry's MAC.
    lab.now = T + 170 * MS;
    let (p, f) = transit("10.0.0.20", 170);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(1, &[host_unreach(&p, 2)]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.c(0).icmp_errors += 1;
    lab.drop(0, VrDrop::NoNeighbor);
    lab.check("T+170ms: held");
    // After the hold, broadcast resolution again, the packet waiting.
    lab.now = T + 190 * MS;
    let (_, f) = transit("10.0.0.20", 190);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[&req]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("T+190ms: resolving again");
}

/// A neighbor in use that stops answering its unicast probes but answers the broadcast
/// request that follows, at a new MAC: the packets that waited leave for the new MAC, none
/// is lost and none answered with unreachable.
#[test]
fn stale_entry_silent_to_unicast_is_resolved_at_its_new_mac() {
    let mut lab = lab(); // reachable 100 ms, retrans 10 ms, 3 probes, hold 30 ms
    let rep = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    let probe = eth(H3, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, "10.0.0.20"));
    for ms in [100u64, 110, 120] {
        lab.now = T + ms * MS;
        let (p, f) = transit("10.0.0.20", ms as u8);
        lab.send(1, &[&f]);
        lab.run();
        let o = on_lan(H3, &p);
        lab.expect(0, &[o.clone(), probe.clone()]);
        lab.rx(0, &f);
        lab.fwd(0, &o);
        lab.c(0).neighbor_requests += 1;
        lab.check(&format!("T+{ms}ms: used, probed by unicast"));
    }
    lab.now = T + 130 * MS;
    let (p, f) = transit("10.0.0.20", 130);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.20")]);
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("T+130ms: resolving again");
    // The neighbor answers from a new MAC (H2): the waiting packet leaves there.
    lab.now = T + 135 * MS;
    let rep = arp_reply_in(M0, H2, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    let o = on_lan(H2, &p);
    lab.expect(0, &[&o]);
    lab.expect_silence();
    lab.rx(0, &rep);
    lab.fwd(0, &o);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("T+135ms: resolved at the new MAC");
    assert_eq!(state(&lab, "10.0.0.20"), (Some(NeighborState::Reachable), Some(H2)));
}

#[test]
fn stale_entry_confirmed_by_reply_is_reachable_again() {
    let mut lab = lab();
    let rep = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1"); // unsolicited, addressed to us: learned
    lab.send(0, &[&rep]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("learned from a reply");

    let probe = eth(H3, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, "10.0.0.20"));
    let send = |lab: &mut Lab, ms: u64, probed: bool| {
        lab.now = T + ms * MS;
        let (p, f) = transit("10.0.0.20", ms as u8);
        lab.send(1, &[&f]);
        lab.run();
        let o = on_lan(H3, &p);
        let mut want = vec![o.clone()];
        if probed {
            want.push(probe.clone());
            lab.c(0).neighbor_requests += 1;
        }
        lab.expect(0, &want);
        lab.rx(0, &f);
        lab.fwd(0, &o);
        lab.check(&format!("T+{ms}ms"));
    };
    send(&mut lab, 100, true);
    lab.now = T + 101 * MS;
    let rep2 = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep2]);
    lab.run();
    lab.rx(0, &rep2);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("confirmed");
    assert_eq!(state(&lab, "10.0.0.20").0, Some(NeighborState::Reachable));
    send(&mut lab, 111, false);
    send(&mut lab, 200, false);
    send(&mut lab, 201, true); // reachable for 100 ms from T+101
}

/// One dynamic slot: every static entry and one more.
fn tiny_table() -> VrConfig {
    let mut c = nvr();
    c.limits.neighbors = c.neighbors.len() as u32 + 1;
    c
}

#[test]
fn neighbor_table_full() {
    let mut lab = Lab::new(&[tiny_table()], &RINGS);
    lab.now = T;
    let (_, f1) = transit("10.0.0.20", 1);
    lab.send(1, &[&f1]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.20")]);
    lab.rx(0, &f1);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("resolving .20");

    // In a full table a new next hop takes the place of the oldest incomplete entry; what
    // waited on it is dropped.
    let (p2, f2) = transit("10.0.0.21", 2);
    lab.send(1, &[&f2]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.21")]);
    lab.rx(0, &f2);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.drop(0, VrDrop::NoNeighbor);
    lab.check(".20 made way for .21");
    assert_eq!(state(&lab, "10.0.0.20"), (None, None));
    assert_eq!(state(&lab, "10.0.0.21").0, Some(NeighborState::Incomplete));

    // Never of a resolved entry: with .21 reachable, the table is full.
    let rep = arp_reply_in(M0, H3, "10.0.0.21", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    let o = on_lan(H3, &p2);
    lab.expect(0, &[&o]);
    lab.rx(0, &rep);
    lab.fwd(0, &o);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check(".21 resolved");
    // From another source: new resolutions share the budget by source, so once it is down
    // to half, 8.8.8.8 alone would wait for its own share (see `neighbor_flood.rs`).
    let [other, _] = sources_outside_lane_of("8.8.8.8");
    let f3 = to_vr(M1, GW, None, &udp4_pkt(&other, "10.0.0.22", 64, &[3; 11]));
    lab.send(1, &[&f3]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f3);
    lab.drop(0, VrDrop::NeighborTableFull);
    lab.check("table full");
    assert_eq!(state(&lab, "10.0.0.21"), (Some(NeighborState::Reachable), Some(H3)));

    // Static entries are never evicted: a table holding only them is full for good.
    let mut c = nvr();
    c.limits.neighbors = c.neighbors.len() as u32;
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    for k in 0..3u64 {
        lab.now += k * 100_000 * MS;
        let (_, f) = transit("10.0.0.20", 1);
        lab.send(1, &[&f]);
        lab.run();
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::NeighborTableFull);
        lab.check("only static entries");
    }
    assert_eq!(lab.neighbors(0).len(), 6);
    assert!(lab.neighbors(0).iter().all(|r| r.state == NeighborState::Static));
}

#[test]
fn failed_entry_is_evicted_for_a_new_next_hop() {
    let mut lab = Lab::new(&[tiny_table()], &RINGS);
    lab.now = T;
    let (p1, f1) = transit("10.0.0.20", 1);
    lab.send(1, &[&f1]);
    lab.run();
    lab.recv(0);
    lab.port[0].tx_packets += 1;
    lab.rx(0, &f1);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    for ms in [10, 20, 30] {
        lab.run_at(T + ms * MS);
    }
    assert_eq!(lab.recv(0).len(), 2);
    lab.expect(1, &[host_unreach(&p1, 1)]);
    lab.port[0].tx_packets += 2;
    lab.c(0).neighbor_requests += 2;
    lab.c(0).icmp_errors += 1;
    lab.drop(0, VrDrop::NoNeighbor);
    lab.check(".20 failed");

    lab.now = T + 31 * MS;
    let (_, f2) = transit("10.0.0.21", 2);
    lab.send(1, &[&f2]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.21")]);
    lab.rx(0, &f2);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("failed entry evicted");
    assert_eq!(state(&lab, "10.0.0.20"), (None, None));
    assert_eq!(state(&lab, "10.0.0.21").0, Some(NeighborState::Incomplete));
}

#[test]
fn expired_reachable_entry_is_evictable() {
    // An entry whose reachable time ran out is stale (RFC 4861 §7.3.3), whether or not a packet
    // has used it since; the table may evict it for a new next hop.
    let mut lab = Lab::new(&[tiny_table()], &RINGS);
    lab.now = T;
    let rep = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("learned");

    lab.now = T + 500 * MS; // reachable for 100 ms only
    let (_, f) = transit("10.0.0.21", 1);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.21")]);
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("stale entry evicted");
    assert_eq!(state(&lab, "10.0.0.20"), (None, None));
}

#[test]
fn least_recently_used_stale_entry_is_evicted_first() {
    let mut c = nvr();
    c.limits.neighbors = c.neighbors.len() as u32 + 2;
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    // Learn .20 and .21; use .21 later than .20 once both are stale (used → Stale + probe).
    for (a, m) in [("10.0.0.20", H3), ("10.0.0.21", H4)] {
        let rep = arp_reply_in(M0, m, a, "10.0.0.1");
        lab.send(0, &[&rep]);
        lab.run();
        lab.rx(0, &rep);
        lab.c(0).local_in += 1;
        lab.c(0).neighbors_learned += 1;
    }
    lab.check("two learned");
    for (ms, a, m) in [(200u64, "10.0.0.20", H3), (210, "10.0.0.21", H4)] {
        lab.now = T + ms * MS;
        let (p, f) = transit(a, ms as u8);
        lab.send(1, &[&f]);
        lab.run();
        let o = on_lan(m, &p);
        let probe = eth(m, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, a));
        lab.expect(0, &[o.clone(), probe]);
        lab.rx(0, &f);
        lab.fwd(0, &o);
        lab.c(0).neighbor_requests += 1;
        lab.check(&format!("{a} used while stale"));
        assert_eq!(state(&lab, a).0, Some(NeighborState::Stale));
    }
    lab.now = T + 215 * MS;
    let (_, f) = transit("10.0.0.22", 1);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.22")]);
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("evicted one");
    assert_eq!(state(&lab, "10.0.0.20"), (None, None), "the least recently used goes");
    assert_eq!(state(&lab, "10.0.0.21").0, Some(NeighborState::Stale));
}

#[test]
fn solicitations_are_rate_limited() {
    let mut c = nvr();
    c.limits.solicitations_per_sec = 100; // a token every 10 ms, the retransmit interval
    c.limits.solicitations_burst = 2;
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    let arp = |a: &str| arp_req_out(M0, None, "10.0.0.1", a);
    // Three new next hops at once: two tokens, so two probes; the third makes no entry.
    let (p1, f1) = transit("10.0.0.20", 1);
    let (p2, f2) = transit("10.0.0.21", 2);
    // From another source: new resolutions share the budget by source, so once it is down
    // to half, 8.8.8.8 alone would wait for its own share (see `neighbor_flood.rs`).
    let [other, _] = sources_outside_lane_of("8.8.8.8");
    let f3 = to_vr(M1, GW, None, &udp4_pkt(&other, "10.0.0.22", 64, &[3; 11]));
    lab.send(1, &[f1.clone(), f2.clone(), f3.clone()]);
    lab.run();
    lab.expect_unordered(0, &[arp("10.0.0.20"), arp("10.0.0.21")]);
    for f in [&f1, &f2, &f3] {
        lab.rx(0, f);
    }
    lab.c(0).queued += 2;
    lab.c(0).neighbor_requests += 2;
    lab.drop(0, VrDrop::NeighborRateLimited);
    lab.transit_queued[0] = 2;
    lab.queued[0] = 2;
    lab.check("two tokens");
    assert_eq!(state(&lab, "10.0.0.22"), (None, None));

    // Retransmissions spend tokens too: one per 10 ms, the older entry first. The other's is
    // skipped, and a new next hop finds none.
    for k in 1..=2 {
        lab.run_at(T + k * 10 * MS);
        lab.expect(0, &[arp("10.0.0.20")]);
        lab.c(0).neighbor_requests += 1;
        lab.send(1, &[&f3]);
        lab.run();
        lab.expect_silence();
        lab.rx(0, &f3);
        lab.drop(0, VrDrop::NeighborRateLimited);
        lab.check(&format!("retransmission {k}"));
    }
    // Skipped retransmissions count: both fail on time (3 probes, 10 ms apart), and the token
    // of the next interval goes to the new next hop.
    lab.run_at(T + 30 * MS);
    lab.expect(1, &[host_unreach(&p1, 1), host_unreach(&p2, 2)]);
    lab.expect_silence();
    lab.drop(0, VrDrop::NoNeighbor);
    lab.drop(0, VrDrop::NoNeighbor);
    lab.c(0).icmp_errors += 2;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("both failed");
    assert_eq!(state(&lab, "10.0.0.21").0, Some(NeighborState::Failed));
    lab.send(1, &[&f3]);
    lab.run();
    lab.expect(0, &[arp("10.0.0.22")]);
    lab.rx(0, &f3);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("a token again");
}

/// An incomplete entry evicted by newer ones (a flood) while its solicitation was on the way:
/// the solicited answer still makes the entry (RFC 4861 §7.2.5 drops advertisements for
/// unknown targets; this one answers our question). ARP replies to us make entries anyway
/// (RFC 826 merge).
#[test]
fn answer_to_a_recent_probe_makes_the_entry_its_evicted_one_would_have() {
    let mut c = nvr();
    c.limits.incomplete_per_interface = 1;
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    let (r, t, x) = (a6("2001:db8::1"), a6("2001:db8::20"), a6("2001:db8::21"));
    let p = udp6_pkt("2001:4860::1", "2001:db8::20", 64, b"evicted");
    let q = udp6_pkt("2001:4860::1", "2001:db8::21", 64, b"newer");
    let (f, g) = (to_vr6(M1, GW, None, &p), to_vr6(M1, GW, None, &q));
    lab.send(1, &[&f]);
    lab.run();
    lab.send(1, &[&g]);
    lab.run();
    lab.expect(0, &[ns_out(M0, None, "2001:db8::20"), ns_out(M0, None, "2001:db8::21")]);
    lab.rx(0, &f);
    lab.rx(0, &g);
    lab.c(0).queued += 2;
    lab.c(0).neighbor_requests += 2;
    lab.drop(0, VrDrop::NoNeighbor); // ::20's packet, when ::21 took its place
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("::20 evicted");
    assert_eq!(state(&lab, "2001:db8::20"), (None, None));

    // ::20 answers (solicited): made, reachable. An unsolicited NA for an address probed
    // recently, or a solicited one for an address never probed, makes nothing.
    let na = |t: [u8; 16], m: [u8; 6], solicited: bool| {
        to_vr6(
            M0,
            m,
            None,
            &Ip6::new(t, r, 255, 58, na_msg(t, r, t, (false, solicited, true), &lla_opt(2, m))),
        )
    };
    let y = a6("2001:db8::22");
    let (n1, n2, n3) = (na(t, H3, true), na(x, H4, false), na(y, H4, true));
    lab.send(0, &[n1.clone(), n2.clone(), n3.clone()]);
    lab.run();
    // ::21's queued packet leaves for the MAC its advertisement gave.
    let o = eth(H4, M0, None, ET_IP6, &q.hop().bytes());
    lab.expect(0, &[&o]);
    lab.expect_silence();
    for n in [&n1, &n2, &n3] {
        lab.rx(0, n);
    }
    lab.c(0).local_in += 3;
    lab.c(0).neighbors_learned += 2; // ::20 made; ::21 (incomplete) updated, stale
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.fwd(0, &o);
    lab.check("answers");
    assert_eq!(state(&lab, "2001:db8::20"), (Some(NeighborState::Reachable), Some(H3)));
    assert_eq!(state(&lab, "2001:db8::21"), (Some(NeighborState::Stale), Some(H4)));
    assert_eq!(state(&lab, "2001:db8::22"), (None, None));
    // Too late: a solicited answer after the resolution window makes nothing.
    lab.now = T + 31 * MS; // small_limits: 3 probes x 10 ms
    let late = na(a6("2001:db8::23"), H3, true);
    let probe = to_vr6(M1, GW, None, &udp6_pkt("2001:4860::1", "2001:db8::23", 64, b"x"));
    lab.send(1, &[&probe]);
    lab.run();
    lab.expect(0, &[ns_out(M0, None, "2001:db8::23")]);
    lab.rx(0, &probe);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("::23 resolving");
    // Forgotten (as a flood would evict it), then answered once the window is over.
    lab.e.cell_mut().change_vr(0, dataplane::VrChange::FlushNeighbors(Some(0))).unwrap();
    lab.drop(0, VrDrop::NoNeighbor);
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.now = T + 31 * MS + 30 * MS;
    lab.send(0, &[&late]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &late);
    lab.c(0).local_in += 1;
    lab.check("late answer");
    assert_eq!(state(&lab, "2001:db8::23"), (None, None));
}

/// RFC 826 merge and RFC 4861 §7.2.3/§7.2.5: a known neighbor that shows up with another MAC
/// is moved at once, by ARP (request or reply), by a solicitation with a different source
/// link-layer address, or by an advertisement with the Override flag.
#[test]
fn known_neighbor_moves_to_a_new_mac() {
    let mut lab = lab();
    let (r, h) = (a6("2001:db8::1"), a6("2001:db8::33"));
    let ll0 = eui64_ll(M0);
    let p4 = |tag: u8| udp4_pkt("8.8.8.8", "10.0.0.33", 64, &[tag; 9]);
    let p6 = |tag: u8| udp6_pkt("2001:4860::1", "2001:db8::33", 64, &[tag; 9]);
    // Both resolved at H3 and reachable.
    let rep = arp_reply_in(M0, H3, "10.0.0.33", "10.0.0.1");
    let g = solicited_node(r);
    let ns = |m: [u8; 6]| {
        eth(
            mcast_mac(g),
            m,
            None,
            ET_IP6,
            &Ip6::new(h, g, 255, 58, ns_msg(h, g, r, &lla_opt(1, m))).bytes(),
        )
    };
    let our_na = |m: [u8; 6]| {
        eth(
            m,
            M0,
            None,
            ET_IP6,
            &Ip6::new(r, h, 255, 58, na_msg(r, h, r, (true, true, true), &lla_opt(2, M0))).bytes(),
        )
    };
    let na = |m: [u8; 6], o: bool| {
        to_vr6(
            M0,
            m,
            None,
            &Ip6::new(h, r, 255, 58, na_msg(h, r, h, (false, true, o), &lla_opt(2, m))),
        )
    };
    let (n1, n2) = (ns(H3), na(H3, true));
    lab.send(0, &[rep.clone(), n1.clone(), n2.clone()]);
    lab.run();
    lab.expect(0, &[our_na(H3)]);
    for f in [&rep, &n1, &n2] {
        lab.rx(0, f);
    }
    lab.c(0).local_in += 3;
    lab.c(0).neighbors_learned += 3;
    lab.c(0).neighbor_replies += 1;
    lab.check("resolved at H3");
    let fwd = |lab: &mut Lab, m: [u8; 6], tag: u8, probes: &[Vec<u8>]| {
        let (a, b) = (to_vr(M1, GW, None, &p4(tag)), to_vr6(M1, GW, None, &p6(tag)));
        lab.send(1, &[a.clone(), b.clone()]);
        lab.run();
        let (o4, o6) = (on_lan(m, &p4(tag)), eth(m, M0, None, ET_IP6, &p6(tag).hop().bytes()));
        lab.expect_then_any(0, &[o4.clone(), o6.clone()], probes);
        lab.rx(0, &a);
        lab.rx(0, &b);
        lab.fwd(0, &o4);
        lab.fwd(0, &o6);
        lab.c(0).neighbor_requests += probes.len() as u64;
        lab.check(&format!("forwarded {tag}"));
    };
    fwd(&mut lab, H3, 1, &[]);

    // An ARP request and an NS from the same addresses at H4: moved (stale, unconfirmed), and
    // used at once, each probed by unicast at the new MAC.
    let req = arp_request_frame(H4, "10.0.0.33", "10.0.0.1", None);
    let n4 = ns(H4);
    lab.send(0, &[req.clone(), n4.clone()]);
    lab.run();
    lab.expect(
        0,
        &[eth(H4, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H4, "10.0.0.33")), our_na(H4)],
    );
    lab.rx(0, &req);
    lab.rx(0, &n4);
    lab.c(0).local_in += 2;
    lab.c(0).neighbors_learned += 2;
    lab.c(0).neighbor_replies += 2;
    lab.check("moved to H4");
    assert_eq!(state(&lab, "10.0.0.33"), (Some(NeighborState::Stale), Some(H4)));
    assert_eq!(state(&lab, "2001:db8::33"), (Some(NeighborState::Stale), Some(H4)));
    let probe4 = eth(H4, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, "10.0.0.33"));
    let probe6 = eth(
        H4,
        M0,
        None,
        ET_IP6,
        &Ip6::new(ll0, h, 255, 58, ns_msg(ll0, h, h, &lla_opt(1, M0))).bytes(),
    );
    fwd(&mut lab, H4, 2, &[probe4, probe6]);

    // Back at H3: an ARP reply, and an NA with Override (without it, the MAC would stay).
    let (rep, keep, over) =
        (arp_reply_in(M0, H3, "10.0.0.33", "10.0.0.1"), na(H2, false), na(H3, true));
    lab.send(0, &[rep.clone(), keep.clone()]);
    lab.run();
    lab.rx(0, &rep);
    lab.rx(0, &keep);
    lab.c(0).local_in += 2;
    lab.c(0).neighbors_learned += 1;
    lab.check("ARP reply; NA without Override");
    assert_eq!(state(&lab, "10.0.0.33"), (Some(NeighborState::Reachable), Some(H3)));
    assert_eq!(state(&lab, "2001:db8::33").1, Some(H4));
    lab.send(0, &[&over]);
    lab.run();
    lab.rx(0, &over);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("NA with Override");
    assert_eq!(state(&lab, "2001:db8::33"), (Some(NeighborState::Reachable), Some(H3)));
    fwd(&mut lab, H3, 3, &[]);
}

/// A gateway that is not static: learned, cached by the forwarding fast path, then moved.
#[test]
fn gateway_mac_change_is_used_at_once() {
    let mut c = nvr();
    c.neighbors.retain(|n| n.iface != 1);
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    let rep = arp_reply_in(M1, GW, "10.0.1.2", "10.0.1.1");
    let (gh, gr) = (a6("2001:db8:1::2"), a6("2001:db8:1::1"));
    let na = |m: [u8; 6], solicited: bool| {
        let msg = na_msg(gh, gr, gh, (true, solicited, true), &lla_opt(2, m));
        to_vr6(M1, m, None, &Ip6::new(gh, gr, 255, 58, msg))
    };
    // An unsolicited NA only updates an existing entry: create it by resolving first.
    let p6 = udp6_pkt("2001:db8::10", "2001:4860::6", 64, b"v6");
    let f6 = to_vr6(M0, H0, None, &p6);
    lab.send(0, &[&f6]);
    lab.send(1, &[&rep]);
    lab.run();
    lab.expect(1, &[ns_out(M1, None, "2001:db8:1::2")]);
    let na1 = na(GW, true); // the answer to our NS
    lab.send(1, &[&na1]);
    lab.run();
    let o6 = eth(GW, M1, None, ET_IP6, &p6.hop().bytes());
    lab.expect(1, &[&o6]);
    for f in [&f6, &rep, &na1] {
        lab.rx(0, f);
    }
    lab.fwd(0, &o6);
    let c = lab.c(0);
    c.local_in += 2;
    c.neighbors_learned += 2;
    c.queued += 1;
    c.neighbor_requests += 1;
    lab.check("gateway learned");

    // `probe6`: the IPv6 entry is stale, so its first use also sends a unicast NS.
    let burst = |lab: &mut Lab, m: [u8; 6], tag: u8, probe6: bool| {
        let p = udp4_pkt("10.0.0.10", "8.1.1.1", 64, &[tag]);
        let q = udp6_pkt("2001:db8::10", "2001:4860::1", 64, &[tag]);
        let (f, g) = (to_vr(M0, H0, None, &p), to_vr6(M0, H0, None, &q));
        lab.send(0, &[f.clone(), f.clone(), g.clone(), g.clone()]);
        lab.run();
        let (o, o6) = (
            eth(m, M1, None, ET_IP4, &p.hop().bytes()),
            eth(m, M1, None, ET_IP6, &q.hop().bytes()),
        );
        let mut want = vec![o.clone(), o.clone(), o6.clone(), o6.clone()];
        if probe6 {
            let ll1 = eui64_ll(M1);
            let ns = ns_msg(ll1, gh, gh, &lla_opt(1, M1));
            want.push(eth(m, M1, None, ET_IP6, &Ip6::new(ll1, gh, 255, 58, ns).bytes()));
            lab.c(0).neighbor_requests += 1;
        }
        lab.expect(1, &want);
        for (x, y) in [(&f, &o), (&f, &o), (&g, &o6), (&g, &o6)] {
            lab.rx(0, x);
            lab.fwd(0, y);
        }
        lab.check(&format!("burst {tag}"));
    };
    burst(&mut lab, GW, 1, false);
    burst(&mut lab, GW, 2, false);
    // The gateway's MAC changes (ARP reply; unsolicited NA with override: stale at H4).
    lab.now += MS;
    let rep2 = arp_reply_in(M1, H4, "10.0.1.2", "10.0.1.1");
    let na2 = na(H4, false);
    lab.send(1, &[rep2.clone(), na2.clone()]);
    lab.run();
    lab.rx(0, &rep2);
    lab.rx(0, &na2);
    lab.c(0).local_in += 2;
    lab.c(0).neighbors_learned += 2;
    lab.check("moved");
    assert_eq!(state(&lab, "10.0.1.2"), (Some(NeighborState::Reachable), Some(H4)));
    assert_eq!(state(&lab, "2001:db8:1::2"), (Some(NeighborState::Stale), Some(H4)));
    burst(&mut lab, H4, 3, true);
    burst(&mut lab, H4, 4, false);
}

// ---------------------------------------------------------------------------------------------
// Neighbor discovery

#[test]
fn neighbor_solicitation_gets_advertisement() {
    let mut lab = lab();
    let r = a6("2001:db8::1");
    let h = a6("2001:db8::33");
    let g = solicited_node(r);
    // Multicast NS with an SLLA option that differs from the Ethernet source: the NA goes to the
    // SLLA.
    let ns = eth(
        mcast_mac(g),
        H3,
        None,
        ET_IP6,
        &Ip6::new(h, g, 255, 58, ns_msg(h, g, r, &lla_opt(1, H4))).bytes(),
    );
    let na = eth(
        H4,
        M0,
        None,
        ET_IP6,
        &Ip6::new(r, h, 255, 58, na_msg(r, h, r, (true, true, true), &lla_opt(2, M0))).bytes(),
    );
    lab.send(0, &[&ns]);
    lab.run();
    lab.expect(0, &[na]);
    lab.expect_silence();
    lab.rx(0, &ns);
    let c = lab.c(0);
    c.local_in += 1;
    c.neighbor_replies += 1;
    c.neighbors_learned += 1;
    lab.check("multicast NS");
    assert_eq!(state(&lab, "2001:db8::33"), (Some(NeighborState::Stale), Some(H4)));

    // Usable at once; its first use probes it by unicast (NS to the address, at its MAC).
    let p = udp6_pkt("2001:4860::1", "2001:db8::33", 64, b"to the solicitor");
    let f = to_vr6(M1, GW, None, &p);
    lab.send(1, &[&f]);
    lab.run();
    let ll0 = eui64_ll(M0);
    let o = eth(H4, M0, None, ET_IP6, &p.hop().bytes());
    let probe = eth(
        H4,
        M0,
        None,
        ET_IP6,
        &Ip6::new(ll0, h, 255, 58, ns_msg(ll0, h, h, &lla_opt(1, M0))).bytes(),
    );
    lab.expect(0, &[&o, &probe]);
    lab.rx(0, &f);
    lab.fwd(0, &o);
    lab.c(0).neighbor_requests += 1;
    lab.check("first use of an NS-learned entry");

    // Unicast NS for our link-local address, without SLLA: answered to the frame's source,
    // nothing learned.
    let (ll0, hl) = (eui64_ll(M0), eui64_ll(H3));
    let ns = to_vr6(M0, H3, None, &Ip6::new(hl, ll0, 255, 58, ns_msg(hl, ll0, ll0, &[])));
    let na = eth(
        H3,
        M0,
        None,
        ET_IP6,
        &Ip6::new(ll0, hl, 255, 58, na_msg(ll0, hl, ll0, (true, true, true), &lla_opt(2, M0)))
            .bytes(),
    );
    lab.send(0, &[&ns]);
    lab.run();
    lab.expect(0, &[na]);
    lab.rx(0, &ns);
    lab.c(0).local_in += 1;
    lab.c(0).neighbor_replies += 1;
    lab.check("unicast NS for the link-local address");
    assert_eq!(state(&lab, &std::net::Ipv6Addr::from(hl).to_string()), (None, None));

    // Multicast NS on the VLAN interface for its link-local address (U/L bit flipped on).
    let ll2 = eui64_ll(M2);
    let g2 = solicited_node(ll2);
    let h2 = a6("fe80::c");
    let ns = eth(
        mcast_mac(g2),
        H2,
        Some(VLAN),
        ET_IP6,
        &Ip6::new(h2, g2, 255, 58, ns_msg(h2, g2, ll2, &lla_opt(1, H2))).bytes(),
    );
    let na = eth(
        H2,
        M2,
        Some(VLAN),
        ET_IP6,
        &Ip6::new(ll2, h2, 255, 58, na_msg(ll2, h2, ll2, (true, true, true), &lla_opt(2, M2)))
            .bytes(),
    );
    lab.send(2, &[&ns]);
    lab.run();
    lab.expect(2, &[na]);
    lab.rx(0, &ns);
    let c = lab.c(0);
    c.local_in += 1;
    c.neighbor_replies += 1;
    c.neighbors_learned += 1;
    lab.check("vlan NS");
    assert_eq!(state(&lab, "fe80::c").1, Some(H2));
}

#[test]
fn duplicate_address_detection_is_answered_to_all_nodes() {
    let mut lab = lab();
    let r = a6("2001:db8::1");
    let g = solicited_node(r);
    let un = [0u8; 16];
    let ns = eth(
        mcast_mac(g),
        H3,
        None,
        ET_IP6,
        &Ip6::new(un, g, 255, 58, ns_msg(un, g, r, &[])).bytes(),
    );
    let all = a6("ff02::1");
    let na = eth(
        [0x33, 0x33, 0, 0, 0, 1],
        M0,
        None,
        ET_IP6,
        &Ip6::new(r, all, 255, 58, na_msg(r, all, r, (true, false, true), &lla_opt(2, M0))).bytes(),
    );
    lab.send(0, &[&ns]);
    lab.run();
    lab.expect(0, &[na]);
    lab.rx(0, &ns);
    lab.c(0).local_in += 1;
    lab.c(0).neighbor_replies += 1;
    lab.check("DAD");
    assert_eq!(lab.neighbors(0).len(), 6, "nothing learned from ::");
}

#[test]
fn invalid_neighbor_discovery_is_dropped() {
    let mut lab = lab();
    let r = a6("2001:db8::1");
    let h = a6("2001:db8::33");
    let g = solicited_node(r);
    let un = [0u8; 16];
    let slla = lla_opt(1, H3);
    let mcast = |ip: Ip6| eth(mcast_mac(g), H3, None, ET_IP6, &ip.bytes());
    let uni = |ip: Ip6| eth(M0, H3, None, ET_IP6, &ip.bytes());
    let ns_code1 = {
        let mut body = r.to_vec();
        body.extend_from_slice(&slla);
        icmp6(Icmpv6Type::Unknown { type_u8: 135, code_u8: 1, bytes5to8: [0; 4] }, h, g, &body)
    };
    let all = a6("ff02::1");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("hop limit 254", mcast(Ip6::new(h, g, 254, 58, ns_msg(h, g, r, &slla)))),
        ("code 1", mcast(Ip6::new(h, g, 255, 58, ns_code1))),
        ("multicast target", uni(Ip6::new(h, r, 255, 58, ns_msg(h, r, all, &slla)))),
        (
            "option of length 0",
            mcast(Ip6::new(h, g, 255, 58, ns_msg(h, g, r, &[1, 0, 0, 0, 0, 0, 0, 0]))),
        ),
        (
            "option past the end",
            mcast(Ip6::new(h, g, 255, 58, ns_msg(h, g, r, &[1, 2, 1, 2, 3, 4, 5, 6]))),
        ),
        ("unspecified source with SLLA", mcast(Ip6::new(un, g, 255, 58, ns_msg(un, g, r, &slla)))),
        // RFC 4861 §7.1.1: from ::, the destination must be a solicited-node group.
        (
            "unspecified source to all-nodes",
            uni(Ip6::new(un, all, 255, 58, ns_msg(un, all, r, &[]))),
        ),
        ("target not ours", uni(Ip6::new(h, r, 255, 58, ns_msg(h, r, a6("2001:db8::99"), &slla)))),
        (
            "truncated",
            uni(Ip6::new(h, r, 255, 58, icmp6(Icmpv6Type::NeighborSolicitation, h, r, &r[..12]))),
        ),
        (
            "NA hop limit 64",
            uni(Ip6::new(h, r, 64, 58, na_msg(h, r, h, (false, true, true), &lla_opt(2, H3)))),
        ),
        (
            "NA solicited to multicast",
            uni(Ip6::new(h, all, 255, 58, na_msg(h, all, h, (false, true, true), &lla_opt(2, H3)))),
        ),
        (
            "NA multicast target",
            uni(Ip6::new(h, r, 255, 58, na_msg(h, r, all, (false, true, true), &[]))),
        ),
        (
            "NA bad option",
            uni(Ip6::new(
                h,
                r,
                255,
                58,
                na_msg(h, r, h, (false, true, true), &[2, 0, 0, 0, 0, 0, 0, 0]),
            )),
        ),
    ];
    for (what, f) in cases {
        lab.send(0, &[&f]);
        lab.run();
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::NdpInvalid);
        lab.check(what);
    }
    // From :: to a unicast address: the source check (:: is never a source to route or
    // deliver) drops it first.
    let f = uni(Ip6::new(un, r, 255, 58, ns_msg(un, r, r, &[])));
    lab.send(0, &[&f]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f);
    lab.drop(0, VrDrop::MartianSource);
    lab.check("unspecified source to unicast");
    assert_eq!(lab.neighbors(0).len(), 6, "nothing learned");
}

#[test]
fn ndp_resolution_solicits_and_advertisement_flushes() {
    let mut lab = lab();
    let p = udp6_pkt("2001:4860::1", "2001:db8::20", 64, b"to be resolved");
    let f = to_vr6(M1, GW, None, &p);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[ns_out(M0, None, "2001:db8::20")]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("solicited");

    // An NA for an address we have no entry for creates nothing.
    let (t, r) = (a6("2001:db8::77"), a6("2001:db8::1"));
    let stray = to_vr6(
        M0,
        H4,
        None,
        &Ip6::new(t, r, 255, 58, na_msg(t, r, t, (false, false, true), &lla_opt(2, H4))),
    );
    // The answer, solicited, to our address.
    let t = a6("2001:db8::20");
    let na = to_vr6(
        M0,
        H3,
        None,
        &Ip6::new(t, r, 255, 58, na_msg(t, r, t, (false, true, true), &lla_opt(2, H3))),
    );
    lab.send(0, &[stray.clone(), na.clone()]);
    lab.run();
    let o = eth(H3, M0, None, ET_IP6, &p.hop().bytes());
    lab.expect(0, &[&o]);
    lab.rx(0, &stray);
    lab.rx(0, &na);
    lab.fwd(0, &o);
    let c = lab.c(0);
    c.local_in += 2;
    c.neighbors_learned += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("advertised");
    assert_eq!(state(&lab, "2001:db8::77"), (None, None));
    assert_eq!(state(&lab, "2001:db8::20"), (Some(NeighborState::Reachable), Some(H3)));

    // Stale: the probe is a unicast NS to the target address itself and its MAC.
    lab.now = T + 100 * MS;
    let q = udp6_pkt("2001:4860::1", "2001:db8::20", 64, b"stale");
    let g = to_vr6(M1, GW, None, &q);
    lab.send(1, &[&g]);
    lab.run();
    let ll0 = eui64_ll(M0);
    let probe = eth(
        H3,
        M0,
        None,
        ET_IP6,
        &Ip6::new(ll0, t, 255, 58, ns_msg(ll0, t, t, &lla_opt(1, M0))).bytes(),
    );
    let o = eth(H3, M0, None, ET_IP6, &q.hop().bytes());
    lab.expect(0, &[o.clone(), probe]);
    lab.rx(0, &g);
    lab.fwd(0, &o);
    lab.c(0).neighbor_requests += 1;
    lab.check("stale probe");
}

#[test]
fn link_local_gateway_is_resolved_on_its_interface() {
    let mut c = nvr();
    c.routes.push(via_if("2001:db8:abc::/48", "fe80::1", 1));
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    let p = udp6_pkt("2001:db8::10", "2001:db8:abc::5", 64, b"via fe80::1");
    let f = to_vr6(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    lab.expect(1, &[ns_out(M1, None, "fe80::1")]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.c(0).queued += 1;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 1;
    lab.queued[0] = 1;
    lab.check("solicit the link-local gateway");

    let (gl, ll1) = (a6("fe80::1"), eui64_ll(M1));
    let na = to_vr6(
        M1,
        GW,
        None,
        &Ip6::new(gl, ll1, 255, 58, na_msg(gl, ll1, gl, (true, true, true), &lla_opt(2, GW))),
    );
    lab.send(1, &[&na]);
    lab.run();
    let o = eth(GW, M1, None, ET_IP6, &p.hop().bytes());
    lab.expect(1, &[&o]);
    lab.rx(0, &na);
    lab.fwd(0, &o);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("resolved");
}

#[test]
fn advertisement_without_override_does_not_replace_a_known_mac() {
    // RFC 4861 §7.2.5: with the Override flag clear and a different link-layer address, the
    // cached address is kept (a reachable entry becomes stale); the Override flag set replaces it.
    let mut lab = lab();
    let p = udp6_pkt("2001:4860::1", "2001:db8::20", 64, b"resolve me");
    let f = to_vr6(M1, GW, None, &p);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[ns_out(M0, None, "2001:db8::20")]);
    let (t, r) = (a6("2001:db8::20"), a6("2001:db8::1"));
    let na = |m: [u8; 6], flags| {
        to_vr6(M0, m, None, &Ip6::new(t, r, 255, 58, na_msg(t, r, t, flags, &lla_opt(2, m))))
    };
    let first = na(H3, (false, true, true));
    lab.send(0, &[&first]);
    lab.run();
    let o = eth(H3, M0, None, ET_IP6, &p.hop().bytes());
    lab.expect(0, &[&o]);
    lab.rx(0, &f);
    lab.rx(0, &first);
    lab.fwd(0, &o);
    let c = lab.c(0);
    c.queued += 1;
    c.neighbor_requests += 1;
    c.local_in += 1;
    c.neighbors_learned += 1;
    lab.check("resolved at H3");

    let no_override = na(H4, (false, false, false));
    lab.send(0, &[&no_override]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &no_override);
    lab.c(0).local_in += 1;
    lab.check("NA without override");
    assert_eq!(state(&lab, "2001:db8::20").1, Some(H3), "O=0 must not replace the cached MAC");

    let with_override = na(H4, (false, false, true));
    lab.send(0, &[&with_override]);
    lab.run();
    lab.rx(0, &with_override);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("NA with override");
    assert_eq!(state(&lab, "2001:db8::20").1, Some(H4));
}

#[test]
fn icmp_error_to_an_unresolved_source_waits_for_arp() {
    let mut lab = lab();
    // From a lan host nobody has resolved yet: the error is queued behind an ARP request.
    let p = udp4_pkt("10.0.0.50", "8.8.8.8", 1, b"who are you");
    let f = to_vr(M0, H3, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.50")]);
    lab.rx(0, &f);
    lab.drop(0, VrDrop::TtlExpired);
    let c = lab.c(0);
    c.icmp_errors += 1;
    c.queued += 1;
    c.neighbor_requests += 1;
    lab.queued[0] = 1; // generated: not in the invariant
    lab.check("error queued");

    let rep = arp_reply_in(M0, H3, "10.0.0.50", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    let e = icmp4_error("10.0.0.1", a4("10.0.0.50"), 1, ttl_exceeded4(), &p.bytes());
    lab.expect(0, &[eth(H3, M0, None, ET_IP4, &e)]);
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.queued[0] = 0;
    lab.check("error sent");
}

#[test]
fn fragments_wait_for_resolution_and_all_count() {
    let mut c = nvr();
    // An IPv6 link cannot go below 1280 (RFC 8200 §5): lan is IPv4 only here.
    c.interfaces[0].mtu = 576;
    c.interfaces[0].ipv6.clear();
    c.limits.queue_per_neighbor = 4;
    c.limits.queue_total = 8;
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    // 980 bytes of data through lan (MTU 576) to an unresolved host: 552 + 428.
    let p = udp4_pkt("8.8.8.8", "10.0.0.20", 64, &[0x77; 972]);
    let f = to_vr(M1, GW, None, &p);
    lab.send(1, &[&f]);
    lab.run();
    lab.expect(0, &[arp_req_out(M0, None, "10.0.0.1", "10.0.0.20")]);
    lab.rx(0, &f);
    let c = lab.c(0);
    c.queued += 2;
    c.neighbor_requests += 1;
    c.fragments_sent += 2; // made (and queued)
    lab.transit_queued[0] = 1; // the first fragment stands for the packet
    lab.queued[0] = 2;
    lab.check("fragments queued");

    let rep = arp_reply_in(M0, H3, "10.0.0.20", "10.0.0.1");
    lab.send(0, &[&rep]);
    lab.run();
    let frag = |off: usize, n: usize, mf| Ip4 {
        payload: p.payload[off..off + n].to_vec(),
        mf,
        frag: (off / 8) as u16,
        ttl: 63,
        ..p.clone()
    };
    let first = eth(H3, M0, None, ET_IP4, &frag(0, 552, true).bytes());
    let second = eth(H3, M0, None, ET_IP4, &frag(552, 428, false).bytes());
    lab.expect_unordered(0, &[first.clone(), second]);
    lab.rx(0, &rep);
    lab.fwd(0, &first);
    let c = lab.c(0);
    c.local_in += 1;
    c.neighbors_learned += 1;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("fragments sent");
}

/// A learned gateway behind the forwarding fast path still goes stale on time: unicast probes,
/// then resolution anew (broadcast, its packets waiting), then failure, exactly as for a
/// connected host.
#[test]
fn gateway_entry_goes_stale_behind_the_fast_path() {
    let mut c = nvr();
    c.neighbors.retain(|n| n.iface != 1);
    let mut lab = Lab::new(&[c], &RINGS);
    lab.now = T;
    let rep = arp_reply_in(M1, GW, "10.0.1.2", "10.0.1.1");
    lab.send(1, &[&rep]);
    lab.run();
    lab.rx(0, &rep);
    lab.c(0).local_in += 1;
    lab.c(0).neighbors_learned += 1;
    lab.check("gateway learned");
    let probe = eth(GW, M1, None, ET_ARP, &arp(1, M1, "10.0.1.1", ZERO_MAC, "10.0.1.2"));
    for (ms, probed) in [
        (1u64, false),
        (2, false),
        (99, false),
        (100, true),
        (101, false),
        (110, true),
        (120, true),
    ] {
        lab.now = T + ms * MS;
        let p = udp4_pkt("10.0.0.10", "8.1.1.1", 64, &[ms as u8]);
        let f = to_vr(M0, H0, None, &p);
        lab.send(0, &[&f, &f]);
        lab.run();
        let o = eth(GW, M1, None, ET_IP4, &p.hop().bytes());
        let mut want = vec![o.clone(), o.clone()];
        if probed {
            want.push(probe.clone());
            lab.c(0).neighbor_requests += 1;
        }
        lab.expect(1, &want);
        lab.expect_silence();
        for _ in 0..2 {
            lab.rx(0, &f);
            lab.fwd(0, &o);
        }
        lab.check(&format!("T+{ms}ms"));
    }
    lab.now = T + 130 * MS;
    let p = udp4_pkt("10.0.0.10", "8.1.1.1", 64, b"late");
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f, &f]);
    lab.run();
    // The unicast probes went unanswered: resolved anew by broadcast, both packets waiting
    // (none sent to the MAC that stopped answering), retransmitted on time.
    let req = arp_req_out(M1, None, "10.0.1.1", "10.0.1.2");
    lab.expect(1, &[&req]);
    lab.expect_silence();
    lab.rx(0, &f);
    lab.rx(0, &f);
    lab.c(0).queued += 2;
    lab.c(0).neighbor_requests += 1;
    lab.transit_queued[0] = 2;
    lab.queued[0] = 2;
    lab.check("gateway resolved anew");
    for ms in [140u64, 150] {
        lab.run_at(T + ms * MS);
        lab.expect(1, &[&req]);
        lab.expect_silence();
        lab.c(0).neighbor_requests += 1;
        lab.check(&format!("T+{ms}ms: request retransmitted"));
    }
    // Silent to those too: host unreachable for each waiting packet (RFC 1812 §4.3.3.1), back
    // on lan from lan's address.
    lab.run_at(T + 160 * MS);
    let t = Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::Host);
    let err =
        |id| eth(H0, M0, None, ET_IP4, &icmp4_error("10.0.0.1", p.src, id, t.clone(), &p.bytes()));
    lab.expect(0, &[err(1), err(2)]);
    lab.expect_silence();
    lab.drop(0, VrDrop::NoNeighbor);
    lab.drop(0, VrDrop::NoNeighbor);
    lab.c(0).icmp_errors += 2;
    lab.transit_queued[0] = 0;
    lab.queued[0] = 0;
    lab.check("gateway failed");
}
