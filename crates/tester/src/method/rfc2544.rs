//! `rfc2544`: throughput (§26.1), latency (§26.2), frame loss rate (§26.3) and back-to-back
//! frames (§26.4).
//!
//! Semantics, made explicit:
//! - **Throughput** is the highest rate at which a trial loses no frame (loss ≤ the tolerance,
//!   0 by default), found by binary search between the floor and the maximum, to the
//!   resolution. The search is repeated `repetitions` times; the result is their mean with a
//!   99 % confidence interval. If even the floor loses frames, that search finds nothing and
//!   counts as **0** (`found: false`): "no rate at or above `floor_pps` is loss-free". A DUT
//!   that drops at every rate therefore has throughput 0, not the floor.
//! - **Latency** is measured over every frame of `repetitions` trials at the throughput (all
//!   frames carry a timestamp, rather than one tagged frame per trial as in 1999); it is
//!   skipped when no throughput was found.
//! - **Frame loss rate**: trials at 100 %, 90 %, ... of the maximum, each repeated, stopping
//!   after two successive steps without loss (§26.3).
//! - **Back-to-back**: bursts sent unpaced (the generator's top speed) with nothing offered
//!   again; binary search on the burst length for the longest with no loss, up to a limit,
//!   repeated; after each burst the DUT drains to idle (§26.4).

use std::time::Duration;

use serde::Serialize;

use super::{summary_of, MaxResult, Session};
use crate::pacer::Rate;
use crate::runner::{Latency, Load, Until};
use crate::stats::Summary;

/// Options of the RFC 2544 test.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Stop the throughput search when the bracket is this narrow, frames per second.
    pub resolution: Resolution,
    /// The lowest rate tried, frames per second; `None`: 1 % of the maximum.
    pub floor_pps: Option<f64>,
    /// Loss ratio a trial may have and still pass (RFC 2544: 0).
    pub loss_tolerance: f64,
    pub latency: bool,
    pub frame_loss: bool,
    pub back_to_back: bool,
    /// The longest burst tried.
    pub b2b_max_frames: u64,
    /// Stop the burst search when the bracket is this narrow, frames.
    pub b2b_resolution_frames: u64,
}

/// A resolution in frames per second or as a fraction of the maximum.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    Pps(f64),
    FractionOfMax(f64),
}

impl Resolution {
    /// Parses "10k" (frames per second) or "0.5%" (of the maximum).
    pub fn parse(s: &str) -> Result<Resolution, crate::Error> {
        match s.strip_suffix('%') {
            Some(p) => match p.trim().parse::<f64>() {
                Ok(v) if v > 0.0 && v < 100.0 => Ok(Resolution::FractionOfMax(v / 100.0)),
                _ => Err(format!("resolution {s:?}: a percentage in (0, 100)").into()),
            },
            None => match crate::parse_rate(s) {
                Ok(v) if v > 0.0 => Ok(Resolution::Pps(v)),
                _ => Err(format!("resolution {s:?}: a rate (10k) or a percentage (0.5%)").into()),
            },
        }
    }

    fn pps(self, max: f64) -> f64 {
        match self {
            Resolution::Pps(p) => p,
            Resolution::FractionOfMax(f) => f * max,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            resolution: Resolution::FractionOfMax(0.01),
            floor_pps: None,
            loss_tolerance: 0.0,
            latency: true,
            frame_loss: true,
            back_to_back: true,
            b2b_max_frames: 1_000_000,
            b2b_resolution_frames: 64,
        }
    }
}

/// One throughput search.
#[derive(Clone, Debug, Serialize)]
pub struct Search {
    /// The highest loss-free rate, or 0 if not even the floor was.
    pub throughput_pps: f64,
    pub found: bool,
    pub trials: Vec<usize>,
}

/// Throughput over the repeated searches.
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Mean over the searches (0 for a search that found nothing).
    pub pps: f64,
    pub summary: Summary,
    /// True if every search found a loss-free rate.
    pub found: bool,
    pub resolution_pps: f64,
    pub floor_pps: f64,
    pub searches: Vec<Search>,
}

/// Latency at the throughput.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyResult {
    pub rate_pps: f64,
    /// Over every frame of every latency trial.
    pub all: Latency,
    /// Per-trial medians and means, across trials.
    pub p50: Summary,
    pub mean: Summary,
    /// Loss in those trials (expected 0 at the throughput; not guaranteed on a noisy host).
    pub loss: Summary,
    pub trials: Vec<usize>,
    /// `(latency µs, fraction of frames at or below)`, for the latency plot.
    pub cdf: Vec<(f64, f64)>,
}

/// One step of the frame loss rate curve.
#[derive(Clone, Debug, Serialize)]
pub struct LossStep {
    pub percent_of_max: f64,
    pub target_pps: f64,
    pub loss_ratio: Summary,
    pub offered_pps: f64,
    pub forwarded: Summary,
    pub trials: Vec<usize>,
}

/// Back-to-back bursts.
#[derive(Clone, Debug, Serialize)]
pub struct BackToBack {
    /// Mean of the longest loss-free burst over the searches, frames.
    pub frames: Summary,
    /// Each search's result.
    pub per_search: Vec<u64>,
    /// True if some search had no loss even at the limit (the result is then a lower bound).
    pub reached_limit: bool,
    pub limit_frames: u64,
    pub resolution_frames: u64,
    pub trials: Vec<usize>,
}

/// The RFC 2544 result.
#[derive(Clone, Debug, Serialize)]
pub struct Rfc2544Result {
    pub max: MaxResult,
    pub throughput: Throughput,
    pub latency: Option<LatencyResult>,
    pub frame_loss: Vec<LossStep>,
    pub back_to_back: Option<BackToBack>,
}

