//! Offload settings of a network interface through the SIOCETHTOOL ioctl, the way `ethtool -K`
//! sets them: the device's feature names (ETHTOOL_GSTRINGS), their state (ETHTOOL_GFEATURES),
//! and one change request (ETHTOOL_SFEATURES) for every changeable feature an [`Offload`]'s
//! pattern matches, as ethtool matches them (`tso` is `tx-tcp*-segmentation`, so a kind the
//! kernel adds later goes too; the legacy one-feature commands miss those).
//!
//! The ioctl acts in the network namespace of the socket it is made on, so the caller passes
//! a socket opened in the interface's namespace (any family: the kernel falls back to the
//! device ioctls for a netlink socket too). Every count the kernel returns is bounded before
//! it sizes a buffer.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

/// An offload `ethtool -K` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// `tx`: checksum offload on transmit.
    TxChecksum,
    /// `rx`: checksum offload on receive.
    RxChecksum,
    /// `tso`: TCP segmentation offload, every kind.
    Tso,
    /// `gso`: generic segmentation offload.
    Gso,
    /// `gro`: generic receive offload.
    Gro,
}

impl Offload {
    /// Every offload, in the order `ethtool -K DEV tx off rx off tso off gso off gro off`
    /// names them.
    pub const ALL: [Offload; 5] =
        [Offload::TxChecksum, Offload::RxChecksum, Offload::Tso, Offload::Gso, Offload::Gro];

    /// `ethtool -K`'s name for it.
    pub fn name(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx",
            Offload::RxChecksum => "rx",
            Offload::Tso => "tso",
            Offload::Gso => "gso",
            Offload::Gro => "gro",
        }
    }

    /// The kernel feature names it covers, as ethtool's table matches them (one `*` at most).
    fn pattern(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx-checksum-*",
            Offload::RxChecksum => "rx-checksum",
            Offload::Tso => "tx-tcp*-segmentation",
            Offload::Gso => "tx-generic-segmentation",
            Offload::Gro => "rx-gro",
        }
    }

    /// Whether kernel feature `name` is one of this offload's.
    pub fn covers(self, name: &str) -> bool {
        match self.pattern().split_once('*') {
            Some((pre, post)) => {
                name.len() >= pre.len() + post.len()
                    && name.starts_with(pre)
                    && name.ends_with(post)
            }
            None => name == self.pattern(),
        }
    }
}

/// One device feature as ETHTOOL_GFEATURES reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// The kernel's name (`tx-tcp-segmentation`), as `ethtool -k` shows it.
    pub name: String,
    /// On now.
    pub active: bool,
    /// The device lets it change (not `[fixed]`).
    pub changeable: bool,
}

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
/// From linux/sockios.h.
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// Far above the kernel's feature count (under 70 in 6.x): a larger answer is refused.
const MAX_FEATURES: usize = 1024;

/// struct ethtool_sset_info with room for one count.
#[repr(C)]
struct SsetInfo {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

/// Runs SIOCETHTOOL on interface `ifname` through `sock` with `data` as the command buffer.
///
/// # Safety
/// `data` must point to a command structure, valid for reads and writes, at least as long as
/// the sizes its own header declares (the kernel reads and writes that much through it).
unsafe fn ioctl(sock: &impl AsRawFd, ifname: &str, data: *mut libc::c_void) -> io::Result<()> {
    let mut req = ifreq(ifname)?;
    req.ifr_ifru.ifru_data = data.cast();
    // SAFETY: the ifreq holds a NUL-terminated name and `data`, which the caller vouches for;
    // both stay alive and ours for the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An ifreq naming `ifname`, refused unless it fits IFNAMSIZ with its NUL.
fn ifreq(ifname: &str) -> io::Result<libc::ifreq> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not an interface name"));
    }
    // SAFETY: ifreq is plain old data (a byte array and a union of integers and pointers),
    // for which all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

fn too_many(n: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("the kernel reports {n} features"))
}

