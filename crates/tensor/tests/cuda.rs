//! The CUDA kernels. `kernels_compile_nvrtc` compiles every kernel for sm_80 and sm_90 with
//! NVRTC and needs no GPU (CI runs it with `REQUIRE_NVRTC=1`, so a missing NVRTC fails it
//! instead of skipping). The `gpu_` tests run the kernels on a GPU and compare with the
//! CPU; without one they say so and pass, unless `REQUIRE_GPU=1` (scripts/gpu-check.sh).

use tensor::cuda::{kernels, Gpu};
use tensor::storage::{BinaryOp, UnaryOp};
use tensor::{Device, Rng, Tensor};

fn required(var: &str) -> bool {
    std::env::var(var).map(|v| v == "1").unwrap_or(false)
}

#[test]
fn kernels_compile_nvrtc() {
    for (name, src, fns) in kernels::SOURCES {
        for arch in ["sm_80", "sm_90"] {
            match kernels::compile(name, src, arch) {
                Ok(ptx) => {
                    let text = ptx.to_src();
                    for f in fns {
                        assert!(text.contains(f), "{name} for {arch}: no entry {f} in the PTX");
                    }
                }
                Err(e) if e.contains("could not be loaded") && !required("REQUIRE_NVRTC") => {
                    eprintln!("skipped: {e}");
                    return;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}

fn gpu() -> Option<Gpu> {
    match Gpu::new(0) {
        Ok(g) => Some(g),
        Err(e) => {
            assert!(!required("REQUIRE_GPU"), "REQUIRE_GPU=1 but no GPU: {e}");
            eprintln!("skipped (no GPU): {e}");
            None
        }
    }
}

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.normal() as f32).collect()
}

/// The CPU backend's result for a unary op.
fn cpu_unary(x: &[f32], op: UnaryOp) -> Vec<f32> {
    let t = cpu(x, &[x.len()]);
    let r = match op {
        UnaryOp::Neg => t.neg(),
        UnaryOp::Abs => t.abs(),
        UnaryOp::Sign => t.sign(),
        UnaryOp::Sqrt => t.sqrt(),
        UnaryOp::Exp => t.exp(),
        UnaryOp::Log => t.log(),
        UnaryOp::Tanh => t.tanh(),
        UnaryOp::Sigmoid => t.sigmoid(),
        UnaryOp::Relu => t.relu(),
        UnaryOp::Sqr => t.sqr(),
        UnaryOp::Recip => t.recip(),
        UnaryOp::Affine { mul, add } => t.affine(mul, add),
        UnaryOp::Powf(e) => t.powf(e),
        UnaryOp::Clamp { min, max } => t.clamp(min, max),
        UnaryOp::Step => return x.iter().map(|&v| (v > 0.0) as u8 as f32).collect(),
        UnaryOp::InRange { min, max } => {
            return x.iter().map(|&v| ((v as f64) >= min && (v as f64) <= max) as u8 as f32).collect()
        }
    };
    r.unwrap().to_vec::<f32>().unwrap()
}

fn cpu(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec(), Device::Cpu).unwrap()
}

/// Relative error per element, with an absolute floor for values near zero.
fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: {g} vs NaN");
            continue;
        }
        let err = (g - w).abs() / w.abs().max(1.0);
        assert!(err <= tol, "{what}[{i}]: GPU {g} vs CPU {w} (relative error {err})");
    }
}

/// For sums, where the result can be much smaller than its terms: |GPU − CPU| within
/// `tol` times the sum of the terms' magnitudes (the scale of any summation order's
/// rounding error).
fn close_sums(got: &[f32], want: &[f32], magnitude: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for i in 0..got.len() {
        let err = (got[i] - want[i]).abs();
        assert!(err <= tol * magnitude[i], "{what}[{i}]: GPU {} vs CPU {} (error {err}, terms' magnitude {})", got[i], want[i], magnitude[i]);
    }
}

#[test]
fn gpu_unary_ops_match_the_cpu() {
    let Some(g) = gpu() else { return };
    let x = data(100_003, 1);
    let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.1).collect();
    let ops = [
        UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Sign, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sigmoid,
        UnaryOp::Relu, UnaryOp::Step, UnaryOp::Sqr, UnaryOp::Recip,
        UnaryOp::Affine { mul: 1.5, add: -0.25 }, UnaryOp::Clamp { min: -0.5, max: 0.5 },
        UnaryOp::InRange { min: -0.5, max: 0.5 },
    ];
    for op in ops {
        let want = cpu_unary(&x, op);
        close(&g.unary(&x, op).unwrap(), &want, 1e-5, &format!("{op:?}"));
    }
    for op in [UnaryOp::Sqrt, UnaryOp::Log, UnaryOp::Powf(1.7)] {
        let want = cpu_unary(&pos, op);
        close(&g.unary(&pos, op).unwrap(), &want, 1e-5, &format!("{op:?}"));
    }
}

#[test]
fn gpu_binary_ops_broadcast_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let (a, b) = (data(64 * 33, 2), data(33, 3));
    let ta = cpu(&a, &[64, 33]);
    let tb = cpu(&b, &[1, 33]);
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Lt, BinaryOp::Ge] {
        let want = match op {
            BinaryOp::Add => ta.add(&tb),
            BinaryOp::Sub => ta.sub(&tb),
            BinaryOp::Mul => ta.mul(&tb),
            BinaryOp::Div => ta.div(&tb),
            BinaryOp::Maximum => ta.maximum(&tb),
            BinaryOp::Minimum => ta.minimum(&tb),
            BinaryOp::Lt => ta.lt(&tb),
            _ => ta.ge(&tb),
        }
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
        let got = g.binary(&a, &[33, 1], &b, &[0, 1], &[64, 33], op).unwrap();
        close(&got, &want, 1e-5, &format!("{op:?}"));
    }
}

#[test]
fn gpu_reductions_softmax_and_matmul_match_the_cpu() {
    let Some(g) = gpu() else { return };
    let (rows, cols) = (37, 1000);
    let x = data(rows * cols, 4);
    let t = cpu(&x, &[rows, cols]);
    let abs_sum: Vec<f32> = x.chunks(cols).map(|r| r.iter().map(|v| v.abs()).sum()).collect();
    close_sums(&g.row_sum(&x, rows, cols).unwrap(), &t.sum(&[1], false).unwrap().to_vec::<f32>().unwrap(), &abs_sum, 1e-5, "row sum");
    close(&g.row_max(&x, rows, cols).unwrap(), &t.max(&[1], false).unwrap().to_vec::<f32>().unwrap(), 0.0, "row max");
    for log in [false, true] {
        let want = if log { t.log_softmax(1) } else { t.softmax(1) }.unwrap().to_vec::<f32>().unwrap();
        close(&g.softmax_rows(&x, rows, cols, log).unwrap(), &want, 1e-5, "softmax");
    }
    for (m, k, n) in [(1, 1, 1), (64, 128, 32), (127, 255, 129)] {
        let (a, b) = (data(m * k, 5), data(k * n, 6));
        let want = cpu(&a, &[m, k]).matmul(&cpu(&b, &[k, n])).unwrap().to_vec::<f32>().unwrap();
        let mut magnitude = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                magnitude[i * n + j] = (0..k).map(|p| (a[i * k + p] * b[p * n + j]).abs()).sum();
            }
        }
        close_sums(&g.matmul(&a, &b, m, k, n).unwrap(), &want, &magnitude, 1e-5, &format!("matmul {m}x{k}x{n}"));
    }
}
