//! Live migration between two running hosts in one process (the destination served on its
//! own control socket and migration listener, on loopback): the moved VR forwards every prefix
//! boundary as it did, with its neighbors, counters and interfaces up, and is gone from the
//! source; a destination with another secret, or one that does not list the source as a
//! peer, is refused and nothing moves; a destination that dies part way (during the pre-copy,
//! or after it built the VR, at the stop) leaves the VR running at the source, interfaces up.
//! Issue 27's findings: learned neighbors go with the VR and stay at the source when the move
//! fails; connections that trickle their handshake (as many as may be pending) do not hold up
//! a real migration; migrations past the bound are refused at once; a destination that stalls
//! at the stop is abandoned within `stop_timeout_ms` and the source forwards again; a commit
//! past the source's bound is refused; a neighbor with a group MAC is refused at the commit.
//! The namespaces-and-bridge test under traffic is `routeplex/tests/it/migration.rs`.

use crate::reply_json;
use reply_json::Json;

use crate::served;

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use control::api::{Command, Route};
use control::daemon::{self, Access};
use control::migrate::{self, Channel, Listener};
use control::runtime::Options;
use control::snapshot::{self, SnapNeighbor};
use control::{MigrationConfig, Node, Topology};
use dataplane::Adj;
use ipnet::IpNet;
use serde_json::Value;
use served::Served;

const SECRET: &str = "0123456789abcdef0123456789abcdef";

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("rsn-mig-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The source host. Its stop bound is well above the default (500 ms) so that a loaded test
/// machine does not abandon real migrations; the stalled-destination test sets its own.
fn source_text() -> String {
    format!(
        "\
workers: 1
migration: {{ secret: {SECRET}, stop_timeout_ms: 5000 }}
ports:
  - {{ name: p0, kind: mem }}
  - {{ name: p1, kind: mem }}
vrs:
  - name: a
    interfaces:
      - {{ name: e0, port: p0, mac: 02:00:00:00:0a:00, addresses: [10.0.0.1/24, 2001:db8::1/64] }}
      - {{ name: e1, port: p1, mac: 02:00:00:00:0a:01, addresses: [10.0.1.1/24] }}
    routes:
      - {{ prefix: 198.51.100.0/24, via: 10.0.1.2 }}
      - {{ prefix: 192.0.2.0/24, blackhole: true }}
    neighbors:
      - {{ address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: e1 }}
"
    )
}

const DEST: &str = "\
workers: 1
ports:
  - { name: q0, kind: mem }
vrs:
  - name: z
    interfaces:
      - { name: e0, port: q0, mac: 02:00:00:00:0c:00, addresses: [10.7.0.1/24] }
";

fn start(text: &str, file: &Path) -> Node {
    let topo = Topology::parse(text, &file.display().to_string(), Path::new("/")).unwrap();
    let o = Options::new(1);
    let mut n = Node::start(topo, o, 256).unwrap();
    n.set_source(text.to_string(), file.display().to_string());
    n
}

/// A destination host: its node served on a control socket, and a migration listener.
fn start_dest(dir: &Path, secret: &str, peers: Vec<IpAddr>) -> Served {
    start_dest_with(dir, DEST, secret, peers)
}

/// [`start_dest`] with topology `text`.
fn start_dest_with(dir: &Path, text: &str, secret: &str, peers: Vec<IpAddr>) -> Served {
    let node = start(text, &dir.join("dst.yaml"));
    let sock = dir.join("control.sock");
    let access = Access { owner: unsafe_free_euid(), status_gid: None };
    let l = daemon::bind(&sock, &access).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let serve = std::thread::spawn(move || {
        let mut node = node;
        daemon::serve(l, access, &st, |cmd| (node.execute(cmd), false)).unwrap();
        node
    });
    let cfg = MigrationConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        secret: secret.as_bytes().to_vec(),
        peers,
        stop_timeout: Duration::from_millis(500),
    };
    let listener = Listener::start(&cfg, sock, dir.to_path_buf()).unwrap();
    Served::new(stop, serve, listener)
}

fn unsafe_free_euid() -> u32 {
    control::sys::euid()
}

