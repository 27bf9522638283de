//! The neighbor table (ARP and NDP share it) and the packets waiting on it.
//!
//! An entry is Incomplete while its address is being resolved, Reachable for a while after a
//! reply, then Stale: still used, but re-probed (unicast) on use; a stale entry that stays
//! silent for `neighbor_probes` probes is resolved anew (Incomplete again, multicast probes,
//! its packets queued: RFC 4861 §7.3.3, the neighbor may have a new MAC), and fails only when
//! that stays silent too; only then are its transit packets answered with unreachable. A
//! failed entry drops packets for a hold time before resolution is tried again; its old MAC is
//! never used to send. Static entries never change.
//!
//! Packets for an unresolved next hop wait in a short queue per entry. Each queue slot owns a
//! buffer: queueing swaps the packet's buffer with the slot's spare, so waiting copies nothing.
//!
//! Sized on demand: an empty table holds no entries and no queue slots (a VR with default
//! limits would otherwise carry ~480 KiB it may never use). Entries, the index and the queue
//! slots grow as neighbors and waiting packets appear, up to the limits (`neighbors`,
//! `queue_total`), and never shrink: a table allocates only while it grows towards a size it
//! has not reached before, at most `queue_total` slot buffers and a few doublings of its
//! vectors in its life, and never once it has been that full.
//!
//! The table never builds packets. It says what to do (`Resolve`) and keeps a list of probes
//! that are due; the VR drains that list into frames.
//!
//! Holding under attack (a flood to random addresses of a connected subnet makes one new
//! next hop per packet):
//! - Incomplete entries are capped per interface (`incomplete_per_interface`): a new one beyond
//!   the cap takes the place of the oldest incomplete entry on that interface. When the table is
//!   full, a new entry takes the place of the oldest failed entry, else of the oldest incomplete
//!   one, and only when there is neither, of the least recently used stale one. Reachable and
//!   static entries are never taken, so neighbors that answer keep their entries while a flood
//!   churns through its own. Nor is a neighbor that answered before and is being resolved
//!   again: it is incomplete, but on a list of its own outside the per-interface cap (at most
//!   one resolution per such neighbor, so a flood cannot grow that list). Unresolved entries
//!   sit on intrusive lists (one per interface for incomplete entries, one for those resolved
//!   again, one for failed ones), so every choice is O(1) but the last.
//! - Multicast/broadcast probes (a new next hop, its retransmissions, a retry after the hold)
//!   spend tokens of a per-VR bucket (`solicitations_per_sec`, `solicitations_burst`). Without
//!   a token no entry is made and the packet is dropped (`neighbor_rate_limited`); a
//!   retransmission without a token is skipped but still counts towards failure. Unicast
//!   re-probes of known (stale) entries spend none: there is at most one per entry and
//!   retransmit interval, and a flood must not stop a real neighbor from being confirmed.
//!   For the same reason an entry that answered before (it has a MAC) is resolved anew without
//!   a token, its retransmissions too: when its unicast probes go unanswered, and when its
//!   hold after a failure is over. There is at most one such resolution per entry at a time,
//!   and only neighbors that answered have one, so a flood of new next hops cannot make them.
//! - New resolutions share the budget by source: sources are hashed into `LANES` lanes (an
//!   IPv4 address, an IPv6 /64 each). While the budget holds more than half its burst anyone
//!   takes from it; below that a new resolution also needs a token of its lane, which refills
//!   at 1/`SHARE` of the budget's rate. So one source flooding new next hops keeps the budget
//!   at half and takes no more than its share of the rest; the others resolve from that half.
//!   Retransmissions draw on the budget alone.
//! - The table remembers (in a small direct-mapped array) the addresses it probed in the last
//!   `neighbor_probes` retransmit intervals, so that a solicited advertisement may create the
//!   entry its incomplete entry was evicted from meanwhile (see [`NeighborTable::probed_recently`]).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ports::PktBuf;
use rustc_hash::FxHashMap;
use wire::MacAddr;

use super::bucket::Bucket;
use crate::config::VrLimits;
use crate::counters::VrDrop;

const NONE: u32 = u32::MAX;
const MS: u64 = 1_000_000;
/// Slots of the recently-probed memory (a power of two).
const RECENT: usize = 64;
/// Lanes the sources of new resolutions are hashed into, and the share of the solicitation
/// budget (1/SHARE) one lane may take (see the module's notes).
const LANES: usize = 16;
const SHARE: u32 = 4;

/// The lane of the solicitation budget a packet from `src` draws on: an IPv4 source, or an
/// IPv6 source's /64 (one host picks any address in its own /64 at will). Keyed with the
/// process's secret ([`crate::seed`]): a flood cannot pick sources that share the lane of the
/// source it wants to starve.
#[inline]
pub(crate) fn source_lane(src: &[u8]) -> usize {
    source_lane_keyed(src, crate::seed::key()[1])
}

/// The lane of the solicitation budget packets from `src` draw on, with this process's key:
/// for diagnostics, and for tests that need two sources in different lanes.
pub fn solicitation_lane(src: std::net::IpAddr) -> usize {
    match src {
        IpAddr::V4(a) => source_lane(&a.octets()),
        IpAddr::V6(a) => source_lane(&a.octets()[..8]),
    }
}

#[inline]
fn source_lane_keyed(src: &[u8], k: u64) -> usize {
    let n = src.len().min(8);
    let x = src[..n].iter().fold(n as u64, |h, &b| (h << 8) | u64::from(b));
    (crate::seed::mix(k, x) >> 60) as usize % LANES
}

/// A next hop: an address on one interface. IPv4 addresses are stored IPv4-mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NKey {
    pub ip: u128,
    pub iface: u16,
}

impl NKey {
    pub fn v4(iface: u16, a: u32) -> NKey {
        NKey { ip: 0xffff_0000_0000 | a as u128, iface }
    }
    pub fn v6(iface: u16, a: u128) -> NKey {
        NKey { ip: a, iface }
    }
    pub fn from_ip(iface: u16, a: IpAddr) -> NKey {
        match a {
            IpAddr::V4(a) => NKey::v4(iface, a.into()),
            IpAddr::V6(a) => NKey::v6(iface, a.into()),
        }
    }
    /// The address, unmapped.
    pub fn addr(&self) -> IpAddr {
        match Ipv6Addr::from(self.ip).to_ipv4_mapped() {
            Some(a) => IpAddr::V4(a),
            None => IpAddr::V6(Ipv6Addr::from(self.ip)),
        }
    }
    pub fn is_v4(&self) -> bool {
        self.ip >> 32 == 0xffff
    }
    pub fn v4_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.ip as u32)
    }
}

/// Entry states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighborState {
    Incomplete,
    Reachable,
    Stale,
    Failed,
    Static,
}

/// Which list of unresolved entries an entry is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    Nothing,
    /// Its interface's list of incomplete entries.
    Incomplete,
    /// The list of neighbors that answered before and are being resolved again: out of reach
    /// of the per-interface cap, so a flood of new next hops cannot evict them.
    Again,
    /// The list of failed entries.
    Failed,
}

/// A doubly linked list threaded through the entries, oldest first.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    const EMPTY: List = List { head: NONE, tail: NONE, len: 0 };
}

struct Entry {
    key: NKey,
    mac: MacAddr,
    state: NeighborState,
    /// Incomplete/Stale: when the next probe is due. Reachable: when it turns stale.
    /// Failed: when resolution may be tried again.
    deadline: u64,
    probes: u8,
    last_used: u64,
    q_head: u32,
    q_tail: u32,
    q_len: u16,
    live: bool,
    /// The list it is on (incomplete entries and failed ones are), its neighbors there, and
    /// when it joined it.
    on: On,
    prev: u32,
    next: u32,
    since: u64,
}

