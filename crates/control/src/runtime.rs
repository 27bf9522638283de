//! Workers as threads: each polls its cells to completion, and cells move between them while
//! traffic flows.
//!
//! [`Runtime::start`] spawns one thread per worker (pinned where [`Options`] says, through the
//! caller's `pin`) and hands each the cells placed on it: the topology's placement, else the
//! worker with the fewest VRs. A worker loops: poll every cell once, then, if the control side
//! has flagged a command, take it between two polls.
//!
//! **Idle workers** do what [`Idle`] says. [`Idle::Adaptive`] (the topology's default) spins
//! while frames come, yields the CPU after [`SPIN_NS`] without any, and after [`BLOCK_AFTER_NS`]
//! (or at once after [`SPIN_NS`] when frames have lately come further apart than that: `Pace`)
//! sleeps in poll(2) on its cells' port descriptors ([`ports::Port::wakeup_fds`]) and on its
//! own eventfd, which the control side writes with each command it sends to a sleeping worker.
//! A sleep lasts at most [`BLOCK_TIMEOUT`], so VR timers, reservation periods and the ports'
//! housekeeping still run, or [`NAP`] when some port has no descriptor (`mem`). The first poll
//! that finds frames puts it back to spinning. [`Idle::Interrupt`] sleeps as soon as a poll
//! finds nothing. The sleeping itself is `ports::wait`'s: the data plane makes no system call.
//!
//! **Moving** a VR moves its cell: the old worker, between two polls, removes the cell and
//! sends it back (a cell holds no packet between polls: the VRs' extra packets leave with the
//! burst that made them); the runtime sends it to the new worker, which polls it from then on.
//! Meanwhile frames wait in the cell's port rings, so none is lost or reordered unless a ring
//! overflows during the handover (microseconds, or a scheduling quantum when the machine is
//! oversubscribed: size rings for that).
//!
//! **Reservations** change through the worker that runs the VR; the change takes effect from
//! the VR's next period (see `dataplane` `budget.rs`). **Counters** are read the same way:
//! [`Runtime::snapshot`] asks every worker for a copy, between two of its polls.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::api;
use dataplane::{
    Cell, Clock, PortCounters, Reservation, SwitchCounters, VrCounters, Worker, SPARE_WINDOW_NS,
};
use ports::wait::{Poller, Waker};
use ports::{PortStats, PortStatus};

pub use crate::build::monotonic_clock;
use crate::build::Placed;
pub use crate::topology::Idle;
use crate::Topology;

/// How long the control side waits for a worker to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Empty polls a worker spins through before it starts yielding its CPU ([`Idle::Yield`]).
const SPIN_ROUNDS: u32 = 64;
/// [`Idle::Adaptive`]: how long a worker spins through empty polls before it yields its CPU
/// between them, in nanoseconds.
pub const SPIN_NS: u64 = 50_000;
/// [`Idle::Adaptive`]: how long its polls must have found nothing before a worker sleeps, in
/// nanoseconds.
pub const BLOCK_AFTER_NS: u64 = 1_000_000;
/// The longest sleep on port descriptors: timers (neighbor retransmits, reservation periods,
/// the ports' housekeeping) run at least this often.
pub const BLOCK_TIMEOUT: Duration = Duration::from_millis(5);
/// The sleep of a worker with a port that has no descriptor (`mem`): frames there are seen
/// only when it wakes.
pub const NAP: Duration = Duration::from_micros(100);

/// How to run the workers.
#[derive(Clone, Debug)]
pub struct Options {
    /// One entry per worker: the CPU to pin it to, or `None`.
    pub cpus: Vec<Option<usize>>,
    /// Pins the calling thread to a CPU; false if refused. `None`: no pinning.
    pub pin: Option<fn(usize) -> bool>,
    /// Makes each worker's clock (time budgets and spare capacity are measured with it).
    pub clock: fn() -> Clock,
    /// What workers do when idle.
    pub idle: Idle,
    /// Length of each worker's spare-capacity window, in nanoseconds.
    pub spare_window_ns: u64,
}

impl Options {
    /// `workers` unpinned workers with a monotonic clock, idling as a host's do by default
    /// ([`Idle::Adaptive`]: they sleep once their ports are quiet, so in-process nodes, as in
    /// tests, meet a peer's first frames as a host would and leave idle CPUs to others).
    pub fn new(workers: usize) -> Options {
        Options {
            cpus: vec![None; workers],
            pin: None,
            clock: monotonic_clock,
            idle: Idle::Adaptive,
            spare_window_ns: SPARE_WINDOW_NS,
        }
    }

    /// The topology's workers (by default one per online CPU), each meant for its CPU, idling
    /// as it says; set [`Options::pin`] to pin them.
    pub fn for_topology(topo: &Topology) -> Options {
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut o = Options::new(0);
        o.cpus = topo.workers.cpus(online).into_iter().map(Some).collect();
        o.idle = topo.idle;
        o
    }
}

/// Why the runtime could not do what it was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeError(pub String);

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuntimeError {}

fn err<T>(m: impl Into<String>) -> Result<T, RuntimeError> {
    Err(RuntimeError(m.into()))
}

/// Work for a worker to do on one of its cells between two polls.
type Job = Box<dyn FnOnce(&mut Cell) + Send>;

enum Cmd {
    Install(usize, Box<Cell>),
    Job(usize, Job),
    /// Removes the cell and hands it back, to be dropped (its ports closed, its buffers'
    /// memory returned) off the worker.
    Remove(usize, Sender<Option<Box<Cell>>>),
    Detach(usize, Sender<Box<Cell>>),
    Reserve {
        cell: usize,
        vr: usize,
        r: Option<Reservation>,
        reply: Sender<Result<(), RuntimeError>>,
    },
    Status(Sender<WorkerStatus>),
    SetIdle(Idle),
}

struct WorkerHandle {
    tx: Sender<Cmd>,
    /// Set after each command sent: the worker checks this flag, not the channel, every poll.
    pending: Arc<AtomicBool>,
    wake: Arc<Wake>,
    thread: Option<JoinHandle<Vec<(usize, Cell)>>>,
}

/// How the control side wakes a worker sleeping on its ports.
struct Wake {
    /// Set by the worker while it may be sleeping (from just before its last look at
    /// `pending` until it wakes).
    asleep: AtomicBool,
    waker: Waker,
}

impl Wake {
    /// After `pending` was set: wakes the worker if it may be asleep. With both sides' SeqCst
    /// accesses, either the worker sees `pending` before it sleeps or this sees `asleep`.
    fn poke(&self) {
        if self.asleep.load(Ordering::SeqCst) {
            self.waker.wake();
        }
    }
}

