//! Per-VR reservations, enforced at classification (ARCHITECTURE "Per-VR budgets at
//! classification"; seed 000 §3.4).
//!
//! A reserved VR has an [`Account`]: its [`Reservation`] (Q every T), where its current period
//! started and what it spent in it. After demux has grouped a burst by VR, the engine asks the
//! account how many of the VR's packets it may process ([`Account::admit`]) before the VR sees
//! any of them; the rest are dropped there as `over_budget`. After the burst it charges what the
//! admitted packets cost ([`Account::charge`]).
//!
//! **Periods.** A VR's first period starts at its first packet after the reservation is set;
//! period k is `[start + kT, start + (k+1)T)`. At a boundary what was spent falls by Q per
//! elapsed period, never below zero: an overrun is paid back from the next period, unused budget
//! is not saved up (a Constant Bandwidth Server replenishes, it does not accumulate). A new
//! reservation takes effect at the VR's next period boundary; a VR that had none (or had not
//! started a period) gets it at once.
//!
//! **Packets** are exact: `n` packets with `r` left admit `min(n, r)`.
//!
//! **Time** is measured with the worker's clock: a VR is charged its own pipeline run plus its
//! share, by packets admitted, of the burst's common work (receive, demux, transmit, and while
//! every pass finds work the rest of the pass since the previous burst: empty ports, the
//! caller's loop; steps where the worker was descheduled are left out: see `worker.rs`).
//! Packets dropped over budget are charged to no one. A reservation of R is so a share R of
//! what the worker can do, the VR's unreserved peak included: a charge that left the pass's
//! other steps out gave the VR R of the charged time, which at saturation is more than R of
//! the worker (1.05-1.20 × the goal on the reservation scenario), and wall time the thread
//! was descheduled in, charged to the VR running then, left it in debt for periods after. A group that only partly fits is cut at
//! `ceil(left / cost)`, `cost` being an EWMA (1/8) of the VR's charged time per packet; the
//! overrun that estimate allows is paid back next period, so the long-run rate is exact.
//!
//! **Spare capacity (weights).** The worker counts time in windows (1 ms unless set). The spare
//! of a window is its length minus the time charged to work that had to be done: packets within
//! budget, VRs without a reservation, switches. In the next window, every VR with weight `w > 0`
//! that has run out of budget gets an allowance of `spare × w / W`, `W` being the sum of the
//! weights of the VRs that ran out in the previous window (its own added if it did not), and
//! its excess packets are admitted against that allowance as time budgets are. The first window
//! has no spare. What over-budget packets cost the worker (receive, demux, drop) is not
//! subtracted, so weighted VRs that reclaim all the spare run the worker at saturation, and a
//! receive ring shared with another VR then overflows for both: give weight 0 where isolation
//! matters more than using every cycle.

use crate::config::{Budget, Reservation};

/// Not started / never.
const NEVER: u64 = u64::MAX;
/// Fixed-point shift of the per-packet cost estimate (1/256 ns).
const COST_SHIFT: u32 = 8;
/// Default length of a worker's spare-capacity window.
pub const SPARE_WINDOW_NS: u64 = 1_000_000;

/// How many of a VR's packets in one burst may be processed: `within` its budget, then `excess`
/// more on spare capacity. The rest are over budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Admit {
    pub within: usize,
    pub excess: usize,
}

impl Admit {
    pub fn total(&self) -> usize {
        self.within + self.excess
    }
}

/// One VR's reservation and what it spent.
#[derive(Clone, Debug)]
pub(crate) struct Account {
    res: Option<Reservation>,
    /// A change waiting for the next period boundary.
    next: Option<Option<Reservation>>,
    start: u64,
    /// Nanoseconds or packets, per the budget, spent in the current period (with any overrun
    /// carried over).
    spent: u64,
    /// Charged nanoseconds per packet, `<< COST_SHIFT`; 0 until measured.
    cost: u64,
    /// The spare window the allowance was computed for, and what is left of it.
    excess_window: u64,
    excess_left: u64,
    /// The last spare window in which the VR ran out of budget.
    demand_window: u64,
}

impl Default for Account {
    fn default() -> Self {
        Account {
            res: None,
            next: None,
            start: NEVER,
            spent: 0,
            cost: 0,
            excess_window: NEVER,
            excess_left: 0,
            demand_window: NEVER,
        }
    }
}

