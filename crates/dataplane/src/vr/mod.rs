//! A virtual router: interfaces, forwarding tables, neighbors and counters, and the pipeline
//! that runs over a batch.
//!
//! The batch loop has three passes, so that the one expensive step, the longest-prefix match,
//! runs over the whole batch at once with its memory accesses overlapped:
//!
//! 1. `ingress`: validate each packet and sort it out — a destination to look up, or handled
//!    now (ARP, neighbor discovery, drops).
//! 2. One batched lookup per address family.
//! 3. `forward`: by adjacency — rewrite and send, deliver locally, or answer with an ICMP
//!    error built in the packet's own buffer.
//!
//! Packets the VR makes beyond the one it received (probes, flushed queues, fragments) go to
//! the engine's `out` queue, lent to the VR while it runs and transmitted after the batch.
//! Nothing here allocates per packet: every buffer, queue and table is sized when the VR (or
//! the engine) is built.

mod arp;
mod bucket;
mod ip4;
mod ip4opt;
mod ip6;
mod neighbor;
mod reasm;
mod share;
mod snap;

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use fib::{FibReader, NextHop};
use ipnet::{Ipv4Net, Ipv6Net};
use ports::PktBuf;
use wire::MacAddr;

use crate::config::{IfaceId, PortId, VrConfig, VrLimits, IPV6_MIN_MTU, MAX_MTU, MIN_MTU};
use crate::counters::{VrCounters, VrDrop};
use crate::l2;
use crate::routes::{Adj, RouteTable, RouteView};
use crate::types::{link_local, BuildError, Burst, Fate, Meta, OutQueue};
use bucket::Bucket;
pub use bucket::{DEFAULT_PUNT_BURST, DEFAULT_PUNT_PER_SEC};
pub use neighbor::{solicitation_lane, NeighborRow, NeighborState};
use neighbor::{NKey, NeighborTable, Resolve};
pub use share::NeighborShare;
pub use snap::{interface_link_local, restorable, RestoredNeighbor, RestoredState};

/// A gateway adjacency's ready-made L2 header (VPP's adjacency rewrite). The fast path copies
/// it instead of asking the neighbor table; it is trusted only while the table's epoch is the
/// one it was made in and the neighbor's reachable time lasts. Epoch 0 never matches.
/// Aligned to a cache line: at its 40 bytes half the entries straddled two, which a VR on a
/// worker with many others misses each burst.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
pub(crate) struct Rewrite {
    pub epoch: u64,
    pub until: u64,
    pub port: PortId,
    pub mtu: u16,
    pub len: u8,
    pub hdr: [u8; l2::ETH_VLAN_LEN],
}

impl Rewrite {
    /// Puts the header in front of the L3 packet at `l3`.
    #[inline(always)]
    pub fn apply(&self, buf: &mut PktBuf, l3: usize) {
        if self.len as usize == l3 && l3 == l2::ETH_LEN {
            buf.frame_mut()[..l2::ETH_LEN].copy_from_slice(&self.hdr[..l2::ETH_LEN]);
        } else {
            l2::put(buf, l3, &self.hdr[..self.len as usize]);
        }
    }
}

/// A VR interface as the pipeline uses it.
pub(crate) struct Iface {
    pub name: String,
    pub port: PortId,
    pub vlan: Option<u16>,
    pub mac: MacAddr,
    pub mtu: u16,
    pub v4: Vec<Ipv4Net>,
    pub v6: Vec<Ipv6Net>,
    /// Link-local address (EUI-64 from the MAC).
    pub ll: Ipv6Addr,
    /// Administratively up: when down, what arrives on it or would leave by it is dropped
    /// (`interface_down`).
    pub up: bool,
    /// The port of its Linux control-plane mirror interface, if the VR has one: packets for
    /// the VR that the data plane does not answer go there (see [`Vr::punt`]).
    pub mirror: Option<PortId>,
}

impl Iface {
    fn has_v4(&self, a: Ipv4Addr) -> bool {
        self.v4.iter().any(|n| n.addr() == a)
    }
    fn has_v6(&self, a: Ipv6Addr) -> bool {
        a == self.ll || self.v6.iter().any(|n| n.addr() == a)
    }
}

/// An ICMP or ICMPv6 error to answer with: its type, code and the word after the checksum
/// (an MTU, a pointer, or 0).
#[derive(Clone, Copy)]
pub(crate) struct Icmp(pub u8, pub u8, pub u32);

