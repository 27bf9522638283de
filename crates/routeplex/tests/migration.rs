//! Live migration between two hosts under traffic: two network namespaces each run a data
//! plane (`routeplex run`), joined by a migration link (a veth pair); the VR's neighbors, two
//! hosts, sit with both data planes' ports on one L2 segment (a Linux bridge in a namespace of
//! its own). Host a streams sequence-numbered UDP to host b through the VR while `routeplex
//! migrate` moves it from the first data plane to the second. The stream goes on through the
//! destination after the move, with no packet reordered or duplicated; the packets lost are
//! those that reached the source between its stop and the bridge learning the VR's MACs on
//! the destination's port (see `control::migrate`), printed with the gap they made.
//!
//! Needs root; skipped with a message otherwise. Every name starts with `rsn`.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "7d1c9e0a4b2f68e3a5c7d9e1f3b5a7c9";

fn root() -> bool {
    let ok = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !ok {
        eprintln!("skipped: needs root (network namespaces, veth, a bridge); CI runs as root");
    }
    ok
}

fn sh(args: &[&str]) -> Output {
    Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn ok(args: &[&str]) {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Everything the test made, removed on drop even when it fails.
struct Lab {
    t: String,
    dir: PathBuf,
    daemons: Vec<Child>,
}

impl Lab {
    fn ns(&self, n: &str) -> String {
        format!("rsn{n}{}", self.t)
    }

    fn nsx(&self, n: &str, args: &[&str]) {
        let ns = self.ns(n);
        let mut all = vec!["ip", "netns", "exec", ns.as_str()];
        all.extend(args);
        ok(&all);
    }

    fn new() -> Lab {
        let t = format!("{:x}", std::process::id() % 0xffff);
        let dir = std::env::temp_dir().join(format!("rsn-migr-{t}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lab = Lab { t, dir, daemons: Vec::new() };
        for n in ["s", "d", "a", "b", "w"] {
            ok(&["ip", "netns", "add", &lab.ns(n)]);
        }
        let w = lab.ns("w");
        lab.nsx("w", &["ip", "link", "add", "br0", "type", "bridge"]);
        lab.nsx("w", &["ip", "link", "set", "br0", "up"]);
        // Each of s, d (the data planes' ports) and a, b (hosts) on the bridge.
        for n in ["s", "d", "a", "b"] {
            let inner = if n == "s" || n == "d" { "seg" } else { "eth0" };
            ok(&[
                "ip",
                "link",
                "add",
                "rsnv",
                "netns",
                &lab.ns(n),
                "type",
                "veth",
                "peer",
                "name",
                &format!("p{n}"),
                "netns",
                &w,
            ]);
            lab.nsx(n, &["ip", "link", "set", "rsnv", "name", inner]);
            lab.nsx(n, &["ip", "link", "set", inner, "up"]);
            lab.nsx("w", &["ip", "link", "set", &format!("p{n}"), "master", "br0", "up"]);
            // Checksums and segments made by the kernel, not left to an offload that a
            // packet socket would carry on half done.
            let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
            let mut cmd = vec!["ethtool", "-K", inner];
            cmd.extend(off);
            lab.nsx(n, &cmd);
            let bp = format!("p{n}");
            let mut cmd = vec!["ethtool", "-K", bp.as_str()];
            cmd.extend(off);
            lab.nsx("w", &cmd);
        }
        lab.nsx("a", &["ip", "addr", "add", "10.70.1.2/24", "dev", "eth0"]);
        lab.nsx("a", &["ip", "route", "add", "default", "via", "10.70.1.1"]);
        lab.nsx("b", &["ip", "addr", "add", "10.70.2.2/24", "dev", "eth0"]);
        lab.nsx("b", &["ip", "route", "add", "default", "via", "10.70.2.1"]);
        // The migration link.
        ok(&[
            "ip",
            "link",
            "add",
            "mig",
            "netns",
            &lab.ns("s"),
            "type",
            "veth",
            "peer",
            "name",
            "mig",
            "netns",
            &lab.ns("d"),
        ]);
        for (n, a) in [("s", "10.255.0.1/30"), ("d", "10.255.0.2/30")] {
            lab.nsx(n, &["ip", "addr", "add", a, "dev", "mig"]);
            lab.nsx(n, &["ip", "link", "set", "mig", "up"]);
            lab.nsx(n, &["ip", "link", "set", "lo", "up"]);
        }
        lab
    }

    /// Starts `routeplex run` in namespace `n` with `yaml`; returns its state directory once
    /// it answers.
    fn daemon(&mut self, n: &str, yaml: &str) -> (PathBuf, PathBuf) {
        let file = self.dir.join(format!("{n}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let state = self.dir.join(format!("state-{n}"));
        std::fs::create_dir_all(&state).unwrap();
        let log = std::fs::File::create(self.dir.join(format!("{n}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(n), env!("CARGO_BIN_EXE_routeplex"), "run"])
            .arg(&file)
            .arg("--state-dir")
            .arg(&state)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.daemons.push(child);
        let t0 = Instant::now();
        while !state.join("control.sock").exists() {
            assert!(t0.elapsed() < Duration::from_secs(20), "{n}: {}", self.log(n));
            std::thread::sleep(Duration::from_millis(50));
        }
        (file, state)
    }

    fn log(&self, n: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{n}.log"))).unwrap_or_default()
    }

    fn routeplex(&self, n: &str, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(n), env!("CARGO_BIN_EXE_routeplex")])
            .args(args)
            .output()
            .unwrap()
    }

    fn status(&self, n: &str, file: &Path, state: &Path) -> serde_json::Value {
        let o = self.routeplex(
            n,
            &["status", file.to_str().unwrap(), "--json", "--state-dir", state.to_str().unwrap()],
        );
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "status: {e}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for c in &mut self.daemons {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in ["s", "d", "a", "b", "w"] {
            let _ = sh(&["ip", "netns", "del", &self.ns(n)]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `f` on a thread inside namespace `ns` (setns(2) moves only the calling thread).
fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap();
        // SAFETY: setns on a namespace file descriptor we hold open; it changes only this
        // thread's network namespace.
        let r = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

fn vr_names(s: &serde_json::Value) -> Vec<String> {
    s["vrs"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_vr_migrates_under_traffic_and_the_stream_goes_on() {
    if !root() {
        return;
    }
    let mut lab = Lab::new();
    let src_yaml = format!(
        r#"workers: 1
migration: {{ secret: {SECRET} }}
ports:
  - {{ name: seg, kind: afpacket, interface: seg }}
vrs:
  - name: r
    interfaces:
      - {{ name: e1, port: seg, mac: "02:00:00:00:70:01", addresses: [10.70.1.1/24] }}
      - {{ name: e2, port: seg, mac: "02:00:00:00:70:02", addresses: [10.70.2.1/24] }}
"#
    );
    // The destination has no VR yet: the VR brings its port (the same interface name there).
    let dst_yaml = format!(
        "workers: 1\nmigration: {{ listen: 10.255.0.2:9470, secret: {SECRET}, peers: [10.255.0.1] }}\n"
    );
    let (sf, ss) = lab.daemon("s", &src_yaml);
    let (df, ds) = lab.daemon("d", &dst_yaml);
    // Warm up: neighbors resolved both ways.
    let t0 = Instant::now();
    loop {
        let o = sh(&["ip", "netns", "exec", &lab.ns("a"), "ping", "-c1", "-W1", "10.70.2.2"]);
        if o.status.success() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "no path through the VR: {}", lab.log("s"));
    }

    // The stream: 64-byte frames (18 bytes of UDP payload) every 200 µs for 3 s.
    const N: u64 = 15_000;
    let sink = in_netns(&lab.ns("b"), || {
        let s = UdpSocket::bind("10.70.2.2:7000").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
        let mut got: Vec<(u64, Instant)> = Vec::with_capacity(N as usize);
        let mut buf = [0u8; 64];
        while let Ok(n) = s.recv(&mut buf) {
            if n >= 8 {
                got.push((u64::from_le_bytes(buf[..8].try_into().unwrap()), Instant::now()));
            }
        }
        got
    });
    std::thread::sleep(Duration::from_millis(200));
    let gen = in_netns(&lab.ns("a"), || {
        let s = UdpSocket::bind("10.70.1.2:0").unwrap();
        s.connect("10.70.2.2:7000").unwrap();
        let t0 = Instant::now();
        let mut payload = [0u8; 18];
        for seq in 0..N {
            let due = Duration::from_micros(200 * seq);
            while t0.elapsed() < due {
                std::hint::spin_loop();
            }
            payload[..8].copy_from_slice(&seq.to_le_bytes());
            let _ = s.send(&payload);
        }
    });
    std::thread::sleep(Duration::from_millis(1000));
    let m = lab.routeplex(
        "s",
        &[
            "migrate",
            sf.to_str().unwrap(),
            "r",
            "--to",
            "10.255.0.2:9470",
            "--state-dir",
            ss.to_str().unwrap(),
        ],
    );
    let moved_at = Instant::now();
    let out = String::from_utf8_lossy(&m.stdout).to_string();
    assert!(
        m.status.success(),
        "migrate: {out}{}\n{}",
        String::from_utf8_lossy(&m.stderr),
        lab.log("d")
    );
    gen.join().unwrap();
    let got = sink.join().unwrap();
    let stats: serde_json::Value = serde_json::from_str(out.trim()).unwrap();

    let dst_status = lab.status("d", &df, &ds);
    // Datagrams host b's kernel dropped because the sink thread fell behind (a loaded
    // machine), not lost on the way: counted apart.
    let snmp = String::from_utf8_lossy(
        &sh(&["ip", "netns", "exec", &lab.ns("b"), "cat", "/proc/net/snmp"]).stdout,
    )
    .to_string();
    let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp: ")).collect();
    let rcvbuf_errors = udp
        .first()
        .and_then(|h| h.split_whitespace().position(|k| k == "RcvbufErrors"))
        .and_then(|k| udp.get(1)?.split_whitespace().nth(k)?.parse::<u64>().ok())
        .unwrap_or(0);
    eprintln!(
        "received {} (last {:?}), migrate {stats}\ndestination: {}\nlog: {}",
        got.len(),
        got.last().map(|g| g.0),
        dst_status["vrs"],
        lab.log("d")
    );
    assert!(!vr_names(&lab.status("s", &sf, &ss)).contains(&"r".to_string()));
    assert!(vr_names(&lab.status("d", &df, &ds)).contains(&"r".to_string()));
    // After the move the stream arrives through the destination.
    assert!(
        got.iter().any(|(_, t)| *t > moved_at + Duration::from_millis(300)),
        "nothing after the move"
    );
    assert_eq!(got.last().map(|g| g.0), Some(N - 1), "the stream's end did not arrive");
    let (mut reordered, mut dup, mut max_seq) = (0, 0, None::<u64>);
    let mut seen = vec![false; N as usize];
    for &(s, _) in &got {
        if seen[s as usize] {
            dup += 1;
        }
        seen[s as usize] = true;
        if max_seq.is_some_and(|m| s < m) {
            reordered += 1;
        }
        max_seq = max_seq.max(Some(s));
    }
    let lost = seen.iter().filter(|x| !**x).count();
    let gap = got.windows(2).map(|w| w[1].1 - w[0].1).max().unwrap_or_default();
    if let Some(w) = got.windows(2).max_by_key(|w| w[1].1 - w[0].1) {
        eprintln!(
            "longest gap: after seq {} ({:?} before migrate returned) to seq {}",
            w[0].0,
            moved_at.saturating_duration_since(w[0].1),
            w[1].0
        );
    }
    println!(
        "{{\"sent\":{N},\"received\":{},\"lost\":{lost},\"sink_rcvbuf_drops\":{rcvbuf_errors},\"reordered\":{reordered},\"duplicates\":{dup},\"longest_gap_ms\":{:.3},\"migrate\":{stats}}}",
        got.len(),
        gap.as_secs_f64() * 1e3
    );
    assert_eq!(reordered, 0, "packets reordered");
    assert_eq!(dup, 0, "packets duplicated");
}
