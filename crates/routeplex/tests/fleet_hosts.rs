//! A fleet of three hosts end to end, with real kernels, processes and etcd (needs root;
//! skipped, saying why, without it or without etcd/etcdctl).
//!
//! The test bed: an underlay bridge in the root namespace with an address; three host
//! namespaces on it (h1..h3, one veth each), a watcher namespace on it too, and a real 3-member
//! etcd cluster listening on the bridge's address. Each host runs `routeplex run` inside its
//! namespace with a `fleet:` section (3 s lease TTL); a Linux end host (namespace e1..e3)
//! hangs off each host on an afpacket port. [`place`] writes each host's desired topology to
//! etcd, as a controller does: VR rI on host hI, its segment interface on a `vxlan` port
//! (VNI 100) to the other hosts' underlay addresses and the watcher's; the VRs a host runs share
//! that port. (A VR interface on a routeplex switch cannot be added live, so the desired
//! topologies attach VRs to the vxlan port directly: one host's VTEP on the segment.)
//! The watcher is plain Linux: a kernel `vxlan` device on the same VNI, which sees what the
//! segment answers.
//!
//! The sequence: hosts register; the VRs come up from the desired keys; real ping and iperf3
//! between the end hosts, across hosts through the VRs and the tunnels; one etcd member (a
//! follower) SIGKILLed changes nothing (pings flow, same leases, no fence); h2 cut off the
//! underlay fences itself (its VR's interfaces down in the data plane; its end host's gateway
//! stops answering) and its key goes after the TTL; r2 is placed again on h3, and when the
//! partition heals h2 keeps r2 down and drops it, while the watcher sees one answer per ARP
//! request for r2's address (none from h2); h1 SIGKILLed has its key removed after the TTL.
//! Re-placement of a dead host's VRs comes with the controller: [`replaced_elsewhere`].

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../../fleet/tests/etcd/mod.rs"]
mod etcd;
use etcd::{Cluster, ETCD};

const ETCDCTL: &str = "/usr/bin/etcdctl";
const TTL_S: u64 = 3;
const DEADLINE: Duration = Duration::from_secs(30);
/// The segment's VNI and prefix (10.100.0.I: rI's address; .9 the watcher's).
const VNI: u32 = 100;
const WATCHER_MAC: &str = "02:00:00:00:64:09";

fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[track_caller]
fn ok(cmd: &str, args: &[&str]) -> String {
    let o = sh(cmd, args);
    assert!(o.status.success(), "{cmd} {args:?}: {}", text(&o));
    text(&o)
}

/// `ip netns exec NS ARGS...`.
fn ns(ns: &str, args: &[&str]) -> Output {
    let mut all = vec!["netns", "exec", ns];
    all.extend(args);
    sh("ip", &all)
}

#[track_caller]
fn ns_ok(n: &str, args: &[&str]) -> String {
    let o = ns(n, args);
    assert!(o.status.success(), "in {n}: {args:?}: {}", text(&o));
    text(&o)
}

/// Everything the test made; all of it killed and removed on drop, even when the test fails.
struct Lab {
    pid: u32,
    dir: PathBuf,
    /// The underlay's third octet: 10.251.NET.0/24 (the bridge is .1, hI .1I, the watcher .9).
    net: u8,
    bridge: String,
    namespaces: Vec<String>,
    daemons: Vec<Option<Child>>,
    background: Vec<Child>,
    /// Every member's client URL: what the hosts' files name.
    etcd: Vec<String>,
    /// The members still running: what the test's own tools (etcdctl, `fleet status`) use.
    live: Vec<String>,
    cluster: Option<Cluster>,
}

impl Lab {
    fn underlay(&self, i: usize) -> String {
        format!("10.251.{}.{}", self.net, 10 + i)
    }

    fn watcher_underlay(&self) -> String {
        format!("10.251.{}.9", self.net)
    }

    fn host_ns(&self, i: usize) -> String {
        format!("rfh{i}_{}", self.pid)
    }

