// homeadam_math.h: the per-element math of every homeadam-core rule, for CUDA (NVRTC) and g++.
//
// Bit-identical to homeadam-core: the same f32 operations in the same order, no fused
// multiply-add (NVRTC --fmad=false, g++ -ffp-contract=off), IEEE division and square root
// (--prec-div=true --prec-sqrt=true), denormals kept (no --ftz). The f16 / bf16 conversions are
// integer code on the raw bits, equal to the core's (half's IEEE round-to-nearest-even for f16,
// the core's branch-free RNE with quiet NaN for bf16), so device and host run the same code.
#ifndef HOMEADAM_MATH_H
#define HOMEADAM_MATH_H

#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#include <math.h>
#include <stddef.h>
#define __host__
#define __device__
#define __constant__
#endif

#define HA_FN __host__ __device__ static inline

// The metadata shared with Rust (rule ids and their slot counts, flag bits HA_NESTEROV ...
// HA_SWITCH_*, HA_CHUNK, HA_BUCKETS, the struct sizes HA_SIZE_*, HaScalars's fields, the kernel
// lists) is defined once, in src/kernels.rs, which hands it to NVRTC and g++; a build of one
// file alone reads the generated copy.
#ifndef HA_METADATA
#include "homeadam_defs.h"
#endif

typedef unsigned int ha_u32;
typedef unsigned long long ha_u64;
typedef unsigned short ha_u16;
typedef unsigned char ha_u8;

// Storage types: f16 and bf16 are their raw bits (sign-magnitude, like the core's `half` types).
struct ha_f16 { ha_u16 bits; };
struct ha_bf16 { ha_u16 bits; };

