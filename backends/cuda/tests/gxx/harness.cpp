// Host driver of homeadam_math.h and homeadam_exact.h for the g++ parity test (tests/parity_gxx.rs). The metadata
// (HA_RULE_*, HA_* flags, HA_RULE_KERNELS, ...) comes from kernels.rs as -D flags.
//
// Reads cases from stdin and writes results to stdout, all little-endian:
//   case:   u32 kind; kind 0 = one step of a model, 1 = conversions, 2 = an exact sum,
//           3 = an exact sum of squares through windows
//   step:   u32 rule, p, g, s (0 f32, 1 f16, 2 bf16, 3 q8: state only), flags, check, calibrate;
//           u64 sr_base; u32 groups; HaScalars of the step (first pass); HaScalars × groups
//           (update); u32 tensors; per tensor: u32 group, u64 n, param (n·w_p bytes), grad (n·w_g),
//           state (slots·n·w_s; q8: slots·⌈n/256⌉ blocks of 260 bytes); with HA_BOUND in flags,
//           then u32 decision (0: the exact first pass, 1: u proved srf, 2: the bound's chunk),
//           bound tensor, bound chunk
//        -> u32 skipped, model vmin bits, home; HaVmin of the model's first pass;
//           with HA_BOUND: u32 decided (the chunk proved home), u64 the model's bound key, u32
//           min v > 0 after the update;
//           with calibrate: HA_BUCKETS × u64 counts of the calibration pass;
//           per tensor: HaVmin of its first pass, u32 vmin bits, home; with HA_BOUND u64 its
//           bound key; param, state
//   conv:   u64 n; n × (u32 f32 bits, u32 r24)
//        -> n × (u16 f16 RNE, u16 bf16 RNE, u16 f16 stochastic, u16 bf16 stochastic,
//                u32 f32 of (low 16 bits as f16), u32 f32 of (low 16 bits as bf16))
//   exact:  u32 n; n × (u32 a bits, u32 b bits)
//        -> HA_EXACT_WORDS × u64: Σ a·b, normalized
//   squares: u32 n, group; n × u32 x bits
//        -> HA_EXACT_WORDS × u64: Σ x², normalized, each `group` consecutive values through one
//           window as a warp of ha_grad_sq adds them
// The step mirrors ha_check / ha_home_bound / ha_home_pre / ha_home_hist / ha_update of
// homeadam.cuh over the model's tensors, HA_Q8_BLOCK elements at a time (q8 state: its blocks),
// the bound's keys folded per block as the device folds them per warp.
#include "homeadam_exact.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static void get(void* dst, size_t bytes) {
    if (bytes && fread(dst, 1, bytes, stdin) != bytes) { fprintf(stderr, "harness: short read\n"); exit(2); }
}
static void put(const void* src, size_t bytes) { fwrite(src, 1, bytes, stdout); }
static ha_u32 min_bits(ha_u32 acc, float v) { ha_u32 b = ha_bits(v); return b < acc ? b : acc; }

// A state slot stored as one S per element: element i, and elements [first, first + len) stored.
template <typename S> struct Slots {
    static ha_u64 len(ha_u64 n) { return n; }
    static float get(const S* slot, bool, ha_u64 i) { return ha_to_f32(slot[i]); }
    static void put(S* slot, bool, ha_u64, ha_u64 first, const float* x, ha_u64 len) {
        for (ha_u64 i = 0; i < len; i++) slot[first + i] = HaStore<S>::from_f32(x[i]);
    }
};
// Stored as q8 blocks: a block at a time (first a multiple of HA_Q8_BLOCK), as HaChunk's q8 update.
static const HaQ8Maps maps = {ha_q8_unsigned, ha_q8_signed};
template <> struct Slots<HaQ8Block> {
    static ha_u64 len(ha_u64 n) { return ha_q8_blocks(n); }
    static float get(const HaQ8Block* slot, bool unsigned_map, ha_u64 i) {
        return ha_q8_load(maps, slot, unsigned_map, i);
    }
    static void put(HaQ8Block* slot, bool unsigned_map, ha_u64 slot_key, ha_u64 first, const float* x, ha_u64 len) {
        ha_u32 m = 0;
        for (ha_u64 i = 0; i < len; i++) {
            ha_u32 b = ha_bits(ha_abs(x[i]));
            m = b > m ? b : m;
        }
        HaQ8Block& q = slot[first / HA_Q8_BLOCK];
        q.scale = ha_q8_scale(m);
        memset(q.codes, 0, sizeof q.codes);
        for (ha_u64 i = 0; i < len; i++) {
            q.codes[i] = (ha_u8)ha_q8_code(maps, unsigned_map, x[i], q.scale, ha_q8_bits(slot_key, first + i));
        }
    }
};

