//! Syscall plumbing shared by the kernel-facing backends (`afxdp`, `afpacket`, `tap`) and memif.
//!
//! Job: keep the `unsafe` of talking to the kernel in one place, behind small safe wrappers, so
//! the backends read as ring logic. It holds:
//! - [`Mmap`]: an owned mapping (UMEM, AF_XDP rings, the TPACKET ring) with bounds-checked
//!   accessors. Atomics are safe to hand out; plain reads and writes of shared memory are
//!   `unsafe fn`s whose callers state, per ring protocol, that the kernel is not writing there.
//! - socket, `setsockopt`/`getsockopt`, `bind`, kick and `ioctl` wrappers over plain-old-data
//!   types ([`Pod`]); a Unix socket peer's credentials (`SO_PEERCRED`, for memif);
//! - [`Watch`]: the control-path view of one interface: is it still there (same ifindex), and
//!   the network namespace it lives in, so a port can re-open itself there when it comes back;
//! - [`NetNs`]: run an open step inside another network namespace on a helper thread (sockets
//!   and tun devices belong to the namespace of the thread that creates them);
//! - waiting: an eventfd to wake a sleeping worker and `ppoll` over the ports' descriptors
//!   (`crate::wait`).
//!
//! Errors at open name the backend, the interface and the failing step:
//! `afxdp veth-a: bpf(BPF_LINK_CREATE): Operation not supported (os error 95)`.

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use crate::PortStatus;

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
pub(crate) const IFNAME_MAX: usize = 15;

/// Types that may be copied to and from the kernel as raw bytes: `repr(C)` or primitive, no
/// padding the kernel could trip over, no pointers, and valid for every bit pattern.
///
/// # Safety
/// Implementors must be plain old data in exactly that sense.
pub(crate) unsafe trait Pod: Copy + 'static {}

// SAFETY: primitive integers are valid for every bit pattern and have no padding.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u16 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for i32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}
// SAFETY: arrays of Pod are Pod.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// Wraps `err` with the backend, interface and step that failed.
pub(crate) fn step_err(backend: &str, ifname: &str, step: &str, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{backend} {ifname}: {step}: {err}"))
}

/// `map_err` adapter for [`step_err`].
pub(crate) fn at<'a>(
    backend: &'a str,
    ifname: &'a str,
    step: &'a str,
) -> impl FnOnce(io::Error) -> io::Error + 'a {
    move |e| step_err(backend, ifname, step, e)
}

/// This process's locked-memory limit (`RLIMIT_MEMLOCK`, soft) in bytes; `None` if unlimited
/// or unreadable.
pub(crate) fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the live, writable struct passed.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Turns a `-1`-on-error return value into an `io::Result`.
fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The errno of an error, or 0.
pub(crate) fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// True for the errors the kernel returns when the interface behind a socket or tun file went
/// away (or was taken down): worth an immediate presence check.
pub(crate) fn is_link_error(e: &io::Error) -> bool {
    matches!(errno(e), libc::ENXIO | libc::ENODEV | libc::ENETDOWN | libc::EBADFD)
}

/// Checks an interface name the way the kernel's `dev_valid_name` does, so a bad name fails
/// with a clear message instead of a confusing errno from some later step.
pub(crate) fn check_ifname(backend: &str, name: &str) -> io::Result<[u8; 16]> {
    let ok = !name.is_empty()
        && name.len() <= IFNAME_MAX
        && name != "."
        && name != ".."
        && !name.bytes().any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace());
    if !ok {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{backend} {name:?}: invalid interface name (1 to 15 bytes, no '/', ':' or spaces)"
            ),
        ));
    }
    let mut out = [0u8; 16];
    out[..name.len()].copy_from_slice(name.as_bytes());
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// CPU affinity

/// A CPU affinity mask, laid out as the kernel's `cpu_set_t` (1024 CPUs).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CpuMask([u64; 16]);

