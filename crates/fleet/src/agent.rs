//! The fleet agent: one thread beside a host's data plane, with a current-thread tokio
//! runtime, that keeps the host in the fleet.
//!
//! Every tick ([`Timing::tick`], a quarter of the lease's TTL, at most 1 s) it:
//! 1. fences, if the last successful renewal was sent [`Timing::fence_after`] ago or more and
//!    the policy is `fence` (checked again at the end of the tick);
//! 2. connects to etcd if it is not, and grants a lease if it holds none (again after losing
//!    one: the host re-registers);
//! 3. renews the lease (one keep-alive, answered within [`Timing::call`] or the keep-alive
//!    stream is dropped and opened again next tick: a late answer would make the lease look
//!    younger than it is);
//! 4. reads the host's status and its desired topology; brings fenced interfaces back up when
//!    the desired topology still places their VR here (or there is none: the host's own file
//!    owns its VRs); applies a desired topology whose revision it has not tried yet;
//! 5. publishes its [`HostRecord`] on the lease, and writes [`FleetStatus`] to its state file.
//!
//! Every etcd call has a deadline, so an unreachable etcd delays a tick by one call at most and
//! never stops fencing. Errors are logged when they change, not every tick.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions};
use tracing::{error, info, warn};

use crate::config::{FleetConfig, Policy};
use crate::keys;
use crate::local::Local;
use crate::migration::Move;
use crate::record::{now_ms, FleetStatus, HostRecord, LocalStatus, Timing, MAX_VALUE};
use crate::FleetError;

const RUN: u8 = 0;
/// Stop and revoke the lease: the host leaves the fleet at once.
const LEAVE: u8 = 1;
/// Stop without revoking: to etcd, what a crash looks like (the key goes when the lease ends).
const HALT: u8 = 2;
/// How long a source waits for a destination to apply its share before it gives up moving
/// a VR live and lets it restart there.
pub const MIGRATE_WAIT: Duration = Duration::from_secs(10);

/// The running agent. Dropping it stops the agent and revokes its lease.
pub struct Handle {
    stop: Arc<AtomicU8>,
    status: Arc<Mutex<FleetStatus>>,
    thread: Option<JoinHandle<()>>,
    /// The host's fleet controller (`fleet: { controller: true }`).
    controller: Option<crate::controller::ControllerHandle>,
}

impl Handle {
    /// What the host knows of the fleet now.
    pub fn status(&self) -> FleetStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops the agent and revokes its lease: the host's key goes at once. Returns what the
    /// host knew last (`last_error` says if the lease could not be revoked).
    pub fn leave(mut self) -> FleetStatus {
        self.finish(LEAVE);
        self.status()
    }

    /// Stops the agent without revoking its lease: the key stays until the lease's TTL runs
    /// out, as after a crash.
    pub fn halt(mut self) {
        self.finish(HALT);
    }

    /// The host's controller's state, if it runs one.
    pub fn controller(&self) -> Option<crate::controller::ControllerState> {
        self.controller.as_ref().map(|c| c.state())
    }

