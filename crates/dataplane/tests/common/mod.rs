//! Shared harness for the dataplane integration tests.
//!
//! Every expected frame is built here with etherparse (checksums included), never with the
//! crate's own `wire` emitters, so a mistake in the implementation cannot hide in the oracle.
//!
//! [`Lab`] keeps the *expected* value of every counter (OPTE style): a test bumps the fields a
//! step should change and [`Lab::check`] compares whole structs, asserts the accounting
//! invariant and dumps the engine's tables on any mismatch.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dataplane::config::*;
use dataplane::{Engine, NeighborRow, PortCounters, PortDrop, Vr, VrCounters, VrDrop};
use etherparse::{
    icmpv4, icmpv6, ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, Icmpv4Header,
    Icmpv4Type, Icmpv6Header, Icmpv6Type, IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Header,
    Ipv4Options, Ipv6FlowLabel, Ipv6Header, SingleVlanHeader, SlicedPacket, UdpHeader, VlanId,
    VlanPcp,
};
use ports::mem::{self, MemPort};
use ports::{Batch, Port};
use wire::MacAddr;

pub const MS: u64 = 1_000_000;

// ---------------------------------------------------------------------------------------------
// Addresses

pub fn a4(s: &str) -> [u8; 4] {
    s.parse::<Ipv4Addr>().unwrap().octets()
}

pub fn a6(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Sources `192.0.2.B` and `2001:db8:B::1` (the same B, from 77 up) whose lane of the
/// solicitation budget, in `other`'s family, is not `other`'s: the lanes are keyed with a
/// secret drawn per process, and one source in 16 would share a given source's lane.
pub fn sources_outside_lane_of(other: &str) -> [String; 2] {
    let v6 = usize::from(ip(other).is_ipv6());
    let lane = |a: &str| dataplane::solicitation_lane(ip(a));
    (77..=255u8)
        .map(|b| [format!("192.0.2.{b}"), format!("2001:db8:{b:x}::1")])
        .find(|s| lane(&s[v6]) != lane(other))
        .expect("a source in another lane")
}

pub fn mac(m: [u8; 6]) -> MacAddr {
    MacAddr(m)
}

pub const BROADCAST: [u8; 6] = [0xff; 6];
pub const ZERO_MAC: [u8; 6] = [0; 6];

/// fe80::/64 + modified EUI-64 of `m` (RFC 4291 appendix A), computed here independently.
pub fn eui64_ll(m: [u8; 6]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    a[8] = m[0] ^ 0x02;
    a[9] = m[1];
    a[10] = m[2];
    a[11] = 0xff;
    a[12] = 0xfe;
    a[13] = m[3];
    a[14] = m[4];
    a[15] = m[5];
    a
}

/// The solicited-node group of `a` (RFC 4291 §2.7.1).
pub fn solicited_node(a: [u8; 16]) -> [u8; 16] {
    let mut g = a6("ff02::1:ff00:0");
    g[13..].copy_from_slice(&a[13..]);
    g
}

/// The Ethernet address of an IPv6 multicast group (RFC 2464 §7).
pub fn mcast_mac(g: [u8; 16]) -> [u8; 6] {
    [0x33, 0x33, g[12], g[13], g[14], g[15]]
}

// ---------------------------------------------------------------------------------------------
// Configuration helpers

#[allow(clippy::too_many_arguments)]
pub fn iface(
    name: &str,
    port: u16,
    vlan: Option<u16>,
    m: [u8; 6],
    mtu: u16,
    v4: &[&str],
    v6: &[&str],
) -> IfaceConfig {
    IfaceConfig {
        name: name.into(),
        port,
        vlan,
        mac: MacAddr(m),
        mtu,
        ipv4: v4.iter().map(|s| s.parse().unwrap()).collect(),
        ipv6: v6.iter().map(|s| s.parse().unwrap()).collect(),
    }
}

pub fn via(prefix: &str, gw: &str) -> RouteConfig {
    RouteConfig {
        prefix: prefix.parse().unwrap(),
        target: RouteTarget::Via { gateway: ip(gw), iface: None },
        source: RouteSource::Static,
    }
}

pub fn via_if(prefix: &str, gw: &str, iface: u16) -> RouteConfig {
    RouteConfig {
        prefix: prefix.parse().unwrap(),
        target: RouteTarget::Via { gateway: ip(gw), iface: Some(iface) },
        source: RouteSource::Static,
    }
}

pub fn out_iface(prefix: &str, iface: u16) -> RouteConfig {
    RouteConfig {
        prefix: prefix.parse().unwrap(),
        target: RouteTarget::Iface(iface),
        source: RouteSource::Static,
    }
}

pub fn blackhole(prefix: &str) -> RouteConfig {
    RouteConfig {
        prefix: prefix.parse().unwrap(),
        target: RouteTarget::Blackhole,
        source: RouteSource::Static,
    }
}

pub fn neigh(iface: u16, addr: &str, m: [u8; 6]) -> NeighborConfig {
    NeighborConfig { iface, ip: ip(addr), mac: MacAddr(m) }
}

// The standard one-VR lab ("r1") most tests use:
//
//   port 0  lan   untagged  M0  mtu 1500  10.0.0.1/24  2001:db8::1/64      host H0 10.0.0.10 / 2001:db8::10
//   port 1  wan   untagged  M1  mtu 1500  10.0.1.1/24  2001:db8:1::1/64    gateway GW 10.0.1.2 / 2001:db8:1::2
//   port 2  v100  VLAN 100  M2  mtu 1400  10.0.2.1/24  2001:db8:2::1/64    host H2 10.0.2.2 / 2001:db8:2::2
//
// Routes: 8/8 and 2001:4860::/32 via GW; 198.51.100/24 and 2001:db8:100::/48 via H2;
// 192.0.2/24 and 2001:db8:dead::/48 blackhole; 203.0.113/24 out of lan (glean). No default.
// Neighbors GW, H0 and H2 are static.
pub const M0: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x00];
pub const M1: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];
/// Universally administered (U/L bit clear), so its EUI-64 flips the bit *on*.
pub const M2: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
pub const H0: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const GW: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
pub const H2: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];
pub const H3: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0d];
pub const H4: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0e];
pub const VLAN: u16 = 100;

