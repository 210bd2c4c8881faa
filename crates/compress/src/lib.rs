//! Gradient-exchange methods of the five papers, each with its exact wire format.
//!
//! - [`Method`]: the interface. A method owns the whole exchange of a parameter's
//!   gradient (state, selection or quantization, encoding, collective, decoding,
//!   aggregation) and returns the [`Update`] the optimizer applies, with the bytes it put
//!   on the wire ([`WireStats`]).
//! - [`build`] makes one from a [`MethodSpec`] (`name` and `key=value` options, checked
//!   against [`options::METHODS`], which also gives `--help` its text).
//! - Methods ([`methods`]): `dense` (f32 or f16 wire), `topk` (gradient dropping),
//!   `local` (with the local gradient: SUM, PARTIAL, ERROR), `dgc`, `gtopk`, `sbc`,
//!   `qsgd`, and the baselines `terngrad`, `onebit`, `fedavg`.
//! - Shared pieces: wire codecs with hardened decoders ([`codec`]) and selection
//!   ([`select`]: exact top-k by selection, DGC's sampled threshold).

mod build;
pub mod codec;
mod error;
mod exchange;
mod method;
pub mod methods;
pub mod options;
pub mod select;

pub use build::{build, Context};
pub use error::{CompressError, Result};
pub use method::{
    Method, ParamSpec, StateTensors, StepInfo, TensorUpdate, Update, UpdateKind, WireStats,
    ON_TENSORS,
};
pub use options::{help_text, MethodSpec};
