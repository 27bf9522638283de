//! Link impairments seen by real hosts (root; skipped with the reason otherwise): two
//! namespaces through a VR on AF_PACKET ports. `impair: { delay: 20ms }` on the port towards
//! host b: `ping` from a sees every round trip take at least 20 ms (a lower bound only). Then,
//! changed live by `apply` to `rate: 10mbit`: `iperf3` (TCP, a to b) is held below 1.3 times
//! the rate (a behavioural bound: the rate is what it is for, however fast the machine).

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use control::runtime::{Idle, Options};
use control::{Node, Topology};

use crate::hosts;
use hosts::{ip, ok, Namespaces};

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn in_ns(ns: &str, args: &[&str]) -> Output {
    let mut a = vec!["netns", "exec", ns];
    a.extend(args);
    Command::new("ip").args(&a).output().unwrap()
}

fn topo(pns: &str, impair: &str) -> Topology {
    let text = format!(
        "\
workers: 1
ports:
  - {{ name: pa, kind: afpacket, interface: va, netns: {pns} }}
  - {{ name: pb, kind: afpacket, interface: vb, netns: {pns}{impair} }}
vrs:
  - name: r
    interfaces:
      - {{ name: e1, port: pa, mac: 02:00:00:00:82:01, addresses: [10.82.1.1/24] }}
      - {{ name: e2, port: pb, mac: 02:00:00:00:82:02, addresses: [10.82.2.1/24] }}
"
    );
    Topology::parse(&text, "impair-hosts.yaml", Path::new(".")).unwrap()
}

/// The minimum round trip of `ping`'s summary (`rtt min/avg/max/mdev = a/b/c/d ms`).
fn rtt_min_ms(out: &str) -> Option<f64> {
    let l = out.lines().find(|l| l.contains("min/avg/max"))?;
    l.split('=').nth(1)?.trim().split('/').next()?.parse().ok()
}

#[test]
fn hosts_see_the_delay_and_the_rate_of_an_impaired_link() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, AF_PACKET)");
        return;
    }
    for tool in ["iperf3", "ping", "ethtool"] {
        if !hosts::have(tool) {
            eprintln!("skipped: {tool} is not installed (scripts/setup installs it)");
            return;
        }
    }
    let pid = std::process::id();
    let (pns, h1, h2) = (format!("rpxip{pid}"), format!("rpxi1{pid}"), format!("rpxi2{pid}"));
    let _guard = Namespaces(vec![pns.clone(), h1.clone(), h2.clone()]);
    for n in [&pns, &h1, &h2] {
        ip(&["netns", "add", n]);
    }
    for (v, host, addr, gw) in
        [("va", &h1, "10.82.1.2/24", "10.82.1.1"), ("vb", &h2, "10.82.2.2/24", "10.82.2.1")]
    {
        ip(&["-n", &pns, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", host]);
        ip(&["-n", host, "addr", "add", addr, "dev", "eth0"]);
        // Real frames for the ports (no GSO super-frames), as the other host tests do.
        let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
        for (ns, dev) in [(&pns, v), (host, "eth0")] {
            let mut a = vec!["netns", "exec", ns, "ethtool", "-K", dev];
            a.extend(off);
            ok("ip", &a);
        }
        ip(&["-n", &pns, "link", "set", v, "up"]);
        ip(&["-n", host, "link", "set", "eth0", "up"]);
        ip(&["-n", host, "route", "add", "default", "via", gw]);
    }
    let mut o = Options::new(1);
    // The default idle: workers sleep when quiet, and must wake for the delayed frames.
    o.idle = Idle::Adaptive;
    let mut node = Node::start(topo(&pns, ", impair: { delay: 20ms, seed: 1 }"), o, 64).unwrap();

    // Delay on the way to b only: every round trip at least 20 ms.
    let p = in_ns(&h1, &["ping", "-c", "5", "-i", "0.2", "-W", "3", "10.82.2.2"]);
    let out = text(&p);
    let status = node.status().unwrap();
    assert!(out.contains("5 received"), "{out}\n{status:#}");
    let min = rtt_min_ms(&out).unwrap_or_else(|| panic!("no rtt line: {out}"));
    assert!(min >= 20.0, "rtt min {min} ms with a 20 ms delay: {out}");
    eprintln!("ping through delay 20ms: rtt min {min} ms (loaded 2-core VM)");
    let status_j = status.json();
    let pb = status_j["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vb").unwrap();
    assert!(pb["impair"]["sent"].as_u64().unwrap_or(0) >= 5, "{pb:#}");

    // Live: a 10 Mbit/s rate with a short queue instead of the delay.
    let plan = node.apply(topo(&pns, ", impair: { rate: 10mbit, limit: 100 }"), false).unwrap();
    assert!(
        plan.steps.iter().any(|s| s.starts_with("~ port pb: impair rate 10000000bit")),
        "{plan:?}"
    );
    let server = in_ns(&h2, &["iperf3", "-s", "-D", "-1", "-p", "5211"]);
    assert!(server.status.success(), "{}", text(&server));
    std::thread::sleep(Duration::from_millis(300));
    let c = in_ns(&h1, &["iperf3", "-c", "10.82.2.2", "-p", "5211", "-t", "4", "-J"]);
    let status = node.status().unwrap();
    node.stop().unwrap();
    let j: serde_json::Value =
        serde_json::from_slice(&c.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&c)));
    assert!(j.get("error").is_none(), "iperf3: {}", j["error"]);
    let bps = j["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
    let bytes = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    eprintln!("iperf3 TCP through rate 10mbit: {:.2} Mbit/s (loaded 2-core VM)", bps / 1e6);
    assert!(bytes > 500_000, "iperf3 moved only {bytes} bytes\n{status:#}");
    assert!(bps < 1.3 * 10e6, "{bps} bit/s through a 10 Mbit/s link\n{status:#}");
    let status_j = status.json();
    let pb = status_j["ports"].as_array().unwrap().iter().find(|p| p["name"] == "vb").unwrap();
    assert_eq!(pb["impair"]["rate_bps"], 10_000_000, "{pb:#}");
}
