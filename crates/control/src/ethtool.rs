//! Offload settings of a network interface through the SIOCETHTOOL ioctl, the way `ethtool -K`
//! sets them: the legacy one-feature commands (`ETHTOOL_S*`), which the kernel maps onto its
//! feature bits (tx: every TX checksum feature; rx: RX checksum; tso: every TSO kind; gso;
//! gro) and fixes up dependent features as `ethtool` does.
//!
//! The ioctl acts in the network namespace of the socket it is made on, so the caller passes
//! a socket opened in the interface's namespace (any family: the kernel falls back to the
//! device ioctls for a netlink socket too).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

/// An offload `ethtool -K` names, with the legacy ioctl commands that read and set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// `tx`: checksum offload on transmit.
    TxChecksum,
    /// `rx`: checksum offload on receive.
    RxChecksum,
    /// `tso`: TCP segmentation offload.
    Tso,
    /// `gso`: generic segmentation offload.
    Gso,
    /// `gro`: generic receive offload.
    Gro,
}

impl Offload {
    /// Every offload, in the order `ethtool -K DEV tx off rx off tso off gso off gro off`
    /// turns them off.
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

    /// (get, set) commands from linux/ethtool.h.
    fn commands(self) -> (u32, u32) {
        match self {
            Offload::RxChecksum => (0x14, 0x15),
            Offload::TxChecksum => (0x16, 0x17),
            Offload::Tso => (0x1e, 0x1f),
            Offload::Gso => (0x23, 0x24),
            Offload::Gro => (0x2b, 0x2c),
        }
    }
}

/// struct ethtool_value.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// From linux/sockios.h.
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// Runs one ethtool_value command on interface `ifname` through socket `sock`; returns the
/// value the kernel wrote back (a get's answer).
fn value_ioctl(sock: &impl AsRawFd, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut req: libc::ifreq = ifreq(ifname)?;
    let mut v = EthtoolValue { cmd, data };
    req.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the ifreq (a NUL-terminated name and a pointer to `v`, both
    // alive and exclusively ours for the call) and reads or writes exactly one
    // ethtool_value through that pointer, as `cmd` is an ethtool_value command.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v.data)
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

/// Turns `offload` on or off on `ifname`.
pub fn set(sock: &impl AsRawFd, ifname: &str, offload: Offload, on: bool) -> io::Result<()> {
    value_ioctl(sock, ifname, offload.commands().1, u32::from(on)).map(|_| ())
}

/// Whether `offload` is on for `ifname`.
pub fn get(sock: &impl AsRawFd, ifname: &str, offload: Offload) -> io::Result<bool> {
    value_ioctl(sock, ifname, offload.commands().0, 0).map(|v| v != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_do_not_fit_an_ifreq_are_refused_before_the_kernel() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for bad in ["", "sixteen-chars-xx", "a\0b"] {
            let e = get(&s, bad, Offload::Gro).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn loopback_answers_and_a_missing_device_is_named_by_errno() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // lo always exists and supports the get commands (it reports its features).
        get(&s, "lo", Offload::TxChecksum).unwrap();
        let e = get(&s, "rpx-no-such", Offload::Gro).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    }
}
