//! A change is acknowledged only once it is in the journal (issue 27, reliability leftovers):
//! the daemon (`control::daemon::run`, in process, on memif ports: no root) answers a
//! journaled command after the journal's append, and a journal that cannot take the append
//! turns the answer into an error instead of `ok`.
//!
//! The append is made to fail for real with a file size limit (RLIMIT_FSIZE, SIGXFSZ
//! ignored: `write` then fails with EFBIG, as on a full disk), which is per process: this
//! test has its binary to itself, and lifts the limit as soon as each request is answered.
//! - The limit just above the journal's size: the append fails part way; the whole state is
//!   written afresh (smaller than the journal of many changes), so the client gets `ok`.
//! - The limit below it: the rewrite fails too; the client gets `not_durable`, naming the
//!   journal; the change runs. The next change, the limit lifted, rewrites the journal first.
//! - A restart on the same run directory comes back with every change the client was told
//!   about, the one answered `not_durable` included (the next change's rewrite saved it).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use control::runtime::Options;
use control::Topology;
use serde_json::{json, Value};

fn text(tag: &str) -> String {
    format!(
        "workers: 1
ports:
  - {{ name: p0, kind: memif, socket: \"@rpxjf{tag}p0\" }}
vrs:
  - name: r
    interfaces:
      - {{ name: a, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }}
"
    )
}

/// A directory of its own, removed on drop (also when the test fails).
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file size limit of this process, set to `bytes` (`None`: none) for as long as it lives.
struct SizeLimit(libc::rlimit);

impl SizeLimit {
    fn set(bytes: u64) -> SizeLimit {
        let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit/setrlimit with valid pointers to rlimit structs on this stack;
        // signal() with a valid signal number and SIG_IGN.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut old), 0);
            let new = libc::rlimit { rlim_cur: bytes, rlim_max: old.rlim_max };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &new), 0);
        }
        SizeLimit(old)
    }
}

impl Drop for SizeLimit {
    fn drop(&mut self) {
        // SAFETY: setrlimit with a pointer to the rlimit struct getrlimit filled in.
        unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &self.0) };
    }
}

/// The data plane of `file` serving `dir` on a thread of its own.
fn start(file: &Path, dir: &Path) -> std::thread::JoinHandle<Result<(), control::ControlError>> {
    let (file, dir) = (file.to_path_buf(), dir.to_path_buf());
    let topo = Topology::load(&file).unwrap();
    std::thread::spawn(move || {
        static NEVER: AtomicBool = AtomicBool::new(false);
        control::daemon::run(
            &file,
            topo,
            Some(&dir),
            32,
            Options::new(1),
            control::daemon::OnRestart::Forward,
            &NEVER,
        )
    })
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    id: u64,
}

impl Client {
    fn connect(dir: &Path) -> Client {
        let t0 = Instant::now();
        loop {
            if let Ok(s) = UnixStream::connect(dir.join("control.sock")) {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut c = Client { r: BufReader::new(s.try_clone().unwrap()), w: s, id: 0 };
                // The socket answers once the journal is replayed.
                if c.call(json!({ "cmd": "status" })).get("ok").is_some() {
                    return c;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "the data plane did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn call(&mut self, mut req: Value) -> Value {
        self.id += 1;
        req["v"] = json!(1);
        req["id"] = json!(self.id);
        let mut line = serde_json::to_vec(&req).unwrap();
        line.push(b'\n');
        self.w.write_all(&line).unwrap();
        let mut reply = String::new();
        self.r.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{reply:?}: {e}"))
    }

    fn add(&mut self, prefix: &str) -> Value {
        let routes = json!([{ "prefix": prefix, "via": "10.0.0.2" }]);
        self.call(json!({ "cmd": "route_add", "args": { "vr": "r", "routes": routes } }))
    }

    fn ok(&mut self, req: Value) -> Value {
        let v = self.call(req.clone());
        v.get("ok").cloned().unwrap_or_else(|| panic!("{req}: {v}"))
    }

    /// VR r's API routes, by prefix.
    fn routes(&mut self) -> Vec<String> {
        let v = self.ok(json!({ "cmd": "route_list", "args": { "vr": "r", "source": "api" } }));
        let mut p: Vec<String> = v["routes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["prefix"].as_str().unwrap().to_string())
            .collect();
        p.sort();
        p
    }
}

#[test]
fn a_change_the_journal_cannot_take_is_answered_with_an_error_not_ok() {
    let tag = std::process::id() % 100_000;
    let root = Dir(std::env::temp_dir().join(format!("rpx-jfull-{tag}")));
    let _ = std::fs::remove_dir_all(&root.0);
    let dir = root.0.join("run");
    std::fs::create_dir_all(&dir).unwrap();
    let file = root.0.join("jf.yaml");
    std::fs::write(&file, text(&tag.to_string())).unwrap();
    let journal = dir.join(control::journal::FILE);
    let len = || std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);

    let daemon = start(&file, &dir);
    let mut c = Client::connect(&dir);
    // A journal of many changes, whose state is one route.
    for k in 0..40 {
        let p = format!("198.18.{k}.0/24");
        assert!(c.add(&p).get("ok").is_some());
        let del = json!({ "cmd": "route_delete", "args": { "vr": "r", "prefixes": [p] } });
        c.ok(del);
    }
    assert!(c.add("203.0.113.0/24").get("ok").is_some());
    let before = len();
    assert!(before > 4000, "journal of {before} bytes");

    // Room for a few bytes more: the append fails part way, the state written afresh fits.
    let reply = {
        let _l = SizeLimit::set(before + 5);
        c.add("203.0.114.0/24")
    };
    assert!(reply.get("ok").is_some(), "rewritten after a failed append: {reply}");
    let after = len();
    assert!(after < before, "the journal was rewritten: {before} -> {after} bytes");

    // No room at all: the change is made, but the client is told it is not durable.
    let reply = {
        let _l = SizeLimit::set(1);
        c.add("203.0.115.0/24")
    };
    assert_eq!(reply["err"]["code"], "not_durable", "{reply}");
    let msg = reply["err"]["msg"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains(&journal.display().to_string()), "{msg}");
    assert!(msg.contains("route_add was made and runs"), "{msg}");
    assert_eq!(len(), after, "the journal as it was");
    assert_eq!(c.routes(), ["203.0.113.0/24", "203.0.114.0/24", "203.0.115.0/24"]);

    // The limit gone, the next change rewrites the journal first, holding both.
    assert!(c.add("203.0.116.0/24").get("ok").is_some());
    c.ok(json!({ "cmd": "stop" }));
    daemon.join().unwrap().unwrap();

    // Started again on the run directory: every change it was told about.
    let daemon = start(&file, &dir);
    let mut c = Client::connect(&dir);
    let want = ["203.0.113.0/24", "203.0.114.0/24", "203.0.115.0/24", "203.0.116.0/24"];
    assert_eq!(c.routes(), want);
    c.ok(json!({ "cmd": "stop" }));
    daemon.join().unwrap().unwrap();
}
