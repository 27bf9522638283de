//! ICMP for IPv6 (RFC 4443); Neighbor Discovery bodies are in [`crate::ndp`].
//!
//! [`Packet`] views the whole ICMPv6 message (the upper-layer payload found by
//! [`crate::ipv6::Packet::upper_layer`]): its checksum covers an IPv6 pseudo-header and the
//! whole buffer, so wrap exactly the message.
//!
//! After [`Packet::check_len`] succeeds no accessor panics; [`Icmpv6Repr::emit`] never panics
//! on a buffer of at least [`Icmpv6Repr::buffer_len`] bytes.

use std::net::Ipv6Addr;

use crate::bytes::{get_u16, get_u32, set_u16, set_u32};
use crate::{checksum, ip_proto, Error, Result};

mod field {
    use core::ops::{Range, RangeFrom};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    pub const DATA: RangeFrom<usize> = 8..;
}

/// The length of the ICMPv6 header (type, code, checksum and the 4-byte rest of header).
pub const HEADER_LEN: usize = field::DATA.start;

/// Type: destination unreachable.
pub const DEST_UNREACHABLE: u8 = 1;
/// Type: packet too big (carries the MTU).
pub const PACKET_TOO_BIG: u8 = 2;
/// Type: time exceeded.
pub const TIME_EXCEEDED: u8 = 3;
/// Type: parameter problem.
pub const PARAM_PROBLEM: u8 = 4;
/// Type: echo request.
pub const ECHO_REQUEST: u8 = 128;
/// Type: echo reply.
pub const ECHO_REPLY: u8 = 129;
/// Type: router solicitation (RFC 4861).
pub const ROUTER_SOLICIT: u8 = 133;
/// Type: router advertisement (RFC 4861).
pub const ROUTER_ADVERT: u8 = 134;
/// Type: neighbor solicitation (RFC 4861).
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// Type: neighbor advertisement (RFC 4861).
pub const NEIGHBOR_ADVERT: u8 = 136;
/// Type: redirect (RFC 4861).
pub const REDIRECT: u8 = 137;

/// Destination unreachable code: no route to destination.
pub const NO_ROUTE: u8 = 0;
/// Destination unreachable code: communication administratively prohibited.
pub const ADMIN_PROHIBITED: u8 = 1;
/// Destination unreachable code: address unreachable.
pub const ADDR_UNREACHABLE: u8 = 3;
/// Destination unreachable code: port unreachable.
pub const PORT_UNREACHABLE: u8 = 4;
/// Time exceeded code: hop limit exceeded in transit.
pub const HOP_LIMIT_EXCEEDED: u8 = 0;
/// Time exceeded code: fragment reassembly time exceeded.
pub const REASSEMBLY_TIME_EXCEEDED: u8 = 1;

/// True for error messages (types below 128), to which no ICMPv6 error may be sent in reply
/// (RFC 4443 §2.4).
#[inline]
pub fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

/// A view of an ICMPv6 message in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Packet::HEADER_LEN` needs no type annotation.
impl Packet<&'static [u8]> {
    /// The length of the ICMPv6 header: 8.
    pub const HEADER_LEN: usize = HEADER_LEN;
}

