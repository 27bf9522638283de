//! The learning switch, step by step: after every step the whole counter struct and the MAC
//! table are asserted, and every frame every port received is checked byte for byte.

use dataplane::{
    Engine, MemberConfig, MemberMode, StaticMac, Switch, SwitchConfig, SwitchCounters, SwitchDrop,
};
use ports::{mem, Batch, Port};
use wire::MacAddr;

const MS: u64 = 1_000_000;
const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
const D: [u8; 6] = [2, 0, 0, 0, 0, 0xd];
const S: [u8; 6] = [2, 0, 0, 0, 0, 0x5];
const BCAST: [u8; 6] = [0xff; 6];

/// An Ethernet frame `src -> dst`, tagged if `vlan` is set, with a recognisable payload.
fn frame(dst: [u8; 6], src: [u8; 6], vlan: Option<u16>, tag: u8) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend(src);
    if let Some(v) = vlan {
        f.extend([0x81, 0x00]);
        f.extend(v.to_be_bytes());
    }
    f.extend([0x08, 0x00]);
    f.extend([tag; 46]);
    f
}

struct Lab {
    e: Engine,
    hosts: Vec<mem::MemPort>,
    now: u64,
    want: SwitchCounters,
}

impl Lab {
    /// Members: m0 access VLAN 10, m1 access VLAN 10, m2 access VLAN 20, m3 trunk 10+20.
    /// S is pinned to m1 in VLAN 10. At most `limit` learned stations; entries age after 10 s.
    fn new(limit: u32) -> Lab {
        let mut ports: Vec<Box<dyn Port>> = Vec::new();
        let mut hosts = Vec::new();
        for i in 0..4 {
            let (a, b) = mem::pair(&format!("m{i}"), &format!("h{i}"), 64);
            ports.push(Box::new(a));
            hosts.push(b);
        }
        let access = |vlan| MemberMode::Access { vlan };
        let cfg = SwitchConfig {
            name: "sw0".into(),
            members: vec![
                MemberConfig { port: 0, mode: access(10) },
                MemberConfig { port: 1, mode: access(10) },
                MemberConfig { port: 2, mode: access(20) },
                MemberConfig {
                    port: 3,
                    mode: MemberMode::Trunk { vlans: vec![10, 20], native: None },
                },
            ],
            statics: vec![StaticMac { vlan: 10, mac: MacAddr(S), member: 1 }],
            mac_limit: limit,
            aging_ms: 10_000,
            snooping: false,
            groups: 0,
            group_timeout_ms: 0,
        };
        let e = Engine::build(ports, Vec::new(), vec![Switch::new(&cfg).unwrap()], 256).unwrap();
        Lab { e, hosts, now: MS, want: SwitchCounters::default() }
    }

    /// Host `h` sends `f` into its member port; the engine forwards it.
    fn send(&mut self, h: usize, f: Vec<u8>) {
        let mut b = Batch::new(1);
        b.push_copy(&f);
        assert_eq!(self.hosts[h].tx_burst(&mut b, &[0]), 1);
        self.now += MS;
        self.e.poll(self.now);
    }

    /// What each host received since the last call.
    fn received(&mut self) -> Vec<Vec<Vec<u8>>> {
        self.hosts
            .iter_mut()
            .map(|h| {
                let mut b = Batch::new(64);
                h.rx_burst(&mut b);
                b.packets().iter().map(|p| p.frame().to_vec()).collect()
            })
            .collect()
    }

    fn table(&self) -> Vec<(u16, [u8; 6], u16, bool)> {
        self.e.switches()[0].table().iter().map(|r| (r.vlan, r.mac.0, r.member, r.fixed)).collect()
    }

    #[track_caller]
    fn check(&mut self, step: &str, want_rx: Vec<Vec<Vec<u8>>>) {
        let got = self.received();
        let c = *self.e.switches()[0].counters();
        assert_eq!(c, self.want, "{step}: counters\ntable {:?}", self.table());
        assert_eq!(got, want_rx, "{step}: frames per port\ntable {:?}", self.table());
    }
}

impl Lab {
    /// A broadcast from A (m0, VLAN 10) reaches the other VLAN 10 members only: m1 untagged,
    /// the trunk tagged 10; m2 (VLAN 20) sees nothing. A is learned on m0.
    #[track_caller]
    fn broadcast_from_a(&mut self, step: &str) {
        self.send(0, frame(BCAST, A, None, 1));
        self.want.rx += 1;
        self.want.flooded += 1;
        self.want.flood_copies += 2;
        self.want.learned += 1;
        self.check(
            step,
            vec![
                none(),
                vec![frame(BCAST, A, None, 1)],
                none(),
                vec![frame(BCAST, A, Some(10), 1)],
            ],
        );
    }
}

