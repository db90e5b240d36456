// The fused linear layer's bias (host/src/models/linear.rs): written into every row of the output
// before the GEMM adds x Wᵀ to it (cuBLAS with β = 1), in place of a broadcast add after it.

// y[r, j] = b[j] for every row r of a rows × cols output (32-bit indices: the host checks that
// it has fewer than 2³² elements).
extern "C" __global__ void homeadam_bias_rows_f32(const float *b, float *y, unsigned int n, unsigned int cols) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = b[i % cols];
    }
}
