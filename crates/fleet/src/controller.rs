//! The fleet's controller: one at a time, elected through etcd, places the fleet's VRs on the
//! live hosts and writes each host's share as its desired topology.
//!
//! Election: each controller holds a lease of its own and tries, every tick, a transaction
//! that creates [`keys::LEADER`] on that lease if no one holds it. The holder leads until its
//! lease ends (it stops, crashes or is cut off for a TTL); then etcd deletes the key and the
//! next controller's transaction takes it. Every write of the leader is a transaction guarded
//! by "the leader key still holds my name", so a controller that lost the lead behind its back
//! writes nothing.
//!
//! Each round the leader reads the fleet desired state, the live hosts, the cordons, the last
//! placement and the hosts' desired keys, computes [`plan`] (pure: tested without etcd), and
//! writes what changed: a host's desired topology only when its text changed, the placement
//! only when it changed. A host whose key has gone (its lease ended) or that is cordoned gets
//! its VRs placed elsewhere; a host that holds a desired key and nothing placed gets an empty
//! topology (so a host that comes back does not run VRs that now run elsewhere).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, Txn, TxnOp, TxnOpResponse,
};
use tracing::{info, warn};

use crate::call::{get, timed};
use crate::fleetdoc::{FleetDoc, Underlay};
use crate::keys::{self, HEADER};
use crate::migration;
use crate::placement::{self, Capacity, Placement, PLACEMENT_VERSION};
use crate::record::{HostRecord, MAX_VALUE};
use crate::FleetError;

/// At most this many keys are read under each prefix.
const MAX_KEYS: i64 = 10_000;
/// Operations per write transaction (etcd's default limit is 128).
const TXN_OPS: usize = 64;

/// What a round reads from etcd.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// The fleet desired state and its revision.
    pub doc: Option<(i64, String)>,
    /// Live hosts (their keys exist).
    pub hosts: Vec<HostRecord>,
    pub cordoned: BTreeSet<String>,
    pub prev: Option<Placement>,
    /// Each host's desired topology now.
    pub desired: HashMap<String, String>,
}

/// What a round writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Outputs {
    pub placement: Placement,
    /// (host, topology) for each desired key that changes.
    pub topologies: Vec<(String, String)>,
}

/// One round's decisions, from what etcd holds: pure.
pub fn plan(inp: &Inputs, leader: &str) -> Outputs {
    let mut p = Placement {
        v: PLACEMENT_VERSION,
        leader: leader.to_string(),
        cordoned: inp.cordoned.iter().cloned().collect(),
        ..Default::default()
    };
    let Some((rev, text)) = &inp.doc else {
        return Outputs { placement: p, topologies: Vec::new() };
    };
    p.revision = *rev;
    let doc = match FleetDoc::parse(text, &format!("etcd:{}@{rev}", keys::FLEET_DESIRED)) {
        Ok(d) => d,
        Err(e) => {
            p.error = Some(e.to_string());
            return Outputs { placement: p, topologies: Vec::new() };
        }
    };
    let caps = capacities(inp);
    let prev = inp.prev.as_ref();
    p.vrs = placement::place(&doc.units(), &caps, &prev.map(Placement::hosts).unwrap_or_default());
    if let Some(prev) = prev {
        keep_moved_from(&mut p, prev);
    }
    let at = p.hosts();
    let history = prev.map(Placement::vnis).unwrap_or_default();
    let vnis = placement::vnis(&doc.segment_names(), &history, &doc.vnis);
    p.segments = doc.segments(&at, &vnis);
    let placed: Vec<(String, String)> =
        (p.vrs.iter()).filter_map(|v| Some((v.vr.clone(), v.host.clone()?))).collect();
    p.migrating = migration::in_flight(&placed, &inp.hosts, prev);
    // A VR in flight is on both hosts' segments until it lands: the others send to both.
    for m in &p.migrating {
        for s in p.segments.iter_mut().filter(|s| doc.vr_on(&m.vr, &s.name)) {
            if !s.hosts.contains(&m.from) {
                s.hosts.push(m.from.clone());
                s.hosts.sort();
            }
        }
    }
    let incoming: BTreeSet<String> = p.migrating.iter().map(|m| m.vr.clone()).collect();
    let under: HashMap<String, Underlay> = inp
        .hosts
        .iter()
        .map(|h| {
            let u = Underlay {
                addr: h.underlay,
                dev: h.underlay_dev.clone(),
                netns: h.underlay_netns.clone(),
                mtu: h.underlay_mtu,
            };
            (h.name.clone(), u)
        })
        .collect();
    let mut names: BTreeSet<&String> = inp.hosts.iter().map(|h| &h.name).collect();
    names.extend(inp.desired.keys());
    let mut topologies = Vec::new();
    let mut errors = Vec::new();
    for h in names {
        let marks: String = p.migrating.iter().filter(|m| &m.from == h).map(|m| m.mark()).collect();
        let t = doc.host_topology(h, &at, &p.segments, &under, &incoming);
        let text = format!("{HEADER}{marks}{}", t.emit());
        if inp.desired.get(h) == Some(&text) {
            continue;
        }
        // Checked as the host will read it: a topology the host would refuse is not written.
        match control::topology::Topology::parse(&text, &keys::desired(h), Path::new(".")) {
            Ok(_) => topologies.push((h.clone(), text)),
            Err(e) => errors.push(format!("host {h}: {e}")),
        }
    }
    if !errors.is_empty() {
        p.error = Some(errors.join("; "));
    }
    Outputs { placement: p, topologies }
}

