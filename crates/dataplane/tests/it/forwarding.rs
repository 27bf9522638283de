//! Forwarding: bursts of 1, 2 and 257 packets (IPv4 and IPv6) with every output frame checked
//! byte for byte, engine burst sizes 1 and 2, L2 rewrite with VLAN push/pop/rewrite, padding,
//! checksum corner cases, route kinds and longest-prefix match, fragmentation (RFC 791) and a
//! mixed burst.

use crate::common;

use common::*;
use dataplane::config::VrConfig;
use dataplane::{PortDrop, VrDrop};
use etherparse::defrag::IpDefragPool;
use etherparse::SlicedPacket;

const RINGS: [usize; 3] = [512, 512, 512];

/// `n` UDP/IPv4 packets from H0, two thirds to 8/8 (out wan), one third to 198.51.100/24 (out
/// the VLAN interface), with distinct destinations, TTLs, TOS, DF, ids and payloads.
fn v4_burst(lab: &mut Lab, n: usize) {
    let mut sent = Vec::new();
    let (mut want1, mut want2) = (Vec::new(), Vec::new());
    for i in 0..n {
        let data: Vec<u8> = (0..(i % 61 + 1)).map(|k| (i * 7 + k) as u8).collect();
        let to_vlan = i % 3 == 2;
        let dst = if to_vlan {
            format!("198.51.100.{}", i % 254 + 1)
        } else {
            format!("8.{}.{}.{}", i / 256, i % 256, (i * 13) % 256)
        };
        let mut p = udp4_pkt("10.0.0.10", &dst, 255 - (i % 250) as u8, &data);
        p.id = i as u16;
        p.tos = (i * 4 + 1) as u8;
        p.df = i % 2 == 0;
        let mut fwd = p.hop();
        if i % 5 == 4 {
            // Record Route gets the egress interface's address (RFC 1812 §5.3.13.2), under a
            // recomputed header checksum; the fast path leaves packets with options alone.
            p.options = vec![7, 7, 4, 0, 0, 0, 0, 1];
            let egress = if to_vlan { a4("10.0.2.1") } else { a4("10.0.1.1") };
            fwd = p.hop();
            fwd.options = vec![7, 7, 8, egress[0], egress[1], egress[2], egress[3], 1];
        }
        let f = to_vr(M0, H0, None, &p);
        lab.rx(0, &f);
        let out = if to_vlan {
            eth(H2, M2, Some(VLAN), ET_IP4, &fwd.bytes())
        } else {
            eth(GW, M1, None, ET_IP4, &fwd.bytes())
        };
        lab.fwd(0, &out);
        if to_vlan {
            want2.push(out);
        } else {
            want1.push(out);
        }
        sent.push(f);
    }
    lab.send(0, &sent);
    lab.run();
    lab.expect(1, &want1);
    lab.expect(2, &want2);
    lab.expect::<Vec<u8>>(0, &[]);
    lab.check(&format!("{n} IPv4 packets"));
}

fn v6_burst(lab: &mut Lab, n: usize) {
    let mut sent = Vec::new();
    let (mut want1, mut want2) = (Vec::new(), Vec::new());
    for i in 0..n {
        let data: Vec<u8> = (0..(i % 67 + 1)).map(|k| (i * 5 + k) as u8).collect();
        let to_vlan = i % 4 == 3;
        let dst = if to_vlan {
            format!("2001:db8:100::{:x}", i + 1)
        } else {
            format!("2001:4860:{:x}::{:x}", i, i * 3)
        };
        let mut p = udp6_pkt("2001:db8::10", &dst, 255 - (i % 250) as u8, &data);
        p.tc = i as u8;
        p.flow = (i as u32 * 7919) & 0xfffff;
        let f = to_vr6(M0, H0, None, &p);
        lab.rx(0, &f);
        let out = if to_vlan {
            eth(H2, M2, Some(VLAN), ET_IP6, &p.hop().bytes())
        } else {
            eth(GW, M1, None, ET_IP6, &p.hop().bytes())
        };
        lab.fwd(0, &out);
        if to_vlan {
            want2.push(out);
        } else {
            want1.push(out);
        }
        sent.push(f);
    }
    lab.send(0, &sent);
    lab.run();
    lab.expect(1, &want1);
    lab.expect(2, &want2);
    lab.expect::<Vec<u8>>(0, &[]);
    lab.check(&format!("{n} IPv6 packets"));
}

#[test]
fn forward_v4_burst_1() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    v4_burst(&mut lab, 1);
}

#[test]
fn forward_v4_burst_2() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    v4_burst(&mut lab, 2);
}

