//! Every command's reply, typed: the daemon serialises these and clients read them back into
//! the same structs, so a field is named once, here.
//!
//! Field names and shapes are the wire format (`docs/api.md`): a field may be added, never
//! renamed. Clients ignore fields they do not know (no `deny_unknown_fields`), so a newer
//! daemon's replies still read. Counter maps are keyed by the counter's name and ordered by
//! it, as the wire has always had them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::ErrorBody;

/// Counters by name.
pub type Counts = BTreeMap<String, u64>;

/// `hello`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub v: u32,
    pub commands: Vec<String>,
    pub pid: u32,
}

/// `status`: workers, VRs, ports, switches, replicated VRs, MSRs and the process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub uptime_s: f64,
    pub workers: Vec<WorkerRow>,
    pub vrs: Vec<VrRow>,
    pub ports: Vec<PortRow>,
    pub switches: Vec<SwitchRow>,
    #[serde(default)]
    pub replicated: Vec<ReplicatedRow>,
    #[serde(default)]
    pub msrs: Vec<MsrRow>,
    pub state: String,
    pub memory: Memory,
}

/// The process's memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub rss_bytes: u64,
}

/// One worker thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerRow {
    pub index: usize,
    pub cpu: Option<usize>,
    pub pinned: bool,
    pub rounds: u64,
    pub idle_rounds: u64,
    pub spare_ns: u64,
    pub idle: String,
    pub sleeps: u64,
    pub naps: u64,
    pub slept_s: f64,
    pub vrs: Vec<String>,
    pub stages: Stages,
}

/// Packets and bursts per pipeline stage, over a worker's cells.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    pub rx: Stage,
    pub vr: Stage,
    pub tx: Stage,
}

/// One stage's packets, bursts and their average size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub packets: u64,
    pub bursts: u64,
    pub avg_burst: f64,
}

/// One VR (a replica of a replicated VR is one row each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VrRow {
    pub name: String,
    pub worker: usize,
    /// Counters that are not zero.
    pub counters: Counts,
    pub over_budget: u64,
    pub reservation: Option<ReservationRow>,
    /// A change waiting for the VR's next period (null when none, or when it ends the
    /// reservation).
    pub pending_reservation: Option<Option<ReservationRow>>,
    pub batch: usize,
    pub neighbors: NeighborUse,
    pub interfaces: Vec<InterfaceRow>,
    /// When it first and last sent a transit frame, to its worker's poll: CLOCK_MONOTONIC
    /// in ns, so comparable between data planes on one machine (a migration's handoff gap
    /// is the source's last to the destination's first); absent before any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sent_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sent_ns: Option<u64>,
    /// Routes by source (VRs with a route table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Counts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fib: Option<FibRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneRow>,
}

/// A reservation: a budget of time or packets per period, and a weight for spare capacity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationRow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    pub period_ns: u64,
    pub weight: u32,
}

/// The neighbor table's entries in use, its size, and packets waiting for resolution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighborUse {
    pub used: usize,
    pub size: usize,
    pub queued: usize,
}

/// One interface of a VR.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceRow {
    pub name: String,
    pub mtu: u16,
    pub up: bool,
    /// Held down since a restart of a fenced fleet host, until `interface_set` takes it up
    /// (see `control::hold`); left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

/// A VR's FIB: prefixes per family, memory, next hops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibRow {
    pub ipv4: usize,
    pub ipv6: usize,
    pub bytes: usize,
    pub next_hops: usize,
}

/// A VR's route sync from its control plane's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlPlaneRow {
    pub netns: Option<String>,
    pub route_ops: u64,
    pub skipped: u64,
    pub overruns: u64,
    pub refused: u64,
    pub stale: u64,
    pub stale_expired: u64,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PortRow {
    pub name: String,
    pub rx: u64,
    pub tx: u64,
    pub rx_dropped: u64,
    pub tx_full: u64,
    /// Drops by reason, every reason.
    pub drops: Counts,
    /// `up`, or `down: WHY`.
    pub status: String,
    pub burst: usize,
    /// How the port runs, where the kernel chose at open (AF_XDP); null for other kinds.
    pub mode: Option<String>,
    /// The backend's own counters (`vxlan`: drops by reason, datagrams sent).
    #[serde(default)]
    pub backend: Counts,
    #[serde(default)]
    pub impair: Option<ImpairRow>,
}

