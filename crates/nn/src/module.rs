//! The `Module` trait, the forward context, and `Sequential`.

use tensor::{Result, Rng, Tensor};

/// Per-forward state: training or evaluation mode, and the RNG dropout draws from.
pub struct Ctx {
    pub training: bool,
    pub rng: Rng,
}

impl Ctx {
    pub fn train(seed: u64) -> Self {
        Ctx {
            training: true,
            rng: Rng::new(seed),
        }
    }
    pub fn eval() -> Self {
        Ctx {
            training: false,
            rng: Rng::new(0),
        }
    }
}

/// A parameter or buffer with its dotted name.
#[derive(Clone, Debug)]
pub struct NamedTensor {
    pub name: String,
    pub tensor: Tensor,
}

impl NamedTensor {
    /// `tensor` (a handle: the same storage) under the name `prefix.name`.
    pub fn at(prefix: &str, name: &str, tensor: &Tensor) -> Self {
        NamedTensor {
            name: join(prefix, name),
            tensor: tensor.clone(),
        }
    }
}

/// Joins a prefix and a local name with a dot (no leading dot at the root).
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

pub trait Module: Send + Sync {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor>;
    /// Appends this module's parameters (autograd variables), in registration order.
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>);
    /// Appends non-trainable state (running statistics). Default: none.
    fn buffers(&self, _prefix: &str, _out: &mut Vec<NamedTensor>) {}

    /// All parameters with their full names.
    fn named_params(&self) -> Vec<NamedTensor> {
        let mut v = Vec::new();
        self.params("", &mut v);
        v
    }
    fn named_buffers(&self) -> Vec<NamedTensor> {
        let mut v = Vec::new();
        self.buffers("", &mut v);
        v
    }
    /// Number of trainable scalars.
    fn param_count(&self) -> usize {
        self.named_params()
            .iter()
            .map(|p| p.tensor.elem_count())
            .sum()
    }
}

/// Modules applied in order; children are named by their index (`0`, `1`, …) unless given
/// a name.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<(String, Box<dyn Module>)>,
}

impl Sequential {
    pub fn new() -> Self {
        Sequential::default()
    }
    /// Appends a layer named by its position.
    pub fn push(mut self, m: impl Module + 'static) -> Self {
        let name = self.layers.len().to_string();
        self.layers.push((name, Box::new(m)));
        self
    }
    /// Appends a layer with an explicit name (for PyTorch-compatible parameter names).
    pub fn push_named(mut self, name: &str, m: impl Module + 'static) -> Self {
        self.layers.push((name.to_string(), Box::new(m)));
        self
    }
    pub fn len(&self) -> usize {
        self.layers.len()
    }
    /// Runs only the layers in `range` (a model that acts between two of them, e.g. to
    /// mask padded frames, without renaming the layers' parameters).
    pub fn forward_layers(
        &self,
        x: &Tensor,
        ctx: &mut Ctx,
        range: std::ops::Range<usize>,
    ) -> Result<Tensor> {
        let layers = self.layers.get(range.clone()).ok_or_else(|| {
            crate::Error::msg(format!(
                "Sequential::forward_layers: {range:?} is outside its {} layers",
                self.layers.len()
            ))
        })?;
        let mut h = x.clone();
        for (_, l) in layers {
            h = l.forward(&h, ctx)?;
        }
        Ok(h)
    }
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        let mut h = x.clone();
        for (_, l) in &self.layers {
            h = l.forward(&h, ctx)?;
        }
        Ok(h)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        for (name, l) in &self.layers {
            l.params(&join(prefix, name), out);
        }
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        for (name, l) in &self.layers {
            l.buffers(&join(prefix, name), out);
        }
    }
}
