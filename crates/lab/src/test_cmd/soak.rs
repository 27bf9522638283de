//! `routeplex test soak --minutes N` (root): traffic through several VRs while everything
//! changes, the data planes' resources sampled, failing on growth or on a frame lost where
//! none may be.
//!
//! The lab is the migration lab's (`migration::Lab`: data planes s and d in namespaces joined
//! by a migration link, hosts a and b, one bridge) with a second port at s. Four VRs start at
//! s: `r1` on port `seg` (it migrates, and s and d both have a `seg`), `r2`..`r4` on `seg2`.
//! VR k (0-based) routes 10.(70+k).1.0/24 (host a) to 10.(70+k).2.0/24 (host b). Host a sends
//! one sequence-numbered UDP flow through each VR to host b the whole time, and one more
//! through `r2` to 10.99.0.2, whose route (10.99.0.0/24) the soak deletes and adds again.
//!
//! On a seeded schedule (each round does every activity once, in a shuffled order): route
//! batches added to and deleted from a VR through the control API; `apply` of s's topology
//! with an extra address on `r3` or an extra VR `x` toggled; `r1` migrated to the other data
//! plane (`routeplex migrate`, the migration lab's code); a capture started, read and
//! stopped; a flood of UDP to random unresolved addresses of a VR's connected /24 started for
//! a few seconds (neighbour resolution on every frame); the churned flow's route flipped.
//!
//! Every `--sample-secs` the daemons' RSS, open descriptors and threads are read from /proc.
//! Growth is judged on the two daemons together (`r1` and its port are at one or the other,
//! so each one alone steps up and down as it moves), after a warm-up, by [`GROWTH`]'s rules.
//! A lost frame is expected only on the flow its activity touches and while it lasts: on
//! `r1`'s flow from a migration's start to [`MIGRATION_TAIL`] after it returned, on the
//! churned flow from its route's delete to [`FLIP_TAIL`] after the add; floods lose their own
//! frames by design and are not flows. Any other lost frame fails the soak.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::migration::{in_netns, udp_errors, Lab, LINK, MIGRATION_PORT, SECRET};

/// How long after a migration returned a frame of `r1`'s flow may still be missing: the
/// source drains for up to 1 s after the commit (docs/api.md, `migrate`), and the
/// `routeplex migrate` process returns at the commit.
const MIGRATION_TAIL: Duration = Duration::from_millis(1500);
/// How long after the churned route's add returned a frame may still be missing (the add
/// is published to the worker after the reply).
const FLIP_TAIL: Duration = Duration::from_millis(300);
/// UDP port of the flows at host b.
const SINK_PORT: u16 = 7000;
/// Flows and the VRs they cross: the flow's source and destination at hosts a and b.
const VRS: usize = 4;
/// Frames per flow at most (`--rate` times the run is checked against it): the generator
/// keeps 4 bytes and the sink 1 per frame. A sequence number past it is ignored.
const MAX_SEQ: u64 = 1 << 25;
/// Activity failures kept for the report (the rest only counted).
const MAX_ERRORS: usize = 100;
/// The data planes, by index (the migration lab's namespaces).
const PLANE_NAMES: [&str; 2] = ["s", "d"];
/// Frames sent this long before an activity started may still be in a ring when it takes
/// effect, so they may be lost by it too.
const LEAD: u64 = 200;
/// Routes per VR the churn keeps at most (oldest batch deleted first).
const CHURN_BATCHES: usize = 4;
const CHURN_MAX_BATCH: usize = 500;
/// Flood rate and length.
const FLOOD_PPS: u64 = 2000;
const FLOOD_FOR: Duration = Duration::from_secs(3);

/// The growth rules, on both daemons together, over the samples after the warm-up (the
/// longer of 20 s and a tenth of the run). Why these bounds: the data plane makes its
/// buffers at start and per port; moving `r1` closes and opens a port and its rings and
/// builds and frees a VR, and the allocator keeps some of what was freed, so RSS steps by a
/// few MiB whichever way without growing; 16 MiB is room for that in a short run, and
/// 32 MiB/hour (770 MiB a day) is a leak in a long one. Descriptors and threads are fixed
/// per port, VR and worker; API clients, migrations and captures open some for a moment, so
/// the minimum over a third of the run is the steady count, and the last third's above the
/// first's by more than a port's worth is a leak.
pub const GROWTH: Growth =
    Growth { rss_floor_mib: 16.0, rss_mib_per_hour: 32.0, fds: 4, threads: 2 };

/// See [`GROWTH`].
pub struct Growth {
    pub rss_floor_mib: f64,
    pub rss_mib_per_hour: f64,
    pub fds: i64,
    pub threads: i64,
}

/// `routeplex test soak`.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// Minutes of activity (0.2..=1440), after the lab is up.
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Seed of the schedule (order of activities, VRs, batch sizes, flood targets).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds between two samples of the daemons' resources (1..=60).
    #[arg(long, default_value_t = 2.0)]
    pub sample_secs: f64,
    /// Packets per second of each flow (10..=5000).
    #[arg(long, default_value_t = 200)]
    pub rate: u64,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// A small seeded generator (splitmix64): the schedule only needs to be reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The activities, each once a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Activity {
    RouteBatch,
    Apply,
    Migrate,
    Capture,
    Flood,
    RouteFlip,
}

const ACTIVITIES: [Activity; 6] = [
    Activity::RouteBatch,
    Activity::Apply,
    Activity::Migrate,
    Activity::Capture,
    Activity::Flood,
    Activity::RouteFlip,
];

/// The activities in the order of round `round`'s shuffle.
fn round(rng: &mut Rng) -> [Activity; 6] {
    let mut a = ACTIVITIES;
    for i in (1..a.len()).rev() {
        a.swap(i, rng.below(i as u64 + 1) as usize);
    }
    a
}

fn vr_name(k: usize) -> String {
    format!("r{}", k + 1)
}

