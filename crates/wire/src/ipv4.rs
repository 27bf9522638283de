//! IPv4 headers (RFC 791).
//!
//! [`Packet::check_len`] checks lengths only: the buffer holds 20 bytes, the IHL says at least
//! 20, the buffer holds the IHL's header, the total length covers the header, and the buffer
//! holds the total length (it may hold more: Ethernet padding). The version and checksum are
//! the caller's to check, so that it can count those drops apart; [`Ipv4Repr::parse`] checks
//! both. After `check_len` succeeds no accessor panics; [`Ipv4Repr::emit`] never panics on a
//! buffer of at least [`Ipv4Repr::buffer_len`] bytes.
//!
//! [`Packet::decrement_ttl`] is the forwarding path's rewrite: one byte and an RFC 1624
//! checksum patch instead of a recomputation.

use std::net::Ipv4Addr;

use crate::bytes::{get_u16, set_u16};
use crate::{checksum, Error, Result};

mod field {
    use core::ops::Range;

    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

/// The length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;
/// The longest IPv4 header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Packet::HEADER_LEN` needs no type annotation.
impl Packet<&'static [u8]> {
    /// The length of an IPv4 header without options: 20.
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

    /// Fails unless the header and total lengths are consistent with each other and the
    /// buffer (see the module docs); never looks at the version.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error);
        }
        let header_len = self.header_len();
        let total_len = self.total_len() as usize;
        // Non-short-circuit `|`: four compares and one branch.
        if (header_len < HEADER_LEN)
            | (len < header_len)
            | (total_len < header_len)
            | (len < total_len)
        {
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

    /// The version field (4 for IPv4).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Version 4 with a 20-byte header (no options): the first byte is 0x45. One compare,
    /// for a fast path that leaves everything else to a slower one.
    #[inline]
    pub fn is_basic(&self) -> bool {
        self.buffer.as_ref()[field::VER_IHL] == 0x45
    }

    /// The header length in bytes (IHL * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize * 4
    }

    /// The type-of-service byte (DSCP and ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// The differentiated services code point (upper 6 bits of the TOS byte).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// The explicit congestion notification bits (lower 2 bits of the TOS byte).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.tos() & 3
    }

    /// The total length of header and payload in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// The identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::IDENT])
    }

    /// The don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        get_u16(&self.buffer.as_ref()[field::FLG_OFF]) & FLAG_DF != 0
    }

    /// The more-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        get_u16(&self.buffer.as_ref()[field::FLG_OFF]) & FLAG_MF != 0
    }

    /// The fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (get_u16(&self.buffer.as_ref()[field::FLG_OFF]) & OFFSET_MASK) << 3
    }

    /// True for a fragment of a larger datagram (more-fragments set or a non-zero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        get_u16(&self.buffer.as_ref()[field::FLG_OFF]) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// The time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload (see [`crate::ip_proto`]).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// The header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The options: bytes 20 up to the header length.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The whole header, options included.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The payload: from the header length to the total length (trailing padding excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }

    /// True if the header checksum is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.header()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version (low 4 bits of `value`).
    #[inline]
    pub fn set_version(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Sets the header length in bytes (stored as `len / 4`; keep it a multiple of 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the type-of-service byte.
    #[inline]
    pub fn set_tos(&mut self, value: u8) {
        self.buffer.as_mut()[field::TOS] = value
    }

    /// Sets the DSCP (low 6 bits of `value`), keeping the ECN bits.
    #[inline]
    pub fn set_dscp(&mut self, value: u8) {
        let tos = self.tos();
        self.set_tos((value << 2) | (tos & 3))
    }

    /// Sets the ECN bits (low 2 bits of `value`), keeping the DSCP.
    #[inline]
    pub fn set_ecn(&mut self, value: u8) {
        let tos = self.tos();
        self.set_tos((tos & !3) | (value & 3))
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::LENGTH], value)
    }

    /// Sets the identification field.
    #[inline]
    pub fn set_ident(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::IDENT], value)
    }

    fn set_flg_off_bits(&mut self, mask: u16, bits: u16) {
        let v = get_u16(&self.buffer.as_ref()[field::FLG_OFF]);
        set_u16(&mut self.buffer.as_mut()[field::FLG_OFF], (v & !mask) | (bits & mask))
    }

    /// Clears the flags and the fragment offset.
    #[inline]
    pub fn clear_flags(&mut self) {
        self.set_flg_off_bits(0xffff, 0)
    }

    /// Sets the don't-fragment flag.
    #[inline]
    pub fn set_dont_frag(&mut self, value: bool) {
        self.set_flg_off_bits(FLAG_DF, if value { FLAG_DF } else { 0 })
    }

    /// Sets the more-fragments flag.
    #[inline]
    pub fn set_more_frags(&mut self, value: bool) {
        self.set_flg_off_bits(FLAG_MF, if value { FLAG_MF } else { 0 })
    }

    /// Sets the fragment offset in bytes (a multiple of 8; the low 3 bits are dropped).
    #[inline]
    pub fn set_frag_offset(&mut self, value: u16) {
        self.set_flg_off_bits(OFFSET_MASK, value >> 3)
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value
    }

    /// Sets the protocol of the payload.
    #[inline]
    pub fn set_protocol(&mut self, value: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = value
    }

    /// Sets the header checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::CHECKSUM], value)
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets())
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets())
    }

    /// Computes the header checksum over the header length and stores it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(self.header());
        self.set_checksum(!sum)
    }

    /// The options, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload (header length to total length), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), self.total_len() as usize);
        &mut self.buffer.as_mut()[start..end]
    }

    /// Decrements the TTL by one and patches the checksum incrementally (RFC 1624), giving the
    /// checksum a full recomputation would. A TTL of 0 is left alone: callers drop packets
    /// whose TTL is 0 or 1 before forwarding them.
    #[inline]
    pub fn decrement_ttl(&mut self) {
        let data = self.buffer.as_mut();
        let ttl = data[field::TTL];
        if ttl == 0 {
            return;
        }
        data[field::TTL] = ttl - 1;
        // RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m'), with m the TTL/protocol word and
        // m' = m - 0x0100: ~m + m' is the constant 0xfeff, so one add and one fold suffice.
        let x = !get_u16(&data[field::CHECKSUM]) as u32 + 0xfeff;
        let x = (x & 0xffff) + (x >> 16);
        set_u16(&mut data[field::CHECKSUM], !(x as u16));
    }

    /// Rewrites the source address and patches the checksum incrementally (for NAT). Transport
    /// checksums that cover the pseudo-header are the caller's to patch.
    #[inline]
    pub fn set_src_addr_incremental(&mut self, addr: Ipv4Addr) {
        let old = u32::from(self.src_addr());
        self.set_src_addr(addr);
        let sum = checksum::update32(self.checksum(), old, u32::from(addr));
        self.set_checksum(sum)
    }

    /// Rewrites the destination address and patches the checksum incrementally (for NAT).
    #[inline]
    pub fn set_dst_addr_incremental(&mut self, addr: Ipv4Addr) {
        let old = u32::from(self.dst_addr());
        self.set_dst_addr(addr);
        let sum = checksum::update32(self.checksum(), old, u32::from(addr));
        self.set_checksum(sum)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of an unfragmented IPv4 header; options are not represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Length of the payload in bytes (the total length less the header's).
    pub payload_len: u16,
    /// Time to live.
    pub ttl: u8,
    /// Type-of-service byte.
    pub tos: u8,
    /// Identification field.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Reads a header: lengths, version 4 and the checksum must be right, and the packet must
    /// not be a fragment (a `Repr` has no place for the offset; reassembly is not this crate's
    /// job). Options are skipped.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Ipv4Repr> {
        packet.check_len()?;
        if packet.version() != 4 || !packet.verify_checksum() || packet.is_fragment() {
            return Err(Error);
        }
        Ok(Ipv4Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.total_len() - packet.header_len() as u16,
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// The emitted header's length: 20 (no options).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with a correct checksum. `payload_len` must be at most
    /// 65515: the total length wraps around past that.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.buffer.as_mut()[field::VER_IHL] = 0x45;
        packet.set_tos(self.tos);
        packet.set_total_len(self.payload_len.wrapping_add(HEADER_LEN as u16));
        packet.set_ident(self.ident);
        packet.clear_flags();
        packet.set_dont_frag(self.dont_frag);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip_proto;
    use crate::testutil::Rng;

    // 20-byte header, DF, TTL 64, UDP, 10.0.0.1 -> 10.0.0.2, 4 bytes of payload, then 2 bytes
    // of link-layer padding that are not part of the datagram.
    static PACKET_BYTES: [u8; 26] = [
        0x45, 0x00, 0x00, 0x18, // v4 IHL 5, TOS 0, total 24
        0x12, 0x34, 0x40, 0x00, // ident, DF
        0x40, 0x11, 0x14, 0x9f, // TTL 64, UDP, checksum
        0x0a, 0x00, 0x00, 0x01, // src
        0x0a, 0x00, 0x00, 0x02, // dst
        0xaa, 0xbb, 0xcc, 0xdd, // payload
        0x00, 0x00, // padding
    ];

    // IHL 7 with 8 bytes of options (Router Alert + NOP padding + End), TOS 0xb8, TTL 1,
    // ICMP, more-fragments clear, offset 0, 192.0.2.1 -> 198.51.100.7, 2 bytes of payload.
    static OPTIONS_BYTES: [u8; 30] = [
        0x47, 0xb8, 0x00, 0x1e, // v4 IHL 7, TOS, total 30
        0xbe, 0xef, 0x00, 0x00, // ident, no flags
        0x01, 0x01, 0x75, 0xf6, // TTL 1, ICMP, checksum
        0xc0, 0x00, 0x02, 0x01, // src
        0xc6, 0x33, 0x64, 0x07, // dst
        0x94, 0x04, 0x00, 0x00, // Router Alert
        0x01, 0x01, 0x01, 0x00, // NOP NOP NOP End
        0x08, 0x00, // payload
    ];

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            protocol: ip_proto::UDP,
            payload_len: 4,
            ttl: 64,
            tos: 0,
            ident: 0x1234,
            dont_frag: true,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.tos(), 0);
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.ident(), 0x1234);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), ip_proto::UDP);
        assert_eq!(p.checksum(), 0x149f);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.options(), &[] as &[u8]);
        assert_eq!(p.header(), &PACKET_BYTES[..20]);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert!(p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p), Ok(repr()));
        assert_eq!(Packet::HEADER_LEN, 20);
    }

    #[test]
    fn deconstruct_with_options() {
        let p = Packet::new_checked(&OPTIONS_BYTES[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.tos(), 0xb8);
        assert_eq!((p.dscp(), p.ecn()), (46, 0));
        assert_eq!(p.total_len(), 30);
        assert_eq!(p.ident(), 0xbeef);
        assert!(!p.dont_frag() && !p.more_frags());
        assert_eq!(p.ttl(), 1);
        assert_eq!(p.protocol(), ip_proto::ICMP);
        assert_eq!(p.checksum(), 0x75f6);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(p.options(), &OPTIONS_BYTES[20..28]);
        assert_eq!(p.header(), &OPTIONS_BYTES[..28]);
        assert_eq!(p.payload(), &[0x08, 0x00]);
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, 2);
        assert_eq!(r.tos, 0xb8);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 26];
        let r = repr();
        assert_eq!(r.buffer_len(), 20);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        buf[24..].fill(0);
        assert_eq!(buf, PACKET_BYTES);

        let mut buf = [0u8; 30];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version(4);
        p.set_header_len(28);
        p.set_tos(0xb8);
        p.set_total_len(30);
        p.set_ident(0xbeef);
        p.set_dont_frag(false);
        p.set_more_frags(false);
        p.set_frag_offset(0);
        p.set_ttl(1);
        p.set_protocol(ip_proto::ICMP);
        p.set_src_addr(Ipv4Addr::new(192, 0, 2, 1));
        p.set_dst_addr(Ipv4Addr::new(198, 51, 100, 7));
        p.options_mut().copy_from_slice(&OPTIONS_BYTES[20..28]);
        p.payload_mut().copy_from_slice(&[0x08, 0x00]);
        p.fill_checksum();
        assert_eq!(buf, OPTIONS_BYTES);
    }

    #[test]
    fn flags_and_fragment_offset() {
        let mut buf = PACKET_BYTES;
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_frag_offset(0xfff8);
        p.set_more_frags(true);
        assert!(p.dont_frag() && p.more_frags());
        assert_eq!(p.frag_offset(), 0xfff8);
        p.set_dont_frag(false);
        assert!(!p.dont_frag() && p.more_frags() && p.is_fragment());
        assert_eq!(p.frag_offset(), 0xfff8);
        p.clear_flags();
        assert!(!p.more_frags() && !p.is_fragment());
        p.set_frag_offset(8);
        assert!(p.is_fragment());
        p.set_dscp(46);
        p.set_ecn(3);
        assert_eq!(p.tos(), 0xbb);
        p.fill_checksum();
        assert!(p.verify_checksum());
        // A fragment is not an `Ipv4Repr`.
        assert_eq!(Ipv4Repr::parse(&p), Err(Error));
    }

    #[test]
    fn check_len_is_lengths_only() {
        let ok = |b: &[u8]| Packet::new_checked(b).is_ok();
        for len in 0..24 {
            assert!(!ok(&PACKET_BYTES[..len]), "{len}");
        }
        assert!(ok(&PACKET_BYTES[..24]));
        assert!(ok(&PACKET_BYTES[..]));
        // Any version passes check_len, and fails parse.
        for v in 0..16 {
            let mut b = PACKET_BYTES;
            b[0] = (v << 4) | 5;
            assert!(ok(&b));
            let p = Packet::new_unchecked(&b[..]);
            assert_eq!(Ipv4Repr::parse(&p).is_ok(), v == 4);
        }
        for ihl in 0..16u8 {
            let mut b = [0u8; 80];
            b[..26].copy_from_slice(&PACKET_BYTES);
            b[0] = 0x40 | ihl;
            b[2..4].copy_from_slice(&60u16.to_be_bytes());
            assert_eq!(ok(&b), ihl >= 5, "ihl {ihl}");
            // The buffer must hold the IHL's header...
            if ihl >= 5 {
                assert!(!ok(&b[..ihl as usize * 4 - 1]));
            }
        }
        // ... and the total length must cover the header and fit in the buffer.
        let mut b = PACKET_BYTES;
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert!(!ok(&b));
        b[2..4].copy_from_slice(&20u16.to_be_bytes());
        assert!(ok(&b));
        assert!(Packet::new_checked(&b[..]).unwrap().payload().is_empty());
        b[2..4].copy_from_slice(&26u16.to_be_bytes());
        assert!(ok(&b));
        b[2..4].copy_from_slice(&27u16.to_be_bytes());
        assert!(!ok(&b));
        b[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
        assert!(!ok(&b));
        // A bad checksum passes check_len, fails verify and parse.
        let mut b = PACKET_BYTES;
        b[10] ^= 1;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(!p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p), Err(Error));
    }

    fn random_header(rng: &mut Rng, buf: &mut [u8; 60]) -> usize {
        rng.fill(buf);
        let ihl = 5 + rng.below(11) as u8;
        buf[0] = 0x40 | ihl;
        let hl = ihl as usize * 4;
        buf[2..4].copy_from_slice(&(hl as u16).to_be_bytes());
        let mut p = Packet::new_unchecked(&mut buf[..hl]);
        p.fill_checksum();
        hl
    }

    /// The checksum from scratch, independent of `fill_checksum`.
    fn recomputed(header: &[u8]) -> u16 {
        let mut h = header.to_vec();
        h[10] = 0;
        h[11] = 0;
        let mut sum: u32 = 0;
        for w in h.chunks(2) {
            sum += u16::from_be_bytes([w[0], w[1]]) as u32;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn decrement_ttl_matches_full_recompute_for_every_ttl() {
        let mut rng = Rng(21);
        let mut buf = [0u8; 60];
        for round in 0..2000 {
            let hl = random_header(&mut rng, &mut buf);
            for ttl in 1..=255u8 {
                let mut p = Packet::new_unchecked(&mut buf[..hl]);
                p.set_ttl(ttl);
                p.fill_checksum();
                // The same header with a 0xffff-for-0x0000 checksum verifies too; the update
                // must still land on the canonical value.
                if round % 7 == 0 && p.checksum() == 0 {
                    p.set_checksum(0xffff);
                    assert!(p.verify_checksum());
                }
                p.decrement_ttl();
                assert_eq!(p.ttl(), ttl - 1);
                assert_eq!(p.checksum(), recomputed(p.header()), "round {round} ttl {ttl}");
                assert!(p.verify_checksum());
            }
        }
    }

    #[test]
    fn decrement_ttl_zero_and_ffff_corners() {
        // Search for headers whose checksum is 0x0000 before, and ones where it is 0x0000
        // after, the decrement, by varying the ident.
        let mut rng = Rng(22);
        let mut buf = [0u8; 60];
        let (mut before, mut after) = (0, 0);
        for _ in 0..200 {
            let hl = random_header(&mut rng, &mut buf);
            let mut p = Packet::new_unchecked(&mut buf[..hl]);
            if p.ttl() == 0 {
                p.set_ttl(1);
            }
            for ident in 0..=0xffffu16 {
                p.set_ident(ident);
                p.fill_checksum();
                let ck0 = p.checksum();
                let mut q = Packet::new_unchecked(p.as_ref().to_vec());
                q.decrement_ttl();
                let ck1 = recomputed(q.header());
                if ck0 == 0 || ck1 == 0 || ck0 == 0xffff || ck1 == 0xffff {
                    assert_eq!(q.checksum(), ck1);
                    before += (ck0 == 0) as u32;
                    after += (ck1 == 0) as u32;
                }
                // Also from the non-canonical 0xffff form of a zero checksum.
                if ck0 == 0 {
                    let mut r = Packet::new_unchecked(p.as_ref().to_vec());
                    r.set_checksum(0xffff);
                    r.decrement_ttl();
                    assert_eq!(r.checksum(), ck1);
                }
            }
        }
        assert!(before > 50 && after > 50, "{before} {after}");
    }

    #[test]
    fn decrement_ttl_many_random_headers() {
        let mut rng = Rng(23);
        let mut buf = [0u8; 60];
        for _ in 0..200_000 {
            let hl = random_header(&mut rng, &mut buf);
            let mut p = Packet::new_unchecked(&mut buf[..hl]);
            let ttl = p.ttl();
            p.decrement_ttl();
            if ttl == 0 {
                assert_eq!(p.ttl(), 0);
            }
            assert_eq!(p.checksum(), recomputed(p.header()));
        }
    }

    #[test]
    fn incremental_address_rewrite() {
        let mut rng = Rng(24);
        let mut buf = [0u8; 60];
        for _ in 0..20_000 {
            let hl = random_header(&mut rng, &mut buf);
            let mut p = Packet::new_unchecked(&mut buf[..hl]);
            p.set_src_addr_incremental(Ipv4Addr::from(rng.next_u64() as u32));
            assert_eq!(p.checksum(), recomputed(p.header()));
            p.set_dst_addr_incremental(Ipv4Addr::from(rng.next_u64() as u32));
            assert_eq!(p.checksum(), recomputed(p.header()));
        }
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = Rng(25);
        for i in 0..2000 {
            let src: [u8; 4] = (rng.next_u64() as u32).to_be_bytes();
            let dst: [u8; 4] = (rng.next_u64() as u32).to_be_bytes();
            let ttl = rng.next_u64() as u8;
            let payload = rng.bytes_below(100);
            let mut h = etherparse::Ipv4Header::new(
                payload.len() as u16,
                ttl,
                etherparse::IpNumber(rng.next_u64() as u8),
                src,
                dst,
            )
            .unwrap();
            h.identification = rng.next_u64() as u16;
            h.dont_fragment = rng.below(2) == 1;
            h.dscp = etherparse::IpDscp::try_new(rng.below(64) as u8).unwrap();
            if i % 2 == 1 {
                let n = 4 * rng.below(11) as usize;
                let opts = rng.bytes(n);
                h.options = etherparse::Ipv4Options::try_from(&opts[..]).unwrap();
                h.set_payload_len(payload.len()).unwrap();
            }
            h.header_checksum = h.calc_header_checksum();
            let mut bytes = h.to_bytes().to_vec();
            bytes.extend_from_slice(&payload);

            let p = Packet::new_checked(&bytes[..]).unwrap();
            let theirs = etherparse::Ipv4HeaderSlice::from_slice(&bytes).unwrap();
            assert_eq!(p.version(), theirs.version());
            assert_eq!(p.header_len(), theirs.slice().len());
            assert_eq!(p.dscp(), theirs.dcp().value());
            assert_eq!(p.ecn(), theirs.ecn().value());
            assert_eq!(p.total_len(), theirs.total_len());
            assert_eq!(p.ident(), theirs.identification());
            assert_eq!(p.dont_frag(), theirs.dont_fragment());
            assert_eq!(p.more_frags(), theirs.more_fragments());
            assert_eq!(p.frag_offset(), theirs.fragments_offset().value() * 8);
            assert_eq!(p.ttl(), theirs.ttl());
            assert_eq!(p.protocol(), theirs.protocol().0);
            assert_eq!(p.checksum(), theirs.header_checksum());
            assert_eq!(p.src_addr(), theirs.source_addr());
            assert_eq!(p.dst_addr(), theirs.destination_addr());
            assert_eq!(p.options(), theirs.options());
            assert_eq!(p.payload(), &payload[..]);
            assert!(p.verify_checksum());

            // Our emit and etherparse's serialisation agree for option-less headers, and the
            // decremented header's checksum is what etherparse computes.
            let mut ours = Packet::new_unchecked(bytes.clone());
            ours.decrement_ttl();
            let mut h2 = h.clone();
            h2.time_to_live = h.time_to_live.saturating_sub(1);
            assert_eq!(ours.checksum(), h2.calc_header_checksum());
            if i % 2 == 0 && ttl > 0 {
                let r = Ipv4Repr::parse(&p).unwrap();
                let mut out = [0u8; 20];
                r.emit(&mut Packet::new_unchecked(&mut out[..]));
                assert_eq!(&out[..], &bytes[..20]);
            }
        }
    }
}
