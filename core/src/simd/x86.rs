//! x86-64: the conversions with AVX2 and F16C, chosen at run time.
//!
//! - bf16 → f32 is a zero-extension and a shift; f32 → bf16 rounds to nearest even with the
//!   integer formula of [`Storage::from_f32`] for `bf16`, eight lanes at a time.
//! - f16 ↔ f32 is F16C's `vcvtph2ps` / `vcvtps2ph` with round-to-nearest-even: for every one of
//!   the 2³² `f32` inputs and 2¹⁶ `f16` inputs, the same bits as `half`'s software conversion
//!   (checked exhaustively once; NaNs keep their payload's top bits and are quieted by both),
//!   as long as MXCSR is left at its default (no flush-to-zero), as Rust leaves it.
//! - Stochastic rounding draws the bits of eight elements with splitmix64 in 64-bit lanes (AVX2
//!   has no 64-bit multiply: three 32-bit ones) and decides with the same IEEE operations as
//!   [`Storage::from_f32_stochastic`].
//! - q8 blocks decode by gathering map entries, and encode eight elements at a time with
//!   [`crate::q8::Lanes`]' lookups (each a pair of permutes over 16 entries), the block's random
//!   bits in 32-bit lanes: the bits of [`crate::q8::quantize`].
//!
//! Each function takes the [`Avx2`] token, which only [`Avx2::detect`] creates, so the
//! `#[target_feature]` code runs only on CPUs that have the features.

use core::arch::x86_64::*;

use half::{bf16, f16};

use super::{half_bits, half_bits_mut, Convert, Portable, SlicesJob, WithConvert};
use crate::bits::stochastic_bits;
use crate::q8::{
    BlockEncode, Lanes, Map, Q8Block, BLOCK, HASH_MULTIPLIERS, SIGNED, SIGNED_LANES, UNSIGNED, UNSIGNED_LANES,
};
use crate::storage::{Dtype, Storage};

/// Proof that the CPU has AVX2 and F16C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Avx2(());

impl Avx2 {
    /// The token, if this CPU has AVX2 and F16C.
    pub fn detect() -> Option<Avx2> {
        let has = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c");
        has.then_some(Avx2(()))
    }
}

/// Runs `job` compiled for AVX2 and F16C: its element loop runs 8 lanes wide, next to the
/// conversions (bit-identical: the same IEEE operations; Rust never fuses a multiply and an add).
///
/// # Safety
/// The CPU has AVX2 and F16C (which `avx2` proves).
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn run_avx2<J: WithConvert>(job: J, avx2: Avx2) -> J::Output {
    job.run(avx2)
}

/// [`super::Isa::run_on_slices`] with Avx2.
///
/// # Safety
/// As [`run_avx2`].
#[inline(never)]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn run_avx2_on_slices<J: SlicesJob>(
    job: J,
    avx2: Avx2,
    p: &mut [f32],
    g: &[f32],
    s0: &mut [f32],
    s1: &mut [f32],
    s2: &mut [f32],
) {
    job.run(avx2, p, g, [s0, s1, s2]);
}

impl Convert for Avx2 {
    #[inline(always)]
    fn load<T: Storage>(self, src: &[T], dst: &mut [f32]) {
        let Some(bits) = half_bits(src) else {
            return Portable.load(src, dst);
        };
        if T::DTYPE == Dtype::BF16 {
            // SAFETY: `self` exists only where AVX2 and F16C were detected.
            unsafe { load_bf16(bits, dst) }
        } else {
            // SAFETY: as above; the other 2-byte type is f16.
            unsafe { load_f16(bits, dst) }
        }
    }

    #[inline(always)]
    fn store<T: Storage>(self, src: &[f32], dst: &mut [T]) {
        let Some(bits) = half_bits_mut(dst) else {
            return Portable.store(src, dst);
        };
        if T::DTYPE == Dtype::BF16 {
            // SAFETY: `self` exists only where AVX2 and F16C were detected.
            unsafe { store_nearest::<Bf16Lanes>(src, bits) }
        } else {
            // SAFETY: as above; the other 2-byte type is f16.
            unsafe { store_nearest::<F16Lanes>(src, bits) }
        }
    }