#[test]
fn forward_v4_burst_257_takes_two_polls() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let mut probe = Lab::new(&[base_vr()], &RINGS);
    // The engine receives at most 256 frames per port and poll.
    probe.send(0, &vec![to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"x")); 257]);
    assert_eq!(probe.poll(), 256);
    assert_eq!(probe.poll(), 1);
    v4_burst(&mut lab, 257);
    // And again, with the engine's state warm.
    v4_burst(&mut lab, 257);
}

#[test]
fn forward_v6_burst_1() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    v6_burst(&mut lab, 1);
}

#[test]
fn forward_v6_burst_2() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    v6_burst(&mut lab, 2);
}

#[test]
fn forward_v6_burst_257() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    v6_burst(&mut lab, 257);
    v6_burst(&mut lab, 257);
}

#[test]
fn forward_with_engine_bursts_1_and_2() {
    for burst in [1, 2] {
        let mut lab = Lab::with_burst(&[base_vr()], &RINGS, burst);
        v4_burst(&mut lab, 257);
        v6_burst(&mut lab, 257);
        v4_burst(&mut lab, 3);
    }
}

/// base_vr plus a second VLAN (200) on port 2 with the same MAC, towards 100.64/10 and
/// 2001:db8:200::/48.
fn two_vlans() -> VrConfig {
    let mut c = base_vr();
    c.interfaces.push(iface(
        "v200",
        2,
        Some(200),
        M2,
        1500,
        &["10.0.3.1/24"],
        &["2001:db8:3::1/64"],
    ));
    c.routes.push(via("100.64.0.0/10", "10.0.3.2"));
    c.routes.push(via("2001:db8:200::/48", "2001:db8:3::2"));
    c.neighbors.push(neigh(3, "10.0.3.2", H4));
    c.neighbors.push(neigh(3, "2001:db8:3::2", H4));
    c
}

#[test]
fn vlan_push_pop_and_rewrite() {
    let mut lab = Lab::new(&[two_vlans()], &RINGS);
    // untagged -> VLAN 100 (push)
    let p1 = udp4_pkt("10.0.0.10", "198.51.100.1", 64, b"push");
    // VLAN 100 -> untagged (pop)
    let p2 = udp4_pkt("10.0.2.2", "8.1.2.3", 64, b"pop");
    // VLAN 100 -> VLAN 200 (rewrite), with PCP 5 on the way in
    let p3 = udp4_pkt("10.0.2.2", "100.64.0.1", 64, b"rewrite");
    // priority-tagged (VLAN 0, PCP 3) counts as untagged: lan -> wan, untagged
    let p4 = udp4_pkt("10.0.0.10", "8.4.4.4", 64, b"prio");
    // hairpin: wan -> lan
    let p5 = udp4_pkt("8.8.4.4", "10.0.0.10", 64, b"to host");
    let q1 = udp6_pkt("2001:db8::10", "2001:db8:100::1", 64, b"push6");
    let q2 = udp6_pkt("2001:db8:2::2", "2001:4860::1", 64, b"pop6");
    let q3 = udp6_pkt("2001:db8:2::2", "2001:db8:200::1", 64, b"rewrite6");

    let f1 = to_vr(M0, H0, None, &p1);
    let f4 = eth_pcp(M0, H0, Some(0), 3, ET_IP4, &p4.bytes());
    let fq1 = to_vr6(M0, H0, None, &q1);
    lab.send(0, &[f1.clone(), f4.clone(), fq1.clone()]);
    let f2 = to_vr(M2, H2, Some(VLAN), &p2);
    let f3 = eth_pcp(M2, H2, Some(VLAN), 5, ET_IP4, &p3.bytes());
    let fq2 = to_vr6(M2, H2, Some(VLAN), &q2);
    let fq3 = to_vr6(M2, H2, Some(VLAN), &q3);
    lab.send(2, &[f2.clone(), f3.clone(), fq2.clone(), fq3.clone()]);
    let f5 = to_vr(M1, GW, None, &p5);
    lab.send(1, &[&f5]);
    lab.run();

    let o1 = eth(H2, M2, Some(VLAN), ET_IP4, &p1.hop().bytes());
    let o4 = eth(GW, M1, None, ET_IP4, &p4.hop().bytes());
    let oq1 = eth(H2, M2, Some(VLAN), ET_IP6, &q1.hop().bytes());
    let o2 = eth(GW, M1, None, ET_IP4, &p2.hop().bytes());
    let o3 = eth(H4, M2, Some(200), ET_IP4, &p3.hop().bytes());
    let oq2 = eth(GW, M1, None, ET_IP6, &q2.hop().bytes());
    let oq3 = eth(H4, M2, Some(200), ET_IP6, &q3.hop().bytes());
    let o5 = eth(H0, M0, None, ET_IP4, &p5.hop().bytes());
    // Port 0's burst is processed first, then port 1's, then port 2's.
    lab.expect(2, &[o1.clone(), oq1.clone(), o3.clone(), oq3.clone()]);
    lab.expect(1, &[o4.clone(), o2.clone(), oq2.clone()]);
    lab.expect(0, &[&o5]);
    for (f, o) in [
        (&f1, &o1),
        (&f4, &o4),
        (&fq1, &oq1),
        (&f5, &o5),
        (&f2, &o2),
        (&f3, &o3),
        (&fq2, &oq2),
        (&fq3, &oq3),
    ] {
        lab.rx(0, f);
        lab.fwd(0, o);
    }
    lab.check("vlan rewrite");
}

