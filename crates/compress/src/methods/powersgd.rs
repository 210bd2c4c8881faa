//! PowerSGD (Vogels, Karimireddy & Jaggi, 2019) as PyTorch's DDP communication hook
//! (`powerSGD_hook`) defines it: each matrix-shaped gradient `M` (the first dimension by
//! the rest; with `batched`, every tensor zero-padded into a ⌈√n⌉ × ⌈√n⌉ square, as
//! `batched_powerSGD_hook` does with a whole bucket) is sent as a rank-`r` approximation
//! by one step of subspace iteration:
//!
//! 1. `M += E` (error feedback: what earlier approximations left out);
//! 2. `P = M Q`, allreduced (summed), orthonormalised by Gram–Schmidt;
//! 3. `Q = Mᵀ P`, allreduced and averaged;
//! 4. the update is `P Qᵀ` (the average gradient projected on the shared `P`), and
//!    `E = M − P Qᵀ`; `Q` is kept for the next step (warm start).
//!
//! `Q` starts from normal values drawn from the job's seed (the same on every rank, so the
//! ranks' `P`s share a basis) and is orthonormalised once. Before `start_iter` steps every
//! tensor is allreduced dense, as are vectors (unless batched) and matrices whose
//! compression rate `n·m / ((n + m)·r)` is not above `min_compression_rate`. The wire per
//! compressed tensor and step: `(n + m)·r` f32 values in two allreduces.
//!
//! Where ours differs from the hook: the hook works on DDP's buckets and keeps one error
//! for the whole bucket, so the tensors it sends dense also carry an "error" (the rank's
//! value minus the average), which cancels in the next average; here a tensor sent dense
//! keeps no error, which gives the same averages without the memory. A column whose norm
//! is 0 (a zero gradient) is left at 0 rather than divided by 0 (the hook's default
//! epsilon of 0 would give NaN).
//!
//! The method runs on tensors (any device, over any `ProcessGroup`); on slices it runs the
//! same code on CPU tensors over the TCP communicator.

use crate::exchange::{check_numel, dense_average_tensor, Meter};
use crate::method::{
    Method, ParamSpec, StateTensors, StepInfo, TensorExchange, TensorUpdate, UpdateKind,
};
use crate::{CompressError, Result};
use comm::ReduceOp;
use tensor::{DType, Device, Rng, Tensor};

#[derive(Clone, Debug, PartialEq)]
pub struct PowerSgdConfig {
    /// The approximation's rank r.
    pub rank: usize,
    /// Steps allreduced dense before compression starts.
    pub start_iter: u64,
    /// Matrices compressing less than this (n·m / ((n + m)·r)) are sent dense.
    pub min_compression_rate: f64,
    pub error_feedback: bool,
    pub warm_start: bool,
    /// Every tensor as a zero-padded square (PyTorch's batched variant).
    pub batched: bool,
    /// The seed of the initial Q (the job's, the same on every rank).
    pub seed: u64,
}

/// A compressed parameter's shape as a matrix, and its state.
struct Compressed {
    rows: usize,
    cols: usize,
    /// `E`, `[rows·cols]` (padding included), when error feedback is on.
    error: Option<Tensor>,
    /// `Q`, `[cols, r]`.
    q: Tensor,
}

pub struct PowerSgd {
    cfg: PowerSgdConfig,
    sizes: Vec<usize>,
    /// Per parameter: `Some` where it is compressed (from `start_iter` on).
    state: Vec<Option<Compressed>>,
    step: u64,
    device: Device,
}

/// The matrix a parameter of `shape` is sent as: `(rows, cols)`, or None where it goes
/// dense (a vector unless batched, or too little compression).
fn matrix_of(shape: &[usize], cfg: &PowerSgdConfig) -> Option<(usize, usize)> {
    let n: usize = shape.iter().product();
    let (rows, cols) = if cfg.batched {
        let s = (n as f64).sqrt().ceil() as usize;
        // The float square root can be one off for large n.
        let s = (s.saturating_sub(1)..=s + 1).find(|s| s * s >= n)?;
        (s, s)
    } else {
        if shape.len() < 2 {
            return None;
        }
        (shape[0], n / shape[0].max(1))
    };
    // The hook's test, strict as it is: compressed·rate < uncompressed.
    let r = cfg.rank.min(rows).min(cols);
    let compressed = ((rows + cols) * r) as f64;
    (n > 0 && compressed * cfg.min_compression_rate < (rows * cols) as f64).then_some((rows, cols))
}

