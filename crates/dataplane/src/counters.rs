//! Counters: every packet that enters the data plane ends in exactly one of them.
//!
//! Like VPP's per-node error counters, each drop is counted by the stage that decides it and by
//! reason. A frame that no VR claims is counted on its port; everything a VR touches is counted
//! on that VR. Counters are plain integers owned by the worker that runs the stage.

/// Defines a drop-reason enum in one place: each reason's doc, variant and name, in counter
/// order (the variant's value is its counter's index; names and order are what snapshots,
/// metrics and `docs/dataplane.md` show), so a new reason is one entry here.
macro_rules! drop_reasons {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            /// Every reason, in counter order.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            /// Number of reasons.
            pub const COUNT: usize = Self::ALL.len();
            /// The reason's name in tables, JSON and metrics.
            pub const fn name(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use drop_reasons;

drop_reasons! {
    /// Why a port dropped a frame before any VR saw it (classification).
    PortDrop {
        /// Shorter than an Ethernet (or 802.1Q) header.
        Runt = "runt",
        /// No VR interface on this port carries the frame's VLAN (or untagged frames).
        VlanUnknown = "vlan_unknown",
        /// No VR interface answers to the destination MAC, ARP target or ND target.
        NotForUs = "not_for_us",
    }
}

drop_reasons! {
    /// Why a VR dropped a packet.
    VrDrop {
        /// The VR had spent its reservation for the period: dropped by the engine right after
        /// demux, before the VR saw it (see `Reservation`).
        OverBudget = "over_budget",
        /// Beyond the VR's batch limit in one burst: dropped right after demux, like a per-VR
        /// queue of that length emptied every burst.
        BatchLimit = "batch_limit",
        /// Ethertype is not IPv4, IPv6 or ARP.
        UnknownEthertype = "unknown_ethertype",
        /// ARP that is not Ethernet/IPv4, is truncated, or has an unknown operation.
        ArpMalformed = "arp_malformed",
        /// ARP whose target is not one of the receiving interface's addresses.
        ArpNotForUs = "arp_not_for_us",
        /// IPv4 shorter than its header, IHL < 5, or total length inconsistent with the frame.
        Ip4BadLength = "ip4_bad_length",
        /// An IPv4 header option that is malformed (length below 2 or past the header, a
        /// Record Route or Timestamp pointer out of range, an unknown Timestamp flag, a
        /// Timestamp overflow count that would wrap): ICMP Parameter Problem sent, pointing at
        /// the octet in error (RFC 1812 §5.2.5).
        Ip4BadOption = "ip4_bad_option",
        /// Ethertype IPv4 but version field not 4.
        Ip4BadVersion = "ip4_bad_version",
        /// IPv4 header checksum wrong.
        Ip4BadChecksum = "ip4_bad_checksum",
        /// IPv6 shorter than its header or payload length beyond the frame.
        Ip6BadLength = "ip6_bad_length",
        /// Ethertype IPv6 but version field not 6.
        Ip6BadVersion = "ip6_bad_version",
        /// An IPv6 extension header runs past the packet (seen when delivering locally).
        Ip6BadExtHeader = "ip6_bad_ext_header",
        /// A Routing header with segments left in a packet addressed to the VR, which
        /// processes none: type 0 is deprecated (RFC 5095), other types are unrecognised
        /// (RFC 8200 §4.4). ICMPv6 Parameter Problem sent, pointing at the routing type.
        Ip6RoutingHeader = "ip6_routing_header",
        /// Source address that must never be forwarded (RFC 1812 §5.3.7, RFC 4291): this
        /// network, loopback, multicast, class E / broadcast, unspecified, IPv4-mapped, or an
        /// IPv4 link-local (169.254/16) source (RFC 3927 §7).
        MartianSource = "martian_source",
        /// Destination that must never be forwarded: this network, loopback, class E, limited
        /// broadcast, unspecified, IPv4-mapped, or link-local (fe80::/10, 169.254/16) that is
        /// not ours.
        MartianDestination = "martian_destination",
        /// An IPv6 packet from a link-local source that would have to leave its link (RFC 4291
        /// §2.5.6): ICMPv6 destination unreachable, beyond scope of source address, sent
        /// (RFC 4443 §3.1, code 2).
        SourceBeyondScope = "source_beyond_scope",
        /// Multicast destination: this router does not route multicast.
        IpMulticast = "ip_multicast",
        /// TTL or hop limit would reach zero (ICMP time exceeded sent).
        TtlExpired = "ttl_expired",
        /// No route for the destination (ICMP destination unreachable sent).
        NoRoute = "no_route",
        /// Route is a blackhole.
        Blackhole = "blackhole",
        /// Destination is the broadcast address of a connected subnet (RFC 1812 §5.3.5.2).
        DirectedBroadcast = "directed_broadcast",
        /// Next hop did not answer ARP / neighbor solicitation (or, still unanswered, gave its
        /// entry up to a newer one: see `incomplete_per_interface`). A transit packet queued
        /// until the entry gave up, or arriving while it is held failed, is answered with
        /// host unreachable / ICMPv6 address unreachable (RFC 1812 §4.3.3.1).
        NoNeighbor = "no_neighbor",
        /// Neighbor table full: a new next hop could not be resolved.
        NeighborTableFull = "neighbor_table_full",
        /// A new next hop was not resolved: the VR had spent its budget of broadcast ARP
        /// requests / multicast solicitations (`solicitations_per_sec`).
        NeighborRateLimited = "neighbor_rate_limited",
        /// Too many packets already waiting for this next hop (or for all of them).
        NeighborQueueFull = "neighbor_queue_full",
        /// Larger than the egress MTU with DF set, or IPv6 (ICMP fragmentation needed / packet
        /// too big sent).
        MtuExceeded = "mtu_exceeded",
        /// UDP to one of the VR's own addresses (ICMP port unreachable sent).
        LocalPortUnreachable = "local_port_unreachable",
        /// Other traffic to the VR's own addresses that it does not serve (TCP, unknown
        /// protocols), on an interface without a Linux control-plane mirror (with one, it is
        /// punted there).
        LocalUnsupported = "local_unsupported",
        /// A malformed fragment addressed to the VR: not the last, yet its data is empty or
        /// not a multiple of 8 bytes (RFC 791, RFC 8200 §4.5); or, IPv6, reaching past 65535
        /// bytes. IPv6 sources get Parameter Problem (at Payload Length, Fragment Offset)
        /// where RFC 8200 §4.5 says so.
        LocalFragment = "local_fragment",
        /// Fragments of a datagram addressed to the VR that was not complete in time (30 s
        /// IPv4, 60 s IPv6 after its first fragment): all it held.
        ReassemblyTimeout = "reassembly_timeout",
        /// Fragments of a datagram addressed to the VR that overlapped (duplicates included)
        /// or disagreed on its end: the whole datagram, as RFC 5722 requires.
        ReassemblyOverlap = "reassembly_overlap",
        /// Fragments of a datagram addressed to the VR larger than one packet buffer holds:
        /// more than 9152 bytes after the IP header (`reasm::MAX_PAYLOAD`).
        ReassemblyTooBig = "reassembly_too_big",
        /// A fragment of a new datagram addressed to the VR while all its reassembly contexts
        /// are busy.
        ReassemblyNoContext = "reassembly_no_context",
        /// ICMP or ICMPv6 to the VR with a bad checksum or truncated header.
        IcmpMalformed = "icmp_malformed",
        /// ICMP or ICMPv6 to the VR that needs no answer (echo replies, errors, router
        /// solicitations...).
        IcmpNotHandled = "icmp_not_handled",
        /// Neighbor discovery message that fails RFC 4861 validation (hop limit, code, length,
        /// options) or whose target is not ours.
        NdpInvalid = "ndp_invalid",
        /// The egress port's ring was full.
        TxFull = "tx_full",
        /// Arrived on, or would leave by, an interface that is administratively down (or
        /// waited for a neighbor on an interface taken down, or on one whose port's link went
        /// down or came back).
        InterfaceDown = "interface_down",
        /// Would have been punted to the VR's Linux control-plane mirror, but the VR had spent
        /// its punt budget (`punt_per_sec`): a flood aimed at the VR cannot starve forwarding.
        PuntRateLimited = "punt_rate_limited",
        /// The route is a reject route of kind prohibit (a control plane's `ip route add
        /// prohibit`): ICMP destination unreachable, administratively prohibited, sent (RFC
        /// 1812 §5.2.7.1; ICMPv6 code 1). An unreachable route counts as `no_route`.
        Prohibited = "prohibited",
        /// Arrived on a port shared with other VRs while the VR's ingress queue was full (the
        /// cell's ingress queues are on: see `IngressQueues`): dropped right after demux,
        /// before the VR saw it, so a VR's overload ends in its own queue and not in the
        /// shared receive ring. Frames queued when the queues are reconfigured or the VR
        /// replaced are counted here too.
        IngressQueueFull = "ingress_queue_full",
    }
}

/// What happened at one port, before demux.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Frames transmitted (all VRs together).
    pub tx_packets: u64,
    /// Classification drops by [`PortDrop`] reason.
    pub drops: [u64; PortDrop::COUNT],
}

impl PortCounters {
    /// Drops for one reason.
    pub fn dropped(&self, r: PortDrop) -> u64 {
        self.drops[r as usize]
    }
}

/// What happened in one VR. `repr(C)`: the counters every burst adds to come first, on one
/// cache line (see `Vr`'s layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct VrCounters {
    /// Packets demuxed to the VR.
    pub rx_packets: u64,
    /// Bytes of those packets.
    pub rx_bytes: u64,
    /// Transit packets sent out of an egress port.
    pub forwarded: u64,
    /// Bytes of those packets.
    pub forwarded_bytes: u64,
    /// Packets the VR made (replies, errors, fragments after the first) that could not be sent:
    /// no route back, neighbor failure or a full ring. Not in `drops`, which count received
    /// packets only.
    pub generated_dropped: u64,
    /// Packets addressed to the VR itself (including ARP and neighbor discovery).
    pub local_in: u64,
    /// Echo replies made.
    pub echo_replies: u64,
    /// ICMP/ICMPv6 errors made (one that then cannot go out also counts `generated_dropped`).
    pub icmp_errors: u64,
    /// ICMP/ICMPv6 errors not sent because of the rate limit or because RFC 1812 / RFC 4443
    /// forbid an error about that packet.
    pub icmp_errors_suppressed: u64,
    /// ARP requests and neighbor solicitations sent.
    pub neighbor_requests: u64,
    /// ARP replies and neighbor advertisements sent.
    pub neighbor_replies: u64,
    /// Neighbor entries created or updated from received ARP / neighbor discovery.
    pub neighbors_learned: u64,
    /// Packets held while their next hop was resolved.
    pub queued: u64,
    /// IPv4 fragments made because a packet without DF exceeded the egress MTU.
    pub fragments_sent: u64,
    /// Of `local_in`: packets for the VR itself handed to its Linux control-plane mirror (TCP/UDP to its
    /// addresses, OSPF and other protocols, link-local multicast, ICMP it does not answer,
    /// ARP replies and neighbor advertisements, which the mirror's kernel learns from).
    pub punted: u64,
    /// Frames the mirror's kernel sent out of a mirror interface, sent out of the VR
    /// interface's port.
    pub injected: u64,
    /// Drops by [`VrDrop`] reason.
    pub drops: [u64; VrDrop::COUNT],
}

