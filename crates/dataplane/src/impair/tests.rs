//! Impairments on a simulated clock: frames numbered in their payload are offered to an
//! [`Impair`] in front of one end of a `mem` pair, released at each step of a fake clock, and
//! read back at the other end, so every test sees what a peer would see and when.

use super::*;
use ports::mem::{self, MemPort};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn cfg() -> ImpairConfig {
    ImpairConfig { seed: 7, ..ImpairConfig::default() }
}

/// A frame of `len` bytes carrying `seq` at bytes 14..18.
fn frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (seq as usize + i) as u8;
    }
    f
}

fn seq_of(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[14..18].try_into().unwrap())
}

/// A frame as received: its number, the clock when it came out, its bytes.
#[derive(Clone, Debug, PartialEq)]
struct Rx {
    seq: u32,
    at: u64,
    bytes: Vec<u8>,
}

/// An impairment in front of port `tx`, whose peer `rx` the test reads.
struct Link {
    imp: Impair,
    tx: MemPort,
    rx: MemPort,
    got: Vec<Rx>,
    batch: Batch,
    rx_batch: Batch,
    sel: Vec<u16>,
    next_seq: u32,
    sent_at: Vec<u64>,
}

impl Link {
    fn new(c: ImpairConfig) -> Link {
        Link::with_ring(c, 1 << 16)
    }

    fn with_ring(c: ImpairConfig, ring: usize) -> Link {
        let (tx, rx) = mem::pair("tx", "rx", ring);
        Link {
            imp: Impair::new(c).unwrap(),
            tx,
            rx,
            got: Vec::new(),
            batch: Batch::new(300),
            rx_batch: Batch::new(MAX_BURST),
            sel: Vec::new(),
            next_seq: 0,
            sent_at: Vec::new(),
        }
    }

    /// Offers `n` frames of `len` bytes at `now` in one batch, then releases what is due.
    fn send(&mut self, n: usize, len: usize, now: u64) {
        self.batch.clear();
        self.sel.clear();
        for k in 0..n {
            assert!(self.batch.push_copy(&frame(self.next_seq, len)));
            self.sel.push(k as u16);
            self.sent_at.push(now);
            self.next_seq += 1;
        }
        self.imp.offer(&mut self.batch, &self.sel, now);
        self.tick(now);
    }

    /// Releases what is due at `now` and reads it at the far end.
    fn tick(&mut self, now: u64) {
        self.imp.release(now, &mut self.tx);
        let b = &mut self.rx_batch;
        loop {
            b.clear();
            let n = self.rx.rx_burst(b);
            for p in b.packets() {
                let f = p.frame();
                self.got.push(Rx { seq: seq_of(f), at: now, bytes: f.to_vec() });
            }
            if n < MAX_BURST {
                break;
            }
        }
    }

    /// Steps the clock from `from` to `to` by `step`, releasing at each.
    fn run(&mut self, from: u64, to: u64, step: u64) {
        let mut t = from;
        while t <= to {
            self.tick(t);
            t += step;
        }
    }

    /// The delays the frames received saw (each one's arrival less its sending).
    fn delays(&self) -> Vec<u64> {
        self.got.iter().map(|r| r.at - self.sent_at[r.seq as usize]).collect()
    }
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    (m, v.sqrt())
}

#[test]
fn no_impairment_passes_frames_at_once_in_order() {
    for burst in [1, 2, 257] {
        let mut l = Link::new(cfg());
        l.send(burst, 64, 5 * US);
        let seqs: Vec<u32> = l.got.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (0..burst as u32).collect::<Vec<_>>(), "burst {burst}");
        assert!(l.got.iter().all(|r| r.at == 5 * US && r.bytes == frame(r.seq, 64)));
        let c = l.imp.counters();
        assert_eq!((c.offered, c.sent), (burst as u64, burst as u64));
        assert_eq!(c.drops, [0; ImpairDrop::COUNT]);
        assert_eq!(l.imp.held(), 0);
        assert_eq!(l.imp.next_due(), None);
    }
}

#[test]
fn fixed_delay_holds_every_frame_exactly_that_long() {
    for burst in [1, 2, 257] {
        let mut l = Link::new(ImpairConfig { delay_ns: 20 * MS, limit: 6000, ..cfg() });
        // Bursts every 100 us for 2 ms, the clock read every 1 us until all are out.
        for k in 0..20 {
            l.send(burst, 64, k * 100 * US);
            assert_eq!(l.got.len(), 0, "nothing before its delay");
        }
        assert_eq!(l.imp.held(), 20 * burst);
        assert_eq!(l.imp.next_due(), Some(20 * MS));
        l.run(2 * MS, 23 * MS, US);
        assert_eq!(l.got.len(), 20 * burst, "burst {burst}");
        assert!(l.delays().iter().all(|&d| d == 20 * MS), "burst {burst}");
        assert!(l.got.windows(2).all(|w| w[0].seq < w[1].seq), "in order");
        assert_eq!(l.imp.counters().sent, 20 * burst as u64);
        assert_eq!(l.imp.held(), 0);
    }
}

