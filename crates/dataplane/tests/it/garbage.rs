//! No panic on garbage: well over 100,000 random and mutated frames (every valid seed truncated
//! at every length, bit flips, overwritten header fields, random lengths, VLAN tags added and
//! removed, random bytes behind our MACs) through an engine with two VRs, with time moving
//! on. After every burst: the accounting invariant per VR, classification accounting per port,
//! and every frame the engine sent must be well formed (checksums right, lengths consistent,
//! sent from one of our MACs).

use crate::common;

use std::collections::HashSet;

use common::*;
use dataplane::config::{VrConfig, VrLimits};
use dataplane::{PortDrop, VrDrop};
use ports::{Batch, Port};

const MA0: [u8; 6] = [0x02, 0xa0, 0, 0, 0, 0];
const MA1: [u8; 6] = [0x02, 0xa0, 0, 0, 0, 1];
const MB0: [u8; 6] = [0x02, 0xb0, 0, 0, 0, 0];
const MB1: [u8; 6] = [0x02, 0xb0, 0, 0, 0, 1];
const HOST: [u8; 6] = [0x02, 0x11, 0, 0, 0, 1];

fn vrs() -> Vec<VrConfig> {
    // A table small enough for resolved entries to fill it (incomplete ones make way for new
    // next hops, so only a table of resolved entries refuses one), few incomplete entries per
    // interface, and a solicitation budget the garbage can spend.
    let limits = VrLimits {
        neighbors: 6,
        queue_per_neighbor: 2,
        queue_total: 6,
        neighbor_reachable_ms: 20,
        neighbor_retrans_ms: 2,
        neighbor_probes: 2,
        neighbor_failed_hold_ms: 5,
        incomplete_per_interface: 2,
        solicitations_per_sec: 10_000,
        solicitations_burst: 8,
        icmp_errors_per_sec: 5_000,
        icmp_errors_burst: 20,
    };
    vec![
        VrConfig {
            name: "fa".into(),
            interfaces: vec![
                iface(
                    "a0",
                    0,
                    None,
                    MA0,
                    1280,
                    &["10.0.0.1/24", "10.0.5.1/30"],
                    &["2001:db8::1/64"],
                ),
                iface("a1", 1, None, MA1, 1500, &["10.0.1.1/24"], &["2001:db8:1::1/64"]),
            ],
            routes: vec![
                via("0.0.0.0/0", "10.0.1.2"),
                via("2001:4860::/32", "2001:db8:1::2"),
                blackhole("192.0.2.0/24"),
                out_iface("203.0.113.0/24", 0),
            ],
            neighbors: vec![neigh(1, "2001:db8:1::2", HOST)],
            limits,
        },
        VrConfig {
            name: "fb".into(),
            interfaces: vec![
                iface("b0", 0, Some(7), MB0, 1500, &["10.0.0.1/24"], &["2001:db8::1/64"]),
                iface("b1", 0, None, MB1, 1280, &["172.16.0.1/24"], &[]),
                iface("b2", 1, Some(8), MB0, 1500, &[], &["2001:db8:8::1/64"]),
            ],
            routes: vec![via("0.0.0.0/0", "172.16.0.2"), via_if("::/0", "fe80::1", 2)],
            neighbors: vec![neigh(1, "172.16.0.2", HOST)],
            limits,
        },
    ]
}

