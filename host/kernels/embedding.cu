// The embedding lookup on the device (host/src/models/embedding.rs).

// out[i, j] = table[ids[i], j]; an id outside the vocabulary gives NaN. 32-bit indices into out
// (the host checks that it has fewer than 2³² elements).
extern "C" __global__ void homeadam_embedding_f32(const float *table, const unsigned int *ids, float *out,
        unsigned int n, unsigned int vocab, unsigned int d) {
    for (unsigned int o = blockIdx.x * blockDim.x + threadIdx.x; o < n * d; o += gridDim.x * blockDim.x) {
        unsigned int id = ids[o / d];
        out[o] = id < vocab ? table[(unsigned long long)id * d + o % d] : __int_as_float(0x7fc00000);
    }
}

// ∂L/∂table[v] = Σ_{i : ids[i] = v} ∂L/∂out[i], rows of ids that do not occur left as they are
// (zero). Block i works only if position i is the first occurrence of its id, and then sums that
// id's rows in ascending position, so that the bits repeat; the work is n² id comparisons and
// one read of the gradient, not a pass over the vocabulary.
extern "C" __global__ void homeadam_embedding_backward_f32(const unsigned int *ids, const float *grad,
        float *table_grad, unsigned int n, unsigned int vocab, unsigned int d) {
    unsigned int i = blockIdx.x;
    unsigned int id = ids[i];
    int earlier = 0;
    for (unsigned int k = threadIdx.x; k < i; k += blockDim.x) earlier |= ids[k] == id;
    if (__syncthreads_or(earlier) || id >= vocab) return;
    for (unsigned int j = threadIdx.x; j < d; j += blockDim.x) {
        float sum = 0.0f;
        for (unsigned int k = i; k < n; k++) {
            if (ids[k] == id) sum += grad[(unsigned long long)k * d + j];
        }
        table_grad[(unsigned long long)id * d + j] = sum;
    }
}
