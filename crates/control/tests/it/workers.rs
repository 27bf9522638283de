//! The runtime with real threads: a VR moved back and forth between two workers while a
//! generator sends it sequence-numbered frames loses none and reorders none; reservations
//! change at run time; placement follows the topology and balances the rest.
//!
//! No timing is asserted: the machine is shared and small, so the generator is closed-loop
//! (at most `WINDOW` frames in flight, fewer than the egress ring holds) and every wait has a
//! generous deadline.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common;

use common::{frame, generate, seq_of, sink, DEADLINE, MOVES};
use control::build;
use control::runtime::{Options, Runtime};
use control::Topology;
use dataplane::{Budget, Reservation, VrDrop};
use ports::mem::MemPort;
use ports::{Batch, Port};

const TOPO: &str = "\
workers: 2
ports:
  - { name: in, kind: mem, ring: 4096 }
  - { name: out, kind: mem, ring: 4096 }
  - { name: in2, kind: mem }
  - { name: out2, kind: mem }
  - { name: in3, kind: mem }
vrs:
  - name: mover
    interfaces:
      - { name: a, port: in, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }]
  - name: stay
    worker: 1
    interfaces:
      - { name: a, port: in2, mac: 02:00:00:00:02:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out2, mac: 02:00:00:00:02:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: b }]
  - name: third
    interfaces:
      - { name: a, port: in3, mac: 02:00:00:00:03:00, addresses: [10.0.0.1/24] }
";

fn topo() -> Topology {
    Topology::parse(TOPO, "workers.yaml", Path::new(".")).unwrap()
}

/// A VR's entry in a status JSON.
fn vr_json<'a>(json: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    json["vrs"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap()
}

fn options(workers: usize) -> Options {
    Options::new(workers)
}

#[test]
fn a_vr_moves_between_workers_under_traffic_without_loss() {
    let topo = topo();
    let mut host = build::host(&topo, None, 256).unwrap();
    let tx = host.take_outside(&topo, "in").unwrap();
    let rx = host.take_outside(&topo, "out").unwrap();
    let mut rt = Runtime::start(host.cells, options(2)).unwrap();
    let start = rt.worker_of("mover").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let expect = Arc::new(AtomicU64::new(u64::MAX));
    let gen = {
        let (stop, received) = (stop.clone(), received.clone());
        let template = frame([2, 0, 0, 0, 1, 0], 0);
        thread::spawn(move || generate(tx, template, stop, received))
    };
    let sink = {
        let (expect, received) = (expect.clone(), received.clone());
        thread::spawn(move || sink(rx, expect, received))
    };

    // Traffic first, then the moves while it flows; the sink's count at each move shows it
    // flowing throughout.
    let t0 = Instant::now();
    while received.load(Ordering::Acquire) < 1_000 && t0.elapsed() < DEADLINE {
        thread::sleep(Duration::from_millis(1));
    }
    let mut seen_at_move = Vec::with_capacity(MOVES);
    for i in 0..MOVES {
        let to = (start + 1 + i) % 2;
        let m = rt.move_vr("mover", to).unwrap();
        assert_eq!((m.to, m.vrs.as_slice()), (to, &["mover".to_string()][..]));
        assert_eq!(rt.worker_of("mover"), Some(to));
        let seen = received.load(Ordering::Acquire);
        seen_at_move.push(seen);
        // Frames flow between every two moves: wait for the sink to move on (a wait, not a
        // timing: a descheduled generator or sink only makes it longer).
        while received.load(Ordering::Acquire) == seen && t0.elapsed() < DEADLINE {
            thread::sleep(Duration::from_micros(100));
        }
    }
    assert!(t0.elapsed() < DEADLINE, "traffic stalled during the moves");
    stop.store(true, Ordering::Relaxed);
    let sent = gen.join().unwrap();
    expect.store(sent, Ordering::Release);
    let (got, error) = sink.join().unwrap();

    let snap = rt.snapshot().unwrap();
    let (w, mover) = snap.vr("mover").unwrap();
    assert_eq!(w, (start + MOVES) % 2, "ended where the last move put it");
    let c = mover.counters;
    let cells = rt.stop().unwrap();
    let dump: String = cells.iter().map(|c| c.dump()).collect();
    assert_eq!(error, None, "sequence broken\n{dump}");
    assert_eq!(got, sent, "sent {sent}, received {got}\n{dump}");
    assert!(sent > 1_000, "traffic flowed ({sent} frames)");
    assert!(
        seen_at_move.windows(2).all(|w| w[1] > w[0]),
        "frames flowed between every two moves: {seen_at_move:?}"
    );
    assert_eq!((c.rx_packets, c.forwarded, c.dropped_total()), (sent, sent, 0), "{dump}");
    eprintln!(
        "{sent} frames through {MOVES} moves, none lost or reordered; sink count at the moves: {:?} .. {:?}",
        seen_at_move.first(),
        seen_at_move.last()
    );
}

