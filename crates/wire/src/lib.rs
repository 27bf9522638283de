//! Zero-copy views over packet headers, and the Internet checksum.
//!
//! Each protocol module has a view, `Packet<T: AsRef<[u8]>> { buffer: T }` (`ethernet::Frame`,
//! `vlan::Tag`), that reads and writes fields in place at fixed byte offsets, and a small `Copy`
//! `Repr` for slow paths that would rather hold values than offsets.
//!
//! The contract, in every module:
//! * `new_unchecked` wraps any buffer; its accessors may panic if the buffer is too short.
//! * `new_checked` is `new_unchecked` followed by `check_len`. Once `check_len` has succeeded,
//!   no accessor (getter or setter) panics, whatever the bytes say. `check_len` checks lengths
//!   only; what the values mean (version numbers, checksums) is left to the caller, who may
//!   want to count those drops separately.
//! * `Repr::parse` checks lengths *and* meaning; `Repr::emit` never panics on a buffer of at
//!   least `Repr::buffer_len()` bytes. Do not use `new_checked` on a buffer about to be
//!   emitted into: its stale contents would decide whether the check passes.
//!
//! Nothing here allocates (save the hidden fuzzing helpers) or formats on the packet path, and
//! there is no `unsafe`. Every parser is fed random and mutated frames by `tests/no_panic.rs`
//! and by the cargo-fuzz targets in the workspace's `fuzz/` directory.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

pub mod arp;
pub mod checksum;
pub mod ethernet;
#[doc(hidden)]
pub mod fuzzing;
pub mod icmpv4;
pub mod icmpv6;
pub mod igmp;
pub mod ipv4;
pub mod ipv6;
mod mac;
pub mod mld;
pub mod ndp;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use arp::{ArpRepr, Packet as ArpPacket};
pub use ethernet::{EthernetRepr, Frame as EthernetFrame};
#[doc(hidden)]
pub use fuzzing::fuzz_all;
pub use icmpv4::{Icmpv4Repr, Packet as Icmpv4Packet};
pub use icmpv6::{Icmpv6Repr, Packet as Icmpv6Packet};
pub use ipv4::{Ipv4Repr, Packet as Ipv4Packet};
pub use ipv6::{Ipv6Repr, Packet as Ipv6Packet};
pub use mac::{MacAddr, MacParseError};
pub use tcp::{Packet as TcpPacket, TcpRepr};
pub use udp::{Packet as UdpPacket, UdpRepr};
pub use vlan::{Tag as VlanTag, VlanRepr};

/// The one error: the bytes do not form a well-formed header of the expected kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed packet")
    }
}

impl std::error::Error for Error {}

/// `Result` with [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// EtherType values (IEEE 802) for the Ethernet type / 802.1Q inner-type field.
pub mod ethertype {
    /// Internet Protocol version 4.
    pub const IPV4: u16 = 0x0800;
    /// Address Resolution Protocol.
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q VLAN tag (C-tag TPID).
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service tag (S-tag TPID, "QinQ").
    pub const QINQ: u16 = 0x88a8;
    /// Internet Protocol version 6.
    pub const IPV6: u16 = 0x86dd;
}

/// IP protocol / IPv6 next-header numbers (IANA).
pub mod ip_proto {
    /// IPv6 Hop-by-Hop Options.
    pub const HOPOPTS: u8 = 0;
    /// Internet Control Message Protocol (IPv4).
    pub const ICMP: u8 = 1;
    /// Internet Group Management Protocol.
    pub const IGMP: u8 = 2;
    /// Transmission Control Protocol.
    pub const TCP: u8 = 6;
    /// User Datagram Protocol.
    pub const UDP: u8 = 17;
    /// IPv6 Routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating Security Payload.
    pub const ESP: u8 = 50;
    /// Authentication Header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 No Next Header.
    pub const NONE: u8 = 59;
    /// IPv6 Destination Options.
    pub const DSTOPTS: u8 = 60;
}

/// Big-endian reads and writes of fixed-size fields; the slices come from `field` ranges of
/// the right length, so the compiler drops the inner bounds checks.
pub(crate) mod bytes {
    #[inline(always)]
    pub fn get_u16(b: &[u8]) -> u16 {
        u16::from_be_bytes([b[0], b[1]])
    }

    #[inline(always)]
    pub fn get_u32(b: &[u8]) -> u32 {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    #[inline(always)]
    pub fn set_u16(b: &mut [u8], v: u16) {
        b[..2].copy_from_slice(&v.to_be_bytes());
    }

    #[inline(always)]
    pub fn set_u32(b: &mut [u8], v: u32) {
        b[..4].copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    /// A deterministic splitmix64 generator, so failing tests reproduce: the stream of
    /// [`crate::fuzzing::Rng`], with the draws these tests were written against.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next_u64(&mut self) -> u64 {
            let mut r = crate::fuzzing::Rng(self.0);
            let v = r.next_u64();
            self.0 = r.0;
            v
        }

        pub fn below(&mut self, n: u64) -> u64 {
            self.next_u64() % n
        }

        pub fn fill(&mut self, buf: &mut [u8]) {
            for b in buf {
                *b = self.next_u64() as u8;
            }
        }

        pub fn bytes(&mut self, len: usize) -> Vec<u8> {
            let mut v = vec![0; len];
            self.fill(&mut v);
            v
        }

        /// Random bytes of a random length below `n`.
        pub fn bytes_below(&mut self, n: u64) -> Vec<u8> {
            let len = self.below(n) as usize;
            self.bytes(len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_a_plain_std_error() {
        let e: Box<dyn std::error::Error> = Box::new(Error);
        assert_eq!(e.to_string(), "malformed packet");
        let r: Result<()> = Err(Error);
        assert_eq!(r, Err(Error));
    }

    #[test]
    fn constants_match_iana() {
        assert_eq!(
            [ethertype::IPV4, ethertype::ARP, ethertype::VLAN, ethertype::QINQ, ethertype::IPV6],
            [0x0800, 0x0806, 0x8100, 0x88a8, 0x86dd]
        );
        assert_eq!(
            [
                ip_proto::HOPOPTS,
                ip_proto::ICMP,
                ip_proto::TCP,
                ip_proto::UDP,
                ip_proto::ROUTING,
                ip_proto::FRAGMENT,
                ip_proto::ESP,
                ip_proto::AH,
                ip_proto::ICMPV6,
                ip_proto::NONE,
                ip_proto::DSTOPTS
            ],
            [0, 1, 6, 17, 43, 44, 50, 51, 58, 59, 60]
        );
    }
}
