//! Word error rate for the speech task: greedy CTC decoding of the network's per-frame
//! scores (best class per frame, repeats merged, blanks dropped — the decoder DeepSpeech
//! reports its greedy numbers with) and the word-level edit distance to the transcript.

/// Greedy CTC decoding of one sample: `best[t]` is the best class of frame `t` (class 0 is
/// the blank); a run of equal classes counts once, blanks separate repeats.
pub fn greedy_ctc(best: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut prev = 0u32;
    for &c in best {
        if c != 0 && c != prev {
            out.push(c);
        }
        prev = c;
    }
    out
}

/// Levenshtein distance between two word sequences (substitutions, insertions and
/// deletions each cost one).
pub fn edit_distance<T: PartialEq>(hyp: &[T], reference: &[T]) -> usize {
    let mut row: Vec<usize> = (0..=reference.len()).collect();
    for (i, h) in hyp.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, r) in reference.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if h == r {
                diag
            } else {
                1 + diag.min(up).min(row[j])
            };
            diag = up;
        }
    }
    row[reference.len()]
}

/// Word errors of `hypothesis` against `reference` and the reference's word count.
pub fn word_errors(hypothesis: &str, reference: &str) -> (usize, usize) {
    let h: Vec<&str> = hypothesis.split_whitespace().collect();
    let r: Vec<&str> = reference.split_whitespace().collect();
    (edit_distance(&h, &r), r.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_merges_repeats_and_drops_blanks() {
        assert_eq!(greedy_ctc(&[0, 3, 3, 0, 3, 5, 5, 0, 0]), vec![3, 3, 5]);
        assert_eq!(greedy_ctc(&[0, 0]), Vec::<u32>::new());
        assert_eq!(greedy_ctc(&[2, 2, 2]), vec![2]);
    }

    #[test]
    fn word_errors_count_substitutions_insertions_and_deletions() {
        assert_eq!(word_errors("A B C", "A B C"), (0, 3));
        assert_eq!(word_errors("A X C", "A B C"), (1, 3));
        assert_eq!(word_errors("A B", "A B C"), (1, 3));
        assert_eq!(word_errors("A B C D", "A B C"), (1, 3));
        assert_eq!(word_errors("", "A B"), (2, 2));
        assert_eq!(word_errors("C B A", "A B C"), (2, 3));
        assert_eq!(
            edit_distance(
                &['k', 'i', 't', 't', 'e', 'n'],
                &['s', 'i', 't', 't', 'i', 'n', 'g']
            ),
            3
        );
    }
}
