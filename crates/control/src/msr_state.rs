//! What the node keeps of each multistage software router (`msrs:`): the state its
//! balancers and control processor share, made at start so that `status` shows the back-ends
//! before anyone takes the front end ([`crate::msr::Msr::take`]), and how `status` shows it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::{BackendRow, MsrRow};
use dataplane::msr::{BackendState, MsrShared};
use dataplane::replica::replica_of;

use crate::runtime::Snapshot;
use crate::Topology;

/// What the node keeps of one MSR: the state its balancers and policy share (made at start,
/// so that `status` shows the back-ends' states before anyone takes the front end) and
/// whether the front end was taken.
pub struct MsrState {
    pub shared: Arc<MsrShared>,
    pub taken: bool,
}

impl MsrState {
    /// One per `msrs[]` entry of `topo`, by its VR's name, its first `active` back-ends on.
    pub fn for_topology(topo: &Topology) -> HashMap<String, MsrState> {
        topo.msrs
            .iter()
            .map(|m| {
                let shared = MsrShared::new(m.backends, m.active);
                (topo.vrs[m.vr].name.clone(), MsrState { shared, taken: false })
            })
            .collect()
    }
}

fn state_name(s: BackendState) -> &'static str {
    match s {
        BackendState::Active => "active",
        BackendState::Draining => "draining",
        BackendState::Off => "off",
        BackendState::Failed => "failed",
    }
}

/// `status`'s `msrs`: per MSR, its back-ends' states (and how many are in each), the flows
/// pinned to each, the frames each refused, its failure detection time, and what its replica
/// received and forwarded; the load offered to the front end and the failures seen.
pub fn status_rows(
    topo: &Topology,
    snap: &Snapshot,
    msrs: &HashMap<String, MsrState>,
) -> Vec<MsrRow> {
    let mut out = Vec::new();
    for m in &topo.msrs {
        let name = &topo.vrs[m.vr].name;
        let Some(st) = msrs.get(name) else { continue };
        let sh = &st.shared;
        let mut counts: crate::api::Counts =
            ["active", "draining", "off", "failed"].iter().map(|k| (k.to_string(), 0)).collect();
        let mut backends = Vec::new();
        for b in 0..sh.backends() {
            let state = state_name(sh.state(b));
            *counts.entry(state.to_string()).or_default() += 1;
            let replica = snap.vrs().find(|(_, v)| replica_of(&v.name) == Some((name, b)));
            backends.push(BackendRow {
                backend: b,
                replica: dataplane::replica::replica_name(name, b),
                worker: replica.map(|(w, _)| w),
                state: state.into(),
                pinned: sh.pinned(b),
                refused: sh.refused(b),
                detect_ns: sh.detect_ns(b),
                rx_packets: replica.map_or(0, |(_, v)| v.counters.rx_packets),
                forwarded: replica.map_or(0, |(_, v)| v.counters.forwarded),
            });
        }
        out.push(MsrRow {
            name: name.clone(),
            front_end: st.taken,
            states: counts,
            offered: sh.offered(),
            failures: sh.failures(),
            backends,
        });
    }
    out
}