/// What became of the packets one transmit offered: counted on the VR that made them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TxTally {
    pub forwarded: u64,
    pub forwarded_bytes: u64,
    pub tx_full: u64,
    pub generated_dropped: u64,
}

impl TxTally {
    /// Counts one packet: `transit` traffic or one the VR made, `len` bytes, `sent` or refused.
    #[inline]
    pub fn count(&mut self, transit: bool, len: u16, sent: bool) {
        match (sent, transit) {
            (true, true) => {
                self.forwarded += 1;
                self.forwarded_bytes += len as u64;
            }
            (true, false) => {}
            (false, true) => self.tx_full += 1,
            (false, false) => self.generated_dropped += 1,
        }
    }
}

// By hand: arrays longer than 32 have no derived `Default`.
impl Default for VrCounters {
    fn default() -> Self {
        VrCounters {
            rx_packets: 0,
            rx_bytes: 0,
            forwarded: 0,
            forwarded_bytes: 0,
            local_in: 0,
            echo_replies: 0,
            icmp_errors: 0,
            icmp_errors_suppressed: 0,
            neighbor_requests: 0,
            neighbor_replies: 0,
            neighbors_learned: 0,
            queued: 0,
            fragments_sent: 0,
            generated_dropped: 0,
            punted: 0,
            injected: 0,
            drops: [0; VrDrop::COUNT],
        }
    }
}

