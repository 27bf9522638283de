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
//! A DUT with several ingress ports gets one generator per port, each with its own pacer at
//! its share of the rate (see [`crate::traffic::Mix`]); the loop polls every pacer and every
//! sink port in turn.
//!
//! A trial during which the loop did not run for longer than [`RunnerOptions::stall_limit`]
//! because its thread waited for a CPU (descheduled: the DUT saw a gap and then a burst nobody
//! asked for, or the sink stopped draining) is marked invalid; a round that was merely slow or
//! slept is not a stall (see `stall.rs`: the thread's run-queue wait decides); the methods repeat such trials (see
//! [`crate::method::Common::attempts`]) and keep every attempt in the report. A generator that
//! is merely too slow for the rate is not a stall: that shows as `attempted_pps` below the
//! target.

use std::time::Duration;

use hdrhistogram::Histogram;
use ports::{Batch, MAX_BURST};
use serde::Serialize;

use crate::analyzer::Analyzer;
use crate::clock::Clock;
use crate::dut::{Dut, DutCounters, DutReport, DutSnapshot, Refusal};
use crate::gen::Generator;
use crate::pacer::{auto_burst, Pacer, PacerStats, Rate};
use crate::stall::{self, Stalls, WaitSource};
use crate::traffic::{self, Mix, TrafficSpec};
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
    /// A trial whose loop went this long without running, its thread waiting for a CPU, is
    /// invalid.
    #[serde(serialize_with = "ms")]
    pub stall_limit: Duration,
    /// Replay: offer the prepared frames without a TX timestamp, and keep the ones the port
    /// refused built for the next release instead of building them again (see
    /// [`Generator::send`]). A frame then costs the generator one copy and its sequence word
    /// when the port takes it, and nothing when the port refuses it, so the generator can
    /// offer a multiple of what it and the sink can carry: the overload an in-memory DUT
    /// must be shown. No latency is measured.
    pub replay: bool,
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
            replay: false,
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
    /// The longest time the loop did not run because its thread waited for a CPU (gaps up to
    /// the limit count whole; deliberate idle sleeps and slow rounds that kept the CPU do not
    /// count), from the first release to the end of the drain.
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
    /// The share of the offered rate the traffic gave this class.
    pub share: f64,
    /// Frames the port accepted for this class (the measured window).
    pub offered: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_ratio: f64,
    /// `offered / duration_s`.
    pub offered_pps: f64,
    /// `received / duration_s`.
    pub forwarded_pps: f64,
    /// Frames of this class the port accepted during the warm-up (the DUT's counters include
    /// them).
    pub warmup_offered: u64,
    /// `None` with more than [`crate::analyzer::MAX_CLASS_HISTOGRAMS`] classes.
    pub latency: Option<Latency>,
    /// The DUT's own count for this class over the trial, warm-up included, if it keeps one.
    pub dut: Option<DutCounters>,
}

/// The flows of a trial in brief.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FlowSummary {
    pub flows: usize,
    /// Flows the generator sent at least one frame of (a short trial over many flows may
    /// not reach them all); the minimum and maximum below are over these.
    pub flows_sent: usize,
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
    /// The longest time the tester's loop did not run for want of a CPU, microseconds (see
    /// [`Window::max_stall_ns`]).
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

/// One ingress port's generator.
struct StreamGen {
    port: usize,
    share: f64,
    gen: Generator,
    /// Replay: this stream's own batch, holding what the port refused until the next release
    /// (the streams cannot share one).
    batch: Batch,
}

/// Drives a DUT: owns it, its ports, the generators and the analyzer.
pub struct Runner {
    dut: Box<dyn Dut>,
    ports: Vec<Box<dyn ports::Port>>,
    sinks: Vec<usize>,
    /// Ports frames are sent on that are not sinks: what arrives there is `returned`.
    back: Vec<usize>,
    refusal: Refusal,
    streams: Vec<StreamGen>,
    /// Reused by every trial, one per stream.
    pacers: Vec<Pacer>,
    an: Analyzer,
    clock: Clock,
    tx_b: Batch,
    rx_b: Batch,
    back_b: Batch,
    tag: u8,
    returned: u64,
    opts: RunnerOptions,
    spec: TrafficSpec,
    mix: Mix,
    classes: Vec<String>,
    class_share: Vec<f64>,
    /// Per class: frames accepted during the last warm-up.
    warm_offered: Vec<u64>,
    /// Per flow: frames sent in the last trial (filled when summarising).
    sent: Vec<u64>,
    mean_wire_bytes: f64,
    min_wire_bytes: usize,
    stopped: bool,
    /// The run-queue wait of the thread that offers loads (see `stall.rs`).
    wait: Option<(std::thread::ThreadId, WaitSource)>,
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

/// What one ingress port carries, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamInfo {
    /// Index of the port in the DUT's port set.
    pub port: usize,
    /// Share of the offered rate sent on it.
    pub share: f64,
    /// Frames prepared for it.
    pub frames: usize,
    /// Turns in its rotation.
    pub slots: usize,
}

