//! aarch64: the half-precision conversions with NEON, part of the target (no detection needed).
//!
//! - bf16 → f32 is `vshll` (widen and shift by 16); f32 → bf16 rounds to nearest even with the
//!   integer formula of [`Storage::from_f32`] for `bf16`, four lanes at a time.
//! - f16 ↔ f32 is `fcvtl`/`fcvtl2` and `fcvtn`/`fcvtn2` (ARMv8.0 Advanced SIMD, no FP16
//!   extension needed), written with `asm!` because stable Rust has no `float16x4_t` for the
//!   `vcvt_f32_f16` intrinsics. With the FPCR Linux leaves to a thread (round to nearest even;
//!   FZ, FZ16, DN and AHP clear) they give the bits of `half`'s software conversions for every
//!   one of the 2¹⁶ `f16` and 2³² `f32` inputs (checked exhaustively once under QEMU):
//!   subnormals are kept, overflow becomes ±∞, and NaNs keep their payload's top bits, quieted.
//! - Stochastic rounding draws the random bits with the scalar multiplier (NEON has no 64-bit
//!   multiply; aarch64's scalar one is as fast), eight at a time, and decides with the same IEEE
//!   operations as [`Storage::from_f32_stochastic`] on eight lanes.
//! - q8 blocks decode each map entry from its code (a byte lookup over the map's 16 fractional
//!   powers, the octave subtracted from the exponent) and encode sixteen elements at a time with
//!   [`crate::q8::Lanes`]' lookups and the 32-bit hash in four lanes: the bits of
//!   [`crate::q8::dequantize`] and [`crate::q8::quantize`].

use core::arch::aarch64::*;
use core::arch::asm;

use half::{bf16, f16};

use super::{half_bits, half_bits_mut, Convert, Portable};
use crate::bits::stochastic_bits;
use crate::q8::{BlockEncode, Lanes, Map, Q8Block, BLOCK, HASH_MULTIPLIERS, SIGNED_LANES, UNSIGNED_LANES};
use crate::storage::{Dtype, Storage};

/// The NEON conversions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Neon;

impl Convert for Neon {
    #[inline(always)]
    fn load<T: Storage>(self, src: &[T], dst: &mut [f32]) {
        match half_bits(src) {
            Some(bits) if T::DTYPE == Dtype::BF16 => load::<Bf16Lanes>(bits, dst),
            // The other 2-byte type is f16.
            Some(bits) => load::<F16Lanes>(bits, dst),
            None => Portable.load(src, dst),
        }
    }

    #[inline(always)]
    fn store<T: Storage>(self, src: &[f32], dst: &mut [T]) {
        match half_bits_mut(dst) {
            Some(bits) if T::DTYPE == Dtype::BF16 => store_nearest::<Bf16Lanes>(src, bits),
            Some(bits) => store_nearest::<F16Lanes>(src, bits),
            None => Portable.store(src, dst),
        }
    }

    #[inline(always)]
    fn store_stochastic<T: Storage>(self, src: &[f32], dst: &mut [T], key: u64, first: usize) {
        match half_bits_mut(dst) {
            Some(bits) if T::DTYPE == Dtype::BF16 => store_stochastic::<Bf16Lanes>(src, bits, key, first),
            Some(bits) => store_stochastic::<F16Lanes>(src, bits, key, first),
            None => Portable.store_stochastic(src, dst, key, first),
        }
    }

    #[inline(always)]
    fn load_q8(self, block: &Q8Block, map: Map, dst: &mut [f32]) {
        match map {
            Map::Unsigned => load_q8::<true>(block, dst),
            Map::Signed => load_q8::<false>(block, dst),
        }
    }

    #[inline(always)]
    fn store_q8(self, src: &[f32], map: Map, slot_key: u64, first: usize, block: &mut Q8Block) {
        let Some(encode) = BlockEncode::start(src, slot_key, first, block) else {
            return;
        };
        match map {
            Map::Unsigned => store_q8::<true>(src, encode, &mut block.codes),
            Map::Signed => store_q8::<false>(src, encode, &mut block.codes),
        }
    }
}

