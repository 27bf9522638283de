//! `hosts:`: Linux hosts `routeplex up` makes for a topology, each a network namespace joined
//! to a routeplex port by a veth pair.

use std::net::IpAddr;

use ipnet::IpNet;

use super::yaml::{Result, Value};
use super::{name, Host};

const HOST_KEYS: &[&str] = &["name", "addresses", "gateways", "mtu"];

/// One host: a network namespace with one interface, `eth0`, whose other end routeplex drives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    /// The namespace's name (`ip netns exec NAME ...`).
    pub name: String,
    /// Addresses of eth0, with their subnets.
    pub addresses: Vec<IpNet>,
    /// Default gateways, at most one per family, each on a subnet of `addresses`.
    pub gateways: Vec<IpAddr>,
    /// MTU of both ends of the veth pair.
    pub mtu: u16,
}

/// The name of a host's interface inside its namespace.
pub const HOST_IFNAME: &str = "eth0";

/// A Linux interface name: 1 to 15 bytes, no `/`, no whitespace, not `.` or `..`.
pub(super) fn is_ifname(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s != "."
        && s != ".."
        && !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

/// A network namespace name as `ip netns` keeps them under /run/netns: up to 32 letters,
/// digits, `-`, `_` or `.`, and not `.` or `..`.
pub(super) fn is_ns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s != "."
        && s != ".."
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

/// Reads one host.
pub(super) fn host(v: &Value, host: &mut Host) -> Result<HostSpec> {
    let m = v.map(HOST_KEYS)?;
    let name_v = m.req("name")?;
    let name = name(&name_v)?;
    // The name becomes a file under /run/netns and appears in `ip netns` commands.
    if !is_ns_name(&name) {
        return Err(name_v.bad(
            &name,
            format_args!("invalid host name {name:?}: use up to 32 letters, digits, '-', '_' or '.' (it names a network namespace)"),
        ));
    }
    if let Some(&(_, line)) = host.host_ids.get(&name) {
        return Err(
            name_v.bad(&name, format_args!("duplicate host name {name:?} (first at line {line})"))
        );
    }
    let mut addresses = Vec::new();
    for av in m.list("addresses")? {
        let s = av.text()?;
        let net: IpNet = s.parse().map_err(|_| {
            av.bad(
                s,
                format_args!("invalid address {s:?}: expected address/length, like 10.0.0.2/24"),
            )
        })?;
        if addresses.iter().any(|a: &IpNet| a.addr() == net.addr()) {
            return Err(av.bad(s, format_args!("duplicate address {}", net.addr())));
        }
        addresses.push(net);
    }
    let mut gateways: Vec<IpAddr> = Vec::new();
    for gv in m.list("gateways")? {
        let s = gv.text()?;
        let gw: IpAddr =
            s.parse().map_err(|_| gv.bad(s, format_args!("invalid gateway address {s:?}")))?;
        if gateways.iter().any(|g| g.is_ipv4() == gw.is_ipv4()) {
            return Err(gv.bad(
                s,
                format_args!(
                    "a second IPv{} gateway: a host has one default route per family",
                    if gw.is_ipv4() { 4 } else { 6 }
                ),
            ));
        }
        if !addresses.iter().any(|a| a.contains(&gw)) {
            return Err(gv.bad(s, format_args!("gateway {gw} is on none of {name}'s subnets")));
        }
        gateways.push(gw);
    }
    let mtu = match m.get("mtu") {
        Some(v) => v.int::<u16>("MTU", 68, 9000)?,
        None => 1500,
    };
    host.host_ids.insert(name.clone(), (host.host_ids.len(), name_v.line()));
    Ok(HostSpec { name, addresses, gateways, mtu })
}
