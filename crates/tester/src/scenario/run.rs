//! Running a scenario: every point, its DUT (built or reused), its traffic and its method.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::{AxisValue, Capacity, Derived, DutParams, MethodKind, Params, RateSpec, Scenario};
use crate::dut::{Dut, DutReport};
use crate::fake::{Behaviour, FakeDut, MultiWire};
use crate::method::{ndrpdr, sweep, Common, Session, TrialRecord};
use crate::pacer::Rate;
use crate::progress::{fmt_rate, Progress};
use crate::runner::{Load, Runner, RunnerOptions, StreamInfo, TrialResult, Until};
use crate::stats::Summary;
use crate::traffic::{Mix, TrafficSpec};
use crate::Error;

/// How to run a scenario.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Short trials, few repetitions, the axis's quick values (CI smoke runs).
    pub quick: bool,
    pub runner: RunnerOptions,
    /// A line per point on stderr, and the trial progress line on a terminal.
    pub progress: bool,
    /// Where the threads run, in words, for the report.
    pub placement: Value,
    /// The program that ran it, for the report.
    pub tool: String,
    /// Time the memory and compute probes of [`crate::pairs`] right before each point is
    /// measured (metrics `probe_memory_ns_per_read`, `probe_compute_ns_per_step`): on a VM
    /// whose memory speed swings, two points compare only at the same probe values.
    pub probes: bool,
}

/// A DUT built for a point.
pub struct BuiltDut {
    pub dut: Box<dyn Dut>,
    /// Figures the DUT gives about itself (`dut_<name>` metrics): build time, memory, routes.
    pub facts: Vec<(String, f64)>,
    /// The topology it was built from, if generated: `(file name, YAML)`, kept with the
    /// report so the point can be rebuilt by hand.
    pub topology: Option<(String, String)>,
}

/// Why a DUT was not built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The point cannot run here (the real prefix table is not cached, say): it is skipped
    /// and the report says why.
    Skip(String),
    /// Something is wrong: the scenario stops.
    Fail(String),
}

/// Builds the DUT a point asks for.
pub trait DutBuilder {
    fn build(&mut self, p: &DutParams) -> Result<BuiltDut, BuildError>;
}

/// Builds the fake DUTs: `wire`, `loopback`, `drop-every:K`, `delay:US`, `capacity:PPS`
/// (one class, `fake`), and `multi-wire` (`vrs` classes named `c0`, `c1`, ... over
/// `ingress_ports` ports).
#[derive(Clone, Debug, Default)]
pub struct FakeBuilder {
    /// Sleep this long when idle instead of spinning.
    pub idle_sleep: Option<Duration>,
}

impl DutBuilder for FakeBuilder {
    fn build(&mut self, p: &DutParams) -> Result<BuiltDut, BuildError> {
        let dut: Box<dyn Dut> = if p.kind == "multi-wire" {
            if p.vrs > 255 || p.ingress_ports > p.vrs {
                return Err(BuildError::Fail(format!(
                    "multi-wire: 1..=255 classes over at most as many ports ({} over {})",
                    p.vrs, p.ingress_ports
                )));
            }
            let mut d = MultiWire::new(p.vrs, p.ingress_ports, p.ring);
            if let Some(i) = self.idle_sleep {
                d = d.idle_sleep(i);
            }
            Box::new(d)
        } else {
            let b = Behaviour::parse(&p.kind).map_err(|e| BuildError::Fail(e.to_string()))?;
            let mut d = FakeDut::new(b, p.ring);
            if let Some(i) = self.idle_sleep {
                d = d.idle_sleep(i);
            }
            Box::new(d)
        };
        Ok(BuiltDut { dut, facts: Vec::new(), topology: None })
    }
}

/// One class's figures at a point: sums over the trials that count, and rates averaged.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassSummary {
    pub name: String,
    pub share: f64,
    pub offered: u64,
    pub warmup_offered: u64,
    pub received: u64,
    pub offered_pps: f64,
    pub forwarded_pps: f64,
    pub loss_ratio: f64,
    /// The class's share of what the generator put out per second (accepted or refused: on a
    /// shared ingress ring, frames refused because another class filled it count here).
    pub attempted_pps: f64,
    /// `forwarded_pps / attempted_pps`: what came back of what was meant for the class.
    pub forwarded_ratio: f64,
    /// The DUT's own count (warm-up included), when it counts per class.
    pub dut_received: Option<u64>,
    pub dut_forwarded: Option<u64>,
}

