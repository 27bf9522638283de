//! Per-VR reservations, batch limits and receive bursts, OPTE style: after every step every
//! VR's and every port's counters are compared whole (`Lab::check`), so a budget that leaks
//! into a neighbour shows up as a counter that moved.
//!
//! ```text
//!   port 0 (shared)                      uplinks
//!   a   a0  A0  10.1.0.1/24     a1  port 1  A1  10.9.0.1/24    default via 10.9.0.2 (GA, static)
//!   b   b0  B0  10.2.0.1/24     b1  port 2  B1  172.16.0.1/24  default via 172.16.0.2 (GB, static)
//! ```
//!
//! Time budgets use a fake clock that advances `STEP` ns each time it is read. The engine reads
//! it before each port's receive, after demux, after each VR's run and after the burst's
//! transmit, so a VR alone in a burst of `n` packets, `k` of them admitted, is charged
//! `STEP` (its run) + `2 STEP × k / n` (its share of the common work).

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use dataplane::config::{VrConfig, VrLimits};
use dataplane::{Budget, Cell, Engine, Reservation, Vr, VrDrop, Worker};
use ports::mem;
use ports::{Batch, Port};

const A0: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const A1: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 2];
const B0: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 1];
const B1: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
const HA: [u8; 6] = [0x02, 0x10, 0, 0, 0, 1];
const HB: [u8; 6] = [0x02, 0x10, 0, 0, 0, 2];
const GA: [u8; 6] = [0x02, 0x20, 0, 0, 0, 1];
const GB: [u8; 6] = [0x02, 0x20, 0, 0, 0, 2];
const A: usize = 0;
const B: usize = 1;
const STEP: u64 = 100;

fn vrs() -> Vec<VrConfig> {
    vec![
        VrConfig {
            name: "a".into(),
            interfaces: vec![
                iface("a0", 0, None, A0, 1500, &["10.1.0.1/24"], &[]),
                iface("a1", 1, None, A1, 1500, &["10.9.0.1/24"], &[]),
            ],
            routes: vec![via("0.0.0.0/0", "10.9.0.2")],
            neighbors: vec![neigh(1, "10.9.0.2", GA)],
            limits: VrLimits::default(),
        },
        VrConfig {
            name: "b".into(),
            interfaces: vec![
                iface("b0", 0, None, B0, 1500, &["10.2.0.1/24"], &[]),
                iface("b1", 2, None, B1, 1500, &["172.16.0.1/24"], &[]),
            ],
            routes: vec![via("0.0.0.0/0", "172.16.0.2")],
            neighbors: vec![neigh(1, "172.16.0.2", GB)],
            limits: VrLimits::default(),
        },
    ]
}

/// Packet `i` for VR `v` (numbered in its payload), as sent and as forwarded.
fn pkt(v: usize, i: usize) -> (Vec<u8>, Vec<u8>) {
    let data = [(i >> 8) as u8, i as u8, v as u8];
    let (to, from, src, out_mac, gw) = match v {
        A => (A0, HA, "10.1.0.10", A1, GA),
        _ => (B0, HB, "10.2.0.10", B1, GB),
    };
    let p = udp4_pkt(src, "198.18.0.1", 64, &data);
    (to_vr(to, from, None, &p), eth(gw, out_mac, None, ET_IP4, &p.hop().bytes()))
}

fn lab(burst: usize) -> Lab {
    Lab::with_burst(&vrs(), &[1024, 1024, 1024], burst)
}

fn packets(q: u64, period_ns: u64) -> Option<Reservation> {
    Some(Reservation { budget: Budget::Packets(q), period_ns, weight: 0 })
}

fn time(q: u64, period_ns: u64, weight: u32) -> Option<Reservation> {
    Some(Reservation { budget: Budget::Time(q), period_ns, weight })
}

/// A clock that advances `STEP` on every read.
fn step_clock() -> dataplane::Clock {
    let t = Arc::new(AtomicU64::new(0));
    Box::new(move || t.fetch_add(STEP, Ordering::Relaxed) + STEP)
}

