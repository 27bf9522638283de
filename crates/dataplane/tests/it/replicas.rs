//! Parallel virtual routers: one VR as N replicas, each in its own cell on its own thread and
//! queue of each port, the peer spreading flows by the flow hash ([`RssPort`]).
//!
//! What must hold: no flow is reordered (sequence numbers per flow at the sink, many flows,
//! bursts of 1, 2 and 257), every packet is counted once by exactly one replica (the replicas'
//! counters add up to what the peer sent and received), a route change reaches every replica,
//! and a neighbor one replica resolves is used by all.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use dataplane::config::{RouteConfig, RouteTarget, VrConfig, VrLimits};
use dataplane::replica::{replica_name, replicas, RssPort};
use dataplane::{Cell, RouteOp, RouteSource, RouteTable, VrChange, Worker};
use ports::mem;
use ports::{Batch, Port};

const IN: [u8; 6] = [0x02, 0, 0, 0, 0x07, 0x00];
const OUT: [u8; 6] = [0x02, 0, 0, 0, 0x07, 0x01];
const SRC: [u8; 6] = [0x02, 0, 0, 0, 0x09, 0x01];
const GW1: [u8; 6] = [0x02, 0, 0, 0, 0x09, 0x02];
const GW2: [u8; 6] = [0x02, 0, 0, 0, 0x09, 0x03];

/// One VR, `in` 10.0.0.1/24 on port 0 and `out` 10.0.1.1/24 on port 1; 8/8 via a static
/// neighbor 10.0.1.2.
fn cfg() -> VrConfig {
    VrConfig {
        name: "pvr".into(),
        interfaces: vec![
            iface("in", 0, None, IN, 1500, &["10.0.0.1/24"], &[]),
            iface("out", 1, None, OUT, 1500, &["10.0.1.1/24"], &[]),
        ],
        routes: vec![via("8.0.0.0/8", "10.0.1.2")],
        neighbors: vec![neigh(1, "10.0.1.2", GW1)],
        // Room to hold every flow's first packet while its gateway is resolved.
        limits: VrLimits { queue_per_neighbor: 64, queue_total: 256, ..Default::default() },
    }
}

/// The replicas' cells (replica `r` owns queue `r` of both ports), the peer's two RSS ports,
/// and the route table the replicas read.
fn build(n: usize) -> (Vec<Cell>, RssPort, RssPort, RouteTable) {
    let cfg = cfg();
    let table = RouteTable::new(&cfg).unwrap();
    let vrs = replicas(&cfg, &table.view(), n).unwrap();
    let (mut cells, mut q0, mut q1) = (Vec::new(), Vec::new(), Vec::new());
    for (r, vr) in vrs.into_iter().enumerate() {
        let (a0, b0) = mem::pair(&format!("p0q{r}"), &format!("peer0q{r}"), 1024);
        let (a1, b1) = mem::pair(&format!("p1q{r}"), &format!("peer1q{r}"), 1024);
        let ports: Vec<Box<dyn Port>> = vec![Box::new(a0), Box::new(a1)];
        cells.push(Cell::new(ports, vec![vr], vec![]).unwrap());
        q0.push(Box::new(b0) as Box<dyn Port>);
        q1.push(Box::new(b1) as Box<dyn Port>);
    }
    (cells, RssPort::new("p0", q0), RssPort::new("p1", q1), table)
}

/// A UDP frame of flow `flow` (its own source address and port) carrying `seq`, to `dst`.
fn frame(flow: u16, seq: u32, dst: &str) -> Vec<u8> {
    let src = format!("10.0.0.{}", 10 + flow % 200);
    let mut data = flow.to_be_bytes().to_vec();
    data.extend_from_slice(&seq.to_be_bytes());
    let udp = udp4(&src, dst, 1000 + flow, 53, &data);
    eth(IN, SRC, None, 0x0800, &Ip4::new(&src, dst, 64, 17, udp).bytes())
}

/// Flow and sequence number of a forwarded frame.
fn seq_of(f: &[u8]) -> (u16, u32) {
    let d = &f[14 + 20 + 8..];
    (u16::from_be_bytes([d[0], d[1]]), u32::from_be_bytes([d[2], d[3], d[4], d[5]]))
}

/// Packets the generator lets be in flight (the rings hold 1024).
const WINDOW: u64 = 600;

