//! `routeplex test timeline FILE` (root): a failure timeline (see
//! `tester::scenario::timeline` for the file). The topology comes up in this process (hosts'
//! namespaces and veths, the VRs' control-plane namespaces, the data plane), BIRD or FRR starts in
//! each VR's namespace that the file names, and once every flow delivers (and `settle` more
//! seconds) time 0 starts: each flow's sender, a thread in its host's namespace, sends
//! sequence-numbered UDP probes at its rate; each receiver, a thread in the destination host's
//! namespace, marks what arrives. The main thread applies the events through the API's
//! commands at their times and keeps the control planes' routes synced into the VRs. Then the
//! outage arithmetic cuts each flow's probes at the times the actions were applied.
//!
//! Probes are 24-byte datagrams (`RPTL`, flow, sequence, send time) written into one stack
//! buffer; the send times and the arrival marks live in vectors sized for the whole run
//! before time 0, so no probe allocates.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{bail, format_err, Context, Result};
use control::api::Command as Api;
use control::model::ImpairDoc;
use control::netns::Made;
use control::runtime::{Idle, Options};
use control::{Node, Topology};
use serde_json::{json, Value};
use tester::scenario::timeline::{outages, ActionKind, Timeline, Window};

use super::timeline_daemons::Daemons;

/// Options of `routeplex test timeline`.
#[derive(clap::Args)]
pub struct TimelineArgs {
    /// The timeline scenario (`kind: timeline`, e.g. examples/scenarios/ospf-square.yaml).
    file: PathBuf,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// The UDP port of flow 0's receiver; flow i listens on `PORT + i`.
const PORT: u16 = 47_000;
const MAGIC: [u8; 4] = *b"RPTL";
/// The sequence number of the probes sent before time 0 (is the flow delivering yet?).
const WARM: u64 = u64::MAX;
const PROBE_LEN: usize = 24;
/// A probe sent less than this before an action was on its way when it happened and counts
/// in the action's window (see `tester::scenario::timeline::outages`).
const IN_FLIGHT: Duration = Duration::from_millis(50);
/// How long receivers wait for late probes after the last was sent.
const DRAIN: Duration = Duration::from_millis(500);

/// An action that took this long (ms) is named in the text report.
const SLOW_ACTION_MS: f64 = 50.0;

const PHASE_WARM: u8 = 0;
const PHASE_RUN: u8 = 1;
const PHASE_STOP: u8 = 2;

/// Runs the timeline and prints its report.
pub fn run(a: TimelineArgs) -> Result<()> {
    run_file(&a.file, a.json)
}

/// Whether `file` is a timeline scenario (`kind: timeline`), which `routeplex test scenario`
/// hands here.
pub fn is_timeline_file(file: &std::path::Path) -> bool {
    yamlpath::read_file(file, tester::scenario::MAX_SCENARIO_BYTES)
        .is_ok_and(|t| tester::scenario::timeline::is_timeline(&t))
}

/// Runs the timeline in `file` and prints its report (JSON with `json`).
pub fn run_file(file: &std::path::Path, json: bool) -> Result<()> {
    let tl = Timeline::load(file).map_err(|e| format_err!("{e}"))?;
    if control::sys::euid() != 0 {
        bail!("routeplex test timeline needs root (network namespaces, veth, taps)");
    }
    let report = execute(&tl)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(())
}

/// What the run made, undone when dropped (pass or fail): daemons killed, the data plane
/// stopped, namespaces and veths removed, the run's directory deleted.
struct Lab {
    made: Made,
    daemons: Daemons,
    node: Option<Node>,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The daemons first: they hold the namespaces' taps.
        self.daemons = Daemons::new(&self.dir, &[]);
        if let Some(n) = self.node.take() {
            let _ = n.stop();
        }
        for e in control::netns::remove(&self.made) {
            eprintln!("cleanup: {e}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Lab {
    fn node(&mut self) -> &mut Node {
        self.node.as_mut().expect("started")
    }

    /// The last lines of every daemon's log, for an error.
    fn logs(&self) -> String {
        self.daemons.logs()
    }
}

/// What every probe thread reads: the phase and time 0.
struct Shared {
    phase: AtomicU8,
    t0: OnceLock<Instant>,
}

fn execute(tl: &Timeline) -> Result<Value> {
    let topo = Topology::load(&tl.topology).map_err(|e| format_err!("{e}"))?;
    check(tl, &topo)?;
    let dir = std::env::temp_dir().join(format!("routeplex-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let daemons = Daemons::new(&dir, &tl.daemons);
    let mut lab = Lab { made: Made::default(), daemons, node: None, dir };
    control::netns::make(&topo, &mut lab.made).map_err(|e| format_err!("{e}"))?;
    let mut o = Options::new(1);
    o.idle = Idle::Adaptive;
    let mut node = Node::start(topo.clone(), o, 64).map_err(|e| format_err!("{e}"))?;
    // The `impair` events edit the topology's text (as `apply` would).
    let text =
        std::fs::read_to_string(&tl.topology).with_context(|| tl.topology.display().to_string())?;
    node.set_source(text, tl.topology.display().to_string());
    lab.node = Some(node);
    lab.daemons.start_all(&topo)?;

    let shared = Arc::new(Shared { phase: AtomicU8::new(PHASE_WARM), t0: OnceLock::new() });
    let (mut senders, mut receivers, mut warms) = (Vec::new(), Vec::new(), Vec::new());
    for (i, f) in tl.flows.iter().enumerate() {
        let to_host = host_of(&topo, f.to).expect("checked");
        let n = (f.rate as f64 * tl.duration).ceil() as usize;
        let port = PORT + i as u16;
        let warm = Arc::new(AtomicBool::new(false));
        receivers.push(receiver(to_host, f.to, port, i as u32, n, shared.clone(), warm.clone()));
        senders.push(sender(f.from.clone(), f.to, port, i as u32, f.rate, n, shared.clone()));
        warms.push(warm);
    }
    let stop_all = |shared: &Shared| shared.phase.store(PHASE_STOP, Ordering::Release);

    // Convergence: every flow delivers its warm-up probes.
    let begin = Instant::now();
    while !warms.iter().all(|w| w.load(Ordering::Acquire)) {
        // A probe thread that ended before time 0 failed (a namespace, a socket): say why.
        if let Some(k) = senders.iter().position(JoinHandle::is_finished) {
            stop_all(&shared);
            let e = senders.swap_remove(k).join().map(|r| r.err());
            bail!("flow {}'s sender: {:?}", tl.flows[k].name, e.ok().flatten());
        }
        if let Some(k) = receivers.iter().position(JoinHandle::is_finished) {
            stop_all(&shared);
            let e = receivers.swap_remove(k).join().map(|r| r.err());
            bail!("flow {}'s receiver: {:?}", tl.flows[k].name, e.ok().flatten());
        }
        if begin.elapsed().as_secs_f64() > tl.converge {
            stop_all(&shared);
            let waiting: Vec<&str> = tl
                .flows
                .iter()
                .zip(&warms)
                .filter(|(_, w)| !w.load(Ordering::Acquire))
                .map(|(f, _)| f.name.as_str())
                .collect();
            bail!(
                "flows {} delivered nothing within converge: {} s\n{}",
                waiting.join(", "),
                tl.converge,
                lab.logs()
            );
        }
        sync_for(lab.node(), Duration::from_millis(20));
    }
    let converged_s = begin.elapsed().as_secs_f64();
    sync_for(lab.node(), Duration::from_secs_f64(tl.settle));

    // Time 0: probes, and the events at their times.
    let t0 = Instant::now();
    let _ = shared.t0.set(t0);
    shared.phase.store(PHASE_RUN, Ordering::Release);
    let mut applied_ns = Vec::with_capacity(tl.actions.len());
    let mut took_ns = Vec::with_capacity(tl.actions.len());
    let mut results = Vec::with_capacity(tl.actions.len());
    let end = Duration::from_secs_f64(tl.duration);
    let mut next = 0;
    let mut pace = Pace::new(t0);
    while next < tl.actions.len() || t0.elapsed() < end {
        while next < tl.actions.len() && t0.elapsed().as_secs_f64() >= tl.actions[next].at {
            let at = t0.elapsed();
            applied_ns.push(at.as_nanos() as u64);
            let r = apply(&mut lab, &tl.actions[next].what);
            took_ns.push((t0.elapsed() - at).as_nanos() as u64);
            results.push(r.unwrap_or_else(|e| json!({ "error": e.to_string() })));
            next += 1;
        }
        node_sync(lab.node(), &mut pace);
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut sent = Vec::new();
    // Senders end by themselves after their last probe.
    for s in senders {
        sent.push(s.join().map_err(|_| format_err!("a sender panicked"))?);
    }
    sync_for(lab.node(), DRAIN);
    stop_all(&shared);
    let mut got = Vec::new();
    for r in receivers {
        got.push(r.join().map_err(|_| format_err!("a receiver panicked"))?);
    }
    let sent: Vec<Vec<u64>> = sent.into_iter().collect::<Result<_>>()?;
    let got: Vec<(Vec<bool>, u64)> = got.into_iter().collect::<Result<_>>()?;
    let status = serde_json::to_value(lab.node().status().map_err(|e| format_err!("{e}"))?)?;
    let run = Run { converged_s, applied_ns, took_ns, results, pace: pace.json() };
    Ok(report(tl, &run, &sent, &got, &status))
}

/// Refuses a timeline whose names the topology lacks, before anything is made.
fn check(tl: &Timeline, topo: &Topology) -> Result<()> {
    let err =
        |p: &tester::scenario::timeline::Place, m: String| format_err!("{}", p.error(&tl.file, m));
    let vr = |name: &str| topo.vrs.iter().find(|v| v.name == name);
    for d in &tl.daemons {
        let Some(v) = topo.vr_index(&d.vr) else {
            return Err(err(&d.at, format!("no VR {:?} in {}", d.vr, tl.topology.display())));
        };
        if topo.control_plane(v).is_none() {
            return Err(err(
                &d.at,
                format!("VR {:?} has no control_plane (linux) to run a daemon in", d.vr),
            ));
        }
        if !d.config.is_file() {
            return Err(err(&d.at, format!("no file {}", d.config.display())));
        }
    }
    for f in &tl.flows {
        if !topo.hosts.iter().any(|h| h.name == f.from) {
            return Err(err(&f.at, format!("no host {:?} in the topology", f.from)));
        }
        if host_of(topo, f.to).is_none() {
            return Err(err(&f.at, format!("no host of the topology has address {}", f.to)));
        }
    }
    for a in &tl.actions {
        match &a.what {
            ActionKind::Link { vr: name, interface, .. } => {
                let Some(v) = vr(name) else {
                    return Err(err(&a.place, format!("no VR {name:?} in the topology")));
                };
                if !v.interfaces.iter().any(|i| &i.name == interface) {
                    return Err(err(
                        &a.place,
                        format!("VR {name:?} has no interface {interface:?}"),
                    ));
                }
            }
            ActionKind::Vr { vr: name, .. } if vr(name).is_none() => {
                return Err(err(&a.place, format!("no VR {name:?} in the topology")));
            }
            ActionKind::DaemonKill { vr } | ActionKind::DaemonStart { vr }
                if !tl.daemons.iter().any(|d| &d.vr == vr) =>
            {
                return Err(err(&a.place, format!("VR {vr:?} runs no daemon (daemons:)")));
            }
            ActionKind::Impair { port, set } => {
                if !topo.ports.iter().any(|p| &p.name == port) {
                    return Err(err(&a.place, format!("no port {port:?} in the topology")));
                }
                if let Some(s) = set {
                    serde_json::from_value::<ImpairDoc>(s.clone())
                        .map_err(|e| err(&a.place, format!("impair: {e}")))?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The host (namespace) that has address `a`.
fn host_of(topo: &Topology, a: IpAddr) -> Option<String> {
    topo.hosts.iter().find(|h| h.addresses.iter().any(|n| n.addr() == a)).map(|h| h.name.clone())
}

/// Keeps the control planes' routes flowing into the VRs for `d`.
fn sync_for(node: &mut Node, d: Duration) {
    let end = Instant::now() + d;
    loop {
        node.sync_control_planes();
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(2)));
    }
}

/// How steadily the runner kept the control planes' routes flowing from time 0: the longest
/// time between two sync passes and when it ended. An action that blocks, or a machine that
/// keeps the runner off its CPU, holds every route change back that long.
struct Pace {
    t0: Instant,
    last: Instant,
    longest: Duration,
    ended: Duration,
}

impl Pace {
    fn new(t0: Instant) -> Pace {
        Pace { t0, last: t0, longest: Duration::ZERO, ended: Duration::ZERO }
    }

    fn json(&self) -> Value {
        json!({
            "longest_sync_gap_ms": self.longest.as_secs_f64() * 1e3,
            "ended_ms": self.ended.as_secs_f64() * 1e3,
        })
    }
}

/// One sync pass, timed into `pace`.
fn node_sync(node: &mut Node, pace: &mut Pace) {
    node.sync_control_planes();
    let now = Instant::now();
    if now - pace.last > pace.longest {
        pace.longest = now - pace.last;
        pace.ended = now - pace.t0;
    }
    pace.last = now;
}

/// Applies one action through the API's commands (killing a daemon is the runner's own).
fn apply(lab: &mut Lab, what: &ActionKind) -> Result<Value> {
    let set = |vr: &str, interface: &str, up: bool| Api::InterfaceSet {
        vr: vr.to_string(),
        interface: interface.to_string(),
        mtu: None,
        up: Some(up),
        addresses: None,
    };
    let node = lab.node();
    let out = match what {
        ActionKind::Link { vr, interface, up } => node.execute(set(vr, interface, *up)),
        ActionKind::Vr { vr, up } => {
            let names: Vec<String> = node
                .topology()
                .vrs
                .iter()
                .filter(|v| &v.name == vr)
                .flat_map(|v| v.interfaces.iter().map(|i| i.name.clone()))
                .collect();
            let mut done = Vec::new();
            for i in &names {
                done.push(node.execute(set(vr, i, *up)).map_err(|e| format_err!("{e}"))?);
            }
            return Ok(serde_json::to_value(done)?);
        }
        ActionKind::Impair { port, set } => {
            let impair = set.as_ref().map(|s| serde_json::from_value::<ImpairDoc>(s.clone()));
            let impair = impair.transpose()?.map(Box::new);
            node.execute(Api::Impair { port: port.clone(), impair })
        }
        ActionKind::DaemonKill { vr } => {
            let pid = lab.daemons.kill(vr)?;
            return Ok(json!({ "killed": vr, "pid": pid }));
        }
        ActionKind::DaemonStart { vr } => {
            let topo = node.topology().clone();
            let pid = lab.daemons.restart(&topo, vr)?;
            return Ok(json!({ "started": vr, "pid": pid }));
        }
    };
    Ok(serde_json::to_value(out.map_err(|e| format_err!("{e}"))?)?)
}

fn bind_any(to: IpAddr, port: u16) -> std::io::Result<UdpSocket> {
    let any: IpAddr = match to {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    UdpSocket::bind(SocketAddr::new(any, port))
}

/// Flow `flow`'s sender in host `from`'s namespace: warm-up probes every 10 ms until time 0,
/// then `n` probes at `rate`, each probe's send time (ns from time 0) recorded.
fn sender(
    from: String,
    to: IpAddr,
    port: u16,
    flow: u32,
    rate: u64,
    n: usize,
    shared: Arc<Shared>,
) -> JoinHandle<Result<Vec<u64>>> {
    std::thread::spawn(move || {
        control::sys::enter_netns(&from).with_context(|| format!("namespace {from}"))?;
        let sock = bind_any(to, 0)?;
        let dst = SocketAddr::new(to, port);
        let mut sent = Vec::with_capacity(n);
        let mut buf = [0u8; PROBE_LEN];
        buf[..4].copy_from_slice(&MAGIC);
        buf[4..8].copy_from_slice(&flow.to_be_bytes());
        while shared.phase.load(Ordering::Acquire) == PHASE_WARM {
            buf[8..16].copy_from_slice(&WARM.to_be_bytes());
            // A refused send (no route yet) is what the warm-up waits out.
            let _ = sock.send_to(&buf, dst);
            std::thread::sleep(Duration::from_millis(10));
        }
        let Some(&t0) = shared.t0.get() else { return Ok(sent) };
        let interval_ns = 1e9 / rate as f64;
        for seq in 0..n as u64 {
            if shared.phase.load(Ordering::Acquire) == PHASE_STOP {
                break;
            }
            let due = t0 + Duration::from_nanos((seq as f64 * interval_ns) as u64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let at = t0.elapsed().as_nanos() as u64;
            buf[8..16].copy_from_slice(&seq.to_be_bytes());
            buf[16..24].copy_from_slice(&at.to_be_bytes());
            // A probe the host refuses (no route, no buffer) is sent and lost: it counts.
            let _ = sock.send_to(&buf, dst);
            sent.push(at);
        }
        Ok(sent)
    })
}

/// Flow `flow`'s receiver in host `ns`'s namespace: marks probe `seq` arrived; sets `warm`
/// at the first warm-up probe; returns the marks and the datagrams it could not place
/// (another flow's, a sequence past the run, not a probe).
fn receiver(
    ns: String,
    to: IpAddr,
    port: u16,
    flow: u32,
    n: usize,
    shared: Arc<Shared>,
    warm: Arc<AtomicBool>,
) -> JoinHandle<Result<(Vec<bool>, u64)>> {
    std::thread::spawn(move || {
        control::sys::enter_netns(&ns).with_context(|| format!("namespace {ns}"))?;
        let sock = bind_any(to, port)?;
        sock.set_read_timeout(Some(Duration::from_millis(20)))?;
        let mut got = vec![false; n];
        let mut stray = 0u64;
        let mut buf = [0u8; 64];
        while shared.phase.load(Ordering::Acquire) != PHASE_STOP {
            let len = match sock.recv(&mut buf) {
                Ok(l) => l,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e.into()),
            };
            let ok = len == PROBE_LEN && buf[..4] == MAGIC && buf[4..8] == flow.to_be_bytes();
            let seq = u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes"));
            match usize::try_from(seq) {
                _ if !ok => stray += 1,
                _ if seq == WARM => warm.store(true, Ordering::Release),
                Ok(i) if i < n => got[i] = true,
                _ => stray += 1,
            }
        }
        Ok((got, stray))
    })
}

/// What the main thread recorded of the run.
struct Run {
    converged_s: f64,
    /// When each action began and how long it took (ns from time 0).
    applied_ns: Vec<u64>,
    took_ns: Vec<u64>,
    results: Vec<Value>,
    pace: Value,
}

/// The report: per flow its totals, per window (before the first event, then one per action)
/// what each flow saw.
fn report(
    tl: &Timeline,
    run: &Run,
    sent: &[Vec<u64>],
    got: &[(Vec<bool>, u64)],
    status: &Value,
) -> Value {
    let end_ns = (tl.duration * 1e9) as u64;
    let per_flow: Vec<Vec<Window>> = sent
        .iter()
        .zip(got)
        .map(|(s, (g, _))| {
            let in_flight = IN_FLIGHT.as_nanos() as u64;
            outages(s, &g[..s.len().min(g.len())], &run.applied_ns, end_ns, in_flight)
        })
        .collect();
    let flows: Vec<Value> = tl
        .flows
        .iter()
        .zip(sent.iter().zip(got))
        .map(|(f, (s, (g, stray)))| {
            let received = g[..s.len().min(g.len())].iter().filter(|&&r| r).count();
            json!({
                "name": f.name, "from": f.from, "to": f.to, "rate": f.rate,
                "sent": s.len(), "received": received, "lost": s.len() - received,
                "stray": stray,
            })
        })
        .collect();
    let window = |w: usize| -> Value {
        tl.flows.iter().zip(&per_flow).map(|(f, ws)| (f.name.clone(), json!(ws[w]))).collect()
    };
    let events: Vec<Value> = tl
        .actions
        .iter()
        .enumerate()
        .map(|(k, a)| {
            json!({
                "event": a.event,
                "action": a.what.label(),
                "at_s": a.at,
                "applied_ms": run.applied_ns[k] as f64 / 1e6,
                "took_ms": run.took_ns[k] as f64 / 1e6,
                "result": run.results[k],
                "flows": window(k + 1),
            })
        })
        .collect();
    json!({
        "name": tl.name,
        "title": tl.title,
        "file": tl.file,
        "about": tl.about,
        "timers": tl.timers,
        "converged_s": run.converged_s,
        "settle_s": tl.settle,
        "runner": run.pace,
        "duration_s": tl.duration,
        "in_flight_ms": IN_FLIGHT.as_millis() as u64,
        "flows": flows,
        "before_events": window(0),
        "events": events,
        "vrs": status["vrs"].as_array().map(|vs| vs.iter().map(|v| json!({
            "name": v["name"], "counters": v["counters"],
        })).collect::<Vec<_>>()),
    })
}

fn text(r: &Value) -> String {
    let mut s =
        format!("{} — {}\n", r["name"].as_str().unwrap_or(""), r["title"].as_str().unwrap_or(""));
    if let Some(t) = r["timers"].as_object().filter(|t| !t.is_empty()) {
        let t: Vec<String> =
            t.iter().map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or(""))).collect();
        s += &format!("timers: {}\n", t.join(", "));
    }
    s += &format!(
        "converged after {:.1} s, then {} s settle; {} s of probes\n\nflows:\n",
        r["converged_s"].as_f64().unwrap_or(0.0),
        r["settle_s"],
        r["duration_s"]
    );
    for f in r["flows"].as_array().into_iter().flatten() {
        s += &format!(
            "  {:<12} {} -> {} at {}/s: sent {}, received {}, lost {}\n",
            f["name"].as_str().unwrap_or(""),
            f["from"].as_str().unwrap_or(""),
            f["to"].as_str().unwrap_or(""),
            f["rate"],
            f["sent"],
            f["received"],
            f["lost"]
        );
    }
    let ms = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    s += &format!(
        "\n{:>9}  {:<22} {:<12} {:>7} {:>6} {:>5} {:>10} {:>10} {:>9}\n",
        "at (ms)", "event", "flow", "sent", "lost", "gaps", "outage ms", "back (ms)", "recovered"
    );
    let row = |at: &str, what: &str, flows: &Value| {
        let mut s = String::new();
        for (name, w) in flows.as_object().into_iter().flatten() {
            s += &format!(
                "{:>9}  {:<22} {:<12} {:>7} {:>6} {:>5} {:>10} {:>10} {:>9}\n",
                at,
                what,
                name,
                w["sent"].to_string(),
                w["lost"].to_string(),
                w["gaps"].to_string(),
                ms(&w["outage_ms"]),
                ms(&w["back_ms"]),
                if w["recovered"].as_bool() == Some(true) { "yes" } else { "NO" }
            );
        }
        s
    };
    s += &row("0", "(before events)", &r["before_events"]);
    for e in r["events"].as_array().into_iter().flatten() {
        s += &row(&ms(&e["applied_ms"]), e["action"].as_str().unwrap_or(""), &e["flows"]);
        if let Some(err) = e["result"]["error"].as_str() {
            s += &format!("           the action failed: {err}\n");
        }
        // Most take a few milliseconds; a slow one delayed what it did and held route sync back.
        if e["took_ms"].as_f64().is_some_and(|t| t >= SLOW_ACTION_MS) {
            s += &format!("           the action took {} ms\n", ms(&e["took_ms"]));
        }
    }
    s += &format!(
        "\ntimes in ms from the event; a probe sent up to {} ms before an event counts in its \
         window; back: the first probe delivered after the last loss\n",
        r["in_flight_ms"]
    );
    s += &format!(
        "the runner synced the control planes' routes at most {} ms apart (until {} ms)\n",
        ms(&r["runner"]["longest_sync_gap_ms"]),
        ms(&r["runner"]["ended_ms"])
    );
    s
}
