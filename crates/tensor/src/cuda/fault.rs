//! Bad input found inside a kernel (a label or an index out of range), reported without a
//! host round trip. Checking such input on the host before launch costs a device-to-host
//! read, which stalls the host until the GPU has caught up, in every training step (the
//! cross-entropy labels and the embedding indices are read in every step of the models we
//! train). Instead the kernel skips the bad element and records the first fault in a small
//! device word (`report_fault` in kernels/common.cuh); the device reads the word at its next
//! synchronisation (a download or an explicit synchronize) and returns the fault as the
//! error of that call, as PyTorch raises a device-side assert at the next synchronising
//! call. The word is cleared when read, so later work runs normally.

use crate::Error;

/// Words of the fault record: `[code, position, value, bound]`.
pub(crate) const WORDS: usize = 4;

/// What a nonzero code means; the numbers are the kernels' (kernels/*.cu).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    CrossEntropyLabel = 1,
    IndexSelect = 2,
    IndexAdd = 3,
}

impl Code {
    pub(crate) fn word(self) -> u32 {
        self as u32
    }
}

/// The error a fault record stands for; `None` for a clear record.
pub(crate) fn error_of(words: &[u32]) -> Option<Error> {
    let (code, position, value, bound) = match words {
        [c, p, v, b, ..] => (*c, *p as usize, *v as usize, *b as usize),
        _ => return None,
    };
    let index = |op| Error::IndexOutOfRange {
        op,
        index: value,
        size: bound,
    };
    match code {
        0 => None,
        c if c == Code::CrossEntropyLabel.word() => Some(Error::msg(format!(
            "cross_entropy: label {value} at position {position} is out of range for {bound} \
             classes (found on the GPU; reported at the next synchronisation)"
        ))),
        c if c == Code::IndexSelect.word() => Some(index("index_select")),
        c if c == Code::IndexAdd.word() => Some(index("index_add")),
        other => Some(Error::msg(format!(
            "CUDA kernel reported unknown fault code {other} (position {position}, value \
             {value}, bound {bound})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_names_its_op_and_values() {
        assert!(error_of(&[0, 5, 6, 7]).is_none());
        let ce = error_of(&[1, 3, 12, 10]).unwrap().to_string();
        assert!(
            ce.contains("label 12 at position 3") && ce.contains("10 classes"),
            "{ce}"
        );
        let sel = error_of(&[2, 0, 99, 50]).unwrap().to_string();
        assert!(sel.contains("index_select") && sel.contains("99"), "{sel}");
        let add = error_of(&[3, 0, 99, 50]).unwrap().to_string();
        assert!(add.contains("index_add"), "{add}");
        assert!(error_of(&[9, 0, 0, 0])
            .unwrap()
            .to_string()
            .contains("unknown fault code 9"));
    }
}
