//! The running host as control owns it: the topology last applied, every VR's [`RouteTable`]
//! (its RIB by source and FIB writers), and the workers ([`Runtime`]) that run the cells.
//!
//! Every change reaches the data plane as a typed operation on the worker that runs the VR,
//! between two of its polls ([`Runtime::on_cell`]); no worker is ever stopped. [`Node::execute`]
//! serves the API ([`crate::api::Command`]); [`Node::plan`] and [`Node::apply`] diff a topology
//! against the running one and carry the difference out.
//!
//! `apply` is all or nothing where it can be: the whole plan is computed and everything it
//! needs (route tables, VRs, ports) is built before the first change to the running host, and
//! a plan with any change that cannot be made live (a port's kind, the workers, hosts,
//! switches) is refused whole with what to do instead.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use dataplane::config::{IfaceConfig, RouteConfig, RouteTarget, VrConfig};
use dataplane::{RouteError, RouteOp, RouteSource, RouteTable, Vr, VrAnswer, VrChange};
use ipnet::IpNet;
use ports::mem::MemPort;
use serde_json::{json, Value};
use tracing::{debug, info, warn};

use crate::api::{Command, Route, API_VERSION};
use crate::build::{self, open_port, vr_in_cell};
use crate::runtime::{reservation_json, Options, Runtime};
use crate::topology::{reservation_from_words, VrSchedule};
use crate::{ControlError, PortKind, Topology};

/// The running host.
pub struct Node {
    topo: Topology,
    tables: HashMap<String, RouteTable>,
    rt: Runtime,
    outside: HashMap<String, MemPort>,
    /// The outside ends of a replicated VR's ports, one per queue (replica).
    queues: HashMap<String, Vec<MemPort>>,
    burst: usize,
    stop_requested: bool,
    /// The running topology's text and file name, where known (for `vr_add`).
    source: Option<(String, String)>,
    /// Captures running, by id.
    captures: HashMap<u64, Capture>,
    /// VRs to be added with their interfaces down (a migration's destination).
    start_down: Vec<String>,
    next_capture: u64,
    /// Route sync of each VR with a Linux control plane.
    syncs: Vec<crate::cpsync::CpSync>,
    /// Control-plane namespaces this node made while running (VRs added or migrated here
    /// with a `control_plane`), removed with their VR.
    cp_made: crate::netns::Made,
    /// `kernel` routes of VRs about to be added that are to be held stale (a restore's).
    stale_next: HashMap<String, Vec<ipnet::IpNet>>,
    /// Each MSR's shared state (back-end states and counters), by its VR's name, made at start
    /// so that `status` has it before the front end is taken ([`crate::msr::Msr::take`]).
    msrs: HashMap<String, crate::msr::MsrState>,
    /// VRs started from a checkpoint: their tables being built from the routes.
    building: Vec<(String, std::thread::JoinHandle<Result<RouteTable, String>>)>,
    /// Their stand-ins, replaced in `tables` by [`Node::settle`], until [`Node::take_over`],
    /// with a reader of the table that replaced each (to tell whether it is still there).
    stand_ins: Vec<(String, RouteTable, fib::FibReader<u32>)>,
}

/// A capture's consumer side.
struct Capture {
    cell: usize,
    point: String,
    count: u64,
    read: u64,
    ring: std::sync::Arc<dataplane::CaptureRing>,
}

/// What `apply` would do (or did): steps in the order they run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<String>,
    /// VRs the plan leaves alone.
    pub unchanged: Vec<String>,
}

impl Plan {
    /// Whether the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.steps.is_empty() {
            writeln!(f, "nothing to change")?;
        }
        for s in &self.steps {
            writeln!(f, "{s}")?;
        }
        if !self.unchanged.is_empty() {
            writeln!(f, "= unchanged: {}", self.unchanged.join(", "))?;
        }
        Ok(())
    }
}

/// One step of a plan, with everything it needs built.
enum Step {
    Idle(crate::runtime::Idle),
    RemoveVr(String),
    RemoveCell(usize, Vec<String>),
    Routes {
        vr: String,
        ops: Vec<RouteOp>,
    },
    Mtu {
        vr: String,
        iface: u16,
        mtu: u16,
    },
    /// An interface set up or down (`up:`), with its mirror tap if the VR has a control plane.
    Up {
        vr: String,
        iface: u16,
        up: bool,
        mirror: Option<(String, String)>,
    },
    /// A control-plane VR's interface changed: its mirror tap `dev` in `netns` follows.
    Mirror {
        netns: String,
        dev: String,
        change: crate::netns::MirrorChange,
    },
    Replace {
        vr: String,
        table: RouteTable,
        new: Box<Vr>,
    },
    NewCell {
        table: Vec<(String, RouteTable)>,
        cell: Box<dataplane::Cell>,
        worker: Option<usize>,
        outside: Vec<(String, MemPort)>,
    },
    JoinCell {
        cell: usize,
        ports: Vec<Box<dyn ports::Port>>,
        table: RouteTable,
        vr: Box<Vr>,
    },
    Schedule {
        vr: String,
        sched: VrSchedule,
    },
    /// A port's impairment set, changed or ended (`impair:`).
    Impair {
        port: String,
        cfg: Option<dataplane::impair::ImpairConfig>,
    },
}

/// Installs adjacency list `list` in VR `vr` on its worker, in every replica of a replicated
/// VR, before the FIB that uses it is published.
fn publish_adjacencies(
    rt: &crate::runtime::Runtime,
    vr: &str,
    list: &[(fib::NextHop, dataplane::Adj)],
) -> Result<(), String> {
    let list = list.to_vec();
    rt.on_vr_each(vr, move |cell, v| {
        cell.change_vr(v, VrChange::Adjacencies(list.clone())).map(|_| ()).map_err(|e| e.0)
    })
    .map_err(|e| e.0)?
    .into_iter()
    .collect()
}

impl Node {
    /// Builds `topo`'s host and starts its workers.
    pub fn start(topo: Topology, opts: Options, burst: usize) -> Result<Node, ControlError> {
        Node::start_from(topo, opts, burst, &HashMap::new())
    }

    /// As [`start`](Node::start), the VRs in `checkpoints` forwarding at once with the tables
    /// checkpointed there while their tables are built from the routes in the background
    /// (see [`crate::checkpoint`]): [`Node::settle`] must run before anything else uses them.
    pub fn start_from(
        topo: Topology,
        opts: Options,
        burst: usize,
        checkpoints: &HashMap<String, Vec<u8>>,
    ) -> Result<Node, ControlError> {
        let mut host = build::host_from(&topo, None, burst, checkpoints)?;
        let stand_ins = std::mem::take(&mut host.stand_ins);
        // The mirror taps exist now (opening the ports made them): dress them as their VR
        // interfaces.
        crate::netns::configure_mirrors(&topo)
            .map_err(|e| ControlError::Invalid(format!("control plane: {e}")))?;
        let outside = topo
            .ports
            .iter()
            .zip(host.outside)
            .filter_map(|(p, o)| Some((p.name.clone(), o?)))
            .collect();
        let queues = topo
            .ports
            .iter()
            .zip(host.queues)
            .filter_map(|(p, q)| Some((p.name.clone(), q?)))
            .collect();
        let tables = topo.vrs.iter().map(|v| v.name.clone()).zip(host.tables).collect();
        let rt = Runtime::start(host.cells, opts)?;
        // After the workers: the critical path to forwarding comes first.
        let building = stand_ins
            .iter()
            .filter_map(|name| {
                let cfg = topo.vrs.iter().find(|v| &v.name == name)?.clone();
                let h = std::thread::Builder::new()
                    .name(format!("table-{name}"))
                    .spawn(move || RouteTable::new(&cfg).map_err(|e| e.0));
                Some(h.map(|h| (name.clone(), h)))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ControlError::io("route table thread", e))?;
        // Interfaces set `up: false` start down (their mirrors were left down).
        for (v, down) in topo.iface_down.iter().enumerate() {
            for &i in down {
                let name = topo.vrs[v].name.clone();
                rt.on_vr_each(&name, move |c, k| c.change_vr(k, VrChange::Up(i, false)))?
                    .into_iter()
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| ControlError::Invalid(e.0))?;
            }
        }
        let mut syncs = Vec::new();
        for (v, cfg) in topo.vrs.iter().enumerate() {
            if let Some(cp) = topo.control_plane(v) {
                let s = crate::cpsync::CpSync::start(cfg, &cp.netns)
                    .map_err(|e| ControlError::io("route sync thread", e))?;
                syncs.push(s);
            }
        }
        let msrs = crate::msr::MsrState::for_topology(&topo);
        Ok(Node {
            msrs,
            topo,
            tables,
            rt,
            outside,
            queues,
            burst,
            stop_requested: false,
            source: None,
            captures: HashMap::new(),
            next_capture: 1,
            start_down: Vec::new(),
            syncs,
            cp_made: crate::netns::Made::default(),
            stale_next: HashMap::new(),
            building,
            stand_ins: Vec::new(),
        })
    }

    /// Whether tables of VRs started from a checkpoint are still to be settled.
    pub fn unsettled(&self) -> bool {
        !self.building.is_empty()
    }

    /// Whether those tables are built (settling would not wait).
    pub fn built(&self) -> bool {
        self.building.iter().all(|(_, h)| h.is_finished())
    }

