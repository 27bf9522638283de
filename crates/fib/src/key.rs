//! Address keys: IPv4 as `u32`, IPv6 as `u128`, both in host byte order, so that the most
//! significant bit is the first bit of the address and "prefix of length `len`" means "the top
//! `len` bits".
//!
//! Everything the trie needs from an address is here, so the trie itself is written once.

use core::fmt::Debug;
use core::hash::Hash;

/// An address family's key type. Implemented for `u32` (IPv4) and `u128` (IPv6).
///
/// The trait is sealed in spirit: the trie relies on `BITS` being 32 or 128 and on the helpers
/// behaving as documented for every length in `0..=BITS`.
pub trait Key: Copy + Eq + Ord + Hash + Debug + Send + Sync + 'static {
    /// Address width in bits.
    const BITS: u8;
    /// The all-zero address.
    const ZERO: Self;

    /// The address with everything after the first `len` bits cleared. `len <= BITS`.
    fn mask(self, len: u8) -> Self;

    /// The last address of the prefix `self/len`: host bits set. `len <= BITS`.
    fn last(self, len: u8) -> Self;

    /// The first `n` bits as an index. `1 <= n <= 32`.
    fn top(self, n: u8) -> usize;

    /// The address whose first `n` bits are `index` and the rest zero; inverse of [`top`].
    ///
    /// [`top`]: Key::top
    fn from_top(index: usize, n: u8) -> Self;

    /// The 6 bits starting at bit `offset` (0 = most significant) as `0..64`. Past the end the
    /// key reads as zeros: at IPv4 offset 30 the two real bits become the top of the 6-bit
    /// index (`0bxx0000`). A partial last stride is thus an ordinary 64-child node in which a
    /// prefix covers a run of 16 (or 4) children, and leaf runs compress the padding away.
    /// `offset < BITS`.
    fn chunk(self, offset: u8) -> u32;

    /// The first 64 bits (IPv4: the address followed by 32 zero bits). `chunk(off)` equals
    /// `(hi64() << off) >> 58` for `off <= 58`, which is all a lookup needs until it goes
    /// past /58.
    fn hi64(self) -> u64;

    /// `self + 1`, or `None` at the last address.
    fn checked_inc(self) -> Option<Self>;
    /// `self - 1`, or `None` at address zero.
    fn checked_dec(self) -> Option<Self>;

    /// Widens to `u128` (IPv4 in the low 32 bits).
    fn to_u128(self) -> u128;
    /// Narrows from `u128`, keeping the low `BITS` bits.
    fn from_u128(v: u128) -> Self;
}

impl Key for u32 {
    const BITS: u8 = 32;
    const ZERO: Self = 0;

    #[inline(always)]
    fn mask(self, len: u8) -> Self {
        debug_assert!(len <= 32);
        // checked_shl: a shift by 32 is what /0 needs and what plain `<<` refuses.
        self & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }

    #[inline(always)]
    fn last(self, len: u8) -> Self {
        debug_assert!(len <= 32);
        self | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0)
    }

    #[inline(always)]
    fn top(self, n: u8) -> usize {
        debug_assert!((1..=32).contains(&n));
        (self >> (32 - u32::from(n))) as usize
    }

    #[inline(always)]
    fn from_top(index: usize, n: u8) -> Self {
        debug_assert!((1..=32).contains(&n));
        (index as u32) << (32 - u32::from(n))
    }

    #[inline(always)]
    fn chunk(self, offset: u8) -> u32 {
        debug_assert!(offset < 32);
        (self << offset) >> 26
    }

    #[inline(always)]
    fn hi64(self) -> u64 {
        u64::from(self) << 32
    }

    fn checked_inc(self) -> Option<Self> {
        self.checked_add(1)
    }

    fn checked_dec(self) -> Option<Self> {
        self.checked_sub(1)
    }

    fn to_u128(self) -> u128 {
        u128::from(self)
    }

    fn from_u128(v: u128) -> Self {
        v as u32
    }
}

impl Key for u128 {
    const BITS: u8 = 128;
    const ZERO: Self = 0;

    #[inline(always)]
    fn mask(self, len: u8) -> Self {
        debug_assert!(len <= 128);
        self & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
    }

    #[inline(always)]
    fn last(self, len: u8) -> Self {
        debug_assert!(len <= 128);
        self | u128::MAX.checked_shr(u32::from(len)).unwrap_or(0)
    }

