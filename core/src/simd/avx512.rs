//! x86-64: the conversions with AVX-512 (F, BW, DQ, VL), chosen at run time, sixteen lanes at a
//! time; the tail of a slice is one masked block (masked-off lanes touch no memory).
//!
//! - bf16 → f32 is a zero-extension and a shift. f32 → bf16 rounds to nearest even with the
//!   integer formula of [`Storage::from_f32`] for `bf16`. AVX512-BF16's `vcvtneps2bf16` is not
//!   used: it flushes denormals (a fix-up per block), and its functions need a target feature
//!   the element loop is not compiled with, so each block would pay a call.
//! - f16 ↔ f32 is AVX-512F's `vcvtph2ps` / `vcvtps2ph` with round-to-nearest-even (the same
//!   instructions as F16C's, sixteen lanes wide: the same bits as `half`, checked exhaustively).
//! - Stochastic rounding draws sixteen elements' bits with splitmix64 in 64-bit lanes (AVX-512DQ
//!   multiplies 64-bit lanes in one instruction) and decides with the same IEEE operations as
//!   [`Storage::from_f32_stochastic`], on the packed 16-bit results.
//!
//! Each function takes the [`Avx512`] token, which only [`Avx512::detect`] creates, so the
//! `#[target_feature]` code runs only on CPUs that have the features.

use core::arch::x86_64::*;

use super::{half_bits, half_bits_mut, Convert, Portable, SlicesJob, WithConvert};
use crate::storage::{Dtype, Storage};

/// Proof that the CPU has AVX-512 F, BW, DQ and VL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Avx512(());

impl Avx512 {
    /// The token, if this CPU has AVX-512 F, BW, DQ and VL.
    pub fn detect() -> Option<Avx512> {
        let has = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512dq")
            && std::is_x86_feature_detected!("avx512vl");
        has.then_some(Avx512(()))
    }
}

/// Runs `job` compiled for AVX-512: its element loop runs 16 lanes wide, next to the conversions
/// (bit-identical: the same IEEE operations; Rust never fuses a multiply and an add).
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL (which `avx512` proves).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
pub(crate) unsafe fn run_avx512<J: WithConvert>(job: J, avx512: Avx512) -> J::Output {
    job.run(avx512)
}

/// [`super::Isa::run_on_slices`] with Avx512.
///
/// # Safety
/// As [`run_avx512`].
#[inline(never)]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
pub(crate) unsafe fn run_avx512_on_slices<J: SlicesJob>(
    job: J,
    avx512: Avx512,
    p: &mut [f32],
    g: &[f32],
    s0: &mut [f32],
    s1: &mut [f32],
    s2: &mut [f32],
) {
    job.run(avx512, p, g, [s0, s1, s2]);
}

impl Convert for Avx512 {
    #[inline(always)]
    fn load<T: Storage>(self, src: &[T], dst: &mut [f32]) {
        let Some(bits) = half_bits(src) else {
            return Portable.load(src, dst);
        };
        // SAFETY: `self` exists only where the features were detected.
        unsafe {
            if T::DTYPE == Dtype::BF16 {
                load::<Bf16>(bits, dst)
            } else {
                load::<F16>(bits, dst)
            }
        }
    }

    #[inline(always)]
    fn store<T: Storage>(self, src: &[f32], dst: &mut [T]) {
        let Some(bits) = half_bits_mut(dst) else {
            return Portable.store(src, dst);
        };
        // SAFETY: `self` exists only where the features were detected.
        unsafe {
            if T::DTYPE == Dtype::BF16 {
                store_nearest::<Bf16>(src, bits)
            } else {
                store_nearest::<F16>(src, bits)
            }
        }
    }

    #[inline(always)]
    fn store_stochastic<T: Storage>(self, src: &[f32], dst: &mut [T], key: u64, first: usize) {
        let Some(bits) = half_bits_mut(dst) else {
            return Portable.store_stochastic(src, dst, key, first);
        };
        // SAFETY: as in `store`.
        unsafe {
            if T::DTYPE == Dtype::BF16 {
                store_stochastic::<Bf16>(src, bits, key, first)
            } else {
                store_stochastic::<F16>(src, bits, key, first)
            }
        }
    }
}