/// The CPUs the calling thread may run on.
pub(crate) fn thread_affinity() -> io::Result<CpuMask> {
    let mut m = CpuMask([0; 16]);
    // SAFETY: `m` is a writable buffer of exactly the size passed; pid 0 is the calling thread.
    let r = unsafe {
        libc::sched_getaffinity(0, size_of::<CpuMask>(), (&mut m as *mut CpuMask).cast())
    };
    cvt(r as libc::c_long).map(|_| m)
}

/// Restricts task `tid` (a thread, or a kernel thread) to the CPUs of `m`.
pub(crate) fn set_affinity(tid: i32, m: &CpuMask) -> io::Result<()> {
    // SAFETY: `m` is a readable buffer of exactly the size passed; the kernel only reads it.
    let r =
        unsafe { libc::sched_setaffinity(tid, size_of::<CpuMask>(), (m as *const CpuMask).cast()) };
    cvt(r as libc::c_long).map(drop)
}

// ---------------------------------------------------------------------------------------------
// Sockets and file descriptors

/// `socket(2)` with `SOCK_CLOEXEC`.
pub(crate) fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    cvt(fd as libc::c_long).map(own_fd)
}

/// `open(2)` of a device node, with `O_CLOEXEC` added.
pub(crate) fn open_dev(path: &std::ffi::CStr, flags: i32) -> io::Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    cvt(fd as libc::c_long).map(own_fd)
}

/// Sets `FD_CLOEXEC` on an fd another process passed us: received fds come without it unless
/// the receiver asked (`MSG_CMSG_CLOEXEC`), and every program we start would inherit them.
pub(crate) fn close_on_exec(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer and touches only the descriptor's flags.
    let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    cvt(ret as libc::c_long).map(drop)
}

/// `setsockopt(2)` of one value.
pub(crate) fn setsockopt<T: Pod>(fd: &OwnedFd, level: i32, name: i32, val: &T) -> io::Result<()> {
    let (ptr, len) = ((val as *const T).cast(), size_of::<T>() as libc::socklen_t);
    // SAFETY: `ptr` points at `len` readable bytes for the duration of the call.
    let ret = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, ptr, len) };
    cvt(ret as libc::c_long).map(drop)
}

/// `getsockopt(2)` of one value; also returns how many bytes the kernel wrote.
pub(crate) fn getsockopt<T: Pod>(fd: &OwnedFd, level: i32, name: i32) -> io::Result<(T, usize)> {
    let mut val = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    let ptr = val.as_mut_ptr().cast();
    // SAFETY: `ptr` has room for `len` bytes and `len` is a valid in/out length.
    let ret = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, ptr, &mut len) };
    cvt(ret as libc::c_long)?;
    // SAFETY: zero-initialised and T is Pod, so any bytes the kernel wrote (or did not) form a
    // valid T.
    let val = unsafe { val.assume_init() };
    Ok((val, len as usize))
}

/// `ucred`: three 32-bit integers.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Ucred {
    pub(crate) pid: i32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

// SAFETY: repr(C), three 32-bit integers, no padding (sizeof struct ucred is 12).
unsafe impl Pod for Ucred {}

/// The credentials of the process at the other end of a connected Unix socket, as the kernel
/// recorded them at connect(2) (`SO_PEERCRED`): not something the peer can claim or change.
pub(crate) fn peer_cred(fd: &OwnedFd) -> io::Result<Ucred> {
    let (cred, len) = getsockopt::<Ucred>(fd, libc::SOL_SOCKET, libc::SO_PEERCRED)?;
    if len != size_of::<Ucred>() {
        return Err(io::Error::other(format!("SO_PEERCRED returned {len} bytes")));
    }
    Ok(cred)
}

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// `bind(2)` to a socket address given as a Pod struct (`sockaddr_ll`, `sockaddr_xdp`).
pub(crate) fn bind<T: Pod>(fd: &OwnedFd, addr: &T) -> io::Result<()> {
    let (ptr, len) = ((addr as *const T).cast(), size_of::<T>() as libc::socklen_t);
    // SAFETY: `ptr` points at `len` readable bytes for the call.
    let ret = unsafe { libc::bind(fd.as_raw_fd(), ptr, len) };
    cvt(ret as libc::c_long).map(drop)
}