/// One step of a sweep curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CurvePoint {
    pub target_pps: f64,
    pub attempted_pps: f64,
    pub forwarded_pps: f64,
    pub ci99_pps: Option<f64>,
    pub loss_ratio: f64,
}

/// One point's result.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    pub index: usize,
    /// `axis = value[, series = value]`.
    pub label: String,
    pub axis: String,
    /// The axis value as a number (`None` for a word).
    pub x: Option<f64>,
    pub series: Option<String>,
    pub params: Params,
    pub dut_name: Option<String>,
    pub dut: Value,
    /// Why the point did not run, if it did not.
    pub skipped: Option<String>,
    pub capacity_pps: Option<f64>,
    pub metrics: BTreeMap<String, f64>,
    pub classes: Vec<ClassSummary>,
    /// The ports the traffic entered on, with their shares.
    pub streams: Vec<StreamInfo>,
    /// The method's own result; trial indices in it count within `trials`.
    pub result: Value,
    /// Sweep: offered against forwarded, step by step.
    pub curve: Vec<CurvePoint>,
    /// Indices into the report's trials.
    pub trials: Vec<usize>,
    /// What the DUT said when it stopped (on the last point that used it).
    pub dut_report: Option<DutReport>,
}

/// A trial and the point it belongs to.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioTrial {
    pub point: usize,
    #[serde(flatten)]
    pub record: TrialRecord,
}

/// The whole report of a scenario run: what `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioReport {
    pub tool: String,
    pub scenario: Value,
    pub quick: bool,
    pub placement: Value,
    pub method: Value,
    pub points: Vec<PointResult>,
    pub derived: Value,
    pub summary: Value,
    pub trials: Vec<ScenarioTrial>,
    /// Generated topologies: `(file name, YAML)`.
    #[serde(skip)]
    pub topologies: Vec<(String, String)>,
    #[serde(skip)]
    pub(crate) sc: Scenario,
}

impl ScenarioReport {
    /// The scenario that ran.
    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }
}

struct Current {
    params: DutParams,
    runner: Runner,
    facts: Vec<(String, f64)>,
    describe: Value,
    name: String,
    /// The last point that used it.
    last: usize,
}