impl Entry {
    fn new(key: NKey, now: u64, live: bool) -> Entry {
        Entry {
            key,
            mac: MacAddr::default(),
            state: NeighborState::Incomplete,
            deadline: 0,
            probes: 0,
            last_used: now,
            q_head: NONE,
            q_tail: NONE,
            q_len: 0,
            live,
            on: On::Nothing,
            prev: NONE,
            next: NONE,
            since: now,
        }
    }

    /// The state as of `now`: a reachable entry whose time ran out is stale even before a
    /// packet uses it (the transition itself happens lazily, on use).
    fn state_at(&self, now: u64) -> NeighborState {
        match self.state {
            NeighborState::Reachable if now >= self.deadline => NeighborState::Stale,
            s => s,
        }
    }
}

struct Slot {
    buf: PktBuf,
    next: u32,
    transit: bool,
}

/// What a received ARP or neighbor discovery message may do to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Learn {
    /// Make an entry if there is none (the message was addressed to us).
    pub create: bool,
    /// Replace a different MAC already known (false: NA without the Override flag).
    pub replace: bool,
    /// The neighbor answered us, so it is reachable (ARP reply, solicited NA); otherwise the
    /// entry is stale until a probe confirms it.
    pub confirmed: bool,
}

/// What a packet for a next hop should do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resolve {
    /// Send it to this MAC.
    Mac(MacAddr),
    /// Queue it on this entry (resolution in progress).
    Queue(u32),
    /// VrDrop it.
    Fail(VrDrop),
}

/// A probe the VR should send: to whom, and whether unicast to a MAC already known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    pub key: NKey,
    pub unicast: Option<MacAddr>,
}

/// Where a new entry goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Room {
    /// A free slot.
    Free,
    /// This entry's slot, once it is forgotten.
    Evict(u32),
}

/// A row of the table, for `show` and test dumps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeighborRow {
    pub iface: u16,
    pub ip: IpAddr,
    pub mac: Option<MacAddr>,
    pub state: NeighborState,
    pub queued: u16,
}

/// `repr(C)`, the fields a VR reads on every burst first: `epoch` (each packet's cached
/// rewrite is checked against it), `probes` and `ready` (whether the VR drains the table
/// after the burst), `next_timer`, on one cache line. In the compiler's order they were
/// apart, and with many VRs on a worker each visit to a VR missed more lines.
#[repr(C)]
pub(crate) struct NeighborTable {
    /// Bumped on every change that could invalidate a MAC someone cached (see `epoch`).
    epoch: u64,
    /// Probes due, drained by the VR.
    probes: Vec<Probe>,
    /// Entries that resolved while packets waited on them.
    ready: Vec<u32>,
    next_timer: u64,
    entries: Vec<Entry>,
    free: Vec<u32>,
    index: FxHashMap<NKey, u32>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    /// Per interface: its incomplete entries, oldest first.
    unresolved: Vec<List>,
    /// Incomplete entries that answered before (being resolved again), oldest first.
    again: List,
    /// Failed entries, oldest first.
    failed: List,
    /// Queue slots there may be (`queue_total`); `slots` grows up to it.
    slot_cap: usize,
    /// Incomplete entries in all, so the timer scan is skipped when there are none.
    incomplete: usize,
    /// Incomplete entries one interface may have.
    per_iface: u32,
    /// Multicast probes' budget (`None`: unlimited).
    solicit: Option<Bucket>,
    /// The share of it each lane of sources may take for new resolutions (empty until first
    /// needed), and the budget's rate and burst they are made from.
    lanes: Box<[Bucket]>,
    solicit_rate: u32,
    solicit_burst: u32,
    /// Addresses probed lately, and until when an answer counts as solicited.
    recent: Box<[(NKey, u64)]>,
    /// Packets (transit, generated) dropped from the queues of entries evicted, not yet counted.
    evicted: (u64, u64),
    /// Queue slots (and their interface) of transit packets whose entry gave up resolving,
    /// kept for the VR to answer with host unreachable ([`NeighborTable::pop_gave_up`]).
    gave_up: VecDeque<(u32, u16)>,
    /// The latest time the table was told, so `rows` can show states as of then.
    clock: u64,
    cap: usize,
    per_entry: u16,
    reachable: u64,
    retrans: u64,
    max_probes: u8,
    hold: u64,
}

impl NeighborTable {
    /// A table for a VR with `ifaces` interfaces.
    pub fn new(l: &VrLimits, ifaces: usize) -> NeighborTable {
        let cap = l.neighbors as usize;
        NeighborTable {
            entries: Vec::new(),
            free: Vec::new(),
            index: FxHashMap::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            slot_cap: l.queue_total as usize,
            ready: Vec::new(),
            probes: Vec::new(),
            unresolved: vec![List::EMPTY; ifaces],
            again: List::EMPTY,
            failed: List::EMPTY,
            incomplete: 0,
            per_iface: match l.incomplete_per_interface {
                0 => u32::MAX,
                n => n as u32,
            },
            solicit: (l.solicitations_per_sec > 0)
                .then(|| Bucket::new(l.solicitations_per_sec, l.solicitations_burst.max(1))),
            lanes: Box::default(),
            solicit_rate: l.solicitations_per_sec,
            solicit_burst: l.solicitations_burst,
            recent: vec![(NKey { ip: 0, iface: u16::MAX }, 0); RECENT].into_boxed_slice(),
            evicted: (0, 0),
            gave_up: VecDeque::new(),
            next_timer: u64::MAX,
            epoch: 1,
            clock: 0,
            cap,
            per_entry: l.queue_per_neighbor,
            reachable: l.neighbor_reachable_ms as u64 * MS,
            retrans: l.neighbor_retrans_ms as u64 * MS,
            max_probes: l.neighbor_probes,
            hold: l.neighbor_failed_hold_ms as u64 * MS,
        }
    }

    /// Adds a static entry. False if the table is full.
    pub fn add_static(&mut self, key: NKey, mac: MacAddr) -> bool {
        let Some(e) = self.entry_for(key, 0) else { return false };
        self.unlink(e);
        let en = &mut self.entries[e as usize];
        en.state = NeighborState::Static;
        en.mac = mac;
        self.epoch += 1;
        true
    }

    /// Changes whenever a resolved MAC may have changed or stopped being usable: adjacencies
    /// cache ready-made headers and trust them only while the epoch they saw is current.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Until when entry `e`'s MAC may be used without asking the table again: the end of its
    /// reachable time, forever for a static entry, `None` otherwise.
    #[inline]
    pub fn usable_until(&self, e: u32) -> Option<u64> {
        let en = self.entries.get(e as usize)?;
        match en.state {
            NeighborState::Static => Some(u64::MAX),
            NeighborState::Reachable => Some(en.deadline),
            _ => None,
        }
    }

    /// Decides what a packet for `key` from a source in lane 0 does now.
    #[cfg(test)]
    pub fn resolve(&mut self, key: NKey, now: u64) -> Resolve {
        self.resolve_from(key, now, 0)
    }

    /// Decides what a packet for `key` from a source in `lane` does now.
    #[cfg(test)]
    pub fn resolve_from(&mut self, key: NKey, now: u64, lane: usize) -> Resolve {
        match self.index.get(&key) {
            Some(&e) => self.resolve_entry(e, now, || lane),
            None => self.start(key, now, lane),
        }
    }

    /// As [`NeighborTable::resolve`], trying entry `hint` first (adjacencies cache their
    /// neighbor's entry to skip the hash lookup). `lane` says which lane of the solicitation
    /// budget the packet's source draws on ([`source_lane`]); asked only when a multicast probe
    /// is to be sent. Returns the entry used, if any.
    #[inline]
    pub fn resolve_hinted(
        &mut self,
        key: NKey,
        hint: u32,
        now: u64,
        lane: impl FnOnce() -> usize,
    ) -> (Resolve, u32) {
        let e = match self.entries.get(hint as usize) {
            Some(en) if en.live && en.key == key => hint,
            _ => match self.index.get(&key) {
                Some(&e) => e,
                None => {
                    let r = self.start(key, now, lane());
                    return (r, self.index.get(&key).copied().unwrap_or(NONE));
                }
            },
        };
        (self.resolve_entry(e, now, lane), e)
    }

