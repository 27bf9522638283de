//! How a topology runs: its workers and what they do when idle, where each VR runs, its
//! reservation and batch limit, and the cells (what must share a worker).
//!
//! A cell is what one worker runs together and what moves between workers as one: ports joined
//! by the VRs whose interfaces sit on them, by the switches they are members of, and by internal
//! links. Two VRs on one port share its demux, so they share a worker; a VR on a switch shares
//! the switch's worker. VRs of one cell placed on different workers are an error.

use dataplane::config::{PortId, VrConfig};
use dataplane::{Budget, Reservation, SwitchConfig};

use super::yaml::{Result, Value};
use super::{PortKind, PortSpec};

/// What a worker does when a poll found nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Idle {
    /// Spin (lowest latency; the CPU is the worker's). A topology's `idle: poll`.
    Spin,
    /// Spin a few polls, then yield the CPU between empty polls, never sleeping (for CPUs
    /// shared with other threads: tests, a generator on the same machine). A yield hands the
    /// CPU to any runnable thread, a nice-19 one too, until the scheduler picks again: beside
    /// two nice-19 busy loops a flood's frames were dropped at an AF_XDP ring 2-3 times as
    /// often as with [`Idle::Adaptive`] (docs/dataplane.md, neighbours under a flood).
    Yield,
    /// Spin while there is traffic; after [`crate::runtime::SPIN_NS`] of empty polls yield, after
    /// [`crate::runtime::BLOCK_AFTER_NS`] sleep on the ports' descriptors until frames, a command or
    /// [`crate::runtime::BLOCK_TIMEOUT`] (the default).
    #[default]
    Adaptive,
    /// Sleep on the ports' descriptors as soon as a poll finds nothing (least CPU; every
    /// pause in traffic costs a wakeup).
    Interrupt,
}

impl Idle {
    /// Every mode.
    pub const ALL: [Idle; 4] = [Idle::Spin, Idle::Yield, Idle::Adaptive, Idle::Interrupt];

    /// Its name in a topology file (`yield` is not allowed there) and in status.
    pub fn name(self) -> &'static str {
        match self {
            Idle::Spin => "poll",
            Idle::Yield => "yield",
            Idle::Adaptive => "adaptive",
            Idle::Interrupt => "interrupt",
        }
    }

    /// The mode called `name` (see [`Idle::name`]).
    pub fn from_name(name: &str) -> Option<Idle> {
        Idle::ALL.into_iter().find(|i| i.name() == name)
    }
}

/// How many workers run the data plane, and where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Workers {
    /// One per online CPU, each pinned to its CPU (the default).
    #[default]
    PerCpu,
    /// This many, worker `i` pinned to CPU `i` modulo the online CPUs.
    Count(u16),
    /// One per listed CPU, pinned to it.
    Cpus(Vec<u16>),
}

impl Workers {
    /// The number of workers, when the file fixes it.
    pub fn count(&self) -> Option<usize> {
        match self {
            Workers::PerCpu => None,
            Workers::Count(n) => Some(usize::from(*n)),
            Workers::Cpus(c) => Some(c.len()),
        }
    }

    /// Each worker's CPU, given `online` CPUs.
    pub fn cpus(&self, online: usize) -> Vec<usize> {
        let online = online.max(1);
        match self {
            Workers::PerCpu => (0..online).collect(),
            Workers::Count(n) => (0..usize::from(*n)).map(|i| i % online).collect(),
            Workers::Cpus(c) => c.iter().map(|&c| usize::from(c)).collect(),
        }
    }
}

/// `metrics:`: where the Prometheus / OpenMetrics endpoint listens (see `control::metrics`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// The TCP address `GET /metrics` is served on.
    pub listen: std::net::SocketAddr,
}

/// The address `metrics:` listens on when it gives none.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9469";
const METRICS_KEYS: &[&str] = &["listen"];

/// `migration:`: where this data plane takes VRs migrated to it (`listen`), the secret the
/// migration channel's two ends prove they share (HMAC-SHA256 over fresh challenges), and the
/// addresses migrations may come from (`peers`; none: any that knows the secret).
#[derive(Clone, PartialEq, Eq)]
pub struct MigrationConfig {
    pub listen: Option<std::net::SocketAddr>,
    pub secret: Vec<u8>,
    pub peers: Vec<std::net::IpAddr>,
    /// How long the source waits at the stop for the destination's commit before it abandons
    /// the move (`stop_timeout_ms`).
    pub stop_timeout: std::time::Duration,
}

