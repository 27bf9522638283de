//! The `fleet:` section of a host's topology file.
//!
//! ```yaml
//! fleet:
//!   etcd: [http://10.0.0.1:2379, http://10.0.0.2:2379, http://10.0.0.3:2379]
//!   host: h1                  # this host's name in the fleet
//!   underlay: 192.0.2.1       # the address VXLAN and migration use
//!   offer: { workers: 2, cpu_share: 0.8, memory_mib: 4096 }
//!   lease_ttl_s: 3            # default 3
//!   policy: fence             # fence (default) | keep
//! ```
//!
//! The section lives in the topology so one file describes one host (`routeplex up FILE`
//! needs nothing more); control's parser only knows the key exists, and this module validates
//! it, so control never learns the fleet's types.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use yamlpath::{Located, Value};

use crate::FleetError;

const FLEET_KEYS: &[&str] = &[
    "etcd",
    "host",
    "underlay",
    "underlay_dev",
    "underlay_netns",
    "underlay_mtu",
    "offer",
    "lease_ttl_s",
    "policy",
    "controller",
];
const OFFER_KEYS: &[&str] = &["workers", "cpu_share", "memory_mib"];
/// At most this many etcd endpoints (a cluster has 3, 5 or 7 members).
pub const MAX_ENDPOINTS: usize = 16;
/// The longest endpoint URL.
const MAX_ENDPOINT_LEN: usize = 256;
pub use crate::keys::MAX_HOST_NAME;
/// Default lease TTL: a dead host is noticed within a few seconds.
pub const DEFAULT_TTL_S: u64 = 3;

/// What the host's lease is kept for and what happens when it cannot be renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Take the VRs' interfaces down before the lease can expire: a partitioned host never
    /// answers for a VR that may now run elsewhere (it also goes quiet when etcd loses quorum).
    Fence,
    /// Keep forwarding: an etcd outage costs nothing, but a partitioned host may answer beside
    /// the VR's new home.
    Keep,
}

/// What a host offers the fleet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    /// Workers (CPUs) its data plane runs.
    pub workers: u32,
    /// The share of each worker reservations may take, in (0, 1].
    pub cpu_share: f64,
    /// Memory for VRs, MiB.
    pub memory_mib: u64,
}

/// What a host offers for live migration (its `migration:` section, secret left out).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrationOffer {
    /// Where it takes VRs (`migration.listen`, an unspecified address taken as the
    /// underlay's); `None`: it only sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,
}

/// The validated `fleet:` section.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetConfig {
    /// etcd client URLs (`http://HOST:PORT`).
    pub etcd: Vec<String>,
    /// This host's name in the fleet.
    pub host: String,
    /// The address VXLAN and migration reach this host at.
    pub underlay: IpAddr,
    /// The underlay interface the fleet's VXLAN ports bind to, if any.
    pub underlay_dev: Option<String>,
    /// The namespace the underlay is in (`/run/netns/NAME`), if not routeplex's own.
    pub underlay_netns: Option<String>,
    /// The underlay's MTU, if not 1500.
    pub underlay_mtu: Option<u16>,
    pub offer: Offer,
    /// The lease's time to live.
    pub lease_ttl: Duration,
    pub policy: Policy,
    /// This host also runs a fleet controller (one leads at a time).
    pub controller: bool,
    /// The host's own host-wide settings (`workers`, `idle`, `metrics`, `migration`), as its
    /// file gives them: a controller's topology carries none, and `apply` refuses a change of
    /// most of them, so the agent adds them to one (see [`FleetConfig::with_host_settings`]).
    pub host_settings: Vec<(String, crate::tree::Y)>,
}

/// The top-level keys a controller leaves to each host's own file.
pub const HOST_SETTINGS: &[&str] = &["workers", "idle", "metrics", "migration"];

