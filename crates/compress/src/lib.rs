//! Gradient-exchange methods of the five papers (dense, gradient dropping, local
//! gradients, DGC, gTop-k, SBC, QSGD and baselines), each with its exact wire format.
//!
//! Skeleton: the contents arrive with issue 6 (see the README's roadmap).
