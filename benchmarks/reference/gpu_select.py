"""Reference side of `compress_bench --device cuda`: on CUDA device 0, the times of
torch.topk of |g| (k values of largest magnitude), a device-to-device copy of g and
torch.sum(g), for one float32 gradient of --n values (ResNet-50's 25,557,032 by default),
each the median of --repeats timed with CUDA events after --warmup untimed runs.

The gradient is normal(0, 1) from a fixed seed (never zeros: they time differently).
Prints ONE JSON object: {"n", "k", "topk_ms", "copy_ms", "copy_gbps" (bytes read plus
written over time), "sum_ms", "torch_version", "device"}.
"""
import argparse
import json
import statistics

import torch

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--n", type=int, default=25_557_032)
parser.add_argument("--k", type=int, default=25_558)
parser.add_argument("--repeats", type=int, default=20)
parser.add_argument("--warmup", type=int, default=3)
args = parser.parse_args()

dev = torch.device("cuda", 0)
gen = torch.Generator(device=dev).manual_seed(0)
g = torch.randn(args.n, device=dev, generator=gen)
dst = torch.empty_like(g)


def timed(fn):
    for _ in range(args.warmup):
        fn()
    times = []
    for _ in range(args.repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


# What a top-k compressor does with torch: the magnitudes, then their k largest.
topk_ms = timed(lambda: torch.topk(g.abs(), args.k, sorted=False))
copy_ms = timed(lambda: dst.copy_(g))
sum_ms = timed(lambda: torch.sum(g))
print(json.dumps({
    "n": args.n,
    "k": args.k,
    "topk_ms": topk_ms,
    "copy_ms": copy_ms,
    "copy_gbps": 8.0 * args.n / (copy_ms * 1e6),
    "sum_ms": sum_ms,
    "torch_version": torch.__version__,
    "device": torch.cuda.get_device_name(0),
}))
