//! `routeplex show FILE`: the topology as aligned tables.

use std::fmt::Write;

use dataplane::config::{RouteTarget, VrConfig, VrLimits};

use super::{PortKind, Topology, VrSchedule, Workers};

pub(super) fn summary(t: &Topology) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {}, {}",
        t.source,
        count(t.ports.len(), "port"),
        count(t.vrs.len(), "VR")
    );
    match &t.workers {
        Workers::PerCpu => {}
        Workers::Count(n) => {
            let _ = writeln!(out, "workers: {n}");
        }
        Workers::Cpus(c) => {
            let cpus: Vec<String> = c.iter().map(ToString::to_string).collect();
            let _ = writeln!(out, "workers: {} on CPUs {}", c.len(), cpus.join(", "));
        }
    }
    if t.idle != super::Idle::default() {
        let _ = writeln!(out, "idle: {}", t.idle.name());
    }
    if let Some(q) = t.ingress_queues {
        let _ = writeln!(
            out,
            "ingress queues: {} frames per VR, turns of {}, {} a pass",
            q.limit, q.quantum, q.per_pass
        );
    }
    let mut rows = vec![row(["PORT", "KIND", "SETTINGS"])];
    for p in &t.ports {
        let attach = |a: &crate::topology::Attach| match a {
            crate::topology::Attach::Interface(i) => format!("interface {i}"),
            crate::topology::Attach::Netns { netns, ifname } => {
                format!("interface {ifname} in namespace {netns}")
            }
            crate::topology::Attach::Host { host, ifname } => {
                format!("{ifname} to host {}", t.hosts.get(*host).map_or("?", |h| h.name.as_str()))
            }
        };
        let (kind, settings) = match &p.kind {
            PortKind::Mem { ring } => ("mem", format!("ring {ring}")),
            PortKind::AfXdp(a, x) => {
                ("afxdp", format!("{}, ring {}, frame {}", attach(a), x.ring, x.frame_size))
            }
            PortKind::AfPacket(a) => ("afpacket", attach(a)),
            PortKind::Tap { ifname } => ("tap", format!("interface {ifname}")),
            PortKind::Vxlan(x) => (
                "vxlan",
                format!(
                    "VNI {} from {} port {} to [{}], MTU {} inside",
                    x.vni,
                    x.local,
                    x.dstport,
                    x.remotes.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
                    x.max_mtu()
                ),
            ),
            PortKind::Memif(m) => (
                "memif",
                format!(
                    "{} {} id {}, {} queue(s), ring {}{}",
                    if m.server { "server on" } else { "client of" },
                    m.socket,
                    m.id,
                    m.queues,
                    1u32 << m.log2_ring,
                    if m.interrupt { ", interrupt" } else { "" }
                ),
            ),
            PortKind::VhostUser(v) => (
                "vhost-user",
                format!(
                    "{} {}, {} queue pair(s)",
                    if v.server { "server on" } else { "client of" },
                    v.socket,
                    v.queues
                ),
            ),
            PortKind::Mirror { netns, vr, iface } => (
                "mirror",
                format!(
                    "tap {} in namespace {netns}",
                    t.vrs
                        .get(*vr)
                        .and_then(|v| v.interfaces.get(usize::from(*iface)))
                        .map_or("?", |f| f.name.as_str())
                ),
            ),
            &PortKind::Link { peer } => (
                "link",
                format!("to {}", t.ports.get(usize::from(peer)).map_or("?", |p| p.name.as_str())),
            ),
        };
        let settings = match p.burst {
            Some(b) => format!("{settings}, burst {b}"),
            None => settings,
        };
        rows.push(vec![p.name.clone(), kind.into(), settings]);
    }
    out.push('\n');
    table(&mut out, "", &rows);
    for sw in &t.switches {
        out.push('\n');
        switch(&mut out, t, sw);
    }
    for (i, vr) in t.vrs.iter().enumerate() {
        out.push('\n');
        self::vr(&mut out, t, vr);
        if let Some(s) = t.schedule.get(i).filter(|s| **s != VrSchedule::default()) {
            let _ = writeln!(out, "  runs: {}", schedule(s));
        }
    }
    for m in &t.msrs {
        out.push('\n');
        out.push_str(&super::msr::summary(t, m));
    }
    out
}

fn switch(out: &mut String, t: &Topology, sw: &dataplane::SwitchConfig) {
    let _ = writeln!(
        out,
        "SWITCH {}: {}, {}, learns up to {} stations, ages them after {} s",
        sw.name,
        count(sw.members.len(), "member"),
        count(sw.statics.len(), "static MAC"),
        sw.mac_limit,
        sw.aging_ms / 1000
    );
    if sw.snooping {
        let _ = writeln!(
            out,
            "  snoops IGMP/MLD: up to {} groups, memberships end after {} s without a report",
            sw.groups,
            sw.group_timeout_ms / 1000
        );
    }
    let mut rows = vec![row(["MEMBER", "MODE", "VLANS"])];
    for m in &sw.members {
        let port = t.ports.get(usize::from(m.port)).map_or("?", |p| p.name.as_str());
        let (mode, vlans) = match &m.mode {
            dataplane::MemberMode::Access { vlan } => ("access", vlan.to_string()),
            dataplane::MemberMode::Trunk { vlans, native } => {
                let mut v: Vec<String> = vlans.iter().map(ToString::to_string).collect();
                if let Some(n) = native {
                    v.push(format!("{n} (native)"));
                }
                ("trunk", v.join(" "))
            }
        };
        rows.push(vec![port.to_string(), mode.into(), vlans]);
    }
    table(out, "  ", &rows);
}

