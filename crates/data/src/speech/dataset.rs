//! A speech dataset read from a manifest: features are computed once at load time (the
//! corpora here are small), batches are zero-padded to their longest utterance.

use super::{alphabet, log_spectrogram, read_wav_16k};
use crate::error::{read_text, DataError, Result};
use crate::loader::{Batch, Dataset};
use std::path::Path;
use tensor::{Device, Rng, Tensor};

pub struct SpeechDataset {
    /// Per utterance: `[161][frames]` features and the frame count.
    features: Vec<(Vec<f32>, usize)>,
    pub transcripts: Vec<String>,
    labels: Vec<Vec<u32>>,
}

impl SpeechDataset {
    pub fn load(manifest: &Path) -> Result<Self> {
        let base = manifest.parent().unwrap_or(Path::new("."));
        let text = read_text(manifest)?;
        let (mut features, mut transcripts, mut labels) = (Vec::new(), Vec::new(), Vec::new());
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let (wav, txt) = line.split_once(',').ok_or_else(|| {
                DataError::format(
                    manifest,
                    format!("line {}: expected `wav_path,transcript_path`", i + 1),
                )
            })?;
            // A file the manifest lists but that is not there leaves the corpus damaged
            // (the manifest is present): said against the manifest's line, not as a
            // missing corpus, which a reader would answer with an install hint.
            let listed = |e: DataError| {
                if e.is_missing() {
                    DataError::format(
                        manifest,
                        format!("line {}: {e}: listed, but not there", i + 1),
                    )
                } else {
                    e
                }
            };
            let samples = read_wav_16k(&base.join(wav.trim())).map_err(listed)?;
            let tpath = base.join(txt.trim());
            let transcript = read_text(&tpath).map_err(listed)?.trim().to_string();
            let ids = alphabet::encode(&transcript)
                .map_err(|e| DataError::format(&tpath, e.to_string()))?;
            features.push(log_spectrogram(&samples));
            transcripts.push(transcript);
            labels.push(ids);
        }
        if features.is_empty() {
            return Err(DataError::format(manifest, "no utterances listed"));
        }
        Ok(SpeechDataset {
            features,
            transcripts,
            labels,
        })
    }
    pub fn frames(&self, i: usize) -> usize {
        self.features[i].1
    }
    pub fn labels(&self, i: usize) -> &[u32] {
        &self.labels[i]
    }
}

impl Dataset for SpeechDataset {
    fn len(&self) -> usize {
        self.features.len()
    }
    /// Inputs `[N, 1, 161, T_max]`, labels concatenated (U32), with per-sample lengths.
    fn batch(&self, indices: &[usize], _rng: &mut Rng) -> Result<Batch> {
        let bins = super::WINDOW / 2 + 1;
        let t_max = indices
            .iter()
            .map(|&i| self.features.get(i).map_or(0, |f| f.1))
            .max()
            .unwrap_or(0);
        let mut x = vec![0f32; indices.len() * bins * t_max];
        let (mut labels, mut input_lengths, mut label_lengths): (Vec<u32>, Vec<usize>, Vec<usize>) =
            (Vec::new(), Vec::new(), Vec::new());
        for (n, &i) in indices.iter().enumerate() {
            let (feat, frames) = self.features.get(i).ok_or_else(|| {
                DataError::Msg(format!("utterance {i} out of range for {}", self.len()))
            })?;
            for b in 0..bins {
                let dst = (n * bins + b) * t_max;
                x[dst..dst + frames].copy_from_slice(&feat[b * frames..(b + 1) * frames]);
            }
            labels.extend(&self.labels[i]);
            input_lengths.push(*frames);
            label_lengths.push(self.labels[i].len());
        }
        let n = indices.len();
        let total = labels.len();
        Ok(Batch {
            inputs: Tensor::from_vec(x, vec![n, 1, bins, t_max], Device::Cpu)?,
            labels: Tensor::from_vec(labels, total, Device::Cpu)?,
            input_lengths,
            label_lengths,
        })
    }
}
