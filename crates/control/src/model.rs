//! A topology as a typed value: serde structs that mirror the topology file (see
//! [`crate::topology`] for the format) one to one, for code that generates topologies.
//!
//! The model checks nothing itself. [`TopologyDoc::build`] writes the document as YAML
//! ([`TopologyDoc::to_yaml`]) and validates that text with [`Topology::parse`], so a generated
//! topology meets every check a file does, and a rejection names the generated text's line and
//! column and the field path (`vrs[1].interfaces[0].mac`). Values are kept as the file has them
//! (addresses, MACs and prefixes as strings, numbers as integers) so that a bad value reaches
//! the parser and gets its error. `None` and empty lists are left out when serialized: the text
//! is what a person would write. As in a file, a string value `""`, `~` or `null` is the same as
//! leaving the key out.
//!
//! ```
//! use control::model::{IfaceDoc, PortDoc, PortKindDoc, TopologyDoc, VrDoc};
//! let mut vr = VrDoc::new("vr1");
//! vr.interfaces.push(IfaceDoc::on_port("e0", "p0", "02:00:00:00:00:01", ["10.0.0.1/24"]));
//! let doc = TopologyDoc {
//!     ports: vec![PortDoc::new("p0", PortKindDoc::Mem { ring: None })],
//!     vrs: vec![vr],
//!     ..TopologyDoc::default()
//! };
//! let topo = doc.build("generated.yaml", std::path::Path::new(".")).unwrap();
//! assert_eq!(topo.vrs[0].interfaces[0].name, "e0");
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::topology::{Topology, TopologyError};

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersDoc>,
    /// `poll`, `adaptive` or `interrupt`: what a worker without traffic does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_queues: Option<IngressQueuesDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<SwitchDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vrs: Vec<VrDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub msrs: Vec<MsrDoc>,
    /// `fleet:`, checked by the fleet crate when the host starts; kept here so an edited text
    /// keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetDoc>,
}

/// `fleet:`: `etcd` (one endpoint or a list), `host`, `underlay`, `offer`, `lease_ttl_s`,
/// `policy`, as the file writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetDoc {
    pub etcd: EndpointsDoc,
    pub host: String,
    pub underlay: String,
    pub offer: FleetOfferDoc,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// `fleet.etcd:`: one endpoint, or a list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EndpointsDoc {
    One(String),
    Many(Vec<String>),
}

impl Default for EndpointsDoc {
    fn default() -> Self {
        EndpointsDoc::Many(Vec::new())
    }
}

/// `fleet.offer:`: what the host lets the fleet place on it (`cpu_share` as written, `0.5`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetOfferDoc {
    pub workers: u64,
    pub cpu_share: String,
    pub memory_mib: u64,
}

/// One `msrs[]` entry: a multistage router over replicated VR `vr`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsrDoc {
    pub vr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<MsrPolicyDoc>,
}

/// An MSR's `policy:`: when back-ends are switched on and off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsrPolicyDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_above_pps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_below_pps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_active: Option<u64>,
}

/// `workers:`: a count, or a list of CPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WorkersDoc {
    Count(u64),
    Cpus(Vec<u64>),
}

/// `ingress_queues:`: per-VR queues on ports shared by several VRs; each key optional (`limit`
/// frames per VR queue, `quantum` frames per turn, `per_pass` frames per pass).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngressQueuesDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantum: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_pass: Option<u64>,
}

/// `metrics:`: the Prometheus endpoint; `listen` is `IP:PORT` (default 127.0.0.1:9469).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// `migration:`: `listen` (`IP:PORT`), `secret` (shared by both ends), `peers` (addresses),
/// `stop_timeout_ms` (the stop's bound).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    pub secret: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_timeout_ms: Option<u64>,
}

impl std::fmt::Debug for MigrationDoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MigrationDoc")
            .field("listen", &self.listen)
            .field("secret", &"<hidden>")
            .field("peers", &self.peers)
            .field("stop_timeout_ms", &self.stop_timeout_ms)
            .finish()
    }
}

/// One of `hosts:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDoc {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u64>,
}