/// A port's impairment: its settings, counters, drops by reason, frames waiting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImpairRow {
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub distribution: String,
    pub loss: Option<Loss>,
    pub duplicate_pct: f64,
    pub reorder_pct: f64,
    pub corrupt_pct: f64,
    pub rate_bps: u64,
    pub limit: u32,
    pub seed: u64,
    pub offered: u64,
    pub sent: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    pub held: usize,
    pub drops: Counts,
}

/// An impairment's loss model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Loss {
    Random {
        random_pct: f64,
    },
    /// Gilbert-Elliott, as netem names its four parameters.
    Gilbert {
        p_pct: f64,
        r_pct: f64,
        #[serde(rename = "1-h_pct")]
        bad_pct: f64,
        #[serde(rename = "1-k_pct")]
        good_pct: f64,
    },
}

/// One switch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchRow {
    pub name: String,
    pub counters: SwitchCountersRow,
    /// Drops by reason, every reason.
    pub drops: Counts,
    pub members: Vec<MemberRow>,
    /// Multicast groups registered by snooping now.
    pub groups: usize,
}

/// A switch's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchCountersRow {
    pub rx: u64,
    pub forwarded: u64,
    pub flooded: u64,
    pub flood_copies: u64,
    pub miss: u64,
    pub learned: u64,
    pub moved: u64,
    pub move_refused: u64,
    /// Frames sent on to a VR moving away live (see `dataplane::Switch::hand_off`); absent
    /// from a daemon older than the field.
    #[serde(default)]
    pub handed_back: u64,
    pub learn_limited: u64,
    pub aged: u64,
    pub snooped: u64,
    pub snooped_copies: u64,
    pub joins: u64,
    pub leaves: u64,
    pub expired: u64,
    pub queries: u64,
    pub groups_full: u64,
}

/// A switch member: its port and its drops by reason (reasons that are not zero).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRow {
    pub port: String,
    pub drops: Counts,
}

/// A replicated VR: its replicas and the sum of their counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicatedRow {
    pub name: String,
    /// Replicas the topology asks for.
    pub replicas: usize,
    /// Replicas running.
    pub running: usize,
    pub instances: Vec<ReplicaRow>,
    /// The replicas' counters summed (those that are not zero).
    pub counters: Counts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fib: Option<ReplicatedFib>,
}

/// One replica of a replicated VR.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaRow {
    pub name: String,
    pub replica: usize,
    pub worker: usize,
    pub rx_packets: u64,
    pub forwarded: u64,
}

/// The FIB the replicas share.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicatedFib {
    pub ipv4: usize,
    pub ipv6: usize,
    pub generation4: u64,
    pub generation6: u64,
}

/// A multistage router: its back-ends and what its front end offered them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsrRow {
    pub name: String,
    /// Whether the front end is running.
    pub front_end: bool,
    /// Back-ends per state (`active`, `draining`, `off`, `failed`).
    pub states: Counts,
    pub offered: u64,
    pub failures: u64,
    pub backends: Vec<BackendRow>,
}

/// One back-end of a multistage router.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendRow {
    pub backend: usize,
    pub replica: String,
    pub worker: Option<usize>,
    pub state: String,
    pub pinned: u32,
    pub refused: u64,
    pub detect_ns: u64,
    pub rx_packets: u64,
    pub forwarded: u64,
}

/// `route_add`, `route_replace`, `route_delete`: what the batch did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutesApplied {
    pub added: usize,
    pub replaced: usize,
    pub deleted: usize,
    pub fib_changes: usize,
    pub new_next_hops: usize,
    /// The FIB versions (IPv4, IPv6) after it.
    pub generation: [u64; 2],
}

