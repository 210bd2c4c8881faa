//! Golden values from PyTorch (float64): LSTM and GRU (outputs, final states, gradients
//! of input and every parameter), CTC (loss and gradient through log-softmax; with
//! `zero_infinity` on an unalignable sample), local response normalisation, and a few
//! steps of SGD-Nesterov with weight decay and of Adam. Fixtures are written by
//! `benchmarks/reference/make_nn_fixtures.py`, except `deepspeech_ragged.json` (a
//! training step of DeepSpeech on a ragged batch), written by
//! `benchmarks/reference/make_deepspeech_fixtures.py`.

use nn::layers::{Rnn, RnnKind, RnnState};
use nn::loss::{ctc_loss, CtcReduction};
use nn::optim::{Adam, Optimizer, Sgd};
use nn::{init, Ctx, Module};
use serde_json::Value;
use tensor::{DType, Device, Rng, Tensor};

const TOL: f64 = 1e-10;

fn load(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

fn tensor(v: &Value) -> Tensor {
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    let data: Vec<f64> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_f64().unwrap())
        .collect();
    Tensor::from_vec(data, shape, Device::Cpu).unwrap()
}

fn check(what: &str, got: &Tensor, want: &Value) {
    let w = tensor(want);
    assert_eq!(got.dims(), w.dims(), "{what}: shape");
    let (g, w) = (got.to_vec::<f64>().unwrap(), w.to_vec::<f64>().unwrap());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= TOL * (1.0 + b.abs()),
            "{what}[{i}]: got {a}, want {b}"
        );
    }
}

fn usize_of(v: &Value) -> usize {
    v.as_u64().unwrap() as usize
}

fn rnn_cases(file: &str, lstm: bool) {
    let cases = load(file);
    for c in cases.as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let build = |r: &mut Rng| {
            let (i, h, l, b) = (
                usize_of(&c["input_size"]),
                usize_of(&c["hidden_size"]),
                usize_of(&c["num_layers"]),
                c["bidirectional"].as_bool().unwrap(),
            );
            let kind = if lstm { RnnKind::Lstm } else { RnnKind::Gru };
            Rnn::new(kind, i, h, l, b, 0.0, r)
        };
        let rnn = init::with_default_dtype(DType::F64, || build(&mut Rng::new(0))).unwrap();
        let params = rnn.named_params();
        assert_eq!(
            params.len(),
            c["params"].as_object().unwrap().len(),
            "{name}: parameter count"
        );
        for p in &params {
            let value = c["params"]
                .get(&p.name)
                .unwrap_or_else(|| panic!("{name}: PyTorch has no parameter {}", p.name));
            p.tensor.assign(&tensor(value)).unwrap();
        }
        let x = tensor(&c["x"]).to_var();
        let state = RnnState {
            h: tensor(&c["h0"]),
            c: lstm.then(|| tensor(&c["c0"])),
        };
        let (y, s) = rnn
            .forward_seq(&x, Some(&state), &mut Ctx::train(0))
            .unwrap();
        check(&format!("{name}: y"), &y, &c["y"]);
        check(&format!("{name}: hn"), &s.h, &c["hn"]);
        if lstm {
            check(&format!("{name}: cn"), s.c.as_ref().unwrap(), &c["cn"]);
        }
        let grads = y.backward_with_grad(&tensor(&c["grad_y"])).unwrap();
        check(
            &format!("{name}: grad_x"),
            grads.get(&x).unwrap(),
            &c["grad_x"],
        );
        for p in &params {
            check(
                &format!("{name}: grad {}", p.name),
                grads.get(&p.tensor).unwrap(),
                &c["grads"][&p.name],
            );
        }
    }
}

#[test]
fn lstm_matches_pytorch() {
    rnn_cases("lstm.json", true);
}

#[test]
fn gru_matches_pytorch() {
    rnn_cases("gru.json", false);
}

#[test]
fn ctc_matches_pytorch() {
    ctc_cases("ctc.json", false);
}

/// An unalignable sample (its target needs more frames than it has) contributes 0 to
/// the loss and its gradient, as `zero_infinity=True` does in PyTorch; the others' are
/// as usual (the mean still divides by the whole batch).
#[test]
fn ctc_zero_infinity_matches_pytorch() {
    ctc_cases("ctc_zero_infinity.json", true);
}

