#!/usr/bin/env python3
"""PyTorch's PowerSGD wire for given parameter shapes, by the hook's own rule.

Usage: powersgd_ratio.py --shapes='[[64,3,7,7],[64],...]' --ranks=1,2,4

For each rank r prints, as JSON {"r": values}, the values PyTorch's powerSGD_hook puts
on the wire per step for tensors of these shapes: a tensor of one dimension (or none) is
allreduced as it is; a tensor of more is viewed as a matrix of its first dimension by the
rest and compressed to (n + m)·r values where the hook's `_should_compress` says so (its
default min_compression_rate, 2), else sent whole. Needs PyTorch (CPU is enough); the
function is imported from torch, not restated, so the figures are the hook's.
"""
import argparse
import json
import math

from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--ranks", required=True)
    a = ap.parse_args()
    shapes = json.loads(a.shapes)
    out = {}
    for r in (int(x) for x in a.ranks.split(",")):
        sent = 0
        for s in shapes:
            numel = math.prod(s)
            if len(s) <= 1:
                sent += numel
                continue
            n, m = s[0], numel // s[0]
            rank = min(n, m, r)
            compress, _, compressed = hook._should_compress(n, m, rank, 2)
            sent += compressed if compress else numel
        out[str(r)] = sent
    print(json.dumps(out))


if __name__ == "__main__":
    main()
