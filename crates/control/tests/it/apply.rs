//! `apply` on a running host under traffic: a plan that adds a VR, removes one, changes
//! routes, an MTU and a reservation is carried out while two sequence-numbered streams flow —
//! one through a VR the plan does not touch, one through the changed VR to a route the plan
//! keeps. Neither loses or reorders a frame. Also: the plan's text, refusals that change
//! nothing, and the API commands on a running node.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common;

use common::{frame_to, generate, sink, DEADLINE};
use control::api::{Command, Route};
use control::runtime::Options;
use control::{ControlError, Node, Topology};
use serde_json::json;

const BEFORE: &str = "\
workers: 2
ports:
  - { name: s0, kind: mem, ring: 4096 }
  - { name: s1, kind: mem, ring: 4096 }
  - { name: c0, kind: mem, ring: 4096 }
  - { name: c1, kind: mem, ring: 4096 }
  - { name: o0, kind: mem }
vrs:
  - name: steady
    interfaces:
      - { name: a, port: s0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: s1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 198.51.100.0/24, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }]
  - name: changing
    interfaces:
      - { name: a, port: c0, mac: 02:00:00:00:02:00, addresses: [10.0.0.1/24] }
      - { name: b, port: c1, mac: 02:00:00:00:02:01, addresses: [10.0.1.1/24] }
    routes:
      - { prefix: 198.51.100.0/24, via: 10.0.1.2 }
      - { prefix: 203.0.113.0/24, via: 10.0.1.2 }
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: b }]
  - name: old
    interfaces:
      - { name: a, port: o0, mac: 02:00:00:00:03:00, addresses: [10.0.0.1/24] }
";

const AFTER: &str = "\
workers: 2
idle: interrupt
ports:
  - { name: s0, kind: mem, ring: 4096 }
  - { name: s1, kind: mem, ring: 4096 }
  - { name: c0, kind: mem, ring: 4096 }
  - { name: c1, kind: mem, ring: 4096 }
  - { name: f0, kind: mem }
vrs:
  - name: steady
    interfaces:
      - { name: a, port: s0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: s1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 198.51.100.0/24, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }]
  - name: changing
    interfaces:
      - { name: a, port: c0, mac: 02:00:00:00:02:00, addresses: [10.0.0.1/24] }
      - { name: b, port: c1, mac: 02:00:00:00:02:01, mtu: 1400, addresses: [10.0.1.1/24] }
    routes:
      - { prefix: 198.51.100.0/24, via: 10.0.1.2 }
      - { prefix: 192.0.2.0/24, via: 10.0.1.3 }
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: b }]
    reservation: { packets: 1000000, period_us: 1000 }
  - name: fresh
    interfaces:
      - { name: a, port: f0, mac: 02:00:00:00:04:00, addresses: [10.9.0.1/24] }
";

fn parse(text: &str) -> Topology {
    Topology::parse(text, "apply.yaml", Path::new(".")).unwrap()
}

fn node(text: &str) -> Node {
    let o = Options::new(2);
    Node::start(parse(text), o, 256).unwrap()
}

/// One sequence-numbered stream through a VR: generator thread, sink thread.
struct Stream {
    stop: Arc<AtomicBool>,
    expect: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    gen: thread::JoinHandle<u64>,
    sink: thread::JoinHandle<(u64, Option<String>)>,
}

