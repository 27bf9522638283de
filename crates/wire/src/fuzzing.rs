//! Exercises every parser on arbitrary bytes, for `tests/no_panic.rs` and the cargo-fuzz
//! targets in the workspace's `fuzz/` directory. Not part of the API: hidden from the docs,
//! free to change, and the one place in the crate that allocates (copies to mutate).
//!
//! Each entry point feeds the bytes to its parsers at offset 0, and [`fuzz_all`] also walks
//! them as an Ethernet frame down through VLAN tags, IP and the upper layers, so that every
//! view sees both raw bytes and bytes that passed the layers above it. Beyond "nothing
//! panics", the helpers assert properties that must hold for any input: a `Repr` that parses
//! emits bytes that parse back to the same `Repr`; setting a field to its own value changes
//! nothing; a filled checksum verifies; `decrement_ttl` keeps a valid checksum valid and equal
//! to a recomputation; [`checksum::data`] agrees with a naive sum; an NDP view that passed
//! `check_len` yields no malformed option.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::arp::{self, ArpRepr};
use crate::ethernet::{self, EthernetRepr};
use crate::icmpv4::{self, Icmpv4Repr};
use crate::icmpv6::{self, Icmpv6Repr};
use crate::ipv4::{self, Ipv4Repr};
use crate::ipv6::{self, Ipv6Repr};
use crate::ndp::{self, NdpOptions};
use crate::tcp::{self, TcpRepr};
use crate::udp::{self, UdpRepr};
use crate::vlan::{self, VlanRepr};
use crate::{checksum, ethertype, ip_proto, MacAddr};

/// splitmix64: small, fast and good enough to drive mutations; the same seed gives the same
/// inputs, so a failure reproduces. Shared by `tests/no_panic.rs` and the workspace's corpus
/// mutation run (`crates/routeplex/tests/it/fuzz_corpus.rs`).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

/// IGMP and MLD views: accessors after `check_len`, and record walks that end with at most
/// one error, as the last item.
fn group_messages(data: &[u8]) {
    if let Ok(p) = crate::igmp::Packet::new_checked(data) {
        black_box((p.msg_type(), p.max_resp_code(), p.checksum(), p.group_addr()));
        black_box(p.verify_checksum());
        let r: Vec<_> = p.records().collect();
        assert!(r.iter().rev().skip(1).all(|x| x.is_ok()));
    }
    if let Ok(p) = crate::mld::Packet::new_checked(data) {
        black_box((p.msg_type(), p.group_addr(), p.num_records()));
        let r: Vec<_> = p.records().collect();
        assert!(r.iter().rev().skip(1).all(|x| x.is_ok()));
    }
}

/// How many stacked VLAN tags the frame walk follows.
const MAX_TAGS: usize = 4;

const V4_PAIR: (IpAddr, IpAddr) =
    (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
const V6_PAIR: (IpAddr, IpAddr) = (
    IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 1)),
);

/// Runs every parser family on `data`, at offset 0 and as an Ethernet frame.
pub fn fuzz_all(data: &[u8]) {
    ethernet_arp_vlan(data);
    ipv4(data);
    ipv6_ext(data);
    icmp_ndp(data);
    udp_tcp(data);
    checksums(data);
}

/// Ethernet frames (walked down through every layer), VLAN tags and ARP at offset 0.
pub fn ethernet_arp_vlan(data: &[u8]) {
    frame(data);
    tag(data);
    arp_packet(data);
}

/// IPv4 at offset 0, and what it carries.
pub fn ipv4(data: &[u8]) {
    ipv4_packet(data);
}

/// IPv6 at offset 0, its extension headers, and what it carries.
pub fn ipv6_ext(data: &[u8]) {
    ipv6_packet(data);
}

/// ICMPv4, ICMPv6 and NDP at offset 0.
pub fn icmp_ndp(data: &[u8]) {
    icmpv4_message(data);
    for (s, d) in [addrs_v6(data), (v6(V6_PAIR.0), v6(V6_PAIR.1))] {
        icmpv6_message(data, &s, &d);
    }
    neighbor_solicit(data);
    neighbor_advert(data);
    group_messages(data);
    let opts: Vec<_> = NdpOptions::new(data).collect();
    // At most one error, and only as the last item.
    assert!(opts.iter().rev().skip(1).all(|o| o.is_ok()));
    black_box((ndp::source_link_addr(NdpOptions::new(data)), ndp::target_link_addr(opts)));
    if data.len() >= 16 {
        let a = v6_at(data, 0);
        black_box((ndp::solicited_node(&a), ndp::multicast_mac(&a)));
    }
}

/// UDP and TCP at offset 0, with IPv4, IPv6 and mismatched address pairs.
pub fn udp_tcp(data: &[u8]) {
    let (s6, d6) = addrs_v6(data);
    let pairs = [V4_PAIR, V6_PAIR, (IpAddr::V6(s6), IpAddr::V6(d6)), (V4_PAIR.0, V6_PAIR.1)];
    for (s, d) in pairs {
        udp_datagram(data, &s, &d);
        tcp_segment(data, &s, &d);
    }
}

