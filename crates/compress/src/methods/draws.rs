//! Where the stochastic quantizers (QSGD, TernGrad) take their uniform draws from: a
//! counter-based stream per rank, step and parameter ([`Counter`], the methods' own, the
//! same draws the GPU kernels make: `tensor::quantize`), or any [`Rng`] (tests and
//! benchmarks that want a sequential generator).

use tensor::quantize::{counter_key, counter_uniform};
use tensor::Rng;

/// A source of uniform draws in [0, 1), one per quantized value, in order.
pub trait Draws {
    fn uniform(&mut self) -> f64;
    /// Passes over `n` values that draw nothing (a bucket of scale 0), so that value i
    /// of a tensor takes draw i of a counter stream whatever came before it.
    fn skip(&mut self, _n: u64) {}
}

impl Draws for Rng {
    fn uniform(&mut self) -> f64 {
        Rng::uniform(self)
    }
}

/// Draws `next`, `next + 1`, … of the counter stream `key`.
#[derive(Clone, Copy, Debug)]
pub struct Counter {
    pub key: u64,
    pub next: u64,
}

impl Counter {
    /// The stream of parameter `index` at `step` for a method keyed `base`
    /// ([`method_key`]).
    pub fn for_exchange(base: u64, step: u64, index: usize) -> Counter {
        Counter {
            key: counter_key(&[base, step, index as u64]),
            next: 0,
        }
    }
}

impl Draws for Counter {
    fn uniform(&mut self) -> f64 {
        let u = counter_uniform(self.key, self.next);
        self.next += 1;
        u as f64
    }
    fn skip(&mut self, n: u64) {
        self.next += n;
    }
}

/// A method's key from the job's seed, a salt naming the method, and the rank: ranks
/// draw independently, and a rerun with the same seed draws the same.
pub fn method_key(seed: u64, salt: u64, rank: usize) -> u64 {
    counter_key(&[seed, salt, rank as u64])
}
