//! UDP datagrams (RFC 768).
//!
//! [`Packet::check_len`] requires the 8-byte header and a length field between 8 and the
//! buffer's length; the datagram is the length field's bytes (the buffer may hold more). The
//! checksum covers a pseudo-header of either IP family: pass the addresses of the enclosing
//! IP header. After `check_len` succeeds no accessor panics; [`UdpRepr::emit`] never panics
//! on a buffer of at least [`UdpRepr::buffer_len`] bytes.

use std::net::IpAddr;

use crate::bytes::{get_u16, set_u16};
use crate::{checksum, ip_proto, Error, Result};

mod field {
    use core::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// The length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A view of a UDP datagram in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Packet::HEADER_LEN` needs no type annotation.
impl Packet<&'static [u8]> {
    /// The length of the UDP header: 8.
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

    /// Fails unless the buffer holds the header and `8 <= length <= buffer length`.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error);
        }
        let field_len = self.len() as usize;
        if field_len < HEADER_LEN || field_len > len {
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

    /// The source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::SRC_PORT])
    }

    /// The destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::DST_PORT])
    }

    /// The length field: header and payload, in bytes.
    #[inline]
    #[allow(clippy::len_without_is_empty)] // A datagram is never empty: it has a header.
    pub fn len(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// The checksum field (0 over IPv4 means "not computed").
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The payload: bytes 8 up to the length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }

    /// The datagram: the length field's bytes.
    #[inline]
    fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.len() as usize]
    }

    /// True if the checksum is right for these IP addresses. Over IPv4 a zero checksum means
    /// none was sent and verifies; over IPv6 it is invalid (RFC 8200 §8.1). Addresses of
    /// different families never verify.
    #[inline]
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        let datagram = self.datagram();
        let ph = checksum::pseudo_header(src, dst, ip_proto::UDP, datagram.len() as u32);
        match ph {
            None => false,
            Some(_) if self.checksum() == 0 => src.is_ipv4(),
            Some(ph) => checksum::combine(&[ph, checksum::data(datagram)]) == 0xffff,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::SRC_PORT], value)
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::DST_PORT], value)
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::LENGTH], value)
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::CHECKSUM], value)
    }

    /// The payload (bytes 8 up to the length field), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Computes the checksum over the pseudo-header and the datagram and stores it; a
    /// computed 0 is sent as 0xffff (0 would mean "none"). With addresses of different
    /// families it stores 0.
    #[inline]
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        self.set_checksum(0);
        let datagram = self.datagram();
        let ck = match checksum::pseudo_header(src, dst, ip_proto::UDP, datagram.len() as u32) {
            None => 0,
            Some(ph) => match !checksum::combine(&[ph, checksum::data(datagram)]) {
                0 => 0xffff,
                ck => ck,
            },
        };
        self.set_checksum(ck)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Length of the payload in bytes (the length field less the header's).
    pub payload_len: u16,
}

