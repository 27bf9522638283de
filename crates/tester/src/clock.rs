//! The tester's clock: one monotonic time base for TX stamps, RX times and pacing.

use std::time::Instant;

/// Nanoseconds since the clock was made, on the OS monotonic clock (`CLOCK_MONOTONIC` on
/// Linux, read through the vDSO: tens of nanoseconds per read with the TSC clocksource).
///
/// Copies share the epoch, so a generator and a sink holding copies compare times directly.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock whose zero is now.
    pub fn new() -> Clock {
        Clock { epoch: Instant::now() }
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Spins until `t` (nanoseconds since the epoch), yielding the CPU when it is more than a
    /// millisecond away. Returns the time it saw last.
    pub fn wait_until(&self, t: u64) -> u64 {
        loop {
            let now = self.now_ns();
            if now >= t {
                return now;
            }
            if t - now > 1_000_000 {
                std::thread::sleep(std::time::Duration::from_nanos((t - now) / 2));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
