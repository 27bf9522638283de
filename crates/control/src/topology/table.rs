//! Bulk route tables: files of `prefix next-hop-id` lines, merged into a VR's routes.
//!
//! Next-hop id `n` of an IPv4 prefix goes via the `n % k`-th of the `k` IPv4 gateways in
//! `next_hops` (IPv6 likewise), so one list serves a file holding both families, and listing a
//! gateway twice gives it twice the share. Connected subnets and static routes win over table
//! entries for the same prefix; a prefix in two tables, or twice in one, is an error.
//!
//! A table is read only when it is a regular file of at most [`MAX_TABLE_BYTES`] (so `file:
//! /dev/zero` fails at once), and an error about one of its lines does not echo the line: its
//! text is quoted, 20 bytes at most, only for a file inside the topology's directory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use dataplane::config::{IfaceId, RouteConfig, RouteSource, RouteTarget};
use fib::prefix_file::{PrefixFileError, PrefixFileErrorKind};
use ipnet::IpNet;

use super::error::ErrorKind;
use super::vr::Vr;
use super::yaml::{BadKind, Result, Value};

const TABLE_KEYS: &[&str] = &["file", "next_hops"];
/// The largest table file read: the full IPv4 table is about 10 MB.
pub const MAX_TABLE_BYTES: u64 = 256 << 20;
/// The most bytes of a table line an error quotes (of a file in the topology's directory).
const LINE_QUOTE_MAX: usize = 20;
const NEXT_HOP_KEYS: &[&str] = &["via", "interface"];

