//! The measurements: `sweep` (seed 000 §3.1), `rfc2544` (RFC 2544 §26) and `ndr-pdr`
//! (CSIT MLRsearch style). Each runs trials through a [`Runner`] and returns a result that
//! serialises to the `results` of the JSON report; every trial also lands in
//! [`Session::trials`], one CSV row each.

use std::time::Duration;

use serde::Serialize;

use crate::pacer::Rate;
use crate::progress::Progress;
use crate::runner::{Load, Runner, TrialResult, Until};
use crate::stats::Summary;

pub mod ndrpdr;
pub mod rfc2544;
pub mod sweep;

/// Settings every method shares.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Common {
    /// Length of a measured trial (the final trials, for `ndr-pdr`).
    #[serde(rename = "duration_s", serialize_with = "secs")]
    pub duration: Duration,
    /// Traffic at the trial's rate before each measured window.
    #[serde(rename = "warmup_s", serialize_with = "secs")]
    pub warmup: Duration,
    /// How many times each measurement is repeated.
    pub repetitions: usize,
    /// Frames per release; `None`: the frames due in 8 µs, 1..=64.
    pub burst: Option<usize>,
    /// The rate called 100 % (and the top of every search); `None`: measured first, as the
    /// maximum receive rate.
    pub max_pps: Option<f64>,
    /// Attempts per trial: an invalid trial (the tester's thread stalled) is run again, up to
    /// this many times in all; the last attempt counts, valid or not.
    pub attempts: usize,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            duration: Duration::from_secs(1),
            warmup: Duration::from_millis(100),
            repetitions: 10,
            burst: None,
            max_pps: None,
            attempts: 3,
        }
    }
}

pub(crate) fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// One trial and where it belongs.
#[derive(Clone, Debug, Serialize)]
pub struct TrialRecord {
    /// Which part of the method ran it ("max", "throughput", "latency", "step", ...).
    pub phase: String,
    /// The step (or search) within the phase.
    pub step: usize,
    /// The repetition (or the trial within a search).
    pub rep: usize,
    /// 1 for the first attempt; more when earlier attempts were invalid.
    pub attempt: usize,
    /// False for an attempt that was run again (it is kept, but nothing uses it).
    pub used: bool,
    #[serde(flatten)]
    pub result: TrialResult,
}

/// A runner, the shared settings, the progress line, and every trial so far.
pub struct Session<'a> {
    pub runner: &'a mut Runner,
    pub common: Common,
    pub progress: Progress,
    pub trials: Vec<TrialRecord>,
}

impl<'a> Session<'a> {
    /// A session over `runner`.
    pub fn new(runner: &'a mut Runner, common: Common, progress: Progress) -> Session<'a> {
        Session { runner, common, progress, trials: Vec::new() }
    }

    /// A paced load at `pps` for `d`, with the common warm-up and burst.
    pub fn paced(&self, pps: f64, d: Duration) -> Load {
        Load { burst: self.common.burst, ..Load::paced(pps, d, self.common.warmup) }
    }

    /// Runs `load` (again while invalid, up to [`Common::attempts`] times), records every
    /// attempt, and returns the index in [`Session::trials`] of the one that counts.
    pub fn run(&mut self, phase: &str, step: usize, rep: usize, load: &Load) -> usize {
        let attempts = self.common.attempts.max(1);
        for attempt in 1..=attempts {
            self.progress.trial(phase, load.rate.pps());
            let result = self.runner.trial(load);
            let last = result.valid || attempt == attempts;
            self.trials.push(TrialRecord {
                phase: phase.to_string(),
                step,
                rep,
                attempt,
                used: last,
                result,
            });
            if last {
                break;
            }
        }
        self.trials.len() - 1
    }

    /// Runs `load` `reps` times like [`Session::run`] and merges the latencies of the trials
    /// that count into one histogram.
    pub fn run_merged(
        &mut self,
        phase: &str,
        reps: usize,
        load: &Load,
    ) -> (Vec<usize>, hdrhistogram::Histogram<u64>) {
        let mut all = crate::analyzer::latency_histogram();
        let idx = (0..reps)
            .map(|r| {
                let i = self.run(phase, 0, r, load);
                // Same bounds and precision on both sides: adding cannot fail.
                let _ = all.add(self.runner.latency_histogram());
                i
            })
            .collect();
        (idx, all)
    }

    /// Trials that count, and how many of them are invalid even so.
    pub fn validity(&self) -> (usize, usize, usize) {
        let used = self.trials.iter().filter(|t| t.used).count();
        let invalid_used = self.trials.iter().filter(|t| t.used && !t.result.valid).count();
        (self.trials.len(), used, invalid_used)
    }

    /// The trial at index `i`.
    pub fn trial(&self, i: usize) -> &TrialResult {
        &self.trials[i].result
    }

    /// The rate called 100 %: `--max-rate`, or measured now (see [`MaxResult`]).
    pub fn max(&mut self) -> MaxResult {
        if let Some(pps) = self.common.max_pps {
            return MaxResult { pps, measured: false, summary: None, trials: Vec::new() };
        }
        let n = self.common.repetitions.clamp(1, 3);
        self.progress.plan(n, self.common.duration.as_secs_f64());
        let load = Load {
            rate: Rate::Max,
            until: Until::Time(self.common.duration),
            warmup: self.common.warmup,
            burst: self.common.burst,
            retry_refused: true,
        };
        let trials: Vec<usize> = (0..n).map(|r| self.run("max", 0, r, &load)).collect();
        let fwd: Vec<f64> = trials.iter().map(|&i| self.trial(i).forwarded_pps).collect();
        let summary = Summary::of(&fwd);
        MaxResult { pps: summary.mean, measured: true, summary: Some(summary), trials }
    }
}

/// The rate a method calls 100 %.
#[derive(Clone, Debug, Serialize)]
pub struct MaxResult {
    /// Frames per second.
    pub pps: f64,
    /// True if measured: the mean forwarded rate of up to 3 unpaced trials in which refused
    /// frames were offered again (maximum receive rate with back-pressure: the slower of the
    /// generator and the DUT). False if given with `--max-rate`.
    pub measured: bool,
    pub summary: Option<Summary>,
    /// Indices into the trials.
    pub trials: Vec<usize>,
}

/// Mean of `f` over trials `idx`.
pub(crate) fn mean_of(s: &Session, idx: &[usize], f: impl Fn(&TrialResult) -> f64) -> f64 {
    if idx.is_empty() {
        return 0.0;
    }
    idx.iter().map(|&i| f(s.trial(i))).sum::<f64>() / idx.len() as f64
}

/// Summary of `f` over trials `idx`.
pub(crate) fn summary_of(s: &Session, idx: &[usize], f: impl Fn(&TrialResult) -> f64) -> Summary {
    Summary::of(&idx.iter().map(|&i| f(s.trial(i))).collect::<Vec<_>>())
}
