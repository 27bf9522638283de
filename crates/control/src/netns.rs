//! Network namespaces and veth pairs for a topology's hosts, and the namespaces of VRs'
//! Linux control planes: made over rtnetlink ([`crate::rtnl`]), the SIOCETHTOOL ioctl
//! ([`crate::ethtool`]) and /proc/sys, with no `ip` or `ethtool` binary; recorded as they are
//! made, and removed exactly as recorded.
//!
//! Contract: [`make`] refuses to touch a namespace or interface that exists already (routeplex
//! did not make it, so it is not routeplex's to configure or delete), records every object
//! in [`Made`] the moment it exists, and leaves undoing to the caller ([`remove`]), which
//! deletes what the record names and nothing else. A namespace is made as `ip netns add`
//! makes one (a file under /run/netns bind-mounted on a new network namespace), so `ip netns`
//! and other tools see it. Errors name the object, the operation and the kernel's reason.

use std::fs::{File, OpenOptions};
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ipnet::IpNet;

use crate::ethtool::{self, Offload};
use crate::rtnl::{in_netns, Rtnl};
use crate::topology::{Attach, HostSpec, PortKind, Topology, HOST_IFNAME};

/// What `make` created: namespaces and root-namespace veth ends (deleting one end of a veth
/// deletes the pair).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Made {
    pub namespaces: Vec<String>,
    pub links: Vec<String>,
}

pub use crate::rtnl::NetError;

/// Where `ip netns` keeps named namespaces, and so does routeplex.
const NETNS_DIR: &str = "/run/netns";

fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

fn os_err(object: &str, op: &'static str) -> impl FnOnce(io::Error) -> NetError {
    let object = object.to_string();
    move |source| NetError::Os { object, op, source }
}

/// Whether namespace `name` exists.
pub fn namespace_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Whether interface `name` exists in this namespace.
pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Makes namespace `name` as `ip netns add` does: an empty file under /run/netns (a shared
/// mount, so other mount namespaces see what is bound under it) bind-mounted on a new network
/// namespace, which a thread of its own makes with unshare(2) and then leaves.
pub fn add_namespace(name: &str) -> Result<(), NetError> {
    let object = format!("namespace {name}");
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        let e = io::Error::new(io::ErrorKind::InvalidInput, "not a namespace name");
        return Err(os_err(&object, "create")(e));
    }
    let dir = Path::new(NETNS_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(os_err(&object, "create /run/netns"))?;
    share(dir).map_err(os_err(&object, "make /run/netns a shared mount"))?;
    let path = netns_path(name);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(&path)
        .map_err(os_err(&object, "create"))?;
    let bound = std::thread::scope(|s| {
        let t = s.spawn(|| {
            // This thread only, and it ends here: the mount keeps the namespace alive.
            crate::sys::unshare_net()?;
            crate::sys::bind_mount(Path::new("/proc/thread-self/ns/net"), &path, false)
        });
        t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    if let Err(e) = bound {
        let _ = std::fs::remove_file(&path);
        return Err(os_err(&object, "create")(e));
    }
    Ok(())
}

/// Makes the mount at `dir` shared, bind-mounting it on itself first when it is not a mount
/// point (as `ip netns add` does).
fn share(dir: &Path) -> io::Result<()> {
    match crate::sys::make_shared(dir) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            crate::sys::bind_mount(dir, dir, true)?;
            crate::sys::make_shared(dir)
        }
        r => r,
    }
}

/// Removes namespace `name` as `ip netns del` does: detaches its mount and removes its file;
/// the kernel frees the namespace (and the interfaces in it) once nothing else holds it.
pub fn del_namespace(name: &str) -> Result<(), NetError> {
    let object = format!("namespace {name}");
    let path = netns_path(name);
    match crate::sys::umount_detach(&path) {
        // Not a mount (a file left by a failed `add`: removing it is all there is to do), or
        // no file (removing it says so).
        Err(e) if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) => {
            return Err(os_err(&object, "unmount")(e));
        }
        _ => {}
    }
    std::fs::remove_file(&path).map_err(os_err(&object, "delete"))
}