/// Runs each cell on its own thread until `stop`, and returns them.
fn run_threads(cells: Vec<Cell>, stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<Cell>> {
    cells
        .into_iter()
        .map(|mut c| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut w = Worker::new();
                let t0 = std::time::Instant::now();
                while !stop.load(Ordering::Acquire) {
                    if w.poll(std::slice::from_mut(&mut c), t0.elapsed().as_nanos() as u64) == 0 {
                        std::thread::yield_now();
                    }
                }
                // A last pass for what is still in the rings.
                for _ in 0..4 {
                    w.poll(std::slice::from_mut(&mut c), t0.elapsed().as_nanos() as u64);
                }
                c
            })
        })
        .collect()
}

/// Sends `per_flow` packets of each of `flows` flows, interleaved, in bursts of `burst`,
/// through the peer's RSS port, while the replicas run on their threads; checks at the sink
/// that every flow arrives whole and in order, and that the replicas' counters add up.
fn no_reordering(replica_count: usize, burst: usize, flows: u16, per_flow: u32) {
    let (cells, mut p0, mut p1, _table) = build(replica_count);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = run_threads(cells, stop.clone());
    let total = u64::from(flows) * u64::from(per_flow);
    let mut next_seq = vec![0u32; usize::from(flows)];
    let mut reordered = 0u64;
    let mut got = 0u64;
    let mut tx = Batch::new(burst);
    let mut rx = Batch::new(ports::MAX_BURST);
    let mut sel: Vec<u16> = Vec::new();
    let (mut flow, mut seq) = (0u16, 0u32);
    let mut sent = 0u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut sink = |p1: &mut RssPort, got: &mut u64, reordered: &mut u64| {
        rx.clear();
        let n = p1.rx_burst(&mut rx);
        for i in 0..n {
            let (f, s) = seq_of(rx.get(i).frame());
            if s != next_seq[usize::from(f)] {
                *reordered += 1;
            }
            next_seq[usize::from(f)] = s + 1;
        }
        *got += n as u64;
    };
    while got < total {
        assert!(std::time::Instant::now() < deadline, "stuck: sent {sent}, got {got} of {total}");
        // Refill the burst with the next frames in round-robin order over the flows.
        while tx.len() < burst && sent + (tx.len() as u64) < total {
            tx.push_copy(&frame(flow, seq, &format!("8.{}.0.1", flow % 251)));
            flow += 1;
            if flow == flows {
                flow = 0;
                seq += 1;
            }
        }
        // At most WINDOW packets in flight, fewer than a queue's ring holds: a replica's
        // transmit ring can then never overflow however the threads are scheduled, so any
        // loss or reordering seen is the spreading's.
        if !tx.is_empty() && sent - got < WINDOW {
            sel.clear();
            sel.extend(0..tx.len() as u16);
            let k = p0.tx_burst(&mut tx, &sel);
            sent += k as u64;
            // Keep the rest, in order, for the next try.
            let left: Vec<Vec<u8>> = (k..tx.len()).map(|i| tx.get(i).frame().to_vec()).collect();
            tx.clear();
            for f in &left {
                tx.push_copy(f);
            }
        }
        sink(&mut p1, &mut got, &mut reordered);
    }
    stop.store(true, Ordering::Release);
    let cells: Vec<Cell> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    sink(&mut p1, &mut got, &mut reordered);
    assert_eq!(reordered, 0, "{reordered} packets out of order (burst {burst})");
    assert_eq!(got, total);
    assert!(next_seq.iter().all(|&s| s == per_flow), "a flow lost packets: {next_seq:?}");
    // Every replica took part, and each packet was counted by exactly one of them.
    let (mut rx_sum, mut fwd_sum) = (0, 0);
    for (r, c) in cells.iter().enumerate() {
        let vr = &c.vrs()[0];
        assert_eq!(vr.name(), replica_name("pvr", r));
        let k = vr.counters();
        assert!(k.forwarded > 0, "replica {r} forwarded nothing:\n{}", c.dump());
        assert_eq!(k.rx_packets, k.forwarded, "replica {r}:\n{}", c.dump());
        assert_eq!(k.rx_packets, c.port_counters(0).rx_packets);
        rx_sum += k.rx_packets;
        fwd_sum += k.forwarded;
    }
    assert_eq!(rx_sum, total);
    assert_eq!(fwd_sum, total);
}

#[test]
fn no_flow_is_reordered_across_replicas_in_bursts_of_1() {
    no_reordering(2, 1, 97, 60);
}

#[test]
fn no_flow_is_reordered_across_replicas_in_bursts_of_2() {
    no_reordering(3, 2, 97, 60);
}

#[test]
fn no_flow_is_reordered_across_replicas_in_bursts_of_257() {
    no_reordering(4, 257, 257, 80);
}

/// Polls every cell once at `now` (single-threaded: the route and neighbor tests step time).
fn poll_all(ws: &mut [Worker], cells: &mut [Cell], now: u64) {
    for (w, c) in ws.iter_mut().zip(cells.iter_mut()) {
        w.poll(std::slice::from_mut(c), now);
    }
}

