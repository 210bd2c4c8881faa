//! A small, seeded, reproducible random number generator (xoshiro256++ seeded through
//! splitmix64). It is ours rather than `rand`'s so that a seed gives the same stream on
//! every platform and every version of this crate: runs are reproducible per rank.

#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut st = seed;
        Rng {
            s: [
                splitmix64(&mut st),
                splitmix64(&mut st),
                splitmix64(&mut st),
                splitmix64(&mut st),
            ],
        }
    }
    /// The generator's full state, for checkpoints: a resumed run continues the stream.
    pub fn state(&self) -> [u64; 4] {
        self.s
    }
    /// A generator at a saved [`Rng::state`]. The all-zero state is not one xoshiro can
    /// reach or leave, so it is refused.
    pub fn from_state(s: [u64; 4]) -> Option<Self> {
        if s == [0; 4] {
            None
        } else {
            Some(Rng { s })
        }
    }
    /// An independent stream for worker `rank` of a job seeded with `seed`.
    pub fn for_rank(seed: u64, rank: usize) -> Self {
        Rng::new(
            seed ^ (rank as u64)
                .wrapping_mul(0xD1B5_4A32_D192_ED03)
                .rotate_left(17),
        )
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
    /// Uniform in [0, 1) with 53 random bits.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform integer in 0..n (n > 0), by Lemire's multiply-shift (bias below 2^-32 for n < 2^32).
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
    /// Standard normal sample (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// Element `i` of the counter-based uniform stream `seed`, in `[0, 1)`: a SplitMix64
/// finaliser of `seed + (i + 1) * golden`, so any element is computed independently (on
/// a GPU thread as on the CPU; kernels/random.cu holds the same function).
pub(crate) fn counter_uniform(seed: u64, i: u64) -> f64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn same_seed_same_stream_and_sane_moments() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        let mut r = Rng::new(1);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "mean {mean} var {var}"
        );
        assert_ne!(
            Rng::for_rank(1, 0).next_u64(),
            Rng::for_rank(1, 1).next_u64()
        );
    }
}