fn add_routes(n: &mut Node) {
    let mut routes = Vec::new();
    for i in 0..2000u32 {
        let p: IpNet =
            format!("{}.{}.{}.0/24", 20 + i / 65536, (i / 256) % 256, i % 256).parse().unwrap();
        let via = if i % 2 == 0 { "10.0.0.2" } else { "10.0.1.2" };
        routes.push(Route {
            prefix: p,
            via: Some(via.parse().unwrap()),
            interface: None,
            blackhole: false,
        });
    }
    n.execute(Command::RouteAdd { vr: "a".into(), routes }).unwrap();
}

fn boundaries(node: &Node) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for r in node.table("a").unwrap().routes(None, usize::MAX) {
        if let IpNet::V4(n) = r.prefix {
            let (a, b) = (u32::from(n.network()), u32::from(n.broadcast()));
            out.extend([a, b].map(|x| IpAddr::V4(x.into())));
            out.extend(a.checked_sub(1).map(|x| IpAddr::V4(x.into())));
            out.extend(b.checked_add(1).map(|x| IpAddr::V4(x.into())));
        }
    }
    out
}

fn lookups(node: &Node, addrs: &[IpAddr]) -> Vec<Adj> {
    let v = node.table("a").unwrap().view();
    addrs.iter().map(|&a| v.lookup(a)).collect()
}

fn vr(node: &mut Node, name: &str) -> Value {
    let s = node.execute(Command::Status).unwrap();
    s.json()["vrs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

fn all_up(v: &Value) -> bool {
    v["interfaces"].as_array().unwrap().iter().all(|i| i["up"] == true)
}

#[test]
fn a_migrated_vr_forwards_as_it_did_and_leaves_the_source() {
    let d = TempDir::new("ok");
    let mut src = start(&source_text(), &d.0.join("src.yaml"));
    add_routes(&mut src);
    let addrs = boundaries(&src);
    let before = lookups(&src, &addrs);
    let routes_before = src.table("a").unwrap().routes(None, usize::MAX);
    let dest = start_dest(&d.0, SECRET, vec!["127.0.0.1".parse().unwrap()]);
    let r = src.execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() }).unwrap();
    assert_eq!(r.json()["routes"], 2002, "{r}");
    assert!(r.json()["bytes_moved"].as_u64().unwrap() > 2000 * 7, "{r}");
    assert!(src.table("a").is_none(), "the source still has the VR");
    let mut dst = dest.finish();
    assert_eq!(lookups(&dst, &addrs), before, "forwarding differs after the move");
    assert_eq!(dst.table("a").unwrap().routes(None, usize::MAX), routes_before);
    let v = vr(&mut dst, "a");
    assert!(all_up(&v), "{v}");
    let n = dst.execute(Command::NeighborList { vr: "a".into() }).unwrap();
    assert!(n.json()["neighbors"].as_array().unwrap().iter().any(|r| r["address"] == "10.0.1.2"));
    // The destination's own VR was not touched.
    assert!(dst.table("z").is_some());
    // Announcements: two interfaces; e0 has one IPv4 and one IPv6 address plus its
    // link-local one, e1 one IPv4 address plus its link-local one.
    let a = dst.execute(Command::Announce { vr: "a".into() }).unwrap();
    assert_eq!(a.json()["frames"], 5);
    dst.stop().unwrap();
    src.stop().unwrap();
}

#[test]
fn an_untrusted_peer_is_refused_and_nothing_moves() {
    let d = TempDir::new("untrusted");
    let mut src = start(&source_text(), &d.0.join("src.yaml"));
    add_routes(&mut src);
    // Another secret.
    let dest = start_dest(&d.0, "another secret, 32 bytes long...", vec![]);
    let e = src
        .execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() })
        .unwrap_err()
        .to_string();
    assert!(e.contains("refused") || e.contains("not trusted"), "{e}");
    assert!(src.table("a").is_some());
    assert!(all_up(&vr(&mut src, "a")));
    let mut dst = dest.finish();
    assert!(dst.table("a").is_none(), "state was taken from an untrusted peer");
    assert_eq!(vr(&mut dst, "a"), Value::Null);
    dst.stop().unwrap();
    // The right secret, but the source's address is not a listed peer.
    let d2 = TempDir::new("notpeer");
    let dest = start_dest(&d2.0, SECRET, vec!["192.0.2.9".parse().unwrap()]);
    let e = src
        .execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() })
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not take VRs from your address"), "{e}");
    let dst = dest.finish();
    assert!(dst.table("a").is_none());
    dst.stop().unwrap();
    assert!(src.table("a").is_some());
    src.stop().unwrap();
}

