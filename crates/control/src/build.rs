//! Building a host from a topology: its ports, VRs and switches, as one engine ([`engine`], one
//! thread) or as cells for a multi-worker runtime ([`host`], see [`crate::runtime`]). Both apply
//! the topology's receive bursts, batch limits and reservations.

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

use dataplane::config::VrConfig;
use dataplane::{Cell, Clock, Engine, RouteTable, Switch, Vr};
use ports::mem::{self, MemPort};
use ports::Port;

use crate::topology::VrSchedule;
use crate::{PortKind, Topology};

/// Slots per direction of an internal link.
const LINK_RING: usize = 1024;

/// An engine built from a topology, and the outside end of each `mem` port (`None` where
/// the port's other end is inside the host: links).
pub struct Built {
    pub engine: Engine,
    pub outside: Vec<Option<MemPort>>,
}

impl Built {
    /// Takes the outside end of `mem` port `name`.
    pub fn take_outside(&mut self, topo: &Topology, name: &str) -> Result<MemPort, BuildError> {
        take(&mut self.outside, topo, name)
    }
}

/// A host built from a topology as cells, each with the worker the topology places it on, and
/// the outside end of each `mem` port.
pub struct Host {
    pub cells: Vec<Placed>,
    pub outside: Vec<Option<MemPort>>,
    /// Each VR's routes, in the topology's VR order: the writers of the FIBs its VR reads
    /// (all its replicas read them, for a replicated VR).
    pub tables: Vec<RouteTable>,
    /// Per `mem` port of a replicated VR: the outside end of each queue, queue `r` being
    /// replica `r`'s (`None` for other ports: those of plain VRs, whose outside end is in
    /// `outside`, and a replicated VR's `afpacket` and `memif` ports, which have none).
    pub queues: Vec<Option<Vec<MemPort>>>,
    /// The VRs whose table in `tables` is a stand-in made from a checkpoint (see
    /// [`crate::checkpoint`]): their tables from the routes are still to be built.
    pub stand_ins: Vec<String>,
    /// Each `vxlan` port's handle (its remotes, its counters), by port name.
    pub vxlan: Vec<(String, ports::vxlan::VxlanHandle)>,
}

/// A cell and the worker the topology places it on (`None`: anywhere).
pub struct Placed {
    pub cell: Cell,
    pub worker: Option<usize>,
}

impl Host {
    /// Takes the outside end of `mem` port `name`.
    pub fn take_outside(&mut self, topo: &Topology, name: &str) -> Result<MemPort, BuildError> {
        take(&mut self.outside, topo, name)
    }
}

fn take(
    outside: &mut [Option<MemPort>],
    topo: &Topology,
    name: &str,
) -> Result<MemPort, BuildError> {
    let i = topo.port_index(name).ok_or_else(|| BuildError(format!("no port named {name:?}")))?;
    outside[i]
        .take()
        .ok_or_else(|| BuildError(format!("port {name:?} has no outside end (or it was taken)")))
}

/// Why a host could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(pub String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

/// Builds the engine of `topo`, with `vrs` in place of the topology's VRs when given (callers
/// that add routes, like the demo). Kernel ports (AF_XDP, AF_PACKET, tap) are opened on their
/// interfaces, which must exist (`routeplex up` makes those of hosts).
pub fn engine(topo: &Topology, vrs: Option<&[VrConfig]>) -> Result<Built, BuildError> {
    engine_with_burst(topo, vrs, ports::MAX_BURST)
}

