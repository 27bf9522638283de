//! The diff half of `apply`: what turns the running host into another topology, as typed
//! [`Step`]s with everything they need built (route tables, VRs, cells, ports), or why it
//! cannot be done live ([`Refusal`]). The node carries the steps out; the plan's text
//! ([`Plan`]) is each step's [`Display`](std::fmt::Display), so what is shown is what runs.
//!
//! A diff changes nothing on the running host: it reads the running topology, the workers'
//! cells and the route tables ([`Current`]). Building may open ports (a new cell's, a joining
//! VR's), which close again when the steps are dropped unrun.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use dataplane::config::{IfaceConfig, RouteConfig, VrConfig};
use dataplane::{RouteOp, RouteSource, RouteTable, Vr};
use ipnet::IpNet;
use ports::mem::MemPort;

use crate::build::{open_port, vr_in_cell};
use crate::runtime::Runtime;
use crate::topology::VrSchedule;
use crate::{ControlError, PortKind, Topology};
use dataplane::SwitchConfig as SwitchSettings;

/// What to do instead of a change that cannot be made live.
const FIX: &str = "cannot be applied to a running host; run `routeplex down FILE` then `routeplex up FILE` to make it";

/// The running host as a diff reads it.
pub(crate) struct Current<'a> {
    pub topo: &'a Topology,
    pub rt: &'a Runtime,
    pub tables: &'a HashMap<String, RouteTable>,
    /// The workers' default port burst.
    pub burst: usize,
}

/// Why a diff gave no steps.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Changes that cannot be made live, each with what to do instead.
    NotLive(Vec<String>),
    /// Building what a step needs failed.
    Failed(ControlError),
}

impl From<ControlError> for Refusal {
    fn from(e: ControlError) -> Refusal {
        Refusal::Failed(e)
    }
}

impl From<Refusal> for ControlError {
    fn from(r: Refusal) -> ControlError {
        match r {
            Refusal::Failed(e) => e,
            Refusal::NotLive(list) => {
                let mut msg =
                    String::from("this change cannot be applied live; nothing was changed:");
                for r in &list {
                    msg.push_str("\n! ");
                    msg.push_str(r);
                }
                ControlError::NotLive(msg)
            }
        }
    }
}

/// One step of a plan, with everything it needs built and what it says in the plan.
pub(crate) enum Step {
    Idle {
        from: crate::runtime::Idle,
        to: crate::runtime::Idle,
    },
    RemoveVr(String),
    /// A cell whose VRs and switches all go, with its ports.
    RemoveCell {
        cell: usize,
        vrs: Vec<String>,
        switches: Vec<String>,
        ports: Vec<String>,
    },
    Routes {
        vr: String,
        ops: Vec<RouteOp>,
    },
    Mtu {
        vr: String,
        iface: u16,
        name: String,
        from: u16,
        mtu: u16,
    },
    /// An interface set up or down (`up:`), with its mirror tap if the VR has a control plane;
    /// `shown` when the plan says so (a rebuilt VR's interfaces are set again unchanged, a new
    /// VR's taken down as its text says, silently).
    Up {
        vr: String,
        iface: u16,
        name: String,
        up: bool,
        mirror: Option<(String, String)>,
        shown: bool,
    },
    /// A control-plane VR's interface changed: its mirror tap `dev` in `netns` follows.
    Mirror {
        vr: String,
        netns: String,
        dev: String,
        change: crate::netns::MirrorChange,
    },
    /// A VR rebuilt in place, keeping counters (and neighbors when `neighbors`), `api` API
    /// routes and `kernel` kernel routes; `what` changed.
    Replace {
        vr: String,
        table: RouteTable,
        new: Box<Vr>,
        what: String,
        neighbors: bool,
        api: usize,
        kernel: usize,
    },
    NewCell {
        table: Vec<(String, RouteTable)>,
        cell: Box<dataplane::Cell>,
        worker: Option<usize>,
        outside: Vec<(String, MemPort)>,
        /// The ports it opens.
        ports: Vec<String>,
        /// The handles of the `vxlan` ports it opens.
        vxlan: Vec<(String, ports::vxlan::VxlanHandle)>,
        /// Its switches (a new segment), by name.
        switches: Vec<String>,
    },
    JoinCell {
        cell: usize,
        ports: Vec<Box<dyn ports::Port>>,
        table: RouteTable,
        vr: Box<Vr>,
        /// The cell's ports, and those the VR opens in it.
        joins: Vec<String>,
        opens: Vec<String>,
        /// The handles of the `vxlan` ports it opens.
        vxlan: Vec<(String, ports::vxlan::VxlanHandle)>,
        /// The running switches its interfaces join: (switch, cell-local port, mode).
        members: Vec<(String, u16, dataplane::MemberMode)>,
        /// The outside ends of the `mem` ports it opens.
        outside: Vec<(String, MemPort)>,
    },
    /// The member on runtime port `port` of cell `cell` leaves switch `switch` (a VR leaving
    /// it): nothing is sent to it from the next burst, and what was learned on it is forgotten.
    Leave {
        switch: String,
        port: String,
        cell: usize,
    },
    /// A port (not a link) joining running switch `switch` in cell `cell`: opened by the
    /// diff, added as the cell's next port and a member from the next burst.
    AddPort {
        cell: usize,
        port: Box<dyn ports::Port>,
        name: String,
        switch: String,
        mode: dataplane::MemberMode,
        /// Its handle, a `vxlan` port's.
        vxlan: Option<ports::vxlan::VxlanHandle>,
        /// Its outside end, a `mem` port's.
        outside: Option<MemPort>,
    },
    /// A port (not a link) that left its switch (a [`Step::Leave`] before this one) and the
    /// topology: closed, its runtime port `port`, named `name` in the file.
    ClosePort {
        cell: usize,
        port: String,
        name: String,
    },
    /// A port's impairment set, changed or ended (`impair:`): runtime port `port`, named
    /// `name` in the file; `new` when it had none.
    Impair {
        port: String,
        name: String,
        new: bool,
        cfg: Option<dataplane::impair::ImpairConfig>,
    },
    /// A `vxlan` port's remote set swapped in place (`ports::vxlan::VxlanHandle::set_remotes`):
    /// the port takes it at its next burst, frames already queued are sent, and the VRs on it
    /// keep running (a VR that moved between hosts changes only its peers' remotes).
    Remotes {
        port: String,
        from: Vec<std::net::IpAddr>,
        to: Vec<std::net::IpAddr>,
    },
    /// A VR's worker, reservation and batch; `from` what ran (`None`: a new VR, not shown).
    Schedule {
        vr: String,
        sched: VrSchedule,
        from: Option<VrSchedule>,
    },
}

