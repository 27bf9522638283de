//! The flow hash that spreads one replicated VR's traffic over its replicas (RSS's job).
//!
//! Contract:
//! - A pure function of the frame's headers: every packet of a flow gets the same hash, so a
//!   flow always reaches the same replica and is never reordered by the spreading.
//! - Symmetric: both directions of a flow hash alike. Addresses and ports are put in order
//!   (the smaller (address, port) first) before they are mixed, so swapping source and
//!   destination changes nothing. Stateless forwarding would not need it; per-flow state
//!   (a firewall, NAT) on a replica does.
//! - IPv4 and IPv6: TCP, UDP, UDP-Lite and SCTP hash on the 5-tuple (addresses, protocol,
//!   ports); other protocols on addresses and protocol. Fragments (IPv4 MF or an offset, an
//!   IPv6 fragment header) hash on the addresses alone: only the first fragment carries the
//!   ports, and every fragment of a datagram must reach the same replica.
//! - Anything else (ARP, a runt, a truncated header) hashes to 0, as NICs send what RSS
//!   cannot parse to queue 0. Every offset read is checked against the frame's length first.
//! - Keyed: mixed with the process's secret key ([`crate::seed`]), so nobody outside can
//!   compute which replica, lane or multipath next hop a flow takes and aim all of theirs at
//!   one. The mapping is the same everywhere in one process (the spreading port and the
//!   replicas agree) and differs between processes; [`flow_hash_keyed`] with a fixed key gives
//!   the fixed values the tests pin.

use wire::{ip_proto, ipv4, ipv6};

use crate::l2;

/// IPv6 extension headers the hash walks through to find the transport header.
const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const DEST_OPTS: u8 = 60;
/// Extension headers walked at most; a chain longer than this hashes on the addresses.
const MAX_EXT: usize = 8;
const SCTP: u8 = 132;
const UDPLITE: u8 = 136;

/// Protocols whose first four transport bytes are the source and destination ports.
#[inline]
fn has_ports(proto: u8) -> bool {
    matches!(proto, ip_proto::TCP | ip_proto::UDP | SCTP | UDPLITE)
}

use crate::seed::mix;

/// Mixes an ordered endpoint pair. `a` and `b` are addresses (IPv4 in the low 32 bits),
/// `ports` the two ports (0 where none are hashed), `k` the key.
#[inline]
fn pair(k: [u64; 2], a: u128, pa: u16, b: u128, pb: u16, proto: u8) -> u64 {
    let ((lo, plo), (hi, phi)) =
        if (a, pa) <= (b, pb) { ((a, pa), (b, pb)) } else { ((b, pb), (a, pa)) };
    let mut h = mix(k[0], lo as u64);
    h = mix(h, (lo >> 64) as u64);
    h = mix(h, hi as u64);
    h = mix(h, (hi >> 64) as u64);
    mix(h ^ k[1], (u64::from(plo) << 32) | (u64::from(phi) << 16) | u64::from(proto))
}

/// The two ports at `at`, if the frame holds them.
#[inline]
fn ports_at(f: &[u8], at: usize) -> Option<(u16, u16)> {
    let b = f.get(at..at + 4)?;
    Some((u16::from_be_bytes([b[0], b[1]]), u16::from_be_bytes([b[2], b[3]])))
}

/// The flow hash of an Ethernet frame (see the module doc), under the process's key.
#[inline]
pub fn flow_hash(f: &[u8]) -> u64 {
    flow_hash_keyed(f, crate::seed::key())
}

/// The flow hash of an Ethernet frame under key `k`.
#[inline]
pub fn flow_hash_keyed(f: &[u8], k: [u64; 2]) -> u64 {
    let Some(h) = l2::parse(f) else { return 0 };
    match h.ethertype {
        wire::ethertype::IPV4 => keyed4(f, h.l3, k),
        wire::ethertype::IPV6 => keyed6(f, h.l3, k),
        _ => 0,
    }
}

/// The flow hash of the IPv4 packet at `l3` of frame `f`, under the process's key.
#[inline]
pub(crate) fn hash4(f: &[u8], l3: usize) -> u64 {
    keyed4(f, l3, crate::seed::key())
}

/// The flow hash of the IPv6 packet at `l3` of frame `f`, under the process's key.
#[inline]
pub(crate) fn hash6(f: &[u8], l3: usize) -> u64 {
    keyed6(f, l3, crate::seed::key())
}