template <typename P, typename G, typename S> struct Tensor {
    ha_u32 group;
    ha_u64 n;
    std::vector<P> param;
    std::vector<G> grad;
    std::vector<S> state;
    HaVmin pre;
    ha_u32 vmin, home;
    HaBoundAcc bound;
};

template <int RULE, typename P, typename G, typename S>
static void step(ha_u32 flags, ha_u32 check, ha_u32 calibrate, ha_u64 sr_base) {
    ha_u32 group_count, count;
    HaScalars pre;
    get(&group_count, 4);
    get(&pre, sizeof pre);
    std::vector<HaScalars> groups(group_count);
    get(groups.data(), group_count * sizeof(HaScalars));
    get(&count, 4);
    std::vector<Tensor<P, G, S>> model(count);
    for (Tensor<P, G, S>& t : model) {
        get(&t.group, 4);
        get(&t.n, 8);
        if (t.group >= group_count) { fprintf(stderr, "harness: bad group\n"); exit(2); }
        t.param.resize(t.n);
        t.grad.resize(t.n);
        t.state.resize(HaRule<RULE>::SLOTS * Slots<S>::len(t.n));
        get(t.param.data(), t.n * sizeof(P));
        get(t.grad.data(), t.n * sizeof(G));
        get(t.state.data(), t.state.size() * sizeof(S));
    }
    const bool bounded = (flags & HA_BOUND) != 0;
    ha_u32 bound[3] = {0, 0, 0};
    if (bounded) get(bound, sizeof bound);
    ha_u32 bad = 0, model_vmin = HA_INF_BITS, model_home = 0, decided = 0;
    HaVmin model_pre = {HA_INF_BITS, HA_INF_BITS};
    ha_u64 counts[HA_BUCKETS] = {};
    ha_u32 sw = (flags >> HA_SWITCH_SHIFT) & 3u;
    if (bound[0] == 2) {
        if (bound[1] >= count) { fprintf(stderr, "harness: bad bound tensor\n"); exit(2); }
        const Tensor<P, G, S>& t = model[bound[1]];
        ha_u64 at = (ha_u64)bound[2] * HA_BOUND_CHUNK, end = at + HA_BOUND_CHUNK < t.n ? at + HA_BOUND_CHUNK : t.n;
        ha_u32 chunk_min = HA_INF_BITS;
        for (ha_u64 i = at; i < end; i++) {
            float g = ha_to_f32(t.grad[i]) * pre.inv_grad_scale;
            float v = Slots<S>::get(t.state.data() + Slots<S>::len(t.n), ha_q8_unsigned_slot<RULE>(1), i);
            chunk_min = min_bits(chunk_min, ha_second_moment(pre, v, g));
        }
        if (ha_bound_proves_home(chunk_min, pre)) {
            model_pre.all = chunk_min;
            decided = 1;
        }
    }
    // Where the bound decides, only the gradients are checked.
    check |= bound[0] != 0;
    bool first_pass = RULE == HA_RULE_HOMEADAM && (sw == HA_SWITCH_GLOBAL || sw == HA_SWITCH_LAYER) &&
                      (bound[0] == 0 || (bound[0] == 2 && !decided));
    for (Tensor<P, G, S>& t : model) {
        t.pre.all = t.pre.active = t.vmin = HA_INF_BITS;
        t.home = 0;
        t.bound.at = HA_BOUND_NONE;
        t.bound.active = HA_INF_BITS;
        if (!first_pass && !check && !calibrate) continue;
        for (ha_u64 i = 0; i < t.n; i++) {
            float g = ha_to_f32(t.grad[i]) * pre.inv_grad_scale;
            bad |= ha_nonfinite(g);
            if (!first_pass && !calibrate) continue;
            float v_stored = Slots<S>::get(t.state.data() + Slots<S>::len(t.n), ha_q8_unsigned_slot<RULE>(1), i);
            float v = ha_second_moment(pre, v_stored, g);
            if (first_pass) {
                t.pre.all = min_bits(t.pre.all, v);
                if (v > 0.0f) t.pre.active = min_bits(t.pre.active, v);
            }
            if (calibrate && v > 0.0f) counts[ha_bucket(v / pre.bc2)]++;
        }
        model_pre.all = t.pre.all < model_pre.all ? t.pre.all : model_pre.all;
        model_pre.active = t.pre.active < model_pre.active ? t.pre.active : model_pre.active;
    }
    ha_u64 model_bound = HA_BOUND_NONE;
    ha_u32 model_active = HA_INF_BITS;
    for (ha_u32 k = 0; k < count && !bad; k++) {
        Tensor<P, G, S>& t = model[k];
        const HaScalars& s = groups[t.group];
        int branch = ha_home_branch(flags, model_pre, t.pre, s);
        ha_u64 key = ha_tensor_key(sr_base, k);
        const int slots = HaRule<RULE>::SLOTS;
        for (ha_u64 first = 0; first < t.n; first += HA_Q8_BLOCK) {
            ha_u64 len = t.n - first < HA_Q8_BLOCK ? t.n - first : HA_Q8_BLOCK;
            float block[HA_MAX_SLOTS][HA_Q8_BLOCK];
            S* slot[HA_MAX_SLOTS];
            for (int j = 0; j < slots; j++) {
                slot[j] = t.state.data() + j * Slots<S>::len(t.n);
                bool unsigned_map = ha_q8_unsigned_slot<RULE>(j);
                for (ha_u64 i = 0; i < len; i++) block[j][i] = Slots<S>::get(slot[j], unsigned_map, first + i);
            }
            HaBoundAcc block_bound = {HA_BOUND_NONE, HA_INF_BITS};
            for (ha_u64 i = first; i < first + len; i++) {
                float st[HA_MAX_SLOTS] = {};
                for (int j = 0; j < slots; j++) st[j] = block[j][i - first];
                float g = ha_to_f32(t.grad[i]) * s.inv_grad_scale;
                HaElem e = ha_element<RULE>(s, flags, branch, ha_to_f32(t.param[i]), g, st);
                t.param[i] = (flags & HA_STOCHASTIC) ? ha_from_f32_stochastic<P>(e.p, ha_stochastic_bits(key, i))
                                                     : HaStore<P>::from_f32(e.p);
                for (int j = 0; j < slots; j++) block[j][i - first] = st[j];
                if (HaRule<RULE>::RHO_SLOT >= 0) t.vmin = min_bits(t.vmin, st[HaRule<RULE>::RHO_SLOT]);
                if (RULE == HA_RULE_HOMEADAM && bounded) ha_bound_fold(block_bound, st[HaRule<RULE>::RHO_SLOT], i);
                t.home += e.home;
            }
            if (bounded) {
                ha_u64 key = HaBoundOf<S>::model_key((ha_u32)(block_bound.at >> 32), k);
                model_bound = key < model_bound ? key : model_bound;
                model_active = block_bound.active < model_active ? block_bound.active : model_active;
                t.bound.at = block_bound.at < t.bound.at ? block_bound.at : t.bound.at;
            }
            for (int j = 0; j < slots; j++) {
                Slots<S>::put(slot[j], ha_q8_unsigned_slot<RULE>(j), ha_q8_slot_key(key, j), first, block[j], len);
            }
        }
        model_vmin = t.vmin < model_vmin ? t.vmin : model_vmin;
        model_home += t.home;
    }
    put(&bad, 4);
    put(&model_vmin, 4);
    put(&model_home, 4);
    put(&model_pre, sizeof model_pre);
    if (bounded) {
        put(&decided, 4);
        put(&model_bound, 8);
        put(&model_active, 4);
    }
    if (calibrate) put(counts, sizeof counts);
    for (const Tensor<P, G, S>& t : model) {
        put(&t.pre, sizeof t.pre);
        put(&t.vmin, 4);
        put(&t.home, 4);
        if (bounded) put(&t.bound.at, 8);
        put(t.param.data(), t.n * sizeof(P));
        put(t.state.data(), t.state.size() * sizeof(S));
    }
}

