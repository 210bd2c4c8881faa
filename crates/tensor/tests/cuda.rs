//! The CUDA backend against the CPU.
//!
//! - `kernels_compile_nvrtc` compiles every kernel module with NVRTC for sm_80 and sm_90;
//!   it needs NVRTC but no GPU. NVRTC is found on the library path or, failing that, in
//!   Python's site-packages (`pip install nvidia-cuda-nvrtc`). Without it the test prints
//!   a skip message, or fails when `REQUIRE_NVRTC=1` (CI).
//! - `test_device!` runs one test body on the CPU (`<name>::cpu`) and, when a GPU is
//!   present, on both devices, comparing every named result (outputs and gradients)
//!   (`<name>::gpu`). Without a GPU the `gpu` tests say so and pass, unless
//!   `REQUIRE_GPU=1` (scripts/gpu-check.sh sets it).
//!
//! Error measure: |gpu - cpu| / max(|cpu|, rms(cpu)), per element, where rms is the root
//! mean square of the CPU tensor: relative error, with values much smaller than the
//! tensor's typical magnitude judged against that magnitude (sums that cancel).

use std::sync::OnceLock;
use tensor::cuda::{self, kernels};
use tensor::{Conv2dOptions, DType, Device, Error, Pool2dOptions, Result, Rng, Tensor};

fn required(var: &str) -> bool {
    std::env::var(var).map(|v| v == "1").unwrap_or(false)
}

/// Makes libnvrtc loadable: if the dynamic loader cannot find it by name, looks for it in
/// Python's site-packages (nvidia/*/lib) and preloads it by full path, after which the
/// by-name dlopen inside cudarc finds the already loaded library.
fn locate_nvrtc() -> Option<String> {
    static FOUND: OnceLock<Option<String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if kernels::nvrtc_available() {
                return Some("on the library path".into());
            }
            let mut dirs: Vec<std::path::PathBuf> = Vec::new();
            if let Ok(d) = std::env::var("NVRTC_LIB_DIR") {
                dirs.push(d.into());
            }
            for py in ["python3", "python"] {
                let out = std::process::Command::new(py)
                    .args([
                        "-c",
                        "import nvidia, os; print(os.pathsep.join(nvidia.__path__))",
                    ])
                    .output();
                if let Ok(out) = out {
                    for root in String::from_utf8_lossy(&out.stdout)
                        .trim()
                        .split(':')
                        .filter(|s| !s.is_empty())
                    {
                        if let Ok(entries) = std::fs::read_dir(root) {
                            dirs.extend(entries.flatten().map(|e| e.path().join("lib")));
                        }
                    }
                }
            }
            for dir in dirs {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                let mut libs: Vec<_> = entries.flatten().map(|e| e.path()).collect();
                // The builtins library first: libnvrtc loads it by name at compile time.
                libs.sort_by_key(|p| !p.to_string_lossy().contains("builtins"));
                let mut ok = false;
                for lib in libs.iter().filter(|p| {
                    let n = p
                        .file_name()
                        .map(|n| n.to_string_lossy().to_string())
                        .unwrap_or_default();
                    n.starts_with("libnvrtc") && n.contains(".so")
                }) {
                    // SAFETY: loading NVIDIA's library runs only its initialisers.
                    let h = unsafe {
                        libloading::os::unix::Library::open(
                            Some(lib),
                            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                        )
                    };
                    if let Ok(h) = h {
                        std::mem::forget(h); // stays loaded for the process
                        ok = true;
                    }
                }
                if ok && kernels::nvrtc_available() {
                    return Some(dir.display().to_string());
                }
            }
            None
        })
        .clone()
}

#[test]
fn kernels_compile_nvrtc() {
    let Some(found) = locate_nvrtc() else {
        assert!(
            !required("REQUIRE_NVRTC"),
            "REQUIRE_NVRTC=1 but NVRTC could not be loaded: pip install nvidia-cuda-nvrtc (or set NVRTC_LIB_DIR / LD_LIBRARY_PATH)"
        );
        eprintln!("skipped: NVRTC could not be loaded (pip install nvidia-cuda-nvrtc)");
        return;
    };
    eprintln!("NVRTC: {found}");
    let mut compiled = 0;
    for m in kernels::MODULES {
        for arch in ["sm_80", "sm_90"] {
            let ptx = kernels::compile(m, arch).unwrap_or_else(|e| panic!("{e}"));
            let text = ptx.to_src();
            for k in m.kernels {
                assert!(
                    text.contains(&format!(".entry {k}(")),
                    "kernels/{}.cu for {arch}: no entry {k} in the PTX",
                    m.name
                );
            }
            compiled += 1;
        }
    }
    eprintln!("compiled {compiled} module/arch pairs");
}

#[test]
fn without_a_driver_cuda_is_an_error_and_auto_picks_the_cpu() {
    if cuda::is_available(0) {
        assert_eq!(Device::cuda_if_available(0), Device::Cuda(0));
        return;
    }
    assert_eq!(Device::cuda_if_available(0), Device::Cpu);
    assert!(matches!(
        Tensor::zeros(vec![2], DType::F32, Device::Cuda(0)),
        Err(Error::CudaUnavailable(0, _))
    ));
    assert!(matches!(
        Tensor::from_vec(vec![1f32], 1, Device::Cuda(3)),
        Err(Error::CudaUnavailable(3, _))
    ));
}

