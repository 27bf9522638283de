//! Snapshots: a VR with static, table and API routes (IPv4 and IPv6, overlapping sources,
//! gateways, interface routes, blackholes), limits, a reservation and counters is written to a
//! snapshot file and restored into another running host. The restored VR forwards every
//! prefix boundary (the first and last address of every prefix, and the addresses just
//! outside) to the same adjacency as the original (or to none, as it did), lists the same
//! routes with the same sources, and has the counters, schedule and neighbors of the snapshot.
//! Damaged snapshots are refused with what was wrong and change nothing.

use crate::reply_json;
use reply_json::Json;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use control::api::{Command, Route};
use control::runtime::Options;
use control::snapshot::{self, SnapNeighbor, Snapshot};
use control::{ControlError, Node, Topology};
use dataplane::Adj;
use ipnet::IpNet;
use ports::Port;
use serde_json::Value;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("rsn-{tag}-{}", std::process::id()));
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

/// xorshift64*: the same routes on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn v4(&mut self) -> IpNet {
        let len = 8 + (self.next() % 25) as u8;
        IpNet::new(IpAddr::V4(Ipv4Addr::from(self.next() as u32)), len).unwrap().trunc()
    }

    fn v6(&mut self) -> IpNet {
        let len = 16 + (self.next() % 49) as u8;
        let a = (0x2400u128 << 112) | (u128::from(self.next()) << 48);
        IpNet::new(IpAddr::V6(Ipv6Addr::from(a)), len).unwrap().trunc()
    }
}

fn topology(dir: &Path) -> String {
    let mut rng = Rng(0x5eed_0003);
    let mut seen = std::collections::HashSet::new();
    let mut t4 = String::new();
    for i in 0..6000 {
        let p = rng.v4();
        if seen.insert(p) {
            t4.push_str(&format!("{p} {}\n", i % 7));
        }
    }
    let mut t6 = String::new();
    for i in 0..2000 {
        let p = rng.v6();
        if seen.insert(p) {
            t6.push_str(&format!("{p} {}\n", i % 3));
        }
    }
    std::fs::write(dir.join("t4.txt"), t4).unwrap();
    std::fs::write(dir.join("t6.txt"), t6).unwrap();
    format!(
        "\
workers: 2
ports:
  - {{ name: p0, kind: mem, ring: 4096 }}
  - {{ name: p1, kind: mem, ring: 4096 }}
vrs:
  - name: a
    interfaces:
      - {{ name: e0, port: p0, mac: 02:00:00:00:0a:00, addresses: [10.0.0.1/24, 2001:db8::1/64] }}
      - {{ name: e1, port: p1, mac: 02:00:00:00:0a:01, mtu: 1400, addresses: [10.0.1.1/24, 2001:db8:1::1/64] }}
    routes:
      - {{ prefix: 198.51.100.0/24, via: 10.0.1.2 }}
      - {{ prefix: 192.0.2.0/24, blackhole: true }}
      - {{ prefix: 203.0.113.0/25, interface: e1 }}
      - {{ prefix: 2001:db8:99::/48, via: 2001:db8:1::2 }}
    neighbors:
      - {{ address: 10.0.1.2, mac: 02:00:00:00:0b:02, interface: e1 }}
    tables:
      - {{ file: {}/t4.txt, next_hops: [10.0.1.2, 10.0.0.2] }}
      - {{ file: {}/t6.txt, next_hops: [2001:db8:1::2, {{ via: fe80::2, interface: e0 }}] }}
    limits: {{ neighbors: 2048, neighbor_reachable_ms: 20000 }}
    reservation: {{ packets: 100000, period_us: 1000, weight: 2 }}
    batch: 64
",
        dir.display(),
        dir.display()
    )
}

const OTHER: &str = "\
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
    let o = Options::new(topo.workers.count().unwrap_or(1));
    let mut n = Node::start(topo, o, 256).unwrap();
    n.set_source(text.to_string(), file.display().to_string());
    n
}