/// The flow hash of the IPv4 packet at `l3` of frame `f` under key `k` (see the module doc).
#[inline]
fn keyed4(f: &[u8], l3: usize, k: [u64; 2]) -> u64 {
    let Some(ip) = f.get(l3..l3 + ipv4::HEADER_LEN).map(ipv4::Packet::new_unchecked) else {
        return 0;
    };
    if ip.version() != 4 {
        return 0;
    }
    let ihl = ip.header_len();
    let src = u128::from(u32::from(ip.src_addr()));
    let dst = u128::from(u32::from(ip.dst_addr()));
    // MF set or a nonzero offset: a fragment, hashed on its addresses alone.
    if ip.is_fragment() || ihl < ipv4::HEADER_LEN {
        return pair(k, src, 0, dst, 0, 0);
    }
    let proto = ip.protocol();
    if has_ports(proto) {
        if let Some((sp, dp)) = ports_at(f, l3 + ihl) {
            return pair(k, src, sp, dst, dp, proto);
        }
        // Truncated before its ports: as a fragment, so it goes where its flow's
        // fragments go rather than to queue 0.
        return pair(k, src, 0, dst, 0, 0);
    }
    pair(k, src, 0, dst, 0, proto)
}

/// The flow hash of the IPv6 packet at `l3` of frame `f` under key `k` (see the module doc).
#[inline]
fn keyed6(f: &[u8], l3: usize, k: [u64; 2]) -> u64 {
    let Some(ip) = f.get(l3..l3 + ipv6::HEADER_LEN).map(ipv6::Packet::new_unchecked) else {
        return 0;
    };
    if ip.version() != 6 {
        return 0;
    }
    let (src, dst) = (u128::from(ip.src_addr()), u128::from(ip.dst_addr()));
    let mut next = ip.next_header();
    let mut at = l3 + ipv6::HEADER_LEN;
    for _ in 0..MAX_EXT {
        match next {
            HOP_BY_HOP | ROUTING | DEST_OPTS => {
                let Some(e) = f.get(at..at + 2) else { return pair(k, src, 0, dst, 0, 0) };
                next = e[0];
                at += (usize::from(e[1]) + 1) * 8;
            }
            FRAGMENT => return pair(k, src, 0, dst, 0, 0),
            p if has_ports(p) => {
                return match ports_at(f, at) {
                    Some((sp, dp)) => pair(k, src, sp, dst, dp, p),
                    None => pair(k, src, 0, dst, 0, 0),
                };
            }
            p => return pair(k, src, 0, dst, 0, p),
        }
    }
    pair(k, src, 0, dst, 0, 0)
}

/// Which of `n` queues (replicas) hash `h` goes to: the high bits scaled to `n` (Lemire's
/// multiply-shift), so no division and every queue gets an equal share of hash values.
#[inline]
pub fn pick(h: u64, n: usize) -> usize {
    (((h >> 32) * n as u64) >> 32) as usize
}

