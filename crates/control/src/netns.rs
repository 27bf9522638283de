//! Network namespaces and veth pairs for a topology's hosts, and the namespaces of VRs'
//! Linux control planes: made with iproute2 and ethtool, recorded as they are made, and
//! removed exactly as recorded.
//!
//! Contract: [`make`] refuses to touch a namespace or interface that exists already (routeplex
//! did not make it, so it is not routeplex's to configure or delete), records every object
//! in [`Made`] the moment it exists, and leaves undoing to the caller ([`remove`]), which
//! deletes what the record names and nothing else.

use std::fmt;
use std::path::Path;
use std::process::Command;

use crate::topology::{Attach, PortKind, Topology, HOST_IFNAME};

/// What `make` created: namespaces and root-namespace veth ends (deleting one end of a veth
/// deletes the pair).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Made {
    pub namespaces: Vec<String>,
    pub links: Vec<String>,
}

/// A command that failed, or an object that is in the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetError(pub String);

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetError {}

/// Runs `cmd args`, returning its stderr as the error when it fails.
fn run(cmd: &str, args: &[&str]) -> Result<(), NetError> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| NetError(format!("{cmd} {}: cannot run: {e}", args.join(" "))))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(NetError(format!("{cmd} {}: {}", args.join(" "), err.trim())))
}

/// Whether namespace `name` exists.
pub fn namespace_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Whether interface `name` exists in this namespace.
pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Makes every host of `topo`: a namespace with `lo` and `eth0` up, eth0's addresses and
/// default routes, and the veth's other end (the port's interface) up in this namespace.
/// Offloads that would hand routeplex frames larger than the MTU or without checksums (TSO,
/// GSO, GRO, checksum offload) are turned off on both ends, and IPv6 is off on the
/// routeplex end, which needs no address and should not chatter, and on hosts without IPv6.
pub fn make(topo: &Topology, made: &mut Made) -> Result<(), NetError> {
    for p in &topo.ports {
        let (PortKind::AfXdp(Attach::Host { host, ifname }, _)
        | PortKind::AfPacket(Attach::Host { host, ifname })) = &p.kind
        else {
            continue;
        };
        let h = &topo.hosts[*host];
        let ns = h.name.as_str();
        if namespace_exists(ns) {
            return Err(NetError(format!(
                "namespace {ns} exists and routeplex did not make it: remove it or rename host {ns}"
            )));
        }
        if link_exists(ifname) {
            return Err(NetError(format!(
                "interface {ifname} exists and routeplex did not make it: remove it or rename port {}",
                p.name
            )));
        }
        run("ip", &["netns", "add", ns])?;
        made.namespaces.push(ns.to_string());
        let mtu = h.mtu.to_string();
        run(
            "ip",
            &[
                "link",
                "add",
                ifname,
                "mtu",
                &mtu,
                "type",
                "veth",
                "peer",
                "name",
                HOST_IFNAME,
                "mtu",
                &mtu,
                "netns",
                ns,
            ],
        )?;
        made.links.push(ifname.clone());
        run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        for a in &h.addresses {
            let s = a.to_string();
            let mut args = vec!["-n", ns, "address", "add", s.as_str(), "dev", HOST_IFNAME];
            if a.addr().is_ipv6() {
                // No duplicate address detection: the address is usable at once.
                args.push("nodad");
            }
            run("ip", &args)?;
        }
        if !h.addresses.iter().any(|a| a.addr().is_ipv6()) {
            // A host without IPv6 should not chatter (MLD reports, router solicitations):
            // every frame on its link is then one a test or a user sent.
            let knob = format!("net.ipv6.conf.{HOST_IFNAME}.disable_ipv6=1");
            run("ip", &["netns", "exec", ns, "sysctl", "-qw", &knob])?;
        }
        run("ip", &["-n", ns, "link", "set", HOST_IFNAME, "up"])?;
        for g in &h.gateways {
            let g = g.to_string();
            let family = if g.contains(':') { "-6" } else { "-4" };
            run(
                "ip",
                &["-n", ns, family, "route", "add", "default", "via", &g, "dev", HOST_IFNAME],
            )?;
        }
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"), "1");
        run("ip", &["link", "set", ifname, "up"])?;
        let offloads = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
        let mut root = vec!["-K", ifname.as_str()];
        root.extend(offloads);
        run("ethtool", &root)?;
        let mut inside = vec!["netns", "exec", ns, "ethtool", "-K", HOST_IFNAME];
        inside.extend(offloads);
        run("ip", &inside)?;
    }
    control_planes(topo, made)
}

/// Makes the namespace of every VR control plane of `topo` .
/// Called by [`make`] after the hosts.
fn control_planes(topo: &Topology, made: &mut Made) -> Result<(), NetError> {
    for cp in topo.control_planes.iter().flatten() {
        make_control_plane(&cp.netns, made)?;
    }
    Ok(())
}

