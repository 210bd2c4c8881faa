"""Reference side of the `ops_bench` benchmark: NumPy and PyTorch CPU timings.

Measures, with the given thread count:
  * float32 square matmul in NumPy (a @ b) and PyTorch (torch.mm) at each --sizes entry:
    best of --repeats wall times after one warm-up, GFLOP/s = 2 n^3 / t / 1e9;
  * one PyTorch 3x3 convolution step, forward + backward: x (32, 64, 32, 32) and
    w (64, 64, 3, 3) both requiring grad, padding 1, stride 1, no bias, backward with a
    fixed random grad_y: best of --repeats after two warm-ups, in milliseconds, and
    GFLOP/s with flops = 3 * 2*N*O*C*9*H*W (forward, input gradient, weight gradient).

Prints ONE JSON object on stdout (diagnostics go to stderr):

  {"threads": T, "numpy_version": str|null, "torch_version": str|null,
   "matmul": [{"n": 512, "numpy_gflops": x|null, "torch_gflops": x|null}, ...],
   "conv3x3": {"torch_ms": x|null, "torch_gflops": x|null}}

A library that cannot be imported leaves its fields null.

    python3 benchmarks/reference/ops_bench.py --threads 4 --sizes 512,1024,2048 --repeats 5
"""
import argparse
import json
import os
import sys
import time


def default_threads():
    env = os.environ.get("RAYON_NUM_THREADS", "").strip()
    if env:
        try:
            if int(env) > 0:
                return int(env)
        except ValueError:
            pass
    return os.cpu_count() or 1


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=default_threads(),
                   help="threads for BLAS / OpenMP / torch (default: RAYON_NUM_THREADS or the CPU count)")
    p.add_argument("--sizes", default="512,1024,2048", help="comma-separated matmul sizes")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (best is kept)")
    args = p.parse_args()
    if args.threads < 1:
        p.error("--threads must be at least 1")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes: expected comma-separated integers, got {args.sizes!r}")
    return args


def log(msg):
    print(f"ops_bench.py: {msg}", file=sys.stderr, flush=True)


def best_time(fn, warmups, repeats):
    """Best wall time (seconds) of `repeats` calls of fn after `warmups` untimed calls."""
    for _ in range(warmups):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_numpy(args, result):
    try:
        import numpy as np
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        log(f"numpy unavailable: {e}")
        return
    result["numpy_version"] = np.__version__
    rng = np.random.default_rng(0)
    for row in result["matmul"]:
        n = row["n"]
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        t = best_time(lambda: np.matmul(a, b), 1, args.repeats)
        row["numpy_gflops"] = 2.0 * n ** 3 / t / 1e9
        log(f"numpy matmul n={n}: {t * 1e3:.3f} ms")


def bench_torch(args, result):
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        log(f"torch unavailable: {e}")
        return
    torch.set_num_threads(args.threads)
    result["torch_version"] = torch.__version__
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for row in result["matmul"]:
            n = row["n"]
            a = torch.randn(n, n, generator=gen, dtype=torch.float32)
            b = torch.randn(n, n, generator=gen, dtype=torch.float32)
            t = best_time(lambda: torch.mm(a, b), 1, args.repeats)
            row["torch_gflops"] = 2.0 * n ** 3 / t / 1e9
            log(f"torch mm n={n}: {t * 1e3:.3f} ms")

    n, c, o, h, w = 32, 64, 64, 32, 32
    x = torch.randn(n, c, h, w, generator=gen, dtype=torch.float32).requires_grad_()
    weight = (torch.randn(o, c, 3, 3, generator=gen, dtype=torch.float32) / (c * 9) ** 0.5).requires_grad_()
    grad_y = torch.randn(n, o, h, w, generator=gen, dtype=torch.float32)

    def step():
        x.grad = None
        weight.grad = None
        y = F.conv2d(x, weight, padding=1)
        y.backward(grad_y)

    t = best_time(step, 2, args.repeats)
    flops = 3 * 2 * n * o * c * 9 * h * w
    result["conv3x3"] = {"torch_ms": t * 1e3, "torch_gflops": flops / t / 1e9}
    log(f"torch conv3x3 fwd+bwd: {t * 1e3:.3f} ms")


def main():
    args = parse_args()
    # Must happen before numpy / torch load their BLAS and OpenMP runtimes.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    result = {
        "threads": args.threads,
        "numpy_version": None,
        "torch_version": None,
        "matmul": [{"n": n, "numpy_gflops": None, "torch_gflops": None} for n in args.sizes],
        "conv3x3": {"torch_ms": None, "torch_gflops": None},
    }
    bench_numpy(args, result)
    bench_torch(args, result)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