/// A virtual router. The output queue and the lookup scratch are the worker's, lent to each VR
/// while it runs (`OutQueue`, `Lookup`), so a thousand VRs do not each carry them.
///
/// `repr(C)`, the fields every burst reads first (through `counters`' first fields and the
/// head of `neigh`, also ordered so): with many VRs on a worker, each VR a burst visits costs
/// the cache lines its state is spread over. In the compiler's order, `Vr::process` missed
/// 0.83 L1 lines a packet more with 16 VRs on a worker than with 1 (cachegrind, bursts of
/// 256, 16 packets a VR a visit: 13 lines a visit); in this order, with a `Rewrite` a line
/// each, 0.55. Those misses hit L2: the wall time a packet did not move measurably
/// (docs/performance.md), but nothing forwards slower for it.
#[repr(C)]
pub struct Vr {
    /// Per adjacency: its cached L2 header (gateway adjacencies only).
    rewrite: Vec<Rewrite>,
    pub(crate) ifaces: Vec<Iface>,
    /// The VR's own addresses (IPv4-mapped for IPv4): a packet arriving from one is spoofed.
    own: AddrSet,
    r4: FibReader<u32>,
    r6: FibReader<u128>,
    /// FIB generations (IPv4, IPv6) the last batch looked up in.
    seen: (u64, u64),
    spill_n: usize,
    /// When the VR first and last sent a transit frame (the poll's clock; see [`Sent`]).
    sent: Sent,
    pub(crate) counters: VrCounters,
    neigh: NeighborTable,
    pub(crate) name: String,
    adj: Vec<Adj>,
    /// Per adjacency: the neighbor entry it last resolved to.
    adj_hint: Vec<u32>,
    /// Per interface: the adjacency of its connected subnets (the destination is the neighbor).
    glean: Vec<NextHop>,
    /// Scratch for the original of a packet being fragmented: empty until the VR first
    /// fragments, then one buffer for good ([`Vr::fragment_buffers`]).
    frag_copy: Vec<u8>,
    bucket: Bucket,
    /// Datagrams addressed to the VR that arrive in fragments.
    reasm: reasm::Reassembler,
    /// Fragments after the first of a packet the VR made itself (an echo reply to a
    /// reassembled request can exceed the MTU), waiting for the next drain into `out`: the
    /// first `spill_n`, with their egress ports. Made with `frag_copy`, on first need.
    spill: Vec<PktBuf>,
    spill_port: [PortId; SPILL],
    /// Packets punted to the Linux mirror ([`Vr::set_punt_limit`]).
    punt_bucket: Bucket,
    /// The last IPv4 Identification the VR gave (a count from 0: the VR's own IPv4 packets
    /// are ICMP messages and fragments of echo replies; the tests pin it).
    ident: u16,
    /// IPv6 fragments the VR made (RFC 8200 §4.5), counting from a random start; their
    /// Identification is this count through a permutation keyed by `ident6_key`, so no two
    /// packets within 2^32 share one and none can be predicted from another (RFC 7739).
    ident6: u32,
    ident6_key: u64,
    /// A replica's link to its siblings' neighbor tables (see `share.rs`); `None` for a VR
    /// that is not replicated.
    share: Option<Box<NeighborShare>>,
}

/// How many fragments after the first a packet the VR makes may need: enough for an echo
/// reply as large as a buffer holds over any MTU of 576 bytes or more (RFC 791's datagram
/// every host accepts); below that, such a reply is dropped.
pub(crate) const SPILL: usize = 4;

/// When a VR first and last sent a transit frame, on the clock of the polls that sent them
/// (the worker's `now`: for a runtime, nanoseconds since its epoch), to the poll: a
/// migration's handoff gap is the source's `last` to the destination's `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    first: u64,
    last: u64,
}

impl Default for Sent {
    fn default() -> Sent {
        Sent { first: Sent::NEVER, last: Sent::NEVER }
    }
}

impl Sent {
    const NEVER: u64 = u64::MAX;

    #[inline]
    fn at(&mut self, now: u64) {
        if self.first == Sent::NEVER {
            self.first = now;
        }
        self.last = now;
    }

    /// The first poll that sent one; `None` before any.
    pub fn first(&self) -> Option<u64> {
        (self.first != Sent::NEVER).then_some(self.first)
    }

    /// The last poll that sent one; `None` before any.
    pub fn last(&self) -> Option<u64> {
        (self.last != Sent::NEVER).then_some(self.last)
    }
}

/// A change to a running VR, applied by its worker between two bursts ([`Vr::change`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VrChange {
    /// Set these adjacency slots (growing the table): before a FIB that uses them is published.
    Adjacencies(Vec<(NextHop, Adj)>),
    /// Set an interface's IP MTU.
    Mtu(IfaceId, u16),
    /// Take an interface up or down; down flushes its neighbors.
    Up(IfaceId, bool),
    /// Forget learned neighbors (of one interface, or all), dropping what waits on them.
    FlushNeighbors(Option<IfaceId>),
    /// List the neighbor table.
    Neighbors,
    /// Put back counters and learned neighbors (a restored or migrated VR; see `snap`).
    Restore(Box<RestoredState>),
}

/// What a [`VrChange`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VrAnswer {
    Done,
    /// Entries removed... packets that waited on them and were dropped.
    Flushed(u64),
    Neighbors(Vec<NeighborRow>),
    /// Neighbors a [`VrChange::Restore`] took.
    Restored(usize),
}

/// What pass 1 decided for one packet.
enum Ingress {
    Lookup4(u32),
    Lookup6(u128),
    Done(Fate),
}

impl Vr {
    /// Builds the VR with routes of its own: a [`RouteTable`] made from `cfg` whose writers
    /// are dropped, so its routes never change (tests, benchmarks, the demo). A VR whose
    /// routes change while it runs is built with [`Vr::with_routes`].
    pub fn new(cfg: &VrConfig) -> Result<Vr, BuildError> {
        Vr::with_routes(cfg, RouteTable::new(cfg)?.view())
    }

    /// Builds the VR from its config, forwarding with the FIBs and adjacencies of `view`
    /// (from the [`RouteTable`] its owner keeps, made from the same config).
    pub fn with_routes(cfg: &VrConfig, view: RouteView) -> Result<Vr, BuildError> {
        Vr::build(cfg, view)
    }