/// Values a parameter of `shape` puts on the wire per step once compressing:
/// `(rows + cols)·r` where it is compressed, else all of them (the arithmetic of the
/// compression ratio, the same as PyTorch's hook for the same shapes).
pub fn wire_values(shape: &[usize], cfg: &PowerSgdConfig) -> usize {
    match matrix_of(shape, cfg) {
        Some((rows, cols)) => (rows + cols) * cfg.rank.min(rows).min(cols),
        None => shape.iter().product(),
    }
}

/// Orthonormalises the columns of `m` (`[n, r]`) by Gram–Schmidt, in place of a QR: each
/// column divided by its norm (a zero column stays zero), then removed from the later
/// ones.
pub fn orthonormalize(m: &Tensor) -> Result<Tensor> {
    let r = m.dims()[1];
    let mut cols: Vec<Tensor> = (0..r)
        .map(|i| m.narrow(1, i, 1)?.contiguous())
        .collect::<tensor::Result<_>>()?;
    let tiny = Tensor::full(f32::MIN_POSITIVE as f64, vec![1, 1], DType::F32, m.device())?;
    for i in 0..r {
        let norm = cols[i].sqr()?.sum(&[0], true)?.sqrt()?.maximum(&tiny)?;
        cols[i] = cols[i].div(&norm)?;
        for j in i + 1..r {
            let dot = cols[i].mul(&cols[j])?.sum(&[0], true)?;
            cols[j] = cols[j].sub(&cols[i].mul(&dot)?)?;
        }
    }
    Ok(Tensor::cat(&cols, 1)?)
}

impl PowerSgd {
    pub fn new(cfg: PowerSgdConfig) -> Result<Self> {
        if cfg.rank == 0 {
            return Err(CompressError::Config(
                "powersgd: rank must be at least 1".into(),
            ));
        }
        if !(cfg.min_compression_rate >= 0.0 && cfg.min_compression_rate.is_finite()) {
            return Err(CompressError::Config(format!(
                "powersgd: min_compression_rate must be a finite number ≥ 0, got {}",
                cfg.min_compression_rate
            )));
        }
        Ok(PowerSgd {
            cfg,
            sizes: Vec::new(),
            state: Vec::new(),
            step: 0,
            device: Device::Cpu,
        })
    }

    fn exchange_on(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        let (group, index, grad) = (x.comm, x.index, x.grad);
        let n = check_numel("powersgd", index, self.sizes.get(index).copied(), grad)?;
        let compressing = self.step >= self.cfg.start_iter;
        let Some(st) = self.state.get_mut(index).and_then(Option::as_mut) else {
            return dense_average_tensor(group, grad);
        };
        if !compressing {
            return dense_average_tensor(group, grad);
        }
        let (rows, cols) = (st.rows, st.cols);
        let r = st.q.dims()[1];
        let mut m = Meter::new(n);
        let mat = m.compress(|| -> Result<Tensor> {
            let mut flat = grad.flatten_all()?;
            if rows * cols > n {
                let pad = Tensor::zeros(rows * cols - n, DType::F32, flat.device())?;
                flat = Tensor::cat(&[flat, pad], 0)?;
            }
            if let Some(e) = &st.error {
                flat = flat.add(e)?;
            }
            Ok(flat.reshape(vec![rows, cols])?)
        })?;
        let p = m.compress(|| mat.matmul(&st.q))?;
        m.comm(|| group.allreduce(&p, ReduceOp::Sum))?;
        let p = m.compress(|| orthonormalize(&p))?;
        let q = m.compress(|| mat.transpose_last()?.matmul(&p)?.contiguous())?;
        m.comm(|| group.allreduce(&q, ReduceOp::Average))?;
        let approx = m.decompress(|| p.matmul(&q.transpose_last()?))?;
        if let Some(e) = &mut st.error {
            *e = m.compress(|| mat.sub(&approx)?.flatten_all())?;
        }
        if self.cfg.warm_start {
            st.q = q;
        } else {
            st.q = initial_q(self.cfg.seed, index, cols, r, self.device)?;
        }
        m.stats.sent_values = (rows + cols) * r;
        m.stats.message_bytes = 4 * (rows + cols) * r;
        let values = m.decompress(|| -> Result<Tensor> {
            let flat = approx.flatten_all()?;
            let flat = if rows * cols > n {
                flat.narrow(0, 0, n)?.contiguous()?
            } else {
                flat
            };
            Ok(flat.reshape(grad.dims())?)
        })?;
        Ok(m.tensor_update(values, UpdateKind::Gradient))
    }
}

/// Parameter `index`'s first Q: normal values from the job's seed (the same on every
/// rank), orthonormalised.
fn initial_q(seed: u64, index: usize, cols: usize, r: usize, device: Device) -> Result<Tensor> {
    let mut rng = Rng::new(tensor::quantize::counter_key(&[seed, 0x505, index as u64]));
    let q = Tensor::randn(vec![cols, r], 0.0, 1.0, DType::F32, Device::Cpu, &mut rng)?;
    Ok(orthonormalize(&q)?.to_device(device)?)
}

