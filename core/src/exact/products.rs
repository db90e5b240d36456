//! [`ExactSum::add_products`]: Σ a·b over two slices in vector lanes, exactly.

use super::{pow2, ExactSum};
use crate::simd::{Convert, Isa, WithConvert};

/// Lanes of `f64` accumulators.
const LANES: usize = 16;
/// log2 of the products each lane sums per block: L.
const LANE_BITS: i32 = 6;
/// Products per block.
const BLOCK: usize = LANES << LANE_BITS;
/// The range of exponents W below the block's largest product that the lanes sum: see
/// [`ExactSum::add_products`] for the bound it keeps.
const WINDOW: i32 = 40;
/// An `f64`'s bits but its sign.
const MAGNITUDE: u64 = !(1 << 63);
/// The bits of +∞: every magnitude at or above it is ±∞ or NaN.
const INFINITE: u64 = 0x7ff0_0000_0000_0000;

impl ExactSum {
    /// Adds Σ a_i · b_i over the pairs of `a` and `b` (as far as the shorter goes), exactly:
    /// the same sum, and the same flags, as [`ExactSum::add_product`] of every pair, computed
    /// in vector lanes (the CPU's best instruction set, detected at run time with `std`).
    ///
    /// # Why it is exact
    ///
    /// Each product p = a·b is exact in `f64` (two 24-bit significands), and a whole multiple
    /// of 2^(e_p − 47), e_p its exponent, and of 2^−298. The pairs go in blocks, over 16 lanes
    /// of `f64` sums, 2^L = 64 products per lane. With E the exponent of the block's largest
    /// |p| (so Σ|p| < 2^(E + 7) in a lane), each lane holds:
    ///
    /// - A = σ + Σ q with σ = 1.5 · 2^(g1 + 52), g1 = max(E − 43, −298): A stays inside σ's
    ///   binade (Σ |q| < 2^(E + 7) + 2^(g1 + 5), and A may move 2^(g1 + 51) ≥ 2^(E + 8) either
    ///   way), where the spacing is 2^g1, so A + p rounded once is A + q with q = p rounded to
    ///   a multiple of 2^g1, and the new A less the old is q exactly.
    /// - Σ r, r = p − q, exact: |r| ≤ 2^(g1 − 1), and for the products whose exponent is at
    ///   least E − W a whole multiple of 2^g2, g2 = max(E − W − 47, −298); with W = 40,
    ///   g1 − g2 ≤ 44, so a lane's 64 of them sum below 2^(g2 + 50), exactly in `f64`.
    ///   Smaller nonzero products (more than 2^40 times below the largest) enter the lanes as
    ///   0 and are added one by one with [`ExactSum::add_product`].
    ///
    /// Once per block each lane's integer is read from its bits (A's less σ's, signed; Σ r's
    /// after the exact addition of 1.5 · 2^(g2 + 52)) and the sums are added to the limbs. A
    /// block with a NaN or ±∞ product is added pair by pair, setting the flags as
    /// [`ExactSum::add_product`] does, and so are the last `len mod 16` pairs.
    ///
    /// ```
    /// use homeadam_core::ExactSum;
    ///
    /// let (a, b) = ([1e30f32, 3.0, -1e30], [1e30f32, 3.0, 1e30]);
    /// let mut bulk = ExactSum::new();
    /// bulk.add_products(&a, &b);
    /// let mut one_by_one = ExactSum::new();
    /// for (&x, &y) in a.iter().zip(&b) {
    ///     one_by_one.add_product(x, y);
    /// }
    /// assert_eq!(bulk.to_words(), one_by_one.to_words());
    /// assert_eq!(bulk.to_f64(), 9.0);
    /// ```
    pub fn add_products(&mut self, a: &[f32], b: &[f32]) {
        Isa::detect().run(Products { sum: self, a, b });
    }
}

/// [`ExactSum::add_products`] as work for [`Isa::run`], so that its loops are compiled for the
/// instruction set.
struct Products<'a> {
    sum: &'a mut ExactSum,
    a: &'a [f32],
    b: &'a [f32],
}

impl WithConvert for Products<'_> {
    type Output = ();

    #[inline(always)]
    fn run<C: Convert>(self, _: C) {
        let n = self.a.len().min(self.b.len());
        let body = n - n % LANES;
        let (a, a_tail) = self.a[..n].split_at(body);
        let (b, b_tail) = self.b[..n].split_at(body);
        for (a, b) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
            add_block(self.sum, a, b);
        }
        add_products_below(self.sum, a_tail, b_tail, u64::MAX);
    }
}

/// |a·b| as the bits of an `f64` (exact: the product of two `f32` fits its significand).
#[inline(always)]
fn magnitude(a: f32, b: f32) -> u64 {
    (a as f64 * b as f64).to_bits() & MAGNITUDE
}

/// Adds a·b with [`ExactSum::add_product`] for each pair whose nonzero |a·b| has bits below
/// `below` (every one for `u64::MAX`, NaN and ±∞ included). Not inlined, as the squares' twin.
#[inline(never)]
fn add_products_below(sum: &mut ExactSum, a: &[f32], b: &[f32], below: u64) {
    for (&x, &y) in a.iter().zip(b) {
        let m = magnitude(x, y);
        if m != 0 && m < below {
            sum.add_product(x, y);
        }
    }
}

