//! One crafted packet (or a few) per drop reason, classification (`PortDrop`) and VR (`VrDrop`),
//! with every counter asserted and nothing sent. Reasons whose main test lives elsewhere
//! (ICMP errors, neighbors) are listed in `coverage.rs`.

use crate::common;

use common::*;
use dataplane::config::VrConfig;
use dataplane::{PortDrop, VrDrop};
use etherparse::{Icmpv4Type, Icmpv6Type};

const RINGS: [usize; 3] = [64, 64, 64];

fn lab() -> Lab {
    Lab::new(&[base_vr()], &RINGS)
}

/// Sends each frame on `port`; each must be dropped by the VR for `reason`, silently.
#[track_caller]
fn vr_drops(lab: &mut Lab, port: usize, reason: VrDrop, frames: &[(&str, Vec<u8>)]) {
    for (what, f) in frames {
        lab.send(port, std::slice::from_ref(f));
        lab.run();
        lab.expect_silence();
        lab.rx(0, f);
        lab.drop(0, reason);
        lab.check(&format!("{}: {what}", reason.name()));
    }
}

/// Sends each frame on `port`; each must be dropped at classification for `reason`.
#[track_caller]
fn port_drops(lab: &mut Lab, port: usize, reason: PortDrop, frames: &[(&str, Vec<u8>)]) {
    for (what, f) in frames {
        lab.send(port, std::slice::from_ref(f));
        lab.run();
        lab.expect_silence();
        lab.pdrop(port, reason);
        lab.check(&format!("{}: {what}", reason.name()));
    }
}

fn ip4_frame(p: &Ip4) -> Vec<u8> {
    to_vr(M0, H0, None, p)
}

fn ip6_frame(p: &Ip6) -> Vec<u8> {
    to_vr6(M0, H0, None, p)
}

// ---------------------------------------------------------------------------------------------
// Classification