pub fn base_vr() -> VrConfig {
    VrConfig {
        name: "r1".into(),
        interfaces: vec![
            iface("lan", 0, None, M0, 1500, &["10.0.0.1/24"], &["2001:db8::1/64"]),
            iface("wan", 1, None, M1, 1500, &["10.0.1.1/24"], &["2001:db8:1::1/64"]),
            iface("v100", 2, Some(VLAN), M2, 1400, &["10.0.2.1/24"], &["2001:db8:2::1/64"]),
        ],
        routes: vec![
            via("8.0.0.0/8", "10.0.1.2"),
            via("2001:4860::/32", "2001:db8:1::2"),
            via("198.51.100.0/24", "10.0.2.2"),
            via("2001:db8:100::/48", "2001:db8:2::2"),
            blackhole("192.0.2.0/24"),
            blackhole("2001:db8:dead::/48"),
            out_iface("203.0.113.0/24", 0),
        ],
        neighbors: vec![
            neigh(1, "10.0.1.2", GW),
            neigh(1, "2001:db8:1::2", GW),
            neigh(0, "10.0.0.10", H0),
            neigh(0, "2001:db8::10", H0),
            neigh(2, "10.0.2.2", H2),
            neigh(2, "2001:db8:2::2", H2),
        ],
        limits: VrLimits::default(),
    }
}