impl FleetConfig {
    /// The `fleet:` section of a topology's text, if it has one; `file` names it in errors.
    pub fn from_topology(text: &str, file: &str) -> Result<Option<FleetConfig>, FleetError> {
        let wrap = |at: Located| FleetError::Config { file: file.to_string(), at };
        let doc = yamlpath::parse_document(text, "fleet:, vrs:, ...").map_err(wrap)?;
        let top = Value::<Located>::root(&doc).mapping().map_err(wrap)?;
        let Some(mut cfg) = top.get("fleet").map(|v| parse(&v)).transpose().map_err(wrap)? else {
            return Ok(None);
        };
        for k in HOST_SETTINGS {
            if let Some(v) = top.get(k) {
                cfg.host_settings
                    .push((k.to_string(), crate::tree::Y::from_value(&v).map_err(wrap)?));
            }
        }
        Ok(Some(cfg))
    }

    /// What the host's `migration:` section offers the fleet, if it has one.
    pub fn migration_offer(&self) -> Option<MigrationOffer> {
        let (_, m) = self.host_settings.iter().find(|(k, _)| k == "migration")?;
        let listen = m.text("listen").and_then(|l| l.parse::<std::net::SocketAddr>().ok());
        let listen = listen.map(|mut a| {
            if a.ip().is_unspecified() {
                a.set_ip(self.underlay);
            }
            a
        });
        Some(MigrationOffer { listen })
    }

    /// A desired topology the fleet controller wrote (it starts with
    /// [`crate::keys::HEADER`]) with the host's own settings added where it has none;
    /// any other text as it is (a person's desired topology says what it means).
    pub fn with_host_settings(&self, text: &str) -> String {
        if self.host_settings.is_empty() || !text.starts_with(crate::keys::HEADER) {
            return text.to_string();
        }
        let Ok(doc) = yamlpath::parse_document(text, "vrs:") else { return text.to_string() };
        let Ok(mut y) = crate::tree::Y::from_value(&Value::<Located>::root(&doc)) else {
            return text.to_string();
        };
        for (k, v) in &self.host_settings {
            if y.get(k).is_none() {
                y.set(k, v.clone());
            }
        }
        format!("{}{}", crate::keys::HEADER, y.emit())
    }
}

fn parse(v: &Value<'_>) -> Result<FleetConfig, Located> {
    let m = v.map(FLEET_KEYS)?;
    let etcd_v = m.req("etcd")?;
    let items = etcd_v.list_or_one()?;
    if items.is_empty() || items.len() > MAX_ENDPOINTS {
        return Err(etcd_v.error(format_args!(
            "etcd needs 1..={MAX_ENDPOINTS} endpoints, found {}",
            items.len()
        )));
    }
    let etcd = items.iter().map(endpoint).collect::<Result<Vec<_>, _>>()?;
    let host_v = m.req("host")?;
    let host = host_name(&host_v)?;
    let underlay = m.req("underlay")?.parse::<IpAddr>("IP address")?;
    // Interface names are 15 bytes at most (IFNAMSIZ); namespaces are files in /run/netns.
    let ifname = |k: &str, max: usize| -> Result<Option<String>, Located> {
        let Some(v) = m.get(k) else { return Ok(None) };
        let s = v.text()?;
        if s.len() > max || s.contains(['/', ' ']) || s == "." || s == ".." {
            return Err(v.bad(
                s,
                format_args!("{k} {s:?} is not an interface or namespace name (1..={max} characters, no '/' or space)"),
            ));
        }
        Ok(Some(s.to_string()))
    };
    let (underlay_dev, underlay_netns) =
        (ifname("underlay_dev", 15)?, ifname("underlay_netns", 32)?);
    let underlay_mtu =
        m.get("underlay_mtu").map(|v| v.int("underlay_mtu", 576, 65535)).transpose()?;
    let controller = m.get("controller").map(|v| v.bool()).transpose()?.unwrap_or(false);
    let ov = m.req("offer")?;
    let o = ov.map(OFFER_KEYS)?;
    let share_v = o.req("cpu_share")?;
    let cpu_share: f64 = share_v.parse("fraction")?;
    if !(cpu_share > 0.0 && cpu_share <= 1.0) {
        let t = share_v.text()?;
        return Err(share_v.bad(
            t,
            format_args!("cpu_share {t} is not the share of a worker reservations may take: a fraction in (0, 1]"),
        ));
    }
    let offer = Offer {
        workers: o.req("workers")?.int("workers", 1, 1024)?,
        cpu_share,
        memory_mib: o.req("memory_mib")?.int("memory_mib", 1, 1 << 30)?,
    };
    let ttl_s: u64 = match m.get("lease_ttl_s") {
        Some(t) => t.int("lease_ttl_s", 1, 60)?,
        None => DEFAULT_TTL_S,
    };
    let policy = match m.get("policy") {
        None => Policy::Fence,
        Some(p) => match p.text()? {
            "fence" => Policy::Fence,
            "keep" => Policy::Keep,
            s => return Err(p.bad(s, format_args!("policy must be fence or keep, not {s:?}"))),
        },
    };
    Ok(FleetConfig {
        etcd,
        host,
        underlay,
        underlay_dev,
        underlay_netns,
        underlay_mtu,
        offer,
        lease_ttl: Duration::from_secs(ttl_s),
        policy,
        controller,
        host_settings: Vec::new(),
    })
}

