// Max-pooling with PyTorch's semantics on the device (host/src/models/max_pool.rs).
struct Pool { int k, s, p, h, w, oh, ow; };

/* The winner of output (i, j) in `plane`, as Pool::winner. */
__device__ int winner(const float *plane, struct Pool q, int i, int j) {
    int y0 = i * q.s - q.p, x0 = j * q.s - q.p;
    int best = -1;
    float value = 0.0f;
    for (int y = max(y0, 0); y < min(y0 + q.k, q.h); y++) {
        for (int x = max(x0, 0); x < min(x0 + q.k, q.w); x++) {
            int at = y * q.w + x;
            float v = plane[at];
            if (best < 0 || v > value || v != v) {
                best = at;
                value = v;
                if (v != v) return best;
            }
        }
    }
    return best;
}

extern "C" __global__ void homeadam_max_pool_f32(const float *x, float *y, unsigned long long planes,
        struct Pool q) {
    unsigned long long total = planes * q.oh * q.ow;
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; t < total;
         t += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long plane = t / (q.oh * q.ow);
        int o = (int)(t % (q.oh * q.ow));
        const float *p = x + plane * q.h * q.w;
        y[t] = p[winner(p, q, o / q.ow, o % q.ow)];
    }
}

extern "C" __global__ void homeadam_max_pool_backward_f32(const float *x, const float *g, float *dx,
        unsigned long long planes, struct Pool q) {
    unsigned long long total = planes * q.h * q.w;
    for (unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; t < total;
         t += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long plane = t / (q.h * q.w);
        int at = (int)(t % (q.h * q.w));
        int yy = at / q.w, xx = at % q.w;
        const float *p = x + plane * q.h * q.w;
        const float *gp = g + plane * q.oh * q.ow;
        int i0 = max(yy + q.p + 1 - q.k, 0), j0 = max(xx + q.p + 1 - q.k, 0);
        i0 = (i0 + q.s - 1) / q.s;
        j0 = (j0 + q.s - 1) / q.s;
        int i1 = min((yy + q.p) / q.s, q.oh - 1), j1 = min((xx + q.p) / q.s, q.ow - 1);
        float sum = 0.0f;
        for (int i = i0; i <= i1; i++)
            for (int j = j0; j <= j1; j++)
                if (winner(p, q, i, j) == at) sum = __fadd_rn(sum, gp[i * q.ow + j]);
        dx[t] = sum;
    }
}
