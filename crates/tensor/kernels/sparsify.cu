// Gradient compression's device kernels (crate::sparsify is the public side, with the CPU
// reference beside it): exact selection by magnitude, the strided sample and the sum of
// squares that DGC's threshold and clipping read, and DGC's fused accumulation.
//
// Magnitudes are compared as bit patterns. With the sign bit cleared, the unsigned order
// of a float's bits is `total_cmp`'s order of its magnitude (NaN above +inf), the order the
// CPU's selection uses; so every selection here is exact, ties and NaN included.

__device__ __forceinline__ unsigned int mag_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// ---- k-th largest magnitude by radix select: three passes over 11 bits each -------------
// (bits 30–20, 19–9, then 10–0, whose top two are already decided and match the prefix)
// `state` (u32[3], on the device, so that no pass waits on the host): [0] the bits of the
// answer decided so far, [1] which bits those are, [2] the rank still wanted (1-based, from
// the top) among the entries that match them. After the last pass [0] is the k-th largest
// magnitude's bit pattern and [2] how many entries equal to it are among the k largest.

#define RADIX_BINS 2048

extern "C" __global__ void mag_hist(const float* x, unsigned long long n, const unsigned int* state,
                                    int shift, unsigned int* hist) {
    __shared__ unsigned int h[RADIX_BINS];
    for (int b = threadIdx.x; b < RADIX_BINS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const unsigned int prefix = state[0], mask = state[1];
    GRID_LOOP(i, n) {
        unsigned int m = mag_bits(x[i]);
        bool take = (m & mask) == prefix;
        unsigned int bin = (m >> shift) & (RADIX_BINS - 1);
        // Gradients crowd into a few exponent bins, so lanes adding to the same bin add
        // once, through their lowest lane (a plain atomic per lane serialises a warp).
        unsigned int active = __activemask();
        unsigned int takers = __ballot_sync(active, take);
        if (take) {
            unsigned int peers = __match_any_sync(takers, bin);
            if ((int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&h[bin], __popc(peers));
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < RADIX_BINS; b += blockDim.x)
        if (h[b]) atomicAdd(&hist[b], h[b]);
}

// One block of 1024 threads, two bins each: finds the bin holding the wanted rank, records
// it in `state` and clears `hist` for the next pass.
extern "C" __global__ void mag_pick(unsigned int* hist, unsigned int* state, int shift) {
    __shared__ unsigned int s[1024];
    const int t = threadIdx.x;
    const unsigned int lo = hist[2 * t], hi = hist[2 * t + 1];
    s[t] = lo + hi;
    __syncthreads();
    // Suffix sums: s[t] becomes the count in bins 2t and above.
    for (int off = 1; off < 1024; off <<= 1) {
        unsigned int add = t + off < 1024 ? s[t + off] : 0;
        __syncthreads();
        s[t] += add;
        __syncthreads();
    }
    const unsigned int r = state[2];
    const unsigned int above_hi = s[t] - lo - hi;  // in bins above 2t+1
    const unsigned int above_lo = above_hi + hi;   // in bins above 2t
    __syncthreads();
    if (above_hi < r && r <= above_hi + hi) {
        state[0] |= (unsigned int)(2 * t + 1) << shift;
        state[1] |= (unsigned int)(RADIX_BINS - 1) << shift;
        state[2] = r - above_hi;
    } else if (above_lo < r && r <= above_lo + lo) {
        state[0] |= (unsigned int)(2 * t) << shift;
        state[1] |= (unsigned int)(RADIX_BINS - 1) << shift;
        state[2] = r - above_lo;
    }
    hist[2 * t] = 0;
    hist[2 * t + 1] = 0;
}

// ---- ordered compaction of the selected entries ---------------------------------------
// An entry of magnitude m is selected when m > T, or when m == T != 0 and fewer than
// `take_eq` entries equal to T come before it: the k largest with ties to the lower
// index (take_eq from the radix select), or every entry at or above a threshold
// (take_eq = all). Zeros are never selected. Tiles of 4096 entries (256 threads × 16)
// are counted, their offsets scanned, then written in index order: two reads of x.

#define TILE_THREADS 256
#define TILE_ITEMS 16
#define TILE (TILE_THREADS * TILE_ITEMS)

__device__ __forceinline__ unsigned int block_sum(unsigned int v, unsigned int* shared8) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) shared8[threadIdx.x >> 5] = v;
    __syncthreads();
    unsigned int total = 0;
    for (int w = 0; w < TILE_THREADS / 32; ++w) total += shared8[w];
    __syncthreads();
    return total;
}

extern "C" __global__ void mag_tile_count(const float* x, unsigned long long n, unsigned int tbits,
                                          unsigned int* gt, unsigned int* eq) {
    __shared__ unsigned int w8[TILE_THREADS / 32];
    const unsigned long long base = (unsigned long long)blockIdx.x * TILE;
    unsigned int g = 0, e = 0;
    for (int j = 0; j < TILE_ITEMS; ++j) {
        unsigned long long i = base + (unsigned long long)j * TILE_THREADS + threadIdx.x;
        if (i < n) {
            unsigned int m = mag_bits(x[i]);
            g += m > tbits;
            e += (m == tbits) & (tbits != 0u);
        }
    }
    g = block_sum(g, w8);
    e = block_sum(e, w8);
    if (threadIdx.x == 0) {
        gt[blockIdx.x] = g;
        eq[blockIdx.x] = e;
    }
}

// Exclusive prefix sum over a block of 1024 threads (warp shuffles, then the 32 warp
// totals); `total` gets the block's sum. Every thread must call it.
__device__ __forceinline__ unsigned long long block_scan_1024(unsigned long long v, unsigned long long* shared33,
                                                              unsigned long long* total) {
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        unsigned long long up = __shfl_up_sync(0xffffffffu, inc, o);
        if ((int)lane >= o) inc += up;
    }
    if (lane == 31) shared33[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        unsigned long long w = shared33[lane], wi = w;
        for (int o = 1; o < 32; o <<= 1) {
            unsigned long long up = __shfl_up_sync(0xffffffffu, wi, o);
            if ((int)lane >= o) wi += up;
        }
        shared33[lane] = wi - w;  // exclusive, per warp
        if (lane == 31) shared33[32] = wi;
    }
    __syncthreads();
    unsigned long long out = shared33[warp] + inc - v;
    *total = shared33[32];
    __syncthreads();
    return out;
}

