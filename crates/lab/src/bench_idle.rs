//! `routeplex bench idle`: what an idle host costs, and how fast it answers after idling.
//!
//! For each idle mode (by default `adaptive`, `interrupt` and `poll`), one VR between two memif
//! server ports runs on one worker thread of a `control::Node` (as `routeplex run` would, pinned
//! to the last CPU); this process's main thread is the memif client on both ports (pinned to
//! CPU 0), so no root is needed. Then:
//!
//! - **idle CPU**: after the host settled, nothing is sent for `--seconds`; the worker thread's
//!   CPU time over that wall time (from `/proc/self/task/TID/schedstat`, nanoseconds on CPU) is
//!   `idle_cpu_percent`, in percent of one core. The whole process's, for reference, is
//!   `process_cpu_percent` (its main thread sleeps meanwhile).
//! - **first-packet latency**: `--samples` times, after at least `--gap-ms` (>= 20) of silence,
//!   one 60-byte UDP frame is sent into the VR and the client spins on the egress port until
//!   the forwarded frame is there: `wake_p50_us`, `wake_p99_us`, `wake_max_us` (the client's
//!   send to its receive, through the memif rings, the worker's wakeup and the VR).
//! - **the floor** under any sleeping worker's wakeup on this machine: a bare thread pinned
//!   where the worker runs, asleep in the same poll(2) on an eventfd, woken after the same
//!   silence; `wake_floor_p50_us` and `wake_floor_p99_us` run from the write to its
//!   acknowledgement through shared memory. In a VM this is mostly the hypervisor waking a
//!   halted vCPU.
//!
//! The first mode is the goal's: it and the floor run in interleaved pairs (`--pairs`: the
//! mode's host, the floor, the mode's host, …), the probes of `tester::pairs` timed before
//! every trial, so that a minute in which this VM wakes its vCPUs slowly is seen by both
//! sides of a pair. `wake_p99_over_floor_p99` is the median of the pairs' ratios; the
//! top-level latencies are the first mode's samples of every pair together. The other modes
//! run once each, after the pairs; each mode's own figures are under `modes`.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use control::runtime::{Idle, Options};
use control::{Node, Topology};
use ports::memif::MemifPort;
use ports::wait::{Poller, Waker};
use ports::{Batch, Port};
use serde_json::{json, Value};

use crate::{lab, pktgen, sys};

/// Options of `routeplex bench idle`.
#[derive(clap::Args)]
pub struct Args {
    /// Seconds of silence over which the worker's CPU time is measured.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// First-packet latencies (and floor wakes) measured per trial: each pair has two trials,
    /// each other mode one.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Silence before each of those packets, in milliseconds (at least 20).
    #[arg(long, default_value_t = 25.0)]
    gap_ms: f64,
    /// Idle modes to measure, comma-separated: adaptive, interrupt, poll, yield.
    #[arg(long, default_value = "adaptive,interrupt,poll")]
    modes: String,
    /// Interleaved pairs of the first mode and the floor, 1..=100.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Goals of issue 15: an idle host idles, and still answers at once.
const GOAL_IDLE_CPU_PERCENT: f64 = 2.0;
const GOAL_WAKE_P99_US: f64 = 50.0;
/// Goal of issue 25: the first frame's p99 at most this many times the p99 of the bare wake
/// measured in the same run. The absolute goal above is the VM's to meet, this one ours: what
/// routeplex adds on top of the kernel's and hypervisor's wakeup.
const GOAL_WAKE_OVER_FLOOR: f64 = 2.0;
const VR_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0];
const DST: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);

/// One mode's figures.
struct Figures {
    mode: Idle,
    idle_cpu_percent: f64,
    process_cpu_percent: f64,
    sleeps_per_s: f64,
    naps_per_s: f64,
    wake_us: Vec<f64>,
    lost: usize,
}

impl Figures {
    /// One mode's trials as one: their samples together, their idle figures' medians.
    fn merged(trials: Vec<Figures>) -> Figures {
        let med = |f: fn(&Figures) -> f64| {
            tester::pairs::median(&trials.iter().map(f).collect::<Vec<_>>())
        };
        Figures {
            mode: trials[0].mode,
            idle_cpu_percent: med(|f| f.idle_cpu_percent),
            process_cpu_percent: med(|f| f.process_cpu_percent),
            sleeps_per_s: med(|f| f.sleeps_per_s),
            naps_per_s: med(|f| f.naps_per_s),
            lost: trials.iter().map(|f| f.lost).sum(),
            wake_us: trials.into_iter().flat_map(|f| f.wake_us).collect(),
        }
    }

