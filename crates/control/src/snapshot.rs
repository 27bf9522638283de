//! VR snapshots: one VR's whole state as a versioned, self-describing, checksummed file, and
//! putting it back into a running host.
//!
//! A snapshot holds the VR's configuration (interfaces, static neighbors, limits, schedule,
//! and the ports it sits on as the topology wrote them), its RIB with each route's source
//! (every source routes can be added to: static, API, table and any later one, by name), its
//! learned neighbors with their states, and its counters. Local and connected routes are not
//! stored: they follow from the interfaces.
//!
//! File layout (little-endian), [`HEADER_LEN`] bytes of header then the payload:
//!
//! ```text
//! magic "RPLXSNAP" (8) | format version u32 | flags u32 (0) | payload length u64 |
//! CRC-32 (IEEE) u32 over version, flags, length and payload | payload
//! ```
//!
//! Payload of version 1: `meta length u32 | meta (JSON) | routes`, where meta is a
//! [`MetaV1`] (self-describing: a newer build may add fields, which older ones skip) and
//! routes are packed records, each `kind u8 (bit 0: IPv6, bits 1..: index into meta.sources)
//! | prefix length u8 | address (4 or 16 bytes, network order) | next hop u32 (index into
//! meta.next_hops)`. JSON for half a million routes is tens of megabytes and slow to parse;
//! the packed form is 7 bytes per IPv4 route.
//!
//! Decoding checks everything a file supplies before use (magic, version, declared length
//! against [`MAX_PAYLOAD`] and the real length, checksum, every index and length), and a
//! bad file is refused with what was wrong before anything in the host changes. Each format
//! version is one variant of [`Snapshot`]; a new version adds a variant and keeps the old
//! decoder. Files are written to a temporary name, synced, renamed into place, and the
//! directory synced, so a crash leaves the old file or the new one, never half of one.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use dataplane::config::{RouteConfig, RouteTarget, VrConfig, VrLimits};
use dataplane::{Budget, RouteOp, RouteSource, RouteTable, VrCounters};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::model::{IfaceDoc, LimitsDoc, NeighborDoc, ReservationDoc, VrDoc};
use crate::topology::VrSchedule;
use crate::Topology;

/// The file's first bytes.
pub const MAGIC: [u8; 8] = *b"RPLXSNAP";
/// The format this build writes.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 28;
/// The largest payload read (a full table of ~1M routes is ~10 MiB packed).
pub const MAX_PAYLOAD: u64 = 256 << 20;
/// The largest meta section (configuration, neighbors, counters; routes are packed apart).
pub const MAX_META: usize = 16 << 20;

/// Why a snapshot could not be written, read or restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "{file}: not a routeplex snapshot (its first bytes are {found:02x?}, not \"RPLXSNAP\")"
    )]
    Magic { file: String, found: Vec<u8> },
    #[error("{file}: snapshot format version {found}, which this build cannot read (it reads 1..={FORMAT_VERSION})")]
    Version { file: String, found: u32 },
    #[error("{file}: header flags {found:#x} are unknown to this build")]
    Flags { file: String, found: u32 },
    #[error("{file}: the payload is said to be {len} bytes, more than the {MAX_PAYLOAD} this build reads")]
    TooLarge { file: String, len: u64 },
    #[error("{file}: truncated: {want} bytes expected, {got} present")]
    Truncated { file: String, want: u64, got: u64 },
    #[error("{file}: {extra} bytes after the payload")]
    Trailing { file: String, extra: u64 },
    #[error("{file}: checksum mismatch (header {want:#010x}, contents {got:#010x}): the file is damaged")]
    Checksum { file: String, want: u32, got: u32 },
    #[error("{file}: payload: {what}")]
    Payload { file: String, what: PayloadError },
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

