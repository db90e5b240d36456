// ReLU on the device (host/src/models/relu.rs): y = max(x, 0); the gradient passes where x ≥ 0,
// as candle's CPU backward pass (which compares the input with zero by `ge`). The ReLU of a sum,
// y = max(a + b, 0), recomputes a + b in its backward pass, so that it keeps no sum.
extern "C" __global__ void homeadam_relu_f32(const float *x, float *y, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        y[i] = fmaxf(x[i], 0.0f);
    }
}

extern "C" __global__ void homeadam_relu_backward_f32(const float *x, const float *dy, float *dx,
        unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        dx[i] = x[i] >= 0.0f ? dy[i] : 0.0f;
    }
}

extern "C" __global__ void homeadam_relu_of_sum_f32(const float *a, const float *b, float *y,
        unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        y[i] = fmaxf(a[i] + b[i], 0.0f);
    }
}

// ∂L/∂a = ∂L/∂b = ∂L/∂y [a + b ≥ 0].
extern "C" __global__ void homeadam_relu_of_sum_backward_f32(const float *a, const float *b,
        const float *dy, float *d, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        d[i] = a[i] + b[i] >= 0.0f ? dy[i] : 0.0f;
    }
}
