//! Test frames: Ethernet (optionally 802.1Q) + IPv4 or IPv6 + UDP, with a payload that
//! carries a sequence number.

use std::net::IpAddr;

use wire::{ethertype, ip_proto, ipv4, ipv6, udp, MacAddr};

/// Where the 8-byte sequence number sits in a UDP payload.
pub const SEQ_OFFSET: usize = 0;

/// One flow's headers and the frame size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpFlow {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub vlan: Option<u16>,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub ttl: u8,
    /// Frame length without the FCS: 60 is a 64-byte frame on the wire. Raised to the smallest
    /// frame that holds the headers and an 8-byte sequence number.
    pub size: usize,
}

/// Length of the L2 + L3 + UDP headers of `f`.
pub fn header_len(f: &UdpFlow) -> usize {
    let l2 = if f.vlan.is_some() { 18 } else { 14 };
    let l3 = if f.src.is_ipv4() { ipv4::HEADER_LEN } else { ipv6::HEADER_LEN };
    l2 + l3 + udp::HEADER_LEN
}

/// Builds the frame of `f`, with sequence number 0. Source and destination must be of one
/// family.
pub fn udp_frame(f: &UdpFlow) -> Vec<u8> {
    let hdr = header_len(f);
    let size = f.size.max(hdr + 8);
    let mut b = vec![0u8; size];
    let l3 = match f.vlan {
        Some(v) => {
            b[12..14].copy_from_slice(&ethertype::VLAN.to_be_bytes());
            b[14..16].copy_from_slice(&(v & 0x0fff).to_be_bytes());
            18
        }
        None => 14,
    };
    b[0..6].copy_from_slice(f.dst_mac.as_bytes());
    b[6..12].copy_from_slice(f.src_mac.as_bytes());
    let udp_len = size - hdr + udp::HEADER_LEN;
    let (et, l4) = match (f.src, f.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let repr = ipv4::Ipv4Repr {
                src: s,
                dst: d,
                protocol: ip_proto::UDP,
                payload_len: udp_len as u16,
                ttl: f.ttl,
                tos: 0,
                ident: 0,
                dont_frag: true,
            };
            repr.emit(&mut ipv4::Packet::new_unchecked(&mut b[l3..l3 + ipv4::HEADER_LEN]));
            (ethertype::IPV4, l3 + ipv4::HEADER_LEN)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let repr = ipv6::Ipv6Repr {
                src: s,
                dst: d,
                next_header: ip_proto::UDP,
                payload_len: udp_len as u16,
                hop_limit: f.ttl,
            };
            repr.emit(&mut ipv6::Packet::new_unchecked(&mut b[l3..l3 + ipv6::HEADER_LEN]));
            (ethertype::IPV6, l3 + ipv6::HEADER_LEN)
        }
        _ => panic!("flow {f:?} mixes address families"),
    };
    b[l3 - 2..l3].copy_from_slice(&et.to_be_bytes());
    let mut u = udp::Packet::new_unchecked(&mut b[l4..]);
    u.set_src_port(f.src_port);
    u.set_dst_port(f.dst_port);
    u.set_len(udp_len as u16);
    u.fill_checksum(&f.src, &f.dst);
    b
}

/// Offset of the UDP header in a frame built by [`udp_frame`].
pub fn udp_offset(frame: &[u8]) -> usize {
    let l3 = if u16::from_be_bytes([frame[12], frame[13]]) == ethertype::VLAN { 18 } else { 14 };
    let v4 = frame[l3] >> 4 == 4;
    l3 + if v4 { ipv4::HEADER_LEN } else { ipv6::HEADER_LEN }
}

/// Reads the sequence number of a frame built by [`udp_frame`], if it is long enough.
pub fn seq(frame: &[u8]) -> Option<u64> {
    let at = udp_offset(frame) + udp::HEADER_LEN + SEQ_OFFSET;
    Some(u64::from_be_bytes(frame.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    fn flow(src: &str, dst: &str, vlan: Option<u16>, size: usize) -> UdpFlow {
        UdpFlow {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            src_port: 1234,
            dst_port: 5678,
            ttl: 64,
            size,
        }
    }

    #[test]
    fn frames_parse_with_an_independent_parser() {
        for (f, len) in [
            (flow("10.0.0.1", "10.1.2.3", None, 60), 60),
            (flow("10.0.0.1", "10.1.2.3", Some(7), 60), 60),
            (flow("10.0.0.1", "10.1.2.3", None, 1514), 1514),
            (flow("2001:db8::1", "2001:db8:1::2", None, 60), 70),
        ] {
            let b = udp_frame(&f);
            assert_eq!(b.len(), len);
            let p = SlicedPacket::from_ethernet(&b).unwrap();
            let vid = match p.vlan() {
                Some(etherparse::VlanSlice::SingleVlan(v)) => Some(v.vlan_identifier().value()),
                _ => None,
            };
            assert_eq!(vid, f.vlan);
            let Some(TransportSlice::Udp(u)) = p.transport else { panic!("not udp") };
            assert_eq!((u.source_port(), u.destination_port()), (1234, 5678));
            let ok = match p.net {
                Some(NetSlice::Ipv4(ip)) => {
                    assert_eq!(ip.header().ttl(), 64);
                    u.to_header().calc_checksum_ipv4(&ip.header().to_header(), u.payload()).unwrap()
                        == u.checksum()
                }
                Some(NetSlice::Ipv6(ip)) => {
                    u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap()
                        == u.checksum()
                }
                _ => false,
            };
            assert!(ok, "udp checksum");
            assert_eq!(seq(&b), Some(0));
        }
    }
}
