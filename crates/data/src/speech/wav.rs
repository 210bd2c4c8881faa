//! WAV input: any PCM or float mono file, resampled to 16 kHz when it is not already.

use super::spectrogram::SAMPLE_RATE;
use crate::error::{DataError, Result};
use std::path::Path;

/// Samples in [-1, 1] at 16 kHz.
pub fn read_wav_16k(path: &Path) -> Result<Vec<f32>> {
    let mut reader = hound::WavReader::open(path)
        .map_err(|e| DataError::format(path, format!("not a readable WAV file: {e}")))?;
    let spec = reader.spec();
    if spec.channels != 1 {
        return Err(DataError::format(
            path,
            format!("{} channels: only mono audio is supported", spec.channels),
        ));
    }
    let samples: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            reader
                .samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<std::result::Result<_, _>>()
        }
        hound::SampleFormat::Float => reader
            .samples::<f32>()
            .collect::<std::result::Result<_, _>>(),
    }
    .map_err(|e| DataError::format(path, format!("corrupt or truncated samples: {e}")))?;
    Ok(if spec.sample_rate == SAMPLE_RATE {
        samples
    } else {
        resample(&samples, spec.sample_rate, SAMPLE_RATE)
    })
}

/// Band-limited resampling: a windowed-sinc interpolator (Hann window, 16 zero crossings
/// each side) with its cut-off at the lower Nyquist frequency, so downsampling does not
/// alias.
pub fn resample(x: &[f32], from: u32, to: u32) -> Vec<f32> {
    if from == to || x.is_empty() {
        return x.to_vec();
    }
    let ratio = to as f64 / from as f64;
    let cutoff = ratio.min(1.0);
    let half = 16.0 / cutoff;
    let n_out = (x.len() as f64 * ratio).round() as usize;
    (0..n_out)
        .map(|i| {
            let t = i as f64 / ratio; // position in input samples
            let (lo, hi) = (
                (t - half).ceil().max(0.0) as usize,
                ((t + half).floor() as usize).min(x.len() - 1),
            );
            let mut acc = 0.0;
            for (j, &xj) in x.iter().enumerate().take(hi + 1).skip(lo) {
                let d = j as f64 - t;
                let arg = d * cutoff;
                let sinc = if arg.abs() < 1e-9 {
                    1.0
                } else {
                    (std::f64::consts::PI * arg).sin() / (std::f64::consts::PI * arg)
                };
                let window = 0.5 * (1.0 + (std::f64::consts::PI * d / half).cos());
                acc += xj as f64 * cutoff * sinc * window;
            }
            acc as f32
        })
        .collect()
}
