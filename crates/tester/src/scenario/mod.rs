//! Scenarios: an experiment as a file. A scenario names the device under test (a routeplex
//! topology the runner generates from a few numbers, or a fake DUT), the parameter varied and
//! its values, the traffic (frame size, flows, which VRs get what share or rate), the method
//! per point (maximum forwarded rate, a paced rate, a sweep, an NDR/PDR search) with its
//! duration and repetitions, and what to report (table columns, plot, derived figures).
//! A file of `kind: timeline` is a failure timeline instead: routing daemons, probe flows and
//! `events:` at set times (see [`timeline`]).
//!
//! # Format
//!
//! ```yaml
//! # A header comment: which figure or table of which paper this reproduces, what the paper
//! # measured, and where this setup differs. It is kept in the report.
//! name: seed002-fig6-vrs          # file-name-safe: letters, digits, - _ .
//! title: Throughput vs number of VRs
//! reproduces: seed 002 §4.3, Fig. 6
//! dut:                            # the DUT's parameters (see below); any can vary on the axis
//!   kind: routeplex
//!   vrs: 1
//!   ingress_ports: 3
//!   egress_ports: 1
//!   routes: 1
//! axis:                           # what varies, one point per value
//!   param: vrs                    # or a list: [vifs, routes, flows] all take each value
//!   values: [1, 2, 4, 8, 16, 32]
//!   quick: [1, 8]                 # the values --quick runs (default: first and last)
//!   label: virtual routers        # for the table and plot (default: the param)
//!   log: false                    # logarithmic x axis in the plot
//! series:                         # optional second parameter: one line (curve) per value
//!   param: flows
//!   values: [1, 1M]
//! traffic:
//!   frame_size: 64                # 64..=1518 or imix
//!   flows: 1024                   # 1..=1048576
//!   active_vrs: 1                 # only the first N VRs get traffic (default: all)
//!   rates: { vr1: 143%, vr2: 43% }   # per-VR offered rate: pps (300k) or % of the capacity
//!   rate: 1M                      # total offered rate for `method: rate` without `rates`
//!   generator: timed              # or replay: no TX timestamps (no latency), refused frames
//!                                 # not rebuilt, so the tester can offer 3x what it carries
//! method:
//!   kind: max                     # max | rate | sweep | ndr
//!   duration: 1                   # seconds per trial
//!   warmup: 0.1
//!   repetitions: 10
//!   attempts: 3                   # re-runs of a trial the tester stalled in
//!   steps: [25%, 50%, 100%, 150%] # sweep: % of the capacity, or rates
//!   capacity: first               # what % refers to: first (measured at the first point),
//!                                 # each (measured at every point), series (at the first
//!                                 # point of each series value) or a rate (2M)
//!   initial_duration: 0.1         # ndr: MLRsearch settings
//!   phases: 3
//!   goal_width: 0.5%
//!   pdr_loss: 0.5%
//! quick:                          # what --quick changes (CI smoke runs)
//!   duration: 0.05
//!   warmup: 0.01
//!   repetitions: 1
//!   steps: [50%, 150%]
//!   set: { routes: 1000 }         # parameter overrides
//! report:
//!   columns: [vrs, forwarded_pps, forwarded_ci99_pps, "*.forwarded_pps"]
//!   plot: { y: [forwarded_pps], y_label: forwarded (pps) }
//!   derived: [drop_vs_first, linear_fit]   # and vs_reservation: each point against
//!                                           # reservation × peak (the unreserved point)
//!   goals:                        # met or not, in the table and the JSON
//!     - "overload_vs_peak >= 0.97"
//!     - "vr2.loss_ratio <= 1% at reservation=50%, kind=routeplex"
//!     - "r_squared >= 0.99"         # the linear fits
//! ```
//!
//! DUT parameters: `kind` (`routeplex`, `macvlan`: Linux VRs on macvlan devices, root; or a
//! fake DUT: `wire`, `loopback`, `drop-every:K`,
//! `delay:US`, `capacity:PPS`, `multi-wire`), `vrs` (1..=16384), `ports` (`shared`: every
//! VR's interfaces on the same generator and sink ports, demultiplexed by MAC, as macvlan and
//! SR-IOV do; `per-vr`: each VR on its own ports), `ingress_ports` and `egress_ports`
//! (1..=64, per VR with `per-vr`), `bidirectional` (traffic also enters on the egress ports
//! and leaves through the ingress ones), `vifs` (interfaces per VR, spread over its ports;
//! default one per port), `routes` (1: a single default route; N: N synthetic prefixes with
//! a real table's shape; `real`: the cached Internet table), `ring` (slots per mem ring),
//! `burst` (the worker's receive burst), `family` (ipv4 | ipv6), `reservation` (each reserved
//! VR's budget per period: `none`, `25%` of the period as worker time, or `packets:N`),
//! `period_us` (default 1000), `weight` (share of spare capacity, 0: a hard cap),
//! `reserved_vrs` (only the first N VRs get the reservation; default all), `workers` (data
//! plane threads; per-vr VRs are spread over them, shared ports are one cell on one worker),
//! `batch` (packets a VR processes per burst; the rest is dropped), `replicas` (each VR
//! runs as N replicas, one per worker, flows spread by their hash: parallel virtual routers;
//! needs `workers` >= N), `pin` (true: the DUT's threads pinned; false: the OS places them),
//! `msr` (true: the replicated VR is a multistage software router, load balancers on its
//! ports pinning flows to the back-ends the load policy keeps on), `backend` (`mem`: the
//! tester's ports are in-process rings; `memif`: memif shared memory, the DUT the server and
//! the tester an in-process client; one worker), `path` (`vr`: generator → VRs → sink;
//! `switch`: generator → routeplex's learning switch → sink, no VR; `switch-vr`: generator →
//! switch → one VR → switch → sink, the VR's two interfaces on the switch; one worker, one VR,
//! one ingress and one egress port), `ingress_queues` (true: a shared port's frames are
//! classified into per-VR queues served under the reservations, the topology's
//! `ingress_queues: {}`; routeplex only). Traffic parameters:
//! `frame_size`, `flows`, `active_vrs`, `rate`, `generator`, and `rate.<vr>` (one VR's rate)
//! on an axis.
//!
//! Metrics (columns, plot): `forwarded_pps`, `forwarded_ci99_pps`, `offered_pps`,
//! `attempted_pps`, `target_pps`, `loss_ratio`, `p50_us`, `p99_us`, `p999_us` (latency
//! percentiles from generator to sink through the DUT, means over the trials) and
//! `p50_ci99_us`, `p99_ci99_us`, `p999_ci99_us` (their 99 % CIs), `max_us`,
//! `capacity_pps`, `peak_forwarded_pps`, `overload_vs_peak` and `overload_vs_capacity` (sweep:
//! the last step's forwarded rate over the curve's peak, and over the capacity), `ndr_pps`,
//! `pdr_pps`, `vs_first`,
//! `drop_vs_first`, `dut_received`, `dut_forwarded`, `dut_<fact>` (what the DUT reports about
//! itself, e.g. `dut_rss_bytes_per_vr`), `trials`, `invalid_trials`,
//! `probe_memory_ns_per_read` and `probe_compute_ns_per_step` (the probes of [`crate::pairs`]
//! timed before the point, in runs that are not `--quick`); per class (VR):
//! `<vr>.share`, `<vr>.offered_pps`, `<vr>.forwarded_pps`, `<vr>.loss_ratio`,
//! `<vr>.attempted_pps` (its share of what the generator put out, refused frames included),
//! `<vr>.forwarded_ratio` (forwarded over that),
//! `<vr>.dut_received`, `<vr>.dut_forwarded`, and `*.<metric>` for every class.

