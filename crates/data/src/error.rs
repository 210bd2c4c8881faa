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

    /// Whether this error is a file or folder that does not exist: the one failure an
    /// install or prepare hint can mend. A file that is there but corrupt, truncated or
    /// of another format is a [`DataError::Format`] instead.
    pub fn is_missing(&self) -> bool {
        matches!(self, DataError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// This error as a reader of the corpus `corpus` in `dir` reports it: where a file
    /// is missing, "`corpus` not found in `dir`" with `hint` (how to install or prepare
    /// it); where a file is there but damaged, that it is damaged, naming the file and
    /// the cause, with no install hint (installing would not mend it and the hint would
    /// hide the cause); where it cannot be read (permissions, say), that.
    pub fn in_corpus(self, corpus: &str, dir: &Path, hint: &str) -> DataError {
        let dir = dir.display();
        DataError::Msg(match &self {
            e if e.is_missing() => format!("{corpus} not found in {dir}: {hint} ({e})"),
            DataError::Format { .. } => format!("{corpus} in {dir} is damaged: {self}"),
            DataError::Io { .. } => format!("{corpus} in {dir} cannot be read: {self}"),
            _ => format!("{corpus} in {dir}: {self}"),
        })
    }
}

/// Reads a whole text file; content that is not UTF-8 is a damaged file (a
/// [`DataError::Format`] naming it), not a failure to read.
pub(crate) fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| {
        DataError::format(
            path,
            format!(
                "not UTF-8 text (invalid byte at offset {}: corrupt, or not the file expected?)",
                e.utf8_error().valid_up_to()
            ),
        )
    })
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
    // Neither a plain file nor a gzip stream of at most `max_len` bytes is much larger
    // than `max_len` on disk (gzip adds well under 1/64 even to incompressible data): a
    // larger file is refused before it is read into memory.
    let raw = read_at_most(
        path,
        max_len.saturating_add(max_len / 64).saturating_add(4096),
        &format!("{max_len} bytes, the most this format can need"),
    )?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        if raw.len() as u64 > max_len {
            return Err(too_large("the file holds"));
        }
        return Ok(raw);
    }
    let mut out = Vec::new();
    // All members: `cat a.gz b.gz` is a valid gzip file (gunzip reads it whole).
    flate2::read::MultiGzDecoder::new(&raw[..])
        .take(max_len.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| DataError::format(path, format!("corrupt gzip stream: {e}")))?;
    if out.len() as u64 > max_len {
        return Err(too_large("the gzip stream decompresses to"));
    }
    Ok(out)
}

/// Reads a regular file of at most `max_len` bytes (`what` says what that bound is, for
/// the error). Its size on disk is checked before reading, and the read itself stops one
/// byte past the bound: a device or a pipe named where a data file belongs (`/dev/zero`
/// reports a size of 0) is refused, not read until memory runs out.
pub(crate) fn read_at_most(path: &Path, max_len: u64, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let meta = f.metadata().map_err(|e| DataError::io(path, e))?;
    if !meta.is_file() {
        return Err(DataError::format(
            path,
            "not a regular file (a device, a pipe or a directory where a data file belongs)",
        ));
    }
    let too_large = |size: String| {
        DataError::format(
            path,
            format!("the file holds more than {what} ({size}; corrupt, or not the file expected?)"),
        )
    };
    if meta.len() > max_len {
        return Err(too_large(format!(
            "{} bytes on disk, refused before reading",
            meta.len()
        )));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    f.take(max_len.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| DataError::io(path, e))?;
    if out.len() as u64 > max_len {
        return Err(too_large("it grew while being read".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::read_maybe_gz;
    use std::io::Write;

    /// A device where a data file belongs reports a size of 0 and never ends: refused
    /// before reading, where reading it whole would exhaust memory.
    #[test]
    fn a_device_in_place_of_a_data_file_is_refused() {
        for f in ["/dev/zero", "/dev/null"] {
            let e = read_maybe_gz(std::path::Path::new(f), 1 << 20)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a regular file"), "{f}: {e}");
        }
        let e = super::read_at_most(std::path::Path::new("/tmp"), 10, "ten bytes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    /// A missing file keeps the hint; a damaged one says so, with its cause and no hint.
    #[test]
    fn in_corpus_tells_a_missing_file_from_a_damaged_one() {
        let dir = std::path::Path::new("/data/x");
        let missing = super::DataError::io(
            &dir.join("a.gz"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert!(missing.is_missing());
        let e = missing.in_corpus("X", dir, "install x").to_string();
        assert!(
            e.starts_with("X not found in /data/x: install x (/data/x/a.gz: "),
            "{e}"
        );
        let damaged = super::DataError::format(&dir.join("a.gz"), "corrupt gzip stream: bad");
        assert!(!damaged.is_missing());
        let e = damaged.in_corpus("X", dir, "install x").to_string();
        assert_eq!(
            e,
            "X in /data/x is damaged: /data/x/a.gz: corrupt gzip stream: bad"
        );
        let denied = super::DataError::io(
            &dir.join("a.gz"),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        let e = denied.in_corpus("X", dir, "install x").to_string();
        assert!(
            e.starts_with("X in /data/x cannot be read: /data/x/a.gz"),
            "{e}"
        );
        assert!(!e.contains("install x"), "{e}");
    }

    #[test]
    fn text_that_is_not_utf8_is_a_damaged_file() {
        let path = temp("latin1.txt");
        std::fs::write(&path, b"caf\xe9\n").unwrap();
        let e = super::read_text(&path).unwrap_err();
        assert!(matches!(e, super::DataError::Format { .. }), "{e}");
        assert!(e.to_string().contains("not UTF-8 text"), "{e}");
        let _ = std::fs::remove_file(path);
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("gradex-data-{}-{name}", std::process::id()))
    }

    /// `cat a.gz b.gz` is one valid gzip file: both members are read.
    #[test]
    fn every_member_of_a_multi_member_gzip_file_is_read() {
        let path = temp("multi.gz");
        let mut bytes = gz(b"first half, ");
        bytes.extend(gz(b"second half"));
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(
            read_maybe_gz(&path, 1000).unwrap(),
            b"first half, second half"
        );
        let _ = std::fs::remove_file(path);
    }

    /// A file far larger than the format can need is refused from its size alone (a
    /// sparse file here: reading it would take 8 GiB).
    #[test]
    fn a_file_beyond_the_bound_is_refused_unread() {
        let path = temp("huge");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(8 << 30)
            .unwrap();
        let e = read_maybe_gz(&path, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("more than 1048576 bytes"), "{e}");
        // From its size on disk, before any read (a read would end in "the file holds").
        assert!(e.contains("8589934592 bytes on disk"), "{e}");
        let _ = std::fs::remove_file(path);
    }
}
