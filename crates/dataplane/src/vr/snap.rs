//! A VR's live state carried across a snapshot, a restart or a migration: its counters and
//! the neighbors it had learned, put back into a freshly built VR ([`VrChange::Restore`]);
//! and what a [`RouteView`] forwards an address to, so a restored table can be compared
//! with the one it was taken from.
//!
//! Learned neighbors come back as they were seen: a reachable one is reachable again for a
//! full reachable time from the restore (its peer is most likely still there; the first
//! packet after that time probes it as usual), a stale one stale. Entries being resolved or
//! failed are transient and are not restored: the next packet resolves them again.

use std::net::IpAddr;

use wire::MacAddr;

use super::neighbor::{Learn, NKey, NeighborState};
use super::{Adj, Vr};
use crate::counters::VrCounters;
use crate::routes::RouteView;

/// One learned neighbor to put back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoredNeighbor {
    pub iface: u16,
    pub ip: IpAddr,
    pub mac: MacAddr,
    /// Reachable (confirmed) rather than stale.
    pub reachable: bool,
}

/// Counters and learned neighbors for [`VrChange::Restore`](super::VrChange::Restore).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoredState {
    /// Replaces the VR's counters when given.
    pub counters: Option<VrCounters>,
    pub neighbors: Vec<RestoredNeighbor>,
    /// The worker's clock now (nanoseconds since the runtime's epoch): reachable entries
    /// count their reachable time from it.
    pub now: u64,
}

impl Vr {
    /// Puts `st` into the VR; returns how many neighbors it took (an interface out of range
    /// or a full table skips the entry, never fails the whole).
    pub(super) fn restore(&mut self, st: RestoredState) -> usize {
        if let Some(c) = st.counters {
            self.counters = c;
        }
        let mut n = 0;
        for r in &st.neighbors {
            if usize::from(r.iface) >= self.ifaces.len() {
                continue;
            }
            let key = NKey::from_ip(r.iface, r.ip);
            let how = Learn { create: true, replace: true, confirmed: r.reachable };
            if self.neigh.learn(key, r.mac, how, st.now) {
                n += 1;
            }
        }
        n
    }
}

/// Whether a neighbor row's state is worth restoring, and as reachable (`Some(true)`) or stale.
pub fn restorable(s: NeighborState) -> Option<bool> {
    match s {
        NeighborState::Reachable => Some(true),
        NeighborState::Stale => Some(false),
        _ => None,
    }
}

impl VrCounters {
    /// Counters from (name, value) pairs as [`VrCounters::named`] gives them; unknown names are
    /// returned (a snapshot from a newer build may count more).
    pub fn from_named<'a>(
        pairs: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> (VrCounters, Vec<String>) {
        let mut c = VrCounters::default();
        let mut unknown = Vec::new();
        for (k, v) in pairs {
            match k {
                "rx_packets" => c.rx_packets = v,
                "rx_bytes" => c.rx_bytes = v,
                "forwarded" => c.forwarded = v,
                "forwarded_bytes" => c.forwarded_bytes = v,
                "local_in" => c.local_in = v,
                "echo_replies" => c.echo_replies = v,
                "icmp_errors" => c.icmp_errors = v,
                "icmp_errors_suppressed" => c.icmp_errors_suppressed = v,
                "neighbor_requests" => c.neighbor_requests = v,
                "neighbor_replies" => c.neighbor_replies = v,
                "neighbors_learned" => c.neighbors_learned = v,
                "queued" => c.queued = v,
                "fragments_sent" => c.fragments_sent = v,
                "generated_dropped" => c.generated_dropped = v,
                "punted" => c.punted = v,
                "injected" => c.injected = v,
                _ => match crate::VrDrop::ALL.iter().find(|d| d.name() == k) {
                    Some(&d) => c.drops[d as usize] = v,
                    None => unknown.push(k.to_string()),
                },
            }
        }
        (c, unknown)
    }
}

impl RouteView {
    /// What the published FIB forwards `ip` to now.
    pub fn lookup(&self, ip: IpAddr) -> Adj {
        let nh = match ip {
            IpAddr::V4(a) => self.r4.load().lookup(u32::from(a)),
            IpAddr::V6(a) => self.r6.load().lookup(u128::from(a)),
        };
        self.adj.get(nh as usize).copied().unwrap_or(Adj::None)
    }
}

/// The link-local address an interface with `mac` has (EUI-64), as the VR answers to it.
pub fn interface_link_local(mac: MacAddr) -> std::net::Ipv6Addr {
    super::link_local(mac)
}

impl crate::Cell {
    /// Sends ready-made frames out of port `p` (at most a burst; announcements after a VR
    /// moved here, say). Returns how many the port took. Control-path only: it allocates.
    pub fn send_frames(&mut self, p: usize, frames: &[Vec<u8>]) -> usize {
        let n = frames.len().min(ports::MAX_BURST);
        let mut b = ports::Batch::new(n.max(1));
        for f in &frames[..n] {
            b.push_copy(f);
        }
        let sel: Vec<u16> = (0..b.len() as u16).collect();
        self.port_mut(p).map_or(0, |port| port.tx_burst(&mut b, &sel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip_by_name() {
        let mut c = VrCounters { rx_packets: 5, forwarded_bytes: 9, ..Default::default() };
        c.drops[crate::VrDrop::ALL[1] as usize] = 3;
        let named = c.named();
        let (back, unknown) =
            VrCounters::from_named(named.iter().map(|(k, v)| (*k, *v)).chain([("future", 1)]));
        assert_eq!(back, c);
        assert_eq!(unknown, vec!["future".to_string()]);
    }
}
