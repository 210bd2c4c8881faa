"""Shared by the CPU step references (resnet20_time.py, lstm_lm_time.py): their
--threads and --repeats, set before torch is imported, and the best wall time of a
training step, as `benchmarks::best_of` measures ours. Imports nothing heavy."""
import os
import time


def parse_args(parser):
    """Adds --threads (default RAYON_NUM_THREADS, else every core) and --repeats to
    `parser`, parses, and sets the BLAS/OpenMP thread counts: call it before `import
    torch`, which reads them once."""
    parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count() or 1)))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    return args


def best_ms(step, repeats, warmup=2):
    """Runs `step` `warmup` times untimed, then `repeats` times (at least once); returns
    the fastest run in milliseconds."""
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
    return best * 1e3
