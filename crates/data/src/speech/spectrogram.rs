//! DeepSpeech's features: |STFT| with a 320-sample (20 ms) Hamming window and a 160-sample
//! (10 ms) hop at 16 kHz, log(1 + magnitude), then per-utterance mean/std normalisation
//! (as deepspeech.pytorch). Output `[161, frames]`.

use realfft::RealFftPlanner;

pub const SAMPLE_RATE: u32 = 16_000;
pub const WINDOW: usize = 320;
pub const HOP: usize = 160;

/// `[bins = 161][frames]` row-major, frames = 1 + (len − WINDOW) / HOP (at least 1; short
/// input is zero-padded to one window).
pub fn log_spectrogram(samples: &[f32]) -> (Vec<f32>, usize) {
    let bins = WINDOW / 2 + 1;
    let frames = if samples.len() <= WINDOW {
        1
    } else {
        1 + (samples.len() - WINDOW) / HOP
    };
    let window: Vec<f32> = (0..WINDOW)
        .map(|i| 0.54 - 0.46 * (2.0 * std::f32::consts::PI * i as f32 / (WINDOW - 1) as f32).cos())
        .collect();
    let fft = RealFftPlanner::<f32>::new().plan_fft_forward(WINDOW);
    let mut input = fft.make_input_vec();
    let mut spectrum = fft.make_output_vec();
    let mut out = vec![0f32; bins * frames];
    for f in 0..frames {
        for (i, v) in input.iter_mut().enumerate() {
            *v = samples.get(f * HOP + i).copied().unwrap_or(0.0) * window[i];
        }
        // Lengths are fixed by the planner, so this cannot fail.
        if fft.process(&mut input, &mut spectrum).is_err() {
            continue;
        }
        for (b, c) in spectrum.iter().enumerate() {
            out[b * frames + f] = (1.0 + c.norm()).ln();
        }
    }
    let n = out.len() as f32;
    let mean = out.iter().sum::<f32>() / n;
    let std = (out.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n)
        .sqrt()
        .max(1e-6);
    out.iter_mut().for_each(|v| *v = (*v - mean) / std);
    (out, frames)
}
