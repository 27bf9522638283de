//! Interleaved pairs: the way a comparison is measured on a machine whose speed moves under it.
//!
//! On shared VMs the memory system's speed swings up to 2× within minutes (other tenants share
//! the L3) while the CPU stays steady, so one run of A then one of B compares two machines, not
//! two programs. [`interleave`] runs the two sides alternately (A B A B …, `pairs` times) and
//! times two fixed probes before every trial: [`Probes::memory_ns_per_read`] (dependent random
//! reads over an 8 MiB table) and [`Probes::compute_ns_per_step`] (a dependent arithmetic loop).
//! [`Summary::new`] reports each side's median, the median of the per-pair ratios A/B with its
//! min and max, and flags a pair whose two trials saw probes more than [`PROBE_TOLERANCE`]
//! apart: that pair compared across a change of machine speed. The load average is recorded
//! with every pair.
//!
//! Contract: the trials run strictly A then B within a pair, pair after pair, each preceded by
//! one call of the probe; nothing here asserts or depends on a timing. The arithmetic
//! ([`median`], [`Spread`], [`probe_difference`]) is exact on its inputs.

use std::hint::black_box;
use std::time::Instant;

use serde::Serialize;

/// Probes further apart than this (relative to the smaller) flag the pair: exactly 10 % is not
/// flagged, anything above is.
pub const PROBE_TOLERANCE: f64 = 0.10;

/// Bytes of the memory probe's table: larger than any L2 here, and the size the project's
/// measurements of the VMs' memory swings used.
pub const MEMORY_TABLE_BYTES: usize = 8 << 20;

/// Dependent reads the memory probe times.
const MEMORY_READS: usize = 1 << 20;

/// Steps the compute probe times.
const COMPUTE_STEPS: u64 = 10_000_000;

/// What the two probes measured just before one trial.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Probes {
    /// Nanoseconds per read of a random dependent chain through an 8 MiB table.
    pub memory_ns_per_read: f64,
    /// Nanoseconds per step of a fixed dependent multiply-xor-shift loop.
    pub compute_ns_per_step: f64,
}

/// The fixed probes; the table is built once, so probing allocates nothing.
pub struct Prober {
    /// `next[i]`: the index read after `i`; one cycle through every slot (Sattolo), so the
    /// chain never settles in a cache-sized loop.
    next: Vec<u32>,
}

impl Default for Prober {
    fn default() -> Self {
        Prober::new()
    }
}

impl Prober {
    pub fn new() -> Prober {
        let n = MEMORY_TABLE_BYTES / std::mem::size_of::<u32>();
        let mut next: Vec<u32> = (0..n as u32).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        // Sattolo's shuffle: a single cycle over all n slots.
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let j = (x % i as u64) as usize;
            next.swap(i, j);
        }
        Prober { next }
    }

    /// Times both probes once (some tens of milliseconds).
    pub fn probe(&self) -> Probes {
        Probes { memory_ns_per_read: self.memory(), compute_ns_per_step: compute() }
    }

    fn memory(&self) -> f64 {
        let mut i = 0u32;
        let t = Instant::now();
        for _ in 0..MEMORY_READS {
            i = self.next[i as usize];
        }
        black_box(i);
        t.elapsed().as_nanos() as f64 / MEMORY_READS as f64
    }
}

fn compute() -> f64 {
    let mut x = black_box(0x2545_f491_4f6c_dd1du64);
    let t = Instant::now();
    for _ in 0..COMPUTE_STEPS {
        x = x.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(0x1405_7b7e_f767_814f);
        x ^= x >> 29;
    }
    black_box(x);
    t.elapsed().as_nanos() as f64 / COMPUTE_STEPS as f64
}

/// One side's trial: what it measured and the probes just before it.
#[derive(Clone, Debug)]
pub struct Measured<T> {
    pub value: T,
    pub probes: Probes,
    /// [`load_average`] read just before the probes.
    pub load_average: Option<[f64; 3]>,
}

/// One pair's two trials, A's first.
pub type Pair<TA, TB> = (Measured<TA>, Measured<TB>);

