//! The few system calls control makes itself: peer credentials of a unix socket, the
//! effective uid, signals, process identity read from /proc, socket options, and making,
//! entering and unmounting network namespaces.
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;

/// The uid, gid and pid of the process at the other end of a unix stream (as of its
/// `connect`), from SO_PEERCRED.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// The peer credentials of `s`.
pub fn peer_cred(s: &impl AsRawFd) -> std::io::Result<PeerCred> {
    let mut c = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` and `len` are valid for writes of the sizes given; the kernel writes at
    // most `len` bytes into `c`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PeerCred { pid: c.pid, uid: c.uid, gid: c.gid })
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The host's monotonic clock (`CLOCK_MONOTONIC`) in nanoseconds: one clock for every thread
/// and process of the host, so a deadline one sets another can check (`migrate_commit`).
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for clock_gettime to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec as u64)
}

/// Sends `sig` to `pid`; false if it could not (no such process, not ours).
pub fn kill(pid: u32, sig: i32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill takes plain integers; a positive pid addresses one process only.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// When process `pid` started, in clock ticks since boot (field 22 of /proc/PID/stat), or
/// `None` if there is no such process. With the pid it names one process for good: a pid
/// reused later has another start time.
/// A zombie (exited, not yet reaped) has none.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    if rest.next()? == "Z" {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

/// Sets socket `s`'s receive buffer to `bytes`: past `net.core.rmem_max` where allowed
/// (`SO_RCVBUFFORCE`, root), else as far as it goes.
pub fn set_rcvbuf(s: &impl AsRawFd, bytes: usize) -> std::io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt on a descriptor the caller holds open, with a pointer to an int
        // that outlives the call and its size.
        let r = unsafe {
            libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, opt, (&v as *const i32).cast(), len)
        };
        if r == 0 {
            return Ok(());
        }
    }
    Err(std::io::Error::last_os_error())
}

/// Moves the calling thread (only it, and threads it starts afterwards) into the network
/// namespace named `name` (`/run/netns/NAME`, as `ip netns` makes them).
pub fn enter_netns(name: &str) -> std::io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns(2) on a descriptor held open for the call; CLONE_NEWNET changes only the
    // calling thread's network namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Bounds how long a receive on `s` blocks (SO_RCVTIMEO); then it fails with `WouldBlock`.
pub fn set_rcvtimeo(s: &impl AsRawFd, d: std::time::Duration) -> std::io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(d.subsec_micros() as i32),
    };
    let len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: setsockopt on a descriptor the caller holds open, with a pointer to a timeval
    // that outlives the call and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread (only it) into a new, empty network namespace (unshare(2)
/// CLONE_NEWNET); the namespace lives while a thread or a mount holds it.
pub fn unshare_net() -> std::io::Result<()> {
    // SAFETY: unshare takes a flag word; CLONE_NEWNET changes only the calling thread's
    // network namespace and touches no memory of ours.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn c_path(p: &std::path::Path) -> std::io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

/// Calls mount(2) with no file system type or data: a bind mount or a propagation change.
fn mount(
    src: Option<&std::path::Path>,
    dst: &std::path::Path,
    flags: libc::c_ulong,
) -> std::io::Result<()> {
    let dst = c_path(dst)?;
    let src = src.map(c_path).transpose()?;
    let none = c"none";
    let src_ptr = src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is to a NUL-terminated string alive for the call, or null where
    // mount(2) allows it (the source of a propagation change, the data); the kernel only
    // reads them.
    let r = unsafe { libc::mount(src_ptr, dst.as_ptr(), none.as_ptr(), flags, std::ptr::null()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Bind-mounts `src` on `dst` (MS_BIND), with the mounts below it when `recursive`.
pub fn bind_mount(
    src: &std::path::Path,
    dst: &std::path::Path,
    recursive: bool,
) -> std::io::Result<()> {
    let rec = if recursive { libc::MS_REC } else { 0 };
    mount(Some(src), dst, libc::MS_BIND | rec)
}

/// Makes the mount at `dir`, and those below it, shared (MS_SHARED | MS_REC): mounts made
/// under it later appear in every mount namespace that has it. Fails with EINVAL when `dir`
/// is not a mount point.
pub fn make_shared(dir: &std::path::Path) -> std::io::Result<()> {
    mount(None, dir, libc::MS_SHARED | libc::MS_REC)
}

/// Detaches the mount at `path` (umount2(2) MNT_DETACH): gone from the tree at once,
/// released when no one uses it.
pub fn umount_detach(path: &std::path::Path) -> std::io::Result<()> {
    let p = c_path(path)?;
    // SAFETY: a NUL-terminated path alive for the call, which the kernel only reads.
    if unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
