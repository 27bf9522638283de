//! `routeplex test peers`: routeplex and its peers side by side, in one run, with one
//! generator and sink: Linux IP forwarding in a namespace, a macvlan VR (seed 002), a bridge +
//! veth VR (seed 003), Open vSwitch's userspace datapath, and routeplex over AF_XDP and
//! AF_PACKET. Each DUT is built in fresh namespaces ([`KernelDut`]), measured with one of the
//! tester's methods, torn down (and the teardown checked) before the next; then one table,
//! one JSON object and one plot compare them, each DUT's rate also as a ratio to Linux
//! forwarding measured in the same run. With `--pairs N` the DUTs are measured in N rounds
//! (linux, macvlan, …, linux, macvlan, …), the probes of `tester::pairs` timed before every
//! DUT, and each DUT's ratio is the median over the rounds of its rate over Linux's in the
//! same round: a minute in which this VM's memory is slow is then seen by both sides.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use tester::frames::FrameSize;
use tester::method::{ndrpdr, sweep, Common, Session, TrialRecord};
use tester::pacer::Rate;
use tester::plot;
use tester::progress::{fmt_rate, Progress};
use tester::report::{self, Table};
use tester::stats::Summary;
use tester::traffic::TrafficSpec;
use tester::{DutReport, Load, Runner, RunnerOptions, Until};

use super::kernel_dut::{KernelDut, Kind, Options, TesterPort};
use super::kernel_net::{self as net, lock, Teardown};
use crate::sys;

/// The DUTs `routeplex test peers` measures unless told otherwise, in this order.
pub const DEFAULT_DUTS: &str =
    "linux,linux-samecpu,macvlan,bridge,ovs,routeplex-afxdp,routeplex-afpacket";
/// The DUT every ratio is taken against.
const BASELINE: &str = "linux";

/// How each DUT is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Unpaced trials, repeated: the generator offers all it can (back-pressure from its own
    /// ring only), and the forwarded rate is what the DUT gets through under that load.
    Max,
    /// Offered load in steps (--rates, the same for every DUT, or --steps of each DUT's own
    /// maximum); the headline is the step with the highest mean forwarded rate.
    Sweep,
    /// NDR/PDR search (MLRsearch style); the headline is the forwarded rate at the PDR.
    Ndr,
}

/// Options of `routeplex test peers`.
#[derive(clap::Args)]
pub struct PeersArgs {
    /// The DUTs, measured one after another in this order, each in fresh namespaces: linux
    /// (IP forwarding in a namespace, RPS to the DUT's CPU), linux-samecpu (the same without
    /// RPS), macvlan (seed 002's VR), bridge (seed 003's bridge + veth VR), ovs (Open vSwitch,
    /// userspace datapath), routeplex-afxdp, routeplex-afpacket; also vm-linux (not by default:
    /// a QEMU guest forwarding with Linux between two vhost-user ports of a routeplex switch;
    /// under TCG, without KVM, it forwards thousands of frames per second, not millions).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_DUTS)]
    dut: Vec<String>,
    /// How each DUT is measured.
    #[arg(long, value_enum, default_value_t = Method::Max)]
    method: Method,
    /// A short run (a few seconds per DUT): 0.3 s trials after 0.1 s warm-up, 3 repetitions,
    /// 64 flows, 16 routes, unless those options are given. Coarse figures, wide CIs.
    #[arg(long)]
    quick: bool,
    /// Seconds per measured trial (the last phase's, for ndr) [default: 1; --quick: 0.3].
    #[arg(long)]
    duration: Option<f64>,
    /// Seconds of traffic before each trial, not counted [default: 0.2; --quick: 0.1].
    #[arg(long)]
    warmup: Option<f64>,
    /// Repetitions of each measurement (max: trials; sweep: per step; ndr: confirmations)
    /// [default: 5; --quick: 3].
    #[arg(short = 'r', long)]
    repetitions: Option<usize>,
    /// Frame size on the wire, FCS included: 64..=1518, or imix.
    #[arg(long, default_value = "64")]
    frame_size: String,
    /// Distinct flows (source/destination addresses and UDP ports), 1..=65536 [default: 1024;
    /// --quick: 64].
    #[arg(long)]
    flows: Option<usize>,
    /// Prefixes every DUT routes (equal parts of 198.19.128.0/17), 1..=8192 [default: 256;
    /// --quick: 16].
    #[arg(long)]
    routes: Option<usize>,
    /// Sweep: these offered rates for every DUT, e.g. 100k,500k,1M [default: --steps of each
    /// DUT's own maximum, measured first].
    #[arg(long, value_delimiter = ',')]
    rates: Vec<String>,
    /// Sweep: steps in percent of each DUT's maximum.
    #[arg(long, value_delimiter = ',', default_value = "25,50,75,100,125,150")]
    steps: Vec<f64>,
    /// The rate called 100 % for --steps and the top of the ndr search [default: measured per
    /// DUT, unpaced].
    #[arg(long)]
    max_rate: Option<String>,
    /// Ndr: loss the PDR may have, percent.
    #[arg(long, default_value_t = 0.5)]
    pdr_loss: f64,
    /// Ndr: final relative width of the search bracket, percent.
    #[arg(long, default_value_t = 1.0)]
    goal_width: f64,
    /// Frames per paced release [default: the frames due in 8 µs, 1..=64].
    #[arg(long)]
    burst: Option<usize>,
    /// The tester's backend on its veth ends.
    #[arg(long, value_enum, default_value_t = TesterPort::Auto)]
    tester_port: TesterPort,
    /// A trial whose loop stalled longer than this is invalid and run again. Higher than the
    /// other tests' 2 ms: here one AF_XDP kick transmits up to the tester's TX ring (2048
    /// frames) inside the kernel, several milliseconds at the maximum rate, and the loop
    /// counts that as a stall.
    #[arg(long, default_value_t = 20.0)]
    stall_limit_ms: f64,
    /// Attempts per trial while invalid.
    #[arg(long, default_value_t = 3)]
    attempts: usize,
    /// Leave everything unpinned and unsteered (default: generator and sink on CPU 0, the
    /// DUT's work on the last CPU).
    #[arg(long)]
    no_pin: bool,
    /// Rounds over every DUT, 1..=20: each DUT is paired with Linux's measurement of the same
    /// round [default: 5; --quick: 1].
    #[arg(long)]
    pairs: Option<usize>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write one CSV row per trial (with a dut column) to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Where the report goes: DIR/peers.json (the same object --json prints) and, next to
    /// it, DIR/peers.png (a bar per DUT: its forwarded rate with 99 % CI bars). Made if
    /// missing.
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Draw no plot.
    #[arg(long)]
    no_plot: bool,
}

