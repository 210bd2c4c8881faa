// Convolution lowering: im2col builds the column matrix cuBLAS multiplies with the
// weights, col2im sums columns back into image gradients (a gather per input pixel,
// so no atomics and a deterministic result). Geometry is passed as ConvGeom, which must
// match crate::cuda::conv::ConvGeom.

struct ConvGeom {
    long long c, h, w;         // input channels and size
    long long kh, kw;          // kernel size
    long long sh, sw, ph, pw, dh, dw;
    long long oh, ow;          // output size
};

// Column layout for images b0..b0+nb: batch_inner = 0 gives [nb, C*kh*kw, oh*ow];
// batch_inner = 1 gives [C*kh*kw, nb, oh*ow] (the weight gradient's single product).
template <typename T>
__device__ void im2col_impl(const T* x, T* col, ConvGeom g, long long b0, long long nb, int batch_inner) {
    long long L = g.oh * g.ow, rows = g.c * g.kh * g.kw;
    unsigned long long n = (unsigned long long)(nb * rows * L);
    GRID_LOOP(i, n) {
        long long l = (long long)(i % L);
        long long q = (long long)(i / L);
        long long row, b;
        if (batch_inner) { b = q % nb; row = q / nb; } else { row = q % rows; b = q / rows; }
        long long kj = row % g.kw, ki = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);
        long long oy = l / g.ow, ox = l % g.ow;
        long long iy = oy * g.sh - g.ph + ki * g.dh, ix = ox * g.sw - g.pw + kj * g.dw;
        T v = (T)0;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
            v = x[(((b0 + b) * g.c + c) * g.h + iy) * g.w + ix];
        col[i] = v;
    }
}

// dx[b0+b, c, iy, ix] = sum of the column entries that im2col (layout [nb, C*kh*kw, L])
// copied from that pixel.
template <typename T>
__device__ void col2im_impl(const T* col, T* dx, ConvGeom g, long long b0, long long nb) {
    long long L = g.oh * g.ow, rows = g.c * g.kh * g.kw;
    unsigned long long n = (unsigned long long)(nb * g.c * g.h * g.w);
    GRID_LOOP(i, n) {
        long long ix = (long long)(i % g.w), iy = (long long)((i / g.w) % g.h);
        long long c = (long long)((i / (g.w * g.h)) % g.c), b = (long long)(i / (g.w * g.h * g.c));
        double acc = 0.0;
        for (long long ki = 0; ki < g.kh; ++ki) {
            long long ty = iy + g.ph - ki * g.dh;
            if (ty < 0 || ty % g.sh != 0) continue;
            long long oy = ty / g.sh;
            if (oy >= g.oh) continue;
            for (long long kj = 0; kj < g.kw; ++kj) {
                long long tx = ix + g.pw - kj * g.dw;
                if (tx < 0 || tx % g.sw != 0) continue;
                long long ox = tx / g.sw;
                if (ox >= g.ow) continue;
                long long row = (c * g.kh + ki) * g.kw + kj;
                acc += (double)col[(b * rows + row) * L + oy * g.ow + ox];
            }
        }
        dx[(((b0 + b) * g.c + c) * g.h + iy) * g.w + ix] = (T)acc;
    }
}

#define CONV(T, S)                                                                                \
    extern "C" __global__ void im2col_##S(const T* x, T* col, ConvGeom g, long long b0,          \
                                          long long nb, int batch_inner) {                         \
        im2col_impl<T>(x, col, g, b0, nb, batch_inner);                                           \
    }                                                                                             \
    extern "C" __global__ void col2im_##S(const T* col, T* dx, ConvGeom g, long long b0, long long nb) { \
        col2im_impl<T>(col, dx, g, b0, nb);                                                       \
    }
CONV(float, f32)
CONV(double, f64)
