// 2-d max and average pooling over contiguous NCHW input, forward and backward. Max
// picks the first maximum of a window (a NaN wins), as the CPU does; the backward pass
// gathers per input pixel (re-deriving each covering window's choice), so there are no
// atomics. Average counts padded positions in the divisor (count_include_pad).
// PoolGeom must match crate::cuda::pool::PoolGeom.

struct PoolGeom {
    long long planes, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
    long long is_max;
};

template <typename T>
__device__ long long window_argmax(const T* plane, const PoolGeom& g, long long oy, long long ox) {
    long long y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw, best = -1;
    for (long long ky = 0; ky < g.kh; ++ky) {
        long long iy = y0 + ky;
        if (iy < 0 || iy >= g.h) continue;
        for (long long kx = 0; kx < g.kw; ++kx) {
            long long ix = x0 + kx;
            if (ix < 0 || ix >= g.w) continue;
            long long i = iy * g.w + ix;
            T v = plane[i];
            if (best < 0 || v > plane[best] || v != v) best = i;
        }
    }
    return best;
}

template <typename T> __device__ void pool_fwd_impl(const T* x, T* y, PoolGeom g) {
    unsigned long long n = (unsigned long long)(g.planes * g.oh * g.ow);
    GRID_LOOP(i, n) {
        long long ox = (long long)(i % g.ow), oy = (long long)((i / g.ow) % g.oh), p = (long long)(i / (g.ow * g.oh));
        const T* plane = x + p * g.h * g.w;
        if (g.is_max) {
            long long b = window_argmax(plane, g, oy, ox);
            y[i] = b < 0 ? -inf_of((T)0) : plane[b];
        } else {
            T s = (T)0;
            long long y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
            for (long long ky = 0; ky < g.kh; ++ky) {
                long long iy = y0 + ky;
                if (iy < 0 || iy >= g.h) continue;
                for (long long kx = 0; kx < g.kw; ++kx) {
                    long long ix = x0 + kx;
                    if (ix >= 0 && ix < g.w) s += plane[iy * g.w + ix];
                }
            }
            y[i] = s / (T)(g.kh * g.kw);
        }
    }
}

template <typename T> __device__ void pool_bwd_impl(const T* x, const T* gy, T* gx, PoolGeom g) {
    unsigned long long n = (unsigned long long)(g.planes * g.h * g.w);
    GRID_LOOP(i, n) {
        long long ix = (long long)(i % g.w), iy = (long long)((i / g.w) % g.h), p = (long long)(i / (g.w * g.h));
        const T* plane = x + p * g.h * g.w;
        const T* gplane = gy + p * g.oh * g.ow;
        long long me = iy * g.w + ix;
        // Outputs whose window covers iy: oy*sh - ph <= iy <= oy*sh - ph + kh - 1.
        long long oy_lo = iy + g.ph - g.kh + 1;
        oy_lo = oy_lo <= 0 ? 0 : (oy_lo + g.sh - 1) / g.sh;
        long long oy_hi = (iy + g.ph) / g.sh;
        if (oy_hi > g.oh - 1) oy_hi = g.oh - 1;
        long long ox_lo = ix + g.pw - g.kw + 1;
        ox_lo = ox_lo <= 0 ? 0 : (ox_lo + g.sw - 1) / g.sw;
        long long ox_hi = (ix + g.pw) / g.sw;
        if (ox_hi > g.ow - 1) ox_hi = g.ow - 1;
        T acc = (T)0;
        for (long long oy = oy_lo; oy <= oy_hi; ++oy)
            for (long long ox = ox_lo; ox <= ox_hi; ++ox) {
                T v = gplane[oy * g.ow + ox];
                if (g.is_max) {
                    if (window_argmax(plane, g, oy, ox) == me) acc += v;
                } else {
                    acc += v / (T)(g.kh * g.kw);
                }
            }
        gx[i] = acc;
    }
}

#define POOL(T, S)                                                                                \
    extern "C" __global__ void pool_fwd_##S(const T* x, T* y, PoolGeom g) { pool_fwd_impl<T>(x, y, g); } \
    extern "C" __global__ void pool_bwd_##S(const T* x, const T* gy, T* gx, PoolGeom g) {         \
        pool_bwd_impl<T>(x, gy, gx, g);                                                           \
    }
POOL(float, f32)
POOL(double, f64)
