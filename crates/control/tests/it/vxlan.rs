//! VXLAN between hosts, end to end with real kernels: routeplex's `vxlan` port (its underlay in
//! namespace U) against a Linux kernel `vxlan` device (in namespace K) over a veth "underlay";
//! and two routeplex data planes, each with its underlay in its own namespace. A VR routes
//! between the VXLAN segment and a Linux host (namespace H, on an afpacket port), so real pings
//! (IPv4 and IPv6) and iperf3 cross the tunnel in both directions. Needs root (namespaces,
//! veth, the kernel vxlan module); says so and skips otherwise.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use control::runtime::Options;
use control::{Node, Topology};
use serde_json::Value;

use crate::common;
use crate::hosts;
use hosts::{have, in_ns, ip, ok, Namespaces};

struct Kill(Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn root() -> bool {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, vxlan)");
        return false;
    }
    true
}

/// A veth pair `a` (in `na`, with `addrs_a`) and `b` (in `nb`, with `addrs_b`), both up.
fn veth(na: &str, a: &str, addrs_a: &[&str], nb: &str, b: &str, addrs_b: &[&str]) {
    ip(&["-n", na, "link", "add", a, "type", "veth", "peer", "name", b, "netns", nb]);
    for (ns, dev, addrs) in [(na, a, addrs_a), (nb, b, addrs_b)] {
        for ad in addrs {
            ip(&["-n", ns, "addr", "add", ad, "dev", dev, "nodad"]);
        }
        ip(&["-n", ns, "link", "set", dev, "up"]);
        // The peer receives what we send through packet sockets, so no checksum is left to
        // offload (see ports::afpacket's known limit).
        ok("ip", &["netns", "exec", ns, "ethtool", "-K", dev, "tx", "off"]);
    }
}

/// A VR `r` with `e0` on vxlan port `vx` (VNI 42 from `local` to `remote`, underlay in `u`)
/// and `e1` on afpacket port `pa` (interface `ha` in `u`, subnet 10.4(2+n)/24), and `routes`.
fn topology(u: &str, local: &str, remote: &str, n: u8, routes: &str) -> Topology {
    let text = format!(
        "ports:\n  - {{ name: vx, kind: vxlan, vni: 42, local: {local}, remotes: [{remote}], netns: {u} }}\n  \
         - {{ name: pa, kind: afpacket, interface: ha, netns: {u} }}\n\
         vrs:\n  - name: r\n    interfaces:\n      \
         - {{ name: e0, port: vx, mac: 02:00:00:00:42:0{n}, addresses: [10.42.0.{n}/24, \"2001:db8:42::{n}/64\"] }}\n      \
         - {{ name: e1, port: pa, mac: 02:00:00:00:43:0{n}, addresses: [10.4{m}.0.1/24, \"2001:db8:4{m}::1/64\"] }}\n{routes}",
        m = 2 + n
    );
    Topology::parse(&text, "vxlan.yaml", Path::new(".")).unwrap()
}

fn start(t: Topology) -> Node {
    let o = Options::new(1);
    Node::start(t, o, 64).unwrap()
}

/// A host namespace `h` behind `e1` of the VR: veth `ha` (in `u`, no address) to `hb`.
fn host_behind(u: &str, h: &str, net: u8) {
    veth(u, "ha", &[], h, "hb", &[&format!("10.{net}.0.2/24"), &format!("2001:db8:{net}::2/64")]);
    ip(&["-n", h, "route", "add", "default", "via", &format!("10.{net}.0.1")]);
    ip(&["-n", h, "-6", "route", "add", "default", "via", &format!("2001:db8:{net}::1")]);
}

