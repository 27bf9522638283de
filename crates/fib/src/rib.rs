//! The routing information base: prefix → next hop, the source of truth for one VR and one
//! address family. Every compiled [`Poptrie`](crate::Poptrie) is a function of a `Rib`.
//!
//! Kept ordered by (address, length) because the compiler needs exactly that order: the
//! prefixes inside an address range are one contiguous run, and within the run a prefix comes
//! before everything it contains. The store is a [`SortedMap`] (sorted chunks), not a
//! `BTreeMap`: route churn is a search per change and per recompiled slot, and the chunks'
//! directory stays in cache where a B-tree's lower levels do not.

use crate::sorted::SortedMap;
use crate::{Key, NextHop, NO_ROUTE};

/// Prefix → next hop. Host bits beyond the prefix length are masked off on every call, so
/// `10.1.2.3/8` and `10.0.0.0/8` name the same entry.
///
/// # Panics
/// `insert` panics when `nh == NO_ROUTE` (0 is the lookup's "nothing matched" answer and can
/// never be a route), and every method panics when `len > K::BITS`. Both are caller bugs, not
/// data errors: parsers reject such input before it gets here.
#[derive(Clone, Default)]
pub struct Rib<K: Key> {
    map: SortedMap<K>,
    /// Once the table is large, one bit per possible prefix of length `<= SHORT_MAX` (64 KiB):
    /// whether the map holds it. A patch asks for the prefixes covering each slot it
    /// recompiles, one length at a time, and most lengths hold none there: the bit answers
    /// that without a search of the tree (a few cache misses in a table of 0.5 M entries).
    short: Option<Box<[u64]>>,
}

/// Lengths with a presence bit (the direct bits of a large IPv4 FIB).
const SHORT_MAX: u8 = 18;
/// Tables from this size keep the bits (the size that gets a large FIB geometry).
const SHORT_FROM: usize = 32_768;

/// The presence bit of `addr/len` (`len <= SHORT_MAX`, `addr` masked): lengths in turn,
/// `2^len` bits each.
fn short_bit<K: Key>(addr: K, len: u8) -> usize {
    let first = (1usize << len) - 1;
    if len == 0 {
        first
    } else {
        first + addr.top(len)
    }
}

impl<K: Key> PartialEq for Rib<K> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: Key> Eq for Rib<K> {}

impl<K: Key> core::fmt::Debug for Rib<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.map.iter()).finish()
    }
}

#[inline]
fn check_len<K: Key>(len: u8) {
    assert!(len <= K::BITS, "prefix length {len} exceeds {} bits", K::BITS);
}

impl<K: Key> Rib<K> {
    /// An empty table.
    pub fn new() -> Self {
        Rib { map: SortedMap::default(), short: None }
    }

    /// Sets `addr/len` → `nh`; returns the previous next hop of that exact prefix.
    pub fn insert(&mut self, addr: K, len: u8, nh: NextHop) -> Option<NextHop> {
        check_len::<K>(len);
        assert!(nh != NO_ROUTE, "next hop 0 (NO_ROUTE) cannot be stored in the RIB");
        let a = addr.mask(len);
        let old = self.map.insert((a, len, nh));
        match &mut self.short {
            Some(bits) if len <= SHORT_MAX => {
                let b = short_bit(a, len);
                bits[b / 64] |= 1 << (b % 64);
            }
            None if self.map.len() >= SHORT_FROM => self.index_short(),
            _ => {}
        }
        old
    }

    /// Removes `addr/len`; returns its next hop if it was present.
    pub fn remove(&mut self, addr: K, len: u8) -> Option<NextHop> {
        check_len::<K>(len);
        let a = addr.mask(len);
        let old = self.map.remove((a, len));
        if let (Some(bits), true) = (&mut self.short, len <= SHORT_MAX) {
            let b = short_bit(a, len);
            bits[b / 64] &= !(1 << (b % 64));
        }
        old
    }

    /// Makes the presence bits from the map (kept from then on, also when the table shrinks:
    /// no flip-flop at the threshold).
    fn index_short(&mut self) {
        let mut bits = vec![0u64; short_bit(K::ZERO, SHORT_MAX + 1).div_ceil(64)];
        for &(a, l, _) in self.map.iter().filter(|e| e.1 <= SHORT_MAX) {
            let b = short_bit(a, l);
            bits[b / 64] |= 1 << (b % 64);
        }
        self.short = Some(bits.into_boxed_slice());
    }