/// As [`engine`], receiving at most `burst` (1..=256) frames per poll from ports whose
/// topology gives no `burst`. Reservations that need a clock get a monotonic one
/// ([`monotonic_clock`]).
pub fn engine_with_burst(
    topo: &Topology,
    vrs: Option<&[VrConfig]>,
    burst: usize,
) -> Result<Built, BuildError> {
    let (ours, outside) = open_ports(topo)?;
    let vr_cfgs = vrs.unwrap_or(&topo.vrs);
    let vrs =
        vr_cfgs.iter().map(Vr::new).collect::<Result<Vec<_>, _>>().map_err(|e| BuildError(e.0))?;
    let switches = topo
        .switches
        .iter()
        .map(Switch::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BuildError(e.0))?;
    let mut engine = Engine::build(ours, vrs, switches, burst).map_err(|e| BuildError(e.0))?;
    let ports: Vec<usize> = (0..topo.ports.len()).collect();
    let names: Vec<&str> = vr_cfgs.iter().map(|v| v.name.as_str()).collect();
    configure(topo, engine.cell_mut(), &ports, &names)?;
    if engine.cell().needs_clock() {
        engine.set_clock(monotonic_clock());
    }
    Ok(Built { engine, outside })
}

/// Builds `topo` as cells (see [`Topology::cells`]), with `vrs` in place of the topology's VRs
/// when given (same names). Ports receive at most `burst` (1..=256) frames per poll unless the
/// topology says otherwise.
pub fn host(topo: &Topology, vrs: Option<&[VrConfig]>, burst: usize) -> Result<Host, BuildError> {
    host_from(topo, vrs, burst, &HashMap::new())
}

/// As [`host`], the VRs named in `checkpoints` (not replicated ones) forwarding with a stand-in
/// table made from their checkpoint ([`RouteTable::from_checkpoint`]); one that is refused is
/// logged and built from its routes.
pub fn host_from(
    topo: &Topology,
    vrs: Option<&[VrConfig]>,
    burst: usize,
    checkpoints: &HashMap<String, Vec<u8>>,
) -> Result<Host, BuildError> {
    if !(1..=ports::MAX_BURST).contains(&burst) {
        return Err(BuildError(format!("burst {burst} is outside 1..={}", ports::MAX_BURST)));
    }
    let vr_cfgs = vrs.unwrap_or(&topo.vrs);
    if vr_cfgs.len() != topo.vrs.len() {
        return Err(BuildError(format!(
            "{} VR configs for a topology of {} VRs",
            vr_cfgs.len(),
            topo.vrs.len()
        )));
    }
    let plans = topo.cells();
    let copies_of = |plan: &crate::topology::CellPlan| {
        plan.vrs.first().and_then(|&v| topo.schedule.get(v)).map_or(1, |s| s.copies())
    };
    let mut skip = vec![false; topo.ports.len()];
    for plan in plans.iter().filter(|p| copies_of(p) > 1) {
        plan.ports.iter().for_each(|&p| skip[usize::from(p)] = true);
    }
    let mut vxlan = Vec::new();
    let (mut ports, outside) = open_ports_except(topo, &skip, &mut vxlan)?;
    let mut tables: Vec<Option<RouteTable>> = (0..vr_cfgs.len()).map(|_| None).collect();
    let mut queues: Vec<Option<Vec<MemPort>>> = (0..topo.ports.len()).map(|_| None).collect();
    let mut cells = Vec::new();
    let mut stand_ins = Vec::new();
    for plan in plans {
        let copies = copies_of(&plan);
        if copies > 1 {
            let v = plan.vrs[0];
            // Its ports are re-made a queue per replica: the single ones opened above must let
            // go of their interfaces first (an AF_XDP queue takes one socket).
            for &p in &plan.ports {
                ports[usize::from(p)] = None;
            }
            let (table, replica_cells) = replicated(topo, &plan, &vr_cfgs[v], copies, burst)?;
            for (&p, outs) in plan.ports.iter().zip(replica_cells.1) {
                queues[usize::from(p)] = outs;
            }
            tables[v] = Some(table);
            for (r, cell) in replica_cells.0.into_iter().enumerate() {
                cells.push(Placed { cell, worker: Some(r) });
            }
            continue;
        }
        let mut cell_ports: Vec<Box<dyn Port>> = Vec::new();
        for &p in &plan.ports {
            cell_ports.push(ports[usize::from(p)].take().expect("a port is in one cell"));
        }
        let stand_in = |cfg: &VrConfig| {
            let t = checkpoints.get(&cfg.name).and_then(|b| {
                RouteTable::from_checkpoint(cfg, b)
                    .map_err(|e| {
                        tracing::warn!(vr = %cfg.name, error = %e, "checkpoint refused; building the VR's table from its routes");
                    })
                    .ok()
            });
            if t.is_some() {
                stand_ins.push(cfg.name.clone());
            }
            t
        };
        let (cell, built) = plan_cell(topo, &plan, vr_cfgs, cell_ports, burst, stand_in)?;
        for (&v, table) in plan.vrs.iter().zip(built) {
            tables[v] = Some(table);
        }
        let worker = plan.vrs.iter().find_map(|&v| topo.schedule.get(v)?.worker);
        cells.push(Placed { cell, worker: worker.map(usize::from) });
    }
    let tables = tables.into_iter().map(|t| t.expect("every VR is in a cell")).collect();
    let mut outside = outside;
    for (p, q) in queues.iter().enumerate() {
        if q.is_some() {
            outside[p] = None;
        }
    }
    Ok(Host { cells, outside, tables, queues, stand_ins, vxlan })
}

