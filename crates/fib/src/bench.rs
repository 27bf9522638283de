//! The lookup benchmark behind `routeplex bench fib`.
//!
//! Method: compile the table (timed: `build_ms`), generate an address array larger than L2
//! (4 Mi addresses by default: 16 MiB for IPv4, 64 MiB for IPv6), then time `rounds` passes of
//! [`Poptrie::lookup_batch`] over it in batches of `batch` (reported: the mean over all
//! rounds, and the fastest round, which other load on a shared machine disturbs least), and
//! separately a plain loop of [`Poptrie::lookup`] for comparison. Afterwards, untimed, every looked-up address is
//! checked against [`NaiveLpm`]: `mismatches` must be 0. Incremental updates are timed on a
//! [`Fib`] holding the same table: single-route publishes, and one batch through
//! [`Fib::apply`].
//!
//! Addresses: IPv4 uniformly random over all 2^32 (the classic LPM benchmark: with the real
//! table 16 % miss, most land in /16-/24 space). IPv6 uniformly random would almost all miss at the first
//! level (the table covers a tiny part of 2^128), so IPv6 addresses are random addresses
//! inside randomly chosen table prefixes, which walks the trie as deep as real traffic does.
//!
//! Next hops: file ids that all fit `1..=65535` are used as they are (the default
//! `scripts/fetch-prefixes` output uses 1..=256); otherwise the distinct ids are numbered
//! densely 1, 2, 3 ... in ascending order (wrapping after 65535 distinct ids).

use std::time::Instant;

use ipnet::{Ipv4Net, Ipv6Net};

use crate::naive::NaiveLpm;
use crate::prefix_file::{Family, PrefixList};
use crate::synthetic::Rng;
use crate::{Change, Fib, Key, NextHop, Poptrie, Rib, NO_ROUTE};

/// The routes to benchmark: one family of a [`PrefixList`] (or of a synthetic table).
#[derive(Clone, Copy, Debug)]
pub enum Routes<'a> {
    /// IPv4 routes with file next-hop ids.
    V4(&'a [(Ipv4Net, u32)]),
    /// IPv6 routes with file next-hop ids.
    V6(&'a [(Ipv6Net, u32)]),
}

impl<'a> Routes<'a> {
    /// The `family` part of `list`.
    pub fn from_list(list: &'a PrefixList, family: Family) -> Self {
        match family {
            Family::Ipv4 => Routes::V4(&list.v4),
            Family::Ipv6 => Routes::V6(&list.v6),
        }
    }

    /// Which family.
    pub fn family(&self) -> Family {
        match self {
            Routes::V4(_) => Family::Ipv4,
            Routes::V6(_) => Family::Ipv6,
        }
    }
}

/// Benchmark knobs; `Default` is what the CLI runs.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Distinct addresses looked up per round (keep it well above L2).
    pub addresses: usize,
    /// Timed passes over the addresses (at least 1).
    pub rounds: usize,
    /// Keys per `lookup_batch` call (a data-plane burst: 256).
    pub batch: usize,
    /// Seed for addresses and update routes.
    pub seed: u64,
    /// Also time a scalar `lookup` loop (one round).
    pub scalar: bool,
    /// Check every looked-up address against the naive table (untimed).
    pub check: bool,
    /// Single-route publishes to time (0: skip the update measurements).
    pub updates: usize,
    /// Geometry override (None: the FIB's own choice).
    pub geometry: Option<crate::poptrie::Geometry>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            addresses: 1 << 22,
            rounds: 10,
            batch: 256,
            seed: 1,
            scalar: true,
            check: true,
            updates: 200,
            geometry: None,
        }
    }
}

