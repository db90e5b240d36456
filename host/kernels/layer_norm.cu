// Layer normalisation over the last dimension (host/src/models/layer_norm.rs), one warp per
// row: μ = Σ x / d, σ² = Σ (x − μ)² / d (two passes, as the CPU's composition), x̂ = (x − μ) / √(σ² + ε).
// The backward pass recomputes μ and σ (nothing is stored).

// μ and √(σ² + ε) of the row, in every lane of the warp.
__device__ void row_moments(const float *row, unsigned int d, float eps, float *mean, float *std) {
    unsigned int lane = threadIdx.x % 32;
    float sum = 0.0f;
    for (unsigned int j = lane; j < d; j += 32) sum += row[j];
    float m = warp_sum(sum) / d;
    float sq = 0.0f;
    for (unsigned int j = lane; j < d; j += 32) {
        float c = row[j] - m;
        sq += c * c;
    }
    *mean = m;
    *std = sqrtf(warp_sum(sq) / d + eps);
}

// y = x̂ γ + β for rows × d values.
extern "C" __global__ void homeadam_layer_norm_f32(const float *x, const float *gamma, const float *beta,
        float *y, unsigned int rows, unsigned int d, float eps) {
    unsigned int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    unsigned long long offset = (unsigned long long)r * d;
    float mean, std;
    row_moments(x + offset, d, eps, &mean, &std);
    for (unsigned int j = threadIdx.x % 32; j < d; j += 32) {
        y[offset + j] = (x[offset + j] - mean) / std * gamma[j] + beta[j];
    }
}

// With g = ∂L/∂y ⊙ γ: ∂L/∂x = (g − mean(g) − x̂ mean(g ⊙ x̂)) / σ, and ∂L/∂y ⊙ x̂ into dy_xhat (whose
// column sums are ∂L/∂γ; those of ∂L/∂y are ∂L/∂β).
extern "C" __global__ void homeadam_layer_norm_backward_f32(const float *x, const float *gamma,
        const float *dy, float *dx, float *dy_xhat, unsigned int rows, unsigned int d, float eps) {
    unsigned int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    unsigned int lane = threadIdx.x % 32;
    unsigned long long offset = (unsigned long long)r * d;
    float mean, std;
    row_moments(x + offset, d, eps, &mean, &std);
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (unsigned int j = lane; j < d; j += 32) {
        float xhat = (x[offset + j] - mean) / std;
        float g = dy[offset + j] * gamma[j];
        g_sum += g;
        gx_sum += g * xhat;
        dy_xhat[offset + j] = dy[offset + j] * xhat;
    }
    float g_mean = warp_sum(g_sum) / d;
    float gx_mean = warp_sum(gx_sum) / d;
    for (unsigned int j = lane; j < d; j += 32) {
        float xhat = (x[offset + j] - mean) / std;
        float g = dy[offset + j] * gamma[j];
        dx[offset + j] = (g - g_mean - xhat * gx_mean) / std;
    }
}
