//! A cell: the unit a worker runs and the unit that moves between workers.
//!
//! A cell is ports, the demux tables over them, the VRs and switches those ports feed, and
//! everything they count: whatever must run on one thread together. (A VR on a port another VR
//! shares, or on a switch, moves with them.) It holds no per-burst scratch: that is the
//! [`Worker`]'s, lent to each cell it polls, so a cell costs only its own state. Between two
//! polls a cell holds no packet of a burst (the VRs' extra packets leave right after the burst
//! that made them) except what waits in its own ingress queues, in its own buffers, so it can
//! be detached from one worker and installed on another at any poll boundary; frames that
//! arrive meanwhile wait in the port rings, in order.
//!
//! With ingress queues on ([`Cell::set_ingress_queues`], `ingress.rs`), a port that feeds two
//! or more VRs is only classified into per-VR queues, and each pass then serves the queues
//! round-robin under the VRs' reservations; a port that feeds one VR takes the path below (one
//! check per burst). While a capture, trace or live-migration handoff runs, every port takes
//! the path below and the queues are only emptied.
//!
//! Per port and burst: `rx_burst` (at most the port's `burst`) → classify every frame (demux)
//! and chain it to its VR → per VR: admission (batch limit, reservation; refused packets are
//! dropped here, before the VR sees them) → the VR's pipeline over its admitted packets → group
//! by egress port → one `tx_burst` per port. One thread, one pass, no queue between stages.
//! What a port refuses is counted as `tx_full` on the VR that sent it; a VR's `forwarded`
//! counts only what a port accepted.

use ports::{Batch, Port, PortStats, PortStatus, MAX_BURST};

use crate::budget::Account;
use crate::config::Reservation;
use crate::counters::{PortCounters, PortDrop, StageCounters, TxTally, VrDrop};
use crate::demux::{Conflict, Demux, Target, NO_KEY};
use crate::egress::{Egress, Links, TxOutcome};
use crate::impair::{Impair, ImpairConfig, ImpairDrop, Watch};
use crate::ingress::{Ingress, IngressQueues, Queue};
use crate::observe::{Dir, Observe, Reason, Tap, Trace, TraceRecord};
use crate::switch::Switch;
use crate::types::{BuildError, Burst, Fate, Lookup, Meta, OutQueue, Transmit, NONE};
use crate::vr::{Vr, VrAnswer, VrChange};
use crate::worker::{Run, TxInfo, Worker};

mod handoff;
pub use handoff::{Feed, Redirect};

/// How often VR timers run, in nanoseconds.
const HOUSEKEEPING_NS: u64 = 1_000_000;
/// Ports whose control path (`Port::service`, link state) one housekeeping run looks at, in
/// turn: a cell of 1024 ports (a big switch) would otherwise spend a syscall or more per port
/// every millisecond (a memif server's `accept`), most of its time. Each port is still looked
/// at every `ports / 64` ms (16 ms at 1024 ports).
const SERVICE_PER_RUN: usize = 64;
/// How often switches age their MAC tables.
const AGING_NS: u64 = 1_000_000_000;

/// The transmit side of a cell for one burst: its ports, their counters and transmit lists,
/// and how what the VRs send is accounted.
pub(crate) struct Tx<'a> {
    links: Links<'a>,
    tally: Tally<'a>,
}

/// How a cell accounts its VRs' transmits: each packet on its VR, by its [`TxInfo`] (a port's
/// refusal as `tx_full` or `generated_dropped`); the transmit stage; a capture's copies.
struct Tally<'a> {
    info: &'a mut [TxInfo],
    tallies: &'a mut [TxTally],
    stages: &'a mut StageCounters,
    tap: Option<&'a mut Tap>,
    /// Frames the capture staged for the port being sent on.
    staged: usize,
    /// A trace of the packets forwarded in this burst (`None` for frames a VR made).
    trace: Option<&'a mut Trace>,
    /// The impaired port whose drops are shown (see [`Watch`]).
    port: u16,
}

impl TxOutcome for Tally<'_> {
    #[inline]
    fn before(&mut self, p: u16, batch: &mut Batch, sel: &[u16]) {
        if let Some(t) = self.tap.as_deref_mut() {
            self.staged = t.stage_tx(p as usize, batch.packets(), sel);
        }
    }

    #[inline]
    fn after(&mut self, _p: u16, sel: &[u16], k: usize) {
        self.stages.tx_bursts += 1;
        self.stages.tx_packets += k as u64;
        if self.staged > 0 {
            if let Some(t) = self.tap.as_deref_mut() {
                t.sent(self.staged.min(k));
            }
            self.staged = 0;
        }
        for (j, &i) in sel.iter().enumerate() {
            let t = &self.info[i as usize];
            self.tallies[t.vr as usize].count(t.transit, t.len, j < k);
        }
    }

    fn watch<'s>(&'s mut self, p: u16, _: Option<&'s mut Tap>) -> Option<&'s mut dyn Watch> {
        self.port = p;
        let tapped = self.tap.as_ref().is_some_and(|t| t.wants_drops(p as usize));
        (tapped || self.trace.is_some()).then_some(self as &mut dyn Watch)
    }
}

/// An impaired port's drops, to the capture of that port's drops and the trace of the VR that
/// sent the packet.
impl Watch for Tally<'_> {
    #[cold]
    fn dropped(&mut self, slot: Option<u16>, r: ImpairDrop, f: &[u8]) {
        if let Some(t) = Tap::drops_at(self.tap.as_deref_mut(), self.port as usize) {
            t.dropped(slot, r, f);
        }
        if let (Some(tr), Some(i)) = (self.trace.as_deref_mut(), slot) {
            tr.impair_dropped(self.info[i as usize].vr, i, r);
        }
    }
}

impl Tx<'_> {
    /// Sends what was staged from `batch` and tallies each packet on its VR.
    fn flush(&mut self, batch: &mut Batch) {
        self.links.flush(batch, &mut self.tally);
        if let Some(t) = self.tally.trace.as_deref_mut() {
            t.sent();
        }
    }
}

impl Transmit for Tx<'_> {
    /// Transmits what VRs made (`out`) and empties it.
    fn transmit(&mut self, out: &mut OutQueue) {
        if out.batch.is_empty() {
            return;
        }
        for (k, &(port, transit, vr)) in out.dest.iter().enumerate() {
            self.tally.info[k] = TxInfo { vr, len: out.batch.get(k).len() as u16, transit };
            self.links.egress.add(port, k as u16);
        }
        self.flush(&mut out.batch);
        out.clear();
    }
}

/// Counts packets `sel` of `batch` as demuxed to `vr` and dropped for `r` before it saw them.
fn refuse(vr: &mut Vr, batch: &Batch, sel: &[u16], r: VrDrop) {
    if sel.is_empty() {
        return;
    }
    let bytes = sel.iter().map(|&i| batch.get(i as usize).len() as u64).sum();
    vr.counters.refuse(r, sel.len() as u64, bytes);
}

/// Where and when observed packets were: VR `vr`, received on port `port`, at `now`.
#[derive(Clone, Copy)]
struct At {
    vr: usize,
    port: usize,
    now: u64,
}

