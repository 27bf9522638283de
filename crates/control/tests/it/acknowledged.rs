//! The state a host acknowledged is the state it comes back with (issue 27, finding 3): live
//! changes (`interface_set`, `reserve`) that a later `apply` reverted stay reverted after a
//! restart, also once the journal was compacted; `vr_add` of one VR leaves another VR's live
//! MTU, addresses, up/down and reservation as they run, and a restart after it brings them
//! back as they ran.
//!
//! A restart here is what the daemon does at `up`: a new node from the same file, then the
//! journal of the run directory replayed into it (a replay that applied a topology record
//! compacts the journal, so the second restart reads what compaction wrote). No root needed:
//! mem ports only.

use crate::reply_json;
use reply_json::Json;

use std::path::{Path, PathBuf};

use control::api::Command;
use control::journal::{self, Journal};
use control::model::{IfaceDoc, PortDoc, PortKindDoc, VrDoc};
use control::runtime::Options;
use control::{Node, Topology};
use serde_json::{json, Value};

const FILE: &str = "ack.yaml";

const TEXT: &str = "\
workers: 1
ports:
  - { name: p0, kind: mem }
  - { name: p1, kind: mem }
  - { name: q0, kind: mem }
vrs:
  - name: r
    interfaces:
      - { name: a, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: p1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
  - name: s
    interfaces:
      - { name: a, port: q0, mac: 02:00:00:00:02:00, addresses: [10.1.0.1/24] }
";

/// A run directory of its own, removed on drop (also when the test fails).
struct RunDir(PathBuf);

impl RunDir {
    fn new(tag: &str) -> RunDir {
        let d = std::env::temp_dir().join(format!("rpx-ack-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        RunDir(d)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A data plane started from `TEXT` with the journal of `dir` replayed, as `up` starts one.
fn up(dir: &Path) -> (Node, Journal) {
    let o = Options::new(1);
    let topo = Topology::parse(TEXT, FILE, Path::new(".")).unwrap();
    let mut n = Node::start(topo, o, 256).unwrap();
    n.set_source(TEXT.into(), FILE.into());
    n.settle().unwrap();
    let (j, rep) = journal::recover(dir, &mut n).unwrap();
    assert_eq!(rep.skipped, 0, "{rep:?}");
    n.take_over().unwrap();
    (n, j)
}

/// Runs `cmd` and journals it, as the daemon does with a command that succeeded.
fn run(n: &mut Node, j: &mut Journal, cmd: Command) -> Value {
    let reply = n.execute(cmd.clone()).unwrap_or_else(|e| panic!("{}: {e}", cmd.name()));
    if journal::journaled(&cmd) {
        j.record(&cmd, &reply, n).unwrap();
    }
    reply.json()
}

fn mtu(vr: &str, interface: &str, mtu: u16) -> Command {
    Command::InterfaceSet {
        vr: vr.into(),
        interface: interface.into(),
        mtu: Some(mtu),
        up: None,
        addresses: None,
    }
}

fn reserve(vr: &str, spec: &[&str]) -> Command {
    Command::Reserve { vr: vr.into(), spec: spec.iter().map(|s| s.to_string()).collect() }
}

/// What runs of VR `vr`, as the workers report it: each interface's (name, MTU, up), and
/// its reservation (running and pending) as text.
fn running(n: &Node, vr: &str) -> (Vec<(String, u64, bool)>, String) {
    let st = n.status().unwrap();
    let v = st.json()["vrs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == vr)
        .unwrap_or_else(|| panic!("no vr {vr}: {st:#}"))
        .clone();
    let ifs = v["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_string(),
                i["mtu"].as_u64().unwrap(),
                i["up"].as_bool().unwrap(),
            )
        })
        .collect();
    (ifs, format!("{} {}", v["reservation"], v["pending_reservation"]))
}

/// VR `vr`'s addresses on `interface`, as control holds them.
fn addresses(n: &Node, vr: &str, interface: &str) -> Vec<String> {
    let v = n.topology().vrs.iter().find(|v| v.name == vr).unwrap();
    let f = v.interfaces.iter().find(|f| f.name == interface).unwrap();
    f.ipv4.iter().map(|a| a.to_string()).chain(f.ipv6.iter().map(|a| a.to_string())).collect()
}

fn vr_x() -> Command {
    let mut v = VrDoc::new("x");
    v.interfaces.push(IfaceDoc::on_port("a", "x0", "02:00:00:00:09:00", ["10.9.0.1/24"]));
    Command::VrAdd {
        vr: Box::new(v),
        ports: vec![PortDoc::new("x0", PortKindDoc::Mem { ring: None })],
    }
}

#[test]
fn live_changes_that_apply_reverted_stay_reverted_after_restarts_and_compaction() {
    let dir = RunDir::new("apply");
    let (mut n, mut j) = up(&dir.0);
    run(&mut n, &mut j, mtu("r", "b", 9000));
    run(&mut n, &mut j, reserve("r", &["packets=1234"]));
    assert_eq!(running(&n, "r").0[1], ("b".into(), 9000, true));
    assert!(running(&n, "r").1.contains("1234"), "{:?}", running(&n, "r"));
    // The file again, with a static route on s (so the text differs from the one started
    // from): r's MTU and reservation go back to the file's.
    let applied = TEXT.to_string() + "    routes: [{ prefix: 198.51.100.0/24, via: 10.1.0.2 }]\n";
    let r = run(
        &mut n,
        &mut j,
        Command::Apply { topology: applied.clone(), file: FILE.into(), dry_run: false },
    );
    let plan = r["plan"].to_string();
    assert!(plan.contains("mtu 9000 -> 1500") && plan.contains("reservation"), "{r}");
    let acknowledged = running(&n, "r");
    assert_eq!(acknowledged.0[1], ("b".into(), 1500, true));
    assert!(!acknowledged.1.contains("1234"), "{acknowledged:?}");
    n.stop().unwrap();
    drop(j);

    // First restart: the journal as appended (and compacted, as the replay applied a topology
    // record); second: what compaction wrote.
    for restart in ["first", "second"] {
        let (n, j) = up(&dir.0);
        assert_eq!(running(&n, "r"), acknowledged, "{restart} restart");
        assert_eq!(n.source_text(), Some(applied.as_str()), "{restart} restart");
        assert!(n
            .table("s")
            .unwrap()
            .routes(None, 100)
            .iter()
            .any(|r| r.prefix == "198.51.100.0/24".parse().unwrap()));
        n.stop().unwrap();
        drop(j);
    }
}

#[test]
fn vr_add_leaves_the_live_state_of_other_vrs_and_a_restart_brings_it_back() {
    let dir = RunDir::new("vradd");
    let (mut n, mut j) = up(&dir.0);
    run(&mut n, &mut j, mtu("r", "b", 4000));
    run(&mut n, &mut j, reserve("r", &["packets=1234"]));
    run(
        &mut n,
        &mut j,
        Command::InterfaceSet {
            vr: "r".into(),
            interface: "a".into(),
            mtu: None,
            up: Some(false),
            addresses: Some(vec![
                "10.0.5.1/24".parse().unwrap(),
                "2001:db8::1/64".parse().unwrap(),
            ]),
        },
    );
    let live = running(&n, "r");
    assert_eq!(live.0, vec![("a".into(), 1500, false), ("b".into(), 4000, true)]);
    assert!(live.1.contains("1234"), "{live:?}");

    // Adding an unrelated VR changes nothing else: its plan has its one step.
    let r = run(&mut n, &mut j, vr_x());
    assert_eq!(r["plan"], json!(["+ vr x (new cell; opens x0)"]), "{r}");
    assert_eq!(running(&n, "r"), live);
    assert_eq!(addresses(&n, "r", "a"), ["10.0.5.1/24", "2001:db8::1/64"]);
    // Nor does removing it.
    let r = run(&mut n, &mut j, Command::VrRemove { vr: "x".into() });
    assert_eq!(r["plan"], json!(["- vr x (its cell stops; ports x0 close)"]), "{r}");
    let r = run(&mut n, &mut j, vr_x());
    assert_eq!(r["plan"], json!(["+ vr x (new cell; opens x0)"]), "{r}");
    n.stop().unwrap();
    drop(j);

    for restart in ["first", "second"] {
        let (n, j) = up(&dir.0);
        assert_eq!(running(&n, "r"), live, "{restart} restart");
        assert_eq!(addresses(&n, "r", "a"), ["10.0.5.1/24", "2001:db8::1/64"], "{restart}");
        assert!(n.table("x").is_some(), "{restart} restart: vr x is missing");
        n.stop().unwrap();
        drop(j);
    }
}

#[test]
fn apply_of_the_text_started_from_reverts_live_changes_for_good() {
    let dir = RunDir::new("same");
    let (mut n, mut j) = up(&dir.0);
    run(&mut n, &mut j, mtu("r", "b", 9000));
    let r = run(
        &mut n,
        &mut j,
        Command::Apply { topology: TEXT.into(), file: FILE.into(), dry_run: false },
    );
    assert_eq!(r["plan"], json!(["~ vr r: interface b mtu 9000 -> 1500"]), "{r}");
    let acknowledged = running(&n, "r");
    n.stop().unwrap();
    drop(j);
    let (n, j) = up(&dir.0);
    assert_eq!(running(&n, "r"), acknowledged);
    n.stop().unwrap();
    drop(j);
}

/// A migration's commit is journaled as itself (a few hundred bytes: the neighbors and
/// counters it put in), not as the whole VR again: the VR came in through a restore with its
/// interfaces down, journaled then, routes and all. A restart brings the VR back as the
/// commit left it, up, with its routes and the neighbors the source had learned, and so does
/// the restart after, which reads what compaction wrote.
#[test]
fn a_migrated_vr_comes_back_as_its_commit_left_it() {
    use control::api::Route;
    use control::snapshot::SnapNeighbor;
    let dir = RunDir::new("commit");
    let (mut n, mut j) = up(&dir.0);
    let routes: Vec<Route> = (0..2000u32)
        .map(|k| Route {
            prefix: format!("100.{}.{}.0/24", 64 + (k >> 8), k & 255).parse().unwrap(),
            via: Some("10.0.1.2".parse().unwrap()),
            interface: None,
            blackhole: false,
        })
        .collect();
    run(&mut n, &mut j, Command::RouteAdd { vr: "r".into(), routes });
    let snap = dir.0.join("r.snap");
    run(&mut n, &mut j, Command::Snapshot { vr: "r".into(), out: snap.display().to_string() });
    // As a destination receives it: built down from the source's snapshot, then committed.
    run(&mut n, &mut j, Command::VrRemove { vr: "r".into() });
    let at = j.len();
    run(
        &mut n,
        &mut j,
        Command::Restore { snapshot: snap.display().to_string(), name: None, down: true },
    );
    let restore_bytes = j.len() - at;
    assert!(running(&n, "r").0.iter().all(|i| !i.2), "{:?}", running(&n, "r"));
    let learned = SnapNeighbor {
        interface: 1,
        address: "10.0.1.9".parse().unwrap(),
        mac: "02:00:00:00:0b:09".into(),
        reachable: true,
    };
    let at = j.len();
    run(
        &mut n,
        &mut j,
        Command::MigrateCommit {
            vr: "r".into(),
            neighbors: vec![learned],
            counters: vec![("forwarded".into(), 77)],
            not_after_ns: Some(control::sys::monotonic_ns() + 60_000_000_000),
        },
    );
    let commit_bytes = j.len() - at;
    assert!(
        commit_bytes < 1024 && restore_bytes > 10 * commit_bytes,
        "the commit took {commit_bytes} bytes of journal, the restore {restore_bytes}"
    );
    let acknowledged = running(&n, "r");
    assert!(acknowledged.0.iter().all(|i| i.2), "{acknowledged:?}");
    let has_neighbor = |n: &mut Node| {
        let l = n.execute(Command::NeighborList { vr: "r".into() }).unwrap().json();
        l["neighbors"].as_array().unwrap().iter().any(|r| r["address"] == "10.0.1.9")
    };
    assert!(has_neighbor(&mut n));
    let table = n.table("r").unwrap().routes(None, usize::MAX);
    n.stop().unwrap();
    drop(j);

    for restart in ["first", "second"] {
        let (mut n, j) = up(&dir.0);
        assert_eq!(running(&n, "r"), acknowledged, "{restart} restart");
        assert_eq!(n.table("r").unwrap().routes(None, usize::MAX), table, "{restart} restart");
        assert!(has_neighbor(&mut n), "{restart} restart: the learned neighbor is gone");
        n.stop().unwrap();
        drop(j);
    }
}
