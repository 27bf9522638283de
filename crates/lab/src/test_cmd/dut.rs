//! The routeplex DUT: a topology's VRs on `mem` or `memif` ports (routeplex the memif server,
//! the tester an in-process client), optionally behind the topology's switch, the engine
//! polled on its own thread. Where that thread and the tester's ran is read back from /proc
//! while the DUT runs ([`crate::sys::threads`]) and reported when it stops.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use control::Topology;
use dataplane::config::VrConfig;
use dataplane::msr::{Change, LbPort, MsrControl, MsrShared};
use dataplane::replica::RssPort;
use dataplane::{Engine, PortDrop, VrDrop};
use serde_json::{json, Value};
use tester::{Dut, DutCounters, DutPorts, DutReport, DutSnapshot, PortSet, Refusal, Target};
use wire::MacAddr;

use crate::lab::{self, Rng, Table};
use crate::sys;
use crate::sys::threads::{Sampler, Watch};
use crate::Family;
use ports::memif::{MemifOptions, MemifPort};
use ports::Port;

/// The generator's MAC: the static neighbor on every embedded topology's first interface.
const GEN_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);

/// Per VR, interface indices (those that receive test traffic, or those that send it on).
type Ifaces = Vec<Vec<usize>>;

/// Counters read from the worker between trials.
#[derive(Default)]
pub(super) struct Shared {
    want: AtomicBool,
    pub(super) stop: AtomicBool,
    snap: Mutex<Option<DutSnapshot>>,
}

/// VRs of a topology as the DUT. Every VR's first interface faces the generator and its
/// second the sink; all first interfaces share one `mem` port and all second ones another.
/// Each VR gets the route table, via the static neighbors of its second interface.
///
/// [`RouteplexDut::with_roles`] generalises this to several generator-side (ingress) and
/// sink-side (egress) ports: every VR interface on an ingress port is a target, and routes go
/// via the static neighbors of the VR's interfaces on egress ports.
pub struct RouteplexDut {
    name: String,
    topo: Topology,
    vrs: Vec<VrConfig>,
    table: Table,
    family: Family,
    /// Generator-side ports, then sink-side ports, by name.
    ingress_ports: Vec<String>,
    egress_ports: Vec<String>,
    /// Per VR, its interfaces (indices) that receive test traffic.
    ingress_ifaces: Vec<Vec<usize>>,
    /// Per target of the last `targets`, its port (index into `ingress_ports`).
    target_ports: Vec<usize>,
    pin: Option<usize>,
    rng: Rng,
    shared: Arc<Shared>,
    /// The engine, built ahead of `start` by [`RouteplexDut::build_now`].
    lab: Option<lab::Lab>,
    worker: Option<JoinHandle<Engine>>,
    engine_report: Option<Value>,
    /// A topology with `workers: N > 1`: its cells, built ahead of `start`, then the
    /// multi-worker runtime running them (control's, as `routeplex run` does).
    host: Option<control::build::Host>,
    runtime: Option<control::runtime::Runtime>,
    /// Topology indices of the ingress ports.
    in_ports: Vec<usize>,
    /// Whether the multi-worker runtime pins its workers (false: the OS places them).
    pin_workers: bool,
    /// An MSR's load balancer on the ingress port, once started: its shared state, read for
    /// the report.
    msr: Option<Arc<MsrShared>>,
    /// The VR's interfaces are on the topology's switch, not on the tester's ports.
    behind_switch: bool,
    /// Reads where the threads run, from `start` to `stop`.
    sampler: Option<Sampler>,
}

impl RouteplexDut {
    /// A DUT from `topo` (its VRs) with `table` added to every VR; the worker pinned to `pin`.
    pub fn new(
        name: &str,
        topo: Topology,
        table: Table,
        family: Family,
        pin: Option<usize>,
    ) -> Result<RouteplexDut> {
        if topo.vrs.is_empty() {
            bail!("{}: no VRs to test", topo.source);
        }
        let port_of = |vr: &VrConfig, i: usize| -> Result<String> {
            let f = vr.interfaces.get(i).with_context(|| {
                format!(
                    "{}: vr {} needs two interfaces (generator side, sink side)",
                    topo.source, vr.name
                )
            })?;
            Ok(topo.ports[f.port as usize].name.clone())
        };
        let ports = (port_of(&topo.vrs[0], 0)?, port_of(&topo.vrs[0], 1)?);
        if ports.0 == ports.1 {
            bail!("{}: the generator and the sink need different ports", topo.source);
        }
        for vr in &topo.vrs {
            if (port_of(vr, 0)?, port_of(vr, 1)?) != ports {
                bail!(
                    "{}: vr {}: every VR's first interface must be on port {} and its second on {}",
                    topo.source,
                    vr.name,
                    ports.0,
                    ports.1
                );
            }
        }
        let only_first = vec![vec![0]; topo.vrs.len()];
        let ifaces = (Some(only_first), None);
        Self::build(name, topo, table, family, pin, vec![ports.0], vec![ports.1], ifaces)
    }

