// The fused cross-entropy on the device (host/src/models/cross_entropy.rs).
#define QNAN (__int_as_float(0x7fc00000))

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
