//! Real routing daemons in VRs' Linux control planes. Two VRs joined by a routeplex switch run
//! BIRD with OSPF in their mirror namespaces: each learns the other's stub network (BIRD puts
//! it in the namespace's kernel, route sync puts it in the VR), hosts behind them ping end to
//! end, and when one VR's link is taken down (the API's `interface_set`, which its mirror
//! follows) the route goes and comes back with the link. Needs root and BIRD; says why it
//! skips otherwise. Every daemon runs with its config, socket and pid file in a private
//! temporary directory and is killed when the test ends, pass or fail.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use control::api::Command as Api;
use control::netns::Made;
use control::runtime::{Idle, Options};
use control::{Node, Topology};
use dataplane::RouteSource;
use ipnet::IpNet;

/// What the test made: namespaces, daemons, a directory; all removed when dropped.
struct Guard {
    namespaces: Vec<String>,
    made: Made,
    daemons: Vec<Child>,
    dir: PathBuf,
}

impl Guard {
    fn new(tag: &str) -> Guard {
        let dir = std::env::temp_dir().join(format!("rcp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        Guard { namespaces: Vec::new(), made: Made::default(), daemons: Vec::new(), dir }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for e in control::netns::remove(&self.made) {
            eprintln!("cleanup: {e}");
        }
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        if std::thread::panicking() {
            eprintln!("daemon logs left in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap()
}

#[track_caller]
fn ok(cmd: &str, args: &[&str]) {
    let o = run(cmd, args);
    assert!(o.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn in_ns(ns: &str, args: &[&str]) -> Output {
    let mut a = vec!["netns", "exec", ns];
    a.extend(args);
    run("ip", &a)
}

/// A host namespace `ns` behind `link` (left here for an afpacket port), as in
/// control_plane.rs.
fn host(g: &mut Guard, ns: &str, link: &str, addrs: &[&str], gws: &[&str]) {
    ok("ip", &["netns", "add", ns]);
    g.namespaces.push(ns.to_string());
    ok("ip", &["link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns]);
    for a in addrs {
        ok("ip", &["-n", ns, "address", "add", a, "dev", "eth0", "nodad"]);
    }
    ok("ip", &["-n", ns, "link", "set", "eth0", "up"]);
    ok("ip", &["-n", ns, "link", "set", "lo", "up"]);
    for g in gws {
        ok("ip", &["-n", ns, "route", "add", "default", "via", g]);
    }
    let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
    let mut a = vec!["-K", link];
    a.extend(off);
    ok("ethtool", &a);
    let mut a = vec!["netns", "exec", ns, "ethtool", "-K", "eth0"];
    a.extend(off);
    ok("ip", &a);
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{link}/disable_ipv6"), "1");
    ok("ip", &["link", "set", link, "up"]);
}

fn have(cmd: &str) -> bool {
    run("sh", &["-c", &format!("command -v {cmd}")]).status.success()
}

/// Starts BIRD in namespace `ns` with `conf`, its files under the guard's directory.
fn bird(g: &mut Guard, ns: &str, name: &str, conf: &str) {
    let dir = g.dir.join(name);
    std::fs::create_dir(&dir).unwrap();
    let log = dir.join("bird.log");
    let conf = format!("log \"{}\" all;\n{conf}", log.display());
    let cf = dir.join("bird.conf");
    std::fs::write(&cf, conf).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "bird", "-f", "-c"])
        .arg(&cf)
        .arg("-s")
        .arg(dir.join("bird.ctl"))
        .arg("-P")
        .arg(dir.join("bird.pid"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    g.daemons.push(child);
}

fn options() -> Options {
    let mut o = Options::new(1);
    o.idle = Idle::Yield;
    o
}

/// Whether VR `vr` holds a `kernel` route for `prefix`.
fn has_kernel_route(node: &Node, vr: &str, prefix: &str) -> bool {
    let p: IpNet = prefix.parse().unwrap();
    node.table(vr)
        .unwrap()
        .routes(Some(RouteSource::Kernel), usize::MAX)
        .iter()
        .any(|r| r.prefix == p && r.best)
}

/// Syncs until `cond` holds or `secs` pass; whether it held.
fn wait(node: &mut Node, secs: u64, mut cond: impl FnMut(&Node) -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        node.sync_control_planes();
        if cond(node) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn ospf_conf(router_id: &str) -> String {
    format!(
        "router id {router_id};\n\
         protocol device {{ scan time 1; }}\n\
         protocol kernel {{ ipv4 {{ export all; import none; }}; scan time 2; }}\n\
         protocol ospf v2 {{\n  ipv4 {{ import all; export none; }};\n  area 0 {{\n    \
         interface \"c\" {{ type broadcast; hello 1; dead 4; }};\n    \
         interface \"h\" {{ stub yes; }};\n  }};\n}}\n"
    )
}

fn logs(g: &Guard) -> String {
    let mut s = String::new();
    for n in ["r1", "r2"] {
        let l = std::fs::read_to_string(g.dir.join(n).join("bird.log")).unwrap_or_default();
        let tail: Vec<&str> = l.lines().rev().take(15).collect();
        s += &format!("--- {n} bird.log (last lines, newest first)\n{}\n", tail.join("\n"));
    }
    s
}

#[test]
fn bird_ospf_between_two_vrs() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, taps)");
        return;
    }
    if !have("bird") {
        eprintln!("skipped: BIRD is not installed (scripts/setup installs bird2)");
        return;
    }
    let pid = std::process::id();
    let mut g = Guard::new("ospf");
    let (ha, hb) = (format!("rcpoa{pid}"), format!("rcpob{pid}"));
    let (m1, m2) = (format!("rcpo1{pid}"), format!("rcpo2{pid}"));
    let (la, lb) = (format!("rcp{pid}oa"), format!("rcp{pid}ob"));
    host(&mut g, &ha, &la, &["10.64.1.2/24"], &["10.64.1.1"]);
    host(&mut g, &hb, &lb, &["10.64.2.2/24"], &["10.64.2.1"]);
    let text = format!(
        "ports:\n  - {{ name: pa, kind: afpacket, interface: {la} }}\n  - {{ name: pb, kind: afpacket, interface: {lb} }}\n\
         switches:\n  - name: core\n\
         vrs:\n  - name: r1\n    control_plane: {{ kind: linux, netns: {m1} }}\n    interfaces:\n      \
         - {{ name: h, port: pa, mac: 02:00:00:00:64:01, addresses: [10.64.1.1/24] }}\n      \
         - {{ name: c, switch: core, mac: 02:00:00:00:64:11, addresses: [10.64.0.1/24] }}\n  \
         - name: r2\n    control_plane: {{ kind: linux, netns: {m2} }}\n    interfaces:\n      \
         - {{ name: h, port: pb, mac: 02:00:00:00:64:02, addresses: [10.64.2.1/24] }}\n      \
         - {{ name: c, switch: core, mac: 02:00:00:00:64:12, addresses: [10.64.0.2/24] }}\n"
    );
    let topo = Topology::parse(&text, "ospf.yaml", Path::new(".")).unwrap();
    control::netns::make(&topo, &mut g.made).unwrap();
    let mut node = Node::start(topo, options(), 64).unwrap();
    bird(&mut g, &m1, "r1", &ospf_conf("10.64.0.1"));
    bird(&mut g, &m2, "r2", &ospf_conf("10.64.0.2"));

    // Each VR learns the other's stub network from OSPF, through its kernel.
    let learned = wait(&mut node, 60, |n| {
        has_kernel_route(n, "r1", "10.64.2.0/24") && has_kernel_route(n, "r2", "10.64.1.0/24")
    });
    assert!(
        learned,
        "OSPF routes did not reach the VRs\n{:#}\n{}",
        node.status().unwrap(),
        logs(&g)
    );
    let ping =
        |dst: &str| in_ns(&ha, &["ping", "-c", "3", "-i", "0.2", "-W", "1", dst]).status.success();
    assert!(ping("10.64.2.2"), "end to end through both VRs\n{:#}", node.status().unwrap());

    // r1's link goes down: its mirror follows, BIRD drops the adjacency, the route goes.
    let set = |node: &mut Node, up: bool| {
        node.execute(Api::InterfaceSet {
            vr: "r1".into(),
            interface: "c".into(),
            mtu: None,
            up: Some(up),
            addresses: None,
        })
        .unwrap();
    };
    set(&mut node, false);
    let gone = wait(&mut node, 30, |n| !has_kernel_route(n, "r1", "10.64.2.0/24"));
    assert!(gone, "the route outlived the link\n{}", logs(&g));
    assert!(!ping("10.64.2.2"));
    // And back: OSPF reconverges.
    set(&mut node, true);
    let back = wait(&mut node, 60, |n| {
        has_kernel_route(n, "r1", "10.64.2.0/24") && has_kernel_route(n, "r2", "10.64.1.0/24")
    });
    assert!(back, "OSPF did not reconverge\n{}", logs(&g));
    assert!(ping("10.64.2.2"), "end to end again\n{:#}", node.status().unwrap());
    let st = node.status().unwrap();
    for v in st["vrs"].as_array().unwrap() {
        assert_eq!(v["control_plane"]["refused"], 0, "{v:#}");
        assert!(v["counters"]["punted"].as_u64().unwrap_or(0) > 0, "{v:#}");
        assert!(v["counters"]["injected"].as_u64().unwrap_or(0) > 0, "{v:#}");
    }
    node.stop().unwrap();
}
