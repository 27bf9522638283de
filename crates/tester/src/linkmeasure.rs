//! What a link did to a probe flow: the arithmetic of `routeplex test impairments`, which
//! sends sequence-numbered, time-stamped probes through an impaired routeplex link and
//! through Linux netem and compares what each did with what was configured.
//!
//! The runner records, before anything is measured, a vector of arrivals sized for the run
//! (sequence number, one-way delay); [`measure`] reads it once the run is over. Nothing here
//! runs per probe while probes are in flight.

use serde::Serialize;

/// One probe that arrived: its sequence number and its one-way delay (receive time less the
/// send time stamped in it, both from one monotonic clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub seq: u64,
    pub delay_ns: u64,
}

/// What a link did to `sent` probes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Measured {
    pub sent: u64,
    /// Distinct probes that arrived (a duplicate counts once here).
    pub received: u64,
    /// Copies beyond the first.
    pub duplicates: u64,
    /// `duplicates / sent`.
    pub duplicate_share: f64,
    /// Probes that never arrived, and `lost / sent`.
    pub lost: u64,
    pub loss_share: f64,
    /// Runs of consecutive lost sequence numbers: how many, their mean and longest length.
    pub loss_bursts: u64,
    pub mean_burst: f64,
    pub max_burst: u64,
    /// Arrivals with a sequence number below one seen before them (RFC 4737's reordered
    /// packets), over the distinct arrivals.
    pub reordered_share: f64,
    /// One-way delay percentiles of the first copies, µs (0 when nothing arrived).
    pub delay_us: Percentiles,
    /// Distinct arrivals whose delay was under the threshold given to [`measure`] (the
    /// share a `reorder` impairment sent without its delay), over the distinct arrivals.
    pub fast_share: f64,
    /// Bits per second delivered: the distinct arrivals' frame bits over the time from the
    /// first send to the last arrival (0 with fewer than two arrivals).
    pub delivered_bps: f64,
}

/// Delay percentiles, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p1: f64,
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
}

impl Percentiles {
    /// From delays in ns, sorted here.
    pub fn of(delays_ns: &mut [u64]) -> Percentiles {
        if delays_ns.is_empty() {
            return Percentiles::default();
        }
        delays_ns.sort_unstable();
        let at = |q: f64| {
            let i = ((delays_ns.len() - 1) as f64 * q).round() as usize;
            delays_ns[i] as f64 / 1e3
        };
        let mean = delays_ns.iter().map(|&d| d as f64).sum::<f64>() / delays_ns.len() as f64;
        Percentiles {
            p1: at(0.01),
            p10: at(0.10),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            mean: mean / 1e3,
        }
    }
}

/// Reads `arrivals` (in arrival order) of probes `0..sent`, each `frame_bytes` on the
/// link, the last arriving `span_ns` after the first was sent. Arrivals with a sequence
/// number of `sent` or more are not this run's and are left out. `fast_ns`: the delay
/// under which an arrival counts in [`Measured::fast_share`].
pub fn measure(
    sent: u64,
    arrivals: &[Arrival],
    frame_bytes: u64,
    span_ns: u64,
    fast_ns: u64,
) -> Measured {
    let n = usize::try_from(sent).unwrap_or(usize::MAX);
    let mut copies = vec![0u32; n];
    let mut first = Vec::with_capacity(arrivals.len().min(n));
    let (mut duplicates, mut reordered, mut fast, mut highest) = (0u64, 0u64, 0u64, None);
    for a in arrivals.iter().filter(|a| a.seq < sent) {
        let c = &mut copies[a.seq as usize];
        *c = c.saturating_add(1);
        if *c > 1 {
            duplicates += 1;
            continue;
        }
        first.push(a.delay_ns);
        fast += u64::from(a.delay_ns < fast_ns);
        match highest {
            Some(h) if a.seq < h => reordered += 1,
            _ => highest = Some(a.seq),
        }
    }
    let received = first.len() as u64;
    let (mut bursts, mut max_burst, mut run) = (0u64, 0u64, 0u64);
    for &c in &copies {
        if c == 0 {
            run += 1;
        } else if run > 0 {
            bursts += 1;
            max_burst = max_burst.max(run);
            run = 0;
        }
    }
    if run > 0 {
        bursts += 1;
        max_burst = max_burst.max(run);
    }
    let lost = sent - received;
    let share = |x: u64, of: u64| if of == 0 { 0.0 } else { x as f64 / of as f64 };
    let delivered_bps = if received >= 2 && span_ns > 0 {
        (received * frame_bytes * 8) as f64 / (span_ns as f64 / 1e9)
    } else {
        0.0
    };
    Measured {
        sent,
        received,
        duplicates,
        duplicate_share: share(duplicates, sent),
        lost,
        loss_share: share(lost, sent),
        loss_bursts: bursts,
        mean_burst: share(lost, bursts),
        max_burst,
        reordered_share: share(reordered, received),
        delay_us: Percentiles::of(&mut first),
        fast_share: share(fast, received),
        delivered_bps,
    }
}