    /// Whether `a/l` (masked) may be in the map: false only when the presence bits say not.
    #[inline]
    fn may_hold(&self, a: K, l: u8) -> bool {
        match &self.short {
            Some(bits) if l <= SHORT_MAX => {
                let b = short_bit(a, l);
                bits[b / 64] & (1 << (b % 64)) != 0
            }
            _ => true,
        }
    }

    /// The next hop of `a/l` (`a` masked), asking the presence bits first.
    #[inline]
    fn find(&self, a: K, l: u8) -> Option<NextHop> {
        if self.may_hold(a, l) {
            self.map.get((a, l))
        } else {
            None
        }
    }

    /// The next hop of exactly `addr/len` (no longest-prefix matching).
    pub fn get(&self, addr: K, len: u8) -> Option<NextHop> {
        check_len::<K>(len);
        self.map.get((addr.mask(len), len))
    }

    /// Longest-prefix match the slow way (one probe per length). For the control plane and
    /// tests; the data plane uses a compiled [`Poptrie`](crate::Poptrie).
    pub fn longest_match(&self, addr: K) -> Option<(K, u8, NextHop)> {
        self.covering(addr, K::BITS).last().copied()
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when there are no prefixes.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// All prefixes as `(addr, len, nh)`, sorted by address then length (so a prefix comes
    /// right before the prefixes it contains).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (K, u8, NextHop)> + '_ {
        self.map.iter().copied()
    }

    /// Appends the prefixes whose first address lies in `[lo, hi)` (`hi == None`: to the end
    /// of the address space) to `out`, in [`iter`](Rib::iter) order.
    pub(crate) fn extend_range(&self, lo: K, hi: Option<K>, out: &mut Vec<(K, u8, NextHop)>) {
        self.map.extend_range(lo, hi, out);
    }

    /// The prefixes of length `<= max_len` that contain `addr`, shortest first.
    pub(crate) fn covering(&self, addr: K, max_len: u8) -> Vec<(K, u8, NextHop)> {
        Cover::new().of(self, addr, max_len).to_vec()
    }
}

/// [`Rib::covering`] for a run of addresses in ascending order, as a patch asks for them:
/// the prefixes that cover an address and its predecessor are those no longer than the two
/// addresses' common bits, so only the lengths past that are looked up again. For 10,000
/// random slots of a full IPv4 table that is about 5 lookups a slot instead of 19, each in a
/// part of the tree the one before just read.
pub(crate) struct Cover<K: Key> {
    /// The address and maximum length last asked, and the answer: every prefix of length
    /// `<= max` containing `addr`, shortest first.
    last: Option<(K, u8)>,
    chain: Vec<(K, u8, NextHop)>,
}

impl<K: Key> Cover<K> {
    /// A cache for one `Rib`, which may change between calls only by prefixes that contain
    /// no address asked before (a patch makes each change just before the slots it touches,
    /// and asks in ascending order: a change after an address starts past it).
    pub(crate) fn new() -> Self {
        Cover { last: None, chain: Vec::new() }
    }

    /// The prefixes of `rib` of length `<= max_len` containing `addr`, shortest first: what
    /// `rib.covering(addr, max_len)` gives, for the RIB every call of this cache is given.
    pub(crate) fn of(&mut self, rib: &Rib<K>, addr: K, max_len: u8) -> &[(K, u8, NextHop)] {
        let keep = match self.last {
            Some((a, m)) => common_len(a, addr).min(m).min(max_len),
            None => 0,
        };
        let from = match self.last {
            Some(_) => {
                self.chain.retain(|p| p.1 <= keep);
                keep + 1
            }
            None => 0,
        };
        for l in from..=max_len {
            let a = addr.mask(l);
            if let Some(nh) = rib.find(a, l) {
                self.chain.push((a, l, nh));
            }
        }
        self.last = Some((addr, max_len));
        &self.chain
    }
}

/// How many leading bits `a` and `b` share (`K::BITS` when equal).
fn common_len<K: Key>(a: K, b: K) -> u8 {
    let x = (a.to_u128() ^ b.to_u128()) << (128 - u32::from(K::BITS));
    (x.leading_zeros() as u8).min(K::BITS)
}