// ------------------------------------------------------------------ the test_device pattern

type Named = Vec<(String, Tensor)>;
type Unary = fn(&Tensor) -> Result<Tensor>;
type Binary = fn(&Tensor, &Tensor) -> Result<Tensor>;

fn gpu_device() -> Option<Device> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        locate_nvrtc();
        cuda::is_available(0)
    });
    if ok {
        return Some(Device::Cuda(0));
    }
    let why = cuda::device(0)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        !required("REQUIRE_GPU"),
        "REQUIRE_GPU=1 but no usable GPU: {why}"
    );
    eprintln!("skipped (no GPU): {why}");
    None
}

fn run_cpu(body: fn(Device) -> Result<Named>) {
    let out = body(Device::Cpu).unwrap_or_else(|e| panic!("CPU run failed: {e}"));
    for (name, t) in &out {
        assert_eq!(t.device(), Device::Cpu, "{name}");
    }
}

fn run_gpu(test: &str, body: fn(Device) -> Result<Named>, tol: f64) {
    let Some(dev) = gpu_device() else { return };
    let want = body(Device::Cpu).unwrap_or_else(|e| panic!("{test}: CPU run failed: {e}"));
    let got = body(dev).unwrap_or_else(|e| panic!("{test}: GPU run failed: {e}"));
    assert_eq!(want.len(), got.len(), "{test}: result count");
    let mut worst = 0f64;
    for ((name, w), (_, g)) in want.iter().zip(&got) {
        // No silent fallback: a GPU run must produce GPU tensors.
        assert_eq!(
            g.device(),
            dev,
            "{test}/{name}: result is on {}",
            g.device()
        );
        assert_eq!(w.dims(), g.dims(), "{test}/{name}: shape");
        assert_eq!(w.dtype(), g.dtype(), "{test}/{name}: dtype");
        let (w, g) = (
            w.to_vec_f64().unwrap_or_else(|e| panic!("{e}")),
            g.to_vec_f64().unwrap_or_else(|e| panic!("{e}")),
        );
        let rms = (w.iter().map(|v| v * v).sum::<f64>() / w.len().max(1) as f64)
            .sqrt()
            .max(1e-30);
        let mut max_err = 0f64;
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            if b.is_nan() {
                assert!(a.is_nan(), "{test}/{name}[{i}]: GPU {a} vs CPU NaN");
                continue;
            }
            let err = (a - b).abs() / b.abs().max(rms);
            assert!(
                err <= tol,
                "{test}/{name}[{i}]: GPU {a} vs CPU {b} (error {err:e} > {tol:e})"
            );
            max_err = max_err.max(err);
        }
        worst = worst.max(max_err);
        eprintln!(
            "  {test}/{name}: {} values, max error {max_err:.2e}",
            w.len()
        );
    }
    eprintln!(
        "GPU-vs-CPU {test}: {} results, worst error {worst:.2e} (tolerance {tol:e})",
        got.len()
    );
}

/// `name::cpu` runs the body on the CPU; `name::gpu` runs it on both and compares.
macro_rules! test_device {
    ($body:ident, $tol:expr) => {
        mod $body {
            #[test]
            fn cpu() {
                super::run_cpu(super::$body)
            }
            #[test]
            fn gpu() {
                super::run_gpu(stringify!($body), super::$body, $tol)
            }
        }
    };
}

fn randn(shape: &[usize], seed: u64, dev: Device) -> Result<Tensor> {
    Tensor::randn(
        shape.to_vec(),
        0.0,
        1.0,
        DType::F32,
        dev,
        &mut Rng::new(seed),
    )
}
fn uniform(shape: &[usize], lo: f64, hi: f64, seed: u64, dev: Device) -> Result<Tensor> {
    Tensor::rand_uniform(shape.to_vec(), lo, hi, DType::F32, dev, &mut Rng::new(seed))
}

/// Backward of `sum(y * r)` for a fixed random `r`; the named gradients of `vars`.
fn grads_of(prefix: &str, y: &Tensor, vars: &[(&str, &Tensor)], dev: Device) -> Result<Named> {
    let r = randn(y.dims(), 777, dev)?;
    let g = y.mul(&r)?.sum_all()?.backward()?;
    let mut out = Vec::new();
    for (name, v) in vars {
        let gv = g
            .get(v)
            .ok_or_else(|| Error::msg(format!("no gradient for {name}")))?;
        out.push((format!("{prefix} d{name}"), gv.clone()));
    }
    Ok(out)
}