impl Account {
    /// The reservation in force.
    pub fn reservation(&self) -> Option<Reservation> {
        self.res
    }

    /// A change that takes effect at the next period boundary.
    pub fn pending(&self) -> Option<Option<Reservation>> {
        self.next
    }

    /// Sets the reservation (`None` removes it): at once if none is running, else from the
    /// next period boundary.
    pub fn set(&mut self, r: Option<Reservation>) {
        if self.res.is_none() || self.start == NEVER {
            self.res = r;
            self.next = None;
            self.start = NEVER;
            self.spent = 0;
        } else {
            self.next = Some(r);
        }
    }

    /// Moves to the period holding `now`, applying a pending change at the boundary.
    fn roll(&mut self, now: u64) {
        let Some(r) = self.res else { return };
        if self.start == NEVER {
            self.start = now;
            return;
        }
        let elapsed = now.saturating_sub(self.start);
        if elapsed < r.period_ns {
            return;
        }
        let k = elapsed / r.period_ns;
        self.start += k * r.period_ns;
        self.spent = self.spent.saturating_sub(r.amount().saturating_mul(k));
        let Some(next) = self.next.take() else { return };
        self.res = next;
        match next {
            None => {
                self.start = NEVER;
                self.spent = 0;
            }
            Some(n) => {
                // Debt in one unit means nothing in the other; a new period length starts a
                // new grid.
                if std::mem::discriminant(&n.budget) != std::mem::discriminant(&r.budget) {
                    self.spent = 0;
                }
                if n.period_ns != r.period_ns {
                    self.start = now;
                }
            }
        }
    }

    /// How many of `n` packets arriving at `now` may be processed. `timed`: the worker has a
    /// clock (without one, time budgets cannot be measured and do not limit, and there is no
    /// spare capacity to share; `Engine` refuses such reservations).
    #[inline]
    pub fn admit(&mut self, n: usize, now: u64, spare: &mut Spare, timed: bool) -> Admit {
        self.roll(now);
        let Some(r) = self.res else { return Admit { within: n, excess: 0 } };
        let left = r.amount().saturating_sub(self.spent);
        let within = match r.budget {
            Budget::Packets(_) => {
                let k = n.min(usize::try_from(left).unwrap_or(usize::MAX));
                self.spent += k as u64;
                k
            }
            Budget::Time(_) if !timed => n,
            Budget::Time(_) => self.fit(n, left),
        };
        let rest = n - within;
        if rest == 0 || r.weight == 0 || !timed {
            return Admit { within, excess: 0 };
        }
        Admit { within, excess: self.borrow(rest, r.weight, spare) }
    }

    /// How many of `n` packets `left_ns` pays for at the estimated cost: all of them before
    /// the cost is known, else enough to spend `left_ns` (the last one may overrun).
    fn fit(&self, n: usize, left_ns: u64) -> usize {
        if left_ns == 0 {
            return 0;
        }
        if self.cost == 0 {
            return n;
        }
        let k = (u128::from(left_ns) << COST_SHIFT).div_ceil(u128::from(self.cost));
        n.min(usize::try_from(k).unwrap_or(usize::MAX))
    }

    /// Excess packets on spare capacity, out of this window's allowance.
    fn borrow(&mut self, n: usize, weight: u32, spare: &mut Spare) -> usize {
        let id = spare.id;
        let w = u64::from(weight);
        if self.excess_window != id {
            let ran_out_last = self.demand_window != NEVER && self.demand_window + 1 == id;
            let demand = spare.last_demand + if ran_out_last { 0 } else { w };
            self.excess_left = (u128::from(spare.pool) * u128::from(w) / u128::from(demand)) as u64;
            self.excess_window = id;
        }
        if self.demand_window != id {
            spare.demand += w;
            self.demand_window = id;
        }
        self.fit(n, self.excess_left)
    }

