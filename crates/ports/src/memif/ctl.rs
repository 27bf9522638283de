//! The memif control socket: `AF_UNIX`/`SOCK_SEQPACKET`, one 128-byte message per datagram, at
//! most one file descriptor per message (`SCM_RIGHTS`).
//!
//! Contract:
//! - Addresses are filesystem paths or Linux abstract names. Abstract names are bound and
//!   connected with the exact length of the name (no NUL padding), as DPDK 22.11 does, so the two
//!   meet. An abstract name has no file mode: any process in the network namespace may connect,
//!   so a server checks who did ([`Conn::peer_uid`]).
//! - Sockets are non-blocking and close-on-exec; sending never raises SIGPIPE (`MSG_NOSIGNAL`), a
//!   peer that went away is an error or end-of-file instead.
//! - Receiving takes any datagram: its length is reported as is (a short or long message is the
//!   caller's to refuse), and every fd that arrives is owned by the result, so an unexpected fd is
//!   closed rather than leaked.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use super::proto::MSG_SIZE;

/// Where a memif control socket lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketAddr {
    /// A socket file.
    Path(PathBuf),
    /// A Linux abstract-namespace name (no file); DPDK 22.11's default.
    Abstract(Vec<u8>),
}

/// Bytes available in `sun_path`.
const SUN_PATH_LEN: usize = 108;

impl SocketAddr {
    /// Parses `@name` or `abstract:name` as an abstract name, anything else as a file path.
    pub fn parse(s: &str) -> io::Result<SocketAddr> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{s:?}: {why}"));
        let a = if let Some(name) = s.strip_prefix('@').or_else(|| s.strip_prefix("abstract:")) {
            if name.is_empty() || name.len() > SUN_PATH_LEN - 1 {
                return Err(bad("abstract name must be 1 to 107 bytes"));
            }
            SocketAddr::Abstract(name.as_bytes().to_vec())
        } else {
            if s.is_empty() || s.len() > SUN_PATH_LEN - 1 {
                return Err(bad("socket path must be 1 to 107 bytes"));
            }
            if s.contains('\0') {
                return Err(bad("socket path contains NUL"));
            }
            SocketAddr::Path(PathBuf::from(s))
        };
        Ok(a)
    }

    fn sockaddr(&self) -> (libc::sockaddr_un, libc::socklen_t) {
        // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
        let mut sun: libc::sockaddr_un = unsafe { zeroed() };
        sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let base = size_of::<libc::sa_family_t>();
        let (bytes, start): (&[u8], usize) = match self {
            SocketAddr::Path(p) => (p.as_os_str().as_encoded_bytes(), 0),
            SocketAddr::Abstract(n) => (n, 1),
        };
        for (i, &b) in bytes.iter().enumerate().take(SUN_PATH_LEN - 1 - start) {
            sun.sun_path[start + i] = b as libc::c_char;
        }
        let len = match self {
            // The kernel reads a path up to its NUL; pass the whole structure.
            SocketAddr::Path(_) => size_of::<libc::sockaddr_un>(),
            // An abstract name is exactly the bytes given: leading NUL + name, like DPDK.
            SocketAddr::Abstract(n) => base + 1 + n.len().min(SUN_PATH_LEN - 1),
        };
        (sun, len as libc::socklen_t)
    }
}

impl std::fmt::Display for SocketAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SocketAddr::Path(p) => write!(f, "{}", p.display()),
            SocketAddr::Abstract(n) => write!(f, "@{}", String::from_utf8_lossy(n)),
        }
    }
}

fn os_err(step: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{step}: {e}"))
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(os_err("socket"));
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A listening control socket (server role).
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    addr: SocketAddr,
}

