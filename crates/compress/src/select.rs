//! Choosing which gradient entries to send, shared by the sparsifying methods:
//!
//! - [`exact_topk`]: the k entries of largest magnitude, by selection (O(n) expected,
//!   `select_nth_unstable`), never a full sort; zeros are never chosen. It lives in
//!   `tensor::sparsify`, beside its GPU twin.
//! - [`sampled_threshold`]: DGC's hierarchical selection (Lin et al. §3 and their code):
//!   estimate the magnitude threshold from a sample of 0.1–1 % of the entries, keep what
//!   passes; when more than 1.3·k pass, select the exact top-k among those (a much smaller
//!   set than n). A sample that lets fewer than 0.8·k through is retried with a lowered
//!   threshold. The result keeps between 0.8·k and 1.3·k entries.
//!
//! The sample is strided with a random start, as in the reference code's default
//! (`strided_sample=True`: `importance[start::stride]`), rather than drawn at random
//! positions: it costs one draw of the generator instead of one per sampled entry, and a
//! GPU reads it in one gather, so the same rule ([`sampled_rule`]) runs on a slice and on
//! a tensor on any device and chooses the same entries on both.

use tensor::sparsify::{self, Selected};
use tensor::{Rng, Tensor};

pub use tensor::sparsify::exact_topk;

/// Indices (ascending) of about `k` large-magnitude entries: between 0.8·k and 1.3·k
/// when `values` has at least that many nonzeros. `sample_fraction` in (0, 1].
pub fn sampled_threshold(
    values: &[f32],
    k: usize,
    sample_fraction: f64,
    rng: &mut Rng,
) -> Vec<u32> {
    sampled_rule(&values, k, sample_fraction, rng).unwrap_or_else(|e| match e {})
}

/// [`sampled_threshold`] on a flat f32 tensor on any device: the same entries, as a
/// [`Selected`] on the tensor's device.
pub fn sampled_threshold_tensor(
    values: &Tensor,
    k: usize,
    sample_fraction: f64,
    rng: &mut Rng,
) -> tensor::Result<Selected> {
    sampled_rule(&values, k, sample_fraction, rng)
}

/// What the sampled rule needs of the values it selects from.
pub trait Magnitudes {
    /// What a selection returns (indices, or indices and values on a device).
    type Out;
    type Error;
    /// The entries that pass a threshold, counted (and, where cheap, already found).
    type Counted;
    /// How many values there are.
    fn count(&self) -> usize;
    /// The `kth` largest magnitude among `count` entries from `start` every `stride`.
    fn sample_kth(
        &self,
        start: usize,
        stride: usize,
        count: usize,
        kth: usize,
    ) -> Result<f32, Self::Error>;
    /// The entries that pass `threshold`: |x| ≥ threshold or NaN, and not zero.
    fn count_passing(&self, threshold: f32) -> Result<Self::Counted, Self::Error>;
    fn counted(c: &Self::Counted) -> usize;
    /// Those entries.
    fn take(&self, c: Self::Counted) -> Result<Self::Out, Self::Error>;
    /// The exact top-k of those entries (which are more than k).
    fn topk_of(&self, c: Self::Counted, k: usize) -> Result<Self::Out, Self::Error>;
    fn topk(&self, k: usize) -> Result<Self::Out, Self::Error>;
}

