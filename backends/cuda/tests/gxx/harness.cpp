// Host driver of homeadam_math.h for the g++ parity test (tests/parity_gxx.rs).
//
// Reads cases from stdin and writes results to stdout, all little-endian:
//   case:   u32 kind; kind 0 = one single-tensor step, 1 = conversions
//   step:   u32 rule, p, g, s (0 f32, 1 f16, 2 bf16), flags, check; u64 key, n; HaScalars;
//           param (n·w_p bytes), grad (n·w_g), state (slots·n·w_s)
//        -> u32 skipped, vmin bits, home; param, state
//   conv:   u64 n; n × (u32 f32 bits, u32 r24)
//        -> n × (u16 f16 RNE, u16 bf16 RNE, u16 f16 stochastic, u16 bf16 stochastic,
//                u32 f32 of (low 16 bits as f16), u32 f32 of (low 16 bits as bf16))
// The step mirrors ha_check / ha_home_pre / ha_update of homeadam.cu on one tensor.
#include "homeadam_math.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static void get(void* dst, size_t bytes) {
    if (bytes && fread(dst, 1, bytes, stdin) != bytes) { fprintf(stderr, "harness: short read\n"); exit(2); }
}
static void put(const void* src, size_t bytes) { fwrite(src, 1, bytes, stdout); }

template <int RULE, typename P, typename G, typename S>
static void step(const HaScalars& s, ha_u32 flags, ha_u32 check, ha_u64 key, ha_u64 n) {
    std::vector<P> param(n);
    std::vector<G> grad(n);
    std::vector<S> state(HaRule<RULE>::SLOTS * n);
    get(param.data(), n * sizeof(P));
    get(grad.data(), n * sizeof(G));
    get(state.data(), state.size() * sizeof(S));
    ha_u32 bad = 0, vmin_pre = 0x7f800000u;
    ha_u32 sw = (flags >> HA_SWITCH_SHIFT) & 3u;
    bool pre = RULE == HA_RULE_HOME && (sw == HA_SWITCH_GLOBAL || sw == HA_SWITCH_LAYER);
    if (pre || check) {
        for (ha_u64 i = 0; i < n; i++) {
            float g = ha_to_f32(grad[i]) * s.inv_grad_scale;
            bad |= ha_nonfinite(g);
            if (pre) {
                ha_u32 b = ha_bits(ha_second_moment(s, ha_to_f32(state[n + i]), g));
                vmin_pre = b < vmin_pre ? b : vmin_pre;
            }
        }
    }
    ha_u32 vmin = 0x7f800000u, home = 0;
    if (!bad) {
        int branch = ha_home_branch(flags, vmin_pre, vmin_pre, s);
        for (ha_u64 i = 0; i < n; i++) {
            float st[3] = {0.0f, 0.0f, 0.0f};
            for (int k = 0; k < HaRule<RULE>::SLOTS; k++) st[k] = ha_to_f32(state[k * n + i]);
            float g = ha_to_f32(grad[i]) * s.inv_grad_scale;
            HaElem e = ha_element<RULE>(s, flags, branch, ha_to_f32(param[i]), g, st);
            param[i] = (flags & HA_STOCHASTIC) ? ha_from_f32_stochastic<P>(e.p, ha_stochastic_bits(key, i))
                                               : HaStore<P>::from_f32(e.p);
            for (int k = 0; k < HaRule<RULE>::SLOTS; k++) state[k * n + i] = HaStore<S>::from_f32(st[k]);
            if (HaRule<RULE>::RHO_SLOT >= 0) {
                ha_u32 b = ha_bits(st[HaRule<RULE>::RHO_SLOT]);
                vmin = b < vmin ? b : vmin;
            }
            home += e.home;
        }
    }
    put(&bad, 4);
    put(&vmin, 4);
    put(&home, 4);
    put(param.data(), n * sizeof(P));
    put(state.data(), state.size() * sizeof(S));
}

