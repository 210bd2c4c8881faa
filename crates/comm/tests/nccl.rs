//! The NCCL backend. On any machine: a rank that cannot run NCCL (here: a CPU device) makes
//! every rank fail with an error naming it, and nobody waits in NCCL's init. On a GPU
//! machine with NCCL (scripts/gpu-check.sh): every collective on one GPU (world size 1,
//! since NCCL refuses two ranks on one device) against the definition, and the argument
//! checks; and NCCL without hangs: a rank that never joins ends the others' set-up within
//! the timeout. Without a GPU the GPU tests say so and pass, unless `REQUIRE_GPU=1`.

use comm::{CommError, Communicator, NcclCommunicator, ReduceOp};
use std::process::Command;
use std::time::{Duration, Instant};
use tensor::{DType, Device, Rng, Tensor};

mod common;
use common::job_configs;

/// Every rank's configuration of a loopback job of `world` threads.
fn job(world: usize) -> Vec<comm::CommConfig> {
    job_configs(world, "secret", Duration::from_secs(20))
}

#[test]
fn every_rank_names_the_ranks_that_cannot_start_nccl() {
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = job(3)
            .into_iter()
            .enumerate()
            .map(|(rank, cfg)| {
                s.spawn(move || {
                    let mut c = Communicator::connect(&cfg).unwrap();
                    match NcclCommunicator::new(&mut c, Device::Cpu) {
                        Err(e @ CommError::Nccl(_)) => e.to_string(),
                        Err(e) => panic!("rank {rank}: wrong error kind: {e}"),
                        Ok(_) => panic!("rank {rank}: NCCL started on the CPU"),
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        for r in 0..3 {
            assert!(
                e.contains(&format!("rank {r}: the NCCL backend needs a CUDA device")),
                "{e}"
            );
        }
    }
}

fn gpu_with_nccl() -> Option<Device> {
    let gpu = tensor::cuda::is_available(0);
    let lib = comm::nccl_library_present();
    if gpu && lib {
        return Some(Device::Cuda(0));
    }
    let required = std::env::var("REQUIRE_GPU").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "REQUIRE_GPU=1 but NCCL cannot run here (CUDA device usable: {gpu}, libnccl.so loadable: {lib})"
    );
    eprintln!("skipped: no CUDA device with NCCL (device: {gpu}, library: {lib})");
    None
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_cpu().unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn nccl_collectives_on_one_gpu() {
    let Some(dev) = gpu_with_nccl() else { return };
    eprintln!("NCCL {}", comm::nccl_version().unwrap_or_default());
    let mut tcp = Communicator::connect(&job(1)[0]).unwrap();
    let mut nc = NcclCommunicator::new(&mut tcp, dev).unwrap();
    assert_eq!((nc.rank(), nc.world_size()), (0, 1));

    let mut rng = Rng::new(7);
    let host: Vec<f32> = (0..100_003).map(|_| rng.normal() as f32).collect();
    let make = || {
        Tensor::from_vec(host.clone(), [100_003], Device::Cpu)
            .unwrap()
            .to_device(dev)
            .unwrap()
    };

    // World size 1: the sum and the average of one rank's tensor are the tensor itself.
    let t = make();
    nc.allreduce(&t, ReduceOp::Sum).unwrap();
    assert_eq!(values(&t), host);
    nc.allreduce(&t, ReduceOp::Average).unwrap();
    assert_eq!(values(&t), host);

    // In place on a view that starts inside its buffer: only the view's elements change.
    let big = Tensor::from_vec(host.clone(), [100_003], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let part = big.narrow(0, 1000, 5000).unwrap();
    let doubled = part.affine(2.0, 0.0).unwrap();
    nc.send_recv(Some((&doubled, 0)), Some((&part, 0))).unwrap();
    nc.synchronize().unwrap();
    let after = values(&big);
    assert_eq!(&after[..1000], &host[..1000]);
    for i in 1000..6000 {
        assert_eq!(after[i], 2.0 * host[i], "element {i}");
    }
    assert_eq!(&after[6000..], &host[6000..]);

    nc.broadcast(&t, 0).unwrap();
    assert_eq!(values(&t), host);

    let g = nc.allgather(&t.reshape([1, 100_003]).unwrap()).unwrap();
    assert_eq!(g.dims(), &[1, 1, 100_003]);
    assert_eq!(values(&g), host);

    // Argument checks: the CPU, another dtype, a non-contiguous view, a rank outside the job.
    let cpu = Tensor::zeros([4], DType::F32, Device::Cpu).unwrap();
    assert!(nc
        .allreduce(&cpu, ReduceOp::Sum)
        .unwrap_err()
        .to_string()
        .contains("Cpu"));
    let f64t = Tensor::zeros([4], DType::F64, dev).unwrap();
    assert!(nc
        .allreduce(&f64t, ReduceOp::Sum)
        .unwrap_err()
        .to_string()
        .contains("f32"));
    let strided = Tensor::zeros([4, 4], DType::F32, dev)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    assert!(nc
        .broadcast(&strided, 0)
        .unwrap_err()
        .to_string()
        .contains("contiguous"));
    assert!(nc
        .broadcast(&t, 1)
        .unwrap_err()
        .to_string()
        .contains("outside"));

    // In a one-rank job nothing leaves the GPU: the counters stay at zero.
    let total = nc.counters().total();
    assert_eq!((total.payload_sent, total.payload_received), (0, 0));
}

/// The ProcessGroup compositions on NCCL (one rank): allgather-v of u32 with padding, the
/// TopK union sum, gTopK's local cut, all on the GPU, equal to the TCP group's on the CPU.
#[test]
fn process_group_compositions_on_nccl_equal_the_tcp_ones() {
    use comm::group::composed;
    use comm::ProcessGroup;
    use tensor::sparsify::Selected;
    let Some(dev) = gpu_with_nccl() else { return };
    let mut tcp = Communicator::connect(&job(1)[0]).unwrap();
    let mut nc = NcclCommunicator::new(&mut tcp, dev).unwrap();
    let n = 50_000;
    let mut rng = Rng::new(11);
    let mut idx: Vec<u32> = (0..4_000).map(|_| rng.below(n) as u32).collect();
    idx.sort_unstable();
    idx.dedup();
    let vals: Vec<f32> = idx
        .iter()
        .map(|_| [1.0f32, -2.0, 0.5][rng.below(3)])
        .collect();
    let sel = |d: Device| Selected {
        indices: Tensor::from_vec(idx.clone(), idx.len(), d).unwrap(),
        values: Tensor::from_vec(vals.clone(), vals.len(), d).unwrap(),
        source_len: n,
    };
    let (cpu, gpu) = (sel(Device::Cpu), sel(dev));
    let pair = |s: &Selected| s.to_vecs().unwrap();
    let want = pair(&composed::topk_allreduce(&mut tcp, &cpu).unwrap());
    assert_eq!(pair(&nc.topk_allreduce(&gpu).unwrap()), want);
    let want = pair(&composed::gtopk_allreduce(&mut tcp, &cpu, 700).unwrap());
    assert_eq!(pair(&nc.gtopk_allreduce(&gpu, 700).unwrap()), want);
    let got = nc.allgather_v(&gpu.indices).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].to_vec::<u32>().unwrap(), idx);
    // A message to itself, u32, through NCCL's grouped send and receive.
    let back = Tensor::zeros(idx.len(), DType::U32, dev).unwrap();
    ProcessGroup::send_recv(&mut nc, Some((&gpu.indices, 0)), Some((&back, 0))).unwrap();
    assert_eq!(back.to_vec::<u32>().unwrap(), idx);
    ProcessGroup::barrier(&mut nc).unwrap();
}

/// NCCL without hangs (GPU): in a world of 2 whose rank 1 takes part in the rendezvous and
/// then never calls ncclCommInitRank, rank 0's set-up is reported by its watchdog within
/// the timeout (3 s here), naming the call, and the default reaction ends the process
/// with status 3. Run in a child process (this test binary's `stalled_setup_child`): the
/// thread inside NCCL cannot be unwound.
#[test]
fn a_rank_that_never_joins_ends_nccl_setup_within_the_timeout() {
    if gpu_with_nccl().is_none() {
        return;
    }
    let exe = std::env::current_exe().expect("this test binary");
    let start = Instant::now();
    let out = Command::new(exe)
        .args([
            "--exact",
            "stalled_setup_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GRADEX_STALL_CHILD", "1")
        .output()
        .expect("the child process");
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(
            "rank 0: NCCL set-up (ncclCommInitRank, rank 0 of 2) has not completed after 3 s"
        ),
        "{err}"
    );
    assert!(took < Duration::from_secs(30), "the child took {took:?}");
}

/// The child of the test above; does nothing unless `GRADEX_STALL_CHILD=1`.
#[test]
fn stalled_setup_child() {
    if std::env::var("GRADEX_STALL_CHILD").as_deref() != Ok("1") {
        return;
    }
    let cfgs = job_configs(2, "secret", Duration::from_secs(3));
    let cfg1 = cfgs[1].clone();
    std::thread::spawn(move || {
        let mut c = Communicator::connect(&cfg1).expect("rank 1");
        // The rendezvous' verdict exchange as NcclCommunicator::new makes it (first byte
        // 1: ready), then silence: NCCL's own set-up is never called.
        c.allgather_v(&[1u8]).expect("the verdicts");
        std::thread::sleep(Duration::from_secs(3600));
    });
    let mut tcp = Communicator::connect(&cfgs[0]).expect("rank 0");
    let r = NcclCommunicator::new(&mut tcp, Device::Cuda(0));
    panic!("NCCL set-up returned without rank 1: {:?}", r.err());
}
