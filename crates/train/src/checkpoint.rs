//! Checkpoints: one safetensors file per rank (`checkpoint/rank{r}.safetensors`) with
//! the parameters and buffers under their PyTorch-style names (`param/…`, `buffer/…`),
//! the optimizer's state (`optim/{index}` for SGD's momentum, `optim/{index}/{m,v,step}`
//! for Adam's), the method's state (`method/…`:
//! residuals, momenta, DGC's sampling generator) and, as metadata, where training stands.
//! Written atomically, so a worker killed mid-write leaves the previous checkpoint, and
//! with a CRC-32 of its tensors (names and values, in name order) in the metadata, so a
//! file damaged afterwards (a flipped or overwritten block) is refused on load instead
//! of resuming from wrong values; files written before the checksum load unchecked.
//! Resuming restores every piece, and training continues bit for bit (tested).
//!
//! Two generations are kept per rank: saving renames the current file to
//! `rank{r}.prev.safetensors` before writing the new one. Ranks save at the same step
//! but not in step with each other, so a job that dies while they save can leave rank 0
//! one generation ahead of rank 1; a resume then picks the newest step that every rank
//! holds (see `Worker::agree`), instead of averaging gradients of replicas that stand at
//! different steps. A resume reads each generation whole first ([`inspect`]): one that
//! is damaged (its CRC, or not a safetensors file at all) is renamed aside
//! ([`set_aside`], never deleted) and counts as missing, so the ranks agree on the
//! newest generation every rank holds intact.

use anyhow::{bail, Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tensor::{Device, Tensor};

/// The file in a run directory holding a fresh run's starting model (parameters and
/// buffers after rank 0's broadcast, in the checkpoints' names and format).
pub const INITIAL_FILE: &str = "initial.safetensors";

pub fn path(dir: &Path, rank: usize) -> PathBuf {
    dir.join("checkpoint")
        .join(format!("rank{rank}.safetensors"))
}

/// The generation before [`path`]'s.
pub fn prev_path(dir: &Path, rank: usize) -> PathBuf {
    dir.join("checkpoint")
        .join(format!("rank{rank}.prev.safetensors"))
}

/// Writes a new generation: the current file (if any) becomes the previous one, then the
/// new one is written atomically. Between the two steps only the previous generation
/// exists, which [`Position`]-agreement on resume handles like any other lag.
pub fn save_generation(
    dir: &Path,
    rank: usize,
    tensors: &[(String, Vec<f32>, Vec<usize>)],
    pos: &Position,
) -> Result<()> {
    let (cur, prev) = (path(dir, rank), prev_path(dir, rank));
    if cur.exists() {
        std::fs::rename(&cur, &prev)
            .with_context(|| format!("renaming {} to {}", cur.display(), prev.display()))?;
    }
    save(&cur, tensors, pos)
}

/// Removes a rank's checkpoints (a fresh run into a used directory must not leave an
/// older run's checkpoint for `--resume` to pick up).
pub fn remove(dir: &Path, rank: usize) -> Result<()> {
    crate::metrics::remove_present(
        [path(dir, rank), prev_path(dir, rank)],
        "the stale checkpoint",
    )
}

/// Removes the checkpoints of ranks `world` and above: a fresh run with fewer workers
/// than the run it replaces must not leave the others' files behind (a later `--resume`
/// with the old `--workers` would mix the two runs).
pub fn remove_ranks_from(dir: &Path, world: usize) -> Result<()> {
    let entries = match std::fs::read_dir(dir.join("checkpoint")) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut stale = Vec::new();
    for entry in entries {
        let name = entry
            .with_context(|| format!("listing {}/checkpoint", dir.display()))?
            .file_name();
        let rank = name
            .to_str()
            .and_then(|n| n.strip_prefix("rank"))
            .and_then(|n| {
                n.strip_suffix(".prev.safetensors")
                    .or_else(|| n.strip_suffix(".safetensors"))
            })
            .and_then(|r| r.parse::<usize>().ok());
        if rank.is_some_and(|r| r >= world) {
            stale.push(dir.join("checkpoint").join(name));
        }
    }
    crate::metrics::remove_present(stale, "the stale checkpoint")
}

/// Refuses a fresh run into `out` while it holds an earlier run: a finished one
/// (`summary.json`, looked for when `summary`) or one that can be resumed (a checkpoint of
/// any of `ranks`). The trainer asks this for all its local ranks before starting any
/// worker, and each worker for its own rank (a job started by another launcher).
pub fn earlier_run(
    out: &Path,
    ranks: impl IntoIterator<Item = usize>,
    summary: bool,
) -> Result<()> {
    let mut found: Vec<std::path::PathBuf> = ranks
        .into_iter()
        .flat_map(|r| [path(out, r), prev_path(out, r)])
        .collect();
    if summary {
        found.push(out.join("summary.json"));
    }
    if let Some(f) = found.iter().find(|f| f.exists()) {
        anyhow::bail!(
            "{} holds an earlier run ({}): --resume continues it, --overwrite replaces it, or choose another --out",
            out.display(),
            f.display()
        );
    }
    Ok(())
}
/// Where training stands, stored as metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Position {
    pub step: usize,
    /// Epochs completed. Where `--steps` ended inside an epoch, `step` is past
    /// `epoch × batches per epoch` and a resume skips that many batches of the epoch.
    pub epoch: usize,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub message_bytes: u64,
    pub dense_message_bytes: u64,
    pub wall_seconds: f64,
    /// The part of `wall_seconds` spent evaluating (0 in checkpoints written before it
    /// was recorded), so that a resumed run's training time excludes its evaluations too.
    pub eval_seconds: f64,
    /// Workers of the run that wrote it (0: written before this was recorded).
    pub world: usize,
    /// Batches per epoch of the run that wrote it (0: not recorded): `step` and `epoch`
    /// mean a place in the data only with the same epoch length.
    pub per_epoch: usize,
    /// Per-worker batch size of the run that wrote it (0: not recorded).
    pub batch_size: usize,
    /// Training samples (or, for a language model, tokens) of the run that wrote it (0:
    /// not recorded): two data sets can give the same batches per epoch and still shuffle
    /// and shard differently.
    pub train_len: usize,
    /// The training loss last logged (NaN: none yet, or not recorded), so that a run
    /// resumed where it ended still reports it.
    pub loss: f64,
    /// The metrics log window open when it was written (the worker's sums since the last
    /// `metrics.jsonl` step record), so that a resumed run logs the same records.
    pub log_window: Vec<f64>,
}