/// Runs every point of `sc`.
pub fn run(
    sc: &Scenario,
    o: &RunOptions,
    builder: &mut dyn DutBuilder,
) -> Result<ScenarioReport, Error> {
    let points = sc.points(o.quick);
    let m = &sc.method;
    let (duration, warmup, reps) = if o.quick {
        (sc.quick.duration, sc.quick.warmup, sc.quick.repetitions)
    } else {
        (m.duration, m.warmup, m.repetitions)
    };
    let steps = match (&sc.quick.steps, o.quick) {
        (Some(s), true) => s.clone(),
        _ => m.steps.clone(),
    };
    let mut ndr = m.ndr.clone();
    if o.quick {
        ndr.initial_duration = ndr.initial_duration.min(duration);
        ndr.phases = ndr.phases.min(2);
    }
    let common = Common {
        duration,
        warmup,
        repetitions: reps,
        burst: m.burst,
        max_pps: None,
        attempts: m.attempts,
    };
    let prober = o.probes.then(crate::pairs::Prober::new);
    let mut out: Vec<PointResult> = Vec::new();
    let mut trials: Vec<ScenarioTrial> = Vec::new();
    let mut topologies: Vec<(String, String)> = Vec::new();
    let mut cur: Option<Current> = None;
    let mut first_capacity: Option<f64> = match m.capacity {
        Capacity::Given(c) => Some(c),
        _ => None,
    };
    let mut series_capacity: BTreeMap<Option<String>, f64> = BTreeMap::new();
    let n = points.len();
    for (i, (a, s, p)) in points.into_iter().enumerate() {
        let label = point_label(sc, &a, s.as_ref());
        let mut pr = PointResult {
            index: i,
            label: label.clone(),
            axis: a.text.clone(),
            x: a.number,
            series: s.as_ref().map(|v| v.text.clone()),
            params: p.clone(),
            dut_name: None,
            dut: Value::Null,
            skipped: None,
            capacity_pps: None,
            metrics: BTreeMap::new(),
            classes: Vec::new(),
            streams: Vec::new(),
            result: Value::Null,
            curve: Vec::new(),
            trials: Vec::new(),
            dut_report: None,
        };
        let note = |msg: &str| {
            if o.progress {
                eprintln!("[{}/{n}] {label}: {msg}", i + 1);
            }
        };
        // The DUT: the running one if its parameters did not change.
        if cur.as_ref().is_some_and(|c| c.params != p.dut) {
            stop(cur.take(), &mut out)?;
        }
        let spec = TrafficSpec { flows: p.traffic.flows, size: p.traffic.frame_size, ttl: 64 };
        let shape = mix_shape(&p);
        if cur.is_none() {
            note("building the DUT");
            let b = match builder.build(&p.dut) {
                Ok(b) => b,
                Err(BuildError::Skip(why)) => {
                    note(&format!("skipped: {why}"));
                    pr.skipped = Some(why);
                    out.push(pr);
                    continue;
                }
                Err(BuildError::Fail(e)) => {
                    return Err(Error::new(format!("{}: {label}: {e}", sc.file)));
                }
            };
            if let Some(t) = b.topology {
                if !topologies.iter().any(|x| x.0 == t.0) {
                    topologies.push(t);
                }
            }
            let name = b.dut.name();
            let describe = b.dut.describe();
            let runner = Runner::with_mix(b.dut, &spec, &shape, o.runner)
                .map_err(|e| Error::new(format!("{}: {label}: {e}", sc.file)))?;
            cur = Some(Current {
                params: p.dut.clone(),
                runner,
                facts: b.facts,
                describe,
                name,
                last: i,
            });
        }
        let c = cur.as_mut().expect("a DUT runs");
        c.last = i;
        pr.dut_name = Some(c.name.clone());
        pr.dut = c.describe.clone();
        for (k, v) in &c.facts {
            pr.metrics.insert(format!("dut_{k}"), *v);
        }
        if c.runner.traffic() != (&spec, &shape) {
            c.runner
                .set_traffic(&spec, &shape)
                .map_err(|e| Error::new(format!("{}: {label}: {e}", sc.file)))?;
        }
        c.runner.set_replay(p.traffic.replay);
        if let Some(probe) = prober.as_ref().map(|x| x.probe()) {
            pr.metrics.insert("probe_memory_ns_per_read".into(), probe.memory_ns_per_read);
            pr.metrics.insert("probe_compute_ns_per_step".into(), probe.compute_ns_per_step);
        }
        let progress = || if o.progress { Progress::stderr() } else { Progress::silent() };
        // The capacity, if a rate refers to it.
        let relative = steps.iter().any(|r| r.relative() && m.kind == MethodKind::Sweep)
            || p.traffic.rate.is_some_and(|r| r.relative())
            || p.traffic.rates.iter().any(|(_, r)| r.relative());
        let mut capacity = match m.capacity {
            Capacity::Series => series_capacity.get(&pr.series).copied(),
            _ => first_capacity,
        };
        let mut pending = Vec::new();
        if relative && (m.capacity == Capacity::Each || capacity.is_none()) {
            note("measuring the capacity (unpaced, refused frames offered again)");
            let mut cs = Session::new(&mut c.runner, common, progress());
            let cap = measure_capacity(&mut cs, reps);
            cs.progress.finish();
            pending = std::mem::take(&mut cs.trials);
            capacity = Some(cap);
            match m.capacity {
                Capacity::First => first_capacity = Some(cap),
                Capacity::Series => {
                    series_capacity.insert(pr.series.clone(), cap);
                }
                _ => {}
            }
        }
        pr.capacity_pps = capacity;
        if let Some(cap) = capacity {
            pr.metrics.insert("capacity_pps".into(), cap);
        }
        // The load's shares, now that rates can be resolved.
        let mix = mix_of(&p, capacity);
        if c.runner.traffic().1 != &mix {
            c.runner
                .set_traffic(&spec, &mix)
                .map_err(|e| Error::new(format!("{}: {label}: {e}", sc.file)))?;
        }
        let mut session = Session::new(&mut c.runner, common, progress());
        session.trials = pending;
        let main = match m.kind {
            MethodKind::Max => {
                let load = Load {
                    rate: Rate::Max,
                    until: Until::Time(duration),
                    warmup,
                    burst: m.burst,
                    retry_refused: true,
                };
                session.progress.plan(reps, (duration + warmup).as_secs_f64());
                let idx: Vec<usize> = (0..reps).map(|r| session.run("max", 0, r, &load)).collect();
                pr.result = json!({ "kind": "max", "trials": idx });
                idx
            }
            MethodKind::Rate => {
                let total = total_rate(&p, capacity);
                pr.metrics.insert("target_pps".into(), total);
                let load = session.paced(total, duration);
                session.progress.plan(reps, (duration + warmup).as_secs_f64());
                let idx: Vec<usize> = (0..reps).map(|r| session.run("rate", 0, r, &load)).collect();
                pr.result = json!({ "kind": "rate", "target_pps": total, "trials": idx });
                idx
            }
            MethodKind::Sweep => {
                let rates: Vec<f64> =
                    steps.iter().map(|r| r.pps(capacity).unwrap_or(1.0).max(1.0)).collect();
                let res = sweep::run(&mut session, &sweep::Steps::Rates(rates));
                pr.curve = res
                    .steps
                    .iter()
                    .map(|x| CurvePoint {
                        target_pps: x.target_pps,
                        attempted_pps: x.attempted_pps,
                        forwarded_pps: x.forwarded_pps,
                        ci99_pps: x.ci99_pps,
                        loss_ratio: x.loss_ratio,
                    })
                    .collect();
                let peak = res.steps.iter().map(|x| x.forwarded_pps).fold(0.0, f64::max);
                pr.metrics.insert("peak_forwarded_pps".into(), peak);
                if let Some(last) = res.steps.last() {
                    if peak > 0.0 {
                        pr.metrics.insert("overload_vs_peak".into(), last.forwarded_pps / peak);
                    }
                    // A curve whose peak fell short of the capacity (the DUT or the tester
                    // was slowed during the steps) says so here.
                    if let Some(cap) = capacity.filter(|&c| c > 0.0) {
                        pr.metrics.insert("overload_vs_capacity".into(), last.forwarded_pps / cap);
                    }
                }
                let best = res
                    .steps
                    .iter()
                    .max_by(|x, y| x.forwarded_pps.total_cmp(&y.forwarded_pps))
                    .map(|x| x.trials.clone())
                    .unwrap_or_default();
                pr.result = serde_json::to_value(&res).unwrap_or(Value::Null);
                best
            }
            MethodKind::Ndr => {
                session.common.max_pps = capacity;
                let res = ndrpdr::run(&mut session, &ndr);
                pr.metrics.insert("ndr_pps".into(), res.ndr.rate_pps);
                pr.metrics.insert("pdr_pps".into(), res.pdr.rate_pps);
                let idx = res.ndr.confirm.clone();
                pr.result = serde_json::to_value(&res).unwrap_or(Value::Null);
                idx
            }
        };
        session.progress.finish();
        summarise(&mut pr, &session, &main);
        pr.streams = session.runner.streams();
        let offset = trials.len();
        pr.trials = (offset..offset + session.trials.len()).collect();
        let records = std::mem::take(&mut session.trials);
        trials.extend(records.into_iter().map(|record| ScenarioTrial { point: i, record }));
        note(&format!(
            "{} forwarded{}",
            pr.metrics.get(primary(sc)).map_or("-".into(), |&v| fmt_rate(v)),
            pr.metrics
                .get("loss_ratio")
                .map_or(String::new(), |l| format!(", loss {:.3} %", l * 100.0))
        ));
        out.push(pr);
    }
    stop(cur.take(), &mut out)?;
    let mut derived = derive(sc, &mut out);
    derived["goals"] = goals(sc, &out, &derived);
    let used = trials.iter().filter(|t| t.record.used).count();
    let invalid = trials.iter().filter(|t| t.record.used && !t.record.result.valid).count();
    let summary = json!({
        "points": out.len(),
        "points_skipped": out.iter().filter(|p| p.skipped.is_some()).count(),
        "trials_run": trials.len(),
        "trials_used": used,
        "invalid_trials_used": invalid,
        "capacity_pps": first_capacity,
    });
    Ok(ScenarioReport {
        tool: o.tool.clone(),
        scenario: json!({
            "name": sc.name, "title": sc.title, "reproduces": sc.reproduces, "file": sc.file,
            "about": sc.about,
            "axis": {"label": sc.axis.label, "params": sc.axis.params, "log": sc.axis.log},
            "series": sc.series.as_ref().map(|s| json!({"label": s.label, "params": s.params})),
            "report": sc.report,
        }),
        quick: o.quick,
        placement: o.placement.clone(),
        method: json!({
            "kind": m.kind,
            "duration_s": duration.as_secs_f64(),
            "warmup_s": warmup.as_secs_f64(),
            "repetitions": reps,
            "attempts": m.attempts,
            "burst": m.burst,
            "steps": steps,
            "capacity": m.capacity,
            "ndr": if m.kind == MethodKind::Ndr { serde_json::to_value(&ndr).unwrap_or(Value::Null) } else { Value::Null },
            "text": method_text(m.kind),
            "runner": o.runner,
        }),
        points: out,
        derived,
        summary,
        trials,
        topologies,
        sc: sc.clone(),
    })
}

