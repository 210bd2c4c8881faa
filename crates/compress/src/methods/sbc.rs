//! Sparse Binary Compression (Sattler et al., paper 003, Alg. 1–3).
//!
//! Each rank trains locally (its optimizer applies its own gradients) for `delay` steps;
//! then, per tensor, the accumulated weight update plus residual `A = (W − W_sync) + R`
//! is sparse-binarized: of the fraction p largest positive and the fraction p most
//! negative entries, the side whose mean is larger in magnitude is kept, every kept entry
//! set to that mean `μ`; the rest stays in the residual `R = A − B`. The message is the
//! count, `μ` (32 bits), b* and the Golomb–Rice coded gaps between positions with the
//! paper's optimal b* (`codec::golomb`). The paper counts `μ` and the positions alone
//! (§II, "one mean value … per tensor"), and so does the message measure
//! (`WireStats::message_bytes`); the count and b* ([`COUNT_AND_B`], 5 bytes a tensor)
//! count on the wire only. A receiver needs them: the count to stop before the padding,
//! whose zero bits would read as gaps, and b* because deriving it from the count takes
//! `ln`, whose last bit the platforms' maths libraries need not agree on. Every rank then sets
//! `W = W_sync + (1/N)·Σᵢ Bᵢ` and `W_sync = W`, so all ranks hold the same weights after
//! each exchange. Momentum correction is implicit (the update already contains the
//! optimizer's momentum). Momentum masking (§VII-A, adopted from DGC; option `masking`,
//! on by default): after each exchange the trainer zeros the optimizer's momentum at the
//! positions this rank sent ([`Method::take_momentum_mask`]), so the momentum of a weight
//! whose accumulated update has just been applied does not keep pushing it the same way.
//!
//! Presets: SBC(1) = no delay, p = 0.1 %; SBC(2) = 10 steps, 1 %; SBC(3) = 100 steps, 1 %.

use crate::codec::{golomb, CodecError};
use crate::exchange::{allgather_decode, check_len, due, keep_count, refuse_non_finite, Meter};
use crate::method::{Method, ParamSpec, StateTensors, StepInfo, Update, UpdateKind, WireStats};
use crate::select::exact_topk;
use crate::Result;
use comm::Communicator;

/// SBC(preset) as `(delay, density)`.
pub fn preset(n: usize) -> Option<(usize, f64)> {
    match n {
        1 => Some((1, 0.001)),
        2 => Some((10, 0.01)),
        3 => Some((100, 0.01)),
        _ => None,
    }
}

/// Sparse binarization of `a` at density `p`: `(μ, ascending positions)`.
pub fn binarize(a: &[f32], p: f64) -> (f32, Vec<u32>) {
    let k = keep_count(p, a.len());
    let side = |positive: bool| -> (f64, Vec<u32>) {
        let idx: Vec<u32> = (0..a.len() as u32)
            .filter(|&i| {
                if positive {
                    a[i as usize] > 0.0
                } else {
                    a[i as usize] < 0.0
                }
            })
            .collect();
        let chosen: Vec<u32> = if idx.len() > k {
            let sub: Vec<f32> = idx.iter().map(|&i| a[i as usize]).collect();
            exact_topk(&sub, k)
                .into_iter()
                .map(|j| idx[j as usize])
                .collect()
        } else {
            idx
        };
        let mean = if chosen.is_empty() {
            0.0
        } else {
            chosen.iter().map(|&i| a[i as usize] as f64).sum::<f64>() / chosen.len() as f64
        };
        (mean, chosen)
    };
    let (mp, pp) = side(true);
    let (mn, pn) = side(false);
    if mp >= -mn {
        (mp as f32, pp)
    } else {
        (mn as f32, pn)
    }
}

/// The header of an [`encode`]d message: the position count (u32), μ (f32) and b* (u8).
const HEADER: usize = 9;

/// The header bytes that the paper does not count: all but μ's four.
pub const COUNT_AND_B: usize = HEADER - 4;

/// `count (u32) | μ (f32) | b (u8) | Golomb bits`, little-endian.
pub fn encode(mean: f32, positions: &[u32], n: usize) -> Result<Vec<u8>> {
    let b = if positions.is_empty() {
        0
    } else {
        golomb::optimal_b(positions.len() as f64 / n as f64)
    };
    let bits = golomb::encode(positions, b)
        .map_err(|e| crate::CompressError::Usage(format!("sbc encode: {e}")))?;
    let mut out = Vec::with_capacity(HEADER + bits.len());
    out.extend((positions.len() as u32).to_le_bytes());
    out.extend(mean.to_le_bytes());
    out.push(b as u8);
    out.extend(bits);
    Ok(out)
}

/// Adds `μ` at every position of the message into `out` (the tensor's length).
pub fn decode_add(bytes: &[u8], out: &mut [f32]) -> std::result::Result<usize, CodecError> {
    let head = bytes
        .get(..HEADER)
        .ok_or(CodecError::Truncated("sbc header"))?;
    let count = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let mean = f32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if count > out.len() {
        return Err(CodecError::Invalid(format!(
            "{count} positions in a tensor of {}",
            out.len()
        )));
    }
    if !mean.is_finite() {
        return Err(CodecError::Invalid(format!("mean {mean}")));
    }
    let positions = golomb::decode(&bytes[HEADER..], count, head[8] as u32, out.len())?;
    for p in positions {
        out[p as usize] += mean;
    }
    Ok(count)
}