/// Sends packets `range` of VR `v` at the lab's time and polls until idle; expects the
/// first `ok` of them forwarded (in order) and the rest dropped for `why`.
#[track_caller]
fn offer(lab: &mut Lab, v: usize, range: std::ops::Range<usize>, ok: usize, why: VrDrop) {
    let (sent, outs): (Vec<_>, Vec<_>) = range.map(|i| pkt(v, i)).unzip();
    lab.send(0, &sent);
    lab.run();
    lab.expect(1 + v, &outs[..ok]);
    for (k, f) in sent.iter().enumerate() {
        lab.rx(v, f);
        if k < ok {
            lab.fwd(v, &outs[k]);
        } else {
            lab.drop(v, why);
        }
    }
}

#[test]
fn packet_budget_forwards_exactly_k_per_period() {
    const T: u64 = 1_000_000;
    // Engine bursts of 1, 2 and 256 and offers of 1, 2 and 257 packets: every loop path, and
    // groups that fit, fit in part, and straddle two bursts.
    for burst in [1, 2, 256] {
        for n in [1, 2, 257] {
            for k in [1, 2, 100, 300] {
                let mut lab = lab(burst);
                lab.e.set_reservation(A, packets(k, T)).unwrap();
                let step = format!("burst {burst}, {n} packets, budget {k}");
                let ok = n.min(k as usize);
                offer(&mut lab, A, 0..n, ok, VrDrop::OverBudget);
                offer(&mut lab, B, 0..n, n, VrDrop::OverBudget);
                lab.check(&format!("{step}: first period"));
                // Later in the same period: nothing left, or what is left.
                lab.run_at(T - 1);
                offer(
                    &mut lab,
                    A,
                    n..n + 3,
                    (k as usize).saturating_sub(ok).min(3),
                    VrDrop::OverBudget,
                );
                lab.check(&format!("{step}: same period"));
                // The next period has the whole budget again, however much was refused.
                lab.run_at(T);
                offer(&mut lab, A, 0..n, ok, VrDrop::OverBudget);
                lab.check(&format!("{step}: second period"));
                // Idle periods save nothing up.
                lab.run_at(10 * T + 5);
                offer(&mut lab, A, 0..n, ok, VrDrop::OverBudget);
                lab.check(&format!("{step}: after idle periods"));
                assert_eq!(lab.e.vrs()[B].counters().dropped(VrDrop::OverBudget), 0);
            }
        }
    }
}

#[test]
fn a_change_at_run_time_takes_effect_from_the_next_period() {
    const T: u64 = 1_000_000;
    let mut lab = lab(256);
    lab.e.set_reservation(A, packets(5, T)).unwrap();
    offer(&mut lab, A, 0..3, 3, VrDrop::OverBudget);
    lab.e.set_reservation(A, packets(2, T)).unwrap();
    assert_eq!(lab.e.cell().reservation(A), packets(5, T), "in force until the boundary");
    assert_eq!(lab.e.cell().pending_reservation(A), Some(packets(2, T)));
    lab.run_at(T / 2);
    offer(&mut lab, A, 3..8, 2, VrDrop::OverBudget);
    lab.check("old budget for the rest of the period");
    lab.run_at(T);
    offer(&mut lab, A, 0..5, 2, VrDrop::OverBudget);
    assert_eq!(lab.e.cell().reservation(A), packets(2, T));
    lab.check("new budget from the next period");
    lab.e.set_reservation(A, None).unwrap();
    lab.run_at(T + T / 2);
    offer(&mut lab, A, 0..5, 0, VrDrop::OverBudget);
    lab.run_at(2 * T);
    offer(&mut lab, A, 0..300, 300, VrDrop::OverBudget);
    assert_eq!(lab.e.cell().reservation(A), None);
    lab.check("unreserved from the boundary after");
    // A VR without a reservation gets one at once.
    lab.e.set_reservation(B, packets(1, T)).unwrap();
    offer(&mut lab, B, 0..4, 1, VrDrop::OverBudget);
    lab.check("b reserved at once");
}

