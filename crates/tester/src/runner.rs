//! One trial: offer a load to a running DUT, then count what came back.
//!
//! The generator and the sink share the calling thread: each time round the loop it reads the
//! clock, releases a burst if the pacer says one is due, and receives one burst (up to 256
//! frames, four times a generator burst) from the sink's port. After the last frame it keeps
//! receiving until every accepted frame is back, or nothing has arrived for the quiet time
//! (default 10 ms), or the drain limit (default 2 s, RFC 2544 §23) is reached. Frames still
//! missing then are lost.
//!
//! By default the loop spins, for the finest pacing (pin the thread). With
//! [`RunnerOptions::idle_sleep`] it sleeps when a round found nothing to do, which costs
//! pacing precision (bursts grow to cover the sleep; the count stays exact) but leaves the CPU
//! to others: the choice for a machine where the tester shares CPUs with other work.
//!
//! A trial during which the loop did not run for longer than [`RunnerOptions::stall_limit`]
//! (the thread was descheduled: the DUT saw a gap and then a burst nobody asked for, or the
//! sink stopped draining) is marked invalid; the methods repeat such trials (see
//! [`crate::method::Common::attempts`]) and keep every attempt in the report. A generator that
//! is merely too slow for the rate is not a stall: that shows as `attempted_pps` below the
//! target.

use std::time::Duration;

use hdrhistogram::Histogram;
use ports::{Batch, MAX_BURST};
use serde::Serialize;

use crate::analyzer::Analyzer;
use crate::clock::Clock;
use crate::dut::{Dut, DutCounters, DutPorts, DutReport, Refusal};
use crate::gen::Generator;
use crate::pacer::{auto_burst, Pacer, PacerStats, Rate};
use crate::traffic::{self, TrafficSpec};
use crate::Error;

/// How long a load lasts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Until {
    /// This long; at a paced rate that is exactly `round(rate × duration)` frames.
    Time(Duration),
    /// This many frames.
    Frames(u64),
}

/// One load to offer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    pub rate: Rate,
    pub until: Until,
    /// Traffic at the same rate before the measured window, not counted (the measured window
    /// starts in steady state).
    pub warmup: Duration,
    /// Frames per release; `None`: [`auto_burst`].
    pub burst: Option<usize>,
    /// Offer refused frames again and do not count them lost (maximum receive rate with
    /// back-pressure). Ports whose refusal is [`Refusal::Retry`] always retry.
    pub retry_refused: bool,
}

impl Load {
    /// A paced load of `pps` for `d`, after `warmup`.
    pub fn paced(pps: f64, d: Duration, warmup: Duration) -> Load {
        Load {
            rate: Rate::Pps(pps),
            until: Until::Time(d),
            warmup,
            burst: None,
            retry_refused: false,
        }
    }
}

/// Knobs of the runner that rarely change.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RunnerOptions {
    /// The drain ends when nothing arrived for this long.
    #[serde(serialize_with = "ms")]
    pub quiet: Duration,
    /// The drain ends after this long regardless.
    #[serde(serialize_with = "ms")]
    pub max_drain: Duration,
    /// Sleep this long when a round of the loop had nothing to do; `None`: spin.
    #[serde(serialize_with = "opt_ms")]
    pub idle_sleep: Option<Duration>,
    /// A trial whose loop went this long without running is invalid.
    #[serde(serialize_with = "ms")]
    pub stall_limit: Duration,
}

fn opt_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64() * 1e3),
        None => s.serialize_none(),
    }
}

fn ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            quiet: Duration::from_millis(10),
            max_drain: Duration::from_secs(2),
            idle_sleep: None,
            stall_limit: Duration::from_millis(2),
        }
    }
}

