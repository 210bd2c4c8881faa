//! Forward values of ops that gradient checks do not cover (selection, comparisons,
//! conversions), parallel paths on large inputs, and view/in-place semantics.

mod common;
use common::{assert_close, randn};
use tensor::{no_grad, DType, Device, Rng, Tensor};

fn f32s(v: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(v, shape.to_vec(), Device::Cpu).unwrap()
}

#[test]
fn topk_sort_kthvalue_argmax() {
    let x = f32s(
        vec![3., 1., 4., 1., 5., 9., 2., 6., 5., 3., 5., 8.],
        &[2, 6],
    );
    let (v, i) = x.topk(3, 1, true).unwrap();
    // Row 0 is [3, 1, 4, 1, 5, 9]; row 1 is [2, 6, 5, 3, 5, 8] (5 twice: lower index first).
    assert_eq!(v.to_vec::<f32>().unwrap(), [9., 5., 4., 8., 6., 5.]);
    assert_eq!(i.to_vec::<u32>().unwrap(), [5, 4, 2, 5, 1, 2]);
    let (v, i) = x.topk(2, 1, false).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), [1., 1., 2., 3.]);
    assert_eq!(
        i.to_vec::<u32>().unwrap(),
        [1, 3, 0, 3],
        "ties keep the lower index first"
    );
    let (s, p) = x.sort(1, false).unwrap();
    assert_eq!(
        s.to_vec::<f32>().unwrap(),
        [1., 1., 3., 4., 5., 9., 2., 3., 5., 5., 6., 8.]
    );
    assert_eq!(
        p.to_vec::<u32>().unwrap(),
        [1, 3, 0, 2, 4, 5, 0, 3, 2, 4, 1, 5]
    );
    let (k, ki) = x.kthvalue(2, 1, false).unwrap();
    assert_eq!(
        (k.to_vec::<f32>().unwrap(), ki.to_vec::<u32>().unwrap()),
        (vec![1., 3.], vec![3, 3])
    );
    assert_eq!(x.argmax(1, false).unwrap().to_vec::<u32>().unwrap(), [5, 5]);
    assert_eq!(
        x.argmax(0, false).unwrap().to_vec::<u32>().unwrap(),
        [0, 1, 1, 1, 0, 0],
        "a tie picks the first"
    );
    // Along a non-last dimension.
    let (v0, i0) = x.topk(1, 0, true).unwrap();
    assert_eq!(v0.dims(), [1, 6]);
    assert_eq!(v0.to_vec::<f32>().unwrap(), [3., 6., 5., 3., 5., 9.]);
    assert_eq!(i0.to_vec::<u32>().unwrap(), [0, 1, 1, 1, 0, 0]);
}

#[test]
fn topk_of_a_large_row_matches_a_full_sort() {
    let x = randn(&[1, 100_000], 3);
    let (v, _) = x.topk(100, 1, true).unwrap();
    let mut all = x.to_vec::<f64>().unwrap();
    all.sort_by(|a, b| b.partial_cmp(a).unwrap());
    assert_eq!(v.to_vec::<f64>().unwrap(), all[..100]);
}

#[test]
fn comparisons_and_where() {
    let a = f32s(vec![1., 2., 3.], &[3]);
    let b = f32s(vec![2., 2., 2.], &[3]);
    assert_eq!(a.lt(&b).unwrap().to_vec::<f32>().unwrap(), [1., 0., 0.]);
    assert_eq!(a.le(&b).unwrap().to_vec::<f32>().unwrap(), [1., 1., 0.]);
    assert_eq!(a.gt(&b).unwrap().to_vec::<f32>().unwrap(), [0., 0., 1.]);
    assert_eq!(a.ge(&b).unwrap().to_vec::<f32>().unwrap(), [0., 1., 1.]);
    assert_eq!(a.eq(&b).unwrap().to_vec::<f32>().unwrap(), [0., 1., 0.]);
    assert_eq!(a.ne(&b).unwrap().to_vec::<f32>().unwrap(), [1., 0., 1.]);
    let w = a.gt(&b).unwrap().where_cond(&a, &b.neg().unwrap()).unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), [-2., -2., 3.]);
}

