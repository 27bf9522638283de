//! A VR whose control plane runs BGP migrates under traffic (`docs/control-plane.md`, "Across
//! a migration"). Two hosts in one process, each with its own ports on two bridges: the
//! client's segment and the BGP speaker's. The VR's mirror runs BIRD with graceful restart,
//! peering with a BIRD speaker that announces [`N`] /24s; the client streams numbered UDP
//! through the VR to addresses in three of them, which the speaker's namespace receives.
//! The VR migrates (its mirror is made again at the destination under `migrate_netns`), the
//! test stops the source's BIRD and starts it in the destination's mirror with `-R` (a
//! restarting speaker), and the speaker, a graceful-restart helper, takes the new session.
//!
//! Asserted: every packet arrives (the handoff tunnel covers the move, and the `kernel`
//! routes the VR brought are held stale, so forwarding never waits for BGP); the
//! destination's `kernel` route count never drops to zero from the moment the VR exists
//! there; once the restarted BIRD has re-learned the table, only the route it no longer
//! announces (a static one the source's BIRD had) is stale, and when the stale time
//! (`stale_secs: 15`) runs out it is deleted and counted, with nothing else lost. Timings are
//! printed, never asserted. Needs root and BIRD; says why it skips otherwise.

use crate::reply_json;
use reply_json::Json;

use crate::hosts;
use crate::served;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control::api::Command;
use control::daemon::{self, Access};
use control::migrate::Listener;
use control::runtime::{Idle, Options};
use control::{MigrationConfig, Node, Topology};
use dataplane::RouteSource;
use hosts::{bird, bird_with, have, in_ns, ip, ok, Guard};
use ipnet::IpNet;
use served::Served;

const SECRET: &str = "0123456789abcdef0123456789abcdef";
/// Prefixes the speaker announces.
const N: u32 = 300;
/// The prefix only the source's BIRD has (a static route): stale after the move, never
/// re-learned.
const ORPHAN: &str = "100.99.0.0/24";

fn options() -> Options {
    let mut o = Options::new(1);
    o.idle = Idle::Yield;
    o
}

fn node(text: &str, file: &Path) -> Node {
    let topo = Topology::parse(text, &file.display().to_string(), Path::new("/")).unwrap();
    let mut n = Node::start(topo, options(), 64).unwrap();
    n.set_source(text.to_string(), file.display().to_string());
    n
}

/// The `n`th announced /24.
fn prefix(i: u32) -> std::net::Ipv4Addr {
    (u32::from(std::net::Ipv4Addr::new(100, 64, 0, 0)) + (i << 8)).into()
}

/// The speaker's BIRD: [`N`] /24s over eBGP, a graceful-restart helper (it keeps the VR's
/// session state across the VR's restart and takes its new connection at once).
fn speaker_conf() -> String {
    let mut s = String::from("router id 10.66.1.2;\nprotocol device { scan time 1; }\n");
    s += "protocol static s4 {\n  ipv4;\n";
    for i in 0..N {
        s += &format!("  route {}/24 blackhole;\n", prefix(i));
    }
    s += "}\nprotocol bgp vr {\n  local 10.66.1.2 as 65002;\n  neighbor 10.66.1.1 as 65001;\n  \
          hold time 9;\n  graceful restart on;\n  \
          ipv4 { import none; export where source = RTS_STATIC; next hop self; };\n}\n";
    s
}

/// The VR's BIRD: learns the speaker's routes into its namespace's kernel (which route
/// sync puts in the VR), a restarting speaker with graceful restart; `orphan` adds a static
/// route of its own.
fn vr_conf(orphan: bool) -> String {
    let mut s = String::from(
        "router id 10.66.1.1;\nprotocol device { scan time 1; }\n\
         protocol kernel { ipv4 { export all; import none; }; scan time 2; }\n",
    );
    if orphan {
        s += &format!("protocol static {{ ipv4; route {ORPHAN} via 10.66.1.2; }}\n");
    }
    s += "protocol bgp sp {\n  local 10.66.1.1 as 65001;\n  neighbor 10.66.1.2 as 65002;\n  \
          hold time 9;\n  connect delay time 1;\n  connect retry time 2;\n  \
          graceful restart on;\n  graceful restart time 120;\n  \
          ipv4 { import all; export none; };\n}\n";
    s
}