impl Runner {
    /// Builds the traffic for `dut`'s targets, equal shares per class, and starts it.
    pub fn new(
        dut: Box<dyn Dut>,
        spec: &TrafficSpec,
        opts: RunnerOptions,
    ) -> Result<Runner, Error> {
        Runner::with_mix(dut, spec, &Mix::default(), opts)
    }

    /// Builds the traffic for `dut`'s targets, shared among classes as `mix` says, and starts
    /// the DUT.
    pub fn with_mix(
        mut dut: Box<dyn Dut>,
        spec: &TrafficSpec,
        mix: &Mix,
        opts: RunnerOptions,
    ) -> Result<Runner, Error> {
        let targets = dut.targets(spec.flows)?;
        let t = traffic::build_mixed(spec, &targets, &dut.ingress(), mix)?;
        let ps = dut.start_ports()?;
        let mut r = Runner {
            dut,
            ports: ps.ports,
            sinks: ps.sinks,
            back: Vec::new(),
            refusal: ps.refusal,
            streams: Vec::new(),
            pacers: Vec::new(),
            an: Analyzer::new(vec![0]),
            clock: Clock::new(),
            tx_b: Batch::new(MAX_BURST),
            rx_b: Batch::new(MAX_BURST),
            back_b: Batch::new(MAX_BURST),
            tag: 0,
            returned: 0,
            opts,
            spec: *spec,
            mix: mix.clone(),
            classes: Vec::new(),
            class_share: Vec::new(),
            warm_offered: Vec::new(),
            sent: Vec::new(),
            mean_wire_bytes: 0.0,
            min_wire_bytes: 0,
            stopped: false,
            wait: None,
        };
        if let Some(&s) = r.sinks.iter().find(|&&s| s >= r.ports.len()) {
            return Err(Error::new(format!(
                "the DUT named sink port {s} of {} ports",
                r.ports.len()
            )));
        }
        if r.sinks.is_empty() {
            return Err(Error::new("the DUT named no port for the sink"));
        }
        r.install(t)?;
        Ok(r)
    }

    /// Changes the traffic (flows, frame size, shares) without restarting the DUT: asks it for
    /// targets again and prepares new frames (setup work: it allocates).
    pub fn set_traffic(&mut self, spec: &TrafficSpec, mix: &Mix) -> Result<(), Error> {
        let targets = self.dut.targets(spec.flows)?;
        let t = traffic::build_mixed(spec, &targets, &self.dut.ingress(), mix)?;
        self.install(t)?;
        self.spec = *spec;
        self.mix = mix.clone();
        Ok(())
    }

    fn install(&mut self, t: traffic::Traffic) -> Result<(), Error> {
        if let Some(s) = t.streams.iter().find(|s| s.port >= self.ports.len()) {
            return Err(Error::new(format!(
                "the DUT put a target on port {} of {} ports",
                s.port,
                self.ports.len()
            )));
        }
        self.streams = t
            .streams
            .into_iter()
            .map(|s| StreamGen {
                port: s.port,
                share: s.share,
                gen: Generator::with_lanes(s.lanes, s.slots),
                batch: Batch::new(MAX_BURST),
            })
            .collect();
        self.pacers = Vec::with_capacity(self.streams.len());
        self.back =
            self.streams.iter().map(|s| s.port).filter(|p| !self.sinks.contains(p)).collect();
        self.back.sort_unstable();
        self.back.dedup();
        self.sent = vec![0; t.class_of_flow.len()];
        self.an = Analyzer::with_classes(t.class_of_flow, t.classes.len());
        self.warm_offered = vec![0; t.classes.len()];
        self.classes = t.classes;
        self.class_share = t.class_share;
        self.mean_wire_bytes = t.mean_wire_bytes;
        self.min_wire_bytes = t.min_wire_bytes;
        Ok(())
    }

