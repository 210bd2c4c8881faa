//! DGC's local half on tensors (`DgcOnDevice`) against the slice implementation
//! (`Dgc::compress`): over several steps and every switch, the same entries chosen, the
//! same values and the same velocity and accumulator, bit for bit — on CPU tensors here,
//! and on the GPU when one is present (`REQUIRE_GPU=1` makes its absence a failure, as
//! scripts/gpu-check.sh sets it).

mod common;

use common::heavy_tailed;
use compress::methods::dgc::{Decay, DenseClip, Dgc, DgcConfig, DgcOnDevice};
use compress::{ParamSpec, StepInfo};
use tensor::{cuda, Device, Rng, Tensor};

fn devices() -> Vec<Device> {
    cuda::devices_for_tests()
}

fn configs() -> Vec<(&'static str, DgcConfig)> {
    let full = DgcConfig {
        density: 0.001,
        dense_below: 1000,
        dense_1d: true,
        momentum: 0.9,
        nesterov: false,
        weight_decay: 1e-4,
        momentum_correction: true,
        masking: true,
        clip: 0.02,
        clip_dense: DenseClip::Averaged,
        decay: Decay::Compressed,
        warmup_epochs: 1.0,
        warmup_densities: vec![0.25, 0.0625, 0.015625, 0.004],
        sampling: true,
        sample_fraction: 0.01,
    };
    vec![
        ("every technique, sampled", full.clone()),
        (
            "exact selection",
            DgcConfig {
                sampling: false,
                ..full.clone()
            },
        ),
        (
            "nesterov, no clipping",
            DgcConfig {
                nesterov: true,
                clip: 0.0,
                ..full.clone()
            },
        ),
        (
            "decay dense (the reference's)",
            DgcConfig {
                decay: Decay::Dense,
                ..full.clone()
            },
        ),
        (
            "nesterov, decay dense",
            DgcConfig {
                nesterov: true,
                decay: Decay::Dense,
                ..full.clone()
            },
        ),
        (
            "no weight decay",
            DgcConfig {
                weight_decay: 0.0,
                masking: false,
                ..full.clone()
            },
        ),
        (
            "gradient dropping",
            DgcConfig {
                sampling: true,
                ..DgcConfig::all_off(0.01)
            },
        ),
        (
            "small sample",
            DgcConfig {
                sample_fraction: 0.001,
                density: 0.01,
                ..full
            },
        ),
    ]
}

#[test]
fn dgc_on_tensors_chooses_what_dgc_on_slices_chooses() {
    let shapes: [&[usize]; 3] = [&[512, 256, 3, 3], &[64], &[300_007]];
    let params: Vec<ParamSpec> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| ParamSpec::new(format!("p{i}"), s))
        .collect();
    for dev in devices() {
        for (name, cfg) in configs() {
            let mut host = Dgc::new(cfg.clone(), 4, Rng::new(7)).unwrap();
            compress::Method::init(&mut host, &params).unwrap();
            let mut on = DgcOnDevice::new(cfg.clone(), 4, Rng::new(7)).unwrap();
            on.init(&params, dev).unwrap();
            for step in 0..6u64 {
                // Through the warm-up's stages and past it.
                let info = StepInfo {
                    step,
                    epoch: step as f64 * 0.3,
                };
                compress::Method::begin_step(&mut host, info);
                on.begin_step(info);
                for (p, spec) in params.iter().enumerate() {
                    if on.is_dense(p) {
                        continue;
                    }
                    let n = spec.numel();
                    let g = heavy_tailed(n, 1000 * step + p as u64);
                    let w = heavy_tailed(n, 5000 + p as u64);
                    let w_host = w.clone();
                    let (idx, vals) = host.compress(p, &w, &g).unwrap();
                    let gt = Tensor::from_vec(g, n, dev).unwrap();
                    let wt = Tensor::from_vec(w, n, dev).unwrap();
                    let sel = on.compress(p, Some(&wt), &gt).unwrap();
                    let (di, dv) = sel.to_vecs().unwrap();
                    let what = format!("{dev:?} {name}: step {step} param {p}");
                    assert!(!idx.is_empty(), "{what}: nothing chosen");
                    assert_eq!(di, idx, "{what}: indices");
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&dv), bits(&vals), "{what}: values");
                    let (u, v) = on.state_of(p).unwrap();
                    let hs = compress::Method::state(&host).unwrap();
                    let find = |key: String| {
                        let found = hs.iter().find(|(k, _)| *k == key);
                        found
                            .map(|(_, t)| bits(t))
                            .unwrap_or_else(|| panic!("no state {key}"))
                    };
                    assert_eq!(bits(&u), find(format!("u.{p}")), "{what}: velocity");
                    assert_eq!(bits(&v), find(format!("v.{p}")), "{what}: accumulator");
                    // The decay buffer's step on an averaged direction, and the buffer left.
                    let mut out = heavy_tailed(n, 9000 + 10 * step + p as u64);
                    let ot = Tensor::from_vec(out.clone(), n, dev).unwrap();
                    host.add_decay(p, &w_host, &mut out).unwrap();
                    on.add_decay(p, &wt, &ot).unwrap();
                    assert_eq!(
                        bits(&ot.to_vec::<f32>().unwrap()),
                        bits(&out),
                        "{what}: decay"
                    );
                }
                let (hs, ds) = (compress::Method::state(&host).unwrap(), on.state().unwrap());
                assert_eq!(hs.len(), ds.len(), "{dev:?} {name}: state entries");
                for ((hk, hv), (dk, dv)) in hs.iter().zip(&ds) {
                    assert_eq!(hk, dk);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(hv),
                        bits(dv),
                        "{dev:?} {name}: step {step}, state {hk}"
                    );
                }
            }
        }
    }
}