impl Default for Position {
    fn default() -> Self {
        Position {
            step: 0,
            epoch: 0,
            bytes_sent: 0,
            bytes_received: 0,
            message_bytes: 0,
            dense_message_bytes: 0,
            wall_seconds: 0.0,
            eval_seconds: 0.0,
            world: 0,
            per_epoch: 0,
            batch_size: 0,
            train_len: 0,
            loss: f64::NAN,
            log_window: Vec::new(),
        }
    }
}

pub struct Saved {
    pub tensors: Vec<(String, Vec<f32>, Vec<usize>)>,
    pub position: Position,
}

pub fn save(file: &Path, tensors: &[(String, Vec<f32>, Vec<usize>)], pos: &Position) -> Result<()> {
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, v, _)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let mut views = Vec::with_capacity(tensors.len());
    for ((name, _, shape), b) in tensors.iter().zip(&bytes) {
        let view = TensorView::new(Dtype::F32, shape.clone(), b)
            .map_err(|e| anyhow::anyhow!("checkpoint tensor {name}: {e:?}"))?;
        views.push((name.clone(), view));
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| tensors[a].0.cmp(&tensors[b].0));
    let crc = checksum(
        order
            .iter()
            .map(|&i| (tensors[i].0.as_str(), &bytes[i][..])),
    );
    let meta: HashMap<String, String> = [
        (CRC_KEY, format!("{crc:08x}")),
        ("step", pos.step.to_string()),
        ("epoch", pos.epoch.to_string()),
        ("bytes_sent", pos.bytes_sent.to_string()),
        ("bytes_received", pos.bytes_received.to_string()),
        ("message_bytes", pos.message_bytes.to_string()),
        ("dense_message_bytes", pos.dense_message_bytes.to_string()),
        ("wall_seconds", pos.wall_seconds.to_string()),
        ("eval_seconds", pos.eval_seconds.to_string()),
        ("world", pos.world.to_string()),
        ("per_epoch", pos.per_epoch.to_string()),
        ("batch_size", pos.batch_size.to_string()),
        ("train_len", pos.train_len.to_string()),
        ("loss", pos.loss.to_string()),
        (
            "log_window",
            pos.log_window
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let out = safetensors::serialize(views, &Some(meta))
        .map_err(|e| anyhow::anyhow!("serialising the checkpoint: {e:?}"))?;
    crate::metrics::write_atomic(file, &out)
}

/// The metadata key of the tensors' checksum.
const CRC_KEY: &str = "crc32";

/// CRC-32 of `(name, little-endian f32 bytes)` pairs in the order given (name order).
fn checksum<'a>(tensors: impl Iterator<Item = (&'a str, &'a [u8])>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for (name, data) in tensors {
        // Lengths first, so that moving bytes between a name and its data changes it.
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(&(data.len() as u64).to_le_bytes());
        h.update(data);
    }
    h.finalize()
}