    /// A DUT from `topo` whose VRs have interface 0 (receiving test traffic) and interface 1
    /// (sending it on) on the topology's switch, which has the `ingress` and `egress` ports
    /// as members: generator → switch → VR → switch → sink.
    pub fn behind_switch(
        name: &str,
        topo: Topology,
        table: Table,
        family: Family,
        pin: Option<usize>,
        ingress: Vec<String>,
        egress: Vec<String>,
    ) -> Result<RouteplexDut> {
        let n = topo.vrs.len();
        let ifaces = (Some(vec![vec![0]; n]), Some(vec![vec![1]; n]));
        let mut d = Self::build(name, topo, table, family, pin, ingress, egress, ifaces)?;
        d.behind_switch = true;
        Ok(d)
    }

    /// A DUT from `topo` whose VRs receive test traffic on `ingress` ports (every VR interface
    /// on one is a target) and send it out of `egress` ports, routing `table` via the static
    /// neighbors of their interfaces there.
    pub fn with_roles(
        name: &str,
        topo: Topology,
        table: Table,
        family: Family,
        pin: Option<usize>,
        ingress: Vec<String>,
        egress: Vec<String>,
    ) -> Result<RouteplexDut> {
        Self::build(name, topo, table, family, pin, ingress, egress, (None, None))
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        name: &str,
        topo: Topology,
        table: Table,
        family: Family,
        pin: Option<usize>,
        ingress_ports: Vec<String>,
        egress_ports: Vec<String>,
        ifaces: (Option<Ifaces>, Option<Ifaces>),
    ) -> Result<RouteplexDut> {
        let (ingress_ifaces, egress_ifaces) = ifaces;
        if topo.vrs.is_empty() {
            bail!("{}: no VRs to test", topo.source);
        }
        if ingress_ports.is_empty() || egress_ports.is_empty() {
            bail!("{}: the DUT needs at least one ingress and one egress port", topo.source);
        }
        let index = |p: &String| -> Result<usize> {
            let i = topo.port_index(p).with_context(|| format!("{}: no port {p}", topo.source))?;
            if !matches!(
                topo.ports[i].kind,
                control::PortKind::Mem { .. } | control::PortKind::Memif(_)
            ) {
                bail!("{}: port {p} is neither a mem nor a memif port", topo.source);
            }
            Ok(i)
        };
        let in_ports = ingress_ports.iter().map(index).collect::<Result<Vec<_>>>()?;
        let out_ports = egress_ports.iter().map(index).collect::<Result<Vec<_>>>()?;
        if in_ports.iter().any(|p| out_ports.contains(p)) {
            bail!("{}: the generator and the sink need different ports", topo.source);
        }
        let mut vrs = topo.vrs.clone();
        let mut ingress = Vec::new();
        for (k, vr) in vrs.iter_mut().enumerate() {
            let on = |ports: &[usize]| -> Vec<usize> {
                (0..vr.interfaces.len())
                    .filter(|&i| ports.contains(&(vr.interfaces[i].port as usize)))
                    .collect()
            };
            let ins = match &ingress_ifaces {
                Some(v) => v[k].clone(),
                None => on(&in_ports),
            };
            let outs = match &egress_ifaces {
                Some(v) => v[k].clone(),
                None => on(&out_ports),
            };
            if ins.is_empty() || outs.is_empty() {
                bail!(
                    "{}: vr {} needs an interface on an ingress port ({}) and one on an egress port ({})",
                    topo.source,
                    vr.name,
                    ingress_ports.join(", "),
                    egress_ports.join(", ")
                );
            }
            let (g4, g6) = gateways(vr, &outs);
            let (g4, g6) = match family {
                Family::Ipv4 => (g4, Vec::new()),
                Family::Ipv6 => (Vec::new(), g6),
            };
            if g4.is_empty() && g6.is_empty() {
                bail!(
                    "{}: vr {} has no static {} neighbor on its sink-side interfaces to route via",
                    topo.source,
                    vr.name,
                    family_name(family)
                );
            }
            for &i in &ins {
                let f = &vr.interfaces[i];
                if (family == Family::Ipv4 && f.ipv4.is_empty())
                    || (family == Family::Ipv6 && f.ipv6.is_empty())
                {
                    bail!(
                        "{}: vr {}: its interface {} has no {} address",
                        topo.source,
                        vr.name,
                        f.name,
                        family_name(family)
                    );
                }
            }
            table.add_routes(vr, &g4, &g6);
            ingress.push(ins);
        }
        Ok(RouteplexDut {
            name: name.to_string(),
            topo,
            vrs,
            table,
            family,
            ingress_ports,
            egress_ports,
            ingress_ifaces: ingress,
            target_ports: Vec::new(),
            pin,
            rng: Rng::new(0x7e57),
            shared: Arc::new(Shared::default()),
            lab: None,
            worker: None,
            engine_report: None,
            host: None,
            runtime: None,
            in_ports,
            pin_workers: true,
            msr: None,
            behind_switch: false,
            sampler: None,
        })
    }

