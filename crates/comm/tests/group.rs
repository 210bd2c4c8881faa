//! The `ProcessGroup` interface over TCP, for world sizes 1–8: its tensor primitives
//! against the byte collectives, and the compositions (`comm::group::composed`, which NCCL
//! runs on the GPU) against the TCP communicator's streamed sparse collectives and the
//! serial definitions: allgather-v with empty and unequal contributions, TopKAllReduce
//! with ties, gTopKAllReduce's tree.

use comm::group::composed;
use comm::{sum_all, Collective, CommError, Communicator, ProcessGroup, ReduceOp, SparseVec};
use std::time::Duration;
use tensor::sparsify::Selected;
use tensor::{DType, Device, Rng, Tensor};

mod common;
use common::{data, gtopk_serial_of, job_configs};

/// Runs `f` on every rank of a loopback job; results in rank order.
fn job<T: Send>(world: usize, f: impl Fn(&mut Communicator) -> T + Sync) -> Vec<T> {
    let configs = job_configs(world, "group", Duration::from_secs(20));
    std::thread::scope(|s| {
        let handles: Vec<_> = configs
            .iter()
            .map(|cfg| {
                let f = &f;
                s.spawn(move || f(&mut Communicator::connect(cfg).unwrap()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn selected(v: &SparseVec, n: usize) -> Selected {
    let len = v.len();
    Selected {
        indices: Tensor::from_vec(v.indices.clone(), len, Device::Cpu).unwrap(),
        values: Tensor::from_vec(v.values.clone(), len, Device::Cpu).unwrap(),
        source_len: n,
    }
}

fn sparse_of(s: &Selected) -> SparseVec {
    let (indices, values) = s.to_vecs().unwrap();
    SparseVec { indices, values }
}

/// `v` as a dense vector of `n` (what an optimizer applies).
fn dense(v: &SparseVec, n: usize) -> Vec<f32> {
    let mut d = vec![0.0; n];
    for (&i, &x) in v.indices.iter().zip(&v.values) {
        d[i as usize] = x;
    }
    d
}

/// Rank `rank`'s sparse vector over `n` with `nnz` draws whose magnitudes come from a
/// set of four, so that ties across and within ranks are the rule.
fn tied(rank: usize, n: usize, nnz: usize) -> SparseVec {
    let mut r = Rng::new(500 + rank as u64);
    SparseVec::new(
        (0..nnz)
            .map(|_| {
                let m = [0.5f32, 1.0, 1.5, 2.0][r.below(4)];
                let sign = if r.below(2) == 0 { 1.0 } else { -1.0 };
                (r.below(n) as u32, sign * m)
            })
            .collect(),
    )
}

#[test]
fn tensor_primitives_match_the_byte_collectives_for_worlds_1_to_8() {
    for world in 1..=8 {
        let out = job(world, |c| {
            let r = c.rank();
            let p = c.world_size();
            let d = Tensor::from_vec(data(r, 37), 37, Device::Cpu).unwrap();
            ProcessGroup::allreduce(c, &d, ReduceOp::Sum).unwrap();
            let ids = Tensor::from_vec(vec![r as u32 * 10, 7], 2, Device::Cpu).unwrap();
            ProcessGroup::broadcast(c, &ids, p - 1).unwrap();
            let gathered = ProcessGroup::allgather(c, &ids).unwrap();
            // A ring: each rank sends its rank to the next and hears from the previous.
            let mine = Tensor::from_vec(vec![r as f32], 1, Device::Cpu).unwrap();
            let got = Tensor::zeros(1, DType::F32, Device::Cpu).unwrap();
            let next = (r + 1) % p;
            let prev = (r + p - 1) % p;
            c.send_recv(Some((&mine, next)), Some((&got, prev)))
                .unwrap();
            ProcessGroup::barrier(c).unwrap();
            (
                d.to_vec::<f32>().unwrap(),
                ids.to_vec::<u32>().unwrap(),
                gathered.dims().to_vec(),
                gathered.to_vec::<u32>().unwrap(),
                got.to_vec::<f32>().unwrap()[0],
            )
        });
        let mut want = vec![0.0f32; 37];
        for r in 0..world {
            let mut v = data(r, 37);
            // The ring allreduce's sum is the same on every rank; check it against f64.
            v.iter_mut()
                .zip(&mut want)
                .for_each(|(a, w)| *w += std::mem::take(a));
        }
        for (r, (sum, ids, dims, gathered, got)) in out.iter().enumerate() {
            assert_eq!(
                sum, &out[0].0,
                "world {world}: allreduce differs at rank {r}"
            );
            for (a, b) in sum.iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "world {world}: {a} vs {b}"
                );
            }
            assert_eq!(
                ids,
                &vec![(world as u32 - 1) * 10, 7],
                "world {world} rank {r}"
            );
            assert_eq!(dims, &vec![world, 2]);
            assert_eq!(gathered, &ids.repeat(world));
            assert_eq!(
                *got,
                ((r + world - 1) % world) as f32,
                "world {world} rank {r}"
            );
        }
    }
}

#[test]
fn composed_allgather_v_carries_empty_and_unequal_contributions() {
    for world in 1..=8 {
        // Lengths 0, 3, 1, 0, 5, …; and a call where every rank's is empty.
        let len = |r: usize| (r * 3) % 7 % 6;
        let out = job(world, |c| {
            let r = c.rank();
            let v: Vec<u32> = (0..len(r) as u32).map(|i| 1000 * r as u32 + i).collect();
            let t = Tensor::from_vec(v, len(r), Device::Cpu).unwrap();
            let before = c.counters().clone();
            let composed = composed::allgather_v(c, &t).unwrap();
            let counted = c.counters().by_kind.keys().copied().collect::<Vec<_>>();
            let direct = ProcessGroup::allgather_v(c, &t).unwrap();
            let none = Tensor::zeros(0, DType::F32, Device::Cpu).unwrap();
            let empties = composed::allgather_v(c, &none).unwrap();
            let as_vecs = |ts: &[Tensor]| -> Vec<Vec<u32>> {
                ts.iter().map(|t| t.to_vec::<u32>().unwrap()).collect()
            };
            assert!(before.by_kind.is_empty());
            (as_vecs(&composed), as_vecs(&direct), empties.len(), counted)
        });
        let want: Vec<Vec<u32>> = (0..world)
            .map(|r| (0..len(r) as u32).map(|i| 1000 * r as u32 + i).collect())
            .collect();
        for (r, (composed, direct, empties, counted)) in out.iter().enumerate() {
            assert_eq!(composed, &want, "world {world} rank {r}: composed");
            assert_eq!(direct, &want, "world {world} rank {r}: TCP's own");
            assert_eq!(*empties, world);
            // The size exchange and the padded gather count as one allgather-v.
            if world > 1 {
                assert_eq!(counted, &vec![Collective::AllgatherV], "world {world}");
            }
        }
    }
}

#[test]
fn composed_topk_equals_the_streamed_topk_and_the_serial_sum_with_ties() {
    let n = 200;
    for world in 1..=8 {
        for nnz in [0, 1, 40] {
            // Rank 2 contributes nothing, so that an empty block is among the others.
            let local = |r: usize| {
                if r == 2 {
                    SparseVec::default()
                } else {
                    tied(r, n, nnz)
                }
            };
            let out = job(world, |c| {
                let mine = selected(&local(c.rank()), n);
                let composed = composed::topk_allreduce(c, &mine).unwrap();
                let kinds = c.counters().by_kind.keys().copied().collect::<Vec<_>>();
                let streamed = ProcessGroup::topk_allreduce(c, &mine).unwrap();
                (sparse_of(&composed), sparse_of(&streamed), kinds)
            });
            let want = sum_all(&(0..world).map(local).collect::<Vec<_>>());
            for (r, (composed, streamed, kinds)) in out.iter().enumerate() {
                let at = format!("world {world}, nnz {nnz}, rank {r}");
                assert_eq!(composed.indices, want.indices, "{at}: composed indices");
                assert_eq!(streamed.indices, want.indices, "{at}: streamed indices");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                // Zero sums may differ in sign only (0 + x against x); compare as floats.
                assert_eq!(composed.values, want.values, "{at}: composed values");
                assert_eq!(
                    bits(&streamed.values),
                    bits(&want.values),
                    "{at}: streamed values"
                );
                if world > 1 && nnz > 0 {
                    assert_eq!(kinds, &vec![Collective::TopkAllreduce], "{at}");
                }
            }
        }
    }
}

#[test]
fn composed_gtopk_equals_the_serial_tree_and_the_streamed_gtopk_with_ties() {
    let n = 300;
    for world in 1..=8 {
        for (nnz, k) in [(0, 5), (30, 1), (30, 8), (60, 100)] {
            let local = |r: usize| {
                if r == 1 {
                    SparseVec::default()
                } else {
                    tied(r, n, nnz)
                }
            };
            let out = job(world, |c| {
                let mine = selected(&local(c.rank()), n);
                let composed = composed::gtopk_allreduce(c, &mine, k).unwrap();
                let kinds = c.counters().by_kind.keys().copied().collect::<Vec<_>>();
                let streamed = ProcessGroup::gtopk_allreduce(c, &mine, k).unwrap();
                (sparse_of(&composed), sparse_of(&streamed), kinds)
            });
            let want = dense(&gtopk_serial_of(world, k, local), n);
            for (r, (composed, streamed, kinds)) in out.iter().enumerate() {
                let at = format!("world {world}, nnz {nnz}, k {k}, rank {r}");
                assert!(composed.len() <= k, "{at}: {} entries", composed.len());
                // Equal as applied: a ⊤ merge may keep a zero sum the dense scratch drops.
                assert_eq!(dense(composed, n), want, "{at}: composed");
                assert_eq!(dense(streamed, n), want, "{at}: streamed");
                if world > 1 {
                    assert_eq!(kinds, &vec![Collective::GtopkAllreduce], "{at}");
                }
            }
        }
    }
}

#[test]
fn a_gtopk_child_announcing_more_than_k_entries_is_refused_by_name() {
    let errors = job(2, |c| {
        if c.rank() == 1 {
            // Rank 1's part of the tree by hand: a length over k, and nothing after it.
            let len = Tensor::from_vec(vec![1_000_000u32], 1, Device::Cpu).unwrap();
            c.send_recv(Some((&len, 0)), None).unwrap();
            return None;
        }
        let mine = selected(&tied(0, 50, 10), 50);
        Some(composed::gtopk_allreduce(c, &mine, 4).unwrap_err())
    });
    match &errors[0] {
        Some(CommError::Protocol { peer: 1, msg }) => {
            assert!(msg.contains("at most k = 4"), "{msg}")
        }
        e => panic!("want a protocol error naming rank 1, got {e:?}"),
    }
}

#[test]
fn primitives_refuse_tensors_of_the_wrong_kind() {
    job(1, |c| {
        let ints = Tensor::from_vec(vec![1u32, 2], 2, Device::Cpu).unwrap();
        let e = ProcessGroup::allreduce(c, &ints, ReduceOp::Sum).unwrap_err();
        assert!(
            e.to_string().contains("needs a contiguous f32 tensor"),
            "{e}"
        );
        let wide = Tensor::zeros(2, DType::F64, Device::Cpu).unwrap();
        let e = ProcessGroup::allgather(c, &wide).unwrap_err();
        assert!(e.to_string().contains("f32 or u32"), "{e}");
        let bad = Selected {
            indices: ints.clone(),
            values: Tensor::zeros(3, DType::F32, Device::Cpu).unwrap(),
            source_len: 10,
        };
        let e = composed::topk_allreduce(c, &bad).unwrap_err();
        assert!(e.to_string().contains("2 U32 indices for 3 values"), "{e}");
    });
}

fn gpu() -> Option<Device> {
    tensor::cuda::gpu_for_tests()
}

fn on(s: &Selected, device: Device) -> Selected {
    Selected {
        indices: s.indices.to_device(device).unwrap(),
        values: s.values.to_device(device).unwrap(),
        source_len: s.source_len,
    }
}

/// The compositions on GPU tensors (the merges' scatters, selections and gathers run on
/// the device; the TCP communicator carries the bytes between ranks sharing one GPU)
/// give the CPU's results bit for bit.
#[test]
fn compositions_on_gpu_tensors_equal_the_cpu_results() {
    let Some(dev) = gpu() else { return };
    let n = 100_000;
    for world in [1, 2, 3, 4] {
        let local = |r: usize| tied(r, n, 5_000 + 1_000 * r);
        let k = 3_000;
        let out = job(world, |c| {
            let mine = selected(&local(c.rank()), n);
            let cpu_topk = sparse_of(&composed::topk_allreduce(c, &mine).unwrap());
            let cpu_gtopk = sparse_of(&composed::gtopk_allreduce(c, &mine, k).unwrap());
            let cpu_gather: Vec<Vec<f32>> = composed::allgather_v(c, &mine.values)
                .unwrap()
                .iter()
                .map(|t| t.to_vec().unwrap())
                .collect();
            c.set_device(dev);
            let mine = on(&mine, dev);
            let topk = composed::topk_allreduce(c, &mine).unwrap();
            let gtopk = composed::gtopk_allreduce(c, &mine, k).unwrap();
            let gather = composed::allgather_v(c, &mine.values).unwrap();
            assert!(topk.values.device() == dev && gtopk.indices.device() == dev);
            let gather: Vec<Vec<f32>> = gather.iter().map(|t| t.to_vec().unwrap()).collect();
            (
                (cpu_topk, cpu_gtopk, cpu_gather),
                (sparse_of(&topk), sparse_of(&gtopk), gather),
            )
        });
        for (r, (cpu, gpu)) in out.iter().enumerate() {
            let bits = |v: &SparseVec| {
                (
                    v.indices.clone(),
                    v.values.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                )
            };
            assert_eq!(bits(&gpu.0), bits(&cpu.0), "world {world} rank {r}: topk");
            assert_eq!(bits(&gpu.1), bits(&cpu.1), "world {world} rank {r}: gtopk");
            assert_eq!(gpu.2, cpu.2, "world {world} rank {r}: allgather_v");
        }
    }
}

/// Subgroups of a world of 5 (two "nodes" {0, 1, 2} and {3, 4}, and their leaders
/// {0, 3}): each primitive over a subgroup equals the same primitive over a world of the
/// members' size, the sum added in member order; the composed TopK runs on a subgroup;
/// bad memberships are refused.
#[test]
fn subgroups_run_every_primitive_among_their_members() {
    let out = job(5, |c| {
        let me = c.rank();
        let node: Vec<usize> = if me < 3 { vec![0, 1, 2] } else { vec![3, 4] };
        let v = |r: usize| data(r, 7);
        let mut got = Vec::new();
        {
            let mut g = comm::Subgroup::new(c, node.clone()).unwrap();
            assert_eq!(g.world_size(), node.len());
            let t = Tensor::from_vec(v(me), 7, Device::Cpu).unwrap();
            g.allreduce(&t, ReduceOp::Average).unwrap();
            got.push(t.to_vec::<f32>().unwrap());
            let all = g
                .allgather(&Tensor::from_vec(v(me), 7, Device::Cpu).unwrap())
                .unwrap();
            assert_eq!(all.dims(), [node.len(), 7]);
            got.push(all.to_vec::<f32>().unwrap());
            let b = Tensor::from_vec(vec![me as u32; 3], 3, Device::Cpu).unwrap();
            g.broadcast(&b, node.len() - 1).unwrap();
            assert_eq!(
                b.to_vec::<u32>().unwrap(),
                vec![*node.last().unwrap() as u32; 3]
            );
            g.barrier().unwrap();
        }
        if me == 0 || me == 3 {
            let mut leaders = comm::Subgroup::new(c, vec![0, 3]).unwrap();
            let local = SparseVec {
                indices: vec![me as u32, 9],
                values: vec![1.0, me as f32],
            };
            let s = leaders.topk_allreduce(&selected(&local, 10)).unwrap();
            got.push(dense(&sparse_of(&s), 10));
        }
        // A rank outside the members, unsorted members, a rank past the world.
        assert!(comm::Subgroup::new(c, vec![(me + 1) % 5]).is_err());
        assert!(comm::Subgroup::new(c, vec![me, me]).is_err());
        assert!(comm::Subgroup::new(c, vec![me, 7]).is_err());
        got
    });
    for (rank, got) in out.iter().enumerate() {
        let node: Vec<usize> = if rank < 3 { vec![0, 1, 2] } else { vec![3, 4] };
        let p = node.len() as f32;
        let want_avg: Vec<f32> = (0..7)
            .map(|i| {
                let mut s = 0f32;
                for &m in &node {
                    s += data(m, 7)[i];
                }
                s * (1.0 / p)
            })
            .collect();
        assert_eq!(got[0], want_avg, "rank {rank}: the node's average");
        let stacked: Vec<f32> = node.iter().flat_map(|&m| data(m, 7)).collect();
        assert_eq!(got[1], stacked, "rank {rank}: the node's allgather");
        if rank == 0 || rank == 3 {
            let mut want = vec![0f32; 10];
            want[0] += 1.0;
            want[3] += 1.0;
            want[9] = 0.0 + 3.0;
            assert_eq!(got[2], want, "rank {rank}: the leaders' TopK");
        }
    }
}