    #[inline(always)]
    fn store_stochastic<T: Storage>(self, src: &[f32], dst: &mut [T], key: u64, first: usize) {
        let Some(bits) = half_bits_mut(dst) else {
            return Portable.store_stochastic(src, dst, key, first);
        };
        if T::DTYPE == Dtype::BF16 {
            // SAFETY: `self` exists only where AVX2 and F16C were detected.
            unsafe { store_stochastic::<Bf16Lanes>(src, bits, key, first) }
        } else {
            // SAFETY: as above; the other 2-byte type is f16.
            unsafe { store_stochastic::<F16Lanes>(src, bits, key, first) }
        }
    }

    #[inline(always)]
    fn load_q8(self, block: &Q8Block, map: Map, dst: &mut [f32]) {
        // SAFETY: `self` exists only where AVX2 and F16C were detected.
        unsafe { load_q8(block, map, dst) }
    }

    #[inline(always)]
    fn store_q8(self, src: &[f32], map: Map, slot_key: u64, first: usize, block: &mut Q8Block) {
        let Some(encode) = BlockEncode::start(src, slot_key, first, block) else {
            return;
        };
        // SAFETY: `self` exists only where AVX2 and F16C were detected.
        unsafe {
            match map {
                Map::Unsigned => store_q8::<true>(src, encode, &mut block.codes),
                Map::Signed => store_q8::<false>(src, encode, &mut block.codes),
            }
        }
    }
}

/// The codes of `src` in the block `encode` starts, with the unsigned map or the signed one:
/// [`Encoder::codes`] eight elements at a time, the scalar encode for the tail.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn store_q8<const UNSIGNED: bool>(src: &[f32], encode: BlockEncode, codes: &mut [u8; BLOCK]) {
    let encoder = Encoder::new(if UNSIGNED { &UNSIGNED_LANES } else { &SIGNED_LANES }, encode);
    let n = src.len().min(BLOCK);
    let mut element = _mm256_add_epi32(
        _mm256_set1_epi32(encode.first as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    );
    // Byte 0 of each 32-bit lane to the low 4 bytes of its 128-bit half, then both halves' to
    // the low 8 bytes.
    let bytes = _mm256_setr_epi8(
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1,
    );
    let halves = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
    let mut i = 0;
    while i + 8 <= n {
        // In bounds: i + 8 ≤ n ≤ both lengths.
        let x = _mm256_loadu_ps(src.as_ptr().add(i));
        let c = encoder.codes::<UNSIGNED>(x, encoder.random_bits(element));
        let packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(c, bytes), halves);
        _mm_storel_epi64(codes.as_mut_ptr().add(i).cast(), _mm256_castsi256_si128(packed));
        element = _mm256_add_epi32(element, _mm256_set1_epi32(8));
        i += 8;
    }
    let map = if UNSIGNED { Map::Unsigned } else { Map::Signed };
    for j in i..n {
        codes[j] = encode.code(map, src[j], j);
    }
}

/// `table[index & 15]` in each lane, for the two halves of a 16-entry table: each permute reads
/// the index's low 3 bits, and `high` holds bit 3 in its sign bit.
#[inline(always)]
unsafe fn lookup16(table: [__m256; 2], index: __m256i, high: __m256i) -> __m256 {
    let low_half = _mm256_permutevar8x32_ps(table[0], index);
    let high_half = _mm256_permutevar8x32_ps(table[1], index);
    _mm256_blendv_ps(low_half, high_half, _mm256_castsi256_ps(high))
}

/// A 16-entry table as two registers.
#[inline(always)]
unsafe fn table16(entries: &[f32; 16]) -> [__m256; 2] {
    [
        _mm256_loadu_ps(entries.as_ptr()),
        _mm256_loadu_ps(entries.as_ptr().add(8)),
    ]
}

/// One block's encode in eight lanes: its [`BlockEncode`] and its map's [`Lanes`] broadcast.
struct Encoder {
    a: __m256,
    sigma: __m256,
    iota: __m256,
    k0: __m256i,
    k1: __m256i,
    buckets: [__m256; 2],
    lo: [__m256; 2],
    step: [__m256; 2],
    bottom: __m256,
    bottom_step: __m256,
    per_octave: __m256i,
    offset: __m256i,
}

