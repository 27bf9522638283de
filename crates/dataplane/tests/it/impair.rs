//! Impairments where frames leave the data plane: a VR's egress port and a switch member, on a
//! simulated clock (the engine's `now`). Frames held by a delay leave on a later poll at their
//! time, the port counts them then, and the VR counts them forwarded when it handed them over.

use crate::common;

use common::*;
use dataplane::impair::{Chance, ImpairConfig, ImpairDrop, Loss};
use dataplane::{Engine, MemberConfig, MemberMode, Switch, SwitchConfig};
use ports::mem::{self, MemPort};
use ports::{Batch, Port};

const US: u64 = 1_000;

struct Vr1 {
    e: Engine,
    lan: MemPort,
    wan: MemPort,
    now: u64,
}

impl Vr1 {
    fn new() -> Vr1 {
        let (a, lan) = mem::pair("lan", "h-lan", 1024);
        let (b, wan) = mem::pair("wan", "h-wan", 1024);
        let (c, _v) = mem::pair("v100", "h-v100", 64);
        let ports: Vec<Box<dyn Port>> = vec![Box::new(a), Box::new(b), Box::new(c)];
        let e = Engine::from_configs(ports, &[base_vr()]).unwrap();
        Vr1 { e, lan, wan, now: 1_000 * MS }
    }

    /// `n` frames from the lan host to 8.0.0.n (via the wan gateway), in bursts of at most
    /// 256, polled once each.
    fn send(&mut self, n: usize) {
        let mut b = Batch::new(256);
        let mut left = n;
        while left > 0 {
            let k = left.min(256);
            b.clear();
            for i in 0..k {
                let p = udp4_pkt("10.0.0.10", &format!("8.0.0.{}", i % 250 + 1), 64, &[7; 18]);
                b.push_copy(&to_vr(M0, H0, None, &p));
            }
            let sel: Vec<u16> = (0..k as u16).collect();
            assert_eq!(self.lan.tx_burst(&mut b, &sel), k);
            self.e.poll(self.now);
            left -= k;
        }
    }

    fn at(&mut self, t: u64) -> usize {
        self.now = t;
        self.e.poll(t);
        drain(&mut self.wan)
    }
}

fn drain(p: &mut MemPort) -> usize {
    let mut b = Batch::new(256);
    let mut n = 0;
    loop {
        b.clear();
        let k = p.rx_burst(&mut b);
        n += k;
        if k == 0 {
            return n;
        }
    }
}

#[test]
fn a_delay_on_a_vr_egress_holds_frames_until_their_time() {
    for burst in [1, 2, 257] {
        let mut v = Vr1::new();
        let cfg = ImpairConfig { delay_ns: 5 * MS, seed: 1, ..ImpairConfig::default() };
        v.e.cell_mut().set_impair(1, Some(cfg)).unwrap();
        let t0 = v.now;
        v.send(burst);
        assert_eq!(drain(&mut v.wan), 0, "held");
        assert_eq!(v.e.vrs()[0].counters().forwarded, burst as u64);
        assert_eq!(v.e.cell().port_counters(1).tx_packets, 0);
        assert_eq!(v.e.cell().next_due(), Some(t0 + 5 * MS));
        assert_eq!(v.at(t0 + 5 * MS - 1), 0);
        assert_eq!(v.at(t0 + 5 * MS), burst, "burst {burst}");
        assert_eq!(v.e.cell().port_counters(1).tx_packets, burst as u64);
        let c = *v.e.cell().port_impair(1).unwrap().counters();
        assert_eq!((c.offered, c.sent), (burst as u64, burst as u64));
        assert_eq!(v.e.cell().next_due(), None);
        // The lan port is not impaired.
        assert!(v.e.cell().port_impair(0).is_none());
    }
}

#[test]
fn a_frame_that_arrived_after_the_poll_began_is_held_from_its_arrival() {
    // The runtime's thread read `now`, was preempted, and the frames came meanwhile: the poll
    // clock (3 ms on) is when the data plane saw them, and the delay counts from there.
    for burst in [1, 2, 257] {
        let mut v = Vr1::new();
        let t0 = v.now;
        v.e.set_poll_clock(Box::new(move || t0 + 3 * MS));
        let cfg = ImpairConfig { delay_ns: 5 * MS, seed: 1, ..ImpairConfig::default() };
        v.e.cell_mut().set_impair(1, Some(cfg)).unwrap();
        v.send(burst);
        assert_eq!(v.e.cell().next_due(), Some(t0 + 8 * MS), "burst {burst}");
        assert_eq!(v.at(t0 + 5 * MS), 0, "not before its delay from arrival");
        assert_eq!(v.at(t0 + 8 * MS), burst, "burst {burst}");
        assert_eq!(v.e.cell().port_counters(1).tx_packets, burst as u64);
    }
}

