//! A sorted map as short sorted arrays ("chunks") behind a sorted array of their first keys:
//! the RIB's store. A lookup is a binary search of the first keys (about 100 KiB for a full
//! IPv4 table, so it stays in the core's caches while routes churn) and one of a chunk (a few
//! adjacent cache lines); a B-tree of half a million entries reaches the same entry through
//! six or seven nodes, the last two or three of them cache misses. Iteration in key order is
//! a walk along the chunks, which is what the FIB compiler does for every slot it recompiles.

/// A chunk is split in halves when an insert takes it past this many entries.
const MAX: usize = 64;
/// Entries per chunk when built from sorted input: room for as many inserts before a split.
const BUILD: usize = MAX / 2;

/// Key → value, iterated in key order. The keys of `chunks[i]` lie in `[firsts[i],
/// firsts[i + 1])`. A chunk that a remove empties stays, as a bound, until empty ones are half
/// of all: removing a chunk from the directory moves the rest of it, and a table withdrawn in
/// order would pay that once per chunk (quadratic); relaid out at half, each entry pays once.
#[derive(Clone, Debug)]
pub(crate) struct SortedMap<Q, V> {
    firsts: Vec<Q>,
    chunks: Vec<Vec<(Q, V)>>,
    len: usize,
    empty: usize,
}

impl<Q: Ord + Copy, V: Copy> Default for SortedMap<Q, V> {
    fn default() -> Self {
        SortedMap { firsts: Vec::new(), chunks: Vec::new(), len: 0, empty: 0 }
    }
}

impl<Q: Ord + Copy, V: Copy + PartialEq> PartialEq for SortedMap<Q, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<Q: Ord + Copy, V: Copy> SortedMap<Q, V> {
    /// From entries sorted by key, each key once.
    pub(crate) fn from_sorted(entries: &[(Q, V)]) -> Self {
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        let chunks: Vec<Vec<(Q, V)>> = entries
            .chunks(BUILD)
            .map(|c| {
                let mut v = Vec::with_capacity(MAX + 1);
                v.extend_from_slice(c);
                v
            })
            .collect();
        let firsts = chunks.iter().map(|c| c[0].0).collect();
        SortedMap { firsts, chunks, len: entries.len(), empty: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk that holds `k` if any does: the last whose bound is `<= k` (0 when `k` is
    /// below every bound, where an insert puts it and lowers the bound).
    #[inline]
    fn chunk_of(&self, k: &Q) -> usize {
        self.firsts.partition_point(|f| f <= k).saturating_sub(1)
    }

    pub(crate) fn get(&self, k: &Q) -> Option<V> {
        let c = self.chunks.get(self.chunk_of(k))?;
        c.binary_search_by(|e| e.0.cmp(k)).ok().map(|i| c[i].1)
    }

    /// Sets `k` → `v`; returns the value it replaced.
    pub(crate) fn insert(&mut self, k: Q, v: V) -> Option<V> {
        if self.chunks.is_empty() {
            let mut c = Vec::with_capacity(MAX + 1);
            c.push((k, v));
            self.chunks.push(c);
            self.firsts.push(k);
            self.len = 1;
            return None;
        }
        let ci = self.chunk_of(&k);
        let c = &mut self.chunks[ci];
        match c.binary_search_by(|e| e.0.cmp(&k)) {
            Ok(i) => return Some(std::mem::replace(&mut c[i].1, v)),
            Err(i) => c.insert(i, (k, v)),
        }
        self.len += 1;
        if c.len() == 1 {
            self.empty -= 1;
        }
        self.firsts[ci] = self.firsts[ci].min(k);
        if c.len() > MAX {
            let mut upper = Vec::with_capacity(MAX + 1);
            upper.extend_from_slice(&c[MAX / 2..]);
            c.truncate(MAX / 2);
            self.firsts.insert(ci + 1, upper[0].0);
            self.chunks.insert(ci + 1, upper);
        }
        None
    }

    /// Removes `k`; returns its value if it was present.
    pub(crate) fn remove(&mut self, k: &Q) -> Option<V> {
        let ci = self.chunk_of(k);
        let c = self.chunks.get_mut(ci)?;
        let i = c.binary_search_by(|e| e.0.cmp(k)).ok()?;
        let (_, v) = c.remove(i);
        self.len -= 1;
        if c.is_empty() {
            self.empty += 1;
            if self.empty * 2 > self.chunks.len() {
                let all: Vec<(Q, V)> = self.iter().copied().collect();
                *self = SortedMap::from_sorted(&all);
            }
        }
        Some(v)
    }

    /// Every entry in key order.
    pub(crate) fn iter(&self) -> Iter<'_, Q, V> {
        Iter { inner: self.chunks.iter().flatten(), left: self.len }
    }

    /// The entries with keys `>= lo`, in key order.
    pub(crate) fn from(&self, lo: &Q) -> impl Iterator<Item = &(Q, V)> + '_ {
        let ci = self.chunk_of(lo);
        let head = self.chunks.get(ci).map_or(&[][..], |c| &c[c.partition_point(|e| e.0 < *lo)..]);
        head.iter().chain(self.chunks.get(ci + 1..).unwrap_or_default().iter().flatten())
    }
}

/// [`SortedMap::iter`]: it knows how many entries are left.
pub(crate) struct Iter<'a, Q, V> {
    inner: std::iter::Flatten<std::slice::Iter<'a, Vec<(Q, V)>>>,
    left: usize,
}