/// The cell of `plan` over its opened `cell_ports` (in the plan's order): its VRs (each
/// table from `stand_in`, else built from its routes) and switches, configured as `topo`
/// says. Returns it with its VRs' tables, in the plan's order.
fn plan_cell(
    topo: &Topology,
    plan: &crate::topology::CellPlan,
    vr_cfgs: &[VrConfig],
    cell_ports: Vec<Box<dyn Port>>,
    burst: usize,
    mut stand_in: impl FnMut(&VrConfig) -> Option<RouteTable>,
) -> Result<(Cell, Vec<RouteTable>), BuildError> {
    // Cell-local port numbers: position in the plan.
    let local = |p: u16| plan.ports.iter().position(|&x| x == p).expect("in its cell") as u16;
    let mut vrs = Vec::new();
    let mut tables = Vec::new();
    for &v in &plan.vrs {
        let cfg = &vr_cfgs[v];
        let (table, vr) = vr_in_cell_with(cfg, local, stand_in(cfg))?;
        tables.push(table);
        vrs.push(vr);
    }
    let mut switches = Vec::new();
    for &s in &plan.switches {
        let mut cfg = topo.switches[s].clone();
        for m in &mut cfg.members {
            m.port = local(m.port);
        }
        switches.push(Switch::new(&cfg).map_err(|e| BuildError(e.0))?);
    }
    let mut cell = Cell::new(cell_ports, vrs, switches).map_err(|e| BuildError(e.0))?;
    for p in 0..cell.port_count() {
        cell.set_port_burst(p, burst).map_err(|e| BuildError(e.0))?;
    }
    let global: Vec<usize> = plan.ports.iter().map(|&p| usize::from(p)).collect();
    let names: Vec<&str> = plan.vrs.iter().map(|&v| vr_cfgs[v].name.as_str()).collect();
    configure(topo, &mut cell, &global, &names)?;
    Ok((cell, tables))
}

/// A cell a running host gains whole (a new switch segment with its ports and VRs, see
/// `plan`), built as [`host`] builds one.
pub struct Segment {
    pub cell: Cell,
    /// Its VRs' route tables, by VR name.
    pub tables: Vec<(String, RouteTable)>,
    /// The outside ends of its `mem` ports, by port name.
    pub outside: Vec<(String, MemPort)>,
    /// Its `vxlan` ports' handles, by port name.
    pub vxlan: Vec<(String, ports::vxlan::VxlanHandle)>,
}

/// Opens the ports of cell `plan` of `topo` (none of them open yet) and builds its cell.
pub fn segment(
    topo: &Topology,
    plan: &crate::topology::CellPlan,
    burst: usize,
) -> Result<Segment, BuildError> {
    let mut skip = vec![true; topo.ports.len()];
    plan.ports.iter().for_each(|&p| skip[usize::from(p)] = false);
    let mut vxlan = Vec::new();
    let (mut ours, mut outside) = open_ports_except(topo, &skip, &mut vxlan)?;
    let cell_ports: Vec<Box<dyn Port>> =
        (plan.ports.iter()).map(|&p| ours[usize::from(p)].take().expect("opened")).collect();
    let (cell, tables) = plan_cell(topo, plan, &topo.vrs, cell_ports, burst, |_| None)?;
    let names = plan.vrs.iter().map(|&v| topo.vrs[v].name.clone());
    let outside = (plan.ports.iter())
        .filter_map(|&p| {
            Some((topo.ports[usize::from(p)].name.clone(), outside[usize::from(p)].take()?))
        })
        .collect();
    Ok(Segment { cell, tables: names.zip(tables).collect(), outside, vxlan })
}