impl Step {
    /// The VR the step changes, where it is one that stays.
    fn vr(&self) -> Option<&str> {
        match self {
            Step::Routes { vr, .. }
            | Step::Mtu { vr, .. }
            | Step::Up { vr, .. }
            | Step::Mirror { vr, .. }
            | Step::Replace { vr, .. }
            | Step::Schedule { vr, .. } => Some(vr),
            _ => None,
        }
    }
}

impl fmt::Display for Step {
    /// The step's lines in the plan (none for a step the plan does not show).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Idle { from, to } => write!(f, "~ idle: {from:?} -> {to:?}"),
            Step::RemoveVr(n) => write!(f, "- vr {n}"),
            Step::RemoveCell { vrs, switches, ports, .. } => {
                let mut what = Vec::new();
                if !switches.is_empty() {
                    what.push(format!("switch {}", switches.join(", ")));
                }
                if !vrs.is_empty() {
                    what.push(format!("vr {}", vrs.join(", ")));
                }
                let (what, ports) = (what.join(" and "), ports.join(", "));
                write!(f, "- {what} (its cell stops; ports {ports} close)")
            }
            Step::Routes { vr, ops } => {
                let del = ops.iter().filter(|op| matches!(op, RouteOp::Delete { .. })).count();
                let add = ops.len() - del;
                write!(f, "~ vr {vr}: routes: {add} added or changed, {del} removed")
            }
            Step::Mtu { vr, name, from, mtu, .. } => {
                write!(f, "~ vr {vr}: interface {name} mtu {from} -> {mtu}")
            }
            Step::Up { vr, name, up, shown: true, .. } => {
                write!(f, "~ vr {vr}: interface {name} {}", if *up { "up" } else { "down" })
            }
            Step::Up { .. } | Step::Mirror { .. } | Step::Schedule { from: None, .. } => Ok(()),
            Step::Replace { vr, what, neighbors, api, kernel, .. } => {
                let n = if *neighbors { ", neighbors" } else { "" };
                write!(f, "~ vr {vr}: rebuilt in place ({what}), keeping counters{n} and {api} API route(s)")?;
                if *kernel > 0 {
                    write!(f, ", {kernel} kernel route(s)")?;
                }
                Ok(())
            }
            Step::NewCell { table, ports, switches, .. } if !switches.is_empty() => {
                let names: Vec<&str> = table.iter().map(|(n, _)| n.as_str()).collect();
                write!(f, "+ switch {} (new cell", switches.join(", "))?;
                if !names.is_empty() {
                    write!(f, " with vr {}", names.join(", "))?;
                }
                write!(f, "; opens {})", ports.join(", "))
            }
            Step::NewCell { table, ports, .. } => {
                let names: Vec<&str> = table.iter().map(|(n, _)| n.as_str()).collect();
                write!(f, "+ vr {} (new cell; opens {})", names.join(", "), ports.join(", "))
            }
            Step::JoinCell { vr, joins, opens, members, .. } => {
                write!(f, "+ vr {} (joins the cell of {}", vr.name(), joins.join(", "))?;
                if !opens.is_empty() {
                    write!(f, "; opens {}", opens.join(", "))?;
                }
                if !members.is_empty() {
                    let sw: Vec<&str> = members.iter().map(|(s, ..)| s.as_str()).collect();
                    write!(f, "; on switch {}", sw.join(", "))?;
                }
                write!(f, ")")
            }
            Step::Schedule { vr, sched, from: Some(os) } => schedule_text(f, vr, os, sched),
            Step::Leave { switch, port, .. } => {
                write!(f, "~ switch {switch}: member {port} leaves")
            }
            Step::AddPort { name, switch, .. } => {
                write!(f, "+ port {name} (opens; joins switch {switch})")
            }
            Step::ClosePort { name, .. } => write!(f, "- port {name} (closes)"),
            Step::Remotes { port, from, to } => {
                write!(f, "~ port {port}: remotes {} -> {}", addrs(from), addrs(to))
            }
            Step::Impair { name, cfg: None, .. } => write!(f, "~ port {name}: impairment ends"),
            Step::Impair { name, new, cfg: Some(c), .. } => {
                let sign = if *new { '+' } else { '~' };
                write!(f, "{sign} port {name}: impair {}", crate::impair::describe(c))
            }
        }
    }
}

/// Addresses as a plan shows them: `[a, b]`, `[]` for none.
fn addrs(list: &[std::net::IpAddr]) -> String {
    let a: Vec<String> = list.iter().map(ToString::to_string).collect();
    format!("[{}]", a.join(", "))
}

/// A schedule change's lines: reservation, batch, worker, each where it changed.
fn schedule_text(
    f: &mut fmt::Formatter<'_>,
    vr: &str,
    os: &VrSchedule,
    ns: &VrSchedule,
) -> fmt::Result {
    let show = |s: &VrSchedule| match s.reservation {
        Some(r) => r.to_string(),
        None => "none".into(),
    };
    let mut lines = Vec::new();
    if os.reservation != ns.reservation {
        lines.push(format!("~ vr {vr}: reservation {} -> {}", show(os), show(ns)));
    }
    if os.batch != ns.batch {
        lines.push(format!("~ vr {vr}: batch {:?} -> {:?}", os.batch, ns.batch));
    }
    if os.worker != ns.worker && ns.worker.is_some() {
        lines.push(format!("~ vr {vr}: to worker {:?}", ns.worker));
    }
    write!(f, "{}", lines.join("\n"))
}

