//! One virtual router: its interfaces, routes, neighbors, tables and limits.

use std::collections::HashMap;
use std::net::IpAddr;

use dataplane::config::{
    IfaceConfig, IfaceId, NeighborConfig, RouteConfig, RouteSource, RouteTarget, VrConfig,
    VrLimits, IPV6_MIN_MTU, MAX_MTU, MIN_MTU,
};
use ipnet::IpNet;
use wire::MacAddr;

use super::table::Tables;
use super::yaml::{Result, Value};
use super::{list_or_none, name, table, Host, Segment};

const VR_KEYS: &[&str] = &[
    "name",
    "interfaces",
    "routes",
    "neighbors",
    "tables",
    "limits",
    "worker",
    "reservation",
    "batch",
    "replicas",
    "control_plane",
];
const IFACE_KEYS: &[&str] = &["name", "port", "switch", "vlan", "mac", "mtu", "addresses", "up"];
const ROUTE_KEYS: &[&str] = &["prefix", "via", "interface", "blackhole"];
const NEIGHBOR_KEYS: &[&str] = &["address", "mac", "interface"];
const DEFAULT_MTU: u16 = 1500;

/// Each `limits:` key, its accepted range, and the field it sets. The ranges guarantee the
/// value fits the field, so the setters may narrow with `as`.
type SetLimit = fn(&mut VrLimits, u64);
const LIMITS: &[(&str, u64, u64, SetLimit)] = &[
    ("neighbors", 1, 1_000_000, |l, n| l.neighbors = n as u32),
    ("queue_per_neighbor", 0, 64, |l, n| l.queue_per_neighbor = n as u16),
    ("queue_total", 0, 65_535, |l, n| l.queue_total = n as u16),
    ("neighbor_reachable_ms", 1_000, 3_600_000, |l, n| l.neighbor_reachable_ms = n as u32),
    ("neighbor_retrans_ms", 100, 60_000, |l, n| l.neighbor_retrans_ms = n as u32),
    ("neighbor_probes", 1, 10, |l, n| l.neighbor_probes = n as u8),
    ("neighbor_failed_hold_ms", 0, 3_600_000, |l, n| l.neighbor_failed_hold_ms = n as u32),
    ("incomplete_per_interface", 0, 65_535, |l, n| l.incomplete_per_interface = n as u16),
    ("solicitations_per_sec", 0, 1_000_000, |l, n| l.solicitations_per_sec = n as u32),
    ("solicitations_burst", 0, 1_000_000, |l, n| l.solicitations_burst = n as u32),
    ("icmp_errors_per_sec", 0, 1_000_000, |l, n| l.icmp_errors_per_sec = n as u32),
    ("icmp_errors_burst", 0, 1_000_000, |l, n| l.icmp_errors_burst = n as u32),
];

/// Reads one VR; `host` holds what must be unique across VRs. Also returns the interfaces
/// given `up: false` (administratively down).
/// `tables`: whether its table files are read (see [`Tables`]). Also returns their sum
/// (see [`table::load_tables`]), `None` when it has none or they were not read.
pub(super) fn vr(
    v: &Value,
    host: &mut Host,
    tables: Tables,
) -> Result<(VrConfig, Vec<IfaceId>, Option<u32>)> {
    let m = v.map(VR_KEYS)?;
    let name_v = m.req("name")?;
    let name = name(&name_v)?;
    if let Some(line) = host.vr_names.get(&name) {
        return Err(
            name_v.bad(&name, format_args!("duplicate VR name {name:?} (first at line {line})"))
        );
    }
    host.vr_names.insert(name.clone(), name_v.line());

    let mut vr = Vr { name, ..Vr::default() };
    for iv in m.list("interfaces")? {
        vr.interface(&iv, host)?;
    }

    let mut routes = Vec::new();
    let mut static_lines: HashMap<IpNet, usize> = HashMap::new();
    for rv in m.list("routes")? {
        let route = vr.route(&rv)?;
        if let Some(line) = static_lines.insert(route.prefix, rv.line()) {
            return Err(rv.error(format_args!(
                "duplicate route for {} (first at line {line})",
                route.prefix
            )));
        }
        routes.push(route);
    }

    let mut neighbors: Vec<NeighborConfig> = Vec::new();
    let mut neighbor_lines: HashMap<(IfaceId, IpAddr), usize> = HashMap::new();
    for nv in m.list("neighbors")? {
        let n = vr.neighbor(&nv)?;
        if let Some(line) = neighbor_lines.insert((n.iface, n.ip), nv.line()) {
            let iface = &vr.ifaces[usize::from(n.iface)].name;
            return Err(nv.error(format_args!(
                "duplicate neighbor {} on {iface} (first at line {line})",
                n.ip
            )));
        }
        neighbors.push(n);
    }

    let table_sum = match tables {
        Tables::Read(dir) => {
            table::load_tables(&vr, &m.list("tables")?, &static_lines, dir, Some(&mut routes))?
        }
        Tables::Sum(dir) => table::load_tables(&vr, &m.list("tables")?, &static_lines, dir, None)?,
        Tables::Skip => None,
    };

    let limits = match m.get("limits") {
        Some(lv) => limits(&lv)?,
        None => VrLimits::default(),
    };
    let down = vr.down;
    Ok((
        VrConfig { name: vr.name, interfaces: vr.ifaces, routes, neighbors, limits },
        down,
        table_sum,
    ))
}

