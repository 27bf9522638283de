//! IGMP and MLD snooping, step by step: joins (IGMPv2, IGMPv3, MLDv1, MLDv2), leaves, queries
//! (router ports), membership timeouts, a full group table, malformed messages, and the
//! multicast that always floods (unregistered groups, 224.0.0.0/24, ff02::/16). After every
//! step the whole counter struct, the group table and every frame every port received are
//! asserted.

use crate::snoop_frames;

use std::net::IpAddr;

use snoop_frames::*;

use dataplane::{
    Engine, GroupRow, MemberConfig, MemberMode, Switch, SwitchConfig, SwitchCounters, SwitchDrop,
};
use ports::{mem, Batch, Port};
use wire::igmp;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const N: usize = 5;

struct Lab {
    e: Engine,
    hosts: Vec<mem::MemPort>,
    now: u64,
    want: SwitchCounters,
}

impl Lab {
    /// Five access members of VLAN 10; at most 2 groups; memberships last 10 s.
    fn new() -> Lab {
        Lab::with_members(N)
    }

    /// As [`Lab::new`], ports from `members` on not (yet) members.
    fn with_members(members: usize) -> Lab {
        let mut ports: Vec<Box<dyn Port>> = Vec::new();
        let mut hosts = Vec::new();
        for i in 0..N {
            let (a, b) = mem::pair(&format!("m{i}"), &format!("h{i}"), 64);
            ports.push(Box::new(a));
            hosts.push(b);
        }
        let cfg = SwitchConfig {
            name: "sw".into(),
            members: (0..members as u16)
                .map(|port| MemberConfig { port, mode: MemberMode::Access { vlan: 10 } })
                .collect(),
            statics: Vec::new(),
            mac_limit: 64,
            aging_ms: 1_000_000,
            snooping: true,
            groups: 2,
            group_timeout_ms: 10_000,
        };
        let e = Engine::build(ports, Vec::new(), vec![Switch::new(&cfg).unwrap()], 256).unwrap();
        Lab { e, hosts, now: S, want: SwitchCounters::default() }
    }

    /// Host `h` sends `f`; the engine forwards it. A host's first frame teaches the switch its
    /// MAC.
    fn send(&mut self, h: usize, f: &[u8]) {
        if !self.sw().table().iter().any(|r| r.mac.0 == host(h)) {
            self.want.learned += 1;
        }
        let mut b = Batch::new(1);
        b.push_copy(f);
        assert_eq!(self.hosts[h].tx_burst(&mut b, &[0]), 1);
        self.want.rx += 1;
        self.now += MS;
        self.e.poll(self.now);
    }

    fn sw(&self) -> &Switch {
        &self.e.switches()[0]
    }

    /// Which hosts received exactly `f` since the last call (and nothing else).
    #[track_caller]
    fn got(&mut self, step: &str, f: &[u8]) -> Vec<usize> {
        let mut who = Vec::new();
        for (i, h) in self.hosts.iter_mut().enumerate() {
            let mut b = Batch::new(64);
            h.rx_burst(&mut b);
            let frames: Vec<Vec<u8>> = b.packets().iter().map(|p| p.frame().to_vec()).collect();
            match frames.len() {
                0 => {}
                1 if frames[0] == f => who.push(i),
                _ => panic!("{step}: host {i} received {} frames, not just the one", frames.len()),
            }
        }
        who
    }

    fn groups(&self) -> Vec<(IpAddr, Vec<u16>)> {
        self.sw()
            .groups()
            .into_iter()
            .map(|GroupRow { vlan, group, members }| {
                assert_eq!(vlan, 10);
                (group, members)
            })
            .collect()
    }

    /// `h` sends `f`; it reaches exactly `to`; the counters are as wanted.
    #[track_caller]
    fn step(&mut self, step: &str, h: usize, f: &[u8], to: &[usize]) {
        self.send(h, f);
        let got = self.got(step, f);
        assert_eq!(got, to, "{step}: receivers\ngroups {:?}", self.groups());
        assert_eq!(*self.sw().counters(), self.want, "{step}: counters");
    }

    fn flooded(&mut self, copies: u64) {
        self.want.flooded += 1;
        self.want.flood_copies += copies;
    }

