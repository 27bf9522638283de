//! A VR's Linux control-plane mirror (`control_plane:`), for real: routeplex makes the
//! namespace and a tap per VR interface in it; a process there pings a host through the VR
//! (its requests injected, the host's ARP/ND answers and echo replies punted), and a TCP
//! connection from the host to the VR's address reaches a listener in the namespace. A flood
//! at the VR is punted only within its budget while forwarding goes on. Needs root
//! (namespaces, veth, taps); says so and skips otherwise.

use crate::reply_json;
use reply_json::Json;

use crate::hosts;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use control::netns::Made;
use control::runtime::{Idle, Options};
use control::{Node, Topology};
use hosts::{host, in_ns, ok, run};

/// Removes what the test made, even when it fails: the namespaces it made itself, then what
/// routeplex recorded.
struct Guard {
    namespaces: Vec<String>,
    made: Made,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for e in control::netns::remove(&self.made) {
            eprintln!("cleanup: {e}");
        }
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn options() -> Options {
    let mut o = Options::new(1);
    o.idle = Idle::Yield;
    o
}

fn counters(node: &Node) -> serde_json::Value {
    node.status().unwrap().json()["vrs"][0]["counters"].clone()
}

/// A counter (status leaves out those at zero).
fn n(c: &serde_json::Value, name: &str) -> u64 {
    c[name].as_u64().unwrap_or(0)
}

fn python() -> Option<String> {
    let o = run("sh", &["-c", "command -v python3"]).stdout;
    let p = String::from_utf8_lossy(&o).trim().to_string();
    (!p.is_empty()).then_some(p)
}

#[test]
fn the_mirror_namespace_pings_through_the_vr_and_takes_tcp_to_its_address() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, taps)");
        return;
    }
    let Some(py) = python() else {
        eprintln!("skipped: needs python3 for the TCP listener");
        return;
    };
    let pid = std::process::id();
    let (h, m, link) = (format!("rcph{pid}"), format!("rcpm{pid}"), format!("rcp{pid}a"));
    let mut guard = Guard { namespaces: vec![h.clone()], made: Made::default() };
    host(&h, &link, &["10.61.0.2/24", "2001:db8:61::2/64"], &["10.61.0.1"]);
    let text = format!(
        "ports:\n  - {{ name: pa, kind: afpacket, interface: {link} }}\n\
         vrs:\n  - name: r\n    control_plane: {{ kind: linux, netns: {m} }}\n    interfaces:\n      \
         - {{ name: e0, port: pa, mac: 02:00:00:00:61:01, addresses: [10.61.0.1/24, \"2001:db8:61::1/64\"] }}\n"
    );
    let topo = Topology::parse(&text, "cp.yaml", Path::new(".")).unwrap();
    control::netns::make(&topo, &mut guard.made).unwrap();
    assert_eq!(guard.made.namespaces, vec![m.clone()]);
    let node = Node::start(topo, options(), 64).unwrap();

    // The mirror looks like the VR interface.
    let link_show =
        String::from_utf8_lossy(&in_ns(&m, &["ip", "addr", "show", "e0"]).stdout).to_string();
    assert!(link_show.contains("02:00:00:00:61:01"), "{link_show}");
    assert!(link_show.contains("10.61.0.1/24"), "{link_show}");
    assert!(link_show.contains("2001:db8:61::1/64"), "{link_show}");
    assert!(link_show.contains("mtu 1500") && link_show.contains("UP"), "{link_show}");

    // From the mirror to the host, IPv4 and IPv6: requests injected; ARP/NA answers and echo
    // replies punted.
    let ping4 = in_ns(&m, &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.61.0.2"]);
    let ping6 = in_ns(&m, &["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "2001:db8:61::2"]);
    // TCP from the host to the VR's address reaches a listener in the mirror.
    let server =
        "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('10.61.0.1',7179))\ns.listen(1)\ns.settimeout(10)\nc,_=s.accept()\n\
         d=c.recv(100)\nc.sendall(b'echo:'+d)\nc.close()\n";
    let mut listener =
        Command::new("ip").args(["netns", "exec", &m, &py, "-c", server]).spawn().unwrap();
    let client = "import socket,time\nfor i in range(50):\n  try:\n    c=socket.create_connection(('10.61.0.1',7179),timeout=3)\n    break\n  except OSError:\n    time.sleep(0.1)\nc.sendall(b'hello')\nprint(c.recv(100).decode())\n";
    let tcp = in_ns(&h, &[&py, "-c", client]);
    let _ = listener.wait();
    // The mirror follows the interface's MTU and state.
    let mut node = node;
    node.execute(control::api::Command::InterfaceSet {
        vr: "r".into(),
        interface: "e0".into(),
        mtu: Some(1400),
        up: Some(false),
        addresses: None,
    })
    .unwrap();
    let link =
        String::from_utf8_lossy(&in_ns(&m, &["ip", "link", "show", "e0"]).stdout).to_string();
    assert!(link.contains("mtu 1400") && link.contains("state DOWN"), "{link}");
    let c = counters(&node);
    node.stop().unwrap();
    assert!(ping4.status.success(), "ping 4: {}", String::from_utf8_lossy(&ping4.stdout));
    assert!(ping6.status.success(), "ping 6: {}", String::from_utf8_lossy(&ping6.stdout));
    assert_eq!(
        String::from_utf8_lossy(&tcp.stdout).trim(),
        "echo:hello",
        "TCP through the mirror: {}\n{c:#}",
        String::from_utf8_lossy(&tcp.stderr)
    );
    // 6 echo replies, an ARP reply, a neighbor advertisement, the TCP handshake and data.
    assert!(n(&c, "punted") >= 6 + 2 + 3, "{c:#}");
    assert!(n(&c, "injected") >= 6 + 2 + 3, "{c:#}");
    assert_eq!(n(&c, "punt_rate_limited"), 0, "{c:#}");
    assert_eq!(n(&c, "local_unsupported"), 0, "{c:#}");
    assert_eq!(n(&c, "rx_packets"), n(&c, "local_in"), "{c:#}");
    // Removed exactly: the namespace goes with the guard.
    drop(guard);
    assert!(!control::netns::namespace_exists(&m));
}

/// Issue 23: a restarted fenced host holds its VR interfaces down, and their mirror taps with
/// them (the VR's control plane must not speak for a VR that may run elsewhere now) until
/// `interface_set` takes the interface up.
#[test]
fn a_held_interface_has_its_mirror_down_until_taken_up() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, taps)");
        return;
    }
    let pid = std::process::id();
    let (h, m, link) = (format!("rcqh{pid}"), format!("rcqm{pid}"), format!("rcq{pid}a"));
    let mut guard = Guard { namespaces: vec![h.clone()], made: Made::default() };
    host(&h, &link, &["10.62.0.2/24"], &["10.62.0.1"]);
    let text = format!(
        "ports:\n  - {{ name: pa, kind: afpacket, interface: {link} }}\n\
         vrs:\n  - name: r\n    control_plane: {{ kind: linux, netns: {m} }}\n    interfaces:\n      \
         - {{ name: e0, port: pa, mac: 02:00:00:00:62:01, addresses: [10.62.0.1/24] }}\n"
    );
    let topo = Topology::parse(&text, "cp.yaml", Path::new(".")).unwrap();
    control::netns::make(&topo, &mut guard.made).unwrap();
    let checkpoints = std::collections::HashMap::new();
    let mut node = Node::start_holding(topo, options(), 64, &checkpoints).unwrap();
    node.end_hold();
    let show =
        || String::from_utf8_lossy(&in_ns(&m, &["ip", "link", "show", "e0"]).stdout).to_string();
    let held = show();
    assert!(held.contains("02:00:00:00:62:01") && held.contains("state DOWN"), "{held}");
    node.execute(control::api::Command::InterfaceSet {
        vr: "r".into(),
        interface: "e0".into(),
        mtu: None,
        up: Some(true),
        addresses: None,
    })
    .unwrap();
    let up = show();
    assert!(up.contains(",UP") || up.contains("<UP"), "{up}");
    node.stop().unwrap();
    drop(guard);
    assert!(!control::netns::namespace_exists(&m));
}

