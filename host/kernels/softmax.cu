// Attention's causal softmax (host/src/models/softmax.rs), one warp per row of scores: row r is
// query position i = r mod t of a [.., t, t] tensor, and keys j > i are masked out:
// y_j = e^{z_j − max z} / Σ_{k ≤ i} e^{z_k − max z} with z_j = s_j / c for j ≤ i, y_j = 0 for j > i.

extern "C" __global__ void homeadam_causal_softmax_f32(const float *s, float *y, unsigned int rows,
        unsigned int t, float divisor) {
    unsigned int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    unsigned int lane = threadIdx.x % 32;
    unsigned int i = r % t;
    unsigned long long offset = (unsigned long long)r * t;
    float m = NEG_INF;
    for (unsigned int j = lane; j <= i; j += 32) m = fmaxf(m, s[offset + j] / divisor);
    m = warp_max(m);
    float sum = 0.0f;
    for (unsigned int j = lane; j <= i; j += 32) sum += expf(s[offset + j] / divisor - m);
    sum = warp_sum(sum);
    for (unsigned int j = lane; j < t; j += 32) {
        y[offset + j] = j <= i ? expf(s[offset + j] / divisor - m) / sum : 0.0f;
    }
}

// ∂L/∂s_j = y_j (∂L/∂y_j − Σ_k y_k ∂L/∂y_k) / c (zero where y_j is masked).
extern "C" __global__ void homeadam_causal_softmax_backward_f32(const float *y, const float *dy,
        float *ds, unsigned int rows, unsigned int t, float divisor) {
    unsigned int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    unsigned int lane = threadIdx.x % 32;
    unsigned long long offset = (unsigned long long)r * t;
    float dot = 0.0f;
    for (unsigned int j = lane; j < t; j += 32) dot += y[offset + j] * dy[offset + j];
    dot = warp_sum(dot);
    for (unsigned int j = lane; j < t; j += 32) {
        ds[offset + j] = y[offset + j] * (dy[offset + j] - dot) / divisor;
    }
}