/// The checksum functions against a naive sum.
pub fn checksums(data: &[u8]) {
    let mut acc: u64 = 0;
    for w in data.chunks(2) {
        acc += u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u64;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    assert_eq!(checksum::data(data), acc as u16);
    if data.len() >= 6 {
        let w = |i: usize| u16::from_be_bytes([data[i], data[i + 1]]);
        black_box(checksum::update(w(0), w(2), w(4)));
        black_box(checksum::combine(&[w(0), w(2), w(4)]));
    }
    if data.len() >= 12 {
        let w = |i: usize| u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        black_box(checksum::update32(w(0) as u16, w(4), w(8)));
    }
}

fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

fn v6_at(data: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&data[at..at + 16]);
    Ipv6Addr::from(a)
}

/// Addresses taken from the bytes, so that checksums sometimes come out right by chance.
fn addrs_v6(data: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    if data.len() >= 32 {
        (v6_at(data, 0), v6_at(data, 16))
    } else {
        (Ipv6Addr::UNSPECIFIED, Ipv6Addr::LOCALHOST)
    }
}

fn frame(data: &[u8]) {
    let Ok(f) = ethernet::Frame::new_checked(data) else { return };
    black_box((f.dst_addr(), f.src_addr(), f.ethertype(), f.header(), f.payload()));
    let r = EthernetRepr::parse(&f).unwrap();
    let mut copy = data.to_vec();
    let mut g = ethernet::Frame::new_unchecked(&mut copy[..]);
    g.set_dst_addr(f.dst_addr());
    g.set_src_addr(f.src_addr());
    g.set_ethertype(f.ethertype());
    black_box(g.payload_mut());
    assert_eq!(copy, data);
    let mut out = [0u8; ethernet::HEADER_LEN];
    r.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], f.header());

    let mut et = f.ethertype();
    let mut rest = f.payload();
    for _ in 0..MAX_TAGS {
        if et != ethertype::VLAN && et != ethertype::QINQ {
            break;
        }
        let Ok(t) = vlan::Tag::new_checked(rest) else { return };
        tag(rest);
        et = t.inner_ethertype();
        rest = &rest[vlan::HEADER_LEN..];
    }
    match et {
        ethertype::IPV4 => ipv4_packet(rest),
        ethertype::IPV6 => ipv6_packet(rest),
        ethertype::ARP => arp_packet(rest),
        _ => {}
    }
}

fn tag(data: &[u8]) {
    let Ok(t) = vlan::Tag::new_checked(data) else { return };
    black_box((t.tci(), t.vid(), t.pcp(), t.dei(), t.inner_ethertype(), t.payload()));
    let r = VlanRepr::parse(&t).unwrap();
    let mut copy = data.to_vec();
    let mut u = vlan::Tag::new_unchecked(&mut copy[..]);
    u.set_vid(t.vid());
    u.set_pcp(t.pcp());
    u.set_dei(t.dei());
    u.set_inner_ethertype(t.inner_ethertype());
    black_box(u.payload_mut());
    assert_eq!(copy, data);
    let mut out = [0u8; vlan::HEADER_LEN];
    r.emit(&mut vlan::Tag::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..vlan::HEADER_LEN]);
}

fn arp_packet(data: &[u8]) {
    let Ok(p) = arp::Packet::new_checked(data) else { return };
    black_box((p.hardware_type(), p.protocol_type(), p.hardware_len(), p.protocol_len()));
    black_box((p.operation(), p.is_ethernet_ipv4()));
    black_box((
        p.sender_hw_addr(),
        p.sender_proto_addr(),
        p.target_hw_addr(),
        p.target_proto_addr(),
    ));
    black_box((
        p.sender_hw_bytes(),
        p.sender_proto_bytes(),
        p.target_hw_bytes(),
        p.target_proto_bytes(),
    ));
    let mut copy = data.to_vec();
    let mut q = arp::Packet::new_unchecked(&mut copy[..]);
    q.set_hardware_type(p.hardware_type());
    q.set_protocol_type(p.protocol_type());
    q.set_hardware_len(p.hardware_len());
    q.set_protocol_len(p.protocol_len());
    q.set_operation(p.operation());
    q.set_sender_hw_addr(p.sender_hw_addr());
    q.set_sender_proto_addr(p.sender_proto_addr());
    q.set_target_hw_addr(p.target_hw_addr());
    q.set_target_proto_addr(p.target_proto_addr());
    // Other forms' addresses are read and written as their first 6 or 4 bytes, zero-padded.
    if p.is_ethernet_ipv4() {
        assert_eq!(copy, data);
    }
    match ArpRepr::parse(&p) {
        Ok(r) => {
            let mut out = [0u8; arp::LEN];
            r.emit(&mut arp::Packet::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], &data[..arp::LEN]);
            assert_eq!(ArpRepr::parse(&arp::Packet::new_unchecked(&out[..])), Ok(r));
        }
        Err(_) => assert!(!p.is_ethernet_ipv4()),
    }
}

