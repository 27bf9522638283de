//! A VR's routes as the control plane owns them: every route by source, the adjacencies they
//! use, and the two FIB writers that publish compiled tables to the VR's readers.
//!
//! The data plane never holds a [`RouteTable`]: `control` keeps one per VR and the VR keeps
//! only [`fib::FibReader`]s and a copy of the adjacency list. A batch of [`RouteOp`]s is
//! validated whole before anything changes (nothing is half-applied), then:
//! 1. adjacencies the batch needs that the VR does not have yet are handed to `install`, which
//!    gives them to the VR between two bursts and returns once it has them;
//! 2. the FIBs are patched and published by atomic swap;
//! 3. adjacencies no route uses any more are freed for reuse. A freed slot is only ever handed
//!    out again through step 1, so a reader can never see a FIB leaf whose adjacency the VR
//!    does not hold: every published version refers only to installed slots.
//!
//! Several sources may hold a route for one prefix; the FIB gets the best by [`RouteSource`]
//! order (an administrative distance), and the others wait behind it.

use std::net::IpAddr;

use fib::{Change, Fib, FibReader, NextHop, NO_ROUTE};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use rustc_hash::FxHashMap;

pub use crate::config::RouteSource;
use crate::config::{IfaceId, RouteConfig, RouteTarget, VrConfig};
use crate::types::{link_local, nkey_ip, BuildError};

/// What a next-hop index (a FIB leaf) means: an adjacency, VPP's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Adj {
    /// No route (index 0, [`fib::NO_ROUTE`]).
    None,
    /// One of the VR's own addresses.
    Local,
    Blackhole,
    /// The broadcast address of a connected IPv4 subnet.
    Broadcast,
    /// A connected subnet: the destination itself is the neighbor.
    Glean(IfaceId),
    /// Through a gateway (IPv4-mapped for IPv4).
    Via {
        iface: IfaceId,
        gw: u128,
    },
    /// Several next hops (each a `Via` or `Glean` slot), one per flow by its hash.
    Multi(Paths),
    /// A reject route: ICMP destination unreachable, net unreachable (ICMPv6 no route).
    Unreachable,
    /// A reject route: ICMP destination unreachable, administratively prohibited.
    Prohibit,
}

// A multipath adjacency is sized to keep every adjacency as small as a gateway's.
const _: () = assert!(std::mem::size_of::<Adj>() == 32);

const SOURCES: usize = RouteSource::ALL.len();

/// One change to a VR's routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteOp {
    /// Add a route; refused if its source already has one for the prefix.
    Add(RouteConfig),
    /// Add a route, or replace its source's route for the prefix.
    Replace(RouteConfig),
    /// Remove the source's route for the prefix; refused if there is none.
    Delete { prefix: IpNet, source: RouteSource },
    /// Add a route, or replace its source's route for the prefix, with forwarding a
    /// [`RouteTarget`] cannot say: several weighted next hops, or a reject.
    Set { prefix: IpNet, source: RouteSource, forward: Forward },
}

/// What a [`RouteOp::Set`] route does with a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Equal-cost multipath: each flow (by its hash) takes one of these next hops (gateways
    /// or interfaces, not blackholes), a share of flows as large as its weight (1..=255).
    /// At most [`MAX_PATHS`] distinct next hops; one is a plain route.
    Paths(Vec<(RouteTarget, u8)>),
    /// Dropped with ICMP destination unreachable, net unreachable (ICMPv6: no route).
    Unreachable,
    /// Dropped with ICMP destination unreachable, communication administratively prohibited
    /// (ICMPv6: administratively prohibited).
    Prohibit,
}

/// Buckets of a multipath adjacency, and so the most next hops one route may have: the
/// adjacency stays as small as a gateway's (one cache line holds two).
pub const MAX_PATHS: usize = 14;

/// A multipath adjacency: `len` buckets, each a plain adjacency's slot, the next hops
/// repeated in proportion to their weights. A flow's hash picks the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Paths {
    len: u8,
    bucket: [NextHop; MAX_PATHS],
}

impl Paths {
    /// Spreads `hops` (slot, weight) over the buckets: with equal weights each hop gets the
    /// same number; otherwise each its share of 14 by largest remainder (at least one), and
    /// the buckets are filled hop by hop, always with the hop furthest behind its share, so
    /// they interleave.
    fn new(hops: &[(NextHop, u8)]) -> Paths {
        let k = hops.len().clamp(1, MAX_PATHS);
        let hops = &hops[..k];
        let equal = hops.iter().all(|h| h.1 == hops[0].1);
        let len = if equal { k * (MAX_PATHS / k) } else { MAX_PATHS };
        let total: usize = hops.iter().map(|h| usize::from(h.1.max(1))).sum();
        let mut count = [0usize; MAX_PATHS];
        let mut rest = [0usize; MAX_PATHS];
        for (i, h) in hops.iter().enumerate() {
            let exact = len * usize::from(h.1.max(1));
            (count[i], rest[i]) = ((exact / total).max(1), exact % total);
        }
        while count[..k].iter().sum::<usize>() < len {
            let i = (0..k).max_by_key(|&i| (rest[i], std::cmp::Reverse(i))).expect("a hop");
            count[i] += 1;
            rest[i] = 0;
        }
        while count[..k].iter().sum::<usize>() > len {
            let i = (0..k).max_by_key(|&i| (count[i], std::cmp::Reverse(i))).expect("a hop");
            count[i] -= 1;
        }
        let mut got = [0usize; MAX_PATHS];
        let mut bucket = [NO_ROUTE; MAX_PATHS];
        for (b, slot) in bucket.iter_mut().enumerate().take(len) {
            let behind = |i: usize| (count[i] * (b + 1)) as i64 - (got[i] * len) as i64;
            let i = (0..k)
                .filter(|&i| got[i] < count[i])
                .max_by_key(|&i| (behind(i), std::cmp::Reverse(i)))
                .expect("buckets left for some hop");
            got[i] += 1;
            *slot = hops[i].0;
        }
        Paths { len: len as u8, bucket }
    }

    /// The bucket flow hash `h` picks: its low 32 bits scaled to the bucket count (the high
    /// ones pick a replica, `flowhash::pick`, so the two choices stay independent).
    #[inline(always)]
    pub(crate) fn pick(&self, h: u64) -> NextHop {
        let i = ((h & 0xffff_ffff) * u64::from(self.len)) >> 32;
        self.bucket[i as usize % MAX_PATHS]
    }

    /// The buckets, in order.
    pub fn buckets(&self) -> &[NextHop] {
        &self.bucket[..usize::from(self.len)]
    }

    /// Each next hop once, in first-bucket order.
    fn members(&self) -> impl Iterator<Item = NextHop> + '_ {
        let b = self.buckets();
        b.iter().enumerate().filter(move |(i, n)| !b[..*i].contains(n)).map(|(_, &n)| n)
    }
}

/// What a validated operation asks for, before slots are allocated.
enum Want {
    Delete,
    One(Adj),
    Multi(Vec<(Adj, u8)>),
}