    /// Waits for the tables of the VRs started from a checkpoint and puts them in place of
    /// their stand-ins, whose FIBs the VRs go on reading until [`Node::take_over`]: route
    /// operations (a journal's replay) apply to the real tables from here on.
    pub fn settle(&mut self) -> Result<(), ControlError> {
        for (name, h) in std::mem::take(&mut self.building) {
            let t0 = std::time::Instant::now();
            let table = h
                .join()
                .map_err(|_| {
                    ControlError::State(format!("vr {name}: building its table panicked"))
                })?
                .map_err(|e| ControlError::State(format!("vr {name}: {e}")))?;
            let marker = table.fibs().0.reader();
            if let Some(stand_in) = self.tables.insert(name.clone(), table) {
                self.stand_ins.push((name.clone(), stand_in, marker));
            }
            info!(vr = %name, waited_ms = t0.elapsed().as_millis() as u64, "route table built from the routes");
        }
        Ok(())
    }

    /// Makes the tables [settled](Node::settle) publish to their VRs, in place of the stand-ins
    /// from the checkpoint (after installing any adjacency that differs, none when the
    /// checkpoint matched).
    pub fn take_over(&mut self) -> Result<(), ControlError> {
        for (name, stand_in, marker) in std::mem::take(&mut self.stand_ins) {
            // A replay that removed or rebuilt the VR left no VR reading the stand-in.
            let Some(table) = self.tables.get_mut(&name) else { continue };
            if !table.fibs().0.reader().same_as(&marker) {
                continue;
            }
            let rt = &self.rt;
            let installed = table
                .take_over(&stand_in, |list| publish_adjacencies(rt, &name, list))
                .map_err(|e| ControlError::State(format!("vr {name}: {e}")))?;
            if installed > 0 {
                warn!(vr = %name, installed, "checkpoint: adjacencies differed from the rebuilt table's; installed");
            }
            info!(vr = %name, "route table took over from the checkpoint");
        }
        Ok(())
    }

    /// Records the text the running topology was read from and its file name, so `vr_add`
    /// can extend it.
    pub fn set_source(&mut self, text: String, file: String) {
        self.source = Some((text, file));
    }

    /// The running topology's text, where known.
    pub fn source_text(&self) -> Option<&str> {
        self.source.as_ref().map(|(t, _)| t.as_str())
    }

    /// The running topology's text and the file it names, where known.
    pub fn source(&self) -> Option<(&str, &str)> {
        self.source.as_ref().map(|(t, f)| (t.as_str(), f.as_str()))
    }

    /// The next VR called `vr` to be added starts with its interfaces down.
    pub(crate) fn start_down(&mut self, vr: &str) {
        self.start_down.push(vr.to_string());
    }

    /// The next VR called `vr` to be added holds `kernel` routes `prefixes` stale (its route
    /// sync keeps them until its control plane re-learns them, see [`crate::cpsync`]).
    pub(crate) fn stale_on_add(&mut self, vr: &str, prefixes: Vec<ipnet::IpNet>) {
        self.stale_next.insert(vr.to_string(), prefixes);
    }

    /// Takes VR `vr` down from the start if it was asked to be (before it ever forwards).
    fn down_from_start(&mut self, vr: &mut Vr) {
        if let Some(i) = self.start_down.iter().position(|n| n == vr.name()) {
            self.start_down.remove(i);
            for k in 0..vr.interfaces().len() {
                let _ = vr.change(VrChange::Up(k as u16, false));
            }
        }
    }

    /// Adds a VR and ports, given as topology documents (JSON), as `vr_add` does.
    pub(crate) fn add_vr_values(
        &mut self,
        vr: Value,
        ports: Vec<Value>,
    ) -> Result<Plan, ControlError> {
        self.edit_source(|doc| {
            list(doc, "ports").extend(ports);
            list(doc, "vrs").push(vr);
        })
    }

    /// The topology as last applied.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The workers.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The workers, to move VRs or change reservations.
    pub fn runtime_mut(&mut self) -> &mut Runtime {
        &mut self.rt
    }

    /// A VR's route table.
    pub fn table(&self, vr: &str) -> Option<&RouteTable> {
        self.tables.get(vr)
    }

    /// Takes the outside end of `mem` port `name` (tests, benchmarks).
    pub fn take_outside(&mut self, name: &str) -> Option<MemPort> {
        self.outside.remove(name)
    }

    /// MSR `vr`'s state (`None`: no `msrs[]` entry names `vr`).
    pub fn msr_state(&mut self, vr: &str) -> Option<&mut crate::msr::MsrState> {
        self.msrs.get_mut(vr)
    }

    /// Takes the outside ends of port `name` of a replicated VR, one per queue (queue `r` is
    /// replica `r`'s); a peer spreads over them by the flow hash
    /// (`dataplane::replica::RssPort`).
    pub fn take_outside_queues(&mut self, name: &str) -> Option<Vec<MemPort>> {
        self.queues.remove(name)
    }

    /// Whether a `stop` command came in.
    pub fn stop_requested(&self) -> bool {
        self.stop_requested
    }

    /// Applies what the VRs' control planes changed in their kernels since the last call
    /// (see [`crate::cpsync`]), as one batch of route operations per VR, through
    /// [`Node::route_ops`]. Operations a VR refuses are left out and counted (the rest
    /// applies). Returns the operations applied. Called by the daemon's control loop.
    pub fn sync_control_planes(&mut self) -> usize {
        let mut applied = 0;
        for i in 0..self.syncs.len() {
            let mut ops: Vec<RouteOp> = Vec::new();
            while let Ok(b) = self.syncs[i].rx.try_recv() {
                if ops.is_empty() {
                    ops = b;
                } else {
                    ops.extend(b);
                }
            }
            if ops.is_empty() {
                continue;
            }
            let vr = self.syncs[i].vr.clone();
            // A refused operation names its index: leave it out and try the rest again.
            let mut refused = 0u64;
            loop {
                match self.route_ops(&vr, &ops) {
                    Ok(_) => {
                        applied += ops.len();
                        break;
                    }
                    Err(ControlError::Route { source, .. }) => {
                        let index = match source {
                            RouteError::NotOperable { index, .. }
                            | RouteError::Exists { index, .. }
                            | RouteError::Missing { index, .. }
                            | RouteError::BadTarget { index, .. } => index,
                            e => {
                                warn!(vr, error = %e, ops = ops.len(), "control-plane routes not applied");
                                refused += ops.len() as u64;
                                break;
                            }
                        };
                        debug!(vr, op = ?ops[index], error = %source, "control-plane route refused");
                        ops.remove(index);
                        refused += 1;
                    }
                    Err(e) => {
                        warn!(vr, error = %e, "control-plane routes not applied");
                        refused += ops.len() as u64;
                        break;
                    }
                }
            }
            if refused > 0 {
                self.syncs[i]
                    .stats
                    .refused
                    .fetch_add(refused, std::sync::atomic::Ordering::Relaxed);
                warn!(vr, refused, "control-plane routes the VR refused (see debug log)");
            }
        }
        applied
    }

