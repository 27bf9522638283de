//! `routeplex bench control-plane`: a full BGP table into a VR through its Linux control
//! plane, while it forwards.
//!
//! Two VRs on one routeplex switch, each with a control plane: `spk`, whose namespace runs a
//! BIRD speaker holding the IPv4 table (the cached real one, `scripts/fetch-prefixes`), and
//! `dut`, whose namespace runs BIRD receiving it over eBGP and exporting it to the namespace's
//! kernel, from which route sync fills the VR. The anchor, in the same run and first: the same
//! speaker announces the same table to the same BIRD configuration in a plain Linux namespace
//! (a veth from the speaker's namespace), and the time until that kernel FIB holds it is
//! `linux_seconds`. Then `dut`'s forwarding rate is measured (64-byte UDP to destinations in
//! the table, flat out on one in-memory port, a static default route sending it out of the
//! other), and during the VR's load the generator offers half that rate:
//! `forwarded_ratio_during` is forwarded / offered from the session's start to the last
//! prefix in the VR's FIB. `seconds_to_full_fib` runs from the first route in the VR's FIB to
//! the last; `linux_seconds` likewise in the namespace's kernel. The anchor loads with the
//! traffic paused, and once more after each of the VR's loads with it running on through the
//! VR (`linux_seconds_same_load`, `ratio_to_linux_same_load`): on a machine with few CPUs the
//! forwarding's own work slows both the same way, so that ratio is the route path's.
//! `mismatches`: routes in the VR (source `kernel`) and in its namespace's kernel table that
//! differ, at the end.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use control::netns::Made;
use control::rtsync::{KernelRouteKind, RouteSync, SyncEvent};
use control::runtime::{Idle, Options};
use control::{Node, Topology};
use dataplane::config::RouteTarget;
use dataplane::RouteSource;
use ipnet::IpNet;
use ports::Batch;
use serde_json::json;
use tester::{Generator, Sink};

use crate::lab::{self, Rng, Table};

/// Options of `routeplex bench control-plane`.
#[derive(clap::Args)]
pub struct Args {
    /// Prefix file of the IPv4 table [default: the cached real table].
    #[arg(long)]
    prefixes: Option<PathBuf>,
    /// Give up waiting for a FIB after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Interleaved pairs of loads (Linux, the VR, Linux, …; the table withdrawn from both
    /// between pairs), 1..=100.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
}

/// What the bench made, removed when dropped: daemons, namespaces, a veth, a directory.
struct Lab {
    daemons: Vec<Child>,
    made: Made,
    namespaces: Vec<String>,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        control::netns::remove(&self.made);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sh(cmd: &str, args: &[&str]) -> Result<()> {
    let o = Command::new(cmd).args(args).output().with_context(|| format!("running {cmd}"))?;
    if !o.status.success() {
        bail!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(())
}

impl Lab {
    fn bird(&mut self, ns: &str, name: &str, conf: &str) -> Result<PathBuf> {
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir)?;
        let cf = dir.join("bird.conf");
        std::fs::write(&cf, conf)?;
        let sock = dir.join("bird.ctl");
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "bird", "-f", "-c"])
            .arg(&cf)
            .arg("-s")
            .arg(&sock)
            .arg("-P")
            .arg(dir.join("bird.pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting bird")?;
        self.daemons.push(child);
        Ok(sock)
    }
}

