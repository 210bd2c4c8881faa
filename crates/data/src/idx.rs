//! The IDX format of MNIST and Fashion-MNIST (`train-images-idx3-ubyte[.gz]` …): a 4-byte
//! magic (two zero bytes, the element type 0x08 = u8, the number of dimensions), one
//! big-endian u32 per dimension, then the elements.

use crate::error::{read_maybe_gz, DataError, Result};
use crate::image::ImageDataset;
use std::path::Path;

/// An IDX array of bytes and its dimensions.
#[derive(Debug, Clone)]
pub struct IdxArray {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// The largest IDX file accepted, decompressed: 1 GiB, about twice the largest in use
/// (EMNIST ByClass's training images, 697,932 of 28 x 28: 547 MB). It caps what a gzip
/// bomb can make us allocate; the header's dimensions then fix the exact size.
pub const MAX_IDX_BYTES: u64 = 1 << 30;

pub fn read_idx(path: &Path) -> Result<IdxArray> {
    read_idx_limited(path, MAX_IDX_BYTES)
}

/// [`read_idx`] with another bound on the (decompressed) file size.
pub fn read_idx_limited(path: &Path, max_bytes: u64) -> Result<IdxArray> {
    let bytes = read_maybe_gz(path, max_bytes)?;
    if bytes.len() < 4 {
        return Err(DataError::format(
            path,
            format!("truncated: {} bytes, not even an IDX header", bytes.len()),
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(DataError::format(
            path,
            format!(
                "bad IDX magic {:02x?} (expected 00 00 08 <dims>)",
                &bytes[..4]
            ),
        ));
    }
    if bytes[2] != 0x08 {
        return Err(DataError::format(
            path,
            format!(
                "IDX element type 0x{:02x} is not supported (only 0x08, unsigned bytes)",
                bytes[2]
            ),
        ));
    }
    let ndims = bytes[3] as usize;
    let header = 4 + 4 * ndims;
    if ndims == 0 || bytes.len() < header {
        return Err(DataError::format(
            path,
            format!(
                "truncated IDX header ({ndims} dimensions, {} bytes)",
                bytes.len()
            ),
        ));
    }
    let dims: Vec<usize> = (0..ndims)
        .map(|i| {
            u32::from_be_bytes([
                bytes[4 + 4 * i],
                bytes[5 + 4 * i],
                bytes[6 + 4 * i],
                bytes[7 + 4 * i],
            ]) as usize
        })
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| DataError::format(path, format!("dimensions {dims:?} overflow")))?;
    let got = bytes.len() - header;
    if got != expected {
        return Err(DataError::format(path, format!("dimensions {dims:?} need {expected} bytes of data, the file has {got} (truncated or corrupt)")));
    }
    Ok(IdxArray {
        dims,
        data: bytes[header..].to_vec(),
    })
}

/// The path of MNIST-layout file `name` (e.g. `train-images-idx3-ubyte`) in `dir`: the
/// gzipped file as distributed, or the unpacked one when only that is there (the readers
/// take either), so that a corrupt `.gz` is reported as such.
pub fn mnist_file(dir: &Path, name: &str) -> std::path::PathBuf {
    let gz = dir.join(format!("{name}.gz"));
    let plain = dir.join(name);
    if !gz.exists() && plain.exists() {
        plain
    } else {
        gz
    }
}

/// An MNIST-style dataset from an images file (`[N, rows, cols]`) and a labels file (`[N]`).
pub fn read_mnist(images: &Path, labels: &Path, classes: usize) -> Result<ImageDataset> {
    let img = read_idx(images)?;
    let lab = read_idx(labels)?;
    if img.dims.len() != 3 {
        return Err(DataError::format(
            images,
            format!("expected 3 dimensions [N, rows, cols], got {:?}", img.dims),
        ));
    }
    if lab.dims.len() != 1 {
        return Err(DataError::format(
            labels,
            format!("expected 1 dimension [N], got {:?}", lab.dims),
        ));
    }
    if img.dims[0] != lab.dims[0] {
        return Err(DataError::format(
            labels,
            format!(
                "{} labels for {} images in {}",
                lab.dims[0],
                img.dims[0],
                images.display()
            ),
        ));
    }
    // The pixels' shape is the images file's to answer for; what `ImageDataset::new`
    // refuses after this check is a label.
    if img.dims[1] == 0 || img.dims[2] == 0 {
        return Err(DataError::format(
            images,
            format!("images of {} x {} pixels", img.dims[1], img.dims[2]),
        ));
    }
    let labels_u32: Vec<u32> = lab.data.iter().map(|&l| l as u32).collect();
    ImageDataset::new(img.data, labels_u32, [1, img.dims[1], img.dims[2]], classes).map_err(|e| {
        match e {
            DataError::Msg(m) => DataError::format(labels, m),
            other => other,
        }
    })
}