    /// Applies one change between two bursts (see [`VrChange`]).
    pub fn change(&mut self, ch: VrChange) -> Result<VrAnswer, BuildError> {
        let c = &mut *self;
        let name = c.name.clone();
        let err = move |m: String| BuildError(format!("vr {name}: {m}"));
        match ch {
            VrChange::Adjacencies(list) => {
                for (nh, a) in list {
                    let n = nh as usize;
                    if n >= c.adj.len() {
                        c.adj.resize(n + 1, Adj::None);
                        c.adj_hint.resize(n + 1, u32::MAX);
                        c.rewrite.resize(n + 1, Rewrite::default());
                    }
                    c.adj[n] = a;
                    c.adj_hint[n] = u32::MAX;
                    c.rewrite[n] = Rewrite::default();
                }
            }
            VrChange::Mtu(i, mtu) => {
                let Some(f) = c.ifaces.get_mut(i as usize) else {
                    return Err(err(format!("no interface {i}")));
                };
                check_mtu(f, mtu).map_err(|e| err(e.0))?;
                f.mtu = mtu;
                c.forget_rewrites();
            }
            VrChange::Up(i, up) => {
                let Some(f) = c.ifaces.get_mut(i as usize) else {
                    return Err(err(format!("no interface {i}")));
                };
                f.up = up;
                c.forget_rewrites();
                if !up {
                    c.flush_neighbors(Some(i), VrDrop::InterfaceDown);
                }
            }
            VrChange::FlushNeighbors(i) => {
                let dropped = c.flush_neighbors(i, VrDrop::NoNeighbor);
                return Ok(VrAnswer::Flushed(dropped));
            }
            VrChange::Neighbors => return Ok(VrAnswer::Neighbors(c.neigh.rows())),
            VrChange::Restore(st) => return Ok(VrAnswer::Restored(c.restore(*st))),
        }
        Ok(VrAnswer::Done)
    }

    /// Takes over `old`'s counters, and its neighbors when both have the same interfaces on
    /// the same segments (a VR rebuilt with a new config replacing the one that ran).
    pub fn inherit(&mut self, old: &mut Vr) {
        let (n, o) = (&mut *self, &mut *old);
        n.counters = o.counters;
        (n.ident, n.ident6, n.ident6_key) = (o.ident, o.ident6, o.ident6_key);
        let same = |a: &Iface, b: &Iface| (a.port, a.vlan, a.mac) == (b.port, b.vlan, b.mac);
        if n.ifaces.len() == o.ifaces.len()
            && n.ifaces.iter().zip(&o.ifaces).all(|(a, b)| same(a, b))
        {
            std::mem::swap(&mut n.neigh, &mut o.neigh);
            for (a, b) in n.ifaces.iter_mut().zip(&o.ifaces) {
                a.up = b.up;
            }
        }
    }

    /// Keeps `old`'s Linux mirrors (and punt limit) for the interfaces it has by the same
    /// name on the same port: a VR rebuilt with a new config goes on punting to them.
    pub(crate) fn carry_mirrors(&mut self, old: &Vr) {
        let (n, o) = (&mut *self, old);
        for f in &mut n.ifaces {
            if let Some(m) = o.ifaces.iter().find(|g| g.name == f.name && g.port == f.port) {
                f.mirror = f.mirror.or(m.mirror);
            }
        }
        if o.ifaces.iter().any(|f| f.mirror.is_some()) {
            n.punt_bucket.rate = o.punt_bucket.rate;
            n.punt_bucket.cap = o.punt_bucket.cap;
        }
    }

    /// The link of `port` went down or came back (the cell saw its status change): neighbors
    /// learned on the VR's interfaces there may be gone or have new MACs (a peer re-created),
    /// and entries that failed meanwhile would hold resolution back. They are forgotten, and
    /// what waited on them dropped (`interface_down`). Nothing happens if no interface is on it.
    pub(crate) fn link_changed(&mut self, port: PortId) {
        let c = &mut *self;
        for i in 0..c.ifaces.len() {
            if c.ifaces[i].port == port {
                c.flush_neighbors(Some(i as IfaceId), VrDrop::InterfaceDown);
            }
        }
    }

    /// Bounds what the VR punts to its Linux mirror: `per_sec` packets a second (token bucket
    /// rate; 0 punts nothing), `burst` deep. Beyond it, punts are dropped
    /// (`punt_rate_limited`).
    pub fn set_punt_limit(&mut self, per_sec: u32, burst: u32) {
        self.punt_bucket = Bucket::new(per_sec, burst);
    }

    /// Interface `iface`'s mirror port, if it has one.
    pub fn mirror(&self, iface: IfaceId) -> Option<PortId> {
        self.ifaces.get(iface as usize).and_then(|f| f.mirror)
    }

    /// Its interfaces' names, MTUs and whether they are up, in configuration order.
    pub fn interfaces(&self) -> Vec<(String, u16, bool)> {
        self.ifaces.iter().map(|f| (f.name.clone(), f.mtu, f.up)).collect()
    }

    /// The FIB generations (IPv4, IPv6) its last batch looked up in: a published update is in
    /// use once these reach the generation the publish returned.
    pub fn fib_generations_seen(&self) -> (u64, u64) {
        self.seen
    }

    /// How much of its neighbor table is used, and its size.
    pub fn neighbor_occupancy(&self) -> (usize, usize) {
        self.neigh.occupancy()
    }

    /// What next hop `nh` means.
    pub(crate) fn adj(&self, nh: NextHop) -> Adj {
        self.adj.get(nh as usize).copied().unwrap_or(Adj::None)
    }

