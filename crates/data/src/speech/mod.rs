//! Speech: 16 kHz mono WAV plus transcripts, turned into DeepSpeech's input, normalised
//! log-spectrograms (20 ms Hamming windows, 10 ms hop: 161 frequency bins), with the
//! 29-symbol character alphabet CTC uses (blank, apostrophe, A–Z, space).
//!
//! A dataset is a manifest: one line per utterance, `wav_path,transcript_path`, paths
//! relative to the manifest's directory (deepspeech.pytorch's layout).

mod alphabet;
mod dataset;
mod spectrogram;
mod wav;

pub use alphabet::{decode, encode, ALPHABET};
pub use dataset::SpeechDataset;
pub use spectrogram::{log_spectrogram, HOP, SAMPLE_RATE, WINDOW};
pub use wav::{read_wav_16k, resample};
