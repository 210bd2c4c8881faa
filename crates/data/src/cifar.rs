//! CIFAR-10 binary batches (`data_batch_1.bin` … `data_batch_5.bin`, `test_batch.bin`):
//! records of one label byte and 3 × 32 × 32 pixel bytes (channel-major).

use crate::error::{DataError, Result};
use crate::image::ImageDataset;
use std::path::Path;

const RECORD: usize = 1 + 3 * 32 * 32;

/// The records in one batch file of the distribution (10,000), with room to spare: a file
/// beyond this is not a CIFAR-10 batch, and is refused before it is read into memory.
const MAX_RECORDS_PER_FILE: u64 = 60_000;

/// Reads and concatenates the given batch files (e.g. the five training batches).
pub fn read_cifar10(files: &[&Path]) -> Result<ImageDataset> {
    let mut pixels = Vec::new();
    let mut labels = Vec::new();
    for &path in files {
        let bytes = crate::error::read_at_most(
            path,
            MAX_RECORDS_PER_FILE * RECORD as u64,
            &format!(
                "{MAX_RECORDS_PER_FILE} CIFAR-10 records (a batch file holds 10,000): not a CIFAR-10 batch"
            ),
        )?;
        if bytes.is_empty() || bytes.len() % RECORD != 0 {
            return Err(DataError::format(
                path,
                format!(
                    "{} bytes is not a whole number of {RECORD}-byte CIFAR-10 records (truncated?)",
                    bytes.len()
                ),
            ));
        }
        for (i, rec) in bytes.chunks_exact(RECORD).enumerate() {
            if rec[0] >= 10 {
                return Err(DataError::format(
                    path,
                    format!(
                        "record {i}: label {} is out of range for 10 classes",
                        rec[0]
                    ),
                ));
            }
            labels.push(rec[0] as u32);
            pixels.extend_from_slice(&rec[1..]);
        }
    }
    ImageDataset::new(pixels, labels, [3, 32, 32], 10)
}