fn vr(out: &mut String, t: &Topology, vr: &VrConfig) {
    let _ = writeln!(
        out,
        "VR {}: {}, {}, {}",
        vr.name,
        count(vr.interfaces.len(), "interface"),
        count(vr.routes.len(), "route"),
        count(vr.neighbors.len(), "neighbor")
    );
    let mut rows = vec![row(["INTERFACE", "PORT", "VLAN", "MAC", "MTU", "ADDRESSES"])];
    for i in &vr.interfaces {
        let port = t.ports.get(usize::from(i.port)).map_or("?", |p| p.name.as_str());
        let addrs: Vec<String> = i
            .ipv4
            .iter()
            .map(ToString::to_string)
            .chain(i.ipv6.iter().map(ToString::to_string))
            .collect();
        rows.push(vec![
            i.name.clone(),
            port.to_string(),
            i.vlan.map_or("-".into(), |v| v.to_string()),
            i.mac.to_string(),
            i.mtu.to_string(),
            if addrs.is_empty() { "-".into() } else { addrs.join(" ") },
        ]);
    }
    table(out, "  ", &rows);

    let connected: usize = vr.interfaces.iter().map(|i| i.ipv4.len() + i.ipv6.len()).sum();
    let (mut via, mut iface, mut blackhole) = (0, 0, 0);
    for r in &vr.routes {
        match r.target {
            RouteTarget::Via { .. } => via += 1,
            RouteTarget::Iface(_) => iface += 1,
            RouteTarget::Blackhole => blackhole += 1,
        }
    }
    let _ = writeln!(
        out,
        "  routes: {connected} connected, {via} via a gateway, {iface} out an interface, {blackhole} blackhole"
    );

    if !vr.neighbors.is_empty() {
        let mut rows = vec![row(["NEIGHBOR", "MAC", "INTERFACE"])];
        for n in &vr.neighbors {
            let iface = vr.interfaces.get(usize::from(n.iface)).map_or("?", |i| i.name.as_str());
            rows.push(vec![n.ip.to_string(), n.mac.to_string(), iface.to_string()]);
        }
        table(out, "  ", &rows);
    }
    let _ = writeln!(out, "  limits: {}", limits(&vr.limits));
}

/// Where a VR runs, its reservation and batch limit.
fn schedule(s: &VrSchedule) -> String {
    let mut parts = vec![match s.worker {
        Some(w) => format!("on worker {w}"),
        None => "placed automatically".to_string(),
    }];
    if let Some(r) = &s.reservation {
        let budget = match r.budget {
            dataplane::Budget::Time(ns) => format!("{} us", ns / 1_000),
            dataplane::Budget::Packets(n) => format!("{n} packets"),
        };
        let weight = if r.weight > 0 { format!(", weight {}", r.weight) } else { String::new() };
        parts.push(format!("reserved {budget} per {} us{weight}", r.period_ns / 1_000));
    }
    if let Some(b) = s.batch {
        parts.push(format!("batch {b}"));
    }
    parts.join(", ")
}

/// The limits that differ from the defaults.
fn limits(l: &VrLimits) -> String {
    let d = VrLimits::default();
    let fields: [(&str, u64, u64); 12] = [
        ("neighbors", l.neighbors.into(), d.neighbors.into()),
        ("queue_per_neighbor", l.queue_per_neighbor.into(), d.queue_per_neighbor.into()),
        ("queue_total", l.queue_total.into(), d.queue_total.into()),
        ("neighbor_reachable_ms", l.neighbor_reachable_ms.into(), d.neighbor_reachable_ms.into()),
        ("neighbor_retrans_ms", l.neighbor_retrans_ms.into(), d.neighbor_retrans_ms.into()),
        ("neighbor_probes", l.neighbor_probes.into(), d.neighbor_probes.into()),
        (
            "neighbor_failed_hold_ms",
            l.neighbor_failed_hold_ms.into(),
            d.neighbor_failed_hold_ms.into(),
        ),
        (
            "incomplete_per_interface",
            l.incomplete_per_interface.into(),
            d.incomplete_per_interface.into(),
        ),
        ("solicitations_per_sec", l.solicitations_per_sec.into(), d.solicitations_per_sec.into()),
        ("solicitations_burst", l.solicitations_burst.into(), d.solicitations_burst.into()),
        ("icmp_errors_per_sec", l.icmp_errors_per_sec.into(), d.icmp_errors_per_sec.into()),
        ("icmp_errors_burst", l.icmp_errors_burst.into(), d.icmp_errors_burst.into()),
    ];
    let changed: Vec<String> =
        fields.iter().filter(|f| f.1 != f.2).map(|(k, v, _)| format!("{k} {v}")).collect();
    if changed.is_empty() {
        "defaults".into()
    } else {
        format!("{} (others default)", changed.join(", "))
    }
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Writes rows as left-aligned columns two spaces apart; the last column is not padded.
pub fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = indent.to_string();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 < r.len() {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}