fn unary_ops(dev: Device) -> Result<Named> {
    // A transposed view, so every kernel also walks a strided layout.
    let x = randn(&[37, 129], 1, dev)?.transpose(0, 1)?.to_var();
    let pos = uniform(&[300, 41], 0.1, 3.0, 2, dev)?.to_var();
    let mut out = Vec::new();
    let ops: [(&str, Unary); 14] = [
        ("neg", |t| t.neg()),
        ("abs", |t| t.abs()),
        ("sign", |t| t.sign()),
        ("exp", |t| t.exp()),
        ("tanh", |t| t.tanh()),
        ("sigmoid", |t| t.sigmoid()),
        ("relu", |t| t.relu()),
        ("sqr", |t| t.sqr()),
        ("recip", |t| t.recip()),
        ("affine", |t| t.affine(1.5, -0.25)),
        ("clamp", |t| t.clamp(-0.5, 0.7)),
        ("sqrt", |t| t.abs()?.add_scalar(0.1)?.sqrt()),
        ("log", |t| t.abs()?.add_scalar(0.1)?.log()),
        ("powf", |t| t.abs()?.add_scalar(0.1)?.powf(1.7)),
    ];
    for (name, f) in ops {
        let y = f(&x)?;
        out.push((name.to_string(), y.clone()));
        out.extend(grads_of(name, &y, &[("x", &x)], dev)?);
    }
    let y = pos.log()?.add(&pos.sqrt()?)?;
    out.push(("log+sqrt".into(), y.clone()));
    out.extend(grads_of("log+sqrt", &y, &[("pos", &pos)], dev)?);
    Ok(out)
}
test_device!(unary_ops, 1e-5);

