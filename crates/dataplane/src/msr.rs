//! The multistage software router (MSR, seed 000 §5): one logical router made of front-end
//! load balancers, back-end routers and a control processor.
//!
//! Shape: the back-ends are the replicas of one logical VR (`crate::replica`): each runs in
//! its own cell on its own worker, owns one queue of each of the router's ports, and forwards
//! by the FIBs of the one route table control keeps for the logical VR (the control
//! processor's RIB, pushed to every back-end by publishing). A load balancer ([`LbPort`]) is
//! the outside end of one port: it puts each frame on the queue of the back-end its flow is
//! pinned to, and receives what every back-end sends. The control processor's policy
//! ([`MsrControl`]) switches back-ends on and off with the offered load.
//!
//! Contract:
//! - **No flow is reordered.** A flow (its symmetric [`flow_hash`]) is pinned to a back-end
//!   by the first frame it sends, in a fixed-size table, and stays there while it sends at
//!   least once per `idle_ns`. New flows go to the active back-ends by rendezvous hashing, so
//!   both directions of a flow, entering by different balancers, pick the same back-end.
//! - **Switching a back-end off loses nothing.** It stops taking new flows (it *drains*);
//!   the flows pinned to it stay until idle, and it is off only when no balancer pins a flow
//!   to it and `idle_ns` has passed since the drain began. A flow can change back-end only
//!   after `idle_ns` of silence, longer than any frame spends inside a back-end.
//! - **A failed back-end is bypassed within `fail_ns`.** A back-end whose queue takes none of
//!   the frames offered to it for `fail_ns` (its worker stopped: the ring stays full), or
//!   whose queue reports itself down, is marked failed by the balancer that saw it, for every
//!   balancer at once (shared masks); its flows are re-pinned to the active back-ends at their
//!   next frame. What it held, and what was refused while it was being detected, is lost and
//!   counted (`refused`); the time from the first refusal to the bypass is reported.
//! - A balancer takes every frame it is given: a frame a back-end's queue refuses is dropped
//!   and counted (`refused`) rather than blocking every other back-end behind it.
//! - No allocation per packet: tables and per-back-end selections are sized at build time.
//!   A flow that finds no free slot among its probes is forwarded unpinned (rendezvous over
//!   the active set) and counted (`unpinned`): such a flow may move when the set changes.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use ports::{Batch, Port, PortStats, PortStatus, MAX_BURST};

use crate::flowhash::flow_hash;

/// The most back-ends an MSR may have (one bit each in the shared masks).
pub const MAX_BACKENDS: usize = 64;
/// Table slots a flow's hash may occupy (linear probing).
const PROBES: usize = 4;
/// Table slots a balancer's `tick` looks at for idle flows.
const SWEEP_PER_TICK: usize = 256;

/// How a balancer pins flows and detects failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbConfig {
    /// Flow table slots (a power of two).
    pub flow_slots: usize,
    /// A pinned flow silent this long is forgotten (and may go elsewhere when it resumes).
    pub idle_ns: u64,
    /// A back-end that takes nothing offered for this long is failed.
    pub fail_ns: u64,
}

impl Default for LbConfig {
    fn default() -> LbConfig {
        LbConfig { flow_slots: 65536, idle_ns: 100_000_000, fail_ns: 50_000_000 }
    }
}

/// What a back-end is doing now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendState {
    /// Takes new flows.
    Active,
    /// Takes no new flow; serves those pinned to it until they are idle.
    Draining,
    /// Serves nothing.
    Off,
    /// Was taken out because it stopped taking frames or its queue went down.
    Failed,
}

/// The state the balancers and the control processor share: which back-ends take new flows,
/// which still serve pinned ones, which failed, and the counters the policy reads.
pub struct MsrShared {
    backends: usize,
    active: AtomicU64,
    draining: AtomicU64,
    failed: AtomicU64,
    /// Flows pinned to each back-end, over every balancer.
    pinned: Vec<AtomicU32>,
    /// Frames the balancers took (the offered load), and frames each back-end refused.
    offered: AtomicU64,
    refused: Vec<AtomicU64>,
    /// Nanoseconds from a failed back-end's first refused frame to its bypass.
    detect_ns: Vec<AtomicU64>,
    failures: AtomicU64,
}

fn bit(b: usize) -> u64 {
    1u64 << b
}

