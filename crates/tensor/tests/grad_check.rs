//! Finite-difference gradient checks (f64) for every differentiable op.

// `&[x.clone()]` is an op's input list; `slice::from_ref` would hide that at every call.
#![allow(clippy::cloned_ref_to_slice_refs)]

mod common;
use common::{check_grad, randn, uniform};
use tensor::{Conv2dOptions, DType, Device, Pool2dOptions, Rng, Tensor};

#[test]
fn unary_ops() {
    let x = randn(&[3, 4], 1);
    let pos = uniform(&[3, 4], 0.2, 2.0, 2);
    check_grad("neg", &[x.clone()], |v| v[0].neg());
    check_grad("abs", &[x.clone()], |v| v[0].abs());
    check_grad("exp", &[x.clone()], |v| v[0].exp());
    check_grad("tanh", &[x.clone()], |v| v[0].tanh());
    check_grad("sigmoid", &[x.clone()], |v| v[0].sigmoid());
    check_grad("relu", &[x.clone()], |v| v[0].relu());
    check_grad("sqr", &[x.clone()], |v| v[0].sqr());
    check_grad("affine", &[x.clone()], |v| v[0].affine(-2.5, 0.75));
    check_grad("clamp", &[x.clone()], |v| v[0].clamp(-0.5, 0.7));
    check_grad("sqrt", &[pos.clone()], |v| v[0].sqrt());
    check_grad("log", &[pos.clone()], |v| v[0].log());
    check_grad("recip", &[pos.clone()], |v| v[0].recip());
    check_grad("powf", &[pos], |v| v[0].powf(1.7));
}

#[test]
fn binary_ops_with_broadcasting() {
    let a = randn(&[2, 3, 4], 3);
    let row = randn(&[4], 4);
    let col = randn(&[2, 1, 4], 5);
    let den = uniform(&[3, 1], 0.5, 2.0, 6);
    check_grad("add", &[a.clone(), row.clone()], |v| v[0].add(&v[1]));
    check_grad("sub", &[a.clone(), col.clone()], |v| v[0].sub(&v[1]));
    check_grad("mul", &[a.clone(), col.clone()], |v| v[0].mul(&v[1]));
    check_grad("div", &[a.clone(), den], |v| v[0].div(&v[1]));
    check_grad("maximum", &[a.clone(), row.clone()], |v| {
        v[0].maximum(&v[1])
    });
    check_grad("minimum", &[a.clone(), row.clone()], |v| {
        v[0].minimum(&v[1])
    });
    // The same tensor on both sides: two edges into one variable.
    check_grad("x*x", &[a.clone()], |v| v[0].mul(&v[0]));
    check_grad("where", &[a.clone(), row], |v| {
        let cond = v[0].gt(&Tensor::zeros((), DType::F64, Device::Cpu)?)?;
        cond.where_cond(&v[0], &v[1])
    });
}

#[test]
fn reductions() {
    let x = randn(&[3, 4, 5], 7);
    check_grad("sum(1)", &[x.clone()], |v| v[0].sum(&[1], false));
    check_grad("sum(0,2) keepdim", &[x.clone()], |v| {
        v[0].sum(&[0, 2], true)
    });
    check_grad("sum_all", &[x.clone()], |v| v[0].sum_all());
    check_grad("mean(2)", &[x.clone()], |v| v[0].mean(&[2], false));
    check_grad("mean_all", &[x.clone()], |v| v[0].mean_all());
    check_grad("max(1)", &[x.clone()], |v| v[0].max(&[1], false));
    check_grad("min(0,2)", &[x.clone()], |v| v[0].min(&[0, 2], true));
    // Non-adjacent axes take the general reduction path.
    check_grad("sum(0,2) on a transposed view", &[x], |v| {
        v[0].transpose(0, 1)?.sum(&[0, 2], false)
    });
}