mod output;
mod run;
pub mod timeline;
mod yaml;

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::frames::FrameSize;
use crate::method::ndrpdr;
use crate::traffic::MAX_FLOWS;
pub use output::{curves_plot, metric_plot, points_csv, table, trials_csv};
pub use run::{
    linear_fit, run, BuildError, BuiltDut, ClassSummary, CurvePoint, DutBuilder, FakeBuilder,
    PointResult, RunOptions, ScenarioReport, ScenarioTrial,
};
pub use yaml::{parse_count, ScenarioError};
use yaml::{ScenarioValue, Value};

type Result<T> = std::result::Result<T, ScenarioError>;

/// A parsed, checked scenario.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// The file, as its name was given.
    pub file: String,
    pub name: String,
    pub title: String,
    pub reproduces: String,
    /// The file's leading comment, without the `#`s: what the experiment is.
    pub about: String,
    /// Parameters every point starts from.
    pub base: Params,
    pub axis: Axis,
    pub series: Option<Axis>,
    pub method: MethodDef,
    pub quick: Quick,
    pub report: ReportDef,
}

/// How the generated topology puts VRs on ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Every VR on the same generator and sink ports, demultiplexed by destination MAC.
    Shared,
    /// Each VR on ports of its own.
    PerVr,
}

/// The routes each VR gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Routes {
    /// 1: one default route; more: that many synthetic prefixes.
    Count(usize),
    /// The cached real Internet table.
    Real,
}

/// The DUT a point runs on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DutParams {
    pub kind: String,
    pub vrs: usize,
    pub ports: Layout,
    pub ingress_ports: usize,
    pub egress_ports: usize,
    pub bidirectional: bool,
    /// Interfaces per VR; 0: one per port.
    pub vifs: usize,
    pub routes: Routes,
    pub ring: usize,
    pub burst: usize,
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// Each reserved VR's budget per period (seed 000 §3.4): none, a share of the period as
    /// worker time, or packets.
    pub reservation: ReservationSpec,
    /// The reservation period, microseconds (10..=10000000).
    pub period_us: u64,
    /// Share of spare capacity once the budget is spent (0: a hard cap), 0..=1000.
    pub weight: u64,
    /// Only the first N VRs get the reservation (`None`: all).
    pub reserved_vrs: Option<usize>,
    /// Worker threads of the data plane (1..=64); VRs are spread over them (per-VR ports) or
    /// all on the first (shared ports: one cell).
    pub workers: usize,
    /// Packets a VR processes per burst (1..=256); 0: a whole burst.
    pub batch: usize,
    /// Copies of each VR, one per worker, flows spread over them by a flow hash (parallel
    /// virtual routers, 1..=64; at most `workers`).
    pub replicas: usize,
    /// Whether the DUT's threads are pinned (each worker to its CPU); false: the OS places them.
    pub pin: bool,
    /// The replicated VR as a multistage software router: load balancers on its ports pin
    /// flows to back-ends (its replicas), switched on and off by the load policy.
    pub msr: bool,
    /// What the tester's ports are: in-process `mem` rings, or `memif` shared memory (the
    /// DUT the server, the tester an in-process client).
    pub backend: Backend,
    /// What the frames go through: the VRs, routeplex's switch alone, or a VR behind it.
    pub path: DutPath,
    /// Per-VR ingress queues on shared ports (the topology's `ingress_queues: {}`; routeplex
    /// only).
    pub ingress_queues: bool,
}

/// The tester-side ports of a routeplex DUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// In-process rings (`kind: mem` ports).
    Mem,
    /// memif shared memory (`kind: memif` ports, routeplex the server).
    Memif,
}

/// What a routeplex DUT's frames go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DutPath {
    /// generator → VR(s) → sink.
    Vr,
    /// generator → switch → sink: the learning switch alone (VALE's measurement).
    Switch,
    /// generator → switch → VR → switch → sink: one VR whose interfaces are on the switch.
    SwitchVr,
}

impl DutPath {
    /// Its name in scenario files.
    pub fn text(self) -> &'static str {
        match self {
            DutPath::Vr => "vr",
            DutPath::Switch => "switch",
            DutPath::SwitchVr => "switch-vr",
        }
    }
}

/// A VR's reservation, as a scenario gives it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReservationSpec {
    /// No budget.
    None,
    /// This percentage of every period, as worker time (`25%`).
    TimePercent(f64),
    /// This many packets per period (`packets:500`).
    Packets(u64),
}

impl ReservationSpec {
    /// Parses `none`, `25%`, `packets:500`.
    pub fn parse(s: &str) -> std::result::Result<ReservationSpec, crate::Error> {
        let t = s.trim();
        if t == "none" {
            return Ok(ReservationSpec::None);
        }
        if let Some(p) = t.strip_suffix('%') {
            return match p.trim().parse::<f64>() {
                Ok(v) if v > 0.0 && v <= 100.0 => Ok(ReservationSpec::TimePercent(v)),
                _ => {
                    Err(format!("reservation {s:?}: a percentage of the period in (0, 100]").into())
                }
            };
        }
        if let Some(n) = t.strip_prefix("packets:") {
            return match parse_count(n.trim()) {
                Some(n) if (1..=1_000_000_000).contains(&n) => Ok(ReservationSpec::Packets(n)),
                _ => Err(format!("reservation {s:?}: packets:N with N in 1..=1000000000").into()),
            };
        }
        Err(format!(
            "reservation {s:?}: none, a share of the period as worker time (25%), or packets:N"
        )
        .into())
    }

    /// The share of the period, for a time budget.
    pub fn fraction(self) -> Option<f64> {
        match self {
            ReservationSpec::TimePercent(p) => Some(p / 100.0),
            _ => None,
        }
    }
}

impl std::fmt::Display for ReservationSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReservationSpec::None => f.write_str("none"),
            ReservationSpec::TimePercent(p) => write!(f, "{p}%"),
            ReservationSpec::Packets(n) => write!(f, "packets:{n}"),
        }
    }
}

