// Softmax family over the last dimension of a contiguous [rows, cols] matrix, one block
// per row (blockDim.x a power of two, at most 1024; dynamic shared memory of blockDim.x
// doubles): softmax / log-softmax forward and backward, and cross-entropy against U32
// labels (forward writes per-row losses and the probabilities; a one-block kernel takes
// the mean, and the count of labels that count, which the backward divides by on the
// device). A label out of range is reported through the fault word (common.cuh), so no
// step reads labels or the upstream gradient back to the host.

// Block-wide reduction of one double per thread; every thread gets the result.
__device__ double block_sum(double v, double* part) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    double r = part[0];
    __syncthreads();
    return r;
}
__device__ double block_max(double v, double* part) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] = fmax(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    double r = part[0];
    __syncthreads();
    return r;
}

// Writes log-softmax (log_out) or softmax of `row` into `out`, computing in T like the CPU.
template <typename T>
__device__ void softmax_row(const T* row, T* out, unsigned long long cols, int log_out, double* part) {
    double m = -inf_of(0.0);
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, (double)row[j]);
    T mx = (T)block_max(m, part);
    double acc = 0.0;
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) acc += (double)exp(row[j] - mx);
    T total = (T)block_sum(acc, part);
    T lt = log(total), inv = (T)1 / total;
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) {
        T z = row[j] - mx;
        out[j] = log_out ? z - lt : exp(z) * inv;
    }
}

template <typename T>
__device__ void softmax_bwd_row(const T* y, const T* g, T* dx, unsigned long long cols, int log_out, double* part) {
    double acc = 0.0;
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x)
        acc += log_out ? (double)g[j] : (double)y[j] * (double)g[j];
    T s = (T)block_sum(acc, part);
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x)
        dx[j] = log_out ? g[j] - exp(y[j]) * s : y[j] * (g[j] - s);
}

#define SOFTMAX(T, S)                                                                                   \
    extern "C" __global__ void softmax_##S(const T* x, T* y, unsigned long long cols, int log_out) {   \
        extern __shared__ double part[];                                                                \
        softmax_row<T>(x + blockIdx.x * cols, y + blockIdx.x * cols, cols, log_out, part);             \
    }                                                                                                   \
    extern "C" __global__ void softmax_bwd_##S(const T* y, const T* g, T* dx, unsigned long long cols, \
                                               int log_out) {                                           \
        extern __shared__ double part[];                                                                \
        unsigned long long o = blockIdx.x * cols;                                                       \
        softmax_bwd_row<T>(y + o, g + o, dx + o, cols, log_out, part);                                  \
    }                                                                                                   \
    /* probs <- softmax(x); row_loss[r] <- -log p[label], row_valid[r] <- 1 (both 0 for the  \
       ignored label; NaN and 0, and a fault, for a label out of range). */                     \
    extern "C" __global__ void ce_fwd_##S(const T* x, const unsigned int* labels, T* probs,            \
                                          double* row_loss, double* row_valid,                          \
                                          unsigned long long cols, long long ignore,                    \
                                          unsigned int* fault) {                                        \
        extern __shared__ double part[];                                                                \
        unsigned long long o = blockIdx.x * cols;                                                       \
        softmax_row<T>(x + o, probs + o, cols, 1, part);                                                \
        __syncthreads();                                                                                \
        unsigned l = labels[blockIdx.x];                                                                \
        if (threadIdx.x == 0) {                                                                         \
            if ((long long)l == ignore) {                                                               \
                row_loss[blockIdx.x] = 0.0;                                                             \
                row_valid[blockIdx.x] = 0.0;                                                            \
            } else if (l >= cols) {                                                                     \
                row_loss[blockIdx.x] = nan_of(0.0);                                                     \
                row_valid[blockIdx.x] = 0.0;                                                            \
                report_fault(fault, 1u, blockIdx.x, l, cols);                                           \
            } else {                                                                                    \
                row_loss[blockIdx.x] = -(double)probs[o + l];                                           \
                row_valid[blockIdx.x] = 1.0;                                                            \
            }                                                                                           \
        }                                                                                               \
        __syncthreads();                                                                                \
        for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) probs[o + j] = exp(probs[o + j]); \
    }                                                                                                   \
    /* One block: count[0] <- labels that count; loss[0] <- sum(row_loss) / count (0 when   \
       count is 0). */                                                                          \
    extern "C" __global__ void ce_mean_##S(const double* row_loss, const double* row_valid, T* loss,   \
                                           T* count, unsigned long long rows) {                         \
        extern __shared__ double part[];                                                                \
        double acc = 0.0, cnt = 0.0;                                                                    \
        for (unsigned long long r = threadIdx.x; r < rows; r += blockDim.x) acc += row_loss[r];        \
        double s = block_sum(acc, part);                                                                \
        for (unsigned long long r = threadIdx.x; r < rows; r += blockDim.x) cnt += row_valid[r];       \
        double c = block_sum(cnt, part);                                                                \
        if (threadIdx.x == 0) {                                                                         \
            loss[0] = c > 0.0 ? (T)(s / c) : (T)0;                                                      \
            count[0] = (T)c;                                                                            \
        }                                                                                               \
    }                                                                                                   \
    /* dx <- (probs - onehot(label)) * upstream / count, the scale formed as the CPU forms it \
       (in double, rounded to T once); zero rows for ignored and out-of-range labels. */       \
    extern "C" __global__ void ce_bwd_##S(const T* probs, const unsigned int* labels, T* dx,           \
                                          unsigned long long n, unsigned long long cols, long long ignore, \
                                          const T* upstream, const T* count) {                          \
        double c = (double)count[0];                                                                    \
        T scale = c > 0.0 ? (T)((double)upstream[0] / c) : (T)0;                                        \
        GRID_LOOP(i, n) {                                                                               \
            unsigned long long r = i / cols, j = i % cols;                                              \
            unsigned l = labels[r];                                                                     \
            if ((long long)l == ignore || l >= cols) { dx[i] = (T)0; continue; }                        \
            dx[i] = probs[i] * scale - (j == l ? scale : (T)0);                                         \
        }                                                                                               \
    }
SOFTMAX(float, f32)
SOFTMAX(double, f64)
