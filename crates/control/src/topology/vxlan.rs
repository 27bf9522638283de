//! `kind: vxlan` ports: one VXLAN segment (one VNI) to other hosts over this host's underlay
//! address, encapsulated by routeplex (`ports::vxlan`).
//!
//! ```yaml
//! - name: vx42
//!   kind: vxlan
//!   vni: 42                    # 1..=16777215
//!   local: 192.0.2.1           # this host's underlay address (the socket binds to it)
//!   remotes: [192.0.2.2, 192.0.2.3]   # the other hosts' underlay addresses, same family
//!   dstport: 4789              # optional, default 4789 (IANA)
//!   dev: eth1                  # optional: bind to this underlay interface
//!   netns: under               # optional: the underlay is in /run/netns/under
//!   mtu: 1500                  # optional: the underlay's MTU, default 1500
//! ```
//!
//! MTU rule: a frame's IP MTU loses 50 bytes to VXLAN on an IPv4 underlay and 70 on IPv6
//! (`ports::vxlan::OVERHEAD_V4`/`_V6`), so an interface on a vxlan port, or on a switch with a
//! vxlan member, gets the underlay MTU minus that as its default MTU, and a configured MTU
//! above it is refused. Two ports with the same VNI on one underlay address and UDP port (in
//! one namespace) are refused: the address demultiplexes by VNI.

use std::collections::HashMap;
use std::net::IpAddr;

use super::hosts;
use super::yaml::{Map, Result};

/// Keys a vxlan port takes.
pub(super) const VXLAN_KEYS: &[&str] =
    &["name", "kind", "vni", "local", "remotes", "dstport", "dev", "netns", "mtu", "burst"];

const DEFAULT_UNDERLAY_MTU: u16 = 1500;

/// A vxlan port's settings (see `ports::vxlan::VxlanOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VxlanSpec {
    /// The segment's VNI, 1..=2^24-1.
    pub vni: u32,
    /// This host's underlay address.
    pub local: IpAddr,
    /// The other hosts' underlay addresses (at configuration time; changeable while running).
    pub remotes: Vec<IpAddr>,
    /// The UDP port, ours and the remotes'.
    pub dstport: u16,
    /// The underlay interface the socket is bound to, if any.
    pub dev: Option<String>,
    /// The namespace the underlay is in (`/run/netns/NAME`), if not routeplex's own.
    pub netns: Option<String>,
    /// The underlay's MTU.
    pub underlay_mtu: u16,
}

impl VxlanSpec {
    /// The largest IP MTU an interface on this port can have: the underlay's minus the
    /// encapsulation (50 bytes on IPv4, 70 on IPv6).
    pub fn max_mtu(&self) -> u16 {
        let overhead = if self.local.is_ipv4() {
            ports::vxlan::OVERHEAD_V4
        } else {
            ports::vxlan::OVERHEAD_V6
        };
        self.underlay_mtu.saturating_sub(overhead as u16)
    }

    /// The options to open the port with.
    pub fn options(&self) -> ports::vxlan::VxlanOptions {
        ports::vxlan::VxlanOptions {
            vni: self.vni,
            local: self.local,
            dstport: self.dstport,
            remotes: self.remotes.clone(),
            dev: self.dev.clone(),
            netns: self.netns.as_ref().map(|n| std::path::Path::new("/run/netns").join(n)),
        }
    }
}

/// Who claimed a VNI on an underlay address first: `(netns, local, dstport, vni)` to line.
pub(super) type VniClaims = HashMap<(Option<String>, IpAddr, u16, u32), usize>;

