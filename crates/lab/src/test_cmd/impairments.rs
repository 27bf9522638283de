//! `routeplex test impairments` (root): each impairment kind measured through a routeplex
//! link and through Linux netem on a veth, in one run, beside the configured value.
//!
//! Two labs, one after the other (so neither's CPU shows in the other's figures):
//! - netem: namespaces A and B joined by a veth; the case's `tc qdisc ... netem` on A's end.
//! - routeplex: hosts A and B on AF_PACKET ports of one VR, the data plane in this process;
//!   the case's impairment set live (the API's `impair`) on the port towards B, with a seed.
//!
//! Per case a sender thread in A sends `--frames` UDP probes (magic, sequence number, send
//! time) at `--rate` to a receiver thread in B, which records each arrival (sequence number,
//! one-way delay on this process's monotonic clock) in a vector sized before the run;
//! `tester::linkmeasure` reads it afterwards. The CPU time of this whole process
//! (getrusage: the probe threads, and for routeplex the data plane's worker) is read around
//! each case and divided by the frames sent; netem's work runs in the kernel, partly in
//! softirq context charged to whichever task is running, so its figure is a lower bound.
//! The uncut baseline case gives each lab's own cost and delay, which the others include.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{bail, format_err, Context, Result};
use control::api::Command as Api;
use control::model::ImpairDoc;
use control::netns::Made;
use control::runtime::{Idle, Options};
use control::{Node, Topology};
use serde_json::{json, Value};
use tester::linkmeasure::{gilbert_elliott, measure, Arrival, Measured};