/// Why a batch of route operations was refused (nothing of it was applied).
/// Why the VR could not take a batch's new adjacencies (its worker gone, a replica refusing):
/// what [`RouteTable::apply`]'s `install` step answers; the batch is then undone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InstallError(pub String);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("operation {index}: {prefix}: {kind} routes follow the VR's interfaces and cannot be changed by route operations")]
    NotOperable { index: usize, prefix: IpNet, kind: &'static str },
    #[error("operation {index}: {prefix}: a {kind} route exists already (use replace)")]
    Exists { index: usize, prefix: IpNet, kind: &'static str },
    #[error("operation {index}: {prefix}: there is no {kind} route to delete")]
    Missing { index: usize, prefix: IpNet, kind: &'static str },
    #[error("operation {index}: {prefix}: {why}")]
    BadTarget { index: usize, prefix: IpNet, why: TargetError },
    #[error("the VR would need more than 65535 next hops")]
    TooManyNextHops,
    #[error("the data plane did not take the new next hops: {0}")]
    Install(String),
}

/// Why a route's next hop(s) cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("interface {iface} does not exist (the VR has {ifaces})")]
    NoInterface { iface: IfaceId, ifaces: usize },
    #[error("gateway {0} is not of the prefix's family")]
    Family(IpAddr),
    #[error("gateway {0} is on no connected subnet of the VR")]
    NotConnected(IpAddr),
    #[error("a multipath next hop cannot be a blackhole")]
    BlackholePath,
    #[error("a multipath next hop's weight is 1..=255, not 0")]
    ZeroWeight,
    #[error("a multipath route needs a next hop")]
    NoPaths,
    #[error("{0} next hops: at most {MAX_PATHS}")]
    TooManyPaths(usize),
}

/// Why a checkpoint's table was refused ([`RouteTable::from_checkpoint`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("{0}")]
    Build(BuildError),
    #[error("ends early")]
    Short,
    #[error("{n} adjacency slots in {len} bytes")]
    Slots { n: usize, len: usize },
    #[error("adjacency slot {0}")]
    Slot(usize),
    #[error("its interface adjacencies are not this VR's")]
    Interfaces,
    #[error("{0}")]
    Fib(#[from] fib::checkpoint::CheckpointError),
    #[error("{0} bytes after the tables")]
    Trailing(usize),
}

/// What a batch changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Routes added, replaced and deleted (in the RIB, any source).
    pub added: usize,
    pub replaced: usize,
    pub deleted: usize,
    /// Prefixes whose forwarding changed (FIB entries written).
    pub fib_changes: usize,
    /// Adjacencies installed in the VR for this batch.
    pub new_next_hops: usize,
    /// FIB generations after the batch.
    pub generation4: u64,
    pub generation6: u64,
}

/// What a VR needs to forward with a [`RouteTable`]: the adjacencies and readers of its FIBs.
#[derive(Clone, Debug)]
pub struct RouteView {
    pub(crate) adj: Vec<Adj>,
    pub(crate) glean: Vec<NextHop>,
    pub(crate) r4: FibReader<u32>,
    pub(crate) r6: FibReader<u128>,
}

/// A route as listed by [`RouteTable::routes`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRow {
    pub prefix: IpNet,
    pub source: RouteSource,
    pub target: RouteTarget,
    /// Whether the FIB uses this one (it is the best source for its prefix).
    pub best: bool,
}

/// Per prefix: each source's next hop (`NO_ROUTE`: none).
#[derive(Clone, Copy, Default)]
struct Entry {
    nh: [NextHop; SOURCES],
}

impl Entry {
    fn best(&self) -> NextHop {
        self.nh.iter().copied().find(|&n| n != NO_ROUTE).unwrap_or(NO_ROUTE)
    }
}

/// An adjacency's slot, shared by every route that uses it.
struct Slot {
    adj: Adj,
    /// Routes (of any source) that hold it; `PINNED` for the interface-made ones.
    refs: u32,
}

const PINNED: u32 = u32::MAX;

/// One VR's routes by source, adjacencies and FIB writers (see the module doc).
pub struct RouteTable {
    name: String,
    v4nets: Vec<Vec<Ipv4Net>>,
    v6nets: Vec<Vec<Ipv6Net>>,
    slots: Vec<Slot>,
    index: FxHashMap<Adj, NextHop>,
    free: Vec<NextHop>,
    glean: Vec<NextHop>,
    v4: FxHashMap<(u32, u8), Entry>,
    v6: FxHashMap<(u128, u8), Entry>,
    count: [usize; SOURCES],
    fib4: Fib<u32>,
    fib6: Fib<u128>,
}

impl std::fmt::Debug for RouteTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteTable")
            .field("vr", &self.name)
            .field("routes", &self.counts())
            .field("next_hops", &self.next_hops())
            .finish()
    }
}

impl RouteTable {
    /// The routes of `cfg`: its interfaces' connected subnets and own addresses, then its
    /// static and table routes, compiled once.
    pub fn new(cfg: &VrConfig) -> Result<RouteTable, BuildError> {
        let err = |m: String| BuildError(format!("vr {}: {m}", cfg.name));
        let mut t = RouteTable {
            name: cfg.name.clone(),
            v4nets: cfg.interfaces.iter().map(|i| i.ipv4.clone()).collect(),
            v6nets: cfg.interfaces.iter().map(|i| i.ipv6.clone()).collect(),
            slots: vec![Slot { adj: Adj::None, refs: PINNED }],
            index: FxHashMap::default(),
            free: Vec::new(),
            glean: Vec::new(),
            v4: FxHashMap::default(),
            v6: FxHashMap::default(),
            count: [0; SOURCES],
            fib4: Fib::new(),
            fib6: Fib::new(),
        };
        // Sized once: growing to a full table's half million entries rehashes it ~20 times,
        // a good part of a VR's start.
        let v4 = cfg.routes.iter().filter(|r| matches!(r.prefix, IpNet::V4(_))).count();
        t.v4.reserve(v4 + 3 * cfg.interfaces.len());
        t.v6.reserve(cfg.routes.len() - v4 + 3 * cfg.interfaces.len());
        t.index.insert(Adj::None, NO_ROUTE);
        let pin = |t: &mut RouteTable, a: Adj| -> Result<NextHop, BuildError> {
            let n = t.alloc(a).ok_or_else(|| err("more than 65535 next hops".into()))?;
            t.slots[n as usize].refs = PINNED;
            Ok(n)
        };
        let local = pin(&mut t, Adj::Local)?;
        let bcast = pin(&mut t, Adj::Broadcast)?;
        for i in 0..cfg.interfaces.len() {
            let g = pin(&mut t, Adj::Glean(i as IfaceId))?;
            t.glean.push(g);
        }
        for (i, f) in cfg.interfaces.iter().enumerate() {
            let g = t.glean[i];
            for n in &f.ipv4 {
                t.set4(n.trunc(), RouteSource::Connected, g);
                if n.prefix_len() <= 30 {
                    t.set4(Ipv4Net::from(n.broadcast()), RouteSource::Local, bcast);
                }
                t.set4(Ipv4Net::from(n.addr()), RouteSource::Local, local);
            }
            for n in &f.ipv6 {
                t.set6(n.trunc(), RouteSource::Connected, g);
                t.set6(Ipv6Net::from(n.addr()), RouteSource::Local, local);
            }
            t.set6(Ipv6Net::from(link_local(f.mac)), RouteSource::Local, local);
        }
        for r in &cfg.routes {
            if !r.source.is_operable() {
                return Err(err(format!("route {} has source {}", r.prefix, r.source.name())));
            }
            let a = t.adj_of(r.prefix, r.target).map_err(|e| err(e.to_string()))?;
            let nh = match t.index.get(&a) {
                Some(&n) => n,
                None => t.alloc(a).ok_or_else(|| err("more than 65535 next hops".into()))?,
            };
            let (old, ..) = t.set(r.prefix.trunc(), r.source, nh);
            t.retain(nh);
            if old != NO_ROUTE {
                t.release(old);
            }
        }
        t.fib4 = Fib::from_routes(t.v4.iter().map(|(&(a, l), e)| (a, l, e.best())));
        t.fib6 = Fib::from_routes(t.v6.iter().map(|(&(a, l), e)| (a, l, e.best())));
        t.collect_free();
        Ok(t)
    }

