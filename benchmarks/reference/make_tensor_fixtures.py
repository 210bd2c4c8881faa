"""Golden values from PyTorch for the tensor crate's tests (crates/tensor/tests/golden.rs).

Everything is computed in float64 on the CPU from fixed seeds (torch.manual_seed), on one
thread, and written into crates/tensor/tests/fixtures/ (resolved relative to this script):

  conv2d.json          F.conv2d with groups / dilation / stride / padding (batch 2): the
                       output and the gradients of x and w for loss = sum(y * grad_y)
  batch_norm.json      F.batch_norm in training and evaluation mode (2-d, 3-d, 4-d inputs):
                       the output, the gradients of x, weight and bias for
                       loss = sum(y * grad_y), and the running statistics before and after
  cross_entropy.json   F.cross_entropy (mean reduction, optional ignore_index, two cases
                       with large logits, one of them offset by +1000 so that a naive exp
                       overflows float64): the loss and d loss / d logits
  pool2d.json          F.max_pool2d and F.avg_pool2d (count_include_pad=True) with
                       overlapping windows, padding and stride: the output and the
                       gradient of x for loss = sum(y * grad_y). Max pooling's inputs are
                       small integers, so windows hold ties: the gradient goes to the first
                       maximum in the window's row-major order, as PyTorch's CPU kernel.

Each file is a JSON list of cases. Every array is {"shape": [...], "data": [...]} with the
data flattened in row-major order. Running the script again reproduces the files byte for
byte with the PyTorch that wrote them; PyTorch 2.15 (which wrote pool2d.json) moves the
last bits of conv2d.json and cross_entropy.json, by at most 2e-12 relative, well inside
the tests' 1e-10, so those were left as they were.

    pip install torch
    python3 benchmarks/reference/make_tensor_fixtures.py
"""
import json
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "crates", "tensor", "tests", "fixtures"))

torch.set_default_dtype(torch.float64)
# One thread: the reduction order (hence the last bits) does not depend on the machine's cores.
torch.set_num_threads(1)


def as_array(t):
    """A tensor as {"shape": [...], "data": [row-major Python floats]}."""
    t = t.detach().to(torch.float64).contiguous()
    return {"shape": [int(d) for d in t.shape], "data": [float(v) for v in t.reshape(-1).tolist()]}


