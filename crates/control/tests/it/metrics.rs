//! The metrics endpoint on a running host (a `Node` on mem ports, in-process): the exposition
//! has every family of `control::metrics::METRICS` and counts the traffic sent; the HTTP side
//! keeps its limits; the Grafana dashboard uses only names the host exposes; and a real
//! Prometheus server (Debian's `prometheus`, installed by scripts/setup) scrapes it and sees a
//! VR's forwarded counter grow under traffic.
//!
//! The node lives on the test's thread, which (like `daemon::run`'s control loop) pumps traffic
//! and calls `MetricsServer::refresh`; HTTP clients run on other threads.

use crate::reply_json;
use reply_json::Json;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::metered;

use control::metrics::{HttpCounts, MAX_PENDING, METRICS};
use control::Topology;
use metered::Metered;

const VR1_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0];
const VR2_MAC: [u8; 6] = [2, 0, 0, 0, 2, 0];

const TOPOLOGY: &str = "\
metrics: { listen: 127.0.0.1:9469 }
ports:
  - { name: a0, kind: mem }
  - { name: a1, kind: mem }
  - { name: b0, kind: mem }
  - { name: b1, kind: mem }
  - { name: s0, kind: mem }
  - { name: s1, kind: mem }
switches:
  - name: sw
    members:
      - { port: s0 }
      - { port: s1 }
vrs:
  - name: vr1
    interfaces:
      - { name: in, port: a0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: out, port: a1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: out }]
    reservation: { packets: 1000000 }
  - name: vr2
    interfaces:
      - { name: in, port: b0, mac: 02:00:00:00:02:00, addresses: [10.0.0.1/24] }
      - { name: out, port: b1, mac: 02:00:00:00:02:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: out }]
    reservation: { time_us: 900, period_us: 1000, weight: 1 }
";

/// The metered node of this test's topology: vr1 from a0 to a1, vr2 from b0 to b1.
struct Host;

impl Host {
    fn start() -> Metered {
        let topo = Topology::parse(TOPOLOGY, "metrics.yaml", Path::new(".")).unwrap();
        assert_eq!(topo.metrics.as_ref().unwrap().listen.to_string(), "127.0.0.1:9469");
        Metered::start(TOPOLOGY, "metrics.yaml", &[("a0", VR1_MAC), ("b0", VR2_MAC)], &["a1", "b1"])
    }
}

/// A scrape of `h`'s endpoint, the node turning meanwhile.
fn scrape(h: &mut Metered) -> (String, String) {
    let addr = h.metrics.local_addr();
    h.while_running(0, move || http(addr, "GET /metrics HTTP/1.0\r\n\r\n"))
}

/// Sends `request` and reads the whole answer: (status line and headers, body).
fn http(addr: SocketAddr, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_string(), body.to_string())
}

/// The value of the sample `series` (name and labels, as exposed).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Names that have at least one sample in the exposition.
fn sampled(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(String::from)
        .collect()
}