/// The raw counts of one offered load (no allocation to make).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    pub target_pps: Option<f64>,
    /// Frames the generator tried to send.
    pub attempted: u64,
    /// Frames the port accepted.
    pub accepted: u64,
    /// Frames the port refused and that were not offered again.
    pub refused: u64,
    /// Refusals that were offered again (back-pressure).
    pub retried: u64,
    /// Whether refused frames were offered again.
    pub retry: bool,
    /// From the first release to the end of the last frame's slot, nanoseconds.
    pub send_ns: u64,
    /// From the last release to the end of the drain.
    pub drain_ns: u64,
    pub pacing: PacerStats,
    /// Frames that came back on the generator's port (ICMP errors, ARP...).
    pub returned: u64,
    /// The longest time the loop did not run (deliberate idle sleeps excluded), from the
    /// first release to the end of the drain.
    pub max_stall_ns: u64,
    /// False if `max_stall_ns` exceeded the stall limit.
    pub valid: bool,
}

/// Latency percentiles, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    /// The percentiles of `h` (nanoseconds), or `None` if it is empty.
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Some(Latency {
            min_us: us(h.min()),
            mean_us: h.mean() / 1e3,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        })
    }
}

/// One class's share of a trial.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassResult {
    pub name: String,
    pub offered: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_ratio: f64,
    pub latency: Option<Latency>,
}

/// The flows of a trial in brief.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FlowSummary {
    pub flows: usize,
    /// Flows that lost at least one frame.
    pub with_loss: usize,
    pub with_reordering: usize,
    pub with_duplicates: usize,
    /// Frames missing below each flow's highest sequence number, summed (the loss the sink
    /// sees from sequence gaps alone).
    pub sequence_gaps: u64,
    /// Late frames too far back to check for duplication (reorder window 64).
    pub beyond_window: u64,
    pub min_received: u64,
    pub max_received: u64,
    /// The worst flow's loss ratio.
    pub max_loss_ratio: f64,
}

/// One trial's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TrialResult {
    /// The pacer's goal; `None` for an unpaced (maximum rate) load.
    pub target_pps: Option<f64>,
    /// The measured window: first release to the end of the last frame's slot.
    pub duration_s: f64,
    /// Frames the generator tried to send (accepted + refused, or accepted when refused frames
    /// were offered again).
    pub attempted: u64,
    /// Frames the port accepted.
    pub offered: u64,
    /// Frames the port refused and that were not offered again: on a `mem` port, the DUT's
    /// receive ring was full (counted as loss).
    pub refused: u64,
    /// Refusals offered again (back-pressure; not loss).
    pub retried: u64,
    /// Distinct frames of this trial that came back.
    pub received: u64,
    /// Accepted frames that never came back.
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Frames of an earlier tag (warm-up stragglers), not counted.
    pub stale: u64,
    /// Frames on the sink's port that were not test frames.
    pub foreign: u64,
    /// Frames that came back on the generator's port.
    pub returned: u64,
    /// `attempted / duration_s`: what the generator put out.
    pub attempted_pps: f64,
    /// `offered / duration_s`: what the port accepted.
    pub offered_pps: f64,
    /// `received / duration_s`.
    pub forwarded_pps: f64,
    /// `(lost + refused) / attempted`: the share of the generated frames that did not make it.
    pub loss_ratio: f64,
    /// Time spent draining after the last release.
    pub drain_ms: f64,
    /// The longest time the tester's loop did not run (idle sleeps excluded), microseconds.
    pub max_stall_us: f64,
    /// False if that exceeded the stall limit: the tester's thread was descheduled, so the
    /// DUT saw a gap and then a burst nobody asked for, or the sink stopped draining.
    pub valid: bool,
    pub latency: Option<Latency>,
    pub pacing: PacerStats,
    pub classes: Vec<ClassResult>,
    pub flows: FlowSummary,
    /// The DUT's own counters over the trial (warm-up included), if it keeps any.
    pub dut: Option<DutCounters>,
}