def conv2d_cases():
    torch.manual_seed(0)
    # (name, N, C, H, W, O, kh, kw, stride, padding, dilation, groups)
    specs = [
        ("groups 2, dilation 2, padding 2, stride 1, 3x3",
         2, 4, 6, 6, 4, 3, 3, (1, 1), (2, 2), (2, 2), 2),
        ("groups 4, stride 2, padding 1, 3x3",
         2, 8, 5, 5, 8, 3, 3, (2, 2), (1, 1), (1, 1), 4),
        ("depthwise (groups=C=4, O=8), dilation (1,2), padding (1,2), stride (2,1), 3x3",
         2, 4, 6, 7, 8, 3, 3, (2, 1), (1, 2), (1, 2), 4),
        ("plain groups 1, 5x3 kernel, padding (2,1), 9x7 input",
         2, 2, 9, 7, 3, 5, 3, (1, 1), (2, 1), (1, 1), 1),
    ]
    cases = []
    for name, n, c, h, w, o, kh, kw, stride, padding, dilation, groups in specs:
        x = torch.randn(n, c, h, w).requires_grad_()
        weight = torch.randn(o, c // groups, kh, kw).requires_grad_()
        y = F.conv2d(x, weight, None, stride, padding, dilation, groups)
        grad_y = torch.randn(y.shape)
        (y * grad_y).sum().backward()
        cases.append({
            "name": name,
            "stride": list(stride),
            "padding": list(padding),
            "dilation": list(dilation),
            "groups": groups,
            "x": as_array(x),
            "w": as_array(weight),
            "y": as_array(y),
            "grad_y": as_array(grad_y),
            "grad_x": as_array(x.grad),
            "grad_w": as_array(weight.grad),
        })
    return cases


def batch_norm_cases():
    torch.manual_seed(1)
    eps, momentum = 1e-5, 0.1
    specs = [
        ("4-d training (N=4, C=3, 5x5)", (4, 3, 5, 5), True),
        ("4-d evaluation (N=4, C=3, 5x5)", (4, 3, 5, 5), False),
        ("2-d training (N=6, C=5)", (6, 5), True),
        ("3-d training (N=3, C=4, L=7)", (3, 4, 7), True),
    ]
    cases = []
    for name, shape, training in specs:
        c = shape[1]
        x = (torch.randn(shape) * 1.5 + 0.3).requires_grad_()
        weight = (torch.rand(c) + 0.5).requires_grad_()
        bias = torch.randn(c).requires_grad_()
        running_mean = torch.randn(c)
        running_var = torch.rand(c) + 0.5
        new_mean, new_var = running_mean.clone(), running_var.clone()
        y = F.batch_norm(x, new_mean, new_var, weight, bias, training, momentum, eps)
        grad_y = torch.randn(y.shape)
        (y * grad_y).sum().backward()
        if not training:
            assert torch.equal(new_mean, running_mean) and torch.equal(new_var, running_var)
        cases.append({
            "name": name,
            "training": training,
            "eps": eps,
            "momentum": momentum,
            "x": as_array(x),
            "weight": as_array(weight),
            "bias": as_array(bias),
            "running_mean": as_array(running_mean),
            "running_var": as_array(running_var),
            "y": as_array(y),
            "grad_y": as_array(grad_y),
            "grad_x": as_array(x.grad),
            "grad_weight": as_array(weight.grad),
            "grad_bias": as_array(bias.grad),
            "new_running_mean": as_array(new_mean),
            "new_running_var": as_array(new_var),
        })
    return cases


def cross_entropy_cases():
    torch.manual_seed(2)
    # (name, N, C, labels or None, ignore_index or None, logit scale, logit offset)
    # labels None: label i is (argmax of row i + i) mod C, so row 0 is labelled with its
    # largest logit and every other row with a smaller one (large loss, saturated softmax).
    specs = [
        ("N=5, C=7, no ignore_index", 5, 7, [3, 0, 6, 2, 5], None, 1.0, 0.0),
        ("N=6, C=4, ignore_index 2 (three labels ignored)", 6, 4, [2, 1, 2, 3, 0, 2], 2, 1.0, 0.0),
        ("N=4, C=5, large logits (scale 50)", 4, 5, None, None, 50.0, 0.0),
        ("N=3, C=6, large logits (scale 50, offset +1000: exp overflows without max-subtraction)",
         3, 6, None, None, 50.0, 1000.0),
    ]
    cases = []
    for name, n, c, labels, ignore_index, scale, offset in specs:
        logits = (torch.randn(n, c) * scale + offset).requires_grad_()
        if labels is None:
            labels = [(int(i) + row) % c for row, i in enumerate(logits.detach().argmax(dim=1).tolist())]
        loss = F.cross_entropy(logits, torch.tensor(labels, dtype=torch.long), reduction="mean",
                               ignore_index=-100 if ignore_index is None else ignore_index)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
        cases.append({
            "name": name,
            "logits": as_array(logits),
            "labels": labels,
            "ignore_index": ignore_index,
            "loss": float(loss.detach()),
            "grad_logits": as_array(logits.grad),
        })
    return cases


def pool2d_cases():
    torch.manual_seed(3)
    # (name, kind, N, C, H, W, kernel, stride, padding)
    specs = [
        ("max 3x3 stride 2 (AlexNet's overlapping pool), ties", "max", 2, 3, 7, 7, (3, 3), (2, 2), (0, 0)),
        ("max 3x3 stride 2 padding 1, ties", "max", 2, 2, 6, 5, (3, 3), (2, 2), (1, 1)),
        ("max 2x3 stride (1, 2) padding (1, 1), ties", "max", 1, 2, 5, 6, (2, 3), (1, 2), (1, 1)),
        ("max 2x2 stride 2, distinct values", "max", 2, 2, 4, 6, (2, 2), (2, 2), (0, 0)),
        ("avg 3x3 stride 2 padding 1 (padding counts)", "avg", 2, 2, 6, 5, (3, 3), (2, 2), (1, 1)),
        ("avg 5x1 stride 1 padding (2, 0) (LRN's channel window)", "avg", 2, 1, 7, 4, (5, 1), (1, 1), (2, 0)),
    ]
    cases = []
    for name, kind, n, c, h, w, kernel, stride, padding in specs:
        if kind == "max" and "ties" in name:
            x = torch.randint(-2, 3, (n, c, h, w)).to(torch.float64)
        else:
            x = torch.randn(n, c, h, w)
        x.requires_grad_()
        if kind == "max":
            y = F.max_pool2d(x, kernel, stride, padding)
        else:
            y = F.avg_pool2d(x, kernel, stride, padding, count_include_pad=True)
        grad_y = torch.randn(y.shape)
        (y * grad_y).sum().backward()
        cases.append({"name": name, "kind": kind, "kernel": list(kernel), "stride": list(stride),
                      "padding": list(padding), "x": as_array(x), "y": as_array(y),
                      "grad_y": as_array(grad_y), "grad_x": as_array(x.grad)})
    return cases


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for file_name, make in [("conv2d.json", conv2d_cases),
                            ("batch_norm.json", batch_norm_cases),
                            ("cross_entropy.json", cross_entropy_cases),
                            ("pool2d.json", pool2d_cases)]:
        cases = make()
        path = os.path.join(OUT_DIR, file_name)
        with open(path, "w") as f:
            json.dump(cases, f, indent=None)
            f.write("\n")
        print(f"wrote {path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
