//! `routeplex bench switch`: VALE's measurements (Rizzo & Lettieri, CoNEXT'12, Figs 6, 8, 9
//! and 10) on routeplex's learning switch, through real memif shared memory between separate
//! processes: the switch is a `routeplex run` process with memif server ports and one worker,
//! pinned to the last CPU (`workers: [N-1]`); the generator and the sinks are memif clients in
//! this process's main thread, pinned to CPU 0. Where every thread of both processes actually
//! ran is read back from the OS during each measurement ([`crate::sys::threads`]) and reported
//! with what limited the run ([`pktgen::limited_by`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Context, Result};
use control::model::{
    MemberDoc, MemifDoc, PortDoc, PortKindDoc, SwitchDoc, TopologyDoc, WorkersDoc,
};
use ports::memif::MemifPort;
use ports::{Batch, Port};
use serde_json::json;
use wire::MacAddr;

mod dpdk_pair;

use crate::pktgen::{self, connect, Report};
use crate::sys;
use crate::sys::threads::{Placement, Sampler, Watch};
use tester::plot::Series;

/// Options of `routeplex bench switch`.
#[derive(clap::Args)]
pub struct Args {
    /// Frame size without FCS, 60..=1514.
    #[arg(long, default_value_t = 60)]
    size: usize,
    /// Destinations: 1 is known unicast to one port; more floods broadcasts to that many.
    #[arg(long, default_value_t = 1)]
    destinations: usize,
    /// The switch's batch (frames per port and poll) and the generator's burst, 1..=256.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Member ports of the switch, 2..=1024 (default: destinations + 1); the members beyond
    /// the generator and its destinations stay unconnected, but the switch polls them all.
    #[arg(long)]
    members: Option<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Run every figure and write one JSON and one PNG per figure into this directory.
    #[arg(long)]
    figures: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also run an anchor on the same CPUs, at 60 and 1514 B, interleaved with the switch
    /// (--pairs), and print each size's pairs, probes and median ratio: `dpdk`, DPDK 22.11's
    /// own memif client→server pair (no switch: one memif hop, `ratio_to_dpdk_pair`);
    /// `testpmd-io` or `testpmd-mac`, dpdk-testpmd forwarding between two memif ports in the
    /// switch's place (the same generator and sink, two hops: `ratio_to_testpmd`; needs
    /// `scripts/setup --bench`).
    #[arg(long, value_parser = ["dpdk", "testpmd-io", "testpmd-mac"])]
    compare: Option<String>,
    /// With --compare: interleaved pairs per size (routeplex, DPDK, routeplex, …), 1..=100.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
}

/// The MAC the unicast sink announces so the switch learns it.
const SINK_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xfe]);

/// One measured point.
#[derive(Clone, Debug)]
struct Point {
    size: usize,
    destinations: usize,
    members: usize,
    batch: usize,
    seconds: f64,
    offered_mpps: f64,
    /// Frames per second each destination received.
    mpps: f64,
    /// All destinations together.
    total_mpps: f64,
    lost: u64,
    generator_busy: f64,
    ring_full_share: f64,
    limited_by: &'static str,
    /// Where the threads of this process and of the switch's ran during the measurement.
    placement: Placement,
}

impl Point {
    /// CPU time over wall time of the generator's thread, as the OS counted it.
    fn generator_cpu_busy(&self) -> Option<f64> {
        let t = self.placement.role("bench", "generator and sinks")?;
        Some((t.busy() * 1000.0).round() / 1000.0)
    }

    /// Says so when the generator did not have its CPU to itself, or when the switch had
    /// frames waiting most of the time and its worker still did not run (other load on the
    /// host, or a CPU the hypervisor did not run).
    fn note(&self) -> Option<String> {
        let mut notes = Vec::new();
        if let Some(b) = self.generator_cpu_busy().filter(|&b| b < 0.9) {
            notes.push(format!("the generator's thread ran only {:.0} % of the time (the OS gave its CPU to other work)", b * 100.0));
        }
        if let Some(w) = self.placement.role("switch", "switch worker").filter(|w| w.busy() < 0.9) {
            if self.ring_full_share > 0.5 {
                notes.push(format!("the ring into the switch was full {:.0} % of the generator's time, yet the switch's worker {}", self.ring_full_share * 100.0, self.placement.why_not_running(w)));
            }
        }
        (!notes.is_empty())
            .then(|| format!("{}: figures are lower than this host can do", notes.join("; ")))
    }

