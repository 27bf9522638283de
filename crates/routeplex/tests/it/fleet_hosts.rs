//! A fleet of three hosts end to end, with real kernels, processes and etcd, placed by
//! `routeplex fleet apply` and running `routeplex fleet controller`s (needs root; skipped,
//! saying why, without it or without etcd/etcdctl).
//!
//! The test bed: an underlay bridge in the root namespace with an address; three host
//! namespaces on it (h1..h3, one veth each), a watcher namespace on it too, and a real 3-member
//! etcd cluster listening on the bridge's address. Each host runs `routeplex run` inside its
//! namespace with a `fleet:` section (3 s lease TTL) and nothing else; a Linux end host
//! (namespace e1..e3) hangs off each host on a veth (`eaI`). Two controllers run in the root
//! namespace. [`FLEET`] is the fleet's desired state, stored with `routeplex fleet apply`:
//! rI pinned to hI (a router between the end host's network, on an afpacket port, and the
//! switch `seg`), `m` unpinned with one interface on `seg` only (what moves on failure: an end
//! host behind a VR cannot follow it to another machine, an address on the stretched segment
//! can). The watcher is plain Linux (a kernel `vxlan` device configured by hand with VNI
//! [`SEG_VNI`]), no routeplex host: `seg` names its underlay address in `vteps:`, so every
//! host on the segment sends to it, and pins that VNI (`vni:`), so the hosts' VXLAN ports use
//! the watcher's.
//!
//! The sequence: hosts register; the dry run and the controller place the VRs; real ping and
//! iperf3 between the end hosts, across hosts through the VRs and the tunnels, and the kernel
//! VTEP reaches the VRs; one etcd member (a follower) SIGKILLed changes nothing; the leading
//! controller SIGKILLed, the other leads; h1 cut off the underlay fences itself (its VRs'
//! interfaces down; its end host's gateway silent), its key goes after the TTL and `m` is placed
//! on another host and answers there; h1 SIGKILLed while fenced and started again, still cut
//! off, comes back with the same interfaces fenced; when the partition heals h1 brings r1 back
//! up, keeps `m` down and drops it while the watcher sees one answer per ARP request for `m`'s
//! address (none from h1); h2 (now
//! `m`'s home) SIGKILLed: `m` is placed on a surviving host and forwards again, and the time from
//! the SIGKILL to the first answered ping is printed; h2 started again from its state directory
//! holds `m` (and r2) down from its start, never answers for `m`, and brings back r2 only.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fleet::placement::Placement;
use serde_json::Value;

use crate::etcd;
use etcd::{Cluster, ETCD};

const ETCDCTL: &str = "/usr/bin/etcdctl";
const TTL_S: u64 = 3;
const DEADLINE: Duration = Duration::from_secs(30);
/// The watcher's MAC on the segment (10.100.0.9).
const WATCHER_MAC: &str = "02:00:00:00:64:09";
/// The VNI the watcher's kernel device was given, which the fleet document pins for `seg`
/// (outside the range the controller allocates from).
const SEG_VNI: u32 = 4242;
/// `m`'s MAC and address: the VR that moves.
const M_MAC: &str = "02:00:00:00:64:50";
const M_ADDR: &str = "10.100.0.50";

/// The fleet's desired state. rI routes between its end host's network 10.I.0.0/24 and the
/// segment (10.100.0.I); `m` has only a segment address and routes back to every end host.
/// No VR needs CPU but `m`, so `m` goes to the least-loaded host by name: h1, then h2, ...
/// (deterministic). `WATCHER` stands for the watcher's underlay address, `SEG_VNI` for
/// [`SEG_VNI`].
const FLEET: &str = r#"# fleet_hosts: placed by the routeplex fleet controller
ports:
  - { name: pa1, kind: afpacket, interface: ea1 }
  - { name: pa2, kind: afpacket, interface: ea2 }
  - { name: pa3, kind: afpacket, interface: ea3 }
switches:
  - name: seg
    vteps: [WATCHER]
    vni: SEG_VNI