/// Each distribution's delays over many frames: mean and standard deviation within 3 % (of
/// the jitter) of the distribution's own, computed here by quadrature from netem's formulas.
#[test]
fn delay_distributions_have_their_mean_and_spread() {
    let (mu, sigma) = (10.0 * MS as f64, 2.0 * MS as f64);
    for d in Distribution::ALL {
        let mut imp = Impair::new(ImpairConfig {
            delay_ns: 10 * MS,
            jitter_ns: 2 * MS,
            distribution: d,
            ..cfg()
        })
        .unwrap();
        let xs: Vec<f64> = (0..200_000).map(|_| imp.delay() as f64).collect();
        let (m, sd) = mean_sd(&xs);
        let dev = |u: f64| match d {
            Distribution::Uniform => 2.0 * u - 1.0,
            Distribution::Normal => normal_quantile(u),
            Distribution::Pareto => pareto(u),
            Distribution::ParetoNormal => (normal_quantile(u) + 3.0 * pareto(u)) / 4.0,
        };
        let n = 2_000_000;
        let grid: Vec<f64> = (0..n).map(|i| dev((i as f64 + 0.5) / n as f64)).collect();
        let em = grid.iter().sum::<f64>() / n as f64;
        let esd = (grid.iter().map(|x| (x - em) * (x - em)).sum::<f64>() / n as f64).sqrt();
        let (want_m, want_sd) = (mu + sigma * em, sigma * esd);
        assert!((m - want_m).abs() < 0.03 * sigma, "{d:?}: mean {m} want {want_m}");
        assert!((sd - want_sd).abs() < 0.03 * sigma, "{d:?}: sd {sd} want {want_sd}");
        // Sanity of the shapes themselves: netem's uniform, the unit normal, a heavy right tail.
        match d {
            Distribution::Uniform => {
                assert!((esd - 1.0 / 3f64.sqrt()).abs() < 1e-3);
                assert!(xs.iter().all(|&x| x >= mu - sigma && x < mu + sigma));
            }
            Distribution::Normal => assert!(em.abs() < 1e-3 && (esd - 1.0).abs() < 1e-3),
            Distribution::Pareto | Distribution::ParetoNormal => {
                let max = xs.iter().cloned().fold(0.0, f64::max);
                let min = xs.iter().cloned().fold(f64::MAX, f64::min);
                assert!(max - mu > 2.0 * (mu - min), "{d:?}: skewed right");
            }
        }
    }
}

/// Where iproute2's tables are installed, our computed deviates match them: the mean and
/// spread of each table (entries over 8192) against ours over the same grid.
#[test]
fn computed_distributions_match_iproute2_tables() {
    let dirs = ["/usr/lib/x86_64-linux-gnu/tc", "/usr/lib/tc", "/usr/lib64/tc"];
    let Some(dir) = dirs.iter().find(|d| std::path::Path::new(d).join("normal.dist").exists())
    else {
        eprintln!("skipped: no iproute2 distribution tables in {dirs:?}");
        return;
    };
    type Deviate = fn(f64) -> f64;
    let cases: [(&str, Deviate); 3] = [
        ("normal", normal_quantile),
        ("pareto", pareto),
        ("paretonormal", |u| (normal_quantile(u) + 3.0 * pareto(u)) / 4.0),
    ];
    for (name, f) in cases {
        let text = std::fs::read_to_string(format!("{dir}/{name}.dist")).unwrap();
        let table: Vec<f64> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(|l| l.split_whitespace())
            .map(|w| w.parse::<f64>().unwrap() / 8192.0)
            .collect();
        let n = table.len();
        assert!(n >= 1024, "{name}: {n} entries");
        let ours: Vec<f64> = (0..n).map(|i| f((i as f64 + 0.5) / n as f64)).collect();
        let (tm, tsd) = mean_sd(&table);
        let (om, osd) = mean_sd(&ours);
        assert!((tm - om).abs() < 0.02, "{name}: mean {om} vs table {tm}");
        assert!((tsd - osd).abs() < 0.02, "{name}: sd {osd} vs table {tsd}");
    }
}