/// A VR that stays where its last move put it keeps saying where it came from: without this
/// the round after a move (the VR now `kept`) erased `moved_from`, so a failover or drain was
/// visible in the placement for one round only.
fn keep_moved_from(p: &mut Placement, prev: &Placement) {
    let before: HashMap<&str, &placement::VrPlace> =
        prev.vrs.iter().map(|v| (v.vr.as_str(), v)).collect();
    for v in p.vrs.iter_mut().filter(|v| v.moved_from.is_none() && v.host.is_some()) {
        if let Some(b) = before.get(v.vr.as_str()).filter(|b| b.host == v.host) {
            v.moved_from = b.moved_from.clone();
        }
    }
}

/// The live hosts as placement sees them.
fn capacities(inp: &Inputs) -> Vec<Capacity> {
    (inp.hosts.iter())
        .map(|h| Capacity {
            name: h.name.clone(),
            cpu: h.offer.workers as f64 * h.offer.cpu_share,
            memory_mib: h.offer.memory_mib,
            schedulable: !inp.cordoned.contains(&h.name),
        })
        .collect()
}

/// `fleet rebalance`'s decision, from what etcd holds: pure. The moves that even the load
/// ([`placement::rebalance`]) and the placement that records them (each moved VR on its new
/// host, `moved_from` its old one), or `None` when nothing moves. The leader then keeps each
/// VR where this placement says (stable placement) and moves it live.
pub fn rebalance_plan(
    inp: &Inputs,
) -> Result<(Vec<placement::Rebalanced>, Option<Placement>), FleetError> {
    let none = |msg: &str| FleetError::Record { what: "fleet rebalance".into(), msg: msg.into() };
    let Some((rev, text)) = &inp.doc else {
        return Err(none("no fleet desired state in etcd (routeplex fleet apply first)"));
    };
    let Some(prev) = &inp.prev else {
        return Err(none("no placement in etcd yet: is a fleet controller running?"));
    };
    if let Some(e) = &prev.error {
        return Err(none(&format!("the last placement has an error: {e}")));
    }
    let doc = FleetDoc::parse(text, &format!("etcd:{}@{rev}", keys::FLEET_DESIRED))?;
    let (moves, after) = placement::rebalance(&doc.units(), &capacities(inp), &prev.hosts());
    if moves.is_empty() {
        return Ok((moves, None));
    }
    let mut p = prev.clone();
    for v in &mut p.vrs {
        let Some(new) = after.get(&v.vr) else { continue };
        if v.host.as_ref() != Some(new) {
            v.moved_from = v.host.replace(new.clone());
            v.why = placement::Why::Kept;
        }
    }
    Ok((moves, Some(p)))
}

/// A controller's settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub etcd: Vec<String>,
    /// Unique among the controllers (default: host name and process id).
    pub name: String,
    /// Its lease's TTL: a leader that dies is replaced this long after its last renewal.
    pub ttl: Duration,
}

/// What a controller knows, for its owner and tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ControllerState {
    pub leader: bool,
    /// Rounds it led.
    pub rounds: u64,
    /// Desired keys it wrote.
    pub writes: u64,
    pub last_error: Option<String>,
}

const RUN: u8 = 0;
const STOP: u8 = 1;
const HALT: u8 = 2;