/// The pseudo-header and message sum; `len` is the whole buffer, which must fit in 32 bits.
#[inline]
fn sum(src: &Ipv6Addr, dst: &Ipv6Addr, message: &[u8]) -> u16 {
    let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, message.len() as u32);
    checksum::combine(&[ph, checksum::data(message)])
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds the 8-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails unless the buffer holds at least the 8-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
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

    /// The message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The message code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The echo identifier (echo request and reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::ECHO_IDENT])
    }

    /// The echo sequence number (echo request and reply).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::ECHO_SEQNO])
    }

    /// Bytes 4..8 as one word, whatever the type makes of them.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        get_u32(&self.buffer.as_ref()[field::REST])
    }

    /// The MTU of a packet-too-big message (bytes 4..8).
    #[inline]
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// The pointer of a parameter-problem message (bytes 4..8).
    #[inline]
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    /// Everything after the 8-byte header.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// True if the checksum over the pseudo-header and the whole buffer is correct.
    #[inline]
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        sum(src, dst, self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value
    }

    /// Sets the message code.
    #[inline]
    pub fn set_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::CHECKSUM], value)
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::ECHO_IDENT], value)
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::ECHO_SEQNO], value)
    }

    /// Sets bytes 4..8 (zero them for errors that use none of it).
    #[inline]
    pub fn set_rest_of_header(&mut self, value: u32) {
        set_u32(&mut self.buffer.as_mut()[field::REST], value)
    }

    /// Sets the MTU of a packet-too-big message.
    #[inline]
    pub fn set_mtu(&mut self, value: u32) {
        self.set_rest_of_header(value)
    }

    /// Sets the pointer of a parameter-problem message.
    #[inline]
    pub fn set_pointer(&mut self, value: u32) {
        self.set_rest_of_header(value)
    }

    /// Everything after the 8-byte header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// Computes the checksum over the pseudo-header and the whole buffer and stores it.
    #[inline]
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let s = sum(src, dst, self.buffer.as_ref());
        self.set_checksum(!s)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of an ICMPv6 message, its data borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icmpv6Repr<'a> {
    /// Message type.
    pub msg_type: u8,
    /// Message code.
    pub code: u8,
    /// Bytes 4..8 (echo identifier and sequence number, MTU, pointer, NDP flags).
    pub rest_of_header: u32,
    /// Everything after the header.
    pub data: &'a [u8],
}

