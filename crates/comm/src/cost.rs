//! The α-β cost model of paper 002 (Table I): a message of n bytes between two ranks
//! takes α + nβ. α and β are fitted by least squares to a ping-pong measurement; the
//! predictions below are for the algorithms as this crate implements them, in bytes:
//!
//! | collective | this crate | paper 002, Table I |
//! |---|---|---|
//! | dense allreduce (ring), m bytes | 2(P−1)α + 2(P−1)/P·mβ | same |
//! | TopKAllReduce (ring allgather of k indices + k values) | (P−1)(α + 8kβ) | log₂P·α + 2(P−1)kβ |
//! | gTopKAllReduce (binomial tree up, then down) | 2⌈log₂P⌉(α + 8kβ) | 2log₂P·α + 4k·log₂P·β |
//!
//! The paper counts k in elements of its β unit; ours counts the 8 bytes of an
//! (index, value) pair. The latency term of TopKAllReduce differs because the paper
//! assumes a recursive-doubling allgather and we use a ring.

use crate::communicator::Communicator;
use crate::error::Result;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlphaBeta {
    /// Seconds per message.
    pub alpha: f64,
    /// Seconds per byte.
    pub beta: f64,
}

fn log2_ceil(p: usize) -> f64 {
    (p.max(1) as f64).log2().ceil()
}

impl AlphaBeta {
    /// Least-squares fit of `t = α + nβ` to (bytes, one-way seconds) samples.
    pub fn fit(samples: &[(usize, f64)]) -> AlphaBeta {
        let n = samples.len().max(1) as f64;
        let mx = samples.iter().map(|s| s.0 as f64).sum::<f64>() / n;
        let my = samples.iter().map(|s| s.1).sum::<f64>() / n;
        let sxx: f64 = samples.iter().map(|s| (s.0 as f64 - mx).powi(2)).sum();
        let sxy: f64 = samples.iter().map(|s| (s.0 as f64 - mx) * (s.1 - my)).sum();
        let beta = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
        AlphaBeta {
            alpha: (my - beta * mx).max(0.0),
            beta,
        }
    }
    pub fn allreduce(&self, p: usize, bytes: usize) -> f64 {
        if p < 2 {
            return 0.0;
        }
        let p_f = p as f64;
        2.0 * (p_f - 1.0) * self.alpha + 2.0 * (p_f - 1.0) / p_f * bytes as f64 * self.beta
    }
    pub fn topk_allreduce(&self, p: usize, k: usize) -> f64 {
        (p.max(1) - 1) as f64 * (self.alpha + 8.0 * k as f64 * self.beta)
    }
    pub fn gtopk_allreduce(&self, p: usize, k: usize) -> f64 {
        2.0 * log2_ceil(p) * (self.alpha + 8.0 * k as f64 * self.beta)
    }
    /// Paper 002's Table I forms, for reference (k in elements of 4 bytes).
    pub fn paper_topk(&self, p: usize, k: usize) -> f64 {
        (p as f64).log2() * self.alpha + 2.0 * (p as f64 - 1.0) * 4.0 * k as f64 * self.beta
    }
    pub fn paper_gtopk(&self, p: usize, k: usize) -> f64 {
        2.0 * (p as f64).log2() * self.alpha + 4.0 * 4.0 * k as f64 * (p as f64).log2() * self.beta
    }
}

/// Ping-pong between ranks 0 and 1 (others wait): for each size, the best over `reps`
/// round trips, halved. Every rank must call it; only ranks 0 and 1 get samples.
pub fn ping_pong(
    comm: &mut Communicator,
    sizes: &[usize],
    reps: usize,
) -> Result<Vec<(usize, f64)>> {
    let mut out = Vec::new();
    for &n in sizes {
        let buf = vec![0u8; n];
        let mut best = f64::INFINITY;
        for _ in 0..reps.max(1) {
            match comm.rank() {
                0 => {
                    let t = Instant::now();
                    comm.send(1, &buf)?;
                    comm.recv(1)?;
                    best = best.min(t.elapsed().as_secs_f64() / 2.0);
                }
                1 => {
                    let got = comm.recv(0)?;
                    comm.send(0, &got)?;
                }
                _ => {}
            }
        }
        if comm.rank() < 2 {
            out.push((n, best));
        }
    }
    comm.barrier()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn fit_recovers_a_line_and_predictions_follow_table_one() {
        let ab = AlphaBeta::fit(&[(0, 1e-4), (1000, 1.1e-4), (1_000_000, 1.01e-2)]);
        assert!(
            (ab.alpha - 1e-4).abs() < 1e-7 && (ab.beta - 1e-8).abs() < 1e-11,
            "{ab:?}"
        );
        let m = AlphaBeta {
            alpha: 0.436e-3,
            beta: 9e-9,
        }; // the paper's 1 GbE fit
        assert!(
            (m.allreduce(4, 1 << 20) - (6.0 * 0.436e-3 + 1.5 * (1 << 20) as f64 * 9e-9)).abs()
                < 1e-12
        );
        // Figure 9's finding: about even at 4 workers, TopK far slower at 32.
        let k = 25_000;
        assert!(m.topk_allreduce(32, k) > 3.0 * m.gtopk_allreduce(32, k));
        assert!(m.topk_allreduce(4, k) < 1.5 * m.gtopk_allreduce(4, k));
    }
}
