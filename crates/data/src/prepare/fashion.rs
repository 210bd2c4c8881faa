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

/// Whether two paths name one file (same device and inode): false where `b` is missing.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{prepare_fashion_mnist, FILES};
    use std::path::PathBuf;

    fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 0x08, dims.len() as u8];
        for d in dims {
            v.extend(d.to_be_bytes());
        }
        v.extend(data);
        v
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    /// A source of four small, valid IDX files (3 training and 2 test images of 4 x 4).
    fn source(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fashion-prep-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let files = [
            idx(&[3, 4, 4], &[7; 48]),
            idx(&[3], &[0, 5, 9]),
            idx(&[2, 4, 4], &[1; 32]),
            idx(&[2], &[1, 2]),
        ];
        for (f, bytes) in FILES.iter().zip(files) {
            std::fs::write(d.join(f), gz(&bytes)).unwrap();
        }
        d
    }

    #[test]
    fn a_valid_source_is_copied_with_nothing_left_over() {
        let src = source("ok");
        let out = src.with_extension("out");
        let _ = std::fs::remove_dir_all(&out);
        assert_eq!(prepare_fashion_mnist(&src, &out).unwrap(), (3, 2));
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut want: Vec<String> = FILES.iter().map(|f| f.to_string()).collect();
        want.sort();
        assert_eq!(names, want, "no temporary file is left");
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&out);
    }

    /// A damaged source file is named as damaged, in the source; nothing is written:
    /// neither the output folder nor, where it existed, its earlier files change.
    #[test]
    fn a_damaged_source_leaves_the_output_untouched() {
        let src = source("bad");
        let out = src.with_extension("out");
        let _ = std::fs::remove_dir_all(&out);
        let labels = src.join(FILES[3]);
        let good = std::fs::read(&labels).unwrap();
        // Truncated gzip stream, labels out of range, a count that disagrees.
        for bad in [
            good[..good.len() - 6].to_vec(),
            gz(&idx(&[2], &[1, 10])),
            gz(&idx(&[3], &[1, 2, 3])),
        ] {
            std::fs::write(&labels, &bad).unwrap();
            let e = prepare_fashion_mnist(&src, &out).unwrap_err().to_string();
            assert!(e.contains("is damaged"), "{e}");
            assert!(e.contains(&labels.display().to_string()), "{e}");
            assert!(!e.contains("apt-get"), "{e}");
            assert!(!out.exists(), "{} was created", out.display());
        }
        // Over an earlier corpus: left as it was.
        std::fs::write(&labels, &good).unwrap();
        prepare_fashion_mnist(&src, &out).unwrap();
        std::fs::write(&labels, gz(&idx(&[2], &[1, 10]))).unwrap();
        assert!(prepare_fashion_mnist(&src, &out).is_err());
        assert_eq!(std::fs::read(out.join(FILES[3])).unwrap(), good);
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 4);
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&out);
    }
}
