//! `routeplex run` with two workers, driven through the command line: `status`, `move` and
//! `reserve` against its control socket, every error they can meet, and that an error leaves
//! the running state as it was.
//!
//! memif ports in server role need no root and no peer (they wait, down, for one), so this runs
//! anywhere. No timing is asserted; waits have generous deadlines.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

/// A data plane started with `routeplex run --state-dir`, stopped (SIGTERM, then SIGKILL) and
/// its files removed on drop, even when the test fails.
struct Running {
    dir: PathBuf,
    file: PathBuf,
    child: Option<Child>,
}

impl Running {
    fn start(yaml: &str) -> Running {
        Running::start_with(yaml, "", &[])
    }

    /// [`Running::start`] in a directory of its own (`tag`), `run` given `args` too (and no
    /// RUST_LOG, so logs are at their default level).
    fn start_with(yaml: &str, tag: &str, args: &[&str]) -> Running {
        let dir = std::env::temp_dir().join(format!("rpx-workers-cli-{}{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("w.yaml");
        std::fs::write(&file, yaml.replace("DIR", dir.to_str().unwrap())).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .args(["run", file.to_str().unwrap(), "--state-dir", dir.to_str().unwrap()])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("ROUTEPLEX_LOG_FORMAT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        let mut r = Running { dir, file, child: Some(child) };
        let t0 = Instant::now();
        while !r.ask(&["status"]).status.success() {
            let exited = r.child.as_mut().unwrap().try_wait().unwrap();
            assert!(
                exited.is_none() && t0.elapsed() < DEADLINE,
                "run did not come up: {}",
                r.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// `routeplex VERB FILE ARGS... --state-dir DIR`.
    fn ask(&self, args: &[&str]) -> Output {
        let (verb, rest) = args.split_first().unwrap();
        Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .arg(verb)
            .arg(&self.file)
            .args(rest)
            .arg("--state-dir")
            .arg(&self.dir)
            .output()
            .unwrap()
    }

    /// The JSON answer of a command that must succeed.
    fn ok(&self, args: &[&str]) -> Value {
        let o = self.ask(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&o)))
    }

    /// Runs a command that must fail with an error containing `why`.
    fn fails(&self, args: &[&str], why: &str) {
        let o = self.ask(args);
        assert!(!o.status.success(), "{args:?} should fail: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why), "{args:?}: expected {why:?} in {err:?}");
    }

    fn vr(&self, name: &str) -> Value {
        let s = self.ok(&["status", "--json"]);
        s["vrs"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap().clone()
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let t0 = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if t0.elapsed() > DEADLINE {
                let _ = child.kill();
                return child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const TOPO: &str = "\
workers: 2
ports:
  - { name: p0, kind: memif, role: server, socket: DIR/p0.sock, burst: 64 }
  - { name: p1, kind: memif, role: server, socket: DIR/p1.sock }
vrs:
  - name: a
    worker: 0
    batch: 32
    reservation: { packets: 100, period_us: 1000 }
    interfaces: [{ name: e0, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }]
  - name: b
    interfaces: [{ name: e0, port: p1, mac: 02:00:00:00:02:00, addresses: [10.0.1.1/24] }]
";

#[test]
fn run_moves_and_reserves_through_the_command_line() {
    let mut r = Running::start(TOPO);
    let s = r.ok(&["status", "--json"]);
    assert_eq!(s["workers"].as_array().unwrap().len(), 2, "{s}");
    let a = r.vr("a");
    assert_eq!(a["worker"], 0, "placed as the topology says: {a}");
    assert_eq!((&a["batch"], &a["over_budget"]), (&32.into(), &0.into()), "{a}");
    assert_eq!(a["reservation"]["packets"], 100, "{a}");
    assert_eq!(r.vr("b")["worker"], 1, "b balanced onto the other worker");
    let p0 = s["ports"].as_array().unwrap().iter().find(|p| p["name"] == "p0").unwrap();
    assert_eq!(p0["burst"], 64, "{p0}");

    let m = r.ok(&["move", "a", "1"]);
    assert_eq!(
        (&m["moved"], &m["from"], &m["to"]),
        (&serde_json::json!(["a"]), &0.into(), &1.into())
    );
    assert_eq!(r.vr("a")["worker"], 1);

    // Errors name what is wrong and change nothing.
    r.fails(&["move", "a", "2"], "no worker 2: there are 2 (0..=1)");
    r.fails(&["move", "nobody", "0"], "no VR named \"nobody\"");
    r.fails(&["move", "a", "-1"], "worker must be a number, not \"-1\"");
    r.fails(&["reserve", "a", "packets=0"], "packets 0 is out of range");
    r.fails(&["reserve", "a", "packets=12x"], "must be an integer");
    r.fails(&["reserve", "a", "time_us=2000"], "longer than the period");
    r.fails(&["reserve", "a", "packets=5", "time_us=5"], "not both");
    r.fails(&["reserve", "a", "speed=5"], "unknown key \"speed\"");
    r.fails(&["reserve", "nobody", "none"], "no VR named");
    let a = r.vr("a");
    assert_eq!((&a["worker"], &a["reservation"]["packets"]), (&1.into(), &100.into()), "{a}");

    // No packet has started a period yet, so a change applies at once.
    let v = r.ok(&["reserve", "a", "time_us=300", "period_us=2000", "weight=2"]);
    assert_eq!(v["reservation"]["time_ns"], 300_000, "{v}");
    assert_eq!(
        (&v["reservation"]["period_ns"], &v["reservation"]["weight"]),
        (&2_000_000.into(), &2.into())
    );
    assert_eq!(r.ok(&["reserve", "a", "none"])["reservation"], Value::Null);
    assert_eq!(r.vr("a")["reservation"], Value::Null);

    let status = r.stop();
    assert!(status.success(), "run stops cleanly on SIGTERM: {status}; {}", r.log());
    assert!(r.log().contains("2 worker(s)"), "{}", r.log());
    assert!(!Path::new(&r.dir.join("control.sock")).exists(), "the socket is removed");
}

/// The log's lines once one satisfies `want` (the data plane writes them as things happen).
fn wait_log(r: &Running, what: &str, want: impl Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        let log = r.log();
        if log.lines().any(&want) {
            return log;
        }
        assert!(t0.elapsed() < DEADLINE, "no {what} in the log: {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The JSON log lines whose message starts with `msg`.
fn events(log: &str, msg: &str) -> Vec<Value> {
    log.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|e| e["fields"]["message"].as_str().is_some_and(|m| m.starts_with(msg)))
        .collect()
}

#[test]
fn run_logs_state_changes_as_json_lines() {
    let mut r = Running::start_with(TOPO, "-json", &["--log-format", "json"]);
    let pid = r.child.as_ref().unwrap().id();
    let is = |msg: &'static str| move |l: &str| l.contains(msg);

    // The start: one event, with its pid, workers and VRs as fields.
    let log = wait_log(&r, "start event", is("data plane started"));
    let start = events(&log, "data plane started");
    assert_eq!(start.len(), 1, "{log}");
    let e = &start[0];
    assert_eq!((&e["level"], &e["target"]), (&"INFO".into(), &"control::daemon".into()), "{e}");
    let ts = e["timestamp"].as_str().unwrap_or_else(|| panic!("a timestamp: {e}"));
    assert!(ts.len() >= 20 && ts.as_bytes()[4] == b'-' && ts.contains('T'), "RFC 3339: {e}");
    let f = &e["fields"];
    assert_eq!((&f["pid"], &f["workers"], &f["vrs"]), (&pid.into(), &2.into(), &2.into()), "{e}");

    // The memif servers wait, down, for a peer: each port's first status is an event.
    let log = wait_log(&r, "port event", is("waiting for a peer"));
    let down = events(&log, "port down: waiting for a peer");
    assert!(down.iter().any(|e| e["fields"]["port"] == "p0" && e["level"] == "INFO"), "{log}");

    // VR b removed through the API (apply of the file without it): one event naming it.
    let edited = TOPO.replace("DIR", r.dir.to_str().unwrap());
    let edited = edited
        .split("  - name: b")
        .next()
        .unwrap()
        .replace("  - { name: p1, kind: memif, role: server, socket: ", "  # - ");
    std::fs::write(&r.file, edited).unwrap();
    let o = r.ask(&["apply"]);
    assert!(o.status.success(), "apply: {}", text(&o));
    let log = wait_log(&r, "vr removed", is("vr removed"));
    let removed = events(&log, "vr removed");
    assert_eq!(removed.len(), 1, "{log}");
    assert_eq!((&removed[0]["fields"]["vr"], &removed[0]["level"]), (&"b".into(), &"INFO".into()));

    let status = r.stop();
    assert!(status.success(), "{status}: {}", r.log());
    let stopped = events(&r.log(), "data plane stopped");
    assert_eq!(stopped.len(), 1, "{}", r.log());
    assert_eq!(stopped[0]["fields"]["pid"], pid);
}

#[test]
fn run_logs_for_people_by_default() {
    let mut r = Running::start_with(TOPO, "-text", &[]);
    let log = wait_log(&r, "start event", |l| l.contains("data plane started"));
    let line = log.lines().find(|l| l.contains("data plane started")).unwrap();
    // `2026-11-25T14:05:10.123456Z  INFO control::daemon: data plane started: ... pid=...`
    let (ts, rest) = line.split_once(' ').unwrap();
    assert!(ts.len() >= 20 && ts.as_bytes()[4] == b'-' && ts.contains('T'), "{line}");
    assert!(rest.trim_start().starts_with("INFO "), "{line}");
    assert!(line.contains("workers=2") && line.contains("2 worker(s)"), "{line}");
    assert!(!log.lines().any(|l| l.starts_with('{')), "no JSON by default: {log}");

    r.ok(&["reserve", "a", "none"]);
    wait_log(&r, "reservation event", |l| l.contains("reservation set") && l.contains("vr=\"a\""));
    assert!(r.stop().success(), "{}", r.log());
    assert!(r.log().contains("data plane stopped"), "{}", r.log());
}
