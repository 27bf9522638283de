//! The engine: one [`Cell`] run by its own [`Worker`], for callers with one thread and one
//! set of ports (tests, benchmarks, the demo, the tester's in-process DUT). Multi-worker
//! runtimes hold workers and cells themselves.

use ports::{Port, PortStats, MAX_BURST};

use crate::cell::Cell;
use crate::config::{Reservation, VrConfig};
use crate::counters::PortCounters;
use crate::switch::Switch;
use crate::types::BuildError;
use crate::vr::Vr;
use crate::worker::{Clock, Worker};

/// One worker and the one cell it runs: its ports, the VRs and switches on them.
pub struct Engine {
    worker: Worker,
    cell: Cell,
}

impl Engine {
    /// A worker over `ports` running `vrs`; every VR interface must name a port in `ports`, and
    /// no two interfaces may share (port, VLAN, MAC).
    pub fn new(ports: Vec<Box<dyn Port>>, vrs: Vec<Vr>) -> Result<Engine, BuildError> {
        Self::with_burst(ports, vrs, MAX_BURST)
    }

    /// As [`Engine::new`], receiving at most `burst` (1..=256) frames per port and poll.
    pub fn with_burst(
        ports: Vec<Box<dyn Port>>,
        vrs: Vec<Vr>,
        burst: usize,
    ) -> Result<Engine, BuildError> {
        Self::build(ports, vrs, Vec::new(), burst)
    }

    /// A worker over `ports` running `vrs` and `switches`, receiving at most `burst` (1..=256)
    /// frames per port and poll. A port is either a switch member (of one switch) or carries VR
    /// interfaces, never both.
    pub fn build(
        ports: Vec<Box<dyn Port>>,
        vrs: Vec<Vr>,
        switches: Vec<Switch>,
        burst: usize,
    ) -> Result<Engine, BuildError> {
        if !(1..=MAX_BURST).contains(&burst) {
            return Err(BuildError(format!("burst {burst} is outside 1..={MAX_BURST}")));
        }
        let mut cell = Cell::new(ports, vrs, switches)?;
        for p in 0..cell.port_count() {
            cell.set_port_burst(p, burst)?;
        }
        Ok(Engine { worker: Worker::new(), cell })
    }

    /// Builds every VR from its config, then the engine.
    pub fn from_configs(ports: Vec<Box<dyn Port>>, vrs: &[VrConfig]) -> Result<Engine, BuildError> {
        let vrs = vrs.iter().map(Vr::new).collect::<Result<Vec<_>, _>>()?;
        Engine::new(ports, vrs)
    }

    /// One pass over every port: receive a burst from each and forward it. `now` is a
    /// monotonic time in nanoseconds; it drives neighbor timers, ICMP rate limits and
    /// reservation periods. Returns the number of frames received (and served from ingress
    /// queues).
    pub fn poll(&mut self, now: u64) -> usize {
        self.worker.poll(std::slice::from_mut(&mut self.cell), now)
    }

    /// Measures time budgets with `clock` from now on.
    pub fn set_clock(&mut self, clock: Clock) {
        self.worker.set_clock(Some(clock));
    }

    /// Reads the poll's time again from `clock` when frames arrive for an impaired port (see
    /// [`Worker::set_poll_clock`]).
    pub fn set_poll_clock(&mut self, clock: Clock) {
        self.worker.set_poll_clock(Some(clock));
    }

    /// Turns per-VR ingress queues on shared ports on or off (see
    /// [`Cell::set_ingress_queues`]).
    pub fn set_ingress_queues(
        &mut self,
        q: Option<crate::IngressQueues>,
    ) -> Result<(), BuildError> {
        self.cell_mut().set_ingress_queues(q)
    }

    /// Sets VR `v`'s reservation (see [`Cell::set_reservation`]). Refuses a time budget or a
    /// weight without a clock ([`Engine::set_clock`]): it could not be measured.
    pub fn set_reservation(&mut self, v: usize, r: Option<Reservation>) -> Result<(), BuildError> {
        if r.is_some_and(|r| r.needs_clock()) && !self.worker.has_clock() {
            return Err(BuildError(format!(
                "vr {v}: a time budget or a weight needs a clock (Engine::set_clock)"
            )));
        }
        self.cell.set_reservation(v, r)
    }

    /// The cell: ports, VRs, switches, reservations and limits.
    pub fn cell(&self) -> &Cell {
        &self.cell
    }

    /// The cell, to set limits and reservations.
    pub fn cell_mut(&mut self) -> &mut Cell {
        &mut self.cell
    }

    /// The worker, to set its clock or spare window.
    pub fn worker_mut(&mut self) -> &mut Worker {
        &mut self.worker
    }

    /// The worker and the cell, apart.
    pub fn into_parts(self) -> (Worker, Cell) {
        (self.worker, self.cell)
    }

    /// An engine from a worker and a cell.
    pub fn from_parts(worker: Worker, cell: Cell) -> Engine {
        Engine { worker, cell }
    }

    /// The VRs, in configuration order.
    pub fn vrs(&self) -> &[Vr] {
        self.cell.vrs()
    }

    /// The switches, in configuration order.
    pub fn switches(&self) -> &[Switch] {
        self.cell.switches()
    }

    /// A VR by name.
    pub fn vr(&self, name: &str) -> Option<&Vr> {
        self.cell.vr(name)
    }

    /// Classification counters of port `p`.
    pub fn port_counters(&self, p: usize) -> &PortCounters {
        self.cell.port_counters(p)
    }

    /// Port `p`'s own counters.
    pub fn port_stats(&self, p: usize) -> PortStats {
        self.cell.port_stats(p)
    }

    /// Whether port `p` moves packets now.
    pub fn port_status(&self, p: usize) -> ports::PortStatus {
        self.cell.port_status(p)
    }

    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.cell.port_count()
    }

    /// Name of port `p`.
    pub fn port_name(&self, p: usize) -> &str {
        self.cell.port_name(p)
    }

    /// Every table and counter, for test failures and `show`.
    pub fn dump(&self) -> String {
        self.cell.dump()
    }
}