/// Makes one VR control plane's namespace `ns` (a VR added to, or migrated to, a running
/// host), refusing one that exists.
pub fn make_control_plane(ns: &str, made: &mut Made) -> Result<(), NetError> {
    if namespace_exists(ns) {
        return Err(NetError(format!(
                "namespace {ns} exists and routeplex did not make it: remove it or give the VR's control_plane another netns"
            )));
    }
    run("ip", &["netns", "add", ns])?;
    made.namespaces.push(ns.to_string());
    run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
    // Addresses are usable at once (no duplicate address detection: the data plane owns
    // the addresses on the wire), and the namespace is a router's control plane, which
    // takes no router advertisements. It does not forward: the data plane does.
    let knobs = [
        "net.ipv6.conf.all.accept_dad=0",
        "net.ipv6.conf.default.accept_dad=0",
        "net.ipv6.conf.all.accept_ra=0",
        "net.ipv6.conf.default.accept_ra=0",
        "net.ipv4.ip_forward=0",
    ];
    let mut args = vec!["netns", "exec", ns, "sysctl", "-qw"];
    args.extend(knobs);
    run("ip", &args)?;
    Ok(())
}

/// Gives each mirror tap of `topo` (made by the data plane when it opened its ports, down and
/// bare) its VR interface's MAC, MTU and addresses, and takes it up when the interface is.
pub fn configure_mirrors(topo: &Topology) -> Result<(), NetError> {
    (0..topo.vrs.len()).try_for_each(|v| configure_mirrors_of(topo, v))
}

/// [`configure_mirrors`] for VR `v`'s taps alone (a VR added to a running host).
pub fn configure_mirrors_of(topo: &Topology, v: usize) -> Result<(), NetError> {
    for p in &topo.ports {
        let PortKind::Mirror { netns, vr, iface } = &p.kind else { continue };
        if *vr != v {
            continue;
        }
        let f = &topo.vrs[*vr].interfaces[usize::from(*iface)];
        let (ns, dev) = (netns.as_str(), f.name.as_str());
        let (mac, mtu) = (f.mac.to_string(), f.mtu.to_string());
        run("ip", &["-n", ns, "link", "set", "dev", dev, "address", &mac, "mtu", &mtu])?;
        for a in &f.ipv4 {
            run("ip", &["-n", ns, "address", "add", &a.to_string(), "dev", dev])?;
        }
        for a in &f.ipv6 {
            run("ip", &["-n", ns, "address", "add", &a.to_string(), "dev", dev, "nodad"])?;
        }
        set_mirror_up(ns, dev, !topo.iface_down(*vr, *iface))?;
    }
    Ok(())
}

/// What a changed VR interface's mirror tap must follow (see [`follow_mirror`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorChange {
    pub mac: Option<wire::MacAddr>,
    pub mtu: Option<u16>,
    /// Addresses to remove, then to add.
    pub del: Vec<ipnet::IpNet>,
    pub add: Vec<ipnet::IpNet>,
}

impl MirrorChange {
    /// What turns interface `a`'s mirror into `b`'s; `None` when nothing differs.
    pub fn between(
        a: &dataplane::config::IfaceConfig,
        b: &dataplane::config::IfaceConfig,
    ) -> Option<MirrorChange> {
        let nets = |f: &dataplane::config::IfaceConfig| -> Vec<ipnet::IpNet> {
            f.ipv4.iter().map(|&n| n.into()).chain(f.ipv6.iter().map(|&n| n.into())).collect()
        };
        let (old, new) = (nets(a), nets(b));
        let c = MirrorChange {
            mac: (a.mac != b.mac).then_some(b.mac),
            mtu: (a.mtu != b.mtu).then_some(b.mtu),
            del: old.iter().filter(|n| !new.contains(n)).copied().collect(),
            add: new.iter().filter(|n| !old.contains(n)).copied().collect(),
        };
        (c != MirrorChange::default()).then_some(c)
    }
}

/// Carries a VR interface's change to its mirror tap `dev` in namespace `ns`, so the daemons
/// there see the interface as it now is.
pub fn follow_mirror(ns: &str, dev: &str, c: &MirrorChange) -> Result<(), NetError> {
    if let Some(mac) = c.mac {
        run("ip", &["-n", ns, "link", "set", "dev", dev, "address", &mac.to_string()])?;
    }
    if let Some(mtu) = c.mtu {
        set_mirror_mtu(ns, dev, mtu)?;
    }
    for a in &c.del {
        run("ip", &["-n", ns, "address", "del", &a.to_string(), "dev", dev])?;
    }
    for a in &c.add {
        let a = a.to_string();
        let mut args = vec!["-n", ns, "address", "add", &a, "dev", dev];
        if a.contains(':') {
            args.push("nodad");
        }
        run("ip", &args)?;
    }
    Ok(())
}

/// Sets mirror tap `dev`'s MTU in namespace `ns` (its VR interface's changed).
pub fn set_mirror_mtu(ns: &str, dev: &str, mtu: u16) -> Result<(), NetError> {
    run("ip", &["-n", ns, "link", "set", "dev", dev, "mtu", &mtu.to_string()])
}

/// Takes mirror tap `dev` in namespace `ns` up or down (its VR interface went up or down).
pub fn set_mirror_up(ns: &str, dev: &str, up: bool) -> Result<(), NetError> {
    run("ip", &["-n", ns, "link", "set", "dev", dev, if up { "up" } else { "down" }])
}

/// Removes what `made` records, newest first; returns what could not be removed (an object
/// already gone is not an error).
pub fn remove(made: &Made) -> Vec<NetError> {
    let mut errors = Vec::new();
    for l in made.links.iter().rev() {
        if link_exists(l) {
            if let Err(e) = run("ip", &["link", "del", l]) {
                errors.push(e);
            }
        }
    }
    for ns in made.namespaces.iter().rev() {
        if namespace_exists(ns) {
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                errors.push(e);
            }
        }
    }
    errors
}
