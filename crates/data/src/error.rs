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
pub(crate) fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&raw[..]), &mut out)
            .map_err(|e| DataError::format(path, format!("corrupt gzip stream: {e}")))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}