    /// What the VR forwards with: the adjacencies as they are now and readers of both FIBs.
    pub fn view(&self) -> RouteView {
        RouteView {
            adj: self.slots.iter().map(|s| s.adj).collect(),
            glean: self.glean.clone(),
            r4: self.fib4.reader(),
            r6: self.fib6.reader(),
        }
    }

    /// The VR's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Routes per source, in [`RouteSource::ALL`] order.
    pub fn counts(&self) -> [(RouteSource, usize); SOURCES] {
        RouteSource::ALL.map(|s| (s, self.count[s as usize]))
    }

    /// Adjacencies in use (the interface-made ones included).
    pub fn next_hops(&self) -> usize {
        self.index.len()
    }

    /// Prefixes in the IPv4 and IPv6 FIBs.
    pub fn fib_prefixes(&self) -> (usize, usize) {
        (self.fib4.rib().len(), self.fib6.rib().len())
    }

    /// Bytes of the published IPv4 and IPv6 tables.
    pub fn fib_bytes(&self) -> usize {
        self.fib4.current().memory_bytes() + self.fib6.current().memory_bytes()
    }

    /// FIB generations (bumped by every publish).
    pub fn generations(&self) -> (u64, u64) {
        (self.fib4.generation(), self.fib6.generation())
    }

    /// The IPv4 and IPv6 FIB writers, for checks against the RIB.
    pub fn fibs(&self) -> (&Fib<u32>, &Fib<u128>) {
        (&self.fib4, &self.fib6)
    }

    /// The adjacency the published FIB gives a packet to `addr` (what the VR reading it
    /// forwards with; [`Adj::None`]: no route).
    pub fn lookup(&self, addr: IpAddr) -> Adj {
        let nh = match addr {
            IpAddr::V4(a) => self.fib4.current().lookup(u32::from(a)),
            IpAddr::V6(a) => self.fib6.current().lookup(u128::from(a)),
        };
        self.adj_at(nh)
    }

    /// The adjacency of next-hop index `nh` (a multipath adjacency's buckets are such
    /// indices); [`Adj::None`] for one that is not in use.
    pub fn adj_at(&self, nh: NextHop) -> Adj {
        self.slots.get(nh as usize).map_or(Adj::None, |s| s.adj)
    }

    /// Every route of `source` (all sources when `None`), up to `limit`, in prefix order.
    pub fn routes(&self, source: Option<RouteSource>, limit: usize) -> Vec<RouteRow> {
        let mut out = Vec::new();
        let mut push = |prefix: IpNet, e: &Entry| {
            let best = e.best();
            for s in RouteSource::ALL {
                let nh = e.nh[s as usize];
                if nh == NO_ROUTE || source.is_some_and(|x| x != s) {
                    continue;
                }
                let target = self.target_of(prefix, self.slots[nh as usize].adj);
                out.push(RouteRow { prefix, source: s, target, best: nh == best });
            }
        };
        let mut v4: Vec<_> = self.v4.iter().collect();
        v4.sort_unstable_by_key(|(k, _)| **k);
        for (&(a, l), e) in v4 {
            push(IpNet::V4(Ipv4Net::new(a.into(), l).expect("valid length")), e);
        }
        let mut v6: Vec<_> = self.v6.iter().collect();
        v6.sort_unstable_by_key(|(k, _)| **k);
        for (&(a, l), e) in v6 {
            push(IpNet::V6(Ipv6Net::new(a.into(), l).expect("valid length")), e);
        }
        out.truncate(limit);
        out
    }

    /// Applies `ops` in order, all or nothing: validated first, then new adjacencies go to
    /// `install` (which must give them to the VR before it returns), then one publish per
    /// family. See the module doc for why this order is safe for readers.
    pub fn apply(
        &mut self,
        ops: &[RouteOp],
        install: impl FnOnce(&[(NextHop, Adj)]) -> Result<(), InstallError>,
    ) -> Result<Applied, RouteError> {
        let wants = self.validate(ops)?;
        // Allocate what the batch needs that nobody has yet; undone if `install` fails.
        let mut new = Vec::new();
        let mut adjs = Vec::with_capacity(wants.len());
        for w in &wants {
            match self.resolve(w, &mut new) {
                Some(a) => adjs.push(a),
                None => {
                    self.undo(&new);
                    return Err(RouteError::TooManyNextHops);
                }
            }
        }
        if !new.is_empty() {
            if let Err(e) = install(&new) {
                self.undo(&new);
                return Err(RouteError::Install(e.0));
            }
        }
        // A new multipath adjacency holds its next hops for as long as it lives.
        for &(_, a) in &new {
            if let Adj::Multi(p) = a {
                p.members().for_each(|m| self.retain(m));
            }
        }
        let mut out = Applied { new_next_hops: new.len(), ..Applied::default() };
        let (mut c4, mut c6) = (Vec::new(), Vec::new());
        for (op, adj) in ops.iter().zip(&adjs) {
            let (prefix, source) = op_key(op);
            let nh = adj.map_or(NO_ROUTE, |a| self.index[&a]);
            let (old, before, after) = self.set(prefix, source, nh);
            if nh != NO_ROUTE {
                self.retain(nh);
            }
            if old != NO_ROUTE {
                self.release(old);
            }
            match (old != NO_ROUTE, nh != NO_ROUTE) {
                (false, true) => out.added += 1,
                (true, true) => out.replaced += 1,
                (true, false) => out.deleted += 1,
                (false, false) => {}
            }
            if before != after {
                out.fib_changes += 1;
                match prefix {
                    IpNet::V4(p) => c4.push(change(u32::from(p.network()), p.prefix_len(), after)),
                    IpNet::V6(p) => c6.push(change(u128::from(p.network()), p.prefix_len(), after)),
                }
            }
        }
        self.fib4.apply(c4);
        self.fib6.apply(c6);
        self.collect_free();
        (out.generation4, out.generation6) = self.generations();
        Ok(out)
    }

    /// The slot-backed adjacency of `w`, allocating (and listing in `new`) what is missing;
    /// `None` when the VR would need more than 65535 slots.
    fn resolve(&mut self, w: &Want, new: &mut Vec<(NextHop, Adj)>) -> Option<Option<Adj>> {
        let mut get = |t: &mut RouteTable, a: Adj| -> Option<NextHop> {
            if let Some(&n) = t.index.get(&a) {
                return Some(n);
            }
            let n = t.alloc(a)?;
            new.push((n, a));
            Some(n)
        };
        Some(match w {
            Want::Delete => None,
            Want::One(a) => {
                get(self, *a)?;
                Some(*a)
            }
            Want::Multi(hops) => {
                let mut slots = Vec::with_capacity(hops.len());
                for &(a, wt) in hops {
                    slots.push((get(self, a)?, wt));
                }
                let a = Adj::Multi(Paths::new(&slots));
                get(self, a)?;
                Some(a)
            }
        })
    }