#[test]
fn random_loss_drops_its_share_and_counts_it() {
    let mut l = Link::new(ImpairConfig {
        loss: Loss::Random(Chance::from_percent(10.0).unwrap()),
        ..cfg()
    });
    for k in 0..1000 {
        l.send(100, 64, k * US);
    }
    let c = *l.imp.counters();
    let lost = c.dropped(ImpairDrop::Loss);
    assert!((9_500..=10_500).contains(&lost), "lost {lost} of 100000");
    assert_eq!(c.sent + lost, 100_000);
    assert_eq!(l.got.len() as u64, c.sent);
}

/// Gilbert-Elliott (simple Gilbert: every frame in the bad state lost, none in the good):
/// the loss share is p / (p + r) and a burst of losses lasts 1 / r frames on average.
#[test]
fn gilbert_elliott_losses_come_in_bursts_of_the_model() {
    let pct = |x| Chance::from_percent(x).unwrap();
    let (p, r) = (0.01, 0.25);
    let loss =
        Loss::Gilbert { p: pct(1.0), r: pct(25.0), bad: Chance::ALWAYS, good: Chance::NEVER };
    let mut l = Link::new(ImpairConfig { loss, ..cfg() });
    let n = 400_000u32;
    for k in 0..(n / 200) as u64 {
        l.send(200, 64, k * US);
    }
    let mut present = vec![false; n as usize];
    for r in &l.got {
        present[r.seq as usize] = true;
    }
    let mut bursts = Vec::new();
    let mut run = 0;
    for &here in &present {
        if !here {
            run += 1;
        } else if run > 0 {
            bursts.push(run as f64);
            run = 0;
        }
    }
    let lost = present.iter().filter(|&&x| !x).count() as f64 / n as f64;
    let want = p / (p + r);
    assert!((lost - want).abs() < 0.05 * want, "loss share {lost} want {want}");
    let (mean, _) = mean_sd(&bursts);
    assert!((mean - 1.0 / r).abs() < 0.05 / r, "mean burst {mean} want {}", 1.0 / r);
    assert_eq!(
        l.imp.counters().dropped(ImpairDrop::Loss),
        present.iter().filter(|&&x| !x).count() as u64
    );
}

#[test]
fn rate_holds_the_link_to_its_bits_per_second_and_tail_drops() {
    // 10 Mbit/s, 1000-byte frames offered at 20 Mbit/s for 1 s, a queue of 100 frames.
    let rate = 10_000_000;
    let mut l = Link::new(ImpairConfig { rate_bps: rate, limit: 100, ..cfg() });
    for k in 0..2500u64 {
        l.send(1, 1000, k * 400 * US);
        l.run(k * 400 * US + 10 * US, k * 400 * US + 390 * US, 10 * US);
    }
    l.run(1000 * MS, 1200 * MS, 10 * US);
    let c = *l.imp.counters();
    let got = l.got.len();
    // Achieved: bits between the first and last arrival over the time between them.
    let span = (l.got[got - 1].at - l.got[0].at) as f64 / 1e9;
    let achieved = (got - 1) as f64 * 8000.0 / span;
    assert!((achieved - rate as f64).abs() < 0.01 * rate as f64, "achieved {achieved}");
    assert!(c.dropped(ImpairDrop::Rate) > 1000, "{c:?}");
    assert_eq!(c.dropped(ImpairDrop::Limit), 0);
    assert_eq!(c.sent + c.dropped(ImpairDrop::Rate), 2500);
    assert!(l.got.windows(2).all(|w| w[0].seq < w[1].seq), "a rate keeps order");
}

#[test]
fn limit_drops_what_does_not_fit_and_counts_it() {
    for burst in [1, 2, 257] {
        let mut l = Link::new(ImpairConfig { delay_ns: 10 * MS, limit: 10, ..cfg() });
        l.send(burst, 64, 0);
        l.send(burst, 64, US);
        let c = *l.imp.counters();
        let kept = (2 * burst).min(10);
        assert_eq!(l.imp.held(), kept);
        assert_eq!(c.dropped(ImpairDrop::Limit), (2 * burst - kept) as u64);
        assert_eq!(c.dropped(ImpairDrop::Rate), 0);
        l.run(0, 11 * MS, 100 * US);
        assert_eq!(l.got.len(), kept);
    }
}

#[test]
fn a_full_port_ring_drops_and_counts_at_release() {
    let mut l = Link::with_ring(ImpairConfig { delay_ns: MS, ..cfg() }, 4);
    l.send(10, 64, 0);
    l.imp.release(MS, &mut l.tx);
    let c = *l.imp.counters();
    assert_eq!((c.sent, c.dropped(ImpairDrop::TxFull)), (4, 6));
    assert_eq!(l.imp.held(), 0);
}

