//! Speech recognition data and the CTC view of a model's output: the synthesized corpus
//! or an AN4-style manifest, and the log-probabilities, labels and frame counts CTC and
//! greedy decoding need.

use super::images::limit;
use super::Split;
use crate::config::Config;
use anyhow::{bail, Context, Result};
use data::{Batch, Dataset};
use nn::models::DeepSpeech;
use nn::Ctx;
use std::path::PathBuf;
use std::sync::Arc;
use tensor::Tensor;

/// Where `datasets prepare speech --out DIR` writes when docs/data.md is followed.
const SPEECH_DEFAULT_DIR: &str = "data/speech";
/// Output classes of the speech models: blank, apostrophe, A–Z, space.
pub(super) const SPEECH_CLASSES: usize = 29;

pub(super) fn speech_data(c: &Config) -> Result<(Split, Split)> {
    if c.dataset == "synthetic" {
        let make = |n: usize, seed: u64| -> Arc<dyn Dataset> {
            Arc::new(data::SyntheticSpeech {
                n,
                bins: nn::models::SPECTROGRAM_BINS,
                max_frames: 120,
                classes: SPEECH_CLASSES,
                seed,
            })
        };
        return Ok((
            Split::Samples(make(c.synthetic_samples, c.seed)),
            Split::Samples(make(c.eval_samples.unwrap_or(64), c.seed ^ 0x5EED)),
        ));
    }
    let dir = match (&c.data_dir, c.dataset.as_str()) {
        (Some(d), _) => d.clone(),
        (None, "speech") => PathBuf::from(SPEECH_DEFAULT_DIR),
        (None, d) => bail!("--dataset {d} needs --data-dir (the directory of train_manifest.csv and test_manifest.csv)"),
    };
    let load = |split: &str| {
        let manifest = dir.join(format!("{split}_manifest.csv"));
        data::speech::SpeechDataset::load(&manifest).with_context(|| {
            format!(
                "reading {} (for the synthesized corpus: apt-get install espeak-ng, then cargo run --release -p data --bin datasets -- prepare speech --out {})",
                manifest.display(),
                dir.display()
            )
        })
    };
    let train = load("train")?;
    let test = load("test")?;
    Ok((
        Split::Samples(Arc::new(train)),
        Split::Samples(limit(test, c.eval_samples)),
    ))
}

/// Log-probabilities `[T', N, classes]`, each sample's labels and its output frame count.
pub(super) fn speech_outputs(
    m: &DeepSpeech,
    batch: &Batch,
    inputs: &Tensor,
    ctx: &mut Ctx,
) -> Result<(Tensor, Vec<Vec<u32>>, Vec<usize>)> {
    // Each utterance as long as it is, not as the batch's longest (see forward_lengths).
    let logits = m.forward_lengths(inputs, &batch.input_lengths, ctx)?;
    let log_probs = logits.log_softmax(2)?;
    let frames = log_probs.dims()[0];
    let labels = batch.labels.to_vec::<u32>()?;
    let mut targets = Vec::with_capacity(batch.label_lengths.len());
    let mut at = 0;
    for &len in &batch.label_lengths {
        let l = labels
            .get(at..at + len)
            .context("the batch's label lengths exceed its labels")?;
        targets.push(l.to_vec());
        at += len;
    }
    // The first convolution has stride 2 in time: T' = ⌈T / 2⌉.
    let lengths = batch
        .input_lengths
        .iter()
        .map(|&t| t.div_ceil(2).min(frames))
        .collect();
    Ok((log_probs, targets, lengths))
}