    fn finish(&mut self, how: u8) {
        match self.controller.take() {
            Some(c) if how == HALT => c.halt(),
            Some(c) => c.stop(),
            None => {}
        }
        self.stop.store(how, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.finish(LEAVE);
    }
}

/// Starts agents.
pub struct Agent;

impl Agent {
    /// Starts the agent for `cfg`'s host on its own thread. `local` is the host's control API;
    /// `state_file`, when given, gets [`FleetStatus`] on every tick.
    pub fn spawn(
        cfg: FleetConfig,
        local: Arc<dyn Local>,
        state_file: Option<PathBuf>,
    ) -> Result<Handle, FleetError> {
        let stop = Arc::new(AtomicU8::new(RUN));
        let status =
            Arc::new(Mutex::new(FleetStatus { host: cfg.host.clone(), ..Default::default() }));
        let controller = match cfg.controller {
            true => Some(crate::controller::spawn(crate::controller::ControllerConfig {
                etcd: cfg.etcd.clone(),
                name: cfg.host.clone(),
                ttl: cfg.lease_ttl,
            })?),
            false => None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| FleetError::Io { path: "tokio runtime".into(), source: e })?;
        let mut run = Run::new(cfg, local, state_file, status.clone());
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fleet-agent".into())
            .spawn(move || rt.block_on(run.main(&flag)))
            .map_err(|e| FleetError::Io { path: "fleet agent thread".into(), source: e })?;
        Ok(Handle { stop, status, thread: Some(thread), controller })
    }
}

/// A lease held, with its keep-alive stream when one is open.
struct Held {
    id: i64,
    granted_ms: u64,
    keeper: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

struct Run {
    cfg: FleetConfig,
    timing: Timing,
    local: Arc<dyn Local>,
    state_file: Option<PathBuf>,
    shared: Arc<Mutex<FleetStatus>>,
    st: FleetStatus,
    client: Option<Client>,
    held: Option<Held>,
    /// When the last successful renewal (or grant) was sent.
    renewed: Option<Instant>,
    /// The desired revision last tried (applied or refused): not tried again.
    tried: i64,
    /// Fenced and not yet back: a host with no interface up fences once, not every tick.
    fenced: bool,
    /// The host's status was read once: the interfaces it held down from its restart became
    /// the fenced set.
    adopted: bool,
    /// What the last run's agent had fenced (its status file), read before this run's first
    /// write of that file replaces it; emptied once adopted.
    last_run_fenced: Option<Vec<(String, String)>>,
    /// The host's last status.
    last: LocalStatus,
    /// The desired revision whose VRs wait to move live, since when.
    holding: Option<(i64, Instant)>,
    /// The topology last applied (host settings added), for the remotes a source sets before
    /// it moves VRs away ([`crate::migration::remotes_before_moves`]); none since a restart.
    applied: Option<String>,
    /// The last error logged, so a repeated one is not logged every tick.
    logged: Option<String>,
}

impl Run {
    fn new(
        cfg: FleetConfig,
        local: Arc<dyn Local>,
        state_file: Option<PathBuf>,
        shared: Arc<Mutex<FleetStatus>>,
    ) -> Run {
        let st = FleetStatus { host: cfg.host.clone(), ..Default::default() };
        Run {
            timing: Timing::for_ttl(cfg.lease_ttl),
            cfg,
            local,
            state_file,
            shared,
            st,
            client: None,
            held: None,
            renewed: None,
            tried: 0,
            fenced: false,
            adopted: false,
            last_run_fenced: None,
            last: LocalStatus::default(),
            holding: None,
            applied: None,
            logged: None,
        }
    }

    async fn main(&mut self, stop: &AtomicU8) {
        info!(host = %self.cfg.host, etcd = %self.cfg.etcd.join(","), ttl_s = self.cfg.lease_ttl.as_secs(), policy = ?self.cfg.policy, "fleet agent started");
        while stop.load(Ordering::Relaxed) == RUN {
            let t0 = Instant::now();
            self.tick().await;
            while stop.load(Ordering::Relaxed) == RUN && t0.elapsed() < self.timing.tick {
                tokio::time::sleep(Duration::from_millis(20).min(self.timing.tick)).await;
            }
        }
        if stop.load(Ordering::Relaxed) == LEAVE {
            self.leave().await;
        }
        info!(host = %self.cfg.host, "fleet agent stopped");
    }

    async fn tick(&mut self) {
        if !self.adopted {
            // Before etcd is reached: a restarted host's held interfaces are fenced ones.
            self.read_local().await;
        }
        self.fence_if_due().await;
        let r = self.round().await;
        self.st.etcd_reachable = !matches!(
            r,
            Err(FleetError::Etcd(_) | FleetError::Timeout { .. } | FleetError::LeaseLost(_))
        );
        match r {
            Ok(()) => self.st.last_error = None,
            Err(e) => self.failed(e),
        }
        self.fence_if_due().await;
        self.publish_status();
    }

    fn failed(&mut self, e: FleetError) {
        let msg = e.to_string();
        if self.logged.as_deref() != Some(msg.as_str()) {
            warn!(host = %self.cfg.host, error = %msg, "fleet");
            self.logged = Some(msg.clone());
        }
        self.st.last_error = Some(msg);
    }

    /// One round with etcd; see the module's documentation.
    async fn round(&mut self) -> Result<(), FleetError> {
        if self.client.is_none() {
            let opts = ConnectOptions::new()
                .with_connect_timeout(self.timing.call)
                .with_timeout(self.timing.call * 2);
            let etcd = &self.cfg.etcd;
            let c = self.call("connect", || Client::connect(etcd, Some(opts.clone()))).await?;
            self.client = Some(c);
        }
        if self.held.is_none() {
            self.grant().await?;
        }
        match self.renew().await {
            // One call may go to a member that is down (the client's balancer keeps it for a
            // while): once more, on a fresh keep-alive stream, before the tick counts it lost.
            Err(FleetError::Etcd(_) | FleetError::Timeout { .. }) if self.held.is_some() => {
                self.renew().await?
            }
            r => r?,
        }
        self.read_local().await;
        let desired = self.read_desired().await?;
        self.unfence(desired.as_ref()).await;
        if let Some((rev, text)) = desired {
            if self.migrate_out(rev, &text).await {
                let text = self.cfg.with_host_settings(&text);
                self.converge(rev, &text).await;
            }
        }
        self.publish().await
    }

