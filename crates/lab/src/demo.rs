//! `routeplex demo`: four VRs in memory, offered 64-byte traffic for a few seconds.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Context, Result};
use dataplane::config::VrConfig;
use dataplane::{Engine, VrDrop};
use ports::{Batch, MAX_BURST};
use serde_json::json;
use tester::frames::{udp_frame, UdpFlow};
use tester::{Generator, Sink};
use wire::MacAddr;

use crate::lab::{self, Rng, Table};
use crate::sys;

/// Options of `routeplex demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Seconds of traffic.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

const GEN_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
/// Share of each VR's prefixes it gets: the VRs' tables differ in size.
const TABLE_SHARE: [usize; 4] = [1, 5, 50, 500];
/// Frames per VR in the generator's rotation.
const FRAMES_PER_VR: usize = 1000;

/// What one VR was offered and what became of it.
struct VrReport {
    name: String,
    routes: (usize, usize),
    offered: u64,
    forwarded: u64,
    drops: Vec<(VrDrop, u64)>,
    icmp_errors: u64,
}

impl VrReport {
    /// Offered frames neither forwarded nor dropped yet: still in a ring or a neighbor queue
    /// when the generator stopped.
    fn in_flight(&self) -> u64 {
        let dropped: u64 = self.drops.iter().map(|(_, n)| n).sum();
        self.offered.saturating_sub(self.forwarded + dropped)
    }
}

pub fn run(a: Args) -> Result<()> {
    crate::ensure!(
        a.seconds > 0.0 && a.seconds <= 3600.0,
        "--seconds {} is outside (0, 3600]",
        a.seconds
    );
    let topo = lab::topology(include_str!("demo.yaml"), "demo.yaml")?;
    let table = Table::real_or_generated(200_000, 50_000, 1)?;
    let mut vrs = topo.vrs.clone();
    let mut rng = Rng::new(7);
    let mut frames = Vec::new();
    for (v, vr) in vrs.iter_mut().enumerate() {
        let t = Table {
            label: String::new(),
            v4: table.v4.iter().step_by(TABLE_SHARE[v]).copied().collect(),
            v6: table.v6.iter().step_by(TABLE_SHARE[v]).copied().collect(),
        };
        let (gw4, gw6) = gateways(vr);
        t.add_routes(vr, &gw4, &gw6);
        frames.push(vr_frames(vr, &t, &mut rng)?);
    }
    // Interleave the VRs so every burst on the shared port carries all of them.
    let mut mix = Vec::with_capacity(FRAMES_PER_VR * vrs.len());
    for k in 0..FRAMES_PER_VR {
        for (v, f) in frames.iter().enumerate() {
            mix.push((f[k].clone(), v as u16));
        }
    }
    let routes: Vec<(usize, usize)> = vrs.iter().map(route_counts).collect();
    if !a.json {
        // What is about to run, before the seconds of building and traffic.
        println!(
            "routeplex demo: {} VRs on 2 in-memory ports, {} s of 64-byte frames (60 B + FCS)",
            vrs.len(),
            a.seconds
        );
        println!("routes: {}", table.label);
    }
    let lab = lab::build(&topo, &vrs)?;
    let (engine, gen, cpus) =
        run_traffic(&topo, lab, Generator::unstamped(mix), Duration::from_secs_f64(a.seconds))?;
    let reports: Vec<VrReport> = engine
        .vrs()
        .iter()
        .enumerate()
        .map(|(v, vr)| {
            let c = vr.counters();
            VrReport {
                name: vr.name().to_string(),
                routes: routes[v],
                offered: gen.offered().get(v).copied().unwrap_or(0),
                forwarded: c.forwarded,
                drops: VrDrop::ALL
                    .iter()
                    .map(|&r| (r, c.dropped(r)))
                    .filter(|&(_, n)| n > 0)
                    .collect(),
                icmp_errors: c.icmp_errors,
            }
        })
        .collect();
    if a.json {
        print_json(&table.label, a.seconds, &cpus, &reports);
    } else {
        print_table(a.seconds, &cpus, &reports, &engine);
    }
    Ok(())
}

