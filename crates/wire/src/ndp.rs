//! Neighbor Discovery (RFC 4861): Neighbor Solicitation and Advertisement.
//!
//! [`NeighborSolicit`] and [`NeighborAdvert`] view the whole ICMPv6 message, type byte
//! included (use [`crate::icmpv6::Packet`] for the type, code and checksum). Their `check_len`
//! requires the 24-byte fixed part *and* well-formed options: RFC 4861 §4.6 says a message
//! with a zero-length option is discarded whole, so a view that passes holds no malformed
//! option and [`NdpOptions`] yields only `Ok`. The semantic checks of §7.1.1 (hop limit 255,
//! code 0, target not multicast) are the caller's.
//!
//! After `check_len` succeeds no accessor panics. The emit helpers write into a buffer of at
//! least [`LEN`] bytes, plus [`LINK_ADDR_OPT_LEN`] when a link-layer option is given.

use std::iter::FusedIterator;
use std::net::Ipv6Addr;

use crate::{icmpv6, Error, MacAddr, Result};

mod field {
    use core::ops::{Range, RangeFrom};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const FLAGS: usize = 4;
    pub const RESERVED: Range<usize> = 4..8;
    pub const TARGET: Range<usize> = 8..24;
    pub const OPTIONS: RangeFrom<usize> = 24..;
}

/// The length of a solicitation or advertisement without options.
pub const LEN: usize = field::OPTIONS.start;
/// The length of a link-layer address option for Ethernet.
pub const LINK_ADDR_OPT_LEN: usize = 8;

/// Option type: source link-layer address.
pub const OPT_SOURCE_LINK_ADDR: u8 = 1;
/// Option type: target link-layer address.
pub const OPT_TARGET_LINK_ADDR: u8 = 2;

const FLAG_ROUTER: u8 = 0x80;
const FLAG_SOLICITED: u8 = 0x40;
const FLAG_OVERRIDE: u8 = 0x20;

/// One Neighbor Discovery option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdpOption<'a> {
    /// Source link-layer address (type 1), read as an Ethernet address.
    SourceLinkAddr(MacAddr),
    /// Target link-layer address (type 2), read as an Ethernet address.
    TargetLinkAddr(MacAddr),
    /// Any other option: its type and the bytes after the type and length.
    Other {
        /// The option type.
        kind: u8,
        /// The option's bytes after its type and length bytes.
        data: &'a [u8],
    },
}

/// An iterator over NDP options; yields one `Err` and stops at a malformed option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdpOptions<'a> {
    rest: &'a [u8],
}

impl<'a> NdpOptions<'a> {
    /// Iterates over the options in `bytes` (everything after a message's fixed part).
    pub fn new(bytes: &'a [u8]) -> NdpOptions<'a> {
        NdpOptions { rest: bytes }
    }

    /// Succeeds if every option is well formed.
    pub fn validate(self) -> Result<()> {
        for o in self {
            o?;
        }
        Ok(())
    }
}

impl<'a> Iterator for NdpOptions<'a> {
    type Item = Result<NdpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.rest;
        if bytes.is_empty() {
            return None;
        }
        // Length is in units of 8 octets, type and length bytes included.
        let len = bytes.get(1).map_or(0, |&l| l as usize * 8);
        if len == 0 || len > bytes.len() {
            self.rest = &[];
            return Some(Err(Error));
        }
        let (opt, rest) = bytes.split_at(len);
        self.rest = rest;
        Some(Ok(match opt[0] {
            OPT_SOURCE_LINK_ADDR => NdpOption::SourceLinkAddr(MacAddr::from_bytes(&opt[2..8])),
            OPT_TARGET_LINK_ADDR => NdpOption::TargetLinkAddr(MacAddr::from_bytes(&opt[2..8])),
            kind => NdpOption::Other { kind, data: &opt[2..] },
        }))
    }
}

impl FusedIterator for NdpOptions<'_> {}

/// The first source link-layer address option; `None` if there is none or any option is
/// malformed.
pub fn source_link_addr<'a>(
    options: impl IntoIterator<Item = Result<NdpOption<'a>>>,
) -> Option<MacAddr> {
    let mut found = None;
    for o in options {
        match o {
            Err(_) => return None,
            Ok(NdpOption::SourceLinkAddr(m)) if found.is_none() => found = Some(m),
            Ok(_) => {}
        }
    }
    found
}

