"""Golden values from PyTorch for the tensor crate's tests (crates/tensor/tests/golden.rs).

Computes, in float64 with fixed seeds, conv2d with groups/dilation/stride, batch norm in
training and evaluation (with the running-statistics update), and cross-entropy with and
without ignore_index, forward outputs and gradients, and writes them as JSON lists of
cases into crates/tensor/tests/fixtures/. Every array is {"shape": [...], "data": [...]}
(row-major). Running it again reproduces the files byte for byte.

    pip install torch
    python3 benchmarks/reference/make_tensor_fixtures.py
"""
import json
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "tensor", "tests", "fixtures")
torch.set_default_dtype(torch.float64)


def arr(t):
    t = t.detach().contiguous()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def conv_cases():
    g = torch.Generator().manual_seed(0)
    specs = [
        # name, N, C, H, W, O, kh, kw, stride, padding, dilation, groups
        ("groups 2, dilation 2, padding 2", 2, 4, 8, 8, 6, 3, 3, (1, 1), (2, 2), (2, 2), 2),
        ("groups 4, stride 2, padding 1", 2, 8, 7, 7, 8, 3, 3, (2, 2), (1, 1), (1, 1), 4),
        ("depthwise with channel multiplier, dilation (1,2), stride (2,1)", 2, 4, 7, 9, 8, 3, 3, (2, 1), (1, 2), (1, 2), 4),
        ("plain 5x3 kernel on a 9x7 input", 2, 3, 9, 7, 4, 5, 3, (1, 1), (2, 1), (1, 1), 1),
    ]
    cases = []
    for name, n, c, h, w, o, kh, kw, stride, padding, dilation, groups in specs:
        x = torch.randn(n, c, h, w, generator=g, requires_grad=True)
        wt = torch.randn(o, c // groups, kh, kw, generator=g, requires_grad=True)
        y = F.conv2d(x, wt, None, stride, padding, dilation, groups)
        gy = torch.randn(y.shape, generator=g)
        (y * gy).sum().backward()
        cases.append({
            "name": name, "stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups,
            "x": arr(x), "w": arr(wt), "y": arr(y), "grad_y": arr(gy), "grad_x": arr(x.grad), "grad_w": arr(wt.grad),
        })
    return cases


def batch_norm_cases():
    g = torch.Generator().manual_seed(1)
    specs = [("4-d training", (4, 3, 5, 5), True), ("4-d evaluation", (4, 3, 5, 5), False),
             ("2-d training", (6, 5), True), ("3-d training", (3, 4, 7), True)]
    cases = []
    for name, shape, training in specs:
        c = shape[1]
        x = torch.randn(shape, generator=g, requires_grad=True)
        weight = (torch.rand(c, generator=g) + 0.5).requires_grad_()
        bias = torch.randn(c, generator=g, requires_grad=True)
        running_mean = torch.randn(c, generator=g)
        running_var = torch.rand(c, generator=g) + 0.5
        new_mean, new_var = running_mean.clone(), running_var.clone()
        y = F.batch_norm(x, new_mean, new_var, weight, bias, training, 0.1, 1e-5)
        gy = torch.randn(y.shape, generator=g)
        (y * gy).sum().backward()
        cases.append({
            "name": name, "training": training, "eps": 1e-5, "momentum": 0.1,
            "x": arr(x), "weight": arr(weight), "bias": arr(bias),
            "running_mean": arr(running_mean), "running_var": arr(running_var),
            "y": arr(y), "grad_y": arr(gy), "grad_x": arr(x.grad), "grad_weight": arr(weight.grad), "grad_bias": arr(bias.grad),
            "new_running_mean": arr(new_mean), "new_running_var": arr(new_var),
        })
    return cases


def cross_entropy_cases():
    g = torch.Generator().manual_seed(2)
    specs = [("5x7, no ignore", 5, 7, [3, 0, 6, 2, 2], None, 1.0),
             ("6x4, ignore_index 2", 6, 4, [2, 1, 2, 3, 0, 2], 2, 1.0),
             ("large logits", 4, 5, [4, 0, 1, 3], None, 50.0)]
    cases = []
    for name, n, c, labels, ignore, scale in specs:
        logits = (torch.randn(n, c, generator=g) * scale).requires_grad_()
        loss = F.cross_entropy(logits, torch.tensor(labels), reduction="mean", ignore_index=-100 if ignore is None else ignore)
        loss.backward()
        cases.append({"name": name, "logits": arr(logits), "labels": labels, "ignore_index": ignore,
                      "loss": float(loss.detach()), "grad_logits": arr(logits.grad)})
    return cases


def main():
    os.makedirs(OUT, exist_ok=True)
    for fname, cases in [("conv2d.json", conv_cases()), ("batch_norm.json", batch_norm_cases()),
                         ("cross_entropy.json", cross_entropy_cases())]:
        path = os.path.join(OUT, fname)
        with open(path, "w") as f:
            json.dump(cases, f)
            f.write("\n")
        print(f"wrote {os.path.normpath(path)} ({os.path.getsize(path)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