fn ipv4_packet(data: &[u8]) {
    let Ok(p) = ipv4::Packet::new_checked(data) else { return };
    black_box((p.version(), p.header_len(), p.tos(), p.dscp(), p.ecn(), p.total_len()));
    black_box((p.ident(), p.dont_frag(), p.more_frags(), p.frag_offset(), p.is_fragment()));
    black_box((p.ttl(), p.protocol(), p.checksum(), p.src_addr(), p.dst_addr()));
    black_box((p.options(), p.header(), p.payload()));
    let valid = p.verify_checksum();

    let mut copy = data.to_vec();
    let mut q = ipv4::Packet::new_unchecked(&mut copy[..]);
    q.set_version(p.version());
    q.set_header_len(p.header_len());
    q.set_tos(p.tos());
    q.set_dscp(p.dscp());
    q.set_ecn(p.ecn());
    q.set_total_len(p.total_len());
    q.set_ident(p.ident());
    q.set_dont_frag(p.dont_frag());
    q.set_more_frags(p.more_frags());
    q.set_frag_offset(p.frag_offset());
    q.set_ttl(p.ttl());
    q.set_protocol(p.protocol());
    q.set_checksum(p.checksum());
    q.set_src_addr(p.src_addr());
    q.set_dst_addr(p.dst_addr());
    black_box((q.options_mut().len(), q.payload_mut().len()));
    assert_eq!(copy, data);

    let mut q = ipv4::Packet::new_unchecked(&mut copy[..]);
    let ttl = q.ttl();
    q.decrement_ttl();
    assert_eq!(q.ttl(), ttl.saturating_sub(1));
    // With TTL 0 nothing changes, and a valid-but-0xffff checksum stays so.
    if valid && ttl > 0 {
        assert!(q.verify_checksum());
        let incremental = q.checksum();
        q.fill_checksum();
        assert_eq!(q.checksum(), incremental);
        q.set_src_addr_incremental(p.dst_addr());
        q.set_dst_addr_incremental(Ipv4Addr::from(!u32::from(p.src_addr())));
        assert!(q.verify_checksum());
    }
    q.fill_checksum();
    assert!(q.verify_checksum());

    if let Ok(r) = Ipv4Repr::parse(&p) {
        assert!(valid && p.version() == 4);
        let mut out = vec![0u8; r.buffer_len() + r.payload_len as usize];
        r.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]));
        let again = ipv4::Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&again), Ok(r));
    }

    let (src, dst) = (IpAddr::V4(p.src_addr()), IpAddr::V4(p.dst_addr()));
    upper(p.protocol(), p.payload(), &src, &dst);
}

fn ipv6_packet(data: &[u8]) {
    let p = ipv6::Packet::new_unchecked(data);
    // The walk must not panic even on an unchecked packet.
    let _ = black_box(p.upper_layer());
    let Ok(p) = ipv6::Packet::new_checked(data) else { return };
    black_box((p.version(), p.traffic_class(), p.flow_label(), p.payload_len()));
    black_box((p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr(), p.header()));
    black_box(p.payload());

    let mut copy = data.to_vec();
    let mut q = ipv6::Packet::new_unchecked(&mut copy[..]);
    q.set_version(p.version());
    q.set_traffic_class(p.traffic_class());
    q.set_flow_label(p.flow_label());
    q.set_payload_len(p.payload_len());
    q.set_next_header(p.next_header());
    q.set_hop_limit(p.hop_limit());
    q.set_src_addr(p.src_addr());
    q.set_dst_addr(p.dst_addr());
    black_box(q.payload_mut().len());
    assert_eq!(copy, data);
    let mut q = ipv6::Packet::new_unchecked(&mut copy[..]);
    q.decrement_hop_limit();
    assert_eq!(q.hop_limit(), p.hop_limit().saturating_sub(1));

    if let Ok(r) = Ipv6Repr::parse(&p) {
        let mut out = vec![0u8; r.buffer_len() + r.payload_len as usize];
        r.emit(&mut ipv6::Packet::new_unchecked(&mut out[..]));
        let again = ipv6::Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&again), Ok(r));
    }

    let end = ipv6::HEADER_LEN + p.payload_len() as usize;
    if let Ok(ul) = p.upper_layer() {
        assert!(ul.offset >= ipv6::HEADER_LEN && ul.offset <= end);
        black_box(ul.fragment);
        let (src, dst) = (IpAddr::V6(p.src_addr()), IpAddr::V6(p.dst_addr()));
        upper(ul.protocol, &data[ul.offset..end], &src, &dst);
    }
}

/// Dispatches an upper-layer payload to its parser.
fn upper(protocol: u8, payload: &[u8], src: &IpAddr, dst: &IpAddr) {
    match (protocol, src, dst) {
        (ip_proto::ICMP, _, _) => icmpv4_message(payload),
        (ip_proto::ICMPV6, IpAddr::V6(s), IpAddr::V6(d)) => {
            icmpv6_message(payload, s, d);
            match payload.first() {
                Some(&icmpv6::NEIGHBOR_SOLICIT) => neighbor_solicit(payload),
                Some(&icmpv6::NEIGHBOR_ADVERT) => neighbor_advert(payload),
                _ => {}
            }
        }
        (ip_proto::UDP, _, _) => udp_datagram(payload, src, dst),
        (ip_proto::TCP, _, _) => tcp_segment(payload, src, dst),
        _ => {}
    }
}