#[test]
fn dgc_on_tensors_refuses_a_dense_parameter() {
    let params = [ParamSpec::new("b", &[10])];
    let mut on = DgcOnDevice::new(
        DgcConfig {
            dense_below: 100,
            ..DgcConfig::all_off(0.1)
        },
        2,
        Rng::new(1),
    )
    .unwrap();
    on.init(&params, Device::Cpu).unwrap();
    let g = Tensor::from_vec(vec![1.0f32; 10], 10, Device::Cpu).unwrap();
    let e = on.compress(0, None, &g).unwrap_err().to_string();
    assert!(e.contains("not one sent sparse"), "{e}");
}

#[test]
fn dgc_on_slices_checks_the_weights_and_reads_them_only_for_weight_decay() {
    let params = [ParamSpec::new("w", &[8])];
    let cfg = DgcConfig {
        momentum: 0.9,
        momentum_correction: true,
        ..DgcConfig::all_off(0.25)
    };
    let g = vec![1.0, -2.0, 3.0, 0.5, -0.0, 0.25, 4.0, -1.0];
    // Weight decay 0: weights are not read, an infinite one changes nothing, on both sides.
    let w = vec![-1.0, 2.0, 0.0, f32::INFINITY, -3.0, 1.0, 1.0, 1.0];
    let mut host = Dgc::new(cfg.clone(), 1, Rng::new(1)).unwrap();
    compress::Method::init(&mut host, &params).unwrap();
    let mut on = DgcOnDevice::new(cfg.clone(), 1, Rng::new(1)).unwrap();
    on.init(&params, Device::Cpu).unwrap();
    let (idx, _) = host.compress(0, &w, &g).unwrap();
    let wt = Tensor::from_vec(w, 8, Device::Cpu).unwrap();
    let gt = Tensor::from_vec(g.clone(), 8, Device::Cpu).unwrap();
    let (di, _) = on.compress(0, Some(&wt), &gt).unwrap().to_vecs().unwrap();
    assert_eq!(di, idx);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let hs = compress::Method::state(&host).unwrap();
    assert_eq!(bits(&on.state_of(0).unwrap().0), bits(&hs[0].1), "velocity");
    assert!(on.state_of(0).unwrap().0.iter().all(|x| x.is_finite()));
    // With weight decay in the accumulation, weights of the wrong length are an error,
    // not a silent truncation.
    let mut wd = Dgc::new(
        DgcConfig {
            weight_decay: 1e-4,
            decay: Decay::Compressed,
            ..cfg
        },
        1,
        Rng::new(1),
    )
    .unwrap();
    compress::Method::init(&mut wd, &params).unwrap();
    let e = wd.compress(0, &[1.0, 1.0], &g).unwrap_err().to_string();
    assert!(e.contains("2 weights were passed"), "{e}");
}