/// What `apply` would do (or did): the steps' lines in the order they run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<String>,
    /// VRs the plan leaves alone.
    pub unchanged: Vec<String>,
}

impl Plan {
    /// The plan of `steps` from `cur` to `next`: their text, and the VRs of both that no step
    /// changes.
    pub(crate) fn of(steps: &[Step], cur: &Topology, next: &Topology) -> Plan {
        let lines = steps.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let touched: Vec<&str> = steps.iter().filter_map(Step::vr).collect();
        Plan {
            steps: lines.iter().flat_map(|l| l.lines()).map(String::from).collect(),
            unchanged: (next.vrs.iter())
                .filter(|v| cur.vr_index(&v.name).is_some() && !touched.contains(&v.name.as_str()))
                .map(|v| v.name.clone())
                .collect(),
        }
    }

    /// Whether the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

/// The steps that turn the running host `cur` into `next`, in the order they run, or why it
/// cannot be done live (every reason at once).
pub(crate) fn diff(cur: &Current, next: &Topology) -> Result<Vec<Step>, Refusal> {
    let mut d = Diff {
        cur,
        next,
        steps: Vec::new(),
        refused: Vec::new(),
        joins: Vec::new(),
        leaves: Vec::new(),
        added: HashMap::new(),
    };
    d.fixed();
    d.ports_kept();
    if cur.topo.idle != next.idle {
        d.steps.push(Step::Idle { from: cur.topo.idle, to: next.idle });
    }
    let mut cells_gone = d.removals()?;
    d.switches_kept_or_gone(&mut cells_gone)?;
    d.ports_gone(&cells_gone);
    for (i, v) in next.vrs.iter().enumerate() {
        if let Some(j) = cur.topo.vr_index(&v.name) {
            d.changed_vr(i, j)?;
        }
    }
    let segment_vrs = d.new_segments()?;
    let new_cells = d.new_vrs(&segment_vrs)?;
    for (ports_of, vrs) in merge_cells(new_cells) {
        d.new_cell(ports_of, vrs)?;
    }
    for (name, new, cfg) in crate::impair::changes(cur.topo, next) {
        d.steps.push(Step::Impair { port: rt_port(next, &name), name, new, cfg });
    }
    if !d.refused.is_empty() {
        return Err(Refusal::NotLive(d.refused));
    }
    Ok(d.steps)
}

/// A diff under way: the steps so far, and what cannot be done live.
struct Diff<'a> {
    cur: &'a Current<'a>,
    next: &'a Topology,
    steps: Vec<Step>,
    refused: Vec<String>,
    /// Members running switches gain: (the link's switch end, by name; the switch; its mode;
    /// the switch's cell), for the new VRs on them.
    joins: Vec<(String, String, dataplane::MemberMode, usize)>,
    /// Link ends (both, by name) of the VRs that leave a running switch.
    leaves: Vec<String>,
    /// The ports earlier steps of this diff add to each running cell, by name, in order: a
    /// second VR joining the same cell finds its ports after the first one's.
    added: HashMap<usize, Vec<String>>,
}

