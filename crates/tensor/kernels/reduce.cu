// Reductions of a strided view over any set of axes. One block per output element; the
// input offset of (output o, reduced r) is strided_at(kept, o) + strided_at(red, r), so
// any layout and any axis set work without a copy. Sums accumulate in double. Max/min
// propagate NaN and argmax returns the first NaN or else the first maximum, as the CPU.

#define RED_THREADS 256

template <typename T> __device__ __forceinline__ T pick(T a, T b, int op) {
    if (a != a) return a;
    if (b != b) return b;
    return op == 1 ? (b > a ? b : a) : (b < a ? b : a);
}

template <typename T>
__device__ void reduce_impl(const T* x, Strided kept, Strided red, T* y, unsigned long long n_out,
                            unsigned long long n_red, int op) {
    __shared__ double sums[RED_THREADS];
    __shared__ T part[RED_THREADS];
    for (unsigned long long o = blockIdx.x; o < n_out; o += gridDim.x) {
        long long base = strided_at(kept, o);
        double s = 0.0;
        T m = op == 1 ? -inf_of((T)0) : inf_of((T)0);
        for (unsigned long long r = threadIdx.x; r < n_red; r += blockDim.x) {
            T v = x[base + strided_at(red, r)];
            if (op == 0) s += (double)v; else m = pick(m, v, op);
        }
        sums[threadIdx.x] = s;
        part[threadIdx.x] = m;
        __syncthreads();
        for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w) {
                sums[threadIdx.x] += sums[threadIdx.x + w];
                part[threadIdx.x] = pick(part[threadIdx.x], part[threadIdx.x + w], op);
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) y[o] = op == 0 ? (T)sums[0] : part[0];
        __syncthreads();
    }
}

// (value, index) pairs: NaN wins (lowest index among NaNs), then the larger value, then
// the lower index.
template <typename T> __device__ __forceinline__ bool better(T v, unsigned i, T w, unsigned j) {
    bool vn = v != v, wn = w != w;
    if (vn || wn) return vn && (!wn || i < j);
    return v > w || (v == w && i < j);
}

template <typename T>
__device__ void argmax_impl(const T* x, Strided kept, Strided red, unsigned int* y,
                            unsigned long long n_out, unsigned long long n_red) {
    __shared__ T vals[RED_THREADS];
    __shared__ unsigned idxs[RED_THREADS];
    for (unsigned long long o = blockIdx.x; o < n_out; o += gridDim.x) {
        long long base = strided_at(kept, o);
        T bv = -inf_of((T)0);
        unsigned bi = 0xffffffffu;
        for (unsigned long long r = threadIdx.x; r < n_red; r += blockDim.x) {
            T v = x[base + strided_at(red, r)];
            if (bi == 0xffffffffu || better(v, (unsigned)r, bv, bi)) { bv = v; bi = (unsigned)r; }
        }
        vals[threadIdx.x] = bv;
        idxs[threadIdx.x] = bi;
        __syncthreads();
        for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w) {
                unsigned j = idxs[threadIdx.x + w];
                if (j != 0xffffffffu &&
                    (idxs[threadIdx.x] == 0xffffffffu || better(vals[threadIdx.x + w], j, vals[threadIdx.x], idxs[threadIdx.x]))) {
                    vals[threadIdx.x] = vals[threadIdx.x + w];
                    idxs[threadIdx.x] = j;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) y[o] = idxs[0] == 0xffffffffu ? 0u : idxs[0];
        __syncthreads();
    }
}

#define REDUCE(T, S)                                                                              \
    extern "C" __global__ void reduce_##S(const T* x, Strided kept, Strided red, T* y,           \
                                          unsigned long long n_out, unsigned long long n_red,     \
                                          int op) {                                               \
        reduce_impl<T>(x, kept, red, y, n_out, n_red, op);                                        \
    }                                                                                             \
    extern "C" __global__ void argmax_##S(const T* x, Strided kept, Strided red, unsigned int* y,\
                                          unsigned long long n_out, unsigned long long n_red) {   \
        argmax_impl<T>(x, kept, red, y, n_out, n_red);                                            \
    }
REDUCE(float, f32)
REDUCE(double, f64)
