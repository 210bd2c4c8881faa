"""Reference side of `gpu_step_bench`: one training step (forward, cross-entropy,
backward, SGD with momentum 0.9) in PyTorch eager float32 on CUDA device 0, timed with
a device synchronisation after every step, median of --repeats after --warmup steps.

Models (the same shapes as the Rust side):
  resnet50: torchvision's ResNet-50 layout (bottleneck v1.5, 1000 classes), written out
            here so torchvision is not needed; input [batch, 3, 224, 224].
  lstm:     2-layer LSTM language model, hidden = embedding = 1500, vocab 10000, tied
            decoder, no dropout; input [35, batch] token ids (truncated BPTT length 35).
  deepspeech: deepspeech.pytorch's model (make_deepspeech_fixtures.py's copy of it) as
            DGC's AN4 row: 5 bidirectional LSTM layers of 800, 29 classes; input
            [batch, 1, 161, 200] spectrograms, 20-label transcripts, CTC (blank 0) averaged
            over the batch (deepspeech.pytorch's reduction), batch 16.
TF32 is off (torch.backends.*.allow_tf32 = False), as on our side by default.
Prints ONE JSON object: {"model", "batch", "phases" (with --breakdown: forward_ms,
backward_ms, update_ms, each synchronised; else null), "torch_ms", "torch_version", "device"}.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--model", choices=["resnet50", "lstm", "deepspeech"], required=True)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--repeats", type=int, default=10)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--breakdown", action="store_true", help="also time forward, backward and the update separately")
parser.add_argument("--profile", metavar="FILE", help="after timing, profile one step and write its GPU kernel table (torch.profiler) to FILE")
args = parser.parse_args()

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda", 0)
torch.manual_seed(0)


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for width, count, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for i in range(count):
                blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LstmLm(nn.Module):
    def __init__(self, vocab=10000, hidden=1500):
        super().__init__()
        self.encoder = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden, 2)
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.encoder.weight

    def forward(self, ids):
        y, _ = self.rnn(self.encoder(ids))
        return self.decoder(y)


if args.model == "resnet50":
    model = ResNet50().to(dev).train()
    x = torch.randn(args.batch, 3, 224, 224, device=dev)
    y = torch.arange(args.batch, device=dev) % 1000
    loss_of = lambda: F.cross_entropy(model(x), y)
elif args.model == "deepspeech":
    import make_deepspeech_fixtures as ds

    torch.set_default_dtype(torch.float32)  # the fixture module sets float64 on import
    ds.HIDDEN, ds.LAYERS, ds.CLASSES = 800, 5, 29
    model = ds.DeepSpeech(nn.LSTM).to(dev).train()
    frames, label_len = 200, 20
    x = torch.randn(args.batch, 1, 161, frames, device=dev)
    lengths = torch.full((args.batch,), frames, dtype=torch.int32)
    targets = torch.tensor([[1 + (b * 7 + j * 13) % 28 for j in range(label_len)] for b in range(args.batch)],
                           device=dev)
    target_lengths = torch.full((args.batch,), label_len, dtype=torch.long)

    def loss_of():
        logits, out_lengths = model(x, lengths)
        return F.ctc_loss(logits.log_softmax(2), targets, out_lengths.long(), target_lengths, blank=0,
                          reduction="sum") / args.batch
else:
    vocab, steps = 10000, 35
    model = LstmLm(vocab).to(dev).train()
    x = (torch.arange(steps * args.batch, device=dev).reshape(steps, args.batch) * 37) % vocab
    y = torch.roll(x.reshape(-1), -args.batch)
    loss_of = lambda: F.cross_entropy(model(x).reshape(-1, vocab), y)

opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def step():
    opt.zero_grad(set_to_none=True)
    loss_of().backward()
    opt.step()
    torch.cuda.synchronize()


for _ in range(args.warmup):
    step()
# Peaks over the timed steps only (the caching allocator keeps what warm-up mapped).
torch.cuda.reset_peak_memory_stats()
times = []
for _ in range(args.repeats):
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
peak_allocated, peak_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
phases = None
if args.breakdown:
    f, b, u = [], [], []
    for _ in range(args.repeats):
        opt.zero_grad(set_to_none=True)
        t = time.perf_counter()
        loss = loss_of()
        torch.cuda.synchronize()
        f.append(time.perf_counter() - t)
        t = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        b.append(time.perf_counter() - t)
        t = time.perf_counter()
        opt.step()
        torch.cuda.synchronize()
        u.append(time.perf_counter() - t)
    phases = {k: statistics.median(v) * 1e3 for k, v in (("forward_ms", f), ("backward_ms", b), ("update_ms", u))}
if args.profile:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    with open(args.profile, "w") as f:
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=60, max_name_column_width=90))
print(json.dumps({
    "model": args.model,
    "batch": args.batch,
    "phases": phases,
    "torch_ms": statistics.median(times) * 1e3,
    "peak_allocated_mib": peak_allocated / 2**20,
    "peak_reserved_mib": peak_reserved / 2**20,
    "torch_version": torch.__version__,
    "device": torch.cuda.get_device_name(0),
}))
