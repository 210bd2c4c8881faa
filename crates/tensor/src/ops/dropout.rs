//! Inverted dropout with a seeded RNG: kept values are scaled by 1/(1-p) so evaluation
//! needs no rescaling.

use crate::{Error, Result, Rng, Tensor};

impl Tensor {
    /// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)`.
    /// The mask comes from `rng`, so a seed reproduces it exactly.
    pub fn dropout(&self, p: f64, rng: &mut Rng) -> Result<Tensor> {
        self.check_float("dropout")?;
        if !(0.0..1.0).contains(&p) {
            return Err(Error::msg(format!(
                "dropout: probability must be in [0, 1), got {p}"
            )));
        }
        if p == 0.0 {
            return Ok(self.clone());
        }
        let keep = 1.0 / (1.0 - p);
        let mask: Vec<f64> = (0..self.elem_count())
            .map(|_| if rng.uniform() < p { 0.0 } else { keep })
            .collect();
        let mask =
            Tensor::from_vec(mask, self.shape().clone(), self.device())?.to_dtype(self.dtype())?;
        self.mul(&mask)
    }
}
