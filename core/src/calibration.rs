//! τ calibrated to a target home share: a log2-bucket histogram of the values HomeAdam(W)
//! compares with τ, and the quantile rule that turns it into τ.
//!
//! ```text
//! bucket(x) = min(bits(x) >> 23, 127)      x ≥ 0 an f32 (NaN not counted)
//!   bucket 0: x < 2^-126 (0 included); bucket b ∈ 1..=126: [2^(b−127), 2^(b−126)); 127: x ≥ 1
//! below(k) = Σ_{b<k} H[b],  n = below(128)
//! k* = max { k ∈ 1..=127 : below(k) ≤ q·n }  (k* = 1 if none),   τ = 2^(k* − 127)
//! ```
//! So at most a share q of the counted values lies below τ, at the resolution of one binade
//! (the largest power of two that keeps the share ≤ q). Counts are integers and τ a power of two
//! computed from them, so every backend that fills the same histogram gets the same τ, whatever
//! the order in which it counts.
//!
//! Which values are counted, and when τ is set (calibration steps t ≡ 1 mod `every`):
//! - element-wise: v̂_t of every element with v_t > 0, at calibration steps only;
//! - global: the step's ρ (as [`crate::RhoOver`] says), one value per step;
//! - per-layer: each tensor's ρ, one value per tensor per step.
//!
//! For global and per-layer, the histogram holds the values of the steps since the last
//! calibration, the current step's included; it is emptied when τ is set. Skipped steps change
//! neither the histogram nor τ.

use crate::error::Error;

/// Buckets of a [`Histogram`]: the binades of f32 from 2^-126 to 1, plus one below and one above.
pub const BUCKETS: usize = 128;

/// τ calibrated to a target share of home decisions (module docs of `calibration`).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TauCalibration {
    /// q ∈ (0, 1): the share of decisions (elements, steps or tensor-steps) meant to go home.
    pub home_share: f64,
    /// τ is set at steps t with (t − 1) mod `every` = 0 (≥ 1).
    pub every: u32,
}

impl TauCalibration {
    /// Refuses q outside (0, 1) and `every` = 0.
    pub fn validate(&self) -> Result<(), Error> {
        let q = self.home_share;
        if !(q.is_finite() && q > 0.0 && q < 1.0) {
            return Err(Error::InvalidHyper {
                name: "tau.home_share",
                value: q,
                expected: "a share in (0, 1)",
            });
        }
        if self.every == 0 {
            return Err(Error::InvalidHyper {
                name: "tau.every",
                value: 0.0,
                expected: "a step count >= 1",
            });
        }
        Ok(())
    }

    /// Whether step `t` sets τ.
    pub const fn calibrates_at(&self, t: u64) -> bool {
        (t - 1).is_multiple_of(self.every as u64)
    }
}