impl Default for DutParams {
    fn default() -> Self {
        DutParams {
            kind: "routeplex".into(),
            vrs: 1,
            ports: Layout::Shared,
            ingress_ports: 1,
            egress_ports: 1,
            bidirectional: false,
            vifs: 0,
            routes: Routes::Count(1),
            ring: 4096,
            burst: 256,
            family: "ipv4".into(),
            reservation: ReservationSpec::None,
            period_us: 1000,
            weight: 0,
            reserved_vrs: None,
            workers: 1,
            batch: 0,
            replicas: 1,
            pin: true,
            msr: false,
            backend: Backend::Mem,
            path: DutPath::Vr,
            ingress_queues: false,
        }
    }
}

/// An offered rate: absolute, or a percentage of the capacity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSpec {
    Pps(f64),
    PercentOfCapacity(f64),
}

impl RateSpec {
    /// Parses `300k`, `1.5M`, `143%`.
    pub fn parse(s: &str) -> std::result::Result<RateSpec, crate::Error> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            return match p.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 && v <= 100_000.0 => {
                    Ok(RateSpec::PercentOfCapacity(v))
                }
                _ => Err(format!("{s:?} is not a percentage in (0, 100000]").into()),
            };
        }
        match crate::parse_rate(t) {
            Ok(v) if v >= 1.0 => Ok(RateSpec::Pps(v)),
            _ => {
                Err(format!("{s:?} is not a rate (300k, 1.5M) or a percentage of capacity (143%)")
                    .into())
            }
        }
    }

    /// Frames per second, given the capacity (`None`: not measured).
    pub fn pps(self, capacity: Option<f64>) -> Option<f64> {
        match self {
            RateSpec::Pps(v) => Some(v),
            RateSpec::PercentOfCapacity(p) => capacity.map(|c| c * p / 100.0),
        }
    }

    fn relative(self) -> bool {
        matches!(self, RateSpec::PercentOfCapacity(_))
    }
}

impl std::fmt::Display for RateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RateSpec::Pps(v) => f.write_str(&crate::progress::fmt_rate(*v)),
            RateSpec::PercentOfCapacity(p) => write!(f, "{p}% of capacity"),
        }
    }
}

/// The traffic a point offers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrafficParams {
    pub frame_size: FrameSize,
    pub flows: usize,
    /// Only the first N VRs send (`None`: all).
    pub active_vrs: Option<usize>,
    /// Total offered rate for `method: rate` when no per-VR rates are given.
    pub rate: Option<RateSpec>,
    /// Per-class offered rates; when given, only these classes send.
    pub rates: Vec<(String, RateSpec)>,
    /// `replay`: frames offered without a TX timestamp, refused ones kept built for the next
    /// release (see [`crate::RunnerOptions::replay`]); `timed` (false): every frame stamped
    /// with its TX time, latency measured.
    pub replay: bool,
}

impl Default for TrafficParams {
    fn default() -> Self {
        TrafficParams {
            frame_size: FrameSize::Fixed(64),
            flows: 1024,
            active_vrs: None,
            rate: None,
            rates: Vec::new(),
            replay: false,
        }
    }
}

/// Everything a point needs: its DUT and its traffic.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Params {
    pub dut: DutParams,
    pub traffic: TrafficParams,
}

/// The most VRs a point builds: 10,000 small VRs on one host (issue 17) and some room; the
/// generated topology gives each interface a /30 of 198.18.0.0/15 (32,768 of them).
pub const MAX_VRS: usize = 16_384;

/// Keys of `dut:`.
const DUT_KEYS: &[&str] = &[
    "kind",
    "vrs",
    "ports",
    "ingress_ports",
    "egress_ports",
    "bidirectional",
    "vifs",
    "routes",
    "ring",
    "burst",
    "family",
    "reservation",
    "period_us",
    "weight",
    "reserved_vrs",
    "workers",
    "batch",
    "replicas",
    "pin",
    "msr",
    "backend",
    "path",
    "ingress_queues",
];
/// DUT kinds a [`DutBuilder`] other than [`FakeBuilder`] builds: routeplex VRs, and Linux VRs
/// on macvlan devices (seed 002's baseline; root).
pub const REAL_KINDS: &[&str] = &["routeplex", "macvlan"];
/// Keys of `traffic:`.
const TRAFFIC_KEYS: &[&str] = &["frame_size", "flows", "active_vrs", "rate", "rates", "generator"];
/// Topology keys a scenario does not take: named so a file using them gets a clear answer.
const LATER_KEYS: &[&str] = &["reservations", "worker", "placement"];

impl Params {
    /// Parameter `key` as text (`""` for an unknown key).
    pub fn get(&self, key: &str) -> String {
        let d = &self.dut;
        let t = &self.traffic;
        match key {
            "kind" => d.kind.clone(),
            "vrs" => d.vrs.to_string(),
            "ports" => match d.ports {
                Layout::Shared => "shared".into(),
                Layout::PerVr => "per-vr".into(),
            },
            "ingress_ports" => d.ingress_ports.to_string(),
            "egress_ports" => d.egress_ports.to_string(),
            "bidirectional" => d.bidirectional.to_string(),
            "vifs" => d.vifs.to_string(),
            "routes" => match d.routes {
                Routes::Count(n) => n.to_string(),
                Routes::Real => "real".into(),
            },
            "ring" => d.ring.to_string(),
            "burst" => d.burst.to_string(),
            "family" => d.family.clone(),
            "reservation" => d.reservation.to_string(),
            "period_us" => d.period_us.to_string(),
            "weight" => d.weight.to_string(),
            "reserved_vrs" => d.reserved_vrs.map_or("all".into(), |n| n.to_string()),
            "workers" => d.workers.to_string(),
            "batch" => d.batch.to_string(),
            "replicas" => d.replicas.to_string(),
            "pin" => d.pin.to_string(),
            "msr" => d.msr.to_string(),
            "backend" => match d.backend {
                Backend::Mem => "mem".into(),
                Backend::Memif => "memif".into(),
            },
            "path" => d.path.text().into(),
            "ingress_queues" => d.ingress_queues.to_string(),
            "frame_size" => t.frame_size.to_string(),
            "flows" => t.flows.to_string(),
            "active_vrs" => t.active_vrs.map_or("all".into(), |n| n.to_string()),
            "rate" => t.rate.map_or(String::new(), |r| r.to_string()),
            "generator" => if t.replay { "replay" } else { "timed" }.into(),
            _ => key
                .strip_prefix("rate.")
                .and_then(|c| t.rates.iter().find(|(n, _)| n == c))
                .map_or(String::new(), |(_, r)| r.to_string()),
        }
    }

