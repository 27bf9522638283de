//! The topology file: ports, virtual routers, their interfaces, routes and neighbors.
//!
//! A topology is read from YAML, checked, and turned into the data plane's plain-data config
//! ([`dataplane::config::VrConfig`]). Everything the data plane trusts (every index in range,
//! every gateway reachable, no ambiguous demux) is established here, and every rejection names
//! the file, line, column, field and offending value (see [`TopologyError`]).
//!
//! # Format
//!
//! ```yaml
//! workers: 2                  # optional: worker threads, or a list of CPUs ([0, 2]); default
//!                             # one per online CPU, each pinned to its CPU
//! idle: adaptive              # optional: what a worker without traffic does. poll: spin
//!                             # (lowest latency, a whole CPU each); adaptive (default): spin
//!                             # while traffic flows, then yield, then after ~1 ms of quiet
//!                             # (50 us when frames come further apart than that)
//!                             # sleep in poll(2) on its ports' descriptors until frames come
//!                             # (memif: its eventfds; afxdp, afpacket, tap: their sockets;
//!                             # mem ports have none, so a worker with one naps ~100 us);
//!                             # interrupt: sleep as soon as a poll finds nothing
//! ingress_queues: { limit: 256, quantum: 32, per_pass: 64 }  # optional (off by default):
//!                             # a port that feeds several VRs is only classified into a queue
//!                             # per VR (limit frames each; the rest dropped on the VR as
//!                             # ingress_queue_full), served round-robin (quantum frames a turn,
//!                             # per_pass frames a pass) under each VR's reservation, so a
//!                             # flooded VR cannot fill the shared ring; `{}`: these defaults
//! metrics:                    # optional (off by default): Prometheus / OpenMetrics text at
//!   listen: 127.0.0.1:9469    # http://ADDRESS/metrics (default address 127.0.0.1:9469; IPv6
//!                             # quoted: "[::1]:9469"). No authentication: keep it on loopback
//!                             # or a management network. Served by a control-side thread from
//!                             # a sample taken between the workers' polls (control::metrics)
//! hosts:                      # Linux hosts `routeplex up` makes: a namespace each, eth0 in it
//!   - name: ha                # the namespace's name: letters, digits, - _ . (32 at most)
//!     addresses: [10.9.0.2/24, "2001:db8:9::2/64"]
//!     gateways: [10.9.0.1, "2001:db8:9::1"]  # default routes, one per family, on-subnet
//!     mtu: 1500               # optional, of both ends of the veth
//! ports:                      # where frames enter and leave the host
//!   - name: p0                # unique; 1 to 64 characters, no spaces
//!     kind: mem               # in-process pair (tests, benchmarks, the demo)
//!     ring: 1024              # mem only; optional power of two in 2..=65536, default 1024
//!     burst: 64               # any kind; optional 1..=256: frames received per poll (default 256)
//!   - name: pa                # kernel ports: afxdp, afpacket, each on an interface or a host
//!     kind: afxdp
//!     host: ha                # a veth `up` makes: rpx-pa here, eth0 in host ha
//!   - { name: pk, kind: afpacket, interface: veth9 }   # an interface that exists already
//!   - { name: pn, kind: afxdp, interface: veth3, netns: blue }  # ... in namespace blue
//!                             # (/run/netns/blue, e.g. from ip netns add); up never makes it
//!   - { name: px, kind: afxdp, interface: veth4, ring: 2048, frame_size: 2048 }  # afxdp
//!                             # only: ring (power of two 8..=32768, default 4096; UMEM of
//!                             # 2 x ring frames), frame_size (2048 or 4096), xdp_mode (auto,
//!                             # driver, skb), zero_copy (auto, on, off; default auto),
//!                             # threaded_napi (false; true: the interface's NAPI runs as a
//!                             # kernel thread pinned to the port's worker's CPUs, driver mode),
//!                             # queues (all (default): a socket on every rx queue; N: 0..N)
//!   - { name: pt, kind: tap, interface: tap9 }          # a tap routeplex creates
//!   - { name: pv, kind: vhost-user, socket: /run/vm1.sock }  # a QEMU guest's virtio-net NIC
//!                             # (mode: server (default) or client; queues: pairs, 1..=16)
//!   - name: p1
//!     kind: mem
//!   - { name: h1, kind: mem }
//!   - { name: h2, kind: mem }
//!   - { name: t0, kind: mem }
//! switches:                   # learning switches (bridge domains)
//!   - name: lan               # unique
//!     members:                # ports; a member port carries no VR interface directly
//!       - { port: h1 }                        # access port, VLAN 1
//!       - { port: h2, vlan: 10 }              # access port, VLAN 10 (untagged on the wire)
//!       - { port: t0, trunk: [10, 20], native: 1 }   # tagged 10 and 20, untagged is VLAN 1
//!     static_macs:            # stations learning never moves or ages
//!       - { mac: 02:00:00:00:0a:02, port: h2 }       # vlan: needed when the port has several
//!     mac_limit: 4096         # optional, 1..=1000000: learned stations at most
//!     aging_s: 300            # optional, 1..=86400: a silent station is forgotten after this
//!     snooping: true          # optional: IGMP/MLD snooping (multicast only to joined members)
//!     groups: 256             # optional, 1..=65536: multicast groups registered at most
//!     group_timeout_s: 260    # optional, 1..=86400: a membership not reported again ends
//! vrs:
//!   - name: vr1               # unique
//!     interfaces:
//!       - name: eth0          # unique within the VR
//!         port: p0            # a port above
//!         vlan: 10            # optional 802.1Q id 1..=4094; untagged if absent
//!         mac: 02:00:00:00:01:00   # unicast; frames to it reach this interface
//!         mtu: 1500           # optional, 68..=9216 (>= 1280 with IPv6), default 1500
//!         addresses: [10.0.0.1/24, "2001:db8:0:1::1/64"]   # address/subnet length
//!       - name: eth1
//!         port: p1
//!         mac: 02:00:00:00:01:01
//!         addresses: [10.0.1.1/24]
//!       - name: lan10         # on a switch instead of a port: joined to it by an internal
//!         switch: lan         # link (two ports of kind Link), in the switch's VLAN `vlan`
//!         vlan: 10            # (default 1); the interface itself sends untagged
//!         mac: 02:00:00:00:01:02
//!         addresses: [10.0.10.1/24]
//!     routes:                 # each has via, via + interface, interface, or blackhole
//!       - { prefix: 0.0.0.0/0, via: 10.0.1.2 }              # gateway on a connected subnet
//!       - { prefix: 192.168.0.0/16, via: 10.0.1.3, interface: eth1 }   # on-link via eth1
//!       - { prefix: 172.16.0.0/12, interface: eth1 }         # directly connected
//!       - { prefix: 198.51.100.0/24, blackhole: true }       # dropped and counted
//!       - { prefix: "2001:db8:a::/48", via: "fe80::1", interface: eth0 }
//!     neighbors:              # static ARP/NDP entries
//!       - { address: 10.0.1.2, mac: 02:00:00:00:02:01, interface: eth1 }
//!     tables:                 # bulk routes: lines "prefix next-hop-id" (fib::prefix_file)
//!       - file: prefixes/ipv4.txt   # relative to the topology file; ~/ is $HOME/
//!         next_hops: [10.0.1.2, 10.0.1.3, { via: "fe80::2", interface: eth0 }]
//!     limits:                 # optional; see below
//!       neighbors: 1024
//!       icmp_errors_per_sec: 1000
//!     worker: 1               # optional: the worker (0-based) it runs on; default: placed
//!                             # automatically, balancing VRs across workers
//!     control_plane: linux    # optional: a Linux namespace mirroring the VR, for routing
//!                             # daemons (or { kind: linux, netns, punt_per_sec, punt_burst };
//!                             # see cp.rs and docs/control-plane.md)
//!     batch: 64               # optional 1..=256: packets it processes per burst; the rest of
//!                             # its share of a burst is dropped (batch_limit)
//!     reservation:            # optional: a budget per period (seed 000 §3.4); once spent, its
//!       time_us: 300          # packets are dropped right after demux (over_budget) until the
//!       period_us: 1000       # next period. time_us (worker time) or packets; period_us
//!       weight: 0             # 10..=10000000, default 1000; weight 0..=1000, default 0: a
//!                             # share of spare capacity once the budget is spent (0: hard cap)
//! ```
//!
//! `msrs:` (multistage software routers: a replicated VR's replicas as back-ends behind load
//! balancers, switched on and off by load) is annotated in `msr.rs`.
//!
//! VRs that share a port, a switch or an internal link form one *cell* and run on one worker;
//! placing two of them on different workers is an error. A running VR can be moved to another
//! worker, and its reservation changed (`control::runtime`).
//!
//! Quoting IPv6 values is optional for this parser but keeps other YAML tools happy.
//!
//! In a table, next-hop id `n` of an IPv4 prefix goes via the `n % k`-th of the `k` IPv4 entries
//! of `next_hops`, and likewise for IPv6, so one list serves a file holding both families; a
//! gateway listed twice gets twice the share. Each next hop is checked as a route's `via` is.
//!
//! Precedence when prefixes meet: a connected subnet beats a static route or table entry for
//! the same prefix, and a static route beats a table entry. The first pair is an error for a
//! static route (it could never be used); table entries silently yield, so a static route can
//! override one entry of a large table. A prefix in two tables, or twice in one, is an error.
//! Static routes come first in [`VrConfig::routes`], in file order, then table entries.
//!
//! `limits` (each optional; the default is [`dataplane::config::VrLimits::default`]):
//!
//! | key | range |
//! |---|---|
//! | `neighbors` | 1..=1000000 |
//! | `queue_per_neighbor` | 0..=64 |
//! | `queue_total` | 0..=65535, at least `queue_per_neighbor` |
//! | `neighbor_reachable_ms` | 1000..=3600000 |
//! | `neighbor_retrans_ms` | 100..=60000 |
//! | `neighbor_probes` | 1..=10 |
//! | `neighbor_failed_hold_ms` | 0..=3600000 |
//! | `incomplete_per_interface` | 0..=65535 (0: no cap but the table's size) |
//! | `solicitations_per_sec` | 0..=1000000 (0: no limit) |
//! | `solicitations_burst` | 0..=1000000 |
//! | `icmp_errors_per_sec` | 0..=1000000 (0: no ICMP errors) |
//! | `icmp_errors_burst` | 0..=1000000 |
//!
//! # Extending
//!
//! Each section is one function reading one mapping (`Host::port`, `vr::vr`, `Vr::route`...)
//! with its allowed keys in a constant beside it; a new section (like `workers`, in `run.rs`)
//! is a new key in `TOP_KEYS` and a new function, and a new port kind is a new arm in
//! `Host::port` plus a [`PortKind`] variant, which the compiler then asks every user of
//! `PortKind` to handle. Whatever must be unique across the host lives in `Host`.

