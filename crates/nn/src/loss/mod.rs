//! Losses: cross-entropy (the tensor crate's fused op) and CTC.

mod ctc;

pub use ctc::{ctc_loss, CtcReduction};

use tensor::{Result, Tensor};

/// Mean cross-entropy of `[N, C]` logits against `[N]` U32 labels, skipping `ignore_index`.
pub fn cross_entropy(
    logits: &Tensor,
    labels: &Tensor,
    ignore_index: Option<u32>,
) -> Result<Tensor> {
    logits.cross_entropy(labels, ignore_index)
}
