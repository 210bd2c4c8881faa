//! What a sparsifying method does not send it keeps: over several steps, what all ranks
//! applied (times the world size) plus what stays in their residuals equals what they
//! accumulated — for gradient dropping, DGC (with momentum correction too), gTop-k with
//! its put-back, and SBC. And DGC with every technique off is gradient dropping, bit
//! for bit.

// Parameter p indexes several ranks' outcome tables at once: an index loop is clearest.
#![allow(clippy::needless_range_loop)]

mod common;

use common::{built, heavy_tailed, job};
use compress::{Context, HostAfterStep, HostExchange, Method, StepInfo, UpdateKind};

const SIZES: [usize; 3] = [5000, 1200, 40];

fn ctx(rank: usize, world: usize, momentum: f64) -> Context {
    Context {
        rank,
        world,
        seed: 7,
        momentum,
        nesterov: false,
        weight_decay: 0.0,
    }
}

fn method(name: &str, opts: &[&str], c: &Context) -> Box<dyn Method> {
    built(name, opts, c, SIZES.map(|n| [n]))
}

fn grad(rank: usize, step: usize, p: usize) -> Vec<f32> {
    heavy_tailed(SIZES[p], (1000 * rank + 10 * step + p) as u64 + 1)
}

fn residual_sum(m: &dyn Method, key: &str, p: usize) -> Vec<f64> {
    let s = m.state().unwrap();
    let (_, r) = s.iter().find(|(k, _)| k == &format!("{key}.{p}")).unwrap();
    r.iter().map(|&x| x as f64).collect()
}

/// Runs `steps` exchanges on `world` ranks; returns per rank: (Σ applied per parameter,
/// Σ of the accumulated quantity per parameter, final residual per parameter, Σ of the
/// accumulated magnitudes: the scale that f32 rounding errors are relative to).
fn run(
    world: usize,
    steps: usize,
    name: &str,
    opts: &[&str],
    momentum: f64,
    residual_key: &str,
) -> Vec<Outcome> {
    job(world, |rank, c| {
        let cx = ctx(rank, world, momentum);
        let mut m = method(name, opts, &cx);
        let mut applied: Vec<Vec<f64>> = SIZES.iter().map(|&n| vec![0.0; n]).collect();
        let mut accumulated = applied.clone();
        let mut velocity: Vec<Vec<f64>> = applied.clone();
        let mut magnitude: Vec<Vec<f64>> = applied.clone();
        for step in 0..steps {
            m.begin_step(StepInfo {
                step: step as u64,
                epoch: step as f64,
            });
            for p in 0..SIZES.len() {
                let g = grad(rank, step, p);
                let w = vec![0f32; SIZES[p]];
                let u = m
                    .exchange(HostExchange::new(c, p, &g).with_weights(&w))
                    .unwrap();
                for i in 0..SIZES[p] {
                    velocity[p][i] = momentum * velocity[p][i] + g[i] as f64;
                    accumulated[p][i] += velocity[p][i];
                    magnitude[p][i] += velocity[p][i].abs();
                    applied[p][i] += u.values[i] as f64;
                }
                if momentum > 0.0 && u.kind == UpdateKind::Gradient {
                    panic!("momentum correction returns directions");
                }
            }
        }
        let residual = (0..SIZES.len())
            .map(|p| residual_sum(m.as_ref(), residual_key, p))
            .collect();
        (applied, accumulated, residual, magnitude)
    })
}

type Outcome = (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>);

fn check_conservation(world: usize, out: &[Outcome], what: &str) -> f64 {
    let mut worst: f64 = 0.0;
    for p in 0..SIZES.len() {
        for i in 0..SIZES[p] {
            // Every rank applied the same average; world × it is the sum that was sent.
            let applied = world as f64 * out[0].0[p][i];
            let acc: f64 = out.iter().map(|o| o.1[p][i]).sum();
            let res: f64 = out.iter().map(|o| o.2[p][i]).sum();
            let scale = out.iter().map(|o| o.3[p][i]).sum::<f64>() + 1e-9;
            worst = worst.max((applied + res - acc).abs() / scale);
        }
        for r in out {
            assert_eq!(
                r.0[p], out[0].0[p],
                "{what}: ranks applied different updates"
            );
        }
    }
    worst
}

