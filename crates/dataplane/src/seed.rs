//! The process's secret: what spreads traffic (the flow hash over replicas, lanes and
//! multipath next hops, the solicitation budget's lanes) and what the VR puts in headers
//! an outsider sees (IPv6 fragment Identification) are keyed with it, so nobody outside can
//! compute where a flow goes or what the next value is, and aim traffic at one lane or
//! guess an Identification (RFC 7739).
//!
//! Drawn once per process, at first use, from the random keys std's hash maps use (the
//! operating system's generator); the data plane's one system call outside its ports, made
//! before the first packet when a VR is built. Tests that pin values use the keyed functions
//! with a key of their own.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static KEY: OnceLock<[u64; 2]> = OnceLock::new();
/// Values drawn by [`fresh`] so far.
static DRAWN: AtomicU64 = AtomicU64::new(0);

/// The process's key.
#[inline]
pub fn key() -> [u64; 2] {
    *KEY.get_or_init(draw)
}

#[cold]
fn draw() -> [u64; 2] {
    let s = std::collections::hash_map::RandomState::new();
    [s.hash_one(0x5eed_0001_u64), s.hash_one(0x5eed_0002_u64)]
}

/// A fresh value no outsider can predict (a VR's starting Identification): the key mixed
/// with a count of the values drawn, so two draws differ.
pub fn fresh() -> u64 {
    let n = DRAWN.fetch_add(1, Ordering::Relaxed);
    let [a, b] = key();
    mix(mix(a, n), b)
}

/// One 64-bit mixing step (a multiply-xorshift, as in splitmix64's finaliser): a bijection
/// of `h ^ x`.
#[inline(always)]
pub(crate) fn mix(h: u64, x: u64) -> u64 {
    let mut z = (h ^ x).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A keyed permutation of the 32-bit values: each step (xor with a key half, multiply by an
/// odd constant, xorshift) is a bijection, so a counter run through it repeats no value
/// within 2^32 of its steps, yet consecutive outputs look unrelated without the key.
#[inline]
pub(crate) fn permute32(x: u32, k: u64) -> u32 {
    let mut z = x ^ k as u32;
    z = z.wrapping_mul(0x7feb_352d);
    z ^= z >> 15;
    z = (z ^ (k >> 32) as u32).wrapping_mul(0x846c_a68b);
    z ^= z >> 16;
    z ^ (k >> 16) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_drawn_once_and_fresh_values_differ() {
        assert_eq!(key(), key());
        assert_ne!(key(), [0, 0]);
        let a: Vec<u64> = (0..64).map(|_| fresh()).collect();
        let mut s = a.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), a.len(), "64 fresh values, all different");
    }

    #[test]
    fn permute32_is_a_bijection_that_depends_on_its_key() {
        // A bijection on a 2^20 window of inputs: no two collide.
        let k = 0x0123_4567_89ab_cdef;
        let mut seen: Vec<u32> = (0..1u32 << 20).map(|x| permute32(x, k)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1 << 20);
        // Another key, other values; consecutive inputs do not give consecutive outputs.
        let k2 = k ^ 1 << 40;
        assert!((0..100u32).filter(|&x| permute32(x, k) == permute32(x, k2)).count() < 2);
        let steps = (0..1000u32).filter(|&x| permute32(x + 1, k) == permute32(x, k) + 1).count();
        assert!(steps < 2, "{steps} consecutive outputs of 1000");
    }
}