/// `route_list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteList {
    pub vr: String,
    pub routes: Vec<RouteRow>,
}

/// `route_lookup`: what the VR's published FIB does with each address asked about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteLookups {
    pub vr: String,
    pub lookups: Vec<Lookup>,
}

/// One address's verdict: `local`, `blackhole`, `via GW interface IF`, `interface IF` (on
/// link), `multipath [..]`, `none` and the other adjacencies by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lookup {
    pub address: IpAddr,
    pub forward: String,
}

/// One route of a list: where it goes is `via` (with an optional `interface`), `interface`
/// alone, `blackhole`, or `local` (an address of the VR's own: it answers it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRow {
    pub prefix: IpNet,
    pub source: String,
    /// Whether the FIB uses it.
    pub best: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blackhole: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local: bool,
}

/// `neighbor_list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighborList {
    pub vr: String,
    pub neighbors: Vec<NeighborRow>,
}

/// One neighbor (ARP/NDP) entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighborRow {
    pub interface: Option<String>,
    pub address: IpAddr,
    pub mac: Option<String>,
    /// `incomplete`, `reachable`, `stale`, `failed` or `static`.
    pub state: String,
    pub queued: u16,
}

/// `neighbor_flush`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighborFlushed {
    pub vr: String,
    /// Packets that waited for the forgotten neighbors, dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_queued: Option<u64>,
}

/// `interface_set`: what was asked, and the interface's addresses after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceSet {
    pub vr: String,
    pub interface: String,
    pub mtu: Option<u16>,
    pub up: Option<bool>,
    pub addresses: Vec<String>,
}

/// `vr_add`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VrAdded {
    pub vr: String,
    /// The plan carried out, one line a step.
    pub plan: Vec<String>,
}

/// `vr_remove`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VrRemoved {
    pub plan: Vec<String>,
}

/// `reserve`: the VR's reservation now and the one waiting for its next period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reserved {
    pub vr: String,
    pub reservation: Option<ReservationRow>,
    pub pending_reservation: Option<Option<ReservationRow>>,
}

/// `move`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    /// The VRs that moved (those sharing the VR's ports, itself included).
    pub moved: Vec<String>,
    pub from: usize,
    pub to: usize,
}

/// `apply`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub dry_run: bool,
    /// One line a step.
    pub plan: Vec<String>,
    /// The VRs left alone.
    pub unchanged: Vec<String>,
    /// The plan as `routeplex apply` prints it.
    pub text: String,
}

/// `capture_start`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStarted {
    pub id: u64,
    /// As asked: a port or `VR:INTERFACE`.
    pub point: String,
    /// The port it is on.
    pub port: String,
    pub ring: usize,
}

/// `capture_read`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRead {
    pub id: u64,
    pub port: String,
    pub frames: Vec<FrameRow>,
    /// Copies the ring took and lost so far.
    pub taken: u64,
    pub lost: u64,
    /// All `count` frames were read.
    pub done: bool,
}

/// One captured frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameRow {
    /// Unix time, nanoseconds.
    pub ts_ns: u64,
    /// `rx`, `tx` or `drop`.
    pub dir: String,
    /// Why it was dropped (drops only).
    pub reason: Option<String>,
    /// Its length on the wire.
    pub len: u32,
    /// The bytes kept, in hex.
    pub hex: String,
}

/// `capture_stop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStopped {
    pub id: u64,
    pub taken: u64,
    pub lost: u64,
}

/// `trace_start`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStarted {
    pub vr: String,
    pub count: u32,
}

/// `trace_read`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRead {
    pub vr: String,
    pub packets: Vec<TraceRow>,
    /// Packets the trace still waits for; at 0 it has ended.
    pub left: u32,
}