/// A replicated VR's cells (replica `r`'s cell owns queue `r` of each of the plan's ports,
/// see [`replica_queues`]) with the outside ends of the queues per port (in the plan's port
/// order; `mem` ports only), and the one route table every replica reads.
#[allow(clippy::type_complexity)]
fn replicated(
    topo: &Topology,
    plan: &crate::topology::CellPlan,
    cfg: &VrConfig,
    copies: usize,
    burst: usize,
) -> Result<(RouteTable, (Vec<Cell>, Vec<Option<Vec<MemPort>>>)), BuildError> {
    let local = |p: u16| plan.ports.iter().position(|&x| x == p).expect("in its cell") as u16;
    let table = RouteTable::new(cfg).map_err(|e| BuildError(e.0))?;
    let mut cell_cfg = cfg.clone();
    for i in &mut cell_cfg.interfaces {
        i.port = local(i.port);
    }
    let vrs = dataplane::replica::replicas(&cell_cfg, &table.view(), copies)
        .map_err(|e| BuildError(e.0))?;
    // Per port: one queue per replica (transposed below to one port of each per replica).
    let mut per_port = Vec::new();
    let mut outside = Vec::new();
    for &p in &plan.ports {
        let (queues, outs) = replica_queues(&topo.ports[usize::from(p)], copies)?;
        per_port.push(queues.into_iter());
        outside.push(outs);
    }
    let mut cells = Vec::new();
    for vr in vrs {
        let cell_ports: Vec<Box<dyn Port>> =
            per_port.iter_mut().map(|q| q.next().expect("a queue per replica")).collect();
        let mut cell = Cell::new(cell_ports, vec![vr], Vec::new()).map_err(|e| BuildError(e.0))?;
        for p in 0..cell.port_count() {
            cell.set_port_burst(p, burst).map_err(|e| BuildError(e.0))?;
        }
        let global: Vec<usize> = plan.ports.iter().map(|&p| usize::from(p)).collect();
        configure(topo, &mut cell, &global, &[cfg.name.as_str()])?;
        cells.push(cell);
    }
    Ok((table, (cells, outside)))
}

/// A replicated VR's AF_XDP port `spec`: one port per replica (`n`), sharing the interface's
/// XDP program; replica `r`'s holds the queues `q` of the port's (by default all the
/// interface's) with `q mod n == r` and receives from them in turn. Fails, naming the port, the
/// interface and its queue count, where the interface has fewer queues than replicas.
fn afxdp_queues(
    spec: &crate::topology::PortSpec,
    n: usize,
) -> Result<Vec<Box<dyn Port>>, BuildError> {
    let PortKind::AfXdp(a, x) = &spec.kind else {
        return Err(BuildError(format!("port {} is not an afxdp port", spec.name)));
    };
    let ports = ports::afxdp::AfXdpPort::open_spread(a.ifname(), &x.options(a.netns_path()), n)
        .map_err(|e| BuildError(format!("port {}: {e}", spec.name)))?;
    Ok(ports.into_iter().map(|p| Box::new(p) as Box<dyn Port>).collect())
}

