//! IGMP snooping with real Linux hosts: a switch over AF_PACKET ports on veths to three host
//! namespaces. Host 1 joins 239.7.7.7 (the kernel sends its IGMPv3 reports); host 0's
//! datagrams to the group reach host 1 and never host 2, which watches its link with a packet
//! socket. When host 1 leaves (the kernel's TO_IN {} report), the group is unregistered and
//! host 2 sees the traffic flooded again. Needs root and python3; says so and skips otherwise.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use control::runtime::Options;
use control::{Node, Topology};

use crate::hosts;
use hosts::{ip, Namespaces};

/// Kills the processes it holds when dropped.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Joins the group on 10.79.0.2 for `secs` seconds, then prints how many datagrams came.
const RECEIVER: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("239.7.7.7", 5007))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
             socket.inet_aton("239.7.7.7") + socket.inet_aton("10.79.0.2"))
print("joined", flush=True)
s.settimeout(0.2)
n, end = 0, time.time() + float(sys.argv[1])
while time.time() < end:
    try:
        s.recv(100); n += 1
    except socket.timeout:
        pass
print(n, flush=True)
"#;

/// Counts frames to 239.7.7.7 on interface argv[1] for argv[2] seconds, with a packet socket
/// (no membership: it sees what the switch sends down the link).
const WATCHER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind((sys.argv[1], 0))
s.settimeout(0.2)
print("watching", flush=True)
n, end = 0, time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        f = s.recv(2000)
        if len(f) >= 34 and f[30:34] == bytes([239, 7, 7, 7]): n += 1
    except socket.timeout:
        pass
print(n, flush=True)
"#;

/// Sends `count` datagrams to the group from 10.79.0.1, 50 ms apart.
const SENDER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("10.79.0.1"))
# SO_NO_CHECK: no UDP checksum, so no offloaded one left unfinished (see ports::afpacket).
s.setsockopt(socket.SOL_SOCKET, 11, 1)
for i in range(int(sys.argv[1])):
    s.sendto(b"x" * 32, ("239.7.7.7", 5007)); time.sleep(0.05)
"#;

fn py(ns: &str, script: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", script])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the child's first line (its "ready" word).
fn ready(c: &mut Child) {
    use std::io::BufRead;
    let out = c.stdout.as_mut().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "helper script did not start");
}

/// Waits for the child and returns its last line as a number.
fn count(c: Child) -> u64 {
    let o = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    text.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| {
        panic!("no count: {text}{}", String::from_utf8_lossy(&o.stderr));
    })
}

fn send(ns: &str, n: u32) {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", SENDER, &n.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "sender: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn multicast_reaches_the_host_that_joined_and_not_the_others() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces and veth)");
        return;
    }
    if Command::new("python3").arg("-c").arg("1").output().map_or(true, |o| !o.status.success()) {
        eprintln!("skipped: needs python3 (multicast sockets in the host namespaces)");
        return;
    }
    let pid = std::process::id();
    let sw_ns = format!("rsws{pid}");
    let hosts: Vec<String> = (0..3).map(|i| format!("rswm{i}{pid}")).collect();
    let mut all = vec![sw_ns.clone()];
    all.extend(hosts.iter().cloned());
    let _guard = Namespaces(all);
    ip(&["netns", "add", &sw_ns]);
    for (i, h) in hosts.iter().enumerate() {
        ip(&["netns", "add", h]);
        let (s, v) = (format!("s{i}"), "vb".to_string());
        ip(&["-n", &sw_ns, "link", "add", &s, "type", "veth", "peer", "name", &v, "netns", h]);
        ip(&["-n", &sw_ns, "link", "set", &s, "up"]);
        ip(&["-n", h, "addr", "add", &format!("10.79.0.{}/24", i + 1), "dev", "vb"]);
        ip(&["-n", h, "link", "set", "vb", "up"]);
        ip(&["-n", h, "link", "set", "lo", "up"]);
        ip(&["-n", h, "route", "add", "224.0.0.0/4", "dev", "vb"]);
    }
    let text = format!(
        "ports:\n\
         \x20 - {{ name: p0, kind: afpacket, interface: s0, netns: {sw_ns} }}\n\
         \x20 - {{ name: p1, kind: afpacket, interface: s1, netns: {sw_ns} }}\n\
         \x20 - {{ name: p2, kind: afpacket, interface: s2, netns: {sw_ns} }}\n\
         switches:\n  - name: sw\n    members:\n      - {{ port: p0 }}\n      - {{ port: p1 }}\n      - {{ port: p2 }}\n"
    );
    let topo = Topology::parse(&text, "snoop.yaml", Path::new(".")).unwrap();
    let o = Options::new(1);
    let node = Node::start(topo, o, 64).unwrap();

    // Host 1 joins; host 2 watches its link; host 0 sends 20 datagrams.
    let mut kids =
        Kids(vec![py(&hosts[1], RECEIVER, &["4"]), py(&hosts[2], WATCHER, &["vb", "4"])]);
    for k in &mut kids.0 {
        ready(k);
    }
    std::thread::sleep(Duration::from_millis(500));
    send(&hosts[0], 20);
    let watcher = kids.0.pop().unwrap();
    let receiver = kids.0.pop().unwrap();
    let (got, leaked) = (count(receiver), count(watcher));
    let st = node.status().unwrap();
    let sw = st.json()["switches"][0].clone();
    assert!(got >= 18, "host 1 joined and got {got} of 20\n{sw:#}");
    assert_eq!(leaked, 0, "host 2 never joined but saw {leaked}\n{sw:#}");
    assert!(sw["counters"]["joins"].as_u64().unwrap_or(0) >= 1, "{sw:#}");
    assert!(sw["counters"]["snooped"].as_u64().unwrap_or(0) >= 18, "{sw:#}");

    // Host 1 has left (its socket closed): the group is unregistered and floods again.
    std::thread::sleep(Duration::from_millis(500));
    let mut w = py(&hosts[2], WATCHER, &["vb", "3"]);
    ready(&mut w);
    send(&hosts[0], 10);
    let flooded = count(w);
    let st = node.status().unwrap();
    node.stop().unwrap();
    let sw = &st.json()["switches"][0];
    assert!(flooded >= 9, "after the leave host 2 saw {flooded} of 10\n{sw:#}");
    assert!(sw["counters"]["leaves"].as_u64().unwrap_or(0) >= 1, "{sw:#}");
    assert_eq!(sw["groups"].as_u64(), Some(0), "{sw:#}");
}
