//! Golden values from PyTorch (float64) for the ops where conventions matter: grouped and
//! dilated convolution, batch norm in training and evaluation, cross-entropy with
//! `ignore_index`, max pooling's ties (the gradient to the window's first maximum) and
//! padding, average pooling's divisor. Fixtures are produced by `benchmarks/reference/make_tensor_fixtures.py`.

mod common;
use common::assert_close;
use serde_json::Value;
use tensor::{Conv2dOptions, Device, Pool2dOptions, Tensor};

const TOL: f64 = 1e-10;

fn load(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"));
    v.as_array()
        .unwrap_or_else(|| panic!("{path}: expected a list of cases"))
        .clone()
}

fn arr(v: &Value) -> (Vec<usize>, Vec<f64>) {
    let shape = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let data = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_f64().unwrap())
        .collect();
    (shape, data)
}

fn tensor(v: &Value) -> Tensor {
    let (shape, data) = arr(v);
    Tensor::from_vec(data, shape, Device::Cpu).unwrap()
}

fn pair(v: &Value) -> (usize, usize) {
    let a = v.as_array().unwrap();
    (
        a[0].as_u64().unwrap() as usize,
        a[1].as_u64().unwrap() as usize,
    )
}

fn check(name: &str, what: &str, got: &Tensor, want: &Value) {
    let (shape, data) = arr(want);
    assert_eq!(got.dims(), shape.as_slice(), "{name}: {what} shape");
    assert_close(
        &got.to_vec::<f64>().unwrap(),
        &data,
        TOL,
        &format!("{name}: {what}"),
    );
}

#[test]
fn conv2d_matches_pytorch() {
    let cases = load("conv2d.json");
    assert!(cases.len() >= 4);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let (x, w) = (tensor(&c["x"]).to_var(), tensor(&c["w"]).to_var());
        let o = Conv2dOptions {
            stride: pair(&c["stride"]),
            padding: pair(&c["padding"]),
            dilation: pair(&c["dilation"]),
            groups: c["groups"].as_u64().unwrap() as usize,
        };
        let y = x.conv2d(&w, o).unwrap();
        check(name, "y", &y, &c["y"]);
        let g = y.backward_with_grad(&tensor(&c["grad_y"])).unwrap();
        check(name, "grad_x", g.get(&x).unwrap(), &c["grad_x"]);
        check(name, "grad_w", g.get(&w).unwrap(), &c["grad_w"]);
    }
}

#[test]
fn batch_norm_matches_pytorch() {
    let cases = load("batch_norm.json");
    assert!(cases.iter().any(|c| c["training"].as_bool() == Some(true)));
    assert!(cases.iter().any(|c| c["training"].as_bool() == Some(false)));
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let training = c["training"].as_bool().unwrap();
        let eps = c["eps"].as_f64().unwrap();
        let (x, w, b) = (
            tensor(&c["x"]).to_var(),
            tensor(&c["weight"]).to_var(),
            tensor(&c["bias"]).to_var(),
        );
        let (rm, rv) = (tensor(&c["running_mean"]), tensor(&c["running_var"]));
        let out = x
            .batch_norm(&w, &b, if training { None } else { Some((&rm, &rv)) }, eps)
            .unwrap();
        check(name, "y", &out.output, &c["y"]);
        let g = out
            .output
            .backward_with_grad(&tensor(&c["grad_y"]))
            .unwrap();
        check(name, "grad_x", g.get(&x).unwrap(), &c["grad_x"]);
        check(name, "grad_weight", g.get(&w).unwrap(), &c["grad_weight"]);
        check(name, "grad_bias", g.get(&b).unwrap(), &c["grad_bias"]);
        if training {
            // The statistics nn's BatchNorm will fold into its running buffers: PyTorch uses
            // the unbiased batch variance there.
            let m = c["momentum"].as_f64().unwrap();
            let n = out.count as f64;
            let unbiased = out.var.scale(n / (n - 1.0)).unwrap();
            let new_mean = rm
                .scale(1.0 - m)
                .unwrap()
                .add(&out.mean.scale(m).unwrap())
                .unwrap();
            let new_var = rv
                .scale(1.0 - m)
                .unwrap()
                .add(&unbiased.scale(m).unwrap())
                .unwrap();
            check(name, "running_mean", &new_mean, &c["new_running_mean"]);
            check(name, "running_var", &new_var, &c["new_running_var"]);
        }
    }
}

#[test]
fn cross_entropy_matches_pytorch() {
    for c in &load("cross_entropy.json") {
        let name = c["name"].as_str().unwrap();
        let logits = tensor(&c["logits"]).to_var();
        let labels: Vec<u32> = c["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_u64().unwrap() as u32)
            .collect();
        let n = labels.len();
        let labels = Tensor::from_vec(labels, n, Device::Cpu).unwrap();
        let ignore = c["ignore_index"].as_u64().map(|i| i as u32);
        let loss = logits.cross_entropy(&labels, ignore).unwrap();
        let want = c["loss"].as_f64().unwrap();
        let got = loss.to_scalar::<f64>().unwrap();
        assert!(
            (got - want).abs() <= TOL * (1.0 + want.abs()),
            "{name}: loss {got} vs {want}"
        );
        let g = loss.backward().unwrap();
        check(
            name,
            "grad_logits",
            g.get(&logits).unwrap(),
            &c["grad_logits"],
        );
    }
}

#[test]
fn pooling_matches_pytorch_ties_and_padding_included() {
    let cases = load("pool2d.json");
    assert!(cases.len() >= 6);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let x = tensor(&c["x"]).to_var();
        let o = Pool2dOptions {
            kernel: pair(&c["kernel"]),
            stride: pair(&c["stride"]),
            padding: pair(&c["padding"]),
        };
        let y = match c["kind"].as_str().unwrap() {
            "max" => x.max_pool2d(o),
            "avg" => x.avg_pool2d(o),
            other => panic!("{name}: unknown kind {other}"),
        }
        .unwrap();
        check(name, "y", &y, &c["y"]);
        let g = y.backward_with_grad(&tensor(&c["grad_y"])).unwrap();
        check(name, "grad_x", g.get(&x).unwrap(), &c["grad_x"]);
    }
}
