//! x86-64: the conversions with AVX-512 (F, BW, DQ, VL), chosen at run time, sixteen lanes at a
//! time; the tail of a slice is one masked block (masked-off lanes touch no memory).
//!
//! - bf16 → f32 is a zero-extension and a shift. f32 → bf16 rounds to nearest even: with
//!   AVX512-BF16's `vcvtneps2bf16` where the CPU has it and no lane is subnormal (the
//!   instruction flushes those to zero), else with the integer formula of [`Storage::from_f32`]
//!   for `bf16` (the instruction gives its bits for every other input, NaN included). The
//!   instruction is written as assembly: its intrinsic needs a target feature that the element
//!   loop is not compiled with (AVX-512 CPUs without BF16 run the same loop), and a call per
//!   block would cost more than the conversion saves.
//! - f16 ↔ f32 is AVX-512F's `vcvtph2ps` / `vcvtps2ph` with round-to-nearest-even (the same
//!   instructions as F16C's, sixteen lanes wide: the same bits as `half`, checked exhaustively).
//! - Stochastic rounding draws sixteen elements' bits with splitmix64 in 64-bit lanes (AVX-512DQ
//!   multiplies 64-bit lanes in one instruction) and decides with the same IEEE operations as
//!   [`Storage::from_f32_stochastic`], on the packed 16-bit results.
//!
//! - q8 blocks decode each map entry from its code (a permute over the map's fractional powers
//!   and an exponent subtraction, where a gather would load each lane) and encode with
//!   [`crate::q8::Lanes`]' two permutes for the code's neighbours, the block's random bits in
//!   32-bit lanes: the bits of [`crate::q8::quantize`] and [`crate::q8::dequantize`].
//!
//! Each function takes the [`Avx512`] token, which only [`Avx512::detect`] creates, so the
//! `#[target_feature]` code runs only on CPUs that have the features.

use core::arch::x86_64::*;

use super::{half_bits, half_bits_mut, Convert, Portable, SlicesJob, WithConvert};
use crate::q8::{BlockEncode, Lanes, Map, Q8Block, BLOCK, HASH_MULTIPLIERS, SIGNED_LANES, UNSIGNED_LANES};
use crate::storage::{Dtype, Storage};

/// Proof that the CPU has AVX-512 F, BW, DQ and VL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Avx512 {
    /// The CPU has AVX512-BF16 too.
    bf16: bool,
}

impl Avx512 {
    /// The token, if this CPU has AVX-512 F, BW, DQ and VL.
    pub fn detect() -> Option<Avx512> {
        let has = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512dq")
            && std::is_x86_feature_detected!("avx512vl");
        let bf16 = std::is_x86_feature_detected!("avx512bf16");
        has.then_some(Avx512 { bf16 })
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
                store_nearest::<Bf16>(src, bits, self)
            } else {
                store_nearest::<F16>(src, bits, self)
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
                store_stochastic::<Bf16>(src, bits, key, first, self)
            } else {
                store_stochastic::<F16>(src, bits, key, first, self)
            }
        }
    }

    #[inline(always)]
    fn load_q8(self, block: &Q8Block, map: Map, dst: &mut [f32]) {
        // SAFETY: `self` exists only where the features were detected.
        unsafe {
            match map {
                Map::Unsigned => load_q8::<true>(block, dst),
                Map::Signed => load_q8::<false>(block, dst),
            }
        }
    }

    #[inline(always)]
    fn store_q8(self, src: &[f32], map: Map, slot_key: u64, first: usize, block: &mut Q8Block) {
        let Some(encode) = BlockEncode::start(src, slot_key, first, block) else {
            return;
        };
        // SAFETY: as in `load_q8`.
        unsafe {
            match map {
                Map::Unsigned => store_q8::<true>(src, encode, &mut block.codes),
                Map::Signed => store_q8::<false>(src, encode, &mut block.codes),
            }
        }
    }
}

/// A half-precision type as sixteen packed 16-bit lanes.
trait HalfLanes {
    /// The bits of each lane of `x` rounded to nearest even, with `avx512`'s instructions.
    unsafe fn nearest(x: __m512, avx512: Avx512) -> __m256i;
    /// The `f32` value of each lane's bits.
    unsafe fn widen(bits: __m256i) -> __m512;
}

struct Bf16;
struct F16;

