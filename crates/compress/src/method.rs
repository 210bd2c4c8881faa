//! The interface every gradient-exchange method implements.
//!
//! A method owns the whole exchange of one parameter's gradient: its per-parameter state
//! (residual, momentum, a copy of the weights at the last synchronisation), selection or
//! quantisation, encoding, the collective, decoding and aggregation. The trainer calls,
//! per step and on every rank in the same order:
//!
//! 1. [`Method::begin_step`] with the step and epoch (warm-up schedules read them);
//! 2. [`Method::exchange`] (or [`Method::exchange_tensor`]) for each parameter as its
//!    gradient becomes final (on the compression thread, while backward continues), with
//!    an [`Exchange`] that carries the parameter's index, gradient and weights; it
//!    returns an [`Update`];
//! 3. the optimizer applies each update (see [`UpdateKind`]);
//! 4. [`Method::after_step`] for each parameter, in index order: methods with
//!    communication delay (SBC, FedAvg) or periodic averaging (`local`) communicate here;
//!    then [`Method::take_momentum_mask`] names the positions whose optimizer momentum
//!    the trainer zeros (SBC's momentum masking).
//!
//! Scale convention: every method returns the *average* over workers (the papers' sums
//! divided by the world size), so the learning rate means the same as for dense SGD.

use crate::Result;
use comm::{Communicator, ProcessGroup};
use tensor::{Device, Tensor};

/// What the trainer tells a method about one parameter, once, before training.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

impl ParamSpec {
    pub fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        ParamSpec {
            name: name.into(),
            shape: shape.to_vec(),
        }
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One parameter's turn in the exchange, as the trainer hands it to a method (the part
/// PyTorch DDP's `GradBucket` plays for a communication hook): the collectives to use,
/// the parameter's position in the model's order (the same on every rank), its local
/// gradient, and its current weights where the method [`Method::reads_weights`]. One
/// struct rather than four arguments, so that what a method is told can grow without
/// touching every method; [`HostExchange`] and [`TensorExchange`] name its two forms.
pub struct Exchange<'a, C: ?Sized, G: ?Sized> {
    pub comm: &'a mut C,
    pub index: usize,
    pub grad: &'a G,
    /// `None` where the method does not read them.
    pub weights: Option<&'a G>,
}

/// [`Method::exchange`]'s turn: the TCP communicator and host slices.
pub type HostExchange<'a> = Exchange<'a, Communicator, [f32]>;
/// [`Method::exchange_tensor`]'s turn: any [`ProcessGroup`] (TCP or NCCL) and tensors on
/// its device.
pub type TensorExchange<'a> = Exchange<'a, dyn ProcessGroup + 'a, Tensor>;

impl<'a> HostExchange<'a> {
    /// Parameter `index`'s gradient `grad`, to exchange over `comm`; no weights.
    pub fn new(comm: &'a mut Communicator, index: usize, grad: &'a [f32]) -> Self {
        Exchange {
            comm,
            index,
            grad,
            weights: None,
        }
    }
}

impl<'a> TensorExchange<'a> {
    /// Parameter `index`'s gradient `grad`, to exchange over `group`; no weights.
    pub fn new(group: &'a mut (dyn ProcessGroup + 'a), index: usize, grad: &'a Tensor) -> Self {
        Exchange {
            comm: group,
            index,
            grad,
            weights: None,
        }
    }
}

impl<'a, C: ?Sized, G: ?Sized> Exchange<'a, C, G> {
    /// The same turn with the parameter's current weights. A caller whose weights may be
    /// absent sets the field: `Exchange { weights, ..TensorExchange::new(g, i, grad) }`.
    pub fn with_weights(self, weights: &'a G) -> Self {
        Exchange {
            weights: Some(weights),
            ..self
        }
    }
}

/// One parameter's turn after the optimizer step ([`Method::after_step`]): the
/// collectives, the parameter's position, and its weights, which a method that
/// synchronises them (delay, periodic averaging) overwrites. [`HostAfterStep`] and
/// [`TensorAfterStep`] name its two forms. `W` is the weights' reference itself (where
/// [`Exchange`] is generic over the data) because the two differ in kind: the host's
/// slice is written through `&mut`, a tensor in place through a shared reference.
pub struct AfterStep<'a, C: ?Sized, W> {
    pub comm: &'a mut C,
    pub index: usize,
    pub weights: W,
}

