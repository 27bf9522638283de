//! `sweep`: offered load in steps against forwarded load, each step repeated, with 99 %
//! confidence intervals (seed 000 §3.1: the paper's Figs 2-8 plot exactly this).

use serde::Serialize;

use super::{mean_of, summary_of, MaxResult, Session};
use crate::stats::Summary;

/// Which rates to offer.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Steps {
    /// Percentages of the maximum (measured first unless given).
    PercentOfMax(Vec<f64>),
    /// Frames per second.
    Rates(Vec<f64>),
}

impl Default for Steps {
    /// 10 %, 20 %, ... 150 % of the maximum.
    fn default() -> Self {
        Steps::PercentOfMax((1..=15).map(|i| i as f64 * 10.0).collect())
    }
}

/// One step: its repetitions in brief.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// The pacer's goal.
    pub target_pps: f64,
    pub percent_of_max: Option<f64>,
    /// Mean over the repetitions of what the port accepted per second.
    pub offered_pps: f64,
    /// Mean of what the generator put out per second (accepted + refused).
    pub attempted_pps: f64,
    /// Whether the generator put out at least 99 % of the target (if not, the tester was the
    /// bottleneck at this step, not the DUT).
    pub reached_target: bool,
    /// Mean forwarded rate.
    pub forwarded_pps: f64,
    /// Half-width of the 99 % confidence interval of the mean forwarded rate (Student t over
    /// the repetitions; `null` with one repetition).
    pub ci99_pps: Option<f64>,
    pub forwarded: Summary,
    /// Mean loss ratio ((lost + refused) / attempted).
    pub loss_ratio: f64,
    pub loss: Summary,
    /// Means over the repetitions of each trial's latency percentiles, and the largest
    /// maximum.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    /// Indices into the trials.
    pub trials: Vec<usize>,
}

/// The result of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepResult {
    pub max: Option<MaxResult>,
    pub steps: Vec<Step>,
}

/// Runs the sweep.
pub fn run(s: &mut Session, steps: &Steps) -> SweepResult {
    let max = match steps {
        Steps::PercentOfMax(_) => Some(s.max()),
        Steps::Rates(_) => None,
    };
    let rates: Vec<(f64, Option<f64>)> = match steps {
        Steps::PercentOfMax(p) => {
            let m = max.as_ref().map_or(0.0, |m| m.pps);
            p.iter().map(|&p| (m * p / 100.0, Some(p))).collect()
        }
        Steps::Rates(r) => r.iter().map(|&r| (r, None)).collect(),
    };
    let reps = s.common.repetitions.max(1);
    let secs = (s.common.duration + s.common.warmup).as_secs_f64();
    s.progress.plan(rates.len() * reps, secs);
    let mut out = Vec::new();
    for (k, &(pps, pct)) in rates.iter().enumerate() {
        let load = s.paced(pps.max(1.0), s.common.duration);
        let idx: Vec<usize> = (0..reps).map(|r| s.run("step", k, r, &load)).collect();
        let forwarded = summary_of(s, &idx, |t| t.forwarded_pps);
        let loss = summary_of(s, &idx, |t| t.loss_ratio);
        let lat: Vec<_> = idx.iter().filter_map(|&i| s.trial(i).latency).collect();
        let lat_mean = |f: fn(&crate::runner::Latency) -> f64| {
            (!lat.is_empty()).then(|| lat.iter().map(f).sum::<f64>() / lat.len() as f64)
        };
        out.push(Step {
            target_pps: pps,
            percent_of_max: pct,
            offered_pps: mean_of(s, &idx, |t| t.offered_pps),
            attempted_pps: mean_of(s, &idx, |t| t.attempted_pps),
            reached_target: mean_of(s, &idx, |t| t.attempted_pps) >= 0.99 * pps,
            forwarded_pps: forwarded.mean,
            ci99_pps: forwarded.ci99,
            forwarded,
            loss_ratio: loss.mean,
            loss,
            p50_us: lat_mean(|l| l.p50_us),
            p99_us: lat_mean(|l| l.p99_us),
            max_us: lat.iter().map(|l| l.max_us).reduce(f64::max),
            trials: idx,
        });
    }
    SweepResult { max, steps: out }
}