fn icmpv4_message(data: &[u8]) {
    let Ok(p) = icmpv4::Packet::new_checked(data) else { return };
    black_box((p.msg_type(), p.code(), p.checksum(), p.echo_ident(), p.echo_seq_no()));
    black_box((p.rest_of_header(), p.next_hop_mtu(), p.data(), icmpv4::is_error(p.msg_type())));
    let valid = p.verify_checksum();
    let mut copy = data.to_vec();
    let mut q = icmpv4::Packet::new_unchecked(&mut copy[..]);
    q.set_msg_type(p.msg_type());
    q.set_code(p.code());
    q.set_checksum(p.checksum());
    q.set_echo_ident(p.echo_ident());
    q.set_echo_seq_no(p.echo_seq_no());
    q.set_rest_of_header(p.rest_of_header());
    q.set_next_hop_mtu(p.next_hop_mtu());
    black_box(q.data_mut().len());
    assert_eq!(copy, data);
    let mut q = icmpv4::Packet::new_unchecked(&mut copy[..]);
    q.fill_checksum();
    assert!(q.verify_checksum());
    match Icmpv4Repr::parse(&p) {
        Ok(r) => {
            assert!(valid);
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut icmpv4::Packet::new_unchecked(&mut out[..]));
            assert_eq!(Icmpv4Repr::parse(&icmpv4::Packet::new_unchecked(&out[..])), Ok(r));
        }
        Err(_) => assert!(!valid),
    }
    // Errors quote the offending datagram's header.
    if icmpv4::is_error(p.msg_type()) {
        ipv4_packet(p.data());
    }
}

fn icmpv6_message(data: &[u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
    let Ok(p) = icmpv6::Packet::new_checked(data) else { return };
    black_box((p.msg_type(), p.code(), p.checksum(), p.echo_ident(), p.echo_seq_no()));
    black_box((p.rest_of_header(), p.mtu(), p.pointer(), p.data(), icmpv6::is_error(p.msg_type())));
    let valid = p.verify_checksum(src, dst);
    let mut copy = data.to_vec();
    let mut q = icmpv6::Packet::new_unchecked(&mut copy[..]);
    q.set_msg_type(p.msg_type());
    q.set_code(p.code());
    q.set_checksum(p.checksum());
    q.set_echo_ident(p.echo_ident());
    q.set_echo_seq_no(p.echo_seq_no());
    q.set_rest_of_header(p.rest_of_header());
    q.set_mtu(p.mtu());
    black_box(q.data_mut().len());
    assert_eq!(copy, data);
    let mut q = icmpv6::Packet::new_unchecked(&mut copy[..]);
    q.fill_checksum(src, dst);
    assert!(q.verify_checksum(src, dst));
    match Icmpv6Repr::parse(src, dst, &p) {
        Ok(r) => {
            assert!(valid);
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(src, dst, &mut icmpv6::Packet::new_unchecked(&mut out[..]));
            let again = icmpv6::Packet::new_unchecked(&out[..]);
            assert_eq!(Icmpv6Repr::parse(src, dst, &again), Ok(r));
        }
        Err(_) => assert!(!valid),
    }
    if icmpv6::is_error(p.msg_type()) {
        ipv6_packet(p.data());
    }
}

fn neighbor_solicit(data: &[u8]) {
    let _ = black_box(ndp::NeighborSolicit::new_unchecked(data).check_len());
    let Ok(ns) = ndp::NeighborSolicit::new_checked(data) else { return };
    black_box(ns.target_addr());
    assert!(ns.options().all(|o| o.is_ok()));
    black_box((ndp::source_link_addr(ns.options()), ndp::target_link_addr(ns.options())));
    let mut copy = data.to_vec();
    let mut m = ndp::NeighborSolicit::new_unchecked(&mut copy[..]);
    m.set_target_addr(ns.target_addr());
    black_box(m.options_mut().len());
    assert_eq!(copy, data);
}

fn neighbor_advert(data: &[u8]) {
    let Ok(na) = ndp::NeighborAdvert::new_checked(data) else { return };
    black_box((na.router_flag(), na.solicited_flag(), na.override_flag(), na.target_addr()));
    assert!(na.options().all(|o| o.is_ok()));
    black_box((ndp::source_link_addr(na.options()), ndp::target_link_addr(na.options())));
    let mut copy = data.to_vec();
    let mut m = ndp::NeighborAdvert::new_unchecked(&mut copy[..]);
    m.set_router_flag(na.router_flag());
    m.set_solicited_flag(na.solicited_flag());
    m.set_override_flag(na.override_flag());
    m.set_target_addr(na.target_addr());
    black_box(m.options_mut().len());
    assert_eq!(copy, data);
}

fn udp_datagram(data: &[u8], src: &IpAddr, dst: &IpAddr) {
    let Ok(p) = udp::Packet::new_checked(data) else { return };
    black_box((p.src_port(), p.dst_port(), p.len(), p.checksum(), p.payload()));
    black_box(p.verify_checksum(src, dst));
    let mut copy = data.to_vec();
    let mut q = udp::Packet::new_unchecked(&mut copy[..]);
    q.set_src_port(p.src_port());
    q.set_dst_port(p.dst_port());
    q.set_len(p.len());
    q.set_checksum(p.checksum());
    black_box(q.payload_mut().len());
    assert_eq!(copy, data);
    let mut q = udp::Packet::new_unchecked(&mut copy[..]);
    q.fill_checksum(src, dst);
    assert_eq!(q.verify_checksum(src, dst), src.is_ipv4() == dst.is_ipv4());
    let r = UdpRepr::parse(&p).unwrap();
    let mut out = vec![0u8; r.buffer_len() + r.payload_len as usize];
    r.emit(&mut udp::Packet::new_unchecked(&mut out[..]));
    assert_eq!(UdpRepr::parse(&udp::Packet::new_unchecked(&out[..])), Ok(r));
}

fn tcp_segment(data: &[u8], src: &IpAddr, dst: &IpAddr) {
    let Ok(p) = tcp::Packet::new_checked(data) else { return };
    black_box((p.src_port(), p.dst_port(), p.seq_number(), p.ack_number(), p.header_len()));
    black_box((p.flags(), p.fin(), p.syn(), p.rst(), p.psh(), p.ack(), p.urg(), p.ece(), p.cwr()));
    black_box((p.window_len(), p.checksum(), p.urgent_at(), p.options(), p.payload()));
    black_box(p.verify_checksum(src, dst));
    let mut copy = data.to_vec();
    let mut q = tcp::Packet::new_unchecked(&mut copy[..]);
    q.set_src_port(p.src_port());
    q.set_dst_port(p.dst_port());
    q.set_seq_number(p.seq_number());
    q.set_ack_number(p.ack_number());
    q.set_header_len(p.header_len());
    q.set_flags(p.flags());
    q.set_fin(p.fin());
    q.set_syn(p.syn());
    q.set_rst(p.rst());
    q.set_psh(p.psh());
    q.set_ack(p.ack());
    q.set_urg(p.urg());
    q.set_ece(p.ece());
    q.set_cwr(p.cwr());
    q.set_window_len(p.window_len());
    q.set_checksum(p.checksum());
    q.set_urgent_at(p.urgent_at());
    black_box((q.options_mut().len(), q.payload_mut().len()));
    assert_eq!(copy, data);
    let mut q = tcp::Packet::new_unchecked(&mut copy[..]);
    q.fill_checksum(src, dst);
    assert_eq!(q.verify_checksum(src, dst), src.is_ipv4() == dst.is_ipv4());
    let r = TcpRepr::parse(&p).unwrap();
    let mut out = [0u8; tcp::HEADER_LEN];
    r.emit(&mut tcp::Packet::new_unchecked(&mut out[..]));
    assert_eq!(TcpRepr::parse(&tcp::Packet::new_unchecked(&out[..])), Ok(r));
}

/// A field of a seed frame that mutations aim at: lengths, offsets, types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A big-endian 16-bit field at this offset.
    U16(usize),
    /// A byte at this offset.
    U8(usize),
    /// The low nibble of the byte at this offset (IPv4 IHL).
    LowNibble(usize),
    /// The high nibble of the byte at this offset (IP version, TCP data offset).
    HighNibble(usize),
}