impl TrialResult {
    /// Whether the trial meets a loss target: `loss_ratio <= target`, and exactly no loss
    /// for a target of 0.
    pub fn passes(&self, target: f64) -> bool {
        if target <= 0.0 {
            self.lost == 0 && self.refused == 0
        } else {
            self.loss_ratio <= target
        }
    }
}

/// Drives a DUT: owns it, its ports, the generator and the analyzer.
pub struct Runner {
    dut: Box<dyn Dut>,
    ports: DutPorts,
    gen: Generator,
    an: Analyzer,
    clock: Clock,
    tx_b: Batch,
    rx_b: Batch,
    back_b: Batch,
    tag: u8,
    returned: u64,
    opts: RunnerOptions,
    classes: Vec<String>,
    mean_wire_bytes: f64,
    min_wire_bytes: usize,
    stopped: bool,
}

/// What was sent in one phase.
struct Sent {
    attempted: u64,
    refused: u64,
    retried: u64,
    t0: u64,
    end: u64,
    pacing: PacerStats,
    max_stall: u64,
}

impl Runner {
    /// Builds the traffic for `dut`'s targets and starts it.
    pub fn new(
        mut dut: Box<dyn Dut>,
        spec: &TrafficSpec,
        opts: RunnerOptions,
    ) -> Result<Runner, Error> {
        let targets = dut.targets(spec.flows)?;
        let t = traffic::build(spec, &targets)?;
        let ports = dut.start()?;
        Ok(Runner {
            dut,
            ports,
            gen: Generator::with_flows(t.frames),
            an: Analyzer::new(t.class_of_flow),
            clock: Clock::new(),
            tx_b: Batch::new(MAX_BURST),
            rx_b: Batch::new(MAX_BURST),
            back_b: Batch::new(MAX_BURST),
            tag: 0,
            returned: 0,
            opts,
            classes: t.classes,
            mean_wire_bytes: t.mean_wire_bytes,
            min_wire_bytes: t.min_wire_bytes,
            stopped: false,
        })
    }

    /// The DUT.
    pub fn dut(&self) -> &dyn Dut {
        &*self.dut
    }

    /// Class names.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// Mean and smallest frame size on the wire in the rotation, bytes.
    pub fn frame_bytes(&self) -> (f64, usize) {
        (self.mean_wire_bytes, self.min_wire_bytes)
    }

    /// What a refusal on the generator's port means.
    pub fn refusal(&self) -> Refusal {
        self.ports.refusal
    }

    /// The runner's options.
    pub fn options(&self) -> RunnerOptions {
        self.opts
    }

    /// Latencies of the last trial, nanoseconds.
    pub fn latency_histogram(&self) -> &Histogram<u64> {
        self.an.latency()
    }

    fn next_tag(&mut self) -> u8 {
        // Tag 0 is what frames stamped outside a runner carry.
        self.tag = if self.tag == u8::MAX { 1 } else { self.tag + 1 };
        self.tag
    }

    /// Offers `load` and drains: the hot path, which neither allocates nor formats.
    pub fn offer(&mut self, load: &Load) -> Window {
        let retry = load.retry_refused || self.ports.refusal == Refusal::Retry;
        let burst = load.burst.unwrap_or_else(|| auto_burst(load.rate)).clamp(1, MAX_BURST);
        let warm = self.next_tag();
        let tag = self.next_tag();
        if !load.warmup.is_zero() {
            self.gen.set_tag(warm);
            self.an.reset(tag);
            self.send(load.rate, Until::Time(load.warmup), burst, retry);
        }
        self.an.reset(tag);
        self.gen.set_tag(tag);
        self.gen.reset_counts();
        self.returned = 0;
        let s = self.send(load.rate, load.until, burst, retry);
        let accepted = self.gen.total();
        let (drain_ns, drain_stall) = self.drain(accepted);
        let slot = match load.rate {
            Rate::Pps(r) => (1e9 / r) as u64,
            Rate::Max => 0,
        };
        Window {
            target_pps: load.rate.pps(),
            attempted: s.attempted,
            accepted,
            refused: s.refused,
            retried: s.retried,
            retry,
            send_ns: (s.end - s.t0 + slot).max(1),
            drain_ns,
            pacing: s.pacing,
            returned: self.returned,
            max_stall_ns: s.max_stall.max(drain_stall),
            valid: s.max_stall.max(drain_stall) <= self.opts.stall_limit.as_nanos() as u64,
        }
    }

