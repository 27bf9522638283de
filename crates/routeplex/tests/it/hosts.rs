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

    fn c(&self) -> String {
        format!("c{}", self.tag)
    }

    /// The running data plane's `status` answer, from its control socket (one API request
    /// line, one reply line).
    fn status(&self) -> serde_json::Value {
        use std::io::{BufRead, Write};
        let sock = self.dir.join("run").join(format!("t{}", self.tag)).join("control.sock");
        let mut c = std::os::unix::net::UnixStream::connect(&sock)
            .unwrap_or_else(|e| panic!("{}: {e}", sock.display()));
        c.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        c.write_all(b"{\"v\":1,\"id\":1,\"cmd\":\"status\"}\n").unwrap();
        let mut reply = String::new();
        std::io::BufReader::new(c).read_line(&mut reply).unwrap();
        let r: serde_json::Value = serde_json::from_str(&reply)
            .unwrap_or_else(|e| panic!("status is not JSON ({e}): {reply}"));
        r["ok"].clone()
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
        for n in [self.a(), self.b(), self.c()] {
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

/// Three VRs share host c's one port: r1 and r2 by MAC (macvlan / SR-IOV style), r3 by VLAN,
/// with r1's MAC again. a reaches c through r1, b through r2.
fn shared_port(t: &str) -> String {
    format!(
        r#"hosts:
  - {{ name: a{t}, addresses: [10.41.0.2/24], gateways: [10.41.0.1] }}
  - {{ name: b{t}, addresses: [10.42.0.2/24], gateways: [10.42.0.1] }}
  - {{ name: c{t}, addresses: [10.43.1.2/24, 10.43.2.2/24], gateways: [10.43.1.1] }}
ports:
  - {{ name: a{t}, kind: afxdp, host: a{t} }}
  - {{ name: b{t}, kind: afxdp, host: b{t} }}
  - {{ name: c{t}, kind: afxdp, host: c{t} }}
vrs:
  - name: r1
    interfaces:
      - {{ name: ea, port: a{t}, mac: "02:00:00:00:41:01", addresses: [10.41.0.1/24] }}
      - {{ name: ec, port: c{t}, mac: "02:00:00:00:43:01", addresses: [10.43.1.1/24] }}
  - name: r2
    interfaces:
      - {{ name: eb, port: b{t}, mac: "02:00:00:00:42:01", addresses: [10.42.0.1/24] }}
      - {{ name: ec, port: c{t}, mac: "02:00:00:00:43:02", addresses: [10.43.2.1/24] }}
  - name: r3
    interfaces:
      - {{ name: ev, port: c{t}, vlan: 100, mac: "02:00:00:00:43:01", addresses: [10.43.3.1/24] }}
"#
    )
}

/// A port's drops for `reason`, from a `status` answer.
fn port_drops(status: &serde_json::Value, port: &str, reason: &str) -> u64 {
    status["ports"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == port))
        .map_or(0, |p| p["drops"][reason].as_u64().unwrap_or(0))
}

/// Packets every VR received, from a `status` answer.
fn vrs_rx(status: &serde_json::Value) -> u64 {
    let vrs = status["vrs"].as_array().into_iter().flatten();
    vrs.map(|v| v["counters"]["rx_packets"].as_u64().unwrap_or(0)).sum()
}

/// Sends one ARP request (tagged with argv[5] unless 0) from a raw socket on argv[1] and prints
/// who answered and on which VLAN, as JSON. The tag of a received frame may be in the data or
/// in PACKET_AUXDATA, where the kernel moves it.
const ARP_PROBE: &str = r#"
import json, socket, struct, sys, time
ifc, mac, me, target, vlan = sys.argv[1], bytes.fromhex(sys.argv[2].replace(':', '')), socket.inet_aton(sys.argv[3]), socket.inet_aton(sys.argv[4]), int(sys.argv[5])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(263, 8, 1)
s.bind((ifc, 0))
tag = struct.pack('!HH', 0x8100, vlan) if vlan else b''
arp = struct.pack('!HHBBH6s4s6s4s', 1, 0x0800, 6, 4, 1, mac, me, bytes(6), target)
frame = b'\xff' * 6 + mac + tag + b'\x08\x06' + arp
s.send(frame + bytes(max(0, 60 - len(frame))))
s.settimeout(0.2)
end = time.time() + 1.5
while time.time() < end:
    try:
        data, anc, _, addr = s.recvmsg(2048, socket.CMSG_SPACE(20))
    except socket.timeout:
        continue
    if addr[2] == 4:
        continue
    tci = None
    for level, kind, d in anc:
        if level == 263 and kind == 8 and len(d) >= 20:
            status, _, _, _, _, vtci, _ = struct.unpack('IIIHHHH', d[:20])
            if status & 16:
                tci = vtci & 0xfff
    et, off = struct.unpack('!H', data[12:14])[0], 14
    if et == 0x8100:
        tci, et, off = struct.unpack('!H', data[14:16])[0] & 0xfff, struct.unpack('!H', data[16:18])[0], 18
    if et == 0x0806 and data[off + 6:off + 8] == b'\x00\x02' and data[off + 14:off + 18] == target:
        print(json.dumps({'reply_from': data[6:12].hex(':'), 'vlan': tci}))
        sys.exit(0)
print(json.dumps({'reply_from': None}))
"#;

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
    for n in [s.a(), s.b(), s.c()] {
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

/// What a user types and reads: `up` counts the file's ports; `status`, `capture` and `trace`
/// name a port as the file does (`a…`, not its veth `rpx-a…`); `apply` on a copy of the file
/// says which host runs and how to reach it.
#[test]
fn the_cli_speaks_the_files_names_and_finds_the_running_host() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(one_vr("afpacket"));
    let said = s.up();
    assert!(said.contains(", 2 port(s),"), "{said}");
    assert_pings(&s.a(), "10.22.0.2");
    let (a, veth) = (s.a(), format!("rpx-{}", s.a()));
    let file = s.file.to_str().unwrap().to_string();
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .args(args)
            .env("ROUTEPLEX_RUN_DIR", s.dir.join("run"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let table = text(&cli(&["status", &file]).wait_with_output().unwrap());
    assert!(table.lines().any(|l| l.starts_with(&a)) && !table.contains(&veth), "{table}");

    // capture and trace wait for frames: a ping runs meanwhile.
    let pcap = s.dir.join("a.pcapng");
    let capture = cli(&["capture", &file, &a, "-c", "2", "-w", pcap.to_str().unwrap()]);
    let trace = cli(&["trace", &file, &format!("r{}", s.tag), "-c", "2"]);
    std::thread::sleep(Duration::from_millis(500));
    let _ = ping(&a, "10.22.0.2", "5");
    let capture = capture.wait_with_output().unwrap();
    assert!(capture.status.success(), "capture by the file's port name: {}", text(&capture));
    assert!(std::fs::metadata(&pcap).unwrap().len() > 0);
    let trace = trace.wait_with_output().unwrap();
    let t = text(&trace);
    assert!(trace.status.success() && t.contains(&format!("rx {a} ")) && !t.contains(&veth), "{t}");

    // A copy of the running file is another service's name: say which one runs.
    let copy = s.dir.join("copy.yaml");
    std::fs::copy(&s.file, &copy).unwrap();
    let o = cli(&["apply", copy.to_str().unwrap(), "--dry-run"]).wait_with_output().unwrap();
    let e = text(&o);
    let run_dir = s.dir.join("run").join(format!("t{}", s.tag));
    assert!(!o.status.success(), "{e}");
    assert!(e.contains(&format!("t{} runs {file}", s.tag)), "{e}");
    assert!(e.contains(&format!("--state-dir {}", run_dir.display())), "{e}");
    assert_eq!(e.matches("No such file or directory").count(), 0, "{e}");
    // and that way reaches it.
    let arg = run_dir.to_str().unwrap();
    let o = cli(&["apply", copy.to_str().unwrap(), "--dry-run", "--state-dir", arg]);
    let o = o.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(s.routeplex(&["down"]).status.success());
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

/// Counts distinct UDP datagrams to port 9000 until argv[1] came or none for 2 s; says
/// `ready` once bound.
const TRICKLE_SINK: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('0.0.0.0', 9000))
s.settimeout(2.0)
print('ready', flush=True)
seen = set()
try:
    while len(seen) < int(sys.argv[1]):
        seen.add(s.recv(64))
except socket.timeout:
    pass
print(len(seen))
"#;

/// Sends argv[2] datagrams to argv[1]:9000, one each argv[3] seconds.
const TRICKLE_SOURCE: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n, gap = int(sys.argv[2]), float(sys.argv[3])
t0 = time.monotonic()
for i in range(n):
    s.sendto(str(i).encode(), (sys.argv[1], 9000))
    time.sleep(max(0.0, t0 + (i + 1) * gap - time.monotonic()))
"#;

/// A data plane off its CPU for 150 ms (stopped, as a loaded host deschedules it) while 500
/// datagrams a second cross it on AF_PACKET ports: every one waits in the ring and goes on
/// after. The kernel retires a ring block per millisecond that saw a frame, so this trickle
/// takes a block per datagram; a ring of 32 blocks kept 32 of the 75 that came meanwhile.
/// (ping cannot show it: it stops sending with 16 replies outstanding.)
#[test]
fn one_vr_over_afpacket_keeps_a_trickle_while_its_data_plane_is_stopped() {
    use std::io::{BufRead, BufReader};
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(one_vr("afpacket"));
    s.up();
    let (a, b) = (s.a(), s.b());
    assert_pings(&a, "10.22.0.2");
    let pid = s.state()["pid"].as_u64().unwrap().to_string();
    let n = 300;
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &b, "python3", "-c", TRICKLE_SINK, &n.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(sink.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the sink in {b}");
    let source = std::thread::spawn(move || {
        ns(&a, &["python3", "-c", TRICKLE_SOURCE, "10.22.0.2", &n.to_string(), "0.002"])
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(sh("kill", &["-STOP", &pid]).status.success());
    std::thread::sleep(Duration::from_millis(150));
    assert!(sh("kill", &["-CONT", &pid]).status.success());
    let sent = source.join().unwrap();
    assert!(sent.status.success(), "the source: {}", text(&sent));
    line.clear();
    out.read_line(&mut line).unwrap();
    let _ = sink.wait();
    let st = s.status();
    let dropped: Vec<_> = [s.a(), s.b()]
        .into_iter()
        .map(|h| {
            let ports = st["ports"].as_array().unwrap();
            let p = ports.iter().find(|p| p["name"] == format!("rpx-{h}"));
            p.map(|p| p["rx_dropped"].clone())
        })
        .collect();
    assert_eq!(
        line.trim(),
        n.to_string(),
        "datagrams that crossed a 150 ms stop; rx_dropped at a, b: {dropped:?}"
    );
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

#[test]
fn many_vrs_share_one_port_by_mac_and_vlan() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(shared_port);
    s.up();
    let (a, b, c) = (s.a(), s.b(), s.c());
    let run = |n: &str, args: &[&str]| {
        let o = ns(n, args);
        assert!(o.status.success(), "{n}: {args:?}: {}", text(&o));
    };
    // c's replies to b's subnet go back through r2.
    run(&c, &["ip", "route", "add", "10.42.0.0/24", "via", "10.43.2.1"]);
    assert_pings(&a, "10.43.1.2");
    assert_pings(&b, "10.43.2.2");
    // r1 owns 10.43.1.1 and r2 10.43.2.1 only: neither answers for the other's subnet.
    assert!(!ping(&a, "10.43.2.2", "1").status.success(), "r1 must not route to r2's subnet");

    // Frames to a MAC no VR has die at ingress, counted on the port, touching no VR.
    let before = s.status();
    run(&c, &["ip", "route", "add", "10.43.9.0/24", "dev", "eth0"]);
    run(&c, &["ip", "neigh", "replace", "10.43.9.9", "lladdr", "02:00:00:00:99:99", "dev", "eth0"]);
    let _ = ping(&c, "10.43.9.9", "5");
    let after = s.status();
    let pc = format!("rpx-{c}");
    let port = |j: &serde_json::Value, reason: &str| port_drops(j, &pc, reason);
    assert_eq!(
        port(&after, "not_for_us") - port(&before, "not_for_us"),
        5,
        "five echo requests to an unknown MAC, dropped at ingress:\nbefore {before}\nafter {after}"
    );
    assert_eq!(vrs_rx(&after), vrs_rx(&before), "no VR saw them:\nbefore {before}\nafter {after}");

    // VLAN 100 of c's link is r3's alone, though r3 has r1's MAC: the ARP for r3's address is
    // answered, tagged, only on VLAN 100. c's kernel has no 802.1Q here, so a raw socket asks.
    let mac = text(&ns(&c, &["cat", "/sys/class/net/eth0/address"])).trim().to_string();
    let arp = |vlan: u16| -> serde_json::Value {
        let o = ns(
            &c,
            &[
                "python3",
                "-c",
                ARP_PROBE,
                "eth0",
                &mac,
                "10.43.3.2",
                "10.43.3.1",
                &vlan.to_string(),
            ],
        );
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("arp probe ({e}): {}", text(&o)))
    };
    let before = s.status();
    let tagged = arp(100);
    assert_eq!(tagged["reply_from"], "02:00:00:00:43:01", "r3 answers on VLAN 100: {tagged}");
    assert_eq!(tagged["vlan"], 100, "the answer carries the tag: {tagged}");
    assert_eq!(arp(0)["reply_from"], serde_json::Value::Null, "untagged: r3 is not there");
    assert_eq!(arp(200)["reply_from"], serde_json::Value::Null, "VLAN 200: no VR");
    let after = s.status();
    let delta = |reason: &str| port_drops(&after, &pc, reason) - port_drops(&before, &pc, reason);
    assert_eq!(
        (delta("not_for_us"), delta("vlan_unknown")),
        (1, 1),
        "untagged ARP for r3's address and the VLAN 200 one, each dropped at ingress:\nbefore {before}\nafter {after}"
    );
    assert!(s.routeplex(&["down"]).status.success());
    gone(&s);
}

/// `tool`'s absolute path in the usual system directories, so a check from outside does not
/// depend on the PATH the test gives `routeplex`.
fn tool(tool: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
}

/// `up` and `down` need no `ip` or `ethtool`: with PATH an empty directory, `up` makes the
/// hosts over netlink (namespaces, veths, addresses, default routes, offloads off), which
/// `ip` and `ethtool` by absolute path check from outside and a ping crosses; `down` removes
/// exactly the namespaces and links `up` recorded.
#[test]
fn up_and_down_need_no_ip_or_ethtool_on_the_path() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let (Some(ip), Some(ethtool), Some(ping)) = (tool("ip"), tool("ethtool"), tool("ping")) else {
        eprintln!("skipped: needs ip, ethtool and ping to check from outside (scripts/setup installs them)");
        return;
    };
    let s = Service::new(one_vr("afpacket"));
    let (a, b) = (s.a(), s.b());
    let empty = s.dir.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let bare = |cmd: &str| {
        Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .arg(cmd)
            .arg(&s.file)
            .env("ROUTEPLEX_RUN_DIR", s.dir.join("run"))
            .env("PATH", &empty)
            .output()
            .unwrap()
    };
    let run = |args: &[&str]| text(&sh(ip.to_str().unwrap(), args));
    // Names with this test's tag, in this namespace and the namespace list.
    let ours = || {
        let mut links: Vec<String> = run(&["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1).map(|n| n.split('@').next().unwrap().to_string()))
            .filter(|n| n.contains(&s.tag))
            .collect();
        let mut nss: Vec<String> = run(&["netns", "list"])
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .filter(|n| n.contains(&s.tag))
            .collect();
        links.sort();
        nss.sort();
        (nss, links)
    };
    assert_eq!(ours(), (vec![], vec![]));
    let o = bare("up");
    assert!(o.status.success(), "up with an empty PATH: {}", text(&o));
    let (mut nss, mut links) =
        (vec![a.clone(), b.clone()], vec![format!("rpx-{a}"), format!("rpx-{b}")]);
    nss.sort();
    links.sort();
    assert_eq!(ours(), (nss.clone(), links.clone()));
    let made = &s.state()["made"];
    assert_eq!(made["namespaces"], serde_json::json!([a, b]), "{made}");
    assert_eq!(made["links"], serde_json::json!([format!("rpx-{a}"), format!("rpx-{b}")]));
    for (h, net) in [(&a, "21"), (&b, "22")] {
        let addrs = run(&["-n", h, "-o", "address", "show", "dev", "eth0"]);
        assert!(addrs.contains(&format!("inet 10.{net}.0.2/24 ")), "{addrs}");
        assert!(addrs.contains(&format!("inet6 2001:db8:{net}::2/64 ")), "{addrs}");
        let r4 = run(&["-n", h, "-4", "route", "show", "default"]);
        assert!(r4.contains(&format!("default via 10.{net}.0.1 dev eth0")), "{r4}");
        let r6 = run(&["-n", h, "-6", "route", "show", "default"]);
        assert!(r6.contains(&format!("default via 2001:db8:{net}::1 dev eth0")), "{r6}");
        let eth0 = run(&["-n", h, "-o", "link", "show", "dev", "eth0"]);
        assert!(eth0.contains(",UP,") || eth0.contains(",UP>"), "{eth0}");
        let outer = format!("rpx-{h}");
        let k_out = text(&sh(ethtool.to_str().unwrap(), &["-k", &outer]));
        let k_in = run(&["netns", "exec", h, ethtool.to_str().unwrap(), "-k", "eth0"]);
        for feature in [
            "tx-checksumming",
            "rx-checksumming",
            "tcp-segmentation-offload",
            "generic-segmentation-offload",
            "generic-receive-offload",
        ] {
            for (k, dev) in [(&k_out, &outer), (&k_in, &"eth0".to_string())] {
                let line = k.lines().find(|l| l.starts_with(&format!("{feature}:")));
                assert!(line.is_some_and(|l| l.contains(": off")), "{feature} of {dev}:\n{k}");
            }
        }
    }
    let pinged = run(&[
        "netns",
        "exec",
        &a,
        ping.to_str().unwrap(),
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "2",
        "10.22.0.2",
    ]);
    assert!(pinged.contains(" 0% packet loss"), "{pinged}");
    let o = bare("down");
    assert!(o.status.success(), "down with an empty PATH: {}", text(&o));
    assert_eq!(ours(), (vec![], vec![]), "down removes what up made, exactly");
    gone(&s);
}

/// Host a (made by `up`) on switch `lan` with VR r; with `c`, also an AF_PACKET port on veth
/// `rpx-cT`, whose other end is in namespace cT (made by the test), as a member of `lan`.
fn switch_with(t: &str, c: bool) -> String {
    let (port, member) = if c {
        (
            format!("  - {{ name: c{t}, kind: afpacket, interface: rpx-c{t} }}\n"),
            format!(", {{ port: c{t} }}"),
        )
    } else {
        (String::new(), String::new())
    };
    format!(
        r#"hosts:
  - {{ name: a{t}, addresses: [10.51.0.2/24], gateways: [10.51.0.1] }}
ports:
  - {{ name: a{t}, kind: afpacket, host: a{t} }}
{port}switches:
  - {{ name: lan, members: [{{ port: a{t} }}{member}] }}
vrs:
  - name: r
    interfaces:
      - {{ name: e0, switch: lan, mac: "02:00:00:00:51:01", addresses: [10.51.0.1/24] }}
"#
    )
}

/// The AF_PACKET sockets bound to interface `ifname` (/proc/net/packet's `Iface` column).
fn packet_sockets(ifname: &str) -> usize {
    let index = std::fs::read_to_string(format!("/sys/class/net/{ifname}/ifindex")).unwrap();
    let table = std::fs::read_to_string("/proc/net/packet").unwrap();
    table.lines().skip(1).filter(|l| l.split_whitespace().nth(4) == Some(index.trim())).count()
}

/// `apply` adds a port on a real interface to a running switch and takes it away again: c,
/// behind the new port, pings host a across the switch and VR r on it; once the port is gone
/// from the file, c reaches nothing, no AF_PACKET socket is left on its interface, and a
/// still reaches r.
#[test]
fn a_port_joins_a_running_switch_and_leaves_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root() {
        return;
    }
    let s = Service::new(|t| switch_with(t, false));
    s.up();
    assert_pings(&s.a(), "10.51.0.1");
    let (c, veth) = (s.c(), format!("rpx-{}", s.c()));
    for args in [
        vec!["netns", "add", &c],
        vec!["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &c],
        vec!["link", "set", &veth, "up"],
        vec!["-n", &c, "addr", "add", "10.51.0.3/24", "dev", "eth0"],
        vec!["-n", &c, "link", "set", "eth0", "up"],
    ] {
        let o = sh("ip", &args);
        assert!(o.status.success(), "ip {args:?}: {}", text(&o));
    }

    std::fs::write(&s.file, switch_with(&s.tag, true)).unwrap();
    let o = s.routeplex(&["apply"]);
    assert!(o.status.success(), "apply: {}", text(&o));
    let joined = format!("+ port c{} (opens; joins switch lan)", s.tag);
    assert!(text(&o).contains(&joined), "{}", text(&o));
    assert_pings(&c, "10.51.0.2");
    assert_pings(&c, "10.51.0.1");
    assert!(packet_sockets(&veth) >= 1, "no AF_PACKET socket on {veth}");

    std::fs::write(&s.file, switch_with(&s.tag, false)).unwrap();
    let o = s.routeplex(&["apply"]);
    assert!(o.status.success(), "apply: {}", text(&o));
    let closed = format!("- port c{} (closes)", s.tag);
    assert!(
        text(&o).contains("~ switch lan: member") && text(&o).contains(&closed),
        "{}",
        text(&o)
    );
    let o = ping(&c, "10.51.0.2", "2");
    assert!(!o.status.success(), "c still reaches a: {}", text(&o));
    assert_eq!(packet_sockets(&veth), 0, "the closed port's socket is still open on {veth}");
    assert_pings(&s.a(), "10.51.0.1");

    assert!(s.routeplex(&["down"]).status.success());
    // The veth first: a namespace's devices go after `netns del` returns.
    assert!(sh("ip", &["link", "del", &veth]).status.success());
    assert!(sh("ip", &["netns", "del", &c]).status.success());
    gone(&s);
}