    /// Builds the engine now rather than in `start` (so its memory can be measured).
    pub fn build_now(&mut self) -> Result<()> {
        if self.workers() > 1 {
            if self.host.is_none() && self.runtime.is_none() {
                self.host =
                    Some(control::build::host(&self.topo, Some(&self.vrs), ports::MAX_BURST)?);
            }
            return Ok(());
        }
        if self.lab.is_none() {
            self.lab = Some(lab::build(&self.topo, &self.vrs)?);
        }
        Ok(())
    }

    /// The VRs, as configured (routes included).
    pub fn vrs(&self) -> &[VrConfig] {
        &self.vrs
    }

    /// Whether a multi-worker DUT pins its workers to the topology's CPUs (the default) or
    /// leaves their placement to the OS.
    pub fn set_pin_workers(&mut self, pin: bool) {
        self.pin_workers = pin;
    }
}

fn family_name(f: Family) -> &'static str {
    match f {
        Family::Ipv4 => "IPv4",
        Family::Ipv6 => "IPv6",
    }
}

/// A VR's static neighbors on interfaces `ifaces`, by family.
fn gateways(vr: &VrConfig, ifaces: &[usize]) -> (Vec<Ipv4Addr>, Vec<Ipv6Addr>) {
    let (mut g4, mut g6) = (Vec::new(), Vec::new());
    for n in vr.neighbors.iter().filter(|n| ifaces.contains(&(n.iface as usize))) {
        match n.ip {
            IpAddr::V4(a) => g4.push(a),
            IpAddr::V6(a) => g6.push(a),
        }
    }
    (g4, g6)
}

impl RouteplexDut {
    /// The topology's workers (1 unless it fixes more).
    fn workers(&self) -> usize {
        self.topo.workers.count().unwrap_or(1)
    }

    /// `mem` or `memif`: the kind of the tester's ports.
    fn backend(&self) -> &'static str {
        let memif = self
            .in_ports
            .first()
            .is_some_and(|&p| matches!(self.topo.ports[p].kind, control::PortKind::Memif(_)));
        if memif {
            "memif (the DUT the server, the tester an in-process client)"
        } else {
            "mem"
        }
    }

    /// Names of the ingress ports.
    fn in_names(&self) -> Vec<String> {
        self.in_ports.iter().map(|&p| self.topo.ports[p].name.clone()).collect()
    }

    /// Starts the multi-worker runtime over the host's cells; hands over the outside ports.
    fn start_runtime(&mut self) -> Result<PortSet, tester::Error> {
        let err = |e: crate::Error| tester::Error::new(format!("{e:#}"));
        self.build_now().map_err(err)?;
        let mut host = self.host.take().expect("built");
        let mut ports: Vec<Box<dyn ports::Port>> = Vec::new();
        let n_in = self.ingress_ports.len();
        let names: Vec<String> =
            self.ingress_ports.iter().chain(&self.egress_ports).cloned().collect();
        for (k, p) in names.iter().enumerate() {
            ports.push(self.outside(&mut host, p, k < n_in)?);
        }
        let sinks = (self.ingress_ports.len()..ports.len()).collect();
        let mut o = control::runtime::Options::for_topology(&self.topo);
        if self.pin_workers {
            o.pin = Some(sys::pin as fn(usize) -> bool);
            if let Some(first) = self.pin {
                o.cpus = worker_cpus(first, o.cpus.len(), sys::online_cpus());
            }
        }
        let workers = o.cpus.len();
        let rt = control::runtime::Runtime::start(host.cells, o)
            .map_err(|e| tester::Error::new(format!("cannot start the DUT's workers: {e}")))?;
        self.runtime = Some(rt);
        self.sampler = Some(runtime_sampler(workers));
        Ok(PortSet { ports, sinks, refusal: Refusal::Loss })
    }
}