/// `http://HOST:PORT` (or `HOST:PORT`, taken as http): TLS is not built yet.
fn endpoint(v: &Value<'_>) -> Result<String, Located> {
    let s = v.text()?;
    let rest = s.strip_prefix("http://").unwrap_or(s);
    let ok = s.len() <= MAX_ENDPOINT_LEN
        && !rest.contains("://")
        && rest.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    if !ok {
        return Err(v.bad(s, format_args!("an etcd endpoint is http://HOST:PORT, not {s:?}")));
    }
    Ok(format!("http://{rest}"))
}

/// A name usable in a key: letters, digits, `.`, `_` and `-`, at most [`MAX_HOST_NAME`].
fn host_name(v: &Value<'_>) -> Result<String, Located> {
    let s = v.text()?;
    if let Err(why) = crate::keys::check_name(s) {
        return Err(v.bad(s, format_args!("host {s:?}: {why}")));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
workers: 1
fleet:
  etcd: [http://127.0.0.1:2379, 127.0.0.2:2379]
  host: h1
  underlay: 192.0.2.1
  offer: { workers: 2, cpu_share: 0.8, memory_mib: 4096 }
vrs: []
";

    fn err(text: &str) -> String {
        FleetConfig::from_topology(text, "t.yaml").unwrap_err().to_string()
    }

    #[test]
    fn the_migration_section_is_offered_to_the_fleet() {
        let c = FleetConfig::from_topology(GOOD, "t.yaml").unwrap().unwrap();
        assert_eq!(c.migration_offer(), None);
        let with = |m: &str| {
            let t = format!("migration: {m}\n{GOOD}");
            FleetConfig::from_topology(&t, "t.yaml").unwrap().unwrap().migration_offer().unwrap()
        };
        // An unspecified address is the underlay's; without `listen` the host only sends.
        let any = with("{ listen: 0.0.0.0:9470, secret: 0123456789abcdef }");
        assert_eq!(any.listen, Some("192.0.2.1:9470".parse().unwrap()));
        let set = with("{ listen: 10.9.0.1:9470, secret: 0123456789abcdef }");
        assert_eq!(set.listen, Some("10.9.0.1:9470".parse().unwrap()));
        assert_eq!(with("{ secret: 0123456789abcdef }").listen, None);
    }

    #[test]
    fn a_good_section_with_defaults() {
        let c = FleetConfig::from_topology(GOOD, "t.yaml").unwrap().unwrap();
        assert_eq!(c.etcd, ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]);
        assert_eq!(c.host, "h1");
        assert_eq!(c.underlay, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(c.offer, Offer { workers: 2, cpu_share: 0.8, memory_mib: 4096 });
        assert_eq!(c.lease_ttl, Duration::from_secs(3));
        assert_eq!(c.policy, Policy::Fence);
        let keep = GOOD.replace("vrs: []", "  policy: keep\n  lease_ttl_s: 1\nvrs: []");
        let c = FleetConfig::from_topology(&keep, "t.yaml").unwrap().unwrap();
        assert_eq!((c.policy, c.lease_ttl), (Policy::Keep, Duration::from_secs(1)));
        assert_eq!((c.underlay_dev.as_deref(), c.underlay_mtu, c.controller), (None, None, false));
        let under = GOOD.replace(
            "vrs: []",
            "  underlay_dev: eth1\n  underlay_netns: under\n  underlay_mtu: 9000\n  controller: true\nvrs: []",
        );
        let c = FleetConfig::from_topology(&under, "t.yaml").unwrap().unwrap();
        assert_eq!(c.underlay_dev.as_deref(), Some("eth1"));
        assert_eq!(
            (c.underlay_netns.as_deref(), c.underlay_mtu, c.controller),
            (Some("under"), Some(9000), true)
        );
        let e = err(&GOOD.replace("vrs: []", "  underlay_dev: a/b\nvrs: []"));
        assert!(e.contains("fleet.underlay_dev: underlay_dev \"a/b\" is not an interface"), "{e}");
        let e = err(&GOOD.replace("vrs: []", "  underlay_mtu: 100\nvrs: []"));
        assert!(
            e.contains("fleet.underlay_mtu: underlay_mtu 100 is out of range 576..=65535"),
            "{e}"
        );
    }

    #[test]
    fn a_controllers_topology_gets_the_hosts_own_settings() {
        let text = GOOD.replace("workers: 1", "workers: [0, 2]\nmetrics: { listen: 127.0.0.1:9 }");
        let c = FleetConfig::from_topology(&text, "t.yaml").unwrap().unwrap();
        let gen = format!("{}vrs: []\n", crate::keys::HEADER);
        let t = c.with_host_settings(&gen);
        let topo = control::topology::Topology::parse(&t, "x", std::path::Path::new(".")).unwrap();
        assert_eq!(topo.workers, control::topology::Workers::Cpus(vec![0, 2]), "{t}");
        assert!(topo.metrics.is_some(), "{t}");
        // A person's desired topology is applied as written.
        assert_eq!(c.with_host_settings("vrs: []\n"), "vrs: []\n");
    }

    #[test]
    fn no_section_is_no_fleet() {
        assert_eq!(FleetConfig::from_topology("vrs: []\n", "t.yaml").unwrap(), None);
    }

    #[test]
    fn errors_name_file_line_column_field_and_value() {
        let e = err(&GOOD.replace("host: h1", "hots: h1"));
        assert!(e.starts_with("t.yaml:4:3: fleet.hots: unknown key \"hots\""), "{e}");
        let e = err(&GOOD.replace("host: h1", "host: h/1"));
        assert!(e.starts_with("t.yaml:4:9: fleet.host: host"), "{e}");
        assert!(e.contains("h/1"), "{e}");
        let e = err(&GOOD.replace("192.0.2.1", "192.0.2"));
        assert!(e.starts_with("t.yaml:5:13: fleet.underlay: invalid IP address"), "{e}");
        let e = err(&GOOD.replace("0.8", "1.5"));
        assert!(e.starts_with("t.yaml:6:35: fleet.offer.cpu_share"), "{e}");
        assert!(e.contains("1.5") && e.contains("(0, 1]"), "{e}");
        let e = err(&GOOD.replace("127.0.0.2:2379", "https://x:1"));
        assert!(e.starts_with("t.yaml:3:33: fleet.etcd[1]: an etcd endpoint"), "{e}");
        let e = err(&GOOD.replace("[http://127.0.0.1:2379, 127.0.0.2:2379]", "[]"));
        assert!(e.contains("fleet.etcd: etcd needs 1..=16 endpoints, found 0"), "{e}");
        let e = err(&GOOD.replace("vrs: []", "  lease_ttl_s: 0\nvrs: []"));
        assert!(e.contains("fleet.lease_ttl_s: lease_ttl_s 0 is out of range 1..=60"), "{e}");
        let e = err(&GOOD.replace("vrs: []", "  policy: maybe\nvrs: []"));
        assert!(e.contains("fleet.policy: policy must be fence or keep"), "{e}");
        let e = err(&GOOD.replace("  underlay: 192.0.2.1\n", ""));
        assert!(e.contains("fleet.underlay: required field \"underlay\" is missing"), "{e}");
        let e = err(&GOOD.replace("memory_mib: 4096", "memory_mib: 4096, cpus: 2"));
        assert!(e.contains("fleet.offer.cpus: unknown key"), "{e}");
    }
}