/// API routes: over the table's prefixes and beside them, via both gateways, out of an
/// interface, blackholes; IPv6 too.
fn api_routes() -> Vec<Route> {
    let mut rng = Rng(0x5eed_0003);
    let mut out = Vec::new();
    for i in 0..3000u32 {
        // The first 1500 repeat table prefixes (API beats table), the rest are new.
        let prefix = if i < 1500 { rng.v4() } else { Rng(u64::from(i) * 7919 + 1).v4() };
        let (via, interface, blackhole) = match i % 4 {
            0 => (Some("10.0.0.2".parse().unwrap()), None, false),
            1 => (Some("10.0.1.3".parse().unwrap()), Some("e1".to_string()), false),
            2 => (None, Some("e0".to_string()), false),
            _ => (None, None, true),
        };
        out.push(Route { prefix, via, interface, blackhole });
    }
    let mut r6 = Rng(99);
    for i in 0..500 {
        let via = if i % 2 == 0 { "2001:db8::2" } else { "2001:db8:1::9" };
        out.push(Route {
            prefix: r6.v6(),
            via: Some(via.parse().unwrap()),
            interface: None,
            blackhole: false,
        });
    }
    out.sort_by_key(|r| r.prefix);
    out.dedup_by_key(|r| r.prefix);
    out
}

/// The first and last address of every prefix the VR has, and the addresses just outside.
fn boundaries(node: &Node, vr: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for r in node.table(vr).unwrap().routes(None, usize::MAX) {
        match r.prefix {
            IpNet::V4(n) => {
                let (a, b) = (u32::from(n.network()), u32::from(n.broadcast()));
                out.extend([a, b].map(|x| IpAddr::V4(x.into())));
                out.extend(a.checked_sub(1).map(|x| IpAddr::V4(x.into())));
                out.extend(b.checked_add(1).map(|x| IpAddr::V4(x.into())));
            }
            IpNet::V6(n) => {
                let (a, b) = (u128::from(n.network()), u128::from(n.broadcast()));
                out.extend([a, b].map(|x| IpAddr::V6(x.into())));
                out.extend(a.checked_sub(1).map(|x| IpAddr::V6(x.into())));
                out.extend(b.checked_add(1).map(|x| IpAddr::V6(x.into())));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn forwarding(node: &Node, vr: &str, addrs: &[IpAddr]) -> Vec<Adj> {
    let view = node.table(vr).unwrap().view();
    addrs.iter().map(|&a| view.lookup(a)).collect()
}

fn vr_status(node: &mut Node, vr: &str) -> Value {
    let s = node.execute(Command::Status).unwrap();
    s.json()["vrs"].as_array().unwrap().iter().find(|v| v["name"] == vr).cloned().unwrap()
}

/// Sends `n` frames through VR a (in on p0, out on p1 to 198.51.100.0/24) and waits until they
/// are counted.
fn traffic(node: &mut Node, n: u64) {
    let mut p0 = node.take_outside("p0").unwrap();
    let mut p1 = node.take_outside("p1").unwrap();
    let mut b = ports::Batch::new(64);
    for k in 0..n {
        let f = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x10], [2, 0, 0, 0, 0x0a, 0])
            .ipv4([10, 0, 0, 10], [198, 51, 100, 7], 64)
            .udp(1000, 2000);
        let mut bytes = Vec::new();
        f.write(&mut bytes, &k.to_le_bytes()).unwrap();
        b.push_copy(&bytes);
    }
    let sel: Vec<u16> = (0..b.len() as u16).collect();
    assert_eq!(p0.tx_burst(&mut b, &sel), n as usize);
    let t0 = Instant::now();
    let mut got = 0;
    while got < n && t0.elapsed() < Duration::from_secs(20) {
        let mut rx = ports::Batch::new(64);
        got += p1.rx_burst(&mut rx) as u64;
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got, n, "frames through vr a");
}

#[test]
fn a_restored_vr_forwards_every_prefix_boundary_as_the_original() {
    let dir = TempDir::new("equiv");
    let text = topology(&dir.0);
    let mut src = start(&text, &dir.0.join("src.yaml"));
    let routes = api_routes();
    let added = src.execute(Command::RouteAdd { vr: "a".into(), routes: routes.clone() }).unwrap();
    assert_eq!(added.json()["added"], routes.len());
    traffic(&mut src, 10);

    let before_routes = src.table("a").unwrap().routes(None, usize::MAX);
    let addrs = boundaries(&src, "a");
    assert!(addrs.len() > 30_000, "{} boundary addresses", addrs.len());
    let before = forwarding(&src, "a", &addrs);
    // Every kind of answer is among them, so the comparison means something.
    for want in [Adj::None, Adj::Local, Adj::Blackhole, Adj::Broadcast] {
        assert!(before.contains(&want), "no {want:?} among the boundaries");
    }
    assert!(before.iter().any(|a| matches!(a, Adj::Glean(1))));
    assert!(before.iter().any(|a| matches!(a, Adj::Via { iface: 0, .. })));
    assert!(before.iter().any(|a| matches!(a, Adj::Via { iface: 1, .. })));
    let counters_before = vr_status(&mut src, "a")["counters"].clone();
    assert_eq!(counters_before["forwarded"], 10);

    let file = dir.0.join("a.snap");
    let w =
        src.execute(Command::Snapshot { vr: "a".into(), out: file.display().to_string() }).unwrap();
    let api_and_more = before_routes.iter().filter(|r| r.source.is_operable()).count();
    assert_eq!(w.json()["routes"], api_and_more);
    let md = std::fs::metadata(&file).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777, 0o600);
    assert_eq!(w.json()["bytes"], md.len());

    // Into another host, which lacks the VR's ports: they come from the snapshot.
    let mut dst = start(OTHER, &dir.0.join("dst.yaml"));
    let r = dst
        .execute(Command::Restore { snapshot: file.display().to_string(), name: None, down: false })
        .unwrap();
    assert_eq!(r.json()["vr"], "a");
    assert_eq!(r.json()["routes"], api_and_more);

    let after = forwarding(&dst, "a", &addrs);
    let differ: Vec<String> = addrs
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (b, a))| b != a)
        .take(5)
        .map(|(ip, (b, a))| format!("{ip}: {b:?} before, {a:?} after"))
        .collect();
    assert!(differ.is_empty(), "forwarding differs: {differ:?}");
    assert_eq!(dst.table("a").unwrap().routes(None, usize::MAX), before_routes);

    let st = vr_status(&mut dst, "a");
    assert_eq!(st["counters"], counters_before);
    assert_eq!(st["batch"], 64);
    assert_eq!(st["reservation"], vr_status(&mut src, "a")["reservation"]);
    assert_eq!(st["interfaces"], vr_status(&mut src, "a")["interfaces"]);
    // The restored VR forwards real frames too.
    traffic(&mut dst, 5);
    assert_eq!(vr_status(&mut dst, "a")["counters"]["forwarded"], 15);

    // The same snapshot again is refused: the name is taken. Under another name it would
    // share the VR's MACs on its ports, which the host refuses too; nothing changes.
    let e = dst
        .execute(Command::Restore { snapshot: file.display().to_string(), name: None, down: false })
        .unwrap_err();
    assert!(e.to_string().contains("exists already"), "{e}");
    let e = dst
        .execute(Command::Restore {
            snapshot: file.display().to_string(),
            name: Some("b".into()),
            down: false,
        })
        .unwrap_err();
    assert!(dst.table("b").is_none(), "{e}");
    assert!(dst.topology().vr_index("b").is_none());
    src.stop().unwrap();
    dst.stop().unwrap();
}