/// The CPUs of a multi-worker DUT's workers: one each from `first`, the DUT's CPU, upwards.
/// The topology's own rule (worker i on CPU i) would put worker 0 on the tester's CPU, where
/// the generator and that worker, both spinning, would take turns (seen on 16 CPUs: 2 VRs on 2
/// workers forwarded 2.0 Mpps against 13.0 for one). Wraps only on a machine with too few CPUs,
/// whose points the runner skips before they get here.
fn worker_cpus(first: usize, workers: usize, online: usize) -> Vec<Option<usize>> {
    (0..workers).map(|i| Some((first + i) % online.max(1))).collect()
}

impl RouteplexDut {
    /// The generator's or the sink's end of port `name`: the outside end of a plain `mem`
    /// port; for a replicated VR's port, its queues behind the flow hash a NIC's RSS applies
    /// or, on an MSR's ingress port, behind the MSR's load balancer.
    fn outside(
        &mut self,
        host: &mut control::build::Host,
        name: &str,
        ingress: bool,
    ) -> Result<Box<dyn ports::Port>, tester::Error> {
        let i = self.topo.port_index(name).ok_or_else(|| tester::Error::new(name))?;
        if host.outside.get(i).is_some_and(Option::is_some) {
            let end = host
                .take_outside(&self.topo, name)
                .map_err(|e| tester::Error::new(e.to_string()))?;
            return Ok(Box::new(end));
        }
        let queues = host.queues.get_mut(i).and_then(Option::take).ok_or_else(|| {
            tester::Error::new(format!("port {name}: neither its outside end nor its queues"))
        })?;
        let queues: Vec<Box<dyn ports::Port>> =
            queues.into_iter().map(|q| Box::new(q) as Box<dyn ports::Port>).collect();
        match self.topo.msrs.first() {
            Some(spec) if ingress => {
                let shared = MsrShared::new(spec.backends, spec.active);
                let lb = LbPort::new(name, spec.lb, shared.clone(), queues);
                let control = MsrControl::new(shared.clone(), spec.policy, spec.lb.idle_ns);
                self.msr = Some(shared);
                Ok(Box::new(MsrFront {
                    lb,
                    control,
                    t0: Instant::now(),
                    calls: 0,
                    changes: Vec::new(),
                }))
            }
            _ => Ok(Box::new(RssPort::new(name, queues))),
        }
    }
}

/// An MSR's front end as the generator's port: the load balancer, ticked with the control
/// processor's policy every [`MsrFront::TICK_EVERY`] bursts (the generator's thread is where
/// the balancer runs, as `docs/topology.md` says of `mem` ports).
struct MsrFront {
    lb: LbPort,
    control: MsrControl,
    t0: Instant,
    calls: u32,
    changes: Vec<Change>,
}

impl MsrFront {
    /// Bursts between ticks: often enough for the policy's window (milliseconds), rarely
    /// enough that reading the clock costs nothing per frame.
    const TICK_EVERY: u32 = 64;

    fn maybe_tick(&mut self) {
        self.calls = self.calls.wrapping_add(1);
        if self.calls.is_multiple_of(Self::TICK_EVERY) {
            let now = self.t0.elapsed().as_nanos() as u64;
            self.lb.tick(now);
            self.changes.clear();
            self.control.tick(now, &mut self.changes);
        }
    }
}

impl ports::Port for MsrFront {
    fn name(&self) -> &str {
        self.lb.name()
    }
    fn rx_burst(&mut self, batch: &mut ports::Batch) -> usize {
        self.lb.rx_burst(batch)
    }
    fn tx_burst(&mut self, batch: &mut ports::Batch, sel: &[u16]) -> usize {
        self.maybe_tick();
        self.lb.tx_burst(batch, sel)
    }
    fn stats(&self) -> ports::PortStats {
        self.lb.stats()
    }
    fn service(&mut self) {
        self.maybe_tick();
        self.lb.service();
    }
}

/// Counters of a multi-worker DUT, from a runtime snapshot.
fn snapshot_rt(s: &control::runtime::Snapshot, in_names: &[String]) -> DutSnapshot {
    let mut dropped = BTreeMap::new();
    let mut forwarded = 0;
    let mut classes = BTreeMap::new();
    for (_, v) in s.vrs() {
        let c = &v.counters;
        forwarded += c.forwarded;
        let mut own = BTreeMap::new();
        for &r in VrDrop::ALL {
            let n = c.dropped(r);
            if n > 0 {
                *dropped.entry(r.name().to_string()).or_insert(0) += n;
                own.insert(r.name().to_string(), n);
            }
        }
        classes.insert(
            v.name.clone(),
            DutCounters { received: c.rx_packets, forwarded: c.forwarded, dropped: own },
        );
    }
    let mut received = 0;
    for p in s.ports() {
        for &r in PortDrop::ALL {
            let n = p.counters.dropped(r);
            if n > 0 {
                *dropped.entry(format!("port_{}", r.name())).or_insert(0) += n;
            }
        }
        if in_names.contains(&p.name) {
            received += p.counters.rx_packets;
        }
    }
    DutSnapshot { total: DutCounters { received, forwarded, dropped }, classes }
}