impl Method for PowerSgd {
    fn name(&self) -> &'static str {
        "powersgd"
    }
    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "powersgd(rank={}, start_iter={}, min_compression_rate={}, error_feedback={}, warm_start={}, batched={})",
            c.rank, c.start_iter, c.min_compression_rate, c.error_feedback, c.warm_start, c.batched
        )
    }
    fn init(&mut self, params: &[ParamSpec]) -> Result<()> {
        self.sizes = params.iter().map(ParamSpec::numel).collect();
        self.device = Device::Cpu;
        self.state = params
            .iter()
            .enumerate()
            .map(|(i, p)| -> Result<Option<Compressed>> {
                let Some((rows, cols)) = matrix_of(&p.shape, &self.cfg) else {
                    return Ok(None);
                };
                let r = self.cfg.rank.min(rows).min(cols);
                Ok(Some(Compressed {
                    rows,
                    cols,
                    error: self
                        .cfg
                        .error_feedback
                        .then(|| Tensor::zeros(rows * cols, DType::F32, Device::Cpu))
                        .transpose()?,
                    q: initial_q(self.cfg.seed, i, cols, r, Device::Cpu)?,
                }))
            })
            .collect::<Result<_>>()?;
        Ok(())
    }
    fn begin_step(&mut self, info: StepInfo) {
        self.step = info.step;
    }
    fn place(&mut self, device: Device) -> Result<()> {
        for st in self.state.iter_mut().flatten() {
            st.q = st.q.to_device(device)?;
            if let Some(e) = &mut st.error {
                *e = e.to_device(device)?;
            }
        }
        self.device = device;
        Ok(())
    }
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate> {
        tensor::no_grad(|| self.exchange_on(x))
    }
    fn state(&self) -> Result<StateTensors> {
        let mut out = Vec::new();
        for (i, st) in self.state.iter().enumerate() {
            let Some(st) = st else { continue };
            out.push((format!("q.{i}"), st.q.flatten_all()?.to_vec::<f32>()?));
            if let Some(e) = &st.error {
                out.push((format!("error.{i}"), e.to_vec::<f32>()?));
            }
        }
        Ok(out)
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        let mut used = 0;
        let device = self.device;
        for (i, st) in self.state.iter_mut().enumerate() {
            let Some(st) = st else { continue };
            let mut take = |name: String, want: usize| -> Result<Vec<f32>> {
                let (_, v) = state.iter().find(|(k, _)| *k == name).ok_or_else(|| {
                    CompressError::Usage(format!("powersgd: the checkpoint has no state '{name}'"))
                })?;
                if v.len() != want {
                    return Err(CompressError::Usage(format!(
                        "powersgd: state '{name}' has {} values in the checkpoint, {want} in this model",
                        v.len()
                    )));
                }
                used += 1;
                Ok(v.clone())
            };
            let r = st.q.dims()[1];
            let q = take(format!("q.{i}"), st.cols * r)?;
            st.q = Tensor::from_vec(q, vec![st.cols, r], device)?;
            if let Some(e) = &mut st.error {
                let v = take(format!("error.{i}"), st.rows * st.cols)?;
                *e = Tensor::from_vec(v, st.rows * st.cols, device)?;
            }
        }
        if used != state.len() {
            return Err(CompressError::Usage(format!(
                "powersgd: the checkpoint holds {} state tensors, this configuration {used}",
                state.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::HostExchange;
    use comm::{CommConfig, Communicator};

    fn one_rank() -> Communicator {
        Communicator::connect(&CommConfig::loopback(0, 1, 0, b"powersgd")).expect("one rank")
    }

    fn cfg(rank: usize) -> PowerSgdConfig {
        PowerSgdConfig {
            rank,
            start_iter: 0,
            min_compression_rate: 0.0,
            error_feedback: false,
            warm_start: true,
            batched: false,
            seed: 5,
        }
    }

    /// Gram–Schmidt in f64 on row-major `[n, r]`.
    fn gram_schmidt(m: &mut [f64], n: usize, r: usize) {
        for i in 0..r {
            let norm = (0..n).map(|k| m[k * r + i].powi(2)).sum::<f64>().sqrt();
            (0..n).for_each(|k| m[k * r + i] /= norm);
            for j in i + 1..r {
                let dot: f64 = (0..n).map(|k| m[k * r + i] * m[k * r + j]).sum();
                (0..n).for_each(|k| m[k * r + j] -= dot * m[k * r + i]);
            }
        }
    }

    /// One rank's update against the same power iteration computed directly in f64 from
    /// the method's Q: P = M Q, orthonormalised, Q = Mᵀ P, update P Qᵀ.
    fn direct(m: &[f32], q0: &[f32], n: usize, c: usize, r: usize) -> Vec<f64> {
        let mut p = vec![0f64; n * r];
        for i in 0..n {
            for k in 0..r {
                p[i * r + k] = (0..c)
                    .map(|j| m[i * c + j] as f64 * q0[j * r + k] as f64)
                    .sum();
            }
        }
        gram_schmidt(&mut p, n, r);
        let mut q = vec![0f64; c * r];
        for j in 0..c {
            for k in 0..r {
                q[j * r + k] = (0..n).map(|i| m[i * c + j] as f64 * p[i * r + k]).sum();
            }
        }
        (0..n * c)
            .map(|x| {
                let (i, j) = (x / c, x % c);
                (0..r).map(|k| p[i * r + k] * q[j * r + k]).sum()
            })
            .collect()
    }

    fn run_one(rank: usize, n: usize, c: usize) -> (Vec<f32>, Vec<f64>, Vec<f32>) {
        let mut rng = Rng::new(11);
        let m: Vec<f32> = (0..n * c).map(|_| rng.normal() as f32).collect();
        let mut ps = PowerSgd::new(cfg(rank)).unwrap();
        ps.init(&[ParamSpec::new("w", &[n, c])]).unwrap();
        let q0 = ps.state().unwrap()[0].1.clone();
        let u = ps
            .exchange(HostExchange::new(&mut one_rank(), 0, &m))
            .unwrap();
        (u.values, direct(&m, &q0, n, c, rank.min(n).min(c)), m)
    }

    #[test]
    fn the_update_is_one_power_iteration_from_q() {
        let (got, want, _) = run_one(3, 30, 20);
        let scale = want.iter().map(|x| x * x).sum::<f64>().sqrt() / (want.len() as f64).sqrt();
        for (g, w) in got.iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-4 * scale, "{g} vs {w}");
        }
    }

    #[test]
    fn a_rank_of_the_smaller_side_sends_the_gradient_itself() {
        let (got, _, m) = run_one(20, 30, 20);
        for (g, x) in got.iter().zip(&m) {
            assert!((g - x).abs() < 1e-4, "{g} vs {x}");
        }
    }

    #[test]
    fn vectors_and_thin_matrices_go_dense_unless_batched() {
        let c = PowerSgdConfig {
            min_compression_rate: 2.0,
            ..cfg(1)
        };
        assert_eq!(matrix_of(&[100], &c), None);
        assert_eq!(matrix_of(&[64, 3, 3, 3], &c), Some((64, 27)));
        // 2 × 3 at rank 1: 6 / 5 < 2.
        assert_eq!(matrix_of(&[2, 3], &c), None);
        let b = PowerSgdConfig { batched: true, ..c };
        assert_eq!(matrix_of(&[100], &b), Some((10, 10)));
        assert_eq!(matrix_of(&[101], &b), Some((11, 11)));
        assert_eq!(matrix_of(&[3], &b), None);
    }

    #[test]
    fn a_zero_gradient_gives_a_zero_update_not_nan() {
        let mut ps = PowerSgd::new(cfg(2)).unwrap();
        ps.init(&[ParamSpec::new("w", &[10, 8])]).unwrap();
        let u = ps
            .exchange(HostExchange::new(&mut one_rank(), 0, &[0.0; 80]))
            .unwrap();
        assert!(u.values.iter().all(|&v| v == 0.0), "{:?}", &u.values[..4]);
    }

    #[test]
    fn state_round_trips_and_wrong_state_is_refused() {
        let c = PowerSgdConfig {
            error_feedback: true,
            ..cfg(2)
        };
        let mut a = PowerSgd::new(c.clone()).unwrap();
        a.init(&[ParamSpec::new("w", &[10, 8]), ParamSpec::new("b", &[10])])
            .unwrap();
        let g: Vec<f32> = (0..80).map(|i| (i as f32 * 0.37).sin()).collect();
        a.exchange(HostExchange::new(&mut one_rank(), 0, &g))
            .unwrap();
        let s = a.state().unwrap();
        let names: Vec<&str> = s.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["q.0", "error.0"]);
        let mut b = PowerSgd::new(c).unwrap();
        b.init(&[ParamSpec::new("w", &[10, 8]), ParamSpec::new("b", &[10])])
            .unwrap();
        b.load_state(&s).unwrap();
        let (ua, ub) = (
            a.exchange(HostExchange::new(&mut one_rank(), 0, &g))
                .unwrap(),
            b.exchange(HostExchange::new(&mut one_rank(), 0, &g))
                .unwrap(),
        );
        assert_eq!(ua.values, ub.values);
        assert!(b.load_state(&s[..1].to_vec()).is_err());
    }
}
