//! `routeplex bench fib` and `routeplex bench pipeline`.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Instant;

use crate::{bail, Context, Result};
use fib::bench::{BenchOptions, Routes};
use fib::prefix_file::{self, Family as FileFamily};
use ports::Batch;
use serde_json::json;
use tester::{Generator, Sink};

use crate::alloc_count::allocations;
use crate::lab::{self, Rng, Table};
use crate::sys::threads::{Placement, Sampler, Watch};
use crate::Family;

/// Options of `routeplex bench fib`.
#[derive(clap::Args)]
pub struct FibArgs {
    /// Prefix file, lines "prefix next-hop-id" [default: the cached real table of --family,
    /// from scripts/fetch-prefixes].
    #[arg(long)]
    prefixes: Option<PathBuf>,
    /// Which family of the file to load and look up.
    #[arg(long, value_enum, default_value_t = Family::Ipv4)]
    family: Family,
    /// Distinct random addresses per round (keep it larger than the caches).
    #[arg(long, default_value_t = 1 << 22)]
    addresses: usize,
    /// Timed rounds over those addresses.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Addresses per batched lookup.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Another routeplex binary (the previous release) to measure against, in interleaved
    /// pairs of child processes running the same options (`lookups_per_sec`).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// With --baseline: pairs (this build, baseline, …), 1..=100.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
}

/// Options of `routeplex bench pipeline`.
#[derive(clap::Args)]
pub struct PipelineArgs {
    /// Prefix file for the VR's IPv4 routes [default: the cached real table, else 500,000
    /// generated prefixes].
    #[arg(long)]
    prefixes: Option<PathBuf>,
    /// Packets to time.
    #[arg(long, default_value_t = 20_000_000)]
    packets: u64,
    /// Frames per burst (1..=256).
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Distinct destinations in the generator's rotation.
    #[arg(long, default_value_t = 65_536)]
    flows: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Worker threads, one per replica (with --replicas: the parallel-VR benchmark).
    #[arg(long)]
    workers: Option<usize>,
    /// Replicas of the VR, flows spread over them by the flow hash; measured against one
    /// replica in the same run.
    #[arg(long)]
    replicas: Option<usize>,
    /// Another routeplex binary (the previous release) to measure against, in interleaved
    /// pairs of child processes running the same options (`mpps`).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Pairs, 1..=100: with --baseline (this build, baseline, …); with --replicas N > 1
    /// (N replicas, 1 replica, …).
    #[arg(long, default_value_t = 5)]
    pairs: usize,
}

pub fn fib(a: FibArgs) -> Result<()> {
    if let Some(base) = &a.baseline {
        let mut args = vec!["fib".to_string(), "--family".into()];
        args.push(match a.family {
            Family::Ipv4 => "ipv4".into(),
            Family::Ipv6 => "ipv6".into(),
        });
        if let Some(p) = &a.prefixes {
            args.extend(["--prefixes".into(), p.display().to_string()]);
        }
        for (k, v) in [("--addresses", a.addresses), ("--rounds", a.rounds), ("--batch", a.batch)] {
            args.extend([k.to_string(), v.to_string()]);
        }
        return crate::bench_pairs::against_baseline(
            base,
            &args,
            "lookups_per_sec",
            "lookups/s",
            a.pairs,
            a.json,
        );
    }
    crate::ensure!(a.addresses > 0 && a.rounds > 0, "--addresses and --rounds must be positive");
    crate::ensure!((1..=4096).contains(&a.batch), "--batch {} is outside 1..=4096", a.batch);
    let fam = match a.family {
        Family::Ipv4 => FileFamily::Ipv4,
        Family::Ipv6 => FileFamily::Ipv6,
    };
    let path = match a.prefixes {
        Some(p) => p,
        None => prefix_file::cached(fam)
            .context("no --prefixes given and no cached real table: run scripts/fetch-prefixes")?,
    };
    let list = prefix_file::load(&path).map_err(crate::Error::msg)?;
    let routes = Routes::from_list(&list, fam);
    let n = match routes {
        Routes::V4(r) => r.len(),
        Routes::V6(r) => r.len(),
    };
    if n == 0 {
        bail!("{}: no {:?} prefixes in the file", path.display(), a.family);
    }
    let opts = BenchOptions {
        addresses: a.addresses,
        rounds: a.rounds,
        batch: a.batch,
        ..BenchOptions::default()
    };
    let probes = ProbeRun::new();
    let sampler = watch_self("lookups");
    let r = fib::bench::run(routes, &opts);
    let placement = sampler.finish();
    let probes = probes.finish();
    if a.json {
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json())?;
        v["file"] = json!(path.display().to_string());
        v["probes"] = probes.to_json();
        v["placement"] = placement.to_json();
        v["note"] = json!(starved(&placement, "lookups"));
        println!("{v}");
    } else {
        println!(
            "{} ({:?}): {} prefixes, table {:.2} MiB, built in {:.0} ms",
            path.display(),
            a.family,
            r.prefixes,
            r.table_bytes as f64 / 1048576.0,
            r.build_ms
        );
        println!(
            "batched ({}): {:.1} M lookups/s ({:.2} ns each); scalar: {:.1} M/s",
            r.batch,
            r.lookups_per_sec / 1e6,
            r.ns_per_lookup,
            r.scalar_lookups_per_sec / 1e6
        );
        println!(
            "checked {} lookups against the naive reference: {} mismatches; addresses: {}",
            r.checked, r.mismatches, r.address_mode
        );
        println!("{}", placement.summary());
        println!("{}", probes.summary());
        if let Some(n) = starved(&placement, "lookups") {
            println!("{n}");
        }
    }
    if r.mismatches > 0 {
        bail!("{} lookups disagreed with the naive reference", r.mismatches);
    }
    Ok(())
}