/// A VR while it is being read: what later fields are checked against.
#[derive(Default)]
pub(super) struct Vr {
    pub(super) name: String,
    pub(super) ifaces: Vec<IfaceConfig>,
    iface_ids: HashMap<String, (IfaceId, usize)>,
    /// The VR's own addresses: `(interface, line)`.
    addrs: HashMap<IpAddr, (IfaceId, usize)>,
    /// Connected subnets (host bits cleared), IPv6 link-local ones excepted: `(interface, line)`.
    pub(super) subnets: HashMap<IpNet, (IfaceId, usize)>,
    /// Explicit IPv6 link-local addresses, per interface: line.
    link_locals: HashMap<(IfaceId, IpAddr), usize>,
    /// Interfaces given `up: false`.
    down: Vec<IfaceId>,
}

impl Vr {
    fn interface(&mut self, v: &Value, host: &mut Host) -> Result<()> {
        let m = v.map(IFACE_KEYS)?;
        let name_v = m.req("name")?;
        let name = name(&name_v)?;
        if let Some((_, line)) = self.iface_ids.get(&name) {
            return Err(name_v.bad(
                &name,
                format_args!(
                    "duplicate interface name {name:?} in {} (first at line {line})",
                    self.name
                ),
            ));
        }
        let id = IfaceId::try_from(self.ifaces.len())
            .map_err(|_| v.error(format_args!("more than {} interfaces", IfaceId::MAX)))?;
        let vlan = m.get("vlan").map(|v| v.int::<u16>("VLAN id", 1, 4094)).transpose()?;
        // An interface sits on a port (demuxed there by MAC and VLAN) or on a switch (joined to
        // it by an internal link, in `vlan` of the switch).
        let (port, vlan, segment) = match (m.get("port"), m.get("switch")) {
            (Some(pv), None) => {
                let port = host.port_ref(&pv)?;
                if let Some((sw, line)) = host.switched_ports.get(&port) {
                    return Err(pv.bad(
                        pv.text()?,
                        format_args!(
                            "port {} is a member of switch {sw} (line {line}); put the interface on the switch with \"switch: {sw}\"",
                            pv.text()?
                        ),
                    ));
                }
                (port, vlan, Segment::Port(port, vlan))
            }
            (None, Some(sv)) => {
                let sw = host.switch_ref(&sv)?;
                let svlan = vlan.unwrap_or(super::switch::DEFAULT_VLAN);
                (host.link(&sv, sw, svlan, &self.name, &name)?, None, Segment::Switch(sw, svlan))
            }
            (Some(_), Some(sv)) => {
                return Err(sv.error("an interface sits on a port or on a switch, not both"))
            }
            (None, None) => return Err(v.error("missing \"port\" (or \"switch\")")),
        };

        // Demux is by (segment, destination MAC), so that pair must name one interface in
        // the whole host. Two interfaces of one VR on the same segment with different MACs
        // are fine, as two Linux interfaces on one segment are: unicast frames reach the one
        // whose MAC they carry, and ARP for an address reaches its one owner.
        let mac_v = m.req("mac")?;
        let mac = unicast_mac(&mac_v)?;
        if let Some((vr, iface, line)) = host.demux.get(&(segment, mac)) {
            return Err(mac_v.bad(
                mac_v.text()?,
                format_args!(
                    "MAC {mac} on {} is already {vr}.{iface}'s (line {line}); \
                     frames to it could not be demultiplexed",
                    host.segment_name(segment)
                ),
            ));
        }

        let (mut ipv4, mut ipv6) = (Vec::new(), Vec::new());
        for av in m.list("addresses")? {
            let net = self.address(&av, id)?;
            if let Some((vr, iface, line)) = host.segment_addrs.get(&(segment, net.addr())) {
                return Err(av.bad(
                    av.text()?,
                    format_args!(
                        "address {} on {} is already {vr}.{iface}'s (line {line}); \
                         ARP and neighbor discovery for it could reach only one of them",
                        net.addr(),
                        host.segment_name(segment)
                    ),
                ));
            }
            host.segment_addrs
                .insert((segment, net.addr()), (self.name.clone(), name.clone(), av.line()));
            match net {
                IpNet::V4(n) => ipv4.push(n),
                IpNet::V6(n) => ipv6.push(n),
            }
        }
        // On a vxlan segment the underlay's MTU less the encapsulation is the default and the
        // ceiling (a VLAN tag, carried inside, takes 4 bytes more).
        let vxlan_cap = host
            .vxlan_mtu(segment)
            .map(|(c, p)| (c.saturating_sub(4 * u16::from(vlan.is_some())), p));
        let mtu = match m.get("mtu") {
            None => match vxlan_cap {
                Some((cap, port)) if cap < IPV6_MIN_MTU && !ipv6.is_empty() => {
                    return Err(v.error(format_args!("vxlan port {port} leaves {name} an MTU of {cap}, below {IPV6_MIN_MTU}, the IPv6 minimum, and {name} has IPv6 addresses: raise the port's underlay mtu")));
                }
                Some((cap, _)) => cap,
                None => DEFAULT_MTU,
            },
            Some(mv) => {
                let mtu = mv.int("MTU", MIN_MTU.into(), MAX_MTU.into())?;
                if let Some((cap, port)) = vxlan_cap.filter(|&(c, _)| mtu > c) {
                    return Err(mv.bad(
                        mv.text()?,
                        format_args!("MTU {mtu} does not fit vxlan port {port}: at most {cap} (its underlay MTU less the VXLAN encapsulation)"),
                    ));
                }
                if mtu < IPV6_MIN_MTU && !ipv6.is_empty() {
                    return Err(mv.bad(
                        mv.text()?,
                        format_args!("MTU {mtu} is below {IPV6_MIN_MTU}, the IPv6 minimum, and {name} has IPv6 addresses"),
                    ));
                }
                mtu
            }
        };

        if !m.get("up").map(|v| v.bool()).transpose()?.unwrap_or(true) {
            self.down.push(id);
        }
        host.demux.insert((segment, mac), (self.name.clone(), name.clone(), mac_v.line()));
        self.iface_ids.insert(name.clone(), (id, name_v.line()));
        self.ifaces.push(IfaceConfig { name, port, vlan, mac, mtu, ipv4, ipv6 });
        Ok(())
    }