pub fn load(file: &Path) -> Result<Saved> {
    let bytes = std::fs::read(file)
        .with_context(|| format!("reading the checkpoint {}", file.display()))?;
    parse(file, &bytes)
}

/// What a resume finds at a checkpoint's path.
pub enum Found {
    Missing,
    Intact(Position),
    /// Unreadable as a checkpoint (why): its CRC does not match, or it is not a
    /// safetensors file with a training position.
    Damaged(String),
}

/// Reads `file` whole and checks it as [`load`] does; an I/O error other than a missing
/// file (permissions, a failing disk) is an error, not damage.
pub fn inspect(file: &Path) -> Result<Found> {
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => {
            return Err(e).with_context(|| format!("reading the checkpoint {}", file.display()))
        }
    };
    Ok(match parse(file, &bytes) {
        Ok(saved) => Found::Intact(saved.position),
        Err(e) => Found::Damaged(format!("{e:#}")),
    })
}

/// Renames a damaged checkpoint out of the way, to `{name}.damaged` (`.damaged-2`, … if
/// taken): kept, not deleted, for whoever wants to look at it. Returns the new path.
pub fn set_aside(file: &Path) -> Result<PathBuf> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let to = (1..)
        .map(|i| {
            let suffix = if i == 1 {
                ".damaged".to_string()
            } else {
                format!(".damaged-{i}")
            };
            file.with_file_name(format!("{name}{suffix}"))
        })
        .find(|p| !p.exists())
        .context("no free name to set a damaged checkpoint aside")?;
    std::fs::rename(file, &to)
        .with_context(|| format!("setting the damaged {} aside", file.display()))?;
    Ok(to)
}

fn parse(file: &Path, bytes: &[u8]) -> Result<Saved> {
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| {
        anyhow::anyhow!("{} is not a valid safetensors file: {e:?}", file.display())
    })?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e:?}", file.display()))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    let position = position_from(file, &meta)?;
    // In name order: the checksum's, and the order `tensors` is returned in.
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(want) = meta.get(CRC_KEY) {
        let got = checksum(views.iter().map(|(n, v)| (n.as_str(), v.data())));
        if format!("{got:08x}") != *want {
            bail!(
                "{} is damaged: its tensors' CRC-32 is {got:08x}, it was written as {want} (--resume sets a damaged checkpoint aside and continues from the newest generation every rank holds intact)",
                file.display()
            );
        }
    }
    let mut tensors = Vec::new();
    for (name, view) in views {
        if view.dtype() != Dtype::F32 {
            bail!(
                "{}: tensor {name} is {:?}, expected F32",
                file.display(),
                view.dtype()
            );
        }
        let data: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        tensors.push((name, data, view.shape().to_vec()));
    }
    Ok(Saved { tensors, position })
}

fn position_from(file: &Path, m: &HashMap<String, String>) -> Result<Position> {
    let num = |k: &str| -> Result<f64> {
        m.get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("{}: metadata '{k}' missing or not a number", file.display()))
    };
    // Recorded since later versions; older checkpoints read as 0, "unknown".
    let recorded = |k: &str| -> usize { m.get(k).and_then(|v| v.parse().ok()).unwrap_or(0) };
    Ok(Position {
        step: num("step")? as usize,
        epoch: num("epoch")? as usize,
        bytes_sent: num("bytes_sent")? as u64,
        bytes_received: num("bytes_received")? as u64,
        message_bytes: num("message_bytes")? as u64,
        dense_message_bytes: num("dense_message_bytes")? as u64,
        wall_seconds: num("wall_seconds")?,
        eval_seconds: m
            .get("eval_seconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        world: recorded("world"),
        per_epoch: recorded("per_epoch"),
        batch_size: recorded("batch_size"),
        train_len: recorded("train_len"),
        loss: m
            .get("loss")
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN),
        log_window: m
            .get("log_window")
            .filter(|v| !v.is_empty())
            .map(|v| v.split(',').map(|x| x.parse::<f64>()).collect())
            .transpose()
            .ok()
            .flatten()
            .unwrap_or_default(),
    })
}

