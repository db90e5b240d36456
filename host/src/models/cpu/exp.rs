//! The exponentials of a softmax row, `e^{a·x_j − s}` with `s` the row's largest `a·x_j`, in
//! lanes the compiler vectorizes.
//!
//! `f32::exp` calls the C library once per value, which no compiler vectorizes: it was most of
//! the cross-entropy's time over a vocabulary. Here `e^x` for `x ≤ 0` is Cody and Waite's range
//! reduction, `x = n ln 2 + r` with `|r| ≤ ln 2 / 2`, and a degree-7 polynomial for `e^r`
//! (Moshier's Cephes `expf`), then `2ⁿ` built in the exponent bits: plain multiplies and adds,
//! no fused multiply-add, so the bits are the same wherever the loop runs. Row reductions run in
//! [`LANES`] fixed lanes combined in order, so they do not depend on the thread count either.

use super::elementwise::sum;

/// The lanes of a row's maximum.
const LANES: usize = 8;

/// Below this, `e^x` is under `f32`'s smallest normal number and taken as 0.
const SMALLEST: f32 = -87.33;

/// `e^x` for `x ≤ 0` within 2 ulp (`x` below −87.33 gives 0, a NaN stays NaN).
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    // 1.5 · 2²³: adding it rounds to an integer held in the low bits of the mantissa.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    let clamped = if x < SMALLEST { SMALLEST } else { x };
    let shifted = clamped * std::f32::consts::LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    let r = clamped - n * LN2_HIGH - n * LN2_LOW;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    let n_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    if x < SMALLEST {
        0.0
    } else {
        e_r * two_n
    }
}

/// The largest value of `row` (−∞ when empty). A NaN is passed over here and reaches the
/// softmax through its own `x − max`.
pub(crate) fn max(row: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l = if v > *l { v } else { *l };
        }
    }
    lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// `Σ_j e^{a·x_j − s}` for the row `x`, each term also written to `out` (of `x`'s length):
/// first the exponentials, a loop the compiler vectorizes, then their sum in lanes.
pub(crate) fn exp_sum_into(x: &[f32], a: f32, s: f32, out: &mut [f32]) -> f32 {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = exp_nonpositive(a * v - s);
    }
    sum(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exponential_is_within_two_ulp_down_to_the_smallest_normal() {
        let mut x = 0.0f32;
        let mut worst = 0.0f64;
        while x > SMALLEST {
            let exact = f64::from(x).exp();
            let ulp = f64::from(f32::EPSILON) * exact;
            worst = worst.max((f64::from(exp_nonpositive(x)) - exact).abs() / ulp);
            x -= 1.0e-3 * (1.0 + x.abs());
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    #[test]
    fn row_reductions_agree_with_plain_loops() {
        let row: Vec<f32> = (0..37).map(|j| ((j * 7919) % 101) as f32 / 13.0 - 4.0).collect();
        let top = max(&row);
        assert_eq!(top, row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)));
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        let mut out = vec![0.0; row.len()];
        let total = exp_sum_into(&row, 1.0, top, &mut out);
        let exact: f64 = row.iter().map(|&v| f64::from(v - top).exp()).sum();
        assert!((f64::from(total) - exact).abs() < 1e-6 * exact);
        for (&o, &v) in out.iter().zip(&row) {
            assert!((f64::from(o) - f64::from(v - top).exp()).abs() < 1e-6);
        }
    }
}
