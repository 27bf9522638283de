//! Link impairments: what a frame suffers on its way out of a port (ARCHITECTURE decision 11).
//!
//! One [`Impair`] sits on one port's egress: every frame a VR or a switch sends there is
//! offered to it ([`Impair::offer`]) instead of the port, and leaves when its time comes
//! ([`Impair::release`], from the worker's later polls). The semantics are netem's
//! (`tc-netem(8)`), applied per frame in netem's order:
//!
//! 1. `duplicate`: with this chance a second copy is made; the copy goes through the steps
//!    below on its own (it is never duplicated again).
//! 2. `loss`: random (each frame lost with the chance), or Gilbert-Elliott (netem's `gemodel
//!    p r 1-h 1-k`: a good and a bad state, `p` the chance to go bad, `r` to come back, `1-h`
//!    the loss chance in the bad state, `1-k` in the good one; the state moves first, and the
//!    frame is lost by the chance of the state it was in). Counted [`ImpairDrop::Loss`].
//! 3. `corrupt`: with this chance one bit of the frame, anywhere, is flipped (the frame's
//!    checksums are then wrong, as on a real line).
//! 4. `limit`: at most this many frames wait on the link; one more is dropped, counted
//!    [`ImpairDrop::Rate`] when the rate's queue is what holds them, else [`ImpairDrop::Limit`].
//! 5. `delay` with `jitter` drawn from `distribution`: netem's uniform (`delay ± jitter`,
//!    evenly), normal, pareto and paretonormal (its tables' formulas, computed rather than
//!    read: `delay + jitter × x`, `x` a standard normal deviate, netem's pareto deviate
//!    `(u^-1/3 - 1.5) × 4/3`, or the two mixed 1:3 at the same `u`); a delay below 0 is 0.
//!    `reorder`: with this chance a frame skips the delay (and the rate's queue) and leaves at
//!    once, ahead of frames sent before it (netem's `reorder` with `gap 1`).
//! 6. `rate`: the link sends `rate` bits a second: a frame leaves when its delay is over and
//!    the link has finished the frame before, plus its own length's time (netem's rate, a
//!    token bucket one frame deep).
//!
//! What waits does so in buffers made when the impairment is set: a pool of `limit` packet
//! buffers, exchanged with the sender's batch (no copy, no allocation; a duplicate is one
//! copy into a pool buffer). Waiting frames are ordered by a hashed timer wheel of
//! [`WHEEL_SLOTS`] slots of [`SLOT_NS`]; each slot's list is kept in time order, so frames due
//! at the same time leave in the order they came. The wheel is the link's, not the worker's:
//! a cell that moves to another worker takes its waiting frames with it. A frame the port
//! refuses when its time comes is dropped, counted [`ImpairDrop::TxFull`].
//!
//! Every chance is drawn from a PRNG (xoshiro256**) seeded by `seed`, so one seed gives the
//! same pattern of losses, copies, flips and delays on every run. [`Impair::reconfigure`]
//! changes the settings live: frames already waiting keep the time they were given; the new
//! settings apply to frames offered afterwards.
//!
//! Sans-IO: time is an argument (`now`, the worker's poll time in nanoseconds).

use ports::{Batch, PktBuf, Port, MAX_BURST};

use crate::types::BuildError;

/// A chance in units of 2^-32: 0 never, [`Chance::ALWAYS`] always (netem's u32 scale, with
/// room for an exact 100 %).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Chance(pub u64);

impl Chance {
    pub const NEVER: Chance = Chance(0);
    pub const ALWAYS: Chance = Chance(1 << 32);

    /// `pct` percent (0..=100), rounded to the scale; `None` out of range or not a number.
    pub fn from_percent(pct: f64) -> Option<Chance> {
        if !(0.0..=100.0).contains(&pct) {
            return None;
        }
        Some(Chance((pct / 100.0 * (1u64 << 32) as f64).round() as u64))
    }

    /// As a percentage.
    pub fn percent(self) -> f64 {
        self.0 as f64 * 100.0 / (1u64 << 32) as f64
    }

