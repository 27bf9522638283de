//! Sample statistics for repeated trials: mean, standard deviation and the Student t
//! confidence interval of the mean.

use serde::Serialize;

/// The confidence level every report uses: 99 %, as in the paper's router tester.
pub const CONFIDENCE: f64 = 0.99;

/// Mean, spread and 99 % confidence interval of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Sample size.
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator); 0 for one value.
    pub sd: f64,
    /// Half-width of the 99 % confidence interval of the mean (Student t, n − 1 degrees of
    /// freedom); `None` for fewer than two values.
    pub ci99: Option<f64>,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    /// Summarises `xs` (empty: all zero).
    pub fn of(xs: &[f64]) -> Summary {
        let n = xs.len();
        if n == 0 {
            return Summary::default();
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Summary {
            n,
            mean,
            sd,
            ci99: ci_half_width(xs, CONFIDENCE),
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// Half-width of the two-sided `confidence` interval of the mean of `xs`:
/// `t(1 − (1 − confidence)/2, n − 1) · s / √n`. `None` for fewer than two values.
pub fn ci_half_width(xs: &[f64], confidence: f64) -> Option<f64> {
    let n = xs.len();
    if n < 2 {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let s = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let t = t_quantile(1.0 - (1.0 - confidence) / 2.0, (n - 1) as f64);
    Some(t * s / (n as f64).sqrt())
}

/// The `p` quantile of Student's t distribution with `df` degrees of freedom (`0 < p < 1`,
/// `df > 0`), by bisection on the distribution function: accurate to about 1e-10.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0 && df > 0.0, "t_quantile({p}, {df})");
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while t_cdf(hi, df) < p {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-12 * hi.max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// Student's t distribution function.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    let tail = 0.5 * inc_beta(x, df / 2.0, 0.5);
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The regularized incomplete beta function I_x(a, b) (continued fraction, Lentz's method).
fn inc_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(x, a, b) / a
    } else {
        1.0 - front * beta_cf(1.0 - x, b, a) / b
    }
}

fn beta_cf(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..500 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9: about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_published_tables() {
        // Two-sided 99 % (p = 0.995) and 95 % (p = 0.975), from standard t tables.
        for (df, t995, t975) in [
            (1.0, 63.657, 12.706),
            (2.0, 9.925, 4.303),
            (3.0, 5.841, 3.182),
            (4.0, 4.604, 2.776),
            (5.0, 4.032, 2.571),
            (9.0, 3.250, 2.262),
            (19.0, 2.861, 2.093),
            (29.0, 2.756, 2.045),
            (120.0, 2.617, 1.980),
        ] {
            assert!(
                (t_quantile(0.995, df) - t995).abs() < 1e-3,
                "df {df}: {}",
                t_quantile(0.995, df)
            );
            assert!(
                (t_quantile(0.975, df) - t975).abs() < 1e-3,
                "df {df}: {}",
                t_quantile(0.975, df)
            );
        }
        // Large df tends to the normal quantile 2.5758.
        assert!((t_quantile(0.995, 1e7) - 2.575_829).abs() < 1e-4);
        assert!((t_quantile(0.005, 9.0) + 3.249_836).abs() < 1e-5);
        assert!(t_quantile(0.5, 3.0).abs() < 1e-9);
    }

    #[test]
    fn confidence_interval_of_a_hand_computed_example() {
        // 10, 12, 14, 16, 18: mean 14, s² = (16 + 4 + 0 + 4 + 16) / 4 = 10, s = √10.
        // Half-width = t(0.995, 4) · √10 / √5 = 4.604095 · √2 = 6.511173.
        let xs = [10.0, 12.0, 14.0, 16.0, 18.0];
        let s = Summary::of(&xs);
        assert_eq!((s.n, s.mean, s.min, s.max), (5, 14.0, 10.0, 18.0));
        assert!((s.sd - 10f64.sqrt()).abs() < 1e-12);
        assert!((s.ci99.unwrap() - 6.511_173).abs() < 1e-5, "{:?}", s.ci99);
        // Ten equal values: no spread, no interval width; one value: no interval.
        assert_eq!(Summary::of(&[3.0; 10]).ci99, Some(0.0));
        assert_eq!(Summary::of(&[3.0]).ci99, None);
        assert_eq!(Summary::of(&[]).n, 0);
    }
}
