//! Collectives against serial computations, for world sizes 1–8 (powers of two and not),
//! on loopback. Each rank runs on its own thread with its own sockets (the same TCP
//! connections, frames and failures as processes, in one process, so that a failure
//! can be traced); `processes.rs` runs every collective in worker processes.

use comm::{
    merge_sum_into, sum_all, top_merge, CommError, Communicator, ReduceOp, SparseVec, TopkSum,
};
use std::time::{Duration, Instant};
use tensor::Rng;

mod common;
use common::{data, gtopk_serial_of, job_configs, sparse};

/// Runs `f` on every rank of a loopback job; results in rank order.
fn job<T: Send>(world: usize, f: impl Fn(&mut Communicator) -> T + Sync) -> Vec<T> {
    job_with(world, Duration::from_secs(20), |_, c| f(c))
}

/// Runs `f(rank, communicator)` on every rank of a loopback job whose blocking calls
/// time out after `timeout`; results in rank order.
fn job_with<T: Send>(
    world: usize,
    timeout: Duration,
    f: impl Fn(usize, &mut Communicator) -> T + Sync,
) -> Vec<T> {
    let configs = job_configs(world, "secret", timeout);
    std::thread::scope(|s| {
        let handles: Vec<_> = configs
            .iter()
            .enumerate()
            .map(|(rank, cfg)| {
                let f = &f;
                s.spawn(move || {
                    let mut c = Communicator::connect(cfg).unwrap();
                    f(rank, &mut c)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn allreduce_matches_the_serial_sum_for_worlds_1_to_8() {
    for world in 1..=8 {
        for n in [0, 1, 7, 1000] {
            let out = job(world, |c| {
                let mut d = data(c.rank(), n);
                c.allreduce(&mut d, ReduceOp::Sum).unwrap();
                let mut a = data(c.rank(), n);
                c.allreduce(&mut a, ReduceOp::Average).unwrap();
                (d, a)
            });
            let want: Vec<f64> = (0..n)
                .map(|i| (0..world).map(|r| data(r, n)[i] as f64).sum())
                .collect();
            for (rank, (sum, avg)) in out.iter().enumerate() {
                assert_eq!(
                    sum, &out[0].0,
                    "world {world}: rank {rank} differs from rank 0"
                );
                for i in 0..n {
                    assert!(
                        (sum[i] as f64 - want[i]).abs() < 1e-4,
                        "world {world} n {n}: {} vs {}",
                        sum[i],
                        want[i]
                    );
                    assert!((avg[i] as f64 - want[i] / world as f64).abs() < 1e-4);
                }
            }
        }
    }
}

#[test]
fn bfloat16_allreduce_is_identical_everywhere_and_within_bf16_rounding() {
    for world in [1, 2, 3] {
        let n = 1001;
        let out = job(world, |c| {
            let mut d = data(c.rank(), n);
            c.allreduce_bf16(&mut d, ReduceOp::Sum).unwrap();
            (d, c.counters().total().payload_sent)
        });
        let inputs: Vec<Vec<f32>> = (0..world).map(|r| data(r, n)).collect();
        for (rank, (sum, sent)) in out.iter().enumerate() {
            assert_eq!(sum, &out[0].0, "world {world}: rank {rank} differs");
            let want_bytes = if world == 1 {
                0
            } else {
                2 * 2 * (world - 1) * n / world
            };
            assert!((*sent as i64 - want_bytes as i64).abs() <= 4 * world as i64);
            for (i, &got) in sum.iter().enumerate() {
                let exact: f64 = inputs.iter().map(|x| x[i] as f64).sum();
                let tol = (world as f64) * 2f64.powi(-7) * (exact.abs() + world as f64);
                assert!((got as f64 - exact).abs() <= tol, "{got} vs {exact}");
                assert_eq!(half::bf16::from_f32(got).to_f32(), got, "not a bf16 value");
            }
        }
    }
}

#[test]
fn half_precision_allreduce_is_identical_everywhere_and_within_f16_rounding() {
    for world in [1, 2, 3, 5] {
        let n = 1001;
        let out = job(world, |c| {
            let mut d = data(c.rank(), n);
            c.allreduce_f16(&mut d, ReduceOp::Sum).unwrap();
            let sent = c.counters().total().payload_sent;
            (d, sent)
        });
        for (rank, (sum, sent)) in out.iter().enumerate() {
            assert_eq!(sum, &out[0].0, "world {world}: rank {rank} differs");
            // 2 bytes per value, 2 (P - 1) / P of the vector per rank.
            let want_bytes = if world == 1 {
                0
            } else {
                2 * 2 * (world - 1) * n / world
            };
            assert!(
                (*sent as i64 - want_bytes as i64).abs() <= 4 * world as i64,
                "{sent} vs {want_bytes}"
            );
            assert_eq!(sum.len(), n);
            let inputs: Vec<Vec<f32>> = (0..world).map(|r| data(r, n)).collect();
            for (i, &got) in sum.iter().enumerate() {
                let exact: f64 = inputs.iter().map(|x| x[i] as f64).sum();
                // Each of the P - 1 transmitted partial sums and the final value are
                // rounded to f16 (relative 2^-11 each).
                let tol = (world as f64) * 2f64.powi(-10) * (exact.abs() + world as f64);
                assert!((got as f64 - exact).abs() <= tol, "{got} vs {exact}");
                assert_eq!(half::f16::from_f32(got).to_f32(), got, "not an f16 value");
            }
        }
    }
}

#[test]
fn allgather_v_broadcast_barrier_and_point_to_point() {
    for world in 1..=8 {
        let out = job(world, |c| {
            let r = c.rank();
            let mine: Vec<u8> = (0..r * 3).map(|i| (i + r) as u8).collect();
            let all = c.allgather_v(&mine).unwrap();
            c.barrier().unwrap();
            let root = world / 2;
            let b = c
                .broadcast(root, if r == root { b"from the root" } else { b"" })
                .unwrap();
            // Large enough that a rank with several children waits for each one's
            // receipt before the next (RECEIPT_MIN_BYTES), from another root.
            let big_root = world - 1;
            let big: Vec<u8> = (0..40_000).map(|i| (i * 7 + big_root) as u8).collect();
            let got = c
                .broadcast(big_root, if r == big_root { &big } else { &[] })
                .unwrap();
            assert_eq!(got, big, "world {world}, rank {r}");
            if world > 1 {
                // Only two ranks talk; the others go straight on to the next collective.
                if r == 0 {
                    c.send(world - 1, b"ping").unwrap();
                    c.send(world - 1, b"pong").unwrap();
                } else if r == world - 1 {
                    assert_eq!(c.recv(0).unwrap(), b"ping");
                    assert_eq!(c.recv(0).unwrap(), b"pong");
                }
                assert!(c.send(r, b"self").is_err());
            }
            c.barrier().unwrap();
            (all, b)
        });
        for (all, b) in out {
            for (r, block) in all.iter().enumerate() {
                assert_eq!(
                    block,
                    &(0..r * 3).map(|i| (i + r) as u8).collect::<Vec<u8>>()
                );
            }
            assert_eq!(b, b"from the root");
        }
    }
}

#[test]
fn topk_allreduce_is_the_sum_of_the_sparse_vectors() {
    for world in 1..=8 {
        let out = job(world, |c| {
            c.topk_allreduce(&sparse(c.rank(), 1000, 30)).unwrap()
        });
        let mut want = vec![0f64; 1000];
        for r in 0..world {
            let s = sparse(r, 1000, 30);
            for (i, v) in s.indices.iter().zip(&s.values) {
                want[*i as usize] += *v as f64;
            }
        }
        for got in &out {
            assert_eq!(got, &out[0]);
            for (i, v) in got.indices.iter().zip(&got.values) {
                assert!((*v as f64 - want[*i as usize]).abs() < 1e-5);
            }
            assert_eq!(got.len(), want.iter().filter(|&&v| v != 0.0).count());
        }
    }
}

/// The allgather and TopKAllReduce keep their buffers between calls: calls that grow,
/// shrink, empty and regrow them (past the 64 KiB at which a step's send gets its own
/// thread, and the receive hands out blocks as they arrive) return exactly what fresh
/// buffers would, with nothing left over from an earlier call; and TopKAllReduce's sum
/// gives the same bits whenever it is done: as blocks arrive, after the gather, or (the
/// default, at 8 ranks) as they arrive until the merges fall behind the bytes, which depends
/// on the timing of each run.
#[test]
fn repeated_sparse_collectives_reuse_their_buffers_without_leftovers() {
    let nnz = [200usize, 0, 12_000, 30, 9_000, 1, 0, 12_000];
    let whens = [TopkSum::Auto, TopkSum::OnArrival, TopkSum::AfterGather];
    for (world, when) in [2, 3, 8, 9]
        .into_iter()
        .flat_map(|w| whens.map(|when| (w, when)))
    {
        let out = job(world, |c| {
            c.set_topk_sum(when);
            let r = c.rank();
            nnz.iter()
                .enumerate()
                .map(|(call, &n)| {
                    // Ranks' sizes differ, and one rank sends nothing in some calls.
                    let mine = sparse(
                        r + 10 * call,
                        1 << 20,
                        if r == 1 && call % 3 == 0 {
                            0
                        } else {
                            n + 7 * r
                        },
                    );
                    let sum = c.topk_allreduce(&mine).unwrap();
                    let bytes: Vec<u8> = (0..(n + r) % 70_000).map(|i| (i + call) as u8).collect();
                    (sum, c.allgather_v(&bytes).unwrap())
                })
                .collect::<Vec<_>>()
        });
        for (call, &n) in nnz.iter().enumerate() {
            let parts: Vec<SparseVec> = (0..world)
                .map(|r| {
                    sparse(
                        r + 10 * call,
                        1 << 20,
                        if r == 1 && call % 3 == 0 {
                            0
                        } else {
                            n + 7 * r
                        },
                    )
                })
                .collect();
            let want = sum_all(&parts);
            for (rank, calls) in out.iter().enumerate() {
                let (sum, all) = &calls[call];
                assert_eq!(
                    sum.indices, want.indices,
                    "world {world} call {call} rank {rank} ({when:?})"
                );
                assert_eq!(
                    bits(sum),
                    bits(&want),
                    "world {world} call {call} rank {rank} ({when:?})"
                );
                for (q, block) in all.iter().enumerate() {
                    let len = (n + q) % 70_000;
                    assert_eq!(block.len(), len, "world {world} call {call} block {q}");
                    assert!(block
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == (i + call) as u8));
                }
            }
        }
    }
}

/// The serial definition of gTopKAllReduce: ⊤ up the binomial tree to rank 0.
fn gtopk_serial(world: usize, k: usize) -> SparseVec {
    gtopk_serial_of(world, k, |r| sparse(r, 1000, 40))
}

#[test]
fn gtopk_allreduce_follows_the_tree_definition() {
    for world in 1..=8 {
        let k = 25;
        let out = job(world, |c| {
            c.gtopk_allreduce(&sparse(c.rank(), 1000, 40), k).unwrap()
        });
        let want = gtopk_serial(world, k);
        for got in &out {
            assert_eq!(got, &want, "world {world}");
            assert_eq!(got.len(), k.min(got.len()));
        }
        // With k at least the total support, it is the exact sum (TopKAllReduce's result).
        let exact = job(world, |c| {
            (
                c.gtopk_allreduce(&sparse(c.rank(), 1000, 40), 100_000)
                    .unwrap(),
                c.topk_allreduce(&sparse(c.rank(), 1000, 40)).unwrap(),
            )
        });
        for (g, t) in exact {
            assert_eq!(g.indices, t.indices);
            for (a, b) in g.values.iter().zip(&t.values) {
                assert!((a - b).abs() < 1e-5);
            }
        }
    }
}

/// The definition of gTopKAllReduce's result: the k entries of largest magnitude
/// of the summed sparse vectors, ties to the smaller index, sorted by index.
fn global_top_k(world: usize, k: usize, local: impl Fn(usize) -> SparseVec) -> SparseVec {
    let mut sum = std::collections::BTreeMap::<u32, f64>::new();
    for r in 0..world {
        let v = local(r);
        for (&i, &x) in v.indices.iter().zip(&v.values) {
            *sum.entry(i).or_default() += x as f64;
        }
    }
    let mut all: Vec<(u32, f32)> = sum.into_iter().map(|(i, x)| (i, x as f32)).collect();
    all.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
    all.truncate(k);
    SparseVec::new(all)
}

/// Where the tree cannot lose an entry, gTopKAllReduce is the global top-k of the sum
/// exactly, ties included: with disjoint supports every merge is a union, and the k
/// largest of a union (magnitude, then the smaller index, a total order) are the k
/// largest of the parts' k largest. Where supports overlap it can differ: an index whose
/// partial sums a lower level cut contributes less than its sum (paper 002, Section
/// IV.B); `gtopk_allreduce_follows_the_tree_definition` checks that case against the tree.
#[test]
fn gtopk_allreduce_is_the_global_top_k_where_supports_are_disjoint() {
    for world in 1..=8 {
        // Rank r holds indices r, r + P, r + 2P, ...: random values, then magnitudes all
        // equal, where only the tie rule decides.
        let random = move |r: usize| {
            let mut g = Rng::new(500 + r as u64);
            SparseVec::new(
                (0..60)
                    .map(|j| ((r + world * j) as u32, g.normal() as f32))
                    .collect(),
            )
        };
        let ties = move |r: usize| {
            SparseVec::new(
                (0..60)
                    .map(|j| ((r + world * j) as u32, if j % 2 == 0 { 1.0 } else { -1.0 }))
                    .collect(),
            )
        };
        for k in [1, 7, 25, 60] {
            let out = job(world, |c| {
                (
                    c.gtopk_allreduce(&random(c.rank()), k).unwrap(),
                    c.gtopk_allreduce(&ties(c.rank()), k).unwrap(),
                )
            });
            let (want, want_ties) = (global_top_k(world, k, random), global_top_k(world, k, ties));
            assert_eq!(want.len(), k);
            assert_eq!(want_ties.indices, (0..k as u32).collect::<Vec<_>>());
            for (rank, (got, got_ties)) in out.iter().enumerate() {
                assert_eq!(got, &want, "world {world} k {k} rank {rank}");
                assert_eq!(
                    got_ties, &want_ties,
                    "ties: world {world} k {k} rank {rank}"
                );
            }
        }
    }
}

#[test]
fn top_merge_sums_and_keeps_the_largest_magnitudes() {
    let a = SparseVec::new(vec![(1, 1.0), (3, -5.0), (7, 0.5)]);
    let b = SparseVec::new(vec![(3, 2.0), (4, -2.5), (7, 0.5)]);
    let m = top_merge(&a, &b, 2);
    assert_eq!(m.indices, [3, 4]);
    assert_eq!(m.values, [-3.0, -2.5]);
    // Ties go to the smaller index.
    let t = top_merge(
        &SparseVec::new(vec![(9, 1.0), (2, -1.0)]),
        &SparseVec::default(),
        1,
    );
    assert_eq!(t.indices, [2]);
}

#[test]
fn top_merge_by_selection_matches_the_sort_definition() {
    // The definition, written the slow way: union summed by index, sorted by magnitude
    // descending then index ascending, the first k kept, back in index order.
    fn reference(a: &SparseVec, b: &SparseVec, k: usize) -> SparseVec {
        let mut m = std::collections::BTreeMap::new();
        for (i, v) in a.indices.iter().zip(&a.values) {
            *m.entry(*i).or_insert(0.0f32) += *v;
        }
        for (i, v) in b.indices.iter().zip(&b.values) {
            *m.entry(*i).or_insert(0.0f32) += *v;
        }
        let mut p: Vec<(u32, f32)> = m.into_iter().collect();
        p.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()).then(x.0.cmp(&y.0)));
        p.truncate(k);
        SparseVec::new(p)
    }
    let mut r = Rng::new(5);
    for trial in 0..200 {
        // Values from a small set, so ties at the k-th magnitude are common.
        let mut pick = |nnz: usize| {
            SparseVec::new(
                (0..nnz)
                    .map(|_| (r.below(300) as u32, (r.below(7) as f32 - 3.0) * 0.5))
                    .collect(),
            )
        };
        let (a, b) = (pick(trial % 90), pick(60));
        for k in [0, 1, 5, 17, 60, 500] {
            assert_eq!(
                top_merge(&a, &b, k),
                reference(&a, &b, k),
                "trial {trial} k {k}"
            );
        }
    }
}

#[test]
fn top_merge_orders_special_values_as_total_cmp_of_magnitudes() {
    // NaN of either sign above infinity, -0.0 level with 0.0 (the smaller index wins),
    // and every value's bits kept: the reference adds only where both sides have an
    // index (a's value first), so -0.0 alone stays -0.0. The one exception is a NaN
    // that a sum produced: Rust leaves its sign and payload unspecified (LLVM may swap
    // the operands of an addition), so a NaN matches any NaN.
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        1.0,
        -1.0,
        2.5,
    ];
    let mut r = Rng::new(17);
    for trial in 0..300 {
        let mut pick = |nnz: usize| {
            SparseVec::new(
                (0..nnz)
                    .map(|_| (r.below(40) as u32, specials[r.below(specials.len())]))
                    .collect(),
            )
        };
        let (a, b) = (pick(trial % 25), pick(12));
        let mut union: std::collections::BTreeMap<u32, f32> = std::collections::BTreeMap::new();
        for (i, v) in a.indices.iter().zip(&a.values) {
            union.insert(*i, *v);
        }
        for (i, v) in b.indices.iter().zip(&b.values) {
            union.entry(*i).and_modify(|x| *x += *v).or_insert(*v);
        }
        let mut by_mag: Vec<(u32, f32)> = union.into_iter().collect();
        by_mag.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()).then(x.0.cmp(&y.0)));
        for k in [0, 1, 3, 7, 20, 60] {
            let mut want: Vec<(u32, f32)> = by_mag.iter().copied().take(k).collect();
            want.sort_by_key(|p| p.0);
            let got = top_merge(&a, &b, k);
            let bits = |v: f32| {
                if v.is_nan() {
                    f32::NAN.to_bits()
                } else {
                    v.to_bits()
                }
            };
            let got: Vec<(u32, u32)> = got
                .indices
                .iter()
                .zip(&got.values)
                .map(|(i, v)| (*i, bits(*v)))
                .collect();
            let want: Vec<(u32, u32)> = want.iter().map(|(i, v)| (*i, bits(*v))).collect();
            assert_eq!(got, want, "trial {trial} k {k}");
        }
    }
}

/// The definition `sum_all` must equal: `((p0 + p1) + p2) + …` by two-way merges.
fn fold(parts: &[SparseVec]) -> SparseVec {
    let mut acc = SparseVec::default();
    for p in parts {
        let mut next = SparseVec::default();
        merge_sum_into(&acc, p, &mut next);
        acc = next;
    }
    acc
}

/// Values as bits, so that equality is exact (and -0.0 differs from 0.0).
fn bits(v: &SparseVec) -> Vec<u32> {
    v.values.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn sum_all_equals_the_left_fold_bit_for_bit() {
    let mut r = Rng::new(11);
    for parts_n in 0..10 {
        for range in [1usize, 300, 70_000, 1 << 31] {
            let parts: Vec<SparseVec> = (0..parts_n)
                .map(|p| {
                    let nnz = (p * 37 + range) % 120;
                    SparseVec::new(
                        (0..nnz)
                            .map(|_| (r.below(range) as u32, r.normal() as f32))
                            .collect(),
                    )
                })
                .collect();
            let fold = fold(&parts);
            let sum = sum_all(&parts);
            // An unsorted part (the fields are public) sums to the same.
            let mut shuffled = parts.clone();
            for p in &mut shuffled {
                p.indices.reverse();
                p.values.reverse();
            }
            assert_eq!(sum_all(&shuffled), sum, "{parts_n} parts, range {range}");
            assert_eq!(sum.indices, fold.indices, "{parts_n} parts, range {range}");
            assert_eq!(bits(&sum), bits(&fold), "{parts_n} parts, range {range}");
        }
    }
}

/// Gradient-sized parts, and clustered ones (many repeated indices under one large one,
/// so most entries share their high digit and the low digit's stable order decides)
/// against the fold.
#[test]
fn sum_all_equals_the_fold_on_large_and_clustered_parts() {
    let mut r = Rng::new(12);
    let cases: [(usize, usize, bool); 3] = [(8, 16_000, false), (5, 3_000, true), (3, 50, true)];
    for (parts_n, nnz, clustered) in cases {
        let parts: Vec<SparseVec> = (0..parts_n)
            .map(|_| {
                let range = if clustered { 4_000 } else { 16 << 20 };
                let mut pairs: Vec<(u32, f32)> = (0..nnz)
                    .map(|_| (r.below(range) as u32, r.normal() as f32))
                    .collect();
                if clustered {
                    pairs.push((u32::MAX - 1, 1.0));
                }
                SparseVec::new(pairs)
            })
            .collect();
        let (sum, want) = (sum_all(&parts), fold(&parts));
        assert_eq!(sum.indices, want.indices, "{parts_n} × {nnz}");
        assert_eq!(bits(&sum), bits(&want), "{parts_n} × {nnz}");
    }
}

#[test]
fn byte_counters_measure_the_ring() {
    let (world, n) = (4, 1000);
    let out = job(world, |c| {
        let mut d = data(c.rank(), n);
        c.allreduce(&mut d, ReduceOp::Sum).unwrap();
        c.counters().by_kind[&comm::Collective::Allreduce]
    });
    for t in out {
        // 2(P − 1) steps of one segment of n/P floats each.
        assert_eq!(t.payload_sent, (2 * (world - 1) * (n / world) * 4) as u64);
        assert_eq!(t.payload_received, t.payload_sent);
        assert_eq!(
            t.total_sent,
            t.payload_sent + (2 * (world - 1) * comm::HEADER_LEN) as u64
        );
    }
}

#[test]
fn a_peer_with_the_wrong_token_is_refused() {
    // Rank 0 refuses and logs the peer, then goes on accepting until its deadline: the
    // timeout error carries the refusal. The peer itself learns that it was refused.
    let right = job_configs(2, "right", Duration::from_secs(3));
    let wrong = comm::CommConfig {
        token: b"wrong".to_vec(),
        ..right[1].clone()
    };
    let results: Vec<Result<Communicator, CommError>> = std::thread::scope(|s| {
        let a = s.spawn(|| Communicator::connect(&right[0]));
        let b = s.spawn(|| Communicator::connect(&wrong));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    let e0 = results[0]
        .as_ref()
        .err()
        .expect("rank 0 must refuse")
        .to_string();
    assert!(e0.contains("does not know the job token"), "{e0}");
    assert!(e0.contains("rank 0 refused a peer"), "{e0}");
    assert!(e0.contains("timed out waiting for ranks [1]"), "{e0}");
    let e1 = results[1]
        .as_ref()
        .err()
        .expect("rank 1 must not join")
        .to_string();
    assert!(e1.contains("different job tokens"), "{e1}");
}

/// Strangers at rank 0's port — a connection that closes at once (a port scanner, `nc`),
/// garbage, a silent client, a worker with the wrong token — are refused one by one while
/// the honest ranks join and compute correctly.
#[test]
fn strangers_at_the_masters_port_do_not_stop_the_job() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let world = 3;
    let configs = job_configs(world, "secret", Duration::from_secs(20));
    let cfg = |rank: usize, token: &str| comm::CommConfig {
        token: token.as_bytes().to_vec(),
        ..configs[rank].clone()
    };
    let addr = format!("127.0.0.1:{}", configs[0].master_port);
    let (sums, impostor) = std::thread::scope(|s| {
        let rank0 = s.spawn(move || {
            let mut c = Communicator::connect(&cfg(0, "secret")).unwrap();
            let mut d = vec![1.0f32; 100];
            c.allreduce(&mut d, ReduceOp::Sum).unwrap();
            d
        });
        // Wait for rank 0's listener, then queue the strangers ahead of the ranks.
        let deadline = Instant::now() + Duration::from_secs(10);
        let first = loop {
            match TcpStream::connect(&addr) {
                Ok(c) => break c,
                Err(e) => {
                    assert!(Instant::now() < deadline, "rank 0 never listened: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        drop(first); // closes at once
        let mut garbage = TcpStream::connect(&addr).unwrap();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let silent = s.spawn({
            let addr = addr.clone();
            move || {
                let mut c = TcpStream::connect(&addr).unwrap();
                // Holds its connection open, saying nothing, until rank 0 gives up on it.
                let _ = c.read(&mut [0u8; 1]);
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        let impostor = s.spawn(move || Communicator::connect(&cfg(1, "guess")).err());
        let honest: Vec<_> = (1..world)
            .map(|rank| {
                s.spawn(move || {
                    let mut c = Communicator::connect(&cfg(rank, "secret")).unwrap();
                    let mut d = vec![1.0f32; 100];
                    c.allreduce(&mut d, ReduceOp::Sum).unwrap();
                    d
                })
            })
            .collect();
        let mut sums = vec![rank0.join().unwrap()];
        sums.extend(honest.into_iter().map(|h| h.join().unwrap()));
        drop(garbage);
        silent.join().unwrap();
        (sums, impostor.join().unwrap())
    });
    for d in sums {
        assert!(d.iter().all(|&v| v == world as f32), "{d:?}");
    }
    let e = impostor.expect("the impostor must be refused").to_string();
    assert!(e.contains("different job tokens"), "{e}");
}

/// A root that is not a rank is an error before any communication, and like every
/// invalid argument to a collective it makes the communicator give up (the peers wait
/// for this rank's part otherwise; see the next test).
#[test]
fn a_broadcast_root_outside_the_world_is_an_error_before_any_communication() {
    for world in [1, 3] {
        for root in [world, world + 1, usize::MAX] {
            let out = job(world, |c| {
                let e = c.broadcast(root, b"x").unwrap_err().to_string();
                (e, c.barrier().is_err())
            });
            for (e, gave_up) in out {
                assert!(e.contains("not a rank of this world"), "{e}");
                assert!(e.starts_with("invalid argument"), "{e}");
                assert!(
                    gave_up,
                    "world {world}: the communicator must give up after {e}"
                );
            }
        }
    }
}

const MALFORMED: [(&[u32], &[f32], &str); 4] = [
    (&[1, 2, 3], &[1.0], "3 indices but 1 values"),
    (&[1], &[1.0, 2.0], "1 indices but 2 values"),
    (&[5, 2], &[1.0, 2.0], "not strictly ascending"),
    (&[2, 2], &[1.0, 2.0], "not strictly ascending"),
];

fn malformed(i: usize) -> SparseVec {
    SparseVec {
        indices: MALFORMED[i].0.to_vec(),
        values: MALFORMED[i].1.to_vec(),
    }
}

#[test]
fn malformed_local_sparse_vectors_are_errors_before_any_communication() {
    for world in [1, 3] {
        for (i, (_, _, want)) in MALFORMED.iter().enumerate() {
            for op in ["gtopk_allreduce", "topk_allreduce"] {
                let out = job(world, |c| {
                    let r = if op == "gtopk_allreduce" {
                        c.gtopk_allreduce(&malformed(i), 4)
                    } else {
                        c.topk_allreduce(&malformed(i))
                    };
                    (r.unwrap_err().to_string(), c.barrier().is_err())
                });
                for (e, gave_up) in out {
                    assert!(e.starts_with("invalid argument"), "{e}");
                    assert!(e.contains(op) && e.contains(want), "{e}");
                    assert!(gave_up, "{op}: the communicator must give up after {e}");
                }
            }
        }
    }
}

/// One rank's malformed vector is news for the others: they fail at once with its
/// cause, naming it, instead of waiting out the timeout for its part and blaming it for
/// a hang (and its collective count does not fall one behind theirs: it gives up).
#[test]
fn one_ranks_malformed_sparse_vector_fails_every_rank_at_once() {
    let timeout = Duration::from_secs(20);
    for op in ["gtopk_allreduce", "topk_allreduce"] {
        let start = Instant::now();
        let errors = job_with(4, timeout, |rank, c| {
            let v = if rank == 1 {
                malformed(2)
            } else {
                SparseVec::new(vec![(rank as u32, 1.0)])
            };
            let r = if op == "gtopk_allreduce" {
                c.gtopk_allreduce(&v, 4)
            } else {
                c.topk_allreduce(&v)
            };
            r.expect_err("the collective must fail on every rank")
                .to_string()
        });
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "{op}: took {took:?}: {errors:?}"
        );
        for (rank, e) in errors.iter().enumerate() {
            assert!(
                e.contains("not strictly ascending"),
                "{op}, rank {rank}: {e}"
            );
            if rank != 1 {
                assert!(e.contains("rank 1 failed"), "{op}, rank {rank}: {e}");
            }
        }
    }
}

/// A peer whose block is not a sparse vector (here rank 1 gathers raw bytes where the
/// others run TopKAllReduce: the two share the allgather and its sequence of tags) is
/// named by every rank that sums its block (with the rank that relayed it), whether the
/// sum is made as blocks arrive or after the gather, and large blocks (read as they come)
/// or small.
#[test]
fn a_peers_malformed_block_is_named_by_every_summing_rank() {
    // A count of 2,000 entries and 3 bytes short of them.
    let mut bad = 2000u32.to_le_bytes().to_vec();
    bad.resize(4 + 8 * 2000 - 3, 7);
    for (world, nnz) in [(3, 30), (8, 30), (8, 12_000)] {
        for when in [TopkSum::Auto, TopkSum::OnArrival, TopkSum::AfterGather] {
            let out = job(world, |c| {
                c.set_topk_sum(when);
                if c.rank() == 1 {
                    c.allgather_v(&bad)
                        .map(|_| String::new())
                        .unwrap_or_else(|e| e.to_string())
                } else {
                    c.topk_allreduce(&sparse(c.rank(), 1 << 20, nnz))
                        .expect_err("a malformed block must fail the sum")
                        .to_string()
                }
            });
            for (rank, e) in out.iter().enumerate().filter(|&(r, _)| r != 1) {
                assert!(
                    e.starts_with("rank 1: malformed frame") && e.contains("cannot hold"),
                    "world {world}, {nnz} entries, {when:?}, rank {rank}: {e}"
                );
                // Bruck's allgather brings rank 1's block to rank r from rank r + d,
                // d the largest power of two not over (1 − r) mod P.
                let j = (1 + world - rank) % world;
                let relay = (rank + (1 << j.ilog2())) % world;
                let named = e.contains(&format!("relayed by rank {relay}"));
                assert_eq!(named, relay != 1, "world {world}, rank {rank}: {e}");
            }
        }
    }
}

/// gTopKAllReduce sums a child's entries as its message arrives (stream_merge.rs):
/// with messages of many reads (up to 160 kB), calls that grow and shrink them, and a
/// k that cuts or keeps everything, every rank gets the tree's result.
#[test]
fn gtopk_allreduce_of_large_messages_in_repeated_calls_follows_the_definition() {
    let calls = [
        (20_000, 20_000),
        (300, 50),
        (12_000, 4_000),
        (0, 10),
        (20_000, 100_000),
    ];
    for world in [2, 5, 8] {
        let out = job(world, |c| {
            let r = c.rank();
            calls
                .iter()
                .enumerate()
                .map(|(i, &(nnz, k))| {
                    c.gtopk_allreduce(&sparse(r + 10 * i, 1 << 20, nnz), k)
                        .unwrap()
                })
                .collect::<Vec<_>>()
        });
        for (i, &(nnz, k)) in calls.iter().enumerate() {
            let want = gtopk_serial_of(world, k, |r| sparse(r + 10 * i, 1 << 20, nnz));
            for (rank, got) in out.iter().enumerate() {
                assert_eq!(got[i], want, "world {world}, call {i}, rank {rank}");
            }
        }
    }
}

/// A child's malformed gTopK message (short of its count, or indices out of order) is
/// an error naming the child, whether it comes in one read or many.
#[test]
fn a_childs_malformed_gtopk_message_is_named() {
    let short = {
        let mut b = sparse(3, 1 << 20, 5000).encode();
        b.truncate(b.len() - 3);
        b
    };
    let descending = {
        let mut v = sparse(3, 1 << 20, 5000).encode();
        // The last index set to the first's, below the one before it.
        let n = u32::from_le_bytes(v[..4].try_into().unwrap()) as usize;
        let first = v[4..8].to_vec();
        v[4 * n..4 * n + 4].copy_from_slice(&first);
        v
    };
    for (bad, what) in [(&short, "cannot hold"), (&descending, "ascending")] {
        let out = job(2, |c| {
            if c.rank() == 1 {
                // Rank 1 is rank 0's child at the tree's first level: as the root of a
                // broadcast it sends rank 0 one frame, at the tag gTopK expects.
                c.broadcast(1, bad)
                    .map(|_| String::new())
                    .unwrap_or_else(|e| e.to_string())
            } else {
                c.gtopk_allreduce(&sparse(0, 1 << 20, 5000), 5000)
                    .expect_err("a malformed message must fail the merge")
                    .to_string()
            }
        });
        assert!(
            out[0].contains("rank 1") && out[0].contains(what),
            "{what}: {}",
            out[0]
        );
    }
}

/// A point-to-point message must be received before either rank of the pair calls its
/// next collective; a collective that finds one says so, not "different orders".
#[test]
fn a_pending_send_met_by_a_collective_is_named_as_such() {
    let errors = job_with(2, Duration::from_secs(20), |rank, c| {
        if rank == 0 {
            c.send(1, b"x").unwrap();
        }
        c.barrier().map(|_| ()).err().map(|e| e.to_string())
    });
    // Whichever rank reads the message reports it; the other may see only the closed
    // connection of that rank's giving up.
    assert!(
        errors
            .iter()
            .flatten()
            .any(|e| e.contains("point-to-point message #1 arrived during collective")),
        "{errors:?}"
    );
}

/// A point-to-point message over the frame limit is refused by its sender, which tells
/// the receiver: its recv returns the refusal at once, and both go on.
#[test]
fn a_message_over_max_frame_is_refused_by_its_sender() {
    let configs = job_configs(2, "t", Duration::from_secs(20));
    let out: Vec<(Option<String>, comm::Traffic)> = std::thread::scope(|s| {
        let hs: Vec<_> = configs
            .into_iter()
            .enumerate()
            .map(|(rank, mut cfg)| {
                s.spawn(move || {
                    cfg.max_frame = 1000;
                    let mut c = Communicator::connect(&cfg).unwrap();
                    let refused = if rank == 0 {
                        let e = c.send(1, &[7u8; 1001]).unwrap_err();
                        assert!(matches!(e, CommError::TooLarge { len: 1001, .. }), "{e}");
                        let e = e.to_string();
                        c.send(1, &[7u8; 1000]).unwrap();
                        Some(e)
                    } else {
                        // Told at once, not after the 20 s timeout; the next message is
                        // the next recv's.
                        let start = Instant::now();
                        let e = c.recv(0).unwrap_err();
                        assert!(
                            matches!(
                                e,
                                CommError::Refused {
                                    peer: 0,
                                    len: 1001,
                                    limit: 1000
                                }
                            ),
                            "{e}"
                        );
                        assert!(
                            start.elapsed() < Duration::from_secs(5),
                            "{:?}",
                            start.elapsed()
                        );
                        assert!(e.to_string().contains("GRADEX_MAX_FRAME"), "{e}");
                        assert_eq!(c.recv(0).unwrap(), [7u8; 1000]);
                        None
                    };
                    // Dense allreduce segments are exact-length frames, not held to it.
                    let mut d = vec![1.0f32; 1000];
                    c.allreduce(&mut d, ReduceOp::Sum).unwrap();
                    assert!(d.iter().all(|&v| v == 2.0));
                    c.barrier().unwrap();
                    let p2p = c.counters().by_kind[&comm::Collective::SendRecv];
                    (refused, p2p)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let e = out[0].0.as_ref().unwrap();
    assert!(e.contains("1001 bytes") && e.contains("max_frame"), "{e}");
    // The refusal's 32 bytes and the message's 1016, counted on both sides alike.
    let (sent, received) = (out[0].1, out[1].1);
    assert_eq!((sent.payload_sent, sent.total_sent), (1000, 1000 + 16 + 32));
    assert_eq!(
        (received.payload_received, received.total_received),
        (sent.payload_sent, sent.total_sent)
    );
}

/// Ranks whose frame limits differ fail at connect, every one with the same error
/// naming the limits, not at their first large message with a malformed frame.
#[test]
fn ranks_with_different_frame_limits_are_refused_at_connect() {
    let configs = job_configs(3, "t", Duration::from_secs(20));
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = configs
            .into_iter()
            .map(|mut cfg| {
                s.spawn(move || {
                    cfg.max_frame = if cfg.rank == 2 { 5000 } else { 4000 };
                    Communicator::connect(&cfg)
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        assert!(
            e.contains("frame limits differ (rank 0: 4000, rank 1: 4000, rank 2: 5000)"),
            "{e}"
        );
    }
}

/// Inside a collective, a message over the peers' frame limit ends the job at once with
/// that cause on every rank, instead of each rank waiting out the timeout for a message
/// its peer refused to send. Bruck's allgather packs up to ⌊P/2⌋ ranks' blocks in one
/// message, so 120 kB per rank is legal on its own and 240 kB at the second step.
#[test]
fn a_collective_message_over_max_frame_fails_every_rank_at_once() {
    let timeout = Duration::from_secs(20);
    let with_limit = |mut cfg: comm::CommConfig| {
        cfg.max_frame = 200_000;
        Communicator::connect(&cfg).unwrap()
    };
    for case in ["allgather_v", "broadcast"] {
        let world = if case == "allgather_v" { 4 } else { 3 };
        let configs = job_configs(world, "t", timeout);
        let start = Instant::now();
        let errors: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = configs
                .into_iter()
                .enumerate()
                .map(|(rank, cfg)| {
                    s.spawn(move || {
                        let mut c = with_limit(cfg);
                        let r = if case == "allgather_v" {
                            c.allgather_v(&[rank as u8; 120_000]).map(|_| ())
                        } else {
                            // Only the root's message is too large.
                            let data = if rank == 0 {
                                vec![1u8; 300_000]
                            } else {
                                Vec::new()
                            };
                            c.broadcast(0, &data).map(|_| ())
                        };
                        let e = r.expect_err("the collective must fail").to_string();
                        // The communicator has given up: later calls fail at once.
                        assert!(c.barrier().is_err());
                        e
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "{case}: took {took:?}: {errors:?}"
        );
        for (rank, e) in errors.iter().enumerate() {
            assert!(e.contains("max_frame"), "{case}, rank {rank}: {e}");
            if case == "broadcast" && rank > 0 {
                assert!(e.contains("rank 0 failed"), "{case}, rank {rank}: {e}");
            }
        }
    }
}

/// Both ranks of a ping-pong pair return the pair's (finite) times; an unpaired last
/// rank returns none.
#[test]
fn ping_pong_gives_both_ranks_of_a_pair_the_same_samples() {
    let out = job(3, |c| comm::ping_pong(c, &[1, 4096], 3).unwrap());
    assert_eq!(out[0].len(), 2);
    assert_eq!(out[0], out[1]);
    assert!(out[2].is_empty());
    assert!(
        out[1].iter().all(|&(_, t)| t.is_finite() && t > 0.0),
        "{out:?}"
    );
    let fit = comm::AlphaBeta::fit(&out[1]);
    assert!(fit.alpha.is_finite() && fit.beta.is_finite(), "{fit:?}");
}

#[test]
fn a_dead_peer_ends_the_collective_with_an_error_naming_it() {
    let timeout = Duration::from_secs(3);
    let start = Instant::now();
    let errors: Vec<Option<String>> = job_with(3, timeout, |rank, c| {
        if rank == 2 {
            return None; // dies: its sockets close
        }
        let mut d = vec![1.0f32; 10_000];
        c.allreduce(&mut d, ReduceOp::Sum)
            .err()
            .map(|e| e.to_string())
    });
    assert!(start.elapsed() < timeout * 3, "took {:?}", start.elapsed());
    for e in errors.iter().take(2) {
        let e = e.as_ref().expect("the survivors must fail");
        assert!(e.contains("rank "), "{e}");
    }
    assert!(
        errors.iter().flatten().any(|e| e.contains("rank 2")),
        "{errors:?}"
    );
}

/// With more ranks than a dead one's neighbours, every survivor still names it: the
/// ranks that see it fail tell the others (an abort notice), instead of each naming the
/// neighbour whose connection closed.
#[test]
fn every_survivor_names_the_dead_rank_not_its_neighbour() {
    for (world, dead) in [(5usize, 2usize), (6, 0)] {
        let timeout = Duration::from_secs(5);
        let start = Instant::now();
        let errors: Vec<Option<String>> = job_with(world, timeout, |rank, c| {
            if rank == dead {
                return None; // dies: its sockets close
            }
            let mut d = vec![1.0f32; 200_000];
            let first = c
                .allreduce(&mut d, ReduceOp::Sum)
                .err()
                .map(|e| e.to_string());
            // A communicator that gave up says so at once, naming the same rank.
            let again = c.barrier().unwrap_err().to_string();
            assert!(again.contains(&format!("rank {dead} failed")), "{again}");
            first
        });
        assert!(
            start.elapsed() < timeout,
            "world {world}: took {:?}",
            start.elapsed()
        );
        for (rank, e) in errors.iter().enumerate() {
            if rank == dead {
                continue;
            }
            let e = e.as_ref().expect("the survivors must fail");
            assert!(
                e.contains(&format!("rank {dead}")),
                "world {world}, rank {rank}: {e}"
            );
        }
    }
}

/// A rank that hangs (alive, its sockets open, calling nothing) rather than dies: every
/// other rank's wait ends by its timeout, the ranks downstream of the hung one a few
/// microseconds after their neighbour's. Each must name the hung rank, not the neighbour
/// whose own timeout has not fired yet.
#[test]
fn every_rank_names_a_hung_rank_not_its_neighbour() {
    // (world, hung rank, collective): the ring allreduce; Bruck's allgather, where a
    // rank further ahead may have queued data ahead of its notice; and a broadcast whose
    // root waits for its first child's receipt before the second child's message, so
    // that child waits on a root that waits on the hung rank.
    for (world, hung, what) in [
        (4usize, 2usize, "allreduce"),
        (5, 0, "allreduce"),
        (5, 1, "allgather"),
        (6, 3, "allgather"),
        (4, 1, "broadcast"),
    ] {
        let timeout = Duration::from_secs(1);
        let errors: Vec<(Option<String>, Duration)> = job_with(world, timeout, |rank, c| {
            let start = Instant::now();
            let e = if rank == hung {
                // Hangs past everyone's timeout and tracing, then leaves.
                std::thread::sleep(timeout * 3);
                None
            } else if what == "allgather" {
                c.allgather_v(&vec![rank as u8; 30_000]).err()
            } else if what == "broadcast" {
                c.broadcast(0, &vec![7u8; 40_000]).err()
            } else {
                let mut d = vec![1.0f32; 50_000];
                c.allreduce(&mut d, ReduceOp::Sum).err()
            };
            (e.map(|e| e.to_string()), start.elapsed())
        });
        for (rank, (e, took)) in errors.iter().enumerate() {
            if rank == hung {
                continue;
            }
            // The timeout, then the stall's tracing (STALL_GRACE, 300 ms a round), well
            // before the hung rank leaves.
            assert!(
                *took < timeout * 2,
                "world {world}, {what}, rank {rank} failed after {took:?} (timeout {timeout:?})"
            );
            let e = e.as_ref().expect("the others must fail");
            // Either its own timeout on the hung rank, or a notice naming it.
            assert!(
                e.starts_with(&format!("rank {hung}:"))
                    || e.contains(&format!("rank {hung} failed")),
                "world {world}, {what}, rank {rank}: {e}"
            );
        }
    }
}

#[test]
fn the_frame_decoder_rejects_garbage_without_panicking() {
    let mut r = Rng::new(9);
    for len in 0..64 {
        for _ in 0..200 {
            let bytes: Vec<u8> = (0..len).map(|_| r.below(256) as u8).collect();
            let _ = comm::decode_header(&bytes, 1 << 20);
        }
    }
    let mut ok = vec![b'G', b'X', comm::FRAME_VERSION, 0, 1, 0, 0, 0];
    ok.extend((1u64 << 40).to_le_bytes());
    let e = comm::decode_header(&ok, 1 << 20).unwrap_err();
    assert!(e.contains("exceeds the maximum"), "{e}");
    ok[2] = 9;
    assert!(comm::decode_header(&ok, 1 << 50)
        .unwrap_err()
        .contains("version"));
    assert!(comm::decode_header(&ok[..10], 1 << 50)
        .unwrap_err()
        .contains("truncated"));
    // Kinds other than data (0) and abort notices (1) are not frames of this version.
    ok[2] = comm::FRAME_VERSION;
    assert!(comm::decode_header(&ok, 1 << 50).is_ok());
    ok[3] = 7;
    assert!(comm::decode_header(&ok, 1 << 50)
        .unwrap_err()
        .contains("unknown frame kind 7"));
}
