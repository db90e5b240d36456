//! Storage types for parameters, gradients and optimizer state.
//!
//! Every element is loaded into `f32`, updated in `f32`, and stored back in its storage type
//! (DESIGN §3). Stores round to nearest even; parameters may instead round stochastically with
//! bits from [`crate::rounding`].

use half::{bf16, f16};

use crate::bits::abs;

/// The storage type of a slice, as named in configs (`"f32"`, `"f16"`, `"bf16"`; `"q8"` for
/// state only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Dtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16: the top 16 bits of an `f32`.
    BF16,
    /// 8-bit codes in blocks of 256 with an `f32` scale ([`crate::q8`]); state only.
    Q8,
}

impl Dtype {
    /// The config name: `"f32"`, `"f16"`, `"bf16"` or `"q8"`.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::BF16 => "bf16",
            Dtype::Q8 => "q8",
        }
    }

    /// Parses a config name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "f32" => Some(Dtype::F32),
            "f16" => Some(Dtype::F16),
            "bf16" => Some(Dtype::BF16),
            "q8" => Some(Dtype::Q8),
            _ => None,
        }
    }

    /// Bytes per element (q8: its code; the block scales add 4 bytes per 256, see
    /// [`Dtype::slot_bytes`]).
    pub const fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
            Dtype::Q8 => 1,
        }
    }

    /// Bytes of one state slot of `numel` elements, in memory and in the state format
    /// (`usize::MAX` where that overflows, see [`Dtype::checked_slot_bytes`]).
    pub const fn slot_bytes(self, numel: usize) -> usize {
        match self.checked_slot_bytes(numel) {
            Some(bytes) => bytes,
            None => usize::MAX,
        }
    }

    /// [`Dtype::slot_bytes`], or `None` where it overflows (a corrupt element count).
    pub const fn checked_slot_bytes(self, numel: usize) -> Option<usize> {
        match self {
            Dtype::Q8 => numel
                .div_ceil(crate::q8::BLOCK)
                .checked_mul(crate::q8::BLOCK_BYTES),
            _ => numel.checked_mul(self.size()),
        }
    }

    /// Whether parameters and gradients may be stored as this type (all but q8).
    pub const fn is_element(self) -> bool {
        !matches!(self, Dtype::Q8)
    }

    pub(crate) const fn code(self) -> u8 {
        match self {
            Dtype::F32 => 0,
            Dtype::F16 => 1,
            Dtype::BF16 => 2,
            Dtype::Q8 => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Dtype::F32),
            1 => Some(Dtype::F16),
            2 => Some(Dtype::BF16),
            3 => Some(Dtype::Q8),
            _ => None,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A storage element type: `f32`, [`half::f16`] or [`half::bf16`]. Sealed.
pub trait Storage: Copy + Default + PartialEq + Send + Sync + sealed::Sealed + 'static {
    /// The matching [`Dtype`].
    const DTYPE: Dtype;

    /// Exact widening to `f32`.
    fn to_f32(self) -> f32;

    /// Round to nearest, ties to even (NaN stays NaN, overflow becomes ±∞).
    fn from_f32(x: f32) -> Self;

    /// The raw bits, zero-extended.
    fn to_bits32(self) -> u32;

    /// From raw bits (the low `8 * DTYPE.size()` bits are used).
    fn from_bits32(bits: u32) -> Self;

    /// The slice itself when no conversion is needed (`f32`), so the fast path skips staging.
    #[inline(always)]
    fn as_f32(_slice: &[Self]) -> Option<&[f32]> {
        None
    }

    /// The slice itself when no conversion is needed (`f32`).
    #[inline(always)]
    fn as_f32_mut(_slice: &mut [Self]) -> Option<&mut [f32]> {
        None
    }

    /// Stochastic rounding of `x` with 24 uniform random bits `r24` (DESIGN §3).
    ///
    /// With `t` = `x` rounded toward zero and `n` the next value away from zero, the result is
    /// `n` when `u · (|n| − |t|) < |x| − |t|` with `u = r24 · 2⁻²⁴` (both sides exact in `f32`),
    /// else `t`: `n` is chosen with probability `(|x| − |t|) / (|n| − |t|)`. Values exactly
    /// representable and non-finite values round to nearest; a finite value never becomes ±∞.
    #[inline(always)]
    fn from_f32_stochastic(x: f32, r24: u32) -> Self {
        let nearest = Self::from_f32(x);
        let nearest_f = nearest.to_f32();
        if nearest_f == x || !x.is_finite() {
            return nearest;
        }
        // Storage values are sign-magnitude: one step of the bit pattern moves one ulp in magnitude.
        let toward_zero = if abs(nearest_f) > abs(x) {
            Self::from_bits32(nearest.to_bits32() - 1)
        } else {
            nearest
        };
        let away = Self::from_bits32(toward_zero.to_bits32() + 1);
        let t = abs(toward_zero.to_f32());
        let n = abs(away.to_f32());
        if n.is_infinite() {
            return toward_zero;
        }
        let u = r24 as f32 * (1.0 / 16_777_216.0);
        if u * (n - t) < abs(x) - t {
            away
        } else {
            toward_zero
        }
    }
}