#[test]
fn ethernet_padding_is_trimmed() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"a"); // 29 bytes of IP
    let q = udp6_pkt("2001:db8::10", "2001:4860::8", 64, b""); // 48 bytes of IP
    let mut f = to_vr(M0, H0, None, &p);
    f.resize(60, 0xee);
    let mut g = to_vr6(M0, H0, None, &q);
    g.resize(80, 0xee);
    lab.send(0, &[f.clone(), g.clone()]);
    lab.run();
    let o = eth(GW, M1, None, ET_IP4, &p.hop().bytes());
    let o6 = eth(GW, M1, None, ET_IP6, &q.hop().bytes());
    assert_eq!(o.len(), 14 + 29);
    lab.expect(1, &[o.clone(), o6.clone()]);
    lab.rx(0, &f);
    lab.rx(0, &g);
    lab.fwd(0, &o);
    lab.fwd(0, &o6);
    lab.check("padding");
}

/// The forwarded header checksum must equal a full recompute (RFC 1624 pitfalls: results 0x0000
/// and 0xffff).
#[test]
fn ttl_decrement_checksum_equals_full_recompute() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let base = |id: u16, ttl: u8| {
        let mut p = udp4_pkt("10.0.0.10", "8.8.8.8", ttl, b"checksum");
        p.id = id;
        p
    };
    let mut picked: Vec<(u16, u8)> = Vec::new();
    for ttl in [2u8, 64, 255] {
        let zero_after =
            (0..=u16::MAX).find(|&id| base(id, ttl).hop().header().header_checksum == 0);
        let zero_before = (0..=u16::MAX).find(|&id| base(id, ttl).header().header_checksum == 0);
        let ffff_after =
            (0..=u16::MAX).find(|&id| base(id, ttl).hop().header().header_checksum == 0xffff);
        picked.extend(
            zero_after.into_iter().chain(zero_before).chain(ffff_after).map(|id| (id, ttl)),
        );
        picked.extend((0..64).map(|k| (k * 1021, ttl)));
    }
    assert!(picked.len() >= 3 * 64 + 3, "found the corner cases");
    let frames: Vec<_> =
        picked.iter().map(|&(id, ttl)| to_vr(M0, H0, None, &base(id, ttl))).collect();
    let want: Vec<_> = picked
        .iter()
        .map(|&(id, ttl)| eth(GW, M1, None, ET_IP4, &base(id, ttl).hop().bytes()))
        .collect();
    lab.send(0, &frames);
    lab.run();
    lab.expect(1, &want);
    for (f, o) in frames.iter().zip(&want) {
        lab.rx(0, f);
        lab.fwd(0, o);
    }
    lab.check("checksums");
}

fn lpm_vr() -> VrConfig {
    let mut c = base_vr();
    c.interfaces[1].ipv6.push("fe80::1:1/64".parse().unwrap());
    c.routes = vec![
        via("8.0.0.0/8", "10.0.1.2"),
        via("8.8.0.0/16", "10.0.2.2"),
        blackhole("8.8.8.0/24"),
        via("8.8.8.8/32", "10.0.1.2"),
        via("0.0.0.0/0", "10.0.2.2"),
        out_iface("203.0.113.0/24", 0),
        via_if("2001:db8:abc::/48", "fe80::99", 1),
        via("2001:db8:abc:1::/64", "2001:db8:2::2"),
        out_iface("2001:db8:feed::/48", 0),
    ];
    c.neighbors.push(neigh(0, "203.0.113.5", H3));
    c.neighbors.push(neigh(1, "fe80::99", H4));
    c.neighbors.push(neigh(0, "2001:db8:feed::5", H3));
    c
}

/// Where a packet should leave: (port, destination MAC, VLAN); `None` for a blackhole.
type Egress = Option<(usize, [u8; 6], Option<u16>)>;