/// Options of `routeplex test impairments`.
#[derive(clap::Args)]
pub struct ImpairmentsArgs {
    /// Probes per case (the rate case sends at most 2 s of its own rate).
    #[arg(long, default_value_t = 100_000)]
    frames: u64,
    /// Probes per second.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// The seed of routeplex's impairments (netem has none here).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// How routeplex's worker waits when its ports are empty: adaptive (the default: spin,
    /// then sleep on the ports), poll (spin: a CPU of its own), interrupt.
    #[arg(long, default_value = "adaptive")]
    idle: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// The most probes a case may send, and the highest rate.
const MAX_FRAMES: u64 = 2_000_000;
const MAX_RATE: u64 = 1_000_000;
const PORT: u16 = 47_100;
const MAGIC: [u8; 4] = *b"RPIM";
/// The sequence number of warm-up probes (is the path up?).
const WARM: u64 = u64::MAX;
/// UDP payload of a probe, and of the rate case's frames.
const SMALL: usize = 24;
const LARGE: usize = 1000;
/// Ethernet, IPv4 and UDP headers: a frame on the link is the payload and these.
const HEADERS: u64 = 14 + 20 + 8;

/// One impairment kind: what routeplex and netem are given, and the figure compared.
struct Case {
    kind: &'static str,
    routeplex: Value,
    netem: &'static str,
    payload: usize,
    /// The measured figure compared (a `Measured` field, or `added_delay_us`).
    metric: &'static str,
    configured: f64,
    /// Absolute tolerance (delays), else relative (2 %) widened to 3 standard errors of a
    /// share over the frames sent.
    abs_tolerance: Option<f64>,
    /// A delay under which a probe counts as sent without the delay (`fast_share`), ns.
    fast_ns: u64,
    /// How many frames' worth of independent draws one frame is for the share's standard
    /// error: 1, or less for a loss that comes in bursts.
    independence: f64,
    /// What else the configuration implies, for the report.
    also: Value,
}

fn cases(seed: u64) -> Vec<Case> {
    let (ge_loss, ge_burst) = gilbert_elliott(0.01, 0.25, 1.0, 0.0);
    let case = |kind, routeplex: Value, netem, metric, configured| Case {
        kind,
        routeplex,
        netem,
        payload: SMALL,
        metric,
        configured,
        abs_tolerance: None,
        fast_ns: 0,
        independence: 1.0,
        also: json!({}),
    };
    let with_seed = |mut v: Value| {
        v["seed"] = seed.into();
        v
    };
    vec![
        Case {
            abs_tolerance: Some(20.0),
            also: json!({ "jitter_us": 200, "distribution": "normal" }),
            ..case(
                "delay",
                with_seed(json!({ "delay": "1ms", "jitter": "200us", "distribution": "normal" })),
                "delay 1ms 200us distribution normal",
                "added_delay_us",
                1000.0,
            )
        },
        case("loss", with_seed(json!({ "loss": "10%" })), "loss random 10%", "loss_share", 0.10),
        // Successive frames' states are correlated (λ = 1 - p - r): the share's variance is
        // (1 + λ) / (1 - λ) times a coin's.
        Case {
            independence: (1.0 - 0.74) / (1.0 + 0.74),
            also: json!({ "p": 0.01, "r": 0.25, "1-h": 1.0, "1-k": 0.0, "mean_burst": ge_burst }),
            ..case(
                "loss_gilbert_elliott",
                with_seed(json!({ "loss": { "p": "1%", "r": "25%", "1-h": "100%", "1-k": "0%" } })),
                "loss gemodel 1% 25% 100% 0%",
                "loss_share",
                ge_loss,
            )
        },
        case(
            "duplicate",
            with_seed(json!({ "duplicate": "5%" })),
            "duplicate 5%",
            "duplicate_share",
            0.05,
        ),
        // A delay far above a loaded machine's own (a few ms at worst), so that a probe
        // under half of it was surely one sent without it; a limit that holds them all.
        Case {
            fast_ns: 25_000_000,
            also: json!({ "delay_us": 50_000, "limit": 16_384, "fast_below_us": 25_000 }),
            ..case(
                "reorder",
                with_seed(json!({ "delay": "50ms", "reorder": "25%", "limit": 16_384 })),
                "delay 50ms reorder 25% limit 16384",
                "fast_share",
                0.25,
            )
        },
        Case {
            also: json!({
                "measured_as": "the share not delivered: the kernel drops a frame whose bit \
                               flip broke a checksum or an address; one in the source MAC \
                               or a few other bits goes unseen"
            }),
            ..case(
                "corrupt",
                with_seed(json!({ "corrupt": "5%" })),
                "corrupt 5%",
                "loss_share",
                0.05,
            )
        },
        Case {
            payload: LARGE,
            also: json!({
                "limit": 1000,
                "offered_bps": 30e6,
                "frame_bytes": LARGE as u64 + HEADERS,
            }),
            ..case(
                "rate",
                with_seed(json!({ "rate": "20mbit", "limit": 1000 })),
                "rate 20mbit limit 1000",
                "delivered_bps",
                20e6,
            )
        },
    ]
}

/// Runs the comparison and prints it.
pub fn run(a: ImpairmentsArgs) -> Result<()> {
    if !(1..=MAX_FRAMES).contains(&a.frames) || !(1..=MAX_RATE).contains(&a.rate) {
        bail!("--frames is 1..={MAX_FRAMES} and --rate 1..={MAX_RATE} probes per second");
    }
    if Idle::from_name(&a.idle).is_none() {
        bail!("--idle is poll, adaptive or interrupt, not {:?}", a.idle);
    }
    if control::sys::euid() != 0 {
        bail!("routeplex test impairments needs root (network namespaces, veth, tc)");
    }
    let report = execute(&a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(())
}

/// The two ends of a lab: the namespaces probes leave from and arrive in, and where to.
#[derive(Clone)]
struct Ends {
    from: String,
    to: String,
    addr: IpAddr,
}

/// The netem lab: two namespaces and a veth, removed when dropped.
struct NetemLab {
    ends: Ends,
}

impl Drop for NetemLab {
    fn drop(&mut self) {
        for ns in [&self.ends.from, &self.ends.to] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn sh(program: &str, args: &[&str]) -> Result<()> {
    let o = Command::new(program).args(args).output().with_context(|| program.to_string())?;
    if !o.status.success() {
        bail!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(())
}

impl NetemLab {
    fn make(tag: &str) -> Result<NetemLab> {
        let (a, b) = (format!("rpim{tag}na"), format!("rpim{tag}nb"));
        let lab = NetemLab {
            ends: Ends { from: a.clone(), to: b.clone(), addr: Ipv4Addr::new(10, 85, 0, 2).into() },
        };
        for ns in [&a, &b] {
            sh("ip", &["netns", "add", ns])?;
            sh("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        let veth = ["link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", &b];
        sh("ip", &[&["-n", a.as_str()][..], &veth[..]].concat())?;
        for (ns, addr) in [(&a, "10.85.0.1/24"), (&b, "10.85.0.2/24")] {
            sh("ip", &["-n", ns, "addr", "add", addr, "dev", "eth0"])?;
            // As routeplex's host veths: real frames, checksums computed and checked.
            let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
            let mut args = vec!["netns", "exec", ns, "ethtool", "-K", "eth0"];
            args.extend(off);
            sh("ip", &args)?;
            sh("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
        }
        Ok(lab)
    }

    /// Sets the case's netem on A's end (`None`: no qdisc of ours).
    fn set(&self, netem: Option<&str>) -> Result<()> {
        let ns = &self.ends.from;
        let _ = Command::new("ip")
            .args(["netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"])
            .output();
        if let Some(n) = netem {
            let mut args =
                vec!["netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem"];
            args.extend(n.split_whitespace());
            sh("ip", &args)?;
        }
        Ok(())
    }
}

/// The routeplex lab: hosts A and B through VR `r`, B's port impaired.
struct RouteplexLab {
    made: Made,
    node: Option<Node>,
    ends: Ends,
    port: String,
}

impl Drop for RouteplexLab {
    fn drop(&mut self) {
        if let Some(n) = self.node.take() {
            let _ = n.stop();
        }
        for e in control::netns::remove(&self.made) {
            eprintln!("cleanup: {e}");
        }
    }
}

impl RouteplexLab {
    fn make(tag: &str, idle: Idle) -> Result<RouteplexLab> {
        let (a, b, pb) = (format!("rpim{tag}ha"), format!("rpim{tag}hb"), format!("i{tag}b"));
        let text = format!(
            "workers: 1
hosts:
  - {{ name: {a}, addresses: [10.84.1.2/24], gateways: [10.84.1.1] }}
  - {{ name: {b}, addresses: [10.84.2.2/24], gateways: [10.84.2.1] }}
ports:
  - {{ name: i{tag}a, kind: afpacket, host: {a} }}
  - {{ name: {pb}, kind: afpacket, host: {b} }}
vrs:
  - name: r
    interfaces:
      - {{ name: a, port: i{tag}a, mac: \"02:00:00:00:84:01\", addresses: [10.84.1.1/24] }}
      - {{ name: b, port: {pb}, mac: \"02:00:00:00:84:02\", addresses: [10.84.2.1/24] }}
"
        );
        let topo = Topology::parse(&text, "impairments.yaml", Path::new("."))
            .map_err(|e| format_err!("{e}"))?;
        let ends = Ends { from: a, to: b, addr: Ipv4Addr::new(10, 84, 2, 2).into() };
        let mut lab = RouteplexLab { made: Made::default(), node: None, ends, port: pb };
        control::netns::make(&topo, &mut lab.made).map_err(|e| format_err!("{e}"))?;
        let mut o = Options::new(1);
        o.idle = idle;
        let mut node = Node::start(topo, o, 64).map_err(|e| format_err!("{e}"))?;
        // The API's `impair` edits the topology's text (as `apply` would).
        node.set_source(text, "impairments.yaml".to_string());
        lab.node = Some(node);
        Ok(lab)
    }

    fn set(&mut self, impair: Option<&Value>) -> Result<()> {
        let impair = impair.map(|v| serde_json::from_value::<ImpairDoc>(v.clone())).transpose()?;
        let port = self.port.clone();
        let node = self.node.as_mut().expect("started");
        node.execute(Api::Impair { port, impair: impair.map(Box::new) })
            .map_err(|e| format_err!("{e}"))?;
        Ok(())
    }
}

/// This process's CPU time (user and system), ns.
fn cpu_ns() -> u64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer; it cannot fail so called.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    t(u.ru_utime) + t(u.ru_stime)
}

/// One case's probes through one lab.
struct Run {
    arrivals: Vec<Arrival>,
    sent: u64,
    span_ns: u64,
    cpu_ns: u64,
}

/// A receiver in namespace `ns` recording up to `cap` arrivals until `stop`; `warm` at the
/// first warm-up probe. Returns them and when the last arrived.
fn receiver(
    ns: String,
    cap: usize,
    epoch: Instant,
    flags: Arc<Flags>,
) -> JoinHandle<Result<(Vec<Arrival>, Instant)>> {
    std::thread::spawn(move || {
        control::sys::enter_netns(&ns).with_context(|| format!("namespace {ns}"))?;
        let sock = UdpSocket::bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), PORT))?;
        sock.set_read_timeout(Some(Duration::from_millis(10)))?;
        let mut out = Vec::with_capacity(cap);
        let mut last = Instant::now();
        let mut buf = [0u8; 2048];
        while !flags.stop.load(Ordering::Acquire) {
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
            let now = Instant::now();
            if len < 20 || buf[..4] != MAGIC {
                continue;
            }
            let seq = u64::from_be_bytes(buf[4..12].try_into().expect("8 bytes"));
            let sent = u64::from_be_bytes(buf[12..20].try_into().expect("8 bytes"));
            if seq == WARM {
                flags.warm.store(true, Ordering::Release);
                continue;
            }
            // Bounded: a run's vector holds what it was sized for (duplicates included).
            if out.len() < cap {
                let at = now.duration_since(epoch).as_nanos() as u64;
                out.push(Arrival { seq, delay_ns: at.saturating_sub(sent) });
                last = now;
            }
        }
        Ok((out, last))
    })
}

/// The flags a case's probe threads share.
#[derive(Default)]
struct Flags {
    /// A warm-up probe arrived: the path is up.
    warm: AtomicBool,
    /// The case's impairment is set: send the probes.
    go: AtomicBool,
    /// Stop receiving (or give up warming up).
    stop: AtomicBool,
}

/// Sends warm-up probes from `ns` until the receiver has one, waits for `go`, then sends
/// `n` probes of `payload` bytes at `rate`; returns the first probe's time.
fn sender(
    ns: String,
    to: SocketAddr,
    n: u64,
    rate: u64,
    payload: usize,
    epoch: Instant,
    flags: Arc<Flags>,
) -> JoinHandle<Result<Instant>> {
    std::thread::spawn(move || {
        control::sys::enter_netns(&ns).with_context(|| format!("namespace {ns}"))?;
        let sock = UdpSocket::bind(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0))?;
        let mut buf = [0u8; LARGE];
        buf[..4].copy_from_slice(&MAGIC);
        buf[4..12].copy_from_slice(&WARM.to_be_bytes());
        while !flags.warm.load(Ordering::Acquire) {
            if flags.stop.load(Ordering::Acquire) {
                bail!("stopped before the path was up");
            }
            let _ = sock.send_to(&buf[..payload], to);
            std::thread::sleep(Duration::from_millis(10));
        }
        while !flags.go.load(Ordering::Acquire) {
            if flags.stop.load(Ordering::Acquire) {
                bail!("stopped before the probes");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        let interval = 1e9 / rate as f64;
        for seq in 0..n {
            let due = t0 + Duration::from_nanos((seq as f64 * interval) as u64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            buf[4..12].copy_from_slice(&seq.to_be_bytes());
            let at = epoch.elapsed().as_nanos() as u64;
            buf[12..20].copy_from_slice(&at.to_be_bytes());
            // A refused send (a full socket buffer) is a probe sent and lost: it counts.
            let _ = sock.send_to(&buf[..payload], to);
        }
        Ok(t0)
    })
}

/// Sends one case's probes through `ends`: warm-up probes until the path is up (10 s at
/// most), then `arm` sets the case's impairment, then `n` probes, then `drain` for what the
/// link still holds. The CPU time counts from `arm`'s end to the drain's.
fn probe(
    ends: &Ends,
    n: u64,
    rate: u64,
    payload: usize,
    drain: Duration,
    arm: &mut dyn FnMut() -> Result<()>,
) -> Result<Run> {
    let epoch = Instant::now();
    let flags = Arc::new(Flags::default());
    // Every copy a duplicating link may make, and some.
    let cap = usize::try_from(n * 2 + 16).unwrap_or(usize::MAX);
    let rx = receiver(ends.to.clone(), cap, epoch, flags.clone());
    let to = SocketAddr::new(ends.addr, PORT);
    let tx = sender(ends.from.clone(), to, n, rate, payload, epoch, flags.clone());
    let begin = Instant::now();
    let up = loop {
        if flags.warm.load(Ordering::Acquire) {
            break Ok(());
        }
        if rx.is_finished() || tx.is_finished() || begin.elapsed() > Duration::from_secs(10) {
            break Err(format_err!(
                "no warm-up probe from {} reached {} in 10 s",
                ends.from,
                ends.to
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let armed = up.and_then(|()| arm());
    let cpu0 = cpu_ns();
    match &armed {
        Ok(()) => flags.go.store(true, Ordering::Release),
        Err(_) => flags.stop.store(true, Ordering::Release),
    }
    let t0 = tx.join().map_err(|_| format_err!("the sender panicked"))?;
    if armed.is_ok() && t0.is_ok() {
        std::thread::sleep(drain);
    }
    let cpu = cpu_ns() - cpu0;
    flags.stop.store(true, Ordering::Release);
    let received = rx.join().map_err(|_| format_err!("the receiver panicked"))?;
    armed?;
    let t0 = t0?;
    let (arrivals, last) = received?;
    let span_ns = last.saturating_duration_since(t0).as_nanos() as u64;
    Ok(Run { arrivals, sent: n, span_ns, cpu_ns: cpu })
}

/// A lab's figures for one case.
fn figures(run: &Run, payload: usize, fast_ns: u64, baseline_p50_us: f64) -> Value {
    let m: Measured =
        measure(run.sent, &run.arrivals, payload as u64 + HEADERS, run.span_ns, fast_ns);
    let mut v = json!(m);
    v["added_delay_us"] = json!(m.delay_us.p50 - baseline_p50_us);
    v["cpu_ns_per_frame"] = json!(run.cpu_ns as f64 / run.sent.max(1) as f64);
    v
}

/// How far `measured` is from `configured`, and whether within the case's tolerance.
fn verdict(c: &Case, measured: f64, n: u64) -> Value {
    let (tolerance, relative, bound) = match c.abs_tolerance {
        Some(t) => (t, false, "20 us"),
        None if c.metric == "delivered_bps" => (0.02 * c.configured, true, "2 %"),
        None => {
            let p = c.configured;
            let stderr = (p * (1.0 - p) / (n.max(1) as f64 * c.independence)).sqrt();
            let bound = if 3.0 * stderr > 0.02 * p { "3 standard errors" } else { "2 %" };
            ((0.02 * p).max(3.0 * stderr), true, bound)
        }
    };
    json!({
        "measured": measured,
        "error": measured - c.configured,
        "relative_error": relative.then(|| (measured - c.configured) / c.configured),
        "tolerance": tolerance,
        "bound": bound,
        "within": (measured - c.configured).abs() <= tolerance,
    })
}

fn execute(a: &ImpairmentsArgs) -> Result<Value> {
    let tag = format!("{}", std::process::id() % 100_000);
    let cases = cases(a.seed);
    let frames_of = |c: &Case| {
        if c.kind == "rate" {
            // 1.5 times the configured rate, for at most 2 s.
            let pps = (1.5 * c.configured / ((c.payload as u64 + HEADERS) * 8) as f64) as u64;
            (pps, a.frames.min(2 * pps))
        } else {
            (a.rate, a.frames)
        }
    };
    let drain = |c: &Case| Duration::from_millis(if c.kind == "rate" { 800 } else { 200 });
    let quiet = Duration::from_millis(200);
    let mut netem = Vec::new();
    let netem_base;
    let mut netem_missing = None;
    {
        let lab = NetemLab::make(&tag)?;
        let base = probe(&lab.ends, a.frames, a.rate, SMALL, quiet, &mut || lab.set(None))?;
        netem_base = figures(&base, SMALL, 0, 0.0);
        let p50 = netem_base["delay_us"]["p50"].as_f64().unwrap_or(0.0);
        // A kernel without sch_netem (a minimal VM's) still gets routeplex measured.
        if let Err(e) = lab.set(Some("delay 1ms")).and_then(|()| lab.set(None)) {
            eprintln!("linux netem is not available here, routeplex alone is measured: {e}");
            netem_missing = Some(format!("{e:#}"));
        }
        for c in cases.iter().filter(|_| netem_missing.is_none()) {
            let (pps, n) = frames_of(c);
            let r = probe(&lab.ends, n, pps, c.payload, drain(c), &mut || lab.set(Some(c.netem)))?;
            netem.push(figures(&r, c.payload, c.fast_ns, p50));
        }
    }
    let mut rp = Vec::new();
    let rp_base;
    {
        let idle = Idle::from_name(&a.idle).expect("checked");
        let mut lab = RouteplexLab::make(&tag, idle)?;
        let ends = lab.ends.clone();
        let base = probe(&ends, a.frames, a.rate, SMALL, quiet, &mut || Ok(()))?;
        rp_base = figures(&base, SMALL, 0, 0.0);
        let p50 = rp_base["delay_us"]["p50"].as_f64().unwrap_or(0.0);
        for c in &cases {
            let (pps, n) = frames_of(c);
            let r = probe(&ends, n, pps, c.payload, drain(c), &mut || lab.set(Some(&c.routeplex)))?;
            rp.push(figures(&r, c.payload, c.fast_ns, p50));
            lab.set(None)?;
        }
    }
    let rows: Vec<Value> = cases
        .iter()
        .zip(&rp)
        .enumerate()
        .map(|(i, (c, r))| {
            let sent = r["sent"].as_u64().unwrap_or(0);
            let get = |v: &Value| v[c.metric].as_f64().unwrap_or(f64::NAN);
            let netem = match (netem.get(i), &netem_missing) {
                (Some(n), _) => json!({
                    "verdict": verdict(c, get(n), n["sent"].as_u64().unwrap_or(0)),
                    "figures": n,
                }),
                (None, why) => json!({ "unavailable": why }),
            };
            json!({
                "kind": c.kind,
                "routeplex_impair": c.routeplex,
                "netem": c.netem,
                "metric": c.metric,
                "configured": c.configured,
                "also": c.also,
                "routeplex": { "verdict": verdict(c, get(r), sent), "figures": r },
                "linux_netem": netem,
            })
        })
        .collect();
    Ok(json!({
        "frames": a.frames,
        "rate_pps": a.rate,
        "seed": a.seed,
        "idle": a.idle,
        "cpu_note": "CPU time of this process over the case (probe threads; for routeplex \
                     also its data-plane worker) per frame sent; netem's softirq work may be \
                     charged to other tasks, so its figure is a lower bound. Compare each with \
                     its baseline.",
        "baseline": { "routeplex": rp_base, "linux_netem": netem_base },
        "netem_unavailable": netem_missing,
        "cases": rows,
    }))
}

/// One line of the table: kind, figure, configured, then each lab's measured, verdict and
/// CPU per frame.
fn row(cells: [&str; 9]) -> String {
    let [k, m, c, rv, rok, nv, nok, rcpu, ncpu] = cells;
    format!("{k:<22} {m:<16} {c:>12} {rv:>12} {rok:>3} {nv:>12} {nok:>3} {rcpu:>9} {ncpu:>11}\n")
}

fn text(r: &Value) -> String {
    let f = |v: &Value| {
        v.as_f64().map_or("-".to_string(), |x| {
            if x.abs() >= 1e5 {
                format!("{x:.4e}")
            } else {
                format!("{x:.4}")
            }
        })
    };
    let ok = |v: &Value| match v["within"].as_bool() {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    };
    let mut s =
        format!("{} probes per case at {}/s (seed {})\n\n", r["frames"], r["rate_pps"], r["seed"]);
    s += &row([
        "kind",
        "figure",
        "configured",
        "routeplex",
        "ok",
        "netem",
        "ok",
        "rp ns/fr",
        "netem ns/fr",
    ]);
    let (br, bn) = (&r["baseline"]["routeplex"], &r["baseline"]["linux_netem"]);
    let cpu = |v: &Value| f(&v["cpu_ns_per_frame"]);
    let (rp50, np50) = (f(&br["delay_us"]["p50"]), f(&bn["delay_us"]["p50"]));
    s += &row(["baseline", "delay_p50_us", "-", &rp50, "", &np50, "", &cpu(br), &cpu(bn)]);
    for c in r["cases"].as_array().into_iter().flatten() {
        let (rv, nv) = (&c["routeplex"]["verdict"], &c["linux_netem"]["verdict"]);
        let (rf, nf) = (&c["routeplex"]["figures"], &c["linux_netem"]["figures"]);
        s += &row([
            c["kind"].as_str().unwrap_or(""),
            c["metric"].as_str().unwrap_or(""),
            &f(&c["configured"]),
            &f(&rv["measured"]),
            ok(rv),
            &f(&nv["measured"]),
            ok(nv),
            &cpu(rf),
            &cpu(nf),
        ]);
    }
    if let Some(why) = r["netem_unavailable"].as_str() {
        s += &format!("\nnetem was not measured: {why}\n");
    }
    s += "\nok: within 2 % (20 us for delays), for shares widened to 3 standard errors over the \
          frames sent.\n";
    s += r["cpu_note"].as_str().unwrap_or("");
    s += "\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_names_a_measured_figure_and_valid_impairments() {
        let figures = json!(Measured::default());
        let cases = cases(7);
        let mut kinds: Vec<&str> = cases.iter().map(|c| c.kind).collect();
        kinds.dedup();
        assert_eq!(kinds.len(), 7);
        for c in &cases {
            assert!(
                c.metric == "added_delay_us" || figures.get(c.metric).is_some(),
                "{}: {}",
                c.kind,
                c.metric
            );
            serde_json::from_value::<ImpairDoc>(c.routeplex.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", c.kind));
            assert_eq!(c.routeplex["seed"], 7, "{}", c.kind);
        }
    }

    #[test]
    fn tolerances_are_two_percent_or_three_standard_errors() {
        let cases = cases(7);
        let case = |k: &str| cases.iter().find(|c| c.kind == k).unwrap();
        // 10 % loss over 10,000 frames: 3 s.e. = 0.009, wider than 2 % (0.002).
        let v = verdict(case("loss"), 0.108, 10_000);
        assert_eq!(
            (v["within"].as_bool(), v["bound"].as_str()),
            (Some(true), Some("3 standard errors"))
        );
        assert!((v["tolerance"].as_f64().unwrap() - 0.009).abs() < 1e-12);
        assert_eq!(verdict(case("loss"), 0.110, 10_000)["within"], false);
        // Over 10 million frames 2 % is the wider.
        let v = verdict(case("loss"), 0.1019, 10_000_000);
        assert_eq!((v["within"].as_bool(), v["bound"].as_str()), (Some(true), Some("2 %")));
        // Gilbert-Elliott's correlated states widen it by sqrt((1 + λ) / (1 - λ)).
        let (ge, lo) = (case("loss_gilbert_elliott"), case("loss"));
        let wide = |c: &Case| verdict(c, c.configured, 10_000)["tolerance"].as_f64().unwrap();
        let p = ge.configured;
        let coin = 3.0 * (p * (1.0 - p) / 10_000.0).sqrt();
        assert!((wide(ge) / coin - (1.74f64 / 0.26).sqrt()).abs() < 1e-9);
        assert!(wide(lo) > 0.0);
        // Delays: 20 us, absolute.
        let v = verdict(case("delay"), 1019.0, 10);
        assert_eq!((v["within"].as_bool(), v["relative_error"].is_null()), (Some(true), true));
        assert_eq!(verdict(case("delay"), 979.0, 10)["within"], false);
        // A lab that measured nothing is not within.
        assert_eq!(verdict(case("duplicate"), f64::NAN, 10)["within"], false);
    }
}