/// [`interleave`] with the real probes ([`Prober`]).
pub fn run<TA, TB, E>(
    pairs: usize,
    a: impl FnMut(usize) -> Result<TA, E>,
    b: impl FnMut(usize) -> Result<TB, E>,
) -> Result<Vec<Pair<TA, TB>>, E> {
    let prober = Prober::new();
    interleave(pairs, || prober.probe(), a, b)
}

/// Runs `a` and `b` alternately, `pairs` times (A B A B …), calling `probe` before every
/// trial; each closure gets the pair's index. The first error stops the run.
pub fn interleave<TA, TB, E>(
    pairs: usize,
    mut probe: impl FnMut() -> Probes,
    mut a: impl FnMut(usize) -> Result<TA, E>,
    mut b: impl FnMut(usize) -> Result<TB, E>,
) -> Result<Vec<Pair<TA, TB>>, E> {
    let mut out = Vec::with_capacity(pairs);
    for i in 0..pairs {
        let la = load_average();
        let pa = probe();
        let va = a(i)?;
        let lb = load_average();
        let pb = probe();
        let vb = b(i)?;
        out.push((
            Measured { value: va, probes: pa, load_average: la },
            Measured { value: vb, probes: pb, load_average: lb },
        ));
    }
    Ok(out)
}

/// The middle value (the mean of the two middle ones for an even count); NaN when empty or
/// when any value is NaN.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Median, min and max of a set of figures.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let (min, max) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        if values.is_empty() {
            return Spread { median: f64::NAN, min: f64::NAN, max: f64::NAN };
        }
        Spread { median: median(values), min, max }
    }
}

/// How far apart two probe readings are, relative to the smaller: |x − y| / min(x, y).
pub fn probe_difference(x: f64, y: f64) -> f64 {
    let lo = x.min(y);
    if lo <= 0.0 {
        return if x == y { 0.0 } else { f64::INFINITY };
    }
    (x - y).abs() / lo
}

/// The machine's load average (1, 5 and 15 minutes) from /proc/loadavg, if readable.
pub fn load_average() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut w = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([w.next()??, w.next()??, w.next()??])
}

/// One pair's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairRow {
    /// 0-based, in the order run.
    pub index: usize,
    pub a: f64,
    pub b: f64,
    /// a / b.
    pub ratio: f64,
    pub a_probes: Probes,
    pub b_probes: Probes,
    /// [`probe_difference`] of the two trials' memory probes, and of their compute probes.
    pub memory_probe_difference: f64,
    pub compute_probe_difference: f64,
    /// Either difference above [`PROBE_TOLERANCE`]: the machine changed speed within the pair.
    pub flagged: bool,
    /// The load average (1, 5, 15 min) just before the pair's first trial.
    pub load_average: Option<[f64; 3]>,
}

/// A whole interleaved comparison, ready for `--json` or [`Summary::lines`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// What the two sides are, e.g. "routeplex switch" and "DPDK testpmd io".
    pub a_name: String,
    pub b_name: String,
    /// The unit of `a` and `b` (e.g. "Mpps", "s").
    pub unit: String,
    pub pairs: Vec<PairRow>,
    pub a: Spread,
    pub b: Spread,
    /// Of the per-pair ratios a / b.
    pub ratio: Spread,
    /// The ratio's median over the unflagged pairs only (NaN when every pair is flagged).
    pub ratio_median_unflagged: f64,
    pub flagged_pairs: usize,
    pub probe_tolerance: f64,
    /// Both probes over every trial, to tell a slow-memory run from a slow program.
    pub memory_ns_per_read: Spread,
    pub compute_ns_per_step: Spread,
}