mod cp;
mod error;
mod hosts;
mod impair;
mod msr;
mod run;
mod summary;
pub use summary::table as text_table;
mod switch;
mod table;
mod vr;
mod vxlan;
mod yaml;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use dataplane::config::{IfaceId, PortId, VrConfig};
use dataplane::SwitchConfig;
use wire::MacAddr;

pub use cp::ControlPlaneSpec;
pub use error::{ErrorKind, TopologyError};
pub use hosts::{HostSpec, HOST_IFNAME};
pub use msr::MsrSpec;
pub use run::{
    cells, reservation_from_words, CellPlan, Idle, MetricsConfig, MigrationConfig,
    ReservationWordsError, VrSchedule, Workers, DEFAULT_METRICS_LISTEN, DEFAULT_PERIOD_US,
};
pub use vr::bad_prefix_length;
pub use vxlan::VxlanSpec;

use table::Tables;
use yaml::{BadKind, Result, Value};

/// A validated topology: the host's ports and its virtual routers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// The file name as given to [`Topology::load`] or [`Topology::parse`].
    pub source: String,
    /// Ports in file order: [`PortId`] `i` is `ports[i]`.
    pub ports: Vec<PortSpec>,
    /// Virtual routers in file order, ready for the data plane.
    pub vrs: Vec<VrConfig>,
    /// Learning switches in file order; a VR interface on a switch is joined to it by a
    /// [`PortKind::Link`] pair, whose switch end is the switch's last members.
    pub switches: Vec<SwitchConfig>,
    /// Hosts (network namespaces) `routeplex up` makes, each attached to one port.
    pub hosts: Vec<HostSpec>,
    /// How many workers run the data plane, and on which CPUs.
    pub workers: Workers,
    /// What workers do when their ports are quiet (`idle:`; default adaptive).
    pub idle: Idle,
    /// Per-VR ingress queues on ports that feed several VRs (`ingress_queues:`); `None`: off
    /// (such ports run to completion).
    pub ingress_queues: Option<dataplane::IngressQueues>,
    /// Where the Prometheus endpoint listens (`metrics:`); `None`: no endpoint (the default).
    pub metrics: Option<MetricsConfig>,
    /// VR migration (`migration:`); `None`: this host neither sends nor takes VRs.
    pub migration: Option<run::MigrationConfig>,
    /// How each VR runs (worker, reservation, batch limit): `schedule[i]` is `vrs[i]`'s.
    pub schedule: Vec<VrSchedule>,
    /// Each VR's Linux control-plane mirror (`control_plane:`), if it has one:
    /// `control_planes[i]` is `vrs[i]`'s (empty when no VR has one).
    pub control_planes: Vec<Option<ControlPlaneSpec>>,
    /// Multistage software routers (`msrs:`), each over a replicated VR.
    pub msrs: Vec<MsrSpec>,
    /// Interfaces given `up: false` (administratively down), per VR: `iface_down[i]` is
    /// `vrs[i]`'s, in interface order (empty when no interface is down).
    pub iface_down: Vec<Vec<IfaceId>>,
    /// The sum of each VR's `tables:` (each file's path, gateways and bytes; see
    /// [`crate::checkpoint`]): `table_sums[i]` is `vrs[i]`'s, `None` when it has no table or
    /// its files were not read (empty when no VR has a table).
    pub table_sums: Vec<Option<u32>>,
    /// Set by [`Topology::load_deferring_tables`]: the file to read again for the routes of
    /// the VRs' tables, which `vrs` lacks until then.
    pub tables_deferred: Option<std::path::PathBuf>,
}