#[test]
fn time_budget_is_charged_from_the_clock() {
    const T: u64 = 1_000_000;
    let mut lab = lab(256);
    assert!(lab.e.set_reservation(A, time(750, T, 0)).is_err(), "no clock yet");
    lab.e.set_clock(step_clock());
    lab.e.set_reservation(A, time(750, T, 0)).unwrap();
    // Bursts of 10: each costs 3 STEP = 300 ns when all are admitted (30 ns a packet).
    offer(&mut lab, A, 0..10, 10, VrDrop::OverBudget); // cost unknown: all in; spent 300
    offer(&mut lab, A, 10..20, 10, VrDrop::OverBudget); // 450 left ≥ 15 × 30: all in; 600
    offer(&mut lab, A, 20..30, 5, VrDrop::OverBudget); // 150 left: 5; charged 100 + 200 × 5/10
    offer(&mut lab, A, 30..40, 0, VrDrop::OverBudget); // 800 spent: none
    offer(&mut lab, B, 0..40, 40, VrDrop::OverBudget);
    lab.check("first period: 25 in");
    // 50 ns overrun carried: 700 left. The estimate is now 31.25 ns (EWMA of 30 and 40).
    lab.run_at(T);
    offer(&mut lab, A, 40..50, 10, VrDrop::OverBudget); // 350 spent
    offer(&mut lab, A, 50..60, 10, VrDrop::OverBudget); // 400 left at ~31.1: 13 ≥ 10; 650
    offer(&mut lab, A, 60..70, 4, VrDrop::OverBudget); // 100 left at ~31.0: ceil = 4
    lab.check("second period: the overrun paid back");
}

#[test]
fn weights_share_spare_capacity_among_those_that_ran_out() {
    const T: u64 = 1_000_000_000;
    let mut lab = lab(256);
    lab.e.set_clock(step_clock());
    lab.e.worker_mut().set_spare_window(1_000);
    lab.e.set_reservation(A, time(200, T, 1)).unwrap();
    lab.e.set_reservation(B, time(200, T, 3)).unwrap();
    // One burst of 10 + 10: each VR charged its run (100) + half the common 200 = 200: spent.
    let (mut sent, mut outs_a, mut outs_b) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..10 {
        let (f, o) = pkt(A, i);
        sent.push(f);
        outs_a.push(o);
    }
    for i in 0..10 {
        let (f, o) = pkt(B, i);
        sent.push(f);
        outs_b.push(o);
    }
    lab.send(0, &sent);
    lab.run();
    lab.expect(1, &outs_a);
    lab.expect(2, &outs_b);
    for i in 0..10 {
        lab.rx(A, &sent[i]);
        lab.fwd(A, &outs_a[i]);
        lab.rx(B, &sent[10 + i]);
        lab.fwd(B, &outs_b[i]);
    }
    lab.check("within budget");
    // Both out of budget, and the first window has no spare: all refused.
    offer(&mut lab, A, 10..20, 0, VrDrop::OverBudget);
    offer(&mut lab, B, 10..20, 0, VrDrop::OverBudget);
    lab.check("no spare in the first window");
    // Window 1: spare = 1000 - 400 = 600 ns, a gets 1/4 (150 ns), b 3/4 (450 ns); at 20 ns a
    // packet that is ceil(150/20) = 8 for a and ceil(450/20) = 23 for b.
    lab.run_at(1_000);
    let (mut sent, mut outs_a, mut outs_b) = (Vec::new(), Vec::new(), Vec::new());
    for i in 20..30 {
        let (f, o) = pkt(A, i);
        sent.push(f);
        outs_a.push(o);
    }
    for i in 20..50 {
        let (f, o) = pkt(B, i);
        sent.push(f);
        outs_b.push(o);
    }
    lab.send(0, &sent);
    lab.run();
    lab.expect(1, &outs_a[..8]);
    lab.expect(2, &outs_b[..23]);
    for (k, f) in sent.iter().enumerate() {
        let (v, j, outs) = if k < 10 { (A, k, &outs_a) } else { (B, k - 10, &outs_b) };
        lab.rx(v, f);
        if j < if v == A { 8 } else { 23 } {
            lab.fwd(v, &outs[j]);
        } else {
            lab.drop(v, VrDrop::OverBudget);
        }
    }
    lab.check("spare split 1:3");
}

