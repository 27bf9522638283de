//! TCP segment headers (RFC 9293).
//!
//! [`Packet`] views a whole segment: TCP has no length field, so the segment is the buffer
//! (slice it to the IP payload) and the checksum covers all of it. [`Packet::check_len`]
//! requires the 20-byte header and a data offset between 20 and the buffer's length. After it
//! succeeds no accessor panics; [`TcpRepr::emit`] never panics on a buffer of at least
//! [`TcpRepr::buffer_len`] bytes. Options are exposed as raw bytes.

use std::net::IpAddr;

use crate::bytes::{get_u16, get_u32, set_u16, set_u32};
use crate::{checksum, ip_proto, Error, Result};

mod field {
    use core::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// The length of a TCP header without options.
pub const HEADER_LEN: usize = field::URGENT.end;

/// The flag bits of byte 13, as [`Packet::flags`] returns them.
pub mod flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN echo (RFC 3168).
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced (RFC 3168).
    pub const CWR: u8 = 0x80;
}

/// A view of a TCP segment in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Packet::HEADER_LEN` needs no type annotation.
impl Packet<&'static [u8]> {
    /// The length of a TCP header without options: 20.
    pub const HEADER_LEN: usize = HEADER_LEN;
}

/// The pseudo-header and segment sum, or `None` for addresses of different families.
#[inline]
fn sum(src: &IpAddr, dst: &IpAddr, segment: &[u8]) -> Option<u16> {
    let ph = checksum::pseudo_header(src, dst, ip_proto::TCP, segment.len() as u32)?;
    Some(checksum::combine(&[ph, checksum::data(segment)]))
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

    /// Fails unless the buffer holds 20 bytes and `20 <= data offset <= buffer length`.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN || header_len > len {
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

    /// The sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        get_u32(&self.buffer.as_ref()[field::SEQ_NUM])
    }

    /// The acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        get_u32(&self.buffer.as_ref()[field::ACK_NUM])
    }

    /// The header length in bytes (data offset * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::DATA_OFF] >> 4) as usize * 4
    }

    /// The flag byte (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The FIN flag.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    /// The SYN flag.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    /// The RST flag.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    /// The PSH flag.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    /// The ACK flag.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    /// The URG flag.
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }

    /// The ECE flag.
    #[inline]
    pub fn ece(&self) -> bool {
        self.flags() & flags::ECE != 0
    }

    /// The CWR flag.
    #[inline]
    pub fn cwr(&self) -> bool {
        self.flags() & flags::CWR != 0
    }

    /// The window size.
    #[inline]
    pub fn window_len(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::WIN_SIZE])
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The urgent pointer.
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::URGENT])
    }

    /// The options: bytes 20 up to the header length.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload: everything after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// True if the checksum over the pseudo-header and the whole buffer is right for these
    /// addresses; addresses of different families never verify.
    #[inline]
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        sum(src, dst, self.buffer.as_ref()) == Some(0xffff)
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

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, value: u32) {
        set_u32(&mut self.buffer.as_mut()[field::SEQ_NUM], value)
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, value: u32) {
        set_u32(&mut self.buffer.as_mut()[field::ACK_NUM], value)
    }

    /// Sets the header length in bytes (stored as `len / 4`; keep it a multiple of 4, 20..=60),
    /// keeping the reserved bits.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::DATA_OFF];
        *b = (*b & 0x0f) | (((len / 4) as u8) << 4);
    }

    /// Sets the flag byte.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value
    }

    fn set_flag(&mut self, bit: u8, value: bool) {
        let f = self.flags();
        self.set_flags(if value { f | bit } else { f & !bit })
    }

    /// Sets the FIN flag.
    #[inline]
    pub fn set_fin(&mut self, value: bool) {
        self.set_flag(flags::FIN, value)
    }

    /// Sets the SYN flag.
    #[inline]
    pub fn set_syn(&mut self, value: bool) {
        self.set_flag(flags::SYN, value)
    }

    /// Sets the RST flag.
    #[inline]
    pub fn set_rst(&mut self, value: bool) {
        self.set_flag(flags::RST, value)
    }

    /// Sets the PSH flag.
    #[inline]
    pub fn set_psh(&mut self, value: bool) {
        self.set_flag(flags::PSH, value)
    }

    /// Sets the ACK flag.
    #[inline]
    pub fn set_ack(&mut self, value: bool) {
        self.set_flag(flags::ACK, value)
    }

    /// Sets the URG flag.
    #[inline]
    pub fn set_urg(&mut self, value: bool) {
        self.set_flag(flags::URG, value)
    }

    /// Sets the ECE flag.
    #[inline]
    pub fn set_ece(&mut self, value: bool) {
        self.set_flag(flags::ECE, value)
    }

    /// Sets the CWR flag.
    #[inline]
    pub fn set_cwr(&mut self, value: bool) {
        self.set_flag(flags::CWR, value)
    }

    /// Sets the window size.
    #[inline]
    pub fn set_window_len(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::WIN_SIZE], value)
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::CHECKSUM], value)
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::URGENT], value)
    }

    /// The options, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }

    /// Computes the checksum over the pseudo-header and the whole buffer and stores it; with
    /// addresses of different families it stores 0.
    #[inline]
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        self.set_checksum(0);
        let ck = sum(src, dst, self.buffer.as_ref()).map_or(0, |s| !s);
        self.set_checksum(ck)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of a TCP header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Flag byte (see [`flags`]).
    pub flags: u8,
    /// Window size.
    pub window_len: u16,
    /// Urgent pointer.
    pub urgent_at: u16,
}

