// A convolution's bias on the device (host/src/models/channel_bias.rs): y = x + b[c] over NCHW
// values, or with the ReLU after it y = max(x + b[c], 0), and the bias gradient Σ_{n, h, w} ∂L/∂s
// of the sum s = x + b in a fixed order: block (c, k) sums channel c of the images
// [k · chunk, (k + 1) · chunk) (each thread a strided share, then the block's tree), then one
// thread per channel adds the chunks in order. 32-bit indices (the host checks that the tensor
// has fewer than 2³² elements).

extern "C" __global__ void homeadam_channel_bias_f32(const float *x, const float *b, float *y,
        unsigned int n, unsigned int channels, unsigned int plane) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = x[i] + b[i / plane % channels];
    }
}

extern "C" __global__ void homeadam_channel_bias_relu_f32(const float *x, const float *b, float *y,
        unsigned int n, unsigned int channels, unsigned int plane) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = fmaxf(x[i] + b[i / plane % channels], 0.0f);
    }
}

// ∂L/∂x = ∂L/∂y [x + b[c] ≥ 0], the sum recomputed (the gradient passes where the ReLU's input is
// ≥ 0, as in relu.cu).
extern "C" __global__ void homeadam_channel_bias_relu_backward_f32(const float *x, const float *b,
        const float *dy, float *dx, unsigned int n, unsigned int channels, unsigned int plane) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        dx[i] = x[i] + b[i / plane % channels] >= 0.0f ? dy[i] : 0.0f;
    }
}

// partial[k · channels + c] = Σ of channel c over the chunk k of images.
extern "C" __global__ void homeadam_channel_sum_partial_f32(const float *g, float *partial,
        unsigned int batch, unsigned int channels, unsigned int plane, unsigned int chunk) {
    unsigned int c = blockIdx.x, first = blockIdx.y * chunk;
    unsigned int images = min(chunk, batch - first);
    float sum = 0.0f;
    for (unsigned int k = threadIdx.x; k < images * plane; k += blockDim.x) {
        sum += g[((first + k / plane) * channels + c) * plane + k % plane];
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) partial[blockIdx.y * channels + c] = sum;
}

// out[c] = Σ_k partial[k · channels + c], the chunks in order.
extern "C" __global__ void homeadam_channel_sum_finish_f32(const float *partial, float *out,
        unsigned int chunks, unsigned int channels) {
    for (unsigned int c = blockIdx.x * blockDim.x + threadIdx.x; c < channels; c += gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (unsigned int k = 0; k < chunks; k++) sum += partial[k * channels + c];
        out[c] = sum;
    }
}