impl Encoder {
    #[inline(always)]
    unsafe fn new(lanes: &Lanes, encode: BlockEncode) -> Self {
        let d = encode.divisor;
        let buckets = lanes.buckets.map(|b| f32::from_bits(b as u32));
        Encoder {
            a: _mm256_set1_ps(d.a),
            sigma: _mm256_set1_ps(d.sigma),
            iota: _mm256_set1_ps(d.iota),
            k0: _mm256_set1_epi32(encode.key.lo as i32),
            k1: _mm256_set1_epi32(encode.key.hi as i32),
            buckets: table16(&buckets),
            lo: table16(&lanes.lo),
            step: table16(&lanes.step),
            bottom: _mm256_set1_ps(lanes.bottom),
            bottom_step: _mm256_set1_ps(lanes.bottom_step),
            per_octave: _mm256_set1_epi32(lanes.per_octave),
            offset: _mm256_set1_epi32(lanes.offset),
        }
    }

    /// The 24 bits of [`crate::q8::Map::random_bits`] of each lane's element (its index's low
    /// half).
    #[inline(always)]
    unsafe fn random_bits(&self, element: __m256i) -> __m256i {
        let x = _mm256_xor_si256(element, self.k0);
        let x = _mm256_xor_si256(x, _mm256_srli_epi32::<16>(x));
        let x = _mm256_mullo_epi32(x, _mm256_set1_epi32(HASH_MULTIPLIERS[0] as i32));
        let x = _mm256_xor_si256(_mm256_xor_si256(x, _mm256_srli_epi32::<15>(x)), self.k1);
        let x = _mm256_mullo_epi32(x, _mm256_set1_epi32(HASH_MULTIPLIERS[1] as i32));
        _mm256_srli_epi32::<8>(_mm256_xor_si256(x, _mm256_srli_epi32::<16>(x)))
    }

    /// The code of each lane's `x` rounded with its 24 bits `r`: the quotient, the index and the
    /// decision of the scalar encode, each product rounded from the same real number (see
    /// [`Lanes`]).
    #[inline(always)]
    unsafe fn codes<const UNSIGNED: bool>(&self, x: __m256, r: __m256i) -> __m256i {
        let one = _mm256_set1_epi32(1);
        let m = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff)));
        let quotient = _mm256_mul_ps(_mm256_mul_ps(m, self.sigma), self.iota);
        let at_max = _mm256_cmp_ps::<_CMP_EQ_OQ>(m, self.a);
        let u = _mm256_blendv_ps(quotient, _mm256_set1_ps(1.0), at_max);
        let u_bits = _mm256_castps_si256(u);
        let mant = _mm256_and_si256(u_bits, _mm256_set1_epi32(0x007f_ffff));
        // The bucket is the mantissa's top 4 bits: bits 19 to 22 of u, bit 22 moved to the sign.
        let bucket = _mm256_srli_epi32::<19>(u_bits);
        let carry = lookup16(self.buckets, bucket, _mm256_slli_epi32::<9>(u_bits));
        let i = _mm256_srli_epi32::<23>(_mm256_add_epi32(mant, _mm256_castps_si256(carry)));
        let i_high = _mm256_slli_epi32::<28>(i);
        // The exponent fits a 16-bit lane's half: one multiply-add is K · E.
        let octave = _mm256_madd_epi16(_mm256_srli_epi32::<23>(u_bits), self.per_octave);
        let j = _mm256_add_epi32(_mm256_add_epi32(octave, i), self.offset);
        // At and above bottom, the bracket unscaled by the octave; below, (u, 0, bottom).
        let inside = _mm256_cmp_ps::<_CMP_GE_OQ>(u, self.bottom);
        let w = _mm256_castsi256_ps(_mm256_or_si256(mant, _mm256_set1_epi32(126 << 23)));
        let v = _mm256_blendv_ps(u, w, inside);
        let lo = _mm256_and_ps(lookup16(self.lo, i, i_high), inside);
        let step = _mm256_blendv_ps(self.bottom_step, lookup16(self.step, i, i_high), inside);
        let j = _mm256_and_si256(j, _mm256_castps_si256(inside));
        let step = _mm256_mul_ps(_mm256_cvtepi32_ps(r), step);
        let up = _mm256_cmp_ps::<_CMP_LT_OQ>(step, _mm256_sub_ps(v, lo));
        // The mask is −1 where true.
        let j = _mm256_sub_epi32(j, _mm256_castps_si256(up));
        if UNSIGNED {
            // A nonzero x never rounds to 0.
            let zero = _mm256_cmpeq_epi32(_mm256_castps_si256(m), _mm256_setzero_si256());
            _mm256_max_epi32(j, _mm256_andnot_si256(zero, one))
        } else {
            // Negative x with a nonzero code; −0 has the sign bit but code 0.
            let sign = _mm256_and_si256(
                _mm256_srli_epi32::<24>(_mm256_castps_si256(x)),
                _mm256_set1_epi32(0x80),
            );
            let zero = _mm256_cmpeq_epi32(j, _mm256_setzero_si256());
            _mm256_or_si256(j, _mm256_andnot_si256(zero, sign))
        }
    }
}

