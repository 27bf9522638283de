//! `impair:` on a port: what frames leaving routeplex by that port suffer on the way (netem's
//! semantics, `dataplane::impair`). One direction: routeplex's egress on the port. The other
//! direction of a link is impaired at its other end where that is a routeplex port too.
//!
//! ```yaml
//! impair:
//!   delay: 20ms          # ns, us, ms or s; decimals allowed (0.5ms); 0..=10s
//!   jitter: 2ms          # the same units; spread around delay by distribution
//!   distribution: normal # uniform (default), normal, pareto, paretonormal; needs jitter
//!   loss: 1%             # random; or Gilbert-Elliott: { p: 1%, r: 25%, 1-h: 100%, 1-k: 0% }
//!   duplicate: 0.5%
//!   reorder: 25%         # share sent at once, skipping the delay (needs delay)
//!   corrupt: 0.1%        # one bit flipped
//!   rate: 10mbit         # bit, kbit, mbit, gbit, tbit (powers of 1000); 1kbit..=1tbit
//!   limit: 1000          # frames waiting at most, 1..=65536 (default 1000)
//!   seed: 42             # the PRNG's seed (default 0): one seed, one pattern
//! ```

use dataplane::impair::{Chance, Distribution, ImpairConfig, Loss, MAX_LIMIT};

use super::yaml::{Result, Value};

/// Keys of `impair:`.
pub(super) const IMPAIR_KEYS: &[&str] = &[
    "delay",
    "jitter",
    "distribution",
    "loss",
    "duplicate",
    "reorder",
    "corrupt",
    "rate",
    "limit",
    "seed",
];
/// Keys of a Gilbert-Elliott `loss:`.
pub(super) const GEMODEL_KEYS: &[&str] = &["p", "r", "1-h", "1-k"];

/// Reads a port's `impair:`; `None` when it impairs nothing.
pub(super) fn impair(v: &Value) -> Result<Option<ImpairConfig>> {
    let m = v.map(IMPAIR_KEYS)?;
    let mut c = ImpairConfig::default();
    if let Some(d) = m.get("delay") {
        c.delay_ns = duration(&d)?;
    }
    if let Some(j) = m.get("jitter") {
        c.jitter_ns = duration(&j)?;
    }
    if let Some(d) = m.get("distribution") {
        let t = d.text()?;
        c.distribution =
            Distribution::ALL.into_iter().find(|x| x.name() == t).ok_or_else(|| {
                d.bad(
                    t,
                    format_args!(
                        "unknown distribution {t:?} (uniform, normal, pareto, paretonormal)"
                    ),
                )
            })?;
        if c.jitter_ns == 0 {
            return Err(d.bad(t, "a distribution shapes the jitter: give a jitter too"));
        }
    }
    if let Some(l) = m.get("loss") {
        c.loss = loss(&l)?;
    }
    for (key, field) in
        [("duplicate", &mut c.duplicate), ("reorder", &mut c.reorder), ("corrupt", &mut c.corrupt)]
    {
        if let Some(x) = m.get(key) {
            *field = percent(&x)?;
        }
    }
    if c.reorder.0 > 0 && c.delay_ns == 0 {
        let r = m.req("reorder")?;
        return Err(r.bad(r.text()?, "reorder sends a share without the delay: give a delay too"));
    }
    if let Some(r) = m.get("rate") {
        c.rate_bps = rate(&r)?;
    }
    if let Some(l) = m.get("limit") {
        c.limit = l.int("limit (frames)", 1, u64::from(MAX_LIMIT))?;
    }
    if let Some(s) = m.get("seed") {
        c.seed = s.int("seed", 0, u64::MAX)?;
    }
    c.check().map_err(|e| v.error(e.0))?;
    Ok((!c.is_none()).then_some(c))
}

/// `loss: 1%` (random) or `loss: { p, r, 1-h, 1-k }` (Gilbert-Elliott; r defaults to 100% - p,
/// 1-h to 100%, 1-k to 0%, netem's defaults).
fn loss(v: &Value) -> Result<Loss> {
    if !v.is_mapping() {
        return Ok(Loss::Random(percent(v)?));
    }
    let m = v.map(GEMODEL_KEYS)?;
    let p = percent(&m.req("p")?)?;
    let r = m.get("r").map(|x| percent(&x)).transpose()?.unwrap_or(p.complement());
    let bad = m.get("1-h").map(|x| percent(&x)).transpose()?.unwrap_or(Chance::ALWAYS);
    let good = m.get("1-k").map(|x| percent(&x)).transpose()?.unwrap_or(Chance::NEVER);
    if r.0 == 0 && p.0 > 0 {
        let rv = m.req("r")?;
        return Err(rv.bad(rv.text()?, "r 0% never leaves the bad state once in it"));
    }
    Ok(Loss::Gilbert { p, r, bad, good })
}

/// `12.5%` (or a bare number of percent), 0..=100.
fn percent(v: &Value) -> Result<Chance> {
    let t = v.text()?;
    let n = t.strip_suffix('%').unwrap_or(t).trim();
    n.parse::<f64>()
        .ok()
        .and_then(Chance::from_percent)
        .ok_or_else(|| v.bad(t, format_args!("{t:?} is not a percentage in 0%..=100%")))
}

/// `20ms`, `1.5s`, `250us`, `100ns`, or `0`, in nanoseconds.
fn duration(v: &Value) -> Result<u64> {
    let t = v.text()?;
    let units = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)];
    let parsed = if t.trim() == "0" {
        Some(0.0)
    } else {
        units.iter().find_map(|(u, k)| {
            let n = t.strip_suffix(u)?.trim();
            n.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).map(|x| x * k)
        })
    };
    match parsed {
        Some(ns) if ns <= dataplane::impair::MAX_DELAY_NS as f64 => Ok(ns.round() as u64),
        Some(_) => Err(v.bad(t, "at most 10s")),
        None => {
            Err(v.bad(t, format_args!("{t:?} is not a duration: a number and ns, us, ms or s")))
        }
    }
}

/// `10mbit` and the like (powers of 1000), or a bare number of bits a second.
fn rate(v: &Value) -> Result<u64> {
    let t = v.text()?;
    let l = t.to_ascii_lowercase();
    let units = [("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)];
    let parsed = units
        .iter()
        .find_map(|(u, k)| l.strip_suffix(u).map(|n| (n.trim().to_string(), *k)))
        .or(Some((l.clone(), 1.0)))
        .and_then(|(n, k)| n.parse::<f64>().ok().map(|x| x * k))
        .filter(|x| x.is_finite());
    let (lo, hi) = (dataplane::impair::MIN_RATE_BPS, dataplane::impair::MAX_RATE_BPS);
    match parsed {
        Some(b) if (lo as f64..=hi as f64).contains(&b) => Ok(b.round() as u64),
        Some(_) => Err(v.bad(t, "a rate in 1kbit..=1tbit")),
        None if l.ends_with("bps") => Err(v.bad(
            t,
            "give the rate in bits a second (kbit, mbit, gbit): netem's bps means bytes, a trap",
        )),
        None => Err(v.bad(
            t,
            format_args!("{t:?} is not a rate: a number and bit, kbit, mbit, gbit or tbit"),
        )),
    }
}
