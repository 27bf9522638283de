//! A switch with 1024 member ports (issue 17, item 5): learning every station, known unicast
//! to each, flooding to all others, a snooped group at scale, and drops counted against the
//! member they concern. Counters are asserted whole after each step, and every port's
//! frames are checked.

use dataplane::{
    Engine, MemberConfig, MemberMode, Switch, SwitchConfig, SwitchCounters, SwitchDrop,
};
use ports::{mem, Batch, Port};
use wire::{igmp, ipv4};

const N: usize = 1024;
const MS: u64 = 1_000_000;
const SLOTS: usize = 4;

fn mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, (i >> 8) as u8, i as u8]
}

fn frame(dst: [u8; 6], src: [u8; 6], tag: u8) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend(src);
    f.extend([0x88, 0xb5]);
    f.extend([tag; 46]);
    f
}

struct Lab {
    e: Engine,
    hosts: Vec<mem::MemPort>,
    now: u64,
    want: SwitchCounters,
    b: Batch,
}

impl Lab {
    fn new() -> Lab {
        let mut ports: Vec<Box<dyn Port>> = Vec::new();
        let mut hosts = Vec::new();
        for i in 0..N {
            let (a, b) = mem::pair(&format!("m{i}"), &format!("h{i}"), SLOTS);
            ports.push(Box::new(a));
            hosts.push(b);
        }
        let cfg = SwitchConfig {
            name: "big".into(),
            members: (0..N as u16)
                .map(|port| MemberConfig { port, mode: MemberMode::Access { vlan: 1 } })
                .collect(),
            statics: Vec::new(),
            mac_limit: 4096,
            aging_ms: 300_000,
            snooping: true,
            groups: 16,
            group_timeout_ms: 260_000,
        };
        let e = Engine::build(ports, Vec::new(), vec![Switch::new(&cfg).unwrap()], 256).unwrap();
        Lab { e, hosts, now: MS, want: SwitchCounters::default(), b: Batch::new(SLOTS) }
    }

    fn send(&mut self, h: usize, f: &[u8]) {
        let mut b = Batch::new(1);
        b.push_copy(f);
        assert_eq!(self.hosts[h].tx_burst(&mut b, &[0]), 1);
        self.want.rx += 1;
        self.now += MS;
        self.e.poll(self.now);
    }

    /// The frames host `h` received since the last call.
    fn recv(&mut self, h: usize) -> Vec<Vec<u8>> {
        self.b.clear();
        self.hosts[h].rx_burst(&mut self.b);
        self.b.packets().iter().map(|p| p.frame().to_vec()).collect()
    }

    /// Every host but those in `skip` received exactly `f` once (`f` = None: nothing).
    #[track_caller]
    fn all_got(&mut self, step: &str, f: &[u8], except: &[usize]) {
        for h in 0..N {
            let got = self.recv(h);
            let want = if except.contains(&h) { vec![] } else { vec![f.to_vec()] };
            assert_eq!(got, want, "{step}: host {h}");
        }
    }

    #[track_caller]
    fn check(&self, step: &str) {
        assert_eq!(*self.e.switches()[0].counters(), self.want, "{step}: counters");
    }
}

#[test]
fn a_switch_with_1024_members_learns_forwards_floods_and_snoops() {
    let mut l = Lab::new();
    // Host 0 broadcasts: every other member gets one copy.
    let bc = frame([0xff; 6], mac(0), 1);
    l.send(0, &bc);
    l.want.learned += 1;
    l.want.flooded += 1;
    l.want.flood_copies += (N - 1) as u64;
    l.all_got("broadcast", &bc, &[0]);
    l.check("broadcast");

    // Every other host answers host 0: learned, and known unicast to port 0 alone.
    for h in 1..N {
        let f = frame(mac(0), mac(h), 2);
        l.send(h, &f);
        assert_eq!(l.recv(0), vec![f], "reply from {h}");
    }
    l.want.learned += (N - 1) as u64;
    l.want.forwarded += (N - 1) as u64;
    l.check("learned every station");
    let table = l.e.switches()[0].table();
    assert_eq!(table.len(), N);
    assert!(table.iter().all(|r| r.mac.0 == mac(r.member as usize) && !r.fixed));

    // Known unicast from host 0 to each: only that host receives it.
    for h in 1..N {
        let f = frame(mac(h), mac(0), 3);
        l.send(0, &f);
        assert_eq!(l.recv(h), vec![f], "unicast to {h}");
    }
    l.want.forwarded += (N - 1) as u64;
    for h in 0..N {
        assert!(l.recv(h).is_empty(), "host {h} got a stray frame");
    }
    l.check("unicast to each");

    // Unknown unicast from the last host floods to the 1023 others.
    let unknown = frame([2, 0, 0, 0, 0x77, 0x77], mac(N - 1), 4);
    l.send(N - 1, &unknown);
    l.want.miss += 1;
    l.want.flooded += 1;
    l.want.flood_copies += (N - 1) as u64;
    l.all_got("unknown unicast", &unknown, &[N - 1]);
    l.check("unknown unicast");

    // Host 1000 joins 239.9.9.9 (IGMPv2; the report floods, no router known); traffic to the
    // group from host 3 reaches host 1000 alone.
    let g = [239, 9, 9, 9];
    let gmac = [0x01, 0x00, 0x5e, 9, 9, 9];
    let ip = |src: u8, proto: u8, payload: &[u8]| {
        let mut p = vec![0x45, 0];
        p.extend(((20 + payload.len()) as u16).to_be_bytes());
        p.extend([0, 0, 0, 0, 1, proto, 0, 0, 10, 0, 0, src]);
        p.extend(g);
        p.extend(payload);
        ipv4::Packet::new_unchecked(&mut p[..]).fill_checksum();
        p
    };
    let mut report = vec![igmp::V2_REPORT, 0, 0, 0];
    report.extend(g);
    igmp::Packet::new_unchecked(&mut report[..]).fill_checksum();
    let eth = |src: usize, p: Vec<u8>| {
        let mut f = gmac.to_vec();
        f.extend(mac(src));
        f.extend([0x08, 0x00]);
        f.extend(p);
        f.resize(f.len().max(60), 0);
        f
    };
    let join = eth(1000, ip(100, 2, &report));
    l.send(1000, &join);
    l.want.joins += 1;
    l.want.flooded += 1;
    l.want.flood_copies += (N - 1) as u64;
    l.all_got("join", &join, &[1000]);
    let data = eth(3, ip(4, 17, &[5; 12]));
    l.send(3, &data);
    l.want.snooped += 1;
    l.want.snooped_copies += 1;
    l.check("snooped");
    for h in 0..N {
        let want = if h == 1000 { vec![data.clone()] } else { vec![] };
        assert_eq!(l.recv(h), want, "group traffic at host {h}");
    }

    // Host 7 stops reading: once its ring is full, frames for it are dropped, and the drops
    // are counted against member 7 alone.
    for k in 0..SLOTS + 3 {
        l.send(0, &frame(mac(7), mac(0), 10 + k as u8));
    }
    l.want.forwarded += SLOTS as u64;
    l.want.drops[SwitchDrop::TxFull as usize] += 3;
    l.check("full ring");
    let drops = l.e.switches()[0].member_drops();
    assert_eq!(drops.len(), N);
    for (m, d) in drops.iter().enumerate() {
        let want = if m == 7 { 3 } else { 0 };
        assert_eq!(d[SwitchDrop::TxFull as usize], want, "member {m}");
        assert_eq!(d.iter().sum::<u64>(), want, "member {m}");
    }
}
