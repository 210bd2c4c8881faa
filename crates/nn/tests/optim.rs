//! Learning-rate schedules, reduce-on-plateau and gradient clipping (the optimizers'
//! update rules are checked against PyTorch in golden.rs).

use nn::optim::{clip_grad_norm, LrSchedule, ReduceOnPlateau};
use tensor::{Device, Tensor};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn schedules() {
    let base = 0.1;
    assert!(close(LrSchedule::Constant.lr(base, 17.0), 0.1));
    let step = LrSchedule::Step {
        every: 30.0,
        gamma: 0.1,
    };
    assert!(
        close(step.lr(base, 29.9), 0.1)
            && close(step.lr(base, 30.0), 0.01)
            && close(step.lr(base, 65.0), 0.001)
    );
    // The CIFAR ResNet schedule: ×0.1 at epochs 80 and 120.
    let multi = LrSchedule::MultiStep {
        milestones: vec![80.0, 120.0],
        gamma: 0.1,
    };
    assert!(
        close(multi.lr(base, 79.0), 0.1)
            && close(multi.lr(base, 80.0), 0.01)
            && close(multi.lr(base, 160.0), 0.001)
    );
    let cos = LrSchedule::Cosine {
        total: 10.0,
        min_lr: 0.0,
    };
    assert!(
        close(cos.lr(base, 0.0), 0.1)
            && close(cos.lr(base, 5.0), 0.05)
            && close(cos.lr(base, 10.0), 0.0)
            && close(cos.lr(base, 12.0), 0.0)
    );
    // Goyal et al.'s linear warm-up over 5 epochs from base/10, then the multi-step schedule.
    let warm = LrSchedule::Warmup {
        epochs: 5.0,
        start_factor: 0.1,
        after: Box::new(multi),
    };
    assert!(
        close(warm.lr(base, 0.0), 0.01)
            && close(warm.lr(base, 2.5), 0.055)
            && close(warm.lr(base, 5.0), 0.1)
            && close(warm.lr(base, 90.0), 0.01)
    );
}

#[test]
fn reduce_on_plateau_waits_for_patience() {
    let mut r = ReduceOnPlateau::new(0.5, 2);
    let mut lr = 1.0;
    for metric in [10.0, 9.0, 9.0, 9.0] {
        lr = r.observe(metric, lr);
    }
    assert_eq!(
        lr, 1.0,
        "two evaluations without improvement are within patience"
    );
    lr = r.observe(9.0, lr);
    assert_eq!(lr, 0.5, "the third one reduces");
    lr = r.observe(8.0, lr);
    assert_eq!(lr, 0.5);
}

#[test]
fn clipping_scales_to_the_global_norm() {
    let mut grads = vec![
        Tensor::from_vec(vec![3.0f32, 0.0], 2, Device::Cpu).unwrap(),
        Tensor::from_vec(vec![4.0f32], 1, Device::Cpu).unwrap(),
    ];
    let norm = clip_grad_norm(&mut grads, 1.0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert!((norm - 5.0).abs() < 1e-9);
    let after: f64 = grads
        .iter()
        .map(|g| {
            g.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|&v| (v as f64).powi(2))
                .sum::<f64>()
        })
        .sum::<f64>()
        .sqrt();
    assert!((after - 1.0).abs() < 1e-5, "{after}");
    // Below the threshold nothing changes.
    let norm = clip_grad_norm(&mut grads, 10.0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert!((norm - after).abs() < 1e-6);
    assert!((grads[1].to_vec::<f32>().unwrap()[0] - 0.8).abs() < 1e-5);
    // Nothing is read to the host while clipping (on a GPU each read waits for it).
    let reads = tensor::host_reads();
    clip_grad_norm(&mut grads, 0.5).unwrap();
    assert_eq!(tensor::host_reads(), reads);
    // A norm at the limit is left alone, bit for bit.
    let mut at_limit = vec![Tensor::from_vec(vec![3.0f32, 4.0], 2, Device::Cpu).unwrap()];
    clip_grad_norm(&mut at_limit, 5.0).unwrap();
    assert_eq!(at_limit[0].to_vec::<f32>().unwrap(), [3.0, 4.0]);
    // A NaN norm makes every gradient NaN, as in PyTorch, rather than letting a finite
    // 1e6 through unclipped beside the NaN.
    let mut grads = vec![
        Tensor::from_vec(vec![f32::NAN], 1, Device::Cpu).unwrap(),
        Tensor::from_vec(vec![1e6f32], 1, Device::Cpu).unwrap(),
    ];
    assert!(clip_grad_norm(&mut grads, 1.0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
        .is_nan());
    assert!(grads[1].to_vec::<f32>().unwrap()[0].is_nan());
}

/// The fused in-place SGD step (one kernel per parameter) against the formula, plain
/// momentum with weight decay, three steps (the first sets the buffer).
#[test]
fn fused_sgd_momentum_follows_the_formula() {
    use nn::optim::{Optimizer, Sgd};
    use tensor::{DType, Device, Rng, Tensor};
    let (lr, m, wd) = (0.1, 0.9, 0.01);
    let p = Tensor::randn(
        vec![5, 3],
        0.0,
        1.0,
        DType::F64,
        Device::Cpu,
        &mut Rng::new(1),
    )
    .unwrap();
    let mut want = p.to_vec::<f64>().unwrap();
    let mut buf = vec![0.0; want.len()];
    let mut sgd = Sgd::new(lr, m, false, wd).unwrap();
    for step in 0..3 {
        let g = Tensor::randn(
            vec![5, 3],
            0.0,
            1.0,
            DType::F64,
            Device::Cpu,
            &mut Rng::new(10 + step),
        )
        .unwrap();
        sgd.update(0, &p, &g).unwrap();
        for ((w, b), g) in want
            .iter_mut()
            .zip(buf.iter_mut())
            .zip(g.to_vec::<f64>().unwrap())
        {
            let d = g + *w * wd;
            *b = if step == 0 { d } else { *b * m + d };
            *w -= *b * lr;
        }
        let got = p.to_vec::<f64>().unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-15 * (1.0 + b.abs()),
                "step {step}: {a} vs {b}"
            );
        }
    }
    assert_eq!(sgd.state()[0].2.to_vec::<f64>().unwrap(), buf);
}