#[test]
fn changing_and_removing_keeps_frames_already_held() {
    let mut v = Vr1::new();
    let slow = ImpairConfig { delay_ns: 20 * MS, ..ImpairConfig::default() };
    v.e.cell_mut().set_impair(1, Some(slow)).unwrap();
    let t0 = v.now;
    v.send(10);
    // Live: a 1 ms delay from now; then none at all.
    let fast = ImpairConfig { delay_ns: MS, ..ImpairConfig::default() };
    v.e.cell_mut().set_impair(1, Some(fast)).unwrap();
    v.now = t0 + MS;
    v.send(5);
    assert_eq!(v.at(t0 + 2 * MS), 5);
    v.e.cell_mut().set_impair(1, None).unwrap();
    assert_eq!(v.e.cell().port_impair(1).unwrap().held(), 10, "still waiting");
    v.now = t0 + 3 * MS;
    v.send(3);
    assert_eq!(drain(&mut v.wan), 3, "unimpaired now: at once");
    assert_eq!(v.at(t0 + 20 * MS - 1), 0);
    assert_eq!(v.at(t0 + 20 * MS), 10);
    assert!(v.e.cell().port_impair(1).is_none(), "gone once drained");
    assert_eq!(v.e.cell().port_counters(1).tx_packets, 18);
}

#[test]
fn loss_on_a_vr_egress_is_counted_on_the_link_not_the_vr() {
    let mut v = Vr1::new();
    let cfg = ImpairConfig { loss: Loss::Random(Chance::ALWAYS), ..ImpairConfig::default() };
    v.e.cell_mut().set_impair(1, Some(cfg)).unwrap();
    v.send(300);
    assert_eq!(drain(&mut v.wan), 0);
    let c = *v.e.cell().port_impair(1).unwrap().counters();
    assert_eq!(c.dropped(ImpairDrop::Loss), 300);
    assert_eq!(v.e.vrs()[0].counters().forwarded, 300);
    assert_eq!(v.e.vrs()[0].counters().dropped_total(), 0);
}

#[test]
fn a_switch_member_is_impaired_on_its_way_out() {
    let mut ports: Vec<Box<dyn Port>> = Vec::new();
    let mut hosts = Vec::new();
    for i in 0..2 {
        let (a, b) = mem::pair(&format!("m{i}"), &format!("h{i}"), 1024);
        ports.push(Box::new(a));
        hosts.push(b);
    }
    let cfg = SwitchConfig {
        name: "sw".into(),
        members: (0..2)
            .map(|p| MemberConfig { port: p, mode: MemberMode::Access { vlan: 1 } })
            .collect(),
        statics: Vec::new(),
        mac_limit: 64,
        aging_ms: 10_000,
        snooping: false,
        groups: 0,
        group_timeout_ms: 0,
    };
    let mut e = Engine::build(ports, Vec::new(), vec![Switch::new(&cfg).unwrap()], 256).unwrap();
    let imp = ImpairConfig { delay_ns: 300 * US, ..ImpairConfig::default() };
    e.cell_mut().set_impair(1, Some(imp)).unwrap();
    let now = MS;
    for (n, k) in [(1usize, 0u64), (2, 1), (257, 2)] {
        let t = now + k * MS;
        let mut b = Batch::new(257);
        for i in 0..n {
            // Flooded (unknown destination) and unicast alike leave through member 1's egress.
            b.push_copy(&eth([2, 0, 0, 0, 9, (i % 200) as u8], H0, None, ET_IP4, &[0; 46]));
        }
        let sel: Vec<u16> = (0..n as u16).collect();
        let mut sent = 0;
        while sent < n {
            sent += hosts[0].tx_burst(&mut b, &sel[sent..(sent + 256).min(n)]);
            e.poll(t);
        }
        assert_eq!(drain(&mut hosts[1]), 0, "held");
        e.poll(t + 300 * US - 1);
        assert_eq!(drain(&mut hosts[1]), 0);
        e.poll(t + 300 * US);
        assert_eq!(drain(&mut hosts[1]), n, "batch {n}");
    }
    let c = *e.cell().port_impair(1).unwrap().counters();
    assert_eq!(c.sent, 260);
}