#[test]
fn matmul_variants() {
    let a = randn(&[4, 5], 8);
    let b = randn(&[5, 3], 9);
    check_grad("matmul 2d", &[a.clone(), b.clone()], |v| v[0].matmul(&v[1]));
    check_grad(
        "matmul with transposed views",
        &[a.clone(), b.clone()],
        |v| v[1].transpose_last()?.matmul(&v[0].transpose_last()?),
    );
    let ba = randn(&[2, 4, 5], 10);
    let bb = randn(&[2, 5, 3], 11);
    check_grad("batched matmul", &[ba.clone(), bb], |v| v[0].matmul(&v[1]));
    check_grad("matmul with shared rhs", &[ba, b], |v| v[0].matmul(&v[1]));
    let b4a = randn(&[2, 2, 3, 4], 12);
    let b4b = randn(&[2, 2, 4, 2], 13);
    check_grad("rank-4 matmul", &[b4a, b4b], |v| v[0].matmul(&v[1]));
}

#[test]
fn views_and_shape_ops() {
    let x = randn(&[2, 3, 4], 14);
    let y = randn(&[2, 2, 4], 15);
    check_grad("reshape", &[x.clone()], |v| v[0].reshape(vec![6, 4]));
    check_grad("permute", &[x.clone()], |v| v[0].permute(&[2, 0, 1]));
    check_grad("narrow", &[x.clone()], |v| v[0].narrow(1, 1, 2));
    check_grad("broadcast_as", &[randn(&[3, 1], 16)], |v| {
        v[0].broadcast_as(vec![2, 3, 5])
    });
    check_grad("contiguous of transpose", &[x.clone()], |v| {
        v[0].transpose(0, 2)?.contiguous()
    });
    check_grad("cat", &[x.clone(), y.clone()], |v| {
        Tensor::cat(&[v[0].clone(), v[1].clone()], 1)
    });
    check_grad("stack", &[x.clone(), x.clone()], |v| {
        Tensor::stack(&[v[0].clone(), v[1].sqr()?], 0)
    });
    check_grad("split", &[x.clone()], |v| {
        let parts = v[0].split(&[1, 3], 2)?;
        parts[0].mul(&parts[1].sum(&[2], true)?)
    });
    check_grad("reshape of a non-contiguous view", &[x], |v| {
        v[0].transpose(1, 2)?.reshape(vec![2, 12])
    });
}

#[test]
fn convolution() {
    let cases = [
        ("plain 3x3 pad 1", 1, (1, 1), (1, 1), (1, 1), (3, 3)),
        ("groups 2 dilation 2", 2, (1, 1), (2, 2), (2, 2), (3, 3)),
        (
            "stride 2 non-square kernel",
            1,
            (2, 2),
            (1, 0),
            (1, 1),
            (3, 2),
        ),
        ("depthwise", 4, (1, 2), (1, 1), (1, 1), (3, 3)),
        ("1x1", 1, (1, 1), (0, 0), (1, 1), (1, 1)),
    ];
    for (name, groups, stride, padding, dilation, (kh, kw)) in cases {
        let x = randn(&[2, 4, 7, 6], 17);
        let w = randn(&[8, 4 / groups, kh, kw], 18);
        let o = Conv2dOptions {
            stride,
            padding,
            dilation,
            groups,
        };
        check_grad(name, &[x, w], |v| v[0].conv2d(&v[1], o));
    }
}

#[test]
fn pooling() {
    let x = randn(&[2, 3, 6, 7], 19);
    check_grad("max_pool 2x2", &[x.clone()], |v| {
        v[0].max_pool2d(Pool2dOptions::square(2))
    });
    let o = Pool2dOptions {
        kernel: (3, 3),
        stride: (2, 2),
        padding: (1, 1),
    };
    check_grad("max_pool 3x3 s2 p1", &[x.clone()], |v| v[0].max_pool2d(o));
    check_grad("avg_pool 3x3 s2 p1", &[x.clone()], |v| v[0].avg_pool2d(o));
    check_grad("avg_pool 2x2", &[x], |v| {
        v[0].avg_pool2d(Pool2dOptions::square(2))
    });
}

