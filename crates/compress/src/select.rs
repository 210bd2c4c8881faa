//! Choosing which gradient entries to send, shared by the sparsifying methods:
//!
//! - [`exact_topk`]: the k entries of largest magnitude, by selection (O(n) expected,
//!   `select_nth_unstable`), never a full sort; zeros are never chosen.
//! - [`sampled_threshold`]: DGC's hierarchical selection (Lin et al. §3 and their code):
//!   estimate the magnitude threshold from a random sample of 0.1–1 % of the entries,
//!   keep what passes; when more than 1.3·k pass, select the exact top-k among those
//!   (a much smaller set than n). A sample that lets fewer than 0.8·k through is
//!   retried with a lowered threshold. The result keeps between 0.8·k and 1.3·k entries.

use tensor::Rng;

/// Indices of the `k` largest |values| (ties to the lower index), ascending, less those
/// whose value is zero: where fewer than `k` entries are nonzero (an all-zero gradient, a
/// residual just sent), the zeros would travel and count as sent without carrying
/// anything, and the density reported would differ from [`sampled_threshold`]'s, which
/// never keeps a zero.
pub fn exact_topk(values: &[f32], k: usize) -> Vec<u32> {
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    let mut idx: Vec<u32> = (0..values.len() as u32).collect();
    if k < values.len() {
        idx.select_nth_unstable_by(k - 1, |&a, &b| {
            values[b as usize]
                .abs()
                .total_cmp(&values[a as usize].abs())
                .then(a.cmp(&b))
        });
        idx.truncate(k);
    }
    // Zeros rank last, so they are among the chosen only where fewer than k are nonzero.
    idx.retain(|&i| values[i as usize] != 0.0);
    idx.sort_unstable();
    idx
}

/// Indices (ascending) of about `k` large-magnitude entries: between 0.8·k and 1.3·k
/// when `values` has at least that many nonzeros. `sample_fraction` in (0, 1].
pub fn sampled_threshold(
    values: &[f32],
    k: usize,
    sample_fraction: f64,
    rng: &mut Rng,
) -> Vec<u32> {
    let n = values.len();
    if k == 0 || n == 0 {
        return Vec::new();
    }
    if k * 4 >= n {
        return exact_topk(values, k);
    }
    // At least 64 samples (and at least k) so that the threshold is not one draw's luck.
    let samples = ((n as f64 * sample_fraction).ceil() as usize).clamp(k.max(64).min(n), n);
    let mut sample: Vec<f32> = (0..samples).map(|_| values[rng.below(n)].abs()).collect();
    // The threshold that lets k of n through lets k·samples/n of the sample through.
    let keep = ((k as f64 * samples as f64 / n as f64).ceil() as usize).clamp(1, samples);
    let mut threshold = {
        let (_, t, _) = sample.select_nth_unstable_by(samples - keep, |a, b| a.total_cmp(b));
        *t
    };
    for _ in 0..8 {
        // NaN passes too (as it ranks first in `exact_topk`), so a diverged value is sent
        // and its encoder refuses it, instead of staying behind in the accumulator.
        let passed: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                let a = values[i as usize].abs();
                (a >= threshold || a.is_nan()) && a != 0.0
            })
            .collect();
        if passed.len() * 10 > k * 13 {
            // Too many: the exact top-k of the (small) passing set.
            let sub: Vec<f32> = passed.iter().map(|&i| values[i as usize]).collect();
            let mut chosen: Vec<u32> = exact_topk(&sub, k)
                .into_iter()
                .map(|j| passed[j as usize])
                .collect();
            chosen.sort_unstable();
            return chosen;
        }
        if passed.len() * 10 >= k * 8 || threshold <= 0.0 {
            return passed;
        }
        // Too few: the sample overestimated the threshold; lower it and look again.
        threshold *= 0.7;
    }
    exact_topk(values, k)
}
