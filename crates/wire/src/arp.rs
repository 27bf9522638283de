//! ARP packets (RFC 826).
//!
//! [`Packet`] views any ARP packet: the four addresses sit at offsets that depend on the
//! hardware and protocol address lengths in the header, and `check_len` requires the buffer to
//! hold all of them. The typed address accessors are meant for the Ethernet/IPv4 form
//! ([`Packet::is_ethernet_ipv4`]); on other forms they read (or write) the first 6 or 4 bytes
//! of each address field, zero-padded, rather than panic. [`ArpRepr`] is Ethernet/IPv4 only.
//!
//! After [`Packet::check_len`] succeeds no accessor panics; [`ArpRepr::emit`] never panics on a
//! buffer of at least [`ArpRepr::buffer_len`] bytes.

use core::ops::Range;
use std::net::Ipv4Addr;

use crate::bytes::{get_u16, set_u16};
use crate::{ethertype, Error, MacAddr, Result};

mod field {
    use core::ops::Range;

    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const ADDRESSES: usize = 8;
}

/// The length of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = field::ADDRESSES + 2 * (6 + 4);

/// Operation: request.
pub const OP_REQUEST: u16 = 1;
/// Operation: reply.
pub const OP_REPLY: u16 = 2;
/// Hardware type: Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

/// A view of an ARP packet in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Packet::LEN` needs no type annotation.
impl Packet<&'static [u8]> {
    /// The length of an Ethernet/IPv4 ARP packet: 28.
    pub const LEN: usize = LEN;
}

