//! Classification: which VR interface a received frame belongs to.
//!
//! Like macvlan and SR-IOV, VR interfaces share a port by MAC address, optionally within a
//! VLAN. Unicast frames are demuxed by (VLAN, destination MAC). Broadcast ARP and multicast
//! neighbor solicitations carry no VR's MAC, so they are demuxed by the address they ask for:
//! one copy goes to the one interface that owns it, and no frame is ever duplicated.
//!
//! Announcements carry no VR's address either: a gratuitous ARP (sender = target address, or a
//! broadcast reply) and an unsolicited neighbor advertisement to ff02::1 say a neighbor's MAC
//! changed. They go to the interface whose subnet holds the announced address (for a link-local
//! target, the first interface on the segment), which updates the entry it may have. Limit:
//! with several interfaces on one subnet of a segment, only the first hears announcements.
//! Anything else is dropped here, at ingress, before any VR spends work on it.

use std::net::{Ipv4Addr, Ipv6Addr};

use rustc_hash::{FxHashMap, FxHashSet};
use wire::{ethertype, icmpv6, ip_proto, MacAddr};

use crate::counters::PortDrop;
use crate::l2;

/// The VR interface a frame is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub vr: u16,
    pub iface: u16,
}

/// Why an interface cannot join a segment: another interface already has its MAC, or one of
/// its addresses (ARP and neighbor solicitations for it could reach only one of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    Mac(Target),
    Address(Target, std::net::IpAddr),
}

/// A frame's classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Class {
    pub target: Target,
    /// Offset of the L3 header.
    pub l3: u16,
    pub ethertype: u16,
}

#[derive(Default)]
pub(crate) struct PortTable {
    unicast: Unicast,
    vlans: FxHashSet<u16>,
    arp: FxHashMap<(u16, Ipv4Addr), Target>,
    nd: FxHashMap<(u16, Ipv6Addr), Target>,
    /// (VLAN, network, mask, interface) of every interface's subnets, for announcements.
    nets4: Vec<(u16, u32, u32, Target)>,
    nets6: Vec<(u16, u128, u128, Target)>,
    /// Per VLAN: the interface with a Linux mirror that link-local multicast (224.0.0.0/24,
    /// ff02::/16) on this segment goes to.
    mcast: FxHashMap<u16, Target>,
    /// This port is the Linux mirror of that interface: what arrives on it is injected.
    mirror_of: Option<Target>,
}

/// Unicast (VLAN, MAC) keys to interfaces: a direct-mapped array in front of a hash map.
/// The frames of a burst spread over many VRs miss `classify`'s last-hit compare one after
/// another, and where a hash map probes, one multiply, one load and one compare do: a burst
/// of 256 spread over 16 VRs cost 38 instructions a packet more to classify than one VR's
/// with the map alone, 19 with the front (callgrind, `dataplane`'s `density_cost`).
struct Unicast {
    /// `1 << bits` slots, each a key (or [`NO_KEY`]) and its target. A key sits in slot
    /// [`Unicast::slot`] unless another key had it first; an empty slot therefore means no
    /// key of that slot is known at all.
    front: Box<[(u64, Target)]>,
    bits: u32,
    /// The slot hash's multiplier: of [`MULTIPLIERS`], the one that left the fewest keys
    /// out of the front when it was last laid out (a few interfaces' MACs usually get a
    /// slot each, so none of their frames reaches the map).
    mul: u64,
    /// Every key, those in `front` included.
    map: FxHashMap<u64, Target>,
}

/// Odd multipliers for the slot hash (the golden ratio's, then arbitrary odd ones).
const MULTIPLIERS: [u64; 8] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
];

impl Default for Unicast {
    fn default() -> Unicast {
        Unicast::laid_out(Unicast::MIN_BITS, FxHashMap::default())
    }
}

impl Unicast {
    const MIN_BITS: u32 = 4;
    /// 4,096 slots of 16 bytes: beyond about 1,000 interfaces on one port, some keys are
    /// found in the map only.
    const MAX_BITS: u32 = 12;
    /// Up to this many keys, a key that finds its slot taken lays the front out again.
    const RELAY_KEYS: usize = 1024;