/// DGC's sampled selection over any [`Magnitudes`] (module comment).
pub fn sampled_rule<M: Magnitudes>(
    values: &M,
    k: usize,
    sample_fraction: f64,
    rng: &mut Rng,
) -> Result<M::Out, M::Error> {
    let n = values.count();
    if k == 0 || n == 0 || k.saturating_mul(4) >= n {
        return values.topk(k);
    }
    // At least 64 samples (and at least k) so that the threshold is not one draw's luck.
    let samples = ((n as f64 * sample_fraction).ceil() as usize).clamp(k.max(64).min(n), n);
    // samples·stride ≤ n and start < stride, so the last sample is in range.
    let stride = n / samples;
    let start = rng.below(stride);
    // The threshold that lets k of n through lets k·samples/n of the sample through.
    let keep = ((k as f64 * samples as f64 / n as f64).ceil() as usize).clamp(1, samples);
    let mut threshold = values.sample_kth(start, stride, samples, keep)?;
    for _ in 0..8 {
        // NaN passes too (as it ranks first in `exact_topk`), so a diverged value is sent
        // and its encoder refuses it, instead of staying behind in the accumulator.
        let passed = values.count_passing(threshold)?;
        let count = M::counted(&passed);
        if count * 10 > k * 13 {
            // Too many: the exact top-k of the (small) passing set.
            return values.topk_of(passed, k);
        }
        if count * 10 >= k * 8 || threshold <= 0.0 {
            return values.take(passed);
        }
        // Too few: the sample overestimated the threshold; lower it and look again.
        threshold *= 0.7;
    }
    values.topk(k)
}

impl Magnitudes for &[f32] {
    type Out = Vec<u32>;
    type Error = std::convert::Infallible;
    type Counted = Vec<u32>;
    fn count(&self) -> usize {
        <[f32]>::len(self)
    }
    fn sample_kth(
        &self,
        start: usize,
        stride: usize,
        count: usize,
        kth: usize,
    ) -> Result<f32, Self::Error> {
        let mut s: Vec<f32> = (0..count).map(|j| self[start + j * stride].abs()).collect();
        let (_, t, _) = s.select_nth_unstable_by(count - kth, |a, b| a.total_cmp(b));
        Ok(*t)
    }
    fn count_passing(&self, threshold: f32) -> Result<Vec<u32>, Self::Error> {
        Ok((0..self.len() as u32)
            .filter(|&i| {
                let a = self[i as usize].abs();
                (a >= threshold || a.is_nan()) && a != 0.0
            })
            .collect())
    }
    fn counted(c: &Vec<u32>) -> usize {
        c.len()
    }
    fn take(&self, c: Vec<u32>) -> Result<Vec<u32>, Self::Error> {
        Ok(c)
    }
    fn topk_of(&self, passed: Vec<u32>, k: usize) -> Result<Vec<u32>, Self::Error> {
        let sub: Vec<f32> = passed.iter().map(|&i| self[i as usize]).collect();
        // exact_topk returns ascending positions in `sub`, so these stay ascending.
        Ok(exact_topk(&sub, k)
            .into_iter()
            .map(|j| passed[j as usize])
            .collect())
    }
    fn topk(&self, k: usize) -> Result<Vec<u32>, Self::Error> {
        Ok(exact_topk(self, k))
    }
}

impl Magnitudes for &Tensor {
    type Out = Selected;
    type Error = tensor::Error;
    type Counted = sparsify::Counted;
    fn count(&self) -> usize {
        self.elem_count()
    }
    fn sample_kth(
        &self,
        start: usize,
        stride: usize,
        count: usize,
        kth: usize,
    ) -> tensor::Result<f32> {
        sparsify::kth_largest_magnitude(&sparsify::strided_sample(self, start, stride, count)?, kth)
    }
    fn count_passing(&self, threshold: f32) -> tensor::Result<sparsify::Counted> {
        sparsify::count_passing(self, threshold)
    }
    fn counted(c: &sparsify::Counted) -> usize {
        c.len()
    }
    fn take(&self, c: sparsify::Counted) -> tensor::Result<Selected> {
        sparsify::take_counted(self, c)
    }
    fn topk_of(&self, passed: sparsify::Counted, k: usize) -> tensor::Result<Selected> {
        let passed = sparsify::take_counted(self, passed)?;
        let top = sparsify::topk_magnitude(&passed.values, k)?;
        Ok(Selected {
            indices: passed.indices.index_select(&top.indices, 0)?,
            values: top.values,
            source_len: self.elem_count(),
        })
    }
    fn topk(&self, k: usize) -> tensor::Result<Selected> {
        sparsify::topk_magnitude(self, k)
    }
}