#[test]
fn batch_limit_drops_a_vrs_excess_per_burst() {
    let mut lab = lab(256);
    lab.e.cell_mut().set_vr_batch(A, 3).unwrap();
    offer(&mut lab, A, 0..10, 3, VrDrop::BatchLimit);
    offer(&mut lab, B, 0..10, 10, VrDrop::BatchLimit);
    lab.check("three a burst for a, b unlimited");
    // With a budget too: the batch limit first, then the budget.
    lab.e.set_reservation(A, packets(2, 1_000_000)).unwrap();
    let (sent, outs): (Vec<_>, Vec<_>) = (10..20).map(|i| pkt(A, i)).unzip();
    lab.send(0, &sent);
    lab.run();
    lab.expect(1, &outs[..2]);
    for (k, f) in sent.iter().enumerate() {
        lab.rx(A, f);
        match k {
            0 | 1 => lab.fwd(A, &outs[k]),
            2 => lab.drop(A, VrDrop::OverBudget),
            _ => lab.drop(A, VrDrop::BatchLimit),
        }
    }
    lab.check("batch limit, then budget");
    assert!(lab.e.cell_mut().set_vr_batch(A, 0).is_err());
    assert!(lab.e.cell_mut().set_vr_batch(A, 257).is_err());
}

#[test]
fn a_port_receives_at_most_its_burst_per_poll() {
    let mut lab = lab(256);
    lab.e.cell_mut().set_port_burst(0, 4).unwrap();
    let (sent, outs): (Vec<_>, Vec<_>) = (0..10).map(|i| pkt(A, i)).unzip();
    lab.send(0, &sent);
    assert_eq!(lab.poll(), 4);
    assert_eq!(lab.poll(), 4);
    assert_eq!(lab.poll(), 2);
    lab.expect(1, &outs);
    for (f, o) in sent.iter().zip(&outs) {
        lab.rx(A, f);
        lab.fwd(A, o);
    }
    lab.check("bursts of 4");
    assert_eq!(lab.e.cell().port_burst(0), 4);
    assert!(lab.e.cell_mut().set_port_burst(0, 0).is_err());
}