// One block of 1024 threads over the tiles' counts, each thread a run of consecutive
// tiles: each tile's output offset and the equal entries before it; total[0] = entries
// selected.
extern "C" __global__ void mag_tile_scan(const unsigned int* gt, const unsigned int* eq,
                                         unsigned long long tiles, unsigned long long take_eq,
                                         unsigned long long* out_off, unsigned long long* eq_off,
                                         unsigned long long* total) {
    __shared__ unsigned long long s[33];
    const unsigned long long per = (tiles + 1023) / 1024;
    const unsigned long long lo = min(tiles, per * threadIdx.x), hi = min(tiles, lo + per);
    unsigned long long e = 0;
    for (unsigned long long b = lo; b < hi; ++b) e += eq[b];
    unsigned long long all;
    unsigned long long e_before = block_scan_1024(e, s, &all);
    // What each tile selects: its larger entries and the equal ones still wanted. Held in
    // out_off until the offsets replace it.
    unsigned long long sel = 0;
    for (unsigned long long b = lo; b < hi; ++b) {
        unsigned long long eb = eq[b];
        unsigned long long taken = e_before < take_eq ? min(eb, take_eq - e_before) : 0;
        eq_off[b] = e_before;
        e_before += eb;
        out_off[b] = gt[b] + taken;
        sel += gt[b] + taken;
    }
    unsigned long long sum;
    unsigned long long at = block_scan_1024(sel, s, &sum);
    for (unsigned long long b = lo; b < hi; ++b) {
        unsigned long long c = out_off[b];
        out_off[b] = at;
        at += c;
    }
    if (threadIdx.x == 0) total[0] = sum;
}