#[test]
fn learned_neighbors_come_back_with_their_state() {
    let dir = TempDir::new("neigh");
    let text = topology(&dir.0);
    let mut src = start(&text, &dir.0.join("src.yaml"));
    let s = control::vr_state::take(&src, "a").unwrap();
    let mut s2 = s.clone();
    s2.meta.neighbors = vec![
        SnapNeighbor {
            interface: 1,
            address: "10.0.1.7".parse().unwrap(),
            mac: "02:00:00:00:0b:07".into(),
            reachable: true,
        },
        SnapNeighbor {
            interface: 0,
            address: "2001:db8::7".parse().unwrap(),
            mac: "02:00:00:00:0b:08".into(),
            reachable: false,
        },
    ];
    let file = dir.0.join("n.snap");
    snapshot::write_atomic(&file, &s2.encode()).unwrap();
    src.execute(Command::VrRemove { vr: "a".into() }).unwrap();
    let r = src
        .execute(Command::Restore { snapshot: file.display().to_string(), name: None, down: false })
        .unwrap();
    assert_eq!(r.json()["neighbors"], 2);
    let n = src.execute(Command::NeighborList { vr: "a".into() }).unwrap();
    let n_j = n.json();
    let rows = n_j["neighbors"].as_array().unwrap();
    let find = |ip: &str| rows.iter().find(|r| r["address"] == ip).cloned().unwrap();
    assert_eq!(find("10.0.1.7")["state"], "reachable");
    assert_eq!(find("10.0.1.7")["mac"], "02:00:00:00:0b:07");
    assert_eq!(find("10.0.1.7")["interface"], "e1");
    assert_eq!(find("2001:db8::7")["state"], "stale");
    assert_eq!(find("10.0.1.2")["state"], "static");
    // And a snapshot taken now carries them.
    let again = control::vr_state::take(&src, "a").unwrap();
    assert_eq!(again.meta.neighbors.len(), 2);
    src.stop().unwrap();
}