/// A running controller; stops (revoking its lease, so another takes over at once) on
/// [`ControllerHandle::stop`] or drop.
pub struct ControllerHandle {
    stop: Arc<AtomicU8>,
    state: Arc<Mutex<ControllerState>>,
    thread: Option<JoinHandle<()>>,
}

impl ControllerHandle {
    pub fn state(&self) -> ControllerState {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops and revokes the lease: the lead passes at once.
    pub fn stop(mut self) {
        self.finish(STOP);
    }

    /// Stops without a word, as a crash would: the lead passes when the lease's TTL ends.
    pub fn halt(mut self) {
        self.finish(HALT);
    }

    /// Waits for the controller (it runs until stopped, or forever).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn finish(&mut self, how: u8) {
        self.stop.store(how, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ControllerHandle {
    fn drop(&mut self) {
        self.finish(STOP);
    }
}

/// Starts a controller on its own thread with a current-thread tokio runtime.
pub fn spawn(cfg: ControllerConfig) -> Result<ControllerHandle, FleetError> {
    let stop = Arc::new(AtomicU8::new(RUN));
    let state = Arc::new(Mutex::new(ControllerState::default()));
    let rt = runtime()?;
    let (flag, shared) = (stop.clone(), state.clone());
    let thread = std::thread::Builder::new()
        .name("fleet-controller".into())
        .spawn(move || rt.block_on(Ctl::new(cfg, shared).main(&flag)))
        .map_err(|e| FleetError::Io { path: "fleet controller thread".into(), source: e })?;
    Ok(ControllerHandle { stop, state, thread: Some(thread) })
}

fn runtime() -> Result<tokio::runtime::Runtime, FleetError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| FleetError::Io { path: "tokio runtime".into(), source: e })
}

struct Ctl {
    cfg: ControllerConfig,
    tick: Duration,
    call: Duration,
    shared: Arc<Mutex<ControllerState>>,
    st: ControllerState,
    client: Option<Client>,
    lease: Option<(i64, Option<(LeaseKeeper, LeaseKeepAliveStream)>)>,
    logged: Option<String>,
}

impl Ctl {
    fn new(cfg: ControllerConfig, shared: Arc<Mutex<ControllerState>>) -> Ctl {
        let t = crate::record::Timing::for_ttl(cfg.ttl);
        Ctl {
            tick: t.tick,
            call: t.call,
            cfg,
            shared,
            st: ControllerState::default(),
            client: None,
            lease: None,
            logged: None,
        }
    }

    async fn main(&mut self, stop: &AtomicU8) {
        info!(name = %self.cfg.name, "fleet controller started");
        while stop.load(Ordering::Relaxed) == RUN {
            let t0 = Instant::now();
            match self.round().await {
                Ok(()) => self.st.last_error = None,
                Err(e) => self.failed(e),
            }
            if let Ok(mut s) = self.shared.lock() {
                *s = self.st.clone();
            }
            while stop.load(Ordering::Relaxed) == RUN && t0.elapsed() < self.tick {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if stop.load(Ordering::Relaxed) == STOP {
            if let (Some(c), Some((id, _))) = (self.client.as_mut(), self.lease.as_ref()) {
                let _ = tokio::time::timeout(self.call, c.lease_revoke(*id)).await;
            }
        }
        info!(name = %self.cfg.name, "fleet controller stopped");
    }

    fn failed(&mut self, e: FleetError) {
        let msg = e.to_string();
        if self.logged.as_deref() != Some(msg.as_str()) {
            warn!(name = %self.cfg.name, error = %msg, "fleet controller");
            self.logged = Some(msg.clone());
        }
        self.st.last_error = Some(msg);
        if matches!(e, FleetError::LeaseLost(_)) {
            self.lease = None;
            self.st.leader = false;
        }
    }

    async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, FleetError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        timed(self.call, what, f).await
    }

    async fn round(&mut self) -> Result<(), FleetError> {
        if self.client.is_none() {
            let opts =
                ConnectOptions::new().with_connect_timeout(self.call).with_timeout(self.call * 2);
            let etcd = &self.cfg.etcd;
            let c = self.call("connect", || Client::connect(etcd, Some(opts.clone()))).await?;
            self.client = Some(c);
        }
        let mut c = self.client.clone().expect("connected above");
        if self.lease.is_none() {
            let ttl = self.cfg.ttl.as_secs().max(1) as i64;
            let r = self.call("lease grant", || grant(&c, ttl)).await?;
            self.lease = Some((r.id(), None));
        }
        self.renew(&mut c).await?;
        let id = self.lease.as_ref().expect("granted").0;
        let was = self.st.leader;
        self.st.leader = self.campaign(&mut c, id).await?;
        if self.st.leader != was {
            info!(name = %self.cfg.name, leader = self.st.leader, "fleet controller: leadership changed");
        }
        if self.st.leader {
            let inp = read_inputs(&mut c, self.call).await?;
            let out = plan(&inp, &self.cfg.name);
            self.commit(&mut c, &inp, &out).await?;
            self.st.rounds += 1;
        }
        Ok(())
    }

    async fn renew(&mut self, c: &mut Client) -> Result<(), FleetError> {
        let call = self.call;
        let (id, keeper) = self.lease.as_mut().expect("granted before renewal");
        let id = *id;
        if keeper.is_none() {
            let open = || {
                let mut c = c.clone();
                async move { c.lease_keep_alive(id).await }
            };
            *keeper = Some(timed(call, "lease keep-alive stream", open).await?);
        }
        let (k, s) = keeper.as_mut().expect("opened above");
        let r = tokio::time::timeout(call, async {
            k.keep_alive().await?;
            s.message().await
        })
        .await;
        match r {
            Ok(Ok(Some(m))) if m.ttl() > 0 => Ok(()),
            Ok(Ok(Some(_))) => Err(FleetError::LeaseLost(id)),
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                *keeper = None;
                Err(FleetError::Timeout { what: "lease keep-alive", ms: call.as_millis() as u64 })
            }
        }
    }