    /// Route sync counters of VR `vr`, if it has a control plane: operations made, routes
    /// skipped, listener overruns, operations refused, routes held stale now, stale routes
    /// expired.
    pub fn sync_stats(&self, vr: &str) -> Option<[u64; 6]> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.syncs.iter().find(|s| s.vr == vr)?.stats;
        Some([
            s.ops.load(Relaxed),
            s.skipped.load(Relaxed),
            s.overruns.load(Relaxed),
            s.refused.load(Relaxed),
            s.stale.load(Relaxed),
            s.stale_expired.load(Relaxed),
        ])
    }

    /// Stops the workers.
    pub fn stop(mut self) -> Result<(), ControlError> {
        self.syncs.clear();
        self.rt.stop()?;
        for e in crate::netns::remove(&self.cp_made) {
            warn!(error = %e, "control-plane namespace not removed");
        }
        Ok(())
    }

    /// Before applying `next`: makes the namespace of each VR it adds with a control plane
    /// (its mirror taps open in it), recorded to be removed with the VR.
    fn make_new_mirrors(&mut self, next: &Topology) -> Result<(), ControlError> {
        for (i, v) in next.vrs.iter().enumerate() {
            let Some(cp) = next.control_plane(i) else { continue };
            if self.topo.vr_index(&v.name).is_some() {
                continue;
            }
            crate::netns::make_control_plane(&cp.netns, &mut self.cp_made)
                .map_err(|e| ControlError::Invalid(format!("vr {}: control plane: {e}", v.name)))?;
        }
        Ok(())
    }

    /// After applying `next` (from `cur`): dresses the mirror taps of the VRs it added with a
    /// control plane and starts their route sync; stops the sync of those it removed, and
    /// removes the namespaces this node made for them.
    fn follow_control_planes(&mut self, cur: &Topology) -> Result<(), ControlError> {
        for (i, v) in self.topo.vrs.iter().enumerate() {
            let Some(cp) = self.topo.control_plane(i) else { continue };
            if cur.vr_index(&v.name).is_some() {
                continue;
            }
            crate::netns::configure_mirrors_of(&self.topo, i)
                .map_err(|e| ControlError::State(format!("vr {}: control plane: {e}", v.name)))?;
            let stale = self.stale_next.remove(&v.name).unwrap_or_default();
            let secs = std::time::Duration::from_secs(cp.stale_secs.into());
            let s = crate::cpsync::CpSync::start_stale(v, &cp.netns, stale, secs)
                .map_err(|e| ControlError::io("route sync thread", e))?;
            self.syncs.push(s);
        }
        for (i, v) in cur.vrs.iter().enumerate() {
            let Some(cp) = cur.control_plane(i) else { continue };
            if self.topo.vr_index(&v.name).is_some() {
                continue;
            }
            self.syncs.retain(|s| s.vr != v.name);
            self.forget_mirror(&cp.netns);
        }
        Ok(())
    }

    /// Removes control-plane namespace `ns` if this node made it.
    fn forget_mirror(&mut self, ns: &str) {
        let Some(k) = self.cp_made.namespaces.iter().position(|n| n == ns) else { return };
        let one = crate::netns::Made {
            namespaces: vec![self.cp_made.namespaces.remove(k)],
            links: vec![],
        };
        for e in crate::netns::remove(&one) {
            warn!(error = %e, "control-plane namespace not removed");
        }
    }

    /// Applies route operations to VR `vr`: validated whole, new adjacencies installed on its
    /// worker, then published.
    pub fn route_ops(
        &mut self,
        vr: &str,
        ops: &[RouteOp],
    ) -> Result<dataplane::routes::Applied, ControlError> {
        let table = self.tables.get_mut(vr).ok_or_else(|| ControlError::NoSuchVr(vr.into()))?;
        let rt = &self.rt;
        let name = vr.to_string();
        let a = table
            .apply(ops, |new| publish_adjacencies(rt, &name, new))
            .map_err(|source| ControlError::Route { vr: vr.into(), source })?;
        info!(vr, added = a.added, replaced = a.replaced, deleted = a.deleted, "routes applied");
        Ok(a)
    }

    /// API routes as operations of VR `vr`.
    pub fn route_configs(
        &self,
        vr: &str,
        routes: &[Route],
    ) -> Result<Vec<RouteConfig>, ControlError> {
        let cfg = self.vr_config(vr)?;
        routes
            .iter()
            .map(|r| {
                let iface = r.interface.as_deref().map(|n| iface_index(cfg, n)).transpose()?;
                let target = match (r.via, iface, r.blackhole) {
                    (Some(gateway), iface, false) => RouteTarget::Via { gateway, iface },
                    (None, Some(i), false) => RouteTarget::Iface(i),
                    (None, None, true) => RouteTarget::Blackhole,
                    _ => {
                        return Err(ControlError::BadRequest(format!(
                        "route {}: give via (and optionally interface), interface, or blackhole",
                        r.prefix
                    )))
                    }
                };
                Ok(RouteConfig { prefix: r.prefix, target, source: RouteSource::Api })
            })
            .collect()
    }

    fn capture_start(
        &mut self,
        point: String,
        count: u64,
        drops: bool,
        ring: Option<usize>,
    ) -> Result<Value, ControlError> {
        let cap = ring.unwrap_or(1024);
        if !(1..=65_536).contains(&cap) {
            return Err(ControlError::BadRequest(format!("capture ring {cap}: 1..=65536")));
        }
        let ring = dataplane::CaptureRing::new(cap);
        let (cell, port) = match point.split_once(':') {
            Some((vr, iface)) if self.topo.vr_index(vr).is_some() => {
                let (vr, iface) = (vr.to_string(), iface.to_string());
                let (c, _) = self.rt.locate(&vr)?;
                let r = ring.clone();
                let port = self.rt.on_vr(&vr, move |cell, v| {
                    let p = cell.iface_port(v, &iface)?;
                    cell.set_capture(Some(dataplane::Tap::new(p, drops, count, r)));
                    Some(cell.port_name(p).to_string())
                })?;
                (
                    c,
                    port.ok_or_else(|| {
                        ControlError::Invalid(format!("{point}: no such interface"))
                    })?,
                )
            }
            _ => {
                let c = self.rt.cell_of_port(&point).ok_or_else(|| {
                    ControlError::Invalid(format!(
                        "{point}: no port (or VR:INTERFACE) of that name"
                    ))
                })?;
                let (name, r) = (point.clone(), ring.clone());
                let found = self.rt.on_cell(c, move |cell| {
                    let p = (0..cell.port_count()).find(|&p| cell.port_name(p) == name)?;
                    cell.set_capture(Some(dataplane::Tap::new(p, drops, count, r)));
                    Some(())
                })?;
                found.ok_or_else(|| ControlError::Invalid(format!("{point}: no such port")))?;
                (c, point.clone())
            }
        };
        // One capture per cell: the tap just installed replaced any other's.
        self.captures.retain(|_, c| c.cell != cell);
        let id = self.next_capture;
        self.next_capture += 1;
        self.captures.insert(id, Capture { cell, point: port.clone(), count, read: 0, ring });
        Ok(json!({ "id": id, "point": point, "port": port, "ring": cap }))
    }

    fn capture_read(&mut self, id: u64, max: Option<usize>) -> Result<Value, ControlError> {
        let max = max.unwrap_or(256).clamp(1, 4096);
        let epoch = self.rt.epoch();
        let Some(c) = self.captures.get_mut(&id) else {
            return Err(ControlError::Invalid(format!("no capture {id}")));
        };
        let mut got = Vec::new();
        c.ring.drain(&mut got, max);
        c.read += got.len() as u64;
        // Worker time (since the runtime's epoch) to Unix time.
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let since_epoch = epoch.elapsed().as_nanos() as u64;
        let frames: Vec<Value> = got
            .iter()
            .map(|f| {
                json!({
                    "ts_ns": now_unix.saturating_sub(since_epoch.saturating_sub(f.ts)),
                    "dir": f.dir.name(),
                    "reason": f.reason.map(|r| r.name()),
                    "len": f.len,
                    "hex": crate::pcapng::to_hex(&f.data),
                })
            })
            .collect();
        Ok(json!({
            "id": id,
            "port": c.point,
            "frames": frames,
            "taken": c.ring.taken(),
            "lost": c.ring.lost(),
            "done": c.count > 0 && c.read >= c.count,
        }))
    }

    fn trace_read(&mut self, vr: String) -> Result<Value, ControlError> {
        let cfg = self.vr_config(&vr)?.clone();
        let (recs, left, ports) = self.rt.on_vr(&vr, |cell, v| {
            let (recs, left) = cell.take_trace();
            if left == 0 {
                let _ = cell.set_trace(v, 0);
            }
            let ports: Vec<String> =
                (0..cell.port_count()).map(|p| cell.port_name(p).to_string()).collect();
            (recs, left, ports)
        })?;
        let port = |p: u16| ports.get(p as usize).cloned().unwrap_or_else(|| p.to_string());
        let ifname = |i: u16| {
            cfg.interfaces.get(i as usize).map(|f| f.name.clone()).unwrap_or_else(|| i.to_string())
        };
        let rows: Vec<Value> = recs
            .iter()
            .map(|r| {
                json!({
                    "ts_ns": r.ts,
                    "port": port(r.port),
                    "len": r.len,
                    "interface": ifname(r.iface),
                    "ethertype": format!("0x{:04x}", r.ethertype),
                    "lookup": r.lookup.map(|(dst, nh, adj)| json!({
                        "destination": dst, "next_hop": nh, "adjacency": adj_text(adj, &ifname),
                    })),
                    "egress": r.egress.map(port),
                    "drop": r.drop.map(|d| d.name()),
                })
            })
            .collect();
        Ok(json!({ "vr": vr, "packets": rows, "left": left }))
    }

    fn vr_config(&self, vr: &str) -> Result<&VrConfig, ControlError> {
        self.topo.vrs.iter().find(|v| v.name == vr).ok_or_else(|| ControlError::NoSuchVr(vr.into()))
    }

    /// Serves one API command.
    pub fn execute(&mut self, cmd: Command) -> Result<Value, ControlError> {
        match cmd {
            Command::Hello => Ok(json!({
                "v": API_VERSION,
                "commands": Command::NAMES,
                "pid": std::process::id(),
            })),
            Command::Status => self.status(),
            Command::RouteAdd { vr, routes } | Command::RouteReplace { vr, routes }
                if routes.is_empty() =>
            {
                Err(ControlError::BadRequest(format!("vr {vr}: no routes given")))
            }
            Command::RouteAdd { vr, routes } => {
                let ops = self
                    .route_configs(&vr, &routes)?
                    .into_iter()
                    .map(RouteOp::Add)
                    .collect::<Vec<_>>();
                applied(self.route_ops(&vr, &ops)?)
            }
            Command::RouteReplace { vr, routes } => {
                let ops = self
                    .route_configs(&vr, &routes)?
                    .into_iter()
                    .map(RouteOp::Replace)
                    .collect::<Vec<_>>();
                applied(self.route_ops(&vr, &ops)?)
            }
            Command::RouteDelete { vr, prefixes } => {
                let ops: Vec<RouteOp> = prefixes
                    .into_iter()
                    .map(|prefix| RouteOp::Delete { prefix, source: RouteSource::Api })
                    .collect();
                applied(self.route_ops(&vr, &ops)?)
            }
            Command::RouteList { vr, source, limit } => {
                let table =
                    self.tables.get(&vr).ok_or_else(|| ControlError::NoSuchVr(vr.clone()))?;
                let source = match source.as_deref() {
                    None => None,
                    Some(s) => Some(
                        RouteSource::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| {
                            ControlError::BadRequest(format!(
                                "source {s:?}: one of local, connected, static, api, kernel, table"
                            ))
                        })?,
                    ),
                };
                let cfg = self.vr_config(&vr)?;
                let limit = limit.unwrap_or(10_000);
                let rows: Vec<Value> = table
                    .routes(source, limit)
                    .into_iter()
                    .map(|r| {
                        let mut j = json!({ "prefix": r.prefix, "source": r.source.name(), "best": r.best });
                        match r.target {
                            RouteTarget::Via { gateway, iface } => {
                                j["via"] = json!(gateway);
                                if let Some(i) = iface {
                                    j["interface"] = json!(cfg.interfaces[i as usize].name);
                                }
                            }
                            RouteTarget::Iface(i) => j["interface"] = json!(cfg.interfaces[i as usize].name),
                            RouteTarget::Blackhole => j["blackhole"] = json!(true),
                        }
                        j
                    })
                    .collect();
                Ok(json!({ "vr": vr, "routes": rows }))
            }
            Command::NeighborList { vr } => {
                let cfg = self.vr_config(&vr)?.clone();
                // A replicated VR's replicas keep one table between them: replica 0's.
                let first = self.rt.instances(&vr).into_iter().next().unwrap_or_else(|| vr.clone());
                let rows =
                    match self.rt.on_vr(&first, |c, v| c.change_vr(v, VrChange::Neighbors))? {
                        Ok(VrAnswer::Neighbors(rows)) => rows,
                        Ok(_) => Vec::new(),
                        Err(e) => return Err(ControlError::Invalid(e.0)),
                    };
                let rows: Vec<Value> = rows
                    .into_iter()
                    .map(|r| {
                        json!({
                            "interface": cfg.interfaces.get(r.iface as usize).map(|i| i.name.as_str()),
                            "address": r.ip, "mac": r.mac.map(|m| m.to_string()),
                            "state": format!("{:?}", r.state).to_lowercase(), "queued": r.queued,
                        })
                    })
                    .collect();
                Ok(json!({ "vr": vr, "neighbors": rows }))
            }
            Command::NeighborFlush { vr, interface } => {
                let i = interface
                    .as_deref()
                    .map(|n| iface_index(self.vr_config(&vr)?, n))
                    .transpose()?;
                let all = self
                    .rt
                    .on_vr_each(&vr, move |c, v| c.change_vr(v, VrChange::FlushNeighbors(i)))?;
                let flushed =
                    all.into_iter().try_fold(VrAnswer::Flushed(0), |acc, a| match (acc, a) {
                        (VrAnswer::Flushed(s), Ok(VrAnswer::Flushed(n))) => {
                            Ok(VrAnswer::Flushed(s + n))
                        }
                        (_, Ok(a)) => Ok(a),
                        (_, Err(e)) => Err(e),
                    });
                match flushed {
                    Ok(VrAnswer::Flushed(n)) => {
                        info!(vr, interface, dropped_queued = n, "neighbors flushed");
                        Ok(json!({ "vr": vr, "dropped_queued": n }))
                    }
                    Ok(_) => Ok(json!({ "vr": vr })),
                    Err(e) => Err(ControlError::Invalid(e.0)),
                }
            }
            Command::InterfaceSet { vr, interface, mtu, up, addresses } => {
                let i = iface_index(self.vr_config(&vr)?, &interface)?;
                if let Some(list) = addresses {
                    let mut next = self.topo.clone();
                    let f = &mut next
                        .vrs
                        .iter_mut()
                        .find(|v| v.name == vr)
                        .expect("checked")
                        .interfaces[i as usize];
                    f.ipv4 = list
                        .iter()
                        .filter_map(|n| match n {
                            IpNet::V4(n) => Some(*n),
                            IpNet::V6(_) => None,
                        })
                        .collect();
                    f.ipv6 = list
                        .iter()
                        .filter_map(|n| match n {
                            IpNet::V6(n) => Some(*n),
                            IpNet::V4(_) => None,
                        })
                        .collect();
                    self.apply(next, false)?;
                }
                if let Some(m) = mtu {
                    self.vr_change(&vr, VrChange::Mtu(i, m))?;
                    self.topo_vr_mut(&vr).interfaces[i as usize].mtu = m;
                    info!(vr, interface, mtu = m, "interface mtu set");
                    let cp = self.topo.vr_index(&vr).and_then(|v| self.topo.control_plane(v));
                    if let Some(cp) = cp {
                        crate::netns::set_mirror_mtu(&cp.netns, &interface, m).map_err(|e| {
                            ControlError::State(format!("vr {vr}: mirror of {interface}: {e}"))
                        })?;
                    }
                }
                if let Some(u) = up {
                    self.vr_change(&vr, VrChange::Up(i, u))?;
                    let v = self.topo.vr_index(&vr).expect("checked");
                    self.topo.set_iface_down(v, i, !u);
                    info!(vr, interface, up = u, "interface set up/down");
                    // Its mirror follows, so the control plane's daemons see the link change.
                    let cp = self.topo.vr_index(&vr).and_then(|v| self.topo.control_plane(v));
                    if let Some(cp) = cp {
                        crate::netns::set_mirror_up(&cp.netns, &interface, u).map_err(|e| {
                            ControlError::State(format!("vr {vr}: mirror of {interface}: {e}"))
                        })?;
                    }
                }
                let addresses = self.vr_config(&vr)?.interfaces[i as usize]
                    .ipv4
                    .iter()
                    .map(|n| n.to_string())
                    .chain(
                        self.vr_config(&vr)?.interfaces[i as usize]
                            .ipv6
                            .iter()
                            .map(|n| n.to_string()),
                    )
                    .collect::<Vec<_>>();
                Ok(
                    json!({ "vr": vr, "interface": interface, "mtu": mtu, "up": up, "addresses": addresses }),
                )
            }
            Command::VrAdd { vr, ports } => {
                let name = vr.name.clone();
                let vr = serde_json::to_value(&vr).expect("documents serialize");
                let ports: Vec<Value> = ports
                    .iter()
                    .map(|p| serde_json::to_value(p).expect("documents serialize"))
                    .collect();
                let plan = self.edit_source(|doc| {
                    list(doc, "ports").extend(ports);
                    list(doc, "vrs").push(vr);
                })?;
                Ok(json!({ "vr": name, "plan": plan.steps }))
            }
            Command::VrRemove { vr } => {
                self.vr_config(&vr)?;
                let plan = if self.source.is_some() {
                    // The VR goes, with the ports nothing else uses (its cell closes them).
                    self.edit_source(|doc| {
                        list(doc, "vrs").retain(|v| v["name"] != json!(vr));
                        let mut used: Vec<Value> = Vec::new();
                        for v in list(doc, "vrs").iter() {
                            for i in v["interfaces"].as_array().into_iter().flatten() {
                                used.push(i["port"].clone());
                            }
                        }
                        for s in list(doc, "switches").iter() {
                            for m in s["members"].as_array().into_iter().flatten() {
                                used.push(m["port"].clone());
                            }
                        }
                        list(doc, "ports").retain(|p| used.contains(&p["name"]));
                    })?
                } else {
                    let mut next = self.topo.clone();
                    let i = next.vr_index(&vr).expect("checked");
                    next.vrs.remove(i);
                    next.schedule.remove(i);
                    self.apply(next, false)?
                };
                Ok(json!({ "plan": plan.steps }))
            }
            Command::Reserve { vr, spec } => {
                let words: Vec<&str> = spec.iter().map(String::as_str).collect();
                let r =
                    reservation_from_words(&words).map_err(|e| ControlError::BadRequest(e.0))?;
                self.rt.set_reservation(&vr, r)?;
                if let Some(i) = self.topo.vr_index(&vr) {
                    self.topo.schedule[i].reservation = r;
                }
                info!(vr, reservation = %spec.join(" "), "reservation set");
                let s = self.rt.snapshot()?;
                let v = s.vr(&vr).map(|(_, v)| v);
                Ok(json!({
                    "vr": vr,
                    "reservation": v.and_then(|v| v.reservation).map(reservation_json),
                    "pending_reservation": v.and_then(|v| v.pending).map(|p| p.map(reservation_json)),
                }))
            }
            Command::Move { vr, worker } => {
                let m = self.rt.move_vr(&vr, worker)?;
                info!(vr, moved = ?m.vrs, from = m.from, to = m.to, "vr moved");
                Ok(json!({ "moved": m.vrs, "from": m.from, "to": m.to }))
            }
            Command::Apply { topology, file, dry_run } => {
                let base = Path::new(&file).parent().unwrap_or(Path::new("."));
                let next = Topology::parse(&topology, &file, base)?;
                let plan = self.apply(next, dry_run)?;
                if !dry_run {
                    // What runs now is this text: vr_add and vr_remove edit it from here on.
                    self.source = Some((topology, file));
                }
                Ok(
                    json!({ "dry_run": dry_run, "plan": plan.steps, "unchanged": plan.unchanged, "text": plan.to_string() }),
                )
            }
            Command::CaptureStart { point, count, drops, ring } => {
                self.capture_start(point, count, drops, ring)
            }
            Command::CaptureRead { id, max } => self.capture_read(id, max),
            Command::CaptureStop { id } => {
                let Some(c) = self.captures.remove(&id) else {
                    return Err(ControlError::Invalid(format!("no capture {id}")));
                };
                // The cell may be gone (its VRs removed): then so is the tap.
                let _ = self.rt.on_cell(c.cell, |cell| drop(cell.set_capture(None)));
                Ok(json!({ "id": id, "taken": c.ring.taken(), "lost": c.ring.lost() }))
            }
            Command::TraceStart { vr, count } => {
                if !(1..=10_000).contains(&count) {
                    return Err(ControlError::BadRequest(format!(
                        "trace count {count}: 1..=10000"
                    )));
                }
                self.rt
                    .on_vr(&vr, move |c, v| c.set_trace(v, count))?
                    .map_err(|e| ControlError::Invalid(e.0))?;
                Ok(json!({ "vr": vr, "count": count }))
            }
            Command::TraceRead { vr } => self.trace_read(vr),
            Command::Snapshot { vr, out } => {
                crate::snapshot::snapshot_to_file(self, &vr, Path::new(&out))
            }
            Command::Restore { snapshot, name, down } => {
                let s = crate::snapshot::read(Path::new(&snapshot))?;
                crate::snapshot::restore(self, s.into_current(), name, down)
            }
            Command::Migrate { vr, to } => {
                let to = to.parse().map_err(|_| {
                    ControlError::BadRequest(format!("migrate to {to:?}: give IP:PORT"))
                })?;
                crate::migrate::migrate(self, &vr, to)
            }
            Command::MigrateCommit { vr, neighbors, counters } => {
                crate::migrate::commit(self, crate::migrate::FinalState { vr, neighbors, counters })
            }
            Command::Announce { vr } => {
                let n = crate::migrate::announce(self, &vr)?;
                Ok(json!({ "vr": vr, "frames": n }))
            }
            Command::Impair { port, impair } => {
                let plan = crate::impair::command(self, &port, impair)?;
                Ok(json!({ "port": port, "plan": plan.steps }))
            }
            Command::Stop => {
                info!("stop requested through the control socket");
                self.stop_requested = true;
                Ok(json!({ "state": "stopping" }))
            }
        }
    }

    /// Applies the running topology's text as `edit` changes it, and keeps the result as the
    /// new text. The text is read as plain data (scalars stay text, keys and order as
    /// written), so whatever the file holds survives the edit, comments aside.
    pub(crate) fn edit_source(
        &mut self,
        edit: impl FnOnce(&mut Value),
    ) -> Result<Plan, ControlError> {
        let Some((text, file)) = self.source.clone() else {
            return Err(ControlError::Invalid(
                "this host was started without its topology's text: use apply with the whole file"
                    .into(),
            ));
        };
        let node = yamlpath::parse_document(&text, "hosts:, ports:, switches:, vrs:")
            .map_err(|e| ControlError::Invalid(e.to_string()))?;
        let mut doc = plain(&node);
        edit(&mut doc);
        let text = crate::model::to_yaml(&doc);
        let base = Path::new(&file).parent().unwrap_or(Path::new(".")).to_path_buf();
        let mut next = Topology::parse(&text, &file, &base)?;
        // The edit adds or removes VRs: those it keeps stay up or down as they run, even where
        // `interface_set` changed that after the text was read.
        let running: Vec<(usize, Vec<u16>)> = (next.vrs.iter().enumerate())
            .filter_map(|(i, v)| {
                let j = self.topo.vr_index(&v.name)?;
                Some((i, self.topo.iface_down.get(j).cloned().unwrap_or_default()))
            })
            .collect();
        for (i, down) in running {
            for k in 0..next.vrs[i].interfaces.len() as u16 {
                next.set_iface_down(i, k, down.contains(&k));
            }
        }
        let plan = self.apply(next, false)?;
        self.source = Some((text, file));
        Ok(plan)
    }

    fn vr_change(&self, vr: &str, ch: VrChange) -> Result<VrAnswer, ControlError> {
        // Every replica of a replicated VR; the first one's answer.
        let answers = self.rt.on_vr_each(vr, move |c, v| c.change_vr(v, ch.clone()))?;
        let mut first = None;
        for a in answers {
            let a = a.map_err(|e| ControlError::Invalid(e.0))?;
            first.get_or_insert(a);
        }
        first.ok_or_else(|| ControlError::NoSuchVr(vr.into()))
    }

    fn topo_vr_mut(&mut self, vr: &str) -> &mut VrConfig {
        self.topo.vrs.iter_mut().find(|v| v.name == vr).expect("checked by the caller")
    }

    /// Workers, VRs (with routes by source, FIB size, neighbors, interfaces), ports, memory.
    pub fn status(&self) -> Result<Value, ControlError> {
        let snap = self.rt.snapshot()?;
        let mut j = snap.to_json();
        if let Some(vrs) = j["vrs"].as_array_mut() {
            for v in vrs {
                let name = v["name"].as_str().unwrap_or_default().to_string();
                if let Some(t) = self.tables.get(&name) {
                    let routes: serde_json::Map<_, _> =
                        t.counts().iter().map(|(s, n)| (s.name().to_string(), json!(n))).collect();
                    let (p4, p6) = t.fib_prefixes();
                    v["routes"] = Value::Object(routes);
                    v["fib"] = json!({ "ipv4": p4, "ipv6": p6, "bytes": t.fib_bytes(), "next_hops": t.next_hops() });
                }
                if let (Some([ops, skipped, overruns, refused, stale, stale_expired]), Some(i)) =
                    (self.sync_stats(&name), self.topo.vr_index(&name))
                {
                    let netns = self.topo.control_plane(i).map(|c| c.netns.clone());
                    v["control_plane"] = json!({
                        "netns": netns,
                        "route_ops": ops,
                        "skipped": skipped,
                        "overruns": overruns,
                        "refused": refused,
                        "stale": stale,
                        "stale_expired": stale_expired,
                    });
                }
            }
        }
        j["replicated"] = crate::replicas::status_json(&self.topo, &snap, &self.tables);
        j["msrs"] = crate::msr::status_json(&self.topo, &snap, &self.msrs);
        j["state"] = json!("running");
        j["memory"] = json!({ "rss_bytes": rss_bytes() });
        Ok(j)
    }

    /// The plan that would turn the running host into `next`, or why it cannot be done live.
    pub fn plan(&self, next: &Topology) -> Result<Plan, ControlError> {
        self.prepare(next).map(|(plan, _)| plan)
    }

    /// Carries out the plan from the running host to `next` (only computes it with
    /// `dry_run`). Refused whole, changing nothing, if any of it cannot be done live.
    pub fn apply(&mut self, next: Topology, dry_run: bool) -> Result<Plan, ControlError> {
        if !dry_run {
            if let Err(e) = self.make_new_mirrors(&next) {
                self.forget_new_mirrors(&next);
                return Err(e);
            }
        }
        let (plan, steps) = match self.prepare(&next) {
            Ok(p) => p,
            Err(e) => {
                self.forget_new_mirrors(&next);
                return Err(e);
            }
        };
        if dry_run {
            return Ok(plan);
        }
        let mut done = Vec::new();
        info!(steps = steps.len(), "apply: started");
        for step in steps {
            let what = self.run_step(step).map_err(|e| {
                warn!(error = %e, done = done.len(), "apply: stopped part way");
                ControlError::State(format!(
                    "apply stopped part way: {e}; done before it: [{}]; run `routeplex apply` again to finish",
                    done.join("; ")
                ))
            })?;
            done.push(what);
        }
        // Keep what the running host was given for routes added through the API.
        let cur = std::mem::replace(&mut self.topo, next);
        self.follow_control_planes(&cur)?;
        Ok(plan)
    }

    /// Removes the namespaces [`Node::make_new_mirrors`] made for `next` (it was refused).
    fn forget_new_mirrors(&mut self, next: &Topology) {
        for (i, v) in next.vrs.iter().enumerate() {
            if self.topo.vr_index(&v.name).is_none() {
                if let Some(cp) = next.control_plane(i) {
                    self.forget_mirror(&cp.netns.clone());
                }
            }
        }
    }

    fn run_step(&mut self, step: Step) -> Result<String, ControlError> {
        Ok(match step {
            Step::RemoveVr(name) => {
                let old = self.rt.remove_vr(&name)?;
                drop(old);
                self.tables.remove(&name);
                info!(vr = %name, "vr removed");
                format!("removed vr {name}")
            }
            Step::RemoveCell(c, vrs) => {
                self.rt.remove_cell(c)?;
                for v in &vrs {
                    self.tables.remove(v);
                    info!(vr = %v, cell = c, "vr removed");
                }
                format!("removed {}", vrs.join(", "))
            }
            Step::Routes { vr, ops } => {
                let a = self.route_ops(&vr, &ops)?;
                format!(
                    "vr {vr}: {} routes added, {} replaced, {} deleted",
                    a.added, a.replaced, a.deleted
                )
            }
            Step::Mtu { vr, iface, mtu } => {
                self.vr_change(&vr, VrChange::Mtu(iface, mtu))?;
                info!(vr, interface = iface, mtu, "interface mtu set");
                format!("vr {vr}: interface {iface} mtu {mtu}")
            }
            Step::Up { vr, iface, up, mirror } => {
                self.vr_change(&vr, VrChange::Up(iface, up))?;
                if let Some((ns, dev)) = mirror {
                    crate::netns::set_mirror_up(&ns, &dev, up).map_err(|e| {
                        ControlError::State(format!("vr {vr}: mirror of {dev}: {e}"))
                    })?;
                }
                info!(vr, interface = iface, up, "interface set up/down");
                format!("vr {vr}: interface {iface} {}", if up { "up" } else { "down" })
            }
            Step::Mirror { netns, dev, change } => {
                crate::netns::follow_mirror(&netns, &dev, &change).map_err(|e| {
                    ControlError::State(format!("control plane {netns}: mirror {dev}: {e}"))
                })?;
                info!(netns, dev, ?change, "mirror follows its interface");
                format!("mirror {netns}/{dev}")
            }
            Step::Replace { vr, table, new } => {
                let r = self
                    .rt
                    .on_vr(&vr, move |c, v| c.replace_vr(v, *new).map(drop).map_err(|e| e.0))?;
                r.map_err(ControlError::Invalid)?;
                self.tables.insert(vr.clone(), table);
                info!(vr, "vr rebuilt");
                format!("vr {vr}: rebuilt")
            }
            Step::NewCell { table, mut cell, worker, outside } => {
                for k in 0..cell.vrs().len() {
                    let name = cell.vrs()[k].name().to_string();
                    if let Some(i) = self.start_down.iter().position(|n| *n == name) {
                        self.start_down.remove(i);
                        for f in 0..cell.vrs()[k].interfaces().len() {
                            let _ = cell.change_vr(k, VrChange::Up(f as u16, false));
                        }
                    }
                }
                self.rt.add_cell(*cell, worker)?;
                self.outside.extend(outside);
                let names: Vec<String> = table.iter().map(|(n, _)| n.clone()).collect();
                for n in &names {
                    info!(vr = %n, worker, "vr added");
                }
                self.tables.extend(table);
                format!("started {}", names.join(", "))
            }
            Step::JoinCell { cell, ports, table, mut vr } => {
                self.down_from_start(&mut vr);
                let name = vr.name().to_string();
                self.rt.add_vr(cell, ports, *vr)?;
                self.tables.insert(name.clone(), table);
                info!(vr = %name, cell, "vr added");
                format!("added vr {name} to cell {cell}")
            }
            Step::Impair { port, cfg } => crate::impair::set(&self.rt, &port, cfg)?,
            Step::Idle(idle) => {
                self.rt.set_idle(idle)?;
                info!(idle = ?idle, "idle set");
                format!("idle {idle:?}")
            }
            Step::Schedule { vr, sched } => {
                self.rt.set_reservation(&vr, sched.reservation)?;
                let batch = usize::from(sched.batch.unwrap_or(ports::MAX_BURST as u16));
                self.rt
                    .on_vr(&vr, move |c, v| c.set_vr_batch(v, batch).map_err(|e| e.0))?
                    .map_err(ControlError::Invalid)?;
                if let Some(w) = sched.worker {
                    self.rt.move_vr(&vr, usize::from(w))?;
                }
                info!(vr, batch, worker = ?sched.worker, reservation = ?sched.reservation, "vr schedule set");
                format!("vr {vr}: schedule")
            }
        })
    }

    /// Diffs `next` against the running topology and builds what the plan needs.
    fn prepare(&self, next: &Topology) -> Result<(Plan, Vec<Step>), ControlError> {
        let cur = &self.topo;
        let mut refused = Vec::new();
        let fix = "cannot be applied to a running host; run `routeplex down FILE` then `routeplex up FILE` to make it";
        if cur.workers != next.workers {
            refused.push(format!("workers: {:?} -> {:?} {fix}", cur.workers, next.workers));
        }
        if cur.metrics != next.metrics {
            refused.push(format!("metrics changed: {fix}"));
        }
        if cur.migration != next.migration {
            refused.push(format!("migration changed: {fix}"));
        }
        if cur.hosts != next.hosts {
            refused.push(format!("hosts changed: {fix}"));
        }
        if switches_named(cur) != switches_named(next) {
            refused.push(format!("switches changed: {fix}"));
        }
        refused.extend(crate::replicas::refuse_changes(cur, next, fix));
        let cur_ports: BTreeMap<&str, &crate::PortSpec> =
            cur.ports.iter().map(|p| (p.name.as_str(), p)).collect();
        let next_ports: BTreeMap<&str, &crate::PortSpec> =
            next.ports.iter().map(|p| (p.name.as_str(), p)).collect();
        for (n, p) in &cur_ports {
            match next_ports.get(n) {
                Some(q) if !same_kind(cur, &p.kind, next, &q.kind) => {
                    refused.push(format!("port {n}: its kind or settings changed: {fix}"))
                }
                Some(q) if q.burst != p.burst => {
                    refused.push(format!("port {n}: burst changed: {fix}"))
                }
                _ => {}
            }
        }
        let mut plan = Plan::default();
        let mut steps = Vec::new();
        if cur.idle != next.idle {
            plan.steps.push(format!("~ idle: {:?} -> {:?}", cur.idle, next.idle));
            steps.push(Step::Idle(next.idle));
        }
        let vr_names = |t: &Topology| t.vrs.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
        let (old_names, new_names) = (vr_names(cur), vr_names(next));
        // Removals: whole cells whose VRs all go (with their ports), else VRs out of cells.
        let removed: Vec<&String> = old_names.iter().filter(|n| !new_names.contains(n)).collect();
        let mut cells_gone = Vec::new();
        for n in &removed {
            let (c, _) = self.rt.locate(n)?;
            if cells_gone.contains(&c) {
                continue;
            }
            let cell_vrs: Vec<String> = self.rt.cell_vrs(c).to_vec();
            let all_go = cell_vrs.iter().all(|v| removed.contains(&v));
            let next_rt: Vec<String> = next.ports.iter().map(|p| rt_port(next, &p.name)).collect();
            let ports_gone = self.rt.cell_ports(c).iter().all(|p| !next_rt.contains(p));
            if all_go && ports_gone {
                cells_gone.push(c);
                plan.steps.push(format!(
                    "- vr {} (its cell stops; ports {} close)",
                    cell_vrs.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                    self.rt.cell_ports(c).join(", ")
                ));
                steps.push(Step::RemoveCell(c, cell_vrs));
            } else {
                plan.steps.push(format!("- vr {n}"));
                steps.push(Step::RemoveVr((*n).clone()));
            }
        }
        for (n, p) in &cur_ports {
            if next_ports.contains_key(n) {
                continue;
            }
            // A mirror tap goes with its VR (and its cell).
            if let PortKind::Mirror { vr, .. } = p.kind {
                if removed.contains(&&cur.vrs[vr].name) {
                    continue;
                }
            }
            let gone =
                self.rt.cell_of_port(&rt_port(cur, n)).is_some_and(|c| cells_gone.contains(&c));
            if !gone {
                refused.push(format!(
                    "port {n}: removed while VRs or switches still use its cell: {fix}"
                ));
            }
        }
        // Changed VRs.
        for (i, v) in next.vrs.iter().enumerate() {
            let Some(j) = cur.vr_index(&v.name) else { continue };
            let (old, os, ns) = (&cur.vrs[j], &cur.schedule[j], &next.schedule[i]);
            let mut changed = false;
            let same_shape = old.interfaces.len() == v.interfaces.len()
                && old
                    .interfaces
                    .iter()
                    .zip(&v.interfaces)
                    .all(|(a, b)| IfaceConfig { mtu: b.mtu, port: b.port, ..a.clone() } == *b);
            let ports_same = old.interfaces.iter().map(|f| f.port_name(cur)).collect::<Vec<_>>()
                == v.interfaces.iter().map(|f| f.port_name(next)).collect::<Vec<_>>();
            if !ports_same {
                refused.push(format!("vr {}: an interface moved to another port: {fix}", v.name));
                continue;
            }
            if !same_shape || old.neighbors != v.neighbors || old.limits != v.limits {
                // Interfaces (addresses, MACs, VLANs), static neighbors or limits: a new VR
                // takes the old one's place, with its counters, neighbors and API routes.
                let (c, _) = self.rt.locate(&v.name)?;
                let local = self.local_ports(c, next, &[]);
                let mut cfg = v.clone();
                let mut table = RouteTable::new(&cfg).map_err(|e| ControlError::Invalid(e.0))?;
                // API routes, and a control plane's kernel routes: its sync sent them once and
                // will not again unless they change.
                let old_table = &self.tables[&v.name];
                let mut ops = old_table.ops_of(RouteSource::Api);
                let kernel = old_table.ops_of(RouteSource::Kernel);
                let api = ops.len();
                ops.extend(kernel);
                // One batch when every API route still fits; otherwise those whose gateway is
                // no longer connected are dropped with the old VR, one by one.
                let fits: Vec<bool> = match table.apply(&ops, |_| Ok(())) {
                    Ok(_) => vec![true; ops.len()],
                    Err(_) => ops
                        .iter()
                        .map(|op| table.apply(std::slice::from_ref(op), |_| Ok(())).is_ok())
                        .collect(),
                };
                let keep = fits[..api].iter().filter(|&&k| k).count();
                let kept_kernel = fits[api..].iter().filter(|&&k| k).count();
                cfg.interfaces.iter_mut().for_each(|f| f.port = local(f.port));
                let vr =
                    Vr::with_routes(&cfg, table.view()).map_err(|e| ControlError::Invalid(e.0))?;
                plan.steps.push(format!(
                    "~ vr {}: rebuilt in place ({}), keeping counters{} and {} API route(s){}",
                    v.name,
                    what_changed(old, v),
                    if same_ifaces(old, v) { ", neighbors" } else { "" },
                    keep,
                    if kept_kernel > 0 {
                        format!(", {kept_kernel} kernel route(s)")
                    } else {
                        String::new()
                    }
                ));
                steps.push(Step::Replace { vr: v.name.clone(), table, new: Box::new(vr) });
                // The new VR's interfaces are up, or as the old one's were: set each as `next`
                // says, and let the mirror taps follow the interfaces.
                steps.extend(self.follow_steps(next, i, j, true, &mut plan));
                changed = true;
            } else {
                for (k, (a, b)) in old.interfaces.iter().zip(&v.interfaces).enumerate() {
                    if a.mtu != b.mtu {
                        plan.steps.push(format!(
                            "~ vr {}: interface {} mtu {} -> {}",
                            v.name, b.name, a.mtu, b.mtu
                        ));
                        steps.push(Step::Mtu { vr: v.name.clone(), iface: k as u16, mtu: b.mtu });
                        changed = true;
                    }
                }
                let follow = self.follow_steps(next, i, j, false, &mut plan);
                changed |= !follow.is_empty();
                steps.extend(follow);
                let ops = route_diff(&old.routes, &v.routes);
                if !ops.is_empty() {
                    let (add, del) = ops.iter().fold((0, 0), |(a, d), op| match op {
                        RouteOp::Delete { .. } => (a, d + 1),
                        _ => (a + 1, d),
                    });
                    plan.steps.push(format!(
                        "~ vr {}: routes: {add} added or changed, {del} removed",
                        v.name
                    ));
                    steps.push(Step::Routes { vr: v.name.clone(), ops });
                    changed = true;
                }
            }
            if os != ns {
                let show = |s: &VrSchedule| match s.reservation {
                    Some(r) => r.to_string(),
                    None => "none".into(),
                };
                if os.reservation != ns.reservation {
                    plan.steps.push(format!(
                        "~ vr {}: reservation {} -> {}",
                        v.name,
                        show(os),
                        show(ns)
                    ));
                }
                if os.batch != ns.batch {
                    plan.steps
                        .push(format!("~ vr {}: batch {:?} -> {:?}", v.name, os.batch, ns.batch));
                }
                if os.worker != ns.worker && ns.worker.is_some() {
                    plan.steps.push(format!("~ vr {}: to worker {:?}", v.name, ns.worker));
                }
                steps.push(Step::Schedule { vr: v.name.clone(), sched: ns.clone() });
                changed = true;
            }
            if !changed {
                plan.unchanged.push(v.name.clone());
            }
        }
        // New VRs: on new ports (a new cell) or joining the cell of a port they share.
        let mut new_cells: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
        for (i, v) in next.vrs.iter().enumerate() {
            if cur.vr_index(&v.name).is_some() {
                continue;
            }
            let port_names: Vec<String> =
                v.interfaces.iter().map(|f| f.port_name(next).to_string()).collect();
            if let Some(p) = port_names
                .iter()
                .find(|p| matches!(next_ports[p.as_str()].kind, PortKind::Link { .. }))
            {
                refused.push(format!("vr {}: interface on a switch or link ({p}): {fix}", v.name));
                continue;
            }
            let cells: Vec<usize> =
                port_names.iter().filter_map(|p| self.rt.cell_of_port(&rt_port(next, p))).collect();
            let mut uniq = cells.clone();
            uniq.sort_unstable();
            uniq.dedup();
            let mirrors = mirror_ports(next, i);
            match uniq.as_slice() {
                // Its mirror taps open in its cell.
                [] => new_cells.push((port_names.into_iter().chain(mirrors).collect(), vec![i])),
                [_] if !mirrors.is_empty() => refused.push(format!(
                    "vr {}: a VR with a control plane joins a running cell (its ports are in use): {fix}",
                    v.name
                )),
                [c] => {
                    let fresh: Vec<String> = port_names
                        .iter()
                        .filter(|p| !cur_ports.contains_key(p.as_str()))
                        .cloned()
                        .collect();
                    let mut fresh_u = fresh.clone();
                    fresh_u.dedup();
                    let local = self.local_ports(*c, next, &fresh_u);
                    let (table, vr) = vr_in_cell(v, local)?;
                    let mut opened = Vec::new();
                    for p in &fresh_u {
                        let (port, _) = open_port(next, next.port_index(p).expect("named"))?;
                        opened.push(port);
                    }
                    plan.steps.push(format!(
                        "+ vr {} (joins the cell of {}{})",
                        v.name,
                        self.rt.cell_ports(*c).join(", "),
                        if fresh_u.is_empty() {
                            String::new()
                        } else {
                            format!("; opens {}", fresh_u.join(", "))
                        }
                    ));
                    steps.push(Step::JoinCell { cell: *c, ports: opened, table, vr: Box::new(vr) });
                    steps.extend(down_steps(next, i));
                    if next.schedule[i] != VrSchedule::default() {
                        steps.push(Step::Schedule {
                            vr: v.name.clone(),
                            sched: next.schedule[i].clone(),
                        });
                    }
                }
                _ => refused.push(format!(
                    "vr {}: its ports are in cells {uniq:?}, which would merge: {fix}",
                    v.name
                )),
            }
        }
        // VRs on new ports only: group those that share ports into cells, as the builder does.
        for (ports_of, vrs) in merge_cells(new_cells) {
            let mut opened = Vec::new();
            let mut outside = Vec::new();
            for p in &ports_of {
                if cur_ports.contains_key(p.as_str()) {
                    refused.push(format!("port {p}: in use by another cell: {fix}"));
                    continue;
                }
                let (port, out) = open_port(next, next.port_index(p).expect("named"))?;
                opened.push(port);
                if let Some(o) = out {
                    outside.push((p.clone(), o));
                }
            }
            let local = |gp: u16| {
                ports_of
                    .iter()
                    .position(|n| *n == next.ports[usize::from(gp)].name)
                    .expect("in the cell") as u16
            };
            let mut tables = Vec::new();
            let mut built = Vec::new();
            for &i in &vrs {
                let (t, vr) = vr_in_cell(&next.vrs[i], local)?;
                tables.push((next.vrs[i].name.clone(), t));
                built.push(vr);
            }
            let mut cell = dataplane::Cell::new(opened, built, Vec::new())
                .map_err(|e| ControlError::Invalid(e.0))?;
            for (k, &i) in vrs.iter().enumerate() {
                let s = &next.schedule[i];
                if let Some(cp) = next.control_plane(i) {
                    let bad = |e: dataplane::BuildError| ControlError::Invalid(e.0);
                    for p in mirror_ports(next, i) {
                        let g = next.port_index(&p).expect("named");
                        let PortKind::Mirror { iface, .. } = next.ports[g].kind else { continue };
                        cell.attach_mirror(k, iface, local(g as u16)).map_err(bad)?;
                    }
                    cell.set_punt_limit(k, cp.punt_per_sec, cp.punt_burst).map_err(bad)?;
                }
                cell.set_reservation(k, s.reservation).map_err(|e| ControlError::Invalid(e.0))?;
                if let Some(b) = s.batch {
                    cell.set_vr_batch(k, usize::from(b)).map_err(|e| ControlError::Invalid(e.0))?;
                }
            }
            for (k, p) in ports_of.iter().enumerate() {
                let b = next.ports[next.port_index(p).expect("named")]
                    .burst
                    .map_or(self.burst, usize::from);
                cell.set_port_burst(k, b).map_err(|e| ControlError::Invalid(e.0))?;
            }
            let worker = vrs.iter().find_map(|&i| next.schedule[i].worker).map(usize::from);
            let names: Vec<&str> = vrs.iter().map(|&i| next.vrs[i].name.as_str()).collect();
            plan.steps.push(format!(
                "+ vr {} (new cell; opens {})",
                names.join(", "),
                ports_of.join(", ")
            ));
            // The outside ends of new mem ports are kept for whoever asks (tests, benchmarks).
            steps.push(Step::NewCell { table: tables, cell: Box::new(cell), worker, outside });
            for &i in &vrs {
                steps.extend(down_steps(next, i));
            }
        }
        for (port, cfg, line) in crate::impair::changes(cur, next) {
            plan.steps.push(line);
            steps.push(Step::Impair { port: rt_port(next, &port), cfg });
        }
        if !refused.is_empty() {
            let mut msg =
                String::from("this change cannot be applied live; nothing was changed:\n");
            for r in &refused {
                let _ = writeln!(msg, "! {r}");
            }
            return Err(ControlError::NotLive(msg.trim_end().to_string()));
        }
        Ok((plan, steps))
    }

    /// The steps that set VR `next.vrs[i]` (the running `vrs[j]`) up or down per interface
    /// as `next` says (every interface when `all`, else those whose `up:` changed), and that
    /// carry its interfaces' MAC, MTU and address changes to its mirror taps.
    fn follow_steps(
        &self,
        next: &Topology,
        i: usize,
        j: usize,
        all: bool,
        plan: &mut Plan,
    ) -> Vec<Step> {
        let (cur, v) = (&self.topo, &next.vrs[i]);
        let netns = next.control_plane(i).map(|c| c.netns.clone());
        let mut steps = Vec::new();
        for (k, b) in v.interfaces.iter().enumerate() {
            let id = k as u16;
            let down = next.iface_down(i, id);
            if cur.iface_down(j, id) != down {
                plan.steps.push(format!(
                    "~ vr {}: interface {} {}",
                    v.name,
                    b.name,
                    if down { "down" } else { "up" }
                ));
            }
            if all || cur.iface_down(j, id) != down {
                let mirror = netns.clone().map(|n| (n, b.name.clone()));
                steps.push(Step::Up { vr: v.name.clone(), iface: id, up: !down, mirror });
            }
            let (Some(ns), Some(a)) = (&netns, cur.vrs[j].interfaces.get(k)) else { continue };
            if let Some(change) = crate::netns::MirrorChange::between(a, b) {
                steps.push(Step::Mirror { netns: ns.clone(), dev: b.name.clone(), change });
            }
        }
        steps
    }

    /// Cell-local port numbers for a VR of `next` joining cell `c`, which gains `fresh` ports.
    fn local_ports(&self, c: usize, next: &Topology, fresh: &[String]) -> impl Fn(u16) -> u16 {
        let mut names: Vec<String> = self.rt.cell_ports(c).to_vec();
        names.extend(fresh.iter().map(|p| rt_port(next, p)));
        let global: Vec<String> = next.ports.iter().map(|p| rt_port(next, &p.name)).collect();
        move |gp: u16| {
            names.iter().position(|n| *n == global[usize::from(gp)]).unwrap_or(u16::MAX as usize)
                as u16
        }
    }
}

