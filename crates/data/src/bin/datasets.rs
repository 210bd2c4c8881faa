//! `datasets`: builds the local corpora and reports their sizes.
//!
//!     cargo run --release -p data --bin datasets -- prepare fashion-mnist --out data/fashion-mnist
//!     cargo run --release -p data --bin datasets -- prepare kjv --out data/kjv
//!     cargo run --release -p data --bin datasets -- stats kjv --dir data/kjv
//!
//! `stats` prints one JSON object: {"dataset", "train", "valid", "test", "vocab", "words"}:
//! images, or tokens including `<eos>` and punctuation, per split; `words` counts only
//! tokens with a letter or digit (and `<unk>`); null where a field does not apply.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use data::prepare::{prepare_fashion_mnist, prepare_kjv, FASHION_MNIST_SYSTEM_DIR};
use data::{read_cifar10, read_mnist, Dataset, TextCorpus};
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(about = "Prepare the corpora this project can build locally, and report dataset sizes")]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build a corpus: `fashion-mnist` (needs `apt-get install dataset-fashion-mnist`) or
    /// `kjv` (needs `apt-get install bible-kjv`). The spoken corpus (`speech`) is not
    /// implemented yet and says so.
    Prepare {
        name: String,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Read the raw material from here instead (fashion-mnist: a directory of the four
        /// IDX files; kjv: a text dump of `bible -f gen1:1-rev22:21`).
        #[arg(long)]
        source: Option<PathBuf>,
    },
    /// Count a prepared dataset: `fashion-mnist`, `mnist`, `cifar10`, `kjv` or `ptb` (words),
    /// `kjv-char` or `ptb-char` (characters).
    Stats {
        name: String,
        #[arg(long)]
        dir: PathBuf,
    },
}

fn mnist_stats(name: &str, dir: &Path) -> Result<serde_json::Value> {
    let train = read_mnist(
        &dir.join("train-images-idx3-ubyte.gz"),
        &dir.join("train-labels-idx1-ubyte.gz"),
        10,
    )
    .or_else(|_| {
        read_mnist(
            &dir.join("train-images-idx3-ubyte"),
            &dir.join("train-labels-idx1-ubyte"),
            10,
        )
    })
    .context("reading the training set")?;
    let test = read_mnist(
        &dir.join("t10k-images-idx3-ubyte.gz"),
        &dir.join("t10k-labels-idx1-ubyte.gz"),
        10,
    )
    .or_else(|_| {
        read_mnist(
            &dir.join("t10k-images-idx3-ubyte"),
            &dir.join("t10k-labels-idx1-ubyte"),
            10,
        )
    })
    .context("reading the test set")?;
    Ok(
        json!({"dataset": name, "train": train.len(), "valid": null, "test": test.len(), "vocab": null, "words": null}),
    )
}

fn main() -> Result<()> {
    match Args::parse().command {
        Cmd::Prepare { name, out, source } => match name.as_str() {
            "fashion-mnist" => {
                let src = source.unwrap_or_else(|| PathBuf::from(FASHION_MNIST_SYSTEM_DIR));
                let (train, test) = prepare_fashion_mnist(&src, &out)?;
                println!("fashion-mnist: {train} training and {test} test images in {}", out.display());
            }
            "kjv" => {
                let s = prepare_kjv(source.as_deref(), &out)?;
                println!("kjv: {} verses, {} tokens, vocabulary {} in {}", s.verses, s.words, s.vocab, out.display());
            }
            "speech" => bail!("prepare speech: the espeak-ng spoken corpus is not implemented yet (issue 4 is open)"),
            other => bail!("unknown corpus {other:?}: choose fashion-mnist or kjv"),
        },
        Cmd::Stats { name, dir } => {
            let v = match name.as_str() {
                "fashion-mnist" | "mnist" => mnist_stats(&name, &dir)?,
                "cifar10" => {
                    let train_files: Vec<PathBuf> = (1..=5).map(|i| dir.join(format!("data_batch_{i}.bin"))).collect();
                    let refs: Vec<&Path> = train_files.iter().map(|p| p.as_path()).collect();
                    let train = read_cifar10(&refs)?;
                    let test = read_cifar10(&[&dir.join("test_batch.bin")])?;
                    json!({"dataset": name, "train": train.len(), "valid": null, "test": test.len(), "vocab": null, "words": null})
                }
                "kjv" | "ptb" | "kjv-char" | "ptb-char" => {
                    let prefix = if name.ends_with("-char") { "ptb.char" } else { "ptb" };
                    let c = TextCorpus::load(&dir, prefix)?;
                    let s = c.stats();
                    // Words: tokens holding a letter or digit (and <unk>); not <eos>, not the
                    // split-off punctuation, not the `_` word separator of the character files.
                    let is_word: Vec<bool> = c.vocab.words.iter().map(|w| w == data::UNK || (w != data::EOS && w.chars().any(|ch| ch.is_alphanumeric()))).collect();
                    let count = |ids: &[u32]| ids.iter().filter(|&&i| is_word[i as usize]).count();
                    let words = count(&c.train) + count(&c.valid) + count(&c.test);
                    json!({"dataset": name, "train": s.train, "valid": s.valid, "test": s.test, "vocab": s.vocab, "words": words})
                }
                other => bail!("unknown dataset {other:?}: choose fashion-mnist, mnist, cifar10, kjv, ptb, kjv-char or ptb-char"),
            };
            println!("{v}");
        }
    }
    Ok(())
}
