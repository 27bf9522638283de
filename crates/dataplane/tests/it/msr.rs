//! The multistage software router: back-end replicas of one VR behind load balancers
//! ([`LbPort`]) and the control processor's load policy ([`MsrControl`]).
//!
//! What must hold: no flow is reordered while back-ends are switched on and off by the load;
//! a back-end switched off (draining) loses no packet of the flows it carries and serves them
//! until they are idle; a back-end whose worker stops, or whose queue goes down, is bypassed
//! within the failure bound, and what it lost is exactly what it held or refused.
//!
//! Time is simulated (sans-IO): every step advances the clock by [`STEP`] and polls each
//! running back-end once, so the tests are deterministic; a stopped worker is a cell that is
//! no longer polled.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use dataplane::config::VrConfig;
use dataplane::msr::{BackendState, Change, LbConfig, LbPort, MsrControl, MsrShared, Policy};
use dataplane::replica::replicas;
use dataplane::{Cell, RouteTable, Worker};
use ports::mem::{self, MemPort};
use ports::{Batch, Port, PortStats, PortStatus};

const IN: [u8; 6] = [0x02, 0, 0, 0, 0x08, 0x00];
const OUT: [u8; 6] = [0x02, 0, 0, 0, 0x08, 0x01];
const SRC: [u8; 6] = [0x02, 0, 0, 0, 0x09, 0x01];
const GW: [u8; 6] = [0x02, 0, 0, 0, 0x09, 0x02];
/// Simulated time per step: 10 us.
const STEP: u64 = 10_000;
const MS: u64 = 1_000_000;
const MAX_FLOWS: usize = 4096;

fn cfg() -> VrConfig {
    VrConfig {
        name: "msr".into(),
        interfaces: vec![
            iface("in", 0, None, IN, 1500, &["10.0.0.1/24"], &[]),
            iface("out", 1, None, OUT, 1500, &["10.0.1.1/24"], &[]),
        ],
        routes: vec![via("8.0.0.0/8", "10.0.1.2")],
        neighbors: vec![neigh(1, "10.0.1.2", GW)],
        limits: Default::default(),
    }
}

/// A queue whose status a test can set down.
struct Downable {
    inner: MemPort,
    down: Arc<AtomicBool>,
}

impl Port for Downable {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn rx_burst(&mut self, b: &mut Batch) -> usize {
        self.inner.rx_burst(b)
    }
    fn tx_burst(&mut self, b: &mut Batch, sel: &[u16]) -> usize {
        if self.down.load(Ordering::Relaxed) {
            return 0;
        }
        self.inner.tx_burst(b, sel)
    }
    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
    fn status(&self) -> PortStatus {
        if self.down.load(Ordering::Relaxed) {
            PortStatus::Down("cable pulled".into())
        } else {
            PortStatus::Up
        }
    }
}

/// The MSR under test and the traffic's bookkeeping.
struct Rig {
    cells: Vec<Cell>,
    ws: Vec<Worker>,
    lb_in: LbPort,
    lb_out: LbPort,
    ctl: MsrControl,
    shared: Arc<MsrShared>,
    /// A cell not polled any more: its worker stopped.
    stopped: Vec<bool>,
    /// Setting one takes back-end `b`'s ingress queue down.
    down: Vec<Arc<AtomicBool>>,
    t: u64,
    next_send: Vec<u32>,
    next_recv: Vec<u32>,
    sent: u64,
    got: u64,
    reordered: u64,
    /// Frames missing at the sink (sequence gaps), and those of them sent after `quiet_from`
    /// was taken (each flow's next sequence number then).
    gaps: u64,
    gaps_late: u64,
    quiet_from: Option<Vec<u32>>,
    changes: Vec<(u64, Change)>,
    rr: usize,
}