template <int RULE, typename P, typename G>
static void dispatch_s(ha_u32 s_type, const HaScalars& s, ha_u32 f, ha_u32 c, ha_u64 k, ha_u64 n) {
    if (s_type == 0) step<RULE, P, G, float>(s, f, c, k, n);
    else if (s_type == 1) step<RULE, P, G, ha_f16>(s, f, c, k, n);
    else step<RULE, P, G, ha_bf16>(s, f, c, k, n);
}
template <int RULE, typename P>
static void dispatch_g(ha_u32 g, ha_u32 st, const HaScalars& s, ha_u32 f, ha_u32 c, ha_u64 k, ha_u64 n) {
    if (g == 0) dispatch_s<RULE, P, float>(st, s, f, c, k, n);
    else if (g == 1) dispatch_s<RULE, P, ha_f16>(st, s, f, c, k, n);
    else dispatch_s<RULE, P, ha_bf16>(st, s, f, c, k, n);
}
template <int RULE>
static void dispatch_p(ha_u32 p, ha_u32 g, ha_u32 st, const HaScalars& s, ha_u32 f, ha_u32 c, ha_u64 k, ha_u64 n) {
    if (p == 0) dispatch_g<RULE, float>(g, st, s, f, c, k, n);
    else if (p == 1) dispatch_g<RULE, ha_f16>(g, st, s, f, c, k, n);
    else dispatch_g<RULE, ha_bf16>(g, st, s, f, c, k, n);
}

static void step_case() {
    ha_u32 h[6];
    ha_u64 key, n;
    HaScalars s;
    get(h, sizeof h);
    get(&key, 8);
    get(&n, 8);
    get(&s, sizeof s);
    ha_u32 rule = h[0], p = h[1], g = h[2], st = h[3], f = h[4], c = h[5];
    switch (rule) {
    case HA_RULE_SGD: dispatch_p<HA_RULE_SGD>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_SGDM: dispatch_p<HA_RULE_SGDM>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_ADAM: dispatch_p<HA_RULE_ADAM>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_ADAMW: dispatch_p<HA_RULE_ADAMW>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_HOME: dispatch_p<HA_RULE_HOME>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_ADABELIEF: dispatch_p<HA_RULE_ADABELIEF>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_ADABELIEF_AMSGRAD: dispatch_p<HA_RULE_ADABELIEF_AMSGRAD>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_SWATS_ADAM: dispatch_p<HA_RULE_SWATS_ADAM>(p, g, st, s, f, c, key, n); break;
    case HA_RULE_SWATS_SGD: dispatch_p<HA_RULE_SWATS_SGD>(p, g, st, s, f, c, key, n); break;
    default: dispatch_p<HA_RULE_MIADAM>(p, g, st, s, f, c, key, n); break;
    }
}

static void conv_case() {
    ha_u64 n;
    get(&n, 8);
    for (ha_u64 i = 0; i < n; i++) {
        ha_u32 in[2];
        get(in, 8);
        float x = ha_float(in[0]);
        ha_u16 out16[4] = {HaStore<ha_f16>::from_f32(x).bits, HaStore<ha_bf16>::from_f32(x).bits,
                           ha_from_f32_stochastic<ha_f16>(x, in[1]).bits,
                           ha_from_f32_stochastic<ha_bf16>(x, in[1]).bits};
        ha_f16 h16 = HaStore<ha_f16>::from_bits(in[0] & 0xffffu);
        ha_bf16 b16 = HaStore<ha_bf16>::from_bits(in[0] & 0xffffu);
        ha_u32 out32[2] = {ha_bits(ha_to_f32(h16)), ha_bits(ha_to_f32(b16))};
        put(out16, sizeof out16);
        put(out32, sizeof out32);
    }
}

int main() {
    ha_u32 kind;
    while (fread(&kind, 1, 4, stdin) == 4) {
        if (kind == 0) step_case();
        else conv_case();
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