/// Counts of values per log2 bucket (module docs of `calibration`); each count saturates at
/// `u32::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Histogram {
    counts: [u32; BUCKETS],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    /// No values, as a constant: `&Histogram::EMPTY` is static, where `&Histogram::new()` is a
    /// 512-byte temporary on the stack.
    pub const EMPTY: Histogram = Histogram::new();

    /// No values.
    pub const fn new() -> Self {
        Histogram { counts: [0; BUCKETS] }
    }

    /// The bucket of `x` ≥ 0; `None` for NaN.
    #[inline(always)]
    pub fn bucket(x: f32) -> Option<usize> {
        if x.is_nan() {
            return None;
        }
        let exponent = (x.to_bits() >> 23) as usize;
        // A negative x (never a v̂) has its sign bit in `exponent`: the lowest bucket.
        Some(if x < 0.0 { 0 } else { exponent.min(BUCKETS - 1) })
    }

    /// Counts `x` (NaN is not counted).
    #[inline(always)]
    pub fn add(&mut self, x: f32) {
        if let Some(b) = Histogram::bucket(x) {
            self.add_to(b, 1);
        }
    }

    /// Adds `count` values to bucket `b` (< [`BUCKETS`]).
    pub fn add_to(&mut self, b: usize, count: u32) {
        self.counts[b] = self.counts[b].saturating_add(count);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for b in 0..BUCKETS {
            self.add_to(b, other.counts[b]);
        }
    }

    /// The counts, bucket by bucket.
    pub fn counts(&self) -> &[u32; BUCKETS] {
        &self.counts
    }

    /// A histogram of these counts.
    pub const fn from_counts(counts: [u32; BUCKETS]) -> Self {
        Histogram { counts }
    }

    /// Number of values counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|&c| c as u64).sum()
    }

    /// τ = 2^(k* − 127) for home share `q` (module docs); `None` when nothing was counted.
    pub fn tau(&self, q: f64) -> Option<f32> {
        Histogram::tau_of_sum(self, &Histogram::EMPTY, q)
    }

    /// [`Histogram::tau`] of the sum of `a` and `b` (counts saturating as [`Histogram::merge`]),
    /// without a copy: on a microcontroller's stack, every histogram is 512 bytes.
    pub fn tau_of_sum(a: &Histogram, b: &Histogram, q: f64) -> Option<f32> {
        let count = |k: usize| a.counts[k].saturating_add(b.counts[k]) as u64;
        let n: u64 = (0..BUCKETS).map(count).sum();
        if n == 0 {
            return None;
        }
        let limit = q * n as f64;
        let mut below = 0u64;
        let mut best = 1;
        for k in 1..BUCKETS {
            below += count(k - 1);
            if below as f64 <= limit {
                best = k;
            }
        }
        Some(f32::from_bits((best as u32) << 23))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_binades() {
        assert_eq!(Histogram::bucket(0.0), Some(0));
        assert_eq!(Histogram::bucket(f32::from_bits(1)), Some(0));
        assert_eq!(Histogram::bucket(f32::MIN_POSITIVE), Some(1));
        assert_eq!(Histogram::bucket(0.75), Some(126));
        assert_eq!(Histogram::bucket(1.0), Some(127));
        assert_eq!(Histogram::bucket(f32::INFINITY), Some(127));
        assert_eq!(Histogram::bucket(-1.0), Some(0));
        assert_eq!(Histogram::bucket(f32::NAN), None);
        assert_eq!(
            Histogram::bucket(1e-12),
            Some((1e-12f32.to_bits() >> 23) as usize)
        );
    }

    #[test]
    fn tau_keeps_at_most_the_share_below() {
        let mut h = Histogram::new();
        // 10 values at 2^-40, 30 at 2^-30 (×1.5), 60 at 2^-20.
        (0..10).for_each(|_| h.add(2f32.powi(-40)));
        (0..30).for_each(|_| h.add(1.5 * 2f32.powi(-30)));
        (0..60).for_each(|_| h.add(2f32.powi(-20)));
        assert_eq!(h.total(), 100);
        assert_eq!(
            h.tau(0.05),
            Some(2f32.powi(-40)),
            "none may go home: τ at the lowest value"
        );
        assert_eq!(h.tau(0.1), Some(2f32.powi(-30)), "the 10 lowest go home");
        assert_eq!(h.tau(0.39), Some(2f32.powi(-30)));
        assert_eq!(h.tau(0.4), Some(2f32.powi(-20)));
        assert_eq!(h.tau(0.99), Some(2f32.powi(-20)));
        assert_eq!(Histogram::new().tau(0.5), None);
    }

    #[test]
    fn tau_is_a_normal_power_of_two_at_the_ends() {
        let mut zeros = Histogram::new();
        zeros.add(0.0);
        assert_eq!(zeros.tau(0.5), Some(f32::MIN_POSITIVE));
        let mut big = Histogram::new();
        big.add(1e30);
        assert_eq!(big.tau(0.5), Some(1.0));
    }

    #[test]
    fn counts_saturate_and_merge() {
        let mut h = Histogram::new();
        h.add_to(3, u32::MAX);
        h.add(f32::from_bits(3 << 23));
        assert_eq!(h.counts()[3], u32::MAX);
        let mut g = Histogram::new();
        g.merge(&h);
        assert_eq!(g, h);
    }

    #[test]
    fn calibration_steps_and_validation() {
        let c = TauCalibration {
            home_share: 0.1,
            every: 10,
        };
        assert!(c.calibrates_at(1) && c.calibrates_at(11) && !c.calibrates_at(10));
        assert!(c.validate().is_ok());
        for (q, every) in [(0.0, 1), (1.0, 1), (f64::NAN, 1), (0.5, 0)] {
            let bad = TauCalibration { home_share: q, every };
            assert!(matches!(bad.validate(), Err(Error::InvalidHyper { .. })));
        }
    }
}