template <int RULE, typename P, typename G>
static void dispatch_s(ha_u32 s_type, ha_u32 f, ha_u32 c, ha_u32 cal, ha_u64 b) {
    if (s_type == 0) step<RULE, P, G, float>(f, c, cal, b);
    else if (s_type == 1) step<RULE, P, G, ha_f16>(f, c, cal, b);
    else if (s_type == 2) step<RULE, P, G, ha_bf16>(f, c, cal, b);
    else step<RULE, P, G, HaQ8Block>(f, c, cal, b);
}
template <int RULE, typename P>
static void dispatch_g(ha_u32 g, ha_u32 st, ha_u32 f, ha_u32 c, ha_u32 cal, ha_u64 b) {
    if (g == 0) dispatch_s<RULE, P, float>(st, f, c, cal, b);
    else if (g == 1) dispatch_s<RULE, P, ha_f16>(st, f, c, cal, b);
    else dispatch_s<RULE, P, ha_bf16>(st, f, c, cal, b);
}
template <int RULE>
static void dispatch_p(ha_u32 p, ha_u32 g, ha_u32 st, ha_u32 f, ha_u32 c, ha_u32 cal, ha_u64 b) {
    if (p == 0) dispatch_g<RULE, float>(g, st, f, c, cal, b);
    else if (p == 1) dispatch_g<RULE, ha_f16>(g, st, f, c, cal, b);
    else dispatch_g<RULE, ha_bf16>(g, st, f, c, cal, b);
}