impl Stream {
    fn start(n: &mut Node, tx: &str, rx: &str, mac: [u8; 6], dst: [u8; 4]) -> Stream {
        let (tx, rx) = (n.take_outside(tx).unwrap(), n.take_outside(rx).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let expect = Arc::new(AtomicU64::new(u64::MAX));
        let gen = {
            let (stop, received) = (stop.clone(), received.clone());
            thread::spawn(move || generate(tx, frame_to(mac, dst, 0), stop, received))
        };
        let sink = {
            let (expect, received) = (expect.clone(), received.clone());
            thread::spawn(move || sink(rx, expect, received))
        };
        Stream { stop, expect, received, gen, sink }
    }

    fn wait_for(&self, n: u64) {
        let t0 = Instant::now();
        while self.received.load(Ordering::Acquire) < n && t0.elapsed() < DEADLINE {
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stops the generator; returns (sent, received, first sequence error).
    fn finish(self) -> (u64, u64, Option<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.gen.join().unwrap();
        self.expect.store(sent, Ordering::Release);
        let (got, err) = self.sink.join().unwrap();
        (sent, got, err)
    }
}

fn vr(status: &impl Json, name: &str) -> serde_json::Value {
    let status = status.json();
    status["vrs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no vr {name} in {status:#}"))
}

#[test]
fn apply_under_traffic_loses_nothing_on_untouched_vrs_and_kept_routes() {
    let mut n = node(BEFORE);
    let steady = Stream::start(&mut n, "s0", "s1", [2, 0, 0, 0, 1, 0], [198, 51, 100, 7]);
    let kept = Stream::start(&mut n, "c0", "c1", [2, 0, 0, 0, 2, 0], [198, 51, 100, 9]);
    steady.wait_for(2_000);
    kept.wait_for(2_000);

    let plan = n.plan(&parse(AFTER)).unwrap();
    let text = plan.to_string();
    let expected = "\
~ idle: Adaptive -> Interrupt
- vr old (its cell stops; ports o0 close)
~ vr changing: interface b mtu 1500 -> 1400
~ vr changing: routes: 1 added or changed, 1 removed
~ vr changing: reservation none -> 1000000 packets per 1000000 ns
+ vr fresh (new cell; opens f0)
= unchanged: steady
";
    assert_eq!(text, expected);
    // A dry run changes nothing.
    assert_eq!(n.apply(parse(AFTER), true).unwrap(), plan);
    assert!(n.table("old").is_some());

    let before = (steady.received.load(Ordering::Acquire), kept.received.load(Ordering::Acquire));
    let done = n.apply(parse(AFTER), false).unwrap();
    assert_eq!(done, plan);
    // Traffic keeps flowing after the change.
    steady.wait_for(before.0 + 2_000);
    kept.wait_for(before.1 + 2_000);
    let status = n.status().unwrap();
    let (s_sent, s_got, s_err) = steady.finish();
    let (k_sent, k_got, k_err) = kept.finish();
    assert_eq!((s_got, s_err), (s_sent, None), "steady lost or reordered frames:\n{status:#}");
    assert_eq!(
        (k_got, k_err),
        (k_sent, None),
        "a kept route lost or reordered frames:\n{status:#}"
    );
    assert!(s_got > before.0 + 1_000 && k_got > before.1 + 1_000);

    // The running host is the new topology.
    let status_j = status.json();
    let names: Vec<&str> =
        status_j["vrs"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"fresh") && !names.contains(&"old"), "{names:?}");
    let status = n.status().unwrap();
    let c = vr(&status, "changing");
    assert_eq!(c["reservation"]["packets"], 1_000_000, "{c:#}");
    assert_eq!(c["routes"]["static"], 2);
    assert_eq!(c["counters"]["forwarded"], json!(k_sent), "counters survive the changes");
    let routes = n
        .execute(Command::RouteList {
            vr: "changing".into(),
            source: Some("static".into()),
            limit: None,
        })
        .unwrap();
    let routes_j = routes.json();
    let prefixes: Vec<&str> = routes_j["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["prefix"].as_str().unwrap())
        .collect();
    assert_eq!(prefixes, ["192.0.2.0/24", "198.51.100.0/24"]);
    assert!(n.table("old").is_none());
    // Applying the same file again changes nothing.
    assert!(n.plan(&parse(AFTER)).unwrap().is_empty());
    n.stop().unwrap();
}

#[test]
fn changes_that_cannot_be_live_are_refused_whole() {
    let mut n = node(BEFORE);
    // A port's kind changes and a VR is added: nothing happens, and the message says why.
    let bad = BEFORE.replace("{ name: o0, kind: mem }", "{ name: o0, kind: mem, ring: 64 }")
        + "  - name: extra\n    interfaces:\n      - { name: a, port: o0, mac: 02:00:00:00:05:00, addresses: [10.5.0.1/24] }\n";
    let e = n.apply(parse(&bad), false).unwrap_err();
    assert!(matches!(e, ControlError::NotLive(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("port o0: its kind or settings changed") && msg.contains("routeplex down"),
        "{msg}"
    );
    assert!(n.table("extra").is_none(), "nothing was half-applied");
    let workers = BEFORE.replace("workers: 2", "workers: 1");
    assert!(n.apply(parse(&workers), false).unwrap_err().to_string().contains("workers"));
    let queues = BEFORE.replace("workers: 2", "workers: 2\ningress_queues: {}");
    let e = n.apply(parse(&queues), false).unwrap_err().to_string();
    assert!(e.contains("ingress_queues: None -> Some") && e.contains("routeplex down"), "{e}");
    n.stop().unwrap();
}

#[test]
fn api_commands_on_a_running_node() {
    let mut n = node(BEFORE);
    let kept = Stream::start(&mut n, "c0", "c1", [2, 0, 0, 0, 2, 0], [198, 51, 100, 9]);
    kept.wait_for(1_000);
    let route = |p: &str, via: &str| Route {
        prefix: p.parse().unwrap(),
        via: Some(via.parse().unwrap()),
        interface: None,
        blackhole: false,
    };
    let r = n
        .execute(Command::RouteAdd {
            vr: "changing".into(),
            routes: vec![route("100.64.0.0/10", "10.0.1.9"), route("100.128.0.0/9", "10.0.1.2")],
        })
        .unwrap();
    assert_eq!(
        (r.json()["added"].as_u64(), r.json()["new_next_hops"].as_u64()),
        (Some(2), Some(1)),
        "{r}"
    );
    // Added again: refused whole.
    let e = n
        .execute(Command::RouteAdd {
            vr: "changing".into(),
            routes: vec![route("100.64.0.0/10", "10.0.1.9")],
        })
        .unwrap_err();
    assert_eq!(e.code(), "route");
    assert!(e.to_string().contains("exists already"), "{e}");
    let e = n
        .execute(Command::RouteAdd {
            vr: "changing".into(),
            routes: vec![route("100.0.0.0/10", "192.0.2.1")],
        })
        .unwrap_err();
    assert!(e.to_string().contains("no connected subnet"), "{e}");
    assert_eq!(vr(&n.execute(Command::Status).unwrap(), "changing")["routes"]["api"], 2);
    n.execute(Command::RouteDelete {
        vr: "changing".into(),
        prefixes: vec!["100.64.0.0/10".parse().unwrap()],
    })
    .unwrap();
    let e = n
        .execute(Command::RouteDelete {
            vr: "changing".into(),
            prefixes: vec!["100.64.0.0/10".parse().unwrap()],
        })
        .unwrap_err();
    assert!(e.to_string().contains("no api route"), "{e}");

    // Interfaces: MTU and down/up; neighbors listed and flushed.
    n.execute(Command::InterfaceSet {
        vr: "changing".into(),
        interface: "b".into(),
        mtu: Some(1400),
        up: None,
        addresses: None,
    })
    .unwrap();
    let e = n
        .execute(Command::InterfaceSet {
            vr: "changing".into(),
            interface: "b".into(),
            mtu: Some(20),
            up: None,
            addresses: None,
        })
        .unwrap_err();
    assert!(e.to_string().contains("MTU 20"), "{e}");
    let e = n
        .execute(Command::InterfaceSet {
            vr: "changing".into(),
            interface: "zz".into(),
            mtu: None,
            up: None,
            addresses: None,
        })
        .unwrap_err();
    assert_eq!(e.code(), "no_such_interface");
    // New addresses on interface a: the VR is rebuilt in place; b's traffic keeps flowing.
    let r = n
        .execute(Command::InterfaceSet {
            vr: "changing".into(),
            interface: "a".into(),
            mtu: None,
            up: None,
            addresses: Some(vec!["10.0.0.1/24".parse().unwrap(), "10.0.5.1/24".parse().unwrap()]),
        })
        .unwrap();
    assert_eq!(r.json()["addresses"], json!(["10.0.0.1/24", "10.0.5.1/24"]), "{r}");
    let st = n.status().unwrap();
    assert_eq!(vr(&st, "changing")["routes"]["connected"], 3, "{st:#}");
    let nb = n.execute(Command::NeighborList { vr: "changing".into() }).unwrap();
    assert_eq!(nb.json()["neighbors"][0]["state"], "static", "{nb}");

    // Move, reserve (a budget this traffic never reaches: a smaller one would drop frames as
    // over_budget, as it should), errors by name.
    let w = n.runtime().worker_of("changing").unwrap();
    let m = n.execute(Command::Move { vr: "changing".into(), worker: 1 - w }).unwrap();
    assert_eq!(m.json()["to"], json!(1 - w));
    assert!(n
        .execute(Command::Move { vr: "changing".into(), worker: 9 })
        .unwrap_err()
        .to_string()
        .contains("no worker 9"));
    let r = n
        .execute(Command::Reserve {
            vr: "changing".into(),
            spec: vec!["packets=1000000".into(), "weight=2".into()],
        })
        .unwrap();
    assert!(
        r.json()["reservation"]["packets"] == 1_000_000
            || r.json()["pending_reservation"]["packets"] == 1_000_000,
        "{r}"
    );
    let e = n
        .execute(Command::Reserve { vr: "changing".into(), spec: vec!["packets=0".into()] })
        .unwrap_err();
    assert!(e.to_string().contains("packets 0 is out of range"), "{e}");
    n.execute(Command::Reserve { vr: "changing".into(), spec: vec!["none".into()] }).unwrap();
    assert_eq!(
        n.execute(Command::NeighborList { vr: "nobody".into() }).unwrap_err().code(),
        "no_such_vr"
    );

    let (sent, got, err) = kept.finish();
    assert_eq!(
        (got, err),
        (sent, None),
        "route and interface changes, a move and reservations lost nothing"
    );
    // VR removal through the API.
    n.execute(Command::VrRemove { vr: "old".into() }).unwrap();
    assert!(n.table("old").is_none());
    assert_eq!(n.execute(Command::Stop).unwrap().json()["state"], "stopping");
    assert!(n.stop_requested());
    n.stop().unwrap();
}

#[test]
fn vr_add_and_remove_through_the_api_extend_the_running_topology() {
    use control::model::{IfaceDoc, PortDoc, PortKindDoc, VrDoc};
    let mut n = node(BEFORE);
    // Without the running topology's text, vr_add says what to do instead.
    let e = n.execute(Command::VrAdd { vr: Box::new(VrDoc::new("x")), ports: vec![] }).unwrap_err();
    assert!(e.to_string().contains("use apply"), "{e}");
    n.set_source(BEFORE.to_string(), "apply.yaml".into());

    let steady = Stream::start(&mut n, "s0", "s1", [2, 0, 0, 0, 1, 0], [198, 51, 100, 7]);
    steady.wait_for(1_000);
    let mut v = VrDoc::new("added");
    v.interfaces.push(IfaceDoc::on_port("a", "n0", "02:00:00:00:09:00", ["10.9.9.1/24"]));
    let port = PortDoc::new("n0", PortKindDoc::Mem { ring: None });
    let r = n.execute(Command::VrAdd { vr: Box::new(v), ports: vec![port] }).unwrap();
    assert_eq!(r.json()["plan"], json!(["+ vr added (new cell; opens n0)"]), "{r}");
    assert!(n.table("added").is_some());
    // A bad VR is refused with the parser's error, and nothing changes.
    let mut bad = VrDoc::new("bad");
    bad.interfaces.push(IfaceDoc::on_port("a", "nowhere", "02:00:00:00:09:01", ["10.9.8.1/24"]));
    let e = n.execute(Command::VrAdd { vr: Box::new(bad), ports: vec![] }).unwrap_err();
    assert_eq!(e.code(), "topology", "{e}");
    assert!(e.to_string().contains("nowhere"), "{e}");

    // A whole-file apply becomes the text later edits start from: vr_add after it keeps its
    // changes (here: old's reservation) instead of going back to the first file.
    let applied = format!(
        "{BEFORE}    reservation: {{ packets: 500000 }}\n  - name: added\n    interfaces:\n      - {{ name: a, port: n0, mac: \"02:00:00:00:09:00\", addresses: [10.9.9.1/24] }}\n"
    )
    .replace("  - { name: o0, kind: mem }\n", "  - { name: o0, kind: mem }\n  - { name: n0, kind: mem }\n");
    n.execute(Command::Apply { topology: applied, file: "apply.yaml".into(), dry_run: false })
        .unwrap();
    // An interface taken down through the API stays down across an edit of the text (the
    // plan has no step for it).
    n.execute(Command::InterfaceSet {
        vr: "old".into(),
        interface: "a".into(),
        mtu: None,
        up: Some(false),
        addresses: None,
    })
    .unwrap();
    let mut w = VrDoc::new("more");
    w.interfaces.push(IfaceDoc::on_port("a", "m0", "02:00:00:00:0a:00", ["10.9.10.1/24"]));
    let r = n
        .execute(Command::VrAdd {
            vr: Box::new(w),
            ports: vec![PortDoc::new("m0", PortKindDoc::Mem { ring: None })],
        })
        .unwrap();
    assert_eq!(r.json()["plan"], json!(["+ vr more (new cell; opens m0)"]), "{r}");
    let st = n.status().unwrap();
    assert_eq!(vr(&st, "old")["reservation"]["packets"], 500_000, "{st:#}");
    n.execute(Command::VrRemove { vr: "more".into() }).unwrap();

    // Removing a VR alone in its cell closes the ports nothing else uses.
    let r = n.execute(Command::VrRemove { vr: "old".into() }).unwrap();
    assert_eq!(r.json()["plan"], json!(["- vr old (its cell stops; ports o0 close)"]), "{r}");
    let r = n.execute(Command::VrRemove { vr: "added".into() }).unwrap();
    assert_eq!(r.json()["plan"], json!(["- vr added (its cell stops; ports n0 close)"]), "{r}");
    assert_eq!(
        n.execute(Command::VrRemove { vr: "added".into() }).unwrap_err().code(),
        "no_such_vr"
    );
    let (sent, got, err) = steady.finish();
    assert_eq!((got, err), (sent, None), "an untouched VR lost nothing");
    n.stop().unwrap();
}

// (no line continuation: it would eat the first line's indent)
const SEGMENT: &str = "  - { name: m1, kind: mem }
  - { name: mb, kind: mem }
switches:
  - name: lan
    members: [{ port: m1 }]
";

/// Whether a frame sent into `from` for `dst` behind the VR with MAC `vr_mac` makes that VR
/// ask for `dst` (an ARP request from `asker`) on `rx` within [`DEADLINE`].
fn asks_on(
    from: &mut ports::mem::MemPort,
    rx: &mut ports::mem::MemPort,
    vr_mac: [u8; 6],
    dst: [u8; 4],
    asker: [u8; 6],
) -> bool {
    let mut batch = ports::Batch::new(256);
    batch.push_copy(&frame_to(vr_mac, dst, 0));
    assert_eq!(ports::Port::tx_burst(from, &mut batch, &[0]), 1);
    let t0 = Instant::now();
    while t0.elapsed() < DEADLINE {
        batch.clear();
        if ports::Port::rx_burst(rx, &mut batch) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        let arp = |f: &[u8]| f.len() >= 14 && f[6..12] == asker && f[12..14] == [8, 6];
        if batch.packets().iter().any(|p| arp(p.frame())) {
            return true;
        }
    }
    false
}

/// Two new VRs join one running switch in one `apply`: the second one's ports come after the
/// first one's in the cell (a plan that gave both the same cell-local ports had the second
/// step refused, "not a free port of the cell", after the first had run), and the switch
/// forwards to both.
#[test]
fn two_new_vrs_join_a_running_switch_in_one_apply() {
    const VR_B: &str = "vrs:
  - name: b
    interfaces:
      - { name: e0, switch: lan, mac: 02:00:00:00:0b:00, addresses: [10.0.0.1/24] }
      - { name: e1, port: mb, mac: 02:00:00:00:0b:01, addresses: [10.1.0.1/24] }
";
    let joining = |v: &str, k: u8| {
        format!(
            "  - name: {v}
    interfaces:
      - {{ name: e0, switch: lan, mac: 02:00:00:00:0{k:x}:00, addresses: [10.0.0.{k}/24] }}
      - {{ name: e1, port: m{v}, mac: 02:00:00:00:0{k:x}:01, addresses: [10.{k}.0.1/24] }}
"
        )
    };
    let with_b = format!("ports:\n{SEGMENT}{VR_B}");
    let mut n = node(&with_b);
    let grown = format!("{with_b}{}{}", joining("c", 0xc), joining("d", 0xd)).replace(
        "switches:",
        "  - { name: mc, kind: mem }\n  - { name: md, kind: mem }\nswitches:",
    );
    let plan = n.apply(parse(&grown), false).unwrap();
    assert_eq!(plan.steps.len(), 2, "{plan}");
    for (step, vr) in plan.steps.iter().zip(["c", "d"]) {
        assert!(step.starts_with(&format!("+ vr {vr} (joins the cell of ")), "{plan}");
        assert!(step.ends_with(&format!("; opens m{vr}; on switch lan)")), "{plan}");
    }
    let status = n.status().unwrap().json();
    let members: Vec<&str> = (status["switches"][0]["members"].as_array().unwrap().iter())
        .map(|m| m["port"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(members.len(), 4, "{status:#}");
    assert!(members.contains(&"lan.c.e0.sw") && members.contains(&"lan.d.e0.sw"), "{status:#}");
    let mut m1 = n.take_outside("m1").unwrap();
    for (vr, k, net) in [("c", 0xc, 0xc), ("d", 0xd, 0xd), ("b", 0xb, 1)] {
        let mut rx = n.take_outside(&format!("m{vr}")).unwrap();
        let (mac, asker) = ([2, 0, 0, 0, k, 0], [2, 0, 0, 0, k, 1]);
        let asked = asks_on(&mut m1, &mut rx, mac, [10, net, 0, 9], asker);
        assert!(asked, "{vr} never asked for 10.{net}.0.9 on e1: the switch does not reach it");
    }
    n.stop().unwrap();
}

/// A switch segment added and removed by `apply`: its switch, member port and VRs start as a
/// new cell and forward (a frame from the member port reaches the VR over the switch, which
/// routes it out of its other interface), the VR that was running is untouched; a port joins
/// the running switch and forwards, then leaves it and closes; a member's mode changing is
/// refused whole with what to do instead; a new VR joins the running switch (a member added
/// live, flooded to; its ports after the closed one in the cell), leaves it (the member taken
/// out, then the VR removed) and joins again.
#[test]
fn a_switch_segment_is_added_and_removed_live() {
    const BASE: &str = "\
ports:
  - { name: pa, kind: mem }
";
    const VR_A: &str = "\
vrs:
  - name: a
    interfaces:
      - { name: e0, port: pa, mac: 02:00:00:00:0a:00, addresses: [10.9.0.1/24] }
";
    const VR_B: &str = "  - name: b
    interfaces:
      - { name: e0, switch: lan, mac: 02:00:00:00:0b:00, addresses: [10.0.0.1/24] }
      - { name: e1, port: mb, mac: 02:00:00:00:0b:01, addresses: [10.1.0.1/24] }
";
    let with = format!("{BASE}{SEGMENT}{VR_A}{VR_B}");
    let mut n = node(&format!("{BASE}{VR_A}"));
    let plan = n.apply(parse(&with), false).unwrap();
    assert_eq!(plan.steps, ["+ switch lan (new cell with vr b; opens m1, mb)"], "{plan}");
    assert_eq!(plan.unchanged, ["a"], "{plan}");
    let (mut m1, mut mb) = (n.take_outside("m1").unwrap(), n.take_outside("mb").unwrap());
    // Into the switch, to b's MAC, for a host behind b's e1: b asks for it on e1.
    let mut batch = ports::Batch::new(256);
    batch.push_copy(&frame_to([2, 0, 0, 0, 0x0b, 0], [10, 1, 0, 9], 0));
    assert_eq!(ports::Port::tx_burst(&mut m1, &mut batch, &[0]), 1);
    let t0 = Instant::now();
    let mut asked = false;
    while !asked && t0.elapsed() < DEADLINE {
        batch.clear();
        if ports::Port::rx_burst(&mut mb, &mut batch) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        // An ARP request (ethertype 0x0806) from b's e1.
        asked = batch.packets().iter().any(|p| {
            let f = p.frame();
            f.len() >= 14 && f[6..12] == [2, 0, 0, 0, 0x0b, 1] && f[12..14] == [8, 6]
        });
    }
    assert!(asked, "b never asked for 10.1.0.9 on e1: the new segment does not forward");
    let status = n.status().unwrap().json();
    let sw = &status["switches"];
    assert_eq!(sw.as_array().map(Vec::len), Some(1), "{status:#}");
    assert_eq!(sw[0]["name"], "lan", "{status:#}");

    // A port joining the running switch opens and is a member from the next burst: a frame
    // from it to b's MAC reaches b, which asks on its other interface.
    let grown = with.replace("members: [{ port: m1 }]", "members: [{ port: m1 }, { port: m2 }]");
    let grown = grown.replace("switches:", "  - { name: m2, kind: mem }\nswitches:");
    let plan = n.apply(parse(&grown), false).unwrap();
    assert_eq!(plan.steps, ["+ port m2 (opens; joins switch lan)"], "{plan}");
    assert_eq!(plan.unchanged, ["a", "b"], "{plan}");
    let mut m2 = n.take_outside("m2").unwrap();
    let (b_mac, b_e1) = ([2, 0, 0, 0, 0x0b, 0], [2, 0, 0, 0, 0x0b, 1]);
    let asked = asks_on(&mut m2, &mut mb, b_mac, [10, 1, 0, 11], b_e1);
    assert!(asked, "b never asked for 10.1.0.11: the switch does not forward from m2");
    // A member whose mode changes is refused whole; nothing changes.
    let retagged = grown.replace("{ port: m2 }", "{ port: m2, vlan: 7 }");
    let e = n.apply(parse(&retagged), false).unwrap_err();
    assert!(
        e.to_string().contains("switch lan: its members or settings changed")
            && e.to_string().contains("routeplex down"),
        "{e}"
    );
    assert_eq!(n.plan(&parse(&grown)).unwrap().steps, Vec::<String>::new());
    // The port leaves the switch and the topology: the member is taken out, then the port
    // closes; its place in the cell holds a closed port, and the switch still forwards.
    let plan = n.apply(parse(&with), false).unwrap();
    assert_eq!(plan.steps, ["~ switch lan: member m2 leaves", "- port m2 (closes)"], "{plan}");
    let status = n.status().unwrap().json();
    let members: Vec<&str> = (status["switches"][0]["members"].as_array().unwrap().iter())
        .map(|m| m["port"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(members.len(), 2, "{status:#}");
    assert!(!members.contains(&"m2"), "{status:#}");
    let closed = (status["ports"].as_array().unwrap().iter())
        .find(|p| p["name"] == "m2 (closed)")
        .unwrap_or_else(|| panic!("no closed port m2: {status:#}"));
    assert!(closed["status"].to_string().contains("closed"), "{closed:#}");
    assert_eq!(n.plan(&parse(&with)).unwrap().steps, Vec::<String>::new());
    let asked = asks_on(&mut m1, &mut mb, b_mac, [10, 1, 0, 12], b_e1);
    assert!(asked, "b never asked for 10.1.0.12: the switch stopped forwarding from m1");

    // A new VR joins the running switch: the switch gains the member live and floods to it
    // (a frame from m1 to c's MAC reaches c, which asks on its other interface).
    let vr_c = "  - name: c
    interfaces:
      - { name: e0, switch: lan, mac: 02:00:00:00:0c:00, addresses: [10.0.0.3/24] }
      - { name: e1, port: mc, mac: 02:00:00:00:0c:01, addresses: [10.2.0.1/24] }
";
    let with_c =
        format!("{with}{vr_c}").replace("switches:", "  - { name: mc, kind: mem }\nswitches:");
    let plan = n.apply(parse(&with_c), false).unwrap();
    assert_eq!(plan.steps.len(), 1, "{plan}");
    assert!(
        plan.steps[0].starts_with("+ vr c (joins the cell of ")
            && plan.steps[0].ends_with("; opens mc; on switch lan)"),
        "{plan}"
    );
    assert_eq!(plan.unchanged, ["a", "b"], "{plan}");
    let mut mc = n.take_outside("mc").unwrap();
    batch.clear();
    batch.push_copy(&frame_to([2, 0, 0, 0, 0x0c, 0], [10, 2, 0, 9], 0));
    assert_eq!(ports::Port::tx_burst(&mut m1, &mut batch, &[0]), 1);
    let t0 = Instant::now();
    let mut asked = false;
    while !asked && t0.elapsed() < DEADLINE {
        batch.clear();
        if ports::Port::rx_burst(&mut mc, &mut batch) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        asked = batch.packets().iter().any(|p| {
            let f = p.frame();
            f.len() >= 14 && f[6..12] == [2, 0, 0, 0, 0x0c, 1] && f[12..14] == [8, 6]
        });
    }
    assert!(asked, "c never asked for 10.2.0.9: the switch does not forward to its new member");

    // c leaves the running switch (its port mc stays): the member is taken out first, then
    // the VR goes; b keeps forwarding. Then c joins again, on new links.
    let without_c = with_c.replace(vr_c, "");
    let plan = n.apply(parse(&without_c), false).unwrap();
    assert_eq!(plan.steps, ["~ switch lan: member lan.c.e0.sw leaves", "- vr c"], "{plan}");
    assert_eq!(plan.unchanged, ["a", "b"], "{plan}");
    let status = n.status().unwrap().json();
    let members: Vec<&str> = (status["switches"][0]["members"].as_array().unwrap().iter())
        .map(|m| m["port"].as_str().unwrap_or_default())
        .collect();
    assert!(!members.contains(&"lan.c.e0.sw") && members.len() == 2, "{status:#}");
    let plan = n.apply(parse(&with_c), false).unwrap();
    assert_eq!(plan.steps.len(), 1, "{plan}");
    assert!(plan.steps[0].ends_with("; on switch lan)"), "{plan}");
    for (dst_mac, dst, rx, src) in [
        ([2, 0, 0, 0, 0x0c, 0], [10, 2, 0, 10], &mut mc, [2, 0, 0, 0, 0x0c, 1]),
        ([2, 0, 0, 0, 0x0b, 0], [10, 1, 0, 10], &mut mb, [2, 0, 0, 0, 0x0b, 1]),
    ] {
        batch.clear();
        batch.push_copy(&frame_to(dst_mac, dst, 0));
        assert_eq!(ports::Port::tx_burst(&mut m1, &mut batch, &[0]), 1);
        let t0 = Instant::now();
        let mut asked = false;
        while !asked && t0.elapsed() < DEADLINE {
            batch.clear();
            if ports::Port::rx_burst(rx, &mut batch) == 0 {
                thread::sleep(Duration::from_millis(1));
            }
            asked = batch.packets().iter().any(|p| {
                let f = p.frame();
                f.len() >= 14 && f[6..12] == src && f[12..14] == [8, 6]
            });
        }
        assert!(asked, "no ARP from {src:?} after c joined again");
    }
    // A VR leaving with its own port is not live (a running cell keeps its ports).
    let e = n.apply(parse(&with), false).unwrap_err();
    assert!(e.to_string().contains("port mc: removed while VRs or switches"), "{e}");

    // The segment removed: its cell stops, a keeps running.
    let plan = n.apply(parse(&format!("{BASE}{VR_A}")), false).unwrap();
    assert_eq!(plan.steps.len(), 1, "{plan}");
    assert!(
        plan.steps[0].starts_with("- switch lan and vr b, c (its cell stops; ports "),
        "{plan}"
    );
    assert_eq!(plan.unchanged, ["a"], "{plan}");
    let status = n.status().unwrap().json();
    assert_eq!(status["switches"].as_array().map(Vec::len), Some(0), "{status:#}");
    assert!(vr(&status, "a").is_object(), "{status:#}");
    n.stop().unwrap();
}
