//! Language-model text in the Penn Treebank layout: `ptb.train.txt`, `ptb.valid.txt`,
//! `ptb.test.txt` with one sentence per line and words separated by spaces; `<eos>` ends
//! every line and words outside the vocabulary read as `<unk>`. The vocabulary comes from
//! the training file, as Mikolov's setup and PyTorch's word language model do.
//! Character-level text (`ptb.char.*.txt`) uses the same reader: one token per
//! space-separated symbol, `_` for word boundaries.

use crate::error::{read_text, DataError, Result};
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
        if batch == 0 {
            return Err(DataError::Msg(
                "0 streams: the batch must be at least 1".into(),
            ));
        }
        Self::columns(
            &stream[shard_range(stream.len(), world, rank)],
            batch,
            0..batch,
        )
    }
    /// Columns `cols` of the whole `stream` cut into `streams` contiguous streams of
    /// equal length (the remainder of the division is not used), batchified. Unlike
    /// [`TokenBatches::new`], the cut does not depend on how many workers share it: the
    /// columns of every worker together are the one-worker layout, so an evaluation split
    /// this way scores the same tokens in the same streams for any number of workers.
    pub fn columns(stream: &[u32], streams: usize, cols: std::ops::Range<usize>) -> Result<Self> {
        if cols.is_empty() || cols.end > streams {
            return Err(DataError::Msg(format!(
                "streams {}..{} are not a non-empty range of the {streams}",
                cols.start, cols.end
            )));
        }
        let steps = stream.len() / streams;
        if steps < 2 {
            return Err(DataError::Msg(format!(
                "{} tokens are too few for {streams} streams",
                stream.len()
            )));
        }
        let batch = cols.len();
        let mut data = vec![0u32; steps * batch];
        for (b, col) in cols.enumerate() {
            for t in 0..steps {
                data[t * batch + b] = stream[col * steps + t];
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

    /// Any split of the columns holds the one-worker layout's streams, each whole.
    #[test]
    fn columns_are_the_same_streams_for_any_split() {
        use super::TokenBatches;
        let stream: Vec<u32> = (0..103).collect();
        let whole = TokenBatches::columns(&stream, 10, 0..10).unwrap();
        assert_eq!((whole.steps, whole.batch), (10, 10));
        // Column b is tokens 10b..10b+10; the 3 left over are not used.
        let (x, y) = whole.window(0, 9).unwrap();
        let x = x.to_vec::<u32>().unwrap();
        assert_eq!(&x[..10], &[0, 10, 20, 30, 40, 50, 60, 70, 80, 90]);
        assert_eq!(y.to_vec::<u32>().unwrap()[..2], [1, 11]);
        let column = |t: &TokenBatches, b: usize| -> Vec<u32> {
            let x = t.window(0, t.steps - 1).unwrap().0.to_vec::<u32>().unwrap();
            let y = t.window(0, t.steps - 1).unwrap().1.to_vec::<u32>().unwrap();
            let mut c: Vec<u32> = x.iter().skip(b).step_by(t.batch).copied().collect();
            c.push(y[y.len() - t.batch + b]);
            c
        };
        let streams: Vec<Vec<u32>> = (0..10).map(|b| column(&whole, b)).collect();
        for world in [1, 3, 4, 10] {
            let mut got = Vec::new();
            for rank in 0..world {
                let part = TokenBatches::columns(&stream, 10, crate::shard_range(10, world, rank))
                    .unwrap();
                got.extend((0..part.batch).map(|b| column(&part, b)));
            }
            assert_eq!(got, streams, "{world} workers");
        }
        assert!(TokenBatches::columns(&stream, 10, 3..3).is_err());
        assert!(TokenBatches::columns(&stream, 10, 8..11).is_err());
        assert!(TokenBatches::columns(&stream[..19], 10, 0..10).is_err());
    }
}
