//! Shared memory and eventfds: the only place memif memory is mapped and touched.
//!
//! Contract:
//! - A [`Region`] is one `MAP_SHARED` mapping of a memfd. The peer may write any byte of it at
//!   any time, so no Rust reference to its bytes ever exists: scalars are read and written with
//!   volatile accesses or through atomics, and packet data is moved with `copy_nonoverlapping`
//!   into or out of private memory. Each value read is a private copy; code that validates a value
//!   uses that copy and never reads the field again.
//! - Every access is bounds-checked against the mapping (and aligned for scalars); an access that
//!   does not fit returns `None`/`false` and touches nothing.
//! - A region received from a peer is mapped only if its file is at least as long as announced and
//!   is sealed against shrinking (`F_SEAL_SHRINK`, which DPDK and VPP set; we add it ourselves when
//!   the peer allowed sealing). Without that seal a peer could truncate the file under us and turn
//!   an in-bounds access into SIGBUS.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU16;

/// The largest region we map (1 TiB): bounds address-space use by a hostile peer.
pub const MAX_REGION_SIZE: u64 = 1 << 40;

/// One mapped shared-memory region.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is process-wide memory owned by this value; nothing in it is tied to the
// thread that created it, so the value may move to another thread. It is not `Sync`: accesses
// through `&self` write memory, and only one thread at a time may do that.
unsafe impl Send for Region {}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region {{ len: {}, fd: {} }}", self.len, self.fd.as_raw_fd())
    }
}

fn last_err(step: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{step}: {e}"))
}

impl Region {
    /// Creates a memfd of `size` bytes, sealed against shrinking and growing, and maps it. This
    /// is what a client offers in ADD_REGION.
    pub fn create(name: &str, size: usize) -> io::Result<Region> {
        Self::create_inner(name, size, true)
    }

    /// Like [`Region::create`] but leaves the memfd unsealed and unsealable. Only for testing how
    /// a server treats a peer that does not seal its regions.
    pub fn create_unsealed(name: &str, size: usize) -> io::Result<Region> {
        Self::create_inner(name, size, false)
    }

