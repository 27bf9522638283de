//! IPv6 headers (RFC 8200) and the walk over their extension headers.
//!
//! [`Packet::check_len`] checks lengths only: the buffer holds the 40-byte header and the
//! payload length after it (it may hold more: Ethernet padding). The version is the caller's
//! to check; [`Ipv6Repr::parse`] checks it. After `check_len` succeeds no accessor panics;
//! [`Ipv6Repr::emit`] never panics on a buffer of at least [`Ipv6Repr::buffer_len`] bytes.
//!
//! [`Packet::upper_layer`] finds the upper-layer protocol behind the Hop-by-Hop, Routing,
//! Fragment, Destination Options and Authentication headers. It reads only within the payload,
//! looks at most [`MAX_EXT_HEADERS`] headers deep, and never panics, checked or not.

use std::net::Ipv6Addr;

use crate::bytes::{get_u16, get_u32, set_u16, set_u32};
use crate::{ip_proto, Error, Result};

mod field {
    use core::ops::Range;

    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// The length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// How many extension headers [`Packet::upper_layer`] walks before giving up.
pub const MAX_EXT_HEADERS: usize = 16;

/// A view of an IPv6 packet in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// Fragment header values (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// Offset of this fragment's data in the original packet, in bytes.
    pub offset: u16,
    /// More fragments follow.
    pub more: bool,
    /// Identification shared by the fragments of one packet.
    pub ident: u32,
}

/// Where the upper-layer header is, as found by [`Packet::upper_layer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpperLayer {
    /// The first next-header value that is not a walked extension header (TCP, UDP, ICMPv6,
    /// ESP, No Next Header, or anything unknown).
    pub protocol: u8,
    /// Offset of that header from the start of the IPv6 header.
    pub offset: usize,
    /// The Fragment header, if one was passed. When its offset is non-zero the walk stops
    /// right after it: what follows is the middle of the original packet, not a header.
    pub fragment: Option<Fragment>,
}