impl std::fmt::Debug for MigrationConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of logs and error messages.
        f.debug_struct("MigrationConfig")
            .field("listen", &self.listen)
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .field("peers", &self.peers)
            .field("stop_timeout", &self.stop_timeout)
            .finish()
    }
}

const MIGRATION_KEYS: &[&str] = &["listen", "secret", "peers", "stop_timeout_ms"];
/// `stop_timeout_ms` when the file gives none: the VR is down at both ends for at most this long
/// when a destination stalls at the stop.
pub const DEFAULT_STOP_TIMEOUT_MS: u64 = 500;
/// `(key, lo, hi)` of `stop_timeout_ms`: below 20 ms a loaded destination would miss it; above
/// 30 s (the migration's other timeouts) it would not bound anything.
const STOP_TIMEOUT_MS: (&str, u64, u64) = ("stop_timeout_ms", 20, 30_000);
/// The shortest secret taken: 16 bytes (128 bits) of text.
pub const MIN_MIGRATION_SECRET: usize = 16;

/// How one VR runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VrSchedule {
    /// The worker it runs on (with its cell); `None`: placed automatically.
    pub worker: Option<u16>,
    /// Its budget per period; `None`: unlimited.
    pub reservation: Option<Reservation>,
    /// Packets it may process per burst (1..=256); `None`: a whole burst.
    pub batch: Option<u16>,
    /// Replicas it runs as, one per worker, flows spread over them by the flow hash
    /// (`dataplane::replica`); `None`: one, a plain VR.
    pub replicas: Option<u16>,
}

impl VrSchedule {
    /// How many copies of the VR run: its replicas, or 1.
    pub fn copies(&self) -> usize {
        usize::from(self.replicas.unwrap_or(1))
    }
}

/// One cell of the host: indices into the topology's ports, VRs and switches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellPlan {
    pub ports: Vec<PortId>,
    pub vrs: Vec<usize>,
    pub switches: Vec<usize>,
}

const MAX_WORKERS: u64 = 1024;
/// CPUs a worker may be pinned to (the kernel's `CPU_SETSIZE`).
const MAX_CPU: u64 = 1023;
const RESERVATION_KEYS: &[&str] = &["packets", "time_us", "period_us", "weight"];
/// A reservation's period when the file gives none, in microseconds.
pub const DEFAULT_PERIOD_US: u64 = 1_000;
/// `(key, lo, hi)` of every reservation number.
const PACKETS: (&str, u64, u64) = ("packets", 1, 1_000_000_000);
const TIME_US: (&str, u64, u64) = ("time_us", 1, 10_000_000);
const PERIOD_US: (&str, u64, u64) = ("period_us", 10, 10_000_000);
const WEIGHT: (&str, u64, u64) = ("weight", 0, 1_000);
/// Packets a burst holds.
const MAX_BATCH: u64 = ports::MAX_BURST as u64;

/// `workers:`: a count, or a list of CPUs.
pub(super) fn workers(v: &Value) -> Result<Workers> {
    if v.is_list() {
        let mut cpus: Vec<u16> = Vec::new();
        for c in v.list()? {
            let cpu: u16 = c.int("CPU", 0, MAX_CPU)?;
            if let Some(i) = cpus.iter().position(|&x| x == cpu) {
                return Err(c.bad(
                    c.text()?,
                    format_args!("CPU {cpu} is listed twice (first as worker {i})"),
                ));
            }
            cpus.push(cpu);
        }
        if cpus.is_empty() {
            return Err(v.error("workers: list at least one CPU, or give a count"));
        }
        return Ok(Workers::Cpus(cpus));
    }
    Ok(Workers::Count(v.int("worker count", 1, MAX_WORKERS)?))
}

