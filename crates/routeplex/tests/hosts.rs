//! Real hosts through real VRs: `routeplex up` makes two network namespaces, attaches AF_XDP
//! (or AF_PACKET) ports to their veths and forwards; ping, ping -6, iperf3, traceroute and
//! tcpdump run in the namespaces; `routeplex down` must leave nothing behind.
//!
//! Needs root (CI is root); skipped with a message otherwise. Each test uses names of its own
//! and takes the service down in a drop guard, even when it fails. The tests run one at a
//! time: each data plane busy-polls a CPU, and this machine has two.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
static NEXT: AtomicU32 = AtomicU32::new(0);

fn root() -> bool {
    let ok = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !ok {
        eprintln!("skipped: needs root (network namespaces, veth, XDP); CI runs as root");
    }
    ok
}

fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

/// Runs `args` in namespace `ns`.
fn ns(ns: &str, args: &[&str]) -> Output {
    let mut all = vec!["netns", "exec", ns];
    all.extend(args);
    sh("ip", &all)
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A topology written to a temporary directory, its service, and its cleanup.
struct Service {
    dir: PathBuf,
    file: PathBuf,
    tag: String,
}

impl Service {
    fn new(yaml: impl Fn(&str) -> String) -> Service {
        let tag =
            format!("{:x}{}", std::process::id() % 0xfff, NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(format!("rpx-hosts-{tag}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("t{tag}.yaml"));
        std::fs::write(&file, yaml(&tag)).unwrap();
        Service { dir, file, tag }
    }

    fn routeplex(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .args(args)
            .arg(&self.file)
            .env("ROUTEPLEX_RUN_DIR", self.dir.join("run"))
            .output()
            .unwrap()
    }

    fn up(&self) -> String {
        let o = self.routeplex(&["up"]);
        assert!(o.status.success(), "routeplex up failed: {}", text(&o));
        text(&o)
    }

    fn a(&self) -> String {
        format!("a{}", self.tag)
    }

    fn b(&self) -> String {
        format!("b{}", self.tag)
    }

    fn state(&self) -> serde_json::Value {
        let p = self.dir.join("run").join(format!("t{}", self.tag)).join("state.json");
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.routeplex(&["down"]);
        // Whatever a failed test left: only names this test made.
        for n in [self.a(), self.b()] {
            let _ = sh("ip", &["netns", "del", &n]);
            let _ = sh("ip", &["link", "del", &format!("rpx-{n}")]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Two hosts, a and b, through one VR.
fn one_vr(kind: &str) -> impl Fn(&str) -> String + '_ {
    move |t| {
        format!(
            r#"hosts:
  - {{ name: a{t}, addresses: [10.21.0.2/24, "2001:db8:21::2/64"], gateways: [10.21.0.1, "2001:db8:21::1"] }}
  - {{ name: b{t}, addresses: [10.22.0.2/24, "2001:db8:22::2/64"], gateways: [10.22.0.1, "2001:db8:22::1"] }}
ports:
  - {{ name: a{t}, kind: {kind}, host: a{t} }}
  - {{ name: b{t}, kind: {kind}, host: b{t} }}
vrs:
  - name: r{t}
    interfaces:
      - {{ name: ea, port: a{t}, mac: "02:00:00:00:21:01", addresses: [10.21.0.1/24, "2001:db8:21::1/64"] }}
      - {{ name: eb, port: b{t}, mac: "02:00:00:00:22:01", addresses: [10.22.0.1/24, "2001:db8:22::1/64"] }}
"#
        )
    }
}

/// Two hosts through two VRs in series, joined by a switch.
fn two_vrs(t: &str) -> String {
    format!(
        r#"hosts:
  - {{ name: a{t}, addresses: [10.31.0.2/24, "2001:db8:31::2/64"], gateways: [10.31.0.1, "2001:db8:31::1"] }}
  - {{ name: b{t}, addresses: [10.32.0.2/24, "2001:db8:32::2/64"], gateways: [10.32.0.1, "2001:db8:32::1"] }}
ports:
  - {{ name: a{t}, kind: afxdp, host: a{t} }}
  - {{ name: b{t}, kind: afxdp, host: b{t} }}
switches:
  - {{ name: mid, members: [] }}
vrs:
  - name: v1
    interfaces:
      - {{ name: ea, port: a{t}, mac: "02:00:00:00:31:01", addresses: [10.31.0.1/24, "2001:db8:31::1/64"] }}
      - {{ name: em, switch: mid, mac: "02:00:00:00:33:01", addresses: [10.33.0.1/24, "2001:db8:33::1/64"] }}
    routes:
      - {{ prefix: 10.32.0.0/24, via: 10.33.0.2 }}
      - {{ prefix: "2001:db8:32::/64", via: "2001:db8:33::2" }}
  - name: v2
    interfaces:
      - {{ name: em, switch: mid, mac: "02:00:00:00:33:02", addresses: [10.33.0.2/24, "2001:db8:33::2/64"] }}
      - {{ name: eb, port: b{t}, mac: "02:00:00:00:32:01", addresses: [10.32.0.1/24, "2001:db8:32::1/64"] }}
    routes:
      - {{ prefix: 10.31.0.0/24, via: 10.33.0.1 }}
      - {{ prefix: "2001:db8:31::/64", via: "2001:db8:33::1" }}
"#
    )
}

fn ping(from: &str, to: &str, count: &str) -> Output {
    let v6 = if to.contains(':') { "-6" } else { "-4" };
    ns(from, &["ping", v6, "-c", count, "-i", "0.2", "-W", "2", to])
}

#[track_caller]
fn assert_pings(from: &str, to: &str) {
    let o = ping(from, to, "3");
    assert!(o.status.success(), "ping {to} from {from}: {}", text(&o));
    assert!(text(&o).contains(" 0% packet loss"), "{}", text(&o));
}

fn gone(s: &Service) {
    let netns = text(&sh("ip", &["netns", "list"]));
    let links = text(&sh("ip", &["-br", "link"]));
    for n in [s.a(), s.b()] {
        assert!(
            !netns.lines().any(|l| l.split_whitespace().next() == Some(&n)),
            "namespace {n} left:\n{netns}"
        );
        assert!(!links.contains(&format!("rpx-{n}")), "link rpx-{n} left:\n{links}");
    }
    assert!(!s.dir.join("run").join(format!("t{}", s.tag)).exists(), "service directory left");
}

#[test]
fn one_vr_over_afxdp_ping_ping6_then_down_leaves_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(one_vr("afxdp"));
    s.up();
    assert_pings(&s.a(), "10.22.0.2");
    assert_pings(&s.a(), "2001:db8:22::2");
    assert_pings(&s.b(), "10.21.0.1");
    // Up twice is harmless.
    assert!(s.up().contains("already up"));
    let o = s.routeplex(&["down"]);
    assert!(o.status.success(), "{}", text(&o));
    gone(&s);
}

#[test]
fn one_vr_over_afpacket_pings() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(one_vr("afpacket"));
    s.up();
    assert_pings(&s.a(), "10.22.0.2");
    assert_pings(&s.a(), "2001:db8:22::2");
    assert!(s.routeplex(&["down"]).status.success());
    gone(&s);
}

#[test]
fn two_vrs_in_series_iperf3_traceroute_and_tcpdump() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(two_vrs);
    s.up();
    let (a, b) = (s.a(), s.b());
    assert_pings(&a, "10.32.0.2");
    assert_pings(&a, "2001:db8:32::2");

    // traceroute: each VR answers from the address of the interface the probe came in on.
    let o = ns(&a, &["traceroute", "-n", "-q", "1", "-w", "2", "10.32.0.2"]);
    let hops: Vec<String> = text(&o)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
        .collect();
    assert_eq!(hops, ["10.31.0.1", "10.33.0.2", "10.32.0.2"], "{}", text(&o));
    let o = ns(&a, &["traceroute", "-6", "-n", "-q", "1", "-w", "2", "2001:db8:32::2"]);
    let hops: Vec<String> = text(&o)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
        .collect();
    assert_eq!(hops, ["2001:db8:31::1", "2001:db8:33::2", "2001:db8:32::2"], "{}", text(&o));

    // tcpdump on b: the ping arrives with TTL / hop limit 64 - 2, from VR v2's MAC, to b's.
    let b_mac = text(&ns(&b, &["cat", "/sys/class/net/eth0/address"])).trim().to_string();
    for (to, filter, want) in
        [("10.32.0.2", "icmp", "ttl 62"), ("2001:db8:32::2", "icmp6 and ip6[40] == 128", "hlim 62")]
    {
        let dump = Command::new("ip")
            .args([
                "netns", "exec", &b, "tcpdump", "-i", "eth0", "-n", "-e", "-vv", "-l", "-c", "1",
                filter,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let _ = ping(&a, to, "2");
        let out = dump.wait_with_output().unwrap();
        let line = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(line.contains(want), "{want} in: {line}");
        assert!(
            line.contains(&format!("02:00:00:00:32:01 > {b_mac}")),
            "rewritten MACs in: {line}"
        );
    }

    // iperf3: TCP for a few seconds, no errors.
    let server = ns(&b, &["iperf3", "-s", "-D", "-1", "-p", "5210"]);
    assert!(server.status.success(), "{}", text(&server));
    std::thread::sleep(Duration::from_millis(300));
    let o = ns(&a, &["iperf3", "-c", "10.32.0.2", "-p", "5210", "-t", "3", "-J"]);
    let j: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    assert!(j.get("error").is_none(), "iperf3: {}", j["error"]);
    let received = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let retransmits = j["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    assert!(received > 1_000_000, "iperf3 moved only {received} bytes");
    eprintln!(
        "iperf3 through two VRs: {:.2} Gbit/s, {retransmits} retransmits (noisy 2-core VM)",
        j["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e9
    );
    assert!(s.routeplex(&["down"]).status.success());
    gone(&s);
}

#[test]
fn sigkill_then_up_restores_forwarding_with_no_stale_xdp() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(one_vr("afxdp"));
    s.up();
    let (a, pa) = (s.a(), format!("rpx-a{}", s.tag));
    assert_pings(&a, "10.22.0.2");
    let xdp = |dev: &str| text(&sh("ip", &["-d", "link", "show", "dev", dev])).contains("prog/xdp");
    assert!(xdp(&pa), "an XDP program is attached while forwarding");

    // Kill the data plane outright while a ping is running.
    let pid = s.state()["pid"].as_u64().unwrap() as u32;
    let traffic = Command::new("ip")
        .args(["netns", "exec", &a, "ping", "-c", "20", "-i", "0.05", "10.22.0.2"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(sh("kill", &["-9", &pid.to_string()]).status.success());
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = traffic.wait_with_output();
    // The kernel detached the program with the process: nothing stale on the interface.
    assert!(!xdp(&pa), "no XDP program after SIGKILL");
    assert!(
        !ping(&a, "10.22.0.2", "1").status.success(),
        "no forwarding while the data plane is down"
    );

    // `up` again restarts on the same interfaces, and forwarding is back.
    let out = s.up();
    assert!(out.contains("starting a new one"), "{out}");
    assert_pings(&a, "10.22.0.2");
    assert!(s.routeplex(&["down"]).status.success());
    gone(&s);
}

#[test]
fn up_refuses_interfaces_it_did_not_make() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(one_vr("afxdp"));
    let theirs = format!("rpx-a{}", s.tag);
    let peer = format!("x{}", s.tag);
    assert!(sh("ip", &["link", "add", &theirs, "type", "veth", "peer", "name", &peer])
        .status
        .success());
    let o = s.routeplex(&["up"]);
    let _ = sh("ip", &["link", "del", &theirs]);
    assert!(!o.status.success(), "up must refuse: {}", text(&o));
    assert!(
        text(&o).contains(&format!("interface {theirs} exists and routeplex did not make it")),
        "{}",
        text(&o)
    );
    gone(&s);
}