/// A destination that knows the secret and dies after `frames` frames (and, with `prepared`,
/// after saying it built the VR).
fn dying_destination(frames: usize, prepared: bool) -> (SocketAddr, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut ch = Channel::accept(s, SECRET.as_bytes()).unwrap();
        for _ in 0..frames {
            let (k, _) = ch.recv().unwrap();
            if k == migrate::END_ROUTES && prepared {
                ch.send(migrate::PREPARED, &[]).unwrap();
                let _ = ch.recv(); // the state; then it dies
                return;
            }
        }
    });
    (at, t)
}

#[test]
fn an_interrupted_migration_leaves_the_vr_running_at_the_source() {
    let d = TempDir::new("cut");
    let mut src = start(&source_text(), &d.0.join("src.yaml"));
    add_routes(&mut src);
    let addrs = boundaries(&src);
    let before = lookups(&src, &addrs);
    // Dies during the pre-copy, and after building the VR (the source had stopped it).
    for (frames, prepared) in [(1, false), (100, true)] {
        let (at, t) = dying_destination(frames, prepared);
        let e = src
            .execute(Command::Migrate { vr: "a".into(), to: at.to_string() })
            .unwrap_err()
            .to_string();
        t.join().unwrap();
        assert!(e.contains("went away"), "{e}");
        assert!(src.table("a").is_some(), "prepared {prepared}");
        assert_eq!(lookups(&src, &addrs), before);
        assert!(all_up(&vr(&mut src, "a")), "prepared {prepared}: interfaces left down");
    }
    src.stop().unwrap();
}

/// Learned neighbors for VR `a` of `node` (two IPv4, one IPv6, on both interfaces): put in as a
/// snapshot's restore puts them, the way a VR that has run a while has them.
fn learn_neighbors(node: &mut Node, dir: &Path) -> Vec<SnapNeighbor> {
    let n = |interface: u16, address: &str, mac: &str, reachable: bool| SnapNeighbor {
        interface,
        address: address.parse().unwrap(),
        mac: mac.into(),
        reachable,
    };
    let learned = vec![
        n(0, "10.0.0.7", "02:00:00:00:0b:07", true),
        n(1, "10.0.1.8", "02:00:00:00:0b:08", false),
        n(0, "2001:db8::9", "02:00:00:00:0b:09", true),
    ];
    let mut s = control::vr_state::take(node, "a").unwrap();
    s.meta.neighbors = learned.clone();
    let file = dir.join("learned.snap");
    snapshot::write_atomic(&file, &s.encode()).unwrap();
    node.execute(Command::VrRemove { vr: "a".into() }).unwrap();
    let r = node
        .execute(Command::Restore { snapshot: file.display().to_string(), name: None, down: false })
        .unwrap();
    assert_eq!(r.json()["neighbors"], 3, "{r}");
    learned
}