/// What is wrong inside a snapshot's payload, a migration's route chunk or its learned
/// neighbors: the byte offset, index or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("no meta length")]
    NoMetaLength,
    #[error("meta length {len} does not fit the payload of {payload} bytes")]
    MetaLength { len: usize, payload: usize },
    #[error("meta: {0}")]
    Meta(#[from] serde_json::Error),
    #[error("route at byte {at}: truncated")]
    Truncated { at: usize },
    #[error("route at byte {at}: source {index} of {sources}")]
    Source { at: usize, index: u8, sources: usize },
    #[error("route at byte {at}: next hop {index} of {next_hops}")]
    NextHop { at: usize, index: u32, next_hops: usize },
    #[error("route at byte {at}: prefix length {len}")]
    PrefixLength { at: usize, len: u8 },
    #[error("route at byte {at}: {prefix} has host bits set")]
    HostBits { at: usize, prefix: IpNet },
    #[error("route source {0:?} is unknown to this build")]
    UnknownSource(String),
    #[error("next hop {0}: via, interface, or blackhole")]
    Target(String),
    /// A journal's restore record around a snapshot: what is wrong with its head.
    #[error("restore record: {0}")]
    RestoreRecord(&'static str),
    #[error("neighbor {address}: mac {mac:?} is not a MAC address")]
    NotAMac { address: IpAddr, mac: String },
    #[error("neighbor {address}: mac {mac} is {why}, not a neighbor's; refused")]
    GroupMac { address: IpAddr, mac: String, why: &'static str },
}

fn io(context: impl std::fmt::Display, source: std::io::Error) -> SnapshotError {
    SnapshotError::Io { context: context.to_string(), source }
}

/// A snapshot, as read: one variant per format version.
#[derive(Clone, Debug, PartialEq)]
pub enum Snapshot {
    V1(SnapshotV1),
}

impl Snapshot {
    /// The newest form of the snapshot (older versions would be converted here).
    pub fn into_current(self) -> SnapshotV1 {
        match self {
            Snapshot::V1(s) => s,
        }
    }
}

/// Format version 1.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotV1 {
    pub meta: MetaV1,
    pub routes: Vec<SnapRoute>,
}

/// A route of the snapshot: prefix, index into `meta.sources`, index into `meta.next_hops`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapRoute {
    pub prefix: IpNet,
    pub source: u8,
    pub next_hop: u32,
}

/// Everything but the routes, as JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetaV1 {
    /// The VR as a topology document: interfaces (by port name), static neighbors, limits,
    /// reservation and batch. Its routes and tables are left out: they are in the packed routes.
    pub vr: VrDoc,
    /// The VR's ports as the topology file has them (as JSON), where the host knew its text.
    #[serde(default)]
    pub ports: Vec<serde_json::Value>,
    /// Route source names (`static`, `api`, `table`, ...): packed routes refer to these.
    pub sources: Vec<String>,
    /// Route targets: packed routes refer to these.
    pub next_hops: Vec<SnapTarget>,
    /// Learned neighbors.
    #[serde(default)]
    pub neighbors: Vec<SnapNeighbor>,
    /// Counters by name.
    #[serde(default)]
    pub counters: Vec<(String, u64)>,
    /// When it was taken (Unix milliseconds) and by which build.
    #[serde(default)]
    pub taken_unix_ms: u64,
    #[serde(default)]
    pub routeplex: String,
}

/// A route target: `via` (with an optional interface index), an interface alone, or blackhole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SnapTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<u16>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blackhole: bool,
}

impl SnapTarget {
    fn of(t: RouteTarget) -> SnapTarget {
        match t {
            RouteTarget::Via { gateway, iface } => {
                SnapTarget { via: Some(gateway), interface: iface, blackhole: false }
            }
            RouteTarget::Iface(i) => SnapTarget { via: None, interface: Some(i), blackhole: false },
            RouteTarget::Blackhole => SnapTarget { via: None, interface: None, blackhole: true },
        }
    }

