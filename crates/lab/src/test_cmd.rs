//! `routeplex test sweep|rfc2544|ndr-pdr`: the router tester against a DUT, no root needed.

mod dut;
mod impairments;
mod kernel_dut;
mod kernel_net;
pub mod migration;
mod peers;
mod scenario;
mod soak;
mod switch_dut;
mod timeline;
mod timeline_daemons;

use std::path::PathBuf;
use std::time::Duration;

use crate::{bail, Context, Result};
use clap::Subcommand;
use serde::Serialize;
use serde_json::{json, Value};
use tester::fake::{Behaviour, FakeDut};
use tester::frames::FrameSize;
use tester::method::{ndrpdr, rfc2544, sweep, Common, Session};
use tester::plot::{self, Point, Series, Style};
use tester::progress::Progress;
use tester::report::{self, Placement, Report};
use tester::traffic::TrafficSpec;
use tester::{Dut, Runner, RunnerOptions};

use crate::lab::{self, Table};
use crate::sys::threads::{Sampler, Watch};
use crate::{sys, Family};

/// The tests.
#[derive(Subcommand)]
pub enum TestCmd {
    /// Offered against forwarded load in steps, each repeated, with 99 % confidence intervals
    /// (the paper's router tester).
    Sweep(Box<SweepArgs>),
    /// RFC 2544 §26: throughput (binary search for zero loss), latency at it, frame loss rate
    /// in 10 % steps, back-to-back bursts.
    Rfc2544(Box<Rfc2544Args>),
    /// NDR (no loss) and PDR (0.5 % loss), MLRsearch style: short trials first, then longer
    /// ones, then confirmation trials.
    NdrPdr(Box<NdrPdrArgs>),
    /// routeplex and its peers side by side, one generator and sink, one run (root): Linux
    /// forwarding, macvlan VR, bridge + veth VR, Open vSwitch (userspace), routeplex over
    /// AF_XDP and AF_PACKET, each in fresh namespaces; one table, JSON and plot.
    Peers(Box<peers::PeersArgs>),
    /// One experiment from a scenario file (examples/scenarios/): DUTs built from its
    /// parameters, its table, JSON, CSV and plots.
    Scenario(Box<scenario::ScenarioArgs>),
    /// Seed 003's live migration (root): a VR moved between two data planes in namespaces
    /// under 64 B and 1500 B streams and pings, with 0, 10k and the real table's routes;
    /// downtime, loss, reordering, total time, bytes moved and RTT, with 99 % CIs.
    Migration(Box<migration::MigrationArgs>),
    /// A failure timeline (root): a topology with routing daemons in its VRs, probe flows
    /// between its hosts, events (links cut, flaps, impairments, VRs stopped, daemons killed)
    /// at set times; per event and flow the outage, frames lost and when forwarding was back.
    Timeline(Box<timeline::TimelineArgs>),
    /// Each link impairment kind (delay and jitter, loss random and Gilbert-Elliott,
    /// duplicate, reorder, corrupt, rate) measured through a routeplex link and through
    /// Linux netem on a veth in one run (root), beside the configured value, with the CPU
    /// time per frame of each.
    Impairments(Box<impairments::ImpairmentsArgs>),
    /// A soak (root): traffic through four VRs in namespaces while routes churn,
    /// `apply` changes the topology, a VR migrates back and forth, captures and neighbour
    /// floods come and go; the daemons' RSS, descriptors and threads sampled, with slopes per
    /// hour; fails on growth or on a frame lost outside the activity that may lose it.
    Soak(Box<soak::SoakArgs>),
}

