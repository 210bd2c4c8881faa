//! Language-model text in the Penn Treebank layout: `ptb.train.txt`, `ptb.valid.txt`,
//! `ptb.test.txt` with one sentence per line and words separated by spaces; `<eos>` ends
//! every line and words outside the vocabulary read as `<unk>`. The vocabulary comes from
//! the training file, as Mikolov's setup and PyTorch's word language model do.
//! Character-level text (`ptb.char.*.txt`) uses the same reader: one token per
//! space-separated symbol, `_` for word boundaries.

use crate::error::{DataError, Result};
use crate::shard::shard_range;
use std::collections::HashMap;
use std::path::Path;
use tensor::{Device, Tensor};

pub const EOS: &str = "<eos>";
pub const UNK: &str = "<unk>";

#[derive(Clone, Debug, Default)]
pub struct Vocab {
    pub words: Vec<String>,
    index: HashMap<String, u32>,
}

impl Vocab {
    pub fn id(&self, w: &str) -> Option<u32> {
        self.index.get(w).copied()
    }
    pub fn len(&self) -> usize {
        self.words.len()
    }
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
    fn add(&mut self, w: &str) -> u32 {
        if let Some(&i) = self.index.get(w) {
            return i;
        }
        let i = self.words.len() as u32;
        self.words.push(w.to_string());
        self.index.insert(w.to_string(), i);
        i
    }
}

/// Token ids of the three splits and the vocabulary.
pub struct TextCorpus {
    pub vocab: Vocab,
    pub train: Vec<u32>,
    pub valid: Vec<u32>,
    pub test: Vec<u32>,
}

/// Counts for `datasets stats`.
pub struct CorpusStats {
    pub train: usize,
    pub valid: usize,
    pub test: usize,
    pub vocab: usize,
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| DataError::io(path, e))
}

impl TextCorpus {
    /// Reads `{prefix}.train.txt`, `{prefix}.valid.txt` and `{prefix}.test.txt` from `dir`
    /// (prefix `ptb` for words, `ptb.char` for characters).
    pub fn load(dir: &Path, prefix: &str) -> Result<Self> {
        let path = |split: &str| dir.join(format!("{prefix}.{split}.txt"));
        let train_text = read_text(&path("train"))?;
        let mut vocab = Vocab::default();
        vocab.add(UNK);
        vocab.add(EOS);
        for line in train_text.lines() {
            for w in line.split_whitespace() {
                vocab.add(w);
            }
        }
        let encode = |text: &str| -> Vec<u32> {
            let mut ids = Vec::new();
            for line in text.lines() {
                ids.extend(line.split_whitespace().map(|w| vocab.id(w).unwrap_or(0)));
                ids.push(1); // <eos>
            }
            ids
        };
        let train = encode(&train_text);
        let valid = encode(&read_text(&path("valid"))?);
        let test = encode(&read_text(&path("test"))?);
        if train.is_empty() {
            return Err(DataError::format(&path("train"), "empty training text"));
        }
        Ok(TextCorpus {
            vocab,
            train,
            valid,
            test,
        })
    }
    pub fn stats(&self) -> CorpusStats {
        CorpusStats {
            train: self.train.len(),
            valid: self.valid.len(),
            test: self.test.len(),
            vocab: self.vocab.len(),
        }
    }
}

/// A token stream cut into `batch` parallel streams for truncated BPTT (the layout of
/// PyTorch's word language model): column b is a contiguous run of the text.
pub struct TokenBatches {
    /// `[steps, batch]`, time-major.
    data: Vec<u32>,
    pub steps: usize,
    pub batch: usize,
}

impl TokenBatches {
    /// This worker's contiguous share of `stream`, batchified. Worker shards are disjoint
    /// runs of the stream (their union is the stream up to the remainder of the division).
    pub fn new(stream: &[u32], batch: usize, world: usize, rank: usize) -> Result<Self> {
        if rank >= world.max(1) {
            return Err(DataError::Msg(format!(
                "rank {rank} is not a worker of a job of {world}"
            )));
        }
        let shard = &stream[shard_range(stream.len(), world, rank)];
        let steps = shard.len() / batch.max(1);
        if batch == 0 || steps < 2 {
            return Err(DataError::Msg(format!(
                "{} tokens are too few for {batch} streams",
                shard.len()
            )));
        }
        let mut data = vec![0u32; steps * batch];
        for b in 0..batch {
            for t in 0..steps {
                data[t * batch + b] = shard[b * steps + t];
            }
        }
        Ok(TokenBatches { data, steps, batch })
    }
    /// Number of BPTT windows of length `bptt`.
    pub fn windows(&self, bptt: usize) -> usize {
        (self.steps - 1).div_ceil(bptt.max(1))
    }
    /// Window `i`: inputs `[len, batch]` and targets `[len · batch]` (the next tokens).
    pub fn window(&self, i: usize, bptt: usize) -> Result<(Tensor, Tensor)> {
        let start = i * bptt;
        if start + 1 >= self.steps {
            return Err(DataError::Msg(format!(
                "window {i} of length {bptt} is past the end ({} steps)",
                self.steps
            )));
        }
        let len = bptt.min(self.steps - 1 - start);
        let b = self.batch;
        let input = self.data[start * b..(start + len) * b].to_vec();
        let target = self.data[(start + 1) * b..(start + 1 + len) * b].to_vec();
        Ok((
            Tensor::from_vec(input, vec![len, b], Device::Cpu)?,
            Tensor::from_vec(target, len * b, Device::Cpu)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    /// A rank outside the job is an error, not a slice out of range.
    #[test]
    fn a_rank_outside_the_job_is_an_error() {
        assert!(super::TokenBatches::new(&[0; 100], 2, 2, 5).is_err());
        assert!(super::TokenBatches::new(&[0; 100], 2, 2, 1).is_ok());
    }
}