#[test]
fn a_punt_flood_is_bounded_and_forwarding_goes_on() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, taps)");
        return;
    }
    let Some(py) = python() else {
        eprintln!("skipped: needs python3 for the flood");
        return;
    };
    let pid = std::process::id();
    let (ha, hb, m) = (format!("rcpfa{pid}"), format!("rcpfb{pid}"), format!("rcpfm{pid}"));
    let (la, lb) = (format!("rcp{pid}x"), format!("rcp{pid}y"));
    let mut guard = Guard { namespaces: vec![ha.clone(), hb.clone()], made: Made::default() };
    host(&ha, &la, &["10.62.0.2/24"], &["10.62.0.1"]);
    host(&hb, &lb, &["10.62.1.2/24"], &["10.62.1.1"]);
    // A low budget, so the flood overruns it many times over.
    let (rate, burst) = (50u64, 10u64);
    let text = format!(
        "ports:\n  - {{ name: pa, kind: afpacket, interface: {la} }}\n  - {{ name: pb, kind: afpacket, interface: {lb} }}\n\
         vrs:\n  - name: r\n    control_plane: {{ kind: linux, netns: {m}, punt_per_sec: {rate}, punt_burst: {burst} }}\n    interfaces:\n      \
         - {{ name: a, port: pa, mac: 02:00:00:00:62:01, addresses: [10.62.0.1/24] }}\n      \
         - {{ name: b, port: pb, mac: 02:00:00:00:62:02, addresses: [10.62.1.1/24] }}\n"
    );
    let topo = Topology::parse(&text, "flood.yaml", Path::new(".")).unwrap();
    control::netns::make(&topo, &mut guard.made).unwrap();
    let node = Node::start(topo, options(), 64).unwrap();
    let t0 = Instant::now();
    // UDP to the VR's own address from host a, as fast as Python sends, for 3 s...
    let flood = "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nend=time.time()+3\nn=0\nwhile time.time()<end:\n  s.sendto(b'x'*32,('10.62.0.1',9999))\n  n+=1\nprint(n)\n";
    let f = Command::new("ip")
        .args(["netns", "exec", &ha, &py, "-c", flood])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // ...while host a pings host b through the VR.
    let ping = in_ns(&ha, &["ping", "-c", "10", "-i", "0.2", "-W", "2", "10.62.1.2"]);
    let out = f.wait_with_output().unwrap();
    let sent: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0);
    let elapsed = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(200));
    let c = counters(&node);
    node.stop().unwrap();
    let ping_out = String::from_utf8_lossy(&ping.stdout).to_string();
    assert!(ping.status.success() && ping_out.contains(" 0% packet loss"), "{ping_out}\n{c:#}");
    let (punted, limited) = (n(&c, "punted"), n(&c, "punt_rate_limited"));
    assert!(sent > 1000, "the flood sent only {sent} datagrams");
    assert!(limited > 0, "{c:#}");
    // The bucket's bound: its depth plus its rate over the run (ARP replies count too).
    let bound = burst + (rate as f64 * (elapsed + 1.0)) as u64;
    assert!(punted <= bound, "punted {punted} > {bound} in {elapsed:.1} s\n{c:#}");
    // Every datagram that reached the VR was punted or dropped for the budget; the pings
    // (and their ARP) were forwarded.
    assert_eq!(n(&c, "forwarded"), 20, "{c:#}");
    assert_eq!(n(&c, "local_port_unreachable"), 0, "{c:#}");
    assert_eq!(n(&c, "rx_packets"), n(&c, "forwarded") + n(&c, "local_in") + limited, "{c:#}");
    eprintln!("flood: {sent} datagrams sent, {punted} punted, {limited} punt_rate_limited");
    drop(guard);
}