    /// Checks every operation against the table as the ones before it would leave it, and
    /// resolves what each added route needs.
    fn validate(&self, ops: &[RouteOp]) -> Result<Vec<Want>, RouteError> {
        // Presence of (prefix, source) after the operations so far, where the batch touched it:
        // only adds and deletes depend on it, so a batch of replaces and sets alone (a
        // journal's replay, half a million of them) keeps none. Sized once otherwise.
        let checked = ops.iter().any(|op| matches!(op, RouteOp::Add(_) | RouteOp::Delete { .. }));
        let mut seen: FxHashMap<(IpNet, RouteSource), bool> = FxHashMap::with_capacity_and_hasher(
            if checked { ops.len() } else { 0 },
            Default::default(),
        );
        let mut wants = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            let (prefix, source) = op_key(op);
            let name = source.name();
            if !source.is_operable() {
                return Err(RouteError::NotOperable { index, prefix, kind: name });
            }
            // A replace or set leaves the route present whatever was there: only adds and
            // deletes look it up (a miss in a half-million-entry map, for churn half its ops).
            match op {
                _ if !checked => {}
                RouteOp::Replace(_) | RouteOp::Set { .. } => {
                    seen.insert((prefix, source), true);
                }
                RouteOp::Add(_) | RouteOp::Delete { .. } => {
                    let present = seen
                        .entry((prefix, source))
                        .or_insert_with(|| self.get(prefix, source) != NO_ROUTE);
                    let add = matches!(op, RouteOp::Add(_));
                    if add && *present {
                        return Err(RouteError::Exists { index, prefix, kind: name });
                    }
                    if !add && !*present {
                        return Err(RouteError::Missing { index, prefix, kind: name });
                    }
                    *present = add;
                }
            }
            let bad = |why: TargetError| RouteError::BadTarget { index, prefix, why };
            let want = match op {
                RouteOp::Add(r) | RouteOp::Replace(r) => {
                    Want::One(self.adj_of(prefix, r.target).map_err(bad)?)
                }
                RouteOp::Delete { .. } => Want::Delete,
                RouteOp::Set { forward: Forward::Unreachable, .. } => Want::One(Adj::Unreachable),
                RouteOp::Set { forward: Forward::Prohibit, .. } => Want::One(Adj::Prohibit),
                RouteOp::Set { forward: Forward::Paths(hops), .. } => {
                    self.paths_of(prefix, hops).map_err(bad)?
                }
            };
            wants.push(want);
        }
        Ok(wants)
    }

    /// The adjacencies of a multipath route, each next hop once (weights of repeats added).
    fn paths_of(&self, prefix: IpNet, hops: &[(RouteTarget, u8)]) -> Result<Want, TargetError> {
        let mut out: Vec<(Adj, u8)> = Vec::with_capacity(hops.len());
        for &(t, w) in hops {
            if t == RouteTarget::Blackhole {
                return Err(TargetError::BlackholePath);
            }
            if w == 0 {
                return Err(TargetError::ZeroWeight);
            }
            let a = self.adj_of(prefix, t)?;
            match out.iter_mut().find(|(b, _)| *b == a) {
                Some((_, x)) => *x = x.saturating_add(w),
                None => out.push((a, w)),
            }
        }
        match out.len() {
            0 => Err(TargetError::NoPaths),
            1 => Ok(Want::One(out[0].0)),
            n if n > MAX_PATHS => Err(TargetError::TooManyPaths(n)),
            _ => Ok(Want::Multi(out)),
        }
    }

    /// Operations that would give a table the routes of `source` this one has (to carry
    /// them into a rebuilt VR), multipath and reject routes included.
    pub fn ops_of(&self, source: RouteSource) -> Vec<RouteOp> {
        let mut out = Vec::new();
        let mut push = |prefix: IpNet, e: &Entry| {
            let nh = e.nh[source as usize];
            if nh == NO_ROUTE {
                return;
            }
            let adj = self.slots[nh as usize].adj;
            let forward = match adj {
                Adj::Unreachable => Forward::Unreachable,
                Adj::Prohibit => Forward::Prohibit,
                Adj::Multi(p) => {
                    let b = p.buckets();
                    let weight = |m: NextHop| b.iter().filter(|&&x| x == m).count() as u8;
                    let hops = p
                        .members()
                        .map(|m| (self.target_of(prefix, self.slots[m as usize].adj), weight(m)));
                    Forward::Paths(hops.collect())
                }
                _ => {
                    let target = self.target_of(prefix, adj);
                    out.push(RouteOp::Add(RouteConfig { prefix, target, source }));
                    return;
                }
            };
            out.push(RouteOp::Set { prefix, source, forward });
        };
        for (&(a, l), e) in &self.v4 {
            push(IpNet::V4(Ipv4Net::new(a.into(), l).expect("valid length")), e);
        }
        for (&(a, l), e) in &self.v6 {
            push(IpNet::V6(Ipv6Net::new(a.into(), l).expect("valid length")), e);
        }
        out
    }

    /// The adjacency a route to `prefix` via `target` uses.
    fn adj_of(&self, prefix: IpNet, target: RouteTarget) -> Result<Adj, TargetError> {
        let ifaces = self.v4nets.len();
        let check = |iface: IfaceId| {
            if (iface as usize) < ifaces {
                Ok(iface)
            } else {
                Err(TargetError::NoInterface { iface, ifaces })
            }
        };
        Ok(match target {
            RouteTarget::Blackhole => Adj::Blackhole,
            RouteTarget::Iface(i) => Adj::Glean(check(i)?),
            RouteTarget::Via { gateway, iface } => {
                if matches!(prefix, IpNet::V4(_)) != gateway.is_ipv4() {
                    return Err(TargetError::Family(gateway));
                }
                let i = match iface {
                    Some(i) => check(i)?,
                    None => {
                        self.connected_iface(gateway).ok_or(TargetError::NotConnected(gateway))?
                    }
                };
                Adj::Via { iface: i, gw: nkey_ip(gateway) }
            }
        })
    }

    /// The route target an adjacency stands for (for listings).
    fn target_of(&self, prefix: IpNet, a: Adj) -> RouteTarget {
        match a {
            Adj::Glean(i) => RouteTarget::Iface(i),
            Adj::Via { iface, gw } => {
                let gateway = match prefix {
                    IpNet::V4(_) => IpAddr::from(std::net::Ipv4Addr::from(gw as u32)),
                    IpNet::V6(_) => IpAddr::from(std::net::Ipv6Addr::from(gw)),
                };
                RouteTarget::Via { gateway, iface: Some(iface) }
            }
            // Listed by its first next hop (`ops_of` has them all).
            Adj::Multi(p) => self.target_of(prefix, self.slots[p.buckets()[0] as usize].adj),
            _ => RouteTarget::Blackhole,
        }
    }

    fn connected_iface(&self, gw: IpAddr) -> Option<IfaceId> {
        let hit = |i: usize| match gw {
            IpAddr::V4(a) => self.v4nets[i].iter().any(|n| n.contains(&a)),
            IpAddr::V6(a) => self.v6nets[i].iter().any(|n| n.contains(&a)),
        };
        (0..self.v4nets.len()).find(|&i| hit(i)).map(|i| i as IfaceId)
    }

    fn alloc(&mut self, a: Adj) -> Option<NextHop> {
        let n = match self.free.pop() {
            Some(n) => {
                self.slots[n as usize] = Slot { adj: a, refs: 0 };
                n
            }
            None => {
                let n = NextHop::try_from(self.slots.len()).ok()?;
                self.slots.push(Slot { adj: a, refs: 0 });
                n
            }
        };
        self.index.insert(a, n);
        Some(n)
    }

    /// Returns slots allocated for a batch that did not go through.
    fn undo(&mut self, new: &[(NextHop, Adj)]) {
        for &(n, a) in new.iter().rev() {
            self.index.remove(&a);
            self.slots[n as usize] = Slot { adj: Adj::None, refs: 0 };
            self.free.push(n);
        }
    }

    fn retain(&mut self, nh: NextHop) {
        let s = &mut self.slots[nh as usize];
        if s.refs != PINNED {
            s.refs += 1;
        }
    }

    fn release(&mut self, nh: NextHop) {
        let s = &mut self.slots[nh as usize];
        if s.refs != PINNED {
            s.refs -= 1;
        }
    }

    /// Frees slots no route holds, after the FIBs that used them were replaced.
    fn collect_free(&mut self) {
        // Multipath adjacencies first: freeing one releases its next hops.
        for n in 1..self.slots.len() {
            let s = &self.slots[n];
            if let (0, Adj::Multi(p)) = (s.refs, s.adj) {
                if self.index.get(&s.adj) == Some(&(n as NextHop)) {
                    self.index.remove(&s.adj);
                    self.free.push(n as NextHop);
                    p.members().for_each(|m| self.release(m));
                }
            }
        }
        for n in 1..self.slots.len() {
            let s = &self.slots[n];
            if s.refs == 0 && self.index.get(&s.adj) == Some(&(n as NextHop)) {
                self.index.remove(&s.adj);
                self.free.push(n as NextHop);
            }
        }
    }

    fn get(&self, prefix: IpNet, s: RouteSource) -> NextHop {
        match prefix {
            IpNet::V4(p) => self.v4.get(&(p.network().into(), p.prefix_len())),
            IpNet::V6(p) => self.v6.get(&(p.network().into(), p.prefix_len())),
        }
        .map_or(NO_ROUTE, |e| e.nh[s as usize])
    }

    /// Sets (or with `NO_ROUTE` clears) the source's next hop for `prefix`; returns the old
    /// one and the prefix's best next hop before and after (one search of the table).
    fn set(&mut self, prefix: IpNet, s: RouteSource, nh: NextHop) -> (NextHop, NextHop, NextHop) {
        let r = match prefix {
            IpNet::V4(p) => set_in(&mut self.v4, (u32::from(p.network()), p.prefix_len()), s, nh),
            IpNet::V6(p) => set_in(&mut self.v6, (u128::from(p.network()), p.prefix_len()), s, nh),
        };
        self.recount(r.0, nh, s);
        r
    }

    fn set4(&mut self, p: Ipv4Net, s: RouteSource, nh: NextHop) -> NextHop {
        self.set(IpNet::V4(p), s, nh).0
    }

    fn set6(&mut self, p: Ipv6Net, s: RouteSource, nh: NextHop) -> NextHop {
        self.set(IpNet::V6(p), s, nh).0
    }

    fn recount(&mut self, old: NextHop, new: NextHop, s: RouteSource) {
        let c = &mut self.count[s as usize];
        match (old != NO_ROUTE, new != NO_ROUTE) {
            (false, true) => *c += 1,
            (true, false) => *c -= 1,
            _ => {}
        }
    }
}