/// The name the runtime knows port `name` of `t` by: what the open port reports, which for a
/// kernel port is its interface (`rpx-NAME` for a host's veth), not the topology's name.
fn rt_port(t: &Topology, name: &str) -> String {
    match t.port_index(name).map(|i| &t.ports[i].kind) {
        Some(PortKind::AfXdp(a, _) | PortKind::AfPacket(a)) => a.ifname().to_string(),
        Some(PortKind::Tap { ifname, .. }) => ifname.clone(),
        _ => name.to_string(),
    }
}

/// Whether two ports (of `a` and of `b`) are of the same kind with the same settings; an
/// internal link's peer compared by name.
fn same_kind(a: &Topology, ka: &PortKind, b: &Topology, kb: &PortKind) -> bool {
    match (ka, kb) {
        (PortKind::Link { peer: x }, PortKind::Link { peer: y }) => {
            a.ports[usize::from(*x)].name == b.ports[usize::from(*y)].name
        }
        _ => ka == kb,
    }
}

/// The switches as text, with their members' ports by name (port numbers shift when a port
/// earlier in the file goes).
fn switches_named(t: &Topology) -> Vec<String> {
    t.switches
        .iter()
        .map(|s| {
            let members: Vec<String> = s
                .members
                .iter()
                .map(|m| format!("{}: {:?}", t.ports[usize::from(m.port)].name, m.mode))
                .collect();
            format!("{} {members:?} {:?} {} {}", s.name, s.statics, s.mac_limit, s.aging_ms)
        })
        .collect()
}