#[test]
fn a_checkpoint_of_either_resumes_the_other_bit_for_bit() {
    let params = [ParamSpec::new("w", &[50_000]), ParamSpec::new("b", &[10])];
    let cfg = DgcConfig {
        momentum: 0.9,
        weight_decay: 1e-4,
        momentum_correction: true,
        masking: true,
        sampling: true,
        dense_below: 100,
        ..DgcConfig::all_off(0.01)
    };
    let n = 50_000;
    let grad = |step: u64| heavy_tailed(n, 77 + step);
    let w = heavy_tailed(n, 3);
    let mut host = Dgc::new(cfg.clone(), 2, Rng::new(5)).unwrap();
    compress::Method::init(&mut host, &params).unwrap();
    let mut out = vec![0.5f32; n];
    for step in 0..3 {
        host.compress(0, &w, &grad(step)).unwrap();
        host.add_decay(0, &w, &mut out).unwrap();
    }
    // The host's checkpoint into the tensor side, which goes on as the host does.
    let saved = compress::Method::state(&host).unwrap();
    let mut on = DgcOnDevice::new(cfg.clone(), 2, Rng::new(99)).unwrap();
    on.init(&params, Device::Cpu).unwrap();
    on.load_state(&saved).unwrap();
    assert_eq!(on.state().unwrap(), saved, "the state as loaded");
    let wt = Tensor::from_vec(w.clone(), n, Device::Cpu).unwrap();
    for step in 3..6 {
        let (idx, _) = host.compress(0, &w, &grad(step)).unwrap();
        let gt = Tensor::from_vec(grad(step), n, Device::Cpu).unwrap();
        let (di, _) = on.compress(0, Some(&wt), &gt).unwrap().to_vecs().unwrap();
        assert_eq!(di, idx, "step {step}");
        host.add_decay(0, &w, &mut out).unwrap();
        let ot = Tensor::from_vec(vec![0.5f32; n], n, Device::Cpu).unwrap();
        on.add_decay(0, &wt, &ot).unwrap();
    }
    // And back: the tensor side's checkpoint into a fresh host.
    let mut again = Dgc::new(cfg, 2, Rng::new(1)).unwrap();
    compress::Method::init(&mut again, &params).unwrap();
    compress::Method::load_state(&mut again, &on.state().unwrap()).unwrap();
    assert_eq!(
        compress::Method::state(&again).unwrap(),
        compress::Method::state(&host).unwrap()
    );
    // A checkpoint of another model is refused, naming what is wrong.
    let mut other = DgcOnDevice::new(DgcConfig::all_off(0.01), 2, Rng::new(1)).unwrap();
    other
        .init(&[ParamSpec::new("w", &[7])], Device::Cpu)
        .unwrap();
    let e = other.load_state(&saved).unwrap_err().to_string();
    assert!(e.contains("dgc"), "{e}");
}

/// A checkpoint without the decay buffers (`d.*`, written with `decay=compressed` or before
/// the buffer existed) resumes a configuration that needs none, and is refused, with the
/// way out named, by one that does.
#[test]
fn a_checkpoint_without_decay_buffers_loads_only_where_none_is_needed() {
    let params = [ParamSpec::new("w", &[2_000])];
    let base = DgcConfig {
        momentum: 0.9,
        weight_decay: 1e-4,
        momentum_correction: true,
        ..DgcConfig::all_off(0.01)
    };
    let old = DgcConfig {
        decay: Decay::Compressed,
        ..base.clone()
    };
    let mut host = Dgc::new(old.clone(), 1, Rng::new(5)).unwrap();
    compress::Method::init(&mut host, &params).unwrap();
    host.compress(0, &heavy_tailed(2_000, 3), &heavy_tailed(2_000, 4))
        .unwrap();
    let without_d: Vec<(String, Vec<f32>)> = compress::Method::state(&host)
        .unwrap()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("d."))
        .collect();
    let mut same = Dgc::new(old, 1, Rng::new(1)).unwrap();
    compress::Method::init(&mut same, &params).unwrap();
    compress::Method::load_state(&mut same, &without_d).unwrap();
    let mut dense = Dgc::new(base, 1, Rng::new(1)).unwrap();
    compress::Method::init(&mut dense, &params).unwrap();
    let e = compress::Method::load_state(&mut dense, &without_d)
        .unwrap_err()
        .to_string();
    assert!(e.contains("decay=compressed"), "{e}");
}