/// `idle:`: what a worker does when its ports have no traffic. The file's names are `poll`
/// ([`Idle::Spin`]), `adaptive` and `interrupt`; [`Idle::Yield`] is for tests and benchmarks
/// that share CPUs, not for a file.
pub(super) fn idle(v: &Value) -> Result<Idle> {
    match v.text()? {
        "poll" => Ok(Idle::Spin),
        "adaptive" => Ok(Idle::Adaptive),
        "interrupt" => Ok(Idle::Interrupt),
        t => Err(v.bad(t, format_args!("idle must be poll, adaptive or interrupt, not {t:?}"))),
    }
}

/// `metrics:`: a mapping with an optional `listen:` address (`IP:PORT`, `[IPv6]:PORT`; port
/// 1..=65535), default [`DEFAULT_METRICS_LISTEN`].
pub(super) fn metrics(v: &Value) -> Result<MetricsConfig> {
    let m = v.map(METRICS_KEYS)?;
    let Some(l) = m.get("listen") else {
        let listen = DEFAULT_METRICS_LISTEN.parse().expect("the default address parses");
        return Ok(MetricsConfig { listen });
    };
    let t = l.text()?;
    let listen: std::net::SocketAddr = t.parse().map_err(|_| {
        l.bad(t, format_args!("listen must be IP:PORT (127.0.0.1:9469, \"[::1]:9469\"), not {t:?}"))
    })?;
    if listen.port() == 0 {
        return Err(l.bad(t, "listen needs a port (1..=65535) that Prometheus can be pointed at"));
    }
    Ok(MetricsConfig { listen })
}

/// `migration:`: `secret` (required, at least [`MIN_MIGRATION_SECRET`] bytes), `listen`
/// (`IP:PORT`, optional: a host that only sends VRs listens nowhere), `peers` (addresses).
pub(super) fn migration(v: &Value) -> Result<MigrationConfig> {
    let m = v.map(MIGRATION_KEYS)?;
    let sv = m.req("secret")?;
    let secret = sv.text()?;
    if secret.len() < MIN_MIGRATION_SECRET {
        return Err(sv.bad(
            "(hidden)",
            format_args!(
                "secret is {} bytes; give at least {MIN_MIGRATION_SECRET} (e.g. 32 random hex digits)",
                secret.len()
            ),
        ));
    }
    let listen = match m.get("listen") {
        None => None,
        Some(l) => {
            let t = l.text()?;
            let a: std::net::SocketAddr = t.parse().map_err(|_| {
                l.bad(t, format_args!("listen must be IP:PORT (10.0.0.1:9470), not {t:?}"))
            })?;
            if a.port() == 0 {
                return Err(l.bad(t, "listen needs a port (1..=65535)"));
            }
            Some(a)
        }
    };
    let mut peers = Vec::new();
    for pv in m.list("peers")? {
        let t = pv.text()?;
        peers.push(
            t.parse().map_err(|_| pv.bad(t, format_args!("a peer is an IP address, not {t:?}")))?,
        );
    }
    let (key, lo, hi) = STOP_TIMEOUT_MS;
    let stop_ms = m.get(key).map(|x| x.int::<u64>(key, lo, hi)).transpose()?;
    Ok(MigrationConfig {
        listen,
        secret: secret.as_bytes().to_vec(),
        peers,
        stop_timeout: std::time::Duration::from_millis(stop_ms.unwrap_or(DEFAULT_STOP_TIMEOUT_MS)),
    })
}

/// A VR's `worker:`, `reservation:` and `batch:`; also the `worker:` value, for placement
/// errors found later.
pub(super) fn schedule<'a>(
    v: &Value<'a>,
    workers: &Workers,
) -> Result<(VrSchedule, Option<Value<'a>>)> {
    let m = v.mapping()?;
    let worker_v = m.get("worker");
    let worker = match &worker_v {
        None => None,
        Some(wv) => {
            let w: u16 = wv.int("worker", 0, MAX_WORKERS - 1)?;
            if let Some(n) = workers.count() {
                if usize::from(w) >= n {
                    return Err(wv.bad(
                        wv.text()?,
                        format_args!(
                            "worker {w} is out of range: the topology has {n} worker{} (0..={})",
                            if n == 1 { "" } else { "s" },
                            n - 1
                        ),
                    ));
                }
            }
            Some(w)
        }
    };
    let reservation = m.get("reservation").map(|r| reservation(&r)).transpose()?;
    let batch = m.get("batch").map(|b| b.int("batch", 1, MAX_BATCH)).transpose()?;
    let replicas = replicas(v, workers, worker)?;
    Ok((VrSchedule { worker, reservation, batch, replicas }, worker_v))
}