/// One port of the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSpec {
    /// Unique name.
    pub name: String,
    /// Which backend, with its settings.
    pub kind: PortKind,
    /// Frames received per poll (1..=256); `None`: the worker's default.
    pub burst: Option<u16>,
    /// What frames leaving by this port suffer (`impair:`); `None`: nothing.
    pub impair: Option<dataplane::impair::ImpairConfig>,
}

/// How a kernel-facing port reaches its Linux interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// An interface that exists already; `up` and `down` never create or remove it.
    Interface(String),
    /// One end of a veth pair `up` makes: `ifname` stays in the root namespace for routeplex,
    /// its peer is `eth0` in the namespace of `hosts[host]`.
    Host { host: usize, ifname: String },
    /// An interface that exists already in another network namespace (`/run/netns/NETNS`, as
    /// `ip netns add` makes): the port opens it there, so one data plane serves interfaces of
    /// namespaces it did not make. `up` and `down` never create or remove either.
    Netns { netns: String, ifname: String },
}

impl Attach {
    /// The interface routeplex opens.
    pub fn ifname(&self) -> &str {
        match self {
            Attach::Interface(n)
            | Attach::Host { ifname: n, .. }
            | Attach::Netns { ifname: n, .. } => n,
        }
    }

    /// The namespace the port opens its interface in, as a path (`None`: routeplex's own).
    pub fn netns_path(&self) -> Option<std::path::PathBuf> {
        match self {
            Attach::Netns { netns, .. } => Some(std::path::Path::new("/run/netns").join(netns)),
            _ => None,
        }
    }
}

/// A memif port's settings (see `ports::memif::MemifOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemifSpec {
    /// Listen (server, VPP "master") or connect (client, "slave").
    pub server: bool,
    /// Control socket: a path, or `@name` for an abstract socket.
    pub socket: String,
    /// Interface id, agreed with the peer.
    pub id: u32,
    /// Shared secret the server requires (at most 24 bytes).
    pub secret: Option<String>,
    /// Rings per direction.
    pub queues: u16,
    /// log2 of the slots per ring.
    pub log2_ring: u8,
    /// Bytes per shared buffer (client role).
    pub buffer: u32,
    /// Ask the peer to signal each receive ring's eventfd instead of being polled.
    pub interrupt: bool,
}

/// An AF_XDP port's settings (see `ports::afxdp::AfXdpOptions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpSpec {
    /// Entries of each of the socket's four rings (rx, tx, fill, completion), a power of two;
    /// the UMEM holds twice as many frames, half for each direction.
    pub ring: u32,
    /// Bytes per UMEM frame: 2048 or 4096 (a jumbo frame spans several either way).
    pub frame_size: u32,
    /// XDP attach mode.
    pub mode: ports::afxdp::XdpMode,
    /// Copy or zero-copy.
    pub bind: ports::afxdp::BindMode,
    /// Threaded NAPI pinned to the port's worker (`ports::afxdp::AfXdpOptions::threaded_napi`).
    pub threaded_napi: bool,
    /// Receive queues to bind, a socket each: queues `0..n`, or `None` for every queue the
    /// interface has (the default).
    pub queues: Option<u32>,
}

impl Default for XdpSpec {
    fn default() -> Self {
        XdpSpec {
            ring: ports::afxdp::DEFAULT_FRAMES / 2,
            frame_size: 2048,
            mode: ports::afxdp::XdpMode::Auto,
            bind: ports::afxdp::BindMode::Auto,
            threaded_napi: false,
            queues: None,
        }
    }
}