impl Diff<'_> {
    /// What only a restart changes: workers, ingress queues, metrics, migration, hosts,
    /// replicas.
    fn fixed(&mut self) {
        let (cur, next) = (self.cur.topo, self.next);
        if cur.workers != next.workers {
            self.refused.push(format!("workers: {:?} -> {:?} {FIX}", cur.workers, next.workers));
        }
        if cur.metrics != next.metrics {
            self.refused.push(format!("metrics changed: {FIX}"));
        }
        if cur.ingress_queues != next.ingress_queues {
            self.refused.push(format!(
                "ingress_queues: {:?} -> {:?} {FIX}",
                cur.ingress_queues, next.ingress_queues
            ));
        }
        if cur.migration != next.migration {
            self.refused.push(format!("migration changed: {FIX}"));
        }
        if cur.hosts != next.hosts {
            self.refused.push(format!("hosts changed: {FIX}"));
        }
        self.refused.extend(crate::replicas::refuse_changes(cur, next, FIX));
    }

    /// Ports of both whose kind, settings or burst changed: a `vxlan` port's remotes change
    /// live, the rest only with a restart.
    fn ports_kept(&mut self) {
        let (cur, next) = (self.cur.topo, self.next);
        let next_ports = by_name(next);
        let mut refused = Vec::new();
        for (n, p) in by_name(cur) {
            match next_ports.get(n) {
                Some(q) if q.burst == p.burst && remotes_only(&p.kind, &q.kind).is_some() => {
                    let (from, to) = remotes_only(&p.kind, &q.kind).expect("just matched");
                    self.steps.push(Step::Remotes { port: n.to_string(), from, to });
                }
                Some(q) if !same_kind(cur, &p.kind, next, &q.kind) => {
                    refused.push(format!("port {n}: its kind or settings changed: {FIX}"))
                }
                Some(q) if q.burst != p.burst => {
                    refused.push(format!("port {n}: burst changed: {FIX}"))
                }
                _ => {}
            }
        }
        self.refused.extend(refused);
    }

    /// VRs that go: whole cells whose VRs all go (with their ports), else VRs out of cells.
    /// Returns the cells that stop.
    fn removals(&mut self) -> Result<Vec<usize>, ControlError> {
        let (cur, next, rt) = (self.cur.topo, self.next, self.cur.rt);
        let removed: Vec<String> = (cur.vrs.iter())
            .filter(|v| next.vr_index(&v.name).is_none())
            .map(|v| v.name.clone())
            .collect();
        let next_rt: Vec<String> = next.ports.iter().map(|p| rt_port(next, &p.name)).collect();
        let mut cells_gone = Vec::new();
        for n in &removed {
            let (c, _) = rt.locate(n)?;
            if cells_gone.contains(&c) {
                continue;
            }
            let vrs: Vec<String> = rt.cell_vrs(c).to_vec();
            let all_go = vrs.iter().all(|v| removed.contains(v));
            let ports_gone = rt.cell_ports(c).iter().all(|p| !next_rt.contains(p));
            if all_go && ports_gone {
                cells_gone.push(c);
                let ports = rt.cell_ports(c).to_vec();
                let switches = cell_switches(cur, rt.cell_ports(c));
                self.steps.push(Step::RemoveCell { cell: c, vrs, switches, ports });
            } else {
                self.steps.push(Step::RemoveVr(n.clone()));
            }
        }
        Ok(cells_gone)
    }

    /// Switches of both must be the same (members by port name, VLANs, settings); a switch
    /// that goes takes its cell with it (a cell of switches and ports alone is removed here,
    /// one with VRs by `removals`). New switches come with new segments (`new_segments`).
    fn switches_kept_or_gone(&mut self, cells_gone: &mut Vec<usize>) -> Result<(), ControlError> {
        let (cur, next, rt) = (self.cur.topo, self.next, self.cur.rt);
        let next_sw: HashMap<&str, String> =
            next.switches.iter().map(|s| (s.name.as_str(), switch_text(next, s))).collect();
        let next_rt: Vec<String> = next.ports.iter().map(|p| rt_port(next, &p.name)).collect();
        for s in &cur.switches {
            if let Some(t) = next_sw.get(s.name.as_str()) {
                if *t != switch_text(cur, s) && !self.members_change_live(s)? {
                    self.refused.push(format!(
                        "switch {}: its members or settings changed (live: VRs and ports joining or leaving a switch without static entries; not: its settings, or a member's port or mode): {FIX}",
                        s.name
                    ));
                }
                continue;
            }
            let Some(c) = (s.members.first())
                .and_then(|m| rt.cell_of_port(&rt_port(cur, &cur.ports[usize::from(m.port)].name)))
            else {
                continue;
            };
            if cells_gone.contains(&c) {
                continue;
            }
            let stays = rt.cell_vrs(c).iter().any(|v| next.vr_index(v).is_some())
                || rt.cell_ports(c).iter().any(|p| next_rt.contains(p));
            if stays || !rt.cell_vrs(c).is_empty() {
                self.refused.push(format!(
                    "switch {}: removed while VRs or ports of its cell stay: {FIX}",
                    s.name
                ));
                continue;
            }
            cells_gone.push(c);
            let ports = rt.cell_ports(c).to_vec();
            let switches = cell_switches(cur, &ports);
            self.steps.push(Step::RemoveCell { cell: c, vrs: Vec::new(), switches, ports });
        }
        Ok(())
    }

    /// Whether switch `s` changes only by members joining or leaving, which runs live: a
    /// VR's link (the VR new, or going), or a port of another kind new to (or gone from) the
    /// topology. Its settings and static entries stay as they were, and a member that stays
    /// keeps its mode. Records the VR links that join (`joins`, for `new_vrs`) and pushes the
    /// steps of the rest: ports opened and added, members leaving, ports closed. Static
    /// entries name members by position, so a switch with any keeps its members.
    fn members_change_live(&mut self, s: &SwitchSettings) -> Result<bool, ControlError> {
        let (cur, next, rt) = (self.cur.topo, self.next, self.cur.rt);
        let Some(n) = next.switches.iter().find(|n| n.name == s.name) else { return Ok(false) };
        let plain = |t: &SwitchSettings| SwitchSettings { members: Vec::new(), ..t.clone() };
        if plain(s) != plain(n) || !s.statics.is_empty() {
            return Ok(false);
        }
        let named = |t: &Topology, m: &dataplane::MemberConfig| {
            (t.ports[usize::from(m.port)].name.clone(), m.mode.clone())
        };
        let had: Vec<_> = s.members.iter().map(|m| named(cur, m)).collect();
        let has: Vec<_> = n.members.iter().map(|m| named(next, m)).collect();
        let Some(c) = (had.first()).and_then(|(p, _)| rt.cell_of_port(&rt_port(cur, p))) else {
            return Ok(false);
        };
        let extra: Vec<_> = has.iter().filter(|m| !had.contains(m)).collect();
        let gone: Vec<_> = had.iter().filter(|m| !has.contains(m)).collect();
        fn kind<'t>(t: &'t Topology, p: &str) -> Option<&'t PortKind> {
            t.port_index(p).map(|g| &t.ports[g].kind)
        }
        let link = |k: Option<&PortKind>| matches!(k, Some(PortKind::Link { .. }));
        // A member that goes is the switch end of a link whose VR goes, or a port that goes.
        let vr_goes = |p: &str| {
            let g = cur.port_index(p).expect("named");
            let PortKind::Link { peer } = cur.ports[g].kind else { return None };
            let vr = cur.vrs.iter().find(|v| v.interfaces.iter().any(|f| f.port == peer))?;
            let end = cur.ports[usize::from(peer)].name.clone();
            (next.vr_index(&vr.name).is_none() && next.port_index(p).is_none())
                .then(|| (vr.name.clone(), end))
        };
        let port_goes = |p: &str| !link(kind(cur, p)) && kind(next, p).is_none();
        // A member that joins is new to the topology: a VR's link, or a port of another kind
        // (not a control plane's mirror tap).
        let joins_new = |p: &str| {
            kind(cur, p).is_none()
                && kind(next, p).is_some_and(|k| !matches!(k, PortKind::Mirror { .. }))
        };
        let ok = gone.iter().all(|(p, _)| vr_goes(p).is_some() || port_goes(p))
            && extra.iter().all(|(p, _)| joins_new(p));
        if !ok {
            return Ok(false);
        }
        for (p, m) in extra {
            if link(kind(next, p)) {
                self.joins.push((p.clone(), s.name.clone(), m.clone(), c));
                continue;
            }
            let o = open_port(next, next.port_index(p).expect("named"))?;
            self.added.entry(c).or_default().push(p.clone());
            self.steps.push(Step::AddPort {
                cell: c,
                port: o.port,
                name: p.clone(),
                switch: s.name.clone(),
                mode: m.clone(),
                vxlan: o.vxlan,
                outside: o.outside,
            });
        }
        for (p, _) in gone {
            let port = rt_port(cur, p);
            let leave = Step::Leave { switch: s.name.clone(), port: port.clone(), cell: c };
            let Some((vr, end)) = vr_goes(p) else {
                self.steps.push(leave);
                self.steps.push(Step::ClosePort { cell: c, port, name: p.clone() });
                self.leaves.push(p.clone());
                continue;
            };
            let at = (self.steps.iter())
                .position(|st| matches!(st, Step::RemoveVr(v) if *v == vr))
                .unwrap_or(self.steps.len());
            self.steps.insert(at, leave);
            self.leaves.extend([p.clone(), end]);
        }
        Ok(true)
    }

    /// Cells of `next` with a switch that the running host gains whole (every VR, switch and
    /// port in it new): each a new cell. Returns their VRs; a new switch in a cell that is not
    /// new throughout is refused.
    fn new_segments(&mut self) -> Result<Vec<usize>, ControlError> {
        let (cur, next) = (self.cur.topo, self.next);
        let mut vrs = Vec::new();
        for plan in next.cells() {
            let new_sw: Vec<&str> = (plan.switches.iter())
                .map(|&s| next.switches[s].name.as_str())
                .filter(|n| !cur.switches.iter().any(|s| s.name == *n))
                .collect();
            if new_sw.is_empty() {
                continue;
            }
            let port_name = |p: &u16| next.ports[usize::from(*p)].name.as_str();
            let whole = new_sw.len() == plan.switches.len()
                && plan.vrs.iter().all(|&v| cur.vr_index(&next.vrs[v].name).is_none())
                && plan.ports.iter().all(|p| cur.port_index(port_name(p)).is_none());
            if !whole {
                self.refused.push(format!(
                    "switch {}: new, in a cell with running VRs, switches or ports: {FIX}",
                    new_sw.join(", ")
                ));
                continue;
            }
            let seg = crate::build::segment(next, &plan, self.cur.burst)?;
            let shown = (plan.ports.iter())
                .filter(|&&p| !matches!(next.ports[usize::from(p)].kind, PortKind::Link { .. }))
                .map(|p| port_name(p).to_string())
                .collect();
            let worker = plan.vrs.iter().find_map(|&i| next.schedule[i].worker).map(usize::from);
            self.steps.push(Step::NewCell {
                table: seg.tables,
                cell: Box::new(seg.cell),
                worker,
                outside: seg.outside,
                ports: shown,
                vxlan: seg.vxlan,
                switches: new_sw.iter().map(|n| n.to_string()).collect(),
            });
            for &i in &plan.vrs {
                self.steps.extend(down_steps(next, i));
            }
            vrs.extend(plan.vrs);
        }
        Ok(vrs)
    }

    /// Ports that go: only with their cell (or, a mirror tap, with its VR).
    fn ports_gone(&mut self, cells_gone: &[usize]) {
        let (cur, next, rt) = (self.cur.topo, self.next, self.cur.rt);
        let next_ports = by_name(next);
        let mut refused = Vec::new();
        for (n, p) in by_name(cur) {
            if next_ports.contains_key(n) {
                continue;
            }
            if let PortKind::Mirror { vr, .. } = p.kind {
                if next.vr_index(&cur.vrs[vr].name).is_none() {
                    continue;
                }
            }
            // A link of a VR that left its switch stays in the cell, unused.
            if self.leaves.iter().any(|l| l == n) {
                continue;
            }
            if !rt.cell_of_port(&rt_port(cur, n)).is_some_and(|c| cells_gone.contains(&c)) {
                refused.push(format!(
                    "port {n}: removed while VRs or switches still use its cell: {FIX}"
                ));
            }
        }
        self.refused.extend(refused);
    }

    /// The steps of VR `next.vrs[i]`, running as `vrs[j]`.
    fn changed_vr(&mut self, i: usize, j: usize) -> Result<(), ControlError> {
        let (cur, next) = (self.cur.topo, self.next);
        let (old, v) = (&cur.vrs[j], &next.vrs[i]);
        let ports_same = old.interfaces.iter().map(|f| f.port_name(cur)).collect::<Vec<_>>()
            == v.interfaces.iter().map(|f| f.port_name(next)).collect::<Vec<_>>();
        if !ports_same {
            self.refused.push(format!("vr {}: an interface moved to another port: {FIX}", v.name));
            return Ok(());
        }
        let same_shape = old.interfaces.len() == v.interfaces.len()
            && old
                .interfaces
                .iter()
                .zip(&v.interfaces)
                .all(|(a, b)| IfaceConfig { mtu: b.mtu, port: b.port, ..a.clone() } == *b);
        if !same_shape || old.neighbors != v.neighbors || old.limits != v.limits {
            self.rebuild(i, j)?;
        } else {
            self.in_place(i, j);
        }
        let (os, ns) = (&cur.schedule[j], &next.schedule[i]);
        if os != ns {
            let sched = ns.clone();
            self.steps.push(Step::Schedule { vr: v.name.clone(), sched, from: Some(os.clone()) });
        }
        Ok(())
    }

    /// Interfaces (addresses, MACs, VLANs), static neighbors or limits changed: a new VR takes
    /// the old one's place, with its counters, neighbors and API routes.
    fn rebuild(&mut self, i: usize, j: usize) -> Result<(), ControlError> {
        let (old, v) = (&self.cur.topo.vrs[j], &self.next.vrs[i]);
        let (c, _) = self.cur.rt.locate(&v.name)?;
        let local = local_ports(self.cur, c, self.next, &[]);
        let mut cfg = v.clone();
        let mut table = RouteTable::new(&cfg).map_err(|e| ControlError::Invalid(e.0))?;
        // API routes, and a control plane's kernel routes: its sync sent them once and will
        // not again unless they change.
        let old_table = &self.cur.tables[&v.name];
        let mut ops = old_table.ops_of(RouteSource::Api);
        let api = ops.len();
        ops.extend(old_table.ops_of(RouteSource::Kernel));
        // One batch when every API route still fits; otherwise those whose gateway is no
        // longer connected are dropped with the old VR, one by one.
        let fits: Vec<bool> = match table.apply(&ops, |_| Ok(())) {
            Ok(_) => vec![true; ops.len()],
            Err(_) => ops
                .iter()
                .map(|op| table.apply(std::slice::from_ref(op), |_| Ok(())).is_ok())
                .collect(),
        };
        cfg.interfaces.iter_mut().for_each(|f| f.port = local(f.port));
        let vr = Vr::with_routes(&cfg, table.view()).map_err(|e| ControlError::Invalid(e.0))?;
        self.steps.push(Step::Replace {
            vr: v.name.clone(),
            table,
            new: Box::new(vr),
            what: what_changed(old, v),
            neighbors: same_ifaces(old, v),
            api: fits[..api].iter().filter(|&&k| k).count(),
            kernel: fits[api..].iter().filter(|&&k| k).count(),
        });
        // The new VR's interfaces are up, or as the old one's were: set each as `next` says,
        // and let the mirror taps follow the interfaces.
        self.follow(i, j, true);
        Ok(())
    }

    /// Only MTUs, up/down or routes changed: each changed in place.
    fn in_place(&mut self, i: usize, j: usize) {
        let (old, v) = (&self.cur.topo.vrs[j], &self.next.vrs[i]);
        for (k, (a, b)) in old.interfaces.iter().zip(&v.interfaces).enumerate() {
            if a.mtu != b.mtu {
                self.steps.push(Step::Mtu {
                    vr: v.name.clone(),
                    iface: k as u16,
                    name: b.name.clone(),
                    from: a.mtu,
                    mtu: b.mtu,
                });
            }
        }
        self.follow(i, j, false);
        let ops = route_diff(&old.routes, &v.routes);
        if !ops.is_empty() {
            self.steps.push(Step::Routes { vr: v.name.clone(), ops });
        }
    }

    /// The steps that set VR `next.vrs[i]` (the running `vrs[j]`) up or down per interface
    /// as `next` says (every interface when `all`, else those whose `up:` changed), and that
    /// carry its interfaces' MAC, MTU and address changes to its mirror taps.
    fn follow(&mut self, i: usize, j: usize, all: bool) {
        let (cur, next) = (self.cur.topo, self.next);
        let v = &next.vrs[i];
        let netns = next.control_plane(i).map(|c| c.netns.clone());
        for (k, b) in v.interfaces.iter().enumerate() {
            let id = k as u16;
            let down = next.iface_down(i, id);
            let shown = cur.iface_down(j, id) != down;
            if all || shown {
                self.steps.push(Step::Up {
                    vr: v.name.clone(),
                    iface: id,
                    name: b.name.clone(),
                    up: !down,
                    mirror: netns.clone().map(|n| (n, b.name.clone())),
                    shown,
                });
            }
            let (Some(ns), Some(a)) = (&netns, cur.vrs[j].interfaces.get(k)) else { continue };
            if let Some(change) = crate::netns::MirrorChange::between(a, b) {
                self.steps.push(Step::Mirror {
                    vr: v.name.clone(),
                    netns: ns.clone(),
                    dev: b.name.clone(),
                    change,
                });
            }
        }
    }

    /// New VRs: those on ports of a running cell join it; the others, on new ports only, are
    /// returned with their ports, to be grouped into new cells.
    fn new_vrs(&mut self, in_segments: &[usize]) -> Result<Vec<Group>, ControlError> {
        let (cur, next, rt) = (self.cur.topo, self.next, self.cur.rt);
        let next_ports = by_name(next);
        let mut new_cells = Vec::new();
        for (i, v) in next.vrs.iter().enumerate() {
            if cur.vr_index(&v.name).is_some() || in_segments.contains(&i) {
                continue;
            }
            let port_names: Vec<String> =
                v.interfaces.iter().map(|f| f.port_name(next).to_string()).collect();
            // An interface on a switch: the switch end of its link must be a member the
            // running switch gains (`joinable`), in that switch's cell.
            let mut cells = Vec::new();
            let mut unjoined = None;
            for p in &port_names {
                let PortKind::Link { peer } = next_ports[p.as_str()].kind else { continue };
                let end = &next.ports[usize::from(peer)].name;
                match self.joins.iter().find(|j| j.0 == *end) {
                    Some(j) => cells.push(j.3),
                    None => unjoined = Some(p.clone()),
                }
            }
            if let Some(p) = unjoined {
                self.refused.push(format!(
                    "vr {}: interface on a switch or link ({p}) that does not run here and is not new with all of its cell: {FIX}",
                    v.name
                ));
                continue;
            }
            cells.extend(port_names.iter().filter_map(|p| rt.cell_of_port(&rt_port(next, p))));
            cells.sort_unstable();
            cells.dedup();
            let mirrors = mirror_ports(next, i);
            match cells.as_slice() {
                // Its mirror taps open in its cell.
                [] => new_cells.push((port_names.into_iter().chain(mirrors).collect(), vec![i])),
                [_] if !mirrors.is_empty() => self.refused.push(format!(
                    "vr {}: a VR with a control plane joins a running cell (its ports are in use): {FIX}",
                    v.name
                )),
                [c] => self.join_cell(i, *c, &port_names)?,
                _ => self.refused.push(format!(
                    "vr {}: its ports are in cells {cells:?}, which would merge: {FIX}",
                    v.name
                )),
            }
        }
        Ok(new_cells)
    }

    /// New VR `next.vrs[i]` joins running cell `c`, opening those of `port_names` that are new
    /// (an internal link both ends, its switch end joining its switch), after the ports that
    /// earlier joins of this diff add to the cell.
    fn join_cell(&mut self, i: usize, c: usize, port_names: &[String]) -> Result<(), ControlError> {
        let (cur, next) = (self.cur.topo, self.next);
        let v = &next.vrs[i];
        let mut fresh: Vec<String> =
            port_names.iter().filter(|p| cur.port_index(p).is_none()).cloned().collect();
        fresh.dedup();
        let link_end = |p: &str| match next.ports[next.port_index(p).expect("named")].kind {
            PortKind::Link { peer } => Some(peer),
            _ => None,
        };
        // The cell's new ports in the order they are added: a link's switch end after it.
        let mut adds = Vec::new();
        for p in &fresh {
            adds.push(p.clone());
            adds.extend(link_end(p).map(|e| next.ports[usize::from(e)].name.clone()));
        }
        let earlier = self.added.entry(c).or_default();
        earlier.extend(adds);
        let local = local_ports(self.cur, c, next, earlier);
        let (table, vr) = vr_in_cell(v, &local)?;
        let (mut opened, mut vxlan, mut members) = (Vec::new(), Vec::new(), Vec::new());
        let mut outside = Vec::new();
        for p in &fresh {
            let g = next.port_index(p).expect("named");
            let Some(end) = link_end(p) else {
                let o = open_port(next, g)?;
                opened.push(o.port);
                vxlan.extend(o.vxlan.map(|h| (p.clone(), h)));
                outside.extend(o.outside.map(|m| (p.clone(), m)));
                continue;
            };
            opened.extend(crate::build::open_link(next, g)?);
            let name = &next.ports[usize::from(end)].name;
            let j = self.joins.iter().find(|j| j.0 == *name).expect("checked by new_vrs");
            members.push((j.1.clone(), local(end), j.2.clone()));
        }
        let shown = fresh.into_iter().filter(|p| link_end(p).is_none()).collect();
        self.steps.push(Step::JoinCell {
            cell: c,
            ports: opened,
            table,
            vr: Box::new(vr),
            joins: self.cur.rt.cell_ports(c).to_vec(),
            opens: shown,
            vxlan,
            members,
            outside,
        });
        self.steps.extend(down_steps(next, i));
        if next.schedule[i] != VrSchedule::default() {
            let sched = next.schedule[i].clone();
            self.steps.push(Step::Schedule { vr: v.name.clone(), sched, from: None });
        }
        Ok(())
    }

    /// A new cell of ports `ports_of` (all new) for new VRs `vrs`, as the builder makes one.
    fn new_cell(&mut self, ports_of: Vec<String>, vrs: Vec<usize>) -> Result<(), ControlError> {
        let next = self.next;
        let mut opened = Vec::new();
        let mut outside = Vec::new();
        let mut vxlan = Vec::new();
        for p in &ports_of {
            if self.cur.topo.port_index(p).is_some() {
                self.refused.push(format!("port {p}: in use by another cell: {FIX}"));
                continue;
            }
            let o = open_port(next, next.port_index(p).expect("named"))?;
            opened.push(o.port);
            outside.extend(o.outside.map(|m| (p.clone(), m)));
            vxlan.extend(o.vxlan.map(|h| (p.clone(), h)));
        }
        let local = |gp: u16| {
            ports_of
                .iter()
                .position(|n| *n == next.ports[usize::from(gp)].name)
                .expect("in the cell") as u16
        };
        let mut table = Vec::new();
        let mut built = Vec::new();
        for &i in &vrs {
            let (t, vr) = vr_in_cell(&next.vrs[i], local)?;
            table.push((next.vrs[i].name.clone(), t));
            built.push(vr);
        }
        let mut cell = dataplane::Cell::new(opened, built, Vec::new())
            .map_err(|e| ControlError::Invalid(e.0))?;
        dress_cell(&mut cell, next, &vrs, &ports_of, self.cur.burst, local)?;
        let worker = vrs.iter().find_map(|&i| next.schedule[i].worker).map(usize::from);
        // The outside ends of new mem ports are kept for whoever asks (tests, benchmarks).
        let cell = Box::new(cell);
        let switches = Vec::new();
        self.steps.push(Step::NewCell {
            table,
            cell,
            worker,
            outside,
            ports: ports_of,
            vxlan,
            switches,
        });
        for &i in &vrs {
            self.steps.extend(down_steps(next, i));
        }
        Ok(())
    }
}

