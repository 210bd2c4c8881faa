//! WAV input: any PCM or float mono file, resampled to 16 kHz when it is not already.
//!
//! The header is checked before any sample is read: hound accepts a sample rate of 0 (when
//! the byte rate is 0 too) and any valid-bits count in an EXTENSIBLE header, which would
//! make the resampler's ratio infinite or the integer scale overflow, and a 1 Hz file
//! would resample to 16 000 outputs per input sample. So the rate must lie in
//! [`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`], the sample format be one we decode, the
//! duration at most [`MAX_SECONDS`], which bounds the output's length, and the input at
//! most [`MAX_INPUT_SAMPLES`], which bounds what is read.

use super::spectrogram::SAMPLE_RATE;
use crate::error::{DataError, Result};
use std::path::Path;

/// The lowest sample rate accepted (Hz). Speech below 8 kHz telephone quality is rare;
/// 1 kHz leaves room for odd recordings while keeping upsampling to 16 kHz at most 16x.
pub const MIN_SAMPLE_RATE: u32 = 1_000;
/// The highest sample rate accepted (Hz): 384 kHz, the highest rate audio hardware and
/// formats commonly use (8 x 48 kHz).
pub const MAX_SAMPLE_RATE: u32 = 384_000;
/// The longest file accepted, in seconds. Training utterances last seconds (LibriSpeech's
/// at most 35 s); an hour at 16 kHz is 57.6 M samples (230 MB of f32) of output.
pub const MAX_SECONDS: u32 = 3_600;
/// The most input samples accepted: an hour at 48 kHz (691 MB of f32 while it is
/// resampled). The duration alone would let an hour at 384 kHz through, 1.38 G samples
/// (5.5 GB), so a file at a high rate is held to fewer seconds (450 s at 384 kHz).
pub const MAX_INPUT_SAMPLES: u64 = MAX_SECONDS as u64 * 48_000;

/// Samples in [-1, 1] at 16 kHz.
pub fn read_wav_16k(path: &Path) -> Result<Vec<f32>> {
    let mut reader = hound::WavReader::open(path).map_err(|e| match e {
        // Missing is not damaged: the caller may have an install hint for it. Other
        // I/O errors of hound's (an end of file inside the header) are damage.
        hound::Error::IoError(io) if io.kind() == std::io::ErrorKind::NotFound => {
            DataError::io(path, io)
        }
        e => DataError::format(path, format!("not a readable WAV file: {e}")),
    })?;
    let spec = reader.spec();
    if spec.channels != 1 {
        return Err(DataError::format(
            path,
            format!("{} channels: only mono audio is supported", spec.channels),
        ));
    }
    if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&spec.sample_rate) {
        return Err(DataError::format(
            path,
            format!(
                "sample rate {} Hz is outside the supported {MIN_SAMPLE_RATE}..={MAX_SAMPLE_RATE} Hz \
                 (corrupt header?)",
                spec.sample_rate
            ),
        ));
    }
    // What hound decodes: integers of 8, 16, 24 or 32 bits, and 32-bit floats.
    let supported = match spec.sample_format {
        hound::SampleFormat::Int => matches!(spec.bits_per_sample, 8 | 16 | 24 | 32),
        hound::SampleFormat::Float => spec.bits_per_sample == 32,
    };
    if !supported {
        return Err(DataError::format(
            path,
            format!(
                "{}-bit {} samples are not supported (integers of 8, 16, 24 or 32 bits, \
                 or 32-bit floats)",
                spec.bits_per_sample,
                match spec.sample_format {
                    hound::SampleFormat::Int => "integer",
                    hound::SampleFormat::Float => "float",
                }
            ),
        ));
    }
    // Mono, so the header's sample count is the duration in samples.
    if reader.duration() as u64 > MAX_INPUT_SAMPLES {
        return Err(DataError::format(
            path,
            format!(
                "{} samples at {} Hz is more than the {MAX_INPUT_SAMPLES} input samples \
                 supported (an hour at 48 kHz)",
                reader.duration(),
                spec.sample_rate
            ),
        ));
    }
    if reader.duration() as u64 > MAX_SECONDS as u64 * spec.sample_rate as u64 {
        return Err(DataError::format(
            path,
            format!(
                "{} samples at {} Hz is longer than the {MAX_SECONDS} s supported",
                reader.duration(),
                spec.sample_rate
            ),
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
/// alias. The output has `x.len() · to / from` samples (rounded): callers bound the ratio
/// (`read_wav_16k` checks the file's rate).
///
/// # Panics
/// If either rate is 0: there is no such resampling (the ratio would be infinite or 0).
pub fn resample(x: &[f32], from: u32, to: u32) -> Vec<f32> {
    assert!(
        from > 0 && to > 0,
        "resample: sample rates must be positive, got {from} -> {to} Hz"
    );
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
