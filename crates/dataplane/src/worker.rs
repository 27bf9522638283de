//! A worker's own state: what one thread needs to run cells, whichever cells it runs.
//!
//! The per-burst scratch (the receive batch, the VRs' output queue, per-packet metadata, the
//! lookup keys) is sized for one burst and shared by every cell the worker polls, since it runs
//! one burst at a time: a cell, and so a VR, costs only its own tables (1024 VRs do not carry
//! 1024 half-megabyte batches). Besides the scratch: the clock that measures time budgets and
//! the account of spare capacity that weights share (see `budget.rs`).

use ports::{Batch, MAX_BURST};

use crate::budget::{Spare, SPARE_WINDOW_NS};
use crate::cell::{Cell, Run, TxInfo, NONE};
use crate::vr::{Lookup, Meta, OutQueue};

/// Where a worker reads the time it charges to VRs: nanoseconds, monotonic, any origin.
/// Injected, because the data plane makes no system call of its own: a runtime passes the TSC,
/// tests pass a fake. Called a few times per burst, so it must be cheap.
pub type Clock = Box<dyn FnMut() -> u64 + Send>;

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
    pub(crate) clock: Option<Clock>,
    pub(crate) spare: Spare,
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
            clock: None,
            spare: Spare::new(SPARE_WINDOW_NS),
        }
    }

    /// A worker that measures time with `clock`.
    pub fn with_clock(clock: Clock) -> Worker {
        let mut w = Worker::new();
        w.clock = Some(clock);
        w
    }

    /// Replaces the clock (`None`: none).
    pub fn set_clock(&mut self, clock: Option<Clock>) {
        self.clock = clock;
    }

    /// Whether the worker measures time.
    pub fn has_clock(&self) -> bool {
        self.clock.is_some()
    }

    /// Sets the length of the spare-capacity window (default 1 ms).
    pub fn set_spare_window(&mut self, ns: u64) {
        self.spare = Spare::new(ns);
    }

    /// The spare capacity measured in the last window closed, in nanoseconds.
    pub fn spare_ns(&self) -> u64 {
        self.spare.pool()
    }

    /// One pass over every cell. `now` is a monotonic time in nanoseconds; it drives periods,
    /// neighbor timers and ICMP rate limits. Returns the number of frames received.
    pub fn poll(&mut self, cells: &mut [Cell], now: u64) -> usize {
        self.spare.roll(now);
        let mut n = 0;
        for c in cells {
            n += c.poll(self, now);
        }
        n
    }

    /// The clock, or 0 without one.
    #[inline]
    pub(crate) fn read_clock(&mut self) -> u64 {
        match &mut self.clock {
            Some(c) => c(),
            None => 0,
        }
    }
}
