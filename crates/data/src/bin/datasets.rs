//! `datasets`: builds the local corpora and reports their sizes.
//!
//!     cargo run --release -p data --bin datasets -- prepare fashion-mnist --out data/fashion-mnist
//!     cargo run --release -p data --bin datasets -- prepare kjv --out data/kjv
//!     cargo run --release -p data --bin datasets -- stats kjv --dir data/kjv
//!
//! `stats` prints one JSON object: {"dataset", "train", "valid", "test", "vocab", "words"}:
//! images, or tokens including `<eos>` and punctuation, per split; `words` counts only
//! tokens with a letter or digit (and `<unk>`); null where a field does not apply.

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use data::prepare::{
    prepare_fashion_mnist, prepare_kjv, prepare_speech, SpeechOptions, FASHION_MNIST_SYSTEM_DIR,
};
use data::speech::SpeechDataset;
use data::{read_cifar10, read_mnist, DataError, Dataset, TextCorpus};
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
    /// Build a corpus: `fashion-mnist` (needs `apt-get install dataset-fashion-mnist`),
    /// `kjv` (needs `apt-get install bible-kjv`) or `speech` (needs `apt-get install
    /// espeak-ng`; --utterances, --test-utterances, --seed, --snr).
    Prepare {
        name: String,
        /// speech: training utterances (AN4 has 948).
        #[arg(long, default_value_t = 948)]
        utterances: usize,
        /// speech: test utterances, spoken by voices not used in training (AN4 has 130).
        #[arg(long, default_value_t = 130)]
        test_utterances: usize,
        /// speech: seed of the corpus.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// speech: signal-to-noise ratio of the added white noise in dB (negative: none).
        #[arg(long, default_value_t = 20.0, allow_hyphen_values = true)]
        snr: f64,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Read the raw material from here instead (fashion-mnist: a directory of the four
        /// IDX files; kjv: a text dump of `bible -f gen1:1-rev22:21`).
        #[arg(long)]
        source: Option<PathBuf>,
    },
    /// Count a prepared dataset: `fashion-mnist`, `mnist`, `cifar10`, `kjv` or `ptb` (words),
    /// `kjv-char` or `ptb-char` (characters), `speech` (utterances).
    Stats {
        name: String,
        #[arg(long)]
        dir: PathBuf,
    },
}

/// How to get each corpus `stats` reads, for the message when it is missing (a damaged
/// one is reported as damaged instead: see [`DataError::in_corpus`]).
fn hint(name: &str) -> String {
    let prepare = |package: &str| {
        format!(
            "build it with `datasets prepare {name} --out DIR` (needs `apt-get install {package}`), \
             then pass --dir DIR"
        )
    };
    match name {
        "fashion-mnist" => prepare("dataset-fashion-mnist"),
        "kjv" | "kjv-char" => "build it with `datasets prepare kjv --out DIR` (needs \
                               `apt-get install bible-kjv`), then pass --dir DIR"
            .into(),
        "speech" => prepare("espeak-ng"),
        "mnist" => "--dir DIR with the four IDX files (train-images-idx3-ubyte[.gz] and the others)".into(),
        "cifar10" => "--dir DIR with CIFAR-10's binary batches (data_batch_1.bin … data_batch_5.bin, test_batch.bin)".into(),
        _ => "--dir DIR with ptb.train.txt, ptb.valid.txt and ptb.test.txt (ptb.char.* for characters)".into(),
    }
}

fn mnist_stats(name: &str, dir: &Path) -> Result<serde_json::Value> {
    let file = |n: &str| data::mnist_file(dir, n);
    let train = read_mnist(
        &file("train-images-idx3-ubyte"),
        &file("train-labels-idx1-ubyte"),
        10,
    );
    let test = train.and_then(|train| {
        read_mnist(
            &file("t10k-images-idx3-ubyte"),
            &file("t10k-labels-idx1-ubyte"),
            10,
        )
        .map(|test| (train, test))
    });
    let (train, test) = test.map_err(|e| e.in_corpus(corpus_name(name), dir, &hint(name)))?;
    Ok(
        json!({"dataset": name, "train": train.len(), "valid": null, "test": test.len(), "vocab": null, "words": null}),
    )
}