    /// The DUT.
    pub fn dut(&self) -> &dyn Dut {
        &*self.dut
    }

    /// The DUT, to change it between trials.
    pub fn dut_mut(&mut self) -> &mut dyn Dut {
        &mut *self.dut
    }

    /// Class names.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// Each class's share of the offered rate.
    pub fn class_shares(&self) -> &[f64] {
        &self.class_share
    }

    /// The traffic now offered.
    pub fn traffic(&self) -> (&TrafficSpec, &Mix) {
        (&self.spec, &self.mix)
    }

    /// What each ingress port carries.
    pub fn streams(&self) -> Vec<StreamInfo> {
        self.streams
            .iter()
            .map(|s| StreamInfo {
                port: s.port,
                share: s.share,
                frames: s.gen.rotation_len(),
                slots: s.gen.slots(),
            })
            .collect()
    }

    /// Mean and smallest frame size on the wire in the rotation, bytes.
    pub fn frame_bytes(&self) -> (f64, usize) {
        (self.mean_wire_bytes, self.min_wire_bytes)
    }

    /// What a refusal on the generator's port means.
    pub fn refusal(&self) -> Refusal {
        self.refusal
    }

    /// The runner's options.
    pub fn options(&self) -> RunnerOptions {
        self.opts
    }

    /// Switches replay (see [`RunnerOptions::replay`]) on or off for the next trials.
    pub fn set_replay(&mut self, on: bool) {
        self.opts.replay = on;
    }

    /// Latencies of the last trial, nanoseconds.
    pub fn latency_histogram(&self) -> Histogram<u64> {
        self.an.latency()
    }

    fn next_tag(&mut self) -> u8 {
        // Tag 0 is what frames stamped outside a runner carry.
        self.tag = if self.tag == u8::MAX { 1 } else { self.tag + 1 };
        self.tag
    }

    fn accepted(&self) -> u64 {
        self.streams.iter().map(|s| s.gen.total()).sum()
    }