/// VR k's interfaces on s's topology (`extra`: r3's extra address).
fn vr_yaml(k: usize, extra: bool) -> String {
    let net = 70 + k;
    let port = if k == 0 { "seg" } else { "seg2" };
    let more = if extra { ", 10.72.9.1/24" } else { "" };
    format!(
        "  - name: {}\n    interfaces:\n      - {{ name: e1, port: {port}, mac: \"02:00:00:00:{net}:01\", addresses: [10.{net}.1.1/24{more}] }}\n      - {{ name: e2, port: {port}, mac: \"02:00:00:00:{net}:02\", addresses: [10.{net}.2.1/24] }}\n",
        vr_name(k)
    )
}

/// What s's topology holds now.
#[derive(Clone, Copy, Default)]
struct Shape {
    r1_at_d: bool,
    extra_address: bool,
    vr_x: bool,
}

/// Data plane s's topology for `shape`; d's is empty but for the migration listener.
fn topology(plane: usize, shape: Shape) -> String {
    let mut y = format!(
        "workers: 1\nmigration: {{ listen: {}:{MIGRATION_PORT}, secret: {SECRET}, peers: [{}] }}\n",
        LINK[plane],
        LINK[1 - plane]
    );
    if plane == 1 {
        return y;
    }
    y += "ports:\n";
    if !shape.r1_at_d {
        y += "  - { name: seg, kind: afpacket, interface: seg }\n";
    }
    y += "  - { name: seg2, kind: afpacket, interface: seg2 }\nvrs:\n";
    for k in 0..VRS {
        if k == 0 && shape.r1_at_d {
            continue;
        }
        y += &vr_yaml(k, k == 2 && shape.extra_address);
    }
    if shape.vr_x {
        y += "  - name: x\n    interfaces:\n      - { name: e1, port: seg2, mac: \"02:00:00:00:79:01\", addresses: [10.79.1.1/24] }\n";
    }
    y
}

/// One request on a data plane's control socket; its `ok` value.
fn api(state: &Path, cmd: &str, args: Value) -> Result<Value> {
    let sock = state.join("control.sock");
    let mut c = UnixStream::connect(&sock).with_context(|| sock.display().to_string())?;
    c.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = json!({ "v": 1, "id": 1, "cmd": cmd });
    // A command without arguments (`status`) takes none, not an empty map.
    if !args.is_null() {
        req["args"] = args;
    }
    writeln!(c, "{req}")?;
    let mut line = String::new();
    // A capture read of 256 frames is well under this.
    BufReader::new(&c).take(64 << 20).read_line(&mut line)?;
    let v: Value = serde_json::from_str(&line).with_context(|| format!("{cmd}: reply {line:?}"))?;
    if let Some(e) = v.get("err") {
        bail!("{cmd}: {} ({})", e["msg"].as_str().unwrap_or_default(), e["code"]);
    }
    Ok(v["ok"].clone())
}

/// A flow from host a to host b.
#[derive(Clone, Debug)]
struct Flow {
    name: String,
    vr: usize,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    /// What may lose its frames, by design.
    expected: &'static str,
}

fn flows() -> Vec<Flow> {
    let mut f: Vec<Flow> = (0..VRS)
        .map(|k| Flow {
            name: format!("{} connected", vr_name(k)),
            vr: k,
            src: Ipv4Addr::new(10, 70 + k as u8, 1, 2),
            dst: Ipv4Addr::new(10, 70 + k as u8, 2, 2),
            expected: if k == 0 { "migration handoff" } else { "none" },
        })
        .collect();
    f.push(Flow {
        name: "r2 churned route".into(),
        vr: 1,
        src: Ipv4Addr::new(10, 71, 1, 2),
        dst: Ipv4Addr::new(10, 99, 0, 2),
        expected: "its route deleted on purpose",
    });
    f
}

/// The lab's hosts: an address, a route per VR, and the churned flow's destination.
fn hosts(lab: &Lab) -> Result<()> {
    let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
    let (s, w) = (lab.ns("s"), lab.ns("w"));
    super::migration::ok(&[
        "ip", "link", "add", "rsmq", "netns", &s, "type", "veth", "peer", "name", "ps2", "netns",
        &w,
    ])?;
    lab.nsx("s", &["ip", "link", "set", "rsmq", "name", "seg2"])?;
    lab.nsx("s", &["ip", "link", "set", "seg2", "up"])?;
    lab.nsx("w", &["ip", "link", "set", "ps2", "master", "br0", "up"])?;
    lab.nsx("s", &[&["ethtool", "-K", "seg2"][..], &off].concat())?;
    lab.nsx("w", &[&["ethtool", "-K", "ps2"][..], &off].concat())?;
    for k in 1..VRS {
        let n = 70 + k;
        lab.nsx("a", &["ip", "addr", "add", &format!("10.{n}.1.2/24"), "dev", "eth0"])?;
        lab.nsx(
            "a",
            &["ip", "route", "add", &format!("10.{n}.2.0/24"), "via", &format!("10.{n}.1.1")],
        )?;
        lab.nsx("b", &["ip", "addr", "add", &format!("10.{n}.2.2/24"), "dev", "eth0"])?;
        lab.nsx(
            "b",
            &["ip", "route", "add", &format!("10.{n}.1.0/24"), "via", &format!("10.{n}.2.1")],
        )?;
    }
    lab.nsx("a", &["ip", "route", "add", "10.99.0.0/24", "via", "10.71.1.1"])?;
    lab.nsx("b", &["ip", "addr", "add", "10.99.0.2/32", "dev", "eth0"])?;
    Ok(())
}

/// Waits until every VR forwards host a's pings to host b.
fn warm_up(lab: &Lab) -> Result<()> {
    let t0 = Instant::now();
    for k in 0..VRS {
        let (src, dst) = (format!("10.{}.1.2", 70 + k), format!("10.{}.2.2", 70 + k));
        let a = lab.ns("a");
        while !std::process::Command::new("ip")
            .args(["netns", "exec", &a, "ping", "-c1", "-W1", "-I", &src, &dst])
            .output()?
            .status
            .success()
        {
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("no path through {}: {}", vr_name(k), lab.log("s"));
            }
        }
    }
    Ok(())
}