/// The most replicas a VR may have.
const MAX_REPLICAS: u64 = dataplane::replica::MAX_REPLICAS as u64;

/// A VR's `replicas:` (1..=64, at most the topology's workers when it fixes them; not with
/// `worker:`, since replicas are placed one per worker). 1 is a plain VR (`None`).
fn replicas(v: &Value, workers: &Workers, worker: Option<u16>) -> Result<Option<u16>> {
    let m = v.mapping()?;
    let Some(rv) = m.get("replicas") else { return Ok(None) };
    let n: u16 = rv.int("replicas", 1, MAX_REPLICAS)?;
    if n == 1 {
        return Ok(None);
    }
    if worker.is_some() {
        return Err(rv.bad(rv.text()?, format_args!("replicas: {n} with worker: replicas are placed one per worker (replica r on worker r); drop worker")));
    }
    if let Some(w) = workers.count() {
        if usize::from(n) > w {
            return Err(rv.bad(
                rv.text()?,
                format_args!(
                    "replicas: {n}, but the topology has {w} worker{}: each replica needs its own",
                    if w == 1 { "" } else { "s" }
                ),
            ));
        }
    }
    Ok(Some(n))
}

/// Refuses what a replicated VR cannot be yet, at its `replicas:`: sharing its cell (ports,
/// a switch, a link) with another VR or a switch, and ports that cannot be received per
/// replica (each replica owns one queue of each of its ports: `mem` ports are made with one
/// queue per replica, `afpacket` ports open a socket per replica in a fanout group, `memif`
/// ports need one ring pair per replica).
pub(super) fn check_replicas(
    plans: &[CellPlan],
    ports: &[PortSpec],
    vrs: &[VrConfig],
    schedule: &[VrSchedule],
    replica_vs: &[Option<Value>],
) -> Result<()> {
    for plan in plans {
        for &v in &plan.vrs {
            let Some(n) = schedule[v].replicas else { continue };
            let rv = replica_vs[v].as_ref().expect("a replicated VR has its replicas value");
            let name = &vrs[v].name;
            if plan.vrs.len() > 1 || !plan.switches.is_empty() {
                return Err(rv.bad(rv.text()?, format_args!("vr {name} has replicas: {n} but shares its ports with another VR or a switch: a replicated VR must have its ports to itself")));
            }
            for &p in &plan.ports {
                let spec = &ports[usize::from(p)];
                match &spec.kind {
                    PortKind::Mem { .. } | PortKind::AfPacket(..) | PortKind::AfXdp(..) => {}
                    PortKind::Memif(m) if usize::from(m.queues) == usize::from(n) => {}
                    PortKind::Memif(m) => {
                        return Err(rv.bad(rv.text()?, format_args!("vr {name} has replicas: {n}, but its memif port {} has queues: {}: give it queues: {n} (one ring pair per replica)", spec.name, m.queues)));
                    }
                    _ => {
                        return Err(rv.bad(rv.text()?, format_args!("vr {name} has replicas: {n}, but its port {} is not a mem, afpacket, memif or afxdp port: only those are received per replica so far", spec.name)));
                    }
                }
            }
        }
    }
    Ok(())
}

/// A port's `burst:`.
/// Keys of `ingress_queues:`.
const INGRESS_KEYS: &[&str] = &["limit", "quantum", "per_pass"];

/// `ingress_queues:`: per-VR queues on ports shared by several VRs (`dataplane::IngressQueues`),
/// each key optional: `limit` (frames per VR queue, 1..=4096), `quantum` (frames per VR turn,
/// 1..=256), `per_pass` (frames served per pass, 1..=256). `{}` takes the defaults.
pub(super) fn ingress_queues(v: &Value) -> Result<dataplane::IngressQueues> {
    let m = v.map(INGRESS_KEYS)?;
    let mut q = dataplane::IngressQueues::default();
    let max = MAX_BATCH;
    for (key, field, hi) in [
        ("limit", &mut q.limit, u64::from(dataplane::MAX_INGRESS_QUEUE)),
        ("quantum", &mut q.quantum, max),
        ("per_pass", &mut q.per_pass, max),
    ] {
        if let Some(x) = m.get(key) {
            *field = x.int(key, 1, hi)?;
        }
    }
    Ok(q)
}