impl MsrShared {
    /// `backends` back-ends (1..=[`MAX_BACKENDS`]), the first `active` of them active.
    pub fn new(backends: usize, active: usize) -> Arc<MsrShared> {
        assert!((1..=MAX_BACKENDS).contains(&backends), "1..={MAX_BACKENDS} back-ends");
        let active = active.clamp(1, backends);
        let mask = if active == 64 { u64::MAX } else { bit(active) - 1 };
        Arc::new(MsrShared {
            backends,
            active: AtomicU64::new(mask),
            draining: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            pinned: (0..backends).map(|_| AtomicU32::new(0)).collect(),
            offered: AtomicU64::new(0),
            refused: (0..backends).map(|_| AtomicU64::new(0)).collect(),
            detect_ns: (0..backends).map(|_| AtomicU64::new(0)).collect(),
            failures: AtomicU64::new(0),
        })
    }

    /// Number of back-ends.
    pub fn backends(&self) -> usize {
        self.backends
    }

    /// Back-end `b`'s state.
    pub fn state(&self, b: usize) -> BackendState {
        let m = bit(b);
        if self.failed.load(Ordering::Acquire) & m != 0 {
            BackendState::Failed
        } else if self.active.load(Ordering::Acquire) & m != 0 {
            BackendState::Active
        } else if self.draining.load(Ordering::Acquire) & m != 0 {
            BackendState::Draining
        } else {
            BackendState::Off
        }
    }

    /// Back-ends taking new flows now.
    pub fn active_count(&self) -> usize {
        (self.active.load(Ordering::Acquire) & !self.failed.load(Ordering::Acquire)).count_ones()
            as usize
    }

    /// Flows pinned to back-end `b`, over every balancer.
    pub fn pinned(&self, b: usize) -> u32 {
        self.pinned[b].load(Ordering::Relaxed)
    }

    /// Frames back-end `b`'s queues refused (lost).
    pub fn refused(&self, b: usize) -> u64 {
        self.refused[b].load(Ordering::Relaxed)
    }

    /// Frames the balancers took.
    pub fn offered(&self) -> u64 {
        self.offered.load(Ordering::Relaxed)
    }

    /// Back-ends failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// How long back-end `b`'s failure took to detect and bypass (0: it has not failed).
    pub fn detect_ns(&self, b: usize) -> u64 {
        self.detect_ns[b].load(Ordering::Relaxed)
    }

