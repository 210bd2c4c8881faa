// Softmax (or log-softmax) over the last dimension of a contiguous [rows, cols] f32
// matrix: one block per row; max, then the sum of exponentials, both in shared memory.

extern "C" __global__ void softmax_rows_f32(const float* x, float* y, unsigned long long cols, int log_out) {
    extern __shared__ float part[];
    const float* row = x + blockIdx.x * cols;
    float* out = y + blockIdx.x * cols;
    float m = -__int_as_float(0x7f800000);
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, row[j]);
    part[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    m = part[0];
    __syncthreads();
    float acc = 0.f;
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) acc += expf(row[j] - m);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    float total = part[0];
    float lt = logf(total);
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) {
        float z = row[j] - m;
        out[j] = log_out ? z - lt : expf(z) / total;
    }
}
