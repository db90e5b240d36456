// The fused cross-entropy on the device (host/src/models/cross_entropy.rs).
#define NEG_INF (-__int_as_float(0x7f800000))
#define QNAN (__int_as_float(0x7fc00000))

__device__ float block_max(float v) {
    __shared__ float shared[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : NEG_INF;
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (threadIdx.x == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}

__device__ float block_sum(float v) {
    __shared__ float shared[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}

/* The row's maximum and Σ e^{x − max}. */
__device__ void row_stats(const float *row, unsigned int cols, float *m, float *s) {
    float v = NEG_INF;
    for (unsigned int j = threadIdx.x; j < cols; j += blockDim.x) v = fmaxf(v, row[j]);
    *m = block_max(v);
    float sum = 0.0f;
    for (unsigned int j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(row[j] - *m);
    *s = block_sum(sum);
}

extern "C" __global__ void homeadam_cross_entropy_f32(const float *x, const unsigned int *t, float *loss,
        unsigned int cols) {
    const float *row = x + (unsigned long long)blockIdx.x * cols;
    float m, s;
    row_stats(row, cols, &m, &s);
    if (threadIdx.x == 0) {
        unsigned int c = t[blockIdx.x];
        loss[blockIdx.x] = c < cols ? logf(s) + m - row[c] : QNAN;
    }
}

extern "C" __global__ void homeadam_cross_entropy_backward_f32(const float *x, const unsigned int *t,
        const float *g, float *dx, unsigned int cols) {
    unsigned long long offset = (unsigned long long)blockIdx.x * cols;
    const float *row = x + offset;
    float m, s;
    row_stats(row, cols, &m, &s);
    float gr = g[blockIdx.x];
    float scale = gr / s;
    unsigned int c = t[blockIdx.x];
    for (unsigned int j = threadIdx.x; j < cols; j += blockDim.x) {
        float p = expf(row[j] - m) * scale;
        dx[offset + j] = j == c ? p - gr : p;
    }
}
