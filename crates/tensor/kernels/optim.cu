// One SGD-with-momentum step in place, one thread per element, with the same operation
// order as the composed tensor ops it replaces (nn::optim::Sgd, torch.optim.SGD):
//   d = g + wd·p;  buf = first ? d : buf·m + d;  step = nesterov ? d + buf·m : buf;
//   p = p − step·lr.
// Replaces ~6 elementwise kernels and their temporaries per parameter tensor.

#define SGD(T, S)                                                                                  \
    extern "C" __global__ void sgd_momentum_##S(T* p, const T* g, T* buf, unsigned long long n,   \
                                                T lr, T m, T wd, int nesterov, int first) {       \
        GRID_LOOP(i, n) {                                                                          \
            T d = g[i];                                                                            \
            if (wd != (T)0) d = d + p[i] * wd;                                                     \
            T b = first ? d : buf[i] * m + d;                                                      \
            buf[i] = b;                                                                            \
            T step = nesterov ? d + b * m : b;                                                     \
            p[i] = p[i] - step * lr;                                                               \
        }                                                                                          \
    }
SGD(float, f32)
SGD(double, f64)
