//! [`ExactSum`]: exact sums of products of `f32`, rounded once.

use crate::lines::Lines;
use crate::simd::{Convert, Isa, WithConvert};
use crate::storage::Storage;

#[cfg(all(feature = "std", target_arch = "x86_64"))]
mod avx512;
mod products;

/// An exact sum of products of `f32`, rounded once.
///
/// The product of two finite `f32` is an integer M < 2^48 (the product of the two 24-bit
/// significands) times 2^E with −298 ≤ E ≤ 208, so every such product is a whole multiple of
/// 2^−298 below 2^256. `ExactSum` holds Σ of them as one fixed-point integer, exactly: the
/// sum does not depend on the order of the additions or on how partial sums are merged, so
/// every backend (the core's fast path and scalar reference, CUDA with integer atomics, an MCU)
/// gets the same bits from [`ExactSum::to_f64`], which rounds once, to nearest even.
///
/// # Format (mirrored by `backends/cuda/kernels/homeadam_exact.h`)
///
/// [`ExactSum::LIMBS`] = 18 signed 64-bit limbs hold 32-bit digits
/// ([`ExactSum::DIGIT_BITS`]): the value is Σ_k limb_k · 2^(32k + [`ExactSum::LSB_EXP`]), with
/// `LSB_EXP` = −298. A product M·2^E, shifted to s = E + 298 ∈ [0, 506], adds M·2^(s mod 32)
/// (< 2^80) as three digits (< 2^32, < 2^32, < 2^16) to limbs ⌊s/32⌋ to ⌊s/32⌋ + 2 ≤ 17, with
/// the product's sign. Carries are lazy: a limb absorbs 2^30 additions before
/// [`ExactSum::normalize`] moves each limb's bits above 32 into the next (leaving limbs 0…16 in
/// [0, 2^32) and the sign in limb 17). Limb 17 weighs 2^246: a sum of n products below 2^256
/// stays below n · 2^10 there, exact for n < 2^53. Integer limbs add modulo 2^64, so merging
/// up to 2^31 normalized accumulators limb by limb (the device's atomics) is exact too.
///
/// Non-finite products set a flag instead ([`ExactSum::NAN`], [`ExactSum::POS_INF`],
/// [`ExactSum::NEG_INF`]; merged by OR), so that the result is what an `f64` sum in any order
/// gives: NaN if a product is NaN (NaN, or ∞ · 0) or if +∞ and −∞ both occur, else ±∞.
///
/// The raw form ([`ExactSum::to_words`], [`ExactSum::from_words`]) is [`ExactSum::WORDS`]
/// `u64` words: the 18 limbs (two's complement), then the flags.
///
/// ```
/// use homeadam_core::ExactSum;
///
/// let mut sum = ExactSum::new();
/// sum.add_product(1e30, 1e30);
/// sum.add_square(3.0);
/// sum.add_product(-1e30, 1e30); // cancels the first product exactly
/// assert_eq!(sum.to_f64(), 9.0);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ExactSum {
    limbs: [i64; ExactSum::LIMBS],
    /// Additions since the last normalization: each limb is below (pending + 1) · 2^32.
    pending: u32,
    flags: u64,
}

impl Default for ExactSum {
    fn default() -> Self {
        ExactSum::new()
    }
}

impl ExactSum {
    /// Limbs of the fixed-point integer.
    pub const LIMBS: usize = 18;
    /// Bits of the digit each limb holds once normalized.
    pub const DIGIT_BITS: u32 = 32;
    /// Bit 0 of limb 0 weighs 2^LSB_EXP: the smallest product of two `f32`,
    /// 2^−149 · 2^−149.
    pub const LSB_EXP: i32 = -298;
    /// `u64` words of the raw form: the limbs, then the flags.
    pub const WORDS: usize = ExactSum::LIMBS + 1;
    /// Flag: a product was NaN.
    pub const NAN: u64 = 1;
    /// Flag: a product was +∞.
    pub const POS_INF: u64 = 2;
    /// Flag: a product was −∞.
    pub const NEG_INF: u64 = 4;

    /// Additions a limb absorbs between normalizations (each adds less than 2^32).
    const MAX_PENDING: u32 = 1 << 30;

    /// Zero.
    pub const fn new() -> Self {
        ExactSum {
            limbs: [0; ExactSum::LIMBS],
            pending: 0,
            flags: 0,
        }
    }

    /// Adds a · b, exactly.
    #[inline]
    pub fn add_product(&mut self, a: f32, b: f32) {
        let (Some((ma, ea)), Some((mb, eb))) = (significand(a), significand(b)) else {
            self.flags |= nonfinite_flag(a as f64 * b as f64);
            return;
        };
        let m = ma as u64 * mb as u64;
        if m == 0 {
            return;
        }
        if self.pending == Self::MAX_PENDING {
            self.normalize();
        }
        self.pending += 1;
        let shift = (ea + eb - Self::LSB_EXP) as u32;
        let (k, r) = ((shift / Self::DIGIT_BITS) as usize, shift % Self::DIGIT_BITS);
        let lo = (m << r) as u32 as i64;
        let high = m >> (Self::DIGIT_BITS - r);
        let (mid, hi) = (high as u32 as i64, (high >> 32) as i64);
        if (a.to_bits() ^ b.to_bits()) >> 31 == 0 {
            self.limbs[k] += lo;
            self.limbs[k + 1] += mid;
            self.limbs[k + 2] += hi;
        } else {
            self.limbs[k] -= lo;
            self.limbs[k + 1] -= mid;
            self.limbs[k + 2] -= hi;
        }
    }