/// When each flow's frames were sent (ms since the soak's start), by sequence number.
type Sent = Vec<Vec<u32>>;

fn generator(
    lab: &Lab,
    flows: &[Flow],
    rate: u64,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Result<Sent>> {
    let flows = flows.to_vec();
    in_netns(&lab.ns("a"), move || {
        let socks: Vec<UdpSocket> = flows
            .iter()
            .map(|f| {
                let s = UdpSocket::bind(SocketAddrV4::new(f.src, 0))?;
                s.connect(SocketAddrV4::new(f.dst, SINK_PORT))?;
                Ok(s)
            })
            .collect::<Result<_>>()?;
        let mut sent: Sent = vec![Vec::new(); flows.len()];
        let mut buf = [0u8; 64];
        let start = Instant::now();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            // Paced by sleeping (a loaded 2-core host has no core to spin on): frames that
            // fell due while asleep go now, each with the time it really left.
            let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
            while n < due.min(MAX_SEQ) {
                for (k, s) in socks.iter().enumerate() {
                    buf[..8].copy_from_slice(&n.to_le_bytes());
                    buf[8] = k as u8;
                    sent[k].push(t0.elapsed().as_millis() as u32);
                    // A refusal by host a's own stack is a frame the VR never saw: still
                    // counted as sent, so it shows as lost rather than hidden.
                    let _ = s.send(&buf);
                }
                n += 1;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(sent)
    })
}

/// Which sequence numbers host b got, per flow.
fn sink(lab: &Lab, n: usize, stop: Arc<AtomicBool>) -> JoinHandle<Result<Vec<Vec<bool>>>> {
    in_netns(&lab.ns("b"), move || {
        let s = UdpSocket::bind(("0.0.0.0", SINK_PORT))?;
        control::sys::set_rcvbuf(&s, 8 << 20)?;
        s.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut got = vec![Vec::<bool>::new(); n];
        let mut buf = [0u8; 2048];
        loop {
            match s.recv(&mut buf) {
                Ok(len) if len >= 9 => {
                    let seq = u64::from_le_bytes(buf[..8].try_into()?);
                    let Some(g) = got.get_mut(buf[8] as usize) else { continue };
                    if seq >= MAX_SEQ {
                        continue;
                    }
                    if g.len() <= seq as usize {
                        g.resize(seq as usize + 1, false);
                    }
                    g[seq as usize] = true;
                }
                Ok(_) => {}
                Err(_) if stop.load(Ordering::Relaxed) => return Ok(got),
                Err(_) => {}
            }
        }
    })
}

/// One reading of one daemon.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    t_s: f64,
    rss_kib: u64,
    fds: u64,
    threads: u64,
}

fn read_proc(pid: u32, t_s: f64) -> Result<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("/proc/{pid}/status: the daemon is gone"))?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .with_context(|| format!("/proc/{pid}/status: no {k}"))
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
    Ok(Sample { t_s, rss_kib: field("VmRSS:")?, fds, threads: field("Threads:")? })
}