    /// An interface address: `10.0.0.1/24` is the address and its connected subnet.
    fn address(&mut self, v: &Value, iface: IfaceId) -> Result<IpNet> {
        let s = v.text()?;
        let net: IpNet = s.parse().map_err(|_| {
            if let Some(why) = bad_prefix_length(s) {
                v.bad(s, format_args!("{why}"))
            } else if s.parse::<IpAddr>().is_ok() {
                v.bad(
                    s,
                    format_args!(
                        "address {s} has no subnet length: write address/length, like 10.0.0.1/24"
                    ),
                )
            } else {
                v.bad(
                    s,
                    format_args!(
                        "invalid address {s:?}: expected address/length, like 10.0.0.1/24"
                    ),
                )
            }
        })?;
        let ip = net.addr();
        if !is_unicast(ip) {
            return Err(v.bad(s, format_args!("address {ip} is not a unicast address")));
        }
        if let Some(role) = reserved_role(ip, net) {
            return Err(
                v.bad(s, format_args!("address {ip} is the {role} address of {}", net.trunc()))
            );
        }
        // Link-local addresses are scoped to their link: one may sit on several interfaces, and
        // fe80::/64 is on every IPv6 interface anyway. Only a repeat on one interface is wrong.
        if is_link_local_v6(ip) {
            if let Some(line) = self.link_locals.insert((iface, ip), v.line()) {
                let message =
                    format!("duplicate address {ip} on this interface (first at line {line})");
                return Err(v.bad(s, message));
            }
            return Ok(net);
        }
        if let Some(&(other, line)) = self.addrs.get(&ip) {
            return Err(v.bad(
                s,
                format_args!(
                    "duplicate address {ip} in {} (first on {}, line {line})",
                    self.name,
                    self.iface_name(other)
                ),
            ));
        }
        // The same subnet on two interfaces would give one connected prefix two ways out.
        let subnet = net.trunc();
        if let Some(&(other, line)) = self.subnets.get(&subnet) {
            if other != iface {
                return Err(v.bad(
                    s,
                    format_args!(
                        "subnet {subnet} is already connected on {} (line {line}); a subnet belongs to one interface",
                        self.iface_name(other)
                    ),
                ));
            }
        }
        self.addrs.insert(ip, (iface, v.line()));
        self.subnets.entry(subnet).or_insert((iface, v.line()));
        Ok(net)
    }

