//! The fleet as etcd holds it, for `routeplex fleet status`: hosts with their lease and
//! capacity, VRs per host, desired topologies with their revisions.

use std::fmt::Write;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use serde::Serialize;

use crate::call::{get, timed};
use crate::keys;
use crate::record::{HostRecord, MAX_VALUE};
use crate::FleetError;

/// At most this many keys are read under each prefix.
pub const MAX_KEYS: i64 = 10_000;

/// The fleet.
#[derive(Clone, Debug, Serialize)]
pub struct FleetView {
    /// The etcd revision read at.
    pub revision: i64,
    pub hosts: Vec<HostView>,
    pub desired: Vec<DesiredView>,
    /// Cordoned hosts (`fleet drain`).
    pub cordoned: Vec<String>,
    /// The leading controller, if one leads.
    pub leader: Option<String>,
    /// The controller's last placement: VR -> host, with why; VNIs of stretched segments.
    pub placement: Option<crate::placement::Placement>,
    /// Keys under the fleet's prefixes that could not be read, with why.
    pub unreadable: Vec<String>,
}

/// A registered host.
#[derive(Clone, Debug, Serialize)]
pub struct HostView {
    pub record: HostRecord,
    /// Seconds left on its lease (etcd's view).
    pub lease_ttl_left_s: i64,
}

/// A host's desired topology.
#[derive(Clone, Debug, Serialize)]
pub struct DesiredView {
    pub host: String,
    pub revision: i64,
    pub bytes: usize,
}

/// Reads the fleet from the etcd cluster at `endpoints`, each call within `timeout`.
pub fn read(endpoints: &[String], timeout: Duration) -> Result<FleetView, FleetError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| FleetError::Io { path: "tokio runtime".into(), source: e })?;
    rt.block_on(async {
        match tokio::time::timeout(timeout * 4, read_async(endpoints, timeout)).await {
            Ok(r) => r,
            Err(_) => Err(FleetError::Timeout {
                what: "fleet status",
                ms: timeout.as_millis() as u64 * 4,
            }),
        }
    })
}

async fn read_async(endpoints: &[String], timeout: Duration) -> Result<FleetView, FleetError> {
    let opts = ConnectOptions::new().with_connect_timeout(timeout).with_timeout(timeout);
    let c = timed(timeout, "connect", || Client::connect(endpoints, Some(opts.clone()))).await?;
    let list = || Some(GetOptions::new().with_prefix().with_limit(MAX_KEYS));
    let hosts = timed(timeout, "read hosts", || get(&c, keys::HOSTS, list())).await?;
    let revision = hosts.header().map_or(0, |h| h.revision());
    let mut view = FleetView {
        revision,
        hosts: Vec::new(),
        desired: Vec::new(),
        cordoned: Vec::new(),
        leader: None,
        placement: None,
        unreadable: Vec::new(),
    };
    for kv in hosts.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        match HostRecord::decode(&key, kv.value()) {
            Ok(record) => {
                let id = kv.lease();
                let ask = || {
                    let mut c = c.clone();
                    async move { c.lease_time_to_live(id, None).await }
                };
                let ttl = timed(timeout, "lease ttl", ask).await.map_or(-1, |r| r.ttl());
                view.hosts.push(HostView { record, lease_ttl_left_s: ttl });
            }
            Err(e) => view.unreadable.push(e.to_string()),
        }
    }
    let desired = timed(timeout, "read desired", || get(&c, keys::DESIRED, list())).await?;
    for kv in desired.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        match keys::name_in(&key, keys::DESIRED) {
            Some(h) if kv.value().len() <= MAX_VALUE => view.desired.push(DesiredView {
                host: h.to_string(),
                revision: kv.mod_revision(),
                bytes: kv.value().len(),
            }),
            _ => view.unreadable.push(format!("{key}: not a host's desired topology")),
        }
    }
    let cordons = timed(timeout, "read cordons", || get(&c, keys::CORDON, list())).await?;
    for kv in cordons.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        match keys::name_in(&key, keys::CORDON) {
            Some(h) => view.cordoned.push(h.to_string()),
            None => view.unreadable.push(format!("{key}: not a cordon")),
        }
    }
    let leader = timed(timeout, "read leader", || get(&c, keys::LEADER, None)).await?;
    if let Some(kv) = leader.kvs().first() {
        view.leader = Some(String::from_utf8_lossy(kv.value()).chars().take(64).collect());
    }
    let placement = timed(timeout, "read placement", || get(&c, keys::PLACEMENT, None)).await?;
    if let Some(kv) = placement.kvs().first() {
        match crate::record::decode::<crate::placement::Placement>(keys::PLACEMENT, kv.value()) {
            Ok(p) => view.placement = Some(p),
            Err(e) => view.unreadable.push(e.to_string()),
        }
    }
    view.hosts.sort_by(|a, b| a.record.name.cmp(&b.record.name));
    Ok(view)
}