impl<K: Key> FromIterator<(K, u8, NextHop)> for Rib<K> {
    /// The same as inserting each in turn (a later entry for a prefix wins), but built in one
    /// go: sorted (stably, so the last of a prefix's entries is the one kept) and laid out in
    /// chunks, many times faster than half a million inserts in arbitrary order, which is
    /// what a VR's start pays for a full table.
    fn from_iter<I: IntoIterator<Item = (K, u8, NextHop)>>(iter: I) -> Self {
        let mut all: Vec<(K, u8, NextHop)> = iter
            .into_iter()
            .map(|(a, l, nh)| {
                check_len::<K>(l);
                assert!(nh != NO_ROUTE, "next hop 0 (NO_ROUTE) cannot be stored in the RIB");
                (a.mask(l), l, nh)
            })
            .collect();
        all.sort_by_key(|e| (e.0, e.1));
        // Of equal keys, keep the last: reversed, `dedup_by_key` keeps the first of a run.
        all.reverse();
        all.dedup_by_key(|e| (e.0, e.1));
        all.reverse();
        let map = SortedMap::from_sorted(&all);
        let mut rib = Rib { map, short: None };
        if rib.map.len() >= SHORT_FROM {
            rib.index_short();
        }
        rib
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_bits_are_masked_everywhere() {
        let mut rib = Rib::<u32>::new();
        assert_eq!(rib.insert(0x0A01_0203, 8, 5), None);
        assert_eq!(rib.get(0x0A00_0000, 8), Some(5));
        assert_eq!(rib.get(0x0AFF_FFFF, 8), Some(5));
        assert_eq!(rib.insert(0x0A00_0000, 8, 6), Some(5));
        assert_eq!(rib.iter().collect::<Vec<_>>(), vec![(0x0A00_0000, 8, 6)]);
        assert_eq!(rib.remove(0x0A12_3456, 8), Some(6));
        assert!(rib.is_empty());
        assert_eq!(rib.remove(0x0A00_0000, 8), None);
    }

    #[test]
    fn iter_is_sorted_address_then_length() {
        let rib: Rib<u32> =
            [(0x0A00_0000, 16, 1), (0x0A00_0000, 8, 2), (0x0900_0000, 24, 3), (0, 0, 4)]
                .into_iter()
                .collect();
        let v: Vec<_> = rib.iter().collect();
        assert_eq!(
            v,
            vec![(0, 0, 4), (0x0900_0000, 24, 3), (0x0A00_0000, 8, 2), (0x0A00_0000, 16, 1)]
        );
        assert_eq!(rib.len(), 4);
        let mut inside = Vec::new();
        rib.extend_range(0x0A00_0000, Some(0x0B00_0000), &mut inside);
        assert_eq!(inside, vec![(0x0A00_0000, 8, 2), (0x0A00_0000, 16, 1)]);
        inside.clear();
        rib.extend_range(0x0A00_0001, None, &mut inside);
        assert!(inside.is_empty());
    }

    #[test]
    fn collecting_is_inserting_in_turn() {
        // Unsorted, host bits set, and one prefix three times: the last one wins.
        let input = [
            (0x0A01_0203, 8, 1),
            (0x0900_0000, 24, 2),
            (0x0A00_0000, 8, 3),
            (0, 0, 4),
            (0x0AFF_0000, 8, 5),
            (0x0900_00FF, 24, 6),
        ];
        let mut one_by_one = Rib::<u32>::new();
        for (a, l, nh) in input {
            one_by_one.insert(a, l, nh);
        }
        let collected: Rib<u32> = input.into_iter().collect();
        assert_eq!(collected, one_by_one);
        assert_eq!(collected.get(0x0A00_0000, 8), Some(5));
        assert_eq!(collected.len(), 3);
    }

    #[test]
    #[should_panic(expected = "NO_ROUTE")]
    fn collecting_no_route_is_rejected() {
        let _: Rib<u32> = [(0, 8, NO_ROUTE)].into_iter().collect();
    }

    #[test]
    fn longest_match_and_covering() {
        let rib: Rib<u128> =
            [(0, 0, 1), (0x2001 << 112, 16, 2), (0x2001_0db8 << 96, 32, 3)].into_iter().collect();
        assert_eq!(rib.longest_match((0x2001_0db8 << 96) | 7), Some((0x2001_0db8 << 96, 32, 3)));
        assert_eq!(rib.longest_match(0x2002 << 112), Some((0, 0, 1)));
        let c: Vec<u8> = rib.covering(0x2001_0db8 << 96, 31).iter().map(|p| p.1).collect();
        assert_eq!(c, vec![0, 16]);
    }

    #[test]
    fn cover_answers_as_covering_does_in_any_order() {
        let rib: Rib<u32> = [
            (0, 0, 1),
            (0x0A00_0000, 8, 2),
            (0x0A01_0000, 16, 3),
            (0x0A01_0200, 24, 4),
            (0x0A01_0300, 24, 5),
            (0x0B00_0000, 8, 6),
            (0x0A80_0000, 9, 7),
        ]
        .into_iter()
        .collect();
        let addrs = [
            0x0A01_0200u32,
            0x0A01_0201,
            0x0A01_0300,
            0x0A01_0000,
            0x0A80_0001,
            0x0B00_0000,
            0x0900_0000,
            0x0A01_0200,
            0xFFFF_FFFF,
            0,
        ];
        let mut cover = Cover::new();
        for max in [32, 24, 8, 0, 16, 17] {
            for &a in addrs.iter().chain(addrs.iter().rev()) {
                assert_eq!(cover.of(&rib, a, max), rib.covering(a, max), "{a:#x}/{max}");
            }
        }
        assert_eq!(common_len(0x0A01_0200u32, 0x0A01_0300), 23);
        assert_eq!(common_len(5u32, 5), 32);
        assert_eq!(common_len(0u128, 1 << 127), 0);
        assert_eq!(common_len(7u128, 6), 127);
    }

    #[test]
    fn presence_bits_answer_as_the_map_does() {
        // A table large enough to keep the bits, with prefixes of every length around them.
        let mut rng = crate::synthetic::Rng::new(3);
        let mut rib = Rib::<u32>::new();
        while rib.len() < SHORT_FROM + 1000 {
            let l = [4, 8, 12, 16, 17, 18, 19, 20, 24][rng.below(9) as usize];
            rib.insert(rng.next_u64() as u32, l, 1 + rng.below(9) as NextHop);
        }
        assert!(rib.short.is_some(), "kept from {SHORT_FROM} prefixes");
        let collected: Rib<u32> = rib.iter().collect();
        assert!(collected.short.is_some() && collected == rib);
        // The map alone, without the bits.
        let brute = |rib: &Rib<u32>, a: u32| -> Vec<(u32, u8, NextHop)> {
            (0..=20)
                .filter_map(|l| rib.map.get((a.mask(l), l)).map(|nh| (a.mask(l), l, nh)))
                .collect()
        };
        let check = |rib: &Rib<u32>, seed: u64| {
            let mut r = crate::synthetic::Rng::new(seed);
            let picks: Vec<u32> = rib.iter().map(|p| p.0).step_by(97).collect();
            for i in 0..2000 {
                let a = if i % 2 == 0 { r.next_u64() as u32 } else { picks[i % picks.len()] };
                assert_eq!(rib.covering(a, 20), brute(rib, a), "{a:#x}");
            }
        };
        check(&rib, 1);
        // Removing clears a bit (the same prefix is then not found), adding sets it again.
        let short: Vec<(u32, u8, NextHop)> =
            rib.iter().filter(|p| p.1 <= SHORT_MAX).step_by(3).collect();
        for p in &short {
            assert_eq!(rib.remove(p.0, p.1), Some(p.2));
            assert!(!rib.may_hold(p.0, p.1));
        }
        check(&rib, 2);
        for p in &short[..short.len() / 2] {
            rib.insert(p.0, p.1, p.2);
            assert!(rib.may_hold(p.0, p.1));
        }
        check(&rib, 3);
        assert_eq!(short_bit(0u32, 0), 0);
        assert_eq!(short_bit(1u32 << 31, 1), 2);
        assert_eq!(short_bit(u32::MAX, SHORT_MAX), (1 << (SHORT_MAX + 1)) - 2);
    }

    #[test]
    #[should_panic(expected = "NO_ROUTE")]
    fn no_route_is_rejected() {
        Rib::<u32>::new().insert(0, 0, NO_ROUTE);
    }

    #[test]
    #[should_panic(expected = "exceeds 32 bits")]
    fn long_length_is_rejected() {
        Rib::<u32>::new().insert(0, 33, 1);
    }
}