/// The ports of `t` by name.
fn by_name(t: &Topology) -> BTreeMap<&str, &crate::PortSpec> {
    t.ports.iter().map(|p| (p.name.as_str(), p)).collect()
}

/// Sets a new cell's ingress queues, mirror taps, punt limits, reservations, batches and port
/// bursts as `next` says (`vrs` its VRs, `ports_of` its ports, `local` a port's number in it).
fn dress_cell(
    cell: &mut dataplane::Cell,
    next: &Topology,
    vrs: &[usize],
    ports_of: &[String],
    burst: usize,
    local: impl Fn(u16) -> u16,
) -> Result<(), ControlError> {
    let bad = |e: dataplane::BuildError| ControlError::Invalid(e.0);
    cell.set_ingress_queues(next.ingress_queues).map_err(bad)?;
    for (k, &i) in vrs.iter().enumerate() {
        let s = &next.schedule[i];
        if let Some(cp) = next.control_plane(i) {
            for p in mirror_ports(next, i) {
                let g = next.port_index(&p).expect("named");
                let PortKind::Mirror { iface, .. } = next.ports[g].kind else { continue };
                cell.attach_mirror(k, iface, local(g as u16)).map_err(bad)?;
            }
            cell.set_punt_limit(k, cp.punt_per_sec, cp.punt_burst).map_err(bad)?;
        }
        cell.set_reservation(k, s.reservation).map_err(bad)?;
        if let Some(b) = s.batch {
            cell.set_vr_batch(k, usize::from(b)).map_err(bad)?;
        }
    }
    for (k, p) in ports_of.iter().enumerate() {
        let b = next.ports[next.port_index(p).expect("named")].burst.map_or(burst, usize::from);
        cell.set_port_burst(k, b).map_err(bad)?;
    }
    Ok(())
}

