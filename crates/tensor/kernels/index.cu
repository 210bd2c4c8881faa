// Gather and scatter-add along one dimension of a contiguous tensor viewed as
// [outer, size, inner]: index_select (embedding lookup) and index_add (its transpose,
// the embedding gradient; atomicAdd, so the summation order of repeated ids varies).
// Indices are range-checked on the host before launch.

#define INDEX(T, S)                                                                                  \
    extern "C" __global__ void index_select_##S(const T* src, const unsigned int* ids, T* out,      \
                                                long long outer, long long size, long long n_ids,    \
                                                long long inner) {                                   \
        GRID_LOOP(i, outer * n_ids * inner) {                                                        \
            long long in = (long long)(i % inner), q = (long long)(i / inner);                       \
            long long j = q % n_ids, o = q / n_ids;                                                  \
            out[i] = src[(o * size + (long long)ids[j]) * inner + in];                               \
        }                                                                                            \
    }
INDEX(float, f32)
INDEX(double, f64)
INDEX(unsigned int, u32)

#define INDEX_ADD(T, S)                                                                              \
    extern "C" __global__ void index_add_##S(const T* src, const unsigned int* ids, T* out,         \
                                             long long outer, long long size, long long n_ids,       \
                                             long long inner) {                                      \
        GRID_LOOP(i, outer * n_ids * inner) {                                                        \
            long long in = (long long)(i % inner), q = (long long)(i / inner);                       \
            long long j = q % n_ids, o = q / n_ids;                                                  \
            atomicAdd(&out[(o * size + (long long)ids[j]) * inner + in], src[i]);                    \
        }                                                                                            \
    }
INDEX_ADD(float, f32)
INDEX_ADD(double, f64)