    /// Takes back-end `b` out at once (its port went down, its worker is known to have
    /// stopped), `waited_ns` after the first sign; `false` if it already was.
    pub fn fail(&self, b: usize, waited_ns: u64) -> bool {
        if self.failed.fetch_or(bit(b), Ordering::AcqRel) & bit(b) != 0 {
            return false;
        }
        self.active.fetch_and(!bit(b), Ordering::AcqRel);
        self.draining.fetch_and(!bit(b), Ordering::AcqRel);
        self.detect_ns[b].store(waited_ns.max(1), Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Back-end `b` is repaired: it is off until the policy switches it on.
    pub fn restore(&self, b: usize) {
        self.failed.fetch_and(!bit(b), Ordering::AcqRel);
    }

    /// Switches back-end `b` on (a draining one keeps its pinned flows); `false` if it failed.
    pub fn switch_on(&self, b: usize) -> bool {
        if self.failed.load(Ordering::Acquire) & bit(b) != 0 {
            return false;
        }
        self.draining.fetch_and(!bit(b), Ordering::AcqRel);
        self.active.fetch_or(bit(b), Ordering::AcqRel);
        true
    }

    /// Starts draining back-end `b`: no new flow goes to it.
    pub fn switch_off(&self, b: usize) {
        if self.active.fetch_and(!bit(b), Ordering::AcqRel) & bit(b) != 0 {
            self.draining.fetch_or(bit(b), Ordering::AcqRel);
        }
    }

    /// Ends back-end `b`'s drain if no flow is pinned to it.
    fn finish_drain(&self, b: usize) -> bool {
        if self.pinned(b) != 0 {
            return false;
        }
        self.draining.fetch_and(!bit(b), Ordering::AcqRel) & bit(b) != 0
    }

    /// One line per back-end: state, pinned flows, refused frames, detection time (for test
    /// failures and `status`).
    pub fn dump(&self) -> String {
        let mut s = format!("offered {} failures {}\n", self.offered(), self.failures());
        for b in 0..self.backends {
            s += &format!(
                "backend {b}: {:?} pinned {} refused {} detect_ns {}\n",
                self.state(b),
                self.pinned(b),
                self.refused(b),
                self.detect_ns(b)
            );
        }
        s
    }
}

/// A rendezvous (highest random weight) score.
#[inline]
fn score(h: u64, b: usize) -> u64 {
    let mut z = (h ^ (b as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(b as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The back-end in `mask` with the highest score for `h`: removing or adding one back-end
/// moves only the flows that were, or become, its.
#[inline]
pub fn rendezvous(h: u64, mask: u64) -> Option<usize> {
    let mut m = mask;
    let mut best: Option<(u64, usize)> = None;
    while m != 0 {
        let b = m.trailing_zeros() as usize;
        m &= m - 1;
        let s = score(h, b);
        if best.is_none_or(|(x, _)| s > x) {
            best = Some((s, b));
        }
    }
    best.map(|(_, b)| b)
}

#[derive(Clone, Copy, Default)]
struct Slot {
    hash: u64,
    last: u64,
    be: u8,
    used: bool,
}

/// A balancer's own counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbCounters {
    /// Flows pinned (first frame, or resumed after idle, or moved off a failed back-end).
    pub new_flows: u64,
    /// Frames that found their flow pinned.
    pub pinned_hits: u64,
    /// Frames of flows that found no table slot (forwarded unpinned).
    pub unpinned: u64,
    /// Flows moved because their back-end failed or was switched off under them.
    pub rehomed: u64,
    /// Frames dropped because no back-end was active.
    pub no_backend: u64,
    /// Frames a back-end's queue refused (dropped here).
    pub refused: u64,
    /// Pinned flows forgotten after `idle_ns` of silence.
    pub expired: u64,
}

/// A load balancer: the outside end of one port of an MSR, over one queue per back-end.
pub struct LbPort {
    name: String,
    cfg: LbConfig,
    shared: Arc<MsrShared>,
    queues: Vec<Box<dyn Port>>,
    slots: Vec<Slot>,
    now: u64,
    /// Masks as of the last tick: taking new flows, and serving pinned ones.
    active: u64,
    serving: u64,
    /// When each back-end's queue began refusing everything (`u64::MAX`: it is taking).
    stuck_since: Vec<u64>,
    sel: Vec<Vec<u16>>,
    touched: Vec<usize>,
    next_rx: usize,
    sweep: usize,
    counters: LbCounters,
}

impl LbPort {
    /// A balancer called `name` over `queues`, queue `b` leading to back-end `b`.
    pub fn new(
        name: &str,
        cfg: LbConfig,
        shared: Arc<MsrShared>,
        queues: Vec<Box<dyn Port>>,
    ) -> LbPort {
        assert_eq!(queues.len(), shared.backends, "one queue per back-end");
        assert!(cfg.flow_slots.is_power_of_two(), "flow_slots is a power of two");
        let n = queues.len();
        let mut lb = LbPort {
            name: name.to_string(),
            cfg,
            shared,
            queues,
            slots: vec![Slot::default(); cfg.flow_slots],
            now: 0,
            active: 0,
            serving: 0,
            stuck_since: vec![u64::MAX; n],
            sel: (0..n).map(|_| Vec::with_capacity(MAX_BURST)).collect(),
            touched: Vec::with_capacity(n),
            next_rx: 0,
            sweep: 0,
            counters: LbCounters::default(),
        };
        lb.load_masks();
        lb
    }

    fn load_masks(&mut self) {
        let failed = self.shared.failed.load(Ordering::Acquire);
        self.active = self.shared.active.load(Ordering::Acquire) & !failed;
        self.serving = (self.active | self.shared.draining.load(Ordering::Acquire)) & !failed;
    }

    /// Advances the balancer's clock to `now`: picks up the control processor's changes,
    /// fails back-ends that stopped taking frames or went down, and forgets idle flows.
    /// Call it between bursts, at least every few milliseconds.
    pub fn tick(&mut self, now: u64) {
        self.now = now;
        for b in 0..self.queues.len() {
            let since = self.stuck_since[b];
            let down = matches!(self.queues[b].status(), PortStatus::Down(_));
            if down || (since != u64::MAX && now.saturating_sub(since) >= self.cfg.fail_ns) {
                let waited = if since == u64::MAX { 0 } else { now.saturating_sub(since) };
                if self.serving & bit(b) != 0 {
                    self.shared.fail(b, waited);
                }
                self.stuck_since[b] = u64::MAX;
            }
        }
        self.load_masks();
        let mask = self.slots.len() - 1;
        for k in 0..SWEEP_PER_TICK.min(self.slots.len()) {
            let i = (self.sweep + k) & mask;
            if self.slots[i].used && self.expired(&self.slots[i]) {
                self.unpin(i);
                self.counters.expired += 1;
            }
        }
        self.sweep = (self.sweep + SWEEP_PER_TICK) & mask;
    }

    fn expired(&self, s: &Slot) -> bool {
        self.now.saturating_sub(s.last) > self.cfg.idle_ns
    }

    fn unpin(&mut self, i: usize) {
        let be = usize::from(self.slots[i].be);
        self.slots[i].used = false;
        self.shared.pinned[be].fetch_sub(1, Ordering::Relaxed);
    }

    /// The back-end for a frame of flow `h`, pinning the flow if it is new.
    #[inline]
    fn route(&mut self, h: u64) -> Option<usize> {
        if h == 0 {
            // Not IP (ARP among it): any active back-end answers it, the same one each time.
            return rendezvous(0, self.active);
        }
        let mask = self.slots.len() - 1;
        let mut free = None;
        for p in 0..PROBES {
            let i = (h as usize).wrapping_add(p) & mask;
            let s = self.slots[i];
            if !s.used {
                free = free.or(Some(i));
                continue;
            }
            let stale = self.expired(&s);
            if s.hash == h {
                if !stale && self.serving & bit(usize::from(s.be)) != 0 {
                    self.slots[i].last = self.now;
                    self.counters.pinned_hits += 1;
                    return Some(usize::from(s.be));
                }
                if !stale {
                    self.counters.rehomed += 1;
                }
                self.unpin(i);
                free = Some(i);
                break;
            }
            if stale {
                self.unpin(i);
                self.counters.expired += 1;
                free = free.or(Some(i));
            }
        }
        let b = rendezvous(h, self.active)?;
        match free {
            Some(i) => {
                self.slots[i] = Slot { hash: h, last: self.now, be: b as u8, used: true };
                self.shared.pinned[b].fetch_add(1, Ordering::Relaxed);
                self.counters.new_flows += 1;
            }
            None => self.counters.unpinned += 1,
        }
        Some(b)
    }

    /// This balancer's counters.
    pub fn counters(&self) -> LbCounters {
        self.counters
    }

    /// The shared state (masks, counters) of the MSR this balancer belongs to.
    pub fn shared(&self) -> &Arc<MsrShared> {
        &self.shared
    }

    /// Each back-end queue's own counters.
    pub fn queue_stats(&self) -> Vec<PortStats> {
        self.queues.iter().map(|q| q.stats()).collect()
    }

    /// The pinned flows per back-end in this balancer's table, and its counters.
    pub fn dump(&self) -> String {
        let mut per = vec![0u32; self.queues.len()];
        for s in self.slots.iter().filter(|s| s.used) {
            per[usize::from(s.be)] += 1;
        }
        format!(
            "lb {} now {} active {:#x} serving {:#x} pinned per back-end {:?} {:?}",
            self.name, self.now, self.active, self.serving, per, self.counters
        )
    }
}

impl Port for LbPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        crate::replica::rx_rotating(&mut self.queues, &mut self.next_rx, batch)
    }

    /// Takes every frame of `sel`: each goes to its flow's back-end, in order per back-end;
    /// what a back-end refuses is dropped and counted (see the module doc).
    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        for &i in sel {
            let h = flow_hash(batch.get(usize::from(i)).frame());
            match self.route(h) {
                Some(b) => {
                    if self.sel[b].is_empty() {
                        self.touched.push(b);
                    }
                    self.sel[b].push(i);
                }
                None => self.counters.no_backend += 1,
            }
        }
        for t in 0..self.touched.len() {
            let b = self.touched[t];
            let want = self.sel[b].len();
            let k = self.queues[b].tx_burst(batch, &self.sel[b]);
            if k < want {
                let lost = (want - k) as u64;
                self.counters.refused += lost;
                self.shared.refused[b].fetch_add(lost, Ordering::Relaxed);
            }
            if k == 0 {
                self.stuck_since[b] = self.stuck_since[b].min(self.now);
            } else {
                self.stuck_since[b] = u64::MAX;
            }
            self.sel[b].clear();
        }
        self.touched.clear();
        self.shared.offered.fetch_add(sel.len() as u64, Ordering::Relaxed);
        sel.len()
    }

    fn stats(&self) -> PortStats {
        let mut s = PortStats::default();
        for q in &self.queues {
            s += q.stats();
        }
        s
    }

    fn service(&mut self) {
        self.queues.iter_mut().for_each(|q| q.service());
    }
}

/// When the control processor switches back-ends on and off. Hysteresis: with `n` active,
/// one more is switched on when the offered load exceeds `on_above_pps · n`, one is switched
/// off when the load would stay under `off_below_pps` on each of the `n - 1` left; since
/// `off_below_pps < on_above_pps`, neither change can call for the other at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Load per active back-end above which one more is switched on.
    pub on_above_pps: u64,
    /// Load per remaining back-end below which one is switched off (less than `on_above_pps`).
    pub off_below_pps: u64,
    /// Time between two changes at least, and the window the load is measured over.
    pub hold_ns: u64,
    /// Back-ends kept active whatever the load.
    pub min_active: usize,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            on_above_pps: 1_000_000,
            off_below_pps: 500_000,
            hold_ns: 100_000_000,
            min_active: 1,
        }
    }
}

