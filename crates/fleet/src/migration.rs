//! Live moves of VRs between live hosts (drain, rebalance): which VRs are in flight, and the
//! marks that tell a source host's agent to migrate them.
//!
//! A VR is **in flight** when the placement puts it on host `to` while another live host,
//! `from`, still runs it (its record lists it), `from` can send migrations (its topology has
//! a `migration:` section) and `to` takes them (a `migration: listen`). Everything here is
//! derived from what etcd holds each round (the placement and the hosts' records), not kept
//! anywhere: a flight ends when `from`'s record no longer lists the VR, whether the
//! migration moved it or the fallback removed it. A host whose key is gone (failover) is not
//! a source: a dead host cannot send, so its VRs are started afresh.
//!
//! While a VR is in flight the controller writes (see `controller::plan`):
//! - `to` a desired topology **without** it but with its segments (switch and VXLAN port),
//!   so the migration's restore finds them and nothing starts the VR twice;
//! - `from` a desired topology without it, still holding its segments, and a [`Move::mark`]
//!   line after the header; its agent migrates the VR to `addr` before it applies that
//!   topology (on failure it applies it anyway: the VR is removed there and, the flight
//!   over, `to` is given it and starts it: the old restart path, logged and counted);
//! - every other host holding one of its segments VXLAN remotes to both `from` and `to`.
//!
//! `from`'s own VXLAN remotes must reach `to` before the VR runs there: a VR that stays on
//! `from` (a neighbour on its segment) answers the moved one only through them. So before its
//! first move the source applies [`remotes_before_moves`]: the topology it runs with the
//! remotes of the new one (live: only the remotes change), then migrates, then applies the new
//! topology.

use std::collections::HashMap;

use yamlpath::{Located, Value};

pub use crate::placement::Move;
use crate::placement::Placement;
use crate::record::HostRecord;
use crate::tree::{Kind, Y};
use crate::FleetError;

/// Starts a mark line in a source's desired topology (after the controller's header).
pub const MARK: &str = "# migrate: ";
/// At most this many marks are read from one desired topology.
pub const MAX_MARKS: usize = 4096;

impl Move {
    /// Its mark line, as the controller writes it into `from`'s desired topology.
    pub fn mark(&self) -> String {
        format!("{MARK}{} from {} to {} at {}\n", self.vr, self.from, self.to, self.addr)
    }
}

/// The marks in a desired topology's text, in order. A line that starts as a mark but does
/// not read as one is an error naming the line (the controller writes every mark).
pub fn marks(text: &str) -> Result<Vec<Move>, FleetError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix(MARK) else { continue };
        let bad = |msg: &str| FleetError::Record {
            what: format!("desired topology line {}", n + 1),
            msg: format!("{msg}: {line:?} (a mark reads `{MARK}VR from HOST to HOST at IP:PORT`)"),
        };
        if out.len() == MAX_MARKS {
            return Err(bad(&format!("more than {MAX_MARKS} marks")));
        }
        let w: Vec<&str> = rest.split(' ').collect();
        let [vr, "from", from, "to", to, "at", addr] = w[..] else {
            return Err(bad("not a mark"));
        };
        let addr = addr.parse().map_err(|_| bad("not an IP:PORT"))?;
        out.push(Move { vr: vr.into(), from: from.into(), to: to.into(), addr });
    }
    Ok(out)
}

/// `applied` (the topology a host runs) with each `vxlan` port's remotes as `desired` (the
/// topology it is to run next) has them for a port of that name: what a source applies
/// before it moves VRs away. None when no remotes differ or a text does not parse (both are
/// the agent's own or the controller's, checked when written).
pub fn remotes_before_moves(applied: &str, desired: &str) -> Option<String> {
    let tree = |t: &str| {
        let doc = yamlpath::parse_document(t, "vrs:").ok()?;
        Y::from_value(&Value::<Located>::root(&doc)).ok()
    };
    let (mut now, next) = (tree(applied)?, tree(desired)?);
    // A remotes list's addresses (the nodes also carry their position in the file).
    fn addresses(y: &Y) -> Vec<&Kind> {
        match &y.kind {
            Kind::L(l) => l.iter().map(|a| &a.kind).collect(),
            k => vec![k],
        }
    }
    fn remotes(p: &Y) -> Option<(Option<&str>, Option<Y>)> {
        (p.text("kind") == Some("vxlan")).then(|| (p.text("name"), p.get("remotes").cloned()))
    }
    let wanted: HashMap<&str, Y> = (next.items("ports").iter())
        .filter_map(remotes)
        .filter_map(|(n, r)| Some((n?, r.unwrap_or_else(|| Y::l(Vec::new())))))
        .collect();
    let mut changed = false;
    if let Some(Y { kind: Kind::L(ports), .. }) = now.get_mut("ports") {
        for p in ports.iter_mut() {
            let Some((Some(name), had)) = remotes(p) else { continue };
            let Some(want) = wanted.get(name) else { continue };
            if had.as_ref().map(addresses) != Some(addresses(want)) {
                p.set("remotes", want.clone());
                changed = true;
            }
        }
    }
    changed.then(|| format!("{}{}", crate::keys::HEADER, now.emit()))
}