#[test]
fn a_neighbor_with_a_group_or_zero_mac_is_refused() {
    let dir = TempDir::new("badmac");
    let text = topology(&dir.0);
    let mut src = start(&text, &dir.0.join("src.yaml"));
    let s = control::vr_state::take(&src, "a").unwrap();
    src.execute(Command::VrRemove { vr: "a".into() }).unwrap();
    for mac in ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "33:33:00:00:00:01", "00:00:00:00:00:00"]
    {
        let mut bad = s.clone();
        bad.meta.neighbors = vec![
            SnapNeighbor {
                interface: 1,
                address: "10.0.1.7".parse().unwrap(),
                mac: "02:00:00:00:0b:07".into(),
                reachable: true,
            },
            SnapNeighbor {
                interface: 0,
                address: "10.0.0.9".parse().unwrap(),
                mac: mac.into(),
                reachable: true,
            },
        ];
        let file = dir.0.join("badmac.snap");
        snapshot::write_atomic(&file, &bad.encode()).unwrap();
        let e = src
            .execute(Command::Restore {
                snapshot: file.display().to_string(),
                name: None,
                down: false,
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("vr a") && e.contains("10.0.0.9") && e.contains(mac), "{mac}: {e}");
        assert!(src.table("a").is_none(), "{mac}: restored anyway");
    }
    src.stop().unwrap();
}

#[test]
fn damaged_snapshots_are_refused_and_change_nothing() {
    let dir = TempDir::new("bad");
    let text = topology(&dir.0);
    let mut src = start(&text, &dir.0.join("src.yaml"));
    let good = control::vr_state::take(&src, "a").unwrap().encode();
    assert!(matches!(
        snapshot::decode("x", &good).unwrap(),
        Snapshot::V1(ref s) if s.meta.vr.name == "a"
    ));
    src.execute(Command::VrRemove { vr: "a".into() }).unwrap();
    let status_before = src.execute(Command::Status).unwrap().json()["vrs"].clone();

    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    let mut b = good.clone();
    b[..8].copy_from_slice(b"NOTASNAP");
    cases.push(("magic", b, "not a routeplex snapshot"));
    let mut b = good.clone();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    cases.push(("version", b, "format version 2"));
    let mut b = good.clone();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    cases.push(("checksum", b, "checksum mismatch"));
    cases.push(("truncated", good[..good.len() - 100].to_vec(), "truncated"));
    cases.push(("empty", Vec::new(), "truncated"));
    let mut b = good.clone();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    cases.push(("oversized", b, "more than"));
    for (what, bytes, want) in cases {
        let f = dir.0.join(format!("{what}.snap"));
        std::fs::write(&f, &bytes).unwrap();
        let e = src
            .execute(Command::Restore {
                snapshot: f.display().to_string(),
                name: None,
                down: false,
            })
            .unwrap_err();
        assert!(matches!(e, ControlError::Snapshot(_)), "{what}: {e}");
        assert_eq!(e.code(), "snapshot");
        let msg = e.to_string();
        assert!(msg.contains(want) && msg.contains(&f.display().to_string()), "{what}: {msg}");
        assert_eq!(src.execute(Command::Status).unwrap().json()["vrs"], status_before, "{what}");
        assert!(src.table("a").is_none(), "{what}");
    }
    // The good one still restores.
    let f = dir.0.join("good.snap");
    std::fs::write(&f, &good).unwrap();
    src.execute(Command::Restore { snapshot: f.display().to_string(), name: None, down: false })
        .unwrap();
    assert!(src.table("a").is_some());
    src.stop().unwrap();
}
