//! A multistage software router run by a node: back-ends (the replicas of one VR) on both
//! workers, a load balancer on each port's outside end (`control::msr::Msr`), one route table
//! for all. A back-end switched off drains: the flows pinned to it keep reaching it, in order
//! and whole, until they are idle; then it is off and new flows go to the other.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::time::{Duration, Instant};

use control::msr::Msr;
use control::runtime::Options;
use control::{Node, Topology};
use dataplane::msr::{BackendState, Change};
use etherparse::PacketBuilder;
use ports::{Batch, Port};

const TOPO: &str = "\
workers: 2
ports:
  - { name: in, kind: mem, ring: 1024 }
  - { name: out, kind: mem, ring: 1024 }
vrs:
  - name: r1
    replicas: 2
    interfaces:
      - { name: a, port: in, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 198.51.100.0/24, via: 10.0.1.2 }]
    neighbors:
      - { address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: b }
msrs:
  - vr: r1
    active: 2
    idle_ms: 2000
    fail_ms: 10000
    policy: { on_above_pps: 1000000000, off_below_pps: 1, hold_ms: 3600000, min_active: 1 }
";

const IN_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0];
/// Frames in flight at most: fewer than a queue's ring holds, so none is lost to a full ring.
const WINDOW: u64 = 600;

fn frame(f: u16, seq: u32) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x10], IN_MAC)
        .ipv4([10, 0, 0, 10 + (f % 200) as u8], [198, 51, 100, 1], 64)
        .udp(1000 + f, 53);
    let mut payload = f.to_be_bytes().to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    let mut out = Vec::new();
    b.write(&mut out, &payload).unwrap();
    out
}

fn seq_of(f: &[u8]) -> (u16, u32) {
    let d = &f[14 + 20 + 8..];
    (u16::from_be_bytes([d[0], d[1]]), u32::from_be_bytes([d[2], d[3], d[4], d[5]]))
}

struct Traffic {
    t0: Instant,
    next_send: Vec<u32>,
    next_recv: Vec<u32>,
    sent: u64,
    got: u64,
    changes: Vec<Change>,
}

impl Traffic {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Sends `per_flow` frames of each flow in `flows`, interleaved, through the balancer on
    /// `in`, at most `WINDOW` in flight, and reads everything back from the one on `out`,
    /// checking each flow's order.
    fn run(&mut self, msr: &mut Msr, flows: std::ops::Range<u16>, per_flow: u32) {
        let total = self.sent + u64::from(flows.end - flows.start) * u64::from(per_flow);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut k = 0u64;
        let mut rx = Batch::new(ports::MAX_BURST);
        while self.got < total {
            assert!(Instant::now() < deadline, "stuck: got {} of {total}\n{}", self.got, dump(msr));
            let now = self.now();
            msr.tick(now, &mut self.changes);
            if self.sent < total && self.sent - self.got < WINDOW {
                let f = flows.start + (k % u64::from(flows.end - flows.start)) as u16;
                k += 1;
                let s = self.next_send[usize::from(f)];
                self.next_send[usize::from(f)] += 1;
                let mut b = Batch::new(1);
                b.push_copy(&frame(f, s));
                assert_eq!(msr.balancer("in").unwrap().tx_burst(&mut b, &[0]), 1);
                self.sent += 1;
            }
            self.sink(msr, &mut rx);
        }
    }

    fn sink(&mut self, msr: &mut Msr, rx: &mut Batch) {
        rx.clear();
        let n = msr.balancer("out").unwrap().rx_burst(rx);
        for p in rx.packets().iter().take(n) {
            let (f, s) = seq_of(p.frame());
            assert_eq!(
                s,
                self.next_recv[usize::from(f)],
                "flow {f} reordered or lost\n{}",
                dump(msr)
            );
            self.next_recv[usize::from(f)] = s + 1;
            self.got += 1;
        }
    }
}

fn dump(msr: &Msr) -> String {
    let lbs: Vec<String> = msr.balancers.iter().map(|b| b.dump()).collect();
    format!("{}{}", msr.shared.dump(), lbs.join("\n"))
}

