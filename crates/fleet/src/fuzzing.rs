//! What the fleet reads from a topology file and from etcd, on arbitrary bytes: one entry point
//! per cargo-fuzz target in the workspace's `fuzz/` directory, which routeplex's `tests/it/fuzz_corpus.rs` also
//! runs on every committed corpus file. Not part of the API: hidden from the docs, free to
//! change.

use crate::config::FleetConfig;
use crate::record::{self, FleetStatus, HostRecord, LocalStatus};

/// The targets, by the names of their directories under `fuzz/corpus`.
pub const TARGETS: &[&str] = &["fleet_config", "fleet_record"];

/// Runs target `name` on `data`; false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "fleet_config" => fleet_config(data),
        "fleet_record" => fleet_record(data),
        _ => return false,
    }
    true
}

/// The `fleet:` section of a topology's text.
pub fn fleet_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(Some(cfg)) = FleetConfig::from_topology(text, "fuzz.yaml") {
        // What a valid section gives is a valid host record.
        let r = HostRecord::new(&cfg, 1, 2);
        let key = crate::keys::host(&cfg.host);
        let b = r.encode().expect("a new host record encodes");
        assert_eq!(HostRecord::decode(&key, &b).expect("and decodes"), r);
    }
}

/// A value read from etcd as a host record (under host `h1`'s key; one that decodes encodes to
/// bytes that decode to it), as the control socket's `status` answer the agent reads, and as
/// the fleet state file `routeplex status` reads.
pub fn fleet_record(data: &[u8]) {
    let key = crate::keys::host("h1");
    if let Ok(r) = HostRecord::decode(&key, data) {
        if let Ok(b) = r.encode() {
            assert_eq!(HostRecord::decode(&key, &b).expect("an encoded record decodes"), r);
        }
    }
    if let Ok(v) = record::decode::<serde_json::Value>("status", data) {
        if let Ok(s) = LocalStatus::from_json(v) {
            std::hint::black_box((s.summary(), s.up_interfaces()));
        }
    }
    if let Ok(s) = record::decode::<FleetStatus>("fleet.json", data) {
        std::hint::black_box(s.render(0));
    }
}

/// Valid inputs of target `name`: its seed corpus.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let section = "fleet:\n  etcd: [http://10.0.0.1:2379, 10.0.0.2:2379]\n  host: h1\n  \
                   underlay: 192.0.2.1\n  offer: { workers: 2, cpu_share: 0.8, memory_mib: 4096 }\n  \
                   lease_ttl_s: 3\n  policy: keep\nvrs: []\n";
    match name {
        "fleet_config" => vec![section.as_bytes().to_vec()],
        "fleet_record" => {
            let cfg = FleetConfig::from_topology(section, "seed").expect("seed").expect("fleet");
            let mut r = HostRecord::new(&cfg, 7, 1000);
            let status = serde_json::json!({
                "workers": [{"index": 0}],
                "vrs": [{"name": "a", "worker": 0, "counters": {"rx_packets": 5, "forwarded": 4},
                         "reservation": {"time_ns": 250000, "period_ns": 1000000},
                         "interfaces": [{"name": "e0", "up": true}]}]
            });
            let (load, vrs) = LocalStatus::from_json(status.clone()).expect("seed").summary();
            (r.load, r.vrs) = (load, vrs);
            let fs = FleetStatus { host: "h1".into(), ..Default::default() };
            vec![
                r.encode().expect("seed"),
                serde_json::to_vec(&status).expect("seed"),
                serde_json::to_vec(&fs).expect("seed"),
            ]
        }
        _ => Vec::new(),
    }
}
