//! Test frames: Ethernet (optionally 802.1Q) + IPv4 or IPv6 + UDP, with a payload that
//! carries the tester's stamp.
//!
//! # The stamp
//!
//! The first bytes of the UDP payload, big-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | sequence word: trial tag (top 8 bits), the flow id's high 4 bits (next 4), the flow's sequence number (low 52 bits) |
//! | 8 | 8 | TX timestamp, nanoseconds on the tester's [`crate::Clock`] |
//! | 16 | 2 | flow id, low 16 bits |
//!
//! Flow ids have 20 bits: up to [`MAX_FLOW_ID`] + 1 = 1,048,576 flows per trial.
//!
//! A frame whose payload is shorter than [`STAMP_LEN`] carries the sequence word only (a
//! 64-byte frame has 18 payload bytes over untagged IPv4: exactly a full stamp). The generator
//! keeps the UDP checksum right as it stamps.

use std::net::IpAddr;

use serde::Serialize;
use wire::{ethertype, ip_proto, ipv4, ipv6, udp, MacAddr};

/// Where the 8-byte sequence word sits in a UDP payload.
pub const SEQ_OFFSET: usize = 0;
/// Where the 8-byte TX timestamp sits in a UDP payload.
pub const TS_OFFSET: usize = 8;
/// Where the 2-byte flow id sits in a UDP payload.
pub const FLOW_OFFSET: usize = 16;
/// UDP payload bytes a full stamp takes.
pub const STAMP_LEN: usize = 18;
/// Where the trial tag sits in the sequence word (its top 8 bits).
pub const TAG_SHIFT: u32 = 56;
/// Where the flow id's high 4 bits sit in the sequence word (bits 52..56).
pub const FLOW_HI_SHIFT: u32 = 52;
/// Bits of the sequence word that hold the sequence number.
pub const SEQ_BITS: u32 = 52;
/// The sequence-number part of a sequence word.
pub const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
/// The largest flow id: 20 bits.
pub const MAX_FLOW_ID: u32 = (1 << 20) - 1;

/// The flow-id bits a sequence word carries for flow `flow` (its high 4 bits, in place).
#[inline]
pub fn flow_hi_bits(flow: u32) -> u64 {
    u64::from(flow >> 16 & 0xf) << FLOW_HI_SHIFT
}

/// The flow id of a stamp: the high bits from the sequence word, the low 16 from offset 16.
#[inline]
pub fn flow_of(word: u64, lo: u16) -> u32 {
    ((word >> FLOW_HI_SHIFT & 0xf) as u32) << 16 | u32::from(lo)
}

/// A stamp read back from a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Which trial (or warm-up) sent the frame.
    pub tag: u8,
    /// The flow's sequence number.
    pub seq: u64,
    /// When the generator sent it, in nanoseconds on the tester's clock (0: not timed).
    pub tx_ns: u64,
    /// The flow it belongs to (20 bits).
    pub flow: u32,
}

/// Frame sizes on the wire, FCS included (the buffers hold the frame without its 4-byte FCS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameSize {
    /// Every frame this size, 64..=1518 bytes.
    Fixed(u16),
    /// Simple IMIX: 64, 570 and 1518 bytes in the proportion 7:4:1, interleaved.
    Imix,
}

/// The order of the IMIX sizes in one cycle of twelve frames (7 × 64, 4 × 570, 1 × 1518).
pub const IMIX_CYCLE: [u16; 12] = [64, 570, 64, 64, 1518, 64, 570, 64, 64, 570, 64, 570];

impl FrameSize {
    /// Parses "64".."1518" or "imix".
    pub fn parse(s: &str) -> Result<FrameSize, crate::Error> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(FrameSize::Imix);
        }
        match s.parse::<u16>() {
            Ok(n) if (64..=1518).contains(&n) => Ok(FrameSize::Fixed(n)),
            _ => Err(format!("frame size {s:?} is not 64..=1518 or imix").into()),
        }
    }

    /// Mean size on the wire in bytes (FCS included).
    pub fn mean_wire_bytes(self) -> f64 {
        match self {
            FrameSize::Fixed(n) => n as f64,
            FrameSize::Imix => IMIX_CYCLE.iter().map(|&n| n as f64).sum::<f64>() / 12.0,
        }
    }
}

impl std::fmt::Display for FrameSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameSize::Fixed(n) => write!(f, "{n}"),
            FrameSize::Imix => f.write_str("imix"),
        }
    }
}

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

/// Reads the sequence word of a frame built by [`udp_frame`], if it is long enough.
pub fn seq(frame: &[u8]) -> Option<u64> {
    let at = udp_offset(frame) + udp::HEADER_LEN + SEQ_OFFSET;
    Some(u64::from_be_bytes(frame.get(at..at + 8)?.try_into().ok()?))
}

/// Offsets of the UDP header and its payload in `frame`: Ethernet, at most one 802.1Q tag,
/// IPv4 (any header length, not a fragment) or IPv6 (no extension headers), UDP. `None` for
/// any other frame.
#[inline]
pub fn udp_payload_offset(frame: &[u8]) -> Option<(usize, usize)> {
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if et == ethertype::VLAN {
        et = u16::from_be_bytes([*frame.get(16)?, *frame.get(17)?]);
        l3 = 18;
    }
    let l4 = match et {
        ethertype::IPV4 => {
            let vihl = *frame.get(l3)?;
            let frag = u16::from_be_bytes([*frame.get(l3 + 6)?, *frame.get(l3 + 7)?]);
            if vihl >> 4 != 4 || *frame.get(l3 + 9)? != ip_proto::UDP || frag & 0x3fff != 0 {
                return None;
            }
            l3 + (vihl as usize & 0x0f) * 4
        }
        ethertype::IPV6 => {
            if *frame.get(l3 + 6)? != ip_proto::UDP {
                return None;
            }
            l3 + ipv6::HEADER_LEN
        }
        _ => return None,
    };
    let payload = l4 + udp::HEADER_LEN;
    (payload <= frame.len()).then_some((l4, payload))
}

/// Reads the full stamp of a test frame; `None` if it is not UDP or too short for one.
#[inline]
pub fn read_stamp(frame: &[u8]) -> Option<Stamp> {
    let (_, at) = udp_payload_offset(frame)?;
    let s = frame.get(at..at + STAMP_LEN)?;
    let word = u64::from_be_bytes(s[0..8].try_into().ok()?);
    Some(Stamp {
        tag: (word >> TAG_SHIFT) as u8,
        seq: word & SEQ_MASK,
        tx_ns: u64::from_be_bytes(s[8..16].try_into().ok()?),
        flow: flow_of(word, u16::from_be_bytes([s[16], s[17]])),
    })
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