    /// The front of `map`'s keys in `1 << bits` slots, with the multiplier that places most.
    fn laid_out(bits: u32, map: FxHashMap<u64, Target>) -> Unicast {
        let none = (NO_KEY, Target { vr: 0, iface: 0 });
        let front = vec![none; 1 << bits].into_boxed_slice();
        let mut u = Unicast { front, bits, mul: MULTIPLIERS[0], map };
        let mut best = (usize::MAX, MULTIPLIERS[0]);
        for mul in MULTIPLIERS {
            u.mul = mul;
            let left = u.place();
            if left < best.0 {
                best = (left, mul);
            }
            if left == 0 {
                return u;
            }
        }
        u.mul = best.1;
        u.place();
        u
    }

    /// Lays the front out anew with `mul`; returns the keys left to the map alone.
    fn place(&mut self) -> usize {
        self.front.fill((NO_KEY, Target { vr: 0, iface: 0 }));
        let mut left = 0;
        for (&k, &t) in &self.map {
            let s = self.slot(k);
            if self.front[s].0 == NO_KEY {
                self.front[s] = (k, t);
            } else {
                left += 1;
            }
        }
        left
    }

    #[inline(always)]
    fn slot(&self, k: u64) -> usize {
        (k.wrapping_mul(self.mul) >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    fn get(&self, k: u64) -> Option<Target> {
        let (fk, t) = self.front[self.slot(k)];
        if fk == k {
            Some(t)
        } else if fk == NO_KEY {
            None
        } else {
            self.get_behind(k)
        }
    }

    /// A key whose slot another key has: out of line, so that the map's hashing is not
    /// hoisted into every frame's lookup.
    #[cold]
    #[inline(never)]
    fn get_behind(&self, k: u64) -> Option<Target> {
        self.map.get(&k).copied()
    }

    /// Adds `k` (not present); the front grows to keep at least 4 slots a key.
    fn insert(&mut self, k: u64, t: Target) {
        self.map.insert(k, t);
        let want = (self.map.len() * 4).next_power_of_two().trailing_zeros();
        let bits = want.clamp(Self::MIN_BITS, Self::MAX_BITS);
        let s = self.slot(k);
        if self.front[s].0 == NO_KEY && bits == self.bits {
            self.front[s] = (k, t);
        } else if bits > self.bits || self.map.len() <= Self::RELAY_KEYS {
            *self = Unicast::laid_out(bits, std::mem::take(&mut self.map));
        }
    }

    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn targets(&self) -> impl Iterator<Item = &Target> {
        self.map.values()
    }
}

/// fe80::/64, the link-local subnet every interface has.
const LINK_LOCAL: (u128, u128) = (0xfe80 << 112, !0 << 64);

/// A key no frame has: multicast bit set on a VLAN above 4095.
pub(crate) const NO_KEY: u64 = u64::MAX;

/// Demux tables of every port.
#[derive(Default)]
pub(crate) struct Demux {
    ports: Vec<PortTable>,
}

#[inline]
fn key(vlan: u16, mac: MacAddr) -> u64 {
    (vlan as u64) << 48 | mac.to_u64()
}

impl Demux {
    /// Empty tables for `ports` ports.
    pub fn new(ports: usize) -> Demux {
        Demux { ports: (0..ports).map(|_| PortTable::default()).collect() }
    }

    /// Registers a VR interface. Refuses, leaving the tables unchanged, an interface whose
    /// (port, VLAN, MAC) or one of whose addresses on that segment another interface has.
    pub fn add(
        &mut self,
        port: usize,
        vlan: u16,
        mac: MacAddr,
        v4: &[Ipv4Addr],
        v6: &[Ipv6Addr],
        t: Target,
    ) -> Result<(), Conflict> {
        let p = &mut self.ports[port];
        if let Some(old) = p.unicast.get(key(vlan, mac)) {
            return Err(Conflict::Mac(old));
        }
        for a in v4 {
            if let Some(&old) = p.arp.get(&(vlan, *a)) {
                return Err(Conflict::Address(old, (*a).into()));
            }
        }
        for a in v6 {
            if let Some(&old) = p.nd.get(&(vlan, *a)) {
                return Err(Conflict::Address(old, (*a).into()));
            }
        }
        p.unicast.insert(key(vlan, mac), t);
        p.vlans.insert(vlan);
        p.arp.extend(v4.iter().map(|a| ((vlan, *a), t)));
        p.nd.extend(v6.iter().map(|a| ((vlan, *a), t)));
        Ok(())
    }

    /// Registers the subnets (address, prefix length) of an interface already added, so that
    /// neighbors' announcements on them reach it.
    pub fn add_subnets(
        &mut self,
        port: usize,
        vlan: u16,
        v4: &[(Ipv4Addr, u8)],
        v6: &[(Ipv6Addr, u8)],
        t: Target,
    ) {
        let p = &mut self.ports[port];
        for &(a, len) in v4 {
            let mask = u32::MAX.checked_shl(32 - len.min(32) as u32).unwrap_or(0);
            p.nets4.push((vlan, u32::from(a) & mask, mask, t));
        }
        for &(a, len) in v6 {
            let mask = u128::MAX.checked_shl(128 - len.min(128) as u32).unwrap_or(0);
            p.nets6.push((vlan, u128::from(a) & mask, mask, t));
        }
        p.nets6.push((vlan, LINK_LOCAL.0, LINK_LOCAL.1, t));
    }

    /// Whether any VR interface, or a mirror, sits on `port`.
    pub fn has_port(&self, port: usize) -> bool {
        self.ports.get(port).is_some_and(|p| !p.unicast.is_empty() || p.mirror_of.is_some())
    }

    /// Whether frames on `port` go to two or more VRs (its demux is a choice between them).
    pub fn shared(&self, port: usize) -> bool {
        let mut vrs = self.ports[port].unicast.targets().map(|t| t.vr);
        let first = vrs.next();
        vrs.any(|v| Some(v) != first)
    }

    /// Registers `mirror` as the Linux mirror port of interface `t`, which is on `port` in
    /// VLAN `vlan`: link-local multicast on that segment goes to `t` (the first interface
    /// registered for a segment: frames are never duplicated). Refuses a mirror port that
    /// carries anything else.
    pub fn add_mirror(
        &mut self,
        mirror: usize,
        port: usize,
        vlan: u16,
        t: Target,
    ) -> Result<(), crate::BuildError> {
        if mirror == port || self.has_port(mirror) {
            return Err(crate::BuildError(format!(
                "mirror port {mirror} already carries an interface or a mirror"
            )));
        }
        self.ports[mirror].mirror_of = Some(t);
        self.ports[port].mcast.entry(vlan).or_insert(t);
        Ok(())
    }

    /// The interface whose mirror `port` is, if it is one.
    #[inline]
    pub fn mirror_of(&self, port: usize) -> Option<Target> {
        self.ports[port].mirror_of
    }

    /// Classifies one frame received on `port` (see [`PortTable::classify`]).
    #[inline(always)]
    pub fn classify(
        &self,
        port: usize,
        f: &[u8],
        last: &mut (u64, Target),
    ) -> Result<Class, PortDrop> {
        self.ports[port].classify(f, last)
    }

    /// Port `port`'s table, for a burst's frames to be classified without finding it again
    /// for each.
    #[inline(always)]
    pub fn table(&self, port: usize) -> &PortTable {
        &self.ports[port]
    }
}

impl PortTable {
    /// Classifies one frame received on this port. `last` remembers the previous unicast
    /// hit: a burst is mostly for one MAC, and a compare is cheaper than any lookup.
    #[inline(always)]
    pub fn classify(&self, f: &[u8], last: &mut (u64, Target)) -> Result<Class, PortDrop> {
        let h = l2::parse(f).ok_or(PortDrop::Runt)?;
        if h.dst.is_unicast() {
            let k = key(h.vlan, h.dst);
            if k == last.0 {
                return Ok(Class { target: last.1, l3: h.l3 as u16, ethertype: h.ethertype });
            }
            if let Some(t) = self.unicast.get(k) {
                *last = (k, t);
                return Ok(Class { target: t, l3: h.l3 as u16, ethertype: h.ethertype });
            }
        }
        let p = self;
        if !p.vlans.contains(&h.vlan) {
            return Err(PortDrop::VlanUnknown);
        }
        let target = if h.dst.is_unicast() {
            None
        } else if h.dst.is_broadcast() && h.ethertype == ethertype::ARP {
            arp_target(f, h.l3).and_then(|a| p.arp.get(&(h.vlan, a)).copied()).or_else(|| {
                let a = arp_announced(f, h.l3)?;
                p.nets4.iter().find(|n| n.0 == h.vlan && a & n.2 == n.1).map(|n| n.3)
            })
        } else if h.dst.0[..3] == [0x33, 0x33, 0xff] && h.ethertype == ethertype::IPV6 {
            ns_target(f, h.l3).and_then(|a| p.nd.get(&(h.vlan, a)).copied())
        } else if h.dst.0 == ALL_NODES_MAC && h.ethertype == ethertype::IPV6 {
            // An announcement goes to the interface whose subnet holds its target (the VR
            // learns from it, then copies it to its mirror); anything else to all nodes is
            // link-local control traffic for a mirror.
            let a = na_target(f, h.l3);
            a.and_then(|a| p.nets6.iter().find(|n| n.0 == h.vlan && a & n.2 == n.1).map(|n| n.3))
                .or_else(|| p.mcast.get(&h.vlan).copied())
        } else if link_local_group(h.dst) {
            p.mcast.get(&h.vlan).copied()
        } else {
            None
        };
        let target = target.ok_or(PortDrop::NotForUs)?;
        Ok(Class { target, l3: h.l3 as u16, ethertype: h.ethertype })
    }
}

/// Whether `mac` is the group of 224.0.0.0/24 (01:00:5e:00:00:xx) or of an IPv6 multicast
/// address (33:33:...): link-local control traffic a Linux mirror may want.
#[inline]
fn link_local_group(mac: MacAddr) -> bool {
    let m = mac.0;
    m[..5] == [0x01, 0x00, 0x5e, 0x00, 0x00] || m[..2] == [0x33, 0x33]
}

/// The target protocol address of an Ethernet/IPv4 ARP packet.
fn arp_target(f: &[u8], l3: usize) -> Option<Ipv4Addr> {
    let b: [u8; 4] = f.get(l3 + 24..l3 + 28)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

/// 33:33:00:00:00:01, the MAC of ff02::1.
const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];

/// The address an ARP announcement is about: a request whose sender and target addresses are
/// the same (RFC 5227 §3), or any broadcast reply (its sender address).
fn arp_announced(f: &[u8], l3: usize) -> Option<u32> {
    let a = f.get(l3..l3 + 28)?;
    let spa = u32::from_be_bytes(a[14..18].try_into().ok()?);
    let request_for_self = a[6..8] == [0, 1] && a[14..18] == a[24..28];
    (request_for_self || a[6..8] == [0, 2]).then_some(spa)
}

/// The target of a neighbor advertisement (without extension headers).
fn na_target(f: &[u8], l3: usize) -> Option<u128> {
    let ip = f.get(l3..)?;
    if ip.len() < 64 || ip[6] != ip_proto::ICMPV6 || ip[40] != icmpv6::NEIGHBOR_ADVERT {
        return None;
    }
    Some(u128::from_be_bytes(ip[48..64].try_into().ok()?))
}

/// The target of a neighbor solicitation sent to a solicited-node group (RFC 4861 sends them
/// without extension headers; anything else is not for us).
fn ns_target(f: &[u8], l3: usize) -> Option<Ipv6Addr> {
    let ip = f.get(l3..)?;
    if ip.len() < 64 || ip[6] != ip_proto::ICMPV6 || ip[40] != icmpv6::NEIGHBOR_SOLICIT {
        return None;
    }
    let b: [u8; 16] = ip[48..64].try_into().ok()?;
    Some(Ipv6Addr::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(i: usize) -> Target {
        Target { vr: i as u16, iface: (i >> 16) as u16 }
    }

    /// Keys like VR interfaces' MACs: 02:aa:00:00:hi:lo on VLAN `i % 3`.
    fn k(i: usize) -> u64 {
        key((i % 3) as u16, MacAddr([2, 0xaa, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8]))
    }

    #[test]
    fn unicast_finds_every_key_through_growth_collisions_and_a_full_front() {
        let mut u = Unicast::default();
        assert_eq!(u.get(k(0)), None);
        // Past MAX_BITS' 4,096 slots: most keys then live in the map alone.
        for n in 0..6000 {
            u.insert(k(n), t(n));
            // Every key so far, after every insert (the front was rebuilt along the way).
            if n < 70 || n % 997 == 0 {
                for i in 0..=n {
                    assert_eq!(u.get(k(i)), Some(t(i)), "key {i} after {n} inserts");
                }
            }
            assert_eq!(u.get(k(n + 1)), None, "key {} before its insert", n + 1);
        }
        assert_eq!(u.bits, Unicast::MAX_BITS);
        let in_front = u.front.iter().filter(|e| e.0 != NO_KEY).count();
        assert!(in_front > 2000 && in_front < 4096, "{in_front} keys in the front");
        assert_eq!(u.targets().count(), 6000);
        assert_eq!(u.get(NO_KEY), None);
    }

    #[test]
    fn a_few_interfaces_each_get_a_slot_so_none_of_their_frames_reaches_the_map() {
        for n in [2, 16, 64, 256] {
            let mut u = Unicast::default();
            for i in 0..n {
                u.insert(k(i), t(i));
            }
            let in_front = u.front.iter().filter(|e| e.0 != NO_KEY).count();
            assert_eq!(in_front, n, "{n} keys in {} slots, multiplier {:#x}", u.front.len(), u.mul);
            assert!((0..n).all(|i| u.front[u.slot(k(i))] == (k(i), t(i))));
        }
    }

    #[test]
    fn classify_demuxes_interleaved_vrs_and_refuses_an_unknown_mac() {
        let mut d = Demux::new(1);
        let mac = |i: u8| MacAddr([2, 0xaa, 0, 0, 0, i]);
        for i in 0..16u8 {
            let a = [Ipv4Addr::new(10, 0, i, 1)];
            d.add(0, 0, mac(i), &a, &[], Target { vr: i as u16, iface: 0 }).unwrap();
        }
        let conflict = d.add(0, 0, mac(3), &[], &[], Target { vr: 99, iface: 0 });
        assert_eq!(conflict, Err(Conflict::Mac(Target { vr: 3, iface: 0 })));
        let frame = |dst: MacAddr| {
            let mut f = vec![0u8; 60];
            f[..6].copy_from_slice(&dst.0);
            f[6..12].copy_from_slice(&[2, 0x10, 0, 0, 0, 1]);
            f[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
            f
        };
        let mut last = (NO_KEY, Target { vr: 0, iface: 0 });
        for round in 0..2 {
            for i in (0..16u8).rev() {
                let c = d.classify(0, &frame(mac(i)), &mut last).unwrap();
                assert_eq!(c.target, Target { vr: i as u16, iface: 0 }, "round {round}");
                assert_eq!((c.l3, c.ethertype), (14, ethertype::IPV4));
            }
        }
        assert_eq!(d.classify(0, &frame(mac(16)), &mut last), Err(PortDrop::NotForUs));
        assert_eq!(d.classify(0, &frame(mac(16))[..10], &mut last), Err(PortDrop::Runt));
    }
}
