//! A replicated VR (`replicas: 2`) run by a node: its replicas on both workers, flows spread
//! by the peer's RSS and never reordered, status showing each replica and the logical VR
//! (their sum), a route added through the node reaching every replica, and what the topology
//! refuses about replicas.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::time::Instant;

use control::runtime::Options;
use control::{Node, Topology};
use dataplane::config::{RouteConfig, RouteTarget};
use dataplane::replica::RssPort;
use dataplane::{RouteOp, RouteSource};
use etherparse::PacketBuilder;
use ports::{Batch, Port};

const TOPO: &str = "\
workers: 2
ports:
  - { name: in, kind: mem, ring: 1024 }
  - { name: out, kind: mem, ring: 1024 }
vrs:
  - name: pvr
    replicas: 2
    interfaces:
      - { name: a, port: in, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 198.51.100.0/24, via: 10.0.1.2 }]
    neighbors:
      - { address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: b }
      - { address: 10.0.1.3, mac: 02:00:00:00:0b:03, interface: b }
";

const IN_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0];
const GW3: [u8; 6] = [2, 0, 0, 0, 0x0b, 3];
/// Frames in flight at most: fewer than a queue's ring holds, so nothing is lost to a full
/// ring however the threads are scheduled.
const WINDOW: u64 = 600;

/// Flow `f`'s frame number `seq`, to `dst`.
fn frame(f: u16, seq: u32, dst: [u8; 4]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x10], IN_MAC)
        .ipv4([10, 0, 0, 10 + (f % 200) as u8], dst, 64)
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

fn rss(node: &mut Node, port: &str) -> RssPort {
    let q = node.take_outside_queues(port).expect("a replicated VR's port has queues");
    RssPort::new(port, q.into_iter().map(|p| Box::new(p) as Box<dyn Port>).collect())
}

/// Sends `per_flow` frames of each of `flows` flows to `dst(f)`, interleaved, at most
/// `WINDOW` in flight; returns the frames received, checking every flow arrives in order.
fn run(
    p0: &mut RssPort,
    p1: &mut RssPort,
    flows: u16,
    per_flow: u32,
    dst: impl Fn(u16) -> [u8; 4],
) -> Vec<Vec<u8>> {
    let total = u64::from(flows) * u64::from(per_flow);
    let (mut sent, mut got) = (0u64, Vec::new());
    let mut next = vec![0u32; usize::from(flows)];
    let mut rx = Batch::new(ports::MAX_BURST);
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while (got.len() as u64) < total {
        assert!(Instant::now() < deadline, "stuck: sent {sent}, got {} of {total}", got.len());
        if sent < total && sent - (got.len() as u64) < WINDOW {
            let (f, s) = ((sent % u64::from(flows)) as u16, (sent / u64::from(flows)) as u32);
            let mut b = Batch::new(1);
            b.push_copy(&frame(f, s, dst(f)));
            sent += p0.tx_burst(&mut b, &[0]) as u64;
        }
        rx.clear();
        let n = p1.rx_burst(&mut rx);
        for i in 0..n {
            let fr = rx.get(i).frame().to_vec();
            let (f, s) = seq_of(&fr);
            assert_eq!(s, next[usize::from(f)], "flow {f} reordered or lost a frame");
            next[usize::from(f)] = s + 1;
            got.push(fr);
        }
    }
    got
}

fn options() -> Options {
    Options::new(2)
}

#[test]
fn replicas_run_on_both_workers_add_up_in_status_and_all_take_a_new_route() {
    let topo = Topology::parse(TOPO, "replicas.yaml", Path::new(".")).unwrap();
    let mut node = Node::start(topo, options(), 64).unwrap();
    let (mut p0, mut p1) = (rss(&mut node, "in"), rss(&mut node, "out"));
    assert_eq!(p0.queues(), 2);
    assert!(node.take_outside("in").is_none(), "a replicated port is handed out per queue");

    let got = run(&mut p0, &mut p1, 61, 40, |f| [198, 51, 100, f as u8]);
    assert_eq!(got.len(), 61 * 40);

    let st = node.status().unwrap();
    let st_j = st.json();
    let names: Vec<&str> =
        st_j["vrs"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"pvr#0") && names.contains(&"pvr#1"), "{names:?}");
    let rep = &st.json()["replicated"][0];
    assert_eq!(rep["name"], "pvr");
    assert_eq!(rep["replicas"], 2);
    let inst = rep["instances"].as_array().unwrap();
    assert_eq!(inst.len(), 2);
    let workers: Vec<u64> = inst.iter().map(|i| i["worker"].as_u64().unwrap()).collect();
    assert_eq!(workers, vec![0, 1], "replica r on worker r");
    let fwd: Vec<u64> = inst.iter().map(|i| i["forwarded"].as_u64().unwrap()).collect();
    assert!(fwd.iter().all(|&n| n > 0), "both replicas forwarded: {fwd:?}");
    // The logical VR's counters are its replicas' sums, and match what the peer saw.
    assert_eq!(rep["counters"]["forwarded"].as_u64().unwrap(), fwd.iter().sum::<u64>());
    assert_eq!(rep["counters"]["forwarded"].as_u64().unwrap(), 61 * 40);
    assert_eq!(rep["counters"]["rx_packets"].as_u64().unwrap(), 61 * 40);
    for v in st.json()["vrs"].as_array().unwrap() {
        let i = inst.iter().find(|i| i["name"] == v["name"]).unwrap();
        assert_eq!(v["counters"]["forwarded"], i["forwarded"]);
    }

    // 172.16/16 has no route yet: every replica drops it.
    let before = run_drops(&mut node);
    let mut b = Batch::new(64);
    for f in 0..64u16 {
        b.push_copy(&frame(f, 0, [172, 16, f as u8, 1]));
    }
    let sel: Vec<u16> = (0..64).collect();
    assert_eq!(p0.tx_burst(&mut b, &sel), 64);
    wait_until(|| run_drops(&mut node) == before + 64);

    // One route operation on the logical VR: a new next hop (10.0.1.3), installed on both.
    let route = RouteConfig {
        prefix: "172.16.0.0/16".parse().unwrap(),
        target: RouteTarget::Via { gateway: "10.0.1.3".parse().unwrap(), iface: None },
        source: RouteSource::Api,
    };
    let a = node.route_ops("pvr", &[RouteOp::Add(route)]).unwrap();
    assert_eq!(a.new_next_hops, 1);
    let got = run(&mut p0, &mut p1, 64, 10, |f| [172, 16, f as u8, 1]);
    assert!(got.iter().all(|f| f[..6] == GW3), "through the new gateway");
    let st = node.status().unwrap();
    let st_j = st.json();
    let inst = st_j["replicated"][0]["instances"].as_array().unwrap();
    let after: Vec<u64> = inst.iter().map(|i| i["forwarded"].as_u64().unwrap()).collect();
    // The 640 new frames went through both replicas: each forwarded by the new route.
    assert_eq!(after.iter().sum::<u64>(), 61 * 40 + 640);
    assert!(after[0] > fwd[0] && after[1] > fwd[1], "before {fwd:?}, after {after:?}");
    node.stop().unwrap();
}

