//! A VR on AF_XDP ports over 4-queue veths (`queues: all`, the default) forwarding many UDP
//! flows between two host namespaces: as one plain VR (its port receiving from every queue)
//! and as a VR with `replicas: 2` (queue q to replica q mod 2), where both replicas forward.
//! Also: more replicas than the interface has queues is refused, naming the port, the
//! interface and the count. Needs root (namespaces, veth); says so and skips otherwise.

mod reply_json;
use reply_json::Json;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use control::runtime::{Idle, Options};
use control::{Node, Topology};

mod hosts;
use hosts::{in_ns, ip, Namespaces};

const FLOWS: usize = 64;
const ROUNDS: usize = 10;
const SENDER_ENV: &str = "RPX_AFXDP_VR_SEND";

/// The VR's namespace (`ports`, with `va0`, `va1`) and two hosts: `h1` (10.1.0.2 on `vb0`)
/// and `h2` (10.2.0.2 on `vb1`), each behind a 4-queue veth.
struct Lab {
    ports: String,
    h1: String,
    h2: String,
    _ns: Namespaces,
}

impl Lab {
    fn new() -> Lab {
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!("{}x{}", std::process::id() % 100_000, N.fetch_add(1, Ordering::Relaxed));
        let (ports, h1, h2) = (format!("rpq{tag}"), format!("rpq{tag}a"), format!("rpq{tag}b"));
        let ns = Namespaces(vec![ports.clone(), h1.clone(), h2.clone()]);
        for n in &ns.0 {
            ip(&["netns", "add", n]);
        }
        for (k, h) in [&h1, &h2].into_iter().enumerate() {
            let (va, vb) = (format!("va{k}"), format!("vb{k}"));
            #[rustfmt::skip]
            ip(&["-n", &ports, "link", "add", "name", &va, "numtxqueues", "4", "numrxqueues", "4",
                "type", "veth", "peer", "name", &vb, "numtxqueues", "4", "numrxqueues", "4",
                "netns", h]);
            let addr = format!("10.{}.0.2/24", k + 1);
            let gw = format!("10.{}.0.1", k + 1);
            ip(&["-n", h, "addr", "add", &addr, "dev", &vb]);
            ip(&["-n", &ports, "link", "set", &va, "up"]);
            ip(&["-n", h, "link", "set", &vb, "up"]);
            ip(&["-n", h, "route", "add", "default", "via", &gw]);
            // Finished checksums from the host's stack (see the afxdp module's known limit).
            let _ = in_ns(h, &["ethtool", "-K", &vb, "tx", "off"]);
        }
        Lab { ports, h1, h2, _ns: ns }
    }

    /// The VR (with `replicas`), p0 binding `queues` of va0's queues and p1 all of va1's.
    fn topology(&self, replicas: usize, queues: &str) -> Topology {
        let rep = if replicas > 1 { format!("    replicas: {replicas}\n") } else { String::new() };
        let text = format!(
            "workers: 2\n\
             ports:\n  - {{ name: p0, kind: afxdp, interface: va0, netns: {ns}, queues: {queues} }}\n  \
             - {{ name: p1, kind: afxdp, interface: va1, netns: {ns} }}\n\
             vrs:\n  - name: r\n{rep}    interfaces:\n      \
             - {{ name: e0, port: p0, mac: 02:00:00:00:71:00, addresses: [10.1.0.1/24] }}\n      \
             - {{ name: e1, port: p1, mac: 02:00:00:00:71:01, addresses: [10.2.0.1/24] }}\n",
            ns = self.ports
        );
        Topology::parse(&text, "afxdp_queues.yaml", Path::new(".")).unwrap()
    }

    /// IPv4 packets `h2`'s stack has taken in.
    fn h2_received(&self) -> u64 {
        let out = in_ns(&self.h2, &["cat", "/proc/net/snmp"]);
        let text = String::from_utf8_lossy(&out.stdout);
        let mut rows = text.lines().filter(|l| l.starts_with("Ip:"));
        let (head, vals) = (rows.next().unwrap(), rows.next().unwrap());
        let col = head.split_whitespace().position(|k| k == "InReceives").unwrap();
        vals.split_whitespace().nth(col).unwrap().parse().unwrap()
    }

