//! The few system calls the command line makes itself.

/// Pins the calling thread to `cpu`; false if the OS refused (fewer CPUs, or not allowed).
pub fn pin(cpu: usize) -> bool {
    // SAFETY: `set` is a plain bitmask owned by this frame; sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
