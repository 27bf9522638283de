//! Per-VR ingress queues on a shared port (issue 25 item 3, seed 004): steering into the
//! queues, their limits, service under reservations, and isolation under overload on a
//! simulated clock.
//!
//! ```text
//!   port 0 (shared)                      uplinks
//!   a   a0  A0  10.1.0.1/24     a1  port 1  A1  10.9.0.1/24    default via 10.9.0.2 (GA, static)
//!   b   b0  B0  10.2.0.1/24     b1  port 2  B1  172.16.0.1/24  default via 172.16.0.2 (GB, static)
//! ```

use crate::common;

use common::*;
use dataplane::config::{VrConfig, VrLimits};
use dataplane::{Budget, IngressQueues, Reservation, VrDrop};
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

fn queues(limit: u16, quantum: u16, per_pass: u16) -> Option<IngressQueues> {
    Some(IngressQueues { limit, quantum, per_pass })
}

fn packets(q: u64, period_ns: u64) -> Option<Reservation> {
    Some(Reservation { budget: Budget::Packets(q), period_ns, weight: 0 })
}

#[test]
fn only_a_port_that_feeds_two_vrs_is_queued() {
    let mut lab = Lab::new(&vrs(), &[1024, 1024, 1024]);
    assert!(lab.e.cell().ingress_queues().is_none());
    assert!(!lab.e.cell().port_queued(0), "off by default");
    lab.e.set_ingress_queues(queues(8, 4, 8)).unwrap();
    assert_eq!(lab.e.cell().ingress_queues(), queues(8, 4, 8));
    assert!(lab.e.cell().port_queued(0), "port 0 feeds a and b");
    assert!(!lab.e.cell().port_queued(1) && !lab.e.cell().port_queued(2), "one VR each");
    let e = lab.e.set_ingress_queues(queues(0, 4, 8)).unwrap_err();
    assert!(e.0.contains("limit 0"), "{e}");
    assert_eq!(lab.e.cell().ingress_queues(), queues(8, 4, 8), "unchanged on error");
    lab.e.set_ingress_queues(None).unwrap();
    assert!(!lab.e.cell().port_queued(0));
}

/// Port bursts of 1, 2 and 256, offers of 1, 2 and 257 frames, serving passes of 1, 2 and 256:
/// every frame up to the queue's limit of a burst is forwarded, in order; the rest of that
/// burst is dropped as `ingress_queue_full` on its VR, and the neighbour loses nothing.
#[test]
fn ingress_queue_full_drops_a_vrs_excess_on_a_shared_port() {
    const LIMIT: usize = 4;
    for burst in [1, 2, 256] {
        for n in [1, 2, 257] {
            for turn in [1u16, 2, 256] {
                let step = format!("burst {burst}, {n} frames, turns of {turn}");
                let mut lab = Lab::with_burst(&vrs(), &[1024, 1024, 1024], burst);
                lab.e.set_ingress_queues(queues(LIMIT as u16, turn, turn)).unwrap();
                let (sent, outs): (Vec<_>, Vec<_>) = (0..n).map(|i| pkt(A, i)).unzip();
                lab.send(0, &sent);
                lab.run();
                // The model: each poll queues a burst (what finds the queue full is dropped),
                // then serves one pass (`per_pass` = `turn`).
                let (mut kept, mut queued, mut next) = (Vec::new(), 0, 0);
                while next < n || queued > 0 {
                    for i in next..n.min(next + burst) {
                        if queued < LIMIT {
                            kept.push(i);
                            queued += 1;
                        }
                    }
                    next = n.min(next + burst);
                    queued -= queued.min(turn as usize);
                }
                let want: Vec<&Vec<u8>> = kept.iter().map(|&i| &outs[i]).collect();
                lab.expect(1, &want);
                for (i, f) in sent.iter().enumerate() {
                    lab.rx(A, f);
                    if kept.contains(&i) {
                        lab.fwd(A, &outs[i]);
                    } else {
                        lab.drop(A, VrDrop::IngressQueueFull);
                    }
                }
                let (sent_b, outs_b): (Vec<_>, Vec<_>) = (0..3).map(|i| pkt(B, i)).unzip();
                lab.send(0, &sent_b);
                lab.run();
                lab.expect(2, &outs_b);
                for (f, o) in sent_b.iter().zip(&outs_b) {
                    lab.rx(B, f);
                    lab.fwd(B, o);
                }
                lab.check(&step);
                assert_eq!(lab.e.cell().ingress_queued(A), 0, "{step}");
                let s = lab.e.cell().stages();
                assert_eq!(s.rx_packets, n as u64 + 3, "{step}");
                assert_eq!(s.vr_packets, (kept.len() + 3) as u64, "{step}");
            }
        }
    }
}