/// Copies `src` into `dst` as far as both go and zeroes the rest of `dst`, so that an address
/// field of unexpected length is neither overrun nor left with stale bytes.
fn copy_padded(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(0);
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds the header and all four addresses.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails unless the buffer holds 8 bytes plus two hardware and two protocol addresses.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::ADDRESSES || len < self.tpa().end {
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

    /// The hardware type (1 for Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::HTYPE])
    }

    /// The protocol type (an EtherType; 0x0800 for IPv4).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::PTYPE])
    }

    /// The length of a hardware address in bytes.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// The length of a protocol address in bytes.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// The operation ([`OP_REQUEST`], [`OP_REPLY`], ...).
    #[inline]
    pub fn operation(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::OPER])
    }

    /// True for the Ethernet/IPv4 form: hardware type 1, protocol 0x0800, lengths 6 and 4.
    #[inline]
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HTYPE_ETHERNET
            && self.protocol_type() == ethertype::IPV4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }

    fn sha(&self) -> Range<usize> {
        let h = self.hardware_len() as usize;
        field::ADDRESSES..field::ADDRESSES + h
    }

    fn spa(&self) -> Range<usize> {
        let start = self.sha().end;
        start..start + self.protocol_len() as usize
    }

    fn tha(&self) -> Range<usize> {
        let start = self.spa().end;
        start..start + self.hardware_len() as usize
    }

    fn tpa(&self) -> Range<usize> {
        let start = self.tha().end;
        start..start + self.protocol_len() as usize
    }

    fn mac_at(&self, r: Range<usize>) -> MacAddr {
        let mut m = [0u8; 6];
        copy_padded(&mut m, &self.buffer.as_ref()[r]);
        MacAddr(m)
    }

    fn ipv4_at(&self, r: Range<usize>) -> Ipv4Addr {
        let mut a = [0u8; 4];
        copy_padded(&mut a, &self.buffer.as_ref()[r]);
        Ipv4Addr::from(a)
    }

    /// The sender's hardware address (see the module docs for non-Ethernet forms).
    #[inline]
    pub fn sender_hw_addr(&self) -> MacAddr {
        self.mac_at(self.sha())
    }

    /// The sender's protocol address (see the module docs for non-IPv4 forms).
    #[inline]
    pub fn sender_proto_addr(&self) -> Ipv4Addr {
        self.ipv4_at(self.spa())
    }

    /// The target's hardware address (see the module docs for non-Ethernet forms).
    #[inline]
    pub fn target_hw_addr(&self) -> MacAddr {
        self.mac_at(self.tha())
    }

    /// The target's protocol address (see the module docs for non-IPv4 forms).
    #[inline]
    pub fn target_proto_addr(&self) -> Ipv4Addr {
        self.ipv4_at(self.tpa())
    }

    /// The sender hardware address field as raw bytes, whatever its length.
    #[inline]
    pub fn sender_hw_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[self.sha()]
    }

    /// The sender protocol address field as raw bytes, whatever its length.
    #[inline]
    pub fn sender_proto_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[self.spa()]
    }

    /// The target hardware address field as raw bytes, whatever its length.
    #[inline]
    pub fn target_hw_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[self.tha()]
    }

    /// The target protocol address field as raw bytes, whatever its length.
    #[inline]
    pub fn target_proto_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[self.tpa()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the hardware type.
    #[inline]
    pub fn set_hardware_type(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::HTYPE], value)
    }

    /// Sets the protocol type.
    #[inline]
    pub fn set_protocol_type(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::PTYPE], value)
    }

    /// Sets the hardware address length (moves where the later fields are).
    #[inline]
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value
    }

    /// Sets the protocol address length (moves where the later fields are).
    #[inline]
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value
    }

    /// Sets the operation.
    #[inline]
    pub fn set_operation(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::OPER], value)
    }

    /// Sets the sender's hardware address.
    #[inline]
    pub fn set_sender_hw_addr(&mut self, addr: MacAddr) {
        let r = self.sha();
        copy_padded(&mut self.buffer.as_mut()[r], addr.as_bytes())
    }

    /// Sets the sender's protocol address.
    #[inline]
    pub fn set_sender_proto_addr(&mut self, addr: Ipv4Addr) {
        let r = self.spa();
        copy_padded(&mut self.buffer.as_mut()[r], &addr.octets())
    }

    /// Sets the target's hardware address.
    #[inline]
    pub fn set_target_hw_addr(&mut self, addr: MacAddr) {
        let r = self.tha();
        copy_padded(&mut self.buffer.as_mut()[r], addr.as_bytes())
    }

    /// Sets the target's protocol address.
    #[inline]
    pub fn set_target_proto_addr(&mut self, addr: Ipv4Addr) {
        let r = self.tpa();
        copy_padded(&mut self.buffer.as_mut()[r], &addr.octets())
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// [`OP_REQUEST`], [`OP_REPLY`] or another operation code.
    pub operation: u16,
    /// Sender hardware address.
    pub sender_hw: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in a request).
    pub target_hw: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Reads an ARP packet; fails unless it is of the Ethernet/IPv4 form.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<ArpRepr> {
        packet.check_len()?;
        if !packet.is_ethernet_ipv4() {
            return Err(Error);
        }
        Ok(ArpRepr {
            operation: packet.operation(),
            sender_hw: packet.sender_hw_addr(),
            sender_ip: packet.sender_proto_addr(),
            target_hw: packet.target_hw_addr(),
            target_ip: packet.target_proto_addr(),
        })
    }

    /// The packet's length: 28.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the whole packet (header and addresses) into the first 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_hardware_type(HTYPE_ETHERNET);
        packet.set_protocol_type(ethertype::IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_sender_hw_addr(self.sender_hw);
        packet.set_sender_proto_addr(self.sender_ip);
        packet.set_target_hw_addr(self.target_hw);
        packet.set_target_proto_addr(self.target_ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static REQUEST_BYTES: [u8; 28] = [
        0x00, 0x01, // Ethernet
        0x08, 0x00, // IPv4
        0x06, 0x04, // lengths
        0x00, 0x01, // request
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // sender MAC
        0x0a, 0x00, 0x00, 0x01, // 10.0.0.1
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // target MAC unknown
        0x0a, 0x00, 0x00, 0x02, // 10.0.0.2
    ];

    static REPLY_BYTES: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, // reply
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // sender MAC
        0x0a, 0x00, 0x00, 0x02, // 10.0.0.2
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // target MAC
        0x0a, 0x00, 0x00, 0x01, // 10.0.0.1
    ];

    fn request() -> ArpRepr {
        ArpRepr {
            operation: OP_REQUEST,
            sender_hw: MacAddr([2, 0, 0, 0, 0, 1]),
            sender_ip: Ipv4Addr::new(10, 0, 0, 1),
            target_hw: MacAddr([0; 6]),
            target_ip: Ipv4Addr::new(10, 0, 0, 2),
        }
    }

    fn reply() -> ArpRepr {
        ArpRepr {
            operation: OP_REPLY,
            sender_hw: MacAddr([2, 0, 0, 0, 0, 2]),
            sender_ip: Ipv4Addr::new(10, 0, 0, 2),
            target_hw: MacAddr([2, 0, 0, 0, 0, 1]),
            target_ip: Ipv4Addr::new(10, 0, 0, 1),
        }
    }

    #[test]
    fn deconstruct_request() {
        let p = Packet::new_checked(&REQUEST_BYTES[..]).unwrap();
        assert_eq!(p.hardware_type(), 1);
        assert_eq!(p.protocol_type(), 0x0800);
        assert_eq!(p.hardware_len(), 6);
        assert_eq!(p.protocol_len(), 4);
        assert_eq!(p.operation(), OP_REQUEST);
        assert!(p.is_ethernet_ipv4());
        assert_eq!(p.sender_hw_addr(), MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(p.sender_proto_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.target_hw_addr(), MacAddr([0; 6]));
        assert_eq!(p.target_proto_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.sender_hw_bytes(), &REQUEST_BYTES[8..14]);
        assert_eq!(p.sender_proto_bytes(), &REQUEST_BYTES[14..18]);
        assert_eq!(p.target_hw_bytes(), &REQUEST_BYTES[18..24]);
        assert_eq!(p.target_proto_bytes(), &REQUEST_BYTES[24..28]);
        assert_eq!(ArpRepr::parse(&p), Ok(request()));
        assert_eq!(Packet::LEN, 28);
    }

    #[test]
    fn deconstruct_reply() {
        let p = Packet::new_checked(&REPLY_BYTES[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p), Ok(reply()));
    }

    #[test]
    fn construct() {
        for (repr, bytes) in [(request(), REQUEST_BYTES), (reply(), REPLY_BYTES)] {
            let mut buf = [0xa5u8; 28];
            assert_eq!(repr.buffer_len(), 28);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
            assert_eq!(buf, bytes);
        }
        let mut buf = [0u8; 28];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_hardware_type(1);
        p.set_protocol_type(0x0800);
        p.set_hardware_len(6);
        p.set_protocol_len(4);
        p.set_operation(OP_REPLY);
        p.set_sender_hw_addr(MacAddr([2, 0, 0, 0, 0, 2]));
        p.set_sender_proto_addr(Ipv4Addr::new(10, 0, 0, 2));
        p.set_target_hw_addr(MacAddr([2, 0, 0, 0, 0, 1]));
        p.set_target_proto_addr(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(buf, REPLY_BYTES);
    }

    #[test]
    fn length_depends_on_address_lengths() {
        for len in 0..28 {
            assert_eq!(Packet::new_checked(&REQUEST_BYTES[..len]), Err(Error));
        }
        // hlen 0, plen 0: the header alone is a whole packet, and the typed accessors read
        // empty fields as zero instead of panicking.
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&[0, 1, 8, 0]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.sender_hw_addr(), MacAddr([0; 6]));
        assert_eq!(p.target_proto_addr(), Ipv4Addr::UNSPECIFIED);
        assert!(!p.is_ethernet_ipv4());
        assert_eq!(ArpRepr::parse(&p), Err(Error));
        // hlen 255, plen 255: 8 + 2 * 510 bytes are needed.
        let mut b = vec![0u8; 8 + 1020];
        b[4] = 255;
        b[5] = 255;
        assert!(Packet::new_checked(&b[..1027]).is_err());
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_sender_hw_addr(MacAddr([1, 2, 3, 4, 5, 6]));
        assert_eq!(p.sender_hw_addr(), MacAddr([1, 2, 3, 4, 5, 6]));
        p.set_target_proto_addr(Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(p.target_proto_addr(), Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(&p.target_proto_bytes()[..5], &[1, 2, 3, 4, 0]);
        // A 28-byte IPv6-over-ARP-style header (plen 16) is rejected for its length.
        let mut b = REQUEST_BYTES;
        b[5] = 16;
        assert_eq!(Packet::new_checked(&b[..]), Err(Error));
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = crate::testutil::Rng(13);
        for _ in 0..500 {
            let mut sha = [0u8; 6];
            let mut tha = [0u8; 6];
            let mut spa = [0u8; 4];
            let mut tpa = [0u8; 4];
            rng.fill(&mut sha);
            rng.fill(&mut tha);
            rng.fill(&mut spa);
            rng.fill(&mut tpa);
            let op = 1 + rng.below(2) as u16;
            let theirs = etherparse::ArpPacket::new(
                etherparse::ArpHardwareId::ETHERNET,
                etherparse::EtherType::IPV4,
                etherparse::ArpOperation(op),
                &sha,
                &spa,
                &tha,
                &tpa,
            )
            .unwrap();
            let bytes = theirs.to_bytes();
            let p = Packet::new_checked(&bytes[..]).unwrap();
            let r = ArpRepr::parse(&p).unwrap();
            assert_eq!(r.operation, op);
            assert_eq!(r.sender_hw.0, sha);
            assert_eq!(r.target_hw.0, tha);
            assert_eq!(r.sender_ip.octets(), spa);
            assert_eq!(r.target_ip.octets(), tpa);
            let mut out = [0u8; 28];
            r.emit(&mut Packet::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], &bytes[..]);
        }
    }
}