/// Small neighbor limits for the resolution tests.
pub fn small_limits() -> VrLimits {
    VrLimits {
        neighbors: 16,
        queue_per_neighbor: 2,
        queue_total: 3,
        neighbor_reachable_ms: 100,
        neighbor_retrans_ms: 10,
        neighbor_probes: 3,
        neighbor_failed_hold_ms: 30,
        ..VrLimits::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Frames, built with etherparse

/// An Ethernet II frame, 802.1Q-tagged (PCP 0) when `vlan` is set.
pub fn eth(
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    ethertype: u16,
    payload: &[u8],
) -> Vec<u8> {
    eth_pcp(dst, src, vlan, 0, ethertype, payload)
}

/// As [`eth`] with a priority code point in the tag.
pub fn eth_pcp(
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    pcp: u8,
    ethertype: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    match vlan {
        None => f.extend(
            Ethernet2Header { source: src, destination: dst, ether_type: EtherType(ethertype) }
                .to_bytes(),
        ),
        Some(v) => {
            f.extend(
                Ethernet2Header {
                    source: src,
                    destination: dst,
                    ether_type: EtherType::VLAN_TAGGED_FRAME,
                }
                .to_bytes(),
            );
            f.extend(
                SingleVlanHeader {
                    pcp: VlanPcp::try_new(pcp).unwrap(),
                    drop_eligible_indicator: false,
                    vlan_id: VlanId::try_new(v).unwrap(),
                    ether_type: EtherType(ethertype),
                }
                .to_bytes(),
            );
        }
    }
    f.extend_from_slice(payload);
    f
}

pub const ET_IP4: u16 = 0x0800;
pub const ET_IP6: u16 = 0x86dd;
pub const ET_ARP: u16 = 0x0806;

/// An IPv4 packet with every header field explicit.
#[derive(Clone, Debug)]
pub struct Ip4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub ttl: u8,
    pub tos: u8,
    pub id: u16,
    pub df: bool,
    pub mf: bool,
    /// Fragment offset in 8-byte units.
    pub frag: u16,
    pub proto: u8,
    pub options: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Ip4 {
    pub fn new(src: &str, dst: &str, ttl: u8, proto: u8, payload: Vec<u8>) -> Ip4 {
        Ip4 {
            src: a4(src),
            dst: a4(dst),
            ttl,
            tos: 0,
            id: 0x1234,
            df: false,
            mf: false,
            frag: 0,
            proto,
            options: vec![],
            payload,
        }
    }

    pub fn header(&self) -> Ipv4Header {
        let mut h = Ipv4Header {
            dscp: IpDscp::try_new(self.tos >> 2).unwrap(),
            ecn: IpEcn::try_new(self.tos & 3).unwrap(),
            total_len: 0,
            identification: self.id,
            dont_fragment: self.df,
            more_fragments: self.mf,
            fragment_offset: IpFragOffset::try_new(self.frag).unwrap(),
            time_to_live: self.ttl,
            protocol: IpNumber(self.proto),
            header_checksum: 0,
            source: self.src,
            destination: self.dst,
            options: Ipv4Options::try_from(&self.options[..]).unwrap(),
        };
        h.total_len = (h.header_len() + self.payload.len()) as u16;
        h.header_checksum = h.calc_header_checksum();
        h
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut v = self.header().to_bytes().to_vec();
        v.extend_from_slice(&self.payload);
        v
    }

    /// The same packet one hop later.
    pub fn hop(&self) -> Ip4 {
        Ip4 { ttl: self.ttl - 1, ..self.clone() }
    }
}

/// A UDP datagram (header with checksum + data) for IPv4.
pub fn udp4(src: &str, dst: &str, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut h = UdpHeader::without_ipv4_checksum(sport, dport, data.len()).unwrap();
    h.checksum = h.calc_checksum_ipv4_raw(a4(src), a4(dst), data).unwrap();
    let mut v = h.to_bytes().to_vec();
    v.extend_from_slice(data);
    v
}

/// A UDP/IPv4 packet.
pub fn udp4_pkt(src: &str, dst: &str, ttl: u8, data: &[u8]) -> Ip4 {
    Ip4::new(src, dst, ttl, 17, udp4(src, dst, 4000, 5000, data))
}

/// An ICMPv4 message.
pub fn icmp4(t: Icmpv4Type, payload: &[u8]) -> Vec<u8> {
    let mut v = Icmpv4Header::with_checksum(t, payload).to_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

pub fn echo4_req(id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    icmp4(Icmpv4Type::EchoRequest(etherparse::IcmpEchoHeader { id, seq }), data)
}

pub fn echo4_rep(id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    icmp4(Icmpv4Type::EchoReply(etherparse::IcmpEchoHeader { id, seq }), data)
}

pub fn ttl_exceeded4() -> Icmpv4Type {
    Icmpv4Type::TimeExceeded(icmpv4::TimeExceededCode::TtlExceededInTransit)
}

pub fn net_unreach4() -> Icmpv4Type {
    Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Network)
}

pub fn port_unreach4() -> Icmpv4Type {
    Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Port)
}

pub fn frag_needed4(mtu: u16) -> Icmpv4Type {
    Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::FragmentationNeeded {
        next_hop_mtu: mtu,
    })
}

