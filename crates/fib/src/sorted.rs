//! A sorted map as short sorted arrays ("chunks") behind a sorted array of their first keys:
//! the RIB's store. A lookup is a binary search of the first keys (about 128 KiB for a full
//! IPv4 table, so it stays in the core's caches while routes churn) and one of a chunk (a few
//! adjacent cache lines); a B-tree of half a million entries reaches the same entry through
//! six or seven nodes, the last two or three of them cache misses. The entries of an address
//! range are a few slices of chunks, copied whole, which is what the FIB compiler asks for
//! every slot it recompiles.

use crate::{Key, NextHop};

/// A chunk is split in halves when an insert takes it past this many entries.
const MAX: usize = 64;
/// Entries per chunk when built from sorted input: room for as many inserts before a split.
const BUILD: usize = MAX / 2;

/// A prefix and its next hop, ordered by (address, length).
pub(crate) type Entry<K> = (K, u8, NextHop);

#[inline(always)]
fn key<K: Key>(e: &Entry<K>) -> (K, u8) {
    (e.0, e.1)
}

/// Entries by (address, length), iterated in that order. The keys of `chunks[i]` lie in
/// `[firsts[i], firsts[i + 1])`. A chunk that a remove empties stays, as a bound, until empty
/// ones are half of all: removing a chunk from the directory moves the rest of it, and a
/// table withdrawn in order would pay that once per chunk (quadratic); relaid out at half,
/// each entry pays once.
#[derive(Clone, Debug)]
pub(crate) struct SortedMap<K> {
    firsts: Vec<(K, u8)>,
    chunks: Vec<Vec<Entry<K>>>,
    len: usize,
    empty: usize,
}

impl<K: Key> Default for SortedMap<K> {
    fn default() -> Self {
        SortedMap { firsts: Vec::new(), chunks: Vec::new(), len: 0, empty: 0 }
    }
}

impl<K: Key> PartialEq for SortedMap<K> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: Key> SortedMap<K> {
    /// From entries sorted by (address, length), each prefix once.
    pub(crate) fn from_sorted(entries: &[Entry<K>]) -> Self {
        debug_assert!(entries.windows(2).all(|w| key(&w[0]) < key(&w[1])));
        let chunks: Vec<Vec<Entry<K>>> = entries.chunks(BUILD).map(<[_]>::to_vec).collect();
        let firsts = chunks.iter().map(|c| key(&c[0])).collect();
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
    fn chunk(&self, k: (K, u8)) -> usize {
        self.firsts.partition_point(|&f| f <= k).saturating_sub(1)
    }

    pub(crate) fn get(&self, k: (K, u8)) -> Option<NextHop> {
        let c = self.chunks.get(self.chunk(k))?;
        c.binary_search_by(|e| key(e).cmp(&k)).ok().map(|i| c[i].2)
    }

    /// Sets `e`'s prefix to its next hop; returns the next hop it replaced.
    pub(crate) fn insert(&mut self, e: Entry<K>) -> Option<NextHop> {
        let k = key(&e);
        if self.chunks.is_empty() {
            self.chunks.push(vec![e]);
            self.firsts.push(k);
            self.len = 1;
            return None;
        }
        let ci = self.chunk(k);
        let c = &mut self.chunks[ci];
        match c.binary_search_by(|x| key(x).cmp(&k)) {
            Ok(i) => return Some(std::mem::replace(&mut c[i].2, e.2)),
            Err(i) => c.insert(i, e),
        }
        self.len += 1;
        if c.len() == 1 {
            self.empty -= 1;
        }
        self.firsts[ci] = self.firsts[ci].min(k);
        if c.len() > MAX {
            let upper = c[MAX / 2..].to_vec();
            c.truncate(MAX / 2);
            self.firsts.insert(ci + 1, key(&upper[0]));
            self.chunks.insert(ci + 1, upper);
        }
        None
    }

    /// Removes prefix `k`; returns its next hop if it was present.
    pub(crate) fn remove(&mut self, k: (K, u8)) -> Option<NextHop> {
        let ci = self.chunk(k);
        let c = self.chunks.get_mut(ci)?;
        let i = c.binary_search_by(|e| key(e).cmp(&k)).ok()?;
        let (_, _, nh) = c.remove(i);
        self.len -= 1;
        if c.is_empty() {
            self.empty += 1;
            if self.empty * 2 > self.chunks.len() {
                let all: Vec<Entry<K>> = self.iter().copied().collect();
                *self = SortedMap::from_sorted(&all);
            }
        }
        Some(nh)
    }

    /// Every entry in order.
    pub(crate) fn iter(&self) -> Iter<'_, K> {
        Iter { inner: self.chunks.iter().flatten(), left: self.len }
    }

