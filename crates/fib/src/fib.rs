//! The writer and reader sides of one VR's FIB for one address family.
//!
//! [`Fib`] owns the [`Rib`] and publishes compiled [`Poptrie`] versions through an
//! [`ArcSwap`]; [`FibReader`]s (one per data-plane worker) load the current version once per
//! batch. Publishing is a pointer swap: a reader holding a snapshot keeps using it, a reader
//! loading after the swap sees the new one, and neither ever waits for the writer.
//!
//! Old versions are retired by the writer: it keeps a reference to each replaced version until
//! no reader holds it, so the last reference — and the free of a few MiB — is dropped on the
//! control-plane thread, never inside a worker's batch. A reader's cache
//! ([`FibReader::cached`]) is such a holder: it keeps the version it last returned until it is
//! asked again, so a VR that sees no traffic holds at most one old version alive.

use std::ops::Deref;
use std::sync::Arc;

use arc_swap::{ArcSwap, Cache, Guard};

use crate::poptrie::geometry_for;
use crate::{Key, NextHop, Poptrie, Rib};

/// One RIB change for [`Fib::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change<K> {
    /// Set `addr/len` → next hop (replacing any previous one).
    Insert(K, u8, NextHop),
    /// Remove `addr/len` if present.
    Remove(K, u8),
}

impl<K: Copy> Change<K> {
    /// The prefix it is about.
    fn prefix(&self) -> (K, u8) {
        match *self {
            Change::Insert(a, l, _) | Change::Remove(a, l) => (a, l),
        }
    }
}

/// Counters of how the writer published, for tests, `show` commands and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpdateStats {
    /// Versions published (after the first).
    pub publishes: u64,
    /// Of those, made by patching the touched direct slots.
    pub patches: u64,
    /// Of those, made by a full build (short prefix, compaction or a new geometry).
    pub full_builds: u64,
    /// Direct slots recompiled by patches.
    pub slots_rebuilt: u64,
}

/// The writer side of a FIB: owns the RIB and publishes compiled versions.
///
/// Every method that changes the RIB publishes at most once; a call that changes nothing
/// (inserting a prefix with its current next hop, removing an absent one) publishes nothing.
///
/// # Panics
/// Like [`Rib`]: on next hop [`NO_ROUTE`](crate::NO_ROUTE) or a length over `K::BITS`.
pub struct Fib<K: Key> {
    rib: Rib<K>,
    current: Arc<Poptrie<K>>,
    shared: Arc<ArcSwap<Poptrie<K>>>,
    generation: u64,
    retired: Vec<Arc<Poptrie<K>>>,
    stats: UpdateStats,
}

impl<K: Key> Default for Fib<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key> core::fmt::Debug for Fib<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fib")
            .field("prefixes", &self.rib.len())
            .field("generation", &self.generation)
            .field("current", &self.current)
            .finish()
    }
}

impl<K: Key> Fib<K> {
    /// An empty FIB (every lookup answers [`NO_ROUTE`](crate::NO_ROUTE)).
    pub fn new() -> Self {
        Self::from_rib(Rib::new())
    }

    /// A FIB holding `routes`, compiled once. A prefix listed twice keeps the last next hop.
    pub fn from_routes(routes: impl IntoIterator<Item = (K, u8, NextHop)>) -> Self {
        Self::from_rib(routes.into_iter().collect())
    }

    /// A FIB over an existing RIB, compiled once.
    pub fn from_rib(rib: Rib<K>) -> Self {
        let current = Arc::new(Poptrie::build(&rib));
        let shared = Arc::new(ArcSwap::new(Arc::clone(&current)));
        Fib {
            rib,
            current,
            shared,
            generation: 0,
            retired: Vec::new(),
            stats: UpdateStats::default(),
        }
    }

    /// Sets `addr/len` → `nh` and publishes; returns the previous next hop of that prefix.
    pub fn insert(&mut self, addr: K, len: u8, nh: NextHop) -> Option<NextHop> {
        let old = self.rib.insert(addr, len, nh);
        if old != Some(nh) {
            self.publish_touching(&[self.slot_range((addr, len))]);
        }
        old
    }