/// Writes `knobs` (paths under /proc/sys, values) inside namespace `ns`: /proc/sys/net shows
/// the network namespace of the thread that opens it.
fn sysctls(ns: &str, knobs: &[(&str, &str)]) -> Result<(), NetError> {
    in_netns(ns, || {
        for (k, v) in knobs {
            let object = format!("sysctl {} in namespace {ns}", k.replace('/', "."));
            std::fs::write(Path::new("/proc/sys").join(k), v).map_err(os_err(&object, "set"))?;
        }
        Ok(())
    })
}

/// Turns off every offload `ethtool -K DEV tx off rx off tso off gso off gro off` would, on
/// `dev` in `nl`'s namespace.
fn offloads_off(nl: &Rtnl, dev: &str, ns: Option<&str>) -> Result<(), NetError> {
    ethtool::turn_off(nl, dev, &Offload::ALL).map_err(|source| NetError::Os {
        object: match ns {
            Some(ns) => format!("offloads of {dev} in namespace {ns}"),
            None => format!("offloads of {dev}"),
        },
        op: "turn off",
        source,
    })
}

/// Makes every host of `topo`: a namespace with `lo` and `eth0` up, eth0's addresses and
/// default routes, and the veth's other end (the port's interface) up in this namespace.
/// Offloads that would hand routeplex frames larger than the MTU or without checksums (TSO,
/// GSO, GRO, checksum offload) are turned off on both ends, and IPv6 is off on the
/// routeplex end, which needs no address and should not chatter, and on hosts without IPv6.
pub fn make(topo: &Topology, made: &mut Made) -> Result<(), NetError> {
    let mut root = None;
    for p in &topo.ports {
        let (PortKind::AfXdp(Attach::Host { host, ifname }, _)
        | PortKind::AfPacket(Attach::Host { host, ifname })) = &p.kind
        else {
            continue;
        };
        let h = &topo.hosts[*host];
        let ns = h.name.as_str();
        if namespace_exists(ns) {
            return Err(NetError::InTheWay {
                what: format!("namespace {ns}"),
                remedy: format!("remove it or rename host {ns}"),
            });
        }
        if link_exists(ifname) {
            return Err(NetError::InTheWay {
                what: format!("interface {ifname}"),
                remedy: format!("remove it or rename port {}", p.name),
            });
        }
        let root = match &mut root {
            Some(r) => r,
            None => root.insert(Rtnl::open()?),
        };
        make_host(root, h, ifname, made)?;
    }
    control_planes(topo, made)
}

/// One host of [`make`], joined to interface `ifname` here.
fn make_host(root: &mut Rtnl, h: &HostSpec, ifname: &str, made: &mut Made) -> Result<(), NetError> {
    let ns = h.name.as_str();
    add_namespace(ns)?;
    made.namespaces.push(ns.to_string());
    let ns_file = File::open(netns_path(ns)).map_err(os_err(&format!("namespace {ns}"), "open"))?;
    root.add_veth(ifname, HOST_IFNAME, (ns, &ns_file), h.mtu)?;
    made.links.push(ifname.to_string());
    let mut inside = Rtnl::open_in(ns)?;
    inside.set_up("lo", true)?;
    for a in &h.addresses {
        // No duplicate address detection: the address is usable at once.
        inside.add_address(HOST_IFNAME, *a, a.addr().is_ipv6())?;
    }
    if !h.addresses.iter().any(|a| a.addr().is_ipv6()) {
        // A host without IPv6 should not chatter (MLD reports, router solicitations):
        // every frame on its link is then one a test or a user sent.
        sysctls(ns, &[("net/ipv6/conf/eth0/disable_ipv6", "1")])?;
    }
    inside.set_up(HOST_IFNAME, true)?;
    for g in &h.gateways {
        let default = match g {
            IpAddr::V4(_) => IpNet::V4(Default::default()),
            IpAddr::V6(_) => IpNet::V6(Default::default()),
        };
        inside.add_route(default, *g, HOST_IFNAME)?;
    }
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"), "1");
    root.set_up(ifname, true)?;
    offloads_off(root, ifname, None)?;
    offloads_off(&inside, HOST_IFNAME, Some(ns))
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
        return Err(NetError::InTheWay {
            what: format!("namespace {ns}"),
            remedy: "remove it or give the VR's control_plane another netns".into(),
        });
    }
    add_namespace(ns)?;
    made.namespaces.push(ns.to_string());
    Rtnl::open_in(ns)?.set_up("lo", true)?;
    // Addresses are usable at once (no duplicate address detection: the data plane owns
    // the addresses on the wire), and the namespace is a router's control plane, which
    // takes no router advertisements. It does not forward: the data plane does.
    let knobs = [
        ("net/ipv6/conf/all/accept_dad", "0"),
        ("net/ipv6/conf/default/accept_dad", "0"),
        ("net/ipv6/conf/all/accept_ra", "0"),
        ("net/ipv6/conf/default/accept_ra", "0"),
        ("net/ipv4/ip_forward", "0"),
    ];
    sysctls(ns, &knobs)
}