fn snapshot(e: &Engine, in_ports: &[usize]) -> DutSnapshot {
    let mut dropped = BTreeMap::new();
    let mut forwarded = 0;
    let mut classes = BTreeMap::new();
    for vr in e.vrs() {
        let c = vr.counters();
        forwarded += c.forwarded;
        let mut own = BTreeMap::new();
        for &r in VrDrop::ALL {
            let n = c.dropped(r);
            if n > 0 {
                *dropped.entry(r.name().to_string()).or_insert(0) += n;
                own.insert(r.name().to_string(), n);
            }
        }
        classes.insert(
            vr.name().to_string(),
            DutCounters { received: c.rx_packets, forwarded: c.forwarded, dropped: own },
        );
    }
    for p in 0..e.port_count() {
        let c = e.port_counters(p);
        for &r in PortDrop::ALL {
            let n = c.dropped(r);
            if n > 0 {
                *dropped.entry(format!("port_{}", r.name())).or_insert(0) += n;
            }
        }
    }
    let received = in_ports.iter().map(|&p| e.port_counters(p).rx_packets).sum();
    DutSnapshot { total: DutCounters { received, forwarded, dropped }, classes }
}

fn report(e: &Engine) -> Value {
    let vrs: Vec<Value> = e
        .vrs()
        .iter()
        .map(|v| {
            let named: serde_json::Map<String, Value> = v
                .counters()
                .named()
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(k, n)| (k.to_string(), json!(n)))
                .collect();
            json!({"name": v.name(), "counters": named})
        })
        .collect();
    let ports: Vec<Value> = (0..e.port_count())
        .map(|p| {
            let s = e.port_stats(p);
            json!({
                "name": e.port_name(p),
                "rx_packets": s.rx_packets, "tx_packets": s.tx_packets, "tx_full": s.tx_full,
            })
        })
        .collect();
    json!({"vrs": vrs, "ports": ports})
}

impl Dut for RouteplexDut {
    fn name(&self) -> String {
        let n = self.vrs.len();
        let routes = self.vrs[0].routes.len();
        format!(
            "routeplex engine, {}: {n} VR{}, {routes} {} routes each",
            self.topo.source,
            if n == 1 { "" } else { "s" },
            family_name(self.family)
        )
    }

    fn describe(&self) -> Value {
        let routes: Vec<Value> =
            self.vrs.iter().map(|v| json!({"vr": v.name, "routes": v.routes.len()})).collect();
        json!({
            "name": self.name(),
            "dut": self.name,
            "kind": "routeplex engine, in process",
            "topology": self.topo.source,
            "ports": {"generator": self.ingress_ports, "sink": self.egress_ports, "backend": self.backend()},
            "path": if self.behind_switch { "generator → switch → VR → switch → sink" } else { "generator → VR → sink" },
            "family": family_name(self.family),
            "table": self.table.label,
            "replicas": self.topo.vrs.iter().zip(&self.topo.schedule).filter(|(_, s)| s.copies() > 1).map(|(v, s)| json!({"vr": v.name, "replicas": s.copies()})).collect::<Vec<_>>(),
            "msr": self.topo.msrs.first().map(|m| format!("load balancer on the generator's port (in the tester's thread), {} back-ends, {} active at start, policy: on above {} pps per active back-end, off below {} pps, hold {} ms", m.backends, m.active, m.policy.on_above_pps, m.policy.off_below_pps, m.policy.hold_ns / 1_000_000)),
            "msr_state": self.msr.as_ref().map(|m| m.dump()),
            "vrs": routes,
            "worker": match (self.workers(), self.pin) {
                (n, _) if n > 1 && !self.pin_workers => format!("{n} worker threads (the multi-worker runtime), not pinned: the OS places them"),
                (n, Some(c)) if n > 1 => format!("{n} worker threads (the multi-worker runtime), pinned to CPUs {c}-{} (CPU 0 is the tester's)", c + n - 1),
                (n, None) if n > 1 => format!("{n} worker threads (the multi-worker runtime), pinned as the topology's workers say"),
                (_, Some(c)) => format!("one thread pinned to CPU {c}"),
                (_, None) => "one thread, not pinned".into(),
            },
        })
    }

