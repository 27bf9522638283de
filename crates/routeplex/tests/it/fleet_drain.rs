//! `routeplex fleet drain` moves a VR live under traffic, end to end with real kernels,
//! processes and etcd (needs root; skipped, saying why, without it or without etcd).
//!
//! The test bed: an underlay bridge in the root namespace (10.252.NET.1/24) with a real
//! 3-member etcd cluster on its address; three host namespaces on it, each running `routeplex
//! run` with a `fleet:` section and a `migration:` listener on its underlay address; a Linux
//! end host `e3` behind h3 (afpacket). A `routeplex fleet controller` runs in the root
//! namespace and `routeplex fleet apply` stores the fleet: VR `s` pinned to h3 (the end host's
//! gateway, on switch `lan` at 10.100.0.3) and VR `r` (on `lan` at 10.100.0.1, routing back to
//! the end host through s). The controller places r on h1 and stretches lan over VXLAN
//! between h1 and h3. The end host pings r (every 10 ms) while `routeplex fleet drain h1`
//! runs: the controller places r on h2, h1's agent migrates it there, and every ping is
//! answered (0 lost). Then r runs on h2 only, h1 counts one live migration and runs nothing.
//! Then two more moves under the same pings: `fleet drain h2` takes r to h3 beside s (lan on
//! one host again), and after `fleet uncordon h1`, `fleet rebalance` moves r from h3 to h1,
//! out of a segment that ran on one host. Both are live with nothing lost: every segment has
//! its vxlan port from the start, so each host's apply only changes remotes, and h3 sets its
//! remotes before it moves r (without that, s answered r at h1 only after the move: 63 of 600
//! pings lost).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::etcd;
use etcd::{Cluster, ETCD};

const TTL_S: u64 = 3;
const DEADLINE: Duration = Duration::from_secs(30);
const SECRET: &str = "fleet-drain-test-secret-0123456789";
/// Pings sent while the drain runs, one every 10 ms.
const PINGS: u32 = 600;

const FLEET: &str = "\
ports:
  - { name: pa, kind: afpacket, interface: ea }
