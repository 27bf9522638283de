//! Host namespaces for the control-plane tests: command helpers and a host behind a veth
//! whose other end stays in this namespace for an afpacket port. Callers record and remove
//! the namespaces they make.
#![allow(dead_code)]

use std::process::{Command, Output};

pub fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap()
}

#[track_caller]
pub fn ok(cmd: &str, args: &[&str]) {
    let o = run(cmd, args);
    assert!(o.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `ip ARGS`, which must succeed.
#[track_caller]
pub fn ip(args: &[&str]) {
    ok("ip", args);
}

/// Removes the namespaces it names when dropped, even when the test fails.
pub struct Namespaces(pub Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

pub fn in_ns(ns: &str, args: &[&str]) -> Output {
    let mut a = vec!["netns", "exec", ns];
    a.extend(args);
    run("ip", &a)
}

/// A host namespace `ns` whose eth0 is the peer of `link` (left in this namespace, up, for
/// an afpacket port), with `addrs` and default routes via `gws`; offloads off on both ends
/// (routeplex sees real frames).
pub fn host(ns: &str, link: &str, addrs: &[&str], gws: &[&str]) {
    ok("ip", &["netns", "add", ns]);
    ok("ip", &["link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns]);
    for a in addrs {
        ok("ip", &["-n", ns, "address", "add", a, "dev", "eth0", "nodad"]);
    }
    // No duplicate address detection for the link-local address either: while it is
    // tentative (about a second) the host cannot solicit its gateway, so a ping's reply
    // would wait behind it and a short ping would fail for the test's timing, not the VR's.
    ok("ip", &["netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0"]);
    ok("ip", &["-n", ns, "link", "set", "eth0", "up"]);
    ok("ip", &["-n", ns, "link", "set", "lo", "up"]);
    for g in gws {
        ok("ip", &["-n", ns, "route", "add", "default", "via", g]);
    }
    let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
    let mut a = vec!["-K", link];
    a.extend(off);
    ok("ethtool", &a);
    let mut a = vec!["netns", "exec", ns, "ethtool", "-K", "eth0"];
    a.extend(off);
    ok("ip", &a);
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{link}/disable_ipv6"), "1");
    ok("ip", &["link", "set", link, "up"]);
}
