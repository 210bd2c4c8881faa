//! The exchange on tensors (`Method::place`, `Method::exchange_tensor`,
//! `Method::after_step_tensor`) against the exchange on slices, over the same TCP job: for
//! every method (dense, DGC with its switches, gTop-k, gradient dropping and its
//! local-gradient modes, SBC, QSGD, TernGrad, 1-bit SGD, FedAvg), worlds 1–3, several steps, the same updates and synchronised weights
//! bit for bit, the same wire statistics and momentum masks, and the same state at the
//! end — on CPU tensors here, and on GPU tensors (ranks sharing one
//! GPU over TCP) when one is present (`REQUIRE_GPU=1` makes its absence a failure).

mod common;

use common::{built, ctx, heavy_tailed, job};
use compress::{HostAfterStep, HostExchange, Method, StepInfo, TensorAfterStep, TensorExchange};
use tensor::{cuda, Device, Tensor};

fn devices() -> Vec<Device> {
    cuda::devices_for_tests()
}

/// A weight matrix and a long vector sent sparse, a bias sent dense (dense_1d).
const SHAPES: [&[usize]; 3] = [&[60, 50], &[40], &[5_000]];

/// What one rank saw: per step and parameter, the slices' update and the tensors' (values
/// as bits, −0 read as +0: the dense scratch's 0 + x), the kinds, sent values and message
/// bytes; then both final states.
type Seen = (
    Vec<(Vec<u32>, Vec<u32>, bool, [usize; 2], [usize; 2])>,
    Vec<Vec<u32>>,
    Vec<Vec<u32>>,
);

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|&x| if x == 0.0 { 0 } else { x.to_bits() })
        .collect()
}

fn state_bits(m: &dyn Method) -> Vec<Vec<u32>> {
    m.state().unwrap().iter().map(|(_, v)| bits(v)).collect()
}

fn run(name: &str, opts: &[&str], nesterov: bool, world: usize, device: Device) -> Vec<Seen> {
    job(world, |rank, c| -> Seen {
        let cx = compress::Context {
            momentum: 0.9,
            nesterov,
            weight_decay: 1e-4,
            ..ctx(rank, world)
        };
        let mut host = built(name, opts, &cx, SHAPES);
        let mut dev = built(name, opts, &cx, SHAPES);
        dev.place(device).unwrap();
        c.set_device(device);
        let mut seen = Vec::new();
        for step in 0..4u64 {
            let info = StepInfo {
                step,
                epoch: step as f64 * 0.1,
            };
            host.begin_step(info);
            dev.begin_step(info);
            for (i, shape) in SHAPES.iter().enumerate() {
                let n: usize = shape.iter().product();
                let seed = 1000 * rank as u64 + 10 * step + i as u64;
                let g = heavy_tailed(n, seed);
                let w = heavy_tailed(n, seed + 7);
                let a = host
                    .exchange(HostExchange::new(c, i, &g).with_weights(&w))
                    .unwrap();
                let gt = Tensor::from_vec(g, shape.to_vec(), device).unwrap();
                let wt = Tensor::from_vec(w, shape.to_vec(), device).unwrap();
                let b = dev
                    .exchange_tensor(TensorExchange::new(c, i, &gt).with_weights(&wt))
                    .unwrap();
                assert_eq!(b.values.dims(), *shape);
                assert_eq!(b.values.device(), device);
                seen.push((
                    bits(&a.values),
                    bits(&b.values.to_vec::<f32>().unwrap()),
                    a.kind == b.kind,
                    [a.stats.sent_values, a.stats.message_bytes],
                    [b.stats.sent_values, b.stats.message_bytes],
                ));
            }
            // What methods with communication delay or periodic averaging send after the
            // step: the synchronised weights, the wire statistics and the momentum mask.
            for (i, shape) in SHAPES.iter().enumerate() {
                let n: usize = shape.iter().product();
                let mut w = heavy_tailed(n, 1000 * rank as u64 + 10 * step + i as u64 + 13);
                let wt = Tensor::from_vec(w.clone(), shape.to_vec(), device).unwrap();
                let a = host.after_step(HostAfterStep::new(c, i, &mut w)).unwrap();
                let b = dev
                    .after_step_tensor(TensorAfterStep::new(c, i, &wt))
                    .unwrap();
                let stats = |s: Option<compress::WireStats>| {
                    s.map_or([usize::MAX; 2], |s| [s.sent_values, s.message_bytes])
                };
                let (ma, mb) = (host.take_momentum_mask(i), dev.take_momentum_mask(i));
                seen.push((
                    bits(&w),
                    bits(&wt.to_vec::<f32>().unwrap()),
                    ma == mb,
                    stats(a),
                    stats(b),
                ));
            }
        }
        (seen, state_bits(host.as_ref()), state_bits(dev.as_ref()))
    })
}

/// `nesterov`: the trainer's --nesterov, which DGC's momentum correction follows.
fn check(name: &str, opts: &[&str], nesterov: bool) {
    for device in devices() {
        for world in 1..=3 {
            for (rank, (seen, host_state, dev_state)) in
                run(name, opts, nesterov, world, device).iter().enumerate()
            {
                let at = format!("{name} {opts:?} on {device:?}, world {world}, rank {rank}");
                // Per step, the three updates, then the three weights after the step.
                for (j, (a, b, same_kind, sa, sb)) in seen.iter().enumerate() {
                    let what = if j % 6 < 3 { "update" } else { "weights" };
                    assert_eq!(
                        a,
                        b,
                        "{at}: {what} {j} (step {}, parameter {})",
                        j / 6,
                        j % 3
                    );
                    assert!(same_kind, "{at}: {what} {j}'s kind or momentum mask");
                    assert_eq!(sa, sb, "{at}: update {j}'s sent values and message bytes");
                }
                assert_eq!(host_state, dev_state, "{at}: the state after 4 steps");
            }
        }
    }
}