impl HalfLanes for Bf16 {
    /// `(b + 0x7fff + lsb) >> 16`, or the quieted top half of a NaN (as `Storage::from_f32`).
    #[inline(always)]
    unsafe fn nearest(x: __m512, avx512: Avx512) -> __m256i {
        const SUBNORMAL: i32 = 0x20;
        if avx512.bf16 && _mm512_fpclass_ps_mask::<SUBNORMAL>(x) == 0 {
            return vcvtneps2bf16(x);
        }
        let b = _mm512_castps_si512(x);
        let odd = _mm512_test_epi32_mask(b, _mm512_set1_epi32(0x1_0000));
        let half_down = _mm512_add_epi32(b, _mm512_set1_epi32(0x7fff));
        let rounded = _mm512_mask_add_epi32(half_down, odd, half_down, _mm512_set1_epi32(1));
        let is_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        let rounded = _mm512_mask_or_epi32(rounded, is_nan, b, _mm512_set1_epi32(0x40_0000));
        // The top halves: a word permute, not a narrowing store, which some cores run slowly.
        let odd_words = _mm512_set_epi16(
            31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1, 31, 29, 27, 25, 23, 21, 19, 17, 15,
            13, 11, 9, 7, 5, 3, 1,
        );
        _mm512_castsi512_si256(_mm512_permutexvar_epi16(odd_words, rounded))
    }

    #[inline(always)]
    unsafe fn widen(bits: __m256i) -> __m512 {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)))
    }
}

/// AVX512-BF16's `vcvtneps2bf16`: each lane of `x` rounded to nearest even, subnormals
/// flushed to zero.
///
/// # Safety
/// The CPU has AVX512-BF16.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn vcvtneps2bf16(x: __m512) -> __m256i {
    let bits: __m256i;
    // SAFETY: the caller's CPU has the instruction; it reads and writes registers only.
    core::arch::asm!(
        "vcvtneps2bf16 {bits}, {x}",
        x = in(zmm_reg) x,
        bits = lateout(ymm_reg) bits,
        options(pure, nomem, nostack, preserves_flags),
    );
    bits
}

impl HalfLanes for F16 {
    #[inline(always)]
    unsafe fn nearest(x: __m512, _: Avx512) -> __m256i {
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
unsafe fn store_nearest<H: HalfLanes>(src: &[f32], dst: &mut [u16], avx512: Avx512) {
    each_block(src.len().min(dst.len()), |i, k| {
        // In bounds: the lanes of `k` lie before both lengths.
        let x = _mm512_maskz_loadu_ps(k, src.as_ptr().add(i));
        _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i).cast(), k, H::nearest(x, avx512));
    });
}

/// `dst[i]` = the bits of `src[i]` rounded stochastically with the bits of element `first + i`.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
#[inline]
unsafe fn store_stochastic<H: HalfLanes>(
    src: &[f32],
    dst: &mut [u16],
    key: u64,
    first: usize,
    avx512: Avx512,
) {
    each_block(src.len().min(dst.len()), |i, k| {
        // In bounds: the lanes of `k` lie before both lengths.
        let x = _mm512_maskz_loadu_ps(k, src.as_ptr().add(i));
        let bits = round_stochastic::<H>(x, random_bits(key, (first + i) as u64), avx512);
        _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i).cast(), k, bits);
    });
}

/// [`Storage::from_f32_stochastic`] on sixteen lanes, `r24` holding each lane's 24 random bits.
#[inline(always)]
unsafe fn round_stochastic<H: HalfLanes>(x: __m512, r24: __m512i, avx512: Avx512) -> __m256i {
    let inf = _mm512_set1_ps(f32::INFINITY);
    let one = _mm256_set1_epi16(1);
    let nearest = H::nearest(x, avx512);
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

/// [`Convert::load_q8`] with the unsigned map or the signed one: `±table[j] · scale` per lane,
/// the same multiply as [`crate::q8::dequantize`]'s.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
#[inline]
unsafe fn load_q8<const UNSIGNED: bool>(block: &Q8Block, dst: &mut [f32]) {
    let lanes = if UNSIGNED { &UNSIGNED_LANES } else { &SIGNED_LANES };
    let powers = _mm512_loadu_ps(lanes.powers.as_ptr());
    let scale = _mm512_set1_ps(block.scale);
    each_block(dst.len().min(BLOCK), |i, k| {
        // In bounds: the lanes of `k` lie before `dst.len()` and the 256 codes.
        let c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, block.codes.as_ptr().add(i).cast()));
        let t = if UNSIGNED {
            map_entry(lanes, powers, c)
        } else {
            // Bit 7 is the sign: moved to the entry's sign bit.
            let sign = _mm512_slli_epi32::<24>(c);
            let m = map_entry(lanes, powers, _mm512_and_si512(c, _mm512_set1_epi32(0x7f)));
            let signed =
                _mm512_ternarylogic_epi32::<0x78>(_mm512_castps_si512(m), sign, _mm512_set1_epi32(i32::MIN));
            _mm512_castsi512_ps(signed)
        };
        _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), k, _mm512_mul_ps(t, scale));
    });
}