/// What the control side knows of a cell: where it runs and which VRs it holds (in the
/// cell's order). A removed cell keeps its id, with no VRs.
struct CellInfo {
    worker: usize,
    vrs: Vec<String>,
    /// Names of its ports, in the cell's order.
    ports: Vec<String>,
    live: bool,
}

/// Workers running cells, and the handles to move VRs, change reservations and read counters.
pub struct Runtime {
    workers: Vec<WorkerHandle>,
    cells: Vec<CellInfo>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
}

/// The outcome of a move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    /// The VRs that moved (the cell's).
    pub vrs: Vec<String>,
    pub from: usize,
    pub to: usize,
}

/// Per-stage packets, bursts and average burst over some cells.
fn stages<'a>(cells: impl Iterator<Item = &'a dataplane::StageCounters>) -> api::Stages {
    let mut t = dataplane::StageCounters::default();
    for c in cells {
        t.rx_bursts += c.rx_bursts;
        t.rx_packets += c.rx_packets;
        t.vr_bursts += c.vr_bursts;
        t.vr_packets += c.vr_packets;
        t.tx_bursts += c.tx_bursts;
        t.tx_packets += c.tx_packets;
    }
    let stage = |packets: u64, bursts: u64| {
        let avg_burst = if bursts == 0 { 0.0 } else { packets as f64 / bursts as f64 };
        api::Stage { packets, bursts, avg_burst }
    };
    api::Stages {
        rx: stage(t.rx_packets, t.rx_bursts),
        vr: stage(t.vr_packets, t.vr_bursts),
        tx: stage(t.tx_packets, t.tx_bursts),
    }
}

/// One VR as a snapshot saw it.
#[derive(Clone, Debug)]
pub struct VrStatus {
    pub name: String,
    pub counters: VrCounters,
    pub reservation: Option<Reservation>,
    /// A change waiting for the VR's next period.
    pub pending: Option<Option<Reservation>>,
    pub batch: usize,
    /// Neighbor table entries in use, and its size.
    pub neighbors: (usize, usize),
    /// Packets waiting for neighbor resolution.
    pub queued: usize,
    /// Interfaces: name, MTU, up.
    pub interfaces: Vec<(String, u16, bool)>,
    /// When it first and last sent a transit frame, on the workers' clock (the runtime's
    /// epoch); [`Snapshot::epoch_ns`] puts it on CLOCK_MONOTONIC.
    pub sent: dataplane::Sent,
}

/// One port as a snapshot saw it.
#[derive(Clone, Debug)]
pub struct PortRow {
    pub name: String,
    pub counters: PortCounters,
    pub stats: PortStats,
    pub status: PortStatus,
    pub burst: usize,
    /// How the port runs, where it says (AF_XDP: `xdp driver, copy, multi-buffer`...).
    pub mode: Option<&'static str>,
    /// The backend's own counters by name (`vxlan`: drops by reason, datagrams sent).
    pub backend: Vec<(&'static str, u64)>,
    /// Its impairment (of what leaves by it), if it has one.
    pub impair: Option<ImpairRow>,
}

/// A port's impairment as a snapshot saw it.
#[derive(Clone, Debug)]
pub struct ImpairRow {
    pub config: dataplane::impair::ImpairConfig,
    pub counters: dataplane::impair::ImpairCounters,
    /// Frames waiting on the link now.
    pub held: usize,
}

impl ImpairRow {
    /// As `status` shows it: the settings, the counters, drops by reason, frames waiting.
    pub fn to_row(&self) -> api::ImpairRow {
        use dataplane::impair::Loss;
        let (c, k) = (&self.config, &self.counters);
        let drops = dataplane::impair::ImpairDrop::ALL
            .iter()
            .map(|&r| (r.name().to_string(), k.dropped(r)))
            .collect();
        let loss = match c.loss {
            Loss::None => None,
            Loss::Random(p) => Some(api::Loss::Random { random_pct: p.percent() }),
            Loss::Gilbert { p, r, bad, good } => Some(api::Loss::Gilbert {
                p_pct: p.percent(),
                r_pct: r.percent(),
                bad_pct: bad.percent(),
                good_pct: good.percent(),
            }),
        };
        api::ImpairRow {
            delay_ns: c.delay_ns,
            jitter_ns: c.jitter_ns,
            distribution: c.distribution.name().into(),
            loss,
            duplicate_pct: c.duplicate.percent(),
            reorder_pct: c.reorder.percent(),
            corrupt_pct: c.corrupt.percent(),
            rate_bps: c.rate_bps,
            limit: c.limit,
            seed: c.seed,
            offered: k.offered,
            sent: k.sent,
            duplicated: k.duplicated,
            corrupted: k.corrupted,
            reordered: k.reordered,
            held: self.held,
            drops,
        }
    }
}

/// One cell as a snapshot saw it.
#[derive(Clone, Debug)]
pub struct CellStatus {
    pub id: usize,
    pub vrs: Vec<VrStatus>,
    pub ports: Vec<PortRow>,
    pub switches: Vec<SwitchStatus>,
    /// Bursts and packets per stage.
    pub stages: dataplane::StageCounters,
}

/// One switch as a snapshot saw it.
#[derive(Clone, Debug)]
pub struct SwitchStatus {
    pub name: String,
    pub counters: SwitchCounters,
    /// Per member: its port's name and its drops by [`dataplane::SwitchDrop`] reason.
    pub members: Vec<(String, [u64; dataplane::SwitchDrop::COUNT])>,
    /// Multicast groups registered by snooping now.
    pub groups: usize,
}

impl SwitchStatus {
    /// As `status` shows it: counters, drops by reason, members with their drops (non-zero
    /// reasons), groups.
    pub fn to_row(&self) -> api::SwitchRow {
        let c = &self.counters;
        let drops = |d: &[u64]| -> api::Counts {
            dataplane::SwitchDrop::ALL
                .iter()
                .map(|&r| (r.name().to_string(), d[r as usize]))
                .collect()
        };
        let members = self
            .members
            .iter()
            .map(|(port, d)| {
                let mut d = drops(d);
                d.retain(|_, n| *n != 0);
                api::MemberRow { port: port.clone(), drops: d }
            })
            .collect();
        api::SwitchRow {
            name: self.name.clone(),
            counters: api::SwitchCountersRow {
                rx: c.rx,
                forwarded: c.forwarded,
                flooded: c.flooded,
                flood_copies: c.flood_copies,
                miss: c.miss,
                learned: c.learned,
                moved: c.moved,
                move_refused: c.move_refused,
                handed_back: c.handed_back,
                learn_limited: c.learn_limited,
                aged: c.aged,
                snooped: c.snooped,
                snooped_copies: c.snooped_copies,
                joins: c.joins,
                leaves: c.leaves,
                expired: c.expired,
                queries: c.queries,
                groups_full: c.groups_full,
            },
            drops: drops(&c.drops),
            members,
            groups: self.groups,
        }
    }
}

/// One worker as a snapshot saw it.
#[derive(Clone, Debug)]
pub struct WorkerStatus {
    pub index: usize,
    pub cpu: Option<usize>,
    pub pinned: bool,
    /// Polls over all its cells, and those that received nothing.
    pub rounds: u64,
    pub idle_rounds: u64,
    /// Spare capacity of its last spare window, in nanoseconds.
    pub spare_ns: u64,
    /// What it does when idle.
    pub idle: Idle,
    /// Times it slept on its ports' descriptors ([`BLOCK_TIMEOUT`] at most), and times it
    /// napped instead ([`NAP`]: a port without a descriptor), and how long it spent in both.
    pub sleeps: u64,
    pub naps: u64,
    pub slept_ns: u64,
    pub cells: Vec<CellStatus>,
}

/// Every worker's counters, read between two of its polls (workers are read one after the
/// other, so the copies are not of one instant).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub uptime: Duration,
    pub workers: Vec<WorkerStatus>,
    /// The runtime's epoch (the workers' time 0) on CLOCK_MONOTONIC, in ns.
    pub epoch_ns: u64,
}