#[test]
fn gradient_dropping_conserves_what_it_accumulates() {
    for world in [1, 3] {
        let out = run(world, 6, "topk", &["density=0.01"], 0.0, "residual");
        let worst = check_conservation(world, &out, "topk");
        assert!(worst < 1e-5, "world {world}: relative error {worst}");
    }
}

#[test]
fn dgc_conserves_with_and_without_momentum_correction() {
    // Gradient dropping inside DGC (sampled selection, warm-up on), then with momentum
    // correction: the accumulated quantity is the velocity u, the residual is v.
    let out = run(
        2,
        6,
        "dgc",
        &[
            "density=0.01",
            "momentum_correction=false",
            "masking=false",
            "dense_below=0",
            "warmup_epochs=2",
        ],
        0.0,
        "v",
    );
    assert!(check_conservation(2, &out, "dgc") < 1e-5);
    let out = run(
        3,
        6,
        "dgc",
        &[
            "density=0.01",
            "momentum_correction=true",
            "masking=false",
            "dense_below=0",
        ],
        0.9,
        "v",
    );
    let worst = check_conservation(3, &out, "dgc + momentum correction");
    assert!(worst < 1e-5, "relative error {worst}");
}

#[test]
fn gtopk_put_back_conserves_the_sum() {
    let out = run(2, 6, "gtopk", &["density=0.01"], 0.0, "residual");
    let worst = check_conservation(2, &out, "gtopk");
    assert!(worst < 1e-5, "relative error {worst}");
    // Four ranks: the tree may truncate a partial sum that later wins at the root (see
    // the module's documentation); measure how much mass that loses.
    let out = run(4, 6, "gtopk", &["density=0.01"], 0.0, "residual");
    let worst = check_conservation(4, &out, "gtopk");
    eprintln!("gtopk, 4 ranks: worst relative loss of an element's mass {worst:.3e}");
    assert!(worst < 0.5, "relative error {worst}");
}

#[test]
fn dgc_with_every_technique_off_is_gradient_dropping() {
    let steps = 5;
    let run_one = |name: &str, opts: &[&str]| {
        job(2, |rank, c| {
            let mut m = method(name, opts, &ctx(rank, 2, 0.0));
            let mut outs = Vec::new();
            for step in 0..steps {
                m.begin_step(StepInfo {
                    step: step as u64,
                    epoch: step as f64,
                });
                for p in 0..SIZES.len() {
                    let u = m
                        .exchange(
                            HostExchange::new(c, p, &grad(rank, step, p))
                                .with_weights(&vec![0.0; SIZES[p]]),
                        )
                        .unwrap();
                    assert_eq!(u.kind, UpdateKind::Gradient);
                    outs.push(u.values);
                }
            }
            outs
        })
    };
    let gd = run_one("topk", &["density=0.004"]);
    let dgc = run_one(
        "dgc",
        &[
            "density=0.004",
            "momentum_correction=false",
            "masking=false",
            "clip=0",
            "warmup_epochs=0",
            "sampling=false",
            "dense_below=0",
        ],
    );
    assert_eq!(gd, dgc);
}

#[test]
fn sbc_without_masking_names_no_positions() {
    let world = 2;
    let out = job(world, |rank, c| {
        let mut m = method(
            "sbc",
            &["delay=1", "density=0.01", "masking=false"],
            &ctx(rank, world, 0.0),
        );
        let mut w: Vec<f32> = vec![0.25; SIZES[0]];
        m.begin_step(StepInfo::default());
        let g = grad(rank, 0, 0);
        let u = m
            .exchange(HostExchange::new(c, 0, &g).with_weights(&w))
            .unwrap();
        for (x, d) in w.iter_mut().zip(&u.values) {
            *x -= 0.5 * d;
        }
        let stats = m
            .after_step(HostAfterStep::new(c, 0, &mut w))
            .unwrap()
            .expect("delay 1 syncs every step");
        (stats.sent_values, m.take_momentum_mask(0))
    });
    for (sent, mask) in out {
        assert!(sent > 0);
        assert!(mask.is_empty());
    }
}

