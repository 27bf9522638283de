//! Crash at any instant (issue 27, item 2): a real data plane (`routeplex run FILE
//! --state-dir DIR`, on memif ports: no root, no kernel devices) is driven through its
//! control socket with a seeded random mix of changes (route batches of 1, 2, 257 and random
//! sizes, adds, replaces and deletes; `apply` of edited topologies; `reserve`;
//! `interface_set`; `vr_add`/`vr_remove`; pauses long enough for the checkpoint to be
//! written) while another thread SIGKILLs it at a seeded random moment, mid-batch included;
//! some kills land while it starts (replaying or compacting its journal). A model keeps every
//! change whose reply arrived before the kill. The data plane is started again on the same
//! run directory and must come back with exactly the model's state (API routes per VR, the
//! topology's VRs and static routes, MTU, up/down, reservation), plus at most the one change
//! in flight, all of it or none of it; its FIB must forward as its RIB says (prefixes per
//! family against the best routes, and `route_lookup` at the first and last address of every
//! API and static route gives that route's next hop, or the one of a longer prefix holding the
//! address); and every few iterations it is compared with a data plane built fresh from the
//! model through the API (routes of every source, FIB prefixes and next hops, interfaces,
//! reservation, and what each FIB does at the same sampled addresses: every route's ends and
//! the address after, the connected subnets', and 256 drawn at random).
//!
//! Seeded: the seed is printed; `RPX_CRASH_SEED=N` replays it. `RPX_CRASH_ITERATIONS=N` runs
//! N kills (default 60, about a minute in CI).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fib::synthetic::Rng;
use ipnet::IpNet;
use serde_json::{json, Value};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// The topology: VR r on two ports, s on one; `static_s` adds a static route to s, `x` a VR x
/// on its own port. The file is the plain one; `apply` gives the others.
fn text(tag: &str, static_s: bool, x: bool) -> String {
    let mut t = format!(
        "workers: 1
ports:
  - {{ name: p0, kind: memif, socket: \"@rpxc{tag}p0\" }}
  - {{ name: p1, kind: memif, socket: \"@rpxc{tag}p1\" }}
  - {{ name: q0, kind: memif, socket: \"@rpxc{tag}q0\" }}
"
    );
    if x {
        t += &format!("  - {{ name: x0, kind: memif, socket: \"@rpxc{tag}x0\" }}\n");
    }
    t += "vrs:
  - name: r
    interfaces:
      - { name: a, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24, \"2001:db8::1/64\"] }
      - { name: b, port: p1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
  - name: s
    interfaces:
      - { name: a, port: q0, mac: 02:00:00:00:02:00, addresses: [10.1.0.1/24] }
";
    if static_s {
        t += "    routes: [{ prefix: 198.51.100.0/24, via: 10.1.0.2 }]\n";
    }
    if x {
        t += "  - name: x
    interfaces:
      - { name: a, port: x0, mac: 02:00:00:00:09:00, addresses: [10.9.0.1/24] }
";
    }
    t
}

/// What the acknowledged changes made: per VR its API routes (prefix -> `via G` or
/// `blackhole`), whether the running text has s's static route and VR x, r's interface b
/// (MTU, up) and r's reservation (`packets=N`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Model {
    routes: BTreeMap<String, BTreeMap<String, String>>,
    static_s: bool,
    x: bool,
    mtu: u64,
    up: bool,
    packets: Option<u64>,
}

impl Model {
    fn new() -> Model {
        let routes = [("r".to_string(), BTreeMap::new()), ("s".to_string(), BTreeMap::new())];
        Model {
            routes: routes.into_iter().collect(),
            static_s: false,
            x: false,
            mtu: 1500,
            up: true,
            packets: None,
        }
    }

    /// The model after `c` succeeded.
    fn after(&self, c: &Change) -> Model {
        let mut m = self.clone();
        let a = &c.req["args"];
        let vr = a["vr"].as_str().unwrap_or_default().to_string();
        match c.req["cmd"].as_str().unwrap() {
            "route_add" | "route_replace" => {
                let t = m.routes.get_mut(&vr).unwrap();
                for r in a["routes"].as_array().unwrap() {
                    t.insert(r["prefix"].as_str().unwrap().into(), target(r));
                }
            }
            "route_delete" => {
                let t = m.routes.get_mut(&vr).unwrap();
                for p in a["prefixes"].as_array().unwrap() {
                    t.remove(p.as_str().unwrap());
                }
            }
            "interface_set" => {
                m.mtu = a["mtu"].as_u64().unwrap();
                m.up = a["up"].as_bool().unwrap();
            }
            "reserve" => {
                let spec = a["spec"][0].as_str().unwrap();
                m.packets = spec.strip_prefix("packets=").map(|n| n.parse().unwrap());
            }
            "vr_add" => {
                m.x = true;
                m.routes.insert("x".into(), BTreeMap::new());
            }
            "vr_remove" => {
                m.x = false;
                m.routes.remove("x");
            }
            "apply" => {
                let (static_s, x) = c.variant.unwrap();
                // The text sets r's interfaces and reservation as it says; x's routes go
                // with it, and a new x has none.
                (m.static_s, m.mtu, m.up, m.packets) = (static_s, 1500, true, None);
                if !x {
                    m.routes.remove("x");
                } else if !m.x {
                    m.routes.insert("x".into(), BTreeMap::new());
                }
                m.x = x;
            }
            other => panic!("no model for {other}"),
        }
        m
    }
}

fn target(r: &Value) -> String {
    match r["via"].as_str() {
        Some(g) => format!("via {g}"),
        None => "blackhole".into(),
    }
}

/// One change: the request, and for `apply` the (static_s, x) of its text.
#[derive(Clone, Debug)]
struct Change {
    req: Value,
    variant: Option<(bool, bool)>,
}

fn gateway(vr: &str, rng: &mut Rng) -> &'static str {
    match (vr, rng.below(2)) {
        ("r", 0) => "10.0.0.2",
        ("r", _) => "10.0.1.2",
        ("s", _) => "10.1.0.2",
        _ => "10.9.0.2",
    }
}

/// A random change that fits model `m` (most do; one refused is acknowledged as no change).
fn change(rng: &mut Rng, m: &Model, tag: &str, serial: &mut u32) -> Change {
    let vrs: Vec<&String> = m.routes.keys().collect();
    let vr = vrs[rng.below(vrs.len() as u64) as usize].clone();
    let have: Vec<&String> = m.routes[&vr].keys().collect();
    let req =
        |cmd: &str, args: Value| Change { req: json!({ "cmd": cmd, "args": args }), variant: None };
    match rng.below(14) {
        0..=5 => {
            let n = [1, 2, 257, 1 + rng.below(60)][rng.below(4) as usize];
            let routes: Vec<Value> = (0..n)
                .map(|_| {
                    *serial += 1;
                    let k = *serial;
                    let (hi, lo) = (16 + (k >> 8) % 16, k & 255);
                    if vr == "r" && k.is_multiple_of(5) {
                        json!({ "prefix": format!("2001:db8:{:x}::/48", 0x100 + k % 0xfe00), "via": "2001:db8::2" })
                    } else if k.is_multiple_of(7) {
                        json!({ "prefix": format!("172.{hi}.{lo}.7/32"), "blackhole": true })
                    } else {
                        json!({ "prefix": format!("172.{hi}.{lo}.0/24"), "via": gateway(&vr, rng) })
                    }
                })
                .filter(|r| !m.routes[&vr].contains_key(r["prefix"].as_str().unwrap()))
                .collect();
            req("route_add", json!({ "vr": vr, "routes": routes }))
        }
        6 | 7 if !have.is_empty() => {
            let n = 1 + rng.below(have.len().min(300) as u64) as usize;
            let start = rng.below((have.len() - n + 1) as u64) as usize;
            let prefixes = &have[start..start + n];
            if rng.below(2) == 0 {
                req("route_delete", json!({ "vr": vr, "prefixes": prefixes }))
            } else {
                let routes: Vec<Value> = prefixes
                    .iter()
                    .filter(|p| !p.contains(':'))
                    .map(|p| json!({ "prefix": p, "via": gateway(&vr, rng) }))
                    .collect();
                req("route_replace", json!({ "vr": vr, "routes": routes }))
            }
        }
        8 => req(
            "interface_set",
            json!({ "vr": "r", "interface": "b", "mtu": 1280 + rng.below(7000), "up": rng.below(4) != 0 }),
        ),
        9 => {
            let spec = if rng.below(3) == 0 {
                "none".to_string()
            } else {
                format!("packets={}", 100 + rng.below(5000))
            };
            req("reserve", json!({ "vr": "r", "spec": [spec] }))
        }
        10 if m.x => req("vr_remove", json!({ "vr": "x" })),
        10 => req(
            "vr_add",
            json!({
                "vr": { "name": "x", "interfaces": [{ "name": "a", "port": "x0", "mac": "02:00:00:00:09:00", "addresses": ["10.9.0.1/24"] }] },
                "ports": [{ "name": "x0", "kind": "memif", "socket": format!("@rpxc{tag}x0") }],
            }),
        ),
        _ => {
            let v = (rng.below(2) == 0, rng.below(2) == 0);
            let t = text(tag, v.0, v.1);
            let mut c =
                req("apply", json!({ "topology": t, "file": "crash.yaml", "dry_run": false }));
            c.variant = Some(v);
            c
        }
    }
}

/// A run directory and topology file of their own, removed on drop; the data plane running
/// there, if any, is killed first.
struct Rig {
    dir: PathBuf,
    file: PathBuf,
    tag: String,
    child: Option<Child>,
}

impl Rig {
    fn new(n: u32) -> Rig {
        let tag = format!("{:x}{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("rpx-crash-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let file = dir.join("crash.yaml");
        std::fs::write(&file, text(&tag, false, false)).unwrap();
        Rig { dir, file, tag, child: None }
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// Starts `routeplex run` on the run directory; its stderr appended to the log.
    fn spawn(&mut self) -> u32 {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log()).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .arg("run")
            .arg(&self.file)
            .arg("--state-dir")
            .arg(self.run_dir())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let pid = child.id();
        self.child = Some(child);
        pid
    }

    /// Connects once the socket answers `hello`; `None` when the process died first.
    fn connect(&mut self) -> Option<Client> {
        let sock = self.run_dir().join("control.sock");
        let t0 = Instant::now();
        loop {
            if let Ok(s) = UnixStream::connect(&sock) {
                let mut c = Client::new(s);
                if c.call(&json!({ "cmd": "hello" })).is_some() {
                    return Some(c);
                }
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                assert!(killed(&st), "the data plane exited by itself ({st}):\n{}", self.tail());
                return None;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "no answer in 60 s:\n{}", self.tail());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the data plane, which must have died of SIGKILL.
    fn reap(&mut self) {
        let st = self.child.take().unwrap().wait().unwrap();
        assert!(killed(&st), "the data plane exited by itself ({st}):\n{}", self.tail());
        // A clean stop removes the socket; SIGKILL leaves it, as a crash does.
    }

    /// The log's last lines, for a failure's message.
    fn tail(&self) -> String {
        let log = std::fs::read(self.log()).unwrap_or_default();
        String::from_utf8_lossy(&log[log.len().saturating_sub(6000)..]).into_owned()
    }
}

fn killed(st: &std::process::ExitStatus) -> bool {
    std::os::unix::process::ExitStatusExt::signal(st) == Some(libc::SIGKILL)
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One connection to the control socket.
struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    id: u64,
}

impl Client {
    fn new(s: UnixStream) -> Client {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Client { r: BufReader::new(s.try_clone().unwrap()), w: s, id: 0 }
    }

    /// Sends `req` ({cmd, args}); the reply, or `None` when the data plane went away first.
    fn call(&mut self, req: &Value) -> Option<Value> {
        self.id += 1;
        let mut line = req.clone();
        line["v"] = json!(1);
        line["id"] = json!(self.id);
        let mut bytes = serde_json::to_vec(&line).unwrap();
        bytes.push(b'\n');
        self.w.write_all(&bytes).ok()?;
        let mut reply = String::new();
        match self.r.read_line(&mut reply) {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                let v: Value = serde_json::from_str(&reply).unwrap();
                assert_eq!(v["id"], json!(self.id), "{v}");
                Some(v)
            }
        }
    }

    /// A read-only request that must succeed.
    fn ok(&mut self, req: Value) -> Value {
        let v = self.call(&req).unwrap_or_else(|| panic!("{req}: no reply"));
        v.get("ok").cloned().unwrap_or_else(|| panic!("{req}: {v}"))
    }
}

/// The state a data plane runs, as the model holds it, read through the API; and its FIB
/// checked against its RIB on the way.
fn observe(c: &mut Client) -> Model {
    let st = c.ok(json!({ "cmd": "status" }));
    let vrs = st["vrs"].as_array().unwrap();
    let mut m = Model::new();
    m.routes.clear();
    for v in vrs {
        let name = v["name"].as_str().unwrap();
        let rows = c.ok(json!({ "cmd": "route_list", "args": { "vr": name, "limit": 1_000_000 } }));
        let rows = rows["routes"].as_array().unwrap();
        // FIB = RIB: one FIB prefix per listed prefix with a best route, per family; the
        // status' route counts per source are the list's.
        let best = |v6: bool| {
            rows.iter()
                .filter(|r| r["best"] == json!(true))
                .filter(|r| r["prefix"].as_str().unwrap().contains(':') == v6)
                .count() as u64
        };
        assert_eq!(v["fib"]["ipv4"].as_u64(), Some(best(false)), "vr {name}: FIB against RIB");
        assert_eq!(v["fib"]["ipv6"].as_u64(), Some(best(true)), "vr {name}: FIB against RIB");
        fib_forwards_as_the_rib_says(c, name, rows);
        for (src, n) in v["routes"].as_object().unwrap() {
            let listed = rows.iter().filter(|r| r["source"] == json!(src)).count() as u64;
            assert_eq!(n.as_u64(), Some(listed), "vr {name}: {src} routes counted and listed");
        }
        let api = rows.iter().filter(|r| r["source"] == json!("api"));
        let api = api.map(|r| (r["prefix"].as_str().unwrap().to_string(), target(r))).collect();
        m.routes.insert(name.to_string(), api);
        match name {
            "r" => {
                let b = v["interfaces"].as_array().unwrap().iter().find(|i| i["name"] == "b");
                let b = b.unwrap();
                (m.mtu, m.up) = (b["mtu"].as_u64().unwrap(), b["up"].as_bool().unwrap());
                // From the VR's next period: the pending one is what was acknowledged.
                let r = match &v["pending_reservation"] {
                    Value::Null => &v["reservation"],
                    p => p,
                };
                m.packets = r["packets"].as_u64();
            }
            "s" => {
                m.static_s = rows.iter().any(|r| {
                    r["source"] == json!("static") && r["prefix"] == json!("198.51.100.0/24")
                })
            }
            "x" => m.x = true,
            _ => panic!("vr {name} was never made"),
        }
    }
    m
}

/// What VR `vr`'s FIB does with a packet to each of `addrs`, by `route_lookup` (in requests
/// of at most 4,096 addresses).
fn lookups(c: &mut Client, vr: &str, addrs: &[IpAddr]) -> Vec<String> {
    let mut out = Vec::with_capacity(addrs.len());
    for chunk in addrs.chunks(4096) {
        let v = c.ok(json!({ "cmd": "route_lookup", "args": { "vr": vr, "addresses": chunk } }));
        let rows = v["lookups"].as_array().unwrap();
        assert_eq!(rows.len(), chunk.len(), "vr {vr}: one row per address");
        for (r, a) in rows.iter().zip(chunk) {
            assert_eq!(r["address"], json!(a), "vr {vr}: rows in the order asked");
            out.push(r["forward"].as_str().unwrap().to_string());
        }
    }
    out
}

/// A prefix's first and last address.
fn ends(p: &IpNet) -> [IpAddr; 2] {
    [p.network(), p.broadcast()]
}

/// The FIB of VR `vr` forwards as its RIB (`rows`, as listed) says, for every API and static
/// route the RIB uses: at the first and last address of each, the FIB's next hop is that of
/// the longest of those prefixes holding the address (`via G` or `blackhole`). Their prefixes
/// cover none of the connected subnets, so no other route decides there.
fn fib_forwards_as_the_rib_says(c: &mut Client, vr: &str, rows: &[Value]) {
    let rib: Vec<(IpNet, String)> = rows
        .iter()
        .filter(|r| r["best"] == json!(true))
        .filter(|r| r["source"] == json!("api") || r["source"] == json!("static"))
        .map(|r| (r["prefix"].as_str().unwrap().parse().unwrap(), target(r)))
        .collect();
    let addrs: Vec<IpAddr> = rib.iter().flat_map(|(p, _)| ends(p)).collect();
    let got = lookups(c, vr, &addrs);
    for (a, got) in addrs.iter().zip(&got) {
        let (p, want) =
            rib.iter().filter(|(p, _)| p.contains(a)).max_by_key(|(p, _)| p.prefix_len()).unwrap();
        let fits = match want.strip_prefix("via ") {
            Some(g) => got.starts_with(&format!("via {g} interface ")),
            None => got == want,
        };
        assert!(fits, "vr {vr}: the FIB forwards {a} {got}; the RIB says {want} ({p})");
    }
}

/// The addresses whose forwarding a recovered data plane and one built fresh from model `m`
/// are compared at: per VR, the first and last address of each of its acknowledged routes and
/// the one after it, addresses of and around the connected subnets and the static route, and
/// 256 drawn at random (seeded by `seed`) from the ranges the routes come from.
fn samples(m: &Model, seed: u64) -> BTreeMap<String, Vec<IpAddr>> {
    let mut rng = Rng::new(seed ^ 0x5a5a);
    let fixed = [
        "10.0.0.0",
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.255",
        "10.0.1.1",
        "10.0.1.2",
        "10.0.1.200",
        "10.1.0.1",
        "10.1.0.2",
        "10.9.0.2",
        "198.51.100.1",
        "198.51.101.1",
        "2001:db8::1",
        "2001:db8::2",
        "2001:db8:1::1",
        "192.0.2.1",
    ];
    let vrs = ["r", "s", "x"].into_iter().filter(|v| *v != "x" || m.x);
    vrs.map(|vr| {
        let mut a: Vec<IpAddr> = fixed.iter().map(|s| s.parse().unwrap()).collect();
        for p in m.routes.get(vr).into_iter().flat_map(|t| t.keys()) {
            let p: IpNet = p.parse().unwrap();
            let [first, last] = ends(&p);
            a.extend([first, last]);
            match last {
                IpAddr::V4(l) => {
                    a.extend(u32::from(l).checked_add(1).map(|n| IpAddr::V4(n.into())))
                }
                IpAddr::V6(l) => {
                    a.extend(u128::from(l).checked_add(1).map(|n| IpAddr::V6(n.into())))
                }
            }
        }
        for _ in 0..256 {
            let r = rng.next_u64();
            a.push(if r.is_multiple_of(4) {
                // 2001:db8:N::M, N mostly among the API routes' /48s (0x100..).
                let hi = 0x2001_0db8u128 << 96;
                let n = u128::from((r >> 48) % 0x300);
                IpAddr::V6((hi | n << 80 | u128::from(r & 0xffff)).into())
            } else {
                IpAddr::V4(((172 << 24) | (16 << 16) | (r as u32 & 0x000f_ffff)).into())
            });
        }
        (vr.to_string(), a)
    })
    .collect()
}

/// What a fresh data plane built from model `m` through the API runs: the rows of every
/// route of every VR, FIB prefixes and next hops, interfaces and reservation, and what its
/// FIB does at the addresses of `sample`.
fn built(c: &mut Client, sample: &BTreeMap<String, Vec<IpAddr>>) -> Value {
    let st = c.ok(json!({ "cmd": "status" }));
    let mut out = serde_json::Map::new();
    for v in st["vrs"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let rows = c.ok(json!({ "cmd": "route_list", "args": { "vr": name, "limit": 1_000_000 } }));
        let fib = json!([v["fib"]["ipv4"], v["fib"]["ipv6"], v["fib"]["next_hops"]]);
        // From the VR's next period: the pending one is what was asked for.
        let reservation = match &v["pending_reservation"] {
            Value::Null => &v["reservation"],
            p => p,
        };
        let at = sample.get(name).map(|a| lookups(c, name, a)).unwrap_or_default();
        let keep = json!({ "routes": rows["routes"], "fib": fib, "interfaces": v["interfaces"],
            "reservation": reservation, "forwarding": at });
        out.insert(name.into(), keep);
    }
    Value::Object(out)
}

/// Builds `m` on a fresh data plane (its own run directory) and compares it with `now`
/// (what the recovered one runs, its forwarding at `sample`).
fn compare_with_a_fresh_build(
    m: &Model,
    now: &Value,
    sample: &BTreeMap<String, Vec<IpAddr>>,
    seed: u64,
) {
    // Its own memif sockets (the running one holds those of `rig`).
    let mut fresh = Rig::new(1);
    let t = fresh.tag.clone();
    fresh.spawn();
    let mut c = fresh.connect().expect("the fresh data plane started");
    let mut ok = |req: Value| {
        let v = c.call(&req).unwrap();
        assert!(v.get("ok").is_some(), "fresh build: {req}: {v}");
    };
    if m.static_s || m.x {
        ok(
            json!({ "cmd": "apply", "args": { "topology": text(&t, m.static_s, m.x), "file": "crash.yaml" } }),
        );
    }
    ok(
        json!({ "cmd": "interface_set", "args": { "vr": "r", "interface": "b", "mtu": m.mtu, "up": m.up } }),
    );
    if let Some(p) = m.packets {
        ok(json!({ "cmd": "reserve", "args": { "vr": "r", "spec": [format!("packets={p}")] } }));
    }
    for (vr, routes) in &m.routes {
        let rows: Vec<Value> = routes
            .iter()
            .map(|(p, t)| match t.strip_prefix("via ") {
                Some(g) => json!({ "prefix": p, "via": g }),
                None => json!({ "prefix": p, "blackhole": true }),
            })
            .collect();
        if !rows.is_empty() {
            ok(json!({ "cmd": "route_add", "args": { "vr": vr, "routes": rows } }));
        }
    }
    let want = built(&mut c, sample);
    // The ports' socket names differ; the rest must not.
    assert_eq!(*now, want, "recovered (left) against a fresh build of the model (seed {seed})");
    c.call(&json!({ "cmd": "stop" }));
    let st = fresh.child.take().unwrap().wait().unwrap();
    assert!(st.success(), "the fresh data plane stopped with {st}");
}

/// SIGKILLs `pid` after `after`, from another thread.
fn kill_after(pid: u32, after: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        // SAFETY: kill(2) with a pid this test spawned and has not reaped yet (the main
        // thread waits for this thread before it waits for the child), so it names that
        // process, alive or a zombie.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    })
}

#[test]
fn acknowledged_changes_survive_sigkill_at_any_instant_whole_or_not_at_all() {
    let seed = env_u64("RPX_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64
    });
    let iterations = env_u64("RPX_CRASH_ITERATIONS").unwrap_or(60);
    eprintln!("crash: seed {seed}, {iterations} iterations (RPX_CRASH_SEED={seed} replays it)");
    let mut rng = Rng::new(seed);
    let mut rig = Rig::new(0);
    let mut model = Model::new();
    let mut serial = 0u32;
    let (mut acked, mut in_flight_applied, mut in_flight_lost, mut startup_kills) = (0, 0, 0, 0);
    let mut in_flight: Option<Change> = None;
    let t0 = Instant::now();
    for it in 0..iterations {
        // Now and then killed while it starts: replaying, compacting, checkpointing.
        if rng.below(4) == 0 {
            let pid = rig.spawn();
            let k = kill_after(pid, Duration::from_millis(rng.below(400)));
            k.join().unwrap();
            rig.reap();
            startup_kills += 1;
        }
        rig.spawn();
        let mut c = rig.connect().expect("not killed yet");
        let seen = observe(&mut c);
        // The change in flight at the kill: all of it or none of it.
        if let Some(f) = in_flight.take() {
            let with = model.after(&f);
            if seen != model && seen == with {
                in_flight_applied += 1;
                model = with;
            } else if seen == model && seen != with {
                in_flight_lost += 1;
            }
        }
        assert_eq!(
            seen, model,
            "iteration {it}: after SIGKILL and a restart (seed {seed}; left: running, right: acknowledged)\n{}",
            rig.tail()
        );
        if it % 20 == 19 || it + 1 == iterations {
            let sample = samples(&model, seed.wrapping_add(it));
            let now = built(&mut c, &sample);
            compare_with_a_fresh_build(&model, &now, &sample, seed);
        }
        // Changes until the kill; now and then a pause, for the checkpoint to be written.
        let pid = rig.child.as_ref().unwrap().id();
        let k = kill_after(pid, Duration::from_millis(rng.below(900)));
        loop {
            if rng.below(10) == 0 {
                std::thread::sleep(Duration::from_millis(250 + rng.below(200)));
            }
            let ch = change(&mut rng, &model, &rig.tag, &mut serial);
            match c.call(&ch.req) {
                Some(v) if v.get("ok").is_some() => {
                    model = model.after(&ch);
                    acked += 1;
                }
                Some(v) => {
                    let code = &v["err"]["code"];
                    assert!(
                        code != "runtime" && code != "state" && code != "io",
                        "{}: {v}",
                        ch.req
                    );
                }
                None => {
                    in_flight = Some(ch);
                    break;
                }
            }
        }
        k.join().unwrap();
        rig.reap();
    }
    // The last one's changes, back once more.
    rig.spawn();
    let mut c = rig.connect().unwrap();
    let seen = observe(&mut c);
    if let Some(f) = in_flight.take() {
        if seen == model.after(&f) && seen != model {
            model = model.after(&f);
        }
    }
    assert_eq!(seen, model, "at the end (seed {seed})");
    c.call(&json!({ "cmd": "stop" }));
    let st = rig.child.take().unwrap().wait().unwrap();
    assert!(st.success(), "stopped with {st}");
    eprintln!(
        "crash: {iterations} kills ({startup_kills} more while starting), {acked} changes acknowledged, \
         in flight at the kill: {in_flight_applied} came back whole, {in_flight_lost} not at all; {:.0} s",
        t0.elapsed().as_secs_f64()
    );
}
