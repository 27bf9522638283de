//! Progress on stderr: one line redrawn in place on a terminal, otherwise a line per trial (so a
//! long run that is logged or piped still says what it is doing).

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Progress of a test: which trial, the rate being tried, and an estimate of the time left.
pub struct Progress {
    enabled: bool,
    tty: bool,
    start: Instant,
    done: usize,
    planned: usize,
    secs_per_trial: f64,
}

impl Progress {
    /// Draws on stderr: in place on a terminal, a line per trial otherwise.
    pub fn stderr() -> Progress {
        Progress { enabled: true, tty: std::io::stderr().is_terminal(), ..Self::silent() }
    }

    /// Draws nothing.
    pub fn silent() -> Progress {
        Progress {
            enabled: false,
            tty: false,
            start: Instant::now(),
            done: 0,
            planned: 0,
            secs_per_trial: 0.0,
        }
    }

    /// Expects `trials` more trials of about `secs` each (an estimate: searches stop early).
    pub fn plan(&mut self, trials: usize, secs: f64) {
        self.planned = self.done + trials;
        if self.done == 0 {
            self.secs_per_trial = secs;
        }
    }

    /// A trial of `what` at `rate` (frames per second; `None`: unpaced) starts.
    pub fn trial(&mut self, what: &str, rate: Option<f64>) {
        if self.done > 0 {
            self.secs_per_trial = self.start.elapsed().as_secs_f64() / self.done as f64;
        }
        self.done += 1;
        self.planned = self.planned.max(self.done);
        if !self.enabled {
            return;
        }
        let left = (self.planned - self.done + 1) as f64 * self.secs_per_trial;
        let rate = rate.map_or("max rate".to_string(), fmt_rate);
        let mut e = std::io::stderr().lock();
        let (start, end) = if self.tty { ("\r\x1b[K", "") } else { ("", "\n") };
        let _ = write!(
            e,
            "{start}{what}: trial {}/~{} at {rate}, ~{} left{end}",
            self.done,
            self.planned,
            fmt_secs(left)
        );
        let _ = e.flush();
    }

    /// Clears the line.
    pub fn finish(&mut self) {
        if self.enabled && self.tty {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

/// 1234567.0 → "1.23 Mpps"; 45000.0 → "45.0 kpps".
pub fn fmt_rate(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{:.2} Mpps", pps / 1e6)
    } else if pps >= 1e3 {
        format!("{:.1} kpps", pps / 1e3)
    } else {
        format!("{pps:.0} pps")
    }
}

/// 75.0 → "1m15s".
pub fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}