fn method_text(k: MethodKind) -> &'static str {
    match k {
        MethodKind::Max => "Per point: repeated unpaced trials in which frames the DUT's port refused are offered again; the result is the mean forwarded rate (the slower of the generator and the DUT), with its 99 % CI.",
        MethodKind::Rate => "Per point: repeated paced trials at the traffic's rates (per-VR shares as given); per class, what the port accepted (offered) and what came back (forwarded), and the DUT's own per-VR counts.",
        MethodKind::Sweep => "Per point: offered against forwarded load in steps, each repeated (seed 000 §3.1); % steps refer to the capacity: the mean forwarded rate of up to 3 unpaced trials with refused frames offered again.",
        MethodKind::Ndr => "Per point: NDR (0 % loss) and PDR search, MLRsearch style, with confirmation trials.",
    }
}

/// The primary metric: the first plotted point metric (not a per-class one).
fn primary(sc: &Scenario) -> &str {
    let m = match sc.method.kind {
        MethodKind::Ndr => "ndr_pps",
        MethodKind::Sweep => "peak_forwarded_pps",
        _ => "forwarded_pps",
    };
    sc.report.plot_y.iter().find(|y| !y.contains('.')).map_or(m, String::as_str)
}

fn point_label(sc: &Scenario, a: &AxisValue, s: Option<&AxisValue>) -> String {
    let mut l = format!("{} = {}", sc.axis.params.join(" = "), a.text);
    if let (Some(sa), Some(v)) = (&sc.series, s) {
        l += &format!(", {} = {}", sa.params.join(" = "), v.text);
    }
    l
}