impl<'a> Icmpv6Repr<'a> {
    /// Reads a message whose checksum is correct for the given addresses.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &Packet<&'a T>,
    ) -> Result<Icmpv6Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error);
        }
        let buffer: &'a [u8] = packet.buffer.as_ref();
        Ok(Icmpv6Repr {
            msg_type: packet.msg_type(),
            code: packet.code(),
            rest_of_header: packet.rest_of_header(),
            data: &buffer[field::DATA],
        })
    }

    /// The message's length: 8 plus the data.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data.len()
    }

    /// Writes the header and data into the first `buffer_len()` bytes and fills the checksum
    /// over exactly those.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &mut Packet<T>,
    ) {
        let buf = &mut packet.buffer.as_mut()[..self.buffer_len()];
        let mut p = Packet::new_unchecked(buf);
        p.set_msg_type(self.msg_type);
        p.set_code(self.code);
        p.set_rest_of_header(self.rest_of_header);
        p.data_mut().copy_from_slice(self.data);
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6;
    use crate::testutil::Rng;

    const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);

    static ECHO_BYTES: [u8; 12] = [
        0x80, 0x00, 0x19, 0xb3, // echo request, checksum
        0x12, 0x34, 0xab, 0xcd, // ident, seq
        0xaa, 0x00, 0x00, 0xff, // data
    ];

    // Packet too big, MTU 1280, quoting the start of an IPv6 header.
    static TOO_BIG_BYTES: [u8; 16] = [
        0x02, 0x00, 0x84, 0xbd, 0x00, 0x00, 0x05, 0x00, //
        0x60, 0x00, 0x00, 0x00, 0x05, 0xb4, 0x11, 0x3f,
    ];

    #[test]
    fn deconstruct_echo() {
        let p = Packet::new_checked(&ECHO_BYTES[..]).unwrap();
        assert_eq!(p.msg_type(), ECHO_REQUEST);
        assert_eq!(p.code(), 0);
        assert_eq!(p.checksum(), 0x19b3);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 0xabcd);
        assert_eq!(p.rest_of_header(), 0x1234_abcd);
        assert_eq!(p.data(), &[0xaa, 0x00, 0x00, 0xff]);
        assert!(p.verify_checksum(&SRC, &DST));
        assert!(!p.verify_checksum(&DST, &DST));
        assert!(!is_error(p.msg_type()));
        let r = Icmpv6Repr::parse(&SRC, &DST, &p).unwrap();
        assert_eq!(
            r,
            Icmpv6Repr {
                msg_type: ECHO_REQUEST,
                code: 0,
                rest_of_header: 0x1234_abcd,
                data: &[0xaa, 0, 0, 0xff]
            }
        );
        assert_eq!(Icmpv6Repr::parse(&SRC, &SRC, &p), Err(Error));
        assert_eq!(Packet::HEADER_LEN, 8);
    }

    #[test]
    fn construct_echo() {
        let mut buf = [0xa5u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(ECHO_REQUEST);
        p.set_code(0);
        p.set_echo_ident(0x1234);
        p.set_echo_seq_no(0xabcd);
        p.data_mut().copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
        p.fill_checksum(&SRC, &DST);
        assert_eq!(buf, ECHO_BYTES);

        let r = Icmpv6Repr {
            msg_type: ECHO_REQUEST,
            code: 0,
            rest_of_header: 0x1234_abcd,
            data: &[0xaa, 0, 0, 0xff],
        };
        let mut buf = [0u8; 14];
        assert_eq!(r.buffer_len(), 12);
        r.emit(&SRC, &DST, &mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..12], &ECHO_BYTES);
        assert_eq!(&buf[12..], &[0, 0]);
    }

    #[test]
    fn deconstruct_too_big() {
        let p = Packet::new_checked(&TOO_BIG_BYTES[..]).unwrap();
        assert_eq!(p.msg_type(), PACKET_TOO_BIG);
        assert_eq!(p.mtu(), 1280);
        assert_eq!(p.data(), &TOO_BIG_BYTES[8..]);
        assert!(p.verify_checksum(&SRC, &DST));
        assert!(is_error(p.msg_type()));
    }

    #[test]
    fn construct_too_big() {
        let mut buf = [0xa5u8; 16];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(PACKET_TOO_BIG);
        p.set_code(0);
        p.set_mtu(1280);
        p.data_mut().copy_from_slice(&TOO_BIG_BYTES[8..]);
        p.fill_checksum(&SRC, &DST);
        p.set_pointer(p.pointer());
        assert_eq!(buf, TOO_BIG_BYTES);
    }

    #[test]
    fn types_and_lengths() {
        assert_eq!(
            [
                DEST_UNREACHABLE,
                PACKET_TOO_BIG,
                TIME_EXCEEDED,
                PARAM_PROBLEM,
                ECHO_REQUEST,
                ECHO_REPLY,
                ROUTER_SOLICIT,
                ROUTER_ADVERT,
                NEIGHBOR_SOLICIT,
                NEIGHBOR_ADVERT,
                REDIRECT
            ],
            [1, 2, 3, 4, 128, 129, 133, 134, 135, 136, 137]
        );
        assert_eq!(
            [NO_ROUTE, ADDR_UNREACHABLE, PORT_UNREACHABLE, HOP_LIMIT_EXCEEDED],
            [0, 3, 4, 0]
        );
        for t in 0..=255u8 {
            assert_eq!(is_error(t), t < 128);
        }
        for len in 0..8 {
            assert!(Packet::new_checked(&ECHO_BYTES[..len]).is_err());
        }
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = Rng(51);
        for i in 0..2000 {
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            rng.fill(&mut s);
            rng.fill(&mut d);
            let payload = rng.bytes_below(64);
            let (id, seq) = (rng.next_u64() as u16, rng.next_u64() as u16);
            let b = etherparse::PacketBuilder::ipv6(s, d, 64);
            let b = if i % 2 == 0 {
                b.icmpv6_echo_request(id, seq)
            } else {
                b.icmpv6_echo_reply(id, seq)
            };
            let mut out = Vec::new();
            b.write(&mut out, &payload).unwrap();
            let ip = ipv6::Packet::new_checked(&out[..]).unwrap();
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            let ul = ip.upper_layer().unwrap();
            assert_eq!(ul.protocol, ip_proto::ICMPV6);
            let p = Packet::new_checked(&out[ul.offset..]).unwrap();
            assert_eq!(p.msg_type(), if i % 2 == 0 { ECHO_REQUEST } else { ECHO_REPLY });
            assert_eq!((p.echo_ident(), p.echo_seq_no()), (id, seq));
            assert_eq!(p.data(), &payload[..]);
            assert!(p.verify_checksum(&src, &dst));
            let mut copy = out[ul.offset..].to_vec();
            let mut q = Packet::new_unchecked(&mut copy[..]);
            q.set_checksum(0x5555);
            q.fill_checksum(&src, &dst);
            assert_eq!(q.checksum(), p.checksum());
            // A flipped bit anywhere fails the check.
            let bit = rng.below(copy.len() as u64 * 8) as usize;
            copy[bit / 8] ^= 1 << (bit % 8);
            assert!(!Packet::new_unchecked(&copy[..]).verify_checksum(&src, &dst));
        }
    }
}
