//! Fused ops outside the backend trait. A fused op (CTC's forward-backward, a recurrent
//! cell, softmax, cross-entropy, batch norm, the SGD step, top-k) is one kernel per device
//! written for one purpose; it carries its CPU and its CUDA forward itself, beside its
//! tensor function and its backward in `ops/`, so that
//! [`BackendStorage`](super::BackendStorage) holds only the primitives every device must
//! provide and a new fused op touches no backend's trait impl. [`Storage::run`] and
//! [`Storage::run_in_place`] check that every operand lives on one device and call that
//! device's forward (candle's CustomOp, without autograd: the tensor function records the
//! backward, see `ops::custom`).

use super::dispatch::{cpu_of, cuda_of, Storage};
use crate::cpu::CpuStorage;
use crate::cuda::CudaStorage;
use crate::{Device, Error, Result};

/// A fused op that computes new storages from its inputs.
pub(crate) trait Fused {
    /// Names the op in errors.
    const NAME: &'static str;
    /// The outputs from inputs that all live on the CPU.
    fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>>;
    /// The outputs from inputs that all live on one GPU, queued on its compute stream.
    fn cuda(&self, inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>>;
}

/// A fused op that updates `targets` in place from `inputs`.
pub(crate) trait FusedInPlace {
    const NAME: &'static str;
    fn cpu(&self, targets: &mut [&mut CpuStorage], inputs: &[&CpuStorage]) -> Result<()>;
    fn cuda(&self, targets: &mut [&mut CudaStorage], inputs: &[&CudaStorage]) -> Result<()>;
}

/// The device every operand must share: the first's, or a mismatch naming the first other.
fn one_device<'a>(op: &'static str, mut all: impl Iterator<Item = &'a Storage>) -> Result<Device> {
    let first = all
        .next()
        .ok_or_else(|| Error::msg(format!("{op}: no operands")))?
        .device();
    match all.map(|s| s.device()).find(|&d| d != first) {
        Some(other) => Err(Error::DeviceMismatch {
            op,
            lhs: first,
            rhs: other,
        }),
        None => Ok(first),
    }
}

/// The targets of an in-place op as one backend's storage (after [`one_device`], a miss
/// is a bug).
fn targets_as<'b, T>(
    op: &'static str,
    xs: &'b mut [&mut Storage],
    pick: impl Fn(&'b mut Storage) -> Option<&'b mut T>,
) -> Result<Vec<&'b mut T>> {
    xs.iter_mut()
        .map(|s| pick(s).ok_or_else(|| Error::msg(format!("{op}: operands on mixed devices"))))
        .collect()
}

impl Storage {
    /// Runs `op` on the device its inputs share; its `N` outputs.
    pub(crate) fn run<F: Fused, const N: usize>(
        op: &F,
        inputs: &[&Storage],
    ) -> Result<[Storage; N]> {
        let outs = Storage::run_all(op, inputs)?;
        let got = outs.len();
        outs.try_into()
            .map_err(|_| Error::msg(format!("{}: {got} outputs, expected {N}", F::NAME)))
    }

    /// Runs `op` on the device its inputs share; as many outputs as it makes.
    pub(crate) fn run_all<F: Fused>(op: &F, inputs: &[&Storage]) -> Result<Vec<Storage>> {
        let first = *inputs
            .first()
            .ok_or_else(|| Error::msg(format!("{}: no operands", F::NAME)))?;
        Ok(match first {
            Storage::Cuda(_) => {
                let xs = inputs.iter().map(|s| cuda_of(F::NAME, s, first));
                let xs = xs.collect::<Result<Vec<_>>>()?;
                op.cuda(&xs)?.into_iter().map(Storage::Cuda).collect()
            }
            Storage::Cpu(_) => {
                let xs = inputs.iter().map(|s| cpu_of(F::NAME, s, first));
                let xs = xs.collect::<Result<Vec<_>>>()?;
                op.cpu(&xs)?.into_iter().map(Storage::Cpu).collect()
            }
        })
    }

    fn cpu_mut(&mut self) -> Option<&mut CpuStorage> {
        match self {
            Storage::Cpu(c) => Some(c),
            Storage::Cuda(_) => None,
        }
    }
    fn cuda_mut(&mut self) -> Option<&mut CudaStorage> {
        match self {
            Storage::Cuda(c) => Some(c),
            Storage::Cpu(_) => None,
        }
    }

    /// Runs `op` in place on `targets` on the device they share with `inputs`.
    pub(crate) fn run_in_place<F: FusedInPlace>(
        op: &F,
        targets: &mut [&mut Storage],
        inputs: &[&Storage],
    ) -> Result<()> {
        let all = targets.iter().map(|s| &**s).chain(inputs.iter().copied());
        // After one_device, an input's own device is every operand's.
        match one_device(F::NAME, all)? {
            Device::Cuda(_) => {
                let xs = inputs.iter().map(|s| cuda_of(F::NAME, s, s));
                let xs = xs.collect::<Result<Vec<_>>>()?;
                op.cuda(&mut targets_as(F::NAME, targets, Storage::cuda_mut)?, &xs)
            }
            Device::Cpu => {
                let xs = inputs.iter().map(|s| cpu_of(F::NAME, s, s));
                let xs = xs.collect::<Result<Vec<_>>>()?;
                op.cpu(&mut targets_as(F::NAME, targets, Storage::cpu_mut)?, &xs)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds its two inputs; on the GPU, says so.
    struct Add;
    impl Fused for Add {
        const NAME: &'static str = "add";
        fn cpu(&self, inputs: &[&CpuStorage]) -> Result<Vec<CpuStorage>> {
            match inputs {
                [CpuStorage::F32(a), CpuStorage::F32(b)] => Ok(vec![CpuStorage::F32(
                    a.iter().zip(b).map(|(x, y)| x + y).collect(),
                )]),
                _ => Err(Error::msg("add: two f32 inputs")),
            }
        }
        fn cuda(&self, _inputs: &[&CudaStorage]) -> Result<Vec<CudaStorage>> {
            Err(Error::msg("add: not on the GPU"))
        }
    }

    #[test]
    fn run_calls_the_forward_of_the_inputs_device_and_counts_outputs() {
        let (a, b) = (
            Storage::Cpu(CpuStorage::F32(vec![1.0, 2.0])),
            Storage::Cpu(CpuStorage::F32(vec![10.0, 20.0])),
        );
        let [sum] = Storage::run(&Add, &[&a, &b]).unwrap();
        match sum {
            Storage::Cpu(CpuStorage::F32(v)) => assert_eq!(v, [11.0, 22.0]),
            other => panic!("unexpected {other:?}"),
        }
        let two: Result<[Storage; 2]> = Storage::run(&Add, &[&a, &b]);
        assert!(two
            .unwrap_err()
            .to_string()
            .contains("1 outputs, expected 2"));
        let none = Storage::run_all(&Add, &[]).unwrap_err().to_string();
        assert!(none.contains("add: no operands"), "{none}");
    }
}
