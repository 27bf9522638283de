//! Routes through the API: add, replace, delete, list.

use dataplane::config::{RouteConfig, RouteTarget};
use dataplane::{RouteOp, RouteSource};
use ipnet::IpNet;

use super::vrs::iface_index;
use crate::api::{self, Route, RouteList, RouteRow, RoutesApplied};
use crate::{ControlError, Node};

/// Routes a list gives when the request names no limit.
const LIST_LIMIT: usize = 10_000;

impl Node {
    /// `route_add` (`op` [`RouteOp::Add`]) or `route_replace` ([`RouteOp::Replace`]).
    pub(super) fn route_change(
        &mut self,
        vr: String,
        routes: &[Route],
        op: fn(RouteConfig) -> RouteOp,
    ) -> Result<RoutesApplied, ControlError> {
        if routes.is_empty() {
            return Err(ControlError::BadRequest(format!("vr {vr}: no routes given")));
        }
        let ops: Vec<RouteOp> = self.route_configs(&vr, routes)?.into_iter().map(op).collect();
        applied(self.route_ops(&vr, &ops)?)
    }

    pub(super) fn route_delete(
        &mut self,
        vr: &str,
        prefixes: Vec<IpNet>,
    ) -> Result<RoutesApplied, ControlError> {
        let ops: Vec<RouteOp> = prefixes
            .into_iter()
            .map(|prefix| RouteOp::Delete { prefix, source: RouteSource::Api })
            .collect();
        applied(self.route_ops(vr, &ops)?)
    }

    /// VR `vr`'s routes (of `source`, or all), at most `limit`, best first per prefix.
    pub(super) fn route_list(
        &self,
        vr: String,
        source: Option<String>,
        limit: Option<usize>,
    ) -> Result<RouteList, ControlError> {
        let table = self.tables.get(&vr).ok_or_else(|| ControlError::NoSuchVr(vr.clone()))?;
        let source = match source.as_deref() {
            None => None,
            Some(s) => {
                Some(RouteSource::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| {
                    ControlError::BadRequest(format!(
                        "source {s:?}: one of local, connected, static, api, kernel, table"
                    ))
                })?)
            }
        };
        let cfg = self.vr_config(&vr)?;
        let ifname = |i: u16| Some(cfg.interfaces[usize::from(i)].name.clone());
        let routes = table
            .routes(source, limit.unwrap_or(LIST_LIMIT))
            .into_iter()
            .map(|r| {
                let mut row = RouteRow {
                    prefix: r.prefix,
                    source: r.source.name().into(),
                    best: r.best,
                    via: None,
                    interface: None,
                    blackhole: false,
                    local: false,
                };
                match r.target {
                    RouteTarget::Via { gateway, iface } => {
                        row.via = Some(gateway);
                        row.interface = iface.and_then(ifname);
                    }
                    RouteTarget::Iface(i) => row.interface = ifname(i),
                    // A local address's route is kept as a blackhole target: the VR answers
                    // what it takes, forwarding nothing.
                    RouteTarget::Blackhole if r.source == RouteSource::Local => row.local = true,
                    RouteTarget::Blackhole => row.blackhole = true,
                }
                row
            })
            .collect();
        Ok(RouteList { vr, routes })
    }

    /// What VR `vr`'s published FIB does with a packet to each of `addresses`: one row per
    /// address, `forward` as text (`via G interface I`, `interface I`, `local`, `blackhole`,
    /// `broadcast`, `unreachable`, `prohibit`, `none`; a multipath route as `multipath [..]`
    /// of its buckets' next hops).
    pub(super) fn route_lookup(
        &self,
        vr: String,
        addresses: &[std::net::IpAddr],
    ) -> Result<api::RouteLookups, ControlError> {
        if addresses.len() > crate::api::MAX_LOOKUPS {
            return Err(ControlError::Invalid(format!(
                "route_lookup: {} addresses, at most {}",
                addresses.len(),
                crate::api::MAX_LOOKUPS
            )));
        }
        let table = self.tables.get(&vr).ok_or_else(|| ControlError::NoSuchVr(vr.clone()))?;
        let cfg = self.vr_config(&vr)?;
        let ifname = |i: u16| cfg.interfaces.get(usize::from(i)).map_or("?", |f| f.name.as_str());
        let one = |a: dataplane::Adj| -> String {
            use dataplane::Adj;
            match a {
                Adj::None => "none".into(),
                Adj::Local => "local".into(),
                Adj::Blackhole => "blackhole".into(),
                Adj::Broadcast => "broadcast".into(),
                Adj::Unreachable => "unreachable".into(),
                Adj::Prohibit => "prohibit".into(),
                Adj::Glean(i) => format!("interface {}", ifname(i)),
                Adj::Via { iface, gw } => {
                    let gw = std::net::Ipv6Addr::from(gw);
                    let gw = gw.to_ipv4_mapped().map_or(gw.to_string(), |v4| v4.to_string());
                    format!("via {gw} interface {}", ifname(iface))
                }
                Adj::Multi(_) => "multipath".into(),
            }
        };
        let lookups = addresses
            .iter()
            .map(|&a| {
                let forward = match table.lookup(a) {
                    dataplane::Adj::Multi(p) => {
                        let hops: Vec<String> =
                            p.buckets().iter().map(|&nh| one(table.adj_at(nh))).collect();
                        format!("multipath [{}]", hops.join(", "))
                    }
                    adj => one(adj),
                };
                api::Lookup { address: a, forward }
            })
            .collect();
        Ok(api::RouteLookups { vr, lookups })
    }

    /// API routes as operations of VR `vr`.
    pub fn route_configs(
        &self,
        vr: &str,
        routes: &[Route],
    ) -> Result<Vec<RouteConfig>, ControlError> {
        let cfg = self.vr_config(vr)?;
        routes
            .iter()
            .map(|r| {
                let iface = r.interface.as_deref().map(|n| iface_index(cfg, n)).transpose()?;
                let target = match (r.via, iface, r.blackhole) {
                    (Some(gateway), iface, false) => RouteTarget::Via { gateway, iface },
                    (None, Some(i), false) => RouteTarget::Iface(i),
                    (None, None, true) => RouteTarget::Blackhole,
                    _ => {
                        return Err(ControlError::BadRequest(format!(
                        "route {}: give via (and optionally interface), interface, or blackhole",
                        r.prefix
                    )))
                    }
                };
                Ok(RouteConfig { prefix: r.prefix, target, source: RouteSource::Api })
            })
            .collect()
    }
}

/// What a batch of route operations did, as the API replies.
fn applied(a: dataplane::routes::Applied) -> Result<RoutesApplied, ControlError> {
    Ok(RoutesApplied {
        added: a.added,
        replaced: a.replaced,
        deleted: a.deleted,
        fib_changes: a.fib_changes,
        new_next_hops: a.new_next_hops,
        generation: [a.generation4, a.generation6],
    })
}