    /// Adds a², exactly.
    #[inline]
    pub fn add_square(&mut self, a: f32) {
        self.add_product(a, a);
    }

    /// Adds Σ x² over `xs` (each element widened to `f32`), exactly: the same sum, and the
    /// same flags, as [`ExactSum::add_square`] of every element, computed in vector lanes (the
    /// CPU's best instruction set, detected at run time with `std`).
    ///
    /// # Why it is exact
    ///
    /// The elements go in blocks, over 16 lanes of `f64` sums (32 with AVX-512), 2^L = 64
    /// elements per lane. A block's largest magnitude gives E, the weight of the last bit of its
    /// significand (|x| < 2^(E + 24), so x² < 2^(2E + 48)), and σ = 2^K with K = 2E + 48 + L.
    /// Each square p = x² is exact in `f64` (48 bits). Each lane holds:
    ///
    /// - A = σ + Σ q, in [σ, 2σ), where the `f64` spacing is 2^(K − 52): A + p rounded once is
    ///   A + q, with q = p rounded to a multiple of 2^(K − 52) (|p − q| ≤ 2^(K − 53)), and the
    ///   new A less the old is q exactly. 64 squares below 2^(K − 6) each, each rounded up by
    ///   at most 2^(K − 53), keep Σ q below σ: A never leaves the binade.
    /// - Σ r, r = p − q: for elements whose own last-bit weight is within W = 21 of E (at least
    ///   2^(E − W)), an integer times 2^(2E − 2W), as their squares and every q are; below
    ///   2^(K − 53) each, so a lane's sum stays below 2^(K − 47) = 2^(2E − 2W + 49): exact.
    ///   Smaller nonzero elements (more than 2^21 times below the block's largest: rare in
    ///   gradients) enter the lanes as 0 and are added one by one with
    ///   [`ExactSum::add_square`].
    ///
    /// Once per block, each lane's integer is read from its bits (A's less σ's; Σ r's after an
    /// exact addition of 1.5 · 2^(2E − 2W + 52), which moves it into that binade) and the sums
    /// are added to the limbs. A block with a NaN or ±∞ is added element by element, setting
    /// the flags as [`ExactSum::add_square`] does, and so are the last `len mod 16` elements.
    /// With AVX-512, A + x² is one fused multiply-add (rounded once, as A + p) and r = x² − q
    /// another (exact).
    ///
    /// ```
    /// use homeadam_core::ExactSum;
    ///
    /// let g = [3.0f32, -4.0, 0.0, 12.0];
    /// let mut bulk = ExactSum::new();
    /// bulk.add_squares(&g);
    /// let mut one_by_one = ExactSum::new();
    /// for &x in &g {
    ///     one_by_one.add_square(x);
    /// }
    /// assert_eq!(bulk.to_words(), one_by_one.to_words());
    /// assert_eq!(bulk.to_f64(), 169.0);
    /// ```
    pub fn add_squares<S: Storage>(&mut self, xs: &[S]) {
        self.add_squares_with(xs, Isa::detect());
    }

    /// [`ExactSum::add_squares`] with the instruction set `isa`.
    #[inline(always)]
    fn add_squares_with<S: Storage>(&mut self, xs: &[S], isa: Isa) {
        match isa {
            #[cfg(all(feature = "std", target_arch = "x86_64"))]
            // SAFETY: the token exists only where AVX-512 F, BW, DQ and VL were detected.
            Isa::Avx512(avx512) => unsafe { avx512::add_squares(self, xs, avx512) },
            _ => isa.run(Squares { sum: self, xs }),
        }
    }

    /// Adds ±`m` · 2^(`shift` + [`ExactSum::LSB_EXP`]), exactly, for `shift` < 512: `m` (< 2^64)
    /// shifted by `shift mod 32` spans at most three digits, limbs k = ⌊shift/32⌋ ≤ 15 to k + 2.
    #[inline]
    fn add_scaled(&mut self, m: u64, shift: u32, negative: bool) {
        if m == 0 {
            return;
        }
        if self.pending == Self::MAX_PENDING {
            self.normalize();
        }
        self.pending += 1;
        let (k, r) = ((shift / Self::DIGIT_BITS) as usize, shift % Self::DIGIT_BITS);
        let lo = (m << r) as u32 as i64;
        let high = m >> (Self::DIGIT_BITS - r);
        let (mid, hi) = (high as u32 as i64, (high >> 32) as i64);
        if negative {
            self.limbs[k] -= lo;
            self.limbs[k + 1] -= mid;
            self.limbs[k + 2] -= hi;
        } else {
            self.limbs[k] += lo;
            self.limbs[k + 1] += mid;
            self.limbs[k + 2] += hi;
        }
    }

    /// Adds the sum `other`, exactly.
    pub fn merge(&mut self, other: &ExactSum) {
        self.normalize();
        let mut other = *other;
        other.normalize();
        for (a, b) in self.limbs.iter_mut().zip(other.limbs) {
            *a += b;
        }
        self.pending = 1;
        self.flags |= other.flags;
    }

    /// Moves each limb's bits above the digit into the next limb: limbs 0…16 end in
    /// [0, 2^32), the top limb holds the sign. The value is unchanged.
    pub fn normalize(&mut self) {
        for k in 0..Self::LIMBS - 1 {
            let carry = self.limbs[k] >> Self::DIGIT_BITS;
            self.limbs[k] &= 0xffff_ffff;
            self.limbs[k + 1] += carry;
        }
        self.pending = 0;
    }

    /// The flags of the non-finite products added ([`ExactSum::NAN`] …).
    pub fn flags(&self) -> u64 {
        self.flags
    }