/// A destination host: its node served on a control socket (route sync ticking between
/// requests, which records the VR's `kernel` route count and stale count each time) and a
/// migration listener.
struct Dest {
    served: Served,
    /// (ms since the start, kernel routes, stale) while the VR is here.
    seen: Arc<Mutex<Vec<(u64, usize, u64)>>>,
}

impl Dest {
    /// Starts the host in network namespace `netns` (its threads, so its ports, are there, as
    /// on another machine); its migration listener stays on this namespace's loopback.
    fn start(text: &str, dir: &Path, netns: &str) -> Dest {
        let sock = dir.join("control.sock");
        let access = Access { owner: control::sys::euid(), status_gid: None };
        let l = daemon::bind(&sock, &access).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (st, sn) = (stop.clone(), seen.clone());
        let (text, file, ns) = (text.to_string(), dir.join("dst.yaml"), netns.to_string());
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let serve = std::thread::spawn(move || {
            enter_netns(&ns);
            let node = RefCell::new(node(&text, &file));
            ready_tx.send(()).unwrap();
            let t0 = Instant::now();
            let tick = || {
                let mut n = node.borrow_mut();
                n.sync_control_planes();
                if let (Some(t), Some(s)) = (n.table("g"), n.sync_stats("g")) {
                    let k = t.routes(Some(RouteSource::Kernel), usize::MAX).len();
                    sn.lock().unwrap().push((t0.elapsed().as_millis() as u64, k, s[4]));
                }
            };
            let handle = |cmd| (node.borrow_mut().execute(cmd), false);
            daemon::serve_ticking(l, access, &st, handle, tick).unwrap();
            node.into_inner()
        });
        let cfg = MigrationConfig {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            secret: SECRET.as_bytes().to_vec(),
            peers: vec![],
            stop_timeout: Duration::from_millis(500),
        };
        ready.recv_timeout(Duration::from_secs(30)).expect("the destination started");
        let listener = Listener::start(&cfg, sock, dir.to_path_buf()).unwrap();
        Dest { served: Served::new(stop, serve, listener), seen }
    }

    fn addr(&self) -> SocketAddr {
        self.served.addr()
    }

    fn last(&self) -> Option<(u64, usize, u64)> {
        self.seen.lock().unwrap().last().copied()
    }