/// Sends `frames` through the RSS port, all of them.
fn send_all(p: &mut RssPort, frames: &[Vec<u8>]) {
    let mut b = Batch::new(frames.len());
    for f in frames {
        b.push_copy(f);
    }
    let sel: Vec<u16> = (0..frames.len() as u16).collect();
    assert_eq!(p.tx_burst(&mut b, &sel), frames.len());
}

fn drain(p: &mut RssPort) -> Vec<Vec<u8>> {
    let mut b = Batch::new(ports::MAX_BURST);
    let mut out = Vec::new();
    while p.rx_burst(&mut b) > 0 {
        out.extend(b.packets().iter().map(|x| x.frame().to_vec()));
        b.clear();
    }
    out
}

#[test]
fn a_route_change_reaches_every_replica_and_a_neighbor_one_resolves_serves_all() {
    let n = 3;
    let (mut cells, mut p0, mut p1, mut table) = build(n);
    let mut ws: Vec<Worker> = (0..n).map(|_| Worker::new()).collect();
    let flows: Vec<Vec<u8>> = (0..60u16).map(|f| frame(f, 0, &format!("172.16.{f}.9"))).collect();
    // Each replica gets some of the flows.
    let per_replica = |p0: &RssPort| {
        let mut c = vec![0; n];
        flows.iter().for_each(|f| c[p0.queue_of(f)] += 1);
        c
    };
    assert!(per_replica(&p0).iter().all(|&c| c > 0), "{:?}", per_replica(&p0));
    // Before the route: no route, on every replica.
    send_all(&mut p0, &flows);
    poll_all(&mut ws, &mut cells, MS);
    for c in &cells {
        assert!(
            c.vrs()[0].counters().drops[dataplane::VrDrop::NoRoute as usize] > 0,
            "{}",
            c.dump()
        );
    }
    assert!(drain(&mut p1).is_empty());
    // One route change on the one table; its new adjacency installed on every replica.
    let route = RouteConfig {
        prefix: "172.16.0.0/16".parse().unwrap(),
        target: RouteTarget::Via { gateway: ip("10.0.1.3"), iface: None },
        source: RouteSource::Api,
    };
    let cells_ref = &mut cells;
    table
        .apply(&[RouteOp::Add(route)], |new| {
            for c in cells_ref.iter_mut() {
                c.change_vr(0, VrChange::Adjacencies(new.to_vec()))
                    .map_err(|e| dataplane::InstallError(e.0))?;
            }
            Ok(())
        })
        .unwrap();
    // Now every replica forwards its flows, after resolving 10.0.1.3: each asks; the peer
    // answers each request, and its RSS puts every (non-IP) answer on queue 0, so only
    // replica 0 hears from the wire and the others learn it through the group.
    send_all(&mut p0, &flows);
    poll_all(&mut ws, &mut cells, 2 * MS);
    let asked = drain(&mut p1);
    assert!(!asked.is_empty(), "nobody asked for 10.0.1.3");
    for f in &asked {
        assert_eq!(u16::from_be_bytes([f[12], f[13]]), ET_ARP, "only ARP before resolution");
    }
    let reply = pad60(eth(OUT, GW2, None, ET_ARP, &arp(2, GW2, "10.0.1.3", OUT, "10.0.1.1")));
    send_all(&mut p1, &[reply]);
    assert_eq!(p1.queue_stats()[0].tx_packets, 1, "the answer went to queue 0");
    // Replica 0 learns on its next poll; the others at their next housekeeping.
    poll_all(&mut ws, &mut cells, 3 * MS);
    poll_all(&mut ws, &mut cells, 5 * MS);
    let out = drain(&mut p1);
    assert_eq!(out.len(), flows.len(), "every queued packet left once resolved");
    for f in &out {
        assert_eq!(&f[..6], &GW2, "to the resolved gateway");
    }
    for (r, c) in cells.iter().enumerate() {
        let vr = &c.vrs()[0];
        let k = vr.counters();
        assert_eq!(k.forwarded as usize, per_replica(&p0)[r], "replica {r}:\n{}", c.dump());
        assert!(vr.neighbors().iter().any(|x| x.ip == ip("10.0.1.3") && x.mac == Some(mac(GW2))));
        // Learned from the wire once, by replica 0; relayed notes are not counted again.
        assert_eq!(k.neighbors_learned, u64::from(r == 0), "replica {r}");
        assert_eq!(vr.replica_index(), Some(r));
        assert_eq!(vr.replica_notes_lost(), 0);
    }
}