    /// The raw form, normalized (see the format above).
    pub fn to_words(&self) -> [u64; ExactSum::WORDS] {
        let mut x = *self;
        x.normalize();
        let mut words = [0u64; ExactSum::WORDS];
        for (w, l) in words.iter_mut().zip(x.limbs) {
            *w = l as u64;
        }
        words[Self::LIMBS] = x.flags;
        words
    }

    /// A sum from its raw form, normalized or not (e.g. the limb-wise sum of at most 2^31
    /// normalized accumulators, as a device accumulates them).
    pub fn from_words(words: &[u64; ExactSum::WORDS]) -> Self {
        let mut x = ExactSum::new();
        for (l, &w) in x.limbs.iter_mut().zip(words) {
            *l = w as i64;
        }
        x.flags = words[Self::LIMBS];
        x.normalize();
        x
    }

    /// The sum rounded once to the nearest `f64` (ties to even); an exact zero is +0. With
    /// non-finite products: NaN, or ±∞, as an `f64` sum of them. A sum beyond `f64`'s range
    /// would round to ±∞; no sum of fewer than 2^53 products of `f32` comes near it.
    pub fn to_f64(&self) -> f64 {
        if self.flags & Self::NAN != 0 || self.flags & (Self::POS_INF | Self::NEG_INF) == 6 {
            return f64::NAN;
        }
        if self.flags != 0 {
            return if self.flags == Self::POS_INF {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            };
        }
        let mut x = *self;
        x.normalize();
        // Two's complement digits of the value, the top limb split in two.
        let top = x.limbs[Self::LIMBS - 1];
        let mut digits = [0u32; ExactSum::LIMBS + 1];
        for (d, &l) in digits.iter_mut().zip(&x.limbs[..Self::LIMBS - 1]) {
            *d = l as u32;
        }
        digits[Self::LIMBS - 1] = top as u32;
        digits[Self::LIMBS] = (top >> 32) as u32;
        let negative = top < 0;
        if negative {
            let mut carry = true;
            for d in digits.iter_mut() {
                let (v, c) = (!*d).overflowing_add(carry as u32);
                *d = v;
                carry = c;
            }
        }
        let Some(h) = digits.iter().rposition(|&d| d != 0) else {
            return 0.0;
        };
        // The value is the integer `digits` times 2^LSB_EXP; bit `msb` is its leading one.
        let msb = 32 * h as i32 + 31 - digits[h].leading_zeros() as i32;
        let (window, sticky) = bits_below(&digits, msb);
        let mut mantissa = window >> 11;
        let rest = window & 0x7ff;
        let mut exp = msb + Self::LSB_EXP;
        if rest > 0x400 || (rest == 0x400 && (sticky || mantissa & 1 == 1)) {
            mantissa += 1;
            if mantissa == 1 << 53 {
                mantissa >>= 1;
                exp += 1;
            }
        }
        let sign = (negative as u64) << 63;
        // exp ≥ −298: never subnormal.
        let biased = exp + 1023;
        if biased > 2046 {
            return f64::from_bits(sign | f64::INFINITY.to_bits());
        }
        f64::from_bits(sign | (biased as u64) << 52 | (mantissa & ((1 << 52) - 1)))
    }
}

/// Lanes of `f64` accumulators in [`ExactSum::add_squares`].
const SQUARE_LANES: usize = 16;
/// log2 of the elements each lane sums per block: L.
const SQUARE_LANE_BITS: i32 = 6;
/// Elements per block of [`ExactSum::add_squares`].
const SQUARE_BLOCK: usize = SQUARE_LANES << SQUARE_LANE_BITS;
/// The range of exponents (of the significand's last bit) a block sums in its lanes: W, with
/// 2L + 2W − 5 ≤ 49 (a lane's sum of r is below 2^49 of its unit, so that adding
/// 1.5 · 2^52 units is exact and leaves it in the fraction bits).
const SQUARE_WINDOW: i32 = 21;
/// Elements [`ExactSum::add_squares`] widens to `f32` at a time (half-precision input), on the
/// stack: a block on a host, a quarter of one (1 KiB) without `std` (microcontrollers).
const SQUARE_STAGE: usize = if cfg!(feature = "std") {
    SQUARE_BLOCK
} else {
    SQUARE_BLOCK / 4
};

/// [`ExactSum::add_squares`] as work for [`Isa::run`], so that its loops are compiled for the
/// instruction set (and the half-precision input widened with its conversions).
struct Squares<'a, S> {
    sum: &'a mut ExactSum,
    xs: &'a [S],
}

impl<S: Storage> WithConvert for Squares<'_, S> {
    type Output = ();

    #[inline(always)]
    fn run<C: Convert>(self, conv: C) {
        if let Some(xs) = S::as_f32(self.xs) {
            return add_f32_squares(self.sum, xs);
        }
        let mut stage = Lines::<SQUARE_STAGE>::new();
        for chunk in self.xs.chunks(SQUARE_STAGE) {
            let wide = &mut stage.0[..chunk.len()];
            conv.load(chunk, wide);
            add_f32_squares(self.sum, wide);
        }
    }
}

/// A block's largest magnitude (as bits) and its smallest nonzero one's less one (0 wraps
/// around to `u32::MAX`).
#[derive(Clone, Copy)]
struct Range {
    top: u32,
    low: u32,
}

/// The [`Range`] of `block`: integer reductions, which the compiler vectorizes as they are.
#[inline(always)]
fn range_of(block: &[f32]) -> Range {
    let (top, low) = block.iter().fold((0u32, u32::MAX), |(top, low), x| {
        let a = x.to_bits() & 0x7fff_ffff;
        (top.max(a), low.min(a.wrapping_sub(1)))
    });
    Range { top, low }
}

