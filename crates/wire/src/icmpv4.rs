//! ICMP for IPv4 (RFC 792, RFC 1191).
//!
//! [`Packet`] views the whole ICMP message (the IPv4 payload): its checksum covers the whole
//! buffer, so wrap exactly the message. The four bytes after the checksum mean different
//! things per type; the view offers each reading (echo identifier and sequence number, the
//! next-hop MTU of "fragmentation needed", or the raw 32-bit word).
//!
//! After [`Packet::check_len`] succeeds no accessor panics; [`Icmpv4Repr::emit`] never panics
//! on a buffer of at least [`Icmpv4Repr::buffer_len`] bytes.

use crate::bytes::{get_u16, get_u32, set_u16, set_u32};
use crate::{checksum, Error, Result};

mod field {
    use core::ops::{Range, RangeFrom};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    pub const MTU: Range<usize> = 6..8;
    pub const DATA: RangeFrom<usize> = 8..;
}

/// The length of the ICMP header (type, code, checksum and the 4-byte rest of header).
pub const HEADER_LEN: usize = field::DATA.start;

/// Type: echo reply.
pub const ECHO_REPLY: u8 = 0;
/// Type: destination unreachable.
pub const DEST_UNREACHABLE: u8 = 3;
/// Type: source quench (deprecated, RFC 6633).
pub const SOURCE_QUENCH: u8 = 4;
/// Type: redirect.
pub const REDIRECT: u8 = 5;
/// Type: echo request.
pub const ECHO_REQUEST: u8 = 8;
/// Type: time exceeded.
pub const TIME_EXCEEDED: u8 = 11;
/// Type: parameter problem.
pub const PARAM_PROBLEM: u8 = 12;

/// Destination unreachable code: network unreachable.
pub const NET_UNREACHABLE: u8 = 0;
/// Destination unreachable code: host unreachable.
pub const HOST_UNREACHABLE: u8 = 1;
/// Destination unreachable code: protocol unreachable.
pub const PROTO_UNREACHABLE: u8 = 2;
/// Destination unreachable code: port unreachable.
pub const PORT_UNREACHABLE: u8 = 3;
/// Destination unreachable code: fragmentation needed and DF set (carries the next-hop MTU).
pub const FRAG_NEEDED: u8 = 4;
/// Destination unreachable code: communication administratively prohibited (RFC 1812).
pub const ADMIN_PROHIBITED: u8 = 13;
/// Time exceeded code: TTL exceeded in transit.
pub const TTL_EXCEEDED_IN_TRANSIT: u8 = 0;
/// Time exceeded code: fragment reassembly time exceeded.
pub const REASSEMBLY_TIME_EXCEEDED: u8 = 1;

/// True for the error types (3, 4, 5, 11, 12), to which no ICMP error may be sent in reply
/// (RFC 1812 §4.3.2.7).
#[inline]
pub fn is_error(msg_type: u8) -> bool {
    matches!(msg_type, DEST_UNREACHABLE | SOURCE_QUENCH | REDIRECT | TIME_EXCEEDED | PARAM_PROBLEM)
}

/// A view of an ICMPv4 message in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Packet::HEADER_LEN` needs no type annotation.
impl Packet<&'static [u8]> {
    /// The length of the ICMP header: 8.
    pub const HEADER_LEN: usize = HEADER_LEN;
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

    /// The next-hop MTU of "fragmentation needed" (bytes 6..8, RFC 1191).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::MTU])
    }

    /// Everything after the 8-byte header (echo data, or the quoted datagram of an error).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// True if the checksum over the whole buffer is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
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

    /// Sets the next-hop MTU (bytes 6..8; bytes 4..6 are left as they are).
    #[inline]
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::MTU], value)
    }

    /// Everything after the 8-byte header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// Computes the checksum over the whole buffer and stores it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(self.buffer.as_ref());
        self.set_checksum(!sum)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of an ICMPv4 message, its data borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icmpv4Repr<'a> {
    /// Message type.
    pub msg_type: u8,
    /// Message code.
    pub code: u8,
    /// Bytes 4..8 (echo identifier and sequence number, next-hop MTU, pointer, gateway).
    pub rest_of_header: u32,
    /// Everything after the header.
    pub data: &'a [u8],
}

