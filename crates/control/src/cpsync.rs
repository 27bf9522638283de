//! Route sync from a VR's Linux control-plane mirror into the VR: one thread per VR with a
//! `control_plane`, off the workers, follows the mirror namespace's kernel routes
//! ([`crate::rtsync::RouteSync`]) and turns them into route operations of source `kernel`,
//! which the [`crate::Node`] applies through the same path as the API's (`route_ops`).
//!
//! Contract: only table main (254) routes that the kernel did not make for an address
//! (protocol other than `kernel`, 2) are synced — the VR has its connected and local routes
//! from its own interfaces. A next hop's interface must be one of the VR's (the mirror taps
//! carry their names); a route through anything else (`lo`, a dummy) is left out, and so is
//! one the VR refuses (a gateway of the wrong family, off-link): both are counted. Blackhole
//! routes become blackholes, unreachable and prohibit routes reject routes (the VR answers
//! with ICMP destination unreachable). An ECMP route becomes a multipath route with every
//! next hop and its weight (each flow on one of them). After an overrun the listener re-dumps
//! and the thread replaces the source's routes wholesale (mark and sweep), so the VR never
//! silently diverges from the namespace.
//!
//! Stale routes (a VR that arrived by migration, see `docs/control-plane.md`): the `kernel`
//! routes it brought are marked stale when its sync starts. A `Replace` (the first dump of a
//! mirror whose restarted daemons have not learned anything yet) keeps a stale route it does
//! not list instead of sweeping it; a route the mirror's kernel reports for a stale prefix
//! replaces it and clears the mark; when the stale time runs out, the routes still stale are
//! deleted (counted as expired). So the VR forwards on what it brought until its control plane
//! has re-learned it, and no longer than the graceful-restart time.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dataplane::config::{IfaceId, RouteConfig, RouteTarget, VrConfig};
use dataplane::{Forward, RouteOp, RouteSource};
use ipnet::IpNet;
use tracing::{info, warn};

use crate::rtsync::{KernelNextHop, KernelRoute, KernelRouteKind, RouteSync, SyncEvent};

/// Table main.
const RT_TABLE_MAIN: u32 = 254;
/// Routes the kernel makes for addresses (connected, local).
const RTPROT_KERNEL: u8 = 2;
/// Receive buffer of the listener's socket: a full BGP table arrives in bursts.
const RCVBUF: usize = 64 << 20;
/// Batches of operations waiting for the node; the listener blocks when they are not taken
/// (and the kernel socket then overruns, which a re-dump repairs).
const QUEUE: usize = 256;
/// How long the thread naps when nothing waits.
const NAP: Duration = Duration::from_millis(5);

/// Maps kernel routes to route operations, remembering which prefixes the VR holds from this
/// source.
pub struct Mapper {
    ifaces: HashMap<String, IfaceId>,
    known: HashSet<IpNet>,
    /// Prefixes the VR holds from before this sync started, not yet re-learned (a subset of
    /// `known`).
    stale: HashSet<IpNet>,
    /// Routes left out: through an interface that is not the VR's.
    pub skipped: u64,
    /// Stale routes deleted because the stale time ran out before they were re-learned.
    pub expired: u64,
}