/// The first target link-layer address option; `None` if there is none or any option is
/// malformed.
pub fn target_link_addr<'a>(
    options: impl IntoIterator<Item = Result<NdpOption<'a>>>,
) -> Option<MacAddr> {
    let mut found = None;
    for o in options {
        match o {
            Err(_) => return None,
            Ok(NdpOption::TargetLinkAddr(m)) if found.is_none() => found = Some(m),
            Ok(_) => {}
        }
    }
    found
}

fn check(buffer: &[u8]) -> Result<()> {
    if buffer.len() < LEN {
        return Err(Error);
    }
    NdpOptions::new(&buffer[field::OPTIONS]).validate()
}

fn target(buffer: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&buffer[field::TARGET]);
    Ipv6Addr::from(a)
}

/// A view of a Neighbor Solicitation (the whole ICMPv6 message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborSolicit<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `NeighborSolicit::LEN` needs no type annotation.
impl NeighborSolicit<&'static [u8]> {
    /// The length without options: 24.
    pub const LEN: usize = LEN;
}

impl<T: AsRef<[u8]>> NeighborSolicit<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> NeighborSolicit<T> {
        NeighborSolicit { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<NeighborSolicit<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails unless the buffer holds the 24-byte fixed part and well-formed options.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        check(self.buffer.as_ref())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The address being resolved.
    #[inline]
    pub fn target_addr(&self) -> Ipv6Addr {
        target(self.buffer.as_ref())
    }

    /// The options after the fixed part.
    #[inline]
    pub fn options(&self) -> NdpOptions<'_> {
        NdpOptions::new(&self.buffer.as_ref()[field::OPTIONS])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NeighborSolicit<T> {
    /// Sets the address being resolved.
    #[inline]
    pub fn set_target_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&addr.octets())
    }

    /// The options, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::OPTIONS]
    }
}

/// A view of a Neighbor Advertisement (the whole ICMPv6 message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborAdvert<T: AsRef<[u8]>> {
    buffer: T,
}

// On one concrete type so that `NeighborAdvert::LEN` needs no type annotation.
impl NeighborAdvert<&'static [u8]> {
    /// The length without options: 24.
    pub const LEN: usize = LEN;
}

impl<T: AsRef<[u8]>> NeighborAdvert<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short one.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> NeighborAdvert<T> {
        NeighborAdvert { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<NeighborAdvert<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Fails unless the buffer holds the 24-byte fixed part and well-formed options.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        check(self.buffer.as_ref())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The sender is a router.
    #[inline]
    pub fn router_flag(&self) -> bool {
        self.flags() & FLAG_ROUTER != 0
    }

    /// The advertisement answers a solicitation.
    #[inline]
    pub fn solicited_flag(&self) -> bool {
        self.flags() & FLAG_SOLICITED != 0
    }

    /// The advertisement should override a cached link-layer address.
    #[inline]
    pub fn override_flag(&self) -> bool {
        self.flags() & FLAG_OVERRIDE != 0
    }

    /// The address whose link-layer address is advertised.
    #[inline]
    pub fn target_addr(&self) -> Ipv6Addr {
        target(self.buffer.as_ref())
    }

    /// The options after the fixed part.
    #[inline]
    pub fn options(&self) -> NdpOptions<'_> {
        NdpOptions::new(&self.buffer.as_ref()[field::OPTIONS])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NeighborAdvert<T> {
    fn set_flag(&mut self, bit: u8, value: bool) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = if value { *b | bit } else { *b & !bit };
    }

    /// Sets the router flag.
    #[inline]
    pub fn set_router_flag(&mut self, value: bool) {
        self.set_flag(FLAG_ROUTER, value)
    }

    /// Sets the solicited flag.
    #[inline]
    pub fn set_solicited_flag(&mut self, value: bool) {
        self.set_flag(FLAG_SOLICITED, value)
    }

    /// Sets the override flag.
    #[inline]
    pub fn set_override_flag(&mut self, value: bool) {
        self.set_flag(FLAG_OVERRIDE, value)
    }

    /// Sets the advertised address.
    #[inline]
    pub fn set_target_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&addr.octets())
    }

    /// The options, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::OPTIONS]
    }
}

