//! Bad input is an error that names the op and the shapes or values, never a panic.

use tensor::{Conv2dOptions, DType, Device, Error, Pool2dOptions, Tensor};

fn t(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape.to_vec(), DType::F32, Device::Cpu).unwrap()
}

fn msg(r: tensor::Result<impl std::fmt::Debug>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn shape_mismatches_name_both_shapes() {
    let m = msg(t(&[2, 3]).add(&t(&[4, 3])));
    assert!(
        m.contains("[2, 3]") && m.contains("[4, 3]") && m.contains("add"),
        "{m}"
    );
    let m = msg(t(&[2, 3]).matmul(&t(&[4, 5])));
    assert!(
        m.contains("matmul") && m.contains("[2, 3]") && m.contains("[4, 5]"),
        "{m}"
    );
    let m = msg(t(&[6]).reshape(vec![4, 2]));
    assert!(
        m.contains("reshape") && m.contains("[6]") && m.contains("[4, 2]"),
        "{m}"
    );
    let m = msg(Tensor::cat(&[t(&[2, 3]), t(&[2, 4])], 0));
    assert!(m.contains("cat"), "{m}");
    let m = msg(t(&[1, 4, 5, 5]).conv2d(&t(&[8, 3, 3, 3]), Conv2dOptions::default()));
    assert!(m.contains("conv2d") && m.contains("[8, 3, 3, 3]"), "{m}");
    let m = msg(t(&[1, 4, 2, 2]).conv2d(&t(&[8, 4, 3, 3]), Conv2dOptions::default()));
    assert!(m.contains("does not fit"), "{m}");
    let m = msg(t(&[1, 2, 3, 3]).max_pool2d(Pool2dOptions::square(4)));
    assert!(m.contains("max_pool2d"), "{m}");
    let m = msg(t(&[4, 3, 2]).batch_norm(&t(&[2]), &t(&[3]), None, 1e-5));
    assert!(m.contains("batch_norm"), "{m}");
    let m = msg(Tensor::from_vec(vec![1.0f32; 5], vec![2, 3], Device::Cpu));
    assert!(m.contains("5 elements") && m.contains("[2, 3]"), "{m}");
    let m = msg(t(&[2, 3]).sum(&[2], false));
    assert!(m.contains("dimension 2") && m.contains("rank 2"), "{m}");
    let m = msg(t(&[2, 3]).narrow(1, 2, 2));
    assert!(m.contains("narrow") && m.contains("2..4"), "{m}");
}

#[test]
fn wrong_dtypes_are_refused() {
    let f64t = Tensor::zeros(vec![2], DType::F64, Device::Cpu).unwrap();
    assert!(matches!(
        t(&[2]).add(&f64t),
        Err(Error::DTypeMismatch { .. })
    ));
    let ids = Tensor::from_vec(vec![1u32, 2], 2, Device::Cpu).unwrap();
    assert!(matches!(ids.exp(), Err(Error::UnsupportedDType { .. })));
    // Labels must be indices.
    let m = msg(t(&[2, 3]).cross_entropy(&t(&[2]), None));
    assert!(m.contains("u32"), "{m}");
    assert!(matches!(
        ids.to_vec::<f32>(),
        Err(Error::DTypeMismatch { .. })
    ));
}

#[test]
fn out_of_range_indices_and_labels() {
    let table = t(&[5, 2]);
    let ids = Tensor::from_vec(vec![1u32, 7], 2, Device::Cpu).unwrap();
    let m = msg(table.embedding(&ids));
    assert!(m.contains("index 7") && m.contains("size 5"), "{m}");
    let labels = Tensor::from_vec(vec![0u32, 3], 2, Device::Cpu).unwrap();
    let m = msg(t(&[2, 3]).cross_entropy(&labels, None));
    assert!(m.contains("label 3") && m.contains("3 classes"), "{m}");
    let m =
        msg(t(&[2, 3]).cross_entropy(&Tensor::from_vec(vec![0u32], 1, Device::Cpu).unwrap(), None));
    assert!(m.contains("[2, 3]") && m.contains("[1]"), "{m}");
    let m = msg(t(&[2, 3]).topk(4, 1, true));
    assert!(m.contains("k = 4"), "{m}");
    let m = msg(t(&[3]).dropout(1.5, &mut tensor::Rng::new(0)));
    assert!(m.contains("probability"), "{m}");
    // p = 1 drops everything, as PyTorch's dropout does.
    let z = t(&[3]).dropout(1.0, &mut tensor::Rng::new(0)).unwrap();
    assert_eq!(z.to_vec::<f32>().unwrap(), [0.0; 3]);
}

#[test]
fn cuda_is_an_error_not_a_panic_and_auto_falls_back_to_the_cpu() {
    if tensor::cuda::is_available(0) {
        return; // tests/cuda.rs covers machines with a GPU
    }
    assert_eq!(Device::cuda_if_available(0), Device::Cpu);
    assert!(matches!(
        Tensor::zeros(vec![2], DType::F32, Device::Cuda(0)),
        Err(Error::CudaUnavailable(0, _))
    ));
}

#[test]
fn backward_needs_a_graph_and_a_scalar() {
    let m = msg(t(&[1]).backward().map(|_| ()));
    assert!(m.contains("does not depend on any variable"), "{m}");
    let v = t(&[3]).to_var();
    let m = msg(v.sqr().unwrap().backward().map(|_| ()));
    assert!(m.contains("one-element"), "{m}");
    let m = msg(tensor::no_grad(|| v.sqr().unwrap().sum_all().unwrap())
        .backward()
        .map(|_| ()));
    assert!(m.contains("no_grad"), "{m}");
}

// Zero-size dimensions used to panic in the CPU kernels, which split their buffers into
// chunks of length 0. Now an empty input is an empty result where that is well defined,
// and a shape error where the op has nothing to compute from (PyTorch's rule: only the
// batch of a convolution or pooling may be empty).

/// Batch norm of an empty input is an empty output, forward and backward.
#[test]
fn batch_norm_of_an_empty_input() {
    let (w, b) = (t(&[3]).to_var(), t(&[3]));
    let (rm, rv) = (
        t(&[3]),
        Tensor::ones(vec![3], DType::F32, Device::Cpu).unwrap(),
    );
    let x = t(&[2, 3, 0]).to_var();
    let y = x.batch_norm(&w, &b, Some((&rm, &rv)), 1e-5).unwrap().output;
    assert_eq!(y.dims(), [2, 3, 0]);
    let g = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&x).unwrap().dims(), [2, 3, 0]);
    assert_eq!(g.get(&w).unwrap().to_vec::<f32>().unwrap(), [0.0; 3]);
    // Training has no values to take statistics from.
    let m = msg(x.batch_norm(&w, &b, None, 1e-5));
    assert!(m.contains("batch_norm"), "{m}");
}