/// VR `a`'s learned (not static) neighbors as `neighbor_list` shows them: (address, mac).
fn learned_rows(node: &mut Node) -> Vec<(String, String)> {
    let n = node.execute(Command::NeighborList { vr: "a".into() }).unwrap();
    let mut rows: Vec<(String, String)> = n.json()["neighbors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] != "static")
        .map(|r| (r["address"].as_str().unwrap().into(), r["mac"].as_str().unwrap().into()))
        .collect();
    rows.sort();
    rows
}

fn rows_of(learned: &[SnapNeighbor]) -> Vec<(String, String)> {
    let mut rows: Vec<(String, String)> =
        learned.iter().map(|n| (n.address.to_string(), n.mac.clone())).collect();
    rows.sort();
    rows
}

#[test]
fn learned_neighbors_move_with_the_vr_and_stay_when_it_does_not() {
    let d = TempDir::new("neigh");
    let mut src = start(&source_text(), &d.0.join("src.yaml"));
    let learned = learn_neighbors(&mut src, &d.0);
    assert_eq!(learned_rows(&mut src), rows_of(&learned));
    // A destination that dies at the stop: the source's table is as it was.
    let (at, t) = dying_destination(100, true);
    let e = src.execute(Command::Migrate { vr: "a".into(), to: at.to_string() }).unwrap_err();
    t.join().unwrap();
    assert!(all_up(&vr(&mut src, "a")), "{e}");
    assert_eq!(learned_rows(&mut src), rows_of(&learned), "after a failed migration: {e}");
    // A real one: the destination has them, learned, with their MACs.
    let dest = start_dest(&d.0, SECRET, vec![]);
    src.execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() }).unwrap();
    let mut dst = dest.finish();
    assert_eq!(learned_rows(&mut dst), rows_of(&learned));
    let snap = control::vr_state::take(&dst, "a").unwrap();
    assert_eq!(rows_of(&snap.meta.neighbors), rows_of(&learned));
    dst.stop().unwrap();
    src.stop().unwrap();
}

/// Connections that never finish the handshake: each sends a frame head announcing an
/// `AUTH` body, then one byte every 500 ms (well inside any per-read timeout) until `stop`
/// or until the destination cuts it.
fn tricklers(at: SocketAddr, n: usize, stop: &Arc<AtomicBool>) -> Vec<JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(at).unwrap();
                let mut bytes =
                    [migrate::AUTH, 64, 0, 0, 0].into_iter().chain(std::iter::repeat(0));
                while !stop.load(Ordering::Relaxed) {
                    if s.write_all(&[bytes.next().unwrap()]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            })
        })
        .collect()
}

#[test]
fn trickling_connections_do_not_hold_up_a_migration() {
    let d = TempDir::new("trickle");
    let mut src = start(&source_text(), &d.0.join("src.yaml"));
    add_routes(&mut src);
    let dest = start_dest(&d.0, SECRET, vec![]);
    let stop = Arc::new(AtomicBool::new(false));
    // As many as may be in the handshake at once: the real source's connection is one more.
    let slow = tricklers(dest.addr(), migrate::MAX_HANDSHAKES, &stop);
    let t0 = Instant::now();
    while dest.listener().handshaking() < migrate::MAX_HANDSHAKES {
        assert!(t0.elapsed() < Duration::from_secs(30), "the tricklers never all connected");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = src.execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() });
    stop.store(true, Ordering::Relaxed);
    for t in slow {
        t.join().unwrap();
    }
    let r = r.unwrap();
    assert_eq!(r.json()["routes"], 2002, "{r}");
    let c = dest.listener().counts();
    let get = migrate::ListenerCounts::get;
    assert_eq!(get(&c.cut), 1, "the oldest trickler makes room for the source");
    assert_eq!(get(&c.accepted), migrate::MAX_HANDSHAKES as u64 + 1);
    assert_eq!((get(&c.busy), get(&c.not_a_peer)), (0, 0));
    let dst = dest.finish();
    assert!(dst.table("a").is_some());
    dst.stop().unwrap();
    src.stop().unwrap();
}

#[test]
fn migrations_past_the_bound_are_refused_at_once_and_the_next_one_goes() {
    let d = TempDir::new("busy");
    let mut src = start(&source_text(), &d.0.join("src.yaml"));
    let dest = start_dest(&d.0, SECRET, vec![]);
    // Sources that proved themselves and send nothing: each holds a place.
    let idle: Vec<Channel> = (0..migrate::MAX_INCOMING)
        .map(|_| Channel::connect(dest.addr(), SECRET.as_bytes()).unwrap())
        .collect();
    let t0 = Instant::now();
    while dest.listener().receiving() < migrate::MAX_INCOMING {
        assert!(t0.elapsed() < Duration::from_secs(30), "the idle sources were not taken");
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = src
        .execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() })
        .unwrap_err()
        .to_string();
    assert!(e.contains("busy"), "{e}");
    assert_eq!(migrate::ListenerCounts::get(&dest.listener().counts().busy), 1);
    assert!(src.table("a").is_some());
    assert!(all_up(&vr(&mut src, "a")));
    drop(idle);
    let t0 = Instant::now();
    while dest.listener().receiving() > 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "the idle sources' places never came back");
        std::thread::sleep(Duration::from_millis(10));
    }
    src.execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() }).unwrap();
    let dst = dest.finish();
    assert!(dst.table("a").is_some());
    dst.stop().unwrap();
    src.stop().unwrap();
}

