"""Reference side of `ops_bench`: NumPy and PyTorch CPU timings with the same thread count.

Measures float32 square matmul (NumPy and torch.mm) and one 3x3 convolution forward +
backward step in PyTorch (input 32x64x32x32, 64 output channels, padding 1), best of
--repeats after warm-up, and prints ONE JSON object on stdout:

  {"threads": T, "numpy_version": str|null, "torch_version": str|null,
   "matmul": [{"n": N, "numpy_gflops": x|null, "torch_gflops": x|null}, ...],
   "conv3x3": {"torch_ms": x|null, "torch_gflops": x|null}}

A library that is not installed is reported as null. Diagnostics go to stderr.
"""
import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count() or 1)))
parser.add_argument("--sizes", default="512,1024,2048")
parser.add_argument("--repeats", type=int, default=5)
args = parser.parse_args()

# Thread counts must be fixed before the libraries load their BLAS / OpenMP runtimes.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)


def best_of(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


sizes = [int(s) for s in args.sizes.split(",") if s]
result = {"threads": args.threads, "numpy_version": None, "torch_version": None,
          "matmul": [{"n": n, "numpy_gflops": None, "torch_gflops": None} for n in sizes],
          "conv3x3": {"torch_ms": None, "torch_gflops": None}}

try:
    import numpy as np
    result["numpy_version"] = np.__version__
    rng = np.random.default_rng(0)
    for row in result["matmul"]:
        n = row["n"]
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        row["numpy_gflops"] = 2 * n ** 3 / best_of(lambda: a @ b, 1, args.repeats) / 1e9
except ImportError as e:
    print(f"ops_bench.py: numpy unavailable: {e}", file=sys.stderr)

try:
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    result["torch_version"] = torch.__version__
    torch.manual_seed(0)
    for row in result["matmul"]:
        n = row["n"]
        a, b = torch.randn(n, n), torch.randn(n, n)
        row["torch_gflops"] = 2 * n ** 3 / best_of(lambda: torch.mm(a, b), 1, args.repeats) / 1e9
    N, C, O, H, W = 32, 64, 64, 32, 32
    x = torch.randn(N, C, H, W, requires_grad=True)
    w = (torch.randn(O, C, 3, 3) * 0.05).requires_grad_()
    gy = torch.randn(N, O, H, W)

    def step():
        x.grad = None
        w.grad = None
        F.conv2d(x, w, padding=1).backward(gy)

    t = best_of(step, 2, args.repeats)
    result["conv3x3"] = {"torch_ms": t * 1e3, "torch_gflops": 3 * 2 * N * O * C * 9 * H * W / t / 1e9}
except ImportError as e:
    print(f"ops_bench.py: torch unavailable: {e}", file=sys.stderr)

print(json.dumps(result))
