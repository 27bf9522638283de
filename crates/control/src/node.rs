//! The running host as control owns it: the topology last applied, every VR's [`RouteTable`]
//! (its RIB by source and FIB writers), and the workers ([`Runtime`]) that run the cells.
//!
//! Every change reaches the data plane as a typed operation on the worker that runs the VR,
//! between two of its polls ([`Runtime::on_cell`]); no worker is ever stopped. [`Node::execute`]
//! serves the API ([`crate::api::Command`]), handing each command to its file in `cmd/`;
//! [`Node::plan`] and [`Node::apply`] diff a topology against the running one (`plan.rs`) and
//! carry the difference out, step by step.
//!
//! `apply` is all or nothing where it can be: the whole plan is computed and everything it
//! needs (route tables, VRs, ports) is built before the first change to the running host, and
//! a plan with any change that cannot be made live (a port's kind, the workers, hosts,
//! switches) is refused whole with what to do instead.

use std::collections::HashMap;

use dataplane::config::VrConfig;
use dataplane::{RouteError, RouteOp, RouteTable, Vr, VrAnswer, VrChange};
use ports::mem::MemPort;
use tracing::{debug, info, warn};

use crate::build;
pub use crate::plan::Plan;
use crate::plan::Step;
use crate::runtime::{Options, Runtime};
use crate::topology::VrSchedule;
use crate::{ControlError, Topology};

// The API's handlers: a child of this module, so that they keep the node's fields private.
#[path = "cmd/mod.rs"]
mod cmd;

use cmd::observe::Capture;

/// The running host.
pub struct Node {
    topo: Topology,
    tables: HashMap<String, RouteTable>,
    rt: Runtime,
    outside: HashMap<String, MemPort>,
    /// Each `vxlan` port's handle, by port name (ports the host started with).
    vxlan: HashMap<String, ports::vxlan::VxlanHandle>,
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
    /// Interfaces held down after a restart (see [`crate::hold`]).
    held: crate::hold::Held,
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
    msrs: HashMap<String, crate::msr_state::MsrState>,
    /// VRs started from a checkpoint: their tables being built from the routes (see
    /// [`build_table`]), and whether the table they replace came from the checkpoint.
    building: Vec<(String, bool, Building)>,
    /// Their stand-ins, replaced in `tables` by [`Node::settle`], until [`Node::take_over`],
    /// with a reader of the table that replaced each (to tell whether it is still there) and
    /// whether the stand-in came from the checkpoint (to be checked against the routes).
    stand_ins: Vec<(String, RouteTable, fib::FibReader<u32>, bool)>,
}

/// A VR's table built in the background, with its whole configuration when its tables'
/// routes were read there ([`Topology::tables_deferred`]).
struct Built {
    table: RouteTable,
    whole: Option<VrConfig>,
}

/// The thread building a VR's table (see [`build_table`]).
type Building = std::thread::JoinHandle<Result<Built, ControlError>>;

/// The topology a deferred table is read from once, shared by the VRs' builders.
type Whole = std::sync::Arc<std::sync::OnceLock<Result<Topology, crate::TopologyError>>>;

/// Builds VR `cfg`'s table from its routes; when `deferred` names the file its tables were
/// left in, it is read first (once for all VRs) and must give the VR as `cfg` is but for its
/// tables' routes, with tables of sum `sum`: the sum its checkpoint was chosen by.
fn build_table(
    cfg: VrConfig,
    sum: Option<u32>,
    deferred: Option<(std::path::PathBuf, Whole)>,
) -> Result<Built, ControlError> {
    let Some((file, whole)) = deferred else {
        let table = RouteTable::new(&cfg).map_err(|e| ControlError::State(e.0))?;
        return Ok(Built { table, whole: None });
    };
    let topo = whole.get_or_init(|| Topology::load(&file));
    let topo = topo.as_ref().map_err(|e| ControlError::State(e.to_string()))?;
    let changed = || {
        ControlError::State(format!(
            "{} changed while the data plane started (its tables or the VR's settings are not those it was started with): start it again",
            file.display()
        ))
    };
    let v = topo.vrs.iter().position(|v| v.name == cfg.name).ok_or_else(changed)?;
    let whole = &topo.vrs[v];
    if topo.table_sum(v) != sum || !same_but_tables(whole, &cfg) {
        return Err(changed());
    }
    let table = RouteTable::new(whole).map_err(|e| ControlError::State(e.0))?;
    Ok(Built { table, whole: Some(whole.clone()) })
}