impl TcpRepr {
    /// Reads a header (lengths only: verify the checksum with the view, which needs the IP
    /// addresses); options are skipped.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<TcpRepr> {
        packet.check_len()?;
        Ok(TcpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window_len: packet.window_len(),
            urgent_at: packet.urgent_at(),
        })
    }

    /// The header's length: 20.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with checksum 0; write the payload after it, then call
    /// [`Packet::fill_checksum`] on the whole segment.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        packet.buffer.as_mut()[field::DATA_OFF] = ((HEADER_LEN / 4) as u8) << 4;
        packet.set_flags(self.flags);
        packet.set_window_len(self.window_len);
        packet.set_checksum(0);
        packet.set_urgent_at(self.urgent_at);
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

    // SYN|ACK with options MSS 1460, NOP, NOP, SACK-permitted, over IPv4, 3 bytes of payload.
    static SEGMENT_V4_BYTES: [u8; 31] = [
        0xbf, 0x00, 0x00, 0x50, // 48896 -> 80
        0x01, 0x23, 0x45, 0x67, // seq
        0x89, 0xab, 0xcd, 0xef, // ack
        0x70, 0x12, 0x01, 0x23, // offset 7, SYN|ACK, window 0x0123
        0x2a, 0x63, 0x00, 0x00, // checksum, urgent 0
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x01, 0x01, 0x04, 0x02, // NOP NOP SACK-permitted
        0xaa, 0xbb, 0xcc,
    ];

    // A FIN|PSH|ACK|URG segment over IPv6 without options, 1 byte of payload.
    static SEGMENT_V6_BYTES: [u8; 21] = [
        0x00, 0x16, 0xc3, 0x50, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01, //
        0x50, 0x39, 0xff, 0xff, 0x4e, 0xcd, 0x00, 0x01, //
        0x42,
    ];

    #[test]
    fn deconstruct() {
        let b = SEGMENT_V4_BYTES;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.src_port(), 48896);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x0123_4567);
        assert_eq!(p.ack_number(), 0x89ab_cdef);
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.flags(), flags::SYN | flags::ACK);
        assert!(p.syn() && p.ack());
        assert!(!p.fin() && !p.rst() && !p.psh() && !p.urg() && !p.ece() && !p.cwr());
        assert_eq!(p.window_len(), 0x0123);
        assert_eq!(p.checksum(), 0x2a63);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(p.options(), &[0x02, 0x04, 0x05, 0xb4, 0x01, 0x01, 0x04, 0x02]);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc]);
        assert!(p.verify_checksum(&SRC4, &DST4));
        assert!(!p.verify_checksum(&DST4, &DST4));
        assert!(!p.verify_checksum(&SRC4, &DST6));
        let r = TcpRepr::parse(&p).unwrap();
        assert_eq!(r.flags, 0x12);

        let b = SEGMENT_V6_BYTES;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (22, 50000));
        assert_eq!((p.seq_number(), p.ack_number()), (0xffff_ffff, 1));
        assert_eq!(p.header_len(), 20);
        assert!(p.fin() && p.psh() && p.ack() && p.urg() && !p.syn() && !p.rst());
        assert_eq!(p.urgent_at(), 1);
        assert!(p.options().is_empty());
        assert_eq!(p.payload(), &[0x42]);
        assert!(p.verify_checksum(&SRC6, &DST6));
        assert_eq!(
            TcpRepr::parse(&p),
            Ok(TcpRepr {
                src_port: 22,
                dst_port: 50000,
                seq_number: 0xffff_ffff,
                ack_number: 1,
                flags: flags::FIN | flags::PSH | flags::ACK | flags::URG,
                window_len: 0xffff,
                urgent_at: 1,
            })
        );
        assert_eq!(Packet::HEADER_LEN, 20);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 31];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(48896);
        p.set_dst_port(80);
        p.set_seq_number(0x0123_4567);
        p.set_ack_number(0x89ab_cdef);
        p.buffer[12] = 0;
        p.set_header_len(28);
        p.set_flags(0);
        p.set_syn(true);
        p.set_ack(true);
        p.set_window_len(0x0123);
        p.set_urgent_at(0);
        p.options_mut().copy_from_slice(&[0x02, 0x04, 0x05, 0xb4, 0x01, 0x01, 0x04, 0x02]);
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc]);
        p.fill_checksum(&SRC4, &DST4);
        assert_eq!(&buf[..], &SEGMENT_V4_BYTES[..]);

        let r = TcpRepr {
            src_port: 22,
            dst_port: 50000,
            seq_number: 0xffff_ffff,
            ack_number: 1,
            flags: 0,
            window_len: 0xffff,
            urgent_at: 1,
        };
        assert_eq!(r.buffer_len(), 20);
        let mut buf = [0xa5u8; 21];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p);
        p.set_fin(true);
        p.set_psh(true);
        p.set_ack(true);
        p.set_urg(true);
        p.set_ece(true);
        p.set_cwr(true);
        p.set_rst(true);
        p.set_ece(false);
        p.set_cwr(false);
        p.set_rst(false);
        p.payload_mut()[0] = 0x42;
        p.fill_checksum(&SRC6, &DST6);
        assert_eq!(&buf[..], &SEGMENT_V6_BYTES[..]);
    }

    #[test]
    fn length_checks() {
        let b = SEGMENT_V4_BYTES;
        for len in 0..28 {
            assert!(Packet::new_checked(&b[..len]).is_err(), "{len}");
        }
        assert!(Packet::new_checked(&b[..28]).unwrap().payload().is_empty());
        for off in 0..16u8 {
            let mut b = [0u8; 60];
            b[12] = off << 4;
            assert_eq!(Packet::new_checked(&b[..]).is_ok(), off >= 5, "{off}");
            assert_eq!(Packet::new_checked(&b[..40]).is_ok(), (5..=10).contains(&off));
        }
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = Rng(71);
        for i in 0..2000 {
            let payload = rng.bytes_below(200);
            let (sp, dp) = (rng.next_u64() as u16, rng.next_u64() as u16);
            let (seq, ack, win) =
                (rng.next_u64() as u32, rng.next_u64() as u32, rng.next_u64() as u16);
            let mut out = Vec::new();
            let opts = [
                etherparse::TcpOptionElement::MaximumSegmentSize(1400),
                etherparse::TcpOptionElement::Noop,
            ];
            let (src, dst, at) = if i % 2 == 0 {
                let (s, d) =
                    ((rng.next_u64() as u32).to_be_bytes(), (rng.next_u64() as u32).to_be_bytes());
                let b =
                    etherparse::PacketBuilder::ipv4(s, d, 64).tcp(sp, dp, seq, win).ack(ack).psh();
                let b = if i % 4 == 0 { b.options(&opts).unwrap() } else { b };
                b.write(&mut out, &payload).unwrap();
                let ip = ipv4::Packet::new_checked(&out[..]).unwrap();
                (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()), ip.header_len())
            } else {
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                rng.fill(&mut s);
                rng.fill(&mut d);
                let b =
                    etherparse::PacketBuilder::ipv6(s, d, 64).tcp(sp, dp, seq, win).syn().urg(7);
                let b = if i % 4 == 1 { b.options(&opts).unwrap() } else { b };
                b.write(&mut out, &payload).unwrap();
                let ip = ipv6::Packet::new_checked(&out[..]).unwrap();
                (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()), 40)
            };
            let p = Packet::new_checked(&out[at..]).unwrap();
            let theirs = etherparse::TcpHeaderSlice::from_slice(&out[at..]).unwrap();
            assert_eq!(p.src_port(), theirs.source_port());
            assert_eq!(p.dst_port(), theirs.destination_port());
            assert_eq!(p.seq_number(), theirs.sequence_number());
            assert_eq!(p.ack_number(), theirs.acknowledgment_number());
            assert_eq!(p.header_len(), theirs.slice().len());
            assert_eq!(
                (p.fin(), p.syn(), p.rst(), p.psh(), p.ack(), p.urg(), p.ece(), p.cwr()),
                (
                    theirs.fin(),
                    theirs.syn(),
                    theirs.rst(),
                    theirs.psh(),
                    theirs.ack(),
                    theirs.urg(),
                    theirs.ece(),
                    theirs.cwr()
                )
            );
            assert_eq!(p.window_len(), theirs.window_size());
            assert_eq!(p.checksum(), theirs.checksum());
            assert_eq!(p.urgent_at(), theirs.urgent_pointer());
            assert_eq!(p.options(), theirs.options());
            assert_eq!(p.payload(), &payload[..]);
            assert!(p.verify_checksum(&src, &dst));
            let mut copy = out[at..].to_vec();
            let mut q = Packet::new_unchecked(&mut copy[..]);
            q.set_checksum(0x1234);
            q.fill_checksum(&src, &dst);
            assert_eq!(q.checksum(), theirs.checksum());
        }
    }
}