/// Port `spec` of a replicated VR as `copies` queues, queue `r` for replica `r`, spread by
/// what the backend offers (no dispatcher thread): `mem`, a pair per queue whose outside ends
/// are returned (the peer spreads over them, e.g. `dataplane::replica::RssPort`); `afpacket`,
/// a socket per queue in one kernel fanout group hashing flows symmetrically; `memif`, ring
/// `r` of each direction (`queues:` must equal the replicas; the peer picks the ring).
#[allow(clippy::type_complexity)]
fn replica_queues(
    spec: &crate::topology::PortSpec,
    copies: usize,
) -> Result<(Vec<Box<dyn Port>>, Option<Vec<MemPort>>), BuildError> {
    let err = |e: std::io::Error| BuildError(format!("port {}: {e}", spec.name));
    match &spec.kind {
        &PortKind::Mem { ring } => {
            let (mut ours, mut outs) = (Vec::new(), Vec::new());
            for r in 0..copies {
                let name = dataplane::replica::replica_name(&spec.name, r);
                let (a, b) = mem::pair(&name, &format!("{name}-outside"), ring);
                ours.push(Box::new(a) as Box<dyn Port>);
                outs.push(b);
            }
            Ok((ours, Some(outs)))
        }
        PortKind::AfPacket(a) => {
            let opts =
                ports::afpacket::AfPacketOptions { netns: a.netns_path(), ..Default::default() };
            let socks = ports::afpacket::AfPacketPort::open_fanout(a.ifname(), &opts, copies)
                .map_err(err)?;
            Ok((socks.into_iter().map(|s| Box::new(s) as Box<dyn Port>).collect(), None))
        }
        PortKind::Memif(m) => {
            if usize::from(m.queues) != copies {
                return Err(BuildError(format!(
                    "port {}: memif with queues: {}, but its VR has replicas: {copies}: give it queues: {copies}",
                    spec.name, m.queues
                )));
            }
            let queues = open_memif(&spec.name, m)?.split(copies).map_err(err)?;
            Ok((queues.into_iter().map(|q| Box::new(q) as Box<dyn Port>).collect(), None))
        }
        // AF_XDP: the interface's queues dealt out over the replicas (`afxdp_queues`).
        PortKind::AfXdp(..) => Ok((afxdp_queues(spec, copies)?, None)),
        other => Err(BuildError(format!(
            "port {}: kind {} cannot be a replicated VR's port: only mem, afpacket, memif and afxdp are received per replica",
            spec.name,
            kind_name(other)
        ))),
    }
}

/// A port kind as the topology spells it.
fn kind_name(k: &PortKind) -> &'static str {
    match k {
        PortKind::Mem { .. } => "mem",
        PortKind::Link { .. } => "link",
        PortKind::AfXdp(..) => "afxdp",
        PortKind::AfPacket(..) => "afpacket",
        PortKind::Memif(..) => "memif",
        PortKind::VhostUser(..) => "vhost-user",
        PortKind::Tap { .. } => "tap",
        PortKind::Vxlan(..) => "vxlan",
        PortKind::Mirror { .. } => "mirror",
    }
}

/// A VR's route table (made from its host-wide config) and the VR reading it, its ports
/// renumbered by `local` (host port id to the cell's).
pub fn vr_in_cell(
    cfg: &VrConfig,
    local: impl Fn(u16) -> u16,
) -> Result<(RouteTable, Vr), BuildError> {
    vr_in_cell_with(cfg, local, None)
}

/// As [`vr_in_cell`], with `table` in place of one built from `cfg` when given.
fn vr_in_cell_with(
    cfg: &VrConfig,
    local: impl Fn(u16) -> u16,
    table: Option<RouteTable>,
) -> Result<(RouteTable, Vr), BuildError> {
    let table = match table {
        Some(t) => t,
        None => RouteTable::new(cfg).map_err(|e| BuildError(e.0))?,
    };
    // Without its routes (the VR forwards with the table's FIBs): a full table's half million
    // routes are not copied on the way to forwarding.
    let mut cell_cfg = VrConfig {
        name: cfg.name.clone(),
        interfaces: cfg.interfaces.clone(),
        routes: Vec::new(),
        neighbors: cfg.neighbors.clone(),
        limits: cfg.limits,
    };
    for i in &mut cell_cfg.interfaces {
        i.port = local(i.port);
    }
    let vr = Vr::with_routes(&cell_cfg, table.view()).map_err(|e| BuildError(e.0))?;
    Ok((table, vr))
}