/// Valid frames of every kind the engine handles, towards both VRs.
fn seeds() -> Vec<(usize, Vec<u8>)> {
    let mut s: Vec<(usize, Vec<u8>)> = Vec::new();
    let (h6, r6, x6) = (a6("2001:db8::10"), a6("2001:db8::1"), a6("2001:4860::1"));
    for (to, vlan) in [(MA0, None), (MB0, Some(7))] {
        let ip4 = |p: &Ip4| eth(to, HOST, vlan, ET_IP4, &p.bytes());
        let ip6 = |p: &Ip6| eth(to, HOST, vlan, ET_IP6, &p.bytes());
        s.push((0, ip4(&udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[1; 40]))));
        s.push((0, ip4(&udp4_pkt("10.0.0.10", "10.0.0.20", 2, &[2; 40]))));
        s.push((0, ip4(&udp4_pkt("10.0.0.10", "203.0.113.9", 64, &[2; 40]))));
        s.push((0, ip4(&udp4_pkt("10.0.0.10", "8.8.8.8", 1, &[3; 20]))));
        s.push((0, ip4(&udp4_pkt("10.0.0.10", "10.0.0.1", 64, &[4; 8]))));
        s.push((0, ip4(&Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 2, &[5; 32])))));
        s.push((0, ip4(&Ip4::new("10.0.0.10", "10.0.0.1", 64, 6, vec![0; 20]))));
        s.push((0, ip4(&Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_rep(1, 2, &[5; 8])))));
        s.push((
            0,
            ip4(&Ip4 {
                options: vec![148, 4, 0, 0, 7, 7, 4, 0, 0, 0, 0, 1],
                ..udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[6; 900])
            }),
        ));
        s.push((0, ip4(&Ip4 { df: true, ..udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[7; 1200]) })));
        s.push((
            0,
            ip4(&Ip4 { mf: true, frag: 3, ..udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[8; 700]) }),
        ));
        s.push((
            0,
            ip4(&Ip4::new("10.0.0.10", "8.8.8.8", 1, 1, icmp4(port_unreach4(), &[0x45; 28]))),
        ));
        s.push((0, ip6(&udp6_pkt("2001:db8::10", "2001:4860::1", 64, &[9; 40]))));
        s.push((0, ip6(&udp6_pkt("2001:db8::10", "2001:4860::1", 1, &[10; 1300]))));
        s.push((0, ip6(&udp6_pkt("2001:db8::10", "2001:db8::1", 64, &[11; 8]))));
        s.push((0, ip6(&udp6_pkt("2001:db8::10", "2001:db8::20", 64, &[11; 8]))));
        s.push((0, ip6(&Ip6::new(h6, r6, 64, 58, echo6_req(h6, r6, 3, 4, &[12; 16])))));
        let mut ext = ext_header(43, 1);
        ext.extend(ext_header(60, 2));
        ext.extend(vec![58, 0, 0, 0, 0, 0, 0, 1]); // fragment header, offset 0, not more... next 58
        ext.extend(echo6_req(h6, r6, 5, 6, &[13; 8]));
        s.push((0, ip6(&Ip6::new(h6, r6, 64, 0, ext))));
        // Fragments of datagrams to the VR: both halves of an ICMPv6 echo and of an ICMP one.
        let e6 = echo6_req(h6, r6, 9, 9, &[22; 40]);
        for (off, more, range) in [(0u16, 1u16, 0..24), (24, 0, 24..48)] {
            let mut v = vec![58, 0];
            v.extend_from_slice(&(off | more).to_be_bytes());
            v.extend_from_slice(&[0, 0, 0, 77]);
            v.extend_from_slice(&e6[range]);
            s.push((0, ip6(&Ip6::new(h6, r6, 64, 44, v))));
        }
        let e4 =
            Ip4 { id: 77, ..Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(9, 9, &[21; 40])) };
        s.push((0, ip4(&Ip4 { payload: e4.payload[..24].to_vec(), mf: true, ..e4.clone() })));
        s.push((0, ip4(&Ip4 { payload: e4.payload[24..].to_vec(), frag: 3, ..e4.clone() })));
        let mut ah = vec![58, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
        ah.extend(echo6_req(h6, r6, 7, 8, &[14; 8]));
        s.push((0, ip6(&Ip6::new(h6, r6, 64, 51, ah))));
        s.push((0, ip6(&Ip6::new(h6, x6, 1, 58, icmp6(no_route6(), h6, x6, &[0x60; 48])))));
        let g = solicited_node(r6);
        s.push((
            0,
            eth(
                mcast_mac(g),
                HOST,
                vlan,
                ET_IP6,
                &Ip6::new(h6, g, 255, 58, ns_msg(h6, g, r6, &lla_opt(1, HOST))).bytes(),
            ),
        ));
        let un = [0; 16];
        s.push((
            0,
            eth(
                mcast_mac(g),
                HOST,
                vlan,
                ET_IP6,
                &Ip6::new(un, g, 255, 58, ns_msg(un, g, r6, &[])).bytes(),
            ),
        ));
        s.push((
            0,
            ip6(&Ip6::new(
                h6,
                r6,
                255,
                58,
                na_msg(h6, r6, h6, (false, true, true), &lla_opt(2, HOST)),
            )),
        ));
        s.push((0, arp_request_frame(HOST, "10.0.0.10", "10.0.0.1", vlan)));
        s.push((0, pad60(eth(to, HOST, vlan, ET_ARP, &arp(2, HOST, "10.0.0.20", to, "10.0.0.1")))));
        s.push((
            0,
            pad60(eth(to, HOST, vlan, ET_ARP, &arp(1, HOST, "10.0.0.30", ZERO_MAC, "10.0.0.99"))),
        ));
    }
    // Towards fb's untagged interface and both uplinks.
    s.push((
        0,
        eth(MB1, HOST, None, ET_IP4, &udp4_pkt("172.16.0.9", "8.8.8.8", 64, &[15; 30]).bytes()),
    ));
    s.push((0, arp_request_frame(HOST, "172.16.0.9", "172.16.0.1", None)));
    s.push((
        1,
        eth(MA1, HOST, None, ET_IP4, &udp4_pkt("8.8.8.8", "10.0.0.33", 64, &[16; 30]).bytes()),
    ));
    s.push((
        1,
        eth(
            MA1,
            HOST,
            None,
            ET_IP6,
            &udp6_pkt("2001:4860::1", "2001:db8::33", 64, &[17; 30]).bytes(),
        ),
    ));
    s.push((1, arp_request_frame(HOST, "10.0.1.2", "10.0.1.1", None)));
    s.push((1, pad60(eth(MA1, HOST, None, ET_ARP, &arp(2, HOST, "10.0.1.2", MA1, "10.0.1.1")))));
    s.push((
        1,
        eth(
            MA1,
            HOST,
            None,
            ET_IP4,
            &Ip4 { df: true, ..udp4_pkt("8.8.8.8", "10.0.0.33", 64, &[19; 1000]) }.bytes(),
        ),
    ));
    s.push((
        1,
        eth(MA1, HOST, None, ET_IP4, &udp4_pkt("8.8.8.8", "192.0.2.1", 64, &[20; 30]).bytes()),
    ));
    s.push((
        1,
        eth(MA1, HOST, None, ET_IP4, &udp4_pkt("8.8.8.8", "10.0.0.255", 64, &[21; 30]).bytes()),
    ));
    s.push((
        1,
        eth(MA1, HOST, None, ET_IP6, &udp6_pkt("2001:4860::1", "2a00::1", 64, &[22; 30]).bytes()),
    ));
    let (gl, ll) = (a6("fe80::1"), eui64_ll(MB0));
    s.push((
        1,
        eth(
            MB0,
            HOST,
            Some(8),
            ET_IP6,
            &Ip6::new(gl, ll, 255, 58, na_msg(gl, ll, gl, (true, true, true), &lla_opt(2, HOST)))
                .bytes(),
        ),
    ));
    s.push((
        1,
        eth(
            MB0,
            HOST,
            Some(8),
            ET_IP6,
            &udp6_pkt("2001:db8:8::5", "2a00::1", 64, &[18; 30]).bytes(),
        ),
    ));
    s
}

