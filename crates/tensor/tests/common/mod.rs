//! Shared test helpers: seeded f64 tensors and the finite-difference gradient check.
#![allow(dead_code)]

use tensor::{no_grad, DType, Device, Result, Rng, Tensor};

pub fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    Tensor::randn(shape.to_vec(), 0.0, 1.0, DType::F64, Device::Cpu, &mut rng).unwrap()
}

/// Uniform in [lo, hi), for inputs that must stay inside a domain (log, sqrt).
pub fn uniform(shape: &[usize], lo: f64, hi: f64, seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    Tensor::rand_uniform(shape.to_vec(), lo, hi, DType::F64, Device::Cpu, &mut rng).unwrap()
}

pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let err = (a - b).abs() / (1.0 + b.abs());
        assert!(
            err <= tol,
            "{what}[{i}]: got {a}, want {b} (rel err {err:e} > {tol:e})"
        );
    }
}

/// Checks the analytic gradient of `f` at `inputs` (f64) against central differences of
/// the scalar `sum(f(x) * r)` for a fixed random `r`. Up to `max_probes` elements of each
/// input are probed (spread over the tensor) to keep large ops fast.
pub fn check_grad(name: &str, inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    let tol = 1e-6;
    const EPS: f64 = 1e-6;
    const MAX_PROBES: usize = 40;
    let vars: Vec<Tensor> = inputs.iter().map(|t| t.to_var()).collect();
    let out = f(&vars).unwrap_or_else(|e| panic!("{name}: forward failed: {e}"));
    let r = randn(out.dims(), 99);
    let loss = out.mul(&r).unwrap().sum_all().unwrap();
    let grads = loss
        .backward()
        .unwrap_or_else(|e| panic!("{name}: backward failed: {e}"));
    let scalar = |xs: &[Tensor]| -> f64 {
        no_grad(|| {
            f(xs)
                .unwrap()
                .mul(&r)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap()
        })
    };
    for (i, input) in inputs.iter().enumerate() {
        let analytic = match grads.get(&vars[i]) {
            Some(g) => g.to_vec::<f64>().unwrap(),
            None => vec![0.0; input.elem_count()],
        };
        assert_eq!(
            analytic.len(),
            input.elem_count(),
            "{name}: gradient {i} has the wrong size"
        );
        let base = input.to_vec::<f64>().unwrap();
        let step = (base.len() / MAX_PROBES).max(1);
        for j in (0..base.len()).step_by(step) {
            let probe = |delta: f64| {
                let mut v = base.clone();
                v[j] += delta;
                let mut xs = inputs.to_vec();
                xs[i] = Tensor::from_vec(v, input.dims().to_vec(), Device::Cpu).unwrap();
                scalar(&xs)
            };
            let numeric = (probe(EPS) - probe(-EPS)) / (2.0 * EPS);
            let err = (analytic[j] - numeric).abs() / (1.0 + numeric.abs());
            assert!(
                err < tol,
                "{name}: d/dinput{i}[{j}]: analytic {} vs numeric {numeric} (rel err {err:e})",
                analytic[j]
            );
        }
    }
}
