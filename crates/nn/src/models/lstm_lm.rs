//! Word- and character-level LSTM language models.
//!
//! - `lstm_lm(10_000, 1500, 0.65)`: DGC's Penn Treebank model (Press & Wolf 2016 "large"):
//!   embedding 1500, 2 LSTM layers of 1500, decoder tied to the embedding. Parameters:
//!   embedding 15,000,000 + 2 × (4·1500·(1500 + 1500) + 8·1500) = 36,024,000 + decoder bias
//!   10,000 = 51,034,000 (194.68 MiB, DGC Table 3).
//! - `lstm_lm(10_000, 650, 0.5)`: the "medium" sibling used by SBC (13,280,400).
//! - `char_lstm(vocab)`: SBC's CharLSTM, 2 × 200, untied (Shakespeare characters).
//!
//! Input: U32 token ids `[T, N]` (time-major); output logits `[T, N, vocab]`.
//! Embeddings and the decoder start U(−0.1, 0.1), biases 0, as the PyTorch word
//! language-model example the papers build on.

use crate::init;
use crate::layers::{Embedding, Linear, Rnn, RnnKind, RnnState};
use crate::module::{join, Ctx, Module, NamedTensor};
use tensor::{Error, Result, Rng, Tensor};

pub struct LstmLm {
    pub encoder: Embedding,
    pub rnn: Rnn,
    pub decoder: Linear,
    pub dropout: f64,
    pub vocab: usize,
}

fn build(
    vocab: usize,
    emb: usize,
    hidden: usize,
    tied: bool,
    dropout: f64,
    rng: &mut Rng,
) -> Result<LstmLm> {
    if tied && emb != hidden {
        return Err(Error::msg(format!(
            "lstm_lm: tied weights need embedding size ({emb}) = hidden size ({hidden})"
        )));
    }
    let encoder = Embedding {
        weight: init::uniform(&[vocab, emb], 0.1, rng)?,
    };
    let rnn = Rnn::new(RnnKind::Lstm, emb, hidden, 2, false, dropout, rng)?;
    let decoder = if tied {
        let mut d = Linear::tied(encoder.weight.clone(), true, rng)?;
        d.bias = Some(init::constant(&[vocab], 0.0)?);
        d
    } else {
        let mut d = Linear::new(hidden, vocab, true, rng)?;
        d.weight = init::uniform(&[vocab, hidden], 0.1, rng)?;
        d.bias = Some(init::constant(&[vocab], 0.0)?);
        d
    };
    Ok(LstmLm {
        encoder,
        rnn,
        decoder,
        dropout,
        vocab,
    })
}

/// The papers' dropout for a word LM of `hidden` units: 0.65 for the large (1500) model,
/// 0.5 for the medium (650), none for other sizes.
pub const fn lstm_lm_dropout(hidden: usize) -> f64 {
    match hidden {
        1500 => 0.65,
        650 => 0.5,
        _ => 0.0,
    }
}

/// 2-layer LSTM language model with `hidden` units, tied encoder/decoder.
pub fn lstm_lm(vocab: usize, hidden: usize, dropout: f64, rng: &mut Rng) -> Result<LstmLm> {
    build(vocab, hidden, hidden, true, dropout, rng)
}

/// SBC's character-level 2 × 200 LSTM (embedding 200, untied decoder).
pub fn char_lstm(vocab: usize, rng: &mut Rng) -> Result<LstmLm> {
    build(vocab, 200, 200, false, 0.0, rng)
}

impl LstmLm {
    /// Logits `[T, N, vocab]` and the final state, continuing from `state` (truncated BPTT
    /// carries it across batches, detached).
    pub fn forward_with_state(
        &self,
        ids: &Tensor,
        state: Option<&RnnState>,
        ctx: &mut Ctx,
    ) -> Result<(Tensor, RnnState)> {
        let mut h = self.encoder.forward(ids, ctx)?;
        if ctx.training && self.dropout > 0.0 {
            h = h.dropout(self.dropout, &mut ctx.rng)?;
        }
        let (mut y, state) = self.rnn.forward_seq(&h, state, ctx)?;
        if ctx.training && self.dropout > 0.0 {
            y = y.dropout(self.dropout, &mut ctx.rng)?;
        }
        Ok((self.decoder.forward(&y, ctx)?, state))
    }
}

impl Module for LstmLm {
    fn forward(&self, ids: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        Ok(self.forward_with_state(ids, None, ctx)?.0)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.encoder.params(&join(prefix, "encoder"), out);
        self.rnn.params(&join(prefix, "rnn"), out);
        self.decoder.params(&join(prefix, "decoder"), out);
    }
}