pub fn pipeline(a: PipelineArgs) -> Result<()> {
    if let Some(base) = &a.baseline {
        let mut args = vec!["pipeline".to_string()];
        if let Some(p) = &a.prefixes {
            args.extend(["--prefixes".into(), p.display().to_string()]);
        }
        for (k, v) in
            [("--packets", a.packets), ("--batch", a.batch as u64), ("--flows", a.flows as u64)]
        {
            args.extend([k.to_string(), v.to_string()]);
        }
        for (k, v) in [("--workers", a.workers), ("--replicas", a.replicas)] {
            if let Some(v) = v {
                args.extend([k.to_string(), v.to_string()]);
            }
        }
        return crate::bench_pairs::against_baseline(base, &args, "mpps", "Mpps", a.pairs, a.json);
    }
    if a.workers.is_some() || a.replicas.is_some() {
        let n = a.replicas.or(a.workers).unwrap_or(1);
        return crate::bench_pvr::run(crate::bench_pvr::Opts {
            workers: a.workers.unwrap_or(n),
            replicas: n,
            packets: a.packets,
            batch: a.batch,
            flows: a.flows,
            prefixes: a.prefixes,
            json: a.json,
            pairs: a.pairs,
        });
    }
    crate::ensure!(
        (1..=ports::MAX_BURST).contains(&a.batch),
        "--batch {} is outside 1..={}",
        a.batch,
        ports::MAX_BURST
    );
    crate::ensure!(a.packets > 0 && a.flows > 0, "--packets and --flows must be positive");
    let table = match &a.prefixes {
        Some(p) => Table::from_file(p)?,
        None => Table::real_or_generated(500_000, 0, 1)?,
    };
    crate::ensure!(!table.v4.is_empty(), "{}: no IPv4 prefixes", table.label);
    let topo = lab::topology(include_str!("bench.yaml"), "bench.yaml")?;
    let mut vrs = topo.vrs.clone();
    let gws: Vec<Ipv4Addr> = (2..=9).map(|h| Ipv4Addr::new(198, 19, 0, h)).collect();
    let v4_only = Table { label: String::new(), v4: table.v4.clone(), v6: Vec::new() };
    v4_only.add_routes(&mut vrs[0], &gws, &[]);
    let routes = vrs[0].routes.len();
    let eth0 = vrs[0].interfaces[0].mac;
    let mut rng = Rng::new(0x5eed);
    let frames = lab::udp_frames(table.destinations_v4(a.flows, &mut rng)?, eth0);
    let mut lab = lab::build(&topo, &vrs)?;
    let mut p0 = lab.take_outside(&topo, "p0")?;
    let mut p1 = lab.take_outside(&topo, "p1")?;
    let mut engine = lab.engine;
    let mut gen = Generator::new(frames);
    let (mut tx, mut rx, mut sink) =
        (Batch::new(a.batch), Batch::new(ports::MAX_BURST), Sink::default());
    let probes = ProbeRun::new();
    let sampler = watch_self("generator, worker and sink");
    let t0 = Instant::now();
    // One round: the generator fills port 0, the worker polls (timed), the sink drains port 1.
    let mut worker_ns = 0u64;
    let mut round = |engine: &mut dataplane::Engine, sink: &mut Sink, timed: bool| {
        gen.send(&mut p0, &mut tx, a.batch);
        let t = Instant::now();
        engine.poll((t - t0).as_nanos() as u64);
        if timed {
            worker_ns += t.elapsed().as_nanos() as u64;
        }
        sink.recv(&mut p1, &mut rx);
    };
    for _ in 0..(1_000_000 / a.batch as u64).max(100) {
        round(&mut engine, &mut sink, false);
    }
    let (fwd0, rx0) = (sink.packets(), engine.port_counters(0).rx_packets);
    let allocs0 = allocations();
    let wall = Instant::now();
    while sink.packets() - fwd0 < a.packets {
        let before = sink.packets();
        round(&mut engine, &mut sink, true);
        if sink.packets() == before && engine.port_counters(0).rx_packets == rx0 {
            bail!("nothing is being forwarded:\n{}", engine.dump());
        }
    }
    let wall_s = wall.elapsed().as_secs_f64();
    let placement = sampler.finish();
    let probes = probes.finish();
    let allocs = allocations() - allocs0;
    let forwarded = sink.packets() - fwd0;
    let received = engine.port_counters(0).rx_packets - rx0;
    let ns = worker_ns as f64 / received as f64;
    let out = json!({
        "mpps": 1e3 / ns,
        "ns_per_packet": ns,
        "allocs_per_packet": allocs as f64 / received as f64,
        "allocations": allocs,
        "routes": routes,
        "table": table.label,
        "packets": received,
        "forwarded": forwarded,
        "dropped": received - forwarded,
        "batch": a.batch,
        "frame_bytes": 60,
        "flows": a.flows,
        "wall_mpps": forwarded as f64 / wall_s / 1e6,
        "generator_share": 1.0 - worker_ns as f64 / 1e9 / wall_s,
        "limited_by": "dut",
        "placement": placement.to_json(),
        "probes": probes.to_json(),
        "note": starved(&placement, "generator, worker and sink"),
        "method": "one thread; mpps and ns_per_packet count only the worker's poll (rx burst, demux, VR pipeline, tx burst), so they are the DUT's own limit (limited_by dut by construction); wall_mpps also includes the generator and sink on the same thread, which took generator_share of the wall time",
    });
    if a.json {
        println!("{out}");
    } else {
        println!(
            "one VR, {routes} IPv4 routes ({}), {} 60-byte frames in bursts of {}: {:.2} Mpps ({:.1} ns/packet) in the worker, {:.2} Mpps wall with generator and sink; {} allocations",
            table.label, received, a.batch, 1e3 / ns, ns, forwarded as f64 / wall_s / 1e6, allocs
        );
        println!("{}", placement.summary());
        println!("{}", probes.summary());
        if let Some(n) = starved(&placement, "generator, worker and sink") {
            println!("{n}");
        }
    }
    Ok(())
}