#[test]
fn neighbors_with_a_group_mac_are_refused_at_the_commit() {
    let d = TempDir::new("groupmac");
    let src = start(&source_text(), &d.0.join("src.yaml"));
    let meta = control::vr_state::take(&src, "a").unwrap().meta;
    src.stop().unwrap();
    let dest = start_dest(&d.0, SECRET, vec![]);
    // A source that knows the secret and sends a broadcast MAC as a neighbor's.
    let mut ch = Channel::connect(dest.addr(), SECRET.as_bytes()).unwrap();
    ch.send(migrate::BEGIN, &snapshot::SnapshotV1 { meta, routes: vec![] }.encode()).unwrap();
    ch.send(migrate::END_ROUTES, &[]).unwrap();
    let (k, _) = ch.recv().unwrap();
    assert_eq!(k, migrate::PREPARED);
    let st = serde_json::json!({
        "vr": "a",
        "neighbors": [
            { "interface": 0, "address": "10.0.0.7", "mac": "02:00:00:00:0b:07", "reachable": true },
            { "interface": 1, "address": "10.0.1.9", "mac": "ff:ff:ff:ff:ff:ff", "reachable": true },
        ],
        "counters": [],
    });
    ch.send(migrate::STATE, &serde_json::to_vec(&st).unwrap()).unwrap();
    let e = ch.recv().unwrap_err().to_string();
    assert!(e.contains("vr a") && e.contains("10.0.1.9") && e.contains("ff:ff:ff:ff:ff:ff"), "{e}");
    drop(ch);
    let dst = dest.finish();
    assert!(dst.table("a").is_none(), "the VR was kept");
    dst.stop().unwrap();
}

#[test]
fn a_commit_past_the_sources_bound_is_refused_and_leaves_the_vr_down() {
    let d = TempDir::new("late");
    let mut src = start(&source_text(), &d.0.join("src.yaml"));
    let file = d.0.join("a.snap");
    src.execute(Command::Snapshot { vr: "a".into(), out: file.display().to_string() }).unwrap();
    let mut dst = start(DEST, &d.0.join("dst.yaml"));
    src.stop().unwrap();
    // Built down, as a migration's destination builds it.
    dst.execute(Command::Restore { snapshot: file.display().to_string(), name: None, down: true })
        .unwrap();
    assert!(!all_up(&vr(&mut dst, "a")));
    let commit = |not_after_ns| Command::MigrateCommit {
        vr: "a".into(),
        neighbors: vec![],
        counters: vec![],
        not_after_ns,
    };
    let past = control::sys::monotonic_ns() - 1;
    let e = dst.execute(commit(Some(past))).unwrap_err();
    assert_eq!(e.code(), "state");
    assert!(e.to_string().contains("past the source's bound"), "{e}");
    let v = vr(&mut dst, "a");
    assert!(v["interfaces"].as_array().unwrap().iter().all(|i| i["up"] == false), "{v}");
    // In time, it commits.
    let later = control::sys::monotonic_ns() + 60_000_000_000;
    dst.execute(commit(Some(later))).unwrap();
    assert!(all_up(&vr(&mut dst, "a")));
    dst.stop().unwrap();
}

