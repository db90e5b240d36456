// homeadam.cuh: the multi-tensor kernels over a device tensor table, as templates, and the
// macros that instantiate them as extern "C" kernels (instantiations.cu: all of them; at run
// time, kernels::model_source: one model's).
//
// One launch covers every tensor of a model: the host builds a block table (one entry per
// chunk of HA_CHUNK elements of one tensor, as PyTorch's multi_tensor_apply), and block b
// updates chunk blocks[b]. A step is: ha_reset, then either ha_check_{g} (any non-finite
// unscaled gradient sets status->nonfinite) or, for global / per-layer HomeAdam,
// ha_home_pre_{g}_{s} (the same flag, plus min v_t and min v_t over v_t > 0 per tensor and over
// the model with atomicMin on the float bits: exact and order-independent for v >= 0), which the
// global rule's bound replaces at most steps (below), or, for
// element-wise HomeAdam at a step that calibrates τ, ha_home_hist_{g}_{s} (the same flag, plus
// the histogram of v̂_t), then the update {rule}_{p}_{g}_{s}, which returns at once when the
// flag is set. Each tensor steps with the scalars of its parameter group (groups[tensor.group]);
// the first passes read only beta2, 1 - beta2, bc2 and 1 / grad_scale, which no group changes
// where a first pass runs (Config::check_group refuses a group's beta2 there), so they take the
// step's scalars.
//
// The global rule's bound (HA_BOUND, homeadam_math.h): its update also keeps u = min v_t as stored
// and the chunk that held min v_t; at the next step the host, which reads u with the status, runs
// ha_check_{g} where u proves the srf branch, else ha_home_bound_{g}_{s} (the finite check, and min
// v_t over that chunk, which may prove the home branch) and then ha_home_pre_{g}_{s}, which returns
// at once where the bound decided.
//
// q8 state (HaQ8Block, homeadam_math.h): the update takes one block of every slot at a time, one
// element per thread (HaChunk), and the first passes read v dequantized (HaSecondMoments).
//
// Exact sums (homeadam_exact.h): SWATS's Adam phase sums each tensor's pᵀp and pᵀg, and
// ha_grad_sq_{g} sums every g², in the core's ExactSum format. Each block adds its products
// with integer atomics to accumulators in dynamic shared memory, normalizes them, and adds
// each word to the global accumulator with one integer atomic: integer sums do not depend on
// the order, so every launch gives the same words, and the host rounds them as the core does.
#ifndef HOMEADAM_CUH
#define HOMEADAM_CUH

#include "homeadam_exact.h"

// One tensor: device pointers (state slots one after the other, each numel elements long, or for
// q8 ⌈numel / HA_Q8_BLOCK⌉ HaQ8Blocks) and the per-tensor results of the step, written by the
// kernels.
struct HaTensor {
    ha_u64 param, grad, state, numel;
    HaVmin vmin_pre;   // the minima of the first pass's v_t
    ha_u32 vmin_post;  // min of the v slot after the update (f32 bits)
    ha_u32 home;       // elements that took the home branch
    ha_u32 group;      // index of the tensor's parameter group in the step's scalars
    ha_u32 unused;     // explicit padding: 64 bytes, no byte undefined
    ha_u64 vmin_at;    // HA_BOUND: min over the update of ha_bound_key (v's bits, chunk)
};

// One chunk: tensor index in the table (also its stochastic rounding key) and chunk number.
struct HaBlock { ha_u32 tensor; ha_u32 chunk; };

// Model-wide results of the step.
struct HaStatus {
    ha_u32 nonfinite;  // 1: a non-finite unscaled gradient, nothing was written
    HaVmin vmin_pre;   // the minima over the model of the first pass's v_t
    ha_u32 vmin_post;  // min over the model of v after the update (f32 bits)
    ha_u32 nonfinite_applied;  // 1: a non-finite gradient was applied (FiniteCheck::Trust)
    ha_u32 decided;    // 1: ha_home_bound proved the home branch (vmin_pre.all: the chunk's min)
    ha_u64 home;       // elements that took the home branch
    ha_u64 bound;      // HA_BOUND: min over the update of HaBoundOf::model_key (u's bits, tensor)
    ha_u32 vmin_post_active;  // HA_BOUND: min over the model of v > 0 after the update (f32 bits)
    ha_u32 bound_at;   // the chunk of the last update's bound in tensor bound_tensor (ha_reset)
};
static_assert(sizeof(HaTensor) == HA_SIZE_TENSOR && sizeof(HaStatus) == HA_SIZE_STATUS,
              "the layouts of src/device.rs");

