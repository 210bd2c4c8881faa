// Top-k along the last dimension of a contiguous [rows, cols] matrix by a bitonic sort
// of each row padded to a power of two P: topk_init fills (value, index) pairs, one
// topk_step launch per (k, j) stage sorts all rows at once, topk_take copies the first
// k. The order is a strict total order, the CPU's: larger (or smaller) first, NaN
// counts as the largest value, ties by lower index, padding last.

template <typename T>
__device__ __forceinline__ bool before(T a, unsigned ia, T b, unsigned ib, int largest) {
    if (ia == 0xffffffffu) return false;   // padding sorts last
    if (ib == 0xffffffffu) return true;
    bool an = a != a, bn = b != b;
    int c;                                 // -1: a < b, 1: a > b, 0: equal (NaN greatest)
    if (an || bn) c = an == bn ? 0 : (an ? 1 : -1);
    else c = a < b ? -1 : (a > b ? 1 : 0);
    if (largest) c = -c;
    return c < 0 || (c == 0 && ia < ib);
}

#define TOPK(T, S)                                                                                   \
    extern "C" __global__ void topk_init_##S(const T* x, T* v, unsigned int* id, long long rows,    \
                                             long long cols, long long P) {                          \
        GRID_LOOP(i, rows * P) {                                                                     \
            long long r = (long long)(i / P), t = (long long)(i % P);                                \
            if (t < cols) { v[i] = x[r * cols + t]; id[i] = (unsigned)t; }                           \
            else { v[i] = (T)0; id[i] = 0xffffffffu; }                                               \
        }                                                                                            \
    }                                                                                                \
    extern "C" __global__ void topk_step_##S(T* v, unsigned int* id, long long rows, long long P,   \
                                             long long k, long long j, int largest) {                \
        GRID_LOOP(i, rows * P) {                                                                     \
            long long t = (long long)(i % P), partner = t ^ j;                                       \
            if (partner <= t) continue;                                                              \
            unsigned long long a = i, b = i - t + partner;                                           \
            bool ascending = (t & k) == 0;                                                           \
            bool swap = ascending ? before(v[b], id[b], v[a], id[a], largest)                        \
                                  : before(v[a], id[a], v[b], id[b], largest);                       \
            if (swap) {                                                                              \
                T tv = v[a]; v[a] = v[b]; v[b] = tv;                                                 \
                unsigned ti = id[a]; id[a] = id[b]; id[b] = ti;                                      \
            }                                                                                        \
        }                                                                                            \
    }                                                                                                \
    extern "C" __global__ void topk_take_##S(const T* v, const unsigned int* id, T* ov,             \
                                             unsigned int* oi, long long rows, long long P, long long k) { \
        GRID_LOOP(i, rows * k) {                                                                     \
            long long r = (long long)(i / k), q = (long long)(i % k);                                \
            ov[i] = v[r * P + q];                                                                    \
            oi[i] = id[r * P + q];                                                                   \
        }                                                                                            \
    }
TOPK(float, f32)
TOPK(double, f64)