fn binary_broadcast_where(dev: Device) -> Result<Named> {
    let a = randn(&[8, 1, 33], 3, dev)?.to_var();
    let b = randn(&[5, 33], 4, dev)?.to_var();
    let mut out = Vec::new();
    let ops: [(&str, Binary); 6] = [
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("div", |a, b| a.div(&b.abs()?.add_scalar(0.5)?)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
    ];
    for (name, f) in ops {
        let y = f(&a, &b)?;
        out.push((name.to_string(), y.clone()));
        out.extend(grads_of(name, &y, &[("a", &a), ("b", &b)], dev)?);
    }
    let cmp: [(&str, Binary); 6] = [
        ("eq", |a, b| a.eq(b)),
        ("ne", |a, b| a.ne(b)),
        ("lt", |a, b| a.lt(b)),
        ("le", |a, b| a.le(b)),
        ("gt", |a, b| a.gt(b)),
        ("ge", |a, b| a.ge(b)),
    ];
    for (name, f) in cmp {
        out.push((name.to_string(), f(&a.detach(), &b.detach())?));
    }
    out.push(("eq self".into(), a.eq(&a)?));
    let c = a.gt(&b)?;
    let y = c.where_cond(
        &a.broadcast_as(vec![8, 5, 33])?,
        &b.sqr()?.broadcast_as(vec![8, 5, 33])?,
    )?;
    out.push(("where".into(), y.clone()));
    out.extend(grads_of("where", &y, &[("a", &a), ("b", &b)], dev)?);
    Ok(out)
}
test_device!(binary_broadcast_where, 1e-5);

fn reductions(dev: Device) -> Result<Named> {
    let x = randn(&[6, 7, 50, 9], 5, dev)?.to_var();
    let mut out = Vec::new();
    for dims in [
        vec![3],
        vec![2],
        vec![0],
        vec![1, 2],
        vec![0, 3],
        vec![0, 1, 2, 3],
    ] {
        let s = x.sum(&dims, false)?;
        out.push((format!("sum{dims:?}"), s.clone()));
        out.extend(grads_of(&format!("sum{dims:?}"), &s, &[("x", &x)], dev)?);
        let m = x.mean(&dims, true)?;
        out.push((format!("mean{dims:?}"), m));
        let mx = x.max(&dims, false)?;
        out.push((format!("max{dims:?}"), mx.clone()));
        out.extend(grads_of(&format!("max{dims:?}"), &mx, &[("x", &x)], dev)?);
        out.push((format!("min{dims:?}"), x.min(&dims, false)?));
    }
    for d in 0..4 {
        out.push((
            format!("argmax{d}"),
            x.argmax(d, false)?.to_dtype(DType::F32)?,
        ));
    }
    // Strided input: a permuted view.
    let p = x.permute(&[3, 1, 0, 2])?;
    out.push(("sum of permuted".into(), p.sum(&[1, 3], false)?));
    // A long reduction (one block walks 1M values).
    let big = randn(&[1 << 20], 6, dev)?;
    out.push(("sum 1M".into(), big.sum_all()?));
    out.push(("max 1M".into(), big.max(&[0], false)?));
    Ok(out)
}
test_device!(reductions, 1e-5);

fn matmul(dev: Device) -> Result<Named> {
    let mut out = Vec::new();
    for (m, k, n) in [(1, 1, 1), (64, 128, 32), (127, 255, 129)] {
        let a = randn(&[m, k], 7, dev)?.to_var();
        let b = randn(&[k, n], 8, dev)?.to_var();
        let y = a.matmul(&b)?;
        out.push((format!("{m}x{k}x{n}"), y.clone()));
        out.extend(grads_of(
            &format!("{m}x{k}x{n}"),
            &y,
            &[("a", &a), ("b", &b)],
            dev,
        )?);
    }
    let a = randn(&[4, 3, 20, 30], 9, dev)?.to_var();
    let b = randn(&[4, 3, 30, 10], 10, dev)?.to_var();
    let y = a.matmul(&b)?;
    out.push(("batched".into(), y.clone()));
    out.extend(grads_of("batched", &y, &[("a", &a), ("b", &b)], dev)?);
    // Shared 2-d right side, and transposed views on both sides (no copies on the GPU).
    let w = randn(&[10, 30], 11, dev)?.to_var();
    let y = a.matmul(&w.transpose(0, 1)?)?;
    out.push(("shared rhs, transposed".into(), y.clone()));
    out.extend(grads_of("shared rhs", &y, &[("a", &a), ("w", &w)], dev)?);
    let at = randn(&[3, 30, 20], 12, dev)?.to_var();
    let y = at
        .transpose(1, 2)?
        .matmul(&b.narrow(0, 0, 1)?.squeeze(0)?)?;
    out.push(("lhs transposed".into(), y.clone()));
    out.extend(grads_of("lhs transposed", &y, &[("at", &at)], dev)?);
    // A view cuBLAS cannot read in place (column slices of a permutation): copied first.
    let odd = randn(&[30, 4, 20], 13, dev)?
        .permute(&[1, 2, 0])?
        .narrow(1, 3, 10)?;
    out.push(("strided view".into(), odd.matmul(&w.transpose(0, 1)?)?));
    Ok(out)
}
test_device!(matmul, 1e-5);

fn copies_and_casts(dev: Device) -> Result<Named> {
    let x = randn(&[5, 6, 7], 14, dev)?;
    let mut out = vec![
        ("to f64".into(), x.to_dtype(DType::F64)?),
        (
            "f64 to f32".into(),
            x.to_dtype(DType::F64)?.to_dtype(DType::F32)?,
        ),
        (
            "to u32 (scaled)".into(),
            x.affine(10.0, 0.0)?
                .to_dtype(DType::U32)?
                .to_dtype(DType::F32)?,
        ),
        (
            "contiguous permuted".into(),
            x.permute(&[2, 0, 1])?.contiguous()?,
        ),
        (
            "cat".into(),
            Tensor::cat(&[x.clone(), x.narrow(1, 2, 3)?], 1)?,
        ),
        (
            "broadcast".into(),
            x.narrow(0, 0, 1)?
                .broadcast_as(vec![4, 6, 7])?
                .contiguous()?,
        ),
    ];
    // assign into a strided view (copy_into).
    let dst = Tensor::zeros(vec![5, 6, 7], DType::F32, dev)?;
    dst.narrow(2, 1, 4)?.assign(&randn(&[5, 6, 4], 15, dev)?)?;
    out.push(("assign into view".into(), dst));
    let f = Tensor::full(2.5, vec![3, 3], DType::F64, dev)?;
    out.push(("full f64".into(), f));
    let u = Tensor::arange_u32(100, dev)?;
    out.push(("u32 roundtrip".into(), u.to_dtype(DType::F32)?));
    // Large enough for the pinned staging path (> 64 KiB) in both directions.
    let big = randn(&[300_000], 16, dev)?;
    out.push(("large".into(), big.affine(2.0, 1.0)?));
    // to_device is differentiable.
    let v = randn(&[4, 4], 17, Device::Cpu)?.to_var();
    let y = v.to_device(dev)?.sqr()?;
    out.push(("to_device".into(), y.clone()));
    let r = randn(&[4, 4], 18, dev)?;
    let g = y.mul(&r)?.sum_all()?.backward()?;
    let gv = g
        .get(&v)
        .ok_or_else(|| Error::msg("no gradient through to_device"))?;
    assert_eq!(gv.device(), Device::Cpu);
    out.push(("to_device grad".into(), gv.to_device(dev)?));
    Ok(out)
}
test_device!(copies_and_casts, 1e-5);

fn softmax_and_cross_entropy(dev: Device) -> Result<Named> {
    let x = randn(&[37, 1000], 19, dev)?.to_var();
    let mut out = Vec::new();
    let s = x.softmax(1)?;
    out.push(("softmax".into(), s.clone()));
    out.extend(grads_of("softmax", &s, &[("x", &x)], dev)?);
    let l = x.log_softmax(1)?;
    out.push(("log_softmax".into(), l.clone()));
    out.extend(grads_of("log_softmax", &l, &[("x", &x)], dev)?);
    let z = randn(&[64, 10], 20, dev)?.to_var();
    let labels: Vec<u32> = (0..64).map(|i| (i * 7 % 10) as u32).collect();
    let lt = Tensor::from_vec(labels.clone(), 64, dev)?;
    let ce = z.cross_entropy(&lt, None)?;
    out.push(("cross_entropy".into(), ce.clone()));
    out.extend(grads_of("cross_entropy", &ce, &[("z", &z)], dev)?);
    let ce = z.cross_entropy(&lt, Some(3))?;
    out.push(("cross_entropy ignore 3".into(), ce.clone()));
    out.extend(grads_of("cross_entropy ignore", &ce, &[("z", &z)], dev)?);
    // A bad label is an error on every device: at once on the CPU, at the next
    // synchronisation (here, reading the loss) on the GPU, whose kernels check labels
    // themselves rather than reading them to the host in every step.
    let bad = Tensor::from_vec(vec![11u32; 64], 64, dev)?;
    let e = z.cross_entropy(&bad, None).and_then(|l| l.to_vec_f64());
    assert!(
        matches!(&e, Err(e) if e.to_string().contains("label 11")),
        "{e:?}"
    );
    // The fault is reported once: the same op with good labels works afterwards.
    let ce = z.cross_entropy(&lt, None)?;
    out.push(("cross_entropy after a bad label".into(), ce));
    Ok(out)
}
test_device!(softmax_and_cross_entropy, 1e-5);

/// The fused recurrent cells (kernels/rnn.cu), forward and backward, at the 2 × 1500
/// language model's width (a batch of 20) and a small odd size.
fn rnn_cells(dev: Device) -> Result<Named> {
    let mut out = Vec::new();
    for (n, h) in [(20, 1500), (3, 7)] {
        let gates = randn(&[n, 4 * h], 60, dev)?.to_var();
        let c_prev = randn(&[n, h], 61, dev)?.to_var();
        let hc = Tensor::lstm_cell(&gates, &c_prev)?;
        out.push((format!("lstm_cell {n}x{h}"), hc.clone()));
        out.extend(grads_of(
            &format!("lstm_cell {n}x{h}"),
            &hc,
            &[("gates", &gates), ("c_prev", &c_prev)],
            dev,
        )?);
        let gx = randn(&[n, 3 * h], 62, dev)?.to_var();
        let gh = randn(&[n, 3 * h], 63, dev)?.to_var();
        let h_prev = randn(&[n, h], 64, dev)?.to_var();
        let y = Tensor::gru_cell(&gx, &gh, &h_prev)?;
        out.push((format!("gru_cell {n}x{h}"), y.clone()));
        out.extend(grads_of(
            &format!("gru_cell {n}x{h}"),
            &y,
            &[("gx", &gx), ("gh", &gh), ("h_prev", &h_prev)],
            dev,
        )?);
    }
    Ok(out)
}
test_device!(rnn_cells, 1e-5);

/// CTC's forward-backward (kernels/ctc.cu): DeepSpeech-like sizes (29 classes), repeated
/// labels (no skip between equal labels), shorter input lengths, and a sample whose
/// target cannot be aligned (+inf loss, zero gradient).
fn ctc(dev: Device) -> Result<Named> {
    let (t, n, c) = (50, 4, 29);
    let lp = randn(&[t, n, c], 70, dev)?.log_softmax(2)?;
    let targets = vec![
        vec![3, 4, 5, 6],
        vec![7, 7, 8, 1, 1, 2],
        (1..29).collect::<Vec<u32>>(),
        vec![9; 30], // 30 labels with repeats need 59 frames: unalignable in 40
    ];
    let lengths = [50, 31, 47, 40];
    let (nll, grad) = lp.ctc_forward_backward(&targets, &lengths)?;
    assert_eq!((nll.device(), nll.dtype()), (dev, DType::F64));
    let nll = nll.to_vec::<f64>()?;
    assert!(nll[3].is_infinite() && nll[..3].iter().all(|l| l.is_finite()));
    let finite: Vec<f64> = nll[..3].to_vec();
    Ok(vec![
        ("nll".into(), Tensor::from_vec(finite, 3, dev)?),
        ("grad".into(), grad),
    ])
}
test_device!(ctc, 1e-5);

fn convolution(dev: Device) -> Result<Named> {
    let mut out = Vec::new();
    let cases = [
        (
            "3x3 pad1",
            [4, 3, 16, 16],
            [8, 3, 3, 3],
            Conv2dOptions {
                padding: (1, 1),
                ..Default::default()
            },
        ),
        (
            "stride2",
            [2, 4, 15, 13],
            [6, 4, 3, 3],
            Conv2dOptions {
                stride: (2, 2),
                padding: (1, 1),
                ..Default::default()
            },
        ),
        (
            "dilated",
            [2, 3, 12, 12],
            [4, 3, 3, 3],
            Conv2dOptions {
                dilation: (2, 2),
                padding: (2, 1),
                ..Default::default()
            },
        ),
        (
            "groups",
            [3, 6, 10, 10],
            [9, 2, 3, 3],
            Conv2dOptions {
                groups: 3,
                padding: (1, 1),
                ..Default::default()
            },
        ),
        (
            "1x1",
            [2, 16, 8, 8],
            [32, 16, 1, 1],
            Conv2dOptions::default(),
        ),
        // 1×1 stride 1 is a plain product on the GPU (no im2col); grouped, and strided
        // (which keeps the im2col path), to cover both sides of that switch.
        (
            "1x1 groups",
            [3, 8, 5, 7],
            [12, 4, 1, 1],
            Conv2dOptions {
                groups: 2,
                ..Default::default()
            },
        ),
        (
            "1x1 stride 2",
            [2, 16, 9, 9],
            [8, 16, 1, 1],
            Conv2dOptions {
                stride: (2, 2),
                ..Default::default()
            },
        ),
        (
            "5x3 rect",
            [2, 3, 11, 9],
            [4, 3, 5, 3],
            Conv2dOptions {
                stride: (1, 2),
                ..Default::default()
            },
        ),
    ];
    for (i, (name, xs, ws, o)) in cases.into_iter().enumerate() {
        let x = randn(&xs, 30 + i as u64, dev)?.to_var();
        let w = randn(&ws, 40 + i as u64, dev)?.affine(0.2, 0.0)?.to_var();
        let y = x.conv2d(&w, o)?;
        out.push((name.to_string(), y.clone()));
        out.extend(grads_of(name, &y, &[("x", &x), ("w", &w)], dev)?);
    }
    Ok(out)
}
test_device!(convolution, 1e-5);

fn pooling(dev: Device) -> Result<Named> {
    let x = randn(&[3, 4, 13, 11], 50, dev)?.to_var();
    let mut out = Vec::new();
    let opts = [
        ("2x2", Pool2dOptions::square(2)),
        (
            "3x3 s2 p1",
            Pool2dOptions {
                kernel: (3, 3),
                stride: (2, 2),
                padding: (1, 1),
            },
        ),
        (
            "3x2 s1",
            Pool2dOptions {
                kernel: (3, 2),
                stride: (1, 1),
                padding: (0, 0),
            },
        ),
    ];
    for (name, o) in opts {
        let y = x.max_pool2d(o)?;
        out.push((format!("max {name}"), y.clone()));
        out.extend(grads_of(&format!("max {name}"), &y, &[("x", &x)], dev)?);
        let y = x.avg_pool2d(o)?;
        out.push((format!("avg {name}"), y.clone()));
        out.extend(grads_of(&format!("avg {name}"), &y, &[("x", &x)], dev)?);
    }
    Ok(out)
}
test_device!(pooling, 1e-5);

fn batch_norm(dev: Device) -> Result<Named> {
    let x = randn(&[8, 5, 7, 6], 60, dev)?.affine(2.0, 0.5)?.to_var();
    let w = uniform(&[5], 0.5, 1.5, 61, dev)?.to_var();
    let b = randn(&[5], 62, dev)?.to_var();
    let mut out = Vec::new();
    let t = x.batch_norm(&w, &b, None, 1e-5)?;
    out.push(("train out".into(), t.output.clone()));
    out.push(("train mean".into(), t.mean.clone()));
    out.push(("train var".into(), t.var.clone()));
    out.extend(grads_of(
        "train",
        &t.output,
        &[("x", &x), ("w", &w), ("b", &b)],
        dev,
    )?);
    let rm = randn(&[5], 63, dev)?;
    let rv = uniform(&[5], 0.5, 2.0, 64, dev)?;
    let e = x.batch_norm(&w, &b, Some((&rm, &rv)), 1e-5)?;
    out.push(("eval out".into(), e.output.clone()));
    out.extend(grads_of(
        "eval",
        &e.output,
        &[("x", &x), ("w", &w), ("b", &b)],
        dev,
    )?);
    let x2 = randn(&[16, 12], 65, dev)?.to_var();
    let w2 = uniform(&[12], 0.5, 1.5, 66, dev)?.to_var();
    let b2 = randn(&[12], 67, dev)?.to_var();
    let t2 = x2.batch_norm(&w2, &b2, None, 1e-5)?;
    out.push(("2-d out".into(), t2.output.clone()));
    out.extend(grads_of(
        "2-d",
        &t2.output,
        &[("x", &x2), ("w", &w2), ("b", &b2)],
        dev,
    )?);
    Ok(out)
}
test_device!(batch_norm, 1e-5);

fn index_select_and_add(dev: Device) -> Result<Named> {
    let table = randn(&[50, 16], 70, dev)?.to_var();
    let ids: Vec<u32> = (0..40)
        .map(|i| (i * 13 % 50) as u32)
        .chain([3, 3, 3])
        .collect();
    let idt = Tensor::from_vec(ids, 43, dev)?;
    let mut out = Vec::new();
    let e = table.embedding(&idt)?;
    out.push(("embedding".into(), e.clone()));
    out.extend(grads_of("embedding", &e, &[("table", &table)], dev)?);
    let x = randn(&[4, 9, 5], 71, dev)?.to_var();
    let sel = Tensor::from_vec(vec![8u32, 0, 4, 4], 4, dev)?;
    let y = x.index_select(&sel, 1)?;
    out.push(("select dim1".into(), y.clone()));
    out.extend(grads_of("select dim1", &y, &[("x", &x)], dev)?);
    let u = Tensor::arange_u32(20, dev)?.reshape(vec![4, 5])?;
    out.push((
        "select u32".into(),
        u.index_select(&Tensor::from_vec(vec![3u32, 1], 2, dev)?, 0)?
            .to_dtype(DType::F32)?,
    ));
    // Out of range: the CPU's error at once, the GPU's at the next synchronisation.
    let bad = Tensor::from_vec(vec![9u32], 1, dev)?;
    assert!(matches!(
        x.index_select(&bad, 1).and_then(|y| y.to_vec_f64()),
        Err(Error::IndexOutOfRange {
            index: 9,
            size: 9,
            ..
        })
    ));
    let grad = randn(&[4, 1, 5], 72, dev)?;
    assert!(matches!(
        grad.index_add_into(&bad, 1, x.shape())
            .and_then(|y| y.to_vec_f64()),
        Err(Error::IndexOutOfRange {
            index: 9,
            size: 9,
            ..
        })
    ));
    Ok(out)
}
test_device!(index_select_and_add, 1e-5);

/// A training step of a small language model (a staged batch upload, embedding, matrix
/// product, cross-entropy, backward, SGD with momentum) waits for the GPU nowhere: after
/// a first step (which compiles kernels and fills the memory pool), a second adds no host
/// synchronisation.
#[test]
fn training_step_does_not_synchronise() {
    let Some(dev) = gpu_device() else { return };
    let Device::Cuda(ordinal) = dev else { return };
    let gpu = cuda::device(ordinal).unwrap_or_else(|e| panic!("{e}"));
    let run = || -> Result<()> {
        let table = randn(&[50, 16], 90, dev)?.to_var();
        let w = randn(&[16, 10], 91, dev)?.to_var();
        let (mt, mw) = (table.zeros_like()?, w.zeros_like()?);
        let ids = Tensor::from_vec((0..32u32).map(|i| i * 7 % 50).collect(), 32, dev)?;
        let labels = Tensor::from_vec((0..32u32).map(|i| i % 10).collect(), 32, dev)?;
        let step = |first: bool| -> Result<()> {
            // A batch large enough to go through the pinned staging buffer (≥ 64 KiB),
            // whose upload must not wait for the device either.
            let batch = Tensor::from_vec(vec![0.5f32; 1 << 15], 1 << 15, dev)?;
            let loss = table
                .embedding(&ids)?
                .matmul(&w)?
                .cross_entropy(&labels, None)?
                .add(&batch.sum_all()?.scale(0.0)?)?;
            let g = loss.backward()?;
            let h = tensor::SgdStep {
                lr: 0.1,
                momentum: 0.9,
                weight_decay: 1e-4,
                nesterov: false,
                first,
            };
            for (p, m) in [(&table, &mt), (&w, &mw)] {
                let gp = g.get(p).ok_or_else(|| Error::msg("no gradient"))?;
                p.sgd_momentum_(gp, m, h)?;
            }
            Ok(())
        };
        step(true)?;
        gpu.synchronize()?;
        let before = gpu.host_syncs();
        step(false)?;
        let during = gpu.host_syncs() - before;
        gpu.synchronize()?;
        assert_eq!(
            during, 0,
            "a training step waited for the GPU {during} time(s)"
        );
        Ok(())
    };
    run().unwrap_or_else(|e| panic!("{e}"));
}

fn top_k(dev: Device) -> Result<Named> {
    let x = randn(&[7, 1000], 80, dev)?;
    let mut out = Vec::new();
    for (k, largest) in [(1, true), (10, true), (37, false), (1000, true)] {
        let (v, i) = x.topk(k, 1, largest)?;
        out.push((format!("top{k} {largest} values"), v));
        out.push((format!("top{k} {largest} indices"), i.to_dtype(DType::F32)?));
    }
    // Ties: the lower index first, as on the CPU.
    let t = Tensor::from_vec(vec![1f32, 3.0, 3.0, 2.0, 3.0, 0.0], vec![1, 6], dev)?;
    let (v, i) = t.topk(4, 1, true)?;
    out.push(("ties values".into(), v));
    out.push(("ties indices".into(), i.to_dtype(DType::F32)?));
    let (v, _) = x.topk(3, 0, true)?;
    out.push(("along dim 0".into(), v));
    Ok(out)
}
test_device!(top_k, 0.0);

/// The fused SGD-with-momentum update (kernels/optim.cu): three steps of plain and
/// Nesterov momentum with weight decay, the first one setting the buffer.
fn sgd_momentum(dev: Device) -> Result<Named> {
    let mut out = Vec::new();
    for nesterov in [false, true] {
        let p = randn(&[257, 33], 91, dev)?;
        let buf = Tensor::zeros(vec![257, 33], DType::F32, dev)?;
        for step in 0..3 {
            let g = randn(&[257, 33], 92 + step, dev)?;
            let s = tensor::SgdStep {
                lr: 0.1,
                momentum: 0.9,
                weight_decay: 1e-4,
                nesterov,
                first: step == 0,
            };
            p.sgd_momentum_(&g, &buf, s)?;
        }
        out.push((format!("nesterov {nesterov} parameter"), p));
        out.push((format!("nesterov {nesterov} buffer"), buf));
    }
    Ok(out)
}
test_device!(sgd_momentum, 1e-5);

fn dropout(dev: Device) -> Result<Named> {
    let x = randn(&[1000, 33], 90, dev)?.to_var();
    let y = x.dropout(0.3, &mut Rng::new(5))?;
    let kept = y
        .ne(&Tensor::zeros(vec![1], DType::F32, dev)?)?
        .mean_all()?
        .to_scalar::<f32>()?;
    assert!((kept - 0.7).abs() < 0.01, "dropout kept {kept}");
    let mut out = vec![("dropout".to_string(), y.clone())];
    out.extend(grads_of("dropout", &y, &[("x", &x)], dev)?);
    Ok(out)
}
test_device!(dropout, 1e-6);

/// A small CNN built from tensor ops: conv → batch norm → ReLU → max pool → linear →
/// cross-entropy, forward and backward; every parameter's gradient compared.
fn small_model(dev: Device) -> Result<Named> {
    let x = randn(&[16, 3, 16, 16], 100, dev)?;
    let w1 = randn(&[8, 3, 3, 3], 101, dev)?.affine(0.3, 0.0)?.to_var();
    let g1 = Tensor::ones(vec![8], DType::F32, dev)?.to_var();
    let b1 = Tensor::zeros(vec![8], DType::F32, dev)?.to_var();
    let w2 = randn(&[16, 8, 3, 3], 102, dev)?.affine(0.1, 0.0)?.to_var();
    let fc = randn(&[16 * 4 * 4, 10], 103, dev)?
        .affine(0.05, 0.0)?
        .to_var();
    let fb = Tensor::zeros(vec![10], DType::F32, dev)?.to_var();
    let labels = Tensor::from_vec((0..16u32).map(|i| i % 10).collect::<Vec<_>>(), 16, dev)?;
    let h = x.conv2d(
        &w1,
        Conv2dOptions {
            padding: (1, 1),
            ..Default::default()
        },
    )?;
    let h = h
        .batch_norm(&g1, &b1, None, 1e-5)?
        .output
        .relu()?
        .max_pool2d(Pool2dOptions::square(2))?;
    let h = h
        .conv2d(
            &w2,
            Conv2dOptions {
                padding: (1, 1),
                ..Default::default()
            },
        )?
        .relu()?;
    let h = h.avg_pool2d(Pool2dOptions::square(2))?.flatten_from(1)?;
    let logits = h.matmul(&fc)?.add(&fb)?;
    let loss = logits.cross_entropy(&labels, None)?;
    let g = loss.backward()?;
    let mut out = vec![("logits".to_string(), logits), ("loss".to_string(), loss)];
    for (name, v) in [
        ("w1", &w1),
        ("g1", &g1),
        ("b1", &b1),
        ("w2", &w2),
        ("fc", &fc),
        ("fb", &fb),
    ] {
        let gv = g
            .get(v)
            .ok_or_else(|| Error::msg(format!("no gradient for {name}")))?;
        out.push((format!("d{name}"), gv.clone()));
    }
    Ok(out)
}
test_device!(small_model, 1e-4);

/// f64 on the GPU too (gradient checks can run there).
fn f64_ops(dev: Device) -> Result<Named> {
    let mut rng = Rng::new(110);
    let a = Tensor::randn(vec![20, 30], 0.0, 1.0, DType::F64, dev, &mut rng)?.to_var();
    let b = Tensor::randn(vec![30, 10], 0.0, 1.0, DType::F64, dev, &mut rng)?.to_var();
    let y = a.matmul(&b)?.tanh()?.log_softmax(1)?;
    let mut out = vec![("f64 chain".to_string(), y.clone())];
    let g = y.sum_all()?.backward()?;
    out.push((
        "f64 da".into(),
        g.get(&a).ok_or_else(|| Error::msg("no grad"))?.clone(),
    ));
    out.push((
        "f64 db".into(),
        g.get(&b).ok_or_else(|| Error::msg("no grad"))?.clone(),
    ));
    Ok(out)
}
test_device!(f64_ops, 1e-12);

// ------------------------------------------------------------------ GPU-only behaviour

#[test]
fn gpu_mixing_devices_is_an_error() {
    let Some(dev) = gpu_device() else { return };
    let a = Tensor::zeros(vec![3], DType::F32, dev).unwrap();
    let b = Tensor::zeros(vec![3], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(a.add(&b), Err(Error::DeviceMismatch { .. })));
    assert!(a.matmul(&b.reshape(vec![3, 1]).unwrap()).is_err());
    assert!(matches!(
        Tensor::zeros(vec![1], DType::F32, Device::Cuda(99)),
        Err(Error::CudaUnavailable(99, _))
    ));
}

#[test]
fn gpu_side_stream_copies_while_compute_continues() {
    let Some(dev) = gpu_device() else { return };
    let side = cuda::SideStream::new(dev).unwrap();
    let a = randn(&[512, 512], 120, dev).unwrap();
    let g = a.matmul(&a).unwrap(); // queued on the compute stream
    side.wait_for_compute().unwrap();
    let start = side.record().unwrap();
    let host = side.to_vec_f32(&g).unwrap(); // copied on the side stream
    let end = side.record().unwrap();
    end.synchronize().unwrap();
    assert!(end.is_complete());
    let _ = start.elapsed_ms(&end);
    let later = g.relu().unwrap(); // compute stream keeps working meanwhile
    let want = g.to_vec::<f32>().unwrap();
    assert_eq!(host, want);
    let ev = cuda::record_compute_event(dev).unwrap();
    side.wait(&ev).unwrap();
    side.compute_waits().unwrap();
    cuda::synchronize(dev).unwrap();
    assert_eq!(later.dims(), [512, 512]);
}

#[test]
fn gpu_tf32_is_opt_in() {
    let Some(dev) = gpu_device() else { return };
    assert!(!cuda::tf32_allowed() || required("GRADEX_CUDA_TF32"));
    let a = randn(&[256, 256], 130, dev).unwrap();
    let exact = a.matmul(&a).unwrap().to_vec::<f32>().unwrap();
    cuda::set_allow_tf32(true);
    let fast = a.matmul(&a).unwrap().to_vec::<f32>().unwrap();
    cuda::set_allow_tf32(false);
    let again = a.matmul(&a).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(exact, again, "TF32 off must be reproducible");
    let diff = exact
        .iter()
        .zip(&fast)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    eprintln!("TF32 vs FP32 max abs difference on a 256x256 product: {diff:e}");
}

#[test]
fn gpu_device_reports_its_architecture() {
    let Some(_) = gpu_device() else { return };
    let d = cuda::device(0).unwrap();
    eprintln!(
        "cuda:0 = {} ({}), {} device(s)",
        d.name(),
        d.arch(),
        cuda::device_count()
    );
    assert!(d.arch().starts_with("sm_"));
}