/// The probes of `tester::pairs` timed before and after an unpaired run: its figure is
/// this minute's, and on these VMs memory speed swings twofold between minutes, which the
/// memory probe shows (the compute probe stays within a few percent).
struct ProbeRun {
    prober: tester::pairs::Prober,
    before: tester::pairs::Probes,
}

/// [`ProbeRun`] once the run is over.
struct Probed {
    before: tester::pairs::Probes,
    after: tester::pairs::Probes,
}

impl ProbeRun {
    fn new() -> ProbeRun {
        let prober = tester::pairs::Prober::new();
        let before = prober.probe();
        ProbeRun { prober, before }
    }

    fn finish(self) -> Probed {
        Probed { before: self.before, after: self.prober.probe() }
    }
}

impl Probed {
    fn to_json(&self) -> serde_json::Value {
        json!({
            "before": self.before,
            "after": self.after,
            "method": "memory: ns per read of 2^20 dependent reads through a random cycle in an 8 MiB table; compute: ns per step of 10^7 dependent multiply-xor-shift steps; timed on this thread right before and right after the run",
        })
    }

    fn summary(&self) -> String {
        let (b, a) = (self.before, self.after);
        format!(
            "probes: memory {:.1} ns/read before, {:.1} after; compute {:.3} ns/step before, {:.3} after",
            b.memory_ns_per_read, a.memory_ns_per_read, b.compute_ns_per_step, a.compute_ns_per_step
        )
    }
}

/// Samples where this process's threads run, its main thread under `role`.
fn watch_self(role: &str) -> Sampler {
    Sampler::start(
        vec![Watch::this_process("bench", &[("main", role)])],
        std::time::Duration::from_millis(20),
    )
}

/// A note when the thread with `role` had its CPU less than 90 % of the time.
fn starved(p: &Placement, role: &str) -> Option<String> {
    let t = p.threads.iter().find(|t| t.role == role)?;
    (t.busy() < 0.9).then(|| {
        format!(
            "the measuring thread ran only {:.0} % of the time (the OS gave its CPU to other work): rates are lower than this host can do",
            t.busy() * 100.0
        )
    })
}