/// [`Convert::load_q8`]: sixteen codes at a time, each map entry computed from its code
/// ([`map_entry`]; its magnitude's on the signed map, whose bit 7 becomes the sign bit), times
/// the scale; the same multiply, operand for operand, as [`crate::q8::dequantize`].
#[inline(always)]
fn load_q8<const UNSIGNED: bool>(block: &Q8Block, dst: &mut [f32]) {
    let (lanes, map) = if UNSIGNED {
        (&UNSIGNED_LANES, Map::Unsigned)
    } else {
        (&SIGNED_LANES, Map::Signed)
    };
    let n = dst.len().min(BLOCK);
    let whole = n / 16 * 16;
    // SAFETY: NEON is part of this target; every load and store lies within the first `whole`
    // codes and elements.
    unsafe {
        let powers = table16(&lanes.powers);
        let scale = vdupq_n_f32(block.scale);
        for (out, codes) in dst[..whole]
            .chunks_exact_mut(16)
            .zip(block.codes.chunks_exact(16))
        {
            let c = vld1q_u8(codes.as_ptr());
            let (low, high) = (vmovl_u8(vget_low_u8(c)), vmovl_high_u8(c));
            let quarters = [
                vmovl_u16(vget_low_u16(low)),
                vmovl_high_u16(low),
                vmovl_u16(vget_low_u16(high)),
                vmovl_high_u16(high),
            ];
            for (k, c) in quarters.into_iter().enumerate() {
                let t = if UNSIGNED {
                    map_entry(lanes, powers, c)
                } else {
                    let sign = vshlq_n_u32::<24>(vandq_u32(c, vdupq_n_u32(0x80)));
                    let m = map_entry(lanes, powers, vandq_u32(c, vdupq_n_u32(0x7f)));
                    vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(m), sign))
                };
                vst1q_f32(out.as_mut_ptr().add(4 * k), vmulq_f32(t, scale));
            }
        }
    }
    for (d, &c) in dst[whole..n].iter_mut().zip(&block.codes[whole..]) {
        *d = map.value(c) * block.scale;
    }
}

/// `table[j]` for each lane's index `j < N`: `2^−q · powers[r]` for `N − 1 − j = K · q + r`,
/// the power of two subtracted from the exponent (every entry is normal), so exactly the
/// table's `f32`; 0 for `j = 0`.
///
/// # Safety
/// NEON is available (it is part of every target this module compiles for).
#[inline(always)]
unsafe fn map_entry(lanes: &Lanes, powers: uint8x16x4_t, j: uint32x4_t) -> float32x4_t {
    let k = lanes.per_octave as u32;
    let n = vsubq_u32(vdupq_n_u32((lanes.offset + 127 * lanes.per_octave) as u32), j);
    let q = vshrq_n_u32::<11>(vmulq_n_u32(n, lanes.reciprocal as u32));
    let r = vsubq_u32(n, vmulq_n_u32(q, k));
    let power = vreinterpretq_u32_f32(lookup16(powers, r));
    let entry = vsubq_u32(power, vshlq_n_u32::<23>(q));
    vreinterpretq_f32_u32(vbicq_u32(entry, vceqzq_u32(j)))
}

/// The codes of `src` in the block `encode` starts, with the unsigned map or the signed one:
/// [`Encoder::codes`] sixteen elements at a time (four vectors, narrowed to one of bytes), the
/// scalar encode for the tail.
#[inline(always)]
fn store_q8<const UNSIGNED: bool>(src: &[f32], encode: BlockEncode, codes: &mut [u8; BLOCK]) {
    let n = src.len().min(BLOCK);
    let mut i = 0;
    // SAFETY: NEON is part of this target; i + 16 ≤ n ≤ both lengths.
    unsafe {
        let encoder = Encoder::new(if UNSIGNED { &UNSIGNED_LANES } else { &SIGNED_LANES }, encode);
        let lane = vld1q_u32([0, 1, 2, 3].as_ptr());
        while i + 16 <= n {
            let quarter = |k: usize| {
                let element = vaddq_u32(vdupq_n_u32(encode.first.wrapping_add((i + 4 * k) as u32)), lane);
                let x = vld1q_f32(src.as_ptr().add(i + 4 * k));
                vmovn_u32(encoder.codes::<UNSIGNED>(x, encoder.random_bits(element)))
            };
            let low = vcombine_u16(quarter(0), quarter(1));
            let high = vcombine_u16(quarter(2), quarter(3));
            vst1q_u8(
                codes.as_mut_ptr().add(i),
                vcombine_u8(vmovn_u16(low), vmovn_u16(high)),
            );
            i += 16;
        }
    }
    let map = if UNSIGNED { Map::Unsigned } else { Map::Signed };
    for j in i..n {
        codes[j] = encode.code(map, src[j], j);
    }
}