    /// Removes `addr/len` and publishes; returns its next hop if it was present.
    pub fn remove(&mut self, addr: K, len: u8) -> Option<NextHop> {
        let old = self.rib.remove(addr, len);
        if old.is_some() {
            self.publish_touching(&[self.slot_range((addr, len))]);
        }
        old
    }

    /// Applies many changes in order and publishes once: the cheap way to load a batch of
    /// routing updates (one copy of the structure for the whole batch).
    ///
    /// When the batch can be patched in, each change is made right before the slots it
    /// touches are recompiled, in address order, so the recompile reads the part of the RIB
    /// the change just brought into cache. Changes to one prefix keep their order. A change
    /// that turns out to change nothing still has its slots recompiled (and counted in
    /// `slots_rebuilt`), and counts toward the share of slots past which a full build is
    /// cheaper: callers pass real changes (a VR's table passes only changed best routes).
    pub fn apply(&mut self, changes: impl IntoIterator<Item = Change<K>>) {
        let mut todo: Vec<((usize, usize), Change<K>)> =
            changes.into_iter().map(|c| (self.slot_range(c.prefix()), c)).collect();
        if todo.is_empty() {
            return;
        }
        todo.sort_by_key(|t| t.0 .0);
        let merged = merge(todo.iter().map(|t| t.0));
        let mut changed = false;
        let mut next = 0;
        // Makes the changes that touch slots below `end` (each touches its first slot).
        let mut apply_until = |rib: &mut Rib<K>, end: usize| {
            while let Some(&(_, ch)) = todo.get(next).filter(|t| t.0 .0 < end) {
                changed |= apply_one(rib, ch);
                next += 1;
            }
        };
        if !self.patchable(&merged) {
            apply_until(&mut self.rib, usize::MAX);
            if changed {
                self.full_build();
            }
            return;
        }
        let p = self.current.patch(&mut self.rib, &merged, &mut apply_until);
        // Every change touches a slot in one of the ranges, so all of them were made.
        debug_assert_eq!(next, todo.len());
        if changed {
            self.publish_patch(p, &merged);
        }
    }

    /// Recompiles from the RIB and publishes (drops all garbage). Updates do this by
    /// themselves when needed; this is for an operator's "clear" command or a benchmark.
    pub fn rebuild(&mut self) {
        let geo = geometry_for::<K>(self.rib.len(), Some(self.current.geometry()));
        self.stats.full_builds += 1;
        self.publish(Poptrie::build_with_geometry(&self.rib, geo));
    }

    /// The source of truth.
    pub fn rib(&self) -> &Rib<K> {
        &self.rib
    }

    /// A handle for a data-plane worker.
    pub fn reader(&self) -> FibReader<K> {
        FibReader::new(Arc::clone(&self.shared))
    }

    /// The version published last.
    pub fn current(&self) -> Arc<Poptrie<K>> {
        Arc::clone(&self.current)
    }

    /// Versions published after the first one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How updates were published so far.
    pub fn update_stats(&self) -> UpdateStats {
        self.stats
    }

    /// The direct slots `[start, end)` a change to `addr/len` can alter in the current version.
    fn slot_range(&self, (addr, len): (K, u8)) -> (usize, usize) {
        let s = self.current.direct_bits();
        let start = addr.mask(len.min(s)).top(s);
        (start, start + (1usize << (s - len.min(s))))
    }

    /// Publishes after a change to `touched`'s slots (the RIB already changed).
    fn publish_touching(&mut self, touched: &[(usize, usize)]) {
        let mut ranges = touched.to_vec();
        ranges.sort_unstable();
        let merged = merge(ranges.into_iter());
        if !self.patchable(&merged) {
            return self.full_build();
        }
        let p = self.current.patch(&mut self.rib, &merged, |_, _| {});
        self.publish_patch(p, &merged);
    }

