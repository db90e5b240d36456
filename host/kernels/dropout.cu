// The dropout mask on the device (host/src/models/dropout.rs): one thread per element
// (grid-stride), SplitMix64's draw ⌊j/2⌋ computed from the state, then an IEEE multiply by the
// factor. HOMEADAM_GAMMA is the host's rng::GAMMA (a unit test in dropout.rs holds them equal).
#define HOMEADAM_GAMMA 0x9e3779b97f4a7c15ull
extern "C" __global__ void homeadam_dropout_f32(const float *x, float *y, unsigned long long n,
        unsigned long long state, unsigned long long threshold, float scale) {
    for (unsigned long long j = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; j < n;
         j += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long z = state + HOMEADAM_GAMMA * (j / 2 + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        unsigned long long half = (j & 1) ? (z & 0xffffffffull) : (z >> 32);
        y[j] = __fmul_rn(x[j], half >= threshold ? scale : 0.0f);
    }
}