/// Fields worth hitting: offsets of L2/L3 header bytes in an untagged frame.
const HOT: &[usize] = &[
    12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 34, 35, 36, 37, 38, 41, 53, 54, 55, 56,
    62,
];
const INTERESTING: &[u8] = &[
    0, 1, 2, 4, 5, 6, 0x0f, 0x10, 0x3a, 0x40, 0x45, 0x46, 0x4f, 0x60, 0x7f, 0x80, 0x81, 0x86, 0x87,
    0x88, 0xdd, 0xfe, 0xff,
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut f = seed.to_vec();
    match rng.below(9) {
        0 => f.truncate(rng.below(f.len() as u64 + 1) as usize),
        1 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(f.len().max(1) as u64) as usize;
                if let Some(b) = f.get_mut(i) {
                    *b ^= 1 << rng.below(8);
                }
            }
        }
        2 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(f.len().max(1) as u64) as usize;
                if let Some(b) = f.get_mut(i) {
                    *b = rng.byte();
                }
            }
        }
        3 => {
            for _ in 0..1 + rng.below(3) {
                let i = HOT[rng.below(HOT.len() as u64) as usize]
                    + if f.get(12) == Some(&0x81) { 4 } else { 0 };
                let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
                if let Some(b) = f.get_mut(i) {
                    *b = v;
                }
            }
        }
        4 => f.extend((0..rng.below(64)).map(|_| rng.byte())),
        5 => {
            let keep = rng.below(f.len() as u64 + 1) as usize;
            f.truncate(keep);
            f.extend((0..rng.below(80)).map(|_| rng.byte()));
        }
        6 => {
            if f.get(12) == Some(&0x81) && f.len() >= 18 {
                f.drain(12..16);
            } else if f.len() >= 12 {
                let vid = [0u16, 7, 8, 9, 4095][rng.below(5) as usize];
                let tci = (rng.below(8) as u16) << 13 | vid;
                let tag = [0x81, 0x00, (tci >> 8) as u8, tci as u8];
                f.splice(12..12, tag);
            }
        }
        7 => {
            // Random bytes behind one of our MACs, broadcast or a multicast group.
            let len = rng.below(160) as usize;
            f = (0..len).map(|_| rng.byte()).collect();
            let dst: [u8; 6] = match rng.below(5) {
                0 => MA0,
                1 => MB0,
                2 => BROADCAST,
                3 => [0x33, 0x33, 0xff, 0, 0, 1],
                _ => MA1,
            };
            for (i, b) in dst.iter().enumerate() {
                if let Some(x) = f.get_mut(i) {
                    *x = *b;
                }
            }
            if len >= 14 && rng.below(2) == 0 {
                let et = [ET_IP4, ET_IP6, ET_ARP, 0x8100][rng.below(4) as usize];
                f[12..14].copy_from_slice(&et.to_be_bytes());
            }
        }
        _ => {
            // IPv4 header with random but consistent-looking fields and a valid checksum.
            if f.len() >= 34 && f[12..14] == [8, 0] {
                let ihl = 5 + rng.below(11) as usize;
                f[14] = 0x40 | ihl as u8;
                let total = (rng.below(f.len() as u64) as u16).to_be_bytes();
                f[16..18].copy_from_slice(&total);
                f[20] = rng.byte() & 0xbf; // flags and offset
                f[22] = rng.below(3) as u8; // TTL 0..2
                let h = (ihl * 4).min(f.len() - 14);
                fix_ip4_checksum(&mut f[14..], h & !1);
            }
        }
    }
    f
}