/// [`Method::after_step`]'s turn: the TCP communicator and the weights on the host.
pub type HostAfterStep<'a> = AfterStep<'a, Communicator, &'a mut [f32]>;
/// [`Method::after_step_tensor`]'s turn: any [`ProcessGroup`] and the weights' tensor on
/// its device.
pub type TensorAfterStep<'a> = AfterStep<'a, dyn ProcessGroup + 'a, &'a Tensor>;

impl<'a> HostAfterStep<'a> {
    /// Parameter `index`'s weights, synchronised over `comm` where the method does.
    pub fn new(comm: &'a mut Communicator, index: usize, weights: &'a mut [f32]) -> Self {
        AfterStep {
            comm,
            index,
            weights,
        }
    }
}

impl<'a> TensorAfterStep<'a> {
    /// Parameter `index`'s weights, synchronised over `group` where the method does.
    pub fn new(group: &'a mut (dyn ProcessGroup + 'a), index: usize, weights: &'a Tensor) -> Self {
        AfterStep {
            comm: group,
            index,
            weights,
        }
    }
}

/// Where training is: the global step (from 0) and the epoch as a fraction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepInfo {
    pub step: u64,
    pub epoch: f64,
}

/// How the optimizer must apply an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateKind {
    /// An (averaged) gradient: the optimizer applies its momentum and weight decay.
    Gradient,
    /// A step direction that already contains momentum and weight decay (DGC's momentum
    /// correction): apply `w -= lr * d` and nothing else.
    Direction,
}

/// What one exchange put on the wire, for this rank and this parameter.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WireStats {
    /// Elements of the parameter.
    pub elements: usize,
    /// Values this rank contributed (nonzeros for sparse methods, all for dense ones).
    pub sent_values: usize,
    /// Bytes of this rank's encoded message, as the paper's compression ratio counts them
    /// (SBC's leave out the count and b* that its wire format adds: `methods::sbc`).
    pub message_bytes: usize,
    /// Bytes the same tensor takes as dense f32 (4 per element).
    pub dense_bytes: usize,
    /// Seconds spent selecting, quantising and encoding (with the residual bookkeeping).
    pub compress_seconds: f64,
    /// Seconds spent decoding and aggregating what the ranks sent.
    pub decompress_seconds: f64,
    /// Seconds spent inside collectives.
    pub comm_seconds: f64,
}

impl WireStats {
    /// Fraction of the elements this rank sent.
    pub fn density(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            self.sent_values as f64 / self.elements as f64
        }
    }
    pub fn add(&mut self, o: &WireStats) {
        self.elements += o.elements;
        self.sent_values += o.sent_values;
        self.message_bytes += o.message_bytes;
        self.dense_bytes += o.dense_bytes;
        self.compress_seconds += o.compress_seconds;
        self.decompress_seconds += o.decompress_seconds;
        self.comm_seconds += o.comm_seconds;
    }
    /// Adds what [`Method::after_step`] sent for a parameter whose step this already holds
    /// (the synchronisation of a method with communication delay or periodic averaging):
    /// its values, bytes and seconds count, but not its elements or dense bytes again, so
    /// that the dense equivalent stays one dense message per parameter and step, and the
    /// density the fraction of a step's elements sent.
    pub fn add_sync(&mut self, o: &WireStats) {
        self.add(&WireStats {
            elements: 0,
            dense_bytes: 0,
            ..*o
        });
    }
}

/// The result of [`Method::exchange`] for one parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    pub values: Vec<f32>,
    pub kind: UpdateKind,
    pub stats: WireStats,
}

/// The result of [`Method::exchange_tensor`]: the update as a tensor of the gradient's
/// shape on its device.
#[derive(Clone, Debug)]
pub struct TensorUpdate {
    pub values: Tensor,
    pub kind: UpdateKind,
    pub stats: WireStats,
}

/// Per-parameter state that a checkpoint must hold for a bit-exact resume.
pub type StateTensors = Vec<(String, Vec<f32>)>;