/// The VRs in flight, in the order of `placed` (VR, host). `hosts` are the live records;
/// `prev` the last placement: a flight starts only where it put the VR on the source (or
/// moved it from there, or had it in flight from there), so a record that still lists a VR
/// the host has just dropped, or lists one it has just been given, starts none.
pub fn in_flight(
    placed: &[(String, String)],
    hosts: &[HostRecord],
    prev: Option<&Placement>,
) -> Vec<Move> {
    let was_on = |vr: &str, src: &str| {
        prev.is_some_and(|p| {
            let placed = (p.vrs.iter()).any(|v| {
                v.vr == vr
                    && (v.host.as_deref() == Some(src) || v.moved_from.as_deref() == Some(src))
            });
            placed || p.migrating.iter().any(|m| m.vr == vr && m.from == src)
        })
    };
    // Both ends list the VR while the destination holds it built and down (pre-copy) and the
    // source drains: the source is the one that is not its destination.
    let mut runs: HashMap<&str, Vec<&HostRecord>> = HashMap::new();
    for h in hosts {
        for v in &h.vrs {
            runs.entry(v.name.as_str()).or_default().push(h);
        }
    }
    let mut out = Vec::new();
    for (vr, to) in placed {
        let holders = runs.get(vr.as_str()).map_or(&[][..], |v| &v[..]);
        let Some(src) = holders.iter().find(|s| &s.name != to) else { continue };
        if !was_on(vr, &src.name) {
            continue;
        }
        let Some(dst) = hosts.iter().find(|h| &h.name == to) else { continue };
        let (Some(_), Some(addr)) = (&src.migration, dst.migration_listener()) else { continue };
        out.push(Move { vr: vr.clone(), from: src.name.clone(), to: to.clone(), addr });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_moves_the_running_topology_takes_the_next_ones_remotes() {
        let h = crate::keys::HEADER;
        let port = |vni: u32, remotes: &str| {
            format!("  - {{ name: vxlan-{vni}, kind: vxlan, vni: {vni}, local: 10.0.0.3, remotes: {remotes} }}\n")
        };
        let vr = "vrs:\n  - { name: s, interfaces: [{ name: e0, switch: lan, mac: \"02:00:00:00:00:01\" }] }\n";
        let applied = format!(
            "{h}ports:\n{}{}  - {{ name: m, kind: mem }}\nswitches: [{{ name: lan }}]\n{vr}",
            port(1, "[]"),
            port(2, "[10.0.0.2]")
        );
        // The next topology: vxlan-1 gains h1; vxlan-2 as it was; r left out (it moves).
        let next = format!(
            "{h}# migrate: r from h3 to h1 at 10.0.0.1:9470\nports:\n{}{}switches: [{{ name: lan }}]\n{vr}",
            port(1, "[10.0.0.1]"),
            port(2, "[10.0.0.2]")
        );
        let pre = remotes_before_moves(&applied, &next).expect("vxlan-1's remotes differ");
        assert!(pre.starts_with(h), "{pre}");
        let t = control::topology::Topology::parse(&pre, "pre", std::path::Path::new("."))
            .unwrap_or_else(|e| panic!("{e}\n{pre}"));
        let remotes: Vec<(String, Vec<String>)> = (t.ports.iter())
            .filter_map(|p| match &p.kind {
                control::topology::PortKind::Vxlan(x) => {
                    Some((p.name.clone(), x.remotes.iter().map(|r| r.to_string()).collect()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            remotes,
            [
                ("vxlan-1".into(), vec!["10.0.0.1".into()]),
                ("vxlan-2".into(), vec!["10.0.0.2".into()])
            ]
        );
        // Everything else is the running topology's: its mem port and VR stay.
        assert!(t.port_index("m").is_some());
        assert_eq!(t.vrs.len(), 1);
        assert_eq!(remotes_before_moves(&applied, &applied), None, "nothing to change");
        assert_eq!(remotes_before_moves(&applied, "vrs: [\n"), None, "the next does not parse");
    }

    #[test]
    fn marks_round_trip_and_bad_ones_are_named() {
        let m = Move {
            vr: "r1".into(),
            from: "h1".into(),
            to: "h2".into(),
            addr: "10.0.0.2:9470".parse().unwrap(),
        };
        let text = format!("{}{}vrs: []\n", crate::keys::HEADER, m.mark());
        assert_eq!(marks(&text).unwrap(), [m]);
        assert!(marks("vrs: []\n# a comment\n").unwrap().is_empty());
        let e = marks("x: 1\n# migrate: r1 from h1 to h2\n").unwrap_err().to_string();
        assert!(e.starts_with("desired topology line 2: not a mark: "), "{e}");
        let e = marks("# migrate: r1 from h1 to h2 at nowhere\n").unwrap_err().to_string();
        assert!(e.contains("not an IP:PORT"), "{e}");
    }
}