// Starts a step: installs the gradient pointers `grads` (one per tensor, refreshed by the host
// between steps) and resets the results; first keeps the chunk of the last update's bound, in
// tensor `bound_tensor` (the status's, as the host read it; none where it is `count` or more).
extern "C" __global__ void ha_reset(HaTensor* tensors, ha_u32 count, const ha_u64* grads, HaStatus* status,
                                    ha_u32 bound_tensor) {
    ha_u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        if (i == bound_tensor) status->bound_at = (ha_u32)tensors[i].vmin_at;
        tensors[i].vmin_at = HA_BOUND_NONE;
        tensors[i].grad = grads[i];
        tensors[i].vmin_pre.all = HA_INF_BITS;
        tensors[i].vmin_pre.active = HA_INF_BITS;
        tensors[i].vmin_post = HA_INF_BITS;
        tensors[i].home = 0;
    }
    if (i == 0) {
        status->nonfinite = 0;
        status->vmin_pre.all = HA_INF_BITS;
        status->vmin_pre.active = HA_INF_BITS;
        status->vmin_post = HA_INF_BITS;
        status->nonfinite_applied = 0;
        status->decided = 0;
        status->home = 0;
        status->bound = HA_BOUND_NONE;
        status->vmin_post_active = HA_INF_BITS;
    }
}

