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
        let (from, to) = (source.join(f), out.join(f));
        // `fs::copy` truncates its destination first: with `--out` naming the source
        // folder (or a hard link to its files) it would empty the file it reads.
        if !same_file(&from, &to) {
            std::fs::copy(&from, &to).map_err(|e| DataError::io(&to, e))?;
        }
    }
    let train = read_mnist(&out.join(FILES[0]), &out.join(FILES[1]), 10)?;
    let test = read_mnist(&out.join(FILES[2]), &out.join(FILES[3]), 10)?;
    use crate::loader::Dataset;
    Ok((train.len(), test.len()))
}

/// Whether two paths name one file (same device and inode): false where `b` is missing.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}