    /// Sends the flows from `h1` to `h2` (a child process); returns how many were sent.
    fn send(&self) -> u64 {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.h1])
            .arg(exe)
            .args(["--exact", "afxdp_vr_sender_child", "--ignored", "--nocapture"])
            .env(SENDER_ENV, "10.2.0.2")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // libtest prints "test afxdp_vr_sender_child ... " before the child's own output.
        text.lines()
            .find_map(|l| l.split_once("SENT "))
            .and_then(|(_, n)| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("sender: {text} {}", String::from_utf8_lossy(&out.stderr)))
    }

    /// Sends until `h2` has seen every flow's datagrams (the first round may be lost while
    /// the VR and the hosts resolve each other's addresses); returns what was sent, what `h2`
    /// received.
    fn forward(&self) -> (u64, u64) {
        // Warm up: neighbors resolved both ways.
        let _ = in_ns(&self.h1, &["ping", "-c", "2", "-i", "0.2", "-W", "1", "10.2.0.2"]);
        let before = self.h2_received();
        let sent = self.send();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.h2_received() < before + sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        (sent, self.h2_received() - before)
    }
}

/// The sender half: `FLOWS` UDP sockets (a flow each), `ROUNDS` datagrams each. Run by hand
/// (without the variable) it does nothing.
#[test]
#[ignore = "helper process for the afxdp queue tests"]
fn afxdp_vr_sender_child() {
    let Ok(to) = std::env::var(SENDER_ENV) else { return };
    let socks: Vec<std::net::UdpSocket> =
        (0..FLOWS).map(|_| std::net::UdpSocket::bind("0.0.0.0:0").unwrap()).collect();
    let mut sent = 0u64;
    for _ in 0..ROUNDS {
        for s in &socks {
            sent += u64::from(s.send_to(&[0u8; 32], (to.as_str(), 9)).is_ok());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("SENT {sent}");
}

fn options() -> Options {
    let mut o = Options::new(2);
    o.idle = Idle::Yield;
    o
}

fn root() -> bool {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces and veth)");
        return false;
    }
    true
}

#[test]
fn a_vr_on_every_queue_forwards_every_flow() {
    if !root() {
        return;
    }
    let lab = Lab::new();
    let node = Node::start(lab.topology(1, "all"), options(), 64).unwrap();
    let (sent, got) = lab.forward();
    let st = node.status().unwrap();
    node.stop().unwrap();
    assert_eq!(sent, (FLOWS * ROUNDS) as u64);
    assert!(got >= sent, "h2 got {got} of {sent}\n{st:#}");
    let st_j = st.json();
    let ports = st_j["ports"].as_array().unwrap();
    assert!(ports.iter().all(|p| p["mode"] == "xdp driver, copy, multi-buffer"), "{ports:#?}");
}

#[test]
fn a_replicated_vr_deals_the_queues_to_its_replicas() {
    if !root() {
        return;
    }
    let lab = Lab::new();
    let node = Node::start(lab.topology(2, "all"), options(), 64).unwrap();
    let (sent, got) = lab.forward();
    let st = node.status().unwrap();
    node.stop().unwrap();
    assert!(got >= sent, "h2 got {got} of {sent}\n{st:#}");
    let st_j = st.json();
    let inst = st_j["replicated"][0]["instances"].as_array().unwrap();
    let fwd: Vec<u64> = inst.iter().map(|i| i["forwarded"].as_u64().unwrap()).collect();
    assert!(fwd.iter().all(|&n| n > 0), "both replicas forwarded: {fwd:?}");
    assert!(fwd.iter().sum::<u64>() >= sent, "{fwd:?} of {sent}");

    // One queue for two replicas: refused, naming the port, the interface and its count.
    let e = Node::start(lab.topology(2, "1"), options(), 64).err().expect("1 queue, 2 replicas");
    let want = "port p0: afxdp va0: 2 replicas need a queue each, but the port has 1 of the \
                interface's 4 receive queues";
    assert!(e.to_string().contains(want), "{e}");
}
