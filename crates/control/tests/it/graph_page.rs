//! The metrics server's live topology page (`GET /`) in a real browser: headless Chromium
//! (Debian's `chromium-headless-shell`, installed by scripts/setup) loads it from a running
//! host (a `Node` on mem ports, in-process, no root), runs its script, and the DOM it dumps
//! has every VR, port, switch and link of the drawing, the impairment label, and live
//! counters that grow under traffic between two loads. A screenshot is kept under the target
//! directory (its path is printed).
//!
//! The node lives on the test's thread, which (like `daemon::run`'s control loop) pumps
//! traffic and calls `MetricsServer::refresh`; Chromium runs from another thread.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::metered;

use control::graph::{esc, Graph};
use control::Topology;
use metered::Metered;

const VR1_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0];
const VR2_MAC: [u8; 6] = [2, 0, 0, 0, 2, 0];

/// vr1 forwards from a0 to a1 (impaired: delayed, a tenth lost); vr2 from b0 onto switch
/// lan, whose member s0 is where its frames leave.
const TOPOLOGY: &str = "\
ports:
  - { name: a0, kind: mem }
  - { name: a1, kind: mem, impair: { delay: 1ms, loss: 10%, seed: 3 } }
  - { name: b0, kind: mem }
  - { name: s0, kind: mem }
switches:
  - name: lan
    members: [{ port: s0 }]
vrs:
  - name: vr1
    interfaces:
      - { name: in, port: a0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: out, port: a1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: out }]
  - name: vr2
    interfaces:
      - { name: in, port: b0, mac: 02:00:00:00:02:00, addresses: [10.0.0.1/24] }
      - { name: out, switch: lan, mac: 02:00:00:00:02:01, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: out }]
";

/// vr1's frames go in at a0, vr2's at b0; a1 and s0 are drained.
fn start() -> Metered {
    Metered::start(TOPOLOGY, "graph_page.yaml", &[("a0", VR1_MAC), ("b0", VR2_MAC)], &["a1", "s0"])
}

/// Debian's headless shell (smaller), or the full browser.
fn chromium() -> Option<PathBuf> {
    ["chromium-headless-shell", "chromium"].iter().find_map(|b| {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|d| Path::new(d).join(b))
            .find(|p| p.is_file())
    })
}

/// Runs the browser on `url` with `args` (its own profile directory; no sandbox, as tests run
/// as root), at most a minute; returns its standard output.
fn browse(bin: &Path, profile: &Path, url: &str, args: &[String]) -> String {
    let mut child = Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        // Virtual time stops while a fetch is in flight, so the page's script gets this much
        // page time (about three refreshes) however long the host takes to answer. They come
        // within the host's 200 ms sample reuse, so the page's rates stay "-" here (a browser
        // refreshing in real time shows them); the counters are what the test compares.
        .arg("--virtual-time-budget=3500")
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).map(|_| s)
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not finish within a minute", bin.display());
        }
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{} exited with {status}", bin.display());
    reader.join().unwrap().unwrap()
}

/// The number in the cell of class `field` of the table row `row` (`vr:vr1`).
fn cell(dom: &str, row: &str, field: &str) -> u64 {
    let at = dom.find(&format!("data-row=\"{row}\"")).unwrap_or_else(|| panic!("no row {row}"));
    let rest = &dom[at..];
    let end = rest.find("</tr>").unwrap();
    let tag = format!("class=\"{field}\">");
    let c = rest[..end].find(&tag).unwrap_or_else(|| panic!("row {row} has no {field}"));
    let v = &rest[c + tag.len()..];
    v[..v.find('<').unwrap()].parse().unwrap_or_else(|_| panic!("{row} {field}: {v:.40}"))
}

/// Every drawn name and link label is in the DOM as text, the script ran (`data-samples`),
/// and every link over a port got its live line.
fn check_dom(dom: &str, g: &Graph) {
    assert!(dom.contains("data-samples="), "the page's script never showed a sample:\n{dom}");
    for n in &g.nodes {
        assert!(dom.contains(&format!(">{}</text>", esc(&n.name))), "{} not drawn", n.name);
    }
    for e in &g.edges {
        assert!(dom.contains(&format!(">{}</text>", esc(&e.label))), "link {} not drawn", e.label);
        if let Some(i) = &e.impair {
            assert!(dom.contains(&format!(">{}</text>", esc(i))), "impairment {i} not shown");
        }
    }
    for vr in ["vr1", "vr2"] {
        assert!(dom.contains(&format!("data-row=\"vr:{vr}\"")), "no table row for {vr}");
    }
    let live: Vec<&str> = dom.split("class=\"live\"").skip(1).collect();
    assert_eq!(live.len(), g.edges.iter().filter(|e| e.port.is_some()).count());
    for l in live {
        let text = &l[l.find('>').unwrap() + 1..];
        assert!(text.starts_with("rx "), "a link's live line is empty: {text:.60}");
    }
}

#[test]
fn chromium_shows_every_vr_and_link_and_counters_that_grow() {
    let Some(bin) = chromium() else {
        println!(
            "SKIPPED: no chromium-headless-shell or chromium on PATH (apt-get install chromium-headless-shell; scripts/setup does)"
        );
        return;
    };
    let mut h = start();
    let topo = Topology::parse(TOPOLOGY, "graph_page.yaml", Path::new(".")).unwrap();
    let g = Graph::of(&topo);
    let url = format!("http://{}/", h.metrics.local_addr());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("graph_page");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for _ in 0..20 {
        h.turn(10);
    }

    let load = |h: &mut Metered, frames: u64, args: Vec<String>| {
        let (bin, profile, url) = (bin.clone(), dir.join("profile"), url.clone());
        h.while_running(frames, move || browse(&bin, &profile, &url, &args))
    };
    let dump = || vec!["--dump-dom".to_string()];
    let first = load(&mut h, 0, dump());
    check_dom(&first, &g);
    let before = [cell(&first, "vr:vr1", "received"), cell(&first, "vr:vr2", "received")];
    let port_before = cell(&first, "port:a0", "rx");
    assert!(before.iter().zip(&h.sent).all(|(&b, &s)| b > 0 && b <= s), "{before:?} {:?}", h.sent);

    for _ in 0..20 {
        h.turn(10);
    }
    let second = load(&mut h, 10, dump());
    check_dom(&second, &g);
    let after = [cell(&second, "vr:vr1", "received"), cell(&second, "vr:vr2", "received")];
    assert!(after[0] > before[0] && after[1] > before[1], "{before:?} -> {after:?}");
    assert!(after.iter().zip(&h.sent).all(|(&a, &s)| a <= s), "{after:?} {:?}", h.sent);
    assert!(cell(&second, "port:a0", "rx") > port_before);
    assert!(cell(&second, "vr:vr1", "forwarded") > 0);

    let shot = dir.join("graph_page.png");
    let args = vec![format!("--screenshot={}", shot.display()), "--window-size=1400,900".into()];
    load(&mut h, 10, args);
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG: {}", shot.display());
    println!("screenshot of the live page: {}", shot.display());
}