impl Mapper {
    /// A mapper for VR `cfg`, holding nothing yet.
    pub fn new(cfg: &VrConfig) -> Mapper {
        let ifaces = cfg
            .interfaces
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i as IfaceId))
            .collect();
        Mapper { ifaces, known: HashSet::new(), stale: HashSet::new(), skipped: 0, expired: 0 }
    }

    /// Marks `prefixes` (the VR's `kernel` routes when this sync starts) stale: held until
    /// re-learned or swept (see the module doc).
    pub fn mark_stale(&mut self, prefixes: impl IntoIterator<Item = IpNet>) {
        for p in prefixes {
            let p = p.trunc();
            self.known.insert(p);
            self.stale.insert(p);
        }
    }

    /// Routes still stale.
    pub fn stale(&self) -> usize {
        self.stale.len()
    }

    /// The stale time ran out: deletes for every route still stale, which are forgotten.
    pub fn sweep(&mut self) -> Vec<RouteOp> {
        let mut gone: Vec<IpNet> = self.stale.drain().collect();
        gone.sort_unstable();
        self.expired += gone.len() as u64;
        gone.iter()
            .filter(|p| self.known.remove(p))
            .map(|&prefix| RouteOp::Delete { prefix, source: RouteSource::Kernel })
            .collect()
    }

    /// The operation that sets the VR's route for kernel route `r`, if it has one (see the
    /// module doc).
    fn route(&mut self, r: &KernelRoute) -> Option<RouteOp> {
        if r.table != RT_TABLE_MAIN || r.protocol == RTPROT_KERNEL {
            return None;
        }
        let (prefix, source) = (r.prefix.trunc(), RouteSource::Kernel);
        let forward = match &r.kind {
            KernelRouteKind::Unicast(hops) => {
                let target = |h: &KernelNextHop| {
                    let &iface = self.ifaces.get(&h.ifname)?;
                    Some(match h.gateway {
                        Some(gateway) => RouteTarget::Via { gateway, iface: Some(iface) },
                        None => RouteTarget::Iface(iface),
                    })
                };
                // One path, the common case, is a plain route: no list to build.
                let op = match &hops[..] {
                    [h] => target(h)
                        .map(|target| RouteOp::Replace(RouteConfig { prefix, target, source })),
                    _ => hops
                        .iter()
                        .map(|h| Some((target(h)?, h.weight.max(1))))
                        .collect::<Option<Vec<_>>>()
                        .map(|paths| RouteOp::Set {
                            prefix,
                            source,
                            forward: Forward::Paths(paths),
                        }),
                };
                // A next hop on an interface the VR does not have.
                self.skipped += u64::from(op.is_none());
                return op;
            }
            KernelRouteKind::Blackhole => {
                let target = RouteTarget::Blackhole;
                return Some(RouteOp::Replace(RouteConfig { prefix, target, source }));
            }
            KernelRouteKind::Unreachable => Forward::Unreachable,
            KernelRouteKind::Prohibit => Forward::Prohibit,
        };
        Some(RouteOp::Set { prefix, source, forward })
    }

    /// The operations that bring the VR from what it holds to what `events` say, one per
    /// prefix touched (a prefix added then deleted in one batch is one delete, or nothing).
    pub fn ops(&mut self, events: Vec<SyncEvent>) -> Vec<RouteOp> {
        // (prefix, what the batch last said of it), in the batch's order; sorted stably by
        // prefix below, the last of each prefix's run wins.
        let mut want: Vec<(IpNet, Option<RouteOp>)> = Vec::with_capacity(events.len());
        for ev in events {
            match ev {
                SyncEvent::Add(r) if r.table == RT_TABLE_MAIN => {
                    let p = r.prefix.trunc();
                    want.push((p, self.route(&r)));
                }
                SyncEvent::Add(_) => {}
                SyncEvent::Del(p, RT_TABLE_MAIN) => want.push((p.trunc(), None)),
                SyncEvent::Del(..) => {}
                SyncEvent::Replace(all) => {
                    want.clear();
                    // What the mirror no longer has goes, except what is stale: a restarted
                    // daemon has not learned it yet.
                    want.extend(self.known.difference(&self.stale).map(|p| (*p, None)));
                    for r in all.iter().filter(|r| r.table == RT_TABLE_MAIN) {
                        if let Some(op) = self.route(r) {
                            want.push((r.prefix.trunc(), Some(op)));
                        }
                    }
                }
            }
        }
        want.sort_by_key(|(p, _)| *p);
        let mut ops = Vec::with_capacity(want.len());
        let mut want = want.into_iter().peekable();
        while let Some((p, w)) = want.next() {
            if want.peek().is_some_and(|(next, _)| *next == p) {
                continue;
            }
            // Whatever the mirror said about a stale prefix, it is the control plane's now.
            if !self.stale.is_empty() {
                self.stale.remove(&p);
            }
            match w {
                Some(op) => {
                    self.known.insert(p);
                    ops.push(op);
                }
                None => {
                    if self.known.remove(&p) {
                        ops.push(RouteOp::Delete { prefix: p, source: RouteSource::Kernel });
                    }
                }
            }
        }
        ops
    }
}