    /// One etcd call within the call deadline, sent again when it found its member down
    /// ([`crate::call`]).
    async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, FleetError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        crate::call::timed(self.timing.call, what, f).await
    }

    fn client(&self) -> Client {
        self.client.clone().expect("connected before use")
    }

    async fn grant(&mut self) -> Result<(), FleetError> {
        let sent = Instant::now();
        let c = self.client();
        let ttl = self.cfg.lease_ttl.as_secs() as i64;
        let grant = || {
            let mut c = c.clone();
            async move { c.lease_grant(ttl, None).await }
        };
        let lease = self.call("lease grant", grant).await?;
        let (id, granted_ttl) = (lease.id(), lease.ttl());
        if granted_ttl != ttl {
            warn!(host = %self.cfg.host, asked_s = ttl, granted_s = granted_ttl, "fleet: etcd granted another lease TTL than asked (etcd's shortest is 1.5 x its election timeout): a dead host is noticed after the granted one");
        }
        self.st.lease_ttl_s = Some(granted_ttl);
        let granted_ms = now_ms();
        self.held = Some(Held { id, granted_ms, keeper: None });
        self.renewed = Some(sent);
        self.st.lease = Some(id);
        self.st.lease_granted_ms = Some(granted_ms);
        self.st.renewed_ms = Some(granted_ms);
        self.st.leases_granted += 1;
        info!(host = %self.cfg.host, lease = format_args!("{id:x}"), ttl_s = granted_ttl, "fleet: lease granted");
        // Registered at once, so the host is visible before its first status is read.
        self.publish().await
    }

