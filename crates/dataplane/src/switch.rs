//! The learning switch (a bridge domain): VALE's forwarding loop with VPP's learning rules.
//!
//! Member ports are access ports (one VLAN, frames untagged on the wire) or trunks (a set of
//! VLANs, tagged, with an optional untagged native VLAN). A burst from one member is forwarded
//! in VALE's two passes (nm_vale_flush): first every frame is classified, its source learned
//! and its destination looked up, building one list per destination member (on the cell's
//! per-port transmit lists, `egress.rs`); then each destination gets one `tx_burst` for its
//! whole list. The first pass learns the whole burst
//! before anything is forwarded, as VPP's l2-learn node runs before l2-fwd: a reply in the
//! same burst already finds its station.
//!
//! Unlike VALE's table (direct-mapped, never ages, drops silently), the MAC table is keyed by
//! (VLAN, MAC), ages entries, keeps static entries that learning cannot move, stops learning
//! at a per-switch limit, and counts every learn, move, miss, flood and drop.
//!
//! Memory isolation: a known-unicast frame leaves in the buffer it arrived in; a flooded frame
//! is copied into a fresh buffer for each destination, so no two ports ever share a buffer.
//!
//! IGMP and MLD snooping (RFC 4541), when on: the switch reads membership reports (IGMPv1/v2/
//! v3, MLDv1/v2) and leaves, and remembers per (VLAN, group) which members joined, each until
//! the group timeout passes without a new report; a member where a query was seen is a router
//! port for as long. IP multicast to a group with members goes to those members and the
//! router ports only, in the same two passes (classified in pass 1, one `tx_burst` per
//! destination and group in pass 2). Link-local groups (224.0.0.0/24, ff02::/16 and
//! ff01::/16), unregistered groups (no member joined) and non-IP multicast are flooded;
//! reports and leaves go to the router ports (to all members while none is known), queries to
//! everyone. Sources in IGMPv3/MLDv2 records are not tracked: a record that wants any source
//! is a join of the whole group, and INCLUDE {} (or TO_IN {}) a leave. A leave takes effect at
//! once (fast leave: members are mostly single hosts). The group table is allocated when the
//! switch is built (`groups` entries, a bit and a deadline per member each); when it is full a
//! new group is not registered, so it keeps being flooded (`groups_full`).
//!
//! Every drop is also counted against the member it concerns: the one a frame arrived on, or,
//! for a full ring, the one it was to leave by.

use rustc_hash::FxHashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use ports::{Batch, MAX_BURST};
use wire::{ethernet, igmp, ip_proto, ipv4, ipv6, mld, vlan, MacAddr};

use crate::config::PortId;
use crate::counters::drop_reasons;
use crate::egress::{Links, TxOutcome};
use crate::l2;

const NONE: u16 = u16::MAX;
const MS: u64 = 1_000_000;
/// How often a learned entry's age is refreshed: more often only rewrites the same time.
const REFRESH_NS: u64 = 1_000 * MS;

/// How a member port carries VLANs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberMode {
    /// One VLAN; frames are untagged on the wire (priority-tagged frames, VLAN 0, count as
    /// untagged).
    Access { vlan: u16 },
    /// Tagged frames of these VLANs; untagged frames belong to `native`, if set.
    Trunk { vlans: Vec<u16>, native: Option<u16> },
}

impl MemberMode {
    /// The VLANs it carries: its access VLAN, or a trunk's tagged ones and its native one.
    fn vlans(&self) -> Vec<u16> {
        match self {
            MemberMode::Access { vlan } => vec![*vlan],
            MemberMode::Trunk { vlans, native } => vlans.iter().copied().chain(*native).collect(),
        }
    }
}

/// One member of a switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberConfig {
    pub port: PortId,
    pub mode: MemberMode,
}

/// A station pinned to a member: learning never moves or ages it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticMac {
    pub vlan: u16,
    pub mac: MacAddr,
    /// Index into the switch's members.
    pub member: u16,
}

/// One switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchConfig {
    pub name: String,
    pub members: Vec<MemberConfig>,
    pub statics: Vec<StaticMac>,
    /// Dynamic entries the switch learns at most; more sources are forwarded but not learned.
    pub mac_limit: u32,
    /// A learned entry not refreshed for this long is removed.
    pub aging_ms: u64,
    /// IGMP/MLD snooping; multicast is flooded without it.
    pub snooping: bool,
    /// Multicast groups (per VLAN) snooping registers at most.
    pub groups: u32,
    /// A membership (or router port) not refreshed by a report (or query) for this long ends.
    pub group_timeout_ms: u64,
}

/// Default `groups`.
pub const DEFAULT_GROUPS: u32 = 256;
/// Default `group_timeout_ms`: RFC 3376's group membership interval (2 × 125 s + 10 s).
pub const DEFAULT_GROUP_TIMEOUT_MS: u64 = 260_000;

drop_reasons! {
    /// Why a switch dropped a frame.
    SwitchDrop {
        /// Shorter than an Ethernet (or 802.1Q) header.
        Runt = "runt",
        /// The destination station sits on the port the frame came from.
        SamePort = "same_port",
        /// Tagged with a VLAN the trunk does not carry.
        VlanNotAllowed = "vlan_not_allowed",
        /// Untagged on a trunk without a native VLAN.
        UntaggedOnTrunk = "untagged_on_trunk",
        /// Tagged (VLAN 1..4094) on an access port.
        TaggedOnAccess = "tagged_on_access",
        /// The destination port's ring was full.
        TxFull = "tx_full",
        /// An IGMP or MLD message too short, with a bad checksum or a truncated record.
        GroupMessageMalformed = "igmp_mld_malformed",
    }
}

