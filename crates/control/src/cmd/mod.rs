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

use serde_json::{json, Value};

use crate::api::Command;
use crate::{ControlError, Node};

impl Node {
    /// Serves one API command.
    pub fn execute(&mut self, cmd: Command) -> Result<Value, ControlError> {
        use dataplane::RouteOp;
        match cmd {
            Command::Hello => Ok(lifecycle::hello()),
            Command::Status => self.status(),
            Command::Apply { topology, file, dry_run } => self.apply_text(topology, file, dry_run),
            Command::Stop => Ok(self.request_stop()),
            Command::RouteAdd { vr, routes } => self.route_change(vr, &routes, RouteOp::Add),
            Command::RouteReplace { vr, routes } => {
                self.route_change(vr, &routes, RouteOp::Replace)
            }
            Command::RouteDelete { vr, prefixes } => self.route_delete(&vr, prefixes),
            Command::RouteList { vr, source, limit } => self.route_list(vr, source, limit),
            Command::RouteLookup { vr, addresses } => self.route_lookup(vr, &addresses),
            Command::NeighborList { vr } => self.neighbor_list(vr),
            Command::NeighborFlush { vr, interface } => self.neighbor_flush(vr, interface),
            Command::InterfaceSet { vr, interface, mtu, up, addresses } => {
                self.interface_set(vr, interface, mtu, up, addresses)
            }
            Command::VrAdd { vr, ports } => self.vr_add(*vr, ports),
            Command::VrRemove { vr } => self.vr_remove(vr),
            Command::Reserve { vr, spec } => self.reserve(vr, spec),
            Command::Move { vr, worker } => self.move_vr(&vr, worker),
            Command::CaptureStart { point, count, drops, ring } => {
                self.capture_start(point, count, drops, ring)
            }
            Command::CaptureRead { id, max } => self.capture_read(id, max),
            Command::CaptureStop { id } => self.capture_stop(id),
            Command::TraceStart { vr, count } => self.trace_start(vr, count),
            Command::TraceRead { vr } => self.trace_read(vr),
            Command::Snapshot { vr, out } => self.snapshot(&vr, &out),
            Command::Restore { snapshot, name, down } => self.restore(&snapshot, name, down),
            Command::Migrate { vr, to } => self.migrate(&vr, &to),
            Command::MigrateCommit { vr, neighbors, counters, not_after_ns } => {
                self.migrate_commit(vr, neighbors, counters, not_after_ns)
            }
            Command::Announce { vr } => self.announce(vr),
            Command::Impair { port, impair } => {
                let plan = crate::impair::command(self, &port, impair)?;
                Ok(json!({ "port": port, "plan": plan.steps }))
            }
        }
    }
}
