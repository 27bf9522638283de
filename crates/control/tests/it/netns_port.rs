//! A kernel port on an interface in a namespace routeplex did not make (`netns:`): the data
//! plane opens it there, and a real ping from another namespace through that interface gets
//! the VR's answer. Needs root (namespaces, veth); says so and skips otherwise.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::process::Command;

use control::runtime::Options;
use control::{Node, Topology};

use crate::hosts;
use hosts::{ip, Namespaces};

#[test]
fn a_port_opens_its_interface_in_an_existing_namespace() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces and veth)");
        return;
    }
    let pid = std::process::id();
    let (ports_ns, host_ns) = (format!("rpxn{pid}"), format!("rpxh{pid}"));
    let _guard = Namespaces(vec![ports_ns.clone(), host_ns.clone()]);
    ip(&["netns", "add", &ports_ns]);
    ip(&["netns", "add", &host_ns]);
    ip(&[
        "-n", &ports_ns, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns",
        &host_ns,
    ]);
    ip(&["-n", &ports_ns, "link", "set", "va", "up"]);
    ip(&["-n", &host_ns, "addr", "add", "10.77.0.2/24", "dev", "vb"]);
    ip(&["-n", &host_ns, "link", "set", "vb", "up"]);

    let text = format!(
        "ports:\n  - {{ name: p0, kind: afpacket, interface: va, netns: {ports_ns} }}\n\
         vrs:\n  - name: r\n    interfaces:\n      - {{ name: e0, port: p0, mac: 02:00:00:00:77:01, addresses: [10.77.0.1/24] }}\n"
    );
    let topo = Topology::parse(&text, "netns.yaml", Path::new(".")).unwrap();
    let o = Options::new(1);
    let node = Node::start(topo, o, 64).unwrap();
    let ping = Command::new("ip")
        .args(["netns", "exec", &host_ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.1"])
        .output()
        .unwrap();
    let status = node.status().unwrap();
    node.stop().unwrap();
    assert!(
        ping.status.success(),
        "ping through the namespaced port failed: {}\n{status:#}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let vr = &status.json()["vrs"][0];
    assert!(vr["counters"]["rx_packets"].as_u64().unwrap_or(0) >= 3, "{vr:#}");
}