fn sampler(
    pids: Vec<u32>,
    every: Duration,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Result<Vec<Vec<Sample>>>> {
    std::thread::spawn(move || {
        let mut out = vec![Vec::new(); pids.len()];
        let mut next = Instant::now();
        loop {
            let t = t0.elapsed().as_secs_f64();
            for (k, &pid) in pids.iter().enumerate() {
                out[k].push(read_proc(pid, t)?);
            }
            next += every;
            while Instant::now() < next {
                if stop.load(Ordering::Relaxed) {
                    return Ok(out);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    })
}

/// Least-squares slope of `y` over `x`, per unit of `x`.
fn slope(pts: &[(f64, f64)]) -> f64 {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return 0.0;
    }
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// One resource's figures over the samples after the warm-up.
fn resource(s: &[Sample], warm_s: f64, f: impl Fn(&Sample) -> f64) -> Value {
    let all: Vec<(f64, f64)> = s.iter().map(|x| (x.t_s, f(x))).collect();
    let after: Vec<(f64, f64)> = all.iter().copied().filter(|p| p.0 >= warm_s).collect();
    let third = (after.len() / 3).max(1);
    let min = |v: &[(f64, f64)]| v.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let window_s = match (after.first(), after.last()) {
        (Some(a), Some(b)) => b.0 - a.0,
        _ => 0.0,
    };
    let per_s = slope(&after);
    json!({
        "first": all.first().map(|p| p.1),
        "last": all.last().map(|p| p.1),
        "min": min(&all),
        "max": all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
        "slope_per_hour": per_s * 3600.0,
        "fitted_rise": per_s * window_s,
        "window_s": window_s,
        "min_first_third": (after.len() >= 3).then(|| min(&after[..third])),
        "min_last_third": (after.len() >= 3).then(|| min(&after[after.len() - third..])),
    })
}

/// The daemons' samples added up, time by time.
fn total(per: &[Vec<Sample>]) -> Vec<Sample> {
    let n = per.iter().map(Vec::len).min().unwrap_or(0);
    (0..n)
        .map(|i| Sample {
            t_s: per[0][i].t_s,
            rss_kib: per.iter().map(|p| p[i].rss_kib).sum(),
            fds: per.iter().map(|p| p[i].fds).sum(),
            threads: per.iter().map(|p| p[i].threads).sum(),
        })
        .collect()
}

fn figures(s: &[Sample], warm_s: f64) -> Value {
    json!({
        "rss_mib": resource(s, warm_s, |x| x.rss_kib as f64 / 1024.0),
        "fds": resource(s, warm_s, |x| x.fds as f64),
        "threads": resource(s, warm_s, |x| x.threads as f64),
    })
}

/// [`GROWTH`]'s verdicts on the daemons' total: one message per rule broken.
fn growth_failures(t: &Value) -> Vec<String> {
    let mut f = Vec::new();
    let rss = &t["rss_mib"];
    let (rise, hours) = (
        rss["fitted_rise"].as_f64().unwrap_or(0.0),
        rss["window_s"].as_f64().unwrap_or(0.0) / 3600.0,
    );
    let allowed = GROWTH.rss_floor_mib.max(GROWTH.rss_mib_per_hour * hours);
    if rise > allowed {
        f.push(format!(
            "RSS grew: fitted rise {rise:.1} MiB over {:.0} s after the warm-up ({:.1} MiB/hour), more than the {allowed:.1} MiB allowed (the larger of {} MiB and {} MiB/hour)",
            hours * 3600.0,
            rss["slope_per_hour"].as_f64().unwrap_or(0.0),
            GROWTH.rss_floor_mib,
            GROWTH.rss_mib_per_hour
        ));
    }
    for (key, bound) in [("fds", GROWTH.fds), ("threads", GROWTH.threads)] {
        let (a, b) = (t[key]["min_first_third"].as_f64(), t[key]["min_last_third"].as_f64());
        if let (Some(a), Some(b)) = (a, b) {
            if b - a > bound as f64 {
                f.push(format!(
                    "{key} grew: the steady count (minimum over a third of the run) went from {a} to {b}, more than {bound} up"
                ));
            }
        }
    }
    f
}

/// A time span in ms since the soak's start, during which a flow may lose frames.
#[derive(Clone, Copy, Debug)]
struct Window {
    flow: usize,
    from_ms: u64,
    to_ms: u64,
}

/// A run of frames of one flow lost outside its windows, consecutive in sequence: when the
/// first and the last were sent, so the report can place the event.
#[derive(Clone, Copy, Debug, PartialEq)]
struct LossRun {
    from_ms: u64,
    to_ms: u64,
    frames: u64,
}

/// Loss runs kept per flow for the report (the rest only counted).
const MAX_RUNS: usize = 32;

/// One flow judged: frames sent, received, lost inside its windows, lost outside them, and
/// the first [`MAX_RUNS`] runs of the latter.
#[derive(Debug, Default, PartialEq)]
struct Judged {
    sent: u64,
    received: u64,
    expected: u64,
    unexpected: u64,
    runs: Vec<LossRun>,
    runs_dropped: u64,
}

fn judge_flow(sent: &[u32], got: &[bool], windows: &[Window], flow: usize) -> Judged {
    let mut j = Judged { sent: sent.len() as u64, ..Judged::default() };
    let (mut last_lost, mut kept) = (None, false);
    for (seq, &at) in sent.iter().enumerate() {
        let at = at as u64;
        if got.get(seq).copied().unwrap_or(false) {
            j.received += 1;
        } else if windows.iter().any(|w| w.flow == flow && (w.from_ms..=w.to_ms).contains(&at)) {
            j.expected += 1;
        } else {
            j.unexpected += 1;
            if last_lost == Some(seq.wrapping_sub(1)) {
                if let (true, Some(r)) = (kept, j.runs.last_mut()) {
                    r.to_ms = at;
                    r.frames += 1;
                }
            } else if j.runs.len() < MAX_RUNS {
                j.runs.push(LossRun { from_ms: at, to_ms: at, frames: 1 });
                kept = true;
            } else {
                j.runs_dropped += 1;
                kept = false;
            }
            last_lost = Some(seq);
        }
    }
    j
}

/// What ran around `run`: the activities that overlap it or ended within 5 s before it.
fn around(log: &[(u64, u64, Activity)], run: &LossRun) -> String {
    let near: Vec<String> = log
        .iter()
        .filter(|&&(from, to, _)| from <= run.to_ms && to + 5000 >= run.from_ms)
        .map(|(from, to, a)| format!("{a:?} {from}-{to} ms"))
        .collect();
    if near.is_empty() {
        "no activity within 5 s".into()
    } else {
        near.join(", ")
    }
}

/// What the activities did, for the report.
#[derive(Default)]
struct Counts {
    route_batches: u64,
    routes_added: u64,
    routes_deleted: u64,
    applies: u64,
    migrations: u64,
    captures: u64,
    capture_frames: u64,
    floods: u64,
    route_flips: u64,
}

/// The soak's moving state.
struct Soak<'a> {
    lab: &'a Lab,
    rng: Rng,
    t0: Instant,
    shape: Shape,
    /// Per VR: the API route batches it holds, oldest first.
    batches: Vec<Vec<Vec<String>>>,
    next_prefix: Vec<u32>,
    flip_present: bool,
    flip_deleted_ms: u64,
    windows: Vec<Window>,
    /// Every activity run: start and end in ms since the soak's start.
    log: Vec<(u64, u64, Activity)>,
    counts: Counts,
    flood: Option<JoinHandle<Result<u64>>>,
    flood_frames: Arc<AtomicU64>,
    errors: Vec<String>,
    errors_dropped: u64,
    quiet: bool,
}

impl Soak<'_> {
    fn ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// The state directory of the data plane that runs VR k now.
    fn state_of(&self, k: usize) -> &Path {
        let plane = usize::from(k == 0 && self.shape.r1_at_d);
        &self.lab.planes[plane].1
    }

    fn say(&self, what: &str) {
        if !self.quiet {
            eprintln!("soak {:>7.1} s: {what}", self.t0.elapsed().as_secs_f64());
        }
    }

    fn route_batch(&mut self) -> Result<()> {
        let k = self.rng.below(VRS as u64) as usize;
        let vr = vr_name(k);
        if self.batches[k].len() >= CHURN_BATCHES
            || (self.rng.below(3) == 0 && !self.batches[k].is_empty())
        {
            let b = self.batches[k].remove(0);
            let r = api(self.state_of(k), "route_delete", json!({ "vr": vr, "prefixes": b }))?;
            self.counts.routes_deleted += r["deleted"].as_u64().unwrap_or(0);
            self.say(&format!("{vr}: {} routes deleted", b.len()));
        } else {
            let n = 1 + self.rng.below(CHURN_MAX_BATCH as u64) as usize;
            let via = format!("10.{}.2.2", 70 + k);
            let prefixes: Vec<String> = (0..n)
                .map(|_| {
                    // 16,384 /24s in 100.64.0.0/10 per VR; at most CHURN_BATCHES batches of
                    // CHURN_MAX_BATCH are held, so a prefix comes back only after its delete.
                    let i = self.next_prefix[k] % 16_384;
                    self.next_prefix[k] += 1;
                    format!("100.{}.{}.0/24", 64 + (i >> 8), i & 255)
                })
                .collect();
            let routes: Vec<Value> =
                prefixes.iter().map(|p| json!({ "prefix": p, "via": via })).collect();
            let r = api(self.state_of(k), "route_add", json!({ "vr": vr, "routes": routes }))?;
            self.counts.routes_added += r["added"].as_u64().unwrap_or(0);
            self.batches[k].push(prefixes);
            self.say(&format!("{vr}: {n} routes added"));
        }
        self.counts.route_batches += 1;
        Ok(())
    }

    fn apply(&mut self) -> Result<()> {
        let mut next = self.shape;
        if self.counts.applies.is_multiple_of(2) {
            next.extra_address = !next.extra_address;
        } else {
            next.vr_x = !next.vr_x;
        }
        let (file, state) = &self.lab.planes[0];
        let text = topology(0, next);
        std::fs::write(file, &text)?;
        let r = api(
            state,
            "apply",
            json!({ "topology": text, "file": file.display().to_string(), "dry_run": false }),
        )?;
        self.shape = next;
        self.counts.applies += 1;
        let plan: Vec<&str> =
            r["plan"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        self.say(&format!("apply: {}", plan.join("; ")));
        Ok(())
    }

    fn migrate(&mut self) -> Result<()> {
        let from = usize::from(self.shape.r1_at_d);
        let from_ms = self.ms().saturating_sub(LEAD);
        let r = self.lab.migrate_vr(from, "r1");
        let to_ms = self.ms() + MIGRATION_TAIL.as_millis() as u64;
        self.windows.push(Window { flow: 0, from_ms, to_ms });
        let r = r?;
        self.shape.r1_at_d = !self.shape.r1_at_d;
        self.counts.migrations += 1;
        self.say(&format!(
            "r1 migrated {} -> {}: total {} ms, stop {} ms",
            ["s", "d"][from],
            ["s", "d"][1 - from],
            r["total_ms"],
            r["stop_ms"]
        ));
        Ok(())
    }

    fn capture(&mut self) -> Result<()> {
        let state = self.lab.planes[0].1.clone();
        let point = if self.counts.captures.is_multiple_of(2) { "seg2" } else { "r3:e1" };
        let c = api(&state, "capture_start", json!({ "point": point, "count": 0, "ring": 1024 }))?;
        let id = c["id"].clone();
        let mut frames = 0;
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(300));
            let r = api(&state, "capture_read", json!({ "id": id, "max": 256 }))?;
            frames += r["frames"].as_array().map_or(0, Vec::len) as u64;
        }
        api(&state, "capture_stop", json!({ "id": id }))?;
        self.counts.captures += 1;
        self.counts.capture_frames += frames;
        self.say(&format!("capture at {point}: {frames} frames read"));
        Ok(())
    }

    fn flood(&mut self) -> Result<()> {
        if let Some(f) = self.flood.take() {
            f.join().map_err(|_| crate::format_err!("flood panicked"))??;
        }
        let k = self.rng.below(VRS as u64) as usize;
        let seed = self.rng.next();
        let total = self.flood_frames.clone();
        self.flood = Some(in_netns(&self.lab.ns("a"), move || {
            let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::new(10, 70 + k as u8, 1, 2), 0))?;
            let mut rng = Rng(seed);
            let t = Instant::now();
            let mut n = 0u64;
            while t.elapsed() < FLOOD_FOR {
                let due = (t.elapsed().as_secs_f64() * FLOOD_PPS as f64) as u64;
                while n < due {
                    // .3 to .254: addresses of the VR's connected /24 that nobody has.
                    let host = 3 + rng.below(252) as u8;
                    let to = SocketAddrV4::new(Ipv4Addr::new(10, 70 + k as u8, 2, host), 9);
                    let _ = s.send_to(&[0u8; 18], to);
                    n += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            total.fetch_add(n, Ordering::Relaxed);
            Ok(n)
        }));
        self.counts.floods += 1;
        self.say(&format!(
            "flood through {} to 10.{}.2.3-254 for {} s",
            vr_name(k),
            70 + k,
            FLOOD_FOR.as_secs()
        ));
        Ok(())
    }

    fn route_flip(&mut self) -> Result<()> {
        let state = self.state_of(1).to_path_buf();
        if self.flip_present {
            self.flip_deleted_ms = self.ms().saturating_sub(LEAD);
            api(&state, "route_delete", json!({ "vr": "r2", "prefixes": ["10.99.0.0/24"] }))?;
            self.flip_present = false;
        } else {
            let route = json!({ "prefix": "10.99.0.0/24", "via": "10.71.2.2" });
            api(&state, "route_add", json!({ "vr": "r2", "routes": [route] }))?;
            let to_ms = self.ms() + FLIP_TAIL.as_millis() as u64;
            self.windows.push(Window { flow: 4, from_ms: self.flip_deleted_ms, to_ms });
            self.flip_present = true;
        }
        self.counts.route_flips += 1;
        self.say(&format!(
            "r2: 10.99.0.0/24 {}",
            if self.flip_present { "added" } else { "deleted" }
        ));
        Ok(())
    }

    fn run(&mut self, a: Activity) {
        let from_ms = self.ms();
        let r = match a {
            Activity::RouteBatch => self.route_batch(),
            Activity::Apply => self.apply(),
            Activity::Migrate => self.migrate(),
            Activity::Capture => self.capture(),
            Activity::Flood => self.flood(),
            Activity::RouteFlip => self.route_flip(),
        };
        self.log.push((from_ms, self.ms(), a));
        if let Err(e) = r {
            let m = format!("{a:?} at {:.1} s: {e:#}", self.t0.elapsed().as_secs_f64());
            self.say(&format!("FAILED {m}"));
            if self.errors.len() < MAX_ERRORS {
                self.errors.push(m);
            } else {
                self.errors_dropped += 1;
            }
        }
    }
}

fn check(a: &SoakArgs) -> Result<()> {
    if !(0.2..=1440.0).contains(&a.minutes) {
        bail!("--minutes {}: 0.2..=1440", a.minutes);
    }
    if !(1.0..=60.0).contains(&a.sample_secs) {
        bail!("--sample-secs {}: 1..=60", a.sample_secs);
    }
    if !(10..=5000).contains(&a.rate) {
        bail!("--rate {}: 10..=5000 packets per second per flow", a.rate);
    }
    if a.rate as f64 * a.minutes * 60.0 > MAX_SEQ as f64 {
        bail!(
            "--rate {} for --minutes {} is {:.0} frames per flow, more than {MAX_SEQ}",
            a.rate,
            a.minutes,
            a.rate as f64 * a.minutes * 60.0
        );
    }
    Ok(())
}

/// The daemon processes, checked to be routeplex (not the `ip` that started them).
fn daemon_pids(lab: &Lab) -> Result<Vec<u32>> {
    let pids = lab.pids();
    for &p in &pids {
        let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        if comm.trim() != "routeplex" {
            bail!("process {p} is {comm:?}, not the data plane: its resources would be the wrong ones");
        }
    }
    Ok(pids)
}

/// Runs the soak; its report.
fn soak(a: &SoakArgs) -> Result<Value> {
    let mut lab = Lab::new()?;
    hosts(&lab)?;
    for plane in 0..2 {
        let p = lab.daemon(["s", "d"][plane], &topology(plane, Shape::default()))?;
        lab.planes.push(p);
    }
    warm_up(&lab)?;
    let pids = daemon_pids(&lab)?;
    let flows = flows();
    let t0 = Instant::now();
    let (stop_traffic, stop_sink, stop_sampler) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let drops0 = udp_errors(&lab);
    let sink = sink(&lab, flows.len(), stop_sink.clone());
    let gen = generator(&lab, &flows, a.rate, t0, stop_traffic.clone());
    let samples =
        sampler(pids.clone(), Duration::from_secs_f64(a.sample_secs), t0, stop_sampler.clone());
    let mut s = Soak {
        lab: &lab,
        rng: Rng(a.seed),
        t0,
        shape: Shape::default(),
        batches: vec![Vec::new(); VRS],
        next_prefix: vec![0; VRS],
        flip_present: false,
        flip_deleted_ms: 0,
        windows: Vec::new(),
        log: Vec::new(),
        counts: Counts::default(),
        flood: None,
        flood_frames: Arc::new(AtomicU64::new(0)),
        errors: Vec::new(),
        errors_dropped: 0,
        quiet: a.quiet,
    };
    // The churned flow starts without its route: lost from the start until the first add.
    s.flip_deleted_ms = 0;
    let until = Duration::from_secs_f64(a.minutes * 60.0);
    'rounds: while t0.elapsed() < until {
        for act in round(&mut s.rng) {
            if t0.elapsed() >= until {
                break 'rounds;
            }
            s.run(act);
            // 0.5 to 2.5 s between two activities.
            std::thread::sleep(Duration::from_millis(500 + s.rng.below(2000)));
        }
    }
    if !s.flip_present {
        // Its last deletion runs to the end.
        let w = Window { flow: 4, from_ms: s.flip_deleted_ms, to_ms: u64::MAX };
        s.windows.push(w);
    }
    if let Some(f) = s.flood.take() {
        if let Err(e) = f.join().map_err(|_| crate::format_err!("flood panicked")).and_then(|r| r) {
            s.errors.push(format!("flood: {e:#}"));
        }
    }
    stop_traffic.store(true, Ordering::Relaxed);
    let sent = gen.join().map_err(|_| crate::format_err!("generator panicked"))??;
    // What is still on its way arrives well within this.
    std::thread::sleep(Duration::from_secs(1));
    stop_sink.store(true, Ordering::Relaxed);
    let got = sink.join().map_err(|_| crate::format_err!("sink panicked"))??;
    stop_sampler.store(true, Ordering::Relaxed);
    let per = samples.join().map_err(|_| crate::format_err!("sampler panicked"))??;
    let sink_drops = udp_errors(&lab).saturating_sub(drops0);
    let counters = plane_counters(&lab);
    report(a, &s, &flows, &sent, &got, &per, sink_drops, &pids, counters)
}

