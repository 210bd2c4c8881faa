//! An AN4-like spoken alphanumeric corpus synthesised with espeak-ng (Debian's
//! `espeak-ng`): utterances of 3–7 tokens drawn from spelled letters, digit words and
//! short command words ("ENTER", "RUBOUT", …), each spoken by a voice (an espeak-ng accent
//! plus a voice variant) at a random speed and pitch, resampled to 16 kHz, with white
//! noise added at a chosen signal-to-noise ratio. Training and test voices are disjoint
//! (different accents and different variants), so the test set measures generalisation
//! to unseen speakers. Every utterance is a function of (seed, split, index) only, so a
//! seed reproduces the corpus whatever the generation order.
//!
//! Layout: `{train,test}/NNNNNN.wav` (16 kHz, 16-bit mono), `NNNNNN.txt` (transcript),
//! and `train_manifest.csv` / `test_manifest.csv` (`wav,txt` per line).

use crate::error::{DataError, Result};
use crate::speech::{encode, read_wav_16k, SAMPLE_RATE};
use std::path::Path;
use std::process::Command;
use tensor::Rng;

const LETTERS: [(&str, &str); 26] = [
    ("A", "ay"),
    ("B", "bee"),
    ("C", "see"),
    ("D", "dee"),
    ("E", "ee"),
    ("F", "eff"),
    ("G", "jee"),
    ("H", "aitch"),
    ("I", "eye"),
    ("J", "jay"),
    ("K", "kay"),
    ("L", "ell"),
    ("M", "em"),
    ("N", "en"),
    ("O", "oh"),
    ("P", "pee"),
    ("Q", "queue"),
    ("R", "are"),
    ("S", "ess"),
    ("T", "tee"),
    ("U", "you"),
    ("V", "vee"),
    ("W", "double you"),
    ("X", "ex"),
    ("Y", "why"),
    ("Z", "zed"),
];
/// AN4's command words, less its "OH" (zero): spoken "oh", it sounds as the letter O
/// does, and with tokens drawn independently the same audio would carry either label.
const WORDS: [&str; 20] = [
    "ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE", "ENTER",
    "ERASE", "RUBOUT", "STOP", "START", "YES", "NO", "GO", "REPEAT", "HELP",
];
const TRAIN_ACCENTS: [&str; 5] = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029"];
const TRAIN_VARIANTS: [&str; 8] = ["m1", "m2", "m3", "m4", "f1", "f2", "f3", "klatt"];
const TEST_ACCENTS: [&str; 3] = ["en-us-nyc", "en-gb-x-gbclan", "en-gb-x-gbcwmd"];
const TEST_VARIANTS: [&str; 4] = ["m5", "m6", "f4", "klatt2"];

pub struct SpeechOptions {
    pub train: usize,
    pub test: usize,
    pub seed: u64,
    /// Signal-to-noise ratio of the added white noise, in dB (None: no noise).
    pub snr_db: Option<f64>,
}

/// One utterance: (transcript, text to speak, voice, speed, pitch).
fn utterance(rng: &mut Rng, test: bool) -> (String, String, String, usize, usize) {
    let (mut transcript, mut spoken) = (Vec::new(), Vec::new());
    for _ in 0..3 + rng.below(5) {
        if rng.below(2) == 0 {
            let (l, name) = LETTERS[rng.below(26)];
            transcript.push(l.to_string());
            spoken.push(name.to_string());
        } else {
            let w = WORDS[rng.below(WORDS.len())];
            transcript.push(w.to_string());
            spoken.push(w.to_lowercase());
        }
    }
    let (accents, variants): (&[&str], &[&str]) = if test {
        (&TEST_ACCENTS, &TEST_VARIANTS)
    } else {
        (&TRAIN_ACCENTS, &TRAIN_VARIANTS)
    };
    let voice = format!(
        "{}+{}",
        accents[rng.below(accents.len())],
        variants[rng.below(variants.len())]
    );
    (
        transcript.join(" "),
        spoken.join(", "),
        voice,
        120 + rng.below(81),
        25 + rng.below(51),
    )
}

fn write_wav(path: &Path, samples: &[f32]) -> Result<()> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SAMPLE_RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w =
        hound::WavWriter::create(path, spec).map_err(|e| DataError::format(path, e.to_string()))?;
    for &s in samples {
        w.write_sample((s.clamp(-1.0, 1.0) * 32767.0) as i16)
            .map_err(|e| DataError::format(path, e.to_string()))?;
    }
    w.finalize()
        .map_err(|e| DataError::format(path, e.to_string()))
}