impl<'a> Icmpv4Repr<'a> {
    /// Reads a message whose checksum is correct.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Icmpv4Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error);
        }
        let buffer: &'a [u8] = packet.buffer.as_ref();
        Ok(Icmpv4Repr {
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
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let buf = &mut packet.buffer.as_mut()[..self.buffer_len()];
        let mut p = Packet::new_unchecked(buf);
        p.set_msg_type(self.msg_type);
        p.set_code(self.code);
        p.set_rest_of_header(self.rest_of_header);
        p.data_mut().copy_from_slice(self.data);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4;
    use crate::testutil::Rng;
    use std::net::Ipv4Addr;

    static ECHO_BYTES: [u8; 12] = [
        0x08, 0x00, 0x8e, 0xfe, // echo request, checksum
        0x12, 0x34, 0xab, 0xcd, // ident, seq
        0xaa, 0x00, 0x00, 0xff, // data
    ];

    // Fragmentation needed, MTU 1400, quoting a 20-byte IPv4 header and 8 bytes of UDP.
    static FRAG_NEEDED_BYTES: [u8; 36] = [
        0x03, 0x04, 0x0d, 0xc3, 0x00, 0x00, 0x05, 0x78, //
        0x45, 0x00, 0x05, 0xdc, 0x00, 0x01, 0x40, 0x00, 0x3f, 0x11, 0x00, 0x00, //
        0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x01, 0x02, //
        0x04, 0xd2, 0x00, 0x35, 0x05, 0xc8, 0x00, 0x00,
    ];

    #[test]
    fn deconstruct_echo() {
        let p = Packet::new_checked(&ECHO_BYTES[..]).unwrap();
        assert_eq!(p.msg_type(), ECHO_REQUEST);
        assert_eq!(p.code(), 0);
        assert_eq!(p.checksum(), 0x8efe);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 0xabcd);
        assert_eq!(p.rest_of_header(), 0x1234_abcd);
        assert_eq!(p.data(), &[0xaa, 0x00, 0x00, 0xff]);
        assert!(p.verify_checksum());
        assert_eq!(
            Icmpv4Repr::parse(&p),
            Ok(Icmpv4Repr {
                msg_type: ECHO_REQUEST,
                code: 0,
                rest_of_header: 0x1234_abcd,
                data: &[0xaa, 0x00, 0x00, 0xff],
            })
        );
        assert!(!is_error(p.msg_type()));
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
        p.fill_checksum();
        assert_eq!(buf, ECHO_BYTES);
    }

    #[test]
    fn echo_reply_from_request() {
        let req = Icmpv4Repr::parse(&Packet::new_checked(&ECHO_BYTES[..]).unwrap()).unwrap();
        let reply = Icmpv4Repr { msg_type: ECHO_REPLY, ..req };
        let mut buf = vec![0u8; reply.buffer_len() + 3];
        reply.emit(&mut Packet::new_unchecked(&mut buf[..]));
        let p = Packet::new_checked(&buf[..12]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!((p.msg_type(), p.echo_ident(), p.echo_seq_no()), (ECHO_REPLY, 0x1234, 0xabcd));
        assert_eq!(&buf[12..], &[0, 0, 0]);
    }

    #[test]
    fn deconstruct_error() {
        let p = Packet::new_checked(&FRAG_NEEDED_BYTES[..]).unwrap();
        assert_eq!(p.msg_type(), DEST_UNREACHABLE);
        assert_eq!(p.code(), FRAG_NEEDED);
        assert_eq!(p.next_hop_mtu(), 1400);
        assert_eq!(p.rest_of_header(), 1400);
        assert!(p.verify_checksum());
        assert!(is_error(p.msg_type()));
        let inner = ipv4::Packet::new_unchecked(p.data());
        assert_eq!(inner.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(inner.dst_addr(), Ipv4Addr::new(10, 0, 1, 2));
        assert_eq!(inner.total_len(), 1500);
        // The quote is cut short, so the inner header fails check_len: a reader of quoted
        // headers uses the header alone.
        assert!(ipv4::Packet::new_checked(p.data()).is_err());
    }

    #[test]
    fn construct_error() {
        let mut buf = [0xa5u8; 36];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(DEST_UNREACHABLE);
        p.set_code(FRAG_NEEDED);
        p.set_rest_of_header(0);
        p.set_next_hop_mtu(1400);
        p.data_mut().copy_from_slice(&FRAG_NEEDED_BYTES[8..]);
        p.fill_checksum();
        assert_eq!(buf, FRAG_NEEDED_BYTES);
    }

    #[test]
    fn types_and_lengths() {
        for t in 0..=255u8 {
            assert_eq!(is_error(t), [3, 4, 5, 11, 12].contains(&t));
        }
        assert_eq!(
            [ECHO_REPLY, DEST_UNREACHABLE, REDIRECT, ECHO_REQUEST, TIME_EXCEEDED, PARAM_PROBLEM],
            [0, 3, 5, 8, 11, 12]
        );
        assert_eq!(
            [NET_UNREACHABLE, HOST_UNREACHABLE, PROTO_UNREACHABLE, PORT_UNREACHABLE, FRAG_NEEDED],
            [0, 1, 2, 3, 4]
        );
        assert_eq!(TTL_EXCEEDED_IN_TRANSIT, 0);
        for len in 0..8 {
            assert!(Packet::new_checked(&ECHO_BYTES[..len]).is_err());
        }
        let p = Packet::new_checked(&ECHO_BYTES[..8]).unwrap();
        assert!(p.data().is_empty());
        assert!(!p.verify_checksum());
        assert_eq!(Icmpv4Repr::parse(&p), Err(Error));
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = Rng(41);
        for i in 0..2000 {
            let payload = rng.bytes_below(64);
            let (id, seq) = (rng.next_u64() as u16, rng.next_u64() as u16);
            let b = etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64);
            let b = if i % 2 == 0 {
                b.icmpv4_echo_request(id, seq)
            } else {
                b.icmpv4_echo_reply(id, seq)
            };
            let mut out = Vec::new();
            b.write(&mut out, &payload).unwrap();
            let ip = ipv4::Packet::new_checked(&out[..]).unwrap();
            let p = Packet::new_checked(ip.payload()).unwrap();
            assert_eq!(p.msg_type(), if i % 2 == 0 { ECHO_REQUEST } else { ECHO_REPLY });
            assert_eq!((p.echo_ident(), p.echo_seq_no()), (id, seq));
            assert_eq!(p.data(), &payload[..]);
            assert!(p.verify_checksum());
            let theirs = etherparse::Icmpv4Slice::from_slice(ip.payload()).unwrap();
            assert_eq!(p.checksum(), theirs.checksum());
            let mut copy = ip.payload().to_vec();
            let mut q = Packet::new_unchecked(&mut copy[..]);
            q.set_checksum(0x5555);
            q.fill_checksum();
            assert_eq!(q.checksum(), theirs.checksum());
        }
    }
}
