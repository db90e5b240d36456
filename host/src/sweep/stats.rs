//! Mean, sample standard deviation and a Student-t confidence interval of a few seeds' scores.

/// Two-sided 97.5 % quantiles of Student's t for 1 to 30 degrees of freedom (the usual
/// tables, to nine decimals).
const T_975: [f64; 30] = [
    12.706204736,
    4.302652730,
    3.182446305,
    2.776445105,
    2.570581836,
    2.446911851,
    2.364624252,
    2.306004135,
    2.262157163,
    2.228138852,
    2.200985160,
    2.178812830,
    2.160368656,
    2.144786688,
    2.131449546,
    2.119905299,
    2.109815578,
    2.100922040,
    2.093024054,
    2.085963447,
    2.079613845,
    2.073873068,
    2.068657610,
    2.063898562,
    2.059538553,
    2.055529439,
    2.051830516,
    2.048407142,
    2.045229642,
    2.042272456,
];

/// The standard normal's 97.5 % quantile.
const Z_975: f64 = 1.959_963_984_540_054;

/// The 97.5 % quantile of Student's t with `df ≥ 1` degrees of freedom: the table up to 30,
/// then the Cornish–Fisher expansion around the normal quantile (within 1e-5 there).
pub fn t_975(df: u64) -> f64 {
    assert!(df >= 1, "Student's t needs at least one degree of freedom");
    if let Some(&t) = T_975.get(df as usize - 1) {
        return t;
    }
    let (z, v) = (Z_975, df as f64);
    z + (z.powi(3) + z) / (4.0 * v)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / (384.0 * v.powi(3))
}

/// Mean, spread and 95 % confidence interval of one optimizer's seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Number of values.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Sample standard deviation (divisor n − 1); `None` for one value.
    pub std: Option<f64>,
    /// Half-width of the 95 % confidence interval of the mean, t(0.975, n − 1) · std / √n;
    /// `None` for one value.
    pub half_width: Option<f64>,
}

impl Estimate {
    /// The estimate of `values` (at least one).
    pub fn of(values: &[f64]) -> Estimate {
        assert!(!values.is_empty(), "an estimate needs at least one value");
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let std = (n > 1).then(|| {
            let squares: f64 = values.iter().map(|x| (x - mean).powi(2)).sum();
            (squares / (n - 1) as f64).sqrt()
        });
        let half_width = std.map(|s| t_975(n as u64 - 1) * s / (n as f64).sqrt());
        Estimate {
            n,
            mean,
            std,
            half_width,
        }
    }

    /// The interval (low, high), when there are two values or more.
    pub fn interval(&self) -> Option<(f64, f64)> {
        self.half_width.map(|h| (self.mean - h, self.mean + h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_samples_use_the_t_table() {
        let e = Estimate::of(&[0.90, 0.92, 0.94]);
        assert!((e.mean - 0.92).abs() < 1e-12);
        assert!((e.std.unwrap() - 0.02).abs() < 1e-12);
        let h = 4.302652730 * 0.02 / 3f64.sqrt();
        assert!((e.half_width.unwrap() - h).abs() < 1e-12);
        let one = Estimate::of(&[0.5]);
        assert_eq!((one.std, one.half_width, one.interval()), (None, None, None));
    }

    #[test]
    fn large_samples_continue_the_table_smoothly() {
        // t(0.975) for 40, 60 and 120 degrees of freedom (the usual tables).
        for (df, t) in [(40, 2.021075390), (60, 2.000297822), (120, 1.979930405)] {
            assert!((t_975(df) - t).abs() < 1e-5, "{df}: {}", t_975(df));
        }
        assert!(t_975(31) < t_975(30) && t_975(31) > t_975(40));
        assert!((t_975(1_000_000) - Z_975).abs() < 1e-5);
    }
}