/// Packets replica `r` of r1 forwarded, from the node's status.
fn forwarded(node: &mut Node, r: usize) -> u64 {
    let st = node.status().unwrap();
    st.json()["replicated"][0]["instances"][r]["forwarded"].as_u64().unwrap()
}

#[test]
fn a_back_end_switched_off_drains_its_flows_whole_and_in_order_then_takes_no_new_one() {
    let topo = Topology::parse(TOPO, "msr.yaml", Path::new(".")).unwrap();
    let o = Options::new(2);
    let mut node = Node::start(topo, o, 64).unwrap();
    let st = node.status().unwrap();
    assert_eq!(st.json()["msrs"][0]["name"], "r1");
    assert_eq!(st.json()["msrs"][0]["front_end"], false, "{st:#}");
    assert_eq!(st.json()["msrs"][0]["states"]["active"], 2, "{st:#}");
    let mut msr = Msr::take(&mut node, "r1").unwrap();
    assert_eq!(msr.balancers.len(), 2);
    assert!(Msr::take(&mut node, "r1").is_err(), "the queues are handed out once");
    let mut tr = Traffic {
        t0: Instant::now(),
        next_send: vec![0; 400],
        next_recv: vec![0; 400],
        sent: 0,
        got: 0,
        changes: Vec::new(),
    };
    tr.run(&mut msr, 0..100, 20);
    let on_1 = forwarded(&mut node, 1);
    assert!(on_1 > 0 && forwarded(&mut node, 0) > 0, "both back-ends took flows\n{}", dump(&msr));
    assert!(msr.shared.pinned(1) > 0, "{:?}\n{}", tr.changes, dump(&msr));

    // Switched off: its flows go on reaching it.
    msr.shared.switch_off(1);
    tr.run(&mut msr, 0..100, 20);
    assert!(forwarded(&mut node, 1) > on_1, "back-end 1 dropped its flows\n{}", dump(&msr));
    assert_eq!(msr.shared.state(1), BackendState::Draining);
    let st = node.status().unwrap();
    let m = &st.json()["msrs"][0];
    assert_eq!(m["front_end"], true);
    assert_eq!(
        (m["states"]["active"].as_u64(), m["states"]["draining"].as_u64()),
        (Some(1), Some(1))
    );
    let b1 = &m["backends"][1];
    assert_eq!(
        (b1["state"].as_str(), b1["replica"].as_str(), b1["worker"].as_u64()),
        (Some("draining"), Some("r1#1"), Some(1))
    );
    assert_eq!(b1["pinned"].as_u64(), Some(u64::from(msr.shared.pinned(1))), "{m:#}");
    assert_eq!(b1["forwarded"].as_u64(), Some(forwarded(&mut node, 1)), "{m:#}");
    assert_eq!(m["offered"].as_u64(), Some(msr.shared.offered()), "{m:#}");

    // Once they are idle it is off.
    let t = Instant::now();
    while msr.shared.state(1) != BackendState::Off {
        assert!(t.elapsed() < Duration::from_secs(20), "drain never ended\n{}", dump(&msr));
        let now = tr.now();
        msr.tick(now, &mut tr.changes);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(tr.changes.contains(&Change::Off(1)), "{:?}", tr.changes);
    // New flows all go to back-end 0.
    let served = forwarded(&mut node, 1);
    tr.run(&mut msr, 200..300, 10);
    assert_eq!(forwarded(&mut node, 1), served, "a new flow reached an off back-end");
    assert_eq!(tr.got, tr.sent);
    assert_eq!(forwarded(&mut node, 0) + forwarded(&mut node, 1), tr.sent);
    let k = msr.balancer("in").unwrap().counters();
    assert_eq!((k.refused, k.no_backend, k.unpinned), (0, 0, 0), "{}", dump(&msr));
    let st = node.status().unwrap();
    assert_eq!(st.json()["msrs"][0]["backends"][1]["state"], "off", "{st:#}");
    assert_eq!(st.json()["msrs"][0]["states"]["off"], 1, "{st:#}");
    node.stop().unwrap();
}
