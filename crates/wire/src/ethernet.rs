//! Ethernet II frames.
//!
//! After [`Frame::check_len`] succeeds no accessor panics; [`EthernetRepr::emit`] never panics
//! on a buffer of at least [`EthernetRepr::buffer_len`] bytes. The frame check sequence is not
//! part of the view: port backends strip it.

use crate::bytes::{get_u16, set_u16};
use crate::{Error, MacAddr, Result};

mod field {
    use core::ops::{Range, RangeFrom};

    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

/// The length of an Ethernet II header (no 802.1Q tag).
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A view of an Ethernet II frame in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `Frame::HEADER_LEN` needs no type annotation.
impl Frame<&'static [u8]> {
    /// The length of an Ethernet II header: 14.
    pub const HEADER_LEN: usize = HEADER_LEN;
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Fails unless the buffer holds at least the 14-byte header.
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

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::DESTINATION])
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SOURCE])
    }

    /// The EtherType (see [`crate::ethertype`]).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get_u16(&self.buffer.as_ref()[field::ETHERTYPE])
    }

    /// The 14-byte header.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// Everything after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(addr.as_bytes())
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(addr.as_bytes())
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, value: u16) {
        set_u16(&mut self.buffer.as_mut()[field::ETHERTYPE], value)
    }

    /// Everything after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Frame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The values of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src: MacAddr,
    /// Destination address.
    pub dst: MacAddr,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header of a frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src: frame.src_addr(),
            dst: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// The header's length: 14.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first 14 bytes of the frame.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_dst_addr(self.dst);
        frame.set_src_addr(self.src);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethertype;

    static FRAME_BYTES: [u8; 64] = [
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, // dst
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, // src
        0x08, 0x00, // IPv4
        0xaa, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xff,
    ];

    static PAYLOAD_BYTES: [u8; 50] = {
        let mut p = [0u8; 50];
        p[0] = 0xaa;
        p[49] = 0xff;
        p
    };

    fn repr() -> EthernetRepr {
        EthernetRepr {
            dst: MacAddr([1, 2, 3, 4, 5, 6]),
            src: MacAddr([0x11, 0x12, 0x13, 0x14, 0x15, 0x16]),
            ethertype: ethertype::IPV4,
        }
    }

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(f.dst_addr(), MacAddr([1, 2, 3, 4, 5, 6]));
        assert_eq!(f.src_addr(), MacAddr([0x11, 0x12, 0x13, 0x14, 0x15, 0x16]));
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.header(), &FRAME_BYTES[..14]);
        assert_eq!(f.payload(), &PAYLOAD_BYTES[..]);
        assert_eq!(EthernetRepr::parse(&f), Ok(repr()));
        assert_eq!(f.as_ref(), &FRAME_BYTES[..]);
        assert_eq!(f.into_inner(), &FRAME_BYTES[..]);
    }

    #[test]
    fn construct() {
        let mut buf = vec![0xa5; 64];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        f.set_dst_addr(MacAddr([1, 2, 3, 4, 5, 6]));
        f.set_src_addr(MacAddr([0x11, 0x12, 0x13, 0x14, 0x15, 0x16]));
        f.set_ethertype(ethertype::IPV4);
        f.payload_mut().copy_from_slice(&PAYLOAD_BYTES);
        assert_eq!(buf, FRAME_BYTES);

        let mut buf = vec![0xa5; 64];
        let r = repr();
        assert_eq!(r.buffer_len(), 14);
        r.emit(&mut Frame::new_unchecked(&mut buf));
        buf[14..].copy_from_slice(&PAYLOAD_BYTES);
        assert_eq!(buf, FRAME_BYTES);
    }

    #[test]
    fn length_checks() {
        for len in 0..14 {
            assert_eq!(Frame::new_checked(&FRAME_BYTES[..len]), Err(Error));
        }
        let f = Frame::new_checked(&FRAME_BYTES[..14]).unwrap();
        assert!(f.payload().is_empty());
    }

    #[test]
    fn etherparse_agrees() {
        let mut rng = crate::testutil::Rng(11);
        for _ in 0..200 {
            let mut src = [0u8; 6];
            let mut dst = [0u8; 6];
            rng.fill(&mut src);
            rng.fill(&mut dst);
            let et = rng.next_u64() as u16;
            let h = etherparse::Ethernet2Header {
                source: src,
                destination: dst,
                ether_type: etherparse::EtherType(et),
            };
            let mut buf = h.to_bytes().to_vec();
            buf.extend_from_slice(&[1, 2, 3]);
            let f = Frame::new_checked(&buf[..]).unwrap();
            assert_eq!(f.src_addr().0, src);
            assert_eq!(f.dst_addr().0, dst);
            assert_eq!(f.ethertype(), et);
            assert_eq!(f.payload(), &[1, 2, 3]);
        }
    }
}