/// A 16-entry `f32` table as the 64 bytes of one `vqtbl4q_u8` lookup.
///
/// # Safety
/// NEON is available (it is part of every target this module compiles for).
#[inline(always)]
unsafe fn table16(entries: &[f32; 16]) -> uint8x16x4_t {
    let bytes = entries.as_ptr().cast::<u8>();
    uint8x16x4_t(
        vld1q_u8(bytes),
        vld1q_u8(bytes.add(16)),
        vld1q_u8(bytes.add(32)),
        vld1q_u8(bytes.add(48)),
    )
}

/// `table[index & 15]` in each lane: the lane's four bytes looked up at `4i`, …, `4i + 3`
/// (each byte's index computed without a carry into the next, since `4i + 3 < 64`).
///
/// # Safety
/// NEON is available (it is part of every target this module compiles for).
#[inline(always)]
unsafe fn lookup16(table: uint8x16x4_t, index: uint32x4_t) -> float32x4_t {
    let first = vshlq_n_u32::<2>(vandq_u32(index, vdupq_n_u32(15)));
    let bytes = vaddq_u32(vmulq_n_u32(first, 0x0101_0101), vdupq_n_u32(0x0302_0100));
    vreinterpretq_f32_u8(vqtbl4q_u8(table, vreinterpretq_u8_u32(bytes)))
}

/// One block's encode in four lanes: its [`BlockEncode`] and its map's [`Lanes`] broadcast.
struct Encoder {
    a: float32x4_t,
    sigma: float32x4_t,
    iota: float32x4_t,
    k0: uint32x4_t,
    k1: uint32x4_t,
    buckets: uint8x16x4_t,
    lo: uint8x16x4_t,
    step: uint8x16x4_t,
    bottom: float32x4_t,
    bottom_step: float32x4_t,
    per_octave: u32,
    offset: uint32x4_t,
}

impl Encoder {
    /// # Safety
    /// NEON is available (it is part of every target this module compiles for).
    #[inline(always)]
    unsafe fn new(lanes: &Lanes, encode: BlockEncode) -> Self {
        let d = encode.divisor;
        let buckets = lanes.buckets.map(|b| f32::from_bits(b as u32));
        Encoder {
            a: vdupq_n_f32(d.a),
            sigma: vdupq_n_f32(d.sigma),
            iota: vdupq_n_f32(d.iota),
            k0: vdupq_n_u32(encode.key.lo),
            k1: vdupq_n_u32(encode.key.hi),
            buckets: table16(&buckets),
            lo: table16(&lanes.lo),
            step: table16(&lanes.step),
            bottom: vdupq_n_f32(lanes.bottom),
            bottom_step: vdupq_n_f32(lanes.bottom_step),
            per_octave: lanes.per_octave as u32,
            // Negative: added with wrap-around, as a 32-bit lane does.
            offset: vdupq_n_u32(lanes.offset as u32),
        }
    }

    /// The 24 bits of [`crate::q8::Map::random_bits`] of each lane's element (its index's low
    /// half).
    ///
    /// # Safety
    /// NEON is available (it is part of every target this module compiles for).
    #[inline(always)]
    unsafe fn random_bits(&self, element: uint32x4_t) -> uint32x4_t {
        let x = veorq_u32(element, self.k0);
        let x = veorq_u32(x, vshrq_n_u32::<16>(x));
        let x = vmulq_n_u32(x, HASH_MULTIPLIERS[0]);
        let x = veorq_u32(veorq_u32(x, vshrq_n_u32::<15>(x)), self.k1);
        let x = vmulq_n_u32(x, HASH_MULTIPLIERS[1]);
        vshrq_n_u32::<8>(veorq_u32(x, vshrq_n_u32::<16>(x)))
    }