/// Two cells on one worker, then one of them moved to a second worker between polls with
/// frames waiting in its ring: every frame forwarded once, in order.
#[test]
fn cells_share_a_worker_and_move_between_workers() {
    let cell = |tag: u8| {
        let (p0, h0) = mem::pair("p0", "h0", 1024);
        let (p1, h1) = mem::pair("p1", "h1", 1024);
        let (p2, h2) = mem::pair("p2", "h2", 16);
        let mut cfg = vrs();
        cfg[A].name = format!("a{tag}");
        cfg[B].name = format!("b{tag}");
        let vrs = cfg.iter().map(|c| Vr::new(c).unwrap()).collect();
        let ports: Vec<Box<dyn Port>> = vec![Box::new(p0), Box::new(p1), Box::new(p2)];
        (Cell::new(ports, vrs, Vec::new()).unwrap(), h0, h1, h2)
    };
    let (c1, mut in1, mut out1, _x1) = cell(1);
    let (c2, mut in2, mut out2, _x2) = cell(2);
    let (mut w1, mut w2) = (Worker::new(), Worker::new());
    let mut on_w1 = vec![c1, c2];
    let mut on_w2: Vec<Cell> = Vec::new();
    let send = |p: &mut mem::MemPort, range: std::ops::Range<usize>| {
        let mut b = Batch::new(range.len());
        for i in range.clone() {
            b.push_copy(&pkt(A, i).0);
        }
        let sel: Vec<u16> = (0..range.len() as u16).collect();
        assert_eq!(p.tx_burst(&mut b, &sel), range.len());
    };
    let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let recv = |p: &mut mem::MemPort, into: &mut Vec<Vec<u8>>| {
        let mut b = Batch::new(256);
        while p.rx_burst(&mut b) > 0 {
            into.extend(b.packets().iter().map(|x| x.frame().to_vec()));
            b.clear();
        }
    };
    let mut now = 0;
    for round in 0..20 {
        send(&mut in1, round * 50..round * 50 + 50);
        send(&mut in2, round * 50..round * 50 + 50);
        now += 1_000;
        if round % 2 == 1 {
            // Frames are waiting in cell 2's ring: move it across with them.
            let c = on_w1.pop().unwrap();
            on_w2.push(c);
        } else if let Some(c) = on_w2.pop() {
            on_w1.push(c);
        }
        w1.poll(&mut on_w1, now);
        w2.poll(&mut on_w2, now);
        recv(&mut out1, &mut got[0]);
        recv(&mut out2, &mut got[1]);
    }
    let want: Vec<Vec<u8>> = (0..1000).map(|i| pkt(A, i).1).collect();
    for (c, g) in got.iter().enumerate() {
        assert_eq!(g.len(), want.len(), "cell {}", c + 1);
        for (i, (g, w)) in g.iter().zip(&want).enumerate() {
            assert_frame(g, w, &format!("cell {} frame {i}", c + 1));
        }
    }
    let all: Vec<&Cell> = on_w1.iter().chain(&on_w2).collect();
    for c in all {
        let a = c.vrs()[A].counters();
        assert_eq!((a.rx_packets, a.forwarded, a.dropped_total()), (1000, 1000, 0), "{}", c.dump());
    }
}

/// The engine's old single-worker API still works on its parts.
#[test]
fn an_engine_is_one_worker_and_one_cell() {
    let (p0, _h0) = mem::pair("p0", "h0", 8);
    let e = Engine::new(vec![Box::new(p0)], Vec::new()).unwrap();
    let (w, c) = e.into_parts();
    let e = Engine::from_parts(w, c);
    assert_eq!((e.port_count(), e.vrs().len(), e.port_name(0)), (1, 0, "p0"));
}

/// A port whose every receive costs `cost` ns of the worker's simulated time, as polling an
/// empty ring does on a real one.
struct Costly {
    port: mem::MemPort,
    clock: Arc<AtomicU64>,
    cost: u64,
}

impl Port for Costly {
    fn name(&self) -> &str {
        self.port.name()
    }
    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        self.clock.fetch_add(self.cost, Ordering::Relaxed);
        self.port.rx_burst(batch)
    }
    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        self.port.tx_burst(batch, sel)
    }
    fn stats(&self) -> ports::PortStats {
        self.port.stats()
    }
}

/// A saturated worker on a simulated clock: every read costs `STEP`, every receive on a port
/// `RX_COST` (the uplinks' receives find nothing), and the engine's `now` is that clock. VR a
/// gets a full burst every pass.
struct Saturated {
    e: Engine,
    clock: Arc<AtomicU64>,
    input: mem::MemPort,
    outs: Vec<mem::MemPort>,
    sent: usize,
    /// How far the clock jumps at its second read from now (the thread descheduled); 0 or
    /// `u64::MAX`: it does not.
    jump: Arc<AtomicU64>,
}

const RX_COST: u64 = 150;
const SAT_BURST: usize = 32;

