//! `ndr-pdr`: the highest rates with no loss (NDR) and with at most 0.5 % loss (PDR), in the
//! style of FD.io CSIT's MLRsearch: short trials first, then longer ones that re-check and
//! narrow the bounds, then confirmation trials at the final duration.
//!
//! The search keeps, per target, a lower bound (a rate whose trial met the target) and an
//! upper bound (one whose trial did not). Phase `p` of `phases` uses trials of a duration
//! growing geometrically from the initial duration to the final one, and narrows the bracket
//! to a relative width of `goal_width · 2^(phases − 1 − p)`. Each phase first re-measures the
//! bounds it inherited at its own duration (a longer trial can fail where a shorter passed),
//! moving them outwards in doubling steps while they do not hold, then bisects. Trials are
//! shared between NDR and PDR within a phase. The result per target is the final lower bound,
//! with `repetitions` confirmation trials at that rate and the final duration, reported as
//! they came out (how many met the target included).

use std::time::Duration;

use serde::Serialize;

use super::{summary_of, MaxResult, Session};
use crate::runner::Latency;
use crate::stats::Summary;

/// Options of the NDR/PDR search.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Duration of the first phase's trials (the last phase uses the common duration).
    #[serde(rename = "initial_duration_s", serialize_with = "super::secs")]
    pub initial_duration: Duration,
    pub phases: usize,
    /// Final relative width of the bracket, (upper − lower) / upper (CSIT: 0.005).
    pub goal_width: f64,
    /// Loss ratio the PDR may have (CSIT: 0.005).
    pub pdr_loss: f64,
    /// The lowest rate tried; `None`: 1 % of the maximum.
    pub floor_pps: Option<f64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            initial_duration: Duration::from_millis(100),
            phases: 3,
            goal_width: 0.005,
            pdr_loss: 0.005,
            floor_pps: None,
        }
    }
}

/// One target's result.
#[derive(Clone, Debug, Serialize)]
pub struct Bound {
    /// "NDR" or "PDR".
    pub name: String,
    pub loss_target: f64,
    /// The final lower bound, frames per second (0 if not even the floor met the target).
    pub rate_pps: f64,
    pub found: bool,
    /// The final upper bound, if one was found below the maximum.
    pub upper_pps: Option<f64>,
    /// The last search trial at `rate_pps`.
    pub search_trial: Option<usize>,
    /// Confirmation trials at `rate_pps` and the final duration.
    pub confirm: Vec<usize>,
    /// How many confirmation trials met the target.
    pub confirmed: usize,
    pub forwarded: Summary,
    pub loss: Summary,
    /// Latency over the confirmation trials: per-trial percentiles, and every frame of them
    /// together.
    pub p50_us: Summary,
    pub p99_us: Summary,
    pub max_us: Option<f64>,
    pub all: Option<Latency>,
    /// `(latency µs, fraction of frames at or below)` over every confirmation frame.
    pub cdf: Vec<(f64, f64)>,
}

/// One phase of the search.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub duration_s: f64,
    pub width: f64,
    /// (lower, upper) per target at the end of the phase.
    pub ndr: (f64, Option<f64>),
    pub pdr: (f64, Option<f64>),
    pub trials: Vec<usize>,
}

/// The NDR/PDR result.
#[derive(Clone, Debug, Serialize)]
pub struct NdrPdrResult {
    pub max: MaxResult,
    pub floor_pps: f64,
    pub ndr: Bound,
    pub pdr: Bound,
    pub phases: Vec<Phase>,
}

#[derive(Clone, Copy, Default)]
struct Bracket {
    lo: Option<f64>,
    hi: Option<f64>,
    lo_trial: Option<usize>,
    /// Not even the floor met the target.
    none: bool,
}