#[test]
fn longest_prefix_match_and_route_kinds() {
    let mut lab = Lab::new(&[lpm_vr()], &RINGS);
    // (destination, expected egress port, expected dst MAC, vlan) or None for blackhole.
    let cases: &[(&str, Egress)] = &[
        ("8.8.8.8", Some((1, GW, None))),       // /32 via GW
        ("8.8.8.9", None),                      // /24 blackhole
        ("8.8.9.9", Some((2, H2, Some(VLAN)))), // /16 via H2
        ("8.9.9.9", Some((1, GW, None))),       // /8 via GW
        ("9.9.9.9", Some((2, H2, Some(VLAN)))), // default via H2
        ("10.0.1.2", Some((1, GW, None))),      // connected
        ("203.0.113.5", Some((0, H3, None))),   // Iface(0): the destination is the neighbor
    ];
    let mut sent = Vec::new();
    let mut want: [Vec<Vec<u8>>; 3] = Default::default();
    for (i, (dst, out)) in cases.iter().enumerate() {
        let p = udp4_pkt("10.0.0.10", dst, 30, &[i as u8; 9]);
        let f = to_vr(M0, H0, None, &p);
        lab.rx(0, &f);
        match out {
            Some((port, m, vlan)) => {
                let src = [M0, M1, M2][*port];
                let o = eth(*m, src, *vlan, ET_IP4, &p.hop().bytes());
                lab.fwd(0, &o);
                want[*port].push(o);
            }
            None => lab.drop(0, VrDrop::Blackhole),
        }
        sent.push(f);
    }
    let cases6: &[(&str, usize, [u8; 6], Option<u16>)] = &[
        ("2001:db8:abc::1", 1, H4, None), // via link-local gateway, explicit iface
        ("2001:db8:abc:1::1", 2, H2, Some(VLAN)), // longer prefix via H2
        ("2001:db8:feed::5", 0, H3, None), // Iface(0)
        ("2001:db8:1::2", 1, GW, None),   // connected
    ];
    for (i, (dst, port, m, vlan)) in cases6.iter().enumerate() {
        let p = udp6_pkt("2001:db8::10", dst, 9, &[i as u8; 3]);
        let f = to_vr6(M0, H0, None, &p);
        lab.rx(0, &f);
        let o = eth(*m, [M0, M1, M2][*port], *vlan, ET_IP6, &p.hop().bytes());
        lab.fwd(0, &o);
        want[*port].push(o);
        sent.push(f);
    }
    lab.send(0, &sent);
    lab.run();
    for (p, w) in want.iter().enumerate() {
        lab.expect(p, w);
    }
    lab.check("lpm");
}

/// Options for the fragmentation tests: Router Alert (148, copied), NOP, Record Route (7, not
/// copied, 7 bytes, one slot): 12 bytes.
const OPTIONS: [u8; 12] = [148, 4, 0, 0, 1, 7, 7, 4, 0, 0, 0, 0];
/// The same after the VR recorded wan's address (10.0.1.1) in the route.
const OPTIONS_RECORDED: [u8; 12] = [148, 4, 0, 0, 1, 7, 7, 8, 10, 0, 1, 1];

/// The base VR with a smaller MTU on wan; an IPv6 link cannot go below 1280 (RFC 8200 §5),
/// so below that wan is IPv4 only.
fn frag_vr(mtu: u16) -> VrConfig {
    let mut c = base_vr();
    c.interfaces[1].mtu = mtu;
    if mtu < 1280 {
        c.interfaces[1].ipv6.clear();
        c.routes.retain(|r| r.prefix.addr().is_ipv4());
        c.neighbors.retain(|n| n.ip.is_ipv4() || n.iface != 1);
    }
    c
}

/// Reassembles fragments (Ethernet frames) with etherparse and returns the payload.
fn reassemble(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut pool: IpDefragPool = IpDefragPool::new();
    let mut done = None;
    for f in frames {
        let s = SlicedPacket::from_ethernet(f).unwrap();
        if let Some(p) = pool.process_sliced_packet(&s, (), ()).unwrap() {
            assert!(done.is_none(), "completed twice");
            done = Some(p.payload);
        }
    }
    done.expect("fragments reassemble")
}

