//! Telling a stalled trial (the tester's thread kept off its CPU) from a slow round of the loop.
//!
//! The runner's loop reads the clock every round; a gap between two rounds longer than the
//! stall limit used to make the trial invalid on its own. But a gap is not always the thread
//! being descheduled: a round can be slow by itself (a port's system call doing the kernel
//! DUT's forwarding in the caller's context, page faults on fresh ring memory), and a round
//! that slept (`idle_sleep`) is not a stall either. What makes a trial's rates the host's and
//! not the DUT's is the thread waiting for a CPU while it could run. Linux counts exactly that
//! per thread: the second field of `/proc/thread-self/schedstat`, nanoseconds spent runnable on
//! a run queue (sleeping is not in it). So a gap over the limit counts as a stall only for as
//! long as the thread waited on the run queue meanwhile: the wait counter is sampled every
//! [`SAMPLE_EVERY`] rounds (one `pread`, about a microsecond) and at each long gap, and the
//! stall is the smaller of the gap and the wait since the last sample. Where the counter
//! cannot be read (no `CONFIG_SCHED_INFO`, not Linux) the gap alone counts, as before.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Rounds between samples of the wait counter.
pub const SAMPLE_EVERY: u32 = 64;

/// Where the thread's run-queue wait comes from: nanoseconds, cumulative, or `None`.
pub type WaitSource = Box<dyn FnMut() -> Option<u64> + Send>;

/// The calling thread's run-queue wait from `/proc/thread-self/schedstat`, if it can be read.
/// The file is opened by the thread that reads it, so make the source on the runner's thread.
pub fn thread_wait() -> WaitSource {
    let file = File::open("/proc/thread-self/schedstat").ok();
    let mut buf = [0u8; 96];
    Box::new(move || {
        let n = file.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().nth(1)?.parse().ok()
    })
}

/// The longest stall of one loop (see the module docs).
pub struct Stalls<'a> {
    wait: &'a mut WaitSource,
    limit: u64,
    prev: u64,
    /// The wait counter at the last sample.
    mark: Option<u64>,
    rounds: u32,
    /// The longest gap counted as a stall.
    pub max: u64,
}

impl<'a> Stalls<'a> {
    /// Watching from `now`, flagging gaps over `limit` nanoseconds.
    pub fn new(wait: &'a mut WaitSource, limit: u64, now: u64) -> Stalls<'a> {
        let mark = wait();
        Stalls { wait, limit, prev: now, mark, rounds: 0, max: 0 }
    }

    /// A round of the loop at `now`.
    #[inline]
    pub fn round(&mut self, now: u64) {
        let gap = now.saturating_sub(self.prev);
        self.prev = now;
        self.rounds = self.rounds.wrapping_add(1);
        if gap > self.limit {
            let w = (self.wait)();
            let stall = match (w, self.mark) {
                (Some(w), Some(m)) => gap.min(w.saturating_sub(m)),
                _ => gap,
            };
            self.max = self.max.max(stall);
            self.mark = w;
        } else {
            self.max = self.max.max(gap);
            if self.rounds.is_multiple_of(SAMPLE_EVERY) {
                self.mark = (self.wait)();
            }
        }
    }

    /// The loop slept on purpose until `now`: not a stall.
    pub fn slept(&mut self, now: u64) {
        self.prev = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    const LIMIT: u64 = 2_000_000;

    /// A fake run-queue wait counter the test moves.
    fn fake() -> (WaitSource, Arc<AtomicU64>) {
        let w = Arc::new(AtomicU64::new(0));
        let c = w.clone();
        (Box::new(move || Some(c.load(Ordering::Relaxed))), w)
    }

    #[test]
    fn a_gap_the_thread_waited_through_is_a_stall() {
        let (mut src, wait) = fake();
        let mut s = Stalls::new(&mut src, LIMIT, 0);
        s.round(1_000);
        wait.fetch_add(3_000_000, Ordering::Relaxed);
        s.round(3_001_500);
        assert_eq!(s.max, 3_000_000, "the wait, not the whole gap");
        assert!(s.max > LIMIT);
    }

    #[test]
    fn a_slow_round_that_kept_the_cpu_is_not() {
        let (mut src, wait) = fake();
        let mut s = Stalls::new(&mut src, LIMIT, 0);
        s.round(1_000);
        // 5 ms in a port's system call, 50 µs of it preempted: not a stall.
        wait.fetch_add(50_000, Ordering::Relaxed);
        s.round(5_001_000);
        assert_eq!(s.max, 50_000);
    }

    #[test]
    fn a_sleep_is_not_a_stall_and_a_late_wakeup_is_counted_by_its_wait() {
        let (mut src, wait) = fake();
        let mut s = Stalls::new(&mut src, LIMIT, 0);
        s.round(1_000);
        s.slept(10_000_000);
        s.round(10_001_000);
        assert_eq!(s.max, 1_000);
        // The sleep ran 4 ms late because the CPU was taken: run-queue wait, a stall.
        wait.fetch_add(4_000_000, Ordering::Relaxed);
        s.round(14_002_000);
        assert_eq!(s.max, 4_000_000);
    }

    #[test]
    fn earlier_waits_are_sampled_away() {
        let (mut src, wait) = fake();
        let mut s = Stalls::new(&mut src, LIMIT, 0);
        // Many short preemptions, 3 ms in all, spread over rounds that sample the counter...
        let mut t = 0;
        for _ in 0..10 * SAMPLE_EVERY {
            wait.fetch_add(3_000_000 / (10 * u64::from(SAMPLE_EVERY)), Ordering::Relaxed);
            t += 1_000;
            s.round(t);
        }
        // ...then a slow round of 3 ms that waited for nothing: not a stall.
        s.round(t + 3_000_000);
        assert!(s.max < LIMIT, "{}", s.max);
    }

    #[test]
    fn without_a_counter_the_gap_counts() {
        let mut src: WaitSource = Box::new(|| None);
        let mut s = Stalls::new(&mut src, LIMIT, 0);
        s.round(5_000_000);
        assert_eq!(s.max, 5_000_000);
    }

    #[test]
    fn this_threads_wait_counter_reads_where_linux_has_it() {
        let mut src = thread_wait();
        match (src(), std::fs::metadata("/proc/thread-self/schedstat").is_ok()) {
            (Some(a), true) => assert!(src().unwrap() >= a),
            (None, true) => panic!("/proc/thread-self/schedstat exists but did not parse"),
            (_, false) => eprintln!("skipped: no /proc/thread-self/schedstat here"),
        }
    }
}