/// Adds Σ x² of `xs` (see [`ExactSum::add_squares`]), block by block; each block's lanes run
/// beside the next block's [`Range`] pass, so that reading the next block overlaps the
/// arithmetic of this one.
#[inline(always)]
fn add_f32_squares(sum: &mut ExactSum, xs: &[f32]) {
    let (body, tail) = xs.split_at(xs.len() - xs.len() % SQUARE_LANES);
    add_squares_below(sum, tail, u32::MAX);
    let mut blocks = body.chunks(SQUARE_BLOCK);
    let Some(mut block) = blocks.next() else {
        return;
    };
    let mut range = range_of(block);
    loop {
        let next = blocks.next();
        let ahead = next.filter(|n| n.len() == block.len());
        let next_range = add_block(sum, block, range, ahead);
        let Some(next) = next else {
            return;
        };
        range = next_range.unwrap_or_else(|| range_of(next));
        block = next;
    }
}

/// Adds x² with [`ExactSum::add_square`] for each nonzero element of `xs` whose magnitude's
/// bits are below `below` (every one for `u32::MAX`, NaN and ±∞ included): the few elements
/// the lanes leave out. Not inlined, so that the callers of `add_product` elsewhere keep
/// inlining it.
#[inline(never)]
fn add_squares_below(sum: &mut ExactSum, xs: &[f32], below: u32) {
    for &x in xs {
        let a = x.to_bits() & 0x7fff_ffff;
        if a != 0 && a < below {
            sum.add_square(x);
        }
    }
}

/// Adds Σ x² of `block` (a multiple of [`SQUARE_LANES`] elements, at most [`SQUARE_BLOCK`])
/// whose [`Range`] is `range`; returns the range of `ahead` (as long as `block`) where its
/// pass ran beside the lanes.
#[inline(always)]
fn add_block(sum: &mut ExactSum, block: &[f32], range: Range, ahead: Option<&[f32]>) -> Option<Range> {
    let plan = BlockPlan::new(sum, block, range)?;
    let sigma = plan.sigma;
    let lanes = match (plan.floor, ahead) {
        (None, Some(ahead)) => lanes::<false, true>(block, ahead, sigma, 0),
        (None, None) => lanes::<false, false>(block, block, sigma, 0),
        (Some(floor), Some(ahead)) => lanes::<true, true>(block, ahead, sigma, floor),
        (Some(floor), None) => lanes::<true, false>(block, block, sigma, floor),
    };
    let (mut n1, mut n2) = (0i64, 0i64);
    for j in 0..SQUARE_LANES {
        n1 += lanes.q[j].to_bits() as i64 - sigma.to_bits() as i64;
        n2 += (lanes.r[j] + plan.m2).to_bits() as i64 - plan.m2.to_bits() as i64;
    }
    plan.add(sum, n1, n2);
    ahead.map(|_| lanes.ahead)
}

/// How a block of squares whose [`Range`] is `range` is summed, for [`add_block`] and the
/// AVX-512 one: σ, the elements below a floor added one by one, and the scales of the lanes'
/// two sums.
struct BlockPlan {
    /// σ, the base the q sums ride on.
    sigma: f64,
    /// The magnitudes' bits below which elements count as 0 in the lanes (`None`: none).
    floor: Option<u32>,
    /// 1.5 · 2^(g2 + 52), which moves Σ r into its binade exactly.
    m2: f64,
    /// The spacings' exponents: 2^g1 of σ + Σ q, 2^g2 of Σ r.
    g1: i32,
    g2: i32,
}

impl BlockPlan {
    /// The plan of `block` (`None` for a block of zeros); a block holding NaN or ±∞, and the
    /// elements below the floor, are added to `sum` one by one here.
    #[inline(always)]
    fn new(sum: &mut ExactSum, block: &[f32], range: Range) -> Option<BlockPlan> {
        if range.top == 0 {
            return None; // zeros
        }
        if range.top >= 0x7f80_0000 {
            add_squares_below(sum, block, u32::MAX);
            return None;
        }
        // Biased exponents, subnormals counted as 1 (their last bit weighs 2^−149 too).
        let e_top = (range.top >> 23).max(1) as i32;
        let e_low = (range.low.wrapping_add(1) >> 23).max(1) as i32;
        let e = e_top - 150;
        let sigma = pow2(2 * e + 48 + SQUARE_LANE_BITS);
        // Below the floor: more than 2^W times smaller than the largest, added one by one.
        let floor = (e_top - e_low > SQUARE_WINDOW).then(|| ((e_top - SQUARE_WINDOW) as u32) << 23);
        if let Some(floor) = floor {
            add_squares_below(sum, block, floor);
        }
        // The lanes hold σ + Σ q, in σ's binade [2^K, 2^(K + 1)) where the spacing is 2^g1,
        // and Σ r, an integer times 2^g2 below 2^(g2 + 49) in magnitude, which
        // 1.5 · 2^(g2 + 52) moves into its binade exactly: each lane's bits less its binade's
        // base are the integer.
        let g2 = (2 * (e - SQUARE_WINDOW)).max(ExactSum::LSB_EXP);
        Some(BlockPlan {
            sigma,
            floor,
            m2: 1.5 * pow2(g2 + 52),
            g1: 2 * e + SQUARE_LANE_BITS - 4,
            g2,
        })
    }