impl Rig {
    fn new(backends: usize, active: usize, lb: LbConfig, policy: Policy) -> Rig {
        let cfg = cfg();
        let table = RouteTable::new(&cfg).unwrap();
        let vrs = replicas(&cfg, &table.view(), backends).unwrap();
        let shared = MsrShared::new(backends, active);
        let (mut cells, mut q0, mut q1, mut down) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (b, vr) in vrs.into_iter().enumerate() {
            let (a0, b0) = mem::pair(&format!("in.q{b}"), &format!("lb-in.q{b}"), 1024);
            let (a1, b1) = mem::pair(&format!("out.q{b}"), &format!("lb-out.q{b}"), 1024);
            let ports: Vec<Box<dyn Port>> = vec![Box::new(a0), Box::new(a1)];
            cells.push(Cell::new(ports, vec![vr], vec![]).unwrap());
            let d = Arc::new(AtomicBool::new(false));
            q0.push(Box::new(Downable { inner: b0, down: d.clone() }) as Box<dyn Port>);
            q1.push(Box::new(b1) as Box<dyn Port>);
            down.push(d);
        }
        Rig {
            ws: (0..backends).map(|_| Worker::new()).collect(),
            cells,
            lb_in: LbPort::new("in", lb, shared.clone(), q0),
            lb_out: LbPort::new("out", lb, shared.clone(), q1),
            ctl: MsrControl::new(shared.clone(), policy, lb.idle_ns),
            shared,
            stopped: vec![false; backends],
            down,
            t: 0,
            next_send: vec![0; MAX_FLOWS],
            next_recv: vec![0; MAX_FLOWS],
            sent: 0,
            got: 0,
            reordered: 0,
            gaps: 0,
            gaps_late: 0,
            quiet_from: None,
            changes: Vec::new(),
            rr: 0,
        }
    }

    /// One step: the clock advances, the balancers and the policy run, `n` frames of the
    /// flows `flows` (round robin) enter, every running back-end polls once, the sink reads.
    fn step(&mut self, flows: std::ops::Range<u16>, n: usize) {
        self.t += STEP;
        self.lb_in.tick(self.t);
        self.lb_out.tick(self.t);
        let mut ch = Vec::new();
        self.ctl.tick(self.t, &mut ch);
        self.changes.extend(ch.into_iter().map(|c| (self.t, c)));
        let mut b = Batch::new(n.max(1));
        for _ in 0..n {
            let f = flows.start + (self.rr % flows.len()) as u16;
            self.rr += 1;
            let s = self.next_send[usize::from(f)];
            self.next_send[usize::from(f)] += 1;
            b.push_copy(&frame(f, s));
        }
        let sel: Vec<u16> = (0..n as u16).collect();
        assert_eq!(self.lb_in.tx_burst(&mut b, &sel), n, "a balancer takes every frame");
        self.sent += n as u64;
        for (k, (w, c)) in self.ws.iter_mut().zip(self.cells.iter_mut()).enumerate() {
            if !self.stopped[k] {
                w.poll(std::slice::from_mut(c), self.t);
            }
        }
        self.sink();
    }

    fn sink(&mut self) {
        let mut rx = Batch::new(ports::MAX_BURST);
        while self.lb_out.rx_burst(&mut rx) > 0 {
            for p in rx.packets() {
                let (f, s) = seq_of(p.frame());
                let want = &mut self.next_recv[usize::from(f)];
                if s < *want {
                    self.reordered += 1;
                    continue;
                }
                self.gaps += u64::from(s - *want);
                if let Some(q) = &self.quiet_from {
                    let lo = (*want).max(q[usize::from(f)]);
                    self.gaps_late += u64::from(s.saturating_sub(lo));
                }
                *want = s + 1;
                self.got += 1;
            }
            rx.clear();
        }
    }

    /// Frames sent but never received, per flow's last sequence number (trailing losses too).
    fn lost(&self) -> u64 {
        self.sent - self.got
    }

    fn forwarded(&self, b: usize) -> u64 {
        self.cells[b].vrs()[0].counters().forwarded
    }

    /// Everything a failing assertion should show: the shared state, both balancers' tables
    /// and every back-end's cell.
    fn dump(&self) -> String {
        let mut s = format!(
            "t {} sent {} got {} gaps {} reordered {} changes {:?}\n{}{}\n{}\n",
            self.t,
            self.sent,
            self.got,
            self.gaps,
            self.reordered,
            self.changes,
            self.shared.dump(),
            self.lb_in.dump(),
            self.lb_out.dump()
        );
        for c in &self.cells {
            s += &c.dump();
            s.push('\n');
        }
        s
    }
}

/// A UDP frame of flow `flow` (own source address and port) carrying `seq`.
fn frame(flow: u16, seq: u32) -> Vec<u8> {
    let src = format!("10.0.0.{}", 10 + flow % 200);
    let mut data = flow.to_be_bytes().to_vec();
    data.extend_from_slice(&seq.to_be_bytes());
    let udp = udp4(&src, "8.1.0.1", 1000 + flow, 53, &data);
    eth(IN, SRC, None, 0x0800, &Ip4::new(&src, "8.1.0.1", 64, 17, udp).bytes())
}