/// Options every test takes.
#[derive(clap::Args)]
pub struct CommonArgs {
    /// The device under test: routeplex (one VR, the bench topology with 4096-slot rings),
    /// routeplex-4vr (four VRs sharing two ports, the demo topology), or a fake DUT with
    /// known behaviour: loopback (no DUT: the tester alone), wire, drop-every:K,
    /// delay:MICROSECONDS, capacity:PPS. As root, a DUT of Linux interfaces in namespaces:
    /// linux, linux-samecpu, macvlan, bridge, ovs, routeplex-afxdp, routeplex-afpacket, or
    /// macvlan-vrs:N (N macvlan VRs sharing one ingress link by MAC, classes vr1..vrN).
    #[arg(long, default_value = "routeplex")]
    dut: String,
    /// Topology for a routeplex DUT instead of the embedded one: mem ports; every VR's first
    /// interface on the generator's port, its second on the sink's, with static neighbors on
    /// the second to route via.
    #[arg(long)]
    topology: Option<PathBuf>,
    /// Prefix file for the VRs' routes [default: the cached real table, else --routes
    /// generated prefixes].
    #[arg(long)]
    prefixes: Option<PathBuf>,
    /// Generated prefixes per family when no real table is cached.
    #[arg(long, default_value_t = 500_000)]
    routes: usize,
    /// Address family of the test traffic.
    #[arg(long, value_enum, default_value_t = Family::Ipv4)]
    family: Family,
    /// Seconds per measured trial (RFC 2544 asks for at least 60).
    #[arg(long, default_value_t = 1.0)]
    duration: f64,
    /// Seconds of traffic at the trial's rate before each trial, not counted.
    #[arg(long, default_value_t = 0.1)]
    warmup: f64,
    /// How many times each measurement is repeated (the paper: 10).
    #[arg(short = 'r', long, default_value_t = 10)]
    repetitions: usize,
    /// Frame size on the wire, FCS included: 64..=1518, or imix (64, 570, 1518 in 7:4:1).
    #[arg(long, default_value = "64")]
    frame_size: String,
    /// Distinct flows (source/destination addresses and UDP ports), 1..=65536.
    #[arg(long, default_value_t = 1024)]
    flows: usize,
    /// Frames per paced release [default: the frames due in 8 µs, 1..=64].
    #[arg(long)]
    burst: Option<usize>,
    /// The rate called 100 % and the top of the searches, e.g. 5M [default: measured first,
    /// unpaced with back-pressure].
    #[arg(long)]
    max_rate: Option<String>,
    /// A trial whose releases ran later than this (the tester was descheduled) is invalid
    /// and run again.
    #[arg(long, default_value_t = 2.0)]
    stall_limit_ms: f64,
    /// Attempts per trial while invalid; the last one counts either way.
    #[arg(long, default_value_t = 3)]
    attempts: usize,
    /// Sleep this many microseconds when idle instead of spinning (for a machine where the
    /// tester shares CPUs with other work; pacing gets coarser).
    #[arg(long)]
    idle_sleep_us: Option<f64>,
    /// Leave the threads unpinned (default: DUT on CPU 1, generator and sink on CPU 0).
    #[arg(long)]
    no_pin: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write one CSV row per trial to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Also draw PNG plots: this file (forwarded against generated load, 99 % CI bars) and
    /// FILE-latency.png next to it.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Options of `routeplex test sweep`.
#[derive(clap::Args)]
pub struct SweepArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Steps in percent of the maximum.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,20,30,40,50,60,70,80,90,100,110,120,130,140,150"
    )]
    steps: Vec<f64>,
    /// Explicit rates instead of --steps, e.g. 100k,500k,1M.
    #[arg(long, value_delimiter = ',')]
    rates: Vec<String>,
}

/// Options of `routeplex test rfc2544`.
#[derive(clap::Args)]
pub struct Rfc2544Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Throughput search resolution: a rate (10k) or a percentage of the maximum (0.5%).
    #[arg(long, default_value = "1%")]
    resolution: String,
    /// The lowest rate the throughput search tries [default: 1 % of the maximum]; if it
    /// loses frames the throughput is reported as 0 (not found).
    #[arg(long)]
    floor: Option<String>,
    /// Loss ratio a throughput trial may have and pass (RFC 2544: 0).
    #[arg(long, default_value_t = 0.0)]
    loss_tolerance: f64,
    /// Skip the latency measurement (§26.2).
    #[arg(long)]
    no_latency: bool,
    /// Skip the frame loss rate steps (§26.3).
    #[arg(long)]
    no_frame_loss: bool,
    /// Skip the back-to-back bursts (§26.4).
    #[arg(long)]
    no_back_to_back: bool,
    /// The longest back-to-back burst tried, frames.
    #[arg(long, default_value_t = 1_000_000)]
    b2b_max: u64,
    /// Back-to-back search resolution, frames.
    #[arg(long, default_value_t = 64)]
    b2b_resolution: u64,
}

