//! What a run leaves behind: one JSON object per logging step and per evaluation in
//! `metrics.jsonl` (appended and flushed as training goes, so a crashed run keeps what it
//! measured), and `summary.json` at the end. Files that replace an earlier version are
//! written atomically (a temporary file renamed over the old one).

use crate::progress::say_err;
use anyhow::{Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// Removes each of `files` that exists (one that does not is fine); `what` names them in
/// the error.
pub fn remove_present(
    files: impl IntoIterator<Item = std::path::PathBuf>,
    what: &str,
) -> Result<()> {
    for f in files {
        match std::fs::remove_file(&f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {what} {}", f.display()))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes `path` so that it holds either its old or its new bytes, also across a crash
/// or a power cut: a temporary file (named after this process and a random number, so
/// that workers writing the same file, even processes of the same PID on different nodes
/// of a shared file system, do not share one) is written and flushed to disk, renamed over `path`,
/// and the directory is flushed so that the rename itself is durable. A failed flush is
/// an error: renaming a file the disk may not hold over a good one would lose both. A
/// failed write removes its temporary (a full disk must not stay full of them);
/// [`remove_stale_temporaries`] takes those a killed process left.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(format!(".tmp{}-{:016x}", std::process::id(), random_u64()));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| -> Result<()> {
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("flushing {} to disk", tmp.display()))?;
        drop(f);
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    sync_parent(path)
}

/// Whether `name` is a temporary of [`write_atomic`] for a file whose name starts with
/// `prefix`: `{file}.tmp{pid}-{16 hex digits}`.
fn is_temporary(name: &str, prefix: &str) -> bool {
    let Some((file, tail)) = name.rsplit_once(".tmp") else {
        return false;
    };
    let Some((pid, hex)) = tail.split_once('-') else {
        return false;
    };
    file.starts_with(prefix)
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && hex.len() == 16
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Removes the temporaries of [`write_atomic`] in `dir` for files whose names start with
/// `prefix`, left by a process killed or failed mid-write (a run directory is used by one
/// job at a time, so none is being written when a run starts). Returns how many went.
pub fn remove_stale_temporaries(dir: &Path, prefix: &str) -> Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| is_temporary(n, prefix)) {
            let p = entry.path();
            std::fs::remove_file(&p)
                .with_context(|| format!("removing the stale temporary {}", p.display()))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// 64 random bits for a temporary file's name (the system's generator; should it fail,
/// the clock's nanoseconds, which still tell two nodes' writers apart in practice).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    match getrandom::getrandom(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

/// Flushes the directory holding `path` (its entries: a rename or a new file).
pub fn sync_parent(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("flushing the directory {}", dir.display()))?;
    Ok(())
}

/// One logging step: averages since the previous log line, cumulative bytes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StepRecord {
    pub kind: &'static str,
    pub step: usize,
    pub epoch: f64,
    pub loss: f64,
    pub lr: f64,
    pub density: f64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// What a dense f32 ring allreduce would have sent by this step.
    pub dense_bytes: u64,
    pub message_bytes: u64,
    pub dense_message_bytes: u64,
    /// Seconds per step, averaged over the steps since the last log line.
    pub step_seconds: f64,
    pub compute_seconds: f64,
    pub compression_seconds: f64,
    pub communication_seconds: f64,
    /// Time the training thread waited for the exchange after backward had finished.
    pub idle_seconds: f64,
    /// How long before the end of backward the step's first exchange started (> 0:
    /// communication overlapped backprop).
    pub overlap_seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct EvalRecord {
    pub kind: &'static str,
    pub step: usize,
    /// Steps done over steps per epoch: whole at the end of an epoch, a fraction for
    /// `eval_every`'s evaluations and where `--steps` ends within an epoch.
    pub epoch: f64,
    pub metric_name: &'static str,
    pub metric: f64,
    pub test_loss: f64,
    /// What the metric averages over, summed over the ranks: test images (accuracy),
    /// tokens (perplexity) or reference words (word error rate).
    pub eval_count: u64,
    /// Top-5 accuracy (image tasks of at least 5 classes; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top5: Option<f64>,
    pub bytes_sent: u64,
    /// Training wall time so far, this evaluation included (carried over a resume), so
    /// a run's time to reach a metric can be read off.
    pub wall_seconds: f64,
    /// `wall_seconds` less every evaluation so far, this one included: the time to a
    /// metric that `time_to_accuracy` compares with PyTorch DDP's.
    pub train_seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Summary {
    /// The last evaluation's metric. A perplexity can overflow to inf while the training
    /// loss stays finite; JSON writes it as null, read back as NaN.
    #[serde(deserialize_with = "nan_if_null")]
    pub final_metric: f64,
    /// The last evaluation's top-5 accuracy (image tasks of at least 5 classes).
    #[serde(default)]
    pub final_top5: Option<f64>,
    pub metric_name: String,
    /// The training loss last logged; NaN (written as null) when the run logged none.
    #[serde(deserialize_with = "nan_if_null")]
    pub final_loss: f64,
    /// Gradient-exchange bytes this rank sent (payload, all collectives of the method).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// What a dense f32 ring allreduce would have sent for the same exchanges.
    pub dense_bytes: u64,
    /// dense_bytes / bytes_sent (null with one worker: nothing is sent).
    pub compression_ratio: Option<f64>,
    /// The papers' ratio: dense f32 message bytes / the method's message bytes.
    pub message_compression_ratio: Option<f64>,
    /// With `--local-world-size`: of `bytes_sent`, what this rank sent inside its node
    /// and across nodes since this process started (a resumed run's count from the
    /// resume). Null for a flat exchange.
    #[serde(default)]
    pub intra_node_bytes_sent: Option<u64>,
    #[serde(default)]
    pub inter_node_bytes_sent: Option<u64>,
    pub wall_seconds: f64,
    pub steps: usize,
    pub epochs: usize,
    pub workers: usize,
    pub method: String,
    /// The method with every option resolved, e.g. `dgc(density=0.001, ...)`.
    pub method_config: String,
    pub model: String,
    /// Trainable values in the model.
    #[serde(default)]
    pub parameters: usize,
    pub dataset: String,
    #[serde(deserialize_with = "nan_if_null")]
    pub mean_step_seconds: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub mean_idle_fraction: f64,
}

pub struct MetricsWriter {
    file: Option<std::fs::File>,
}

impl MetricsWriter {
    /// Appends to `dir/metrics.jsonl` (rank 0), or writes nothing (other ranks).
    pub fn open(dir: &Path, enabled: bool, truncate: bool) -> Result<Self> {
        if !enabled {
            return Ok(MetricsWriter { file: None });
        }
        let path = dir.join("metrics.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(!truncate)
            .write(true)
            .truncate(truncate)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(MetricsWriter { file: Some(file) })
    }
    /// Rank 0 of a resumed run: drops the records past `step` (what the interrupted run
    /// logged after its last checkpoint, which the resumed run logs again) and a torn last
    /// line, then appends. Other ranks write nothing.
    pub fn resume(dir: &Path, enabled: bool, step: usize) -> Result<Self> {
        if !enabled {
            return Ok(MetricsWriter { file: None });
        }
        let path = dir.join("metrics.jsonl");
        let old = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let mut kept = String::with_capacity(old.len());
        let mut dropped = 0usize;
        for line in old.lines() {
            let at = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("step").and_then(|s| s.as_u64()));
            match at {
                Some(s) if s as usize <= step => {
                    kept.push_str(line);
                    kept.push('\n');
                }
                _ => dropped += 1,
            }
        }
        if dropped > 0 {
            say_err(&format!(
                "resuming at step {step}: dropped {dropped} record(s) of metrics.jsonl logged after the checkpoint"
            ));
            write_atomic(&path, kept.as_bytes())?;
        }
        Self::open(dir, true, false)
    }
    pub fn write<T: Serialize>(&mut self, record: &T) -> Result<()> {
        if let Some(f) = &mut self.file {
            let line = serde_json::to_string(record)?;
            writeln!(f, "{line}").context("writing metrics.jsonl")?;
            f.flush().ok();
        }
        Ok(())
    }
}

/// JSON has no NaN: serde_json writes it as null, which reads back as NaN here.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    use serde::Deserialize;
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A write that fails (here the rename, onto a directory) leaves no temporary.
    #[test]
    fn a_failed_atomic_write_removes_its_temporary() {
        let dir = std::env::temp_dir().join(format!("gradex-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("blocked")).unwrap();
        assert!(super::write_atomic(&dir.join("blocked"), b"bytes").is_err());
        assert_eq!(names(&dir), vec!["blocked".to_string()]);
        super::write_atomic(&dir.join("ok"), b"bytes").unwrap();
        assert_eq!(names(&dir), vec!["blocked".to_string(), "ok".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The temporaries a killed writer left go at start, only those of the prefix asked
    /// for and only names of write_atomic's form.
    #[test]
    fn stale_temporaries_of_a_prefix_are_removed() {
        let dir = std::env::temp_dir().join(format!("gradex-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for n in [
            "rank0.safetensors.tmp123-0123456789abcdef",
            "rank0.prev.safetensors.tmp9-fedcba9876543210",
            "rank1.safetensors.tmp123-0123456789abcdef",
            "rank0.safetensors",
            "rank0.safetensors.tmp-notours",
            "rank0.safetensors.tmp12-0123",
        ] {
            std::fs::write(dir.join(n), b"x").unwrap();
        }
        assert_eq!(super::remove_stale_temporaries(&dir, "rank0.").unwrap(), 2);
        assert_eq!(
            names(&dir),
            vec![
                "rank0.safetensors",
                "rank0.safetensors.tmp-notours",
                "rank0.safetensors.tmp12-0123",
                "rank1.safetensors.tmp123-0123456789abcdef",
            ]
        );
        assert_eq!(
            super::remove_stale_temporaries(&dir.join("none"), "x").unwrap(),
            0
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The launcher reads rank 0's summary back: a non-finite metric (an overflowing
    /// perplexity) or step mean, written as null, must not make that fail.
    #[test]
    fn a_summary_with_non_finite_values_reads_back() {
        let s = super::Summary {
            final_metric: f64::INFINITY,
            final_loss: f64::NAN,
            mean_step_seconds: f64::NAN,
            mean_idle_fraction: f64::NAN,
            ..Default::default()
        };
        let json = serde_json::to_string(&s).unwrap();
        let back: super::Summary = serde_json::from_str(&json).unwrap();
        assert!(back.final_metric.is_nan() && back.final_loss.is_nan());
        assert!(back.mean_step_seconds.is_nan() && back.mean_idle_fraction.is_nan());
    }

    /// Writers of the same file (ranks writing config.toml into a shared directory) do
    /// not share a temporary file, so none of them loses its rename.
    #[test]
    fn concurrent_atomic_writes_of_one_file_all_succeed() {
        let dir = std::env::temp_dir().join(format!("gradex-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.toml");
        std::thread::scope(|s| {
            for t in 0..2u8 {
                let file = &file;
                s.spawn(move || {
                    for _ in 0..200 {
                        super::write_atomic(file, &[t; 64]).unwrap();
                    }
                });
            }
        });
        let got = std::fs::read(&file).unwrap();
        assert!(got == [0u8; 64] || got == [1u8; 64]);
        // Nothing but the file is left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(dir);
    }
}