    /// Whether recompiling `merged` (sorted, disjoint slot ranges) is cheaper than a full build.
    fn patchable(&self, merged: &[(usize, usize)]) -> bool {
        let slots: usize = merged.iter().map(|r| r.1 - r.0).sum();
        slots <= (1usize << self.current.direct_bits()) / 8
    }

    /// Publishes `p`, the current version with `merged` recompiled, unless the RIB's size
    /// now asks for another geometry or the garbage calls for compaction: then a full build.
    fn publish_patch(&mut self, p: Poptrie<K>, merged: &[(usize, usize)]) {
        let want = geometry_for::<K>(self.rib.len(), Some(self.current.geometry()));
        // Compact once garbage is half of what the copy carries around.
        if want != self.current.geometry() || p.garbage_bytes() * 2 > p.trie_bytes() {
            return self.full_build();
        }
        self.stats.patches += 1;
        self.stats.slots_rebuilt += merged.iter().map(|r| (r.1 - r.0) as u64).sum::<u64>();
        self.publish(p);
    }

    fn full_build(&mut self) {
        let want = geometry_for::<K>(self.rib.len(), Some(self.current.geometry()));
        self.stats.full_builds += 1;
        self.publish(Poptrie::build_with_geometry(&self.rib, want));
    }

    fn publish(&mut self, mut next: Poptrie<K>) {
        self.generation += 1;
        self.stats.publishes += 1;
        next.set_generation(self.generation);
        let next = Arc::new(next);
        self.current = Arc::clone(&next);
        let old = self.shared.swap(next);
        self.retired.push(old);
        // Only the writer still holds these: free them here, not in a reader's batch.
        self.retired.retain(|v| Arc::strong_count(v) > 1);
    }
}

/// Sorted ranges merged where they overlap or touch.
fn merge(sorted: impl Iterator<Item = (usize, usize)>) -> Vec<(usize, usize)> {
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (lo, hi) in sorted {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// Makes `ch` in `rib`; whether that changed anything.
fn apply_one<K: Key>(rib: &mut Rib<K>, ch: Change<K>) -> bool {
    match ch {
        Change::Insert(a, l, nh) => rib.insert(a, l, nh) != Some(nh),
        Change::Remove(a, l) => rib.remove(a, l).is_some(),
    }
}

/// A data-plane worker's handle on a FIB: `Clone + Send + Sync`, never blocks.
pub struct FibReader<K: Key> {
    shared: Arc<ArcSwap<Poptrie<K>>>,
    /// The version [`cached`](Self::cached) returned last, and the check that it is current.
    cache: Cache<Arc<ArcSwap<Poptrie<K>>>, Arc<Poptrie<K>>>,
}

impl<K: Key> Clone for FibReader<K> {
    fn clone(&self) -> Self {
        FibReader::new(Arc::clone(&self.shared))
    }
}

impl<K: Key> core::fmt::Debug for FibReader<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FibReader").field("current", &*self.load()).finish()
    }
}

impl<K: Key> FibReader<K> {
    fn new(shared: Arc<ArcSwap<Poptrie<K>>>) -> Self {
        let cache = Cache::new(Arc::clone(&shared));
        FibReader { shared, cache }
    }

    /// The current version, for one batch: a few atomic operations, no lock, no allocation.
    /// Hold it for the batch, not for long: while held, that version's memory stays alive.
    pub fn load(&self) -> FibSnapshot<K> {
        FibSnapshot(self.shared.load())
    }

    /// The current version through this reader's cache: when nothing was published since the
    /// last call, one relaxed load and a compare (a [`load`](Self::load) costs about 55
    /// instructions, which a VR paid per batch: with 16 VRs on a worker and 2 packets each,
    /// about 27 a packet). The returned version stays alive until the next call, however
    /// long that takes (see the module docs: the writer still frees it).
    #[inline]
    pub fn cached(&mut self) -> &Poptrie<K> {
        self.cache.load()
    }

    /// The current version as an owned `Arc` (a reference count increment), for holding
    /// across batches.
    pub fn load_full(&self) -> Arc<Poptrie<K>> {
        self.shared.load_full()
    }
}