/// A VR out of budget keeps its frames queued for its next period (nothing is dropped as
/// `over_budget`), and its neighbour on the same port is served meanwhile.
#[test]
fn a_vr_out_of_budget_waits_in_its_queue_and_its_neighbour_is_served() {
    const T: u64 = 1_000_000;
    let mut lab = Lab::new(&vrs(), &[1024, 1024, 1024]);
    lab.e.set_ingress_queues(queues(64, 32, 64)).unwrap();
    lab.e.set_reservation(A, packets(2, T)).unwrap();
    let (sa, oa): (Vec<_>, Vec<_>) = (0..5).map(|i| pkt(A, i)).unzip();
    let (sb, ob): (Vec<_>, Vec<_>) = (0..3).map(|i| pkt(B, i)).unzip();
    let mixed: Vec<&Vec<u8>> = sa.iter().chain(&sb).collect();
    lab.send(0, &mixed);
    lab.run();
    lab.expect(1, &oa[..2]);
    lab.expect(2, &ob);
    for (f, o) in sb.iter().zip(&ob) {
        lab.rx(B, f);
        lab.fwd(B, o);
    }
    let served = |lab: &mut Lab, r: std::ops::Range<usize>| {
        for i in r {
            lab.rx(A, &sa[i]);
            lab.fwd(A, &oa[i]);
        }
    };
    served(&mut lab, 0..2);
    assert_eq!(lab.e.cell().ingress_queued(A), 3, "held, not dropped");
    lab.check("first period: 2 of a's 5 served, all of b's");
    lab.run_at(T / 2);
    lab.expect_silence();
    lab.run_at(T);
    lab.expect(1, &oa[2..4]);
    served(&mut lab, 2..4);
    lab.check("second period: 2 more");
    lab.run_at(2 * T);
    lab.expect(1, &oa[4..]);
    served(&mut lab, 4..5);
    lab.check("third period: the last");
    assert_eq!(lab.e.cell().ingress_queued(A), 0);
    assert_eq!(lab.e.vrs()[A].counters().dropped(VrDrop::OverBudget), 0);
}

/// Queued frames of a VR that is removed are counted on their port as `not_for_us`; those of
/// a VR whose queues are turned off, on the VR as `ingress_queue_full`. None is lost uncounted.
#[test]
fn queued_frames_are_counted_when_their_queue_goes() {
    const T: u64 = 1_000_000;
    let mut lab = Lab::new(&vrs(), &[1024, 1024, 1024]);
    lab.e.set_ingress_queues(queues(64, 32, 64)).unwrap();
    lab.e.set_reservation(A, packets(1, T)).unwrap();
    lab.e.set_reservation(B, packets(1, T)).unwrap();
    let (sa, oa): (Vec<_>, Vec<_>) = (0..5).map(|i| pkt(A, i)).unzip();
    let (sb, ob): (Vec<_>, Vec<_>) = (0..3).map(|i| pkt(B, i)).unzip();
    lab.send(0, &sa);
    lab.send(0, &sb);
    lab.run();
    lab.expect(1, &oa[..1]);
    lab.expect(2, &ob[..1]);
    assert_eq!((lab.e.cell().ingress_queued(A), lab.e.cell().ingress_queued(B)), (4, 2));
    lab.e.set_ingress_queues(queues(64, 32, 64)).unwrap();
    for (v, sent, outs) in [(A, &sa, &oa), (B, &sb, &ob)] {
        for (i, f) in sent.iter().enumerate() {
            lab.rx(v, f);
            if i == 0 {
                lab.fwd(v, &outs[0]);
            } else {
                lab.drop(v, VrDrop::IngressQueueFull);
            }
        }
    }
    lab.expect_silence();
    lab.check("reconfigured: every queued frame counted on its VR");
    lab.send(0, &sb);
    lab.run();
    assert_eq!(lab.e.cell().ingress_queued(B), 3);
    lab.e.cell_mut().remove_vr(B).unwrap();
    let after = lab.e.port_counters(0).dropped(dataplane::PortDrop::NotForUs);
    assert_eq!(after, 3, "b's queued frames counted on port 0\n{}", lab.e.dump());
    assert!(!lab.e.cell().port_queued(0), "port 0 now feeds one VR");
}

/// Costs of the simulated worker, in ns: receiving and classifying a frame, running it through
/// a VR, and a pass over the cell.
const RX_NS: u64 = 10;
const VR_NS: u64 = 50;
const PASS_NS: u64 = 50;

