//! Sleeping until there is work: what a worker uses once its ports have been idle a while.
//!
//! A worker that found nothing for some time collects its ports' descriptors
//! ([`crate::Port::wakeup_fds`]), asks the ports to signal them ([`crate::Port::arm_wakeup`]),
//! and sleeps in [`Poller::wait`] on those and on its own [`Waker`], with a timeout so that
//! timers still run. Whoever has a command for the worker wakes it with [`Waker::wake`].
//! The data plane stays free of system calls: this module is where they are made.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::sys;

/// An eventfd that one thread writes to wake another sleeping in [`Poller::wait`].
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new waker, not signalled.
    pub fn new() -> io::Result<Waker> {
        Ok(Waker { fd: sys::eventfd()? })
    }

    /// Makes the descriptor readable until [`Waker::clear`]. Never blocks; a failure (which
    /// would need 2^64 - 1 wakes in a row) only costs the sleeper its timeout.
    pub fn wake(&self) {
        let _ = sys::eventfd_add(&self.fd);
    }

    /// Consumes the wakes so far; true if there were any. Never blocks.
    pub fn clear(&self) -> bool {
        sys::eventfd_take(&self.fd)
    }

    /// The descriptor to wait on.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits for any of a set of descriptors to become readable: `ppoll(2)` with its scratch kept
/// between calls, so waiting does not allocate once the set has been seen.
#[derive(Default)]
pub struct Poller {
    pfds: Vec<libc::pollfd>,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller").field("fds", &self.pfds.len()).finish()
    }
}

impl Poller {
    pub fn new() -> Poller {
        Poller::default()
    }

    /// Sleeps until one of `fds` is readable (or reports an error or hang-up) or `timeout`
    /// passes. Returns how many are ready: 0 after the timeout or a signal. Negative entries
    /// are ignored, as poll(2) does.
    pub fn wait(&mut self, fds: &[RawFd], timeout: Duration) -> io::Result<usize> {
        self.pfds.clear();
        self.pfds.extend(fds.iter().map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }));
        sys::ppoll(&mut self.pfds, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waker_ends_a_wait_and_clears() {
        let w = Waker::new().unwrap();
        let mut p = Poller::new();
        assert!(!w.clear());
        assert_eq!(p.wait(&[w.fd()], Duration::ZERO).unwrap(), 0);
        w.wake();
        w.wake();
        assert_eq!(p.wait(&[-1, w.fd()], Duration::from_secs(10)).unwrap(), 1);
        assert!(w.clear());
        assert!(!w.clear());
        assert_eq!(p.wait(&[w.fd()], Duration::from_millis(2)).unwrap(), 0);
    }

    #[test]
    fn a_wake_from_another_thread_reaches_the_sleeper() {
        let w = std::sync::Arc::new(Waker::new().unwrap());
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            w2.wake();
        });
        let mut p = Poller::new();
        // Bounded only so that a bug fails instead of hanging.
        assert_eq!(p.wait(&[w.fd()], Duration::from_secs(30)).unwrap(), 1);
        t.join().unwrap();
    }
}