    /// The chance of the opposite.
    pub fn complement(self) -> Chance {
        Chance((1 << 32) - self.0.min(1 << 32))
    }

    fn is_set(self) -> bool {
        self.0 > 0
    }
}

/// The shape of the delay's jitter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Evenly over `delay - jitter .. delay + jitter` (netem without a table).
    #[default]
    Uniform,
    Normal,
    Pareto,
    ParetoNormal,
}

impl Distribution {
    pub const ALL: [Distribution; 4] = [
        Distribution::Uniform,
        Distribution::Normal,
        Distribution::Pareto,
        Distribution::ParetoNormal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Normal => "normal",
            Distribution::Pareto => "pareto",
            Distribution::ParetoNormal => "paretonormal",
        }
    }
}

/// How frames are lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Loss {
    #[default]
    None,
    /// Each frame on its own, with this chance.
    Random(Chance),
    /// Gilbert-Elliott (netem `gemodel p r 1-h 1-k`).
    Gilbert {
        /// Good to bad.
        p: Chance,
        /// Bad to good.
        r: Chance,
        /// Loss in the bad state (`1-h`).
        bad: Chance,
        /// Loss in the good state (`1-k`).
        good: Chance,
    },
}

/// The most frames one link holds (`limit`). Each is a whole packet buffer made when the
/// impairment is set (on the worker, between two polls), so the bound is also the most memory
/// one impaired port can take: 16,384 buffers are about 150 MB.
pub const MAX_LIMIT: u32 = 16_384;
/// `limit` when none is given (netem's default).
pub const DEFAULT_LIMIT: u32 = 1000;
/// The longest `delay` (and `jitter`).
pub const MAX_DELAY_NS: u64 = 10_000_000_000;
/// The slowest and fastest `rate`, bits a second.
pub const MIN_RATE_BPS: u64 = 1_000;
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;

/// One direction of a link's impairment. `Default` is none at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImpairConfig {
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub distribution: Distribution,
    pub loss: Loss,
    pub duplicate: Chance,
    pub reorder: Chance,
    pub corrupt: Chance,
    /// Bits a second; 0: no rate limit.
    pub rate_bps: u64,
    /// Frames the link holds at most (1..=[`MAX_LIMIT`]).
    pub limit: u32,
    pub seed: u64,
}

impl Default for ImpairConfig {
    fn default() -> Self {
        ImpairConfig {
            delay_ns: 0,
            jitter_ns: 0,
            distribution: Distribution::Uniform,
            loss: Loss::None,
            duplicate: Chance::NEVER,
            reorder: Chance::NEVER,
            corrupt: Chance::NEVER,
            rate_bps: 0,
            limit: DEFAULT_LIMIT,
            seed: 0,
        }
    }
}

impl ImpairConfig {
    /// Whether these settings change anything (limit and seed alone do not).
    pub fn is_none(&self) -> bool {
        ImpairConfig { limit: DEFAULT_LIMIT, seed: 0, ..*self } == ImpairConfig::default()
    }

    /// Checks the ranges the topology checks, for callers that build a config themselves.
    pub fn check(&self) -> Result<(), BuildError> {
        let bad = |s: String| Err(BuildError(s));
        let chances =
            [("duplicate", self.duplicate), ("reorder", self.reorder), ("corrupt", self.corrupt)];
        let loss = match self.loss {
            Loss::None => vec![],
            Loss::Random(c) => vec![("loss", c)],
            Loss::Gilbert { p, r, bad, good } => {
                vec![
                    ("gemodel p", p),
                    ("gemodel r", r),
                    ("gemodel 1-h", bad),
                    ("gemodel 1-k", good),
                ]
            }
        };
        if let Some((n, c)) = chances.iter().chain(&loss).find(|(_, c)| *c > Chance::ALWAYS) {
            return bad(format!("{n}: chance {} above 2^32 (100 %)", c.0));
        }
        if self.delay_ns > MAX_DELAY_NS || self.jitter_ns > MAX_DELAY_NS {
            return bad(format!("delay/jitter above {MAX_DELAY_NS} ns"));
        }
        if self.rate_bps != 0 && !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&self.rate_bps) {
            return bad(format!("rate {} outside {MIN_RATE_BPS}..={MAX_RATE_BPS}", self.rate_bps));
        }
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return bad(format!("limit {} outside 1..={MAX_LIMIT}", self.limit));
        }
        if self.reorder.is_set() && self.delay_ns == 0 {
            return bad("reorder needs a delay (frames reordered skip it)".into());
        }
        Ok(())
    }
}