fn none() -> Vec<Vec<u8>> {
    Vec::new()
}

#[test]
fn learning_aging_moves_flooding_and_vlan_separation() {
    let mut l = Lab::new(16);
    l.broadcast_from_a("broadcast");
    assert_eq!(l.table(), vec![(10, S, 1, true), (10, A, 0, false)]);

    // B answers A from m1: known unicast, one port, the very frame. B is learned.
    l.send(1, frame(A, B, None, 2));
    l.want.rx += 1;
    l.want.forwarded += 1;
    l.want.learned += 1;
    l.check("known unicast", vec![vec![frame(A, B, None, 2)], none(), none(), none()]);

    // To a station nobody has seen: a miss, flooded within VLAN 10.
    l.send(0, frame(C, A, None, 3));
    l.want.rx += 1;
    l.want.miss += 1;
    l.want.flooded += 1;
    l.want.flood_copies += 2;
    l.check(
        "unknown unicast",
        vec![none(), vec![frame(C, A, None, 3)], none(), vec![frame(C, A, Some(10), 3)]],
    );

    // A shows up behind the trunk: it moves, and B's next frame to A leaves tagged there.
    l.send(3, frame(B, A, Some(10), 4));
    l.want.rx += 1;
    l.want.forwarded += 1;
    l.want.moved += 1;
    l.check("move", vec![none(), vec![frame(B, A, None, 4)], none(), none()]);
    l.send(1, frame(A, B, None, 5));
    l.want.rx += 1;
    l.want.forwarded += 1;
    l.check("after move", vec![none(), none(), none(), vec![frame(A, B, Some(10), 5)]]);

    // VLAN separation: in VLAN 20, A is unknown; D's frame to A floods VLAN 20 only (the
    // trunk, tagged 20), and D is learned in VLAN 20.
    l.send(2, frame(A, D, None, 6));
    l.want.rx += 1;
    l.want.miss += 1;
    l.want.flooded += 1;
    l.want.flood_copies += 1;
    l.want.learned += 1;
    l.check("vlan separation", vec![none(), none(), none(), vec![frame(A, D, Some(20), 6)]]);

    // Ingress rules: a tag on an access port, no tag on a trunk without native VLAN, a VLAN
    // the trunk does not carry.
    l.send(0, frame(B, A, Some(10), 7));
    l.send(3, frame(B, A, None, 8));
    l.send(3, frame(B, A, Some(30), 9));
    l.want.rx += 3;
    l.want.drops[SwitchDrop::TaggedOnAccess as usize] += 1;
    l.want.drops[SwitchDrop::UntaggedOnTrunk as usize] += 1;
    l.want.drops[SwitchDrop::VlanNotAllowed as usize] += 1;
    l.check("ingress rules", vec![none(), none(), none(), none()]);

    // The static entry: a frame to S from m1 (where S is pinned) goes nowhere; S's MAC seen
    // on m0 does not move it.
    l.send(1, frame(S, B, None, 10));
    l.want.rx += 1;
    l.want.drops[SwitchDrop::SamePort as usize] += 1;
    l.check("same port", vec![none(), none(), none(), none()]);
    l.send(0, frame(B, S, None, 11));
    l.want.rx += 1;
    l.want.forwarded += 1;
    l.want.move_refused += 1;
    l.check("static does not move", vec![none(), vec![frame(B, S, None, 11)], none(), none()]);
    assert_eq!(
        l.table(),
        vec![(10, S, 1, true), (10, A, 3, false), (10, B, 1, false), (20, D, 2, false)],
        "table before aging"
    );

    // Ten seconds later every learned entry has aged out; the static one stays, and A is a
    // miss again.
    l.now += 11_000 * MS;
    l.e.poll(l.now);
    l.want.aged += 3;
    l.check("aging", vec![none(), none(), none(), none()]);
    assert_eq!(l.table(), vec![(10, S, 1, true)]);
    l.send(1, frame(A, B, None, 12));
    l.want.rx += 1;
    l.want.miss += 1;
    l.want.flooded += 1;
    l.want.flood_copies += 2;
    l.want.learned += 1;
    l.check(
        "after aging",
        vec![vec![frame(A, B, None, 12)], none(), none(), vec![frame(A, B, Some(10), 12)]],
    );
}