    /// Sets parameter `key` (a `dut:` or `traffic:` key, or `rate.<class>`) from `text`.
    pub fn set(&mut self, key: &str, text: &str) -> std::result::Result<(), crate::Error> {
        let d = &mut self.dut;
        let t = &mut self.traffic;
        let int = |lo: u64, hi: u64| -> std::result::Result<usize, crate::Error> {
            match parse_count(text) {
                Some(n) if (lo..=hi).contains(&n) => Ok(n as usize),
                Some(n) => Err(format!("{key} {n} is out of range {lo}..={hi}").into()),
                None => {
                    Err(format!("{key} must be a whole number in {lo}..={hi}, not {text:?}").into())
                }
            }
        };
        match key {
            "kind" => {
                if !REAL_KINDS.contains(&text) && text != "multi-wire" {
                    crate::fake::Behaviour::parse(text).map_err(|e| {
                        crate::Error::new(format!(
                            "kind {text:?}: {}, multi-wire or a fake DUT ({e})",
                            REAL_KINDS.join(", ")
                        ))
                    })?;
                }
                d.kind = text.to_string();
            }
            "vrs" => d.vrs = int(1, MAX_VRS as u64)?,
            "ports" => {
                d.ports = match text {
                    "shared" => Layout::Shared,
                    "per-vr" => Layout::PerVr,
                    _ => return Err(format!("ports must be shared or per-vr, not {text:?}").into()),
                }
            }
            "ingress_ports" => d.ingress_ports = int(1, 64)?,
            "egress_ports" => d.egress_ports = int(1, 64)?,
            "bidirectional" => {
                d.bidirectional = match text {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(
                            format!("bidirectional must be true or false, not {text:?}").into()
                        )
                    }
                }
            }
            "vifs" => d.vifs = int(1, 4096)?,
            "routes" => {
                d.routes = if text == "real" {
                    Routes::Real
                } else {
                    Routes::Count(
                        int(1, 4_000_000)
                            .map_err(|e| crate::Error::new(format!("{e} (or real)")))?,
                    )
                }
            }
            "ring" => {
                let n = int(64, 65_536)?;
                if !n.is_power_of_two() {
                    return Err(format!("ring {n} is not a power of two").into());
                }
                d.ring = n;
            }
            "burst" => d.burst = int(1, 256)?,
            "family" => {
                if text != "ipv4" && text != "ipv6" {
                    return Err(format!("family must be ipv4 or ipv6, not {text:?}").into());
                }
                d.family = text.to_string();
            }
            "frame_size" => t.frame_size = FrameSize::parse(text)?,
            "flows" => t.flows = int(1, MAX_FLOWS as u64)?,
            "active_vrs" => {
                t.active_vrs = if text == "all" { None } else { Some(int(1, MAX_VRS as u64)?) }
            }
            "rate" => t.rate = Some(RateSpec::parse(text)?),
            "generator" => {
                t.replay = match text {
                    "replay" => true,
                    "timed" => false,
                    _ => {
                        return Err(
                            format!("generator must be timed or replay, not {text:?}").into()
                        )
                    }
                }
            }
            _ if key.starts_with("rate.") && key.len() > 5 => {
                let class = &key[5..];
                let r = RateSpec::parse(text)?;
                match t.rates.iter_mut().find(|(c, _)| c == class) {
                    Some(e) => e.1 = r,
                    None => t.rates.push((class.to_string(), r)),
                }
            }
            "reservation" => d.reservation = ReservationSpec::parse(text)?,
            "period_us" => d.period_us = int(10, 10_000_000)? as u64,
            "weight" => d.weight = int(0, 1000)? as u64,
            "reserved_vrs" => d.reserved_vrs = Some(int(1, MAX_VRS as u64)?),
            "workers" => d.workers = int(1, 64)?,
            "batch" => d.batch = int(1, 256)?,
            "replicas" => d.replicas = int(1, MAX_REPLICAS as u64)?,
            "pin" | "msr" | "ingress_queues" => {
                let b = match text {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("{key} must be true or false, not {text:?}").into()),
                };
                match key {
                    "pin" => d.pin = b,
                    "msr" => d.msr = b,
                    _ => d.ingress_queues = b,
                }
            }
            "backend" => {
                d.backend = match text {
                    "mem" => Backend::Mem,
                    "memif" => Backend::Memif,
                    _ => return Err(format!("backend must be mem or memif, not {text:?}").into()),
                }
            }
            "path" => {
                d.path = match text {
                    "vr" => DutPath::Vr,
                    "switch" => DutPath::Switch,
                    "switch-vr" => DutPath::SwitchVr,
                    _ => {
                        return Err(
                            format!("path must be vr, switch or switch-vr, not {text:?}").into()
                        )
                    }
                }
            }
            _ if LATER_KEYS.contains(&key) => {
                return Err(format!(
                    "{key}: the generated topology places VRs itself (workers: N spreads per-vr \
                     VRs over N workers; shared ports make one cell on one worker) and gives \
                     every reserved VR the same reservation (reservation, period_us, weight, \
                     reserved_vrs)"
                )
                .into())
            }
            _ => {
                return Err(format!(
                    "unknown parameter {key:?} (DUT: {}; traffic: {}, generator, rate.<vr>)",
                    DUT_KEYS.join(", "),
                    TRAFFIC_KEYS[..4].join(", ")
                )
                .into())
            }
        }
        Ok(())
    }

    /// Checks what only the whole set can tell.
    pub fn check(&self) -> std::result::Result<(), crate::Error> {
        let d = &self.dut;
        let ports = d.ingress_ports + d.egress_ports;
        if d.vifs != 0 && d.vifs < ports {
            return Err(format!(
                "vifs {} is fewer than the {ports} ports of a VR: each port needs an interface",
                d.vifs
            )
            .into());
        }
        if d.ports == Layout::PerVr && d.vrs * ports > 4096 {
            return Err(format!("{} VRs with {ports} ports each: at most 4096 ports", d.vrs).into());
        }
        if let Some(n) = d.reserved_vrs {
            if n > d.vrs {
                return Err(format!("reserved_vrs {n} is more than the {} VRs", d.vrs).into());
            }
        }
        if let Some(n) = self.traffic.active_vrs {
            if n > d.vrs {
                return Err(format!("active_vrs {n} is more than the {} VRs", d.vrs).into());
            }
        }
        check_replicas(d)?;
        check_path(d)
    }
}

/// memif ports and the switch are built for one worker: the multi-worker runtime hands the
/// tester `mem` ends and replica queues only, and a replicated VR has no switch in front.
fn check_path(d: &DutParams) -> std::result::Result<(), crate::Error> {
    if d.backend == Backend::Mem && d.path == DutPath::Vr {
        return Ok(());
    }
    let what = match d.path {
        DutPath::Vr => "backend memif".to_string(),
        p => format!("path {}", p.text()),
    };
    if d.kind != "routeplex" {
        return Err(format!("{what}: only the routeplex DUT has it, not kind {}", d.kind).into());
    }
    if d.workers != 1 || d.replicas != 1 || d.msr {
        return Err(format!("{what}: one worker, no replicas, no msr").into());
    }
    if d.backend == Backend::Memif && d.ring > 16_384 {
        return Err(format!("backend memif: ring {} is over memif's 16384 slots", d.ring).into());
    }
    if d.path != DutPath::Vr
        && (d.vrs != 1 || d.ingress_ports != 1 || d.egress_ports != 1 || d.bidirectional)
    {
        return Err(format!(
            "{what}: one generator port and one sink port on the switch (vrs 1, ingress_ports 1, \
             egress_ports 1, bidirectional false)"
        )
        .into());
    }
    Ok(())
}

