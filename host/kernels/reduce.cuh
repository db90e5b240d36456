// Reductions in a fixed order (the same bits run after run), shared by the host's kernels: the
// host's NVRTC compilation (host/src/models/cuda.rs) puts this file before each kernel source.
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The maximum (IS_MAX) or the sum over the block (a multiple of 32 threads), in every thread:
// each warp's, then the first warp's over the warps'.
template <bool IS_MAX>
__device__ float block_reduce(float v) {
    __shared__ float shared[32];
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : (IS_MAX ? NEG_INF : 0.0f);
        v = IS_MAX ? warp_max(v) : warp_sum(v);
        if (threadIdx.x == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}

// The maximum over the block (a multiple of 32 threads), in every thread.
__device__ float block_max(float v) { return block_reduce<true>(v); }

// The sum over the block (a multiple of 32 threads), in every thread.
__device__ float block_sum(float v) { return block_reduce<false>(v); }