/// One change the control processor made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Back-end switched on (load above the threshold, or to replace a failed one).
    On(usize),
    /// Back-end set draining (load below the threshold).
    Drain(usize),
    /// Back-end off: its drain ended.
    Off(usize),
}

/// The control processor's load policy over one MSR's shared state.
pub struct MsrControl {
    shared: Arc<MsrShared>,
    policy: Policy,
    idle_ns: u64,
    window_start: u64,
    window_offered: u64,
    last_change: u64,
    drain_since: Vec<u64>,
    load_pps: u64,
}

impl MsrControl {
    /// A policy over `shared`; `idle_ns` is the balancers' (a drain lasts at least that).
    pub fn new(shared: Arc<MsrShared>, policy: Policy, idle_ns: u64) -> MsrControl {
        let n = shared.backends;
        MsrControl {
            shared,
            policy,
            idle_ns,
            window_start: 0,
            window_offered: 0,
            last_change: 0,
            drain_since: vec![u64::MAX; n],
            load_pps: 0,
        }
    }

    /// The offered load measured over the last full window.
    pub fn load_pps(&self) -> u64 {
        self.load_pps
    }

    /// Measures the load, ends finished drains, and switches at most one back-end on or off;
    /// returns what changed.
    pub fn tick(&mut self, now: u64, out: &mut Vec<Change>) {
        // A drain started elsewhere (`MsrShared::switch_off`) is timed from when it is seen.
        for b in 0..self.shared.backends {
            let since = self.drain_since[b];
            if self.shared.state(b) != BackendState::Draining {
                self.drain_since[b] = u64::MAX;
            } else if since == u64::MAX {
                self.drain_since[b] = now;
            } else if now.saturating_sub(since) >= self.idle_ns && self.shared.finish_drain(b) {
                self.drain_since[b] = u64::MAX;
                out.push(Change::Off(b));
            }
        }
        let n = self.shared.active_count();
        if n < self.policy.min_active {
            if let Some(b) = self.spare() {
                self.shared.switch_on(b);
                self.last_change = now;
                out.push(Change::On(b));
            }
        }
        let span = now.saturating_sub(self.window_start);
        if span < self.policy.hold_ns.max(1) {
            return;
        }
        let offered = self.shared.offered();
        let delta = offered.saturating_sub(self.window_offered);
        self.load_pps = (u128::from(delta) * 1_000_000_000 / u128::from(span)) as u64;
        self.window_start = now;
        self.window_offered = offered;
        if now.saturating_sub(self.last_change) < self.policy.hold_ns {
            return;
        }
        let n = self.shared.active_count() as u64;
        if self.load_pps > self.policy.on_above_pps.saturating_mul(n) {
            if let Some(b) = self.spare() {
                self.shared.switch_on(b);
                self.last_change = now;
                out.push(Change::On(b));
            }
        } else if n as usize > self.policy.min_active.max(1)
            && self.load_pps < self.policy.off_below_pps.saturating_mul(n - 1)
        {
            if let Some(b) = (0..self.shared.backends)
                .rev()
                .find(|&b| self.shared.state(b) == BackendState::Active)
            {
                self.shared.switch_off(b);
                self.drain_since[b] = now;
                self.last_change = now;
                out.push(Change::Drain(b));
            }
        }
    }