/// Options of `routeplex test ndr-pdr`.
#[derive(clap::Args)]
pub struct NdrPdrArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Seconds per trial in the first phase (the last uses --duration).
    #[arg(long, default_value_t = 0.1)]
    initial_duration: f64,
    /// Search phases, trial durations growing geometrically.
    #[arg(long, default_value_t = 3)]
    phases: usize,
    /// Final relative width of the search bracket, percent (CSIT: 0.5).
    #[arg(long, default_value_t = 0.5)]
    goal_width: f64,
    /// Loss the PDR may have, percent (CSIT: 0.5).
    #[arg(long, default_value_t = 0.5)]
    pdr_loss: f64,
    /// The lowest rate tried [default: 1 % of the maximum].
    #[arg(long)]
    floor: Option<String>,
}

/// Runs a test.
pub fn run(cmd: TestCmd) -> Result<()> {
    match cmd {
        TestCmd::Sweep(a) => sweep_cmd(*a),
        TestCmd::Rfc2544(a) => rfc2544_cmd(*a),
        TestCmd::NdrPdr(a) => ndrpdr_cmd(*a),
        TestCmd::Peers(a) => peers::run(*a),
        TestCmd::Scenario(a) => scenario::run(*a),
        TestCmd::Migration(a) => migration::run(*a),
        TestCmd::Timeline(a) => timeline::run(*a),
        TestCmd::Impairments(a) => impairments::run(*a),
        TestCmd::Soak(a) => soak::run(*a),
    }
}

/// Everything a test needs, made from the common options.
struct Setup {
    runner: Runner,
    common: Common,
    placement: Placement,
    parameters: Value,
    /// Where the threads really run, read back from /proc for the whole test.
    seen: Sampler,
}