/// A YAML document as plain JSON data: mappings, lists, and every scalar as text.
pub(crate) fn plain(n: &marked_yaml::Node) -> Value {
    match n {
        marked_yaml::Node::Scalar(s) => Value::String(s.as_str().to_string()),
        marked_yaml::Node::Sequence(l) => Value::Array(l.iter().map(plain).collect()),
        marked_yaml::Node::Mapping(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.as_str().to_string(), plain(v))).collect())
        }
    }
}

/// The list under `key` of a document, made empty if absent (or not a list).
fn list<'a>(doc: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !doc[key].is_array() {
        doc[key] = Value::Array(Vec::new());
    }
    doc[key].as_array_mut().expect("made a list above")
}

/// Route operations that turn `old` into `new` (static and table routes of one VR).
fn route_diff(old: &[RouteConfig], new: &[RouteConfig]) -> Vec<RouteOp> {
    let key = |r: &RouteConfig| (r.prefix, r.source);
    let o: HashMap<(IpNet, RouteSource), &RouteConfig> = old.iter().map(|r| (key(r), r)).collect();
    let n: HashMap<(IpNet, RouteSource), &RouteConfig> = new.iter().map(|r| (key(r), r)).collect();
    let mut ops: Vec<RouteOp> = old
        .iter()
        .filter(|r| !n.contains_key(&key(r)))
        .map(|r| RouteOp::Delete { prefix: r.prefix, source: r.source })
        .collect();
    ops.extend(
        new.iter().filter(|r| o.get(&key(r)) != Some(r)).map(|r| RouteOp::Replace(r.clone())),
    );
    ops
}

