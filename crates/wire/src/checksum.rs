//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums here are *folded but not complemented* ones'-complement sums, so they can be combined;
//! a header's checksum field holds `!sum`, and a header verifies when the sum over all of it,
//! checksum field included, is `0xffff`. A sum is `0` only when every word summed was zero.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Folds a 64-bit ones'-complement accumulator to 16 bits without a data-dependent loop.
#[inline(always)]
fn fold(acc: u64) -> u16 {
    // Each step keeps the value congruent modulo 0xffff; four steps bring any u64 to <= 0xffff
    // (the worst case, 2^32, folds to 0x1_0000 and then to 1).
    let s = (acc & 0xffff_ffff) + (acc >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The folded ones'-complement sum of `bytes` as big-endian 16-bit words (not complemented);
/// an odd trailing byte is padded with a zero.
#[inline]
pub fn data(bytes: &[u8]) -> u16 {
    // 2^64 is 1 modulo 2^16 - 1, so summing 64-bit words with end-around carry gives the same
    // folded result as summing 16-bit words, at a quarter of the additions.
    let mut acc: u64 = 0;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let (s, carry) = acc.overflowing_add(w);
        // After a carry `s` is at most 2^64 - 2, so adding it back cannot overflow.
        acc = s + carry as u64;
    }
    // The tail starts at an even offset, so a 32-bit word of it weighs the same as any other
    // (every 2^(16k) is 1 modulo 0xffff): an IPv4 header is two 64-bit words and one 32-bit.
    let rest = chunks.remainder();
    let mut tail: u64 = 0;
    let mut i = 0;
    if rest.len() >= 4 {
        tail = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
        i = 4;
    }
    if rest.len() >= i + 2 {
        tail += u16::from_be_bytes([rest[i], rest[i + 1]]) as u64;
        i += 2;
    }
    if let Some(&odd) = rest.get(i) {
        tail += (odd as u64) << 8;
    }
    let (s, carry) = acc.overflowing_add(tail);
    fold(s + carry as u64)
}

/// The ones'-complement sum of already-folded sums.
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    // Summing u16s into a u64 cannot overflow for any slice that fits in memory.
    fold(sums.iter().map(|&s| s as u64).sum())
}

/// The sum of the IPv4 pseudo-header (RFC 768, RFC 9293) for an upper-layer packet of
/// `length` bytes.
#[inline]
pub fn pseudo_header_v4(src: &Ipv4Addr, dst: &Ipv4Addr, protocol: u8, length: u32) -> u16 {
    let acc = u32::from(*src) as u64
        + u32::from(*dst) as u64
        + protocol as u64
        + (length >> 16) as u64
        + (length & 0xffff) as u64;
    fold(acc)
}

/// The sum of the IPv6 pseudo-header (RFC 8200 §8.1) for an upper-layer packet of `length`
/// bytes.
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, length: u32) -> u16 {
    let s = u128::from(*src);
    let d = u128::from(*dst);
    let mut acc = next_header as u64 + length as u64;
    for half in [s >> 64, s & u64::MAX as u128, d >> 64, d & u64::MAX as u128] {
        let h = half as u64;
        acc += (h >> 32) + (h & 0xffff_ffff);
    }
    fold(acc)
}

/// The pseudo-header sum for either family; `None` when `src` and `dst` are of different
/// families, which no real packet has.
#[inline]
pub fn pseudo_header(src: &IpAddr, dst: &IpAddr, protocol: u8, length: u32) -> Option<u16> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(pseudo_header_v4(s, d, protocol, length)),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(pseudo_header_v6(s, d, protocol, length)),
        _ => None,
    }
}

/// The checksum field after a 16-bit word of the covered data changed from `old` to `new`
/// (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`).
#[inline]
pub fn update(checksum: u16, old: u16, new: u16) -> u16 {
    // Eqn. 3 rather than eqn. 2: it never turns a valid checksum into the 0xffff/0x0000 form a
    // full recomputation would not produce (RFC 1624 §3).
    !fold(!checksum as u64 + !old as u64 + new as u64)
}