switches: [{ name: lan }]
vrs:
  - name: s
    host: h3
    cpu_share: 0.25
    interfaces:
      - { name: e0, switch: lan, mac: \"02:00:00:00:64:03\", addresses: [10.100.0.3/24] }
      - { name: e1, port: pa, mac: \"02:00:00:00:65:03\", addresses: [10.3.0.1/24] }
  - name: r
    cpu_share: 0.25
    interfaces:
      - { name: e0, switch: lan, mac: \"02:00:00:00:64:01\", addresses: [10.100.0.1/24] }
    routes:
      - { prefix: 10.3.0.0/24, via: 10.100.0.3 }
";

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

#[track_caller]
fn ns_ok(n: &str, args: &[&str]) -> String {
    let mut all = vec!["netns", "exec", n];
    all.extend(args);
    ok("ip", &all)
}

/// Everything the test made; all of it killed and removed on drop, even when it fails.
struct Lab {
    pid: u32,
    dir: PathBuf,
    net: u8,
    bridge: String,
    namespaces: Vec<String>,
    children: Vec<Child>,
    etcd: Vec<String>,
    cluster: Option<Cluster>,
}

impl Lab {
    fn underlay(&self, i: usize) -> String {
        format!("10.252.{}.{}", self.net, 10 + i)
    }

    fn host_ns(&self, i: usize) -> String {
        format!("rdh{i}_{}", self.pid)
    }

    fn uplink(&self, i: usize) -> String {
        format!("rdu{i}_{}", self.pid)
    }

    fn end_ns(&self) -> String {
        format!("rde3_{}", self.pid)
    }

    fn file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("h{i}.yaml"))
    }

    fn state(&self, i: usize) -> PathBuf {
        self.dir.join(format!("h{i}"))
    }

    fn new() -> Lab {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("rpx-fleet-drain-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lab = Lab {
            pid,
            dir,
            net: (pid % 250) as u8,
            bridge: format!("rdb{pid}"),
            namespaces: Vec::new(),
            children: Vec::new(),
            etcd: Vec::new(),
            cluster: None,
        };
        let b = lab.bridge.clone();
        ok("ip", &["link", "add", &b, "type", "bridge"]);
        ok("ip", &["addr", "add", &format!("10.252.{}.1/24", lab.net), "dev", &b]);
        ok("ip", &["link", "set", &b, "up"]);
        for i in 1..=3 {
            let (h, up, addr) = (lab.host_ns(i), lab.uplink(i), lab.underlay(i));
            lab.add_ns(&h);
            ok("ip", &["link", "add", &up, "type", "veth", "peer", "name", "ul", "netns", &h]);
            ok("ip", &["link", "set", &up, "master", &b, "up"]);
            ok("ip", &["-n", &h, "addr", "add", &format!("{addr}/24"), "dev", "ul", "nodad"]);
            ok("ip", &["-n", &h, "link", "set", "ul", "up"]);
        }
        // The end host behind h3: veth ea (h3, the afpacket port) to eth0 (e3).
        let (h, e) = (lab.host_ns(3), lab.end_ns());
        lab.add_ns(&e);
        ok(
            "ip",
            &["-n", &h, "link", "add", "ea", "type", "veth", "peer", "name", "eth0", "netns", &e],
        );
        ok("ip", &["-n", &e, "addr", "add", "10.3.0.2/24", "dev", "eth0", "nodad"]);
        ok("ip", &["-n", &e, "link", "set", "eth0", "up"]);
        ok("ip", &["-n", &e, "route", "add", "default", "via", "10.3.0.1"]);
        let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
        for (n, dev) in [(&h, "ea"), (&e, "eth0")] {
            let mut a = vec!["ethtool", "-K", dev];
            a.extend(off);
            ns_ok(n, &a);
        }
        ns_ok(&h, &["sysctl", "-qw", "net.ipv6.conf.ea.disable_ipv6=1"]);
        ok("ip", &["-n", &h, "link", "set", "ea", "up"]);
        let bridge_ip: IpAddr = format!("10.252.{}.1", lab.net).parse().unwrap();
        let cluster = Cluster::start(bridge_ip, "fleet-drain");
        lab.etcd = cluster.clients.clone();
        lab.cluster = Some(cluster);
        lab
    }

    fn add_ns(&mut self, n: &str) {
        ok("ip", &["netns", "add", n]);
        self.namespaces.push(n.to_string());
        ok("ip", &["-n", n, "link", "set", "lo", "up"]);
    }

    /// Host `i`'s own file: one worker, a migration listener on its underlay, the fleet.
    fn host_file(&self, i: usize) -> String {
        format!(
            "workers: 1\nmigration: {{ listen: \"{}:9470\", secret: {SECRET} }}\nfleet:\n  etcd: [{}]\n  host: h{i}\n  underlay: {}\n  offer: {{ workers: 1, cpu_share: 0.5, memory_mib: 256 }}\n  lease_ttl_s: {TTL_S}\n",
            self.underlay(i),
            self.etcd.join(", "),
            self.underlay(i)
        )
    }

    fn spawn(&mut self, args: &[&str], log: &str) {
        let log = std::fs::File::create(self.dir.join(log)).unwrap();
        let child = Command::new(args[0])
            .args(&args[1..])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.push(child);
    }

    fn start_host(&mut self, i: usize) {
        std::fs::write(self.file(i), self.host_file(i)).unwrap();
        std::fs::create_dir_all(self.state(i)).unwrap();
        let (n, f, s) = (self.host_ns(i), self.file(i), self.state(i));
        let bin = env!("CARGO_BIN_EXE_routeplex");
        let args = ["ip", "netns", "exec", &n, bin, "run", f.to_str().unwrap()];
        let mut args = args.to_vec();
        args.extend(["--state-dir", s.to_str().unwrap()]);
        self.spawn(&args, &format!("h{i}.log"));
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    fn logs(&self) -> String {
        ["h1.log", "h2.log", "h3.log", "controller.log"]
            .iter()
            .map(|n| format!("--- {n}:\n{}\n", tail(&self.log(n), 40)))
            .collect()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_routeplex")).args(args).output().unwrap()
    }

    fn fleet(&self) -> Option<Value> {
        let o = self.cli(&["fleet", "status", "--etcd", &self.etcd.join(","), "--json"]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    /// Host `i`'s data-plane status, when it answers.
    fn status(&self, i: usize) -> Option<Value> {
        let (f, s) = (self.file(i), self.state(i));
        let (f, s) = (f.to_str().unwrap(), s.to_str().unwrap());
        let o = self.cli(&["status", f, "--json", "--state-dir", s]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    /// VR `vr`'s interfaces' `up` on host `i`, if it runs there.
    fn ups(&self, i: usize, vr: &str) -> Option<Vec<bool>> {
        let s = self.status(i)?;
        let v = s["vrs"].as_array()?.iter().find(|v| v["name"] == vr)?.clone();
        Some(v["interfaces"].as_array()?.iter().map(|i| i["up"] == true).collect())
    }

    /// Pings r from the end host every 10 ms while `during` runs; (sent, answered, output).
    fn pinged(&self, during: impl FnOnce()) -> (u32, u32, String) {
        let out = self.dir.join("ping.out");
        let f = std::fs::File::create(&out).unwrap();
        let n = PINGS.to_string();
        let e = self.end_ns();
        let args = ["netns", "exec", &e, "ping", "-n", "-i", "0.01", "-c", &n, "-W", "2"];
        let mut ping = Command::new("ip")
            .args(args)
            .arg("10.100.0.1")
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        during();
        let st = ping.wait().unwrap();
        let p = std::fs::read_to_string(&out).unwrap();
        let (sent, got) = counts(&p).unwrap_or_else(|| panic!("ping said: {p}\n{}", self.logs()));
        assert!(st.success() && sent == PINGS && got == sent, "lost pings: {p}\n{}", self.logs());
        (sent, got, p)
    }

    /// The host the placement puts VR `vr` on, once no VR is in flight.
    fn placed(&self, vr: &str) -> Value {
        let f = self.wait("the flight over", || {
            self.fleet().filter(|f| f["placement"]["migrating"].is_null())
        });
        let v = f["placement"]["vrs"].as_array().unwrap().iter().find(|v| v["vr"] == vr).cloned();
        v.unwrap()["host"].clone()
    }

    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(t0.elapsed() < DEADLINE, "{what}: not within {DEADLINE:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        self.cluster.take();
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        for i in 1..=3 {
            let l = self.uplink(i);
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

/// (transmitted, received) from ping's summary line.
fn counts(out: &str) -> Option<(u32, u32)> {
    let l = out.lines().find(|l| l.contains("packets transmitted"))?;
    let n: Vec<u32> = l.split([' ', ',']).filter_map(|w| w.parse().ok()).collect();
    Some((*n.first()?, *n.get(1)?))
}

#[test]
fn drain_moves_a_vr_live_under_traffic_with_nothing_lost() {
    if Command::new("id").arg("-u").output().map_or(true, |o| !o.stdout.starts_with(b"0\n")) {
        eprintln!("skipped: needs root (network namespaces, veth, a bridge); CI runs as root");
        return;
    }
    if !std::path::Path::new(ETCD).exists() {
        eprintln!("skipped: {ETCD} is not installed (scripts/setup installs etcd-server)");
        return;
    }
    let t0 = Instant::now();
    let mut lab = Lab::new();
    lab.wait("etcd serving on the bridge", || lab.fleet());
    for i in 1..=3 {
        lab.start_host(i);
    }
    lab.wait("h1..h3 registered", || {
        lab.fleet().filter(|f| f["hosts"].as_array().is_some_and(|h| h.len() == 3))
    });
    let urls = lab.etcd.join(",");
    let bin = env!("CARGO_BIN_EXE_routeplex");
    let ctl = [bin, "fleet", "controller", "--etcd", &urls, "--name", "c", "--ttl-s", "3"];
    lab.spawn(&ctl, "controller.log");
    let doc = lab.dir.join("fleet.yaml");
    std::fs::write(&doc, FLEET).unwrap();
    let o = lab.cli(&["fleet", "apply", doc.to_str().unwrap(), "--etcd", &urls]);
    assert!(o.status.success(), "fleet apply: {}", text(&o));
    lab.wait("r up on h1", || lab.ups(1, "r").filter(|u| u == &[true]));
    lab.wait("s up on h3", || lab.ups(3, "s").filter(|u| u == &[true, true]));
    // r in h1's record: the controller sees where it runs (a drain moves it from there).
    lab.wait("h1's record lists r", || {
        let f = lab.fleet()?;
        let h = f["hosts"].as_array()?.iter().find(|h| h["record"]["name"] == "h1")?.clone();
        h["record"]["vrs"].as_array()?.iter().any(|v| v["name"] == "r").then_some(())
    });
    let e = lab.end_ns();
    let first = ns_ok(&e, &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", "10.100.0.1"]);
    assert_eq!(counts(&first), Some((3, 3)), "{first}");
    println!("[{:.1}s] r runs on h1; e3 reaches it across lan", t0.elapsed().as_secs_f64());

    // Pings every 10 ms while the drain runs.
    let mut moved_s = 0.0;
    let (sent, got, p) = lab.pinged(|| {
        let t_drain = Instant::now();
        let o = lab.cli(&["fleet", "drain", "h1", "--etcd", &urls]);
        assert!(o.status.success(), "fleet drain: {}", text(&o));
        lab.wait("r up on h2", || lab.ups(2, "r").filter(|u| u == &[true]));
        moved_s = t_drain.elapsed().as_secs_f64();
        lab.wait("r gone from h1", || lab.status(1).filter(|s| s["vrs"] == serde_json::json!([])));
    });
    println!(
        "[{:.1}s] drained: r up on h2 {moved_s:.1} s after `fleet drain`; pings {sent} sent, {got} answered ({} DUP)",
        t0.elapsed().as_secs_f64(),
        p.matches("DUP!").count()
    );
    // Moved live, not restarted: h1's agent says so and counts it.
    let h1 = lab.log("h1.log");
    assert!(h1.contains("fleet: VR migrated live"), "{}", lab.logs());
    assert!(!h1.contains("live migration failed"), "{}", lab.logs());
    let fleet = lab.wait("h1 counts the move", || {
        let s = lab.status(1)?;
        (s["fleet"]["migrations"] == 1).then_some(s["fleet"].clone())
    });
    assert_eq!(fleet["migrations_failed"], 0);
    assert_eq!(lab.placed("r"), "h2");
    let again = ns_ok(&e, &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", "10.100.0.1"]);
    assert_eq!(counts(&again), Some((3, 3)), "{again}");

    // h2 drained too (h1 still cordoned): r joins s on h3 and lan is on one host again; then
    // h1 uncordoned and the load rebalanced: r leaves h3, stretching lan from a host where it
    // ran alone. Each host's vxlan port on lan only changes its remotes, so both moves are
    // live and lose nothing.
    let (sent, got, _) = lab.pinged(|| {
        let o = lab.cli(&["fleet", "drain", "h2", "--etcd", &urls]);
        assert!(o.status.success(), "fleet drain: {}", text(&o));
        lab.wait("r up on h3", || lab.ups(3, "r").filter(|u| u == &[true]));
        lab.wait("r gone from h2", || lab.status(2).filter(|s| s["vrs"] == serde_json::json!([])));
    });
    assert_eq!(lab.placed("r"), "h3");
    println!(
        "[{:.1}s] r on h3 beside s; pings {sent} sent, {got} answered",
        t0.elapsed().as_secs_f64()
    );
    let o = lab.cli(&["fleet", "uncordon", "h1", "--etcd", &urls]);
    assert!(o.status.success(), "fleet uncordon: {}", text(&o));
    lab.wait("h1 schedulable", || {
        lab.fleet().filter(|f| f["placement"]["cordoned"].as_array().is_some_and(|c| c.len() == 1))
    });
    let (sent, got, _) = lab.pinged(|| {
        let o = lab.cli(&["fleet", "rebalance", "--etcd", &urls]);
        assert!(o.status.success(), "fleet rebalance: {}", text(&o));
        assert!(text(&o).contains("r: h3 -> h1"), "{}", text(&o));
        lab.wait("r up on h1", || lab.ups(1, "r").filter(|u| u == &[true]));
        lab.wait("r gone from h3", || {
            let s = lab.status(3)?;
            (s["vrs"].as_array()?.len() == 1).then_some(())
        });
    });
    assert_eq!(lab.placed("r"), "h1");
    // s stays on h3 and answers r at h1 only through h3's remotes: set before the move.
    assert!(
        lab.log("h3.log").contains("fleet: VXLAN remotes set before moving VRs away"),
        "{}",
        lab.logs()
    );
    println!(
        "[{:.1}s] r rebalanced to h1; pings {sent} sent, {got} answered",
        t0.elapsed().as_secs_f64()
    );
    for (i, n) in [(2, 1), (3, 1)] {
        let s = lab.wait("the moves counted", || lab.status(i));
        assert_eq!(
            (s["fleet"]["migrations"].clone(), s["fleet"]["migrations_failed"].clone()),
            (n.into(), 0.into()),
            "h{i}: {}",
            lab.logs()
        );
    }
    println!("[{:.1}s] done", t0.elapsed().as_secs_f64());
}