/// [`Convert::load_q8`]: eight codes at a time, each map entry gathered by its code (its
/// magnitude's on the signed map, whose bit 7 becomes the sign bit), times the scale; the same
/// multiply, operand for operand, as [`crate::q8::dequantize`].
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn load_q8(block: &Q8Block, map: Map, dst: &mut [f32]) {
    let (table, index, sign) = match map {
        Map::Unsigned => (UNSIGNED.as_ptr(), 0xff, 0),
        Map::Signed => (SIGNED.as_ptr(), 0x7f, 0x80),
    };
    let scale = _mm256_set1_ps(block.scale);
    let (index, sign) = (_mm256_set1_epi32(index), _mm256_set1_epi32(sign << 24));
    let whole = dst.len() / 8 * 8;
    for (out, codes) in dst[..whole].chunks_exact_mut(8).zip(block.codes.chunks_exact(8)) {
        let c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(codes.as_ptr().cast()));
        let t = _mm256_i32gather_ps::<4>(table, _mm256_and_si256(c, index));
        let s = _mm256_and_si256(_mm256_slli_epi32::<24>(c), sign);
        let v = _mm256_xor_ps(t, _mm256_castsi256_ps(s));
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(v, scale));
    }
    for (d, &c) in dst[whole..].iter_mut().zip(&block.codes[whole..]) {
        *d = map.value(c) * block.scale;
    }
}

/// A half-precision type as eight 32-bit lanes holding its bits in their low 16.
trait HalfLanes {
    /// The scalar type, for the tails.
    type Scalar: Storage;
    /// The bits of each lane of `x` rounded to nearest even.
    unsafe fn nearest(x: __m256) -> __m256i;
    /// [`HalfLanes::nearest`] packed into eight 16-bit lanes.
    #[inline(always)]
    unsafe fn nearest_packed(x: __m256) -> __m128i {
        narrow(Self::nearest(x))
    }
    /// The `f32` value of each lane's bits.
    unsafe fn widen(bits: __m256i) -> __m256;
}

struct Bf16Lanes;
struct F16Lanes;

impl HalfLanes for Bf16Lanes {
    type Scalar = bf16;

    /// `(b + 0x7fff + lsb) >> 16`, or the quieted top half of a NaN (as `Storage::from_f32`).
    #[inline(always)]
    unsafe fn nearest(x: __m256) -> __m256i {
        let b = _mm256_castps_si256(x);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
        let rounded = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
        let quiet = _mm256_or_si256(b, _mm256_set1_epi32(0x40_0000));
        let is_nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
        _mm256_srli_epi32::<16>(_mm256_blendv_epi8(rounded, quiet, is_nan))
    }

    #[inline(always)]
    unsafe fn widen(bits: __m256i) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(bits))
    }
}

impl HalfLanes for F16Lanes {
    type Scalar = f16;

    #[inline(always)]
    unsafe fn nearest(x: __m256) -> __m256i {
        _mm256_cvtepu16_epi32(Self::nearest_packed(x))
    }

    #[inline(always)]
    unsafe fn nearest_packed(x: __m256) -> __m128i {
        _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)
    }

    #[inline(always)]
    unsafe fn widen(bits: __m256i) -> __m256 {
        _mm256_cvtph_ps(narrow(bits))
    }
}

