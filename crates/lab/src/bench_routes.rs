//! `routeplex bench routes`: route updates through control while a VR forwards.
//!
//! One VR holds the real IPv4 table (or a generated one) as `table` routes and forwards 60-byte
//! UDP on one worker thread, pinned to the last CPU; a generator thread on CPU 0 offers frames
//! to its port and drains the other. Control (this thread: on CPU 1 when there are three or
//! more, else beside the generator on CPU 0) first measures forwarding alone, then withdraws
//! and re-announces random prefixes of the table in batches — batch k withdraws its prefixes
//! and re-announces batch k-1's — through the same route operations the API uses, while the
//! worker forwards.
//! `publish_latency_us` runs from a batch's submission to the first burst the worker looks up
//! in the FIB generation that batch published (read back from the VR, so it includes one
//! round trip to the worker, checked every 100 µs). After the pairs the same churn runs once
//! more with the generator resting (`control_alone`): on 2 CPUs that is the only phase in
//! which control has a CPU to itself. At the end the published FIB is checked against the RIB.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Context, Result};
use control::runtime::{Idle, Options};
use control::Node;
use dataplane::config::RouteTarget;
use dataplane::{RouteOp, RouteSource};
use ipnet::IpNet;
use ports::Batch;
use serde_json::json;
use tester::{Generator, Sink};

use crate::lab::{self, Rng, Table};

/// Options of `routeplex bench routes`.
#[derive(clap::Args)]
pub struct Args {
    /// Prefix file for the VR's IPv4 routes [default: the cached real table, else 500,000
    /// generated prefixes].
    #[arg(long)]
    prefixes: Option<PathBuf>,
    /// Route operations per batch (half withdrawals, half re-announcements).
    #[arg(long, default_value_t = 10_000)]
    batch: usize,
    /// Seconds of forwarding measured without churn, then with it, in each pair.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Interleaved pairs of phases (without churn, with churn, without, …), 1..=100.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    crate::ensure!(a.batch >= 2, "--batch must be at least 2");
    crate::ensure!(a.seconds > 0.0, "--seconds must be positive");
    crate::ensure!((1..=100).contains(&a.pairs), "--pairs {} is outside 1..=100", a.pairs);
    let table = match &a.prefixes {
        Some(p) => Table::from_file(p)?,
        None => Table::real_or_generated(500_000, 0, 1)?,
    };
    crate::ensure!(!table.v4.is_empty(), "{}: no IPv4 prefixes", table.label);
    let mut topo = lab::topology(include_str!("bench.yaml"), "bench.yaml")?;
    let gws: Vec<Ipv4Addr> = (2..=9).map(|h| Ipv4Addr::new(198, 19, 0, h)).collect();
    let v4_only = Table { label: String::new(), v4: table.v4.clone(), v6: Vec::new() };
    v4_only.add_routes(&mut topo.vrs[0], &gws, &[]);
    let vr = topo.vrs[0].name.clone();
    let eth0 = topo.vrs[0].interfaces[0].mac;
    let mut rng = Rng::new(0x5eed);
    let frames = lab::udp_frames(table.destinations_v4(65_536, &mut rng)?, eth0);
    let online = crate::sys::online_cpus();
    // The worker on a CPU of its own; control on another where there is one.
    let (worker_cpu, control_cpu) = (online - 1, if online >= 3 { 1 } else { 0 });
    let t_build = Instant::now();
    let mut opts = Options::new(1);
    opts.idle = Idle::Yield;
    if online > 1 {
        opts.cpus = vec![Some(worker_cpu)];
        opts.pin = Some(crate::sys::pin);
    }
    let mut node = Node::start(topo, opts, ports::MAX_BURST)?;
    let build_ms = t_build.elapsed().as_secs_f64() * 1e3;
    let mut p0 = node.take_outside("p0").context("port p0")?;
    let mut p1 = node.take_outside("p1").context("port p1")?;

