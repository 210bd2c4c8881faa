//! `thresholdv` (GRACE's threshold-v, beyond the five papers): the residual `E += g`
//! sends every entry whose magnitude is at least `v`, as (index, value) pairs summed by
//! TopKAllReduce and averaged, and clears them from `E`. How many are sent varies with
//! the gradient's scale (none where every entry is below v). On tensors on any device
//! (`tensor::sparsify::at_least`); on slices, the same code on CPU tensors.

use crate::exchange::{refuse_non_finite, sparse_average_tensor, Meter};
use crate::method::{Method, ParamSpec, StateTensors, TensorExchange, TensorUpdate, UpdateKind};
use crate::methods::DeviceVecs;
use crate::{CompressError, Result};
use tensor::{sparsify, Device};

pub struct ThresholdV {
    threshold: f32,
    residual: DeviceVecs,
}

impl ThresholdV {
    pub fn new(threshold: f64) -> Result<Self> {
        if !(threshold > 0.0 && threshold.is_finite()) {
            return Err(CompressError::Config(format!(
                "thresholdv: threshold must be a finite number > 0, got {threshold}"
            )));
        }
        Ok(ThresholdV {
            threshold: threshold as f32,
            residual: DeviceVecs::zeros([], Device::Cpu)?,
        })
    }

    fn exchange_on(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let (e, n) = self.residual.for_grad("thresholdv", index, grad)?;
        let mut m = Meter::new(n);
        let sel = m.compress(|| -> Result<sparsify::Selected> {
            e.assign(&e.add(&grad.flatten_all()?)?)?;
            // at_least passes inf and NaN too: they are refused here.
            let sel = sparsify::at_least(e, self.threshold)?;
            refuse_non_finite(
                "thresholdv",
                index,
                "the gradient",
                &sel.values.to_vec::<f32>()?,
            )?;
            sparsify::zero_selected(e, &sel)?;
            Ok(sel)
        })?;
        m.stats.sent_values = sel.len();
        m.stats.message_bytes = 4 + 8 * sel.len();
        let values = sparse_average_tensor(group, &mut m, &sel, grad.dims())?;
        Ok(m.tensor_update(values, UpdateKind::Gradient))
    }
}

impl Method for ThresholdV {
    fn name(&self) -> &'static str {
        "thresholdv"
    }
    fn describe(&self) -> String {
        format!("thresholdv(threshold={})", self.threshold)
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.residual = DeviceVecs::zeros(params.iter().map(ParamSpec::numel), Device::Cpu)?;
        Ok(())
    }
    fn place(&mut self, device: Device) -> Result<()> {
        self.residual.move_to(device)
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        tensor::no_grad(|| self.exchange_on(x))
    }
    fn state(&self) -> Result<StateTensors> {
        self.residual.state("residual")
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        self.residual.load("thresholdv", "residual", state)
    }
}