impl Summary {
    /// `values[i]`: pair i's (A's figure, A's probes, B's figure, B's probes); `loads[i]` the
    /// load average recorded before it (missing entries are `None`).
    pub fn new(
        a_name: &str,
        b_name: &str,
        unit: &str,
        values: &[(f64, Probes, f64, Probes)],
        loads: &[Option<[f64; 3]>],
    ) -> Summary {
        let pairs: Vec<PairRow> = values
            .iter()
            .enumerate()
            .map(|(i, &(a, pa, b, pb))| {
                let mem = probe_difference(pa.memory_ns_per_read, pb.memory_ns_per_read);
                let cpu = probe_difference(pa.compute_ns_per_step, pb.compute_ns_per_step);
                PairRow {
                    index: i,
                    a,
                    b,
                    ratio: a / b,
                    a_probes: pa,
                    b_probes: pb,
                    memory_probe_difference: mem,
                    compute_probe_difference: cpu,
                    flagged: mem > PROBE_TOLERANCE || cpu > PROBE_TOLERANCE,
                    load_average: loads.get(i).copied().flatten(),
                }
            })
            .collect();
        let col = |f: &dyn Fn(&PairRow) -> f64| pairs.iter().map(f).collect::<Vec<f64>>();
        let probes = |f: &dyn Fn(&Probes) -> f64| {
            pairs.iter().flat_map(|p| [f(&p.a_probes), f(&p.b_probes)]).collect::<Vec<f64>>()
        };
        let unflagged: Vec<f64> = pairs.iter().filter(|p| !p.flagged).map(|p| p.ratio).collect();
        Summary {
            a_name: a_name.into(),
            b_name: b_name.into(),
            unit: unit.into(),
            a: Spread::of(&col(&|p| p.a)),
            b: Spread::of(&col(&|p| p.b)),
            ratio: Spread::of(&col(&|p| p.ratio)),
            ratio_median_unflagged: median(&unflagged),
            flagged_pairs: pairs.iter().filter(|p| p.flagged).count(),
            probe_tolerance: PROBE_TOLERANCE,
            memory_ns_per_read: Spread::of(&probes(&|p| p.memory_ns_per_read)),
            compute_ns_per_step: Spread::of(&probes(&|p| p.compute_ns_per_step)),
            pairs,
        }
    }

    /// From [`interleave`]'s output, each side's figure read by `fa` / `fb`.
    pub fn from_measured<TA, TB>(
        a_name: &str,
        b_name: &str,
        unit: &str,
        runs: &[Pair<TA, TB>],
        fa: impl Fn(&TA) -> f64,
        fb: impl Fn(&TB) -> f64,
    ) -> Summary {
        let v: Vec<_> =
            runs.iter().map(|(a, b)| (fa(&a.value), a.probes, fb(&b.value), b.probes)).collect();
        let loads: Vec<_> = runs.iter().map(|(a, _)| a.load_average).collect();
        Summary::new(a_name, b_name, unit, &v, &loads)
    }