#[test]
fn batch_norm_train_and_eval() {
    let x = randn(&[4, 3, 5, 5], 20);
    let w = uniform(&[3], 0.5, 1.5, 21);
    let b = randn(&[3], 22);
    check_grad(
        "batch_norm train 4d",
        &[x.clone(), w.clone(), b.clone()],
        |v| Ok(v[0].batch_norm(&v[1], &v[2], None, 1e-5)?.output),
    );
    let rm = randn(&[3], 23);
    let rv = uniform(&[3], 0.5, 2.0, 24);
    check_grad("batch_norm eval", &[x, w, b], |v| {
        Ok(v[0]
            .batch_norm(&v[1], &v[2], Some((&rm, &rv)), 1e-5)?
            .output)
    });
    let x2 = randn(&[6, 5], 25);
    check_grad(
        "batch_norm train 2d",
        &[x2, uniform(&[5], 0.5, 1.5, 26), randn(&[5], 27)],
        |v| Ok(v[0].batch_norm(&v[1], &v[2], None, 1e-5)?.output),
    );
}

#[test]
fn softmax_and_cross_entropy() {
    let x = randn(&[3, 5], 28);
    check_grad("softmax last", &[x.clone()], |v| v[0].softmax(1));
    check_grad("log_softmax last", &[x.clone()], |v| v[0].log_softmax(1));
    check_grad("softmax dim 0", &[randn(&[4, 3, 2], 29)], |v| {
        v[0].softmax(0)
    });
    let labels = Tensor::from_vec(vec![1u32, 4, 0], 3, Device::Cpu).unwrap();
    check_grad("cross_entropy", &[x.clone()], |v| {
        v[0].cross_entropy(&labels, None)
    });
    let ignoring = Tensor::from_vec(vec![1u32, 2, 2], 3, Device::Cpu).unwrap();
    check_grad("cross_entropy ignore_index", &[x], |v| {
        v[0].cross_entropy(&ignoring, Some(2))
    });
}

#[test]
fn indexing_and_embedding() {
    let table = randn(&[6, 4], 30);
    let ids = Tensor::from_vec(vec![3u32, 0, 3, 5], 4, Device::Cpu).unwrap();
    check_grad("index_select dim 0 with repeats", &[table.clone()], |v| {
        v[0].index_select(&ids, 0)
    });
    check_grad("index_select dim 1", &[randn(&[2, 6, 3], 31)], |v| {
        v[0].index_select(&ids, 1)
    });
    let ids2 = Tensor::from_vec(vec![1u32, 2, 1, 0, 5, 5], vec![2, 3], Device::Cpu).unwrap();
    check_grad("embedding", &[table], |v| v[0].embedding(&ids2));
}

#[test]
fn dropout_with_a_fixed_mask() {
    let x = randn(&[5, 6], 32);
    check_grad("dropout", &[x], |v| v[0].dropout(0.3, &mut Rng::new(5)));
}

#[test]
fn dtype_conversion_passes_gradients() {
    // A finite difference through f32 is dominated by f32 rounding, so compare with the
    // analytic gradient of sum(x²), 2x, to f32 precision instead.
    let x = randn(&[3, 3], 33).to_var();
    let y = x
        .to_dtype(DType::F32)
        .unwrap()
        .sqr()
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .sum_all()
        .unwrap();
    let g = y.backward().unwrap();
    let got = g.get(&x).unwrap();
    assert_eq!(got.dtype(), DType::F64);
    let want: Vec<f64> = x.to_vec::<f64>().unwrap().iter().map(|v| 2.0 * v).collect();
    common::assert_close(
        &got.to_vec::<f64>().unwrap(),
        &want,
        1e-6,
        "d sum(x^2) through f32",
    );
}