/// Observation of packets refused at admission (`sel`).
#[cold]
fn refused(o: &mut Observe, at: At, batch: &Batch, meta: &[Meta], sel: &[u16], r: VrDrop) {
    for &i in sel {
        let i = i as usize;
        let pkt = batch.get(i);
        observed_fate(o, at, (i, pkt), pkt.len() as u16, &meta[i], None, Some(r));
    }
}

/// Observed, before one packet's run: notes the VR's drop counters and the packet's length.
#[cold]
#[inline(never)]
fn observe_before(
    obs: &mut Option<Box<Observe>>,
    vr: &Vr,
    pkt: &ports::PktBuf,
    lookup: &mut Lookup,
) {
    if let Some(o) = obs.as_deref_mut() {
        o.before = vr.counters.drops;
        o.rx_len = pkt.len() as u16;
    }
    lookup.mark();
}

/// Observed, after packet `i`'s run: its drop reason (the counter that moved), lookup and
/// egress.
#[cold]
#[inline(never)]
fn observe_after(
    obs: &mut Option<Box<Observe>>,
    vr: &Vr,
    at: At,
    batch: &Batch,
    meta: &[Meta],
    i: u16,
    lookup: &Lookup,
) {
    let Some(o) = obs.as_deref_mut() else { return };
    let after = &vr.counters.drops;
    let drop = VrDrop::ALL.iter().copied().find(|&r| after[r as usize] != o.before[r as usize]);
    let found = lookup.single().map(|(a, nh)| (a, nh, vr.adj(nh)));
    let i = i as usize;
    let rx_len = o.rx_len;
    observed_fate(o, at, (i, batch.get(i)), rx_len, &meta[i], found, drop);
}

/// Records what became of one packet (received `rx_len` bytes long): a capture's drop copy, a
/// trace record.
fn observed_fate(
    o: &mut Observe,
    at: At,
    (slot, pkt): (usize, &ports::PktBuf),
    rx_len: u16,
    m: &Meta,
    lookup: Option<(std::net::IpAddr, fib::NextHop, crate::routes::Adj)>,
    drop: Option<VrDrop>,
) {
    if let (Some(t), Some(r)) = (o.tap.as_mut(), drop) {
        if t.wants_drops(at.port) {
            t.record(Dir::Drop, Some(Reason::Vr(r)), pkt.frame());
        }
    }
    if let Some(t) = o.trace.as_mut() {
        if t.vr as usize == at.vr && t.left > 0 && t.records.len() < t.records.capacity() {
            t.left -= 1;
            t.records.push(TraceRecord {
                ts: at.now,
                port: at.port as u16,
                len: rx_len,
                iface: m.iface,
                ethertype: m.ethertype,
                lookup,
                egress: match m.fate {
                    Fate::Tx { port, .. } => Some(port),
                    Fate::Done => None,
                },
                drop,
                impair: None,
                slot: slot as u16,
            });
        }
    }
}

/// Per port: the switch and member it belongs to, or `None` for VR demux.
type MemberOf = Vec<Option<(u16, u16)>>;

/// Ports, the VRs and switches on them, and their counters: the unit a worker runs.
pub struct Cell {
    ports: Vec<Box<dyn Port>>,
    pcs: Vec<PortCounters>,
    /// Per port: frames received per poll, 1..=MAX_BURST.
    burst: Vec<u16>,
    vrs: Vec<Vr>,
    /// Per VR: packets it may process per burst; more are dropped (`batch_limit`).
    batch: Vec<u16>,
    /// Per VR: its reservation and what it spent.
    accounts: Vec<Account>,
    switches: Vec<Switch>,
    member_of: MemberOf,
    demux: Demux,
    egress: Egress,
    /// Per VR: transmit outcomes not yet added to its counters.
    tallies: Vec<TxTally>,
    // Grouping by VR, as VALE chains packets per destination: head/tail per VR (the links
    // are the worker's).
    vr_head: Vec<u16>,
    vr_tail: Vec<u16>,
    next_housekeeping: u64,
    /// The next port housekeeping services.
    service_at: usize,
    next_aging: u64,
    /// Per port: whether housekeeping last saw its link down.
    link_down: Vec<bool>,
    /// Capture and trace: `None` (the fast path) unless one runs.
    obs: Option<Box<Observe>>,
    /// Receive, VR and transmit stage counters.
    stages: StageCounters,
    /// A live migration's redirects and feeds: `None` (the fast path) unless one runs.
    handoff: Option<Box<handoff::Handoff>>,
    /// Per-VR ingress queues: `None` unless set.
    ingress: Option<Box<Ingress>>,
    /// Per port: its frames go to the ingress queues (they are on and it feeds two VRs or more).
    queued: Vec<bool>,
}

/// The tap of a cell's observation, if any.
fn tap_of(obs: &mut Option<Box<Observe>>) -> Option<&mut Tap> {
    obs.as_deref_mut().and_then(|o| o.tap.as_mut())
}

impl Cell {
    /// A cell over `ports` running `vrs` and `switches`. Every VR interface must name a port in
    /// `ports`, no two interfaces may share (port, VLAN, MAC), and a port is either a switch
    /// member (of one switch) or carries VR interfaces, never both.
    pub fn new(
        ports: Vec<Box<dyn Port>>,
        vrs: Vec<Vr>,
        switches: Vec<Switch>,
    ) -> Result<Cell, BuildError> {
        if vrs.len() >= NONE as usize || ports.len() >= NONE as usize {
            return Err(BuildError(format!(
                "{} VRs and {} ports: at most 65534 each",
                vrs.len(),
                ports.len()
            )));
        }
        let demux = demux_of(&ports, &vrs)?;
        let member_of = members_of(&ports, &demux, &switches)?;
        let (n, v) = (ports.len(), vrs.len());
        Ok(Cell {
            pcs: vec![PortCounters::default(); n],
            burst: vec![MAX_BURST as u16; n],
            egress: Egress::new(n),
            ports,
            batch: vec![MAX_BURST as u16; v],
            accounts: vec![Account::default(); v],
            tallies: vec![TxTally::default(); v],
            vr_head: vec![NONE; v],
            vr_tail: vec![NONE; v],
            vrs,
            switches,
            member_of,
            demux,
            next_housekeeping: 0,
            service_at: 0,
            next_aging: 0,
            link_down: vec![false; n],
            obs: None,
            stages: StageCounters::default(),
            handoff: None,
            ingress: None,
            queued: vec![false; n],
        })
    }

    /// Receives at most `burst` (1..=256) frames per poll from port `p`.
    pub fn set_port_burst(&mut self, p: usize, burst: usize) -> Result<(), BuildError> {
        if !(1..=MAX_BURST).contains(&burst) || p >= self.ports.len() {
            return Err(BuildError(format!(
                "port {p} burst {burst}: ports 0..{}, burst 1..={MAX_BURST}",
                self.ports.len()
            )));
        }
        self.burst[p] = burst as u16;
        Ok(())
    }

