//! Multicast listener discovery messages (RFC 2710 MLDv1, RFC 3810 MLDv2): ICMPv6 messages, as
//! a switch snooping on them reads them.
//!
//! [`Packet`] views the ICMPv6 message (type, code, checksum first, as [`crate::icmpv6`]).
//! Queries and v1 reports and dones carry one multicast address at bytes 8..24; a v2 report
//! carries a record count at bytes 6..8 and group records from byte 8, walked by
//! [`Packet::records`] (the same walk as IGMPv3's, with 16-byte addresses). The checksum
//! covers the IPv6 pseudo-header: verify it with [`crate::icmpv6::Packet::verify_checksum`].
//!
//! After [`Packet::check_len`] (8 bytes, and 24 for every type but a v2 report) no accessor
//! panics.

use std::net::Ipv6Addr;

use crate::igmp::Records;
use crate::{Error, Result};

/// Multicast listener query (v1 and v2).
pub const QUERY: u8 = 130;
/// Version 1 multicast listener report.
pub const V1_REPORT: u8 = 131;
/// Version 1 multicast listener done.
pub const V1_DONE: u8 = 132;
/// Version 2 multicast listener report.
pub const V2_REPORT: u8 = 143;

/// Whether an ICMPv6 type is an MLD message.
#[inline]
pub fn is_mld(msg_type: u8) -> bool {
    matches!(msg_type, QUERY | V1_REPORT | V1_DONE | V2_REPORT)
}

/// A view of an MLD message in a byte buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking its length for its type.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails unless the buffer holds 8 bytes, and 24 (the address) for all but a v2 report.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        match b.first() {
            Some(&V2_REPORT) if b.len() >= 8 => Ok(()),
            Some(_) if b.len() >= 24 => Ok(()),
            _ => Err(Error),
        }
    }

    /// The ICMPv6 type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The multicast address of a query (:: in a general query), v1 report or done.
    #[inline]
    pub fn group_addr(&self) -> Ipv6Addr {
        let b = self.buffer.as_ref();
        let a: [u8; 16] = b.get(8..24).and_then(|a| a.try_into().ok()).unwrap_or([0; 16]);
        Ipv6Addr::from(a)
    }

    /// A v2 report's number of group records.
    #[inline]
    pub fn num_records(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }

    /// A v2 report's group records.
    #[inline]
    pub fn records(&self) -> Records<'_, 16> {
        Records::new(&self.buffer.as_ref()[8..], self.num_records())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icmpv6;
    use crate::igmp::{record, GroupRecord};

    #[test]
    fn v1_report_and_done() {
        // MLDv1 report for ff05::1:3 from fe80::1 (checksum filled by icmpv6).
        let mut b = vec![131, 0, 0, 0, 0, 0, 0, 0];
        b.extend(Ipv6Addr::new(0xff05, 0, 0, 0, 0, 0, 1, 3).octets());
        let (src, dst) = ("fe80::1".parse().unwrap(), "ff05::1:3".parse().unwrap());
        icmpv6::Packet::new_unchecked(&mut b[..]).fill_checksum(&src, &dst);
        assert!(icmpv6::Packet::new_unchecked(&b[..]).verify_checksum(&src, &dst));
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), V1_REPORT);
        assert_eq!(p.group_addr(), dst);
        assert!(Packet::new_checked(&b[..23]).is_err());
        b[0] = V1_DONE;
        assert_eq!(Packet::new_checked(&b[..]).unwrap().msg_type(), V1_DONE);
        assert!(is_mld(V1_DONE) && is_mld(QUERY) && !is_mld(135));
    }

    #[test]
    fn v2_report_records() {
        // As Linux sends it on a join of ff0e::1234: one CHANGE_TO_EXCLUDE {} record.
        let g = Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 0, 0x1234).octets();
        let mut b = vec![143, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0];
        b.extend(g);
        let p = Packet::new_checked(&b[..]).unwrap();
        let r: Vec<_> = p.records().collect();
        assert_eq!(
            r,
            vec![Ok(GroupRecord { record_type: record::CHANGE_TO_EXCLUDE, sources: 0, group: g })]
        );
        // A v2 report needs only its 8-byte header; its records are checked one by one.
        assert!(Packet::new_checked(&b[..8]).is_ok());
        let p = Packet::new_checked(&b[..20]).unwrap();
        assert_eq!(p.records().collect::<Vec<_>>(), vec![Err(Error)]);
    }
}