    fn pct(&self, p: f64) -> f64 {
        percentile(&self.wake_us, p)
    }

    fn to_json(&self) -> Value {
        let mean = self.wake_us.iter().sum::<f64>() / self.wake_us.len().max(1) as f64;
        json!({
            "mode": self.mode.name(),
            "idle_cpu_percent": round2(self.idle_cpu_percent),
            "process_cpu_percent": round2(self.process_cpu_percent),
            "sleeps_per_s": round2(self.sleeps_per_s),
            "naps_per_s": round2(self.naps_per_s),
            "wake_p50_us": round2(self.pct(50.0)),
            "wake_p99_us": round2(self.pct(99.0)),
            "wake_max_us": round2(self.pct(100.0)),
            "wake_mean_us": round2(mean),
            "samples": self.wake_us.len(),
            "lost": self.lost,
        })
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The nearest-rank percentile `p` (0..=100) of `v`: the smallest sample with at least p % of
/// the samples at or below it. NaN when empty.
pub(crate) fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

pub fn run(a: Args) -> Result<()> {
    crate::ensure!(a.seconds > 0.0, "--seconds must be positive");
    crate::ensure!(a.samples > 0, "--samples must be positive");
    crate::ensure!(a.gap_ms >= 20.0, "--gap-ms must be at least 20");
    let modes: Vec<Idle> = a
        .modes
        .split(',')
        .map(|m| {
            Idle::from_name(m.trim()).with_context(|| {
                format!("--modes: unknown mode {m:?} (adaptive, interrupt, poll, yield)")
            })
        })
        .collect::<Result<_>>()?;
    crate::ensure!(!modes.is_empty(), "--modes: give at least one");
    crate::ensure!((1..=100).contains(&a.pairs), "--pairs {} is outside 1..=100", a.pairs);
    let cpus = sys::online_cpus();
    let worker_cpu = cpus - 1;
    if !a.json {
        eprintln!(
            "bench idle: {} and the floor (a bare eventfd wake), {} interleaved pairs ...",
            modes[0].name(),
            a.pairs
        );
    }
    let runs = tester::pairs::run(
        a.pairs,
        |_| measure(&a, modes[0], worker_cpu),
        |_| wake_floor(&a, worker_cpu),
    )?;
    let pairs = tester::pairs::Summary::from_measured(
        &format!("{} first-frame p99", modes[0].name()),
        "floor p99",
        "us",
        &runs,
        |f| f.pct(99.0),
        |v| percentile(v, 99.0),
    );
    let (heads, floors): (Vec<_>, Vec<_>) =
        runs.into_iter().map(|(h, f)| (h.value, f.value)).unzip();
    let floor: Vec<f64> = floors.concat();
    let mut figures = vec![Figures::merged(heads)];
    for &mode in &modes[1..] {
        if !a.json {
            eprintln!("bench idle: {} ...", mode.name());
        }
        figures.push(measure(&a, mode, worker_cpu)?);
    }
    let (floor50, floor99) = (percentile(&floor, 50.0), percentile(&floor, 99.0));
    sys::unpin();

    let head = &figures[0];
    let poll = figures.iter().find(|f| f.mode == Idle::Spin);
    let (cpu, p99) = (head.idle_cpu_percent, head.pct(99.0));
    let cpu_met = cpu <= GOAL_IDLE_CPU_PERCENT;
    let wake_met = p99 <= GOAL_WAKE_P99_US;
    // The pairs' median: a pooled p99 over pooled p99 would let one slow minute of either
    // side decide it.
    let over_floor = pairs.ratio.median;
    let over_floor_met = over_floor <= GOAL_WAKE_OVER_FLOOR;
    let limited_by = match (cpu_met, wake_met) {
        (true, true) => "goals met".to_string(),
        (_, false) => format!(
            "the wakeup of a sleeping thread: the kernel's and, in a VM, the hypervisor's (an \
             interrupt to a halted vCPU): a bare eventfd wake of a thread asleep in poll(2) \
             takes p50 {floor50:.1} us, p99 {floor99:.1} us here; the forwarding path itself \
             is what poll mode shows{}",
            poll.map_or(String::new(), |p| format!(
                " (p50 {:.1} us, p99 {:.1} us)",
                p.pct(50.0),
                p.pct(99.0)
            ))
        ),
        (false, true) => format!(
            "the worker's periodic wakeups: {:.0} sleeps/s (each at most {} ms, so timers run), \
             each a poll over its ports, their housekeeping and a new sleep",
            head.sleeps_per_s,
            control::runtime::BLOCK_TIMEOUT.as_millis()
        ),
    };
    let out = json!({
        "bench": "idle",
        "mode": head.mode.name(),
        "idle_cpu_percent": round2(cpu),
        "wake_p50_us": round2(head.pct(50.0)),
        "wake_p99_us": round2(p99),
        "wake_floor_p50_us": round2(floor50),
        "wake_floor_p99_us": round2(floor99),
        "wake_p99_over_floor_p99": round2(over_floor),
        "pairs": pairs,
        "poll": poll.map(Figures::to_json),
        "modes": figures.iter().map(Figures::to_json).collect::<Vec<_>>(),
        "goals": {
            "idle_cpu_percent": GOAL_IDLE_CPU_PERCENT, "wake_p99_us": GOAL_WAKE_P99_US,
            "wake_p99_over_floor_p99": GOAL_WAKE_OVER_FLOOR,
            "idle_cpu_met": cpu_met, "wake_met": wake_met, "wake_over_floor_met": over_floor_met,
        },
        "limited_by": limited_by,
        "setup": {
            "online_cpus": cpus, "worker_cpu": worker_cpu, "client_cpu": 0,
            "ports": "two memif servers (one VR between them); the client is this process",
            "idle_seconds": a.seconds, "samples": a.samples, "gap_ms": a.gap_ms,
            "spin_us": control::runtime::SPIN_NS / 1000,
            "block_after_us": control::runtime::BLOCK_AFTER_NS / 1000,
            "block_timeout_ms": control::runtime::BLOCK_TIMEOUT.as_millis() as u64,
        },
        "method": "idle_cpu_percent: the worker thread's time on CPU (/proc/self/task/TID/schedstat) over the wall time of --seconds without traffic, in percent of one core (the first mode's: the median over its trials); wake_*_us: one 60-byte frame sent after at least --gap-ms of silence, from the client's tx_burst until its spinning rx_burst has the forwarded frame (memif rings, the worker's wakeup, the VR); the first mode and the floor run in --pairs interleaved pairs (mode, floor, ...), each trial --samples frames or wakes, the probes of tester::pairs timed before every trial; wake_p99_over_floor_p99 = the median over the pairs of the mode's p99 / the floor's p99 (pairs.ratio has min and max; a pair is flagged when its probes differ by more than 10 %); top-level latencies are the first mode's samples of every pair together, the other modes run once each after the pairs",
    });
    if a.json {
        println!("{out}");
    } else {
        println!("mode        idle CPU %   sleeps/s   wake p50 us   wake p99 us   max us   lost");
        for f in &figures {
            println!(
                "{:<10}  {:>10.2}   {:>8.0}   {:>11.1}   {:>11.1}   {:>6.0}   {:>4}",
                f.mode.name(),
                f.idle_cpu_percent,
                f.sleeps_per_s + f.naps_per_s,
                f.pct(50.0),
                f.pct(99.0),
                f.pct(100.0),
                f.lost
            );
        }
        println!(
            "floor (bare eventfd wake of a thread in poll(2)): p50 {floor50:.1} us, p99 {floor99:.1} us"
        );
        println!("{} and the floor, interleaved:", figures[0].mode.name());
        for l in pairs.lines() {
            println!("{l}");
        }
        let met = |m: bool| if m { "met" } else { "not met" };
        println!(
            "goals: idle CPU <= {GOAL_IDLE_CPU_PERCENT} % ({}), wake p99 <= {GOAL_WAKE_P99_US} us ({}), \
             wake p99 <= {GOAL_WAKE_OVER_FLOOR}x the floor's p99 (median of the pairs {:.2}x: {}); {limited_by}",
            met(cpu_met),
            met(wake_met),
            over_floor,
            met(over_floor_met),
        );
    }
    Ok(())
}

/// One mode: a fresh host, the idle window, then the single packets.
fn measure(a: &Args, mode: Idle, worker_cpu: usize) -> Result<Figures> {
    let tag = format!("rpx-bidle-{}-{}", std::process::id(), mode.name());
    // `yield` is not a file's word: the file says poll and the options say yield.
    let file_mode = if mode == Idle::Yield { "poll" } else { mode.name() };
    let text = format!(
        "\
workers: [{worker_cpu}]
idle: {file_mode}
ports:
  - {{ name: m0, kind: memif, socket: \"@{tag}-0\" }}
  - {{ name: m1, kind: memif, socket: \"@{tag}-1\" }}
vrs:
  - name: dut
    interfaces:
      - {{ name: eth0, port: m0, mac: \"02:00:00:00:01:00\", addresses: [198.18.0.1/24] }}
      - {{ name: eth1, port: m1, mac: \"02:00:00:00:01:01\", addresses: [198.19.0.1/24] }}
    neighbors:
      - {{ address: 198.18.0.2, mac: \"02:00:00:00:00:01\", interface: eth0 }}
      - {{ address: 198.19.0.2, mac: \"02:00:00:00:02:02\", interface: eth1 }}
"
    );
    let topo = Topology::parse(&text, "bench-idle.yaml", Path::new("."))?;
    let mut opts = Options::for_topology(&topo);
    opts.idle = mode;
    opts.pin = Some(sys::pin);
    opts.clock = sys::tsc_clock;
    let node = Node::start(topo, opts, ports::MAX_BURST)?;
    if sys::online_cpus() > 1 {
        sys::pin(0);
    }
    let mut tx = pktgen::connect(&format!("@{tag}-0"), 0, "bench-idle-tx")?;
    let mut rx = pktgen::connect(&format!("@{tag}-1"), 0, "bench-idle-rx")?;
    let frame = lab::udp_frames(vec![DST], wire::MacAddr(VR_MAC)).remove(0).0;
    let tid = worker_tid("worker0").context("the worker thread in /proc/self/task")?;

    // Made once: a burst's buffers are 256 allocations, whose frees between samples (30,000
    // madvise calls in a run) would keep the client's CPU busy in the silence.
    let mut bufs = (Batch::new(1), Batch::new(ports::MAX_BURST));
    // Warm up: the path works, every frame comes back.
    for _ in 0..100 {
        one(&mut tx, &mut rx, &mut bufs, &frame, Duration::from_secs(2))
            .context("warm-up: the VR did not forward")?;
    }

    // Idle CPU.
    std::thread::sleep(Duration::from_millis(300));
    let s0 = node.runtime().snapshot()?;
    let (c0, p0, t0) = (thread_cpu_ns(tid)?, sys::process_cpu_ns(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    let (c1, p1, wall) = (thread_cpu_ns(tid)?, sys::process_cpu_ns(), t0.elapsed());
    let s1 = node.runtime().snapshot()?;
    let wall_ns = wall.as_nanos() as f64;
    let per_s = |f: fn(&control::runtime::WorkerStatus) -> u64| {
        (f(&s1.workers[0]) - f(&s0.workers[0])) as f64 / wall.as_secs_f64()
    };

    // First packets after silence.
    let mut wake_us = Vec::with_capacity(a.samples);
    let mut lost = 0;
    let mut jitter = lab::Rng::new(0x1d1e);
    for _ in 0..a.samples {
        let gap = a.gap_ms * 1e3 + (jitter.next_u64() % 5_000) as f64;
        std::thread::sleep(Duration::from_micros(gap as u64));
        match one(&mut tx, &mut rx, &mut bufs, &frame, Duration::from_millis(200)) {
            Some(d) => wake_us.push(d.as_nanos() as f64 / 1e3),
            None => lost += 1,
        }
    }
    node.stop()?;
    Ok(Figures {
        mode,
        idle_cpu_percent: (c1 - c0) as f64 / wall_ns * 100.0,
        process_cpu_percent: (p1 - p0) as f64 / wall_ns * 100.0,
        sleeps_per_s: per_s(|w| w.sleeps),
        naps_per_s: per_s(|w| w.naps),
        wake_us,
        lost,
    })
}

/// Wake latencies of a bare thread asleep in [`Poller::wait`] on a [`Waker`] on `cpu`, woken
/// by this thread after `a.gap_ms` of silence, to its acknowledgement, in microseconds.
fn wake_floor(a: &Args, cpu: usize) -> Result<Vec<f64>> {
    let waker = Arc::new(Waker::new()?);
    let (ack, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let epoch = Instant::now();
    let sleeper = {
        let (waker, ack, stop) = (waker.clone(), ack.clone(), stop.clone());
        std::thread::Builder::new().name("wake-floor".into()).spawn(move || {
            sys::pin(cpu);
            let mut p = Poller::new();
            while !stop.load(Ordering::SeqCst) {
                if p.wait(&[waker.fd()], control::runtime::BLOCK_TIMEOUT).unwrap_or(0) > 0 {
                    waker.clear();
                    ack.store(epoch.elapsed().as_nanos() as u64, Ordering::SeqCst);
                }
            }
        })?
    };
    let mut out = Vec::with_capacity(a.samples);
    let mut jitter = lab::Rng::new(0xf100);
    for _ in 0..a.samples {
        let gap = a.gap_ms * 1e3 + (jitter.next_u64() % 5_000) as f64;
        std::thread::sleep(Duration::from_micros(gap as u64));
        let before = ack.load(Ordering::SeqCst);
        let t0 = epoch.elapsed().as_nanos() as u64;
        waker.wake();
        let deadline = Instant::now() + Duration::from_secs(1);
        while ack.load(Ordering::SeqCst) == before && Instant::now() < deadline {
            std::hint::spin_loop();
        }
        let t1 = ack.load(Ordering::SeqCst);
        if t1 != before {
            out.push(t1.saturating_sub(t0) as f64 / 1e3);
        }
    }
    stop.store(true, Ordering::SeqCst);
    waker.wake();
    let _ = sleeper.join();
    Ok(out)
}

/// Sends `frame` and spins until it comes back forwarded; the time from send to receive, or
/// `None` after `timeout`.
fn one(
    tx: &mut MemifPort,
    rx: &mut MemifPort,
    (out, inb): &mut (Batch, Batch),
    frame: &[u8],
    timeout: Duration,
) -> Option<Duration> {
    out.clear();
    out.push_copy(frame);
    let t0 = Instant::now();
    if tx.tx_burst(out, &[0]) != 1 {
        return None;
    }
    loop {
        inb.clear();
        if rx.rx_burst(inb) > 0 {
            let t = t0.elapsed();
            if inb.packets().iter().any(|p| is_ours(p.frame())) {
                return Some(t);
            }
        }
        if t0.elapsed() > timeout {
            return None;
        }
        std::hint::spin_loop();
    }
}

/// The forwarded frame: IPv4 to [`DST`].
fn is_ours(f: &[u8]) -> bool {
    f.len() >= 34 && f[12..14] == [0x08, 0x00] && f[30..34] == DST.octets()
}

/// The id of this process's thread called `name`.
fn worker_tid(name: &str) -> Option<u32> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim_end() == name).then(|| e.file_name().to_str()?.parse().ok()).flatten()
    })
}

/// Nanoseconds thread `tid` has run: schedstat's first field, else stat's utime + stime
/// (clock ticks, assumed 100 a second).
fn thread_cpu_ns(tid: u32) -> Result<u64> {
    let base = format!("/proc/self/task/{tid}");
    if let Ok(s) = std::fs::read_to_string(format!("{base}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|x| x.parse().ok()) {
            return Ok(ns);
        }
    }
    let stat = std::fs::read_to_string(format!("{base}/stat"))?;
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { bail!("{base}/stat") };
    // From the state field on: state ppid pgrp session tty_nr tpgid flags minflt cminflt
    // majflt cmajflt utime stime.
    let f: Vec<&str> = rest.split_whitespace().collect();
    match (
        f.get(11).and_then(|x| x.parse::<u64>().ok()),
        f.get(12).and_then(|x| x.parse::<u64>().ok()),
    ) {
        (Some(u), Some(s)) => Ok((u + s) * 10_000_000),
        _ => bail!("{base}/stat: no utime/stime"),
    }
}