    /// Waits up to `secs` for `cond` on the last sample.
    fn wait(&self, secs: u64, cond: impl Fn(usize, u64) -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if self.last().is_some_and(|(_, k, s)| cond(k, s)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn finish(self) -> Node {
        self.served.finish()
    }
}

/// Moves this thread into network namespace `ns` (threads it starts then live there too).
fn enter_netns(ns: &str) {
    control::sys::enter_netns(ns).unwrap_or_else(|e| panic!("setns {ns}: {e}"));
}

/// A veth pair: `a` for a port, in namespace `ns` if given (else here), and `b` joined to
/// bridge `br`; offloads off.
fn veth_to_bridge(g: &mut Guard, a: &str, b: &str, br: &str, ns: Option<&str>) {
    let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
    match ns {
        None => ip(&["link", "add", b, "type", "veth", "peer", "name", a]),
        Some(ns) => ip(&["link", "add", b, "type", "veth", "peer", "name", a, "netns", ns]),
    }
    g.made.links.push(b.to_string());
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{b}/disable_ipv6"), "1");
    ok("ethtool", &[&["-K", b][..], &off].concat());
    ip(&["link", "set", b, "master", br, "up"]);
    match ns {
        None => {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{a}/disable_ipv6"), "1");
            ok("ethtool", &[&["-K", a][..], &off].concat());
            ip(&["link", "set", a, "up"]);
        }
        Some(ns) => {
            let o = in_ns(ns, &[&["ethtool", "-K", a][..], &off].concat());
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            ip(&["-n", ns, "link", "set", a, "up"]);
        }
    }
}

/// A bridge `br`, up.
fn bridge(g: &mut Guard, br: &str) {
    ip(&["link", "add", br, "type", "bridge"]);
    g.made.links.push(br.to_string());
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{br}/disable_ipv6"), "1");
    ip(&["link", "set", br, "up"]);
}

/// Runs `python3 -c script args` in namespace `ns`, in the background.
fn python(g: &mut Guard, ns: &str, script: &str, args: &[&str]) -> usize {
    let mut a = vec!["netns", "exec", ns, "python3", "-c", script];
    a.extend(args);
    let child = std::process::Command::new("ip")
        .args(&a)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    g.daemons.push(child);
    g.daemons.len() - 1
}

/// Sends numbered datagrams to the addresses of argv[1] (comma-separated) at argv[2] per
/// second until file argv[3] exists; prints how many.
const SEND: &str = r#"
import os, socket, sys, time
dst = sys.argv[1].split(","); rate = int(sys.argv[2]); stop = sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
i = 0; t0 = time.monotonic()
while not os.path.exists(stop):
    s.sendto(i.to_bytes(8, "big"), (dst[i % len(dst)], 9999)); i += 1
    d = t0 + i / rate - time.monotonic()
    if d > 0: time.sleep(d)
print(i, flush=True)
"#;

/// Receives them until file argv[1] exists and none came for a second; prints the distinct
/// numbers received, the duplicates and the longest silence (ms).
const SINK: &str = r#"
import os, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999)); s.settimeout(0.2)
got = set(); dup = 0; last = None; gap = 0.0; quiet = time.monotonic()
print("ready", flush=True)
while True:
    try:
        b = s.recv(64)
    except socket.timeout:
        if os.path.exists(sys.argv[1]) and time.monotonic() - quiet > 1.0: break
        continue
    now = time.monotonic(); quiet = now
    if last is not None: gap = max(gap, now - last)
    last = now
    n = int.from_bytes(b[:8], "big")
    if n in got: dup += 1
    got.add(n)
print(len(got), dup, int(gap * 1000), flush=True)
"#;

/// Waits for child `i` of the guard and returns what it printed.
fn output(g: &mut Guard, i: usize) -> String {
    use std::io::Read;
    let c = &mut g.daemons[i];
    let end = Instant::now() + Duration::from_secs(10);
    while c.try_wait().unwrap().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut out = String::new();
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = c.stderr.take() {
        let _ = e.read_to_string(&mut out);
    }
    out
}

fn kernel_routes(node: &Node) -> Vec<IpNet> {
    let rows = node.table("g").unwrap().routes(Some(RouteSource::Kernel), usize::MAX);
    rows.iter().filter(|r| r.best).map(|r| r.prefix).collect()
}

fn bird_log(g: &Guard, name: &str) -> String {
    let l = std::fs::read_to_string(g.dir.join(name).join("bird.log")).unwrap_or_default();
    let tail: Vec<&str> = l.lines().rev().take(12).collect();
    format!("--- {name} bird.log (newest first)\n{}", tail.join("\n"))
}