__device__ static inline ha_u32 ha_warp_min(ha_u32 x) {
    for (int o = 16; o > 0; o >>= 1) { ha_u32 y = __shfl_xor_sync(0xffffffffu, x, o); x = y < x ? y : x; }
    return x;
}
__device__ static inline ha_u64 ha_warp_min64(ha_u64 x) {
    for (int o = 16; o > 0; o >>= 1) { ha_u64 y = __shfl_xor_sync(0xffffffffu, x, o); x = y < x ? y : x; }
    return x;
}
__device__ static inline ha_u32 ha_warp_max(ha_u32 x) {
    for (int o = 16; o > 0; o >>= 1) { ha_u32 y = __shfl_xor_sync(0xffffffffu, x, o); x = y > x ? y : x; }
    return x;
}
__device__ static inline ha_u32 ha_warp_sum(ha_u32 x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ static inline ha_u32 ha_warp_any(ha_u32 x) { return __any_sync(0xffffffffu, x != 0); }

// The block's exact accumulators (HA_EXACT_WORDS words each), sized at launch.
extern __shared__ ha_u64 ha_shared[];

struct HaAtomic {
    __device__ void add(ha_u64* limb, ha_u64 v) const { atomicAdd(limb, v); }
    __device__ void flag(ha_u64* word, ha_u64 bits) const { atomicOr(word, bits); }
};

// Zeroes the block's `sums` accumulators; every thread of the block calls it.
__device__ static inline void ha_exact_block_begin(ha_u32 sums) {
    for (ha_u32 i = threadIdx.x; i < sums * HA_EXACT_WORDS; i += blockDim.x) ha_shared[i] = 0;
    __syncthreads();
}

// Adds the block's `sums` accumulators to `out` (as many, in global memory): normalized first,
// so that each limb adds less than 2^32 per block; every thread of the block calls it.
__device__ static inline void ha_exact_block_end(ha_u32 sums, ha_u64* out) {
    __syncthreads();
    if (threadIdx.x < sums) ha_exact_normalize(ha_shared + threadIdx.x * HA_EXACT_WORDS);
    __syncthreads();
    for (ha_u32 i = threadIdx.x; i < sums * HA_EXACT_WORDS; i += blockDim.x) {
        ha_u64 v = ha_shared[i];
        if (v == 0) continue;
        if (i % HA_EXACT_WORDS == HA_EXACT_LIMBS) atomicOr(out + i, v);
        else atomicAdd(out + i, v);
    }
}

// Bits of a non-negative float keep its order as unsigned ints; NaN and negative values (bits
// above +∞) never win, as the core's `x < min` ignores NaN.
__device__ static inline ha_u32 ha_min_bits(ha_u32 acc, float v) { ha_u32 b = ha_bits(v); return b < acc ? b : acc; }

// Four consecutive elements in one access: 16 bytes for f32, 8 for f16 / bf16. Used where every
// pointer of the tensor is 16-byte aligned and numel % 4 == 0 (then each state slot is aligned
// too); other tensors take the one-element loop. Same elements, same operations: same bits.
struct alignas(16) ha_v16 { ha_u32 x, y, z, w; };
struct alignas(8) ha_v8 { ha_u32 x, y; };
template <typename T> struct HaVec { typedef ha_v8 type; };
template <> struct HaVec<float> { typedef ha_v16 type; };
template <typename T> union HaPack { typename HaVec<T>::type v; T e[4]; };
template <typename T> __device__ static inline HaPack<T> ha_load4(const T* p) {
    HaPack<T> r;
    r.v = *(const typename HaVec<T>::type*)p;
    return r;
}
template <typename T> __device__ static inline void ha_store4(T* p, const HaPack<T>& r) {
    *(typename HaVec<T>::type*)p = r.v;
}
__device__ static inline bool ha_vectorizable(const HaTensor& t) {
    return ((t.param | t.grad | t.state) & 15) == 0 && (t.numel & 3) == 0;
}

// The end of the chunk of tensor t that starts at element `start`.
__device__ static inline ha_u64 ha_chunk_end(const HaTensor& t, ha_u64 start) {
    return start + HA_CHUNK < t.numel ? start + HA_CHUNK : t.numel;
}

// Whether an unscaled gradient of the block's chunk is not finite (per thread).
template <typename G> __device__ static inline ha_u32 ha_chunk_nonfinite(const HaTensor& t, HaBlock blk, float inv) {
    const G* grad = (const G*)t.grad;
    ha_u64 start = (ha_u64)blk.chunk * HA_CHUNK, end = ha_chunk_end(t, start);
    ha_u32 bad = 0;
    if (ha_vectorizable(t)) {
        for (ha_u64 i = start + 4 * threadIdx.x; i < end; i += 4 * blockDim.x) {
            HaPack<G> g = ha_load4(grad + i);
            for (int j = 0; j < 4; j++) bad |= ha_nonfinite(ha_to_f32(g.e[j]) * inv);
        }
    } else {
        for (ha_u64 i = start + threadIdx.x; i < end; i += blockDim.x) bad |= ha_nonfinite(ha_to_f32(grad[i]) * inv);
    }
    return bad;
}

template <typename G>
__device__ void ha_check(const HaTensor* tensors, const HaBlock* blocks, float inv, HaStatus* status) {
    HaBlock blk = blocks[blockIdx.x];
    ha_u32 bad = ha_chunk_nonfinite<G>(tensors[blk.tensor], blk, inv);
    if (ha_warp_any(bad) && (threadIdx.x & 31) == 0) atomicExch(&status->nonfinite, 1u);
}

// The q8 maps copied to shared memory (see HaQ8Maps); every thread of the block calls it.
__device__ static inline HaQ8Maps ha_q8_shared_maps() {
    __shared__ ha_u32 maps[256 + 128];
    for (ha_u32 i = threadIdx.x; i < 256 + 128; i += blockDim.x) {
        maps[i] = i < 256 ? ha_q8_unsigned[i] : ha_q8_signed[i - 256];
    }
    __syncthreads();
    HaQ8Maps m = {maps, maps + 256};
    return m;
}

// Calls visit(v_t) for every element [start, end) of tensor t (within one chunk; start a multiple
// of 4), v_t = β2 v + (1 − β2) g² as the update computes it (not stored; g unscaled); returns
// whether an unscaled g was not finite. State S of one element per parameter; q8 below.
template <typename G, typename S> struct HaSecondMoments {
template <typename F>
__device__ static inline ha_u32 each(const HaTensor& t, ha_u64 start, ha_u64 end, const HaScalars& s, F& visit) {
    const G* grad = (const G*)t.grad;
    const S* v = (const S*)t.state + t.numel;
    ha_u32 bad = 0;
    if (ha_vectorizable(t)) {
        for (ha_u64 i = start + 4 * threadIdx.x; i < end; i += 4 * blockDim.x) {
            HaPack<G> gs = ha_load4(grad + i);
            HaPack<S> vs = ha_load4(v + i);
            for (int j = 0; j < 4; j++) {
                float g = ha_to_f32(gs.e[j]) * s.inv_grad_scale;
                bad |= ha_nonfinite(g);
                visit(ha_second_moment(s, ha_to_f32(vs.e[j]), g));
            }
        }
    } else {
        for (ha_u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            float g = ha_to_f32(grad[i]) * s.inv_grad_scale;
            bad |= ha_nonfinite(g);
            visit(ha_second_moment(s, ha_to_f32(v[i]), g));
        }
    }
    return bad;
}
};

// q8 state: v dequantized (HomeAdam's v, slot 1).
template <typename G> struct HaSecondMoments<G, HaQ8Block> {
template <typename F>
__device__ static inline ha_u32 each(const HaTensor& t, ha_u64 start, ha_u64 end, const HaScalars& s, F& visit) {
    const G* grad = (const G*)t.grad;
    const HaQ8Maps maps = ha_q8_shared_maps();
    const HaQ8Block* v = (const HaQ8Block*)t.state + ha_q8_blocks(t.numel);
    const bool unsigned_map = ha_q8_unsigned_slot<HA_RULE_HOMEADAM>(1);
    ha_u32 bad = 0;
    for (ha_u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
        float g = ha_to_f32(grad[i]) * s.inv_grad_scale;
        bad |= ha_nonfinite(g);
        visit(ha_second_moment(s, ha_q8_load(maps, v, unsigned_map, i), g));
    }
    return bad;
}
};

// The global and per-layer first pass: the minima of v_t (all, active) per tensor and over the
// model, and the non-finite flag; nothing where ha_home_bound decided.
template <typename G, typename S>
__device__ void ha_home_pre(HaTensor* tensors, const HaBlock* blocks, HaScalars s, HaStatus* status) {
    if (*(volatile ha_u32*)&status->decided) return;
    HaBlock blk = blocks[blockIdx.x];
    HaTensor& t = tensors[blk.tensor];
    ha_u64 start = (ha_u64)blk.chunk * HA_CHUNK;
    HaVmin vmin = {HA_INF_BITS, HA_INF_BITS};
    auto fold = [&vmin](float v) {
        vmin.all = ha_min_bits(vmin.all, v);
        if (v > 0.0f) vmin.active = ha_min_bits(vmin.active, v);
    };
    ha_u32 bad = HaSecondMoments<G, S>::each(t, start, ha_chunk_end(t, start), s, fold);
    vmin.all = ha_warp_min(vmin.all);
    vmin.active = ha_warp_min(vmin.active);
    if ((threadIdx.x & 31) == 0) {
        atomicMin(&t.vmin_pre.all, vmin.all);
        atomicMin(&t.vmin_pre.active, vmin.active);
        atomicMin(&status->vmin_pre.all, vmin.all);
        atomicMin(&status->vmin_pre.active, vmin.active);
    }
    if (ha_warp_any(bad) && (threadIdx.x & 31) == 0) atomicExch(&status->nonfinite, 1u);
}

// The global rule's bound at a step where u did not prove the srf branch: the finite check of
// every chunk and, in the block whose chunk holds the bound's (element status->bound_at ·
// HA_BOUND_CHUNK of tensor `bound_tensor`, as ha_reset kept it), min v_t over that chunk. Where
// it proves the home branch, it becomes the model's min for the update's ha_home_branch, and
// status->decided stops ha_home_pre, queued next.
template <typename G, typename S>
__device__ void ha_home_bound(const HaTensor* tensors, const HaBlock* blocks, HaScalars s, HaStatus* status,
                              ha_u32 bound_tensor) {
    __shared__ ha_u32 chunk_min;
    HaBlock blk = blocks[blockIdx.x];
    const HaTensor& t = tensors[blk.tensor];
    ha_u32 bad = ha_chunk_nonfinite<G>(t, blk, s.inv_grad_scale);
    if (ha_warp_any(bad) && (threadIdx.x & 31) == 0) atomicExch(&status->nonfinite, 1u);
    ha_u64 start = (ha_u64)blk.chunk * HA_CHUNK, end = ha_chunk_end(t, start);
    ha_u64 at = (ha_u64)status->bound_at * HA_BOUND_CHUNK;
    if (blk.tensor != bound_tensor || at < start || at >= end) return;
    ha_u32 vmin = HA_INF_BITS;
    auto fold = [&vmin](float v) { vmin = ha_min_bits(vmin, v); };
    HaSecondMoments<G, S>::each(t, at, at + HA_BOUND_CHUNK < end ? at + HA_BOUND_CHUNK : end, s, fold);
    if (threadIdx.x == 0) chunk_min = HA_INF_BITS;
    __syncthreads();
    vmin = ha_warp_min(vmin);
    if ((threadIdx.x & 31) == 0) atomicMin(&chunk_min, vmin);
    __syncthreads();
    if (threadIdx.x == 0 && ha_bound_proves_home(chunk_min, s)) {
        status->vmin_pre.all = chunk_min;
        status->decided = 1;
    }
}

// The element-wise calibration pass (at the steps that calibrate τ): v̂_t = v_t / bc2 of every
// element with v_t > 0 counted into `hist` (HA_BUCKETS counts, bucket ha_bucket), and the
// non-finite flag. Each block counts into shared memory, then adds its counts to `hist` with
// 64-bit integer atomics: the counts do not depend on the order (the host saturates them at
// 2^32 − 1, as the core's Histogram).
template <typename G, typename S>
__device__ void ha_home_hist(const HaTensor* tensors, const HaBlock* blocks, HaScalars s, HaStatus* status,
                             ha_u64* hist) {
    __shared__ ha_u32 counts[HA_BUCKETS];
    for (ha_u32 i = threadIdx.x; i < HA_BUCKETS; i += blockDim.x) counts[i] = 0;
    __syncthreads();
    HaBlock blk = blocks[blockIdx.x];
    auto count = [&s](float v) {
        if (v > 0.0f) atomicAdd(&counts[ha_bucket(v / s.bc2)], 1u);
    };
    const HaTensor& t = tensors[blk.tensor];
    ha_u64 start = (ha_u64)blk.chunk * HA_CHUNK;
    ha_u32 bad = HaSecondMoments<G, S>::each(t, start, ha_chunk_end(t, start), s, count);
    __syncthreads();
    for (ha_u32 i = threadIdx.x; i < HA_BUCKETS; i += blockDim.x) {
        if (counts[i] != 0) atomicAdd(hist + i, (ha_u64)counts[i]);
    }
    if (ha_warp_any(bad) && (threadIdx.x & 31) == 0) atomicExch(&status->nonfinite, 1u);
}

// What a thread's elements add to the step's results.
struct HaAcc { ha_u32 home, vmin, bad; HaBoundAcc bound; };

// One element: θ (P) and its state slots st (as f32) updated in place from the stored gradient;
// in SWATS's Adam phase, step² and step · grad go to the block's two exact accumulators.
template <int RULE, typename P>
__device__ static inline void ha_update_elem(const HaScalars& s, ha_u32 flags, int branch, bool stochastic, ha_u64 key,
                                             ha_u64 i, P& param, float grad, float* st, HaAcc& acc) {
    float g = grad * s.inv_grad_scale;
    acc.bad |= ha_nonfinite(g);
    HaElem e = ha_element<RULE>(s, flags, branch, ha_to_f32(param), g, st);
    param = stochastic ? ha_from_f32_stochastic<P>(e.p, ha_stochastic_bits(key, i)) : HaStore<P>::from_f32(e.p);
    if (HaRule<RULE>::RHO_SLOT >= 0) acc.vmin = ha_min_bits(acc.vmin, st[HaRule<RULE>::RHO_SLOT]);
    if (RULE == HA_RULE_HOMEADAM && (flags & HA_BOUND)) ha_bound_fold(acc.bound, st[HaRule<RULE>::RHO_SLOT], i);
    acc.home += e.home;
    if (RULE == HA_RULE_SWATS_ADAM) {
        ha_exact_add(ha_shared, e.step, e.step, HaAtomic());
        ha_exact_add(ha_shared + HA_EXACT_WORDS, e.step, e.grad, HaAtomic());
    }
}

// ha_update_elem with the state slots stored as S.
template <int RULE, typename P, typename S>
__device__ static inline void ha_update_one(const HaScalars& s, ha_u32 flags, int branch, bool stochastic, ha_u64 key,
                                            ha_u64 i, P& param, float grad, S* slots, HaAcc& acc) {
    float st[HA_MAX_SLOTS] = {};
    for (int k = 0; k < HaRule<RULE>::SLOTS; k++) st[k] = ha_to_f32(slots[k]);
    ha_update_elem<RULE, P>(s, flags, branch, stochastic, key, i, param, grad, st, acc);
    for (int k = 0; k < HaRule<RULE>::SLOTS; k++) slots[k] = HaStore<S>::from_f32(st[k]);
}

// What the update of one chunk needs besides the tensor.
struct HaStepCtx {
    HaScalars s;
    ha_u32 flags;
    int branch;
    bool stochastic;
    ha_u64 key;  // the tensor's step key
};

// Updates the elements [start, end) of tensor t, state S of one element per parameter; q8 below.
template <int RULE, typename P, typename G, typename S> struct HaChunk {
__device__ static inline void update(const HaTensor& t, const HaStepCtx& c, ha_u64 start, ha_u64 end, HaAcc& acc) {
    P* param = (P*)t.param;
    const G* grad = (const G*)t.grad;
    S* state = (S*)t.state;
    ha_u64 n = t.numel;
    const int slots = HaRule<RULE>::SLOTS;
    if (ha_vectorizable(t)) {
        for (ha_u64 i = start + 4 * threadIdx.x; i < end; i += 4 * blockDim.x) {
            HaPack<P> ps = ha_load4(param + i);
            HaPack<G> gs = ha_load4(grad + i);
            HaPack<S> ss[HA_MAX_SLOTS];
            for (int k = 0; k < slots; k++) ss[k] = ha_load4(state + k * n + i);
            for (int j = 0; j < 4; j++) {
                S st[HA_MAX_SLOTS];
                for (int k = 0; k < slots; k++) st[k] = ss[k].e[j];
                ha_update_one<RULE, P, S>(c.s, c.flags, c.branch, c.stochastic, c.key, i + j, ps.e[j],
                                          ha_to_f32(gs.e[j]), st, acc);
                for (int k = 0; k < slots; k++) ss[k].e[j] = st[k];
            }
            ha_store4(param + i, ps);
            for (int k = 0; k < slots; k++) ha_store4(state + k * n + i, ss[k]);
        }
    } else {
        for (ha_u64 i = start + threadIdx.x; i < end; i += blockDim.x) {
            S st[HA_MAX_SLOTS];
            for (int k = 0; k < slots; k++) st[k] = state[k * n + i];
            ha_update_one<RULE, P, S>(c.s, c.flags, c.branch, c.stochastic, c.key, i, param[i], ha_to_f32(grad[i]),
                                      st, acc);
            for (int k = 0; k < slots; k++) state[k * n + i] = st[k];
        }
    }
}
};

// q8 state: one HaQ8Block per slot at a time, thread j its element j (blockDim.x == HA_Q8_BLOCK;
// chunks start at a block, HA_CHUNK being a multiple of it). Each element is dequantized, updated
// as with f32 state, then every slot of the block is stored again: the block's max |x| (as f32
// bits, so that any non-finite element, whose bits are ≥ +∞'s, poisons it) through shared
// memory, then each element's code with its stochastic bits.
template <int RULE, typename P, typename G> struct HaChunk<RULE, P, G, HaQ8Block> {
__device__ static inline void update(const HaTensor& t, const HaStepCtx& c, ha_u64 start, ha_u64 end, HaAcc& acc) {
    __shared__ ha_u32 warp_max[HA_MAX_SLOTS][HA_Q8_BLOCK / 32];
    const HaQ8Maps maps = ha_q8_shared_maps();
    P* param = (P*)t.param;
    const G* grad = (const G*)t.grad;
    HaQ8Block* state = (HaQ8Block*)t.state;
    ha_u64 nb = ha_q8_blocks(t.numel);
    const int slots = HaRule<RULE>::SLOTS;
    ha_u64 keys[HA_MAX_SLOTS];
    for (int k = 0; k < slots; k++) keys[k] = ha_q8_slot_key(c.key, k);
    for (ha_u64 b = start / HA_Q8_BLOCK; b * HA_Q8_BLOCK < end; b++) {
        ha_u64 i = b * HA_Q8_BLOCK + threadIdx.x;
        bool in = i < end;
        float st[HA_MAX_SLOTS] = {};
        if (in) {
            for (int k = 0; k < slots; k++) st[k] = ha_q8_load(maps, state + k * nb, ha_q8_unsigned_slot<RULE>(k), i);
            ha_update_elem<RULE, P>(c.s, c.flags, c.branch, c.stochastic, c.key, i, param[i], ha_to_f32(grad[i]), st,
                                    acc);
        }
        for (int k = 0; k < slots; k++) {
            ha_u32 m = ha_warp_max(in ? ha_bits(ha_abs(st[k])) : 0u);
            if ((threadIdx.x & 31) == 0) warp_max[k][threadIdx.x / 32] = m;
        }
        __syncthreads();
        for (int k = 0; k < slots; k++) {
            ha_u32 m = 0;
            for (int w = 0; w < HA_Q8_BLOCK / 32; w++) m = warp_max[k][w] > m ? warp_max[k][w] : m;
            float a = ha_q8_scale(m);
            HaQ8Block& q = state[k * nb + b];
            bool unsigned_map = ha_q8_unsigned_slot<RULE>(k);
            ha_u32 code = in ? ha_q8_code(maps, unsigned_map, st[k], a, ha_q8_bits(keys[k], i)) : 0u;
            q.codes[threadIdx.x] = (ha_u8)code;
            if (threadIdx.x == 0) q.scale = a;
        }
        // warp_max is written again for the next block.
        __syncthreads();
    }
}
};

template <int RULE, typename P, typename G, typename S>
__device__ void ha_update(HaTensor* tensors, const HaBlock* blocks, const HaScalars* groups, ha_u32 flags,
                          ha_u64 sr_base, HaStatus* status, ha_u64* dots) {
    if (*(volatile ha_u32*)&status->nonfinite) return;
    HaBlock blk = blocks[blockIdx.x];
    HaTensor& t = tensors[blk.tensor];
    HaStepCtx c;
    c.s = groups[t.group];
    c.flags = flags;
    c.branch = ha_home_branch(flags, status->vmin_pre, t.vmin_pre, c.s);
    c.stochastic = (flags & HA_STOCHASTIC) != 0;
    c.key = ha_tensor_key(sr_base, blk.tensor);
    ha_u64 n = t.numel;
    ha_u64 start = (ha_u64)blk.chunk * HA_CHUNK, end = start + HA_CHUNK < n ? start + HA_CHUNK : n;
    HaAcc acc = {0u, HA_INF_BITS, 0u, {HA_BOUND_NONE, HA_INF_BITS}};
    if (RULE == HA_RULE_SWATS_ADAM) ha_exact_block_begin(2);
    HaChunk<RULE, P, G, S>::update(t, c, start, end, acc);
    // dots: per tensor, the accumulators of pᵀp and pᵀg.
    if (RULE == HA_RULE_SWATS_ADAM) ha_exact_block_end(2, dots + (ha_u64)blk.tensor * 2 * HA_EXACT_WORDS);
    ha_u32 home = acc.home, vmin = acc.vmin, bad = acc.bad;
    vmin = ha_warp_min(vmin);
    home = ha_warp_sum(home);
    if (ha_warp_any(bad) && (threadIdx.x & 31) == 0) atomicExch(&status->nonfinite_applied, 1u);
    if ((threadIdx.x & 31) == 0) {
        if (HaRule<RULE>::RHO_SLOT >= 0) {
            atomicMin(&t.vmin_post, vmin);
            atomicMin(&status->vmin_post, vmin);
        }
        if (RULE == HA_RULE_HOMEADAM && home != 0) {
            atomicAdd(&t.home, home);
            atomicAdd(&status->home, (ha_u64)home);
        }
    }
    // The bound's minima go through shared memory: one global atomic of each per block, as every
    // block's status atomics meet in one line of L2.
    if (RULE == HA_RULE_HOMEADAM && HaBoundOf<S>::KEPT && (flags & HA_BOUND)) {
        __shared__ ha_u64 block_at;
        __shared__ ha_u32 block_active;
        ha_u64 at = ha_warp_min64(acc.bound.at);
        ha_u32 active = ha_warp_min(acc.bound.active);
        if (threadIdx.x == 0) {
            block_at = HA_BOUND_NONE;
            block_active = HA_INF_BITS;
        }
        __syncthreads();
        if ((threadIdx.x & 31) == 0) {
            atomicMin(&block_at, at);
            atomicMin(&block_active, active);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            atomicMin(&t.vmin_at, block_at);
            atomicMin(&status->bound, HaBoundOf<S>::model_key((ha_u32)(block_at >> 32), blk.tensor));
            atomicMin(&status->vmin_post_active, block_active);
        }
    }
}

// Σ g² over every gradient as stored (no scale), exactly, into the accumulator `out`; the
// gradient pointers are `grads` (the table's are installed only by the next ha_reset). The block
// walks its chunk in tiles of HA_SQUARE_TILE values a thread, held in registers, so that each
// gradient is read once: the largest exponent of a warp's tile sets its window
// (homeadam_exact.h), the tile's squares add into it, and the warp's windows add up by shuffles
// and reach the block's accumulator in at most five atomics, so that shared atomics are per warp
// and tile, not per element. Any grouping gives the same words: the sums are exact.
#define HA_SQUARE_TILE 8
template <typename G>
__device__ void ha_grad_sq(const HaTensor* tensors, const HaBlock* blocks, const ha_u64* grads, ha_u64* out) {
    static_assert(32 * HA_SQUARE_TILE <= (1 << 16), "a warp's window adds at most 2^16 squares");
    HaBlock blk = blocks[blockIdx.x];
    const HaTensor& t = tensors[blk.tensor];
    const G* grad = (const G*)grads[blk.tensor];
    ha_u64 start = (ha_u64)blk.chunk * HA_CHUNK, end = start + HA_CHUNK < t.numel ? start + HA_CHUNK : t.numel;
    ha_exact_block_begin(1);
    // The same number of tiles in every thread of the block: the shuffles below need the whole warp.
    for (ha_u64 tile = start; tile < end; tile += (ha_u64)blockDim.x * HA_SQUARE_TILE) {
        float g[HA_SQUARE_TILE];
        ha_u32 top = HA_SQUARE_NONE;
#pragma unroll
        for (int k = 0; k < HA_SQUARE_TILE; k++) {
            ha_u64 i = tile + (ha_u64)k * blockDim.x + threadIdx.x;
            g[k] = i < end ? ha_to_f32(grad[i]) : 0.0f;
            ha_u32 e = ha_square_top(g[k]);
            top = e > top ? e : top;
        }
        int base = ha_square_base(ha_warp_max(top));
        HaWide acc = {0, 0};
#pragma unroll
        for (int k = 0; k < HA_SQUARE_TILE; k++) {
            if (!ha_square_window_add(&acc, g[k], base)) ha_exact_add(ha_shared, g[k], g[k], HaAtomic());
        }
        for (int o = 16; o > 0; o >>= 1) {
            HaWide other = {__shfl_xor_sync(0xffffffffu, acc.lo, o), __shfl_xor_sync(0xffffffffu, acc.hi, o)};
            acc = ha_wide_add(acc, other);
        }
        if ((threadIdx.x & 31) == 0) ha_exact_add_window(ha_shared, acc, base, HaAtomic());
    }
    ha_exact_block_end(1, out);
}

// {name}_{p}_{g}_{s}: the update kernel of rule id RULE for storage types P, G, S.
#define HA_UPDATE(name, RULE, P, G, S, p, g, s)                                                                 \
    extern "C" __global__ void name##_##p##_##g##_##s(HaTensor* tensors, const HaBlock* blocks,                 \
                                                      const HaScalars* groups, ha_u32 flags, ha_u64 sr_base,    \
                                                      HaStatus* status, ha_u64* dots) {                         \
        ha_update<RULE, P, G, S>(tensors, blocks, groups, flags, sr_base, status, dots);                         \
    }
