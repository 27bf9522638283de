//! IPv6 local fragmentation through a real kernel (issue 27, item 5): `ping -6 -s 2000` from a
//! host namespace to the VR's own address on a 1500-byte link. The kernel sends each request
//! in two fragments; the VR reassembles it and its 2,048-byte reply must leave in fragments
//! (RFC 8200 §4.5), which the kernel reassembles into replies. IPv4's `ping -s 2000` beside it.
//! Needs root (namespaces, veth, AF_XDP); says so and skips otherwise.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::process::Command;

use control::runtime::Options;
use control::{Node, Topology};

use crate::hosts;
use hosts::{in_ns, ip, Namespaces};

/// Replies to `count` pings of `size` bytes from `ns` to `dst`, and ping's output.
fn ping(ns: &str, dst: &str, size: &str, count: u32) -> (usize, String) {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-n", "-i", "0.2", "-W", "2", "-s", size, "-c"])
        .arg(count.to_string())
        .arg(dst)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let replies = out.lines().filter(|l| l.contains("bytes from")).count();
    (replies, out)
}

#[test]
fn echo_replies_over_the_mtu_leave_in_fragments() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth and AF_XDP)");
        return;
    }
    let pid = std::process::id() % 100_000;
    let (mid, h) = (format!("rlf{pid}m"), format!("rlf{pid}a"));
    let _ns = Namespaces(vec![mid.clone(), h.clone()]);
    for n in [&mid, &h] {
        ip(&["netns", "add", n]);
    }
    ip(&["-n", &mid, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", &h]);
    ip(&["netns", "exec", &h, "sysctl", "-qw", "net.ipv6.conf.vb.accept_dad=0"]);
    ip(&["netns", "exec", &mid, "sysctl", "-qw", "net.ipv6.conf.va.disable_ipv6=1"]);
    ip(&["-n", &h, "addr", "add", "10.1.0.2/24", "dev", "vb"]);
    ip(&["-n", &h, "addr", "add", "2001:db8:1::2/64", "dev", "vb", "nodad"]);
    ip(&["-n", &mid, "link", "set", "va", "up"]);
    ip(&["-n", &h, "link", "set", "vb", "up"]);
    // Finished checksums from the host's stack (see the afxdp module's known limit).
    let _ = in_ns(&h, &["ethtool", "-K", "vb", "tx", "off"]);
    let text = format!(
        "ports:\n  - {{ name: pa, kind: afxdp, interface: va, netns: {mid} }}\n\
         vrs:\n  - name: r1\n    interfaces:\n      \
         - {{ name: ea, port: pa, mac: \"02:00:00:00:aa:01\", addresses: [10.1.0.1/24, \"2001:db8:1::1/64\"] }}\n"
    );
    let topo = Topology::parse(&text, "local_fragments6.yaml", Path::new(".")).unwrap();
    let o = Options::new(1);
    let node = Node::start(topo, o, 64).unwrap();
    // Small pings first: both sides resolved.
    let small6 = ping(&h, "2001:db8:1::1", "56", 3);
    let big6 = ping(&h, "2001:db8:1::1", "2000", 5);
    let big4 = ping(&h, "10.1.0.1", "2000", 5);
    let st = node.status().unwrap();
    node.stop().unwrap();
    let c = &st.json()["vrs"][0]["counters"];
    eprintln!("{c:#}");
    assert!(small6.0 >= 2, "{}", small6.1);
    assert!(big4.0 >= 4, "IPv4: {}\n{c:#}", big4.1);
    assert!(big6.0 >= 4, "IPv6: {}\n{c:#}", big6.1);
    assert!(big6.1.contains("2008 bytes from 2001:db8:1::1"), "{}", big6.1);
    // Each 2,048-byte reply (IPv4's 2,028) leaves in two fragments.
    let sent = c["fragments_sent"].as_u64().unwrap_or(0);
    assert!(sent >= 2 * (big4.0 + big6.0) as u64, "{c:#}");
}
