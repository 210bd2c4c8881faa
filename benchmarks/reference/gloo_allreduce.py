"""Reference side of `comm_bench`: PyTorch's Gloo allreduce (torch.distributed, gloo
backend) on local processes, float32 sum, best of --repeats after --warmup untimed calls (1), per size;
each repetition counts the slowest rank's time (every rank times its own call from the
barrier), as comm_bench does.
Prints ONE JSON object: {"world": W, "torch_version": str, "seconds": {"<bytes>": t, ...}}.
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, sizes, repeats, warmup, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = {}
    for size in sizes:
        x = torch.ones(max(1, size // 4))
        for _ in range(warmup):
            dist.all_reduce(x)
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(x)
            slowest = torch.tensor([time.perf_counter() - t], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            best = min(best, slowest.item())
        out[str(size)] = best
    if rank == 0:
        queue.put(out)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--sizes", default="4096,65536,1048576,16777216,67108864,134217728")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per size first")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",") if s]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.world, port, sizes, a.repeats, a.warmup, queue)) for r in range(a.world)]
    for pr in procs:
        pr.start()
    result = queue.get(timeout=600)
    for pr in procs:
        pr.join()
    print(json.dumps({"world": a.world, "torch_version": torch.__version__, "seconds": result}))


if __name__ == "__main__":
    main()