    #[inline]
    fn resolve_entry(&mut self, e: u32, now: u64, lane: impl FnOnce() -> usize) -> Resolve {
        self.clock = now;
        let en = &mut self.entries[e as usize];
        en.last_used = now;
        match en.state {
            NeighborState::Static => Resolve::Mac(en.mac),
            NeighborState::Reachable if now < en.deadline => Resolve::Mac(en.mac),
            NeighborState::Reachable | NeighborState::Stale => self.use_stale(e, now),
            NeighborState::Incomplete => Resolve::Queue(e),
            NeighborState::Failed if now < en.deadline => Resolve::Fail(VrDrop::NoNeighbor),
            NeighborState::Failed => self.retry(e, now, lane()),
        }
    }

    /// A failed entry whose hold is over: resolved again (its packets wait), if the budget
    /// allows or, for a neighbor that answered before, regardless of it: a flood spending the
    /// budget must not keep a real neighbor failed. Its old MAC is not used meanwhile.
    #[cold]
    fn retry(&mut self, e: u32, now: u64, lane: usize) -> Resolve {
        if !self.solicit_allowed(now, Some(lane)) && !self.answered(e) {
            return Resolve::Fail(VrDrop::NeighborRateLimited);
        }
        self.resolve_again(e, now)
    }

    /// Whether entry `e` has a MAC from an answer (it is or was resolved).
    #[inline]
    fn answered(&self, e: u32) -> bool {
        self.entries[e as usize].mac != MacAddr::default()
    }

    /// Entry `e` (failed, or stale with its unicast probes unanswered) is resolved anew with
    /// multicast probes (RFC 4861 §7.3.3: the neighbor may answer at a new MAC); its packets
    /// wait on it, and are answered with unreachable only if that fails too.
    #[cold]
    fn resolve_again(&mut self, e: u32, now: u64) -> Resolve {
        let iface = self.entries[e as usize].key.iface as usize;
        if !self.answered(e) && self.unresolved[iface].len >= self.per_iface {
            self.evict(self.unresolved[iface].head);
        }
        // Nothing may go on using a MAC cached from it.
        self.epoch += 1;
        self.begin_probing(e, now);
        Resolve::Queue(e)
    }

    #[cold]
    fn use_stale(&mut self, e: u32, now: u64) -> Resolve {
        let en = &mut self.entries[e as usize];
        if en.state == NeighborState::Reachable {
            en.state = NeighborState::Stale;
            en.probes = 0;
            en.deadline = now;
        }
        if now >= en.deadline {
            if en.probes >= self.max_probes {
                return self.resolve_again(e, now);
            }
            en.probes += 1;
            en.deadline = now + self.retrans;
            // Unicast: no token needed (see the module's notes).
            let (key, mac) = (en.key, en.mac);
            self.probes.push(Probe { key, unicast: Some(mac) });
            self.remember(key, now);
            return Resolve::Mac(mac);
        }
        Resolve::Mac(en.mac)
    }

    /// A new next hop: an incomplete entry and a multicast probe, if there is room for the
    /// entry and a token for the probe.
    #[cold]
    fn start(&mut self, key: NKey, now: u64, lane: usize) -> Resolve {
        let Some(room) = self.room(key.iface, true, now) else {
            return Resolve::Fail(VrDrop::NeighborTableFull);
        };
        if !self.solicit_allowed(now, Some(lane)) {
            return Resolve::Fail(VrDrop::NeighborRateLimited);
        }
        let e = self.place(key, room, now);
        self.begin_probing(e, now);
        Resolve::Queue(e)
    }

    /// Takes a token for a multicast probe from the budget. A new resolution, once the budget
    /// is down to half its burst, needs a token of its source's lane too (no more than a
    /// share of the budget), so the lower half is left to the sources within their share.
    #[inline]
    fn solicit_allowed(&mut self, now: u64, lane: Option<usize>) -> bool {
        let Some(b) = self.solicit.as_mut() else { return true };
        let Some(lane) = lane else { return b.take(now) };
        if b.over_half(now) {
            return b.take(now);
        }
        if self.lanes.is_empty() {
            self.make_lanes(now);
        }
        let (Some(b), Some(l)) = (self.solicit.as_mut(), self.lanes.get_mut(lane % LANES)) else {
            return false;
        };
        if !l.take(now) {
            return false;
        }
        if !b.take(now) {
            l.refund();
            return false;
        }
        true
    }

    /// The lanes, made the first time the budget runs down to half (most VRs never do), full
    /// as of `now`.
    #[cold]
    fn make_lanes(&mut self, now: u64) {
        let rate = (self.solicit_rate / SHARE).max(1);
        let burst = (self.solicit_burst / SHARE).max(1);
        self.lanes = (0..LANES)
            .map(|_| {
                let mut b = Bucket::new(rate, burst);
                b.refill(now);
                b
            })
            .collect();
    }

    /// Makes entry `e` incomplete and schedules its first probe (its token is spent).
    fn begin_probing(&mut self, e: u32, now: u64) {
        self.unlink(e);
        let en = &mut self.entries[e as usize];
        en.state = NeighborState::Incomplete;
        en.probes = 1;
        en.deadline = now + self.retrans;
        let key = en.key;
        self.next_timer = self.next_timer.min(now + self.retrans);
        let on = if self.answered(e) { On::Again } else { On::Incomplete };
        self.link(e, on, now);
        self.probes.push(Probe { key, unicast: None });
        self.remember(key, now);
    }

    /// Entry `e` stayed silent: it fails, and drops packets for the hold time.
    fn fail(&mut self, e: u32, now: u64) {
        self.unlink(e);
        let en = &mut self.entries[e as usize];
        en.state = NeighborState::Failed;
        en.deadline = now + self.hold;
        self.epoch += 1;
        self.link(e, On::Failed, now);
    }

    /// Appends entry `e` (on no list) to the list `on` says.
    fn link(&mut self, e: u32, on: On, now: u64) {
        let iface = self.entries[e as usize].key.iface as usize;
        let list = match on {
            On::Nothing => return,
            On::Incomplete => {
                self.incomplete += 1;
                &mut self.unresolved[iface]
            }
            On::Again => {
                self.incomplete += 1;
                &mut self.again
            }
            On::Failed => &mut self.failed,
        };
        let en = &mut self.entries[e as usize];
        (en.on, en.prev, en.next, en.since) = (on, list.tail, NONE, now);
        match list.tail {
            NONE => list.head = e,
            t => self.entries[t as usize].next = e,
        }
        list.tail = e;
        list.len += 1;
    }

    /// Takes entry `e` off the list it is on, if any.
    fn unlink(&mut self, e: u32) {
        let en = &self.entries[e as usize];
        let (on, prev, next, iface) = (en.on, en.prev, en.next, en.key.iface as usize);
        let list = match on {
            On::Nothing => return,
            On::Incomplete => {
                self.incomplete -= 1;
                &mut self.unresolved[iface]
            }
            On::Again => {
                self.incomplete -= 1;
                &mut self.again
            }
            On::Failed => &mut self.failed,
        };
        match prev {
            NONE => list.head = next,
            p => self.entries[p as usize].next = next,
        }
        match next {
            NONE => list.tail = prev,
            n => self.entries[n as usize].prev = prev,
        }
        list.len -= 1;
        let en = &mut self.entries[e as usize];
        (en.on, en.prev, en.next) = (On::Nothing, NONE, NONE);
    }

