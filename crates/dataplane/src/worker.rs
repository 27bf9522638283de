//! A worker's own state: what one thread needs to run cells, whichever cells it runs.
//!
//! The per-burst scratch (the receive batch, the VRs' output queue, per-packet metadata, the
//! lookup keys) is sized for one burst and shared by every cell the worker polls, since it runs
//! one burst at a time: a cell, and so a VR, costs only its own tables (1024 VRs do not carry
//! 1024 half-megabyte batches). Besides the scratch: the clock that measures time budgets and
//! the account of spare capacity that weights share (see `budget.rs`).
//!
//! **What the clock charges.** While every pass finds work, a burst's charge starts where the
//! previous burst's ended, so the rest of a busy pass (polling empty ports, the caller's loop,
//! housekeeping) is charged to the bursts that made the pass busy: at saturation that is what
//! each packet costs the worker, and what a VR's unreserved peak rate pays for, so a
//! reservation of R gets R of that peak. A pass that finds nothing breaks the chain: idle time
//! is nobody's. A step of the clock longer than [`AWAY_NS`] is taken out of the worker's time
//! altogether: the thread was descheduled (or the caller did work of its own), and charging
//! that to the VR that happened to run would put it in debt for many periods.

use ports::{Batch, MAX_BURST};

use crate::budget::{Admit, Spare, SPARE_WINDOW_NS};
use crate::types::{Lookup, Meta, OutQueue, NONE};

/// Where a worker reads the time it charges to VRs: nanoseconds, monotonic, any origin.
/// Injected, because the data plane makes no system call of its own: a runtime passes the TSC,
/// tests pass a fake. Called a few times per burst, so it must be cheap.
pub type Clock = Box<dyn FnMut() -> u64 + Send>;

/// A step between two reads of the clock longer than this is time the worker did not run
/// bursts (see the module docs). A real step is far shorter: one VR's run over a full burst
/// of 256 packets would have to cost 780 ns a packet to reach it.
pub const AWAY_NS: u64 = 200_000;

/// What to count once a port has taken, or refused, a packet.
#[derive(Clone, Copy, Default)]
pub(crate) struct TxInfo {
    pub vr: u16,
    pub len: u16,
    pub transit: bool,
}

/// One VR's part of a burst: what it was admitted and the clock time of its pipeline run.
#[derive(Clone, Copy, Default)]
pub(crate) struct Run {
    pub admit: Admit,
    pub ns: u64,
}

/// One worker's scratch, clock and spare-capacity account.
pub struct Worker {
    pub(crate) batch: Batch,
    /// What VRs make beyond the packets they received; shared, as one VR runs at a time.
    pub(crate) out: OutQueue,
    pub(crate) meta: Box<[Meta; MAX_BURST]>,
    pub(crate) info: Box<[TxInfo; MAX_BURST]>,
    /// Per packet: the next packet of the same VR in the burst.
    pub(crate) next: Box<[u16; MAX_BURST]>,
    pub(crate) sel: Box<[u16; MAX_BURST]>,
    /// VRs the burst touched, in order of first packet.
    pub(crate) touched: Vec<u16>,
    /// Per touched VR: what it was admitted and what its run took.
    pub(crate) runs: Box<[Run; MAX_BURST]>,
    pub(crate) lookup: Box<Lookup>,
    pub(crate) clock: Timer,
    pub(crate) spare: Spare,
    /// The worker's time where the last burst's charge ended, while passes find work.
    pub(crate) busy_since: Option<u64>,
    /// The source of the poll's `now`, read again when a burst arrives for a cell with an
    /// impairment: a frame that came after the poll began (the thread preempted between the
    /// two) must not be held from a time before it arrived, and leave early.
    pub(crate) poll_clock: Option<Clock>,
}

/// The worker's time: its [`Clock`] less the steps longer than [`AWAY_NS`].
#[derive(Default)]
pub(crate) struct Timer {
    clock: Option<Clock>,
    /// The last raw reading, and the long steps taken out of it.
    raw: u64,
    away: u64,
}

impl Timer {
    pub fn is_set(&self) -> bool {
        self.clock.is_some()
    }

    /// The worker's time, or 0 without a clock.
    #[inline]
    pub fn read(&mut self) -> u64 {
        let Some(c) = &mut self.clock else { return 0 };
        let raw = c();
        let step = raw.saturating_sub(self.raw);
        self.raw = self.raw.max(raw);
        if step > AWAY_NS {
            self.away += step;
        }
        self.raw - self.away
    }
}

impl Default for Worker {
    fn default() -> Self {
        Worker::new()
    }
}

impl Worker {
    /// A worker without a clock: time budgets and weights do not limit (see [`Clock`]).
    pub fn new() -> Worker {
        Worker {
            batch: Batch::new(MAX_BURST),
            out: OutQueue::new(MAX_BURST),
            meta: Box::new([Meta::default(); MAX_BURST]),
            info: Box::new([TxInfo::default(); MAX_BURST]),
            next: Box::new([NONE; MAX_BURST]),
            sel: Box::new([0; MAX_BURST]),
            touched: Vec::with_capacity(MAX_BURST),
            runs: Box::new([Run::default(); MAX_BURST]),
            lookup: Lookup::new(),
            clock: Timer::default(),
            spare: Spare::new(SPARE_WINDOW_NS),
            busy_since: None,
            poll_clock: None,
        }
    }

    /// A worker that measures time with `clock`.
    pub fn with_clock(clock: Clock) -> Worker {
        let mut w = Worker::new();
        w.set_clock(Some(clock));
        w
    }

    /// Replaces the clock (`None`: none).
    pub fn set_clock(&mut self, clock: Option<Clock>) {
        self.clock = Timer { clock, ..Timer::default() };
        self.busy_since = None;
    }

    /// Whether the worker measures time.
    pub fn has_clock(&self) -> bool {
        self.clock.is_set()
    }

    /// Sets where the `now` the worker's polls get comes from (the same origin and unit), so
    /// that impairments hold a frame from when it arrived; `None`: the poll's `now` only (a
    /// simulated clock).
    pub fn set_poll_clock(&mut self, clock: Option<Clock>) {
        self.poll_clock = clock;
    }

    /// The poll clock's time now, never before `at_least` (the poll's `now` without one).
    pub(crate) fn poll_time(&mut self, at_least: u64) -> u64 {
        self.poll_clock.as_mut().map_or(at_least, |c| c().max(at_least))
    }

    /// Sets the length of the spare-capacity window (default 1 ms).
    pub fn set_spare_window(&mut self, ns: u64) {
        self.spare = Spare::new(ns);
    }

    /// The spare capacity measured in the last window closed, in nanoseconds.
    pub fn spare_ns(&self) -> u64 {
        self.spare.pool()
    }

    /// The worker's time (see [`Timer`]); 0 without a clock.
    #[inline]
    pub(crate) fn read_clock(&mut self) -> u64 {
        self.clock.read()
    }

    /// Where the charge of a burst just received starts: where the last one's ended while
    /// passes find work, else now.
    #[inline]
    pub(crate) fn burst_start(&mut self) -> u64 {
        match self.busy_since {
            Some(t) => t,
            None => self.read_clock(),
        }
    }
}