/// [`RouteTable::set`] in one family's map: (old, best before, best after).
fn set_in<K: std::hash::Hash + Eq>(
    map: &mut FxHashMap<K, Entry>,
    k: K,
    s: RouteSource,
    nh: NextHop,
) -> (NextHop, NextHop, NextHop) {
    if nh == NO_ROUTE {
        let Some(e) = map.get_mut(&k) else { return (NO_ROUTE, NO_ROUTE, NO_ROUTE) };
        let before = e.best();
        let old = std::mem::replace(&mut e.nh[s as usize], NO_ROUTE);
        let after = e.best();
        if after == NO_ROUTE {
            map.remove(&k);
        }
        return (old, before, after);
    }
    let e = map.entry(k).or_default();
    let before = e.best();
    let old = std::mem::replace(&mut e.nh[s as usize], nh);
    (old, before, e.best())
}

fn change<K>(a: K, l: u8, nh: NextHop) -> Change<K> {
    if nh == NO_ROUTE {
        Change::Remove(a, l)
    } else {
        Change::Insert(a, l, nh)
    }
}

/// The (prefix, source) an operation is about.
fn op_key(op: &RouteOp) -> (IpNet, RouteSource) {
    match op {
        RouteOp::Add(r) | RouteOp::Replace(r) => (r.prefix.trunc(), r.source),
        RouteOp::Delete { prefix, source } | RouteOp::Set { prefix, source, .. } => {
            (prefix.trunc(), *source)
        }
    }
}

/// A route of a source, for callers that build operations.
pub fn route(prefix: IpNet, target: RouteTarget, source: RouteSource) -> RouteConfig {
    RouteConfig { prefix, target, source }
}