/// [`update`] for a 32-bit word (an IPv4 address, say) that changed from `old` to `new`.
#[inline]
pub fn update32(checksum: u16, old: u32, new: u32) -> u16 {
    let acc = !checksum as u64
        + !(old >> 16) as u16 as u64
        + !(old as u16) as u64
        + (new >> 16) as u64
        + (new & 0xffff) as u64;
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;

    /// RFC 1071 as written: 16-bit words, a u32 accumulator, fold at the end.
    fn naive(bytes: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        let mut i = 0;
        while i + 1 < bytes.len() {
            acc += u16::from_be_bytes([bytes[i], bytes[i + 1]]) as u64;
            i += 2;
        }
        if i < bytes.len() {
            acc += (bytes[i] as u64) << 8;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn data_matches_naive_on_every_length() {
        let mut rng = Rng(1);
        for len in 0..=300 {
            for round in 0..20 {
                let mut buf = rng.bytes(len);
                // All-0xff buffers push every carry path to its limit.
                if round == 0 {
                    buf.fill(0xff);
                }
                if round == 1 {
                    buf.fill(0);
                }
                assert_eq!(data(&buf), naive(&buf), "len {len} round {round}");
                // Unaligned starts must not matter.
                if len > 1 {
                    assert_eq!(data(&buf[1..]), naive(&buf[1..]));
                }
            }
        }
    }

    #[test]
    fn data_rfc1071_example() {
        // RFC 1071 §3: the sum of these words is ddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(data(&bytes), 0xddf2);
        assert_eq!(data(&[]), 0);
        assert_eq!(data(&[0xab]), 0xab00);
    }

    #[test]
    fn fold_extremes() {
        assert_eq!(fold(0), 0);
        assert_eq!(fold(1 << 32), 1);
        assert_eq!(fold(u64::MAX), 0xffff);
        assert_eq!(fold(0xffff), 0xffff);
        assert_eq!(fold(0x1_0000), 1);
        let mut rng = Rng(7);
        for _ in 0..100_000 {
            let v = rng.next_u64();
            let f = fold(v);
            assert_eq!(f as u64 % 0xffff, v % 0xffff);
            assert!(f != 0);
        }
    }

    #[test]
    fn combine_is_concatenation() {
        let mut rng = Rng(2);
        for _ in 0..1000 {
            let n = 2 * rng.below(40) as usize;
            let a = rng.bytes(n);
            let b = rng.bytes_below(80);
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            assert_eq!(combine(&[data(&a), data(&b)]), naive(&whole));
        }
        assert_eq!(combine(&[]), 0);
        assert_eq!(combine(&[0xffff, 0xffff]), 0xffff);
        assert_eq!(combine(&[0xffff, 1]), 1);
    }

    #[test]
    fn pseudo_headers_match_their_byte_layout() {
        let mut rng = Rng(3);
        for _ in 0..1000 {
            let s4 = Ipv4Addr::from(rng.next_u64() as u32);
            let d4 = Ipv4Addr::from(rng.next_u64() as u32);
            let proto = rng.next_u64() as u8;
            let len = rng.next_u64() as u32;
            let mut b = Vec::new();
            b.extend_from_slice(&s4.octets());
            b.extend_from_slice(&d4.octets());
            b.extend_from_slice(&[0, proto]);
            b.extend_from_slice(&(len >> 16).to_be_bytes()[2..]);
            b.extend_from_slice(&(len as u16).to_be_bytes());
            assert_eq!(pseudo_header_v4(&s4, &d4, proto, len), naive(&b));

            let s6 = Ipv6Addr::from(((rng.next_u64() as u128) << 64) | rng.next_u64() as u128);
            let d6 = Ipv6Addr::from(((rng.next_u64() as u128) << 64) | rng.next_u64() as u128);
            let mut b = Vec::new();
            b.extend_from_slice(&s6.octets());
            b.extend_from_slice(&d6.octets());
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&[0, 0, 0, proto]);
            assert_eq!(pseudo_header_v6(&s6, &d6, proto, len), naive(&b));
            assert_eq!(
                pseudo_header(&s6.into(), &d6.into(), proto, len),
                Some(pseudo_header_v6(&s6, &d6, proto, len))
            );
            assert_eq!(pseudo_header(&s4.into(), &d6.into(), proto, len), None);
        }
    }

    /// Writes `!sum` of the words other than the checksum word into word 0.
    fn full(words: &mut [u16]) {
        words[0] = 0;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        words[0] = !naive(&bytes);
    }

    #[test]
    fn update_matches_full_recompute() {
        let mut rng = Rng(4);
        for _ in 0..200_000 {
            let n = 2 + rng.below(12) as usize;
            let mut words: Vec<u16> = (0..n).map(|_| rng.next_u64() as u16).collect();
            // Keep the data non-zero, as every real header is: all-zero data is the one case
            // where the full computation gives 0xffff and the incremental one 0x0000.
            words[1] |= 1;
            full(&mut words);
            let i = 1 + rng.below(n as u64 - 1) as usize;
            let old = words[i];
            let new = match rng.below(4) {
                0 => 0,
                1 => 0xffff,
                _ => rng.next_u64() as u16,
            };
            let ck = update(words[0], old, new);
            words[i] = new;
            if words[1..].iter().all(|&w| w == 0) {
                continue;
            }
            full(&mut words);
            assert_eq!(ck, words[0]);
        }
    }

    #[test]
    fn update32_matches_full_recompute() {
        let mut rng = Rng(6);
        for _ in 0..100_000 {
            let mut words: Vec<u16> = (0..6).map(|_| rng.next_u64() as u16).collect();
            words[5] |= 1;
            full(&mut words);
            let old = ((words[1] as u32) << 16) | words[2] as u32;
            let new = rng.next_u64() as u32;
            let ck = update32(words[0], old, new);
            words[1] = (new >> 16) as u16;
            words[2] = new as u16;
            full(&mut words);
            assert_eq!(ck, words[0]);
        }
    }
}
