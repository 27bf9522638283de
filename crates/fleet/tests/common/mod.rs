//! Shared by the fleet's etcd tests: a real 3-member etcd cluster on loopback (`etcd/mod.rs`), a
//! recording double of a host's control API, and small helpers.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleet::local::Local;
use fleet::record::LocalStatus;
use fleet::{FleetConfig, FleetError};

#[path = "../etcd/mod.rs"]
mod etcd;
pub use etcd::{Cluster, ETCD};

/// The cluster on loopback.
pub fn cluster() -> Cluster {
    Cluster::start(std::net::Ipv4Addr::LOCALHOST.into(), "fleet")
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