    fn target(&self) -> Result<RouteTarget, PayloadError> {
        match (self.via, self.interface, self.blackhole) {
            (Some(gateway), iface, false) => Ok(RouteTarget::Via { gateway, iface }),
            (None, Some(i), false) => Ok(RouteTarget::Iface(i)),
            (None, None, true) => Ok(RouteTarget::Blackhole),
            _ => Err(PayloadError::Target(format!("{self:?}"))),
        }
    }
}

/// A learned neighbor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapNeighbor {
    pub interface: u16,
    pub address: IpAddr,
    pub mac: String,
    /// Reachable (else stale).
    pub reachable: bool,
}

/// What a snapshot is taken from: a VR of a running topology.
pub struct Source<'a> {
    pub topo: &'a Topology,
    pub table: &'a RouteTable,
    /// The running topology's text, for the ports' documents.
    pub text: Option<&'a str>,
    pub neighbors: Vec<SnapNeighbor>,
    pub counters: VrCounters,
}

impl SnapshotV1 {
    /// Takes the `i`th VR of `src` (an index into its topology's VRs).
    pub fn take(i: usize, src: &Source<'_>) -> SnapshotV1 {
        let cfg = &src.topo.vrs[i];
        let doc = vr_doc(src.topo, cfg, &src.topo.schedule[i]);
        let port_names: Vec<&str> =
            doc.interfaces.iter().filter_map(|f| f.port.as_deref()).collect();
        let ports = src.text.map(|t| port_docs(t, &port_names)).unwrap_or_default();
        let sources: Vec<RouteSource> =
            RouteSource::ALL.into_iter().filter(|s| s.is_operable()).collect();
        let mut next_hops: Vec<SnapTarget> = Vec::new();
        let mut nh_index: HashMap<SnapTarget, u32> = HashMap::new();
        let mut routes = Vec::new();
        for r in src.table.routes(None, usize::MAX) {
            let Some(s) = sources.iter().position(|&s| s == r.source) else { continue };
            let t = SnapTarget::of(r.target);
            let n = *nh_index.entry(t).or_insert_with(|| {
                next_hops.push(t);
                (next_hops.len() - 1) as u32
            });
            routes.push(SnapRoute { prefix: r.prefix, source: s as u8, next_hop: n });
        }
        let meta = MetaV1 {
            vr: doc,
            ports,
            sources: sources.iter().map(|s| s.name().to_string()).collect(),
            next_hops,
            neighbors: src.neighbors.clone(),
            counters: src.counters.named().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            taken_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            routeplex: env!("CARGO_PKG_VERSION").to_string(),
        };
        SnapshotV1 { meta, routes }
    }

    /// The file's bytes: header and payload.
    pub fn encode(&self) -> Vec<u8> {
        let meta = serde_json::to_vec(&self.meta).expect("snapshot meta serialises");
        let mut payload = Vec::with_capacity(4 + meta.len() + self.routes.len() * 8);
        payload.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        payload.extend_from_slice(&meta);
        encode_routes(&self.routes, &mut payload);
        framed(&payload)
    }

    /// The routes as operations that add them with their own sources (to a VR built from
    /// `meta.vr`, which has none yet).
    pub fn route_ops(&self) -> Result<Vec<RouteOp>, PayloadError> {
        let sources: Vec<RouteSource> = self
            .meta
            .sources
            .iter()
            .map(|n| {
                RouteSource::ALL
                    .into_iter()
                    .find(|s| s.name() == n && s.is_operable())
                    .ok_or_else(|| PayloadError::UnknownSource(n.clone()))
            })
            .collect::<Result<_, _>>()?;
        let targets: Vec<RouteTarget> =
            self.meta.next_hops.iter().map(SnapTarget::target).collect::<Result<_, _>>()?;
        Ok(self
            .routes
            .iter()
            .map(|r| {
                RouteOp::Add(RouteConfig {
                    prefix: r.prefix,
                    target: targets[r.next_hop as usize],
                    source: sources[usize::from(r.source)],
                })
            })
            .collect())
    }