/// One traced packet: demux, lookup, and where it went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRow {
    /// The worker's time.
    pub ts_ns: u64,
    pub port: String,
    pub len: u16,
    pub interface: String,
    /// `0x0800`, ...
    pub ethertype: String,
    /// Null when the packet was settled before the lookup.
    pub lookup: Option<TraceLookup>,
    pub egress: Option<String>,
    pub drop: Option<String>,
}

/// A traced packet's lookup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceLookup {
    pub destination: IpAddr,
    pub next_hop: u16,
    /// What the next hop means, for people (`via 10.0.1.2 on e0`, `local`, ...).
    pub adjacency: String,
}

/// `snapshot`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotWritten {
    pub vr: String,
    pub file: String,
    pub bytes: usize,
    /// The file format's version.
    pub format: u32,
    pub routes: usize,
    pub neighbors: usize,
}

/// `restore`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Restored {
    pub vr: String,
    pub routes: usize,
    pub neighbors: usize,
    pub plan: Vec<String>,
    pub ms: f64,
}

/// `migrate`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Migrated {
    pub vr: String,
    pub to: String,
    pub routes: usize,
    pub chunks: usize,
    pub bytes_moved: u64,
    pub precopy_ms: f64,
    /// The stop to the destination's commit.
    pub stop_ms: f64,
    pub total_ms: f64,
    pub drain_ms: f64,
    /// Frames sent on through the handoff tunnel (null without one).
    pub forwarded: Option<u64>,
    pub forward_failed: Option<u64>,
    /// When the VR here last sent a transit frame, before its stop: CLOCK_MONOTONIC in ns,
    /// as `status`'s `last_sent_ns` (the destination's `first_sent_ns` less this is the
    /// handoff gap on the data planes' own clock); null if it sent none.
    #[serde(default)]
    pub last_sent_ns: Option<u64>,
}

/// `migrate_commit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    pub vr: String,
    /// Learned neighbors taken.
    pub neighbors: usize,
    /// Announcement frames sent.
    pub announced: usize,
    /// Whether the source sends on what reaches it.
    pub tunnel: bool,
}

/// `announce`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announced {
    pub vr: String,
    pub frames: usize,
}

/// `impair`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Impaired {
    pub port: String,
    pub plan: Vec<String>,
}

/// `stop`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopping {
    /// `stopping`.
    pub state: String,
}

/// Declares [`Answer`] (one variant per reply struct), a conversion from each struct into it
/// and back, and [`Answer::read`], which reads a reply line as the struct of the command it
/// answers.
macro_rules! answers {
    ($($variant:ident($ty:ty) for $($name:literal)|+;)*) => {
        /// Any command's reply: what [`crate::Node::execute`] returns and the daemon
        /// serialises (as the struct itself: the variant is not on the wire; the command
        /// says which struct a reply is).
        #[derive(Clone, Debug, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum Answer {
            $($variant($ty),)*
        }

        $(
            impl From<$ty> for Answer {
                fn from(r: $ty) -> Answer {
                    Answer::$variant(r)
                }
            }

            impl TryFrom<Answer> for $ty {
                type Error = crate::ControlError;

                fn try_from(a: Answer) -> Result<$ty, crate::ControlError> {
                    match a {
                        Answer::$variant(r) => Ok(r),
                        other => Err(crate::ControlError::State(format!(
                            "expected a {} reply, got {}",
                            stringify!($variant),
                            other.kind()
                        ))),
                    }
                }
            }
        )*

        impl Answer {
            /// The reply struct's name, for errors.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Answer::$variant(_) => stringify!($variant),)*
                }
            }

            /// Reads `line`, the reply to command `cmd` (its wire name), into that command's
            /// struct. The daemon's refusal is [`crate::ControlError::Invalid`] with its
            /// message and code; a line that is not such a reply (bad JSON, a field missing
            /// or of the wrong type, an unknown command) is [`crate::ControlError::State`].
            pub fn read(cmd: &str, line: &[u8]) -> Result<Answer, crate::ControlError> {
                match cmd {
                    $($($name)|+ => read_as::<$ty>(line),)*
                    _ => Err(crate::ControlError::BadRequest(format!("{cmd:?} is no command"))),
                }
            }
        }
    };
}

