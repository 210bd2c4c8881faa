//! Per-parameter state vectors on a device (the residuals, errors and momenta of the
//! methods on tensors), read and written in the host methods' checkpoint format
//! (`{name}.{index}`), so a checkpoint of either resumes the other.

use crate::exchange::check_numel;
use crate::method::StateTensors;
use crate::{CompressError, Result};
use tensor::{Device, Tensor};

pub(crate) struct DeviceVecs(Vec<Tensor>);

impl DeviceVecs {
    /// The host vectors, moved to `device` (the host ones are consumed).
    pub fn place(host: Vec<Vec<f32>>, device: Device) -> Result<Self> {
        let ts = host
            .into_iter()
            .map(|v| {
                let n = v.len();
                Tensor::from_vec(v, n, device)
            })
            .collect::<tensor::Result<_>>()?;
        Ok(DeviceVecs(ts))
    }
    /// Zero vectors of `sizes`, on `device` (a method's state at `init`, on the CPU until
    /// it is placed).
    pub fn zeros(sizes: impl IntoIterator<Item = usize>, device: Device) -> Result<Self> {
        let ts = sizes
            .into_iter()
            .map(|n| Tensor::zeros(n, tensor::DType::F32, device))
            .collect::<tensor::Result<_>>()?;
        Ok(DeviceVecs(ts))
    }
    /// Moves every vector to `device` (`Method::place`).
    pub fn move_to(&mut self, device: Device) -> Result<()> {
        for t in &mut self.0 {
            *t = t.to_device(device)?;
        }
        Ok(())
    }
    /// Parameter `index`'s vector.
    pub fn get(&self, index: usize) -> Option<&Tensor> {
        self.0.get(index)
    }
    /// The length of parameter `index`'s vector (`None`: no such parameter).
    pub fn len_of(&self, index: usize) -> Option<usize> {
        self.0.get(index).map(Tensor::elem_count)
    }
    /// Parameter `index`'s vector and its length, checked against `grad`'s.
    pub fn for_grad(&self, method: &str, index: usize, grad: &Tensor) -> Result<(&Tensor, usize)> {
        let t = self.0.get(index);
        let n = check_numel(method, index, t.map(Tensor::elem_count), grad)?;
        t.map(|t| (t, n)).ok_or_else(|| {
            CompressError::Usage(format!(
                "{method}: parameter {index} was not declared to init"
            ))
        })
    }
    /// Copied to the host as `{name}.{index}` entries.
    pub fn state(&self, name: &str) -> Result<StateTensors> {
        let host: Vec<Vec<f32>> = self
            .0
            .iter()
            .map(|t| t.to_vec::<f32>())
            .collect::<tensor::Result<_>>()?;
        Ok(super::named_state(name, &host))
    }
    /// Loads `{name}.{index}` entries (every name and length checked first, as
    /// [`super::load_named`] checks them), then writes them to the device.
    pub fn load(&self, method: &str, name: &str, state: &StateTensors) -> Result<()> {
        let mut host: Vec<Vec<f32>> = self.0.iter().map(|t| vec![0.0; t.elem_count()]).collect();
        super::load_named(method, state, &mut [(name, &mut host)])?;
        for (t, h) in self.0.iter().zip(host) {
            let n = h.len();
            t.assign(&Tensor::from_vec(h, n, Device::Cpu)?)?;
        }
        Ok(())
    }
}
