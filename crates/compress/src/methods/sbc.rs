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
//!
//! On tensors (`place`, `exchange_tensor`, `after_step_tensor`): `W_sync` and `R` live on
//! the device; the binarization is [`binarize_tensor`] (each side's top-k by
//! `tensor::sparsify::topk_magnitude`), and only the chosen positions and values cross to
//! the host, where the mean is taken (in f64, ascending, as [`binarize`] takes it) and the
//! positions are Golomb-coded. The messages travel through the group's allgather-v; each
//! rank's decoded positions, summed by position on the host in rank order, go back to
//! the device as one sparse update of `W_sync`. The same weights, residuals and masks as
//! on slices, bit for bit (tests/exchange_tensor.rs).

use crate::codec::{golomb, CodecError};
use crate::exchange::{
    allgather_decode, allgather_decode_group, check_len, check_numel, due, keep_count,
    local_step_tensor, refuse_non_finite, Meter,
};
use crate::method::{
    HostAfterStep, HostExchange, Method, ParamSpec, StateTensors, StepInfo, TensorAfterStep,
    TensorExchange, TensorUpdate, Update, UpdateKind, WireStats,
};
use crate::methods::DeviceVecs;
use crate::select::exact_topk;
use crate::{CompressError, Result};
use comm::SparseVec;
use tensor::sparsify::{self, Selected};
use tensor::{DType, Device, Tensor};

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