/// Reads a vxlan port's keys (the caller checked the key set).
pub(super) fn vxlan_spec(m: &Map, claims: &mut VniClaims) -> Result<VxlanSpec> {
    let vv = m.req("vni")?;
    let vni = vv.int::<u32>("VNI", 1, ports::vxlan::VNI_MAX.into())?;
    let lv = m.req("local")?;
    let ls = lv.text()?;
    let local: IpAddr = ls.parse().map_err(|_| {
        lv.bad(ls, format_args!("invalid local address {ls:?}: expected an IPv4 or IPv6 address"))
    })?;
    if local.is_unspecified() || local.is_multicast() {
        return Err(lv.bad(ls, format_args!("local address {local} is not a unicast address")));
    }
    let mut remotes: Vec<IpAddr> = Vec::new();
    let rvs = m.list("remotes")?;
    if rvs.len() > ports::vxlan::MAX_REMOTES {
        return Err(m.req("remotes")?.error(format_args!(
            "{} remotes, at most {}",
            rvs.len(),
            ports::vxlan::MAX_REMOTES
        )));
    }
    for rv in rvs {
        let s = rv.text()?;
        let r: IpAddr = s.parse().map_err(|_| {
            rv.bad(s, format_args!("invalid remote address {s:?}: expected an IP address"))
        })?;
        let why = if r.is_ipv4() != local.is_ipv4() {
            Some(format!("remote {r} is not of local {local}'s address family"))
        } else if r.is_unspecified() || r.is_multicast() {
            Some(format!("remote {r} is not a unicast address"))
        } else if r == local {
            Some(format!("remote {r} is the local address"))
        } else if remotes.contains(&r) {
            Some(format!("duplicate remote {r}"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(rv.bad(s, why));
        }
        remotes.push(r);
    }
    let dstport = m
        .get("dstport")
        .map(|v| v.int::<u16>("UDP port", 1, 65535))
        .transpose()?
        .unwrap_or(ports::vxlan::DEFAULT_DSTPORT);
    let dev = match m.get("dev") {
        None => None,
        Some(dv) => {
            let d = dv.text()?;
            if !hosts::is_ifname(d) {
                return Err(dv.bad(
                    d,
                    format_args!(
                        "invalid interface name {d:?}: 1 to 15 bytes, no '/', ':' or spaces"
                    ),
                ));
            }
            Some(d.to_string())
        }
    };
    let netns = match m.get("netns") {
        None => None,
        Some(nv) => {
            let n = nv.text()?;
            if !hosts::is_ns_name(n) {
                return Err(nv.bad(n, format_args!("invalid namespace name {n:?}: letters, digits, - _ . (32 at most), not . or ..")));
            }
            Some(n.to_string())
        }
    };
    let underlay_mtu = match m.get("mtu") {
        None => DEFAULT_UNDERLAY_MTU,
        Some(mv) => {
            // The smallest underlay that still carries IPv4's 68-byte minimum inside.
            let overhead =
                if local.is_ipv4() { ports::vxlan::OVERHEAD_V4 } else { ports::vxlan::OVERHEAD_V6 };
            let min = 68 + overhead as u64;
            mv.int::<u16>("underlay MTU", min, 65535)?
        }
    };
    if let Some(line) = claims.insert((netns.clone(), local, dstport, vni), vv.line()) {
        return Err(vv.bad(
            vv.text()?,
            format_args!("VNI {vni} on {local} port {dstport} is already a port's (line {line}): the address demultiplexes by VNI"),
        ));
    }
    Ok(VxlanSpec { vni, local, remotes, dstport, dev, netns, underlay_mtu })
}

#[cfg(test)]
mod tests {
    use super::super::{PortKind, Topology, TopologyError};
    use super::*;

    const PORT: &str = "ports:\n  - { name: vx, kind: vxlan, vni: 42, local: 192.0.2.1, remotes: [192.0.2.2, 192.0.2.3] }\n";

    fn parse(text: &str) -> std::result::Result<Topology, TopologyError> {
        Topology::parse(text, "lab.yaml", std::path::Path::new("/nonexistent"))
    }

    /// The error for `text`, as `LINE:COL: FIELD: MESSAGE` (after the file name).
    #[track_caller]
    fn error(text: &str) -> String {
        let e = parse(text).err().unwrap_or_else(|| panic!("accepted:\n{text}"));
        e.to_string().strip_prefix("lab.yaml:").expect("file named").to_string()
    }

    /// `LINE:COL` of the first `needle` in line `line` of `text`.
    fn at(text: &str, line: usize, needle: &str) -> String {
        let l = text.lines().nth(line - 1).expect("line");
        format!("{line}:{}", l.find(needle).expect("needle in line") + 1)
    }

    /// Asserts `text` is refused at the first `needle` of `line` with `rest` (field: message).
    #[track_caller]
    fn refuses(text: &str, line: usize, needle: &str, rest: &str) {
        assert_eq!(error(text), format!("{}: {rest}", at(text, line, needle)));
    }

    fn port(keys: &str) -> String {
        format!("ports:\n  - {{ name: vx, kind: vxlan, {keys} }}\n")
    }

    fn vr(port_yaml: &str, iface_extra: &str) -> String {
        format!("{port_yaml}vrs:\n  - name: r\n    interfaces:\n      - {{ name: e0, port: vx, mac: 02:00:00:00:00:01, addresses: [10.0.0.1/24]{iface_extra} }}\n")
    }

    #[test]
    fn a_vxlan_port_reads_every_key() {
        let t = parse(PORT).unwrap();
        let PortKind::Vxlan(x) = &t.ports[0].kind else { panic!("{:?}", t.ports[0].kind) };
        assert_eq!(x.vni, 42);
        assert_eq!(x.local, "192.0.2.1".parse::<IpAddr>().unwrap());
        assert_eq!(x.remotes.len(), 2);
        assert_eq!((x.dstport, x.underlay_mtu, x.max_mtu()), (4789, 1500, 1450));
        assert_eq!((x.dev.as_deref(), x.netns.as_deref()), (None, None));
        let t = parse(&port("vni: 16777215, local: \"2001:db8::1\", remotes: [\"2001:db8::2\"], dstport: 8472, dev: eth1, netns: under, mtu: 9000")).unwrap();
        let PortKind::Vxlan(x) = &t.ports[0].kind else { panic!() };
        assert_eq!((x.vni, x.dstport, x.max_mtu()), (16777215, 8472, 9000 - 70));
        let o = x.options();
        assert_eq!(o.netns.as_deref(), Some(std::path::Path::new("/run/netns/under")));
        assert_eq!(o.dev.as_deref(), Some("eth1"));
        assert!(
            t.summary().contains(
                "VNI 16777215 from 2001:db8::1 port 8472 to [2001:db8::2], MTU 8930 inside"
            ),
            "{}",
            t.summary()
        );
    }

    #[test]
    fn bad_values_name_line_column_field_and_value() {
        let t = port("vni: 0, local: 192.0.2.1");
        refuses(&t, 2, "0,", "ports[0].vni: VNI 0 is out of range 1..=16777215");
        let t = port("vni: 16777216, local: 192.0.2.1");
        refuses(&t, 2, "16777216", "ports[0].vni: VNI 16777216 is out of range 1..=16777215");
        let t = port("vni: 1, local: 192.0.2.300");
        refuses(&t, 2, "192.0.2.300", "ports[0].local: invalid local address \"192.0.2.300\": expected an IPv4 or IPv6 address");
        let t = port("vni: 1, local: 0.0.0.0");
        refuses(&t, 2, "0.0.0.0", "ports[0].local: local address 0.0.0.0 is not a unicast address");
        let t = port("vni: 1, local: 192.0.2.1, remotes: [192.0.2.2, \"2001:db8::2\"]");
        refuses(
            &t,
            2,
            "\"2001",
            "ports[0].remotes[1]: remote 2001:db8::2 is not of local 192.0.2.1's address family",
        );
        let t = port("vni: 1, local: 192.0.2.1, remotes: [192.0.2.1]");
        refuses(&t, 2, "192.0.2.1]", "ports[0].remotes[0]: remote 192.0.2.1 is the local address");
        let t = port("vni: 1, local: 192.0.2.1, remotes: [192.0.2.2, 192.0.2.2]");
        refuses(&t, 2, "192.0.2.2]", "ports[0].remotes[1]: duplicate remote 192.0.2.2");
        let t = port("vni: 1, local: 192.0.2.1, remotes: [239.1.1.1]");
        refuses(&t, 2, "239", "ports[0].remotes[0]: remote 239.1.1.1 is not a unicast address");
        let e = error(&port("vni: 1, local: 192.0.2.1, mtu: 100"));
        assert!(e.contains("ports[0].mtu: ") && e.contains("100"), "{e}");
        let e = error(&port("vni: 1, local: 192.0.2.1, dstport: 0"));
        assert!(e.contains("ports[0].dstport: "), "{e}");
        let e = error(&port("vni: 1, local: 192.0.2.1, ring: 8"));
        assert!(e.contains("ring"), "{e}");
        let t = format!("{PORT}  - {{ name: vy, kind: vxlan, vni: 42, local: 192.0.2.1 }}\n");
        refuses(&t, 3, "42", "ports[1].vni: VNI 42 on 192.0.2.1 port 4789 is already a port's (line 2): the address demultiplexes by VNI");
        // The same VNI on another port number or address is another segment.
        parse(&format!("{PORT}  - {{ name: vy, kind: vxlan, vni: 42, local: 192.0.2.1, dstport: 4790 }}\n  - {{ name: vz, kind: vxlan, vni: 42, local: 192.0.2.9 }}\n")).unwrap();
    }

    #[test]
    fn interfaces_on_vxlan_get_the_underlay_mtu_less_the_overhead() {
        let t = parse(&vr(PORT, "")).unwrap();
        assert_eq!(t.vrs[0].interfaces[0].mtu, 1450);
        let t = parse(&vr(PORT, ", mtu: 1400")).unwrap();
        assert_eq!(t.vrs[0].interfaces[0].mtu, 1400);
        let text = vr(PORT, ", mtu: 1500");
        refuses(&text, 6, "1500", "vrs[0].interfaces[0].mtu: MTU 1500 does not fit vxlan port vx: at most 1450 (its underlay MTU less the VXLAN encapsulation)");
        let jumbo = port("vni: 1, local: 192.0.2.1, mtu: 9050");
        assert_eq!(parse(&vr(&jumbo, "")).unwrap().vrs[0].interfaces[0].mtu, 9000);
        // A tagged interface loses the tag's 4 bytes too.
        assert_eq!(parse(&vr(PORT, ", vlan: 7")).unwrap().vrs[0].interfaces[0].mtu, 1446);
        // On a switch with a vxlan member.
        let sw = format!("{PORT}switches:\n  - name: lan\n    members: [{{ port: vx }}]\nvrs:\n  - name: r\n    interfaces:\n      - {{ name: e0, switch: lan, mac: 02:00:00:00:00:01, addresses: [10.0.0.1/24] }}\n");
        assert_eq!(parse(&sw).unwrap().vrs[0].interfaces[0].mtu, 1450);
        let sw = sw.replace("10.0.0.1/24] }", "10.0.0.1/24], mtu: 1451 }");
        assert!(error(&sw).contains("MTU 1451 does not fit vxlan port vx: at most 1450"));
        // IPv6 needs 1280 inside.
        let small = port("vni: 1, local: 192.0.2.1, mtu: 1300");
        let e = error(&vr(&small, "").replace("10.0.0.1/24", "10.0.0.1/24, \"2001:db8::1/64\""));
        assert!(e.contains("leaves e0 an MTU of 1250, below 1280"), "{e}");
    }
}