#[test]
fn learning_stops_at_the_limit_but_frames_still_flow() {
    let mut l = Lab::new(2);
    for (i, src) in [A, B, C].into_iter().enumerate() {
        l.send(0, frame(BCAST, src, None, i as u8));
    }
    l.want.rx += 3;
    l.want.flooded += 3;
    l.want.flood_copies += 6;
    l.want.learned += 2;
    l.want.learn_limited += 1;
    let copies =
        |vlan| (0..3u8).map(|i| frame(BCAST, [A, B, C][i as usize], vlan, i)).collect::<Vec<_>>();
    l.check("limit", vec![none(), copies(None), none(), copies(Some(10))]);
    assert_eq!(l.table().len(), 3, "two learned and the static one");
}

#[test]
fn a_burst_learns_before_it_forwards_and_a_full_ring_counts() {
    let mut l = Lab::new(16);
    // One burst of broadcasts from A: one learn, each frame copied to both other VLAN 10
    // members.
    let mut b = Batch::new(100);
    for i in 0..100u8 {
        b.push_copy(&frame(BCAST, A, None, i));
    }
    let sel: Vec<u16> = (0..100).collect();
    assert_eq!(l.hosts[0].tx_burst(&mut b, &sel), 64, "host ring of 64");
    l.now += MS;
    l.e.poll(l.now);
    // m1 and m3 rings hold 64 each: every copy fits.
    l.want.rx += 64;
    l.want.flooded += 64;
    l.want.flood_copies += 128;
    l.want.learned += 1;
    let got = l.received();
    assert_eq!((got[1].len(), got[3].len(), got[0].len(), got[2].len()), (64, 64, 0, 0));
    l.check("burst", vec![none(), none(), none(), none()]);
    // Now nobody drains m1 and the trunk: two bursts of 64 unknown-unicast frames. The first
    // fills both rings; every copy of the second is refused and counted.
    for _ in 0..2 {
        let mut b = Batch::new(64);
        for i in 0..64u8 {
            b.push_copy(&frame(B, A, None, i));
        }
        let sel: Vec<u16> = (0..64).collect();
        assert_eq!(l.hosts[0].tx_burst(&mut b, &sel), 64);
        l.now += MS;
        l.e.poll(l.now);
    }
    l.want.rx += 128;
    l.want.miss += 128;
    l.want.flooded += 128;
    l.want.flood_copies += 128;
    l.want.drops[SwitchDrop::TxFull as usize] += 128;
    assert_eq!(*l.e.switches()[0].counters(), l.want);
    let got = l.received();
    assert_eq!((got[1].len(), got[3].len(), got[0].len(), got[2].len()), (64, 64, 0, 0));
}

/// A port added to a running switch (what `apply` does when a port joins one): frames flood
/// to it, it learns and is learned, every other port keeps its number; closed again after it
/// left the switch, its number holds a closed port that moves nothing, and the port itself
/// (here its peer's ring) is handed back. A port in a switch, or carrying a VR, is not closed.
#[test]
fn a_port_added_to_a_running_switch_and_closed_again() {
    let mut l = Lab::new(16);
    let (a, b) = mem::pair("m4", "h4", 64);
    let p = l.e.cell_mut().add_port(Box::new(a)).unwrap();
    assert_eq!((p, l.e.port_count()), (4, 5));
    l.hosts.push(b);
    l.e.cell_mut().add_switch_member(0, p, MemberMode::Access { vlan: 10 }).unwrap();

    // A's broadcast in VLAN 10 floods to m1, m3 (tagged) and the new m4.
    l.send(0, frame(BCAST, A, None, 1));
    l.want.rx += 1;
    l.want.learned += 1;
    l.want.flooded += 1;
    l.want.flood_copies += 3;
    let tagged = frame(BCAST, A, Some(10), 1);
    let b1 = frame(BCAST, A, None, 1);
    l.check(
        "flood reaches the new member",
        vec![none(), vec![b1.clone()], none(), vec![tagged], vec![b1]],
    );
    // The new member's host answers A: one copy, to m0 alone; D is learned on member 4.
    l.send(4, frame(A, D, None, 2));
    l.want.rx += 1;
    l.want.learned += 1;
    l.want.forwarded += 1;
    l.check(
        "unicast from the new member",
        vec![vec![frame(A, D, None, 2)], none(), none(), none(), none()],
    );
    assert!(l.table().contains(&(10, D, 4, false)), "{:?}", l.table());

    let refused = l.e.cell_mut().close_port(p).map(|_| ()).unwrap_err();
    assert!(refused.0.contains("port 4: not a free port"), "{refused}");
    l.e.cell_mut().remove_switch_member(0, p).unwrap();
    let port = l.e.cell_mut().close_port(p).unwrap();
    assert_eq!(port.name(), "m4");
    drop(port);
    assert_eq!(l.e.cell().port_name(4), "m4 (closed)");
    assert!(matches!(l.e.cell().port_status(4), ports::PortStatus::Down(_)));
    assert_eq!(l.e.port_count(), 5, "the others keep their numbers");
    // A broadcast floods to the members that stay only.
    l.send(0, frame(BCAST, A, None, 3));
    l.want.rx += 1;
    l.want.flooded += 1;
    l.want.flood_copies += 2;
    let b3 = frame(BCAST, A, None, 3);
    l.check(
        "after the close",
        vec![none(), vec![b3], none(), vec![frame(BCAST, A, Some(10), 3)], none()],
    );
    assert!(l.e.cell_mut().close_port(0).is_err(), "a member port is not closed");
}