/// What one switch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchCounters {
    /// Frames received from members.
    pub rx: u64,
    /// Known-unicast frames sent to their one destination.
    pub forwarded: u64,
    /// Frames flooded (broadcast, multicast, unknown unicast), once per frame.
    pub flooded: u64,
    /// Copies made for flooding, one per destination port.
    pub flood_copies: u64,
    /// Unknown unicast destinations (flooded; also in `flooded`).
    pub miss: u64,
    /// New stations learned.
    pub learned: u64,
    /// Stations seen on another member than the one learned: moved there.
    pub moved: u64,
    /// Stations a static entry pins elsewhere: not moved.
    pub move_refused: u64,
    /// Frames for a station handed off ([`Switch::hand_off`]) that arrived by the member it
    /// is now learned on, sent to the member it left instead of dropped (`same_port`).
    pub handed_back: u64,
    /// Sources not learned because the table held `mac_limit` dynamic entries.
    pub learn_limited: u64,
    /// Entries removed by aging.
    pub aged: u64,
    /// Multicast frames sent only to a group's members and router ports, once per frame.
    pub snooped: u64,
    /// Copies made for those frames, one per destination port.
    pub snooped_copies: u64,
    /// IGMP/MLD memberships begun (a report from a member not yet in the group).
    pub joins: u64,
    /// Memberships ended by a leave (IGMPv2 leave, MLD done, a v3/v2 INCLUDE {} record).
    pub leaves: u64,
    /// Memberships and router ports ended by the group timeout.
    pub expired: u64,
    /// IGMP/MLD queries seen (their member becomes a router port).
    pub queries: u64,
    /// Joins not registered because the group table was full (the group keeps flooding).
    pub groups_full: u64,
    /// Drops by [`SwitchDrop`] reason (a flood copy a port refuses counts once per copy).
    pub drops: [u64; SwitchDrop::COUNT],
}

impl SwitchCounters {
    /// Drops for one reason.
    pub fn dropped(&self, r: SwitchDrop) -> u64 {
        self.drops[r as usize]
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    member: u16,
    seen: u64,
    fixed: bool,
    /// The member the station is leaving ([`Switch::hand_off`]), or `NONE`.
    away: u16,
}

impl Entry {
    fn learned(member: u16, seen: u64) -> Entry {
        Entry { member, seen, fixed: false, away: NONE }
    }
}

/// A row of the MAC table, for `show` and test dumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacRow {
    pub vlan: u16,
    pub mac: MacAddr,
    pub member: u16,
    pub fixed: bool,
    /// The member the station is being handed off from ([`Switch::hand_off`]).
    pub away: Option<u16>,
}

/// One registered multicast group.
#[derive(Clone, Copy)]
struct Group {
    vlan: u16,
    addr: u128,
    members: u32,
    live: bool,
}

/// A multicast frame's way out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mcast {
    Flood,
    /// To this group's members and the router ports.
    Group(u32),
    /// To the router ports only (reports and leaves).
    Routers,
}

/// The `Mcast::Routers` pseudo-group in the per-frame list.
const ROUTERS: u32 = u32::MAX;

/// IGMP/MLD snooping state, all allocated when the switch is built.
struct Snoop {
    index: FxHashMap<(u16, u128), u32>,
    groups: Vec<Group>,
    free: Vec<u32>,
    /// Words of member bits per group.
    words: usize,
    /// Per group: a bit per member that joined.
    bits: Box<[u64]>,
    /// Per group and member: when the membership ends.
    until: Box<[u64]>,
    /// Per member: until when it is a router port.
    router_until: Box<[u64]>,
    timeout: u64,
}

impl Snoop {
    fn new(groups: u32, members: usize, timeout_ms: u64) -> Snoop {
        let n = groups as usize;
        let words = members.div_ceil(64).max(1);
        Snoop {
            index: FxHashMap::with_capacity_and_hasher(n * 2, Default::default()),
            groups: vec![Group { vlan: 0, addr: 0, members: 0, live: false }; n],
            free: (0..groups).rev().collect(),
            words,
            bits: vec![0; n * words].into_boxed_slice(),
            until: vec![0; n * members].into_boxed_slice(),
            router_until: vec![0; members].into_boxed_slice(),
            timeout: timeout_ms * MS,
        }
    }

    #[inline]
    fn has(&self, g: u32, m: u16) -> bool {
        self.bits[g as usize * self.words + m as usize / 64] >> (m % 64) & 1 == 1
    }

    #[inline]
    fn is_router(&self, m: u16, now: u64) -> bool {
        self.router_until[m as usize] > now
    }

    /// Makes room for one more member (of `members` now), keeping every membership.
    fn grow(&mut self, members: usize) {
        let n = self.groups.len();
        let words = (members + 1).div_ceil(64).max(1);
        let mut bits = vec![0; n * words];
        let mut until = vec![0; n * (members + 1)];
        for g in 0..n {
            bits[g * words..g * words + self.words]
                .copy_from_slice(&self.bits[g * self.words..(g + 1) * self.words]);
            until[g * (members + 1)..g * (members + 1) + members]
                .copy_from_slice(&self.until[g * members..(g + 1) * members]);
        }
        let mut router_until = self.router_until.to_vec();
        router_until.push(0);
        self.words = words;
        self.bits = bits.into_boxed_slice();
        self.until = until.into_boxed_slice();
        self.router_until = router_until.into_boxed_slice();
    }

