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
// I is the index type of the position arithmetic: 32-bit when the element count fits
// (always for im2col, whose buffer the host keeps under 256 MiB), as 64-bit division is
// a long software sequence on the GPU; the launchers below pick it per call.
template <typename T, typename I>
__device__ void im2col_impl(const T* x, T* col, ConvGeom g, long long b0, long long nb, int batch_inner) {
    I L = (I)(g.oh * g.ow), rows = (I)(g.c * g.kh * g.kw), nbi = (I)nb;
    I kw = (I)g.kw, kh = (I)g.kh, ow = (I)g.ow;
    unsigned long long n = (unsigned long long)(nb * g.c * g.kh * g.kw * g.oh * g.ow);
    GRID_LOOP(i, n) {
        I ii = (I)i;
        I l = ii % L, q = ii / L;
        I row, b;
        if (batch_inner) { b = q % nbi; row = q / nbi; } else { row = q % rows; b = q / rows; }
        I kj = row % kw, ki = (row / kw) % kh, c = row / (kw * kh);
        I oy = l / ow, ox = l % ow;
        long long iy = (long long)oy * g.sh - g.ph + (long long)ki * g.dh;
        long long ix = (long long)ox * g.sw - g.pw + (long long)kj * g.dw;
        T v = (T)0;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
            v = x[(((b0 + (long long)b) * g.c + (long long)c) * g.h + iy) * g.w + ix];
        col[i] = v;
    }
}

// dx[b0+b, c, iy, ix] = sum of the column entries that im2col (layout [nb, C*kh*kw, L])
// copied from that pixel. Signed 64-bit where offsets can go negative; the pixel index is
// split with I (see im2col_impl).
template <typename T, typename I>
__device__ void col2im_impl(const T* col, T* dx, ConvGeom g, long long b0, long long nb) {
    long long L = g.oh * g.ow, rows = g.c * g.kh * g.kw;
    I w = (I)g.w, h = (I)g.h, ch = (I)g.c;
    unsigned long long n = (unsigned long long)(nb * g.c * g.h * g.w);
    GRID_LOOP(i, n) {
        I ii = (I)i;
        long long ix = (long long)(ii % w), iy = (long long)((ii / w) % h);
        long long c = (long long)((ii / (w * h)) % ch), b = (long long)(ii / (w * h * ch));
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

#define FITS32(n) ((unsigned long long)(n) <= 0xFFFFFFFFull)
#define CONV(T, S)                                                                                \
    extern "C" __global__ void im2col_##S(const T* x, T* col, ConvGeom g, long long b0,          \
                                          long long nb, int batch_inner) {                         \
        if (FITS32(nb * g.c * g.kh * g.kw * g.oh * g.ow))                                         \
            im2col_impl<T, unsigned int>(x, col, g, b0, nb, batch_inner);                         \
        else                                                                                      \
            im2col_impl<T, unsigned long long>(x, col, g, b0, nb, batch_inner);                   \
    }                                                                                             \
    extern "C" __global__ void col2im_##S(const T* col, T* dx, ConvGeom g, long long b0, long long nb) { \
        if (FITS32(nb * g.c * g.h * g.w))                                                         \
            col2im_impl<T, unsigned int>(col, dx, g, b0, nb);                                     \
        else                                                                                      \
            col2im_impl<T, unsigned long long>(col, dx, g, b0, nb);                               \
    }
CONV(float, f32)
CONV(double, f64)