/// The most replicas of a VR (the data plane's limit, one bit per back-end in an MSR).
pub const MAX_REPLICAS: usize = 64;

/// Replicas run one per worker on ports of their own (a queue each), and an MSR's back-ends
/// are the replicas of a routeplex VR.
fn check_replicas(d: &DutParams) -> std::result::Result<(), crate::Error> {
    if d.replicas > d.workers {
        return Err(format!(
            "replicas {} needs workers {0} or more (one replica per worker), not {}",
            d.replicas, d.workers
        )
        .into());
    }
    if d.replicas > 1 {
        if d.kind != "routeplex" {
            return Err(format!("replicas {}: only routeplex VRs have replicas", d.replicas).into());
        }
        if d.ports == Layout::Shared && d.vrs > 1 {
            return Err(format!(
                "replicas {}: a replicated VR needs its ports to itself (vrs 1, or ports per-vr), \
                 not {} VRs on shared ports",
                d.replicas, d.vrs
            )
            .into());
        }
    }
    if d.msr {
        if d.replicas < 2 {
            return Err(format!(
                "msr true needs replicas 2 or more (its back-ends), not {}",
                d.replicas
            )
            .into());
        }
        if d.vrs > 1 {
            return Err(format!("msr true: one MSR, over vrs 1, not {} VRs", d.vrs).into());
        }
        if d.bidirectional {
            return Err(
                "msr true: traffic enters on the ingress port only (bidirectional false)".into()
            );
        }
    }
    Ok(())
}

/// A parameter varied over points.
#[derive(Clone, Debug, Serialize)]
pub struct Axis {
    /// The parameters every value sets (usually one).
    pub params: Vec<String>,
    pub label: String,
    pub values: Vec<AxisValue>,
    /// The values `--quick` runs.
    pub quick: Vec<AxisValue>,
    /// Logarithmic x axis in the plot.
    pub log: bool,
}

/// One value of an axis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AxisValue {
    pub text: String,
    /// Its number, for plots; `None` for a word (`real`), which makes the axis categorical.
    pub number: Option<f64>,
}

impl AxisValue {
    fn new(text: &str) -> AxisValue {
        let number = match RateSpec::parse(text) {
            Ok(RateSpec::Pps(v)) => Some(v),
            Ok(RateSpec::PercentOfCapacity(p)) => Some(p),
            Err(_) => text.parse::<f64>().ok(),
        };
        AxisValue { text: text.to_string(), number }
    }
}

/// The measurement at each point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MethodKind {
    /// Maximum forwarded rate: unpaced trials, refused frames offered again (the slower of
    /// the generator and the DUT), repeated.
    Max,
    /// A paced load at the traffic's rates, repeated: what each class offered and got through.
    Rate,
    /// Offered against forwarded load in steps, each repeated.
    Sweep,
    /// NDR and PDR search (MLRsearch style).
    Ndr,
}

/// What `%` rates refer to.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capacity {
    /// Measured once, at the first point, and used for all.
    First,
    /// Measured at every point.
    Each,
    /// Measured at the first point of each series value (one capacity per DUT kind, say).
    Series,
    /// Given.
    Given(f64),
}

/// The method and its settings.
#[derive(Clone, Debug, Serialize)]
pub struct MethodDef {
    pub kind: MethodKind,
    #[serde(rename = "duration_s", serialize_with = "crate::method::secs")]
    pub duration: Duration,
    #[serde(rename = "warmup_s", serialize_with = "crate::method::secs")]
    pub warmup: Duration,
    pub repetitions: usize,
    pub attempts: usize,
    pub burst: Option<usize>,
    pub steps: Vec<RateSpec>,
    pub capacity: Capacity,
    pub ndr: ndrpdr::Config,
}

/// What `--quick` changes.
#[derive(Clone, Debug, Serialize)]
pub struct Quick {
    #[serde(rename = "duration_s", serialize_with = "crate::method::secs")]
    pub duration: Duration,
    #[serde(rename = "warmup_s", serialize_with = "crate::method::secs")]
    pub warmup: Duration,
    pub repetitions: usize,
    pub steps: Option<Vec<RateSpec>>,
    /// Parameter overrides.
    pub set: Vec<(String, String)>,
}

/// A figure derived from the points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Derived {
    /// Per point: the primary metric over the first point's of its series (`vs_first`), and
    /// `drop_vs_first` = 1 − that.
    DropVsFirst,
    /// Per series: least-squares line of the primary metric against the axis value, with
    /// `r_squared`.
    LinearFit,
    /// Per point: the primary metric against reservation × peak (`expected_pps`,
    /// `vs_reservation`), the peak being the point of its series without a reservation, or
    /// else the one with the largest.
    VsReservation,
}

/// What to report.
#[derive(Clone, Debug, Serialize)]
pub struct ReportDef {
    /// Table columns: the axis and series labels, metrics, `<class>.<metric>`, `*.<metric>`.
    pub columns: Vec<String>,
    /// Metrics drawn against the axis (the first is the primary metric of `derived`).
    pub plot_y: Vec<String>,
    pub y_label: String,
    pub derived: Vec<Derived>,
    /// Goals the table says met or not.
    pub goals: Vec<Goal>,
}

/// A goal on a metric, checked at every point that has it (or only at the points whose
/// parameters match `at`): `"overload_vs_peak >= 0.97"`, `"vr2.loss_ratio <= 1% at
/// reservation=50%, kind=routeplex"`, `"r_squared >= 0.99"` (the linear fits).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Goal {
    /// As written.
    pub text: String,
    pub metric: String,
    /// True: `>=`; false: `<=`.
    pub at_least: bool,
    pub value: f64,
    /// Parameter values a point must have (`Params::get`), `key=value`.
    pub at: Vec<(String, String)>,
}

impl Goal {
    /// Parses `METRIC >= N` or `METRIC <= N` (N a number, or a percentage: `1%` is 0.01),
    /// optionally followed by `at KEY=VALUE[, KEY=VALUE]`.
    pub fn parse(text: &str) -> std::result::Result<Goal, crate::Error> {
        let (cond, at) = match text.split_once(" at ") {
            Some((c, a)) => (c, Some(a)),
            None => (text, None),
        };
        let (metric, at_least, num) = if let Some((m, n)) = cond.split_once(">=") {
            (m, true, n)
        } else if let Some((m, n)) = cond.split_once("<=") {
            (m, false, n)
        } else {
            return Err("a goal is METRIC >= N or METRIC <= N [at KEY=VALUE, ...]".into());
        };
        let n = num.trim();
        let value = match n.strip_suffix('%') {
            Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
            None => n.parse::<f64>(),
        }
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("goal value {n:?} is not a number"))?;
        let at = match at {
            None => Vec::new(),
            Some(a) => a
                .split(',')
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) if !k.trim().is_empty() => {
                        Ok((k.trim().to_string(), v.trim().to_string()))
                    }
                    _ => Err(crate::Error::from(format!(
                        "goal condition {:?} is not KEY=VALUE",
                        kv.trim()
                    ))),
                })
                .collect::<std::result::Result<_, crate::Error>>()?,
        };
        Ok(Goal { text: text.to_string(), metric: metric.trim().to_string(), at_least, value, at })
    }

    /// Whether `v` meets the goal.
    pub fn met_by(&self, v: f64) -> bool {
        if self.at_least {
            v >= self.value
        } else {
            v <= self.value
        }
    }

    /// Whether the goal applies to a point with parameters `p`.
    pub fn applies(&self, p: &Params) -> bool {
        // Through `set` and `get`, so `1000k` matches `1M` and `50%` matches `50.0%`.
        self.at.iter().all(|(k, v)| {
            let mut q = p.clone();
            q.set(k, v).is_ok() && q.get(k) == p.get(k)
        })
    }
}

