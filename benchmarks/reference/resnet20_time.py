"""Reference side of `model_zoo --time`: one ResNet-20 training step (forward,
cross-entropy, backward; float32, train mode) in PyTorch on the CPU, same network as
nn::models::resnet_cifar(20, 3, 10) (cifar_resnet.py), best of --repeats after 2 warm-ups.
Prints ONE JSON object: {"threads", "batch", "model", "torch_ms", "torch_version", "params"}.
"""
import argparse
import json
import os
import sys

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count() or 1)))
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--repeats", type=int, default=5)
args = parser.parse_args()
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cifar_resnet import ResNetCifar  # noqa: E402
from step_timing import best_ms  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(0)
model = ResNetCifar(20, 3, 10).train()
x = torch.randn(args.batch, 3, 32, 32)
y = torch.arange(args.batch) % 10


def step():
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()


torch_ms = best_ms(step, args.repeats)
print(json.dumps({"threads": args.threads, "batch": args.batch, "model": "resnet20", "torch_ms": torch_ms,
                  "torch_version": torch.__version__, "params": sum(p.numel() for p in model.parameters())}))
