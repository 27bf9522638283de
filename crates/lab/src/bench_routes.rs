//! `routeplex bench routes`: route updates through control while a VR forwards.
//!
//! One VR holds the real IPv4 table (or a generated one) as `table` routes and forwards 60-byte
//! UDP on one worker thread; a generator thread offers frames to its port and drains the other.
//! Control (this thread) first measures forwarding alone, then withdraws and re-announces
//! random prefixes of the table in batches — batch k withdraws its prefixes and re-announces
//! batch k-1's — through the same route operations the API uses, while the worker forwards.
//! `publish_latency_us` runs from a batch's submission to the first burst the worker looks up
//! in the FIB generation that batch published (read back from the VR, so it includes one
//! round trip to the worker, checked every 100 µs). At the end the published FIB is checked
//! against the RIB.

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
    let t_build = Instant::now();
    let mut opts = Options::new(1);
    opts.idle = Idle::Yield;
    let mut node = Node::start(topo, opts, ports::MAX_BURST)?;
    let build_ms = t_build.elapsed().as_secs_f64() * 1e3;
    let mut p0 = node.take_outside("p0").context("port p0")?;
    let mut p1 = node.take_outside("p1").context("port p1")?;

    // The generator and sink: one thread, offering bursts and counting what comes back.
    let stop = Arc::new(AtomicBool::new(false));
    let forwarded = Arc::new(AtomicU64::new(0));
    let sampler = crate::sys::threads::Sampler::start(
        vec![crate::sys::threads::Watch {
            pid: std::process::id(),
            process: "bench".into(),
            roles: [
                ("main", "control (updates)"),
                ("rpx-traffic", "generator and sink"),
                ("worker0", "worker (forwarding)"),
            ]
            .map(|(n, r)| (n.to_string(), r.to_string()))
            .to_vec(),
        }],
        Duration::from_millis(20),
    );
    let traffic = {
        let (stop, forwarded) = (stop.clone(), forwarded.clone());
        std::thread::Builder::new().name("rpx-traffic".into()).spawn(move || {
            let mut gen = Generator::new(frames);
            let (mut tx, mut rx, mut sink) =
                (Batch::new(256), Batch::new(ports::MAX_BURST), Sink::default());
            while !stop.load(Ordering::Relaxed) {
                gen.send(&mut p0, &mut tx, 256);
                sink.recv(&mut p1, &mut rx);
                forwarded.store(sink.packets(), Ordering::Relaxed);
            }
        })?
    };
    let rate = |secs: f64, work: &mut dyn FnMut()| {
        let (f0, t0) = (forwarded.load(Ordering::Relaxed), Instant::now());
        while t0.elapsed().as_secs_f64() < secs {
            work();
        }
        (forwarded.load(Ordering::Relaxed) - f0) as f64 / t0.elapsed().as_secs_f64() / 1e6
    };
    std::thread::sleep(Duration::from_millis(300));

    // Churn: batch k withdraws a random set and re-announces batch k-1's.
    let half = a.batch / 2;
    let via = |i: usize| RouteTarget::Via { gateway: IpAddr::V4(gws[i % gws.len()]), iface: None };
    let mut pending: Vec<(IpNet, RouteTarget)> = Vec::new();
    let (mut updates, mut lat) = (0u64, Vec::new());
    let mut churn_s = 0.0;
    let mut failure = None;
    let mut churn = || {
        let mut ops = Vec::with_capacity(a.batch);
        for (prefix, target) in pending.drain(..) {
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
            if pending.iter().any(|(q, _)| *q == prefix)
                || ops.iter().any(|o| matches!(o, RouteOp::Replace(r) if r.prefix == prefix))
            {
                continue;
            }
            ops.push(RouteOp::Delete { prefix, source: RouteSource::Table });
            pending.push((prefix, via(id as usize)));
        }
        let t0 = Instant::now();
        match node.route_ops(&vr, &ops) {
            Ok(done) => {
                churn_s += t0.elapsed().as_secs_f64();
                updates += ops.len() as u64;
                let g = done.generation4;
                // Until a burst has looked up in generation g (or the worker stopped).
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
                lat.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            Err(e) => {
                failure.get_or_insert(e.to_string());
                pending.clear();
            }
        }
    };
    // Phases without and with churn alternate, so a change of the machine's speed shows in
    // the pairs' probes instead of in the ratio.
    let runs = tester::pairs::run(
        a.pairs,
        |_| {
            Ok::<f64, crate::Error>(rate(a.seconds, &mut || {
                std::thread::sleep(Duration::from_millis(10))
            }))
        },
        |_| Ok(rate(a.seconds, &mut churn)),
    )?;
    // The ratio is during / before, as the goal states it.
    let values: Vec<_> = runs.iter().map(|(b, d)| (d.value, d.probes, b.value, b.probes)).collect();
    let loads: Vec<_> = runs.iter().map(|(b, _)| b.load_average).collect();
    let pairs =
        tester::pairs::Summary::new("during churn", "before (no churn)", "Mpps", &values, &loads);
    let (before, during) = (pairs.b.median, pairs.a.median);
    stop.store(true, Ordering::Relaxed);
    let _ = traffic.join();
    let placement = sampler.finish();
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
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
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
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let out = json!({
        "updates": updates,
        "updates_per_sec": updates as f64 / churn_s.max(1e-9),
        "updates_per_sec_wall": updates as f64 / (a.seconds * a.pairs as f64),
        "batch": a.batch,
        "batches": lat.len(),
        "forwarding_mpps_before": before,
        "forwarding_mpps_during": during,
        "ratio": pairs.ratio.median,
        "pairs": pairs,
        "publish_latency_us": { "p50": pct(0.5), "p99": pct(0.99), "max": lat.last().copied().unwrap_or(0.0) },
        "mismatches": mismatches,
        "checked": checked,
        "routes": table_routes,
        "fib_bytes": t.fib_bytes(),
        "table": table.label,
        "build_ms": build_ms,
        "threads": "worker (forwarding), generator+sink, control (updates): 3 busy threads, none pinned (each may run on any online CPU)",
        "online_cpus": online,
        "placement": placement.to_json(),
        "limited_by": if online < 3 {
            "cpu: fewer CPUs than busy threads, so churn takes CPU time from forwarding and the generator"
        } else {
            "dut"
        },
        "pairs_method": "phases of --seconds without churn and with it alternate (--pairs pairs), a fixed memory probe (dependent random reads over 8 MiB) and compute probe timed before each phase; forwarding_mpps_before/during are the phases' medians, ratio the median of the per-pair during / before (pairs.ratio has min and max); a pair is flagged when its two phases' probes differ by more than 10 %; updates, publish latencies and updates_per_sec cover every churn phase",
        "updates_per_sec_method": "route operations over the time spent inside the route_ops calls (validate, install, patch and publish); updates_per_sec_wall divides by the whole churn phase",
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
        println!("forwarding during churn against before, {} interleaved pairs:", a.pairs);
        for l in pairs.lines() {
            println!("{l}");
        }
    }
    node.stop()?;
    crate::ensure!(mismatches == 0, "{mismatches} FIB lookups disagreed with the RIB");
    Ok(())
}