pub(super) fn burst(v: &Value) -> Result<u16> {
    v.int("burst", 1, MAX_BATCH)
}

fn reservation(v: &Value) -> Result<Reservation> {
    let m = v.map(RESERVATION_KEYS)?;
    let num = |(key, lo, hi): (&str, u64, u64)| m.get(key).map(|x| x.int::<u64>(key, lo, hi));
    let period_us = num(PERIOD_US).transpose()?.unwrap_or(DEFAULT_PERIOD_US);
    let weight = num(WEIGHT).transpose()?.unwrap_or(0) as u32;
    let budget = match (m.get("packets"), m.get("time_us")) {
        (Some(p), None) => Budget::Packets(p.int(PACKETS.0, PACKETS.1, PACKETS.2)?),
        (None, Some(t)) => {
            let us: u64 = t.int(TIME_US.0, TIME_US.1, TIME_US.2)?;
            if us > period_us {
                return Err(t.bad(t.text()?, format_args!("time_us {us} is longer than the period ({period_us} us): a VR gets at most the whole period")));
            }
            Budget::Time(us * 1_000)
        }
        (Some(_), Some(t)) => {
            return Err(t.error("a reservation is packets or time_us per period, not both"))
        }
        (None, None) => {
            return Err(v.error(
                "a reservation needs packets or time_us (what the VR may spend per period)",
            ))
        }
    };
    Ok(Reservation { budget, period_ns: period_us * 1_000, weight })
}

/// Why reservation words (see [`reservation_from_words`]) were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReservationWordsError {
    #[error("expected key=value, not {word:?} (keys: {keys}; or none)")]
    NotKeyValue { word: String, keys: String },
    #[error("unknown key {key:?} (keys: {keys})")]
    UnknownKey { key: String, keys: String },
    #[error("{key} must be an integer in {lo}..={hi}, not {value:?}")]
    NotInteger { key: String, lo: u64, hi: u64, value: String },
    #[error("{key} {value} is out of range {lo}..={hi}")]
    OutOfRange { key: String, value: u64, lo: u64, hi: u64 },
    #[error("{0} is given twice")]
    Twice(String),
    #[error("time_us {time_us} is longer than the period ({period_us} us): a VR gets at most the whole period")]
    TimeOverPeriod { time_us: u64, period_us: u64 },
    #[error("packets or time_us, not both")]
    Both,
    #[error("give packets=N or time_us=N (or none)")]
    Neither,
}

/// A reservation written as words, for the control socket and the command line:
/// `packets=N` or `time_us=N`, optionally `period_us=N` and `weight=N` (same ranges and default
/// as in a topology file); or `none`, to remove it.
pub fn reservation_from_words(
    words: &[&str],
) -> std::result::Result<Option<Reservation>, ReservationWordsError> {
    use ReservationWordsError as E;
    if words == ["none"] {
        return Ok(None);
    }
    let mut vals: [Option<u64>; 4] = [None; 4];
    let keys = [PACKETS, TIME_US, PERIOD_US, WEIGHT];
    for w in words {
        let Some((k, v)) = w.split_once('=') else {
            return Err(E::NotKeyValue { word: w.to_string(), keys: RESERVATION_KEYS.join(", ") });
        };
        let Some(i) = keys.iter().position(|x| x.0 == k) else {
            return Err(E::UnknownKey { key: k.into(), keys: RESERVATION_KEYS.join(", ") });
        };
        let (_, lo, hi) = keys[i];
        let n: u64 = v
            .parse()
            .ok()
            .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| E::NotInteger { key: k.into(), lo, hi, value: v.into() })?;
        if !(lo..=hi).contains(&n) {
            return Err(E::OutOfRange { key: k.into(), value: n, lo, hi });
        }
        if vals[i].replace(n).is_some() {
            return Err(E::Twice(k.into()));
        }
    }
    let [packets, time_us, period_us, weight] = vals;
    let period_us = period_us.unwrap_or(DEFAULT_PERIOD_US);
    let budget = match (packets, time_us) {
        (Some(p), None) => Budget::Packets(p),
        (None, Some(t)) if t > period_us => {
            return Err(E::TimeOverPeriod { time_us: t, period_us })
        }
        (None, Some(t)) => Budget::Time(t * 1_000),
        (Some(_), Some(_)) => return Err(E::Both),
        (None, None) => return Err(E::Neither),
    };
    Ok(Some(Reservation {
        budget,
        period_ns: period_us * 1_000,
        weight: weight.unwrap_or(0) as u32,
    }))
}

