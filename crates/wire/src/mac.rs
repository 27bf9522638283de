//! Ethernet (MAC) addresses.

use std::fmt;
use std::str::FromStr;

/// A 48-bit Ethernet address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// Reads an address from the first six bytes of `b`. Panics if `b` is shorter.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&b[..6]);
        MacAddr(a)
    }

    /// The six bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// True for ff:ff:ff:ff:ff:ff.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        self.0 == [0xff; 6]
    }

    /// True if the group bit is set (multicast and broadcast).
    #[inline]
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// True for an individual (unicast) address.
    #[inline]
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The address as a 48-bit integer, for hashing and table keys.
    #[inline]
    pub fn to_u64(&self) -> u64 {
        let b = self.0;
        u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a string is not a MAC address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacParseError(pub String);

impl fmt::Display for MacParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid MAC address {:?}: expected six hex bytes like 02:00:00:00:00:01", self.0)
    }
}

impl std::error::Error for MacParseError {}

impl FromStr for MacAddr {
    type Err = MacParseError;

    /// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MacParseError(s.to_string());
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in &mut out {
            let p = parts.next().ok_or_else(err)?;
            if p.is_empty() || p.len() > 2 {
                return Err(err());
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() {
        let m: MacAddr = "02:00:0a:0B:ff:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0x0b, 0xff, 1]);
        assert_eq!(m.to_string(), "02:00:0a:0b:ff:01");
        assert_eq!("02-00-0a-0b-ff-01".parse::<MacAddr>().unwrap(), m);
        for bad in
            ["", "02:00:00:00:00", "02:00:00:00:00:00:00", "0g:00:00:00:00:00", "002:0:0:0:0:0"]
        {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
        assert!(MacAddr::BROADCAST.is_multicast() && MacAddr::BROADCAST.is_broadcast());
        assert!(m.is_unicast());
    }
}
