//! A real data plane in a fleet: `routeplex run` of a topology with a `fleet:` section starts
//! the agent beside it, against a real etcd on loopback (no root: memif server ports wait for
//! a peer without one). The host registers with its VRs, shows the fleet in `status`,
//! converges to a desired topology written to etcd (the real `apply` removes a VR), fences
//! when etcd goes away (its VR's interfaces go down through the API) and comes back when etcd
//! does, and leaves the fleet (its key goes at once) when it stops.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::etcd;
use etcd::ETCD;

const ETCDCTL: &str = "/usr/bin/etcdctl";
const DEADLINE: Duration = Duration::from_secs(30);

/// Files, one etcd member and one data plane; every process killed and the directory removed
/// on drop, even when the test fails.
struct Lab {
    dir: PathBuf,
    etcd: Option<Child>,
    etcd_args: Vec<String>,
    url: String,
    run: Option<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Lab {
    fn new() -> Lab {
        let dir = std::env::temp_dir().join(format!("rpx-fleet-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lab = Lab { dir, etcd: None, etcd_args: Vec::new(), url: String::new(), run: None };
        // A free port may be taken between picking it and etcd binding it: then etcd exits,
        // and it starts again on others.
        for attempt in 1..=3 {
            let (c, p) = (free_port(), free_port());
            lab.url = format!("http://127.0.0.1:{c}");
            lab.etcd_args = vec![
                "--name=m0".into(),
                format!("--data-dir={}", lab.dir.join("etcd").display()),
                format!("--listen-client-urls={}", lab.url),
                format!("--advertise-client-urls={}", lab.url),
                format!("--listen-peer-urls=http://127.0.0.1:{p}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{p}"),
                format!("--initial-cluster=m0=http://127.0.0.1:{p}"),
            ];
            lab.start_etcd();
            let child = lab.etcd.as_mut().expect("started");
            let me =
                ("etcd".to_string(), child, lab.dir.join("etcd.log"), ([127, 0, 0, 1], c).into());
            match etcd::wait_listening(&mut [me]) {
                Ok(()) => return lab,
                Err(why) => eprintln!("etcd, try {attempt} of 3: {why}"),
            }
            lab.kill_etcd();
            let _ = std::fs::remove_dir_all(lab.dir.join("etcd"));
        }
        panic!("etcd did not listen after 3 tries (see above)");
    }

    fn start_etcd(&mut self) {
        let log = std::fs::File::create(self.dir.join("etcd.log")).unwrap();
        let c = Command::new(ETCD)
            .args(&self.etcd_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.etcd = Some(c);
    }

    fn kill_etcd(&mut self) {
        if let Some(mut c) = self.etcd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("h1.yaml")
    }

    fn start_run(&mut self, yaml: &str) {
        std::fs::write(self.file(), yaml).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .args(["run", self.file().to_str().unwrap(), "--state-dir", self.dir.to_str().unwrap()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        self.run = Some(child);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// `routeplex ARGS...`.
    fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_routeplex")).args(args).output().unwrap()
    }

    /// `routeplex fleet status --json`, when etcd answers.
    fn fleet(&self) -> Option<Value> {
        let o = self.cli(&["fleet", "status", "--etcd", &self.url, "--json"]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    /// `routeplex status FILE --json --state-dir DIR`, when the data plane answers.
    fn status(&self) -> Option<Value> {
        let f = self.file();
        let d = self.dir.to_str().unwrap();
        let o = self.cli(&["status", f.to_str().unwrap(), "--json", "--state-dir", d]);
        o.status.success().then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    /// VR `vr`'s interfaces' `up`, from the data plane's status.
    fn ups(&self, vr: &str) -> Option<Vec<bool>> {
        let s = self.status()?;
        let v = s["vrs"].as_array()?.iter().find(|v| v["name"] == vr)?.clone();
        Some(v["interfaces"].as_array()?.iter().map(|i| i["up"] == true).collect())
    }

    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                t0.elapsed() < DEADLINE,
                "{what}: not within {DEADLINE:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.run.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.kill_etcd();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn topology(dir: &Path, url: &str, with_b: bool) -> String {
    let d = dir.display();
    let b = if with_b {
        "  - name: b\n    interfaces: [{ name: e0, port: p1, mac: 02:00:00:00:02:00, addresses: [10.0.1.1/24] }]\n"
    } else {
        ""
    };
    format!(
        "workers: 1
fleet:
  etcd: {url}
  host: h1
  underlay: 192.0.2.1
  offer: {{ workers: 1, cpu_share: 0.5, memory_mib: 512 }}
  lease_ttl_s: 2
ports:
  - {{ name: p0, kind: memif, role: server, socket: {d}/p0.sock }}
  - {{ name: p1, kind: memif, role: server, socket: {d}/p1.sock }}
vrs:
  - name: a
    interfaces: [{{ name: e0, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }}]
{b}"
    )
}

fn host(f: &Value) -> Option<&Value> {
    f["hosts"].as_array()?.iter().find(|h| h["record"]["name"] == "h1")
}

fn vr_names(h: &Value) -> Vec<String> {
    let vrs = h["record"]["vrs"].as_array().unwrap();
    vrs.iter().map(|v| v["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_host_joins_converges_fences_and_leaves() {
    for tool in [ETCD, ETCDCTL] {
        if !Path::new(tool).exists() {
            eprintln!("skipped: {tool} is not installed (scripts/setup installs etcd-server and etcd-client)");
            return;
        }
    }
    let mut lab = Lab::new();
    lab.wait("etcd serving", || lab.fleet());
    let yaml = topology(&lab.dir, &lab.url, true);
    lab.start_run(&yaml);

    // Registered, with its VRs as the data plane reports them.
    let f = lab.wait("h1 registered with a and b", || {
        lab.fleet().filter(|f| host(f).is_some_and(|h| vr_names(h) == ["a", "b"]))
    });
    let h = host(&f).unwrap();
    assert_eq!(h["record"]["underlay"], "192.0.2.1", "{h}");
    assert_eq!(h["record"]["offer"]["memory_mib"], 512, "{h}");
    assert_eq!(h["record"]["load"]["workers"], 1, "{h}");
    let text = String::from_utf8(lab.cli(&["fleet", "status", "--etcd", &lab.url]).stdout).unwrap();
    assert!(text.contains("h1") && text.contains("192.0.2.1"), "{text}");

    // `status` shows what the host knows of the fleet.
    let s = lab
        .wait("status shows the fleet", || lab.status().filter(|s| s["fleet"]["lease"].is_i64()));
    assert_eq!(s["fleet"]["host"], "h1", "{s}");
    assert_eq!(s["fleet"]["etcd_reachable"], true, "{s}");
    assert_eq!(s["fleet"]["lease"], h["record"]["lease"], "{s}");

    // A desired topology without b: the real apply removes it, and the revision is recorded.
    let desired = topology(&lab.dir, &lab.url, false);
    let o = Command::new(ETCDCTL)
        .args(["--endpoints", &lab.url, "put", "/routeplex/desired/h1", &desired])
        .env("ETCDCTL_API", "3")
        .output()
        .unwrap();
    assert!(o.status.success(), "etcdctl put: {}", String::from_utf8_lossy(&o.stderr));
    let f = lab.wait("desired applied", || {
        lab.fleet().filter(|f| {
            host(f).is_some_and(|h| {
                vr_names(h) == ["a"] && h["record"]["applied_revision"].as_i64() > Some(0)
            })
        })
    });
    let rev = f["desired"][0]["revision"].as_i64().unwrap();
    assert_eq!(host(&f).unwrap()["record"]["applied_revision"], rev, "{f}");
    let s = lab.status().unwrap();
    let names: Vec<&str> =
        s["vrs"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a"], "the data plane itself no longer runs b");
    assert_eq!(lab.ups("a"), Some(vec![true]));

    // etcd gone: the host cannot renew, so it takes a's interface down before the TTL ends.
    lab.kill_etcd();
    lab.wait("a fenced", || lab.ups("a").filter(|u| u == &[false]));
    let s = lab.status().unwrap();
    assert_eq!(s["fleet"]["fences"], 1, "{s}");
    assert_eq!(s["fleet"]["fenced"], serde_json::json!([["a", "e0"]]), "{s}");
    assert!(lab.log().contains("fenced"), "{}", lab.log());

    // etcd back: the desired topology still places a here, so it comes back up.
    lab.start_etcd();
    lab.wait("a unfenced", || lab.ups("a").filter(|u| u == &[true]));
    lab.wait("h1 registered again", || {
        lab.fleet().filter(|f| host(f).is_some_and(|h| h["record"]["fenced"] == false))
    });

    // Stopping the data plane stops the agent, which revokes its lease: the key goes at once.
    let mut run = lab.run.take().unwrap();
    let _ = Command::new("kill").args(["-TERM", &run.id().to_string()]).status();
    let status = run.wait().unwrap();
    assert!(status.success(), "run stops cleanly: {status}; {}", lab.log());
    let f = lab.fleet().expect("etcd answers");
    assert!(host(&f).is_none(), "h1 left the fleet: {f}");
    assert!(lab.log().contains("lease revoked"), "{}", lab.log());
}