    /// The code of each lane's `x` rounded with its 24 bits `r`: the quotient, the index and the
    /// decision of the scalar encode, each product rounded from the same real number (see
    /// [`Lanes`]).
    ///
    /// # Safety
    /// NEON is available (it is part of every target this module compiles for).
    #[inline(always)]
    unsafe fn codes<const UNSIGNED: bool>(&self, x: float32x4_t, r: uint32x4_t) -> uint32x4_t {
        let m_bits = vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x7fff_ffff));
        let m = vreinterpretq_f32_u32(m_bits);
        let quotient = vmulq_f32(vmulq_f32(m, self.sigma), self.iota);
        let u = vbslq_f32(vceqq_f32(m, self.a), vdupq_n_f32(1.0), quotient);
        let u_bits = vreinterpretq_u32_f32(u);
        let mant = vandq_u32(u_bits, vdupq_n_u32(0x007f_ffff));
        // The bucket is the mantissa's top 4 bits: bits 19 to 22 of u.
        let carry = vreinterpretq_u32_f32(lookup16(self.buckets, vshrq_n_u32::<19>(u_bits)));
        let i = vshrq_n_u32::<23>(vaddq_u32(mant, carry));
        let octave = vmulq_n_u32(vshrq_n_u32::<23>(u_bits), self.per_octave);
        let j = vaddq_u32(vaddq_u32(octave, i), self.offset);
        // At and above bottom, the bracket unscaled by the octave; below, (u, 0, bottom).
        let inside = vcgeq_f32(u, self.bottom);
        let w = vreinterpretq_f32_u32(vorrq_u32(mant, vdupq_n_u32(126 << 23)));
        let v = vbslq_f32(inside, w, u);
        let lo = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(lookup16(self.lo, i)), inside));
        let step = vbslq_f32(inside, lookup16(self.step, i), self.bottom_step);
        let j = vandq_u32(j, inside);
        let step = vmulq_f32(vcvtq_f32_u32(r), step);
        let up = vcltq_f32(step, vsubq_f32(v, lo));
        // The mask is all ones (−1) where true.
        let j = vsubq_u32(j, up);
        if UNSIGNED {
            // A nonzero x never rounds to 0.
            vmaxq_u32(j, vbicq_u32(vdupq_n_u32(1), vceqzq_u32(m_bits)))
        } else {
            // Negative x with a nonzero code; −0 has the sign bit but code 0.
            let sign = vandq_u32(vshrq_n_u32::<24>(vreinterpretq_u32_f32(x)), vdupq_n_u32(0x80));
            vorrq_u32(j, vbicq_u32(sign, vceqzq_u32(j)))
        }
    }
}

/// A half-precision type as eight 16-bit lanes of bits, converted from and to two `f32x4`.
///
/// Each function is `unsafe` only because NEON intrinsics are: NEON is part of every target
/// this module compiles for.
trait HalfLanes {
    /// The scalar type, for the tails.
    type Scalar: Storage;
    /// The bits of each lane of `low` (lanes 0–3) and `high` (lanes 4–7), rounded to nearest even.
    unsafe fn narrow(low: float32x4_t, high: float32x4_t) -> uint16x8_t;
    /// The `f32` values of lanes 0–3 and 4–7.
    unsafe fn widen(bits: uint16x8_t) -> (float32x4_t, float32x4_t);
}

struct Bf16Lanes;
struct F16Lanes;

impl HalfLanes for Bf16Lanes {
    type Scalar = bf16;

    #[inline(always)]
    unsafe fn narrow(low: float32x4_t, high: float32x4_t) -> uint16x8_t {
        vcombine_u16(vmovn_u32(bf16_nearest(low)), vmovn_u32(bf16_nearest(high)))
    }

    #[inline(always)]
    unsafe fn widen(bits: uint16x8_t) -> (float32x4_t, float32x4_t) {
        let low = vshll_n_u16::<16>(vget_low_u16(bits));
        let high = vshll_high_n_u16::<16>(bits);
        (vreinterpretq_f32_u32(low), vreinterpretq_f32_u32(high))
    }
}

impl HalfLanes for F16Lanes {
    type Scalar = f16;

    /// `fcvtn` + `fcvtn2`: rounds with FPCR.RMode (nearest even).
    #[inline(always)]
    unsafe fn narrow(low: float32x4_t, high: float32x4_t) -> uint16x8_t {
        let bits: uint16x8_t;
        // `out` (not `lateout`): `bits` is written before `high` is read, so they must differ.
        // No `preserves_flags`: the conversion sets FPSR's cumulative exception bits.
        asm!(
            "fcvtn {bits:v}.4h, {low:v}.4s",
            "fcvtn2 {bits:v}.8h, {high:v}.4s",
            bits = out(vreg) bits,
            low = in(vreg) low,
            high = in(vreg) high,
            options(pure, nomem, nostack),
        );
        bits
    }