/// Point metrics a report may name.
pub const METRICS: &[&str] = &[
    "capacity_pps",
    "target_pps",
    "attempted_pps",
    "offered_pps",
    "forwarded_pps",
    "forwarded_ci99_pps",
    "loss_ratio",
    "p50_us",
    "p99_us",
    "p999_us",
    "p50_ci99_us",
    "p99_ci99_us",
    "p999_ci99_us",
    "max_us",
    "peak_forwarded_pps",
    "overload_vs_peak",
    "overload_vs_capacity",
    "ndr_pps",
    "pdr_pps",
    "vs_first",
    "drop_vs_first",
    "expected_pps",
    "vs_reservation",
    "probe_memory_ns_per_read",
    "probe_compute_ns_per_step",
    "dut_received",
    "dut_forwarded",
    "trials",
    "invalid_trials",
];
/// Per-class metrics (`<class>.<metric>`, `*.<metric>`).
pub const CLASS_METRICS: &[&str] = &[
    "share",
    "offered_pps",
    "forwarded_pps",
    "loss_ratio",
    "attempted_pps",
    "forwarded_ratio",
    "dut_received",
    "dut_forwarded",
    "offered",
    "received",
    "warmup_offered",
];

const TOP_KEYS: &[&str] = &[
    "name",
    "title",
    "reproduces",
    "dut",
    "axis",
    "series",
    "traffic",
    "method",
    "quick",
    "report",
];

/// The largest scenario file [`Scenario::load`] reads; real ones are a few kilobytes.
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;

impl Scenario {
    /// Reads and checks a scenario file: only a regular file of at most [`MAX_SCENARIO_BYTES`]
    /// is read (see [`yamlpath::read_file`]).
    pub fn load(path: &Path) -> std::result::Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = yamlpath::read_file(path, MAX_SCENARIO_BYTES).map_err(|e| {
            ScenarioError::at((0, 0), "", None, format!("cannot read it: {e}")).in_file(&file)
        })?;
        Scenario::parse(&text, &file)
    }

    /// Parses and checks a scenario; `file` names it in errors and reports.
    pub fn parse(text: &str, file: &str) -> std::result::Result<Scenario, ScenarioError> {
        parse(text, file).map_err(|e| e.in_file(file))
    }

    /// The points to run, axis outer, series inner: `(axis value, series value, params)`.
    pub fn points(&self, quick: bool) -> Vec<(AxisValue, Option<AxisValue>, Params)> {
        let mut base = self.base.clone();
        if quick {
            for (k, v) in &self.quick.set {
                // Checked when parsed.
                let _ = base.set(k, v);
            }
        }
        let axis = if quick { &self.axis.quick } else { &self.axis.values };
        let series: Vec<Option<&AxisValue>> = match &self.series {
            Some(s) => (if quick { &s.quick } else { &s.values }).iter().map(Some).collect(),
            None => vec![None],
        };
        let mut out = Vec::new();
        for a in axis {
            for s in &series {
                let mut p = base.clone();
                for k in &self.axis.params {
                    let _ = p.set(k, &a.text);
                }
                if let (Some(sa), Some(v)) = (&self.series, s) {
                    for k in &sa.params {
                        let _ = p.set(k, &v.text);
                    }
                }
                out.push((a.clone(), s.cloned(), p));
            }
        }
        out
    }
}

fn parse(text: &str, file: &str) -> Result<Scenario> {
    let doc = yaml::parse_document(text)?;
    let root = Value::root(&doc);
    let m = root.map(TOP_KEYS)?;
    let name_v = m.req("name")?;
    let name = name_v.text()?.to_string();
    if name.is_empty()
        || name.len() > 64
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || name.starts_with('.')
    {
        return Err(name_v
            .bad(&name, "a name is 1 to 64 letters, digits, - _ . (it names the output files)"));
    }
    let title = match m.get("title") {
        Some(v) => v.text()?.to_string(),
        None => name.clone(),
    };
    let reproduces = match m.get("reproduces") {
        Some(v) => v.text()?.to_string(),
        None => String::new(),
    };
    let mut base = Params { dut: DutParams::default(), traffic: TrafficParams::default() };
    if let Some(d) = m.get("dut") {
        let dm = d.mapping()?;
        for (k, v) in dm.entries() {
            if !DUT_KEYS.contains(&k.as_str()) && !LATER_KEYS.contains(&k.as_str()) {
                return Err(
                    v.bad(&k, format!("unknown key {k:?} (allowed: {})", DUT_KEYS.join(", ")))
                );
            }
            set(&mut base, &k, &v)?;
        }
    }
    if let Some(t) = m.get("traffic") {
        let tm = t.map(TRAFFIC_KEYS)?;
        for (k, v) in tm.entries() {
            if k == "rates" {
                for (class, rv) in v.mapping()?.entries() {
                    set(&mut base, &format!("rate.{class}"), &rv)?;
                }
            } else {
                set(&mut base, &k, &v)?;
            }
        }
    }
    base.check().map_err(|e| root.error(e))?;
    let method = method(&m.req("method")?)?;
    let quick = quick(m.get("quick"), &base)?;
    let axis = axis(&m.req("axis")?, &base, &quick)?;
    let series = m.get("series").map(|s| axis_def(&s, &base, &quick)).transpose()?;
    if let Some(s) = &series {
        if s.params.iter().any(|p| axis.params.contains(p)) {
            return Err(m
                .req("series")?
                .error("the series varies a parameter the axis already varies"));
        }
    }
    // Every point must make sense, in full and quick runs alike.
    let sc = Scenario {
        file: file.to_string(),
        name,
        title,
        reproduces,
        about: header_comment(text),
        base,
        axis,
        series,
        report: ReportDef {
            columns: Vec::new(),
            plot_y: Vec::new(),
            y_label: String::new(),
            derived: Vec::new(),
            goals: Vec::new(),
        },
        method,
        quick,
    };
    let axis_v = m.req("axis")?;
    let method_v = m.req("method")?;
    for q in [false, true] {
        for (a, s, p) in sc.points(q) {
            let at = match (&s, &sc.series) {
                (Some(v), Some(sa)) => {
                    format!("{} = {}, {} = {}", sc.axis.label, a.text, sa.label, v.text)
                }
                _ => format!("{} = {}", sc.axis.label, a.text),
            };
            let run = if q { " (--quick)" } else { "" };
            p.check().map_err(|e| axis_v.error(format!("at {at}{run}: {e}")))?;
            check_load(&sc, &p).map_err(|e| method_v.error(format!("at {at}{run}: {e}")))?;
        }
    }
    let report = report(m.get("report"), &sc)?;
    Ok(Scenario { report, ..sc })
}

