// homeadam_exact.h: homeadam-core's ExactSum (core/src/exact.rs) for CUDA and g++: sums of
// products of two f32, exact and order-independent, in the core's fixed-point format, which
// kernels.rs hands over as defines: HA_EXACT_WORDS u64 words, HA_EXACT_LIMBS limbs of
// HA_EXACT_DIGIT_BITS-bit digits in two's complement (bit 0 of limb 0 weighs 2^HA_EXACT_LSB_EXP),
// then the flags of non-finite products (HA_EXACT_NAN, HA_EXACT_POS_INF, HA_EXACT_NEG_INF).
// A product M·2^E (M < 2^48) adds three digits to limbs s/32 .. s/32 + 2, s = E − LSB_EXP;
// limbs add modulo 2^64, so plain adds and atomic adds in any order give the same words once
// normalized. The host rounds them with the core's ExactSum::from_words(..).to_f64().
#ifndef HOMEADAM_EXACT_H
#define HOMEADAM_EXACT_H

#include "homeadam_math.h"

static_assert(HA_EXACT_DIGIT_BITS == 32, "the digits are the low halves of 64-bit limbs");
static_assert(HA_EXACT_WORDS == HA_EXACT_LIMBS + 1, "the limbs, then the flags");

// x = m · 2^e with m < 2^24 (the sign apart); false for ±inf and NaN.
HA_FN bool ha_exact_significand(float x, ha_u32* m, int* e) {
    ha_u32 bits = ha_bits(x), exp = (bits >> 23) & 0xffu, man = bits & 0x7fffffu;
    if (exp == 0xffu) return false;
    *m = exp == 0 ? man : (man | 0x800000u);
    *e = exp == 0 ? -149 : (int)exp - 150;
    return true;
}

// The flag of a · b when one of them is not finite: as the f64 product (∞ · 0 is NaN).
HA_FN ha_u64 ha_exact_flag(float a, float b) {
    if (ha_isnan(a) || ha_isnan(b) || a == 0.0f || b == 0.0f) return HA_EXACT_NAN;
    return ((ha_bits(a) ^ ha_bits(b)) >> 31) != 0 ? HA_EXACT_NEG_INF : HA_EXACT_POS_INF;
}

// Adds a · b to the words w, each limb through op.add(limb, value) and the flag through
// op.flag(word, bits): plain adds (HaExactPlain) or atomics (homeadam.cuh).
template <typename Op>
HA_FN void ha_exact_add(ha_u64* w, float a, float b, const Op& op) {
    ha_u32 ma, mb;
    int ea, eb;
    if (!ha_exact_significand(a, &ma, &ea) || !ha_exact_significand(b, &mb, &eb)) {
        op.flag(w + HA_EXACT_LIMBS, ha_exact_flag(a, b));
        return;
    }
    ha_u64 m = (ha_u64)ma * mb;
    if (m == 0) return;
    ha_u32 shift = (ha_u32)(ea + eb - HA_EXACT_LSB_EXP), k = shift / 32u, r = shift % 32u;
    ha_u64 high = m >> (32u - r);
    ha_u64 lo = (ha_u32)(m << r), mid = (ha_u32)high, hi = high >> 32;
    if (((ha_bits(a) ^ ha_bits(b)) >> 31) != 0) {
        lo = 0 - lo;
        mid = 0 - mid;
        hi = 0 - hi;
    }
    if (lo != 0) op.add(w + k, lo);
    if (mid != 0) op.add(w + k + 1, mid);
    if (hi != 0) op.add(w + k + 2, hi);
}

struct HaExactPlain {
    __host__ __device__ void add(ha_u64* limb, ha_u64 v) const { *limb += v; }
    __host__ __device__ void flag(ha_u64* word, ha_u64 bits) const { *word |= bits; }
};

// Moves each limb's bits above the digit into the next (arithmetic shift: the limbs are
// signed): limbs 0 .. LIMBS − 2 end in [0, 2^32), the value is unchanged.
HA_FN void ha_exact_normalize(ha_u64* w) {
    for (int k = 0; k < HA_EXACT_LIMBS - 1; k++) {
        long long carry = (long long)w[k] >> 32;
        w[k] &= 0xffffffffull;
        w[k + 1] += (ha_u64)carry;
    }
}

