//! The records the fleet keeps: what a host publishes in etcd ([`HostRecord`]), what the agent
//! reads of its host's `status` ([`LocalStatus`]), what the host knows of the fleet
//! ([`FleetStatus`], its `fleet.json`), and the agent's timing ([`Timing`]). Pure data and
//! pure functions: tested without etcd or a data plane.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use crate::config::MigrationOffer;
use crate::config::{FleetConfig, Offer, Policy};
use crate::FleetError;

/// The record format's version; readers refuse other versions.
pub const RECORD_VERSION: u32 = 1;
/// The largest value read from etcd or a state file (etcd's own default limit is 1.5 MiB).
pub const MAX_VALUE: usize = 1 << 20;
/// At most this many VRs are listed in a host's record (the rest are counted in `load`).
pub const MAX_LISTED_VRS: usize = 4096;

/// A host's registration, `/routeplex/hosts/NAME`, on its lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    pub v: u32,
    pub name: String,
    pub underlay: IpAddr,
    /// The underlay interface VXLAN ports bind to (`fleet.underlay_dev`); absent in records
    /// of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underlay_dev: Option<String>,
    /// The namespace the underlay is in (`fleet.underlay_netns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underlay_netns: Option<String>,
    /// The underlay's MTU (`fleet.underlay_mtu`; VXLAN ports default to 1500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underlay_mtu: Option<u16>,
    pub offer: Offer,
    pub policy: Policy,
    /// The etcd lease the record lives on.
    pub lease: i64,
    /// When this lease was granted, ms since the epoch on the host's clock.
    pub registered_ms: u64,
    /// When the record was last written, same clock.
    pub updated_ms: u64,
    /// The etcd revision of the last desired topology applied (0: none).
    pub applied_revision: i64,
    /// The VRs' interfaces are down because the lease could not be renewed in time.
    pub fenced: bool,
    pub load: Load,
    pub vrs: Vec<VrLive>,
    /// Present when the host's topology has a `migration:` section (it can send VRs live);
    /// absent in records of older builds and of hosts without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationOffer>,
}

/// How busy a host is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Workers running.
    pub workers: usize,
    /// VRs running.
    pub vrs: usize,
    /// Sum of the VRs' time reservations, in workers (0.5: half of one worker's time).
    pub cpu_reserved: f64,
}

/// One VR as the host's status shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VrLive {
    pub name: String,
    pub worker: usize,
    pub rx_packets: u64,
    pub forwarded: u64,
    /// Interfaces, and how many of them are up.
    pub interfaces: usize,
    pub interfaces_up: usize,
    /// Its time reservation, as a share of one worker (0 without one).
    pub cpu_share: f64,
}