#[test]
fn reductions_values() {
    let x = f32s((0..24).map(|v| v as f32).collect(), &[2, 3, 4]);
    assert_eq!(
        x.sum(&[1], false).unwrap().to_vec::<f32>().unwrap(),
        [12., 15., 18., 21., 48., 51., 54., 57.]
    );
    assert_eq!(
        x.max(&[2], false).unwrap().to_vec::<f32>().unwrap(),
        [3., 7., 11., 15., 19., 23.]
    );
    assert_eq!(
        x.min(&[0, 2], false).unwrap().to_vec::<f32>().unwrap(),
        [0., 4., 8.]
    );
    assert_eq!(
        x.sum(&[0, 2], false).unwrap().to_vec::<f32>().unwrap(),
        [60., 92., 124.]
    );
    assert_eq!(x.mean_all().unwrap().to_scalar::<f32>().unwrap(), 11.5);
    assert_eq!(x.sum(&[1], true).unwrap().dims(), [2, 1, 4]);
}

#[test]
fn large_parallel_paths_match_serial_math() {
    // Above the parallel threshold, and on strided views.
    let x = randn(&[300, 400], 4);
    let y = randn(&[400], 5);
    let got = x.add(&y).unwrap().tanh().unwrap().to_vec::<f64>().unwrap();
    let (xv, yv) = (x.to_vec::<f64>().unwrap(), y.to_vec::<f64>().unwrap());
    let want: Vec<f64> = (0..xv.len())
        .map(|i| (xv[i] + yv[i % 400]).tanh())
        .collect();
    assert_close(&got, &want, 1e-15, "broadcast add + tanh");
    let t = x
        .transpose(0, 1)
        .unwrap()
        .contiguous()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(t[1], xv[400]);
    assert_eq!(t[300], xv[1]);
    // A matmul large enough for gemm's own threading, against a naive f64 product.
    let a = randn(&[96, 80], 6);
    let b = randn(&[80, 72], 7);
    let (av, bv) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
    let mut want = vec![0.0; 96 * 72];
    for i in 0..96 {
        for k in 0..80 {
            for j in 0..72 {
                want[i * 72 + j] += av[i * 80 + k] * bv[k * 72 + j];
            }
        }
    }
    assert_close(
        &a.matmul(&b).unwrap().to_vec::<f64>().unwrap(),
        &want,
        1e-12,
        "matmul",
    );
    let a32 = a.to_dtype(DType::F32).unwrap();
    let b32 = b.to_dtype(DType::F32).unwrap();
    assert_close(
        &a32.matmul(&b32).unwrap().to_vec_f64().unwrap(),
        &want,
        1e-4,
        "matmul f32",
    );
}

#[test]
fn column_sums_of_one_wide_block_match_serial_math() {
    // [rows, features] summed over the rows (a bias gradient): one block, its columns
    // split across threads; and the same over a transposed view (gathered first).
    let (rows, cols) = (40, 5000);
    let x = randn(&[rows, cols], 11);
    let xv = x.to_vec::<f64>().unwrap();
    let want: Vec<f64> = (0..cols)
        .map(|j| (0..rows).map(|i| xv[i * cols + j]).sum())
        .collect();
    let got = x.sum(&[0], false).unwrap().to_vec::<f64>().unwrap();
    assert_close(&got, &want, 1e-12, "column sums");
    let xt = x.transpose(0, 1).unwrap();
    let got = xt.sum(&[1], false).unwrap().to_vec::<f64>().unwrap();
    assert_close(&got, &want, 1e-12, "row sums of the transposed view");
    let m = x.max(&[0], false).unwrap().to_vec::<f64>().unwrap();
    let want_max: Vec<f64> = (0..cols)
        .map(|j| (0..rows).map(|i| xv[i * cols + j]).fold(f64::MIN, f64::max))
        .collect();
    assert_eq!(m, want_max, "column maxima");
}

