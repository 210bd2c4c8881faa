// CTC forward-backward on the GPU (blank = 0), the same recursions as crate::cpu::ctc in
// log space and double: ctc_alpha_beta runs one block per sample, its threads over the
// extended label positions s, stepping through time with a barrier per frame; ctc_grad
// then gives d nll / d log_probs per (frame, sample, class) from alpha·beta.
//
// lp [T, N, C] log-probabilities (contiguous); ext [N, smax] extended labels (b, l1, b,
// ..., b; host-built); slen [N] their lengths; flen [N] the frames each sample uses;
// alpha, beta [N, tmax, smax]; nll [N].

__device__ __forceinline__ double log_add(double a, double b) {
    double ninf = -inf_of(0.0);
    if (a == ninf) return b;
    if (b == ninf) return a;
    double m = fmax(a, b);
    return m + log(exp(a - m) + exp(b - m));
}

template <typename T>
__device__ void alpha_beta(const T* lp, const unsigned* ext, const unsigned* slen,
                           const unsigned* flen, double* alpha, double* beta, double* nll,
                           unsigned long long n, unsigned long long c, unsigned long long tmax,
                           unsigned long long smax) {
    unsigned long long i = blockIdx.x;
    if (i >= n) return;
    const double ninf = -inf_of(0.0);
    long long S = slen[i], F = flen[i];
    const unsigned* e = ext + i * smax;
    double* a = alpha + i * tmax * smax;
    double* b = beta + i * tmax * smax;
#define LP(t, k) ((double)lp[((unsigned long long)(t) * n + i) * c + (k)])
    for (long long s = threadIdx.x; s < S; s += blockDim.x) a[s] = s < 2 ? LP(0, e[s]) : ninf;
    __syncthreads();
    for (long long t = 1; t < F; ++t) {
        for (long long s = threadIdx.x; s < S; s += blockDim.x) {
            double v = a[(t - 1) * smax + s];
            if (s >= 1) v = log_add(v, a[(t - 1) * smax + s - 1]);
            if (s >= 2 && e[s] != 0 && e[s] != e[s - 2]) v = log_add(v, a[(t - 1) * smax + s - 2]);
            a[t * smax + s] = v + LP(t, e[s]);
        }
        __syncthreads();
    }
    long long last = F - 1;
    for (long long s = threadIdx.x; s < S; s += blockDim.x)
        b[last * smax + s] = (s == S - 1 || (S > 1 && s == S - 2)) ? 0.0 : ninf;
    __syncthreads();
    for (long long t = last - 1; t >= 0; --t) {
        for (long long s = threadIdx.x; s < S; s += blockDim.x) {
            double v = b[(t + 1) * smax + s] + LP(t + 1, e[s]);
            if (s + 1 < S) v = log_add(v, b[(t + 1) * smax + s + 1] + LP(t + 1, e[s + 1]));
            if (s + 2 < S && e[s + 2] != 0 && e[s + 2] != e[s])
                v = log_add(v, b[(t + 1) * smax + s + 2] + LP(t + 1, e[s + 2]));
            b[t * smax + s] = v;
        }
        __syncthreads();
    }
#undef LP
    if (threadIdx.x == 0) {
        double p = a[last * smax + S - 1];
        if (S > 1) p = log_add(p, a[last * smax + S - 2]);
        nll[i] = -p;
    }
}

template <typename T>
__device__ void grad_of(const unsigned* ext, const unsigned* slen, const unsigned* flen,
                        const double* alpha, const double* beta, const double* nll, T* grad,
                        unsigned long long n, unsigned long long c, unsigned long long tmax,
                        unsigned long long smax) {
    const double ninf = -inf_of(0.0);
    GRID_LOOP(idx, tmax * n * c) {
        unsigned long long k = idx % c, i = (idx / c) % n, t = idx / (c * n);
        T out = (T)0;
        double l = nll[i];
        if (t < flen[i] && l < inf_of(0.0)) {
            const unsigned* e = ext + i * smax;
            const double* a = alpha + (i * tmax + t) * smax;
            const double* b = beta + (i * tmax + t) * smax;
            double acc = ninf;
            for (unsigned long long s = 0; s < slen[i]; ++s)
                if (e[s] == k) acc = log_add(acc, a[s] + b[s]);
            if (acc > ninf) out = (T)(-exp(acc + l));
        }
        grad[idx] = out;
    }
}

#define CTC(T, S)                                                                                  \
    extern "C" __global__ void ctc_alpha_beta_##S(const T* lp, const unsigned* ext,               \
                                                  const unsigned* slen, const unsigned* flen,      \
                                                  double* alpha, double* beta, double* nll,        \
                                                  unsigned long long n, unsigned long long c,      \
                                                  unsigned long long tmax, unsigned long long smax) { \
        alpha_beta<T>(lp, ext, slen, flen, alpha, beta, nll, n, c, tmax, smax);                    \
    }                                                                                              \
    extern "C" __global__ void ctc_grad_##S(const unsigned* ext, const unsigned* slen,            \
                                            const unsigned* flen, const double* alpha,            \
                                            const double* beta, const double* nll, T* grad,        \
                                            unsigned long long n, unsigned long long c,            \
                                            unsigned long long tmax, unsigned long long smax) {    \
        grad_of<T>(ext, slen, flen, alpha, beta, nll, grad, n, c, tmax, smax);                     \
    }
CTC(float, f32)
CTC(double, f64)