    async fn renew(&mut self) -> Result<(), FleetError> {
        let mut c = self.client();
        let timing = self.timing;
        let held = self.held.as_mut().expect("granted before renewal");
        let id = held.id;
        if held.keeper.is_none() {
            // Opening the stream renews once (the client sends a keep-alive and reads its
            // answer), and says so when etcd no longer knows the lease.
            let sent = Instant::now();
            let sent_ms = now_ms();
            match tokio::time::timeout(timing.call, c.lease_keep_alive(id)).await {
                Ok(Ok(k)) => {
                    held.keeper = Some(k);
                    self.renewed = Some(sent);
                    self.st.renewed_ms = Some(sent_ms);
                    return Ok(());
                }
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(m))) if m.contains("not found") => {
                    return Err(self.lost(id));
                }
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => {
                    let ms = timing.call.as_millis() as u64;
                    return Err(FleetError::Timeout { what: "lease keep-alive stream", ms });
                }
            }
        }
        let (keeper, stream) = held.keeper.as_mut().expect("opened above");
        let sent = Instant::now();
        let sent_ms = now_ms();
        let answer = tokio::time::timeout(timing.call, async {
            keeper.keep_alive().await?;
            stream.message().await
        })
        .await;
        match answer {
            Ok(Ok(Some(r))) if r.ttl() > 0 => {
                self.renewed = Some(sent);
                self.st.renewed_ms = Some(sent_ms);
                Ok(())
            }
            // TTL 0: etcd no longer knows the lease (it expired or was revoked).
            Ok(Ok(Some(_))) => Err(self.lost(id)),
            Ok(Ok(None)) => {
                held.keeper = None;
                Err(FleetError::Etcd(etcd_client::Error::LeaseKeepAliveError(
                    "the keep-alive stream ended".into(),
                )))
            }
            Ok(Err(e)) => {
                held.keeper = None;
                Err(e.into())
            }
            Err(_) => {
                held.keeper = None;
                Err(FleetError::Timeout {
                    what: "lease keep-alive",
                    ms: timing.call.as_millis() as u64,
                })
            }
        }
    }

    /// The lease is gone: the next tick grants another and registers again.
    fn lost(&mut self, id: i64) -> FleetError {
        warn!(host = %self.cfg.host, lease = format_args!("{id:x}"), "fleet: lease lost; registering again");
        self.held = None;
        self.st.lease = None;
        self.st.lease_ttl_s = None;
        FleetError::LeaseLost(id)
    }

    async fn read_local(&mut self) {
        let local = self.local.clone();
        match tokio::task::spawn_blocking(move || local.status()).await {
            Ok(Ok(s)) => {
                if !self.adopted {
                    self.adopt_held(&s);
                }
                self.last = s;
            }
            Ok(Err(e)) => self.failed(e),
            Err(e) => self.failed(FleetError::Record { what: "status".into(), msg: e.to_string() }),
        }
    }

    /// The desired topology and its revision, if there is one.
    async fn read_desired(&mut self) -> Result<Option<(i64, String)>, FleetError> {
        let c = self.client();
        let key = keys::desired(&self.cfg.host);
        let get = || {
            let (mut c, k) = (c.clone(), key.clone());
            async move { c.get(k, None).await }
        };
        let r = self.call("read desired", get).await?;
        let Some(kv) = r.kvs().first() else { return Ok(None) };
        if kv.value().len() > MAX_VALUE {
            let msg = format!("{} bytes, over the {MAX_VALUE}-byte limit", kv.value().len());
            return Err(FleetError::Record { what: key, msg });
        }
        let text = std::str::from_utf8(kv.value())
            .map_err(|e| FleetError::Record { what: key.clone(), msg: e.to_string() })?;
        Ok(Some((kv.mod_revision(), text.to_string())))
    }

    async fn converge(&mut self, rev: i64, text: &str) {
        if rev <= self.st.applied_revision || rev == self.tried {
            return;
        }
        self.tried = rev;
        let source = format!("etcd:{}@{rev}", keys::desired(&self.cfg.host));
        let (local, t, s) = (self.local.clone(), text.to_string(), source.clone());
        // A host's first share of a big fleet builds hundreds of VRs in one apply, which can
        // outlast the lease's TTL: renew meanwhile, as a migration does.
        match self.while_renewing(move || local.apply(&t, &s)).await {
            Ok(Ok(())) => {
                info!(host = %self.cfg.host, revision = rev, "fleet: desired topology applied");
                self.st.applied_revision = rev;
                self.applied = Some(text.to_string());
            }
            Ok(Err(e)) => {
                // The host did not answer (not listening yet, restarting): not a refusal, so
                // the revision is tried again next tick.
                if matches!(e, FleetError::Local(control::ControlError::Io { .. })) {
                    self.tried = 0;
                } else {
                    error!(host = %self.cfg.host, revision = rev, error = %e, "fleet: desired topology refused");
                }
                self.failed(e);
            }
            Err(e) => self.failed(FleetError::Record { what: source, msg: e.to_string() }),
        }
    }

    /// Before a desired topology that moves VRs away is applied, moves each of them live
    /// (its marks, see [`crate::migration`]). False: not yet, a destination has not applied
    /// its share (no segment to restore the VR into); past [`MIGRATE_WAIT`] the topology is
    /// applied anyway and the VR restarts there. A failed migration leaves the VR running
    /// here until that apply removes it: the destination starts it once the flight is over.
    async fn migrate_out(&mut self, rev: i64, text: &str) -> bool {
        if rev <= self.st.applied_revision || rev == self.tried {
            return true;
        }
        let moves = match crate::migration::marks(text) {
            Ok(m) => m,
            Err(e) => {
                self.failed(e);
                return true;
            }
        };
        let runs = |vr: &str| self.last.vrs.iter().any(|v| v.name == vr);
        let host = self.cfg.host.as_str();
        let mine: Vec<Move> = moves.into_iter().filter(|m| m.from == host && runs(&m.vr)).collect();
        if mine.is_empty() {
            self.holding = None;
            return true;
        }
        let since = match self.holding {
            Some((r, t)) if r == rev => t,
            _ => self.holding.insert((rev, Instant::now())).1,
        };
        let mut remotes_set = false;
        for m in mine {
            match self.destination_ready(&m.to).await {
                Ok(true) => {}
                _ if since.elapsed() < MIGRATE_WAIT => return false,
                r => {
                    let why = r.map_or_else(|e| e.to_string(), |_| "not converged".into());
                    error!(host = %self.cfg.host, vr = %m.vr, to = %m.to, why = %why, wait_s = MIGRATE_WAIT.as_secs(), "fleet: destination not ready in time: the VR is removed here and restarted there (not live)");
                    self.st.migrations_failed += 1;
                    continue;
                }
            }
            if !remotes_set {
                remotes_set = true;
                self.remotes_before_moves(rev, text).await;
            }
            let (local, vr, to) = (self.local.clone(), m.vr.clone(), m.addr);
            let t0 = Instant::now();
            let r = self.while_renewing(move || local.migrate(&vr, to)).await;
            let ms = t0.elapsed().as_millis() as u64;
            match r.map_err(|e| FleetError::Record { what: "migrate".into(), msg: e.to_string() }) {
                Ok(Ok(())) => {
                    info!(host = %self.cfg.host, vr = %m.vr, to = %m.to, addr = %m.addr, ms, "fleet: VR migrated live");
                    self.st.migrations += 1;
                }
                Ok(Err(e)) | Err(e) => {
                    error!(host = %self.cfg.host, vr = %m.vr, to = %m.to, error = %e, "fleet: live migration failed: the VR is removed here and restarted there (not live)");
                    self.st.migrations_failed += 1;
                    self.failed(e);
                }
            }
        }
        self.holding = None;
        // What the record lists next: the VRs that left are gone.
        self.read_local().await;
        true
    }

    /// Before the first VR moves away: the running topology with the next one's VXLAN remotes
    /// (a live change), so the VRs that stay here reach the moved ones from their first frame
    /// at the destination. Without it they would until this host applies the next topology,
    /// after the moves. A failure is logged and the moves go on.
    async fn remotes_before_moves(&mut self, rev: i64, text: &str) {
        let next = self.cfg.with_host_settings(text);
        let Some(t) = (self.applied.as_deref())
            .and_then(|a| crate::migration::remotes_before_moves(a, &next))
        else {
            return;
        };
        let source = format!("etcd:{}@{rev} (remotes before moves)", keys::desired(&self.cfg.host));
        let local = self.local.clone();
        match self.while_renewing(move || local.apply(&t, &source)).await {
            Ok(Ok(())) => {
                info!(host = %self.cfg.host, revision = rev, "fleet: VXLAN remotes set before moving VRs away")
            }
            Ok(Err(e)) => {
                warn!(host = %self.cfg.host, revision = rev, error = %e, "fleet: VXLAN remotes not set before the moves");
                self.failed(e);
            }
            Err(e) => {
                warn!(host = %self.cfg.host, error = %e, "fleet: VXLAN remotes not set before the moves")
            }
        }
    }

    /// Runs `f` (a host call that may take longer than a tick: a migration's pre-copy moves
    /// the whole table) off the event loop, renewing the lease every tick meanwhile, and
    /// fencing if that fails for too long, as ticks would.
    async fn while_renewing<T: Send + 'static>(
        &mut self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        let mut task = tokio::task::spawn_blocking(f);
        loop {
            match tokio::time::timeout(self.timing.tick, &mut task).await {
                Ok(r) => return r,
                Err(_) => {
                    // A lease lost meanwhile is granted again by the next tick.
                    if self.held.is_some() {
                        if let Err(e) = self.renew().await {
                            self.failed(e);
                        }
                    }
                    self.fence_if_due().await;
                }
            }
        }
    }

    /// Whether host `to` has applied its desired topology (the segments a VR moving there
    /// needs are in it).
    async fn destination_ready(&mut self, to: &str) -> Result<bool, FleetError> {
        let c = self.client();
        let get = |k: String| {
            let c = c.clone();
            move || {
                let (mut c, k) = (c.clone(), k.clone());
                async move { c.get(k, None).await }
            }
        };
        let key = keys::host(to);
        let r = self.call("read destination", get(key.clone())).await?;
        let Some(kv) = r.kvs().first() else { return Ok(false) };
        let rec = HostRecord::decode(&key, kv.value())?;
        let r = self.call("read destination's desired", get(keys::desired(to))).await?;
        let want = r.kvs().first().map_or(0, |kv| kv.mod_revision());
        Ok(rec.applied_revision >= want)
    }

    async fn publish(&mut self) -> Result<(), FleetError> {
        let Some(h) = &self.held else { return Ok(()) };
        let id = h.id;
        let mut rec = HostRecord::new(&self.cfg, id, h.granted_ms);
        (rec.load, rec.vrs) = self.last.summary();
        rec.updated_ms = now_ms();
        rec.applied_revision = self.st.applied_revision;
        rec.fenced = !self.st.fenced.is_empty();
        let value = rec.encode()?;
        let (c, key) = (self.client(), keys::host(&self.cfg.host));
        let put = || {
            let (mut c, k, v) = (c.clone(), key.clone(), value.clone());
            async move { c.put(k, v, Some(PutOptions::new().with_lease(id))).await }
        };
        match self.call("register", put).await {
            Err(FleetError::Etcd(etcd_client::Error::GRpcStatus(s)))
                if s.message().contains("lease not found") =>
            {
                Err(self.lost(id))
            }
            r => r.map(drop),
        }
    }

    async fn fence_if_due(&mut self) {
        let due = self.renewed.is_some_and(|t| self.timing.must_fence(t.elapsed()));
        if !due || self.cfg.policy != Policy::Fence || self.fenced {
            return;
        }
        let local = self.local.clone();
        let done = tokio::task::spawn_blocking(move || -> Result<_, FleetError> {
            let mut down = Vec::new();
            let mut first_err = None;
            for (vr, i) in local.status()?.up_interfaces() {
                match local.set_up(&vr, &i, false) {
                    Ok(()) => down.push((vr, i)),
                    Err(e) => first_err = first_err.or(Some(e)),
                }
            }
            Ok((down, first_err))
        })
        .await;
        let since = self.renewed.map(|t| t.elapsed().as_millis() as u64);
        match done {
            Ok(Ok((down, err))) => {
                error!(host = %self.cfg.host, interfaces = down.len(), ms_since_renewal = since, "fleet: lease not renewed in time: fenced (VRs' interfaces down)");
                self.st.fences += 1;
                self.st.fenced = down;
                self.fenced = true;
                if let Some(e) = err {
                    self.failed(e);
                }
            }
            Ok(Err(e)) => self.failed(e),
            Err(e) => self.failed(FleetError::Record { what: "fence".into(), msg: e.to_string() }),
        }
    }

    /// On the first status read: the interfaces the host holds down since it restarted (its
    /// VRs may run elsewhere by now) are fenced, so [`Run::unfence`] brings back, once a
    /// lease is held, those whose VR the desired topology still places here. So are those
    /// the last run's agent had fenced (its `fleet.json`) and that are down now: a host that
    /// crashed while fenced replays the fence from its journal as plain downs, not holds.
    fn adopt_held(&mut self, s: &LocalStatus) {
        self.adopted = true;
        let mut held = s.held_interfaces();
        let down = s.down_interfaces();
        self.remember_last_run();
        let last = self.last_run_fenced.replace(Vec::new()).unwrap_or_default();
        let before: Vec<_> = last.into_iter().filter(|f| down.contains(f)).collect();
        let fenced_by_last_run = before.len();
        held.extend(before);
        if held.is_empty() {
            return;
        }
        warn!(host = %self.cfg.host, interfaces = held.len(), fenced_by_last_run, "fleet: restarted with VRs' interfaces held down: fenced until a lease is held and the desired topology read");
        self.st.fenced.extend(held);
        self.st.fenced.sort();
        self.st.fenced.dedup();
        self.fenced = true;
    }

    /// Reads what the last run's agent fenced, once, before this run writes the file (the
    /// data plane may answer its first status only after a tick has published one).
    fn remember_last_run(&mut self) {
        if self.last_run_fenced.is_none() {
            self.last_run_fenced = Some(self.fenced_before());
        }
    }

    /// The interfaces the last run's agent had fenced when it last wrote its status file
    /// (none without one, or one that does not read).
    fn fenced_before(&self) -> Vec<(String, String)> {
        let Some(path) = &self.state_file else { return Vec::new() };
        // Read no further than decode takes (one byte over, so it says the file is too long).
        let mut b = Vec::new();
        let read = std::fs::File::open(path).and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_VALUE as u64 + 1), &mut b)
        });
        if read.is_err() {
            return Vec::new();
        }
        match crate::record::decode::<FleetStatus>("fleet.json", &b) {
            Ok(st) => st.fenced,
            Err(e) => {
                warn!(host = %self.cfg.host, file = %path.display(), error = %e, "fleet: the last run's status does not read: its fence, if any, is not known");
                Vec::new()
            }
        }
    }

    /// With a lease again: brings fenced interfaces back up where the desired topology still
    /// places their VR here (or there is none).
    async fn unfence(&mut self, desired: Option<&(i64, String)>) {
        if !self.fenced {
            return;
        }
        let here = match desired.map(|(_, t)| desired_vrs(t)) {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => {
                self.failed(e);
                return;
            }
        };
        let fenced = std::mem::take(&mut self.st.fenced);
        let kept = fenced.clone();
        let local = self.local.clone();
        let r = tokio::task::spawn_blocking(move || {
            let mut still = Vec::new();
            for (vr, i) in fenced {
                let placed = here.as_ref().is_none_or(|h| h.contains(&vr));
                if placed && local.set_up(&vr, &i, true).is_err() {
                    still.push((vr, i));
                }
            }
            still
        })
        .await;
        // A task that panicked brought nothing back up: every interface is still down.
        let still = r.unwrap_or(kept);
        info!(host = %self.cfg.host, still_down = still.len(), "fleet: lease held again: unfenced");
        self.fenced = !still.is_empty();
        self.st.fenced = still;
    }

    /// Revokes the lease, trying a few times: one call may land on a member that is down.
    async fn leave(&mut self) {
        if let (Some(h), Some(_)) = (&self.held, &self.client) {
            let id = h.id;
            let c = self.client();
            let mut last = None;
            let revoke = || {
                let mut c = c.clone();
                async move { c.lease_revoke(id).await }
            };
            for _ in 0..4 {
                match self.call("lease revoke", revoke).await {
                    Ok(_) => {
                        info!(host = %self.cfg.host, lease = format_args!("{id:x}"), "fleet: left (lease revoked)");
                        last = None;
                        self.st.last_error = None;
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            if let Some(e) = last {
                warn!(host = %self.cfg.host, error = %e, "fleet: lease not revoked; it ends with its TTL");
                self.st.last_error = Some(format!("leaving: {e}"));
            }
        }
        self.held = None;
        self.st.lease = None;
        self.publish_status();
    }

    fn publish_status(&mut self) {
        self.st.updated_ms = now_ms();
        if let Ok(mut s) = self.shared.lock() {
            *s = self.st.clone();
        }
        self.remember_last_run();
        if let Some(path) = &self.state_file {
            if let Err(e) = write_atomic(path, &self.st) {
                self.failed(e);
            }
        }
    }
}

/// The names of the VRs a desired topology places on this host.
pub fn desired_vrs(text: &str) -> Result<Vec<String>, FleetError> {
    use yamlpath::{Located, Value};
    let wrap = |at: Located| FleetError::Config { file: "desired topology".into(), at };
    let doc = yamlpath::parse_document(text, "vrs:, ...").map_err(wrap)?;
    let top = Value::<Located>::root(&doc).mapping().map_err(wrap)?;
    let mut names = Vec::new();
    for v in top.list("vrs").map_err(wrap)? {
        let name = v.mapping().and_then(|m| m.req("name")).and_then(|n| n.text().map(String::from));
        names.push(name.map_err(wrap)?);
    }
    Ok(names)
}

/// Writes `st` to `path` through a temporary file, 0600 whatever the umask, as every file in
/// the run directory is.
fn write_atomic(path: &std::path::Path, st: &FleetStatus) -> Result<(), FleetError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |e| FleetError::Io { path: path.display().to_string(), source: e };
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    f.write_all(&serde_json::to_vec_pretty(st).expect("status serialises")).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restarted host whose VRs `a` (e0, e1) and `b` (e0) are held down, `b`'s e1 set down
    /// by its operator; records what the agent asks.
    #[derive(Default)]
    struct Restarted {
        set: Mutex<Vec<(String, String, bool)>>,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Local for Restarted {
        fn status(&self) -> Result<LocalStatus, FleetError> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            let held = serde_json::json!({"name": "e0", "up": false, "held": true});
            let ifs = |more: serde_json::Value| serde_json::json!([held, more]);
            LocalStatus::from_json(serde_json::json!({"workers": [{"index": 0}], "vrs": [
                {"name": "a", "interfaces": ifs(serde_json::json!({"name": "e1", "up": false, "held": true}))},
                {"name": "b", "interfaces": ifs(serde_json::json!({"name": "e1", "up": false}))},
            ]}))
        }

        fn apply(&self, _: &str, _: &str) -> Result<(), FleetError> {
            Ok(())
        }

        fn set_up(&self, vr: &str, interface: &str, up: bool) -> Result<(), FleetError> {
            self.set.lock().unwrap().push((vr.into(), interface.into(), up));
            Ok(())
        }
    }

    /// An agent of `local` whose etcd does not answer (nothing listens on port 9).
    fn cut_off(local: Arc<Restarted>) -> (Run, tokio::runtime::Runtime) {
        let text = "fleet:\n  etcd: [http://127.0.0.1:9]\n  host: h1\n  underlay: 192.0.2.1\n  offer: { workers: 1, cpu_share: 0.5, memory_mib: 256 }\n  lease_ttl_s: 1\n";
        let cfg = FleetConfig::from_topology(text, "test").unwrap().unwrap();
        assert_eq!(cfg.policy, Policy::Fence);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let run = Run::new(cfg, local, None, Arc::new(Mutex::new(FleetStatus::default())));
        (run, rt)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(v, i)| (v.to_string(), i.to_string())).collect()
    }

    #[test]
    fn held_interfaces_are_fenced_from_the_first_status_and_stay_down_without_etcd() {
        let local = Arc::new(Restarted::default());
        let (mut run, rt) = cut_off(local.clone());
        rt.block_on(run.tick());
        assert!(!run.st.etcd_reachable, "{:?}", run.st);
        assert!(run.fenced);
        assert_eq!(run.st.fenced, pairs(&[("a", "e0"), ("a", "e1"), ("b", "e0")]));
        assert_eq!(run.shared.lock().unwrap().fenced, run.st.fenced, "published");
        assert_eq!(run.st.fences, 0, "not a fence of this run's: the lease was never held");
        // Ticks without etcd: nothing is brought up, the status is not read again to adopt.
        rt.block_on(run.tick());
        assert_eq!(local.reads.load(Ordering::Relaxed), 1);
        assert!(local.set.lock().unwrap().is_empty(), "{:?}", local.set);
        assert_eq!(run.st.fenced.len(), 3);
    }

    #[test]
    fn what_the_last_run_fenced_and_is_down_is_fenced_again() {
        let dir = std::env::temp_dir().join(format!("rpx-agent-fenced-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fleet.json");
        // The last run fenced b.e1 (down now, not held: replayed from the journal) and z.e0
        // (no such VR now); a.e0 is held anyway.
        let before = FleetStatus {
            host: "h1".into(),
            fenced: pairs(&[("a", "e0"), ("b", "e1"), ("z", "e0")]),
            ..FleetStatus::default()
        };
        write_atomic(&file, &before).unwrap();
        let local = Arc::new(Restarted::default());
        let (mut run, rt) = cut_off(local.clone());
        run.state_file = Some(file.clone());
        // A first tick that cannot read the status yet (the data plane not listening) still
        // publishes this run's status, over the last run's file: what that said is kept.
        run.publish_status();
        rt.block_on(run.read_local());
        let want = [("a", "e0"), ("a", "e1"), ("b", "e0"), ("b", "e1")];
        assert_eq!(run.st.fenced, pairs(&want));
        rt.block_on(run.unfence(None));
        assert_eq!(local.set.lock().unwrap().len(), 4, "{:?}", local.set);
        // A status file that does not read adopts nothing beyond the held ones.
        std::fs::write(&file, b"{not json").unwrap();
        let (mut run, rt) = cut_off(Arc::new(Restarted::default()));
        run.state_file = Some(file);
        rt.block_on(run.read_local());
        assert_eq!(run.st.fenced, pairs(&[("a", "e0"), ("a", "e1"), ("b", "e0")]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_lease_again_brings_back_the_held_vrs_still_placed_here() {
        let local = Arc::new(Restarted::default());
        let (mut run, rt) = cut_off(local.clone());
        rt.block_on(run.read_local());
        // The desired topology keeps `a` here; `b` went elsewhere (its apply removes it).
        let desired = (7, "vrs:\n  - { name: a }\n".to_string());
        rt.block_on(run.unfence(Some(&desired)));
        let set = local.set.lock().unwrap().clone();
        let want = [("a", "e0", true), ("a", "e1", true)];
        assert_eq!(set, want.map(|(v, i, u)| (v.to_string(), i.to_string(), u)));
        assert!(!run.fenced && run.st.fenced.is_empty(), "{:?}", run.st);
        // No desired topology: the host's own file owns its VRs, all come back.
        let local = Arc::new(Restarted::default());
        let (mut run, rt) = cut_off(local.clone());
        rt.block_on(run.read_local());
        rt.block_on(run.unfence(None));
        assert_eq!(local.set.lock().unwrap().len(), 3);
        assert!(local.set.lock().unwrap().iter().all(|s| s.2));
    }

    #[test]
    fn desired_vrs_are_read_with_their_place() {
        let t = "workers: 1\nvrs:\n  - name: a\n    interfaces: []\n  - { name: b }\n";
        assert_eq!(desired_vrs(t).unwrap(), ["a", "b"]);
        assert!(desired_vrs("ports: []\n").unwrap().is_empty());
        let e = desired_vrs("vrs:\n  - { nam: a }\n").unwrap_err().to_string();
        assert!(e.starts_with("desired topology:2:7: vrs[0].name: required"), "{e}");
    }
}
