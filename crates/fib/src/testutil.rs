//! Checks shared by the tests: compiled answers against the naive oracle.

use ipnet::Ipv4Net;

use crate::naive::NaiveLpm;
use crate::synthetic::Rng;
use crate::{Change, Fib, Key, NextHop, Poptrie, Rib, NO_ROUTE};

pub(crate) fn routes_to_rib(routes: &[(Ipv4Net, NextHop)]) -> Rib<u32> {
    routes.iter().map(|&(n, nh)| (u32::from(n.addr()), n.prefix_len(), nh)).collect()
}

/// First, last, first - 1 and last + 1 of each prefix.
pub(crate) fn boundaries<K: Key>(prefixes: impl Iterator<Item = (K, u8)>) -> Vec<K> {
    let mut v = Vec::new();
    for (a, l) in prefixes {
        let first = a.mask(l);
        let last = first.last(l);
        v.extend(
            [Some(first), Some(last), first.checked_dec(), last.checked_inc()]
                .into_iter()
                .flatten(),
        );
    }
    v
}

/// Looks `addrs` up batched and scalar; both must equal the naive answer.
pub(crate) fn check_addrs<K: Key>(t: &Poptrie<K>, naive: &NaiveLpm<K>, addrs: &[K], ctx: &str) {
    let mut out = vec![0; addrs.len()];
    t.lookup_batch(addrs, &mut out);
    for (i, &a) in addrs.iter().enumerate() {
        let want = naive.lookup(a);
        let scalar = t.lookup(a);
        assert!(
            out[i] == want && scalar == want,
            "{ctx}: address {a:#x?}: naive {want}, batched {}, scalar {scalar} ({t:?})",
            out[i]
        );
    }
}

/// Every boundary of the RIB's prefixes and `random` random addresses (for IPv6 half of them
/// inside random RIB prefixes, since uniform ones all miss).
pub(crate) fn check_against<K: Key>(
    t: &Poptrie<K>,
    naive: &NaiveLpm<K>,
    rib: &Rib<K>,
    random: usize,
    seed: u64,
) {
    let entries: Vec<(K, u8, NextHop)> = rib.iter().collect();
    let b = boundaries(entries.iter().map(|p| (p.0, p.1)));
    check_addrs(t, naive, &b, "prefix boundary");
    let mut rng = Rng::new(seed);
    let addrs: Vec<K> = (0..random)
        .map(|i| {
            let r = K::from_u128(rng.next_u128());
            if K::BITS > 32 && i % 2 == 0 && !entries.is_empty() {
                let (a, l, _) = entries[rng.below(entries.len() as u64) as usize];
                K::from_u128(a.to_u128() | (r.to_u128() & K::ZERO.last(l).to_u128()))
            } else {
                r
            }
        })
        .collect();
    check_addrs(t, naive, &addrs, "random address");
}

/// Boundaries of the given prefixes plus a few addresses inside each.
pub(crate) fn check_prefixes<K: Key>(
    t: &Poptrie<K>,
    naive: &NaiveLpm<K>,
    prefixes: impl Iterator<Item = (K, u8)> + Clone,
    ctx: &str,
) {
    let mut addrs = boundaries(prefixes.clone());
    let mut rng = Rng::new(addrs.len() as u64);
    for (a, l) in prefixes {
        for _ in 0..4 {
            addrs.push(K::from_u128(
                a.mask(l).to_u128() | (rng.next_u128() & K::ZERO.last(l).to_u128()),
            ));
        }
    }
    check_addrs(t, naive, &addrs, ctx);
}

/// Random churn through `Fib::insert/remove/apply` (`steps` publishes of 1 to 64 changes,
/// a third of them removals, half of them touching existing prefixes), checked against the
/// naive table after every publish near the changed prefixes, and at the end at every prefix
/// boundary and `random` random addresses. Then everything is removed in one `apply` (all
/// lookups must miss) and re-added, and checked again.
pub(crate) fn churn<K: Key>(
    base: Vec<(K, u8, NextHop)>,
    random_prefix: impl Fn(&mut Rng) -> (K, u8),
    steps: usize,
    seed: u64,
    random: usize,
) {
    let mut rng = Rng::new(seed);
    let mut fib = Fib::from_routes(base.iter().copied());
    let mut naive: NaiveLpm<K> = base.iter().copied().collect();
    let mut known: Vec<(K, u8)> = base.iter().map(|p| (p.0, p.1)).collect();
    for step in 0..steps {
        let mut batch = Vec::new();
        let n = if rng.below(4) == 0 { 1 + rng.below(64) as usize } else { 1 };
        for _ in 0..n {
            let existing = !known.is_empty() && rng.below(2) == 0;
            let (a, l) = if existing {
                known[rng.below(known.len() as u64) as usize]
            } else {
                let (a, l) = random_prefix(&mut rng);
                (a.mask(l), l)
            };
            if rng.below(3) == 0 {
                batch.push(Change::Remove(a, l));
            } else {
                batch.push(Change::Insert(a, l, 1 + rng.below(300) as NextHop));
                known.push((a, l));
            }
        }
        for ch in &batch {
            match *ch {
                Change::Insert(a, l, nh) => {
                    naive.insert(a, l, nh);
                }
                Change::Remove(a, l) => {
                    naive.remove(a, l);
                }
            }
        }
        match (batch.len(), batch[0], rng.below(2)) {
            (1, Change::Insert(a, l, nh), 0) => {
                fib.insert(a, l, nh);
            }
            (1, Change::Remove(a, l), 0) => {
                fib.remove(a, l);
            }
            _ => fib.apply(batch.iter().copied()),
        }
        let t = fib.current();
        let touched: Vec<(K, u8)> = batch
            .iter()
            .map(|c| match *c {
                Change::Insert(a, l, _) | Change::Remove(a, l) => (a, l),
            })
            .collect();
        check_prefixes(&t, &naive, touched.iter().copied(), &format!("churn step {step}"));
    }
    let t = fib.current();
    check_against(&t, &naive, fib.rib(), random, seed);

    // Remove everything (in one apply), then re-add it one by one.
    let all: Vec<_> = fib.rib().iter().collect();
    fib.apply(all.iter().map(|&(a, l, _)| Change::Remove(a, l)));
    assert!(fib.rib().is_empty());
    let t = fib.current();
    let mut rng = Rng::new(seed ^ 1);
    for _ in 0..10_000 {
        let k = K::from_u128((u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64()));
        assert_eq!(t.lookup(k), NO_ROUTE);
    }
    for &(a, l, nh) in all.iter().take(3000) {
        fib.insert(a, l, nh);
    }
    fib.apply(all.iter().skip(3000).map(|&(a, l, nh)| Change::Insert(a, l, nh)));
    let t = fib.current();
    check_against(&t, &naive, fib.rib(), random, seed ^ 2);
    let st = fib.update_stats();
    assert!(st.patches > st.full_builds, "{st:?}");
}