/// The names of `ifname`'s features, in the kernel's bit order.
fn names(sock: &impl AsRawFd, ifname: &str) -> io::Result<Vec<String>> {
    let mut info = SsetInfo {
        cmd: ETHTOOL_GSSET_INFO,
        reserved: 0,
        sset_mask: 1 << ETH_SS_FEATURES,
        data: [0],
    };
    // SAFETY: `info` is an ethtool_sset_info with room for the one count its mask asks for.
    unsafe { ioctl(sock, ifname, (&mut info as *mut SsetInfo).cast())? };
    let n = if info.sset_mask & (1 << ETH_SS_FEATURES) != 0 { info.data[0] as usize } else { 0 };
    if n == 0 || n > MAX_FEATURES {
        return Err(too_many(n));
    }
    // struct ethtool_gstrings: cmd, string_set, len, then len names of ETH_GSTRING_LEN bytes.
    let mut buf = vec![0u32; 3 + n * ETH_GSTRING_LEN / 4];
    buf[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, n as u32]);
    // SAFETY: `buf` holds the header and the `n` strings its len field asks for.
    unsafe { ioctl(sock, ifname, buf.as_mut_ptr().cast())? };
    let got = (buf[2] as usize).min(n);
    let bytes: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes
        .chunks(ETH_GSTRING_LEN)
        .take(got)
        .map(|s| String::from_utf8_lossy(s.split(|&b| b == 0).next().unwrap_or(s)).into_owned())
        .collect())
}

/// `ifname`'s features: name, whether on, whether changeable.
pub fn features(sock: &impl AsRawFd, ifname: &str) -> io::Result<Vec<Feature>> {
    let names = names(sock, ifname)?;
    let blocks = names.len().div_ceil(32);
    // struct ethtool_gfeatures: cmd, size, then `size` blocks of available, requested,
    // active, never_changed.
    let mut buf = vec![0u32; 2 + 4 * blocks];
    buf[..2].copy_from_slice(&[ETHTOOL_GFEATURES, blocks as u32]);
    // SAFETY: `buf` holds the header and the `blocks` blocks its size field declares.
    unsafe { ioctl(sock, ifname, buf.as_mut_ptr().cast())? };
    let bit = |field: usize, i: usize| buf[2 + 4 * (i / 32) + field] & (1 << (i % 32)) != 0;
    Ok(names
        .into_iter()
        .enumerate()
        .map(|(i, name)| Feature { name, active: bit(2, i), changeable: bit(0, i) })
        .collect())
}

/// Turns off every changeable feature of `ifname` that `offloads` cover, in one request (the
/// kernel then also drops what depends on them, as for `ethtool -K`).
pub fn turn_off(sock: &impl AsRawFd, ifname: &str, offloads: &[Offload]) -> io::Result<()> {
    let feats = features(sock, ifname)?;
    let blocks = feats.len().div_ceil(32);
    // struct ethtool_sfeatures: cmd, size, then `size` blocks of valid, requested.
    let mut buf = vec![0u32; 2 + 2 * blocks];
    buf[..2].copy_from_slice(&[ETHTOOL_SFEATURES, blocks as u32]);
    for (i, f) in feats.iter().enumerate() {
        if f.changeable && offloads.iter().any(|o| o.covers(&f.name)) {
            buf[2 + 2 * (i / 32)] |= 1 << (i % 32);
        }
    }
    // SAFETY: `buf` holds the header and the `blocks` blocks its size field declares.
    unsafe { ioctl(sock, ifname, buf.as_mut_ptr().cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_cover_the_features_ethtool_names() {
        assert!(Offload::Tso.covers("tx-tcp-segmentation"));
        assert!(Offload::Tso.covers("tx-tcp6-segmentation"));
        assert!(Offload::Tso.covers("tx-tcp-accecn-segmentation"));
        assert!(!Offload::Tso.covers("tx-udp-segmentation"));
        assert!(Offload::TxChecksum.covers("tx-checksum-ip-generic"));
        assert!(!Offload::TxChecksum.covers("tx-checksumming"));
        assert!(Offload::Gro.covers("rx-gro") && !Offload::Gro.covers("rx-gro-list"));
        assert!(Offload::RxChecksum.covers("rx-checksum"));
        assert!(Offload::Gso.covers("tx-generic-segmentation"));
    }

    #[test]
    fn names_that_do_not_fit_an_ifreq_are_refused_before_the_kernel() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for bad in ["", "sixteen-chars-xx", "a\0b"] {
            let e = features(&s, bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn loopback_lists_its_features_and_a_missing_device_is_named_by_errno() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // lo always exists; its features are the kernel's full list, some fixed.
        let f = features(&s, "lo").unwrap();
        assert!(f.len() > 32, "{f:?}");
        assert!(f.iter().any(|f| f.name == "tx-tcp-segmentation"), "{f:?}");
        assert!(f.iter().any(|f| !f.changeable), "lo has fixed features: {f:?}");
        let e = features(&s, "rpx-no-such").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    }
}