#[test]
fn placement_follows_the_topology_and_balances_the_rest() {
    let topo = topo();
    let host = build::host(&topo, None, 256).unwrap();
    assert_eq!(host.cells.len(), 3);
    assert_eq!(host.cells[1].worker, Some(1), "stay is placed on worker 1");
    let mut rt = Runtime::start(host.cells, options(2)).unwrap();
    // stay (fixed) on 1; mover and third, one VR each, go to the least loaded worker in turn.
    assert_eq!(
        rt.placement(),
        vec![("mover".to_string(), 0), ("stay".to_string(), 1), ("third".to_string(), 0)]
    );
    assert_eq!(rt.move_vr("stay", 1).unwrap().from, 1, "a move to where it is is a no-op");
    assert_eq!(rt.move_vr("nobody", 0).unwrap_err().0, "no VR named \"nobody\"");
    assert_eq!(rt.move_vr("stay", 2).unwrap_err().0, "no worker 2: there are 2 (0..=1)");
    let json = rt.snapshot().unwrap().to_json();
    assert_eq!(json["workers"][1]["vrs"], serde_json::json!(["stay"]));
    let stay = vr_json(&json, "stay");
    assert_eq!((&stay["worker"], &stay["over_budget"]), (&1.into(), &0.into()));
    assert_eq!(json["ports"][0]["name"], "in");
    rt.stop().unwrap();

    // A placement beyond the workers the runtime has is refused.
    let host = build::host(&topo, None, 256).unwrap();
    let e = Runtime::start(host.cells, options(1)).err().unwrap();
    assert_eq!(e.0, "vr stay is placed on worker 1, but there are 1 workers (0..=0)");
}

