//! The few system calls the labs, the benchmarks and the command line make themselves.

pub mod threads;

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

pub use control::sys::{euid, kill};

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

/// Online CPUs (not just the ones this thread may use: it may be pinned).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Clock ticks per second (`stat`'s CPU times count them).
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(n).unwrap_or(100).max(1)
}

/// CPU time this process has used so far, all threads, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time the calling thread has used so far, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `clock` (a CPU-time clock) in nanoseconds; 0 if it cannot be read.
fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec owned by this frame, written by the call.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Bytes the allocator has handed out and not had back (glibc), all threads.
pub fn heap_in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and only reads the allocator's statistics.
        let m = unsafe { libc::mallinfo2() };
        Some((m.uordblks + m.hblkhd) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// A worker clock in nanoseconds (see `dataplane::Clock`): the raw TSC where it ticks at a
/// constant rate on every core (x86_64 with `constant_tsc` and `nonstop_tsc`), scaled by a
/// factor measured once against the monotonic clock; the monotonic clock elsewhere. rdtsc
/// costs a few nanoseconds against tens for `clock_gettime` when the vDSO cannot use the TSC
/// (VMs with a paravirtual clock), and a worker reads its clock twice per batch.
pub fn tsc_clock() -> dataplane::Clock {
    match tsc::scale() {
        Some(scale) => {
            let t0 = tsc::read();
            Box::new(move || scale.ns(tsc::read().wrapping_sub(t0)))
        }
        None => control::runtime::monotonic_clock(),
    }
}

#[cfg(target_arch = "x86_64")]
mod tsc {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// Nanoseconds per tick as a 32.32 fixed-point factor.
    #[derive(Clone, Copy, Debug)]
    pub struct Scale(u64);

    impl Scale {
        pub fn ns(self, ticks: u64) -> u64 {
            ((u128::from(ticks) * u128::from(self.0)) >> 32) as u64
        }
    }

    pub fn read() -> u64 {
        // SAFETY: rdtsc reads a register and touches no memory; every x86_64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// The measured scale, once per process (calibrating takes ~20 ms), or `None` where the
    /// TSC's rate may vary or stop (it would then not measure time).
    pub fn scale() -> Option<Scale> {
        static SCALE: OnceLock<Option<Scale>> = OnceLock::new();
        *SCALE.get_or_init(calibrate)
    }

    fn calibrate() -> Option<Scale> {
        let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
        let flags = info.lines().find(|l| l.starts_with("flags"))?;
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        if !(has("constant_tsc") && has("nonstop_tsc")) {
            return None;
        }
        // Best of three short windows: a preemption between the two reads of a pair inflates
        // one window, not all of them.
        let mut best: Option<(u64, u64)> = None;
        for _ in 0..3 {
            let (i0, c0) = (Instant::now(), read());
            std::thread::sleep(Duration::from_millis(7));
            let (c1, i1) = (read(), Instant::now());
            let ns = i1.duration_since(i0).as_nanos() as u64;
            let ticks = c1.wrapping_sub(c0);
            if ticks == 0 || ns == 0 {
                return None;
            }
            // A preemption between a pair's two reads lengthens `ns` and not `ticks`: the
            // window with the most ticks per nanosecond was the least disturbed.
            if best.is_none_or(|(bn, bt)| {
                u128::from(ticks) * u128::from(bn) > u128::from(bt) * u128::from(ns)
            }) {
                best = Some((ns, ticks));
            }
        }
        let (ns, ticks) = best?;
        let scale = (u128::from(ns) << 32) / u128::from(ticks);
        // Below 100 MHz or above 100 GHz is not a TSC that measures time.
        ((1u128 << 32) / 100..=(10u128 << 32)).contains(&scale).then_some(Scale(scale as u64))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    #[derive(Clone, Copy, Debug)]
    pub struct Scale;

    impl Scale {
        pub fn ns(self, _: u64) -> u64 {
            0
        }
    }

    pub fn read() -> u64 {
        0
    }

    pub fn scale() -> Option<Scale> {
        None
    }
}

/// Moves the calling thread (only it) into the network namespace open as `fd`.
pub fn setns_net(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: setns on a descriptor the caller holds open; it changes only this thread's
    // network namespace.
    match unsafe { libc::setns(fd, libc::CLONE_NEWNET) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    /// The clock never goes back (what budgets rely on); its rate is not asserted, the machine
    /// may be shared.
    #[test]
    fn tsc_clock_is_monotonic() {
        let mut c = super::tsc_clock();
        let t0 = std::time::Instant::now();
        let mut last = c();
        for _ in 0..10_000 {
            let now = c();
            assert!(now >= last, "{now} < {last}");
            last = now;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (ns, wall) = (c(), t0.elapsed().as_nanos());
        eprintln!("tsc: {:?}; clock {ns} ns for {wall} ns of wall time", super::tsc::scale());
    }
}