    /// Charges `ns` of worker time for the packets `a` admitted (0 without a clock).
    #[inline]
    pub fn charge(&mut self, a: Admit, ns: u64, spare: &mut Spare) {
        let k = a.total() as u64;
        if k == 0 {
            return;
        }
        let sample = (ns.saturating_mul(1 << COST_SHIFT) / k).max(1);
        self.cost = if self.cost == 0 { sample } else { self.cost - self.cost / 8 + sample / 8 };
        let within_ns = (u128::from(ns) * a.within as u128 / u128::from(k)) as u64;
        if let Some(Reservation { budget: Budget::Time(_), .. }) = self.res {
            self.spent += within_ns;
        }
        self.excess_left = self.excess_left.saturating_sub(ns - within_ns);
        spare.necessary += within_ns;
    }
}

/// A worker's account of spare capacity (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct Spare {
    pub window: u64,
    start: u64,
    /// Window number: counts windows the worker saw end.
    id: u64,
    /// Time charged in this window to work that had to be done.
    necessary: u64,
    /// Sum of the weights of VRs that ran out of budget in this window.
    demand: u64,
    /// Spare of the previous window, and its demand.
    pool: u64,
    last_demand: u64,
}

impl Spare {
    pub fn new(window: u64) -> Spare {
        Spare {
            window: window.max(1),
            start: NEVER,
            id: 0,
            necessary: 0,
            demand: 0,
            pool: 0,
            last_demand: 0,
        }
    }

    /// Closes the window if `now` is past it.
    #[inline]
    pub fn roll(&mut self, now: u64) {
        if self.start == NEVER {
            self.start = now;
            return;
        }
        let elapsed = now.saturating_sub(self.start);
        if elapsed < self.window {
            return;
        }
        self.start += elapsed / self.window * self.window;
        self.pool = self.window.saturating_sub(self.necessary);
        self.last_demand = self.demand;
        self.necessary = 0;
        self.demand = 0;
        self.id += 1;
    }

    /// Counts `ns` of work that had to be done (switches).
    #[inline]
    pub fn add_necessary(&mut self, ns: u64) {
        self.necessary += ns;
    }