/// A loaded FIB version; derefs to [`Poptrie`].
pub struct FibSnapshot<K: Key>(Guard<Arc<Poptrie<K>>>);

impl<K: Key> Deref for FibSnapshot<K> {
    type Target = Poptrie<K>;

    #[inline]
    fn deref(&self) -> &Poptrie<K> {
        &self.0
    }
}

/// Starting from a checkpoint ([`crate::checkpoint`]): a table compiled before is published at
/// once, and the FIB built from the RIB later takes its readers over.
impl<K: Key> Fib<K> {
    /// A FIB publishing `t` (read from a checkpoint) with no RIB behind it: for its readers
    /// only, until a FIB built from the RIB [takes them over](Fib::take_readers).
    pub fn from_compiled(t: Poptrie<K>) -> Self {
        let current = Arc::new(t);
        let shared = Arc::new(ArcSwap::new(Arc::clone(&current)));
        Fib {
            rib: Rib::new(),
            current,
            shared,
            generation: 0,
            retired: Vec::new(),
            stats: UpdateStats::default(),
        }
    }

    /// Publishes to the readers of `r` from now on, starting with the current version: the
    /// readers handed out before (a VR started from a checkpoint) follow this FIB.
    pub fn take_readers(&mut self, r: &FibReader<K>) {
        self.shared = Arc::clone(&r.shared);
        self.shared.store(Arc::clone(&self.current));
    }
}

impl<K: Key> FibReader<K> {
    /// Whether both read what the same FIB publishes.
    pub fn same_as(&self, other: &FibReader<K>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::Rng;
    use crate::testutil::churn;

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Fib<u32>>();
        check::<FibReader<u128>>();
        check::<Poptrie<u128>>();
        check::<Arc<Poptrie<u32>>>();
    }

    #[test]
    fn publishes_only_on_change() {
        let mut fib = Fib::<u32>::new();
        assert_eq!(fib.generation(), 0);
        assert_eq!(fib.insert(0x0A00_0000, 8, 1), None);
        assert_eq!(fib.generation(), 1);
        assert_eq!(fib.insert(0x0A00_0000, 8, 1), Some(1));
        assert_eq!(fib.generation(), 1);
        assert_eq!(fib.remove(0x0B00_0000, 8), None);
        assert_eq!(fib.generation(), 1);
        fib.apply([Change::Insert(0, 0, 3), Change::Remove(0x0A00_0000, 8)]);
        assert_eq!(fib.generation(), 2);
        assert_eq!(fib.current().generation(), 2);
        assert_eq!(fib.reader().load().lookup(0x0A00_0001), 3);
        assert_eq!(fib.rib().len(), 1);
        // A batch that changes nothing publishes nothing, patched (it recompiles its slots)
        // or not (a /0 touches every slot).
        fib.apply([Change::Remove(0x0B00_0000, 8), Change::Remove(0x0A00_0000, 8)]);
        fib.apply([Change::Insert(0, 0, 3)]);
        assert_eq!(fib.generation(), 2);
        assert_eq!(fib.update_stats().publishes, 2);
        // Changes to one prefix keep their order, among changes sorted by slot around them.
        fib.apply([
            Change::Insert(0x0C00_0000, 8, 5),
            Change::Insert(0x0100_0000, 24, 7),
            Change::Remove(0x0C00_0000, 8),
            Change::Insert(0x0C00_0000, 8, 6),
            Change::Remove(0x0100_0000, 24),
        ]);
        assert_eq!(fib.generation(), 3);
        let now = fib.reader().load();
        assert_eq!((now.lookup(0x0C01_0203), now.lookup(0x0100_0001)), (6, 3));
        assert_eq!(fib.rib().iter().collect::<Vec<_>>(), [(0, 0, 3), (0x0C00_0000, 8, 6)]);
    }