#[test]
fn reorder_sends_its_share_at_once_ahead_of_earlier_frames() {
    let mut l = Link::new(ImpairConfig {
        delay_ns: 10 * MS,
        reorder: Chance::from_percent(25.0).unwrap(),
        ..cfg()
    });
    for k in 0..20_000u64 {
        l.send(1, 64, k * 10 * US);
    }
    l.run(200 * MS, 211 * MS, 10 * US);
    assert_eq!(l.got.len(), 20_000);
    let at_once = l.delays().iter().filter(|&&d| d == 0).count() as f64 / 20_000.0;
    assert!((at_once - 0.25).abs() < 0.01, "share {at_once}");
    assert!(l.delays().iter().all(|&d| d == 0 || d == 10 * MS));
    assert_eq!(l.imp.counters().reordered, l.delays().iter().filter(|&&d| d == 0).count() as u64);
    // Out of order: some frame arrives after a later-numbered one.
    let late = l.got.windows(2).filter(|w| w[1].seq < w[0].seq).count();
    assert!(late > 1000, "{late} inversions");
}

#[test]
fn duplicate_sends_a_second_identical_copy_for_its_share() {
    for burst in [1, 2, 257] {
        let mut l =
            Link::new(ImpairConfig { duplicate: Chance::from_percent(10.0).unwrap(), ..cfg() });
        let rounds = 40_000 / burst;
        for k in 0..rounds as u64 {
            l.send(burst, 64, k * US);
        }
        let n = (rounds * burst) as f64;
        let c = *l.imp.counters();
        assert_eq!(l.got.len() as u64, c.sent);
        assert_eq!(c.sent, rounds as u64 * burst as u64 + c.duplicated);
        let share = c.duplicated as f64 / n;
        assert!((share - 0.10).abs() < 0.01, "burst {burst}: share {share}");
        assert!(l.got.iter().all(|r| r.bytes == frame(r.seq, 64)), "copies are identical");
        let mut seen = vec![0u8; rounds * burst];
        l.got.iter().for_each(|r| seen[r.seq as usize] += 1);
        assert_eq!(seen.iter().filter(|&&k| k == 2).count() as u64, c.duplicated);
    }
}

#[test]
fn corrupt_flips_exactly_one_bit() {
    let mut l = Link::new(ImpairConfig { corrupt: Chance::ALWAYS, ..cfg() });
    for k in 0..100 {
        l.send(100, 60 + k % 40, k as u64 * US);
    }
    assert_eq!(l.got.len(), 10_000);
    for (i, r) in l.got.iter().enumerate() {
        let k = i / 100;
        // The flipped bit may be in the number itself: compare with every frame sent.
        let want = frame(i as u32, 60 + k % 40);
        let flips: u32 = want.iter().zip(&r.bytes).map(|(a, b)| (a ^ b).count_ones()).sum();
        assert_eq!(flips, 1, "frame {i}");
    }
    assert_eq!(l.imp.counters().corrupted, 10_000);
    // A share: about that many frames changed.
    let mut l = Link::new(ImpairConfig { corrupt: Chance::from_percent(5.0).unwrap(), ..cfg() });
    for k in 0..200 {
        l.send(100, 64, k * US);
    }
    let changed = l.got.iter().filter(|r| r.bytes != frame(r.seq, 64) || r.seq >= 20_000).count();
    assert!((900..=1100).contains(&changed), "{changed} of 20000");
}

/// Everything at once, twice with one seed and once with another: the same seed gives the
/// same frames at the same times; another seed does not.
#[test]
fn one_seed_gives_one_pattern() {
    let run = |seed| {
        let pct = |x| Chance::from_percent(x).unwrap();
        let mut l = Link::new(ImpairConfig {
            delay_ns: 5 * MS,
            jitter_ns: 2 * MS,
            distribution: Distribution::Normal,
            loss: Loss::Gilbert { p: pct(2.0), r: pct(30.0), bad: pct(80.0), good: pct(0.5) },
            duplicate: pct(3.0),
            reorder: pct(5.0),
            corrupt: pct(2.0),
            rate_bps: 200_000_000,
            seed,
            ..ImpairConfig::default()
        });
        for k in 0..2000u64 {
            l.send(3, 200, k * 50 * US);
            l.run(k * 50 * US + 10 * US, k * 50 * US + 40 * US, 10 * US);
        }
        l.run(100 * MS, 130 * MS, 10 * US);
        (l.got, *l.imp.counters())
    };
    let (a, ca) = run(1);
    let (b, cb) = run(1);
    let (c, _) = run(2);
    assert!(a.len() > 5000);
    assert_eq!(a, b);
    assert_eq!(ca, cb);
    assert_ne!(a, c);
}