/// Splits the host into cells: connected groups of ports, through VR interfaces, switch
/// members and internal links. Every port, VR and switch is in exactly one cell; cells are in
/// order of their first port (VRs and switches without ports last).
pub fn cells(ports: &[PortSpec], vrs: &[VrConfig], switches: &[SwitchConfig]) -> Vec<CellPlan> {
    let mut uf: Vec<usize> = (0..ports.len()).collect();
    fn root(uf: &mut [usize], mut i: usize) -> usize {
        while uf[i] != i {
            uf[i] = uf[uf[i]];
            i = uf[i];
        }
        i
    }
    let join = |uf: &mut Vec<usize>, a: usize, b: usize| {
        let (ra, rb) = (root(uf, a), root(uf, b));
        uf[ra.max(rb)] = ra.min(rb);
    };
    for (i, p) in ports.iter().enumerate() {
        if let PortKind::Link { peer } = p.kind {
            join(&mut uf, i, usize::from(peer));
        }
    }
    for vr in vrs {
        for w in vr.interfaces.windows(2) {
            join(&mut uf, usize::from(w[0].port), usize::from(w[1].port));
        }
    }
    for (i, p) in ports.iter().enumerate() {
        if let PortKind::Mirror { vr, iface, .. } = p.kind {
            join(&mut uf, i, usize::from(vrs[vr].interfaces[usize::from(iface)].port));
        }
    }
    for sw in switches {
        for w in sw.members.windows(2) {
            join(&mut uf, usize::from(w[0].port), usize::from(w[1].port));
        }
    }
    let mut plans: Vec<CellPlan> = Vec::new();
    let mut of_root: Vec<Option<usize>> = vec![None; ports.len()];
    for p in 0..ports.len() {
        let r = root(&mut uf, p);
        let c = *of_root[r].get_or_insert_with(|| {
            plans.push(CellPlan::default());
            plans.len() - 1
        });
        plans[c].ports.push(p as PortId);
    }
    let mut cell_of = |port: Option<PortId>, plans: &mut Vec<CellPlan>| match port {
        Some(p) => of_root[root(&mut uf, usize::from(p))].expect("every port has a cell"),
        None => {
            plans.push(CellPlan::default());
            plans.len() - 1
        }
    };
    for (v, vr) in vrs.iter().enumerate() {
        let c = cell_of(vr.interfaces.first().map(|i| i.port), &mut plans);
        plans[c].vrs.push(v);
    }
    for (s, sw) in switches.iter().enumerate() {
        let c = cell_of(sw.members.first().map(|m| m.port), &mut plans);
        plans[c].switches.push(s);
    }
    plans
}

/// Refuses VRs of one cell placed on different workers, at the second one's `worker:`.
pub(super) fn check_placement(
    plans: &[CellPlan],
    vrs: &[VrConfig],
    schedule: &[VrSchedule],
    worker_vs: &[Option<Value>],
) -> Result<()> {
    for plan in plans {
        let mut first: Option<usize> = None;
        for &v in &plan.vrs {
            let Some(w) = schedule[v].worker else { continue };
            let Some(f) = first else {
                first = Some(v);
                continue;
            };
            let fw = schedule[f].worker.unwrap_or(w);
            if fw != w {
                let wv = worker_vs[v].as_ref().expect("a placed VR has its worker value");
                let line = worker_vs[f].as_ref().map_or(0, |x| x.line());
                return Err(wv.bad(
                    wv.text()?,
                    format_args!(
                        "vr {} is placed on worker {w}, but vr {} (line {line}) is on worker {fw} and they share ports, a switch or a link: they run on one worker",
                        vrs[v].name, vrs[f].name
                    ),
                ));
            }
        }
    }
    Ok(())
}