    fn send(&mut self, rate: Rate, until: Until, burst: usize, retry: bool) -> Sent {
        let t0 = self.clock.now_ns();
        let (total, end) = match (until, rate) {
            (Until::Frames(n), _) => (n, u64::MAX),
            (Until::Time(d), Rate::Pps(r)) => {
                (((r * d.as_secs_f64()).round() as u64).max(1), u64::MAX)
            }
            (Until::Time(d), Rate::Max) => (u64::MAX, t0 + d.as_nanos() as u64),
        };
        // Catching up goes 64 frames at a time (more only if the burst itself is larger):
        // releases of 256 keep 256 buffers (512 KiB) in flight per side and thrash the L2.
        let mut pacer = Pacer::new(rate, burst, burst.max(64), t0, total);
        let (mut refused, mut retried, mut last, mut iter) = (0u64, 0u64, t0, 0u32);
        let (mut prev, mut max_stall) = (t0, 0u64);
        loop {
            let now = self.clock.now_ns();
            max_stall = max_stall.max(now - prev);
            prev = now;
            if now >= end {
                last = now;
                break;
            }
            let n = pacer.poll(now);
            let mut busy = n > 0;
            if n > 0 {
                let k = self.gen.send_timed(&mut *self.ports.tx, &mut self.tx_b, n, &self.clock);
                if retry {
                    pacer.released(k);
                    retried += (n - k) as u64;
                } else {
                    pacer.released(n);
                    refused += (n - k) as u64;
                }
                last = now;
            } else if pacer.done() {
                break;
            }
            busy |= self.an.recv(&mut *self.ports.rx, &mut self.rx_b, &self.clock) > 0;
            iter = iter.wrapping_add(1);
            if iter % 64 == 0 {
                self.returned += self.drain_back();
            }
            if let (false, Some(d)) = (busy, self.opts.idle_sleep) {
                // Not past the next release (the OS adds its timer slack, ~50 µs, anyway).
                let until = pacer.next_due_ns().map_or(u64::MAX, |t| t.saturating_sub(now));
                std::thread::sleep(d.min(Duration::from_nanos(until)));
                prev = self.clock.now_ns();
            }
        }
        Sent {
            attempted: pacer.count(),
            refused,
            retried,
            t0,
            end: last,
            pacing: pacer.stats(),
            max_stall,
        }
    }

    /// Frames the DUT sent back towards the generator (ARP, ICMP errors): received and
    /// dropped, so the ring towards the generator never fills.
    fn drain_back(&mut self) -> u64 {
        self.back_b.clear();
        self.ports.tx.rx_burst(&mut self.back_b) as u64
    }

    /// Receives until every accepted frame is back, or quiet, or the limit; returns how long
    /// that took and the longest stall of the loop.
    fn drain(&mut self, accepted: u64) -> (u64, u64) {
        let t_end = self.clock.now_ns();
        let (mut last_rx, mut prev, mut max_stall) = (t_end, t_end, 0u64);
        let (quiet, max) =
            (self.opts.quiet.as_nanos() as u64, self.opts.max_drain.as_nanos() as u64);
        loop {
            let n = self.an.recv(&mut *self.ports.rx, &mut self.rx_b, &self.clock);
            self.returned += self.drain_back();
            let now = self.clock.now_ns();
            max_stall = max_stall.max(now - prev);
            prev = now;
            if n > 0 {
                last_rx = now;
            }
            if self.an.received() >= accepted || now - last_rx >= quiet || now - t_end >= max {
                return (now - t_end, max_stall);
            }
            if n == 0 {
                match self.opts.idle_sleep {
                    Some(d) => {
                        std::thread::sleep(d);
                        prev = self.clock.now_ns();
                    }
                    None => std::hint::spin_loop(),
                }
            }
        }
    }

