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
mod ip4;
mod ip6;
mod neighbor;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fib::{Fib, FibReader, NextHop};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use ports::{Batch, PktBuf, MAX_BURST};
use wire::MacAddr;

use crate::config::{
    IfaceId, PortId, RouteTarget, VrConfig, VrLimits, IPV6_MIN_MTU, MAX_MTU, MIN_MTU,
};
use crate::counters::{Drop, VrCounters};
use crate::l2;
use neighbor::{NKey, NeighborTable, Resolve};
pub use neighbor::{NeighborRow, NeighborState};

/// Where a packet goes when the VR is done with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Nothing to send: dropped, consumed or queued (and counted).
    Done,
    /// Send out of `port`. `transit` marks forwarded traffic, as opposed to packets the VR made.
    Tx { port: PortId, transit: bool },
}

/// Per-packet state from classification to egress.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    pub vr: u16,
    pub iface: IfaceId,
    pub l3: u16,
    pub ethertype: u16,
    pub fate: Fate,
}

impl Default for Meta {
    fn default() -> Self {
        Meta { vr: 0, iface: 0, l3: 0, ethertype: 0, fate: Fate::Done }
    }
}

/// What a next-hop index (a FIB leaf) means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Adj {
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
}

/// A gateway adjacency's ready-made L2 header (VPP's adjacency rewrite). The fast path copies
/// it instead of asking the neighbor table; it is trusted only while the table's epoch is the
/// one it was made in and the neighbor's reachable time lasts. Epoch 0 never matches.
#[derive(Clone, Copy, Default)]
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
}

impl Iface {
    fn has_v4(&self, a: Ipv4Addr) -> bool {
        self.v4.iter().any(|n| n.addr() == a)
    }
    fn has_v6(&self, a: Ipv6Addr) -> bool {
        a == self.ll || self.v6.iter().any(|n| n.addr() == a)
    }
}

/// Packets VRs make beyond those they received, with their egress: one per worker, lent to
/// each VR while it runs, and emptied by the engine after it.
pub(crate) struct OutQueue {
    pub batch: Batch,
    /// Per packet: egress port, transit or made by the VR, and which VR.
    pub dest: Vec<(PortId, bool, u16)>,
    /// The VR now running (set by the engine).
    pub vr: u16,
}

/// Lets a VR have the engine transmit `out` before the burst is done (fragmentation can make
/// more packets than `out` holds); the engine counts the outcome on the VRs concerned.
pub(crate) type Flush<'a> = dyn FnMut(&mut OutQueue) + 'a;

impl OutQueue {
    pub fn new(cap: usize) -> OutQueue {
        OutQueue { batch: Batch::new(cap), dest: Vec::with_capacity(cap), vr: 0 }
    }

    /// Builds a packet in the next spare slot with `f`; keeps it if `f` says to send it.
    /// False if there is no spare slot or `f` decided not to send.
    fn emit(&mut self, f: impl FnOnce(&mut PktBuf) -> Fate) -> bool {
        let Some(buf) = self.batch.spare_mut() else { return false };
        match f(buf) {
            Fate::Tx { port, transit } => {
                self.batch.commit();
                self.dest.push((port, transit, self.vr));
                true
            }
            Fate::Done => false,
        }
    }