/// A zero-length, non-blocking `sendto`: "please process what I queued in the tx ring".
pub(crate) fn kick_tx(fd: &OwnedFd) -> io::Result<()> {
    let null = std::ptr::null();
    // SAFETY: a null buffer of length 0 and no address are valid arguments to sendto(2).
    let ret = unsafe { libc::sendto(fd.as_raw_fd(), null, 0, libc::MSG_DONTWAIT, null.cast(), 0) };
    cvt(ret as libc::c_long).map(drop)
}

/// A zero-length, non-blocking `recvfrom`: "the fill ring has entries again, wake rx".
pub(crate) fn kick_rx(fd: &OwnedFd) -> io::Result<()> {
    let null = std::ptr::null_mut();
    let flags = libc::MSG_DONTWAIT;
    // SAFETY: a null buffer of length 0 and no address are valid arguments to recvfrom(2).
    let ret = unsafe { libc::recvfrom(fd.as_raw_fd(), null, 0, flags, null.cast(), null.cast()) };
    cvt(ret as libc::c_long).map(drop)
}

/// `readv(2)` into two buffers; returns the number of bytes read.
pub(crate) fn readv2(fd: &OwnedFd, a: &mut [u8], b: &mut [u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec { iov_base: a.as_mut_ptr().cast(), iov_len: a.len() },
        libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() },
    ];
    // SAFETY: both iovecs describe writable memory borrowed mutably for the call.
    let ret = unsafe { libc::readv(fd.as_raw_fd(), iov.as_ptr(), 2) };
    cvt(ret as libc::c_long).map(|n| n as usize)
}

/// `write(2)`; returns the number of bytes written.
pub(crate) fn write(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is readable for its length for the call.
    let ret = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    cvt(ret as libc::c_long).map(|n| n as usize)
}

/// The `bpf(2)` syscall with a command-specific attribute struct; returns the result (a new fd
/// for the commands that make one).
///
/// # Safety
/// Pointers the kernel follows inside `attr` (instructions, license, key/value, log buffer)
/// must be valid for the kernel's reads and writes for the duration of the call.
pub(crate) unsafe fn bpf<T: Pod>(cmd: u32, attr: &mut T) -> io::Result<libc::c_long> {
    let (ptr, len) = ((attr as *mut T).cast::<c_void>(), size_of::<T>());
    // SAFETY: `ptr` is `len` bytes the kernel may read and write; the caller vouches for the
    // pointers inside it.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd as libc::c_long, ptr, len) };
    cvt(ret)
}

/// [`bpf`] for the commands that return a new descriptor.
///
/// # Safety
/// As for [`bpf`]; and `cmd` must be one that returns a new file descriptor on success.
pub(crate) unsafe fn bpf_fd<T: Pod>(cmd: u32, attr: &mut T) -> io::Result<OwnedFd> {
    // SAFETY: forwarded from the caller.
    unsafe { bpf(cmd, attr) }.map(own_fd)
}

/// Takes ownership of a descriptor a syscall returned as a number.
fn own_fd(fd: libc::c_long) -> OwnedFd {
    // SAFETY: callers pass a descriptor the kernel just created for us, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// The `struct ifreq` of interface ioctls, with the one `int`-sized member we use (ifindex,
/// mtu, flags — flags is a short at the same offset, little-endian on our targets).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct IfReq {
    pub name: [u8; 16],
    pub val: i32,
    pub pad: [u8; 20],
}
// SAFETY: repr(C), integers and byte arrays only, no padding (16 + 4 + 20 = 40 = sizeof ifreq).
unsafe impl Pod for IfReq {}

impl IfReq {
    pub(crate) fn new(name: [u8; 16]) -> Self {
        IfReq { name, val: 0, pad: [0; 20] }
    }

    /// Sets the `short` member (`ifr_flags`), which overlays the first two bytes of `val`.
    pub(crate) fn set_short(&mut self, v: u16) {
        let b = v.to_ne_bytes();
        self.val = i32::from_ne_bytes([b[0], b[1], 0, 0]);
    }
}