/// LocalResponseNorm's output and input gradient against `F.local_response_norm`,
/// AlexNet's configuration and windows reaching past the channels.
#[test]
fn local_response_norm_matches_pytorch() {
    for c in load("lrn.json").as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let lrn = nn::layers::LocalResponseNorm {
            size: usize_of(&c["size"]),
            alpha: c["alpha"].as_f64().unwrap(),
            beta: c["beta"].as_f64().unwrap(),
            k: c["k"].as_f64().unwrap(),
        };
        let x = tensor(&c["x"]).to_var();
        let y = lrn.forward(&x, &mut Ctx::eval()).unwrap();
        check(&format!("{name}: y"), &y, &c["y"]);
        let g = y.backward_with_grad(&tensor(&c["grad_y"])).unwrap();
        check(&format!("{name}: grad_x"), g.get(&x).unwrap(), &c["grad_x"]);
    }
}

/// The cases of a CTC fixture: loss and gradient through log-softmax.
fn ctc_cases(file: &str, zero_infinity: bool) {
    for c in load(file).as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let logits = tensor(&c["logits"]).to_var();
        let targets: Vec<Vec<u32>> = c["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect();
        let lengths: Vec<usize> = c["input_lengths"]
            .as_array()
            .unwrap()
            .iter()
            .map(usize_of)
            .collect();
        let reduction = match c["reduction"].as_str().unwrap() {
            "mean" => CtcReduction::Mean,
            "sum" => CtcReduction::Sum,
            other => panic!("{name}: unknown reduction {other}"),
        };
        let loss = ctc_loss(
            &logits.log_softmax(2).unwrap(),
            &targets,
            &lengths,
            reduction,
            zero_infinity,
        )
        .unwrap();
        let want = c["loss"].as_f64().unwrap();
        let got = loss.to_scalar::<f64>().unwrap();
        assert!(
            (got - want).abs() <= TOL * (1.0 + want.abs()),
            "{name}: loss {got} vs {want}"
        );
        let grads = loss.backward().unwrap();
        check(
            &format!("{name}: grad_logits"),
            grads.get(&logits).unwrap(),
            &c["grad_logits"],
        );
    }
}

fn optimizer_case(c: &Value, mut opt: impl Optimizer, what: &str) {
    let p = tensor(&c["param0"]);
    for (step, (g, want)) in c["grads"]
        .as_array()
        .unwrap()
        .iter()
        .zip(c["params_after"].as_array().unwrap())
        .enumerate()
    {
        opt.update(0, &p, &tensor(g)).unwrap();
        check(&format!("{what} step {step}"), &p, want);
    }
}

#[test]
fn optimizers_match_pytorch() {
    let f = load("optim.json");
    let s = &f["sgd"];
    assert!(s["nesterov"].as_bool().unwrap());
    let sgd = Sgd::new(
        s["lr"].as_f64().unwrap(),
        s["momentum"].as_f64().unwrap(),
        true,
        s["weight_decay"].as_f64().unwrap(),
    )
    .unwrap();
    optimizer_case(s, sgd, "SGD-Nesterov with weight decay");
    let a = &f["adam"];
    let betas = a["betas"].as_array().unwrap();
    let adam = Adam::new(
        a["lr"].as_f64().unwrap(),
        betas[0].as_f64().unwrap(),
        betas[1].as_f64().unwrap(),
        a["eps"].as_f64().unwrap(),
        a["weight_decay"].as_f64().unwrap(),
    );
    optimizer_case(a, adam, "Adam with weight decay");
}

