//! The α-β cost model of paper 002 (Table I): a message of n bytes between two ranks
//! takes α + nβ. α and β are fitted by least squares to a ping-pong measurement; the
//! predictions below are for the algorithms as this crate implements them, in bytes:
//!
//! | collective | this crate | paper 002, Table I |
//! |---|---|---|
//! | dense allreduce (ring), m bytes | 2(P−1)α + 2(P−1)/P·mβ | same |
//! | TopKAllReduce (Bruck allgather of k indices + k values) | ⌈log₂P⌉α + (P−1)·8kβ | log₂P·α + 2(P−1)kβ |
//! | gTopKAllReduce (binomial tree up, then down) | 2⌈log₂P⌉(α + 8kβ) | 2log₂P·α + 4k·log₂P·β |
//!
//! The paper counts k in elements of its β unit; ours counts the 8 bytes of an
//! (index, value) pair (each block's 4-byte entry count and its length, a LEB128 varint
//! of 1–3 bytes below 2 MiB, 4 at k ≥ 262,144 pairs, are left out). Bruck's
//! allgather has recursive doubling's cost for any P, not only powers of two.

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
    /// Fit of `t = α + nβ` to (bytes, one-way seconds) samples, each parameter where it
    /// shows: β is the least-squares slope over the larger half of the message sizes (the
    /// bandwidth regime), α the median, over the smallest third of the sizes (the latency
    /// regime), of a message's time less its transfer time. A single least-squares line
    /// over all sizes lets the largest messages decide α (often negative), and a
    /// relative-error fit trusts small messages that buffers and token-bucket bursts let
    /// through faster than the link's rate. The median rather than the smallest size
    /// alone: in the emulated network (8 workers on 2 cores) that one sample, the first
    /// timed, was the highest or near it of the five below 1 kB in each of three runs
    /// (14.5, 13.9, 16.1 µs against their raw medians of 14.4, 8.8, 13.7 µs), and the model's α
    /// counts 2⌈log₂P⌉ times in gTopKAllReduce's prediction.
    pub fn fit(samples: &[(usize, f64)]) -> AlphaBeta {
        let mut s: Vec<(f64, f64)> = samples
            .iter()
            .filter(|x| x.1 > 0.0 && x.1.is_finite())
            .map(|&(n, t)| (n as f64, t))
            .collect();
        if s.is_empty() {
            return AlphaBeta {
                alpha: 0.0,
                beta: 0.0,
            };
        }
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        let upper = &s[s.len() / 2..];
        let m = upper.len() as f64;
        let (mx, my) = (
            upper.iter().map(|p| p.0).sum::<f64>() / m,
            upper.iter().map(|p| p.1).sum::<f64>() / m,
        );
        let sxx: f64 = upper.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = upper.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let beta = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
        let mut alphas: Vec<f64> = s[..s.len().div_ceil(3)]
            .iter()
            .map(|&(n, t)| t - n * beta)
            .collect();
        alphas.sort_by(f64::total_cmp);
        let m = alphas.len();
        let median = if m % 2 == 1 {
            alphas[m / 2]
        } else {
            (alphas[m / 2 - 1] + alphas[m / 2]) / 2.0
        };
        AlphaBeta {
            alpha: median.max(0.0),
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
    /// Bruck's allgather of one `bytes`-long message from every rank: ⌈log₂P⌉ rounds,
    /// each rank receiving the other P−1 messages once.
    pub fn allgather(&self, p: usize, bytes: usize) -> f64 {
        log2_ceil(p) * self.alpha + (p.max(1) - 1) as f64 * bytes as f64 * self.beta
    }
    /// TopKAllReduce: the allgather of k (index, value) pairs of 8 bytes.
    pub fn topk_allreduce(&self, p: usize, k: usize) -> f64 {
        self.allgather(p, 8 * k)
    }
    /// A binomial-tree broadcast of `bytes` from one rank: ⌈log₂P⌉ rounds of one message.
    pub fn broadcast(&self, p: usize, bytes: usize) -> f64 {
        log2_ceil(p) * (self.alpha + bytes as f64 * self.beta)
    }
    /// gTopKAllReduce: ⌈log₂P⌉ rounds up the tree and as many down (the broadcast), each
    /// one message of k (index, value) pairs.
    pub fn gtopk_allreduce(&self, p: usize, k: usize) -> f64 {
        2.0 * self.broadcast(p, 8 * k)
    }
    /// Paper 002's Table I forms, for reference (k in elements of 4 bytes).
    pub fn paper_topk(&self, p: usize, k: usize) -> f64 {
        (p as f64).log2() * self.alpha + 2.0 * (p as f64 - 1.0) * 4.0 * k as f64 * self.beta
    }
    pub fn paper_gtopk(&self, p: usize, k: usize) -> f64 {
        2.0 * (p as f64).log2() * self.alpha + 4.0 * 4.0 * k as f64 * (p as f64).log2() * self.beta
    }
}

/// Ping-pong in pairs (0↔1, 2↔3, …), all pairs at once so that the measurement sees the
/// same load as a collective in which every rank is busy (on an oversubscribed machine
/// or a shared switch that load is part of α and β). For each size, the best over `reps`
/// round trips, halved, timed by the pair's even rank, which then tells its partner: both
/// ranks of a pair return the pair's samples. Each size's timed round trips follow one
/// untimed one, so that none pays for a first use (buffers, a woken thread). Every rank
/// must call it; a last, unpaired rank gets none.
pub fn ping_pong(
    comm: &mut Communicator,
    sizes: &[usize],
    reps: usize,
) -> Result<Vec<(usize, f64)>> {
    let (rank, world) = (comm.rank(), comm.world_size());
    let partner = rank ^ 1;
    let mut out = Vec::new();
    for &n in sizes {
        let buf = vec![0u8; n];
        let mut best = f64::INFINITY;
        for rep in 0..=reps.max(1) {
            if partner >= world {
                continue;
            }
            if rank % 2 == 0 {
                let t = Instant::now();
                comm.send(partner, &buf)?;
                comm.recv(partner)?;
                // Round trip 0 is the untimed one.
                if rep > 0 {
                    best = best.min(t.elapsed().as_secs_f64() / 2.0);
                }
            } else {
                let got = comm.recv(partner)?;
                comm.send(partner, &got)?;
            }
        }
        if partner < world {
            if rank % 2 == 0 {
                comm.send(partner, &best.to_le_bytes())?;
            } else {
                let got = comm.recv(partner)?;
                let bytes: [u8; 8] =
                    got.as_slice()
                        .try_into()
                        .map_err(|_| crate::CommError::Protocol {
                            peer: partner,
                            msg: format!("a ping-pong time of {} bytes, not 8", got.len()),
                        })?;
                best = f64::from_le_bytes(bytes);
            }
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
        let ab = AlphaBeta::fit(&[
            (0, 1e-4),
            (1000, 1.1e-4),
            (100_000, 1.1e-3),
            (1_000_000, 1.01e-2),
        ]);
        assert!(
            (ab.alpha - 1e-4).abs() < 1e-7 && (ab.beta - 1e-8).abs() < 1e-11,
            "{ab:?}"
        );
        // A first, cold sample of the smallest size does not set α: the median of the
        // smallest third does (here four sizes: the middle two, 11 and 12 us less their
        // transfer, averaged).
        let mut samples: Vec<(usize, f64)> = [(1, 30e-6), (4, 10e-6), (16, 11e-6), (64, 12e-6)]
            .into_iter()
            .collect();
        samples.extend((10..18).map(|i| (1usize << i, (1u64 << i) as f64 * 8e-9)));
        let ab = AlphaBeta::fit(&samples);
        assert!((ab.beta - 8e-9).abs() < 1e-12, "{ab:?}");
        let want = ((11e-6 - 16.0 * 8e-9) + (12e-6 - 64.0 * 8e-9)) / 2.0;
        assert!((ab.alpha - want).abs() < 1e-12, "{ab:?}");
        let m = AlphaBeta {
            alpha: 0.436e-3,
            beta: 9e-9,
        }; // the paper's 1 GbE fit
        assert!(
            (m.allreduce(4, 1 << 20) - (6.0 * 0.436e-3 + 1.5 * (1 << 20) as f64 * 9e-9)).abs()
                < 1e-12
        );
        // With Bruck's allgather the TopK prediction is Table I's, for powers of two.
        let k = 25_000;
        for p in [2, 4, 32] {
            assert!((m.topk_allreduce(p, k) - m.paper_topk(p, k)).abs() < 1e-12);
        }
        assert!((m.allgather(8, 1000) - (3.0 * 0.436e-3 + 7.0 * 1000.0 * 9e-9)).abs() < 1e-15);
        assert!((m.allgather(5, 1000) - (3.0 * 0.436e-3 + 4.0 * 1000.0 * 9e-9)).abs() < 1e-15);
        // Figure 9's finding (100 MB, density 0.001, so k = 25,000): TopKAllReduce
        // slightly faster with 4 workers, much slower with 32.
        assert!(m.topk_allreduce(4, k) < m.gtopk_allreduce(4, k));
        assert!(m.topk_allreduce(4, k) > 0.5 * m.gtopk_allreduce(4, k));
        assert!(m.topk_allreduce(32, k) > 2.5 * m.gtopk_allreduce(32, k));
    }
}