#[test]
fn the_exposition_has_every_family_and_counts_the_traffic() {
    let mut h = Host::start();
    for _ in 0..50 {
        h.turn(20);
    }
    // Every frame a ring took is forwarded (the egress is drained); wait for the workers.
    let sent: Vec<f64> = h.sent.iter().map(|&n| n as f64).collect();
    assert!(sent.iter().all(|&n| n > 0.0), "{sent:?}");
    let forwarded =
        |text: &str, vr: &str| value(text, &format!("routeplex_vr_forwarded_total{{vr=\"{vr}\"}}"));
    let t0 = Instant::now();
    let (head, text) = loop {
        let (head, text) = scrape(&mut h);
        if forwarded(&text, "vr1") == Some(sent[0]) && forwarded(&text, "vr2") == Some(sent[1]) {
            break (head, text);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "forwarded never reached {sent:?}:\n{text}"
        );
    };
    assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
    assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0"), "{head}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let names = sampled(&text);
    for (name, kind, _) in METRICS {
        let base = name.strip_suffix("_total").unwrap_or(name);
        assert!(text.contains(&format!("# TYPE {base} {kind}\n")), "{name}: no TYPE line");
        assert!(names.contains(*name), "{name}: no sample on this host\n{text}");
    }
    let exposed: Vec<&String> =
        names.iter().filter(|n| !METRICS.iter().any(|(m, _, _)| m == n)).collect();
    assert!(exposed.is_empty(), "families missing from METRICS: {exposed:?}");
    for (vr, sent) in [("vr1", sent[0]), ("vr2", sent[1])] {
        let v = |s: &str| value(&text, &format!("routeplex_vr_{s}{{vr=\"{vr}\"}}"));
        assert_eq!(v("received_total"), Some(sent), "{vr}");
        assert_eq!(v("over_budget_total"), Some(0.0), "{vr}");
        assert_eq!(v("neighbors"), Some(1.0), "{vr}");
        assert_eq!(v("worker"), Some(0.0), "{vr}");
        let drop = format!("routeplex_vr_dropped_total{{vr=\"{vr}\",reason=\"no_route\"}}");
        assert_eq!(value(&text, &drop), Some(0.0), "{vr}");
        let routes = format!("routeplex_vr_routes{{vr=\"{vr}\",source=\"static\"}}");
        assert_eq!(value(&text, &routes), Some(1.0), "{vr}");
    }
    assert_eq!(value(&text, "routeplex_vr_reservation_packets{vr=\"vr1\"}"), Some(1e6));
    assert_eq!(value(&text, "routeplex_vr_reservation_seconds{vr=\"vr2\"}"), Some(0.0009));
    assert_eq!(value(&text, "routeplex_vr_reservation_weight{vr=\"vr2\"}"), Some(1.0));
    assert_eq!(value(&text, "routeplex_port_received_total{port=\"a0\"}"), Some(sent[0]));
    assert_eq!(value(&text, "routeplex_port_transmitted_total{port=\"a1\"}"), Some(sent[0]));
    assert_eq!(value(&text, "routeplex_port_up{port=\"b1\"}"), Some(1.0));
    let sw_drop = "routeplex_switch_dropped_total{switch=\"sw\",port=\"s1\",reason=\"tx_full\"}";
    assert_eq!(value(&text, sw_drop), Some(0.0));
    assert_eq!(value(&text, "routeplex_switch_groups{switch=\"sw\"}"), Some(0.0));
    let r = "routeplex_port_dropped_total{port=\"a0\",reason=\"not_for_us\"}";
    assert_eq!(value(&text, r), Some(0.0));
    assert!(value(&text, "routeplex_worker_rounds_total{worker=\"0\"}").unwrap() > 0.0);
    // `status` shows the switch with its members and their drops.
    let st = h.node.status().unwrap();
    let sw = &st.json()["switches"][0];
    assert_eq!((sw["name"].as_str(), sw["groups"].as_u64()), (Some("sw"), Some(0)), "{sw:#}");
    let ports: Vec<&str> =
        sw["members"].as_array().unwrap().iter().map(|m| m["port"].as_str().unwrap()).collect();
    assert_eq!(ports, ["s0", "s1"], "{sw:#}");
    assert_eq!(sw["drops"]["tx_full"].as_u64(), Some(0), "{sw:#}");
}

#[test]
fn the_http_side_keeps_its_limits() {
    let mut h = Host::start();
    let addr = h.metrics.local_addr();
    let ask = |req: &'static str| move || http(addr, req).0;
    let head = h.while_running(0, ask("GET /other HTTP/1.0\r\n\r\n"));
    assert!(head.starts_with("HTTP/1.0 404"), "{head}");
    let head = h.while_running(0, ask("POST /metrics HTTP/1.0\r\n\r\n"));
    assert!(head.starts_with("HTTP/1.0 405"), "{head}");
    let head = h.while_running(0, move || {
        let big = format!("GET /metrics HTTP/1.0\r\nX: {}\r\n\r\n", "a".repeat(20_000));
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(big.as_bytes());
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    });
    assert!(head.starts_with("HTTP/1.0 431"), "{head}");
    let head = h.while_running(0, ask("HEAD /metrics HTTP/1.0\r\n\r\n"));
    assert!(head.starts_with("HTTP/1.0 200") && head.contains("Content-Length: "), "{head}");

    // Silent clients fill every place for a head: a scraper takes the oldest one's (cut, it
    // reads nothing), the others time out.
    let silent: Vec<TcpStream> =
        (0..MAX_PENDING).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let t0 = Instant::now();
    while h.metrics.pending() < MAX_PENDING {
        assert!(t0.elapsed() < Duration::from_secs(30), "the silent clients never all connected");
        h.turn(0);
    }
    let head = h.while_running(0, ask("GET /metrics HTTP/1.0\r\n\r\n"));
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    let mut answers = Vec::new();
    for mut s in silent {
        let mut text = String::new();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.read_to_string(&mut text);
        answers.push(text.lines().next().unwrap_or("").to_string());
    }
    assert_eq!(answers[0], "", "the oldest was cut");
    assert!(answers[1..].iter().all(|a| a.starts_with("HTTP/1.0 408")), "{answers:?}");
    let c = h.metrics.counts();
    assert_eq!(HttpCounts::get(&c.cut), 1);
    assert_eq!(HttpCounts::get(&c.timed_out), MAX_PENDING as u64 - 1);
    assert_eq!(HttpCounts::get(&c.busy), 0);
    thread::sleep(Duration::from_millis(100));
    let (head, body) = scrape(&mut h);
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(body.ends_with("# EOF\n"));
}

/// Clients that open a connection and send a request head one byte every 100 ms, never
/// ending it; each opens another as soon as the endpoint drops it, until `stop`. Returns the
/// connections each opened.
fn trickling(addr: SocketAddr, n: usize, stop: &Arc<AtomicBool>) -> Vec<JoinHandle<u64>> {
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let head = b"GET /metrics HTTP/1.0\r\nX-Slow: ";
                let mut opened = 0;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(addr) else { continue };
                    opened += 1;
                    let bytes = head.iter().copied().chain(std::iter::repeat(b'a'));
                    for b in bytes {
                        if stop.load(Ordering::Relaxed) || s.write_all(&[b]).is_err() {
                            break;
                        }
                        thread::sleep(Duration::from_millis(100));
                    }
                }
                opened
            })
        })
        .collect()
}

