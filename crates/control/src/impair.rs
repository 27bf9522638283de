//! Link impairments on a running host: what `apply` changes when a port's `impair:` does, and
//! the step that changes it (see `dataplane::impair` for what an impairment does).
//!
//! A change reaches the port's cell between two polls: frames already waiting on the link
//! keep the times they were given; the new settings apply to frames sent afterwards. Ending an
//! impairment (the key removed) lets what waits leave at its time, then the port is back on
//! the plain path and its impairment counters end with it.

use dataplane::impair::ImpairConfig;
use tracing::info;

use crate::runtime::Runtime;
use crate::{ControlError, PortKind, Topology};

/// The ports of `next` whose impairment differs from `cur`'s (a new port with one included),
/// each with whether it had none before and its new settings (`None`: ended).
pub(crate) fn changes(
    cur: &Topology,
    next: &Topology,
) -> Vec<(String, bool, Option<ImpairConfig>)> {
    next.ports
        .iter()
        .filter(|p| is_user_port(&p.kind))
        .filter_map(|p| {
            let old = cur.ports.iter().find(|q| q.name == p.name).and_then(|q| q.impair);
            (old != p.impair).then(|| (p.name.clone(), old.is_none(), p.impair))
        })
        .collect()
}

/// Sets (or ends, `None`) the impairment of runtime port `port` in every cell holding it.
pub fn set(rt: &Runtime, port: &str, cfg: Option<ImpairConfig>) -> Result<String, ControlError> {
    for r in rt.on_port(port, move |cell, p| cell.set_impair(p, cfg))? {
        r.map_err(|e| ControlError::Invalid(e.0))?;
    }
    info!(port, impair = ?cfg, "impairment set");
    Ok(match cfg {
        Some(c) => format!("port {port}: impair {}", describe(&c)),
        None => format!("port {port}: impairment ends"),
    })
}

/// The settings that impair, in the topology's words (`delay 20ms loss 1% rate 10000000bit`).
pub fn describe(c: &ImpairConfig) -> String {
    use dataplane::impair::Loss;
    let ms = |ns: u64| format!("{}ms", ns as f64 / 1e6);
    let mut w = Vec::new();
    if c.delay_ns > 0 || c.jitter_ns > 0 {
        w.push(format!("delay {}", ms(c.delay_ns)));
    }
    if c.jitter_ns > 0 {
        w.push(format!("jitter {} {}", ms(c.jitter_ns), c.distribution.name()));
    }
    match c.loss {
        Loss::None => {}
        Loss::Random(p) => w.push(format!("loss {}%", p.percent())),
        Loss::Gilbert { p, r, bad, good } => w.push(format!(
            "loss gemodel p {}% r {}% 1-h {}% 1-k {}%",
            p.percent(),
            r.percent(),
            bad.percent(),
            good.percent()
        )),
    }
    for (n, x) in [("duplicate", c.duplicate), ("reorder", c.reorder), ("corrupt", c.corrupt)] {
        if x.0 > 0 {
            w.push(format!("{n} {}%", x.percent()));
        }
    }
    if c.rate_bps > 0 {
        w.push(format!("rate {}bit", c.rate_bps));
    }
    w.push(format!("limit {} seed {}", c.limit, c.seed));
    w.join(" ")
}

/// The `impair` command: the running topology's text with port `port`'s `impair:` replaced
/// (`None`: removed), applied as `apply` would.
pub(crate) fn command(
    node: &mut crate::Node,
    port: &str,
    impair: Option<Box<crate::model::ImpairDoc>>,
) -> Result<crate::Plan, ControlError> {
    if !node.topology().ports.iter().any(|p| p.name == port && is_user_port(&p.kind)) {
        return Err(ControlError::BadRequest(format!("no port {port:?} in the topology")));
    }
    let value = impair.map(|d| serde_json::to_value(d).expect("documents serialize"));
    node.edit_source(|doc| {
        let ports = doc.get_mut("ports").and_then(|p| p.as_array_mut());
        for p in ports.into_iter().flatten() {
            if p.get("name").and_then(|n| n.as_str()) != Some(port) {
                continue;
            }
            let Some(m) = p.as_object_mut() else { continue };
            match &value {
                Some(v) => drop(m.insert("impair".into(), v.clone())),
                None => drop(m.remove("impair")),
            }
        }
    })
}

/// Ports the topology file declares (not the internal links and mirrors made for it).
fn is_user_port(k: &PortKind) -> bool {
    !matches!(k, PortKind::Link { .. } | PortKind::Mirror { .. })
}