#[test]
fn dense_on_tensors_equals_dense_on_slices() {
    check("dense", &[], false);
    check("dense", &["wire=f16"], false);
    check("dense", &["wire=bf16"], false);
}

#[test]
fn dgc_on_tensors_equals_dgc_on_slices() {
    check(
        "dgc",
        &["density=0.01", "warmup_epochs=0.2", "clip=0.5"],
        false,
    );
}

#[test]
fn dgc_exact_nesterov_on_tensors_equals_dgc_on_slices() {
    check(
        "dgc",
        &["density=0.02", "warmup_epochs=0", "sampling=false"],
        true,
    );
}

#[test]
fn gradient_dropping_on_tensors_equals_it_on_slices() {
    check(
        "dgc",
        &[
            "density=0.01",
            "warmup_epochs=0",
            "momentum_correction=false",
            "masking=false",
        ],
        false,
    );
}

#[test]
fn gtopk_on_tensors_equals_gtopk_on_slices() {
    check("gtopk", &["density=0.01"], false);
    check("gtopk", &["density=0.2", "dense_below=100"], false);
}

#[test]
fn gradient_dropping_and_its_local_modes_on_tensors_equal_them_on_slices() {
    check("topk", &["density=0.01", "warmup_steps=3"], false);
    for mode in ["sum", "partial", "error"] {
        let mode = format!("mode={mode}");
        check(
            "local",
            &["density=0.02", mode.as_str(), "sync_every=2"],
            false,
        );
    }
}

#[test]
fn sbc_on_tensors_equals_sbc_on_slices() {
    check("sbc", &["delay=2", "density=0.01"], false);
    check("sbc", &["delay=1", "density=0.05", "masking=false"], false);
}

#[test]
fn fedavg_on_tensors_equals_fedavg_on_slices() {
    check("fedavg", &["delay=2"], false);
}

#[test]
fn qsgd_on_tensors_equals_qsgd_on_slices() {
    // min_size 100: the bias goes dense, the others quantized; buckets that do not divide
    // the tensors, both codings, both scales.
    check("qsgd", &["bits=4", "bucket=512", "min_size=100"], false);
    check(
        "qsgd",
        &[
            "bits=2",
            "bucket=128",
            "min_size=100",
            "coding=fixed",
            "norm=max",
        ],
        false,
    );
}

#[test]
fn terngrad_on_tensors_equals_terngrad_on_slices() {
    check("terngrad", &[] as &[&str], false);
    check("terngrad", &["float_last=1"], false);
}

#[test]
fn onebit_on_tensors_equals_onebit_on_slices() {
    check("onebit", &[] as &[&str], false);
    check("onebit", &["bucket=700"], false);
}

/// The 16-bit rings run on the TCP communicator only, and say so: the trainer reads
/// `tcp_only` to refuse them with NCCL before any worker starts.
#[test]
fn half_precision_dense_says_it_needs_the_tcp_communicator() {
    let cx = ctx(0, 1);
    for wire in ["wire=f16", "wire=bf16"] {
        let half = built("dense", &[wire], &cx, SHAPES);
        let why = half.tcp_only().expect("a 16-bit ring is TCP-only");
        assert!(why.contains("TCP"), "{why}");
    }
    assert!(built("dense", &[] as &[&str], &cx, SHAPES)
        .tcp_only()
        .is_none());
}

/// A method whose tensor path runs the slices' code on CPU tensors but whose GPU kernels
/// add in another order (cuBLAS's products, a reduction's tree): bit for bit on CPU
/// tensors, within 1e-3 of each vector's scale on a GPU.
fn check_close(name: &str, opts: &[&str]) {
    let close = |a: &[u32], b: &[u32]| -> bool {
        let (a, b): (Vec<f32>, Vec<f32>) = (
            a.iter().map(|&x| f32::from_bits(x)).collect(),
            b.iter().map(|&x| f32::from_bits(x)).collect(),
        );
        let scale = a.iter().map(|x| x.abs()).fold(0f32, f32::max).max(1e-30);
        a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-3 * scale)
    };
    for device in devices() {
        for world in 1..=2 {
            for (rank, (seen, hs, ds)) in run(name, opts, false, world, device).iter().enumerate() {
                let at = format!("{name} {opts:?} on {device:?}, world {world}, rank {rank}");
                for (j, (a, b, same, sa, sb)) in seen.iter().enumerate() {
                    if device == Device::Cpu {
                        assert_eq!(a, b, "{at}: entry {j}");
                    } else {
                        assert!(close(a, b), "{at}: entry {j}");
                    }
                    assert!(same, "{at}: entry {j}'s kind");
                    assert_eq!(sa, sb, "{at}: entry {j}'s sent values and bytes");
                }
                assert_eq!(hs.len(), ds.len(), "{at}: state entries");
                for (x, y) in hs.iter().zip(ds) {
                    assert!(close(x, y), "{at}: the state");
                }
            }
        }
    }
}

#[test]
fn powersgd_on_tensors_equals_powersgd_on_slices() {
    check_close(
        "powersgd",
        &["rank=2", "start_iter=1", "min_compression_rate=1"],
    );
}

#[test]
fn sign_methods_random_k_and_threshold_v_on_tensors_equal_them_on_slices() {
    check("signsgd", &[], false);
    check("signum", &["momentum=0.8"], false);
    check("randomk", &["density=0.05"], false);
    check("thresholdv", &["threshold=0.002"], false);
    // The scale ‖p‖₁/n is a reduction, added in another order on a GPU.
    check_close("efsignsgd", &[]);
}
