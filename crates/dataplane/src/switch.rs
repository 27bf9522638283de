//! The learning switch (a bridge domain): VALE's forwarding loop with VPP's learning rules.
//!
//! Member ports are access ports (one VLAN, frames untagged on the wire) or trunks (a set of
//! VLANs, tagged, with an optional untagged native VLAN). A burst from one member is forwarded
//! in VALE's two passes (nm_vale_flush): first every frame is classified, its source learned
//! and its destination looked up, building one list per destination member; then each
//! destination gets one `tx_burst` for its whole list. The first pass learns the whole burst
//! before anything is forwarded, as VPP's l2-learn node runs before l2-fwd: a reply in the
//! same burst already finds its station.
//!
//! Unlike VALE's table (direct-mapped, never ages, drops silently), the MAC table is keyed by
//! (VLAN, MAC), ages entries, keeps static entries that learning cannot move, stops learning
//! at a per-switch limit, and counts every learn, move, miss, flood and drop.
//!
//! Memory isolation: a known-unicast frame leaves in the buffer it arrived in; a flooded frame
//! is copied into a fresh buffer for each destination, so no two ports ever share a buffer.

use rustc_hash::FxHashMap;
use std::fmt;

use ports::{Batch, Port, MAX_BURST};
use wire::MacAddr;

use crate::config::PortId;
use crate::counters::PortCounters;
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
}

macro_rules! switch_drops {
    ($($v:ident = $s:literal, $doc:literal;)*) => {
        /// Why a switch dropped a frame.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub enum SwitchDrop { $(#[doc = $doc] $v,)* }

        impl SwitchDrop {
            /// Every reason, in counter order.
            pub const ALL: &'static [SwitchDrop] = &[$(SwitchDrop::$v,)*];
            /// Number of reasons.
            pub const COUNT: usize = Self::ALL.len();
            /// The reason's name in tables and JSON.
            pub const fn name(self) -> &'static str {
                match self { $(SwitchDrop::$v => $s,)* }
            }
        }
    };
}

switch_drops! {
    Runt = "runt", "Shorter than an Ethernet (or 802.1Q) header.";
    SamePort = "same_port", "The destination station sits on the port the frame came from.";
    VlanNotAllowed = "vlan_not_allowed", "Tagged with a VLAN the trunk does not carry.";
    UntaggedOnTrunk = "untagged_on_trunk", "Untagged on a trunk without a native VLAN.";
    TaggedOnAccess = "tagged_on_access", "Tagged (VLAN 1..4094) on an access port.";
    TxFull = "tx_full", "The destination port's ring was full.";
}

impl fmt::Display for SwitchDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
    /// Sources not learned because the table held `mac_limit` dynamic entries.
    pub learn_limited: u64,
    /// Entries removed by aging.
    pub aged: u64,
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
}

/// A row of the MAC table, for `show` and test dumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacRow {
    pub vlan: u16,
    pub mac: MacAddr,
    pub member: u16,
    pub fixed: bool,
}

struct Member {
    port: PortId,
    mode: MemberMode,
    /// The last source learned on this member and when its entry was refreshed (VALE's
    /// `last_smac`): a burst mostly comes from one station.
    last_src: (u64, u64),
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
    // Burst scratch: VLAN and L3 offset per frame, per-destination chains (as VALE's
    // `ft_next`), the flooded frames, and the buffers flood copies are made in.
    vlan: Box<[u16; MAX_BURST]>,
    l3: Box<[u8; MAX_BURST]>,
    head: Vec<u16>,
    tail: Vec<u16>,
    next: Box<[u16; MAX_BURST]>,
    touched: Vec<u16>,
    floods: Vec<u16>,
    sel: Vec<u16>,
    copies: Batch,
}

impl Switch {
    /// Builds a switch; its members' ports are numbered as the engine's.
    pub fn new(cfg: &SwitchConfig) -> Result<Switch, SwitchError> {
        let err = |m: String| Err(SwitchError(format!("switch {}: {m}", cfg.name)));
        if cfg.members.len() >= NONE as usize {
            return err(format!("{} members, at most {}", cfg.members.len(), NONE - 1));
        }
        let mut flood_sets: FxHashMap<u16, Vec<u16>> = FxHashMap::default();
        for (i, m) in cfg.members.iter().enumerate() {
            let vlans: Vec<u16> = match &m.mode {
                MemberMode::Access { vlan } => vec![*vlan],
                MemberMode::Trunk { vlans, native } => {
                    vlans.iter().copied().chain(*native).collect()
                }
            };
            for v in vlans {
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
            table.insert(key(s.vlan, s.mac), Entry { member: s.member, seen: 0, fixed: true });
        }
        Ok(Switch {
            name: cfg.name.clone(),
            members: cfg
                .members
                .iter()
                .map(|m| Member { port: m.port, mode: m.mode.clone(), last_src: (u64::MAX, 0) })
                .collect(),
            flood_sets: flood_sets.into_iter().map(|(v, m)| (v, m.into_boxed_slice())).collect(),
            table,
            dynamic: 0,
            limit: cfg.mac_limit,
            aging: cfg.aging_ms * MS,
            counters: SwitchCounters::default(),
            vlan: Box::new([0; MAX_BURST]),
            l3: Box::new([0; MAX_BURST]),
            head: vec![NONE; cfg.members.len()],
            tail: vec![NONE; cfg.members.len()],
            next: Box::new([NONE; MAX_BURST]),
            touched: Vec::with_capacity(cfg.members.len().min(MAX_BURST)),
            floods: Vec::with_capacity(MAX_BURST),
            sel: Vec::with_capacity(MAX_BURST),
            copies: Batch::new(MAX_BURST),
        })
    }

    /// The switch's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its counters.
    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
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
    }