    /// `fcvtl` + `fcvtl2`: exact.
    #[inline(always)]
    unsafe fn widen(bits: uint16x8_t) -> (float32x4_t, float32x4_t) {
        let (low, high): (float32x4_t, float32x4_t);
        asm!(
            "fcvtl {low:v}.4s, {bits:v}.4h",
            "fcvtl2 {high:v}.4s, {bits:v}.8h",
            low = out(vreg) low,
            high = out(vreg) high,
            bits = in(vreg) bits,
            options(pure, nomem, nostack),
        );
        (low, high)
    }
}

/// `dst[i] = src[i]` widened to `f32`.
#[inline(always)]
fn load<H: HalfLanes>(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: NEON is part of this target; i + 8 ≤ n ≤ both lengths.
        unsafe {
            let (low, high) = H::widen(vld1q_u16(src.as_ptr().add(i)));
            vst1q_f32(dst.as_mut_ptr().add(i), low);
            vst1q_f32(dst.as_mut_ptr().add(i + 4), high);
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = H::Scalar::from_bits32(src[j] as u32).to_f32();
    }
}

/// `dst[i]` = the bits of `src[i]` rounded to nearest even.
#[inline(always)]
fn store_nearest<H: HalfLanes>(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: NEON is part of this target; i + 8 ≤ n ≤ both lengths.
        unsafe {
            let low = vld1q_f32(src.as_ptr().add(i));
            let high = vld1q_f32(src.as_ptr().add(i + 4));
            vst1q_u16(dst.as_mut_ptr().add(i), H::narrow(low, high));
        }
        i += 8;
    }
    for j in i..n {
        dst[j] = H::Scalar::from_f32(src[j]).to_bits32() as u16;
    }
}

/// `dst[i]` = the bits of `src[i]` rounded stochastically with the bits of element `first + i`.
#[inline(always)]
fn store_stochastic<H: HalfLanes>(src: &[f32], dst: &mut [u16], key: u64, first: usize) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        let r: [u32; 8] = core::array::from_fn(|k| stochastic_bits(key, (first + i + k) as u64));
        // SAFETY: NEON is part of this target; i + 8 ≤ n ≤ both lengths.
        unsafe {
            let low = vld1q_f32(src.as_ptr().add(i));
            let high = vld1q_f32(src.as_ptr().add(i + 4));
            let r24 = (vld1q_u32(r.as_ptr()), vld1q_u32(r.as_ptr().add(4)));
            vst1q_u16(dst.as_mut_ptr().add(i), round_stochastic::<H>(low, high, r24));
        }
        i += 8;
    }
    for j in i..n {
        let r = stochastic_bits(key, (first + j) as u64);
        dst[j] = H::Scalar::from_f32_stochastic(src[j], r).to_bits32() as u16;
    }
}

/// [`Storage::from_f32_stochastic`] on eight lanes (`low`: 0–3, `high`: 4–7), `r24` holding each
/// lane's 24 random bits.
///
/// # Safety
/// NEON is available (it is part of every target this module compiles for).
#[inline(always)]
unsafe fn round_stochastic<H: HalfLanes>(
    low: float32x4_t,
    high: float32x4_t,
    r24: (uint32x4_t, uint32x4_t),
) -> uint16x8_t {
    let inf = vdupq_n_f32(f32::INFINITY);
    let scale = vdupq_n_f32(1.0 / 16_777_216.0);
    // The 32-bit lane masks of lanes 0–3 and 4–7 as one 16-bit lane mask.
    let masks = |low: uint32x4_t, high: uint32x4_t| vcombine_u16(vmovn_u32(low), vmovn_u32(high));
    let nearest = H::narrow(low, high);
    let nearest_f = H::widen(nearest);
    // Exact, or not finite (`!(|x| < ∞)` holds for NaN too): round to nearest.
    let keep = |x: float32x4_t, nearest_f: float32x4_t| {
        vorrq_u32(vceqq_f32(nearest_f, x), vmvnq_u32(vcaltq_f32(x, inf)))
    };
    let keep = masks(keep(low, nearest_f.0), keep(high, nearest_f.1));
    // Sign-magnitude bits: nearest − 1 is one ulp toward zero (the mask is all ones where true).
    let above = masks(vcagtq_f32(nearest_f.0, low), vcagtq_f32(nearest_f.1, high));
    let toward_zero = vaddq_u16(nearest, above);
    let away = vaddq_u16(toward_zero, vdupq_n_u16(1));
    let (t, n) = (H::widen(toward_zero), H::widen(away));
    let up = |x: float32x4_t, t: float32x4_t, n: float32x4_t, r24: uint32x4_t| {
        let (ax, t, n) = (vabsq_f32(x), vabsq_f32(t), vabsq_f32(n));
        let u = vmulq_f32(vcvtq_f32_u32(r24), scale);
        let up = vcltq_f32(vmulq_f32(u, vsubq_f32(n, t)), vsubq_f32(ax, t));
        // A finite value never rounds to ±∞.
        vbicq_u32(up, vceqq_f32(n, inf))
    };
    let up = masks(up(low, t.0, n.0, r24.0), up(high, t.1, n.1, r24.1));
    let chosen = vbslq_u16(up, away, toward_zero);
    vbslq_u16(keep, nearest, chosen)
}

