//! Whole-table oracle tests: the compiled structure against [`NaiveLpm`] at every prefix
//! boundary and a million random addresses, on large synthetic tables and on the real
//! Internet prefix set when `scripts/fetch-prefixes` has cached it, fresh and after churn.

use std::path::PathBuf;

use crate::naive::NaiveLpm;
use crate::prefix_file::{self, Family};
use crate::testutil::{check_against, churn};
use crate::{key4, key6, Fib, Key, NextHop, Rib};

fn check_table<K: Key>(routes: &[(K, u8, NextHop)], seed: u64) {
    let fib = Fib::from_routes(routes.iter().copied());
    let naive: NaiveLpm<K> = routes.iter().copied().collect();
    let rib: &Rib<K> = fib.rib();
    assert_eq!(rib.len(), naive.len());
    check_against(&fib.current(), &naive, rib, 1_000_000, seed);
}

#[test]
fn synthetic_ipv4_100k_matches_naive() {
    let routes: Vec<_> = crate::synthetic::ipv4(100_000, 256, 100)
        .into_iter()
        .map(|(n, nh)| (key4(n).0, key4(n).1, nh))
        .collect();
    check_table(&routes, 1);
}

#[test]
fn synthetic_ipv6_30k_matches_naive() {
    let routes: Vec<_> = crate::synthetic::ipv6(30_000, 256, 100)
        .into_iter()
        .map(|(n, nh)| (key6(n).0, key6(n).1, nh))
        .collect();
    check_table(&routes, 2);
}

/// The cached real file, or a line saying why the test is skipped.
fn real(family: Family) -> Option<PathBuf> {
    let p = prefix_file::cached(family);
    if p.is_none() {
        println!(
            "skipped: real {family} table not cached in {}; run scripts/fetch-prefixes",
            prefix_file::cache_dir().display()
        );
    }
    p
}

/// File next hops as the benchmark maps them (the script writes 1..=256).
fn fit(nh: u32) -> NextHop {
    NextHop::try_from(nh).ok().filter(|&n| n != 0).unwrap_or(1)
}

#[test]
fn real_ipv4_table_matches_naive_fresh_and_after_churn() {
    let Some(path) = real(Family::Ipv4) else { return };
    let list = prefix_file::load(&path).unwrap();
    assert!(list.v4.len() > 400_000, "{} has only {} prefixes", path.display(), list.v4.len());
    let routes: Vec<_> = list.v4.iter().map(|&(n, nh)| (key4(n).0, key4(n).1, fit(nh))).collect();
    check_table(&routes, 3);
    churn(
        routes,
        |rng| {
            let l = match rng.below(10) {
                0 => [0, 1, 6, 8, 12, 16, 17, 18][rng.below(8) as usize],
                1 => 32,
                2 => 25 + rng.below(7) as u8,
                _ => 19 + rng.below(6) as u8,
            };
            (rng.next_u64() as u32, l)
        },
        1500,
        31,
        1_000_000,
    );
}

#[test]
fn real_ipv6_table_matches_naive_fresh_and_after_churn() {
    let Some(path) = real(Family::Ipv6) else { return };
    let list = prefix_file::load(&path).unwrap();
    assert!(list.v6.len() > 100_000, "{} has only {} prefixes", path.display(), list.v6.len());
    let routes: Vec<_> = list.v6.iter().map(|&(n, nh)| (key6(n).0, key6(n).1, fit(nh))).collect();
    check_table(&routes, 4);
    churn(
        routes,
        |rng| {
            let l = match rng.below(10) {
                0 => [0, 3, 8, 12, 16, 20, 23, 24][rng.below(8) as usize],
                1 => 128,
                2 => 49 + rng.below(80) as u8,
                _ => 25 + rng.below(24) as u8,
            };
            let a = (0x2u128 << 124) | (rng.next_u128() >> 4);
            (a, l)
        },
        1000,
        32,
        1_000_000,
    );
}