    fn snooped(&mut self, copies: u64) {
        self.want.snooped += 1;
        self.want.snooped_copies += copies;
    }

    /// Runs the engine at `now` with no traffic, so that aging runs.
    fn idle_until(&mut self, now: u64) {
        self.now = now;
        self.e.poll(now);
    }
}

#[test]
fn joins_leaves_queries_timeouts_and_what_always_floods() {
    let mut l = Lab::new();
    let g = v4("239.1.1.1");
    let gi = IpAddr::V4(g);

    // No one joined: an unregistered group floods.
    l.flooded(4);
    l.step("unregistered", 0, &data4(0, g, 1), &[1, 2, 3, 4]);

    // Host 1 joins with an IGMPv2 report (sent to the group itself). With no router port known
    // the report floods.
    l.want.joins += 1;
    l.flooded(4);
    l.step("v2 join", 1, &igmp_frame(1, g, &igmp_msg(igmp::V2_REPORT, g)), &[0, 2, 3, 4]);
    assert_eq!(l.groups(), vec![(gi, vec![1])]);
    l.snooped(1);
    l.step("to the one member", 0, &data4(0, g, 2), &[1]);

    // Host 2 joins with an IGMPv3 report (CHANGE_TO_EXCLUDE {}, to 224.0.0.22).
    l.want.joins += 1;
    l.flooded(4);
    let v3 = igmp_v3(&[(igmp::record::CHANGE_TO_EXCLUDE, g)]);
    l.step("v3 join", 2, &igmp_frame(2, v4("224.0.0.22"), &v3), &[0, 1, 3, 4]);
    assert_eq!(l.groups(), vec![(gi, vec![1, 2])]);
    l.snooped(2);
    l.step("to both members", 0, &data4(0, g, 3), &[1, 2]);
    // A member's own traffic does not come back to it.
    l.snooped(1);
    l.step("from a member", 1, &data4(1, g, 4), &[2]);

    // Host 4 queries: it becomes a router port, gets the group's traffic, and from now on
    // reports and leaves go to it only. The query itself reaches everyone.
    l.want.queries += 1;
    l.flooded(4);
    l.step(
        "query",
        4,
        &igmp_frame(4, v4("224.0.0.1"), &igmp_msg(igmp::MEMBERSHIP_QUERY, v4("0.0.0.0"))),
        &[0, 1, 2, 3],
    );
    assert_eq!(l.sw().router_members(l.now), vec![4]);
    l.snooped(3);
    l.step("members and the router", 0, &data4(0, g, 5), &[1, 2, 4]);
    l.snooped(1);
    l.step("report to the router", 1, &igmp_frame(1, g, &igmp_msg(igmp::V2_REPORT, g)), &[4]);

    // Host 1 leaves (IGMPv2 leave to 224.0.0.2): at once.
    l.want.leaves += 1;
    l.snooped(1);
    let leave = igmp_frame(1, v4("224.0.0.2"), &igmp_msg(igmp::LEAVE_GROUP, g));
    l.step("leave", 1, &leave, &[4]);
    assert_eq!(l.groups(), vec![(gi, vec![2])]);
    l.snooped(2);
    l.step("after the leave", 0, &data4(0, g, 6), &[2, 4]);

    // Link-local groups always flood, joined or not (mDNS, 224.0.0.251).
    l.want.joins += 0; // a report for a link-local group registers nothing
    l.snooped(1);
    let mdns = v4("224.0.0.251");
    l.step("link-local report", 3, &igmp_frame(3, mdns, &igmp_msg(igmp::V2_REPORT, mdns)), &[4]);
    assert_eq!(l.groups(), vec![(gi, vec![2])]);
    l.flooded(4);
    l.step("link-local data", 0, &data4(0, mdns, 7), &[1, 2, 3, 4]);

    // Timeouts: host 1 re-joins at 5 s; at 12 s host 2's membership (from 1 s) and the router
    // port (from 1 s) have run out, host 1's has not.
    l.now = 5 * S;
    l.want.joins += 1;
    l.snooped(1);
    l.step("re-join", 1, &igmp_frame(1, g, &igmp_msg(igmp::V2_REPORT, g)), &[4]);
    l.idle_until(12 * S);
    l.want.expired += 2;
    assert_eq!(l.groups(), vec![(gi, vec![1])]);
    assert_eq!(l.sw().router_members(l.now), Vec::<u16>::new());
    l.snooped(1);
    l.step("after the timeouts", 0, &data4(0, g, 8), &[1]);
    // At 16 s host 1's has too: the group is unregistered again and floods.
    l.idle_until(16 * S);
    l.want.expired += 1;
    assert_eq!(l.groups(), vec![]);
    l.flooded(4);
    l.step("all timed out", 0, &data4(0, g, 9), &[1, 2, 3, 4]);

    // MLD: host 3 joins ff0e::1234 with an MLDv2 report (Hop-by-Hop Router Alert first), host
    // 2 with an MLDv1 report. ff02::1 traffic floods; an MLDv1 done and an INCLUDE {} record
    // leave.
    let g6 = v6("ff0e::1234");
    let g6i = IpAddr::V6(g6);
    let report2 = mld_v2(&[(igmp::record::CHANGE_TO_EXCLUDE, g6)]);
    l.want.joins += 1;
    l.flooded(4);
    l.step("MLDv2 join", 3, &ip6_frame(3, v6("ff02::16"), 58, true, &report2), &[0, 1, 2, 4]);
    l.want.joins += 1;
    l.flooded(4);
    l.step("MLDv1 join", 2, &ip6_frame(2, g6, 58, true, &mld_v1(131, g6)), &[0, 1, 3, 4]);
    assert_eq!(l.groups(), vec![(g6i, vec![2, 3])]);
    let udp6 = |tag| ip6_frame(0, g6, 17, false, &[tag; 16]);
    l.snooped(2);
    l.step("IPv6 to its members", 0, &udp6(10), &[2, 3]);
    let all = ip6_frame(0, v6("ff02::1"), 17, false, &[11; 16]);
    l.flooded(4);
    l.step("ff02::1 floods", 0, &all, &[1, 2, 3, 4]);
    l.want.leaves += 1;
    l.flooded(4);
    l.step(
        "MLDv1 done",
        2,
        &ip6_frame(2, v6("ff02::2"), 58, true, &mld_v1(132, g6)),
        &[0, 1, 3, 4],
    );
    l.snooped(1);
    l.step("after the done", 0, &udp6(12), &[3]);
    let to_in = mld_v2(&[(igmp::record::CHANGE_TO_INCLUDE, g6)]);
    l.want.leaves += 1;
    l.flooded(4);
    l.step("TO_IN {}", 3, &ip6_frame(3, v6("ff02::16"), 58, true, &to_in), &[0, 1, 2, 4]);
    assert_eq!(l.groups(), vec![]);

    // Two groups at most: a third is not registered and keeps flooding.
    let (a, b, c) = (v4("239.0.0.10"), v4("239.0.0.11"), v4("239.0.0.12"));
    let three = igmp_v3(&[
        (igmp::record::MODE_IS_EXCLUDE, a),
        (igmp::record::MODE_IS_EXCLUDE, b),
        (igmp::record::MODE_IS_EXCLUDE, c),
    ]);
    l.want.joins += 2;
    l.want.groups_full += 1;
    l.flooded(4);
    l.step("three joins", 1, &igmp_frame(1, v4("224.0.0.22"), &three), &[0, 2, 3, 4]);
    assert_eq!(l.groups(), vec![(IpAddr::V4(a), vec![1]), (IpAddr::V4(b), vec![1])]);
    l.snooped(1);
    l.step("a registered group", 0, &data4(0, b, 13), &[1]);
    l.flooded(4);
    l.step("the group that did not fit", 0, &data4(0, c, 14), &[1, 2, 3, 4]);

    // Malformed messages are dropped, and counted against the member they came from: a bad
    // IGMP checksum, an MLDv2 record running past the end, a bad MLD checksum.
    let mut bad = igmp_msg(igmp::V2_REPORT, a);
    bad[2] ^= 1;
    let mut cut = mld_v2(&[(igmp::record::MODE_IS_EXCLUDE, g6)]);
    cut[7] = 2;
    let mut bad6 = ip6_frame(3, g6, 58, true, &mld_v1(131, g6));
    let n = bad6.len();
    bad6[n - 1] ^= 0x55;
    for (what, h, f) in [
        ("bad IGMP checksum", 2, igmp_frame(2, a, &bad)),
        ("MLDv2 record cut short", 3, ip6_frame(3, v6("ff02::16"), 58, true, &cut)),
        ("bad MLD checksum", 3, bad6),
    ] {
        l.want.drops[SwitchDrop::GroupMessageMalformed as usize] += 1;
        l.step(what, h, &f, &[]);
    }
    let per_member: Vec<u64> = l
        .sw()
        .member_drops()
        .iter()
        .map(|d| d[SwitchDrop::GroupMessageMalformed as usize])
        .collect();
    assert_eq!(per_member, vec![0, 0, 1, 2, 0]);
    assert_eq!(l.groups(), vec![(IpAddr::V4(a), vec![1]), (IpAddr::V4(b), vec![1])]);
}