    /// Whether this controller leads: it takes the leader key if free, else reads its holder.
    async fn campaign(&mut self, c: &mut Client, id: i64) -> Result<bool, FleetError> {
        let name = self.cfg.name.as_str();
        let txn = Txn::new()
            .when(vec![Compare::create_revision(keys::LEADER, CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(keys::LEADER, name, Some(PutOptions::new().with_lease(id)))])
            .or_else(vec![TxnOp::get(keys::LEADER, None)]);
        let r = self.call("campaign", || send(c, &txn)).await?;
        if r.succeeded() {
            return Ok(true);
        }
        Ok(r.op_responses().iter().any(|op| match op {
            TxnOpResponse::Get(g) => {
                g.kvs().first().is_some_and(|kv| kv.value() == name.as_bytes() && kv.lease() == id)
            }
            _ => false,
        }))
    }

    /// Writes what changed, guarded by the lead.
    async fn commit(
        &mut self,
        c: &mut Client,
        inp: &Inputs,
        out: &Outputs,
    ) -> Result<(), FleetError> {
        let mut ops: Vec<TxnOp> = out
            .topologies
            .iter()
            .map(|(h, t)| TxnOp::put(keys::desired(h), t.as_str(), None))
            .collect();
        let mut stored = out.placement.clone();
        // No fleet desired state yet: nothing to say (hand-written desired keys stay as they are).
        if inp.doc.is_some() && inp.prev.as_ref() != Some(&stored) {
            stored.v = PLACEMENT_VERSION;
            let json = serde_json::to_vec(&stored).map_err(|e| FleetError::Record {
                what: keys::PLACEMENT.into(),
                msg: e.to_string(),
            })?;
            ops.push(TxnOp::put(keys::PLACEMENT, json, None));
        }
        for chunk in ops.chunks(TXN_OPS) {
            let guard = Compare::value(keys::LEADER, CompareOp::Equal, self.cfg.name.as_str());
            let txn = Txn::new().when(vec![guard]).and_then(chunk.to_vec());
            let r = self.call("write placement", || send(c, &txn)).await?;
            if !r.succeeded() {
                self.st.leader = false;
                return Ok(());
            }
        }
        for (h, _) in &out.topologies {
            info!(name = %self.cfg.name, host = %h, revision = out.placement.revision, "fleet controller: desired topology written");
        }
        self.st.writes += out.topologies.len() as u64;
        Ok(())
    }
}

/// A transaction, on a clone of the client (so [`timed`] can send it again).
fn send(
    c: &Client,
    txn: &Txn,
) -> impl std::future::Future<Output = Result<etcd_client::TxnResponse, etcd_client::Error>> {
    let (mut c, txn) = (c.clone(), txn.clone());
    async move { c.txn(txn).await }
}

fn grant(
    c: &Client,
    ttl: i64,
) -> impl std::future::Future<Output = Result<etcd_client::LeaseGrantResponse, etcd_client::Error>>
{
    let mut c = c.clone();
    async move { c.lease_grant(ttl, None).await }
}

fn text_of(what: &str, b: &[u8]) -> Result<String, FleetError> {
    let bad = |msg: String| FleetError::Record { what: what.to_string(), msg };
    if b.len() > MAX_VALUE {
        return Err(bad(format!("{} bytes, over the {MAX_VALUE}-byte limit", b.len())));
    }
    String::from_utf8(b.to_vec()).map_err(|e| bad(e.to_string()))
}

/// Reads what a round needs. Host records and desired keys that cannot be read are skipped
/// (logged): one bad record does not stop the fleet.
pub async fn read_inputs(c: &mut Client, call: Duration) -> Result<Inputs, FleetError> {
    let list = || Some(GetOptions::new().with_prefix().with_limit(MAX_KEYS));
    let mut inp = Inputs::default();
    let r = timed(call, "read fleet desired", || get(c, keys::FLEET_DESIRED, None)).await?;
    if let Some(kv) = r.kvs().first() {
        inp.doc = Some((kv.mod_revision(), text_of(keys::FLEET_DESIRED, kv.value())?));
    }
    let r = timed(call, "read hosts", || get(c, keys::HOSTS, list())).await?;
    for kv in r.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        match HostRecord::decode(&key, kv.value()) {
            Ok(h) => inp.hosts.push(h),
            Err(e) => warn!(error = %e, "fleet controller: host record skipped"),
        }
    }
    let r = timed(call, "read cordons", || get(c, keys::CORDON, list())).await?;
    for kv in r.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        if let Some(n) = keys::name_in(&key, keys::CORDON) {
            inp.cordoned.insert(n.to_string());
        }
    }
    let r = timed(call, "read placement", || get(c, keys::PLACEMENT, None)).await?;
    if let Some(kv) = r.kvs().first() {
        match crate::record::decode::<Placement>(keys::PLACEMENT, kv.value()) {
            Ok(p) if p.v == PLACEMENT_VERSION => inp.prev = Some(p),
            Ok(p) => warn!(version = p.v, "fleet controller: placement of another version ignored"),
            Err(e) => warn!(error = %e, "fleet controller: placement unreadable; placing afresh"),
        }
    }
    let r = timed(call, "read desired", || get(c, keys::DESIRED, list())).await?;
    for kv in r.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        if let (Some(n), Ok(t)) = (keys::name_in(&key, keys::DESIRED), text_of(&key, kv.value())) {
            inp.desired.insert(n.to_string(), t);
        }
    }
    Ok(inp)
}

