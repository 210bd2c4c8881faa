// Gather and scatter-add along one dimension of a contiguous tensor viewed as
// [outer, size, inner]: index_select (embedding lookup) and index_add (its transpose,
// the embedding gradient; atomicAdd, so the summation order of repeated ids varies).
// An index out of range reads or writes nothing (a gather gives 0) and is reported
// through the fault word (common.cuh), so no step reads the indices back to the host.

#define INDEX(T, S)                                                                                  \
    extern "C" __global__ void index_select_##S(const T* src, const unsigned int* ids, T* out,      \
                                                long long outer, long long size, long long n_ids,    \
                                                long long inner, unsigned int* fault) {              \
        GRID_LOOP(i, outer * n_ids * inner) {                                                        \
            long long in = (long long)(i % inner), q = (long long)(i / inner);                       \
            long long j = q % n_ids, o = q / n_ids;                                                  \
            long long id = (long long)ids[j];                                                        \
            if (id >= size) {                                                                        \
                out[i] = (T)0;                                                                       \
                report_fault(fault, 2u, j, id, size);                                                \
                continue;                                                                            \
            }                                                                                        \
            out[i] = src[(o * size + id) * inner + in];                                              \
        }                                                                                            \
    }
INDEX(float, f32)
INDEX(double, f64)
INDEX(unsigned int, u32)

#define INDEX_ADD(T, S)                                                                              \
    extern "C" __global__ void index_add_##S(const T* src, const unsigned int* ids, T* out,         \
                                             long long outer, long long size, long long n_ids,       \
                                             long long inner, unsigned int* fault) {                 \
        GRID_LOOP(i, outer * n_ids * inner) {                                                        \
            long long in = (long long)(i % inner), q = (long long)(i / inner);                       \
            long long j = q % n_ids, o = q / n_ids;                                                  \
            long long id = (long long)ids[j];                                                        \
            if (id >= size) {                                                                        \
                report_fault(fault, 3u, j, id, size);                                                \
                continue;                                                                            \
            }                                                                                        \
            atomicAdd(&out[(o * size + id) * inner + in], src[i]);                                   \
        }                                                                                            \
    }
INDEX_ADD(float, f32)
INDEX_ADD(double, f64)
