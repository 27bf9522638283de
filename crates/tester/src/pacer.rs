//! Rate control: when to release how many frames.
//!
//! A paced load offers frame `i` at `t0 + i / rate`. The pacer releases frames in bursts: a
//! burst of `b` frames leaves as soon as the due time of its last frame has passed, so no frame
//! leaves before its time and the long-run rate is exactly `rate`. The caller spins on the clock
//! and asks [`Pacer::poll`] each time round its loop; how late a release is compared with its
//! computed time is the pacer's granularity on this machine, and it is measured and reported
//! ([`PacerStats`]). A caller that fell behind (descheduled, say) catches up with bursts of up
//! to `max_burst` frames: the count stays exact and the lateness shows in the stats.

use serde::Serialize;

/// How fast to offer frames.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// This many frames per second.
    Pps(f64),
    /// As fast as the generator can: no pacing.
    Max,
}

impl Rate {
    /// The rate in frames per second, or `None` for [`Rate::Max`].
    pub fn pps(self) -> Option<f64> {
        match self {
            Rate::Pps(r) => Some(r),
            Rate::Max => None,
        }
    }
}

/// Frames per burst when the caller does not choose: the frames due in 8 µs, 1 to 64.
pub fn auto_burst(rate: Rate) -> usize {
    match rate {
        Rate::Pps(r) => ((r * 8e-6).ceil() as usize).clamp(1, 64),
        Rate::Max => 64,
    }
}

/// How well the releases kept to their computed times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PacerStats {
    /// Frames per burst.
    pub burst: usize,
    /// Bursts released.
    pub releases: u64,
    /// Mean of (release time − computed time), nanoseconds.
    pub mean_late_ns: f64,
    /// Largest (release time − computed time), nanoseconds.
    pub max_late_ns: u64,
    /// Releases more than 100 µs late (the caller was away: descheduled or busy).
    pub late_over_100us: u64,
}

/// Releases `total` frames at `rate` from `t0`.
#[derive(Clone, Debug)]
pub struct Pacer {
    ns_per_frame: f64,
    t0: u64,
    total: u64,
    released: u64,
    burst: u64,
    max_burst: u64,
    late_sum: u128,
    stats: PacerStats,
}

impl Pacer {
    /// A pacer for `total` frames (`u64::MAX`: until the caller stops) at `rate`, in bursts of
    /// `burst`, catching up with bursts of at most `max_burst`.
    pub fn new(rate: Rate, burst: usize, max_burst: usize, t0: u64, total: u64) -> Pacer {
        let ns_per_frame = match rate {
            Rate::Pps(r) => {
                assert!(r > 0.0 && r.is_finite(), "rate {r} is not positive");
                1e9 / r
            }
            Rate::Max => 0.0,
        };
        let burst = burst.clamp(1, max_burst.max(1)) as u64;
        Pacer {
            ns_per_frame,
            t0,
            total,
            released: 0,
            burst,
            max_burst: max_burst.max(1) as u64,
            late_sum: 0,
            stats: PacerStats { burst: burst as usize, ..PacerStats::default() },
        }
    }

    /// When the next release is due (`None` when done or unpaced).
    #[inline]
    pub fn next_due_ns(&self) -> Option<u64> {
        let left = self.total - self.released;
        (left > 0 && self.ns_per_frame > 0.0)
            .then(|| self.due_ns(self.released + self.burst.min(left) - 1))
    }

    /// When frame `i` is due.
    #[inline]
    pub fn due_ns(&self, i: u64) -> u64 {
        self.t0 + (i as f64 * self.ns_per_frame) as u64
    }

    /// How many frames to release at `now`: 0 until the next burst is due. Call
    /// [`Pacer::released`] with what was actually released.
    #[inline]
    pub fn poll(&mut self, now: u64) -> usize {
        let left = self.total - self.released;
        if left == 0 {
            return 0;
        }
        let b = self.burst.min(left);
        let last = self.released + b - 1;
        let t = self.due_ns(last);
        if now < t {
            return 0;
        }
        // Catch up: everything due by now, within one release's limit.
        let due = if self.ns_per_frame == 0.0 {
            b
        } else {
            (((now - self.t0) as f64 / self.ns_per_frame) as u64 + 1).min(self.total)
                - self.released
        };
        let n = due.clamp(b, self.max_burst).min(left);
        // Unpaced releases have no computed time to be late for.
        let late = if self.ns_per_frame == 0.0 { 0 } else { now - t };
        self.stats.releases += 1;
        self.late_sum += late as u128;
        self.stats.max_late_ns = self.stats.max_late_ns.max(late);
        self.stats.late_over_100us += (late > 100_000) as u64;
        n as usize
    }

    /// Records that `n` frames left (or were given up on).
    #[inline]
    pub fn released(&mut self, n: usize) {
        self.released = (self.released + n as u64).min(self.total);
    }

    /// Frames released so far.
    pub fn count(&self) -> u64 {
        self.released
    }

    /// True once all `total` frames have been released.
    #[inline]
    pub fn done(&self) -> bool {
        self.released >= self.total
    }

    /// How the releases kept time.
    pub fn stats(&self) -> PacerStats {
        let mut s = self.stats;
        if s.releases > 0 {
            s.mean_late_ns = self.late_sum as f64 / s.releases as f64;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_bursts_when_their_last_frame_is_due() {
        // 1 Mpps: a frame every 1000 ns; bursts of 4.
        let mut p = Pacer::new(Rate::Pps(1e6), 4, 16, 1000, 10);
        assert_eq!(p.poll(1000), 0, "frame 3 is due at 4000");
        assert_eq!(p.poll(3999), 0);
        assert_eq!(p.poll(4000), 4);
        p.released(4);
        assert_eq!(p.poll(7999), 0);
        assert_eq!(p.poll(8500), 4);
        p.released(4);
        // The last two frames form a short burst, due with frame 9 at 10000.
        assert_eq!(p.poll(9999), 0);
        assert_eq!(p.poll(10_000), 2);
        p.released(2);
        assert!(p.done());
        assert_eq!(p.poll(1 << 40), 0);
        let s = p.stats();
        assert_eq!((s.releases, s.max_late_ns), (3, 500));
        assert!((s.mean_late_ns - 500.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn catches_up_after_a_stall_without_changing_the_count() {
        let mut p = Pacer::new(Rate::Pps(1e6), 2, 8, 0, 100);
        // Away for 50 µs: 51 frames are due; catch up 8 at a time.
        let mut out = 0;
        while let n @ 1.. = p.poll(50_000) {
            p.released(n);
            out += n;
            assert!(n <= 8);
        }
        assert_eq!(out, 51);
        let mut t = 50_000;
        while !p.done() {
            t += 100;
            let n = p.poll(t);
            p.released(n);
        }
        assert_eq!(p.count(), 100);
    }

    #[test]
    fn unpaced_releases_max_bursts() {
        let mut p = Pacer::new(Rate::Max, 64, 64, 0, 100);
        assert_eq!(p.poll(0), 64);
        p.released(64);
        assert_eq!(p.poll(0), 36);
        p.released(36);
        assert!(p.done());
        assert_eq!(auto_burst(Rate::Pps(10_000.0)), 1);
        assert_eq!(auto_burst(Rate::Pps(1e6)), 8);
        assert_eq!(auto_burst(Rate::Pps(50e6)), 64);
    }
}