/// Polls the node's route sync until VR `vr` holds `want` routes of source `kernel` (or 10 s
/// pass); returns what it holds.
fn wait_kernel_routes(node: &mut Node, vr: &str, want: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        node.sync_control_planes();
        let n = node
            .table(vr)
            .unwrap()
            .counts()
            .iter()
            .find(|(s, _)| *s == dataplane::RouteSource::Kernel)
            .map_or(0, |c| c.1);
        if n == want || Instant::now() > end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn routes_in_the_mirrors_kernel_are_the_vrs() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, taps)");
        return;
    }
    let pid = std::process::id();
    let (ha, hb, m) = (format!("rcpka{pid}"), format!("rcpkb{pid}"), format!("rcpkm{pid}"));
    let (la, lb) = (format!("rcp{pid}k"), format!("rcp{pid}l"));
    let mut guard = Guard { namespaces: vec![ha.clone(), hb.clone()], made: Made::default() };
    host(&ha, &la, &["10.63.0.2/24", "2001:db8:63::2/64"], &["10.63.0.1", "2001:db8:63::1"]);
    host(&hb, &lb, &["10.63.1.2/24", "2001:db8:63:1::2/64"], &["10.63.1.1", "2001:db8:63:1::1"]);
    // Host b also answers for a network behind it, which the VR learns only from its kernel.
    ok("ip", &["-n", &hb, "address", "add", "10.99.0.1/32", "dev", "lo"]);
    ok("ip", &["-n", &hb, "address", "add", "2001:db8:99::1/128", "dev", "lo"]);
    let text = format!(
        "ports:\n  - {{ name: pa, kind: afpacket, interface: {la} }}\n  - {{ name: pb, kind: afpacket, interface: {lb} }}\n\
         vrs:\n  - name: r\n    control_plane: {{ kind: linux, netns: {m} }}\n    interfaces:\n      \
         - {{ name: a, port: pa, mac: 02:00:00:00:63:01, addresses: [10.63.0.1/24, \"2001:db8:63::1/64\"] }}\n      \
         - {{ name: b, port: pb, mac: 02:00:00:00:63:02, addresses: [10.63.1.1/24, \"2001:db8:63:1::1/64\"] }}\n"
    );
    let topo = Topology::parse(&text, "sync.yaml", Path::new(".")).unwrap();
    control::netns::make(&topo, &mut guard.made).unwrap();
    let mut node = Node::start(topo, options(), 64).unwrap();
    let ping = |dst: &str| {
        let six = if dst.contains(':') { "-6" } else { "-4" };
        in_ns(&ha, &["ping", six, "-c", "2", "-i", "0.2", "-W", "1", dst]).status.success()
    };
    // The kernel's own routes for the taps' addresses are not synced: the VR has them.
    assert_eq!(wait_kernel_routes(&mut node, "r", 0), 0);
    assert!(!ping("10.99.0.1"), "no route yet");
    let c0 = counters(&node);
    assert!(n(&c0, "no_route") >= 2, "{c0:#}");

    // A static route in the mirror (what a daemon would install), IPv4 and IPv6, and a
    // blackhole: the VR forwards by them.
    ok("ip", &["-n", &m, "route", "add", "10.99.0.0/24", "via", "10.63.1.2", "proto", "static"]);
    ok("ip", &["-n", &m, "-6", "route", "add", "2001:db8:99::/48", "via", "2001:db8:63:1::2"]);
    ok("ip", &["-n", &m, "route", "add", "blackhole", "10.98.0.0/24"]);
    assert_eq!(wait_kernel_routes(&mut node, "r", 3), 3);
    assert!(ping("10.99.0.1"), "via the synced route\n{:#}", counters(&node));
    assert!(ping("2001:db8:99::1"), "via the synced IPv6 route\n{:#}", counters(&node));
    let before = counters(&node);
    assert!(!ping("10.98.0.1"));
    let after = counters(&node);
    assert_eq!(n(&after, "blackhole") - n(&before, "blackhole"), 2, "{after:#}");
    let status = node.status().unwrap();
    assert_eq!(status.json()["vrs"][0]["routes"]["kernel"], 3, "{status:#}");
    assert_eq!(status.json()["vrs"][0]["control_plane"]["refused"], 0, "{status:#}");

    // Withdrawn in the kernel: gone from the VR, and traffic to it is no_route again.
    ok("ip", &["-n", &m, "route", "del", "10.99.0.0/24"]);
    assert_eq!(wait_kernel_routes(&mut node, "r", 2), 2);
    let before = counters(&node);
    assert!(!ping("10.99.0.1"));
    let after = counters(&node);
    assert_eq!(n(&after, "no_route") - n(&before, "no_route"), 2, "{after:#}");
    node.stop().unwrap();
    drop(guard);
}
