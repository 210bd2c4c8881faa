//! Speech features and the espeak-ng corpus.

use data::prepare::{prepare_speech, SpeechOptions};
use data::speech::{
    decode, encode, log_spectrogram, read_wav_16k, resample, SpeechDataset, ALPHABET,
};
use data::Dataset;
use std::f32::consts::PI;
use tensor::Rng;

/// Tests that need a Debian package run when it is installed; with REQUIRE_SYSTEM_DATA=1
/// (set by CI, which installs the packages) a missing package is a failure, not a skip.
pub fn system_tool_available(program: &str, package: &str) -> bool {
    let ok = std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("REQUIRE_SYSTEM_DATA").is_err(),
            "{program} is required: apt-get install {package}"
        );
        eprintln!("skipped: {program} not installed (apt-get install {package})");
    }
    ok
}

#[test]
fn transcripts_round_trip_through_the_alphabet() {
    assert_eq!(ALPHABET.len(), 29);
    let ids = encode("enter SIX, ").unwrap_err();
    assert!(ids.to_string().contains("','"), "{ids}");
    let ids = encode("ENTER SIX").unwrap();
    assert!(ids.iter().all(|&i| (1..29).contains(&i)));
    assert_eq!(decode(&ids), "ENTER SIX");
    assert_eq!(decode(&encode("don't").unwrap()), "DON'T");
}

#[test]
fn a_tone_peaks_in_its_frequency_bin() {
    // 1 kHz at 16 kHz with a 320-point FFT: bin 1000 / 16000 · 320 = 20.
    let x: Vec<f32> = (0..16_000)
        .map(|i| (2.0 * PI * 1000.0 * i as f32 / 16_000.0).sin())
        .collect();
    let (spec, frames) = log_spectrogram(&x);
    assert_eq!(frames, 1 + (16_000 - 320) / 160);
    let bin_energy = |b: usize| spec[b * frames..(b + 1) * frames].iter().sum::<f32>();
    let peak = (0..161)
        .max_by(|&a, &b| bin_energy(a).total_cmp(&bin_energy(b)))
        .unwrap();
    assert_eq!(peak, 20);
}

#[test]
fn resampling_keeps_a_sine() {
    let from = 22_050;
    let x: Vec<f32> = (0..22_050)
        .map(|i| (2.0 * PI * 440.0 * i as f32 / from as f32).sin())
        .collect();
    let y = resample(&x, from, 16_000);
    assert_eq!(y.len(), 16_000);
    // Away from the edges the result is the same sine sampled at 16 kHz.
    let err = (1000..15_000)
        .map(|i| (y[i] - (2.0 * PI * 440.0 * i as f32 / 16_000.0).sin()).abs())
        .fold(0.0, f32::max);
    assert!(err < 0.01, "max error {err}");
}

#[test]
fn a_corrupt_wav_is_a_named_error() {
    let p = std::env::temp_dir().join(format!("bad-{}.wav", std::process::id()));
    std::fs::write(&p, b"RIFF1234WAVEnot really").unwrap();
    let e = read_wav_16k(&p).unwrap_err().to_string();
    assert!(e.contains(&p.display().to_string()), "{e}");
}

#[test]
fn espeak_corpus_is_deterministic_and_loads() {
    if !system_tool_available("espeak-ng", "espeak-ng") {
        return;
    }
    let out = std::env::temp_dir().join(format!("speech-test-{}", std::process::id()));
    let opts = SpeechOptions {
        train: 6,
        test: 2,
        seed: 3,
        snr_db: Some(20.0),
    };
    prepare_speech(&out, &opts).unwrap();
    let train = SpeechDataset::load(&out.join("train_manifest.csv")).unwrap();
    let test = SpeechDataset::load(&out.join("test_manifest.csv")).unwrap();
    assert_eq!((train.len(), test.len()), (6, 2));
    for i in 0..train.len() {
        assert_eq!(
            decode(train.labels(i)),
            train.transcripts[i],
            "transcripts round-trip"
        );
        assert!(
            train.frames(i) > 50,
            "utterance {i} has {} frames",
            train.frames(i)
        );
    }
    let b = train.batch(&[0, 1, 2], &mut Rng::new(0)).unwrap();
    assert_eq!(b.inputs.dims()[..3], [3, 1, 161]);
    assert_eq!(b.inputs.dims()[3], *b.input_lengths.iter().max().unwrap());
    assert_eq!(b.labels.elem_count(), b.label_lengths.iter().sum::<usize>());
    // Same seed, same transcripts.
    let again = std::env::temp_dir().join(format!("speech-test-b-{}", std::process::id()));
    prepare_speech(&again, &opts).unwrap();
    let t2 = SpeechDataset::load(&again.join("train_manifest.csv")).unwrap();
    assert_eq!(t2.transcripts, train.transcripts);
}