/// What any frame the engine sends must look like.
fn check_output(
    f: &[u8],
    macs: &HashSet<[u8; 6]>,
    ours4: &HashSet<[u8; 4]>,
    ours6: &HashSet<[u8; 16]>,
) -> Result<(), String> {
    if f.len() < 14 {
        return Err("shorter than an Ethernet header".into());
    }
    let src: [u8; 6] = f[6..12].try_into().unwrap();
    if !macs.contains(&src) {
        return Err(format!("source MAC {src:02x?} is not one of ours"));
    }
    let (et, l3) = if f[12..14] == [0x81, 0x00] {
        if f.len() < 18 {
            return Err("short tagged frame".into());
        }
        (u16::from_be_bytes([f[16], f[17]]), 18)
    } else {
        (u16::from_be_bytes([f[12], f[13]]), 14)
    };
    let p = &f[l3..];
    match et {
        ET_IP4 => {
            if p.len() < 20 || p[0] >> 4 != 4 {
                return Err("bad IPv4 header".into());
            }
            let ihl = (p[0] & 15) as usize * 4;
            if ihl < 20 || ihl > p.len() {
                return Err("bad IHL".into());
            }
            if inet_checksum(&p[..ihl]) != 0 {
                return Err("IPv4 header checksum wrong".into());
            }
            let total = u16::from_be_bytes([p[2], p[3]]) as usize;
            if total != p.len() {
                return Err(format!(
                    "IPv4 total length {total} but {} bytes follow the L2 header",
                    p.len()
                ));
            }
            let frag = u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0;
            if ours4.contains(&<[u8; 4]>::try_from(&p[12..16]).unwrap())
                && p[9] == 1
                && !frag
                && inet_checksum(&p[ihl..]) != 0
            {
                return Err("ICMP checksum wrong in a packet from us".into());
            }
        }
        ET_IP6 => {
            if p.len() < 40 || p[0] >> 4 != 6 {
                return Err("bad IPv6 header".into());
            }
            let plen = u16::from_be_bytes([p[4], p[5]]) as usize;
            if plen + 40 != p.len() {
                return Err(format!(
                    "IPv6 payload length {plen} but {} bytes follow",
                    p.len() - 40
                ));
            }
            if ours6.contains(&<[u8; 16]>::try_from(&p[8..24]).unwrap()) && p[6] == 58 {
                let mut ph = Vec::new();
                ph.extend_from_slice(&p[8..40]);
                ph.extend_from_slice(&(plen as u32).to_be_bytes());
                ph.extend_from_slice(&[0, 0, 0, 58]);
                ph.extend_from_slice(&p[40..]);
                if inet_checksum(&ph) != 0 {
                    return Err("ICMPv6 checksum wrong in a packet from us".into());
                }
            }
        }
        ET_ARP => {
            if p.len() != 28
                || p[..6] != [0, 1, 8, 0, 6, 4]
                || !(p[7] == 1 || p[7] == 2)
                || p[6] != 0
            {
                return Err("bad ARP".into());
            }
        }
        _ => return Err(format!("ethertype {et:#06x}")),
    }
    Ok(())
}