    /// Lets VR `v` process at most `batch` (1..=256) packets per burst; the rest of its share
    /// of a burst is dropped right after demux (`batch_limit`).
    pub fn set_vr_batch(&mut self, v: usize, batch: usize) -> Result<(), BuildError> {
        if !(1..=MAX_BURST).contains(&batch) || v >= self.vrs.len() {
            return Err(BuildError(format!(
                "vr {v} batch {batch}: VRs 0..{}, batch 1..={MAX_BURST}",
                self.vrs.len()
            )));
        }
        self.batch[v] = batch as u16;
        Ok(())
    }

    /// Sets VR `v`'s reservation (`None`: unlimited): at once if it has none running, else from
    /// its next period boundary. Time budgets and weights need the worker to have a clock;
    /// without one they do not limit.
    pub fn set_reservation(&mut self, v: usize, r: Option<Reservation>) -> Result<(), BuildError> {
        let Some(a) = self.accounts.get_mut(v) else {
            return Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len())));
        };
        if let Some(r) = &r {
            r.check().map_err(|e| BuildError(format!("vr {}: {e}", self.vrs[v].name())))?;
        }
        a.set(r);
        Ok(())
    }

    /// VR `v`'s reservation in force.
    pub fn reservation(&self, v: usize) -> Option<Reservation> {
        self.accounts[v].reservation()
    }

    /// A change of VR `v`'s reservation waiting for its next period boundary.
    pub fn pending_reservation(&self, v: usize) -> Option<Option<Reservation>> {
        self.accounts[v].pending()
    }

    /// Whether any reservation here (in force or pending) needs a clock.
    pub fn needs_clock(&self) -> bool {
        self.accounts.iter().any(|a| {
            a.reservation().is_some_and(|r| r.needs_clock())
                || a.pending().flatten().is_some_and(|r| r.needs_clock())
        })
    }

    /// Impairs what leaves port `p` ([`crate::impair`]); `None` (or settings that impair
    /// nothing) ends it. A change applies to frames sent from now on: frames waiting keep
    /// their times, and leave at them even once the impairment is gone. The pool of a new
    /// (or larger) limit is made here, between polls. On error nothing changes.
    pub fn set_impair(&mut self, p: usize, cfg: Option<ImpairConfig>) -> Result<(), BuildError> {
        if p >= self.ports.len() {
            return Err(BuildError(format!("no port {p} (there are {})", self.ports.len())));
        }
        let cfg = cfg.filter(|c| !c.is_none());
        let slot = self.egress.impair_mut(p);
        match (slot.as_deref_mut(), cfg) {
            (Some(i), c) => i.reconfigure(c.unwrap_or_default())?,
            (None, Some(c)) => *slot = Some(Box::new(Impair::new(c)?)),
            (None, None) => {}
        }
        self.egress.tidy_impairs();
        Ok(())
    }

    /// Port `p`'s impairment: its settings, counters and frames waiting.
    pub fn port_impair(&self, p: usize) -> Option<&Impair> {
        self.egress.impair(p)
    }

    /// When the earliest frame an impairment holds is due (the poll `now`'s clock), if one is
    /// held: a worker must not sleep past it.
    pub fn next_due(&self) -> Option<u64> {
        self.egress.next_due()
    }

    /// Per-stage bursts and packets (receive, VR pipeline, transmit).
    pub fn stages(&self) -> StageCounters {
        self.stages
    }

    /// Port `p`'s receive burst.
    pub fn port_burst(&self, p: usize) -> usize {
        self.burst[p] as usize
    }

    /// VR `v`'s batch limit.
    pub fn vr_batch(&self, v: usize) -> usize {
        self.batch[v] as usize
    }

    /// One pass over every port: receive a burst from each and forward it (or queue it), then
    /// serve the ingress queues. Returns the number of frames received plus those served from
    /// the queues: while frames wait there, a pass is not idle.
    pub(crate) fn poll(&mut self, w: &mut Worker, now: u64) -> usize {
        let timed = w.has_clock();
        let mut total = 0;
        self.egress.release(&mut self.ports, &mut self.pcs, now, tap_of(&mut self.obs));
        if self.handoff.is_some() {
            total += self.poll_feeds(w, now, timed);
        }
        for p in 0..self.ports.len() {
            if self.handoff.as_deref().is_some_and(|h| h.holds(p, &self.vrs)) {
                continue;
            }
            // Port `p` may fill only its burst: the batch's first slots are set aside, so the
            // frames land in `[base, base + n)` and every index below is a slot index.
            let base = MAX_BURST - self.burst[p] as usize;
            w.batch.clear();
            w.batch.set_len(base);
            let n = self.ports[p].rx_burst(&mut w.batch);
            if n == 0 {
                continue;
            }
            // No clock read for an empty port: a busy pass's other steps go to its bursts.
            let t0 = w.burst_start();
            if self.egress.is_impaired() {
                self.egress.now = w.poll_time(self.egress.now);
            }
            total += n;
            self.pcs[p].rx_packets += n as u64;
            self.stages.rx_bursts += 1;
            self.stages.rx_packets += n as u64;
            if let Some(t) = self.demux.mirror_of(p) {
                self.inject(w, t, base, n, now);
                continue;
            }
            if let Some((s, m)) = self.member_of[p] {
                let Cell { ports, pcs, egress, switches, obs, .. } = self;
                let mut links = Links { ports, pcs, egress, tap: tap_of(obs) };
                switches[s as usize].forward(&mut links, m, &mut w.batch, base..base + n, now);
                let t = w.read_clock();
                w.spare.add_necessary(t.saturating_sub(t0));
                w.busy_since = Some(t);
                continue;
            }
            if self.queued[p] && self.obs.is_none() && self.handoff.is_none() {
                self.enqueue(w, p, base, n);
                // Steering is the port's work, as a NIC's is: no VR's, but not spare either.
                let t = w.read_clock();
                w.spare.add_necessary(t.saturating_sub(t0));
                w.busy_since = Some(t);
                continue;
            }
            // Capture or trace: one branch per burst, and a slower path only while one runs.
            let observed = self.obs.is_some();
            if observed {
                self.observe_rx(w, p, base, n, now);
            }
            self.classify(w, p, base, n);
            if self.handoff.is_some() {
                self.redirect(w);
            }
            if observed {
                self.observe_port_drops(w, p, base, n);
            }
            let (first, last) = self.run_vrs(w, now, timed, observed.then_some(p), false);
            self.egress(w, base, n);
            self.settle(w, n, now, t0, first, last);
        }
        if self.ingress.as_deref().is_some_and(|i| i.backlog > 0) {
            total += self.serve(w, now, timed);
        }
        if now >= self.next_housekeeping {
            self.next_housekeeping = now + HOUSEKEEPING_NS;
            self.housekeeping(w, now);
        }
        if now >= self.next_aging {
            self.next_aging = now + AGING_NS;
            for s in &mut self.switches {
                s.age(now);
            }
        }
        total
    }

    /// Frames from a Linux mirror interface (`base..base + n` of the worker's batch): out of
    /// its VR interface's port, counted on that VR (`injected`; a port's refusal as
    /// `generated_dropped`). They bypass demux and admission: the VR's own control plane
    /// speaks, and its punts are already bounded.
    #[cold]
    fn inject(&mut self, w: &mut Worker, t: Target, base: usize, n: usize, now: u64) {
        let v = t.vr as usize;
        let vr = &mut self.vrs[v];
        for i in base..base + n {
            w.meta[i].fate = Fate::Done;
            if let Some(port) = vr.inject(w.batch.get_mut(i), t.iface) {
                w.info[i] = TxInfo { vr: t.vr, len: w.batch.get(i).len() as u16, transit: false };
                self.egress.add(port, i as u16);
            }
        }
        self.tx(&mut w.info[..]).flush(&mut w.batch);
        self.vrs[v].count_tx(&std::mem::take(&mut self.tallies[v]), now);
    }

    /// Observed burst, before classification: copies what port `p` received, and marks every
    /// slot unclaimed so that what demux drops can be told afterwards.
    #[cold]
    fn observe_rx(&mut self, w: &mut Worker, p: usize, base: usize, n: usize, now: u64) {
        if let Some(t) = tap_of(&mut self.obs) {
            t.now = now;
            t.rx(p, &w.batch.packets()[base..base + n]);
        }
        for m in &mut w.meta[base..base + n] {
            m.vr = NONE;
        }
    }

    /// Observed burst, after classification: copies what demux dropped, with its reason.
    #[cold]
    fn observe_port_drops(&mut self, w: &mut Worker, p: usize, base: usize, n: usize) {
        let Some(t) = tap_of(&mut self.obs) else { return };
        if !t.wants_drops(p) {
            return;
        }
        for i in base..base + n {
            if w.meta[i].vr == NONE {
                let f = w.batch.get(i).frame();
                let mut last = (NO_KEY, Target { vr: 0, iface: 0 });
                if let Err(r) = self.demux.classify(p, f, &mut last) {
                    t.record(Dir::Drop, Some(Reason::Port(r)), f);
                }
            }
        }
    }

    /// Starts copying frames at a port of this cell (see [`Tap`]), replacing any capture
    /// running; `None` stops it. Returns the capture replaced.
    pub fn set_capture(&mut self, tap: Option<Tap>) -> Option<Tap> {
        let o = self.obs.get_or_insert_with(Default::default);
        let old = std::mem::replace(&mut o.tap, tap);
        self.tidy_obs();
        old
    }

    /// Traces the next `count` packets of VR `v` (0 stops the trace), replacing any trace;
    /// room for the records is made now.
    pub fn set_trace(&mut self, v: usize, count: u32) -> Result<(), BuildError> {
        if v >= self.vrs.len() {
            return Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len())));
        }
        let o = self.obs.get_or_insert_with(Default::default);
        o.trace = (count > 0).then(|| Trace {
            vr: v as u16,
            left: count,
            records: Vec::with_capacity(count as usize),
            unsent: 0,
        });
        self.tidy_obs();
        Ok(())
    }

    /// The trace's records so far, and how many packets it still waits for; the records
    /// are handed over (the trace goes on).
    pub fn take_trace(&mut self) -> (Vec<TraceRecord>, u32) {
        match self.obs.as_deref_mut().and_then(|o| o.trace.as_mut()) {
            Some(t) => {
                let cap = t.records.capacity();
                (std::mem::replace(&mut t.records, Vec::with_capacity(cap)), t.left)
            }
            None => (Vec::new(), 0),
        }
    }

    /// Port of VR `v`'s interface `iface`.
    pub fn iface_port(&self, v: usize, iface: &str) -> Option<usize> {
        let vr = self.vrs.get(v)?;
        vr.ifaces().iter().find(|f| f.name == iface).map(|f| f.port as usize)
    }

    /// Back on the fast path when nothing is observed.
    fn tidy_obs(&mut self) {
        if self.obs.as_ref().is_some_and(|o| o.tap.is_none() && o.trace.is_none()) {
            self.obs = None;
        }
    }

    // Inlined, as it was before the observed path gave `Demux::classify` a second caller.
    #[inline(always)]
    fn classify(&mut self, w: &mut Worker, p: usize, base: usize, n: usize) {
        let mut last = (NO_KEY, Target { vr: 0, iface: 0 });
        let table = self.demux.table(p);
        for i in base..base + n {
            let m = &mut w.meta[i];
            m.fate = Fate::Done;
            match table.classify(w.batch.get(i).frame(), &mut last) {
                Ok(c) => {
                    *m = Meta {
                        vr: c.target.vr,
                        iface: c.target.iface,
                        l3: c.l3,
                        ethertype: c.ethertype,
                        fate: Fate::Done,
                    };
                    let v = c.target.vr as usize;
                    if self.vr_head[v] == NONE {
                        self.vr_head[v] = i as u16;
                        w.touched.push(v as u16);
                    } else {
                        w.next[self.vr_tail[v] as usize] = i as u16;
                    }
                    self.vr_tail[v] = i as u16;
                    w.next[i] = NONE;
                }
                Err(r) => self.pcs[p].drops[r as usize] += 1,
            }
        }
    }

    /// Classifies a burst of a shared port (`base..base + n` of the worker's batch) into the
    /// VRs' ingress queues; what a full queue refuses is counted on its VR.
    fn enqueue(&mut self, w: &mut Worker, p: usize, base: usize, n: usize) {
        let Some(ing) = self.ingress.as_deref_mut() else { return };
        let mut last = (NO_KEY, Target { vr: 0, iface: 0 });
        let table = self.demux.table(p);
        for i in base..base + n {
            match table.classify(w.batch.get(i).frame(), &mut last) {
                Ok(c) => {
                    let t = c.target;
                    let m = Meta {
                        vr: t.vr,
                        iface: t.iface,
                        l3: c.l3,
                        ethertype: c.ethertype,
                        fate: Fate::Done,
                    };
                    if !ing.push(&mut w.batch, i, m, p as u16) {
                        let len = w.batch.get(i).len() as u64;
                        self.vrs[t.vr as usize].counters.refuse(VrDrop::IngressQueueFull, 1, len);
                    }
                }
                Err(r) => self.pcs[p].drops[r as usize] += 1,
            }
        }
    }

    /// One pass's service of the ingress queues: the turns [`Ingress::schedule`] plans, each
    /// admitted by its VR's reservation, laid out in the worker's batch one VR after another
    /// and run as one burst. Returns the frames served.
    fn serve(&mut self, w: &mut Worker, now: u64, timed: bool) -> usize {
        let t0 = w.burst_start();
        let Cell { ingress, accounts, batch: limits, vr_head, .. } = self;
        let ing = ingress.as_deref_mut().expect("served only with a backlog");
        let Worker { touched, runs, spare, .. } = &mut *w;
        let n = ing.schedule(limits, |v, k| {
            let a = accounts[v].admit(k, now, spare, timed);
            if a.total() > 0 {
                runs[touched.len()] = Run { admit: a, ns: 0 };
                touched.push(v as u16);
            }
            a.total()
        });
        if n == 0 {
            return 0;
        }
        w.batch.clear();
        w.batch.set_len(n);
        let mut at = 0;
        // Moved out and back (no allocation) so the queues can be taken from meanwhile.
        let plan = std::mem::take(&mut ing.plan);
        for &(v, k) in &plan {
            let (v, k) = (v as usize, k as usize);
            ing.take(v, k, &mut w.batch, &mut w.meta[..], at);
            for (i, n) in w.next.iter_mut().enumerate().skip(at).take(k) {
                *n = i as u16 + 1;
            }
            w.next[at + k - 1] = NONE;
            vr_head[v] = at as u16;
            at += k;
        }
        ing.plan = plan;
        let (first, last) = self.run_vrs(w, now, timed, None, true);
        self.egress(w, 0, n);
        self.settle(w, n, now, t0, first, last);
        n
    }

    /// Turns per-VR ingress queues on (or, `None`, off) for the ports that feed two VRs or
    /// more; the queues are made here, between polls. Frames queued under the old settings are
    /// dropped, counted on their VR as `ingress_queue_full`. On error nothing changes.
    pub fn set_ingress_queues(&mut self, cfg: Option<IngressQueues>) -> Result<(), BuildError> {
        if let Some(c) = &cfg {
            c.check()?;
        }
        for v in 0..self.vrs.len() {
            self.flush_queue(v, false);
        }
        self.ingress = cfg.map(|c| Box::new(Ingress::new(c, 0, |_| false)));
        self.retune_ingress();
        Ok(())
    }

    /// The ingress queues' settings, if they are on.
    pub fn ingress_queues(&self) -> Option<IngressQueues> {
        self.ingress.as_deref().map(|i| i.cfg)
    }

    /// Frames waiting in VR `v`'s ingress queue.
    pub fn ingress_queued(&self, v: usize) -> usize {
        self.ingress.as_deref().and_then(|i| i.queues.get(v)).map_or(0, |q| q.len())
    }

    /// Whether port `p`'s frames go through the ingress queues.
    pub fn port_queued(&self, p: usize) -> bool {
        self.queued.get(p).copied().unwrap_or(false)
    }

    /// Forgets VR `v`'s queued frames, counting each on its VR as `ingress_queue_full`, or,
    /// `gone` (the VR is being removed), on its port as `not_for_us`.
    fn flush_queue(&mut self, v: usize, gone: bool) {
        let Some(ing) = self.ingress.as_deref_mut() else { return };
        let Some(q) = ing.queues.get_mut(v) else { return };
        ing.backlog -= q.len();
        for (port, len) in q.drain() {
            if gone {
                self.pcs[port as usize].drops[PortDrop::NotForUs as usize] += 1;
            } else {
                self.vrs[v].counters.refuse(VrDrop::IngressQueueFull, 1, len);
            }
        }
    }

    /// After the VRs or their ports changed: which ports are queued, and a queue for every VR
    /// on one of them (a queue still holding frames is kept as it is until it empties).
    fn retune_ingress(&mut self) {
        let shared: Vec<bool> = (0..self.ports.len()).map(|p| self.demux.shared(p)).collect();
        let Some(ing) = self.ingress.as_deref_mut() else {
            self.queued = vec![false; self.ports.len()];
            return;
        };
        let limit = ing.cfg.limit as usize;
        for (v, vr) in self.vrs.iter().enumerate() {
            let want = if vr.ifaces().iter().any(|f| shared[f.port as usize]) { limit } else { 0 };
            if ing.queues.len() <= v {
                ing.queues.push(Queue::new(want));
            } else if ing.queues[v].capacity() != want && ing.queues[v].len() == 0 {
                ing.queues[v] = Queue::new(want);
            }
        }
        self.queued = shared;
    }

    /// Runs every VR the burst touched over the packets it admits (`pre`: admitted already,
    /// as `w.runs` says). Returns the clock before the first VR and after the last.
    fn run_vrs(
        &mut self,
        w: &mut Worker,
        now: u64,
        timed: bool,
        observed: Option<usize>,
        pre: bool,
    ) -> (u64, u64) {
        let Cell {
            ports,
            pcs,
            vrs,
            batch: limits,
            accounts,
            egress,
            tallies,
            vr_head,
            obs,
            stages,
            ..
        } = self;
        let first = w.read_clock();
        let mut t = first;
        let Worker {
            batch, out, meta, info, next, sel, touched, runs, lookup, spare, clock, ..
        } = w;
        // One transmit side and burst context for all the VRs: built per VR, they cost about
        // 25 instructions a visit (16 VRs with two packets each a burst: 12 a packet).
        let tally = Tally {
            info: &mut info[..],
            tallies: &mut tallies[..],
            stages: &mut *stages,
            tap: None,
            staged: 0,
            trace: None,
            port: 0,
        };
        let links = Links { ports: &mut ports[..], pcs: &mut pcs[..], egress, tap: None };
        let mut tx = Tx { links, tally };
        let mut cx = Burst { now, lookup, out, tx: &mut tx };
        let (mut bursts, mut packets) = (0, 0);
        for (j, &v) in touched.iter().enumerate() {
            let v = v as usize;
            let mut n = 0;
            let mut i = vr_head[v];
            while i != NONE {
                sel[n] = i;
                n += 1;
                i = next[i as usize];
            }
            vr_head[v] = NONE;
            let lim = n.min(limits[v] as usize);
            let admit = if pre { runs[j].admit } else { accounts[v].admit(lim, now, spare, timed) };
            let k = admit.total();
            refuse(&mut vrs[v], batch, &sel[k..lim], VrDrop::OverBudget);
            refuse(&mut vrs[v], batch, &sel[lim..n], VrDrop::BatchLimit);
            let at = At { vr: v, port: observed.unwrap_or(0), now };
            let slow = match (observed, obs.as_deref_mut()) {
                (Some(p), Some(o)) if o.wants(v, p) => {
                    refused(o, at, batch, &meta[..], &sel[k..lim], VrDrop::OverBudget);
                    refused(o, at, batch, &meta[..], &sel[lim..n], VrDrop::BatchLimit);
                    true
                }
                _ => false,
            };
            if k > 0 {
                bursts += 1;
                packets += k as u64;
                cx.out.vr = v as u16;
                // Observed: one packet at a time, to learn each one's fate (one call site of
                // the pipeline either way, so the fast path's code is what it was).
                let step = if slow { 1 } else { k };
                let mut from = 0;
                while from < k {
                    let part = &sel[from..from + step];
                    if slow {
                        observe_before(obs, &vrs[v], batch.get(part[0] as usize), cx.lookup);
                    }
                    vrs[v].process(&mut cx, batch.packets_mut(), &mut meta[..], part);
                    if slow {
                        observe_after(obs, &vrs[v], at, batch, &meta[..], part[0], cx.lookup);
                    }
                    from += step;
                }
            }
            runs[j] = Run { admit, ns: 0 };
            if clock.is_set() {
                let t2 = clock.read();
                runs[j].ns = t2.saturating_sub(t);
                t = t2;
            }
        }
        tx.tally.stages.vr_bursts += bursts;
        tx.tally.stages.vr_packets += packets;
        (first, t)
    }

    /// After the burst itself, what the VRs made (probes, flushed queues, fragments), then the
    /// counts on the VRs the burst touched, and with a clock their charges: each its own run
    /// plus its share, by packets admitted, of the common work (`t0..first` and after `last`).
    fn settle(&mut self, w: &mut Worker, n: usize, now: u64, t0: u64, first: u64, last: u64) {
        self.tx(&mut w.info[..]).transmit(&mut w.out);
        let Cell { vrs, accounts, tallies, .. } = self;
        let end = w.read_clock();
        w.busy_since = Some(end);
        let common = first.saturating_sub(t0) + end.saturating_sub(last);
        let timed = w.has_clock();
        for (j, &v) in w.touched.iter().enumerate() {
            let v = v as usize;
            vrs[v].count_tx(&std::mem::take(&mut tallies[v]), now);
            if timed {
                let r = w.runs[j];
                let share = (u128::from(common) * r.admit.total() as u128 / n as u128) as u64;
                accounts[v].charge(r.admit, r.ns + share, &mut w.spare);
            }
        }
        w.touched.clear();
    }

    fn egress(&mut self, w: &mut Worker, base: usize, n: usize) {
        for i in base..base + n {
            if let Fate::Tx { port, transit } = w.meta[i].fate {
                w.info[i] = TxInfo { vr: w.meta[i].vr, len: w.batch.get(i).len() as u16, transit };
                self.egress.add(port, i as u16);
            }
        }
        self.tx(&mut w.info[..]).flush(&mut w.batch);
    }

    /// The cell's transmit side, tallying by `info`.
    fn tx<'a>(&'a mut self, info: &'a mut [TxInfo]) -> Tx<'a> {
        let Cell { ports, pcs, egress, tallies, stages, obs, .. } = self;
        let (tap, trace) = match obs.as_deref_mut() {
            Some(o) => (o.tap.as_mut(), o.trace.as_mut()),
            None => (None, None),
        };
        let tally = Tally { info, tallies, stages, tap, staged: 0, trace, port: 0 };
        Tx { links: Links { ports, pcs, egress, tap: None }, tally }
    }

    /// Ports' control-path work, neighbor timers of every VR, and whatever they or earlier
    /// resolutions left to send.
    fn housekeeping(&mut self, w: &mut Worker, now: u64) {
        let Cell { ports, pcs, vrs, tallies, egress, link_down, obs, stages, service_at, .. } =
            self;
        let n = ports.len();
        for k in 0..n.min(SERVICE_PER_RUN) {
            let p = (*service_at + k) % n;
            let port = &mut ports[p];
            // A link that went down or came back: its VRs forget the neighbors they learned
            // there (a peer may return with another MAC). Status allocates only while down.
            // Looked at before the service too: a burst that hit a vanished interface marks
            // the port down, and the service may bring it back at once (the interface was
            // re-created), a down and up that the check after it alone would never see.
            let before = port.status() != PortStatus::Up;
            port.service();
            let after = port.status() != PortStatus::Up;
            for down in [before, after] {
                if down != link_down[p] {
                    link_down[p] = down;
                    vrs.iter_mut().for_each(|vr| vr.link_changed(p as u16));
                }
            }
        }
        if n > 0 {
            *service_at = (*service_at + SERVICE_PER_RUN) % n;
        }
        for (v, vr) in vrs.iter_mut().enumerate() {
            w.out.vr = v as u16;
            vr.tick(now, &mut w.out);
            let (info, tap) = (&mut w.info[..], tap_of(obs));
            let tallies = &mut tallies[..];
            let tally = Tally { info, tallies, stages, tap, staged: 0, trace: None, port: 0 };
            let mut tx = Tx { links: Links { ports, pcs, egress, tap: None }, tally };
            tx.transmit(&mut w.out);
            vr.count_tx(&std::mem::take(&mut tallies[v]), now);
        }
    }

    /// Port `p`, to send on from the control path ([`Cell::send_frames`]).
    pub(crate) fn port_mut(&mut self, p: usize) -> Option<&mut (dyn Port + 'static)> {
        self.ports.get_mut(p).map(|b| b.as_mut())
    }

    /// Applies a change to VR `v` (see [`VrChange`]); called between two polls.
    pub fn change_vr(&mut self, v: usize, ch: VrChange) -> Result<VrAnswer, BuildError> {
        match self.vrs.get_mut(v) {
            Some(vr) => vr.change(ch),
            None => Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len()))),
        }
    }

    /// Makes port `mirror` (one of this cell's, carrying nothing else) the Linux mirror of VR
    /// `v`'s interface `iface`: what the VR does not answer itself is punted there, and what
    /// the mirror sends leaves by the interface. On error nothing changes.
    pub fn attach_mirror(&mut self, v: usize, iface: u16, mirror: u16) -> Result<(), BuildError> {
        let Some(vr) = self.vrs.get_mut(v) else {
            return Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len())));
        };
        let Some(f) = vr.ifaces.get_mut(iface as usize) else {
            return Err(BuildError(format!("vr {}: no interface {iface}", vr.name())));
        };
        let old = f.mirror.replace(mirror);
        let checked = demux_of(&self.ports, &self.vrs)
            .and_then(|d| members_of(&self.ports, &d, &self.switches).map(|m| (d, m)));
        match checked {
            Ok((d, m)) => {
                self.demux = d;
                self.member_of = m;
                self.retune_ingress();
                Ok(())
            }
            Err(e) => {
                self.vrs[v].ifaces[iface as usize].mirror = old;
                Err(e)
            }
        }
    }

    /// Bounds what VR `v` punts to its mirror (see [`Vr::set_punt_limit`]).
    pub fn set_punt_limit(&mut self, v: usize, per_sec: u32, burst: u32) -> Result<(), BuildError> {
        match self.vrs.get_mut(v) {
            Some(vr) => {
                vr.set_punt_limit(per_sec, burst);
                Ok(())
            }
            None => Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len()))),
        }
    }

    /// Puts `new` in VR `v`'s place (a new config: interfaces, addresses), keeping the old
    /// one's counters, and its neighbors where the interfaces are the same ([`Vr::inherit`]).
    /// Returns the old VR, or, leaving everything as it was, why the new one does not fit
    /// (it shares a MAC or address with another VR on a segment).
    pub fn replace_vr(&mut self, v: usize, new: Vr) -> Result<Vr, BuildError> {
        if v >= self.vrs.len() {
            return Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len())));
        }
        let mut new = new;
        new.carry_mirrors(&self.vrs[v]);
        let mut old = std::mem::replace(&mut self.vrs[v], new);
        match demux_of(&self.ports, &self.vrs) {
            Ok(d) => self.demux = d,
            Err(e) => {
                self.vrs[v] = old;
                return Err(e);
            }
        }
        self.vrs[v].inherit(&mut old);
        // Queued frames were classified for the old interfaces.
        self.flush_queue(v, false);
        self.retune_ingress();
        Ok(old)
    }

    /// Adds `ports` (numbered from [`Cell::port_count`] on) and then `vr`, whose interfaces
    /// must name this cell's ports. On error nothing changes.
    pub fn add_vr(&mut self, ports: Vec<Box<dyn Port>>, vr: Vr) -> Result<(), BuildError> {
        let n = self.ports.len();
        self.ports.extend(ports);
        self.vrs.push(vr);
        let (demux, member_of) = match self.wiring() {
            Ok(x) => x,
            Err(e) => {
                self.vrs.pop();
                self.ports.truncate(n);
                return Err(e);
            }
        };
        self.grow_ports(self.ports.len() - n);
        self.batch.push(MAX_BURST as u16);
        self.accounts.push(Account::default());
        self.tallies.push(TxTally::default());
        self.vr_head.push(NONE);
        self.vr_tail.push(NONE);
        self.demux = demux;
        self.member_of = member_of;
        self.retune_ingress();
        Ok(())
    }

    /// The demux and switch membership of the cell's ports and VRs as they are now, or why
    /// they conflict.
    fn wiring(&self) -> Result<(Demux, MemberOf), BuildError> {
        let demux = demux_of(&self.ports, &self.vrs)?;
        let member_of = members_of(&self.ports, &demux, &self.switches)?;
        Ok((demux, member_of))
    }

    /// The per-port state of `added` ports just pushed onto `ports`.
    fn grow_ports(&mut self, added: usize) {
        self.pcs.extend((0..added).map(|_| PortCounters::default()));
        self.burst.extend((0..added).map(|_| MAX_BURST as u16));
        self.egress.add_ports(added);
        self.link_down.extend((0..added).map(|_| false));
        self.queued.extend((0..added).map(|_| false));
    }

    /// Adds `port` as the cell's next ([`Cell::port_count`] before the call, returned), in no
    /// switch and carrying no VR interface: for a running switch to take as a member
    /// ([`Cell::add_switch_member`]). On error nothing changes.
    pub fn add_port(&mut self, port: Box<dyn Port>) -> Result<u16, BuildError> {
        let p = self.ports.len();
        if p + 1 >= NONE as usize {
            return Err(BuildError(format!("{} ports: at most 65534", p + 1)));
        }
        self.ports.push(port);
        let (demux, member_of) = match self.wiring() {
            Ok(x) => x,
            Err(e) => {
                self.ports.pop();
                return Err(e);
            }
        };
        self.grow_ports(1);
        self.demux = demux;
        self.member_of = member_of;
        Ok(p as u16)
    }

    /// Closes port `p`, one in no switch and carrying no VR interface: a
    /// [`ports::closed::Closed`] takes its number, so that every other port keeps its own, and
    /// the port is returned for the caller to drop off the data path (its socket, mapping or
    /// interface goes with it). Its counters stay. On error nothing changes.
    pub fn close_port(&mut self, p: u16) -> Result<Box<dyn Port>, BuildError> {
        let i = usize::from(p);
        let free = self.member_of.get(i).is_some_and(Option::is_none) && !self.demux.has_port(i);
        if !free {
            return Err(BuildError(format!(
                "port {p}: not a free port of the cell ({} ports)",
                self.ports.len()
            )));
        }
        let closed = Box::new(ports::closed::Closed::new(self.ports[i].name()));
        // Down from now on, as housekeeping will see it: no VR is told its link changed.
        self.link_down[i] = true;
        Ok(std::mem::replace(&mut self.ports[i], closed))
    }

    /// Makes port `p` (one of the cell's, carrying no VR interface and in no switch) a member
    /// of switch `s` in `mode`, the switch keeping what it learned. On error nothing changes.
    pub fn add_switch_member(
        &mut self,
        s: usize,
        p: u16,
        mode: crate::MemberMode,
    ) -> Result<(), BuildError> {
        let n = self.switches.len();
        let Some(sw) = self.switches.get_mut(s) else {
            return Err(BuildError(format!("no switch {s} (there are {n})")));
        };
        let free = self.member_of.get(usize::from(p)).is_some_and(Option::is_none)
            && !self.demux.has_port(usize::from(p));
        if !free {
            return Err(BuildError(format!(
                "switch {}: port {p} is not a free port of the cell ({} ports)",
                sw.name(),
                self.ports.len()
            )));
        }
        sw.add_member(p, mode).map_err(|e| BuildError(e.0))?;
        self.member_of = members_of(&self.ports, &self.demux, &self.switches)
            .expect("a free port joining one switch conflicts with nothing");
        Ok(())
    }

    /// Takes the member on port `p` out of switch `s` (see [`crate::Switch::remove_member_on`]);
    /// the port stays in the cell, in no switch. On error nothing changes.
    pub fn remove_switch_member(&mut self, s: usize, p: u16) -> Result<(), BuildError> {
        let n = self.switches.len();
        let Some(sw) = self.switches.get_mut(s) else {
            return Err(BuildError(format!("no switch {s} (there are {n})")));
        };
        sw.remove_member_on(p).map_err(|e| BuildError(e.0))?;
        self.member_of = members_of(&self.ports, &self.demux, &self.switches)
            .expect("fewer members cannot conflict");
        Ok(())
    }

    /// Station `mac` is leaving the switch member on port `p` (see
    /// [`crate::Switch::hand_off`]).
    pub fn hand_off_station(&mut self, p: u16, mac: wire::MacAddr) -> Result<(), BuildError> {
        let sw = self.switch_on(p)?;
        sw.hand_off(p, mac).map_err(|e| BuildError(e.0))
    }

    /// Ends the hand-offs from the switch member on port `p` (see
    /// [`crate::Switch::end_hand_off`]).
    pub fn end_hand_off(&mut self, p: u16) -> Result<usize, BuildError> {
        let sw = self.switch_on(p)?;
        sw.end_hand_off(p).map_err(|e| BuildError(e.0))
    }

    fn switch_on(&mut self, p: u16) -> Result<&mut Switch, BuildError> {
        match self.member_of.get(usize::from(p)) {
            Some(&Some((s, _))) => Ok(&mut self.switches[usize::from(s)]),
            _ => Err(BuildError(format!("port {p} of the cell is in no switch"))),
        }
    }

    /// Removes VR `v` and returns it; its ports stay in the cell (frames for it are then
    /// dropped at demux as `not_for_us`).
    pub fn remove_vr(&mut self, v: usize) -> Result<Vr, BuildError> {
        if v >= self.vrs.len() {
            return Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len())));
        }
        self.flush_queue(v, true);
        if let Some(ing) = self.ingress.as_deref_mut() {
            ing.queues.remove(v);
        }
        let vr = self.vrs.remove(v);
        self.batch.remove(v);
        self.accounts.remove(v);
        self.tallies.remove(v);
        self.vr_head.remove(v);
        self.vr_tail.remove(v);
        if let Some(h) = self.handoff.as_deref_mut() {
            h.vr_removed(v);
        }
        self.tidy_handoff();
        self.demux = demux_of(&self.ports, &self.vrs).expect("fewer interfaces cannot conflict");
        self.retune_ingress();
        Ok(vr)
    }

    /// The VRs, in configuration order.
    pub fn vrs(&self) -> &[Vr] {
        &self.vrs
    }

    /// The switches, in configuration order.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// A VR by name.
    pub fn vr(&self, name: &str) -> Option<&Vr> {
        self.vrs.iter().find(|v| v.name() == name)
    }

    /// The index of the VR called `name`.
    pub fn vr_index(&self, name: &str) -> Option<usize> {
        self.vrs.iter().position(|v| v.name() == name)
    }

    /// Classification counters of port `p`.
    pub fn port_counters(&self, p: usize) -> &PortCounters {
        &self.pcs[p]
    }

    /// Port `p`'s own counters.
    pub fn port_stats(&self, p: usize) -> PortStats {
        self.ports[p].stats()
    }

    /// Whether port `p` moves packets now.
    pub fn port_status(&self, p: usize) -> ports::PortStatus {
        self.ports[p].status()
    }

    /// Port `p`'s backend counters by name ([`ports::Port::backend_counters`]).
    pub fn port_backend_counters(&self, p: usize) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        self.ports[p].backend_counters(&mut out);
        out
    }

    /// How port `p` runs, where it has a mode to report ([`ports::Port::mode_name`]).
    pub fn port_mode(&self, p: usize) -> Option<&'static str> {
        self.ports[p].mode_name()
    }

    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// Name of port `p`.
    pub fn port_name(&self, p: usize) -> &str {
        self.ports[p].name()
    }

    /// For a worker about to sleep: appends every port's wakeup descriptors to `out` (see
    /// [`Port::wakeup_fds`]); false if some port has none, so the worker may only nap. The data
    /// plane only hands the numbers on: the caller sleeps.
    pub fn wakeup_fds(&self, out: &mut Vec<std::os::fd::RawFd>) -> bool {
        let mut all = true;
        for p in &self.ports {
            all &= p.wakeup_fds(out);
        }
        if let Some(h) = &self.handoff {
            h.wakeup_fds(out);
        }
        all
    }

    /// Asks every port to signal its descriptors (see [`Port::arm_wakeup`]); true if one has
    /// frames waiting already, and the worker should poll rather than sleep.
    pub fn arm_wakeups(&mut self) -> bool {
        let mut waiting = false;
        for p in &mut self.ports {
            waiting |= p.arm_wakeup();
        }
        waiting || self.ingress.as_deref().is_some_and(|i| i.backlog > 0)
    }

    /// After a sleep: every port back to being polled (see [`Port::disarm_wakeup`]).
    pub fn disarm_wakeups(&mut self) {
        for p in &mut self.ports {
            p.disarm_wakeup();
        }
    }

    /// Every table and counter, for test failures and `show`.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        for (p, c) in self.pcs.iter().enumerate() {
            s += &format!("port {} {:?} {:?}\n", self.ports[p].name(), c, self.ports[p].stats());
        }
        for (v, vr) in self.vrs.iter().enumerate() {
            s += &vr.dump();
            if let Some(r) = self.accounts[v].reservation() {
                s += &format!("  reservation {r}\n");
            }
            if let Some(q) = self.ingress.as_deref().and_then(|i| i.queues.get(v)) {
                s += &format!("  ingress queue {}/{}\n", q.len(), q.capacity());
            }
        }
        s
    }
}

