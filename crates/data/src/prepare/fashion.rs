//! Fashion-MNIST from Debian's `dataset-fashion-mnist` package: the four IDX files are
//! verified and copied into the output directory under their usual names.

use super::same_file;
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

/// Checks and copies the files; returns (train, test) image counts.
///
/// The files are checked where they are, before anything is written: a damaged source
/// is reported against its own path, and `out` is left as it was (not created, or
/// holding its earlier files). Each file is then copied under a temporary name and the
/// four renamed into place only once all are copied, so a failed copy (a full disk)
/// leaves no half-made corpus under the real names either.
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
    let damaged = |e: DataError| {
        e.in_corpus(
            "Fashion-MNIST",
            source,
            &format!("--source DIR holding {}", FILES.join(", ")),
        )
    };
    let train = read_mnist(&source.join(FILES[0]), &source.join(FILES[1]), 10).map_err(damaged)?;
    let test = read_mnist(&source.join(FILES[2]), &source.join(FILES[3]), 10).map_err(damaged)?;
    std::fs::create_dir_all(out).map_err(|e| DataError::io(out, e))?;
    let mut staged = Vec::new();
    for f in FILES {
        let (from, to) = (source.join(f), out.join(f));
        // `fs::copy` truncates its destination first: with `--out` naming the source
        // folder (or a hard link to its files) it would empty the file it reads.
        if same_file(&from, &to) {
            continue;
        }
        let partial = out.join(format!(".{f}.partial"));
        if let Err(e) = std::fs::copy(&from, &partial) {
            let _ = std::fs::remove_file(&partial);
            for (p, _) in &staged {
                let _ = std::fs::remove_file(p);
            }
            return Err(DataError::Msg(format!(
                "copying {} to {}: {e}",
                from.display(),
                partial.display()
            )));
        }
        staged.push((partial, to));
    }
    for (partial, to) in &staged {
        std::fs::rename(partial, to).map_err(|e| DataError::io(to, e))?;
    }
    use crate::loader::Dataset;
    Ok((train.len(), test.len()))
}