    fn iface_name(&self, id: IfaceId) -> &str {
        self.ifaces.get(usize::from(id)).map_or("this interface", |i| i.name.as_str())
    }

    fn route(&self, v: &Value) -> Result<RouteConfig> {
        let m = v.map(ROUTE_KEYS)?;
        let prefix_v = m.req("prefix")?;
        let prefix = prefix(&prefix_v)?;
        if let Some((iface, line)) = self.subnets.get(&prefix) {
            return Err(prefix_v.bad(
                prefix_v.text()?,
                format_args!(
                    "{prefix} is the connected subnet of {} (line {line}); a static route to it would never be used",
                    self.iface_name(*iface)
                ),
            ));
        }
        let via = m.get("via");
        let iface = m.get("interface").map(|i| self.iface_ref(&i)).transpose()?;
        // `blackhole: false` says nothing, so it is the same as leaving the key out.
        let blackhole = match m.get("blackhole") {
            Some(b) if b.bool()? => Some(b),
            _ => None,
        };
        let target = match (via, iface, blackhole) {
            (None, None, None) => {
                return Err(v.error(format_args!(
                    "route to {prefix} needs one of via, interface or blackhole"
                )))
            }
            (Some(_), _, Some(b)) | (None, Some(_), Some(b)) => {
                return Err(b.error("a blackhole route takes no via or interface"))
            }
            (None, None, Some(_)) => RouteTarget::Blackhole,
            (None, Some(iface), None) => RouteTarget::Iface(iface),
            (Some(via), iface, None) => {
                RouteTarget::Via { gateway: self.gateway(&via, iface, Some(prefix))?, iface }
            }
        };
        Ok(RouteConfig { prefix, target, source: RouteSource::Static })
    }

    /// The interface an `interface:` field names.
    pub(super) fn iface_ref(&self, v: &Value) -> Result<IfaceId> {
        let s = v.text()?;
        match self.iface_ids.get(s) {
            Some(&(id, _)) => Ok(id),
            None => {
                let names: Vec<&str> = self.ifaces.iter().map(|i| i.name.as_str()).collect();
                Err(v.bad(
                    s,
                    format_args!(
                        "no interface named {s:?} in {} (interfaces: {})",
                        self.name,
                        list_or_none(&names)
                    ),
                ))
            }
        }
    }

