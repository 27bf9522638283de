//! `control_plane:` of a VR: a Linux network namespace that mirrors the VR (one tap per VR
//! interface, same name, MAC, addresses and MTU), where routing daemons run as on any Linux
//! router. The data plane punts to the taps what it does not answer itself and sends out what
//! the namespace sends; routes the namespace's kernel learns are synced into the VR.
//!
//! ```yaml
//! control_plane: linux                 # namespace named after the VR
//! control_plane:                       # or, with settings:
//!   kind: linux
//!   netns: vr1-cp                      # the namespace's name (default: the VR's)
//!   punt_per_sec: 20000                # punts per second (token bucket), 0..=10000000
//!   punt_burst: 2000                   # its depth, 0..=1000000
//!   stale_secs: 120                    # after a migration: how long the VR keeps the kernel
//!                                      # routes it brought, 1..=3600 (the daemons' BGP
//!                                      # graceful-restart time)
//!   migrate_netns: vr1-cp-b            # the namespace a migration's destination makes for
//!                                      # the mirror (default: netns); the two then swap
//! ```

use dataplane::config::VrConfig;

use super::hosts::is_ns_name;
use super::yaml::{Result, Value};

const CP_KEYS: &[&str] =
    &["kind", "netns", "punt_per_sec", "punt_burst", "stale_secs", "migrate_netns"];

/// How long a migrated VR keeps its `kernel` routes stale, by default: BGP graceful restart's
/// usual restart time (RFC 4724 suggests 120 s).
pub const DEFAULT_STALE_SECS: u32 = 120;

/// A VR's Linux control-plane mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneSpec {
    /// The namespace routeplex makes for it (`/run/netns/NAME`).
    pub netns: String,
    /// Punts per second the VR may make (token bucket rate).
    pub punt_per_sec: u32,
    /// Depth of that bucket.
    pub punt_burst: u32,
    /// After a migration, how long the VR keeps the `kernel` routes it brought while its
    /// restarted daemons re-learn them (see `cpsync`).
    pub stale_secs: u32,
    /// The namespace a migration's destination makes for the mirror, when not `netns` (two
    /// hosts on one machine cannot both have `netns`).
    pub migrate_netns: Option<String>,
}

/// Reads a VR's `control_plane:` (`v`), for VR `vr`, whose interface names must then be
/// usable as Linux interface names; `vr_value` is the VR's mapping, for their lines.
pub(super) fn control_plane(
    v: &Value,
    vr: &VrConfig,
    vr_value: &Value,
) -> Result<ControlPlaneSpec> {
    let mut spec = ControlPlaneSpec {
        netns: vr.name.clone(),
        punt_per_sec: dataplane::DEFAULT_PUNT_PER_SEC,
        punt_burst: dataplane::DEFAULT_PUNT_BURST,
        stale_secs: DEFAULT_STALE_SECS,
        migrate_netns: None,
    };
    let kind_v = if v.is_mapping() {
        let m = v.map(CP_KEYS)?;
        if let Some(n) = m.get("netns") {
            spec.netns = n.text()?.to_string();
            if !is_ns_name(&spec.netns) {
                return Err(n.bad(
                    &spec.netns,
                    format_args!(
                        "invalid netns {:?}: use up to 32 letters, digits, '-', '_' or '.'",
                        spec.netns
                    ),
                ));
            }
        }
        if let Some(r) = m.get("punt_per_sec") {
            spec.punt_per_sec = r.int("punts per second", 0, 10_000_000)?;
        }
        if let Some(b) = m.get("punt_burst") {
            spec.punt_burst = b.int("punt burst", 0, 1_000_000)?;
        }
        if let Some(t) = m.get("stale_secs") {
            spec.stale_secs = t.int("stale seconds", 1, 3600)?;
        }
        if let Some(n) = m.get("migrate_netns") {
            let name = n.text()?.to_string();
            if !is_ns_name(&name) || name == spec.netns {
                return Err(n.bad(
                    &name,
                    format_args!(
                        "invalid migrate_netns {name:?}: up to 32 letters, digits, '-', '_' or '.', not the netns itself"
                    ),
                ));
            }
            spec.migrate_netns = Some(name);
        }
        m.req("kind")?
    } else {
        v.clone()
    };
    let kind = kind_v.text()?;
    if kind != "linux" {
        return Err(
            kind_v.bad(kind, format_args!("control_plane kind must be linux, not {kind:?}"))
        );
    }
    if !v.is_mapping() && !is_ns_name(&spec.netns) {
        return Err(v.bad(
            &spec.netns,
            format_args!(
                "VR name {:?} cannot name a network namespace: give control_plane a netns",
                spec.netns
            ),
        ));
    }
    let m = vr_value.mapping()?;
    for iv in m.list("interfaces")? {
        let nv = iv.mapping()?.req("name")?;
        let n = nv.text()?;
        if !is_ifname(n) {
            return Err(nv.bad(
                n,
                format_args!("interface name {n:?} of a VR with a control plane must be a Linux interface name (1 to 15 characters, no '/', ':' or spaces)"),
            ));
        }
    }
    Ok(spec)
}