    // The generator and sink: one thread, offering bursts and counting what comes back.
    let stop = Arc::new(AtomicBool::new(false));
    // The generator rests while the probes before each phase run: on fewer than 3 CPUs they
    // share its CPU, and would time the sharing instead of the machine.
    let rest = Arc::new(AtomicBool::new(true));
    let forwarded = Arc::new(AtomicU64::new(0));
    // The generator's own CPU time: the share of a CPU it had in a phase says whether churn
    // took the offered load away (on fewer than 3 CPUs control runs beside it).
    let gen_cpu_ns = Arc::new(AtomicU64::new(0));
    let sampler = crate::sys::threads::Sampler::start(
        vec![crate::sys::threads::Watch::this_process(
            "bench",
            &[
                ("main", "control (updates)"),
                ("rpx-traffic", "generator and sink"),
                ("worker0", "worker (forwarding)"),
            ],
        )],
        Duration::from_millis(20),
    );
    let traffic = {
        let (stop, forwarded) = (stop.clone(), forwarded.clone());
        let (gen_cpu_ns, rest) = (gen_cpu_ns.clone(), rest.clone());
        std::thread::Builder::new().name("rpx-traffic".into()).spawn(move || {
            if online > 1 {
                crate::sys::pin(0);
            }
            let mut gen = Generator::new(frames);
            let (mut tx, mut rx, mut sink) =
                (Batch::new(256), Batch::new(ports::MAX_BURST), Sink::default());
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if rest.load(Ordering::Relaxed) {
                    sink.recv(&mut p1, &mut rx);
                    forwarded.store(sink.packets(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                gen.send(&mut p0, &mut tx, 256);
                sink.recv(&mut p1, &mut rx);
                forwarded.store(sink.packets(), Ordering::Relaxed);
                n = n.wrapping_add(1);
                if n.is_multiple_of(256) {
                    gen_cpu_ns.store(crate::sys::thread_cpu_ns(), Ordering::Relaxed);
                }
            }
        })?
    };
    // A phase's forwarding rate (Mpps) and the share of a CPU the generator had in it.
    let rate = |secs: f64, work: &mut dyn FnMut()| {
        rest.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        let (f0, t0) = (forwarded.load(Ordering::Relaxed), Instant::now());
        let g0 = gen_cpu_ns.load(Ordering::Relaxed);
        while t0.elapsed().as_secs_f64() < secs {
            work();
        }
        let wall = t0.elapsed().as_secs_f64();
        let mpps = (forwarded.load(Ordering::Relaxed) - f0) as f64 / wall / 1e6;
        rest.store(true, Ordering::Relaxed);
        (mpps, gen_cpu_ns.load(Ordering::Relaxed).saturating_sub(g0) as f64 / 1e9 / wall)
    };
    let (mut gen_before, mut gen_during) = (Vec::new(), Vec::new());
    if online > 1 {
        crate::sys::pin(control_cpu);
    }
    std::thread::sleep(Duration::from_millis(300));

    // Churn: batch k withdraws a random set and re-announces batch k-1's.
    let half = a.batch / 2;
    let via = |i: usize| RouteTarget::Via { gateway: IpAddr::V4(gws[i % gws.len()]), iface: None };
    let mut pending: Vec<(IpNet, RouteTarget)> = Vec::new();
    // The prefixes the batch being built touches (withdrawn now or re-announced).
    let mut busy: HashSet<IpNet> = HashSet::with_capacity(a.batch);
    let mut failure = None;
    // `wait_seen`: wait until the worker has looked up in the generation published (traffic).
    let mut churn = |acc: &mut Churned, wait_seen: bool| {
        let mut ops = Vec::with_capacity(a.batch);
        busy.clear();
        for (prefix, target) in pending.drain(..) {
            busy.insert(prefix);
            ops.push(RouteOp::Replace(dataplane::routes::route(
                prefix,
                target,
                RouteSource::Table,
            )));
        }
        for _ in 0..half {
            let k = (rng.next_u64() % table.v4.len() as u64) as usize;
            let (p, id) = table.v4[k];
            let prefix = IpNet::V4(p);
            if !busy.insert(prefix) {
                continue;
            }
            ops.push(RouteOp::Delete { prefix, source: RouteSource::Table });
            pending.push((prefix, via(id as usize)));
        }
        let (t0, c0) = (Instant::now(), crate::sys::thread_cpu_ns());
        match node.route_ops(&vr, &ops) {
            Ok(done) => {
                acc.secs += t0.elapsed().as_secs_f64();
                acc.cpu_ns += crate::sys::thread_cpu_ns().saturating_sub(c0);
                acc.updates += ops.len() as u64;
                let g = done.generation4;
                // Until a burst has looked up in generation g (or the worker stopped).
                if wait_seen {
                    loop {
                        let seen =
                            node.runtime().on_vr(&vr, |c, v| c.vrs()[v].fib_generations_seen().0);
                        match seen {
                            Ok(s) if s >= g => break,
                            Ok(_) if t0.elapsed() > Duration::from_secs(5) => break,
                            // Not every poll: each check is a job the worker runs between bursts.
                            Ok(_) => std::thread::sleep(Duration::from_micros(100)),
                            Err(e) => {
                                failure.get_or_insert(e.to_string());
                                break;
                            }
                        }
                    }
                }
                acc.lat.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            Err(e) => {
                failure.get_or_insert(e.to_string());
                pending.clear();
            }
        }
    };
    // Phases without and with churn alternate, so a change of the machine's speed shows in
    // the pairs' probes instead of in the ratio.
    let mut during_churn = Churned::default();
    let runs = tester::pairs::run(
        a.pairs,
        |_| {
            let (mpps, c) = rate(a.seconds, &mut || std::thread::sleep(Duration::from_millis(10)));
            gen_before.push(c);
            Ok::<f64, crate::Error>(mpps)
        },
        |_| {
            let (mpps, c) = rate(a.seconds, &mut || churn(&mut during_churn, true));
            gen_during.push(c);
            Ok(mpps)
        },
    )?;
    // Where the threads ran in the pairs (the alone phase is not theirs).
    let placement = sampler.finish();
    // Control alone: the same churn with the generator resting, so control shares its CPU
    // with nothing busy (on 2 CPUs it has CPU 0 to itself, the idle worker CPU 1): the rate of
    // a machine with a CPU for each. With no traffic no burst looks the new version up: its
    // latency runs to the publish itself.
    let mut alone = Churned::default();
    let t_alone = Instant::now();
    while t_alone.elapsed().as_secs_f64() < a.seconds {
        churn(&mut alone, false);
    }
    // The ratio is during / before, as the goal states it.
    let values: Vec<_> = runs.iter().map(|(b, d)| (d.value, d.probes, b.value, b.probes)).collect();
    let loads: Vec<_> = runs.iter().map(|(b, _)| b.load_average).collect();
    let pairs =
        tester::pairs::Summary::new("during churn", "before (no churn)", "Mpps", &values, &loads);
    let (before, during) = (pairs.b.median, pairs.a.median);
    let gen_share = (tester::pairs::median(&gen_before), tester::pairs::median(&gen_during));
    let limited_by = if gen_share.1 < 0.9 * gen_share.0 {
        format!(
            "generator during churn: it had {:.0} % of a CPU against {:.0} % before ({})",
            gen_share.1 * 100.0,
            gen_share.0 * 100.0,
            if online < 3 {
                "control shares CPU 0 with it: fewer than 3 CPUs"
            } else {
                "CPUs shared"
            }
        )
    } else {
        "dut (the generator kept its CPU in both phases)".to_string()
    };
    stop.store(true, Ordering::Relaxed);
    let _ = traffic.join();
    if let Some(e) = failure {
        crate::bail!("route update failed: {e}");
    }
    // Put the last withdrawn prefixes back, then check the FIB against the RIB.
    let ops: Vec<RouteOp> = pending
        .drain(..)
        .map(|(p, t)| RouteOp::Replace(dataplane::routes::route(p, t, RouteSource::Table)))
        .collect();
    if !ops.is_empty() {
        node.route_ops(&vr, &ops)?;
    }
    let t = node.table(&vr).context("the VR's table")?;
    let (fib4, _) = t.fibs();
    let published = fib4.current();
    let mut mismatches = 0u64;
    let mut checked = 0u64;
    for (addr, len, _) in fib4.rib().iter() {
        let last = addr | (u32::MAX.checked_shr(u32::from(len)).unwrap_or(0));
        for probe in [addr, last] {
            checked += 1;
            let want = fib4.rib().longest_match(probe).map_or(fib::NO_ROUTE, |m| m.2);
            if published.lookup(probe) != want {
                mismatches += 1;
            }
        }
    }
    let table_routes = t.counts().iter().find(|(s, _)| *s == RouteSource::Table).map_or(0, |c| c.1);
    let updates = during_churn.updates;
    let alone_latency = alone.latency_json();
    let out = json!({
        "updates": updates,
        "updates_per_sec": during_churn.per_sec(),
        "updates_per_cpu_sec": during_churn.per_cpu_sec(),
        "updates_per_sec_wall": updates as f64 / (a.seconds * a.pairs as f64),
        "batch": a.batch,
        "batches": during_churn.lat.len(),
        "control_alone": {
            "updates": alone.updates,
            "updates_per_sec": alone.per_sec(),
            "updates_per_cpu_sec": alone.per_cpu_sec(),
            "publish_latency_us": alone_latency,
            "method": "after the pairs, --seconds of the same churn with the generator resting, so control shares its CPU with nothing busy (on 2 CPUs: control on CPU 0, the idle worker on CPU 1; on 1 CPU the worker still shares it); with no traffic, publish_latency_us runs from a batch's submission to its publish (the pointer swap), not to a burst's first lookup",
        },
        "forwarding_mpps_before": before,
        "forwarding_mpps_during": during,
        "ratio": pairs.ratio.median,
        "pairs": pairs,
        "publish_latency_us": during_churn.latency_json(),
        "mismatches": mismatches,
        "checked": checked,
        "routes": table_routes,
        "fib_bytes": t.fib_bytes(),
        "table": table.label,
        "build_ms": build_ms,
        "threads": if online > 1 {
            format!("worker (forwarding) asked for CPU {worker_cpu}, generator+sink for CPU 0, control (updates) for CPU {control_cpu}")
        } else {
            "worker, generator+sink and control share the one CPU".to_string()
        },
        "online_cpus": online,
        "placement": placement.to_json(),
        "generator_cpu_share": { "before": gen_share.0, "during": gen_share.1 },
        "limited_by": limited_by,
        "generator_cpu_share_method": "per phase, the generator thread's CPU time over the phase's wall time (median over the phases)",
        "pairs_method": "phases of --seconds without churn and with it alternate (--pairs pairs), a fixed memory probe (dependent random reads over 8 MiB) and compute probe timed before each phase, the generator resting meanwhile; forwarding_mpps_before/during are the phases' medians, ratio the median of the per-pair during / before (pairs.ratio has min and max); a pair is flagged when its two phases' probes differ by more than 10 %; updates, publish latencies and updates_per_sec cover every churn phase of the pairs (control_alone apart), and placement the pairs",
        "updates_per_sec_method": "route operations over the time spent inside the route_ops calls (validate, install, patch and publish); updates_per_cpu_sec over the CPU time the control thread used in them (what the rate would be on a CPU of its own); updates_per_sec_wall divides by the whole churn phase",
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
        println!("forwarding during churn against before, {} interleaved pairs:", a.pairs);
        for l in pairs.lines() {
            println!("{l}");
        }
        let lat = &out["control_alone"]["publish_latency_us"];
        println!(
            "control alone (generator resting): {:.0} updates/s in the calls, {:.0} per CPU-second; publish p50 {:.0} us, p99 {:.0} us",
            alone.per_sec(),
            alone.per_cpu_sec(),
            lat["p50"].as_f64().unwrap_or(0.0),
            lat["p99"].as_f64().unwrap_or(0.0)
        );
    }
    node.stop()?;
    crate::ensure!(mismatches == 0, "{mismatches} FIB lookups disagreed with the RIB");
    Ok(())
}

/// What churn phases did: route operations, time and CPU inside the calls, and each batch's
/// publish latency (µs).
#[derive(Default)]
struct Churned {
    updates: u64,
    secs: f64,
    cpu_ns: u64,
    lat: Vec<f64>,
}

impl Churned {
    fn per_sec(&self) -> f64 {
        self.updates as f64 / self.secs.max(1e-9)
    }

    fn per_cpu_sec(&self) -> f64 {
        self.updates as f64 / (self.cpu_ns as f64 / 1e9).max(1e-9)
    }

    fn latency_json(&self) -> serde_json::Value {
        let mut lat = self.lat.clone();
        lat.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0.0)
        };
        json!({ "p50": pct(0.5), "p99": pct(0.99), "max": lat.last().copied().unwrap_or(0.0) })
    }
}