#[test]
fn reservations_change_at_run_time() {
    const T: u64 = 10_000_000_000; // 10 s: the whole test runs in one period
    let topo = topo();
    let mut host = build::host(&topo, None, 256).unwrap();
    let mut tx = host.take_outside(&topo, "in").unwrap();
    let mut rx = host.take_outside(&topo, "out").unwrap();
    let mut rt = Runtime::start(host.cells, options(2)).unwrap();
    let ten = Reservation { budget: Budget::Packets(10), period_ns: T, weight: 0 };
    rt.set_reservation("mover", Some(ten)).unwrap();
    let mut b = Batch::new(100);
    for s in 0..100 {
        b.push_copy(&frame([2, 0, 0, 0, 1, 0], s));
    }
    let sel: Vec<u16> = (0..100).collect();
    assert_eq!(tx.tx_burst(&mut b, &sel), 100);
    let t0 = Instant::now();
    let counters = loop {
        let snap = rt.snapshot().unwrap();
        let c = snap.vr("mover").unwrap().1.counters;
        if c.rx_packets == 100 || t0.elapsed() > DEADLINE {
            break c;
        }
        thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(counters.forwarded, 10);
    assert_eq!(counters.dropped(VrDrop::OverBudget), 90);
    let mut out = Batch::new(256);
    assert_eq!(rx.rx_burst(&mut out), 10);
    let seqs: Vec<u64> = out.packets().iter().filter_map(|p| seq_of(p.frame())).collect();
    assert_eq!(seqs, (0..10).collect::<Vec<_>>(), "the first ten, in order");

    // A change waits for the next period, moves with the VR, and shows in the status.
    let twenty = Reservation { budget: Budget::Packets(20), ..ten };
    rt.set_reservation("mover", Some(twenty)).unwrap();
    let to = 1 - rt.worker_of("mover").unwrap();
    rt.move_vr("mover", to).unwrap();
    let snap = rt.snapshot().unwrap();
    let (w, v) = snap.vr("mover").unwrap();
    assert_eq!((w, v.reservation, v.pending), (to, Some(ten), Some(Some(twenty))));
    let json = snap.to_json();
    let mover = vr_json(&json, "mover");
    assert_eq!(mover["over_budget"], 90);
    assert_eq!(mover["reservation"]["packets"], 10);
    assert_eq!(mover["pending_reservation"]["packets"], 20);
    assert!(rt.set_reservation("nobody", None).is_err());
    let zero = Reservation { budget: Budget::Packets(0), ..ten };
    assert_eq!(
        rt.set_reservation("mover", Some(zero)).unwrap_err().0,
        "vr mover: a reservation's budget must be more than 0"
    );
    rt.stop().unwrap();
}

/// The single-engine path (`build::engine`, what the tester's in-process DUT runs) applies the
/// topology's reservations, batch limits and bursts just as the runtime does.
#[test]
fn a_single_engine_honours_reservations_batches_and_bursts() {
    const ONE: &str = "\
ports:
  - { name: in, kind: mem }
  - { name: out, kind: mem }
  - { name: in2, kind: mem, burst: 8 }
  - { name: out2, kind: mem }
  - { name: in3, kind: mem }
vrs:
  - name: capped
    reservation: { packets: 10, period_us: 10000000 }
    interfaces:
      - { name: a, port: in, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }]
  - name: batched
    batch: 4
    interfaces:
      - { name: a, port: in2, mac: 02:00:00:00:02:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out2, mac: 02:00:00:00:02:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: b }]
  - name: timed
    reservation: { time_us: 300, weight: 1 }
    interfaces:
      - { name: a, port: in3, mac: 02:00:00:00:03:00, addresses: [10.0.0.1/24] }
";
    let topo = Topology::parse(ONE, "one.yaml", Path::new(".")).unwrap();
    let mut built = build::engine(&topo, None).unwrap();
    let mut tx = built.take_outside(&topo, "in").unwrap();
    let mut tx2 = built.take_outside(&topo, "in2").unwrap();
    let e = &mut built.engine;
    let timed = e.cell().vr_index("timed").unwrap();
    let time = Reservation { budget: Budget::Time(300_000), period_ns: 1_000_000, weight: 1 };
    assert_eq!(e.cell().reservation(timed), Some(time), "a time budget gets a clock");
    assert_eq!((e.cell().port_burst(2), e.cell().port_burst(0)), (8, 256));

    let send = |port: &mut MemPort, mac: [u8; 6], seqs: std::ops::Range<u64>| {
        let mut b = Batch::new(256);
        for s in seqs {
            b.push_copy(&frame(mac, s));
        }
        let sel: Vec<u16> = (0..b.len() as u16).collect();
        assert_eq!(port.tx_burst(&mut b, &sel), sel.len());
    };
    let drain = |e: &mut dataplane::Engine, now: u64| while e.poll(now) > 0 {};

    // Packet budgets are exact: 10 of 50 in the first period, 10 more once the next starts.
    send(&mut tx, [2, 0, 0, 0, 1, 0], 0..50);
    drain(e, 0);
    let c = *e.vr("capped").unwrap().counters();
    assert_eq!((c.forwarded, c.dropped(VrDrop::OverBudget)), (10, 40));
    send(&mut tx, [2, 0, 0, 0, 1, 0], 50..70);
    drain(e, 10_000_000_000);
    let c = *e.vr("capped").unwrap().counters();
    assert_eq!((c.forwarded, c.dropped(VrDrop::OverBudget)), (20, 50));

    // 20 frames on a burst-8 port: polls of 8, 8, 4, each cut to the VR's batch of 4.
    send(&mut tx2, [2, 0, 0, 0, 2, 0], 0..20);
    drain(e, 0);
    let c = *e.vr("batched").unwrap().counters();
    assert_eq!((c.forwarded, c.dropped(VrDrop::BatchLimit), c.dropped_total()), (12, 8, 8));
}