/// The low 16 bits of each 32-bit lane, packed (the lanes hold values ≤ 0xffff).
#[inline(always)]
unsafe fn narrow(v: __m256i) -> __m128i {
    _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
}

/// `dst[i] = src[i]` widened from bf16.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn load_bf16(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // In bounds: i + 8 ≤ n ≤ both lengths.
        let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
        let w = Bf16Lanes::widen(_mm256_cvtepu16_epi32(h));
        _mm256_storeu_ps(dst.as_mut_ptr().add(i), w);
        i += 8;
    }
    for j in i..n {
        dst[j] = bf16::from_bits(src[j]).to_f32();
    }
}

/// `dst[i] = src[i]` widened from f16 with F16C.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn load_f16(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // In bounds: i + 8 ≤ n ≤ both lengths.
        let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
        _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        i += 8;
    }
    // The tail through the same instruction, so that the function stays small enough to inline
    // into the element loop (`half`'s conversion would not be).
    if i < n {
        let mut tail = [0u16; 8];
        tail[..n - i].copy_from_slice(&src[i..n]);
        let mut wide = [0.0f32; 8];
        _mm256_storeu_ps(
            wide.as_mut_ptr(),
            _mm256_cvtph_ps(_mm_loadu_si128(tail.as_ptr().cast())),
        );
        dst[i..n].copy_from_slice(&wide[..n - i]);
    }
}

/// `dst[i]` = the bits of `src[i]` rounded to nearest even.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn store_nearest<H: HalfLanes>(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // In bounds: i + 8 ≤ n ≤ both lengths.
        let bits = H::nearest_packed(_mm256_loadu_ps(src.as_ptr().add(i)));
        _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), bits);
        i += 8;
    }
    // The tail through the same instructions, as in `load_f16`.
    if i < n {
        let mut tail = [0.0f32; 8];
        tail[..n - i].copy_from_slice(&src[i..n]);
        let mut bits = [0u16; 8];
        _mm_storeu_si128(
            bits.as_mut_ptr().cast(),
            H::nearest_packed(_mm256_loadu_ps(tail.as_ptr())),
        );
        dst[i..n].copy_from_slice(&bits[..n - i]);
    }
}

/// `dst[i]` = the bits of `src[i]` rounded stochastically with the bits of element `first + i`.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn store_stochastic<H: HalfLanes>(src: &[f32], dst: &mut [u16], key: u64, first: usize) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // In bounds: i + 8 ≤ n ≤ both lengths.
        let x = _mm256_loadu_ps(src.as_ptr().add(i));
        let bits = round_stochastic::<H>(x, random_bits(key, (first + i) as u64));
        _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), narrow(bits));
        i += 8;
    }
    for j in i..n {
        let r = stochastic_bits(key, (first + j) as u64);
        dst[j] = H::Scalar::from_f32_stochastic(src[j], r).to_bits32() as u16;
    }
}

/// [`Storage::from_f32_stochastic`] on eight lanes, `r24` holding each lane's 24 random bits.
#[inline(always)]
unsafe fn round_stochastic<H: HalfLanes>(x: __m256, r24: __m256i) -> __m256i {
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let abs = |v: __m256| _mm256_and_ps(v, magnitude);
    let inf = _mm256_set1_ps(f32::INFINITY);
    let nearest = H::nearest(x);
    let nearest_f = H::widen(nearest);
    let ax = abs(x);
    // Exact, or not finite: round to nearest.
    let keep = _mm256_or_ps(
        _mm256_cmp_ps::<_CMP_EQ_OQ>(nearest_f, x),
        _mm256_cmp_ps::<_CMP_NLT_UQ>(ax, inf),
    );
    // Sign-magnitude bits: nearest − 1 is one ulp toward zero (the mask is −1 where true).
    let above = _mm256_cmp_ps::<_CMP_GT_OQ>(abs(nearest_f), ax);
    let toward_zero = _mm256_add_epi32(nearest, _mm256_castps_si256(above));
    let away = _mm256_add_epi32(toward_zero, _mm256_set1_epi32(1));
    let t = abs(H::widen(toward_zero));
    let n = abs(H::widen(away));
    let u = _mm256_mul_ps(_mm256_cvtepi32_ps(r24), _mm256_set1_ps(1.0 / 16_777_216.0));
    let up = _mm256_cmp_ps::<_CMP_LT_OQ>(_mm256_mul_ps(u, _mm256_sub_ps(n, t)), _mm256_sub_ps(ax, t));
    // A finite value never rounds to ±∞.
    let up = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(n, inf), up);
    let chosen = _mm256_blendv_epi8(toward_zero, away, _mm256_castps_si256(up));
    _mm256_blendv_epi8(chosen, nearest, _mm256_castps_si256(keep))
}

