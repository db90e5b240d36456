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

#endif