pub struct Sbc {
    delay: usize,
    density: f64,
    world: usize,
    step: u64,
    sizes: Vec<usize>,
    w_sync: Vec<Vec<f32>>,
    residual: Vec<Vec<f32>>,
    masking: bool,
    /// Per parameter, the positions the last exchange sent (kept only with `masking`).
    sent: Vec<Vec<u32>>,
}

impl Sbc {
    pub fn new(delay: usize, density: f64, world: usize) -> Result<Self> {
        crate::options::check_density("sbc", density)?;
        if delay == 0 {
            return Err(crate::CompressError::Config(
                "sbc: delay must be at least 1".into(),
            ));
        }
        Ok(Sbc {
            delay,
            density,
            world,
            step: 0,
            sizes: Vec::new(),
            w_sync: Vec::new(),
            residual: Vec::new(),
            masking: true,
            sent: Vec::new(),
        })
    }

    /// Momentum masking on (the default, as in the paper) or off.
    pub fn with_masking(mut self, masking: bool) -> Self {
        self.masking = masking;
        self
    }
}

impl Method for Sbc {
    fn name(&self) -> &'static str {
        "sbc"
    }
    fn describe(&self) -> String {
        format!(
            "sbc(delay={}, density={}, masking={})",
            self.delay, self.density, self.masking
        )
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.sizes = params.iter().map(|p| p.numel()).collect();
        self.w_sync = self.sizes.iter().map(|_| Vec::new()).collect();
        self.residual = self.sizes.iter().map(|&n| vec![0.0; n]).collect();
        self.sent = self.sizes.iter().map(|_| Vec::new()).collect();
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    /// The first exchange captures the starting weights.
    fn reads_weights(&self) -> bool {
        true
    }
    /// A local step: the optimizer applies this rank's own gradient.
    fn exchange(
        &mut self,
        _comm: &mut Communicator,
        index: usize,
        weights: &[f32],
        grad: &[f32],
    ) -> Result<Update> {
        let n = check_len(
            "sbc",
            index,
            self.sizes.get(index).copied(),
            &[grad, weights],
        )?;
        if self.w_sync[index].is_empty() && n > 0 {
            // The weights every rank starts from (the trainer makes them identical).
            self.w_sync[index] = weights.to_vec();
        }
        Ok(Meter::new(n).update(grad.to_vec(), UpdateKind::Gradient))
    }
    fn after_step_every(&self) -> Option<u64> {
        Some(self.delay as u64)
    }
    fn after_step(
        &mut self,
        comm: &mut Communicator,
        index: usize,
        weights: &mut [f32],
    ) -> Result<Option<WireStats>> {
        if !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        let n = check_len("sbc", index, self.sizes.get(index).copied(), &[weights])?;
        if self.w_sync[index].len() != n {
            return Err(crate::CompressError::Usage(format!(
                "sbc: parameter {index} was never exchanged before its first synchronisation"
            )));
        }
        let (ws, r) = (&mut self.w_sync[index], &mut self.residual[index]);
        let density = self.density;
        let mut m = Meter::new(n);
        let message = m.compress(|| {
            for i in 0..n {
                r[i] += weights[i] - ws[i];
            }
            // Binarization keeps entries > 0 or < 0, so a NaN would stay in the residual
            // unseen while the synchronisation overwrote the weight; an inf would make μ
            // inf, which every receiver refuses as malformed. The sender says why.
            refuse_non_finite("sbc", index, "the accumulated weight update", r)?;
            let (mean, pos) = binarize(r, density);
            for &p in &pos {
                r[p as usize] -= mean;
            }
            encode(mean, &pos, n).map(|b| (b, pos))
        });
        let (message, positions) = message?;
        m.stats.sent_values = positions.len();
        if self.masking {
            self.sent[index] = positions;
        }
        let mut sum = vec![0f32; n];
        allgather_decode(comm, &mut m, "sbc", index, &message, |b| {
            decode_add(b, &mut sum).map(|_| ())
        })?;
        // The paper's measure: μ and the positions (see the module comment).
        m.stats.message_bytes -= COUNT_AND_B;
        let inv = 1.0 / self.world as f32;
        m.decompress(|| {
            for (w, s) in ws.iter_mut().zip(&sum) {
                *w += s * inv;
            }
            weights[..n].copy_from_slice(&ws[..n]);
        });
        Ok(Some(m.stats))
    }
    fn take_momentum_mask(&mut self, index: usize) -> Vec<u32> {
        self.sent
            .get_mut(index)
            .map(std::mem::take)
            .unwrap_or_default()
    }
    fn state(&self) -> Result<StateTensors> {
        let mut s = crate::methods::named_state("w_sync", &self.w_sync);
        s.extend(crate::methods::named_state("residual", &self.residual));
        Ok(s)
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        // w_sync is captured at the first exchange; a checkpoint always has it.
        for (i, w) in self.w_sync.iter_mut().enumerate() {
            w.resize(self.sizes[i], 0.0);
        }
        crate::methods::load_named(
            "sbc",
            state,
            &mut [
                ("w_sync", &mut self.w_sync),
                ("residual", &mut self.residual),
            ],
        )
    }
}