/// Stops the DUT of `cur` and files its report with the last point that used it.
fn stop(cur: Option<Current>, out: &mut [PointResult]) -> Result<(), Error> {
    if let Some(c) = cur {
        let rep = c.runner.finish()?;
        if let Some(p) = out.get_mut(c.last) {
            p.dut_report = Some(rep);
        }
    }
    Ok(())
}

/// Which classes send, in what proportions, before any rate is resolved: per-VR rates as
/// weights when they are all of one kind, else equal shares among them; or the first
/// `active_vrs` classes; or all.
fn mix_shape(p: &Params) -> Mix {
    let t = &p.traffic;
    if !t.rates.is_empty() {
        let all_abs = t.rates.iter().all(|(_, r)| !r.relative());
        let all_rel = t.rates.iter().all(|(_, r)| r.relative());
        let weights = t
            .rates
            .iter()
            .map(|(c, r)| {
                let w = match r {
                    RateSpec::Pps(v) if all_abs => *v,
                    RateSpec::PercentOfCapacity(v) if all_rel => *v,
                    _ => 1.0,
                };
                (c.clone(), w)
            })
            .collect();
        return Mix { weights, others: 0.0, first: None };
    }
    Mix { weights: Vec::new(), others: 1.0, first: t.active_vrs }
}