/// `table[j]` for each lane's index `j < N`: `2^−q · powers[r]` for `N − 1 − j = K · q + r`,
/// the power of two subtracted from the exponent (every entry is normal), so exactly the
/// table's `f32`; 0 for `j = 0`.
#[inline(always)]
unsafe fn map_entry(lanes: &Lanes, powers: __m512, j: __m512i) -> __m512 {
    let k = lanes.per_octave;
    let n = _mm512_sub_epi32(_mm512_set1_epi32(lanes.offset + 127 * k), j);
    let q = _mm512_srli_epi32::<11>(_mm512_madd_epi16(n, _mm512_set1_epi32(lanes.reciprocal)));
    let r = _mm512_sub_epi32(n, _mm512_madd_epi16(q, _mm512_set1_epi32(k)));
    let power = _mm512_castps_si512(_mm512_permutexvar_ps(r, powers));
    let entry = _mm512_sub_epi32(power, _mm512_slli_epi32::<23>(q));
    _mm512_castsi512_ps(_mm512_maskz_mov_epi32(_mm512_test_epi32_mask(j, j), entry))
}

/// The codes of `src` in the block `encode` starts, with the unsigned map or the signed one:
/// [`Encoder::codes`] sixteen elements at a time.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
#[inline]
unsafe fn store_q8<const UNSIGNED: bool>(src: &[f32], encode: BlockEncode, codes: &mut [u8; BLOCK]) {
    let encoder = Encoder::new(if UNSIGNED { &UNSIGNED_LANES } else { &SIGNED_LANES }, encode);
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let mut element = _mm512_add_epi32(_mm512_set1_epi32(encode.first as i32), lanes);
    each_block(src.len().min(BLOCK), |i, k| {
        // In bounds: the lanes of `k` lie before `src.len()` ≤ 256.
        let x = _mm512_maskz_loadu_ps(k, src.as_ptr().add(i));
        let c = encoder.codes::<UNSIGNED>(x, encoder.random_bits(element));
        _mm_mask_storeu_epi8(codes.as_mut_ptr().add(i).cast(), k, _mm512_cvtepi32_epi8(c));
        element = _mm512_add_epi32(element, _mm512_set1_epi32(16));
    });
}

/// One block's encode in sixteen lanes: its [`BlockEncode`] and its map's [`Lanes`] broadcast.
struct Encoder {
    a: __m512,
    sigma: __m512,
    iota: __m512,
    k0: __m512i,
    k1: __m512i,
    buckets: __m512i,
    lo: __m512,
    step: __m512,
    bottom: __m512,
    bottom_step: __m512,
    per_octave: __m512i,
    offset: __m512i,
}

impl Encoder {
    #[inline(always)]
    unsafe fn new(lanes: &Lanes, encode: BlockEncode) -> Self {
        let d = encode.divisor;
        Encoder {
            a: _mm512_set1_ps(d.a),
            sigma: _mm512_set1_ps(d.sigma),
            iota: _mm512_set1_ps(d.iota),
            k0: _mm512_set1_epi32(encode.key.lo as i32),
            k1: _mm512_set1_epi32(encode.key.hi as i32),
            buckets: _mm512_loadu_si512(lanes.buckets.as_ptr().cast()),
            lo: _mm512_loadu_ps(lanes.lo.as_ptr()),
            // Scaled by 2⁻⁸ (exactly) for the random bits' 2⁸.
            step: _mm512_mul_ps(_mm512_loadu_ps(lanes.step.as_ptr()), _mm512_set1_ps(1.0 / 256.0)),
            bottom: _mm512_set1_ps(lanes.bottom),
            bottom_step: _mm512_set1_ps(lanes.bottom_step * (1.0 / 256.0)),
            per_octave: _mm512_set1_epi32(lanes.per_octave),
            offset: _mm512_set1_epi32(lanes.offset),
        }
    }

    /// [`crate::q8::Map::random_bits`] of each lane's element (its index's low half), times
    /// 2⁸: the top 24 of the hash's 32 bits in place (one operation fewer than the shift; the
    /// steps are scaled by 2⁻⁸ to match).
    #[inline(always)]
    unsafe fn random_bits(&self, element: __m512i) -> __m512i {
        let x = _mm512_xor_si512(element, self.k0);
        let x = _mm512_xor_si512(x, _mm512_srli_epi32::<16>(x));
        let x = _mm512_mullo_epi32(x, _mm512_set1_epi32(HASH_MULTIPLIERS[0] as i32));
        // x ^ (x >> 15) ^ k₁.
        let x = _mm512_ternarylogic_epi32::<0x96>(x, _mm512_srli_epi32::<15>(x), self.k1);
        let x = _mm512_mullo_epi32(x, _mm512_set1_epi32(HASH_MULTIPLIERS[1] as i32));
        // (x ^ (x >> 16)) & !0xff.
        _mm512_ternarylogic_epi32::<0x28>(x, _mm512_srli_epi32::<16>(x), _mm512_set1_epi32(!0xff))
    }