/// A port a running host gains, as [`open_port`] opened it.
pub struct Opened {
    /// The engine's end.
    pub port: Box<dyn Port>,
    /// The outside end of a `mem` port.
    pub outside: Option<MemPort>,
    /// A `vxlan` port's handle (its remotes change live through it).
    pub vxlan: Option<ports::vxlan::VxlanHandle>,
}

/// Opens port `i` of `topo` alone (a port a running host gains): the engine's end, the
/// outside end of a `mem` port, a `vxlan` port's handle. Links come in pairs and are refused
/// here.
pub fn open_port(topo: &Topology, i: usize) -> Result<Opened, BuildError> {
    let p = &topo.ports[i];
    if let PortKind::Link { .. } = p.kind {
        return Err(BuildError(format!("port {} is an internal link", p.name)));
    }
    // A mirror tap is named after its VR's interface.
    let vrs = if matches!(p.kind, PortKind::Mirror { .. }) { topo.vrs.clone() } else { Vec::new() };
    let one = Topology { ports: vec![p.clone()], vrs, ..Topology::default() };
    let mut vxlan = Vec::new();
    let (mut ours, mut outside) = open_ports_except(&one, &[false], &mut vxlan)?;
    Ok(Opened {
        port: ours.remove(0).expect("a single port that is not a link opens"),
        outside: outside.remove(0),
        vxlan: vxlan.pop().map(|(_, h)| h),
    })
}

/// Opens internal link `i` of `topo` (a VR interface on a switch a running host gains): the
/// two ends, port `i`'s first, then its peer's.
pub fn open_link(topo: &Topology, i: usize) -> Result<[Box<dyn Port>; 2], BuildError> {
    let p = &topo.ports[i];
    let PortKind::Link { peer } = p.kind else {
        return Err(BuildError(format!("port {} is not an internal link", p.name)));
    };
    let (a, b) = mem::pair(&p.name, &topo.ports[usize::from(peer)].name, LINK_RING);
    Ok([Box::new(a), Box::new(b)])
}

/// Applies the topology's per-port bursts and impairments (`ports[i]` is the cell's port `i`) and the schedule
/// of the VRs called `names` (the cell's VRs, in order).
fn configure(
    topo: &Topology,
    cell: &mut Cell,
    ports: &[usize],
    names: &[&str],
) -> Result<(), BuildError> {
    let err = |e: dataplane::BuildError| BuildError(e.0);
    cell.set_ingress_queues(topo.ingress_queues).map_err(err)?;
    for (i, &p) in ports.iter().enumerate() {
        if let Some(b) = topo.ports[p].burst {
            cell.set_port_burst(i, usize::from(b)).map_err(err)?;
        }
        if let Some(imp) = topo.ports[p].impair {
            cell.set_impair(i, Some(imp)).map_err(err)?;
        }
    }
    // Mirror ports: joined to their VR interfaces, with the VR's punt limit.
    for (i, &p) in ports.iter().enumerate() {
        let PortKind::Mirror { vr, iface, .. } = topo.ports[p].kind else { continue };
        let Some(cp) = topo.control_plane(vr) else { continue };
        let name = topo.vrs[vr].name.as_str();
        let Some(v) = names.iter().position(|n| *n == name) else { continue };
        cell.attach_mirror(v, iface, i as u16).map_err(err)?;
        cell.set_punt_limit(v, cp.punt_per_sec, cp.punt_burst).map_err(err)?;
    }
    for (v, name) in names.iter().enumerate() {
        let s = topo.vr_index(name).and_then(|i| topo.schedule.get(i));
        let Some(VrSchedule { reservation, batch, .. }) = s else { continue };
        if let Some(b) = batch {
            cell.set_vr_batch(v, usize::from(*b)).map_err(err)?;
        }
        cell.set_reservation(v, *reservation).map_err(err)?;
    }
    Ok(())
}

