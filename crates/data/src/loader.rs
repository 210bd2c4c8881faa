//! The training loader: every epoch, a permutation of the whole dataset drawn from
//! (seed, epoch) — identical on every rank — is split into per-worker shards; each worker
//! batches its own shard on a background thread that stays a few batches ahead, so the
//! training thread never waits on decoding or augmentation.
//!
//! All ranks run the same number of batches per epoch (`batches_per_epoch`, from the
//! smallest shard), because their collectives must stay in lockstep; the few samples
//! beyond that differ from epoch to epoch with the shuffle.

use crate::error::{DataError, Result};
use crate::shard::shard_indices;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use tensor::{Rng, Tensor};

/// A batch of inputs and their labels (U32). Sequence datasets (speech) concatenate the
/// labels and give each sample's input and label lengths; for the others these are empty.
pub struct Batch {
    pub inputs: Tensor,
    pub labels: Tensor,
    pub input_lengths: Vec<usize>,
    pub label_lengths: Vec<usize>,
}

impl Batch {
    /// A batch of fixed-size samples with one label each.
    pub fn new(inputs: Tensor, labels: Tensor) -> Self {
        Batch {
            inputs,
            labels,
            input_lengths: Vec::new(),
            label_lengths: Vec::new(),
        }
    }
}

pub trait Dataset: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The batch of these samples; `rng` drives augmentation.
    fn batch(&self, indices: &[usize], rng: &mut Rng) -> Result<Batch>;
}

pub struct Loader {
    dataset: Arc<dyn Dataset>,
    // Checked by `new` (a batch and a shard for every rank): private, so that no later
    // assignment divides by a world of 0 or slices past the shards.
    batch_size: usize,
    rank: usize,
    world: usize,
    seed: u64,
    pub shuffle: bool,
    /// Batches prepared ahead of the consumer.
    pub prefetch: usize,
    /// Also yield the shard's last, smaller batch. Off for training (every step the same
    /// size, every rank the same number of steps); on for evaluation, so that every test
    /// sample is counted.
    pub keep_last: bool,
}

impl Loader {
    pub fn new(
        dataset: Arc<dyn Dataset>,
        batch_size: usize,
        rank: usize,
        world: usize,
        seed: u64,
    ) -> Result<Self> {
        if batch_size == 0 || world == 0 || rank >= world {
            return Err(DataError::Msg(format!("loader: batch size {batch_size}, rank {rank} of world {world} is not a valid setup")));
        }
        if dataset.len() < world * batch_size {
            return Err(DataError::Msg(format!(
                "loader: {} samples cannot give {world} workers a batch of {batch_size} each",
                dataset.len()
            )));
        }
        Ok(Loader {
            dataset,
            batch_size,
            rank,
            world,
            seed,
            shuffle: true,
            prefetch: 4,
            keep_last: false,
        })
    }
    pub fn batches_per_epoch(&self) -> usize {
        (self.dataset.len() / self.world) / self.batch_size
    }
    /// This worker's sample order for `epoch`.
    pub fn shard(&self, epoch: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.dataset.len()).collect();
        if self.shuffle {
            Rng::new(self.seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .shuffle(&mut order);
        }
        shard_indices(&order, self.world, self.rank)
    }
    /// The batches of `epoch`, produced on a background thread.
    pub fn epoch(&self, epoch: usize) -> Epoch {
        let shard = self.shard(epoch);
        let bs = self.batch_size;
        let count = if self.keep_last {
            shard.len().div_ceil(bs)
        } else {
            self.batches_per_epoch()
        };
        let dataset = self.dataset.clone();
        // Salted: unsalted, rank 0's stream in epoch 0 was the shuffle's (both
        // `Rng::new(seed)`), so the first crops and flips replayed the shuffle's draws.
        // The epoch is mixed in by an odd multiplier, not added: `(seed ^ SALT) + epoch`
        // gave seed s at epoch e + 1 the stream of seed s + 1 at epoch e (the salt's low
        // bits are zero), so runs of seeds 0, 1, 2 shared their crops an epoch apart.
        const AUGMENT_SALT: u64 = 0xA5A5_5A5A_C3C3_3C3C;
        let mut rng = Rng::for_rank(
            self.seed ^ AUGMENT_SALT ^ (epoch as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93),
            self.rank,
        );
        let (tx, rx) = sync_channel(self.prefetch.max(1));
        let handle = std::thread::spawn(move || {
            for b in 0..count {
                let batch =
                    dataset.batch(&shard[b * bs..((b + 1) * bs).min(shard.len())], &mut rng);
                let failed = batch.is_err();
                if tx.send(batch).is_err() || failed {
                    return; // consumer gone, or an error was handed over
                }
            }
        });
        Epoch {
            rx,
            handle: Some(handle),
        }
    }
}

/// Iterator over one epoch's batches.
pub struct Epoch {
    rx: Receiver<Result<Batch>>,
    handle: Option<JoinHandle<()>>,
}

impl Iterator for Epoch {
    type Item = Result<Batch>;
    fn next(&mut self) -> Option<Result<Batch>> {
        match self.rx.recv() {
            Ok(b) => Some(b),
            Err(_) => {
                // The producer finished (or died); surface a panic as an error.
                if let Some(h) = self.handle.take() {
                    if h.join().is_err() {
                        return Some(Err(DataError::Msg(
                            "loader: the prefetch thread panicked".into(),
                        )));
                    }
                }
                None
            }
        }
    }
}