/// SBC's message measure is the paper's: μ (4 bytes) and the Golomb-coded positions
/// (padded to a byte), not the count and b* that the wire carries besides.
#[test]
fn sbc_counts_the_mean_and_the_positions_as_its_message() {
    use compress::codec::golomb;
    let world = 2;
    let out = job(world, |rank, c| {
        let mut m = method("sbc", &["delay=1", "density=0.01"], &ctx(rank, world, 0.0));
        let mut w: Vec<f32> = vec![0.25; SIZES[0]];
        m.begin_step(StepInfo::default());
        let u = m
            .exchange(HostExchange::new(c, 0, &grad(rank, 0, 0)).with_weights(&w))
            .unwrap();
        for (x, d) in w.iter_mut().zip(&u.values) {
            *x -= 0.5 * d;
        }
        let stats = m
            .after_step(HostAfterStep::new(c, 0, &mut w))
            .unwrap()
            .unwrap();
        (stats.message_bytes, m.take_momentum_mask(0))
    });
    for (bytes, positions) in out {
        let b = golomb::optimal_b(positions.len() as f64 / SIZES[0] as f64);
        let coded = golomb::encode(&positions, b).unwrap();
        assert_eq!(bytes, 4 + coded.len());
    }
}

#[test]
fn sbc_conserves_the_weight_updates() {
    // Each rank takes local steps w -= lr·g; every `delay` steps SBC exchanges. What the
    // ranks moved locally = world × (movement of the shared weights) + residuals.
    let (world, delay, steps, lr) = (3, 4, 12, 0.5f32);
    let out = job(world, |rank, c| {
        let mut m = method("sbc", &["delay=4", "density=0.01"], &ctx(rank, world, 0.0));
        let mut w: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0.25; n]).collect();
        let mut local_moves: Vec<Vec<f64>> = SIZES.iter().map(|&n| vec![0.0; n]).collect();
        for step in 0..steps {
            m.begin_step(StepInfo {
                step: step as u64,
                epoch: 0.0,
            });
            for p in 0..SIZES.len() {
                let g = grad(rank, step, p);
                let u = m
                    .exchange(HostExchange::new(c, p, &g).with_weights(&w[p]))
                    .unwrap();
                assert_eq!(u.stats.message_bytes, 0, "local steps send nothing");
                for i in 0..SIZES[p] {
                    w[p][i] -= lr * u.values[i];
                    local_moves[p][i] -= (lr * u.values[i]) as f64;
                }
            }
            for p in 0..SIZES.len() {
                let stats = m.after_step(HostAfterStep::new(c, p, &mut w[p])).unwrap();
                assert_eq!(stats.is_some(), (step + 1) % delay == 0);
                // Momentum masking names exactly the positions this rank sent, once.
                let mask = m.take_momentum_mask(p);
                assert_eq!(mask.len(), stats.map_or(0, |s| s.sent_values));
                assert!(mask.windows(2).all(|w| w[0] < w[1]));
                assert!(mask.iter().all(|&i| (i as usize) < SIZES[p]));
                assert!(m.take_momentum_mask(p).is_empty());
            }
        }
        let residual: Vec<Vec<f64>> = (0..SIZES.len())
            .map(|p| residual_sum(m.as_ref(), "residual", p))
            .collect();
        (w, local_moves, residual)
    });
    for p in 0..SIZES.len() {
        for r in &out {
            assert_eq!(
                r.0[p], out[0].0[p],
                "ranks hold different weights after a sync"
            );
        }
        for i in 0..SIZES[p] {
            let shared = world as f64 * (out[0].0[p][i] as f64 - 0.25);
            let moved: f64 = out.iter().map(|o| o.1[p][i]).sum();
            let res: f64 = out.iter().map(|o| o.2[p][i]).sum();
            let scale = out.iter().map(|o| o.1[p][i].abs()).sum::<f64>() + 1e-6;
            assert!(
                (shared + res - moved).abs() / scale < 1e-3,
                "p{p}[{i}]: shared {shared} + residual {res} != moved {moved}"
            );
        }
    }
}