/// Runs `f` with a connected client on a fresh current-thread runtime (the CLI's calls).
fn with_client<T>(
    etcd: &[String],
    call: Duration,
    f: impl for<'c> FnOnce(
        &'c mut Client,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<T, FleetError>> + 'c>,
    >,
) -> Result<T, FleetError> {
    runtime()?.block_on(async {
        let opts = ConnectOptions::new().with_connect_timeout(call).with_timeout(call);
        let mut c = timed(call, "connect", || Client::connect(etcd, Some(opts.clone()))).await?;
        f(&mut c).await
    })
}

/// `fleet apply`: stores a validated fleet document; returns the fleet revision.
pub fn store(etcd: &[String], text: &str, call: Duration) -> Result<i64, FleetError> {
    let text = text.to_string();
    with_client(etcd, call, move |c| {
        Box::pin(async move {
            let put = || {
                let (mut c, text) = (c.clone(), text.clone());
                async move { c.put(keys::FLEET_DESIRED, text, None).await }
            };
            let r = timed(call, "store fleet desired", put).await?;
            Ok(r.header().map_or(0, |h| h.revision()))
        })
    })
}

/// `fleet apply --dry-run`: the placement the leader would make of `text` now (nothing written).
pub fn dry_run(etcd: &[String], text: &str, call: Duration) -> Result<Placement, FleetError> {
    let text = text.to_string();
    with_client(etcd, call, move |c| {
        Box::pin(async move {
            let mut inp = read_inputs(c, call).await?;
            inp.doc = Some((0, text));
            Ok(plan(&inp, "dry-run").placement)
        })
    })
}