/// The gateways of a demo VR: its static neighbors on eth1.
fn gateways(vr: &VrConfig) -> (Vec<Ipv4Addr>, Vec<Ipv6Addr>) {
    let mut g4 = Vec::new();
    let mut g6 = Vec::new();
    for n in vr.neighbors.iter().filter(|n| n.iface == 1) {
        match n.ip {
            IpAddr::V4(a) => g4.push(a),
            IpAddr::V6(a) => g6.push(a),
        }
    }
    (g4, g6)
}

fn route_counts(vr: &VrConfig) -> (usize, usize) {
    let v4 = vr.routes.iter().filter(|r| matches!(r.prefix, ipnet::IpNet::V4(_))).count();
    (v4, vr.routes.len() - v4)
}

/// A VR's share of the rotation: mostly 64-byte UDP to covered IPv4 and IPv6 destinations,
/// and 4 % broken on purpose so the drop counters have something to show.
fn vr_frames(vr: &VrConfig, t: &Table, rng: &mut Rng) -> Result<Vec<Vec<u8>>> {
    let eth0 = &vr.interfaces[0];
    let src4 = IpAddr::V4(Ipv4Addr::from(u32::from(eth0.ipv4[0].addr()) + 1));
    let src6 = IpAddr::V6(Ipv6Addr::from(u128::from(eth0.ipv6[0].addr()) + 1));
    let n6 = FRAMES_PER_VR / 20;
    let n_bad = FRAMES_PER_VR / 100;
    let n4 = FRAMES_PER_VR - n6 - 4 * n_bad;
    let d4 = t
        .destinations_v4(n4 + 3 * n_bad, rng)
        .with_context(|| format!("{}: IPv4 destinations", vr.name))?;
    let d6 =
        t.destinations_v6(n6, rng).with_context(|| format!("{}: IPv6 destinations", vr.name))?;
    let flow = |src: IpAddr, dst: IpAddr, ttl| UdpFlow {
        src_mac: GEN_MAC,
        dst_mac: eth0.mac,
        vlan: eth0.vlan,
        src,
        dst,
        src_port: 1024 + (rng_port(dst)),
        dst_port: 7,
        ttl,
        size: 60,
    };
    let mut out: Vec<Vec<u8>> =
        d4[..n4].iter().map(|&d| udp_frame(&flow(src4, d.into(), 64))).collect();
    out.extend(d6.iter().map(|&d| udp_frame(&flow(src6, d.into(), 64))));
    let bad = &d4[n4..];
    for k in 0..n_bad {
        out.push(udp_frame(&flow(src4, bad[k].into(), 1)));
        let mut f = udp_frame(&flow(src4, bad[n_bad + k].into(), 64));
        let l3 = if eth0.vlan.is_some() { 18 } else { 14 };
        f[l3 + 10] ^= 0x5a;
        out.push(f);
        out.push(udp_frame(&flow(IpAddr::V4(Ipv4Addr::LOCALHOST), bad[2 * n_bad + k].into(), 64)));
        out.push(udp_frame(&flow(src4, IpAddr::V4(Ipv4Addr::new(240, 0, 0, 1 + k as u8)), 64)));
    }
    // Spread the broken ones through the rotation.
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i as u64 + 1) as usize);
    }
    Ok(out)
}

fn rng_port(dst: IpAddr) -> u16 {
    match dst {
        IpAddr::V4(a) => (u32::from(a) % 50_000) as u16,
        IpAddr::V6(a) => (u128::from(a) % 50_000) as u16,
    }
}

/// Runs the worker on its own CPU and the generator and sink on another for `d`.
fn run_traffic(
    topo: &control::Topology,
    mut lab: lab::Lab,
    mut gen: Generator,
    d: Duration,
) -> Result<(Engine, Generator, String)> {
    let mut in_peer = lab.take_outside(topo, "in")?;
    let mut out_peer = lab.take_outside(topo, "out")?;
    let mut engine = lab.engine;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            if cpus > 1 {
                sys::pin(1);
            }
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                engine.poll(t0.elapsed().as_nanos() as u64);
            }
            engine
        })
    };
    let placement = if cpus > 1 && sys::pin(0) {
        "worker on CPU 1; generator and sink on CPU 0".to_string()
    } else {
        format!("{cpus} CPU(s): worker, generator and sink share them (no pinning)")
    };
    let (mut tx, mut rx) = (Batch::new(MAX_BURST), Batch::new(MAX_BURST));
    let (mut sink, mut back) = (Sink::default(), Sink::default());
    let t0 = Instant::now();
    while t0.elapsed() < d {
        gen.send(&mut in_peer, &mut tx, MAX_BURST);
        sink.recv(&mut out_peer, &mut rx);
        back.recv(&mut in_peer, &mut rx);
    }
    stop.store(true, Ordering::Relaxed);
    let engine = worker.join().map_err(|_| crate::format_err!("the worker thread panicked"))?;
    Ok((engine, gen, placement))
}