/// A worker runs cells: its pass over them lives here, beside what it drives, so the worker's
/// own state (`worker.rs`) needs nothing of the cell's.
impl Worker {
    /// One pass over every cell. `now` is a monotonic time in nanoseconds; it drives periods,
    /// neighbor timers and ICMP rate limits. Returns the number of frames received.
    pub fn poll(&mut self, cells: &mut [Cell], now: u64) -> usize {
        self.spare.roll(now);
        let mut n = 0;
        for c in cells {
            n += c.poll(self, now);
        }
        if n == 0 {
            self.busy_since = None;
        }
        n
    }
}

/// Demux tables for every VR interface; refuses interfaces on missing ports and ambiguous ones.
fn demux_of(ports: &[Box<dyn Port>], vrs: &[Vr]) -> Result<Demux, BuildError> {
    let mut demux = Demux::new(ports.len());
    for (v, vr) in vrs.iter().enumerate() {
        for (i, f) in vr.ifaces().iter().enumerate() {
            if f.port as usize >= ports.len() {
                return Err(BuildError(format!(
                    "vr {} interface {} is on port {}, but there are {} ports",
                    vr.name(),
                    f.name,
                    f.port,
                    ports.len()
                )));
            }
            let v4: Vec<_> = f.v4.iter().map(|n| n.addr()).collect();
            let v6: Vec<_> = f.v6.iter().map(|n| n.addr()).chain([f.ll]).collect();
            let t = Target { vr: v as u16, iface: i as u16 };
            let (port, vlan) = (f.port as usize, f.vlan.unwrap_or(0));
            if let Some(m) = f.mirror {
                if m as usize >= ports.len() {
                    return Err(BuildError(format!(
                        "vr {} interface {}: mirror port {m}, but there are {} ports",
                        vr.name(),
                        f.name,
                        ports.len()
                    )));
                }
                demux.add_mirror(m as usize, port, vlan, t).map_err(|e| {
                    BuildError(format!("vr {} interface {}: {}", vr.name(), f.name, e.0))
                })?;
            }
            if let Err(c) = demux.add(port, vlan, f.mac, &v4, &v6, t) {
                let (old, what) = match c {
                    Conflict::Mac(old) => (old, format!("MAC {}", f.mac)),
                    Conflict::Address(old, a) => (old, format!("address {a}")),
                };
                let o = &vrs[old.vr as usize];
                return Err(BuildError(format!(
                    "vr {} interface {} and vr {} interface {} share port {}, vlan {:?} and {what}",
                    vr.name(),
                    f.name,
                    o.name(),
                    o.ifaces()[old.iface as usize].name,
                    f.port,
                    f.vlan,
                )));
            }
            let n4: Vec<_> = f.v4.iter().map(|n| (n.addr(), n.prefix_len())).collect();
            let n6: Vec<_> = f.v6.iter().map(|n| (n.addr(), n.prefix_len())).collect();
            demux.add_subnets(port, vlan, &n4, &n6, t);
        }
    }
    Ok(demux)
}

/// Per port: the switch and member it is, checking that no port serves two masters.
fn members_of(
    ports: &[Box<dyn Port>],
    demux: &Demux,
    switches: &[Switch],
) -> Result<MemberOf, BuildError> {
    let mut member_of = vec![None; ports.len()];
    for (s, sw) in switches.iter().enumerate() {
        for (m, p) in sw.live_members() {
            let taken = if demux.has_port(p as usize) {
                Some("carries VR interfaces".to_string())
            } else {
                match member_of.get(p as usize) {
                    None => Some(format!("does not exist ({} ports)", ports.len())),
                    Some(Some((o, _))) => Some(format!(
                        "is already a member of switch {}",
                        switches[*o as usize].name()
                    )),
                    Some(None) => None,
                }
            };
            if let Some(why) = taken {
                return Err(BuildError(format!("switch {}: port {p} {why}", sw.name())));
            }
            member_of[p as usize] = Some((s as u16, m));
        }
    }
    Ok(member_of)
}