/// Each data plane's port counters and VR counters (those `status` lists: the non-zero ones)
/// at the end, so a lost frame can be placed: a ring that was full, a neighbor queue, a drop by reason. A plane
/// that does not answer says so.
fn plane_counters(lab: &Lab) -> Value {
    let mut out = serde_json::Map::new();
    for (k, (_, state)) in lab.planes.iter().enumerate() {
        let st = match api(state, "status", Value::Null) {
            Ok(v) => v,
            Err(e) => {
                out.insert(PLANE_NAMES[k].into(), json!({ "error": format!("{e:#}") }));
                continue;
            }
        };
        let ports = st["ports"].as_array().into_iter().flatten().map(|p| {
            json!({ "name": p["name"], "rx": p["rx"], "tx": p["tx"], "rx_dropped": p["rx_dropped"],
                    "tx_full": p["tx_full"], "drops": p["drops"] })
        });
        let vrs = st["vrs"].as_array().into_iter().flatten();
        let vrs = vrs.map(|v| json!({ "name": v["name"], "counters": v["counters"] }));
        out.insert(
            PLANE_NAMES[k].into(),
            json!({ "ports": ports.collect::<Vec<_>>(), "vrs": vrs.collect::<Vec<_>>() }),
        );
    }
    Value::Object(out)
}