#[test]
fn fragments_ipv4_without_df() {
    let mut lab = Lab::new(&[frag_vr(576)], &RINGS);
    let data: Vec<u8> = (0..1840u32).map(|k| (k * 31 % 251) as u8).collect();
    let mut p = udp4_pkt("10.0.0.10", "8.1.2.3", 64, &data);
    p.options = OPTIONS.to_vec();
    p.tos = 0xb8;
    p.id = 0xbeef;
    let whole = p.bytes();
    assert_eq!(whole.len(), 32 + 8 + 1840);
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();

    // First fragment: all options (IHL 8), (576 - 32) & !7 = 544 bytes of data. The rest: only
    // the copied option (IHL 6), (576 - 24) & !7 = 552 bytes each.
    let payload = &p.payload;
    let mut want = Vec::new();
    let mut at = 0;
    let mut k = 0;
    while at < payload.len() {
        let (opts, n) =
            if k == 0 { (OPTIONS_RECORDED.to_vec(), 544) } else { (vec![148, 4, 0, 0], 552) };
        let n = n.min(payload.len() - at);
        let frag = Ip4 {
            options: opts,
            payload: payload[at..at + n].to_vec(),
            mf: at + n < payload.len(),
            frag: (at / 8) as u16,
            ttl: 63,
            ..p.clone()
        };
        let b = frag.bytes();
        assert!(b.len() <= 576);
        want.push(eth(GW, M1, None, ET_IP4, &b));
        at += n;
        k += 1;
    }
    assert_eq!(want.len(), 4);
    lab.expect(1, &want);
    assert_eq!(reassemble(&want), p.payload, "reassembly gives back the payload");
    lab.rx(0, &f);
    lab.fwd(0, &want[0]);
    lab.c(0).fragments_sent += 4;
    lab.check("fragmented");

    // A DF packet of the same size is not fragmented (see icmp.rs for the error); a packet of
    // exactly the MTU is forwarded whole.
    let mut q = udp4_pkt("10.0.0.10", "8.1.2.4", 64, &vec![7; 576 - 28]);
    q.df = false;
    let g = to_vr(M0, H0, None, &q);
    lab.send(0, &[&g]);
    lab.run();
    let o = eth(GW, M1, None, ET_IP4, &q.hop().bytes());
    lab.expect(1, &[&o]);
    lab.rx(0, &g);
    lab.fwd(0, &o);
    lab.check("exactly the MTU");
}

#[test]
fn fragments_a_fragment_keeping_offset_and_mf() {
    let mut lab = Lab::new(&[frag_vr(576)], &RINGS);
    // A middle fragment of some larger datagram: offset 800 bytes, MF set, 1000 bytes of data.
    let data: Vec<u8> = (0..1000u32).map(|k| (k % 253) as u8).collect();
    let mut p = Ip4::new("10.0.0.10", "8.1.2.3", 20, 17, data.clone());
    p.mf = true;
    p.frag = 100;
    p.id = 77;
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    let mut want = Vec::new();
    for (off, n) in [(0usize, 552usize), (552, 448)] {
        let frag = Ip4 {
            payload: data[off..off + n].to_vec(),
            mf: true,
            frag: (100 + off / 8) as u16,
            ttl: 19,
            ..p.clone()
        };
        want.push(eth(GW, M1, None, ET_IP4, &frag.bytes()));
    }
    lab.expect(1, &want);
    lab.rx(0, &f);
    lab.fwd(0, &want[0]);
    lab.c(0).fragments_sent += 2;
    lab.check("fragment of a fragment");
}

#[test]
fn fragments_out_of_a_vlan_interface() {
    // v100 has MTU 1400: 1900 bytes of IP become 1376 + 504 bytes of data.
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let data: Vec<u8> = (0..1872u32).map(|k| (k * 7 % 256) as u8).collect();
    let p = udp4_pkt("10.0.0.10", "198.51.100.20", 64, &data);
    assert_eq!(p.bytes().len(), 1900);
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    let mut want = Vec::new();
    for (off, n, mf) in [(0usize, 1376usize, true), (1376, 504, false)] {
        let frag = Ip4 {
            payload: p.payload[off..off + n].to_vec(),
            mf,
            frag: (off / 8) as u16,
            ttl: 63,
            ..p.clone()
        };
        want.push(eth(H2, M2, Some(VLAN), ET_IP4, &frag.bytes()));
    }
    lab.expect(2, &want);
    assert_eq!(reassemble(&want), p.payload);
    lab.rx(0, &f);
    lab.fwd(0, &want[0]);
    lab.c(0).fragments_sent += 2;
    lab.check("fragmented onto a VLAN");
}