/// What reading a topology does with its VRs' `tables:` files.
#[derive(Clone, Copy, Debug)]
pub(super) enum Tables<'a> {
    /// Reads them into the VRs' routes (relative paths against this directory).
    Read(&'a Path),
    /// Reads them for their sums only, not parsed: their routes are read later (a data plane
    /// started again, which forwards from its checkpoint meanwhile).
    Sum(&'a Path),
    /// Does not open them (`up` starting a data plane again, which reads them itself).
    Skip,
}

/// Loads every table of a VR into `routes` (`None`: reads the files for their sum only),
/// skipping prefixes that `statics` (static route prefixes) or the VR's connected subnets
/// already cover. Returns the tables' sum, `None` when the VR has none: the CRC-32 of each
/// table's path, gateways and bytes, so a checkpoint tells whether the tables it was built
/// from are still those in the files without parsing them (see `crate::checkpoint`).
pub(super) fn load_tables(
    vr: &Vr,
    tables: &[Value],
    statics: &HashMap<IpNet, usize>,
    base_dir: &Path,
    mut routes: Option<&mut Vec<RouteConfig>>,
) -> Result<Option<u32>> {
    if tables.is_empty() {
        return Ok(None);
    }
    let first = routes.as_ref().map_or(0, |r| r.len());
    let mut sum = crc32fast::Hasher::new();
    // Per table: where its entries start in `routes`, its `file:` value, and its path.
    let mut loaded: Vec<(usize, Value, String)> = Vec::new();
    for tv in tables {
        let m = tv.map(TABLE_KEYS)?;
        let file_v = m.req("file")?;
        let file_s = file_v.text()?;
        let path = resolve(&file_v, base_dir)?;
        let hops_v = m.req("next_hops")?;
        let (gw4, gw6) = next_hops(vr, &hops_v)?;

        let shown = path.display().to_string();
        // Errors inside the table file name that file and its line in the message; the error
        // itself points at the `file:` line that brought it in.
        let text = yamlpath::read_file(&path, MAX_TABLE_BYTES).map_err(|io| {
            file_v.bad_kind(ErrorKind::Io, file_s, format_args!("cannot read table {shown}: {io}"))
        })?;
        sum.update(format!("{shown}\0{gw4:?}{gw6:?}\0{}\0", text.len()).as_bytes());
        sum.update(text.as_bytes());
        let Some(routes) = routes.as_deref_mut() else { continue };
        let list = fib::prefix_file::parse(&text, &shown)
            .map_err(|e| file_v.bad(file_s, line_error(&e, &shown, within(&path, base_dir))))?;
        drop(text);
        for (fam, n, gws) in [("IPv4", list.v4.len(), &gw4), ("IPv6", list.v6.len(), &gw6)] {
            if n > 0 && gws.is_empty() {
                return Err(hops_v.error(format_args!(
                    "{shown} has {n} {fam} prefixes but next_hops has no {fam} gateway"
                )));
            }
        }

        // Past the check above, a family with prefixes has gateways: no division by zero.
        loaded.push((routes.len(), file_v, shown));
        routes.reserve(list.v4.len() + list.v6.len());
        let v4 =
            list.v4.into_iter().map(|(net, id)| (IpNet::V4(net), gw4[id as usize % gw4.len()]));
        let v6 =
            list.v6.into_iter().map(|(net, id)| (IpNet::V6(net), gw6[id as usize % gw6.len()]));
        for (prefix, (gateway, iface)) in v4.chain(v6) {
            if statics.contains_key(&prefix) || vr.subnets.contains_key(&prefix) {
                continue;
            }
            routes.push(RouteConfig {
                prefix,
                target: RouteTarget::Via { gateway, iface },
                source: RouteSource::Table,
            });
        }
    }
    if let Some(routes) = routes.filter(|_| loaded.len() >= 2) {
        unique(&routes[first..], &loaded, first)?;
    }
    Ok(Some(sum.finalize()))
}

/// The message for a table line that is not `prefix next-hop-id`, naming the file and line.
///
/// A `file:` may name any file the process can read (`/etc/shadow`), and errors are shown and
/// logged, so an error does not echo the line: a field that parsed as a prefix is shown as
/// parsed; any other text is quoted (at most [`LINE_QUOTE_MAX`] bytes) only for a file inside
/// the topology's directory (`quote`), and not at all otherwise.
fn line_error(e: &PrefixFileError, shown: &str, quote: bool) -> String {
    use PrefixFileErrorKind as K;
    // Text that parsed as a prefix (the parser checked it) holds nothing but a prefix.
    let net = |p: &str| p.parse::<IpNet>().map_or_else(|_| "?".into(), |n| format!("\"{n}\""));
    let q = |s: &str| yamlpath::quote_max(s, LINE_QUOTE_MAX);
    let (field, what) = match &e.kind {
        K::HostBitsSet { prefix, masked } => {
            let why = format!("host bits set (did you mean {masked}?)");
            return format!("{shown}:{}: prefix {}: {why}", e.line, net(prefix));
        }
        K::MissingNextHop { prefix } => {
            return format!("{shown}:{}: prefix {}: missing next-hop", e.line, net(prefix));
        }
        K::Duplicate { prefix, first_line } => {
            let why = format!("listed twice (first on line {first_line})");
            return format!("{shown}:{}: prefix {}: {why}", e.line, net(prefix));
        }
        K::InvalidAddress { prefix } => (prefix.as_str(), "prefix {}: invalid address"),
        K::MissingLength { prefix } => (prefix.as_str(), "prefix {}: missing \"/length\""),
        K::InvalidLength { prefix } => (prefix.as_str(), "prefix {}: invalid prefix length"),
        K::InvalidNextHop { value } => (value.as_str(), "next-hop {}: not a number"),
        K::NextHopOutOfRange { value } => (value.as_str(), "next-hop {}: out of range"),
        K::ExtraField { value } => (value.as_str(), "unexpected field {} after the next-hop"),
        // Not produced by `parse`; and a kind added later quotes nothing.
        _ => ("", ""),
    };
    if quote && !what.is_empty() {
        format!(
            "{shown}:{}: not a prefix and next-hop id: {}",
            e.line,
            what.replace("{}", &q(field))
        )
    } else {
        let why = if what.is_empty() {
            String::new()
        } else {
            format!(
                " ({}; not quoted: the file is outside the topology's directory)",
                what.replace(" {}", "")
            )
        };
        format!("{shown}:{}: not a prefix and next-hop id{why}", e.line)
    }
}

/// True when `path` lies inside `dir` once both are resolved (symbolic links and `..` too).
fn within(path: &Path, dir: &Path) -> bool {
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    match (std::fs::canonicalize(path), std::fs::canonicalize(dir)) {
        (Ok(p), Ok(d)) => p.starts_with(d),
        _ => false,
    }
}

/// Fails on a prefix that two tables give (one file cannot: its parser rejects duplicates).
/// Sorting finds it several times faster than a hash set of half a million prefixes would.
fn unique(entries: &[RouteConfig], loaded: &[(usize, Value, String)], first: usize) -> Result<()> {
    let mut keys: Vec<(IpNet, usize)> =
        entries.iter().enumerate().map(|(i, r)| (r.prefix, first + i)).collect();
    keys.sort_unstable();
    let Some(pair) = keys.windows(2).find(|w| w[0].0 == w[1].0) else { return Ok(()) };
    let (prefix, a, b) = (pair[0].0, pair[0].1, pair[1].1);
    let table_of = |pos: usize| loaded.partition_point(|t| t.0 <= pos) - 1;
    let (ta, tb) = (table_of(a), table_of(b));
    debug_assert_ne!(ta, tb, "the prefix-file parser rejects duplicates within a file");
    let (_, file_v, shown) = &loaded[tb];
    let message = format!("prefix {prefix} is in {shown} and in {} (tables[{ta}])", loaded[ta].2);
    Err(file_v.bad(file_v.text()?, message))
}

/// A table path: `~` is `$HOME`, and a relative path is relative to the topology file.
pub(super) fn resolve(v: &Value, base_dir: &Path) -> Result<PathBuf> {
    let s = v.text()?;
    let path = match s.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            let home = std::env::var_os("HOME").ok_or_else(|| {
                v.bad(s, format_args!("cannot expand ~ in {s:?}: HOME is not set"))
            })?;
            PathBuf::from(home).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(s),
    };
    Ok(if path.is_relative() { base_dir.join(path) } else { path })
}

type NextHop = (IpAddr, Option<IfaceId>);

/// The gateways of `next_hops`, split by family. Each is `ADDRESS` or `{ via: ADDRESS,
/// interface: NAME }`, checked exactly like a route's `via`.
fn next_hops(vr: &Vr, v: &Value) -> Result<(Vec<NextHop>, Vec<NextHop>)> {
    let items = v.list()?;
    if items.is_empty() {
        return Err(v.error("next_hops needs at least one gateway"));
    }
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for item in &items {
        let hop = if item.is_mapping() {
            let m = item.map(NEXT_HOP_KEYS)?;
            let iface = m.get("interface").map(|i| vr.iface_ref(&i)).transpose()?;
            (vr.gateway(&m.req("via")?, iface, None)?, iface)
        } else {
            (vr.gateway(item, None, None)?, None)
        };
        if hop.0.is_ipv4() { &mut v4 } else { &mut v6 }.push(hop);
    }
    Ok((v4, v6))
}