#[test]
fn a_live_change_keeps_waiting_frames_and_their_times() {
    let mut l = Link::new(ImpairConfig { delay_ns: 50 * MS, ..cfg() });
    l.send(100, 64, 0);
    l.run(0, 10 * MS, 100 * US);
    l.imp.reconfigure(ImpairConfig { delay_ns: MS, limit: 300, ..cfg() }).unwrap();
    assert_eq!(l.imp.held(), 100);
    l.send(100, 64, 10 * MS);
    l.run(10 * MS, 60 * MS, 100 * US);
    let d = l.delays();
    assert_eq!(l.got.len(), 200);
    // The new frames first (1 ms), then the old ones at their original 50 ms.
    assert!(l.got[..100].iter().all(|r| r.seq >= 100 && r.at == 11 * MS));
    assert!(l.got[100..].iter().all(|r| r.seq < 100 && r.at == 50 * MS));
    assert!(d[100..].iter().all(|&x| x == 50 * MS));
    // Removing every impairment: what waits still leaves at its time.
    let mut l = Link::new(ImpairConfig { delay_ns: 20 * MS, ..cfg() });
    l.send(5, 64, 0);
    l.imp.reconfigure(cfg()).unwrap();
    l.send(5, 64, MS);
    assert_eq!(l.got.iter().map(|r| r.seq).collect::<Vec<_>>(), [5, 6, 7, 8, 9]);
    l.run(MS, 20 * MS, 100 * US);
    assert_eq!(l.got.len(), 10);
    assert!(l.got[5..].iter().all(|r| r.at == 20 * MS));
}

/// Frames due more than a turn of the wheel ahead wait their turn, and `next_due` finds the
/// earliest wherever it sits.
#[test]
fn long_delays_wait_whole_turns_of_the_wheel() {
    let mut l = Link::new(ImpairConfig { delay_ns: 1_000 * MS, ..cfg() });
    l.send(3, 64, 0);
    l.imp.reconfigure(ImpairConfig { delay_ns: 30 * MS, ..cfg() }).unwrap();
    l.send(1, 64, 100 * MS);
    assert_eq!(l.imp.next_due(), Some(130 * MS));
    l.run(100 * MS, 999 * MS, 500 * US);
    assert_eq!(l.got.iter().map(|r| r.seq).collect::<Vec<_>>(), [3]);
    assert_eq!(l.imp.next_due(), Some(1_000 * MS));
    l.run(1_000 * MS, 1_001 * MS, 100 * US);
    assert_eq!(l.got.len(), 4);
    assert!(l.got[1..].iter().all(|r| r.at == 1_000 * MS));
}

#[test]
fn jitter_keeps_frames_in_time_order() {
    let mut l = Link::new(ImpairConfig {
        delay_ns: 2 * MS,
        jitter_ns: MS,
        distribution: Distribution::Uniform,
        limit: 4000,
        ..cfg()
    });
    for k in 0..5000u64 {
        l.send(1, 64, k * US);
        l.tick(k * US);
    }
    l.run(5 * MS, 10 * MS, US);
    assert_eq!(l.got.len(), 5000);
    let due: Vec<u64> = l.got.iter().map(|r| r.at).collect();
    assert!(due.windows(2).all(|w| w[0] <= w[1]));
    // Released at each microsecond step: each frame within a step of its drawn time, so
    // jitter larger than the gap between frames reorders them, as netem does.
    assert!(l.got.windows(2).any(|w| w[1].seq < w[0].seq));
    assert!(l.delays().iter().all(|&d| (MS..=3 * MS).contains(&d)));
}

#[test]
fn settings_out_of_range_are_refused() {
    let bad = [
        ImpairConfig { limit: 0, ..cfg() },
        ImpairConfig { limit: MAX_LIMIT + 1, ..cfg() },
        ImpairConfig { rate_bps: 10, ..cfg() },
        ImpairConfig { delay_ns: MAX_DELAY_NS + 1, ..cfg() },
        ImpairConfig { reorder: Chance::from_percent(5.0).unwrap(), ..cfg() },
        ImpairConfig { duplicate: Chance(Chance::ALWAYS.0 + 1), ..cfg() },
    ];
    for c in bad {
        assert!(Impair::new(c).is_err(), "{c:?}");
    }
    assert!(Chance::from_percent(100.5).is_none() && Chance::from_percent(f64::NAN).is_none());
    assert_eq!(Chance::from_percent(100.0), Some(Chance::ALWAYS));
}