/// Runs the NDR/PDR search.
pub fn run(s: &mut Session, cfg: &Config) -> NdrPdrResult {
    let max = s.max();
    let top = max.pps.max(1.0);
    let floor = cfg.floor_pps.unwrap_or(top / 100.0).clamp(1.0, top);
    let phases = cfg.phases.max(1);
    let final_d = s.common.duration.as_secs_f64();
    let first_d = cfg.initial_duration.as_secs_f64().min(final_d);
    let est: f64 = (0..phases).map(|p| phase_duration(first_d, final_d, p, phases)).sum();
    let reps = s.common.repetitions.max(1);
    s.progress.plan(phases * 8 + 2 * reps, (est / phases as f64) + s.common.warmup.as_secs_f64());
    let targets = [0.0, cfg.pdr_loss];
    let mut br = [Bracket::default(); 2];
    let mut out_phases = Vec::new();
    for p in 0..phases {
        let d = Duration::from_secs_f64(phase_duration(first_d, final_d, p, phases));
        let width = cfg.goal_width * 2f64.powi((phases - 1 - p) as i32);
        // Trials of this phase: (rate, trial index), shared by both targets.
        let mut done: Vec<(f64, usize)> = Vec::new();
        for (t, &loss) in targets.iter().enumerate() {
            let mut measure = |s: &mut Session, rate: f64| -> (bool, usize) {
                let i = match done.iter().find(|(r, _)| *r == rate) {
                    Some(&(_, i)) => i,
                    None => {
                        let load = s.paced(rate, d);
                        let i = s.run(if t == 0 { "ndr" } else { "pdr" }, p, done.len(), &load);
                        done.push((rate, i));
                        i
                    }
                };
                (s.trial(i).passes(loss), i)
            };
            br[t] = narrow(s, &mut measure, br[t], top, floor, width);
        }
        out_phases.push(Phase {
            duration_s: d.as_secs_f64(),
            width,
            ndr: (br[0].lo.unwrap_or(0.0), br[0].hi),
            pdr: (br[1].lo.unwrap_or(0.0), br[1].hi),
            trials: done.iter().map(|&(_, i)| i).collect(),
        });
    }
    let d = s.common.duration;
    let bound = |s: &mut Session, t: usize, name: &str| {
        let b = br[t];
        let rate = b.lo.unwrap_or(0.0);
        let (confirm, all) = if rate > 0.0 {
            let load = s.paced(rate, d);
            s.run_merged(&format!("{}_confirm", name.to_lowercase()), reps, &load)
        } else {
            (Vec::new(), crate::analyzer::latency_histogram())
        };
        let lat: Vec<Latency> = confirm.iter().filter_map(|&i| s.trial(i).latency).collect();
        Bound {
            name: name.into(),
            loss_target: targets[t],
            rate_pps: rate,
            found: !b.none && b.lo.is_some(),
            upper_pps: b.hi,
            search_trial: b.lo_trial,
            confirmed: confirm.iter().filter(|&&i| s.trial(i).passes(targets[t])).count(),
            forwarded: summary_of(s, &confirm, |x| x.forwarded_pps),
            loss: summary_of(s, &confirm, |x| x.loss_ratio),
            p50_us: Summary::of(&lat.iter().map(|l| l.p50_us).collect::<Vec<_>>()),
            p99_us: Summary::of(&lat.iter().map(|l| l.p99_us).collect::<Vec<_>>()),
            max_us: lat.iter().map(|l| l.max_us).reduce(f64::max),
            all: Latency::of(&all),
            cdf: super::rfc2544::cdf(&all),
            confirm,
        }
    };
    let ndr = bound(s, 0, "NDR");
    let pdr = bound(s, 1, "PDR");
    s.progress.finish();
    NdrPdrResult { max, floor_pps: floor, ndr, pdr, phases: out_phases }
}

fn phase_duration(first: f64, last: f64, p: usize, phases: usize) -> f64 {
    if phases == 1 {
        return last;
    }
    first * (last / first).powf(p as f64 / (phases - 1) as f64)
}