#[test]
fn f32_softmax_and_cross_entropy_on_wide_rows_match_f64_math() {
    // A language model's shape (many classes, rows not a multiple of the lane count) in
    // f32, whose exponentials are the vectorised ones, against f64 libm arithmetic.
    let (rows, classes) = (7, 10_003);
    let x32 = randn(&[rows, classes], 12)
        .affine(4.0, 0.0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    // The reference works on the f32 inputs, so only the op's own error is measured.
    let xv = x32.to_vec_f64().unwrap();
    let labels: Vec<u32> = (0..rows as u32)
        .map(|r| r * 1_429 % classes as u32)
        .collect();
    let mut want_p = Vec::new();
    let mut want_loss = 0.0;
    for (r, &l) in labels.iter().enumerate() {
        let row = &xv[r * classes..(r + 1) * classes];
        let max = row.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        want_p.extend(row.iter().map(|v| (v - max).exp() / sum));
        want_loss -= row[l as usize] - max - sum.ln();
    }
    want_loss /= rows as f64;
    // Relative to each probability (most are near 1e-4 here), so a row sum that misses a
    // few terms is caught: leaving out the last 3 of 10,003 moves every value by ~3e-4.
    let p = x32.softmax(1).unwrap().to_vec_f64().unwrap();
    let (worst, at) = p
        .iter()
        .zip(&want_p)
        .map(|(a, b)| (a - b).abs() / b)
        .enumerate()
        .fold((0.0, 0), |w, (i, e)| if e > w.0 { (e, i) } else { w });
    assert!(
        worst < 1e-5,
        "softmax f32: relative error {worst:e} at {at}"
    );
    let lsm = x32.log_softmax(1).unwrap().to_vec_f64().unwrap();
    let want_lsm: Vec<f64> = want_p.iter().map(|p| p.ln()).collect();
    assert_close(&lsm, &want_lsm, 1e-5, "log_softmax f32");
    let y = Tensor::from_vec(labels, rows, Device::Cpu).unwrap();
    let loss = x32.cross_entropy(&y, None).unwrap().to_vec_f64().unwrap()[0];
    assert!(
        (loss - want_loss).abs() < 1e-5 * want_loss.abs().max(1.0),
        "cross-entropy f32 {loss} against {want_loss}"
    );
}

#[test]
fn softmax_rows_sum_to_one_and_are_stable() {
    let x = f32s(vec![1000., 1001., 1002., -5., 0., 5.], &[2, 3]);
    let s = x
        .softmax(1)
        .unwrap()
        .sum(&[1], false)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(s.iter().all(|v| (v - 1.0).abs() < 1e-6), "{s:?}");
    let l = x.log_softmax(1).unwrap().to_vec::<f32>().unwrap();
    assert!(l.iter().all(|v| v.is_finite()));
}

#[test]
fn batch_norm_training_normalises_each_channel() {
    let x = randn(&[8, 3, 4, 4], 8).affine(3.0, 2.0).unwrap();
    let one = Tensor::ones(vec![3], DType::F64, Device::Cpu).unwrap();
    let zero = Tensor::zeros(vec![3], DType::F64, Device::Cpu).unwrap();
    let out = x.batch_norm(&one, &zero, None, 1e-5).unwrap();
    let mean = out
        .output
        .mean(&[0, 2, 3], false)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let var = out
        .output
        .sqr()
        .unwrap()
        .mean(&[0, 2, 3], false)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!(mean.iter().all(|m| m.abs() < 1e-12), "{mean:?}");
    assert!(var.iter().all(|v| (v - 1.0).abs() < 1e-4), "{var:?}");
    assert_eq!(out.count, 8 * 16);
    let direct = x.transpose(0, 1).unwrap().reshape(vec![3, 128]).unwrap();
    let want_mean = direct.mean(&[1], false).unwrap().to_vec::<f64>().unwrap();
    assert_close(
        &out.mean.to_vec::<f64>().unwrap(),
        &want_mean,
        1e-12,
        "batch mean",
    );
}

#[test]
fn no_grad_records_nothing_and_assign_updates_views_in_place() {
    let w = randn(&[2, 3], 9).to_var();
    let y = no_grad(|| w.sqr().unwrap());
    assert!(!y.tracks_grad());
    assert!(w.sqr().unwrap().tracks_grad());
    let view = w.narrow(1, 1, 2).unwrap();
    let new = Tensor::zeros(vec![2, 2], DType::F64, Device::Cpu).unwrap();
    view.assign(&new).unwrap();
    let after = w.to_vec::<f64>().unwrap();
    assert_eq!([after[1], after[2], after[4], after[5]], [0.0; 4]);
    assert_ne!(after[0], 0.0);
}

#[test]
fn half_precision_round_trips() {
    let x = f32s(vec![1.0, -2.5, 0.1, 65504.0], &[4]);
    let h = x.to_f16_vec().unwrap();
    let back = Tensor::from_f16(&h, 4, Device::Cpu)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(back[..2], [1.0, -2.5]);
    assert!((back[2] - 0.1).abs() < 1e-4);
    assert_eq!(back[3], 65504.0);
    let b = Tensor::from_bf16(&x.to_bf16_vec().unwrap(), 4, Device::Cpu)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!((b[2] - 0.1).abs() < 1e-3);
}

#[test]
fn dropout_is_reproducible_from_a_seed_and_unbiased() {
    let x = Tensor::ones(vec![100_000], DType::F32, Device::Cpu).unwrap();
    let a = x
        .dropout(0.25, &mut Rng::new(11))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let b = x
        .dropout(0.25, &mut Rng::new(11))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(a, b);
    let mean = a.iter().map(|&v| v as f64).sum::<f64>() / a.len() as f64;
    assert!((mean - 1.0).abs() < 0.01, "{mean}");
    let zeros = a.iter().filter(|&&v| v == 0.0).count() as f64 / a.len() as f64;
    assert!((zeros - 0.25).abs() < 0.01, "{zeros}");
}

#[test]
fn tensors_cross_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
}