/// Where a checkpoint stands, from its header alone (`None`: no such file), so that the
/// ranks can agree on a generation before any of them reads a whole model.
pub fn read_position(file: &Path) -> Result<Option<Position>> {
    use std::io::Read;
    let mut f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("opening {}", file.display())),
    };
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .with_context(|| format!("{}: too short for a safetensors header", file.display()))?;
    let n = u64::from_le_bytes(len);
    // safetensors' own limit on the JSON header.
    const MAX_HEADER: u64 = 100_000_000;
    if n > MAX_HEADER {
        bail!(
            "{}: a {n}-byte header is not a safetensors file's",
            file.display()
        );
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header)
        .with_context(|| format!("{}: truncated header", file.display()))?;
    let json: serde_json::Value = serde_json::from_slice(&header)
        .with_context(|| format!("{}: the header is not JSON", file.display()))?;
    let m: HashMap<String, String> = json
        .get("__metadata__")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .with_context(|| format!("{}: no training position in the header", file.display()))?;
    position_from(file, &m).map(Some)
}

/// A saved tensor by name, checked against the shape the model expects.
pub fn take(saved: &Saved, name: &str, shape: &[usize]) -> Result<Tensor> {
    let (_, data, s) = saved
        .tensors
        .iter()
        .find(|(n, _, _)| n == name)
        .with_context(|| {
            format!("the checkpoint has no tensor '{name}' (was it written by another model?)")
        })?;
    if s != shape {
        bail!("checkpoint tensor '{name}' has shape {s:?}, the model expects {shape:?}");
    }
    Ok(Tensor::from_vec(data.clone(), shape.to_vec(), Device::Cpu)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(String, Vec<f32>, Vec<usize>)> {
        vec![
            ("param/b".into(), vec![1.0, -2.5, 3.25], vec![3]),
            ("param/a".into(), vec![0.5; 8], vec![2, 4]),
        ]
    }

    /// A byte changed in any tensor's data after the save is refused on load, naming the
    /// file; the untouched file loads with every value.
    #[test]
    fn a_damaged_checkpoint_is_refused() {
        let dir = std::env::temp_dir().join(format!("gradex-ckpt-crc-{}", std::process::id()));
        let file = dir.join("rank0.safetensors");
        save(&file, &sample(), &Position::default()).unwrap();
        let saved = load(&file).unwrap();
        assert_eq!(saved.tensors[0].0, "param/a");
        assert_eq!(saved.tensors[1].1, vec![1.0, -2.5, 3.25]);
        let good = std::fs::read(&file).unwrap();
        // The data section is the file's tail (after the 8-byte length and the header):
        // flip one bit in each of its 44 bytes in turn.
        let data_len = 4 * (3 + 8);
        for at in good.len() - data_len..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            std::fs::write(&file, &bad).unwrap();
            let e = format!("{:#}", load(&file).err().expect("a damaged file must fail"));
            assert!(
                e.contains("is damaged") && e.contains("rank0.safetensors"),
                "{e}"
            );
            assert!(matches!(inspect(&file).unwrap(), Found::Damaged(_)));
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn inspect_tells_missing_intact_and_damaged_and_damage_is_set_aside_not_deleted() {
        let dir = std::env::temp_dir().join(format!("gradex-ckpt-aside-{}", std::process::id()));
        let file = dir.join("rank0.safetensors");
        assert!(matches!(inspect(&file).unwrap(), Found::Missing));
        let pos = Position {
            step: 7,
            ..Position::default()
        };
        save(&file, &sample(), &pos).unwrap();
        assert!(matches!(inspect(&file).unwrap(), Found::Intact(p) if p.step == 7));
        for (k, want) in [
            (1, "rank0.safetensors.damaged"),
            (2, "rank0.safetensors.damaged-2"),
        ] {
            std::fs::write(&file, format!("not a checkpoint {k}")).unwrap();
            let Found::Damaged(why) = inspect(&file).unwrap() else {
                panic!("garbage must read as damaged")
            };
            assert!(why.contains("rank0.safetensors"), "{why}");
            let to = set_aside(&file).unwrap();
            assert_eq!(to, dir.join(want));
            assert!(!file.exists());
            assert_eq!(
                std::fs::read_to_string(&to).unwrap(),
                format!("not a checkpoint {k}")
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