/// Whether `a` and `b` are the same VR but for the routes of their tables.
fn same_but_tables(a: &VrConfig, b: &VrConfig) -> bool {
    let own = |c: &VrConfig| {
        c.routes.iter().filter(|r| r.source != dataplane::RouteSource::Table).cloned().collect()
    };
    let (ra, rb): (Vec<_>, Vec<_>) = (own(a), own(b));
    (&a.name, &a.interfaces, &a.neighbors, &a.limits, ra)
        == (&b.name, &b.interfaces, &b.neighbors, &b.limits, rb)
}

/// Installs adjacency list `list` in VR `vr` on its worker, in every replica of a replicated
/// VR, before the FIB that uses it is published: the install step of `RouteTable::apply` and
/// `take_over`.
fn publish_adjacencies(
    rt: &crate::runtime::Runtime,
    vr: &str,
    list: &[(fib::NextHop, dataplane::Adj)],
) -> Result<(), dataplane::InstallError> {
    let list = list.to_vec();
    rt.on_vr_each(vr, move |cell, v| {
        cell.change_vr(v, VrChange::Adjacencies(list.clone()))
            .map(|_| ())
            .map_err(|e| dataplane::InstallError(e.0))
    })
    .map_err(|e| dataplane::InstallError(e.0))?
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
        Node::start_with(topo, opts, burst, checkpoints, crate::hold::Held::default())
    }

    /// As [`start_from`](Node::start_from), a restart that holds every VR interface that
    /// would be up down from before its worker first polls it, until `interface_set` takes it
    /// up; VRs added or rebuilt until [`Node::end_hold`] (the journal's replay) are held too
    /// (see [`crate::hold`]).
    pub fn start_holding(
        topo: Topology,
        opts: Options,
        burst: usize,
        checkpoints: &HashMap<String, Vec<u8>>,
    ) -> Result<Node, ControlError> {
        Node::start_with(topo, opts, burst, checkpoints, crate::hold::Held::holding())
    }

    fn start_with(
        topo: Topology,
        opts: Options,
        burst: usize,
        checkpoints: &HashMap<String, Vec<u8>>,
        mut held: crate::hold::Held,
    ) -> Result<Node, ControlError> {
        let mut host = build::host_from(&topo, None, burst, checkpoints)?;
        down_at_start(&topo, &mut host.cells, &mut held)?;
        let stand_ins = std::mem::take(&mut host.stand_ins);
        // The mirror taps exist now (opening the ports made them): dress them as their VR
        // interfaces.
        crate::netns::configure_mirrors(&topo, &|vr, i| held.is_held(vr, i))
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
        let vxlan = host.vxlan.into_iter().collect();
        let rt = Runtime::start(host.cells, opts)?;
        // After the workers: the critical path to forwarding comes first. With its tables
        // deferred, a VR that has tables is rebuilt even when its checkpoint was refused (it
        // forwards without their routes until then, which only a damaged checkpoint causes:
        // one whose sums differ is not offered).
        let whole = Whole::default();
        let building = (topo.vrs.iter().enumerate())
            .filter_map(|(v, cfg)| {
                let sum = topo.table_sum(v);
                let deferred = topo.tables_deferred.clone().filter(|_| sum.is_some());
                let from_checkpoint = stand_ins.contains(&cfg.name);
                if !from_checkpoint && deferred.is_none() {
                    return None;
                }
                let (cfg, later) = (cfg.clone(), deferred.map(|f| (f, whole.clone())));
                let h = std::thread::Builder::new()
                    .name(format!("table-{}", cfg.name))
                    .spawn(move || build_table(cfg, sum, later));
                Some(h.map(|h| (topo.vrs[v].name.clone(), from_checkpoint, h)))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ControlError::io("route table thread", e))?;
        let mut syncs = Vec::new();
        for (v, cfg) in topo.vrs.iter().enumerate() {
            if let Some(cp) = topo.control_plane(v) {
                let s = crate::cpsync::CpSync::start(cfg, &cp.netns)
                    .map_err(|e| ControlError::io("route sync thread", e))?;
                syncs.push(s);
            }
        }
        let msrs = crate::msr_state::MsrState::for_topology(&topo);
        Ok(Node {
            msrs,
            topo,
            tables,
            rt,
            outside,
            vxlan,
            queues,
            burst,
            stop_requested: false,
            source: None,
            captures: HashMap::new(),
            next_capture: 1,
            start_down: Vec::new(),
            held,
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
        self.building.iter().all(|(_, _, h)| h.is_finished())
    }

    /// Waits for the tables of the VRs started from a checkpoint and puts them in place of
    /// their stand-ins, whose FIBs the VRs go on reading until [`Node::take_over`]: route
    /// operations (a journal's replay) apply to the real tables from here on.
    pub fn settle(&mut self) -> Result<(), ControlError> {
        for (name, from_checkpoint, h) in std::mem::take(&mut self.building) {
            let t0 = std::time::Instant::now();
            let built = h
                .join()
                .map_err(|_| {
                    ControlError::State(format!("vr {name}: building its table panicked"))
                })?
                .map_err(|e| ControlError::State(format!("vr {name}: {e}")))?;
            if let Some(whole) = built.whole {
                if let Some(cfg) = self.topo.vrs.iter_mut().find(|v| v.name == name) {
                    *cfg = whole;
                }
            }
            let marker = built.table.fibs().0.reader();
            if let Some(stand_in) = self.tables.insert(name.clone(), built.table) {
                self.stand_ins.push((name.clone(), stand_in, marker, from_checkpoint));
            }
            info!(vr = %name, waited_ms = t0.elapsed().as_millis() as u64, "route table built from the routes");
        }
        self.topo.tables_deferred = None;
        Ok(())
    }

    /// Makes the tables [settled](Node::settle) publish to their VRs, in place of the stand-ins
    /// from the checkpoint (after installing any adjacency that differs, none when the
    /// checkpoint matched). Returns the VRs whose checkpoint forwarded otherwise than the
    /// table built from the routes (see [`RouteTable::disagreement`]), with where.
    pub fn take_over(&mut self) -> Result<Vec<(String, std::net::IpAddr)>, ControlError> {
        let mut wrong = Vec::new();
        for (name, stand_in, marker, from_checkpoint) in std::mem::take(&mut self.stand_ins) {
            // A replay that removed or rebuilt the VR left no VR reading the stand-in.
            let Some(table) = self.tables.get_mut(&name) else { continue };
            if !table.fibs().0.reader().same_as(&marker) {
                continue;
            }
            if let Some(at) = table.disagreement(&stand_in).filter(|_| from_checkpoint) {
                wrong.push((name.clone(), at));
            }
            let rt = &self.rt;
            let installed = table
                .take_over(&stand_in, |list| publish_adjacencies(rt, &name, list))
                .map_err(|e| ControlError::State(format!("vr {name}: {e}")))?;
            if installed > 0 {
                warn!(vr = %name, installed, "checkpoint: adjacencies differed from the rebuilt table's; installed");
            }
            match from_checkpoint {
                true => info!(vr = %name, "route table took over from the checkpoint"),
                false => info!(vr = %name, "route table with its tables' routes took over"),
            }
        }
        Ok(wrong)
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

    /// Takes VR `vr` down from the start if it was asked to be (before it ever forwards), and
    /// the interfaces of it that are held (see [`crate::hold`]).
    fn down_from_start(&mut self, vr: &mut Vr) {
        if let Some(i) = self.start_down.iter().position(|n| n == vr.name()) {
            self.start_down.remove(i);
            for k in 0..vr.interfaces().len() {
                let _ = vr.change(VrChange::Up(k as u16, false));
            }
        }
        for k in self.held.on_new(vr.name(), &vr.interfaces()) {
            let _ = vr.change(VrChange::Up(k, false));
        }
    }

    /// The journal's replay is over: VRs added from here on are not held (those held stay
    /// held until `interface_set` takes them up).
    pub fn end_hold(&mut self) {
        if self.held.is_holding() {
            self.held.end();
            info!(
                held = self.held.len(),
                "restart: replay done; held interfaces stay down until taken up"
            );
        }
    }

    /// Whether interface `iface` of VR `vr` is held down (see [`crate::hold`]).
    pub fn is_held(&self, vr: &str, iface: &str) -> bool {
        self.held.is_held(vr, iface)
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

    /// The handle of `vxlan` port `name`, for changing its remotes while it runs (what a fleet
    /// agent does when hosts join or leave) and reading its counters. `None`: no such vxlan
    /// port among those the host started with (one added later by `apply` has no handle yet).
    pub fn vxlan(&self, name: &str) -> Option<&ports::vxlan::VxlanHandle> {
        self.vxlan.get(name)
    }

    /// MSR `vr`'s state (`None`: no `msrs[]` entry names `vr`).
    pub fn msr_state(&mut self, vr: &str) -> Option<&mut crate::msr_state::MsrState> {
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
            let held = &self.held;
            crate::netns::configure_mirrors_of(&self.topo, i, &|vr, f| held.is_held(vr, f))
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

    fn vr_config(&self, vr: &str) -> Result<&VrConfig, ControlError> {
        self.topo.vrs.iter().find(|v| v.name == vr).ok_or_else(|| ControlError::NoSuchVr(vr.into()))
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

    /// The running host as a diff reads it.
    fn current(&self) -> crate::plan::Current<'_> {
        crate::plan::Current {
            topo: &self.topo,
            rt: &self.rt,
            tables: &self.tables,
            burst: self.burst,
        }
    }

    /// The steps from the running host to `next`, or why it cannot be done live.
    fn diff(&self, next: &Topology) -> Result<Vec<Step>, ControlError> {
        Ok(crate::plan::diff(&self.current(), next)?)
    }

    /// The plan that would turn the running host into `next`, or why it cannot be done live.
    pub fn plan(&self, next: &Topology) -> Result<Plan, ControlError> {
        self.diff(next).map(|steps| Plan::of(&steps, &self.topo, next))
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
        let steps = match self.diff(&next) {
            Ok(s) => s,
            Err(e) => {
                self.forget_new_mirrors(&next);
                return Err(e);
            }
        };
        let plan = Plan::of(&steps, &self.topo, &next);
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
        self.held.retain(&self.topo);
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

    /// Carries out one step; what it did, for the log of a plan stopped part way.
    fn run_step(&mut self, step: Step) -> Result<String, ControlError> {
        Ok(match step {
            Step::RemoveVr(name) => {
                let old = self.rt.remove_vr(&name)?;
                drop(old);
                self.tables.remove(&name);
                info!(vr = %name, "vr removed");
                format!("removed vr {name}")
            }
            Step::RemoveCell { cell, vrs, ports, .. } => {
                self.rt.remove_cell(cell)?;
                for p in &ports {
                    self.vxlan.remove(p);
                }
                for v in &vrs {
                    self.tables.remove(v);
                    info!(vr = %v, cell, "vr removed");
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
            Step::Mtu { vr, iface, mtu, .. } => {
                self.vr_change(&vr, VrChange::Mtu(iface, mtu))?;
                info!(vr, interface = iface, mtu, "interface mtu set");
                format!("vr {vr}: interface {iface} mtu {mtu}")
            }
            Step::Up { vr, iface, name, up, mirror, .. } => {
                if up && self.held.is_held(&vr, &name) {
                    // Only `interface_set` takes a held interface up.
                    info!(vr, interface = iface, "interface held down");
                    format!("vr {vr}: interface {iface} held down")
                } else {
                    self.held.release(&vr, &name, false);
                    self.set_up(vr, iface, up, mirror)?
                }
            }
            Step::Mirror { netns, dev, change, .. } => {
                crate::netns::follow_mirror(&netns, &dev, &change).map_err(|e| {
                    ControlError::State(format!("control plane {netns}: mirror {dev}: {e}"))
                })?;
                info!(netns, dev, ?change, "mirror follows its interface");
                format!("mirror {netns}/{dev}")
            }
            Step::Replace { vr, table, mut new, .. } => {
                self.down_from_start(&mut new);
                let r = self
                    .rt
                    .on_vr(&vr, move |c, v| c.replace_vr(v, *new).map(drop).map_err(|e| e.0))?;
                r.map_err(ControlError::Invalid)?;
                self.tables.insert(vr.clone(), table);
                info!(vr, "vr rebuilt");
                format!("vr {vr}: rebuilt")
            }
            Step::NewCell { table, cell, worker, outside, vxlan, .. } => {
                self.vxlan.extend(vxlan);
                self.start_cell(table, cell, worker, outside)?
            }
            Step::Leave { switch, port, cell } => {
                let p = (self.rt.cell_ports(cell).iter().rposition(|n| *n == port))
                    .ok_or_else(|| ControlError::State(format!("no port {port} in cell {cell}")))?;
                let sw = switch.clone();
                let r = self.rt.on_cell(cell, move |c| {
                    let s = (c.switches().iter().position(|s| s.name() == sw))
                        .ok_or_else(|| format!("no switch {sw} in the cell"))?;
                    c.remove_switch_member(s, p as u16).map_err(|e| e.0)
                })?;
                r.map_err(ControlError::State)?;
                info!(switch, port, "switch member left");
                format!("switch {switch}: member {port} left")
            }
            Step::AddPort { cell, port, name, switch, mode, vxlan, outside } => {
                self.rt.add_port_on_switch(cell, port, switch.clone(), mode)?;
                self.vxlan.extend(vxlan.map(|h| (name.clone(), h)));
                self.outside.extend(outside.map(|m| (name.clone(), m)));
                info!(port = %name, switch, cell, "port added to a running switch");
                format!("port {name}: opened, on switch {switch}")
            }
            Step::ClosePort { cell, port, name } => {
                self.rt.close_port(cell, &port)?;
                self.vxlan.remove(&name);
                self.outside.remove(&name);
                info!(port = %name, cell, "port closed");
                format!("port {name}: closed")
            }
            Step::Remotes { port, to, .. } => {
                let h = self.vxlan.get(&port).ok_or_else(|| {
                    ControlError::State(format!("port {port}: no vxlan handle to change"))
                })?;
                h.set_remotes(&to)
                    .map_err(|e| ControlError::Invalid(format!("port {port}: remotes: {e}")))?;
                info!(port, remotes = ?to, "vxlan remotes set");
                format!("port {port}: remotes set")
            }
            Step::JoinCell { cell, ports, table, mut vr, vxlan, members, outside, .. } => {
                self.vxlan.extend(vxlan);
                self.outside.extend(outside);
                self.down_from_start(&mut vr);
                let name = vr.name().to_string();
                if members.is_empty() {
                    self.rt.add_vr(cell, ports, *vr)?;
                } else {
                    self.rt.add_vr_on_switches(cell, ports, *vr, members)?;
                }
                self.tables.insert(name.clone(), table);
                info!(vr = %name, cell, "vr added");
                format!("added vr {name} to cell {cell}")
            }
            Step::Impair { port, cfg, .. } => crate::impair::set(&self.rt, &port, cfg)?,
            Step::Idle { to, .. } => {
                self.rt.set_idle(to)?;
                info!(idle = ?to, "idle set");
                format!("idle {to:?}")
            }
            Step::Schedule { vr, sched, .. } => self.schedule(vr, sched)?,
        })
    }

    /// Sets interface `iface` of VR `vr` up or down, and its mirror tap with it.
    fn set_up(
        &mut self,
        vr: String,
        iface: u16,
        up: bool,
        mirror: Option<(String, String)>,
    ) -> Result<String, ControlError> {
        self.vr_change(&vr, VrChange::Up(iface, up))?;
        if let Some((ns, dev)) = mirror {
            crate::netns::set_mirror_up(&ns, &dev, up)
                .map_err(|e| ControlError::State(format!("vr {vr}: mirror of {dev}: {e}")))?;
        }
        info!(vr, interface = iface, up, "interface set up/down");
        Ok(format!("vr {vr}: interface {iface} {}", if up { "up" } else { "down" }))
    }

    /// Starts a new cell (its VRs down from the start where asked) on `worker`.
    fn start_cell(
        &mut self,
        table: Vec<(String, RouteTable)>,
        mut cell: Box<dataplane::Cell>,
        worker: Option<usize>,
        outside: Vec<(String, MemPort)>,
    ) -> Result<String, ControlError> {
        for k in 0..cell.vrs().len() {
            let name = cell.vrs()[k].name().to_string();
            if let Some(i) = self.start_down.iter().position(|n| *n == name) {
                self.start_down.remove(i);
                for f in 0..cell.vrs()[k].interfaces().len() {
                    let _ = cell.change_vr(k, VrChange::Up(f as u16, false));
                }
            }
            hold_new(&mut self.held, &mut cell, k);
        }
        self.rt.add_cell(*cell, worker)?;
        self.outside.extend(outside);
        let names: Vec<String> = table.iter().map(|(n, _)| n.clone()).collect();
        for n in &names {
            info!(vr = %n, worker, "vr added");
        }
        self.tables.extend(table);
        Ok(format!("started {}", names.join(", ")))
    }

    /// Sets VR `vr`'s reservation, batch and worker.
    fn schedule(&mut self, vr: String, sched: VrSchedule) -> Result<String, ControlError> {
        self.rt.set_reservation(&vr, sched.reservation)?;
        let batch = usize::from(sched.batch.unwrap_or(ports::MAX_BURST as u16));
        self.rt
            .on_vr(&vr, move |c, v| c.set_vr_batch(v, batch).map_err(|e| e.0))?
            .map_err(ControlError::Invalid)?;
        if let Some(w) = sched.worker {
            self.rt.move_vr(&vr, usize::from(w))?;
        }
        info!(vr, batch, worker = ?sched.worker, reservation = ?sched.reservation, "vr schedule set");
        Ok(format!("vr {vr}: schedule"))
    }
}

/// Before the workers start: the interfaces of `cells` set `up: false` in `topo` go down
/// (their mirrors were left down), and on a restart that holds, every other one too, held (a
/// replica's interfaces as its VR's).
fn down_at_start(
    topo: &Topology,
    cells: &mut [build::Placed],
    held: &mut crate::hold::Held,
) -> Result<(), ControlError> {
    for p in cells {
        for k in 0..p.cell.vrs().len() {
            let name = p.cell.vrs()[k].name().to_string();
            if let Some(v) = topo.vr_index(crate::hold::logical(&name)) {
                for &i in topo.iface_down.get(v).into_iter().flatten() {
                    let down = p.cell.change_vr(k, VrChange::Up(i, false));
                    down.map_err(|e| ControlError::Invalid(e.0))?;
                }
            }
            hold_new(held, &mut p.cell, k);
        }
    }
    Ok(())
}

/// Takes the interfaces of VR `k` of `cell`, about to run, down where `held` holds them.
fn hold_new(held: &mut crate::hold::Held, cell: &mut dataplane::Cell, k: usize) {
    for f in held.on_new(cell.vrs()[k].name(), &cell.vrs()[k].interfaces()) {
        let _ = cell.change_vr(k, VrChange::Up(f, false));
    }
}

/// The process's resident memory, from /proc (0 where it cannot be read).
pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}
