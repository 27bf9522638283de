//! The obviously-correct reference: one hash map per prefix length, probed longest first.
//!
//! Slow (up to `BITS + 1` probes per lookup) and meant to be: every compiled answer in the
//! tests and in `routeplex bench fib` is checked against it.

use rustc_hash::FxHashMap;

use crate::{Key, NextHop, NO_ROUTE};

/// Longest-prefix match by brute force.
#[derive(Clone, Debug)]
pub struct NaiveLpm<K: Key> {
    /// `by_len[l]`: masked address → next hop for the prefixes of length `l`.
    by_len: Vec<FxHashMap<K, NextHop>>,
}

impl<K: Key> Default for NaiveLpm<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key> NaiveLpm<K> {
    /// An empty table.
    pub fn new() -> Self {
        NaiveLpm { by_len: vec![FxHashMap::default(); usize::from(K::BITS) + 1] }
    }

    /// Sets `addr/len` → `nh` (host bits masked off); returns the previous next hop.
    ///
    /// # Panics
    /// When `len > K::BITS`.
    pub fn insert(&mut self, addr: K, len: u8, nh: NextHop) -> Option<NextHop> {
        assert!(len <= K::BITS, "prefix length {len} exceeds {} bits", K::BITS);
        self.by_len[usize::from(len)].insert(addr.mask(len), nh)
    }

    /// Removes `addr/len`; returns its next hop if it was present.
    pub fn remove(&mut self, addr: K, len: u8) -> Option<NextHop> {
        assert!(len <= K::BITS, "prefix length {len} exceeds {} bits", K::BITS);
        self.by_len[usize::from(len)].remove(&addr.mask(len))
    }

    /// The next hop of the longest prefix containing `addr`, or [`NO_ROUTE`].
    pub fn lookup(&self, addr: K) -> NextHop {
        for (len, map) in self.by_len.iter().enumerate().rev() {
            if map.is_empty() {
                continue;
            }
            if let Some(&nh) = map.get(&addr.mask(len as u8)) {
                return nh;
            }
        }
        NO_ROUTE
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.by_len.iter().map(|m| m.len()).sum()
    }

    /// True when there are no prefixes.
    pub fn is_empty(&self) -> bool {
        self.by_len.iter().all(|m| m.is_empty())
    }
}

impl<K: Key> FromIterator<(K, u8, NextHop)> for NaiveLpm<K> {
    fn from_iter<I: IntoIterator<Item = (K, u8, NextHop)>>(iter: I) -> Self {
        let mut t = NaiveLpm::new();
        for (a, l, nh) in iter {
            t.insert(a, l, nh);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_wins_and_removal_falls_back() {
        let mut t: NaiveLpm<u32> =
            [(0, 0, 1), (0x0A00_0000, 8, 2), (0x0A01_0000, 16, 3)].into_iter().collect();
        assert_eq!(t.lookup(0x0A01_0101), 3);
        assert_eq!(t.lookup(0x0A02_0101), 2);
        assert_eq!(t.lookup(0x0B00_0000), 1);
        assert_eq!(t.remove(0x0A01_FFFF, 16), Some(3));
        assert_eq!(t.lookup(0x0A01_0101), 2);
        assert_eq!(t.len(), 2);
        t.remove(0, 0);
        t.remove(0x0A00_0000, 8);
        assert!(t.is_empty());
        assert_eq!(t.lookup(0x0A01_0101), NO_ROUTE);
    }
}