/// Good, bad, local and ARP frames interleaved in one burst.
#[test]
fn mixed_burst() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let good4 = udp4_pkt("10.0.0.10", "8.1.1.1", 64, b"good4");
    let mut bad = udp4_pkt("10.0.0.10", "8.1.1.2", 64, b"bad").bytes();
    bad[10] ^= 0xff; // checksum
    let ping = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(9, 1, b"ping"));
    let arp_req = arp_request_frame(H3, "10.0.0.33", "10.0.0.1", None);
    let good6 = udp6_pkt("2001:db8::10", "2001:4860::1", 64, b"good6");
    let ttl1 = udp4_pkt("10.0.0.10", "8.2.2.2", 1, b"dies");
    let arp_other = arp_request_frame(H3, "10.0.0.33", "10.0.0.99", None);
    let lldp = pad60(eth(M0, H0, None, 0x88cc, b"lldp"));
    let (h6, r6) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let ping6 = Ip6::new(h6, r6, 64, 58, echo6_req(h6, r6, 3, 4, b"ping6"));
    let good_vlan = udp4_pkt("10.0.0.10", "198.51.100.9", 64, b"to vlan");
    let stranger = to_vr([0x02, 0, 0, 0, 0x99, 0x99], H0, None, &good4);

    let frames = vec![
        to_vr(M0, H0, None, &good4),
        eth(M0, H0, None, ET_IP4, &bad),
        to_vr(M0, H0, None, &ping),
        arp_req.clone(),
        to_vr6(M0, H0, None, &good6),
        to_vr(M0, H0, None, &ttl1),
        arp_other,
        lldp,
        to_vr6(M0, H0, None, &ping6),
        to_vr(M0, H0, None, &good_vlan),
        stranger,
    ];
    lab.send(0, &frames);
    lab.run();

    let o_good4 = eth(GW, M1, None, ET_IP4, &good4.hop().bytes());
    let o_good6 = eth(GW, M1, None, ET_IP6, &good6.hop().bytes());
    let o_vlan = eth(H2, M2, Some(VLAN), ET_IP4, &good_vlan.hop().bytes());
    let mut reply = Ip4::new("10.0.0.1", "10.0.0.10", 64, 1, echo4_rep(9, 1, b"ping"));
    reply.id = 1;
    let o_ping = eth(H0, M0, None, ET_IP4, &reply.bytes());
    let o_arp = eth(H3, M0, None, ET_ARP, &arp(2, M0, "10.0.0.1", H3, "10.0.0.33"));
    let o_ttl = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.0.10"), 2, ttl_exceeded4(), &ttl1.bytes()),
    );
    let o_ping6 = eth(
        H0,
        M0,
        None,
        ET_IP6,
        &Ip6::new(r6, h6, 64, 58, echo6_rep(r6, h6, 3, 4, b"ping6")).bytes(),
    );
    lab.expect(1, &[o_good4.clone(), o_good6.clone()]);
    lab.expect(2, &[&o_vlan]);
    lab.expect(0, &[o_ping, o_arp, o_ttl, o_ping6]);

    for f in frames.iter().take(10).enumerate().filter(|(i, _)| *i != 6).map(|(_, f)| f) {
        lab.rx(0, f);
    }
    lab.fwd(0, &o_good4);
    lab.fwd(0, &o_good6);
    lab.fwd(0, &o_vlan);
    lab.drop(0, VrDrop::Ip4BadChecksum);
    lab.drop(0, VrDrop::TtlExpired);
    lab.drop(0, VrDrop::UnknownEthertype);
    let c = lab.c(0);
    c.local_in += 3; // two pings and the ARP request
    c.echo_replies += 2;
    c.neighbor_replies += 1;
    c.neighbors_learned += 1;
    c.icmp_errors += 1;
    lab.pdrop(0, PortDrop::NotForUs);
    lab.pdrop(0, PortDrop::NotForUs);
    lab.check("mixed burst");
    let row = lab.neighbor(0, "10.0.0.33").expect("requester learned");
    assert_eq!(row.mac, Some(mac(H3)));
}

