//! What a virtual router is made of, as plain data.
//!
//! `control` builds these from a topology file after validating it; the data plane builds its
//! tables from them and trusts them to be consistent (every index in range, every gateway
//! reachable). The same data serves snapshots and, later, migration.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use wire::MacAddr;

/// The smallest IPv4 MTU (RFC 791).
pub const MIN_MTU: u16 = 68;
/// The smallest MTU of an interface with IPv6 (RFC 8200 §5).
pub const IPV6_MIN_MTU: u16 = 1280;
/// The largest MTU: the largest IP packet a packet buffer holds behind an 802.1Q header.
/// Jumbo frames would need chained buffers, which routeplex does not have yet.
pub const MAX_MTU: u16 = (ports::BUF_SIZE - ports::HEADROOM - 18) as u16;

/// Index of a port in the host's port list.
pub type PortId = u16;
/// Index of an interface in its VR's interface list.
pub type IfaceId = u16;

/// One virtual router.
#[derive(Clone, Debug, PartialEq)]
pub struct VrConfig {
    /// Unique name within the host.
    pub name: String,
    /// Interfaces, in order: [`IfaceId`] `i` is `interfaces[i]`.
    pub interfaces: Vec<IfaceConfig>,
    /// Static routes. Connected routes and the VR's own addresses come from the interfaces.
    pub routes: Vec<RouteConfig>,
    /// Static neighbor (ARP/NDP) entries: never expire, never overwritten by learning.
    pub neighbors: Vec<NeighborConfig>,
    /// Table sizes, timers and rate limits.
    pub limits: VrLimits,
}

/// One VR interface: where it attaches and what it answers to.
#[derive(Clone, Debug, PartialEq)]
pub struct IfaceConfig {
    /// Unique name within the VR.
    pub name: String,
    /// The port it sits on.
    pub port: PortId,
    /// 802.1Q VLAN id (1..=4094) on that port, or untagged.
    pub vlan: Option<u16>,
    /// Its own unicast MAC: frames to it are demuxed to this interface.
    pub mac: MacAddr,
    /// IP MTU in bytes, [`MIN_MTU`]..=[`MAX_MTU`]; at least [`IPV6_MIN_MTU`] with IPv6.
    pub mtu: u16,
    /// IPv4 addresses with their subnet lengths; each subnet becomes a connected route.
    pub ipv4: Vec<Ipv4Net>,
    /// IPv6 addresses with their subnet lengths; each subnet becomes a connected route. A
    /// link-local address derived from the MAC (EUI-64) is added automatically.
    pub ipv6: Vec<Ipv6Net>,
}

/// A route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteConfig {
    /// Destination prefix (host bits zero).
    pub prefix: IpNet,
    /// Where matching packets go.
    pub target: RouteTarget,
    /// Where it came from: the topology's static routes or tables, or the API.
    pub source: RouteSource,
}

/// The target of a static route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteTarget {
    /// Through a gateway, of the same family as the prefix. `iface` names the interface; when
    /// `None` it is the interface whose connected subnet holds the gateway (the validator checks
    /// that one exists). Link-local IPv6 gateways need `iface`.
    Via { gateway: IpAddr, iface: Option<IfaceId> },
    /// Directly out of an interface: the destination itself is resolved as a neighbor.
    Iface(IfaceId),
    /// Dropped and counted (`blackhole`), without an ICMP error.
    Blackhole,
}

/// A static neighbor entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborConfig {
    /// The interface it is reached through.
    pub iface: IfaceId,
    /// Its IP address.
    pub ip: IpAddr,
    /// Its MAC address.
    pub mac: MacAddr,
}

/// Sizes, timers and rate limits of one VR. All tables are allocated when the VR is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VrLimits {
    /// Neighbor table entries (static and learned).
    pub neighbors: u32,
    /// Packets held while one next hop is being resolved; more are dropped (`neighbor_queue_full`).
    pub queue_per_neighbor: u16,
    /// Packets held across all unresolved next hops of the VR.
    pub queue_total: u16,
    /// How long a resolved neighbor stays reachable without being confirmed, in milliseconds.
    pub neighbor_reachable_ms: u32,
    /// Interval between ARP requests / neighbor solicitations for one next hop, in milliseconds.
    pub neighbor_retrans_ms: u32,
    /// Unanswered requests after which a next hop counts as unreachable.
    pub neighbor_probes: u8,
    /// How long an unreachable next hop drops packets before it is tried again, in milliseconds.
    pub neighbor_failed_hold_ms: u32,
    /// Incomplete neighbor entries (being resolved) one interface may have; a new one beyond
    /// this takes the place of the oldest. 0: no cap but the table's size.
    pub incomplete_per_interface: u16,
    /// Broadcast ARP requests / multicast neighbor solicitations (new next hops and their
    /// retransmissions) the VR may send per second (token bucket rate); a new next hop beyond
    /// it is dropped (`neighbor_rate_limited`). Unicast re-probes of known neighbors are not
    /// limited. 0: no limit.
    pub solicitations_per_sec: u32,
    /// Burst size of that token bucket.
    pub solicitations_burst: u32,
    /// ICMP/ICMPv6 errors the VR may send per second (token bucket rate); 0 disables them.
    pub icmp_errors_per_sec: u32,
    /// Burst size of that token bucket.
    pub icmp_errors_burst: u32,
}

