//! Dataset readers in their real formats, preparation of the local corpora, augmentation
//! and per-worker sharding.
//!
//! Skeleton: the contents arrive with issue 4 (see the README's roadmap).