fn seq_of(f: &[u8]) -> (u16, u32) {
    let d = &f[14 + 20 + 8..];
    (u16::from_be_bytes([d[0], d[1]]), u32::from_be_bytes([d[2], d[3], d[4], d[5]]))
}

fn lb_cfg() -> LbConfig {
    LbConfig { flow_slots: 4096, idle_ns: MS, fail_ns: 2 * MS }
}

/// A policy that never switches anything on or off by load (only ends drains).
fn no_policy() -> Policy {
    Policy { on_above_pps: u64::MAX, off_below_pps: 0, hold_ns: MS, min_active: 1 }
}

/// Flows churn: in step `s`, the 100 flows from `(s / 100) * 50` send; each lives 200 steps
/// (2 ms), so flows start and end all the time and new ones meet the active set of the day.
fn window(s: u64, base: u16) -> std::ops::Range<u16> {
    let lo = base + ((s / 100) * 50) as u16;
    lo..lo + 100
}

#[test]
fn back_ends_follow_the_load_and_no_flow_is_reordered_or_lost() {
    // 1 Mpps per back-end on, 0.4 Mpps per remaining back-end off; 4 back-ends, 1 active.
    let policy =
        Policy { on_above_pps: 1_000_000, off_below_pps: 400_000, hold_ns: MS, min_active: 1 };
    let mut rig = Rig::new(4, 1, lb_cfg(), policy);
    // 3.2 Mpps (32 frames per 10 us) for 8 ms: back-ends 1, 2 and 3 are switched on.
    for s in 0..800 {
        rig.step(window(s, 0), 32);
    }
    assert_eq!(rig.shared.active_count(), 4, "{}", rig.dump());
    let on: Vec<usize> = rig
        .changes
        .iter()
        .filter_map(|(_, c)| if let Change::On(b) = c { Some(*b) } else { None })
        .collect();
    assert_eq!(on, [1, 2, 3], "{}", rig.dump());
    for b in 0..4 {
        assert!(rig.forwarded(b) > 0, "back-end {b} got no flow\n{}", rig.dump());
    }
    // 0.2 Mpps for 20 ms: back-ends drain one by one down to one, each serving its flows
    // until they end, then off.
    let at_drain: Vec<u64> = (0..4).map(|b| rig.forwarded(b)).collect();
    for s in 800..2800 {
        rig.step(window(s, 0), 2);
    }
    for _ in 0..300 {
        rig.step(0..1, 0);
    }
    assert_eq!(rig.shared.active_count(), 1, "{}", rig.dump());
    let drained: Vec<usize> = rig
        .changes
        .iter()
        .filter_map(|(_, c)| if let Change::Drain(b) = c { Some(*b) } else { None })
        .collect();
    assert_eq!(drained, [3, 2, 1], "{}", rig.dump());
    for (b, &then) in at_drain.iter().enumerate().skip(1) {
        assert_eq!(rig.shared.state(b), BackendState::Off, "{}", rig.dump());
        assert!(
            rig.forwarded(b) > then,
            "back-end {b} served nothing while draining\n{}",
            rig.dump()
        );
    }
    assert_eq!(rig.reordered, 0, "{}", rig.dump());
    assert_eq!(rig.lost(), 0, "{}", rig.dump());
    assert_eq!(rig.gaps, 0);
    let sum: u64 = (0..4).map(|b| rig.forwarded(b)).sum();
    assert_eq!(sum, rig.sent, "{}", rig.dump());
    let k = rig.lb_in.counters();
    assert_eq!((k.unpinned, k.refused, k.no_backend, k.rehomed), (0, 0, 0, 0), "{}", rig.dump());
}

#[test]
fn a_back_end_switched_off_loses_no_packet_of_existing_flows() {
    let mut rig = Rig::new(2, 2, lb_cfg(), no_policy());
    // 100 long-lived flows over both back-ends.
    for _ in 0..200 {
        rig.step(0..100, 16);
    }
    let before = rig.forwarded(1);
    assert!(before > 0 && rig.shared.pinned(1) > 0, "{}", rig.dump());
    rig.shared.switch_off(1);
    // The same flows go on for 5 ms: back-end 1 keeps serving its own.
    for _ in 0..500 {
        rig.step(0..100, 16);
    }
    assert_eq!(rig.shared.state(1), BackendState::Draining, "{}", rig.dump());
    let drained_flows = rig.forwarded(1) - before;
    assert!(drained_flows > 0, "back-end 1 dropped its flows at once\n{}", rig.dump());
    // Those flows end; new ones start, all on back-end 0; back-end 1 is off once idle.
    let served = rig.forwarded(1);
    for _ in 0..500 {
        rig.step(200..300, 16);
    }
    assert_eq!(rig.shared.state(1), BackendState::Off, "{}", rig.dump());
    assert_eq!(rig.shared.pinned(1), 0);
    assert_eq!(rig.forwarded(1), served, "a new flow went to a draining back-end\n{}", rig.dump());
    assert!(rig.changes.iter().any(|(_, c)| *c == Change::Off(1)));
    assert_eq!(rig.reordered, 0, "{}", rig.dump());
    assert_eq!(rig.lost(), 0, "{}", rig.dump());
    assert_eq!(rig.forwarded(0) + rig.forwarded(1), rig.sent);
}

