//! Interfaces held down after a restart: a host of a fleet with `policy: fence` that crashed
//! (or stopped) while the fleet controller placed its VRs elsewhere must not answer for them
//! when it starts again from its state directory. Such a start ([`crate::daemon::OnRestart`])
//! takes every VR interface that would be up down before its worker first polls it: the
//! host file's VRs, those started from a checkpoint, and those the journal's replay adds or
//! rebuilds. Each stays down, and `held` in `status`, until `interface_set up: true` takes it
//! up (the fleet agent does, for the VRs its desired topology still places here).
//!
//! Held is by (VR, interface) name, so it survives a VR rebuilt or moved between cells by an
//! `apply`: the rebuilt VR is taken down again before it runs. An interface set down (by the
//! file's `up: false`, `interface_set` or a replayed one) is no longer held: it would not be up.

use std::collections::BTreeSet;

use crate::Topology;

/// The interfaces held down, and whether the restart's holding phase (start and journal
/// replay) is on.
#[derive(Debug, Default)]
pub struct Held {
    /// (VR, interface) names; a replicated VR is held by its logical name.
    set: BTreeSet<(String, String)>,
    /// During the start and the replay: every VR interface that comes up is held.
    holding: bool,
}

/// The logical VR a data-plane VR is (a replica `NAME#R` is VR `NAME`).
pub fn logical(vr: &str) -> &str {
    dataplane::replica::replica_of(vr).map_or(vr, |(base, _)| base)
}

impl Held {
    /// Holding from the start: the restart's phase.
    pub fn holding() -> Held {
        Held { set: BTreeSet::new(), holding: true }
    }

    /// The replay is over: VRs added from here on forward as they are given.
    pub fn end(&mut self) {
        self.holding = false;
    }

    /// Whether the holding phase is on.
    pub fn is_holding(&self) -> bool {
        self.holding
    }

    /// Of data-plane VR `vr`'s interfaces (name, MTU, up), about to run, those to take down
    /// before it does: every one that is up while holding, else those held by name (the VR
    /// is rebuilt or moved). Records them held.
    pub fn on_new(&mut self, vr: &str, ifaces: &[(String, u16, bool)]) -> Vec<u16> {
        let vr = logical(vr);
        let mut down = Vec::new();
        for (k, (name, _, up)) in ifaces.iter().enumerate() {
            let key = (vr.to_string(), name.clone());
            if (self.holding && *up) || self.set.contains(&key) {
                self.set.insert(key);
                down.push(k as u16);
            }
        }
        down
    }

    /// Interface `iface` of VR `vr` is set up or down by `interface_set` (or down by a plan):
    /// not held any more. False when it stays held: an `up` replayed while holding.
    pub fn release(&mut self, vr: &str, iface: &str, up: bool) -> bool {
        if up && self.holding && self.is_held(vr, iface) {
            return false;
        }
        self.set.remove(&(logical(vr).to_string(), iface.to_string()));
        true
    }

    /// Whether interface `iface` of VR `vr` is held.
    pub fn is_held(&self, vr: &str, iface: &str) -> bool {
        self.set.contains(&(logical(vr).to_string(), iface.to_string()))
    }

    /// Forgets the VRs and interfaces `topo` no longer has.
    pub fn retain(&mut self, topo: &Topology) {
        self.set.retain(|(v, i)| {
            topo.vrs.iter().any(|c| &c.name == v && c.interfaces.iter().any(|f| &f.name == i))
        });
    }

    /// How many interfaces are held.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifs(list: &[(&str, bool)]) -> Vec<(String, u16, bool)> {
        list.iter().map(|(n, up)| (n.to_string(), 1500, *up)).collect()
    }

    #[test]
    fn holding_takes_up_interfaces_down_and_a_set_releases_them() {
        let mut h = Held::holding();
        assert_eq!(h.on_new("r", &ifs(&[("a", true), ("b", false), ("c", true)])), [0, 2]);
        assert!(h.is_held("r", "a") && !h.is_held("r", "b") && h.is_held("r", "c"));
        // A replica is held by its VR's name.
        assert_eq!(h.on_new("q#1", &ifs(&[("a", true)])), [0]);
        assert!(h.is_held("q", "a") && h.is_held("q#0", "a"));
        // A replayed `up` keeps it held; a replayed `down` releases it.
        assert!(!h.release("r", "a", true) && h.is_held("r", "a"));
        assert!(h.release("r", "c", false) && !h.is_held("r", "c"));
        h.end();
        // After the replay: new VRs are not held, a rebuilt held one is taken down again.
        assert!(h.on_new("s", &ifs(&[("a", true)])).is_empty());
        assert_eq!(h.on_new("r", &ifs(&[("x", true), ("a", true)])), [1]);
        assert!(h.release("r", "a", true) && !h.is_held("r", "a"));
        assert_eq!(h.len(), 1, "{h:?}");
    }

    #[test]
    fn a_first_start_holds_nothing() {
        let mut h = Held::default();
        assert!(h.on_new("r", &ifs(&[("a", true)])).is_empty());
        assert!(h.is_empty() && !h.is_holding());
    }

    #[test]
    fn forgets_what_the_topology_no_longer_has() {
        let text = "workers: 1\nports:\n  - { name: p0, kind: mem }\nvrs:\n  - name: r\n    interfaces:\n      - { name: a, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }\n";
        let t = Topology::parse(text, "t.yaml", std::path::Path::new(".")).unwrap();
        let mut h = Held::holding();
        h.on_new("r", &ifs(&[("a", true), ("gone", true)]));
        h.on_new("s", &ifs(&[("a", true)]));
        h.retain(&t);
        assert!(h.is_held("r", "a") && !h.is_held("r", "gone") && !h.is_held("s", "a"));
        assert_eq!(h.len(), 1);
    }
}