/// A member added to a running snooping switch (what `apply` does when a VR joins a running
/// switch): the group joined before keeps its member and still goes to it alone, the new
/// member is flooded to, and its own join registers beside the old one; taken out, it loses
/// its membership and learned MAC and receives nothing; its port may join again. A port that
/// is taken or does not exist is refused.
#[test]
fn a_member_added_live_keeps_the_snooped_groups() {
    let mut l = Lab::with_members(N - 1);
    let g = v4("239.1.1.1");
    let gi = IpAddr::V4(g);
    l.flooded(3);
    l.step("unregistered, before", 0, &data4(0, g, 1), &[1, 2, 3]);
    l.want.joins += 1;
    l.flooded(3);
    l.step("join, before", 1, &igmp_frame(1, g, &igmp_msg(igmp::V2_REPORT, g)), &[0, 2, 3]);

    let access = MemberMode::Access { vlan: 10 };
    l.e.cell_mut().add_switch_member(0, 4, access.clone()).unwrap();
    assert_eq!(l.groups(), vec![(gi, vec![1])]);
    l.snooped(1);
    l.step("to the member of before", 0, &data4(0, g, 2), &[1]);
    l.flooded(4);
    l.step("unregistered, after", 0, &data4(0, v4("239.2.2.2"), 3), &[1, 2, 3, 4]);
    l.want.joins += 1;
    l.flooded(4);
    l.step(
        "the new member joins",
        4,
        &igmp_frame(4, g, &igmp_msg(igmp::V2_REPORT, g)),
        &[0, 1, 2, 3],
    );
    assert_eq!(l.groups(), vec![(gi, vec![1, 4])]);
    l.snooped(2);
    l.step("to both", 0, &data4(0, g, 4), &[1, 4]);

    let taken = l.e.cell_mut().add_switch_member(0, 4, access.clone()).unwrap_err();
    assert!(taken.0.contains("port 4 is not a free port"), "{taken}");

    // Taken out again: its group membership and learned MAC go, nothing reaches it.
    let learned = l.sw().table().len();
    l.e.cell_mut().remove_switch_member(0, 4).unwrap();
    assert_eq!(l.sw().table().len(), learned - 1);
    assert_eq!(l.groups(), vec![(gi, vec![1])]);
    l.snooped(1);
    l.step("to the member that stays", 0, &data4(0, g, 5), &[1]);
    l.flooded(3);
    l.step("unregistered, without it", 0, &data4(0, v4("239.2.2.2"), 6), &[1, 2, 3]);
    assert!(l.e.cell_mut().remove_switch_member(0, 4).is_err());
    // Its port is free again, and may join again.
    l.e.cell_mut().add_switch_member(0, 4, access.clone()).unwrap();
    l.flooded(4);
    l.step("unregistered, back", 0, &data4(0, v4("239.2.2.2"), 7), &[1, 2, 3, 4]);
    let taken = l.e.cell_mut().add_switch_member(0, 4, access.clone()).unwrap_err();
    assert!(taken.0.contains("port 4 is not a free port"), "{taken}");
    assert!(l.e.cell_mut().add_switch_member(0, 9, access.clone()).is_err());
    assert!(l.e.cell_mut().add_switch_member(1, 4, access).is_err());
    assert_eq!(*l.sw().counters(), l.want);
}