#[track_caller]
fn ping(from: &str, to: &str) {
    let o = in_ns(from, &["ping", "-c", "3", "-i", "0.2", "-W", "2", to]);
    assert!(
        o.status.success(),
        "ping {to} from {from}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// iperf3 for 2 s from `client` to `server_addr` in `server`; asserts it moved bytes.
fn iperf(server: &str, client: &str, server_addr: &str) {
    if !have("iperf3") {
        eprintln!("iperf3 not installed: skipping the iperf3 part");
        return;
    }
    let srv = Command::new("ip")
        .args(["netns", "exec", server, "iperf3", "-s", "-1", "-B", server_addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _srv = Kill(vec![srv]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let o = in_ns(client, &["iperf3", "-c", server_addr, "-t", "2", "-J"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "iperf3 {client} -> {server_addr}: {out}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let bytes = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(bytes > 0, "iperf3 moved nothing: {out}");
}

/// The vxlan port's status row: it moved frames both ways, and nothing was dropped.
#[track_caller]
fn assert_clean_vxlan(status: &impl Json) {
    let status = &status.json();
    let port = status["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "vx")
        .unwrap_or_else(|| panic!("no port vx: {status:#}"));
    assert!(port["rx"].as_u64().unwrap() > 0, "{port:#}");
    assert!(port["tx"].as_u64().unwrap() > 0, "{port:#}");
    assert_eq!(port["rx_dropped"], 0, "{port:#}");
    // "udp socket, gso" while the kernel takes runs of datagrams as one send.
    assert!(port["mode"].as_str().unwrap().starts_with("udp socket"), "{port:#}");
    let b = &port["backend"];
    assert!(b["tx_datagrams"].as_u64().unwrap() >= port["tx"].as_u64().unwrap(), "{port:#}");
    println!(
        "vx: mode {}, tx {} in {} gso sends, rx {} with {} gro reads",
        port["mode"], port["tx"], b["tx_gso_sends"], port["rx"], b["rx_gro_reads"]
    );
    for r in ports::vxlan::Reason::ALL {
        assert_eq!(b[r.name()], 0, "{}: {port:#}", r.name());
    }
}

#[test]
fn routeplex_vxlan_interoperates_with_a_kernel_vxlan_device() {
    if !root() {
        return;
    }
    let pid = std::process::id();
    let (u, k, h) = (format!("rvu{pid}"), format!("rvk{pid}"), format!("rvh{pid}"));
    let _guard = Namespaces(vec![u.clone(), k.clone(), h.clone()]);
    for n in [&u, &k, &h] {
        ip(&["netns", "add", n]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
    }
    veth(&u, "ua", &["192.0.2.1/24"], &k, "ub", &["192.0.2.2/24"]);
    ip(&[
        "-n",
        &k,
        "link",
        "add",
        "vx0",
        "address",
        "02:00:00:00:42:02",
        "type",
        "vxlan",
        "id",
        "42",
        "local",
        "192.0.2.2",
        "remote",
        "192.0.2.1",
        "dstport",
        "4789",
        "dev",
        "ub",
    ]);
    for a in ["10.42.0.2/24", "2001:db8:42::2/64"] {
        ip(&["-n", &k, "addr", "add", a, "dev", "vx0", "nodad"]);
    }
    ip(&["-n", &k, "link", "set", "vx0", "up"]);
    ok("ip", &["netns", "exec", &k, "ethtool", "-K", "vx0", "tx", "off"]);
    ip(&["-n", &k, "route", "add", "10.43.0.0/24", "via", "10.42.0.1"]);
    ip(&["-n", &k, "-6", "route", "add", "2001:db8:43::/64", "via", "2001:db8:42::1"]);
    host_behind(&u, &h, 43);

    let node = start(topology(&u, "192.0.2.1", "192.0.2.2", 1, ""));
    // The VR's own addresses over the tunnel, then through it to the host behind, both ways.
    ping(&k, "10.42.0.1");
    ping(&k, "2001:db8:42::1");
    ping(&h, "10.42.0.2");
    ping(&h, "2001:db8:42::2");
    ping(&k, "10.43.0.2");
    ping(&k, "2001:db8:43::2");
    iperf(&k, &h, "10.42.0.2");
    iperf(&h, &k, "10.43.0.2");
    let status = node.status().unwrap();
    node.stop().unwrap();
    assert_clean_vxlan(&status);
    assert_eq!(status.json()["vrs"][0]["interfaces"][0]["mtu"], 1450, "{status:#}");
}

#[test]
fn two_routeplex_hosts_carry_a_segment_over_vxlan() {
    if !root() {
        return;
    }
    let pid = std::process::id();
    let [u1, u2, h1, h2] = ["rwu1", "rwu2", "rwh1", "rwh2"].map(|p| format!("{p}{pid}"));
    let _guard = Namespaces(vec![u1.clone(), u2.clone(), h1.clone(), h2.clone()]);
    for n in [&u1, &u2, &h1, &h2] {
        ip(&["netns", "add", n]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
    }
    veth(&u1, "ua", &["192.0.2.1/24"], &u2, "ub", &["192.0.2.2/24"]);
    host_behind(&u1, &h1, 43);
    host_behind(&u2, &h2, 44);
    // Each VR reaches the other's host over the segment.
    let r = |p4: &str, via4: &str, p6: &str, via6: &str| {
        format!("    routes:\n      - {{ prefix: {p4}, via: {via4} }}\n      - {{ prefix: \"{p6}\", via: \"{via6}\" }}\n")
    };
    let t1 = topology(
        &u1,
        "192.0.2.1",
        "192.0.2.2",
        1,
        &r("10.44.0.0/24", "10.42.0.2", "2001:db8:44::/64", "2001:db8:42::2"),
    );
    // Host 2 starts with a stale remote; a fleet agent would correct it through the handle.
    let t2 = topology(
        &u2,
        "192.0.2.2",
        "192.0.2.9",
        2,
        &r("10.43.0.0/24", "10.42.0.1", "2001:db8:43::/64", "2001:db8:42::1"),
    );
    let n1 = start(t1);
    let mut n2 = start(t2);
    // Corrected live by `apply`, as a fleet agent applies the desired topology it is given.
    let fixed = topology(
        &u2,
        "192.0.2.2",
        "192.0.2.1",
        2,
        &r("10.43.0.0/24", "10.42.0.1", "2001:db8:43::/64", "2001:db8:42::1"),
    );
    let plan = n2.apply(fixed, false).unwrap();
    assert_eq!(plan.steps, ["~ port vx: remotes [192.0.2.9] -> [192.0.2.1]"], "{plan}");
    assert_eq!(plan.unchanged, ["r"], "{plan}");
    let h = n2.vxlan("vx").expect("a handle for port vx");
    assert_eq!(h.remotes(), ["192.0.2.1".parse::<std::net::IpAddr>().unwrap()]);
    assert!(n2.vxlan("pa").is_none());
    ping(&h1, "10.44.0.2");
    ping(&h1, "2001:db8:44::2");
    ping(&h2, "10.43.0.2");
    ping(&h2, "2001:db8:43::2");
    iperf(&h2, &h1, "10.44.0.2");
    let (s1, s2) = (n1.status().unwrap(), n2.status().unwrap());
    n1.stop().unwrap();
    n2.stop().unwrap();
    assert_clean_vxlan(&s1);
    assert_clean_vxlan(&s2);
}

/// A vxlan port's remotes changed by `apply` (no root: the underlay is loopback): the plan
/// says so and leaves the VR running, what the VR floods afterwards reaches the new remote and
/// no longer the old one, and a port that gains a vxlan port through `apply` can change its
/// remotes too. A changed VNI still needs a restart.
#[test]
fn apply_changes_a_vxlan_ports_remotes_live() {
    use std::net::{IpAddr, UdpSocket};
    use std::time::{Duration, Instant};
    let dstport = 20000 + (std::process::id() % 20000) as u16;
    let e1_mac = [2, 0, 0, 0, 0x77, 2];
    let text = |remotes: &str, vni: u32, extra: &str| {
        format!(
            "ports:\n  - {{ name: vx, kind: vxlan, vni: {vni}, local: 127.0.77.1, remotes: [{remotes}], dstport: {dstport} }}\n  \
             - {{ name: m, kind: mem }}\n{extra}\
             vrs:\n  - name: r\n    interfaces:\n      \
             - {{ name: e0, port: vx, mac: 02:00:00:00:77:01, addresses: [10.77.0.1/24] }}\n      \
             - {{ name: e1, port: m, mac: 02:00:00:00:77:02, addresses: [10.0.0.1/24] }}\n"
        )
    };
    let parse = |t: String| Topology::parse(&t, "vxlan.yaml", Path::new(".")).unwrap();
    let listen = |a: &str| {
        let s = UdpSocket::bind((a, dstport)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        s
    };
    // The VNIs of the VXLAN datagrams that reach `s` within `wait`, or up to the first one
    // when `first`.
    let got = |s: &UdpSocket, wait: Duration, first: bool| {
        let (t0, mut vnis, mut buf) = (Instant::now(), Vec::new(), [0u8; 2048]);
        while (vnis.is_empty() || !first) && t0.elapsed() < wait {
            if let Ok(n) = s.recv(&mut buf) {
                assert!(n >= 8, "a datagram of {n} bytes");
                vnis.push(u32::from_be_bytes([0, buf[4], buf[5], buf[6]]));
            }
        }
        vnis
    };
    let five = Duration::from_secs(5);
    // One frame from the host behind e1 to `dst` on e0's subnet: the VR asks for `dst` on e0,
    // which the vxlan port floods to its remotes.
    let send = |m: &mut ports::mem::MemPort, last: u8| {
        use ports::{Batch, Port};
        let mut b = Batch::new(1);
        b.push_copy(&common::frame_to(e1_mac, [10, 77, 0, last], 0));
        assert_eq!(m.tx_burst(&mut b, &[0]), 1);
    };
    let (old, new) = (listen("127.0.77.2"), listen("127.0.77.3"));
    let mut n = start(parse(text("127.0.77.2", 77, "")));
    let mut m = n.take_outside("m").unwrap();
    send(&mut m, 9);
    assert!(got(&old, five, true) == [77], "nothing reached the first remote");

    let plan = n.apply(parse(text("127.0.77.3", 77, "")), false).unwrap();
    assert_eq!(plan.steps, ["~ port vx: remotes [127.0.77.2] -> [127.0.77.3]"], "{plan}");
    assert_eq!(plan.unchanged, ["r"], "{plan}");
    let h = n.vxlan("vx").unwrap();
    assert_eq!(h.remotes(), ["127.0.77.3".parse::<IpAddr>().unwrap()]);
    send(&mut m, 10);
    assert!(got(&new, five, true) == [77], "nothing reached the new remote");
    // The swap is done: what the VR floods now goes to the new remote alone.
    got(&old, Duration::from_millis(300), false);
    got(&new, Duration::from_millis(300), false);
    send(&mut m, 11);
    assert!(got(&new, five, true) == [77], "the new remote heard nothing");
    assert_eq!(got(&old, Duration::from_millis(300), false), Vec::<u32>::new());

    // A vxlan port a running host gains with a new VR: its handle is there to change.
    let vy = "  - { name: vy, kind: vxlan, vni: 79, local: 127.0.77.1, remotes: [127.0.77.4] }\n";
    let gain = |remotes: &str| {
        let t = text("127.0.77.3", 77, &vy.replace("127.0.77.4", remotes));
        parse(format!(
            "{t}  - name: s\n    interfaces:\n      - {{ name: e0, port: vy, mac: 02:00:00:00:79:01, addresses: [10.79.0.1/24] }}\n"
        ))
    };
    let plan = n.apply(gain("127.0.77.4"), false).unwrap();
    assert_eq!(plan.steps, ["+ vr s (new cell; opens vy)"], "{plan}");
    let plan = n.apply(gain("127.0.77.5, 127.0.77.6"), false).unwrap();
    assert_eq!(
        plan.steps,
        ["~ port vy: remotes [127.0.77.4] -> [127.0.77.5, 127.0.77.6]"],
        "{plan}"
    );
    assert_eq!(n.vxlan("vy").unwrap().remotes().len(), 2);

    // Its VNI is the segment: not changed live, and nothing else changes either.
    let e = n.apply(parse(text("127.0.77.2", 78, "")), false).unwrap_err();
    assert!(e.to_string().contains("port vx: its kind or settings changed"), "{e}");
    assert_eq!(n.vxlan("vx").unwrap().remotes(), ["127.0.77.3".parse::<IpAddr>().unwrap()]);
    n.stop().unwrap();
}