    fn targets(&mut self, flows: usize) -> Result<Vec<Target>, tester::Error> {
        let n: usize = self.ingress_ifaces.iter().map(Vec::len).sum();
        let per = flows.div_ceil(n.max(1)).max(1);
        let mut out = Vec::new();
        self.target_ports.clear();
        for (vr, ins) in self.vrs.iter().zip(&self.ingress_ifaces) {
            for &i in ins {
                let f = &vr.interfaces[i];
                let (src, dst): (Vec<IpAddr>, Vec<IpAddr>) = match self.family {
                    Family::Ipv4 => {
                        let net = f.ipv4[0];
                        let own = net.addr();
                        let src =
                            net.hosts().filter(|&a| a != own).take(16).map(IpAddr::V4).collect();
                        let dst = self
                            .table
                            .destinations_v4(per, &mut self.rng)
                            .map_err(|e| tester::Error::new(format!("{}: {e:#}", vr.name)))?;
                        (src, dst.into_iter().map(IpAddr::V4).collect())
                    }
                    Family::Ipv6 => {
                        let net = f.ipv6[0];
                        let base = u128::from(net.network());
                        let own = net.addr();
                        let src = (2..18u128)
                            .map(|h| Ipv6Addr::from(base + h))
                            .filter(|&a| a != own)
                            .map(IpAddr::V6)
                            .collect();
                        let dst = self
                            .table
                            .destinations_v6(per, &mut self.rng)
                            .map_err(|e| tester::Error::new(format!("{}: {e:#}", vr.name)))?;
                        (src, dst.into_iter().map(IpAddr::V6).collect())
                    }
                };
                let port = self.in_ports.iter().position(|&p| p == f.port as usize).unwrap_or(0);
                self.target_ports.push(port);
                out.push(Target {
                    class: vr.name.clone(),
                    src_mac: GEN_MAC,
                    dst_mac: f.mac,
                    vlan: f.vlan,
                    src,
                    dst,
                });
            }
        }
        Ok(out)
    }

    fn ingress(&self) -> Vec<usize> {
        self.target_ports.clone()
    }

    fn start(&mut self) -> Result<DutPorts, tester::Error> {
        Err(tester::Error::new("the routeplex DUT hands over its ports with start_ports"))
    }

    fn start_ports(&mut self) -> Result<PortSet, tester::Error> {
        if self.worker.is_some() || self.runtime.is_some() {
            return Err(tester::Error::new("the routeplex DUT is already running"));
        }
        if self.workers() > 1 {
            return self.start_runtime();
        }
        let err = |e: crate::Error| tester::Error::new(format!("{e:#}"));
        self.build_now().map_err(err)?;
        let mut lab = self.lab.take().expect("built");
        let names: Vec<String> =
            self.ingress_ports.iter().chain(&self.egress_ports).cloned().collect();
        let ends = mem_ends(&mut lab, &self.topo, &names)?;
        let in_ports = self.in_ports.clone();
        let w = spawn_worker(lab.engine, self.shared.clone(), self.pin, move |e: &Engine| {
            snapshot(e, &in_ports)
        })?;
        self.worker = Some(w);
        self.sampler = Some(placement_sampler());
        let mut ports = memif_ends(&self.topo, &names, ends)?;
        if self.behind_switch {
            self.announce_vrs(&mut ports).map_err(err)?;
        }
        let sinks = (self.ingress_ports.len()..ports.len()).collect();
        Ok(PortSet { ports, sinks, refusal: Refusal::Loss })
    }

    fn counters(&mut self) -> Option<DutCounters> {
        self.snapshot().map(|s| s.total)
    }

    fn snapshot(&mut self) -> Option<DutSnapshot> {
        if let Some(rt) = &self.runtime {
            return rt.snapshot().ok().map(|s| snapshot_rt(&s, &self.in_names()));
        }
        self.worker.as_ref()?;
        ask_snapshot(&self.shared)
    }