static void step_case() {
    ha_u32 h[7];
    ha_u64 sr_base;
    get(h, sizeof h);
    get(&sr_base, 8);
    ha_u32 rule = h[0], p = h[1], g = h[2], st = h[3], f = h[4], c = h[5], cal = h[6];
    switch (rule) {
#define HA_CASE(name, id, ...) \
    case id: dispatch_p<id>(p, g, st, f, c, cal, sr_base); break;
    HA_RULE_KERNELS(HA_CASE)
#undef HA_CASE
    default: fprintf(stderr, "harness: unknown rule id %u\n", rule); exit(2);
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

static void exact_case() {
    ha_u32 n;
    get(&n, 4);
    ha_u64 w[HA_EXACT_WORDS] = {};
    for (ha_u32 i = 0; i < n; i++) {
        ha_u32 ab[2];
        get(ab, 8);
        ha_exact_add(w, ha_float(ab[0]), ha_float(ab[1]), HaExactPlain());
    }
    ha_exact_normalize(w);
    put(w, sizeof w);
}

static void squares_case() {
    ha_u32 head[2];
    get(head, 8);
    std::vector<ha_u32> bits(head[0]);
    get(bits.data(), 4 * (size_t)head[0]);
    ha_u64 w[HA_EXACT_WORDS] = {};
    for (ha_u32 first = 0; first < head[0]; first += head[1]) {
        ha_u32 last = first + head[1] < head[0] ? first + head[1] : head[0], top = HA_SQUARE_NONE;
        for (ha_u32 i = first; i < last; i++) {
            ha_u32 e = ha_square_top(ha_float(bits[i]));
            top = e > top ? e : top;
        }
        int base = ha_square_base(top);
        HaWide acc = {0, 0};
        for (ha_u32 i = first; i < last; i++) {
            float x = ha_float(bits[i]);
            if (!ha_square_window_add(&acc, x, base)) ha_exact_add(w, x, x, HaExactPlain());
        }
        ha_exact_add_window(w, acc, base, HaExactPlain());
    }
    ha_exact_normalize(w);
    put(w, sizeof w);
}

int main() {
    ha_u32 kind;
    while (fread(&kind, 1, 4, stdin) == 4) {
        if (kind == 0) step_case();
        else if (kind == 1) conv_case();
        else if (kind == 2) exact_case();
        else squares_case();
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