/// `fleet rebalance [--dry-run]`: the moves that even the load now; unless `dry_run`, the
/// placement that makes them is stored (only if the placement did not change since it was
/// read) and the leader carries them out, live where both hosts can.
pub fn rebalance(
    etcd: &[String],
    dry_run: bool,
    call: Duration,
) -> Result<Vec<placement::Rebalanced>, FleetError> {
    with_client(etcd, call, move |c| {
        Box::pin(async move {
            let inp = read_inputs(c, call).await?;
            let r = timed(call, "read placement", || get(c, keys::PLACEMENT, None)).await?;
            let seen = r.kvs().first().map_or(0, |kv| kv.mod_revision());
            let (moves, p) = rebalance_plan(&inp)?;
            let Some(p) = p.filter(|_| !dry_run) else { return Ok(moves) };
            let json = serde_json::to_vec(&p).map_err(|e| FleetError::Record {
                what: keys::PLACEMENT.into(),
                msg: e.to_string(),
            })?;
            let guard = Compare::mod_revision(keys::PLACEMENT, CompareOp::Equal, seen);
            let txn = Txn::new().when(vec![guard]).and_then(vec![TxnOp::put(
                keys::PLACEMENT,
                json,
                None,
            )]);
            let store = || {
                let (mut c, txn) = (c.clone(), txn.clone());
                async move { c.txn(txn).await }
            };
            if !timed(call, "store placement", store).await?.succeeded() {
                return Err(FleetError::Record {
                    what: "fleet rebalance".into(),
                    msg: "the placement changed meanwhile (the leader placed again): run it again"
                        .into(),
                });
            }
            Ok(moves)
        })
    })
}

/// `fleet drain` (`on`) and `fleet uncordon`.
pub fn cordon(etcd: &[String], host: &str, on: bool, call: Duration) -> Result<(), FleetError> {
    keys::check_name(host)
        .map_err(|e| FleetError::Record { what: format!("host {host:?}"), msg: e.to_string() })?;
    let key = keys::cordon(host);
    with_client(etcd, call, move |c| {
        Box::pin(async move {
            if on {
                let v = format!("{{\"since_ms\":{}}}", crate::record::now_ms());
                let put = || {
                    let (mut c, k, v) = (c.clone(), key.clone(), v.clone());
                    async move { c.put(k, v, None).await }
                };
                timed(call, "cordon", put).await?;
            } else {
                let delete = || {
                    let (mut c, k) = (c.clone(), key.clone());
                    async move { c.delete(k, None).await }
                };
                timed(call, "uncordon", delete).await?;
            }
            Ok(())
        })
    })
}

/// The placement as a table: VR, host, why.
pub fn render(p: &Placement) -> String {
    let mut rows = vec![["vr", "host", "why"].map(String::from).to_vec()];
    for v in &p.vrs {
        let why = match &v.why {
            placement::Why::Pinned => "pinned".to_string(),
            placement::Why::Kept => "kept (stable)".to_string(),
            placement::Why::LeastLoaded => "least loaded".to_string(),
            placement::Why::Spread { group } => format!("anti-affinity spread ({group})"),
            placement::Why::Unplaced { reason } => format!("refused: {reason}"),
        };
        let why = match &v.moved_from {
            Some(f) => format!("{why}; moved from {f}"),
            None => why,
        };
        rows.push(vec![v.vr.clone(), v.host.clone().unwrap_or_else(|| "-".into()), why]);
    }
    let mut s = String::new();
    control::topology::text_table(&mut s, "", &rows);
    let stretched: Vec<String> = (p.segments.iter())
        .filter(|s| s.hosts.len() + s.vteps.len() > 1 && !s.hosts.is_empty())
        .map(|s| {
            let mut ends = s.hosts.clone();
            ends.extend(s.vteps.iter().map(|a| format!("VTEP {a}")));
            format!("{} (VNI {}: {})", s.name, s.vni, ends.join(", "))
        })
        .collect();
    if !stretched.is_empty() {
        s += &format!("over VXLAN: {}\n", stretched.join("; "));
    }
    for m in &p.migrating {
        s += &format!("migrating live: {} from {} to {} ({})\n", m.vr, m.from, m.to, m.addr);
    }
    if !p.cordoned.is_empty() {
        s += &format!("cordoned: {}\n", p.cordoned.join(", "));
    }
    if let Some(e) = &p.error {
        s += &format!("error: {e}\n");
    }
    s
}

#[cfg(test)]
mod tests;