fn open_memif(
    name: &str,
    m: &crate::topology::MemifSpec,
) -> Result<ports::memif::MemifPort, BuildError> {
    let mut o = ports::memif::MemifOptions::new(m.socket.clone());
    o.id = m.id;
    o.secret = m.secret.clone();
    o.queues = m.queues;
    o.log2_ring_size = m.log2_ring;
    o.buffer_size = m.buffer;
    o.name = name.to_string();
    if m.interrupt {
        o.rx_mode = ports::memif::RxMode::Interrupt;
    }
    let port = if m.server {
        ports::memif::MemifPort::server(o)
    } else {
        ports::memif::MemifPort::client(o)
    };
    port.map_err(|e| BuildError(format!("port {name}: {e}")))
}

/// Opens every port of `topo`: the engine's ends, and the outside end of each `mem` port.
#[allow(clippy::type_complexity)]
fn open_ports(topo: &Topology) -> Result<(Vec<Box<dyn Port>>, Vec<Option<MemPort>>), BuildError> {
    let none = vec![false; topo.ports.len()];
    let (ours, outside) = open_ports_except(topo, &none, &mut Vec::new())?;
    Ok((ours.into_iter().map(|p| p.expect("every port opened")).collect(), outside))
}

/// AF_PACKET ports opened at most this many at a time.
const AFPACKET_OPENERS: usize = 16;

