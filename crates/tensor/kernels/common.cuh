// Shared by every kernel module: prepended to each .cu source before NVRTC compiles it
// (NVRTC has no include path here, and one header keeps the layout struct in one place).
// Must match crate::cuda::kernels::Strided field for field.

#define MAX_DIMS 8

// A strided view: element i (row-major over `shape`) lives at `offset + sum(c_k * strides[k])`.
struct Strided {
    long long ndim;
    long long offset;
    long long shape[MAX_DIMS];
    long long strides[MAX_DIMS];
};

// The Rust side merges dims that are contiguous with each other (Strided::new), so a
// contiguous view has ndim 1 and costs one multiply-add. Otherwise the index is split
// with 32-bit division when it and every extent fit (the common case): 64-bit division
// is a long software sequence on the GPU and made large elementwise kernels compute-bound
// (measured on an H100: the LSTM and ResNet-50 steps, see benchmarks/RESULTS.md).
__device__ __forceinline__ long long strided_at(const Strided& s, unsigned long long i) {
    if (s.ndim <= 1) return s.offset + (long long)i * s.strides[0];
    long long off = s.offset;
    if (i <= 0xFFFFFFFFull) {
        bool fits = true;
        for (int k = 0; k < (int)s.ndim; ++k) fits = fits && s.shape[k] <= 0xFFFFFFFFll;
        if (fits) {
            unsigned int rem = (unsigned int)i;
            for (int k = (int)s.ndim - 1; k >= 0; --k) {
                unsigned int d = (unsigned int)s.shape[k];
                unsigned int c = rem % d;
                rem /= d;
                off += (long long)c * s.strides[k];
            }
            return off;
        }
    }
    long long rem = (long long)i;
    for (int k = (int)s.ndim - 1; k >= 0; --k) {
        long long c = rem % s.shape[k];
        rem /= s.shape[k];
        off += c * s.strides[k];
    }
    return off;
}

// Grid-stride loop: any grid size covers any n.
#define GRID_LOOP(i, n)                                                                   \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         i < (unsigned long long)(n); i += (unsigned long long)blockDim.x * gridDim.x)

__device__ __forceinline__ float nan_of(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double nan_of(double) { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ float inf_of(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double inf_of(double) { return __longlong_as_double(0x7ff0000000000000LL); }

// A bad input found inside a kernel (an index or label out of range) is recorded in the
// device's fault word instead of being checked on the host before launch, which would cost
// a device-to-host read (a synchronisation) in every training step. The first fault wins;
// the host reads the word at its next synchronisation and reports it as an error. Layout
// must match crate::cuda::fault: [code, position, value, bound]; codes are fault::Code's.
__device__ __forceinline__ void report_fault(unsigned int* fault, unsigned int code,
                                             unsigned long long position, unsigned long long value,
                                             unsigned long long bound) {
    if (atomicCAS(fault, 0u, code) == 0u) {
        fault[1] = (unsigned int)(position > 0xFFFFFFFFull ? 0xFFFFFFFFull : position);
        fault[2] = (unsigned int)(value > 0xFFFFFFFFull ? 0xFFFFFFFFull : value);
        fault[3] = (unsigned int)(bound > 0xFFFFFFFFull ? 0xFFFFFFFFull : bound);
    }
}
