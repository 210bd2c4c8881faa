//! Checkpoints: one safetensors file per rank (`checkpoint/rank{r}.safetensors`) with
//! the parameters and buffers under their PyTorch-style names (`param/…`, `buffer/…`),
//! the optimizer's momentum (`optim/{index}`), the method's state (`method/…`:
//! residuals, momenta, random-stream state) and, as metadata, where training stands.
//! Written atomically, so a worker killed mid-write leaves the previous checkpoint.
//! Resuming restores every piece, and training continues bit for bit (tested).

use anyhow::{bail, Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tensor::{Device, Tensor};

pub fn path(dir: &Path, rank: usize) -> PathBuf {
    dir.join("checkpoint")
        .join(format!("rank{rank}.safetensors"))
}

/// Where training stands, stored as metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Position {
    pub step: usize,
    pub epoch: usize,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub message_bytes: u64,
    pub dense_message_bytes: u64,
    pub wall_seconds: f64,
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
    let meta: HashMap<String, String> = [
        ("step", pos.step.to_string()),
        ("epoch", pos.epoch.to_string()),
        ("bytes_sent", pos.bytes_sent.to_string()),
        ("bytes_received", pos.bytes_received.to_string()),
        ("message_bytes", pos.message_bytes.to_string()),
        ("dense_message_bytes", pos.dense_message_bytes.to_string()),
        ("wall_seconds", pos.wall_seconds.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let out = safetensors::serialize(views, &Some(meta))
        .map_err(|e| anyhow::anyhow!("serialising the checkpoint: {e:?}"))?;
    crate::metrics::write_atomic(file, &out)
}

pub fn load(file: &Path) -> Result<Saved> {
    let bytes = std::fs::read(file)
        .with_context(|| format!("reading the checkpoint {}", file.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
        anyhow::anyhow!("{} is not a valid safetensors file: {e:?}", file.display())
    })?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e:?}", file.display()))?;
    let m = meta.metadata().clone().unwrap_or_default();
    let num = |k: &str| -> Result<f64> {
        m.get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("{}: metadata '{k}' missing or not a number", file.display()))
    };
    let position = Position {
        step: num("step")? as usize,
        epoch: num("epoch")? as usize,
        bytes_sent: num("bytes_sent")? as u64,
        bytes_received: num("bytes_received")? as u64,
        message_bytes: num("message_bytes")? as u64,
        dense_message_bytes: num("dense_message_bytes")? as u64,
        wall_seconds: num("wall_seconds")?,
    };
    let mut tensors = Vec::new();
    for (name, view) in st.tensors() {
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
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Saved { tensors, position })
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
