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

/// A mono 16-bit WAV written by hand, so that the header can say what hound accepts but
/// no real file would: `valid_bits` makes it WAVE_FORMAT_EXTENSIBLE with that many valid
/// bits per sample; `claimed` overrides the data chunk's length (the file then holds
/// fewer samples than it says).
fn wav_bytes(rate: u32, valid_bits: Option<u16>, samples: &[i16], claimed: Option<u32>) -> Vec<u8> {
    let data_len = claimed.unwrap_or(2 * samples.len() as u32);
    let fmt_len: u32 = if valid_bits.is_some() { 40 } else { 16 };
    let mut v = Vec::new();
    v.extend(b"RIFF");
    v.extend((4 + 8 + fmt_len + 8 + data_len).to_le_bytes());
    v.extend(b"WAVEfmt ");
    v.extend(fmt_len.to_le_bytes());
    v.extend(if valid_bits.is_some() { 0xfffeu16 } else { 1 }.to_le_bytes());
    v.extend(1u16.to_le_bytes()); // channels
    v.extend(rate.to_le_bytes());
    v.extend((2 * rate).to_le_bytes()); // byte rate: hound checks it against the rate
    v.extend(2u16.to_le_bytes()); // block align
    v.extend(16u16.to_le_bytes()); // bits per sample (the container)
    if let Some(bits) = valid_bits {
        v.extend(22u16.to_le_bytes()); // cbSize
        v.extend(bits.to_le_bytes());
        v.extend(0u32.to_le_bytes()); // channel mask
                                      // KSDATAFORMAT_SUBTYPE_PCM
        v.extend([
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38,
            0x9b, 0x71,
        ]);
    }
    v.extend(b"data");
    v.extend(data_len.to_le_bytes());
    for s in samples {
        v.extend(s.to_le_bytes());
    }
    v
}

fn read_wav_bytes(name: &str, bytes: &[u8]) -> (std::path::PathBuf, data::Result<Vec<f32>>) {
    let p = std::env::temp_dir().join(format!("{name}-{}.wav", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    let r = read_wav_16k(&p);
    (p, r)
}

/// Headers hound accepts but we cannot (or should not) decode are named errors: a rate of
/// 0 made the resampling ratio infinite (a capacity-overflow panic), 1 Hz asked for 16 000
/// outputs per sample, 65 valid bits overflowed the integer scale's shift, and a header
/// claiming hours of audio would be read and resampled whole.
#[test]
fn implausible_wav_headers_are_named_errors() {
    let tone: Vec<i16> = (0..800).map(|i| ((i % 40) * 500 - 10_000) as i16).collect();
    let cases = [
        ("rate0", wav_bytes(0, None, &tone, None), "sample rate 0 Hz"),
        ("rate1", wav_bytes(1, None, &tone, None), "sample rate 1 Hz"),
        (
            "rate999",
            wav_bytes(999, None, &tone, None),
            "1000..=384000",
        ),
        (
            "rate-huge",
            wav_bytes(1_000_000, None, &tone, None),
            "sample rate 1000000 Hz",
        ),
        (
            "bits65",
            wav_bytes(16_000, Some(65), &tone, None),
            "65-bit integer",
        ),
        (
            "bits12",
            wav_bytes(16_000, Some(12), &tone, None),
            "12-bit integer",
        ),
        (
            "too-long",
            wav_bytes(8_000, None, &tone, Some(2 * 8_000 * 3_601)),
            "longer than the 3600 s",
        ),
        // Under an hour at 384 kHz, but 1.3 G samples to read: held to an hour at 48 kHz.
        (
            "too-many-samples",
            wav_bytes(384_000, None, &tone, Some(2 * 384_000 * 3_500)),
            "more than the 172800000 input samples",
        ),
    ];
    for (name, bytes, want) in cases {
        let (p, r) = read_wav_bytes(name, &bytes);
        let e = match r {
            Ok(s) => panic!("{name}: read {} samples, expected an error", s.len()),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains(&p.display().to_string()) && e.contains(want),
            "{name}: {e}"
        );
    }
    // The same samples under sane headers read: 8 kHz doubles, 16 kHz (also as
    // EXTENSIBLE with 16 valid bits) is as is.
    let (_, r) = read_wav_bytes("rate8k", &wav_bytes(8_000, None, &tone, None));
    assert_eq!(r.unwrap().len(), 1600);
    for (name, valid) in [("rate16k", None), ("ext16", Some(16))] {
        let (_, r) = read_wav_bytes(name, &wav_bytes(16_000, valid, &tone, None));
        let s = r.unwrap();
        assert_eq!(s.len(), 800, "{name}");
        assert_eq!(s[1], (500.0 - 10_000.0) / 32_768.0, "{name}");
    }
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

/// A manifest that lists a file that is not there is a damaged corpus (named against the
/// manifest's line), not a missing one: a caller must not answer it with an install hint.
#[test]
fn a_listed_file_that_is_missing_is_damage_in_the_manifest() {
    let dir = std::env::temp_dir().join(format!("speech-listed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = dir.join("train_manifest.csv");
    std::fs::write(&manifest, "a.wav,a.txt\n").unwrap();
    let e = data::speech::SpeechDataset::load(&manifest)
        .err()
        .expect("an error");
    assert!(!e.is_missing(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("train_manifest.csv: line 1:") && text.contains("listed, but not there"),
        "{text}"
    );
    let missing = data::speech::SpeechDataset::load(&dir.join("nonexistent.csv"))
        .err()
        .expect("an error");
    assert!(missing.is_missing(), "{missing}");
    let _ = std::fs::remove_dir_all(&dir);
}