    /// The VR's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its counters.
    pub fn counters(&self) -> &VrCounters {
        &self.counters
    }

    /// When it first and last sent a transit frame.
    pub fn sent(&self) -> Sent {
        self.sent
    }

    /// Adds what one transmit of its frames reported, at the poll's `now`.
    #[inline]
    pub(crate) fn count_tx(&mut self, t: &crate::counters::TxTally, now: u64) {
        if t.forwarded > 0 {
            self.sent.at(now);
        }
        self.counters.add(t);
    }

    /// Its neighbor table.
    pub fn neighbors(&self) -> Vec<NeighborRow> {
        self.neigh.rows()
    }

    /// Packets waiting for neighbor resolution.
    pub fn queued(&self) -> usize {
        self.neigh.queued()
    }

    /// Fragments held until the rest of their datagram (addressed to the VR) comes.
    pub fn reassembling(&self) -> usize {
        self.reasm.held()
    }

    /// The interfaces, in configuration order.
    pub(crate) fn ifaces(&self) -> &[Iface] {
        &self.ifaces
    }

    /// Runs the pipeline over `pkts[sel[..]]`, setting each packet's fate in `meta`.
    pub(crate) fn process(
        &mut self,
        cx: &mut Burst,
        pkts: &mut [PktBuf],
        meta: &mut [Meta],
        sel: &[u16],
    ) {
        let now = cx.now;
        let (mut n4, mut n6) = (0, 0);
        let mut bytes = 0;
        for &i in sel {
            let m = &mut meta[i as usize];
            bytes += pkts[i as usize].len() as u64;
            let s = &mut *cx.lookup;
            match self.ingress(&mut pkts[i as usize], m, now) {
                Ingress::Lookup4(a) => {
                    s.keys4[n4] = a;
                    s.at4[n4] = i;
                    n4 += 1;
                }
                Ingress::Lookup6(a) => {
                    s.keys6[n6] = a;
                    s.at6[n6] = i;
                    n6 += 1;
                }
                Ingress::Done(f) => m.fate = f,
            }
        }
        self.counters.rx_packets += sel.len() as u64;
        self.counters.rx_bytes += bytes;
        if n4 > 0 {
            let t = self.r4.cached();
            self.seen.0 = t.generation();
            let s = &mut *cx.lookup;
            t.lookup_batch(&s.keys4[..n4], &mut s.nh4[..n4]);
            for k in 0..n4 {
                let (i, nh) = (cx.lookup.at4[k] as usize, cx.lookup.nh4[k]);
                meta[i].fate = self.forward4(cx, &mut pkts[i], &meta[i], nh);
            }
        }
        if n6 > 0 {
            let t = self.r6.cached();
            self.seen.1 = t.generation();
            let s = &mut *cx.lookup;
            t.lookup_batch(&s.keys6[..n6], &mut s.nh6[..n6]);
            for k in 0..n6 {
                let (i, nh) = (cx.lookup.at6[k] as usize, cx.lookup.nh6[k]);
                meta[i].fate = self.forward6(cx, &mut pkts[i], &meta[i], nh);
            }
        }
        if self.spill_n > 0 || self.neigh.has_output() {
            self.drain(cx.out);
        }
    }

    /// Timers: neighbor retransmissions and failures. Cheap when nothing is pending.
    pub(crate) fn tick(&mut self, now: u64, out: &mut OutQueue) {
        self.expire_reassembly(now, out);
        self.learn_shared(now);
        let (transit, generated) = self.neigh.tick(now);
        self.counters.drops[VrDrop::NoNeighbor as usize] += transit;
        self.counters.generated_dropped += generated;
        if transit > 0 {
            self.answer_gave_up(now, out);
        }
        self.drain(out);
    }

    /// Moves due probes and resolved queues into `out`, as far as it has room.
    fn drain(&mut self, out: &mut OutQueue) {
        let c = &mut *self;
        if c.spill_n > 0 && out.batch.room() >= c.spill_n {
            for i in 0..c.spill_n {
                let Some(buf) = out.batch.spare_mut() else { break };
                std::mem::swap(buf, &mut c.spill[i]);
                out.batch.commit();
                out.dest.push((c.spill_port[i], false, out.vr));
            }
            c.spill_n = 0;
        }
        while let Some(p) = c.neigh.pop_probe() {
            if !out.emit(|buf| c.probe(buf, p.key, p.unicast)) && out.batch.room() == 0 {
                c.neigh.push_probe(p);
                break;
            }
        }
        while out.batch.room() > 0 {
            let Some(buf) = out.batch.spare_mut() else { break };
            let Some((mac, iface, transit)) = c.neigh.pop_ready(buf) else { break };
            l2::set_dst(buf, mac);
            out.batch.commit();
            out.dest.push((c.ifaces[iface as usize].port, transit, out.vr));
        }
    }

    /// Interfaces, routes by kind, neighbors and counters, for `show` and test failures.
    pub fn dump(&self) -> String {
        let c = self;
        let mut s = format!("vr {}\n", c.name);
        for (i, f) in c.ifaces.iter().enumerate() {
            let _ = writeln!(
                s,
                "  if{i} {} port {} vlan {:?} mac {} mtu {} v4 {:?} v6 {:?} ll {}",
                f.name, f.port, f.vlan, f.mac, f.mtu, f.v4, f.v6, f.ll
            );
        }
        let _ = writeln!(
            s,
            "  fib v4 {} v6 {} prefixes; adjacencies {}",
            c.r4.load().prefixes(),
            c.r6.load().prefixes(),
            c.adj.len()
        );
        for r in c.neigh.rows() {
            let _ = writeln!(
                s,
                "  neighbor if{} {} {:?} {:?} queued {}",
                r.iface, r.ip, r.mac, r.state, r.queued
            );
        }
        for (k, v) in c.counters.named() {
            if v != 0 {
                let _ = writeln!(s, "  {k} {v}");
            }
        }
        s
    }
}