    /// Adds the lanes' sums to `sum`: `n1`, Σ over the lanes of bits(σ + Σ q) − bits(σ), and
    /// `n2`, the same of Σ r + m2 less m2.
    #[inline(always)]
    fn add(&self, sum: &mut ExactSum, n1: i64, n2: i64) {
        sum.add_scaled(n1 as u64, (self.g1 - ExactSum::LSB_EXP) as u32, false);
        sum.add_scaled(n2.unsigned_abs(), (self.g2 - ExactSum::LSB_EXP) as u32, n2 < 0);
    }
}

/// Each lane's σ + Σ q and Σ r over a block, and the next block's [`Range`].
struct Lanes {
    q: [f64; SQUARE_LANES],
    r: [f64; SQUARE_LANES],
    ahead: Range,
}

/// The lanes' σ + Σ q and Σ r (see [`ExactSum::add_squares`]) over `block` with σ = `sigma`;
/// with `MASK`, elements whose magnitude's bits are below `floor` count as 0; with `AHEAD`,
/// the [`Range`] of `ahead` (as long as `block`) in the same loop.
#[inline(always)]
fn lanes<const MASK: bool, const AHEAD: bool>(block: &[f32], ahead: &[f32], sigma: f64, floor: u32) -> Lanes {
    // The q sums ride on σ: σ + Σ q, in [σ, 2σ), where the spacing is 2^(K − 52).
    let mut q = [sigma; SQUARE_LANES];
    let mut r = [0f64; SQUARE_LANES];
    let mut top = [0u32; SQUARE_LANES];
    let mut low = [u32::MAX; SQUARE_LANES];
    for (chunk, next) in block
        .chunks_exact(SQUARE_LANES)
        .zip(ahead.chunks_exact(SQUARE_LANES))
    {
        if AHEAD {
            for j in 0..SQUARE_LANES {
                let a = next[j].to_bits() & 0x7fff_ffff;
                top[j] = top[j].max(a);
                low[j] = low[j].min(a.wrapping_sub(1));
            }
        }
        for j in 0..SQUARE_LANES {
            let mut x = chunk[j];
            if MASK && x.to_bits() & 0x7fff_ffff < floor {
                x = 0.0;
            }
            let p = x as f64 * x as f64;
            let next_q = q[j] + p;
            let rounded = next_q - q[j];
            q[j] = next_q;
            r[j] += p - rounded;
        }
    }
    Lanes {
        q,
        r,
        ahead: Range {
            top: top.into_iter().fold(0, u32::max),
            low: low.into_iter().fold(u32::MAX, u32::min),
        },
    }
}