/// The mix with every rate resolved against `capacity`.
fn mix_of(p: &Params, capacity: Option<f64>) -> Mix {
    let t = &p.traffic;
    if t.rates.is_empty() {
        return mix_shape(p);
    }
    let weights =
        t.rates.iter().map(|(c, r)| (c.clone(), r.pps(capacity).unwrap_or(1.0))).collect();
    Mix { weights, others: 0.0, first: None }
}

/// The total offered rate of `method: rate`.
fn total_rate(p: &Params, capacity: Option<f64>) -> f64 {
    let t = &p.traffic;
    let v = if t.rates.is_empty() {
        t.rate.and_then(|r| r.pps(capacity)).unwrap_or(1.0)
    } else {
        t.rates.iter().filter_map(|(_, r)| r.pps(capacity)).sum()
    };
    v.max(1.0)
}

/// The DUT's maximum forwarded rate with this traffic: up to 3 unpaced trials, refused
/// frames offered again.
fn measure_capacity(s: &mut Session, reps: usize) -> f64 {
    let n = reps.clamp(1, 3);
    let load = Load {
        rate: Rate::Max,
        until: Until::Time(s.common.duration),
        warmup: s.common.warmup,
        burst: s.common.burst,
        retry_refused: true,
    };
    s.progress.plan(n, (s.common.duration + s.common.warmup).as_secs_f64());
    let idx: Vec<usize> = (0..n).map(|r| s.run("capacity", 0, r, &load)).collect();
    Summary::of(&idx.iter().map(|&i| s.trial(i).forwarded_pps).collect::<Vec<_>>()).mean
}

/// Point metrics and class figures over the trials that count.
fn summarise(pr: &mut PointResult, s: &Session, idx: &[usize]) {
    let ts: Vec<&TrialResult> = idx.iter().map(|&i| s.trial(i)).collect();
    let m = &mut pr.metrics;
    let used = s.trials.iter().filter(|t| t.used).count();
    m.insert("trials".into(), used as f64);
    let invalid = s.trials.iter().filter(|t| t.used && !t.result.valid).count();
    m.insert("invalid_trials".into(), invalid as f64);
    if ts.is_empty() {
        return;
    }
    let mean =
        |f: &dyn Fn(&TrialResult) -> f64| ts.iter().map(|t| f(t)).sum::<f64>() / ts.len() as f64;
    let fwd = Summary::of(&ts.iter().map(|t| t.forwarded_pps).collect::<Vec<_>>());
    m.insert("forwarded_pps".into(), fwd.mean);
    if let Some(ci) = fwd.ci99 {
        m.insert("forwarded_ci99_pps".into(), ci);
    }
    m.insert("offered_pps".into(), mean(&|t| t.offered_pps));
    m.insert("attempted_pps".into(), mean(&|t| t.attempted_pps));
    m.insert("loss_ratio".into(), mean(&|t| t.loss_ratio));
    let lat: Vec<_> = ts.iter().filter_map(|t| t.latency).collect();
    if !lat.is_empty() {
        // Each percentile is the mean over the trials, with the 99 % CI of that mean.
        let pct = |l: &crate::runner::Latency| [l.p50_us, l.p99_us, l.p999_us];
        for (k, name) in ["p50", "p99", "p999"].into_iter().enumerate() {
            let s = Summary::of(&lat.iter().map(|l| pct(l)[k]).collect::<Vec<_>>());
            m.insert(format!("{name}_us"), s.mean);
            if let Some(ci) = s.ci99 {
                m.insert(format!("{name}_ci99_us"), ci);
            }
        }
        m.insert("max_us".into(), lat.iter().map(|l| l.max_us).fold(0.0, f64::max));
    }
    if ts.iter().all(|t| t.dut.is_some()) {
        let sum = |f: &dyn Fn(&crate::dut::DutCounters) -> u64| {
            ts.iter().filter_map(|t| t.dut.as_ref()).map(f).sum::<u64>() as f64
        };
        m.insert("dut_received".into(), sum(&|d| d.received));
        m.insert("dut_forwarded".into(), sum(&|d| d.forwarded));
    }
    let names: Vec<&str> = ts[0].classes.iter().map(|c| c.name.as_str()).collect();
    pr.classes = names
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let cs: Vec<_> = ts.iter().filter_map(|t| t.classes.get(k)).collect();
            let off: u64 = cs.iter().map(|c| c.offered).sum();
            let rx: u64 = cs.iter().map(|c| c.received).sum();
            let all_dut = cs.iter().all(|c| c.dut.is_some());
            let k = cs.len().max(1) as f64;
            let share = cs.first().map_or(0.0, |c| c.share);
            let forwarded_pps = cs.iter().map(|c| c.forwarded_pps).sum::<f64>() / k;
            let attempted_pps = share * ts.iter().map(|t| t.attempted_pps).sum::<f64>() / k;
            ClassSummary {
                name: name.to_string(),
                share: cs.first().map_or(0.0, |c| c.share),
                offered: off,
                warmup_offered: cs.iter().map(|c| c.warmup_offered).sum(),
                received: rx,
                offered_pps: cs.iter().map(|c| c.offered_pps).sum::<f64>() / k,
                forwarded_pps,
                attempted_pps,
                forwarded_ratio: if attempted_pps > 0.0 {
                    forwarded_pps / attempted_pps
                } else {
                    0.0
                },
                loss_ratio: if off == 0 { 0.0 } else { off.saturating_sub(rx) as f64 / off as f64 },
                dut_received: all_dut
                    .then(|| cs.iter().filter_map(|c| c.dut.as_ref()).map(|d| d.received).sum()),
                dut_forwarded: all_dut
                    .then(|| cs.iter().filter_map(|c| c.dut.as_ref()).map(|d| d.forwarded).sum()),
            }
        })
        .collect();
}