#[allow(clippy::too_many_arguments)]
fn report(
    a: &SoakArgs,
    s: &Soak,
    flows: &[Flow],
    sent: &Sent,
    got: &[Vec<bool>],
    per: &[Vec<Sample>],
    sink_drops: u64,
    pids: &[u32],
    counters: Value,
) -> Result<Value> {
    let run_s = per.first().and_then(|v| v.last()).map_or(0.0, |x| x.t_s);
    let warm_s = (run_s / 10.0).max(20.0);
    let mut failures: Vec<String> = s.errors.clone();
    if s.errors_dropped > 0 {
        failures.push(format!("and {} more activities failed", s.errors_dropped));
    }
    let mut fl = Vec::new();
    let mut lost = false;
    for (k, f) in flows.iter().enumerate() {
        let j = judge_flow(&sent[k], &got[k], &s.windows, k);
        if j.unexpected > 0 {
            failures.push(format!(
                "flow {} (through {}; may lose frames only to: {}): {} of {} frames lost outside the expected windows, first from {} ms ({}){}",
                f.name,
                vr_name(f.vr),
                f.expected,
                j.unexpected,
                j.sent,
                j.runs[0].from_ms,
                around(&s.log, &j.runs[0]),
                if sink_drops > 0 { format!(" (host b's kernel dropped {sink_drops} datagrams for a full socket buffer)") } else { String::new() }
            ));
            lost = true;
        }
        let runs: Vec<Value> = j
            .runs
            .iter()
            .map(|r| json!({ "from_ms": r.from_ms, "to_ms": r.to_ms, "frames": r.frames, "around": around(&s.log, r) }))
            .collect();
        fl.push(json!({
            "name": f.name, "vr": vr_name(f.vr), "src": f.src.to_string(), "dst": f.dst.to_string(),
            "expected_losses": f.expected, "sent": j.sent, "received": j.received,
            "lost_expected": j.expected, "lost_unexpected": j.unexpected,
            "unexpected_runs": runs, "unexpected_runs_not_listed": j.runs_dropped,
        }));
    }
    if lost {
        failures.push(format!("the data planes' counters at the end: {counters}"));
    }
    let tot = total(per);
    let totals = figures(&tot, warm_s);
    failures.extend(growth_failures(&totals));
    let c = &s.counts;
    let activities = json!({
        "route_batches": c.route_batches, "routes_added": c.routes_added,
        "routes_deleted": c.routes_deleted, "applies": c.applies, "migrations": c.migrations,
        "captures": c.captures, "capture_frames": c.capture_frames, "floods": c.floods,
        "flood_frames": s.flood_frames.load(Ordering::Relaxed), "route_flips": c.route_flips,
    });
    let daemons: Vec<Value> = per
        .iter()
        .enumerate()
        .map(|(k, v)| {
            json!({
                "plane": PLANE_NAMES[k], "pid": pids[k], "figures": figures(v, warm_s),
                "samples": v.iter().map(|x| json!([x.t_s, x.rss_kib, x.fds, x.threads])).collect::<Vec<_>>(),
            })
        })
        .collect();
    let v = json!({
        "parameters": { "minutes": a.minutes, "seed": a.seed, "sample_secs": a.sample_secs, "rate_pps_per_flow": a.rate },
        "run_s": run_s,
        "warm_up_s": warm_s,
        "rule": {
            "rss": format!("fitted rise after the warm-up <= max({} MiB, {} MiB/hour x window), both daemons together", GROWTH.rss_floor_mib, GROWTH.rss_mib_per_hour),
            "fds": format!("minimum over the last third - minimum over the first third (after the warm-up) <= {}", GROWTH.fds),
            "threads": format!("the same, <= {}", GROWTH.threads),
        },
        "activities": activities,
        "flows": fl,
        "sink_drops": sink_drops,
        "plane_counters": counters,
        "samples_taken": tot.len(),
        "sample_columns": ["t_s", "rss_kib", "fds", "threads"],
        "total": totals,
        "daemons": daemons,
        "windows": s.windows.iter().map(|w| json!({ "flow": flows[w.flow].name, "from_ms": w.from_ms, "to_ms": (w.to_ms != u64::MAX).then_some(w.to_ms) })).collect::<Vec<_>>(),
        "load": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "failures": failures,
        "passed": failures.is_empty(),
    });
    Ok(v)
}