impl Storage for f32 {
    const DTYPE: Dtype = Dtype::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn to_bits32(self) -> u32 {
        self.to_bits()
    }
    #[inline(always)]
    fn from_bits32(bits: u32) -> Self {
        f32::from_bits(bits)
    }
    #[inline(always)]
    fn from_f32_stochastic(x: f32, _r24: u32) -> Self {
        x
    }
    #[inline(always)]
    fn as_f32(slice: &[Self]) -> Option<&[f32]> {
        Some(slice)
    }
    #[inline(always)]
    fn as_f32_mut(slice: &mut [Self]) -> Option<&mut [f32]> {
        Some(slice)
    }
}

impl Storage for bf16 {
    const DTYPE: Dtype = Dtype::BF16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    /// Branch-free so that store loops vectorize; equal to `half::bf16::from_f32` (tested).
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        let b = x.to_bits();
        let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
        let quiet_nan = (b >> 16) | 0x0040;
        // (b & 0x7fff_ffff) > 0x7f80_0000, written so that LLVM keeps one compare with a
        // shifted operand on Arm (b << 1 is even, so the sign rotated into bit 0 changes nothing).
        let is_nan = b.rotate_left(1) > 0xff00_0001;
        bf16::from_bits(if is_nan { quiet_nan } else { rounded } as u16)
    }
    #[inline(always)]
    fn to_bits32(self) -> u32 {
        self.to_bits() as u32
    }
    #[inline(always)]
    fn from_bits32(bits: u32) -> Self {
        bf16::from_bits(bits as u16)
    }
}

impl Storage for f16 {
    const DTYPE: Dtype = Dtype::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    #[inline(always)]
    fn to_bits32(self) -> u32 {
        self.to_bits() as u32
    }
    #[inline(always)]
    fn from_bits32(bits: u32) -> Self {
        f16::from_bits(bits as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe_values() -> impl Iterator<Item = f32> {
        let specials = [
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            1e-42,
            -1e-42,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            65504.0,
            65520.0,
            6e-8,
            1.0 + f32::EPSILON,
        ];
        let mut state = 0x1234_5678_9abc_def0u64;
        specials.into_iter().chain((0..200_000).map(move |_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            f32::from_bits((state >> 32) as u32)
        }))
    }

    #[test]
    fn every_bit_pattern_converts_without_overflow() {
        // 0xFFFF_FFFF (a NaN) used to overflow the rounding addition in debug builds.
        for bits in (0..=u32::MAX)
            .step_by(65_521)
            .chain([0xFFFF_FFFF, 0xFFFF_8000, 0x7FFF_FFFF])
        {
            let x = f32::from_bits(bits);
            let y = <bf16 as Storage>::from_f32(x);
            assert_eq!(y.to_f32().is_nan(), x.is_nan(), "{bits:#x}");
            assert_eq!(<f16 as Storage>::from_f32(x).to_f32().is_nan(), x.is_nan());
        }
    }

    #[test]
    fn bf16_round_to_nearest_matches_half() {
        for x in probe_values() {
            let ours = <bf16 as Storage>::from_f32(x);
            let theirs = bf16::from_f32(x);
            assert_eq!(ours.to_bits(), theirs.to_bits(), "x = {x:e} ({:#x})", x.to_bits());
        }
    }

    fn check_stochastic<T: Storage>() {
        for x in probe_values() {
            for r in [0u32, 1, 0x7f_ffff, 0x80_0000, 0xff_ffff, 0x12_3456] {
                let y = T::from_f32_stochastic(x, r).to_f32();
                if !x.is_finite() {
                    continue;
                }
                assert!(y.is_finite(), "{x:e} became {y}");
                let nearest = T::from_f32(x).to_f32();
                if nearest == x {
                    assert_eq!(y.to_bits(), x.to_bits());
                    continue;
                }
                // y is one of the two neighbours of x.
                let down = T::from_f32_stochastic(x, 0xff_ffff).to_f32();
                let up = T::from_f32_stochastic(x, 0).to_f32();
                // Beyond the largest finite value, stochastic rounding saturates.
                let saturated =
                    T::from_f32(abs(up)).to_bits32() + 1 == T::from_f32(f32::INFINITY).to_bits32();
                assert!(abs(down) <= abs(x), "{x:e}: {down:e}");
                assert!(abs(x) <= abs(up) || saturated, "{x:e}: {up:e}");
                assert!(y == down || y == up);
            }
        }
    }

    #[test]
    fn stochastic_rounding_picks_a_neighbour() {
        check_stochastic::<bf16>();
        check_stochastic::<f16>();
    }

    #[test]
    fn stochastic_rounding_is_unbiased() {
        let x = 1.0f32 + 0.3 * (1.0 / 128.0); // 0.3 of a bf16 ulp above 1
        let mut sum = 0.0f64;
        let n = 1 << 16;
        for i in 0..n {
            let r = crate::bits::mix64(i as u64) as u32 >> 8;
            sum += <bf16 as Storage>::from_f32_stochastic(x, r).to_f32() as f64;
        }
        let mean = sum / n as f64;
        assert!((mean - x as f64).abs() < 2e-4, "mean {mean} vs {x}");
    }
}