/// What is shown the frames an impairment drops (a capture, a trace): only while one looks.
pub(crate) trait Watch {
    /// Frame `f` was dropped for `r`; `slot`: its slot in the batch offered, if it was
    /// dropped as it was offered.
    fn dropped(&mut self, slot: Option<u16>, r: ImpairDrop, f: &[u8]);
}

/// Why an impairment dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum ImpairDrop {
    /// Lost (`loss`, random or Gilbert-Elliott).
    Loss,
    /// The link held `limit` frames already, waiting for their delay.
    Limit,
    /// The link held `limit` frames already, queued behind its `rate`.
    Rate,
    /// The port refused the frame when its time came (its ring was full).
    TxFull,
}

impl ImpairDrop {
    pub const COUNT: usize = 4;
    pub const ALL: [ImpairDrop; Self::COUNT] =
        [ImpairDrop::Loss, ImpairDrop::Limit, ImpairDrop::Rate, ImpairDrop::TxFull];

    pub fn name(self) -> &'static str {
        match self {
            ImpairDrop::Loss => "impair_loss",
            ImpairDrop::Limit => "impair_limit",
            ImpairDrop::Rate => "impair_rate",
            ImpairDrop::TxFull => "impair_tx_full",
        }
    }
}

/// What one link's impairment did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImpairCounters {
    /// Frames offered (sent to the link).
    pub offered: u64,
    /// Frames the port took, after the impairment (duplicates included).
    pub sent: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Frames that skipped the delay (`reorder`).
    pub reordered: u64,
    pub drops: [u64; ImpairDrop::COUNT],
}

impl ImpairCounters {
    pub fn dropped(&self, r: ImpairDrop) -> u64 {
        self.drops[r as usize]
    }
}

/// Width of a timer-wheel slot: 2^14 ns (16.4 us).
pub const SLOT_NS: u64 = 1 << SLOT_SHIFT;
const SLOT_SHIFT: u32 = 14;
/// Slots of the wheel: one turn is 67 ms; a frame due later waits its turn in its slot.
pub const WHEEL_SLOTS: usize = 4096;
const NIL: u32 = u32::MAX;

/// `0, 1, ..., 255`: a release burst's selection.
const ALL_SLOTS: [u16; MAX_BURST] = {
    let mut a = [0u16; MAX_BURST];
    let mut i = 0;
    while i < MAX_BURST {
        a[i] = i as u16;
        i += 1;
    }
    a
};

/// A waiting frame: its buffer, when it leaves, and the next frame of its wheel slot.
struct Slot {
    buf: PktBuf,
    due: u64,
    next: u32,
}

/// One direction of one link's impairment: its settings, PRNG, pool and wheel.
pub struct Impair {
    cfg: ImpairConfig,
    rng: Rng,
    /// Gilbert-Elliott: in the bad state.
    bad: bool,
    /// Rate: when the link has finished the last frame queued on it.
    link_free: u64,
    slots: Vec<Slot>,
    /// Pool slots not holding a frame.
    free: Vec<u32>,
    head: Box<[u32]>,
    tail: Box<[u32]>,
    /// The wheel's tick (`now / SLOT_NS`) last released.
    cursor: u64,
    /// A release burst: its buffers come from the pool, `from` says which slot each.
    out: Batch,
    from: Box<[u32; MAX_BURST]>,
    counters: ImpairCounters,
}

