"""Reference side of `model_zoo --time` for the language models: one training step
(forward from a zero state, cross-entropy over every position, backward; float32, train
mode, dropout on) in PyTorch on the CPU, the network of nn::models::lstm_lm / char_lstm:
embedding, a 2-layer torch.nn.LSTM (dropout between the layers), dropout on the embedding
and on the LSTM's output, a decoder (tied to the embedding with --tied). Input: token ids
[--bptt, --batch], time-major. Best of --repeats after 2 warm-ups.
Prints ONE JSON object: {"threads", "batch", "bptt", "torch_ms", "torch_version", "params"}.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_timing import best_ms, parse_args  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--vocab", type=int, required=True)
parser.add_argument("--emb", type=int, required=True)
parser.add_argument("--hidden", type=int, required=True)
parser.add_argument("--tied", action="store_true")
parser.add_argument("--dropout", type=float, default=0.0)
parser.add_argument("--batch", type=int, default=20)
parser.add_argument("--bptt", type=int, default=35)
args = parse_args(parser)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class LstmLm(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(args.vocab, args.emb)
        self.rnn = nn.LSTM(args.emb, args.hidden, 2, dropout=args.dropout)
        self.decoder = nn.Linear(args.hidden, args.vocab)
        if args.tied:
            self.decoder.weight = self.encoder.weight
        self.drop = nn.Dropout(args.dropout)

    def forward(self, ids):
        y, _ = self.rnn(self.drop(self.encoder(ids)))
        return self.decoder(self.drop(y))


torch.set_num_threads(args.threads)
torch.manual_seed(0)
model = LstmLm().train()
x = torch.randint(args.vocab, (args.bptt, args.batch))
y = x.reshape(-1)


def step():
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x).reshape(-1, args.vocab), y).backward()


torch_ms = best_ms(step, args.repeats)
print(json.dumps({"threads": args.threads, "batch": args.batch, "bptt": args.bptt, "torch_ms": torch_ms,
                  "torch_version": torch.__version__, "params": sum(p.numel() for p in model.parameters())}))