    /// Spare of the last window closed.
    pub fn pool(&self) -> u64 {
        self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packets(q: u64, t: u64, weight: u32) -> Option<Reservation> {
        Some(Reservation { budget: Budget::Packets(q), period_ns: t, weight })
    }

    fn time(q: u64, t: u64, weight: u32) -> Option<Reservation> {
        Some(Reservation { budget: Budget::Time(q), period_ns: t, weight })
    }

    #[test]
    fn packets_are_exact_per_period_and_roll_over() {
        let mut s = Spare::new(SPARE_WINDOW_NS);
        let mut a = Account::default();
        a.set(packets(5, 100, 0));
        assert_eq!(a.admit(3, 10, &mut s, false).within, 3, "first period starts at 10");
        assert_eq!(a.admit(3, 50, &mut s, false).within, 2);
        assert_eq!(a.admit(3, 109, &mut s, false), Admit { within: 0, excess: 0 });
        assert_eq!(a.admit(7, 110, &mut s, false).within, 5, "new period at 110");
        assert_eq!(a.admit(1, 1_000, &mut s, false).within, 1, "idle periods save nothing");
        assert_eq!(a.admit(9, 1_005, &mut s, false).within, 4);
    }

    #[test]
    fn a_change_waits_for_the_period_boundary() {
        let mut s = Spare::new(SPARE_WINDOW_NS);
        let mut a = Account::default();
        a.set(packets(2, 100, 0));
        assert_eq!(a.admit(5, 0, &mut s, false).within, 2);
        a.set(packets(4, 100, 0));
        assert_eq!(a.reservation(), packets(2, 100, 0));
        assert_eq!(a.pending(), Some(packets(4, 100, 0)));
        assert_eq!(a.admit(5, 99, &mut s, false).within, 0, "still the old budget");
        assert_eq!(a.admit(5, 100, &mut s, false).within, 4);
        a.set(None);
        assert_eq!(a.admit(5, 150, &mut s, false).within, 0);
        assert_eq!(a.admit(500, 200, &mut s, false).within, 500, "unreserved from 200");
        a.set(packets(1, 10, 0));
        assert_eq!(a.admit(5, 201, &mut s, false).within, 1, "at once when there was none");
    }

    #[test]
    fn time_is_cut_at_the_estimated_cost_and_overruns_are_paid_back() {
        let mut s = Spare::new(SPARE_WINDOW_NS);
        let mut a = Account::default();
        a.set(time(1_000, 10_000, 0));
        let x = a.admit(10, 0, &mut s, true);
        assert_eq!(x.within, 10, "cost unknown: all admitted");
        a.charge(x, 400, &mut s); // 40 ns a packet
        let x = a.admit(100, 1, &mut s, true);
        assert_eq!(x.within, 15, "600 ns left at 40 ns: 15");
        a.charge(x, 900, &mut s); // 60 ns a packet: 300 ns over
        assert_eq!(a.admit(100, 2, &mut s, true).within, 0);
        // Next period: 300 ns of debt, 700 ns left at an estimate of 42.5 ns: 17 packets.
        assert_eq!(a.admit(100, 10_000, &mut s, true).within, 17);
    }

    #[test]
    fn spare_is_shared_by_weight_among_those_that_ran_out() {
        let mut s = Spare::new(1_000);
        let (mut a, mut b) = (Account::default(), Account::default());
        a.set(time(100, 1_000_000, 1));
        b.set(time(100, 1_000_000, 3));
        s.roll(0);
        for acc in [&mut a, &mut b] {
            let x = acc.admit(10, 0, &mut s, true);
            assert_eq!(x, Admit { within: 10, excess: 0 });
            acc.charge(x, 100, &mut s); // 10 ns a packet, budget spent
            let x = acc.admit(10, 0, &mut s, true);
            assert_eq!(x, Admit { within: 0, excess: 0 }, "no spare in the first window");
        }
        s.roll(1_000);
        assert_eq!(s.pool(), 800, "1000 ns less 200 within budget");
        let x = a.admit(1_000, 1_000, &mut s, true);
        assert_eq!(x.excess, 20, "a: 800 × 1/4 = 200 ns at 10 ns");
        let y = b.admit(1_000, 1_000, &mut s, true);
        assert_eq!(y.excess, 60, "b: 800 × 3/4 = 600 ns at 10 ns");
        a.charge(x, 200, &mut s);
        assert_eq!(a.admit(1_000, 1_001, &mut s, true).excess, 0, "allowance spent");
    }

    /// The accounting's own per-step costs on this machine, next to what a VR's packets cost:
    /// a read of the clock the runtime injects (`Instant`-based), and one admit plus one charge
    /// (a VR's burst: three 128-bit divisions). Each figure is the fastest of many short runs,
    /// so that a shared host's descheduling does not count. A measurement, not a check: timings
    /// are never asserted.
    /// `cargo test -p dataplane --release --lib per_step -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check: prints the per-step costs"]
    fn per_step_costs() {
        use std::hint::black_box;
        use std::time::Instant;
        const RUNS: u32 = 2_000;
        const N: u64 = 1_000;
        fn fastest(mut f: impl FnMut()) -> f64 {
            (0..RUNS)
                .map(|_| {
                    let s = Instant::now();
                    f();
                    s.elapsed().as_nanos() as f64 / N as f64
                })
                .fold(f64::INFINITY, f64::min)
        }
        let origin = Instant::now();
        let clock = move || origin.elapsed().as_nanos() as u64;
        let read_ns = fastest(|| {
            for _ in 0..N {
                black_box(clock());
            }
        });
        let mut sp = Spare::new(SPARE_WINDOW_NS);
        let mut a = Account::default();
        // A budget that never runs out: every burst takes the dividing path.
        a.set(time(1_000_000, 1_000_000, 0));
        let mut now = 0;
        let step_ns = fastest(|| {
            for _ in 0..N {
                now += 50;
                let ad = black_box(&mut a).admit(black_box(32), black_box(now), &mut sp, true);
                a.charge(ad, black_box(1), &mut sp);
            }
        });
        // A busy burst on one VR reads the clock 3 times (before the VRs, after it, end); its
        // start is where the previous burst ended.
        let per_burst = 3.0 * read_ns + step_ns;
        eprintln!(
            "clock read {read_ns:.1} ns; admit + charge {step_ns:.1} ns; per VR burst {per_burst:.1} ns: \
             {:.2} ns a packet at 256-packet bursts, {:.2} at 32, {:.2} at 4",
            per_burst / 256.0,
            per_burst / 32.0,
            per_burst / 4.0
        );
    }
}
