//! Failure timelines: a scenario of `kind: timeline` runs a routeplex topology with routing
//! daemons in its VRs' control planes, sends sequence-numbered probe flows between its hosts,
//! applies events at set times in the run (links down and up, flaps, impairment changes, VRs
//! stopped and started, daemons killed) and reports, per event and per flow, the outage the
//! flow saw. This module parses and checks the file and does the outage arithmetic; the
//! runner (root, namespaces) is `routeplex test timeline`.
//!
//! # Format
//!
//! ```yaml
//! # A header comment, kept in the report.
//! name: ospf-square
//! kind: timeline
//! title: BIRD OSPF on a square, one link cut
//! topology: ospf-square/topology.yaml   # relative to this file
//! timers: { hello: 1s, dead: 4s }       # the protocol's timers, as the daemons' configs set
//!                                       # them: named in the report, not applied
//! daemons:                              # per VR (it needs a `control_plane`)
//!   r1: { bird: ospf-square/r1.conf }   # BIRD 2 with this configuration, or
//!   r2: { frr: bgp-pairs/r2.conf }      # FRR: zebra, and bgpd with this configuration
//! flows:                                # UDP probes from a host's namespace to an address
//!   - { name: a-to-c, from: ha, to: 10.80.3.2, rate: 1000 }   # rate: 1..=10000 per second
//! converge: 60                          # seconds to wait for every flow to deliver
//! settle: 2                             # seconds more before time 0 (other paths learned)
//! duration: 10                          # seconds of probes from time 0
//! events:                               # at: seconds from time 0, then one action
//!   - { at: 2, link_down: { vr: r1, interface: l12 } }
//!   - { at: 6, link_up: { vr: r1, interface: l12 } }
//!   - { at: 2, flap: { vr: r1, interface: l12, period: 1, count: 3 } }
//!   - { at: 2, impair: { port: pa, set: { delay: 20ms, loss: 1% } } }   # set: none ends it
//!   - { at: 2, vr_stop: r2 }            # every interface of r2 down (the VR and its
//!   - { at: 5, vr_start: r2 }           # daemons keep running); vr_start: all up again
//!   - { at: 2, daemon_kill: r2 }        # SIGKILL to r2's daemon, which stays dead
//!   - { at: 2, daemon_kill: { vr: r2, restart: 1 } }   # ... started again 1 s later
//! ```
//!
//! A flap of `period` P and `count` N takes the interface down at `at + k·P` and up at
//! `at + k·P + P/2`, k = 0..N; a daemon killed with `restart: S` (seconds, or `no`) starts
//! again, with the same configuration, at `at + S`. Each action (a flap's each half too)
//! opens a window that lasts to the next action or the end of the run; [`outages`] reports
//! each window.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::yaml::{self, ScenarioValue, Value};
use super::{Result, ScenarioError, MAX_SCENARIO_BYTES};

/// Flows a timeline may have.
pub const MAX_FLOWS: usize = 16;
/// Events a timeline may have (a flap counts once here).
pub const MAX_EVENTS: usize = 256;
/// Actions after flaps are expanded.
pub const MAX_ACTIONS: usize = 1024;
/// The highest probe rate per flow (probes per second).
pub const MAX_RATE: u64 = 10_000;
/// The longest run (seconds of probes).
pub const MAX_DURATION: f64 = 300.0;

const TOP_KEYS: &[&str] = &[
    "name", "kind", "title", "topology", "timers", "daemons", "flows", "converge", "settle",
    "duration", "events",
];
const EVENT_KINDS: &[&str] =
    &["link_down", "link_up", "flap", "impair", "vr_stop", "vr_start", "daemon_kill"];

/// A parsed, checked timeline scenario.
#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    pub file: String,
    pub name: String,
    pub title: String,
    /// The file's leading comment, without the `#`s.
    pub about: String,
    /// The topology file, resolved against the scenario's directory.
    pub topology: PathBuf,
    /// The protocol's timers as the file names them (`hello` → `1s`), for the report.
    pub timers: BTreeMap<String, String>,
    pub daemons: Vec<Daemon>,
    pub flows: Vec<Flow>,
    /// Seconds to wait for every flow to deliver before the run.
    pub converge: f64,
    /// Seconds after convergence before time 0.
    pub settle: f64,
    /// Seconds of probes from time 0.
    pub duration: f64,
    /// The actions in time order (flaps expanded).
    pub actions: Vec<Action>,
}