/// Groups new VRs that share ports into cells.
fn merge_cells(mut groups: Vec<(Vec<String>, Vec<usize>)>) -> Vec<(Vec<String>, Vec<usize>)> {
    let mut out: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
    while let Some((mut ports, mut vrs)) = groups.pop() {
        loop {
            let hit = out.iter().position(|(p, _)| p.iter().any(|x| ports.contains(x)));
            let Some(k) = hit else { break };
            let (p, v) = out.remove(k);
            ports.extend(p);
            vrs.extend(v);
        }
        ports.sort();
        ports.dedup();
        vrs.sort_unstable();
        out.push((ports, vrs));
    }
    out
}

/// A new VR's interfaces set `up: false`, taken down once it runs.
fn down_steps(next: &Topology, i: usize) -> Vec<Step> {
    let name = &next.vrs[i].name;
    let down = next.iface_down.get(i).map(Vec::as_slice).unwrap_or_default();
    down.iter().map(|&k| Step::Up { vr: name.clone(), iface: k, up: false, mirror: None }).collect()
}

/// Whether the interfaces sit on the same segments (their ports, compared by name by the
/// caller, and VLANs) with the same MACs.
fn same_ifaces(a: &VrConfig, b: &VrConfig) -> bool {
    a.interfaces.len() == b.interfaces.len()
        && a.interfaces.iter().zip(&b.interfaces).all(|(x, y)| (x.vlan, x.mac) == (y.vlan, y.mac))
}

