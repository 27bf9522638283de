//! A token bucket (ICMP errors, solicitations, punts to the Linux mirror).

/// A token bucket (ICMP errors, solicitations): `rate` per second, `burst` deep, in nanotokens.
pub(crate) struct Bucket {
    pub rate: u64,
    pub cap: u64,
    pub tokens: u64,
    pub last: u64,
}

const TOKEN: u64 = 1_000_000_000;

/// Packets per second a VR may punt to its Linux mirror by default: a full BGP table in
/// 1448-byte TCP segments is a few tens of thousands of segments, so a session converges in
/// seconds, while a flood at the VR costs the worker no more than this many tap writes.
pub const DEFAULT_PUNT_PER_SEC: u32 = 20_000;
/// Burst of that token bucket.
pub const DEFAULT_PUNT_BURST: u32 = 2_000;

impl Bucket {
    pub fn new(rate: u32, burst: u32) -> Bucket {
        let cap = burst as u64 * TOKEN;
        Bucket { rate: rate as u64, cap, tokens: cap, last: 0 }
    }

    /// Gives back a token just taken (what it was for did not happen).
    pub fn refund(&mut self) {
        self.tokens = (self.tokens + TOKEN).min(self.cap);
    }

    /// Whether more than half the burst is there (at `now`).
    pub fn over_half(&mut self, now: u64) -> bool {
        self.refill(now);
        self.tokens > self.cap / 2
    }

    pub fn refill(&mut self, now: u64) {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        self.tokens = self.tokens.saturating_add(dt.saturating_mul(self.rate)).min(self.cap);
    }

    pub fn take(&mut self, now: u64) -> bool {
        self.refill(now);
        if self.rate > 0 && self.tokens >= TOKEN {
            self.tokens -= TOKEN;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_rate_and_burst() {
        let mut b = Bucket::new(10, 2);
        assert!(b.take(0) && b.take(0));
        assert!(!b.take(0));
        assert!(!b.take(50_000_000), "half a token after 50 ms");
        assert!(b.take(100_000_000));
        assert!(b.take(10 * TOKEN) && b.take(10 * TOKEN) && !b.take(10 * TOKEN), "capped at burst");
        assert!(!Bucket::new(0, 5).take(0), "rate 0 disables");
    }
}