impl Snapshot {
    /// A VR by name, with the worker it runs on.
    pub fn vr(&self, name: &str) -> Option<(usize, &VrStatus)> {
        self.workers.iter().find_map(|w| {
            w.cells.iter().flat_map(|c| &c.vrs).find(|v| v.name == name).map(|v| (w.index, v))
        })
    }

    /// Every VR with its worker, in cell order.
    pub fn vrs(&self) -> impl Iterator<Item = (usize, &VrStatus)> {
        self.workers.iter().flat_map(|w| w.cells.iter().flat_map(|c| &c.vrs).map(|v| (w.index, v)))
    }

    /// Every port, in cell order.
    pub fn ports(&self) -> impl Iterator<Item = &PortRow> {
        self.workers.iter().flat_map(|w| w.cells.iter().flat_map(|c| &c.ports))
    }

    /// Every switch, in worker and cell order.
    pub fn switches(&self) -> impl Iterator<Item = &SwitchStatus> {
        self.workers.iter().flat_map(|w| w.cells.iter().flat_map(|c| &c.switches))
    }

    /// As `status` shows it: `workers` (each with its CPU and VRs), `vrs` (counters that are
    /// not zero, `over_budget` always, the worker and reservation), `ports` and `switches`.
    /// What the node adds (routes, replicated VRs, MSRs, memory) is left empty here.
    pub fn to_status(&self) -> api::Status {
        let workers = self
            .workers
            .iter()
            .map(|w| api::WorkerRow {
                index: w.index,
                cpu: w.cpu,
                pinned: w.pinned,
                rounds: w.rounds,
                idle_rounds: w.idle_rounds,
                spare_ns: w.spare_ns,
                idle: w.idle.name().into(),
                sleeps: w.sleeps,
                naps: w.naps,
                slept_s: w.slept_ns as f64 / 1e9,
                vrs: w.cells.iter().flat_map(|c| &c.vrs).map(|v| v.name.clone()).collect(),
                stages: stages(w.cells.iter().map(|c| &c.stages)),
            })
            .collect();
        api::Status {
            uptime_s: self.uptime.as_secs_f64(),
            workers,
            vrs: self.vrs().map(|(w, v)| v.to_row(w, self.epoch_ns)).collect(),
            ports: self.ports().map(PortRow::to_row).collect(),
            switches: self.switches().map(SwitchStatus::to_row).collect(),
            replicated: Vec::new(),
            msrs: Vec::new(),
            state: "running".into(),
            memory: api::Memory { rss_bytes: 0 },
        }
    }

    /// [`Snapshot::to_status`] as a JSON tree, for the labs' reports and tests that read it
    /// by key (not a reply: the API serialises [`api::Status`]).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.to_status()).expect("status serialises")
    }
}

impl VrStatus {
    /// As `status` shows it, on worker `worker` of a runtime whose epoch is `epoch_ns`.
    fn to_row(&self, worker: usize, epoch_ns: u64) -> api::VrRow {
        api::VrRow {
            name: self.name.clone(),
            worker,
            counters: self
                .counters
                .named()
                .into_iter()
                .filter(|(_, n)| *n != 0)
                .map(|(k, n)| (k.to_string(), n))
                .collect(),
            over_budget: self.counters.dropped(dataplane::VrDrop::OverBudget),
            reservation: self.reservation.map(reservation_row),
            pending_reservation: self.pending.map(|p| p.map(reservation_row)),
            batch: self.batch,
            neighbors: api::NeighborUse {
                used: self.neighbors.0,
                size: self.neighbors.1,
                queued: self.queued,
            },
            interfaces: self
                .interfaces
                .iter()
                .map(|(n, mtu, up)| api::InterfaceRow {
                    name: n.clone(),
                    mtu: *mtu,
                    up: *up,
                    held: false,
                })
                .collect(),
            first_sent_ns: self.sent.first().map(|t| epoch_ns + t),
            last_sent_ns: self.sent.last().map(|t| epoch_ns + t),
            routes: None,
            fib: None,
            control_plane: None,
        }
    }
}

impl PortRow {
    /// As `status` shows it.
    fn to_row(&self) -> api::PortRow {
        let status = match &self.status {
            PortStatus::Up => "up".to_string(),
            PortStatus::Down(why) => format!("down: {why}"),
        };
        api::PortRow {
            name: self.name.clone(),
            rx: self.stats.rx_packets,
            tx: self.stats.tx_packets,
            rx_dropped: self.stats.rx_dropped,
            tx_full: self.stats.tx_full,
            drops: dataplane::PortDrop::ALL
                .iter()
                .map(|&r| (r.name().to_string(), self.counters.dropped(r)))
                .collect(),
            status,
            burst: self.burst,
            mode: self.mode.map(String::from),
            backend: self.backend.iter().map(|&(k, n)| (k.to_string(), n)).collect(),
            impair: self.impair.as_ref().map(ImpairRow::to_row),
        }
    }
}