impl Vr {
    fn build(cfg: &VrConfig, view: RouteView) -> Result<Vr, BuildError> {
        let err = |m: String| Err(BuildError(format!("vr {}: {m}", cfg.name)));
        let ifaces: Vec<Iface> = cfg
            .interfaces
            .iter()
            .map(|i| Iface {
                name: i.name.clone(),
                port: i.port,
                vlan: i.vlan,
                mac: i.mac,
                mtu: i.mtu,
                v4: i.ipv4.clone(),
                v6: i.ipv6.clone(),
                ll: link_local(i.mac),
                up: true,
                mirror: None,
            })
            .collect();
        for f in &ifaces {
            check_mtu(f, f.mtu).map_err(|m| BuildError(format!("vr {}: {}", cfg.name, m.0)))?;
        }
        if ifaces.len() > IfaceId::MAX as usize {
            return err(format!("{} interfaces, at most {}", ifaces.len(), IfaceId::MAX));
        }
        if view.glean.len() != ifaces.len() {
            return err(format!(
                "routes made for {} interfaces, the VR has {}",
                view.glean.len(),
                ifaces.len()
            ));
        }
        let mut neigh = NeighborTable::new(&cfg.limits, ifaces.len());
        for n in &cfg.neighbors {
            if n.iface as usize >= ifaces.len() {
                return err(format!(
                    "neighbor {} names interface {}, which does not exist",
                    n.ip, n.iface
                ));
            }
            if !neigh.add_static(NKey::from_ip(n.iface, n.ip), n.mac) {
                return err(format!(
                    "more static neighbors than the table holds ({})",
                    cfg.limits.neighbors
                ));
            }
        }
        let VrLimits { icmp_errors_per_sec, icmp_errors_burst, .. } = cfg.limits;
        let RouteView { adj, glean, r4, r6 } = view;
        Ok(Vr {
            name: cfg.name.clone(),
            r4,
            r6,
            adj_hint: vec![u32::MAX; adj.len()],
            glean,
            own: AddrSet::new(
                ifaces
                    .iter()
                    .flat_map(|f| {
                        let v4 = f.v4.iter().map(|n| NKey::v4(0, n.addr().into()).ip);
                        v4.chain(f.v6.iter().map(|n| u128::from(n.addr())))
                            .chain([u128::from(f.ll)])
                    })
                    .collect(),
            ),
            frag_copy: Vec::new(),
            rewrite: vec![Rewrite::default(); adj.len()],
            adj,
            ifaces,
            neigh,
            bucket: Bucket::new(icmp_errors_per_sec, icmp_errors_burst),
            reasm: reasm::Reassembler::new(),
            spill: Vec::new(),
            spill_port: [0; SPILL],
            spill_n: 0,
            sent: Sent::default(),
            punt_bucket: Bucket::new(DEFAULT_PUNT_PER_SEC, DEFAULT_PUNT_BURST),
            ident: 0,
            ident6: crate::seed::fresh() as u32,
            ident6_key: crate::seed::fresh(),
            seen: (0, 0),
            counters: VrCounters::default(),
            share: None,
        })
    }

    /// Forgets every cached L2 header (an interface's MTU or state changed).
    fn forget_rewrites(&mut self) {
        self.rewrite.iter_mut().for_each(|r| *r = Rewrite::default());
    }

    /// Forgets learned neighbors (of one interface, or all): transit packets that waited on
    /// them count as drops for `reason`, packets the VR made as `generated_dropped`. Returns
    /// how many packets were dropped.
    fn flush_neighbors(&mut self, iface: Option<IfaceId>, reason: VrDrop) -> u64 {
        let (t, g) = self.neigh.flush(iface);
        self.counters.drops[reason as usize] += t;
        self.counters.generated_dropped += g;
        self.forget_rewrites();
        t + g
    }

    /// Counts what the neighbor table dropped from entries it evicted to make room
    /// (`no_neighbor`: they were not answered in time).
    #[cold]
    fn count_evicted(&mut self) {
        let (t, g) = self.neigh.take_evicted();
        self.counters.drops[VrDrop::NoNeighbor as usize] += t;
        self.counters.generated_dropped += g;
    }

    /// Records what an ARP packet or neighbor discovery message said (see
    /// [`NeighborTable::learn`]), counting it and anything its new entry displaced.
    fn learn(&mut self, key: NKey, mac: MacAddr, how: neighbor::Learn, now: u64) {
        if self.neigh.learn(key, mac, how, now) {
            self.counters.neighbors_learned += 1;
        }
        if let Some(s) = &self.share {
            s.publish(share::Note { key, mac, how });
        }
        self.count_evicted();
    }

    #[inline]
    /// Sizes the fragmentation scratch and spill buffers the first time the VR fragments:
    /// once per VR, not per packet, so an empty VR stays small (most never fragment).
    #[cold]
    fn fragment_buffers(&mut self) {
        self.frag_copy.resize(ports::BUF_SIZE, 0);
        self.spill.resize_with(SPILL, PktBuf::new);
    }