    #[test]
    fn old_snapshot_keeps_old_answers() {
        let mut fib = Fib::<u32>::from_routes([(0x0A00_0000, 8, 1)]);
        let reader = fib.reader();
        let old = reader.load();
        let old_full = reader.load_full();
        fib.insert(0x0A00_0000, 8, 2);
        fib.insert(0x0A01_0000, 16, 3);
        assert_eq!(old.lookup(0x0A01_0001), 1);
        assert_eq!(old_full.lookup(0x0A01_0001), 1);
        assert_eq!(old.generation(), 0);
        let new = reader.load();
        assert_eq!(new.lookup(0x0A01_0001), 3);
        assert_eq!(new.lookup(0x0A02_0001), 2);
        assert_eq!(new.generation(), 2);
        drop(old);
        drop(old_full);
        // The next publish frees what nobody reads any more, on this thread.
        fib.insert(0x0A02_0000, 16, 4);
        assert!(fib.retired.is_empty() || fib.retired.iter().all(|v| Arc::strong_count(v) > 1));
    }

    #[test]
    fn cached_reader_follows_publishes_and_never_frees_a_version() {
        let mut fib = Fib::<u32>::from_routes([(0x0A00_0000, 8, 1)]);
        let mut reader = fib.reader();
        assert_eq!(reader.cached().lookup(0x0A01_0001), 1);
        assert_eq!(reader.cached().generation(), 0);
        fib.insert(0x0A01_0000, 16, 3);
        // The cache is checked on every call: the next batch sees the new version.
        assert_eq!(reader.cached().generation(), 1);
        assert_eq!(reader.cached().lookup(0x0A01_0001), 3);
        // Generation 0 is no longer held by the cache; generation 1 is, so the writer keeps it.
        fib.insert(0x0A02_0000, 16, 4);
        assert_eq!(fib.retired.len(), 1, "the cached version stays retired, not freed");
        assert_eq!(fib.retired[0].generation(), 1);
        assert_eq!(reader.cached().generation(), 2);
        // Now nobody but the writer holds generation 1: the next publish frees it.
        fib.insert(0x0A03_0000, 16, 5);
        assert!(fib.retired.iter().all(|v| v.generation() == 2), "{:?}", fib.retired.len());
        // A clone caches on its own and starts from the current version.
        let mut other = reader.clone();
        assert_eq!(other.cached().generation(), 3);
        assert!(other.same_as(&reader));
    }
    #[test]
    fn short_prefix_and_size_growth_trigger_full_builds() {
        let mut fib = Fib::<u32>::from_routes(
            crate::synthetic::ipv4(2000, 16, 3)
                .into_iter()
                .map(|(n, nh)| (u32::from(n.addr()), n.prefix_len(), nh)),
        );
        assert_eq!(fib.current().direct_bits(), 16);
        fib.insert(0x0A0B_0C00, 24, 9);
        assert_eq!(fib.update_stats().patches, 1);
        fib.insert(0, 1, 9);
        assert_eq!(fib.update_stats().full_builds, 1);
        let before = fib.update_stats().full_builds;
        fib.apply((0..40_000u32).map(|i| Change::Insert(0x2000_0000 + (i << 8), 24, 5)));
        assert_eq!(fib.update_stats().full_builds, before + 1);
        assert_eq!(fib.current().direct_bits(), 18);
    }

    #[test]
    fn churn_ipv4_matches_naive() {
        let base: Vec<(u32, u8, NextHop)> = crate::synthetic::ipv4(40_000, 200, 21)
            .into_iter()
            .map(|(n, nh)| (u32::from(n.addr()), n.prefix_len(), nh))
            .collect();
        churn(
            base,
            |rng| {
                // Mostly realistic lengths, with defaults, host routes and short ones mixed in.
                let l = match rng.below(10) {
                    0 => [0, 1, 4, 7, 8, 11, 12, 13][rng.below(8) as usize],
                    1 => 32,
                    2 => 25 + rng.below(7) as u8,
                    _ => 16 + rng.below(9) as u8,
                };
                (rng.next_u64() as u32, l)
            },
            3000,
            77,
            200_000,
        );
    }

