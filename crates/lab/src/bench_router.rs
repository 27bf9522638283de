//! `routeplex bench router`: one VR holding the full IPv4 table (or, with `--family ipv6`, the
//! IPv6 one) between two memif ports, driven as a router tester would: this process's
//! generator sends UDP to random addresses across the table into port 0, its sink counts what
//! the VR forwards out of port 1. With
//! `--compare l3fwd`, DPDK's l3fwd example (LPM or FIB lookup) with the same table, in the same
//! harness (two memif servers, the same generator and sink, the same CPUs), in interleaved
//! pairs with the probes of [`tester::pairs`].
//!
//! Placement: the generator and sink in this process's main thread on CPU 0; the VR's one
//! worker, or l3fwd's one lcore, on the last CPU. Both routers stay up for the whole run (each
//! loaded its table once); the one not measured waits: l3fwd stopped (SIGSTOP), routeplex's
//! worker idle (no frames reach it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Result;
use control::runtime::Options;
use control::{Node, Topology};
use ports::memif::MemifPort;
use serde_json::json;
use tester::frames::{udp_frame, UdpFlow};
use tester::{GenFrame, Generator};
use wire::MacAddr;

use crate::dpdk_apps::{self, App};
use crate::lab::{Rng, Table};
use crate::sys::threads::{Placement, Sampler, Watch};
use crate::{pktgen, sys, Family};

/// Options of `routeplex bench router`.
#[derive(clap::Args)]
pub struct Args {
    /// `l3fwd`: also run DPDK 22.11's l3fwd example with the same table in the same harness,
    /// interleaved with routeplex (--pairs), and print each size's pairs, probes and median
    /// `ratio_to_l3fwd` (needs `scripts/setup --bench`).
    #[arg(long, value_parser = ["l3fwd"])]
    compare: Option<String>,
    /// l3fwd's lookup: `lpm` (rte_lpm, rte_lpm6) or `fib` (rte_fib's DIR-24-8, rte_fib6's trie).
    #[arg(long, default_value = "lpm", value_parser = ["lpm", "fib"])]
    lookup: String,
    /// The family forwarded: the VR (and l3fwd) hold that family's table; IPv6 frames are at
    /// least 70 bytes (Ethernet, IPv6, UDP and the sequence number).
    #[arg(long, value_enum, default_value = "ipv4")]
    family: Family,
    /// Frame sizes without FCS, comma-separated, each 60..=1514.
    #[arg(long, value_delimiter = ',', default_value = "60,1514")]
    sizes: Vec<usize>,
    /// Distinct destination addresses, random inside random prefixes of the table, 1..=1048576.
    #[arg(long, default_value_t = 65_536)]
    destinations: usize,
    /// Prefix file of the table [default: the cached real tables, else 500,000 IPv4 and
    /// 130,000 IPv6 generated prefixes].
    #[arg(long)]
    prefixes: Option<PathBuf>,
    /// Seconds per trial.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Interleaved pairs per size (routeplex, l3fwd, routeplex, …), 1..=100.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// The generator's burst, 1..=256.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// The VR worker's burst (frames per port and poll, as `routeplex run --burst`), 1..=256.
    #[arg(long, default_value_t = 256)]
    burst: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

const VR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 0]);
/// The next hops of the table's routes (eight, with static neighbours, as `bench pipeline`).
const GATEWAYS: std::ops::RangeInclusive<u8> = 2..=9;

/// One trial of one router.
struct Point {
    seconds: f64,
    offered_mpps: f64,
    mpps: f64,
    lost: u64,
    generator_busy: f64,
    limited_by: &'static str,
    placement: Placement,
    /// routeplex only: frames its port towards the sink could not hand over (the sink's ring
    /// was full), from the data plane's own counters.
    dut_tx_full: Option<u64>,
}

impl Point {
    fn to_json(&self, size: usize) -> serde_json::Value {
        json!({
            "size": size, "seconds": self.seconds, "offered_mpps": self.offered_mpps,
            "mpps": self.mpps, "gbps": self.mpps * 1e6 * size as f64 * 8.0 / 1e9,
            "lost": self.lost, "dut_tx_full": self.dut_tx_full,
            "generator_busy": self.generator_busy,
            "limited_by": self.limited_by, "placement": self.placement.to_json(),
        })
    }
}

/// A router under test: its two memif ends in this process, and what to sample.
struct Side {
    tx: MemifPort,
    rx: MemifPort,
    watch: Watch,
}

