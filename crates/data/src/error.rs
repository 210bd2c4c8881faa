//! Errors that name the file and what is wrong with it.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },
    #[error(transparent)]
    Tensor(#[from] tensor::Error),
    #[error("{0}")]
    Msg(String),
}

pub type Result<T> = std::result::Result<T, DataError>;

impl DataError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub fn format(path: &Path, msg: impl Into<String>) -> Self {
        DataError::Format {
            path: path.to_path_buf(),
            msg: msg.into(),
        }
    }
}

/// Reads a whole file, transparently gunzipping it when it starts with the gzip magic.
/// The content, decompressed, may be at most `max_len` bytes (the caller's format sets
/// the bound): DEFLATE expands up to ~1000-fold, so without a cap a corrupt or hostile
/// file of a few megabytes (a "gzip bomb") could exhaust memory. Decompression stops one
/// byte past the bound, so no more than that is ever held.
pub(crate) fn read_maybe_gz(path: &Path, max_len: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let too_large = |what: &str| {
        DataError::format(
            path,
            format!(
                "{what} more than {max_len} bytes, the most this format can need \
                 (corrupt, or not the file expected?)"
            ),
        )
    };
    // Reading the file itself costs only its size on disk; the bound is checked after, so
    // that a plain file is held to it as its gzipped form would be.
    let raw = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        if raw.len() as u64 > max_len {
            return Err(too_large("the file holds"));
        }
        return Ok(raw);
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&raw[..])
        .take(max_len.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| DataError::format(path, format!("corrupt gzip stream: {e}")))?;
    if out.len() as u64 > max_len {
        return Err(too_large("the gzip stream decompresses to"));
    }
    Ok(out)
}