/// Gives each mirror tap of `topo` (made by the data plane when it opened its ports, down and
/// bare) its VR interface's MAC, MTU and addresses, and takes it up when the interface is.
pub fn configure_mirrors(
    topo: &Topology,
    held: &dyn Fn(&str, &str) -> bool,
) -> Result<(), NetError> {
    (0..topo.vrs.len()).try_for_each(|v| configure_mirrors_of(topo, v, held))
}

/// [`configure_mirrors`] for VR `v`'s taps alone (a VR added to a running host). A tap is up
/// when its interface is: not down in the topology, and not held down (`held(vr, iface)`, a
/// restarted fenced host's), so the VR's control plane does not speak for it either.
pub fn configure_mirrors_of(
    topo: &Topology,
    v: usize,
    held: &dyn Fn(&str, &str) -> bool,
) -> Result<(), NetError> {
    for p in &topo.ports {
        let PortKind::Mirror { netns, vr, iface } = &p.kind else { continue };
        if *vr != v {
            continue;
        }
        let f = &topo.vrs[*vr].interfaces[usize::from(*iface)];
        let dev = f.name.as_str();
        let mut nl = Rtnl::open_in(netns)?;
        nl.set_mac(dev, f.mac)?;
        nl.set_mtu(dev, f.mtu)?;
        for a in &f.ipv4 {
            nl.add_address(dev, (*a).into(), false)?;
        }
        for a in &f.ipv6 {
            nl.add_address(dev, (*a).into(), true)?;
        }
        nl.set_up(dev, !topo.iface_down(*vr, *iface) && !held(&topo.vrs[*vr].name, dev))?;
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
    let mut nl = Rtnl::open_in(ns)?;
    if let Some(mac) = c.mac {
        nl.set_mac(dev, mac)?;
    }
    if let Some(mtu) = c.mtu {
        nl.set_mtu(dev, mtu)?;
    }
    for a in &c.del {
        nl.del_address(dev, *a)?;
    }
    for a in &c.add {
        nl.add_address(dev, *a, a.addr().is_ipv6())?;
    }
    Ok(())
}

/// Sets mirror tap `dev`'s MTU in namespace `ns` (its VR interface's changed).
pub fn set_mirror_mtu(ns: &str, dev: &str, mtu: u16) -> Result<(), NetError> {
    Rtnl::open_in(ns)?.set_mtu(dev, mtu)
}

/// Takes mirror tap `dev` in namespace `ns` up or down (its VR interface went up or down).
pub fn set_mirror_up(ns: &str, dev: &str, up: bool) -> Result<(), NetError> {
    Rtnl::open_in(ns)?.set_up(dev, up)
}

/// Removes what `made` records, newest first; returns what could not be removed (an object
/// already gone is not an error).
pub fn remove(made: &Made) -> Vec<NetError> {
    let mut errors = Vec::new();
    let mut root = None;
    for l in made.links.iter().rev() {
        if !link_exists(l) {
            continue;
        }
        let r = match &mut root {
            Some(r) => r,
            None => match Rtnl::open() {
                Ok(r) => root.insert(r),
                Err(e) => {
                    errors.push(e);
                    break;
                }
            },
        };
        if let Err(e) = r.del_link(l) {
            errors.push(e);
        }
    }
    for ns in made.namespaces.iter().rev() {
        if namespace_exists(ns) {
            if let Err(e) = del_namespace(ns) {
                errors.push(e);
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    //! Root only (namespaces, veth): each test says so and returns otherwise. Names are the
    //! test's own (pid and a counter); `ip` checks from outside what netlink made.

    use super::*;
    use std::process::Command;
    use std::sync::atomic::{AtomicU32, Ordering};

    static NEXT: AtomicU32 = AtomicU32::new(0);

    fn root() -> bool {
        let ok = crate::sys::euid() == 0;
        if !ok {
            eprintln!("skipped: needs root (network namespaces, veth)");
        }
        ok
    }

    /// A name of this test's own, short enough for an interface: `rpxnPPPPN`.
    fn name(prefix: &str) -> String {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}{:x}{n}", std::process::id() % 0xffff)
    }

    /// Removes what the test recorded, even when it fails.
    struct Guard(Made);

    impl Drop for Guard {
        fn drop(&mut self) {
            for e in remove(&self.0) {
                eprintln!("cleanup: {e}");
            }
        }
    }

    fn ip(args: &[&str]) -> String {
        let o = Command::new("ip").args(args).output().expect("ip");
        assert!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    #[test]
    fn make_builds_a_host_as_ip_and_ethtool_did_and_remove_undoes_it() {
        if !root() {
            return;
        }
        let (ns, port) = (name("rpxh"), name("p"));
        let yaml = format!(
            r#"hosts:
  - {{ name: {ns}, addresses: [10.77.0.2/24, "2001:db8:77::2/64"], gateways: [10.77.0.1, "2001:db8:77::1"], mtu: 1400 }}
ports:
  - {{ name: {port}, kind: afpacket, host: {ns} }}
vrs:
  - name: r
    interfaces:
      - {{ name: e, port: {port}, mac: "02:00:00:00:77:01", addresses: [10.77.0.1/24] }}
"#
        );
        let topo = Topology::parse(&yaml, "t.yaml", Path::new(".")).unwrap();
        let mut g = Guard(Made::default());
        make(&topo, &mut g.0).unwrap();
        let outer = format!("rpx-{port}");
        assert_eq!(g.0, Made { namespaces: vec![ns.clone()], links: vec![outer.clone()] });
        let addrs = ip(&["-n", &ns, "-o", "address", "show", "dev", "eth0"]);
        assert!(addrs.contains("inet 10.77.0.2/24 "), "{addrs}");
        assert!(addrs.contains("inet6 2001:db8:77::2/64 "), "{addrs}");
        let v6 = addrs.lines().find(|l| l.contains("2001:db8:77::2")).unwrap();
        assert!(v6.contains("nodad") && !v6.contains("tentative"), "usable at once: {v6}");
        let r4 = ip(&["-n", &ns, "-4", "route", "show", "default"]);
        assert!(r4.contains("default via 10.77.0.1 dev eth0"), "{r4}");
        let r6 = ip(&["-n", &ns, "-6", "route", "show", "default"]);
        assert!(r6.contains("default via 2001:db8:77::1 dev eth0"), "{r6}");
        let inside = ip(&["-n", &ns, "-o", "link", "show"]);
        assert!(inside.contains("lo: <LOOPBACK,UP"), "{inside}");
        assert!(inside.contains("eth0@if") && inside.contains("mtu 1400"), "{inside}");
        let outside = ip(&["-o", "link", "show", "dev", &outer]);
        assert!(outside.contains("mtu 1400") && outside.contains(",UP"), "{outside}");
        let v6 = std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{outer}/disable_ipv6"));
        assert_eq!(v6.unwrap().trim(), "1");
        let (here, there) = (Rtnl::open().unwrap(), Rtnl::open_in(&ns).unwrap());
        for (nl, dev) in [(&here, outer.as_str()), (&there, "eth0")] {
            let feats = ethtool::features(nl, dev).unwrap();
            let covered = |n: &str| Offload::ALL.iter().any(|o| o.covers(n));
            let on: Vec<_> =
                feats.iter().filter(|f| f.changeable && f.active && covered(&f.name)).collect();
            assert!(on.is_empty(), "{dev}: still on: {on:?}");
            // veth can do them all, so something was turned off.
            assert!(feats.iter().any(|f| f.name == "rx-gro" && f.changeable && !f.active));
        }
        // What exists is refused, named, and left alone.
        let e = make(&topo, &mut Made::default()).unwrap_err();
        assert!(matches!(e, NetError::InTheWay { .. }), "{e}");
        assert!(e.to_string().starts_with(&format!("namespace {ns} exists")), "{e}");
        assert!(remove(&g.0).is_empty());
        assert!(!namespace_exists(&ns) && !link_exists(&outer));
        assert!(!ip(&["netns", "list"]).lines().any(|l| l.split(' ').next() == Some(&ns)));
        // Removing what is gone already is not an error.
        assert!(remove(&g.0).is_empty());
    }

    #[test]
    fn rtnl_changes_links_addresses_and_routes_and_names_what_it_refuses() {
        if !root() {
            return;
        }
        let (ns, ns2, a, b) = (name("rpxl"), name("rpxm"), name("va"), name("vb"));
        let mut g = Guard(Made::default());
        add_namespace(&ns).unwrap();
        g.0.namespaces.push(ns.clone());
        add_namespace(&ns2).unwrap();
        g.0.namespaces.push(ns2.clone());
        let e = add_namespace(&ns).unwrap_err();
        assert!(e.to_string().starts_with(&format!("namespace {ns}: create: File exists")), "{e}");
        let f = File::open(netns_path(&ns)).unwrap();
        let mut nl = Rtnl::open_in(&ns).unwrap();
        // Both ends inside the test's namespace: nothing appears in this one.
        nl.add_veth(&a, &b, (&ns, &f), 1500).unwrap();
        let e = nl.add_veth(&a, &b, (&ns, &f), 1500).unwrap_err();
        let want = format!("veth {a}/{b}@{ns} in namespace {ns}: create: File exists");
        assert!(e.to_string().starts_with(&want), "{e}");
        let mac = wire::MacAddr([0x02, 0, 0, 0, 0x78, 0x01]);
        nl.set_mac(&a, mac).unwrap();
        nl.set_mtu(&a, 9000).unwrap();
        nl.set_up(&a, true).unwrap();
        nl.set_up(&b, true).unwrap();
        // Below the minimum: the kernel's words come with the errno.
        let e = nl.set_mtu(&a, 67).unwrap_err().to_string();
        assert!(e.starts_with(&format!("link {a} in namespace {ns}: set mtu: ")), "{e}");
        assert!(e.contains("Invalid argument") && e.contains("minimum"), "{e}");
        nl.add_address(&a, "10.78.0.1/24".parse().unwrap(), false).unwrap();
        nl.add_address(&a, "2001:db8:78::1/64".parse().unwrap(), true).unwrap();
        nl.add_route("10.79.0.0/16".parse().unwrap(), "10.78.0.9".parse().unwrap(), &a).unwrap();
        let show = ip(&["-n", &ns, "-o", "link", "show", "dev", &a]);
        assert!(show.contains("mtu 9000") && show.contains("02:00:00:00:78:01"), "{show}");
        let addrs = ip(&["-n", &ns, "-o", "address", "show", "dev", &a]);
        assert!(addrs.contains("10.78.0.1/24") && addrs.contains("2001:db8:78::1/64"), "{addrs}");
        let routes = ip(&["-n", &ns, "route", "show", "10.79.0.0/16"]);
        assert!(routes.contains(&format!("10.79.0.0/16 via 10.78.0.9 dev {a}")), "{routes}");
        nl.del_address(&a, "10.78.0.1/24".parse().unwrap()).unwrap();
        let addrs = ip(&["-n", &ns, "-o", "address", "show", "dev", &a]);
        assert!(!addrs.contains("10.78.0.1/24"), "{addrs}");
        nl.set_up(&a, false).unwrap();
        assert!(!ip(&["-n", &ns, "-o", "link", "show", "dev", &a]).contains(",UP"));
        // What `apply` does to a mirror tap when its VR interface changes. (Going down took
        // the IPv6 address: keep_addr_on_down is off.)
        let mut change = MirrorChange {
            mac: Some(wire::MacAddr([0x02, 0, 0, 0, 0x78, 0x02])),
            mtu: Some(1400),
            del: vec![],
            add: vec!["10.78.1.1/24".parse().unwrap(), "2001:db8:78:1::1/64".parse().unwrap()],
        };
        set_mirror_up(&ns, &a, true).unwrap();
        follow_mirror(&ns, &a, &change).unwrap();
        let show = ip(&["-n", &ns, "-o", "link", "show", "dev", &a]);
        assert!(show.contains("mtu 1400") && show.contains("02:00:00:00:78:02"), "{show}");
        assert!(show.contains(",UP"), "{show}");
        let addrs = ip(&["-n", &ns, "-o", "address", "show", "dev", &a]);
        assert!(addrs.contains("10.78.1.1/24") && addrs.contains("2001:db8:78:1::1/64"), "{addrs}");
        change = MirrorChange { del: change.add, ..MirrorChange::default() };
        follow_mirror(&ns, &a, &change).unwrap();
        let addrs = ip(&["-n", &ns, "-o", "address", "show", "dev", &a]);
        assert!(!addrs.contains("10.78.1.1/24") && !addrs.contains("2001:db8:78:1::"), "{addrs}");
        set_mirror_mtu(&ns, &a, 1300).unwrap();
        assert!(ip(&["-n", &ns, "-o", "link", "show", "dev", &a]).contains("mtu 1300"));
        let e = nl.index("rpx-nope").unwrap_err().to_string();
        assert!(e.starts_with(&format!("link rpx-nope in namespace {ns}: look up: ")), "{e}");
        let f2 = File::open(netns_path(&ns2)).unwrap();
        nl.set_netns(&b, (&ns2, &f2)).unwrap();
        assert!(ip(&["-n", &ns2, "-o", "link", "show"]).contains(&format!("{b}@")));
        nl.del_link(&a).unwrap();
        assert!(!ip(&["-n", &ns2, "-o", "link", "show"]).contains(&b), "the pair goes with a");
        drop(nl);
        del_namespace(&ns).unwrap();
        assert!(!namespace_exists(&ns));
        let e = del_namespace(&ns).unwrap_err().to_string();
        assert!(e.starts_with(&format!("namespace {ns}: delete: No such file")), "{e}");
    }

    #[test]
    fn a_control_plane_namespace_has_lo_up_and_its_knobs_set() {
        if !root() {
            return;
        }
        let ns = name("rpxc");
        let mut g = Guard(Made::default());
        make_control_plane(&ns, &mut g.0).unwrap();
        assert_eq!(g.0.namespaces, std::slice::from_ref(&ns));
        assert!(ip(&["-n", &ns, "-o", "link", "show", "lo"]).contains("LOOPBACK,UP"));
        let read = |k: &str| std::fs::read_to_string(Path::new("/proc/sys").join(k));
        let knobs = in_netns(&ns, || {
            let r = ["net/ipv4/ip_forward", "net/ipv6/conf/all/accept_ra"].map(read);
            Ok(r.map(|v| v.unwrap().trim().to_string()))
        });
        assert_eq!(knobs.unwrap(), ["0", "0"]);
        let e = make_control_plane(&ns, &mut Made::default()).unwrap_err().to_string();
        assert!(e.contains("exists and routeplex did not make it"), "{e}");
    }
}
