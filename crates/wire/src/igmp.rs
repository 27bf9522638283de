//! IGMP messages (RFC 1112 v1, RFC 2236 v2, RFC 3376 v3), as a switch snooping on them reads
//! them.
//!
//! [`Packet`] views one IGMP message (the IPv4 payload). Every version shares the first 8
//! bytes: type, max response code, checksum, and a group address (v1/v2 messages and queries)
//! or, in a v3 report, a reserved word and the number of group records. [`Packet::records`]
//! walks a v3 report's records; [`Records`] is shared with MLDv2 ([`crate::mld`]), whose
//! records differ only in address length.
//!
//! After [`Packet::check_len`] (8 bytes) no accessor panics. The record walk checks each
//! record's length against the buffer and yields `Err` for one that runs past it (and stops).

use std::net::Ipv4Addr;

use crate::{checksum, Error, Result};

/// Membership query (all versions).
pub const MEMBERSHIP_QUERY: u8 = 0x11;
/// Version 1 membership report.
pub const V1_REPORT: u8 = 0x12;
/// Version 2 membership report.
pub const V2_REPORT: u8 = 0x16;
/// Version 2 leave group.
pub const LEAVE_GROUP: u8 = 0x17;
/// Version 3 membership report.
pub const V3_REPORT: u8 = 0x22;

/// Group record types of IGMPv3 and MLDv2 reports (RFC 3376 §4.2.12, RFC 3810 §5.2.12).
pub mod record {
    /// Current state: include the listed sources.
    pub const MODE_IS_INCLUDE: u8 = 1;
    /// Current state: exclude the listed sources.
    pub const MODE_IS_EXCLUDE: u8 = 2;
    /// Filter mode changed to include.
    pub const CHANGE_TO_INCLUDE: u8 = 3;
    /// Filter mode changed to exclude.
    pub const CHANGE_TO_EXCLUDE: u8 = 4;
    /// Sources added.
    pub const ALLOW_NEW_SOURCES: u8 = 5;
    /// Sources removed.
    pub const BLOCK_OLD_SOURCES: u8 = 6;
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The fixed header's length.
pub const HEADER_LEN: usize = 8;

/// A view of an IGMP message in a byte buffer.
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

    /// Wraps a buffer after checking that it holds the 8-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails unless the buffer holds the 8-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The max response code (0 in v1 messages: a query with 0 is a v1 query).
    #[inline]
    pub fn max_resp_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Whether the checksum over the whole message (the buffer) is right.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }

    /// The group address of a v1/v2 message or a query (0.0.0.0 in a general query).
    #[inline]
    pub fn group_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[4], b[5], b[6], b[7])
    }

    /// A v3 report's number of group records.
    #[inline]
    pub fn num_records(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// A v3 report's group records.
    #[inline]
    pub fn records(&self) -> Records<'_, 4> {
        Records::new(&self.buffer.as_ref()[HEADER_LEN..], self.num_records())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Computes and writes the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        let b = self.buffer.as_mut();
        b[2..4].fill(0);
        let c = !checksum::data(b);
        b[2..4].copy_from_slice(&c.to_be_bytes());
    }
}

/// One group record of an IGMPv3 (`A` = 4) or MLDv2 (`A` = 16) report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRecord<const A: usize> {
    /// One of [`record`]'s types (others are possible and mean nothing known).
    pub record_type: u8,
    /// How many sources the record lists.
    pub sources: u16,
    /// The multicast address.
    pub group: [u8; A],
}

/// The group records of a report, each checked against the buffer.
#[derive(Debug, Clone)]
pub struct Records<'a, const A: usize> {
    rest: &'a [u8],
    left: u16,
}

impl<'a, const A: usize> Records<'a, A> {
    pub(crate) fn new(rest: &'a [u8], count: u16) -> Records<'a, A> {
        Records { rest, left: count }
    }
}

impl<const A: usize> Iterator for Records<'_, A> {
    type Item = Result<GroupRecord<A>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = self.rest;
        let fixed = 4 + A;
        let len = r.get(..fixed).map(|h| fixed + h[1] as usize * 4 + be16(h, 2) as usize * A);
        match len {
            Some(len) if len <= r.len() => {
                let mut group = [0; A];
                group.copy_from_slice(&r[4..fixed]);
                let rec = GroupRecord { record_type: r[0], sources: be16(r, 2), group };
                self.rest = &r[len..];
                Some(Ok(rec))
            }
            _ => {
                self.left = 0;
                Some(Err(Error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IGMPv2 report for 239.1.2.3 (as Linux sends it).
    const V2: [u8; 8] = [0x16, 0x00, 0xf8, 0xfa, 0xef, 0x01, 0x02, 0x03];

    #[test]
    fn v2_report() {
        let p = Packet::new_checked(&V2[..]).unwrap();
        assert_eq!(p.msg_type(), V2_REPORT);
        assert_eq!(p.group_addr(), Ipv4Addr::new(239, 1, 2, 3));
        assert!(p.verify_checksum());
        let mut b = V2;
        b[2..4].fill(0);
        let mut q = Packet::new_unchecked(&mut b[..]);
        q.fill_checksum();
        assert_eq!(b, V2);
        assert!(Packet::new_checked(&V2[..7]).is_err());
    }

    #[test]
    fn v3_report_records() {
        // Two records: EXCLUDE {} for 239.0.0.1 (a join), INCLUDE {10.0.0.9} for 232.1.1.1 with
        // one word of auxiliary data; checksum filled below.
        let mut b = vec![0x22, 0, 0, 0, 0, 0, 0, 2];
        b.extend([4, 0, 0, 0, 239, 0, 0, 1]);
        b.extend([1, 1, 0, 1, 232, 1, 1, 1, 10, 0, 0, 9, 0xaa, 0xbb, 0xcc, 0xdd]);
        Packet::new_unchecked(&mut b[..]).fill_checksum();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.msg_type(), V3_REPORT);
        let r: Vec<_> = p.records().collect();
        assert_eq!(
            r,
            vec![
                Ok(GroupRecord {
                    record_type: record::CHANGE_TO_EXCLUDE,
                    sources: 0,
                    group: [239, 0, 0, 1]
                }),
                Ok(GroupRecord {
                    record_type: record::MODE_IS_INCLUDE,
                    sources: 1,
                    group: [232, 1, 1, 1]
                }),
            ]
        );
        // Truncated in the second record's sources: the first is read, the second is an error,
        // and the walk stops.
        let p = Packet::new_checked(&b[..b.len() - 5]).unwrap();
        let r: Vec<_> = p.records().collect();
        assert_eq!(r.len(), 2);
        assert!(r[0].is_ok() && r[1].is_err());
        // A count larger than what is there.
        b[7] = 9;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.records().filter(|r| r.is_ok()).count(), 2);
        assert_eq!(p.records().count(), 3);
    }
}