#[test]
fn the_stop_bound_is_a_checked_key() {
    let parse = |m: &str| Topology::parse(&format!("migration: {m}\n"), "m.yaml", Path::new("."));
    let m = parse("{ secret: 0123456789abcdef }").unwrap().migration.unwrap();
    assert_eq!(m.stop_timeout, Duration::from_millis(500));
    let m = parse("{ secret: 0123456789abcdef, stop_timeout_ms: 800 }").unwrap().migration.unwrap();
    assert_eq!(m.stop_timeout, Duration::from_millis(800));
    for bad in ["5", "30001", "-1", "soon"] {
        let e = parse(&format!("{{ secret: 0123456789abcdef, stop_timeout_ms: {bad} }}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("stop_timeout_ms") && e.contains("m.yaml:1"), "{bad}: {e}");
    }
}

/// A destination that knows the secret, builds nothing, and stalls once it has the state
/// (until `release` is sent or 20 s pass).
fn stalling_destination() -> (SocketAddr, std::sync::mpsc::Sender<()>, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let (release, wait) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut ch = Channel::accept(s, SECRET.as_bytes()).unwrap();
        loop {
            let (k, _) = ch.recv().unwrap();
            if k == migrate::END_ROUTES {
                break;
            }
        }
        ch.send(migrate::PREPARED, &[]).unwrap();
        let (k, _) = ch.recv().unwrap();
        assert_eq!(k, migrate::STATE);
        let _ = wait.recv_timeout(Duration::from_secs(20));
    });
    (at, release, t)
}

/// One frame into VR `a` on p0, to 198.51.100.7 (via 10.0.1.2 on e1): whether it leaves on p1.
fn forwards(p0: &mut ports::mem::MemPort, p1: &mut ports::mem::MemPort) -> bool {
    use ports::Port;
    let f = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x10], [2, 0, 0, 0, 0x0a, 0])
        .ipv4([10, 0, 0, 10], [198, 51, 100, 7], 64)
        .udp(1000, 2000);
    let mut bytes = Vec::new();
    f.write(&mut bytes, &[1, 2, 3, 4]).unwrap();
    let mut b = ports::Batch::new(4);
    b.push_copy(&bytes);
    assert_eq!(p0.tx_burst(&mut b, &[0]), 1);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let mut rx = ports::Batch::new(64);
        if p1.rx_burst(&mut rx) > 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn a_destination_that_stalls_at_the_stop_is_abandoned_and_the_source_forwards() {
    let d = TempDir::new("stall");
    let text = source_text().replace("stop_timeout_ms: 5000", "stop_timeout_ms: 300");
    let mut src = start(&text, &d.0.join("src.yaml"));
    let learned = learn_neighbors(&mut src, &d.0);
    let mut p0 = src.take_outside("p0").unwrap();
    let mut p1 = src.take_outside("p1").unwrap();
    assert!(forwards(&mut p0, &mut p1));
    let (at, release, t) = stalling_destination();
    let t0 = Instant::now();
    let e = src
        .execute(Command::Migrate { vr: "a".into(), to: at.to_string() })
        .unwrap_err()
        .to_string();
    // Abandoned at the stop's bound (under a second by default), not at the 30 s a silent
    // peer gets elsewhere: 10 s is far from either.
    let took = t0.elapsed();
    let _ = release.send(());
    t.join().unwrap();
    assert!(took < Duration::from_secs(10), "{took:?}: {e}");
    assert!(e.contains("did not commit within 300 ms"), "{e}");
    assert!(src.table("a").is_some());
    assert!(all_up(&vr(&mut src, "a")));
    assert!(forwards(&mut p0, &mut p1), "the source does not forward after the abandoned stop");
    assert_eq!(learned_rows(&mut src), rows_of(&learned));
    src.stop().unwrap();
}

#[test]
fn the_migration_section_is_checked_and_its_secret_never_shown() {
    let parse = |m: &str| Topology::parse(&format!("migration: {m}\n"), "m.yaml", Path::new("."));
    let t =
        parse("{ listen: 10.9.0.2:9470, secret: 0123456789abcdef, peers: [10.9.0.1] }").unwrap();
    let m = t.migration.unwrap();
    assert_eq!(m.listen, Some("10.9.0.2:9470".parse().unwrap()));
    assert_eq!(m.peers, vec!["10.9.0.1".parse::<IpAddr>().unwrap()]);
    assert!(!format!("{m:?}").contains("0123456789abcdef"));
    let e = parse("{ secret: too-short }").unwrap_err().to_string();
    assert!(e.contains("at least 16") && !e.contains("too-short"), "{e}");
    let e = parse("{ secret: 0123456789abcdef, listen: nowhere }").unwrap_err().to_string();
    assert!(e.contains("IP:PORT"), "{e}");
    let e = parse("{ listen: 10.9.0.2:9470 }").unwrap_err().to_string();
    assert!(e.contains("secret"), "{e}");
}