answers! {
    Hello(Hello) for "hello";
    Status(Box<Status>) for "status";
    Routes(RoutesApplied) for "route_add" | "route_replace" | "route_delete";
    RouteList(RouteList) for "route_list";
    RouteLookups(RouteLookups) for "route_lookup";
    NeighborList(NeighborList) for "neighbor_list";
    NeighborFlushed(NeighborFlushed) for "neighbor_flush";
    InterfaceSet(InterfaceSet) for "interface_set";
    VrAdded(VrAdded) for "vr_add";
    VrRemoved(VrRemoved) for "vr_remove";
    Reserved(Reserved) for "reserve";
    Moved(Moved) for "move";
    Applied(Applied) for "apply";
    CaptureStarted(CaptureStarted) for "capture_start";
    CaptureRead(CaptureRead) for "capture_read";
    CaptureStopped(CaptureStopped) for "capture_stop";
    TraceStarted(TraceStarted) for "trace_start";
    TraceRead(TraceRead) for "trace_read";
    Snapshot(SnapshotWritten) for "snapshot";
    Restored(Restored) for "restore";
    Migrated(Migrated) for "migrate";
    Committed(Committed) for "migrate_commit";
    Announced(Announced) for "announce";
    Impaired(Impaired) for "impair";
    Stopping(Stopping) for "stop";
}

impl From<Status> for Answer {
    fn from(s: Status) -> Answer {
        Answer::Status(Box::new(s))
    }
}

impl TryFrom<Answer> for Status {
    type Error = crate::ControlError;

    fn try_from(a: Answer) -> Result<Status, crate::ControlError> {
        Box::<Status>::try_from(a).map(|b| *b)
    }
}

fn read_as<T: DeserializeOwned + Into<Answer>>(line: &[u8]) -> Result<Answer, crate::ControlError> {
    let r: super::Reply<T> = serde_json::from_slice(line)
        .map_err(|e| crate::ControlError::State(format!("unreadable reply ({e})")))?;
    r.into_result().map(Into::into).map_err(ErrorBody::into_error)
}

/// A reply shows as its line on the wire (one JSON object).
impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// As [`Answer`]'s.
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// The live topology page's numbers (the metrics endpoint's `GET /api/graph`, not a command's
/// reply): the data plane's clock when sampled, the graph, and per port, VR and switch the
/// counters the page turns into rates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphPage {
    pub uptime_s: f64,
    pub graph: GraphRows,
    pub ports: Vec<PagePort>,
    pub vrs: Vec<PageVr>,
    pub switches: Vec<PageSwitch>,
}

/// The topology as nodes and edges (edges name their nodes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphRows {
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
}

/// A node of the topology's graph: a VR, a switch, a port's far end...
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphNode {
    pub kind: String,
    pub name: String,
}

/// A link between two nodes, with the port whose counters it shows and its impairment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphEdge {
    pub a: String,
    pub b: String,
    pub label: String,
    pub port: Option<String>,
    pub impair: Option<String>,
}

/// A port's counters on the live page: `dropped` is every reason, the impairment's included.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePort {
    pub name: String,
    pub up: bool,
    pub rx: u64,
    pub tx: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub dropped: u64,
    /// The impairment, in words.
    pub impair: Option<String>,
    /// Frames waiting on the impaired link.
    pub held: Option<usize>,
}

/// A VR's counters on the live page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageVr {
    pub name: String,
    pub worker: usize,
    pub received: u64,
    pub forwarded: u64,
    pub dropped: u64,
    pub local_in: u64,
    pub echo_replies: u64,
}

/// A switch's counters on the live page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageSwitch {
    pub name: String,
    pub received: u64,
    pub dropped: u64,
}
