//! Where the stochastic quantizers (QSGD, TernGrad) take their uniform draws from: a
//! counter-based stream per rank, step and parameter ([`Counter`], the methods' own, the
//! same draws the GPU kernels make: `tensor::quantize`), or any [`Rng`] (tests and
//! benchmarks that want a sequential generator).

use tensor::quantize::{counter_key, uniform_of, COUNTER_GAMMA};
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

/// Draws 0, 1, … of the counter stream `key`, in order: draw i is
/// `counter_uniform(key, i)`, its hash input kept as a running sum (one add a draw where
/// recomputing it takes a multiply; TernGrad's encoder measured 7 % slower with it).
#[derive(Clone, Copy, Debug)]
pub struct Counter {
    pub key: u64,
    /// The hash input of the last draw (`key + i·γ` for draw i − 1).
    z: u64,
}

impl Counter {
    /// The stream of parameter `index` at `step` for a method keyed `base`
    /// ([`method_key`]).
    pub fn for_exchange(base: u64, step: u64, index: usize) -> Counter {
        let key = counter_key(&[base, step, index as u64]);
        Counter { key, z: key }
    }
}

impl Draws for Counter {
    #[inline]
    fn uniform(&mut self) -> f64 {
        self.z = self.z.wrapping_add(COUNTER_GAMMA);
        uniform_of(self.z) as f64
    }
    fn skip(&mut self, n: u64) {
        self.z = self.z.wrapping_add(n.wrapping_mul(COUNTER_GAMMA));
    }
}

/// A method's key from the job's seed, a salt naming the method, and the rank: ranks
/// draw independently, and a rerun with the same seed draws the same.
pub fn method_key(seed: u64, salt: u64, rank: usize) -> u64 {
    counter_key(&[seed, salt, rank as u64])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensor::quantize::counter_uniform;

    #[test]
    fn a_counter_draws_the_kernels_draws_in_order_and_skips_exactly() {
        let mut c = Counter::for_exchange(9, 4, 2);
        let key = c.key;
        for i in 0..1000 {
            assert_eq!(c.uniform(), counter_uniform(key, i) as f64, "draw {i}");
        }
        c.skip(12_345);
        assert_eq!(c.uniform(), counter_uniform(key, 1000 + 12_345) as f64);
    }
}