vrs:
  - name: r1
    host: h1
    interfaces:
      - { name: e0, switch: seg, mac: "02:00:00:00:64:01", addresses: [10.100.0.1/24] }
      - { name: e1, port: pa1, mac: "02:00:00:00:65:01", addresses: [10.1.0.1/24] }
    routes:
      - { prefix: 10.2.0.0/24, via: 10.100.0.2 }
      - { prefix: 10.3.0.0/24, via: 10.100.0.3 }
  - name: r2
    host: h2
    interfaces:
      - { name: e0, switch: seg, mac: "02:00:00:00:64:02", addresses: [10.100.0.2/24] }
      - { name: e1, port: pa2, mac: "02:00:00:00:65:02", addresses: [10.2.0.1/24] }
    routes:
      - { prefix: 10.1.0.0/24, via: 10.100.0.1 }
      - { prefix: 10.3.0.0/24, via: 10.100.0.3 }
  - name: r3
    host: h3
    interfaces:
      - { name: e0, switch: seg, mac: "02:00:00:00:64:03", addresses: [10.100.0.3/24] }
      - { name: e1, port: pa3, mac: "02:00:00:00:65:03", addresses: [10.3.0.1/24] }
    routes:
      - { prefix: 10.1.0.0/24, via: 10.100.0.1 }
      - { prefix: 10.2.0.0/24, via: 10.100.0.2 }
  - name: m
    cpu_share: 0.1
    interfaces:
      - { name: e0, switch: seg, mac: "02:00:00:00:64:50", addresses: [10.100.0.50/24] }
    routes:
      - { prefix: 10.1.0.0/24, via: 10.100.0.1 }
      - { prefix: 10.2.0.0/24, via: 10.100.0.2 }
      - { prefix: 10.3.0.0/24, via: 10.100.0.3 }