#[test]
fn a_small_network_end_to_end() {
    // conv -> batch norm -> relu -> pool -> linear -> cross-entropy, all parameters at once.
    let x = randn(&[2, 3, 6, 6], 34);
    let w = randn(&[4, 3, 3, 3], 35).affine(0.3, 0.0).unwrap();
    let gamma = uniform(&[4], 0.5, 1.5, 36);
    let beta = randn(&[4], 37);
    let fc = randn(&[36, 5], 38).affine(0.2, 0.0).unwrap();
    let labels = Tensor::from_vec(vec![4u32, 1], 2, Device::Cpu).unwrap();
    check_grad("network", &[x, w, gamma, beta, fc], |v| {
        let h = v[0].conv2d(
            &v[1],
            Conv2dOptions {
                padding: (1, 1),
                ..Default::default()
            },
        )?;
        let h = h.batch_norm(&v[2], &v[3], None, 1e-5)?.output.relu()?;
        let h = h.max_pool2d(Pool2dOptions::square(2))?.flatten_from(1)?;
        let logits = h.matmul(&v[4])?;
        logits.cross_entropy(&labels, None)?.reshape(vec![1])
    });
}

/// The fused LSTM/GRU cells: finite differences, and the same values as the composed
/// formulas (PyTorch's gate order) they replace.
#[test]
fn fused_rnn_cells() {
    let (n, h) = (3, 5);
    let gates = randn(&[n, 4 * h], 40);
    let c_prev = randn(&[n, h], 41);
    check_grad("lstm_cell", &[gates.clone(), c_prev.clone()], |v| {
        Tensor::lstm_cell(&v[0], &v[1])
    });
    // A non-contiguous gate input (a transposed view) goes through the same op.
    let gates_t = randn(&[4 * h, n], 42);
    check_grad(
        "lstm_cell on a transposed view",
        &[gates_t, c_prev.clone()],
        |v| Tensor::lstm_cell(&v[0].transpose_last()?, &v[1]),
    );
    let (gx, gh, h_prev) = (
        randn(&[n, 3 * h], 43),
        randn(&[n, 3 * h], 44),
        randn(&[n, h], 45),
    );
    check_grad("gru_cell", &[gx.clone(), gh.clone(), h_prev.clone()], |v| {
        Tensor::gru_cell(&v[0], &v[1], &v[2])
    });

    let hc = Tensor::lstm_cell(&gates, &c_prev).unwrap();
    let g = gates.chunk(4, 1).unwrap();
    let (i, f, gg, o) = (
        g[0].sigmoid().unwrap(),
        g[1].sigmoid().unwrap(),
        g[2].tanh().unwrap(),
        g[3].sigmoid().unwrap(),
    );
    let c = f.mul(&c_prev).unwrap().add(&i.mul(&gg).unwrap()).unwrap();
    let hh = o.mul(&c.tanh().unwrap()).unwrap();
    let want = Tensor::stack(&[hh, c], 0).unwrap();
    common::assert_close(
        &hc.to_vec::<f64>().unwrap(),
        &want.to_vec::<f64>().unwrap(),
        1e-14,
        "lstm_cell vs composed",
    );
    let x = gx.chunk(3, 1).unwrap();
    let y = gh.chunk(3, 1).unwrap();
    let r = x[0].add(&y[0]).unwrap().sigmoid().unwrap();
    let z = x[1].add(&y[1]).unwrap().sigmoid().unwrap();
    let cand = x[2].add(&r.mul(&y[2]).unwrap()).unwrap().tanh().unwrap();
    let one = Tensor::ones((), DType::F64, Device::Cpu).unwrap();
    let want = one
        .sub(&z)
        .unwrap()
        .mul(&cand)
        .unwrap()
        .add(&z.mul(&h_prev).unwrap())
        .unwrap();
    common::assert_close(
        &Tensor::gru_cell(&gx, &gh, &h_prev)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        &want.to_vec::<f64>().unwrap(),
        1e-14,
        "gru_cell vs composed",
    );
    // Bad shapes are errors that name the op.
    let e = Tensor::lstm_cell(&randn(&[n, 3 * h], 46), &c_prev).unwrap_err();
    assert!(e.to_string().contains("lstm_cell"), "{e}");
    let e = Tensor::gru_cell(&gx, &randn(&[n, 2 * h], 47), &h_prev).unwrap_err();
    assert!(e.to_string().contains("gru_cell"), "{e}");
}