impl XdpSpec {
    /// The port options these settings make, for an interface in namespace `netns`.
    pub fn options(&self, netns: Option<std::path::PathBuf>) -> ports::afxdp::AfXdpOptions {
        ports::afxdp::AfXdpOptions {
            frames: self.ring * 2,
            frame_size: self.frame_size,
            mode: self.mode,
            bind: self.bind,
            threaded_napi: self.threaded_napi,
            queues: self.queues.map_or(ports::afxdp::Queues::All, ports::afxdp::Queues::First),
            netns,
            ..Default::default()
        }
    }
}

/// A vhost-user port's settings (see `ports::vhost::VhostUserOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VhostUserSpec {
    /// Listen (routeplex creates the socket; QEMU's default) or connect (the frontend listens:
    /// QEMU `server=on`, DPDK `virtio_user` `server=1`).
    pub server: bool,
    /// The socket file.
    pub socket: String,
    /// Queue pairs offered.
    pub queues: u16,
}

/// A port backend and its settings. Deliberately exhaustive: a new backend should make every
/// `match` on it fail to compile until it is handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// One end of an in-process pair (`ports::mem::pair`), with `ring` slots per direction.
    Mem {
        /// Ring size, a power of two.
        ring: usize,
    },
    /// One end of an internal link inside the host, whose other end is port `peer`: made for a
    /// VR interface that sits on a switch (the VR's end carries the interface, the other end
    /// is a member of the switch).
    Link {
        /// The other end.
        peer: PortId,
    },
    /// AF_XDP on a Linux interface (an XDP program redirects its frames to routeplex).
    AfXdp(Attach, XdpSpec),
    /// AF_PACKET (TPACKET_V3) on a Linux interface.
    AfPacket(Attach),
    /// A memif port (shared memory with another process, DPDK/VPP-compatible).
    Memif(MemifSpec),
    /// A vhost-user port: a virtio-net device for a QEMU guest or a DPDK `virtio_user` app.
    VhostUser(VhostUserSpec),
    /// A VXLAN segment (one VNI) to other hosts over this host's underlay address.
    Vxlan(VxlanSpec),
    /// A tap interface routeplex creates (in the root namespace) and the Linux stack sees.
    Tap {
        /// The interface name.
        ifname: String,
    },
    /// The tap in a VR's control-plane namespace that mirrors one of its interfaces (made for
    /// `control_plane:`, named after the interface): what the VR punts arrives there, what the
    /// namespace sends there leaves by the interface.
    Mirror {
        /// The namespace.
        netns: String,
        /// The VR (index into [`Topology::vrs`]) and its interface.
        vr: usize,
        iface: u16,
    },
}

/// Keys of the top-level mapping.
// `fleet` is read by the fleet crate (`routeplex run` starts its agent): control only lets
// the section through, so it never learns the fleet's types.
const TOP_KEYS: &[&str] = &[
    "workers",
    "idle",
    "ingress_queues",
    "metrics",
    "migration",
    "hosts",
    "ports",
    "switches",
    "vrs",
    "msrs",
    "fleet",
];
/// Port kinds this build provides.
const PORT_KINDS: &[&str] = &["mem", "memif", "afxdp", "afpacket", "tap", "vhost-user", "vxlan"];
/// Port kinds the design names but this build lacks: asking for one is `ErrorKind::Unavailable`
/// rather than a typo, so a file written for a later build says so.
const PLANNED_PORT_KINDS: &[&str] = &[];
const MEMIF_KEYS: &[&str] = &[
    "name", "kind", "role", "socket", "id", "secret", "queues", "ring", "buffer", "rx_mode",
    "burst", "impair",
];
const MEM_KEYS: &[&str] = &["name", "kind", "ring", "burst", "impair"];
const KERNEL_KEYS: &[&str] = &["name", "kind", "interface", "host", "netns", "burst", "impair"];
const AFXDP_KEYS: &[&str] = &[
    "name",
    "kind",
    "interface",
    "host",
    "netns",
    "burst",
    "impair",
    "ring",
    "frame_size",
    "xdp_mode",
    "zero_copy",
    "threaded_napi",
    "queues",
];
const TAP_KEYS: &[&str] = &["name", "kind", "interface", "burst", "impair"];
const VHOST_USER_KEYS: &[&str] = &["name", "kind", "socket", "mode", "queues", "burst", "impair"];
/// The root-namespace end of a host's veth is this prefix and the port's name.
const VETH_PREFIX: &str = "rpx-";
const DEFAULT_RING: usize = 1024;

/// The largest topology file [`Topology::load`] reads; real ones are a few kilobytes.
pub const MAX_TOPOLOGY_BYTES: u64 = 16 << 20;

impl Topology {
    /// Reads and validates a topology file and the table files it names. Only a regular file
    /// of at most [`MAX_TOPOLOGY_BYTES`] is read (see [`yamlpath::read_file`]).
    pub fn load(path: &Path) -> std::result::Result<Topology, TopologyError> {
        Topology::load_with(path, |dir| Tables::Read(dir))
    }

    /// As [`load`](Self::load), without reading the table files (`tables:` entries add no
    /// routes and are not checked): for `up` starting a data plane again on a file it ran
    /// before, which reads the tables itself; `up` needs the hosts and ports, and a full
    /// table's file costs about 40 ms to parse, which the restart waited for twice.
    pub fn load_without_tables(path: &Path) -> std::result::Result<Topology, TopologyError> {
        Topology::load_with(path, |_| Tables::Skip)
    }

    /// As [`load`](Self::load), with the table files read for their sums but not parsed:
    /// `vrs` lacks their routes, and [`Topology::tables_deferred`] names `path`, to be read
    /// again for them. A data plane started again whose checkpoint matches those sums
    /// forwards with it meanwhile, instead of after parsing a full table (about 40 ms).
    pub fn load_deferring_tables(path: &Path) -> std::result::Result<Topology, TopologyError> {
        let mut t = Topology::load_with(path, |dir| Tables::Sum(dir))?;
        if t.table_sums.iter().any(Option::is_some) {
            t.tables_deferred = Some(path.to_path_buf());
        }
        Ok(t)
    }