impl<'a, Q, V> Iterator for Iter<'a, Q, V> {
    type Item = &'a (Q, V);

    fn next(&mut self) -> Option<Self::Item> {
        let e = self.inner.next()?;
        self.left -= 1;
        Some(e)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<Q, V> ExactSizeIterator for Iter<'_, Q, V> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn check(m: &SortedMap<u32, u16>, model: &BTreeMap<u32, u16>) {
        assert_eq!(m.len(), model.len());
        let got: Vec<(u32, u16)> = m.iter().copied().collect();
        let want: Vec<(u32, u16)> = model.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(got, want);
        assert_eq!(m.iter().len(), model.len());
        assert!(m.chunks.iter().all(|c| c.len() <= MAX));
        assert_eq!(m.chunks.iter().filter(|c| c.is_empty()).count(), m.empty);
        assert!(m.empty * 2 <= m.chunks.len());
        for (i, c) in m.chunks.iter().enumerate() {
            let next = m.firsts.get(i + 1);
            assert!(c.iter().all(|e| e.0 >= m.firsts[i] && next.is_none_or(|n| e.0 < *n)));
        }
        for lo in [0, 1, 500, 999, 1000, 1001, 5000, u32::MAX] {
            let got: Vec<(u32, u16)> = m.from(&lo).copied().collect();
            let want: Vec<(u32, u16)> = model.range(lo..).map(|(&k, &v)| (k, v)).collect();
            assert_eq!(got, want, "from {lo}");
        }
    }

    #[test]
    fn inserts_and_removes_in_any_order_agree_with_a_btree() {
        let mut rng = crate::synthetic::Rng::new(9);
        let (mut m, mut model) = (SortedMap::default(), BTreeMap::new());
        check(&m, &model);
        assert_eq!(m.remove(&3), None);
        // Grow through many splits, then shrink through emptied chunks, then grow again.
        for round in 0..3 {
            for _ in 0..4000 {
                let (k, v) = (rng.below(6000) as u32, 1 + rng.below(100) as u16);
                let insert = round != 1 || rng.below(4) == 0;
                if insert {
                    assert_eq!(m.insert(k, v), model.insert(k, v), "insert {k}");
                } else {
                    assert_eq!(m.remove(&k), model.remove(&k), "remove {k}");
                }
                assert_eq!(m.get(&k), model.get(&k).copied());
            }
            check(&m, &model);
        }
        // Below every key, and ascending runs that split the last chunk.
        for k in (0..200).rev().chain(10_000..10_300) {
            assert_eq!(m.insert(k, 7), model.insert(k, 7));
        }
        check(&m, &model);
        for k in 0..12_000 {
            assert_eq!(m.remove(&k), model.remove(&k));
        }
        check(&m, &model);
        assert!(m.chunks.is_empty() && m.firsts.is_empty());
    }

    #[test]
    fn built_from_sorted_input_is_inserted_one_by_one() {
        for n in [0, 1, 2, BUILD - 1, BUILD, BUILD + 1, 257, 1000] {
            let entries: Vec<(u32, u16)> = (0..n as u32).map(|k| (k * 3, k as u16)).collect();
            let built = SortedMap::from_sorted(&entries);
            let mut one = SortedMap::default();
            for &(k, v) in &entries {
                one.insert(k, v);
            }
            assert_eq!(built, one, "{n}");
            check(&built, &entries.iter().copied().collect());
        }
    }
}