/// Counters of one VR's sync, shared with its thread.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Route operations the listener produced.
    pub ops: AtomicU64,
    /// Routes left out (an interface that is not the VR's).
    pub skipped: AtomicU64,
    /// Listener overruns (each followed by a re-dump).
    pub overruns: AtomicU64,
    /// Operations the VR refused (counted by the node).
    pub refused: AtomicU64,
    /// Routes held stale now (brought by a migration, not yet re-learned).
    pub stale: AtomicU64,
    /// Stale routes deleted when the stale time ran out.
    pub stale_expired: AtomicU64,
}

/// One VR's sync thread and what it sends.
pub struct CpSync {
    pub vr: String,
    pub rx: Receiver<Vec<RouteOp>>,
    pub stats: Arc<SyncStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CpSync {
    /// Starts following namespace `netns` for VR `cfg`.
    pub fn start(cfg: &VrConfig, netns: &str) -> std::io::Result<CpSync> {
        CpSync::start_stale(cfg, netns, Vec::new(), Duration::ZERO)
    }

    /// Starts following namespace `netns` for VR `cfg`, which holds `stale` `kernel` routes
    /// from before (a migration's): they stay until re-learned, for at most `stale_for`.
    pub fn start_stale(
        cfg: &VrConfig,
        netns: &str,
        stale: Vec<IpNet>,
        stale_for: Duration,
    ) -> std::io::Result<CpSync> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(SyncStats::default());
        let mut mapper = Mapper::new(cfg);
        mapper.mark_stale(stale);
        stats.stale.store(mapper.stale() as u64, Ordering::Relaxed);
        let deadline = (mapper.stale() > 0).then(|| Instant::now() + stale_for);
        if deadline.is_some() {
            let (stale, secs) = (mapper.stale(), stale_for.as_secs());
            info!(vr = cfg.name, stale, secs, "kernel routes held stale until re-learned");
        }
        let (vr, ns) = (cfg.name.clone(), netns.to_string());
        let (st, ss) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name(format!("rtsync-{}", cfg.name))
            .spawn(move || follow(&vr, &ns, mapper, deadline, &tx, &st, &ss))?;
        Ok(CpSync { vr: cfg.name.clone(), rx, stats, stop, thread: Some(thread) })
    }
}

impl Drop for CpSync {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Unblock a send waiting for room.
        while self.rx.try_recv().is_ok() {}
        if let Some(t) = self.thread.take() {
            while !t.is_finished() {
                while self.rx.try_recv().is_ok() {}
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = t.join();
        }
    }
}