impl Listener {
    /// Binds and listens. A socket file left behind by a dead server (nobody accepts on it) is
    /// replaced; a live one is an error (`AddrInUse`).
    pub fn bind(addr: &SocketAddr) -> io::Result<Listener> {
        let fd = seqpacket()?;
        let (sun, len) = addr.sockaddr();
        // SAFETY: `sun` is a valid sockaddr_un of at least `len` bytes.
        let mut rc =
            unsafe { libc::bind(fd.as_raw_fd(), (&sun as *const libc::sockaddr_un).cast(), len) };
        if rc < 0 && io::Error::last_os_error().kind() == io::ErrorKind::AddrInUse {
            if let SocketAddr::Path(p) = addr {
                use std::os::unix::fs::FileTypeExt;
                let is_socket =
                    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket());
                // A socket file nobody accepts on was left by a dead server: replace it. Anything
                // else at that path (a live server, a regular file) is not ours to remove.
                let refused = |e: io::Error| e.kind() == io::ErrorKind::ConnectionRefused;
                let dead = is_socket && Conn::connect(addr).err().is_some_and(refused);
                if !dead {
                    let why =
                        if is_socket { "a live server listens there" } else { "not a socket" };
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("bind: address in use ({why})"),
                    ));
                }
                std::fs::remove_file(p).map_err(|e| {
                    io::Error::new(e.kind(), format!("removing stale socket file: {e}"))
                })?;
                // SAFETY: as above.
                rc = unsafe {
                    libc::bind(fd.as_raw_fd(), (&sun as *const libc::sockaddr_un).cast(), len)
                };
            }
        }
        if rc < 0 {
            return Err(os_err("bind"));
        }
        // SAFETY: plain syscall on a bound socket we own.
        if unsafe { libc::listen(fd.as_raw_fd(), 8) } < 0 {
            return Err(os_err("listen"));
        }
        Ok(Listener { fd, addr: addr.clone() })
    }

    /// Accepts one pending connection, if any.
    pub fn accept(&self) -> io::Result<Option<Conn>> {
        // SAFETY: accept4 with null address pointers is allowed; the result is checked.
        let raw = unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                // The client gave up between connect and accept: nothing to accept.
                _ if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: a fresh fd that nothing else owns.
        Ok(Some(Conn { fd: unsafe { OwnedFd::from_raw_fd(raw) } }))
    }

    /// The listening fd, to poll.
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let SocketAddr::Path(p) = &self.addr {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// What one receive produced.
#[derive(Debug)]
pub enum Recv {
    /// Nothing pending.
    WouldBlock,
    /// The peer closed the connection.
    Eof,
    /// One datagram: `len` bytes (only the first 128 kept), the fd that came with it, and
    /// whether it carried more than one fd (the extras are closed).
    Msg {
        /// The first 128 bytes (zero-filled past `len`).
        buf: [u8; MSG_SIZE],
        /// Datagram length as received (may exceed 128 if truncated).
        len: usize,
        /// The first fd received, if any.
        fd: Option<OwnedFd>,
        /// More than one fd arrived (or control data was truncated).
        extra_fds: bool,
    },
}

/// A connected control socket.
#[derive(Debug)]
pub struct Conn {
    fd: OwnedFd,
}

/// Room for a few fds plus credentials: anything beyond is closed by the kernel (MSG_CTRUNC).
const CMSG_BUF: usize = 128;

impl Conn {
    /// The user id of the process at the other end, as the kernel recorded it when that
    /// process connected (`SO_PEERCRED`).
    pub fn peer_uid(&self) -> io::Result<u32> {
        crate::sys::peer_cred(&self.fd).map(|c| c.uid)
    }

    /// Connects to a listening server (non-blocking: a full backlog is `WouldBlock`).
    pub fn connect(addr: &SocketAddr) -> io::Result<Conn> {
        let fd = seqpacket()?;
        let (sun, len) = addr.sockaddr();
        // SAFETY: `sun` is a valid sockaddr_un of at least `len` bytes.
        let rc = unsafe {
            libc::connect(fd.as_raw_fd(), (&sun as *const libc::sockaddr_un).cast(), len)
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Conn { fd })
    }

    /// Sends one message, with at most one fd.
    pub fn send(&self, msg: &[u8; MSG_SIZE], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        self.send_raw(msg, fd)
    }

    /// Sends an arbitrary datagram; exists so that tests can send malformed messages.
    pub fn send_raw(&self, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        #[repr(C, align(8))]
        struct Cmsg([u8; 64]);
        let mut ctl = Cmsg([0; 64]);
        let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut _, iov_len: bytes.len() };
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut mh: libc::msghdr = unsafe { zeroed() };
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        if let Some(fd) = fd {
            let raw: RawFd = fd.as_raw_fd();
            // SAFETY: CMSG_SPACE is a pure computation.
            let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
            mh.msg_control = ctl.0.as_mut_ptr().cast();
            mh.msg_controllen = space;
            // SAFETY: msg_control points at `ctl`, 8-aligned and at least `space` bytes long, so
            // the first header and its data (one int) lie inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&mh);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), raw);
            }
        }
        // SAFETY: `mh` points at live `iov`/`ctl` for the duration of the call; the kernel only
        // reads them.
        let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != bytes.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
        }
        Ok(())
    }

    /// Receives one datagram without blocking.
    pub fn recv(&self) -> io::Result<Recv> {
        #[repr(C, align(8))]
        struct Cmsg([u8; CMSG_BUF]);
        let mut ctl = Cmsg([0; CMSG_BUF]);
        let mut buf = [0u8; MSG_SIZE];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: MSG_SIZE };
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut mh: libc::msghdr = unsafe { zeroed() };
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl.0.as_mut_ptr().cast();
        mh.msg_controllen = CMSG_BUF;
        // SAFETY: `mh` points at live buffers of the stated sizes. MSG_TRUNC makes the return
        // value the real datagram length even when it exceeds 128 bytes.
        let n = unsafe {
            libc::recvmsg(self.fd.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC | libc::MSG_TRUNC)
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(Recv::WouldBlock),
                _ => Err(e),
            };
        }
        // Take ownership of every fd first, so that none leaks whatever happens next.
        let mut fds: Vec<OwnedFd> = Vec::new();
        let mut extra = mh.msg_flags & libc::MSG_CTRUNC != 0;
        // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, bounded by
        // msg_controllen; each SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 fds that
        // the kernel installed in this process and that nothing else owns yet.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&mh);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let p = libc::CMSG_DATA(c).cast::<RawFd>();
                    for i in 0..data / size_of::<RawFd>() {
                        let raw = std::ptr::read_unaligned(p.add(i));
                        if raw >= 0 {
                            fds.push(OwnedFd::from_raw_fd(raw));
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&mh, c);
            }
        }
        if n == 0 && fds.is_empty() {
            return Ok(Recv::Eof);
        }
        extra |= fds.len() > 1;
        let fd = if fds.is_empty() { None } else { Some(fds.swap_remove(0)) };
        Ok(Recv::Msg { buf, len: n as usize, fd, extra_fds: extra })
    }

    /// The socket fd, to poll.
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_addresses() {
        assert_eq!(
            SocketAddr::parse("/run/x.sock").unwrap(),
            SocketAddr::Path("/run/x.sock".into())
        );
        assert_eq!(SocketAddr::parse("@memif").unwrap(), SocketAddr::Abstract(b"memif".to_vec()));
        assert_eq!(SocketAddr::parse("abstract:m").unwrap(), SocketAddr::Abstract(b"m".to_vec()));
        assert!(SocketAddr::parse("@").is_err());
        assert!(SocketAddr::parse("").is_err());
        assert!(SocketAddr::parse(&"x".repeat(108)).is_err());
        assert!(SocketAddr::parse(&"x".repeat(107)).is_ok());
        assert_eq!(SocketAddr::parse("@a").unwrap().to_string(), "@a");
    }

    #[test]
    fn messages_and_fds_travel() {
        let name = format!("@routeplex-ctl-test-{}", std::process::id());
        let addr = SocketAddr::parse(&name).unwrap();
        let l = Listener::bind(&addr).unwrap();
        assert!(l.accept().unwrap().is_none());
        let c = Conn::connect(&addr).unwrap();
        let s = l.accept().unwrap().unwrap();
        assert!(matches!(s.recv().unwrap(), Recv::WouldBlock));
        let ev = super::super::shm::EventFd::new().unwrap();
        let mut m = [0u8; MSG_SIZE];
        m[0] = 42;
        c.send(&m, Some(ev.fd())).unwrap();
        match s.recv().unwrap() {
            Recv::Msg { buf, len, fd, extra_fds } => {
                assert_eq!((buf[0], len, extra_fds), (42, 128, false));
                assert!(fd.is_some());
            }
            other => panic!("{other:?}"),
        }
        c.send_raw(&[1; 200], None).unwrap();
        match s.recv().unwrap() {
            Recv::Msg { len, fd, .. } => assert_eq!((len, fd.is_none()), (200, true)),
            other => panic!("{other:?}"),
        }
        drop(c);
        assert!(matches!(s.recv().unwrap(), Recv::Eof));
        // Sending to a closed peer is an error, not SIGPIPE.
        assert!(s.send(&m, None).is_err());
    }
}