/// A valid Ethernet frame and the fields worth mutating in it.
#[derive(Debug, Clone)]
pub struct Seed {
    /// What the frame is.
    pub name: &'static str,
    /// The frame.
    pub bytes: Vec<u8>,
    /// Fields to aim edge values at.
    pub fields: Vec<Field>,
}

/// Builds a frame layer by layer, recording the fields worth mutating.
struct Builder {
    bytes: Vec<u8>,
    fields: Vec<Field>,
}

const MAC_A: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);
const IP4_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const IP4_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const IP6_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xa);
const IP6_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0xb);

impl Builder {
    fn new() -> Builder {
        Builder { bytes: Vec::new(), fields: Vec::new() }
    }

    fn grow(&mut self, n: usize) -> usize {
        let at = self.bytes.len();
        self.bytes.resize(at + n, 0);
        at
    }

    fn eth(mut self, et: u16) -> Builder {
        let at = self.grow(ethernet::HEADER_LEN);
        EthernetRepr { src: MAC_A, dst: MAC_B, ethertype: et }
            .emit(&mut ethernet::Frame::new_unchecked(&mut self.bytes[at..]));
        self.fields.push(Field::U16(at + 12));
        self
    }

    fn vlan(mut self, vid: u16, inner: u16) -> Builder {
        let at = self.grow(vlan::HEADER_LEN);
        VlanRepr { pcp: 3, dei: false, vid, inner_ethertype: inner }
            .emit(&mut vlan::Tag::new_unchecked(&mut self.bytes[at..]));
        self.fields.extend([Field::U16(at), Field::U16(at + 2)]);
        self
    }

    /// An IPv4 header with `options`, announcing `payload_len` more bytes.
    fn ipv4(mut self, protocol: u8, options: &[u8], payload_len: usize, frag: u16) -> Builder {
        let at = self.grow(ipv4::HEADER_LEN + options.len());
        let r = Ipv4Repr {
            src: IP4_A,
            dst: IP4_B,
            protocol,
            payload_len: (options.len() + payload_len) as u16,
            ttl: 64,
            tos: 0,
            ident: 0x4242,
            dont_frag: frag == 0,
        };
        let mut p = ipv4::Packet::new_unchecked(&mut self.bytes[at..]);
        r.emit(&mut p);
        p.set_header_len(ipv4::HEADER_LEN + options.len());
        p.options_mut().copy_from_slice(options);
        if frag != 0 {
            p.set_more_frags(true);
            p.set_frag_offset(frag & !1);
        }
        p.fill_checksum();
        self.fields.extend([
            Field::LowNibble(at),
            Field::HighNibble(at),
            Field::U16(at + 2),
            Field::U16(at + 6),
            Field::U8(at + 8),
            Field::U8(at + 9),
            Field::U16(at + 10),
        ]);
        self
    }

