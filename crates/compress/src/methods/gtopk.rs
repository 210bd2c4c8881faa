//! gTop-k S-SGD (Shi et al., paper 002, Alg. 4). Per parameter and step:
//!
//! - `G += ∇` (line 4, the residual absorbs the gradient); the local top-k of |G| is the
//!   sparse `G̃ᵍ` and is cleared from `G` (lines 5–8);
//! - `gtopk_allreduce` (Alg. 3: a tree of ⊤ merges to rank 0, then a broadcast) gives the
//!   global top-k `G̃` and its index set `gMask` (line 9);
//! - put-back (line 10): a locally selected value whose index did not survive globally
//!   goes back into the residual, so nothing is lost;
//! - the optimizer applies `G̃ / P` (line 11, averaged like every method here).
//!
//! Conservation: what all ranks applied (times P) plus what stays in their residuals
//! equals what they accumulated, exactly for two workers. With more, the tree truncates
//! partial sums at inner levels: an index dropped inside one subtree can still win at
//! the root from another, and the dropped part is then neither applied nor put back.
//! That is the paper's algorithm; `lost_mass` in the tests measures how rare it is.

use crate::exchange::{check_len, dense_average, keep_count, Meter};
use crate::method::{Method, ParamSpec, StateTensors, Update, UpdateKind};
use crate::select::exact_topk;
use crate::{CompressError, Result};
use comm::{Communicator, SparseVec};

pub struct GTopK {
    density: f64,
    dense_below: usize,
    world: usize,
    residual: Vec<Vec<f32>>,
}

impl GTopK {
    pub fn new(density: f64, dense_below: usize, world: usize) -> Result<Self> {
        crate::options::check_density("gtopk", density)?;
        Ok(GTopK {
            density,
            dense_below,
            world,
            residual: Vec::new(),
        })
    }
}

impl Method for GTopK {
    fn name(&self) -> &'static str {
        "gtopk"
    }
    fn describe(&self) -> String {
        format!(
            "gtopk(density={}, dense_below={})",
            self.density, self.dense_below
        )
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.residual = params.iter().map(|p| vec![0.0; p.numel()]).collect();
        Ok(())
    }
    fn exchange(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        _weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        let n = check_len(
            "gtopk",
            index,
            self.residual.get(index).map(Vec::len),
            &[grad],
        )?;
        if n < self.dense_below {
            return dense_average(comm, grad);
        }
        let k = keep_count(self.density, n);
        let r = &mut self.residual[index];
        let mut m = Meter::new(n);
        let local = m.compress(|| {
            r.iter_mut().zip(grad).for_each(|(r, g)| *r += g);
            let idx = exact_topk(r, k);
            let values: Vec<f32> = idx.iter().map(|&i| r[i as usize]).collect();
            // inf and NaN rank above every finite |value|, so a diverged gradient shows
            // among the selected ones; the sender names it (a peer would only see a
            // malformed message).
            if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                return Err(CompressError::Usage(format!(
                    "gtopk: parameter {index}: the gradient holds {v} (the training diverged? lower --lr)"
                )));
            }
            idx.iter().for_each(|&i| r[i as usize] = 0.0);
            Ok(SparseVec {
                indices: idx,
                values,
            })
        })?;
        m.stats.sent_values = local.len();
        m.stats.message_bytes = 4 + 8 * local.len();
        let global = m.comm(|| comm.gtopk_allreduce(&local, k))?;
        let world = self.world as f32;
        let out = m.decompress(|| {
            let mut out = vec![0f32; n];
            for (&i, &v) in global.indices.iter().zip(&global.values) {
                let slot = out.get_mut(i as usize).ok_or_else(|| {
                    CompressError::Usage(format!(
                        "gtopk: the global top-k of parameter {index} has index {i} beyond its {n} elements (do all ranks train the same model?)"
                    ))
                })?;
                *slot = v / world;
            }
            // Put-back (Alg. 4 line 10): both index lists are ascending, so one merge pass.
            let mut g = global.indices.iter().peekable();
            for (&i, &v) in local.indices.iter().zip(&local.values) {
                while g.next_if(|&&j| j < i).is_some() {}
                if g.peek() != Some(&&i) {
                    r[i as usize] += v;
                }
            }
            Ok::<_, CompressError>(out)
        })?;
        Ok(m.update(out, UpdateKind::Gradient))
    }
    fn state(&self) -> StateTensors {
        crate::methods::named_state("residual", &self.residual)
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        crate::methods::load_named("gtopk", state, &mut [("residual", &mut self.residual)])
    }
}
