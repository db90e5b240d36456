// Column sums of a rows × cols matrix in a fixed order, so that a seed repeats its bits
// (host/src/models/cuda.rs: the bias gradient Σ_r ∂L/∂y_r of the fused linear layer, layer
// norm's γ and β gradients).

// The first pass of column sums over a rows × cols matrix: block (32, 8) sums 32 columns over
// the rows [blockIdx.y · chunk, (blockIdx.y + 1) · chunk), each of its 8 row lanes every 8th
// row, the lanes then added in order; partial[blockIdx.y · cols + j] holds the chunk's sum.
extern "C" __global__ void homeadam_column_sum_partial_f32(const float *x, float *partial,
        unsigned int rows, unsigned int cols, unsigned int chunk) {
    __shared__ float lanes[8][33];
    unsigned int j = blockIdx.x * 32 + threadIdx.x;
    unsigned long long first = (unsigned long long)blockIdx.y * chunk;
    unsigned long long end = first + chunk < rows ? first + chunk : rows;
    float sum = 0.0f;
    if (j < cols) {
        for (unsigned long long r = first + threadIdx.y; r < end; r += 8) sum += x[r * cols + j];
    }
    lanes[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        for (int k = 1; k < 8; k++) sum += lanes[k][threadIdx.x];
        partial[(unsigned long long)blockIdx.y * cols + j] = sum;
    }
}

// The second pass: out[j] = Σ_c partial[c · cols + j], the chunks in order.
extern "C" __global__ void homeadam_column_sum_finish_f32(const float *partial, float *out,
        unsigned int chunks, unsigned int cols) {
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (unsigned int c = 0; c < chunks; c++) sum += partial[(unsigned long long)c * cols + j];
        out[j] = sum;
    }
}
