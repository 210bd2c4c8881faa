"""Reference side of `model_zoo --time`: one ResNet-20 training step (forward,
cross-entropy, backward; float32, train mode) in PyTorch on the CPU, same network as
nn::models::resnet_cifar(20, 3, 10) (cifar_resnet.py), best of --repeats after 2 warm-ups.
Prints ONE JSON object: {"threads", "batch", "model", "torch_ms", "torch_version", "params"}.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_timing import best_ms, parse_args  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--batch", type=int, default=32)
args = parse_args(parser)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cifar_resnet import ResNetCifar  # noqa: E402

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