    fn create_inner(name: &str, size: usize, seal: bool) -> io::Result<Region> {
        if size == 0 || size as u64 > MAX_REGION_SIZE {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "region size out of range"));
        }
        let cname = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
        let flags = libc::MFD_CLOEXEC | if seal { libc::MFD_ALLOW_SEALING } else { 0 };
        // SAFETY: `cname` is a valid NUL-terminated string; memfd_create has no other inputs.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
        if raw < 0 {
            return Err(last_err("memfd_create"));
        }
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain syscall on an fd we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } < 0 {
            return Err(last_err("ftruncate"));
        }
        if seal {
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
            // SAFETY: plain fcntl on an fd we own.
            if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
                return Err(last_err("fcntl(F_ADD_SEALS)"));
            }
        }
        Self::mmap(fd, size)
    }

    /// Maps a region a peer sent, after checking that its file is long enough and cannot shrink.
    pub fn map_peer(fd: OwnedFd, size: u64) -> Result<Region, &'static str> {
        if size == 0 || size > MAX_REGION_SIZE || size > usize::MAX as u64 {
            return Err("region size out of range");
        }
        // SAFETY: `st` is plain old data that fstat fills; the fd is valid for the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
            return Err("region fd cannot be inspected");
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err("region fd is not a memory file");
        }
        // Add the seal if the peer allowed sealing but did not seal; harmless if already set.
        // SAFETY: plain fcntl on a valid fd; failure is checked below through F_GET_SEALS.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        // SAFETY: plain fcntl on a valid fd.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err("region fd is not sealed against shrinking (F_SEAL_SHRINK)");
        }
        // Read the size again now that the seal is in place: from here on the file cannot
        // become shorter than this.
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
            return Err("region fd cannot be inspected");
        }
        if (st.st_size as u64) < size {
            return Err("region file is shorter than announced");
        }
        Self::mmap(fd, size as usize).map_err(|_| "region mmap failed")
    }

    fn mmap(fd: OwnedFd, len: usize) -> io::Result<Region> {
        // SAFETY: a fresh shared mapping chosen by the kernel (addr NULL); it aliases no Rust
        // object. The file is at least `len` bytes long (created so, or checked and sealed).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_err("mmap"));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        Ok(Region { ptr, len, fd })
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, to send in ADD_REGION.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A pointer to `n` bytes at `off`, if they lie inside the mapping and `off` is a multiple of
    /// `align`.
    #[inline]
    fn at(&self, off: usize, n: usize, align: usize) -> Option<*mut u8> {
        let end = off.checked_add(n)?;
        // `align` is a power of two.
        (end <= self.len && off & (align - 1) == 0).then(|| {
            // SAFETY: `off + n <= len`, so the result stays inside the mapping.
            unsafe { self.ptr.as_ptr().add(off) }
        })
    }

    /// Reads the `u16` at `off`, or `None` if out of bounds or misaligned.
    #[inline]
    pub fn read_u16(&self, off: usize) -> Option<u16> {
        let p = self.at(off, 2, 2)?;
        // SAFETY: in bounds and aligned (checked by `at`); volatile because the peer may write.
        Some(unsafe { p.cast::<u16>().read_volatile() })
    }

    /// Reads the `u32` at `off`, or `None` if out of bounds or misaligned.
    #[inline]
    pub fn read_u32(&self, off: usize) -> Option<u32> {
        let p = self.at(off, 4, 4)?;
        // SAFETY: in bounds and aligned (checked by `at`); volatile because the peer may write.
        Some(unsafe { p.cast::<u32>().read_volatile() })
    }

    /// Writes the `u16` at `off`; false if out of bounds or misaligned.
    #[inline]
    pub fn write_u16(&self, off: usize, v: u16) -> bool {
        self.at(off, 2, 2)
            .map(|p| {
                // SAFETY: in bounds and aligned (checked by `at`); the mapping is writable.
                unsafe { p.cast::<u16>().write_volatile(v) }
            })
            .is_some()
    }

    /// Writes the `u32` at `off`; false if out of bounds or misaligned.
    #[inline]
    pub fn write_u32(&self, off: usize, v: u32) -> bool {
        self.at(off, 4, 4)
            .map(|p| {
                // SAFETY: in bounds and aligned (checked by `at`); the mapping is writable.
                unsafe { p.cast::<u32>().write_volatile(v) }
            })
            .is_some()
    }

    /// The `u16` at `off` as an atomic, for the ring counters and flags, or `None` if out of
    /// bounds or misaligned.
    #[inline]
    pub fn atomic_u16(&self, off: usize) -> Option<&AtomicU16> {
        let p = self.at(off, 2, 2)?;
        // SAFETY: in bounds and 2-aligned, valid for the lifetime of `&self` (the mapping lives as
        // long as the Region). AtomicU16 has interior mutability, so concurrent writes by the
        // peer through its own mapping are what atomics are for.
        Some(unsafe { AtomicU16::from_ptr(p.cast::<u16>()) })
    }

    /// Copies `dst.len()` bytes at `off` into private memory; false (copying nothing) if they do
    /// not lie inside the mapping.
    #[inline]
    pub fn read_bytes(&self, off: usize, dst: &mut [u8]) -> bool {
        match self.at(off, dst.len(), 1) {
            Some(p) => {
                // SAFETY: the source range is inside the mapping (checked by `at`); `dst` is
                // private memory, so the ranges cannot overlap. The peer may write the source
                // concurrently; we only ever keep the private copy.
                unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
                true
            }
            None => false,
        }
    }

    /// Copies `src` to `off`; false (copying nothing) if it does not fit inside the mapping.
    #[inline]
    pub fn write_bytes(&self, off: usize, src: &[u8]) -> bool {
        match self.at(off, src.len(), 1) {
            Some(p) => {
                // SAFETY: the destination range is inside the writable mapping (checked by `at`);
                // `src` is private memory, so the ranges cannot overlap.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
                true
            }
            None => false,
        }
    }

    /// Fills `n` bytes at `off` with `byte`; false if they do not fit.
    pub fn fill(&self, off: usize, n: usize, byte: u8) -> bool {
        match self.at(off, n, 1) {
            Some(p) => {
                // SAFETY: the range is inside the writable mapping (checked by `at`).
                unsafe { std::ptr::write_bytes(p, byte, n) };
                true
            }
            None => false,
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value made; no reference into it outlives
        // `self` (atomics borrowed from it are tied to `&self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// An eventfd: one per ring, created by the client, shared by both sides.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(last_err("eventfd"));
        }
        // SAFETY: a fresh fd that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    /// Adopts an fd a peer sent in ADD_RING, after checking it really is an eventfd (a peer could
    /// send a pipe or a socket, whose writes might block or mean something else) and making it
    /// non-blocking.
    pub fn from_peer(fd: OwnedFd) -> Result<EventFd, &'static str> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if let Ok(target) = link {
            if target.as_os_str() != "anon_inode:[eventfd]" {
                return Err("interrupt fd is not an eventfd");
            }
        }
        // SAFETY: plain fcntl on a valid fd.
        let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if fl < 0 {
            return Err("interrupt fd cannot be inspected");
        }
        // SAFETY: plain fcntl on a valid fd.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
            return Err("interrupt fd cannot be made non-blocking");
        }
        Ok(EventFd(fd))
    }

    /// Signals the peer (adds 1). Never blocks; a failure only means a lost wakeup.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live local to a valid non-blocking fd.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Consumes pending signals; true if there were any. Never blocks.
    pub fn drain(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live local from a valid non-blocking fd.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) == 8 }
    }

    /// The fd, to poll or to send in ADD_RING.
    pub fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// The fd, borrowed.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_are_bounded_and_aligned() {
        let r = Region::create("t", 4096).unwrap();
        assert!(r.write_u32(4092, 7));
        assert_eq!(r.read_u32(4092), Some(7));
        assert_eq!(r.read_u32(4093), None);
        assert_eq!(r.read_u32(4096), None);
        assert_eq!(r.read_u16(usize::MAX - 1), None);
        assert!(!r.write_u32(4094, 1));
        assert!(r.write_u16(4094, 9));
        assert!(!r.write_u16(4095, 9));
        assert!(!r.write_u16(usize::MAX, 9));
        let mut buf = [0u8; 8];
        assert!(!r.read_bytes(4090, &mut buf));
        assert!(r.read_bytes(4088, &mut buf));
        assert!(!r.write_bytes(usize::MAX - 2, &buf));
        assert!(r.atomic_u16(4095).is_none());
        assert!(r.fill(0, 4096, 0xaa));
        assert_eq!(r.read_u16(0), Some(0xaaaa));
    }

    #[test]
    fn peer_regions_must_be_sealed_and_long_enough() {
        let own = Region::create("sealed", 8192).unwrap();
        let dup = own.fd().try_clone_to_owned().unwrap();
        let theirs = Region::map_peer(dup, 8192).unwrap();
        own.write_u32(100, 0xdead_beef);
        assert_eq!(theirs.read_u32(100), Some(0xdead_beef));
        let dup = own.fd().try_clone_to_owned().unwrap();
        assert_eq!(
            Region::map_peer(dup, 8193).unwrap_err(),
            "region file is shorter than announced"
        );
        let dup = own.fd().try_clone_to_owned().unwrap();
        assert!(Region::map_peer(dup, 0).is_err());

        let loose = Region::create_unsealed("loose", 4096).unwrap();
        let dup = loose.fd().try_clone_to_owned().unwrap();
        assert!(Region::map_peer(dup, 4096).unwrap_err().contains("sealed"));

        let ev = EventFd::new().unwrap();
        let dup = ev.fd().try_clone_to_owned().unwrap();
        assert!(Region::map_peer(dup, 4096).is_err());
    }

    #[test]
    fn eventfd_signals_and_rejects_impostors() {
        let ev = EventFd::new().unwrap();
        assert!(!ev.drain());
        ev.notify();
        ev.notify();
        assert!(ev.drain());
        assert!(!ev.drain());
        let dup = ev.fd().try_clone_to_owned().unwrap();
        assert!(EventFd::from_peer(dup).is_ok());
        let r = Region::create("x", 4096).unwrap();
        let dup = r.fd().try_clone_to_owned().unwrap();
        assert_eq!(EventFd::from_peer(dup).unwrap_err(), "interrupt fd is not an eventfd");
    }
}