    fn ipv6(mut self, next_header: u8, payload_len: usize) -> Builder {
        let at = self.grow(ipv6::HEADER_LEN);
        Ipv6Repr {
            src: IP6_A,
            dst: IP6_B,
            next_header,
            payload_len: payload_len as u16,
            hop_limit: 64,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut self.bytes[at..]));
        self.fields.extend([Field::HighNibble(at), Field::U16(at + 4), Field::U8(at + 6)]);
        self
    }

    /// An extension header of `len` bytes (a multiple of 8, or of 4 for AH).
    fn ext(mut self, kind: u8, next: u8, len: usize) -> Builder {
        let at = self.grow(len);
        let h = &mut self.bytes[at..];
        h[0] = next;
        match kind {
            ip_proto::FRAGMENT => {
                h[3] = 1; // offset 0, more fragments
                h[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
                self.fields.push(Field::U16(at + 2));
            }
            ip_proto::AH => {
                h[1] = (len / 4 - 2) as u8;
                self.fields.push(Field::U8(at + 1));
            }
            _ => {
                h[1] = (len / 8 - 1) as u8;
                // PadN over the rest, so the options are well formed.
                h[2] = 1;
                h[3] = (len - 4) as u8;
                self.fields.push(Field::U8(at + 1));
            }
        }
        self.fields.push(Field::U8(at));
        self
    }

    fn raw(mut self, bytes: &[u8]) -> Builder {
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// Marks the bytes from `at` on as an ICMPv4 message and fills its checksum.
    fn icmpv4_checksum(mut self, at: usize) -> Builder {
        icmpv4::Packet::new_unchecked(&mut self.bytes[at..]).fill_checksum();
        self.fields.extend([Field::U8(at), Field::U8(at + 1)]);
        self
    }

    /// Marks the bytes from `at` on as an ICMPv6 message and fills its checksum.
    fn icmpv6_checksum(mut self, at: usize) -> Builder {
        icmpv6::Packet::new_unchecked(&mut self.bytes[at..]).fill_checksum(&IP6_A, &IP6_B);
        self.fields.extend([Field::U8(at), Field::U8(at + 1)]);
        self
    }

    fn udp_at(mut self, at: usize, src: IpAddr, dst: IpAddr) -> Builder {
        udp::Packet::new_unchecked(&mut self.bytes[at..]).fill_checksum(&src, &dst);
        self.fields.push(Field::U16(at + 4));
        self
    }

    fn tcp_at(mut self, at: usize, src: IpAddr, dst: IpAddr) -> Builder {
        tcp::Packet::new_unchecked(&mut self.bytes[at..]).fill_checksum(&src, &dst);
        self.fields.extend([Field::HighNibble(at + 12), Field::U8(at + 13)]);
        self
    }

    fn seed(self, name: &'static str) -> Seed {
        Seed { name, bytes: self.bytes, fields: self.fields }
    }
}

fn udp_bytes(payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; udp::HEADER_LEN + payload.len()];
    UdpRepr { src_port: 40000, dst_port: 53, payload_len: payload.len() as u16 }
        .emit(&mut udp::Packet::new_unchecked(&mut v[..]));
    v[udp::HEADER_LEN..].copy_from_slice(payload);
    v
}

fn tcp_bytes(options: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; tcp::HEADER_LEN + options.len() + payload.len()];
    let r = TcpRepr {
        src_port: 40000,
        dst_port: 443,
        seq_number: 0x0102_0304,
        ack_number: 0x0506_0708,
        flags: tcp::flags::ACK | tcp::flags::PSH,
        window_len: 65535,
        urgent_at: 0,
    };
    let mut p = tcp::Packet::new_unchecked(&mut v[..]);
    r.emit(&mut p);
    p.set_header_len(tcp::HEADER_LEN + options.len());
    p.options_mut().copy_from_slice(options);
    p.payload_mut().copy_from_slice(payload);
    v
}

fn icmp_bytes(msg_type: u8, code: u8, rest: u32, data: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 8 + data.len()];
    let mut p = icmpv4::Packet::new_unchecked(&mut v[..]);
    p.set_msg_type(msg_type);
    p.set_code(code);
    p.set_rest_of_header(rest);
    p.data_mut().copy_from_slice(data);
    v
}