/// A 60-byte UDP/IPv4 frame 10.0.0.1:`sp` → 10.0.1.1:53, only what the flow hash reads
/// filled in: a flow per source port, for the tests of what spreads flows (replicas, MSR).
#[cfg(test)]
pub(crate) fn udp4_from_port(sp: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 1, 1]);
    f[34..36].copy_from_slice(&sp.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte fixtures, written out by hand (not by the crate's emitters).
    fn eth(et: [u8; 2], l3: &[u8]) -> Vec<u8> {
        let mut v = vec![2, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 1, et[0], et[1]];
        v.extend_from_slice(l3);
        v
    }

    /// IPv4 header (no options, checksum left 0: the hash does not read it) + `l4`.
    fn v4(
        src: [u8; 4],
        dst: [u8; 4],
        proto: u8,
        frag: u16,
        id: u16,
        ttl: u8,
        l4: &[u8],
    ) -> Vec<u8> {
        let len = (20 + l4.len()) as u16;
        let mut v = vec![0x45, 0];
        v.extend_from_slice(&len.to_be_bytes());
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(&frag.to_be_bytes());
        v.extend_from_slice(&[ttl, proto, 0, 0]);
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        v.extend_from_slice(l4);
        eth([0x08, 0x00], &v)
    }

    fn v6(src: [u8; 16], dst: [u8; 16], next: u8, hop: u8, rest: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60, 0, 0, 0];
        v.extend_from_slice(&(rest.len() as u16).to_be_bytes());
        v.extend_from_slice(&[next, hop]);
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        v.extend_from_slice(rest);
        eth([0x86, 0xdd], &v)
    }

    fn udp(sp: u16, dp: u16, data: &[u8]) -> Vec<u8> {
        let mut v = sp.to_be_bytes().to_vec();
        v.extend_from_slice(&dp.to_be_bytes());
        v.extend_from_slice(&((8 + data.len()) as u16).to_be_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(data);
        v
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [192, 0, 2, 77];
    const A6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const B6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42];

    #[test]
    fn symmetric_for_ipv4_and_ipv6_tcp_udp() {
        for proto in [ip_proto::UDP, ip_proto::TCP, SCTP] {
            let ab = flow_hash(&v4(A, B, proto, 0, 1, 64, &udp(4000, 53, b"x")));
            let ba = flow_hash(&v4(B, A, proto, 0, 9, 3, &udp(53, 4000, b"yy")));
            assert_eq!(ab, ba, "proto {proto}");
            let ab6 = flow_hash(&v6(A6, B6, proto, 64, &udp(4000, 53, b"x")));
            let ba6 = flow_hash(&v6(B6, A6, proto, 1, &udp(53, 4000, b"")));
            assert_eq!(ab6, ba6, "proto {proto}");
        }
    }

    #[test]
    fn stable_over_what_changes_along_a_flow_and_pinned() {
        // TTL, IP id, length and payload change; the hash does not.
        let h = flow_hash(&v4(A, B, 17, 0, 1, 64, &udp(4000, 53, b"x")));
        assert_eq!(h, flow_hash(&v4(A, B, 17, 0, 777, 9, &udp(4000, 53, &[7; 300]))));
        // A VLAN tag does not change it either.
        let mut tagged = v4(A, B, 17, 0, 1, 64, &udp(4000, 53, b"x"));
        tagged.splice(12..12, [0x81, 0x00, 0x00, 0x64]);
        assert_eq!(flow_hash(&tagged), h);
        // Pinned under a fixed key: a change of the mapping is a deliberate, visible change.
        let h = flow_hash_keyed(&v4(A, B, 17, 0, 1, 64, &udp(4000, 53, b"x")), [0, 0]);
        assert_eq!(h, PINNED_V4, "v4 fixture hash changed: {h:#x}");
        let h6 = flow_hash_keyed(&v6(A6, B6, 6, 64, &udp(4000, 443, b"")), [0, 0]);
        assert_eq!(h6, PINNED_V6, "v6 fixture hash changed: {h6:#x}");
    }

    /// 16,000 UDP flows from A to addresses of 10.9.0.0/16, as an attacker would vary them.
    fn flows() -> impl Iterator<Item = Vec<u8>> {
        (0..16_000u32).map(|i| {
            let dst = [10, 9, (i >> 8) as u8, i as u8];
            v4(A, dst, 17, 0, 0, 64, &udp(1000 + (i % 7) as u16, 80, b""))
        })
    }

    #[test]
    fn the_key_changes_which_flows_share_a_queue() {
        // The flows one key puts on queue 0 of 8 (what an attacker who knew the key would
        // send to load one queue) spread over all 8 under another key.
        let (k1, k2) = ([1, 2], [0x9e37_79b9, 0x7f4a_7c15]);
        let aimed: Vec<Vec<u8>> =
            flows().filter(|f| pick(flow_hash_keyed(f, k1), 8) == 0).collect();
        assert!(aimed.len() > 1500, "{} of 16000 on queue 0", aimed.len());
        let mut under_k2 = [0usize; 8];
        for f in &aimed {
            under_k2[pick(flow_hash_keyed(f, k2), 8)] += 1;
        }
        let even = aimed.len() / 8;
        for (q, &c) in under_k2.iter().enumerate() {
            assert!(c > even * 7 / 10 && c < even * 13 / 10, "queue {q}: {c} of {}", aimed.len());
        }
        // The process's key is neither of them, and keyed hashes stay symmetric.
        assert_ne!(crate::seed::key(), k1);
        let f = v4(A, B, 6, 0, 1, 64, &udp(4000, 53, b""));
        let back = v4(B, A, 6, 0, 1, 64, &udp(53, 4000, b""));
        assert_eq!(flow_hash_keyed(&f, k2), flow_hash_keyed(&back, k2));
        assert_ne!(flow_hash_keyed(&f, k1), flow_hash_keyed(&f, k2));
    }

    const PINNED_V4: u64 = 0xb3cb_80a7_02fc_f47e;
    const PINNED_V6: u64 = 0x0195_ba95_bf3b_79b7;

    #[test]
    fn ports_and_addresses_and_protocol_matter() {
        let base = flow_hash(&v4(A, B, 17, 0, 1, 64, &udp(4000, 53, b"")));
        assert_ne!(base, flow_hash(&v4(A, B, 17, 0, 1, 64, &udp(4001, 53, b""))));
        assert_ne!(base, flow_hash(&v4(A, [192, 0, 2, 78], 17, 0, 1, 64, &udp(4000, 53, b""))));
        assert_ne!(base, flow_hash(&v4(A, B, 6, 0, 1, 64, &udp(4000, 53, b""))));
        // (a, p1)-(b, p2) and (a, p2)-(b, p1) are different flows.
        assert_ne!(base, flow_hash(&v4(A, B, 17, 0, 1, 64, &udp(53, 4000, b""))));
    }

    #[test]
    fn fragments_hash_on_addresses_only() {
        let (a, b) = (u128::from(u32::from_be_bytes(A)), u128::from(u32::from_be_bytes(B)));
        let addr_only = pair(crate::seed::key(), a, 0, b, 0, 0);
        // First fragment (MF, offset 0): has ports, but they are not used.
        let first = flow_hash(&v4(A, B, 17, 0x2000, 5, 64, &udp(4000, 53, &[1; 16])));
        // A later fragment (offset 3 * 8 bytes): its payload is not a UDP header.
        let later = flow_hash(&v4(A, B, 17, 3, 5, 64, &[0xee; 24]));
        // The reverse direction's fragments too.
        let back = flow_hash(&v4(B, A, 17, 0x2001, 6, 64, &[0x11; 8]));
        assert_eq!(first, addr_only);
        assert_eq!(later, addr_only);
        assert_eq!(back, addr_only);
        // IPv6: a fragment header, first and later fragments, either direction.
        let frag6 = |src, dst, off_mf: u16, body: &[u8]| {
            let mut rest = vec![17, 0];
            rest.extend_from_slice(&off_mf.to_be_bytes());
            rest.extend_from_slice(&[0, 0, 0, 9]);
            rest.extend_from_slice(body);
            flow_hash(&v6(src, dst, FRAGMENT, 64, &rest))
        };
        let a6 =
            pair(crate::seed::key(), u128::from_be_bytes(A6), 0, u128::from_be_bytes(B6), 0, 0);
        assert_eq!(frag6(A6, B6, 1, &udp(4000, 53, b"")), a6);
        assert_eq!(frag6(A6, B6, 8 << 3, &[0xaa; 8]), a6);
        assert_eq!(frag6(B6, A6, 1, &udp(53, 4000, b"")), a6);
    }

    #[test]
    fn ipv6_extension_headers_are_walked() {
        let plain = flow_hash(&v6(A6, B6, 17, 64, &udp(4000, 53, b"")));
        // A hop-by-hop header (8 bytes: next header UDP, length 0, PadN) in front.
        let mut rest = vec![17, 0, 1, 4, 0, 0, 0, 0];
        rest.extend_from_slice(&udp(4000, 53, b""));
        assert_eq!(flow_hash(&v6(A6, B6, HOP_BY_HOP, 64, &rest)), plain);
    }

    #[test]
    fn what_cannot_be_parsed_hashes_to_zero_without_panicking() {
        assert_eq!(flow_hash(&[]), 0);
        assert_eq!(flow_hash(&[0xff; 13]), 0);
        // ARP.
        assert_eq!(flow_hash(&eth([0x08, 0x06], &[0; 28])), 0);
        // Truncated IPv4 and IPv6 headers; a version that disagrees with the ethertype.
        let full = v4(A, B, 17, 0, 1, 64, &udp(1, 2, b""));
        for cut in 0..full.len() {
            let _ = flow_hash(&full[..cut]);
        }
        assert_eq!(flow_hash(&full[..14 + 19]), 0);
        let full6 = v6(A6, B6, HOP_BY_HOP, 64, &[17, 200, 0, 0, 0, 0, 0, 0]);
        for cut in 0..full6.len() {
            let _ = flow_hash(&full6[..cut]);
        }
        let mut wrong = full.clone();
        wrong[14] = 0x65;
        assert_eq!(flow_hash(&wrong), 0);
    }

    #[test]
    fn pick_spreads_evenly_and_stays_in_range() {
        // Under the process's key (random each run) and under two fixed ones.
        for key in [crate::seed::key(), [0, 0], [u64::MAX, 7]] {
            spreads_evenly(key);
        }
    }

    fn spreads_evenly(key: [u64; 2]) {
        for n in 1..=16 {
            let mut seen = vec![0u32; n];
            for f in flows() {
                let q = pick(flow_hash_keyed(&f, key), n);
                assert!(q < n);
                seen[q] += 1;
            }
            let even = 16_000 / n as u32;
            for (q, &c) in seen.iter().enumerate() {
                assert!(
                    c > even * 8 / 10 && c < even * 12 / 10,
                    "key {key:x?} n {n} queue {q}: {c}"
                );
            }
        }
    }
}