/// [`binarize`] on a flat F32 tensor, on its device: `(μ, the chosen entries)`. Each
/// side's k largest magnitudes are `topk_magnitude` of that side's half (`relu(a)`,
/// `min(a, 0)`), whose zeros it drops: exactly the entries `binarize` leaves out of the
/// side. The chosen values are read to the host and averaged there in f64, in ascending
/// index order, as `binarize` averages them, so μ has the same bits.
pub fn binarize_tensor(a: &Tensor, p: f64) -> Result<(f32, Selected)> {
    let k = keep_count(p, a.elem_count());
    let side = |half: Tensor| -> Result<(f64, Selected)> {
        let chosen = sparsify::topk_magnitude(&half, k)?;
        let values = chosen.values.to_vec::<f32>()?;
        let mean = if values.is_empty() {
            0.0
        } else {
            values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64
        };
        Ok((mean, chosen))
    };
    let zeros = Tensor::zeros(a.dims(), DType::F32, a.device())?;
    let (mp, pp) = side(a.relu()?)?;
    let (mn, pn) = side(a.minimum(&zeros)?)?;
    Ok(if mp >= -mn {
        (mp as f32, pp)
    } else {
        (mn as f32, pn)
    })
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

/// A message's `(μ, ascending positions)` in a tensor of `n` elements.
pub fn decode(bytes: &[u8], n: usize) -> std::result::Result<(f32, Vec<u32>), CodecError> {
    let head = bytes
        .get(..HEADER)
        .ok_or(CodecError::Truncated("sbc header"))?;
    let count = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let mean = f32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if count > n {
        return Err(CodecError::Invalid(format!(
            "{count} positions in a tensor of {n}"
        )));
    }
    if !mean.is_finite() {
        return Err(CodecError::Invalid(format!("mean {mean}")));
    }
    let positions = golomb::decode(&bytes[HEADER..], count, head[8] as u32, n)?;
    Ok((mean, positions))
}

/// Adds `μ` at every position of the message into `out` (the tensor's length).
pub fn decode_add(bytes: &[u8], out: &mut [f32]) -> std::result::Result<usize, CodecError> {
    let (mean, positions) = decode(bytes, out.len())?;
    for &p in &positions {
        out[p as usize] += mean;
    }
    Ok(positions.len())
}

/// The ranks' `(μ, positions)` in rank order, summed by position as [`decode_add`] sums
/// them into a dense vector (the same f32 additions in the same order): TopKAllReduce's
/// reduction, `comm::sum_all`, of one sparse vector per rank.
fn sum_by_position(messages: &[(f32, Vec<u32>)]) -> SparseVec {
    let parts: Vec<SparseVec> = messages
        .iter()
        .map(|(mean, pos)| SparseVec {
            indices: pos.clone(),
            values: vec![*mean; pos.len()],
        })
        .collect();
    comm::sum_all(&parts)
}

/// The state of an SBC placed on a device.
struct SbcOnDevice {
    w_sync: DeviceVecs,
    residual: DeviceVecs,
    /// Whether parameter i's `W_sync` holds weights yet (captured at its first exchange,
    /// or loaded from a checkpoint).
    captured: Vec<bool>,
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
    /// Once placed: `W_sync` and `R` on the device (then the host vectors are emptied).
    on_device: Option<SbcOnDevice>,
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
            on_device: None,
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
        self.on_device = None;
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    /// The first exchange captures the starting weights.
    fn reads_weights(&self) -> bool {
        true
    }
    fn place(&mut self, device: Device) -> Result<()> {
        let captured: Vec<bool> = self.w_sync.iter().map(|w| !w.is_empty()).collect();
        let w_sync = std::mem::take(&mut self.w_sync)
            .into_iter()
            .zip(&self.sizes)
            .map(|(w, &n)| if w.is_empty() { vec![0.0; n] } else { w })
            .collect();
        self.on_device = Some(SbcOnDevice {
            w_sync: DeviceVecs::place(w_sync, device)?,
            residual: DeviceVecs::place(std::mem::take(&mut self.residual), device)?,
            captured,
        });
        Ok(())
    }
    /// A local step, as on slices; the first captures the starting weights on the device.
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (index, grad, weights) = (x.index, x.grad, x.weights);
        let d = self.on_device.as_mut().ok_or_else(not_placed)?;
        let (ws, n) = d.w_sync.for_grad("sbc", index, grad)?;
        let w = weights.ok_or_else(|| {
            CompressError::Usage("sbc reads the weights: exchange_tensor needs them".into())
        })?;
        check_numel("sbc", index, Some(n), w)?;
        if !d.captured[index] {
            // The weights every rank starts from (the trainer makes them identical).
            tensor::no_grad(|| ws.assign(&w.flatten_all()?))?;
            d.captured[index] = true;
        }
        Ok(local_step_tensor(grad))
    }
    fn after_step_tensor(&mut self, x: TensorAfterStep<'_>) -> Result<Option<WireStats>> {
        let (group, index, weights) = (x.comm, x.index, x.weights);
        if !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        let d = self.on_device.as_ref().ok_or_else(not_placed)?;
        let (ws, n) = d.w_sync.for_grad("sbc", index, weights)?;
        let (r, _) = d.residual.for_grad("sbc", index, weights)?;
        if !d.captured[index] {
            return Err(never_exchanged(index));
        }
        let (density, device) = (self.density, r.device());
        let mut m = Meter::new(n);
        let (message, positions) = m.compress(|| {
            tensor::no_grad(|| -> Result<_> {
                r.assign(&r.add(&weights.flatten_all()?.sub(ws)?)?)?;
                // As on slices (see `after_step`); the whole residual is read only to
                // name the value.
                if sparsify::count_at_least(r, f32::INFINITY)? > 0 {
                    let what = "the accumulated weight update";
                    refuse_non_finite("sbc", index, what, &r.to_vec::<f32>()?)?;
                }
                let (mean, chosen) = binarize_tensor(r, density)?;
                let positions = chosen.indices.to_vec::<u32>()?;
                if !chosen.is_empty() {
                    let minus = Tensor::full(-(mean as f64), chosen.len(), DType::F32, device)?;
                    r.assign(&r.add(&minus.index_add_into(&chosen.indices, 0, &n.into())?)?)?;
                }
                Ok((encode(mean, &positions, n)?, positions))
            })
        })?;
        m.stats.sent_values = positions.len();
        if self.masking {
            self.sent[index] = positions;
        }
        let mut messages = Vec::with_capacity(group.world_size());
        allgather_decode_group(group, &mut m, "sbc", index, &message, |_, b| {
            messages.push(decode(b, n)?);
            Ok(())
        })?;
        m.stats.message_bytes -= COUNT_AND_B;
        let inv = 1.0 / self.world as f32;
        m.decompress(|| {
            tensor::no_grad(|| -> Result<()> {
                let SparseVec {
                    indices: idx,
                    values: val,
                } = sum_by_position(&messages);
                if !idx.is_empty() {
                    let k = idx.len();
                    let idx = Tensor::from_vec(idx, k, device)?;
                    let sum =
                        Tensor::from_vec(val, k, device)?.index_add_into(&idx, 0, &n.into())?;
                    // The host's w += s·(1/P), with s = 0 off the positions.
                    ws.assign(&ws.add(&sum.scale(inv as f64)?)?)?;
                }
                weights.assign(&ws.reshape(weights.dims())?)?;
                Ok(())
            })
        })?;
        Ok(Some(m.stats))
    }
    /// A local step: the optimizer applies this rank's own gradient.
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let (index, grad, weights) = (x.index, x.grad, x.weights);
        let weights: &[f32] = weights.unwrap_or_default();
        if self.on_device.is_some() {
            return Err(placed());
        }
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
    fn after_step(&mut self, x: HostAfterStep<'_>) -> Result<Option<WireStats>> {
        let (comm, index, weights) = (x.comm, x.index, x.weights);
        if !due(self.after_step_every(), self.step) {
            return Ok(None);
        }
        if self.on_device.is_some() {
            return Err(placed());
        }
        let n = check_len("sbc", index, self.sizes.get(index).copied(), &[weights])?;
        if self.w_sync[index].len() != n {
            return Err(never_exchanged(index));
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
        if let Some(d) = &self.on_device {
            let mut s = d.w_sync.state("w_sync")?;
            s.extend(d.residual.state("residual")?);
            return Ok(s);
        }
        let mut s = crate::methods::named_state("w_sync", &self.w_sync);
        s.extend(crate::methods::named_state("residual", &self.residual));
        Ok(s)
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        if let Some(d) = &mut self.on_device {
            let (w_sync, residual): (StateTensors, StateTensors) = state
                .iter()
                .cloned()
                .partition(|(k, _)| k.starts_with("w_sync."));
            d.w_sync.load("sbc", "w_sync", &w_sync)?;
            d.residual.load("sbc", "residual", &residual)?;
            d.captured.iter_mut().for_each(|c| *c = true);
            return Ok(());
        }
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

fn not_placed() -> CompressError {
    CompressError::Usage("sbc: a tensor exchange before place (the state is on the host)".into())
}

fn placed() -> CompressError {
    CompressError::Usage(
        "sbc: the state is on the device (place was called): exchange tensors".into(),
    )
}

fn never_exchanged(index: usize) -> CompressError {
    CompressError::Usage(format!(
        "sbc: parameter {index} was never exchanged before its first synchronisation"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_by_position_add_in_rank_order_from_zero() {
        let msgs = vec![
            (0.1f32, vec![0, 3, 7]),
            (-0.3f32, vec![3, 5]),
            (1e-8f32, vec![3, 7]),
        ];
        let mut dense = [0f32; 8];
        for (mean, pos) in &msgs {
            for &p in pos {
                dense[p as usize] += mean;
            }
        }
        let s = sum_by_position(&msgs);
        assert_eq!(s.indices, vec![0, 3, 5, 7]);
        for (i, v) in s.indices.iter().zip(&s.values) {
            assert_eq!(v.to_bits(), dense[*i as usize].to_bits(), "position {i}");
        }
    }

    #[test]
    fn binarize_on_a_tensor_is_binarize() {
        let mut r = tensor::Rng::new(5);
        for (n, p) in [(1000usize, 0.01), (37, 0.5), (10, 1.0)] {
            let mut a: Vec<f32> = (0..n).map(|_| r.normal() as f32).collect();
            // Ties and zeros: an entry repeated, a few zeros, -0.
            a[3] = a[4];
            a[5] = 0.0;
            a[6] = -0.0;
            let (mean, pos) = binarize(&a, p);
            let t = Tensor::from_vec(a, n, Device::Cpu).unwrap();
            let (tm, chosen) = binarize_tensor(&t, p).unwrap();
            assert_eq!(tm.to_bits(), mean.to_bits(), "n {n}");
            assert_eq!(chosen.indices.to_vec::<u32>().unwrap(), pos, "n {n}");
        }
        // One side empty: all positive, all negative.
        for sign in [1.0f32, -1.0] {
            let a: Vec<f32> = (1..=20).map(|i| sign * i as f32).collect();
            let (mean, pos) = binarize(&a, 0.1);
            let (tm, chosen) =
                binarize_tensor(&Tensor::from_vec(a, 20, Device::Cpu).unwrap(), 0.1).unwrap();
            assert_eq!((tm, chosen.indices.to_vec::<u32>().unwrap()), (mean, pos));
        }
    }
}