    /// Clears member `m`'s bit in group `g`; frees the group when it was the last.
    fn remove(&mut self, g: u32, m: u16) {
        self.bits[g as usize * self.words + m as usize / 64] &= !(1u64 << (m % 64));
        let gr = &mut self.groups[g as usize];
        gr.members -= 1;
        if gr.members == 0 {
            gr.live = false;
            self.index.remove(&(gr.vlan, gr.addr));
            self.free.push(g);
        }
    }
}

struct Member {
    port: PortId,
    mode: MemberMode,
    /// The last source learned on this member and when its entry was refreshed (VALE's
    /// `last_smac`): a burst mostly comes from one station.
    last_src: (u64, u64),
    /// Taken out ([`Switch::remove_member_on`]): its number stays, unused.
    gone: bool,
}

impl Member {
    /// The VLAN of a frame arriving with tag `tag` (0: untagged or priority-tagged).
    #[inline]
    fn ingress_vlan(&self, tag: u16) -> Result<u16, SwitchDrop> {
        match &self.mode {
            MemberMode::Access { vlan } if tag == 0 => Ok(*vlan),
            MemberMode::Access { .. } => Err(SwitchDrop::TaggedOnAccess),
            MemberMode::Trunk { native: Some(n), .. } if tag == 0 => Ok(*n),
            MemberMode::Trunk { .. } if tag == 0 => Err(SwitchDrop::UntaggedOnTrunk),
            MemberMode::Trunk { vlans, .. } if vlans.contains(&tag) => Ok(tag),
            MemberMode::Trunk { .. } => Err(SwitchDrop::VlanNotAllowed),
        }
    }

    /// How a frame of `vlan` leaves this member: untagged (`Some(None)`), tagged
    /// (`Some(Some(vid))`), or not at all.
    #[inline]
    fn egress_tag(&self, vlan: u16) -> Option<Option<u16>> {
        match &self.mode {
            MemberMode::Access { vlan: v } => (*v == vlan).then_some(None),
            MemberMode::Trunk { native, .. } if *native == Some(vlan) => Some(None),
            MemberMode::Trunk { vlans, .. } => vlans.contains(&vlan).then_some(Some(vlan)),
        }
    }
}

/// Why a switch could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchError(pub String);

impl fmt::Display for SwitchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SwitchError {}

#[inline]
fn key(vlan: u16, mac: MacAddr) -> u64 {
    (vlan as u64) << 48 | mac.to_u64()
}

/// A learning switch.
pub struct Switch {
    name: String,
    members: Vec<Member>,
    /// Members of each VLAN, for flooding.
    flood_sets: FxHashMap<u16, Box<[u16]>>,
    table: FxHashMap<u64, Entry>,
    dynamic: u32,
    limit: u32,
    aging: u64,
    counters: SwitchCounters,
    member_drops: Vec<[u64; SwitchDrop::COUNT]>,
    snoop: Option<Snoop>,
    /// Per port of the cell: the member on it, or `NONE`.
    member_at: Vec<u16>,
    // Burst scratch: VLAN and L3 offset per frame, the flooded frames, and the buffers flood
    // copies are made in (known unicast is staged on the cell's egress lists).
    vlan: Box<[u16; MAX_BURST]>,
    l3: Box<[u8; MAX_BURST]>,
    floods: Vec<u16>,
    /// Snooped multicast frames of the burst and their groups (or `ROUTERS`).
    mcast: Vec<(u16, u32)>,
    /// The time of the burst being forwarded.
    now: u64,
    copies: Batch,
}

impl Switch {
    /// Builds a switch; its members' ports are numbered as the engine's.
    pub fn new(cfg: &SwitchConfig) -> Result<Switch, SwitchError> {
        let err = |m: String| Err(SwitchError(format!("switch {}: {m}", cfg.name)));
        if cfg.members.len() >= NONE as usize {
            return err(format!("{} members, at most {}", cfg.members.len(), NONE - 1));
        }
        if cfg.snooping && cfg.groups == 0 {
            return err("snooping needs room for at least one group".into());
        }
        let mut flood_sets: FxHashMap<u16, Vec<u16>> = FxHashMap::default();
        for (i, m) in cfg.members.iter().enumerate() {
            for v in m.mode.vlans() {
                if !(1..=4094).contains(&v) {
                    return err(format!(
                        "member {i} (port {}) has VLAN {v}, outside 1..=4094",
                        m.port
                    ));
                }
                flood_sets.entry(v).or_default().push(i as u16);
            }
        }
        let mut table = FxHashMap::with_capacity_and_hasher(
            (cfg.mac_limit as usize + cfg.statics.len()) * 2,
            Default::default(),
        );
        for s in &cfg.statics {
            if s.member as usize >= cfg.members.len() || !s.mac.is_unicast() {
                return err(format!(
                    "static entry {} vlan {} on member {} is not valid",
                    s.mac, s.vlan, s.member
                ));
            }
            let e = Entry { fixed: true, ..Entry::learned(s.member, 0) };
            table.insert(key(s.vlan, s.mac), e);
        }
        Ok(Switch {
            name: cfg.name.clone(),
            members: cfg
                .members
                .iter()
                .map(|m| Member {
                    port: m.port,
                    mode: m.mode.clone(),
                    last_src: (u64::MAX, 0),
                    gone: false,
                })
                .collect(),
            flood_sets: flood_sets.into_iter().map(|(v, m)| (v, m.into_boxed_slice())).collect(),
            table,
            dynamic: 0,
            limit: cfg.mac_limit,
            aging: cfg.aging_ms * MS,
            counters: SwitchCounters::default(),
            member_drops: vec![[0; SwitchDrop::COUNT]; cfg.members.len()],
            snoop: cfg
                .snooping
                .then(|| Snoop::new(cfg.groups, cfg.members.len(), cfg.group_timeout_ms)),
            vlan: Box::new([0; MAX_BURST]),
            l3: Box::new([0; MAX_BURST]),
            member_at: member_at(cfg),
            floods: Vec::with_capacity(MAX_BURST),
            mcast: Vec::with_capacity(MAX_BURST),
            now: 0,
            copies: Batch::new(MAX_BURST),
        })
    }

