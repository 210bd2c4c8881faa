//! Finite-difference gradient checks (f64) for every layer, with respect to the input and
//! to every parameter: parameters are perturbed in place (`Tensor::assign`), which is
//! exactly what the layer reads on the next forward.

use nn::layers::{
    Activation, AdaptiveAvgPool2d, BatchNorm, Conv2d, Embedding, LayerNorm, Linear,
    LocalResponseNorm, Rnn, RnnKind,
};
use nn::loss::{ctc_loss, CtcReduction};
use nn::{init, Ctx, Module};
use tensor::{no_grad, Conv2dOptions, DType, Device, Result, Rng, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(
        shape.to_vec(),
        0.0,
        1.0,
        DType::F64,
        Device::Cpu,
        &mut Rng::new(seed),
    )
    .unwrap()
}

/// Checks d sum(out ⊙ r) / d(input, params) of `f` against central differences.
fn check(
    name: &str,
    module: &dyn Module,
    input: &Tensor,
    f: impl Fn(&dyn Module, &Tensor) -> Result<Tensor>,
) {
    check_with(name, module, input, &[], f)
}

/// [`check`], also differentiating `extra`: tensors `f` reads that are not the module's
/// own parameters (a weight it shares with another module).
fn check_with(
    name: &str,
    module: &dyn Module,
    input: &Tensor,
    extra: &[(&str, Tensor)],
    f: impl Fn(&dyn Module, &Tensor) -> Result<Tensor>,
) {
    const EPS: f64 = 1e-6;
    let x = input.to_var();
    let out = f(module, &x).unwrap_or_else(|e| panic!("{name}: {e}"));
    let r = randn(out.dims(), 77);
    let loss = out.mul(&r).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let objective = |xin: &Tensor| {
        no_grad(|| {
            f(module, xin)
                .unwrap()
                .mul(&r)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap()
        })
    };
    // Integer or dummy inputs (embedding ids) are not differentiated.
    let mut targets: Vec<(String, Tensor)> = Vec::new();
    if input.dtype() == DType::F64 {
        targets.push(("input".into(), x.clone()));
    }
    for p in module.named_params() {
        targets.push((p.name.clone(), p.tensor.clone()));
    }
    for (pname, t) in extra {
        targets.push((pname.to_string(), t.clone()));
    }
    for (pname, t) in targets {
        let analytic = grads
            .get(&t)
            .map(|g| g.to_vec::<f64>().unwrap())
            .unwrap_or_else(|| vec![0.0; t.elem_count()]);
        let base = t.to_vec::<f64>().unwrap();
        let step = (base.len() / 25).max(1);
        for j in (0..base.len()).step_by(step) {
            let probe = |delta: f64| {
                let mut v = base.clone();
                v[j] += delta;
                let perturbed = Tensor::from_vec(v, t.dims().to_vec(), Device::Cpu).unwrap();
                let value = if pname == "input" {
                    objective(&perturbed)
                } else {
                    t.assign(&perturbed).unwrap();
                    let value = objective(&x);
                    t.assign(
                        &Tensor::from_vec(base.clone(), t.dims().to_vec(), Device::Cpu).unwrap(),
                    )
                    .unwrap();
                    value
                };
                value
            };
            let numeric = (probe(EPS) - probe(-EPS)) / (2.0 * EPS);
            let err = (analytic[j] - numeric).abs() / (1.0 + numeric.abs());
            assert!(
                err < 1e-6,
                "{name}: d/d{pname}[{j}] analytic {} vs numeric {numeric} (rel err {err:e})",
                analytic[j]
            );
        }
    }
}

fn f64_build<M>(f: impl FnOnce(&mut Rng) -> Result<M>) -> M {
    init::with_default_dtype(DType::F64, || f(&mut Rng::new(5))).unwrap()
}

fn fwd(m: &dyn Module, x: &Tensor) -> Result<Tensor> {
    m.forward(x, &mut Ctx::train(0))
}

#[test]
fn linear_conv_and_activations() {
    let lin = f64_build(|r| Linear::new(5, 3, true, r));
    check("linear", &lin, &randn(&[4, 5], 1), fwd);
    check("linear over a sequence", &lin, &randn(&[2, 3, 5], 2), fwd);
    let conv = f64_build(|r| {
        Conv2d::new(
            4,
            6,
            (3, 3),
            Conv2dOptions {
                padding: (1, 1),
                groups: 2,
                ..Default::default()
            },
            true,
            r,
        )
    });
    check(
        "conv2d grouped with bias",
        &conv,
        &randn(&[2, 4, 5, 5], 3),
        fwd,
    );
    for a in [
        Activation::Relu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::Hardtanh {
            min: -0.5,
            max: 0.8,
        },
    ] {
        check(&format!("{a:?}"), &a, &randn(&[3, 4], 4), fwd);
    }
    check(
        "adaptive avg pool",
        &AdaptiveAvgPool2d((2, 2)),
        &randn(&[2, 3, 4, 6], 5),
        fwd,
    );
}

