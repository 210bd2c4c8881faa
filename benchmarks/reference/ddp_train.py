"""PyTorch DDP side of `time_to_accuracy`: ResNet-20 on Fashion-MNIST trained data-parallel
with torch.distributed (gloo) and DistributedDataParallel, optionally with one of DDP's
communication hooks, recording the training time (evaluations excluded) at every
evaluation, so that its time to a target accuracy reads off as ours does.

The same job as `train --model resnet20 --dataset fashion-mnist`: the network of
cifar_resnet.py (parameter for parameter ours, same names), the pixels scaled to [0, 1]
and normalised by the training set's mean and standard deviation, no augmentation,
torch.optim.SGD with our --lr, --momentum and --weight-decay (ours follows it), a batch of
--batch images per worker, each epoch's shuffled order split into one shard per worker,
the test set split the same way and the correct counts summed. With --init, the
parameters and batch-norm buffers start from a safetensors file our trainer wrote
(`initial.safetensors` in a run directory: `param/<name>`, `buffer/<name>`), so both
sides start from the same weights; the order of the samples is each side's own shuffle.

Ranks: with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (scripts/netem.sh sets them,
and GRADEX_BIND_ADDR, the namespace's address), this process is one rank and gloo binds
to the interface that holds GRADEX_BIND_ADDR; otherwise --workers N starts N local ranks
on the loopback interface.

Writes JSON lines to --out (rank 0): one "config" record with every setting, "step"
records every --log-every steps, "eval" records ({"step", "epoch", "metric",
"train_seconds"}) and a final "summary" record. Needs torch (pip install torch numpy
safetensors); safetensors only with --init.
"""
import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time