    /// Adds a member on port `port` (numbered as the cell's) in `mode`, after the others:
    /// what the switch learned, snooped and counted is kept, and the member is flooded to from
    /// the next burst. On error nothing changes.
    pub fn add_member(&mut self, port: PortId, mode: MemberMode) -> Result<(), SwitchError> {
        let err = |m: String| Err(SwitchError(format!("switch {}: {m}", self.name)));
        if self.members.len() + 1 >= NONE as usize {
            return err(format!("{} members, at most {}", self.members.len() + 1, NONE - 1));
        }
        if self.member_at.get(usize::from(port)).is_some_and(|&m| m != NONE) {
            return err(format!("port {port} is already a member"));
        }
        let vlans = mode.vlans();
        if let Some(v) = vlans.iter().find(|v| !(1..=4094).contains(*v)) {
            return err(format!("new member (port {port}) has VLAN {v}, outside 1..=4094"));
        }
        let i = self.members.len() as u16;
        if let Some(sn) = self.snoop.as_mut() {
            sn.grow(self.members.len());
        }
        for v in vlans {
            let mut set = self.flood_sets.remove(&v).map(Vec::from).unwrap_or_default();
            set.push(i);
            self.flood_sets.insert(v, set.into_boxed_slice());
        }
        self.members.push(Member { port, mode, last_src: (u64::MAX, 0), gone: false });
        self.member_drops.push([0; SwitchDrop::COUNT]);
        if self.member_at.len() <= usize::from(port) {
            self.member_at.resize(usize::from(port) + 1, NONE);
        }
        self.member_at[usize::from(port)] = i;
        Ok(())
    }

    /// The member on port `port`.
    fn member_on(&self, port: PortId) -> Result<u16, SwitchError> {
        match self.member_at.get(usize::from(port)) {
            Some(&m) if m != NONE => Ok(m),
            _ => Err(SwitchError(format!("switch {}: port {port} is not a member", self.name))),
        }
    }

    /// Takes the member on port `port` out (a VR leaving the switch): from the next burst
    /// nothing is flooded or forwarded to it, and what was learned or snooped on it, and the
    /// hand-offs from it, are forgotten. The other members keep their numbers and entries;
    /// the port then belongs to no member (its number is not reused). A member with static
    /// entries stays. On error nothing changes.
    pub fn remove_member_on(&mut self, port: PortId) -> Result<(), SwitchError> {
        let i = self.member_on(port)?;
        if self.table.values().any(|e| e.fixed && e.member == i) {
            return Err(SwitchError(format!(
                "switch {}: member {i} (port {port}) has static entries",
                self.name
            )));
        }
        let before = self.table.len();
        self.table.retain(|_, e| e.member != i);
        self.dynamic -= (before - self.table.len()) as u32;
        self.end_hand_off_from(i);
        for set in self.flood_sets.values_mut() {
            if set.contains(&i) {
                *set = set.iter().copied().filter(|&m| m != i).collect();
            }
        }
        if let Some(sn) = self.snoop.as_mut() {
            for g in 0..sn.groups.len() as u32 {
                if sn.groups[g as usize].live && sn.has(g, i) {
                    sn.remove(g, i);
                }
            }
            sn.router_until[usize::from(i)] = 0;
        }
        self.member_at[usize::from(port)] = NONE;
        self.members[usize::from(i)].gone = true;
        Ok(())
    }

