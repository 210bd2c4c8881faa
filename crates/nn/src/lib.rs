//! Layers, losses, optimizers and the papers' models, built on `tensor`'s autograd.
//!
//! Skeleton: the contents arrive with issue 3 (see the README's roadmap). Nothing here
//! is usable yet, and nothing pretends to be.
