//! Fashion-MNIST from Debian's `dataset-fashion-mnist` package: the four IDX files are
//! verified and copied into the output directory under their usual names.

use crate::error::{DataError, Result};
use crate::idx::read_mnist;
use std::path::Path;

pub const FASHION_MNIST_SYSTEM_DIR: &str = "/usr/share/datasets/fashion-mnist";
const FILES: [&str; 4] = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
];

/// Copies and checks the files; returns (train, test) image counts.
pub fn prepare_fashion_mnist(source: &Path, out: &Path) -> Result<(usize, usize)> {
    for f in FILES {
        if !source.join(f).exists() {
            return Err(DataError::Msg(format!(
                "{} not found: install Fashion-MNIST with `apt-get install dataset-fashion-mnist` (or pass --source DIR holding {})",
                source.join(f).display(),
                FILES.join(", ")
            )));
        }
    }
    std::fs::create_dir_all(out).map_err(|e| DataError::io(out, e))?;
    for f in FILES {
        std::fs::copy(source.join(f), out.join(f)).map_err(|e| DataError::io(&out.join(f), e))?;
    }
    let train = read_mnist(&out.join(FILES[0]), &out.join(FILES[1]), 10)?;
    let test = read_mnist(&out.join(FILES[2]), &out.join(FILES[3]), 10)?;
    use crate::loader::Dataset;
    Ok((train.len(), test.len()))
}
