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

use core::arch::aarch64::*;
use core::arch::asm;

use half::{bf16, f16};

use super::{half_bits, half_bits_mut, Convert, Portable};
use crate::bits::stochastic_bits;
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
    use super::super::tests::check_convert;
    use super::*;

    #[test]
    fn neon_is_the_scalar_conversion() {
        check_convert::<bf16, _>(Neon);
        check_convert::<f16, _>(Neon);
        check_convert::<f32, _>(Neon);
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
