// A convolution's bias on the device (host/src/models/channel_bias.rs): y = x + b[c] over NCHW
// values, and the bias gradient Σ_{n, h, w} ∂L/∂y in a fixed order: block (c, k) sums channel c
// of the images [k · chunk, (k + 1) · chunk) (each thread a strided share, then the block's
// tree), then one thread per channel adds the chunks in order. 32-bit indices (the host checks
// that the tensor has fewer than 2³² elements).

extern "C" __global__ void homeadam_channel_bias_f32(const float *x, const float *b, float *y,
        unsigned int n, unsigned int channels, unsigned int plane) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = x[i] + b[i / plane % channels];
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