/// Derived figures: `vs_first` / `drop_vs_first` per point, linear fits per series.
fn derive(sc: &Scenario, points: &mut [PointResult]) -> Value {
    let y = primary(sc).to_string();
    let mut fits = Vec::new();
    let series: Vec<Option<String>> = {
        let mut v: Vec<Option<String>> = Vec::new();
        for p in points.iter() {
            if !v.contains(&p.series) {
                v.push(p.series.clone());
            }
        }
        v
    };
    for s in &series {
        let ids: Vec<usize> = points
            .iter()
            .filter(|p| &p.series == s && p.skipped.is_none() && p.metrics.contains_key(&y))
            .map(|p| p.index)
            .collect();
        if sc.report.derived.contains(&Derived::DropVsFirst) {
            if let Some(&f) = ids.first() {
                let y0 = points[f].metrics[&y];
                for &i in &ids {
                    let r = if y0 > 0.0 { points[i].metrics[&y] / y0 } else { f64::NAN };
                    points[i].metrics.insert("vs_first".into(), r);
                    points[i].metrics.insert("drop_vs_first".into(), 1.0 - r);
                }
            }
        }
        if sc.report.derived.contains(&Derived::VsReservation) {
            vs_reservation(points, &ids, &y);
        }
        if sc.report.derived.contains(&Derived::LinearFit) {
            let xy: Vec<(f64, f64)> =
                ids.iter().filter_map(|&i| Some((points[i].x?, points[i].metrics[&y]))).collect();
            fits.push(json!({"series": s, "of": y, "fit": linear_fit(&xy)}));
        }
    }
    json!({ "primary": y, "linear_fits": fits })
}