pub fn run(a: Args) -> Result<()> {
    crate::ensure!(!a.sizes.is_empty(), "--sizes is empty");
    for &s in &a.sizes {
        crate::ensure!((60..=1514).contains(&s), "--sizes: {s} is outside 60..=1514");
    }
    crate::ensure!(
        (1..=1 << 20).contains(&a.destinations),
        "--destinations {} is outside 1..=1048576",
        a.destinations
    );
    crate::ensure!(a.seconds > 0.0, "--seconds must be positive");
    crate::ensure!((1..=100).contains(&a.pairs), "--pairs {} is outside 1..=100", a.pairs);
    crate::ensure!(
        (1..=ports::MAX_BURST).contains(&a.batch),
        "--batch {} is outside 1..=256",
        a.batch
    );
    crate::ensure!(
        (1..=ports::MAX_BURST).contains(&a.burst),
        "--burst {} is outside 1..=256",
        a.burst
    );
    let l3fwd = a.compare.is_some().then(dpdk_apps::l3fwd).transpose()?;
    let table = match &a.prefixes {
        Some(p) => Table::from_file(p)?,
        None => Table::real_or_generated(500_000, 130_000, 1)?,
    };
    let mut rng = Rng::new(0x10f3d);
    let (dsts, prefixes): (Vec<IpAddr>, usize) = match a.family {
        Family::Ipv4 => {
            crate::ensure!(!table.v4.is_empty(), "{}: no IPv4 prefixes", table.label);
            let d = table.destinations_v4(a.destinations, &mut rng)?;
            (d.into_iter().map(IpAddr::V4).collect(), table.v4.len())
        }
        Family::Ipv6 => {
            crate::ensure!(!table.v6.is_empty(), "{}: no IPv6 prefixes", table.label);
            let d = table.destinations_v6(a.destinations, &mut rng)?;
            (d.into_iter().map(IpAddr::V6).collect(), table.v6.len())
        }
    };

    let cpus = sys::online_cpus();
    let dut_cpu = cpus - 1;
    let tag = format!("rpx-brt-{}", std::process::id());
    let t = Instant::now();
    let node = start_vr(&table, a.family, &format!("{tag}-vr"), dut_cpu, a.burst)?;
    let vr_build_s = t.elapsed().as_secs_f64();
    // Pinned once the VR's threads are made, so that they do not inherit CPU 0 alone.
    let pinned = cpus > 1 && sys::pin(0);
    let pinning = if pinned {
        format!("asked for: generator and sink (this process's main thread) on CPU 0; the VR's one worker, or l3fwd's one lcore, on CPU {dut_cpu}")
    } else {
        format!("{cpus} CPU(s): nothing pinned")
    };
    let mut vr = Side {
        tx: pktgen::connect(&format!("@{tag}-vr-0"), 0, "bench-router-tx")?,
        rx: pktgen::connect(&format!("@{tag}-vr-1"), 0, "bench-router-rx")?,
        watch: Watch::this_process(
            "bench",
            &[("main", "generator and sink"), ("worker0", "routeplex worker")],
        ),
    };
    let mut dpdk = match &l3fwd {
        Some(bin) => {
            Some(start_l3fwd(bin, &table, a.family, &a.lookup, &format!("{tag}-l3"), dut_cpu)?)
        }
        None => None,
    };

    let mut sizes = Vec::new();
    for &size in &a.sizes {
        let frames = frames(&dsts, size);
        let frame_bytes = frames[0].frame.len();
        let trial = |side: &mut Side, node| measure(side, node, &frames, size, a.batch, a.seconds);
        let Some((app, side)) = dpdk.as_mut() else {
            let p = trial(&mut vr, Some(&node))?;
            if !a.json {
                println!(
                    "{frame_bytes} B: routeplex {:.2} Mpps ({:.2} Gbit/s), offered {:.2}, limited by {}; {}",
                    p.mpps,
                    p.mpps * frame_bytes as f64 * 8e-3,
                    p.offered_mpps,
                    p.limited_by,
                    p.placement.summary()
                );
            }
            sizes.push(json!({ "size": frame_bytes, "routeplex": [p.to_json(frame_bytes)] }));
            continue;
        };
        let runs = tester::pairs::run(
            a.pairs,
            |_| trial(&mut vr, Some(&node)),
            |_| {
                app.pause(false);
                let p = trial(side, None);
                app.pause(true);
                app.check_running()?;
                p
            },
        )?;
        let l3 = format!("DPDK l3fwd ({})", a.lookup);
        let summary = tester::pairs::Summary::from_measured(
            "routeplex VR",
            &l3,
            "Mpps",
            &runs,
            |p| p.mpps,
            |p| p.mpps,
        );
        if !a.json {
            println!(
                "{frame_bytes} B ({} B on the wire), {} interleaved pairs, ratio = routeplex / l3fwd:",
                frame_bytes + 4,
                a.pairs
            );
            for (i, (r, d)) in runs.iter().enumerate() {
                println!(
                    "  pair {}: routeplex limited by {}, {}; l3fwd limited by {}, {}",
                    i + 1,
                    r.value.limited_by,
                    r.value.placement.summary(),
                    d.value.limited_by,
                    d.value.placement.summary()
                );
            }
            for l in summary.lines() {
                println!("{l}");
            }
        }
        sizes.push(json!({
            "size": frame_bytes,
            "wire_size": frame_bytes + 4,
            "pairs": summary,
            "ratio_to_l3fwd": summary.ratio.median,
            "routeplex": runs.iter().map(|(r, _)| r.value.to_json(frame_bytes)).collect::<Vec<_>>(),
            "l3fwd": runs.iter().map(|(_, d)| d.value.to_json(frame_bytes)).collect::<Vec<_>>(),
        }));
    }
    drop(node);
    let j = json!({
        "table": table.label,
        "family": match a.family { Family::Ipv4 => "ipv4", Family::Ipv6 => "ipv6" },
        "prefixes": prefixes,
        "destinations": a.destinations,
        "vr_start_s": vr_build_s,
        "vr_burst": a.burst,
        "pinning": pinning,
        "l3fwd_lookup": l3fwd.as_ref().map(|_| &a.lookup),
        "method": "per size, interleaved pairs (routeplex, l3fwd, ...; --pairs), the probes of tester::pairs timed before every trial: this process's generator (UDP to --destinations random addresses inside random prefixes of the table, one sequence-numbered flow, bursts of --batch) on memif client -> the router's memif server port 0 -> its port 1 -> this process's sink; the router is a routeplex VR (worker pinned to the last CPU, the table as `table` routes via 8 gateways with static neighbours) or DPDK 22.11's l3fwd example built from dpdk-doc (memif Rx offloads off, LPM/FIB sized for the table; one lcore, the main, pinned to the last CPU; every route to port 1; --parse-ptype); mpps is what reached the sink; lost from the sink's sequence numbers; dut_tx_full (routeplex only, its port counters): frames the VR could not hand to the sink's full ring; limited_by: generator if the ring into the router had room >= 90 % of the generator's time, ring if over 1 % was lost, else dut; ratio_to_l3fwd = the median over the pairs of routeplex mpps / l3fwd mpps (pairs.ratio has min and max); a pair is flagged when its two trials' probes differ by more than 10 %",
        "load_average": tester::pairs::load_average(),
        "sizes": sizes,
    });
    if a.json {
        println!("{j}");
    }
    Ok(())
}

