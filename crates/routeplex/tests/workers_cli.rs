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
        let dir = std::env::temp_dir().join(format!("rpx-workers-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("w.yaml");
        std::fs::write(&file, yaml.replace("DIR", dir.to_str().unwrap())).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .args(["run", file.to_str().unwrap(), "--state-dir", dir.to_str().unwrap()])
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