#[test]
fn a_bgp_vr_migrates_with_graceful_restart_and_forwarding_never_stops() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, bridges, taps)");
        return;
    }
    if !have("bird") || !have("python3") {
        eprintln!("skipped: needs BIRD and python3 (scripts/setup installs bird2)");
        return;
    }
    let pid = std::process::id();
    let mut g = Guard::new("gr");
    let n = |s: &str| format!("rg{s}{pid}");
    let (client, speaker, src_ns, dst_ns) = (n("c"), n("s"), n("ma"), n("mb"));
    // Teardown order: the guard's daemons first, then links and namespaces; the mirrors too
    // if a node could not remove its own.
    g.namespaces.push(dst_ns.clone());
    let (brc, brs) = (n("bc"), n("bs"));
    bridge(&mut g, &brc);
    bridge(&mut g, &brs);
    g.host(&client, &n("hc"), &["10.66.0.2/24"], &["10.66.0.1"]);
    g.host(&speaker, &n("hs"), &["10.66.1.2/24"], &[]);
    ip(&["link", "set", &n("hc"), "master", &brc]);
    ip(&["link", "set", &n("hs"), "master", &brs]);
    // The sink: one address in each of three announced prefixes.
    let dsts: Vec<String> = [0, N / 2, N - 1]
        .iter()
        .map(|&i| {
            let a = std::net::Ipv4Addr::from(u32::from(prefix(i)) + 1);
            ip(&["-n", &speaker, "address", "add", &format!("{a}/32"), "dev", "lo"]);
            a.to_string()
        })
        .collect();
    // Each host's ports on both bridges: pc (client side), ps (speaker side), the same
    // interface names at both, the destination's in its own namespace (another machine).
    let dhost = n("d");
    ip(&["netns", "add", &dhost]);
    g.namespaces.push(dhost.clone());
    ip(&["-n", &dhost, "link", "set", "lo", "up"]);
    for (p, q, br, ns) in [
        ("pc", "qc", &brc, None),
        ("ps", "qs", &brs, None),
        ("pc", "ec", &brc, Some(dhost.as_str())),
        ("ps", "es", &brs, Some(dhost.as_str())),
    ] {
        veth_to_bridge(&mut g, &n(p), &n(q), br, ns);
    }
    let src_text = format!(
        "workers: 1\nmigration: {{ secret: {SECRET} }}\nports:\n  \
         - {{ name: pc, kind: afpacket, interface: {} }}\n  \
         - {{ name: ps, kind: afpacket, interface: {} }}\n\
         vrs:\n  - name: g\n    control_plane: {{ kind: linux, netns: {src_ns}, migrate_netns: {dst_ns}, stale_secs: 15 }}\n    \
         interfaces:\n      \
         - {{ name: e0, port: pc, mac: 02:00:00:00:66:00, addresses: [10.66.0.1/24] }}\n      \
         - {{ name: e1, port: ps, mac: 02:00:00:00:66:01, addresses: [10.66.1.1/24] }}\n",
        n("pc"),
        n("ps")
    );
    // The destination gets the VR's ports from the snapshot (interfaces of the same names in
    // its namespace); it has a VR of its own.
    let dst_text = "workers: 1\nports:\n  - { name: q0, kind: mem }\n\
         vrs:\n  - name: z\n    interfaces:\n      \
         - { name: e0, port: q0, mac: 02:00:00:00:67:00, addresses: [10.67.0.1/24] }\n";
    let topo = Topology::parse(&src_text, "src.yaml", Path::new("/")).unwrap();
    let mut made = control::netns::Made::default();
    control::netns::make(&topo, &mut made).unwrap();
    g.made.namespaces.extend(made.namespaces);
    let mut src = node(&src_text, &g.dir.join("src.yaml"));
    let dest = Dest::start(dst_text, &g.dir, &dhost);

    bird(&mut g, &speaker, "speaker", &speaker_conf());
    let src_bird = bird(&mut g, &src_ns, "vr-src", &vr_conf(true));
    let end = Instant::now() + Duration::from_secs(30);
    while kernel_routes(&src).len() < N as usize + 1 && Instant::now() < end {
        src.sync_control_planes();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        kernel_routes(&src).len(),
        N as usize + 1,
        "the VR did not learn every route\n{}\n{}",
        bird_log(&g, "vr-src"),
        bird_log(&g, "speaker")
    );

    // Traffic through the VR, 500 datagrams a second, from before the move to after the
    // stale route expired.
    let stop = g.dir.join("stop");
    let stop_s = stop.display().to_string();
    let sink = python(&mut g, &speaker, SINK, &[&stop_s]);
    std::thread::sleep(Duration::from_millis(500));
    let send = python(&mut g, &client, SEND, &[&dsts.join(","), "500", &stop_s]);
    std::thread::sleep(Duration::from_secs(1));

    let t = Instant::now();
    let r = src.execute(Command::Migrate { vr: "g".into(), to: dest.addr().to_string() });
    let r = r.unwrap_or_else(|e| panic!("migrate: {e}"));
    eprintln!("migrated in {:?}: {r}", t.elapsed());
    assert!(src.table("g").is_none(), "the source still has the VR");
    // The source's daemon goes after the handoff; the destination's starts as a restarting
    // speaker in the mirror the destination made.
    let _ = g.daemons[src_bird].kill();
    let _ = g.daemons[src_bird].wait();
    assert!(control::netns::namespace_exists(&dst_ns), "the destination made no mirror");
    bird_with(&mut g, &dst_ns, "vr-dst", &vr_conf(false), &["-R"]);
    let relearned = dest.wait(14, |k, s| k == N as usize + 1 && s == 1);
    let at_relearn = dest.last();
    assert!(
        relearned,
        "the restarted BIRD did not re-learn the table (last kernel, stale: {:?})\n{}\n{}",
        dest.last(),
        bird_log(&g, "vr-dst"),
        bird_log(&g, "speaker")
    );
    let mirror = in_ns(&dst_ns, &["ip", "-4", "route", "show", "proto", "bird"]);
    let in_mirror = String::from_utf8_lossy(&mirror.stdout).lines().count();
    assert_eq!(in_mirror, N as usize, "the destination mirror's kernel has the BGP routes");
    // The stale time runs out: the one route nobody announces goes, nothing else.
    let expired = dest.wait(20, |k, s| k == N as usize && s == 0);
    assert!(expired, "the orphan was not swept: {:?}", dest.last());
    std::fs::write(&stop, b"").unwrap();
    let sent: u64 = output(&mut g, send).trim().parse().unwrap();
    let got = output(&mut g, sink);
    let f: Vec<u64> = got.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let [received, dup, gap_ms] = f[..] else { panic!("sink: {got}") };

    let seen = dest.seen.lock().unwrap().clone();
    let mut dst = dest.finish();
    let v = dst.status().unwrap();
    let cp = v.json()["vrs"].as_array().unwrap().iter().find(|v| v["name"] == "g").unwrap()
        ["control_plane"]
        .clone();
    eprintln!(
        "sent {sent}, received {received}, duplicates {dup}, longest silence {gap_ms} ms; \
         kernel routes at the destination from {} samples, min {}; re-learned at {:?}; {cp}",
        seen.len(),
        seen.iter().map(|s| s.1).min().unwrap_or(0),
        at_relearn
    );
    assert!(
        seen.iter().all(|&(_, k, _)| k > 0),
        "the destination's kernel routes dropped to zero: {:?}",
        seen.iter().filter(|s| s.1 == 0).take(5).collect::<Vec<_>>()
    );
    assert_eq!(cp["stale"], 0, "{cp}");
    assert_eq!(cp["stale_expired"], 1, "{cp}");
    assert_eq!(cp["netns"], dst_ns.as_str(), "{cp}");
    let orphan: IpNet = ORPHAN.parse().unwrap();
    assert!(!kernel_routes(&dst).contains(&orphan), "the orphan is still in the VR");
    assert_eq!(received, sent, "datagrams lost through the move (duplicates {dup})");
    // The daemons stop while the VR still forwards, so their sessions close (a socket left
    // retransmitting its FIN would keep a namespace alive after the test).
    for d in &mut g.daemons {
        let _ = d.kill();
        let _ = d.wait();
    }
    std::thread::sleep(Duration::from_millis(300));
    // The VR goes: its mirror, which the destination made, goes with it.
    dst.execute(Command::VrRemove { vr: "g".into() }).unwrap();
    assert!(!control::netns::namespace_exists(&dst_ns), "the mirror outlived its VR");
    let _ = dst.stop();
    let _ = src.stop();
}