/// The AF_PACKET ports of `topo` (but those `skip` marks), opened side by side, by index. Each
/// ring a port sets up waits in the kernel for an RCU grace period (`packet_set_ring` calls
/// `synchronize_net`), two per port: 16-24 ms each on this project's 2-CPU VM whatever the
/// ring's size, so opened one after another two ports took 70-80 ms of a restart's ~110 ms to
/// forwarding. From several threads, the waits overlap.
fn open_afpacket_ports(
    topo: &Topology,
    skip: &[bool],
) -> Vec<Option<std::io::Result<ports::afpacket::AfPacketPort>>> {
    let open = |a: &crate::topology::Attach| {
        let opts = ports::afpacket::AfPacketOptions { netns: a.netns_path(), ..Default::default() };
        ports::afpacket::AfPacketPort::open(a.ifname(), &opts)
    };
    let wanted: Vec<(usize, &crate::topology::Attach)> = topo
        .ports
        .iter()
        .enumerate()
        .filter(|&(i, _)| !skip[i])
        .filter_map(|(i, p)| match &p.kind {
            PortKind::AfPacket(a) => Some((i, a)),
            _ => None,
        })
        .collect();
    let mut out: Vec<Option<_>> = (0..topo.ports.len()).map(|_| None).collect();
    for group in wanted.chunks(AFPACKET_OPENERS) {
        std::thread::scope(|s| {
            let opening: Vec<_> =
                group.iter().map(|&(i, a)| (i, s.spawn(move || open(a)))).collect();
            for (i, h) in opening {
                out[i] = Some(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            }
        });
    }
    out
}

/// As [`open_ports`], leaving out the ports `skip` marks (those of replicated VRs, opened once
/// per replica by [`replicated`]). Each `vxlan` port's handle is appended to `vxlan`.
#[allow(clippy::type_complexity)]
fn open_ports_except(
    topo: &Topology,
    skip: &[bool],
    vxlan: &mut Vec<(String, ports::vxlan::VxlanHandle)>,
) -> Result<(Vec<Option<Box<dyn Port>>>, Vec<Option<MemPort>>), BuildError> {
    let n = topo.ports.len();
    let mut ours: Vec<Option<Box<dyn Port>>> = (0..n).map(|_| None).collect();
    let mut outside: Vec<Option<MemPort>> = (0..n).map(|_| None).collect();
    let mut afpacket = open_afpacket_ports(topo, skip);
    for (i, p) in topo.ports.iter().enumerate() {
        if skip[i] {
            continue;
        }
        match &p.kind {
            &PortKind::Mem { ring } => {
                let (a, b) = mem::pair(&p.name, &format!("{}-outside", p.name), ring);
                ours[i] = Some(Box::new(a));
                outside[i] = Some(b);
            }
            // Both ends of a link are the engine's: made once, from the lower end.
            &PortKind::Link { peer } if i < usize::from(peer) => {
                let (a, b) = mem::pair(&p.name, &topo.ports[usize::from(peer)].name, LINK_RING);
                ours[i] = Some(Box::new(a));
                ours[usize::from(peer)] = Some(Box::new(b));
            }
            PortKind::Link { .. } => {}
            PortKind::AfXdp(a, x) => {
                let opts = x.options(a.netns_path());
                let p = ports::afxdp::AfXdpPort::open(a.ifname(), &opts)
                    .map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                ours[i] = Some(Box::new(p));
            }
            PortKind::AfPacket(_) => {
                let opened = afpacket[i].take().expect("opened beside the others");
                let p = opened.map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                ours[i] = Some(Box::new(p));
            }
            PortKind::Memif(m) => ours[i] = Some(Box::new(open_memif(&p.name, m)?)),
            PortKind::VhostUser(v) => {
                let mode =
                    if v.server { ports::vhost::Mode::Server } else { ports::vhost::Mode::Client };
                let mut o = ports::vhost::VhostUserOptions::new(&v.socket, mode);
                o.queues = v.queues;
                o.name = p.name.clone();
                let port = ports::vhost::VhostUserPort::new(o)
                    .map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                ours[i] = Some(Box::new(port));
            }
            PortKind::Vxlan(x) => {
                let port = ports::vxlan::VxlanPort::open(&p.name, &x.options())
                    .map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                vxlan.push((p.name.clone(), port.handle()));
                ours[i] = Some(Box::new(port));
            }
            PortKind::Tap { ifname } => {
                let p = ports::tap::TapPort::create(ifname)
                    .map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                ours[i] = Some(Box::new(p));
            }
            PortKind::Mirror { netns, vr, iface } => {
                let ifname = &topo.vrs[*vr].interfaces[usize::from(*iface)].name;
                let opts = ports::tap::TapOptions {
                    mode: ports::tap::TapMode::Create,
                    netns: Some(std::path::Path::new("/run/netns").join(netns)),
                };
                let t = ports::tap::TapPort::open(ifname, &opts).map_err(|e| {
                    BuildError(format!("port {}: tap {ifname} in namespace {netns}: {e}", p.name))
                })?;
                ours[i] = Some(Box::new(t));
            }
        }
    }
    for (i, p) in ours.iter().enumerate() {
        if p.is_none() && !skip[i] {
            return Err(BuildError(format!(
                "port {} is a link without its other end",
                topo.ports[i].name
            )));
        }
    }
    Ok((ours, outside))
}

/// A clock for workers: nanoseconds since it was made, from the monotonic clock (the vDSO,
/// which reads the TSC on x86). The CLI passes a raw TSC clock instead, which is cheaper.
pub fn monotonic_clock() -> Clock {
    let t0 = Instant::now();
    Box::new(move || t0.elapsed().as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AF_PACKET ports open side by side, yet the error is the one a port-by-port open
    /// would give: the first failing port in the file's order, by name.
    #[test]
    fn afpacket_ports_open_together_and_the_first_failure_in_file_order_is_reported() {
        let text = "ports:\n\
            \x20 - { name: pa, kind: afpacket, interface: rpx-missing-a }\n\
            \x20 - { name: pm, kind: mem }\n\
            \x20 - { name: pb, kind: afpacket, interface: rpx-missing-b }\n";
        let topo = Topology::parse(text, "t.yaml", std::path::Path::new("")).unwrap();
        let opened = open_afpacket_ports(&topo, &[false, false, false]);
        assert!(opened[0].as_ref().is_some_and(|r| r.is_err()), "pa was opened and failed");
        assert!(opened[1].is_none(), "a mem port is not an AF_PACKET one");
        assert!(opened[2].as_ref().is_some_and(|r| r.is_err()), "pb was opened and failed");
        let skipped = open_afpacket_ports(&topo, &[true, false, false]);
        assert!(skipped[0].is_none() && skipped[2].is_some(), "a skipped port is not opened");
        let Err(e) = open_ports(&topo) else { panic!("ports on missing interfaces opened") };
        assert!(e.0.starts_with("port pa: "), "{}", e.0);
        assert!(e.0.contains("rpx-missing-a"), "{}", e.0);
    }
}
