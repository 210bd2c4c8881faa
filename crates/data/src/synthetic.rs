//! Synthetic datasets of any model's input shape, for throughput runs and tests. Images
//! are learnable (a class-dependent pattern plus noise), so a short run shows the loss
//! falling; tokens follow a fixed random bigram table, so a language model can learn them.

use crate::error::Result;
use crate::loader::{Batch, Dataset};
use tensor::{Device, Rng, Tensor};

pub struct SyntheticImages {
    pub n: usize,
    pub shape: [usize; 3],
    pub classes: usize,
    pub seed: u64,
}

impl Dataset for SyntheticImages {
    fn len(&self) -> usize {
        self.n
    }
    fn batch(&self, indices: &[usize], _rng: &mut Rng) -> Result<Batch> {
        let [c, h, w] = self.shape;
        let per = c * h * w;
        let mut data = Vec::with_capacity(indices.len() * per);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            // Each sample is a pure function of (seed, index): the same on every rank.
            let mut r = Rng::new(self.seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
            let class = i % self.classes;
            labels.push(class as u32);
            for j in 0..per {
                // A stripe pattern whose phase encodes the class.
                let signal = if (j / w.max(1) + class).is_multiple_of(self.classes.max(1)) {
                    1.0
                } else {
                    0.0
                };
                data.push((signal + 0.5 * r.normal()) as f32);
            }
        }
        let n = indices.len();
        Ok(Batch::new(
            Tensor::from_vec(data, vec![n, c, h, w], Device::Cpu)?,
            Tensor::from_vec(labels, n, Device::Cpu)?,
        ))
    }
}

/// A token stream of length `n` over `vocab` words from a random bigram table.
pub struct SyntheticTokens {
    pub n: usize,
    pub vocab: usize,
    pub seed: u64,
}

impl SyntheticTokens {
    pub fn stream(&self) -> Vec<u32> {
        let mut r = Rng::new(self.seed);
        // Each word has 3 likely successors.
        let next: Vec<[u32; 3]> = (0..self.vocab)
            .map(|_| [0; 3].map(|_| r.below(self.vocab) as u32))
            .collect();
        let mut out = Vec::with_capacity(self.n);
        let mut cur = 0u32;
        for _ in 0..self.n {
            out.push(cur);
            cur = if r.below(10) == 0 {
                r.below(self.vocab) as u32
            } else {
                next[cur as usize][r.below(3)]
            };
        }
        out
    }
}

/// Spectrogram-shaped utterances (`[1, bins, frames]`, frames varying per utterance) with
/// random label sequences in 1..classes, batched like `speech::SpeechDataset`.
pub struct SyntheticSpeech {
    pub n: usize,
    pub bins: usize,
    pub max_frames: usize,
    pub classes: usize,
    pub seed: u64,
}

impl Dataset for SyntheticSpeech {
    fn len(&self) -> usize {
        self.n
    }
    fn batch(&self, indices: &[usize], _rng: &mut Rng) -> Result<Batch> {
        let per: Vec<(usize, Vec<u32>, Rng)> = indices
            .iter()
            .map(|&i| {
                let mut r = Rng::new(self.seed ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
                let frames = self.max_frames / 2 + r.below(self.max_frames / 2 + 1);
                let labels = (0..1 + frames / 8)
                    .map(|_| 1 + r.below(self.classes - 1) as u32)
                    .collect();
                (frames.max(1), labels, r)
            })
            .collect();
        let t = per.iter().map(|p| p.0).max().unwrap_or(1);
        let mut x = vec![0f32; indices.len() * self.bins * t];
        let (mut labels, mut input_lengths, mut label_lengths) =
            (Vec::new(), Vec::new(), Vec::new());
        for (n, (frames, l, mut r)) in per.into_iter().enumerate() {
            for b in 0..self.bins {
                for f in 0..frames {
                    x[(n * self.bins + b) * t + f] = r.normal() as f32;
                }
            }
            input_lengths.push(frames);
            label_lengths.push(l.len());
            labels.extend(l);
        }
        let total = labels.len();
        Ok(Batch {
            inputs: Tensor::from_vec(x, vec![indices.len(), 1, self.bins, t], Device::Cpu)?,
            labels: Tensor::from_vec(labels, total, Device::Cpu)?,
            input_lengths,
            label_lengths,
        })
    }
}
