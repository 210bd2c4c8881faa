//! A Penn-Treebank-sized language-modelling corpus from the King James Bible (Debian's
//! `bible-kjv`, dumped with `bible -f gen1:1-rev22:21`): one verse per line, verse
//! references removed, lower-cased, punctuation split into its own tokens (and `'s`
//! split off, as PTB does), the 9,998 most frequent words of the training split kept and
//! the rest `<unk>`, so
//! that with `<unk>` and `<eos>` the vocabulary has exactly 10,000 entries. Verses split
//! in order: the first 80 % train, the next 10 % valid, the last 10 % test (contiguous,
//! like PTB's sections). A character-level version (`ptb.char.*.txt`, `_` between words)
//! is written beside it.

use crate::error::{DataError, Result};
use crate::text::UNK;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

pub const VOCAB_SIZE: usize = 10_000;

pub struct KjvSummary {
    pub verses: usize,
    /// Tokens in all three splits, without `<eos>`.
    pub words: usize,
    pub vocab: usize,
}

/// Lower-cases, drops a leading verse reference (`Ge1:1`), splits punctuation and `'s`.
pub fn tokenize_verse(line: &str) -> Vec<String> {
    let mut words = line.split_whitespace();
    let first = words.next();
    let mut out = Vec::new();
    let is_reference = |w: &str| {
        w.contains(':')
            && w.chars().any(|c| c.is_ascii_digit())
            && w.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c.is_ascii_digit())
    };
    let rest: Vec<&str> = match first {
        Some(w) if is_reference(w) => words.collect(),
        Some(w) => std::iter::once(w).chain(words).collect(),
        None => Vec::new(),
    };
    for raw in rest {
        let lower = raw.to_lowercase();
        let mut cur = String::new();
        let mut chars = lower.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_alphanumeric() || c == '-' {
                cur.push(c);
            } else if c == '\'' && chars.peek() == Some(&'s') && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
                cur.push('\'');
            } else {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                if !c.is_whitespace() {
                    out.push(c.to_string());
                }
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

/// Dumps the Bible with the `bible` program (or reads `source` if given) and writes the
/// word and character corpora into `out`.
pub fn prepare_kjv(source: Option<&Path>, out: &Path) -> Result<KjvSummary> {
    let text = match source {
        Some(p) => std::fs::read_to_string(p).map_err(|e| DataError::io(p, e))?,
        None => {
            let output = Command::new("bible").args(["-f", "gen1:1-rev22:21"]).output().map_err(|e| {
                DataError::Msg(format!("cannot run `bible` ({e}): install the King James Bible with `apt-get install bible-kjv`"))
            })?;
            if !output.status.success() {
                return Err(DataError::Msg(format!(
                    "`bible -f gen1:1-rev22:21` failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                )));
            }
            String::from_utf8_lossy(&output.stdout).into_owned()
        }
    };
    let verses: Vec<Vec<String>> = text
        .lines()
        .map(tokenize_verse)
        .filter(|v| !v.is_empty())
        .collect();
    if verses.len() < 100 {
        return Err(DataError::Msg(format!(
            "only {} verses found: is the bible-kjv dump complete?",
            verses.len()
        )));
    }
    let n = verses.len();
    let (train_end, valid_end) = (n * 8 / 10, n * 9 / 10);
    // The vocabulary comes from the training split alone, so that a reader building it from
    // ptb.train.txt (as PTB users do) finds exactly the same 10,000 entries.
    let mut freq: HashMap<&str, usize> = HashMap::new();
    for v in &verses[..train_end] {
        for w in v {
            *freq.entry(w.as_str()).or_default() += 1;
        }
    }
    // Most frequent first; ties alphabetically, so the vocabulary is deterministic.
    let mut ranked: Vec<(&str, usize)> = freq.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let keep: std::collections::HashSet<&str> = ranked
        .iter()
        .take(VOCAB_SIZE - 2)
        .map(|(w, _)| *w)
        .collect();
    std::fs::create_dir_all(out).map_err(|e| DataError::io(out, e))?;
    let mut words = 0;
    for (split, range) in [
        ("train", 0..train_end),
        ("valid", train_end..valid_end),
        ("test", valid_end..n),
    ] {
        let (mut word_text, mut char_text) = (String::new(), String::new());
        for v in &verses[range] {
            let line: Vec<&str> = v
                .iter()
                .map(|w| {
                    if keep.contains(w.as_str()) {
                        w.as_str()
                    } else {
                        UNK
                    }
                })
                .collect();
            words += line.len();
            word_text.push(' ');
            word_text.push_str(&line.join(" "));
            word_text.push_str(" \n");
            // Characters of the original (unmapped) words, `_` between words.
            let chars: Vec<String> = v
                .iter()
                .map(|w| {
                    w.chars()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            char_text.push_str(&chars.join(" _ "));
            char_text.push('\n');
        }
        let wp = out.join(format!("ptb.{split}.txt"));
        std::fs::write(&wp, word_text).map_err(|e| DataError::io(&wp, e))?;
        let cp = out.join(format!("ptb.char.{split}.txt"));
        std::fs::write(&cp, char_text).map_err(|e| DataError::io(&cp, e))?;
    }
    Ok(KjvSummary {
        verses: n,
        words,
        vocab: keep.len() + 2,
    })
}