/// Once an adjacency's rewrite is cached by the fast path, the checks must still happen: TTL,
/// MTU (DF → error, no DF → fragments), link-local addresses; and a cached header must fit
/// any ingress (tagged or not) and egress (tagged or not).
#[test]
fn warm_adjacencies_still_check_everything() {
    // A default route through the same gateway as 2001:4860::/32: one adjacency, so the
    // link-local destination below meets a warm rewrite.
    let mut c = base_vr();
    c.routes.push(via("::/0", "2001:db8:1::2"));
    c.neighbors.push(neigh(0, "fe80::10", H0));
    let mut lab = Lab::new(&[c], &RINGS);
    for round in 0..3u8 {
        // Good traffic through all four (ingress tagged?, egress tagged?) combinations, v4 and v6.
        let a = udp4_pkt("10.0.0.10", "8.1.1.1", 64, &[round, 1]);
        let b = udp4_pkt("10.0.0.10", "198.51.100.1", 64, &[round, 2]);
        let c = udp4_pkt("10.0.2.2", "8.1.1.2", 64, &[round, 3]);
        let d = udp4_pkt("10.0.2.2", "198.51.100.2", 64, &[round, 4]);
        let a6 = udp6_pkt("2001:db8::10", "2001:4860::1", 64, &[round, 5]);
        let b6 = udp6_pkt("2001:db8::10", "2001:db8:100::1", 64, &[round, 6]);
        let c6 = udp6_pkt("2001:db8:2::2", "2001:4860::2", 64, &[round, 7]);
        let d6 = udp6_pkt("2001:db8:2::2", "2001:db8:100::2", 64, &[round, 8]);
        let from_lan = vec![
            to_vr(M0, H0, None, &a),
            to_vr(M0, H0, None, &b),
            to_vr6(M0, H0, None, &a6),
            to_vr6(M0, H0, None, &b6),
        ];
        let from_vlan = vec![
            to_vr(M2, H2, Some(VLAN), &c),
            to_vr(M2, H2, Some(VLAN), &d),
            to_vr6(M2, H2, Some(VLAN), &c6),
            to_vr6(M2, H2, Some(VLAN), &d6),
        ];
        lab.send(0, &from_lan);
        lab.send(2, &from_vlan);
        lab.run();
        let wan = |et, ip: Vec<u8>| eth(GW, M1, None, et, &ip);
        let vl = |et, ip: Vec<u8>| eth(H2, M2, Some(VLAN), et, &ip);
        let w1 = vec![
            wan(ET_IP4, a.hop().bytes()),
            wan(ET_IP6, a6.hop().bytes()),
            wan(ET_IP4, c.hop().bytes()),
            wan(ET_IP6, c6.hop().bytes()),
        ];
        let w2 = vec![
            vl(ET_IP4, b.hop().bytes()),
            vl(ET_IP6, b6.hop().bytes()),
            vl(ET_IP4, d.hop().bytes()),
            vl(ET_IP6, d6.hop().bytes()),
        ];
        lab.expect(1, &w1);
        lab.expect(2, &w2);
        lab.expect_silence();
        for f in from_lan.iter().chain(&from_vlan) {
            lab.rx(0, f);
        }
        for o in w1.iter().chain(&w2) {
            lab.fwd(0, o);
        }
        lab.check(&format!("round {round}: warm"));
    }

    // Now the exceptions, through the same (warm) adjacencies.
    let ttl1 = udp4_pkt("10.0.0.10", "8.1.1.3", 1, b"ttl");
    let big_df = Ip4 { df: true, ..udp4_pkt("10.0.0.10", "198.51.100.3", 64, &[9; 1400]) };
    let big = udp4_pkt("10.0.0.10", "198.51.100.4", 64, &[8; 1400]);
    let hop1 = udp6_pkt("2001:db8::10", "2001:4860::3", 1, b"hop");
    let big6 = udp6_pkt("2001:db8::10", "2001:db8:100::3", 64, &[7; 1400]);
    let ll_src = udp6_pkt("fe80::10", "2001:4860::4", 64, b"ll");
    let ll_dst = udp6_pkt("2001:db8::10", "fe80::4", 64, b"ll");
    let frames: Vec<Vec<u8>> = vec![
        to_vr(M0, H0, None, &ttl1),
        to_vr(M0, H0, None, &big_df),
        to_vr(M0, H0, None, &big),
        to_vr6(M0, H0, None, &hop1),
        to_vr6(M0, H0, None, &big6),
        to_vr6(M0, H0, None, &ll_src),
        to_vr6(M0, H0, None, &ll_dst),
    ];
    lab.send(0, &frames);
    lab.run();
    let h = a4("10.0.0.10");
    lab.expect(
        0,
        &[
            eth(
                H0,
                M0,
                None,
                ET_IP4,
                &icmp4_error("10.0.0.1", h, 1, ttl_exceeded4(), &ttl1.bytes()),
            ),
            eth(
                H0,
                M0,
                None,
                ET_IP4,
                &icmp4_error("10.0.0.1", h, 2, frag_needed4(1400), &big_df.bytes()),
            ),
            eth(
                H0,
                M0,
                None,
                ET_IP6,
                &icmp6_error("2001:db8::1", hop1.src, hop_exceeded6(), &hop1.bytes()),
            ),
            eth(
                H0,
                M0,
                None,
                ET_IP6,
                &icmp6_error(
                    "2001:db8::1",
                    big6.src,
                    etherparse::Icmpv6Type::PacketTooBig { mtu: 1400 },
                    &big6.bytes(),
                ),
            ),
            eth(
                H0,
                M0,
                None,
                ET_IP6,
                &icmp6_error(
                    "2001:db8::1",
                    ll_src.src,
                    etherparse::Icmpv6Type::DestinationUnreachable(
                        etherparse::icmpv6::DestUnreachableCode::BeyondScope,
                    ),
                    &ll_src.bytes(),
                ),
            ),
        ],
    );
    let frag = |off: usize, n: usize, mf| Ip4 {
        payload: big.payload[off..off + n].to_vec(),
        mf,
        frag: (off / 8) as u16,
        ttl: 63,
        ..big.clone()
    };
    let frags = vec![
        eth(H2, M2, Some(VLAN), ET_IP4, &frag(0, 1376, true).bytes()),
        eth(H2, M2, Some(VLAN), ET_IP4, &frag(1376, 32, false).bytes()),
    ];
    lab.expect(2, &frags);
    lab.expect_silence();
    for f in &frames {
        lab.rx(0, f);
    }
    lab.fwd(0, &frags[0]);
    lab.c(0).fragments_sent += 2;
    lab.c(0).icmp_errors += 5;
    lab.drop(0, VrDrop::TtlExpired);
    lab.drop(0, VrDrop::TtlExpired);
    lab.drop(0, VrDrop::MtuExceeded);
    lab.drop(0, VrDrop::MtuExceeded);
    lab.drop(0, VrDrop::SourceBeyondScope);
    lab.drop(0, VrDrop::MartianDestination);
    lab.check("exceptions on warm adjacencies");
}