fn text(v: &Value) -> String {
    let mut t = format!(
        "soak: {:.0} s, seed {}, warm-up {:.0} s, {} samples, load {}\nactivities: {}\n",
        v["run_s"].as_f64().unwrap_or(0.0),
        v["parameters"]["seed"],
        v["warm_up_s"].as_f64().unwrap_or(0.0),
        v["samples_taken"],
        v["load"].as_str().unwrap_or_default(),
        v["activities"]
    );
    t += &format!(
        "{:<18} {:>9} {:>9} {:>13} {:>15}  may lose to\n",
        "flow", "sent", "received", "lost expected", "lost unexpected"
    );
    for f in v["flows"].as_array().into_iter().flatten() {
        t += &format!(
            "{:<18} {:>9} {:>9} {:>13} {:>15}  {}\n",
            f["name"].as_str().unwrap_or_default(),
            f["sent"].as_u64().unwrap_or(0),
            f["received"].as_u64().unwrap_or(0),
            f["lost_expected"].as_u64().unwrap_or(0),
            f["lost_unexpected"].as_u64().unwrap_or(0),
            f["expected_losses"].as_str().unwrap_or_default()
        );
        for r in f["unexpected_runs"].as_array().into_iter().flatten() {
            t += &format!(
                "  lost {} sent {}-{} ms; around: {}\n",
                r["frames"],
                r["from_ms"],
                r["to_ms"],
                r["around"].as_str().unwrap_or_default()
            );
        }
    }
    t += &format!(
        "{:<15} {:>10} {:>10} {:>10} {:>10} {:>14} {:>12} {:>12}\n",
        "resource", "first", "last", "min", "max", "slope/hour", "min 1st 3rd", "min last 3rd"
    );
    let mut row = |who: &str, f: &Value| {
        for (k, unit) in [("rss_mib", "RSS MiB"), ("fds", "fds"), ("threads", "threads")] {
            let x = &f[k];
            let n = |key: &str| x[key].as_f64().map_or("-".into(), |v| format!("{v:.1}"));
            t += &format!(
                "{:<15} {:>10} {:>10} {:>10} {:>10} {:>14} {:>12} {:>12}\n",
                format!("{who} {unit}"),
                n("first"),
                n("last"),
                n("min"),
                n("max"),
                n("slope_per_hour"),
                n("min_first_third"),
                n("min_last_third")
            );
        }
    };
    for d in v["daemons"].as_array().into_iter().flatten() {
        row(d["plane"].as_str().unwrap_or_default(), &d["figures"]);
    }
    row("both", &v["total"]);
    for f in v["failures"].as_array().into_iter().flatten() {
        t += &format!("FAILED: {}\n", f.as_str().unwrap_or_default());
    }
    if v["passed"] == true {
        t += "passed: no growth beyond the rule, no frame lost outside its expected window\n";
    }
    t
}

