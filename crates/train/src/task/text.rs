//! Language-model token streams: the prepared King James Bible or PTB-format files, or a
//! synthetic bigram stream.

use crate::config::Config;
use anyhow::{bail, Context, Result};
use nn::models::ModelInfo;
use std::path::PathBuf;

/// Where `datasets prepare kjv --out DIR` writes when docs/data.md is followed.
const KJV_DEFAULT_DIR: &str = "data/kjv";
/// Vocabulary of the synthetic token stream.
const SYNTHETIC_VOCAB: usize = 100;

/// Token streams (train, test) and the vocabulary size.
/// A character model (its registry entry's input) reads the corpus's character files.
pub(super) fn text_data(c: &Config, model: &ModelInfo) -> Result<(Vec<u32>, Vec<u32>, usize)> {
    if c.dataset == "synthetic" {
        let stream = |n: usize, seed: u64| {
            data::SyntheticTokens {
                n,
                vocab: SYNTHETIC_VOCAB,
                seed,
            }
            .stream()
        };
        // One bigram table (the seed), two stretches of its text.
        let all = stream(c.synthetic_samples + c.eval_samples.unwrap_or(4096), c.seed);
        let (train, test) = all.split_at(c.synthetic_samples);
        return Ok((train.to_vec(), test.to_vec(), SYNTHETIC_VOCAB));
    }
    let dir = match (&c.data_dir, c.dataset.as_str()) {
        (Some(d), _) => d.clone(),
        (None, "kjv") => PathBuf::from(KJV_DEFAULT_DIR),
        (None, d) => bail!("--dataset {d} needs --data-dir (the directory of ptb.train.txt, ptb.valid.txt, ptb.test.txt)"),
    };
    let prefix = if model.reads_characters() {
        "ptb.char"
    } else {
        "ptb"
    };
    let corpus = data::TextCorpus::load(&dir, prefix).with_context(|| {
        format!(
            "reading {prefix}.{{train,valid,test}}.txt in {} (for the King James Bible: apt-get install bible-kjv, then cargo run --release -p data --bin datasets -- prepare kjv --out {})",
            dir.display(),
            dir.display()
        )
    })?;
    let mut test = corpus.test;
    if let Some(n) = c.eval_samples {
        test.truncate(n);
    }
    // Checked here, before training, rather than at the first evaluation, which comes
    // after an epoch's work that would then be lost.
    let least = crate::task::EVAL_MIN_TOKENS;
    if test.len() < least {
        bail!(
            "{prefix}.test.txt in {} has {} tokens, too few to evaluate: the test text is cut into {} streams of at least 2 tokens, {least} in all",
            dir.display(),
            test.len(),
            crate::task::EVAL_STREAMS
        );
    }
    Ok((corpus.train, test, corpus.vocab.len()))
}