#[test]
fn trickling_clients_do_not_blind_the_endpoint() {
    let mut h = Host::start();
    let addr = h.metrics.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    // As many as may send their head at once (the finding had MAX_CONNECTIONS of them).
    let slow = trickling(addr, MAX_PENDING, &stop);
    let t0 = Instant::now();
    while h.metrics.pending() < MAX_PENDING {
        assert!(t0.elapsed() < Duration::from_secs(30), "the tricklers never all connected");
        h.turn(0);
    }
    let mut refused = Vec::new();
    for i in 0..30 {
        let (head, body) = scrape(&mut h);
        if !head.starts_with("HTTP/1.0 200") || !body.ends_with("# EOF\n") {
            refused.push(format!("scrape {i}: {head} {body}"));
        }
        // Spread over more than the endpoint's deadline for a request head.
        for _ in 0..40 {
            h.turn(0);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let opened: u64 = slow.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(refused.is_empty(), "{} of 30 scrapes refused: {refused:?}", refused.len());
    assert!(opened >= MAX_PENDING as u64);
    let c = h.metrics.counts();
    // The scrapes came while every place was taken, and took one.
    assert!(HttpCounts::get(&c.cut) >= 1, "{c:?}");
    assert_eq!(HttpCounts::get(&c.busy), 0);
}

fn dashboard() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grafana-routeplex.json");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every `routeplex_*` name in `text`.
fn names_in(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("routeplex_") {
        let tail = &rest[i..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn the_grafana_dashboard_uses_only_names_a_running_host_exposes() {
    let text = dashboard();
    let doc: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert!(doc["panels"].as_array().is_some_and(|p| p.len() >= 10), "panels");
    let used = names_in(&text);
    assert!(used.contains("routeplex_vr_forwarded_total"), "{used:?}");
    let mut h = Host::start();
    for _ in 0..10 {
        h.turn(10);
    }
    let (_, exposition) = scrape(&mut h);
    let exposed = sampled(&exposition);
    let missing: Vec<&String> = used.iter().filter(|n| !exposed.contains(*n)).collect();
    assert!(missing.is_empty(), "the dashboard uses names the host does not expose: {missing:?}");
}

/// A Prometheus server for the test; killed, and its directory removed, when dropped.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn prometheus_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file())
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// GET `path` from Prometheus: the body of a 200, else `None`.
fn prom_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}

/// vr1's forwarded counter as Prometheus has it, if it has it yet.
fn prom_forwarded(addr: SocketAddr) -> Option<f64> {
    let body = prom_get(addr, "/api/v1/query?query=routeplex_vr_forwarded_total")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"].as_array()?.iter().find(|r| r["metric"]["vr"] == "vr1")?["value"][1]
        .as_str()?
        .parse()
        .ok()
}

#[test]
fn prometheus_scrapes_the_forwarded_counter_as_it_grows() {
    let Some(bin) = prometheus_binary() else {
        println!("SKIPPED: no prometheus binary (apt-get install prometheus; scripts/setup does)");
        return;
    };
    let mut h = Host::start();
    let target = h.metrics.local_addr();
    let dir =
        std::env::temp_dir().join(format!("rpx-prom-{}-{}", std::process::id(), target.port()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: routeplex\n    static_configs:\n      - targets: [\"{target}\"]\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let log = std::fs::File::create(dir.join("log")).unwrap();
    let addr = free_port();
    let child = Command::new(&bin)
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let prom = Prometheus { child, dir, addr };

    // Prometheus is polled from another thread; this one forwards traffic and samples.
    let seen = h.while_running(5, move || {
        let t0 = Instant::now();
        let deadline = Duration::from_secs(60);
        while prom_get(addr, "/-/ready").is_none() {
            if t0.elapsed() > deadline {
                return Err("Prometheus never became ready".to_string());
            }
            thread::sleep(Duration::from_millis(200));
        }
        let mut seen: Vec<f64> = Vec::new();
        while t0.elapsed() < deadline {
            if let Some(v) = prom_forwarded(addr) {
                if seen.last() != Some(&v) {
                    seen.push(v);
                }
                if seen.len() >= 3 {
                    return Ok(seen);
                }
            }
            thread::sleep(Duration::from_millis(500));
        }
        Err(format!("the forwarded counter did not grow in Prometheus: {seen:?}"))
    });
    let log = std::fs::read_to_string(prom.dir.join("log")).unwrap_or_default();
    let seen = seen.unwrap_or_else(|e| {
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        panic!("{e}; Prometheus at {} said (last lines first):\n{}", prom.addr, tail.join("\n"))
    });
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "it only grows: {seen:?}");
    assert!(seen[0] > 0.0, "{seen:?}");
    drop(prom);
}
