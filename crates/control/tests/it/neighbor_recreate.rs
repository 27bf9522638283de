//! A neighbor whose MAC changes under a VR (issue 17, item 4): the VR's IPv4 and IPv6 entries
//! follow, and forwarding to it recovers within a bounded number of pings.
//!
//! A VR routes between two host namespaces over AF_PACKET ports on veths. Host 1 changes MAC
//! twice, in the two ways the VR can notice:
//! - in place, the link staying up: host 1 announces itself (gratuitous ARP, unsolicited NA
//!   with Override, the kernel's `arp_notify`/`ndisc_notify`), and the VR's entries take the
//!   new MAC (RFC 826 merge, RFC 4861 §7.2.5);
//! - the veth deleted and re-created with a new MAC and no announcement at all: the VR's port
//!   sees its interface go and come back and flushes the neighbors learned on it, so the next
//!   packet resolves afresh.
//!
//! After each change host 2 pings host 1 through the VR (the direction that uses the VR's
//! entry for host 1) every 100 ms: the first reply must come within the first 10 requests
//! (one second of pings). Needs root; says so and skips otherwise.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::process::Command;

use control::api::Command as Api;
use control::runtime::Options;
use control::{Node, Topology};
use serde_json::Value;

use crate::hosts;
use hosts::{ip, Namespaces};

const MAC1: &str = "02:00:00:78:01:01";
const MAC2: &str = "02:00:00:78:01:02";
const MAC3: &str = "02:00:00:78:01:03";

/// Host 1's end of its veth, with `mac`, addresses and a route to host 2; `notify` makes the
/// kernel announce MAC changes (gratuitous ARP, unsolicited NA).
fn host1_link(ports: &str, h1: &str, mac: &str, notify: bool) {
    ip(&["-n", ports, "link", "add", "va1", "type", "veth", "peer", "name", "vb1", "netns", h1]);
    ip(&["-n", h1, "link", "set", "vb1", "address", mac]);
    let n = if notify { "1" } else { "0" };
    for s in
        [format!("net.ipv4.conf.vb1.arp_notify={n}"), format!("net.ipv6.conf.vb1.ndisc_notify={n}")]
    {
        ip(&["netns", "exec", h1, "sysctl", "-qw", &s]);
    }
    ip(&["-n", ports, "link", "set", "va1", "up"]);
    ip(&["-n", h1, "addr", "add", "10.78.1.2/24", "dev", "vb1"]);
    ip(&["-n", h1, "addr", "add", "2001:db8:78:1::2/64", "dev", "vb1", "nodad"]);
    ip(&["-n", h1, "link", "set", "vb1", "up"]);
    ip(&["-n", h1, "route", "add", "10.78.2.0/24", "via", "10.78.1.1"]);
    ip(&["-n", h1, "-6", "route", "add", "2001:db8:78:2::/64", "via", "2001:db8:78:1::1"]);
}

/// Pings `dst` from namespace `ns` every 100 ms, `count` times; the sequence number of the
/// first reply (1-based), if any, and the output.
fn first_reply(ns: &str, dst: &str, count: u32) -> (Option<u32>, String) {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-n", "-i", "0.1", "-W", "1", "-c"])
        .arg(count.to_string())
        .arg(dst)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let first = out
        .lines()
        .filter(|l| l.contains("bytes from"))
        .filter_map(|l| l.split("icmp_seq=").nth(1)?.split(' ').next()?.parse().ok())
        .min();
    (first, out)
}

/// The MAC the VR holds for `addr`, if it has an entry with one.
fn neighbor_mac(node: &mut Node, addr: &str) -> (Option<String>, Value) {
    let v = node.execute(Api::NeighborList { vr: "r".into() }).unwrap();
    let mac = v.json()["neighbors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["address"] == addr)
        .and_then(|n| n["mac"].as_str().map(str::to_string));
    (mac, v.json())
}

/// Host 2 reaches host 1 over IPv4 and IPv6 within 10 pings, and the VR's entries for host 1
/// hold `mac`.
#[track_caller]
fn recovers(node: &mut Node, h2: &str, mac: &str, step: &str) {
    for dst in ["10.78.1.2", "2001:db8:78:1::2"] {
        let (first, out) = first_reply(h2, dst, 15);
        let (got, table) = neighbor_mac(node, dst);
        assert!(
            first.is_some_and(|s| s <= 10),
            "{step}: {dst} first answered at ping {first:?} (want within 10)\n{out}\n{table:#}"
        );
        assert_eq!(got.as_deref(), Some(mac), "{step}: the VR's entry for {dst}\n{table:#}");
    }
}

#[test]
fn neighbors_follow_a_peer_whose_mac_changes() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces and veth)");
        return;
    }
    let pid = std::process::id();
    let (ports, h1, h2) = (format!("rswp{pid}"), format!("rswa{pid}"), format!("rswb{pid}"));
    let _guard = Namespaces(vec![ports.clone(), h1.clone(), h2.clone()]);
    for n in [&ports, &h1, &h2] {
        ip(&["netns", "add", n]);
    }
    host1_link(&ports, &h1, MAC1, true);
    ip(&["-n", &ports, "link", "add", "va2", "type", "veth", "peer", "name", "vb2", "netns", &h2]);
    ip(&["-n", &ports, "link", "set", "va2", "up"]);
    ip(&["-n", &h2, "addr", "add", "10.78.2.2/24", "dev", "vb2"]);
    ip(&["-n", &h2, "addr", "add", "2001:db8:78:2::2/64", "dev", "vb2", "nodad"]);
    ip(&["-n", &h2, "link", "set", "vb2", "up"]);
    ip(&["-n", &h2, "route", "add", "10.78.1.0/24", "via", "10.78.2.1"]);
    ip(&["-n", &h2, "-6", "route", "add", "2001:db8:78:1::/64", "via", "2001:db8:78:2::1"]);

    let text = format!(
        "ports:\n\
         \x20 - {{ name: p1, kind: afpacket, interface: va1, netns: {ports} }}\n\
         \x20 - {{ name: p2, kind: afpacket, interface: va2, netns: {ports} }}\n\
         vrs:\n  - name: r\n    interfaces:\n\
         \x20     - {{ name: e1, port: p1, mac: 02:00:00:00:78:01, addresses: [10.78.1.1/24, \"2001:db8:78:1::1/64\"] }}\n\
         \x20     - {{ name: e2, port: p2, mac: 02:00:00:00:78:02, addresses: [10.78.2.1/24, \"2001:db8:78:2::1/64\"] }}\n"
    );
    let topo = Topology::parse(&text, "recreate.yaml", Path::new(".")).unwrap();
    let o = Options::new(1);
    let mut node = Node::start(topo, o, 64).unwrap();

    recovers(&mut node, &h2, MAC1, "at start");

    // In place, announced: the link stays up, so only the announcements can tell the VR.
    ip(&["-n", &h1, "link", "set", "vb1", "address", MAC2]);
    recovers(&mut node, &h2, MAC2, "MAC changed in place");

    // Re-created silently: only the port going away and coming back can tell the VR.
    ip(&["-n", &ports, "link", "del", "va1"]);
    host1_link(&ports, &h1, MAC3, false);
    recovers(&mut node, &h2, MAC3, "veth re-created");

    let status = node.status().unwrap();
    node.stop().unwrap();
    let c = &status.json()["vrs"][0]["counters"];
    assert!(c["neighbors_learned"].as_u64().unwrap_or(0) >= 6, "{c:#}");
}
