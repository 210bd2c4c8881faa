// Counter-based random numbers: element i of a stream with seed s is a pure function of
// (s, i), a SplitMix64 finaliser, so any thread computes any element and the GPU mask is
// bit-identical to the CPU's (crate::rng::counter_uniform is the same function).

__device__ __forceinline__ double counter_uniform(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed + (i + 1ULL) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

// Inverted-dropout mask: 0 with probability p, else `keep` (= 1 / (1 - p)).
#define DROPOUT(T, S)                                                                                \
    extern "C" __global__ void dropout_mask_##S(T* mask, unsigned long long n, unsigned long long seed, \
                                                double p, T keep) {                                  \
        GRID_LOOP(i, n) mask[i] = counter_uniform(seed, i) < p ? (T)0 : keep;                        \
    }
DROPOUT(float, f32)
DROPOUT(double, f64)