    /// Offers `load` and drains: the hot path, which neither allocates nor formats.
    pub fn offer(&mut self, load: &Load) -> Window {
        let retry = load.retry_refused || self.refusal == Refusal::Retry;
        // Opened on the thread that runs the loop (the file names the opening thread), once.
        let me = std::thread::current().id();
        let (_, mut wait) = match self.wait.take() {
            Some((t, w)) if t == me => (t, w),
            _ => (me, stall::thread_wait()),
        };
        let warm = self.next_tag();
        let tag = self.next_tag();
        self.warm_offered.fill(0);
        if !load.warmup.is_zero() {
            for s in &mut self.streams {
                s.gen.set_tag(warm);
                s.gen.reset_counts();
            }
            self.an.reset(tag);
            self.send(load.rate, Until::Time(load.warmup), load.burst, retry, &mut wait);
            for s in &self.streams {
                for (c, &n) in s.gen.offered().iter().enumerate() {
                    self.warm_offered[c] += n;
                }
            }
        }
        self.an.reset(tag);
        for s in &mut self.streams {
            s.gen.set_tag(tag);
            s.gen.reset_counts();
        }
        self.returned = 0;
        let s = self.send(load.rate, load.until, load.burst, retry, &mut wait);
        let accepted = self.accepted();
        let (drain_ns, drain_stall) = self.drain(accepted, &mut wait);
        self.wait = Some((me, wait));
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

    fn send(
        &mut self,
        rate: Rate,
        until: Until,
        burst: Option<usize>,
        retry: bool,
        wait: &mut WaitSource,
    ) -> Sent {
        let t0 = self.clock.now_ns();
        let mut stalls = Stalls::new(wait, self.opts.stall_limit.as_nanos() as u64, t0);
        let mut end = u64::MAX;
        self.pacers.clear();
        let (n_streams, mut frames_left) = (self.streams.len(), 0u64);
        if let Until::Frames(n) = until {
            frames_left = n;
        }
        for (i, st) in self.streams.iter().enumerate() {
            let r = match rate {
                Rate::Pps(r) => Rate::Pps((r * st.share).max(1e-3)),
                Rate::Max => Rate::Max,
            };
            let total = match (until, r) {
                // Frames split by share; the last stream takes what rounding left.
                (Until::Frames(_), _) if i + 1 == n_streams => frames_left,
                (Until::Frames(n), _) => {
                    let k = ((n as f64 * st.share).round() as u64).min(frames_left);
                    frames_left -= k;
                    k
                }
                (Until::Time(d), Rate::Pps(r)) => ((r * d.as_secs_f64()).round() as u64).max(1),
                (Until::Time(d), Rate::Max) => {
                    end = t0 + d.as_nanos() as u64;
                    u64::MAX
                }
            };
            let b = burst.unwrap_or_else(|| auto_burst(r)).clamp(1, MAX_BURST);
            // Catching up goes 64 frames at a time (more only if the burst itself is larger):
            // releases of 256 keep 256 buffers (512 KiB) in flight per side and thrash the L2.
            self.pacers.push(Pacer::new(r, b, b.max(64), t0, total));
        }
        let (mut refused, mut retried, mut last, mut iter) = (0u64, 0u64, t0, 0u32);
        loop {
            let now = self.clock.now_ns();
            stalls.round(now);
            if now >= end {
                last = now;
                break;
            }
            let (mut busy, mut done) = (false, true);
            for (st, pacer) in self.streams.iter_mut().zip(self.pacers.iter_mut()) {
                let n = pacer.poll(now);
                if n > 0 {
                    let port = &mut *self.ports[st.port];
                    let k = if self.opts.replay {
                        st.gen.send(port, &mut st.batch, n)
                    } else {
                        st.gen.send_timed(port, &mut self.tx_b, n, &self.clock)
                    };
                    if retry {
                        pacer.released(k);
                        retried += (n - k) as u64;
                    } else {
                        pacer.released(n);
                        refused += (n - k) as u64;
                    }
                    last = now;
                    busy = true;
                }
                done &= pacer.done();
            }
            if !busy && done {
                break;
            }
            for &p in &self.sinks {
                busy |= self.an.recv(&mut *self.ports[p], &mut self.rx_b, &self.clock) > 0;
            }
            iter = iter.wrapping_add(1);
            if iter % 64 == 0 {
                self.returned += self.drain_back();
            }
            if let (false, Some(d)) = (busy, self.opts.idle_sleep) {
                // Not past the next release (the OS adds its timer slack, ~50 µs, anyway).
                let due = self.pacers.iter().filter_map(Pacer::next_due_ns).min();
                let until = due.map_or(u64::MAX, |t| t.saturating_sub(now));
                std::thread::sleep(d.min(Duration::from_nanos(until)));
                stalls.slept(self.clock.now_ns());
            }
        }
        Sent {
            attempted: self.pacers.iter().map(Pacer::count).sum(),
            refused,
            retried,
            t0,
            end: last,
            pacing: merge_pacing(&self.pacers),
            max_stall: stalls.max,
        }
    }

    /// Frames the DUT sent back towards the generator (ARP, ICMP errors): received and
    /// dropped, so the ring towards the generator never fills.
    fn drain_back(&mut self) -> u64 {
        let mut n = 0;
        for &p in &self.back {
            self.back_b.clear();
            n += self.ports[p].rx_burst(&mut self.back_b) as u64;
        }
        n
    }

    /// Receives until every accepted frame is back, or quiet, or the limit; returns how long
    /// that took and the longest stall of the loop.
    fn drain(&mut self, accepted: u64, wait: &mut WaitSource) -> (u64, u64) {
        let t_end = self.clock.now_ns();
        let mut last_rx = t_end;
        let mut stalls = Stalls::new(wait, self.opts.stall_limit.as_nanos() as u64, t_end);
        let (quiet, max) =
            (self.opts.quiet.as_nanos() as u64, self.opts.max_drain.as_nanos() as u64);
        loop {
            let mut n = 0;
            for &p in &self.sinks {
                n += self.an.recv(&mut *self.ports[p], &mut self.rx_b, &self.clock);
            }
            self.returned += self.drain_back();
            let now = self.clock.now_ns();
            stalls.round(now);
            if n > 0 {
                last_rx = now;
            }
            if self.an.received() >= accepted || now - last_rx >= quiet || now - t_end >= max {
                return (now - t_end, stalls.max);
            }
            if n == 0 {
                match self.opts.idle_sleep {
                    Some(d) => {
                        std::thread::sleep(d);
                        stalls.slept(self.clock.now_ns());
                    }
                    None => std::hint::spin_loop(),
                }
            }
        }
    }

    /// Offers `load` and summarises what happened, with the DUT's counters over the trial.
    pub fn trial(&mut self, load: &Load) -> TrialResult {
        let before = self.dut.snapshot();
        let w = self.offer(load);
        let after = self.dut.snapshot();
        let dut = match (before, after) {
            (Some(b), Some(a)) => Some(a.since(&b)),
            _ => None,
        };
        self.summarise(&w, dut)
    }

    fn summarise(&mut self, w: &Window, dut: Option<DutSnapshot>) -> TrialResult {
        let secs = w.send_ns as f64 / 1e9;
        let received = self.an.received();
        let lost = w.accepted.saturating_sub(received);
        let loss_ratio =
            if w.attempted == 0 { 0.0 } else { (lost + w.refused) as f64 / w.attempted as f64 };
        let mut offered = vec![0u64; self.classes.len()];
        self.sent.fill(0);
        for s in &self.streams {
            for (c, &n) in s.gen.offered().iter().enumerate() {
                if let Some(o) = offered.get_mut(c) {
                    *o += n;
                }
            }
            for (&f, &n) in s.gen.flow_ids().iter().zip(s.gen.flow_sent()) {
                if let Some(x) = self.sent.get_mut(f as usize) {
                    *x += n;
                }
            }
        }
        let classes = self
            .classes
            .iter()
            .enumerate()
            .map(|(c, name)| {
                let st = &self.an.classes()[c];
                let off = offered[c];
                let lost = off.saturating_sub(st.received);
                ClassResult {
                    name: name.clone(),
                    share: self.class_share[c],
                    offered: off,
                    received: st.received,
                    lost,
                    loss_ratio: if off == 0 { 0.0 } else { lost as f64 / off as f64 },
                    offered_pps: off as f64 / secs,
                    forwarded_pps: st.received as f64 / secs,
                    warmup_offered: self.warm_offered[c],
                    latency: st.latency.as_ref().and_then(Latency::of),
                    dut: dut.as_ref().and_then(|d| d.classes.get(name).cloned()),
                }
            })
            .collect();
        let mut fs = FlowSummary {
            flows: self.an.flows().len(),
            min_received: u64::MAX,
            ..FlowSummary::default()
        };
        for (f, st) in self.an.flows().iter().enumerate() {
            let s = self.sent.get(f).copied().unwrap_or(0);
            let l = s.saturating_sub(st.received);
            fs.with_loss += (l > 0) as usize;
            fs.with_reordering += (st.reordered > 0) as usize;
            fs.with_duplicates += (st.duplicates > 0) as usize;
            fs.sequence_gaps += st.gaps();
            fs.beyond_window += st.beyond_window;
            if s > 0 {
                fs.flows_sent += 1;
                fs.min_received = fs.min_received.min(st.received);
                fs.max_received = fs.max_received.max(st.received);
                fs.max_loss_ratio = fs.max_loss_ratio.max(l as f64 / s as f64);
            }
        }
        if fs.flows_sent == 0 {
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
            latency: Latency::of(&self.an.latency()),
            pacing: w.pacing,
            classes,
            flows: fs,
            dut: dut.map(|d| d.total),
        }
    }

    /// Stops the DUT and returns its report.
    pub fn finish(mut self) -> Result<DutReport, Error> {
        self.stopped = true;
        self.dut.stop()
    }
}

/// The pacing of several streams as one: bursts of the first, releases and late releases
/// summed, the mean lateness weighted by releases, the largest lateness of any.
fn merge_pacing(pacers: &[Pacer]) -> PacerStats {
    let mut out = PacerStats::default();
    let mut late_sum = 0.0;
    for (i, p) in pacers.iter().enumerate() {
        let s = p.stats();
        if i == 0 {
            out.burst = s.burst;
        }
        out.releases += s.releases;
        late_sum += s.mean_late_ns * s.releases as f64;
        out.max_late_ns = out.max_late_ns.max(s.max_late_ns);
        out.late_over_100us += s.late_over_100us;
    }
    if out.releases > 0 {
        out.mean_late_ns = late_sum / out.releases as f64;
    }
    out
}

impl Drop for Runner {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.dut.stop();
        }
    }
}
