// Batch norm's running statistics on the device (host/src/models/cudnn/batch_norm.rs), in place:
// r ← (1 − momentum) r + momentum · s, the CPU's expression.
extern "C" __global__ void homeadam_running_average_f32(float *r, const float *s, unsigned int n, float momentum) {
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        r[i] = r[i] * (1.0f - momentum) + s[i] * momentum;
    }
}