/// A routing daemon in a VR's control plane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Daemon {
    pub vr: String,
    pub kind: DaemonKind,
    /// Its configuration, resolved against the scenario's directory.
    pub config: PathBuf,
    /// Where the file names it (`daemons.r1`, line, column), for errors found later.
    pub at: Place,
}

/// The daemons a timeline starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DaemonKind {
    /// BIRD 2 with the file as its configuration.
    Bird,
    /// FRR's zebra and bgpd, the file bgpd's configuration.
    Frr,
}

/// A probe flow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Flow {
    pub name: String,
    /// The host (namespace) it leaves from.
    pub from: String,
    pub to: std::net::IpAddr,
    /// Probes per second.
    pub rate: u64,
    pub at: Place,
}

/// A field's place in the file, for errors the runner finds (a VR the topology lacks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Place {
    pub field: String,
    pub line: usize,
    pub column: usize,
}

impl Place {
    fn of(v: &Value) -> Place {
        let (line, column) = v.pos();
        Place { field: v.path().to_string(), line, column }
    }

    /// An error at this place in `file`.
    pub fn error(&self, file: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError::at((self.line, self.column), &self.field, None, message.into()).in_file(file)
    }
}

/// One thing done at a time in the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Action {
    /// Seconds from time 0.
    pub at: f64,
    /// The event (index in `events:`) it comes from.
    pub event: usize,
    pub what: ActionKind,
    pub place: Place,
}

/// What an action does.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ActionKind {
    /// A VR interface up or down (through the API's `interface_set`).
    Link { vr: String, interface: String, up: bool },
    /// A port's impairment set (`None`: ended), as JSON for the API's `impair` command.
    Impair { port: String, set: Option<serde_json::Value> },
    /// Every interface of a VR down (`up: false`) or up.
    Vr { vr: String, up: bool },
    /// The VR's daemon killed (SIGKILL).
    DaemonKill { vr: String },
    /// The VR's daemon, killed before, started again with its configuration.
    DaemonStart { vr: String },
}

impl ActionKind {
    /// A short label for tables: `r1.l12 down`, `impair pa`.
    pub fn label(&self) -> String {
        match self {
            ActionKind::Link { vr, interface, up } => {
                format!("{vr}.{interface} {}", if *up { "up" } else { "down" })
            }
            ActionKind::Impair { port, set: Some(_) } => format!("impair {port}"),
            ActionKind::Impair { port, set: None } => format!("impair {port} ends"),
            ActionKind::Vr { vr, up } => format!("vr {vr} {}", if *up { "start" } else { "stop" }),
            ActionKind::DaemonKill { vr } => format!("kill {vr}'s daemon"),
            ActionKind::DaemonStart { vr } => format!("restart {vr}'s daemon"),
        }
    }
}