/// Whether `s` can name a Linux network interface.
pub(super) fn is_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 16
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_graphic() && c != '/' && c != ':')
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::{PortKind, Topology};

    fn topo(cp: &str, iface: &str) -> Result<Topology, crate::TopologyError> {
        let text = format!(
            "ports:\n  - {{ name: p0, kind: mem }}\n  - {{ name: p1, kind: mem }}\n\
             vrs:\n  - name: vr1\n    control_plane: {cp}\n    interfaces:\n      \
             - {{ name: {iface}, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }}\n      \
             - {{ name: e1, port: p1, mac: 02:00:00:00:01:01 }}\n  \
             - name: vr2\n    interfaces:\n      - {{ name: e0, port: p1, mac: 02:00:00:00:02:00 }}\n"
        );
        Topology::parse(&text, "cp.yaml", Path::new("."))
    }

    #[test]
    fn a_mirror_port_per_interface_in_the_vrs_cell() {
        let t = topo("linux", "e0").unwrap();
        let cp = t.control_plane(0).unwrap();
        assert_eq!(cp.netns, "vr1");
        assert_eq!((cp.punt_per_sec, cp.punt_burst), (20_000, 2_000));
        assert!(t.control_plane(1).is_none());
        let mirrors: Vec<_> = t
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match &p.kind {
                PortKind::Mirror { netns, vr, iface } => Some((i, netns.clone(), *vr, *iface)),
                _ => None,
            })
            .collect();
        assert_eq!(mirrors, vec![(2, "vr1".into(), 0, 0), (3, "vr1".into(), 0, 1)]);
        // The mirrors run with their VR (and vr2, which shares p1).
        let cells = t.cells();
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].ports, vec![0, 1, 2, 3]);
        let t = topo("{ kind: linux, netns: x-cp, punt_per_sec: 7, punt_burst: 3 }", "e0").unwrap();
        let cp = t.control_plane(0).unwrap();
        assert_eq!((cp.netns.as_str(), cp.punt_per_sec, cp.punt_burst), ("x-cp", 7, 3));
        assert!(topo("linux", "e0").unwrap().summary().contains("tap e0 in namespace vr1"));
    }

    #[test]
    fn bad_control_planes_are_rejected_by_name() {
        let e = topo("bsd", "e0").unwrap_err().to_string();
        assert!(e.contains("control_plane kind must be linux, not \"bsd\""), "{e}");
        let e = topo("{ kind: linux, netns: \"a/b\" }", "e0").unwrap_err().to_string();
        assert!(e.contains("invalid netns \"a/b\""), "{e}");
        let e = topo("{ kind: linux, punt_per_sec: 20000000 }", "e0").unwrap_err().to_string();
        assert!(e.contains("cp.yaml:6:"), "{e}");
        let e = topo("linux", "a-very-long-name0").unwrap_err().to_string();
        assert!(e.contains("cp.yaml:8:") && e.contains("Linux interface name"), "{e}");
        let e = topo("{ netns: x }", "e0").unwrap_err().to_string();
        assert!(e.contains("kind"), "{e}");
        let e = topo("{ kind: linux, stale_secs: 0 }", "e0").unwrap_err().to_string();
        assert!(e.contains("cp.yaml:6:") && e.contains("stale seconds"), "{e}");
        let e = topo("{ kind: linux, netns: n, migrate_netns: n }", "e0").unwrap_err().to_string();
        assert!(e.contains("invalid migrate_netns \"n\""), "{e}");
        let t = topo("{ kind: linux, stale_secs: 5, migrate_netns: vr1-b }", "e0").unwrap();
        let cp = t.control_plane(0).unwrap();
        assert_eq!((cp.stale_secs, cp.migrate_netns.as_deref()), (5, Some("vr1-b")));
        assert_eq!(topo("linux", "e0").unwrap().control_plane(0).unwrap().stale_secs, 120);
    }
}
