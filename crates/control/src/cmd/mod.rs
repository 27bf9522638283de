//! The API's commands, one file per object they act on: routes, neighbors, VRs (and their
//! interfaces, reservations, workers), what is observed (captures, traces), a VR's state
//! (snapshot, restore, migration) and the host's life (hello, status, apply, stop).
//! [`Node::execute`] hands each command to its file.
//!
//! A child of `node` (declared there): the handlers are methods of [`Node`] and keep its
//! fields private to the node.

mod lifecycle;
mod neighbors;
pub(super) mod observe;
mod routes;
mod state;
mod vrs;

use crate::api::{self, Answer, Command};
use crate::{ControlError, Node};

impl Node {
    /// Serves one API command.
    pub fn execute(&mut self, cmd: Command) -> Result<Answer, ControlError> {
        use dataplane::RouteOp;
        Ok(match cmd {
            Command::Hello => lifecycle::hello().into(),
            Command::Status => self.status()?.into(),
            Command::Apply { topology, file, dry_run } => {
                self.apply_text(topology, file, dry_run)?.into()
            }
            Command::Stop => self.request_stop().into(),
            Command::RouteAdd { vr, routes } => {
                self.route_change(vr, &routes, RouteOp::Add)?.into()
            }
            Command::RouteReplace { vr, routes } => {
                self.route_change(vr, &routes, RouteOp::Replace)?.into()
            }
            Command::RouteDelete { vr, prefixes } => self.route_delete(&vr, prefixes)?.into(),
            Command::RouteList { vr, source, limit } => self.route_list(vr, source, limit)?.into(),
            Command::RouteLookup { vr, addresses } => self.route_lookup(vr, &addresses)?.into(),
            Command::NeighborList { vr } => self.neighbor_list(vr)?.into(),
            Command::NeighborFlush { vr, interface } => self.neighbor_flush(vr, interface)?.into(),
            Command::InterfaceSet { vr, interface, mtu, up, addresses } => {
                self.interface_set(vr, interface, mtu, up, addresses)?.into()
            }
            Command::VrAdd { vr, ports } => self.vr_add(*vr, ports)?.into(),
            Command::VrRemove { vr } => self.vr_remove(vr)?.into(),
            Command::Reserve { vr, spec } => self.reserve(vr, spec)?.into(),
            Command::Move { vr, worker } => self.move_vr(&vr, worker)?.into(),
            Command::CaptureStart { point, count, drops, ring } => {
                self.capture_start(point, count, drops, ring)?.into()
            }
            Command::CaptureRead { id, max } => self.capture_read(id, max)?.into(),
            Command::CaptureStop { id } => self.capture_stop(id)?.into(),
            Command::TraceStart { vr, count } => self.trace_start(vr, count)?.into(),
            Command::TraceRead { vr } => self.trace_read(vr)?.into(),
            Command::Snapshot { vr, out } => self.snapshot(&vr, &out)?.into(),
            Command::Restore { snapshot, name, down } => {
                self.restore(&snapshot, name, down)?.into()
            }
            Command::Migrate { vr, to } => self.migrate(&vr, &to)?.into(),
            Command::MigrateCommit { vr, neighbors, counters, not_after_ns } => {
                self.migrate_commit(vr, neighbors, counters, not_after_ns)?.into()
            }
            Command::Announce { vr } => self.announce(vr)?.into(),
            Command::Impair { port, impair } => {
                let plan = crate::impair::command(self, &port, impair)?;
                api::Impaired { port, plan: plan.steps }.into()
            }
        })
    }
}