/// A reservation as the API shows it: `{"time_ns"|"packets": Q, "period_ns": T, "weight": W}`.
pub fn reservation_row(r: Reservation) -> api::ReservationRow {
    let (time_ns, packets) = match r.budget {
        dataplane::Budget::Time(ns) => (Some(ns), None),
        dataplane::Budget::Packets(n) => (None, Some(n)),
    };
    api::ReservationRow { time_ns, packets, period_ns: r.period_ns, weight: r.weight }
}

impl Runtime {
    /// Starts `opts.cpus.len()` workers running `cells`: each where the topology places it,
    /// the rest balanced by VR count (largest cells first, each to the least loaded worker).
    pub fn start(cells: Vec<Placed>, opts: Options) -> Result<Runtime, RuntimeError> {
        let n = opts.cpus.len();
        if n == 0 {
            return err("a runtime needs at least one worker");
        }
        let placement = place(&cells, n)?;
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let mut initial: Vec<Vec<(usize, Cell)>> = (0..n).map(|_| Vec::new()).collect();
        let mut infos = Vec::new();
        for (id, (p, &w)) in cells.into_iter().zip(&placement).enumerate() {
            let vrs = p.cell.vrs().iter().map(|v| v.name().to_string()).collect();
            let ports = (0..p.cell.port_count()).map(|i| p.cell.port_name(i).to_string()).collect();
            infos.push(CellInfo { worker: w, vrs, ports, live: true });
            initial[w].push((id, p.cell));
        }
        let mut workers = Vec::new();
        for (index, mine) in initial.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel();
            let pending = Arc::new(AtomicBool::new(false));
            let waker = Waker::new()
                .map_err(|e| RuntimeError(format!("cannot start worker {index}: eventfd: {e}")))?;
            let wake = Arc::new(Wake { asleep: AtomicBool::new(false), waker });
            let ctx = Ctx {
                index,
                cpu: opts.cpus[index],
                pin: opts.pin,
                clock: opts.clock,
                idle: opts.idle,
                spare_window_ns: opts.spare_window_ns,
                rx,
                pending: pending.clone(),
                wake: wake.clone(),
                stop: stop.clone(),
                epoch,
            };
            let thread = std::thread::Builder::new()
                .name(format!("worker{index}"))
                .spawn(move || ctx.run(mine))
                .map_err(|e| RuntimeError(format!("cannot start worker {index}: {e}")))?;
            workers.push(WorkerHandle { tx, pending, wake, thread: Some(thread) });
        }
        Ok(Runtime { workers, cells: infos, stop, epoch })
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// The worker running VR `name`.
    pub fn worker_of(&self, name: &str) -> Option<usize> {
        self.cell_of(name).ok().map(|(c, _)| self.cells[c].worker)
    }

    /// The cell running VR `name`, and the VR's index in it (for a replicated VR, replica 0's).
    pub fn locate(&self, name: &str) -> Result<(usize, usize), RuntimeError> {
        self.cell_of(name).or_else(|e| match self.instances(name).first() {
            Some(first) => self.cell_of(first),
            None => Err(e),
        })
    }

    /// VR names of cell `c`, in the cell's order.
    pub fn cell_vrs(&self, c: usize) -> &[String] {
        &self.cells[c].vrs
    }

    /// Port names of cell `c`, in the cell's order (a VR joining it numbers ports so).
    pub fn cell_ports(&self, c: usize) -> &[String] {
        &self.cells[c].ports
    }

    /// The cell holding port `name`, if one does.
    pub fn cell_of_port(&self, name: &str) -> Option<usize> {
        self.cells.iter().position(|c| c.live && c.ports.iter().any(|p| p == name))
    }

    /// The worker running cell `c`, if the cell still runs.
    fn live_worker(&self, c: usize) -> Result<usize, RuntimeError> {
        match self.cells.get(c) {
            Some(i) if i.live => Ok(i.worker),
            _ => err(format!("no cell {c}")),
        }
    }

    /// The instant the workers' `now` (nanoseconds) counts from.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// The epoch on CLOCK_MONOTONIC (which `Instant` reads on Linux), in ns: the workers'
    /// time `t` is `epoch_ns() + t` there, comparable between processes on one machine.
    pub fn epoch_ns(&self) -> u64 {
        crate::sys::monotonic_ns().saturating_sub(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Runs `f` on cell `c` on its worker, between two polls, and returns what it returns.
    /// On a timeout the job still runs when the worker gets to it.
    pub fn on_cell<T: Send + 'static>(
        &self,
        c: usize,
        f: impl FnOnce(&mut Cell) -> T + Send + 'static,
    ) -> Result<T, RuntimeError> {
        let w = self.live_worker(c)?;
        let (tx, rx) = mpsc::channel();
        self.send(
            w,
            Cmd::Job(
                c,
                Box::new(move |cell: &mut Cell| {
                    let _ = tx.send(f(cell));
                }),
            ),
        )?;
        answer(&rx, w)
    }

    /// Runs `f` on port `name` (its cell and index in the cell) in every cell holding it (a
    /// replicated VR's cells each hold a queue of its ports), between two polls; returns what
    /// each returned. Fails if no cell holds it.
    pub fn on_port<T: Send + 'static>(
        &self,
        name: &str,
        f: impl Fn(&mut Cell, usize) -> T + Clone + Send + 'static,
    ) -> Result<Vec<T>, RuntimeError> {
        let held: Vec<(usize, usize)> = (0..self.cells.len())
            .filter(|&c| self.cells[c].live)
            .filter_map(|c| Some((c, self.cells[c].ports.iter().position(|p| p == name)?)))
            .collect();
        if held.is_empty() {
            return err(format!("no port {name}"));
        }
        held.into_iter()
            .map(|(c, p)| {
                let f = f.clone();
                self.on_cell(c, move |cell| f(cell, p))
            })
            .collect()
    }

