//! Datasets in their real formats (MNIST/Fashion-MNIST IDX, CIFAR-10 binary batches,
//! ImageNet-style folders of JPEG/PNG files, Penn-Treebank-layout text, WAV speech with
//! transcripts), the corpora we can build on a machine with only package
//! registries (`prepare`), CIFAR-style augmentation, synthetic data of any shape, and a
//! loader that gives each worker a disjoint, deterministic shard and prefetches batches on
//! a background thread.
//!
//! Every reader checks what it reads (magic numbers, sizes, label ranges, counts that must
//! agree) and returns a [`DataError`] naming the file and the problem; nothing here panics
//! on bad input or silently returns part of a file.

mod augment;
mod cifar;
mod error;
mod folder;
mod idx;
mod image;
mod loader;
pub mod prepare;
mod shard;
pub mod speech;
mod synthetic;
mod text;

pub use augment::Augment;
pub use cifar::read_cifar10;
pub use error::{DataError, Result};
pub use folder::{class_folders, ImageFolder};
pub use idx::{mnist_file, read_idx, read_idx_limited, read_mnist, IdxArray, MAX_IDX_BYTES};
pub use image::ImageDataset;
pub use loader::{Batch, Dataset, Loader};
pub use shard::{shard_indices, shard_range};
pub use synthetic::{SyntheticImages, SyntheticSpeech, SyntheticTokens};
pub use text::{CorpusStats, TextCorpus, TokenBatches, Vocab, EOS, UNK};