fn print_table(seconds: f64, cpus: &str, r: &[VrReport], engine: &Engine) {
    println!("placement: {cpus}");
    println!(
        "injected: 4 % of each VR's frames are broken on purpose (TTL 1, a bad IPv4 checksum, a \
         loopback source, a class E destination), so the drops for those reasons are expected, \
         not faults; tx_full counts frames a full port ring refused (load, not injected)"
    );
    println!(
        "in flight: frames still in the ports' rings or neighbor queues when traffic stopped\n"
    );
    println!(
        "{:<6} {:>11} {:>11} {:>12} {:>12} {:>12} {:>9} {:>7}  dropped by reason",
        "VR", "IPv4 routes", "IPv6 routes", "offered", "forwarded", "dropped", "in flight", "Mpps"
    );
    let (mut off, mut fwd, mut dropped, mut flight) = (0, 0, 0, 0);
    for v in r {
        let drops: Vec<String> =
            v.drops.iter().map(|(d, n)| format!("{d} {}", group(*n))).collect();
        let d: u64 = v.drops.iter().map(|(_, n)| n).sum();
        let f = v.in_flight();
        println!(
            "{:<6} {:>11} {:>11} {:>12} {:>12} {:>12} {:>9} {:>7.2}  {}",
            v.name,
            group(v.routes.0 as u64),
            group(v.routes.1 as u64),
            group(v.offered),
            group(v.forwarded),
            group(d),
            group(f),
            v.forwarded as f64 / seconds / 1e6,
            if drops.is_empty() { "-".into() } else { drops.join(", ") }
        );
        off += v.offered;
        fwd += v.forwarded;
        dropped += d;
        flight += f;
    }
    println!(
        "{:<6} {:>11} {:>11} {:>12} {:>12} {:>12} {:>9} {:>7.2}",
        "total",
        "",
        "",
        group(off),
        group(fwd),
        group(dropped),
        group(flight),
        fwd as f64 / seconds / 1e6
    );
    let errors: u64 = r.iter().map(|v| v.icmp_errors).sum();
    println!(
        "\nICMP errors sent back to the generator: {} (rate limit 1000/s per VR)",
        group(errors)
    );
    for p in 0..engine.port_count() {
        let c = engine.port_counters(p);
        let drops: u64 = c.drops.iter().sum();
        println!(
            "port {:<4} rx {:>12}  tx {:>12}  dropped before demux {}",
            engine.port_name(p),
            group(c.rx_packets),
            group(c.tx_packets),
            group(drops)
        );
    }
}

fn print_json(label: &str, seconds: f64, cpus: &str, r: &[VrReport]) {
    let vrs: Vec<_> = r
        .iter()
        .map(|v| {
            let drops: serde_json::Map<_, _> = v.drops.iter().map(|(d, n)| (d.name().to_string(), json!(n))).collect();
            json!({
                "name": v.name, "routes_v4": v.routes.0, "routes_v6": v.routes.1,
                "offered": v.offered, "forwarded": v.forwarded,
                "mpps": v.forwarded as f64 / seconds / 1e6, "dropped": drops, "in_flight": v.in_flight(),
                "icmp_errors": v.icmp_errors,
            })
        })
        .collect();
    let fwd: u64 = r.iter().map(|v| v.forwarded).sum();
    let out = json!({
        "seconds": seconds, "frame_bytes": 60, "table": label, "placement": cpus,
        "vrs": vrs, "total_mpps": fwd as f64 / seconds / 1e6,
        "injected": "4 % of each VR's frames are broken on purpose: TTL 1, bad IPv4 checksum, loopback source, class E destination",
    });
    println!("{out}");
}

/// 1234567 → "1,234,567".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
