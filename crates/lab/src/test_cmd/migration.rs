//! `routeplex test migration`: seed 003's live-migration measurement for a routeplex VR
//! (root). Two data planes (`routeplex run`), each in a network namespace, joined by a
//! migration link (a veth pair); the VR's neighbors, hosts a and b, and both data planes' ports
//! on one L2 segment (a Linux bridge in a namespace of its own). Host a sends sequence-numbered
//! UDP streams (64 B and 1500 B frames, seed 003's cross traffic) to host b through the VR and
//! pings b across it, while `routeplex migrate` moves the VR from one data plane to the other
//! (and back at the next repetition), with 0, 10k or the real ~509k routes.
//!
//! Per case and frame size, over the repetitions (mean and 99 % CI): `downtime_ms` (the
//! longest gap between two packets at the sink during the move), `lost`, `reordered`,
//! `total_ms` and `bytes_moved` (from `migrate`), `rtt_during_ms` (p50/p99 of the pings
//! answered during the move); with seed 003's figures next to them. `gen_gap_ms` is the
//! generator's own longest pause (a loaded host delays it, and the sink's gap with it).
//! `handoff_gap_ms` is the gap on the data planes' own clock: from the last transit frame the
//! source VR sent (its worker's poll, read at the stop: `migrate`'s `last_sent_ns`) to the
//! first the destination VR sent (`status`'s `first_sent_ns`), both on CLOCK_MONOTONIC; no
//! host stack, generator or sink is in it.
//!
//! The integration test `tests/it/migration.rs` runs this command, so the namespaces it builds
//! are the ones measured here. Every name starts with `rsm` and ends with a tag unique to the
//! run (pid and counter); everything is removed on drop, even on failure.

use std::io::Write as _;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use tester::plot::{self, XScale, XySeries};
use tester::stats::ci_half_width;

pub(super) const SECRET: &str = "7d1c9e0a4b2f68e3a5c7d9e1f3b5a7c9";
/// The two data planes' addresses on the migration link, and the port each listens on.
pub(super) const LINK: [&str; 2] = ["10.255.0.1", "10.255.0.2"];
pub(super) const MIGRATION_PORT: u16 = 9470;
/// Traffic before the move and after it returns.
const LEAD: Duration = Duration::from_millis(300);
const TAIL: Duration = Duration::from_millis(600);
/// Seed 003's figures.
const SEED_KVM_DOWNTIME_MS: f64 = 170.0;
const SEED_XEN_DOWNTIME_MS: (f64, f64) = (3000.0, 7000.0);
const SEED_QEMU_TARGET_MS: f64 = 300.0;

/// `routeplex test migration`.
#[derive(Args, Debug, Clone)]
pub struct MigrationArgs {
    /// Repetitions per case.
    #[arg(long, default_value_t = 10)]
    pub reps: usize,
    /// Route counts, comma-separated: numbers (k, M suffixes) or `real` (the cached Internet
    /// table of scripts/fetch-prefixes; generated prefixes when it is not cached).
    #[arg(long, default_value = "0,10k,real")]
    pub routes: String,
    /// Frame sizes of the streams (bytes without FCS), comma-separated.
    #[arg(long, default_value = "64,1500")]
    pub frames: String,
    /// Packets per second of each stream.
    #[arg(long, default_value_t = 5000)]
    pub rate: u32,
    /// The data planes' port on the segment: `afpacket` (frames handed over in blocks the
    /// kernel closes each millisecond at low rates) or `afxdp` (copy mode on the veth).
    #[arg(long, default_value = "afpacket", value_parser = ["afpacket", "afxdp"])]
    pub ports: String,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Where to write the JSON, CSV, table and plot (default:
    /// $XDG_CACHE_HOME/routeplex/scenario-results/migration, or ~/.cache/..., or the temp
    /// dir's).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// What a run is about, for its report (`routeplex test scenario` fills it from the file).
pub struct About {
    pub name: String,
    pub title: String,
    pub about: String,
    pub reproduces: String,
    pub quick: bool,
}

impl About {
    fn command() -> About {
        About {
            name: "migration".into(),
            title: "Live migration of a VR between two hosts under traffic".into(),
            about: "routeplex test migration: a VR moved between two data planes in network \
                    namespaces while streams and pings cross it. Differences from seed 003: \
                    a router's state instead of a VM's memory; both hosts on one machine, \
                    joined by a veth pair."
                .into(),
            reproduces: "seed 003 (live migration: downtime, total time, bytes moved, RTT)".into(),
            quick: false,
        }
    }
}

fn count(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1_000),
        (i, 'M') => (&s[..i], 1_000_000),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// A route count: a number, or the real table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routes {
    N(u64),
    Real,
}

impl Routes {
    pub fn parse(s: &str) -> Option<Routes> {
        match s.trim() {
            "real" => Some(Routes::Real),
            s => count(s).filter(|&n| n <= 2_000_000).map(Routes::N),
        }
    }

