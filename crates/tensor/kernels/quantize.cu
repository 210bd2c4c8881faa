// The quantizing compressors' kernels: counter-based uniform draws, TernGrad's ternary
// codes, QSGD's per-bucket scales and stochastic levels, and the packing of small codes
// into a byte stream. crate::quantize holds the CPU reference each must match bit for
// bit (the module is compiled without FMA contraction and with IEEE division, so the
// same float operations round the same way).

// SplitMix64's finalizer: a bijection of 64-bit words whose outputs, for consecutive
// inputs, pass as independent uniform words.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Draw i of stream `key`: 24 random bits over 2^24, exact in float, in [0, 1).
__device__ __forceinline__ float counter_uniform(unsigned long long key, unsigned long long i) {
    unsigned long long h = mix64(key + (i + 1ull) * 0x9E3779B97F4A7C15ull);
    return (float)(h >> 40) * 5.9604644775390625e-8f;
}

// TernGrad: code 1 (+s), 2 (−s) with probability |x|/s, else 0; all 0 where s is 0.
extern "C" __global__ void terngrad_codes(const float* x, unsigned long long n, float s,
                                          unsigned long long key, unsigned int* out) {
    GRID_LOOP(i, n) {
        float v = x[i];
        bool keep = s > 0.0f && counter_uniform(key, i) < fabsf(v) / s;
        out[i] = keep ? (v < 0.0f ? 2u : 1u) : 0u;
    }
}

// Per bucket of d consecutive values (the last may be shorter), added in index order in
// double by one thread: mode 0 the 2-norm, mode 1 the largest magnitude. Inputs are
// finite (the caller checks), so no NaN rule is needed.
extern "C" __global__ void bucket_scales(const float* x, unsigned long long n,
                                         unsigned long long d, int mode, double* out) {
    unsigned long long buckets = (n + d - 1) / d;
    GRID_LOOP(b, buckets) {
        unsigned long long start = b * d;
        unsigned long long end = start + d < n ? start + d : n;
        double acc = 0.0;
        for (unsigned long long i = start; i < end; ++i) {
            double a = (double)x[i];
            if (mode == 0) {
                acc += a * a;
            } else {
                a = fabs(a);
                if (a > acc) acc = a;
            }
        }
        out[b] = mode == 0 ? sqrt(acc) : acc;
    }
}

// QSGD's level of each value, signed (negative for x < 0), as float: with r = min(s·|x| /
// scale, s) in double, ⌊r⌋ rounded up when draw i < r − ⌊r⌋; 0 in a bucket of scale 0.
extern "C" __global__ void qsgd_levels(const float* x, unsigned long long n,
                                       unsigned long long d, unsigned int s,
                                       const double* scales, unsigned long long key,
                                       float* out) {
    GRID_LOOP(i, n) {
        double scale = scales[i / d];
        float level = 0.0f;
        if (scale > 0.0) {
            double sd = (double)s;
            double r = sd * fabs((double)x[i]) / scale;
            if (r > sd) r = sd;
            double fl = floor(r);
            level = (float)(fl + ((double)counter_uniform(key, i) < r - fl ? 1.0 : 0.0));
        }
        out[i] = x[i] < 0.0f ? -level : level;
    }
}

// The low `bits` bits (1, 2, 4 or 8) of each code as a byte stream, the first code in
// the most significant bits of the first byte; word w holds bytes 4w to 4w + 3, the
// first in its low 8 bits (little-endian), past the last code zeros.
extern "C" __global__ void pack_codes(const unsigned int* codes, unsigned long long n,
                                      unsigned int bits, unsigned long long words,
                                      unsigned int* out) {
    unsigned int per = 32u / bits;
    unsigned int mask = (1u << bits) - 1u;
    GRID_LOOP(w, words) {
        unsigned int word = 0u;
        for (unsigned int t = 0; t < per; ++t) {
            unsigned long long j = w * per + t;
            if (j >= n) break;
            unsigned int at = t * bits;
            word |= (codes[j] & mask) << (8u * (at / 8u) + (8u - bits - at % 8u));
        }
        out[w] = word;
    }
}

// The inverse of pack_codes: n codes of `bits` bits.
extern "C" __global__ void unpack_codes(const unsigned int* words, unsigned long long n,
                                        unsigned int bits, unsigned int* out) {
    unsigned int per = 32u / bits;
    unsigned int mask = (1u << bits) - 1u;
    GRID_LOOP(j, n) {
        unsigned int at = (unsigned int)(j % per) * bits;
        out[j] = (words[j / per] >> (8u * (at / 8u) + (8u - bits - at % 8u))) & mask;
    }
}

// 1-bit SGD's per-bucket sums, in two passes with a fixed order (so the CPU adds the same
// way): thread t = b·chunks + c adds chunk c (SIGN_CHUNK values) of bucket b in index
// order into (Σ x ≥ 0, their count, Σ x < 0, their count), in double; then one thread
// per bucket adds its chunks' partials in order.
#define SIGN_CHUNK 1024ull
extern "C" __global__ void sign_sums_partial(const float* x, unsigned long long n,
                                             unsigned long long d, unsigned long long chunks,
                                             unsigned long long buckets, double* partial) {
    GRID_LOOP(t, buckets * chunks) {
        unsigned long long b = t / chunks, c = t % chunks;
        unsigned long long bucket_end = (b + 1) * d < n ? (b + 1) * d : n;
        unsigned long long start = b * d + c * SIGN_CHUNK;
        unsigned long long end = start + SIGN_CHUNK < bucket_end ? start + SIGN_CHUNK : bucket_end;
        double sp = 0.0, np = 0.0, sn = 0.0, nn = 0.0;
        for (unsigned long long i = start; i < end; ++i) {
            float v = x[i];
            if (v >= 0.0f) {
                sp += (double)v;
                np += 1.0;
            } else {
                sn += (double)v;
                nn += 1.0;
            }
        }
        partial[4 * t] = sp;
        partial[4 * t + 1] = np;
        partial[4 * t + 2] = sn;
        partial[4 * t + 3] = nn;
    }
}

extern "C" __global__ void sign_sums_final(const double* partial, unsigned long long chunks,
                                           unsigned long long buckets, double* out) {
    GRID_LOOP(b, buckets) {
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
        for (unsigned long long c = 0; c < chunks; ++c)
            for (int k = 0; k < 4; ++k) acc[k] += partial[4 * (b * chunks + c) + k];
        for (int k = 0; k < 4; ++k) out[4 * b + k] = acc[k];
    }
}

// out[i] = means[2b] where codes[i] is 1, else means[2b + 1], b = i / d: 1-bit SGD's
// reconstruction of a bucketed tensor from its sign codes and per-bucket means.
extern "C" __global__ void two_level_values(const unsigned int* codes, const float* means,
                                            unsigned long long n, unsigned long long d,
                                            float* out) {
    GRID_LOOP(i, n) { out[i] = means[2 * (i / d) + (codes[i] ? 0 : 1)]; }
}
