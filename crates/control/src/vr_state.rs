//! A VR's state taken from a running node and put back: what `snapshot` and `restore`, a
//! migration's two ends and the journal's checkpoints do with the file format of
//! [`crate::snapshot`]. The format knows nothing of a node; this module is where the two meet.

use std::path::Path;

use dataplane::{RouteOp, RouteSource, VrCounters};

use crate::error::ControlError;
use crate::node::Node;
use crate::snapshot::{
    learned, restored_neighbors, write_atomic, SnapNeighbor, SnapshotV1, Source, FORMAT_VERSION,
};

/// Takes VR `vr` of the running host: its routes from control's table, its learned neighbors
/// and counters from the worker that runs it (between two of its polls).
pub fn take(node: &Node, vr: &str) -> Result<SnapshotV1, ControlError> {
    let table = node.table(vr).ok_or_else(|| ControlError::NoSuchVr(vr.into()))?;
    let (neighbors, counters) = live_state(node, vr)?;
    let src =
        Source { topo: node.topology(), table, text: node.source_text(), neighbors, counters };
    let i = node.topology().vr_index(vr).ok_or_else(|| ControlError::NoSuchVr(vr.into()))?;
    Ok(SnapshotV1::take(i, &src))
}

/// VR `vr`'s learned neighbors (reachable or stale) and counters, from its worker.
fn live_state(node: &Node, vr: &str) -> Result<(Vec<SnapNeighbor>, VrCounters), ControlError> {
    let (rows, counters) = node.runtime().on_vr(vr, |c, v| {
        let rows = match c.change_vr(v, dataplane::VrChange::Neighbors) {
            Ok(dataplane::VrAnswer::Neighbors(r)) => r,
            _ => Vec::new(),
        };
        (rows, *c.vrs()[v].counters())
    })?;
    Ok((learned(rows), counters))
}

/// VR `vr`'s learned neighbors and counters by name: what a migration copies at the stop.
#[allow(clippy::type_complexity)]
pub fn take_state(
    node: &Node,
    vr: &str,
) -> Result<(Vec<SnapNeighbor>, Vec<(String, u64)>), ControlError> {
    let (n, c) = live_state(node, vr)?;
    Ok((n, c.named().into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

/// Puts a snapshot's VR into the running host under `name` (default: its own): added as
/// `vr_add` would (with the ports the host lacks, from the snapshot), its routes added with
/// their sources in one batch, then its learned neighbors and counters. Refused before any
/// change when the name is taken or the snapshot names what this build does not know; if the
/// routes are refused, the VR is removed again, so nothing is left half restored.
pub fn restore(
    node: &mut Node,
    snap: SnapshotV1,
    name: Option<String>,
    down: bool,
) -> Result<crate::api::Restored, ControlError> {
    let t0 = std::time::Instant::now();
    let name = name.unwrap_or_else(|| snap.meta.vr.name.clone());
    if node.topology().vr_index(&name).is_some() {
        return Err(ControlError::Invalid(format!(
            "vr {name} exists already: remove it first, or restore it under another name"
        )));
    }
    let bad = |what: String| {
        ControlError::Invalid(format!("snapshot of vr {}: {what}", snap.meta.vr.name))
    };
    let ops = snap.route_ops().map_err(|e| bad(e.to_string()))?;
    let (counters, _unknown) = snap.counters();
    let neighbors = restored_neighbors(&snap.meta.neighbors).map_err(|e| bad(e.to_string()))?;
    let mut doc = snap.meta.vr.clone();
    doc.name = name.clone();
    let have: Vec<&str> = node.topology().ports.iter().map(|p| p.name.as_str()).collect();
    let mut ports = Vec::new();
    for f in &doc.interfaces {
        let Some(p) = f.port.as_deref() else { continue };
        if have.contains(&p) || ports.iter().any(|d: &serde_json::Value| d["name"] == p) {
            continue;
        }
        match snap.meta.ports.iter().find(|d| d["name"] == p) {
            Some(d) => ports.push(d.clone()),
            None => {
                return Err(bad(format!(
                    "interface {} is on port {p}, which this host does not have and the snapshot does not describe",
                    f.name
                )))
            }
        }
    }
    let vr = serde_json::to_value(&doc).expect("documents serialise");
    if down {
        node.start_down(&name);
    }
    if doc.control_plane.is_some() {
        // The daemons of its new mirror have learned nothing yet: the routes they put in
        // their kernel before are held until they have again (see `cpsync`).
        let kernel = ops.iter().filter_map(|op| match op {
            RouteOp::Add(r) | RouteOp::Replace(r) if r.source == RouteSource::Kernel => {
                Some(r.prefix)
            }
            RouteOp::Set { prefix, source: RouteSource::Kernel, .. } => Some(*prefix),
            _ => None,
        });
        node.stale_on_add(&name, kernel.collect());
    }
    let plan = node.add_vr_values(vr, ports)?;
    let applied = match node.route_ops(&name, &ops) {
        Ok(a) => a,
        Err(e) => {
            let undo = node.execute(crate::api::Command::VrRemove { vr: name.clone() });
            return Err(ControlError::State(format!(
                "restoring vr {name}: its routes were refused ({e}); {}",
                match undo {
                    Ok(_) => "the VR was removed again, nothing is left of it".to_string(),
                    Err(u) => format!("removing the VR again failed too ({u}): remove it by hand"),
                }
            )));
        }
    };
    let st = dataplane::RestoredState {
        counters: Some(counters),
        neighbors,
        now: node.runtime().epoch().elapsed().as_nanos() as u64,
    };
    let took = match node
        .runtime()
        .on_vr(&name, move |c, v| c.change_vr(v, dataplane::VrChange::Restore(Box::new(st))))?
    {
        Ok(dataplane::VrAnswer::Restored(n)) => n,
        Ok(_) => 0,
        Err(e) => return Err(ControlError::Invalid(e.0)),
    };
    tracing::info!(vr = %name, routes = applied.added, neighbors = took, "vr restored");
    Ok(crate::api::Restored {
        vr: name,
        routes: applied.added,
        neighbors: took,
        plan: plan.steps,
        ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}

/// `snapshot`: takes VR `vr` and writes it to `out` (atomically, 0600).
pub fn snapshot_to_file(
    node: &Node,
    vr: &str,
    out: &Path,
) -> Result<crate::api::SnapshotWritten, ControlError> {
    let s = take(node, vr)?;
    let bytes = s.encode();
    write_atomic(out, &bytes)?;
    tracing::info!(vr, file = %out.display(), bytes = bytes.len(), routes = s.routes.len(), "snapshot written");
    Ok(crate::api::SnapshotWritten {
        vr: vr.to_string(),
        file: out.display().to_string(),
        bytes: bytes.len(),
        format: FORMAT_VERSION,
        routes: s.routes.len(),
        neighbors: s.meta.neighbors.len(),
    })
}