    fn gbps(&self) -> f64 {
        self.mpps * 1e6 * self.size as f64 * 8.0 / 1e9
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "size": self.size, "destinations": self.destinations, "members": self.members, "batch": self.batch,
            "seconds": self.seconds, "offered_mpps": self.offered_mpps,
            "mpps": self.mpps, "gbps": self.gbps(), "total_mpps": self.total_mpps,
            "ns_per_packet": if self.total_mpps > 0.0 { 1e3 / self.total_mpps } else { f64::INFINITY },
            "lost": self.lost, "generator_busy": self.generator_busy,
            "ring_full_share": self.ring_full_share, "limited_by": self.limited_by,
            "placement": self.placement.to_json(),
            "generator_cpu_busy": self.generator_cpu_busy(),
            "note": self.note(),
        })
    }
}

/// The switch in a process of its own, with `n` memif server ports; killed on drop.
struct SwitchProcess {
    child: Child,
    dir: PathBuf,
    sockets: Vec<String>,
}

impl SwitchProcess {
    /// `cpu`: the one CPU of the switch's one worker (`None`: the topology's default).
    fn start(n: usize, batch: usize, cpu: Option<usize>) -> Result<SwitchProcess> {
        let tag = format!("rpx-bsw-{}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        std::fs::create_dir_all(&dir)?;
        let sockets: Vec<String> =
            (0..n).map(|i| format!("@{tag}-{i}-{}", rand_suffix())).collect();
        let memif =
            |s: &String| PortKindDoc::Memif(MemifDoc { socket: s.clone(), ..Default::default() });
        let doc = TopologyDoc {
            workers: Some(cpu.map_or(WorkersDoc::Count(1), |c| WorkersDoc::Cpus(vec![c as u64]))),
            ports: sockets
                .iter()
                .enumerate()
                .map(|(i, s)| PortDoc::new(format!("m{i}"), memif(s)))
                .collect(),
            switches: vec![SwitchDoc {
                name: "sw".into(),
                members: (0..n)
                    .map(|i| MemberDoc { port: format!("m{i}"), ..Default::default() })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let file = dir.join("switch.yaml");
        std::fs::write(&file, doc.to_yaml())?;
        let log = std::fs::File::create(dir.join("switch.log"))?;
        // The child must see every CPU to pin its worker away from ours; ours goes back to
        // CPU 0 once it runs.
        let pinned = sys::unpin();
        let child = Command::new(std::env::current_exe()?)
            .arg("run")
            .arg(&file)
            .arg("--burst")
            .arg(batch.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the switch process")?;
        if pinned {
            sys::pin(0);
        }
        Ok(SwitchProcess { child, dir, sockets })
    }
}

impl Drop for SwitchProcess {
    fn drop(&mut self) {
        sys::kill(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64 % 1_000_000)
}

/// Makes the switch learn `mac` on `port` with one frame from it.
fn announce(port: &mut MemifPort, mac: MacAddr) {
    let mut f = vec![0xff; 6];
    f.extend(mac.as_bytes());
    f.extend([0x88, 0xb5]);
    f.extend([0; 46]);
    let mut b = Batch::new(1);
    b.push_copy(&f);
    port.tx_burst(&mut b, &[0]);
}

/// One rate measurement: a generator on the switch's port 0, sinks on the next `dests`, in a
/// switch of `members` ports.
fn point(size: usize, dests: usize, batch: usize, seconds: f64, members: usize) -> Result<Point> {
    let members = members.max(dests + 1);
    let sw = SwitchProcess::start(members, batch, switch_cpu())?;
    let mut tx = connect(&sw.sockets[0], 0, "bench-tx")?;
    let mut rx: Vec<MemifPort> = sw.sockets[1..=dests]
        .iter()
        .enumerate()
        .map(|(i, s)| connect(s, 0, &format!("bench-rx{i}")))
        .collect::<Result<_>>()?;
    let dst = if dests == 1 {
        announce(&mut rx[0], SINK_MAC);
        SINK_MAC
    } else {
        MacAddr::BROADCAST
    };
    let watch = vec![generator_watch(), switch_watch(&sw)];
    drive(&mut tx, &mut rx, watch, size, batch, seconds, dst, members)
}

/// A warm-up, then one measured run of `seconds` from `tx` to the sinks `rx` while `watch` is
/// sampled; the point says what limited it.
#[allow(clippy::too_many_arguments)]
fn drive(
    tx: &mut MemifPort,
    rx: &mut [MemifPort],
    watch: Vec<Watch>,
    size: usize,
    batch: usize,
    seconds: f64,
    dst: MacAddr,
    members: usize,
) -> Result<Point> {
    pktgen::drain(rx);
    pktgen::measure(&pktgen::max_rate(size, batch, 0.5, dst), Some(&mut *tx), rx)?;
    // What the warm-up left in flight must not count against the measurement's sequence.
    pktgen::drain(rx);
    let sampler = Sampler::start(watch, Duration::from_millis(10));
    let r: Report = pktgen::measure(&pktgen::max_rate(size, batch, seconds, dst), Some(tx), rx)?;
    let placement = sampler.finish();
    let s = r.seconds.max(1e-9);
    Ok(Point {
        size,
        destinations: rx.len(),
        members,
        batch,
        seconds: r.seconds,
        offered_mpps: r.tx_packets as f64 / s / 1e6,
        mpps: r.rx_packets as f64 / rx.len() as f64 / s / 1e6,
        total_mpps: r.rx_packets as f64 / s / 1e6,
        lost: r.lost,
        generator_busy: r.generator_busy(),
        ring_full_share: r.ring_full_share(),
        limited_by: r.limited_by(),
        placement,
    })
}

/// This process's thread, the generator and sinks, as [`drive`] samples it.
fn generator_watch() -> Watch {
    Watch::this_process("bench", &[("main", "generator and sinks")])
}

/// The switch process's threads.
fn switch_watch(sw: &SwitchProcess) -> Watch {
    Watch::new(sw.child.id(), "switch", &[("worker0", "switch worker"), ("main", "switch control")])
}

/// The switch's worker CPU: the last one, when this process could pin itself to CPU 0.
fn switch_cpu() -> Option<usize> {
    let cpus = sys::online_cpus();
    (cpus > 1 && PINNED.load(std::sync::atomic::Ordering::Relaxed)).then_some(cpus - 1)
}

/// Whether [`pin_generator`] pinned this process's main thread to CPU 0.
static PINNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Round trips through the switch: ping on port 0, echoed on port 1.
fn rtt(size: usize, seconds: f64) -> Result<serde_json::Value> {
    let sw = SwitchProcess::start(2, 256, switch_cpu())?;
    let mut ping = connect(&sw.sockets[0], 0, "bench-ping")?;
    let mut pong = connect(&sw.sockets[1], 0, "bench-pong")?;
    let ping_mac = MacAddr([2, 0, 0, 0, 0, 1]);
    announce(&mut pong, SINK_MAC);
    announce(&mut ping, ping_mac);
    pktgen::drain(std::slice::from_mut(&mut ping));
    pktgen::drain(std::slice::from_mut(&mut pong));
    let r = pktgen::ping_pong(&pktgen::max_rate(size, 1, seconds, SINK_MAC), &mut ping, &mut pong)?;
    let mut v = r.rtt_ns.clone();
    v.sort_unstable();
    let at = |p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .map_or(f64::NAN, |&n| n as f64 / 1e3)
    };
    Ok(
        json!({ "size": size, "round_trips": v.len(), "rtt_p50_us": at(0.5), "rtt_p99_us": at(0.99), "rtt_min_us": at(0.0) }),
    )
}

/// Pins the generator (this thread) to CPU 0 and says what was asked for; where the threads
/// really ran is read back per measurement.
fn pin_generator() -> String {
    let cpus = sys::online_cpus();
    if cpus > 1 && sys::pin(0) {
        PINNED.store(true, std::sync::atomic::Ordering::Relaxed);
        format!(
            "asked for: generator and sinks (this process's main thread) on CPU 0; the switch process's one worker on CPU {} (workers: [{}])",
            cpus - 1,
            cpus - 1
        )
    } else {
        format!("{cpus} CPU(s): nothing pinned")
    }
}

pub fn run(a: Args) -> Result<()> {
    crate::ensure!((60..=1514).contains(&a.size), "--size {} is outside 60..=1514", a.size);
    crate::ensure!(
        (1..=64).contains(&a.destinations),
        "--destinations {} is outside 1..=64",
        a.destinations
    );
    crate::ensure!(
        (1..=ports::MAX_BURST).contains(&a.batch),
        "--batch {} is outside 1..=256",
        a.batch
    );
    crate::ensure!(a.seconds > 0.0, "--seconds must be positive");
    crate::ensure!((1..=100).contains(&a.pairs), "--pairs {} is outside 1..=100", a.pairs);
    let members = a.members.unwrap_or(a.destinations + 1);
    crate::ensure!(
        (a.destinations + 1..=1024).contains(&members),
        "--members {members} is outside {}..=1024 (destinations + 1 at least)",
        a.destinations + 1
    );
    let placement = pin_generator();
    if let Some(dir) = &a.figures {
        return figures(dir, a.seconds, &placement);
    }
    if a.compare.is_some() {
        return compare(&a, &placement);
    }
    let p = point(a.size, a.destinations, a.batch, a.seconds, members)?;
    let mut j = p.to_json();
    j["pinning"] = json!(placement);
    j["method"] = json!("memif between separate processes: generator and sinks in this process, the switch in a `routeplex run` child; mpps is per destination, ns_per_packet is the switch's time per delivered copy; placement is read back from /proc during the measurement; limited_by: ring if over 1 % of offered frames were lost between the switch and the sinks, generator if the ring into the switch had room >= 90 % of the generator's time (generator_busy), else dut");
    if a.json {
        println!("{j}");
    } else {
        println!(
            "{} bytes, {} destination(s), batch {}: {:.2} Mpps per destination ({:.2} Gbit/s), {:.2} Mpps in all, {:.1} ns per copy; offered {:.2} Mpps; generator busy {:.0} %; limited by {}",
            p.size, p.destinations, p.batch, p.mpps, p.gbps(), p.total_mpps, 1e3 / p.total_mpps.max(1e-9), p.offered_mpps, p.generator_busy * 100.0, p.limited_by
        );
        println!("{placement}");
        println!("{}", p.placement.summary());
    }
    Ok(())
}

/// An anchor's trial, as the comparison reports it.
struct AnchorTrial {
    mpps: f64,
    limited_by: &'static str,
    placement: String,
    json: serde_json::Value,
}

impl From<Point> for AnchorTrial {
    fn from(p: Point) -> AnchorTrial {
        AnchorTrial {
            mpps: p.mpps,
            limited_by: p.limited_by,
            placement: p.placement.summary(),
            json: p.to_json(),
        }
    }
}

/// What the switch is compared with.
enum Anchor {
    /// DPDK's own memif client → server pair ([`dpdk_pair`]).
    Pair(PathBuf),
    /// dpdk-testpmd in the switch's place, in this forwarding mode.
    Testpmd(PathBuf, &'static str),
}

impl Anchor {
    fn name(&self) -> String {
        match self {
            Anchor::Pair(_) => "DPDK memif pair".into(),
            Anchor::Testpmd(_, mode) => format!("DPDK testpmd {mode}"),
        }
    }

    /// The JSON keys of its trials and of the median ratio.
    fn keys(&self) -> (&'static str, &'static str) {
        match self {
            Anchor::Pair(_) => ("dpdk_pair", "ratio_to_dpdk_pair"),
            Anchor::Testpmd(..) => ("testpmd", "ratio_to_testpmd"),
        }
    }

    fn trial(&self, size: usize, a: &Args) -> Result<AnchorTrial> {
        let (tx_cpu, rx_cpu) = (0, switch_cpu().unwrap_or(0));
        match self {
            Anchor::Pair(bin) => {
                let d = dpdk_pair::measure(bin, size, 0.5, a.seconds, tx_cpu, rx_cpu)?;
                Ok(AnchorTrial {
                    mpps: d.mpps,
                    limited_by: d.limited_by,
                    placement: d.placement.summary(),
                    json: d.to_json(),
                })
            }
            Anchor::Testpmd(bin, mode) => {
                testpmd_point(bin, mode, size, a.batch, a.seconds, rx_cpu).map(Into::into)
            }
        }
    }

    fn method(&self) -> &'static str {
        match self {
            Anchor::Pair(_) => "DPDK 22.11's net_memif client -> server pair (two processes of bench_switch_pair.c, copy mode, one memif hop, no switch), its client on the generator's CPU and its server on the switch worker's",
            Anchor::Testpmd(..) => "dpdk-testpmd (Debian's dpdk-dev, --no-huge) in the switch's place: two net_memif server ports, the same generator and sink in this process as memif clients (two memif hops, as the switch), forwarding port 0 -> port 1 in the given mode (io: as received; mac: source and destination MACs rewritten), --burst the switch's batch, its forwarding lcore and its main lcore (which waits on stdin) on the switch worker's CPU",
        }
    }
}

/// dpdk-testpmd forwarding in `mode` between two memif servers, its lcores on `cpu`, driven
/// by the switch's generator and sink.
fn testpmd_point(
    bin: &Path,
    mode: &str,
    size: usize,
    batch: usize,
    seconds: f64,
    cpu: usize,
) -> Result<Point> {
    let tag = format!("rpx-bsw-tpmd-{}-{}", std::process::id(), rand_suffix());
    let args = vec![
        format!("--forward-mode={mode}"),
        "--auto-start".into(),
        "--nb-cores=1".into(),
        "--total-num-mbufs=16384".into(),
        "--disable-link-check".into(),
        format!("--burst={batch}"),
    ];
    let mut app = crate::dpdk_apps::App::start(bin, &tag, &format!("0@({cpu}),1@({cpu})"), &args)?;
    let mut tx = app.connect(0, "bench-tx", Duration::from_secs(10))?;
    let mut rx = [app.connect(1, "bench-rx0", Duration::from_secs(10))?];
    let testpmd = Watch::new(
        app.pid(),
        "testpmd",
        &[
            ("rte-worker-1", "testpmd forwarding lcore"),
            ("main", "testpmd main lcore (waits on stdin)"),
            ("eal-intr-thread", "dpdk interrupt thread (memif control)"),
        ],
    );
    let p = drive(
        &mut tx,
        &mut rx,
        vec![generator_watch(), testpmd],
        size,
        batch,
        seconds,
        SINK_MAC,
        2,
    )?;
    app.check_running()?;
    crate::ensure!(p.mpps > 0.0, "testpmd forwarded nothing in {:.2} s", p.seconds);
    Ok(p)
}

/// The switched path (generator → memif → switch → memif → sink) against an [`Anchor`], at
/// 60 and 1514 B, in interleaved pairs (switch, anchor, switch, anchor, …) on the same CPUs,
/// the probes of [`tester::pairs`] timed before each trial.
fn compare(a: &Args, pinning: &str) -> Result<()> {
    let anchor = match a.compare.as_deref() {
        Some("testpmd-io") => Anchor::Testpmd(crate::dpdk_apps::testpmd()?, "io"),
        Some("testpmd-mac") => Anchor::Testpmd(crate::dpdk_apps::testpmd()?, "mac"),
        _ => Anchor::Pair(dpdk_pair::binary()?),
    };
    let (trials_key, ratio_key) = anchor.keys();
    let load_before = tester::pairs::load_average();
    let mut sizes = Vec::new();
    for size in [60, 1514] {
        let runs = tester::pairs::run(
            a.pairs,
            |_| {
                // On a loaded host a side sometimes delivers nothing (a start-up failure, not a
                // measurement): one more start of that trial, saying so.
                let delivered = || {
                    let p = point(size, 1, a.batch, a.seconds, 0)?;
                    crate::ensure!(
                        p.mpps > 0.0,
                        "the switch delivered nothing in {:.2} s ({:.3} Mpps offered)",
                        p.seconds,
                        p.offered_mpps
                    );
                    Ok(p)
                };
                delivered().or_else(|e| {
                    eprintln!("the switch trial failed ({e:#}); starting it once more");
                    delivered()
                })
            },
            |_| {
                anchor.trial(size, a).or_else(|e| {
                    eprintln!("{} failed to start ({e:#}); starting it once more", anchor.name());
                    anchor.trial(size, a)
                })
            },
        )?;
        let summary = tester::pairs::Summary::from_measured(
            "routeplex switch",
            &anchor.name(),
            "Mpps",
            &runs,
            |p| p.mpps,
            |d| d.mpps,
        );
        if !a.json {
            println!(
                "{size} B ({} B on the wire), {} interleaved pairs, ratio = routeplex / {}:",
                size + 4,
                a.pairs,
                anchor.name()
            );
            for (i, (p, d)) in runs.iter().enumerate() {
                println!(
                    "  pair {}: routeplex limited by {}, {}; {} limited by {}, {}",
                    i + 1,
                    p.value.limited_by,
                    p.value.placement.summary(),
                    anchor.name(),
                    d.value.limited_by,
                    d.value.placement
                );
            }
            for l in summary.lines() {
                println!("{l}");
            }
        }
        sizes.push(json!({
            "size": size,
            "wire_size": size + 4,
            "pairs": summary,
            ratio_key: summary.ratio.median,
            "routeplex": runs.iter().map(|(p, _)| p.value.to_json()).collect::<Vec<_>>(),
            trials_key: runs.iter().map(|(_, d)| d.value.json.clone()).collect::<Vec<_>>(),
        }));
    }
    let j = json!({
        "pinning": pinning,
        "anchor": anchor.name(),
        "method": format!("per size, interleaved pairs (routeplex, anchor, routeplex, anchor, ...; --pairs), a fixed memory probe (dependent random reads over 8 MiB) and compute probe timed before every trial: routeplex's learning switch in a `routeplex run` child between two memif ports (this process's generator and sink are the memif clients; two memif hops), then the anchor: {}; mpps is what reached the sink; {ratio_key} = the median over the pairs of routeplex mpps / the anchor's mpps (pairs.ratio has min and max); a pair is flagged when its two trials' probes differ by more than 10 % (the machine changed speed between them); limited_by: generator if the sender's ring took its bursts whole >= 90 % of the time (the receiver kept up), else dut (the switch, or the anchor), ring if frames were lost", anchor.method()),
        "load_average_before": load_before,
        "load_average_after": tester::pairs::load_average(),
        "sizes": sizes,
    });
    if a.json {
        println!("{j}");
    }
    Ok(())
}

/// Every figure, each as JSON (and a PNG plot) in `dir`.
fn figures(dir: &Path, seconds: f64, placement: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut out = serde_json::Map::new();
    let mut fig6 = Vec::new();
    for size in [60, 1514] {
        for d in [1, 2, 4, 8] {
            let p = point(size, d, 256, seconds, 0)?;
            eprintln!("fig6: {size} B, {d} destination(s): {:.2} Mpps each", p.mpps);
            fig6.push(p);
        }
    }
    let fig8: Vec<Point> = [60, 128, 256, 512, 1024, 1514]
        .into_iter()
        .map(|s| {
            point(s, 1, 256, seconds, 0).inspect(|p| eprintln!("fig8: {s} B: {:.2} Mpps", p.mpps))
        })
        .collect::<Result<_>>()?;
    let fig9: Vec<Point> = [1, 2, 4, 8, 16, 32, 64, 128, 256]
        .into_iter()
        .map(|b| {
            point(60, 1, b, seconds, 0)
                .inspect(|p| eprintln!("fig9: batch {b}: {:.2} Mpps", p.mpps))
        })
        .collect::<Result<_>>()?;
    // Beyond VALE: the same known-unicast stream through switches of more and more members.
    let members: Vec<Point> = [2, 64, 256, 1024]
        .into_iter()
        .map(|m| {
            point(60, 1, 256, seconds, m)
                .inspect(|p| eprintln!("members: {m} ports: {:.2} Mpps", p.mpps))
        })
        .collect::<Result<_>>()?;
    let fig10: Vec<serde_json::Value> = [60, 256, 1024, 1514]
        .into_iter()
        .map(|s| rtt(s, seconds.min(2.0)))
        .collect::<Result<_>>()?;
    for (name, v) in [
        ("fig6_rate_vs_destinations", fig6.iter().map(Point::to_json).collect::<Vec<_>>()),
        ("fig8_rate_vs_frame_size", fig8.iter().map(Point::to_json).collect()),
        ("fig9_rate_vs_batch", fig9.iter().map(Point::to_json).collect()),
        ("fig10_rtt_vs_frame_size", fig10.clone()),
        ("members_rate_vs_member_ports", members.iter().map(Point::to_json).collect()),
    ] {
        let j = json!({ "pinning": placement, "points": v });
        std::fs::write(dir.join(format!("{name}.json")), serde_json::to_string_pretty(&j)?)?;
        out.insert(name.to_string(), j);
    }
    let series = |name: &str, pts: Vec<(f64, f64)>| Series { name: name.to_string(), points: pts };
    let plot = |file: &str, title: &str, x: &str, y: &str, s: Vec<Series>| {
        tester::plot::lines(&dir.join(file), title, x, y, &s).map_err(|e| crate::format_err!("{e}"))
    };
    let by_size = |size| {
        fig6.iter().filter(|p| p.size == size).map(|p| (p.destinations as f64, p.mpps)).collect()
    };
    plot(
        "fig6_rate_vs_destinations.png",
        "Rate per destination vs destinations (VALE Fig 6)",
        "destinations",
        "Mpps per destination",
        vec![series("60 B", by_size(60)), series("1514 B", by_size(1514))],
    )?;
    plot(
        "fig8_rate_vs_frame_size.png",
        "Rate vs frame size, one destination (VALE Fig 8)",
        "frame size (bytes)",
        "Gbit/s",
        vec![series("Gbit/s", fig8.iter().map(|p| (p.size as f64, p.gbps())).collect())],
    )?;
    plot(
        "fig9_rate_vs_batch.png",
        "Rate vs batch size, 60 B, one destination (VALE Fig 9)",
        "batch (frames)",
        "Mpps",
        vec![series("Mpps", fig9.iter().map(|p| (p.batch as f64, p.mpps)).collect())],
    )?;
    plot(
        "fig10_rtt_vs_frame_size.png",
        "Round trip through the switch (VALE Fig 10)",
        "frame size (bytes)",
        "median RTT (us)",
        vec![series(
            "p50",
            fig10
                .iter()
                .map(|v| {
                    (v["size"].as_f64().unwrap_or(0.0), v["rtt_p50_us"].as_f64().unwrap_or(0.0))
                })
                .collect(),
        )],
    )?;
    plot(
        "members_rate_vs_member_ports.png",
        "Known unicast, 60 B, vs member ports (1 generator, 1 sink, the rest unconnected)",
        "member ports",
        "Mpps",
        vec![series("Mpps", members.iter().map(|p| (p.members as f64, p.mpps)).collect())],
    )?;
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}