    /// Reads `path`, doing with its table files what `tables` says given the file's directory.
    fn load_with(
        path: &Path,
        tables: fn(&Path) -> Tables,
    ) -> std::result::Result<Topology, TopologyError> {
        let source = path.display().to_string();
        let text = yamlpath::read_file(path, MAX_TOPOLOGY_BYTES).map_err(|e| {
            TopologyError::at(ErrorKind::Io, (0, 0), "", None, format!("cannot read: {e}"))
                .in_file(&source)
        })?;
        let base_dir = path.parent().unwrap_or(Path::new(""));
        Topology::parse_with(&text, &source, tables(base_dir))
    }

    /// Validates a topology given as text. `source` names it in errors; relative table paths
    /// are resolved against `base_dir`.
    pub fn parse(
        text: &str,
        source: &str,
        base_dir: &Path,
    ) -> std::result::Result<Topology, TopologyError> {
        Topology::parse_with(text, source, Tables::Read(base_dir))
    }

    /// [`parse`](Self::parse), doing with the table files what `tables` says.
    fn parse_with(
        text: &str,
        source: &str,
        tables: Tables,
    ) -> std::result::Result<Topology, TopologyError> {
        let build = || -> Result<Topology> {
            let doc = yaml::parse_document(text)?;
            let top = Value::root(&doc).map(TOP_KEYS)?;
            let workers = top.get("workers").map(|w| run::workers(&w)).transpose()?;
            let workers = workers.unwrap_or_default();
            let idle = top.get("idle").map(|v| run::idle(&v)).transpose()?.unwrap_or_default();
            let ingress_queues =
                top.get("ingress_queues").map(|v| run::ingress_queues(&v)).transpose()?;
            let metrics = top.get("metrics").map(|v| run::metrics(&v)).transpose()?;
            let migration = top.get("migration").map(|v| run::migration(&v)).transpose()?;
            let mut host = Host::default();
            let mut hosts = Vec::new();
            for v in top.list("hosts")? {
                hosts.push(hosts::host(&v, &mut host)?);
            }
            for v in top.list("ports")? {
                let p = host.port(&v)?;
                host.specs.push(p);
            }
            // A host is one namespace behind one port.
            for h in top.list("hosts")? {
                let hv = h.mapping()?.req("name")?;
                let n = hv.text()?;
                if !host.attached_hosts.contains_key(n) {
                    return Err(hv.bad(
                        n,
                        format_args!("host {n} is attached to no port: give a port \"host: {n}\""),
                    ));
                }
            }
            for v in top.list("switches")? {
                let s = switch::switch(&v, &mut host)?;
                host.switches.push(s);
            }
            let (mut vrs, mut schedule, mut worker_vs) = (Vec::new(), Vec::new(), Vec::new());
            let mut replica_vs = Vec::new();
            let mut control_planes = Vec::new();
            let mut iface_down = Vec::new();
            let mut cp_netns: HashMap<String, usize> = HashMap::new();
            let mut table_sums = Vec::new();
            for v in top.list("vrs")? {
                let (cfg, down, sum) = vr::vr(&v, &mut host, tables)?;
                iface_down.push(down);
                table_sums.push(sum);
                let cp = match v.mapping()?.get("control_plane") {
                    Some(cv) => {
                        let spec = cp::control_plane(&cv, &cfg, &v)?;
                        if host.host_ids.contains_key(&spec.netns) {
                            return Err(cv.bad(
                                &spec.netns,
                                format_args!("namespace {:?} is a host's", spec.netns),
                            ));
                        }
                        if let Some(line) = cp_netns.insert(spec.netns.clone(), cv.line()) {
                            return Err(cv.bad(
                                &spec.netns,
                                format_args!(
                                    "namespace {:?} is another VR's control plane (line {line})",
                                    spec.netns
                                ),
                            ));
                        }
                        Some(spec)
                    }
                    None => None,
                };
                control_planes.push(cp);
                vrs.push(cfg);
                let (s, wv) = run::schedule(&v, &workers)?;
                schedule.push(s);
                worker_vs.push(wv);
                replica_vs.push(v.mapping()?.get("replicas"));
            }
            // One mirror port per interface of a VR with a control plane, after every other.
            for (v, cp) in control_planes.iter().enumerate() {
                let Some(cp) = cp else { continue };
                for (i, f) in vrs[v].interfaces.iter().enumerate() {
                    host.specs.push(PortSpec {
                        name: format!("{}/{}/{}", cp.netns, vrs[v].name, f.name),
                        kind: PortKind::Mirror { netns: cp.netns.clone(), vr: v, iface: i as u16 },
                        burst: None,
                        impair: None,
                    });
                }
            }
            if control_planes.iter().all(Option::is_none) {
                control_planes.clear();
            }
            if table_sums.iter().all(Option::is_none) {
                table_sums.clear();
            }
            if iface_down.iter().all(Vec::is_empty) {
                iface_down.clear();
            }
            let Host { specs: ports, switches, .. } = host;
            let plans = run::cells(&ports, &vrs, &switches);
            run::check_placement(&plans, &vrs, &schedule, &worker_vs)?;
            run::check_replicas(&plans, &ports, &vrs, &schedule, &replica_vs)?;
            let mut claimed = HashMap::new();
            let msrs = top
                .list("msrs")?
                .iter()
                .map(|v| msr::msr(v, &vrs, &schedule, &mut claimed))
                .collect::<Result<Vec<_>>>()?;
            Ok(Topology {
                source: source.to_string(),
                ports,
                vrs,
                switches,
                hosts,
                workers,
                idle,
                ingress_queues,
                metrics,
                migration,
                schedule,
                control_planes,
                msrs,
                iface_down,
                table_sums,
                tables_deferred: None,
            })
        };
        build().map_err(|e| e.in_file(source))
    }

    /// Index of the port called `name`.
    pub fn port_index(&self, name: &str) -> Option<usize> {
        self.ports.iter().position(|p| p.name == name)
    }