fn secs(what: &str, v: f64, max: f64) -> Result<Duration> {
    if !(v.is_finite() && (0.0..=max).contains(&v)) {
        bail!("--{what} {v} is outside 0..={max} seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

fn rate(what: &str, s: &str) -> Result<f64> {
    let v =
        tester::parse_rate(s).map_err(crate::Error::msg).with_context(|| format!("--{what}"))?;
    if v < 1.0 {
        bail!("--{what} {s}: at least 1 frame per second");
    }
    Ok(v)
}

fn setup(a: &CommonArgs) -> Result<Setup> {
    let duration = secs("duration", a.duration, 3600.0)?;
    if duration < Duration::from_millis(1) {
        bail!("--duration {}: at least 0.001 s", a.duration);
    }
    let warmup = secs("warmup", a.warmup, 600.0)?;
    if !(1..=1000).contains(&a.repetitions) {
        bail!("--repetitions {} is outside 1..=1000", a.repetitions);
    }
    if let Some(b) = a.burst {
        if !(1..=ports::MAX_BURST).contains(&b) {
            bail!("--burst {b} is outside 1..={}", ports::MAX_BURST);
        }
    }
    if !(1..=10).contains(&a.attempts) {
        bail!("--attempts {} is outside 1..=10", a.attempts);
    }
    let size =
        FrameSize::parse(&a.frame_size).map_err(|e| crate::format_err!("--frame-size: {e}"))?;
    let max_pps = a.max_rate.as_deref().map(|s| rate("max-rate", s)).transpose()?;
    let stall = secs("stall-limit-ms", a.stall_limit_ms / 1e3, 10.0)?;
    let idle = a.idle_sleep_us.map(|us| secs("idle-sleep-us", us / 1e6, 0.1)).transpose()?;

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = !a.no_pin && cpus >= 2;
    let dut_cpu = pin.then_some(1);
    let (dut, dut_desc): (Box<dyn Dut>, String) = match dut::embedded(&a.dut) {
        Some((text, name)) => {
            let topo = match &a.topology {
                Some(p) => control::Topology::load(p).map_err(crate::Error::from)?,
                None => lab::topology(text, name)?,
            };
            let table = match &a.prefixes {
                Some(p) => Table::from_file(p)?,
                None => Table::real_or_generated(a.routes, a.routes / 4, 1)?,
            };
            let d = dut::RouteplexDut::new(&a.dut, topo, table, a.family, dut_cpu)?;
            (Box::new(d), "the routeplex worker".into())
        }
        None if peers::is_kernel_dut(&a.dut) => peers::single(a, dut_cpu)?,
        None => {
            if a.topology.is_some() || a.prefixes.is_some() {
                bail!("--topology and --prefixes are for a routeplex DUT, not {}", a.dut);
            }
            let b = Behaviour::parse(&a.dut).map_err(|e| crate::format_err!("--dut: {e}"))?;
            let mut d = FakeDut::new(b, 4096);
            if let Some(cpu) = dut_cpu {
                d = d.on_thread(move || {
                    sys::pin(cpu);
                });
            }
            if let Some(i) = idle {
                d = d.idle_sleep(i);
            }
            (Box::new(d), "the fake DUT's thread".into())
        }
    };
    let placement = if pin && sys::pin(0) {
        Placement {
            cpus,
            tester: "CPU 0 (pinned): generator and sink on one thread".into(),
            dut: format!("CPU 1 (pinned): {dut_desc}"),
        }
    } else {
        Placement {
            cpus,
            tester: "not pinned: generator and sink on one thread".into(),
            dut: format!("not pinned: {dut_desc}"),
        }
    };
    let spec = TrafficSpec { flows: a.flows, size, ttl: 64 };
    let opts = RunnerOptions { idle_sleep: idle, stall_limit: stall, ..RunnerOptions::default() };
    let runner = Runner::new(dut, &spec, opts).map_err(err)?;
    let common = Common {
        duration,
        warmup,
        repetitions: a.repetitions,
        burst: a.burst,
        max_pps,
        attempts: a.attempts,
    };
    let (mean, min) = runner.frame_bytes();
    let parameters = json!({
        "common": common,
        "traffic": {
            "flows": a.flows, "frame_size": size.to_string(), "family": format!("{:?}", a.family).to_lowercase(),
            "mean_frame_bytes": mean, "min_frame_bytes": min,
            "classes": runner.classes(),
            "stamp": "UDP payload: sequence word (trial tag << 56 | flow sequence), TX ns, flow id",
        },
        "runner": opts,
        "refusal": runner.refusal(),
    });
    let seen = Sampler::start(
        vec![Watch::this_process(
            "routeplex test",
            &[
                ("main", "generator and sink"),
                ("routeplex-dut", "DUT worker"),
                ("fake-dut", "fake DUT"),
            ],
        )],
        Duration::from_millis(20),
    );
    Ok(Setup { runner, common, placement, parameters, seen })
}

/// Prints or writes the report and the CSV.
fn output<R: Serialize>(a: &CommonArgs, rep: &Report<R>, table: &str) -> Result<()> {
    if let Some(p) = &a.csv {
        std::fs::write(p, report::csv(&rep.trials))
            .with_context(|| format!("--csv {}", p.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(rep)?);
    } else {
        println!("routeplex test {}: {}", rep.test, rep.dut["name"].as_str().unwrap_or(""));
        println!("placement: tester {}; DUT {}", rep.placement.tester, rep.placement.dut);
        let size = rep.parameters["traffic"]["frame_size"].as_str().unwrap_or("?");
        println!(
            "trials of {} s after {} s warm-up, {} repetitions, {} frames, {} flows",
            rep.parameters["common"]["duration_s"],
            rep.parameters["common"]["warmup_s"],
            rep.parameters["common"]["repetitions"],
            if size == "imix" { "IMIX".to_string() } else { format!("{size}-byte") },
            rep.parameters["traffic"]["flows"],
        );
        print!("{table}");
        let invalid = rep.summary["invalid_trials_used"].as_u64().unwrap_or(0);
        if invalid > 0 {
            println!("note: {invalid} trial(s) in the results had the tester stalled on every attempt (valid: false in --json / --csv)");
        }
    }
    Ok(())
}

/// What a session leaves: its trials and how many were valid.
struct Done {
    trials: Vec<tester::method::TrialRecord>,
    validity: (usize, usize, usize),
    dut_name: String,
}

fn done(s: Session) -> Done {
    let validity = s.validity();
    let dut_name = s.runner.dut().name();
    Done { trials: s.trials, validity, dut_name }
}

/// Stops the DUT and assembles the report.
#[allow(clippy::too_many_arguments)]
fn finish<R: Serialize>(
    test: &str,
    d: Done,
    runner: Runner,
    (placement, seen): (Placement, Sampler),
    parameters: Value,
    results: R,
    mut summary: Value,
) -> Result<Report<R>> {
    let dut = runner.dut().describe();
    let dut_report = runner.finish().map_err(|e| crate::format_err!("{e}"))?;
    summary["placement_read_back"] = seen.finish().to_json();
    let mut limits = serde_json::Map::new();
    for t in d.trials.iter().filter(|t| t.used) {
        let l = trial_limited_by(&t.result);
        let n = limits.get(l).and_then(Value::as_u64).unwrap_or(0);
        limits.insert(l.into(), json!(n + 1));
    }
    summary["limited_by"] = Value::Object(limits);
    summary["limited_by_rule"] = json!(TRIAL_LIMIT_RULE);
    let (total, used, invalid) = d.validity;
    summary["trials_run"] = json!(total);
    summary["trials_used"] = json!(used);
    summary["invalid_trials_used"] = json!(invalid);
    Ok(Report {
        tool: format!("routeplex {}", env!("CARGO_PKG_VERSION")),
        test: test.into(),
        method: report::method_text(test),
        placement,
        dut,
        parameters,
        results,
        summary,
        dut_report,
        trials: d.trials,
    })
}

/// How [`trial_limited_by`] decides, for the reports.
const TRIAL_LIMIT_RULE: &str = "per used trial: generator if it put out under 99 % of the target rate (or, at maximum rate, the DUT took and returned everything: it waited for the generator); none if it met the target and nothing was refused or lost; ring if frames were refused at the DUT's input ring (full) but every accepted frame came back; dut if accepted frames were lost";

/// What limited one trial (see [`TRIAL_LIMIT_RULE`]).
fn trial_limited_by(t: &tester::TrialResult) -> &'static str {
    let short = t.target_pps.is_some_and(|r| t.attempted_pps < 0.99 * r);
    let refused = t.refused + t.retried > 0;
    if short {
        "generator"
    } else if t.lost > 0 {
        "dut"
    } else if refused {
        "ring"
    } else if t.target_pps.is_some() {
        "none"
    } else {
        "generator"
    }
}

fn err(e: tester::Error) -> crate::Error {
    crate::format_err!("{e}")
}

fn sweep_cmd(a: SweepArgs) -> Result<()> {
    let steps = if a.rates.is_empty() {
        if a.steps.is_empty() || a.steps.iter().any(|&p| !(p > 0.0 && p <= 1000.0)) {
            bail!("--steps: percentages in (0, 1000]");
        }
        sweep::Steps::PercentOfMax(a.steps.clone())
    } else {
        sweep::Steps::Rates(a.rates.iter().map(|r| rate("rates", r)).collect::<Result<_>>()?)
    };
    let Setup { mut runner, common, placement, mut parameters, seen } = setup(&a.common)?;
    parameters["steps"] = json!(steps);
    let mut s = Session::new(&mut runner, common, Progress::stderr());
    let res = sweep::run(&mut s, &steps);
    s.progress.finish();
    let reps = s.common.repetitions;
    let d = done(s);
    let peak = res.steps.iter().map(|x| x.forwarded_pps).fold(0.0, f64::max);
    let summary = json!({
        "max_pps": res.max.as_ref().map(|m| m.pps),
        "peak_forwarded_pps": peak,
        "steps": res.steps.len(),
    });
    if let Some(p) = &a.common.plot {
        let pts: Vec<Point> = res
            .steps
            .iter()
            .map(|x| Point { x: x.attempted_pps, y: x.forwarded_pps, ci: x.ci99_pps })
            .collect();
        let size = match FrameSize::parse(&a.common.frame_size) {
            Ok(FrameSize::Fixed(n)) => format!("{n}-byte"),
            _ => "IMIX".to_string(),
        };
        let title = format!("sweep: {} ({size} frames, {reps} repetitions)", d.dut_name);
        plot::throughput(p, &title, &pts, Style::Steps).map_err(err)?;
        let lat = |f: fn(&sweep::Step) -> Option<f64>, name: &str| Series {
            name: name.into(),
            points: res.steps.iter().filter_map(|x| f(x).map(|v| (x.attempted_pps, v))).collect(),
        };
        plot::against_rate(
            &plot::sibling(p, "latency"),
            &format!("sweep latency: {}", d.dut_name),
            "latency (µs), mean over repetitions",
            &[
                lat(|x| x.p50_us, "p50 latency"),
                lat(|x| x.p99_us, "p99 latency"),
                lat(|x| x.max_us, "max latency"),
            ],
            true,
        )
        .map_err(err)?;
    }
    let table = report::sweep_table(&res);
    let rep = finish("sweep", d, runner, (placement, seen), parameters, res, summary)?;
    output(&a.common, &rep, &table)
}

fn rfc2544_cmd(a: Rfc2544Args) -> Result<()> {
    let cfg = rfc2544::Config {
        resolution: rfc2544::Resolution::parse(&a.resolution)
            .map_err(|e| crate::format_err!("--resolution: {e}"))?,
        floor_pps: a.floor.as_deref().map(|f| rate("floor", f)).transpose()?,
        loss_tolerance: a.loss_tolerance,
        latency: !a.no_latency,
        frame_loss: !a.no_frame_loss,
        back_to_back: !a.no_back_to_back,
        b2b_max_frames: a.b2b_max,
        b2b_resolution_frames: a.b2b_resolution,
    };
    if !(0.0..1.0).contains(&cfg.loss_tolerance) {
        bail!("--loss-tolerance {} is outside [0, 1)", cfg.loss_tolerance);
    }
    if cfg.b2b_max_frames == 0 || cfg.b2b_resolution_frames == 0 {
        bail!("--b2b-max and --b2b-resolution must be positive");
    }
    let Setup { mut runner, common, placement, mut parameters, seen } = setup(&a.common)?;
    parameters["rfc2544"] = json!(cfg);
    let mut s = Session::new(&mut runner, common, Progress::stderr());
    let res = rfc2544::run(&mut s, &cfg);
    let step_x: Vec<f64> =
        res.frame_loss.iter().map(|x| mean_of(&s, &x.trials, |t| t.attempted_pps)).collect();
    let d = done(s);
    let summary = json!({
        "throughput_pps": res.throughput.pps,
        "throughput_ci99_pps": res.throughput.summary.ci99,
        "throughput_found": res.throughput.found,
        "p50_us": res.latency.as_ref().map(|l| l.all.p50_us),
        "p99_us": res.latency.as_ref().map(|l| l.all.p99_us),
        "max_us": res.latency.as_ref().map(|l| l.all.max_us),
        "mean_us": res.latency.as_ref().map(|l| l.all.mean_us),
        "frame_loss_at_max": res.frame_loss.first().map(|x| x.loss_ratio.mean),
        "back_to_back_frames": res.back_to_back.as_ref().map(|b| b.frames.mean),
        "max_pps": res.max.pps,
    });
    if let Some(p) = &a.common.plot {
        let name = &d.dut_name;
        let pts: Vec<Point> = res
            .frame_loss
            .iter()
            .zip(&step_x)
            .map(|(x, &gx)| Point { x: gx, y: x.forwarded.mean, ci: x.forwarded.ci99 })
            .collect();
        if !pts.is_empty() {
            let title = format!("RFC 2544 frame loss steps: {name}");
            plot::throughput(p, &title, &pts, Style::Steps).map_err(err)?;
        }
        if let Some(l) = &res.latency {
            plot::latency_percentiles(
                &plot::sibling(p, "latency"),
                &format!("RFC 2544 latency at {}: {name}", tester::progress::fmt_rate(l.rate_pps)),
                &[Series {
                    name: format!("all frames of {} trials", l.trials.len()),
                    points: l.cdf.clone(),
                }],
            )
            .map_err(err)?;
        }
    }
    let table = report::rfc2544_table(&res);
    let rep = finish("rfc2544", d, runner, (placement, seen), parameters, res, summary)?;
    output(&a.common, &rep, &table)
}

fn mean_of(s: &Session, idx: &[usize], f: impl Fn(&tester::TrialResult) -> f64) -> f64 {
    if idx.is_empty() {
        return 0.0;
    }
    idx.iter().map(|&i| f(s.trial(i))).sum::<f64>() / idx.len() as f64
}

fn ndrpdr_cmd(a: NdrPdrArgs) -> Result<()> {
    if !(1..=10).contains(&a.phases) {
        bail!("--phases {} is outside 1..=10", a.phases);
    }
    if !(a.goal_width > 0.0 && a.goal_width < 100.0) {
        bail!("--goal-width {} is outside (0, 100) percent", a.goal_width);
    }
    if !(a.pdr_loss > 0.0 && a.pdr_loss < 100.0) {
        bail!("--pdr-loss {} is outside (0, 100) percent", a.pdr_loss);
    }
    let cfg = ndrpdr::Config {
        initial_duration: secs("initial-duration", a.initial_duration, 3600.0)?,
        phases: a.phases,
        goal_width: a.goal_width / 100.0,
        pdr_loss: a.pdr_loss / 100.0,
        floor_pps: a.floor.as_deref().map(|f| rate("floor", f)).transpose()?,
    };
    if cfg.initial_duration < Duration::from_millis(1) {
        bail!("--initial-duration {}: at least 0.001 s", a.initial_duration);
    }
    let Setup { mut runner, common, placement, mut parameters, seen } = setup(&a.common)?;
    parameters["ndr_pdr"] = json!(cfg);
    let mut s = Session::new(&mut runner, common, Progress::stderr());
    let res = ndrpdr::run(&mut s, &cfg);
    let pts: Vec<Point> = s
        .trials
        .iter()
        .filter(|t| t.used && t.result.target_pps.is_some())
        .map(|t| Point { x: t.result.attempted_pps, y: t.result.forwarded_pps, ci: None })
        .collect();
    let lat: Vec<Series> = [&res.ndr, &res.pdr]
        .iter()
        .filter(|b| !b.cdf.is_empty())
        .map(|b| Series {
            name: format!(
                "{} at {}: every frame of {} trials",
                b.name,
                tester::progress::fmt_rate(b.rate_pps),
                b.confirm.len()
            ),
            points: b.cdf.clone(),
        })
        .collect();
    let d = done(s);
    let summary = json!({
        "ndr_pps": res.ndr.rate_pps,
        "ndr_found": res.ndr.found,
        "ndr_confirmed": format!("{}/{}", res.ndr.confirmed, res.ndr.confirm.len()),
        "pdr_pps": res.pdr.rate_pps,
        "pdr_found": res.pdr.found,
        "pdr_confirmed": format!("{}/{}", res.pdr.confirmed, res.pdr.confirm.len()),
        "max_pps": res.max.pps,
    });
    if let Some(p) = &a.common.plot {
        let name = &d.dut_name;
        let title = format!("NDR/PDR search trials: {name}");
        plot::throughput(p, &title, &pts, Style::Trials).map_err(err)?;
        if !lat.is_empty() {
            let title = format!("latency of the NDR/PDR confirmation trials: {name}");
            plot::latency_percentiles(&plot::sibling(p, "latency"), &title, &lat).map_err(err)?;
        }
    }
    let table = report::ndrpdr_table(&res);
    let rep = finish("ndr-pdr", d, runner, (placement, seen), parameters, res, summary)?;
    output(&a.common, &rep, &table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tester::Load;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        t: TestCmd,
    }

    fn parse(args: &[&str]) -> Result<TestCmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("test").chain(args.iter().copied())).map(|c| c.t)
    }

    #[test]
    fn the_command_line_parses_and_rejects_in_one_line() {
        let TestCmd::Sweep(a) =
            parse(&["sweep", "--rates", "100k,1.5M", "-r", "3", "--json"]).unwrap()
        else {
            panic!("not sweep")
        };
        assert_eq!(a.rates, ["100k", "1.5M"]);
        assert_eq!(a.steps.len(), 15);
        assert!(a.common.json);
        assert!(parse(&["rfc2544", "--resolution", "0.5%", "--no-back-to-back"]).is_ok());
        assert!(parse(&["ndr-pdr", "--phases", "2", "--goal-width", "1"]).is_ok());
        assert!(parse(&["sweep", "--bogus"]).is_err());
        let bad = |args: &[&str]| {
            let TestCmd::Sweep(a) = parse(args).unwrap() else { panic!() };
            let e = match setup(&a.common) {
                Err(e) => format!("{e:#}"),
                Ok(_) => panic!("{args:?} accepted"),
            };
            assert!(!e.contains('\n'), "one line: {e}");
            e
        };
        assert!(bad(&["sweep", "--frame-size", "63"]).contains("64..=1518"));
        assert!(bad(&["sweep", "--flows", "0", "--dut", "wire", "--no-pin"]).contains("--flows 0"));
        assert!(bad(&["sweep", "--duration=-1"]).contains("--duration"));
        assert!(bad(&["sweep", "--dut", "teleport"]).contains("unknown fake DUT"));
        assert!(bad(&["sweep", "--dut", "drop-every:0"]).contains("K must be"));
        assert!(bad(&["sweep", "--max-rate", "fast"]).contains("--max-rate"));
    }

    /// The runner options of the tests that count every frame: the drain waits for 250 ms
    /// of quiet, not 10, so frames still in a ring of a DUT worker that lost its CPU for a
    /// while arrive (CI saw a 2-worker DUT's last 199 frames come after a 30 ms stall, once
    /// the drain had ended). The rings hold 200 ms of the tests' rate.
    fn drain_through_stalls() -> RunnerOptions {
        RunnerOptions {
            idle_sleep: Some(Duration::from_micros(20)),
            quiet: Duration::from_millis(250),
            ..RunnerOptions::default()
        }
    }

    /// A small table so the test builds its VRs quickly.
    fn small_dut(topo: &str, name: &str) -> dut::RouteplexDut {
        let topo = lab::topology(topo, name).unwrap();
        dut::RouteplexDut::new("test", topo, Table::generated(2000, 500, 3), Family::Ipv4, None)
            .unwrap()
    }

    #[test]
    fn four_vrs_forward_every_frame_and_count_per_vr() {
        let d = small_dut(include_str!("demo.yaml"), "demo.yaml");
        let spec = TrafficSpec { flows: 64, ..TrafficSpec::default() };
        let opts = drain_through_stalls();
        let mut r = Runner::new(Box::new(d), &spec, opts).unwrap();
        assert_eq!(r.classes(), ["vr-a", "vr-b", "vr-c", "vr-d"]);
        // 20 kpps for 0.25 s: 5,000 frames; the rings hold 4096 each, 200 ms of any stall.
        let t =
            r.trial(&Load::paced(20_000.0, Duration::from_millis(250), Duration::from_millis(20)));
        assert_eq!((t.offered, t.refused, t.received, t.lost), (5_000, 0, 5_000, 0), "{t:?}");
        assert_eq!((t.foreign, t.duplicates), (0, 0));
        for c in &t.classes {
            assert_eq!((c.offered, c.received), (1_250, 1_250), "{}", c.name);
        }
        // The DUT's own count agrees: what entered (warm-up included) was forwarded.
        let dut = t.dut.expect("counters");
        assert_eq!(dut.received, dut.forwarded);
        assert_eq!(dut.received, 5_000 + 400);
        assert!(dut.dropped.is_empty(), "{dut:?}");
        let rep = r.finish().unwrap();
        assert_eq!(rep.details["vrs"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn a_topology_with_workers_runs_on_the_multi_worker_runtime() {
        let text = format!("workers: 2\n{}", include_str!("demo.yaml"));
        let d = small_dut(&text, "demo-2-workers.yaml");
        assert!(d.describe()["worker"].as_str().unwrap().contains("2 worker threads"));
        let spec = TrafficSpec { flows: 64, ..TrafficSpec::default() };
        let opts = drain_through_stalls();
        let mut r = Runner::new(Box::new(d), &spec, opts).unwrap();
        let t =
            r.trial(&Load::paced(20_000.0, Duration::from_millis(250), Duration::from_millis(20)));
        assert_eq!((t.offered, t.refused, t.received, t.lost), (5_000, 0, 5_000, 0), "{t:?}");
        // Counters come from the runtime's snapshot: what entered was forwarded.
        let dut = t.dut.expect("counters");
        assert_eq!(dut.received, dut.forwarded);
        assert_eq!(dut.received, 5_000 + 400);
        let rep = r.finish().unwrap();
        assert_eq!(rep.details["workers"].as_array().unwrap().len(), 2, "{}", rep.details);
        assert_eq!(rep.details["vrs"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn a_sweep_runs_end_to_end_with_every_output() {
        let dir = std::env::temp_dir().join(format!("routeplex-test-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (csv, png) = (dir.join("t.csv"), dir.join("t.png"));
        let TestCmd::Sweep(a) = parse(&[
            "sweep",
            "--dut",
            "wire",
            "--rates",
            "10k,20k",
            "-r",
            "2",
            "--duration",
            "0.05",
            "--warmup",
            "0.01",
            "--flows",
            "8",
            "--no-pin",
            "--idle-sleep-us",
            "20",
            "--json",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
        ])
        .unwrap() else {
            panic!()
        };
        sweep_cmd(*a).unwrap();
        let rows = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(rows.lines().next().unwrap(), report::CSV_HEADER);
        assert!(rows.lines().count() >= 5, "header and at least 4 trials");
        for f in ["t.png", "t-latency.png"] {
            assert_eq!(&std::fs::read(dir.join(f)).unwrap()[1..4], b"PNG");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