    /// Sends the fragments after the first of a packet the VR made (held whole in
    /// `frag_copy`), from the spill buffers: one for each `step` of the `payload` bytes past
    /// the first `step`. `write(whole, at, n, l3)` writes the fragment carrying payload bytes
    /// `at..at + n` at `l3`, which is `hlen + n` bytes long. IPv4 and IPv6 differ only there.
    fn spill_fragments(
        &mut self,
        (step, payload, hlen): (usize, usize, usize),
        nh: NextHop,
        key: NKey,
        now: u64,
        write: impl Fn(&[u8], usize, usize, &mut [u8]),
    ) {
        let mut spill = std::mem::take(&mut self.spill);
        let hdr = l2::ETH_LEN;
        let mut at = step;
        while at < payload {
            let n = step.min(payload - at);
            let o = &mut spill[self.spill_n];
            o.reset();
            o.set_len(hdr + hlen + n);
            write(&self.frag_copy, at, n, &mut o.frame_mut()[hdr..]);
            self.counters.fragments_sent += 1;
            if let Fate::Tx { port, .. } = self.output(o, hdr, nh, key, false, now) {
                self.spill_port[self.spill_n] = port;
                self.spill_n += 1;
            }
            at += n;
        }
        self.spill = spill;
    }

    fn drop(&mut self, r: VrDrop) -> Fate {
        self.counters.drops[r as usize] += 1;
        Fate::Done
    }