// ha_grad_sq_{g}: Σ g² of gradients of type G.
#define HA_GRAD_SQ(G, g)                                                                                        \
    extern "C" __global__ void ha_grad_sq_##g(const HaTensor* tensors, const HaBlock* blocks, const ha_u64* grads, \
                                              ha_u64* out) {                                                   \
        ha_grad_sq<G>(tensors, blocks, grads, out);                                                             \
    }
// ha_check_{g}: the finite check of gradients of type G.
#define HA_CHECK(G, g)                                                                                          \
    extern "C" __global__ void ha_check_##g(const HaTensor* tensors, const HaBlock* blocks, float inv, HaStatus* status) { \
        ha_check<G>(tensors, blocks, inv, status);                                                              \
    }
// ha_home_pre_{g}_{s}: the HomeAdam first pass over gradients G and state S.
#define HA_PRE(G, S, g, s)                                                                                    \
    extern "C" __global__ void ha_home_pre_##g##_##s(HaTensor* tensors, const HaBlock* blocks, HaScalars sc,  \
                                                     HaStatus* status) {                                      \
        ha_home_pre<G, S>(tensors, blocks, sc, status);                                                       \
    }
// ha_home_bound_{g}_{s}: the global rule's bound over gradients G and state S (not q8).
#define HA_HOME_BOUND(G, S, g, s)                                                                                  \
    extern "C" __global__ void ha_home_bound_##g##_##s(const HaTensor* tensors, const HaBlock* blocks,         \
                                                       HaScalars sc, HaStatus* status, ha_u32 bound_tensor) { \
        ha_home_bound<G, S>(tensors, blocks, sc, status, bound_tensor);                                       \
    }
// ha_home_hist_{g}_{s}: the element-wise calibration pass over gradients G and state S.
#define HA_HIST(G, S, g, s)                                                                                   \
    extern "C" __global__ void ha_home_hist_##g##_##s(const HaTensor* tensors, const HaBlock* blocks,          \
                                                      HaScalars sc, HaStatus* status, ha_u64* hist) {         \
        ha_home_hist<G, S>(tensors, blocks, sc, status, hist);                                                \
    }

#endif