#[test]
fn no_panic_on_garbage() {
    let configs = vrs();
    let mut lab = Lab::new(&configs, &[1024, 1024]);
    let macs: HashSet<[u8; 6]> = [MA0, MA1, MB0, MB1].into();
    let mut ours4 = HashSet::new();
    let mut ours6 = HashSet::new();
    for c in &configs {
        for i in &c.interfaces {
            ours4.extend(i.ipv4.iter().map(|n| n.addr().octets()));
            ours6.extend(i.ipv6.iter().map(|n| n.addr().octets()));
            ours6.insert(eui64_ll(i.mac.0));
        }
    }
    let seeds = seeds();
    let mut rng = Rng(0x0dd_ba11_5eed);
    // Every seed truncated at every length first, then random mutations.
    let mut work: Vec<(usize, Vec<u8>)> = Vec::new();
    for (p, s) in &seeds {
        for n in 0..=s.len() {
            work.push((*p, s[..n].to_vec()));
        }
    }
    let truncations = work.len();
    while work.len() < truncations + 110_000 {
        let (p, s) = &seeds[rng.below(seeds.len() as u64) as usize];
        let f = mutate(&mut rng, s);
        // A few pristine seeds keep the neighbor tables and queues busy.
        work.push((*p, if rng.below(10) == 0 { s.clone() } else { f }));
    }
    // Frames too long for a buffer cannot be put on the wire. (Frames spoofing one of our
    // addresses as source stay in: they are martians, so whatever leaves "from us" is ours.)
    work.retain(|(_, f)| f.len() <= ports::BUF_SIZE - ports::HEADROOM);

    let mut sent = [0u64; 2];
    let mut out = [0u64; 2];
    let mut rx = Batch::new(256);
    let mut i = 0;
    let mut polls = 0;
    while i < work.len() {
        let n = (1 + rng.below(256) as usize).min(work.len() - i);
        for (p, sent) in sent.iter_mut().enumerate() {
            let frames: Vec<&Vec<u8>> =
                work[i..i + n].iter().filter(|(q, _)| *q == p).map(|(_, f)| f).collect();
            if !frames.is_empty() {
                lab.send(p, &frames);
                *sent += frames.len() as u64;
            }
        }
        i += n;
        lab.now += match rng.below(20) {
            0 => 50 * MS,
            1..=5 => 0,
            _ => rng.below(3 * MS),
        };
        lab.run();
        polls += 1;
        for (p, out) in out.iter_mut().enumerate() {
            loop {
                rx.clear();
                if lab.hosts[p].rx_burst(&mut rx) == 0 {
                    break;
                }
                for b in rx.packets() {
                    if let Err(e) = check_output(b.frame(), &macs, &ours4, &ours6) {
                        panic!(
                            "bad frame out of port {p}: {e}\n{}{}\n{}",
                            hex(b.frame()),
                            describe(b.frame()),
                            lab.e.dump()
                        );
                    }
                    *out += 1;
                }
            }
        }
        // Accounting after every burst.
        let mut vr_rx = 0;
        for v in lab.e.vrs() {
            if let Err(e) = invariant_bounds(v.counters(), v.queued() + v.reassembling()) {
                panic!("after burst {polls}: vr {}: {e}\n{}", v.name(), lab.e.dump());
            }
            vr_rx += v.counters().rx_packets;
        }
        let (mut port_rx, mut port_drops) = (0, 0);
        for p in 0..2 {
            let c = lab.e.port_counters(p);
            assert_eq!(c.rx_packets, sent[p], "port {p} received everything sent");
            assert_eq!(c.tx_packets, out[p], "port {p} counted what it sent");
            port_rx += c.rx_packets;
            port_drops += c.drops.iter().sum::<u64>();
        }
        assert_eq!(
            port_rx,
            port_drops + vr_rx,
            "every frame is a port drop or a VR's\n{}",
            lab.e.dump()
        );
    }
    // Let every timer run out: queues drain into drops, and the invariant holds exactly.
    lab.now += 10_000 * MS;
    lab.run();
    lab.now += 10_000 * MS;
    lab.run();
    // Reassembly gives up after 60 s at most; the Time Exceeded errors it sends may wait on
    // neighbors, which then fail too.
    lab.now += 60_000 * MS;
    lab.run();
    for _ in 0..5 {
        lab.now += 10_000 * MS;
        lab.run();
    }
    for p in 0..2 {
        lab.recv(p);
    }
    for v in lab.e.vrs() {
        assert_eq!(v.queued(), 0, "{}", lab.e.dump());
        assert_eq!(v.reassembling(), 0, "{}", lab.e.dump());
        invariant(v.counters(), 0).unwrap();
    }
    // The garbage reached every stage: most reasons were hit. Reservations and batch limits
    // (none set here), interfaces taken down, punt limits (no mirror here) and prohibit
    // routes (none here) are about configuration, not packet contents.
    let total = |r: VrDrop| lab.e.vrs().iter().map(|v| v.counters().dropped(r)).sum::<u64>();
    let content = |r: &&VrDrop| {
        !matches!(
            r,
            VrDrop::OverBudget
                | VrDrop::BatchLimit
                | VrDrop::InterfaceDown
                | VrDrop::PuntRateLimited
                | VrDrop::Prohibited
                | VrDrop::IngressQueueFull
        )
    };
    let hit: Vec<&str> =
        VrDrop::ALL.iter().filter(content).filter(|&&r| total(r) > 0).map(|r| r.name()).collect();
    let missed: Vec<&str> =
        VrDrop::ALL.iter().filter(content).filter(|&&r| total(r) == 0).map(|r| r.name()).collect();
    let port_hit = PortDrop::ALL
        .iter()
        .filter(|&&r| (0..2).any(|p| lab.e.port_counters(p).dropped(r) > 0))
        .count();
    assert!(work.len() >= 100_000);
    assert!(missed.len() <= 2, "only {} drop reasons hit; missed {missed:?}", hit.len());
    assert_eq!(port_hit, PortDrop::COUNT);
    eprintln!("{} frames ({truncations} truncations) in {polls} bursts; {} out; drop reasons missed: {missed:?}", work.len(), out[0] + out[1]);
}