    /// The code of each lane's `x` rounded with `bits` (the 24 random bits times 2⁸): the
    /// quotient, the index and the decision of the scalar encode, each product rounded from the
    /// same real number.
    #[inline(always)]
    unsafe fn codes<const UNSIGNED: bool>(&self, x: __m512, bits: __m512i) -> __m512i {
        let m = _mm512_abs_ps(x);
        let quotient = _mm512_mul_ps(_mm512_mul_ps(m, self.sigma), self.iota);
        let at_max = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(m, self.a);
        let u = _mm512_mask_mov_ps(quotient, at_max, _mm512_set1_ps(1.0));
        let u_bits = _mm512_castps_si512(u);
        let mant = _mm512_and_si512(u_bits, _mm512_set1_epi32(0x007f_ffff));
        // The bucket is the index's low 4 bits: the mantissa's top 4.
        let carry = _mm512_permutexvar_epi32(_mm512_srli_epi32::<19>(u_bits), self.buckets);
        let i = _mm512_srli_epi32::<23>(_mm512_add_epi32(mant, carry));
        // The exponent fits a 16-bit lane's half: one multiply-add is K · E.
        let octave = _mm512_madd_epi16(_mm512_srli_epi32::<23>(u_bits), self.per_octave);
        let inside = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(u, self.bottom);
        let w = _mm512_castsi512_ps(_mm512_or_si512(mant, _mm512_set1_epi32(126 << 23)));
        // r · 2⁸ converts exactly (24 significant bits); r · step is the same real number.
        let r = _mm512_cvtepu32_ps(bits);
        let j = _mm512_add_epi32(octave, i);
        if UNSIGNED {
            // Below bottom the code is 1 for a nonzero x (which never rounds to 0), else 0.
            let m = _mm512_castps_si512(m);
            let j = _mm512_mask_add_epi32(_mm512_min_epu32(m, _mm512_set1_epi32(1)), inside, j, self.offset);
            let lo = _mm512_permutexvar_ps(i, self.lo);
            let step = _mm512_mul_ps(r, _mm512_permutexvar_ps(i, self.step));
            let up = _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(inside, step, _mm512_sub_ps(w, lo));
            _mm512_mask_add_epi32(j, up, j, _mm512_set1_epi32(1))
        } else {
            let v = _mm512_mask_mov_ps(u, inside, w);
            let lo = _mm512_maskz_permutexvar_ps(inside, i, self.lo);
            let step = _mm512_mask_permutexvar_ps(self.bottom_step, inside, i, self.step);
            let step = _mm512_mul_ps(r, step);
            let up = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(step, _mm512_sub_ps(v, lo));
            let j = _mm512_maskz_add_epi32(inside, j, self.offset);
            let j = _mm512_mask_add_epi32(j, up, j, _mm512_set1_epi32(1));
            // Negative x with a nonzero code; −0 has the sign bit but code 0.
            let negative = _mm512_movepi32_mask(_mm512_castps_si512(x)) & (inside | up);
            _mm512_mask_or_epi32(j, negative, j, _mm512_set1_epi32(0x80))
        }
    }
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
    use super::super::tests::{check_conversions, check_q8};
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn avx512_is_the_scalar_conversion() {
        let Some(avx512) = Avx512::detect() else {
            return;
        };
        // With AVX512-BF16's conversion where the CPU has it, and without.
        for avx512 in [avx512, Avx512 { bf16: false }] {
            check_conversions(avx512);
        }
    }

    #[test]
    fn avx512_q8_is_the_scalar_encode() {
        let Some(avx512) = Avx512::detect() else {
            return;
        };
        check_q8(avx512);
    }

    /// Round to nearest of every one of the 2³² `f32` inputs gives the scalar conversion's bits
    /// (f16: and `half`'s software conversion's, which the scalar one may run on F16C). Two
    /// minutes in release builds: `cargo test -p homeadam-core --release -- --ignored every_f32`.
    #[test]
    #[ignore]
    fn every_f32_rounds_to_nearest_as_the_scalar_conversion() {
        let Some(avx512) = Avx512::detect() else {
            return;
        };
        let mut xs = std::vec![0.0f32; 1 << 16];
        let mut b = std::vec![bf16::ZERO; 1 << 16];
        let mut h = std::vec![f16::ZERO; 1 << 16];
        // With AVX512-BF16's conversion where the CPU has it, and without.
        for avx512 in [avx512, Avx512 { bf16: false }] {
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
            assert_eq!(wrong, [0, 0], "mismatches: bf16, f16 ({avx512:?})");
        }
    }
}
