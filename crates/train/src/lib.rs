//! The data-parallel trainer: worker loop with a compression thread overlapping
//! backprop, launcher, CLI, metrics and checkpoints.
//!
//! Skeleton: the contents arrive with issue 7 (see the README's roadmap).