// Σ x² of many values through a 128-bit window (the clipping norm's sum): a group of values
// (a warp's) shares base = max(top − HA_SQUARE_WINDOW, HA_EXACT_LSB_EXP), top the largest 2e of
// its finite non-zero x = m · 2^e. Each x² = m² · 2^(2e) with 2e ≥ base is m² < 2^48 shifted by
// at most HA_SQUARE_WINDOW into a 128-bit integer, so up to 2^16 of them add exactly with plain
// integer adds; the sum goes to the limbs once (ha_exact_add_window). The others (non-finite, or
// below 2^−HA_SQUARE_WINDOW/2 of the group's largest) go through ha_exact_add: the same words.
#define HA_SQUARE_WINDOW 64
// ha_square_top's value for a group without a finite non-zero value.
#define HA_SQUARE_NONE 0u

struct HaWide {
    ha_u64 lo, hi;
};

// 2e of a finite non-zero x, offset to stay above HA_SQUARE_NONE (unsigned, so that a warp's
// largest is a plain max); HA_SQUARE_NONE otherwise.
HA_FN ha_u32 ha_square_top(float x) {
    ha_u32 m;
    int e;
    if (!ha_exact_significand(x, &m, &e) || m == 0) return HA_SQUARE_NONE;
    return (ha_u32)(2 * e - HA_EXACT_LSB_EXP + 1);
}

// The window's base exponent for the group's largest ha_square_top.
HA_FN int ha_square_base(ha_u32 top) {
    int e2 = (int)top - 1 + HA_EXACT_LSB_EXP;
    return e2 - HA_SQUARE_WINDOW > HA_EXACT_LSB_EXP ? e2 - HA_SQUARE_WINDOW : HA_EXACT_LSB_EXP;
}

// Adds x² to the window `acc` of base `base` when it fits (a zero adds nothing); false when x is
// not finite or below the window, which the caller then adds with ha_exact_add.
HA_FN bool ha_square_window_add(HaWide* acc, float x, int base) {
    ha_u32 m;
    int e;
    if (!ha_exact_significand(x, &m, &e)) return false;
    if (m == 0) return true;
    if (2 * e < base) return false;
    ha_u32 s = (ha_u32)(2 * e - base);
    ha_u64 sq = (ha_u64)m * m;
    ha_u64 lo = s < 64u ? sq << s : 0, hi = s == 0u ? 0 : (s < 64u ? sq >> (64u - s) : sq);
    acc->lo += lo;
    acc->hi += hi + (acc->lo < lo ? 1u : 0u);
    return true;
}

// a + b for two windows of the same base.
HA_FN HaWide ha_wide_add(HaWide a, HaWide b) {
    HaWide r;
    r.lo = a.lo + b.lo;
    r.hi = a.hi + b.hi + (r.lo < a.lo ? 1u : 0u);
    return r;
}

// Adds acc · 2^base (non-negative) to the words w, each non-zero 32-bit digit through
// op.add(limb, digit): five digits at most, in limbs s/32 .. s/32 + 4, s = base − LSB_EXP.
template <typename Op>
HA_FN void ha_exact_add_window(ha_u64* w, HaWide acc, int base, const Op& op) {
    ha_u32 s = (ha_u32)(base - HA_EXACT_LSB_EXP), k = s / 32u, r = s % 32u;
    ha_u64 w0 = acc.lo << r;
    ha_u64 w1 = r == 0u ? acc.hi : (acc.hi << r) | (acc.lo >> (64u - r));
    ha_u64 w2 = r == 0u ? 0 : acc.hi >> (64u - r);
    ha_u64 digits[5] = {w0 & 0xffffffffull, w0 >> 32, w1 & 0xffffffffull, w1 >> 32, w2};
    for (ha_u32 i = 0; i < 5u; i++) {
        if (digits[i] != 0) op.add(w + k + i, digits[i]);
    }
}

#endif
