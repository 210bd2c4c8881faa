#!/usr/bin/env python3
"""Whether every rank of a run ended with the same parameters, bit for bit.

Usage: same-params.py RUN_DIR [RANKS]   (RANKS defaults to 2)

Reads RUN_DIR/checkpoint/rank{r}.safetensors with the standard library alone (the GPU
machine's Python need not have the safetensors package): an 8-byte little-endian header
length, a JSON header of name -> {dtype, shape, data_offsets}, then the data. Compares
the bytes of every tensor named param/* between rank 0 and each other rank. Prints one
line and exits 0 when all agree, 1 otherwise (2 when a file is missing or malformed).
"""
import json
import struct
import sys


def params(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    return {
        name: data[meta["data_offsets"][0] : meta["data_offsets"][1]]
        for name, meta in header.items()
        if name.startswith("param/")
    }


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    run, ranks = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    try:
        ps = [params(f"{run}/checkpoint/rank{r}.safetensors") for r in range(ranks)]
    except (OSError, ValueError, KeyError, struct.error) as e:
        print(f"cannot read the checkpoints of {run}: {e}")
        return 2
    if not ps[0]:
        print(f"{run}: rank 0's checkpoint holds no param/ tensors")
        return 2
    for r in range(1, ranks):
        differ = sorted(k for k in ps[0] if ps[r].get(k) != ps[0][k])
        if differ or set(ps[r]) != set(ps[0]):
            print(f"rank {r}'s parameters differ from rank 0's: {differ[:5]}")
            return 1
    print(f"{len(ps[0])} parameter tensors identical on {ranks} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