#[test]
fn a_resnet20_training_step_matches_pytorch() {
    let f = load("resnet20_step.json");
    let model = init::with_default_dtype(DType::F64, || {
        nn::models::resnet_cifar(20, 3, 10, &mut Rng::new(0))
    })
    .unwrap();
    let params = model.named_params();
    assert_eq!(model.param_count(), usize_of(&f["param_count"]));
    // The fixture's deterministic parameters (its "param_rule").
    assign_param_rule(&params, &f["param_names"], 0.1, "resnet20");
    let shape: Vec<usize> = f["input_shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(usize_of)
        .collect();
    let n: usize = shape.iter().product();
    let x = Tensor::from_vec(
        (0..n).map(|j| (0.1 * j as f64).sin()).collect::<Vec<_>>(),
        shape,
        Device::Cpu,
    )
    .unwrap();
    let labels: Vec<u32> = f["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_u64().unwrap() as u32)
        .collect();
    let labels = Tensor::from_vec(labels, 4, Device::Cpu).unwrap();
    let logits = model.forward(&x, &mut Ctx::train(0)).unwrap();
    check("logits", &logits, &f["logits"]);
    let loss = logits.cross_entropy(&labels, None).unwrap();
    let want = f["loss"].as_f64().unwrap();
    assert!((loss.to_scalar::<f64>().unwrap() - want).abs() < 1e-10 * (1.0 + want.abs()));
    let grads = loss.backward().unwrap();
    for (name, want) in f["grads"].as_object().unwrap() {
        let p = params
            .iter()
            .find(|p| &p.name == name)
            .unwrap_or_else(|| panic!("no parameter {name}"));
        check(&format!("grad {name}"), grads.get(&p.tensor).unwrap(), want);
    }
    let buffers = model.named_buffers();
    for (stat, key) in [
        ("running_mean", "running_mean_after"),
        ("running_var", "running_var_after"),
    ] {
        for (layer, want) in f[key].as_object().unwrap() {
            let name = format!("{layer}.{stat}");
            let b = buffers
                .iter()
                .find(|b| b.name == name)
                .unwrap_or_else(|| panic!("no buffer {name}"));
            check(&name, &b.tensor, want);
        }
    }
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(usize_of).collect()
}

/// Worst relative error of `got` against a fixture entry: the whole tensor
/// (`|a − b| / (1 + |b|)` per element) or, for a large one, its summary (every
/// `stride`-th element the same way; the sum, the absolute sum and the sum weighted by
/// sin(0.37 j + 0.1) relative to 1 + the reference's absolute sum).
fn summary_error(got: &Tensor, want: &Value) -> f64 {
    let shape = usizes(&want["shape"]);
    assert_eq!(got.dims(), &shape[..], "shape");
    let g = got.to_vec::<f64>().unwrap();
    let rel = |a: f64, b: f64, scale: f64| (a - b).abs() / (1.0 + scale);
    if want.get("data").is_some() {
        let w = tensor(want).to_vec::<f64>().unwrap();
        return g
            .iter()
            .zip(&w)
            .map(|(a, b)| rel(*a, *b, b.abs()))
            .fold(0.0, f64::max);
    }
    let stride = usize_of(&want["stride"]);
    let sample = want["sample"].as_array().unwrap();
    assert_eq!(sample.len(), g.len().div_ceil(stride), "sample length");
    let mut worst = g
        .iter()
        .step_by(stride)
        .zip(sample)
        .map(|(a, b)| {
            let b = b.as_f64().unwrap();
            rel(*a, b, b.abs())
        })
        .fold(0.0, f64::max);
    let abs_sum = want["abs_sum"].as_f64().unwrap();
    let wsum: f64 = g
        .iter()
        .enumerate()
        .map(|(j, v)| v * (0.37 * j as f64 + 0.1).sin())
        .sum();
    for (got, key) in [
        (g.iter().sum::<f64>(), "sum"),
        (g.iter().map(|v| v.abs()).sum(), "abs_sum"),
        (wsum, "wsum"),
    ] {
        worst = worst.max(rel(got, want[key].as_f64().unwrap(), abs_sum));
    }
    worst
}

/// DeepSpeech in training mode on a batch of 10-, 7- and 4-frame spectrograms padded to
/// 10, against deepspeech.pytorch (MaskConv after every convolution-stack module, packed
/// sequences whose padded outputs are zeros): the logits on each sample's valid frames,
/// the CTC loss, the gradients of the input and of every parameter, and every batch
/// norm's running statistics after the step, for GRU and LSTM layers. Before padded
/// frames were masked after the convolutions and after each recurrent layer, the batch
/// norms' statistics saw the padding and the logits on valid frames differed by up to
/// 28 % (GRU) and 59 % (LSTM) here.
#[test]
fn deepspeech_training_on_a_ragged_batch_matches_deepspeech_pytorch() {
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for c in load("deepspeech_ragged.json").as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let kind = match c["rnn"].as_str().unwrap() {
            "gru" => RnnKind::Gru,
            "lstm" => RnnKind::Lstm,
            other => panic!("{name}: unknown recurrent layer {other}"),
        };
        let model = init::with_default_dtype(DType::F64, || {
            nn::models::deepspeech(
                kind,
                usize_of(&c["layers"]),
                usize_of(&c["hidden"]),
                usize_of(&c["classes"]),
                &mut Rng::new(0),
            )
        })
        .unwrap();
        let params = model.named_params();
        // The fixture's "param_rule".
        assign_param_rule(&params, &c["param_names"], 0.2, name);
        // The fixture's "input_rule": sin(0.7 j), zero past each sample's length.
        let shape = usizes(&c["input_shape"]);
        let lengths = usizes(&c["lengths"]);
        let frames = shape[3];
        let per_sample: usize = shape[1..].iter().product();
        let values: Vec<f64> = (0..shape.iter().product::<usize>())
            .map(|j| {
                let (b, t) = (j / per_sample, j % frames);
                if t < lengths[b] {
                    (0.7 * j as f64).sin()
                } else {
                    0.0
                }
            })
            .collect();
        let x = Tensor::from_vec(values, shape, Device::Cpu)
            .unwrap()
            .to_var();
        let logits = model
            .forward_lengths(&x, &lengths, &mut Ctx::train(0))
            .unwrap();
        let mut record = |what: String, err: f64| {
            report.push(format!("{name}: {what}: {err:.3e}"));
            // A NaN error fails too.
            if err.is_nan() || err > TOL {
                failures.push(format!("{name}: {what}: relative error {err:e}"));
            }
        };
        // Logits on the valid frames only.
        let out_lengths = usizes(&c["output_lengths"]);
        let want = tensor(&c["logits"]);
        assert_eq!(logits.dims(), want.dims(), "{name}: logits shape");
        let (n, classes) = (logits.dims()[1], logits.dims()[2]);
        let (g, w) = (
            logits.to_vec::<f64>().unwrap(),
            want.to_vec::<f64>().unwrap(),
        );
        let mut worst = 0.0f64;
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            let (t, s) = (i / (n * classes), i / classes % n);
            if t < out_lengths[s] {
                worst = worst.max((a - b).abs() / (1.0 + b.abs()));
            }
        }
        record("logits on valid frames".into(), worst);
        let targets: Vec<Vec<u32>> = c["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| usizes(t).into_iter().map(|v| v as u32).collect())
            .collect();
        let loss = ctc_loss(
            &logits.log_softmax(2).unwrap(),
            &targets,
            &out_lengths,
            CtcReduction::Sum,
            false,
        )
        .unwrap();
        let want = c["loss"].as_f64().unwrap();
        let got = loss.to_scalar::<f64>().unwrap();
        record("CTC loss".into(), (got - want).abs() / (1.0 + want.abs()));
        let grads = loss.backward().unwrap();
        record(
            "grad input".into(),
            summary_error(grads.get(&x).unwrap(), &c["grad_x"]),
        );
        for p in &params {
            record(
                format!("grad {}", p.name),
                summary_error(grads.get(&p.tensor).unwrap(), &c["grads"][&p.name]),
            );
        }
        let buffers = model.named_buffers();
        assert_eq!(
            buffers.len(),
            c["buffers_after"].as_object().unwrap().len(),
            "{name}: buffer count"
        );
        for b in &buffers {
            let want = c["buffers_after"]
                .get(&b.name)
                .unwrap_or_else(|| panic!("{name}: deepspeech.pytorch has no buffer {}", b.name));
            record(b.name.clone(), summary_error(&b.tensor, want));
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "{} of {} comparisons beyond {TOL:e}:\n{}",
        failures.len(),
        report.len(),
        failures.join("\n")
    );
}

/// The fixtures' deterministic parameters (their "param_rule"), once `params` are found
/// to be the fixture's `names` in its order (the rule indexes them by position):
/// parameter p's element j is b = sin(1.3 j + 0.7 p), as b / √fan_in for a matrix or
/// convolution kernel, as 1 + `spread`·b for a vector weight (a norm's scale) and as
/// `spread`·b for a bias.
fn assign_param_rule(params: &[nn::NamedTensor], names: &Value, spread: f64, what: &str) {
    let names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(
        params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        names,
        "{what}: parameter names and order differ from the PyTorch fixture's"
    );
    for (p, param) in params.iter().enumerate() {
        let t = &param.tensor;
        let fan_in: usize = t.dims()[1..].iter().product();
        let values: Vec<f64> = (0..t.elem_count())
            .map(|j| {
                let base = (1.3 * j as f64 + 0.7 * p as f64).sin();
                match (param.name.ends_with(".weight"), t.rank()) {
                    (_, r) if r >= 2 => base / (fan_in as f64).sqrt(),
                    (true, _) => 1.0 + spread * base,
                    _ => spread * base,
                }
            })
            .collect();
        t.assign(&Tensor::from_vec(values, t.dims().to_vec(), Device::Cpu).unwrap())
            .unwrap();
    }
}