    /// The back-end to switch on next: a draining one first (its flows are still there),
    /// then the lowest-numbered one that is off.
    fn spare(&self) -> Option<usize> {
        let all = 0..self.shared.backends;
        all.clone()
            .find(|&b| self.shared.state(b) == BackendState::Draining)
            .or_else(|| all.into_iter().find(|&b| self.shared.state(b) == BackendState::Off))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ports::mem;

    #[test]
    fn rendezvous_moves_only_the_flows_of_the_back_end_that_changed() {
        let (all, less) = (0b1111u64, 0b1011u64);
        let mut moved_elsewhere = 0;
        for h in 1..5000u64 {
            let h = score(h, 99);
            let (a, b) = (rendezvous(h, all).unwrap(), rendezvous(h, less).unwrap());
            if a != 2 && a != b {
                moved_elsewhere += 1;
            }
            assert_ne!(b, 2);
        }
        assert_eq!(moved_elsewhere, 0);
        assert_eq!(rendezvous(5, 0), None);
    }

    #[test]
    fn policy_has_hysteresis_and_holds() {
        let shared = MsrShared::new(4, 1);
        let policy =
            Policy { on_above_pps: 1000, off_below_pps: 400, hold_ns: 1_000, min_active: 1 };
        let mut c = MsrControl::new(shared.clone(), policy, 500);
        let mut out = Vec::new();
        // 1500 pps offered: above 1000 · 1, one more.
        shared.offered.fetch_add(1500, Ordering::Relaxed);
        c.tick(1_000_000_000, &mut out);
        assert_eq!(out, [Change::On(1)]);
        // Same load with 2: neither above 2000 nor below 400 · 1.
        out.clear();
        shared.offered.fetch_add(1500, Ordering::Relaxed);
        c.tick(2_000_000_000, &mut out);
        assert!(out.is_empty(), "{out:?}");
        // 300 pps: below 400 · 1, back-end 1 drains, then is off after idle with nothing pinned.
        shared.offered.fetch_add(300, Ordering::Relaxed);
        c.tick(3_000_000_000, &mut out);
        assert_eq!(out, [Change::Drain(1)]);
        assert_eq!(shared.state(1), BackendState::Draining);
        out.clear();
        c.tick(3_000_000_600, &mut out);
        assert_eq!(out, [Change::Off(1)]);
        assert_eq!(shared.state(1), BackendState::Off);
    }

    #[test]
    fn a_back_end_that_refuses_everything_is_failed_after_fail_ns() {
        let shared = MsrShared::new(2, 2);
        let (q0, mut p0) = mem::pair("q0", "be0", 256);
        let (q1, mut p1) = mem::pair("q1", "be1", 4);
        let cfg = LbConfig { flow_slots: 64, idle_ns: 1_000_000, fail_ns: 10_000 };
        let queues: Vec<Box<dyn Port>> = vec![Box::new(q0), Box::new(q1)];
        let mut lb = LbPort::new("lb", cfg, shared.clone(), queues);
        let mut b = Batch::new(64);
        let frames: Vec<Vec<u8>> = (0..64u16).map(crate::flowhash::udp4_from_port).collect();
        let mut t = 0;
        // Back-end 1 never reads; back-end 0 always does.
        for _ in 0..10 {
            t += 5_000;
            lb.tick(t);
            b.clear();
            frames.iter().for_each(|f| assert!(b.push_copy(f)));
            let sel: Vec<u16> = (0..64).collect();
            assert_eq!(lb.tx_burst(&mut b, &sel), 64);
            let mut got = Batch::new(64);
            while p0.rx_burst(&mut got) > 0 {
                got.clear();
            }
        }
        assert_eq!(shared.state(1), BackendState::Failed, "{}", shared.dump());
        assert_eq!(shared.state(0), BackendState::Active);
        assert!(shared.detect_ns(1) >= 10_000 && shared.detect_ns(1) <= 15_000);
        assert!(shared.refused(1) > 0 && shared.refused(0) == 0, "{}", shared.dump());
        // Every flow now goes to back-end 0.
        let before = p1.stats().rx_packets;
        assert_eq!(p1.rx_burst(&mut Batch::new(64)), 4);
        assert_eq!(before, 0);
        assert!(lb.counters().rehomed > 0, "{}", lb.dump());
    }
}