    /// A gateway (`via:`), reached through `iface` if given, else through the interface whose
    /// connected subnet holds it. With `for_prefix`, its family must be the prefix's.
    pub(super) fn gateway(
        &self,
        v: &Value,
        iface: Option<IfaceId>,
        for_prefix: Option<IpNet>,
    ) -> Result<IpAddr> {
        let s = v.text()?;
        let gw: IpAddr = v.parse("gateway address")?;
        if let Some(prefix) = for_prefix {
            if gw.is_ipv4() != matches!(prefix, IpNet::V4(_)) {
                return Err(v.bad(
                    s,
                    format_args!(
                        "gateway {gw} is {} but the prefix {prefix} is {}",
                        family(gw),
                        family(prefix.addr())
                    ),
                ));
            }
        }
        if !is_unicast(gw) {
            return Err(v.bad(s, format_args!("gateway {gw} is not a unicast address")));
        }
        if let Some(&(own, _)) = self.addrs.get(&gw) {
            return Err(v.bad(
                s,
                format_args!(
                    "gateway {gw} is {}'s own address (on {})",
                    self.name,
                    self.iface_name(own)
                ),
            ));
        }
        // Every IPv6 interface is on fe80::/64, so a link-local gateway names its interface.
        if is_link_local_v6(gw) && iface.is_none() {
            return Err(v.bad(
                s,
                format_args!("gateway {gw} is link-local; name the interface with \"interface:\""),
            ));
        }
        let subnet = self.connected(gw);
        if let Some(net) = subnet {
            if let Some(role) = reserved_role(gw, net) {
                let message = format!("gateway {gw} is the {role} address of {net}");
                return Err(v.bad(s, message));
            }
        }
        if iface.is_some() || subnet.is_some() {
            return Ok(gw);
        }
        let subnets = self.subnets_of(gw.is_ipv4(), None);
        Err(v.bad(
            s,
            format_args!(
                "gateway {gw} is not on a connected subnet of {} ({}); name the interface with \"interface:\"",
                self.name,
                list_or_none(&subnets)
            ),
        ))
    }

    /// The connected subnet holding `ip`, if any (link-local ones are on every link: not
    /// evidence of which).
    fn connected(&self, ip: IpAddr) -> Option<IpNet> {
        if is_link_local_v6(ip) {
            return None;
        }
        self.ifaces.iter().find_map(|i| net_of(i, ip))
    }