/// `no_route` drops of the logical VR.
fn run_drops(node: &mut Node) -> u64 {
    let st = node.status().unwrap();
    st.json()["replicated"][0]["counters"]["no_route"].as_u64().unwrap_or(0)
}

fn wait_until(mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed().as_secs() < 60, "timed out");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn the_topology_refuses_what_replicas_cannot_do() {
    let err = |t: &str| Topology::parse(t, "r.yaml", Path::new(".")).unwrap_err().to_string();
    let e = err(&TOPO.replace("replicas: 2", "replicas: 3"));
    assert!(e.contains("replicas: 3, but the topology has 2 workers"), "{e}");
    let e = err(&TOPO.replace("replicas: 2", "replicas: 2\n    worker: 1"));
    assert!(e.contains("replicas are placed one per worker"), "{e}");
    let e = err(&TOPO.replace("replicas: 2", "replicas: 65"));
    assert!(e.contains("replicas"), "{e}");
    let shared = format!(
        "{TOPO}  - name: other\n    interfaces:\n      - {{ name: a, port: in, mac: 02:00:00:00:02:00, addresses: [10.0.2.1/24] }}\n"
    );
    let e = err(&shared);
    assert!(e.contains("shares its ports with another VR"), "{e}");
    let tap = TOPO.replace(
        "{ name: out, kind: mem, ring: 1024 }",
        "{ name: out, kind: tap, interface: rpvtap0 }",
    );
    let e = err(&tap);
    assert!(e.contains("port out is not a mem, afpacket, memif or afxdp port"), "{e}");
    let memif = TOPO.replace(
        "{ name: out, kind: mem, ring: 1024 }",
        "{ name: out, kind: memif, socket: /tmp/rpv.sock, queues: 3 }",
    );
    let e = err(&memif);
    assert!(e.contains("memif port out has queues: 3: give it queues: 2"), "{e}");
    // One replica is a plain VR.
    let t = Topology::parse(&TOPO.replace("replicas: 2", "replicas: 1"), "r.yaml", Path::new("."))
        .unwrap();
    assert_eq!(t.schedule[0].replicas, None);
}

#[test]
fn apply_refuses_to_change_a_replicated_vr_and_neighbor_commands_reach_its_replicas() {
    let topo = Topology::parse(TOPO, "replicas.yaml", Path::new(".")).unwrap();
    let mut node = Node::start(topo, options(), 64).unwrap();
    let edited = TOPO.replace("prefix: 198.51.100.0/24", "prefix: 198.51.0.0/16");
    let next = Topology::parse(&edited, "replicas.yaml", Path::new(".")).unwrap();
    let e = node.apply(next, true).unwrap_err().to_string();
    assert!(
        e.contains("vr pvr: a replicated VR (replicas:) cannot be added, removed or changed live"),
        "{e}"
    );
    // The same file again changes nothing.
    let same = Topology::parse(TOPO, "replicas.yaml", Path::new(".")).unwrap();
    assert!(node.apply(same, false).unwrap().is_empty());
    // Neighbor commands name the logical VR.
    let cmd = |j: serde_json::Value| serde_json::from_value::<control::api::Command>(j).unwrap();
    let rows = node
        .execute(cmd(serde_json::json!({ "cmd": "neighbor_list", "args": { "vr": "pvr" } })))
        .unwrap();
    assert_eq!(rows.json()["neighbors"].as_array().unwrap().len(), 2, "{rows}");
    node.execute(cmd(serde_json::json!({ "cmd": "neighbor_flush", "args": { "vr": "pvr" } })))
        .unwrap();
    node.stop().unwrap();
}