#[test]
fn runt() {
    let mut lab = lab();
    let good = ip4_frame(&udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x"));
    let tagged = to_vr(M2, H2, Some(VLAN), &udp4_pkt("10.0.2.2", "8.8.8.8", 64, b"x"));
    port_drops(
        &mut lab,
        0,
        PortDrop::Runt,
        &[("empty", vec![]), ("1 byte", good[..1].to_vec()), ("13 bytes", good[..13].to_vec())],
    );
    port_drops(
        &mut lab,
        2,
        PortDrop::Runt,
        &[("tagged, 14 bytes", tagged[..14].to_vec()), ("tagged, 17 bytes", tagged[..17].to_vec())],
    );
    // 14 bytes untagged, 18 tagged: not runts; they reach the VR and fail there.
    let f = good[..14].to_vec();
    lab.send(0, &[&f]);
    let g = tagged[..18].to_vec();
    lab.send(2, &[&g]);
    lab.run();
    lab.rx(0, &f);
    lab.rx(0, &g);
    lab.drop(0, VrDrop::Ip4BadLength);
    lab.drop(0, VrDrop::Ip4BadLength);
    lab.check("shortest non-runts");
}

#[test]
fn vlan_unknown() {
    let mut lab = lab();
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x");
    port_drops(
        &mut lab,
        0,
        PortDrop::VlanUnknown,
        &[("VLAN 300 on an untagged-only port", eth(M0, H0, Some(300), ET_IP4, &p.bytes()))],
    );
    port_drops(
        &mut lab,
        2,
        PortDrop::VlanUnknown,
        &[
            ("untagged on a VLAN-only port", eth(M2, H2, None, ET_IP4, &p.bytes())),
            (
                "priority-tagged (VLAN 0) on a VLAN-only port",
                eth(M2, H2, Some(0), ET_IP4, &p.bytes()),
            ),
            ("VLAN 101", eth(M2, H2, Some(101), ET_IP4, &p.bytes())),
            ("broadcast ARP on VLAN 101", arp_request_frame(H2, "10.0.2.2", "10.0.2.1", Some(101))),
        ],
    );
}

#[test]
fn not_for_us() {
    let mut lab = lab();
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x");
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let all = a6("ff02::1");
    let ping_all = Ip6::new(h, all, 64, 58, echo6_req(h, all, 1, 1, b""));
    let other = a6("2001:db8::99");
    let g_other = solicited_node(other);
    let ns_other = Ip6::new(h, g_other, 255, 58, ns_msg(h, g_other, other, &lla_opt(1, H0)));
    let g = solicited_node(r);
    let echo_to_group = Ip6::new(h, g, 64, 58, echo6_req(h, g, 1, 1, b""));
    port_drops(
        &mut lab,
        0,
        PortDrop::NotForUs,
        &[
            (
                "unicast MAC of no interface",
                eth([2, 0, 0, 0, 0x99, 0x99], H0, None, ET_IP4, &p.bytes()),
            ),
            ("another interface's MAC on the wrong port", eth(M1, H0, None, ET_IP4, &p.bytes())),
            ("broadcast IPv4", eth(BROADCAST, H0, None, ET_IP4, &p.bytes())),
            ("IPv4 multicast MAC", eth([0x01, 0, 0x5e, 0, 0, 5], H0, None, ET_IP4, &p.bytes())),
            (
                "broadcast ARP for no interface address",
                arp_request_frame(H0, "10.0.0.10", "10.0.0.99", None),
            ),
            (
                "broadcast ARP for an address on another port",
                arp_request_frame(H0, "10.0.0.10", "10.0.1.1", None),
            ),
            (
                "truncated broadcast ARP",
                eth(
                    BROADCAST,
                    H0,
                    None,
                    ET_ARP,
                    &arp(1, H0, "10.0.0.10", ZERO_MAC, "10.0.0.1")[..24],
                ),
            ),
            ("ff02::1 traffic", eth(mcast_mac(all), H0, None, ET_IP6, &ping_all.bytes())),
            (
                "multicast NS for a target not ours",
                eth(mcast_mac(g_other), H0, None, ET_IP6, &ns_other.bytes()),
            ),
            (
                "solicited-node MAC carrying no NS",
                eth(mcast_mac(g), H0, None, ET_IP6, &echo_to_group.bytes()),
            ),
        ],
    );
    // An NS for an address of an interface on another port is not ours on this one.
    let r1 = a6("2001:db8:1::1");
    let g1 = solicited_node(r1);
    let ns1 = Ip6::new(h, g1, 255, 58, ns_msg(h, g1, r1, &lla_opt(1, H0)));
    port_drops(
        &mut lab,
        0,
        PortDrop::NotForUs,
        &[("NS for wan's address on lan", eth(mcast_mac(g1), H0, None, ET_IP6, &ns1.bytes()))],
    );
}

// ---------------------------------------------------------------------------------------------
// Ethernet and ARP

#[test]
fn unknown_ethertype() {
    let mut lab = lab();
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x");
    // Double 802.1Q: outer tag VLAN 0 (priority, so lan's untagged interface), whose ethertype
    // is another 802.1Q tag (VLAN 5). One tag is parsed; the rest is an unknown ethertype.
    let mut inner = vec![0x00, 0x05, 0x08, 0x00];
    inner.extend(p.bytes());
    let qinq = eth(M0, H0, Some(0), 0x8100, &inner);
    vr_drops(
        &mut lab,
        0,
        VrDrop::UnknownEthertype,
        &[
            ("LLDP", pad60(eth(M0, H0, None, 0x88cc, b"lldp"))),
            ("802.1ad outer tag", eth(M0, H0, None, 0x88a8, &[0, 5, 8, 0, 0x45])),
            ("double 802.1Q tag", qinq),
            ("length field (802.3)", pad60(eth(M0, H0, None, 46, &[0; 46]))),
        ],
    );
}

#[test]
fn arp_malformed() {
    let mut lab = lab();
    let good = arp(1, H0, "10.0.0.10", ZERO_MAC, "10.0.0.1");
    let patched = |at: usize, v: &[u8]| {
        let mut a = good.clone();
        a[at..at + v.len()].copy_from_slice(v);
        pad60(eth(M0, H0, None, ET_ARP, &a))
    };
    vr_drops(
        &mut lab,
        0,
        VrDrop::ArpMalformed,
        &[
            ("truncated (27 bytes)", eth(M0, H0, None, ET_ARP, &good[..27])),
            ("hardware type 6", patched(0, &[0, 6])),
            ("protocol IPv6", patched(2, &[0x86, 0xdd])),
            ("hardware length 8", patched(4, &[8])),
            ("protocol length 16", patched(5, &[16])),
            ("operation 3 (RARP)", patched(6, &[0, 3])),
            ("operation 0", patched(6, &[0, 0])),
        ],
    );
}

#[test]
fn arp_not_for_us() {
    let mut lab = lab();
    vr_drops(
        &mut lab,
        0,
        VrDrop::ArpNotForUs,
        &[
            (
                "unicast request for another host",
                pad60(eth(M0, H0, None, ET_ARP, &arp(1, H0, "10.0.0.10", ZERO_MAC, "10.0.0.77"))),
            ),
            (
                "unicast request for wan's address on lan",
                pad60(eth(M0, H0, None, ET_ARP, &arp(1, H0, "10.0.0.10", ZERO_MAC, "10.0.1.1"))),
            ),
            (
                "reply for another host",
                pad60(eth(M0, H0, None, ET_ARP, &arp(2, H0, "10.0.0.10", M0, "10.0.0.77"))),
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// IPv4 header checks (RFC 1812 §5.2.2)

#[test]
fn ip4_bad_length() {
    let mut lab = lab();
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[1; 30]);
    let b = p.bytes();
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut ip = b.clone();
        f(&mut ip);
        eth(M0, H0, None, ET_IP4, &ip)
    };
    vr_drops(
        &mut lab,
        0,
        VrDrop::Ip4BadLength,
        &[
            ("19 bytes", eth(M0, H0, None, ET_IP4, &b[..19])),
            ("nothing after the Ethernet header", eth(M0, H0, None, ET_IP4, &[])),
            (
                "IHL 4",
                with(&|ip| {
                    ip[0] = 0x44;
                    fix_ip4_checksum(ip, 16);
                }),
            ),
            (
                "total length 19 < IHL*4",
                with(&|ip| {
                    ip[2..4].copy_from_slice(&19u16.to_be_bytes());
                    fix_ip4_checksum(ip, 20);
                }),
            ),
            (
                "total length beyond the frame",
                with(&|ip| {
                    ip[2..4].copy_from_slice(&(b.len() as u16 + 1).to_be_bytes());
                    fix_ip4_checksum(ip, 20);
                }),
            ),
            (
                "IHL 15 (60 bytes) in a 40-byte packet",
                with(&|ip| {
                    ip[0] = 0x4f;
                    ip.truncate(40);
                    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
                }),
            ),
        ],
    );
}

#[test]
fn ip4_bad_version() {
    let mut lab = lab();
    let b = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x").bytes();
    let v = |ver: u8| {
        let mut ip = b.clone();
        ip[0] = ver << 4 | 5;
        fix_ip4_checksum(&mut ip, 20);
        eth(M0, H0, None, ET_IP4, &ip)
    };
    let v6 = udp6_pkt("2001:db8::10", "2001:4860::1", 64, b"x").bytes();
    vr_drops(
        &mut lab,
        0,
        VrDrop::Ip4BadVersion,
        &[
            ("version 6", v(6)),
            ("version 0", v(0)),
            ("IPv6 packet under ethertype IPv4", eth(M0, H0, None, ET_IP4, &v6)),
        ],
    );
}

#[test]
fn ip4_bad_checksum() {
    let mut lab = lab();
    let b = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x").bytes();
    let mut flipped = b.clone();
    flipped[10] ^= 1;
    let mut ttl = b.clone();
    ttl[8] -= 1; // header changed, checksum not
    let mut opts =
        Ip4 { options: vec![1, 1, 1, 0], ..udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x") }.bytes();
    opts[21] = 7; // an option byte changed: covered by the checksum too
    vr_drops(
        &mut lab,
        0,
        VrDrop::Ip4BadChecksum,
        &[
            ("checksum bit flipped", eth(M0, H0, None, ET_IP4, &flipped)),
            ("TTL changed", eth(M0, H0, None, ET_IP4, &ttl)),
            ("option changed", eth(M0, H0, None, ET_IP4, &opts)),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// IPv6 header checks

#[test]
fn ip6_bad_length() {
    let mut lab = lab();
    let b = udp6_pkt("2001:db8::10", "2001:4860::1", 64, &[1; 20]).bytes();
    let mut long = b.clone();
    long[4..6].copy_from_slice(&(b.len() as u16 - 40 + 1).to_be_bytes());
    vr_drops(
        &mut lab,
        0,
        VrDrop::Ip6BadLength,
        &[
            ("39 bytes", eth(M0, H0, None, ET_IP6, &b[..39])),
            ("nothing after the Ethernet header", eth(M0, H0, None, ET_IP6, &[])),
            ("payload length beyond the frame", eth(M0, H0, None, ET_IP6, &long)),
        ],
    );
}

#[test]
fn ip6_bad_version() {
    let mut lab = lab();
    let mut b = udp6_pkt("2001:db8::10", "2001:4860::1", 64, b"x").bytes();
    b[0] = 0x40;
    let v4 = udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[0; 40]).bytes();
    vr_drops(
        &mut lab,
        0,
        VrDrop::Ip6BadVersion,
        &[
            ("version 4", eth(M0, H0, None, ET_IP6, &b)),
            ("IPv4 packet under ethertype IPv6", eth(M0, H0, None, ET_IP6, &v4)),
        ],
    );
}

#[test]
fn ip6_bad_ext_header() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let echo = echo6_req(h, r, 1, 1, b"x");
    // Hop-by-hop claiming 3 × 8 bytes in a shorter packet.
    let mut hbh = ext_header(58, 1);
    hbh[1] = 2;
    hbh.extend_from_slice(&echo);
    // Hop-by-hop after a destination options header (RFC 8200 §4.1: only first).
    let mut late = ext_header(0, 1);
    late.extend(ext_header(58, 1));
    late.extend_from_slice(&echo);
    // An AH of length 0.
    let mut ah = vec![58, 0, 0, 0, 0, 0, 0, 0];
    ah.extend_from_slice(&echo);
    vr_drops(
        &mut lab,
        0,
        VrDrop::Ip6BadExtHeader,
        &[
            ("hop-by-hop past the end", ip6_frame(&Ip6::new(h, r, 64, 0, hbh))),
            ("hop-by-hop not first", ip6_frame(&Ip6::new(h, r, 64, 60, late))),
            ("AH of length 0", ip6_frame(&Ip6::new(h, r, 64, 51, ah))),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Martians (RFC 1812 §5.3.7, RFC 4291)

#[test]
fn martian_source() {
    let mut lab = lab();
    let mut frames: Vec<(String, Vec<u8>)> = Vec::new();
    for src in
        ["0.1.2.3", "127.0.0.1", "224.0.0.1", "239.255.255.255", "240.0.0.1", "255.255.255.255"]
    {
        for dst in ["8.8.8.8", "10.0.0.1"] {
            frames.push((format!("{src} -> {dst}"), ip4_frame(&udp4_pkt(src, dst, 64, b"x"))));
        }
    }
    let mut c = base_vr();
    c.routes.push(via("::/0", "2001:db8:1::2"));
    for src in ["ff02::1", "ff0e::5", "::", "::1", "::ffff:10.0.0.10"] {
        for dst in ["2001:4860::1", "2001:db8::1"] {
            frames.push((format!("{src} -> {dst}"), ip6_frame(&udp6_pkt(src, dst, 64, b"x"))));
        }
    }
    let mut lab2 = Lab::new(&[c], &RINGS);
    let frames: Vec<(&str, Vec<u8>)> =
        frames.iter().map(|(s, f)| (s.as_str(), f.clone())).collect();
    vr_drops(&mut lab2, 0, VrDrop::MartianSource, &frames);
    // Without a default route too (the source check comes before the lookup).
    vr_drops(&mut lab, 0, VrDrop::MartianSource, &frames);
}

/// A packet arriving with one of the router's own addresses as its source is spoofed: Linux
/// drops it as a martian source (`fib_validate_source`, `accept_local` off by default), and an
/// ICMP error about it would be addressed to the VR itself.
#[test]
fn martian_source_own_address() {
    let mut lab = lab();
    vr_drops(
        &mut lab,
        0,
        VrDrop::MartianSource,
        &[
            (
                "wan's address as source, from lan",
                ip4_frame(&udp4_pkt("10.0.1.1", "8.8.8.8", 64, b"spoof")),
            ),
            (
                "lan's own address as source",
                ip4_frame(&udp4_pkt("10.0.0.1", "10.0.2.2", 64, b"spoof")),
            ),
        ],
    );
}

#[test]
fn martian_destination() {
    let mut c = base_vr();
    c.routes.push(via("0.0.0.0/0", "10.0.1.2"));
    c.routes.push(via("::/0", "2001:db8:1::2"));
    let mut lab = Lab::new(&[c], &RINGS);
    let mut frames: Vec<(String, Vec<u8>)> = Vec::new();
    for dst in ["0.0.0.1", "127.0.0.1", "127.255.255.254", "240.0.0.1", "255.255.255.255"] {
        frames.push((dst.to_string(), ip4_frame(&udp4_pkt("10.0.0.10", dst, 64, b"x"))));
    }
    // Link-local destinations that are not ours: dropped even with a default route.
    for dst in ["::", "::1", "::ffff:8.8.8.8", "fe80::99", "febf::1"] {
        frames.push((dst.to_string(), ip6_frame(&udp6_pkt("2001:db8::10", dst, 64, b"x"))));
    }
    let frames: Vec<(&str, Vec<u8>)> =
        frames.iter().map(|(s, f)| (s.as_str(), f.clone())).collect();
    vr_drops(&mut lab, 0, VrDrop::MartianDestination, &frames);
}

#[test]
fn martian_destination_link_local_without_default_route() {
    // The same rule without a covering route: still a martian, and no ICMPv6 error (the
    // destination is not "unreachable", it is not forwardable at all).
    let mut lab = lab();
    let f = ip6_frame(&udp6_pkt("2001:db8::10", "fe80::99", 64, b"x"));
    vr_drops(&mut lab, 0, VrDrop::MartianDestination, &[("fe80::99, no default route", f)]);
}

#[test]
fn ip_multicast() {
    let mut lab = lab();
    let (h, all, routers) = (a6("2001:db8::10"), a6("ff02::1"), a6("ff02::2"));
    vr_drops(
        &mut lab,
        0,
        VrDrop::IpMulticast,
        &[
            ("224.0.0.5", ip4_frame(&udp4_pkt("10.0.0.10", "224.0.0.5", 1, b"ospf"))),
            ("239.1.1.1", ip4_frame(&udp4_pkt("10.0.0.10", "239.1.1.1", 64, b"x"))),
            ("ff05::1:3 UDP", ip6_frame(&udp6_pkt("2001:db8::10", "ff05::1:3", 64, b"x"))),
            (
                "ff02::2 ICMPv6 (not a group we join)",
                ip6_frame(&Ip6::new(h, routers, 255, 58, echo6_req(h, routers, 1, 1, b""))),
            ),
            ("ff02::1 UDP (not ICMPv6)", ip6_frame(&udp6_pkt("2001:db8::10", "ff02::1", 64, b"x"))),
            (
                "ff02::1 UDP from ::",
                ip6_frame(&Ip6::new([0; 16], all, 64, 17, udp6([0; 16], all, 1, 2, b"x"))),
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Routes

#[test]
fn blackhole() {
    let mut lab = lab();
    vr_drops(
        &mut lab,
        0,
        VrDrop::Blackhole,
        &[
            ("192.0.2.1", ip4_frame(&udp4_pkt("10.0.0.10", "192.0.2.1", 64, b"x"))),
            (
                "192.0.2.2 with TTL 1 (no error either)",
                ip4_frame(&udp4_pkt("10.0.0.10", "192.0.2.2", 1, b"x")),
            ),
            (
                "2001:db8:dead::1",
                ip6_frame(&udp6_pkt("2001:db8::10", "2001:db8:dead::1", 64, b"x")),
            ),
        ],
    );
}

#[test]
fn directed_broadcast() {
    let mut c = base_vr();
    c.interfaces.push(iface("p2p", 1, Some(31), M1, 1500, &["10.9.9.0/31", "10.9.8.1/32"], &[]));
    c.neighbors.push(neigh(3, "10.9.9.1", H4));
    let mut lab = Lab::new(&[c], &RINGS);
    vr_drops(
        &mut lab,
        0,
        VrDrop::DirectedBroadcast,
        &[
            ("wan's broadcast from lan", ip4_frame(&udp4_pkt("10.0.0.10", "10.0.1.255", 64, b"x"))),
            ("lan's own broadcast", ip4_frame(&udp4_pkt("10.0.0.10", "10.0.0.255", 64, b"x"))),
            ("VLAN subnet's broadcast", ip4_frame(&udp4_pkt("10.0.0.10", "10.0.2.255", 64, b"x"))),
        ],
    );
    // A /31 has no broadcast address (RFC 3021): its upper address is a host.
    let p = udp4_pkt("10.0.0.10", "10.9.9.1", 64, b"p2p");
    let f = ip4_frame(&p);
    lab.send(0, &[&f]);
    lab.run();
    let o = eth(H4, M1, Some(31), ET_IP4, &p.hop().bytes());
    lab.expect(1, &[&o]);
    lab.rx(0, &f);
    lab.fwd(0, &o);
    lab.check("/31 peer");
}

// ---------------------------------------------------------------------------------------------
// Local delivery

#[test]
fn local_unsupported() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let mut syn = Ip4::new("10.0.0.10", "10.0.0.1", 64, 6, vec![0; 20]);
    syn.payload[12] = 0x50;
    syn.payload[13] = 0x02;
    vr_drops(
        &mut lab,
        0,
        VrDrop::LocalUnsupported,
        &[
            ("TCP SYN", ip4_frame(&syn)),
            ("GRE", ip4_frame(&Ip4::new("10.0.0.10", "10.0.1.1", 64, 47, vec![0; 8]))),
            ("IPv6 TCP", ip6_frame(&Ip6::new(h, r, 64, 6, vec![0; 20]))),
            ("IPv6 no next header", ip6_frame(&Ip6::new(h, r, 64, 59, vec![]))),
            (
                "IPv6 OSPF to the link-local address",
                ip6_frame(&Ip6::new(h, eui64_ll(M0), 64, 89, vec![0; 16])),
            ),
        ],
    );
}

/// Fragments addressed to the VR are reassembled (see rfc.rs); a fragment that is not the
/// last but whose data is not a multiple of 8 bytes, or is empty, cannot be part of a datagram
/// (RFC 791, RFC 8200 §4.5).
#[test]
fn local_fragment() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let mut first = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 1, &[0; 4]));
    first.mf = true;
    let mut later = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, vec![0; 5]);
    later.frag = 9;
    later.mf = true;
    let mut empty = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, vec![]);
    empty.frag = 2;
    empty.mf = true;
    // (IPv6 fragments of a wrong length are answered: rfc.rs, `malformed_fragments_v6`.)
    let frag6_empty = vec![58, 0, 0, 0x49, 0, 0, 0, 42]; // offset 9 × 8, M=1, no data
    vr_drops(
        &mut lab,
        0,
        VrDrop::LocalFragment,
        &[
            ("IPv4 first fragment, 12 bytes", ip4_frame(&first)),
            ("IPv4 middle fragment, 5 bytes", ip4_frame(&later)),
            ("IPv4 middle fragment, empty", ip4_frame(&empty)),
            ("IPv6 middle fragment, empty", ip6_frame(&Ip6::new(h, r, 64, 44, frag6_empty))),
        ],
    );
}

#[test]
fn icmp_malformed() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let mut bad = echo4_req(1, 1, b"abc");
    bad[2] ^= 0xff;
    let mut bad6 = echo6_req(h, r, 1, 1, b"abc");
    bad6[3] ^= 0x01;
    let wrong_pseudo = echo6_req(h, a6("2001:db8::2"), 1, 1, b"abc"); // checksummed for another dst
    vr_drops(
        &mut lab,
        0,
        VrDrop::IcmpMalformed,
        &[
            ("bad checksum", ip4_frame(&Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, bad))),
            (
                "4 bytes",
                ip4_frame(&Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, vec![8, 0, 0xf7, 0xff])),
            ),
            ("0 bytes", ip4_frame(&Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, vec![]))),
            ("IPv6 bad checksum", ip6_frame(&Ip6::new(h, r, 64, 58, bad6))),
            (
                "IPv6 checksum without the right pseudo-header",
                ip6_frame(&Ip6::new(h, r, 64, 58, wrong_pseudo)),
            ),
            ("IPv6 3 bytes", ip6_frame(&Ip6::new(h, r, 64, 58, vec![128, 0, 0]))),
        ],
    );
}

#[test]
fn icmp_not_handled() {
    let mut lab = lab();
    let (h, r, all) = (a6("2001:db8::10"), a6("2001:db8::1"), a6("ff02::1"));
    let inner = udp4_pkt("10.0.0.1", "10.0.0.10", 64, b"x").bytes();
    vr_drops(
        &mut lab,
        0,
        VrDrop::IcmpNotHandled,
        &[
            (
                "echo reply",
                ip4_frame(&Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_rep(1, 1, b""))),
            ),
            (
                "port unreachable",
                ip4_frame(&Ip4::new(
                    "10.0.0.10",
                    "10.0.0.1",
                    64,
                    1,
                    icmp4(port_unreach4(), &inner),
                )),
            ),
            (
                "timestamp request",
                ip4_frame(&Ip4::new(
                    "10.0.0.10",
                    "10.0.0.1",
                    64,
                    1,
                    icmp4(
                        Icmpv4Type::Unknown { type_u8: 13, code_u8: 0, bytes5to8: [0; 4] },
                        &[0; 12],
                    ),
                )),
            ),
            (
                "echo request with code 1",
                ip4_frame(&Ip4::new(
                    "10.0.0.10",
                    "10.0.0.1",
                    64,
                    1,
                    icmp4(Icmpv4Type::Unknown { type_u8: 8, code_u8: 1, bytes5to8: [0; 4] }, b""),
                )),
            ),
            ("IPv6 echo reply", ip6_frame(&Ip6::new(h, r, 64, 58, echo6_rep(h, r, 1, 1, b"")))),
            (
                "IPv6 router solicitation",
                ip6_frame(&Ip6::new(
                    h,
                    all,
                    255,
                    58,
                    icmp6(Icmpv6Type::RouterSolicitation, h, all, &[]),
                )),
            ),
            (
                "IPv6 echo request to ff02::1",
                ip6_frame(&Ip6::new(h, all, 64, 58, echo6_req(h, all, 1, 1, b""))),
            ),
            (
                "IPv6 packet too big to us",
                ip6_frame(&Ip6::new(
                    h,
                    r,
                    64,
                    58,
                    icmp6(Icmpv6Type::PacketTooBig { mtu: 1280 }, h, r, &[0; 48]),
                )),
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// Egress

fn tiny_wan() -> VrConfig {
    base_vr()
}

#[test]
fn tx_full() {
    // wan's ring holds 2 frames; lan's too, for the generated packets.
    let mut lab = Lab::new(&[tiny_wan()], &[64, 2, 64]);
    let pkts: Vec<Ip4> = (0..5).map(|i| udp4_pkt("10.0.0.10", "8.1.1.1", 64, &[i])).collect();
    let frames: Vec<Vec<u8>> = pkts.iter().map(ip4_frame).collect();
    lab.send(0, &frames);
    lab.run();
    let outs: Vec<Vec<u8>> =
        pkts.iter().map(|p| eth(GW, M1, None, ET_IP4, &p.hop().bytes())).collect();
    lab.expect(1, &outs[..2]);
    for (i, f) in frames.iter().enumerate() {
        lab.rx(0, f);
        if i < 2 {
            lab.fwd(0, &outs[i]);
        } else {
            lab.drop(0, VrDrop::TxFull);
        }
    }
    lab.check("transit: tx_full");
    assert_eq!(lab.e.port_stats(1).tx_full, 3);

    // Generated packets refused by a full ring count `generated_dropped`: fill lan's host ring
    // (2 slots) with echo replies, the third has no room.
    let mut lab2 = Lab::new(&[tiny_wan()], &[2, 64, 64]);
    let pings: Vec<Vec<u8>> = (0..3)
        .map(|i| {
            to_vr(M1, GW, None, &Ip4::new("10.0.0.10", "10.0.1.1", 64, 1, echo4_req(1, i, b"")))
        })
        .collect();
    // From wan, the replies go out of lan (port 0, ring 2).
    lab2.send(1, &pings);
    lab2.run();
    let replies: Vec<Vec<u8>> = (0..2u16)
        .map(|i| {
            eth(
                H0,
                M0,
                None,
                ET_IP4,
                &Ip4 {
                    id: i + 1,
                    ..Ip4::new("10.0.1.1", "10.0.0.10", 64, 1, echo4_rep(1, i, b""))
                }
                .bytes(),
            )
        })
        .collect();
    lab2.expect(0, &replies);
    for f in &pings {
        lab2.rx(0, f);
    }
    let c = lab2.c(0);
    c.local_in += 3;
    c.echo_replies += 3;
    c.generated_dropped += 1;
    lab2.check("generated: generated_dropped");
}

#[test]
fn interface_down() {
    let mut lab = lab();
    let down = |lab: &mut Lab, i: u16, up: bool| {
        let r = lab.e.cell_mut().change_vr(0, dataplane::VrChange::Up(i, up));
        assert_eq!(r, Ok(dataplane::VrAnswer::Done));
    };
    // wan (towards 8/8's gateway) down: transit traffic for it is dropped on the way out.
    down(&mut lab, 1, false);
    vr_drops(
        &mut lab,
        0,
        VrDrop::InterfaceDown,
        &[
            ("8.8.8.8 via a down wan", ip4_frame(&udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x"))),
            (
                "2001:4860::8 via a down wan",
                ip6_frame(&udp6_pkt("2001:db8::10", "2001:4860::8", 64, b"x")),
            ),
        ],
    );
    // lan itself down: what arrives on it is dropped before any other check.
    down(&mut lab, 0, false);
    vr_drops(
        &mut lab,
        0,
        VrDrop::InterfaceDown,
        &[("anything on a down lan", ip4_frame(&udp4_pkt("10.0.0.10", "10.0.1.5", 64, b"x")))],
    );
    // Both up again: forwarded.
    down(&mut lab, 0, true);
    down(&mut lab, 1, true);
    let f = ip4_frame(&udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x"));
    lab.send(0, std::slice::from_ref(&f));
    lab.run();
    assert_eq!(lab.e.vrs()[0].counters().forwarded, 1, "{}", lab.e.dump());
    assert!(lab.e.cell_mut().change_vr(0, dataplane::VrChange::Up(9, false)).is_err());
}