    fn stop(&mut self) -> Result<DutReport, tester::Error> {
        if let Some(rt) = self.runtime.take() {
            let s = rt.snapshot().map_err(|e| tester::Error::new(e.to_string()))?;
            rt.stop().map_err(|e| tester::Error::new(e.to_string()))?;
            let mut details = s.to_json();
            if let (Some(m), Some(o)) = (&self.msr, details.as_object_mut()) {
                // Which back-ends the policy left on, and what each refused: the MSR's state.
                o.insert("msr".into(), json!(m.dump()));
            }
            if let (Some(p), Some(o)) = (self.sampler.take(), details.as_object_mut()) {
                o.insert("placement".into(), p.finish().to_json());
            }
            self.engine_report = Some(details.clone());
            return Ok(DutReport {
                counters: Some(snapshot_rt(&s, &self.in_names()).total),
                details,
            });
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        let Some(t) = self.worker.take() else {
            return Ok(DutReport {
                counters: None,
                details: self.engine_report.clone().unwrap_or(Value::Null),
            });
        };
        let engine =
            t.join().map_err(|_| tester::Error::new("the DUT's worker thread panicked"))?;
        let mut details = report(&engine);
        if let Some(s) = self.sampler.take() {
            details["placement"] = s.finish().to_json();
        }
        self.engine_report = Some(details.clone());
        Ok(DutReport { counters: Some(snapshot(&engine, &self.in_ports).total), details })
    }
}

impl RouteplexDut {
    /// Behind the switch, the VR's receiving interface never sends, so the switch would flood
    /// the generator's frames to it (the sink too) for ever: an ARP request for its address
    /// makes it answer from its MAC, which the switch learns. Waits for the answer.
    fn announce_vrs(&self, ports: &mut [Box<dyn ports::Port>]) -> Result<()> {
        for (vr, ins) in self.vrs.iter().zip(&self.ingress_ifaces) {
            for &i in ins {
                let f = &vr.interfaces[i];
                let Some(net) = f.ipv4.first() else { continue };
                let own = net.addr();
                let asker = net.hosts().find(|&a| a != own).unwrap_or(own);
                let port = self.in_ports.iter().position(|&p| p == f.port as usize).unwrap_or(0);
                let mut b = ports::Batch::new(1);
                b.push_copy(&arp_request(GEN_MAC, asker, own));
                ports[port].tx_burst(&mut b, &[0]);
                let deadline = Instant::now() + Duration::from_secs(2);
                let mut rx = ports::Batch::new(ports::MAX_BURST);
                let answered = loop {
                    rx.clear();
                    let n = ports[port].rx_burst(&mut rx);
                    if (0..n).any(|k| is_arp_reply_from(rx.get(k).frame(), f.mac)) {
                        break true;
                    }
                    if Instant::now() > deadline {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                if !answered {
                    bail!(
                        "vr {} behind the switch did not answer ARP for {own} in 2 s: the switch \
                         cannot learn its MAC",
                        vr.name
                    );
                }
            }
        }
        // What the request flooded to the sink's port is no test frame: leave none behind.
        let mut rx = ports::Batch::new(ports::MAX_BURST);
        for p in ports.iter_mut() {
            rx.clear();
            p.rx_burst(&mut rx);
        }
        Ok(())
    }
}

/// An ARP request from `mac`/`from` for `target`, padded to the minimum frame.
fn arp_request(mac: MacAddr, from: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend(mac.as_bytes());
    f.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend(mac.as_bytes());
    f.extend(from.octets());
    f.extend([0; 6]);
    f.extend(target.octets());
    f.resize(60, 0);
    f
}

/// Whether `f` is an ARP reply sent by `mac`.
fn is_arp_reply_from(f: &[u8], mac: MacAddr) -> bool {
    f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[20..22] == [0, 2] && f[6..12] == *mac.as_bytes()
}

/// The tester's ends of the `mem` ports among `names` (the others `None`, for
/// [`memif_ends`]).
pub(super) fn mem_ends(
    lab: &mut lab::Lab,
    topo: &Topology,
    names: &[String],
) -> Result<Vec<Option<Box<dyn ports::Port>>>, tester::Error> {
    let mut ends: Vec<Option<Box<dyn ports::Port>>> = Vec::new();
    for p in names {
        let i = topo.port_index(p).ok_or_else(|| tester::Error::new(format!("no port {p}")))?;
        if let control::PortKind::Memif(_) = topo.ports[i].kind {
            ends.push(None);
            continue;
        }
        let end = lab.take_outside(topo, p).map_err(|e| tester::Error::new(e.to_string()))?;
        ends.push(Some(Box::new(end)));
    }
    Ok(ends)
}

/// Fills the gaps [`mem_ends`] left with memif clients of the DUT's memif servers, once each
/// is up (the DUT's worker must be running: it answers the handshake).
pub(super) fn memif_ends(
    topo: &Topology,
    names: &[String],
    ends: Vec<Option<Box<dyn ports::Port>>>,
) -> Result<Vec<Box<dyn ports::Port>>, tester::Error> {
    names
        .iter()
        .zip(ends)
        .map(|(p, end)| match end {
            Some(e) => Ok(e),
            None => memif_client(topo, p).map(|c| Box::new(c) as Box<dyn ports::Port>),
        })
        .collect()
}

/// A memif client of port `name`'s server, with its ring size, once connected.
fn memif_client(topo: &Topology, name: &str) -> Result<MemifPort, tester::Error> {
    let e = |m: String| tester::Error::new(format!("memif port {name}: {m}"));
    let i = topo.port_index(name).ok_or_else(|| e("no such port".into()))?;
    let control::PortKind::Memif(m) = &topo.ports[i].kind else {
        return Err(e("not a memif port".into()));
    };
    let mut o = MemifOptions::new(m.socket.clone());
    o.id = m.id;
    o.queues = m.queues;
    o.log2_ring_size = m.log2_ring;
    o.buffer_size = m.buffer;
    o.name = format!("tester-{name}");
    let mut c = MemifPort::client(o).map_err(|x| e(x.to_string()))?;
    let t0 = Instant::now();
    while c.status() != ports::PortStatus::Up {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(e(format!("the DUT did not answer in 10 s ({:?})", c.status())));
        }
        c.service();
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(c)
}

/// The DUT's worker: polls `engine` (pinned to `pin`) until told to stop, taking a snapshot
/// when asked between polls; returns the engine.
pub(super) fn spawn_worker(
    mut engine: Engine,
    shared: Arc<Shared>,
    pin: Option<usize>,
    snap: impl Fn(&Engine) -> DutSnapshot + Send + 'static,
) -> Result<JoinHandle<Engine>, tester::Error> {
    std::thread::Builder::new()
        .name(WORKER_THREAD.into())
        .spawn(move || {
            if let Some(cpu) = pin {
                sys::pin(cpu);
            }
            let t0 = Instant::now();
            let mut k = 0u32;
            while !shared.stop.load(Ordering::Relaxed) {
                engine.poll(t0.elapsed().as_nanos() as u64);
                k = k.wrapping_add(1);
                if k.is_multiple_of(64) && shared.want.load(Ordering::Acquire) {
                    *shared.snap.lock().unwrap_or_else(|e| e.into_inner()) = Some(snap(&engine));
                    shared.want.store(false, Ordering::Release);
                }
            }
            engine
        })
        .map_err(|e| tester::Error::new(format!("cannot start the DUT's worker thread: {e}")))
}

/// The single-worker DUT's thread name (`comm`, at most 15 bytes), which the placement
/// read-back matches.
const WORKER_THREAD: &str = "routeplex-dut";

/// Reads, every 250 ms from `start` to `stop`, where the DUT's worker and the tester's thread
/// (this process's main thread: generator and sink) run. Seldom, because the sampler wakes on
/// one of their CPUs and would show in the latency tail.
pub(super) fn placement_sampler() -> Sampler {
    sampler_of(vec![(WORKER_THREAD.into(), "DUT worker".into())])
}

/// The same for a multi-worker DUT: the runtime names its threads `worker0`, `worker1`, ….
fn runtime_sampler(workers: usize) -> Sampler {
    sampler_of((0..workers).map(|i| (format!("worker{i}"), format!("DUT worker {i}"))).collect())
}

fn sampler_of(dut: Vec<(String, String)>) -> Sampler {
    let mut roles = vec![("main".to_string(), "generator and sink".to_string())];
    roles.extend(dut);
    Sampler::start(
        vec![Watch { pid: std::process::id(), process: "routeplex test scenario".into(), roles }],
        Duration::from_millis(250),
    )
}

/// Asks the worker of a running single-worker DUT for a snapshot and waits for it (1 s at
/// most).
pub(super) fn ask_snapshot(shared: &Shared) -> Option<DutSnapshot> {
    shared.want.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(1);
    while shared.want.load(Ordering::Acquire) {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::yield_now();
    }
    shared.snap.lock().unwrap_or_else(|e| e.into_inner()).take()
}

impl Drop for RouteplexDut {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.worker.take() {
            let _ = t.join();
        }
    }
}

/// The embedded topologies: `routeplex` (one-vr.yaml: the bench topology with 4096-slot rings)
/// and `routeplex-4vr` (demo.yaml: four VRs sharing two ports, one on VLANs).
pub fn embedded(kind: &str) -> Option<(&'static str, &'static str)> {
    match kind {
        "routeplex" => Some((include_str!("one-vr.yaml"), "one-vr.yaml")),
        "routeplex-4vr" => Some((include_str!("../demo.yaml"), "demo.yaml")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::worker_cpus;

    #[test]
    fn workers_start_at_the_duts_cpu_and_never_take_the_testers() {
        assert_eq!(worker_cpus(1, 1, 2), [Some(1)]);
        assert_eq!(worker_cpus(1, 3, 16), [Some(1), Some(2), Some(3)]);
        let all = worker_cpus(1, 15, 16);
        assert_eq!(all.first(), Some(&Some(1)));
        assert_eq!(all.last(), Some(&Some(15)));
        assert!(!all.contains(&Some(0)), "{all:?}");
        // Too few CPUs (the runner skips these points): wraps rather than naming a CPU that
        // does not exist.
        assert_eq!(worker_cpus(1, 2, 2), [Some(1), Some(0)]);
    }
}