/// An `ioctl(2)` taking a `struct ifreq`.
pub(crate) fn ioctl_ifreq(fd: &OwnedFd, req: libc::c_ulong, ifr: &mut IfReq) -> io::Result<()> {
    let ptr = ifr as *mut IfReq;
    // SAFETY: `ptr` is a full 40-byte ifreq the kernel may read and write for the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, ptr) };
    cvt(ret as libc::c_long).map(drop)
}

const SIOCGIFINDEX: libc::c_ulong = 0x8933;
const SIOCGIFMTU: libc::c_ulong = 0x8921;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels`: a device's queue counts, as `ethtool -l` shows them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EthtoolChannels {
    pub cmd: u32,
    pub max_rx: u32,
    pub max_tx: u32,
    pub max_other: u32,
    pub max_combined: u32,
    pub rx_count: u32,
    pub tx_count: u32,
    pub other_count: u32,
    pub combined_count: u32,
}

/// `struct ifreq` with its pointer member (`ifr_data`), for `SIOCETHTOOL`.
#[repr(C)]
struct IfReqData {
    name: [u8; 16],
    data: *mut c_void,
    pad: [u8; 16],
}

/// `ETHTOOL_GCHANNELS` on interface `name` (in the namespace `fd` was made in).
pub(crate) fn ethtool_channels(fd: &OwnedFd, name: [u8; 16]) -> io::Result<EthtoolChannels> {
    let mut ch = EthtoolChannels { cmd: ETHTOOL_GCHANNELS, ..Default::default() };
    let mut ifr = IfReqData { name, data: (&mut ch as *mut EthtoolChannels).cast(), pad: [0; 16] };
    // SAFETY: `ifr` is a full 40-byte ifreq whose data pointer is `ch`, a writable
    // ethtool_channels on this frame that outlives the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut ifr as *mut IfReqData) };
    cvt(ret as libc::c_long)?;
    Ok(ch)
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// `eventfd(2)`: counter 0, non-blocking, close-on-exec.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    cvt(fd as libc::c_long).map(own_fd)
}

/// Adds 1 to an eventfd's counter. Never blocks (the counter would have to reach 2^64 - 1).
pub(crate) fn eventfd_add(fd: &OwnedFd) -> io::Result<()> {
    let one = 1u64.to_ne_bytes();
    write(fd, &one).map(drop)
}

/// Reads and zeroes an eventfd's counter; false if it was zero already. Never blocks.
pub(crate) fn eventfd_take(fd: &OwnedFd) -> bool {
    let mut v = [0u8; 8];
    // SAFETY: `v` is 8 writable bytes for the call, the size an eventfd read needs.
    let ret = unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), v.len()) };
    ret == 8
}

/// `ppoll(2)` for the events set in `fds`, for at most `timeout` (nanosecond resolution, unlike
/// poll(2)'s milliseconds). Returns how many entries have events; 0 on timeout or when a
/// signal interrupted the wait.
pub(crate) fn ppoll(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a writable array of `fds.len()` pollfds for the call, `ts` a valid
    // timespec; a null signal mask leaves the thread's mask alone. The kernel reports a
    // descriptor that is not open as POLLNVAL instead of touching it.
    let ret =
        unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    match cvt(ret as libc::c_long) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------------------------------------
// Shared memory

/// An owned memory mapping, unmapped on drop.
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; nothing ties it to a thread.
unsafe impl Send for Mmap {}

impl Mmap {
    /// Private anonymous memory (a UMEM), populated up front so the first packets do not fault.
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        Self::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1, 0)
    }

    /// Private anonymous memory backed page by page as it is first touched (a staging area
    /// sized for the worst case that mostly sees far less).
    pub(crate) fn lazy(len: usize) -> io::Result<Mmap> {
        Self::map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    }

    /// A shared mapping of a socket's ring at `offset`.
    pub(crate) fn shared(fd: &OwnedFd, len: usize, offset: u64) -> io::Result<Mmap> {
        Self::map(len, libc::MAP_SHARED | libc::MAP_POPULATE, fd.as_raw_fd(), offset as libc::off_t)
    }

    fn map(len: usize, flags: i32, fd: RawFd, offset: libc::off_t) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) cannot alias Rust memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap { ptr: NonNull::new(p.cast()).expect("mmap returned NULL"), len })
    }

    /// Start address, for registering a UMEM with the kernel.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Panics if `[off, off + len)` is not inside the mapping: callers validate kernel-supplied
    /// offsets first, so a panic here is a bug in this crate, not bad input.
    #[inline]
    fn check(&self, off: usize, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "mmap access out of bounds"
        );
    }

    /// The 32-bit word at `off` as an atomic (ring indices, flags, TPACKET status words).
    #[inline]
    pub(crate) fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4);
        assert!(off & 3 == 0, "unaligned atomic");
        // SAFETY: in bounds and 4-aligned (the mapping is page-aligned); the memory lives as long
        // as `self`; concurrent access from the kernel is what atomics are for.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// Reads a `T` at `off` (unaligned reads allowed).
    ///
    /// # Safety
    /// The ring protocol must give this region to user space right now: the kernel does not
    /// write it until the caller hands it back.
    #[inline]
    pub(crate) unsafe fn read<T: Pod>(&self, off: usize) -> T {
        self.check(off, size_of::<T>());
        // SAFETY: in bounds; T is Pod; the caller vouches that nobody writes it concurrently.
        unsafe { self.ptr.as_ptr().add(off).cast::<T>().read_unaligned() }
    }

    /// Writes a `T` at `off` (unaligned writes allowed).
    ///
    /// # Safety
    /// As for [`Mmap::read`]: the region is user space's under the ring protocol.
    #[inline]
    pub(crate) unsafe fn write<T: Pod>(&self, off: usize, val: T) {
        self.check(off, size_of::<T>());
        // SAFETY: in bounds; the caller vouches that nobody reads or writes it concurrently.
        unsafe { self.ptr.as_ptr().add(off).cast::<T>().write_unaligned(val) }
    }

    /// The bytes `[off, off + len)`.
    ///
    /// # Safety
    /// As for [`Mmap::read`], for as long as the returned slice lives.
    #[inline]
    pub(crate) unsafe fn slice(&self, off: usize, len: usize) -> &[u8] {
        self.check(off, len);
        // SAFETY: in bounds; the caller vouches that nobody writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Copies `src` to `off`.
    ///
    /// # Safety
    /// As for [`Mmap::write`].
    #[inline]
    pub(crate) unsafe fn copy_in(&self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        // SAFETY: in bounds; `src` is Rust memory and cannot overlap a fresh mapping; the caller
        // vouches that nobody touches the destination concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns; no references into it outlive
        // `self` (they borrow it).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

// ---------------------------------------------------------------------------------------------
// Network namespaces

/// A network namespace, held open by a descriptor so it outlives its name.
pub(crate) struct NetNs {
    file: File,
    id: (u64, u64),
}

impl NetNs {
    /// The namespace of the calling thread.
    pub(crate) fn current() -> io::Result<NetNs> {
        Self::open(Path::new("/proc/thread-self/ns/net"))
    }

    /// The namespace behind `path` (`/run/netns/NAME`, `/proc/PID/ns/net`).
    pub(crate) fn open(path: &Path) -> io::Result<NetNs> {
        let file = File::open(path)?;
        let m = file.metadata()?;
        Ok(NetNs { file, id: (m.dev(), m.ino()) })
    }

    /// The namespace's identity (device and inode of its nsfs file).
    pub(crate) fn id(&self) -> (u64, u64) {
        self.id
    }

    /// The namespace `path` names, or the caller's.
    pub(crate) fn open_or_current(
        backend: &str,
        ifname: &str,
        path: Option<&Path>,
    ) -> io::Result<NetNs> {
        match path {
            Some(p) => Self::open(p)
                .map_err(|e| step_err(backend, ifname, &format!("open netns {}", p.display()), e)),
            None => Self::current()
                .map_err(|e| step_err(backend, ifname, "open /proc/thread-self/ns/net", e)),
        }
    }

    /// Runs `f` with the calling thread's sockets landing in this namespace: directly when the
    /// thread is already there, else on a short-lived helper thread that enters it first (the
    /// caller's thread never changes namespace).
    pub(crate) fn run_in<T: Send>(
        &self,
        f: impl FnOnce() -> io::Result<T> + Send,
    ) -> io::Result<T> {
        if NetNs::current().is_ok_and(|c| c.id == self.id) {
            return f();
        }
        let fd = self.file.as_raw_fd();
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                // SAFETY: setns(2) on a namespace descriptor we hold open; it only changes this
                // helper thread's namespace.
                let ret = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
                cvt(ret as libc::c_long)?;
                f()
            });
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Interface presence

/// How often the control path re-checks that the interface is still there.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// What [`Watch::poll`] saw.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not time to look yet.
    Nothing,
    /// Looked: nothing changed (a moment for other periodic control work).
    Still,
    /// The interface the port was opened on is gone (deleted, moved to another namespace, or
    /// replaced by a new one with the same name). The port must release its kernel resources.
    Gone,
    /// The port is down and an interface with its name exists again: worth a re-open.
    Back,
}

/// The control-path view of one interface: name, namespace, ifindex, status.
pub(crate) struct Watch {
    backend: &'static str,
    name: String,
    cname: [u8; 16],
    netns: NetNs,
    /// A datagram socket in the port's namespace, only for interface ioctls.
    ctl: OwnedFd,
    ifindex: u32,
    status: PortStatus,
    next_check: Instant,
}

impl Watch {
    /// Validates the name, captures the namespace (`netns` or the caller's) and makes the ioctl
    /// socket inside it. Does not require the interface to exist.
    pub(crate) fn new(
        backend: &'static str,
        name: &str,
        netns: Option<&Path>,
    ) -> io::Result<Watch> {
        let cname = check_ifname(backend, name)?;
        let netns = NetNs::open_or_current(backend, name, netns)?;
        let ctl = netns
            .run_in(|| socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0))
            .map_err(|e| step_err(backend, name, "socket(AF_UNIX) for interface ioctls", e))?;
        Ok(Watch {
            backend,
            name: name.to_string(),
            cname,
            netns,
            ctl,
            ifindex: 0,
            status: PortStatus::Down(format!("interface {name} not opened")),
            next_check: Instant::now(),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn cname(&self) -> [u8; 16] {
        self.cname
    }

    pub(crate) fn netns(&self) -> &NetNs {
        &self.netns
    }

    pub(crate) fn status(&self) -> &PortStatus {
        &self.status
    }

    pub(crate) fn is_up(&self) -> bool {
        self.status == PortStatus::Up
    }

    /// The ifindex the port is open on (0 while down).
    pub(crate) fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface's index now, `None` if no interface has this name in the namespace.
    pub(crate) fn lookup(&self) -> io::Result<Option<u32>> {
        let mut ifr = IfReq::new(self.cname);
        match ioctl_ifreq(&self.ctl, SIOCGIFINDEX, &mut ifr) {
            Ok(()) => Ok(Some(ifr.val as u32)),
            Err(e) if errno(&e) == libc::ENODEV => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The interface's index, or a clear "not found" error for open.
    pub(crate) fn require(&self) -> io::Result<u32> {
        match self.lookup() {
            Ok(Some(i)) => Ok(i),
            Ok(None) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} {}: no such interface", self.backend, self.name),
            )),
            Err(e) => Err(step_err(self.backend, &self.name, "ioctl(SIOCGIFINDEX)", e)),
        }
    }

    /// The interface's MTU, if it can be read.
    pub(crate) fn mtu(&self) -> Option<usize> {
        let mut ifr = IfReq::new(self.cname);
        ioctl_ifreq(&self.ctl, SIOCGIFMTU, &mut ifr).ok().map(|()| ifr.val.max(0) as usize)
    }

    /// Opens what a kernel port keeps on its interface, `open(name, ifindex, mtu)`, inside the
    /// port's namespace, and marks the port up on that interface: the one way a socket port
    /// opens, at start and when its interface comes back.
    pub(crate) fn open_live<L: Send>(
        &mut self,
        open: impl FnOnce(&str, u32, Option<usize>) -> io::Result<L> + Send,
    ) -> io::Result<L> {
        let ifindex = self.require()?;
        let mtu = self.mtu();
        let name = self.name.as_str();
        let live = self.netns.run_in(move || open(name, ifindex, mtu))?;
        self.set_up(ifindex);
        Ok(live)
    }

    /// [`Watch::open_live`] from `service()`, which must not fail: a failure is the port's
    /// status until the next try.
    pub(crate) fn reopen_live<L: Send>(
        &mut self,
        open: impl FnOnce(&str, u32, Option<usize>) -> io::Result<L> + Send,
    ) -> Option<L> {
        self.open_live(open).map_err(|e| self.reopen_failed(&e)).ok()
    }

    /// The port is open on `ifindex` and moving packets.
    pub(crate) fn set_up(&mut self, ifindex: u32) {
        self.ifindex = ifindex;
        self.status = PortStatus::Up;
    }

    /// The port stopped moving packets, for `reason`.
    pub(crate) fn set_down(&mut self, reason: String) {
        self.ifindex = 0;
        self.status = PortStatus::Down(reason);
    }

    /// Marks the interface as gone: used by the poll and by burst paths that saw a link error.
    fn gone(&mut self) {
        let reason = format!("interface {} disappeared", self.name);
        self.set_down(reason);
    }

    /// Checks now whether the interface the port is open on is still there; if not, marks it
    /// gone and returns true. For burst paths that just got a link-ish errno.
    pub(crate) fn check_gone_now(&mut self) -> bool {
        if !self.is_up() {
            return false;
        }
        match self.lookup() {
            Ok(Some(i)) if i == self.ifindex => false,
            Ok(_) => {
                self.gone();
                true
            }
            Err(_) => false,
        }
    }

    /// The periodic check, throttled to [`CHECK_EVERY`].
    pub(crate) fn poll(&mut self) -> Seen {
        let now = Instant::now();
        if now < self.next_check {
            return Seen::Nothing;
        }
        self.next_check = now + CHECK_EVERY;
        if self.is_up() {
            if self.check_gone_now() {
                Seen::Gone
            } else {
                Seen::Still
            }
        } else {
            match self.lookup() {
                Ok(Some(_)) => Seen::Back,
                _ => Seen::Still,
            }
        }
    }

    /// After a failed re-open: wait longer before the next attempt, and say why in the status.
    pub(crate) fn reopen_failed(&mut self, err: &io::Error) {
        self.next_check = Instant::now() + CHECK_EVERY * 10;
        self.set_down(format!("interface {} is back but re-open failed: {err}", self.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(check_ifname("t", "veth0").is_ok());
        assert!(check_ifname("t", "a23456789012345").is_ok());
        for bad in ["", "a234567890123456", "a/b", "a b", ".", "..", "a:1", "a\0"] {
            let e = check_ifname("tap", bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
            assert!(e.to_string().starts_with("tap "), "{e}");
        }
    }

    #[test]
    fn mmap_accessors_check_bounds() {
        let m = Mmap::anonymous(4096).unwrap();
        m.atomic_u32(4092).store(7, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: private anonymous memory nobody else can see.
        assert_eq!(unsafe { m.read::<u32>(4092) }, 7);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: as above; the access is out of bounds and must panic, not read.
            unsafe { m.read::<u64>(4092) }
        }));
        assert!(r.is_err());
    }

    #[test]
    fn step_errors_name_backend_interface_and_step() {
        let e =
            step_err("afxdp", "veth-a", "bpf(BPF_LINK_CREATE)", io::Error::from_raw_os_error(95));
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e
            .to_string()
            .starts_with("afxdp veth-a: bpf(BPF_LINK_CREATE): Operation not supported"));
    }
}
