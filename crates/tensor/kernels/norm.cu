// Batch normalisation over dimension 1 of contiguous [N, C, spatial] input. Per-channel
// statistics take one block per channel (blockDim.x a power of two, shared memory of
// 2*blockDim.x doubles) and accumulate in double like the CPU; the elementwise passes
// then use the double statistics so results agree with the CPU to rounding.

__device__ void block_sum2(double& a, double& b, double* part) {
    double* pa = part;
    double* pb = part + blockDim.x;
    pa[threadIdx.x] = a;
    pb[threadIdx.x] = b;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            pa[threadIdx.x] += pa[threadIdx.x + s];
            pb[threadIdx.x] += pb[threadIdx.x + s];
        }
        __syncthreads();
    }
    a = pa[0];
    b = pb[0];
    __syncthreads();
}

#define NORM(T, S)                                                                                   \
    /* Training: batch mean and 1/sqrt(biased var + eps), two passes. */                            \
    extern "C" __global__ void bn_stats_##S(const T* x, long long n, long long c, long long sp,     \
                                            double eps, double* st, T* mean, T* invstd) {           \
        extern __shared__ double part[];                                                             \
        long long ch = blockIdx.x;                                                                   \
        long long cnt = n * sp;                                                                      \
        double s = 0.0, unused = 0.0;                                                                \
        for (long long k = threadIdx.x; k < cnt; k += blockDim.x)                                    \
            s += (double)x[((k / sp) * c + ch) * sp + k % sp];                                       \
        block_sum2(s, unused, part);                                                                 \
        double m = s / (double)cnt, v = 0.0;                                                         \
        for (long long k = threadIdx.x; k < cnt; k += blockDim.x) {                                  \
            double d = (double)x[((k / sp) * c + ch) * sp + k % sp] - m;                             \
            v += d * d;                                                                              \
        }                                                                                            \
        block_sum2(v, unused, part);                                                                 \
        if (threadIdx.x == 0) {                                                                      \
            double is = 1.0 / sqrt(v / (double)cnt + eps);                                          \
            st[2 * ch] = m;                                                                          \
            st[2 * ch + 1] = is;                                                                     \
            mean[ch] = (T)m;                                                                         \
            invstd[ch] = (T)is;                                                                      \
        }                                                                                            \
    }                                                                                                \
    /* Evaluation: the running statistics. */                                                       \
    extern "C" __global__ void bn_eval_stats_##S(const T* rm, const T* rv, long long c, double eps,  \
                                                 double* st, T* mean, T* invstd) {                   \
        GRID_LOOP(ch, c) {                                                                           \
            double m = (double)rm[ch], is = 1.0 / sqrt((double)rv[ch] + eps);                        \
            st[2 * ch] = m;                                                                          \
            st[2 * ch + 1] = is;                                                                     \
            mean[ch] = (T)m;                                                                         \
            invstd[ch] = (T)is;                                                                      \
        }                                                                                            \
    }                                                                                                \
    extern "C" __global__ void bn_apply_##S(const T* x, const T* w, const T* b, const double* st,   \
                                            T* y, long long total, long long c, long long sp) {     \
        GRID_LOOP(i, total) {                                                                        \
            long long ch = (long long)((i / sp) % c);                                                \
            double m = st[2 * ch], is = st[2 * ch + 1], wc = (double)w[ch];                          \
            T scale = (T)(is * wc), shift = (T)((double)b[ch] - m * is * wc);                        \
            y[i] = x[i] * scale + shift;                                                             \
        }                                                                                            \
    }                                                                                                \
    /* Backward sums per channel: sg = sum(g), sgx = sum(g * xhat); dw = sgx, db = sg. */           \
    extern "C" __global__ void bn_bwd_sums_##S(const T* x, const T* gy, const T* mean,              \
                                               const T* invstd, long long n, long long c,            \
                                               long long sp, double* sums, T* dw, T* db) {           \
        extern __shared__ double part[];                                                             \
        long long ch = blockIdx.x, cnt = n * sp;                                                     \
        double m = (double)mean[ch], is = (double)invstd[ch], sg = 0.0, sgx = 0.0;                   \
        for (long long k = threadIdx.x; k < cnt; k += blockDim.x) {                                  \
            long long i = ((k / sp) * c + ch) * sp + k % sp;                                         \
            double g = (double)gy[i];                                                                \
            sg += g;                                                                                 \
            sgx += g * ((double)x[i] - m) * is;                                                      \
        }                                                                                            \
        block_sum2(sg, sgx, part);                                                                   \
        if (threadIdx.x == 0) {                                                                      \
            sums[2 * ch] = sg;                                                                       \
            sums[2 * ch + 1] = sgx;                                                                  \
            dw[ch] = (T)sgx;                                                                         \
            db[ch] = (T)sg;                                                                          \
        }                                                                                            \
    }                                                                                                \
    extern "C" __global__ void bn_bwd_dx_##S(const T* x, const T* gy, const T* w, const T* mean,    \
                                             const T* invstd, const double* sums, T* dx,             \
                                             long long total, long long c, long long sp, int training) { \
        GRID_LOOP(i, total) {                                                                        \
            long long ch = (long long)((i / sp) % c);                                                \
            double m = (double)mean[ch], is = (double)invstd[ch], wc = (double)w[ch];                \
            double g = (double)gy[i], cnt = (double)(total / c);                                     \
            double r;                                                                                \
            if (training) {                                                                          \
                double xhat = ((double)x[i] - m) * is;                                               \
                r = wc * is * (g - sums[2 * ch] / cnt - xhat * sums[2 * ch + 1] / cnt);              \
            } else {                                                                                 \
                r = wc * is * g;                                                                     \
            }                                                                                        \
            dx[i] = (T)r;                                                                            \
        }                                                                                            \
    }
NORM(float, f32)
NORM(double, f64)