/// One of `ports:`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortDoc {
    pub name: String,
    /// `kind:` and the keys of that kind.
    #[serde(flatten)]
    pub kind: PortKindDoc,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// What frames leaving by the port suffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impair: Option<ImpairDoc>,
}

/// A port's `impair:` (durations, percentages and rates as the file writes them: `20ms`,
/// `1%`, `10mbit`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImpairDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<LossDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// `impair.loss:`: a percentage (random), or Gilbert-Elliott's four.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LossDoc {
    Random(String),
    Gilbert(GilbertDoc),
}

/// Gilbert-Elliott loss (netem's `gemodel p r 1-h 1-k`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GilbertDoc {
    pub p: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r: Option<String>,
    #[serde(rename = "1-h", default, skip_serializing_if = "Option::is_none")]
    pub h: Option<String>,
    #[serde(rename = "1-k", default, skip_serializing_if = "Option::is_none")]
    pub k: Option<String>,
}

/// A port's `kind:` with its own keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PortKindDoc {
    Mem {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ring: Option<u64>,
    },
    Afxdp(KernelDoc),
    Afpacket(KernelDoc),
    Tap {
        interface: String,
    },
    Memif(MemifDoc),
    #[serde(rename = "vhost-user")]
    VhostUser(VhostUserDoc),
}

/// A `vhost-user` port's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VhostUserDoc {
    pub socket: String,
    /// `server` or `client`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u64>,
}

/// Where an `afxdp` or `afpacket` port attaches: `interface` or `host`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// AF_XDP's own keys: give them for `afxdp` only (the parser refuses them on `afpacket`).
    #[serde(flatten)]
    pub xdp: XdpDoc,
}

/// An `afxdp` port's ring, frame and mode keys (see docs/topology.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_size: Option<u64>,
    /// `auto`, `driver` or `skb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_mode: Option<String>,
    /// `auto`, `on` or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_copy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threaded_napi: Option<bool>,
    /// `all` or a count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<QueuesDoc>,
}

/// An `afxdp` port's `queues:`: a count, or `all`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QueuesDoc {
    Count(u64),
    Word(String),
}

/// A `memif` port's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemifDoc {
    /// `server` or `client`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub socket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<u64>,
    /// `polling` or `interrupt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_mode: Option<String>,
}

/// One of `switches:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchDoc {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_macs: Vec<StaticMacDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aging_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snooping: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_timeout_s: Option<u64>,
}

/// One of a switch's `members:`: an access port (`vlan`) or a trunk (`trunk`, `native`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDoc {
    pub port: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u64>,
    /// `None`: not a trunk; `Some(vec![])` is written (`trunk: []`), as a trunk with only a
    /// native VLAN may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trunk: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<u64>,
}

/// One of a switch's `static_macs:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaticMacDoc {
    pub mac: String,
    pub port: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u64>,
}

/// One of `vrs:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VrDoc {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<IfaceDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub neighbors: Vec<NeighborDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<TableDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationDoc>,
    /// Replicas of the VR, one per worker, behind the flow hash (parallel virtual routers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneDoc>,
}

/// One of a VR's `interfaces:`, on a `port` or a `switch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfaceDoc {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u64>,
    pub mac: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
}

/// One of a VR's `routes:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteDoc {
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blackhole: Option<bool>,
}

/// One of a VR's `neighbors:` (a static ARP/NDP entry).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighborDoc {
    pub address: String,
    pub mac: String,
    pub interface: String,
}

/// One of a VR's `tables:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDoc {
    pub file: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_hops: Vec<NextHopDoc>,
}

/// One of a table's `next_hops:`: an address, or `{ via, interface }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NextHopDoc {
    Address(String),
    Via {
        via: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interface: Option<String>,
    },
}

/// A VR's `limits:`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_per_neighbor: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_total: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbor_reachable_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbor_retrans_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbor_probes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbor_failed_hold_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete_per_interface: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solicitations_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solicitations_burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_errors_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_errors_burst: Option<u64>,
}

/// A VR's `reservation:`: `packets` or `time_us` per period.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
}

/// A VR's `control_plane:` (mapping form; `kind` is `linux`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlPlaneDoc {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub punt_per_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub punt_burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate_netns: Option<String>,
}

