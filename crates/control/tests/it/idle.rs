//! Idle workers sleep: with `idle: adaptive` (and `interrupt`) a worker whose memif ports are
//! quiet blocks in poll(2) on their eventfds and control sockets (its `sleeps` count grows);
//! frames sent after it fell asleep are all forwarded, in order; status and move are answered
//! while the workers sleep, and a moved VR's new worker sleeps too. A worker with a `mem` port
//! (no descriptor) only naps, and forwards all the same.
//!
//! No timing is asserted: every wait has a generous deadline and is a wait for something to
//! happen, never a measurement.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::common;

use common::{frame, seq_of, DEADLINE};
use control::runtime::{Idle, Options, Runtime, Snapshot};
use control::{build, Node, Topology};
use ports::memif::{MemifOptions, MemifPort};
use ports::{Batch, Port, PortStatus};

const VR_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0];

fn topology(tag: &str, idle: Idle) -> Topology {
    let text = format!(
        "\
workers: 2
idle: {}
ports:
  - {{ name: m0, kind: memif, socket: \"@{tag}-0\" }}
  - {{ name: m1, kind: memif, socket: \"@{tag}-1\" }}
vrs:
  - name: vr
    worker: 0
    interfaces:
      - {{ name: a, port: m0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }}
      - {{ name: b, port: m1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }}
    routes: [{{ prefix: 0.0.0.0/0, via: 10.0.1.2 }}]
    neighbors: [{{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }}]
",
        idle.name()
    );
    Topology::parse(&text, "idle.yaml", Path::new(".")).unwrap()
}

/// Waits until `done(snapshot)`, asking for a snapshot every few milliseconds (each one a
/// command the sleeping workers must answer).
fn wait_for(rt: &Runtime, what: &str, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let t0 = Instant::now();
    loop {
        let s = rt.snapshot().expect("status is answered while workers sleep");
        if done(&s) {
            return s;
        }
        assert!(t0.elapsed() < DEADLINE, "waited in vain for {what}: {:?}", s.workers);
        thread::sleep(Duration::from_millis(5));
    }
}

/// Sends frames `from..to` into `tx` (at most `window` in flight) and receives them from
/// `rx`, checking each arrives once and in order.
fn traffic(tx: &mut dyn Port, rx: &mut dyn Port, from: u64, to: u64, window: u64) {
    let (mut out, mut inb) = (Batch::new(32), Batch::new(256));
    let sel: Vec<u16> = (0..32).collect();
    let (mut next, mut expect) = (from, from);
    let t0 = Instant::now();
    while expect < to {
        assert!(t0.elapsed() < DEADLINE, "stalled: sent up to {next}, received up to {expect}");
        let room = (window - (next - expect)).min(32).min(to - next);
        if room > 0 {
            out.clear();
            for s in next..next + room {
                out.push_copy(&frame(VR_MAC, s));
            }
            // The client's ring may refuse some; they are sent again next time round.
            next += tx.tx_burst(&mut out, &sel[..room as usize]) as u64;
        }
        tx.service();
        rx.service();
        inb.clear();
        if rx.rx_burst(&mut inb) == 0 {
            thread::yield_now();
        }
        for p in inb.packets() {
            assert_eq!(seq_of(p.frame()), Some(expect), "lost or reordered");
            expect += 1;
        }
    }
}

fn client(socket: String, name: &str) -> MemifPort {
    let mut o = MemifOptions::new(socket);
    o.name = name.into();
    MemifPort::client(o).unwrap()
}

/// The clients of the topology's two memif ports, once both are up. The handshakes wake a
/// sleeping worker through its listening sockets.
fn clients(tag: &str) -> (MemifPort, MemifPort) {
    let (mut c0, mut c1) = (client(format!("@{tag}-0"), "c0"), client(format!("@{tag}-1"), "c1"));
    let t0 = Instant::now();
    while c0.status() != PortStatus::Up || c1.status() != PortStatus::Up {
        assert!(t0.elapsed() < DEADLINE, "handshake: {:?} {:?}", c0.status(), c1.status());
        c0.service();
        c1.service();
        thread::sleep(Duration::from_millis(1));
    }
    (c0, c1)
}

#[test]
fn quiet_workers_sleep_yet_forward_and_answer() {
    for idle in [Idle::Adaptive, Idle::Interrupt] {
        let tag = format!("rpx-idle-{}-{}", std::process::id(), idle.name());
        let topo = topology(&tag, idle);
        assert_eq!(topo.idle, idle);
        let mut node = Node::start(topo.clone(), Options::for_topology(&topo), 256).unwrap();
        let (mut c0, mut c1) = clients(&tag);

        // Quiet: both workers sleep (worker 1 has no cell), and answer status meanwhile.
        let s = wait_for(node.runtime(), "both workers asleep", |s| {
            s.workers.iter().all(|w| w.sleeps >= 3)
        });
        assert!(s.workers.iter().all(|w| w.idle == idle), "{:?}", s.workers);
        assert_eq!(s.workers[0].naps, 0, "every port has a descriptor: no naps");
        let asleep = s.workers[0].sleeps;

        // Frames after the sleep: every one forwarded, in order.
        traffic(&mut c0, &mut c1, 0, 5_000, 256);
        let s =
            wait_for(node.runtime(), "worker 0 asleep again", |s| s.workers[0].sleeps > asleep + 2);
        let (w, vr) = s.vr("vr").unwrap();
        assert_eq!((w, vr.counters.forwarded), (0, 5_000), "{:?}", vr.counters);

        // A move while both sleep is answered; the VR's new worker sleeps on its ports.
        let m = node.runtime_mut().move_vr("vr", 1).expect("move answered while asleep");
        assert_eq!((m.from, m.to), (0, 1));
        let before = s.workers[1].sleeps;
        wait_for(node.runtime(), "worker 1 asleep with the VR", |s| {
            s.vr("vr").is_some_and(|(w, _)| w == 1) && s.workers[1].sleeps > before + 2
        });
        // Single frames, each after a sleep.
        for k in 0..5 {
            thread::sleep(Duration::from_millis(20));
            traffic(&mut c0, &mut c1, 5_000 + k, 5_001 + k, 1);
        }
        traffic(&mut c0, &mut c1, 5_005, 10_000, 256);
        let s = node.runtime().snapshot().unwrap();
        let (w, vr) = s.vr("vr").unwrap();
        assert_eq!((w, vr.counters.forwarded), (1, 10_000), "{idle:?}: {:?}", vr.counters);
        assert_eq!(s.ports().map(|p| p.stats.rx_dropped).sum::<u64>(), 0);
        node.stop().unwrap();
    }
}

/// `idle: adaptive` under frames that come far apart (a few thousand a second): the worker
/// sleeps between them rather than yielding its CPU until the next one (before, it slept only
/// after 1 ms without frames, so a stream like this one kept it awake throughout).
#[test]
fn adaptive_sleeps_between_slow_frames() {
    let tag = format!("rpx-idle-slow-{}", std::process::id());
    let topo = topology(&tag, Idle::Adaptive);
    let node = Node::start(topo.clone(), Options::for_topology(&topo), 256).unwrap();
    let (mut c0, mut c1) = clients(&tag);
    let before = node.runtime().snapshot().unwrap().workers[0].sleeps;
    // Each frame is back before the next is sent, and the next waits 300 us more: they are
    // at least that far apart at the worker, however loaded the machine.
    const N: u64 = 200;
    for k in 0..N {
        traffic(&mut c0, &mut c1, k, k + 1, 1);
        thread::sleep(Duration::from_micros(300));
    }
    let s = node.runtime().snapshot().unwrap();
    let slept = s.workers[0].sleeps - before;
    assert_eq!(s.vr("vr").unwrap().1.counters.forwarded, N);
    assert!(slept >= N / 2, "{slept} sleeps in {N} frames 300+ us apart: {:?}", s.workers[0]);
    node.stop().unwrap();
}

#[test]
fn a_worker_with_a_mem_port_naps_and_forwards() {
    let text = "\
ports:
  - { name: in, kind: mem }
  - { name: out, kind: mem }
vrs:
  - name: vr
    interfaces:
      - { name: a, port: in, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }]
";
    let topo = Topology::parse(text, "mem.yaml", Path::new(".")).unwrap();
    assert_eq!(topo.idle, Idle::Adaptive);
    let mut host = build::host(&topo, None, 256).unwrap();
    let mut tx = host.take_outside(&topo, "in").unwrap();
    let mut rx = host.take_outside(&topo, "out").unwrap();
    let mut o = Options::new(1);
    o.idle = topo.idle;
    let rt = Runtime::start(host.cells, o).unwrap();
    let s = wait_for(&rt, "naps", |s| s.workers[0].naps >= 3);
    assert_eq!(s.workers[0].sleeps, 0, "a mem port has no descriptor to sleep on");
    traffic(&mut tx, &mut rx, 0, 3_000, 256);
    let s = rt.snapshot().unwrap();
    assert_eq!(s.vr("vr").unwrap().1.counters.forwarded, 3_000);
    // The mode changes at run time.
    rt.set_idle(Idle::Spin).unwrap();
    let s = rt.snapshot().unwrap();
    assert_eq!(s.workers[0].idle, Idle::Spin);
    assert_eq!(s.to_json()["workers"][0]["idle"], "poll");
    rt.stop().unwrap();
}
