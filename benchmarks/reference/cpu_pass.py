"""Reference side of `compress_bench`'s memory pass on the CPU: torch.sum over a float32
tensor of --n values and a copy of it (torch's `copy_`), with --threads threads, each the
best of --repeats after one warm-up, in milliseconds. The values are normal(0, 1) from a
fixed seed.

Prints ONE JSON object: {"n", "threads", "sum_ms", "copy_ms", "torch_version"}; exits
with an error (a message on stderr) when torch cannot be imported.
"""
import argparse
import json
import time

import torch

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--n", type=int, default=25_557_032)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=5)
args = p.parse_args()
torch.set_num_threads(args.threads)
x = torch.randn(args.n, generator=torch.Generator().manual_seed(0))
y = torch.empty_like(x)


def best(fn):
    fn()
    t = []
    for _ in range(args.repeats):
        s = time.perf_counter()
        fn()
        t.append(time.perf_counter() - s)
    return min(t) * 1e3


print(json.dumps({
    "n": args.n,
    "threads": args.threads,
    "sum_ms": best(lambda: float(torch.sum(x))),
    "copy_ms": best(lambda: y.copy_(x)),
    "torch_version": torch.__version__,
}))