/// A VR moving away live: its station A on m0 is handed off. The destination's announcement
/// arrives by the trunk (the tunnel member) and moves A there; a frame for A that still
/// arrives by the trunk (sent before its host learned) goes back to m0 instead of being
/// dropped, while a local member's frame goes to the trunk. Ended, or m0 gone, the same
/// frame is a `same_port` drop again.
#[test]
fn a_station_handed_off_gets_what_still_arrives_by_its_new_member() {
    let mut l = Lab::new(16);
    l.broadcast_from_a("A on m0");
    let cell = l.e.cell_mut();
    cell.hand_off_station(0, MacAddr(A)).unwrap();
    // C, never seen, is learned on m0 by the hand-off; a multicast MAC or a port in no switch
    // is refused.
    cell.hand_off_station(0, MacAddr(C)).unwrap();
    assert!(cell.hand_off_station(0, MacAddr(BCAST)).is_err());
    assert!(cell.hand_off_station(9, MacAddr(A)).is_err());
    let away: Vec<_> =
        l.e.switches()[0].table().iter().map(|r| (r.mac.0, r.member, r.away)).collect();
    assert_eq!(away, vec![(S, 1, None), (A, 0, Some(0)), (C, 0, Some(0))]);

    // The announcement from the trunk moves A there and floods to m0 and m1.
    l.send(3, frame(BCAST, A, Some(10), 2));
    l.want.rx += 1;
    l.want.moved += 1;
    l.want.flooded += 1;
    l.want.flood_copies += 2;
    l.check(
        "announcement",
        vec![vec![frame(BCAST, A, None, 2)], vec![frame(BCAST, A, None, 2)], none(), none()],
    );

    // D's frame to A, by the trunk: handed back to m0 (not `same_port`).
    l.send(3, frame(A, D, Some(10), 3));
    l.want.rx += 1;
    l.want.learned += 1;
    l.want.forwarded += 1;
    l.want.handed_back += 1;
    l.check("handed back", vec![vec![frame(A, D, None, 3)], none(), none(), none()]);

    // B's frame to A, from m1: to A's new place.
    l.send(1, frame(A, B, None, 4));
    l.want.rx += 1;
    l.want.learned += 1;
    l.want.forwarded += 1;
    l.check("local to the new place", vec![none(), none(), none(), vec![frame(A, B, Some(10), 4)]]);

    // Ended (a failed move): the trunk's frame to A is dropped as before.
    assert_eq!(l.e.cell_mut().end_hand_off(0).unwrap(), 2);
    l.send(3, frame(A, D, Some(10), 5));
    l.want.rx += 1;
    l.want.drops[SwitchDrop::SamePort as usize] += 1;
    l.check("ended", vec![none(), none(), none(), none()]);

    // Handed off again, then m0 leaves the switch (the VR removed): the hand-off goes with it.
    l.e.cell_mut().hand_off_station(0, MacAddr(A)).unwrap();
    l.send(3, frame(A, D, Some(10), 6));
    l.want.rx += 1;
    l.want.forwarded += 1;
    l.want.handed_back += 1;
    l.check("again", vec![vec![frame(A, D, None, 6)], none(), none(), none()]);
    l.e.cell_mut().remove_switch_member(0, 0).unwrap();
    assert!(l.e.switches()[0].table().iter().all(|r| r.away.is_none()), "{:?}", l.table());
    l.send(3, frame(A, D, Some(10), 7));
    l.want.rx += 1;
    l.want.drops[SwitchDrop::SamePort as usize] += 1;
    l.check("member gone", vec![none(), none(), none(), none()]);
}