    /// Offers `load` and summarises what happened, with the DUT's counters over the trial.
    pub fn trial(&mut self, load: &Load) -> TrialResult {
        let before = self.dut.counters();
        let w = self.offer(load);
        let after = self.dut.counters();
        let dut = match (before, after) {
            (Some(b), Some(a)) => Some(a.since(&b)),
            _ => None,
        };
        self.summarise(&w, dut)
    }

    fn summarise(&self, w: &Window, dut: Option<DutCounters>) -> TrialResult {
        let secs = w.send_ns as f64 / 1e9;
        let received = self.an.received();
        let lost = w.accepted.saturating_sub(received);
        let loss_ratio =
            if w.attempted == 0 { 0.0 } else { (lost + w.refused) as f64 / w.attempted as f64 };
        let offered = self.gen.offered();
        let classes = self
            .classes
            .iter()
            .enumerate()
            .map(|(c, name)| {
                let st = &self.an.classes()[c];
                let off = offered.get(c).copied().unwrap_or(0);
                let lost = off.saturating_sub(st.received);
                ClassResult {
                    name: name.clone(),
                    offered: off,
                    received: st.received,
                    lost,
                    loss_ratio: if off == 0 { 0.0 } else { lost as f64 / off as f64 },
                    latency: Latency::of(&st.latency),
                }
            })
            .collect();
        let sent = self.gen.flow_sent();
        let mut fs = FlowSummary {
            flows: self.an.flows().len(),
            min_received: u64::MAX,
            ..FlowSummary::default()
        };
        for (f, st) in self.an.flows().iter().enumerate() {
            let s = sent.get(f).copied().unwrap_or(0);
            let l = s.saturating_sub(st.received);
            fs.with_loss += (l > 0) as usize;
            fs.with_reordering += (st.reordered > 0) as usize;
            fs.with_duplicates += (st.duplicates > 0) as usize;
            fs.sequence_gaps += st.gaps();
            fs.beyond_window += st.beyond_window;
            fs.min_received = fs.min_received.min(st.received);
            fs.max_received = fs.max_received.max(st.received);
            if s > 0 {
                fs.max_loss_ratio = fs.max_loss_ratio.max(l as f64 / s as f64);
            }
        }
        if fs.flows == 0 {
            fs.min_received = 0;
        }
        let flows = self.an.flows();
        TrialResult {
            target_pps: w.target_pps,
            duration_s: secs,
            attempted: w.attempted,
            offered: w.accepted,
            refused: w.refused,
            retried: w.retried,
            received,
            lost,
            duplicates: flows.iter().map(|f| f.duplicates).sum(),
            reordered: flows.iter().map(|f| f.reordered).sum(),
            stale: self.an.stale(),
            foreign: self.an.foreign(),
            returned: w.returned,
            attempted_pps: w.attempted as f64 / secs,
            offered_pps: w.accepted as f64 / secs,
            forwarded_pps: received as f64 / secs,
            loss_ratio,
            drain_ms: w.drain_ns as f64 / 1e6,
            max_stall_us: w.max_stall_ns as f64 / 1e3,
            valid: w.valid,
            latency: Latency::of(self.an.latency()),
            pacing: w.pacing,
            classes,
            flows: fs,
            dut,
        }
    }

    /// Stops the DUT and returns its report.
    pub fn finish(mut self) -> Result<DutReport, Error> {
        self.stopped = true;
        self.dut.stop()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.dut.stop();
        }
    }
}