/// Gilbert-Elliott loss as netem's `gemodel p r 1-h 1-k` (shares 0..=1): the long-run loss
/// share and the mean length of a run of losses when every bad-state frame is lost and no
/// good-state one is (`1-h` = 1, `1-k` = 0; otherwise `None` for the burst).
pub fn gilbert_elliott(p: f64, r: f64, one_minus_h: f64, one_minus_k: f64) -> (f64, Option<f64>) {
    let bad = if p + r > 0.0 { p / (p + r) } else { 0.0 };
    let loss = bad * one_minus_h + (1.0 - bad) * one_minus_k;
    let burst = (one_minus_h == 1.0 && one_minus_k == 0.0 && r > 0.0).then(|| 1.0 / r);
    (loss, burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(seqs: &[u64]) -> Vec<Arrival> {
        seqs.iter().map(|&seq| Arrival { seq, delay_ns: 1000 * (seq + 1) }).collect()
    }

    #[test]
    fn losses_bursts_and_duplicates() {
        // 10 sent; 2, 3 and 7 lost (two bursts); 5 twice; 99 not this run's.
        let a = arr(&[0, 1, 4, 5, 5, 6, 8, 9, 99]);
        let m = measure(10, &a, 100, 1_000_000, 0);
        assert_eq!((m.received, m.lost, m.duplicates), (7, 3, 1));
        assert_eq!((m.loss_bursts, m.max_burst), (2, 2));
        assert_eq!(m.mean_burst, 1.5);
        assert_eq!((m.loss_share, m.duplicate_share), (0.3, 0.1));
        assert_eq!(m.reordered_share, 0.0);
        // 7 frames of 100 bytes in 1 ms.
        assert_eq!(m.delivered_bps, 5_600_000.0);
    }

    #[test]
    fn a_loss_run_at_the_end_counts() {
        let m = measure(5, &arr(&[0, 1]), 64, 10, 0);
        assert_eq!((m.lost, m.loss_bursts, m.max_burst, m.mean_burst), (3, 1, 3, 3.0));
        let m = measure(3, &[], 64, 10, 0);
        assert_eq!((m.received, m.lost, m.loss_bursts, m.delivered_bps), (0, 3, 1, 0.0));
        assert_eq!(m.delay_us, Percentiles::default());
    }

    #[test]
    fn reordered_and_fast_shares() {
        // 3 overtook 1 and 2: 1 and 2 arrive after a higher number.
        let mut a = arr(&[0, 3, 1, 2, 4]);
        for x in &mut a {
            x.delay_ns = if x.seq == 3 { 10 } else { 5000 };
        }
        let m = measure(5, &a, 64, 10, 100);
        assert_eq!(m.reordered_share, 2.0 / 5.0);
        assert_eq!(m.fast_share, 1.0 / 5.0);
    }

    #[test]
    fn percentiles_of_delays() {
        let mut d: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        d.reverse();
        let p = Percentiles::of(&mut d);
        assert_eq!((p.p1, p.p10, p.p50, p.p90, p.p99), (2.0, 11.0, 51.0, 90.0, 99.0));
        assert_eq!(p.mean, 50.5);
    }

    #[test]
    fn gilbert_elliott_long_run_share_and_burst() {
        let (loss, burst) = gilbert_elliott(0.01, 0.25, 1.0, 0.0);
        assert!((loss - 0.01 / 0.26).abs() < 1e-12);
        assert_eq!(burst, Some(4.0));
        let (loss, burst) = gilbert_elliott(0.1, 0.1, 0.5, 0.1);
        assert!((loss - 0.3).abs() < 1e-12);
        assert_eq!(burst, None);
    }
}