/// Cell-local port numbers for a VR of `next` joining cell `c`, which gains `fresh` ports.
fn local_ports(cur: &Current, c: usize, next: &Topology, fresh: &[String]) -> impl Fn(u16) -> u16 {
    let mut names: Vec<String> = cur.rt.cell_ports(c).to_vec();
    names.extend(fresh.iter().map(|p| rt_port(next, p)));
    let global: Vec<String> = next.ports.iter().map(|p| rt_port(next, &p.name)).collect();
    // The last of a name: a VR that left a switch and joins again has new links named as
    // the unused ones it left in the cell.
    move |gp: u16| {
        names.iter().rposition(|n| *n == global[usize::from(gp)]).unwrap_or(u16::MAX as usize)
            as u16
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

/// A `vxlan` port whose only change is its remote set: the remotes before and after.
fn remotes_only(
    a: &PortKind,
    b: &PortKind,
) -> Option<(Vec<std::net::IpAddr>, Vec<std::net::IpAddr>)> {
    match (a, b) {
        (PortKind::Vxlan(x), PortKind::Vxlan(y))
            if x.remotes != y.remotes
                && crate::topology::VxlanSpec { remotes: y.remotes.clone(), ..x.clone() } == *y =>
        {
            Some((x.remotes.clone(), y.remotes.clone()))
        }
        _ => None,
    }
}

/// A switch of `t` as text, with its members' ports by name (port numbers shift when a port
/// earlier in the file goes).
fn switch_text(t: &Topology, s: &dataplane::SwitchConfig) -> String {
    let members: Vec<String> = (s.members.iter())
        .map(|m| format!("{}: {:?}", t.ports[usize::from(m.port)].name, m.mode))
        .collect();
    let rest = SwitchSettings { members: Vec::new(), name: String::new(), ..s.clone() };
    format!("{} {members:?} {rest:?}", s.name)
}

/// The switches of `t` whose members are among runtime ports `ports` (a cell's).
fn cell_switches(t: &Topology, ports: &[String]) -> Vec<String> {
    (t.switches.iter())
        .filter(|s| {
            s.members
                .first()
                .is_some_and(|m| ports.contains(&rt_port(t, &t.ports[usize::from(m.port)].name)))
        })
        .map(|s| s.name.clone())
        .collect()
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

/// New VRs to run in one cell: its ports by name, and the VRs (indices into `next`).
type Group = (Vec<String>, Vec<usize>);

/// Groups new VRs that share ports into cells.
fn merge_cells(mut groups: Vec<Group>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
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

/// A new VR's interfaces set `up: false`, taken down once it runs (not shown in the plan).
fn down_steps(next: &Topology, i: usize) -> Vec<Step> {
    let v = &next.vrs[i];
    let down = next.iface_down.get(i).map(Vec::as_slice).unwrap_or_default();
    down.iter()
        .map(|&k| Step::Up {
            vr: v.name.clone(),
            iface: k,
            name: v.interfaces.get(usize::from(k)).map(|f| f.name.clone()).unwrap_or_default(),
            up: false,
            mirror: None,
            shown: false,
        })
        .collect()
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

trait PortName {
    fn port_name<'t>(&self, t: &'t Topology) -> &'t str;
}

impl PortName for IfaceConfig {
    fn port_name<'t>(&self, t: &'t Topology) -> &'t str {
        &t.ports[usize::from(self.port)].name
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const TEXT: &str = "\
ports:
  - { name: p0, kind: mem }
vrs:
  - name: r
    interfaces:
      - { name: a, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
  - name: s
    interfaces:
      - { name: a, port: p0, vlan: 2, mac: 02:00:00:00:02:00, addresses: [10.1.0.1/24] }
";

    fn topo() -> Topology {
        Topology::parse(TEXT, "plan.yaml", Path::new(".")).unwrap()
    }

    fn up(shown: bool) -> Step {
        let (vr, name) = ("r".to_string(), "a".to_string());
        Step::Up { vr, iface: 0, name, up: false, mirror: None, shown }
    }

    #[test]
    fn the_plan_is_the_text_of_its_steps_and_names_the_vrs_no_step_changes() {
        let t = topo();
        let res = crate::topology::reservation_from_words(&["packets=1234"]).unwrap();
        let sched = VrSchedule { reservation: res, batch: Some(64), ..VrSchedule::default() };
        let steps = vec![
            Step::Mtu { vr: "r".into(), iface: 0, name: "a".into(), from: 1500, mtu: 9000 },
            up(true),
            up(false),
            Step::Schedule { vr: "r".into(), sched, from: Some(VrSchedule::default()) },
            Step::RemoveVr("old".into()),
        ];
        let plan = Plan::of(&steps, &t, &t);
        assert_eq!(
            plan.steps,
            [
                "~ vr r: interface a mtu 1500 -> 9000",
                "~ vr r: interface a down",
                "~ vr r: reservation none -> 1234 packets per 1000000 ns",
                "~ vr r: batch None -> Some(64)",
                "- vr old",
            ]
        );
        assert_eq!(plan.unchanged, ["s"]);
        assert_eq!(plan.to_string().lines().last(), Some("= unchanged: s"));
    }

    #[test]
    fn a_silent_step_still_marks_its_vr_changed_and_a_new_vr_schedule_says_nothing() {
        let t = topo();
        let sched = VrSchedule { batch: Some(8), ..VrSchedule::default() };
        let steps = vec![up(false), Step::Schedule { vr: "s".into(), sched, from: None }];
        let plan = Plan::of(&steps, &t, &t);
        assert!(plan.is_empty(), "{plan:?}");
        assert!(plan.unchanged.is_empty(), "{plan:?}");
        assert_eq!(plan.to_string(), "nothing to change\n");
    }

    #[test]
    fn refusals_become_one_not_live_error_naming_each() {
        let e = ControlError::from(Refusal::NotLive(vec!["a".into(), "b".into()]));
        assert_eq!(e.code(), "not_live", "{e}");
        assert!(
            e.to_string()
                .contains("this change cannot be applied live; nothing was changed:\n! a\n! b"),
            "{e}"
        );
    }
}
