//! [`ExactSum::add_squares`] with AVX-512 (F, BW, DQ, VL), chosen at run time: the same sums as
//! the portable lanes (see the method's documentation), written with intrinsics so that the
//! loop is what it should be: 32 lanes of `f64` (four registers each for σ + Σ q and Σ r), five
//! instructions per eight elements (the conversion, A + x² and x² − q as fused multiply-adds,
//! the step q = new A − A, the sum of r), and the next block's [`Range`] in the same loop (the
//! block after it prefetched), so that reading them overlaps the arithmetic.
//!
//! Whole blocks of [`BLOCK`] elements run here; what is left of a slice (fewer than
//! [`BLOCK`] elements) runs through the portable lanes, compiled for the same features.

use core::arch::x86_64::*;

use super::{add_f32_squares, BlockPlan, Range, SQUARE_LANE_BITS, SQUARE_STAGE};
use crate::exact::ExactSum;
use crate::lines::Lines;
use crate::simd::{Avx512, Convert};
use crate::storage::Storage;

/// `f64` lanes: four registers of eight.
const LANES: usize = 32;
/// Elements per block: 2^L per lane, as in the portable lanes.
const BLOCK: usize = LANES << SQUARE_LANE_BITS;
/// How far past the block whose range is taken the loop asks for the data to be cached (a
/// block: the one after next), so that a slice streamed from memory arrives in time.
const PREFETCH: usize = BLOCK;
/// Elements widened to `f32` at a time (half-precision input): whole blocks, on the stack.
const STAGE: usize = if BLOCK > SQUARE_STAGE { BLOCK } else { SQUARE_STAGE };

/// Adds Σ x² of `xs` to `sum`, exactly (see [`ExactSum::add_squares`]).
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL (which `avx512` proves).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
pub(super) unsafe fn add_squares<S: Storage>(sum: &mut ExactSum, xs: &[S], avx512: Avx512) {
    if let Some(xs) = S::as_f32(xs) {
        return add_f32(sum, xs);
    }
    let mut stage = Lines::<STAGE>::new();
    for chunk in xs.chunks(STAGE) {
        let wide = &mut stage.0[..chunk.len()];
        avx512.load(chunk, wide);
        add_f32(sum, wide);
    }
}

/// Whole blocks in the AVX-512 lanes, the rest in the portable ones.
#[inline(always)]
unsafe fn add_f32(sum: &mut ExactSum, xs: &[f32]) {
    let (blocks, rest) = xs.split_at(xs.len() - xs.len() % BLOCK);
    let mut blocks = blocks.chunks_exact(BLOCK);
    if let Some(first) = blocks.clone().next() {
        let mut range = range_of(first);
        while let Some(block) = blocks.next() {
            let ahead = blocks.clone().next();
            range = match add_block(sum, block, range, ahead) {
                Some(next) => next,
                None => ahead.map_or(range, |a| range_of(a)),
            };
        }
    }
    add_f32_squares(sum, rest);
}

/// The [`Range`] of a block.
#[inline(always)]
unsafe fn range_of(block: &[f32]) -> Range {
    let (mut top, mut low) = (_mm512_setzero_si512(), _mm512_set1_epi32(-1));
    for chunk in block.chunks_exact(16) {
        (top, low) = range_step(top, low, chunk);
    }
    Range {
        top: _mm512_reduce_max_epu32(top),
        low: _mm512_reduce_min_epu32(low),
    }
}

/// Folds 16 elements into the lanes of a [`Range`]: the largest magnitude's bits, and the
/// smallest one's less one (0 wraps around).
#[inline(always)]
unsafe fn range_step(top: __m512i, low: __m512i, chunk: &[f32]) -> (__m512i, __m512i) {
    debug_assert_eq!(chunk.len(), 16);
    // SAFETY: 16 elements; unaligned loads.
    let bits = _mm512_loadu_si512(chunk.as_ptr().cast());
    let a = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fff_ffff));
    let less_one = _mm512_sub_epi32(a, _mm512_set1_epi32(1));
    (_mm512_max_epu32(top, a), _mm512_min_epu32(low, less_one))
}