    /// Appends to `out` the entries whose address lies in `[lo, hi)` (`hi == None`: to the
    /// end), in order: a slice of each chunk the range meets.
    pub(crate) fn extend_range(&self, lo: K, hi: Option<K>, out: &mut Vec<Entry<K>>) {
        let ci = self.chunk((lo, 0));
        let Some(first) = self.chunks.get(ci) else { return };
        let mut from = first.partition_point(|e| e.0 < lo);
        for c in &self.chunks[ci..] {
            let part = &c[from..];
            let end = hi.map_or(part.len(), |h| part.partition_point(|e| e.0 < h));
            out.extend_from_slice(&part[..end]);
            if end < part.len() {
                return;
            }
            from = 0;
        }
    }
}

/// [`SortedMap::iter`]: it knows how many entries are left.
pub(crate) struct Iter<'a, K> {
    inner: std::iter::Flatten<std::slice::Iter<'a, Vec<Entry<K>>>>,
    left: usize,
}

impl<'a, K> Iterator for Iter<'a, K> {
    type Item = &'a Entry<K>;

    fn next(&mut self) -> Option<Self::Item> {
        let e = self.inner.next()?;
        self.left -= 1;
        Some(e)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<K> ExactSizeIterator for Iter<'_, K> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    type Model = BTreeMap<(u32, u8), NextHop>;

    fn check(m: &SortedMap<u32>, model: &Model) {
        assert_eq!(m.len(), model.len());
        let got: Vec<Entry<u32>> = m.iter().copied().collect();
        let want: Vec<Entry<u32>> = model.iter().map(|(&(a, l), &nh)| (a, l, nh)).collect();
        assert_eq!(got, want);
        assert_eq!(m.iter().len(), model.len());
        assert!(m.chunks.iter().all(|c| c.len() <= MAX));
        assert_eq!(m.chunks.iter().filter(|c| c.is_empty()).count(), m.empty);
        assert!(m.empty * 2 <= m.chunks.len());
        for (i, c) in m.chunks.iter().enumerate() {
            let next = m.firsts.get(i + 1);
            assert!(c.iter().all(|e| key(e) >= m.firsts[i] && next.is_none_or(|n| key(e) < *n)));
        }
        let bounds = [0, 1, 500, 999, 1000, 1001, 5000, 20_000, u32::MAX];
        for lo in bounds {
            for hi in bounds.iter().map(|&h| Some(h)).chain([None]) {
                let mut got = Vec::new();
                m.extend_range(lo, hi, &mut got);
                let want: Vec<Entry<u32>> = model
                    .range((lo, 0)..)
                    .map(|(&(a, l), &nh)| (a, l, nh))
                    .take_while(|e| hi.is_none_or(|h| e.0 < h))
                    .collect();
                assert_eq!(got, want, "[{lo}, {hi:?})");
            }
        }
    }

    #[test]
    fn inserts_and_removes_in_any_order_agree_with_a_btree() {
        let mut rng = crate::synthetic::Rng::new(9);
        let (mut m, mut model) = (SortedMap::default(), Model::new());
        check(&m, &model);
        assert_eq!(m.remove((3, 0)), None);
        // Grow through many splits, then shrink through emptied chunks, then grow again.
        for round in 0..3 {
            for _ in 0..4000 {
                let (k, v) =
                    ((rng.below(3000) as u32, rng.below(3) as u8), 1 + rng.below(99) as u16);
                let insert = round != 1 || rng.below(4) == 0;
                if insert {
                    assert_eq!(m.insert((k.0, k.1, v)), model.insert(k, v), "insert {k:?}");
                } else {
                    assert_eq!(m.remove(k), model.remove(&k), "remove {k:?}");
                }
                assert_eq!(m.get(k), model.get(&k).copied());
            }
            check(&m, &model);
        }
        // Below every key, and ascending runs that split the last chunk.
        for a in (0..200).rev().chain(10_000..10_300) {
            assert_eq!(m.insert((a, 8, 7)), model.insert((a, 8), 7));
        }
        check(&m, &model);
        // Withdrawn in order: emptied chunks, relaid out at half.
        for a in 0..12_000 {
            for l in [0, 1, 2, 8] {
                assert_eq!(m.remove((a, l)), model.remove(&(a, l)));
            }
            if a % 1000 == 0 {
                check(&m, &model);
            }
        }
        check(&m, &model);
        assert!(m.chunks.is_empty() && m.firsts.is_empty());
    }

    #[test]
    fn built_from_sorted_input_is_inserted_one_by_one() {
        for n in [0, 1, 2, BUILD - 1, BUILD, BUILD + 1, 257, 1000] {
            let entries: Vec<Entry<u32>> = (0..n as u32).map(|a| (a * 3, 24, a as u16)).collect();
            let built = SortedMap::from_sorted(&entries);
            let mut one = SortedMap::default();
            for &e in &entries {
                one.insert(e);
            }
            assert_eq!(built, one, "{n}");
            check(&built, &entries.iter().map(|&(a, l, nh)| ((a, l), nh)).collect());
        }
    }
}