    /// The cells: what must run on one worker together (see `run.rs`).
    pub fn cells(&self) -> Vec<CellPlan> {
        run::cells(&self.ports, &self.vrs, &self.switches)
    }

    /// The sum of VR `v`'s tables (see [`Topology::table_sums`]).
    pub fn table_sum(&self, v: usize) -> Option<u32> {
        self.table_sums.get(v).copied().flatten()
    }

    /// VR `v`'s control plane, if it has one.
    pub fn control_plane(&self, v: usize) -> Option<&ControlPlaneSpec> {
        self.control_planes.get(v).and_then(Option::as_ref)
    }

    /// Whether interface `i` of VR `v` is set `up: false` (administratively down).
    pub fn iface_down(&self, v: usize, i: IfaceId) -> bool {
        self.iface_down.get(v).is_some_and(|d| d.contains(&i))
    }

    /// Records interface `i` of VR `v` as administratively down or up.
    pub fn set_iface_down(&mut self, v: usize, i: IfaceId, down: bool) {
        if self.iface_down.len() < self.vrs.len() {
            self.iface_down.resize(self.vrs.len(), Vec::new());
        }
        let d = &mut self.iface_down[v];
        d.retain(|&k| k != i);
        if down {
            d.push(i);
            d.sort_unstable();
        }
    }

    /// Index of the VR called `name`.
    pub fn vr_index(&self, name: &str) -> Option<usize> {
        self.vrs.iter().position(|v| v.name == name)
    }

    /// A human-readable table of the topology, for `routeplex show FILE`.
    pub fn summary(&self) -> String {
        summary::summary(self)
    }
}

/// What must be unique across the whole host, with the line that claimed it first.
#[derive(Default)]
struct Host {
    ports: HashMap<String, (PortId, usize)>,
    port_names: Vec<String>,
    /// Every port, including the links made for interfaces on switches.
    specs: Vec<PortSpec>,
    vr_names: HashMap<String, usize>,
    /// Hosts: `(index, line)`.
    host_ids: HashMap<String, (usize, usize)>,
    /// Hosts a port is attached to: `(port name, line)`.
    attached_hosts: HashMap<String, (String, usize)>,
    switch_ids: HashMap<String, (usize, usize)>,
    switches: Vec<SwitchConfig>,
    /// Ports that are switch members: `(switch, line)`.
    switched_ports: HashMap<PortId, (String, usize)>,
    /// Demux keys: a frame is steered by (segment, destination MAC), so two interfaces on the
    /// same key would make it ambiguous.
    demux: HashMap<(Segment, MacAddr), Claimant>,
    /// Addresses per segment: ARP and neighbor solicitations for an address reach the one
    /// interface that owns it there, so two owners would make one of them unreachable.
    segment_addrs: HashMap<(Segment, IpAddr), Claimant>,
    /// VNIs per underlay address (`vxlan.rs`).
    vni_claims: vxlan::VniClaims,
}

/// One Ethernet segment: a port (and VLAN), or a VLAN of a switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Segment {
    Port(PortId, Option<u16>),
    Switch(usize, u16),
}
/// `(vr, interface, line)` of the interface that claimed a demux key first.
type Claimant = (String, String, usize);

impl Host {
    fn port(&mut self, v: &Value) -> Result<PortSpec> {
        let m = v.mapping()?;
        let name_v = m.req("name")?;
        let name = name(&name_v)?;
        if let Some((_, line)) = self.ports.get(&name) {
            return Err(name_v
                .bad(&name, format_args!("duplicate port name {name:?} (first at line {line})")));
        }
        let kind_v = m.req("kind")?;
        let kind = match kind_v.text()? {
            "mem" => {
                m.only(MEM_KEYS)?;
                let ring = match m.get("ring") {
                    None => DEFAULT_RING,
                    Some(r) => {
                        let n: usize = r.int("ring size", 2, 65536)?;
                        if !n.is_power_of_two() {
                            return Err(r.bad(
                                r.text()?,
                                format_args!("ring size {n} is not a power of two"),
                            ));
                        }
                        n
                    }
                };
                PortKind::Mem { ring }
            }
            kind @ ("afxdp" | "afpacket") => {
                m.only(if kind == "afxdp" { AFXDP_KEYS } else { KERNEL_KEYS })?;
                let attach = match (m.get("interface"), m.get("host")) {
                    (Some(iv), None) => {
                        let i = iv.text()?;
                        if !hosts::is_ifname(i) {
                            return Err(iv.bad(i, format_args!("invalid interface name {i:?}: 1 to 15 bytes, no '/', ':' or spaces")));
                        }
                        match m.get("netns") {
                            None => Attach::Interface(i.to_string()),
                            Some(nv) => {
                                let n = nv.text()?;
                                if !hosts::is_ns_name(n) {
                                    return Err(nv.bad(n, format_args!("invalid namespace name {n:?}: letters, digits, - _ . (32 at most), not . or ..")));
                                }
                                Attach::Netns { netns: n.to_string(), ifname: i.to_string() }
                            }
                        }
                    }
                    (None, Some(_)) if m.get("netns").is_some() => {
                        return Err(m.get("netns").expect("present").error("netns names the namespace of an existing interface; a host's namespace is its own"))
                    }
                    (None, Some(hv)) => {
                        let h = hv.text()?;
                        let Some(&(index, _)) = self.host_ids.get(h) else {
                            let mut names: Vec<&String> = self.host_ids.keys().collect();
                            names.sort();
                            return Err(hv.bad(h, format_args!("no host named {h:?} (hosts: {})", list_or_none(&names))));
                        };
                        if let Some((other, line)) = self.attached_hosts.get(h) {
                            return Err(hv.bad(h, format_args!("host {h} is already attached to port {other} (line {line})")));
                        }
                        let ifname = format!("{VETH_PREFIX}{name}");
                        if !hosts::is_ifname(&ifname) {
                            return Err(name_v.bad(&name, format_args!("port name {name:?} is too long for its veth {ifname:?} (15 bytes at most)")));
                        }
                        self.attached_hosts.insert(h.to_string(), (name.clone(), hv.line()));
                        Attach::Host { host: index, ifname }
                    }
                    (Some(_), Some(hv)) => return Err(hv.error("a port attaches to an interface or to a host, not both")),
                    (None, None) => return Err(v.error("missing \"interface\" (an existing interface) or \"host\" (a host up creates)")),
                };
                if kind == "afxdp" {
                    PortKind::AfXdp(attach, xdp_spec(&m)?)
                } else {
                    PortKind::AfPacket(attach)
                }
            }
            "memif" => {
                m.only(MEMIF_KEYS)?;
                PortKind::Memif(memif_spec(&m)?)
            }
            "tap" => {
                m.only(TAP_KEYS)?;
                let iv = m.req("interface")?;
                let i = iv.text()?;
                if !hosts::is_ifname(i) {
                    return Err(iv.bad(
                        i,
                        format_args!(
                            "invalid interface name {i:?}: 1 to 15 bytes, no '/', ':' or spaces"
                        ),
                    ));
                }
                PortKind::Tap { ifname: i.to_string() }
            }
            "vhost-user" => {
                m.only(VHOST_USER_KEYS)?;
                PortKind::VhostUser(vhost_user_spec(&m)?)
            }
            "vxlan" => {
                m.only(vxlan::VXLAN_KEYS)?;
                PortKind::Vxlan(vxlan::vxlan_spec(&m, &mut self.vni_claims)?)
            }
            k if PLANNED_PORT_KINDS.contains(&k) => {
                return Err(kind_v.bad_kind(
                    ErrorKind::Unavailable,
                    k,
                    format_args!(
                        "port kind {k:?} is not available in this build (available: {})",
                        PORT_KINDS.join(", ")
                    ),
                ))
            }
            k => {
                return Err(kind_v.bad(
                    k,
                    format_args!("unknown port kind {k:?} (available: {})", PORT_KINDS.join(", ")),
                ))
            }
        };
        let burst = m.get("burst").map(|b| run::burst(&b)).transpose()?;
        let impair = m.get("impair").map(|i| impair::impair(&i)).transpose()?.flatten();
        let id = PortId::try_from(self.port_names.len())
            .map_err(|_| v.error(format_args!("more than {} ports", PortId::MAX)))?;
        self.ports.insert(name.clone(), (id, name_v.line()));
        self.port_names.push(name.clone());
        Ok(PortSpec { name, kind, burst, impair })
    }

