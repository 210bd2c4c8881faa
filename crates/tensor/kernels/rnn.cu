// Fused recurrent cells: the pointwise part of one LSTM or GRU time step, forward and
// backward, one thread per (row, unit). The matrix products around them stay in cuBLAS;
// fusing the gate nonlinearities and the state update replaces ~10 elementwise kernels
// (and their intermediate tensors) per step with one. Gate order is PyTorch's: LSTM
// i, f, g, o; GRU r, z, n. Computes in T, like the CPU backend (crate::cpu::rnn).
//
// LSTM  in: gates [n, 4h] (x·W_ih' + b_ih + h·W_hh' + b_hh), c_prev [n, h]
//       out: [2, n, h], h' then c'.
// GRU   in: gx [n, 3h] (x·W_ih' + b_ih), gh [n, 3h] (h·W_hh' + b_hh), h_prev [n, h]
//       out: h' [n, h] = (1 − z)·n + z·h_prev, n = tanh(gx_n + r·gh_n).
// The backward kernels recompute the activations from the same inputs instead of saving
// them: one extra exp per gate is cheaper than writing and reading 4 more tensors.

template <typename T> __device__ __forceinline__ T sigm(T x) { return (T)1 / ((T)1 + exp(-x)); }

template <typename T>
__device__ void lstm_fwd(const T* gates, const T* c_prev, T* out, unsigned long long n,
                         unsigned long long h) {
    GRID_LOOP(k, n * h) {
        unsigned long long r = k / h, j = k % h;
        const T* g = gates + r * 4 * h;
        T i = sigm(g[j]), f = sigm(g[h + j]), gg = tanh(g[2 * h + j]), o = sigm(g[3 * h + j]);
        T c = f * c_prev[k] + i * gg;
        out[k] = o * tanh(c);
        out[n * h + k] = c;
    }
}

template <typename T>
__device__ void lstm_bwd(const T* gates, const T* c_prev, const T* grad, T* dgates, T* dc_prev,
                         unsigned long long n, unsigned long long h) {
    GRID_LOOP(k, n * h) {
        unsigned long long r = k / h, j = k % h;
        const T* g = gates + r * 4 * h;
        T* dg = dgates + r * 4 * h;
        T i = sigm(g[j]), f = sigm(g[h + j]), gg = tanh(g[2 * h + j]), o = sigm(g[3 * h + j]);
        T c = f * c_prev[k] + i * gg;
        T tc = tanh(c);
        T dh = grad[k];
        T dc = grad[n * h + k] + dh * o * ((T)1 - tc * tc);
        dg[j] = dc * gg * i * ((T)1 - i);
        dg[h + j] = dc * c_prev[k] * f * ((T)1 - f);
        dg[2 * h + j] = dc * i * ((T)1 - gg * gg);
        dg[3 * h + j] = dh * tc * o * ((T)1 - o);
        dc_prev[k] = dc * f;
    }
}

template <typename T>
__device__ void gru_fwd(const T* gx, const T* gh, const T* h_prev, T* out, unsigned long long n,
                        unsigned long long h) {
    GRID_LOOP(k, n * h) {
        unsigned long long r = k / h, j = k % h;
        const T* x = gx + r * 3 * h;
        const T* y = gh + r * 3 * h;
        T rr = sigm(x[j] + y[j]), z = sigm(x[h + j] + y[h + j]);
        T cand = tanh(x[2 * h + j] + rr * y[2 * h + j]);
        out[k] = cand + z * (h_prev[k] - cand);
    }
}

template <typename T>
__device__ void gru_bwd(const T* gx, const T* gh, const T* h_prev, const T* grad, T* dgx, T* dgh,
                        T* dh_prev, unsigned long long n, unsigned long long h) {
    GRID_LOOP(k, n * h) {
        unsigned long long r = k / h, j = k % h;
        const T* x = gx + r * 3 * h;
        const T* y = gh + r * 3 * h;
        T rr = sigm(x[j] + y[j]), z = sigm(x[h + j] + y[h + j]);
        T cand = tanh(x[2 * h + j] + rr * y[2 * h + j]);
        T d = grad[k];
        T dz = d * (h_prev[k] - cand) * z * ((T)1 - z);
        T dn = d * ((T)1 - z) * ((T)1 - cand * cand);
        T dr = dn * y[2 * h + j] * rr * ((T)1 - rr);
        T* ddx = dgx + r * 3 * h;
        T* ddh = dgh + r * 3 * h;
        ddx[j] = dr;
        ddh[j] = dr;
        ddx[h + j] = dz;
        ddh[h + j] = dz;
        ddx[2 * h + j] = dn;
        ddh[2 * h + j] = dn * rr;
        dh_prev[k] = d * z;
    }
}

#define RNN(T, S)                                                                                 \
    extern "C" __global__ void lstm_cell_fwd_##S(const T* gates, const T* c_prev, T* out,        \
                                                 unsigned long long n, unsigned long long h) {    \
        lstm_fwd<T>(gates, c_prev, out, n, h);                                                    \
    }                                                                                             \
    extern "C" __global__ void lstm_cell_bwd_##S(const T* gates, const T* c_prev, const T* grad, \
                                                 T* dgates, T* dc_prev, unsigned long long n,     \
                                                 unsigned long long h) {                          \
        lstm_bwd<T>(gates, c_prev, grad, dgates, dc_prev, n, h);                                  \
    }                                                                                             \
    extern "C" __global__ void gru_cell_fwd_##S(const T* gx, const T* gh, const T* h_prev, T* out, \
                                                unsigned long long n, unsigned long long h) {     \
        gru_fwd<T>(gx, gh, h_prev, out, n, h);                                                    \
    }                                                                                             \
    extern "C" __global__ void gru_cell_bwd_##S(const T* gx, const T* gh, const T* h_prev,       \
                                                const T* grad, T* dgx, T* dgh, T* dh_prev,        \
                                                unsigned long long n, unsigned long long h) {     \
        gru_bwd<T>(gx, gh, h_prev, grad, dgx, dgh, dh_prev, n, h);                                \
    }
RNN(float, f32)
RNN(double, f64)