#[test]
fn dgc_reads_the_weights_only_for_weight_decay() {
    // Without weight decay DGC does not read the weights (the trainer then passes none);
    // the result must equal the one computed with the weights given.
    let out = job(2, |rank, c| {
        let mut with = method(
            "dgc",
            &["density=0.01", "dense_below=0"],
            &ctx(rank, 2, 0.9),
        );
        let mut without = method(
            "dgc",
            &["density=0.01", "dense_below=0"],
            &ctx(rank, 2, 0.9),
        );
        assert!(!with.reads_weights());
        let mut same = true;
        for step in 0..3 {
            for m in [&mut with, &mut without] {
                m.begin_step(StepInfo { step, epoch: 10.0 });
            }
            for p in 0..SIZES.len() {
                let g = grad(rank, step as usize, p);
                let a = with
                    .exchange(HostExchange::new(c, p, &g).with_weights(&vec![0.5; SIZES[p]]))
                    .unwrap();
                let b = without.exchange(HostExchange::new(c, p, &g)).unwrap();
                same &= a.values == b.values;
            }
        }
        // With weight decay the weights are read, and a missing slice is an error.
        let decayed = Context {
            weight_decay: 1e-4,
            ..ctx(rank, 2, 0.9)
        };
        let mut m = method("dgc", &["density=0.01"], &decayed);
        assert!(m.reads_weights());
        let err = m
            .exchange(HostExchange::new(c, 0, &grad(rank, 0, 0)))
            .err()
            .map(|e| e.to_string());
        (same, err)
    });
    for (same, err) in out {
        assert!(same, "DGC without weight decay depended on the weights");
        assert!(err.unwrap_or_default().contains("weight decay"));
    }
}

#[test]
fn dgc_dense_1d_sends_every_vector_dense_and_sparsifies_the_rest() {
    // A 2-D weight and a 1-D bias above dense_below: with dense_1d the bias is averaged
    // dense (4 bytes a value, every value sent, no residual kept), the weight still
    // sparsified; without it, both are sparse.
    let shapes: [&[usize]; 2] = [&[50, 100], &[3000]];
    let out = job(2, |rank, c| {
        let mut stats = Vec::new();
        for opts in [&["dense_1d=true"][..], &[][..]] {
            // Exact top-k: the counts below are the format's, not the sample's luck.
            let mut all = vec![
                "density=0.01",
                "dense_below=1000",
                "warmup_epochs=0",
                "sampling=false",
            ];
            all.extend(opts);
            let mut m = built("dgc", &all, &ctx(rank, 2, 0.9), shapes);
            m.begin_step(StepInfo {
                step: 0,
                epoch: 0.0,
            });
            let mut sent = Vec::new();
            for (p, s) in shapes.iter().enumerate() {
                let n: usize = s.iter().product();
                let g = heavy_tailed(n, (rank * 10 + p) as u64 + 3);
                let u = m.exchange(HostExchange::new(c, p, &g)).unwrap();
                sent.push((u.stats.sent_values, u.stats.message_bytes));
            }
            let kept: Vec<usize> = m.state().unwrap().iter().map(|(_, v)| v.len()).collect();
            stats.push((sent, kept, m.describe()));
        }
        stats
    });
    for per_rank in out {
        let (dense_1d, plain) = (&per_rank[0], &per_rank[1]);
        assert!(dense_1d.2.contains("dense_1d=true"), "{}", dense_1d.2);
        // The weight: 1 % of 5,000 values at 6 bytes either way.
        assert_eq!(dense_1d.0[0], (50, 300));
        assert_eq!(plain.0[0], (50, 300));
        // The bias: dense with dense_1d, 1 % without.
        assert_eq!(dense_1d.0[1], (3000, 12_000));
        assert_eq!(plain.0[1], (30, 180));
        // Residual (and velocity) state only for the sparse tensors.
        let total = |k: &[usize]| k.iter().sum::<usize>();
        assert!(
            total(&dense_1d.1) < total(&plain.1),
            "{dense_1d:?} {plain:?}"
        );
    }
}

/// PowerSGD's error feedback: what the rank-r approximations left out stays in the
/// ranks' errors (every tensor compressed: batched squares).
#[test]
fn powersgd_error_feedback_conserves() {
    let opts = [
        "batched=true",
        "start_iter=0",
        "rank=2",
        "min_compression_rate=1",
    ];
    for world in [1, 3] {
        let out = run(world, 5, "powersgd", &opts, 0.0, "error");
        let worst = check_conservation(world, &out, "powersgd");
        assert!(worst < 1e-5, "world {world}: relative error {worst}");
    }
}