fn synthesize(out: &Path, split: &str, i: usize, opts: &SpeechOptions) -> Result<String> {
    let test = split == "test";
    let mut rng =
        Rng::new(opts.seed ^ ((i as u64) << 1 | test as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (transcript, spoken, voice, speed, pitch) = utterance(&mut rng, test);
    let dir = out.join(split);
    let raw = dir.join(format!("{i:06}.raw.wav"));
    let status = Command::new("espeak-ng")
        .args([
            "-v",
            &voice,
            "-s",
            &speed.to_string(),
            "-p",
            &pitch.to_string(),
            "-w",
        ])
        .arg(&raw)
        .arg(&spoken)
        .output()
        .map_err(|e| {
            DataError::Msg(format!(
                "cannot run espeak-ng ({e}): install it with `apt-get install espeak-ng`"
            ))
        })?;
    if !status.status.success() {
        return Err(DataError::Msg(format!(
            "espeak-ng failed for voice {voice}: {}",
            String::from_utf8_lossy(&status.stderr).trim()
        )));
    }
    let mut samples = read_wav_16k(&raw)?;
    std::fs::remove_file(&raw).map_err(|e| DataError::io(&raw, e))?;
    if let Some(snr) = opts.snr_db {
        let rms = (samples.iter().map(|s| (s * s) as f64).sum::<f64>()
            / samples.len().max(1) as f64)
            .sqrt();
        let sigma = rms / 10f64.powf(snr / 20.0);
        for s in samples.iter_mut() {
            *s += (sigma * rng.normal()) as f32;
        }
    }
    encode(&transcript)?; // every transcript must round-trip through the alphabet
    write_wav(&dir.join(format!("{i:06}.wav")), &samples)?;
    let txt = dir.join(format!("{i:06}.txt"));
    std::fs::write(&txt, format!("{transcript}\n")).map_err(|e| DataError::io(&txt, e))?;
    Ok(format!("{split}/{i:06}.wav,{split}/{i:06}.txt"))
}

/// Synthesises the corpus into `out`; returns (train, test) utterance counts.
pub fn prepare_speech(out: &Path, opts: &SpeechOptions) -> Result<(usize, usize)> {
    use rayon::prelude::*;
    // An empty split would be written as an empty manifest, which every reader (and
    // `datasets stats speech`) refuses: refused here instead, before anything is made.
    for (flag, split, n) in [
        ("--utterances", "training", opts.train),
        ("--test-utterances", "test", opts.test),
    ] {
        if n == 0 {
            return Err(DataError::Msg(format!(
                "{flag} 0: the {split} split needs at least 1 utterance (an empty manifest is \
                 not a corpus: readers refuse it)"
            )));
        }
    }
    for (split, n) in [("train", opts.train), ("test", opts.test)] {
        let dir = out.join(split);
        std::fs::create_dir_all(&dir).map_err(|e| DataError::io(&dir, e))?;
        let done = std::sync::atomic::AtomicUsize::new(0);
        let lines: Vec<String> = (0..n)
            .into_par_iter()
            .map(|i| {
                let line = synthesize(out, split, i, opts);
                let k = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if k.is_multiple_of(100) || k == n {
                    eprintln!("speech: {split} {k}/{n}");
                }
                line
            })
            .collect::<Result<_>>()?;
        let manifest = out.join(format!("{split}_manifest.csv"));
        std::fs::write(&manifest, lines.join("\n") + "\n")
            .map_err(|e| DataError::io(&manifest, e))?;
    }
    Ok((opts.train, opts.test))
}

#[cfg(test)]
mod tests {
    use super::{prepare_speech, SpeechOptions, LETTERS, WORDS};

    /// Refused before espeak-ng runs or anything is written.
    #[test]
    fn an_empty_split_is_refused_before_anything_is_made() {
        let out = std::env::temp_dir().join(format!("speech-empty-{}", std::process::id()));
        for (train, test, want) in [
            (0, 5, "--utterances 0: the training split needs at least 1"),
            (5, 0, "--test-utterances 0: the test split needs at least 1"),
        ] {
            let opts = SpeechOptions {
                train,
                test,
                seed: 0,
                snr_db: None,
            };
            let e = prepare_speech(&out, &opts).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(!out.exists(), "{} was created", out.display());
        }
    }

    /// No two tokens are spoken alike: a spoken form with two transcripts would be an
    /// error no model can avoid.
    #[test]
    fn every_spoken_form_has_one_transcript() {
        let mut spoken: Vec<String> = LETTERS.iter().map(|(_, s)| s.to_string()).collect();
        spoken.extend(WORDS.iter().map(|w| w.to_lowercase()));
        let n = spoken.len();
        spoken.sort();
        spoken.dedup();
        assert_eq!(spoken.len(), n, "a spoken form repeats");
    }
}