/// What a benchmark run measured.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// Address family.
    pub family: Family,
    /// Routes in the table.
    pub prefixes: usize,
    /// Timed batched lookups.
    pub lookups: u64,
    /// Batched lookups per second.
    pub lookups_per_sec: f64,
    /// Batched nanoseconds per lookup.
    pub ns_per_lookup: f64,
    /// Batched lookups per second in the fastest round: on a shared, noisy machine the
    /// figure least disturbed by other load.
    pub best_round_lookups_per_sec: f64,
    /// Batched lookups per second of CPU time this thread got (from
    /// `/proc/thread-self/schedstat`; 0 where unreadable): on a loaded machine the wall-clock
    /// rate also counts the time other work held the CPU, this one does not (cache pollution
    /// from that work still counts).
    pub cpu_lookups_per_sec: f64,
    /// Share of the timed rounds' wall time this thread was on a CPU (0 where unreadable).
    pub cpu_share: f64,
    /// Scalar `lookup` loop over the same addresses (up to 3 rounds), lookups per second
    /// (0 when not measured).
    pub scalar_lookups_per_sec: f64,
    /// Keys per `lookup_batch` call.
    pub batch: usize,
    /// [`Poptrie::memory_bytes`] of the compiled table.
    pub table_bytes: usize,
    /// Bytes of the same structure with no routes.
    pub empty_table_bytes: usize,
    /// Compile time of the table from its RIB, milliseconds.
    pub build_ms: f64,
    /// Addresses checked against the naive table.
    pub checked: u64,
    /// Answers that differed from the naive table (must be 0).
    pub mismatches: u64,
    /// Share of lookups that found a route.
    pub hit_ratio: f64,
    /// How addresses were drawn.
    pub address_mode: &'static str,
    /// How file next-hop ids became FIB next hops.
    pub next_hop_mapping: &'static str,
    /// Direct-pointing bits of the compiled table (top + block).
    pub direct_bits: u8,
    /// Of those, bits indexing the second-level blocks (0: single level).
    pub block_bits: u8,
    /// Internal nodes.
    pub nodes: usize,
    /// Leaves.
    pub leaves: usize,
    /// Deepest node level.
    pub max_depth: usize,
    /// Mean time of one single-route insert or remove through [`Fib`], publish included,
    /// microseconds (0 when not measured).
    pub update_us: f64,
    /// Mean time per change of one [`Fib::apply`] batch of `updates` changes, microseconds.
    pub batch_update_us_per_change: f64,
}

impl BenchReport {
    /// The report as one JSON object (fixed field order; no serde needed).
    pub fn to_json(&self) -> String {
        format!(
            concat!(
                "{{\"family\":\"{}\",\"prefixes\":{},\"lookups\":{},\"lookups_per_sec\":{:.0},",
                "\"ns_per_lookup\":{:.3},\"best_round_lookups_per_sec\":{:.0},",
                "\"cpu_lookups_per_sec\":{:.0},\"cpu_share\":{:.3},",
                "\"scalar_lookups_per_sec\":{:.0},\"batch\":{},",
                "\"table_bytes\":{},\"empty_table_bytes\":{},\"build_ms\":{:.3},\"checked\":{},",
                "\"mismatches\":{},\"hit_ratio\":{:.4},\"address_mode\":\"{}\",",
                "\"next_hop_mapping\":\"{}\",\"direct_bits\":{},\"block_bits\":{},\"nodes\":{},\"leaves\":{},",
                "\"max_depth\":{},\"update_us\":{:.2},\"batch_update_us_per_change\":{:.3}}}"
            ),
            self.family,
            self.prefixes,
            self.lookups,
            self.lookups_per_sec,
            self.ns_per_lookup,
            self.best_round_lookups_per_sec,
            self.cpu_lookups_per_sec,
            self.cpu_share,
            self.scalar_lookups_per_sec,
            self.batch,
            self.table_bytes,
            self.empty_table_bytes,
            self.build_ms,
            self.checked,
            self.mismatches,
            self.hit_ratio,
            self.address_mode,
            self.next_hop_mapping,
            self.direct_bits,
            self.block_bits,
            self.nodes,
            self.leaves,
            self.max_depth,
            self.update_us,
            self.batch_update_us_per_change,
        )
    }
}

/// Runs the benchmark; see the module docs for the method.
///
/// # Panics
/// When `opts.batch` or `opts.addresses` is 0.
pub fn run(routes: Routes<'_>, opts: &BenchOptions) -> BenchReport {
    match routes {
        Routes::V4(r) => {
            let (ids, mapping) = map_next_hops(r.iter().map(|p| p.1));
            let keyed =
                r.iter().zip(ids).map(|(p, nh)| (u32::from(p.0.addr()), p.0.prefix_len(), nh));
            run_keyed(Family::Ipv4, keyed.collect(), mapping, opts)
        }
        Routes::V6(r) => {
            let (ids, mapping) = map_next_hops(r.iter().map(|p| p.1));
            let keyed =
                r.iter().zip(ids).map(|(p, nh)| (u128::from(p.0.addr()), p.0.prefix_len(), nh));
            run_keyed(Family::Ipv6, keyed.collect(), mapping, opts)
        }
    }
}

/// File ids → FIB next hops (see the module docs).
fn map_next_hops(ids: impl Iterator<Item = u32> + Clone) -> (Vec<NextHop>, &'static str) {
    if ids.clone().all(|id| (1..=u32::from(u16::MAX)).contains(&id)) {
        return (ids.map(|id| id as NextHop).collect(), "as-is");
    }
    let mut distinct: Vec<u32> = ids.clone().collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mapped = ids
        .map(|id| {
            let rank = distinct.binary_search(&id).expect("id is in the list");
            (1 + rank % usize::from(u16::MAX)) as NextHop
        })
        .collect();
    (mapped, "dense")
}