fn what_changed(a: &VrConfig, b: &VrConfig) -> String {
    let mut w = Vec::new();
    if a.interfaces.len() != b.interfaces.len() {
        w.push("interfaces".to_string());
    } else {
        for (x, y) in a.interfaces.iter().zip(&b.interfaces) {
            if x.ipv4 != y.ipv4 || x.ipv6 != y.ipv6 {
                w.push(format!("{} addresses", y.name));
            }
            if x.mac != y.mac || x.vlan != y.vlan {
                w.push(format!("{} MAC or VLAN", y.name));
            }
        }
    }
    if a.neighbors != b.neighbors {
        w.push("static neighbors".into());
    }
    if a.limits != b.limits {
        w.push("limits".into());
    }
    w.join(", ")
}

fn iface_index(cfg: &VrConfig, name: &str) -> Result<u16, ControlError> {
    cfg.interfaces
        .iter()
        .position(|i| i.name == name)
        .map(|i| i as u16)
        .ok_or_else(|| ControlError::NoSuchInterface { vr: cfg.name.clone(), iface: name.into() })
}

fn applied(a: dataplane::routes::Applied) -> Result<Value, ControlError> {
    Ok(json!({
        "added": a.added, "replaced": a.replaced, "deleted": a.deleted,
        "fib_changes": a.fib_changes, "new_next_hops": a.new_next_hops,
        "generation": [a.generation4, a.generation6],
    }))
}