    /// Connected subnets of one family, in file order, of one interface or all.
    fn subnets_of(&self, v4: bool, iface: Option<IfaceId>) -> Vec<IpNet> {
        let mut out: Vec<IpNet> = Vec::new();
        for (i, cfg) in self.ifaces.iter().enumerate() {
            if iface.is_some_and(|id| usize::from(id) != i) {
                continue;
            }
            let nets: Vec<IpNet> = if v4 {
                cfg.ipv4.iter().map(|n| IpNet::V4(n.trunc())).collect()
            } else {
                cfg.ipv6.iter().map(|n| IpNet::V6(n.trunc())).collect()
            };
            for n in nets {
                if !is_link_local_v6(n.addr()) && !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }

    fn neighbor(&self, v: &Value) -> Result<NeighborConfig> {
        let m = v.map(NEIGHBOR_KEYS)?;
        let iface = self.iface_ref(&m.req("interface")?)?;
        let iface_name = self.iface_name(iface);
        let av = m.req("address")?;
        let s = av.text()?;
        let ip: IpAddr = av.parse("IP address")?;
        if !is_unicast(ip) {
            return Err(av.bad(s, format_args!("neighbor {ip} is not a unicast address")));
        }
        if let Some(&(own, _)) = self.addrs.get(&ip) {
            return Err(av.bad(
                s,
                format_args!(
                    "neighbor {ip} is {}'s own address (on {})",
                    self.name,
                    self.iface_name(own)
                ),
            ));
        }
        // Link-local neighbors are on every IPv6 interface; others must be on one of its
        // subnets, which also checks the family: an interface without IPv4 has no IPv4 neighbors.
        if !is_link_local_v6(ip) {
            match net_of(&self.ifaces[usize::from(iface)], ip) {
                Some(net) => {
                    if let Some(role) = reserved_role(ip, net) {
                        return Err(
                            av.bad(s, format_args!("neighbor {ip} is the {role} address of {net}"))
                        );
                    }
                }
                None => {
                    let nets = self.subnets_of(ip.is_ipv4(), Some(iface));
                    let on = if nets.is_empty() {
                        format!("{iface_name} has no {} subnet", family(ip))
                    } else {
                        list_or_none(&nets)
                    };
                    return Err(av.bad(
                        s,
                        format_args!("neighbor {ip} is not on a subnet of {iface_name} ({on})"),
                    ));
                }
            }
        }
        let mac = unicast_mac(&m.req("mac")?)?;
        Ok(NeighborConfig { iface, ip, mac })
    }
}

fn limits(v: &Value) -> Result<VrLimits> {
    let keys: Vec<&str> = LIMITS.iter().map(|l| l.0).collect();
    let m = v.map(&keys)?;
    let mut limits = VrLimits::default();
    for &(key, lo, hi, set) in LIMITS {
        if let Some(lv) = m.get(key) {
            set(&mut limits, lv.int(key, lo, hi)?);
        }
    }
    if limits.queue_total < limits.queue_per_neighbor {
        let blame = m.get("queue_total").or_else(|| m.get("queue_per_neighbor"));
        if let Some(b) = blame {
            return Err(b.bad(
                b.text()?,
                format_args!(
                    "queue_total {} is smaller than queue_per_neighbor {}",
                    limits.queue_total, limits.queue_per_neighbor
                ),
            ));
        }
    }
    Ok(limits)
}

/// What is wrong with `ADDRESS/LENGTH` whose address is valid but whose length is not (the
/// address parser only says "invalid IP address syntax"); `None` for anything else.
pub fn bad_prefix_length(s: &str) -> Option<String> {
    let (addr, len) = s.split_once('/')?;
    let ip: IpAddr = addr.parse().ok()?;
    let (family, max) = if ip.is_ipv4() { ("IPv4", 32) } else { ("IPv6", 128) };
    match len.parse::<u32>() {
        Ok(n) if n > max => {
            Some(format!("{s}: prefix length {n} is out of range for {family} (0 to {max})"))
        }
        Ok(_) => None,
        Err(_) => Some(format!("{s}: prefix length {len:?} is not a number (0 to {max})")),
    }
}

/// A route prefix: host bits must be zero, so a typo cannot silently widen or move it.
pub(super) fn prefix(v: &Value) -> Result<IpNet> {
    let s = v.text()?;
    let net: IpNet = match s.parse() {
        Ok(net) => net,
        Err(_) => {
            if let Some(why) = bad_prefix_length(s) {
                return Err(v.bad(s, format_args!("{why}")));
            }
            return Err(match s.parse::<IpAddr>() {
                Ok(ip) => v.bad(
                    s,
                    format_args!(
                        "prefix {s} has no length; for one host write {}",
                        IpNet::from(ip)
                    ),
                ),
                Err(_) => v.bad(s, format_args!("invalid prefix {s:?}")),
            });
        }
    };
    if net.trunc() != net {
        return Err(
            v.bad(s, format_args!("prefix {s} has host bits set; did you mean {}?", net.trunc()))
        );
    }
    Ok(net)
}

/// A MAC an interface or neighbor may own: valid, unicast, not all-zero.
pub(super) fn unicast_mac(v: &Value) -> Result<MacAddr> {
    let s = v.text()?;
    let mac: MacAddr =
        s.parse().map_err(|_| v.bad(s, format_args!("invalid MAC address {s:?}")))?;
    if mac.is_multicast() {
        return Err(v.bad(
            s,
            format_args!("MAC address {mac} is multicast; a unicast address is required"),
        ));
    }
    if mac == MacAddr::default() {
        return Err(v.bad(s, "MAC address 00:00:00:00:00:00 is not a valid station address"));
    }
    Ok(mac)
}

/// The subnet of `iface` holding `ip`, host bits cleared.
fn net_of(iface: &IfaceConfig, ip: IpAddr) -> Option<IpNet> {
    match ip {
        IpAddr::V4(a) => iface.ipv4.iter().find(|n| n.contains(&a)).map(|n| IpNet::V4(n.trunc())),
        IpAddr::V6(a) => iface.ipv6.iter().find(|n| n.contains(&a)).map(|n| IpNet::V6(n.trunc())),
    }
}

/// Whether `ip` may be an interface address, gateway or neighbor.
fn is_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            !(a.is_unspecified() || a.is_multicast() || a.is_broadcast() || a.is_loopback())
        }
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast() || a.is_loopback()),
    }
}

pub(super) fn is_link_local_v6(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(a) if a.is_unicast_link_local())
}

/// Whether `ip` is the network or broadcast address of an IPv4 subnet that has them (/30 and
/// shorter; /31 and /32 use every address, RFC 3021).
fn reserved_role(ip: IpAddr, net: IpNet) -> Option<&'static str> {
    match (ip, net) {
        (IpAddr::V4(a), IpNet::V4(n)) if n.prefix_len() < 31 => {
            if a == n.network() {
                Some("network")
            } else if a == n.broadcast() {
                Some("broadcast")
            } else {
                None
            }
        }
        _ => None,
    }
}

pub(super) fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}