"#;

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
    /// `routeplex fleet controller` processes, c1 and c2.
    controllers: Vec<Option<Child>>,
    background: Vec<Child>,
    /// Every member's client URL: what the hosts' files name.
    etcd: Vec<String>,
    /// The members still running: what the test's own tools (etcdctl, `fleet status`) use.
    live: Vec<String>,
    cluster: Option<Cluster>,
    t0: Instant,
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

    /// Prints a step with the seconds since the lab was made.
    fn step(&self, what: &str) {
        println!("[{:5.1}s] {what}", self.t0.elapsed().as_secs_f64());
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
            controllers: Vec::new(),
            background: Vec::new(),
            etcd: Vec::new(),
            live: Vec::new(),
            cluster: None,
            t0: Instant::now(),
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

    /// The watcher's kernel vxlan device on VNI `vni` (made by hand, as for a VTEP that is no
    /// routeplex host), flooding to every host (no multicast), with `w`'s MAC and address.
    fn watcher_vxlan(&self, vni: u32) {
        let w = self.watcher();
        let local = self.watcher_underlay();
        let vni = vni.to_string();
        let dev = ["ip", "link", "add", "vxw", "address", WATCHER_MAC, "type", "vxlan", "id"];
        let mut args = dev.to_vec();
        args.extend([vni.as_str(), "local", &local, "dstport", "4789", "dev", "ul"]);
        ns_ok(&w, &args);
        for i in 1..=3 {
            let dst = self.underlay(i);
            ns_ok(&w, &["bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vxw", "dst", &dst]);
        }
        ns_ok(&w, &["ip", "addr", "add", "10.100.0.9/24", "dev", "vxw", "nodad"]);
        ns_ok(&w, &["ip", "link", "set", "vxw", "up"]);
        ns_ok(&w, &["ethtool", "-K", "vxw", "tx", "off"]);
    }

    /// The `fleet:` section and the rest of host `i`'s own file (no VRs: the controller
    /// places them).
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

    /// Starts controller `cI` (`routeplex fleet controller`) in the root namespace.
    fn start_controller(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.join(format!("c{i}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .args(["fleet", "controller", "--etcd", &self.etcd.join(","), "--name"])
            .args([format!("c{i}"), "--ttl-s".into(), TTL_S.to_string()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.controllers.push(Some(child));
    }

    /// SIGKILLs host `i`'s data plane (`ip netns exec` execs it: the child is routeplex).
    fn kill_host(&mut self, i: usize) {
        if let Some(mut c) = self.daemons[i - 1].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    fn logs(&self) -> String {
        ["h1", "h2", "h3", "c1", "c2"]
            .iter()
            .map(|n| format!("--- {n} log:\n{}\n", tail(&self.log(n), 30)))
            .collect()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_routeplex")).args(args).output().unwrap()
    }

    /// `etcdctl ARGS` against the live members; its output.
    #[track_caller]
    fn etcdctl(&self, args: &[&str]) -> String {
        let o = Command::new(ETCDCTL)
            .args(["--endpoints", &self.live.join(",")])
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
            .unwrap();
        assert!(o.status.success(), "etcdctl {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
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

    /// The hosts registered by their agents, by name.
    fn registered(&self) -> Option<Vec<String>> {
        let f = self.fleet()?;
        let hosts = f["hosts"].as_array()?;
        Some(
            hosts.iter().map(|h| h["record"]["name"].as_str().unwrap_or("?").to_string()).collect(),
        )
    }

    /// The controller's placement in etcd, if one is written.
    fn placement(&self) -> Option<Placement> {
        let v = self.etcdctl(&["get", fleet::keys::PLACEMENT, "--print-value-only"]);
        serde_json::from_str(v.trim()).ok()
    }

    /// Where the placement puts `vr` (None: nowhere, or no placement).
    fn placed(&self, vr: &str) -> Option<String> {
        self.placement()?.vrs.iter().find(|v| v.vr == vr)?.host.clone()
    }

    /// The leading controller, by the leader key.
    fn leader(&self) -> Option<String> {
        let v = self.etcdctl(&["get", fleet::keys::LEADER, "--print-value-only"]);
        Some(v.trim().to_string()).filter(|s| !s.is_empty())
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

    /// The VRs host `i` runs, by name.
    fn vrs(&self, i: usize) -> Option<Vec<String>> {
        let s = self.status(i)?;
        let names = s["vrs"].as_array()?.iter().map(|v| v["name"].as_str().unwrap_or("?").into());
        Some(names.collect())
    }

    /// VR `vr`'s interfaces' `up` on host `i`, if it runs there.
    fn ups(&self, i: usize, vr: &str) -> Option<Vec<bool>> {
        let s = self.status(i)?;
        let v = s["vrs"].as_array()?.iter().find(|v| v["name"] == vr)?.clone();
        Some(v["interfaces"].as_array()?.iter().map(|i| i["up"] == true).collect())
    }

    /// Host `i` applied the desired topology etcd holds for it now, and is not fenced.
    fn converged(&self, i: usize) -> Option<i64> {
        let key = fleet::keys::desired(&format!("h{i}"));
        let rev = revision(self, &key)?;
        let f = self.fleet()?;
        let r = self.record(&f, i)?;
        (r["applied_revision"] == rev && r["fenced"] == false).then_some(rev)
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

    /// Captures, from the watcher, the ARP on the segment and what host `h` sends on the
    /// underlay (files named after `tag`): what [`Lab::m_answered_once`] reads.
    fn watch_m(&mut self, h: usize, tag: &str) -> (PathBuf, PathBuf) {
        let w = self.watcher();
        let arp = self.dir.join(format!("arp-{tag}.txt"));
        self.spawn_in(&w, &["tcpdump", "-l", "-n", "-e", "-i", "vxw", "arp"], &arp);
        let sent = self.dir.join(format!("from-h{h}-{tag}.txt"));
        let filter = format!("udp port 4789 and src host {}", self.underlay(h));
        self.spawn_in(&w, &["tcpdump", "-l", "-n", "-e", "-i", "ul", &filter], &sent);
        (arp, sent)
    }

    /// From [`Lab::watch_m`]'s captures: the watcher asked for m's address at least 10 times
    /// and got at most one answer per question (host `h`'s m has the same MAC and address: a
    /// second answer would be it), all from m's MAC, nearly all answered (a lost one is not a
    /// duplicate); and `h` sent nothing from m's MAC. Returns (questions, answers). An answer
    /// captured before the first question answers one asked before the capture began: not
    /// counted (CI once saw 40 answers to 39 questions that way).
    fn m_answered_once(&self, (arp, sent): &(PathBuf, PathBuf), h: usize) -> (usize, usize) {
        let arp = std::fs::read_to_string(arp).unwrap();
        let question = format!("Request who-has {M_ADDR} tell 10.100.0.9");
        let asked = arp.lines().filter(|l| l.contains(&question)).count();
        let to_watcher = format!("> {WATCHER_MAC}");
        let answer = format!("Reply {M_ADDR} is-at");
        let replies: Vec<&str> = (arp.lines())
            .skip_while(|l| !l.contains(&question))
            .filter(|l| l.contains(&answer) && l.contains(&to_watcher))
            .collect();
        assert!(asked >= 10, "the watcher asked {asked} times: {arp}");
        assert!(replies.iter().all(|l| l.contains(&format!("is-at {M_MAC}"))), "{arp}");
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
        let sent = std::fs::read_to_string(sent).unwrap();
        let from_m = sent.lines().filter(|l| l.contains(&format!("{M_MAC} >"))).count();
        assert_eq!(from_m, 0, "h{h} sent frames from m's MAC: {sent}");
        (asked, replies.len())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let children = self.daemons.iter_mut().chain(self.controllers.iter_mut()).flatten();
        for c in children.chain(self.background.iter_mut()) {
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

/// End host `e` (10.I.0.2/24, default via 10.I.0.1) behind host namespace `h`: veth `eaI` in
/// `h` (for rI's afpacket port) to `eth0` in `e`; offloads off on both ends, since routeplex
/// sees real frames.
fn end_host(h: &str, e: &str, i: usize) {
    let ea = format!("ea{i}");
    ok("ip", &["-n", h, "link", "add", &ea, "type", "veth", "peer", "name", "eth0", "netns", e]);
    ok("ip", &["-n", e, "addr", "add", &format!("10.{i}.0.2/24"), "dev", "eth0", "nodad"]);
    ok("ip", &["-n", e, "link", "set", "eth0", "up"]);
    ok("ip", &["-n", e, "route", "add", "default", "via", &format!("10.{i}.0.1")]);
    let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
    for (n, dev) in [(h, ea.as_str()), (e, "eth0")] {
        let mut a = vec!["ethtool", "-K", dev];
        a.extend(off);
        ns_ok(n, &a);
    }
    ns_ok(h, &["sysctl", "-qw", &format!("net.ipv6.conf.{ea}.disable_ipv6=1")]);
    ok("ip", &["-n", h, "link", "set", &ea, "up"]);
}

/// The mod_revision of `key`, if it exists.
fn revision(lab: &Lab, key: &str) -> Option<i64> {
    let j: Value = serde_json::from_str(&lab.etcdctl(&["get", key, "-w", "json"])).unwrap();
    j["kvs"][0]["mod_revision"].as_i64()
}

/// Seconds since the epoch, as `ping -D` prints them.
fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The times (`ping -D`) of the replies in a ping's output.
fn reply_times(out: &str) -> Vec<f64> {
    out.lines()
        .filter(|l| l.contains("bytes from"))
        .filter_map(|l| l.strip_prefix('[')?.split(']').next()?.parse().ok())
        .collect()
}

/// `ping -c N` from namespace `n`; the output, asserting N replies came, none twice, and no
/// request went unanswered but the few still in flight when the Nth reply came. A deadline
/// (`-w`), not a per-reply wait: once one reply came, `-W` waits only two round trips for the
/// rest, and on a loaded machine a later reply can take longer than that (with `-w`, ping
/// sends until N are answered).
#[track_caller]
fn ping(n: &str, to: &str, count: u32) -> String {
    let (c, w) = (count.to_string(), (count / 5 + 3).to_string());
    let out = ns_ok(n, &["ping", "-n", "-c", &c, "-i", "0.2", "-w", &w, to]);
    let (sent, got) = sent_received(&out);
    assert!(got >= count && sent - got <= 3, "ping {to} from {n}: {out}");
    assert!(!out.contains("DUP!"), "duplicate replies from {to}: {out}");
    out
}

/// Requests sent and replies received, from ping's summary.
fn sent_received(out: &str) -> (u32, u32) {
    let line = summary(out);
    let num = |after: &str| -> Option<u32> {
        let w: Vec<&str> = line.split([',', ' ']).filter(|w| !w.is_empty()).collect();
        w.iter().position(|x| *x == after).and_then(|i| w.get(i.checked_sub(1)?)?.parse().ok())
    };
    let (s, r) = (num("packets"), num("received"));
    s.zip(r).unwrap_or_else(|| panic!("no ping summary in: {out}"))
}

fn summary(ping: &str) -> &str {
    ping.lines().find(|l| l.contains("received")).unwrap_or("")
}

/// The segment's vxlan port on host `i` (`vxlan-VNI`, the controller's): it moved frames both
/// ways and took none from an address that is not a remote.
#[track_caller]
fn assert_vxlan_moved(lab: &Lab, i: usize, vni: u32) {
    let s = lab.status(i).expect("host answers");
    let name = format!("vxlan-{vni}");
    let p = s["ports"].as_array().unwrap().iter().find(|p| p["name"] == name.as_str()).cloned();
    let p = p.unwrap_or_else(|| panic!("h{i}: no port {name}: {s:#}"));
    assert!(p["rx"].as_u64().unwrap() > 0 && p["tx"].as_u64().unwrap() > 0, "h{i}: {p:#}");
    assert_eq!(p["backend"]["unknown_remote"], 0, "h{i}: {p:#}");
    println!("h{i} {name}: rx {} tx {} flooded {}", p["rx"], p["tx"], p["backend"]["tx_flooded"]);
}

/// The members' ids, and the leader's.
fn members(lab: &Lab) -> (Vec<u64>, u64) {
    let j: Value =
        serde_json::from_str(&lab.etcdctl(&["endpoint", "status", "-w", "json"])).unwrap();
    let all = j.as_array().unwrap();
    let ids = all.iter().map(|m| m["Status"]["header"]["member_id"].as_u64().unwrap()).collect();
    (ids, all[0]["Status"]["leader"].as_u64().unwrap())
}

fn leases(lab: &Lab) -> Vec<i64> {
    let f = lab.fleet().expect("etcd answers");
    (1..=3).map(|i| lab.record(&f, i).expect("registered")["lease"].as_i64().unwrap()).collect()
}

/// The host index of `hI`.
fn index(host: &str) -> usize {
    host.strip_prefix('h').and_then(|i| i.parse().ok()).unwrap_or_else(|| panic!("host {host}"))
}

#[test]
fn three_hosts_placed_by_the_controller_carry_a_segment_fence_and_fail_over() {
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
    let mut lab = Lab::new();
    lab.wait("etcd serving on the bridge", DEADLINE, || lab.fleet());
    for i in 1..=3 {
        lab.start_host(i);
    }
    let names =
        lab.wait("h1..h3 registered", DEADLINE, || lab.registered().filter(|n| n.len() == 3));
    assert_eq!(names, ["h1", "h2", "h3"]);
    lab.step("h1..h3 registered from their namespaces");
    for i in 1..=2 {
        lab.start_controller(i);
    }
    let first = lab.wait("a controller leads", DEADLINE, || lab.leader());
    lab.step(&format!("controllers c1, c2 started: {first} leads"));

    // The README's example document, as its commands run it (a dry run: nothing written): r1
    // pinned to h1, edge1 and edge2 spread over the two other hosts.
    let urls = lab.live.join(",");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fleet/fleet.yaml");
    let ex = example.to_str().unwrap();
    let o = lab.cli(&["fleet", "apply", ex, "--etcd", &urls, "--dry-run", "--json"]);
    assert!(o.status.success(), "fleet apply {ex} --dry-run: {}", text(&o));
    let dry: Placement = serde_json::from_slice(&o.stdout).unwrap();
    let at = dry.hosts();
    let got = ["r1", "edge1", "edge2"].map(|v| at.get(v).map(String::as_str));
    assert_eq!(got, [Some("h1"), Some("h2"), Some("h3")], "{dry:?}");
    assert_eq!(dry.error, None, "{dry:?}");
    lab.step("examples/fleet/fleet.yaml (dry run): r1 on h1, edge1 on h2, edge2 on h3");

    // The fleet's desired state: the dry run says where each VR lands, then it is stored.
    let doc = lab.dir.join("fleet.yaml");
    let fleet_doc = FLEET.replace("WATCHER", &lab.watcher_underlay());
    std::fs::write(&doc, fleet_doc.replace("SEG_VNI", &SEG_VNI.to_string())).unwrap();
    let d = doc.to_str().unwrap();
    let o = lab.cli(&["fleet", "apply", d, "--etcd", &urls, "--dry-run", "--json"]);
    assert!(o.status.success(), "fleet apply --dry-run: {}", text(&o));
    let dry: Placement = serde_json::from_slice(&o.stdout).unwrap();
    let at = dry.hosts();
    let want = [("r1", "h1"), ("r2", "h2"), ("r3", "h3"), ("m", "h1")];
    for (vr, h) in want {
        assert_eq!(at.get(vr).map(String::as_str), Some(h), "{vr}: {dry:?}");
    }
    assert_eq!(revision(&lab, fleet::keys::FLEET_DESIRED), None, "the dry run wrote nothing");
    let o = lab.cli(&["fleet", "apply", d, "--dry-run", "--etcd", &urls]);
    println!("fleet apply --dry-run:\n{}", text(&o));
    let o = lab.cli(&["fleet", "apply", d, "--etcd", &urls]);
    assert!(o.status.success(), "fleet apply: {}", text(&o));
    let stored = revision(&lab, fleet::keys::FLEET_DESIRED).expect("stored");
    lab.step(&format!("fleet apply: {}", text(&o).trim()));
    let p = lab.wait("the controller places the fleet", DEADLINE, || {
        lab.placement().filter(|p| p.revision == stored)
    });
    assert_eq!(p.error, None, "{p:?}");
    for (vr, h) in want {
        assert_eq!(p.hosts().get(vr).map(String::as_str), Some(h), "{vr}: {p:?}");
    }
    let seg = p.segments.iter().find(|s| s.name == "seg").expect("seg placed");
    assert_eq!(seg.hosts, ["h1", "h2", "h3"], "{p:?}");
    let watcher: IpAddr = lab.watcher_underlay().parse().unwrap();
    assert_eq!(seg.vteps, [watcher], "{p:?}");
    assert_eq!(seg.vni, SEG_VNI, "the VNI the document pins: {p:?}");
    lab.watcher_vxlan(SEG_VNI);
    for (vr, h) in want {
        let i = index(h);
        let n = if vr == "m" { 1 } else { 2 };
        lab.wait(&format!("{vr} up on {h}"), DEADLINE, || {
            lab.ups(i, vr).filter(|u| u.len() == n && u.iter().all(|&u| u))
        });
    }
    let revs: Vec<i64> = (1..=3)
        .map(|i| lab.wait(&format!("h{i} converged"), DEADLINE, || lab.converged(i)))
        .collect();
    lab.step(&format!(
        "placed by {}: r1, m on h1, r2 on h2, r3 on h3, seg on VNI {SEG_VNI}; applied revisions {revs:?}",
        p.leader
    ));

    let o = lab.cli(&["fleet", "status", "--etcd", &urls]);
    assert!(o.status.success(), "fleet status: {}", text(&o));
    println!("fleet status:\n{}", text(&o));

    // Across hosts through the VRs and the tunnels; the kernel VTEP reaches r1 and m.
    let (e1, e2, e3) = (lab.end_ns(1), lab.end_ns(2), lab.end_ns(3));
    for (from, to) in [(&e1, "10.2.0.2"), (&e1, "10.3.0.2"), (&e2, "10.3.0.2"), (&e3, "10.1.0.2")] {
        println!("ping {from} -> {to}: {}", summary(&ping(from, to, 3)));
    }
    println!("ping e3 -> m: {}", summary(&ping(&e3, M_ADDR, 3)));
    let w = lab.watcher();
    println!("ping watcher (kernel vxlan) -> r1: {}", summary(&ping(&w, "10.100.0.1", 3)));
    println!("ping watcher (kernel vxlan) -> m: {}", summary(&ping(&w, M_ADDR, 3)));
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
        assert_vxlan_moved(&lab, i, SEG_VNI);
    }

    // One member down (a follower: quorum and leader kept): nothing changes.
    let before = leases(&lab);
    let (ids, leader) = members(&lab);
    let victim = ids.iter().position(|&m| m != leader).unwrap();
    lab.cluster.as_mut().unwrap().kill(victim);
    lab.live.remove(victim);
    lab.step(&format!("etcd member m{victim} (a follower) SIGKILLed"));
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
    assert_eq!(lab.placement().map(|q| q.hosts()), Some(p.hosts()), "nothing moved");
    println!("member down: same leases {before:?}, no fence, no new lease, same placement");

    // The leading controller SIGKILLed (no revoke): the other leads once its lease ends.
    let t0 = Instant::now();
    let k: usize = first.strip_prefix('c').and_then(|k| k.parse().ok()).expect("c1 or c2");
    if let Some(mut c) = lab.controllers[k - 1].take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let next =
        lab.wait("the other controller leads", DEADLINE, || lab.leader().filter(|l| *l != first));
    lab.step(&format!(
        "controller {first} SIGKILLed: {next} leads after {:.1}s (TTL {TTL_S} s)",
        t0.elapsed().as_secs_f64()
    ));

    // h1 cut off the underlay: it fences before its lease can end, its key goes after, and the
    // new leader places m on the least-loaded live host (h2; r1 is pinned: nowhere).
    let t0 = Instant::now();
    ok("ip", &["link", "set", &lab.uplink(1), "down"]);
    lab.wait("r1 and m fenced on h1", Duration::from_secs(TTL_S * 3), || {
        let r1 = lab.ups(1, "r1").filter(|u| u == &[false, false]);
        lab.ups(1, "m").filter(|u| u == &[false]).and(r1)
    });
    // The agent counts the fence once every interface is down.
    lab.wait("h1 counts its fence", Duration::from_secs(5), || {
        lab.status(1).filter(|s| s["fleet"]["fences"] == 1)
    });
    let fenced_after = t0.elapsed();
    let s = lab.status(1).unwrap();
    let mut fenced: Vec<String> =
        s["fleet"]["fenced"].as_array().unwrap().iter().map(|p| p.to_string()).collect();
    fenced.sort();
    assert_eq!(fenced, [r#"["m","e0"]"#, r#"["r1","e0"]"#, r#"["r1","e1"]"#], "{}", s["fleet"]);
    // Its end host's gateway is down in the data plane: no answer.
    let o = ns(&e1, &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "10.1.0.1"]);
    assert!(!o.status.success(), "fenced r1 answered its end host: {}", text(&o));
    lab.wait("h1's key gone", Duration::from_secs(TTL_S * 3), || {
        lab.registered().filter(|n| n == &["h2", "h3"])
    });
    let gone_after = t0.elapsed();
    let q = lab.wait("m placed on h2", DEADLINE, || {
        lab.placement().filter(|q| q.hosts().get("m").map(String::as_str) == Some("h2"))
    });
    let mv = q.vrs.iter().find(|v| v.vr == "m").unwrap();
    assert_eq!(mv.moved_from.as_deref(), Some("h1"), "{q:?}");
    assert_eq!(q.hosts().get("r1"), None, "r1 is pinned to h1: {q:?}");
    assert_eq!(q.leader, next, "{q:?}");
    lab.wait("m up on h2", DEADLINE, || lab.ups(2, "m").filter(|u| u == &[true]));
    // The watcher forgets where m's MAC was, so it asks the whole segment again.
    let _ = ns(&w, &["bridge", "fdb", "del", M_MAC, "dev", "vxw"]);
    let out = ping(&w, M_ADDR, 3);
    lab.step(&format!(
        "partition of h1: fenced after {:.1}s (TTL {TTL_S} s), key gone after {:.1}s; m placed on h2 by {next}, watcher -> m: {}",
        fenced_after.as_secs_f64(),
        gone_after.as_secs_f64(),
        summary(&out)
    ));
    println!("ping e3 -> m on h2: {}", summary(&ping(&e3, M_ADDR, 3)));

    // h1 SIGKILLed while fenced and still cut off, then started again from its state
    // directory: its journal replays the fence as plain downs, and its new agent takes what
    // the last one fenced (its fleet.json) as fenced again, so that the heal brings r1 back.
    lab.kill_host(1);
    lab.start_host(1);
    let s = lab.wait("h1 restarted while cut off, r1 and m down and fenced", DEADLINE, || {
        lab.ups(1, "r1").filter(|u| u == &[false, false])?;
        lab.ups(1, "m").filter(|u| u == &[false])?;
        // The new agent's record (the last run's stays in fleet.json until it writes one):
        // no fence of its own, the last run's taken over.
        lab.status(1).filter(|s| {
            s["fleet"]["fences"] == 0
                && s["fleet"]["fenced"].as_array().is_some_and(|f| f.len() == 3)
        })
    });
    let mut refenced: Vec<String> =
        s["fleet"]["fenced"].as_array().unwrap().iter().map(|p| p.to_string()).collect();
    refenced.sort();
    assert_eq!(refenced, fenced, "{}", s["fleet"]);
    let log = lab.log("h1");
    assert!(log.contains("fenced_by_last_run=3"), "{}", tail(&log, 30));
    let o = ns(&e1, &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "10.1.0.1"]);
    assert!(!o.status.success(), "restarted fenced r1 answered its end host: {}", text(&o));
    lab.step("h1 SIGKILLed while fenced and started again, still cut off: r1 and m down, fenced again from its last status");

    // The partition heals while the watcher keeps asking the segment who has m's address: h1
    // must keep m down (its desired topology no longer has it) and remove it; r1 comes back.
    let watch = lab.watch_m(1, "heal");
    let asks = lab.dir.join("asks.txt");
    let probe = format!(
        "for k in $(seq 40); do ip neigh flush dev vxw; ping -c 1 -W 1 {M_ADDR}; sleep 0.2; done"
    );
    let asker = lab.spawn_in(&w, &["sh", "-c", &probe], &asks);
    std::thread::sleep(Duration::from_millis(500));
    ok("ip", &["link", "set", &lab.uplink(1), "up"]);
    lab.wait("h1 back with r1 only, converged and not fenced", DEADLINE, || {
        lab.vrs(1).filter(|v| v == &["r1"])?;
        lab.ups(1, "r1").filter(|u| u == &[true, true])?;
        lab.converged(1)
    });
    let _ = lab.background[asker].wait();
    std::thread::sleep(Duration::from_millis(300));
    // One answer per question for m, and nothing from m out of h1 (r1, back up, may speak).
    let (asked, answers) = lab.m_answered_once(&watch, 1);
    let s = lab.status(1).unwrap();
    assert_eq!(
        (s["fleet"]["fences"].as_u64(), s["fleet"]["leases_granted"].as_u64()),
        (Some(0), Some(1)),
        "the restarted agent: no fence of its own, one lease: {}",
        s["fleet"]
    );
    assert_eq!(lab.placed("m").as_deref(), Some("h2"), "m stays where it went (stable)");
    println!("ping e1 -> e3 through r1 again: {}", summary(&ping(&e1, "10.3.0.2", 3)));
    lab.step(&format!("partition healed: h1 (started again) registered on a lease, runs r1 only, up (m kept down and removed); the watcher asked {asked} times and got {answers} answers, all from m on h2; h1 sent no frame from m"));

    // h2 (m's home now) SIGKILLed: m is placed again on a surviving host and forwards there.
    // A ping from e3 runs throughout; its first reply after the kill dates the failover.
    let pings = lab.dir.join("failover-ping.txt");
    let pinger = lab.spawn_in(&e3, &["ping", "-n", "-D", "-i", "0.1", "-W", "1", M_ADDR], &pings);
    lab.wait("e3 reaches m on h2", DEADLINE, || {
        (!reply_times(&std::fs::read_to_string(&pings).ok()?).is_empty()).then_some(())
    });
    let killed = unix_now();
    let t0 = Instant::now();
    lab.kill_host(2);
    // What happens, in order, each dated from the SIGKILL: the key goes, the controller
    // places m, m's interface is up on its new host, e3's ping is answered again.
    let (mut gone, mut placed, mut up, mut answered) = (None, None, None, None);
    let at = |t: Instant| (t - t0).as_secs_f64();
    let home = lab.wait("h2's key gone, m placed elsewhere, up and answering", DEADLINE, || {
        let now = Instant::now();
        if gone.is_none() && lab.registered().is_some_and(|n| n == ["h1", "h3"]) {
            gone = Some(now);
        }
        let home = lab.placed("m").filter(|h| h != "h2")?;
        placed.get_or_insert(now);
        if up.is_none() && lab.ups(index(&home), "m").is_some_and(|u| u == [true]) {
            up = Some(now);
        }
        // A reply in flight when h2 died comes within milliseconds; later ones are m's new home's.
        let out = std::fs::read_to_string(&pings).ok()?;
        answered = answered.or_else(|| reply_times(&out).into_iter().find(|&t| t > killed + 0.1));
        (gone.is_some() && up.is_some() && answered.is_some()).then_some(home)
    });
    let _ = lab.background[pinger].kill();
    let (gone, placed, up) = (gone.unwrap(), placed.unwrap(), up.unwrap());
    let first_reply = answered.unwrap() - killed;
    assert!(
        gone - t0 >= Duration::from_secs(TTL_S) / 2,
        "h2's key went before its lease could end: {:?}",
        gone - t0
    );
    let q = lab.placement().unwrap();
    let mv = q.vrs.iter().find(|v| v.vr == "m").unwrap();
    assert_eq!(mv.moved_from.as_deref(), Some("h2"), "{q:?}");
    assert!(["h1", "h3"].contains(&home.as_str()), "{q:?}");
    let seg = q.segments.iter().find(|s| s.name == "seg").unwrap();
    assert!(!seg.hosts.contains(&"h2".to_string()), "{q:?}");
    assert_eq!(q.hosts().get("r2"), None, "r2 is pinned to h2: {q:?}");
    println!("ping e3 -> m on {home}: {}", summary(&ping(&e3, M_ADDR, 3)));
    println!("ping e1 -> e3 (h1 -> h3): {}", summary(&ping(&e1, "10.3.0.2", 3)));
    lab.step(&format!(
        "h2 SIGKILLed: key gone at {:.2}s, m placed on {home} by {} seen at {:.2}s, up there at {:.2}s, first answered ping {first_reply:.2}s after the SIGKILL (TTL {TTL_S} s; loaded machine, not asserted)",
        at(gone),
        q.leader,
        at(placed),
        at(up),
    ));
    restart_h2_holds_m_down(&mut lab, &home);
    if std::env::var_os("FLEET_HOSTS_LOGS").is_some() {
        eprintln!("{}", lab.logs());
    }
    lab.step("fleet_hosts: whole sequence done");
}

/// h2 (SIGKILLed while it ran m and r2) started again from its state directory while m runs on
/// `home`: its journal brings m and r2 back, their interfaces held down from before they
/// forward; its agent brings back only what its desired topology still places there (the
/// controller wrote it an empty one when its key went) and applies it. The watcher asks the
/// segment for m's address every few ms throughout, and h2's status is read as often as it
/// answers: h2 never has m's interface up, sends nothing from m's MAC, and m answers from
/// `home` all along; r2 comes back up on h2 once it is placed there again.
fn restart_h2_holds_m_down(lab: &mut Lab, home: &str) {
    let w = lab.watcher();
    let watch = lab.watch_m(2, "restart");
    let probe = format!(
        "while :; do ip neigh flush dev vxw; ping -c 1 -W 1 {M_ADDR} >/dev/null; sleep 0.01; done"
    );
    let asks = lab.dir.join("asks-restart.txt");
    let asker = lab.spawn_in(&w, &["sh", "-c", &probe], &asks);
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    lab.start_host(2);
    // Every status h2 answers until it runs r2 alone, up, converged.
    let (mut reads, mut m_seen) = (0, 0);
    loop {
        assert!(
            t0.elapsed() < DEADLINE,
            "h2 did not come back within {DEADLINE:?}\n{}",
            lab.logs()
        );
        let Some(s) = lab.status(2) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        reads += 1;
        let vrs = s["vrs"].as_array().cloned().unwrap_or_default();
        for m in vrs.iter().filter(|v| v["name"] == "m") {
            m_seen += 1;
            for i in m["interfaces"].as_array().unwrap() {
                assert!(i["up"] == false && i["held"] == true, "m on the restarted h2: {s}");
            }
        }
        let r2_up = |v: &Value| {
            v["name"] == "r2"
                && v["interfaces"].as_array().is_some_and(|l| l.iter().all(|i| i["up"] == true))
        };
        if vrs.len() == 1 && r2_up(&vrs[0]) && lab.converged(2).is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let back = t0.elapsed();
    let _ = lab.background[asker].kill();
    let _ = lab.background[asker].wait();
    std::thread::sleep(Duration::from_millis(300));
    let log = lab.log("h2");
    assert!(log.contains("every VR interface is held down"), "h2 did not hold: {}", tail(&log, 30));
    assert!(log.contains("interfaces held down: fenced"), "{}", tail(&log, 30));
    let (asked, answers) = lab.m_answered_once(&watch, 2);
    assert_eq!(lab.placed("m").as_deref(), Some(home), "m stays on {home}");
    lab.step(&format!(
        "h2 started again from its state directory: back with r2 only, up and converged after {:.1}s; {reads} status reads, {m_seen} showed m (held, down); the watcher asked {asked} times, {answers} answers, all from m on {home}; h2 sent no frame from m",
        back.as_secs_f64(),
    ));
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