/// The flags of a Neighbor Advertisement; a `(router, solicited, override)` tuple converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NaFlags {
    /// The sender is a router.
    pub router: bool,
    /// The advertisement answers a solicitation.
    pub solicited: bool,
    /// The advertisement should override a cached link-layer address.
    pub override_: bool,
}

impl From<(bool, bool, bool)> for NaFlags {
    fn from((router, solicited, override_): (bool, bool, bool)) -> NaFlags {
        NaFlags { router, solicited, override_ }
    }
}

/// Writes the fixed part and an optional link-layer address option; returns the length.
fn emit(
    buf: &mut [u8],
    msg_type: u8,
    flags: u8,
    target: Ipv6Addr,
    opt: u8,
    ll: Option<MacAddr>,
) -> usize {
    buf[field::TYPE] = msg_type;
    buf[field::CODE] = 0;
    buf[field::CHECKSUM].fill(0);
    buf[field::RESERVED].fill(0);
    buf[field::FLAGS] = flags;
    buf[field::TARGET].copy_from_slice(&target.octets());
    match ll {
        None => LEN,
        Some(mac) => {
            let o = &mut buf[LEN..LEN + LINK_ADDR_OPT_LEN];
            o[0] = opt;
            o[1] = 1;
            o[2..].copy_from_slice(mac.as_bytes());
            LEN + LINK_ADDR_OPT_LEN
        }
    }
}

/// Writes a Neighbor Solicitation for `target` (with a source link-layer address option if
/// given) with checksum 0, for the caller to fill with the pseudo-header; returns its length.
pub fn emit_neighbor_solicit(
    buf: &mut [u8],
    target: Ipv6Addr,
    source_ll: Option<MacAddr>,
) -> usize {
    emit(buf, icmpv6::NEIGHBOR_SOLICIT, 0, target, OPT_SOURCE_LINK_ADDR, source_ll)
}

/// Writes a Neighbor Advertisement for `target` with `flags` (router, solicited, override) and
/// a target link-layer address option if given, with checksum 0; returns its length.
pub fn emit_neighbor_advert(
    buf: &mut [u8],
    target: Ipv6Addr,
    flags: impl Into<NaFlags>,
    target_ll: Option<MacAddr>,
) -> usize {
    let f = flags.into();
    let bits = if f.router { FLAG_ROUTER } else { 0 }
        | if f.solicited { FLAG_SOLICITED } else { 0 }
        | if f.override_ { FLAG_OVERRIDE } else { 0 };
    emit(buf, icmpv6::NEIGHBOR_ADVERT, bits, target, OPT_TARGET_LINK_ADDR, target_ll)
}

/// The solicited-node multicast address of `addr`: ff02::1:ff00:0 plus its low 24 bits.
#[inline]
pub fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15]])
}