/// The fleet as tables, with lease ages from `now_ms`.
pub fn render(v: &FleetView, now_ms: u64) -> String {
    let mut out = format!("fleet at etcd revision {}: {} host(s)\n\n", v.revision, v.hosts.len());
    let mut rows = vec![[
        "host",
        "underlay",
        "lease age",
        "ttl left",
        "workers",
        "cpu reserved",
        "memory",
        "vrs",
        "applied",
        "state",
    ]
    .map(String::from)
    .to_vec()];
    for h in &v.hosts {
        let r = &h.record;
        let desired = v.desired.iter().find(|d| d.host == r.name).map(|d| d.revision);
        rows.push(vec![
            r.name.clone(),
            r.underlay.to_string(),
            format!("{:.1} s", now_ms.saturating_sub(r.registered_ms) as f64 / 1e3),
            format!("{} s", h.lease_ttl_left_s),
            format!("{}/{}", r.load.workers, r.offer.workers),
            format!("{:.2}/{:.2}", r.load.cpu_reserved, r.offer.cpu_share * r.offer.workers as f64),
            format!("{} MiB", r.offer.memory_mib),
            r.load.vrs.to_string(),
            match desired {
                Some(d) => format!("{}/{d}", r.applied_revision),
                None => format!("{}/-", r.applied_revision),
            },
            match (r.fenced, v.cordoned.contains(&r.name)) {
                (true, _) => "FENCED".into(),
                (false, true) => "cordoned".into(),
                (false, false) => "ok".into(),
            },
        ]);
    }
    control::topology::text_table(&mut out, "", &rows);
    let mut rows = vec![["vr", "host", "worker", "interfaces up", "received", "forwarded"]
        .map(String::from)
        .to_vec()];
    for h in &v.hosts {
        for vr in &h.record.vrs {
            rows.push(vec![
                vr.name.clone(),
                h.record.name.clone(),
                vr.worker.to_string(),
                format!("{}/{}", vr.interfaces_up, vr.interfaces),
                vr.rx_packets.to_string(),
                vr.forwarded.to_string(),
            ]);
        }
    }
    out.push('\n');
    control::topology::text_table(&mut out, "", &rows);
    let gone: Vec<&String> =
        v.cordoned.iter().filter(|c| !v.hosts.iter().any(|h| &h.record.name == *c)).collect();
    if !gone.is_empty() {
        let names: Vec<&str> = gone.iter().map(|s| s.as_str()).collect();
        let _ = writeln!(out, "\ncordoned, not registered: {}", names.join(", "));
    }
    if let Some(p) = &v.placement {
        let leader = v.leader.as_deref().unwrap_or("none now");
        let _ = writeln!(
            out,
            "\nplacement of fleet revision {} by {} (leader: {leader}):",
            p.revision, p.leader
        );
        out += &crate::controller::render(p);
    }
    for u in &v.unreadable {
        let _ = writeln!(out, "unreadable: {u}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Load, VrLive};

    #[test]
    fn tables() {
        let text = "fleet:\n  etcd: 127.0.0.1:2379\n  host: h1\n  underlay: 10.0.0.1\n  offer: { workers: 2, cpu_share: 0.5, memory_mib: 64 }\n";
        let cfg = crate::FleetConfig::from_topology(text, "t").unwrap().unwrap();
        let mut r = HostRecord::new(&cfg, 1, 1000);
        r.load = Load { workers: 2, vrs: 1, cpu_reserved: 0.25 };
        r.applied_revision = 5;
        r.vrs.push(VrLive {
            name: "a".into(),
            worker: 1,
            rx_packets: 10,
            forwarded: 9,
            interfaces: 2,
            interfaces_up: 1,
            cpu_share: 0.25,
        });
        let v = FleetView {
            revision: 9,
            hosts: vec![HostView { record: r, lease_ttl_left_s: 2 }],
            desired: vec![DesiredView { host: "h1".into(), revision: 5, bytes: 10 }],
            cordoned: vec![],
            leader: None,
            placement: None,
            unreadable: vec!["/routeplex/hosts/x: bad".into()],
        };
        let s = render(&v, 3500);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "fleet at etcd revision 9: 1 host(s)");
        assert!(lines[2].starts_with("host  underlay  lease age  ttl left  workers"), "{s}");
        let row: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "h1",
                "10.0.0.1",
                "2.5",
                "s",
                "2",
                "s",
                "2/2",
                "0.25/1.00",
                "64",
                "MiB",
                "1",
                "5/5",
                "ok"
            ]
        );
        let vr: Vec<&str> = lines[6].split_whitespace().collect();
        assert_eq!(vr, ["a", "h1", "1", "1/2", "10", "9"]);
        assert!(s.ends_with("unreadable: /routeplex/hosts/x: bad\n"), "{s}");
    }
}