/// Sets `key` from a YAML value, pointing at it on error.
fn set(p: &mut Params, key: &str, v: &Value) -> Result<()> {
    let text = v.text()?;
    p.set(key, text).map_err(|e| v.bad(text, e))
}

/// The load a method needs is there: a rate for `method: rate`, `%` only with a capacity.
fn check_load(sc: &Scenario, p: &Params) -> std::result::Result<(), crate::Error> {
    let t = &p.traffic;
    if sc.method.kind == MethodKind::Rate && t.rate.is_none() && t.rates.is_empty() {
        return Err("method rate needs traffic.rate (the total) or traffic.rates (per VR)".into());
    }
    if !t.rates.is_empty() && t.active_vrs.is_some() {
        return Err("traffic.rates names the VRs that send: leave active_vrs out".into());
    }
    let classes: Vec<String> = (1..=p.dut.vrs).map(|v| format!("vr{v}")).collect();
    if REAL_KINDS.contains(&p.dut.kind.as_str()) {
        for (c, _) in &t.rates {
            if !classes.contains(c) {
                return Err(format!(
                    "traffic.rates names {c:?}, but the DUT's VRs are vr1..vr{}",
                    p.dut.vrs
                )
                .into());
            }
        }
    }
    Ok(())
}

fn method(v: &Value) -> Result<MethodDef> {
    let m = v.map(&[
        "kind",
        "duration",
        "warmup",
        "repetitions",
        "attempts",
        "burst",
        "steps",
        "capacity",
        "initial_duration",
        "phases",
        "goal_width",
        "pdr_loss",
    ])?;
    let kv = m.req("kind")?;
    let kind = match kv.text()? {
        "max" => MethodKind::Max,
        "rate" => MethodKind::Rate,
        "sweep" => MethodKind::Sweep,
        "ndr" => MethodKind::Ndr,
        s => return Err(kv.bad(s, format!("method {s:?}: max, rate, sweep or ndr"))),
    };
    let secs = |key: &str, default: f64, lo: f64| -> Result<Duration> {
        Ok(Duration::from_secs_f64(match m.get(key) {
            Some(v) => v.secs(key, lo, 3600.0)?,
            None => default,
        }))
    };
    let duration = secs("duration", 1.0, 0.001)?;
    let warmup = secs("warmup", 0.1, 0.0)?;
    let repetitions = match m.get("repetitions") {
        Some(v) => v.count("repetitions", 1, 1000)? as usize,
        None => 10,
    };
    let attempts = match m.get("attempts") {
        Some(v) => v.count("attempts", 1, 10)? as usize,
        None => 3,
    };
    let burst = m.get("burst").map(|v| v.count("burst", 1, 256).map(|b| b as usize)).transpose()?;
    let steps = match m.get("steps") {
        Some(v) => rates(&v)?,
        None if kind == MethodKind::Sweep => {
            (1..=8).map(|i| RateSpec::PercentOfCapacity(25.0 * i as f64)).collect()
        }
        None => Vec::new(),
    };
    if kind != MethodKind::Sweep && m.get("steps").is_some() {
        return Err(m.req("steps")?.error("steps are for method sweep"));
    }
    let capacity = match m.get("capacity") {
        None => Capacity::First,
        Some(v) => match v.text()? {
            "first" => Capacity::First,
            "each" => Capacity::Each,
            "series" => Capacity::Series,
            s => match RateSpec::parse(s) {
                Ok(RateSpec::Pps(p)) => Capacity::Given(p),
                _ => {
                    return Err(
                        v.bad(s, format!("capacity {s:?}: first, each, series, or a rate (2M)"))
                    )
                }
            },
        },
    };
    let mut ndr = ndrpdr::Config::default();
    if let Some(v) = m.get("initial_duration") {
        ndr.initial_duration =
            Duration::from_secs_f64(v.secs("initial_duration", 0.001, 3600.0)?);
    }
    if let Some(v) = m.get("phases") {
        ndr.phases = v.count("phases", 1, 10)? as usize;
    }
    for (key, slot) in [("goal_width", &mut ndr.goal_width), ("pdr_loss", &mut ndr.pdr_loss)] {
        if let Some(v) = m.get(key) {
            let s = v.text()?;
            match s.strip_suffix('%').unwrap_or(s).trim().parse::<f64>() {
                Ok(p) if p > 0.0 && p < 100.0 => *slot = p / 100.0,
                _ => {
                    return Err(
                        v.bad(s, format!("{key} must be a percentage in (0, 100), like 0.5%"))
                    )
                }
            }
        }
    }
    Ok(MethodDef { kind, duration, warmup, repetitions, attempts, burst, steps, capacity, ndr })
}

fn rates(v: &Value) -> Result<Vec<RateSpec>> {
    let items = v.list_or_one()?;
    if items.is_empty() {
        return Err(v.error("at least one rate"));
    }
    items
        .iter()
        .map(|i| {
            let s = i.text()?;
            RateSpec::parse(s).map_err(|e| i.bad(s, e))
        })
        .collect()
}

fn quick(v: Option<Value>, base: &Params) -> Result<Quick> {
    let mut q = Quick {
        duration: Duration::from_millis(50),
        warmup: Duration::from_millis(10),
        repetitions: 1,
        steps: None,
        set: Vec::new(),
    };
    let Some(v) = v else { return Ok(q) };
    let m = v.map(&["duration", "warmup", "repetitions", "steps", "set"])?;
    if let Some(d) = m.get("duration") {
        q.duration = Duration::from_secs_f64(d.secs("duration", 0.001, 60.0)?);
    }
    if let Some(d) = m.get("warmup") {
        q.warmup = Duration::from_secs_f64(d.secs("warmup", 0.0, 60.0)?);
    }
    if let Some(d) = m.get("repetitions") {
        q.repetitions = d.count("repetitions", 1, 100)? as usize;
    }
    if let Some(d) = m.get("steps") {
        q.steps = Some(rates(&d)?);
    }
    if let Some(s) = m.get("set") {
        let mut p = base.clone();
        for (k, v) in s.mapping()?.entries() {
            set(&mut p, &k, &v)?;
            q.set.push((k, v.text()?.to_string()));
        }
    }
    Ok(q)
}

fn axis(v: &Value, base: &Params, q: &Quick) -> Result<Axis> {
    axis_def(v, base, q)
}