/// The thread: open the listener (retrying while the namespace is not ready), then forward
/// what it reports until told to stop.
fn follow(
    vr: &str,
    netns: &str,
    mut mapper: Mapper,
    mut stale_until: Option<Instant>,
    tx: &SyncSender<Vec<RouteOp>>,
    stop: &AtomicBool,
    stats: &SyncStats,
) {
    let mut events = Vec::new();
    // The stale time runs whether or not the mirror's listener opens.
    let mut sweep = |mapper: &mut Mapper| -> Vec<RouteOp> {
        match stale_until {
            Some(t) if Instant::now() >= t => {
                stale_until = None;
                let ops = mapper.sweep();
                if !ops.is_empty() {
                    warn!(
                        vr,
                        expired = ops.len(),
                        "stale kernel routes not re-learned in time: deleted"
                    );
                }
                stats.stale_expired.store(mapper.expired, Ordering::Relaxed);
                ops
            }
            _ => Vec::new(),
        }
    };
    'open: while !stop.load(Ordering::Relaxed) {
        let mut rs = match RouteSync::open(netns, RCVBUF) {
            Ok(rs) => rs,
            Err(e) => {
                warn!(vr, netns, error = %e, "route sync cannot start; retrying");
                let ops = sweep(&mut mapper);
                stats.stale.store(mapper.stale() as u64, Ordering::Relaxed);
                if !ops.is_empty() && !send(ops, tx, stop, stats) {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        info!(vr, netns, "route sync following the control plane's kernel routes");
        while !stop.load(Ordering::Relaxed) {
            events.clear();
            if let Err(e) = rs.poll(&mut events) {
                warn!(vr, netns, error = %e, "route sync failed; reopening (a full re-dump follows)");
                std::thread::sleep(Duration::from_millis(100));
                continue 'open;
            }
            stats.overruns.store(rs.overruns(), Ordering::Relaxed);
            let mut ops = sweep(&mut mapper);
            if events.is_empty() && ops.is_empty() {
                std::thread::sleep(NAP);
                continue;
            }
            if !events.is_empty() {
                ops.extend(mapper.ops(std::mem::take(&mut events)));
            }
            stats.skipped.store(mapper.skipped, Ordering::Relaxed);
            stats.stale.store(mapper.stale() as u64, Ordering::Relaxed);
            if !ops.is_empty() && !send(ops, tx, stop, stats) {
                return;
            }
        }
    }
}

/// Hands a batch to the node, waiting while its queue is full; false when the sync is to end.
fn send(
    batch: Vec<RouteOp>,
    tx: &SyncSender<Vec<RouteOp>>,
    stop: &AtomicBool,
    stats: &SyncStats,
) -> bool {
    stats.ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
    let mut batch = batch;
    loop {
        match tx.try_send(batch) {
            Ok(()) => return true,
            Err(std::sync::mpsc::TrySendError::Full(b)) => {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
                batch = b;
                std::thread::sleep(NAP);
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::config::IfaceConfig;

    fn cfg() -> VrConfig {
        let iface = |name: &str| IfaceConfig {
            name: name.into(),
            port: 0,
            vlan: None,
            mac: "02:00:00:00:00:01".parse().unwrap(),
            mtu: 1500,
            ipv4: vec![],
            ipv6: vec![],
        };
        VrConfig {
            name: "r".into(),
            interfaces: vec![iface("e0"), iface("e1")],
            routes: vec![],
            neighbors: vec![],
            limits: Default::default(),
        }
    }

    fn kr(p: &str, gw: Option<&str>, dev: &str, proto: u8) -> KernelRoute {
        KernelRoute {
            prefix: p.parse().unwrap(),
            table: 254,
            kind: KernelRouteKind::Unicast(vec![KernelNextHop {
                gateway: gw.map(|g| g.parse().unwrap()),
                ifname: dev.into(),
                weight: 1,
            }]),
            protocol: proto,
        }
    }

    fn replace(p: &str, gw: &str, iface: u16) -> RouteOp {
        RouteOp::Replace(RouteConfig {
            prefix: p.parse().unwrap(),
            target: RouteTarget::Via { gateway: gw.parse().unwrap(), iface: Some(iface) },
            source: RouteSource::Kernel,
        })
    }

    fn delete(p: &str) -> RouteOp {
        RouteOp::Delete { prefix: p.parse().unwrap(), source: RouteSource::Kernel }
    }

    #[test]
    fn events_become_one_operation_per_prefix() {
        let mut m = Mapper::new(&cfg());
        let ops = m.ops(vec![SyncEvent::Replace(vec![
            kr("10.1.0.0/16", Some("10.0.0.2"), "e0", 12),
            kr("10.0.0.0/24", None, "e0", RTPROT_KERNEL),
            kr("10.2.0.0/16", Some("10.0.0.3"), "lo", 12),
            KernelRoute { table: 255, ..kr("10.3.0.0/16", Some("10.0.0.2"), "e0", 12) },
            KernelRoute { kind: KernelRouteKind::Unreachable, ..kr("192.0.2.0/24", None, "e0", 4) },
        ])]);
        let unreachable = RouteOp::Set {
            prefix: "192.0.2.0/24".parse().unwrap(),
            source: RouteSource::Kernel,
            forward: Forward::Unreachable,
        };
        assert_eq!(ops, vec![replace("10.1.0.0/16", "10.0.0.2", 0), unreachable]);
        assert_eq!(m.skipped, 1);
        // Added and withdrawn in one batch: nothing; a known one withdrawn: a delete.
        let ops = m.ops(vec![
            SyncEvent::Add(kr("10.9.0.0/16", Some("10.0.1.2"), "e1", 186)),
            SyncEvent::Del("10.9.0.0/16".parse().unwrap(), 254),
            SyncEvent::Del("10.1.0.0/16".parse().unwrap(), 254),
            SyncEvent::Del("10.7.0.0/16".parse().unwrap(), 254),
        ]);
        assert_eq!(ops, vec![delete("10.1.0.0/16")]);
        // ECMP: every next hop with its weight, on the VR's interfaces.
        let mut ecmp = kr("10.6.0.0/16", Some("10.0.0.2"), "e0", 186);
        let KernelRouteKind::Unicast(hops) = &mut ecmp.kind else { unreachable!() };
        hops.push(KernelNextHop {
            gateway: Some("10.0.1.2".parse().unwrap()),
            ifname: "e1".into(),
            weight: 3,
        });
        let via = |g: &str, i| RouteTarget::Via { gateway: g.parse().unwrap(), iface: Some(i) };
        let paths = Forward::Paths(vec![(via("10.0.0.2", 0), 1), (via("10.0.1.2", 1), 3)]);
        let ops = m.ops(vec![SyncEvent::Add(ecmp.clone())]);
        let p: IpNet = "10.6.0.0/16".parse().unwrap();
        assert_eq!(
            ops,
            vec![RouteOp::Set { prefix: p, source: RouteSource::Kernel, forward: paths }]
        );
        // One next hop off the VR: the route is left out (and counted).
        let KernelRouteKind::Unicast(hops) = &mut ecmp.kind else { unreachable!() };
        hops[1].ifname = "lo".into();
        assert_eq!(m.ops(vec![SyncEvent::Add(ecmp)]), vec![delete("10.6.0.0/16")]);
        assert_eq!(m.skipped, 2);
        // A replace after an overrun: what is gone is swept, what is there is (re)set.
        m.ops(vec![SyncEvent::Add(kr("10.5.0.0/16", Some("10.0.1.2"), "e1", 186))]);
        let ops = m.ops(vec![SyncEvent::Replace(vec![kr(
            "2001:db8:9::/48",
            Some("fe80::1"),
            "e1",
            186,
        )])]);
        assert_eq!(
            ops,
            vec![
                delete("10.5.0.0/16"),
                delete("192.0.2.0/24"),
                replace("2001:db8:9::/48", "fe80::1", 1)
            ]
        );
    }

    #[test]
    fn the_last_word_on_a_prefix_in_a_batch_wins() {
        let mut m = Mapper::new(&cfg());
        let p = |s: &str| -> IpNet { s.parse().unwrap() };
        m.ops(vec![SyncEvent::Add(kr("10.4.0.0/16", Some("10.0.0.2"), "e0", 186))]);
        let ops = m.ops(vec![
            SyncEvent::Add(kr("10.2.0.0/16", Some("10.0.0.2"), "e0", 186)),
            SyncEvent::Del(p("10.2.0.0/16"), 254),
            SyncEvent::Add(kr("10.1.0.0/16", Some("10.0.0.2"), "e0", 186)),
            SyncEvent::Add(kr("10.2.0.0/16", Some("10.0.1.7"), "e1", 186)),
            SyncEvent::Add(kr("10.1.0.0/16", Some("10.0.0.3"), "e0", 186)),
            SyncEvent::Del(p("10.4.0.0/16"), 254),
            SyncEvent::Add(kr("10.4.0.0/16", Some("10.0.0.5"), "e0", 186)),
        ]);
        assert_eq!(
            ops,
            vec![
                replace("10.1.0.0/16", "10.0.0.3", 0),
                replace("10.2.0.0/16", "10.0.1.7", 1),
                replace("10.4.0.0/16", "10.0.0.5", 0),
            ]
        );
        // What came before a replace in the batch is forgotten; what the VR held and the
        // replace lacks goes.
        let ops = m.ops(vec![
            SyncEvent::Add(kr("10.9.0.0/16", Some("10.0.0.2"), "e0", 186)),
            SyncEvent::Replace(vec![kr("10.2.0.0/16", Some("10.0.1.7"), "e1", 186)]),
            SyncEvent::Add(kr("10.3.0.0/16", Some("10.0.0.2"), "e0", 186)),
        ]);
        assert_eq!(
            ops,
            vec![
                delete("10.1.0.0/16"),
                replace("10.2.0.0/16", "10.0.1.7", 1),
                replace("10.3.0.0/16", "10.0.0.2", 0),
                delete("10.4.0.0/16"),
            ]
        );
    }

    #[test]
    fn stale_routes_survive_the_first_replace_until_relearned_or_swept() {
        let mut m = Mapper::new(&cfg());
        let p = |s: &str| -> IpNet { s.parse().unwrap() };
        m.mark_stale([p("10.1.0.0/16"), p("10.2.0.0/16"), p("10.3.0.0/16")]);
        assert_eq!(m.stale(), 3);
        // The restarted mirror's first dump has one of them and a route of its own: the
        // stale ones it lacks stay, the one it has is the mirror's now.
        let ops = m.ops(vec![SyncEvent::Replace(vec![
            kr("10.1.0.0/16", Some("10.0.0.9"), "e0", 186),
            kr("10.8.0.0/16", Some("10.0.0.9"), "e0", 186),
        ])]);
        assert_eq!(
            ops,
            vec![replace("10.1.0.0/16", "10.0.0.9", 0), replace("10.8.0.0/16", "10.0.0.9", 0)]
        );
        assert_eq!(m.stale(), 2);
        // Re-learned later, one by one.
        let ops = m.ops(vec![SyncEvent::Add(kr("10.2.0.0/16", Some("10.0.1.9"), "e1", 186))]);
        assert_eq!(ops, vec![replace("10.2.0.0/16", "10.0.1.9", 1)]);
        assert_eq!(m.stale(), 1);
        // A second replace (an overrun) still keeps what is stale, and sweeps what is not.
        let ops =
            m.ops(vec![SyncEvent::Replace(vec![kr("10.2.0.0/16", Some("10.0.1.9"), "e1", 186)])]);
        assert_eq!(
            ops,
            vec![
                delete("10.1.0.0/16"),
                replace("10.2.0.0/16", "10.0.1.9", 1),
                delete("10.8.0.0/16")
            ]
        );
        assert_eq!(m.stale(), 1);
        // The stale time runs out: what was never re-learned goes, once.
        assert_eq!(m.sweep(), vec![delete("10.3.0.0/16")]);
        assert_eq!((m.stale(), m.expired), (0, 1));
        assert_eq!(m.sweep(), vec![]);
        // Forgotten: a later withdrawal of it is nothing.
        assert_eq!(m.ops(vec![SyncEvent::Del(p("10.3.0.0/16"), 254)]), vec![]);
        // A stale prefix the mirror withdraws (or that it has through no VR interface) goes
        // at once and is no longer stale.
        m.mark_stale([p("10.4.0.0/16"), p("10.5.0.0/16")]);
        let ops = m.ops(vec![
            SyncEvent::Del(p("10.4.0.0/16"), 254),
            SyncEvent::Add(kr("10.5.0.0/16", Some("10.0.0.9"), "lo", 186)),
        ]);
        assert_eq!(ops, vec![delete("10.4.0.0/16"), delete("10.5.0.0/16")]);
        assert_eq!(m.stale(), 0);
    }
}