/// A half-precision type as sixteen packed 16-bit lanes.
trait HalfLanes {
    /// The bits of each lane of `x` rounded to nearest even.
    unsafe fn nearest(x: __m512) -> __m256i;
    /// The `f32` value of each lane's bits.
    unsafe fn widen(bits: __m256i) -> __m512;
}

struct Bf16;
struct F16;

impl HalfLanes for Bf16 {
    /// `(b + 0x7fff + lsb) >> 16`, or the quieted top half of a NaN (as `Storage::from_f32`).
    #[inline(always)]
    unsafe fn nearest(x: __m512) -> __m256i {
        let b = _mm512_castps_si512(x);
        let top = _mm512_srli_epi32::<16>(b);
        let lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
        let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(b, bias));
        let magnitude = _mm512_and_si512(b, _mm512_set1_epi32(0x7fff_ffff));
        let is_nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f80_0000));
        let bits = _mm512_mask_or_epi32(rounded, is_nan, top, _mm512_set1_epi32(0x40));
        _mm512_cvtepi32_epi16(bits)
    }

    #[inline(always)]
    unsafe fn widen(bits: __m256i) -> __m512 {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)))
    }
}

impl HalfLanes for F16 {
    #[inline(always)]
    unsafe fn nearest(x: __m512) -> __m256i {
        _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)
    }

    #[inline(always)]
    unsafe fn widen(bits: __m256i) -> __m512 {
        _mm512_cvtph_ps(bits)
    }
}

/// Calls `block(i, k)` for the blocks of 16 elements from `i = 0` on, `k` masking the lanes
/// before `n` (every lane but in a last, partial block: the loop over whole blocks has no masks).
#[inline(always)]
fn each_block(n: usize, mut block: impl FnMut(usize, __mmask16)) {
    let whole = n - n % 16;
    let mut i = 0;
    while i < whole {
        block(i, !0);
        i += 16;
    }
    if i < n {
        block(i, ((1u32 << (n - i)) - 1) as __mmask16);
    }
}

/// `dst[i] = src[i]` widened.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
#[inline]
unsafe fn load<H: HalfLanes>(src: &[u16], dst: &mut [f32]) {
    each_block(src.len().min(dst.len()), |i, k| {
        // In bounds: the lanes of `k` lie before both lengths.
        let h = _mm256_maskz_loadu_epi16(k, src.as_ptr().add(i).cast());
        _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), k, H::widen(h));
    });
}

/// `dst[i]` = the bits of `src[i]` rounded to nearest even.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
#[inline]
unsafe fn store_nearest<H: HalfLanes>(src: &[f32], dst: &mut [u16]) {
    each_block(src.len().min(dst.len()), |i, k| {
        // In bounds: the lanes of `k` lie before both lengths.
        let x = _mm512_maskz_loadu_ps(k, src.as_ptr().add(i));
        _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i).cast(), k, H::nearest(x));
    });
}

/// `dst[i]` = the bits of `src[i]` rounded stochastically with the bits of element `first + i`.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
#[inline]
unsafe fn store_stochastic<H: HalfLanes>(src: &[f32], dst: &mut [u16], key: u64, first: usize) {
    each_block(src.len().min(dst.len()), |i, k| {
        // In bounds: the lanes of `k` lie before both lengths.
        let x = _mm512_maskz_loadu_ps(k, src.as_ptr().add(i));
        let bits = round_stochastic::<H>(x, random_bits(key, (first + i) as u64));
        _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i).cast(), k, bits);
    });
}