/// Starting from a checkpoint: the compiled tables and adjacencies of a VR, written while it
/// ran, so that a data plane started again forwards with them while its routes are rebuilt.
///
/// The bytes: the slot count (u32), each slot's adjacency (a tag byte and 32 bytes), then the
/// IPv4 and IPv6 images ([`fib::checkpoint`]). Slot numbers are what a rebuild from the same
/// configuration gives (allocation is deterministic), which [`RouteTable::take_over`] checks
/// rather than trusts.
impl RouteTable {
    /// The checkpoint of what the VR forwards with now.
    pub fn checkpoint(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 33 * self.slots.len() + self.fib_bytes());
        out.extend_from_slice(&(self.slots.len() as u32).to_le_bytes());
        for s in &self.slots {
            encode_adj(s.adj, &mut out);
        }
        fib::checkpoint::encode(&self.fib4.current(), &mut out);
        fib::checkpoint::encode(&self.fib6.current(), &mut out);
        out
    }

    /// A table for VR `cfg` that forwards as `bytes` (a [`checkpoint`](Self::checkpoint))
    /// says, made without its routes: only its interfaces' routes are in the RIB. It is a
    /// stand-in for readers until the table built from the routes
    /// [takes over](Self::take_over); route operations must not be applied to it.
    pub fn from_checkpoint(cfg: &VrConfig, bytes: &[u8]) -> Result<RouteTable, CheckpointError> {
        let bare = VrConfig {
            name: cfg.name.clone(),
            interfaces: cfg.interfaces.clone(),
            routes: Vec::new(),
            neighbors: Vec::new(),
            limits: cfg.limits,
        };
        let mut t = RouteTable::new(&bare).map_err(CheckpointError::Build)?;
        let n = bytes.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize);
        let n = n.ok_or(CheckpointError::Short)?;
        let at = 4 + 33 * n;
        if n == 0 || n > usize::from(NextHop::MAX) + 1 || bytes.len() < at {
            return Err(CheckpointError::Slots { n, len: bytes.len() });
        }
        let ifaces = cfg.interfaces.len();
        let mut adj = Vec::with_capacity(n);
        for (i, b) in bytes[4..at].chunks_exact(33).enumerate() {
            adj.push(decode_adj(b, ifaces, n).ok_or(CheckpointError::Slot(i))?);
        }
        // The interface-made slots come first, in the order a build makes them.
        let pinned = t.slots.len();
        if adj.len() < pinned || (0..pinned).any(|i| adj[i] != t.slots[i].adj) {
            return Err(CheckpointError::Interfaces);
        }
        let (p4, used) = fib::checkpoint::decode::<u32>(&bytes[at..], n)?;
        let (p6, used6) = fib::checkpoint::decode::<u128>(&bytes[at + used..], n)?;
        if at + used + used6 != bytes.len() {
            return Err(CheckpointError::Trailing(bytes.len() - at - used - used6));
        }
        t.slots = adj.into_iter().map(|adj| Slot { adj, refs: PINNED }).collect();
        t.fib4 = Fib::from_compiled(p4);
        t.fib6 = Fib::from_compiled(p6);
        Ok(t)
    }

    /// Makes `self` (built from the routes) publish to the readers of `stand_in` (made by
    /// [`from_checkpoint`](Self::from_checkpoint)), whose VR forwards with them. Returns the
    /// adjacency slots that differ from the stand-in's, which `install` must have given the VR
    /// before the tables are swapped; none when the checkpoint matched, as it should.
    pub fn take_over<E>(
        &mut self,
        stand_in: &RouteTable,
        install: impl FnOnce(&[(NextHop, Adj)]) -> Result<(), E>,
    ) -> Result<usize, E> {
        let diff: Vec<(NextHop, Adj)> = (self.slots.iter().enumerate())
            .filter(|(i, s)| stand_in.slots.get(*i).is_none_or(|o| o.adj != s.adj))
            .map(|(i, s)| (i as NextHop, s.adj))
            .collect();
        if !diff.is_empty() {
            install(&diff)?;
        }
        self.fib4.take_readers(&stand_in.fib4.reader());
        self.fib6.take_readers(&stand_in.fib6.reader());
        Ok(diff.len())
    }

    /// The first address where `stand_in` (made from a checkpoint) forwards otherwise than
    /// this table (built from the routes the checkpoint claims), looked up at every boundary
    /// of this table's RIB: address 0, and each prefix's first and last address and the one
    /// after it. `None` when they agree at all of them. A checkpoint can pass its checksum
    /// and still be wrong (edited, or written from a table that was): this finds a route
    /// missing, changed, or one more that covers a boundary of this table; a forged route
    /// strictly inside one of this table's prefixes, touching none of its boundaries, is not
    /// looked at.
    pub fn disagreement(&self, stand_in: &RouteTable) -> Option<IpAddr> {
        let adj = |t: &RouteTable, nh: NextHop| t.slots.get(nh as usize).map(|s| s.adj);
        let (a4, b4) = (self.fib4.current(), stand_in.fib4.current());
        let differs4 = |k: u32| adj(self, a4.lookup(k)) != adj(stand_in, b4.lookup(k));
        for &(a, l) in std::iter::once(&(0, 0)).chain(self.v4.keys()) {
            let last = a | u32::MAX.checked_shr(u32::from(l)).unwrap_or(0);
            if let Some(k) = [Some(a), Some(last), last.checked_add(1)]
                .into_iter()
                .flatten()
                .find(|&k| differs4(k))
            {
                return Some(IpAddr::V4(k.into()));
            }
        }
        let (a6, b6) = (self.fib6.current(), stand_in.fib6.current());
        let differs6 = |k: u128| adj(self, a6.lookup(k)) != adj(stand_in, b6.lookup(k));
        for &(a, l) in std::iter::once(&(0, 0)).chain(self.v6.keys()) {
            let last = a | u128::MAX.checked_shr(u32::from(l)).unwrap_or(0);
            if let Some(k) = [Some(a), Some(last), last.checked_add(1)]
                .into_iter()
                .flatten()
                .find(|&k| differs6(k))
            {
                return Some(IpAddr::V6(k.into()));
            }
        }
        None
    }
}

fn encode_adj(a: Adj, out: &mut Vec<u8>) {
    let mut p = [0u8; 33];
    p[0] = match a {
        Adj::None => 0,
        Adj::Local => 1,
        Adj::Blackhole => 2,
        Adj::Broadcast => 3,
        Adj::Unreachable => 4,
        Adj::Prohibit => 5,
        Adj::Glean(i) => {
            p[1..3].copy_from_slice(&i.to_le_bytes());
            6
        }
        Adj::Via { iface, gw } => {
            p[1..3].copy_from_slice(&iface.to_le_bytes());
            p[3..19].copy_from_slice(&gw.to_le_bytes());
            7
        }
        Adj::Multi(m) => {
            p[1] = m.len;
            for (k, b) in m.bucket.iter().enumerate() {
                p[2 + 2 * k..4 + 2 * k].copy_from_slice(&b.to_le_bytes());
            }
            8
        }
    };
    out.extend_from_slice(&p);
}