pub trait Method: Send {
    /// The method's name as chosen on the command line.
    fn name(&self) -> &'static str;
    /// Its resolved options, e.g. `dgc(density=0.001, momentum_correction=true, ...)`.
    fn describe(&self) -> String;
    /// Called once, before the first step, with every parameter in order (the same
    /// order on every rank).
    fn init(&mut self, params: &[ParamSpec]) -> Result<()>;
    fn begin_step(&mut self, _info: StepInfo) {}
    /// Exchanges the local gradient of parameter `x.index` (with its current weights
    /// where [`Method::reads_weights`]) and returns what the optimizer applies. By
    /// default, a method written on tensors alone runs its [`Method::exchange_tensor`] on
    /// CPU tensors over the TCP communicator (one code path for both).
    fn exchange(&mut self, x: HostExchange<'_>) -> Result<Update> {
        let w = x
            .weights
            .map(|w| Tensor::from_vec(w.to_vec(), w.len(), Device::Cpu))
            .transpose()?;
        let (name, index) = (self.name(), x.index);
        crate::exchange::on_cpu_tensors(name, x.comm, x.grad, |group, grad| {
            self.exchange_tensor(Exchange {
                weights: w.as_ref(),
                ..TensorExchange::new(group, index, grad)
            })
        })
    }
    /// After the optimizer has applied this step's updates: methods that communicate
    /// weights (delay, periodic averaging) do so here and may overwrite `x.weights`.
    /// Returns what went on the wire, if anything.
    fn after_step(&mut self, _x: HostAfterStep<'_>) -> Result<Option<WireStats>> {
        Ok(None)
    }
    /// The positions of parameter `index` whose optimizer momentum the trainer must zero,
    /// because the last [`Method::after_step`] sent them: momentum factor masking for a
    /// method whose momentum lives in the optimizer (SBC, paper 003 §VII-A, after DGC
    /// §3.2). Taken once: a second call before the next `after_step` returns nothing. The
    /// trainer asks after every `after_step`, so a method that masks must return the
    /// positions of that call, in the parameter's coordinates, ascending.
    fn take_momentum_mask(&mut self, _index: usize) -> Vec<u32> {
        Vec::new()
    }
    /// Whether the method applies momentum and weight decay itself and returns
    /// [`UpdateKind::Direction`] updates (DGC's momentum correction), taking over momentum
    /// SGD's role: the trainer then needs SGD, whose momentum and decay it was given.
    fn replaces_optimizer(&self) -> bool {
        false
    }
    /// Whether [`Method::exchange`] reads the weights. The trainer copies a parameter's
    /// weights out for the exchange only when it does (DGC with momentum correction and
    /// weight decay, SBC); the others are passed none (`weights: None`).
    fn reads_weights(&self) -> bool {
        false
    }
    /// How many epochs the method's density warm-up lasts (0: none): before then it
    /// sends more than its `density`, which a run shorter than this never reaches (the
    /// trainer says so).
    fn warmup_epochs(&self) -> f64 {
        0.0
    }
    /// Every how many steps [`Method::after_step`] communicates (`None`: never), so the
    /// trainer copies the weights out only when it will.
    fn after_step_every(&self) -> Option<u64> {
        None
    }
    /// Why this configuration exchanges only over the TCP communicator (`None`: over any
    /// [`ProcessGroup`]); the trainer refuses it with NCCL or a hierarchical exchange
    /// before any worker starts.
    fn tcp_only(&self) -> Option<&'static str> {
        None
    }
    /// Keeps the per-parameter state on `device` from now on (moving what it holds; after
    /// [`Method::init`], before the first [`Method::exchange_tensor`]), so that the state
    /// lives where the gradients do.
    fn place(&mut self, device: Device) -> Result<()>;
    /// [`Method::exchange`] on tensors, the trainer's exchange: the gradient (and the
    /// weights, when [`Method::reads_weights`]) on the group's device, the collectives
    /// those of `x.comm` (TCP or NCCL), the update returned on the same device. Same
    /// results as the slices' exchange, bit for bit where the method's tests say so.
    fn exchange_tensor(&mut self, x: TensorExchange<'_>) -> Result<TensorUpdate>;
    /// [`Method::after_step`] on tensors: the parameter's weights on the group's device,
    /// overwritten in place where the method synchronises them (the same collectives as
    /// on slices, over `x.comm`). Methods that never communicate after the step return
    /// `None`.
    fn after_step_tensor(&mut self, _x: TensorAfterStep<'_>) -> Result<Option<WireStats>> {
        match self.after_step_every() {
            None => Ok(None),
            Some(_) => Err(crate::CompressError::Usage(format!(
                "{} communicates after the step but has no after_step_tensor",
                self.name()
            ))),
        }
    }
    /// The state a resume needs (residuals, momenta, weight copies, RNG), named, on the
    /// host (a method on tensors copies its state off the device, which can fail).
    fn state(&self) -> Result<StateTensors> {
        Ok(Vec::new())
    }
    fn load_state(&mut self, state: &StateTensors) -> Result<()> {
        if state.is_empty() {
            Ok(())
        } else {
            Err(crate::CompressError::Usage(format!(
                "{} keeps no state, but the checkpoint has {} tensors for it",
                self.name(),
                state.len()
            )))
        }
    }
}