/// Hardtanh's gradient is PyTorch's `hardtanh_backward`: zero where x <= min or x >= max,
/// so exactly at the bounds too (a finite difference there is one-sided and cannot
/// check it). `clamp` itself keeps `torch.clamp`'s inclusive mask.
#[test]
fn hardtanh_gradient_is_zero_at_the_bounds() {
    // In f32, 0.8 rounds; the input and the bound round alike, so 0.8 is still a bound.
    let values = |v: Vec<f64>, dtype| {
        Tensor::from_vec(v.clone(), v.len(), Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    for dtype in [DType::F32, DType::F64] {
        let x = values(vec![-1.0, -0.5, -0.25, 0.0, 0.5, 0.8, 2.0], dtype).to_var();
        let act = Activation::Hardtanh {
            min: -0.5,
            max: 0.8,
        };
        let y = act.forward(&x, &mut Ctx::train(0)).unwrap();
        assert_eq!(
            y.to_vec_f64().unwrap(),
            values(vec![-0.5, -0.5, -0.25, 0.0, 0.5, 0.8, 0.8], dtype)
                .to_vec_f64()
                .unwrap()
        );
        let g = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(
            g.get(&x).unwrap().to_vec_f64().unwrap(),
            [0., 0., 1., 1., 1., 0., 0.],
            "{dtype:?}"
        );
        let g = x
            .clamp(-0.5, 0.8)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(
            g.get(&x).unwrap().to_vec_f64().unwrap(),
            [0., 1., 1., 1., 1., 1., 0.],
            "clamp's mask includes the bounds ({dtype:?})"
        );
    }
    // DeepSpeech's Hardtanh(0, 20) under no_grad is the plain clamp, recording nothing.
    let x = Tensor::from_vec(vec![-3.0f32, 0.0, 25.0], 3, Device::Cpu)
        .unwrap()
        .to_var();
    let act = Activation::Hardtanh {
        min: 0.0,
        max: 20.0,
    };
    let y = no_grad(|| act.forward(&x, &mut Ctx::eval())).unwrap();
    assert!(!y.tracks_grad());
    assert_eq!(y.to_vec::<f32>().unwrap(), [0.0, 0.0, 20.0]);
}

#[test]
fn normalisation_layers() {
    let bn = f64_build(|_| BatchNorm::new(3));
    bn.weight.assign(&randn(&[3], 6)).unwrap();
    check("batch norm train", &bn, &randn(&[4, 3, 3, 3], 7), fwd);
    check("batch norm eval", &bn, &randn(&[4, 3, 3, 3], 8), |m, x| {
        m.forward(x, &mut Ctx::eval())
    });
    check(
        "batch norm 1d over [N, C, L]",
        &bn,
        &randn(&[4, 3, 5], 9),
        fwd,
    );
    let ln = f64_build(|_| LayerNorm::new(&[5]));
    ln.weight.assign(&randn(&[5], 10)).unwrap();
    ln.bias.assign(&randn(&[5], 11)).unwrap();
    check("layer norm", &ln, &randn(&[3, 5], 12), fwd);
    let lrn = LocalResponseNorm {
        size: 5,
        alpha: 0.5,
        beta: 0.75,
        k: 2.0,
    };
    check("local response norm", &lrn, &randn(&[2, 7, 3, 3], 13), fwd);
}

#[test]
fn batch_norm_updates_running_statistics_like_pytorch() {
    // momentum 0.1 and the unbiased variance; checked against hand computation.
    let bn = f64_build(|_| BatchNorm::new(1));
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 6.0], vec![4, 1], Device::Cpu).unwrap();
    bn.forward(&x, &mut Ctx::train(0)).unwrap();
    let (mean, var_unbiased) = (3.0, 14.0 / 3.0);
    assert!((bn.running_mean.to_vec::<f64>().unwrap()[0] - 0.1 * mean).abs() < 1e-12);
    assert!(
        (bn.running_var.to_vec::<f64>().unwrap()[0] - (0.9 + 0.1 * var_unbiased)).abs() < 1e-12
    );
}

#[test]
fn embedding_and_tied_decoder() {
    let emb = f64_build(|r| Embedding::new(7, 4, r));
    let ids = Tensor::from_vec(vec![1u32, 6, 1, 0], vec![2, 2], Device::Cpu).unwrap();
    let ids2 = ids.clone();
    check(
        "embedding",
        &emb,
        &Tensor::zeros(1, DType::F32, Device::Cpu).unwrap(),
        move |m, _| m.forward(&ids2, &mut Ctx::train(0)),
    );
    let dec = f64_build(|r| Linear::tied(emb.weight.clone(), true, r));
    assert_eq!(
        dec.named_params().len(),
        1,
        "a tied decoder lists only its bias"
    );
    let ids3 = ids.clone();
    let weight = emb.weight.clone();
    // The shared table too (not among the decoder's parameters): its gradient sums the
    // lookup's and the decoder's.
    check_with(
        "tied decoder",
        &dec,
        &Tensor::zeros(1, DType::F32, Device::Cpu).unwrap(),
        &[("emb.weight", emb.weight.clone())],
        move |m, _| {
            let h = weight.embedding(&ids3)?;
            m.forward(&h, &mut Ctx::train(0))
        },
    );
}

