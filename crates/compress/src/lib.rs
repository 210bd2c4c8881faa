//! Gradient-exchange methods of the five papers (dense, gradient dropping, local
//! gradients, DGC, gTop-k, SBC, QSGD and baselines), each with its exact wire format.
//!
//! Done so far: the shared wire codecs ([`codec`]) with decoders that reject malformed
//! input, and the shared selection algorithms ([`select`]). The methods themselves arrive
//! next (issue 6 is open).

pub mod codec;
pub mod select;