    /// The largest MTU an interface on `s` may have because a vxlan port carries the segment,
    /// and that port's name: the port itself, or the switch's vxlan member with the least room.
    fn vxlan_mtu(&self, s: Segment) -> Option<(u16, &str)> {
        let cap = |p: PortId| match &self.specs[usize::from(p)].kind {
            PortKind::Vxlan(x) => Some((x.max_mtu(), self.specs[usize::from(p)].name.as_str())),
            _ => None,
        };
        match s {
            Segment::Port(p, _) => cap(p),
            Segment::Switch(i, _) => {
                self.switches[i].members.iter().filter_map(|m| cap(m.port)).min_by_key(|c| c.0)
            }
        }
    }

    /// "port p0 (untagged)" or "switch sw0 (VLAN 10)", for errors.
    fn segment_name(&self, s: Segment) -> String {
        match s {
            Segment::Port(p, vlan) => {
                let vlan = vlan.map_or("untagged".to_string(), |v| format!("VLAN {v}"));
                format!("port {} ({vlan})", self.port_names[usize::from(p)])
            }
            Segment::Switch(i, vlan) => format!("switch {} (VLAN {vlan})", self.switches[i].name),
        }
    }

    /// Adds an internal link for interface `iface` of `vr` on switch `sw`, in `vlan`: returns
    /// the port the interface sits on; the other end joins the switch as an access member.
    fn link(&mut self, v: &Value, sw: usize, vlan: u16, vr: &str, iface: &str) -> Result<PortId> {
        let base = format!("{}.{vr}.{iface}", self.switches[sw].name);
        let names = [base.clone(), format!("{base}.sw")];
        for n in &names {
            if self.ports.contains_key(n) {
                return Err(v.error(format_args!(
                    "the internal link for {vr}.{iface} would be called {n:?}, which a port already is"
                )));
            }
        }
        let ids = [self.port_names.len(), self.port_names.len() + 1];
        let ids = ids.map(|i| {
            PortId::try_from(i)
                .map_err(|_| v.error(format_args!("more than {} ports", PortId::MAX)))
        });
        let (a, b) = (ids[0].clone()?, ids[1].clone()?);
        for (n, (id, peer)) in names.into_iter().zip([(a, b), (b, a)]) {
            self.ports.insert(n.clone(), (id, v.line()));
            self.port_names.push(n.clone());
            self.specs.push(PortSpec {
                name: n,
                kind: PortKind::Link { peer },
                burst: None,
                impair: None,
            });
        }
        self.switches[sw].members.push(dataplane::MemberConfig {
            port: b,
            mode: dataplane::MemberMode::Access { vlan },
        });
        Ok(a)
    }

    /// The switch a `switch:` field names.
    fn switch_ref(&self, v: &Value) -> Result<usize> {
        let s = v.text()?;
        match self.switch_ids.get(s) {
            Some(&(i, _)) => Ok(i),
            None => {
                let names: Vec<&String> = self.switches.iter().map(|s| &s.name).collect();
                Err(v.bad(
                    s,
                    format_args!("no switch named {s:?} (switches: {})", list_or_none(&names)),
                ))
            }
        }
    }

    /// The port a `port:` field names.
    fn port_ref(&self, v: &Value) -> Result<PortId> {
        let s = v.text()?;
        match self.ports.get(s) {
            Some(&(id, _)) => Ok(id),
            None => Err(v.bad(
                s,
                format_args!("no port named {s:?} (ports: {})", list_or_none(&self.port_names)),
            )),
        }
    }
}