/// `(b + 0x7fff + lsb) >> 16`, or the quieted top half of a NaN (as `Storage::from_f32`).
///
/// # Safety
/// NEON is available (it is part of every target this module compiles for).
#[inline(always)]
unsafe fn bf16_nearest(x: float32x4_t) -> uint32x4_t {
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
    use super::super::tests::{check_conversions, check_q8};
    use super::*;

    #[test]
    fn neon_is_the_scalar_conversion() {
        check_conversions(Neon);
    }

    #[test]
    fn neon_q8_is_the_scalar_encode() {
        check_q8(Neon);
    }

    /// The FPCR the f16 conversions are proven under: round to nearest even (RMode, bits 23:22),
    /// no flush to zero (FZ 24, FZ16 19), NaNs propagated (DN 25), IEEE half precision (AHP 26).
    #[test]
    fn fpcr_is_linux_default() {
        let fpcr: u64;
        // SAFETY: reads a register, nothing else.
        unsafe { asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags)) };
        assert_eq!(fpcr & (0b1_1111 << 22 | 1 << 19), 0, "FPCR {fpcr:#x}");
    }

    /// The f16 stores of `f32::from_bits(high << 16 | low)` for every `high` and each `low`
    /// that differs from `half`'s software conversion (`from_f32_const`: never a hardware path).
    fn f16_store_mismatches(lows: &[u32]) -> u64 {
        let mut mismatches = 0;
        let mut xs = std::vec![0.0f32; 1 << 16];
        let mut hs = std::vec![f16::ZERO; 1 << 16];
        for &low in lows {
            for (high, x) in xs.iter_mut().enumerate() {
                *x = f32::from_bits((high as u32) << 16 | low);
            }
            Neon.store(&xs, &mut hs);
            mismatches += xs
                .iter()
                .zip(&hs)
                .filter(|(x, h)| h.to_bits() != f16::from_f32_const(**x).to_bits())
                .count() as u64;
        }
        mismatches
    }

    /// Loads of every f16, and stores of every sign, exponent and top 7 mantissa bits with the
    /// low 16 bits at every rounding case of normal and subnormal results (below, at and
    /// above a tie, odd and even), against `half`'s software conversions.
    #[test]
    fn f16_is_halfs_software_conversion() {
        let every: std::vec::Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = std::vec![0.0f32; every.len()];
        Neon.load(&every, &mut wide);
        for (w, h) in wide.iter().zip(&every) {
            assert_eq!(w.to_bits(), h.to_f32_const().to_bits(), "{:#x}", h.to_bits());
        }
        let lows: std::vec::Vec<u32> = (0..16)
            .flat_map(|top| [0, 1, 0x7ff, 0x800, 0xfff].map(|rest| top << 12 | rest))
            .collect();
        assert_eq!(f16_store_mismatches(&lows), 0);
    }

    /// Every one of the 2³² `f32` stores (minutes under QEMU: run by hand).
    #[test]
    #[ignore]
    fn f16_store_is_halfs_software_conversion_for_every_f32() {
        let lows: std::vec::Vec<u32> = (0..=u16::MAX as u32).collect();
        assert_eq!(f16_store_mismatches(&lows), 0);
    }
}