impl Impair {
    /// An impairment with `cfg`, its pool of `cfg.limit` buffers made now.
    pub fn new(cfg: ImpairConfig) -> Result<Impair, BuildError> {
        cfg.check()?;
        let mut imp = Impair {
            cfg,
            rng: Rng::new(cfg.seed),
            bad: false,
            link_free: 0,
            slots: Vec::new(),
            free: Vec::new(),
            head: vec![NIL; WHEEL_SLOTS].into_boxed_slice(),
            tail: vec![NIL; WHEEL_SLOTS].into_boxed_slice(),
            cursor: 0,
            out: Batch::new(MAX_BURST),
            from: Box::new([NIL; MAX_BURST]),
            counters: ImpairCounters::default(),
        };
        imp.grow(cfg.limit);
        Ok(imp)
    }

    /// New settings, from the next frame offered; frames waiting keep their times. A new seed
    /// restarts the PRNG (and the Gilbert-Elliott state); the pool grows to a larger limit
    /// now and stays as it is for a smaller one (no more than `limit` are taken in).
    pub fn reconfigure(&mut self, cfg: ImpairConfig) -> Result<(), BuildError> {
        cfg.check()?;
        if cfg.seed != self.cfg.seed {
            self.rng = Rng::new(cfg.seed);
            self.bad = false;
        }
        self.grow(cfg.limit);
        self.cfg = cfg;
        Ok(())
    }

    fn grow(&mut self, limit: u32) {
        let n = self.slots.len() as u32;
        if limit <= n {
            return;
        }
        self.free.reserve(limit as usize - self.free.len());
        for i in n..limit {
            self.slots.push(Slot { buf: PktBuf::new(), due: 0, next: NIL });
            self.free.push(i);
        }
    }

    pub fn config(&self) -> &ImpairConfig {
        &self.cfg
    }

    pub fn counters(&self) -> &ImpairCounters {
        &self.counters
    }