/// Adds Σ a·b over one block (a multiple of [`LANES`] pairs, at most [`BLOCK`]).
#[inline(always)]
fn add_block(sum: &mut ExactSum, a: &[f32], b: &[f32]) {
    let (top, low) = a.iter().zip(b).fold((0u64, u64::MAX), |(top, low), (&x, &y)| {
        let m = magnitude(x, y);
        (top.max(m), low.min(m.wrapping_sub(1)))
    });
    if top == 0 {
        return;
    }
    if top >= INFINITE {
        add_products_below(sum, a, b, u64::MAX);
        return;
    }
    // Unbiased exponents: every nonzero product of `f32` is a normal `f64`.
    let e_top = (top >> 52) as i32 - 1023;
    let e_low = (low.wrapping_add(1) >> 52) as i32 - 1023;
    let e_floor = e_top - WINDOW;
    let g1 = (e_top - 43).max(ExactSum::LSB_EXP);
    let g2 = (e_floor - 47).max(ExactSum::LSB_EXP);
    let sigma = 1.5 * pow2(g1 + 52);
    let (q, r) = if e_low >= e_floor {
        lanes::<false>(a, b, sigma, 0)
    } else {
        // Below `floor`: more than 2^W times smaller than the largest, added one by one.
        let floor = ((e_floor + 1023) as u64) << 52;
        add_products_below(sum, a, b, floor);
        lanes::<true>(a, b, sigma, floor)
    };
    let m2 = 1.5 * pow2(g2 + 52);
    let (mut n1, mut n2) = (0i64, 0i64);
    for j in 0..LANES {
        n1 += q[j].to_bits() as i64 - sigma.to_bits() as i64;
        n2 += (r[j] + m2).to_bits() as i64 - m2.to_bits() as i64;
    }
    sum.add_scaled(n1.unsigned_abs(), (g1 - ExactSum::LSB_EXP) as u32, n1 < 0);
    sum.add_scaled(n2.unsigned_abs(), (g2 - ExactSum::LSB_EXP) as u32, n2 < 0);
}

/// Each lane's σ + Σ q and Σ r over the block with σ = `sigma`; with `MASK`, products whose
/// magnitude's bits are below `floor` count as 0.
#[inline(always)]
fn lanes<const MASK: bool>(a: &[f32], b: &[f32], sigma: f64, floor: u64) -> ([f64; LANES], [f64; LANES]) {
    let mut q = [sigma; LANES];
    let mut r = [0f64; LANES];
    for (a, b) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for j in 0..LANES {
            let mut p = a[j] as f64 * b[j] as f64;
            if MASK && p.to_bits() & MAGNITUDE < floor {
                p = 0.0;
            }
            let next = q[j] + p;
            let step = next - q[j];
            q[j] = next;
            r[j] += p - step;
        }
    }
    (q, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn one_by_one(a: &[f32], b: &[f32]) -> ExactSum {
        let mut sum = ExactSum::new();
        for (&x, &y) in a.iter().zip(b) {
            sum.add_product(x, y);
        }
        sum
    }

    fn check(a: &[f32], b: &[f32], what: &str) {
        let mut bulk = ExactSum::new();
        bulk.add_product(0.75, -3.0);
        bulk.add_products(a, b);
        let mut expected = one_by_one(a, b);
        expected.add_product(0.75, -3.0);
        assert_eq!(bulk.to_words(), expected.to_words(), "{what}");
    }

    /// A splitmix64 stream of `f32` in exponents `lo..hi` (biased), either sign.
    struct Values(u64);

    impl Values {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            crate::backend::mix64(self.0)
        }

        fn in_exponents(&mut self, lo: u32, hi: u32) -> f32 {
            let r = self.next();
            let exp = lo + (r >> 40) as u32 % (hi - lo);
            f32::from_bits(((r >> 63) as u32) << 31 | exp << 23 | (r >> 8) as u32 & 0x7f_ffff)
        }
    }

    #[test]
    fn bulk_products_equal_one_by_one() {
        let mut values = Values(3);
        for (lo, hi) in [(120, 130), (1, 254), (0, 30), (200, 255), (100, 160)] {
            for n in [0, 1, 15, 16, 17, 255, 1024, 1040, 3001] {
                let a: Vec<f32> = (0..n).map(|_| values.in_exponents(lo, hi)).collect();
                let b: Vec<f32> = (0..n).map(|_| values.in_exponents(lo, hi)).collect();
                check(&a, &b, &format!("exponents {lo}..{hi}, {n} pairs"));
                check(&a, &a, &format!("squares, exponents {lo}..{hi}, {n} pairs"));
            }
        }
    }

    #[test]
    fn bulk_products_at_the_window_edges() {
        // A block's largest product with one about 2^(W ± 1) below it, and zeros.
        for gap in [WINDOW - 2, WINDOW - 1, WINDOW, WINDOW + 1, WINDOW + 2, 80, 150] {
            let mut a = std::vec![0.0f32; 64];
            let mut b = std::vec![1.0f32; 64];
            a[3] = 1.5;
            a[40] = f32::from_bits(0x3f80_0001) * (gap as f32).exp2().recip();
            b[40] = -1.25;
            a[41] = f32::MIN_POSITIVE / 3.0;
            check(&a, &b, &format!("gap {gap}"));
        }
        check(&[f32::MAX; 32], &[f32::MAX; 32], "the largest products");
        check(
            &[f32::from_bits(1); 32],
            &[f32::from_bits(1); 32],
            "the smallest products",
        );
    }

    #[test]
    fn bulk_products_flag_non_finite_values() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut a = std::vec![1.0f32; 100];
            a[20] = bad;
            let mut b = std::vec![2.0f32; 100];
            b[70] = 0.0;
            a[70] = f32::INFINITY;
            let mut bulk = ExactSum::new();
            bulk.add_products(&a, &b);
            assert_eq!(bulk.to_words(), one_by_one(&a, &b).to_words(), "{bad}");
        }
    }
}