    /// The counters as the data plane keeps them, and the names this build does not know.
    pub fn counters(&self) -> (VrCounters, Vec<String>) {
        VrCounters::from_named(self.meta.counters.iter().map(|(k, v)| (k.as_str(), *v)))
    }
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header);
    h.update(payload);
    h.finalize()
}

/// A file's bytes: the header (this build's version, its checksum) and `payload`.
pub(crate) fn framed(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let crc = checksum(&out[8..24], payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Decodes a whole file's bytes; `file` names it in errors.
pub fn decode(file: &str, bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    let f = || file.to_string();
    if bytes.len() < HEADER_LEN {
        if bytes.len() >= 8 && bytes[..8] != MAGIC {
            return Err(SnapshotError::Magic { file: f(), found: bytes[..8].to_vec() });
        }
        return Err(SnapshotError::Truncated {
            file: f(),
            want: HEADER_LEN as u64,
            got: bytes.len() as u64,
        });
    }
    if bytes[..8] != MAGIC {
        return Err(SnapshotError::Magic { file: f(), found: bytes[..8].to_vec() });
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version == 0 || version > FORMAT_VERSION {
        return Err(SnapshotError::Version { file: f(), found: version });
    }
    let flags = u32_at(12);
    if flags != 0 {
        return Err(SnapshotError::Flags { file: f(), found: flags });
    }
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    if len > MAX_PAYLOAD {
        return Err(SnapshotError::TooLarge { file: f(), len });
    }
    let have = (bytes.len() - HEADER_LEN) as u64;
    if have < len {
        return Err(SnapshotError::Truncated {
            file: f(),
            want: HEADER_LEN as u64 + len,
            got: bytes.len() as u64,
        });
    }
    if have > len {
        return Err(SnapshotError::Trailing { file: f(), extra: have - len });
    }
    let payload = &bytes[HEADER_LEN..];
    let want = u32_at(24);
    let got = checksum(&bytes[8..24], payload);
    if want != got {
        return Err(SnapshotError::Checksum { file: f(), want, got });
    }
    match version {
        1 => decode_v1(payload)
            .map(Snapshot::V1)
            .map_err(|what| SnapshotError::Payload { file: f(), what }),
        _ => unreachable!("checked above"),
    }
}

fn decode_v1(p: &[u8]) -> Result<SnapshotV1, PayloadError> {
    if p.len() < 4 {
        return Err(PayloadError::NoMetaLength);
    }
    let mlen = u32::from_le_bytes(p[..4].try_into().expect("4 bytes")) as usize;
    if mlen > MAX_META || 4 + mlen > p.len() {
        return Err(PayloadError::MetaLength { len: mlen, payload: p.len() });
    }
    let meta: MetaV1 = serde_json::from_slice(&p[4..4 + mlen])?;
    let mut routes = Vec::new();
    decode_routes(&p[4 + mlen..], 4 + mlen, &meta, &mut routes)?;
    Ok(SnapshotV1 { meta, routes })
}

/// Appends `routes` as packed records (see the module doc).
pub fn encode_routes(routes: &[SnapRoute], out: &mut Vec<u8>) {
    for r in routes {
        match r.prefix {
            IpNet::V4(n) => {
                out.push(r.source << 1);
                out.push(n.prefix_len());
                out.extend_from_slice(&n.addr().octets());
            }
            IpNet::V6(n) => {
                out.push((r.source << 1) | 1);
                out.push(n.prefix_len());
                out.extend_from_slice(&n.addr().octets());
            }
        }
        out.extend_from_slice(&r.next_hop.to_le_bytes());
    }
}

/// Decodes packed route records whose indices refer to `meta`, checking every one; `base`
/// is the records' offset, for errors.
pub fn decode_routes(
    p: &[u8],
    base: usize,
    meta: &MetaV1,
    routes: &mut Vec<SnapRoute>,
) -> Result<(), PayloadError> {
    let (ns, nn) = (meta.sources.len(), meta.next_hops.len());
    let mut at = 0;
    while at < p.len() {
        let k = base + at;
        let (kind, len) = match p.get(at..at + 2) {
            Some(&[kind, len]) => (kind, len),
            _ => return Err(PayloadError::Truncated { at: k }),
        };
        let v6 = kind & 1 == 1;
        let source = kind >> 1;
        let alen = if v6 { 16 } else { 4 };
        let Some(rest) = p.get(at + 2..at + 2 + alen + 4) else {
            return Err(PayloadError::Truncated { at: k });
        };
        let (addr, nh) = rest.split_at(alen);
        let next_hop = u32::from_le_bytes(nh.try_into().expect("4 bytes"));
        if usize::from(source) >= ns {
            return Err(PayloadError::Source { at: k, index: source, sources: ns });
        }
        if next_hop as usize >= nn {
            return Err(PayloadError::NextHop { at: k, index: next_hop, next_hops: nn });
        }
        let prefix = if v6 {
            let a: [u8; 16] = addr.try_into().expect("16 bytes");
            Ipv6Net::new(a.into(), len).map(IpNet::V6).map_err(|_| len)
        } else {
            let a: [u8; 4] = addr.try_into().expect("4 bytes");
            Ipv4Net::new(a.into(), len).map(IpNet::V4).map_err(|_| len)
        }
        .map_err(|len| PayloadError::PrefixLength { at: k, len })?;
        if prefix.trunc() != prefix {
            return Err(PayloadError::HostBits { at: k, prefix });
        }
        routes.push(SnapRoute { prefix, source, next_hop });
        at += 2 + alen + 4;
    }
    Ok(())
}

/// Reads and decodes a snapshot file, refusing one larger than a snapshot can be.
pub fn read(path: &Path) -> Result<Snapshot, SnapshotError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| io(&name, e))?;
    let mut bytes = Vec::new();
    f.take(HEADER_LEN as u64 + MAX_PAYLOAD + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io(&name, e))?;
    decode(&name, &bytes)
}

/// Writes `bytes` to `path` atomically, 0600: a temporary file beside it, synced, renamed
/// into place, then the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io(path.display(), std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let res = (|| {
        let mut f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| io(tmp.display(), e))?;
        f.write_all(bytes).map_err(|e| io(tmp.display(), e))?;
        f.sync_all().map_err(|e| io(tmp.display(), e))?;
        std::fs::rename(&tmp, path).map_err(|e| io(path.display(), e))?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir.display(), e))
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// The switch (and the VLAN in it) that port `p` joins, when `p` is a VR interface's
/// internal link to it.
fn switch_of(topo: &Topology, p: dataplane::config::PortId) -> Option<(String, u16)> {
    let crate::topology::PortKind::Link { peer } = topo.ports.get(usize::from(p))?.kind else {
        return None;
    };
    topo.switches.iter().find_map(|s| {
        s.members.iter().find(|m| m.port == peer).and_then(|m| match m.mode {
            dataplane::MemberMode::Access { vlan } => Some((s.name.clone(), vlan)),
            dataplane::MemberMode::Trunk { .. } => None,
        })
    })
}

