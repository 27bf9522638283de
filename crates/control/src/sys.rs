//! The few system calls control makes itself: peer credentials of a unix socket, the
//! effective uid, signals, process identity read from /proc, and entering a network namespace.
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