/// One DUT's part of the report.
#[derive(Serialize)]
struct Outcome {
    dut: String,
    /// ok, skipped (with the reason) or failed (with the error).
    status: &'static str,
    reason: Option<String>,
    /// Mean forwarded rate of the headline trials (see `headline`).
    forwarded_pps: Option<f64>,
    ci99_pps: Option<f64>,
    /// forwarded_pps / the baseline's, measured in this run; with rounds, the median over
    /// them of each round's ratio (`pairs`).
    ratio_to_linux: Option<f64>,
    /// The rounds as pairs with the baseline's measurement of the same round (2 rounds or
    /// more, a DUT other than the baseline).
    pairs: Option<tester::pairs::Summary>,
    /// The forwarded rate of each round (the headline's is the median's round).
    rounds_forwarded_pps: Vec<Option<f64>>,
    /// What the generator put out in those trials.
    attempted_pps: Option<f64>,
    loss_ratio: Option<f64>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    /// What forwarded_pps is.
    headline: String,
    /// max and sweep: "dut" if the DUT's counters show drops in the headline trials (it was
    /// at capacity), "generator" if it dropped nothing (it forwarded all the generator could
    /// put out, so its capacity is at least forwarded_pps). The sink's own drops
    /// (tester/ts.rx_dropped) do not count.
    limited_by: Option<&'static str>,
    /// The DUT's own counters summed over the headline trials: where frames died.
    dut_counters: Option<tester::DutCounters>,
    /// The DUT as it describes itself (namespaces, path, placement, versions).
    describe: Value,
    results: Value,
    dut_report: Option<DutReport>,
    teardown: Teardown,
    trials_run: usize,
    invalid_trials_used: usize,
    seconds: f64,
    #[serde(skip)]
    trials: Vec<TrialRecord>,
    #[serde(skip)]
    series: Vec<(f64, f64)>,
    #[serde(skip)]
    steps_table: Option<String>,
}

impl Outcome {
    fn new(dut: &str) -> Outcome {
        Outcome {
            dut: dut.to_string(),
            status: "failed",
            reason: None,
            forwarded_pps: None,
            ci99_pps: None,
            ratio_to_linux: None,
            pairs: None,
            rounds_forwarded_pps: Vec::new(),
            attempted_pps: None,
            loss_ratio: None,
            p50_us: None,
            p99_us: None,
            headline: String::new(),
            limited_by: None,
            dut_counters: None,
            describe: Value::Null,
            results: Value::Null,
            dut_report: None,
            teardown: Teardown::default(),
            trials_run: 0,
            invalid_trials_used: 0,
            seconds: 0.0,
            trials: Vec::new(),
            series: Vec::new(),
            steps_table: None,
        }
    }
}