/// The VR of the running topology as a document (without routes or tables).
fn vr_doc(topo: &Topology, cfg: &VrConfig, s: &VrSchedule) -> VrDoc {
    let mut d = VrDoc::new(cfg.name.clone());
    for f in &cfg.interfaces {
        let addrs: Vec<String> = f
            .ipv4
            .iter()
            .map(ToString::to_string)
            .chain(f.ipv6.iter().map(ToString::to_string))
            .collect();
        // An interface on a switch sits on an internal link whose other end is an access
        // member: said as `switch:` (and its VLAN there), so that a host with a switch of the
        // same name (a restore elsewhere, a migration's destination) joins it.
        let (port, switch, vlan) = match switch_of(topo, f.port) {
            Some((sw, v)) => (None, Some(sw), Some(u64::from(v))),
            None => {
                (Some(topo.ports[usize::from(f.port)].name.clone()), None, f.vlan.map(u64::from))
            }
        };
        d.interfaces.push(IfaceDoc {
            name: f.name.clone(),
            port,
            switch,
            vlan,
            mac: f.mac.to_string(),
            mtu: Some(u64::from(f.mtu)),
            addresses: addrs,
            up: None,
        });
    }
    for n in &cfg.neighbors {
        d.neighbors.push(NeighborDoc {
            address: n.ip.to_string(),
            mac: n.mac.to_string(),
            interface: cfg.interfaces[usize::from(n.iface)].name.clone(),
        });
    }
    if cfg.limits != VrLimits::default() {
        let l = &cfg.limits;
        d.limits = Some(LimitsDoc {
            neighbors: Some(l.neighbors.into()),
            queue_per_neighbor: Some(l.queue_per_neighbor.into()),
            queue_total: Some(l.queue_total.into()),
            neighbor_reachable_ms: Some(l.neighbor_reachable_ms.into()),
            neighbor_retrans_ms: Some(l.neighbor_retrans_ms.into()),
            neighbor_probes: Some(l.neighbor_probes.into()),
            neighbor_failed_hold_ms: Some(l.neighbor_failed_hold_ms.into()),
            incomplete_per_interface: Some(l.incomplete_per_interface.into()),
            solicitations_per_sec: Some(l.solicitations_per_sec.into()),
            solicitations_burst: Some(l.solicitations_burst.into()),
            icmp_errors_per_sec: Some(l.icmp_errors_per_sec.into()),
            icmp_errors_burst: Some(l.icmp_errors_burst.into()),
        });
    }
    d.batch = s.batch.map(u64::from);
    d.reservation = s.reservation.map(|r| {
        let (packets, time_us) = match r.budget {
            Budget::Packets(n) => (Some(n), None),
            Budget::Time(ns) => (None, Some(ns / 1000)),
        };
        ReservationDoc {
            packets,
            time_us,
            period_us: Some(r.period_ns / 1000),
            weight: (r.weight != 0).then_some(u64::from(r.weight)),
        }
    });
    // The mirror goes with the VR: a restore (a migration's destination) makes it again.
    d.control_plane = topo.vr_index(&cfg.name).and_then(|i| topo.control_plane(i)).map(|c| {
        crate::model::ControlPlaneDoc {
            kind: "linux".into(),
            netns: Some(c.netns.clone()),
            punt_per_sec: Some(c.punt_per_sec.into()),
            punt_burst: Some(c.punt_burst.into()),
            stale_secs: Some(c.stale_secs.into()),
            migrate_netns: c.migrate_netns.clone(),
        }
    });
    d
}

