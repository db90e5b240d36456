// Attention's heads (host/src/models/heads.rs): between a packed [b, t, parts · h · e] tensor
// (the input projection's q, k and v side by side: parts = 3; the heads' merged output: parts = 1)
// and the [b, h, t, e] heads of one part. One thread per element of the written tensor; 32-bit
// indices (the host checks that both tensors have fewer than 2³² elements), whose divisions cost
// a fraction of 64-bit ones.

struct Heads {
    unsigned int b, t, h, e, parts, which;
};

// heads[i, j, s, k] = packed[i, s, which · h · e + j · e + k].
extern "C" __global__ void homeadam_to_heads_f32(const float *packed, float *heads, Heads q) {
    unsigned int n = q.b * q.h * q.t * q.e;
    unsigned int width = q.parts * q.h * q.e;
    for (unsigned int o = blockIdx.x * blockDim.x + threadIdx.x; o < n; o += gridDim.x * blockDim.x) {
        unsigned int k = o % q.e, rest = o / q.e;
        unsigned int s = rest % q.t, ij = rest / q.t;
        unsigned int j = ij % q.h, i = ij / q.h;
        heads[o] = packed[(i * q.t + s) * width + (q.which * q.h + j) * q.e + k];
    }
}

// The inverse: packed[i, s, c] = heads[i, j, s, k] for c = which · h · e + j · e + k, and 0 in
// the other parts.
extern "C" __global__ void homeadam_from_heads_f32(const float *heads, float *packed, Heads q) {
    unsigned int width = q.parts * q.h * q.e;
    unsigned int n = q.b * q.t * width;
    unsigned int part = q.h * q.e;
    for (unsigned int o = blockIdx.x * blockDim.x + threadIdx.x; o < n; o += gridDim.x * blockDim.x) {
        unsigned int c = o % width, is = o / width;
        unsigned int s = is % q.t, i = is / q.t;
        float v = 0.0f;
        if (c / part == q.which) {
            unsigned int j = c % part / q.e, k = c % q.e;
            v = heads[((i * q.h + j) * q.t + s) * q.e + k];
        }
        packed[o] = v;
    }
}
