"""Golden values from PyTorch for the nn crate's tests (crates/nn/tests/golden.rs).

Float64, fixed seeds, byte-for-byte reproducible with the PyTorch that wrote each file
(PyTorch 2.15, which wrote lrn.json and ctc_zero_infinity.json, moves the last bits of
the older files' values, well inside the tests' tolerances, so those were left as they were). Writes into crates/nn/tests/fixtures/:
  lstm.json, gru.json   torch.nn.LSTM / GRU: outputs, final states, gradients of the input
                        and of every parameter (PyTorch names) for loss = sum(y * grad_y)
  ctc.json              F.ctc_loss (blank 0) through log_softmax: loss and d loss/d logits
  resnet20_step.json    one training step of the CIFAR ResNet-20 (cifar_resnet.py) with
                        deterministic parameters (rule below): logits, loss, selected
                        gradients, and running statistics after the step
  optim.json            five steps of SGD (Nesterov, weight decay) and Adam (weight decay)
  lrn.json              F.local_response_norm (AlexNet's size 5, and a large alpha so that
                        the window matters): output and d loss/d x for loss = sum(y * grad_y)
  ctc_zero_infinity.json  F.ctc_loss with zero_infinity=True on a batch where one sample
                        cannot be aligned (more frames needed than it has): its loss and
                        gradient are 0, the others' as usual (mean and sum reductions)
Arrays are {"shape": [...], "data": [...]} in row-major order.

    pip install torch
    python3 benchmarks/reference/make_nn_fixtures.py
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cifar_resnet import ResNetCifar  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "nn", "tests", "fixtures")
torch.set_default_dtype(torch.float64)

PARAM_RULE = ("parameter p (named_parameters order), element j: weights of rank >= 2: sin(1.3*j + 0.7*p) / sqrt(fan_in); "
              "rank-1 weights (batch norm): 1 + 0.1*sin(1.3*j + 0.7*p); biases: 0.1*sin(1.3*j + 0.7*p)")


def assign_param_rule(named_params, spread):
    """Sets every parameter by PARAM_RULE, with `spread` where it says 0.1."""
    with torch.no_grad():
        for p, (name, v) in enumerate(named_params):
            j = torch.arange(v.numel(), dtype=torch.float64)
            base = torch.sin(1.3 * j + 0.7 * p)
            if v.dim() >= 2:
                values = base / math.sqrt(v[0].numel())
            elif name.endswith(".weight"):
                values = 1 + spread * base
            else:
                values = spread * base
            v.copy_(values.reshape(v.shape))


def arr(t):
    t = t.detach().contiguous()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def rnn_cases(cls, with_cell):
    g = torch.Generator().manual_seed(3 if with_cell else 4)
    cases = []
    for name, i, h, layers, bidir, t, n in [("1 layer", 3, 4, 1, False, 5, 2), ("2 layers bidirectional", 3, 4, 2, True, 4, 2)]:
        torch.manual_seed(10 + layers)
        rnn = cls(i, h, layers, bidirectional=bidir)
        d = 2 if bidir else 1
        x = torch.randn(t, n, i, generator=g, requires_grad=True)
        h0 = torch.randn(layers * d, n, h, generator=g)
        c0 = torch.randn(layers * d, n, h, generator=g)
        y, state = rnn(x, (h0, c0)) if with_cell else rnn(x, h0)
        gy = torch.randn(y.shape, generator=g)
        (y * gy).sum().backward()
        case = {"name": name, "input_size": i, "hidden_size": h, "num_layers": layers, "bidirectional": bidir,
                "x": arr(x), "h0": arr(h0), "params": {k: arr(v) for k, v in rnn.named_parameters()},
                "y": arr(y), "grad_y": arr(gy), "grad_x": arr(x.grad),
                "grads": {k: arr(v.grad) for k, v in rnn.named_parameters()}}
        if with_cell:
            case.update({"c0": arr(c0), "hn": arr(state[0]), "cn": arr(state[1])})
        else:
            case["hn"] = arr(state)
        cases.append(case)
    return cases


def ctc_case(g, name, t, n, c, targets, lengths, reduction, zero_infinity):
    """One F.ctc_loss case (blank 0) through log_softmax, logits drawn from `g`."""
    logits = torch.randn(t, n, c, generator=g, requires_grad=True)
    flat = torch.tensor([v for tg in targets for v in tg])
    loss = F.ctc_loss(logits.log_softmax(2), flat, torch.tensor(lengths), torch.tensor([len(tg) for tg in targets]),
                      blank=0, reduction=reduction, zero_infinity=zero_infinity)
    loss.backward()
    return {"name": name, "logits": arr(logits), "targets": targets, "input_lengths": lengths,
            "target_lengths": [len(tg) for tg in targets], "reduction": reduction,
            "loss": float(loss.detach()), "grad_logits": arr(logits.grad)}


def ctc_cases():
    g = torch.Generator().manual_seed(5)
    return [ctc_case(g, *spec, zero_infinity=False) for spec in [
        ("repeated label, mean", 6, 2, 5, [[1, 2], [3, 3, 1]], [6, 5], "mean"),
        ("three samples, sum", 8, 3, 4, [[1], [2, 3, 2], [1, 1]], [8, 8, 6], "sum"),
    ]]


def lrn_cases():
    g = torch.Generator().manual_seed(7)
    cases = []
    for name, shape, size, alpha, beta, k in [
        ("AlexNet's: size 5, alpha 1e-4, beta 0.75, k 2; 7 channels", (2, 7, 3, 4), 5, 1e-4, 0.75, 2.0),
        ("size 3, alpha 0.5, beta 0.6, k 1 (the window dominates)", (2, 4, 2, 3), 3, 0.5, 0.6, 1.0),
        ("size 5 over 2 channels (the window wider than the channels)", (1, 2, 3, 3), 5, 2.0, 0.75, 1.0),
    ]:
        x = (2 * torch.randn(*shape, generator=g)).requires_grad_()
        y = F.local_response_norm(x, size, alpha=alpha, beta=beta, k=k)
        grad_y = torch.randn(y.shape, generator=g)
        (y * grad_y).sum().backward()
        cases.append({"name": name, "size": size, "alpha": alpha, "beta": beta, "k": k, "x": arr(x), "y": arr(y),
                      "grad_y": arr(grad_y), "grad_x": arr(x.grad)})
    return cases


def ctc_zero_infinity_cases():
    g = torch.Generator().manual_seed(8)
    # Sample 1's target [2, 2, 2] needs 5 frames (a blank between repeats); it has 4.
    targets, lengths = [[1, 3], [2, 2, 2], [3]], [6, 4, 5]
    return [ctc_case(g, name, 6, 3, 4, targets, lengths, reduction, zero_infinity=True)
            for name, reduction in [("one unalignable sample, mean", "mean"), ("one unalignable sample, sum", "sum")]]


def resnet20_step():
    model = ResNetCifar(20, 3, 10)
    assign_param_rule(model.named_parameters(), 0.1)
    model.train()
    shape = (4, 3, 16, 16)
    x = torch.sin(0.1 * torch.arange(math.prod(shape), dtype=torch.float64)).reshape(shape)
    labels = torch.tensor([0, 3, 7, 9])
    logits = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    picked = ["conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer2.0.conv1.weight",
              "layer3.2.bn2.weight", "fc.weight", "fc.bias"]
    return {"param_rule": PARAM_RULE, "param_names": list(params), "param_count": sum(p.numel() for p in params.values()),
            "input_shape": list(shape), "labels": labels.tolist(), "logits": arr(logits), "loss": float(loss.detach()),
            "grads": {k: arr(params[k].grad) for k in picked},
            "running_mean_after": {k: arr(buffers[k + ".running_mean"]) for k in ["bn1", "layer3.2.bn2"]},
            "running_var_after": {k: arr(buffers[k + ".running_var"]) for k in ["bn1", "layer3.2.bn2"]}}


def optim_case(make, hyper):
    g = torch.Generator().manual_seed(6)
    p = torch.randn(3, 4, generator=g, requires_grad=True)
    grads = [torch.randn(3, 4, generator=g) for _ in range(5)]
    case = dict(hyper, param0=arr(p), grads=[arr(x) for x in grads], params_after=[])
    opt = make([p])
    for x in grads:
        p.grad = x.clone()
        opt.step()
        case["params_after"].append(arr(p))
    return case


def write_json(path, obj):
    """Writes one fixture file (JSON and a newline) and says so."""
    with open(path, "w") as f:
        json.dump(obj, f)
        f.write("\n")
    print(f"wrote {os.path.normpath(path)} ({os.path.getsize(path)} bytes)")


def main():
    os.makedirs(OUT, exist_ok=True)
    optim = {
        "sgd": optim_case(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4),
                          {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4}),
        "adam": optim_case(lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4),
                           {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-4}),
    }
    for fname, obj in [("lstm.json", rnn_cases(torch.nn.LSTM, True)), ("gru.json", rnn_cases(torch.nn.GRU, False)),
                       ("ctc.json", ctc_cases()), ("resnet20_step.json", resnet20_step()), ("optim.json", optim),
                       ("lrn.json", lrn_cases()), ("ctc_zero_infinity.json", ctc_zero_infinity_cases())]:
        write_json(os.path.join(OUT, fname), obj)


if __name__ == "__main__":
    main()