/// The ICMPv4 error the VR should make about `orig` (an IP packet as received): TOS 0xc0,
/// TTL 64, DF clear, the first 548 bytes quoted.
pub fn icmp4_error(src: &str, dst: [u8; 4], id: u16, t: Icmpv4Type, orig: &[u8]) -> Vec<u8> {
    let quote = &orig[..orig.len().min(548)];
    Ip4 {
        src: a4(src),
        dst,
        ttl: 64,
        tos: 0xc0,
        id,
        df: false,
        mf: false,
        frag: 0,
        proto: 1,
        options: vec![],
        payload: icmp4(t, quote),
    }
    .bytes()
}

/// An IPv6 packet; `next` is the first next-header value, `payload` everything after the fixed
/// header (extension headers included).
#[derive(Clone, Debug)]
pub struct Ip6 {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub hop: u8,
    pub tc: u8,
    pub flow: u32,
    pub next: u8,
    pub payload: Vec<u8>,
}

impl Ip6 {
    pub fn new(src: [u8; 16], dst: [u8; 16], hop: u8, next: u8, payload: Vec<u8>) -> Ip6 {
        Ip6 { src, dst, hop, tc: 0, flow: 0, next, payload }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let h = Ipv6Header {
            traffic_class: self.tc,
            flow_label: Ipv6FlowLabel::try_new(self.flow).unwrap(),
            payload_length: self.payload.len() as u16,
            next_header: IpNumber(self.next),
            hop_limit: self.hop,
            source: self.src,
            destination: self.dst,
        };
        let mut v = h.to_bytes().to_vec();
        v.extend_from_slice(&self.payload);
        v
    }

    pub fn hop(&self) -> Ip6 {
        Ip6 { hop: self.hop - 1, ..self.clone() }
    }
}

pub fn udp6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut h = UdpHeader::without_ipv4_checksum(sport, dport, data.len()).unwrap();
    h.checksum = h.calc_checksum_ipv6_raw(src, dst, data).unwrap();
    let mut v = h.to_bytes().to_vec();
    v.extend_from_slice(data);
    v
}

pub fn udp6_pkt(src: &str, dst: &str, hop: u8, data: &[u8]) -> Ip6 {
    let (s, d) = (a6(src), a6(dst));
    Ip6::new(s, d, hop, 17, udp6(s, d, 4000, 5000, data))
}

/// An ICMPv6 message with its pseudo-header checksum.
pub fn icmp6(t: Icmpv6Type, src: [u8; 16], dst: [u8; 16], payload: &[u8]) -> Vec<u8> {
    let mut v = Icmpv6Header::with_checksum(t, src, dst, payload).unwrap().to_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

pub fn echo6_req(src: [u8; 16], dst: [u8; 16], id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    icmp6(Icmpv6Type::EchoRequest(etherparse::IcmpEchoHeader { id, seq }), src, dst, data)
}

pub fn echo6_rep(src: [u8; 16], dst: [u8; 16], id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    icmp6(Icmpv6Type::EchoReply(etherparse::IcmpEchoHeader { id, seq }), src, dst, data)
}

pub fn hop_exceeded6() -> Icmpv6Type {
    Icmpv6Type::TimeExceeded(icmpv6::TimeExceededCode::HopLimitExceeded)
}

pub fn no_route6() -> Icmpv6Type {
    Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::NoRoute)
}

pub fn port_unreach6() -> Icmpv6Type {
    Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Port)
}

