//! Shared by the fleet's etcd tests: a real 3-member etcd cluster on loopback, a recording
//! double of a host's control API, and small helpers.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleet::local::Local;
use fleet::record::LocalStatus;
use fleet::{FleetConfig, FleetError};

pub const ETCD: &str = "/usr/bin/etcd";

/// A 3-member etcd cluster on free loopback ports; every process killed and its data removed
/// on drop, even when the test fails.
pub struct Cluster {
    pub dir: PathBuf,
    args: Vec<Vec<String>>,
    members: Vec<Option<Child>>,
    pub clients: Vec<String>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Cluster {
    pub fn start() -> Cluster {
        let dir = std::env::temp_dir().join(format!("rpx-fleet-etcd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let initial: Vec<String> =
            (0..3).map(|i| format!("m{i}=http://127.0.0.1:{}", ports[i].1)).collect();
        let mut c = Cluster {
            dir: dir.clone(),
            args: Vec::new(),
            members: Vec::new(),
            clients: Vec::new(),
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let cu = format!("http://127.0.0.1:{client}");
            let pu = format!("http://127.0.0.1:{peer}");
            let args = vec![
                format!("--name=m{i}"),
                format!("--data-dir={}", dir.join(format!("m{i}")).display()),
                format!("--listen-client-urls={cu}"),
                format!("--advertise-client-urls={cu}"),
                format!("--listen-peer-urls={pu}"),
                format!("--initial-advertise-peer-urls={pu}"),
                format!("--initial-cluster={}", initial.join(",")),
                "--initial-cluster-state=new".into(),
                format!("--initial-cluster-token=rpx-{}", std::process::id()),
            ];
            c.args.push(args);
            c.clients.push(cu);
            c.members.push(None);
        }
        for i in 0..3 {
            c.run(i);
        }
        c
    }

    /// Starts member `i` (again: its data directory makes it rejoin).
    pub fn run(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.join(format!("m{i}.log"))).unwrap();
        let child = Command::new(ETCD)
            .args(&self.args[i])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.members[i] = Some(child);
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            for i in 0..3 {
                let log = std::fs::read_to_string(self.dir.join(format!("m{i}.log")));
                let log = log.unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                eprintln!("etcd m{i} log tail: {tail:?}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A VR's name and its interfaces (name, up).
pub type Vr = (String, Vec<(String, bool)>);

/// A host's control API that records what it is asked and answers from a list of VRs.
pub struct Recorder {
    pub vrs: Mutex<Vec<Vr>>,
    pub applied: Mutex<Vec<(String, String)>>,
}

impl Recorder {
    pub fn new(vrs: &[(&str, &[&str])]) -> Arc<Recorder> {
        let vrs = vrs
            .iter()
            .map(|(v, is)| (v.to_string(), is.iter().map(|i| (i.to_string(), true)).collect()))
            .collect();
        Arc::new(Recorder { vrs: Mutex::new(vrs), applied: Mutex::new(Vec::new()) })
    }

    pub fn up(&self) -> Vec<(String, String, bool)> {
        let vrs = self.vrs.lock().unwrap();
        vrs.iter()
            .flat_map(|(v, is)| is.iter().map(|(i, up)| (v.clone(), i.clone(), *up)))
            .collect()
    }
}

impl Local for Recorder {
    fn status(&self) -> Result<LocalStatus, FleetError> {
        let vrs: Vec<serde_json::Value> = self
            .vrs
            .lock()
            .unwrap()
            .iter()
            .map(|(v, is)| {
                let ifs: Vec<_> =
                    is.iter().map(|(n, up)| serde_json::json!({"name": n, "up": up})).collect();
                serde_json::json!({"name": v, "worker": 0, "counters": {"rx_packets": 5}, "interfaces": ifs})
            })
            .collect();
        LocalStatus::from_json(serde_json::json!({"workers": [{"index": 0}], "vrs": vrs}))
    }

    fn apply(&self, topology: &str, source: &str) -> Result<(), FleetError> {
        self.applied.lock().unwrap().push((topology.into(), source.into()));
        Ok(())
    }

    fn set_up(&self, vr: &str, interface: &str, up: bool) -> Result<(), FleetError> {
        let mut vrs = self.vrs.lock().unwrap();
        let v = vrs.iter_mut().find(|(n, _)| n == vr).expect("a VR the status listed");
        v.1.iter_mut().find(|(n, _)| n == interface).expect("its interface").1 = up;
        Ok(())
    }
}

pub fn config(host: &str, etcd: &[String], ttl_s: u64) -> FleetConfig {
    let text = format!(
        "fleet:\n  etcd: [{}]\n  host: {host}\n  underlay: 192.0.2.{}\n  offer: {{ workers: 1, cpu_share: 0.5, memory_mib: 256 }}\n  lease_ttl_s: {ttl_s}\n",
        etcd.join(", "),
        host.len()
    );
    FleetConfig::from_topology(&text, "test").unwrap().unwrap()
}

/// Polls `f` until it returns `Some`, for at most `limit`.
pub fn wait<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn hosts(etcd: &[String]) -> Option<Vec<fleet::view::HostView>> {
    fleet::view::read(etcd, Duration::from_millis(500)).ok().map(|v| v.hosts)
}

pub fn names(h: &[fleet::view::HostView]) -> Vec<&str> {
    h.iter().map(|h| h.record.name.as_str()).collect()
}

/// Writes `value` under `key`; returns the revision it got.
pub fn put(etcd: &[String], key: &str, value: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect(etcd, None).await.unwrap();
        let r = c.put(key, value, None).await.unwrap();
        r.header().unwrap().revision()
    })
}
