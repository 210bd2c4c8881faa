// Elementwise kernels over strided views (broadcasting is a stride of 0): fill, strided
// copies in both directions, dtype casts, unary maps, binary ops and where. The op codes
// match crate::cuda::kernels::{unary_code, binary_code}. Float math follows the CPU
// backend's definitions (e.g. maximum ignores a NaN operand like f32::max).

template <typename T> __device__ void fill_impl(T* y, unsigned long long n, T v) {
    GRID_LOOP(i, n) y[i] = v;
}
template <typename T> __device__ void copy_impl(const T* x, Strided xs, T* y, unsigned long long n) {
    GRID_LOOP(i, n) y[i] = x[strided_at(xs, i)];
}
template <typename T> __device__ void scatter_impl(T* dst, Strided ds, const T* src, unsigned long long n) {
    GRID_LOOP(i, n) dst[strided_at(ds, i)] = src[i];
}

#define COPIES(T, S)                                                                                   \
    extern "C" __global__ void fill_##S(T* y, unsigned long long n, T v) { fill_impl<T>(y, n, v); }    \
    extern "C" __global__ void copy_##S(const T* x, Strided xs, T* y, unsigned long long n) {        \
        copy_impl<T>(x, xs, y, n);                                                                    \
    }                                                                                                 \
    extern "C" __global__ void scatter_##S(T* d, Strided ds, const T* s, unsigned long long n) {     \
        scatter_impl<T>(d, ds, s, n);                                                                 \
    }
COPIES(float, f32)
COPIES(double, f64)
COPIES(unsigned int, u32)

// Casts. Float to index truncates toward zero and saturates, NaN and negatives become 0:
// Rust's `as u32`, which the CPU backend uses.
template <typename A, typename B> __device__ __forceinline__ B convert(A v) { return (B)v; }
template <> __device__ __forceinline__ unsigned int convert<float, unsigned int>(float v) {
    return (v != v || v <= 0.f) ? 0u : (v >= 4294967295.f ? 4294967295u : (unsigned int)v);
}
template <> __device__ __forceinline__ unsigned int convert<double, unsigned int>(double v) {
    return (v != v || v <= 0.0) ? 0u : (v >= 4294967295.0 ? 4294967295u : (unsigned int)v);
}
#define CAST(A, SA, B, SB)                                                                           \
    extern "C" __global__ void cast_##SA##_##SB(const A* x, Strided xs, B* y, unsigned long long n) { \
        GRID_LOOP(i, n) y[i] = convert<A, B>(x[strided_at(xs, i)]);                                  \
    }
CAST(float, f32, double, f64)
CAST(double, f64, float, f32)
CAST(unsigned int, u32, float, f32)
CAST(unsigned int, u32, double, f64)
CAST(float, f32, unsigned int, u32)
CAST(double, f64, unsigned int, u32)

template <typename T> __device__ __forceinline__ T unary_op(T v, int op, T a, T b) {
    const T zero = (T)0, one = (T)1;
    switch (op) {
        case 0: return -v;                                          // neg
        case 1: return fabs(v);                                     // abs
        case 2: return (v > zero ? one : zero) - (v < zero ? one : zero);  // sign
        case 3: return sqrt(v);                                     // sqrt
        case 4: return exp(v);                                      // exp
        case 5: return log(v);                                      // log
        case 6: return tanh(v);                                     // tanh
        case 7: return one / (one + exp(-v));                       // sigmoid
        case 8: return (v > zero || v != v) ? v : zero;             // relu (NaN stays NaN)
        case 9: return v > zero ? one : zero;                       // step (ReLU mask)
        case 10: return v * v;                                      // sqr
        case 11: return one / v;                                    // recip
        case 12: return v * a + b;                                  // affine: x*mul + add
        case 13: return pow(v, a);                                  // powf
        case 14: return v < a ? a : (v > b ? b : v);                // clamp [a, b], NaN stays
        case 15: return (v >= a && v <= b) ? one : zero;            // in range
        default: return nan_of(v);                                  // unknown op: NaN
    }
}

template <typename T> __device__ __forceinline__ T binary_op(T x, T y, int op) {
    switch (op) {
        case 0: return x + y;
        case 1: return x - y;
        case 2: return x * y;
        case 3: return x / y;
        case 4: return (x > y || x != x) ? x : y;   // maximum; NaN in either gives NaN
        case 5: return (x < y || x != x) ? x : y;   // minimum (fmax/fmin ignore NaN)
        case 6: return x == y ? (T)1 : (T)0;
        case 7: return x != y ? (T)1 : (T)0;
        case 8: return x < y ? (T)1 : (T)0;
        case 9: return x <= y ? (T)1 : (T)0;
        case 10: return x > y ? (T)1 : (T)0;
        case 11: return x >= y ? (T)1 : (T)0;
        default: return nan_of(x);
    }
}

#define MATH(T, S)                                                                                    \
    extern "C" __global__ void unary_##S(const T* x, Strided xs, T* y, unsigned long long n, int op,  \
                                         T a, T b) {                                                  \
        GRID_LOOP(i, n) y[i] = unary_op<T>(x[strided_at(xs, i)], op, a, b);                          \
    }                                                                                                 \
    extern "C" __global__ void binary_##S(const T* l, Strided ls, const T* r, Strided rs, T* y,      \
                                          unsigned long long n, int op) {                             \
        GRID_LOOP(i, n) y[i] = binary_op<T>(l[strided_at(ls, i)], r[strided_at(rs, i)], op);         \
    }                                                                                                 \
    extern "C" __global__ void where_##S(const T* c, Strided cs, const T* t, Strided ts, const T* f, \
                                         Strided fs, T* y, unsigned long long n) {                    \
        GRID_LOOP(i, n) y[i] = c[strided_at(cs, i)] != (T)0 ? t[strided_at(ts, i)] : f[strided_at(fs, i)]; \
    }
MATH(float, f32)
MATH(double, f64)