/// The VR on two memif server ports `@TAG-0`, `@TAG-1`, its worker on `cpu`, the table's
/// `family` routes via the eight gateways of that family.
fn start_vr(table: &Table, family: Family, tag: &str, cpu: usize, burst: usize) -> Result<Node> {
    let neighbors: String = GATEWAYS
        .map(|h| {
            format!(
                "      - {{ address: 198.19.0.{h}, mac: \"02:00:00:00:02:{h:02x}\", interface: eth1 }}\n      - {{ address: \"2001:db8:19::{h:x}\", mac: \"02:00:00:00:02:{h:02x}\", interface: eth1 }}\n"
            )
        })
        .collect();
    let text = format!(
        "\
workers: [{cpu}]
ports:
  - {{ name: m0, kind: memif, socket: \"@{tag}-0\" }}
  - {{ name: m1, kind: memif, socket: \"@{tag}-1\" }}
vrs:
  - name: dut
    interfaces:
      - {{ name: eth0, port: m0, mac: \"{VR_MAC}\", addresses: [198.18.0.1/24, \"2001:db8:18::1/64\"] }}
      - {{ name: eth1, port: m1, mac: \"02:00:00:00:01:01\", addresses: [198.19.0.1/24, \"2001:db8:19::1/64\"] }}
    neighbors:
      - {{ address: 198.18.0.2, mac: \"02:00:00:00:00:01\", interface: eth0 }}
      - {{ address: \"2001:db8:18::2\", mac: \"02:00:00:00:00:01\", interface: eth0 }}
{neighbors}"
    );
    let mut topo = Topology::parse(&text, "bench-router.yaml", Path::new("."))?;
    let (mut gw4, mut gw6) = (Vec::new(), Vec::new());
    match family {
        Family::Ipv4 => gw4 = GATEWAYS.map(|h| Ipv4Addr::new(198, 19, 0, h)).collect(),
        Family::Ipv6 => {
            gw6 =
                GATEWAYS.map(|h| Ipv6Addr::new(0x2001, 0xdb8, 0x19, 0, 0, 0, 0, h.into())).collect()
        }
    }
    table.add_routes(&mut topo.vrs[0], &gw4, &gw6);
    let mut opts = Options::for_topology(&topo);
    opts.pin = Some(sys::pin);
    opts.clock = sys::tsc_clock;
    Ok(Node::start(topo, opts, burst)?)
}

/// l3fwd with the table (every route to port 1), on `cpu`; its memif ends connected here.
fn start_l3fwd(
    bin: &Path,
    table: &Table,
    family: Family,
    lookup: &str,
    tag: &str,
    cpu: usize,
) -> Result<(App, Side)> {
    let dir = crate::bench_vhost::dpdk_cache_dir()?.join(tag);
    std::fs::create_dir_all(&dir)?;
    let _cleanup = RemoveDir(dir.clone());
    let (r4, r6) = (dir.join("routes4.txt"), dir.join("routes6.txt"));
    // l3fwd needs both rule files: the other family gets one route the frames never match.
    let (mut t4, mut t6) =
        (String::from("R198.51.100.0/24 1\n"), String::from("R2001:db8::/32 1\n"));
    match family {
        Family::Ipv4 => t4 = table.v4.iter().map(|(p, _)| format!("R{p} 1\n")).collect(),
        Family::Ipv6 => t6 = table.v6.iter().map(|(p, _)| format!("R{p} 1\n")).collect(),
    }
    std::fs::write(&r4, t4)?;
    std::fs::write(&r6, t6)?;
    let args: Vec<String> = [
        "-p",
        "0x3",
        "--config=(0,0,0),(1,0,0)",
        &format!("--lookup={lookup}"),
        "--parse-ptype",
        &format!("--rule_ipv4={}", r4.display()),
        &format!("--rule_ipv6={}", r6.display()),
        "--eth-dest=1,02:00:00:00:02:02",
    ]
    .map(String::from)
    .to_vec();
    let mut app = App::start(bin, tag, &format!("0@({cpu})"), &args)?;
    // It loads the whole table before it starts its ports, so the link comes up late.
    let within = Duration::from_secs(120);
    let tx = app.connect(0, "bench-router-l3-tx", within)?;
    let rx = app.connect(1, "bench-router-l3-rx", within)?;
    let side = Side {
        tx,
        rx,
        watch: Watch::new(
            app.pid(),
            "l3fwd",
            &[
                ("main", "l3fwd lcore 0"),
                ("eal-intr-thread", "dpdk interrupt thread (memif control)"),
            ],
        ),
    };
    app.pause(true);
    Ok((app, side))
}

/// Removes a directory on drop.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `size`-byte frames (IPv6: at least 70) from 198.18.0.2 or 2001:db8:18::2 to each
/// destination, one flow (one sequence space).
fn frames(dsts: &[IpAddr], size: usize) -> Vec<GenFrame> {
    dsts.iter()
        .map(|&d| {
            let src = match d {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x18, 0, 0, 0, 0, 2)),
            };
            let f = UdpFlow {
                src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                dst_mac: VR_MAC,
                vlan: None,
                src,
                dst: d,
                src_port: 1024,
                dst_port: 7,
                ttl: 64,
                size,
            };
            GenFrame { frame: udp_frame(&f), flow: 0, class: 0 }
        })
        .collect()
}

/// A warm-up, then one measured trial of `seconds`.
fn measure(
    side: &mut Side,
    node: Option<&Node>,
    frames: &[GenFrame],
    size: usize,
    batch: usize,
    seconds: f64,
) -> Result<Point> {
    let run = |side: &mut Side, seconds| {
        let gen = Generator::with_flows(frames.to_vec());
        pktgen::measure_with(
            &pktgen::max_rate(size, batch, seconds, VR_MAC),
            gen,
            Some(&mut side.tx),
            std::slice::from_mut(&mut side.rx),
        )
    };
    pktgen::drain(std::slice::from_mut(&mut side.rx));
    let warm = run(side, 0.5)?;
    crate::ensure!(
        warm.rx_packets > 0,
        "the router forwarded nothing in a 0.5 s warm-up ({} frames offered)",
        warm.tx_packets
    );
    pktgen::drain(std::slice::from_mut(&mut side.rx));
    let tx_full = || -> Result<Option<u64>> {
        let Some(n) = node else { return Ok(None) };
        let snap = n.runtime().snapshot()?;
        let full = snap.ports().find(|p| p.name == "m1").map(|p| p.stats.tx_full);
        Ok(full)
    };
    let full0 = tx_full()?;
    let sampler = Sampler::start(vec![side.watch.clone()], Duration::from_millis(10));
    let r = run(side, seconds)?;
    let placement = sampler.finish();
    let dut_tx_full = full0.zip(tx_full()?).map(|(a, b)| b - a);
    let s = r.seconds.max(1e-9);
    Ok(Point {
        seconds: r.seconds,
        offered_mpps: r.tx_packets as f64 / s / 1e6,
        mpps: r.rx_packets as f64 / s / 1e6,
        lost: r.lost,
        generator_busy: r.generator_busy(),
        limited_by: r.limited_by(),
        placement,
        dut_tx_full,
    })
}