/// The Ethernet address an IPv6 multicast address maps to: 33:33 plus its low 32 bits
/// (RFC 2464 §7).
#[inline]
pub fn multicast_mac(addr: &Ipv6Addr) -> MacAddr {
    let o = addr.octets();
    MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icmpv6::Packet as Icmpv6Packet;
    use crate::{ip_proto, ipv6};

    const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const TARGET: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0xab, 0xcdef);
    const MAC: MacAddr = MacAddr([0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc]);

    // NS for 2001:db8::ab:cdef from fe80::1 to its solicited-node group, with a source
    // link-layer address option; the checksum is filled.
    static NS_BYTES: [u8; 32] = [
        0x87, 0x00, 0xf1, 0xb7, 0x00, 0x00, 0x00, 0x00, //
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
        0xef, //
        0x01, 0x01, 0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc,
    ];

    // NA (router, solicited, override) for the same target, to fe80::1, with a target
    // link-layer address option and an unknown option after it.
    static NA_BYTES: [u8; 48] = [
        0x88, 0x00, 0x00, 0x00, 0xe0, 0x00, 0x00, 0x00, //
        0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd,
        0xef, //
        0x02, 0x01, 0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc, //
        0xfe, 0x02, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
        0x0e,
    ];

    #[test]
    fn deconstruct_ns() {
        let ns = NeighborSolicit::new_checked(&NS_BYTES[..]).unwrap();
        assert_eq!(ns.target_addr(), TARGET);
        let opts: Vec<_> = ns.options().collect();
        assert_eq!(opts, vec![Ok(NdpOption::SourceLinkAddr(MAC))]);
        assert_eq!(source_link_addr(ns.options()), Some(MAC));
        assert_eq!(target_link_addr(ns.options()), None);
        let icmp = Icmpv6Packet::new_checked(&NS_BYTES[..]).unwrap();
        assert_eq!(icmp.msg_type(), icmpv6::NEIGHBOR_SOLICIT);
        assert!(icmp.verify_checksum(&SRC, &solicited_node(&TARGET)));
        assert_eq!(NeighborSolicit::LEN, 24);
    }

    #[test]
    fn construct_ns() {
        let mut buf = [0xa5u8; 40];
        let n = emit_neighbor_solicit(&mut buf, TARGET, Some(MAC));
        assert_eq!(n, 32);
        let mut icmp = Icmpv6Packet::new_unchecked(&mut buf[..n]);
        assert_eq!(icmp.checksum(), 0);
        icmp.fill_checksum(&SRC, &solicited_node(&TARGET));
        assert_eq!(&buf[..n], &NS_BYTES);

        let mut buf = [0xa5u8; 24];
        assert_eq!(emit_neighbor_solicit(&mut buf, TARGET, None), 24);
        let ns = NeighborSolicit::new_checked(&buf[..]).unwrap();
        assert_eq!(ns.target_addr(), TARGET);
        assert_eq!(ns.options().next(), None);
        assert_eq!(source_link_addr(ns.options()), None);

        let mut buf = NS_BYTES;
        let mut ns = NeighborSolicit::new_unchecked(&mut buf[..]);
        ns.set_target_addr(Ipv6Addr::LOCALHOST);
        ns.options_mut()[2] = 0x04;
        assert_eq!(ns.target_addr(), Ipv6Addr::LOCALHOST);
        assert_eq!(source_link_addr(ns.options()), Some(MacAddr([4, 0, 0, 0xaa, 0xbb, 0xcc])));
    }

    #[test]
    fn deconstruct_na() {
        let na = NeighborAdvert::new_checked(&NA_BYTES[..]).unwrap();
        assert!(na.router_flag() && na.solicited_flag() && na.override_flag());
        assert_eq!(na.target_addr(), TARGET);
        let opts: Vec<_> = na.options().collect();
        assert_eq!(
            opts,
            vec![
                Ok(NdpOption::TargetLinkAddr(MAC)),
                Ok(NdpOption::Other { kind: 0xfe, data: &NA_BYTES[34..48] })
            ]
        );
        assert_eq!(target_link_addr(na.options()), Some(MAC));
        assert_eq!(source_link_addr(na.options()), None);
        assert_eq!(NeighborAdvert::LEN, 24);
    }

    #[test]
    fn construct_na() {
        let mut buf = [0xa5u8; 48];
        let n = emit_neighbor_advert(&mut buf, TARGET, (true, true, true), Some(MAC));
        assert_eq!(n, 32);
        buf[32..].copy_from_slice(&NA_BYTES[32..]);
        assert_eq!(buf, NA_BYTES);

        let mut buf = [0u8; 24];
        let f = NaFlags { router: false, solicited: true, override_: false };
        assert_eq!(emit_neighbor_advert(&mut buf, TARGET, f, None), 24);
        let mut na = NeighborAdvert::new_checked(&mut buf[..]).unwrap();
        assert!(!na.router_flag() && na.solicited_flag() && !na.override_flag());
        na.set_router_flag(true);
        na.set_solicited_flag(false);
        na.set_override_flag(true);
        na.set_target_addr(SRC);
        assert!(na.router_flag() && !na.solicited_flag() && na.override_flag());
        assert_eq!(na.target_addr(), SRC);
        assert!(na.options_mut().is_empty());
        assert_eq!(buf[4], 0xa0);
    }

    #[test]
    fn malformed_options() {
        // Zero length.
        let mut b = NS_BYTES;
        b[25] = 0;
        assert!(NeighborSolicit::new_checked(&b[..]).is_err());
        let ns = NeighborSolicit::new_unchecked(&b[..]);
        assert_eq!(ns.options().collect::<Vec<_>>(), vec![Err(Error)]);
        assert_eq!(source_link_addr(ns.options()), None);
        // Past the end.
        let mut b = NS_BYTES;
        b[25] = 2;
        assert!(NeighborSolicit::new_checked(&b[..]).is_err());
        // One stray byte.
        let mut v = NS_BYTES.to_vec();
        v.push(1);
        assert!(NeighborSolicit::new_checked(&v[..]).is_err());
        let ns = NeighborSolicit::new_unchecked(&v[..]);
        let opts: Vec<_> = ns.options().collect();
        assert_eq!(opts, vec![Ok(NdpOption::SourceLinkAddr(MAC)), Err(Error)]);
        // The address found before a malformed option does not count.
        assert_eq!(source_link_addr(ns.options()), None);
        // Too short for the fixed part.
        for len in 0..24 {
            assert!(NeighborAdvert::new_checked(&NA_BYTES[..len]).is_err());
        }
        assert!(NeighborAdvert::new_checked(&NA_BYTES[..24]).is_ok());
        assert!(NeighborAdvert::new_checked(&NA_BYTES[..40]).is_err());
    }

    #[test]
    fn multicast_mapping() {
        let sn = solicited_node(&TARGET);
        assert_eq!(sn, "ff02::1:ffab:cdef".parse::<Ipv6Addr>().unwrap());
        assert_eq!(multicast_mac(&sn), MacAddr([0x33, 0x33, 0xff, 0xab, 0xcd, 0xef]));
        assert_eq!(multicast_mac(&"ff02::1".parse().unwrap()), MacAddr([0x33, 0x33, 0, 0, 0, 1]));
    }

    #[test]
    fn etherparse_agrees() {
        // A full Ethernet + IPv6 + NS frame built with our emitters, parsed by etherparse.
        let mut frame = vec![0u8; 14 + 40 + 32];
        let dst = solicited_node(&TARGET);
        let n = emit_neighbor_solicit(&mut frame[54..], TARGET, Some(MAC));
        Icmpv6Packet::new_unchecked(&mut frame[54..54 + n]).fill_checksum(&SRC, &dst);
        let ip = ipv6::Ipv6Repr {
            src: SRC,
            dst,
            next_header: ip_proto::ICMPV6,
            payload_len: n as u16,
            hop_limit: 255,
        };
        ip.emit(&mut ipv6::Packet::new_unchecked(&mut frame[14..]));
        frame[12..14].copy_from_slice(&crate::ethertype::IPV6.to_be_bytes());
        let sliced = etherparse::SlicedPacket::from_ethernet(&frame).unwrap();
        let Some(etherparse::TransportSlice::Icmpv6(icmp)) = sliced.transport else {
            panic!("not ICMPv6: {:?}", sliced.transport);
        };
        assert_eq!(icmp.type_u8(), icmpv6::NEIGHBOR_SOLICIT);
        assert!(icmp.is_checksum_valid(SRC.octets(), dst.octets()));
        assert_eq!(&icmp.payload()[..16], &TARGET.octets());

        for bits in 0..8u8 {
            let flags = (bits & 4 != 0, bits & 2 != 0, bits & 1 != 0);
            let mut buf = [0u8; 32];
            let n = emit_neighbor_advert(&mut buf, TARGET, flags, Some(MAC));
            Icmpv6Packet::new_unchecked(&mut buf[..n]).fill_checksum(&TARGET, &SRC);
            let theirs = etherparse::Icmpv6Slice::from_slice(&buf[..n]).unwrap();
            assert!(theirs.is_checksum_valid(TARGET.octets(), SRC.octets()));
            let etherparse::Icmpv6Type::NeighborAdvertisement(h) = theirs.icmp_type() else {
                panic!("not an NA");
            };
            assert_eq!((h.router, h.solicited, h.r#override), flags);
            let ours = NeighborAdvert::new_checked(&buf[..n]).unwrap();
            assert_eq!((ours.router_flag(), ours.solicited_flag(), ours.override_flag()), flags);
        }
    }
}