fn run_keyed<K: Key>(
    family: Family,
    routes: Vec<(K, u8, NextHop)>,
    next_hop_mapping: &'static str,
    opts: &BenchOptions,
) -> BenchReport {
    assert!(opts.batch > 0 && opts.addresses > 0, "batch and addresses must be positive");
    let rib: Rib<K> = routes.iter().copied().collect();
    let prefixes = rib.len();
    let start = Instant::now();
    let table = match opts.geometry {
        Some(g) => Poptrie::build_with_geometry(&rib, g),
        None => Poptrie::build(&rib),
    };
    let build_ms = start.elapsed().as_secs_f64() * 1e3;
    let empty_table_bytes = Poptrie::<K>::build(&Rib::new()).memory_bytes();

    let mut rng = Rng::new(opts.seed);
    let (addrs, address_mode) = addresses(&routes, opts.addresses, &mut rng);

    let mut results = vec![NO_ROUTE; addrs.len()];
    // One untimed pass warms caches and page-faults `results` in.
    lookup_all(&table, &addrs, &mut results, opts.batch);
    let mut secs = 0.0;
    let mut best = f64::MAX;
    let cpu0 = thread_cpu_ns();
    for _ in 0..opts.rounds.max(1) {
        let start = Instant::now();
        lookup_all(&table, &addrs, &mut results, opts.batch);
        std::hint::black_box(&mut results);
        let round = start.elapsed().as_secs_f64();
        secs += round;
        best = best.min(round);
    }
    let lookups = (addrs.len() * opts.rounds.max(1)) as u64;
    // schedstat is brought up to date at scheduler ticks: a few ms off, which a run of
    // seconds does not notice; a very short run could read more CPU time than wall time.
    let cpu_s = match (cpu0, thread_cpu_ns()) {
        (Some(a), Some(b)) if b > a => ((b - a) as f64 / 1e9).min(secs),
        _ => 0.0,
    };

    let mut scalar_lookups_per_sec = 0.0;
    if opts.scalar {
        let mut scalar = vec![NO_ROUTE; addrs.len()];
        let rounds = opts.rounds.clamp(1, 3);
        let start = Instant::now();
        for _ in 0..rounds {
            for (a, r) in addrs.iter().zip(scalar.iter_mut()) {
                *r = table.lookup(*a);
            }
            std::hint::black_box(&mut scalar);
        }
        scalar_lookups_per_sec = (addrs.len() * rounds) as f64 / start.elapsed().as_secs_f64();
        assert_eq!(scalar, results, "scalar and batched lookups disagree");
    }

    let hits = results.iter().filter(|&&r| r != NO_ROUTE).count();
    let mut mismatches = 0;
    let mut checked = 0;
    if opts.check {
        let naive: NaiveLpm<K> = routes.iter().copied().collect();
        for (a, r) in addrs.iter().zip(&results) {
            checked += 1;
            if naive.lookup(*a) != *r {
                mismatches += 1;
            }
        }
    }

    let (update_us, batch_update_us_per_change) = if opts.updates > 0 {
        time_updates(rib, &routes, opts.updates, &mut rng)
    } else {
        (0.0, 0.0)
    };

    let st = table.stats();
    BenchReport {
        family,
        prefixes,
        lookups,
        lookups_per_sec: lookups as f64 / secs,
        best_round_lookups_per_sec: addrs.len() as f64 / best,
        cpu_lookups_per_sec: if cpu_s > 0.0 { lookups as f64 / cpu_s } else { 0.0 },
        cpu_share: cpu_s / secs,
        ns_per_lookup: secs * 1e9 / lookups as f64,
        scalar_lookups_per_sec,
        batch: opts.batch,
        table_bytes: table.memory_bytes(),
        empty_table_bytes,
        build_ms,
        checked,
        mismatches,
        hit_ratio: hits as f64 / results.len() as f64,
        address_mode,
        next_hop_mapping,
        direct_bits: st.geometry.top + st.geometry.block,
        block_bits: st.geometry.block,
        nodes: st.nodes,
        leaves: st.leaves,
        max_depth: st.max_depth,
        update_us,
        batch_update_us_per_change,
    }
}

/// Nanoseconds this thread has run on a CPU (`/proc/thread-self/schedstat`), if readable.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