/// 2^k as an `f64`, for −1022 ≤ k ≤ 1023.
#[inline(always)]
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// x = m · 2^e with m < 2^24 an integer, for finite x (the sign apart).
#[inline(always)]
fn significand(x: f32) -> Option<(u32, i32)> {
    let bits = x.to_bits();
    let exp = (bits >> 23 & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    match exp {
        0xff => None,
        0 => Some((man, -149)),
        _ => Some((man | 0x80_0000, exp - 150)),
    }
}

fn nonfinite_flag(product: f64) -> u64 {
    if product.is_nan() {
        ExactSum::NAN
    } else if product > 0.0 {
        ExactSum::POS_INF
    } else {
        ExactSum::NEG_INF
    }
}

/// The 64 bits of `digits` whose top one is bit `msb` (shifted in zeros below bit 0), and
/// whether any bit below them is set.
fn bits_below(digits: &[u32], msb: i32) -> (u64, bool) {
    let low = msb - 63;
    let (mut window, mut sticky) = (0u64, false);
    for (i, &d) in digits.iter().enumerate() {
        let shift = 32 * i as i32 - low;
        if shift >= 64 {
            break;
        } else if shift >= 0 {
            window |= (d as u64) << shift;
        } else if shift > -32 {
            window |= d as u64 >> -shift;
            sticky |= d & ((1u32 << -shift) - 1) != 0;
        } else {
            sticky |= d != 0;
        }
    }
    (window, sticky)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            crate::backend::mix64(self.0)
        }
        /// Ordinary, tiny, subnormal, huge and zero values of both signs.
        fn value(&mut self) -> f32 {
            let r = self.next();
            let sign = ((r >> 63) as u32) << 31;
            let man = (r >> 8) as u32 & 0x7f_ffff;
            let exp = match r % 10 {
                0..=4 => 100 + (r >> 40) % 50,
                5 => 0,
                6 => 1 + (r >> 40) % 20,
                7 => 230 + (r >> 40) % 25,
                8 => (r >> 40) % 255,
                _ => return 0.0,
            } as u32;
            f32::from_bits(sign | exp << 23 | man)
        }
    }

    /// A signed big integer, Σ products · 2^298, as sign and base-2^32 magnitude: a reference
    /// written without limbs, carries or windows.
    #[derive(Clone, Default)]
    struct Big {
        negative: bool,
        mag: Vec<u32>,
    }

    fn cmp_mag(a: &[u32], b: &[u32]) -> core::cmp::Ordering {
        let len = a.len().max(b.len());
        for i in (0..len).rev() {
            let (x, y) = (a.get(i).copied().unwrap_or(0), b.get(i).copied().unwrap_or(0));
            if x != y {
                return x.cmp(&y);
            }
        }
        core::cmp::Ordering::Equal
    }

    fn add_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut carry = 0u64;
        for i in 0..a.len().max(b.len()) + 1 {
            let s = a.get(i).copied().unwrap_or(0) as u64 + b.get(i).copied().unwrap_or(0) as u64 + carry;
            out.push(s as u32);
            carry = s >> 32;
        }
        out
    }

    /// a − b for |a| ≥ |b|.
    fn sub_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut borrow = 0i64;
        for (i, &x) in a.iter().enumerate() {
            let s = x as i64 - b.get(i).copied().unwrap_or(0) as i64 - borrow;
            out.push(s.rem_euclid(1 << 32) as u32);
            borrow = (s < 0) as i64;
        }
        out
    }

    impl Big {
        /// x · 2^298 for an f64 multiple of 2^−298.
        fn of(x: f64) -> Big {
            let bits = x.to_bits();
            let exp = (bits >> 52 & 0x7ff) as i32;
            let man = bits & ((1 << 52) - 1);
            let (m, e) = if exp == 0 {
                (man, -1074)
            } else {
                (man | 1 << 52, exp - 1075)
            };
            let shift = e + 298;
            assert!(m == 0 || shift >= 0 || m.trailing_zeros() as i32 >= -shift);
            let mut mag = std::vec![0u32; 40];
            let (m, shift) = if shift < 0 {
                (m >> (-shift).min(63), 0)
            } else {
                (m, shift as usize)
            };
            let wide = (m as u128) << (shift % 32);
            for j in 0..3 {
                mag[shift / 32 + j] = (wide >> (32 * j)) as u32;
            }
            Big {
                negative: x < 0.0,
                mag,
            }
        }

        fn add(&self, o: &Big) -> Big {
            if self.negative == o.negative {
                return Big {
                    negative: self.negative,
                    mag: add_mag(&self.mag, &o.mag),
                };
            }
            match cmp_mag(&self.mag, &o.mag) {
                core::cmp::Ordering::Less => Big {
                    negative: o.negative,
                    mag: sub_mag(&o.mag, &self.mag),
                },
                _ => Big {
                    negative: self.negative,
                    mag: sub_mag(&self.mag, &o.mag),
                },
            }
        }

        fn neg(&self) -> Big {
            Big {
                negative: !self.negative,
                mag: self.mag.clone(),
            }
        }

        fn is_zero(&self) -> bool {
            self.mag.iter().all(|&d| d == 0)
        }
    }

    /// Checks that `r` is the correctly rounded `exact`: |exact − r| ≤ ulp(r)/2, ties to an
    /// even significand.
    fn assert_rounds(exact: &Big, r: f64) {
        if exact.is_zero() {
            assert_eq!(r.to_bits(), 0, "zero sum gave {r:e}");
            return;
        }
        let diff = exact.add(&Big::of(r).neg());
        if diff.is_zero() {
            return;
        }
        // half an ulp of r, times 2^298: ulp = 2^(exp(r) − 52).
        let e = ((r.to_bits() >> 52 & 0x7ff) as i32) - 1075 + 298 - 1;
        assert!(e >= 0, "inexact result {r:e} below the format's resolution");
        let mut half = std::vec![0u32; 40];
        half[e as usize / 32] = 1 << (e % 32);
        // Below a power of two the ulp under r is half as large.
        let power_of_two = r.to_bits() & ((1 << 52) - 1) == 0;
        let toward_zero = diff.negative != (r < 0.0);
        if power_of_two && toward_zero && e > 0 {
            half = std::vec![0u32; 40];
            half[(e - 1) as usize / 32] = 1 << ((e - 1) % 32);
        }
        match cmp_mag(&diff.mag, &half) {
            core::cmp::Ordering::Less => {}
            core::cmp::Ordering::Equal => assert_eq!(r.to_bits() & 1, 0, "tie not to even: {r:e}"),
            core::cmp::Ordering::Greater => panic!("{r:e} is not the nearest f64 to the exact sum"),
        }
    }

    fn exact_and_sum(pairs: &[(f32, f32)]) -> (Big, ExactSum) {
        let mut big = Big::default();
        let mut sum = ExactSum::new();
        for &(a, b) in pairs {
            big = big.add(&Big::of(a as f64 * b as f64));
            sum.add_product(a, b);
        }
        (big, sum)
    }

    #[test]
    fn random_sums_round_once_and_ignore_order() {
        let mut rng = Rng(1);
        for case in 0..300 {
            let n = 1 + (rng.next() % 200) as usize;
            let mut pairs: Vec<(f32, f32)> = (0..n).map(|_| (rng.value(), rng.value())).collect();
            if case % 3 == 0 {
                // Huge cancellation: every product again with its sign flipped, and one tiny rest.
                let negated: Vec<(f32, f32)> = pairs.iter().map(|&(a, b)| (-a, b)).collect();
                pairs.extend(negated);
                pairs.push((f32::from_bits(1), rng.value()));
            }
            let (big, sum) = exact_and_sum(&pairs);
            let r = sum.to_f64();
            assert_rounds(&big, r);
            for _ in 0..3 {
                for i in (1..pairs.len()).rev() {
                    pairs.swap(i, (rng.next() % (i as u64 + 1)) as usize);
                }
                let split = (rng.next() as usize) % pairs.len();
                let (mut a, b) = (exact_and_sum(&pairs[..split]).1, exact_and_sum(&pairs[split..]).1);
                a.merge(&b);
                assert_eq!(
                    a.to_f64().to_bits(),
                    r.to_bits(),
                    "case {case}: order changed the sum"
                );
                assert_eq!(a.to_words(), sum.to_words());
            }
        }
    }

    #[test]
    fn ties_round_to_even_and_extremes_are_exact() {
        // 1 + 2^−53 is a tie between 1 and 1 + 2^−52: even is 1.
        let mut s = ExactSum::new();
        s.add_product(1.0, 1.0);
        s.add_product(2f32.powi(-53), 1.0);
        assert_eq!(s.to_f64(), 1.0);
        s.add_product(f32::from_bits(1), f32::from_bits(1)); // 2^−298 breaks the tie upward
        assert_eq!(s.to_f64(), 1.0 + f64::EPSILON);
        let mut s = ExactSum::new();
        s.add_product(f32::MAX, f32::MAX);
        s.add_product(f32::MAX, -f32::MAX);
        s.add_product(f32::from_bits(1), -f32::from_bits(1));
        assert_eq!(s.to_f64(), -(2f64.powi(-298)));
        let mut s = ExactSum::new();
        for _ in 0..1000 {
            s.add_product(f32::MAX, f32::MAX);
        }
        assert_eq!(s.to_f64(), 1000.0 * (f32::MAX as f64 * f32::MAX as f64));
        assert_eq!(ExactSum::new().to_f64().to_bits(), 0);
    }

    #[test]
    #[cfg_attr(homeadam_unoptimized, ignore = "a minute unoptimized; runs optimized")]
    fn many_additions_normalize_without_overflow() {
        let mut s = ExactSum::new();
        let n = (ExactSum::MAX_PENDING as u64) * 2 + 5;
        for _ in 0..n {
            s.add_product(-1.999_999_9, 1.999_999_9);
        }
        let p = -1.999_999_9f32 as f64 * 1.999_999_9f32 as f64;
        assert_eq!(s.to_f64(), p * n as f64);
    }

    #[test]
    fn non_finite_products_flag_as_an_f64_sum_would() {
        let sum = |pairs: &[(f32, f32)]| {
            let mut s = ExactSum::new();
            for &(a, b) in pairs {
                s.add_product(a, b);
            }
            s.to_f64()
        };
        let inf = f32::INFINITY;
        assert_eq!(sum(&[(1.0, 2.0), (inf, 1.0)]), f64::INFINITY);
        assert_eq!(sum(&[(inf, -1.0), (3.0, 1.0)]), f64::NEG_INFINITY);
        assert!(sum(&[(inf, 1.0), (-inf, 1.0)]).is_nan());
        assert!(sum(&[(inf, 0.0)]).is_nan());
        assert!(sum(&[(f32::NAN, 1.0), (inf, 1.0)]).is_nan());
        let mut a = ExactSum::new();
        a.add_square(-inf);
        let mut b = ExactSum::new();
        b.add_product(inf, -1.0);
        a.merge(&b);
        assert!(a.to_f64().is_nan());
        assert_eq!(ExactSum::from_words(&a.to_words()).flags(), 7 & !ExactSum::NAN);
    }

    /// Σ x² with [`ExactSum::add_square`], one element at a time, after `before`.
    fn one_by_one<S: Storage>(before: &ExactSum, xs: &[S]) -> ExactSum {
        let mut sum = *before;
        for x in xs {
            sum.add_square(x.to_f32());
        }
        sum
    }

    /// [`ExactSum::add_squares`] with every instruction set of this CPU equals
    /// [`ExactSum::add_square`] of each element, after `before` and with products added after.
    fn check_squares<S: Storage>(before: &ExactSum, xs: &[S], what: &str) {
        let mut reference = one_by_one(before, xs);
        reference.add_product(1.5, -3.25);
        for simd in crate::Simd::ALL {
            let Some(isa) = Isa::of(simd) else { continue };
            let mut sum = *before;
            sum.add_squares_with(xs, isa);
            sum.add_product(1.5, -3.25);
            assert_eq!(
                sum.to_words(),
                reference.to_words(),
                "{what}: {} {} elements, {}",
                S::DTYPE.name(),
                xs.len(),
                simd.name()
            );
            assert_eq!(sum.to_f64().to_bits(), reference.to_f64().to_bits());
        }
    }

    impl Rng {
        /// A value of about `scale` (a sum of uniform draws, roughly normal), now and then 0.
        fn gradient(&mut self, scale: f32) -> f32 {
            let r = self.next();
            if r.is_multiple_of(50) {
                return 0.0;
            }
            let u = (0..4)
                .map(|k| ((r >> (16 * k)) & 0xffff) as f32 / 65536.0 - 0.5)
                .sum::<f32>();
            u * scale
        }

        /// A finite value with biased exponent in `lo..=hi` (0: subnormal) and a random
        /// significand and sign.
        fn in_exponents(&mut self, lo: u32, hi: u32) -> f32 {
            let r = self.next();
            let e = lo + (r >> 40) as u32 % (hi - lo + 1);
            f32::from_bits(((r >> 63) as u32) << 31 | e << 23 | (r as u32 & 0x7f_ffff))
        }
    }

    /// The lengths the tests run: short tails, around the block, and past 2^16.
    const LENGTHS: [usize; 12] = [0, 1, 15, 16, 17, 100, 1023, 1024, 1025, 2048 + 31, 5000, 70_001];

    #[test]
    fn bulk_squares_equal_one_by_one_for_gradients() {
        let mut rng = Rng(11);
        let mut before = ExactSum::new();
        before.add_product(-7.0e-3, 2.5e-4);
        for (i, &n) in LENGTHS.iter().enumerate() {
            for scale in [1e-3f32, 1.0, 3e-18, 1e-36, 1e-42, 1e30, 3e38] {
                let xs: Vec<f32> = (0..n).map(|_| rng.gradient(scale)).collect();
                let start = if i.is_multiple_of(2) {
                    ExactSum::new()
                } else {
                    before
                };
                check_squares(&start, &xs, "gradients");
                let h: Vec<half::bf16> = xs.iter().map(|&x| half::bf16::from_f32(x)).collect();
                check_squares(&start, &h, "gradients");
                let h: Vec<half::f16> = xs.iter().map(|&x| half::f16::from_f32(x)).collect();
                check_squares(&start, &h, "gradients");
            }
        }
    }

    #[test]
    fn bulk_squares_equal_one_by_one_for_any_values() {
        let mut rng = Rng(12);
        for &n in &LENGTHS {
            // Subnormals, huge values and zeros of both signs, in every mix.
            let xs: Vec<f32> = (0..n).map(|_| rng.value()).collect();
            check_squares(&ExactSum::new(), &xs, "any values");
            // Every bit pattern of the 2-byte types, NaN and ±∞ included.
            let bits: Vec<u32> = (0..n).map(|_| rng.next() as u32 & 0xffff).collect();
            let h: Vec<half::bf16> = bits.iter().map(|&b| Storage::from_bits32(b)).collect();
            check_squares(&ExactSum::new(), &h, "bf16 bit patterns");
            let h: Vec<half::f16> = bits.iter().map(|&b| Storage::from_bits32(b)).collect();
            check_squares(&ExactSum::new(), &h, "f16 bit patterns");
        }
    }

    #[test]
    fn bulk_squares_at_the_window_edges() {
        let mut rng = Rng(13);
        // Blocks whose exponents span exactly the window (23), one more, or much more, with the
        // largest exponent anywhere from the subnormals to f32::MAX's.
        for top in [1u32, 2, 23, 24, 25, 26, 60, 127, 200, 253, 254] {
            for span in [0u32, 1, 22, 23, 24, 25, 40, 254] {
                let lo = top.saturating_sub(span);
                for n in [16usize, 1024, 3000, 4096] {
                    let mut xs: Vec<f32> = (0..n).map(|_| rng.in_exponents(lo, top)).collect();
                    // The extremes present: the largest significand at the top, the smallest
                    // exponent at the bottom.
                    xs[n / 3] = f32::from_bits(top << 23 | 0x7f_ffff);
                    xs[n / 2] = f32::from_bits(lo << 23 | (rng.next() as u32 & 0x7f_ffff));
                    check_squares(&ExactSum::new(), &xs, "window edges");
                    // The largest squares only: each lane's q at its bound.
                    let same = std::vec![f32::from_bits(top << 23 | 0x7f_ffff); n];
                    check_squares(&ExactSum::new(), &same, "largest significands");
                }
            }
        }
    }

    #[test]
    fn bulk_squares_over_blocks_of_every_kind() {
        // Whole blocks of both block lengths (1,024 and 2,048), each of one kind, in random
        // order: each block's range is taken beside the previous block's lanes.
        let mut rng = Rng(15);
        for case in 0..60 {
            let mut xs = Vec::new();
            for _ in 0..1 + rng.next() % 6 {
                let n = [1024usize, 2048][rng.next() as usize % 2];
                let kind = rng.next() % 7;
                let bad = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.next() as usize % 3];
                for i in 0..n {
                    xs.push(match kind {
                        0 => 0.0,
                        1 => rng.gradient(1e-3),
                        2 if i == n / 2 => bad,
                        2 => rng.gradient(1.0),
                        // Gradients with a few values far below the window.
                        3 if i % 500 == 7 => rng.in_exponents(0, 40),
                        3 => rng.gradient(1e3),
                        4 => rng.in_exponents(0, 3),
                        5 => rng.in_exponents(230, 254),
                        _ => rng.value(),
                    });
                }
            }
            let extra = rng.next() as usize % 40;
            xs.extend((0..extra).map(|_| rng.gradient(1e-2)));
            check_squares(&ExactSum::new(), &xs, "blocks of every kind");
            if case % 4 == 0 {
                let h: Vec<half::bf16> = xs.iter().map(|&x| half::bf16::from_f32(x)).collect();
                check_squares(&ExactSum::new(), &h, "blocks of every kind");
            }
        }
    }

    #[test]
    fn bulk_squares_flag_non_finite_values() {
        let mut rng = Rng(14);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN] {
            for &n in &LENGTHS[1..] {
                for at in [0, n / 2, n - 1] {
                    let mut xs: Vec<f32> = (0..n).map(|_| rng.gradient(1e-3)).collect();
                    xs[at] = bad;
                    check_squares(&ExactSum::new(), &xs, "non-finite");
                    let mut sum = ExactSum::new();
                    sum.add_squares(&xs);
                    let flag = if bad.is_nan() {
                        ExactSum::NAN
                    } else {
                        ExactSum::POS_INF
                    };
                    assert_eq!(sum.flags(), flag);
                }
            }
        }
        let mut sum = ExactSum::new();
        sum.add_squares(&[f32::NEG_INFINITY]);
        sum.add_product(f32::INFINITY, -1.0);
        assert!(sum.to_f64().is_nan());
    }

    #[test]
    fn raw_words_sum_limb_by_limb() {
        let mut rng = Rng(7);
        let parts: Vec<ExactSum> = (0..50)
            .map(|_| {
                let mut s = ExactSum::new();
                for _ in 0..20 {
                    s.add_product(rng.value(), rng.value());
                }
                s
            })
            .collect();
        let mut words = [0u64; ExactSum::WORDS];
        let mut merged = ExactSum::new();
        for p in &parts {
            for (w, x) in words.iter_mut().zip(p.to_words()) {
                *w = w.wrapping_add(x);
            }
            merged.merge(p);
        }
        assert_eq!(ExactSum::from_words(&words).to_words(), merged.to_words());
    }
}