    pub fn clear(&mut self) {
        self.batch.clear();
        self.dest.clear();
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

/// ICMP error token bucket: `rate` per second, `burst` deep, in nanotokens.
struct Bucket {
    rate: u64,
    cap: u64,
    tokens: u64,
    last: u64,
}

const TOKEN: u64 = 1_000_000_000;

impl Bucket {
    fn new(rate: u32, burst: u32) -> Bucket {
        let cap = burst as u64 * TOKEN;
        Bucket { rate: rate as u64, cap, tokens: cap, last: 0 }
    }

    fn take(&mut self, now: u64) -> bool {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        self.tokens = self.tokens.saturating_add(dt.saturating_mul(self.rate)).min(self.cap);
        if self.rate > 0 && self.tokens >= TOKEN {
            self.tokens -= TOKEN;
            true
        } else {
            false
        }
    }
}

/// Everything but the output queue and lookup scratch, so the pipeline can borrow the parts
/// apart.
pub(crate) struct Core {
    pub name: String,
    pub ifaces: Vec<Iface>,
    adj: Vec<Adj>,
    /// Per adjacency: the neighbor entry it last resolved to.
    adj_hint: Vec<u32>,
    /// Per interface: the adjacency of its connected subnets (the destination is the neighbor).
    glean: Vec<NextHop>,
    /// The VR's own addresses (IPv4-mapped for IPv4): a packet arriving from one is spoofed.
    own: AddrSet,
    /// Scratch for the original of a packet being fragmented.
    frag_copy: Box<[u8; ports::BUF_SIZE]>,
    /// Per adjacency: its cached L2 header (gateway adjacencies only).
    rewrite: Vec<Rewrite>,
    fib4: Fib<u32>,
    fib6: Fib<u128>,
    r4: FibReader<u32>,
    r6: FibReader<u128>,
    neigh: NeighborTable,
    bucket: Bucket,
    ident: u16,
    pub counters: VrCounters,
}

/// Lookup scratch for one batch: one per worker, lent to each VR while it runs (1024 VRs
/// would otherwise carry 7 KiB each).
pub(crate) struct Lookup {
    keys4: [u32; MAX_BURST],
    keys6: [u128; MAX_BURST],
    nh4: [NextHop; MAX_BURST],
    nh6: [NextHop; MAX_BURST],
    at4: [u16; MAX_BURST],
    at6: [u16; MAX_BURST],
}

impl Lookup {
    pub fn new() -> Box<Lookup> {
        Box::new(Lookup {
            keys4: [0; MAX_BURST],
            keys6: [0; MAX_BURST],
            nh4: [0; MAX_BURST],
            nh6: [0; MAX_BURST],
            at4: [0; MAX_BURST],
            at6: [0; MAX_BURST],
        })
    }
}

/// A virtual router.
pub struct Vr {
    pub(crate) core: Core,
}

/// What pass 1 decided for one packet.
enum Ingress {
    Lookup4(u32),
    Lookup6(u128),
    Done(Fate),
}

impl Vr {
    /// Builds the VR's tables from its config.
    pub fn new(cfg: &VrConfig) -> Result<Vr, BuildError> {
        Ok(Vr { core: Core::new(cfg)? })
    }

    /// The VR's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Its counters.
    pub fn counters(&self) -> &VrCounters {
        &self.core.counters
    }

    /// Its neighbor table.
    pub fn neighbors(&self) -> Vec<NeighborRow> {
        self.core.neigh.rows()
    }

    /// Packets waiting for neighbor resolution.
    pub fn queued(&self) -> usize {
        self.core.neigh.queued()
    }

    /// The interfaces, in configuration order.
    pub(crate) fn ifaces(&self) -> &[Iface] {
        &self.core.ifaces
    }

    /// Runs the pipeline over `pkts[sel[..]]`, setting each packet's fate in `meta`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn process(
        &mut self,
        pkts: &mut [PktBuf],
        sel: &[u16],
        meta: &mut [Meta],
        now: u64,
        s: &mut Lookup,
        out: &mut OutQueue,
        flush: &mut Flush,
    ) {
        let (mut n4, mut n6) = (0, 0);
        let mut bytes = 0;
        for &i in sel {
            let m = &mut meta[i as usize];
            bytes += pkts[i as usize].len() as u64;
            match self.core.ingress(&mut pkts[i as usize], m, now) {
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
        self.core.counters.rx_packets += sel.len() as u64;
        self.core.counters.rx_bytes += bytes;
        if n4 > 0 {
            self.core.r4.load().lookup_batch(&s.keys4[..n4], &mut s.nh4[..n4]);
            for k in 0..n4 {
                let i = s.at4[k] as usize;
                meta[i].fate =
                    self.core.forward4(&mut pkts[i], &meta[i], s.nh4[k], now, out, flush);
            }
        }
        if n6 > 0 {
            self.core.r6.load().lookup_batch(&s.keys6[..n6], &mut s.nh6[..n6]);
            for k in 0..n6 {
                let i = s.at6[k] as usize;
                meta[i].fate = self.core.forward6(&mut pkts[i], &meta[i], s.nh6[k], now);
            }
        }
        self.drain(out);
    }

    /// Timers: neighbor retransmissions and failures. Cheap when nothing is pending.
    pub(crate) fn tick(&mut self, now: u64, out: &mut OutQueue) {
        let (transit, generated) = self.core.neigh.tick(now);
        self.core.counters.drops[Drop::NoNeighbor as usize] += transit;
        self.core.counters.generated_dropped += generated;
        self.drain(out);
    }

    /// Moves due probes and resolved queues into `out`, as far as it has room.
    fn drain(&mut self, out: &mut OutQueue) {
        let c = &mut self.core;
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
        let c = &self.core;
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
            "  routes v4 {} v6 {}; adjacencies {}",
            c.fib4.rib().len(),
            c.fib6.rib().len(),
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

/// The EUI-64 link-local address of a MAC (RFC 4291 appendix A).
pub(crate) fn link_local(mac: MacAddr) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 2,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}

impl Core {
    fn new(cfg: &VrConfig) -> Result<Core, BuildError> {
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
            })
            .collect();
        for f in &ifaces {
            let floor = if f.v6.is_empty() { MIN_MTU } else { IPV6_MIN_MTU };
            if !(floor..=MAX_MTU).contains(&f.mtu) {
                return err(format!(
                    "interface {} has MTU {}, outside {floor}..={MAX_MTU}",
                    f.name, f.mtu
                ));
            }
        }
        if ifaces.len() > IfaceId::MAX as usize {
            return err(format!("{} interfaces, at most {}", ifaces.len(), IfaceId::MAX));
        }
        let mut adj = vec![Adj::None];
        let mut adj_index: HashMap<Adj, NextHop> = HashMap::new();
        let mut nh_of = |a: Adj| -> Result<NextHop, BuildError> {
            if let Some(&n) = adj_index.get(&a) {
                return Ok(n);
            }
            let n = NextHop::try_from(adj.len())
                .map_err(|_| BuildError(format!("vr {}: more than 65535 next hops", cfg.name)))?;
            adj.push(a);
            adj_index.insert(a, n);
            Ok(n)
        };
        // Precedence: static routes, then connected subnets, then the VR's own and broadcast
        // addresses (a later insert of the same prefix wins).
        let mut v4: BTreeMap<(u32, u8), NextHop> = BTreeMap::new();
        let mut v6: BTreeMap<(u128, u8), NextHop> = BTreeMap::new();
        for r in &cfg.routes {
            let a = match r.target {
                RouteTarget::Blackhole => Adj::Blackhole,
                RouteTarget::Iface(i) => Adj::Glean(i),
                RouteTarget::Via { gateway, iface } => {
                    let i = match iface.or_else(|| connected_iface(&ifaces, gateway)) {
                        Some(i) => i,
                        None => {
                            return err(format!(
                                "gateway {gateway} of {} is on no connected subnet",
                                r.prefix
                            ))
                        }
                    };
                    Adj::Via { iface: i, gw: NKey::from_ip(i, gateway).ip }
                }
            };
            if let Adj::Glean(i) | Adj::Via { iface: i, .. } = a {
                if i as usize >= ifaces.len() {
                    return err(format!(
                        "route {} names interface {i}, which does not exist",
                        r.prefix
                    ));
                }
            }
            let nh = nh_of(a)?;
            match r.prefix {
                IpNet::V4(p) => v4.insert((p.network().into(), p.prefix_len()), nh),
                IpNet::V6(p) => v6.insert((p.network().into(), p.prefix_len()), nh),
            };
        }
        let mut glean_of = Vec::with_capacity(ifaces.len());
        for (i, f) in ifaces.iter().enumerate() {
            let glean = nh_of(Adj::Glean(i as IfaceId))?;
            glean_of.push(glean);
            for n in &f.v4 {
                v4.insert((n.network().into(), n.prefix_len()), glean);
            }
            for n in &f.v6 {
                v6.insert((n.network().into(), n.prefix_len()), glean);
            }
        }
        let local = nh_of(Adj::Local)?;
        for f in &ifaces {
            for n in &f.v4 {
                if n.prefix_len() <= 30 {
                    v4.insert((n.broadcast().into(), 32), nh_of(Adj::Broadcast)?);
                }
            }
            for n in &f.v4 {
                v4.insert((n.addr().into(), 32), local);
            }
            for a in f.v6.iter().map(|n| n.addr()).chain([f.ll]) {
                v6.insert((a.into(), 128), local);
            }
        }
        let mut neigh = NeighborTable::new(&cfg.limits);
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
        let fib4 = Fib::from_routes(v4.into_iter().map(|((a, l), nh)| (a, l, nh)));
        let fib6 = Fib::from_routes(v6.into_iter().map(|((a, l), nh)| (a, l, nh)));
        let VrLimits { icmp_errors_per_sec, icmp_errors_burst, .. } = cfg.limits;
        Ok(Core {
            name: cfg.name.clone(),
            r4: fib4.reader(),
            r6: fib6.reader(),
            fib4,
            fib6,
            adj_hint: vec![u32::MAX; adj.len()],
            glean: glean_of,
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
            frag_copy: Box::new([0; ports::BUF_SIZE]),
            rewrite: vec![Rewrite::default(); adj.len()],
            adj,
            ifaces,
            neigh,
            bucket: Bucket::new(icmp_errors_per_sec, icmp_errors_burst),
            ident: 0,
            counters: VrCounters::default(),
        })
    }

    #[inline]
    fn drop(&mut self, r: Drop) -> Fate {
        self.counters.drops[r as usize] += 1;
        Fate::Done
    }

    #[inline]
    fn ingress(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Ingress {
        let l3 = m.l3 as usize;
        match m.ethertype {
            wire::ethertype::IPV4 => self.ingress4(buf, l3),
            wire::ethertype::IPV6 => self.ingress6(buf, m, now),
            wire::ethertype::ARP => Ingress::Done(self.arp_in(buf, m, now)),
            _ => Ingress::Done(self.drop(Drop::UnknownEthertype)),
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
        let (port, vlan, mac) = (f.port, f.vlan, f.mac);
        let et = if key.is_v4() { wire::ethertype::IPV4 } else { wire::ethertype::IPV6 };
        let (res, e) = self.neigh.resolve_hinted(key, self.adj_hint[adj as usize], now);
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
                l2::write(buf, l3, vlan, MacAddr::default(), mac, et);
                if self.neigh.enqueue(e, buf, transit) {
                    self.counters.queued += 1;
                    Fate::Done
                } else {
                    self.drop_out(Drop::NeighborQueueFull, transit)
                }
            }
            Resolve::Fail(r) => self.drop_out(r, transit),
        }
    }

    /// Drops a packet on its way out: a transit packet counts by reason, one the VR made
    /// counts as `generated_dropped` (the packet that caused it was already counted).
    fn drop_out(&mut self, r: Drop, transit: bool) -> Fate {
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

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
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

/// The interface whose connected subnet holds `gw`.
fn connected_iface(ifaces: &[Iface], gw: IpAddr) -> Option<IfaceId> {
    ifaces
        .iter()
        .position(|f| match gw {
            IpAddr::V4(a) => f.v4.iter().any(|n| n.contains(&a)),
            IpAddr::V6(a) => f.v6.iter().any(|n| n.contains(&a)),
        })
        .map(|i| i as IfaceId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_is_eui64() {
        let ll = link_local("02:00:00:00:01:00".parse().unwrap());
        assert_eq!(ll, "fe80::ff:fe00:100".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn bucket_rate_and_burst() {
        let mut b = Bucket::new(10, 2);
        assert!(b.take(0) && b.take(0));
        assert!(!b.take(0));
        assert!(!b.take(50_000_000), "half a token after 50 ms");
        assert!(b.take(100_000_000));
        assert!(b.take(10 * TOKEN) && b.take(10 * TOKEN) && !b.take(10 * TOKEN), "capped at burst");
        assert!(!Bucket::new(0, 5).take(0), "rate 0 disables");
    }
}