/// The process's resident memory, from /proc (0 where it cannot be read).
pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

trait PortName {
    fn port_name<'t>(&self, t: &'t Topology) -> &'t str;
}

impl PortName for IfaceConfig {
    fn port_name<'t>(&self, t: &'t Topology) -> &'t str {
        &t.ports[usize::from(self.port)].name
    }
}

/// What a next hop means, for people.
fn adj_text(adj: dataplane::Adj, ifname: &dyn Fn(u16) -> String) -> String {
    use dataplane::Adj;
    match adj {
        Adj::None => "no route".into(),
        Adj::Local => "local".into(),
        Adj::Blackhole => "blackhole".into(),
        Adj::Broadcast => "broadcast".into(),
        Adj::Glean(i) => format!("connected on {}", ifname(i)),
        Adj::Unreachable => "unreachable".into(),
        Adj::Prohibit => "prohibit".into(),
        Adj::Multi(p) => format!("multipath over {} buckets", p.buckets().len()),
        Adj::Via { iface, gw } => {
            let a = std::net::Ipv6Addr::from(gw);
            match a.to_ipv4_mapped() {
                Some(v4) => format!("via {v4} on {}", ifname(iface)),
                None => format!("via {a} on {}", ifname(iface)),
            }
        }
    }
}

/// The names of VR `vr`'s mirror ports in `t` (none without a control plane).
fn mirror_ports(t: &Topology, vr: usize) -> Vec<String> {
    t.ports
        .iter()
        .filter(|p| matches!(p.kind, PortKind::Mirror { vr: v, .. } if v == vr))
        .map(|p| p.name.clone())
        .collect()
}