/// `birdc -s SOCK CMD` in namespace `ns`, retried while BIRD starts (it parses the whole table
/// first).
fn birdc(ns: &str, sock: &Path, cmd: &str, wait_s: u64) -> Result<String> {
    let end = Instant::now() + Duration::from_secs(wait_s);
    loop {
        let o = Command::new("ip")
            .args(["netns", "exec", ns, "birdc", "-s"])
            .arg(sock)
            .arg(cmd)
            .output()?;
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        if o.status.success() && !out.contains("Unable to connect") {
            return Ok(out);
        }
        if Instant::now() > end {
            bail!("birdc {cmd}: {out}{}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn receiver_conf(id: &str, local: &str, peer: &str) -> String {
    format!(
        "router id {id};\nprotocol device {{ scan time 10; }}\n\
         protocol kernel {{ ipv4 {{ export all; import none; }}; }}\n\
         protocol bgp spk {{\n  local {local} as 65001;\n  neighbor {peer} as 65002;\n  \
         ipv4 {{ import all; export none; }};\n}}\n"
    )
}

fn speaker_conf(table: &[(ipnet::Ipv4Net, u32)]) -> String {
    let mut s = String::with_capacity(table.len() * 40);
    s +=
        "router id 198.20.0.2;\nprotocol device { scan time 10; }\nprotocol static s4 {\n  ipv4;\n";
    for (p, _) in table {
        s += "  route ";
        s += &p.to_string();
        s += " blackhole;\n";
    }
    s += "}\n";
    for (name, local, peer) in
        [("dut", "198.20.0.2", "198.20.0.1"), ("lnx", "198.21.0.2", "198.21.0.1")]
    {
        s += &format!(
            "protocol bgp {name} {{\n  disabled;\n  local {local} as 65002;\n  neighbor {peer} as 65001;\n  \
             ipv4 {{ import none; export where source = RTS_STATIC; next hop self; }};\n}}\n"
        );
    }
    s
}

/// Follows a namespace's main table through route sync: its non-kernel IPv4 prefixes.
struct Follow {
    rs: RouteSync,
    have: HashSet<IpNet>,
    events: Vec<SyncEvent>,
}

impl Follow {
    fn open(ns: &str) -> Result<Follow> {
        let rs = RouteSync::open(ns, 256 << 20).map_err(|e| crate::format_err!("{e}"))?;
        Ok(Follow { rs, have: HashSet::new(), events: Vec::new() })
    }

    fn poll(&mut self) -> Result<usize> {
        self.events.clear();
        self.rs.poll(&mut self.events).map_err(|e| crate::format_err!("{e}"))?;
        let keep = |r: &control::rtsync::KernelRoute| {
            r.table == 254 && r.protocol != 2 && matches!(r.prefix, IpNet::V4(_))
        };
        for ev in self.events.drain(..) {
            match ev {
                SyncEvent::Add(r) if keep(&r) => {
                    self.have.insert(r.prefix);
                }
                SyncEvent::Add(_) => {}
                SyncEvent::Del(p, 254) => {
                    self.have.remove(&p);
                }
                SyncEvent::Del(..) => {}
                SyncEvent::Replace(all) => {
                    self.have = all.iter().filter(|r| keep(r)).map(|r| r.prefix).collect();
                }
            }
        }
        Ok(self.have.len())
    }
}

/// Watches a FIB fill: from its first prefix to its last. Done when it holds the whole table,
/// or when it has not grown for [`SETTLE`] (a kernel refuses some prefixes of the real table:
/// 224.0.0.0/4, 240.0.0.0/4, 255.255.255.255/32); the time is to the last growth.
struct Fill {
    n: usize,
    first: Option<Instant>,
    last: (usize, Instant),
    deadline: Instant,
    timeout: u64,
}

const SETTLE: Duration = Duration::from_secs(5);

impl Fill {
    fn new(n: usize, timeout: u64) -> Fill {
        let now = Instant::now();
        Fill {
            n,
            first: None,
            last: (0, now),
            deadline: now + Duration::from_secs(timeout),
            timeout,
        }
    }

    /// Notes that the FIB holds `k`; `Some((seconds, k))` once it is full or settled.
    fn step(&mut self, k: usize) -> Option<Result<(f64, usize)>> {
        let now = Instant::now();
        if k > 0 && self.first.is_none() {
            self.first = Some(now);
        }
        if k != self.last.0 {
            self.last = (k, now);
        }
        let secs =
            |f: Option<Instant>| f.map_or(0.0, |f| self.last.1.duration_since(f).as_secs_f64());
        if k >= self.n || (k > 0 && now.duration_since(self.last.1) > SETTLE) {
            return Some(Ok((secs(self.first), k)));
        }
        if now > self.deadline {
            return Some(Err(crate::format_err!(
                "a FIB holds {k} of {} prefixes after {} s",
                self.n,
                self.timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
        None
    }
}

/// The table withdrawn from the anchor's namespace and loaded again, until it holds what it
/// held in pair 1: the anchor's time, with the traffic paused or running on through the VR as
/// the caller left it. Returns its seconds and the probes before it.
fn reload_linux(
    spk: (&str, &Path),
    lnx: &mut Follow,
    base: usize,
    installed: usize,
    prober: &tester::pairs::Prober,
    timeout: u64,
) -> Result<(f64, tester::pairs::Probes)> {
    birdc(spk.0, spk.1, "disable lnx", 10)?;
    let t = Instant::now();
    while lnx.poll()? > base {
        if t.elapsed() > Duration::from_secs(timeout) {
            bail!("the withdrawn table is still in the anchor's FIB after {timeout} s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let probes = prober.probe();
    birdc(spk.0, spk.1, "enable lnx", 10)?;
    let mut fill = Fill::new(installed, timeout);
    loop {
        if let Some(done) = fill.step(lnx.poll()?) {
            return Ok((done?.0, probes));
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    crate::ensure!(
        control::sys::euid() == 0,
        "bench control-plane needs root (namespaces, taps, BIRD)"
    );
    crate::ensure!((1..=100).contains(&a.pairs), "--pairs {} is outside 1..=100", a.pairs);
    let table = match &a.prefixes {
        Some(p) => Table::from_file(p)?,
        None => match fib::prefix_file::cached(fib::prefix_file::Family::Ipv4) {
            Some(p) => Table::from_file(&p)?,
            None => bail!("no cached IPv4 table: run scripts/fetch-prefixes (or give --prefixes)"),
        },
    };
    let n = table.v4.len();
    crate::ensure!(n > 0, "{}: no IPv4 prefixes", table.label);
    let pid = std::process::id();
    let (dut_ns, spk_ns, lnx_ns) =
        (format!("rcpb{pid}d"), format!("rcpb{pid}s"), format!("rcpb{pid}l"));
    let dir = std::env::temp_dir().join(format!("routeplex-bench-cp-{pid}"));
    std::fs::create_dir(&dir)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let mut lab = Lab { daemons: Vec::new(), made: Made::default(), namespaces: Vec::new(), dir };

    let text = format!(
        "ports:\n  - {{ name: p0, kind: mem, ring: 1024 }}\n  - {{ name: p1, kind: mem, ring: 1024 }}\n\
         switches:\n  - name: bgp\n\
         vrs:\n  - name: dut\n    control_plane: {{ kind: linux, netns: {dut_ns} }}\n    interfaces:\n      \
         - {{ name: eth0, port: p0, mac: \"02:00:00:00:01:00\", addresses: [198.18.0.1/24] }}\n      \
         - {{ name: eth1, port: p1, mac: \"02:00:00:00:01:01\", addresses: [198.19.0.1/24] }}\n      \
         - {{ name: bgp, switch: bgp, mac: \"02:00:00:00:01:02\", addresses: [198.20.0.1/24] }}\n    \
         neighbors:\n      - {{ address: 198.18.0.2, mac: \"02:00:00:00:00:01\", interface: eth0 }}\n      \
         - {{ address: 198.19.0.2, mac: \"02:00:00:00:02:02\", interface: eth1 }}\n    \
         routes:\n      - {{ prefix: 0.0.0.0/0, via: 198.19.0.2 }}\n  \
         - name: spk\n    control_plane: {{ kind: linux, netns: {spk_ns} }}\n    \
         limits: {{ icmp_errors_per_sec: 0 }}\n    interfaces:\n      \
         - {{ name: bgp, switch: bgp, mac: \"02:00:00:00:02:00\", addresses: [198.20.0.2/24] }}\n"
    );
    let topo = Topology::parse(&text, "bench-control-plane.yaml", Path::new("."))?;
    control::netns::make(&topo, &mut lab.made).map_err(|e| crate::format_err!("{e}"))?;
    // The anchor: a plain namespace, joined to the speaker's by a veth.
    sh("ip", &["netns", "add", &lnx_ns])?;
    lab.namespaces.push(lnx_ns.clone());
    sh(
        "ip",
        &[
            "-n", &spk_ns, "link", "add", "lnx", "type", "veth", "peer", "name", "eth0", "netns",
            &lnx_ns,
        ],
    )?;
    sh("ip", &["-n", &spk_ns, "address", "add", "198.21.0.2/24", "dev", "lnx"])?;
    sh("ip", &["-n", &spk_ns, "link", "set", "lnx", "up"])?;
    sh("ip", &["-n", &lnx_ns, "address", "add", "198.21.0.1/24", "dev", "eth0"])?;
    sh("ip", &["-n", &lnx_ns, "link", "set", "eth0", "up"])?;
    sh("ip", &["-n", &lnx_ns, "link", "set", "lo", "up"])?;

    let mut opts = Options::new(1);
    opts.idle = Idle::Yield;
    let mut node = Node::start(topo, opts, ports::MAX_BURST)?;
    let mut p0 = node.take_outside("p0").context("port p0")?;
    let mut p1 = node.take_outside("p1").context("port p1")?;
    let spk_sock = lab.bird(&spk_ns, "speaker", &speaker_conf(&table.v4))?;
    lab.bird(&dut_ns, "dut", &receiver_conf("198.20.0.1", "198.20.0.1", "198.20.0.2"))?;
    lab.bird(&lnx_ns, "lnx", &receiver_conf("198.21.0.1", "198.21.0.1", "198.21.0.2"))?;
    // The speaker has parsed its table once birdc answers.
    let t_parse = Instant::now();
    birdc(&spk_ns, &spk_sock, "show status", 300)?;
    let speaker_load_s = t_parse.elapsed().as_secs_f64();

    // Anchor: the table into a plain namespace's kernel FIB. Pair 1's Linux side.
    let prober = tester::pairs::Prober::new();
    let mut values: Vec<(f64, tester::pairs::Probes, f64, tester::pairs::Probes)> = Vec::new();
    let mut loads = vec![tester::pairs::load_average()];
    // The VR's loads against the anchor's under the same traffic.
    let mut loaded: Vec<(f64, tester::pairs::Probes, f64, tester::pairs::Probes)> = Vec::new();
    let linux_probes = prober.probe();
    let mut lnx = Follow::open(&lnx_ns)?;
    // What the namespace holds without BGP: a withdrawal is over when it is back to this.
    let lnx_base = lnx.poll()?;
    birdc(&spk_ns, &spk_sock, "enable lnx", 10)?;
    let mut fill = Fill::new(n, a.timeout);
    let (linux_seconds, linux_installed) = loop {
        if let Some(done) = fill.step(lnx.poll()?) {
            break done?;
        }
    };

    // The VR's forwarding rate, flat out, then half of it during the load.
    let mut rng = Rng::new(0x5eed);
    let frames =
        lab::udp_frames(table.destinations_v4(65_536, &mut rng)?, "02:00:00:00:01:00".parse()?);
    let stop = Arc::new(AtomicBool::new(false));
    // Set while a later pair loads Linux: its anchor ran with no traffic in pair 1 as well.
    let pause = Arc::new(AtomicBool::new(false));
    let rate = Arc::new(AtomicU64::new(0));
    let offered = Arc::new(AtomicU64::new(0));
    let traffic = {
        let (stop, pause, rate, offered) =
            (stop.clone(), pause.clone(), rate.clone(), offered.clone());
        std::thread::Builder::new().name("rpx-traffic".into()).spawn(move || {
            let mut gen = Generator::new(frames);
            let (mut tx, mut rx, mut sink) =
                (Batch::new(256), Batch::new(ports::MAX_BURST), Sink::default());
            let (mut t0, mut base, mut last_rate) = (Instant::now(), 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                if pause.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    last_rate = u64::MAX;
                    continue;
                }
                let r = rate.load(Ordering::Relaxed);
                if r != last_rate {
                    (t0, base, last_rate) = (Instant::now(), gen.total(), r);
                }
                if r == 0 {
                    gen.send(&mut p0, &mut tx, 256);
                } else {
                    let due = base + (t0.elapsed().as_secs_f64() * r as f64) as u64;
                    let owed = due.saturating_sub(gen.total());
                    if owed > 0 {
                        gen.send(&mut p0, &mut tx, (owed as usize).min(256));
                    } else {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
                offered.store(gen.total(), Ordering::Relaxed);
                sink.recv(&mut p1, &mut rx);
                rx.clear();
            }
        })?
    };
    let forwarded = |node: &Node| -> Result<u64> {
        node.runtime()
            .on_vr("dut", |c, v| c.vrs()[v].counters().forwarded)
            .map_err(|e| crate::format_err!("{e}"))
    };
    std::thread::sleep(Duration::from_millis(300));
    let (f0, t0) = (forwarded(&node)?, Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let vr_pps = (forwarded(&node)? - f0) as f64 / t0.elapsed().as_secs_f64();
    rate.store((vr_pps / 2.0).max(1.0) as u64, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(200));

    // The VR's load.
    let kernel_count = |node: &Node| {
        node.table("dut").map_or(0, |t| {
            t.counts().iter().find(|(s, _)| *s == RouteSource::Kernel).map_or(0, |c| c.1)
        })
    };
    let vr_base = kernel_count(&node);
    let vr_probes = prober.probe();
    let (o0, f0) = (offered.load(Ordering::Relaxed), forwarded(&node)?);
    // Where this process's CPU time went during the VR's first load, to its last prefix (BIRD
    // and the kernel's netlink work are the rest of the machine's).
    let mut sampler = Some(crate::sys::threads::Sampler::start(
        vec![crate::sys::threads::Watch::this_process(
            "bench",
            &[
                ("main", "control (route sync apply)"),
                ("rtsync-dut", "route sync listener"),
                ("worker0", "worker (forwarding)"),
                ("rpx-traffic", "generator and sink"),
            ],
        )],
        Duration::from_millis(20),
    ));
    let mut vr_load_threads = None;
    birdc(&spk_ns, &spk_sock, "enable dut", 10)?;
    let mut fill = Fill::new(n, a.timeout);
    let mut at_full = None;
    let (seconds_to_full_fib, vr_installed) = loop {
        node.sync_control_planes();
        let k = kernel_count(&node);
        if at_full.is_none() && k >= n.min(linux_installed) {
            // The load is over when the last prefix is in; forwarding is measured to there.
            at_full = Some((offered.load(Ordering::Relaxed), forwarded(&node)?));
            vr_load_threads = sampler.take().map(|s| s.finish());
        }
        if let Some(done) = fill.step(k) {
            if done.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            break done?;
        }
    };
    let vr_load_threads =
        vr_load_threads.or_else(|| sampler.map(|s| s.finish())).unwrap_or_default();
    let (o1, f1) = match at_full {
        Some(x) => x,
        None => (offered.load(Ordering::Relaxed), forwarded(&node)?),
    };
    values.push((seconds_to_full_fib, vr_probes, linux_seconds, linux_probes));
    let mut during_ratios = vec![(f1 - f0) as f64 / (o1 - o0).max(1) as f64];
    let spk = (spk_ns.as_str(), spk_sock.as_path());
    let reload =
        |lnx: &mut Follow| reload_linux(spk, lnx, lnx_base, linux_installed, &prober, a.timeout);
    let (ls, lp) = reload(&mut lnx)?;
    loaded.push((seconds_to_full_fib, vr_probes, ls, lp));

    // Pairs 2..: the table withdrawn from both, then loaded into Linux (no traffic), then into
    // the VR (traffic at the same half rate), each until it holds what it held in pair 1.
    for _ in 1..a.pairs {
        birdc(&spk_ns, &spk_sock, "disable dut", 10)?;
        let t = Instant::now();
        loop {
            node.sync_control_planes();
            if kernel_count(&node) <= vr_base {
                break;
            }
            if t.elapsed() > Duration::from_secs(a.timeout) {
                bail!("the withdrawn table is still in the VR's FIB after {} s", a.timeout);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        pause.store(true, Ordering::Relaxed);
        loads.push(tester::pairs::load_average());
        let (ls, lp) = reload(&mut lnx)?;
        pause.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(200));
        let vp = prober.probe();
        let (o0, f0) = (offered.load(Ordering::Relaxed), forwarded(&node)?);
        birdc(&spk_ns, &spk_sock, "enable dut", 10)?;
        let mut fill = Fill::new(vr_installed, a.timeout);
        let (vs, _) = loop {
            node.sync_control_planes();
            if let Some(done) = fill.step(kernel_count(&node)) {
                break done?;
            }
        };
        let (o1, f1) = (offered.load(Ordering::Relaxed), forwarded(&node)?);
        during_ratios.push((f1 - f0) as f64 / (o1 - o0).max(1) as f64);
        values.push((vs, vp, ls, lp));
        let (ls, lp) = reload(&mut lnx)?;
        loaded.push((vs, vp, ls, lp));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = traffic.join();
    drop(lnx);
    let pairs = tester::pairs::Summary::new(
        "VR (seconds_to_full_fib)",
        "Linux (linux_seconds)",
        "s",
        &values,
        &loads,
    );
    let same_load = tester::pairs::Summary::new(
        "VR (seconds_to_full_fib)",
        "Linux under the same traffic (linux_seconds_same_load)",
        "s",
        &loaded,
        &loads,
    );

    // The VR against its namespace's kernel table.
    std::thread::sleep(Duration::from_millis(500));
    node.sync_control_planes();
    let mut ns_routes: Vec<(IpNet, Option<IpAddr>)> = Vec::new();
    {
        let mut rs = RouteSync::open(&dut_ns, 256 << 20).map_err(|e| crate::format_err!("{e}"))?;
        let mut ev = Vec::new();
        rs.poll(&mut ev).map_err(|e| crate::format_err!("{e}"))?;
        for e in ev {
            if let SyncEvent::Replace(all) = e {
                for r in all.into_iter().filter(|r| r.table == 254 && r.protocol != 2) {
                    let gw = match &r.kind {
                        KernelRouteKind::Unicast(h) => h.first().and_then(|h| h.gateway),
                        _ => None,
                    };
                    ns_routes.push((r.prefix, gw));
                }
            }
        }
    }
    let t = node.table("dut").context("the VR's table")?;
    let vr_routes: HashSet<(IpNet, Option<IpAddr>)> = t
        .routes(Some(RouteSource::Kernel), usize::MAX)
        .into_iter()
        .map(|r| {
            let gw = match r.target {
                RouteTarget::Via { gateway, .. } => Some(gateway),
                _ => None,
            };
            (r.prefix, gw)
        })
        .collect();
    let ns_set: HashSet<(IpNet, Option<IpAddr>)> = ns_routes.into_iter().collect();
    let mismatches = vr_routes.symmetric_difference(&ns_set).count();
    let fib_bytes = t.fib_bytes();
    let (offered_during, forwarded_during) = (o1 - o0, f1 - f0);
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = json!({
        "prefixes": n,
        "installed": vr_installed,
        "linux_installed": linux_installed,
        "seconds_to_full_fib": pairs.a.median,
        "linux_seconds": pairs.b.median,
        "ratio_to_linux": pairs.ratio.median,
        "pairs": pairs,
        "linux_seconds_same_load": same_load.b.median,
        "ratio_to_linux_same_load": same_load.ratio.median,
        "pairs_same_load": same_load,
        "forwarded_ratio_during_each_pair": during_ratios,
        "fib_bytes": fib_bytes,
        "forwarded_ratio_during": forwarded_during as f64 / offered_during.max(1) as f64,
        "offered_during": offered_during,
        "forwarded_during": forwarded_during,
        "offered_pps": vr_pps / 2.0,
        "vr_pps": vr_pps,
        "mismatches": mismatches,
        "speaker_load_s": speaker_load_s,
        "table": table.label,
        "bird": "BIRD 2 (the distribution's), same configuration in the VR's namespace and the anchor's; one speaker, eBGP",
        "online_cpus": online,
        "threads": "worker (forwarding), generator+sink, control (route sync apply), route sync listener, BIRD x3, the kernels' netlink work: more busy threads than CPUs, none pinned",
        "vr_load_threads": vr_load_threads.to_json(),
        "limited_by": if online < 4 {
            "cpu: the worker, the generator, route sync, BIRD and the kernel share few CPUs, so the load takes CPU time from forwarding and the reverse"
        } else {
            "route sync and the kernel install"
        },
        "method": "interleaved pairs (--pairs): Linux, then the VR, then the table withdrawn from both (BGP sessions disabled at the speaker) and again; a fixed memory probe (dependent random reads over 8 MiB) and compute probe timed before each load; seconds_to_full_fib and linux_seconds are the medians over the pairs, ratio_to_linux the median of the per-pair ratios VR / Linux (pairs.ratio has min and max; lower is better); a pair is flagged when its two loads' probes differ by more than 10 %; in every pair Linux loads with the traffic paused and the VR with it at half the VR's rate; after pair 1 each load runs until its FIB holds what it held in pair 1. After the VR's load in each pair the table is withdrawn from the anchor and loaded into it again with the traffic running on through the VR (the machine as loaded as during the VR's own load): linux_seconds_same_load and ratio_to_linux_same_load (pairs_same_load) compare with that, so the share of the ratio that is the two CPUs' contention shows apart from the route path's. linux_seconds and seconds_to_full_fib each run from the first route to the last in their FIB (the namespace's kernel table; the VR's kernel-source routes), the last being the table or, where a kernel refuses some prefixes (224/4, 240/4, 255.255.255.255/32), the last growth before 5 s without any (installed, linux_installed); forwarded_ratio_during (pair 1; each pair's in forwarded_ratio_during_each_pair) runs from the session's enable to the last prefix",
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
        println!("time to a full FIB, the VR against Linux, {} interleaved pairs:", a.pairs);
        for l in pairs.lines() {
            println!("{l}");
        }
        println!("the VR against Linux under the same traffic:");
        for l in same_load.lines() {
            println!("{l}");
        }
        println!(
            "this process's threads during the VR's first load: {}",
            vr_load_threads.summary()
        );
    }
    node.stop()?;
    drop(lab);
    crate::ensure!(mismatches == 0, "{mismatches} routes differ between the VR and its namespace");
    Ok(())
}
