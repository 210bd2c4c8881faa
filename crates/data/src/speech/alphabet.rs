//! The character alphabet of deepspeech.pytorch: index 0 is the CTC blank.

use crate::error::{DataError, Result};

/// Blank (`_`), apostrophe, A–Z, space: 29 symbols.
pub const ALPHABET: &str = "_'ABCDEFGHIJKLMNOPQRSTUVWXYZ ";

/// Transcript to label ids (1..=28); letters are upper-cased; anything else is an error.
pub fn encode(text: &str) -> Result<Vec<u32>> {
    text.trim()
        .chars()
        .map(|c| {
            let c = c.to_ascii_uppercase();
            ALPHABET[1..].find(c).map(|i| i as u32 + 1).ok_or_else(|| {
                DataError::Msg(format!(
                    "transcript {text:?}: character {c:?} is not in the alphabet {ALPHABET:?}"
                ))
            })
        })
        .collect()
}

/// Label ids to text (blanks skipped).
pub fn decode(ids: &[u32]) -> String {
    ids.iter()
        .filter(|&&i| i > 0)
        .filter_map(|&i| ALPHABET.chars().nth(i as usize))
        .collect()
}