/// Reductions of tensors with a zero-size axis: a sum over no values is zero and an empty
/// kept axis gives an empty result (the kernels once asked for chunks of length 0 and
/// panicked); the extremum of no values is an error.
#[test]
fn reductions_of_empty_tensors() {
    let x = Tensor::zeros(vec![2, 0], DType::F32, Device::Cpu).unwrap();
    let s = x.sum(&[0], false).unwrap();
    assert_eq!(s.dims(), [0]);
    assert_eq!(x.sum(&[0], true).unwrap().dims(), [1, 0]);
    let s1 = x.sum(&[1], false).unwrap();
    assert_eq!(s1.to_vec::<f32>().unwrap(), [0., 0.]);
    assert_eq!(x.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    assert_eq!(x.mean(&[0], false).unwrap().dims(), [0]);
    // The non-adjacent path: axes 0 and 2 of [2, 0, 3] keep the empty axis 1.
    let y = Tensor::zeros(vec![2, 0, 3], DType::F64, Device::Cpu).unwrap();
    assert_eq!(y.sum(&[0, 2], false).unwrap().dims(), [0]);
    assert_eq!(
        y.sum(&[1], false).unwrap().to_vec::<f64>().unwrap(),
        [0.0; 6]
    );
    // Max over a non-empty axis of an empty tensor is empty; over the empty axis, an error.
    assert_eq!(x.max(&[0], false).unwrap().dims(), [0]);
    let e = x.max(&[1], false).unwrap_err().to_string();
    assert!(
        e.contains("max") && e.contains("dimension 1") && e.contains("size 0"),
        "{e}"
    );
    let e = x.argmax(1, false).unwrap_err().to_string();
    assert!(e.contains("argmax") && e.contains("size 0"), "{e}");
    assert_eq!(x.argmax(0, false).unwrap().dims(), [0]);
    // Backward through both sums: the gradient has the input's (empty) shape.
    let v = Tensor::zeros(vec![2, 0], DType::F64, Device::Cpu)
        .unwrap()
        .to_var();
    let g = v
        .sum(&[0], false)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(g.get(&v).unwrap().dims(), [2, 0]);
    let loss = v.sum(&[1], false).unwrap().sum_all().unwrap();
    assert_eq!(loss.to_scalar::<f64>().unwrap(), 0.0);
    assert_eq!(loss.backward().unwrap().get(&v).unwrap().dims(), [2, 0]);
}

/// Ties at a max or min share the gradient evenly (PyTorch's amax/amin), so the input's
/// gradient sums to the upstream one; a unique extremum gets all of it.
#[test]
fn extremum_ties_split_the_gradient() {
    let a = f32s(vec![2., 2.], &[2]).to_var();
    let g = a.max(&[0], false).unwrap().backward().unwrap();
    assert_eq!(g.get(&a).unwrap().to_vec::<f32>().unwrap(), [0.5, 0.5]);
    // Per row: three ties, two ties, none; through keepdim=false and a scaled upstream.
    let x = f32s(
        vec![1., 5., 5., 5., 3., 3., 0., 4., 7., -1., 7., 2.],
        &[3, 4],
    )
    .to_var();
    let g = x
        .max(&[1], false)
        .unwrap()
        .scale(6.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        g.get(&x).unwrap().to_vec::<f32>().unwrap(),
        [0., 2., 2., 2., 0., 0., 0., 6., 3., 0., 3., 0.]
    );
    // Min over two axes at once: the ties are counted over both (channel 0's two zeros
    // sit in different batch entries; channel 1's zero is alone).
    let y = f32s(vec![1., 0., 0., 2., 0., 3., 4., 5.], &[2, 2, 2]).to_var();
    let g = y
        .min(&[0, 2], true)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        g.get(&y).unwrap().to_vec::<f32>().unwrap(),
        [0., 0.5, 1., 0., 0.5, 0., 0., 0.]
    );
    // A NaN maximum equals no element: the gradient is zero, not NaN.
    let n = f32s(vec![1., f32::NAN], &[2]).to_var();
    let g = n.max(&[0], false).unwrap().backward().unwrap();
    assert_eq!(g.get(&n).unwrap().to_vec::<f32>().unwrap(), [0., 0.]);
}