/// One phase's work on one target's bracket.
fn narrow<C>(
    s: &mut C,
    measure: &mut impl FnMut(&mut C, f64) -> (bool, usize),
    mut b: Bracket,
    top: f64,
    floor: f64,
    width: f64,
) -> Bracket {
    if b.none {
        // Re-check the floor at this phase's duration: still nothing?
        let (ok, i) = measure(s, floor);
        if !ok {
            return b;
        }
        b = Bracket { lo: Some(floor), lo_trial: Some(i), hi: b.hi, none: false };
    }
    // The upper side: the top, or the inherited upper bound, must fail.
    let mut hi = b.hi.unwrap_or(top);
    let (ok, i) = measure(s, hi);
    if ok {
        // It holds now: it is a lower bound; step up until something fails or the top holds.
        let mut lo = hi;
        let mut lo_i = i;
        let mut step = (hi * width).max(1.0);
        loop {
            if lo >= top {
                return Bracket { lo: Some(top), hi: None, lo_trial: Some(lo_i), none: false };
            }
            let cand = (lo + step).min(top);
            let (ok, i) = measure(s, cand);
            if !ok {
                hi = cand;
                break;
            }
            lo = cand;
            lo_i = i;
            step *= 2.0;
        }
        b.lo = Some(lo);
        b.lo_trial = Some(lo_i);
    }
    // The lower side: the inherited lower bound (or half the upper) must hold.
    let mut lo = match b.lo {
        Some(l) if l < hi => l,
        _ => (hi * 0.5).max(floor),
    };
    let mut step = (hi - lo).max(hi * width);
    let lo_i = loop {
        let (ok, i) = measure(s, lo);
        if ok {
            break i;
        }
        hi = lo;
        if lo <= floor {
            return Bracket { lo: None, hi: Some(hi), lo_trial: None, none: true };
        }
        lo = (lo - step).max(floor);
        step *= 2.0;
    };
    let mut lo_i = lo_i;
    while (hi - lo) / hi > width {
        let mid = 0.5 * (lo + hi);
        let (ok, i) = measure(s, mid);
        if ok {
            lo = mid;
            lo_i = i;
        } else {
            hi = mid;
        }
    }
    Bracket { lo: Some(lo), hi: Some(hi), lo_trial: Some(lo_i), none: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the phases of the search against a DUT that passes exactly below `limit`
    /// (`limit_at(p)` in phase `p`), counting trials.
    fn search(top: f64, limits: &[f64], width: f64) -> (Bracket, usize) {
        let mut b = Bracket::default();
        let mut trials = 0;
        for (p, &limit) in limits.iter().enumerate() {
            let w = width * 2f64.powi((limits.len() - 1 - p) as i32);
            let mut m = |n: &mut usize, r: f64| {
                *n += 1;
                (r <= limit, *n)
            };
            b = narrow(&mut trials, &mut m, b, top, top / 100.0, w);
        }
        (b, trials)
    }

    #[test]
    fn the_bracket_closes_on_the_limit_within_the_goal_width() {
        // A limit in the middle; one that a longer phase lowers; one above the top; one below
        // the floor.
        let (b, n) = search(10e6, &[6.3e6, 6.3e6, 6.3e6], 0.005);
        let (lo, hi) = (b.lo.unwrap(), b.hi.unwrap());
        assert!(lo <= 6.3e6 && hi > 6.3e6 && (hi - lo) / hi <= 0.005, "{lo} {hi}");
        assert!(n < 30, "{n} trials");
        let (b, _) = search(10e6, &[7e6, 5e6], 0.01);
        let (lo, hi) = (b.lo.unwrap(), b.hi.unwrap());
        assert!(lo <= 5e6 && hi > 5e6 && (hi - lo) / hi <= 0.01, "{lo} {hi}");
        let (b, _) = search(10e6, &[20e6, 20e6], 0.01);
        assert_eq!((b.lo, b.hi, b.none), (Some(10e6), None, false));
        let (b, _) = search(10e6, &[1e3, 1e3], 0.01);
        assert!(b.none && b.lo.is_none());
        // A limit that rises between phases: the bound moves up again.
        let (b, _) = search(10e6, &[3e6, 4e6], 0.01);
        let (lo, hi) = (b.lo.unwrap(), b.hi.unwrap());
        assert!(lo <= 4e6 && hi > 4e6 && (hi - lo) / hi <= 0.01, "{lo} {hi}");
    }
}