impl Timeline {
    /// Reads and checks a timeline file (a regular file of at most [`MAX_SCENARIO_BYTES`]).
    pub fn load(path: &Path) -> std::result::Result<Timeline, ScenarioError> {
        let file = path.display().to_string();
        let text = yamlpath::read_file(path, MAX_SCENARIO_BYTES).map_err(|e| {
            ScenarioError::at((0, 0), "", None, format!("cannot read it: {e}")).in_file(&file)
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Timeline::parse(&text, &file, dir)
    }

    /// Parses and checks a timeline; `file` names it in errors, `dir` resolves its paths.
    pub fn parse(
        text: &str,
        file: &str,
        dir: &Path,
    ) -> std::result::Result<Timeline, ScenarioError> {
        parse(text, file, dir).map_err(|e| e.in_file(file))
    }

    /// When each action starts, nanoseconds from time 0 (the windows [`outages`] takes).
    pub fn action_times_ns(&self) -> Vec<u64> {
        self.actions.iter().map(|a| (a.at * 1e9) as u64).collect()
    }
}

/// Whether a scenario text declares `kind: timeline` (cheap check before a full parse).
pub fn is_timeline(text: &str) -> bool {
    text.lines().any(|l| l.trim_end() == "kind: timeline")
}

fn word(v: &Value, what: &str) -> Result<String> {
    let s = v.text()?;
    if s.is_empty()
        || s.len() > 64
        || !s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(v.bad(s, format!("{what} is 1 to 64 letters, digits, - _ .")));
    }
    Ok(s.to_string())
}

fn parse(text: &str, file: &str, dir: &Path) -> Result<Timeline> {
    let doc = yaml::parse_document(text)?;
    let root = Value::root(&doc);
    let m = root.map(TOP_KEYS)?;
    let kind = m.req("kind")?;
    if kind.text()? != "timeline" {
        return Err(kind.bad(kind.text()?, "a timeline scenario has kind: timeline"));
    }
    let name = word(&m.req("name")?, "a name")?;
    let title = match m.get("title") {
        Some(v) => v.text()?.to_string(),
        None => name.clone(),
    };
    let topology = dir.join(m.req("topology")?.text()?);
    let mut timers = BTreeMap::new();
    if let Some(t) = m.get("timers") {
        for (k, v) in t.mapping()?.entries() {
            timers.insert(k, v.text()?.to_string());
        }
    }
    let mut daemons = Vec::new();
    if let Some(d) = m.get("daemons") {
        for (vr, v) in d.mapping()?.entries() {
            let dm = v.map(&["bird", "frr"])?;
            let (kind, conf) = match (dm.get("bird"), dm.get("frr")) {
                (Some(c), None) => (DaemonKind::Bird, c),
                (None, Some(c)) => (DaemonKind::Frr, c),
                _ => return Err(v.error("a daemon is one of bird: CONFIG or frr: BGPD_CONFIG")),
            };
            daemons.push(Daemon { vr, kind, config: dir.join(conf.text()?), at: Place::of(&v) });
        }
    }
    let flows = flows(&m.req("flows")?)?;
    let converge = opt_secs(&m.get("converge"), "converge", 1.0, 600.0, 60.0)?;
    let settle = opt_secs(&m.get("settle"), "settle", 0.0, 600.0, 0.0)?;
    let dv = m.req("duration")?;
    let duration = dv.secs("duration", 0.1, MAX_DURATION)?;
    let actions = match m.get("events") {
        Some(e) => events(&e, duration)?,
        None => Vec::new(),
    };
    Ok(Timeline {
        file: file.to_string(),
        name,
        title,
        about: super::header_comment(text),
        topology,
        timers,
        daemons,
        flows,
        converge,
        settle,
        duration,
        actions,
    })
}

fn opt_secs(v: &Option<Value>, what: &str, lo: f64, hi: f64, default: f64) -> Result<f64> {
    v.as_ref().map_or(Ok(default), |v| v.secs(what, lo, hi))
}

fn flows(v: &Value) -> Result<Vec<Flow>> {
    let items = v.list()?;
    if items.is_empty() || items.len() > MAX_FLOWS {
        return Err(v.error(format!("1 to {MAX_FLOWS} flows")));
    }
    let mut out: Vec<Flow> = Vec::new();
    for i in &items {
        let fm = i.map(&["name", "from", "to", "rate"])?;
        let nv = fm.req("name")?;
        let name = word(&nv, "a flow name")?;
        if out.iter().any(|f| f.name == name) {
            return Err(nv.bad(&name, format!("flow {name:?} is named twice")));
        }
        let to_v = fm.req("to")?;
        let to = to_v.parse("an IP address")?;
        let rate = match fm.get("rate") {
            Some(r) => r.count("rate", 1, MAX_RATE)?,
            None => 1000,
        };
        out.push(Flow {
            name,
            from: word(&fm.req("from")?, "a host")?,
            to,
            rate,
            at: Place::of(i),
        });
    }
    Ok(out)
}

fn events(v: &Value, duration: f64) -> Result<Vec<Action>> {
    let items = v.list()?;
    if items.len() > MAX_EVENTS {
        return Err(v.error(format!("at most {MAX_EVENTS} events")));
    }
    let mut out = Vec::new();
    for (n, e) in items.iter().enumerate() {
        let mut keys = vec!["at"];
        keys.extend(EVENT_KINDS);
        let em = e.map(&keys)?;
        let at = em.req("at")?.secs("at", 0.0, duration)?;
        let kinds: Vec<&str> =
            EVENT_KINDS.iter().copied().filter(|k| em.get(k).is_some()).collect();
        let [kind] = kinds[..] else {
            return Err(e.error(format!(
                "an event is `at` and one of {} ({} given)",
                EVENT_KINDS.join(", "),
                kinds.len()
            )));
        };
        let body = em.req(kind)?;
        let place = Place::of(&body);
        let mut push = |at: f64, what: ActionKind| {
            out.push(Action { at, event: n, what, place: place.clone() });
        };
        match kind {
            "link_down" | "link_up" => {
                let (vr, interface) = vr_interface(&body, &["vr", "interface"])?;
                push(at, ActionKind::Link { vr, interface, up: kind == "link_up" });
            }
            "flap" => {
                let (vr, interface) = vr_interface(&body, &["vr", "interface", "period", "count"])?;
                let fm = body.mapping()?;
                let period = fm.req("period")?.secs("period", 0.01, 600.0)?;
                let count = fm.req("count")?.count("count", 1, 100)?;
                for k in 0..count {
                    let t = at + k as f64 * period;
                    let (vr, interface) = (vr.clone(), interface.clone());
                    push(
                        t,
                        ActionKind::Link {
                            vr: vr.clone(),
                            interface: interface.clone(),
                            up: false,
                        },
                    );
                    push(t + period / 2.0, ActionKind::Link { vr, interface, up: true });
                }
            }
            "impair" => {
                let im = body.map(&["port", "set"])?;
                let port = word(&im.req("port")?, "a port")?;
                let sv = im.req("set")?;
                let set =
                    if sv.text().is_ok_and(|t| t == "none") { None } else { Some(impair(&sv)?) };
                push(at, ActionKind::Impair { port, set });
            }
            "vr_stop" | "vr_start" => {
                push(at, ActionKind::Vr { vr: word(&body, "a VR")?, up: kind == "vr_start" })
            }
            _ => {
                let (vr, restart) = daemon_kill(&body)?;
                push(at, ActionKind::DaemonKill { vr: vr.clone() });
                if let Some(after) = restart {
                    push(at + after, ActionKind::DaemonStart { vr });
                }
            }
        }
    }
    if let Some(a) = out.iter().find(|a| a.at > duration) {
        return Err(a.place.error(
            "",
            format!(
                "the event runs past the run's end ({duration} s): {} at {} s",
                a.what.label(),
                a.at
            ),
        ));
    }
    if out.len() > MAX_ACTIONS {
        return Err(
            v.error(format!("the events make {} actions (at most {MAX_ACTIONS})", out.len()))
        );
    }
    // Stable: actions at the same time keep the file's order.
    out.sort_by(|a, b| a.at.total_cmp(&b.at));
    Ok(out)
}

/// `daemon_kill: r2` (stays dead) or `daemon_kill: { vr: r2, restart: 1 }` (seconds after the
/// kill, or `no`): the VR and when its daemon starts again.
fn daemon_kill(v: &Value) -> Result<(String, Option<f64>)> {
    if !v.is_mapping() {
        return Ok((word(v, "a VR")?, None));
    }
    let m = v.map(&["vr", "restart"])?;
    let vr = word(&m.req("vr")?, "a VR")?;
    let restart = match m.get("restart") {
        Some(r) if r.text().is_ok_and(|t| t == "no") => None,
        Some(r) => Some(r.secs("restart", 0.0, MAX_DURATION)?),
        None => None,
    };
    Ok((vr, restart))
}

fn vr_interface(v: &Value, keys: &[&str]) -> Result<(String, String)> {
    let m = v.map(keys)?;
    Ok((word(&m.req("vr")?, "a VR")?, word(&m.req("interface")?, "an interface")?))
}

/// An impairment as the API's `impair` command takes it: the topology's `impair:` keys, with
/// `limit` and `seed` numbers and the rest text (checked by the runner against the API).
fn impair(v: &Value) -> Result<serde_json::Value> {
    const KEYS: &[&str] = &[
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
    let m = v.map(KEYS)?;
    let mut out = serde_json::Map::new();
    for (k, val) in m.entries() {
        let j = match k.as_str() {
            "limit" => val.count("limit", 1, 1 << 20)?.into(),
            "seed" => val.count("seed", 0, u64::MAX)?.into(),
            "loss" if val.is_mapping() => {
                let gm = val.map(&["p", "r", "1-h", "1-k"])?;
                let mut g = serde_json::Map::new();
                for (gk, gv) in gm.entries() {
                    g.insert(gk, gv.text()?.into());
                }
                g.into()
            }
            _ => val.text()?.into(),
        };
        out.insert(k, j);
    }
    Ok(out.into())
}

/// What one flow saw in one window: from an action (or time 0) to the next (or the end).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Window {
    /// When its action was applied (0 for the window before the first), ms from time 0; the
    /// times below count from it.
    pub start_ms: f64,
    /// The probes it holds were sent from `from_ms` (`start_ms` less the in-flight margin)
    /// to `end_ms`, ms from time 0.
    pub from_ms: f64,
    pub end_ms: f64,
    /// Probes sent in it, and of those, lost.
    pub sent: u64,
    pub lost: u64,
    /// Runs of consecutive lost probes.
    pub gaps: u64,
    /// When the first and last lost probes were sent, ms from the action (negative: sent in
    /// the in-flight margin before it).
    pub first_loss_ms: Option<f64>,
    pub last_loss_ms: Option<f64>,
    /// First loss to last loss, ms (0 for a single lost probe; `lost` / rate says how long
    /// in probe time).
    pub outage_ms: Option<f64>,
    /// When the first probe after the last loss that arrived was sent, ms from the action:
    /// forwarding was back. `None` when nothing was lost, or when no probe after the
    /// last loss arrived (see `recovered`).
    pub back_ms: Option<f64>,
    /// Whether the flow delivered at the window's end: nothing lost, or a probe after the
    /// last loss arrived.
    pub recovered: bool,
}

/// The outage arithmetic: cuts one flow's probes into windows at `starts_ns` (the actions'
/// times, sorted; a window before the first, from 0, comes first) and reports each.
/// `sent_ns[i]` is when probe `i` was sent (ns from time 0, not decreasing), `received[i]`
/// whether it arrived. A probe sent less than `in_flight_ns` before an action was on its way
/// when it happened and may be lost by it: it belongs to the action's window, whose times
/// are still counted from the action (so a first loss may be negative). `end_ns` ends the
/// last window, which also takes any probe sent after it.
pub fn outages(
    sent_ns: &[u64],
    received: &[bool],
    starts_ns: &[u64],
    end_ns: u64,
    in_flight_ns: u64,
) -> Vec<Window> {
    let n = sent_ns.len().min(received.len());
    // (origin, covered from), per window.
    let mut bounds = Vec::with_capacity(starts_ns.len() + 1);
    bounds.push((0, 0));
    bounds.extend(starts_ns.iter().map(|&s| (s, s.saturating_sub(in_flight_ns))));
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut out = Vec::with_capacity(bounds.len());
    let mut i = 0;
    for (k, &(origin, from)) in bounds.iter().enumerate() {
        let next = bounds.get(k + 1).map(|b| b.1);
        let end = next.unwrap_or(end_ns.max(origin));
        let mut win = Window {
            start_ms: ms(origin),
            from_ms: ms(from),
            end_ms: ms(end),
            ..Window::default()
        };
        let (mut first, mut last, mut back) = (None, None, None);
        let mut in_gap = false;
        while i < n && next.is_none_or(|e| sent_ns[i] < e) {
            let t = (sent_ns[i] as f64 - origin as f64) / 1e6;
            win.sent += 1;
            if received[i] {
                if in_gap {
                    back = Some(t);
                }
                in_gap = false;
            } else {
                win.lost += 1;
                if !in_gap {
                    win.gaps += 1;
                }
                in_gap = true;
                first.get_or_insert(t);
                last = Some(t);
                back = None;
            }
            i += 1;
        }
        win.first_loss_ms = first;
        win.last_loss_ms = last;
        win.outage_ms = first.zip(last).map(|(f, l)| l - f);
        win.back_ms = back;
        win.recovered = last.is_none() || back.is_some();
        out.push(win);
    }
    out
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
