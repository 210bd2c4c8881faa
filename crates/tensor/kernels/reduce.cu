// Row reductions of a contiguous [rows, cols] f32 matrix: one block per row, a tree
// reduction in shared memory (blockDim.x a power of two, at most 1024).

extern "C" __global__ void row_sum_f32(const float* x, float* y, unsigned long long cols) {
    extern __shared__ float part[];
    const float* row = x + blockIdx.x * cols;
    float acc = 0.f;
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) acc += row[j];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}

extern "C" __global__ void row_max_f32(const float* x, float* y, unsigned long long cols) {
    extern __shared__ float part[];
    const float* row = x + blockIdx.x * cols;
    float acc = -__int_as_float(0x7f800000);
    for (unsigned long long j = threadIdx.x; j < cols; j += blockDim.x) acc = fmaxf(acc, row[j]);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}
