//! IEEE 802.1Q VLAN tags.
//!
//! A [`Tag`] views the four bytes that *follow* the TPID (0x8100 or 0x88a8), which the
//! enclosing Ethernet header (or outer tag) holds as its EtherType: the tag control information
//! (PCP, DEI, VID) and the inner EtherType. Stacked tags are views over successive four-byte
//! steps of the payload.
//!
//! After [`Tag::check_len`] succeeds no accessor panics; [`VlanRepr::emit`] never panics on a
//! buffer of at least [`VlanRepr::buffer_len`] bytes.

use crate::bytes::{get_u16, set_u16};
use crate::{Error, Result};

mod field {
    use core::ops::{Range, RangeFrom};

    pub const TCI: Range<usize> = 0..2;
    pub const ETHERTYPE: Range<usize> = 2..4;
    pub const PAYLOAD: RangeFrom<usize> = 4..;
}

/// The length of a tag after its TPID.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

const VID_MASK: u16 = 0x0fff;
const DEI_BIT: u16 = 0x1000;

/// A view of an 802.1Q tag (TCI and inner EtherType) in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Tag::HEADER_LEN` needs no type annotation.
impl Tag<&'static [u8]> {
    /// The length of a tag after its TPID: 4.
    pub const HEADER_LEN: usize = HEADER_LEN;
}

impl<T: AsRef<[u8]>> Tag<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Tag<T> {
        Tag { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole tag.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Tag<T>> {
        let t = Self::new_unchecked(buffer);
        t.check_len()?;
        Ok(t)
    }

    /// Fails unless the buffer holds at least the 4 bytes of the tag.
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

    /// The tag control information: PCP (3 bits), DEI (1), VID (12).
    #[inline]
    pub fn tci(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::TCI])
    }

    /// The VLAN identifier (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & VID_MASK
    }

    /// The priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// The drop eligible indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & DEI_BIT != 0
    }

    /// The EtherType of what follows the tag (another TPID when tags are stacked).
    #[inline]
    pub fn inner_ethertype(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::ETHERTYPE])
    }

    /// Everything after the tag.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    /// Sets the whole tag control information.
    #[inline]
    pub fn set_tci(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::TCI], value)
    }

    /// Sets the VLAN identifier (low 12 bits of `vid`), keeping PCP and DEI.
    #[inline]
    pub fn set_vid(&mut self, vid: u16) {
        let tci = self.tci();
        self.set_tci((tci & !VID_MASK) | (vid & VID_MASK))
    }

    /// Sets the priority code point (low 3 bits of `pcp`), keeping DEI and VID.
    #[inline]
    pub fn set_pcp(&mut self, pcp: u8) {
        let tci = self.tci();
        self.set_tci((tci & 0x1fff) | ((pcp as u16 & 7) << 13))
    }

    /// Sets the drop eligible indicator, keeping PCP and VID.
    #[inline]
    pub fn set_dei(&mut self, dei: bool) {
        let tci = self.tci();
        self.set_tci(if dei { tci | DEI_BIT } else { tci & !DEI_BIT })
    }

    /// Sets the inner EtherType.
    #[inline]
    pub fn set_inner_ethertype(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::ETHERTYPE], value)
    }

    /// Everything after the tag, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Tag<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of an 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanRepr {
    /// Priority code point (0..=7).
    pub pcp: u8,
    /// VrDrop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (0..=4095).
    pub vid: u16,
    /// EtherType of what follows.
    pub inner_ethertype: u16,
}

impl VlanRepr {
    /// Reads a tag.
    pub fn parse<T: AsRef<[u8]>>(tag: &Tag<T>) -> Result<VlanRepr> {
        tag.check_len()?;
        Ok(VlanRepr {
            pcp: tag.pcp(),
            dei: tag.dei(),
            vid: tag.vid(),
            inner_ethertype: tag.inner_ethertype(),
        })
    }

    /// The tag's length: 4.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the tag; out-of-range `pcp` and `vid` are masked to their widths.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut Tag<T>) {
        let tci = ((self.pcp as u16 & 7) << 13)
            | if self.dei { DEI_BIT } else { 0 }
            | (self.vid & VID_MASK);
        tag.set_tci(tci);
        tag.set_inner_ethertype(self.inner_ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::{EthernetRepr, Frame};
    use crate::{ethertype, MacAddr};

    // An Ethernet frame with one 802.1Q tag: PCP 5, DEI 1, VID 0x123, carrying ARP.
    static FRAME_BYTES: [u8; 22] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src
        0x81, 0x00, // TPID
        0xb1, 0x23, // PCP 5 | DEI | VID 0x123
        0x08, 0x06, // inner ARP
        0xde, 0xad, 0xbe, 0xef,
    ];

    fn repr() -> VlanRepr {
        VlanRepr { pcp: 5, dei: true, vid: 0x123, inner_ethertype: ethertype::ARP }
    }

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(f.ethertype(), ethertype::VLAN);
        let t = Tag::new_checked(f.payload()).unwrap();
        assert_eq!(t.tci(), 0xb123);
        assert_eq!(t.vid(), 0x123);
        assert_eq!(t.pcp(), 5);
        assert!(t.dei());
        assert_eq!(t.inner_ethertype(), ethertype::ARP);
        assert_eq!(t.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(VlanRepr::parse(&t), Ok(repr()));
        assert_eq!(Tag::HEADER_LEN, 4);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 22];
        let eth = EthernetRepr {
            dst: MacAddr::BROADCAST,
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            ethertype: ethertype::VLAN,
        };
        let mut f = Frame::new_unchecked(&mut buf[..]);
        eth.emit(&mut f);
        let mut t = Tag::new_unchecked(f.payload_mut());
        repr().emit(&mut t);
        t.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, FRAME_BYTES);

        let mut buf = FRAME_BYTES;
        let mut t = Tag::new_unchecked(&mut buf[14..]);
        t.set_tci(0);
        t.set_pcp(5);
        t.set_dei(true);
        t.set_vid(0x123);
        t.set_inner_ethertype(ethertype::ARP);
        assert_eq!(buf, FRAME_BYTES);
    }

    #[test]
    fn set_vid_keeps_pcp_and_dei() {
        let mut buf = [0xff, 0xff, 0, 0];
        let mut t = Tag::new_unchecked(&mut buf[..]);
        t.set_vid(0xabcd);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (7, true, 0xbcd));
        t.set_dei(false);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (7, false, 0xbcd));
        t.set_pcp(2);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, false, 0xbcd));
        assert_eq!(Tag::new_checked(&buf[..3]), Err(Error));
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = crate::testutil::Rng(12);
        for _ in 0..500 {
            let tci = rng.next_u64() as u16;
            let inner = rng.next_u64() as u16;
            let mut buf = vec![0u8; 4];
            buf[..2].copy_from_slice(&tci.to_be_bytes());
            buf[2..].copy_from_slice(&inner.to_be_bytes());
            let theirs = etherparse::SingleVlanHeaderSlice::from_slice(&buf).unwrap();
            let ours = Tag::new_checked(&buf[..]).unwrap();
            assert_eq!(ours.vid(), theirs.vlan_identifier().value());
            assert_eq!(ours.pcp(), theirs.priority_code_point().value());
            assert_eq!(ours.dei(), theirs.drop_eligible_indicator());
            assert_eq!(ours.inner_ethertype(), theirs.ether_type().0);
        }
    }
}