/// The whole-sequence LSTM op: finite differences for every input, both directions, and
/// the same outputs and gradients as the per-step cells it replaces.
#[test]
fn lstm_sequence_op() {
    let (t, n, h) = (4, 2, 3);
    let xp = randn(&[t, n, 4 * h], 50);
    let w = randn(&[4 * h, h], 51).affine(0.5, 0.0).unwrap();
    let (h0, c0) = (randn(&[n, h], 52), randn(&[n, h], 53));
    for reverse in [false, true] {
        let inputs = [xp.clone(), w.clone(), h0.clone(), c0.clone()];
        check_grad(&format!("lstm_sequence reverse={reverse}"), &inputs, |v| {
            let s = Tensor::lstm_sequence(&v[0], &v[1], &v[2], &v[3], reverse)?;
            // Every output takes part: the sequence, and the last cell state.
            Tensor::cat(
                &[
                    s.output.reshape(vec![t * n, h])?,
                    s.c_last.affine(2.0, 0.0)?,
                ],
                0,
            )
        });
        // Against the per-step cells.
        let vars: Vec<Tensor> = inputs.iter().map(|x| x.to_var()).collect();
        let s = Tensor::lstm_sequence(&vars[0], &vars[1], &vars[2], &vars[3], reverse).unwrap();
        let (mut hh, mut cc) = (vars[2].clone(), vars[3].clone());
        let mut ys = vec![None; t];
        let order: Vec<usize> = if reverse {
            (0..t).rev().collect()
        } else {
            (0..t).collect()
        };
        for &k in &order {
            let g = vars[0]
                .narrow(0, k, 1)
                .unwrap()
                .squeeze(0)
                .unwrap()
                .add(&hh.matmul(&vars[1].transpose_last().unwrap()).unwrap())
                .unwrap();
            let hc = Tensor::lstm_cell(&g, &cc).unwrap();
            hh = hc.narrow(0, 0, 1).unwrap().squeeze(0).unwrap();
            cc = hc.narrow(0, 1, 1).unwrap().squeeze(0).unwrap();
            ys[k] = Some(hh.clone());
        }
        let y = Tensor::stack(&ys.into_iter().flatten().collect::<Vec<_>>(), 0).unwrap();
        let what = format!("lstm_sequence reverse={reverse}");
        common::assert_close(
            &s.output.to_vec::<f64>().unwrap(),
            &y.to_vec::<f64>().unwrap(),
            1e-14,
            &what,
        );
        common::assert_close(
            &s.h_last.to_vec::<f64>().unwrap(),
            &hh.to_vec::<f64>().unwrap(),
            1e-14,
            &what,
        );
        let r = randn(&[t, n, h], 54);
        let loss_a = s
            .output
            .mul(&r)
            .unwrap()
            .sum_all()
            .unwrap()
            .add(&s.c_last.sum_all().unwrap())
            .unwrap();
        let loss_b = y
            .mul(&r)
            .unwrap()
            .sum_all()
            .unwrap()
            .add(&cc.sum_all().unwrap())
            .unwrap();
        let (ga, gb) = (loss_a.backward().unwrap(), loss_b.backward().unwrap());
        for (i, v) in vars.iter().enumerate() {
            common::assert_close(
                &ga.get(v).unwrap().to_vec::<f64>().unwrap(),
                &gb.get(v).unwrap().to_vec::<f64>().unwrap(),
                1e-12,
                &format!("{what} gradient of input {i}"),
            );
        }
    }
    let bad = Tensor::lstm_sequence(&randn(&[t, n, 3 * h], 55), &w, &h0, &c0, false);
    assert!(bad.unwrap_err().to_string().contains("lstm_sequence"));
}