/// One simulated run: VR a offered `a_load` and VR b `b_load` of the worker's capacity (one
/// frame per `RX_NS + VR_NS`) on the shared port for `periods` of 1 ms, each VR reserved half
/// the capacity in packets per period. The clock advances by what each poll did (its received
/// and VR-run frames at the costs above), and the generator puts every frame due by then on the
/// shared ring of 1024 slots, which refuses what does not fit. Returns per VR (offered,
/// refused by the ring, forwarded) and the lab.
fn simulate(
    q: Option<IngressQueues>,
    a_load: f64,
    b_load: f64,
    periods: u64,
) -> ([(u64, u64, u64); 2], Lab) {
    const T: u64 = 1_000_000;
    let cap_pps = 1e9 / (RX_NS + VR_NS) as f64;
    let mut lab = Lab::new(&vrs(), &[1024, 4096, 4096]);
    lab.e.set_ingress_queues(q).unwrap();
    let half = (cap_pps * 0.5 * T as f64 / 1e9) as u64;
    lab.e.set_reservation(A, packets(half, T)).unwrap();
    lab.e.set_reservation(B, packets(half, T)).unwrap();
    let gap = [1e9 / (cap_pps * a_load), 1e9 / (cap_pps * b_load)];
    let mut next = [0.0, gap[1] / 2.0];
    let frames = [pkt(A, 1).0, pkt(B, 1).0];
    let mut one = Batch::new(1);
    let mut sink = Batch::new(256);
    let mut res = [(0u64, 0u64, 0u64); 2];
    let (mut now, end) = (0u64, periods * T);
    let mut before = lab.e.cell().stages();
    while now < end {
        // Everything due by now, in time order.
        loop {
            let v = if next[0] <= next[1] { 0 } else { 1 };
            if next[v] > now as f64 {
                break;
            }
            next[v] += gap[v];
            res[v].0 += 1;
            // A sent slot keeps an empty buffer: the frame is copied in each time.
            one.clear();
            one.push_copy(&frames[v]);
            if lab.hosts[0].tx_burst(&mut one, &[0]) == 0 {
                res[v].1 += 1;
            }
        }
        lab.e.poll(now);
        for p in [1, 2] {
            sink.clear();
            while lab.hosts[p].rx_burst(&mut sink) > 0 {
                sink.clear();
            }
        }
        let s = lab.e.cell().stages();
        let work =
            (s.rx_packets - before.rx_packets) * RX_NS + (s.vr_packets - before.vr_packets) * VR_NS;
        before = s;
        now += PASS_NS + work;
    }
    for (v, r) in res.iter_mut().enumerate() {
        r.2 = lab.e.vrs()[v].counters().forwarded;
    }
    (res, lab)
}

/// Issue 25's isolation case on a simulated clock: VR a offered 1.5 and VR b 0.15 of the
/// worker's capacity (a gets ten times b's load, three times its own half), both reserved
/// half. Run to completion, a's budget holds the worker for half of every period, the shared
/// ring overflows meanwhile and b loses frames there; with ingress queues the ring is drained
/// every pass, a's excess ends in its own queue, and b keeps at least 99 % of its offer.
#[test]
fn simulated_overload_of_one_vr_leaves_its_neighbour_whole_with_ingress_queues() {
    let periods = 10;
    let ([_, b0], lab0) = simulate(None, 1.5, 0.15, periods);
    let kept0 = b0.2 as f64 / b0.0 as f64;
    let ([a, b], lab) = simulate(Some(IngressQueues::default()), 1.5, 0.15, periods);
    let kept = b.2 as f64 / b.0 as f64;
    eprintln!(
        "b kept {:.1} % run to completion, {:.1} % with ingress queues; a (offered, refused, \
         forwarded) {a:?}",
        kept0 * 100.0,
        kept * 100.0
    );
    let (dump0, dump) = (lab0.e.dump(), lab.e.dump());
    // The model shows the problem the queues solve: b's frames refused at the shared ring.
    assert!(kept0 < 0.99 && b0.1 > 0, "run to completion: b kept {kept0}\n{dump0}");
    assert!(kept >= 0.99, "with queues: b kept {kept} ({b:?})\n{dump}");
    assert_eq!(b.1, 0, "the ring refused none of b's frames\n{dump}");
    // a forwards its reservation, half the capacity per period, and no more.
    let half = 1e9 / (RX_NS + VR_NS) as f64 * 0.5 * 1e-3;
    let per_period = a.2 as f64 / periods as f64;
    assert!(per_period <= half + 1.0 && per_period >= 0.9 * half, "a: {a:?}\n{dump}");
    // Every frame the ring took is counted: forwarded, dropped at a's full queue, or queued
    // still (the last frames in flight: received, not yet forwarded).
    let c = |v: usize| *lab.e.vrs()[v].counters();
    let (ca, cb) = (c(A), c(B));
    let full = ca.dropped(VrDrop::IngressQueueFull);
    assert!(full > 0, "a's excess ends in its own queue\n{dump}");
    assert_eq!(ca.dropped_total(), full, "a loses frames nowhere else\n{dump}");
    assert_eq!(ca.rx_packets, ca.forwarded + full, "{dump}");
    assert_eq!(a.0 - a.1, ca.rx_packets + lab.e.cell().ingress_queued(A) as u64, "{dump}");
    assert_eq!(cb.dropped_total(), 0, "{dump}");
    let qb = lab.e.cell().ingress_queued(B) as u64;
    assert_eq!((cb.rx_packets, cb.forwarded), (b.0 - qb, b.0 - qb), "{dump}");
    assert_eq!(lab.e.port_counters(0).rx_packets, a.0 - a.1 + b.0, "{dump}");
    assert_eq!(lab.e.port_counters(0).drops, [0; dataplane::PortDrop::COUNT], "{dump}");
}
