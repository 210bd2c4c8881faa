//! Gradient-exchange methods of the five papers, each with its exact wire format.
//!
//! - [`Method`]: the interface. A method owns the whole exchange of a parameter's
//!   gradient (state, selection or quantization, encoding, collective, decoding,
//!   aggregation) and returns the [`Update`] the optimizer applies, with the bytes it put
//!   on the wire ([`WireStats`]).
//! - [`build`] makes one from a [`MethodSpec`] (`name` and `key=value` options, checked
//!   against [`METHODS`], the registry: one entry per method with its options and its
//!   constructor, which also gives `--help` its text).
//! - Methods ([`methods`]): the five papers' — `topk` (gradient dropping), `local` (with
//!   the local gradient: SUM, PARTIAL, ERROR), `dgc`, `gtopk`, `sbc`, `qsgd` — their
//!   baselines `dense` (f32, f16 or bf16 wire), `terngrad`, `onebit`, `fedavg`, and the
//!   methods researchers compare against: `powersgd`, `signsgd`, `signum`, `efsignsgd`,
//!   `randomk`, `thresholdv`.
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

pub use build::{build, Context, METHODS};
pub use error::{CompressError, Result};
pub use method::{
    AfterStep, Exchange, HostAfterStep, HostExchange, Method, ParamSpec, StateTensors, StepInfo,
    TensorAfterStep, TensorExchange, TensorUpdate, Update, UpdateKind, WireStats,
};
pub use options::{help_text, MethodSpec};