// Writes a tile's selected entries in index order. Each warp takes 512 consecutive
// entries (16 coalesced rows of 32), loads them all first (16 loads in flight per thread),
// ranks them with ballots, and the block exchanges only its 8 warp totals, twice.
extern "C" __global__ void mag_tile_write(const float* x, unsigned long long n, unsigned int tbits,
                                          unsigned long long take_eq, const unsigned long long* out_off,
                                          const unsigned long long* eq_off, unsigned long long total,
                                          unsigned int* idx, float* val) {
    __shared__ unsigned int warp_eq[TILE_THREADS / 32], warp_sel[TILE_THREADS / 32];
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned int below = (1u << lane) - 1u;
    const unsigned long long base =
        (unsigned long long)blockIdx.x * TILE + (unsigned long long)warp * (32 * TILE_ITEMS);
    float xs[TILE_ITEMS];
#pragma unroll
    for (int j = 0; j < TILE_ITEMS; ++j) {
        unsigned long long i = base + (unsigned long long)j * 32 + lane;
        xs[j] = i < n ? x[i] : 0.0f;  // past the end: a zero, never selected
    }
    unsigned int eqb[TILE_ITEMS];
    unsigned int e_total = 0;
#pragma unroll
    for (int j = 0; j < TILE_ITEMS; ++j) {
        unsigned int m = mag_bits(xs[j]);
        eqb[j] = __ballot_sync(0xffffffffu, m == tbits && tbits != 0u);
        e_total += __popc(eqb[j]);
    }
    if (lane == 0) warp_eq[warp] = e_total;
    __syncthreads();
    unsigned long long eq_seen = eq_off[blockIdx.x];
    for (unsigned int w = 0; w < warp; ++w) eq_seen += warp_eq[w];
    unsigned int selb[TILE_ITEMS];
    unsigned int s_total = 0;
#pragma unroll
    for (int j = 0; j < TILE_ITEMS; ++j) {
        unsigned int m = mag_bits(xs[j]);
        bool eq = (eqb[j] >> lane) & 1u;
        bool sel = m > tbits || (eq && eq_seen + __popc(eqb[j] & below) < take_eq);
        eq_seen += __popc(eqb[j]);
        selb[j] = __ballot_sync(0xffffffffu, sel);
        s_total += __popc(selb[j]);
    }
    if (lane == 0) warp_sel[warp] = s_total;
    __syncthreads();
    unsigned long long out = out_off[blockIdx.x];
    for (unsigned int w = 0; w < warp; ++w) out += warp_sel[w];
#pragma unroll
    for (int j = 0; j < TILE_ITEMS; ++j) {
        // pos < total whenever x is what was counted; the bound keeps a changed x from
        // writing past the output.
        unsigned long long pos = out + __popc(selb[j] & below);
        if (((selb[j] >> lane) & 1u) && pos < total) {
            idx[pos] = (unsigned int)(base + (unsigned long long)j * 32 + lane);
            val[pos] = xs[j];
        }
        out += __popc(selb[j]);
    }
}

// ---- small helpers ----------------------------------------------------------------------

// x[idx[j]] = 0 for j < k (clearing what was sent from the accumulators); indices past n
// are skipped (and counted in bad[0], which the host reads and reports). With count_only
// nothing is written: the checked call counts first, so that an error leaves x as it was.
extern "C" __global__ void zero_at(float* x, unsigned long long n, const unsigned int* idx,
                                   unsigned long long k, unsigned int* bad, int count_only) {
    GRID_LOOP(j, k) {
        unsigned int i = idx[j];
        if (i >= n) atomicAdd(bad, 1u);
        else if (!count_only) x[i] = 0.0f;
    }
}

// out[j] = x[start + j·stride] for j < count.
extern "C" __global__ void gather_strided(const float* x, unsigned long long start,
                                          unsigned long long stride, unsigned long long count,
                                          float* out) {
    GRID_LOOP(j, count) { out[j] = x[start + j * stride]; }
}

// Σ x² in double: per-block partial sums (a fixed grid, so the order and the result do not
// depend on timing), then one block adds the partials in order.
extern "C" __global__ void sum_sq_partial(const float* x, unsigned long long n, double* partial) {
    __shared__ double s[256];
    double acc = 0.0;
    GRID_LOOP(i, n) {
        double v = (double)x[i];
        acc += v * v;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

extern "C" __global__ void sum_sq_final(const double* partial, unsigned int blocks, double* out) {
    __shared__ double s[256];
    double acc = 0.0;
    for (unsigned int b = threadIdx.x; b < blocks; b += 256) acc += partial[b];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0];
}

// ---- DGC's accumulation (paper 000, Eq. 7 and Alg. 4), one pass, in place ---------------
// rule 0 (no momentum correction): v += gs·g. rule 1: u = m·u + (gs·g + wd·w); v += u.
// rule 2 (Nesterov): gi = gs·g + wd·w; u = m·(u + gi); v += u + gi. Without weights
// (has_w 0) w reads as 0, as on the CPU. Same operations in the same order as
// compress::methods::dgc's CPU loop (no contraction into FMAs: NVRTC runs with fmad off),
// so u and v come out bit for bit the same.
extern "C" __global__ void dgc_accumulate(float* u, float* v, const float* g, const float* w,
                                          int has_w, unsigned long long n, float gs, float mo,
                                          float wd, int rule) {
    GRID_LOOP(i, n) {
        if (rule == 0) {
            v[i] += gs * g[i];
        } else {
            float wi = has_w ? w[i] : 0.0f;
            float gi = gs * g[i] + wd * wi;
            if (rule == 2) {
                float ui = mo * (u[i] + gi);
                u[i] = ui;
                v[i] += ui + gi;
            } else {
                float ui = mo * u[i] + gi;
                u[i] = ui;
                v[i] += ui;
            }
        }
    }
}
