//! Seeded, deterministic route tables with a real-world shape, for tests, the demo and
//! benchmarks when the real prefix files (`scripts/fetch-prefixes`) are not cached.
//!
//! Shape (what matters to a trie: the length mix, and more-specifics nested inside shorter
//! prefixes):
//!
//! | family | lengths | nesting |
//! |---|---|---|
//! | IPv4 | ~60 % /24, ~36 % /16-/23, ~2 % /8-/15, ~2 % /25-/32 | ~1/3 placed inside an earlier, shorter prefix |
//! | IPv6 | mostly /32-/48 (/48 ~30 %, /32 ~15 %), ~5 % /29-/31, ~5 % /49-/64 | ~40 % nested |
//!
//! Addresses come from where real tables have them: IPv4 first octets 1-223 (no 127), IPv6
//! inside 2000::/3 clustered around the RIR blocks (2001::/16, 2400::/12, 2600::/12 ...).

use ipnet::{Ipv4Net, Ipv6Net};
use rustc_hash::FxHashSet;

use crate::{Key, NextHop};

/// A small seeded pseudo-random generator (SplitMix64): deterministic across platforms and
/// releases, which `rand`'s generators do not promise.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next 128 random bits.
    pub fn next_u128(&mut self) -> u128 {
        (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64())
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (bias below 2^-32 for our `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Picks an index with probability proportional to `weights[i]`.
    fn weighted(&mut self, weights: &[(u8, u32)]) -> u8 {
        let total: u64 = weights.iter().map(|w| u64::from(w.1)).sum();
        let mut x = self.below(total);
        for &(v, w) in weights {
            if x < u64::from(w) {
                return v;
            }
            x -= u64::from(w);
        }
        weights[weights.len() - 1].0
    }
}

/// IPv4 length weights, per mille.
const V4_LENGTHS: &[(u8, u32)] = &[
    (8, 1),
    (9, 1),
    (10, 1),
    (11, 2),
    (12, 3),
    (13, 4),
    (14, 4),
    (15, 4),
    (16, 25),
    (17, 15),
    (18, 25),
    (19, 40),
    (20, 50),
    (21, 65),
    (22, 85),
    (23, 60),
    (24, 595),
    (25, 3),
    (26, 3),
    (27, 3),
    (28, 3),
    (29, 3),
    (30, 2),
    (31, 1),
    (32, 2),
];

/// IPv6 length weights, roughly in the proportions of a 2024 full table.
const V6_LENGTHS: &[(u8, u32)] = &[
    (29, 36),
    (30, 6),
    (31, 8),
    (32, 150),
    (33, 12),
    (34, 14),
    (35, 15),
    (36, 28),
    (37, 18),
    (38, 22),
    (39, 26),
    (40, 50),
    (41, 26),
    (42, 30),
    (43, 37),
    (44, 80),
    (45, 30),
    (46, 42),
    (47, 78),
    (48, 300),
    (52, 5),
    (56, 20),
    (60, 5),
    (64, 12),
];

/// `n` distinct IPv4 prefixes with next hops in `1..=next_hops`, sorted, the same for the
/// same arguments. `n` beyond about a million starts to exhaust the unicast /24s.
///
/// # Panics
/// When `next_hops == 0`, or when `n` distinct prefixes cannot be found.
pub fn ipv4(n: usize, next_hops: u16, seed: u64) -> Vec<(Ipv4Net, NextHop)> {
    let random_addr = |rng: &mut Rng| {
        let first = loop {
            let o = 1 + rng.below(223) as u32;
            if o != 127 {
                break o;
            }
        };
        (first << 24) | (rng.next_u64() as u32 & 0x00FF_FFFF)
    };
    generate::<u32>(n, next_hops, seed, V4_LENGTHS, 0.33, random_addr)
        .into_iter()
        .map(|(a, l, nh)| (Ipv4Net::new(a.into(), l).expect("length <= 32"), nh))
        .collect()
}

/// `n` distinct IPv6 prefixes with next hops in `1..=next_hops`, sorted, the same for the
/// same arguments.
///
/// # Panics
/// When `next_hops == 0`.
pub fn ipv6(n: usize, next_hops: u16, seed: u64) -> Vec<(Ipv6Net, NextHop)> {
    let random_addr = |rng: &mut Rng| {
        let top16: u128 = match rng.below(10) {
            0..=2 => 0x2001,
            3 | 4 => 0x2400 + u128::from(rng.below(16)),
            5 | 6 => 0x2600 + u128::from(rng.below(16)),
            7 => 0x2800 + u128::from(rng.below(16)),
            8 => 0x2a00 + u128::from(rng.below(16)),
            _ => 0x2c0f,
        };
        (top16 << 112) | (rng.next_u128() >> 16)
    };
    generate::<u128>(n, next_hops, seed, V6_LENGTHS, 0.4, random_addr)
        .into_iter()
        .map(|(a, l, nh)| (Ipv6Net::new(a.into(), l).expect("length <= 128"), nh))
        .collect()
}

fn generate<K: Key>(
    n: usize,
    next_hops: u16,
    seed: u64,
    lengths: &[(u8, u32)],
    nest: f64,
    random_addr: impl Fn(&mut Rng) -> K,
) -> Vec<(K, u8, NextHop)> {
    assert!(next_hops > 0, "next_hops must be at least 1");
    let mut rng = Rng::new(seed);
    let mut seen: FxHashSet<(K, u8)> = FxHashSet::default();
    let mut out: Vec<(K, u8, NextHop)> = Vec::with_capacity(n);
    let nest_below = (nest * 1000.0) as u64;
    let mut attempts = 0usize;
    while out.len() < n {
        attempts += 1;
        assert!(attempts <= 100 * n + 1000, "cannot find {n} distinct prefixes");
        let len = rng.weighted(lengths);
        let mut addr = random_addr(&mut rng);
        if !out.is_empty() && rng.below(1000) < nest_below {
            // Inside an earlier, shorter prefix: keep its bits, randomise the rest.
            for _ in 0..4 {
                let (pa, pl, _) = out[rng.below(out.len() as u64) as usize];
                if pl < len {
                    let host = K::ZERO.last(pl).to_u128();
                    addr = K::from_u128(pa.to_u128() | (rng.next_u128() & host));
                    break;
                }
            }
        }
        let addr = addr.mask(len);
        if seen.insert((addr, len)) {
            out.push((addr, len, 1 + rng.below(u64::from(next_hops)) as NextHop));
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_distinct_sorted() {
        let a = ipv4(20_000, 50, 1);
        assert_eq!(a, ipv4(20_000, 50, 1));
        assert_ne!(a, ipv4(20_000, 50, 2));
        assert_eq!(a.len(), 20_000);
        assert!(a
            .windows(2)
            .all(|w| (w[0].0.addr(), w[0].0.prefix_len()) < (w[1].0.addr(), w[1].0.prefix_len())));
        assert!(a.iter().all(|p| (1..=50).contains(&p.1)));
        let b = ipv6(10_000, 7, 1);
        assert_eq!(b, ipv6(10_000, 7, 1));
        let distinct: FxHashSet<_> = b.iter().map(|p| p.0).collect();
        assert_eq!(distinct.len(), 10_000);
        assert!(b.iter().all(|p| (1..=7).contains(&p.1) && p.0.trunc() == p.0));
    }

    #[test]
    fn length_mix_and_nesting_look_real() {
        let a = ipv4(50_000, 10, 3);
        let share = |f: &dyn Fn(u8) -> bool| {
            a.iter().filter(|p| f(p.0.prefix_len())).count() as f64 / a.len() as f64
        };
        let s24 = share(&|l| l == 24);
        let s16_23 = share(&|l| (16..24).contains(&l));
        assert!((0.5..0.7).contains(&s24), "/24 share {s24}");
        assert!((0.25..0.45).contains(&s16_23), "/16-/23 share {s16_23}");
        assert!(share(&|l| l < 16) > 0.005);
        assert!(share(&|l| l > 24) > 0.005);
        let rib: crate::Rib<u32> =
            a.iter().map(|(n, nh)| (u32::from(n.addr()), n.prefix_len(), *nh)).collect();
        let nested = a
            .iter()
            .filter(|(n, _)| {
                let l = n.prefix_len();
                l > 0 && rib.covering(u32::from(n.addr()), l - 1).last().is_some()
            })
            .count();
        assert!(nested * 5 > a.len(), "only {nested} of {} nested", a.len());

        let b = ipv6(20_000, 10, 3);
        let s32_48 = b.iter().filter(|p| (32..=48).contains(&p.0.prefix_len())).count();
        assert!(s32_48 * 10 > b.len() * 8, "/32-/48: {s32_48}");
        assert!(b.iter().all(|p| p.0.addr().segments()[0] >> 13 == 1), "inside 2000::/3");
    }
}
