//! Replicated VRs (parallel virtual routers) as control sees them: the logical VR in status,
//! the sum of its replicas, and what `apply` refuses about them.
//!
//! The data plane runs a VR with `replicas: N` as N VRs named `VR#r` (see
//! `dataplane::replica`); control keeps one route table for the logical VR and fans route and
//! interface changes out to every replica ([`crate::runtime::Runtime::on_vr_each`]). Status
//! lists each replica under `vrs` as any VR, and the logical VR under `replicated`, with
//! counters that are the replicas' sums.

use std::collections::{BTreeMap, HashMap};

use crate::api::{ReplicaRow, ReplicatedFib, ReplicatedRow};
use dataplane::replica::replica_of;
use dataplane::RouteTable;

use crate::runtime::Snapshot;
use crate::Topology;

/// `status`'s `replicated`: per replicated VR, its replicas (name, worker, packets received
/// and forwarded), and its counters, the sum of theirs (counters that are zero left out).
pub fn status_rows(
    topo: &Topology,
    snap: &Snapshot,
    tables: &HashMap<String, RouteTable>,
) -> Vec<ReplicatedRow> {
    let mut out = Vec::new();
    for (i, cfg) in topo.vrs.iter().enumerate() {
        let copies = topo.schedule.get(i).map_or(1, |s| s.copies());
        if copies < 2 {
            continue;
        }
        let mut sum: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut replicas = Vec::new();
        let mut found: Vec<(usize, usize, &crate::runtime::VrStatus)> = snap
            .vrs()
            .filter_map(|(w, v)| match replica_of(&v.name) {
                Some((base, r)) if base == cfg.name => Some((r, w, v)),
                _ => None,
            })
            .collect();
        found.sort_by_key(|x| x.0);
        for (r, w, v) in found {
            for (k, n) in v.counters.named() {
                *sum.entry(k).or_default() += n;
            }
            replicas.push(ReplicaRow {
                name: v.name.clone(),
                replica: r,
                worker: w,
                rx_packets: v.counters.rx_packets,
                forwarded: v.counters.forwarded,
            });
        }
        let counters =
            sum.into_iter().filter(|(_, n)| *n != 0).map(|(k, n)| (k.to_string(), n)).collect();
        let fib = tables.get(&cfg.name).map(|t| {
            let (ipv4, ipv6) = t.fib_prefixes();
            let (generation4, generation6) = t.generations();
            ReplicatedFib { ipv4, ipv6, generation4, generation6 }
        });
        out.push(ReplicatedRow {
            name: cfg.name.clone(),
            replicas: copies,
            running: replicas.len(),
            instances: replicas,
            counters,
            fib,
        });
    }
    out
}

/// What `apply` must refuse about replicated VRs (added, removed or changed in any way), each
/// with `fix`: they are rebuilt only by restarting the host. Routes change live through the
/// API.
pub fn refuse_changes(cur: &Topology, next: &Topology, fix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let sched = |t: &Topology, name: &str| {
        t.vr_index(name).map(|i| (t.vrs[i].clone(), t.schedule.get(i).cloned().unwrap_or_default()))
    };
    let names: std::collections::BTreeSet<&str> =
        cur.vrs.iter().chain(&next.vrs).map(|v| v.name.as_str()).collect();
    for name in names {
        let (a, b) = (sched(cur, name), sched(next, name));
        let replicated = |x: &Option<(dataplane::config::VrConfig, crate::VrSchedule)>| {
            x.as_ref().is_some_and(|(_, s)| s.copies() > 1)
        };
        if (replicated(&a) || replicated(&b)) && a != b {
            out.push(format!("vr {name}: a replicated VR (replicas:) cannot be added, removed or changed live: {fix}"));
        }
    }
    out
}