#[test]
fn lstm_and_gru() {
    for bidirectional in [false, true] {
        for (kind, seed) in [(RnnKind::Lstm, 14), (RnnKind::Gru, 15)] {
            let rnn = f64_build(|r| Rnn::new(kind, 3, 4, 2, bidirectional, 0.0, r));
            let x = randn(&[5, 2, 3], seed);
            check(
                &format!("{kind:?} bidirectional={bidirectional}"),
                &rnn,
                &x,
                fwd,
            );
        }
    }
    // Through the final states, from a non-zero initial state.
    let lstm = f64_build(|r| Rnn::new(RnnKind::Lstm, 3, 4, 1, false, 0.0, r));
    let state = nn::layers::RnnState {
        h: randn(&[1, 2, 4], 16),
        c: Some(randn(&[1, 2, 4], 17)),
    };
    check("lstm final state", &lstm, &randn(&[4, 2, 3], 18), |_, x| {
        let (y, s) = lstm.forward_seq(x, Some(&state), &mut Ctx::train(0))?;
        let c = s.c.ok_or_else(|| tensor::Error::msg("no cell state"))?;
        y.sum(&[0], false)?
            .add(&s.h.squeeze(0)?)?
            .add(&c.squeeze(0)?)
    });
    let gru = f64_build(|r| Rnn::new(RnnKind::Gru, 3, 4, 1, false, 0.0, r));
    let h0 = nn::layers::RnnState {
        h: randn(&[1, 2, 4], 19),
        c: None,
    };
    check(
        "gru from a non-zero state",
        &gru,
        &randn(&[4, 2, 3], 20),
        |_, x| Ok(gru.forward_seq(x, Some(&h0), &mut Ctx::train(0))?.1.h),
    );
}

/// A module without parameters, for checks whose closure does all the work.
struct NoParams;
impl Module for NoParams {
    fn forward(&self, x: &Tensor, _ctx: &mut Ctx) -> Result<Tensor> {
        Ok(x.clone())
    }
    fn params(&self, _prefix: &str, _out: &mut Vec<nn::NamedTensor>) {}
}

#[test]
fn ctc_loss_gradient() {
    // A repeated label (2, 2) needs a blank between its copies; sample 1 uses 5 of 7 frames.
    let targets = vec![vec![1u32, 2, 2], vec![3]];
    for reduction in [
        CtcReduction::Mean,
        CtcReduction::Sum,
        CtcReduction::BatchMean,
    ] {
        check(
            &format!("ctc {reduction:?}"),
            &NoParams,
            &randn(&[7, 2, 4], 21),
            |_, logits| {
                ctc_loss(&logits.log_softmax(2)?, &targets, &[7, 5], reduction, false)?
                    .reshape(vec![1])
            },
        );
        // And directly with respect to the log-probabilities.
        check(
            &format!("ctc {reduction:?} wrt log-probs"),
            &NoParams,
            &randn(&[7, 2, 4], 22),
            |_, lp| ctc_loss(lp, &targets, &[7, 5], reduction, false)?.reshape(vec![1]),
        );
    }
}

#[test]
fn ctc_rejects_bad_input_and_handles_impossible_alignments() {
    let lp = randn(&[3, 1, 4], 23).log_softmax(2).unwrap();
    assert!(ctc_loss(&lp, &[vec![0]], &[3], CtcReduction::Sum, false)
        .unwrap_err()
        .to_string()
        .contains("blank"));
    assert!(ctc_loss(&lp, &[vec![5]], &[3], CtcReduction::Sum, false).is_err());
    assert!(ctc_loss(&lp, &[vec![1]], &[4], CtcReduction::Sum, false).is_err());
    // 1, 1, 1 needs 5 frames (blanks between repeats): infinite loss, or 0 with zero_infinity.
    let inf = ctc_loss(&lp, &[vec![1, 1, 1]], &[3], CtcReduction::Sum, false).unwrap();
    assert!(inf.to_scalar::<f64>().unwrap().is_infinite());
    let zero = ctc_loss(&lp, &[vec![1, 1, 1]], &[3], CtcReduction::Sum, true).unwrap();
    assert_eq!(zero.to_scalar::<f64>().unwrap(), 0.0);
}

#[test]
fn ctc_batch_mean_is_the_sum_over_the_batch_size() {
    let targets = vec![vec![1u32, 2, 2], vec![3]];
    let lp = randn(&[7, 2, 4], 24).log_softmax(2).unwrap();
    let value = |r| {
        ctc_loss(&lp, &targets, &[7, 5], r, false)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    };
    let (sum, batch_mean, mean) = (
        value(CtcReduction::Sum),
        value(CtcReduction::BatchMean),
        value(CtcReduction::Mean),
    );
    assert!(
        (batch_mean - sum / 2.0).abs() < 1e-9 * sum.abs(),
        "{batch_mean} vs {sum} / 2"
    );
    // Mean divides by the target lengths too, so it differs here (lengths 3 and 1).
    assert!((mean - batch_mean).abs() > 1e-3, "{mean} vs {batch_mean}");
}