/// [`stochastic_bits`] of elements `index .. index + 8`, one per 32-bit lane.
#[inline(always)]
unsafe fn random_bits(key: u64, index: u64) -> __m256i {
    let key = _mm256_set1_epi64x(key as i64);
    let index = _mm256_set1_epi64x(index as i64);
    let low = _mm256_add_epi64(index, _mm256_setr_epi64x(0, 1, 2, 3));
    let high = _mm256_add_epi64(index, _mm256_setr_epi64x(4, 5, 6, 7));
    let low = _mm256_srli_epi64::<40>(mix64(_mm256_xor_si256(key, low)));
    let high = _mm256_srli_epi64::<40>(mix64(_mm256_xor_si256(key, high)));
    // Each 64-bit lane's value fits its low 32 bits: gather them into eight 32-bit lanes.
    let even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    _mm256_blend_epi32::<0b1111_0000>(
        _mm256_permutevar8x32_epi32(low, even),
        _mm256_permutevar8x32_epi32(high, even),
    )
}

/// [`crate::bits::mix64`] on four 64-bit lanes.
#[inline(always)]
unsafe fn mix64(z: __m256i) -> __m256i {
    let z = _mm256_xor_si256(z, _mm256_srli_epi64::<30>(z));
    let z = mul64(z, 0xBF58_476D_1CE4_E5B9);
    let z = _mm256_xor_si256(z, _mm256_srli_epi64::<27>(z));
    let z = mul64(z, 0x94D0_49BB_1331_11EB);
    _mm256_xor_si256(z, _mm256_srli_epi64::<31>(z))
}

/// The wrapping product of each 64-bit lane with `c`: lo·lo + ((hi·lo + lo·hi) << 32).
#[inline(always)]
unsafe fn mul64(a: __m256i, c: u64) -> __m256i {
    let b = _mm256_set1_epi64x(c as i64);
    let low = _mm256_mul_epu32(a, b);
    let cross = _mm256_add_epi64(
        _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), b),
        _mm256_mul_epu32(a, _mm256_set1_epi64x((c >> 32) as i64)),
    );
    _mm256_add_epi64(low, _mm256_slli_epi64::<32>(cross))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check_conversions, check_q8};
    use super::*;

    #[test]
    fn avx2_is_the_scalar_conversion() {
        let Some(avx2) = Avx2::detect() else {
            return;
        };
        check_conversions(avx2);
    }

    #[test]
    fn avx2_q8_is_the_scalar_encode() {
        let Some(avx2) = Avx2::detect() else {
            return;
        };
        check_q8(avx2);
    }

    #[test]
    fn avx2_decodes_q8_as_the_scalar_loop() {
        let Some(avx2) = Avx2::detect() else {
            return;
        };
        let mut block = Q8Block::ZERO;
        for (i, c) in block.codes.iter_mut().enumerate() {
            *c = (i as u8).wrapping_mul(167);
        }
        for scale in [1.0f32, 3.7e-5, 1e-40, 0.0, f32::NAN, f32::MAX] {
            block.scale = scale;
            for map in [Map::Unsigned, Map::Signed] {
                for len in (0..=40).chain([255, 256]) {
                    let (mut fast, mut slow) = ([0.0f32; 256], [0.0f32; 256]);
                    avx2.load_q8(&block, map, &mut fast[..len]);
                    crate::q8::dequantize(&block, map, &mut slow[..len]);
                    for (f, s) in fast.iter().zip(&slow) {
                        assert_eq!(f.to_bits(), s.to_bits(), "{map:?} {scale:e} {len}");
                    }
                }
            }
        }
    }
}
