//! Helpers shared by the method tests: a loopback job of threads, gradient-like data,
//! and a minimal optimizer that applies an [`Update`] the way the trainer does.

#![allow(dead_code)]

use comm::{CommConfig, Communicator};
use compress::{Update, UpdateKind};
use std::time::Duration;
use tensor::Rng;

/// Method `name` with `opts` (`key=value`) built for `ctx` and initialised with one
/// parameter per shape, named `p0`, `p1`, …
pub fn built<S: AsRef<[usize]>>(
    name: &str,
    opts: &[impl ToString],
    ctx: &compress::Context,
    shapes: impl IntoIterator<Item = S>,
) -> Box<dyn compress::Method> {
    let opts: Vec<String> = opts.iter().map(|o| o.to_string()).collect();
    let mut m = compress::build(&compress::MethodSpec::parse(name, &opts).unwrap(), ctx).unwrap();
    let params: Vec<compress::ParamSpec> = shapes
        .into_iter()
        .enumerate()
        .map(|(i, s)| compress::ParamSpec::new(format!("p{i}"), s.as_ref()))
        .collect();
    m.init(&params).unwrap();
    m
}

/// A rank's context with seed 1, no momentum and no weight decay (struct-update the rest).
pub fn ctx(rank: usize, world: usize) -> compress::Context {
    compress::Context {
        rank,
        world,
        seed: 1,
        momentum: 0.0,
        nesterov: false,
        weight_decay: 0.0,
    }
}

/// Runs `f(rank, comm)` on every rank of a loopback job (one thread each); rank order.
pub fn job<T: Send>(world: usize, f: impl Fn(usize, &mut Communicator) -> T + Sync) -> Vec<T> {
    let configs = CommConfig::loopback_job(world, b"test").unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = configs
            .into_iter()
            .enumerate()
            .map(|(rank, cfg)| {
                let f = &f;
                s.spawn(move || {
                    let mut c = Communicator::connect(&CommConfig {
                        timeout: Duration::from_secs(30),
                        max_frame: 1 << 30,
                        ..cfg
                    })
                    .unwrap();
                    f(rank, &mut c)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Gradient-like values: Gaussian bulk, a heavy (Student-t-like) tail, some exact zeros.
pub fn heavy_tailed(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            if r.below(20) == 0 {
                return 0.0;
            }
            let chi: f64 = (0..3).map(|_| r.normal().powi(2)).sum::<f64>() / 3.0;
            (1e-3 * r.normal() / chi.sqrt()) as f32
        })
        .collect()
}

/// SGD with momentum for `Gradient` updates, plain `w -= lr·d` for `Direction` ones.
pub struct TestSgd {
    pub lr: f32,
    pub momentum: f32,
    pub bufs: Vec<Vec<f32>>,
}

impl TestSgd {
    pub fn new(lr: f32, momentum: f32, sizes: &[usize]) -> Self {
        TestSgd {
            lr,
            momentum,
            bufs: sizes.iter().map(|&n| vec![0.0; n]).collect(),
        }
    }
    pub fn apply(&mut self, index: usize, w: &mut [f32], u: &Update) {
        match u.kind {
            UpdateKind::Direction => w
                .iter_mut()
                .zip(&u.values)
                .for_each(|(w, d)| *w -= self.lr * d),
            UpdateKind::Gradient => {
                let b = &mut self.bufs[index];
                for i in 0..w.len() {
                    b[i] = self.momentum * b[i] + u.values[i];
                    w[i] -= self.lr * b[i];
                }
            }
        }
    }
}