/// An adjacency as [`encode_adj`] wrote it, if it is one a VR of `ifaces` interfaces and
/// `slots` slots can hold.
fn decode_adj(b: &[u8], ifaces: usize, slots: usize) -> Option<Adj> {
    let u16at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    Some(match b[0] {
        0 => Adj::None,
        1 => Adj::Local,
        2 => Adj::Blackhole,
        3 => Adj::Broadcast,
        4 => Adj::Unreachable,
        5 => Adj::Prohibit,
        6 => Adj::Glean(Some(u16at(1)).filter(|&i| usize::from(i) < ifaces)?),
        7 => Adj::Via {
            iface: Some(u16at(1)).filter(|&i| usize::from(i) < ifaces)?,
            gw: u128::from_le_bytes(b[3..19].try_into().ok()?),
        },
        8 => {
            let len = b[1];
            if len == 0 || usize::from(len) > MAX_PATHS {
                return None;
            }
            let mut bucket = [NO_ROUTE; MAX_PATHS];
            for (k, x) in bucket.iter_mut().enumerate() {
                *x = u16at(2 + 2 * k);
                if usize::from(*x) >= slots {
                    return None;
                }
            }
            Adj::Multi(Paths { len, bucket })
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IfaceConfig, VrLimits};

    fn cfg() -> VrConfig {
        VrConfig {
            name: "t".into(),
            interfaces: vec![
                IfaceConfig {
                    name: "a".into(),
                    port: 0,
                    vlan: None,
                    mac: "02:00:00:00:00:01".parse().unwrap(),
                    mtu: 1500,
                    ipv4: vec!["10.0.0.1/24".parse().unwrap()],
                    ipv6: vec!["2001:db8::1/64".parse().unwrap()],
                },
                IfaceConfig {
                    name: "b".into(),
                    port: 1,
                    vlan: None,
                    mac: "02:00:00:00:00:02".parse().unwrap(),
                    mtu: 1500,
                    ipv4: vec!["10.0.1.1/24".parse().unwrap()],
                    ipv6: vec![],
                },
            ],
            routes: vec![],
            neighbors: vec![],
            limits: VrLimits::default(),
        }
    }

    fn via(p: &str, gw: &str, s: RouteSource) -> RouteConfig {
        route(p.parse().unwrap(), RouteTarget::Via { gateway: gw.parse().unwrap(), iface: None }, s)
    }

    fn lookup(t: &RouteTable, a: &str) -> Adj {
        let v = t.view();
        let nh = v.r4.load().lookup(u32::from(a.parse::<std::net::Ipv4Addr>().unwrap()));
        t.slots[nh as usize].adj
    }

    /// A VR's config with `n` synthetic table routes over a few gateways of interface b, some
    /// static, multipath and reject routes and IPv6 ones.
    fn big(n: usize) -> VrConfig {
        let mut c = cfg();
        let gws = ["10.0.1.2", "10.0.1.3", "10.0.1.4"];
        for (i, (p, _)) in fib::synthetic::ipv4(n, 3, 11).into_iter().enumerate() {
            let gw = gws[i % 3];
            c.routes.push(via(&p.to_string(), gw, RouteSource::Table));
        }
        for (p, _) in fib::synthetic::ipv6(n / 10, 3, 12) {
            let t = RouteTarget::Via { gateway: "2001:db8::9".parse().unwrap(), iface: None };
            c.routes.push(route(IpNet::V6(p), t, RouteSource::Table));
        }
        c.routes.push(route(
            "192.0.2.0/24".parse().unwrap(),
            RouteTarget::Blackhole,
            RouteSource::Static,
        ));
        c
    }

    /// Every prefix's first and last address and their neighbors outside it.
    fn edges<K: fib::Key>(rib: &fib::Rib<K>) -> Vec<K> {
        let mut v = Vec::new();
        for (a, l, _) in rib.iter() {
            let (first, last) = (a.mask(l), a.mask(l).last(l));
            v.extend(
                [Some(first), Some(last), first.checked_dec(), last.checked_inc()]
                    .into_iter()
                    .flatten(),
            );
        }
        v
    }

    #[test]
    fn a_table_started_from_its_checkpoint_forwards_every_prefix_boundary_alike() {
        let c = big(30_000);
        let mut built = RouteTable::new(&c).unwrap();
        let ops = [
            RouteOp::Set {
                prefix: "198.51.100.0/24".parse().unwrap(),
                source: RouteSource::Api,
                forward: Forward::Paths(vec![
                    (RouteTarget::Via { gateway: "10.0.1.2".parse().unwrap(), iface: None }, 1),
                    (RouteTarget::Via { gateway: "10.0.0.7".parse().unwrap(), iface: None }, 3),
                ]),
            },
            RouteOp::Set {
                prefix: "203.0.113.0/24".parse().unwrap(),
                source: RouteSource::Api,
                forward: Forward::Prohibit,
            },
        ];
        built.apply(&ops, |_| Ok(())).unwrap();
        let bytes = built.checkpoint();
        let stand_in = RouteTable::from_checkpoint(&c, &bytes).unwrap();
        let (a, b) = (built.view(), stand_in.view());
        assert_eq!(a.adj, b.adj);
        assert_eq!(a.glean, b.glean);
        let (r4, r6) = (a.r4.load(), b.r4.load());
        for k in edges(built.fibs().0.rib()) {
            assert_eq!(r4.lookup(k), r6.lookup(k), "IPv4 {k:#x}");
        }
        let (r4, r6) = (a.r6.load(), b.r6.load());
        for k in edges(built.fibs().1.rib()) {
            assert_eq!(r4.lookup(k), r6.lookup(k), "IPv6 {k:#x}");
        }

        // The table rebuilt from the routes takes the stand-in's readers over: nothing to
        // install, and the readers now see what it publishes.
        let mut rebuilt = RouteTable::new(&c).unwrap();
        rebuilt.apply(&ops, |_| Ok(())).unwrap();
        let reader = b.r4.clone();
        assert_eq!(rebuilt.take_over::<()>(&stand_in, |_| panic!("nothing differs")), Ok(0));
        let extra = [RouteOp::Add(via("100.64.0.0/10", "10.0.1.2", RouteSource::Api))];
        rebuilt.apply(&extra, |_| Ok(())).unwrap();
        let nh = reader.load().lookup(u32::from_be_bytes([100, 64, 1, 1]));
        assert_eq!(rebuilt.slots[nh as usize].adj, lookup(&rebuilt, "100.64.1.1"));
        assert_ne!(nh, NO_ROUTE);
    }

    #[test]
    fn a_damaged_or_foreign_checkpoint_is_refused() {
        let c = big(2000);
        let bytes = RouteTable::new(&c).unwrap().checkpoint();
        // Another VR's interfaces.
        let mut other = c.clone();
        other.interfaces.pop();
        assert!(RouteTable::from_checkpoint(&other, &bytes).is_err());
        let mut other = c.clone();
        let mut third = other.interfaces[1].clone();
        third.name = "c".into();
        third.ipv4.clear();
        other.interfaces.push(third);
        let e = RouteTable::from_checkpoint(&other, &bytes).unwrap_err();
        assert_eq!(e, CheckpointError::Interfaces, "{e}");
        // Cut short, or a slot naming an interface the VR does not have.
        for cut in [0, 3, 40, bytes.len() / 2, bytes.len() - 1] {
            assert!(RouteTable::from_checkpoint(&c, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut d = bytes.clone();
        let slots = u32::from_le_bytes(d[..4].try_into().unwrap()) as usize;
        let via = (0..slots).map(|i| 4 + 33 * i).find(|&at| d[at] == 7).expect("a gateway slot");
        d[via + 1] = 9;
        let e = RouteTable::from_checkpoint(&c, &d).unwrap_err();
        assert!(matches!(e, CheckpointError::Slot(_)), "{e}");
        let mut d = bytes.clone();
        d.push(0);
        let e = RouteTable::from_checkpoint(&c, &d).unwrap_err();
        assert_eq!(e, CheckpointError::Trailing(1), "{e}");
    }

    #[test]
    fn a_checkpoint_that_passes_its_checks_but_forwards_otherwise_is_found_out() {
        let c = big(2000);
        let built = RouteTable::new(&c).unwrap();
        let bytes = built.checkpoint();
        let honest = RouteTable::from_checkpoint(&c, &bytes).unwrap();
        assert_eq!(built.disagreement(&honest), None);
        // A gateway's bytes flipped: still a well-formed slot, so it loads.
        let mut d = bytes.clone();
        let slots = u32::from_le_bytes(d[..4].try_into().unwrap()) as usize;
        let gw = (0..slots).map(|i| 4 + 33 * i).find(|&at| d[at] == 7).expect("a gateway slot");
        d[gw + 3] ^= 0x01;
        let forged = RouteTable::from_checkpoint(&c, &d).unwrap();
        assert!(built.disagreement(&forged).is_some());
        // The image of another table (one route more, one IPv6 route less) under this VR.
        let mut more = c.clone();
        more.routes.push(via("100.64.0.0/10", "10.0.1.2", RouteSource::Static));
        let other = RouteTable::from_checkpoint(&c, &RouteTable::new(&more).unwrap().checkpoint());
        let at = built.disagreement(&other.unwrap()).expect("the route it has more");
        let more: IpNet = "100.64.0.0/10".parse().unwrap();
        assert!(more.contains(&at), "{at}");
        let mut fewer = c.clone();
        let v6 = fewer.routes.iter().rposition(|r| matches!(r.prefix, IpNet::V6(_))).unwrap();
        let gone = fewer.routes.remove(v6).prefix;
        let t = RouteTable::new(&fewer).unwrap();
        let other = RouteTable::from_checkpoint(&c, &t.checkpoint()).unwrap();
        // The IPv4 images are the same: the difference is found in IPv6's.
        let at = built.disagreement(&other).expect("the IPv6 route it lacks");
        assert!(at.is_ipv6(), "{at} for {gone}");
    }

    #[test]
    fn interfaces_make_connected_and_local_routes() {
        let t = RouteTable::new(&cfg()).unwrap();
        let c = t.counts();
        assert_eq!(
            c[0],
            (RouteSource::Local, 2 * 2 + 1 + 2),
            "v4 own + broadcast per /24, v6 own, 2 ll"
        );
        assert_eq!(c[1], (RouteSource::Connected, 3));
        assert_eq!(lookup(&t, "10.0.0.1"), Adj::Local);
        assert_eq!(lookup(&t, "10.0.0.255"), Adj::Broadcast);
        assert_eq!(lookup(&t, "10.0.1.9"), Adj::Glean(1));
        assert_eq!(lookup(&t, "8.8.8.8"), Adj::None);
    }

    #[test]
    fn ops_install_adjacencies_before_publishing_and_free_them_after() {
        let mut t = RouteTable::new(&cfg()).unwrap();
        let base = t.next_hops();
        let mut installed = Vec::new();
        let a = t
            .apply(
                &[
                    RouteOp::Add(via("8.0.0.0/8", "10.0.1.2", RouteSource::Api)),
                    RouteOp::Add(via("9.0.0.0/8", "10.0.1.2", RouteSource::Api)),
                ],
                |n| {
                    // Not yet published: the reader still answers no route.
                    installed.extend_from_slice(n);
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!((a.added, a.fib_changes, a.new_next_hops), (2, 2, 1));
        assert_eq!(installed.len(), 1);
        let gw = Adj::Via { iface: 1, gw: nkey_ip("10.0.1.2".parse().unwrap()) };
        assert_eq!(installed[0].1, gw);
        assert_eq!(lookup(&t, "8.1.2.3"), gw);
        assert_eq!(t.next_hops(), base + 1);
        // A static route for the same prefix wins; deleting it falls back to the API route.
        t.apply(&[RouteOp::Add(via("8.0.0.0/8", "10.0.0.7", RouteSource::Static))], |_| Ok(()))
            .unwrap();
        assert!(matches!(lookup(&t, "8.1.2.3"), Adj::Via { iface: 0, .. }));
        let d =
            RouteOp::Delete { prefix: "8.0.0.0/8".parse().unwrap(), source: RouteSource::Static };
        t.apply(&[d], |_| Ok(())).unwrap();
        assert_eq!(lookup(&t, "8.1.2.3"), gw);
        let del =
            |p: &str| RouteOp::Delete { prefix: p.parse().unwrap(), source: RouteSource::Api };
        let a = t.apply(&[del("8.0.0.0/8"), del("9.0.0.0/8")], |_| panic!("nothing new")).unwrap();
        assert_eq!((a.deleted, a.fib_changes), (2, 2));
        assert_eq!(lookup(&t, "8.1.2.3"), Adj::None);
        assert_eq!(t.next_hops(), base, "the gateway's slot was freed");
    }

    #[test]
    fn a_bad_batch_changes_nothing() {
        let mut t = RouteTable::new(&cfg()).unwrap();
        let gen = t.generations();
        let ops = [
            RouteOp::Add(via("8.0.0.0/8", "10.0.1.2", RouteSource::Api)),
            RouteOp::Add(via("9.0.0.0/8", "192.0.2.1", RouteSource::Api)),
        ];
        let e = t.apply(&ops, |_| panic!("not reached")).unwrap_err();
        assert!(
            e.to_string()
                .contains("operation 1: 9.0.0.0/8: gateway 192.0.2.1 is on no connected subnet"),
            "{e}"
        );
        let dup = [
            RouteOp::Add(via("8.0.0.0/8", "10.0.1.2", RouteSource::Api)),
            RouteOp::Add(via("8.0.0.0/8", "10.0.1.3", RouteSource::Api)),
        ];
        assert!(matches!(t.apply(&dup, |_| Ok(())), Err(RouteError::Exists { index: 1, .. })));
        let conn = RouteOp::Delete {
            prefix: "10.0.0.0/24".parse().unwrap(),
            source: RouteSource::Connected,
        };
        assert!(matches!(t.apply(&[conn], |_| Ok(())), Err(RouteError::NotOperable { .. })));
        // A batch of replaces alone (validated without the presence set): refused the same.
        let replaces = [
            RouteOp::Replace(via("8.0.0.0/8", "10.0.1.2", RouteSource::Api)),
            RouteOp::Replace(via("9.0.0.0/8", "192.0.2.1", RouteSource::Api)),
        ];
        let e = t.apply(&replaces, |_| panic!("not reached")).unwrap_err();
        assert!(matches!(e, RouteError::BadTarget { index: 1, .. }), "{e}");
        let e = t.apply(&ops[..1], |_| Err(InstallError("worker gone".into()))).unwrap_err();
        assert_eq!(e, RouteError::Install("worker gone".into()));
        assert_eq!(t.generations(), gen);
        assert_eq!(t.counts()[3], (RouteSource::Api, 0));
        assert_eq!(lookup(&t, "8.1.2.3"), Adj::None);
        // The slot taken for the failed install is free again, and reused.
        let base = t.next_hops();
        t.apply(&ops[..1], |n| {
            assert_eq!(n.len(), 1);
            Ok(())
        })
        .unwrap();
        assert_eq!(t.next_hops(), base + 1);
        // A replace or set in a batch with adds and deletes leaves the route present for
        // the operations after it: an add of it is refused, a delete taken.
        let p: IpNet = "7.0.0.0/8".parse().unwrap();
        let set = RouteOp::Set { prefix: p, source: RouteSource::Api, forward: Forward::Prohibit };
        let del = RouteOp::Delete { prefix: p, source: RouteSource::Api };
        let add = RouteOp::Add(via("7.0.0.0/8", "10.0.1.2", RouteSource::Api));
        let rep = RouteOp::Replace(via("7.0.0.0/8", "10.0.1.3", RouteSource::Api));
        let e = t.apply(&[rep.clone(), add.clone()], |_| Ok(())).unwrap_err();
        assert!(matches!(e, RouteError::Exists { index: 1, .. }), "{e}");
        let e = t.apply(&[set.clone(), add.clone()], |_| Ok(())).unwrap_err();
        assert!(matches!(e, RouteError::Exists { index: 1, .. }), "{e}");
        let e = t.apply(std::slice::from_ref(&del), |_| Ok(())).unwrap_err();
        assert!(matches!(e, RouteError::Missing { index: 0, .. }), "{e}");
        let a = t.apply(&[set, del.clone(), rep, del.clone(), add], |_| Ok(())).unwrap();
        assert_eq!((a.added, a.deleted), (3, 2));
        assert!(matches!(lookup(&t, "7.1.2.3"), Adj::Via { iface: 1, .. }));
    }

    #[test]
    fn replace_and_listing() {
        let mut t = RouteTable::new(&cfg()).unwrap();
        t.apply(
            &[RouteOp::Replace(via("2001:db8:5::/48", "2001:db8::9", RouteSource::Api))],
            |_| Ok(()),
        )
        .unwrap();
        let a = t
            .apply(
                &[RouteOp::Replace(via("2001:db8:5::/48", "2001:db8::a", RouteSource::Api))],
                |_| Ok(()),
            )
            .unwrap();
        assert_eq!((a.replaced, a.fib_changes, a.new_next_hops), (1, 1, 1));
        let rows = t.routes(Some(RouteSource::Api), 10);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0].target,
            RouteTarget::Via { gateway: "2001:db8::a".parse().unwrap(), iface: Some(0) }
        );
        assert!(rows[0].best);
    }
}