/// A memif port's keys.
fn memif_spec(m: &yaml::Map) -> Result<MemifSpec> {
    let server = match m.get("role") {
        None => true,
        Some(v) => match v.text()? {
            "server" => true,
            "client" => false,
            r => return Err(v.bad(r, format_args!("role must be server or client, not {r:?}"))),
        },
    };
    let sv = m.req("socket")?;
    let socket = sv.text()?;
    let bare =
        socket.strip_prefix('@').or_else(|| socket.strip_prefix("abstract:")).unwrap_or(socket);
    if bare.is_empty() || bare.len() > 107 || bare.contains('\0') {
        return Err(sv.bad(
            socket,
            format_args!("invalid memif socket {socket:?}: a path or @name of 1 to 107 bytes"),
        ));
    }
    let id =
        m.get("id").map(|v| v.int::<u32>("memif id", 0, u32::MAX.into())).transpose()?.unwrap_or(0);
    let secret = match m.get("secret") {
        None => None,
        Some(v) => {
            let s = v.text()?;
            if s.len() > 24 {
                return Err(v.bad(s, "a memif secret is at most 24 bytes"));
            }
            Some(s.to_string())
        }
    };
    let queues =
        m.get("queues").map(|v| v.int::<u16>("queue count", 1, 256)).transpose()?.unwrap_or(1);
    let log2_ring = match m.get("ring") {
        None => 10,
        Some(v) => {
            let n: u32 = v.int("ring size", 2, 16384)?;
            if !n.is_power_of_two() {
                return Err(v.bad(v.text()?, format_args!("ring size {n} is not a power of two")));
            }
            n.trailing_zeros() as u8
        }
    };
    let buffer = m
        .get("buffer")
        .map(|v| v.int::<u32>("buffer size", 64, 65535))
        .transpose()?
        .unwrap_or(2048);
    let interrupt = match m.get("rx_mode") {
        None => false,
        Some(v) => match v.text()? {
            "polling" => false,
            "interrupt" => true,
            r => {
                return Err(
                    v.bad(r, format_args!("rx_mode must be polling or interrupt, not {r:?}"))
                )
            }
        },
    };
    Ok(MemifSpec {
        server,
        socket: socket.to_string(),
        id,
        secret,
        queues,
        log2_ring,
        buffer,
        interrupt,
    })
}

/// A vhost-user port's keys.
fn vhost_user_spec(m: &yaml::Map) -> Result<VhostUserSpec> {
    let server = match m.get("mode") {
        None => true,
        Some(v) => match v.text()? {
            "server" => true,
            "client" => false,
            r => return Err(v.bad(r, format_args!("mode must be server or client, not {r:?}"))),
        },
    };
    let sv = m.req("socket")?;
    let socket = sv.text()?;
    // sockaddr_un holds 107 bytes and a NUL.
    if socket.is_empty() || socket.len() > 107 || socket.contains('\0') || socket.starts_with('@') {
        return Err(sv.bad(
            socket,
            format_args!("invalid vhost-user socket {socket:?}: a file path of 1 to 107 bytes"),
        ));
    }
    let queues = m
        .get("queues")
        .map(|v| v.int::<u16>("queue pair count", 1, ports::vhost::MAX_QUEUE_PAIRS.into()))
        .transpose()?
        .unwrap_or(1);
    Ok(VhostUserSpec { server, socket: socket.to_string(), queues })
}

/// A name: non-empty, without whitespace or control characters (names are printed in one-line
/// errors and aligned tables, and later become Linux interface and namespace names), at most 64
/// bytes.
fn name(v: &Value) -> Result<String> {
    let s = v.text()?;
    if s.is_empty() || s.len() > 64 || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(
            v.bad(s, format_args!("invalid name {s:?}: use 1 to 64 characters without spaces"))
        );
    }
    Ok(s.to_string())
}

/// `a, b, c`, or `none`.
fn list_or_none<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "none".to_string();
    }
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The AF_XDP keys: `ring` (power of two 8..=32768, default 4096), `frame_size` (2048 or
/// 4096), `xdp_mode` (auto, driver, skb), `zero_copy` (auto, on, off), `threaded_napi` (true,
/// false), `queues` (`all`, or a count 1..=4096).
fn xdp_spec(m: &yaml::Map) -> Result<XdpSpec> {
    use ports::afxdp::{BindMode, XdpMode};
    let mut x = XdpSpec::default();
    if let Some(v) = m.get("ring") {
        let n: u32 = v.int("ring size", 8, 32768)?;
        if !n.is_power_of_two() {
            return Err(v.bad(v.text()?, format_args!("ring size {n} is not a power of two")));
        }
        x.ring = n;
    }
    if let Some(v) = m.get("frame_size") {
        x.frame_size = match v.int::<u32>("frame size", 2048, 4096)? {
            n @ (2048 | 4096) => n,
            n => {
                return Err(
                    v.bad(v.text()?, format_args!("frame_size must be 2048 or 4096, not {n}"))
                )
            }
        };
    }
    if let Some(v) = m.get("xdp_mode") {
        x.mode = match v.text()? {
            "auto" => XdpMode::Auto,
            "driver" => XdpMode::Driver,
            "skb" => XdpMode::Skb,
            r => {
                return Err(
                    v.bad(r, format_args!("xdp_mode must be auto, driver or skb, not {r:?}"))
                )
            }
        };
    }
    if let Some(v) = m.get("zero_copy") {
        x.bind = match v.text()? {
            "auto" => BindMode::Auto,
            "on" => BindMode::ZeroCopy,
            "off" => BindMode::Copy,
            r => return Err(v.bad(r, format_args!("zero_copy must be auto, on or off, not {r:?}"))),
        };
    }
    if let Some(v) = m.get("threaded_napi") {
        x.threaded_napi = match v.text()? {
            "true" => true,
            "false" => false,
            r => {
                return Err(v.bad(r, format_args!("threaded_napi must be true or false, not {r:?}")))
            }
        };
    }
    if let Some(v) = m.get("queues") {
        x.queues = match v.text()? {
            "all" => None,
            _ => Some(v.int("queue count (or all)", 1, 4096)?),
        };
    }
    Ok(x)
}