    /// Runs `f` on VR `name` (its cell and index) on its worker, between two polls.
    pub fn on_vr<T: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Cell, usize) -> T + Send + 'static,
    ) -> Result<T, RuntimeError> {
        let (c, v) = self.cell_of(name)?;
        self.on_cell(c, move |cell| f(cell, v))
    }

    /// The running instances of VR `name`: the VR itself, or its replicas (`name#0`, `name#1`,
    /// ..., see `dataplane::replica`) in order.
    pub fn instances(&self, name: &str) -> Vec<String> {
        if self.cell_of(name).is_ok() {
            return vec![name.to_string()];
        }
        let mut found: Vec<(usize, String)> = self
            .cells
            .iter()
            .flat_map(|c| &c.vrs)
            .filter_map(|v| match dataplane::replica::replica_of(v) {
                Some((base, r)) if base == name => Some((r, v.clone())),
                _ => None,
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, v)| v).collect()
    }

    /// Runs `f` on every instance of VR `name` ([`Runtime::instances`]), each on its worker
    /// between two polls, one after the other; returns what each returned, in replica order.
    pub fn on_vr_each<T: Send + 'static>(
        &self,
        name: &str,
        f: impl Fn(&mut Cell, usize) -> T + Clone + Send + 'static,
    ) -> Result<Vec<T>, RuntimeError> {
        let names = self.instances(name);
        if names.is_empty() {
            return err(format!("no VR named {name:?}"));
        }
        names.iter().map(|n| self.on_vr(n, f.clone())).collect()
    }

    /// Starts running a new cell on `worker` (default: the one with the fewest VRs); returns
    /// its id.
    pub fn add_cell(&mut self, cell: Cell, worker: Option<usize>) -> Result<usize, RuntimeError> {
        let n = self.workers.len();
        let w = match worker {
            Some(w) if w >= n => return err(format!("no worker {w}: there are {n}")),
            Some(w) => w,
            None => (0..n)
                .min_by_key(|&w| {
                    self.cells
                        .iter()
                        .filter(|c| c.live && c.worker == w)
                        .map(|c| c.vrs.len())
                        .sum::<usize>()
                })
                .unwrap_or(0),
        };
        let id = self.cells.len();
        let vrs = cell.vrs().iter().map(|v| v.name().to_string()).collect();
        let ports = (0..cell.port_count()).map(|i| cell.port_name(i).to_string()).collect();
        self.send(w, Cmd::Install(id, Box::new(cell)))?;
        self.cells.push(CellInfo { worker: w, vrs, ports, live: true });
        Ok(id)
    }

    /// Stops running cell `c` and drops it (closing its ports).
    pub fn remove_cell(&mut self, c: usize) -> Result<(), RuntimeError> {
        let w = self.live_worker(c)?;
        let (tx, rx) = mpsc::channel();
        self.send(w, Cmd::Remove(c, tx))?;
        let cell = answer(&rx, w)?;
        self.cells[c] = CellInfo { worker: w, vrs: Vec::new(), ports: Vec::new(), live: false };
        drop(cell);
        Ok(())
    }

    /// Adds `ports` and VR `vr` to cell `c` (see [`Cell::add_vr`]).
    pub fn add_vr(
        &mut self,
        c: usize,
        ports: Vec<Box<dyn ports::Port>>,
        vr: dataplane::Vr,
    ) -> Result<(), RuntimeError> {
        let name = vr.name().to_string();
        let names: Vec<String> = ports.iter().map(|p| p.name().to_string()).collect();
        // A Box<dyn Port> is Send; the job hands it to the worker.
        let r = self.on_cell(c, move |cell| cell.add_vr(ports, vr).map_err(|e| e.0))?;
        r.map_err(RuntimeError)?;
        self.cells[c].vrs.push(name);
        self.cells[c].ports.extend(names);
        Ok(())
    }

    /// As [`Runtime::add_vr`], and then, in the same job, each of `members` (switch name,
    /// cell-local port, mode) joins its switch in the cell (see [`Cell::add_switch_member`]):
    /// a VR whose interfaces sit on running switches.
    pub fn add_vr_on_switches(
        &mut self,
        c: usize,
        ports: Vec<Box<dyn ports::Port>>,
        vr: dataplane::Vr,
        members: Vec<(String, u16, dataplane::MemberMode)>,
    ) -> Result<(), RuntimeError> {
        let name = vr.name().to_string();
        let names: Vec<String> = ports.iter().map(|p| p.name().to_string()).collect();
        let r = self.on_cell(c, move |cell| {
            let at = |cell: &Cell, sw: &str| cell.switches().iter().position(|s| s.name() == sw);
            if let Some((sw, ..)) = members.iter().find(|(sw, ..)| at(cell, sw).is_none()) {
                return Err(format!("no switch {sw} in the cell"));
            }
            cell.add_vr(ports, vr).map_err(|e| e.0)?;
            for (sw, p, mode) in members {
                let s = at(cell, &sw).expect("checked above");
                cell.add_switch_member(s, p, mode).map_err(|e| e.0)?;
            }
            Ok(())
        })?;
        r.map_err(RuntimeError)?;
        self.cells[c].vrs.push(name);
        self.cells[c].ports.extend(names);
        Ok(())
    }

    /// Adds `port` to cell `c` and makes it a member of the cell's switch `switch` in `mode`,
    /// in one job: a port joining a running switch. On error nothing changes.
    pub fn add_port_on_switch(
        &mut self,
        c: usize,
        port: Box<dyn ports::Port>,
        switch: String,
        mode: dataplane::MemberMode,
    ) -> Result<(), RuntimeError> {
        let name = port.name().to_string();
        // Err((whether the port was added, why)).
        let r = self.on_cell(c, move |cell| {
            let s = (cell.switches().iter().position(|s| s.name() == switch))
                .ok_or_else(|| (false, format!("no switch {switch} in the cell")))?;
            let p = cell.add_port(port).map_err(|e| (false, e.0))?;
            if let Err(e) = cell.add_switch_member(s, p, mode) {
                // Not a member, so not on the data path: closed again at once.
                drop(cell.close_port(p));
                return Err((true, e.0));
            }
            Ok(())
        })?;
        match r {
            Ok(()) => self.cells[c].ports.push(name),
            Err((added, why)) => {
                if added {
                    self.cells[c].ports.push(ports::closed::closed_name(&name));
                }
                return Err(RuntimeError(why));
            }
        }
        Ok(())
    }

    /// Closes port `name` of cell `c` (in no switch, carrying no VR interface; see
    /// [`Cell::close_port`]); the port is dropped here, off the data path. The cell's list
    /// keeps its place under the closed port's name, so the others keep their numbers.
    pub fn close_port(&mut self, c: usize, name: &str) -> Result<(), RuntimeError> {
        let Some(p) = self.cells.get(c).and_then(|i| i.ports.iter().rposition(|n| n == name))
        else {
            return err(format!("no port {name} in cell {c}"));
        };
        let r = self.on_cell(c, move |cell| cell.close_port(p as u16).map_err(|e| e.0))?;
        let port = r.map_err(RuntimeError)?;
        self.cells[c].ports[p] = ports::closed::closed_name(name);
        drop(port);
        Ok(())
    }

    /// Removes VR `name` from its cell (which keeps running, with its ports); returns the VR,
    /// to be dropped by the caller, off the worker.
    pub fn remove_vr(&mut self, name: &str) -> Result<dataplane::Vr, RuntimeError> {
        let (c, v) = self.cell_of(name)?;
        let vr = self
            .on_cell(c, move |cell| cell.remove_vr(v).map_err(|e| e.0))?
            .map_err(RuntimeError)?;
        self.cells[c].vrs.remove(v);
        Ok(vr)
    }

    /// Every VR and the worker it runs on, in cell order.
    pub fn placement(&self) -> Vec<(String, usize)> {
        self.cells.iter().flat_map(|c| c.vrs.iter().map(|v| (v.clone(), c.worker))).collect()
    }

    fn cell_of(&self, vr: &str) -> Result<(usize, usize), RuntimeError> {
        for (c, info) in self.cells.iter().enumerate() {
            if let Some(i) = info.vrs.iter().position(|v| v == vr) {
                return Ok((c, i));
            }
        }
        err(format!("no VR named {vr:?}"))
    }

    fn send(&self, w: usize, cmd: Cmd) -> Result<(), RuntimeError> {
        self.workers[w]
            .tx
            .send(cmd)
            .map_err(|_| RuntimeError(format!("worker {w} has stopped")))?;
        self.flag(w);
        Ok(())
    }

    /// Tells worker `w` a command is waiting, waking it if it sleeps.
    fn flag(&self, w: usize) {
        let h = &self.workers[w];
        h.pending.store(true, Ordering::SeqCst);
        h.wake.poke();
    }

    /// Changes what every worker does when idle, from its next poll.
    pub fn set_idle(&self, idle: Idle) -> Result<(), RuntimeError> {
        for w in 0..self.workers.len() {
            self.send(w, Cmd::SetIdle(idle))?;
        }
        Ok(())
    }

    /// Moves VR `name`, with the rest of its cell, to worker `to`. Nothing is lost: the cell
    /// leaves its worker between two polls and its frames wait in the port rings meanwhile.
    pub fn move_vr(&mut self, name: &str, to: usize) -> Result<Moved, RuntimeError> {
        if to >= self.workers.len() {
            return err(format!(
                "no worker {to}: there are {} (0..={})",
                self.workers.len(),
                self.workers.len() - 1
            ));
        }
        let (c, _) = self.cell_of(name)?;
        let from = self.cells[c].worker;
        let vrs = self.cells[c].vrs.clone();
        if from == to {
            return Ok(Moved { vrs, from, to });
        }
        let (tx, rx) = mpsc::channel();
        self.send(from, Cmd::Detach(c, tx))?;
        // On a timeout the worker keeps the cell when it gets to the command (the reply
        // channel is gone by then), so the VR stays where it is, as reported.
        let cell = answer(&rx, from)
            .map_err(|e| RuntimeError(format!("{e}; vr {name} stays on worker {from}")))?;
        // From here the cell is ours; if the new worker is gone, it goes back to the old one.
        if let Err(Cmd::Install(_, cell)) =
            self.workers[to].tx.send(Cmd::Install(c, cell)).map_err(|e| e.0)
        {
            let _ = self.send(from, Cmd::Install(c, cell));
            return err(format!("worker {to} has stopped; vr {name} stays on worker {from}"));
        }
        self.flag(to);
        self.cells[c].worker = to;
        Ok(Moved { vrs, from, to })
    }

    /// Sets VR `name`'s reservation (`None`: unlimited): at once if it has none running, else
    /// from its next period.
    pub fn set_reservation(
        &mut self,
        name: &str,
        r: Option<Reservation>,
    ) -> Result<(), RuntimeError> {
        let (c, vr) = self.cell_of(name)?;
        let w = self.cells[c].worker;
        let (tx, rx) = mpsc::channel();
        self.send(w, Cmd::Reserve { cell: c, vr, r, reply: tx })?;
        match answer(&rx, w) {
            Ok(r) => r,
            // The command is queued: the worker applies it when it gets to it.
            Err(e) => err(format!("{e}; the change applies when it does")),
        }
    }

    /// Every worker's counters, placement and reservations.
    pub fn snapshot(&self) -> Result<Snapshot, RuntimeError> {
        let mut replies = Vec::new();
        for w in 0..self.workers.len() {
            let (tx, rx) = mpsc::channel();
            self.send(w, Cmd::Status(tx))?;
            replies.push(rx);
        }
        let mut workers = Vec::new();
        for (w, rx) in replies.iter().enumerate() {
            workers.push(answer(rx, w)?);
        }
        Ok(Snapshot { uptime: self.epoch.elapsed(), workers, epoch_ns: self.epoch_ns() })
    }

    /// Stops every worker and returns the cells, in the order they were given to
    /// [`Runtime::start`].
    pub fn stop(mut self) -> Result<Vec<Cell>, RuntimeError> {
        self.stop_all();
        let mut all: Vec<(usize, Cell)> = Vec::new();
        let mut panicked = Vec::new();
        for (w, h) in self.workers.iter_mut().enumerate() {
            if let Some(t) = h.thread.take() {
                match t.join() {
                    Ok(cells) => all.extend(cells),
                    Err(_) => panicked.push(w),
                }
            }
        }
        if !panicked.is_empty() {
            return err(format!("worker(s) {panicked:?} panicked; their cells are lost"));
        }
        all.sort_by_key(|(id, _)| *id);
        Ok(all.into_iter().map(|(_, c)| c).collect())
    }

    /// Raises the stop flag and wakes every worker, so sleeping ones see it now.
    fn stop_all(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for h in &self.workers {
            h.wake.waker.wake();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_all();
        for h in &mut self.workers {
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn answer<T>(rx: &Receiver<T>, w: usize) -> Result<T, RuntimeError> {
    rx.recv_timeout(ANSWER_TIMEOUT).map_err(|e| match e {
        RecvTimeoutError::Timeout => {
            RuntimeError(format!("worker {w} did not answer within {} s", ANSWER_TIMEOUT.as_secs()))
        }
        RecvTimeoutError::Disconnected => RuntimeError(format!("worker {w} has stopped")),
    })
}

/// The worker of each cell: the topology's, else the least loaded by VRs (a cell without VRs
/// counts one), placing the largest cells first.
fn place(cells: &[Placed], n: usize) -> Result<Vec<usize>, RuntimeError> {
    let weight = |p: &Placed| p.cell.vrs().len().max(1);
    let mut load = vec![0usize; n];
    let mut out = vec![usize::MAX; cells.len()];
    for (i, p) in cells.iter().enumerate() {
        if let Some(w) = p.worker {
            if w >= n {
                let names: Vec<&str> = p.cell.vrs().iter().map(|v| v.name()).collect();
                return err(format!(
                    "vr {} is placed on worker {w}, but there are {n} workers (0..={})",
                    names.join(", "),
                    n - 1
                ));
            }
            out[i] = w;
            load[w] += weight(p);
        }
    }
    let mut free: Vec<usize> = (0..cells.len()).filter(|&i| out[i] == usize::MAX).collect();
    free.sort_by_key(|&i| std::cmp::Reverse(weight(&cells[i])));
    for i in free {
        let w = (0..n).min_by_key(|&w| (load[w], w)).expect("n > 0");
        out[i] = w;
        load[w] += weight(&cells[i]);
    }
    Ok(out)
}

/// What one worker thread needs.
struct Ctx {
    index: usize,
    cpu: Option<usize>,
    pin: Option<fn(usize) -> bool>,
    clock: fn() -> Clock,
    idle: Idle,
    spare_window_ns: u64,
    rx: Receiver<Cmd>,
    pending: Arc<AtomicBool>,
    wake: Arc<Wake>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
}

/// A worker's sleeping: the descriptors of its last sleep (kept, so sleeping does not
/// allocate once they have been seen) and what it counts.
#[derive(Default)]
struct Sleeper {
    poller: Poller,
    fds: Vec<RawFd>,
    sleeps: u64,
    naps: u64,
    slept_ns: u64,
}

impl Sleeper {
    /// Sleeps on `cells`' port descriptors and the worker's waker until one is readable or
    /// the timeout passes: [`BLOCK_TIMEOUT`], or [`NAP`] if a port has no descriptor, or less
    /// when a frame an impairment holds is due sooner. Does not sleep if a port has frames
    /// waiting already, a held frame is due, a command is pending or the worker must stop.
    fn sleep(&mut self, ctx: &Ctx, cells: &mut [Cell]) {
        self.fds.clear();
        let mut all = true;
        for c in cells.iter() {
            all &= c.wakeup_fds(&mut self.fds);
        }
        self.fds.push(ctx.wake.waker.fd());
        let mut waiting = false;
        for c in cells.iter_mut() {
            waiting |= c.arm_wakeups();
        }
        if !waiting {
            ctx.wake.asleep.store(true, Ordering::SeqCst);
            // Frames an impairment holds leave at their time: never sleep past the first.
            let due = cells.iter().filter_map(Cell::next_due).min().map(|d| {
                Duration::from_nanos(d.saturating_sub(ctx.epoch.elapsed().as_nanos() as u64))
            });
            let soon = due.is_some_and(|d| d.is_zero());
            if !soon && !ctx.pending.load(Ordering::SeqCst) && !ctx.stop.load(Ordering::SeqCst) {
                let timeout = if all { BLOCK_TIMEOUT } else { NAP };
                let timeout = due.map_or(timeout, |d| d.min(timeout));
                let t0 = Instant::now();
                if self.poller.wait(&self.fds, timeout).is_err() {
                    // Cannot poll (out of memory, too many descriptors): sleep it off.
                    std::thread::sleep(NAP);
                }
                self.slept_ns += t0.elapsed().as_nanos() as u64;
                if all {
                    self.sleeps += 1;
                } else {
                    self.naps += 1;
                }
            }
            ctx.wake.asleep.store(false, Ordering::SeqCst);
            ctx.wake.waker.clear();
        }
        for c in cells.iter_mut() {
            c.disarm_wakeups();
        }
    }
}

impl Ctx {
    /// The worker loop: poll every cell, take commands between polls, until stopped.
    fn run(self, mine: Vec<(usize, Cell)>) -> Vec<(usize, Cell)> {
        let pinned = match (self.pin, self.cpu) {
            (Some(pin), Some(cpu)) => pin(cpu),
            _ => false,
        };
        let mut w = Worker::with_clock((self.clock)());
        w.set_spare_window(self.spare_window_ns);
        let epoch = self.epoch;
        w.set_poll_clock(Some(Box::new(move || epoch.elapsed().as_nanos() as u64)));
        let (mut ids, mut cells): (Vec<usize>, Vec<Cell>) = mine.into_iter().unzip();
        let (mut rounds, mut idle_rounds, mut idle_run) = (0u64, 0u64, 0u32);
        let mut idle = self.idle;
        let mut sleeper = Sleeper::default();
        let mut pace = Pace::default();
        // When the polls started finding nothing (epoch nanoseconds), while they do.
        let mut quiet_since: Option<u64> = None;
        while !self.stop.load(Ordering::Relaxed) {
            if self.pending.load(Ordering::Relaxed) && self.pending.swap(false, Ordering::Acquire) {
                while let Ok(cmd) = self.rx.try_recv() {
                    match cmd {
                        Cmd::Install(id, cell) => {
                            ids.push(id);
                            cells.push(*cell);
                        }
                        Cmd::Job(id, job) => {
                            if let Some(i) = ids.iter().position(|&x| x == id) {
                                job(&mut cells[i]);
                            }
                        }
                        Cmd::Remove(id, reply) => {
                            let cell = ids.iter().position(|&x| x == id).map(|i| {
                                ids.remove(i);
                                Box::new(cells.remove(i))
                            });
                            let _ = reply.send(cell);
                        }
                        Cmd::Detach(id, reply) => {
                            if let Some(i) = ids.iter().position(|&x| x == id) {
                                let cell = Box::new(cells.remove(i));
                                // The control side gave up waiting (it reported the move as
                                // failed and the VR as staying here): keep the cell.
                                if let Err(back) = reply.send(cell) {
                                    ids.insert(i, id);
                                    cells.insert(i, *back.0);
                                }
                            }
                        }
                        Cmd::Reserve { cell, vr, r, reply } => {
                            let res = match ids.iter().position(|&x| x == cell) {
                                Some(i) => {
                                    cells[i].set_reservation(vr, r).map_err(|e| RuntimeError(e.0))
                                }
                                None => {
                                    Err(RuntimeError(format!("cell {cell} is not on this worker")))
                                }
                            };
                            let _ = reply.send(res);
                        }
                        Cmd::Status(reply) => {
                            let _ = reply.send(WorkerStatus {
                                index: self.index,
                                cpu: self.cpu,
                                pinned,
                                rounds,
                                idle_rounds,
                                spare_ns: w.spare_ns(),
                                idle,
                                sleeps: sleeper.sleeps,
                                naps: sleeper.naps,
                                slept_ns: sleeper.slept_ns,
                                cells: ids
                                    .iter()
                                    .zip(&cells)
                                    .map(|(&id, c)| status(id, c))
                                    .collect(),
                            });
                        }
                        Cmd::SetIdle(i) => {
                            idle = i;
                            quiet_since = None;
                        }
                    }
                }
            }
            if cells.is_empty() {
                // Nothing to poll: wait for work instead of burning the CPU.
                match idle {
                    Idle::Spin | Idle::Yield => std::thread::sleep(NAP),
                    Idle::Adaptive | Idle::Interrupt => sleeper.sleep(&self, &mut cells),
                }
                continue;
            }
            let now = self.epoch.elapsed().as_nanos() as u64;
            let n = w.poll(&mut cells, now);
            rounds += 1;
            if n > 0 {
                idle_run = 0;
                quiet_since = None;
                pace.busy(now);
                continue;
            }
            idle_rounds += 1;
            idle_run = idle_run.saturating_add(1);
            let quiet = now.saturating_sub(*quiet_since.get_or_insert(now));
            let step = match idle {
                Idle::Spin => Step::Spin,
                Idle::Yield if idle_run > SPIN_ROUNDS => Step::Yield,
                Idle::Yield => Step::Spin,
                Idle::Adaptive => pace.step(quiet),
                Idle::Interrupt => Step::Sleep,
            };
            match step {
                Step::Spin => std::hint::spin_loop(),
                Step::Yield => std::thread::yield_now(),
                // Once asleep, a poll that finds nothing sleeps again at once: `quiet_since`
                // stays until frames come.
                Step::Sleep => sleeper.sleep(&self, &mut cells),
            }
        }
        ids.into_iter().zip(cells).collect()
    }
}

/// What a worker does after a poll that found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Spin,
    Yield,
    Sleep,
}

/// [`Idle::Adaptive`]'s sense of the traffic's pace: how far apart the polls that found
/// frames have been lately (an average that weighs the last gap 1/4).
///
/// Yielding between empty polls keeps the thread runnable, so on a CPU it shares it still
/// takes a turn at every pass of the scheduler. When frames come further apart than the spin
/// window (a stream of a few thousand frames a second, pings), the next one is not coming
/// soon, and a yielding worker only crowds the threads that would send it or take it: it
/// sleeps once the spin window has passed, as [`Idle::Interrupt`] does. Faster traffic never
/// leaves the spin window, so it is polled as before. (A migration's handoff gap at 5,000
/// frames a second on AF_XDP ports of the 2-CPU VM: median 0.62 ms over 24 moves this way,
/// 3.25 ms yielding.)
#[derive(Debug, Default)]
struct Pace {
    last_busy: Option<u64>,
    gap_ns: u64,
}

impl Pace {
    /// A poll at `now` (ns) found frames.
    fn busy(&mut self, now: u64) {
        if let Some(t) = self.last_busy {
            let gap = now.saturating_sub(t);
            self.gap_ns = self.gap_ns - self.gap_ns / 4 + gap / 4;
        }
        self.last_busy = Some(now);
    }

    /// After `quiet` ns of empty polls.
    fn step(&self, quiet: u64) -> Step {
        if quiet < SPIN_NS {
            Step::Spin
        } else if quiet < BLOCK_AFTER_NS && self.gap_ns <= SPIN_NS {
            Step::Yield
        } else {
            Step::Sleep
        }
    }
}

/// A copy of one cell's counters and settings.
fn status(id: usize, c: &Cell) -> CellStatus {
    let vrs = c
        .vrs()
        .iter()
        .enumerate()
        .map(|(v, vr)| VrStatus {
            name: vr.name().to_string(),
            counters: *vr.counters(),
            reservation: c.reservation(v),
            pending: c.pending_reservation(v),
            batch: c.vr_batch(v),
            neighbors: vr.neighbor_occupancy(),
            queued: vr.queued(),
            interfaces: vr.interfaces(),
            sent: vr.sent(),
        })
        .collect();
    let ports = (0..c.port_count())
        .map(|p| PortRow {
            name: c.port_name(p).to_string(),
            counters: *c.port_counters(p),
            stats: c.port_stats(p),
            status: c.port_status(p),
            burst: c.port_burst(p),
            mode: c.port_mode(p),
            backend: c.port_backend_counters(p),
            impair: c.port_impair(p).map(|i| ImpairRow {
                config: *i.config(),
                counters: *i.counters(),
                held: i.held(),
            }),
        })
        .collect();
    let switches = c
        .switches()
        .iter()
        .map(|s| SwitchStatus {
            name: s.name().to_string(),
            counters: *s.counters(),
            members: s
                .live_members()
                .map(|(m, p)| {
                    (c.port_name(p as usize).to_string(), s.member_drops()[usize::from(m)])
                })
                .collect(),
            groups: s.group_count(),
        })
        .collect();
    CellStatus { id, vrs, ports, switches, stages: c.stages() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls that find frames every `gap` ns, `n` times, from `t`; returns the time after.
    fn frames(p: &mut Pace, mut t: u64, gap: u64, n: usize) -> u64 {
        for _ in 0..n {
            t += gap;
            p.busy(t);
        }
        t
    }

    #[test]
    fn adaptive_sleeps_early_only_between_slow_frames() {
        let mut p = Pace::default();
        // Fast traffic: spin, then yield until BLOCK_AFTER_NS, then sleep.
        let t = frames(&mut p, 0, 2_000, 64);
        assert_eq!(p.step(0), Step::Spin);
        assert_eq!(p.step(SPIN_NS - 1), Step::Spin);
        assert_eq!(p.step(SPIN_NS), Step::Yield);
        assert_eq!(p.step(BLOCK_AFTER_NS - 1), Step::Yield);
        assert_eq!(p.step(BLOCK_AFTER_NS), Step::Sleep);
        // 5,000 frames a second: sleep once the spin window has passed.
        let t = frames(&mut p, t, 200_000, 16);
        assert_eq!(p.step(SPIN_NS - 1), Step::Spin);
        assert_eq!(p.step(SPIN_NS), Step::Sleep);
        // One frame after a long silence counts as slow at once.
        let mut q = Pace::default();
        frames(&mut q, 0, 2_000, 8);
        frames(&mut q, 10_000, 1_000_000_000, 1);
        assert_eq!(q.step(SPIN_NS), Step::Sleep);
        // Fast again: within a few dozen polls it yields again.
        frames(&mut p, t, 1_000, 48);
        assert_eq!(p.step(SPIN_NS), Step::Yield);
    }
}