    /// Forwards the `n` frames of `batch` from slot `first` on, received on member `from`:
    /// pass 1 classifies and learns the whole burst, pass 2 sends each destination its list
    /// with one `tx_burst`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &mut self,
        from: u16,
        batch: &mut Batch,
        first: usize,
        n: usize,
        ports: &mut [Box<dyn Port>],
        pcs: &mut [PortCounters],
        now: u64,
    ) {
        self.counters.rx += n as u64;
        for i in first..first + n {
            self.classify(from, batch.get(i).frame(), i, now);
        }
        self.send_unicast(batch, ports, pcs);
        self.send_floods(from, batch, ports, pcs);
    }

    /// Pass 1 for one frame: its VLAN, learning its source, and its destination: a member's
    /// chain, the flood list, or a drop.
    #[inline]
    fn classify(&mut self, from: u16, f: &[u8], i: usize, now: u64) {
        let Some(h) = l2::parse(f) else { return self.drop(SwitchDrop::Runt) };
        let vlan = match self.members[from as usize].ingress_vlan(h.vlan) {
            Ok(v) => v,
            Err(r) => return self.drop(r),
        };
        self.vlan[i] = vlan;
        self.l3[i] = h.l3 as u8;
        let src = MacAddr::from_bytes(&f[6..12]);
        if src.is_unicast() {
            self.learn(from, key(vlan, src), now);
        }
        if !h.dst.is_unicast() {
            self.floods.push(i as u16);
            return;
        }
        match self.table.get(&key(vlan, h.dst)) {
            Some(e) if e.member == from => self.drop(SwitchDrop::SamePort),
            Some(e) => {
                let d = e.member;
                if self.head[d as usize] == NONE {
                    self.head[d as usize] = i as u16;
                    self.touched.push(d);
                } else {
                    self.next[self.tail[d as usize] as usize] = i as u16;
                }
                self.tail[d as usize] = i as u16;
                self.next[i] = NONE;
            }
            None => {
                self.counters.miss += 1;
                self.floods.push(i as u16);
            }
        }
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
                self.table.insert(k, Entry { member: from, seen: now, fixed: false });
                self.dynamic += 1;
                self.counters.learned += 1;
            }
            None => self.counters.learn_limited += 1,
        }
    }

    #[inline]
    fn drop(&mut self, r: SwitchDrop) {
        self.counters.drops[r as usize] += 1;
    }

    /// Pass 2, known unicast: each destination's list in one `tx_burst`, in the buffers the
    /// frames arrived in, the 802.1Q tag set for the way out.
    fn send_unicast(
        &mut self,
        batch: &mut Batch,
        ports: &mut [Box<dyn Port>],
        pcs: &mut [PortCounters],
    ) {
        for t in 0..self.touched.len() {
            let d = self.touched[t];
            self.sel.clear();
            let mut i = self.head[d as usize];
            while i != NONE {
                self.sel.push(i);
                i = self.next[i as usize];
            }
            self.head[d as usize] = NONE;
            let m = &self.members[d as usize];
            for &i in &self.sel {
                let tag = m.egress_tag(self.vlan[i as usize]).unwrap_or(None);
                retag(batch.get_mut(i as usize), self.l3[i as usize] as usize, tag);
            }
            let port = m.port as usize;
            let k = ports[port].tx_burst(batch, &self.sel);
            pcs[port].tx_packets += k as u64;
            self.counters.forwarded += k as u64;
            self.counters.drops[SwitchDrop::TxFull as usize] += (self.sel.len() - k) as u64;
        }
        self.touched.clear();
    }

    /// Pass 2, floods: for each member of a flooded frame's VLAN but its source, a copy in a
    /// buffer of its own; one `tx_burst` per destination.
    fn send_floods(
        &mut self,
        from: u16,
        batch: &mut Batch,
        ports: &mut [Box<dyn Port>],
        pcs: &mut [PortCounters],
    ) {
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
                    let port = m.port as usize;
                    let k = ports[port].tx_burst(&mut self.copies, sel);
                    pcs[port].tx_packets += k as u64;
                    self.counters.flood_copies += k as u64;
                    self.counters.drops[SwitchDrop::TxFull as usize] += (sel.len() - k) as u64;
                }
            }
            self.floods.retain(|&i| self.vlan[i as usize] != vlan);
        }
        self.floods.clear();
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
            let f = buf.frame_mut();
            let tci = u16::from_be_bytes([f[14], f[15]]) & 0xf000 | v;
            f[14..16].copy_from_slice(&tci.to_be_bytes());
        }
        return;
    }
    let f = buf.frame();
    let (dst, src) = (MacAddr::from_bytes(&f[0..6]), MacAddr::from_bytes(&f[6..12]));
    let et = u16::from_be_bytes([f[l3 - 2], f[l3 - 1]]);
    l2::write(buf, l3, tag, dst, src, et);
}