    /// The human-readable form: one line per pair, then the medians and the ratio.
    pub fn lines(&self) -> Vec<String> {
        let load = |l: Option<[f64; 3]>| {
            l.map_or("?".to_string(), |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]))
        };
        let mut out = Vec::new();
        for p in &self.pairs {
            out.push(format!(
                "  pair {}: {} {:.3} {u} (probes {:.1} ns/read, {:.3} ns/step), {} {:.3} {u} (probes {:.1} ns/read, {:.3} ns/step): ratio {:.3}; load {}{}",
                p.index + 1,
                self.a_name, p.a, p.a_probes.memory_ns_per_read, p.a_probes.compute_ns_per_step,
                self.b_name, p.b, p.b_probes.memory_ns_per_read, p.b_probes.compute_ns_per_step,
                p.ratio,
                load(p.load_average),
                if p.flagged {
                    format!(
                        "  FLAGGED: probes differ by {:.0} % (memory) / {:.0} % (compute), over {:.0} %",
                        p.memory_probe_difference * 100.0,
                        p.compute_probe_difference * 100.0,
                        self.probe_tolerance * 100.0
                    )
                } else {
                    String::new()
                },
                u = self.unit,
            ));
        }
        out.push(format!(
            "  median of {} pairs: {} {:.3} {u}, {} {:.3} {u}; ratio {}/{} median {:.3} (min {:.3}, max {:.3}); {} pair(s) flagged{}",
            self.pairs.len(),
            self.a_name, self.a.median, self.b_name, self.b.median,
            self.a_name, self.b_name, self.ratio.median, self.ratio.min, self.ratio.max,
            self.flagged_pairs,
            if self.flagged_pairs > 0 && self.flagged_pairs < self.pairs.len() {
                format!(" (median over the unflagged: {:.3})", self.ratio_median_unflagged)
            } else {
                String::new()
            },
            u = self.unit,
        ));
        out.push(format!(
            "  probes over all trials: memory {:.1} ns/read ({:.1}-{:.1}), compute {:.3} ns/step ({:.3}-{:.3})",
            self.memory_ns_per_read.median, self.memory_ns_per_read.min, self.memory_ns_per_read.max,
            self.compute_ns_per_step.median, self.compute_ns_per_step.min, self.compute_ns_per_step.max,
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(mem: f64, cpu: f64) -> Probes {
        Probes { memory_ns_per_read: mem, compute_ns_per_step: cpu }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[5.0, 1.0]), 3.0);
        assert!(median(&[]).is_nan());
        assert!(median(&[1.0, f64::NAN, 2.0]).is_nan());
    }

    #[test]
    fn spread_gives_median_min_and_max() {
        assert_eq!(
            Spread::of(&[0.9, 0.84, 1.0, 0.88, 0.95]),
            Spread { median: 0.9, min: 0.84, max: 1.0 }
        );
        let e = Spread::of(&[]);
        assert!(e.median.is_nan() && e.min.is_nan() && e.max.is_nan());
    }

    #[test]
    fn ratio_median_is_of_the_per_pair_ratios_not_of_the_medians() {
        // Side medians: a 4, b 4 (ratio of medians 1.0); per-pair ratios 0.5, 2, 4, 0.25, 1.
        let v = [(1.0, 2.0), (4.0, 2.0), (8.0, 2.0), (2.0, 8.0), (4.0, 4.0)];
        let values: Vec<_> = v.iter().map(|&(a, b)| (a, p(100.0, 2.0), b, p(100.0, 2.0))).collect();
        let s = Summary::new("a", "b", "Mpps", &values, &[]);
        assert_eq!(s.a.median, 4.0);
        assert_eq!(s.b.median, 2.0);
        assert_eq!(s.ratio, Spread { median: 1.0, min: 0.25, max: 4.0 });
        assert_eq!(s.pairs.iter().map(|r| r.ratio).collect::<Vec<_>>(), [0.5, 2.0, 4.0, 0.25, 1.0]);
        assert_eq!(s.flagged_pairs, 0);
        assert_eq!(s.ratio_median_unflagged, 1.0);
        assert!(s.pairs.iter().all(|r| r.load_average.is_none()));
    }

    #[test]
    fn a_pair_is_flagged_only_above_ten_percent() {
        assert_eq!(probe_difference(100.0, 110.0), 0.1);
        assert_eq!(probe_difference(110.0, 100.0), 0.1);
        let values = [
            // memory exactly 10 % apart: not flagged
            (1.0, p(100.0, 2.0), 1.0, p(110.0, 2.0)),
            // memory just over: flagged
            (2.0, p(100.0, 2.0), 1.0, p(110.5, 2.0)),
            // compute over (2.0 vs 2.25 = 12.5 %), memory equal: flagged
            (3.0, p(100.0, 2.0), 1.0, p(100.0, 2.25)),
            // compute exactly 10 % apart (10 vs 11: exact in binary): not flagged
            (4.0, p(100.0, 10.0), 1.0, p(100.0, 11.0)),
            // B's probes lower than A's by more than 10 %: flagged too
            (5.0, p(120.0, 2.0), 1.0, p(100.0, 2.0)),
        ];
        let load = Some([0.5, 0.25, 0.125]);
        let s = Summary::new("a", "b", "Mpps", &values, &[load, None, load]);
        assert_eq!(
            s.pairs.iter().map(|r| r.flagged).collect::<Vec<_>>(),
            [false, true, true, false, true]
        );
        assert_eq!(s.flagged_pairs, 3);
        assert_eq!(s.pairs[2].compute_probe_difference, 0.125);
        assert_eq!(s.pairs[4].memory_probe_difference, 0.2);
        // Unflagged ratios 1 and 4: median 2.5; all five: median 3.
        assert_eq!(s.ratio_median_unflagged, 2.5);
        assert_eq!(s.ratio.median, 3.0);
        assert_eq!(s.pairs[0].load_average, load);
        assert_eq!(s.pairs[1].load_average, None);
        assert_eq!(s.pairs[3].load_average, None);
        assert_eq!(s.memory_ns_per_read, Spread { median: 100.0, min: 100.0, max: 120.0 });
        assert_eq!(s.compute_ns_per_step, Spread { median: 2.0, min: 2.0, max: 11.0 });
        let text = s.lines().join("\n");
        assert_eq!(text.matches("FLAGGED").count(), 3, "{text}");
        assert!(text.contains("3 pair(s) flagged (median over the unflagged: 2.500)"), "{text}");
    }

    #[test]
    fn zero_probes_do_not_divide_by_zero() {
        assert_eq!(probe_difference(0.0, 0.0), 0.0);
        assert_eq!(probe_difference(0.0, 1.0), f64::INFINITY);
    }

    #[test]
    fn interleave_runs_a_then_b_with_a_probe_before_each_trial() {
        use std::cell::RefCell;
        let log = RefCell::new(Vec::new());
        let probes = RefCell::new(0u32);
        let runs = interleave(
            3,
            || {
                let mut n = probes.borrow_mut();
                *n += 1;
                log.borrow_mut().push(format!("probe{n}"));
                p(f64::from(*n), 1.0)
            },
            |i| -> Result<f64, crate::Error> {
                log.borrow_mut().push(format!("A{i}"));
                Ok(10.0 + i as f64)
            },
            |i| {
                log.borrow_mut().push(format!("B{i}"));
                Ok(i as f64 + 1.0)
            },
        )
        .unwrap();
        assert_eq!(
            *log.borrow(),
            [
                "probe1", "A0", "probe2", "B0", "probe3", "A1", "probe4", "B1", "probe5", "A2",
                "probe6", "B2"
            ]
        );
        // Each trial carries the probe taken just before it.
        let got: Vec<_> = runs
            .iter()
            .map(|(a, b)| {
                (a.value, a.probes.memory_ns_per_read, b.value, b.probes.memory_ns_per_read)
            })
            .collect();
        assert_eq!(got, [(10.0, 1.0, 1.0, 2.0), (11.0, 3.0, 2.0, 4.0), (12.0, 5.0, 3.0, 6.0)]);
        let s = Summary::from_measured("a", "b", "x", &runs, |v| *v, |v| *v);
        assert_eq!(s.pairs.iter().map(|r| r.ratio).collect::<Vec<_>>(), [10.0, 5.5, 4.0]);
        // Each pair's load average is the one read before its first trial.
        for (r, (a, _)) in s.pairs.iter().zip(&runs) {
            assert_eq!(r.load_average, a.load_average);
        }
    }

    #[test]
    fn interleave_stops_at_the_first_error() {
        let mut calls = Vec::new();
        let calls_b = std::cell::RefCell::new(0);
        let r = interleave(
            5,
            || p(1.0, 1.0),
            |i| {
                calls.push(i);
                if i == 1 {
                    Err("A failed in pair 1")
                } else {
                    Ok(1.0)
                }
            },
            |_| {
                *calls_b.borrow_mut() += 1;
                Ok(1.0)
            },
        );
        assert_eq!(r.unwrap_err(), "A failed in pair 1");
        assert_eq!(calls, [0, 1]);
        assert_eq!(*calls_b.borrow(), 1);
    }

    #[test]
    fn the_probes_measure_something_positive() {
        // Not a timing assertion: only that both probes ran and produced a finite figure.
        let p = Prober::new().probe();
        assert!(p.memory_ns_per_read.is_finite() && p.memory_ns_per_read > 0.0);
        assert!(p.compute_ns_per_step.is_finite() && p.compute_ns_per_step > 0.0);
    }
}