// Never inlined: profilers (callgrind --toggle-collect) can count the batched lookups alone.
#[inline(never)]
fn lookup_all<K: Key>(t: &Poptrie<K>, addrs: &[K], out: &mut [NextHop], batch: usize) {
    for (a, o) in addrs.chunks(batch).zip(out.chunks_mut(batch)) {
        t.lookup_batch(a, o);
    }
}

fn addresses<K: Key>(
    routes: &[(K, u8, NextHop)],
    n: usize,
    rng: &mut Rng,
) -> (Vec<K>, &'static str) {
    if K::BITS == 32 || routes.is_empty() {
        let v = (0..n).map(|_| K::from_u128(rng.next_u128())).collect();
        return (v, "uniform random addresses over the whole address space");
    }
    let v = (0..n)
        .map(|_| {
            let (a, l, _) = routes[rng.below(routes.len() as u64) as usize];
            K::from_u128(a.mask(l).to_u128() | (rng.next_u128() & K::ZERO.last(l).to_u128()))
        })
        .collect();
    (
        v,
        "random addresses inside randomly chosen table prefixes (uniform 128-bit addresses \
         would almost all miss at the first level)",
    )
}

/// Mean microseconds per single-route publish, and per change of one batch.
fn time_updates<K: Key>(
    rib: Rib<K>,
    routes: &[(K, u8, NextHop)],
    n: usize,
    rng: &mut Rng,
) -> (f64, f64) {
    if routes.is_empty() {
        return (0.0, 0.0);
    }
    let mut fib = Fib::from_rib(rib);
    // Changes like BGP churn: existing prefixes withdrawn, or re-announced with another next
    // hop, and brand-new more-specifics inside existing prefixes.
    let changes: Vec<Change<K>> = (0..n)
        .map(|i| {
            let (a, l, nh) = routes[rng.below(routes.len() as u64) as usize];
            match i % 3 {
                0 => Change::Remove(a, l),
                1 => Change::Insert(a, l, nh % 200 + 1),
                _ => {
                    let inside =
                        a.mask(l).to_u128() | (rng.next_u128() & K::ZERO.last(l).to_u128());
                    Change::Insert(K::from_u128(inside), (l + 4).min(K::BITS), 7)
                }
            }
        })
        .collect();
    let start = Instant::now();
    for ch in &changes {
        match *ch {
            Change::Insert(a, l, nh) => {
                fib.insert(a, l, nh);
            }
            Change::Remove(a, l) => {
                fib.remove(a, l);
            }
        }
    }
    let single = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    // As many changes again, to the same prefixes, as one batch.
    let undo: Vec<Change<K>> = changes
        .iter()
        .map(|c| match *c {
            Change::Insert(a, l, nh) => Change::Insert(a, l, nh % 200 + 2),
            Change::Remove(a, l) => Change::Insert(a, l, 9),
        })
        .collect();
    let start = Instant::now();
    fib.apply(undo);
    let batch = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    (single, batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_reports_and_checks() {
        let v4: Vec<(Ipv4Net, u32)> = crate::synthetic::ipv4(3000, 50, 1)
            .into_iter()
            .map(|(n, nh)| (n, u32::from(nh)))
            .collect();
        let opts = BenchOptions { addresses: 20_000, rounds: 2, updates: 30, ..Default::default() };
        let r = run(Routes::V4(&v4), &opts);
        assert_eq!(r.family, Family::Ipv4);
        assert_eq!(r.prefixes, 3000);
        assert_eq!(r.lookups, 40_000);
        assert_eq!((r.checked, r.mismatches), (20_000, 0));
        assert!(r.lookups_per_sec > 0.0 && r.table_bytes > r.empty_table_bytes);
        assert_eq!(r.next_hop_mapping, "as-is");
        assert!(r.to_json().starts_with("{\"family\":\"ipv4\",\"prefixes\":3000,"));

        let v6: Vec<(Ipv6Net, u32)> = crate::synthetic::ipv6(2000, 50, 1)
            .into_iter()
            .map(|(n, nh)| (n, u32::from(nh) * 100_000))
            .collect();
        let r = run(Routes::V6(&v6), &opts);
        assert_eq!((r.checked, r.mismatches), (20_000, 0));
        assert_eq!(r.next_hop_mapping, "dense");
        assert!(r.hit_ratio > 0.99, "v6 addresses come from table prefixes");
        assert!(r.address_mode.contains("inside"));
    }

    #[test]
    fn next_hop_mapping() {
        let (ids, m) = map_next_hops([1u32, 256, 65535].into_iter());
        assert_eq!((ids, m), (vec![1, 256, 65535], "as-is"));
        let (ids, m) = map_next_hops([0u32, 70_000, 5, 70_000].into_iter());
        assert_eq!((ids, m), (vec![1, 3, 2, 3], "dense"));
    }
}