/// Runs the RFC 2544 test.
pub fn run(s: &mut Session, cfg: &Config) -> Rfc2544Result {
    let max = s.max();
    let top = max.pps.max(1.0);
    let res = cfg.resolution.pps(top).max(1.0);
    let floor = cfg.floor_pps.unwrap_or(top / 100.0).clamp(1.0, top);
    let reps = s.common.repetitions.max(1);
    let d = s.common.duration;
    let per_search = 2 + ((top - floor) / res).log2().ceil().max(0.0) as usize;
    let secs = (d + s.common.warmup).as_secs_f64();
    s.progress.plan(reps * (per_search + 1) + if cfg.frame_loss { reps * 3 } else { 0 }, secs);

    let mut searches = Vec::new();
    for rep in 0..reps {
        searches.push(throughput_search(s, rep, top, floor, res, cfg.loss_tolerance, d));
    }
    let values: Vec<f64> = searches.iter().map(|x| x.throughput_pps).collect();
    let summary = Summary::of(&values);
    let throughput = Throughput {
        pps: summary.mean,
        summary,
        found: searches.iter().all(|x| x.found),
        resolution_pps: res,
        floor_pps: floor,
        searches,
    };

    let latency = (cfg.latency && throughput.pps > 0.0).then(|| {
        let rate = throughput.pps;
        let load = s.paced(rate, d);
        let (trials, all) = s.run_merged("latency", reps, &load);
        let lat = |f: fn(&Latency) -> f64| {
            Summary::of(
                &trials
                    .iter()
                    .filter_map(|&i| s.trial(i).latency.map(|l| f(&l)))
                    .collect::<Vec<_>>(),
            )
        };
        LatencyResult {
            rate_pps: rate,
            all: Latency::of(&all).unwrap_or_default(),
            p50: lat(|l| l.p50_us),
            mean: lat(|l| l.mean_us),
            loss: summary_of(s, &trials, |t| t.loss_ratio),
            cdf: cdf(&all),
            trials,
        }
    });

    let mut frame_loss = Vec::new();
    if cfg.frame_loss {
        let mut clean = 0;
        for step in 0..10 {
            let pct = 100.0 - 10.0 * step as f64;
            let load = s.paced(top * pct / 100.0, d);
            let trials: Vec<usize> =
                (0..reps).map(|r| s.run("frame_loss", step, r, &load)).collect();
            let loss = summary_of(s, &trials, |t| t.loss_ratio);
            frame_loss.push(LossStep {
                percent_of_max: pct,
                target_pps: top * pct / 100.0,
                loss_ratio: loss,
                offered_pps: super::mean_of(s, &trials, |t| t.offered_pps),
                forwarded: summary_of(s, &trials, |t| t.forwarded_pps),
                trials,
            });
            clean = if loss.max == 0.0 { clean + 1 } else { 0 };
            if clean == 2 {
                break;
            }
        }
    }

    let back_to_back = cfg.back_to_back.then(|| back_to_back(s, cfg, reps));
    s.progress.finish();
    Rfc2544Result { max, throughput, latency, frame_loss, back_to_back }
}

fn throughput_search(
    s: &mut Session,
    rep: usize,
    top: f64,
    floor: f64,
    res: f64,
    tol: f64,
    d: Duration,
) -> Search {
    let mut trials = Vec::new();
    let try_rate = |s: &mut Session, pps: f64, trials: &mut Vec<usize>| {
        let load = s.paced(pps, d);
        let i = s.run("throughput", rep, trials.len(), &load);
        trials.push(i);
        s.trial(i).passes(tol)
    };
    if try_rate(s, top, &mut trials) {
        return Search { throughput_pps: top, found: true, trials };
    }
    if !try_rate(s, floor, &mut trials) {
        return Search { throughput_pps: 0.0, found: false, trials };
    }
    let (mut lo, mut hi) = (floor, top);
    while hi - lo > res {
        let mid = 0.5 * (lo + hi);
        if try_rate(s, mid, &mut trials) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Search { throughput_pps: lo, found: true, trials }
}

fn back_to_back(s: &mut Session, cfg: &Config, reps: usize) -> BackToBack {
    let limit = cfg.b2b_max_frames.max(1);
    let res = cfg.b2b_resolution_frames.max(1);
    let mut per_search = Vec::new();
    let mut trials = Vec::new();
    let mut reached_limit = false;
    for rep in 0..reps {
        let burst = |s: &mut Session, n: u64, trials: &mut Vec<usize>| {
            let load = Load {
                rate: Rate::Max,
                until: Until::Frames(n),
                warmup: Duration::ZERO,
                burst: s.common.burst,
                retry_refused: false,
            };
            let i = s.run("back_to_back", rep, trials.len(), &load);
            trials.push(i);
            s.trial(i).passes(0.0)
        };
        if burst(s, limit, &mut trials) {
            reached_limit = true;
            per_search.push(limit);
            continue;
        }
        let (mut lo, mut hi) = (0u64, limit);
        while hi - lo > res {
            let mid = lo + (hi - lo) / 2;
            if burst(s, mid, &mut trials) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        per_search.push(lo);
    }
    BackToBack {
        frames: Summary::of(&per_search.iter().map(|&n| n as f64).collect::<Vec<_>>()),
        per_search,
        reached_limit,
        limit_frames: limit,
        resolution_frames: res,
        trials,
    }
}

/// Points of the latency distribution for a plot: `(µs, fraction at or below)`.
pub fn cdf(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_quantiles(4)
        .map(|v| (v.value_iterated_to() as f64 / 1e3, v.quantile_iterated_to()))
        .collect()
}