// The core's StepScalars (repr(C)), its fields generated from the core's StepScalars::FIELDS: a
// step has one per parameter group.
struct HaScalars { HA_SCALARS_FIELDS };
static_assert(sizeof(HaScalars) == HA_SIZE_SCALARS, "HaScalars is the core's StepScalars (repr(C))");
#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#define HA_SCALAR_OFFSET(field, offset) \
    static_assert(offsetof(HaScalars, field) == offset, "HaScalars." #field " sits where StepScalars has it");
HA_SCALARS_OFFSETS(HA_SCALAR_OFFSET)
#undef HA_SCALAR_OFFSET
#endif

// The bits of +∞: no value yet in a min over f32 bits.
#define HA_INF_BITS 0x7f800000u

// The minima of a HomeAdam first pass (f32 bits): v_t over every element and over the elements
// with v_t > 0 (the core's SecondMomentMin).
struct HaVmin { ha_u32 all, active; };

HA_FN ha_u32 ha_bits(float x) { union { float f; ha_u32 u; } c; c.f = x; return c.u; }
HA_FN float ha_float(ha_u32 u) { union { float f; ha_u32 u; } c; c.u = u; return c.f; }
HA_FN float ha_abs(float x) { return ha_float(ha_bits(x) & 0x7fffffffu); }
HA_FN bool ha_nonfinite(float x) { return (ha_bits(x) & 0x7f800000u) == 0x7f800000u; }
HA_FN bool ha_isnan(float x) { return x != x; }
HA_FN float ha_sqrt(float x) { return sqrtf(x); }

// ---- storage conversions ------------------------------------------------------------------

HA_FN float ha_to_f32(float x) { return x; }
HA_FN float ha_to_f32(ha_bf16 x) { return ha_float((ha_u32)x.bits << 16); }
// Exact widening, as half's f16_to_f32 (NaN: quiet bit set, payload kept).
HA_FN float ha_to_f32(ha_f16 x) {
    ha_u32 i = x.bits;
    if ((i & 0x7fffu) == 0) return ha_float(i << 16);
    ha_u32 sign = (i & 0x8000u) << 16, exp = i & 0x7c00u, man = i & 0x03ffu;
    if (exp == 0x7c00u) return ha_float(man == 0 ? (sign | 0x7f800000u) : (sign | 0x7fc00000u | (man << 13)));
    if (exp == 0) {
        ha_u32 e = 0;  // leading zeros of man as a u16, minus 6
        while (((man << e) & 0x200u) == 0) e++;
        return ha_float(sign | ((127u - 15u - e) << 23) | ((man << (14u + e)) & 0x7fffffu));
    }
    return ha_float(sign | ((exp >> 10) + 127 - 15) << 23 | man << 13);
}

template <typename T> struct HaStore;
template <> struct HaStore<float> {
    HA_FN float from_f32(float x) { return x; }
    HA_FN ha_u32 bits(float x) { return ha_bits(x); }
    HA_FN float from_bits(ha_u32 b) { return ha_float(b); }
};
// Round to nearest even; NaN becomes quiet NaN (the core's branch-free bf16 store).
template <> struct HaStore<ha_bf16> {
    HA_FN ha_bf16 from_f32(float x) {
        ha_u32 b = ha_bits(x);
        ha_u32 rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        ha_bf16 r;
        r.bits = (ha_u16)((b & 0x7fffffffu) > 0x7f800000u ? ((b >> 16) | 0x40u) : rounded);
        return r;
    }
    HA_FN ha_u32 bits(ha_bf16 x) { return x.bits; }
    HA_FN ha_bf16 from_bits(ha_u32 b) { ha_bf16 r; r.bits = (ha_u16)b; return r; }
};
// IEEE round to nearest even incl. subnormals, as half's f32_to_f16.
template <> struct HaStore<ha_f16> {
    HA_FN ha_f16 from_f32(float value) {
        ha_u32 x = ha_bits(value), sign = x & 0x80000000u, exp = x & 0x7f800000u, man = x & 0x7fffffu;
        ha_f16 r;
        if (exp == 0x7f800000u) {
            r.bits = (ha_u16)((sign >> 16) | 0x7c00u | (man == 0 ? 0u : 0x200u) | (man >> 13));
            return r;
        }
        ha_u32 half_sign = sign >> 16;
        int half_exp = (int)(exp >> 23) - 127 + 15;
        if (half_exp >= 0x1f) { r.bits = (ha_u16)(half_sign | 0x7c00u); return r; }
        if (half_exp <= 0) {
            if (14 - half_exp > 24) { r.bits = (ha_u16)half_sign; return r; }
            ha_u32 m = man | 0x800000u;
            ha_u32 half_man = m >> (14 - half_exp);
            ha_u32 round_bit = 1u << (13 - half_exp);
            if ((m & round_bit) != 0 && (m & (3u * round_bit - 1u)) != 0) half_man += 1;
            r.bits = (ha_u16)(half_sign | half_man);
            return r;
        }
        ha_u32 v = half_sign | ((ha_u32)half_exp << 10) | (man >> 13);
        if ((man & 0x1000u) != 0 && (man & 0x2fffu) != 0) v += 1;
        r.bits = (ha_u16)v;
        return r;
    }
    HA_FN ha_u32 bits(ha_f16 x) { return x.bits; }
    HA_FN ha_f16 from_bits(ha_u32 b) { ha_f16 r; r.bits = (ha_u16)b; return r; }
};

// ---- stochastic rounding (core/src/rounding.rs, Storage::from_f32_stochastic) --------------

// splitmix64's finalizer.
HA_FN ha_u64 ha_mix64(ha_u64 z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// key = mix64(mix64(mix64(seed) ^ step) ^ tensor) = mix64(step_base ^ tensor).
HA_FN ha_u64 ha_tensor_key(ha_u64 step_base, ha_u64 tensor) { return ha_mix64(step_base ^ tensor); }
// 24 uniform bits: mix64(key ^ element) >> 40.
HA_FN ha_u32 ha_stochastic_bits(ha_u64 key, ha_u64 element) { return (ha_u32)(ha_mix64(key ^ element) >> 40); }

// n (one ulp away from zero) with probability (|x| − |t|) / (|n| − |t|), else t (toward zero).
template <typename T> HA_FN T ha_from_f32_stochastic(float x, ha_u32 r24) {
    T nearest = HaStore<T>::from_f32(x);
    float nearest_f = ha_to_f32(nearest);
    if (nearest_f == x || ha_nonfinite(x)) return nearest;
    T toward_zero = ha_abs(nearest_f) > ha_abs(x) ? HaStore<T>::from_bits(HaStore<T>::bits(nearest) - 1u) : nearest;
    T away = HaStore<T>::from_bits(HaStore<T>::bits(toward_zero) + 1u);
    float t = ha_abs(ha_to_f32(toward_zero));
    float n = ha_abs(ha_to_f32(away));
    if (ha_nonfinite(n)) return toward_zero;  // n is finite or ±∞ here
    float u = (float)r24 * (1.0f / 16777216.0f);
    return u * (n - t) < ha_abs(x) - t ? away : toward_zero;
}
template <> __host__ __device__ inline float ha_from_f32_stochastic<float>(float x, ha_u32) { return x; }

// ---- element math: one function per rule, st[0..3] the state slots ------------------------

// What one element's update produced besides the state (the core's `Elem`).
struct HaElem {
    float p;     // new θ before rounding
    bool home;   // took the home (SGDM) branch
    float step;  // SWATS: θ_t − θ_{t−1}
    float grad;  // SWATS: the gradient the step used
};
HA_FN HaElem ha_elem(float p) { HaElem e; e.p = p; e.home = false; e.step = 0.0f; e.grad = 0.0f; return e; }

// SGD(M): d = g + λθ; b = d (t = 1) or μ b + (1 − dampening) d; d = d + μ b (Nesterov) or b; θ − η d.
template <bool MOMENTUM> HA_FN HaElem ha_sgd(const HaScalars& s, ha_u32 flags, int, float p, float g, float* st) {
    float d = s.weight_decay != 0.0f ? g + s.weight_decay * p : g;
    if (MOMENTUM) {
        float b = s.first_step != 0 ? d : s.momentum * st[0] + s.one_minus_dampening * d;
        st[0] = b;
        d = (flags & HA_NESTEROV) ? d + s.momentum * b : b;
    }
    return ha_elem(p - s.lr * d);
}

// Adam (coupled L2) / AdamW (θ(1 − ηλ)): θ − (η/bc1) · m / (√v / √bc2 + ε).
template <bool DECOUPLED> HA_FN HaElem ha_adam(const HaScalars& s, ha_u32, int, float p, float g, float* st) {
    if (DECOUPLED) p = p * s.decay;
    else if (s.weight_decay != 0.0f) g = g + s.weight_decay * p;
    float m = s.beta1 * st[0] + s.one_minus_beta1 * g;
    float v = s.beta2 * st[1] + s.one_minus_beta2 * (g * g);
    st[0] = m;
    st[1] = v;
    float denom = ha_sqrt(v) / s.sqrt_bc2 + s.eps;
    return ha_elem(p - s.lr_over_bc1 * (m / denom));
}

// HomeAdam(W) branches: srf everywhere, home everywhere, or per element on v̂ ≥ τ.
#define HA_ALL_SRF 0
#define HA_ALL_HOME 1
#define HA_PER_ELEMENT 2

// Home unless v̂ ≥ τ; a NaN v̂ goes home.
HA_FN bool ha_goes_home(float v_hat, float tau) { return v_hat < tau || ha_isnan(v_hat); }
// v_t = β2 v + (1 − β2) g²: shared by the first pass and the update.
HA_FN float ha_second_moment(const HaScalars& s, float v, float g) { return s.beta2 * v + s.one_minus_beta2 * (g * g); }

// The ρ that decides (the core's RhoOver::rho): min v̂ over every element, or with HA_RHO_ACTIVE
// over the elements with v_t > 0 (0 when none is, i.e. when that min v̂ is +∞). min v / bc2 =
// min v̂ exactly, as division by bc2 > 0 is monotonic.
HA_FN float ha_rho(ha_u32 flags, HaVmin vmin, float bc2) {
    if (!(flags & HA_RHO_ACTIVE)) return ha_float(vmin.all) / bc2;
    float active = ha_float(vmin.active) / bc2;
    return ha_bits(active) == HA_INF_BITS ? 0.0f : active;
}

// The branch of a HomeAdam update: per element, srf (Adam(W)-srf), or from ρ of the first pass
// over the model (global) or the tensor (layer). Where the global rule's bound decides, the model's
// minimum is the bound's chunk's (which proved home) or stays +∞ (u proved srf, no pass ran).
HA_FN int ha_home_branch(ha_u32 flags, HaVmin model, HaVmin tensor, const HaScalars& s) {
    ha_u32 sw = (flags >> HA_SWITCH_SHIFT) & 3u;
    if (sw == HA_SWITCH_ELEMENT) return HA_PER_ELEMENT;
    if (sw == HA_SWITCH_SRF) return HA_ALL_SRF;
    float rho = ha_rho(flags, sw == HA_SWITCH_GLOBAL ? model : tensor, s.bc2);
    return ha_goes_home(rho, s.tau) ? HA_ALL_HOME : HA_ALL_SRF;
}

// The bucket of v̂ ≥ 0 (not NaN) in a calibration histogram of HA_BUCKETS counts: min(bits >> 23,
// HA_BUCKETS − 1), the core's Histogram::bucket (its binade, 0 below 2^-126, the last from 1).
HA_FN ha_u32 ha_bucket(float v_hat) {
    ha_u32 b = ha_bits(v_hat) >> 23;
    return b < HA_BUCKETS - 1 ? b : HA_BUCKETS - 1;
}

// srf: θ(1 − ηλ) − (η/bc1) · (m / (v/bc2 + ε));   home: θ(1 − ηλ) − (η_h/bc1) · m.
HA_FN HaElem ha_home(const HaScalars& s, ha_u32, int branch, float p, float g, float* st) {
    float m = s.beta1 * st[0] + s.one_minus_beta1 * g;
    float v = ha_second_moment(s, st[1], g);
    st[0] = m;
    st[1] = v;
    float v_hat = v / s.bc2;
    bool home = branch == HA_ALL_SRF ? false : branch == HA_ALL_HOME ? true : ha_goes_home(v_hat, s.tau);
    float srf = m / (v_hat + s.eps);
    float rate = home ? s.home_lr_over_bc1 : s.lr_over_bc1;
    HaElem e = ha_elem(p * s.decay - rate * (home ? m : srf));
    e.home = home;
    return e;
}

// AdaBelief (adabelief-pytorch 0.2.1): s = β2 s + (1 − β2)(g − m)² + ε; rectified or not.
template <bool AMSGRAD> HA_FN HaElem ha_adabelief(const HaScalars& s, ha_u32 flags, int, float p, float g, float* st) {
    if (!(flags & HA_WEIGHT_DECOUPLE) && s.weight_decay != 0.0f) g = g + s.weight_decay * p;
    p = p * s.decay;
    float m = s.beta1 * st[0] + s.one_minus_beta1 * g;
    float residual = g - m;
    float var = s.beta2 * st[1] + s.one_minus_beta2 * (residual * residual) + s.eps;
    st[0] = m;
    st[1] = var;
    float denom_var = var;
    if (AMSGRAD) {
        st[2] = st[2] < var ? var : st[2];
        denom_var = st[2];
    }
    if (s.rect_mode == 0) p = p - s.lr_over_bc1 * (m / (ha_sqrt(denom_var) / s.sqrt_bc2 + s.eps));
    else if (s.rect_mode == 1) p = p - s.rect_lr * (m / (ha_sqrt(var) + s.eps));
    else p = p - s.rect_lr * m;
    return ha_elem(p);
}

// SWATS Adam phase: step = −(η√bc2/bc1) · m / (√(v + 1e−15) + ε).
HA_FN HaElem ha_swats_adam(const HaScalars& s, ha_u32 flags, int, float p, float g, float* st) {
    if (!(flags & HA_WEIGHT_DECOUPLE) && s.weight_decay != 0.0f) g = g + s.weight_decay * p;
    p = p * s.decay;
    float m = s.beta1 * st[0] + s.one_minus_beta1 * g;
    float v = s.beta2 * st[1] + s.one_minus_beta2 * (g * g);
    st[0] = m;
    st[1] = v;
    float step = (m / (ha_sqrt(v + 1e-15f) + s.eps)) * -s.swats_step;
    HaElem e = ha_elem(p + step);
    e.step = step;
    e.grad = g;
    return e;
}

// SWATS SGD phase: b = β1 b + g; θ − η' ((1 − β1) b (+ β1 b with Nesterov)).
HA_FN HaElem ha_swats_sgd(const HaScalars& s, ha_u32 flags, int, float p, float g, float* st) {
    if (!(flags & HA_WEIGHT_DECOUPLE) && s.weight_decay != 0.0f) g = g + s.weight_decay * p;
    p = p * s.decay;
    float b = s.beta1 * st[2] + g;
    st[2] = b;
    float update = b * s.one_minus_beta1;
    if (flags & HA_NESTEROV) update = update + s.beta1 * b;
    return ha_elem(p - s.lr * update);
}

// MIAdam1: t ≤ switch_step: b = κ b + m, θ − (η²/bc1) b / d; else θ − (η/bc1) m / d.
HA_FN HaElem ha_miadam(const HaScalars& s, ha_u32, int, float p, float g, float* st) {
    if (s.weight_decay != 0.0f) g = g + s.weight_decay * p;
    float m = s.beta1 * st[0] + s.one_minus_beta1 * g;
    float v = s.beta2 * st[1] + s.one_minus_beta2 * (g * g);
    st[0] = m;
    st[1] = v;
    float denom = ha_sqrt(v) / s.sqrt_bc2 + s.eps;
    if (s.mi_phase != 0) {
        float b = s.kappa * st[2] + m;
        st[2] = b;
        return ha_elem(p - s.lr2_over_bc1 * (b / denom));
    }
    return ha_elem(p - s.lr_over_bc1 * (m / denom));
}

// Lion (lion-pytorch 0.2.5): c = β1 m + (1 − β1) g, θ(1 − ηλ) − η sign(c), m = β2 m + (1 − β2) g.
HA_FN HaElem ha_lion(const HaScalars& s, ha_u32, int, float p, float g, float* st) {
    float c = s.beta1 * st[0] + s.one_minus_beta1 * g;
    st[0] = s.beta2 * st[0] + s.one_minus_beta2 * g;
    float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c);
    return ha_elem(p * s.decay - s.lr * sign);
}

// ---- the kernel table: one id (HA_RULE_*) per element function -------------------------------

// Each update kernel's state slots, the slot of v (−1: none), its q8 state slots on the unsigned
// map (bit k: slot k) and its element function (every one takes (scalars, flags, branch, θ, g,
// state); `branch` only matters to ha_home): the core's kernel table, through kernels.rs.
template <int RULE> struct HaRule;
#define HA_RULE_TRAITS(name, id, slots, rho_slot, q8_unsigned, element_fn)                              \
    template <> struct HaRule<id> {                                                                     \
        static const int SLOTS = slots;                                                                 \
        static const int RHO_SLOT = rho_slot;                                                           \
        static const ha_u32 Q8_UNSIGNED = q8_unsigned;                                                  \
        __host__ __device__ static inline HaElem element(const HaScalars& s, ha_u32 flags, int branch,  \
                                                         float p, float g, float* st) {                 \
            return element_fn(s, flags, branch, p, g, st);                                              \
        }                                                                                               \
    };
HA_RULE_KERNELS(HA_RULE_TRAITS)
#undef HA_RULE_TRAITS

// The element function of the compile-time rule id RULE.
template <int RULE> HA_FN HaElem ha_element(const HaScalars& s, ha_u32 flags, int branch, float p, float g, float* st) {
    return HaRule<RULE>::element(s, flags, branch, p, g, st);
}

// ---- q8 state (core/src/q8.rs) ------------------------------------------------------------

// HA_Q8_BLOCK elements of one state slot, the core's Q8Block (repr(C)): element j is T[codes[j]] ·
// scale, T the slot's map: the unsigned V[c] (second moments) or the signed ±M[c & 127] (bit 7 the
// sign). Slot k of a tensor of n elements is blocks [k·nb, (k + 1)·nb), nb = ⌈n / HA_Q8_BLOCK⌉.
struct HaQ8Block { float scale; ha_u8 codes[HA_Q8_BLOCK]; };
static_assert(sizeof(HaQ8Block) == HA_SIZE_Q8, "HaQ8Block is the core's Q8Block (repr(C))");

// The maps as f32 bits, the core's homeadam_core::q8::{UNSIGNED, SIGNED} through kernels.rs. The
// kernels read copies in shared memory (HaQ8Maps): lookups with divergent codes cost a few bank
// conflicts there, where constant memory would serialize them.
static __constant__ ha_u32 ha_q8_unsigned[256] = {HA_Q8_UNSIGNED};
static __constant__ ha_u32 ha_q8_signed[128] = {HA_Q8_SIGNED};

// Where the maps are read: V (256 entries) and M (128 magnitudes), as f32 bits.
struct HaQ8Maps { const ha_u32* unsigned_map; const ha_u32* signed_map; };

HA_FN ha_u64 ha_q8_blocks(ha_u64 n) { return (n + HA_Q8_BLOCK - 1) / HA_Q8_BLOCK; }
// Whether q8 state slot k of rule RULE is on the unsigned map.
template <int RULE> HA_FN bool ha_q8_unsigned_slot(int k) { return ((HaRule<RULE>::Q8_UNSIGNED >> k) & 1u) != 0; }
// The key of slot k's rounding bits: mix64(key ^ salt ^ k), key the tensor's step key.
HA_FN ha_u64 ha_q8_slot_key(ha_u64 key, int k) { return ha_mix64(key ^ HA_Q8_SALT ^ (ha_u64)k); }

// T[j] of the unsigned (V) or signed (M, magnitudes) map.
HA_FN float ha_q8_entry(const HaQ8Maps& maps, bool unsigned_map, ha_u32 j) {
    return ha_float(unsigned_map ? maps.unsigned_map[j] : maps.signed_map[j]);
}

// Element i of a slot stored as q8 blocks: ±T[c] · scale (one f32 multiply).
HA_FN float ha_q8_load(const HaQ8Maps& maps, const HaQ8Block* slot, bool unsigned_map, ha_u64 i) {
    const HaQ8Block& b = slot[i / HA_Q8_BLOCK];
    ha_u32 c = b.codes[i % HA_Q8_BLOCK];
    float t = ha_q8_entry(maps, unsigned_map, unsigned_map ? c : c & 0x7fu);
    return (!unsigned_map && (c & 0x80u) ? -t : t) * b.scale;
}

// The scale of a block whose largest ha_bits(|x|) is max_bits: that |x| (0 for an all-zero
// block), or NaN when an element is not finite (its |x| bits are ≥ those of +∞).
HA_FN float ha_q8_scale(ha_u32 max_bits) {
    return max_bits >= HA_INF_BITS ? ha_float(0x7fc00000u) : ha_float(max_bits);
}

// The 24 bits that round element i of the slot keyed ks (the core's Map::random_bits): two
// multiply-xorshift rounds on 32-bit words, ks's high half and i's high half between them.
HA_FN ha_u32 ha_q8_bits(ha_u64 ks, ha_u64 i) {
    ha_u32 x = (ha_u32)i ^ (ha_u32)ks;
    x ^= x >> 16;
    x *= HA_Q8_HASH_MUL0;
    x ^= x >> 15;
    x ^= (ha_u32)(ks >> 32) ^ (ha_u32)(i >> 32);
    x *= HA_Q8_HASH_MUL1;
    x ^= x >> 16;
    return x >> 8;
}

// The code of x in a block of scale a (ha_q8_scale; code 0 when a is 0 or NaN): u = 1 where
// |x| = a, else (|x| · σ) · ι with σ = 2^(127 − E), E a's biased exponent clamped to [1, 253], and
// ι = 1 / (a · σ) (the core's q8::Divisor), rounded stochastically between T[j] ≤ u < T[j + 1] with
// the 24 bits r, up when (r · 2^-24) · (T[j+1] − T[j]) < u − T[j]; on the unsigned map a nonzero x
// never becomes code 0.
HA_FN ha_u32 ha_q8_code(const HaQ8Maps& maps, bool unsigned_map, float x, float a, ha_u32 r) {
    if (!(a > 0.0f)) return 0u;
    ha_u32 e = ha_bits(a) >> 23;
    e = e < 1u ? 1u : e > 253u ? 253u : e;
    float sigma = ha_float((254u - e) << 23);
    float iota = 1.0f / (a * sigma);
    float m = ha_abs(x);
    float u = m == a ? 1.0f : (m * sigma) * iota;
    ha_u32 len = unsigned_map ? 256u : 128u, j = 0;
    // The largest j with T[j] ≤ u: a binary search over the ascending map.
    for (ha_u32 step = len / 2; step > 0; step /= 2) {
        if (ha_q8_entry(maps, unsigned_map, j + step) <= u) j += step;
    }
    if (j + 1 < len) {
        float lo = ha_q8_entry(maps, unsigned_map, j), hi = ha_q8_entry(maps, unsigned_map, j + 1);
        if (((float)r * (1.0f / 16777216.0f)) * (hi - lo) < u - lo) j += 1;
    }
    if (unsigned_map) return j == 0 && m != 0.0f ? 1u : j;
    return j == 0 ? 0u : x < 0.0f ? (j | 0x80u) : j;
}

// ---- the global rule's bound (the core's Step::check and Bound) ----------------------------
//
// The update of global HomeAdam(W) with ρ over every element (HA_BOUND) leaves the next step a
// bound: u = min_i v_{i,t} as stored, and the chunk of HA_BOUND_CHUNK elements (the core's chunk)
// that held min v_t. Both are 64-bit minima, so that atomics find them in any order: per tensor
// v's bits above its chunk's index (NaN never wins: its bits are above +∞'s), the core's v_min and
// v_min_at; over the model u's bits above the tensor's index, so that ties keep the earliest
// tensor, as the core's `u < next.u`.

// No value yet: +∞ in chunk (or tensor) 0, which is where the core's empty bound points.
#define HA_BOUND_NONE ((ha_u64)HA_INF_BITS << 32)

// One element's key in its tensor's minimum: v_t's bits above the index of its chunk.
HA_FN ha_u64 ha_bound_key(float v, ha_u64 i) { return (ha_u64)ha_bits(v) << 32 | (ha_u32)(i / HA_BOUND_CHUNK); }

// What the update keeps for the bound: the tensor's key, and min v_t over v_t > 0 (ρ_active of the
// report, as no first pass finds it where the bound decides).
struct HaBoundAcc { ha_u64 at; ha_u32 active; };

HA_FN void ha_bound_fold(HaBoundAcc& acc, float v, ha_u64 i) {
    ha_u64 k = ha_bound_key(v, i);
    acc.at = k < acc.at ? k : acc.at;
    ha_u32 b = ha_bits(v);
    if (v > 0.0f && b < acc.active) acc.active = b;
}

// The model's key of a tensor (or part of it) whose min v_t has the bits `vmin`: v as state S
// stores it (rounded to nearest on its own, which is monotonic: the rounding of the min is the min
// of the roundings, the core's stored_min) above the tensor's index. q8 state keeps no bound (its
// blocks share a scale and may round stochastically), and is never updated with HA_BOUND.
template <typename S> struct HaBoundOf {
    HA_FN ha_u64 model_key(ha_u32 vmin, ha_u32 tensor) {
        return (ha_u64)ha_bits(ha_to_f32(HaStore<S>::from_f32(ha_float(vmin)))) << 32 | tensor;
    }
    static const bool KEPT = true;
};
template <> struct HaBoundOf<HaQ8Block> {
    HA_FN ha_u64 model_key(ha_u32, ha_u32) { return HA_BOUND_NONE; }
    static const bool KEPT = false;
};

// Whether min v_t over the bound's chunk (f32 bits) proves the home branch: min v_t / bc2 < τ,
// and ρ_t is at most that. +∞ (no element, or NaN only) proves nothing.
HA_FN bool ha_bound_proves_home(ha_u32 chunk_min, const HaScalars& s) { return ha_float(chunk_min) / s.bc2 < s.tau; }

#endif