/// The part of the control API's `status` answer the agent uses (typed; the rest is ignored).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LocalStatus {
    #[serde(default)]
    pub workers: Vec<LocalWorker>,
    #[serde(default)]
    pub vrs: Vec<LocalVr>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LocalWorker {
    pub index: usize,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LocalVr {
    pub name: String,
    #[serde(default)]
    pub worker: usize,
    #[serde(default)]
    pub counters: LocalCounters,
    #[serde(default)]
    pub reservation: Option<LocalReservation>,
    #[serde(default)]
    pub interfaces: Vec<LocalInterface>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct LocalCounters {
    #[serde(default)]
    pub rx_packets: u64,
    #[serde(default)]
    pub forwarded: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LocalReservation {
    #[serde(default)]
    pub time_ns: Option<u64>,
    pub period_ns: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LocalInterface {
    pub name: String,
    pub up: bool,
    /// Held down since the host restarted (control's `hold`): what it would fence.
    #[serde(default)]
    pub held: bool,
}

impl LocalStatus {
    /// Reads the `status` answer.
    pub fn from_json(v: serde_json::Value) -> Result<LocalStatus, FleetError> {
        serde_json::from_value(v)
            .map_err(|e| FleetError::Record { what: "status".into(), msg: e.to_string() })
    }

    /// The VRs as a host record lists them, and the host's load.
    pub fn summary(&self) -> (Load, Vec<VrLive>) {
        let vrs: Vec<VrLive> = self
            .vrs
            .iter()
            .map(|v| VrLive {
                name: v.name.clone(),
                worker: v.worker,
                rx_packets: v.counters.rx_packets,
                forwarded: v.counters.forwarded,
                interfaces: v.interfaces.len(),
                interfaces_up: v.interfaces.iter().filter(|i| i.up).count(),
                cpu_share: v.reservation.as_ref().map_or(0.0, share),
            })
            .collect();
        let load = Load {
            workers: self.workers.len(),
            vrs: vrs.len(),
            cpu_reserved: vrs.iter().map(|v| v.cpu_share).sum(),
        };
        (load, vrs.into_iter().take(MAX_LISTED_VRS).collect())
    }

    /// Every interface that is up, as (VR, interface): what fencing takes down.
    pub fn up_interfaces(&self) -> Vec<(String, String)> {
        self.interfaces(|i| i.up)
    }

    /// Every interface held down since the host restarted, as (VR, interface): fenced from
    /// the start.
    pub fn held_interfaces(&self) -> Vec<(String, String)> {
        self.interfaces(|i| i.held)
    }

    /// Every interface that is down (set down, held or fenced), as (VR, interface).
    pub fn down_interfaces(&self) -> Vec<(String, String)> {
        self.interfaces(|i| !i.up)
    }

    fn interfaces(&self, which: impl Fn(&LocalInterface) -> bool) -> Vec<(String, String)> {
        let each = |v: &LocalVr| {
            let picked = v.interfaces.iter().filter(|i| which(i));
            picked.map(|i| (v.name.clone(), i.name.clone())).collect::<Vec<_>>()
        };
        self.vrs.iter().flat_map(each).collect()
    }
}

/// A time reservation's share of a worker; a packet budget has no time share.
fn share(r: &LocalReservation) -> f64 {
    match r.time_ns {
        Some(t) if r.period_ns > 0 => t as f64 / r.period_ns as f64,
        _ => 0.0,
    }
}

impl HostRecord {
    /// The record for `cfg`'s host on `lease`.
    pub fn new(cfg: &FleetConfig, lease: i64, registered_ms: u64) -> HostRecord {
        HostRecord {
            v: RECORD_VERSION,
            name: cfg.host.clone(),
            underlay: cfg.underlay,
            underlay_dev: cfg.underlay_dev.clone(),
            underlay_netns: cfg.underlay_netns.clone(),
            underlay_mtu: cfg.underlay_mtu,
            offer: cfg.offer.clone(),
            policy: cfg.policy,
            lease,
            registered_ms,
            updated_ms: registered_ms,
            applied_revision: 0,
            fenced: false,
            load: Load::default(),
            vrs: Vec::new(),
            migration: cfg.migration_offer(),
        }
    }

    /// Where other hosts migrate VRs to this one, if it takes them.
    pub fn migration_listener(&self) -> Option<SocketAddr> {
        self.migration.as_ref()?.listen
    }

    /// The record as stored: JSON, refused if over [`MAX_VALUE`].
    pub fn encode(&self) -> Result<Vec<u8>, FleetError> {
        let b = serde_json::to_vec(self).map_err(|e| rec_err(&self.name, e))?;
        if b.len() > MAX_VALUE {
            let msg = format!("{} bytes, over the {MAX_VALUE}-byte limit", b.len());
            return Err(FleetError::Record { what: format!("host record {}", self.name), msg });
        }
        Ok(b)
    }

    /// A record read from etcd under `key`: bounded, versioned, and named as its key says.
    pub fn decode(key: &str, b: &[u8]) -> Result<HostRecord, FleetError> {
        let r: HostRecord = decode(key, b)?;
        let bad = |msg: String| FleetError::Record { what: key.to_string(), msg };
        if r.v != RECORD_VERSION {
            return Err(bad(format!("record version {} (this build reads {RECORD_VERSION})", r.v)));
        }
        if crate::keys::name_in(key, crate::keys::HOSTS) != Some(r.name.as_str()) {
            return Err(bad(format!("the record names host {:?}", r.name)));
        }
        Ok(r)
    }
}

fn rec_err(what: &str, e: serde_json::Error) -> FleetError {
    FleetError::Record { what: what.to_string(), msg: e.to_string() }
}

/// JSON of at most [`MAX_VALUE`] bytes into `T`; `what` names it in errors.
pub fn decode<T: DeserializeOwned>(what: &str, b: &[u8]) -> Result<T, FleetError> {
    if b.len() > MAX_VALUE {
        let msg = format!("{} bytes, over the {MAX_VALUE}-byte limit", b.len());
        return Err(FleetError::Record { what: what.to_string(), msg });
    }
    serde_json::from_slice(b).map_err(|e| rec_err(what, e))
}

/// What the host knows of the fleet: the agent writes it to `fleet.json` in the service's
/// state directory on every tick, and `routeplex status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetStatus {
    pub host: String,
    /// The last etcd call answered.
    pub etcd_reachable: bool,
    /// The lease held now, if any.
    pub lease: Option<i64>,
    /// When it was granted (ms since the epoch).
    pub lease_granted_ms: Option<u64>,
    /// The TTL etcd granted it, seconds: etcd raises a TTL below its own minimum (1.5 × its
    /// election timeout, 2 s with etcd's defaults) without an error.
    #[serde(default)]
    pub lease_ttl_s: Option<i64>,
    /// When a renewal last succeeded (when it was sent: etcd renewed no earlier).
    pub renewed_ms: Option<u64>,
    /// Leases granted since the agent started (more than one: it lost one and came back).
    pub leases_granted: u64,
    /// The etcd revision of the last desired topology applied (0: none).
    pub applied_revision: i64,
    /// Interfaces taken down by fencing, as (VR, interface).
    pub fenced: Vec<(String, String)>,
    /// Times the host fenced itself.
    pub fences: u64,
    /// VRs moved away live (drain, rebalance).
    #[serde(default)]
    pub migrations: u64,
    /// VRs whose live move failed or could not start: removed here and restarted there.
    #[serde(default)]
    pub migrations_failed: u64,
    pub last_error: Option<String>,
    /// When this was written.
    pub updated_ms: u64,
}

impl FleetStatus {
    /// Lines for `routeplex status`, with ages from `now_ms`.
    pub fn render(&self, now_ms: u64) -> String {
        let age = |t: Option<u64>| {
            t.map_or("-".into(), |t| format!("{:.1} s", now_ms.saturating_sub(t) as f64 / 1e3))
        };
        let mut s = format!(
            "fleet: host {}, etcd {}, lease {}{} (age {}, renewed {} ago, {} granted), applied revision {}, written {} ago\n",
            self.host,
            if self.etcd_reachable { "reachable" } else { "unreachable" },
            self.lease.map_or("none".into(), |l| format!("{l:x}")),
            self.lease_ttl_s.map_or(String::new(), |t| format!(" TTL {t} s")),
            age(self.lease_granted_ms),
            age(self.renewed_ms),
            self.leases_granted,
            self.applied_revision,
            age(Some(self.updated_ms)),
        );
        if !self.fenced.is_empty() {
            let f: Vec<String> = self.fenced.iter().map(|(v, i)| format!("{v}:{i}")).collect();
            s += &format!("fleet: FENCED, interfaces down: {}\n", f.join(" "));
        }
        if self.migrations + self.migrations_failed > 0 {
            s += &format!(
                "fleet: VRs moved away: {} live, {} restarted there (live migration failed)\n",
                self.migrations, self.migrations_failed
            );
        }
        if let Some(e) = &self.last_error {
            s += &format!("fleet: last error: {e}\n");
        }
        s
    }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The agent's rhythm, from the lease's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How often it renews the lease, publishes and reads its desired state.
    pub tick: Duration,
    /// How long one etcd call may take.
    pub call: Duration,
    /// How long after the last renewal was sent it fences: before etcd can expire the lease,
    /// with a tick and a call to spare.
    pub fence_after: Duration,
}

impl Timing {
    pub fn for_ttl(ttl: Duration) -> Timing {
        let tick = (ttl / 4).min(Duration::from_secs(1));
        let call = (ttl / 8).clamp(Duration::from_millis(50), Duration::from_secs(1));
        Timing { tick, call, fence_after: ttl.saturating_sub(ttl / 4) }
    }

    /// Whether a host whose last successful renewal was sent `since` ago must fence now.
    pub fn must_fence(&self, since: Duration) -> bool {
        since >= self.fence_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> FleetConfig {
        let text = "fleet:\n  etcd: 127.0.0.1:2379\n  host: h1\n  underlay: 10.0.0.1\n  offer: { workers: 2, cpu_share: 0.5, memory_mib: 64 }\n";
        FleetConfig::from_topology(text, "t").unwrap().unwrap()
    }

    const STATUS: &str = r#"{"state":"running","uptime_s":1.5,
        "workers":[{"index":0,"cpu":0},{"index":1,"cpu":1}],
        "vrs":[{"name":"a","worker":1,"counters":{"rx_packets":10,"forwarded":9},
                "reservation":{"time_ns":250000,"period_ns":1000000,"weight":1},
                "interfaces":[{"name":"e0","mtu":1500,"up":true},{"name":"e1","mtu":1500,"up":false}]},
               {"name":"b","worker":0,"counters":{},"reservation":null,
                "interfaces":[{"name":"x","mtu":9000,"up":true}]}]}"#;

    #[test]
    fn status_summary_and_interfaces_to_fence() {
        let s = LocalStatus::from_json(serde_json::from_str(STATUS).unwrap()).unwrap();
        let (load, vrs) = s.summary();
        assert_eq!(load, Load { workers: 2, vrs: 2, cpu_reserved: 0.25 });
        assert_eq!(
            vrs[0],
            VrLive {
                name: "a".into(),
                worker: 1,
                rx_packets: 10,
                forwarded: 9,
                interfaces: 2,
                interfaces_up: 1,
                cpu_share: 0.25
            }
        );
        assert_eq!((vrs[1].rx_packets, vrs[1].cpu_share), (0, 0.0));
        let up = s.up_interfaces();
        assert_eq!(up, [("a".into(), "e0".into()), ("b".into(), "x".into())]);
        let e = LocalStatus::from_json(serde_json::json!({"vrs": [{"worker": 1}]})).unwrap_err();
        assert!(e.to_string().contains("name"), "{e}");
    }

    #[test]
    fn host_record_round_trip_and_checks() {
        let mut r = HostRecord::new(&cfg(), 0x1234, 1000);
        r.vrs.push(VrLive {
            name: "a".into(),
            worker: 0,
            rx_packets: 1,
            forwarded: 1,
            interfaces: 1,
            interfaces_up: 1,
            cpu_share: 0.0,
        });
        let b = r.encode().unwrap();
        assert_eq!(HostRecord::decode("/routeplex/hosts/h1", &b).unwrap(), r);
        // A record of an older build (no underlay_dev, _netns, _mtu) still reads.
        assert!(!String::from_utf8_lossy(&b).contains("underlay_dev"));
        r.underlay_dev = Some("eth1".into());
        r.underlay_mtu = Some(9000);
        let b2 = r.encode().unwrap();
        assert_eq!(HostRecord::decode("/routeplex/hosts/h1", &b2).unwrap(), r);
        r.underlay_dev = None;
        r.underlay_mtu = None;
        let e = HostRecord::decode("/routeplex/hosts/h2", &b).unwrap_err().to_string();
        assert!(e.contains("/routeplex/hosts/h2") && e.contains("\"h1\""), "{e}");
        r.v = 2;
        let e = HostRecord::decode("/routeplex/hosts/h1", &r.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains("record version 2"), "{e}");
        let big = vec![b' '; MAX_VALUE + 1];
        let e = HostRecord::decode("/routeplex/hosts/h1", &big).unwrap_err().to_string();
        assert!(e.contains("over the 1048576-byte limit"), "{e}");
        let e = HostRecord::decode("/routeplex/hosts/h1", b"{").unwrap_err().to_string();
        assert!(e.starts_with("/routeplex/hosts/h1: "), "{e}");
    }

    #[test]
    fn timing_fences_before_the_lease_can_expire() {
        let t = Timing::for_ttl(Duration::from_secs(3));
        assert_eq!(t.tick, Duration::from_millis(750));
        assert_eq!(t.call, Duration::from_millis(375));
        assert_eq!(t.fence_after, Duration::from_millis(2250));
        // Checked at the start of every tick: decided, and its first call made, before the TTL.
        assert!(t.fence_after + t.call < Duration::from_secs(3));
        assert!(!t.must_fence(Duration::from_millis(2249)));
        assert!(t.must_fence(Duration::from_millis(2250)));
        let t = Timing::for_ttl(Duration::from_secs(60));
        assert_eq!((t.tick, t.call), (Duration::from_secs(1), Duration::from_secs(1)));
        let t = Timing::for_ttl(Duration::from_secs(1));
        assert_eq!(t.fence_after, Duration::from_millis(750));
    }

    #[test]
    fn fleet_status_renders_ages() {
        let s = FleetStatus {
            host: "h1".into(),
            etcd_reachable: true,
            lease: Some(0xab),
            lease_granted_ms: Some(1000),
            lease_ttl_s: Some(2),
            renewed_ms: Some(4000),
            leases_granted: 1,
            applied_revision: 7,
            fenced: vec![("a".into(), "e0".into())],
            fences: 1,
            migrations: 2,
            migrations_failed: 1,
            last_error: Some("boom".into()),
            updated_ms: 4500,
        };
        let r = s.render(5000);
        assert!(r.contains("host h1, etcd reachable, lease ab TTL 2 s (age 4.0 s, renewed 1.0 s ago, 1 granted), applied revision 7, written 0.5 s ago"), "{r}");
        assert!(r.contains("FENCED, interfaces down: a:e0"), "{r}");
        assert!(r.contains("last error: boom"), "{r}");
        assert!(r.contains("VRs moved away: 2 live, 1 restarted there (live migration failed)"));
        assert!(!FleetStatus::default().render(0).contains("moved away"));
    }
}