    /// Station `mac` is leaving the member on port `port`: its VR moves to another host live,
    /// and from its stop until it is removed here what reaches its member goes on to the
    /// destination. Until that member leaves or [`Switch::end_hand_off`], a frame for the
    /// station that arrives by the member it is learned on is sent to the member it left
    /// (`handed_back`) instead of dropped as `same_port`.
    ///
    /// Why: the destination's announcements reach this switch through its tunnel member
    /// (VXLAN) and move the station there, while frames a third host sent before it learned
    /// of the move still arrive through that same member. Learning stays as it is, so this
    /// host's own members reach the station at its new place directly. A station not in the
    /// table is learned on the member now (when the table has room; unknown, it is flooded,
    /// and so reaches the member anyway). On error nothing changes.
    pub fn hand_off(&mut self, port: PortId, mac: MacAddr) -> Result<(), SwitchError> {
        let m = self.member_on(port)?;
        if !mac.is_unicast() {
            return Err(SwitchError(format!("switch {}: {mac} is not a station", self.name)));
        }
        for v in self.members[usize::from(m)].mode.vlans() {
            match self.table.get_mut(&key(v, mac)) {
                Some(e) => e.away = m,
                None if self.dynamic < self.limit => {
                    let e = Entry { away: m, ..Entry::learned(m, self.now) };
                    self.table.insert(key(v, mac), e);
                    self.dynamic += 1;
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Ends the hand-offs from the member on port `port` (a move that failed: its VR runs
    /// here again). Returns how many stations it ended.
    pub fn end_hand_off(&mut self, port: PortId) -> Result<usize, SwitchError> {
        let m = self.member_on(port)?;
        Ok(self.end_hand_off_from(m))
    }

    fn end_hand_off_from(&mut self, m: u16) -> usize {
        let mut n = 0;
        for e in self.table.values_mut().filter(|e| e.away == m) {
            e.away = NONE;
            n += 1;
        }
        n
    }

    /// The members still on the switch (those not taken out): (member number, port).
    pub fn live_members(&self) -> impl Iterator<Item = (u16, PortId)> + '_ {
        (self.members.iter().enumerate()).filter(|(_, m)| !m.gone).map(|(i, m)| (i as u16, m.port))
    }

    /// The switch's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its counters.
    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
    }

    /// Drops per member (by [`SwitchDrop`] reason), in member order.
    pub fn member_drops(&self) -> &[[u64; SwitchDrop::COUNT]] {
        &self.member_drops
    }

    /// The registered multicast groups, sorted by VLAN and address: each with the members
    /// that joined it.
    pub fn groups(&self) -> Vec<GroupRow> {
        let Some(sn) = &self.snoop else { return Vec::new() };
        let mut v: Vec<GroupRow> = sn
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.live)
            .map(|(i, g)| GroupRow {
                vlan: g.vlan,
                group: unmap(g.addr),
                members: (0..self.members.len() as u16).filter(|&m| sn.has(i as u32, m)).collect(),
            })
            .collect();
        v.sort_by_key(|r| (r.vlan, r.group));
        v
    }

    /// How many multicast groups snooping has registered.
    pub fn group_count(&self) -> usize {
        self.snoop.as_ref().map_or(0, |s| s.index.len())
    }

    /// The members that are router ports now (a query was seen on them lately).
    pub fn router_members(&self, now: u64) -> Vec<u16> {
        let Some(sn) = &self.snoop else { return Vec::new() };
        (0..self.members.len() as u16).filter(|&m| sn.is_router(m, now)).collect()
    }

    /// The ports of its members, in member order.
    pub fn member_ports(&self) -> impl Iterator<Item = PortId> + '_ {
        self.members.iter().map(|m| m.port)
    }

    /// The MAC table, sorted by VLAN and MAC.
    pub fn table(&self) -> Vec<MacRow> {
        let mut v: Vec<MacRow> = self
            .table
            .iter()
            .map(|(&k, e)| MacRow {
                vlan: (k >> 48) as u16,
                mac: MacAddr::from_bytes(&k.to_be_bytes()[2..]),
                member: e.member,
                fixed: e.fixed,
                away: (e.away != NONE).then_some(e.away),
            })
            .collect();
        v.sort_by_key(|r| (r.vlan, r.mac));
        v
    }

    /// Removes learned entries not refreshed within the aging time.
    pub fn age(&mut self, now: u64) {
        let aging = self.aging;
        let before = self.table.len();
        self.table.retain(|_, e| e.fixed || now.saturating_sub(e.seen) < aging);
        let gone = (before - self.table.len()) as u64;
        self.dynamic -= gone as u32;
        self.counters.aged += gone;
        if gone > 0 {
            for m in &mut self.members {
                m.last_src = (u64::MAX, 0);
            }
        }
        let n = self.members.len();
        if let Some(sn) = &mut self.snoop {
            for g in 0..sn.groups.len() {
                if !sn.groups[g].live {
                    continue;
                }
                for m in 0..n {
                    if sn.has(g as u32, m as u16) && sn.until[g * n + m] <= now {
                        sn.remove(g as u32, m as u16);
                        self.counters.expired += 1;
                    }
                }
            }
            for r in sn.router_until.iter_mut() {
                if *r != 0 && *r <= now {
                    *r = 0;
                    self.counters.expired += 1;
                }
            }
        }
    }

    /// Forwards the frames in `slots` of `batch`, received on member `from`: pass 1
    /// classifies and learns the whole burst, staging known unicast on its port's list, pass 2
    /// sends each port its list with one `tx_burst`, then the floods and snooped multicast.
    pub(crate) fn forward(
        &mut self,
        links: &mut Links,
        from: u16,
        batch: &mut Batch,
        slots: std::ops::Range<usize>,
        now: u64,
    ) {
        self.counters.rx += slots.len() as u64;
        self.now = now;
        for i in slots {
            if let Some(d) = self.classify(from, batch.get(i).frame(), i, now) {
                links.egress.add(self.members[d as usize].port, i as u16);
            }
        }
        links.flush(batch, self);
        self.send_floods(links, from, batch);
        self.send_groups(links, from, batch);
    }

    /// Pass 1 for one frame: its VLAN, learning its source, and its destination: a member
    /// (returned, for the caller to stage), the flood list, or a drop.
    #[inline]
    fn classify(&mut self, from: u16, f: &[u8], i: usize, now: u64) -> Option<u16> {
        let Some(h) = l2::parse(f) else {
            self.drop(from, SwitchDrop::Runt);
            return None;
        };
        let vlan = match self.members[from as usize].ingress_vlan(h.vlan) {
            Ok(v) => v,
            Err(r) => {
                self.drop(from, r);
                return None;
            }
        };
        self.vlan[i] = vlan;
        self.l3[i] = h.l3 as u8;
        let src = ethernet::Frame::new_unchecked(f).src_addr();
        if src.is_unicast() {
            self.learn(from, key(vlan, src), now);
        }
        if !h.dst.is_unicast() {
            let how = match self.snoop.is_some() && !h.dst.is_broadcast() {
                true => self.snoop_frame(from, vlan, f, h.ethertype, h.l3, now),
                false => Some(Mcast::Flood),
            };
            match how {
                Some(Mcast::Flood) => self.floods.push(i as u16),
                Some(Mcast::Group(g)) => self.mcast.push((i as u16, g)),
                Some(Mcast::Routers) => self.mcast.push((i as u16, ROUTERS)),
                None => self.drop(from, SwitchDrop::GroupMessageMalformed),
            }
            return None;
        }
        match self.table.get(&key(vlan, h.dst)) {
            Some(e) if e.member == from && (e.away == NONE || e.away == from) => {
                self.drop(from, SwitchDrop::SamePort)
            }
            Some(e) if e.member == from => {
                let away = e.away;
                self.counters.handed_back += 1;
                return Some(away);
            }
            Some(e) => return Some(e.member),
            None => {
                self.counters.miss += 1;
                self.floods.push(i as u16);
            }
        }
        None
    }

    #[inline]
    fn learn(&mut self, from: u16, k: u64, now: u64) {
        let m = &mut self.members[from as usize];
        if m.last_src.0 == k && now.saturating_sub(m.last_src.1) < REFRESH_NS {
            return;
        }
        m.last_src = (k, now);
        match self.table.get_mut(&k) {
            Some(e) if e.fixed => {
                if e.member != from {
                    self.counters.move_refused += 1;
                }
            }
            Some(e) => {
                if e.member != from {
                    e.member = from;
                    self.counters.moved += 1;
                }
                e.seen = now;
            }
            None if self.dynamic < self.limit => {
                self.table.insert(k, Entry::learned(from, now));
                self.dynamic += 1;
                self.counters.learned += 1;
            }
            None => self.counters.learn_limited += 1,
        }
    }

    #[inline]
    fn drop(&mut self, member: u16, r: SwitchDrop) {
        self.drop_n(member, r, 1);
    }

    #[inline]
    fn drop_n(&mut self, member: u16, r: SwitchDrop, n: u64) {
        self.counters.drops[r as usize] += n;
        self.member_drops[member as usize][r as usize] += n;
    }

    /// Snooping for one multicast frame: reads IGMP/MLD messages, and says where the frame
    /// goes (`None`: a malformed IGMP/MLD message, dropped).
    #[inline(never)]
    fn snoop_frame(
        &mut self,
        from: u16,
        vlan: u16,
        f: &[u8],
        ethertype: u16,
        l3: usize,
        now: u64,
    ) -> Option<Mcast> {
        let ip = &f[l3..];
        match ethertype {
            wire::ethertype::IPV4 => {
                let Ok(p) = ipv4::Packet::new_checked(ip) else { return Some(Mcast::Flood) };
                let hl = p.header_len();
                let end = (p.total_len() as usize).min(ip.len());
                if p.version() != 4 || hl < 20 || hl > end {
                    return Some(Mcast::Flood);
                }
                let dst = map4(p.dst_addr().into());
                if p.protocol() != ip_proto::IGMP || p.frag_offset() != 0 || p.more_frags() {
                    return Some(self.group_way(vlan, dst));
                }
                self.igmp(from, vlan, &ip[hl..end], now)
            }
            wire::ethertype::IPV6 => {
                let Ok(p) = ipv6::Packet::new_checked(ip) else { return Some(Mcast::Flood) };
                let (src, dst) = (p.src_addr(), p.dst_addr());
                let end = (ipv6::HEADER_LEN + p.payload_len() as usize).min(ip.len());
                if let Ok(ul) = p.upper_layer() {
                    let b = ip.get(ul.offset..end).unwrap_or_default();
                    let is_mld = b.first().is_some_and(|&t| mld::is_mld(t));
                    if ul.protocol == ip_proto::ICMPV6 && ul.fragment.is_none() && is_mld {
                        if !wire::icmpv6::Packet::new_unchecked(b).verify_checksum(&src, &dst) {
                            return None;
                        }
                        return self.mld(from, vlan, b, now);
                    }
                }
                Some(self.group_way(vlan, dst.into()))
            }
            _ => Some(Mcast::Flood),
        }
    }

    /// Where multicast data to `addr` (IPv4 mapped) goes: flooded when link-local (or not IP
    /// multicast at all) or unregistered, else to its group.
    #[inline]
    fn group_way(&self, vlan: u16, addr: u128) -> Mcast {
        let Some(sn) = self.snoop.as_ref() else { return Mcast::Flood };
        match registrable(addr) {
            false => Mcast::Flood,
            true => sn.index.get(&(vlan, addr)).map_or(Mcast::Flood, |&g| Mcast::Group(g)),
        }
    }

    /// An IGMP message from member `from`.
    fn igmp(&mut self, from: u16, vlan: u16, b: &[u8], now: u64) -> Option<Mcast> {
        let m = igmp::Packet::new_checked(b).ok().filter(|m| m.verify_checksum())?;
        match m.msg_type() {
            igmp::MEMBERSHIP_QUERY => return Some(self.query(from, now)),
            igmp::V1_REPORT | igmp::V2_REPORT => {
                self.join(from, vlan, map4(m.group_addr().into()), now)
            }
            igmp::LEAVE_GROUP => self.leave(from, vlan, map4(m.group_addr().into())),
            igmp::V3_REPORT => {
                // A report with a bad record is refused whole, before any of it is applied.
                if m.records().any(|r| r.is_err()) {
                    return None;
                }
                for r in m.records().flatten() {
                    let g = map4(u32::from_be_bytes(r.group));
                    self.record(from, vlan, g, r.record_type, r.sources, now);
                }
            }
            _ => return Some(Mcast::Flood),
        }
        Some(self.to_routers(vlan, now))
    }

    /// An MLD message (checksum checked) from member `from`.
    fn mld(&mut self, from: u16, vlan: u16, b: &[u8], now: u64) -> Option<Mcast> {
        let m = mld::Packet::new_checked(b).ok()?;
        match m.msg_type() {
            mld::QUERY => return Some(self.query(from, now)),
            mld::V1_REPORT => self.join(from, vlan, m.group_addr().into(), now),
            mld::V1_DONE => self.leave(from, vlan, m.group_addr().into()),
            _ => {
                if m.records().any(|r| r.is_err()) {
                    return None;
                }
                for r in m.records().flatten() {
                    let g = u128::from_be_bytes(r.group);
                    self.record(from, vlan, g, r.record_type, r.sources, now);
                }
            }
        }
        Some(self.to_routers(vlan, now))
    }

    /// A query: its member is a router port for the group timeout. Queries reach everyone.
    fn query(&mut self, from: u16, now: u64) -> Mcast {
        let Some(sn) = self.snoop.as_mut() else { return Mcast::Flood };
        sn.router_until[from as usize] = now + sn.timeout;
        self.counters.queries += 1;
        Mcast::Flood
    }

    /// Reports and leaves go to the router ports of their VLAN, or everywhere while none is
    /// known.
    fn to_routers(&self, vlan: u16, now: u64) -> Mcast {
        let Some(sn) = self.snoop.as_ref() else { return Mcast::Flood };
        let set = self.flood_sets.get(&vlan).map_or(&[][..], |s| &s[..]);
        match set.iter().any(|&d| sn.is_router(d, now)) {
            true => Mcast::Routers,
            false => Mcast::Flood,
        }
    }

    /// One IGMPv3/MLDv2 group record: any-source interest is a join, INCLUDE {} a leave.
    fn record(&mut self, from: u16, vlan: u16, g: u128, kind: u8, sources: u16, now: u64) {
        use igmp::record::*;
        match kind {
            MODE_IS_EXCLUDE | CHANGE_TO_EXCLUDE => self.join(from, vlan, g, now),
            MODE_IS_INCLUDE | CHANGE_TO_INCLUDE | ALLOW_NEW_SOURCES if sources > 0 => {
                self.join(from, vlan, g, now)
            }
            MODE_IS_INCLUDE | CHANGE_TO_INCLUDE => self.leave(from, vlan, g),
            _ => {}
        }
    }

    /// Member `from` wants group `g` (IPv4 mapped): registered, or its membership refreshed.
    /// Link-local and non-multicast groups are not registered: they are always flooded.
    fn join(&mut self, from: u16, vlan: u16, g: u128, now: u64) {
        if !registrable(g) {
            return;
        }
        let n = self.members.len();
        let Some(sn) = self.snoop.as_mut() else { return };
        let gi = match sn.index.get(&(vlan, g)) {
            Some(&gi) => gi,
            None => {
                let Some(gi) = sn.free.pop() else {
                    self.counters.groups_full += 1;
                    return;
                };
                sn.groups[gi as usize] = Group { vlan, addr: g, members: 0, live: true };
                sn.index.insert((vlan, g), gi);
                gi
            }
        };
        if !sn.has(gi, from) {
            sn.bits[gi as usize * sn.words + from as usize / 64] |= 1u64 << (from % 64);
            sn.groups[gi as usize].members += 1;
            self.counters.joins += 1;
        }
        sn.until[gi as usize * n + from as usize] = now + sn.timeout;
    }

    /// Member `from` leaves group `g`, at once.
    fn leave(&mut self, from: u16, vlan: u16, g: u128) {
        let Some(sn) = self.snoop.as_mut() else { return };
        if let Some(&gi) = sn.index.get(&(vlan, g)) {
            if sn.has(gi, from) {
                sn.remove(gi, from);
                self.counters.leaves += 1;
            }
        }
    }

    /// Pass 2, floods: for each member of a flooded frame's VLAN but its source, a copy in a
    /// buffer of its own; one `tx_burst` per destination.
    fn send_floods(&mut self, links: &mut Links, from: u16, batch: &mut Batch) {
        if self.floods.is_empty() {
            return;
        }
        self.counters.flooded += self.floods.len() as u64;
        // A burst is nearly always one VLAN: flood per VLAN present, in order of appearance.
        while let Some(&first) = self.floods.first() {
            let vlan = self.vlan[first as usize];
            if let Some(set) = self.flood_sets.get(&vlan) {
                for &d in set.iter().filter(|&&d| d != from) {
                    let m = &self.members[d as usize];
                    let tag = m.egress_tag(vlan).unwrap_or(None);
                    self.copies.clear();
                    for &i in self.floods.iter().filter(|&&i| self.vlan[i as usize] == vlan) {
                        let Some(buf) = self.copies.spare_mut() else { break };
                        if buf.fill(batch.get(i as usize).frame()) {
                            retag(buf, self.l3[i as usize] as usize, tag);
                            self.copies.commit();
                        }
                    }
                    let sel = &ALL_SLOTS[..self.copies.len()];
                    let k = links.send(m.port as usize, &mut self.copies, sel);
                    self.counters.flood_copies += k as u64;
                    self.counters.drops[SwitchDrop::TxFull as usize] += (sel.len() - k) as u64;
                    self.member_drops[d as usize][SwitchDrop::TxFull as usize] +=
                        (sel.len() - k) as u64;
                }
            }
            self.floods.retain(|&i| self.vlan[i as usize] != vlan);
        }
        self.floods.clear();
    }

    /// Pass 2, snooped multicast: per (VLAN, group) of the burst, a copy for each member of
    /// the VLAN that joined the group or is a router port, the source excepted.
    fn send_groups(&mut self, links: &mut Links, from: u16, batch: &mut Batch) {
        if self.mcast.is_empty() {
            return;
        }
        let Some(sn) = &self.snoop else { return };
        self.counters.snooped += self.mcast.len() as u64;
        let now = self.now;
        while let Some(&(first, g)) = self.mcast.first() {
            let vlan = self.vlan[first as usize];
            let same = |&(i, h): &(u16, u32)| h == g && self.vlan[i as usize] == vlan;
            if let Some(set) = self.flood_sets.get(&vlan) {
                for &d in set.iter() {
                    let wanted = sn.is_router(d, now) || (g != ROUTERS && sn.has(g, d));
                    if d == from || !wanted {
                        continue;
                    }
                    let m = &self.members[d as usize];
                    let tag = m.egress_tag(vlan).unwrap_or(None);
                    self.copies.clear();
                    for &(i, _) in self.mcast.iter().filter(|x| same(x)) {
                        let Some(buf) = self.copies.spare_mut() else { break };
                        if buf.fill(batch.get(i as usize).frame()) {
                            retag(buf, self.l3[i as usize] as usize, tag);
                            self.copies.commit();
                        }
                    }
                    let sel = &ALL_SLOTS[..self.copies.len()];
                    let k = links.send(m.port as usize, &mut self.copies, sel);
                    self.counters.snooped_copies += k as u64;
                    self.counters.drops[SwitchDrop::TxFull as usize] += (sel.len() - k) as u64;
                    self.member_drops[d as usize][SwitchDrop::TxFull as usize] +=
                        (sel.len() - k) as u64;
                }
            }
            self.mcast.retain(|x| !same(x));
        }
    }
}

/// Known unicast, staged per port on the cell's egress lists: tagged for its member just
/// before it leaves, and what the port refused counted on that member.
impl TxOutcome for Switch {
    #[inline]
    fn before(&mut self, p: u16, batch: &mut Batch, sel: &[u16]) {
        let m = &self.members[self.member_at[p as usize] as usize];
        for &i in sel {
            let tag = m.egress_tag(self.vlan[i as usize]).unwrap_or(None);
            retag(batch.get_mut(i as usize), self.l3[i as usize] as usize, tag);
        }
    }