impl TopologyDoc {
    /// The document as YAML: block style, with a mapping or list of plain values on one line
    /// in flow style (`- { name: p0, kind: mem }`), strings quoted where YAML needs it.
    pub fn to_yaml(&self) -> String {
        emit::to_yaml(self)
    }

    /// Validates the document exactly as a file: [`Topology::parse`] of [`Self::to_yaml`].
    /// `name` names it in errors; relative table paths are resolved against `base`.
    pub fn build(&self, name: &str, base: &Path) -> Result<Topology, TopologyError> {
        Topology::parse(&self.to_yaml(), name, base)
    }
}

/// Any serializable document (a [`TopologyDoc`], or a topology file read as plain data) as
/// YAML, written as [`TopologyDoc::to_yaml`] writes.
pub fn to_yaml<T: Serialize>(doc: &T) -> String {
    emit::to_yaml(doc)
}

impl PortDoc {
    /// A port with the worker's default burst.
    pub fn new(name: impl Into<String>, kind: PortKindDoc) -> PortDoc {
        PortDoc { name: name.into(), kind, burst: None, impair: None }
    }
}

impl KernelDoc {
    /// Attached to an existing interface.
    pub fn interface(ifname: impl Into<String>) -> KernelDoc {
        KernelDoc { interface: Some(ifname.into()), ..KernelDoc::default() }
    }
}

impl VrDoc {
    /// A VR with nothing but its name.
    pub fn new(name: impl Into<String>) -> VrDoc {
        VrDoc { name: name.into(), ..VrDoc::default() }
    }
}

impl IfaceDoc {
    /// An untagged interface on a port, with its addresses.
    pub fn on_port<A: Into<String>>(
        name: impl Into<String>,
        port: impl Into<String>,
        mac: impl Into<String>,
        addresses: impl IntoIterator<Item = A>,
    ) -> IfaceDoc {
        IfaceDoc {
            name: name.into(),
            port: Some(port.into()),
            mac: mac.into(),
            addresses: addresses.into_iter().map(Into::into).collect(),
            ..IfaceDoc::default()
        }
    }
}

impl RouteDoc {
    /// `{ prefix, via }`.
    pub fn via(prefix: impl Into<String>, via: impl Into<String>) -> RouteDoc {
        RouteDoc { prefix: prefix.into(), via: Some(via.into()), ..RouteDoc::default() }
    }
}

impl NeighborDoc {
    /// `{ address, mac, interface }`.
    pub fn new(
        address: impl Into<String>,
        mac: impl Into<String>,
        interface: impl Into<String>,
    ) -> NeighborDoc {
        NeighborDoc { address: address.into(), mac: mac.into(), interface: interface.into() }
    }
}

/// A tiny YAML writer for the model. The document goes through `serde_json` text (which keeps
/// field order, unlike `serde_json::Value`) into an ordered tree, which is then written out.
mod emit {
    use std::fmt;

    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::Serialize;

    /// A serialized value, mappings in field order.
    enum Node {
        /// A number, `true`/`false` or `null`: written as is.
        Plain(String),
        /// A string: written plain or quoted.
        Str(String),
        Seq(Vec<Node>),
        Map(Vec<(String, Node)>),
    }