/// [`Storage::from_f32_stochastic`] on sixteen lanes, `r24` holding each lane's 24 random bits.
#[inline(always)]
unsafe fn round_stochastic<H: HalfLanes>(x: __m512, r24: __m512i) -> __m256i {
    let inf = _mm512_set1_ps(f32::INFINITY);
    let one = _mm256_set1_epi16(1);
    let nearest = H::nearest(x);
    let nearest_f = H::widen(nearest);
    let ax = _mm512_abs_ps(x);
    // Exact, or not finite: round to nearest.
    let keep = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(nearest_f, x) | _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(ax, inf);
    // Sign-magnitude bits: nearest − 1 is one ulp toward zero.
    let above = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(nearest_f), ax);
    let toward_zero = _mm256_mask_sub_epi16(nearest, above, nearest, one);
    let away = _mm256_add_epi16(toward_zero, one);
    let t = _mm512_abs_ps(H::widen(toward_zero));
    let n = _mm512_abs_ps(H::widen(away));
    let u = _mm512_mul_ps(_mm512_cvtepi32_ps(r24), _mm512_set1_ps(1.0 / 16_777_216.0));
    // A finite value never rounds to ±∞.
    let finite = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(n, inf);
    let up = _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(
        finite,
        _mm512_mul_ps(u, _mm512_sub_ps(n, t)),
        _mm512_sub_ps(ax, t),
    );
    let chosen = _mm256_mask_blend_epi16(up, toward_zero, away);
    _mm256_mask_blend_epi16(keep, chosen, nearest)
}

/// [`crate::bits::stochastic_bits`] of elements `index .. index + 16`, one per 32-bit lane.
#[inline(always)]
unsafe fn random_bits(key: u64, index: u64) -> __m512i {
    let key = _mm512_set1_epi64(key as i64);
    let index = _mm512_set1_epi64(index as i64);
    let low = _mm512_add_epi64(index, _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    let high = _mm512_add_epi64(index, _mm512_setr_epi64(8, 9, 10, 11, 12, 13, 14, 15));
    let low = _mm512_srli_epi64::<40>(mix64(_mm512_xor_si512(key, low)));
    let high = _mm512_srli_epi64::<40>(mix64(_mm512_xor_si512(key, high)));
    // Each 64-bit lane's value fits its low 32 bits: gather them into sixteen 32-bit lanes.
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    _mm512_permutex2var_epi32(low, even, high)
}

/// [`crate::bits::mix64`] on eight 64-bit lanes.
#[inline(always)]
unsafe fn mix64(z: __m512i) -> __m512i {
    let z = _mm512_xor_si512(z, _mm512_srli_epi64::<30>(z));
    let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(0xBF58_476D_1CE4_E5B9u64 as i64));
    let z = _mm512_xor_si512(z, _mm512_srli_epi64::<27>(z));
    let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(0x94D0_49BB_1331_11EBu64 as i64));
    _mm512_xor_si512(z, _mm512_srli_epi64::<31>(z))
}

#[cfg(test)]
mod tests {
    use super::super::tests::check_convert;
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn avx512_is_the_scalar_conversion() {
        let Some(avx512) = Avx512::detect() else {
            return;
        };
        check_convert::<bf16, _>(avx512);
        check_convert::<f16, _>(avx512);
        check_convert::<f32, _>(avx512);
    }

    /// Round to nearest of every one of the 2³² `f32` inputs gives the scalar conversion's bits
    /// (f16: and `half`'s software conversion's, which the scalar one may run on F16C). A minute
    /// in release builds: `cargo test -p homeadam-core --release -- --ignored every_f32`.
    #[test]
    #[ignore]
    fn every_f32_rounds_to_nearest_as_the_scalar_conversion() {
        let Some(avx512) = Avx512::detect() else {
            return;
        };
        let mut xs = std::vec![0.0f32; 1 << 16];
        let mut b = std::vec![bf16::ZERO; 1 << 16];
        let mut h = std::vec![f16::ZERO; 1 << 16];
        let mut wrong = [0u64; 2];
        for high in 0..=u16::MAX as u32 {
            for (low, x) in xs.iter_mut().enumerate() {
                *x = f32::from_bits(high << 16 | low as u32);
            }
            avx512.store(&xs, &mut b);
            avx512.store(&xs, &mut h);
            for ((x, b), h) in xs.iter().zip(&b).zip(&h) {
                wrong[0] += (b.to_bits() != <bf16 as Storage>::from_f32(*x).to_bits()) as u64;
                let f16_ref = <f16 as Storage>::from_f32(*x).to_bits();
                let differs = h.to_bits() != f16_ref || f16_ref != f16::from_f32_const(*x).to_bits();
                wrong[1] += differs as u64;
            }
        }
        assert_eq!(wrong, [0, 0], "mismatches: bf16, f16");
    }
}
