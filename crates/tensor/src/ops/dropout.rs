//! Inverted dropout with a seeded RNG: kept values are scaled by 1/(1-p) so evaluation
//! needs no rescaling. The mask is counter-based (one seed drawn from `rng`, element i a
//! function of (seed, i)), so it is built where the tensor lives, in parallel, and is the
//! same on the CPU and on a GPU.

use crate::storage::Storage;
use crate::{Error, Result, Rng, Tensor};

impl Tensor {
    /// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)`.
    /// The mask comes from `rng`, so a seed reproduces it exactly, on any device. `p = 1`
    /// zeroes everything (with a zero gradient), as PyTorch's dropout does.
    pub fn dropout(&self, p: f64, rng: &mut Rng) -> Result<Tensor> {
        self.check_float("dropout")?;
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::msg(format!(
                "dropout: probability must be in [0, 1], got {p}"
            )));
        }
        if p == 0.0 {
            return Ok(self.clone());
        }
        if p == 1.0 {
            return self.scale(0.0);
        }
        let seed = rng.next_u64();
        let mask = Storage::dropout_mask(self.elem_count(), p, seed, self.dtype(), self.device())?;
        self.mul(&Tensor::from_storage(mask, self.shape().clone(), None))
    }
}