/// `routeplex test soak`.
pub fn run(a: SoakArgs) -> Result<()> {
    check(&a)?;
    if let Some(why) = super::migration::cannot_run() {
        bail!("routeplex test soak {why}");
    }
    let v = soak(&a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", text(&v));
    }
    if v["passed"] != true {
        let f: Vec<&str> =
            v["failures"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        bail!("soak failed: {}", f.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slope_is_the_least_squares_one() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 * i as f64 + 1.0)).collect();
        assert!((slope(&pts) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 5.0)]), 0.0);
    }

    fn samples(f: impl Fn(f64) -> (u64, u64, u64)) -> Vec<Sample> {
        (0..120)
            .map(|i| {
                let t = i as f64 * 2.0;
                let (rss_kib, fds, threads) = f(t);
                Sample { t_s: t, rss_kib, fds, threads }
            })
            .collect()
    }

    #[test]
    fn steady_resources_pass_and_growth_fails_by_the_rule() {
        // A sawtooth of 8 MiB (a VR and its port coming and going) and transient fds pass.
        let ok = samples(|t| {
            let saw = if (t as u64 / 20).is_multiple_of(2) { 0 } else { 8 << 10 };
            ((100 << 10) + saw, 40 + u64::from((t as u64).is_multiple_of(6)) * 3, 5)
        });
        assert!(growth_failures(&figures(&ok, 20.0)).is_empty());
        // 40 MiB over four minutes, a descriptor every 10 s, a thread every 40 s: each caught.
        let bad = samples(|t| {
            (100 * 1024 + (t * 40.0 * 1024.0 / 240.0) as u64, 40 + t as u64 / 10, 5 + t as u64 / 40)
        });
        let f = growth_failures(&figures(&bad, 20.0));
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].starts_with("RSS grew"), "{f:?}");
        assert!(f[1].starts_with("fds grew") && f[2].starts_with("threads grew"), "{f:?}");
    }

    #[test]
    fn lost_frames_are_expected_only_in_their_flows_windows() {
        let sent = [0, 10, 20, 30, 40];
        let got = [true, false, false, true];
        let w =
            [Window { flow: 0, from_ms: 5, to_ms: 25 }, Window { flow: 1, from_ms: 30, to_ms: 50 }];
        // seq 1 and 2 in flow 0's window; seq 4 (never received) is outside it.
        let j = judge_flow(&sent, &got, &w, 0);
        assert_eq!((j.sent, j.received, j.expected, j.unexpected), (5, 2, 2, 1));
        assert_eq!(j.runs, [LossRun { from_ms: 40, to_ms: 40, frames: 1 }]);
        let j = judge_flow(&sent, &got, &w, 1);
        assert_eq!((j.sent, j.received, j.expected, j.unexpected), (5, 2, 1, 2));
        assert_eq!(
            j.runs,
            [LossRun { from_ms: 10, to_ms: 20, frames: 2 }],
            "seq 1 and 2 are one run; seq 4 is in flow 1's window"
        );
    }

    #[test]
    fn loss_runs_split_at_a_received_frame_and_stop_at_the_cap() {
        // Every third frame received: runs of two, one per gap.
        let n = 3 * (MAX_RUNS + 5);
        let sent: Vec<u32> = (0..n as u32).map(|i| i * 10).collect();
        let got: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
        let j = judge_flow(&sent, &got, &[], 0);
        assert_eq!(j.unexpected, 2 * (MAX_RUNS as u64 + 5));
        assert_eq!(j.runs.len(), MAX_RUNS);
        assert_eq!(j.runs_dropped, 5);
        assert_eq!(j.runs[1], LossRun { from_ms: 40, to_ms: 50, frames: 2 });
        assert_eq!(
            j.runs[MAX_RUNS - 1].frames,
            2,
            "runs past the cap do not extend the last kept one"
        );
        let log =
            [(0, 35, Activity::Apply), (45, 60, Activity::Flood), (9000, 9100, Activity::Migrate)];
        assert_eq!(around(&log, &j.runs[1]), "Apply 0-35 ms, Flood 45-60 ms");
        assert_eq!(around(&log[2..], &j.runs[1]), "no activity within 5 s");
    }

    #[test]
    fn every_round_holds_every_activity_and_the_seed_fixes_the_order() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        for _ in 0..20 {
            let r = round(&mut a);
            assert_eq!(r, round(&mut b));
            for x in ACTIVITIES {
                assert!(r.contains(&x));
            }
        }
    }

    #[test]
    fn the_topology_follows_the_shape() {
        let base = topology(0, Shape::default());
        assert!(
            base.contains("name: seg,") && base.contains("name: r1") && !base.contains("name: x")
        );
        let moved = topology(0, Shape { r1_at_d: true, extra_address: true, vr_x: true });
        assert!(!moved.contains("name: seg,") && !moved.contains("name: r1"));
        assert!(moved.contains("10.72.9.1/24") && moved.contains("name: x"));
        assert!(!topology(1, Shape::default()).contains("vrs:"));
        for y in [base, moved] {
            control::Topology::parse(&y, "s.yaml", Path::new(".")).expect(&y);
        }
    }
}