impl Saturated {
    fn new() -> Saturated {
        let clock = Arc::new(AtomicU64::new(0));
        let (p0, h0) = mem::pair("p0", "h0", 1024);
        let mut ports: Vec<Box<dyn Port>> = vec![Box::new(p0)];
        let mut outs = Vec::new();
        for i in 1..3 {
            let (p, h) = mem::pair(&format!("p{i}"), &format!("h{i}"), 1024);
            ports.push(Box::new(Costly { port: p, clock: clock.clone(), cost: RX_COST }));
            outs.push(h);
        }
        let vrs = vrs().iter().map(|c| Vr::new(c).unwrap()).collect();
        let mut e = Engine::with_burst(ports, vrs, SAT_BURST).unwrap();
        let (c, jump) = (clock.clone(), Arc::new(AtomicU64::new(u64::MAX)));
        let (j, mut armed) = (jump.clone(), 0);
        e.set_clock(Box::new(move || {
            let t = c.fetch_add(STEP, Ordering::Relaxed) + STEP;
            match j.load(Ordering::Relaxed) {
                0 | u64::MAX => t,
                // The second read of a poll is inside a burst's charge, whichever read
                // starts it.
                _ if armed == 0 => {
                    armed = 1;
                    t
                }
                by => {
                    j.store(0, Ordering::Relaxed);
                    c.fetch_add(by, Ordering::Relaxed) + by
                }
            }
        }));
        Saturated { e, clock, input: h0, outs, sent: 0, jump }
    }

    /// Polls until the simulated clock reaches `until`; returns VR a's forwarded packets.
    fn run_until(&mut self, until: u64) -> u64 {
        let mut b = Batch::new(SAT_BURST);
        while self.clock.load(Ordering::Relaxed) < until {
            b.clear();
            for i in 0..SAT_BURST {
                b.push_copy(&pkt(A, (self.sent + i) % 60_000).0);
            }
            let sel: Vec<u16> = (0..SAT_BURST as u16).collect();
            self.sent += self.input.tx_burst(&mut b, &sel);
            let now = self.clock.load(Ordering::Relaxed);
            self.e.poll(now);
            for o in &mut self.outs {
                b.clear();
                while o.rx_burst(&mut b) > 0 {
                    b.clear();
                }
            }
        }
        self.e.vrs()[A].counters().forwarded
    }
}

/// Forwarded by a saturated VR a in `periods` periods of `t` from `from`, with a reservation
/// of `pct` % (none: the peak).
fn saturated_rate(pct: Option<u64>, t: u64, periods: u64, jump_at: Option<u64>) -> f64 {
    let mut s = Saturated::new();
    if let Some(p) = pct {
        s.e.set_reservation(A, time(t * p / 100, t, 0)).unwrap();
    }
    // Settle the cost estimate and the period grid first.
    let start = 4 * t;
    let before = s.run_until(start);
    if let Some(by) = jump_at {
        s.jump.store(by, Ordering::Relaxed);
    }
    let after = s.run_until(start + periods * t);
    (after - before) as f64 / periods as f64
}

/// Issue 17: a reservation of R gives R of the VR's unreserved peak. The peak pays for every
/// step of a saturated pass (the uplinks' empty receives, the clock reads); the reservation
/// must be charged the same steps, else it buys more than R (here the empty receives alone
/// would give 1.5 × R).
#[test]
fn a_reservation_is_that_share_of_the_saturated_peak() {
    const T: u64 = 200_000;
    let peak = saturated_rate(None, T, 20, None);
    assert!(peak > 0.0);
    for pct in [10, 25, 50, 80] {
        let got = saturated_rate(Some(pct), T, 20, None);
        let want = peak * pct as f64 / 100.0;
        let ratio = got / want;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "{pct} %: {got:.1} a period against {want:.1} (peak {peak:.1}): {ratio:.3} ×"
        );
    }
}

/// Issue 17: a thread descheduled for 5 periods in the middle of a VR's run is not charged to
/// the VR (it would owe 5 periods of budget and forward nothing for 5 more).
#[test]
fn time_the_worker_was_away_is_not_charged() {
    const T: u64 = 200_000;
    let away = 5 * T;
    assert!(away > dataplane::AWAY_NS);
    let steady = saturated_rate(Some(50), T, 20, None);
    // The jump lands inside the measured window; its 5 periods pass with the thread away, so
    // 15 of the 20 periods forward.
    let jumped = saturated_rate(Some(50), T, 20, Some(away));
    let ratio = jumped / (steady * 15.0 / 20.0);
    assert!((0.9..=1.1).contains(&ratio), "{jumped:.1} a period against {steady:.1}: {ratio:.3}");
}