    #[inline(always)]
    fn top(self, n: u8) -> usize {
        debug_assert!((1..=32).contains(&n));
        // Only the high half can hold the first 32 bits: a 64-bit shift, not a 128-bit one.
        (((self >> 64) as u64) >> (64 - u32::from(n))) as usize
    }

    #[inline(always)]
    fn from_top(index: usize, n: u8) -> Self {
        debug_assert!((1..=32).contains(&n));
        ((index as u64) << (64 - u32::from(n))) as u128 * (1u128 << 64)
    }

    #[inline(always)]
    fn chunk(self, offset: u8) -> u32 {
        debug_assert!(offset < 128);
        // A general 128-bit variable shift is a shld/shl/cmov dance; nearly every lookup stays
        // within the first 64 bits (prefixes up to /58), where one 64-bit shift does it.
        let hi = (self >> 64) as u64;
        if offset <= 58 {
            ((hi << offset) >> 58) as u32
        } else {
            ((self << offset) >> 122) as u32
        }
    }

    #[inline(always)]
    fn hi64(self) -> u64 {
        (self >> 64) as u64
    }

    fn checked_inc(self) -> Option<Self> {
        self.checked_add(1)
    }

    fn checked_dec(self) -> Option<Self> {
        self.checked_sub(1)
    }

    fn to_u128(self) -> u128 {
        self
    }

    fn from_u128(v: u128) -> Self {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_and_last_cover_every_length() {
        let a: u32 = 0xC0A8_01FF;
        assert_eq!(a.mask(0), 0);
        assert_eq!(a.mask(24), 0xC0A8_0100);
        assert_eq!(a.mask(32), a);
        assert_eq!(a.last(0), u32::MAX);
        assert_eq!(0xC0A8_0100u32.last(24), 0xC0A8_01FF);
        assert_eq!(a.last(32), a);
        let b: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
        assert_eq!(b.mask(0), 0);
        assert_eq!(b.mask(32), 0x2001_0db8 << 96);
        assert_eq!(b.mask(128), b);
        assert_eq!(b.mask(32).last(32), (0x2001_0db8 << 96) | (u128::MAX >> 32));
        for len in 0..=128u8 {
            assert_eq!(u128::MAX.mask(len).count_ones(), u32::from(len));
            assert_eq!(0u128.last(len).count_ones(), 128 - u32::from(len));
        }
        for len in 0..=32u8 {
            assert_eq!(u32::MAX.mask(len).count_ones(), u32::from(len));
        }
    }

    #[test]
    fn top_and_from_top_round_trip() {
        assert_eq!(0xC0A8_0101u32.top(8), 0xC0);
        assert_eq!(0xC0A8_0101u32.top(18), 0xC0A8 << 2);
        assert_eq!(<u32 as Key>::from_top(0xC0, 8), 0xC000_0000);
        let b: u128 = 0x2001_0db8 << 96;
        assert_eq!(b.top(16), 0x2001);
        assert_eq!(b.top(32), 0x2001_0db8);
        assert_eq!(<u128 as Key>::from_top(0x2001, 16), 0x2001 << 112);
        assert_eq!(<u128 as Key>::from_top(0x2001_0db8, 32), b);
    }

    #[test]
    fn chunk_pads_past_the_end() {
        // bits 30..32 of 0b...11 become 0b110000.
        assert_eq!(3u32.chunk(30), 0b11_0000);
        assert_eq!(0xFC00_0000u32.chunk(0), 63);
        assert_eq!(0x0000_00FFu32.chunk(26), 63);
        let x: u128 = 0xFFFF;
        assert_eq!(x.chunk(122), 63);
        assert_eq!(x.chunk(126), 0b11_0000);
        // Both sides of the 64-bit fast path agree with the plain 128-bit shift.
        let y: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
        for off in 0..128u8 {
            assert_eq!(y.chunk(off), ((y << off) >> 122) as u32, "offset {off}");
        }
        for off in 0..=58u8 {
            assert_eq!(y.chunk(off), ((y.hi64() << off) >> 58) as u32, "offset {off}");
        }
        for off in 0..32u8 {
            let z = 0x89ab_cdefu32;
            assert_eq!(z.chunk(off), ((z.hi64() << off) >> 58) as u32, "offset {off}");
        }
    }
}