/// A convolution without input or output channels, or over an empty plane, is refused;
/// an empty batch is an empty result, forward and backward.
#[test]
fn conv2d_with_zero_size_dimensions() {
    let padded = Conv2dOptions {
        padding: (1, 1),
        ..Default::default()
    };
    // No output channels.
    let m = msg(t(&[1, 3, 8, 8]).conv2d(&t(&[0, 3, 3, 3]), Conv2dOptions::default()));
    assert!(
        m.contains("conv2d") && m.contains("[0, 3, 3, 3]") && m.contains("non-zero"),
        "{m}"
    );
    // No input channels (the forward is refused, so the backward that panicked cannot be
    // reached).
    let m = msg(t(&[1, 0, 8, 8])
        .to_var()
        .conv2d(&t(&[4, 0, 3, 3]).to_var(), padded));
    assert!(m.contains("conv2d") && m.contains("[1, 0, 8, 8]"), "{m}");
    // An empty plane, which padding would otherwise make "fit" a 1x1 kernel.
    let m = msg(t(&[1, 3, 0, 8]).conv2d(&t(&[4, 3, 1, 1]), padded));
    assert!(m.contains("conv2d") && m.contains("non-zero"), "{m}");
    // An empty batch is fine.
    let (xe, we) = (t(&[0, 3, 8, 8]).to_var(), t(&[4, 3, 3, 3]).to_var());
    let ye = xe.conv2d(&we, padded).unwrap();
    assert_eq!(ye.dims(), [0, 4, 8, 8]);
    let g = ye.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&xe).unwrap().dims(), [0, 3, 8, 8]);
    assert_eq!(g.get(&we).unwrap().to_vec::<f32>().unwrap(), [0.0; 4 * 27]);
}

/// Pooling an empty plane (kernel 2 with padding 1 "fits" a height of 0) or no channels
/// is refused; an empty batch is an empty result, forward and backward.
#[test]
fn pool2d_with_zero_size_dimensions() {
    let o = Pool2dOptions {
        kernel: (2, 2),
        stride: (2, 2),
        padding: (1, 1),
    };
    for x in [t(&[1, 1, 0, 4]), t(&[1, 1, 4, 0]), t(&[1, 0, 4, 4])] {
        let m = msg(x.to_var().max_pool2d(o));
        assert!(m.contains("max_pool2d") && m.contains("non-zero"), "{m}");
        let m = msg(x.avg_pool2d(o));
        assert!(m.contains("avg_pool2d"), "{m}");
    }
    let xe = t(&[0, 2, 4, 4]).to_var();
    let ye = xe.max_pool2d(o).unwrap();
    assert_eq!(ye.dims(), [0, 2, 3, 3]);
    let g = ye.sum_all().unwrap().backward().unwrap();
    assert_eq!(g.get(&xe).unwrap().dims(), [0, 2, 4, 4]);
}

/// Sizes whose arithmetic would wrap are errors (in release builds they used to pass the
/// checks and reach the kernels' raw pointers).
#[test]
fn sizes_that_overflow_are_errors() {
    let m = msg(t(&[4]).narrow(0, usize::MAX, 1));
    assert!(m.contains("narrow") && m.contains("exceeds"), "{m}");
    let m = msg(Tensor::from_vec(
        Vec::<f32>::new(),
        vec![1usize << 33, 1 << 33],
        Device::Cpu,
    ));
    assert!(m.contains("overflows"), "{m}");
    let m = msg(Tensor::zeros(
        vec![1usize << 40, 1 << 40],
        DType::F32,
        Device::Cpu,
    ));
    assert!(m.contains("overflows"), "{m}");
    let m = msg(t(&[6]).reshape(vec![usize::MAX, usize::MAX]));
    assert!(m.contains("more than one dimension"), "{m}");
    // No elements, but strides of 2⁶⁶: refused wherever the zero stands (the leading one
    // passed, and its strides wrapped).
    for dims in [vec![0usize, 1 << 33, 1 << 33], vec![1 << 33, 1 << 33, 0]] {
        let m = msg(Tensor::zeros(dims.clone(), DType::F32, Device::Cpu));
        assert!(m.contains("overflows"), "{dims:?}: {m}");
        let m = msg(t(&[0]).reshape(dims.clone()));
        assert!(m.contains("overflows"), "{dims:?}: {m}");
    }
    assert_eq!(
        Tensor::zeros(vec![0, 5, 7], DType::F32, Device::Cpu)
            .unwrap()
            .elem_count(),
        0
    );
    let m = msg(t(&[2, 1, 0]).ctc_forward_backward(&[vec![]], &[2]));
    assert!(m.contains("no classes"), "{m}");
}