/// Runs `routeplex test peers`.
pub fn run(a: PeersArgs) -> Result<()> {
    if sys::euid() != 0 {
        bail!("routeplex test peers needs root: it creates network namespaces and veth pairs, attaches XDP programs and starts Open vSwitch (run it as root)");
    }
    let mut kinds = Vec::new();
    for d in &a.dut {
        let k = Kind::parse(d.trim()).with_context(|| {
            format!("--dut {d}: not a peer DUT (one of {})", super::kernel_dut::NAMES.join(", "))
        })?;
        if kinds.contains(&k) {
            bail!("--dut {d} is listed twice");
        }
        kinds.push(k);
    }
    // The defaults, or --quick's, for what was not given.
    let q = a.quick;
    let a_duration = a.duration.unwrap_or(if q { 0.3 } else { 1.0 });
    let a_warmup = a.warmup.unwrap_or(if q { 0.1 } else { 0.2 });
    let repetitions = a.repetitions.unwrap_or(if q { 3 } else { 5 });
    let flows = a.flows.unwrap_or(if q { 64 } else { 1024 });
    let routes = a.routes.unwrap_or(if q { 16 } else { 256 });
    let mut a = a;
    (a.duration, a.warmup, a.repetitions, a.flows, a.routes) =
        (Some(a_duration), Some(a_warmup), Some(repetitions), Some(flows), Some(routes));
    let pairs = a.pairs.unwrap_or(if q { 1 } else { 5 });
    a.pairs = Some(pairs);
    if !(1..=20).contains(&pairs) {
        bail!("--pairs {pairs} is outside 1..=20");
    }
    let duration = super::secs("duration", a_duration, 3600.0)?;
    if duration < Duration::from_millis(1) {
        bail!("--duration {a_duration}: at least 0.001 s");
    }
    let warmup = super::secs("warmup", a_warmup, 600.0)?;
    if !(1..=1000).contains(&repetitions) {
        bail!("--repetitions {repetitions} is outside 1..=1000");
    }
    if !(1..=65536).contains(&flows) {
        bail!("--flows {flows} is outside 1..=65536");
    }
    if a.out.exists() && !a.out.is_dir() {
        bail!("--out {}: not a directory", a.out.display());
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("--out {}: cannot make the directory", a.out.display()))?;
    let json_path = a.out.join("peers.json");
    if !(1..=10).contains(&a.attempts) {
        bail!("--attempts {} is outside 1..=10", a.attempts);
    }
    if let Some(b) = a.burst {
        if !(1..=ports::MAX_BURST).contains(&b) {
            bail!("--burst {b} is outside 1..={}", ports::MAX_BURST);
        }
    }
    let size =
        FrameSize::parse(&a.frame_size).map_err(|e| crate::format_err!("--frame-size: {e}"))?;
    let max_pps = a.max_rate.as_deref().map(|s| super::rate("max-rate", s)).transpose()?;
    let stall = super::secs("stall-limit-ms", a.stall_limit_ms / 1e3, 10.0)?;
    super::kernel_dut::prefixes(routes)?;
    let steps = if a.rates.is_empty() {
        if a.steps.is_empty() || a.steps.iter().any(|&p| !(p > 0.0 && p <= 1000.0)) {
            bail!("--steps: percentages in (0, 1000]");
        }
        sweep::Steps::PercentOfMax(a.steps.clone())
    } else {
        sweep::Steps::Rates(a.rates.iter().map(|r| super::rate("rates", r)).collect::<Result<_>>()?)
    };
    if !(a.pdr_loss > 0.0 && a.pdr_loss < 100.0) {
        bail!("--pdr-loss {} is outside (0, 100) percent", a.pdr_loss);
    }
    if !(a.goal_width > 0.0 && a.goal_width < 100.0) {
        bail!("--goal-width {} is outside (0, 100) percent", a.goal_width);
    }

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = !a.no_pin && cpus >= 2;
    let dut_cpu = pin.then_some(cpus - 1);
    let pinned = pin && sys::pin(0);
    let tester_placement = if pinned {
        "CPU 0 (pinned): generator and sink on one thread, the main thread of this process"
            .to_string()
    } else {
        "not pinned: generator and sink on one thread".to_string()
    };
    let common =
        Common { duration, warmup, repetitions, burst: a.burst, max_pps, attempts: a.attempts };
    let spec = TrafficSpec { flows, size, ttl: 64 };
    let ropts = RunnerOptions { stall_limit: stall, ..RunnerOptions::default() };
    let kopts = Options { routes, dut_cpu, tester_port: a.tester_port };
    let ndr_cfg = ndrpdr::Config {
        initial_duration: Duration::from_millis(100).min(duration),
        phases: 2,
        goal_width: a.goal_width / 100.0,
        pdr_loss: a.pdr_loss / 100.0,
        floor_pps: None,
    };
    let load_before = loadavg();
    let t_start = Instant::now();
    let prober = tester::pairs::Prober::new();
    // rounds[r][d]: DUT d in round r, with the probes and load average just before it.
    let mut rounds: Vec<Vec<Round>> = Vec::with_capacity(pairs);
    for r in 0..pairs {
        let mut row: Vec<Round> = Vec::with_capacity(kinds.len());
        for (d, &k) in kinds.iter().enumerate() {
            // A DUT skipped once (OVS not installed) is not tried again.
            if let Some(prev) = rounds.last().map(|p| &p[d]).filter(|p| p.0.status == "skipped") {
                let mut o = Outcome::new(k.name());
                (o.status, o.reason) = ("skipped", prev.0.reason.clone());
                row.push((o, prev.1, prev.2));
                continue;
            }
            if !a.json {
                let of = if pairs > 1 {
                    format!(" (round {} of {pairs})", r + 1)
                } else {
                    String::new()
                };
                eprintln!("routeplex test peers: {}{of} ...", k.name());
            }
            let load = tester::pairs::load_average();
            let probes = prober.probe();
            let o = measure(k, &kopts, &spec, ropts, common, a.method, &steps, &ndr_cfg);
            if !a.json {
                match o.status {
                    "ok" => eprintln!(
                        "routeplex test peers: {}: {} forwarded",
                        k.name(),
                        o.forwarded_pps.map_or("-".into(), fmt_rate)
                    ),
                    s => eprintln!(
                        "routeplex test peers: {}: {s}: {}",
                        k.name(),
                        o.reason.as_deref().unwrap_or("")
                    ),
                }
            }
            row.push((o, probes, load));
        }
        rounds.push(row);
    }
    let load_after = loadavg();
    let base_at = kinds.iter().position(|k| k.name() == BASELINE);
    let outcomes = headlines(rounds, base_at);
    let base = outcomes
        .iter()
        .find(|o| o.dut == BASELINE && o.status == "ok")
        .and_then(|o| o.forwarded_pps);

    let title = format!(
        "routeplex test peers ({}, {} frames): forwarded rate per DUT",
        match a.method {
            Method::Max => "max",
            Method::Sweep => "sweep",
            Method::Ndr => "ndr",
        },
        match size {
            FrameSize::Fixed(n) => format!("{n}-byte"),
            _ => "IMIX".to_string(),
        }
    );
    let plot_path = (!a.no_plot).then(|| a.out.join("peers.png"));
    if let Some(p) = &plot_path {
        // A bar per DUT (its headline forwarded rate, 99 % CI bars), each in its own colour.
        let bars: Vec<plot::Bar> = outcomes
            .iter()
            .filter_map(|o| {
                let f = o.forwarded_pps?;
                Some(plot::Bar {
                    name: match o.ratio_to_linux {
                        Some(r) => format!("{} ({r:.2}× linux)", o.dut),
                        None => o.dut.clone(),
                    },
                    value: f / 1e6,
                    ci: o.ci99_pps.map(|c| c / 1e6),
                })
            })
            .collect();
        if bars.is_empty() {
            eprintln!("routeplex test peers: nothing was measured: no plot");
        } else {
            plot::bars(p, &title, "forwarded (Mpps), 99 % CI bars", &bars)
                .map_err(|e| crate::format_err!("{e}"))?;
        }
    }
    if let Some(p) = &a.csv {
        let mut out = String::from("dut,");
        out += report::CSV_HEADER;
        out.push('\n');
        for o in &outcomes {
            for line in report::csv(&o.trials).lines().skip(1) {
                out += &format!("{},{line}\n", o.dut);
            }
        }
        std::fs::write(p, out).with_context(|| format!("--csv {}", p.display()))?;
    }

    let host = json!({
        "cpus": cpus,
        "cpu_model": cpu_model(),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "seconds": t_start.elapsed().as_secs_f64(),
    });
    let failed: Vec<&str> =
        outcomes.iter().filter(|o| o.status == "failed").map(|o| o.dut.as_str()).collect();
    {
        let placement: serde_json::Map<String, Value> =
            outcomes.iter().map(|o| (o.dut.clone(), o.describe["placement"].clone())).collect();
        let trials: serde_json::Map<String, Value> =
            outcomes.iter().map(|o| (o.dut.clone(), json!(o.trials))).collect();
        let rep = json!({
            "tool": format!("routeplex {}", env!("CARGO_PKG_VERSION")),
            "test": "peers",
            "quick": a.quick,
            "summary": outcomes.iter().map(|o| json!({
                "dut": o.dut,
                "status": o.status,
                "reason": o.reason,
                "forwarded_pps": o.forwarded_pps,
                "ci99_pps": o.ci99_pps,
                "ratio_to_linux": o.ratio_to_linux,
                "ratio_to_linux_pairs": o.pairs.as_ref().map(|p| json!({
                    "min": p.ratio.min, "max": p.ratio.max, "pairs": p.pairs.len(),
                    "flagged_pairs": p.flagged_pairs,
                })),
                "rounds_forwarded_pps": o.rounds_forwarded_pps,
                "limited_by": o.limited_by,
            })).collect::<Vec<_>>(),
            "method": {
                "name": format!("{:?}", a.method).to_lowercase(),
                "text": method_text(a.method),
                "tester": report::method_text(match a.method { Method::Max | Method::Sweep => "sweep", Method::Ndr => "ndr-pdr" }),
            },
            "host": host,
            "placement": {"tester": tester_placement, "duts": placement},
            "parameters": {
                "common": common,
                "traffic": {"flows": flows, "frame_size": size.to_string(), "family": "ipv4", "routes": routes},
                "runner": ropts,
                "steps": if a.method == Method::Sweep { json!(steps) } else { Value::Null },
                "ndr_pdr": if a.method == Method::Ndr { json!(ndr_cfg) } else { Value::Null },
                "refusal": "retry: a full tester TX ring is the tester's back-pressure; the DUT's ingress drops show as lost frames and in its counters",
            },
            "baseline": BASELINE,
            "baseline_pps": base,
            "duts": outcomes,
            "trials": trials,
            "plot": plot_path,
            "json": json_path,
        });
        let text = serde_json::to_string_pretty(&rep)?;
        std::fs::write(&json_path, format!("{text}\n"))
            .with_context(|| format!("--out: cannot write {}", json_path.display()))?;
        if a.json {
            println!("{text}");
        }
    }
    if !a.json {
        print!("{}", text_report(&a, &outcomes, &host, &tester_placement, plot_path.as_ref()));
        println!("json: {}", json_path.display());
    }
    if !failed.is_empty() {
        bail!("{} DUT(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}

/// One DUT's measurement in one round, with the probes and load average taken before it.
type Round = (Outcome, tester::pairs::Probes, Option<[f64; 3]>);

/// DUT `d`'s outcome over the rounds: a failed round's if any failed (a failure is never
/// hidden by a better round), else the round with the median forwarded rate; its ratio to
/// the baseline (`base_at`) is the median of the rounds' ratios, each against the baseline's
/// measurement of the same round. Every DUT's pairs are read before any outcome is moved out.
fn headlines(mut rounds: Vec<Vec<Round>>, base_at: Option<usize>) -> Vec<Outcome> {
    let duts = rounds.first().map_or(0, |r| r.len());
    let mut picked = Vec::with_capacity(duts);
    for d in 0..duts {
        let fwd: Vec<Option<f64>> = rounds.iter().map(|r| r[d].0.forwarded_pps).collect();
        let (mut values, mut loads) = (Vec::new(), Vec::new());
        if let Some(b) = base_at.filter(|&b| b != d) {
            for r in &rounds {
                let ((o, p, l), (bo, bp, _)) = (&r[d], &r[b]);
                if let (Some(x), Some(y), "ok", "ok") =
                    (o.forwarded_pps, bo.forwarded_pps, o.status, bo.status)
                {
                    if y > 0.0 {
                        values.push((x, *p, y, *bp));
                        loads.push(*l);
                    }
                }
            }
        }
        let pick = rounds.iter().position(|r| r[d].0.status == "failed").unwrap_or_else(|| {
            let mut ok: Vec<(f64, usize)> =
                fwd.iter().enumerate().filter_map(|(i, f)| Some(((*f)?, i))).collect();
            ok.sort_by(|x, y| x.0.total_cmp(&y.0));
            ok.get(ok.len().saturating_sub(1) / 2).map_or(0, |x| x.1)
        });
        let name = &rounds[0][d].0.dut;
        let summary = (!values.is_empty())
            .then(|| tester::pairs::Summary::new(name, BASELINE, "pps", &values, &loads));
        picked.push((pick, fwd, summary));
    }
    picked
        .into_iter()
        .enumerate()
        .map(|(d, (pick, fwd, summary))| {
            let mut o = std::mem::replace(&mut rounds[pick][d].0, Outcome::new(""));
            o.rounds_forwarded_pps = fwd;
            if base_at == Some(d) {
                o.ratio_to_linux = o.forwarded_pps.filter(|&f| f > 0.0).map(|_| 1.0);
            } else if let Some(s) = summary.filter(|_| o.status == "ok") {
                o.ratio_to_linux = Some(s.ratio.median);
                o.pairs = (s.pairs.len() > 1).then_some(s);
            }
            o
        })
        .collect()
}

fn method_text(m: Method) -> &'static str {
    match m {
        Method::Max => "Each DUT: -r unpaced trials (the generator offers all it can; a full tester TX ring is retried, never counted as loss), after a warm-up at the same load. forwarded_pps = mean forwarded rate over the trials, with the 99 % CI (Student t); loss = frames the DUT accepted on its link but never delivered / generated. The same generator, sink, flows and routes for every DUT, in one run.",
        Method::Sweep => "Each DUT: offered load in steps (the same rates for every DUT, or percentages of each DUT's own maximum), each repeated; the headline is the step with the highest mean forwarded rate. The steps above a DUT's capacity show how it behaves under overload, and each trial's DUT counters say where the excess was dropped.",
        Method::Ndr => "Each DUT: NDR/PDR search (MLRsearch style, two phases); the headline is the mean forwarded rate of the PDR confirmation trials.",
    }
}

/// Builds, measures and tears down one DUT.
#[allow(clippy::too_many_arguments)]
fn measure(
    kind: Kind,
    kopts: &Options,
    spec: &TrafficSpec,
    ropts: RunnerOptions,
    common: Common,
    method: Method,
    steps: &sweep::Steps,
    ndr_cfg: &ndrpdr::Config,
) -> Outcome {
    let t0 = Instant::now();
    let mut o = Outcome::new(kind.name());
    let dut = match KernelDut::new(kind, kopts.clone()) {
        Ok(d) => d,
        Err(e) => {
            o.reason = Some(format!("{e:#}"));
            return o;
        }
    };
    let rec = dut.record();
    match Runner::new(Box::new(dut), spec, ropts) {
        Err(e) => {
            let msg = e.to_string();
            if kind == Kind::Ovs && msg.contains("skipped: ") {
                o.status = "skipped";
                o.reason = Some(msg.split("skipped: ").nth(1).unwrap_or(&msg).to_string());
            } else {
                o.reason = Some(msg);
            }
        }
        Ok(mut runner) => {
            o.describe = runner.dut().describe();
            let mut s = Session::new(&mut runner, common, Progress::stderr());
            run_method(&mut s, method, steps, ndr_cfg, &mut o);
            s.progress.finish();
            let (total, _, invalid) = s.validity();
            o.trials_run = total;
            o.invalid_trials_used = invalid;
            o.trials = std::mem::take(&mut s.trials);
            // describe() again: the tester's backend is known once started.
            o.describe = runner.dut().describe();
            match runner.finish() {
                Ok(r) => o.dut_report = Some(r),
                Err(e) => o.reason = Some(format!("stopping: {e}")),
            }
            if o.reason.is_none() {
                o.status = "ok";
            }
        }
    }
    // The runner, its ports and the DUT are gone: check that no XDP program outlived them,
    // then remove the namespaces and check they went.
    o.teardown = verify_teardown(&rec);
    if !o.teardown.errors.is_empty() || !o.teardown.xdp_left.is_empty() {
        o.status = "failed";
        o.reason = Some(format!(
            "teardown: {}",
            o.teardown
                .errors
                .iter()
                .chain(o.teardown.xdp_left.iter().map(|x| x as &String))
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    o.seconds = t0.elapsed().as_secs_f64();
    o
}

fn verify_teardown(rec: &net::Shared) -> Teardown {
    let mut t = Teardown::default();
    let mut m = lock(rec);
    m.stop_procs(&mut t);
    t.processes_stopped = m.stopped.clone();
    let t0 = Instant::now();
    loop {
        let mut left = Vec::new();
        for ns in &m.namespaces {
            match net::xdp_attached(ns) {
                Ok(v) => left.extend(v),
                Err(e) => t.errors.push(format!("{e:#}")),
            }
        }
        if left.is_empty() || t0.elapsed() > Duration::from_secs(2) {
            t.xdp_left = left;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let names = m.namespaces.clone();
    m.teardown(&mut t);
    for n in names {
        if std::path::Path::new("/run/netns").join(&n).exists() {
            t.errors.push(format!("namespace {n} is still there after `ip netns del`"));
        }
    }
    t
}

fn run_method(
    s: &mut Session,
    method: Method,
    steps: &sweep::Steps,
    ndr_cfg: &ndrpdr::Config,
    o: &mut Outcome,
) {
    match method {
        Method::Max => {
            let reps = s.common.repetitions;
            s.progress.plan(reps, (s.common.duration + s.common.warmup).as_secs_f64());
            let load = Load {
                rate: Rate::Max,
                until: Until::Time(s.common.duration),
                warmup: s.common.warmup,
                burst: s.common.burst,
                retry_refused: true,
            };
            let idx: Vec<usize> = (0..reps).map(|r| s.run("max", 0, r, &load)).collect();
            headline(s, &idx, o);
            o.headline = format!(
                "mean forwarded rate of {reps} unpaced trials of {} s (offered load: all the generator could put out)",
                s.common.duration.as_secs_f64()
            );
            // One point: the mean (the repetitions of one load are not a curve).
            if let (Some(x), Some(y)) = (o.attempted_pps, o.forwarded_pps) {
                o.series = vec![(x, y)];
            }
            let sum = |f: fn(&tester::TrialResult) -> f64| {
                Summary::of(&idx.iter().map(|&i| f(s.trial(i))).collect::<Vec<_>>())
            };
            o.results = json!({
                "trials": idx,
                "forwarded": sum(|t| t.forwarded_pps),
                "attempted": sum(|t| t.attempted_pps),
                "loss": sum(|t| t.loss_ratio),
            });
        }
        Method::Sweep => {
            let res = sweep::run(s, steps);
            let best = res
                .steps
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.forwarded_pps.total_cmp(&b.1.forwarded_pps))
                .map(|(k, _)| k);
            if let Some(k) = best {
                let idx = res.steps[k].trials.clone();
                headline(s, &idx, o);
                o.ci99_pps = res.steps[k].ci99_pps;
                o.headline = format!(
                    "mean forwarded rate of the sweep step that forwarded most (step {k}, target {})",
                    fmt_rate(res.steps[k].target_pps)
                );
            }
            o.series = res.steps.iter().map(|x| (x.attempted_pps, x.forwarded_pps)).collect();
            o.steps_table = Some(steps_table(s, &res));
            o.results = json!(res);
        }
        Method::Ndr => {
            let res = ndrpdr::run(s, ndr_cfg);
            let idx = res.pdr.confirm.clone();
            headline(s, &idx, o);
            o.limited_by = None;
            o.headline = format!(
                "mean forwarded rate of the PDR ({} % loss) confirmation trials at {}; NDR {}",
                ndr_cfg.pdr_loss * 100.0,
                fmt_rate(res.pdr.rate_pps),
                fmt_rate(res.ndr.rate_pps)
            );
            o.series = s
                .trials
                .iter()
                .filter(|t| t.used && t.result.target_pps.is_some())
                .map(|t| (t.result.attempted_pps, t.result.forwarded_pps))
                .collect();
            o.results = json!(res);
        }
    }
}

/// Fills the headline figures from trials `idx`.
fn headline(s: &Session, idx: &[usize], o: &mut Outcome) {
    if idx.is_empty() {
        return;
    }
    let of = |f: &dyn Fn(&tester::TrialResult) -> f64| {
        Summary::of(&idx.iter().map(|&i| f(s.trial(i))).collect::<Vec<_>>())
    };
    let fwd = of(&|t| t.forwarded_pps);
    o.forwarded_pps = Some(fwd.mean);
    o.ci99_pps = fwd.ci99;
    o.attempted_pps = Some(of(&|t| t.attempted_pps).mean);
    o.loss_ratio = Some(of(&|t| t.loss_ratio).mean);
    let lat: Vec<_> = idx.iter().filter_map(|&i| s.trial(i).latency).collect();
    if !lat.is_empty() {
        o.p50_us = Some(lat.iter().map(|l| l.p50_us).sum::<f64>() / lat.len() as f64);
        o.p99_us = Some(lat.iter().map(|l| l.p99_us).sum::<f64>() / lat.len() as f64);
    }
    o.dut_counters = sum_counters(s, idx);
    o.limited_by = o.dut_counters.as_ref().map(|c| {
        let dut_drops: u64 =
            c.dropped.iter().filter(|(k, _)| k.as_str() != SINK_DROPS).map(|(_, n)| n).sum();
        if dut_drops == 0 {
            "generator"
        } else {
            "dut"
        }
    });
}

/// The sink's own ring overflowing: a loss of the tester, not the DUT's.
const SINK_DROPS: &str = "tester/ts.rx_dropped";

/// The DUT's counters summed over trials `idx` (warm-ups included).
fn sum_counters(s: &Session, idx: &[usize]) -> Option<tester::DutCounters> {
    let mut total: Option<tester::DutCounters> = None;
    for &i in idx {
        let Some(c) = &s.trial(i).dut else { continue };
        let t = total.get_or_insert_with(Default::default);
        t.received += c.received;
        t.forwarded += c.forwarded;
        for (k, v) in &c.dropped {
            *t.dropped.entry(k.clone()).or_insert(0) += v;
        }
    }
    total
}

/// "where=count, ..." for the largest drop counters.
fn drops_text(c: &Option<tester::DutCounters>, n: usize) -> String {
    let Some(c) = c else { return "-".into() };
    let mut v: Vec<(&String, &u64)> = c.dropped.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    if v.is_empty() {
        return "none".into();
    }
    v.iter().take(n).map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(", ")
}

/// Per sweep step: offered, forwarded and where the DUT dropped.
fn steps_table(s: &Session, res: &sweep::SweepResult) -> String {
    let mut t = Table::new(&[
        "target pps",
        "generated pps",
        "forwarded pps",
        "±99% CI",
        "loss",
        "DUT in",
        "DUT out",
        "DUT drops (where, summed over the step's trials incl. warm-up)",
    ]);
    for st in &res.steps {
        let c = sum_counters(s, &st.trials);
        t.row(vec![
            format!("{:.0}", st.target_pps),
            format!("{:.0}{}", st.attempted_pps, if st.reached_target { "" } else { "*" }),
            format!("{:.0}", st.forwarded_pps),
            st.ci99_pps.map_or("-".into(), |c| format!("{c:.0}")),
            format!("{:.3}%", st.loss_ratio * 100.0),
            c.as_ref().map_or("-".into(), |c| c.received.to_string()),
            c.as_ref().map_or("-".into(), |c| c.forwarded.to_string()),
            drops_text(&c, 4),
        ]);
    }
    t.render()
}

fn text_report(
    a: &PeersArgs,
    outcomes: &[Outcome],
    host: &Value,
    tester_placement: &str,
    plot: Option<&PathBuf>,
) -> String {
    let mut out = String::new();
    out += &format!(
        "routeplex test peers: {} method, {}-byte frames, {} flows, {} routes; {} s trials after {} s warm-up, {} repetitions, {} round(s) over the DUTs\n",
        format!("{:?}", a.method).to_lowercase(),
        a.frame_size,
        a.flows.unwrap_or_default(),
        a.routes.unwrap_or_default(),
        a.duration.unwrap_or_default(),
        a.warmup.unwrap_or_default(),
        a.repetitions.unwrap_or_default(),
        a.pairs.unwrap_or_default()
    );
    out += &format!(
        "host: {} CPUs ({}), kernel {}, load average {} before, {} after\n",
        host["cpus"],
        host["cpu_model"].as_str().unwrap_or("?"),
        host["kernel"].as_str().unwrap_or("?"),
        host["loadavg_before"].as_str().unwrap_or("?"),
        host["loadavg_after"].as_str().unwrap_or("?"),
    );
    out += &format!("tester: {tester_placement}\n\n");
    let mut t = Table::new(&[
        "DUT",
        "forwarded pps",
        "±99% CI",
        "× linux",
        "generated pps",
        "limit",
        "loss",
        "p50 µs",
        "p99 µs",
        "where the DUT dropped (top 3), or why not measured",
    ]);
    let opt = |v: Option<f64>, p: usize| v.map_or("-".into(), |v| format!("{v:.p$}"));
    for o in outcomes {
        if o.status != "ok" {
            let mut row = vec![o.dut.clone(), o.status.to_string()];
            row.extend(std::iter::repeat_n("-".to_string(), 7));
            row.push(o.reason.clone().unwrap_or_default());
            t.row(row);
            continue;
        }
        t.row(vec![
            o.dut.clone(),
            opt(o.forwarded_pps, 0),
            opt(o.ci99_pps, 0),
            opt(o.ratio_to_linux, 2),
            opt(o.attempted_pps, 0),
            o.limited_by.unwrap_or("-").to_string(),
            o.loss_ratio.map_or("-".into(), |l| format!("{:.2}%", l * 100.0)),
            opt(o.p50_us, 1),
            opt(o.p99_us, 1),
            drops_text(&o.dut_counters, 3),
        ]);
    }
    out += &t.render();
    if let Some(o) = outcomes.iter().find(|o| o.status == "ok") {
        out += &format!("forwarded pps: {}\n", o.headline);
    }
    if a.pairs.unwrap_or(1) > 1 {
        out += "rounds: each DUT's row is its round with the median forwarded rate; × linux is the median over the rounds of its rate over Linux's in the same round (below)\n";
    }
    if outcomes.iter().any(|o| o.limited_by.is_some()) {
        out += "limit: dut = the DUT's counters show drops (it was at capacity); generator = it dropped nothing, so it forwarded all the generator put out and its capacity is higher (the ratio is then a lower bound)\n";
    }
    for o in outcomes.iter().filter(|o| o.steps_table.is_some()) {
        out += &format!("\n{}: sweep steps\n", o.dut);
        out += o.steps_table.as_deref().unwrap_or("");
    }
    out += "\nplacement (what was steered, and what could not be):\n";
    for o in outcomes.iter().filter(|o| o.status == "ok") {
        for d in o.describe["placement"]["done"].as_array().into_iter().flatten() {
            out += &format!("  {}: {}\n", o.dut, d.as_str().unwrap_or(""));
        }
        for d in o.describe["placement"]["not_controlled"].as_array().into_iter().flatten() {
            out += &format!("  {}: not controlled: {}\n", o.dut, d.as_str().unwrap_or(""));
        }
        if let Some(b) = o.describe["tester_ports"].as_str() {
            out += &format!("  {}: tester ports: {b}\n", o.dut);
        }
    }
    // What a reader must know to read a DUT's figure (vm-linux: the guest ran under TCG).
    for o in outcomes.iter().filter(|o| o.status == "ok") {
        for n in o.describe["notes"].as_array().into_iter().flatten() {
            out += &format!("note: {}: {}\n", o.dut, n.as_str().unwrap_or(""));
        }
    }
    let invalid: usize = outcomes.iter().map(|o| o.invalid_trials_used).sum();
    if invalid > 0 {
        out += &format!("note: {invalid} trial(s) in the results had the tester stalled on every attempt (valid: false in --json / --csv)\n");
    }
    for o in outcomes.iter().filter(|o| o.pairs.is_some()) {
        out += &format!("\n{} against linux, round by round:\n", o.dut);
        for l in o.pairs.as_ref().map(|p| p.lines()).unwrap_or_default() {
            out += &format!("{l}\n");
        }
    }
    if let Some(p) = plot {
        out += &format!("plot: {}\n", p.display());
    }
    out
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or(String::new(), |s| s.trim().to_string())
}

/// The kernel DUT of `--dut NAME` for `sweep`, `rfc2544` and `ndr-pdr`: 256 routes, the
/// tester's ports on AF_XDP (else AF_PACKET), its work steered to `dut_cpu`.
pub fn single(
    a: &super::CommonArgs,
    dut_cpu: Option<usize>,
) -> Result<(Box<dyn tester::Dut>, String)> {
    if a.topology.is_some() || a.prefixes.is_some() {
        bail!("--topology and --prefixes are for the in-process routeplex DUT, not {}", a.dut);
    }
    if a.family != crate::Family::Ipv4 {
        bail!("--dut {}: the kernel DUTs route IPv4 only", a.dut);
    }
    let opts = Options { routes: 256, dut_cpu, tester_port: TesterPort::Auto };
    if let Some(n) = super::kernel_dut::parse_macvlan_vrs(&a.dut) {
        let n = n?;
        let d = super::kernel_dut::macvlan_vrs(n, opts)?;
        return Ok((
            Box::new(d),
            format!("{n} macvlan VRs sharing one ingress link, demultiplexed by MAC (classes vr1..vr{n}; what was steered: dut.placement in --json)"),
        ));
    }
    let kind = Kind::parse(&a.dut).with_context(|| format!("--dut {}: not a kernel DUT", a.dut))?;
    let d = KernelDut::new(kind, opts)?;
    Ok((Box::new(d), format!("{} (what was steered: dut.placement in --json)", kind.label())))
}

/// Whether `--dut NAME` is a kernel DUT ([`single`] builds it): a peer's name, or
/// `macvlan-vrs:N`.
pub fn is_kernel_dut(name: &str) -> bool {
    Kind::parse(name).is_some() || name.starts_with("macvlan-vrs:")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tester::pairs::Probes;

    fn round(dut: &str, status: &'static str, pps: Option<f64>) -> Round {
        let mut o = Outcome::new(dut);
        (o.status, o.forwarded_pps) = (status, pps);
        let p = Probes { memory_ns_per_read: 50.0, compute_ns_per_step: 1.5 };
        (o, p, None)
    }

    fn rounds(x: &[(&'static str, Option<f64>)]) -> Vec<Vec<Round>> {
        let linux = [1.0e6, 2.0e6, 1.0e6];
        x.iter()
            .zip(linux)
            .map(|(&(s, f), l)| vec![round("linux", "ok", Some(l)), round("x", s, f)])
            .collect()
    }

    #[test]
    fn a_dut_is_paired_with_linux_of_its_own_round() {
        // x forwards 2x, 1x, 3x linux of the same round: the median ratio is 2, though x's
        // median rate (3e6) over linux's (1e6) would say 3.
        let r = rounds(&[("ok", Some(2.0e6)), ("ok", Some(2.0e6)), ("ok", Some(3.0e6))]);
        let o = headlines(r, Some(0));
        assert_eq!((o[0].ratio_to_linux, o[0].forwarded_pps), (Some(1.0), Some(1.0e6)));
        assert_eq!(o[1].ratio_to_linux, Some(2.0));
        assert_eq!(o[1].forwarded_pps, Some(2.0e6), "the median round's outcome");
        let p = o[1].pairs.as_ref().expect("pairs");
        assert_eq!(p.pairs.iter().map(|p| p.ratio).collect::<Vec<_>>(), [2.0, 1.0, 3.0]);
        assert_eq!(o[1].rounds_forwarded_pps, [Some(2.0e6), Some(2.0e6), Some(3.0e6)]);
        assert!(o[0].pairs.is_none(), "linux is not paired with itself");
    }

    #[test]
    fn a_failed_round_is_the_headline_and_one_round_has_no_pairs() {
        let r = rounds(&[("ok", Some(2.0e6)), ("failed", None), ("ok", Some(3.0e6))]);
        let o = headlines(r, Some(0));
        assert_eq!((o[1].status, o[1].ratio_to_linux), ("failed", None));
        let o = headlines(rounds(&[("ok", Some(3.0e6))]), Some(0));
        assert_eq!((o[1].ratio_to_linux, o[1].pairs.is_none()), (Some(3.0), true));
        let o = headlines(rounds(&[("ok", Some(3.0e6))]), None);
        assert_eq!(o[1].ratio_to_linux, None, "no baseline measured, no ratio");
    }
}