/// Not a test: the figures of migrating a VR with the full IPv4 table (the project's prefix
/// list) over loopback between two hosts in this process. Prints JSON; run with
/// `cargo test -p control --test it migrate::full_table -- --ignored --nocapture` (the test profile
/// is optimised).
#[test]
#[ignore = "a benchmark: prints the figures of a full-table migration"]
fn full_table_migration_figures() {
    let table = std::env::var("ROUTEPLEX_PREFIXES").map(PathBuf::from).unwrap_or_else(|_| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/routeplex/prefixes")
    });
    let file = table.join("ipv4.txt");
    if !file.exists() {
        eprintln!("skipped: no {} (scripts/fetch-prefixes)", file.display());
        return;
    }
    let d = TempDir::new("full");
    let text = format!(
        "{}    tables: [{{ file: {}, next_hops: [10.0.1.2] }}]\n",
        source_text(),
        file.display()
    );
    let mut src = start(&text, &d.0.join("src.yaml"));
    let dest = start_dest(&d.0, SECRET, vec![]);
    let t0 = std::time::Instant::now();
    let r = src.execute(Command::Migrate { vr: "a".into(), to: dest.addr().to_string() }).unwrap();
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    let dst = dest.finish();
    let (v4, _) = dst.table("a").unwrap().fib_prefixes();
    println!(
        "{{\"routes\":{},\"fib_ipv4_at_destination\":{v4},\"wall_ms\":{wall:.1},\"migrate\":{r},\"limits\":\"debug-assertion test profile (opt-level 2), loopback TCP, one process, shared 2-CPU machine\"}}",
        r.json()["routes"]
    );
    dst.stop().unwrap();
    src.stop().unwrap();
}