    /// Frames waiting now.
    pub fn held(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes frames `sel` of `batch` (all of them: each is dropped and counted, or waits in
    /// the pool, its buffer exchanged for a spare of the pool's). Those due at once leave at
    /// the next [`Impair::release`].
    pub fn offer(&mut self, batch: &mut Batch, sel: &[u16], now: u64) {
        self.offer_watched(batch, sel, now, None);
    }

    /// [`Impair::offer`], each frame dropped shown to `watch` (a capture of the port's drops,
    /// a trace) if there is one, with its slot in `batch`.
    pub(crate) fn offer_watched(
        &mut self,
        batch: &mut Batch,
        sel: &[u16],
        now: u64,
        mut watch: Option<&mut (dyn Watch + '_)>,
    ) {
        self.counters.offered += sel.len() as u64;
        for &i in sel {
            let copies = if self.roll(self.cfg.duplicate) {
                self.counters.duplicated += 1;
                2
            } else {
                1
            };
            for copy in 0..copies {
                if self.lost() {
                    self.dropped(ImpairDrop::Loss, &mut watch, i, batch.get(i as usize).frame());
                    continue;
                }
                let Some(s) = self.free.pop() else {
                    let queued = self.cfg.rate_bps > 0 && self.link_free > now;
                    let r = if queued { ImpairDrop::Rate } else { ImpairDrop::Limit };
                    self.dropped(r, &mut watch, i, batch.get(i as usize).frame());
                    continue;
                };
                let pkt = &mut self.slots[s as usize].buf;
                if copy + 1 < copies {
                    pkt.fill(batch.get(i as usize).frame());
                } else {
                    batch.swap_buf(i as usize, pkt);
                }
                if self.held() > self.cfg.limit as usize {
                    // A smaller limit set live while more waited: this one does not fit.
                    self.free.push(s);
                    self.counters.drops[ImpairDrop::Limit as usize] += 1;
                    if let Some(w) = watch.as_deref_mut() {
                        w.dropped(Some(i), ImpairDrop::Limit, self.slots[s as usize].buf.frame());
                    }
                    continue;
                }
                self.corrupt(s);
                let due = self.due(s, now);
                self.insert(s, due);
            }
        }
    }

    /// Counts a drop for `r` of the frame in slot `i`, and shows it to `watch`.
    #[inline]
    fn dropped(
        &mut self,
        r: ImpairDrop,
        watch: &mut Option<&mut (dyn Watch + '_)>,
        i: u16,
        f: &[u8],
    ) {
        self.counters.drops[r as usize] += 1;
        if let Some(w) = watch.as_deref_mut() {
            w.dropped(Some(i), r, f);
        }
    }

    /// Sends every frame due by `now` on `port`, in time order, in bursts; returns how many the
    /// port took (the rest are dropped, [`ImpairDrop::TxFull`]).
    pub fn release(&mut self, now: u64, port: &mut dyn Port) -> usize {
        self.release_watched(now, port, None)
    }

    /// [`Impair::release`], each frame the port refused shown to `watch`, if any.
    pub(crate) fn release_watched(
        &mut self,
        now: u64,
        port: &mut dyn Port,
        mut watch: Option<&mut (dyn Watch + '_)>,
    ) -> usize {
        let mut sent = 0;
        loop {
            let n = self.pop_due(now);
            if n == 0 {
                return sent;
            }
            let k = port.tx_burst(&mut self.out, &ALL_SLOTS[..n]);
            if let Some(w) = watch.as_deref_mut() {
                for j in k..n {
                    w.dropped(None, ImpairDrop::TxFull, self.out.get(j).frame());
                }
            }
            for j in 0..n {
                let s = self.from[j];
                self.out.swap_buf(j, &mut self.slots[s as usize].buf);
                self.free.push(s);
            }
            self.out.clear();
            self.counters.sent += k as u64;
            self.counters.drops[ImpairDrop::TxFull as usize] += (n - k) as u64;
            sent += k;
            if n < MAX_BURST {
                return sent;
            }
        }
    }

    /// When the next waiting frame is due; `None` if none waits.
    pub fn next_due(&self) -> Option<u64> {
        if self.held() == 0 {
            return None;
        }
        // The first slot from the cursor holding a frame of this turn has the earliest one;
        // frames of later turns only bound it.
        let turn_end = (self.cursor + WHEEL_SLOTS as u64) << SLOT_SHIFT;
        let mut best = u64::MAX;
        for t in 0..WHEEL_SLOTS as u64 {
            let h = self.head[((self.cursor + t) as usize) % WHEEL_SLOTS];
            if h != NIL {
                let due = self.slots[h as usize].due;
                if due < turn_end {
                    return Some(due.min(best));
                }
                best = best.min(due);
            }
        }
        Some(best)
    }

    /// Moves up to a burst of frames due by `now` into `out`, in time order; returns how many.
    fn pop_due(&mut self, now: u64) -> usize {
        let tick = now >> SLOT_SHIFT;
        if tick < self.cursor {
            self.cursor = tick;
        }
        let steps = (tick - self.cursor).min(WHEEL_SLOTS as u64 - 1);
        let mut n = 0;
        for t in 0..=steps {
            let w = ((self.cursor + t) as usize) % WHEEL_SLOTS;
            while n < MAX_BURST {
                let h = self.head[w];
                if h == NIL || self.slots[h as usize].due > now {
                    break;
                }
                self.head[w] = self.slots[h as usize].next;
                if self.head[w] == NIL {
                    self.tail[w] = NIL;
                }
                self.out.swap_buf(n, &mut self.slots[h as usize].buf);
                self.from[n] = h;
                n += 1;
            }
            if n == MAX_BURST {
                // The rest of this slot, and later ones, on the next round of `release`.
                self.cursor += t;
                self.out.set_len(n);
                return n;
            }
        }
        self.cursor = tick;
        self.out.set_len(n);
        n
    }

    /// Files pool slot `s` under `due`, after every frame due no later.
    fn insert(&mut self, s: u32, due: u64) {
        let w = ((due >> SLOT_SHIFT) as usize) % WHEEL_SLOTS;
        self.slots[s as usize].due = due;
        self.slots[s as usize].next = NIL;
        let t = self.tail[w];
        if t == NIL {
            self.head[w] = s;
            self.tail[w] = s;
        } else if self.slots[t as usize].due <= due {
            self.slots[t as usize].next = s;
            self.tail[w] = s;
        } else {
            // Jitter made it earlier than the slot's last: walk to its place.
            let (mut prev, mut cur) = (NIL, self.head[w]);
            while cur != NIL && self.slots[cur as usize].due <= due {
                prev = cur;
                cur = self.slots[cur as usize].next;
            }
            self.slots[s as usize].next = cur;
            if prev == NIL {
                self.head[w] = s;
            } else {
                self.slots[prev as usize].next = s;
            }
        }
    }

    /// When the frame in pool slot `s`, offered at `now`, leaves.
    fn due(&mut self, s: u32, now: u64) -> u64 {
        if self.cfg.reorder.is_set() && self.roll(self.cfg.reorder) {
            self.counters.reordered += 1;
            return now;
        }
        let at = now + self.delay();
        if self.cfg.rate_bps == 0 {
            return at;
        }
        let bits = self.slots[s as usize].buf.len() as u128 * 8;
        let tx = (bits * 1_000_000_000 / self.cfg.rate_bps as u128) as u64;
        self.link_free = at.max(self.link_free) + tx;
        self.link_free
    }

    /// One delay drawn from the settings.
    fn delay(&mut self) -> u64 {
        let c = self.cfg;
        if c.jitter_ns == 0 {
            return c.delay_ns;
        }
        let u = self.rng.unit();
        let x = match c.distribution {
            Distribution::Uniform => 2.0 * u - 1.0,
            Distribution::Normal => normal_quantile(u),
            Distribution::Pareto => pareto(u),
            Distribution::ParetoNormal => (normal_quantile(u) + 3.0 * pareto(u)) / 4.0,
        };
        (c.delay_ns as f64 + c.jitter_ns as f64 * x).max(0.0) as u64
    }

    /// Whether the next frame is lost (moving the Gilbert-Elliott state).
    fn lost(&mut self) -> bool {
        match self.cfg.loss {
            Loss::None => false,
            Loss::Random(c) => self.roll(c),
            Loss::Gilbert { p, r, bad, good } => {
                if self.bad {
                    if self.roll(r) {
                        self.bad = false;
                    }
                    self.roll(bad)
                } else {
                    if self.roll(p) {
                        self.bad = true;
                    }
                    self.roll(good)
                }
            }
        }
    }

    /// Flips one bit of pool slot `s`'s frame, by the `corrupt` chance.
    fn corrupt(&mut self, s: u32) {
        if !self.cfg.corrupt.is_set() || !self.roll(self.cfg.corrupt) {
            return;
        }
        let f = self.slots[s as usize].buf.frame_mut();
        if f.is_empty() {
            return;
        }
        let r = self.rng.next();
        let at = (r >> 32) as usize % f.len();
        f[at] ^= 1 << (r & 7);
        self.counters.corrupted += 1;
    }

    fn roll(&mut self, c: Chance) -> bool {
        c.is_set() && ((self.rng.next() >> 32) < c.0)
    }
}

/// netem's pareto deviate for `u` in [0, 1): its table's `(1/v^(1/3) - 1.5) × 4/3` at
/// `v = 1 - u`, capped as the table's 16-bit entries are (32767 / 8192).
fn pareto(u: f64) -> f64 {
    let v = 1.0 - u;
    ((v.powf(-1.0 / 3.0) - 1.5) * 4.0 / 3.0).min(32767.0 / 8192.0)
}

/// The standard normal quantile at `u` in (0, 1) (Acklam's rational approximation, relative
/// error below 1.2e-9), clamped to ±10 as netem's table is.
fn normal_quantile(u: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.38357751867269e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    const LOW: f64 = 0.02425;
    let u = u.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let x = if u < LOW {
        tail((-2.0 * u.ln()).sqrt())
    } else if u <= 1.0 - LOW {
        let q = u - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - u).ln()).sqrt())
    };
    x.clamp(-10.0, 10.0)
}

/// xoshiro256** seeded through splitmix64: small, fast, and the same stream for a seed on
/// every platform and build (no crate's version can change it).
struct Rng([u64; 4]);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut s = [0u64; 4];
        for x in &mut s {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut y = z;
            y = (y ^ (y >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            y = (y ^ (y >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            *x = y ^ (y >> 31);
        }
        Rng(s)
    }

    fn next(&mut self) -> u64 {
        let s = &mut self.0;
        let r = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests;
