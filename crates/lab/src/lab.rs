//! A host in memory for the demo and the benchmarks: a topology's VRs on `mem` ports, whose
//! other ends the caller drives; route tables (real or generated); and test frames.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use crate::{bail, Context, Result};
use control::Topology;
use dataplane::config::{RouteConfig, RouteSource, RouteTarget, VrConfig};
use fib::prefix_file::{self, Family};
pub use fib::synthetic::Rng;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

pub use control::build::Built as Lab;

/// Builds the engine of `topo` with these VR configs (the topology's, with routes added).
/// Time reservations get the TSC clock `routeplex run` uses: a vDSO clock read costs a few
/// times more, and a budget pays for several reads per burst.
pub fn build(topo: &Topology, vrs: &[VrConfig]) -> Result<Lab> {
    let mut lab = control::build::engine(topo, Some(vrs))?;
    if lab.engine.cell().needs_clock() {
        lab.engine.set_clock(crate::sys::tsc_clock());
    }
    Ok(lab)
}

/// A route table: prefixes with the next-hop ids of a prefix file.
pub struct Table {
    /// Where it came from, for reports.
    pub label: String,
    pub v4: Vec<(Ipv4Net, u32)>,
    pub v6: Vec<(Ipv6Net, u32)>,
}

impl Table {
    /// A prefix file.
    pub fn from_file(path: &Path) -> Result<Table> {
        let l = prefix_file::load(path).map_err(crate::Error::msg)?;
        Ok(Table { label: format!("file {}", path.display()), v4: l.v4, v6: l.v6 })
    }

    /// The real Internet table if `scripts/fetch-prefixes` has cached it, else generated tables
    /// of `v4` and `v6` prefixes.
    pub fn real_or_generated(v4: usize, v6: usize, seed: u64) -> Result<Table> {
        match (prefix_file::cached(Family::Ipv4), prefix_file::cached(Family::Ipv6)) {
            (Some(a), Some(b)) => {
                let (t4, t6) = (Table::from_file(&a)?, Table::from_file(&b)?);
                Ok(Table {
                    label: format!(
                        "real Internet table (GeoLite2 ASN via geoip2fast) from {}",
                        prefix_file::cache_dir().display()
                    ),
                    v4: t4.v4,
                    v6: t6.v6,
                })
            }
            _ => Ok(Table::generated(v4, v6, seed)),
        }
    }

    /// Generated tables with a realistic prefix-length mix.
    pub fn generated(v4: usize, v6: usize, seed: u64) -> Table {
        Table {
            label: "generated (run scripts/fetch-prefixes for the real Internet table)".into(),
            v4: fib::synthetic::ipv4(v4, 256, seed)
                .into_iter()
                .map(|(p, n)| (p, n as u32))
                .collect(),
            v6: fib::synthetic::ipv6(v6, 256, seed ^ 0x5eed)
                .into_iter()
                .map(|(p, n)| (p, n as u32))
                .collect(),
        }
    }

    /// Adds the table to `vr` as static routes: next-hop id `n` goes via `gw4[n % len]` (IPv6:
    /// `gw6`). A family without gateways is left out.
    pub fn add_routes(&self, vr: &mut VrConfig, gw4: &[Ipv4Addr], gw6: &[Ipv6Addr]) {
        let via = |gateway: IpAddr| RouteTarget::Via { gateway, iface: None };
        if !gw4.is_empty() {
            vr.routes.extend(self.v4.iter().map(|&(p, n)| RouteConfig {
                prefix: IpNet::V4(p),
                target: via(gw4[n as usize % gw4.len()].into()),
                source: RouteSource::Table,
            }));
        }
        if !gw6.is_empty() {
            vr.routes.extend(self.v6.iter().map(|&(p, n)| RouteConfig {
                prefix: IpNet::V6(p),
                target: via(gw6[n as usize % gw6.len()].into()),
                source: RouteSource::Table,
            }));
        }
    }

    /// `n` random IPv4 destinations inside the table's prefixes, avoiding addresses a router
    /// must not forward and the benchmarking range the lab's own interfaces use.
    pub fn destinations_v4(&self, n: usize, rng: &mut Rng) -> Result<Vec<Ipv4Addr>> {
        pick(n, self.v4.len(), rng, |i, r| {
            let (p, _) = self.v4[i];
            let host = if p.prefix_len() == 32 {
                0
            } else {
                r.next_u64() as u32 & (u32::MAX >> p.prefix_len())
            };
            let a = Ipv4Addr::from(u32::from(p.network()) | host);
            let o = a.octets();
            let reserved =
                o[0] == 0 || o[0] == 127 || o[0] >= 224 || (o[0] == 198 && (o[1] & 0xfe) == 18);
            (!reserved).then_some(a)
        })
    }

    /// `n` random IPv6 destinations inside the table's prefixes (global unicast only).
    pub fn destinations_v6(&self, n: usize, rng: &mut Rng) -> Result<Vec<Ipv6Addr>> {
        pick(n, self.v6.len(), rng, |i, r| {
            let (p, _) = self.v6[i];
            let rand = r.next_u128();
            let host = if p.prefix_len() == 128 { 0 } else { rand & (u128::MAX >> p.prefix_len()) };
            let a = u128::from(p.network()) | host;
            let global = a >> 125 == 1 && a >> 80 != 0x2001_0002_0000;
            global.then_some(Ipv6Addr::from(a))
        })
    }
}

fn pick<T>(
    n: usize,
    len: usize,
    rng: &mut Rng,
    mut f: impl FnMut(usize, &mut Rng) -> Option<T>,
) -> Result<Vec<T>> {
    if len == 0 {
        bail!("the table is empty");
    }
    let mut v = Vec::with_capacity(n);
    let mut tries = 0;
    while v.len() < n {
        tries += 1;
        if tries > 100 * n + 1000 {
            bail!("found only {} usable destinations in {} prefixes", v.len(), len);
        }
        let i = rng.below(len as u64) as usize;
        if let Some(a) = f(i, rng) {
            v.push(a);
        }
    }
    Ok(v)
}

/// Parses the embedded demo/bench topology.
pub fn topology(text: &str, name: &str) -> Result<Topology> {
    Topology::parse(text, name, Path::new("."))
        .map_err(crate::Error::from)
        .context("embedded topology")
}

/// 60-byte UDP frames from 198.18.0.2 to each of `dsts`, addressed to `dst_mac` (the VR's
/// receiving interface), for the generator.
pub fn udp_frames(dsts: Vec<Ipv4Addr>, dst_mac: wire::MacAddr) -> Vec<(Vec<u8>, u16)> {
    dsts.into_iter()
        .map(|d| {
            let f = tester::frames::UdpFlow {
                src_mac: wire::MacAddr([2, 0, 0, 0, 0, 1]),
                dst_mac,
                vlan: None,
                src: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
                dst: IpAddr::V4(d),
                src_port: 1024,
                dst_port: 7,
                ttl: 64,
                size: 60,
            };
            (tester::frames::udp_frame(&f), 0)
        })
        .collect()
}