    #[inline]
    fn after(&mut self, p: u16, sel: &[u16], taken: usize) {
        self.counters.forwarded += taken as u64;
        let d = self.member_at[p as usize];
        self.drop_n(d, SwitchDrop::TxFull, (sel.len() - taken) as u64);
    }
}

/// Per port (numbered as the cell's, up to the highest member's): the member on it, or `NONE`.
fn member_at(cfg: &SwitchConfig) -> Vec<u16> {
    let n = cfg.members.iter().map(|m| m.port as usize + 1).max().unwrap_or(0);
    let mut at = vec![NONE; n];
    for (i, m) in cfg.members.iter().enumerate() {
        at[m.port as usize] = i as u16;
    }
    at
}

/// A registered group, for `show` and test dumps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRow {
    pub vlan: u16,
    pub group: IpAddr,
    /// The members that joined, in member order.
    pub members: Vec<u16>,
}

/// An IPv4 address, IPv4-mapped (as the group table keys them).
#[inline]
fn map4(a: u32) -> u128 {
    0xffff_0000_0000 | a as u128
}

fn unmap(a: u128) -> IpAddr {
    let a = Ipv6Addr::from(a);
    a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
}

/// Whether a group may be registered: IPv4 multicast outside 224.0.0.0/24, IPv6 multicast
/// of a scope wider than link-local.
fn registrable(g: u128) -> bool {
    match Ipv6Addr::from(g).to_ipv4_mapped() {
        Some(a) => a.is_multicast() && a.octets()[..3] != [224, 0, 0],
        None => g >> 120 == 0xff && !matches!(g >> 112 & 0xf, 0..=2),
    }
}

/// 0, 1, 2 ... as `tx_burst` selections of a whole batch.
static ALL_SLOTS: [u16; MAX_BURST] = {
    let mut a = [0u16; MAX_BURST];
    let mut i = 0;
    while i < MAX_BURST {
        a[i] = i as u16;
        i += 1;
    }
    a
};

/// Gives a frame whose L3 header is at `l3` the 802.1Q tag `tag` (or none), keeping its
/// MACs and ethertype.
#[inline]
fn retag(buf: &mut ports::PktBuf, l3: usize, tag: Option<u16>) {
    let want = if tag.is_some() { l2::ETH_VLAN_LEN } else { l2::ETH_LEN };
    if want == l3 {
        if let Some(v) = tag {
            vlan::Tag::new_unchecked(&mut buf.frame_mut()[l2::ETH_LEN..]).set_vid(v);
        }
        return;
    }
    let f = buf.frame();
    let eth = ethernet::Frame::new_unchecked(f);
    let (dst, src) = (eth.dst_addr(), eth.src_addr());
    let et = u16::from_be_bytes([f[l3 - 2], f[l3 - 1]]);
    l2::write(buf, l3, tag, dst, src, et);
}