    /// Where a new entry on `iface` goes (`None`: nowhere). An incomplete one (`unresolved`)
    /// beyond the interface's cap replaces the oldest incomplete entry there. Otherwise a free
    /// slot; in a full table the oldest failed entry, else the oldest incomplete one, else the
    /// least recently used stale entry with nothing queued. Never a reachable or static one.
    fn room(&self, iface: u16, unresolved: bool, now: u64) -> Option<Room> {
        if let Some(l) = self.unresolved.get(iface as usize) {
            if unresolved && l.len >= self.per_iface {
                return Some(Room::Evict(l.head));
            }
        }
        if !self.free.is_empty() || self.entries.len() < self.cap {
            return Some(Room::Free);
        }
        if self.failed.head != NONE {
            return Some(Room::Evict(self.failed.head));
        }
        let oldest = self
            .unresolved
            .iter()
            .filter(|l| l.head != NONE)
            .min_by_key(|l| self.entries[l.head as usize].since);
        if let Some(l) = oldest {
            return Some(Room::Evict(l.head));
        }
        let victim = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, en)| en.live && en.q_len == 0 && en.state_at(now) == NeighborState::Stale)
            .min_by_key(|(_, en)| en.last_used)?
            .0 as u32;
        Some(Room::Evict(victim))
    }

    /// Forgets entry `e` to reuse its slot; what waited on it is dropped (and counted when the
    /// VR takes [`NeighborTable::take_evicted`]).
    fn evict(&mut self, e: u32) {
        self.unlink(e);
        let d = self.drain_queue(e);
        self.evicted.0 += d.0;
        self.evicted.1 += d.1;
        let en = &mut self.entries[e as usize];
        en.live = false;
        self.index.remove(&en.key);
        self.free.push(e);
        // No epoch bump: only reachable and static entries' MACs are cached, and neither is
        // evicted (an expired reachable entry's cache has expired too), so a flood churning
        // through its own entries leaves the forwarding fast path alone.
    }

    /// Makes a fresh entry for `key` where `room` says.
    fn place(&mut self, key: NKey, room: Room, now: u64) -> u32 {
        if let Room::Evict(v) = room {
            self.evict(v);
        }
        let e = match self.free.pop() {
            Some(e) => e,
            None => {
                self.entries.push(Entry::new(key, now, false));
                (self.entries.len() - 1) as u32
            }
        };
        self.entries[e as usize] = Entry::new(key, now, true);
        self.index.insert(key, e);
        e
    }

    /// Finds or makes the entry for `key` (not as an incomplete one: see [`NeighborTable::room`]).
    fn entry_for(&mut self, key: NKey, now: u64) -> Option<u32> {
        if let Some(&e) = self.index.get(&key) {
            return Some(e);
        }
        let room = self.room(key.iface, false, now)?;
        Some(self.place(key, room, now))
    }

    /// Packets (transit, generated) dropped from evicted entries since the last call.
    #[inline]
    pub fn take_evicted(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.evicted)
    }

    fn recent_slot(key: NKey) -> usize {
        let x = (key.ip as u64) ^ ((key.ip >> 64) as u64) ^ u64::from(key.iface).rotate_left(40);
        (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RECENT.trailing_zeros())) as usize
    }

    fn remember(&mut self, key: NKey, now: u64) {
        let until = now + self.retrans * u64::from(self.max_probes.max(1));
        self.recent[Self::recent_slot(key)] = (key, until);
    }

    /// Whether the table probed `key` within the last `neighbor_probes` retransmit intervals.
    /// A solicited advertisement for it may then make an entry even if the incomplete one was
    /// evicted meanwhile. Best effort: the memory is direct-mapped, so a flood of probes may
    /// overwrite the record (the answer is then dropped, as RFC 4861 says of unknown targets,
    /// and the next packet resolves again).
    pub fn probed_recently(&self, key: NKey, now: u64) -> bool {
        let (k, until) = self.recent[Self::recent_slot(key)];
        k == key && now < until
    }

    /// Queues the packet in `buf` on entry `e`: `buf` receives an empty buffer. False, leaving
    /// `buf` alone, if the entry's queue or all queue slots are full.
    pub fn enqueue(&mut self, e: u32, buf: &mut PktBuf, transit: bool) -> bool {
        let en = &mut self.entries[e as usize];
        if en.q_len >= self.per_entry {
            return false;
        }
        let s = match self.free_slots.pop() {
            Some(s) => s,
            None if self.slots.len() < self.slot_cap => {
                self.slots.push(Slot { buf: PktBuf::new(), next: NONE, transit: false });
                (self.slots.len() - 1) as u32
            }
            None => return false,
        };
        let slot = &mut self.slots[s as usize];
        std::mem::swap(&mut slot.buf, buf);
        slot.next = NONE;
        slot.transit = transit;
        if en.q_tail == NONE {
            en.q_head = s;
        } else {
            self.slots[en.q_tail as usize].next = s;
        }
        en.q_tail = s;
        en.q_len += 1;
        true
    }

    /// Records that `key` is at `mac`, as an ARP packet or neighbor discovery message said.
    /// `how` decides what that may change (RFC 826 merge, RFC 4861 §7.2.3, §7.2.5). Static
    /// entries never change. Returns true if an entry was created or changed.
    pub fn learn(&mut self, key: NKey, mac: MacAddr, how: Learn, now: u64) -> bool {
        let e = match self.index.get(&key) {
            Some(&e) => e,
            None if how.create => match self.entry_for(key, now) {
                Some(e) => e,
                None => return false,
            },
            None => return false,
        };
        let en = &mut self.entries[e as usize];
        let known = matches!(en.state, NeighborState::Reachable | NeighborState::Stale);
        if en.state == NeighborState::Static || (known && en.mac == mac && !how.confirmed) {
            return false;
        }
        if known && en.mac != mac && !how.replace {
            if en.state == NeighborState::Reachable {
                en.state = NeighborState::Stale;
                en.probes = 0;
                en.deadline = now;
                self.epoch += 1;
            }
            return false;
        }
        self.unlink(e);
        let en = &mut self.entries[e as usize];
        en.mac = mac;
        en.probes = 0;
        if how.confirmed {
            en.state = NeighborState::Reachable;
            en.deadline = now + self.reachable;
        } else {
            // Unconfirmed: usable, and probed on its first use.
            en.state = NeighborState::Stale;
            en.deadline = now;
        }
        if en.q_len > 0 {
            self.ready.push(e);
        }
        self.epoch += 1;
        true
    }

    /// Moves the next packet waiting on a resolved entry into `buf` (whose old buffer becomes
    /// the slot's spare). Returns the neighbor's MAC, its interface and whether the packet is
    /// transit traffic, or `None` when nothing is left to flush.
    pub fn pop_ready(&mut self, buf: &mut PktBuf) -> Option<(MacAddr, u16, bool)> {
        while let Some(&e) = self.ready.last() {
            let en = &mut self.entries[e as usize];
            // A stale entry has a MAC too: its queue goes out now, and a probe on next use.
            let resolved = matches!(
                en.state,
                NeighborState::Reachable | NeighborState::Stale | NeighborState::Static
            );
            if en.q_len == 0 || !resolved {
                self.ready.pop();
                continue;
            }
            let s = en.q_head;
            en.q_head = self.slots[s as usize].next;
            en.q_len -= 1;
            if en.q_len == 0 {
                en.q_tail = NONE;
            }
            let (mac, iface) = (en.mac, en.key.iface);
            let slot = &mut self.slots[s as usize];
            std::mem::swap(&mut slot.buf, buf);
            self.free_slots.push(s);
            return Some((mac, iface, slot.transit));
        }
        None
    }

    /// Runs the retransmit timers: schedules probes (as the budget allows), and fails entries
    /// that stayed silent. Returns (transit, generated) packets dropped from failed queues.
    pub fn tick(&mut self, now: u64) -> (u64, u64) {
        self.clock = now;
        if self.incomplete == 0 || now < self.next_timer {
            return (0, 0);
        }
        let mut dropped = (0, 0);
        self.next_timer = u64::MAX;
        for i in 0..=self.unresolved.len() {
            let mut e = self.unresolved.get(i).unwrap_or(&self.again).head;
            while e != NONE {
                let en = &mut self.entries[e as usize];
                let next = en.next;
                if now < en.deadline {
                    self.next_timer = self.next_timer.min(en.deadline);
                } else if en.probes >= self.max_probes {
                    self.fail(e, now);
                    let d = self.give_up_queue(e);
                    dropped.0 += d.0;
                    dropped.1 += d.1;
                } else {
                    // Without a token the retransmission is skipped, but counts: the entry
                    // fails on time whatever the budget.
                    en.probes += 1;
                    en.deadline = now + self.retrans;
                    let (key, answered) = (en.key, en.mac != MacAddr::default());
                    self.next_timer = self.next_timer.min(now + self.retrans);
                    // A neighbor resolved again (it answered before) is asked whatever the
                    // budget, as its unicast probes were.
                    if answered || self.solicit_allowed(now, None) {
                        self.probes.push(Probe { key, unicast: None });
                        self.remember(key, now);
                    }
                }
                e = next;
            }
        }
        dropped
    }

    /// As [`NeighborTable::drain_queue`] for an entry that failed to resolve, but its transit
    /// packets are kept on the `gave_up` list (still dropped, and counted so).
    fn give_up_queue(&mut self, e: u32) -> (u64, u64) {
        let mut d = (0, 0);
        let en = &mut self.entries[e as usize];
        let (mut s, iface) = (en.q_head, en.key.iface);
        en.q_head = NONE;
        en.q_tail = NONE;
        en.q_len = 0;
        while s != NONE {
            let slot = &self.slots[s as usize];
            let next = slot.next;
            if slot.transit {
                d.0 += 1;
                self.gave_up.push_back((s, iface));
            } else {
                d.1 += 1;
                self.free_slots.push(s);
            }
            s = next;
        }
        d
    }

    /// Moves the next packet whose next hop gave up resolving into `buf` (whose old buffer
    /// becomes the slot's spare), with the interface it was to leave by; `None` when there are
    /// none left.
    pub fn pop_gave_up(&mut self, buf: &mut PktBuf) -> Option<u16> {
        let (s, iface) = self.gave_up.pop_front()?;
        std::mem::swap(&mut self.slots[s as usize].buf, buf);
        self.free_slots.push(s);
        Some(iface)
    }

    /// Forgets the packets [`NeighborTable::pop_gave_up`] did not take; returns how many.
    pub fn discard_gave_up(&mut self) -> u64 {
        let n = self.gave_up.len();
        self.free_slots.extend(self.gave_up.drain(..).map(|(s, _)| s));
        n as u64
    }

    fn drain_queue(&mut self, e: u32) -> (u64, u64) {
        let mut d = (0, 0);
        let en = &mut self.entries[e as usize];
        let mut s = en.q_head;
        en.q_head = NONE;
        en.q_tail = NONE;
        en.q_len = 0;
        while s != NONE {
            let slot = &self.slots[s as usize];
            if slot.transit {
                d.0 += 1;
            } else {
                d.1 += 1;
            }
            self.free_slots.push(s);
            s = slot.next;
        }
        d
    }

    /// Forgets every learned entry (on interface `iface`, or all), dropping what waits on
    /// them; static entries stay. Returns the (transit, generated) packets dropped.
    pub fn flush(&mut self, iface: Option<u16>) -> (u64, u64) {
        let mut dropped = (0, 0);
        for e in 0..self.entries.len() {
            let en = &self.entries[e];
            if !en.live
                || en.state == NeighborState::Static
                || iface.is_some_and(|i| i != en.key.iface)
            {
                continue;
            }
            self.unlink(e as u32);
            let (t, g) = self.drain_queue(e as u32);
            dropped.0 += t;
            dropped.1 += g;
            let en = &mut self.entries[e];
            en.live = false;
            self.index.remove(&en.key);
            self.free.push(e as u32);
        }
        self.probes.retain(|p| iface.is_some_and(|i| i != p.key.iface));
        self.epoch += 1;
        dropped
    }

    /// Entries in use, and the table's size.
    pub fn occupancy(&self) -> (usize, usize) {
        (self.index.len(), self.cap)
    }

    /// The MAC of `key`'s entry if it has one to confirm (reachable or stale): what an
    /// advertisement without a Target Link-Layer Address option speaks of (RFC 4861 §7.2.5).
    pub fn known_mac(&self, key: NKey) -> Option<MacAddr> {
        let en = &self.entries[*self.index.get(&key)? as usize];
        matches!(en.state, NeighborState::Reachable | NeighborState::Stale).then_some(en.mac)
    }

    /// Whether a probe or a resolved queue waits to be sent: the check a VR makes after
    /// every burst, so that a VR with nothing to send pays two loads for it.
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.probes.is_empty() || !self.ready.is_empty()
    }

    /// Takes the next due probe.
    pub fn pop_probe(&mut self) -> Option<Probe> {
        self.probes.pop()
    }

    /// Puts a probe back (no room to send it now).
    pub fn push_probe(&mut self, p: Probe) {
        self.probes.push(p);
    }

    /// Packets waiting across all entries.
    pub fn queued(&self) -> usize {
        self.slots.len() - self.free_slots.len() - self.gave_up.len()
    }

    /// The table, sorted by interface and address.
    pub fn rows(&self) -> Vec<NeighborRow> {
        let mut v: Vec<NeighborRow> = self
            .entries
            .iter()
            .filter(|e| e.live)
            .map(|e| NeighborRow {
                iface: e.key.iface,
                ip: e.key.addr(),
                mac: (e.state != NeighborState::Incomplete).then_some(e.mac),
                state: e.state_at(self.clock),
                queued: e.q_len,
            })
            .collect();
        v.sort_by_key(|r| (r.iface, r.ip));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> VrLimits {
        VrLimits {
            neighbors: 2,
            queue_per_neighbor: 2,
            queue_total: 3,
            neighbor_reachable_ms: 10,
            neighbor_retrans_ms: 1,
            neighbor_probes: 2,
            neighbor_failed_hold_ms: 5,
            ..VrLimits::default()
        }
    }

    fn pkt(tag: u8) -> PktBuf {
        let mut b = PktBuf::new();
        b.fill(&[tag; 20]);
        b
    }

    const A: NKey = NKey { ip: 0xffff_0a00_0002, iface: 0 };
    const B: NKey = NKey { ip: 0xffff_0a00_0003, iface: 0 };
    const C: NKey = NKey { ip: 0xffff_0a00_0004, iface: 1 };
    const M: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);
    const REPLY: Learn = Learn { create: false, replace: true, confirmed: true };

    #[test]
    fn unconfirmed_claims_are_stale_and_override_rules_hold() {
        let mut t = NeighborTable::new(&limits(), 2);
        let claim = Learn { create: true, replace: true, confirmed: false };
        assert!(t.learn(A, M, claim, 0));
        assert_eq!(t.rows()[0].state, NeighborState::Stale);
        assert!(!t.learn(A, M, claim, 0), "nothing new");
        assert!(t.learn(A, M, REPLY, 0));
        assert_eq!(t.rows()[0].state, NeighborState::Reachable);
        let no_override = Learn { create: false, replace: false, confirmed: false };
        assert!(!t.learn(A, MacAddr([9; 6]), no_override, 1));
        assert_eq!((t.rows()[0].mac, t.rows()[0].state), (Some(M), NeighborState::Stale));
        assert!(!t.learn(B, M, no_override, 1), "no entry is made unless asked");
    }

    #[test]
    fn resolve_queue_learn_flush() {
        let mut t = NeighborTable::new(&limits(), 2);
        let Resolve::Queue(e) = t.resolve(A, 0) else { panic!() };
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: None }));
        let mut b = pkt(1);
        assert!(t.enqueue(e, &mut b, true));
        assert!(b.is_empty(), "caller got the slot's empty buffer");
        let mut b = pkt(2);
        assert!(t.enqueue(e, &mut b, false));
        let mut b = pkt(3);
        assert!(!t.enqueue(e, &mut b, true), "per-entry limit 2");
        assert_eq!(b.frame(), &[3; 20]);
        assert_eq!(t.queued(), 2);
        assert!(t.learn(A, M, REPLY, 1));
        let mut out = PktBuf::new();
        assert_eq!(t.pop_ready(&mut out), Some((M, 0, true)));
        assert_eq!(out.frame(), &[1; 20]);
        assert_eq!(t.pop_ready(&mut out), Some((M, 0, false)));
        assert_eq!(out.frame(), &[2; 20]);
        assert_eq!(t.pop_ready(&mut out), None);
        assert_eq!(t.resolve(A, 2), Resolve::Mac(M));
        assert_eq!(t.queued(), 0);
    }

    #[test]
    fn stale_probes_then_resolves_again_then_fails_then_retries_after_hold() {
        let mut t = NeighborTable::new(&limits(), 2);
        t.learn(A, M, Learn { create: true, ..REPLY }, 0);
        assert_eq!(t.resolve(A, 5 * MS), Resolve::Mac(M));
        assert_eq!(t.pop_probe(), None);
        // Past reachable time: stale, still used, unicast probe.
        assert_eq!(t.resolve(A, 11 * MS), Resolve::Mac(M));
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: Some(M) }));
        assert_eq!(t.resolve(A, 11 * MS), Resolve::Mac(M));
        assert_eq!(t.pop_probe(), None, "one probe per retransmit interval");
        assert_eq!(t.resolve(A, 12 * MS), Resolve::Mac(M));
        assert!(t.pop_probe().is_some());
        // Both unicast probes unanswered: resolved anew by multicast, its packets waiting,
        // neither sent to the old MAC nor dropped.
        let Resolve::Queue(e) = t.resolve(A, 13 * MS) else { panic!("not queued") };
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: None }));
        assert!(t.enqueue(e, &mut pkt(1), true));
        assert_eq!(t.resolve(A, 13 * MS), Resolve::Queue(e));
        assert_eq!(t.rows()[0].state, NeighborState::Incomplete);
        assert_eq!(t.usable_until(e), None);
        assert_eq!(t.tick(14 * MS), (0, 0));
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: None }));
        // That stays silent too: only now is its packet given up (host unreachable).
        assert_eq!(t.tick(15 * MS), (1, 0));
        let mut b = PktBuf::new();
        assert_eq!(t.pop_gave_up(&mut b), Some(A.iface));
        assert_eq!(b.frame(), pkt(1).frame());
        assert_eq!(t.resolve(A, 15 * MS), Resolve::Fail(VrDrop::NoNeighbor));
        assert_eq!(t.resolve(A, 19 * MS), Resolve::Fail(VrDrop::NoNeighbor), "held");
        // After the hold: resolved again, never sent to the MAC it failed with.
        assert_eq!(t.resolve(A, 20 * MS), Resolve::Queue(e), "retried after hold");
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: None }));
    }

    #[test]
    fn timers_retransmit_fail_and_drop_queue() {
        let mut t = NeighborTable::new(&limits(), 2);
        let Resolve::Queue(e) = t.resolve(A, 0) else { panic!() };
        t.pop_probe();
        t.enqueue(e, &mut pkt(1), true);
        t.enqueue(e, &mut pkt(2), false);
        assert_eq!(t.tick(0), (0, 0));
        assert_eq!(t.pop_probe(), None);
        assert_eq!(t.tick(MS), (0, 0));
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: None }));
        assert_eq!(t.tick(2 * MS), (1, 1), "two probes unanswered: queue dropped");
        assert_eq!(t.queued(), 0);
        // The transit packet is handed to the VR, to answer with host unreachable.
        let mut b = PktBuf::new();
        assert_eq!(t.pop_gave_up(&mut b), Some(A.iface));
        assert_eq!(b.frame(), pkt(1).frame());
        assert_eq!(t.pop_gave_up(&mut b), None);
        assert_eq!(t.free_slots.len(), t.slots.len(), "every slot is free again");
        assert_eq!(t.resolve(A, 3 * MS), Resolve::Fail(VrDrop::NoNeighbor));
    }

    #[test]
    fn full_table_evicts_only_idle_stale_entries_among_resolved_ones() {
        let mut t = NeighborTable::new(&limits(), 2);
        assert!(t.add_static(A, M));
        assert!(matches!(t.resolve(B, 0), Resolve::Queue(_)));
        t.learn(B, M, REPLY, 0);
        assert_eq!(t.resolve(C, 0), Resolve::Fail(VrDrop::NeighborTableFull));
        t.resolve(B, 100 * MS); // stale now
        assert!(matches!(t.resolve(C, 100 * MS), Resolve::Queue(_)), "B evicted");
        assert!(
            !t.learn(A, MacAddr([9; 6]), Learn { create: true, ..REPLY }, 0),
            "static entries do not move"
        );
        let rows = t.rows();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].state, NeighborState::Static);
        assert_eq!(rows[1].ip, "10.0.0.4".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn total_queue_limit_is_shared() {
        let mut t = NeighborTable::new(&limits(), 2);
        let Resolve::Queue(a) = t.resolve(A, 0) else { panic!() };
        let Resolve::Queue(b) = t.resolve(B, 0) else { panic!() };
        assert!(t.enqueue(a, &mut pkt(1), true));
        assert!(t.enqueue(a, &mut pkt(2), true));
        assert!(t.enqueue(b, &mut pkt(3), true));
        assert!(!t.enqueue(b, &mut pkt(4), true), "3 slots in all");
    }

    fn key(iface: u16, last: u8) -> NKey {
        NKey::v4(iface, 0x0a00_0000 | last as u32)
    }

    #[test]
    fn incomplete_entries_are_capped_per_interface() {
        let l = VrLimits {
            neighbors: 8,
            incomplete_per_interface: 2,
            solicitations_per_sec: 0,
            ..limits()
        };
        let mut t = NeighborTable::new(&l, 2);
        assert!(t.learn(key(0, 9), M, Learn { create: true, ..REPLY }, 0));
        let Resolve::Queue(a) = t.resolve(key(0, 1), 0) else { panic!() };
        assert!(t.enqueue(a, &mut pkt(1), true));
        assert!(t.enqueue(a, &mut pkt(2), false));
        assert!(matches!(t.resolve(key(0, 2), MS / 2), Resolve::Queue(_)));
        assert!(matches!(t.resolve(key(1, 1), MS / 2), Resolve::Queue(_)));
        assert_eq!(t.take_evicted(), (0, 0));
        // A third incomplete entry on interface 0 takes the oldest one's place.
        assert!(matches!(t.resolve(key(0, 3), MS / 2), Resolve::Queue(_)));
        assert_eq!(t.take_evicted(), (1, 1), "its queue is dropped");
        assert_eq!(t.take_evicted(), (0, 0));
        assert_eq!(t.queued(), 0);
        let ips: Vec<String> = t.rows().iter().map(|r| format!("{}/{}", r.iface, r.ip)).collect();
        assert_eq!(ips, ["0/10.0.0.2", "0/10.0.0.3", "0/10.0.0.9", "1/10.0.0.1"]);
        assert_eq!(t.incomplete, 3);
        // A flood of new next hops never takes the reachable entry's place.
        for k in 10..200u8 {
            assert!(matches!(t.resolve(key(0, k), MS), Resolve::Queue(_)));
        }
        assert_eq!(t.rows().len(), 4);
        assert_eq!(t.resolve(key(0, 9), MS), Resolve::Mac(M));
        // The entries it churned through: the newest two.
        assert!(t.index.contains_key(&key(0, 198)) && t.index.contains_key(&key(0, 199)));
        // Failed entries do not count towards the cap; they retry within it.
        t.tick(2 * MS);
        t.tick(3 * MS);
        assert_eq!(t.incomplete, 0);
        assert_eq!(t.rows().iter().filter(|r| r.state == NeighborState::Failed).count(), 3);
        assert!(matches!(t.resolve(key(0, 20), 4 * MS), Resolve::Queue(_)));
        assert!(matches!(t.resolve(key(0, 21), 4 * MS), Resolve::Queue(_)));
        assert!(matches!(t.resolve(key(0, 198), 8 * MS), Resolve::Queue(_)), "retry after hold");
        assert_eq!(t.unresolved[0].len, 2);
        assert!(!t.index.contains_key(&key(0, 20)), "the oldest incomplete made way");
    }

    #[test]
    fn full_table_evicts_failed_then_incomplete_then_stale_never_reachable() {
        let l = VrLimits { neighbors: 4, incomplete_per_interface: 0, ..limits() };
        let mut t = NeighborTable::new(&l, 2);
        assert!(t.add_static(key(0, 1), M));
        t.learn(key(0, 2), M, Learn { create: true, ..REPLY }, 0); // reachable
        t.learn(key(0, 3), M, Learn { create: true, replace: true, confirmed: false }, 0); // stale
        let Resolve::Queue(_) = t.resolve(key(1, 4), 0) else { panic!() };
        t.tick(2 * MS); // .4 fails
        let Resolve::Queue(_) = t.resolve(key(0, 5), 2 * MS) else { panic!() };
        assert!(!t.index.contains_key(&key(1, 4)), "the failed entry went first");
        let Resolve::Queue(_) = t.resolve(key(0, 6), 2 * MS) else { panic!() };
        assert!(!t.index.contains_key(&key(0, 5)), "then the oldest incomplete one");
        assert!(t.index.contains_key(&key(0, 3)), "the stale one stays while there are some");
        // A resolved entry (a reply to us) displaces the incomplete one too.
        t.learn(key(0, 7), M, Learn { create: true, ..REPLY }, 2 * MS);
        assert!(!t.index.contains_key(&key(0, 6)));
        // Only resolved entries left: the least recently used stale one goes, never a
        // reachable one.
        let Resolve::Queue(_) = t.resolve(key(0, 8), 3 * MS) else { panic!() };
        assert!(!t.index.contains_key(&key(0, 3)));
        t.learn(key(0, 8), M, REPLY, 3 * MS);
        assert_eq!(t.resolve(key(0, 9), 3 * MS), Resolve::Fail(VrDrop::NeighborTableFull));
        let ips: Vec<String> = t.rows().iter().map(|r| r.ip.to_string()).collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.2", "10.0.0.7", "10.0.0.8"]);
    }

    #[test]
    fn solicitations_are_rate_limited_but_unicast_reprobes_are_not() {
        let l = VrLimits {
            neighbors: 16,
            solicitations_per_sec: 100,
            solicitations_burst: 2,
            ..limits()
        };
        let mut t = NeighborTable::new(&l, 2);
        t.learn(A, M, Learn { create: true, ..REPLY }, 0);
        // Each from a source of its own (a lane's share here is one token).
        assert!(matches!(t.resolve_from(B, 0, 1), Resolve::Queue(_)));
        assert!(matches!(t.resolve_from(C, 0, 2), Resolve::Queue(_)));
        assert_eq!(t.resolve_from(key(0, 50), 0, 3), Resolve::Fail(VrDrop::NeighborRateLimited));
        assert!(!t.index.contains_key(&key(0, 50)), "no entry without a probe");
        while t.pop_probe().is_some() {}
        // Retransmissions find no token: skipped, but the entries still fail on time.
        assert_eq!(t.tick(MS), (0, 0));
        assert_eq!(t.pop_probe(), None);
        t.tick(2 * MS);
        assert_eq!(t.rows().iter().filter(|r| r.state == NeighborState::Failed).count(), 2);
        // A's stale re-probes are unicast and need no token.
        for k in 0..2 {
            assert_eq!(t.resolve(A, 11 * MS + k * MS), Resolve::Mac(M));
            assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: Some(M) }));
        }
        // 10 ms is one token (two by now): a new next hop, the retry of a failed one, and the
        // next retry waits for the next token.
        assert!(matches!(t.resolve_from(key(0, 50), 20 * MS, 3), Resolve::Queue(_)));
        assert!(matches!(t.resolve_from(B, 20 * MS, 4), Resolve::Queue(_)));
        assert_eq!(t.resolve_from(C, 20 * MS, 5), Resolve::Fail(VrDrop::NeighborRateLimited));
        assert_eq!(
            t.rows().iter().find(|r| r.ip == C.addr()).unwrap().state,
            NeighborState::Failed
        );
        assert!(matches!(t.resolve_from(C, 30 * MS, 5), Resolve::Queue(_)));
        // 0: no limit.
        let mut t = NeighborTable::new(&VrLimits { solicitations_per_sec: 0, ..l }, 2);
        for k in 0..10 {
            assert!(matches!(t.resolve(key(0, k), 0), Resolve::Queue(_)));
        }
    }

    #[test]
    fn a_neighbor_that_answered_before_is_resolved_again_without_a_token() {
        let l = VrLimits {
            neighbors: 16,
            solicitations_per_sec: 100,
            solicitations_burst: 1,
            ..limits()
        };
        let mut t = NeighborTable::new(&l, 2);
        t.learn(A, M, Learn { create: true, ..REPLY }, 0);
        // Stale at 10 ms; two unicast probes go unanswered.
        assert_eq!(t.resolve(A, 11 * MS), Resolve::Mac(M));
        assert_eq!(t.resolve(A, 12 * MS), Resolve::Mac(M));
        while t.pop_probe().is_some() {}
        // A flood takes the only token.
        assert!(matches!(t.resolve(B, 12 * MS), Resolve::Queue(_)));
        assert_eq!(t.resolve(C, 12 * MS), Resolve::Fail(VrDrop::NeighborRateLimited));
        assert_eq!(t.pop_probe(), Some(Probe { key: B, unicast: None }));
        // A is resolved again all the same (multicast), its packet waiting.
        let Resolve::Queue(e) = t.resolve(A, 13 * MS) else { panic!("not queued") };
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: None }));
        assert!(t.enqueue(e, &mut pkt(7), true));
        // Retransmissions: A's goes out without a token, B's (never answered) is skipped.
        t.tick(14 * MS);
        assert_eq!(t.pop_probe(), Some(Probe { key: A, unicast: None }));
        assert_eq!(t.pop_probe(), None);
        // A answers at a new MAC: its packet leaves there, and so does what follows.
        let m2 = MacAddr([2, 0, 0, 0, 0, 0x22]);
        assert!(t.learn(A, m2, REPLY, 14 * MS));
        let mut out = PktBuf::new();
        assert_eq!(t.pop_ready(&mut out), Some((m2, 0, true)));
        assert_eq!(out.frame(), pkt(7).frame());
        assert_eq!(t.resolve(A, 14 * MS), Resolve::Mac(m2));
        // B fails; A goes stale and silent again, resolved anew, and fails too.
        assert_eq!(t.resolve(A, 25 * MS), Resolve::Mac(m2));
        assert_eq!(t.resolve(A, 26 * MS), Resolve::Mac(m2));
        assert!(matches!(t.resolve(A, 27 * MS), Resolve::Queue(_)));
        t.tick(28 * MS);
        t.tick(29 * MS);
        assert_eq!(t.resolve(A, 29 * MS), Resolve::Fail(VrDrop::NoNeighbor));
        assert_eq!(t.resolve(B, 29 * MS), Resolve::Fail(VrDrop::NoNeighbor));
        while t.pop_probe().is_some() {}
        // Held until 34 ms. A flood takes the token; A's hold is over: resolved again without
        // one, not sent to its last MAC; B has none to try, so it waits for a token.
        assert!(matches!(t.resolve(key(0, 40), 34 * MS), Resolve::Queue(_)));
        assert_eq!(t.resolve(A, 34 * MS), Resolve::Queue(e));
        assert_eq!(t.resolve(B, 34 * MS), Resolve::Fail(VrDrop::NeighborRateLimited));
        let probes: Vec<Probe> = std::iter::from_fn(|| t.pop_probe()).collect();
        assert_eq!(probes.len(), 2);
        assert!(probes.contains(&Probe { key: A, unicast: None }));
    }

    #[test]
    fn a_neighbor_resolved_again_is_not_evicted_by_a_flood_of_new_next_hops() {
        let l = VrLimits {
            neighbors: 64,
            incomplete_per_interface: 2,
            solicitations_per_sec: 0,
            ..limits()
        };
        let mut t = NeighborTable::new(&l, 2);
        t.learn(A, M, Learn { create: true, ..REPLY }, 0);
        // Stale at 10 ms, two unicast probes unanswered: resolved again, a packet waiting.
        assert_eq!(t.resolve(A, 11 * MS), Resolve::Mac(M));
        assert_eq!(t.resolve(A, 12 * MS), Resolve::Mac(M));
        let Resolve::Queue(e) = t.resolve(A, 13 * MS) else { panic!("not queued") };
        assert!(t.enqueue(e, &mut pkt(7), true));
        // A flood of new next hops on A's interface churns through the cap of two.
        for k in 10..60u8 {
            assert!(matches!(t.resolve(key(0, k), 13 * MS), Resolve::Queue(_)));
        }
        assert_eq!(t.unresolved[0].len, 2);
        assert_eq!(t.again.len, 1);
        assert_eq!(t.incomplete, 3);
        assert_eq!(t.take_evicted(), (0, 0), "the flood's own entries had nothing queued");
        // A keeps its entry and its packet, is retransmitted to, and answers.
        t.tick(14 * MS);
        assert!(std::iter::from_fn(|| t.pop_probe()).any(|p| p == Probe { key: A, unicast: None }));
        assert!(t.learn(A, M, REPLY, 14 * MS));
        let mut out = PktBuf::new();
        assert_eq!(t.pop_ready(&mut out), Some((M, 0, true)));
        assert_eq!(out.frame(), pkt(7).frame());
        assert_eq!((t.again.len, t.incomplete), (0, 2));
    }

    #[test]
    fn source_lanes_are_keyed_and_even() {
        let srcs: Vec<[u8; 4]> = (0..4096u32).map(|i| [10, 1, (i >> 8) as u8, i as u8]).collect();
        for k in [1u64, 0xdead_beef, crate::seed::key()[1]] {
            let mut per = [0u32; LANES];
            for s in &srcs {
                per[source_lane_keyed(s, k)] += 1;
            }
            let even = (srcs.len() / LANES) as u32;
            assert!(
                per.iter().all(|&c| c > even * 7 / 10 && c < even * 13 / 10),
                "{k:#x}: {per:?}"
            );
        }
        // The sources one key puts in one lane (a flood aimed at a victim's lane) are spread
        // over the lanes by another.
        let aimed: Vec<&[u8; 4]> = srcs.iter().filter(|s| source_lane_keyed(*s, 1) == 0).collect();
        let mut per = [0u32; LANES];
        for s in &aimed {
            per[source_lane_keyed(*s, 2)] += 1;
        }
        assert!(per.iter().all(|&c| c > 0 && (c as usize) < aimed.len() / 4), "{per:?}");
    }

    #[test]
    fn new_resolutions_share_the_budget_by_source() {
        // 800 a second, 8 deep: a lane refills at 200 a second, 2 deep.
        let l = VrLimits {
            neighbors: 64,
            incomplete_per_interface: 0,
            solicitations_per_sec: 800,
            solicitations_burst: 8,
            ..limits()
        };
        let mut t = NeighborTable::new(&l, 2);
        let flood = source_lane(&[10, 1, 0, 2]);
        let other = (0..=255u8).map(|b| source_lane(&[10, 1, 0, b])).find(|&k| k != flood);
        let other = other.unwrap();
        let v6 = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0];
        assert_eq!(source_lane(&v6), source_lane(&[v6, [9; 8]].concat()), "a /64 is one source");
        // The flooding source takes the budget's upper half, then its lane's two tokens.
        for k in 10..16 {
            assert!(matches!(t.resolve_from(key(0, k), 0, flood), Resolve::Queue(_)), "{k}");
        }
        for k in 16..40 {
            let r = t.resolve_from(key(0, k), 0, flood);
            assert_eq!(r, Resolve::Fail(VrDrop::NeighborRateLimited));
        }
        // Another source still resolves, from the two left.
        assert!(matches!(t.resolve_from(key(1, 1), 0, other), Resolve::Queue(_)));
        assert!(matches!(t.resolve_from(key(1, 2), 0, other), Resolve::Queue(_)));
        let r = t.resolve_from(key(1, 3), 0, other);
        assert_eq!(r, Resolve::Fail(VrDrop::NeighborRateLimited), "the budget is spent");
        // 5 ms later the budget has 4 tokens again (half: lanes needed) and each lane one.
        assert!(matches!(t.resolve_from(key(0, 50), 5 * MS, flood), Resolve::Queue(_)));
        let r = t.resolve_from(key(0, 51), 5 * MS, flood);
        assert_eq!(r, Resolve::Fail(VrDrop::NeighborRateLimited), "the flood's lane is empty");
        assert!(matches!(t.resolve_from(key(1, 4), 5 * MS, other), Resolve::Queue(_)));
        assert_eq!(std::iter::from_fn(|| t.pop_probe()).count(), 10);
    }

    #[test]
    fn probed_addresses_are_remembered_for_the_resolution_window() {
        let l = VrLimits { incomplete_per_interface: 1, ..limits() };
        let mut t = NeighborTable::new(&l, 2);
        assert!(!t.probed_recently(A, 0));
        assert!(matches!(t.resolve(A, 0), Resolve::Queue(_)));
        assert!(matches!(t.resolve(B, 0), Resolve::Queue(_)));
        assert!(!t.index.contains_key(&A), "evicted");
        assert!(t.probed_recently(A, 0) && t.probed_recently(B, MS));
        assert!(!t.probed_recently(C, 0));
        assert!(!t.probed_recently(A, 2 * MS), "neighbor_probes x retrans = 2 ms");
    }

    #[test]
    fn flush_counts_transit_and_generated_apart() {
        let mut t = NeighborTable::new(&limits(), 2);
        let Resolve::Queue(a) = t.resolve(A, 0) else { panic!() };
        let Resolve::Queue(c) = t.resolve(C, 0) else { panic!() };
        t.enqueue(a, &mut pkt(1), true);
        t.enqueue(a, &mut pkt(2), false);
        t.enqueue(c, &mut pkt(3), true);
        assert_eq!(t.flush(Some(0)), (1, 1));
        assert_eq!((t.incomplete, t.unresolved[0].len, t.unresolved[1].len), (1, 0, 1));
        assert_eq!(t.flush(None), (1, 0));
        assert_eq!((t.incomplete, t.rows().len(), t.queued()), (0, 0, 0));
    }
}