    #[inline]
    fn ingress(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Ingress {
        if !self.ifaces[m.iface as usize].up {
            return Ingress::Done(self.drop(VrDrop::InterfaceDown));
        }
        match m.ethertype {
            wire::ethertype::IPV4 => self.ingress4(buf, m, now),
            wire::ethertype::IPV6 => self.ingress6(buf, m, now),
            wire::ethertype::ARP => Ingress::Done(self.arp_in(buf, m, now)),
            _ => Ingress::Done(self.drop(VrDrop::UnknownEthertype)),
        }
    }

    /// The shared tail of every IP packet leaving the VR: L2 header for the egress interface,
    /// then the neighbor's MAC — or a place in the neighbor's queue.
    #[inline]
    fn output(
        &mut self,
        buf: &mut PktBuf,
        l3: usize,
        adj: NextHop,
        key: NKey,
        transit: bool,
        now: u64,
    ) -> Fate {
        let f = &self.ifaces[key.iface as usize];
        if !f.up {
            return self.drop_out(VrDrop::InterfaceDown, transit);
        }
        let (port, vlan, mac) = (f.port, f.vlan, f.mac);
        let et = if key.is_v4() { wire::ethertype::IPV4 } else { wire::ethertype::IPV6 };
        // The source's lane of the solicitation budget, asked for only by a new resolution.
        let lane = || {
            let f = buf.frame();
            let v4 = f.get(l3).is_some_and(|b| b >> 4 == 4);
            let (at, n) = if v4 { (l3 + 12, 4) } else { (l3 + 8, 8) };
            f.get(at..at + n).map_or(0, neighbor::source_lane)
        };
        let (res, e) = self.neigh.resolve_hinted(key, self.adj_hint[adj as usize], now, lane);
        self.adj_hint[adj as usize] = e;
        match res {
            Resolve::Mac(dst) => {
                l2::write(buf, l3, vlan, dst, mac, et);
                if let (Adj::Via { .. }, Some(until)) =
                    (self.adj[adj as usize], self.neigh.usable_until(e))
                {
                    let f = buf.frame();
                    let len = if vlan.is_some() { l2::ETH_VLAN_LEN } else { l2::ETH_LEN };
                    let mut hdr = [0; l2::ETH_VLAN_LEN];
                    hdr[..len].copy_from_slice(&f[..len]);
                    let mtu = self.ifaces[key.iface as usize].mtu;
                    let epoch = self.neigh.epoch();
                    self.rewrite[adj as usize] =
                        Rewrite { epoch, until, port, mtu, len: len as u8, hdr };
                }
                Fate::Tx { port, transit }
            }
            Resolve::Queue(e) => {
                // A new entry may have taken an older one's place.
                self.count_evicted();
                l2::write(buf, l3, vlan, MacAddr::default(), mac, et);
                if self.neigh.enqueue(e, buf, transit) {
                    self.counters.queued += 1;
                    Fate::Done
                } else {
                    self.drop_out(VrDrop::NeighborQueueFull, transit)
                }
            }
            Resolve::Fail(VrDrop::NoNeighbor) if transit => {
                self.counters.drops[VrDrop::NoNeighbor as usize] += 1;
                self.host_unreachable(buf, l3, key.iface, now)
            }
            Resolve::Fail(r) => self.drop_out(r, transit),
        }
    }

    /// Answers the transit packets whose next hop gave up resolving (their drops are counted)
    /// with host unreachable, as far as `out` has room; the rest go unanswered.
    #[cold]
    fn answer_gave_up(&mut self, now: u64, out: &mut OutQueue) {
        while let Some(buf) = out.batch.spare_mut() {
            let Some(iface) = self.neigh.pop_gave_up(buf) else { break };
            // Queued packets carry the L2 header of the interface they were to leave by.
            let l3 = if self.ifaces[iface as usize].vlan.is_some() {
                l2::ETH_VLAN_LEN
            } else {
                l2::ETH_LEN
            };
            if let Fate::Tx { port, transit } = self.host_unreachable(buf, l3, iface, now) {
                out.batch.commit();
                out.dest.push((port, transit, out.vr));
            }
        }
        self.counters.icmp_errors_suppressed += self.neigh.discard_gave_up();
    }

    /// RFC 1812 §4.3.3.1: a transit packet (its drop counted) that was to leave by `via` but
    /// whose next hop does not answer ARP / neighbor solicitation is answered with host
    /// unreachable (ICMPv6: address unreachable), within the ICMP error rate limit. Its TTL was
    /// decremented on the way out; restored, so the error quotes it as it arrived. The error's
    /// source is an address of the interface it leaves by (RFC 1812 §4.3.2.4).
    #[cold]
    #[inline(never)]
    fn host_unreachable(&mut self, buf: &mut PktBuf, l3: usize, via: IfaceId, now: u64) -> Fate {
        let f = buf.frame_mut();
        let Some(&b0) = f.get(l3) else { return Fate::Done };
        let iface = |i: Option<IfaceId>| i.unwrap_or(via);
        if b0 >> 4 == 4 {
            f[l3 + 8] = f[l3 + 8].wrapping_add(1);
            wire::ipv4::Packet::new_unchecked(&mut f[l3..]).fill_checksum();
            let src = u32::from_be_bytes([f[l3 + 12], f[l3 + 13], f[l3 + 14], f[l3 + 15]]);
            let back = self.adj_iface(self.r4.load().lookup(src));
            let m = Meta { iface: iface(back), l3: l3 as u16, ..Meta::default() };
            let (t, c) = (wire::icmpv4::DEST_UNREACHABLE, wire::icmpv4::HOST_UNREACHABLE);
            self.icmp4_reply(buf, &m, t, c, 0, now)
        } else {
            f[l3 + 7] = f[l3 + 7].wrapping_add(1);
            let mut a = [0; 16];
            a.copy_from_slice(&f[l3 + 8..l3 + 24]);
            let back = self.adj_iface(self.r6.load().lookup(u128::from_be_bytes(a)));
            let m = Meta { iface: iface(back), l3: l3 as u16, ..Meta::default() };
            let (t, c) = (wire::icmpv6::DEST_UNREACHABLE, wire::icmpv6::ADDR_UNREACHABLE);
            self.icmp6_reply(buf, &m, t, c, 0, now)
        }
    }

    /// Drops the fragments of datagrams whose reassembly time is up, and answers the source
    /// of each whose first fragment came with Time Exceeded, fragment reassembly time exceeded
    /// (RFC 1122 §3.3.2, RFC 8200 §4.5), quoting that fragment, as `out` has room and the
    /// ICMP rate limit allows.
    #[inline]
    fn expire_reassembly(&mut self, now: u64, out: &mut OutQueue) {
        let n = self.reasm.expire(now);
        if n > 0 {
            self.counters.drops[VrDrop::ReassemblyTimeout as usize] += n;
            self.report_reassembly_timeouts(now, out);
        }
    }

    #[cold]
    #[inline(never)]
    fn report_reassembly_timeouts(&mut self, now: u64, out: &mut OutQueue) {
        let l3 = l2::ETH_LEN;
        while let Some(buf) = out.batch.spare_mut() {
            let Some(v6) = self.reasm.pop_report(buf, l3) else { break };
            let f = buf.frame();
            let back = if v6 {
                let mut a = [0; 16];
                a.copy_from_slice(&f[l3 + 8..l3 + 24]);
                self.adj_iface(self.r6.load().lookup(u128::from_be_bytes(a)))
            } else {
                let src = u32::from_be_bytes([f[l3 + 12], f[l3 + 13], f[l3 + 14], f[l3 + 15]]);
                self.adj_iface(self.r4.load().lookup(src))
            };
            let Some(iface) = back else {
                // No route back to the source (a link-local one: which link is not kept).
                self.counters.icmp_errors_suppressed += 1;
                continue;
            };
            let m = Meta { iface, l3: l3 as u16, ..Meta::default() };
            let fate = if v6 {
                self.icmp6_reply(buf, &m, wire::icmpv6::TIME_EXCEEDED, 1, 0, now)
            } else {
                let c = wire::icmpv4::REASSEMBLY_TIME_EXCEEDED;
                self.icmp4_reply(buf, &m, wire::icmpv4::TIME_EXCEEDED, c, 0, now)
            };
            if let Fate::Tx { port, transit } = fate {
                out.batch.commit();
                out.dest.push((port, transit, out.vr));
            }
        }
        self.reasm.clear_reports();
    }

    /// Acts on what the reassembler made of a fragment addressed to the VR: held, or dropped
    /// (with what its datagram held): `Some(Fate::Done)`. Or it was the last one: the whole
    /// datagram is now in `buf`, the fragments merged into it counted as delivered, and `None`
    /// tells the caller to hand it to the local handler like any other datagram.
    #[cold]
    fn reassembled(
        &mut self,
        r: Result<Option<usize>, reasm::Failed>,
        buf: &mut PktBuf,
        l3: usize,
    ) -> Option<Fate> {
        let done = match r {
            Ok(None) => return Some(Fate::Done),
            Ok(Some(i)) => self.reasm.finish(i, buf, l3),
            Err(e) => Err(e),
        };
        match done {
            Ok(merged) => {
                self.counters.local_in += merged as u64;
                None
            }
            Err((reason, held)) => {
                self.counters.drops[reason as usize] += held as u64 + 1;
                Some(Fate::Done)
            }
        }
    }

    /// The interface next hop `nh` leaves by, if it leaves at all.
    fn adj_iface(&self, nh: NextHop) -> Option<IfaceId> {
        match self.adj.get(nh as usize) {
            Some(Adj::Glean(i)) | Some(Adj::Via { iface: i, .. }) => Some(*i),
            Some(Adj::Multi(p)) => self.adj_iface(p.buckets()[0]),
            _ => None,
        }
    }

    /// Drops a packet on its way out: a transit packet counts by reason, one the VR made
    /// counts as `generated_dropped` (the packet that caused it was already counted).
    fn drop_out(&mut self, r: VrDrop, transit: bool) -> Fate {
        if transit {
            self.drop(r)
        } else {
            self.counters.generated_dropped += 1;
            Fate::Done
        }
    }

    /// May the VR send one more ICMP error now?
    fn icmp_allowed(&mut self, now: u64) -> bool {
        if self.bucket.take(now) {
            true
        } else {
            self.counters.icmp_errors_suppressed += 1;
            false
        }
    }

    /// Hands a packet for the VR itself to the receiving interface's Linux mirror, unchanged
    /// but for its VLAN tag (the mirror interface is untagged), within the punt budget.
    /// `None` when the interface has no mirror: the caller then does what a VR without a
    /// control plane does.
    pub(super) fn punt(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Option<Fate> {
        let port = self.ifaces[m.iface as usize].mirror?;
        if !self.punt_bucket.take(now) {
            return Some(self.drop(VrDrop::PuntRateLimited));
        }
        let l3 = m.l3 as usize;
        if l3 != l2::ETH_LEN {
            let f = buf.frame();
            let (dst, src) = (MacAddr::from_bytes(f), MacAddr::from_bytes(&f[6..12]));
            l2::write(buf, l3, None, dst, src, m.ethertype);
        }
        // Punted packets are delivered to the VR: they count in `local_in` too.
        self.counters.local_in += 1;
        self.counters.punted += 1;
        Some(Fate::Tx { port, transit: false })
    }

    /// A frame the mirror's kernel sent out of interface `iface`'s mirror: given the
    /// interface's VLAN tag and MAC as source, it leaves by the interface's port. `None` (and
    /// counted) when the interface is down or the frame is shorter than an Ethernet header.
    pub(crate) fn inject(&mut self, buf: &mut PktBuf, iface: IfaceId) -> Option<PortId> {
        let Some(h) = l2::parse(buf.frame()) else {
            self.counters.generated_dropped += 1;
            return None;
        };
        let f = &self.ifaces[iface as usize];
        if !f.up {
            self.counters.generated_dropped += 1;
            return None;
        }
        let (port, vlan, mac) = (f.port, f.vlan, f.mac);
        l2::write(buf, h.l3, vlan, h.dst, mac, h.ethertype);
        self.counters.injected += 1;
        Some(port)
    }

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    fn next_ident6(&mut self) -> u32 {
        self.ident6 = self.ident6.wrapping_add(1);
        crate::seed::permute32(self.ident6, self.ident6_key)
    }
}

/// The VR's own addresses, checked against every packet's source. A 64-bit hash bitmap
/// answers "no" for almost every packet in three instructions; only a hit (or a ~1/16 false
/// positive with a handful of addresses) compares against the list.
pub(crate) struct AddrSet {
    bloom: u64,
    list: Box<[u128]>,
}

impl AddrSet {
    fn new(mut v: Vec<u128>) -> AddrSet {
        v.sort_unstable();
        v.dedup();
        let bloom = v.iter().fold(0, |b, &a| b | 1 << Self::bit(a));
        AddrSet { bloom, list: v.into_boxed_slice() }
    }

    #[inline(always)]
    fn bit(a: u128) -> u32 {
        let x = (a as u64) ^ (a >> 64) as u64;
        (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as u32
    }

    /// Whether `a` (IPv4-mapped for IPv4) is one of the addresses.
    #[inline(always)]
    pub fn contains(&self, a: u128) -> bool {
        self.bloom & 1 << Self::bit(a) != 0 && self.list.binary_search(&a).is_ok()
    }
}

#[cfg(test)]
mod addr_set_tests {
    use super::AddrSet;

    #[test]
    fn members_and_strangers() {
        let members: Vec<u128> = (0..40u128).map(|i| i * 0x1_0000_0001 + 7).collect();
        let set = AddrSet::new(members.clone());
        assert!(members.iter().all(|&a| set.contains(a)));
        assert!((1000..5000u128).all(|a| !set.contains(a * 0x1_0000_0001 + 3)));
        assert!(!AddrSet::new(Vec::new()).contains(0));
    }
}

/// Whether `mtu` suits interface `f`: at least 1280 with IPv6, at most what a buffer holds.
fn check_mtu(f: &Iface, mtu: u16) -> Result<(), BuildError> {
    let floor = if f.v6.is_empty() { MIN_MTU } else { IPV6_MIN_MTU };
    if (floor..=MAX_MTU).contains(&mtu) {
        Ok(())
    } else {
        Err(BuildError(format!("interface {} has MTU {mtu}, outside {floor}..={MAX_MTU}", f.name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_is_eui64() {
        let ll = link_local("02:00:00:00:01:00".parse().unwrap());
        assert_eq!(ll, "fe80::ff:fe00:100".parse::<Ipv6Addr>().unwrap());
    }
}