impl UdpRepr {
    /// Reads a header (lengths only: verify the checksum with the view, which needs the IP
    /// addresses).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<UdpRepr> {
        packet.check_len()?;
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: packet.len() - HEADER_LEN as u16,
        })
    }

    /// The header's length: 8.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with checksum 0; write the payload, then call
    /// [`Packet::fill_checksum`]. `payload_len` must be at most 65527: the length field wraps
    /// around past that.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(self.payload_len.wrapping_add(HEADER_LEN as u16));
        packet.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;
    use crate::{ipv4, ipv6};
    use std::net::{Ipv4Addr, Ipv6Addr};

    const SRC4: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1));
    const DST4: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2));
    const SRC6: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    const DST6: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));

    // DNS query-ish: 49152 -> 53, 5 bytes of payload, then 3 bytes of trailing padding.
    static PACKET_V4_BYTES: [u8; 16] = [
        0xc0, 0x00, 0x00, 0x35, 0x00, 0x0d, 0x78, 0x78, //
        0x68, 0x65, 0x6c, 0x6c, 0x6f, //
        0x00, 0x00, 0x00,
    ];

    static PACKET_V6_BYTES: [u8; 13] = [
        0xc0, 0x00, 0x00, 0x35, 0x00, 0x0d, 0xa0, 0x57, //
        0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];

    fn repr() -> UdpRepr {
        UdpRepr { src_port: 49152, dst_port: 53, payload_len: 5 }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET_V4_BYTES[..]).unwrap();
        assert_eq!(p.src_port(), 49152);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 13);
        assert_eq!(p.checksum(), 0x7878);
        assert_eq!(p.payload(), b"hello");
        assert!(p.verify_checksum(&SRC4, &DST4));
        assert!(!p.verify_checksum(&SRC4, &SRC4));
        assert!(!p.verify_checksum(&SRC4, &DST6));
        assert_eq!(UdpRepr::parse(&p), Ok(repr()));

        let p = Packet::new_checked(&PACKET_V6_BYTES[..]).unwrap();
        assert_eq!(p.checksum(), 0xa057);
        assert!(p.verify_checksum(&SRC6, &DST6));
        assert!(!p.verify_checksum(&DST6, &DST6));
        assert_eq!(UdpRepr::parse(&p), Ok(repr()));
        assert_eq!(Packet::HEADER_LEN, 8);
    }

    #[test]
    fn construct() {
        for (src, dst, bytes) in
            [(SRC4, DST4, &PACKET_V4_BYTES[..]), (SRC6, DST6, &PACKET_V6_BYTES[..])]
        {
            let mut buf = vec![0u8; bytes.len()];
            let r = repr();
            assert_eq!(r.buffer_len(), 8);
            let mut p = Packet::new_unchecked(&mut buf[..]);
            r.emit(&mut p);
            p.payload_mut().copy_from_slice(b"hello");
            p.fill_checksum(&src, &dst);
            assert_eq!(&buf[..], bytes);
        }
    }

    #[test]
    fn zero_checksum() {
        let mut b = PACKET_V4_BYTES;
        b[6..8].fill(0);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(&SRC4, &DST4));
        assert!(p.verify_checksum(&DST4, &SRC4));
        let mut b = PACKET_V6_BYTES;
        b[6..8].fill(0);
        assert!(!Packet::new_checked(&b[..]).unwrap().verify_checksum(&SRC6, &DST6));
        // Find a payload whose checksum computes to 0: it must go out as 0xffff, and verify.
        for family in [(SRC4, DST4), (SRC6, DST6)] {
            let mut found = false;
            for x in 0..=0xffffu16 {
                let mut b = [0u8; 10];
                b[4..6].copy_from_slice(&10u16.to_be_bytes());
                b[8..].copy_from_slice(&x.to_be_bytes());
                let mut p = Packet::new_unchecked(&mut b[..]);
                p.fill_checksum(&family.0, &family.1);
                if p.checksum() == 0xffff {
                    assert!(p.verify_checksum(&family.0, &family.1));
                    found = true;
                }
                assert_ne!(p.checksum(), 0);
            }
            assert!(found);
        }
        let mut b = PACKET_V4_BYTES;
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum(&SRC4, &DST6);
        assert_eq!(p.checksum(), 0);
    }

    #[test]
    fn length_checks() {
        for len in 0..13 {
            assert!(Packet::new_checked(&PACKET_V4_BYTES[..len]).is_err());
        }
        for field in [0u16, 1, 7, 17, 0xffff] {
            let mut b = PACKET_V4_BYTES;
            b[4..6].copy_from_slice(&field.to_be_bytes());
            assert!(Packet::new_checked(&b[..]).is_err(), "{field}");
        }
        let mut b = PACKET_V4_BYTES;
        b[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert!(Packet::new_checked(&b[..]).unwrap().payload().is_empty());
        b[4..6].copy_from_slice(&16u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&b[..]).unwrap().payload().len(), 8);
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = Rng(61);
        for i in 0..2000 {
            let payload = rng.bytes_below(200);
            let (sp, dp) = (rng.next_u64() as u16, rng.next_u64() as u16);
            let mut out = Vec::new();
            let (src, dst, udp_at) = if i % 2 == 0 {
                let (s, d) =
                    ((rng.next_u64() as u32).to_be_bytes(), (rng.next_u64() as u32).to_be_bytes());
                etherparse::PacketBuilder::ipv4(s, d, 64)
                    .udp(sp, dp)
                    .write(&mut out, &payload)
                    .unwrap();
                let ip = ipv4::Packet::new_checked(&out[..]).unwrap();
                (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()), ip.header_len())
            } else {
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                rng.fill(&mut s);
                rng.fill(&mut d);
                etherparse::PacketBuilder::ipv6(s, d, 64)
                    .udp(sp, dp)
                    .write(&mut out, &payload)
                    .unwrap();
                let ip = ipv6::Packet::new_checked(&out[..]).unwrap();
                (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()), 40)
            };
            let p = Packet::new_checked(&out[udp_at..]).unwrap();
            let theirs = etherparse::UdpHeaderSlice::from_slice(&out[udp_at..]).unwrap();
            assert_eq!(p.src_port(), theirs.source_port());
            assert_eq!(p.dst_port(), theirs.destination_port());
            assert_eq!(p.len(), theirs.length());
            assert_eq!(p.checksum(), theirs.checksum());
            assert_eq!(p.payload(), &payload[..]);
            assert!(p.verify_checksum(&src, &dst));
            let mut copy = out[udp_at..].to_vec();
            let mut q = Packet::new_unchecked(&mut copy[..]);
            q.set_checksum(0x1234);
            q.fill_checksum(&src, &dst);
            assert_eq!(q.checksum(), theirs.checksum());
        }
    }
}
