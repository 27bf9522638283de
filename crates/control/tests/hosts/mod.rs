//! Host namespaces for the control-plane tests: command helpers and a host behind a veth
//! whose other end stays in this namespace for an afpacket port. Callers record and remove
//! the namespaces they make.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use control::netns::Made;

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

/// What the test made: namespaces, daemons, a directory; all removed when dropped.
pub struct Guard {
    pub namespaces: Vec<String>,
    pub made: Made,
    pub daemons: Vec<Child>,
    pub dir: PathBuf,
}

impl Guard {
    pub fn new(tag: &str) -> Guard {
        let dir = std::env::temp_dir().join(format!("rcp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        Guard { namespaces: Vec::new(), made: Made::default(), daemons: Vec::new(), dir }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for e in control::netns::remove(&self.made) {
            eprintln!("cleanup: {e}");
        }
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        if std::thread::panicking() {
            eprintln!("daemon logs left in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Guard {
    /// A host namespace `ns` behind `link`, recorded in the guard for removal.
    pub fn host(&mut self, ns: &str, link: &str, addrs: &[&str], gws: &[&str]) {
        self.namespaces.push(ns.to_string());
        host(ns, link, addrs, gws);
    }
}

pub fn have(cmd: &str) -> bool {
    run("sh", &["-c", &format!("command -v {cmd}")]).status.success()
}

/// Starts BIRD in namespace `ns` with `conf` and `extra` arguments, its files under the
/// guard's directory (`name/`); the index of its process in `g.daemons`.
pub fn bird_with(g: &mut Guard, ns: &str, name: &str, conf: &str, extra: &[&str]) -> usize {
    let dir = g.dir.join(name);
    std::fs::create_dir(&dir).unwrap();
    let log = dir.join("bird.log");
    let conf = format!("log \"{}\" all;\n{conf}", log.display());
    let cf = dir.join("bird.conf");
    std::fs::write(&cf, conf).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "bird", "-f", "-c"])
        .arg(&cf)
        .arg("-s")
        .arg(dir.join("bird.ctl"))
        .arg("-P")
        .arg(dir.join("bird.pid"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    g.daemons.push(child);
    g.daemons.len() - 1
}

/// [`bird_with`] without extra arguments.
pub fn bird(g: &mut Guard, ns: &str, name: &str, conf: &str) -> usize {
    bird_with(g, ns, name, conf, &[])
}