#[test]
fn a_back_end_whose_worker_stops_is_bypassed_within_the_bound() {
    let lb = lb_cfg();
    let mut rig = Rig::new(3, 3, lb, no_policy());
    for _ in 0..200 {
        rig.step(0..120, 32);
    }
    assert!(rig.shared.pinned(1) > 0, "{}", rig.dump());
    // Back-end 1's worker stops.
    rig.stopped[1] = true;
    let stop_t = rig.t;
    let mut bypass_t = None;
    for _ in 0..600 {
        rig.step(0..120, 32);
        if bypass_t.is_none() && rig.shared.state(1) == BackendState::Failed {
            bypass_t = Some(rig.t);
            // Nothing sent from now on may be lost.
            rig.quiet_from = Some(rig.next_send.clone());
        }
    }
    let bypass_t = bypass_t.unwrap_or_else(|| panic!("never bypassed\n{}", rig.dump()));
    let detect = rig.shared.detect_ns(1);
    // Bound: fail_ns from the first refused frame, checked every step.
    assert!(detect >= lb.fail_ns && detect <= lb.fail_ns + STEP, "detect {detect}\n{}", rig.dump());
    assert_eq!(rig.shared.failures(), 1);
    // What was lost is exactly what back-end 1 holds in its ring plus what it refused.
    let stranded = rig.lb_in.queue_stats()[1].tx_packets - rig.cells[1].port_counters(0).rx_packets;
    let refused = rig.shared.refused(1);
    assert_eq!(rig.lost(), stranded + refused, "{}", rig.dump());
    assert_eq!(rig.gaps_late, 0, "frames sent after the bypass lost\n{}", rig.dump());
    // Every flow's last frame arrived: nothing sent after the bypass is missing at the end.
    let q = rig.quiet_from.as_ref().unwrap();
    for (f, &from) in q.iter().enumerate().take(120) {
        assert!(rig.next_recv[f] == rig.next_send[f] || from == rig.next_send[f], "flow {f}");
    }
    assert_eq!(rig.reordered, 0, "{}", rig.dump());
    assert!(rig.lb_in.counters().rehomed > 0, "{}", rig.dump());
    assert_eq!(rig.shared.refused(0) + rig.shared.refused(2), 0, "{}", rig.dump());
    eprintln!(
        "worker stopped at {} ms, bypassed {} ms later (fail_ns {} ms after the first refusal, \
         measured {} us); lost {} frames ({} in its ring, {} refused) of {} sent",
        stop_t / MS,
        (bypass_t - stop_t) as f64 / MS as f64,
        lb.fail_ns / MS,
        detect / 1000,
        rig.lost(),
        stranded,
        refused,
        rig.sent
    );
}

#[test]
fn a_back_end_whose_queue_goes_down_is_bypassed_at_the_next_tick() {
    let mut rig = Rig::new(2, 2, lb_cfg(), no_policy());
    for _ in 0..100 {
        rig.step(0..50, 8);
    }
    rig.down[0].store(true, Ordering::Relaxed);
    rig.step(0..50, 8);
    rig.step(0..50, 8);
    assert_eq!(rig.shared.state(0), BackendState::Failed, "{}", rig.dump());
    let lost = rig.lost();
    // The policy keeps one back-end active: back-end 1 takes every flow from now on.
    for _ in 0..200 {
        rig.step(0..50, 8);
    }
    assert_eq!(rig.lost(), lost, "{}", rig.dump());
    assert_eq!(rig.reordered, 0, "{}", rig.dump());
    assert!(lost <= 8, "only the step before the tick may lose: {lost}\n{}", rig.dump());
    // Repaired, it is off until the policy wants it.
    rig.shared.restore(0);
    assert_eq!(rig.shared.state(0), BackendState::Off);
}