/// The corpus `stats` was asked for, as its messages name it.
fn corpus_name(name: &str) -> &'static str {
    match name {
        "fashion-mnist" => "Fashion-MNIST",
        "mnist" => "MNIST",
        "cifar10" => "CIFAR-10",
        "kjv" | "kjv-char" => "the King James Bible corpus",
        "ptb" | "ptb-char" => "the PTB-layout corpus",
        _ => "the speech corpus",
    }
}

fn main() {
    // One line with its causes, not main's Debug form (which adds a backtrace wherever
    // RUST_BACKTRACE=1 is set).
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    match Args::parse().command {
        Cmd::Prepare {
            name,
            out,
            source,
            utterances,
            test_utterances,
            seed,
            snr,
        } => match name.as_str() {
            "fashion-mnist" => {
                let src = source.unwrap_or_else(|| PathBuf::from(FASHION_MNIST_SYSTEM_DIR));
                let (train, test) = prepare_fashion_mnist(&src, &out)?;
                println!(
                    "fashion-mnist: {train} training and {test} test images in {}",
                    out.display()
                );
            }
            "kjv" => {
                let s = prepare_kjv(source.as_deref(), &out)?;
                println!(
                    "kjv: {} verses, {} tokens, vocabulary {} in {}",
                    s.verses,
                    s.words,
                    s.vocab,
                    out.display()
                );
            }
            "speech" => {
                let opts = SpeechOptions {
                    train: utterances,
                    test: test_utterances,
                    seed,
                    snr_db: (snr >= 0.0).then_some(snr),
                };
                let (train, test) = prepare_speech(&out, &opts)?;
                println!(
                    "speech: {train} training and {test} test utterances in {}",
                    out.display()
                );
            }
            other => bail!("unknown corpus {other:?}: choose fashion-mnist, kjv or speech"),
        },
        Cmd::Stats { name, dir } => {
            // Missing: where to get it; present but damaged: which file, and why.
            let in_corpus = |e: DataError| e.in_corpus(corpus_name(&name), &dir, &hint(&name));
            let v = match name.as_str() {
                "fashion-mnist" | "mnist" => mnist_stats(&name, &dir)?,
                "cifar10" => {
                    let train_files: Vec<PathBuf> = (1..=5).map(|i| dir.join(format!("data_batch_{i}.bin"))).collect();
                    let refs: Vec<&Path> = train_files.iter().map(|p| p.as_path()).collect();
                    let train = read_cifar10(&refs).map_err(in_corpus)?;
                    let test = read_cifar10(&[&dir.join("test_batch.bin")]).map_err(in_corpus)?;
                    json!({"dataset": name, "train": train.len(), "valid": null, "test": test.len(), "vocab": null, "words": null})
                }
                "kjv" | "ptb" | "kjv-char" | "ptb-char" => {
                    let prefix = if name.ends_with("-char") { "ptb.char" } else { "ptb" };
                    let c = TextCorpus::load(&dir, prefix).map_err(in_corpus)?;
                    let s = c.stats();
                    // Words: tokens holding a letter or digit (and <unk>); not <eos>, not the
                    // split-off punctuation, not the `_` word separator of the character files.
                    let is_word: Vec<bool> = c.vocab.words.iter().map(|w| w == data::UNK || (w != data::EOS && w.chars().any(|ch| ch.is_alphanumeric()))).collect();
                    let count = |ids: &[u32]| ids.iter().filter(|&&i| is_word[i as usize]).count();
                    let words = count(&c.train) + count(&c.valid) + count(&c.test);
                    json!({"dataset": name, "train": s.train, "valid": s.valid, "test": s.test, "vocab": s.vocab, "words": words})
                }
                "speech" => {
                    let train = SpeechDataset::load(&dir.join("train_manifest.csv")).map_err(in_corpus)?;
                    let test = SpeechDataset::load(&dir.join("test_manifest.csv")).map_err(in_corpus)?;
                    json!({"dataset": name, "train": train.len(), "valid": null, "test": test.len(), "vocab": data::speech::ALPHABET.len(), "words": null})
                }
                other => bail!("unknown dataset {other:?}: choose fashion-mnist, mnist, cifar10, kjv, ptb, kjv-char, ptb-char or speech"),
            };
            println!("{v}");
        }
    }
    Ok(())
}