/// The ICMPv6 error the VR should make about `orig` (IPv6 header included): hop limit 64,
/// traffic class and flow label 0, the first 1232 bytes quoted.
pub fn icmp6_error(src: &str, dst: [u8; 16], t: Icmpv6Type, orig: &[u8]) -> Vec<u8> {
    let s = a6(src);
    let quote = &orig[..orig.len().min(1232)];
    Ip6::new(s, dst, 64, 58, icmp6(t, s, dst, quote)).bytes()
}

/// An Ethernet/IPv4 ARP packet (28 bytes).
pub fn arp(op: u16, sha: [u8; 6], spa: &str, tha: [u8; 6], tpa: &str) -> Vec<u8> {
    ArpEthIpv4Packet {
        operation: ArpOperation(op),
        sender_mac: sha,
        sender_ipv4: a4(spa),
        target_mac: tha,
        target_ipv4: a4(tpa),
    }
    .to_bytes()
    .to_vec()
}

/// Pads a frame to the 60-byte Ethernet minimum (without FCS), as a NIC would.
pub fn pad60(mut f: Vec<u8>) -> Vec<u8> {
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// A broadcast ARP request frame (padded to 60 bytes).
pub fn arp_request_frame(sha: [u8; 6], spa: &str, tpa: &str, vlan: Option<u16>) -> Vec<u8> {
    pad60(eth(BROADCAST, sha, vlan, ET_ARP, &arp(1, sha, spa, ZERO_MAC, tpa)))
}

/// An NDP link-layer address option (type 1 source, 2 target; length 1).
pub fn lla_opt(kind: u8, m: [u8; 6]) -> Vec<u8> {
    let mut v = vec![kind, 1];
    v.extend_from_slice(&m);
    v
}

/// A Neighbor Solicitation (ICMPv6 message) for `target` with raw `options`.
pub fn ns_msg(src: [u8; 16], dst: [u8; 16], target: [u8; 16], options: &[u8]) -> Vec<u8> {
    let mut body = target.to_vec();
    body.extend_from_slice(options);
    icmp6(Icmpv6Type::NeighborSolicitation, src, dst, &body)
}

/// A Neighbor Advertisement (ICMPv6 message) for `target` with flags (router, solicited,
/// override) and raw `options`.
pub fn na_msg(
    src: [u8; 16],
    dst: [u8; 16],
    target: [u8; 16],
    flags: (bool, bool, bool),
    options: &[u8],
) -> Vec<u8> {
    let mut body = target.to_vec();
    body.extend_from_slice(options);
    let h = icmpv6::NeighborAdvertisementHeader {
        router: flags.0,
        solicited: flags.1,
        r#override: flags.2,
    };
    icmp6(Icmpv6Type::NeighborAdvertisement(h), src, dst, &body)
}

/// A raw IPv6 extension header (hop-by-hop, routing or destination options) of `len8` 8-byte
/// units, padded with PadN.
pub fn ext_header(next: u8, len8: usize) -> Vec<u8> {
    assert!(len8 >= 1);
    let mut v = vec![next, (len8 - 1) as u8];
    let pad = len8 * 8 - 2;
    v.push(1); // PadN
    v.push((pad - 2) as u8);
    v.resize(len8 * 8, 0);
    v
}

/// The Internet checksum (RFC 1071) of `data`, written here for patching crafted headers.
pub fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Recomputes the header checksum of the IPv4 header at the start of `ip` over `hlen` bytes.
pub fn fix_ip4_checksum(ip: &mut [u8], hlen: usize) {
    ip[10] = 0;
    ip[11] = 0;
    let c = inet_checksum(&ip[..hlen]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// xorshift64*: a small seeded generator for traffic and fuzzing.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0), near enough.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

// ---------------------------------------------------------------------------------------------
// Describing frames on failure

pub fn hex(f: &[u8]) -> String {
    f.chunks(16)
        .enumerate()
        .map(|(i, c)| {
            format!(
                "{:04x}  {}\n",
                i * 16,
                c.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
            )
        })
        .collect()
}

pub fn describe(f: &[u8]) -> String {
    match SlicedPacket::from_ethernet(f) {
        Ok(p) => format!(
            "{:?}\n{:?}\n{:?}",
            p.link,
            p.net.as_ref().map(|n| format!("{n:?}")),
            p.transport
        ),
        Err(e) => format!("(etherparse: {e:?})"),
    }
}

#[track_caller]
pub fn assert_frame(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at =
            got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!(
            "{what}: frames differ at byte {at} (got {} bytes, want {})\n--- got\n{}{}\n--- want\n{}{}",
            got.len(),
            want.len(),
            hex(got),
            describe(got),
            hex(want),
            describe(want)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The lab: an engine, the host ends of its ports, and expected counters

pub struct Lab {
    pub e: Engine,
    pub hosts: Vec<MemPort>,
    /// Expected counters per VR.
    pub vr: Vec<VrCounters>,
    /// Expected counters per port.
    pub port: Vec<PortCounters>,
    /// Expected transit packets held in neighbor queues, per VR (for the invariant).
    pub transit_queued: Vec<u64>,
    /// Expected packets (transit and generated) held in neighbor queues, per VR.
    pub queued: Vec<usize>,
    /// Expected fragments held for reassembly, per VR (received, not yet counted: part of
    /// the invariant like transit packets queued).
    pub held: Vec<usize>,
    pub now: u64,
}

impl Lab {
    /// One port per entry of `rings` (the ring size of that port pair).
    pub fn new(vrs: &[VrConfig], rings: &[usize]) -> Lab {
        Lab::build(vrs, rings, None)
    }

    /// As [`Lab::new`] with an engine burst of `burst`.
    pub fn with_burst(vrs: &[VrConfig], rings: &[usize], burst: usize) -> Lab {
        Lab::build(vrs, rings, Some(burst))
    }

    fn build(vrs: &[VrConfig], rings: &[usize], burst: Option<usize>) -> Lab {
        let mut ports: Vec<Box<dyn Port>> = Vec::new();
        let mut hosts = Vec::new();
        for (i, &r) in rings.iter().enumerate() {
            let (a, b) = mem::pair(&format!("p{i}"), &format!("h{i}"), r);
            ports.push(Box::new(a));
            hosts.push(b);
        }
        let e = match burst {
            None => Engine::from_configs(ports, vrs).unwrap(),
            Some(b) => {
                Engine::with_burst(ports, vrs.iter().map(|c| Vr::new(c).unwrap()).collect(), b)
                    .unwrap()
            }
        };
        Lab {
            e,
            hosts,
            vr: vec![VrCounters::default(); vrs.len()],
            port: vec![PortCounters::default(); rings.len()],
            transit_queued: vec![0; vrs.len()],
            queued: vec![0; vrs.len()],
            held: vec![0; vrs.len()],
            now: 0,
        }
    }

    /// Puts `frames` on the wire towards the engine's port `p` (all must fit the ring) and
    /// expects the engine to receive them.
    #[track_caller]
    pub fn send<F: AsRef<[u8]>>(&mut self, p: usize, frames: &[F]) {
        let mut b = Batch::new(frames.len());
        for f in frames {
            let f = f.as_ref();
            assert!(b.push_copy(f), "frame of {} bytes does not fit a buffer", f.len());
        }
        let sel: Vec<u16> = (0..frames.len() as u16).collect();
        assert_eq!(self.hosts[p].tx_burst(&mut b, &sel), frames.len(), "host ring {p} full");
        self.port[p].rx_packets += frames.len() as u64;
    }

    /// One engine poll at the current time; returns the frames it received.
    pub fn poll(&mut self) -> usize {
        self.e.poll(self.now)
    }

    /// Polls until the engine has received everything sent to it (at least once).
    pub fn run(&mut self) {
        while self.e.poll(self.now) > 0 {}
    }

    /// Sets the time to `now` (never backwards) and polls until idle.
    pub fn run_at(&mut self, now: u64) {
        assert!(now >= self.now);
        self.now = now;
        self.run();
    }

    /// Everything the engine sent out of port `p` since the last call.
    pub fn recv(&mut self, p: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut b = Batch::new(256);
        loop {
            b.clear();
            if self.hosts[p].rx_burst(&mut b) == 0 {
                break;
            }
            out.extend(b.packets().iter().map(|x| x.frame().to_vec()));
        }
        out
    }

    /// Receives from port `p` and asserts the frames are exactly `want`, in order; counts them
    /// as transmitted by the port.
    #[track_caller]
    pub fn expect<F: AsRef<[u8]>>(&mut self, p: usize, want: &[F]) {
        let want: Vec<&[u8]> = want.iter().map(|f| f.as_ref()).collect();
        let got = self.recv(p);
        if got.len() != want.len() {
            let mut s = format!("port {p}: got {} frames, want {}\n", got.len(), want.len());
            for (i, f) in got.iter().enumerate() {
                s += &format!("--- got #{i}\n{}{}\n", hex(f), describe(f));
            }
            for (i, f) in want.iter().enumerate() {
                s += &format!("--- want #{i}\n{}{}\n", hex(f), describe(f));
            }
            panic!("{s}\n{}", self.e.dump());
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if g != w {
                eprintln!("{}", self.e.dump());
            }
            assert_frame(g, w, &format!("port {p} frame #{i}"));
        }
        self.port[p].tx_packets += want.len() as u64;
    }

    /// As [`Lab::expect`], ignoring the order (for probes, whose order the contract leaves open).
    #[track_caller]
    pub fn expect_unordered(&mut self, p: usize, want: &[Vec<u8>]) {
        let mut got = self.recv(p);
        let mut want = want.to_vec();
        got.sort();
        want.sort();
        if got != want {
            let mut s = format!(
                "port {p}: frames differ (order ignored): got {}, want {}\n",
                got.len(),
                want.len()
            );
            for f in got.iter().filter(|f| !want.contains(f)) {
                s += &format!("--- unexpected\n{}{}\n", hex(f), describe(f));
            }
            for f in want.iter().filter(|f| !got.contains(f)) {
                s += &format!("--- missing\n{}{}\n", hex(f), describe(f));
            }
            panic!("{s}\n{}", self.e.dump());
        }
        self.port[p].tx_packets += want.len() as u64;
    }

    /// Receives from port `p`: first exactly `first`, in order (the burst's own packets), then
    /// `then` in any order (what the VRs made: probes, flushed queues).
    #[track_caller]
    pub fn expect_then_any<F: AsRef<[u8]>>(&mut self, p: usize, first: &[F], then: &[F]) {
        let mut got = self.recv(p);
        let n = first.len() + then.len();
        if got.len() != n {
            let mut s = format!("port {p}: got {} frames, want {n}\n", got.len());
            for (i, f) in got.iter().enumerate() {
                s += &format!("--- got #{i}\n{}{}\n", hex(f), describe(f));
            }
            panic!("{s}\n{}", self.e.dump());
        }
        for (i, (g, w)) in got.iter().zip(first).enumerate() {
            assert_frame(g, w.as_ref(), &format!("port {p} frame #{i}"));
        }
        let mut rest = got.split_off(first.len());
        let mut want: Vec<Vec<u8>> = then.iter().map(|f| f.as_ref().to_vec()).collect();
        rest.sort();
        want.sort();
        for (g, w) in rest.iter().zip(&want) {
            assert_frame(g, w, &format!("port {p}, frames after the burst (order ignored)"));
        }
        self.port[p].tx_packets += n as u64;
    }

    /// Asserts that no port sent anything.
    #[track_caller]
    pub fn expect_silence(&mut self) {
        for p in 0..self.hosts.len() {
            self.expect::<Vec<u8>>(p, &[]);
        }
    }

    /// Expected counters of VR `v`.
    pub fn c(&mut self, v: usize) -> &mut VrCounters {
        &mut self.vr[v]
    }

    /// VR `v` receives `frame`.
    pub fn rx(&mut self, v: usize, frame: &[u8]) {
        self.vr[v].rx_packets += 1;
        self.vr[v].rx_bytes += frame.len() as u64;
    }

    /// VR `v` forwarded `out` (as it left the port).
    pub fn fwd(&mut self, v: usize, out: &[u8]) {
        self.vr[v].forwarded += 1;
        self.vr[v].forwarded_bytes += out.len() as u64;
    }

    pub fn drop(&mut self, v: usize, r: VrDrop) {
        self.vr[v].drops[r as usize] += 1;
    }

    pub fn pdrop(&mut self, p: usize, r: PortDrop) {
        self.port[p].drops[r as usize] += 1;
    }

    pub fn neighbors(&self, v: usize) -> Vec<NeighborRow> {
        self.e.vrs()[v].neighbors()
    }

    pub fn neighbor(&self, v: usize, addr: &str) -> Option<NeighborRow> {
        let a = ip(addr);
        self.neighbors(v).into_iter().find(|r| r.ip == a)
    }

    /// Compares every counter of every VR and port with the expected values, checks the
    /// accounting invariant and the queue lengths; dumps the engine on failure.
    #[track_caller]
    pub fn check(&self, step: &str) {
        let mut errs = Vec::new();
        for (v, want) in self.vr.iter().enumerate() {
            let vr = &self.e.vrs()[v];
            let got = vr.counters();
            if got != want {
                for ((name, g), (_, w)) in got.named().into_iter().zip(want.named()) {
                    if g != w {
                        errs.push(format!("vr {}: {name} = {g}, expected {w}", vr.name()));
                    }
                }
            }
            if vr.queued() != self.queued[v] {
                errs.push(format!(
                    "vr {}: queued() = {}, expected {}",
                    vr.name(),
                    vr.queued(),
                    self.queued[v]
                ));
            }
            if vr.reassembling() != self.held[v] {
                errs.push(format!(
                    "vr {}: reassembling() = {}, expected {}",
                    vr.name(),
                    vr.reassembling(),
                    self.held[v]
                ));
            }
            if let Err(e) = invariant(got, self.transit_queued[v] + self.held[v] as u64) {
                errs.push(format!("vr {}: {e}", vr.name()));
            }
        }
        for (p, want) in self.port.iter().enumerate() {
            let got = self.e.port_counters(p);
            if got != want {
                errs.push(format!("port {p}: {got:?}, expected {want:?}"));
            }
        }
        if !errs.is_empty() {
            panic!("step `{step}`:\n  {}\n--- engine\n{}", errs.join("\n  "), self.e.dump());
        }
    }
}

/// The accounting invariant: every received packet is forwarded, delivered, dropped by reason
/// or still waiting (transit) in a neighbor queue.
pub fn invariant(c: &VrCounters, transit_queued: u64) -> Result<(), String> {
    let sum = c.forwarded + c.local_in + c.dropped_total() + transit_queued;
    if c.rx_packets == sum {
        Ok(())
    } else {
        Err(format!(
            "invariant broken: rx_packets {} != forwarded {} + local_in {} + drops {} + transit queued {}",
            c.rx_packets,
            c.forwarded,
            c.local_in,
            c.dropped_total(),
            transit_queued
        ))
    }
}

/// The invariant when the number of transit packets queued is only known to be at most
/// `queued` (fuzzing).
pub fn invariant_bounds(c: &VrCounters, queued: usize) -> Result<(), String> {
    let done = c.forwarded + c.local_in + c.dropped_total();
    if done <= c.rx_packets && c.rx_packets <= done + queued as u64 {
        Ok(())
    } else {
        Err(format!(
            "invariant broken: rx {} vs done {done} (+ up to {queued} queued)",
            c.rx_packets
        ))
    }
}

/// The frame a host on `from` puts on the wire to the VR interface `to`.
pub fn to_vr(to: [u8; 6], from: [u8; 6], vlan: Option<u16>, ip4: &Ip4) -> Vec<u8> {
    eth(to, from, vlan, ET_IP4, &ip4.bytes())
}

pub fn to_vr6(to: [u8; 6], from: [u8; 6], vlan: Option<u16>, ip6: &Ip6) -> Vec<u8> {
    eth(to, from, vlan, ET_IP6, &ip6.bytes())
}
