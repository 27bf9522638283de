//! Frames for the snooping tests: IGMP and MLD messages and multicast data from numbered
//! hosts, checksums filled.
#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use wire::{icmpv6, igmp, ipv4};

pub fn host(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0, 0x10 + i as u8]
}

pub fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

pub fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

pub fn mac4(g: Ipv4Addr) -> [u8; 6] {
    let o = g.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

pub fn mac6(g: Ipv6Addr) -> [u8; 6] {
    let o = g.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

pub fn eth(dst: [u8; 6], src: [u8; 6], et: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend(src);
    f.extend(et.to_be_bytes());
    f.extend(payload);
    while f.len() < 60 {
        f.push(0);
    }
    f
}

/// An IPv4 packet (with a Router Alert option when `alert`), checksum filled.
pub fn ip4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, alert: bool, payload: &[u8]) -> Vec<u8> {
    let hl = if alert { 24 } else { 20 };
    let mut p = vec![0x40 | (hl / 4) as u8, 0];
    p.extend(((hl + payload.len()) as u16).to_be_bytes());
    p.extend([0, 0, 0, 0, 1, proto, 0, 0]);
    p.extend(src.octets());
    p.extend(dst.octets());
    if alert {
        p.extend([0x94, 4, 0, 0]);
    }
    p.extend(payload);
    ipv4::Packet::new_unchecked(&mut p[..]).fill_checksum();
    p
}

pub fn igmp_msg(t: u8, group: Ipv4Addr) -> Vec<u8> {
    let mut m = vec![t, 0, 0, 0];
    m.extend(group.octets());
    igmp::Packet::new_unchecked(&mut m[..]).fill_checksum();
    m
}

/// An IGMP message from host `h`, to `dst`.
pub fn igmp_frame(h: usize, dst: Ipv4Addr, msg: &[u8]) -> Vec<u8> {
    let src = Ipv4Addr::new(10, 0, 0, h as u8 + 1);
    eth(mac4(dst), host(h), 0x0800, &ip4(src, dst, 2, true, msg))
}

/// IGMPv3 report of (record type, group) records.
pub fn igmp_v3(records: &[(u8, Ipv4Addr)]) -> Vec<u8> {
    let mut m = vec![0x22, 0, 0, 0, 0, 0];
    m.extend((records.len() as u16).to_be_bytes());
    for (t, g) in records {
        m.extend([*t, 0, 0, 0]);
        m.extend(g.octets());
    }
    igmp::Packet::new_unchecked(&mut m[..]).fill_checksum();
    m
}

/// UDP-ish multicast data from host `h` to `dst` (the payload is only a tag).
pub fn data4(h: usize, dst: Ipv4Addr, tag: u8) -> Vec<u8> {
    let src = Ipv4Addr::new(10, 0, 0, h as u8 + 1);
    eth(mac4(dst), host(h), 0x0800, &ip4(src, dst, 17, false, &[tag; 12]))
}

/// An IPv6 packet from host `h` with a Hop-by-Hop Router Alert header before `icmp` (when
/// `hbh`), the ICMPv6 checksum filled.
pub fn ip6_frame(h: usize, dst: Ipv6Addr, next: u8, hbh: bool, body: &[u8]) -> Vec<u8> {
    let src = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, h as u16 + 1);
    let mut body = body.to_vec();
    if next == 58 {
        icmpv6::Packet::new_unchecked(&mut body[..]).fill_checksum(&src, &dst);
    }
    let mut payload = Vec::new();
    if hbh {
        payload.extend([next, 0, 5, 2, 0, 0, 1, 0]);
    }
    payload.extend(body);
    let mut p = vec![0x60, 0, 0, 0];
    p.extend((payload.len() as u16).to_be_bytes());
    p.extend([if hbh { 0 } else { next }, 1]);
    p.extend(src.octets());
    p.extend(dst.octets());
    p.extend(payload);
    eth(mac6(dst), host(h), 0x86dd, &p)
}

pub fn mld_v1(t: u8, g: Ipv6Addr) -> Vec<u8> {
    let mut m = vec![t, 0, 0, 0, 0, 0, 0, 0];
    m.extend(g.octets());
    m
}

pub fn mld_v2(records: &[(u8, Ipv6Addr)]) -> Vec<u8> {
    let mut m = vec![143, 0, 0, 0, 0, 0];
    m.extend((records.len() as u16).to_be_bytes());
    for (t, g) in records {
        m.extend([*t, 0, 0, 0]);
        m.extend(g.octets());
    }
    m
}
