//! `switches:`: learning switches (bridge domains), their member ports and static stations.

use std::collections::HashMap;

use dataplane::config::PortId;
use dataplane::{
    MemberConfig, MemberMode, StaticMac, SwitchConfig, DEFAULT_GROUPS, DEFAULT_GROUP_TIMEOUT_MS,
};

use super::yaml::{Result, Value};
use super::{name, Host};

const SWITCH_KEYS: &[&str] = &[
    "name",
    "members",
    "static_macs",
    "mac_limit",
    "aging_s",
    "snooping",
    "groups",
    "group_timeout_s",
];
const MEMBER_KEYS: &[&str] = &["port", "vlan", "trunk", "native"];
const STATIC_KEYS: &[&str] = &["mac", "port", "vlan"];
/// The VLAN of an access member that names none (802.1Q's default PVID).
pub(super) const DEFAULT_VLAN: u16 = 1;
const DEFAULT_MAC_LIMIT: u32 = 4096;
const DEFAULT_AGING_S: u64 = 300;

/// Reads one switch. Its member ports become unavailable to VR interfaces (a port is switched
/// or demuxed, never both); VR interfaces join it later with `switch:`.
pub(super) fn switch(v: &Value, host: &mut Host) -> Result<SwitchConfig> {
    let m = v.map(SWITCH_KEYS)?;
    let name_v = m.req("name")?;
    let name = name(&name_v)?;
    if let Some(&(_, line)) = host.switch_ids.get(&name) {
        return Err(name_v
            .bad(&name, format_args!("duplicate switch name {name:?} (first at line {line})")));
    }
    let mut members: Vec<MemberConfig> = Vec::new();
    let mut by_port: HashMap<PortId, usize> = HashMap::new();
    for mv in m.list("members")? {
        let mm = mv.map(MEMBER_KEYS)?;
        let port_v = mm.req("port")?;
        let port = host.port_ref(&port_v)?;
        if let Some((sw, line)) = host.switched_ports.get(&port) {
            return Err(port_v.bad(
                port_v.text()?,
                format_args!(
                    "port {} is already a member of switch {sw} (line {line})",
                    port_v.text()?
                ),
            ));
        }
        let vlan = mm.get("vlan").map(|v| v.int::<u16>("VLAN id", 1, 4094)).transpose()?;
        let trunk = match mm.get("trunk") {
            Some(tv) => Some(
                tv.list()?
                    .iter()
                    .map(|x| x.int::<u16>("VLAN id", 1, 4094))
                    .collect::<Result<Vec<u16>>>()?,
            ),
            None => None,
        };
        let native = mm.get("native").map(|v| v.int::<u16>("VLAN id", 1, 4094)).transpose()?;
        let mode = match (vlan, trunk, native) {
            (_, Some(_), _) | (_, _, Some(_)) if vlan.is_some() => {
                return Err(mv.error(
                    "a member is an access port (vlan:) or a trunk (trunk:, native:), not both",
                ))
            }
            (None, Some(vlans), native) => {
                if vlans.is_empty() && native.is_none() {
                    return Err(
                        mv.error("a trunk needs at least one VLAN in trunk: or a native VLAN")
                    );
                }
                MemberMode::Trunk { vlans, native }
            }
            (None, None, Some(n)) => MemberMode::Trunk { vlans: Vec::new(), native: Some(n) },
            (v, None, None) => MemberMode::Access { vlan: v.unwrap_or(DEFAULT_VLAN) },
            _ => unreachable!("vlan with trunk or native is refused above"),
        };
        host.switched_ports.insert(port, (name.clone(), mv.line()));
        by_port.insert(port, members.len());
        members.push(MemberConfig { port, mode });
    }
    let mut statics = Vec::new();
    for sv in m.list("static_macs")? {
        let sm = sv.map(STATIC_KEYS)?;
        let mac_v = sm.req("mac")?;
        let mac = super::vr::unicast_mac(&mac_v)?;
        let port_v = sm.req("port")?;
        let port = host.port_ref(&port_v)?;
        let Some(&member) = by_port.get(&port) else {
            return Err(port_v.bad(
                port_v.text()?,
                format_args!("port {} is not a member of switch {name}", port_v.text()?),
            ));
        };
        let carried: Vec<u16> = match &members[member].mode {
            MemberMode::Access { vlan } => vec![*vlan],
            MemberMode::Trunk { vlans, native } => vlans.iter().copied().chain(*native).collect(),
        };
        let vlan = match sm.get("vlan") {
            Some(vv) => {
                let vlan = vv.int::<u16>("VLAN id", 1, 4094)?;
                if !carried.contains(&vlan) {
                    return Err(vv.bad(
                        vv.text()?,
                        format_args!(
                            "port {} does not carry VLAN {vlan} in switch {name}",
                            port_v.text()?
                        ),
                    ));
                }
                vlan
            }
            None if carried.len() == 1 => carried[0],
            None => return Err(sv.error("the port carries several VLANs: say which with vlan:")),
        };
        if statics.iter().any(|s: &StaticMac| s.mac == mac && s.vlan == vlan) {
            return Err(
                mac_v.bad(mac_v.text()?, format_args!("duplicate static MAC {mac} in VLAN {vlan}"))
            );
        }
        statics.push(StaticMac { vlan, mac, member: member as u16 });
    }
    let mac_limit =
        m.get("mac_limit").map(|v| v.int::<u32>("MAC limit", 1, 1_000_000)).transpose()?;
    let aging_s = m.get("aging_s").map(|v| v.int::<u64>("aging time", 1, 86_400)).transpose()?;
    let snooping = m.get("snooping").map(|v| v.bool()).transpose()?;
    let groups = m.get("groups").map(|v| v.int::<u32>("group limit", 1, 65_536)).transpose()?;
    let group_timeout_s =
        m.get("group_timeout_s").map(|v| v.int::<u64>("group timeout", 1, 86_400)).transpose()?;
    host.switch_ids.insert(name.clone(), (host.switch_ids.len(), name_v.line()));
    Ok(SwitchConfig {
        name,
        members,
        statics,
        mac_limit: mac_limit.unwrap_or(DEFAULT_MAC_LIMIT),
        aging_ms: aging_s.unwrap_or(DEFAULT_AGING_S) * 1000,
        snooping: snooping.unwrap_or(true),
        groups: groups.unwrap_or(DEFAULT_GROUPS),
        group_timeout_ms: group_timeout_s.map_or(DEFAULT_GROUP_TIMEOUT_MS, |s| s * 1000),
    })
}
