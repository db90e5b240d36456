//! aarch64: the bf16 conversions with NEON, part of the target (no detection needed).
//!
//! - bf16 → f32 is `vshll` (widen and shift by 16); f32 → bf16 rounds to nearest even with the
//!   integer formula of [`Storage::from_f32`] for `bf16`, four lanes at a time.
//! - f16 stays on the portable code: the NEON half-precision conversions (`vcvt_f32_f16`) take
//!   `float16x4_t`, which stable Rust does not have yet.
//! - Stochastic rounding stays on the portable code too: NEON has no 64-bit multiply for the
//!   random bits, and the scalar multiplier of aarch64 is as fast.

use core::arch::aarch64::*;

use half::bf16;

use super::{half_bits, half_bits_mut, Convert, Portable};
use crate::storage::{Dtype, Storage};

/// The NEON conversions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Neon;

impl Convert for Neon {
    #[inline(always)]
    fn load<T: Storage>(self, src: &[T], dst: &mut [f32]) {
        match half_bits(src) {
            Some(bits) if T::DTYPE == Dtype::BF16 => load_bf16(bits, dst),
            _ => Portable.load(src, dst),
        }
    }

    #[inline(always)]
    fn store<T: Storage>(self, src: &[f32], dst: &mut [T]) {
        if T::DTYPE == Dtype::BF16 {
            if let Some(bits) = half_bits_mut(dst) {
                return store_bf16(src, bits);
            }
        }
        Portable.store(src, dst)
    }

    #[inline(always)]
    fn store_stochastic<T: Storage>(self, src: &[f32], dst: &mut [T], key: u64, first: usize) {
        Portable.store_stochastic(src, dst, key, first)
    }
}

/// `dst[i] = src[i]` widened from bf16.
#[inline(always)]
fn load_bf16(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: NEON is part of this target; i + 8 ≤ n ≤ both lengths.
        unsafe {
            let h = vld1q_u16(src.as_ptr().add(i));
            let low = vshll_n_u16::<16>(vget_low_u16(h));
            let high = vshll_high_n_u16::<16>(h);
            vst1q_f32(dst.as_mut_ptr().add(i), vreinterpretq_f32_u32(low));
            vst1q_f32(dst.as_mut_ptr().add(i + 4), vreinterpretq_f32_u32(high));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = bf16::from_bits(src[j]).to_f32();
    }
}

/// `dst[i]` = the bits of `src[i]` rounded to nearest even as bf16.
#[inline(always)]
fn store_bf16(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: NEON is part of this target; i + 8 ≤ n ≤ both lengths.
        unsafe {
            let low = nearest(vld1q_f32(src.as_ptr().add(i)));
            let high = nearest(vld1q_f32(src.as_ptr().add(i + 4)));
            vst1q_u16(
                dst.as_mut_ptr().add(i),
                vcombine_u16(vmovn_u32(low), vmovn_u32(high)),
            );
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = <bf16 as Storage>::from_f32(src[j]).to_bits();
    }
}

/// `(b + 0x7fff + lsb) >> 16`, or the quieted top half of a NaN (as `Storage::from_f32`).
///
/// # Safety
/// NEON is available (it is part of every target this module compiles for).
#[inline(always)]
unsafe fn nearest(x: float32x4_t) -> uint32x4_t {
    let b = vreinterpretq_u32_f32(x);
    let top = vshrq_n_u32::<16>(b);
    let lsb = vandq_u32(top, vdupq_n_u32(1));
    let rounded = vshrq_n_u32::<16>(vaddq_u32(b, vaddq_u32(vdupq_n_u32(0x7fff), lsb)));
    let quiet = vorrq_u32(top, vdupq_n_u32(0x40));
    let is_nan = vcgtq_u32(vandq_u32(b, vdupq_n_u32(0x7fff_ffff)), vdupq_n_u32(0x7f80_0000));
    vbslq_u32(is_nan, quiet, rounded)
}

#[cfg(test)]
mod tests {
    use super::super::tests::check_convert;
    use super::*;

    #[test]
    fn neon_is_the_scalar_conversion() {
        check_convert::<bf16, _>(Neon);
        check_convert::<half::f16, _>(Neon);
        check_convert::<f32, _>(Neon);
    }
}