/// Three hosts on one VXLAN segment over loopback: the source and the destination are
/// routeplex hosts (a switch with a vxlan member, and on the source VR `r` on the switch), the
/// third is this test, a bare UDP socket that never learns: it keeps sending its pings to
/// the source's VTEP, as a host does until the destination's announcements reach it. The
/// destination's announcements reach the source by the same vxlan member, and move the VR's
/// station there; the third host's pings that arrive after that must still reach the VR
/// (handed back to its member and on through the handoff tunnel) rather than be dropped as
/// `same_port`. Every ping is answered, and the source's switch counts each one sent after
/// the announcement as `handed_back`.
#[test]
fn pings_from_a_host_that_has_not_learned_the_move_reach_the_moved_vr() {
    use etherparse::{Icmpv4Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
    use std::net::UdpSocket;
    const VR_MAC: [u8; 6] = [2, 0, 0, 0, 0x0a, 0];
    const C_MAC: [u8; 6] = [2, 0, 0, 0, 0x0c, 3];
    let d = TempDir::new("third");
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let segment = |local: u8, remotes: &str| {
        format!(
            "ports:\n  - {{ name: vx, kind: vxlan, vni: 42, local: 127.0.0.{local}, remotes: [{remotes}], dstport: {port} }}\n\
             switches:\n  - {{ name: seg, members: [{{ port: vx }}] }}\n"
        )
    };
    let src_text = format!(
        "workers: 1\nmigration: {{ secret: {SECRET}, stop_timeout_ms: 5000 }}\n{}\
         vrs:\n  - name: r\n    interfaces:\n      \
         - {{ name: e0, switch: seg, mac: 02:00:00:00:0a:00, addresses: [10.9.0.1/24] }}\n    \
         neighbors:\n      - {{ address: 10.9.0.3, mac: 02:00:00:00:0c:03, interface: e0 }}\n",
        segment(1, "127.0.0.2, 127.0.0.3")
    );
    let mut src = start(&src_text, &d.0.join("src.yaml"));
    let dest = start_dest_with(
        &d.0,
        &format!("workers: 1\n{}", segment(2, "127.0.0.1, 127.0.0.3")),
        SECRET,
        vec!["127.0.0.1".parse().unwrap()],
    );
    let c = UdpSocket::bind(("127.0.0.3", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    let ping = |seq: u16| {
        let mut v = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
        PacketBuilder::ethernet2(C_MAC, VR_MAC)
            .ipv4([10, 9, 0, 3], [10, 9, 0, 1], 64)
            .icmpv4_echo_request(7, seq)
            .write(&mut v, &[0x5a; 32])
            .unwrap();
        c.send_to(&v, ("127.0.0.1", port)).unwrap();
    };
    // What arrives: an echo reply's sequence number, or the destination's announcement (an
    // ARP frame from the VR's MAC sent by the destination's VTEP).
    enum Got {
        Reply(u16),
        Announced,
    }
    let recv = || -> Option<Got> {
        let mut buf = [0u8; 2048];
        let (n, from) = c.recv_from(&mut buf).ok()?;
        let p = SlicedPacket::from_ethernet(buf.get(8..n)?).ok()?;
        let eth = p.link.as_ref()?.to_header()?;
        let eth = match eth {
            etherparse::LinkHeader::Ethernet2(e) => e,
            _ => return None,
        };
        if eth.ether_type == etherparse::EtherType::ARP && eth.source == VR_MAC {
            return (from.ip() == IpAddr::from([127, 0, 0, 2])).then_some(Got::Announced);
        }
        match (&p.net, &p.transport) {
            (Some(NetSlice::Ipv4(_)), Some(TransportSlice::Icmpv4(i))) => match i.icmp_type() {
                Icmpv4Type::EchoReply(e) if e.id == 7 => Some(Got::Reply(e.seq)),
                _ => None,
            },
            _ => None,
        }
    };
    // The path works before the move: the source's VR answers (its switch learns C).
    let t0 = Instant::now();
    let mut answered = std::collections::BTreeSet::new();
    while !answered.contains(&0) {
        assert!(t0.elapsed() < Duration::from_secs(5), "no answer from the source's VR");
        ping(0);
        for _ in 0..50 {
            if let Some(Got::Reply(s)) = recv() {
                answered.insert(s);
            }
        }
    }
    let to = dest.addr().to_string();
    let mover = std::thread::spawn(move || {
        let r = src.execute(Command::Migrate { vr: "r".into(), to });
        (src, r)
    });
    // A ping every 5 ms until 20 have gone after the announcement (100 ms, within the
    // source's drain), then nothing: the source then ends its drain and removes its VR.
    let (mut seq, mut after) = (1u16, None::<u16>);
    let mut next = Instant::now();
    while after.is_none_or(|a| seq < a + 20) {
        assert!(t0.elapsed() < Duration::from_secs(60), "no announcement from the destination");
        if Instant::now() >= next {
            ping(seq);
            seq += 1;
            next += Duration::from_millis(5);
        }
        match recv() {
            Some(Got::Reply(s)) => {
                answered.insert(s);
            }
            Some(Got::Announced) if after.is_none() => after = Some(seq),
            _ => {}
        }
    }
    let (src, r) = mover.join().unwrap();
    let r = r.unwrap();
    let quiet = Instant::now();
    while answered.len() < usize::from(seq) && quiet.elapsed() < Duration::from_secs(2) {
        if let Some(Got::Reply(s)) = recv() {
            answered.insert(s);
        }
    }
    let missing: Vec<u16> = (0..seq).filter(|s| !answered.contains(s)).collect();
    let status = serde_json::to_value(src.status().unwrap()).unwrap();
    let sw = &status["switches"][0];
    assert!(missing.is_empty(), "pings not answered: {missing:?} of 0..{seq} (announced before {after:?})\nmigration {r}\nsource's switch {sw:#}");
    // Exact: the destination's flood lists the source first among its remotes, so the
    // source has the announcement queued before this socket can see its own copy.
    let after = after.unwrap();
    assert_eq!(sw["counters"]["handed_back"], u64::from(seq - after), "{sw:#}");
    assert!(r.json()["forwarded"].as_u64().unwrap() >= u64::from(seq - after), "{r}");
    assert!(src.table("r").is_none(), "the source still has the VR");
    let mut dst = dest.finish();
    assert!(all_up(&vr(&mut dst, "r")));
    dst.stop().unwrap();
    src.stop().unwrap();
}