/// Adds Σ x² of one block whose [`Range`] is `range`; returns the range of `ahead` where its
/// pass ran beside the lanes (as the portable `add_block`, which this mirrors).
#[inline(always)]
unsafe fn add_block(sum: &mut ExactSum, block: &[f32], range: Range, ahead: Option<&[f32]>) -> Option<Range> {
    let plan = BlockPlan::new(sum, block, range)?;
    let sigma = plan.sigma;
    let (q, r, next) = match (plan.floor, ahead) {
        (None, Some(ahead)) => lanes::<false, true>(block, ahead, sigma, 0),
        (None, None) => lanes::<false, false>(block, block, sigma, 0),
        (Some(floor), Some(ahead)) => lanes::<true, true>(block, ahead, sigma, floor),
        (Some(floor), None) => lanes::<true, false>(block, block, sigma, floor),
    };
    // The lanes' sums as integers in their 52 fraction bits (32 lanes: totals below 2^57);
    // q's lanes are already σ + Σ q.
    let mut shifted = r;
    for s in &mut shifted {
        *s = _mm512_add_pd(*s, _mm512_set1_pd(plan.m2));
    }
    plan.add(sum, offsets(q, sigma), offsets(shifted, plan.m2));
    ahead.map(|_| next)
}

/// Σ over the lanes of `sums` of bits(lane) − bits(`base`): where every lane lies in `base`'s
/// binade, each lane's distance from `base` in units of that binade's spacing.
#[inline(always)]
unsafe fn offsets(sums: [__m512d; 4], base: f64) -> i64 {
    let base = _mm512_castpd_si512(_mm512_set1_pd(base));
    let mut total = _mm512_setzero_si512();
    for s in sums {
        total = _mm512_add_epi64(total, _mm512_sub_epi64(_mm512_castpd_si512(s), base));
    }
    _mm512_reduce_add_epi64(total)
}

/// The lanes' σ + Σ q and Σ r over `block` with σ = `sigma` (four registers each), and with
/// `AHEAD` the [`Range`] of `ahead` (as long as `block`); with `MASK`, elements whose
/// magnitude's bits are below `floor` count as 0.
#[inline(always)]
unsafe fn lanes<const MASK: bool, const AHEAD: bool>(
    block: &[f32],
    ahead: &[f32],
    sigma: f64,
    floor: u32,
) -> ([__m512d; 4], [__m512d; 4], Range) {
    debug_assert!(block.len() == BLOCK && ahead.len() == BLOCK);
    let sig = _mm512_set1_pd(sigma);
    let magnitude = _mm256_set1_epi32(0x7fff_ffff);
    let floor = _mm256_set1_epi32(floor as i32);
    // The q sums ride on σ: σ + Σ q, in [σ, 2σ), where the spacing is 2^(K − 52).
    let mut q = [sig; 4];
    let mut r = [_mm512_setzero_pd(); 4];
    let (mut top, mut low) = (_mm512_setzero_si512(), _mm512_set1_epi32(-1));
    for (chunk, next) in block.chunks_exact(LANES).zip(ahead.chunks_exact(LANES)) {
        if AHEAD {
            (top, low) = range_step(top, low, &next[..16]);
            (top, low) = range_step(top, low, &next[16..]);
            // Past the slice's end it asks for nothing that is read (a prefetch never faults).
            let far = next.as_ptr().wrapping_add(PREFETCH).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(far);
            _mm_prefetch::<_MM_HINT_T0>(far.wrapping_add(64));
        }
        for k in 0..4 {
            // SAFETY: 8 of the chunk's 32 elements; unaligned loads.
            let p = chunk.as_ptr().add(8 * k);
            let x = if MASK {
                let bits = _mm256_loadu_si256(p.cast());
                let keep = _mm256_cmpge_epu32_mask(_mm256_and_si256(bits, magnitude), floor);
                _mm512_maskz_cvtps_pd(keep, _mm256_castsi256_ps(bits))
            } else {
                _mm512_cvtps_pd(_mm256_loadu_ps(p))
            };
            // (σ + Σ q) + x² rounded once; the step is q, exact; x² − q exact.
            let next_q = _mm512_fmadd_pd(x, x, q[k]);
            let rounded = _mm512_sub_pd(next_q, q[k]);
            q[k] = next_q;
            r[k] = _mm512_add_pd(r[k], _mm512_fmsub_pd(x, x, rounded));
        }
    }
    let next = Range {
        top: _mm512_reduce_max_epu32(top),
        low: _mm512_reduce_min_epu32(low),
    };
    (q, r, next)
}