/// The documents of ports `names` in a topology's text, as plain JSON (scalars as text).
fn port_docs(text: &str, names: &[&str]) -> Vec<serde_json::Value> {
    let Ok(node) = yamlpath::parse_document(text, "hosts:, ports:, switches:, vrs:") else {
        return Vec::new();
    };
    let doc = crate::model::plain(&node);
    let mut out: Vec<serde_json::Value> = Vec::new();
    for p in doc["ports"].as_array().into_iter().flatten() {
        let named = p["name"].as_str().is_some_and(|n| names.contains(&n));
        if named && !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

/// The rows worth carrying over (reachable or stale, with a MAC), as a snapshot keeps them.
pub fn learned(rows: Vec<dataplane::NeighborRow>) -> Vec<SnapNeighbor> {
    rows.into_iter()
        .filter_map(|r| {
            let reachable = dataplane::restorable(r.state)?;
            Some(SnapNeighbor {
                interface: r.iface,
                address: r.ip,
                mac: r.mac?.to_string(),
                reachable,
            })
        })
        .collect()
}

/// Learned neighbors from a snapshot or a migration, to put into a VR: each MAC must parse and
/// be an individual, non-zero address (a group MAC as a neighbor's would send what is routed
/// to it to every host on the segment; the zero one, nowhere). The error names the neighbor
/// and the MAC; the caller adds the VR.
pub fn restored_neighbors(
    list: &[SnapNeighbor],
) -> Result<Vec<dataplane::RestoredNeighbor>, PayloadError> {
    list.iter()
        .map(|n| {
            let mac: wire::MacAddr = n
                .mac
                .parse()
                .map_err(|_| PayloadError::NotAMac { address: n.address, mac: n.mac.clone() })?;
            let why = if mac.is_broadcast() {
                Some("the broadcast address")
            } else if mac.is_multicast() {
                Some("a multicast address")
            } else if mac.0 == [0; 6] {
                Some("the zero address")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(PayloadError::GroupMac {
                    address: n.address,
                    mac: mac.to_string(),
                    why,
                });
            }
            Ok(dataplane::RestoredNeighbor {
                iface: n.interface,
                ip: n.address,
                mac,
                reachable: n.reachable,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SnapshotV1 {
        crate::fuzzing::sample_snapshot()
    }

    #[test]
    fn a_switch_interface_is_said_as_its_switch() {
        let text = "\
ports: [{ name: p0, kind: mem }]
switches: [{ name: lan }]
vrs:
  - name: r
    interfaces:
      - { name: e0, switch: lan, vlan: 20, mac: \"02:00:00:00:00:01\", addresses: [10.0.0.1/24] }
      - { name: e1, port: p0, mac: \"02:00:00:00:00:02\", addresses: [10.1.0.1/24] }
";
        let t = Topology::parse(text, "t.yaml", Path::new(".")).unwrap();
        let d = vr_doc(&t, &t.vrs[0], &t.schedule[0]);
        let f = &d.interfaces;
        assert_eq!(
            (f[0].port.as_deref(), f[0].switch.as_deref(), f[0].vlan),
            (None, Some("lan"), Some(20))
        );
        assert_eq!(
            (f[1].port.as_deref(), f[1].switch.as_deref(), f[1].vlan),
            (Some("p0"), None, None)
        );
        // Another host with a switch of that name takes the document as it is.
        let vr = serde_json::to_string(&d).unwrap();
        let other = format!(
            "switches: [{{ name: lan }}]\nvrs: [{vr}]\nports: [{{ name: p0, kind: mem }}]\n"
        );
        let t2 = Topology::parse(&other, "other.yaml", Path::new(".")).unwrap();
        assert_eq!(t2.vrs[0].interfaces[0].ipv4, t.vrs[0].interfaces[0].ipv4);
        assert_eq!(t2.switches[0].members.len(), 1);
    }

    #[test]
    fn round_trips() {
        let s = sample();
        let bytes = s.encode();
        assert_eq!(&bytes[..8], b"RPLXSNAP");
        assert_eq!(decode("f", &bytes).unwrap(), Snapshot::V1(s.clone()));
        let ops = s.route_ops().unwrap();
        assert_eq!(ops.len(), 2);
    }

    #[test]
    fn bad_files_are_refused_with_what_is_wrong() {
        let good = sample().encode();
        let err = |b: &[u8]| decode("x.snap", b).unwrap_err().to_string();
        let mut b = good.clone();
        b[0] = b'X';
        assert!(err(&b).contains("not a routeplex snapshot"), "{}", err(&b));
        let mut b = good.clone();
        b[8] = 9;
        assert!(err(&b).contains("version 9"), "{}", err(&b));
        let mut b = good.clone();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(err(&b).contains("checksum mismatch"), "{}", err(&b));
        assert!(err(&good[..good.len() - 3]).contains("truncated"));
        assert!(err(&good[..10]).contains("truncated"));
        let mut b = good.clone();
        b[16..24].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        assert!(err(&b).contains("more than"), "{}", err(&b));
        let mut b = good.clone();
        b.push(0);
        assert!(err(&b).contains("after the payload"), "{}", err(&b));
        // A route pointing past the next hops, with a valid checksum: refused by index.
        let mut s = sample();
        s.routes[0].next_hop = 7;
        let e = err(&s.encode());
        assert!(e.contains("next hop 7 of 2"), "{e}");
    }
}