fn axis_def(v: &Value, base: &Params, q: &Quick) -> Result<Axis> {
    let m = v.map(&["param", "values", "quick", "label", "log"])?;
    let pv = m.req("param")?;
    let params: Vec<String> =
        pv.list_or_one()?.iter().map(|p| p.text().map(str::to_string)).collect::<Result<_>>()?;
    if params.is_empty() {
        return Err(pv.error("name at least one parameter"));
    }
    let mut quick_base = base.clone();
    for (k, val) in &q.set {
        let _ = quick_base.set(k, val);
    }
    let read = |lv: &Value| -> Result<Vec<AxisValue>> {
        let items = lv.list_or_one()?;
        if items.is_empty() {
            return Err(lv.error("at least one value"));
        }
        let mut out = Vec::new();
        for i in &items {
            let s = i.text()?;
            for p in &params {
                // Each value must make sense for each parameter it sets.
                base.clone().set(p, s).map_err(|e| i.bad(s, e))?;
            }
            out.push(AxisValue::new(s));
        }
        Ok(out)
    };
    let values = read(&m.req("values")?)?;
    let quick = match m.get("quick") {
        Some(qv) => read(&qv)?,
        None if values.len() > 1 => vec![values[0].clone(), values[values.len() - 1].clone()],
        None => values.clone(),
    };
    let label = match m.get("label") {
        Some(l) => l.text()?.to_string(),
        None => params.join(" = "),
    };
    let log = match m.get("log") {
        Some(l) => l.bool()?,
        None => false,
    };
    if log && values.iter().any(|v| !v.number.is_some_and(|x| x > 0.0)) {
        return Err(m
            .req("log")?
            .error("a logarithmic axis needs positive numbers for every value"));
    }
    Ok(Axis { params, label, values, quick, log })
}

fn report(v: Option<Value>, sc: &Scenario) -> Result<ReportDef> {
    let mut labels = vec![sc.axis.label.clone()];
    labels.extend(sc.axis.params.iter().cloned());
    labels.extend(DUT_KEYS.iter().chain(TRAFFIC_KEYS).map(|s| s.to_string()));
    if let Some(s) = &sc.series {
        labels.push(s.label.clone());
        labels.extend(s.params.iter().cloned());
    }
    let primary = match sc.method.kind {
        MethodKind::Ndr => "ndr_pps",
        MethodKind::Sweep => "peak_forwarded_pps",
        _ => "forwarded_pps",
    };
    let mut r = ReportDef {
        columns: Vec::new(),
        plot_y: vec![primary.to_string()],
        y_label: String::new(),
        derived: Vec::new(),
        goals: Vec::new(),
    };
    let check = |cv: &Value, c: &str, allow_labels: bool| -> Result<()> {
        let ok = (allow_labels && labels.iter().any(|l| l == c))
            || METRICS.contains(&c)
            || c.starts_with("dut_")
            || c.split_once('.')
                .is_some_and(|(cl, m)| !cl.is_empty() && CLASS_METRICS.contains(&m));
        if ok {
            Ok(())
        } else {
            Err(cv.bad(c, format!(
                "unknown column {c:?}: the axis ({}), a metric ({}, dut_<fact>), or <vr>.<metric> / *.<metric> with <metric> one of {}",
                sc.axis.label,
                METRICS.join(", "),
                CLASS_METRICS.join(", ")
            )))
        }
    };
    let Some(v) = v else {
        r.columns = default_columns(sc);
        return Ok(r);
    };
    let m = v.map(&["columns", "plot", "derived", "goals"])?;
    if let Some(gv) = m.get("goals") {
        for g in gv.list_or_one()? {
            let s = g.text()?;
            let goal = Goal::parse(s).map_err(|e| g.bad(s, e))?;
            if goal.metric != "r_squared" {
                check(&g, &goal.metric, false)?;
            }
            for (k, _) in &goal.at {
                if base_keys(sc).iter().all(|l| l != k) {
                    return Err(g.bad(s, format!("goal condition on unknown parameter {k:?}")));
                }
            }
            r.goals.push(goal);
        }
    }
    match m.get("columns") {
        Some(cv) => {
            for c in cv.list_or_one()? {
                let s = c.text()?;
                check(&c, s, true)?;
                r.columns.push(s.to_string());
            }
        }
        None => r.columns = default_columns(sc),
    }
    if let Some(pv) = m.get("plot") {
        let pm = pv.map(&["y", "y_label"])?;
        if let Some(y) = pm.get("y") {
            r.plot_y.clear();
            for c in y.list_or_one()? {
                let s = c.text()?;
                check(&c, s, false)?;
                r.plot_y.push(s.to_string());
            }
        }
        if let Some(l) = pm.get("y_label") {
            r.y_label = l.text()?.to_string();
        }
    }
    if let Some(dv) = m.get("derived") {
        for d in dv.list_or_one()? {
            let s = d.text()?;
            r.derived.push(match s {
                "drop_vs_first" => Derived::DropVsFirst,
                "linear_fit" => {
                    if sc.axis.values.iter().filter(|v| v.number.is_some()).count() < 2 {
                        return Err(d.bad(s, "linear_fit needs at least two numeric axis values"));
                    }
                    Derived::LinearFit
                }
                "vs_reservation" => {
                    let reserved = sc.points(false).iter().any(|p| {
                        p.2.dut.reservation.fraction().is_some()
                    });
                    if !reserved {
                        return Err(d.bad(s, "vs_reservation needs points with a time reservation (reservation: 25%)"));
                    }
                    Derived::VsReservation
                }
                _ => {
                    return Err(d.bad(
                        s,
                        format!("derived {s:?}: drop_vs_first, linear_fit or vs_reservation"),
                    ))
                }
            });
        }
    }
    Ok(r)
}

/// Parameters a goal's `at` may name: the DUT's and the traffic's keys, and `rate.<vr>`.
fn base_keys(sc: &Scenario) -> Vec<String> {
    let mut k: Vec<String> = DUT_KEYS.iter().chain(TRAFFIC_KEYS).map(|s| s.to_string()).collect();
    k.extend(sc.base.traffic.rates.iter().map(|(c, _)| format!("rate.{c}")));
    k
}

fn default_columns(sc: &Scenario) -> Vec<String> {
    let mut c = vec![sc.axis.label.clone()];
    if let Some(s) = &sc.series {
        c.push(s.label.clone());
    }
    let m: &[&str] = match sc.method.kind {
        MethodKind::Max => &["forwarded_pps", "forwarded_ci99_pps", "loss_ratio"],
        MethodKind::Rate => &["offered_pps", "forwarded_pps", "forwarded_ci99_pps", "loss_ratio"],
        MethodKind::Sweep => &["capacity_pps", "peak_forwarded_pps"],
        MethodKind::Ndr => &["ndr_pps", "pdr_pps"],
    };
    c.extend(m.iter().map(|s| s.to_string()));
    c
}

/// The file's leading comment lines, without `#`.
fn header_comment(text: &str) -> String {
    text.lines()
        .take_while(|l| l.trim_start().starts_with('#') || l.trim().is_empty())
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests;