// On one concrete type so that `Packet::HEADER_LEN` needs no type annotation.
impl Packet<&'static [u8]> {
    /// The length of the fixed IPv6 header: 40.
    pub const HEADER_LEN: usize = HEADER_LEN;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails unless the buffer holds the header and the payload length; never looks at the
    /// version.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + self.payload_len() as usize {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (6 for IPv6).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The traffic class (DSCP and ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (get_u32(&self.buffer.as_ref()[field::VER_TC_FLOW]) >> 20) as u8
    }

    /// The flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        get_u32(&self.buffer.as_ref()[field::VER_TC_FLOW]) & 0x000f_ffff
    }

    /// The payload length in bytes (extension headers included).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// The type of the header after this one (see [`crate::ip_proto`]).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The 40-byte fixed header.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// The payload: the payload length's bytes after the fixed header (padding excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len() as usize]
    }

    /// Walks the extension headers to the upper-layer protocol (see [`UpperLayer`]).
    ///
    /// Fails if a header runs past the payload, if Hop-by-Hop is anywhere but first or a
    /// second Fragment header appears (RFC 8200 §4.1), if an AH's length is 0 (too short for
    /// its own fields), or if more than [`MAX_EXT_HEADERS`] headers precede the upper layer.
    pub fn upper_layer(&self) -> Result<UpperLayer> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error);
        }
        // Bounded by the buffer too, so that an unchecked packet cannot make this panic.
        let data = &data[..(HEADER_LEN + self.payload_len() as usize).min(data.len())];
        let mut protocol = self.next_header();
        let mut offset = HEADER_LEN;
        let mut fragment: Option<Fragment> = None;
        let mut walked = 0;
        loop {
            // Where a header has a length, it is its second byte.
            let len_byte = || data.get(offset + 1).map(|&b| b as usize).ok_or(Error);
            let len = match protocol {
                ip_proto::HOPOPTS if walked > 0 => return Err(Error),
                ip_proto::FRAGMENT if fragment.is_some() => return Err(Error),
                ip_proto::HOPOPTS | ip_proto::ROUTING | ip_proto::DSTOPTS => (len_byte()? + 1) * 8,
                // Its second byte is reserved, not a length: the header is always 8 bytes.
                ip_proto::FRAGMENT => 8,
                // RFC 4302: the length is in 4-octet units, minus 2; a header too short for
                // its SPI and sequence number (length byte 0) is malformed.
                ip_proto::AH => match len_byte()? {
                    0 => return Err(Error),
                    n => (n + 2) * 4,
                },
                _ => return Ok(UpperLayer { protocol, offset, fragment }),
            };
            if walked == MAX_EXT_HEADERS {
                return Err(Error);
            }
            walked += 1;
            let header = data.get(offset..offset + len).ok_or(Error)?;
            let was = protocol;
            protocol = header[0];
            offset += len;
            if was == ip_proto::FRAGMENT {
                let off_flags = get_u16(&header[2..4]);
                let frag = Fragment {
                    offset: off_flags & 0xfff8,
                    more: off_flags & 1 != 0,
                    ident: get_u32(&header[4..8]),
                };
                fragment = Some(frag);
                if frag.offset != 0 {
                    return Ok(UpperLayer { protocol, offset, fragment });
                }
            }
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version (low 4 bits of `value`).
    #[inline]
    pub fn set_version(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Sets the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, value: u8) {
        let w = get_u32(&self.buffer.as_ref()[field::VER_TC_FLOW]);
        let w = (w & 0xf00f_ffff) | ((value as u32) << 20);
        set_u32(&mut self.buffer.as_mut()[field::VER_TC_FLOW], w)
    }

    /// Sets the flow label (low 20 bits of `value`).
    #[inline]
    pub fn set_flow_label(&mut self, value: u32) {
        let w = get_u32(&self.buffer.as_ref()[field::VER_TC_FLOW]);
        let w = (w & 0xfff0_0000) | (value & 0x000f_ffff);
        set_u32(&mut self.buffer.as_mut()[field::VER_TC_FLOW], w)
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::LENGTH], value)
    }

    /// Sets the next-header type.
    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = value
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value
    }

    /// Decrements the hop limit by one; a hop limit of 0 is left alone (callers drop packets
    /// whose hop limit is 0 or 1 before forwarding them). IPv6 has no header checksum to patch.
    #[inline]
    pub fn decrement_hop_limit(&mut self) {
        let b = &mut self.buffer.as_mut()[field::HOP_LIMIT];
        *b = b.saturating_sub(1);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets())
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets())
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + self.payload_len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of a fixed IPv6 header (traffic class and flow label are emitted as zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Type of the header after this one.
    pub next_header: u8,
    /// Length of the payload in bytes (extension headers included).
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Reads a fixed header: lengths and version 6 must be right.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Ipv6Repr> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error);
        }
        Ok(Ipv6Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: packet.payload_len(),
            hop_limit: packet.hop_limit(),
        })
    }

    /// The emitted header's length: 40.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 40-byte fixed header (jumbograms are not supported).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        set_u32(&mut packet.buffer.as_mut()[field::VER_TC_FLOW], 0x6000_0000);
        packet.set_payload_len(self.payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    // TC 0xab, flow 0x12345, 12-byte payload (UDP, 4 bytes of data), hop limit 64, plus one
    // byte of padding after the datagram.
    static PACKET_BYTES: [u8; 53] = [
        0x6a, 0xb1, 0x23, 0x45, 0x00, 0x0c, 0x11, 0x40, //
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, //
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, //
        0x04, 0xd2, 0x16, 0x2e, 0x00, 0x0c, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef, //
        0xff,
    ];

    // HBH + Routing + Fragment + DstOpts + AH + UDP.
    static CHAIN_BYTES: [u8; 124] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x54, 0x00, 0x40, // payload 84, next HBH
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, //
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, //
        // 40: Hop-by-Hop, 8 bytes: Router Alert (MLD) + PadN(0)
        0x2b, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, //
        // 48: Routing, 24 bytes: segment routing, one segment
        0x2c, 0x02, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x02, //
        // 72: Fragment, offset 0, more fragments, ident 0xdeadbeef
        0x3c, 0x00, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, //
        // 80: Destination Options, 8 bytes: PadN(4)
        0x33, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, //
        // 88: AH, length 4 -> 24 bytes: SPI 0x100, seq 1, 12-byte ICV
        0x11, 0x04, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, //
        // 112: UDP
        0x04, 0xd2, 0x16, 0x2e, 0x00, 0x0c, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef,
    ];

    fn repr() -> Ipv6Repr {
        Ipv6Repr { src: SRC, dst: DST, next_header: ip_proto::UDP, payload_len: 12, hop_limit: 64 }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xab);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 12);
        assert_eq!(p.next_header(), ip_proto::UDP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), SRC);
        assert_eq!(p.dst_addr(), DST);
        assert_eq!(p.header(), &PACKET_BYTES[..40]);
        assert_eq!(p.payload(), &PACKET_BYTES[40..52]);
        assert_eq!(
            p.upper_layer(),
            Ok(UpperLayer { protocol: ip_proto::UDP, offset: 40, fragment: None })
        );
        assert_eq!(Ipv6Repr::parse(&p), Ok(repr()));
        assert_eq!(Packet::HEADER_LEN, 40);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 53];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version(6);
        p.set_traffic_class(0xab);
        p.set_flow_label(0x12345);
        p.set_payload_len(12);
        p.set_next_header(ip_proto::UDP);
        p.set_hop_limit(64);
        p.set_src_addr(SRC);
        p.set_dst_addr(DST);
        p.payload_mut().copy_from_slice(&PACKET_BYTES[40..52]);
        buf[52] = 0xff;
        assert_eq!(buf, PACKET_BYTES);

        let mut buf = PACKET_BYTES;
        buf[..40].fill(0);
        let r = repr();
        assert_eq!(r.buffer_len(), 40);
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_traffic_class(0xab);
        p.set_flow_label(0x12345);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn extension_header_chain() {
        let p = Packet::new_checked(&CHAIN_BYTES[..]).unwrap();
        assert_eq!(p.next_header(), ip_proto::HOPOPTS);
        assert_eq!(p.payload_len(), 84);
        let ul = p.upper_layer().unwrap();
        assert_eq!(
            ul,
            UpperLayer {
                protocol: ip_proto::UDP,
                offset: 112,
                fragment: Some(Fragment { offset: 0, more: true, ident: 0xdead_beef }),
            }
        );
        assert_eq!(&CHAIN_BYTES[ul.offset..ul.offset + 4], &[0x04, 0xd2, 0x16, 0x2e]);
        // Cut the payload short at every length: the walk fails until the UDP header starts.
        for cut in 0..84u16 {
            let mut b = CHAIN_BYTES;
            b[4..6].copy_from_slice(&cut.to_be_bytes());
            let p = Packet::new_checked(&b[..40 + cut as usize]).unwrap();
            assert_eq!(p.upper_layer().is_ok(), cut >= 72, "cut {cut}");
        }
    }

    #[test]
    fn non_first_fragment_stops_the_walk() {
        let mut b = CHAIN_BYTES;
        b[74..76].copy_from_slice(&0x0b89u16.to_be_bytes()); // offset 0xb88 bytes, more
        let ul = Packet::new_checked(&b[..]).unwrap().upper_layer().unwrap();
        assert_eq!(ul.protocol, ip_proto::DSTOPTS);
        assert_eq!(ul.offset, 80);
        assert_eq!(ul.fragment, Some(Fragment { offset: 0xb88, more: true, ident: 0xdead_beef }));
    }

    #[test]
    fn walk_stops_at_anything_else() {
        for nh in [ip_proto::ESP, ip_proto::NONE, ip_proto::ICMPV6, ip_proto::TCP, 253, 255] {
            let mut b = CHAIN_BYTES;
            b[80] = nh; // DstOpts' next header
            let ul = Packet::new_checked(&b[..]).unwrap().upper_layer().unwrap();
            assert_eq!((ul.protocol, ul.offset), (nh, 88));
        }
    }

    #[test]
    fn walk_errors() {
        let at = |b: &[u8]| Packet::new_unchecked(b).upper_layer();
        // HBH not first.
        let mut b = CHAIN_BYTES;
        b[40] = ip_proto::HOPOPTS;
        assert_eq!(at(&b), Err(Error));
        // Two Fragment headers.
        let mut b = CHAIN_BYTES;
        b[80] = ip_proto::FRAGMENT;
        assert_eq!(at(&b), Err(Error));
        // AH with length 0.
        let mut b = CHAIN_BYTES;
        b[89] = 0;
        assert_eq!(at(&b), Err(Error));
        // Routing header length 255 runs past the payload.
        let mut b = CHAIN_BYTES;
        b[49] = 255;
        assert_eq!(at(&b), Err(Error));
        // Shorter than the fixed header, and a payload length past the buffer: no panic.
        assert_eq!(at(&CHAIN_BYTES[..39]), Err(Error));
        assert_eq!(at(&CHAIN_BYTES[..100]), Err(Error));
        // A loop of Destination Options headers is cut off after MAX_EXT_HEADERS.
        let mut b = vec![0u8; 40 + 8 * 40];
        b[0] = 0x60;
        b[4..6].copy_from_slice(&(8u16 * 40).to_be_bytes());
        b[6] = ip_proto::DSTOPTS;
        for i in 0..40 {
            b[40 + 8 * i] = ip_proto::DSTOPTS;
        }
        assert_eq!(at(&b), Err(Error));
        // Exactly MAX_EXT_HEADERS is fine.
        b[40 + 8 * (MAX_EXT_HEADERS - 1)] = ip_proto::TCP;
        assert_eq!(
            at(&b),
            Ok(UpperLayer {
                protocol: ip_proto::TCP,
                offset: 40 + 8 * MAX_EXT_HEADERS,
                fragment: None
            })
        );
        b[40 + 8 * (MAX_EXT_HEADERS - 1)] = ip_proto::DSTOPTS;
        b[40 + 8 * MAX_EXT_HEADERS] = ip_proto::TCP;
        assert_eq!(at(&b), Err(Error));
    }

    #[test]
    fn check_len_is_lengths_only() {
        for len in 0..52 {
            assert!(Packet::new_checked(&PACKET_BYTES[..len]).is_err(), "{len}");
        }
        let mut b = PACKET_BYTES;
        b[0] = 0x45;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p), Err(Error));
        b[4..6].copy_from_slice(&0xffffu16.to_be_bytes());
        assert!(Packet::new_checked(&b[..]).is_err());
        b[4..6].copy_from_slice(&0u16.to_be_bytes());
        assert!(Packet::new_checked(&b[..40]).unwrap().payload().is_empty());
    }

    #[test]
    fn hop_limit() {
        let mut b = PACKET_BYTES;
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.decrement_hop_limit();
        assert_eq!(p.hop_limit(), 63);
        p.set_hop_limit(0);
        p.decrement_hop_limit();
        assert_eq!(p.hop_limit(), 0);
    }

    #[test]
    fn etherparse_agrees_on_fixed_header() {
        let mut rng = Rng(31);
        for _ in 0..1000 {
            let n = 40 + rng.below(64) as usize;
            let mut b = rng.bytes(n);
            b[0] = 0x60 | (b[0] & 0x0f);
            let plen = (b.len() - 40 - rng.below(3).min(b.len() as u64 - 40) as usize) as u16;
            b[4..6].copy_from_slice(&plen.to_be_bytes());
            let p = Packet::new_checked(&b[..]).unwrap();
            let h = etherparse::Ipv6HeaderSlice::from_slice(&b).unwrap();
            assert_eq!(p.version(), h.version());
            assert_eq!(p.traffic_class(), h.traffic_class());
            assert_eq!(p.flow_label(), h.flow_label().value());
            assert_eq!(p.payload_len(), h.payload_length());
            assert_eq!(p.next_header(), h.next_header().0);
            assert_eq!(p.hop_limit(), h.hop_limit());
            assert_eq!(p.src_addr(), h.source_addr());
            assert_eq!(p.dst_addr(), h.destination_addr());
            let r = Ipv6Repr::parse(&p).unwrap();
            assert_eq!(
                (r.src, r.dst, r.next_header, r.payload_len, r.hop_limit),
                (h.source_addr(), h.destination_addr(), h.next_header().0, plen, h.hop_limit())
            );
        }
    }

    /// Builds a random chain of extension headers that both walkers must agree on: HBH only
    /// first, at most one Fragment header and only with offset 0, AH lengths >= 1.
    fn random_chain(rng: &mut Rng) -> (Vec<u8>, u8) {
        let kinds = [ip_proto::ROUTING, ip_proto::DSTOPTS, ip_proto::FRAGMENT, ip_proto::AH];
        let n = rng.below(MAX_EXT_HEADERS as u64 + 1) as usize;
        let mut types = Vec::new();
        let mut frag = false;
        for i in 0..n {
            let t = if i == 0 && rng.below(2) == 0 {
                ip_proto::HOPOPTS
            } else {
                kinds[rng.below(4) as usize]
            };
            if t == ip_proto::FRAGMENT {
                if frag {
                    continue;
                }
                frag = true;
            }
            types.push(t);
        }
        let upper = [ip_proto::UDP, ip_proto::TCP, ip_proto::ICMPV6, ip_proto::NONE, 200]
            [rng.below(5) as usize];
        let mut out = Vec::new();
        for (i, &t) in types.iter().enumerate() {
            let next = types.get(i + 1).copied().unwrap_or(upper);
            let len = match t {
                ip_proto::FRAGMENT => 8,
                ip_proto::AH => {
                    let units = 1 + rng.below(6) as u8;
                    out.extend_from_slice(&[next, units]);
                    out.extend(rng.bytes((units as usize + 2) * 4 - 2));
                    continue;
                }
                _ => (rng.below(4) as usize + 1) * 8,
            };
            let mut h = rng.bytes(len);
            h[0] = next;
            if t == ip_proto::FRAGMENT {
                h[2] = 0;
                h[3] &= 0x07; // offset 0, keep M and the reserved bits
            } else {
                h[1] = (len / 8 - 1) as u8;
            }
            out.extend(h);
        }
        (out, types.first().copied().unwrap_or(upper))
    }

    #[test]
    fn etherparse_agrees_on_extension_chains() {
        let mut rng = Rng(32);
        for round in 0..5000 {
            let (chain, first) = random_chain(&mut rng);
            let mut b = vec![0u8; 40];
            b[0] = 0x60;
            b[6] = first;
            b.extend_from_slice(&chain);
            b.extend(rng.bytes_below(16));
            // Sometimes cut the payload short, to compare the error paths too.
            let mut plen = b.len() - 40;
            if round % 3 == 0 {
                plen = rng.below(plen as u64 + 1) as usize;
            }
            b[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
            let p = Packet::new_checked(&b[..]).unwrap();
            let ours = p.upper_layer();
            let theirs = etherparse::Ipv6ExtensionsSlice::from_slice(
                etherparse::IpNumber(first),
                p.payload(),
            );
            match (ours, theirs) {
                (Ok(ul), Ok((exts, next, _))) => {
                    assert_eq!(ul.protocol, next.0);
                    assert_eq!(ul.offset, 40 + exts.slice().len());
                    assert_eq!(ul.fragment.is_some(), chain_has_fragment(&exts));
                }
                (Err(_), Err(_)) => {}
                (o, t) => panic!("round {round}: ours {o:?} theirs {t:?}"),
            }
        }
    }

    fn chain_has_fragment(exts: &etherparse::Ipv6ExtensionsSlice<'_>) -> bool {
        exts.clone().into_iter().any(|e| matches!(e, etherparse::Ipv6ExtensionSlice::Fragment(_)))
    }
}