    fn end_ns(&self, i: usize) -> String {
        format!("rfe{i}_{}", self.pid)
    }

    fn watcher(&self) -> String {
        format!("rfw_{}", self.pid)
    }

    /// The root-namespace end of host `i`'s underlay veth (on the bridge).
    fn uplink(&self, i: usize) -> String {
        format!("rfu{i}_{}", self.pid)
    }

    fn file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("h{i}.yaml"))
    }

    fn state(&self, i: usize) -> PathBuf {
        self.dir.join(format!("h{i}"))
    }

    /// Makes the bridge, the namespaces and their links, and starts etcd on the bridge.
    fn new() -> Lab {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("rpx-fleet-hosts-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lab = Lab {
            pid,
            dir,
            net: (pid % 250) as u8,
            bridge: format!("rfb{pid}"),
            namespaces: Vec::new(),
            daemons: Vec::new(),
            background: Vec::new(),
            etcd: Vec::new(),
            live: Vec::new(),
            cluster: None,
        };
        let b = lab.bridge.clone();
        ok("ip", &["link", "add", &b, "type", "bridge"]);
        ok("ip", &["addr", "add", &format!("10.251.{}.1/24", lab.net), "dev", &b]);
        ok("ip", &["link", "set", &b, "up"]);
        for i in 1..=3 {
            let (h, e, up) = (lab.host_ns(i), lab.end_ns(i), lab.uplink(i));
            lab.add_ns(&h);
            lab.add_ns(&e);
            let addr = lab.underlay(i);
            lab.underlay_link(&h, &up, &addr);
            end_host(&h, &e, i);
        }
        let w = lab.watcher();
        lab.add_ns(&w);
        let wu = format!("rfuw_{pid}");
        let waddr = lab.watcher_underlay();
        lab.underlay_link(&w, &wu, &waddr);
        lab.watcher_vxlan();
        let bridge_ip: IpAddr = format!("10.251.{}.1", lab.net).parse().unwrap();
        let cluster = Cluster::start(bridge_ip, "fleet-hosts");
        lab.etcd = cluster.clients.clone();
        lab.live = cluster.clients.clone();
        lab.cluster = Some(cluster);
        lab
    }

    fn add_ns(&mut self, n: &str) {
        ok("ip", &["netns", "add", n]);
        self.namespaces.push(n.to_string());
        ok("ip", &["-n", n, "link", "set", "lo", "up"]);
    }

    /// Veth `root_end` on the bridge, its peer `ul` in `n` with `addr`.
    fn underlay_link(&self, n: &str, root_end: &str, addr: &str) {
        ok("ip", &["link", "add", root_end, "type", "veth", "peer", "name", "ul", "netns", n]);
        ok("ip", &["link", "set", root_end, "master", &self.bridge, "up"]);
        ok("ip", &["-n", n, "addr", "add", &format!("{addr}/24"), "dev", "ul", "nodad"]);
        ok("ip", &["-n", n, "link", "set", "ul", "up"]);
    }

    /// The watcher's kernel vxlan device: VNI 100, flooding to every host (no multicast).
    fn watcher_vxlan(&self) {
        let w = self.watcher();
        let local = self.watcher_underlay();
        let vni = VNI.to_string();
        ns_ok(
            &w,
            &[
                "ip",
                "link",
                "add",
                "vxw",
                "address",
                WATCHER_MAC,
                "type",
                "vxlan",
                "id",
                &vni,
                "local",
                &local,
                "dstport",
                "4789",
                "dev",
                "ul",
            ],
        );
        for i in 1..=3 {
            let dst = self.underlay(i);
            ns_ok(&w, &["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vxw", "dst", &dst]);
        }
        ns_ok(&w, &["ip", "addr", "add", "10.100.0.9/24", "dev", "vxw", "nodad"]);
        ns_ok(&w, &["ip", "link", "set", "vxw", "up"]);
        ns_ok(&w, &["ethtool", "-K", "vxw", "tx", "off"]);
    }

    /// The `fleet:` section and the rest of host `i`'s own file (no VRs: it waits for its
    /// desired topology).
    fn host_file(&self, i: usize) -> String {
        format!(
            "workers: 1\nfleet:\n  etcd: [{}]\n  host: h{i}\n  underlay: {}\n  offer: {{ workers: 1, cpu_share: 0.5, memory_mib: 256 }}\n  lease_ttl_s: {TTL_S}\n",
            self.etcd.join(", "),
            self.underlay(i)
        )
    }

    /// Starts `routeplex run` in host `i`'s namespace.
    fn start_host(&mut self, i: usize) {
        std::fs::write(self.file(i), self.host_file(i)).unwrap();
        std::fs::create_dir_all(self.state(i)).unwrap();
        let log = std::fs::File::create(self.dir.join(format!("h{i}.log"))).unwrap();
        let (f, s) = (self.file(i), self.state(i));
        let child = Command::new("ip")
            .args(["netns", "exec", &self.host_ns(i), env!("CARGO_BIN_EXE_routeplex"), "run"])
            .args([f.to_str().unwrap(), "--state-dir", s.to_str().unwrap()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        while self.daemons.len() < i {
            self.daemons.push(None);
        }
        self.daemons[i - 1] = Some(child);
    }

    /// SIGKILLs host `i`'s data plane (`ip netns exec` execs it: the child is routeplex).
    fn kill_host(&mut self, i: usize) {
        if let Some(mut c) = self.daemons[i - 1].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("h{i}.log"))).unwrap_or_default()
    }

    fn logs(&self) -> String {
        (1..=3).map(|i| format!("--- h{i} log:\n{}\n", tail(&self.log(i), 30))).collect()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_routeplex")).args(args).output().unwrap()
    }

    /// `routeplex fleet status --json` against every member, when etcd answers.
    fn fleet(&self) -> Option<Value> {
        let urls = self.live.join(",");
        let o = self.cli(&["fleet", "status", "--etcd", &urls, "--json"]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    /// Host `hI`'s record in the fleet's view.
    fn record(&self, f: &Value, i: usize) -> Option<Value> {
        let name = format!("h{i}");
        f["hosts"]
            .as_array()?
            .iter()
            .find(|h| h["record"]["name"] == name.as_str())
            .map(|h| h["record"].clone())
    }

    /// The hosts registered, by name.
    fn registered(&self) -> Option<Vec<String>> {
        let f = self.fleet()?;
        let hosts = f["hosts"].as_array()?;
        Some(
            hosts.iter().map(|h| h["record"]["name"].as_str().unwrap_or("?").to_string()).collect(),
        )
    }

    /// Host `i`'s data-plane status, when it answers.
    fn status(&self, i: usize) -> Option<Value> {
        let (f, s) = (self.file(i), self.state(i));
        let o = self.cli(&[
            "status",
            f.to_str().unwrap(),
            "--json",
            "--state-dir",
            s.to_str().unwrap(),
        ]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    /// VR `vr`'s interfaces' `up` on host `i`, if it runs there.
    fn ups(&self, i: usize, vr: &str) -> Option<Vec<bool>> {
        let s = self.status(i)?;
        let v = s["vrs"].as_array()?.iter().find(|v| v["name"] == vr)?.clone();
        Some(v["interfaces"].as_array()?.iter().map(|i| i["up"] == true).collect())
    }

    fn wait<T>(&self, what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(t0.elapsed() < limit, "{what}: not within {limit:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `args` in namespace `n` in the background; killed on drop.
    fn spawn_in(&mut self, n: &str, args: &[&str], out: &Path) -> usize {
        let f = std::fs::File::create(out).unwrap();
        let c = Command::new("ip")
            .args(["netns", "exec", n])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        self.background.push(c);
        self.background.len() - 1
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in self.daemons.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for c in &mut self.background {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        self.cluster.take();
        // A namespace's veths go with it; the bridge is in the root namespace.
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        // The root ends of the underlay veths too: a namespace can outlive `ip netns del` (the
        // kernel frees it when its last user goes), and its veth pairs with it.
        let ends = (1..=3).map(|i| self.uplink(i)).chain([format!("rfuw_{}", self.pid)]);
        for l in ends {
            let _ = Command::new("ip").args(["link", "del", &l]).stderr(Stdio::null()).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// End host `e` (10.I.0.2/24, default via 10.I.0.1) behind host namespace `h`: veth `ea` in
/// `h` (for the VR's afpacket port) to `eth0` in `e`; offloads off on both ends, since
/// routeplex sees real frames.
fn end_host(h: &str, e: &str, i: usize) {
    ok("ip", &["-n", h, "link", "add", "ea", "type", "veth", "peer", "name", "eth0", "netns", e]);
    ok("ip", &["-n", e, "addr", "add", &format!("10.{i}.0.2/24"), "dev", "eth0", "nodad"]);
    ok("ip", &["-n", e, "link", "set", "eth0", "up"]);
    ok("ip", &["-n", e, "route", "add", "default", "via", &format!("10.{i}.0.1")]);
    let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
    for (n, dev) in [(h, "ea"), (e, "eth0")] {
        let mut a = vec!["ethtool", "-K", dev];
        a.extend(off);
        ns_ok(n, &a);
    }
    ns_ok(h, &["sysctl", "-qw", "net.ipv6.conf.ea.disable_ipv6=1"]);
    ok("ip", &["-n", h, "link", "set", "ea", "up"]);
}

/// A VR to place: `rI` with segment address 10.100.0.I; `end_host` when its end host's
/// interface (afpacket on `ea`) is on the host it is placed on.
struct Vr {
    index: usize,
    end_host: bool,
}

/// Writes each host's desired topology to etcd, as the controller (`routeplex fleet apply`)
/// will: `placement[h - 1]` are the VRs host `hH` runs. Returns each host's revision.
///
/// Each host gets the segment (a vxlan port, VNI 100, its VRs share, to the other
/// hosts' and the watcher's underlay addresses) when it runs a VR, and every VR routes to the
/// other end hosts' networks through their VRs' segment addresses.
fn place(lab: &Lab, placement: &[Vec<Vr>]) -> Vec<i64> {
    let mut revs = Vec::new();
    for (h, vrs) in placement.iter().enumerate() {
        let h = h + 1;
        let mut t = lab.host_file(h);
        if !vrs.is_empty() {
            let mut remotes: Vec<String> =
                (1..=3).filter(|&j| j != h).map(|j| lab.underlay(j)).collect();
            remotes.push(lab.watcher_underlay());
            t += &format!(
                "ports:\n  - {{ name: vx, kind: vxlan, vni: {VNI}, local: {}, remotes: [{}] }}\n",
                lab.underlay(h),
                remotes.join(", ")
            );
            if vrs.iter().any(|v| v.end_host) {
                t += "  - { name: pa, kind: afpacket, interface: ea }\n";
            }
            t += "vrs:\n";
        }
        for v in vrs {
            let i = v.index;
            t += &format!(
                "  - name: r{i}\n    interfaces:\n      - {{ name: e0, port: vx, mac: \"02:00:00:00:64:0{i}\", addresses: [10.100.0.{i}/24] }}\n"
            );
            if v.end_host {
                t += &format!(
                    "      - {{ name: e1, port: pa, mac: \"02:00:00:00:65:0{i}\", addresses: [10.{i}.0.1/24] }}\n    routes:\n"
                );
                for j in (1..=3).filter(|&j| j != i) {
                    t += &format!("      - {{ prefix: 10.{j}.0.0/24, via: 10.100.0.{j} }}\n");
                }
            }
        }
        let key = format!("/routeplex/desired/h{h}");
        let o = Command::new(ETCDCTL)
            .args(["--endpoints", &lab.live.join(","), "put", &key, &t])
            .env("ETCDCTL_API", "3")
            .output()
            .unwrap();
        assert!(o.status.success(), "etcdctl put {key}: {}", text(&o));
        revs.push(revision(lab, &key));
    }
    revs
}

/// The mod_revision of `key`.
fn revision(lab: &Lab, key: &str) -> i64 {
    let o = Command::new(ETCDCTL)
        .args(["--endpoints", &lab.live.join(","), "get", key, "-w", "json"])
        .env("ETCDCTL_API", "3")
        .output()
        .unwrap();
    assert!(o.status.success(), "etcdctl get {key}: {}", text(&o));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    j["kvs"][0]["mod_revision"].as_i64().unwrap_or_else(|| panic!("{key}: {j}"))
}

/// The hook for failover: once the controller (`routeplex fleet apply`, branch fleetctl)
/// places a dead host's VRs again, this waits for `vr` to answer on the segment from another
/// host (the watcher pings its segment address). Today nothing re-places, so it says so.
fn replaced_elsewhere(_lab: &Lab, vr: usize) {
    eprintln!(
        "fleet_hosts: re-placement of r{vr} after its host died is the controller's (not built on this branch): not checked"
    );
}

/// `ping -c N` from namespace `n`; the output, asserting every reply came and none twice.
#[track_caller]
fn ping(n: &str, to: &str, count: u32) -> String {
    let c = count.to_string();
    let out = ns_ok(n, &["ping", "-n", "-c", &c, "-i", "0.2", "-W", "2", to]);
    assert!(out.contains(&format!("{count} received")), "ping {to} from {n}: {out}");
    assert!(!out.contains("DUP!"), "duplicate replies from {to}: {out}");
    out
}

fn summary(ping: &str) -> &str {
    ping.lines().find(|l| l.contains("received")).unwrap_or("")
}

/// The segment's vxlan port on host `i`: it moved frames both ways and took none from an
/// address that is not a remote.
#[track_caller]
fn assert_vxlan_moved(lab: &Lab, i: usize) {
    let s = lab.status(i).expect("host answers");
    let p = s["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vx").cloned();
    let p = p.unwrap_or_else(|| panic!("h{i}: no port vx: {s:#}"));
    assert!(p["rx"].as_u64().unwrap() > 0 && p["tx"].as_u64().unwrap() > 0, "h{i}: {p:#}");
    assert_eq!(p["backend"]["unknown_remote"], 0, "h{i}: {p:#}");
    println!("h{i} vx: rx {} tx {} flooded {}", p["rx"], p["tx"], p["backend"]["tx_flooded"]);
}

/// The members' ids, and the leader's.
fn members(lab: &Lab) -> (Vec<u64>, u64) {
    let o = Command::new(ETCDCTL)
        .args(["--endpoints", &lab.live.join(","), "endpoint", "status", "-w", "json"])
        .env("ETCDCTL_API", "3")
        .output()
        .unwrap();
    assert!(o.status.success(), "etcdctl endpoint status: {}", text(&o));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let all = j.as_array().unwrap();
    let ids = all.iter().map(|m| m["Status"]["header"]["member_id"].as_u64().unwrap()).collect();
    (ids, all[0]["Status"]["leader"].as_u64().unwrap())
}

fn leases(lab: &Lab) -> Vec<i64> {
    let f = lab.fleet().expect("etcd answers");
    (1..=3).map(|i| lab.record(&f, i).expect("registered")["lease"].as_i64().unwrap()).collect()
}

#[test]
fn three_hosts_carry_a_segment_survive_a_member_fence_on_partition_and_expire() {
    if Command::new("id").arg("-u").output().map_or(true, |o| !o.stdout.starts_with(b"0\n")) {
        eprintln!(
            "skipped: needs root (network namespaces, veth, a bridge, vxlan); CI runs as root"
        );
        return;
    }
    for tool in [ETCD, ETCDCTL] {
        if !Path::new(tool).exists() {
            eprintln!("skipped: {tool} is not installed (scripts/setup installs etcd-server and etcd-client)");
            return;
        }
    }
    let t_all = Instant::now();
    let mut lab = Lab::new();
    lab.wait("etcd serving on the bridge", DEADLINE, || lab.fleet());
    for i in 1..=3 {
        lab.start_host(i);
    }
    let names =
        lab.wait("h1..h3 registered", DEADLINE, || lab.registered().filter(|n| n.len() == 3));
    assert_eq!(names, ["h1", "h2", "h3"]);
    println!("[{:.1}s] h1..h3 registered from their namespaces", t_all.elapsed().as_secs_f64());

    // The VRs come from the desired keys: rI on hI.
    let revs = place(
        &lab,
        &[
            vec![Vr { index: 1, end_host: true }],
            vec![Vr { index: 2, end_host: true }],
            vec![Vr { index: 3, end_host: true }],
        ],
    );
    for i in 1..=3 {
        let vr = format!("r{i}");
        lab.wait(&format!("{vr} up on h{i}"), DEADLINE, || {
            lab.ups(i, &vr).filter(|u| u == &[true, true])
        });
        lab.wait(&format!("h{i} applied revision {}", revs[i - 1]), DEADLINE, || {
            let f = lab.fleet()?;
            (lab.record(&f, i)?["applied_revision"] == revs[i - 1]).then_some(())
        });
    }
    println!(
        "[{:.1}s] desired topologies applied: revisions {revs:?}",
        t_all.elapsed().as_secs_f64()
    );

    // Across hosts through the VRs and the tunnels; the watcher reaches r1 on the segment.
    let (e1, e2, e3) = (lab.end_ns(1), lab.end_ns(2), lab.end_ns(3));
    for (from, to) in [(&e1, "10.2.0.2"), (&e1, "10.3.0.2"), (&e2, "10.3.0.2"), (&e3, "10.1.0.2")] {
        let out = ping(from, to, 3);
        println!("ping {from} -> {to}: {}", summary(&out));
    }
    let w = lab.watcher();
    println!("ping watcher (kernel vxlan) -> r1: {}", summary(&ping(&w, "10.100.0.1", 3)));
    let srv = lab.dir.join("iperf3.srv");
    lab.spawn_in(&e3, &["iperf3", "-s", "-1", "-B", "10.3.0.2"], &srv);
    std::thread::sleep(Duration::from_millis(500));
    let out = ns_ok(&e1, &["iperf3", "-c", "10.3.0.2", "-t", "1", "-J"]);
    let j: Value = serde_json::from_str(&out).unwrap();
    let bytes = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(bytes > 0, "iperf3 e1 -> e3 moved nothing: {out}");
    println!(
        "iperf3 e1 -> e3 (h1 -> h3 over VXLAN): {bytes} bytes, {:.0} Mbit/s (loaded machine)",
        j["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6
    );
    for i in 1..=3 {
        assert_vxlan_moved(&lab, i);
    }

    // One member down (a follower: quorum and leader kept): nothing changes.
    let before = leases(&lab);
    let (ids, leader) = members(&lab);
    let victim = ids.iter().position(|&m| m != leader).unwrap();
    lab.cluster.as_mut().unwrap().kill(victim);
    lab.live.remove(victim);
    println!(
        "[{:.1}s] etcd member m{victim} (a follower) SIGKILLed",
        t_all.elapsed().as_secs_f64()
    );
    let out = ping(&e1, "10.2.0.2", TTL_S as u32 * 2 * 5);
    println!("ping e1 -> e2 over {} s with the member down: {}", TTL_S * 2, summary(&out));
    std::thread::sleep(Duration::from_secs(TTL_S));
    assert_eq!(leases(&lab), before, "the same leases with one member down");
    for i in 1..=3 {
        let s = lab.status(i).unwrap();
        let f = &s["fleet"];
        assert_eq!(
            (f["fences"].as_u64(), f["leases_granted"].as_u64()),
            (Some(0), Some(1)),
            "h{i}: {f}"
        );
    }
    println!("member down: same leases {before:?}, no fence, no new lease");

    // h2 cut off the underlay: it fences before its lease can end, and its key goes after.
    let t0 = Instant::now();
    ok("ip", &["link", "set", &lab.uplink(2), "down"]);
    lab.wait("r2 fenced on h2", Duration::from_secs(TTL_S * 3), || {
        lab.ups(2, "r2").filter(|u| u == &[false, false])
    });
    // The agent counts the fence once every interface is down.
    lab.wait("h2 counts its fence", Duration::from_secs(5), || {
        lab.status(2).filter(|s| s["fleet"]["fences"] == 1)
    });
    let fenced_after = t0.elapsed();
    let s = lab.status(2).unwrap();
    assert_eq!(s["fleet"]["fences"], 1, "{}", s["fleet"]);
    let mut fenced: Vec<String> =
        s["fleet"]["fenced"].as_array().unwrap().iter().map(|p| p.to_string()).collect();
    fenced.sort();
    assert_eq!(fenced, [r#"["r2","e0"]"#, r#"["r2","e1"]"#], "{}", s["fleet"]);
    // Its end host's gateway is down in the data plane: no answer.
    let o = ns(&e2, &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "10.2.0.1"]);
    assert!(!o.status.success(), "fenced r2 answered its end host: {}", text(&o));
    lab.wait("h2's key gone", Duration::from_secs(TTL_S * 3), || {
        lab.registered().filter(|n| n == &["h1", "h3"])
    });
    println!(
        "partition of h2: fenced after {:.1}s (TTL {TTL_S} s), key gone after {:.1}s",
        fenced_after.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );

    // r2 placed again on h3 (the controller's job; written here as it would). The watcher
    // forgets where r2's MAC was, so it asks the whole segment again.
    let revs = place(
        &lab,
        &[
            vec![Vr { index: 1, end_host: true }],
            vec![],
            vec![Vr { index: 3, end_host: true }, Vr { index: 2, end_host: false }],
        ],
    );
    lab.wait("r2 up on h3", DEADLINE, || lab.ups(3, "r2").filter(|u| u == &[true]));
    let _ = ns(&w, &["bridge", "fdb", "del", "02:00:00:00:64:02", "dev", "vxw"]);
    println!("r2 placed again on h3: {}", summary(&ping(&w, "10.100.0.2", 3)));

    // The partition heals while the watcher keeps asking the segment who has r2's address:
    // h2 must keep r2 down (its desired topology no longer has it) and remove it.
    let cap = lab.dir.join("arp.txt");
    lab.spawn_in(&w, &["tcpdump", "-l", "-n", "-e", "-i", "vxw", "arp"], &cap);
    let from_h2 = lab.dir.join("from-h2.txt");
    let h2_filter = format!("udp port 4789 and src host {}", lab.underlay(2));
    lab.spawn_in(&w, &["tcpdump", "-l", "-n", "-i", "ul", &h2_filter], &from_h2);
    let asks = lab.dir.join("asks.txt");
    let probe =
        "for k in $(seq 40); do ip neigh flush dev vxw; ping -c 1 -W 1 10.100.0.2; sleep 0.2; done";
    let asker = lab.spawn_in(&w, &["sh", "-c", probe], &asks);
    std::thread::sleep(Duration::from_millis(500));
    ok("ip", &["link", "set", &lab.uplink(2), "up"]);
    lab.wait("h2 back, converged to its new desired topology", DEADLINE, || {
        let f = lab.fleet()?;
        let r = lab.record(&f, 2)?;
        (r["applied_revision"] == revs[1] && r["fenced"] == false).then_some(())
    });
    lab.wait("r2 gone from h2", DEADLINE, || {
        lab.status(2).filter(|s| s["vrs"].as_array().is_some_and(|v| v.is_empty()))
    });
    let _ = lab.background[asker].wait();
    std::thread::sleep(Duration::from_millis(300));
    let arp = std::fs::read_to_string(&cap).unwrap();
    // The watcher's questions, and the answers addressed to it.
    let asked =
        arp.lines().filter(|l| l.contains("Request who-has 10.100.0.2 tell 10.100.0.9")).count();
    let to_watcher = format!("> {WATCHER_MAC}");
    let replies: Vec<&str> = arp
        .lines()
        .filter(|l| l.contains("Reply 10.100.0.2 is-at") && l.contains(&to_watcher))
        .collect();
    assert!(asked >= 10, "the watcher asked {asked} times: {arp}");
    assert!(replies.iter().all(|l| l.contains("is-at 02:00:00:00:64:02")), "{arp}");
    // One answer per question at most (h2's r2 has the same MAC and address: a second answer
    // would be it), and nearly all answered (a lost one is not a duplicate).
    assert!(
        replies.len() <= asked,
        "more answers ({}) than questions ({asked}): {arp}",
        replies.len()
    );
    assert!(
        replies.len() * 10 >= asked * 9,
        "{} answers to {asked} questions: {arp}",
        replies.len()
    );
    let h2_sent = std::fs::read_to_string(&from_h2).unwrap();
    let h2_sent = h2_sent.lines().filter(|l| l.contains(" IP ")).count();
    assert_eq!(h2_sent, 0, "h2 sent on the segment after the partition healed");
    let s = lab.status(2).unwrap();
    assert_eq!(
        (s["fleet"]["fences"].as_u64(), s["fleet"]["leases_granted"].as_u64()),
        (Some(1), Some(2)),
        "{}",
        s["fleet"]
    );
    println!("partition healed: h2 registered on a new lease, r2 kept down and removed; the watcher asked {asked} times and got {} answers, all from r2 on h3; h2 sent {h2_sent} datagrams on the segment", replies.len());

    // h1 SIGKILLed: its key goes once its lease runs out.
    let t0 = Instant::now();
    lab.kill_host(1);
    lab.wait("h1's key gone", Duration::from_secs(TTL_S * 4), || {
        lab.registered().filter(|n| n == &["h2", "h3"])
    });
    let gone = t0.elapsed();
    assert!(
        gone >= Duration::from_secs(TTL_S) / 2,
        "h1's key went before its lease could end: {gone:?}"
    );
    println!("h1 SIGKILLed: its key gone after {:.1}s (TTL {TTL_S} s)", gone.as_secs_f64());
    replaced_elsewhere(&lab, 1);
    println!("fleet_hosts: whole sequence {:.1}s", t_all.elapsed().as_secs_f64());
}

/// The README's fleet example (no root): every file validates as a topology; each host file
/// joins as the host its name says, at its own underlay address; each desired topology keeps
/// its host's `fleet:` section as it is, and its vxlan port starts at that address.
#[test]
fn the_fleet_example_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fleet");
    let fleet = |f: &Path| {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.display().to_string();
        fleet::FleetConfig::from_topology(&text, &name).unwrap().expect("a fleet: section")
    };
    for i in 1..=3 {
        let host = dir.join(format!("h{i}.yaml"));
        let t = control::Topology::load(&host).unwrap_or_else(|e| panic!("{e}"));
        assert!(t.summary().contains("0 ports, 0 VRs"), "{}", t.summary());
        let c = fleet(&host);
        assert_eq!(
            (c.host.as_str(), c.underlay.to_string()),
            (format!("h{i}").as_str(), format!("192.0.2.{i}"))
        );
        let desired = dir.join(format!("desired-h{i}.yaml"));
        if i == 3 {
            assert!(!desired.exists(), "h3 is the spare host of the README's example");
            continue;
        }
        let t = control::Topology::load(&desired).unwrap_or_else(|e| panic!("{e}"));
        let s = t.summary();
        assert!(s.contains("2 ports, 1 VR"), "{s}");
        assert!(s.contains(&format!("VNI 100 from 192.0.2.{i} port 4789")), "{s}");
        // The host's own settings (`workers:`) are kept with where they stand in each file.
        let without_place = |mut c: fleet::FleetConfig| {
            c.host_settings.iter_mut().for_each(|(_, y)| y.pos = (0, 0));
            c
        };
        assert_eq!(
            without_place(fleet(&desired)),
            without_place(c.clone()),
            "desired-h{i}.yaml keeps h{i}.yaml's fleet: section"
        );
    }
}