    fn label(self) -> String {
        match self {
            Routes::Real => "real".into(),
            Routes::N(n) if n >= 1000 && n % 1000 == 0 => format!("{}k", n / 1000),
            Routes::N(n) => n.to_string(),
        }
    }
}

fn list<T>(flag: &str, s: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>> {
    let v: Vec<T> = s
        .split(',')
        .map(|x| f(x).with_context(|| format!("{flag}: {x:?} is not valid")))
        .collect::<Result<_>>()?;
    if v.is_empty() {
        bail!("{flag}: empty");
    }
    Ok(v)
}

/// The run's parameters, checked.
pub struct Plan {
    pub reps: usize,
    pub routes: Vec<Routes>,
    pub frames: Vec<usize>,
    pub rate: u32,
    /// The port kind of the data planes' `seg`.
    pub ports: &'static str,
}

impl Plan {
    pub fn of(a: &MigrationArgs) -> Result<Plan> {
        if !(1..=1000).contains(&a.reps) {
            bail!("--reps {}: 1..=1000", a.reps);
        }
        if !(100..=200_000).contains(&a.rate) {
            bail!("--rate {}: 100..=200000 packets per second", a.rate);
        }
        Ok(Plan {
            reps: a.reps,
            routes: list("--routes", &a.routes, Routes::parse)?,
            frames: list("--frames", &a.frames, |s| {
                s.trim().parse::<usize>().ok().filter(|n| (64..=1514).contains(n))
            })?,
            rate: a.rate,
            ports: if a.ports == "afxdp" { "afxdp" } else { "afpacket" },
        })
    }
}

fn sh(args: &[&str]) -> Result<Output> {
    Command::new(args[0]).args(&args[1..]).output().with_context(|| format!("{args:?}"))
}

pub(super) fn ok(args: &[&str]) -> Result<()> {
    let o = sh(args)?;
    if !o.status.success() {
        bail!(
            "{}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(())
}

static LABS: AtomicUsize = AtomicUsize::new(0);

/// The namespaces, links and daemons of one case; removed on drop.
pub struct Lab {
    t: String,
    pub dir: PathBuf,
    daemons: Vec<Child>,
    made: Vec<String>,
    /// Per data plane (s, d): its topology file and state directory.
    pub planes: Vec<(PathBuf, PathBuf)>,
}

/// The data planes' namespaces, by index.
const PLANES: [&str; 2] = ["s", "d"];

impl Lab {
    pub fn ns(&self, n: &str) -> String {
        format!("rsm{n}{}", self.t)
    }

    pub(super) fn nsx(&self, n: &str, args: &[&str]) -> Result<()> {
        let ns = self.ns(n);
        let mut all = vec!["ip", "netns", "exec", ns.as_str()];
        all.extend(args);
        ok(&all)
    }

    /// Namespaces s and d (data planes), a and b (hosts), w (the bridge); the segment and the
    /// migration link.
    pub fn new() -> Result<Lab> {
        let k = LABS.fetch_add(1, Ordering::Relaxed);
        let t = format!("{:x}{k}", std::process::id() % 0xffff);
        let dir = std::env::temp_dir().join(format!("rsm-migr-{t}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        let mut lab = Lab { t, dir, daemons: Vec::new(), made: Vec::new(), planes: Vec::new() };
        for n in ["s", "d", "a", "b", "w"] {
            ok(&["ip", "netns", "add", &lab.ns(n)])?;
            lab.made.push(lab.ns(n));
        }
        let w = lab.ns("w");
        lab.nsx("w", &["ip", "link", "add", "br0", "type", "bridge"])?;
        lab.nsx("w", &["ip", "link", "set", "br0", "up"])?;
        // Checksums and segments made by the kernel, not left to an offload that a packet
        // socket would carry on half done.
        let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
        for n in ["s", "d", "a", "b"] {
            let inner = if n == "s" || n == "d" { "seg" } else { "eth0" };
            let (ns, bp) = (lab.ns(n), format!("p{n}"));
            ok(&[
                "ip", "link", "add", "rsmv", "netns", &ns, "type", "veth", "peer", "name", &bp,
                "netns", &w,
            ])?;
            lab.nsx(n, &["ip", "link", "set", "rsmv", "name", inner])?;
            lab.nsx(n, &["ip", "link", "set", inner, "up"])?;
            lab.nsx("w", &["ip", "link", "set", &bp, "master", "br0", "up"])?;
            lab.nsx(n, &[&["ethtool", "-K", inner][..], &off].concat())?;
            lab.nsx("w", &[&["ethtool", "-K", bp.as_str()][..], &off].concat())?;
        }
        lab.nsx("a", &["ip", "addr", "add", "10.70.1.2/24", "dev", "eth0"])?;
        lab.nsx("a", &["ip", "route", "add", "default", "via", "10.70.1.1"])?;
        lab.nsx("b", &["ip", "addr", "add", "10.70.2.2/24", "dev", "eth0"])?;
        lab.nsx("b", &["ip", "route", "add", "default", "via", "10.70.2.1"])?;
        let (s, d) = (lab.ns("s"), lab.ns("d"));
        ok(&[
            "ip", "link", "add", "mig", "netns", &s, "type", "veth", "peer", "name", "mig",
            "netns", &d,
        ])?;
        for (n, a) in [("s", LINK[0]), ("d", LINK[1])] {
            lab.nsx(n, &["ip", "addr", "add", &format!("{a}/30"), "dev", "mig"])?;
            lab.nsx(n, &["ip", "link", "set", "mig", "up"])?;
            lab.nsx(n, &["ip", "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    /// Starts both data planes: the VR at s (with `routes` routes via host b), none at d; each
    /// listens for migrations from the other.
    pub fn start(&mut self, routes: Routes, ports: &str) -> Result<()> {
        let table = write_routes(&self.dir, routes)?;
        let tables = match &table {
            Some(f) => format!(
                "    tables:\n      - {{ file: {}, next_hops: [10.70.2.2] }}\n",
                f.display()
            ),
            None => String::new(),
        };
        for (k, n) in PLANES.iter().enumerate() {
            let mut y = format!(
                "workers: 1\nmigration: {{ listen: {}:{MIGRATION_PORT}, secret: {SECRET}, peers: [{}] }}\n",
                LINK[k],
                LINK[1 - k]
            );
            if k == 0 {
                y += &format!(
                    r#"ports:
  - {{ name: seg, kind: {ports}, interface: seg }}
vrs:
  - name: r
    interfaces:
      - {{ name: e1, port: seg, mac: "02:00:00:00:70:01", addresses: [10.70.1.1/24] }}
      - {{ name: e2, port: seg, mac: "02:00:00:00:70:02", addresses: [10.70.2.1/24] }}
{tables}"#
                );
            }
            let p = self.daemon(n, &y)?;
            self.planes.push(p);
        }
        Ok(())
    }

    /// Starts a data plane in namespace `n` from `yaml`; its topology file and state directory.
    pub(super) fn daemon(&mut self, n: &str, yaml: &str) -> Result<(PathBuf, PathBuf)> {
        let file = self.dir.join(format!("{n}.yaml"));
        std::fs::write(&file, yaml)?;
        let state = self.dir.join(format!("state-{n}"));
        std::fs::create_dir_all(&state)?;
        let log = std::fs::File::create(self.dir.join(format!("{n}.log")))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(n)])
            .arg(std::env::current_exe()?)
            .arg("run")
            .arg(&file)
            .arg("--state-dir")
            .arg(&state)
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()?;
        self.daemons.push(child);
        let t0 = Instant::now();
        while !state.join("control.sock").exists() {
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("data plane {n} did not start: {}", self.log(n));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok((file, state))
    }

    /// The data planes' process ids (`ip netns exec` execs the daemon in its place).
    pub fn pids(&self) -> Vec<u32> {
        self.daemons.iter().map(Child::id).collect()
    }

    pub fn log(&self, n: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{n}.log"))).unwrap_or_default()
    }

    fn routeplex(&self, n: &str, args: &[&str]) -> Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(n)])
            .arg(std::env::current_exe()?)
            .args(args)
            .output()
            .context("routeplex")
    }

    /// The status of data plane `k`.
    fn status(&self, k: usize) -> Result<Value> {
        let (f, s) = &self.planes[k];
        let o = self.routeplex(
            PLANES[k],
            &[
                "status",
                &f.display().to_string(),
                "--json",
                "--state-dir",
                &s.display().to_string(),
            ],
        )?;
        serde_json::from_slice(&o.stdout)
            .with_context(|| format!("status: {}", String::from_utf8_lossy(&o.stderr)))
    }

    /// Every data plane's `status`, in plane order.
    pub fn statuses(&self) -> Result<Vec<Value>> {
        (0..PLANES.len()).map(|k| self.status(k)).collect()
    }

    /// Waits until host a reaches host b through the VR.
    pub fn warm_up(&self) -> Result<()> {
        let t0 = Instant::now();
        let a = self.ns("a");
        while !sh(&["ip", "netns", "exec", &a, "ping", "-c1", "-W1", "10.70.2.2"])?.status.success()
        {
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("no path through the VR: {}", self.log("s"));
            }
        }
        Ok(())
    }

    /// `routeplex migrate` from data plane `from` to the other; its JSON.
    pub fn migrate(&self, from: usize) -> Result<Value> {
        self.migrate_vr(from, "r")
    }

    /// `routeplex migrate` of VR `vr` from data plane `from` to the other; its JSON.
    pub fn migrate_vr(&self, from: usize, vr: &str) -> Result<Value> {
        let (f, s) = &self.planes[from];
        let to = format!("{}:{MIGRATION_PORT}", LINK[1 - from]);
        let m = self.routeplex(
            PLANES[from],
            &[
                "migrate",
                &f.display().to_string(),
                vr,
                "--to",
                &to,
                "--state-dir",
                &s.display().to_string(),
            ],
        )?;
        if !m.status.success() {
            bail!(
                "migrate: {}{}\n{}",
                String::from_utf8_lossy(&m.stdout),
                String::from_utf8_lossy(&m.stderr),
                self.log(PLANES[1 - from])
            );
        }
        serde_json::from_slice(&m.stdout).context("migrate's JSON")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.daemons {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.made {
            let _ = sh(&["ip", "netns", "del", n]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The VR's routes as a prefix file (`None` for none): the first `n` of the cached real table
/// (all of it for `real`), else generated /24s.
fn write_routes(dir: &Path, routes: Routes) -> Result<Option<PathBuf>> {
    if routes == Routes::N(0) {
        return Ok(None);
    }
    let cached = fib::prefix_file::cached(fib::prefix_file::Family::Ipv4);
    let mut lines: Vec<String> = match &cached {
        Some(p) => std::fs::read_to_string(p)?
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
            .collect(),
        None => Vec::new(),
    };
    let want = match routes {
        Routes::N(n) => n as usize,
        Routes::Real if !lines.is_empty() => lines.len(),
        Routes::Real => 509_000,
    };
    if lines.len() < want {
        lines = (0..want as u32)
            .map(|i| format!("{}.{}.{}.0/24", 20 + (i >> 16), (i >> 8) & 255, i & 255))
            .collect();
    }
    let file = dir.join("routes.txt");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&file)?);
    for l in &lines[..want] {
        writeln!(w, "{l} 1")?;
    }
    w.flush()?;
    Ok(Some(file))
}

/// Runs `f` on a thread inside namespace `ns` (setns(2) moves only the calling thread).
pub(super) fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> std::thread::JoinHandle<Result<T>> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).with_context(|| path.clone())?;
        crate::sys::setns_net(fd.as_raw_fd()).with_context(|| format!("setns {path}"))?;
        f()
    })
}

/// What one stream's sink saw.
#[derive(Clone, Debug, Default)]
pub struct StreamResult {
    pub frame: usize,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    /// Longest gap between two arrivals while the move ran (ms).
    pub downtime_ms: f64,
    /// The generator's longest pause between two sends (ms).
    pub gen_gap_ms: f64,
    /// When the first and last lost packets were due to be sent, in ms from the start of the
    /// move (negative: before it), if any was lost.
    pub lost_window_ms: Option<(f64, f64)>,
    /// Datagrams host b's kernel dropped because a sink fell behind (all streams together):
    /// counted in `lost` too.
    pub sink_drops: u64,
}

/// One repetition.
#[derive(Clone, Debug, Default)]
pub struct Rep {
    pub streams: Vec<StreamResult>,
    pub migrate: Value,
    pub rtt: Vec<f64>,
    pub pings_lost: u64,
    /// Frames the data planes' ports dropped during the repetition.
    pub port_drops: u64,
    /// The destination's last report of its handoff tunnel (`key=value` of its log line).
    pub tunnel: Value,
    /// The source VR's last transit frame to the destination VR's first, on the data planes'
    /// own clock (CLOCK_MONOTONIC, one machine): `migrate`'s `last_sent_ns` to the
    /// destination's `first_sent_ns` (ms); `None` if either sent none.
    pub handoff_gap_ms: Option<f64>,
}

fn now_epoch() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Datagrams host b's kernel dropped for a full socket buffer so far (all sockets).
pub(super) fn udp_errors(lab: &Lab) -> u64 {
    let out = sh(&["ip", "netns", "exec", &lab.ns("b"), "cat", "/proc/net/snmp"])
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let udp: Vec<&str> = out.lines().filter(|l| l.starts_with("Udp: ")).collect();
    udp.first()
        .and_then(|h| h.split_whitespace().position(|k| k == "RcvbufErrors"))
        .and_then(|k| udp.get(1)?.split_whitespace().nth(k)?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Frames the ports of the data planes in `statuses` lost or refused so far (a full receive
/// ring, the kernel's drops, demux's), all ports together.
fn port_drops(statuses: &[Value]) -> u64 {
    let ports = statuses.iter().flat_map(|st| st["ports"].as_array().into_iter().flatten());
    ports
        .map(|p| {
            let drops = p["drops"].as_object();
            p["rx_dropped"].as_u64().unwrap_or(0)
                + p["tx_full"].as_u64().unwrap_or(0)
                + drops.map_or(0, |d| d.values().filter_map(Value::as_u64).sum::<u64>())
        })
        .sum()
}

/// The VRs a data plane's `status` lists.
fn vr_names(status: &Value) -> Vec<String> {
    let rows = status["vrs"].as_array().into_iter().flatten();
    rows.filter_map(|v| v["name"].as_str().map(String::from)).collect()
}

/// When VR `vr` in a data plane's `status` first sent a transit frame (CLOCK_MONOTONIC ns).
fn first_sent_ns(status: &Value, vr: &str) -> Option<u64> {
    let mut rows = status["vrs"].as_array().into_iter().flatten();
    rows.find(|r| r["name"] == vr).and_then(|r| r["first_sent_ns"].as_u64())
}

/// One move from data plane `from` under traffic.
pub fn rep(lab: &Lab, plan: &Plan, from: usize) -> Result<Rep> {
    let interval = Duration::from_secs_f64(1.0 / plan.rate as f64);
    let drops0 = udp_errors(lab);
    let stop = Arc::new(AtomicBool::new(false));
    let mut sinks = Vec::new();
    for (k, &frame) in plan.frames.iter().enumerate() {
        sinks.push(in_netns(&lab.ns("b"), move || {
            let s = UdpSocket::bind(("10.70.2.2", 7000 + k as u16))?;
            // Room for a second and more of the stream: a loaded host can stall the sink
            // that long, and what its kernel drops then is not the VR's loss.
            control::sys::set_rcvbuf(&s, 32 << 20)?;
            // The first datagram may be late (a loaded host starts the generator late); after
            // it, a pause this long ends the stream.
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut got: Vec<(u64, Instant)> = Vec::with_capacity(1 << 16);
            let mut buf = vec![0u8; 2048];
            while let Ok(n) = s.recv(&mut buf) {
                s.set_read_timeout(Some(Duration::from_millis(800)))?;
                if n >= 8 {
                    got.push((u64::from_le_bytes(buf[..8].try_into()?), Instant::now()));
                }
            }
            Ok((frame, got))
        }));
    }
    std::thread::sleep(Duration::from_millis(100));
    let frames = plan.frames.clone();
    let st = stop.clone();
    let gen = in_netns(&lab.ns("a"), move || {
        let socks: Vec<UdpSocket> = (0..frames.len())
            .map(|k| {
                let s = UdpSocket::bind("10.70.1.2:0")?;
                s.connect(("10.70.2.2", 7000 + k as u16))?;
                Ok(s)
            })
            .collect::<Result<_>>()?;
        // Frame size less Ethernet, IPv4 and UDP headers (no FCS on a veth).
        let payloads: Vec<Vec<u8>> = frames.iter().map(|f| vec![0u8; f - 42]).collect();
        let mut payloads = payloads;
        let t0 = Instant::now();
        let (mut seq, mut last, mut gap) = (0u64, t0, Duration::ZERO);
        while !st.load(Ordering::Relaxed) {
            let due = interval * seq as u32;
            while t0.elapsed() < due {
                std::hint::spin_loop();
            }
            let now = Instant::now();
            gap = gap.max(now - last);
            last = now;
            for (s, p) in socks.iter().zip(payloads.iter_mut()) {
                p[..8].copy_from_slice(&seq.to_le_bytes());
                let _ = s.send(p);
            }
            seq += 1;
        }
        Ok((seq, gap, t0))
    });
    let ping = Command::new("ip")
        .args(["netns", "exec", &lab.ns("a"), "ping", "-n", "-D", "-i", "0.005", "10.70.2.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let ping = KillOnDrop(ping);
    std::thread::sleep(LEAD);
    let (t_start, e_start) = (Instant::now(), now_epoch());
    let migrated = lab.migrate(from);
    let (t_end, e_end) = (Instant::now(), now_epoch());
    std::thread::sleep(TAIL);
    stop.store(true, Ordering::Relaxed);
    let (sent, gen_gap, gen_t0) =
        gen.join().map_err(|_| crate::format_err!("generator panicked"))??;
    let mut ping = ping;
    // SIGINT: ping flushes its lines (a pipe is block-buffered) and exits.
    crate::sys::kill(ping.0.id(), libc::SIGINT);
    let out = ping.output()?;
    let migrate = migrated?;
    let mut streams = Vec::new();
    for s in sinks {
        let (frame, got) = s.join().map_err(|_| crate::format_err!("sink panicked"))??;
        let mut r = judge(frame, sent, &got, t_start, t_end, gen_gap);
        r.lost_window_ms = lost_window(&got, sent, gen_t0, interval, t_start);
        streams.push(r);
    }
    // Host b's kernel counts them for all its sockets together.
    let drops = udp_errors(lab).saturating_sub(drops0);
    streams.iter_mut().for_each(|s| s.sink_drops = drops);
    let (rtt, pings_lost) = pings(&out, e_start, e_end);
    Ok(Rep {
        streams,
        migrate,
        rtt,
        pings_lost,
        port_drops: 0,
        tunnel: Value::Null,
        handoff_gap_ms: None,
    })
}

/// The numbers of the last "handoff tunnel" line of a data plane's log.
fn tunnel_line(log: &str) -> Value {
    let Some(l) = log.lines().rev().find(|l| l.contains("handoff tunnel")) else {
        return Value::Null;
    };
    let m: serde_json::Map<String, Value> = l
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), json!(v.parse::<u64>().ok()?))))
        .collect();
    Value::Object(m)
}

struct KillOnDrop(Child);

impl KillOnDrop {
    fn output(&mut self) -> Result<String> {
        let mut s = String::new();
        if let Some(mut o) = self.0.stdout.take() {
            use std::io::Read;
            o.read_to_string(&mut s)?;
        }
        let _ = self.0.wait();
        Ok(s)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A stream's figures from what its sink got: `(seq, arrival)` in arrival order.
pub fn judge(
    frame: usize,
    sent: u64,
    got: &[(u64, Instant)],
    start: Instant,
    end: Instant,
    gen_gap: Duration,
) -> StreamResult {
    let mut seen = vec![false; sent as usize];
    let (mut reordered, mut dup, mut max) = (0, 0, None::<u64>);
    for &(s, _) in got {
        match seen.get_mut(s as usize) {
            Some(x) if *x => dup += 1,
            Some(x) => *x = true,
            None => continue,
        }
        if max.is_some_and(|m| s < m) {
            reordered += 1;
        }
        max = max.max(Some(s));
    }
    let received = seen.iter().filter(|x| **x).count() as u64;
    // The gap that spans or touches the move: from the last arrival before it started.
    let gap = got
        .windows(2)
        .filter(|w| w[1].1 >= start && w[0].1 <= end + Duration::from_millis(300))
        .map(|w| w[1].1 - w[0].1)
        .max()
        .unwrap_or_default();
    StreamResult {
        frame,
        sent,
        received,
        lost: sent - received,
        reordered,
        duplicates: dup,
        downtime_ms: gap.as_secs_f64() * 1e3,
        gen_gap_ms: gen_gap.as_secs_f64() * 1e3,
        lost_window_ms: None,
        sink_drops: 0,
    }
}

/// See [`StreamResult::lost_window_ms`].
fn lost_window(
    got: &[(u64, Instant)],
    sent: u64,
    t0: Instant,
    interval: Duration,
    start: Instant,
) -> Option<(f64, f64)> {
    let mut seen = vec![false; sent as usize];
    got.iter().for_each(|&(s, _)| {
        if let Some(x) = seen.get_mut(s as usize) {
            *x = true;
        }
    });
    let first = seen.iter().position(|x| !x)? as u32;
    let last = seen.iter().rposition(|x| !x)? as u32;
    let at = |k: u32| {
        let due = t0 + interval * k;
        due.saturating_duration_since(start).as_secs_f64() * 1e3
            - start.saturating_duration_since(due).as_secs_f64() * 1e3
    };
    Some((at(first), at(last)))
}

/// RTTs (ms) of the pings answered between `from` and `to` (epoch seconds), and how many
/// sequence numbers are missing among all.
fn pings(out: &str, from: f64, to: f64) -> (Vec<f64>, u64) {
    let (mut rtt, mut seqs) = (Vec::new(), Vec::new());
    for l in out.lines() {
        let Some(ts) = l.strip_prefix('[').and_then(|l| l.split(']').next()) else { continue };
        let Ok(ts) = ts.parse::<f64>() else { continue };
        let field = |k: &str| l.split_whitespace().find_map(|w| w.strip_prefix(k));
        if let Some(s) = field("icmp_seq=").and_then(|s| s.parse::<u64>().ok()) {
            seqs.push(s);
        }
        if let Some(t) = field("time=").and_then(|t| t.parse::<f64>().ok()) {
            if ts >= from && ts <= to + 0.3 {
                rtt.push(t);
            }
        }
    }
    let lost = match (seqs.iter().min(), seqs.iter().max()) {
        (Some(a), Some(b)) => (b - a + 1).saturating_sub(seqs.len() as u64),
        _ => 0,
    };
    (rtt, lost)
}

fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(s[((p / 100.0) * (s.len() - 1) as f64).round() as usize])
}

fn stat(xs: &[f64]) -> Value {
    if xs.is_empty() {
        return json!({ "mean": null, "ci99": null, "values": [] });
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    json!({ "mean": mean, "ci99": ci_half_width(xs, 0.99), "min": xs.iter().copied().fold(f64::INFINITY, f64::min), "max": xs.iter().copied().fold(f64::NEG_INFINITY, f64::max), "values": xs })
}

/// One case: its lab, its repetitions.
fn case(plan: &Plan, routes: Routes, quiet: bool) -> Result<Vec<Rep>> {
    let mut lab = Lab::new()?;
    lab.start(routes, plan.ports)?;
    lab.warm_up()?;
    let mut reps = Vec::new();
    for k in 0..plan.reps {
        let from = k % 2;
        let drops0 = port_drops(&lab.statuses()?);
        let mut r = rep(&lab, plan, from)?;
        // Both planes asked once after the move: the drops, where the VR is, and when the
        // destination's VR first sent.
        let after = lab.statuses()?;
        r.port_drops = port_drops(&after).saturating_sub(drops0);
        let first = first_sent_ns(&after[1 - from], "r");
        r.handoff_gap_ms =
            first.zip(r.migrate["last_sent_ns"].as_u64()).map(|(f, l)| (f as f64 - l as f64) / 1e6);
        let (at_from, at_to) = (vr_names(&after[from]), vr_names(&after[1 - from]));
        if at_from.iter().any(|v| v == "r") || !at_to.iter().any(|v| v == "r") {
            bail!(
                "after the move the VR is at {at_from:?} / {at_to:?}, not only at the destination"
            );
        }
        if !quiet {
            let s: Vec<String> = r
                .streams
                .iter()
                .map(|s| {
                    format!(
                        "{} B: lost {} reordered {} gap {:.2} ms",
                        s.frame, s.lost, s.reordered, s.downtime_ms
                    )
                })
                .collect();
            eprintln!(
                "migration: {} routes, rep {}/{}: total {:.1} ms, handoff gap {}, {}",
                routes.label(),
                k + 1,
                plan.reps,
                r.migrate["total_ms"].as_f64().unwrap_or(f64::NAN),
                r.handoff_gap_ms.map_or("-".into(), |g| format!("{g:.3} ms")),
                s.join("; ")
            );
        }
        // Let the announcements' rounds and the source's drain end before the next move.
        std::thread::sleep(Duration::from_millis(300));
        r.tunnel = tunnel_line(&lab.log(PLANES[1 - from]));
        reps.push(r);
    }
    Ok(reps)
}

/// A row of the report: one case and frame size over its repetitions.
fn point(routes: Routes, n_routes: u64, frame: usize, k: usize, reps: &[Rep]) -> Value {
    let s = |f: &dyn Fn(&Rep) -> f64| reps.iter().map(f).collect::<Vec<f64>>();
    let m = |r: &Rep, key: &str| r.migrate[key].as_f64().unwrap_or(f64::NAN);
    let p50: Vec<f64> = reps.iter().filter_map(|r| percentile(&r.rtt, 50.0)).collect();
    let p99: Vec<f64> = reps.iter().filter_map(|r| percentile(&r.rtt, 99.0)).collect();
    let downtime = s(&|r| r.streams[k].downtime_ms);
    let lost = s(&|r| r.streams[k].lost as f64);
    let reordered = s(&|r| r.streams[k].reordered as f64);
    let total = s(&|r| m(r, "total_ms"));
    let bytes = s(&|r| m(r, "bytes_moved"));
    let mean =
        |v: &[f64]| if v.is_empty() { None } else { Some(v.iter().sum::<f64>() / v.len() as f64) };
    json!({
        "label": format!("{} routes, {frame} B", routes.label()),
        "routes": n_routes,
        "routes_label": routes.label(),
        "frame_size": frame,
        "downtime_ms": stat(&downtime),
        "lost": stat(&lost),
        "reordered": stat(&reordered),
        "total_ms": stat(&total),
        "bytes_moved": stat(&bytes),
        "rtt_during_ms": { "p50": stat(&p50), "p99": stat(&p99) },
        "stop_ms": stat(&s(&|r| m(r, "stop_ms"))),
        "handoff_gap_ms": stat(&reps.iter().filter_map(|r| r.handoff_gap_ms).collect::<Vec<_>>()),
        "forwarded": stat(&s(&|r| m(r, "forwarded"))),
        "gen_gap_ms": stat(&s(&|r| r.streams[k].gen_gap_ms)),
        "duplicates": stat(&s(&|r| r.streams[k].duplicates as f64)),
        "sink_drops": stat(&s(&|r| r.streams[k].sink_drops as f64)),
        "pings_lost": stat(&s(&|r| r.pings_lost as f64)),
        "tunnel_frames_in": stat(&s(&|r| r.tunnel["frames"].as_f64().unwrap_or(f64::NAN))),
        "hold_us": stat(&s(&|r| r.tunnel["caught_up_us"].as_f64().unwrap_or(f64::NAN))),
        "port_drops": stat(&s(&|r| r.port_drops as f64)),
        "lost_window_ms": reps.iter().map(|r| r.streams[k].lost_window_ms).collect::<Vec<_>>(),
        "sent": stat(&s(&|r| r.streams[k].sent as f64)),
        "received": stat(&s(&|r| r.streams[k].received as f64)),
        "metrics": {
            "trials": reps.len(),
            "downtime_ms": mean(&downtime), "downtime_ms_ci99": ci_half_width(&downtime, 0.99),
            "lost": mean(&lost), "reordered": mean(&reordered),
            "total_ms": mean(&total), "total_ms_ci99": ci_half_width(&total, 0.99),
            "bytes_moved": mean(&bytes),
            "rtt_during_ms_p50": mean(&p50), "rtt_during_ms_p99": mean(&p99),
        },
    })
}

/// Issue 12's goals for a move: each judged over every measured point it applies to (`routes`
/// `None`: all of them), on the repetitions' worst value, not their mean.
const GOALS: [(&str, &str, Option<&str>, f64); 4] = [
    ("lost == 0", "lost", None, 0.0),
    ("downtime_ms < 1", "downtime_ms", None, 1.0),
    ("handoff_gap_ms < 1 (the data planes' own clock)", "handoff_gap_ms", None, 1.0),
    ("total_ms < 2000 with the real table", "total_ms", Some("real"), 2000.0),
];

fn judge_goals(points: &[Value]) -> Vec<Value> {
    GOALS
        .iter()
        .map(|&(goal, key, routes, limit)| {
            let worst: Vec<(String, f64)> = points
                .iter()
                .filter(|p| p["skipped"].is_null())
                .filter(|p| routes.is_none_or(|r| p["routes_label"] == r))
                .filter_map(|p| Some((p["label"].as_str()?.to_string(), p[key]["max"].as_f64()?)))
                .collect();
            let met = (!worst.is_empty()).then(|| {
                worst.iter().all(|&(_, x)| if key == "lost" { x <= limit } else { x < limit })
            });
            let verdict = match met {
                None => "not measured (no point had it)".to_string(),
                Some(m) => format!(
                    "{} (worst repetition per point: {})",
                    if m { "met" } else { "NOT met" },
                    worst.iter().map(|(l, x)| format!("{l} {x:.2}")).collect::<Vec<_>>().join(", ")
                ),
            };
            json!({ "goal": goal, "met": met, "verdict": verdict })
        })
        .collect()
}

fn seed() -> Value {
    json!({
        "kvm_downtime_ms": SEED_KVM_DOWNTIME_MS,
        "xen_downtime_ms": [SEED_XEN_DOWNTIME_MS.0, SEED_XEN_DOWNTIME_MS.1],
        "qemu_default_downtime_target_ms": SEED_QEMU_TARGET_MS,
        "source": "seed 003: KVM about 170 ms of downtime, Xen 3-7 s, QEMU's default maximum downtime 300 ms",
    })
}

fn fmt_stat(v: &Value, digits: usize) -> String {
    match (v["mean"].as_f64(), v["ci99"].as_f64()) {
        (Some(m), Some(c)) => format!("{m:.digits$} ± {c:.digits$}"),
        (Some(m), None) => format!("{m:.digits$}"),
        _ => "-".into(),
    }
}

fn table(points: &[Value]) -> String {
    let mut t = format!(
        "{:<22} {:>16} {:>16} {:>10} {:>10} {:>18} {:>12} {:>13} {:>13} {:>5}\n",
        "case",
        "downtime_ms",
        "handoff_gap_ms",
        "lost",
        "reordered",
        "total_ms",
        "bytes_moved",
        "rtt_p50_ms",
        "rtt_p99_ms",
        "reps"
    );
    for p in points {
        if let Some(why) = p["skipped"].as_str() {
            t += &format!("{:<22} skipped: {why}\n", p["label"].as_str().unwrap_or_default());
            continue;
        }
        t += &format!(
            "{:<22} {:>16} {:>16} {:>10} {:>10} {:>18} {:>12} {:>13} {:>13} {:>5}\n",
            p["label"].as_str().unwrap_or_default(),
            fmt_stat(&p["downtime_ms"], 2),
            fmt_stat(&p["handoff_gap_ms"], 3),
            fmt_stat(&p["lost"], 1),
            fmt_stat(&p["reordered"], 1),
            fmt_stat(&p["total_ms"], 1),
            p["bytes_moved"]["mean"].as_f64().map_or("-".into(), |b| format!("{b:.0}")),
            fmt_stat(&p["rtt_during_ms"]["p50"], 3),
            fmt_stat(&p["rtt_during_ms"]["p99"], 3),
            p["metrics"]["trials"],
        );
    }
    t += &format!(
        "seed 003: KVM ~{SEED_KVM_DOWNTIME_MS:.0} ms downtime, Xen {:.0}-{:.0} s, QEMU default target {SEED_QEMU_TARGET_MS:.0} ms (means ± 99 % CI)\n",
        SEED_XEN_DOWNTIME_MS.0 / 1e3,
        SEED_XEN_DOWNTIME_MS.1 / 1e3
    );
    t
}

fn csv(points: &[Value]) -> String {
    let cols = ["downtime_ms", "handoff_gap_ms", "lost", "reordered", "total_ms", "bytes_moved"];
    let mut s = String::from("label,routes,frame_size,trials");
    for c in cols {
        s += &format!(",{c},{c}_ci99");
    }
    s += ",rtt_during_ms_p50,rtt_during_ms_p99,skipped\n";
    let f = |v: &Value| v.as_f64().map_or(String::new(), |x| format!("{x}"));
    for p in points {
        s += &format!(
            "\"{}\",{},{},{}",
            p["label"].as_str().unwrap_or_default(),
            p["routes"],
            p["frame_size"],
            f(&p["metrics"]["trials"])
        );
        for c in cols {
            s += &format!(",{},{}", f(&p[c]["mean"]), f(&p[c]["ci99"]));
        }
        s += &format!(
            ",{},{},{}\n",
            f(&p["rtt_during_ms"]["p50"]["mean"]),
            f(&p["rtt_during_ms"]["p99"]["mean"]),
            p["skipped"].as_str().unwrap_or_default()
        );
    }
    s
}

/// Downtime and total time per case (log scale), with seed 003's KVM and Xen downtimes and
/// QEMU's target as flat lines: the seed's figure, with routeplex in it.
fn figure(points: &[Value], path: &Path, title: &str) -> Result<()> {
    let measured: Vec<&Value> = points.iter().filter(|p| p["skipped"].is_null()).collect();
    let cats: Vec<String> = if measured.is_empty() {
        vec!["(none measured)".into()]
    } else {
        measured.iter().map(|p| p["label"].as_str().unwrap_or_default().to_string()).collect()
    };
    let series = |name: &str, f: &dyn Fn(&Value) -> (f64, Option<f64>)| XySeries {
        name: name.into(),
        points: measured
            .iter()
            .enumerate()
            .map(|(x, p)| {
                let (y, c) = f(p);
                (x as f64, y.max(1e-3), c)
            })
            .collect(),
    };
    let flat = |name: &str, y: f64| XySeries {
        name: name.into(),
        points: (0..cats.len()).map(|x| (x as f64, y, None)).collect(),
    };
    let get = |p: &Value, k: &str| (p[k]["mean"].as_f64().unwrap_or(0.0), p[k]["ci99"].as_f64());
    let s = vec![
        series("routeplex downtime", &|p| get(p, "downtime_ms")),
        series("routeplex total", &|p| get(p, "total_ms")),
        flat("KVM downtime (seed 003)", SEED_KVM_DOWNTIME_MS),
        flat("QEMU default target", SEED_QEMU_TARGET_MS),
        flat("Xen downtime, low (seed 003)", SEED_XEN_DOWNTIME_MS.0),
        flat("Xen downtime, high (seed 003)", SEED_XEN_DOWNTIME_MS.1),
    ];
    plot::xy(path, title, "case", "ms (log)", &s, &XScale::Categories(cats), true)
        .map_err(|e| crate::format_err!("{e}"))
}

/// Runs every case (or reports them skipped, with `skip`), writes the files into `out` and
/// returns the report.
pub fn measure(
    plan: &Plan,
    about: &About,
    out: &Path,
    quiet: bool,
    skip: Option<&str>,
) -> Result<Value> {
    let mut points = Vec::new();
    for &routes in &plan.routes {
        let n_routes = match routes {
            Routes::N(n) => n,
            Routes::Real => fib::prefix_file::cached(fib::prefix_file::Family::Ipv4)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .map_or(509_000, |t| {
                    t.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).count() as u64
                }),
        };
        let reps = match skip {
            Some(why) => Err(why.to_string()),
            None => case(plan, routes, quiet).map_err(|e| format!("{e:#}")),
        };
        for (k, &frame) in plan.frames.iter().enumerate() {
            match &reps {
                Ok(r) => points.push(point(routes, n_routes, frame, k, r)),
                Err(why) if skip.is_some() => points.push(json!({
                    "label": format!("{} routes, {frame} B", routes.label()),
                    "routes": n_routes, "frame_size": frame, "skipped": why,
                })),
                Err(e) => bail!("{} routes: {e}", routes.label()),
            }
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("--out {}", out.display()))?;
    let name = &about.name;
    let mut files = Vec::new();
    let goals = judge_goals(&points);
    let mut text = table(&points);
    for g in &goals {
        let (goal, verdict) = (g["goal"].as_str(), g["verdict"].as_str());
        text += &format!("goal {}: {}\n", goal.unwrap_or_default(), verdict.unwrap_or_default());
    }
    for (f, body) in [(format!("{name}.txt"), text.clone()), (format!("{name}.csv"), csv(&points))]
    {
        let p = out.join(f);
        std::fs::write(&p, body).with_context(|| p.display().to_string())?;
        files.push(p.display().to_string());
    }
    let png = out.join(format!("{name}.png"));
    figure(&points, &png, &about.title)?;
    files.push(png.display().to_string());
    let json_path = out.join(format!("{name}.json"));
    files.push(json_path.display().to_string());
    let primary = "downtime_ms";
    let v = json!({
        "scenario": { "name": name, "title": about.title, "about": about.about, "reproduces": about.reproduces,
                      "report": { "goals": GOALS.iter().map(|g| g.0).collect::<Vec<_>>() } },
        "quick": about.quick,
        "parameters": { "reps": plan.reps, "routes": plan.routes.iter().map(|r| r.label()).collect::<Vec<_>>(), "frames": plan.frames, "rate_pps": plan.rate, "ports": plan.ports },
        "derived": { "primary": primary, "goals": goals },
        "points": points,
        "seed": seed(),
        "table": text,
        "load": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "files": files,
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&v)?)
        .with_context(|| json_path.display().to_string())?;
    Ok(v)
}

/// Why this process cannot build the namespaces, if it cannot.
pub fn cannot_run() -> Option<&'static str> {
    (crate::sys::euid() != 0).then_some("needs root (network namespaces, veth, a bridge)")
}

/// `routeplex test migration`.
pub fn run(a: MigrationArgs) -> Result<()> {
    let plan = Plan::of(&a)?;
    if let Some(why) = cannot_run() {
        bail!("routeplex test migration {why}");
    }
    let about = About::command();
    let out =
        a.out.clone().unwrap_or_else(|| super::scenario::default_results_dir().join(&about.name));
    let v = measure(&plan, &about, &out, a.quiet, None)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", v["table"].as_str().unwrap_or_default());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_counts_and_lists_parse() {
        assert_eq!(Routes::parse("10k"), Some(Routes::N(10_000)));
        assert_eq!(Routes::parse("real"), Some(Routes::Real));
        assert_eq!(Routes::parse("3M"), None);
        assert!(list("--routes", "0,x", Routes::parse).unwrap_err().to_string().contains("\"x\""));
    }

    #[test]
    fn a_sink_log_is_judged() {
        let t = Instant::now();
        let ms = |k: u64| t + Duration::from_millis(k);
        let got = [(0, ms(0)), (2, ms(1)), (1, ms(2)), (4, ms(9)), (4, ms(10))];
        let r = judge(64, 6, &got, ms(1), ms(5), Duration::from_millis(1));
        assert_eq!((r.received, r.lost, r.reordered, r.duplicates), (4, 2, 1, 1));
        assert!((r.downtime_ms - 7.0).abs() < 1e-9, "{}", r.downtime_ms);
    }

    #[test]
    fn pings_are_read_with_their_times() {
        let out = "PING 10.70.2.2 56(84) bytes of data.\n\
                   [100.0] 64 bytes from 10.70.2.2: icmp_seq=1 ttl=63 time=0.100 ms\n\
                   [100.5] 64 bytes from 10.70.2.2: icmp_seq=3 ttl=63 time=0.300 ms\n\
                   [101.9] 64 bytes from 10.70.2.2: icmp_seq=4 ttl=63 time=0.400 ms\n";
        let (rtt, lost) = pings(out, 100.2, 101.0);
        assert_eq!((rtt, lost), (vec![0.3], 1));
    }
}

/// A rejection in a migration scenario file.
#[derive(Debug)]
pub struct FileError(yamlpath::Located);

impl From<yamlpath::Located> for FileError {
    fn from(l: yamlpath::Located) -> FileError {
        FileError(l)
    }
}

type Val<'a> = yamlpath::Value<'a, FileError>;

/// A scenario file of `experiment: migration` (examples/scenarios/seed003-migration.yaml).
pub struct ScenarioFile {
    pub about: About,
    pub plan: Plan,
    pub quick: Plan,
}

const KEYS: &[&str] = &[
    "name",
    "title",
    "reproduces",
    "experiment",
    "routes",
    "frame_sizes",
    "rate",
    "repetitions",
    "quick",
];

/// `Some` if `path` is a migration scenario (its `experiment:` says so); `None` for the
/// tester's scenarios; an error naming file, line, field and value for a bad one.
pub fn scenario_file(path: &Path) -> Result<Option<ScenarioFile>> {
    let text = yamlpath::read_file(path, 1 << 20).with_context(|| path.display().to_string())?;
    let at = |e: FileError| crate::format_err!("{}{}", path.display(), e.0);
    let doc =
        yamlpath::parse_document(&text, "name:, experiment:, ...").map_err(|l| at(FileError(l)))?;
    let root = Val::root(&doc);
    let Ok(top) = root.mapping() else { return Ok(None) };
    let Some(kind) = top.get("experiment") else { return Ok(None) };
    let parse = || -> Result<ScenarioFile, FileError> {
        if kind.text()? != "migration" {
            return Err(kind.bad(kind.text()?, "the only experiment is migration"));
        }
        let top = root.map(KEYS)?;
        let need = |k: &str| top.get(k).ok_or_else(|| root.error(format!("missing {k}:")));
        let routes = |v: Val| -> Result<Vec<Routes>, FileError> {
            v.list()?
                .iter()
                .map(|r| {
                    let t = r.text()?;
                    Routes::parse(t).ok_or_else(|| r.bad(t, "a route count (0..=2M, k/M) or real"))
                })
                .collect()
        };
        let frames = need("frame_sizes")?
            .list()?
            .iter()
            .map(|f| f.int::<usize>("a frame size", 64, 1514))
            .collect::<Result<Vec<_>, _>>()?;
        let plan = Plan {
            reps: need("repetitions")?.int("repetitions", 1, 1000)?,
            routes: routes(need("routes")?)?,
            frames: frames.clone(),
            rate: need("rate")?.int("packets per second", 100, 200_000)?,
            ports: "afpacket",
        };
        let q = need("quick")?.map(&["routes", "repetitions"])?;
        let qneed = |k: &str| q.get(k).ok_or_else(|| root.error(format!("missing quick.{k}:")));
        let quick = Plan {
            reps: qneed("repetitions")?.int("repetitions", 1, 1000)?,
            routes: routes(qneed("routes")?)?,
            frames,
            rate: plan.rate,
            ports: plan.ports,
        };
        let about = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim())
            .collect::<Vec<_>>()
            .join("\n");
        let about = About {
            name: need("name")?.text()?.to_string(),
            title: need("title")?.text()?.to_string(),
            reproduces: need("reproduces")?.text()?.to_string(),
            about,
            quick: false,
        };
        Ok(ScenarioFile { about, plan, quick })
    };
    parse().map(Some).map_err(at)
}

/// `routeplex test scenario FILE` for a migration scenario: the same outputs as the tester's
/// scenarios; without root every point is reported skipped, with the reason.
pub fn run_scenario(
    mut f: ScenarioFile,
    quick: bool,
    json: bool,
    out: &Path,
    quiet: bool,
) -> Result<()> {
    f.about.quick = quick;
    let plan = if quick { &f.quick } else { &f.plan };
    let v = measure(plan, &f.about, out, quiet, cannot_run())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", v["table"].as_str().unwrap_or_default());
    }
    Ok(())
}
