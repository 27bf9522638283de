//! The few system calls the command line makes itself.

/// Lets the calling thread run on every online CPU again (children inherit the mask, and a
/// child pinned to one CPU by inheritance cannot spread its own threads).
pub fn unpin() -> bool {
    // SAFETY: sysconf reads a constant; `set` is a plain bitmask owned by this frame that
    // sched_setaffinity only reads.
    unsafe {
        let n = libc::sysconf(libc::_SC_NPROCESSORS_ONLN)
            .clamp(1, libc::CPU_SETSIZE as libc::c_long) as usize;
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..n {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Pins the calling thread to `cpu`; false if the OS refused (fewer CPUs, or not allowed).
pub fn pin(cpu: usize) -> bool {
    // SAFETY: `set` is a plain bitmask owned by this frame; sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether process `pid` exists (and is not a zombie we could reap).
pub fn alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the parenthesised command name; Z is a zombie.
        Ok(s) => s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Sends `sig` to process `pid`; false if it could not be sent.
pub fn kill(pid: u32, sig: i32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill only reads its two integer arguments; a positive pid names one process.
    unsafe { libc::kill(pid, sig) == 0 }
}

static mut STOP_FLAG: Option<&'static std::sync::atomic::AtomicBool> = None;

extern "C" fn on_signal(_: libc::c_int) {
    // SAFETY: STOP_FLAG is written once, before the handlers are installed, and only read here;
    // an atomic store is async-signal-safe.
    if let Some(flag) = unsafe { STOP_FLAG } {
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Makes SIGTERM and SIGINT set `flag` instead of killing the process, so the data plane can
/// stop cleanly (ports closed, XDP programs detached).
pub fn stop_on_signals(flag: &'static std::sync::atomic::AtomicBool) {
    // SAFETY: the flag is set before any handler can run (they are installed below), and never
    // written again; `signal` with a valid handler function pointer has no other preconditions.
    unsafe {
        STOP_FLAG = Some(flag);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
}