impl VrCounters {
    /// Adds what a transmit reported.
    #[inline]
    pub(crate) fn add(&mut self, t: &TxTally) {
        self.forwarded += t.forwarded;
        self.forwarded_bytes += t.forwarded_bytes;
        self.generated_dropped += t.generated_dropped;
        // Rare, and on a cache line of its own: not touched when there is nothing to add.
        if t.tx_full != 0 {
            self.drops[VrDrop::TxFull as usize] += t.tx_full;
        }
    }

    /// Counts packets demuxed to the VR but refused before it saw them (budget, batch limit).
    #[inline]
    pub(crate) fn refuse(&mut self, r: VrDrop, packets: u64, bytes: u64) {
        self.rx_packets += packets;
        self.rx_bytes += bytes;
        self.drops[r as usize] += packets;
    }

    /// Drops for one reason.
    pub fn dropped(&self, r: VrDrop) -> u64 {
        self.drops[r as usize]
    }

    /// All drops.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Every counter as (name, value), in a fixed order: for tables, JSON and test dumps.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("forwarded", self.forwarded),
            ("forwarded_bytes", self.forwarded_bytes),
            ("local_in", self.local_in),
            ("echo_replies", self.echo_replies),
            ("icmp_errors", self.icmp_errors),
            ("icmp_errors_suppressed", self.icmp_errors_suppressed),
            ("neighbor_requests", self.neighbor_requests),
            ("neighbor_replies", self.neighbor_replies),
            ("neighbors_learned", self.neighbors_learned),
            ("queued", self.queued),
            ("fragments_sent", self.fragments_sent),
            ("generated_dropped", self.generated_dropped),
            ("punted", self.punted),
            ("injected", self.injected),
        ];
        v.extend(VrDrop::ALL.iter().map(|&r| (r.name(), self.drops[r as usize])));
        v
    }
}

/// Per-stage activity of a cell (VPP's per-node calls and vectors): how many bursts each stage
/// ran and how many packets they held, so `packets / bursts` is the stage's average batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageCounters {
    /// Receive bursts that brought frames, and those frames.
    pub rx_bursts: u64,
    pub rx_packets: u64,
    /// VR pipeline runs (one per VR a burst touched) and the packets admitted to them.
    pub vr_bursts: u64,
    pub vr_packets: u64,
    /// Transmit bursts (one per port and flush) and the frames the ports took.
    pub tx_bursts: u64,
    pub tx_packets: u64,
}