/// Momentum masking (SBC): the buffer is zero at the masked positions and unchanged
/// elsewhere, and the next step starts those positions' momentum afresh.
#[test]
fn masked_momentum_is_zero_where_masked_and_intact_elsewhere() {
    use nn::optim::{Optimizer, Sgd};
    use tensor::{Device, Tensor};
    let p = Tensor::from_vec(vec![1.0f32; 6], vec![2, 3], Device::Cpu).unwrap();
    let mut sgd = Sgd::new(0.1, 0.9, false, 0.0).unwrap();
    // Before any update there is no buffer: nothing to mask, no error.
    sgd.mask_momentum(0, &[1, 2]).unwrap();
    let g = Tensor::from_vec(
        vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0],
        vec![2, 3],
        Device::Cpu,
    )
    .unwrap();
    sgd.update(0, &p, &g).unwrap();
    sgd.mask_momentum(0, &[1, 4]).unwrap();
    let buf = sgd.state()[0].2.to_vec::<f32>().unwrap();
    assert_eq!(buf, vec![1.0, 0.0, 3.0, 4.0, 0.0, 6.0]);
    // buf = 0.9·buf + g: the masked entries restart from the gradient alone.
    let before = p.to_vec::<f32>().unwrap();
    sgd.update(0, &p, &g).unwrap();
    let buf = sgd.state()[0].2.to_vec::<f32>().unwrap();
    let want = [1.9f32, 2.0, 5.7, 7.6, 5.0, 11.4];
    for (a, b) in buf.iter().zip(want) {
        assert!((a - b).abs() < 1e-6, "{buf:?} vs {want:?}");
    }
    let after = p.to_vec::<f32>().unwrap();
    assert!((before[1] - after[1] - 0.2).abs() < 1e-6);
    // A position past the parameter is an error that names it.
    let e = sgd.mask_momentum(0, &[6]).unwrap_err().to_string();
    assert!(e.contains("position 6") && e.contains("6 elements"), "{e}");
}