HOOKS = ("none", "fp16", "bf16", "powersgd")


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--synthetic", type=int, default=0,
                   help="train on N random images of 10 classes instead (a smoke test; not our synthetic set)")
    p.add_argument("--synthetic-shape", default="3,32,32", help="C,H,W of --synthetic's images")
    p.add_argument("--workers", type=int, default=1, help="local ranks to start when RANK is not set")
    p.add_argument("--batch", type=int, default=32, help="images per worker and step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--epochs", type=float, default=1.0, help="epochs to train (a fraction ends mid-epoch)")
    p.add_argument("--steps", type=int, default=0, help="steps to train, overriding --epochs when > 0")
    p.add_argument("--hook", choices=HOOKS, default="none")
    p.add_argument("--powersgd-rank", type=int, default=2, help="matrix_approximation_rank")
    p.add_argument("--start-powersgd-iter", type=int, default=1000, help="PowerSGDState's start_powerSGD_iter")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (set_num_threads)")
    p.add_argument("--init", default=None, help="our initial.safetensors; without it PyTorch's initialisation")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: at each epoch end)")
    p.add_argument("--eval-samples", type=int, default=0, help="test images (0: all 10,000)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="ddp.jsonl")
    args = p.parse_args()
    if args.batch < 1 or args.threads < 1 or args.workers < 1:
        p.error("--batch, --threads and --workers must be at least 1")
    if args.steps <= 0 and args.epochs <= 0:
        p.error("give --epochs > 0 or --steps > 0")
    return args


def read_idx(path):
    """An IDX file (gzipped or not) as (dims, bytes)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    nd = data[3]
    dims = struct.unpack(">" + "I" * nd, data[4 : 4 + 4 * nd])
    return dims, data[4 + 4 * nd :]


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise SystemExit(f"{data_dir}: no {stem}[.gz] (apt-get install dataset-fashion-mnist, or --data-dir)")


def load(torch, data_dir, split):
    dims, px = read_idx(find(data_dir, f"{split}-images-idx3-ubyte"))
    _, lab = read_idx(find(data_dir, f"{split}-labels-idx1-ubyte"))
    images = torch.frombuffer(bytearray(px), dtype=torch.uint8).reshape(dims[0], 1, dims[1], dims[2])
    labels = torch.frombuffer(bytearray(lab), dtype=torch.uint8).long()
    return images.float().div_(255.0), labels


def bind_interface(addr):
    """The name of the interface holding `addr` (for GLOO_SOCKET_IFNAME), from `ip -o addr`."""
    import subprocess

    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[3].split("/")[0] == addr:
            return parts[1]
    raise SystemExit(f"no interface holds GRADEX_BIND_ADDR={addr}")


def run(rank, world, args):
    torch_threads = args.threads
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(torch_threads)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cifar_resnet import ResNetCifar

    torch.set_num_threads(torch_threads)
    torch.manual_seed(args.seed)
    bind = os.environ.get("GRADEX_BIND_ADDR")
    ifname = bind_interface(bind) if bind else None
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    dist.init_process_group("gloo", rank=rank, world_size=world)

    if args.synthetic > 0:
        g = torch.Generator().manual_seed(args.seed)
        shape = tuple(int(d) for d in args.synthetic_shape.split(","))
        train_x = torch.rand(args.synthetic, *shape, generator=g)
        train_y = torch.randint(0, 10, (args.synthetic,), generator=g)
        test_x, test_y = train_x[:1024].clone(), train_y[:1024].clone()
    else:
        train_x, train_y = load(torch, args.data_dir, "train")
        test_x, test_y = load(torch, args.data_dir, "t10k")
    mean, std = train_x.mean().item(), train_x.std(unbiased=False).item()
    train_x.sub_(mean).div_(std)
    test_x.sub_(mean).div_(std)
    if args.eval_samples > 0:
        # Spread over the whole test set, as ours limits it (every k-th image).
        keep = torch.linspace(0, len(test_y) - 1, args.eval_samples).round().long()
        test_x, test_y = test_x[keep], test_y[keep]

    model = ResNetCifar(20, train_x.shape[1], 10)
    if args.init:
        from safetensors.torch import load_file

        saved = load_file(args.init)
        params = {k[len("param/"):]: v for k, v in saved.items() if k.startswith("param/")}
        buffers = {k[len("buffer/"):]: v for k, v in saved.items() if k.startswith("buffer/")}
        state = model.state_dict()
        missing = [k for k in state if k not in params and k not in buffers and not k.endswith("num_batches_tracked")]
        if missing:
            raise SystemExit(f"{args.init}: no tensor for {missing[:5]}")
        with torch.no_grad():
            for k, t in state.items():
                src = params.get(k, buffers.get(k))
                if src is not None:
                    t.copy_(src.reshape(t.shape))
    ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    if args.hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif args.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=args.start_powersgd_iter,
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)

    per_epoch = (len(train_y) // world) // args.batch
    total = args.steps if args.steps > 0 else int(round(args.epochs * per_epoch))
    out = open(args.out, "w") if rank == 0 else None

    def write(rec):
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    write({"kind": "config", "system": "pytorch-ddp", "torch_version": torch.__version__, "world": world,
           "hook": args.hook, "bucket_cap_mb": args.bucket_cap_mb, "threads": torch_threads, "batch": args.batch,
           "lr": args.lr, "momentum": args.momentum, "weight_decay": args.weight_decay, "steps": total,
           "powersgd_rank": args.powersgd_rank, "start_powersgd_iter": args.start_powersgd_iter,
           "init": args.init, "seed": args.seed, "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME", "default")})

    def evaluate():
        model.eval()
        mine = torch.arange(rank, len(test_y), world)
        correct = torch.zeros(2)
        with torch.no_grad():
            for i in range(0, len(mine), 256):
                idx = mine[i : i + 256]
                pred = model(test_x[idx]).argmax(1)
                correct[0] += (pred == test_y[idx]).sum()
                correct[1] += len(idx)
        dist.all_reduce(correct)
        model.train()
        return (correct[0] / correct[1]).item()

    def tx_bytes():
        """Bytes this host's interface has sent (an emulated host's own link; None on
        loopback, whose counters every rank shares): headers included."""
        if not ifname:
            return None
        with open(f"/sys/class/net/{ifname}/statistics/tx_bytes") as f:
            return int(f.read())

    sent_before = tx_bytes()
    train_seconds, step, window, window_loss, window_t = 0.0, 0, 0, 0.0, 0.0
    steps_after_20 = []
    epoch = 0
    dist.barrier()
    while step < total:
        g = torch.Generator().manual_seed(args.seed * 1000003 + epoch)
        order = torch.randperm(len(train_y), generator=g)
        shard = order[rank::world][: per_epoch * args.batch]
        for b in range(per_epoch):
            if step >= total:
                break
            t = time.perf_counter()
            idx = shard[b * args.batch : (b + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
            dt = time.perf_counter() - t
            train_seconds += dt
            step += 1
            if step > 20:
                steps_after_20.append(dt)
            window += 1
            window_loss += loss.item()
            window_t += dt
            if step % args.log_every == 0 or step == total:
                write({"kind": "step", "step": step, "loss": window_loss / window, "step_seconds": window_t / window,
                       "train_seconds": train_seconds})
                window, window_loss, window_t = 0, 0.0, 0.0
            end_of_epoch = b == per_epoch - 1
            if (args.eval_every > 0 and step % args.eval_every == 0) or (args.eval_every == 0 and end_of_epoch) or step == total:
                acc = evaluate()
                write({"kind": "eval", "step": step, "epoch": step / per_epoch, "metric": acc,
                       "train_seconds": train_seconds})
        epoch += 1
    steady = sorted(steps_after_20)
    sent_after = tx_bytes()
    # The evaluations' few allreduced floats are counted too; they are a rounding error.
    per_step = (sent_after - sent_before) / step if sent_before is not None and step else None
    write({"kind": "summary", "steps": step, "train_seconds": train_seconds, "bytes_per_step": per_step,
           "median_step_seconds": steady[len(steady) // 2] if steady else None,
           "steps_per_second": len(steady) / sum(steady) if steady else None})
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse()
    if "RANK" in os.environ:
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    import multiprocessing as mp

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=run, args=(r, args.workers, args)) for r in range(args.workers)]
    for p in procs:
        p.start()
    codes = [p.join() or p.exitcode for p in procs]
    if any(codes):
        raise SystemExit(f"ranks exited with {codes}")


if __name__ == "__main__":
    main()