impl Default for VrLimits {
    fn default() -> Self {
        VrLimits {
            neighbors: 1024,
            queue_per_neighbor: 4,
            queue_total: 64,
            neighbor_reachable_ms: 30_000,
            neighbor_retrans_ms: 1_000,
            neighbor_probes: 3,
            neighbor_failed_hold_ms: 3_000,
            incomplete_per_interface: 32,
            solicitations_per_sec: 1_000,
            solicitations_burst: 100,
            icmp_errors_per_sec: 1_000,
            icmp_errors_burst: 50,
        }
    }
}

/// What a VR may spend per period: seed 000 §3.4's Constant Bandwidth Server, a budget Q every
/// period T. Enforced right after demux: once a VR has spent Q in its current period, its
/// further packets are dropped (`over_budget`) before any work is spent on them, until the next
/// period. Its throughput is then proportional to Q / T.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Q: what the VR may spend per period.
    pub budget: Budget,
    /// T, in nanoseconds (more than 0).
    pub period_ns: u64,
    /// How much of a worker's spare capacity the VR may use once its budget is spent, relative
    /// to the other VRs on its worker that want some; 0 (the default) makes the budget a hard
    /// cap. See `budget.rs` for the rule.
    pub weight: u32,
}

/// The unit of a [`Reservation`]'s budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Nanoseconds of worker time, read from the worker's clock around the VR's part of each
    /// burst (its own pipeline run plus its share of receiving, demux and transmitting).
    Time(u64),
    /// Packets let in (demuxed to the VR and admitted): exact.
    Packets(u64),
}

impl Reservation {
    /// Q in its own unit (nanoseconds or packets).
    pub fn amount(&self) -> u64 {
        match self.budget {
            Budget::Time(n) | Budget::Packets(n) => n,
        }
    }

    /// Whether the reservation needs a worker clock: time budgets, and weights (spare
    /// capacity is measured in time).
    pub fn needs_clock(&self) -> bool {
        matches!(self.budget, Budget::Time(_)) || self.weight > 0
    }

    /// Why the reservation cannot be used, if it cannot: a zero period or budget.
    pub fn check(&self) -> Result<(), BuildError> {
        let err = |m: &str| Err(BuildError(m.into()));
        if self.period_ns == 0 {
            return err("a reservation's period must be longer than 0");
        }
        if self.amount() == 0 {
            return err("a reservation's budget must be more than 0");
        }
        Ok(())
    }
}

impl std::fmt::Display for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.budget {
            Budget::Time(ns) => write!(f, "{} ns", ns)?,
            Budget::Packets(n) => write!(f, "{n} packets")?,
        }
        write!(f, " per {} ns", self.period_ns)?;
        if self.weight > 0 {
            write!(f, ", weight {}", self.weight)?;
        }
        Ok(())
    }
}

/// Why a VR could not be built from its config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(pub String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

/// Where a route came from, best first: when two sources hold the same prefix, the FIB uses
/// the one listed first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum RouteSource {
    /// The VR's own addresses and connected broadcast addresses (from its interfaces).
    Local,
    /// Connected subnets (from its interfaces).
    Connected,
    /// Static routes of the topology file.
    #[default]
    Static,
    /// Routes added through the control API.
    Api,
    /// Routes the kernel of the VR's Linux control-plane mirror holds (put there by its
    /// routing daemons), synced from netlink.
    Kernel,
    /// Bulk tables of the topology file (`tables:`).
    Table,
}

impl RouteSource {
    /// Every source, best first.
    pub const ALL: [RouteSource; 6] = [
        RouteSource::Local,
        RouteSource::Connected,
        RouteSource::Static,
        RouteSource::Api,
        RouteSource::Kernel,
        RouteSource::Table,
    ];

    /// The name in status output and the API.
    pub const fn name(self) -> &'static str {
        match self {
            RouteSource::Local => "local",
            RouteSource::Connected => "connected",
            RouteSource::Static => "static",
            RouteSource::Api => "api",
            RouteSource::Kernel => "kernel",
            RouteSource::Table => "table",
        }
    }

    /// Whether routes of this source may be added or removed by route operations (local and
    /// connected routes follow the interfaces).
    pub const fn is_operable(self) -> bool {
        !matches!(self, RouteSource::Local | RouteSource::Connected)
    }
}