    #[test]
    fn churn_ipv6_matches_naive() {
        let base: Vec<(u128, u8, NextHop)> = crate::synthetic::ipv6(15_000, 200, 22)
            .into_iter()
            .map(|(n, nh)| (u128::from(n.addr()), n.prefix_len(), nh))
            .collect();
        churn(
            base,
            |rng| {
                let l = match rng.below(10) {
                    0 => [0, 1, 3, 8, 12, 16, 17, 18][rng.below(8) as usize],
                    1 => 128,
                    2 => 56 + rng.below(73) as u8,
                    _ => 29 + rng.below(20) as u8,
                };
                // Stay mostly inside 2000::/3 where the table is, so changes nest.
                let a = (0x2u128 << 124)
                    | (u128::from(rng.next_u64() >> 4) << 64)
                    | u128::from(rng.next_u64());
                (if rng.below(8) == 0 { a ^ (0xF << 124) } else { a }, l)
            },
            1500,
            78,
            200_000,
        );
    }

    #[test]
    fn concurrent_reader_sees_old_or_new_never_torn() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let base = crate::synthetic::ipv4(20_000, 100, 5);
        let mut fib =
            Fib::from_routes(base.iter().map(|(n, nh)| (u32::from(n.addr()), n.prefix_len(), *nh)));
        // Probes inside the flipped prefix: each may only ever answer what one of the three
        // states (nh 1000, nh 1001, absent) answers. More-specifics from the base table win
        // in all three, which is why the expectations are computed, not assumed.
        let (flip, flen) = (0xC633_6400u32, 24); // 198.51.100.0/24
        let probes: Vec<u32> = (0..256).map(|i| flip | i).collect();
        let mut states = Vec::new();
        for nh in [Some(1000), Some(1001), None] {
            match nh {
                Some(nh) => fib.insert(flip, flen, nh),
                None => fib.remove(flip, flen),
            };
            let t = fib.current();
            states.push(probes.iter().map(|&p| t.lookup(p)).collect::<Vec<NextHop>>());
        }
        assert!(states[0].iter().zip(&states[1]).all(|(a, b)| a != b), "flip is visible");
        let reader = fib.reader();
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let (stop2, rounds2) = (Arc::clone(&stop), Arc::clone(&rounds));
        let r = std::thread::spawn(move || {
            let mut out = vec![0; probes.len()];
            let mut seen = [false; 3];
            let mut last_generation = 0;
            while !stop2.load(Ordering::Relaxed) {
                let t = reader.load();
                t.lookup_batch(&probes, &mut out);
                // A version is one consistent state: all 256 answers from the same one.
                let k = states.iter().position(|st| *st == out);
                let k = k.unwrap_or_else(|| panic!("torn version {}: {out:?}", t.generation()));
                seen[k] = true;
                assert!(t.generation() >= last_generation, "generations go forward");
                last_generation = t.generation();
                rounds2.fetch_add(1, Ordering::Relaxed);
            }
            seen.iter().filter(|&&x| x).count()
        });
        while rounds.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let mut rng = Rng::new(9);
        for i in 0..300 {
            match i % 3 {
                0 => {
                    fib.insert(flip, flen, 1000);
                }
                1 => {
                    fib.insert(flip, flen, 1001);
                }
                _ => {
                    fib.remove(flip, flen);
                }
            }
            // Unrelated churn elsewhere so patches and full builds both happen.
            let a = rng.next_u64() as u32 & 0x7FFF_FF00;
            if a >> 8 != flip >> 8 {
                fib.insert(a, 24, 7);
            }
            if i % 100 == 50 {
                fib.insert(0x8000_0000, 2, 9);
                fib.remove(0x8000_0000, 2);
            }
            // Leave the reader some time on a busy 2-core machine.
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        stop.store(true, Ordering::Relaxed);
        let states_seen = r.join().expect("reader thread panicked");
        assert!(states_seen >= 2, "the reader saw only {states_seen} of the 3 states");
    }
}