/// NaN is not turned into a number by relu, clamp, maximum or minimum (PyTorch's rule).
#[test]
fn nan_passes_through_relu_clamp_maximum_and_minimum() {
    let nan = Tensor::from_vec(vec![f32::NAN, 2.0], vec![2], Device::Cpu).unwrap();
    let zero = Tensor::zeros(vec![2], DType::F32, Device::Cpu).unwrap();
    let first = |t: Tensor| t.to_vec::<f32>().unwrap()[0];
    assert!(first(nan.relu().unwrap()).is_nan());
    assert!(first(nan.clamp(-1.0, 1.0).unwrap()).is_nan());
    assert!(first(nan.maximum(&zero).unwrap()).is_nan());
    assert!(first(zero.maximum(&nan).unwrap()).is_nan());
    assert!(first(nan.minimum(&zero).unwrap()).is_nan());
    assert!(first(zero.minimum(&nan).unwrap()).is_nan());
    // Numbers are unchanged: 2 → relu 2, clamp 1, maximum 2, minimum 0.
    let second = |t: Tensor| t.to_vec::<f32>().unwrap()[1];
    assert_eq!(second(nan.relu().unwrap()), 2.0);
    assert_eq!(second(nan.clamp(-1.0, 1.0).unwrap()), 1.0);
    assert_eq!(second(nan.maximum(&zero).unwrap()), 2.0);
    assert_eq!(second(nan.minimum(&zero).unwrap()), 0.0);
}

/// Releasing a long graph is iterative: the last handle to a chain of 200,000 ops used
/// to recurse once per node as it dropped and overflowed a 2 MiB stack (forward and
/// backward, both iterative, ran fine). Run on a thread with that stack.
#[test]
fn a_long_graph_drops_without_recursion() {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let x = Tensor::from_vec(vec![1f32], 1, Device::Cpu)
                .unwrap()
                .to_var();
            let mut y = x.clone();
            for _ in 0..200_000 {
                y = y.affine(1.0, 1.0).unwrap();
            }
            assert_eq!(y.to_vec::<f32>().unwrap(), [200_001.0]);
            drop(y);
            // The leaf outlives the chain and is intact.
            assert_eq!(x.to_vec::<f32>().unwrap(), [1.0]);
        })
        .unwrap()
        .join()
        .expect("dropping the chain must not overflow the stack");
}

/// x⁰'s gradient is zero everywhere, as in PyTorch, where e·x^(e−1) is 0·∞ = NaN at 0.
#[test]
fn the_gradient_of_x_to_the_zero_is_zero_at_zero() {
    let x = Tensor::from_vec(vec![0f32, 2.0], 2, Device::Cpu)
        .unwrap()
        .to_var();
    let grads = x.powf(0.0).unwrap().sum_all().unwrap().backward().unwrap();
    let g = grads.get(&x).expect("a gradient for x");
    assert_eq!(g.to_vec::<f32>().unwrap(), [0.0, 0.0]);
}