/// A whole burst of packets that each need four fragments: every fragment leaves (the VR's
/// extra output must not silently cap fragmentation per burst).
#[test]
fn fragments_a_full_burst() {
    let mut lab = Lab::new(&[frag_vr(576)], &[512, 2048, 64]);
    let data: Vec<u8> = (0..1872u32).map(|k| k as u8).collect();
    let pkts: Vec<Ip4> = (0..256u16)
        .map(|i| Ip4 {
            id: i,
            ..udp4_pkt("10.0.0.10", &format!("8.0.{}.{}", i / 256, i % 256), 64, &data)
        })
        .collect();
    let frames: Vec<Vec<u8>> = pkts.iter().map(|p| to_vr(M0, H0, None, p)).collect();
    lab.send(0, &frames);
    lab.run();
    let got = lab.recv(1);
    lab.port[1].tx_packets += got.len() as u64;
    // Reassemble per datagram, whatever the interleaving.
    let mut ok = 0;
    for p in &pkts {
        let mine: Vec<Vec<u8>> = got
            .iter()
            .filter(|f| f[14 + 4..14 + 6] == p.id.to_be_bytes() && f[14 + 16..14 + 20] == p.dst)
            .cloned()
            .collect();
        if mine.len() == 4 && reassemble(&mine) == p.payload {
            ok += 1;
        }
    }
    for (f, p) in frames.iter().zip(&pkts) {
        lab.rx(0, f);
        let first = Ip4 { payload: p.payload[..552].to_vec(), mf: true, ttl: 63, ..p.clone() };
        lab.fwd(0, &eth(GW, M1, None, ET_IP4, &first.bytes()));
    }
    lab.c(0).fragments_sent += 4 * 256;
    assert_eq!(
        ok,
        256,
        "{} of 256 datagrams arrived whole ({} frames)\n{}",
        ok,
        got.len(),
        lab.e.dump()
    );
    lab.check("256 × 4 fragments");
}

/// A fragment near the end of the 64 KiB offset space: refragmenting it must not wrap the
/// 13-bit offset (the datagram would exceed 65535 bytes; RFC 791). Dropping it is fine;
/// emitting a fragment with a small, wrong offset is not.
#[test]
fn refragmenting_never_wraps_the_offset() {
    let mut lab = Lab::new(&[frag_vr(576)], &RINGS);
    let mut p = Ip4::new("10.0.0.10", "8.1.2.3", 20, 17, vec![0x42; 1000]);
    p.mf = true;
    p.frag = 8180; // 65440 bytes
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    let got = lab.recv(1);
    for g in &got {
        let off = (u16::from_be_bytes([g[20], g[21]]) & 0x1fff) as usize * 8;
        assert!(off >= 65440, "a fragment at offset {off}: the offset wrapped\n{}", hex(g));
    }
    assert!(got.len() <= 1, "at most the first fragment fits below 65536: got {}", got.len());
    // Whatever the verdict, it is accounted for.
    let c = lab.e.vrs()[0].counters();
    assert_eq!(c.rx_packets, 1);
    invariant(c, 0).unwrap();
    assert_eq!(c.forwarded + c.dropped_total(), 1, "{}", lab.e.dump());
}