/// Adam's state round-trips through `state`/`load_state` (a resumed run continues bit for
/// bit), masking zeros the first moment only, and another optimizer's state is refused.
#[test]
fn adam_state_round_trips_and_masks_the_first_moment() {
    use nn::optim::{Adam, Optimizer, Sgd};
    use tensor::{Device, Tensor};
    let t = |v: Vec<f32>| Tensor::from_vec(v, vec![4], Device::Cpu).unwrap();
    let grads = [vec![0.5f32, -1.0, 2.0, 0.25], vec![1.0, 1.0, -3.0, 0.5]];
    let (pa, pb) = (t(vec![1.0; 4]), t(vec![1.0; 4]));
    let mut a = Adam::new(0.01, 0.9, 0.999, 1e-8, 1e-4);
    a.update(0, &pa, &t(grads[0].clone())).unwrap();
    // A second optimizer restored from the first's state takes the same next step.
    let mut b = Adam::new(0.01, 0.9, 0.999, 1e-8, 1e-4);
    pb.assign(&pa).unwrap();
    let state = a.state();
    let keys: Vec<&str> = state.iter().map(|e| e.1).collect();
    assert_eq!(keys, ["m", "v", "step"]);
    for (i, k, x) in state {
        b.load_state(i, k, x, &[4]).unwrap();
    }
    a.update(0, &pa, &t(grads[1].clone())).unwrap();
    b.update(0, &pb, &t(grads[1].clone())).unwrap();
    assert_eq!(pa.to_vec::<f32>().unwrap(), pb.to_vec::<f32>().unwrap());
    // Masking: m is zero at 1 and 3, v untouched.
    let v_before = a.state()[1].2.to_vec::<f32>().unwrap();
    a.mask_momentum(0, &[1, 3]).unwrap();
    let st = a.state();
    let m = st[0].2.to_vec::<f32>().unwrap();
    assert!(
        m[1] == 0.0 && m[3] == 0.0 && m[0] != 0.0 && m[2] != 0.0,
        "{m:?}"
    );
    assert_eq!(st[1].2.to_vec::<f32>().unwrap(), v_before);
    // The step count as its high and low 24 bits.
    assert_eq!(st[2].2.to_vec::<f32>().unwrap(), vec![0.0, 2.0]);
    // SGD's state in Adam, Adam's in SGD, a broken step count: errors, not a wrong run.
    let e = b
        .load_state(0, "momentum", t(vec![0.0; 4]), &[4])
        .unwrap_err()
        .to_string();
    assert!(e.contains("another optimizer"), "{e}");
    let mut sgd = Sgd::new(0.1, 0.9, false, 0.0).unwrap();
    let e = sgd
        .load_state(0, "m", t(vec![0.0; 4]), &[4])
        .unwrap_err()
        .to_string();
    assert!(e.contains("another optimizer"), "{e}");
    let step = |v: Vec<f32>| Tensor::from_vec(v.clone(), vec![v.len()], Device::Cpu).unwrap();
    assert!(b.load_state(0, "step", step(vec![0.0, 2.5]), &[4]).is_err());
    assert!(b.load_state(0, "step", step(vec![3.0]), &[4]).is_err());
    assert!(b.load_state(0, "step", step(vec![0.0, 0.0]), &[4]).is_err());
    // State restored with a piece missing cannot take a step: it names what is missing.
    for (keys, missing) in [
        (&["m", "v"][..], "step"),
        (&["m", "step"], "v"),
        (&["v", "step"], "m"),
    ] {
        let mut c = Adam::new(0.01, 0.9, 0.999, 1e-8, 0.0);
        for k in keys {
            let x = if *k == "step" {
                step(vec![0.0, 1.0])
            } else {
                t(vec![0.0; 4])
            };
            c.load_state(0, k, x, &[4]).unwrap();
        }
        let e = c
            .update(0, &pa, &t(grads[0].clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("without its {missing}")), "{e}");
    }
    // A count past 2^24 survives the round trip exactly.
    let mut d = Adam::new(0.01, 0.9, 0.999, 1e-8, 0.0);
    d.load_state(0, "step", step(vec![3.0, 5.0]), &[4]).unwrap();
    d.load_state(0, "m", t(vec![0.0; 4]), &[4]).unwrap();
    d.load_state(0, "v", t(vec![0.0; 4]), &[4]).unwrap();
    let saved = d.state();
    assert_eq!(saved[2].2.to_vec::<f32>().unwrap(), vec![3.0, 5.0]);
}

/// Adam's bias corrections at a step count past i32 (a restored count may reach 2^48):
/// finite, where `powi` of the count as i32 wrapped to β^(−2^31) = inf.
#[test]
fn adam_stays_finite_past_two_to_the_31_steps() {
    use nn::optim::{Adam, Optimizer};
    let mut adam = Adam::new(0.001, 0.9, 0.999, 1e-8, 0.0);
    let t = |v: Vec<f32>| Tensor::from_vec(v, vec![2], Device::Cpu).unwrap();
    adam.load_state(0, "m", t(vec![0.1, -0.1]), &[2]).unwrap();
    adam.load_state(0, "v", t(vec![0.01, 0.01]), &[2]).unwrap();
    // Two 24-bit halves, high first: 128 · 2^24 = 2^31 steps.
    adam.load_state(0, "step", t(vec![128.0, 0.0]), &[2])
        .unwrap();
    let p = t(vec![1.0, 2.0]);
    adam.update(0, &p, &t(vec![0.5, -0.5])).unwrap();
    let w = p.to_vec::<f32>().unwrap();
    assert!(w.iter().all(|x| x.is_finite()), "{w:?}");
    assert!(w[0] < 1.0 && w[1] > 2.0, "{w:?}");
}