/// Valid frames of every kind the crate parses, for the no-panic test and fuzz corpora.
pub fn seeds() -> Vec<Seed> {
    let (a4, b4) = (IpAddr::V4(IP4_A), IpAddr::V4(IP4_B));
    let (a6, b6) = (IpAddr::V6(IP6_A), IpAddr::V6(IP6_B));
    let e = ethernet::HEADER_LEN;
    let mut out = Vec::new();

    let udp = udp_bytes(b"hello, world");
    out.push(
        Builder::new()
            .eth(ethertype::IPV4)
            .ipv4(ip_proto::UDP, &[], udp.len(), 0)
            .raw(&udp)
            .udp_at(e + 20, a4, b4)
            .seed("ipv4-udp"),
    );

    let opts = [0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00];
    let tcp = tcp_bytes(&[0x02, 0x04, 0x05, 0xb4, 0x01, 0x03, 0x03, 0x07], b"GET /");
    out.push(
        Builder::new()
            .eth(ethertype::VLAN)
            .vlan(100, ethertype::IPV4)
            .ipv4(ip_proto::TCP, &opts, tcp.len(), 0)
            .raw(&tcp)
            .tcp_at(e + 4 + 28, a4, b4)
            .seed("vlan-ipv4opts-tcp"),
    );

    let echo = icmp_bytes(icmpv4::ECHO_REQUEST, 0, 0x0001_0002, b"abcdefgh");
    out.push(
        Builder::new()
            .eth(ethertype::QINQ)
            .vlan(10, ethertype::VLAN)
            .vlan(20, ethertype::IPV4)
            .ipv4(ip_proto::ICMP, &[], echo.len(), 0)
            .raw(&echo)
            .icmpv4_checksum(e + 8 + 20)
            .seed("qinq-ipv4-icmp-echo"),
    );

    // Time exceeded quoting the IPv4 + UDP headers of the first seed.
    let quoted = out[0].bytes[e..e + 28].to_vec();
    let err = icmp_bytes(icmpv4::TIME_EXCEEDED, icmpv4::TTL_EXCEEDED_IN_TRANSIT, 0, &quoted);
    out.push(
        Builder::new()
            .eth(ethertype::IPV4)
            .ipv4(ip_proto::ICMP, &[], err.len(), 0)
            .raw(&err)
            .icmpv4_checksum(e + 20)
            .seed("ipv4-icmp-time-exceeded"),
    );
    let err = icmp_bytes(icmpv4::DEST_UNREACHABLE, icmpv4::FRAG_NEEDED, 1400, &quoted);
    out.push(
        Builder::new()
            .eth(ethertype::IPV4)
            .ipv4(ip_proto::ICMP, &[], err.len(), 0)
            .raw(&err)
            .icmpv4_checksum(e + 20)
            .seed("ipv4-icmp-frag-needed"),
    );

    out.push(
        Builder::new()
            .eth(ethertype::IPV4)
            .ipv4(ip_proto::UDP, &[], 16, 0x5a8)
            .raw(&[0x5a; 16])
            .seed("ipv4-fragment"),
    );

    for (name, op, target_hw) in
        [("arp-request", arp::OP_REQUEST, MacAddr([0; 6])), ("arp-reply", arp::OP_REPLY, MAC_B)]
    {
        let mut b = Builder::new().eth(ethertype::ARP);
        let at = b.grow(arp::LEN);
        ArpRepr { operation: op, sender_hw: MAC_A, sender_ip: IP4_A, target_hw, target_ip: IP4_B }
            .emit(&mut arp::Packet::new_unchecked(&mut b.bytes[at..]));
        b.fields.extend([Field::U16(at), Field::U16(at + 2), Field::U8(at + 4), Field::U8(at + 5)]);
        out.push(b.seed(name));
    }

    let udp = udp_bytes(b"six");
    out.push(
        Builder::new()
            .eth(ethertype::IPV6)
            .ipv6(ip_proto::UDP, udp.len())
            .raw(&udp)
            .udp_at(e + 40, a6, b6)
            .seed("ipv6-udp"),
    );

    let tcp = tcp_bytes(&[], b"x");
    let chain_len = 8 + 24 + 8 + 8 + 24;
    out.push(
        Builder::new()
            .eth(ethertype::IPV6)
            .ipv6(ip_proto::HOPOPTS, chain_len + tcp.len())
            .ext(ip_proto::HOPOPTS, ip_proto::ROUTING, 8)
            .ext(ip_proto::ROUTING, ip_proto::FRAGMENT, 24)
            .ext(ip_proto::FRAGMENT, ip_proto::DSTOPTS, 8)
            .ext(ip_proto::DSTOPTS, ip_proto::AH, 8)
            .ext(ip_proto::AH, ip_proto::TCP, 24)
            .raw(&tcp)
            .tcp_at(e + 40 + chain_len, a6, b6)
            .seed("ipv6-ext-chain-tcp"),
    );

    let mut ns = [0u8; ndp::LEN + ndp::LINK_ADDR_OPT_LEN];
    let n = ndp::emit_neighbor_solicit(&mut ns, IP6_B, Some(MAC_A));
    let b = Builder::new().eth(ethertype::IPV6).ipv6(ip_proto::ICMPV6, n).raw(&ns[..n]);
    let mut b = b.icmpv6_checksum(e + 40);
    b.fields.push(Field::U8(e + 40 + 25));
    out.push(b.seed("ipv6-ns"));

    let mut na = vec![0u8; ndp::LEN + 8 + 16];
    let n = ndp::emit_neighbor_advert(&mut na, IP6_A, (true, true, false), Some(MAC_A));
    na[n] = 0xfe;
    na[n + 1] = 2;
    let b = Builder::new().eth(ethertype::IPV6).ipv6(ip_proto::ICMPV6, na.len()).raw(&na);
    let mut b = b.icmpv6_checksum(e + 40);
    b.fields.extend([Field::U8(e + 40 + 25), Field::U8(e + 40 + 33)]);
    out.push(b.seed("ipv6-na"));

    let echo = icmp_bytes(icmpv6::ECHO_REQUEST, 0, 0x0007_0008, b"ping6");
    out.push(
        Builder::new()
            .eth(ethertype::IPV6)
            .ipv6(ip_proto::ICMPV6, echo.len())
            .raw(&echo)
            .icmpv6_checksum(e + 40)
            .seed("ipv6-icmpv6-echo"),
    );

    // Packet too big quoting the IPv6 + UDP headers of the ipv6-udp seed.
    let quoted = out.iter().find(|s| s.name == "ipv6-udp").unwrap().bytes[e..].to_vec();
    let ptb = icmp_bytes(icmpv6::PACKET_TOO_BIG, 0, 1280, &quoted);
    out.push(
        Builder::new()
            .eth(ethertype::IPV6)
            .ipv6(ip_proto::ICMPV6, ptb.len())
            .raw(&ptb)
            .icmpv6_checksum(e + 40)
            .seed("ipv6-icmpv6-too-big"),
    );

    // A non-first fragment: what follows the Fragment header is data, not a header.
    let mut b = Builder::new()
        .eth(ethertype::IPV6)
        .ipv6(ip_proto::FRAGMENT, 8 + 24)
        .ext(ip_proto::FRAGMENT, ip_proto::UDP, 8)
        .raw(&[0x33; 24]);
    b.bytes[e + 40 + 2..e + 40 + 4].copy_from_slice(&0x0b88u16.to_be_bytes());
    out.push(b.seed("ipv6-fragment"));

    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_valid_all_the_way_down() {
        for s in seeds() {
            let f = ethernet::Frame::new_checked(&s.bytes[..]).unwrap();
            let mut et = f.ethertype();
            let mut rest = f.payload();
            while et == ethertype::VLAN || et == ethertype::QINQ {
                et = vlan::Tag::new_checked(rest).unwrap().inner_ethertype();
                rest = &rest[4..];
            }
            match et {
                ethertype::ARP => {
                    ArpRepr::parse(&arp::Packet::new_checked(rest).unwrap()).unwrap();
                }
                ethertype::IPV4 => {
                    let p = ipv4::Packet::new_checked(rest).unwrap();
                    assert!(p.verify_checksum(), "{}", s.name);
                    let (src, dst) = (IpAddr::V4(p.src_addr()), IpAddr::V4(p.dst_addr()));
                    match p.protocol() {
                        ip_proto::UDP if !p.is_fragment() => {
                            let u = udp::Packet::new_checked(p.payload()).unwrap();
                            assert!(u.verify_checksum(&src, &dst), "{}", s.name);
                        }
                        ip_proto::TCP => {
                            let t = tcp::Packet::new_checked(p.payload()).unwrap();
                            assert!(t.verify_checksum(&src, &dst), "{}", s.name);
                        }
                        ip_proto::ICMP => {
                            let i = icmpv4::Packet::new_checked(p.payload()).unwrap();
                            assert!(i.verify_checksum(), "{}", s.name);
                        }
                        _ => assert!(p.is_fragment()),
                    }
                }
                ethertype::IPV6 => {
                    let p = ipv6::Packet::new_checked(rest).unwrap();
                    let ul = p.upper_layer().unwrap();
                    let l4 = &rest[ul.offset..40 + p.payload_len() as usize];
                    let (src, dst) = (IpAddr::V6(p.src_addr()), IpAddr::V6(p.dst_addr()));
                    if ul.fragment.is_some_and(|f| f.offset != 0) {
                        continue;
                    }
                    match ul.protocol {
                        ip_proto::UDP => {
                            assert!(udp::Packet::new_checked(l4)
                                .unwrap()
                                .verify_checksum(&src, &dst))
                        }
                        ip_proto::TCP => {
                            assert!(tcp::Packet::new_checked(l4)
                                .unwrap()
                                .verify_checksum(&src, &dst))
                        }
                        ip_proto::ICMPV6 => {
                            let i = icmpv6::Packet::new_checked(l4).unwrap();
                            assert!(i.verify_checksum(&p.src_addr(), &p.dst_addr()), "{}", s.name);
                            match i.msg_type() {
                                icmpv6::NEIGHBOR_SOLICIT => {
                                    let ns = ndp::NeighborSolicit::new_checked(l4).unwrap();
                                    assert_eq!(ndp::source_link_addr(ns.options()), Some(MAC_A));
                                }
                                icmpv6::NEIGHBOR_ADVERT => {
                                    let na = ndp::NeighborAdvert::new_checked(l4).unwrap();
                                    assert_eq!(ndp::target_link_addr(na.options()), Some(MAC_A));
                                }
                                _ => {}
                            }
                        }
                        p => panic!("{}: unexpected protocol {p}", s.name),
                    }
                }
                _ => panic!("{}", s.name),
            }
            fuzz_all(&s.bytes);
        }
    }
}