    impl<'de> Deserialize<'de> for Node {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
            d.deserialize_any(NodeVisitor)
        }
    }

    struct NodeVisitor;

    impl<'de> Visitor<'de> for NodeVisitor {
        type Value = Node;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
            Ok(Node::Plain(v.to_string()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
            Ok(Node::Plain(v.to_string()))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
            Ok(Node::Plain(v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
            Ok(Node::Plain(v.to_string()))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
            Ok(Node::Str(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
            Ok(Node::Plain("null".into()))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
            let mut v = Vec::new();
            while let Some(x) = a.next_element()? {
                v.push(x);
            }
            Ok(Node::Seq(v))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
            let mut v = Vec::new();
            while let Some(e) = a.next_entry()? {
                v.push(e);
            }
            Ok(Node::Map(v))
        }
    }

    pub(super) fn to_yaml<T: Serialize>(doc: &T) -> String {
        // Plain data with string keys: neither step can fail.
        let json = serde_json::to_string(doc).expect("the model serializes to JSON");
        let node: Node = serde_json::from_str(&json).expect("JSON reads back");
        let mut out = String::new();
        match &node {
            Node::Map(entries) => map_entries(entries, 0, false, &mut out),
            other => {
                flow(other, &mut out);
                out.push('\n');
            }
        }
        out
    }

    fn is_scalar(n: &Node) -> bool {
        matches!(n, Node::Plain(_) | Node::Str(_))
    }

    /// Written on one line: a scalar, a list of scalars, or a mapping whose values are those.
    fn is_flat(n: &Node) -> bool {
        match n {
            Node::Plain(_) | Node::Str(_) => true,
            Node::Seq(items) => items.iter().all(is_scalar),
            Node::Map(entries) => entries.iter().all(|(_, v)| match v {
                Node::Seq(items) => items.iter().all(is_scalar),
                v => is_scalar(v),
            }),
        }
    }

    fn indent(n: usize, out: &mut String) {
        out.extend(std::iter::repeat_n(' ', n));
    }

    /// `key: value` lines at column `at`; the first line's indentation is already written when
    /// `first_done` (an item of a block list).
    fn map_entries(entries: &[(String, Node)], at: usize, first_done: bool, out: &mut String) {
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 || !first_done {
                indent(at, out);
            }
            out.push_str(k);
            out.push(':');
            if is_flat(v) {
                out.push(' ');
                flow(v, out);
                out.push('\n');
            } else {
                out.push('\n');
                match v {
                    Node::Seq(items) => seq_block(items, at + 2, out),
                    Node::Map(entries) => map_entries(entries, at + 2, false, out),
                    _ => unreachable!("scalars are flat"),
                }
            }
        }
    }

    fn seq_block(items: &[Node], at: usize, out: &mut String) {
        for item in items {
            indent(at, out);
            out.push_str("- ");
            match item {
                Node::Map(entries) if !is_flat(item) => map_entries(entries, at + 2, true, out),
                Node::Seq(inner) if !is_flat(item) => {
                    out.pop();
                    out.push('\n');
                    seq_block(inner, at + 2, out);
                }
                _ => {
                    flow(item, out);
                    out.push('\n');
                }
            }
        }
    }

    /// Flow style: `{ a: 1, b: [x, y] }`, `[x, y]`, or a scalar.
    fn flow(n: &Node, out: &mut String) {
        match n {
            Node::Plain(s) => out.push_str(s),
            Node::Str(s) => scalar(s, out),
            Node::Seq(items) => {
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    flow(x, out);
                }
                out.push(']');
            }
            Node::Map(entries) if entries.is_empty() => out.push_str("{}"),
            Node::Map(entries) => {
                out.push_str("{ ");
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(k);
                    out.push_str(": ");
                    flow(v, out);
                }
                out.push_str(" }");
            }
        }
    }

    /// A string plain when that is certainly read back as the same text in block and flow
    /// context (names, IPv4 addresses and prefixes, paths), double-quoted otherwise (IPv6 and
    /// MACs, with their colons, `@sockets`, anything else). JSON's string escapes are YAML's.
    fn scalar(s: &str, out: &mut String) {
        let plain = s.starts_with(|c: char| c.is_ascii_alphanumeric() || "/._".contains(c))
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "._/+-".contains(c))
            && !matches!(s, "null" | "Null" | "NULL");
        if plain {
            out.push_str(s);
        } else {
            out.push_str(&serde_json::to_string(s).expect("a string serializes"));
        }
    }
}

/// A YAML document as plain JSON data: mappings, lists, and every scalar as text.
pub(crate) fn plain(n: &marked_yaml::Node) -> serde_json::Value {
    match n {
        marked_yaml::Node::Scalar(s) => serde_json::Value::String(s.as_str().to_string()),
        marked_yaml::Node::Sequence(l) => serde_json::Value::Array(l.iter().map(plain).collect()),
        marked_yaml::Node::Mapping(m) => serde_json::Value::Object(
            m.iter().map(|(k, v)| (k.as_str().to_string(), plain(v))).collect(),
        ),
    }
}

#[cfg(test)]
mod tests;