/// Each goal of the report, met or not: its value at every point it applies to (the linear
/// fits for `r_squared`), and why a point could not tell (skipped, or a sweep step the
/// generator did not reach).
fn goals(sc: &Scenario, points: &[PointResult], derived: &Value) -> Value {
    let mut out = Vec::new();
    for g in &sc.report.goals {
        let mut at = Vec::new();
        let mut why = Vec::new();
        if g.metric == "r_squared" {
            for f in derived["linear_fits"].as_array().into_iter().flatten() {
                if let Some(r2) = f["fit"]["r_squared"].as_f64() {
                    let name =
                        f["series"].as_str().map_or("fit".to_string(), |s| format!("fit ({s})"));
                    at.push(json!({"point": name, "value": r2, "met": g.met_by(r2)}));
                }
            }
        } else {
            for p in points.iter().filter(|p| g.applies(&p.params)) {
                if let Some(s) = &p.skipped {
                    why.push(format!("{}: skipped: {s}", p.label));
                    continue;
                }
                let Some(v) = super::output::point_value(p, &g.metric) else { continue };
                let met = g.met_by(v);
                let short =
                    p.curve.iter().filter(|c| c.attempted_pps < 0.99 * c.target_pps).count();
                let stalled = p.metrics.get("invalid_trials").copied().unwrap_or(0.0);
                let trials = p.metrics.get("trials").copied().unwrap_or(0.0);
                let shown = point_verdict(met, trials, stalled);
                at.push(json!({"point": p.label, "value": v, "met": shown}));
                if shown.is_none() {
                    why.push(format!(
                        "{}: met on its figures, but every one of its {trials} trials had the tester's thread descheduled past the stall limit: they are the host's figures, so the point cannot show the goal",
                        p.label
                    ));
                }
                if !met && stalled > 0.0 {
                    why.push(format!(
                        "{}: {stalled} of {} trials had the tester's thread descheduled past the stall limit (the host's other load): its rates are the host's, not the DUT's",
                        p.label,
                        p.metrics.get("trials").copied().unwrap_or(0.0)
                    ));
                }
                if !met && short > 0 {
                    why.push(format!(
                        "{}: the generator put out under 99 % of the target at {short} step(s) (marked *): the tester, not the DUT, limited them",
                        p.label
                    ));
                }
            }
        }
        let each: Vec<Option<bool>> = at.iter().map(|x| x["met"].as_bool()).collect();
        let met = overall_verdict(&each).map_or(Value::Null, Value::Bool);
        out.push(json!({"goal": g.text, "met": met, "points": at, "why": why}));
    }
    Value::Array(out)
}

/// One point's verdict on a goal: met or not by its figures, except that a goal met only on
/// trials that were all invalid (the tester descheduled past the stall limit in each) is not
/// shown (`None`): those figures are the host's. A goal missed on them stays missed, with the
/// reason beside it.
pub(super) fn point_verdict(met: bool, trials: f64, stalled: f64) -> Option<bool> {
    if met && trials > 0.0 && stalled >= trials {
        None
    } else {
        Some(met)
    }
}

/// A goal's verdict over the points it applies to: not met if one misses it; else not shown
/// (`None`) if one could not show it or none had it; else met.
pub(super) fn overall_verdict(points: &[Option<bool>]) -> Option<bool> {
    if points.contains(&Some(false)) {
        Some(false)
    } else if points.is_empty() || points.contains(&None) {
        None
    } else {
        Some(true)
    }
}

/// Per point of `ids` (one series) with a time reservation: the peak (the point without a
/// reservation, else the one with the largest) times the reservation (`expected_pps`), and the
/// metric `y` over that (`vs_reservation`).
fn vs_reservation(points: &mut [PointResult], ids: &[usize], y: &str) {
    let frac = |p: &PointResult| p.params.dut.reservation.fraction();
    let peak_at = ids
        .iter()
        .copied()
        .find(|&i| points[i].params.dut.reservation == super::ReservationSpec::None)
        .or_else(|| {
            ids.iter().copied().filter(|&i| frac(&points[i]).is_some()).max_by(|&a, &b| {
                frac(&points[a]).unwrap_or(0.0).total_cmp(&frac(&points[b]).unwrap_or(0.0))
            })
        });
    let Some(k) = peak_at else { return };
    // The peak is what the point would forward with the whole period: scale a reserved
    // peak point back up.
    let peak = points[k].metrics[y] / frac(&points[k]).unwrap_or(1.0);
    for &i in ids {
        if let Some(f) = frac(&points[i]) {
            let want = f * peak;
            points[i].metrics.insert("expected_pps".into(), want);
            let r = if want > 0.0 { points[i].metrics[y] / want } else { f64::NAN };
            points[i].metrics.insert("vs_reservation".into(), r);
        }
    }
}

/// Least squares `y = slope · x + intercept`, with `r_squared`; `null` for fewer than 2
/// points or no spread in x.
pub fn linear_fit(xy: &[(f64, f64)]) -> Value {
    let n = xy.len() as f64;
    if xy.len() < 2 {
        return Value::Null;
    }
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 {
        return Value::Null;
    }
    let slope = sxy / sxx;
    let r2 = if syy == 0.0 { 1.0 } else { (sxy * sxy / (sxx * syy)).min(1.0) };
    json!({"slope": slope, "intercept": my - slope * mx, "r_squared": r2, "n": xy.len()})
}
