//! Reverse-mode differentiation and gradient-ready hooks.
//!
//! `backward` sorts the graph below the loss topologically and walks it from the loss
//! down, accumulating gradients. Every node carries a count of the graph edges that
//! consume it; when a variable's count reaches zero its gradient is final, and its hooks
//! fire at that moment, not at the end of the pass. A recurrent weight used at every time
//! step therefore fires once, after its last (earliest-in-time) use. Gradients of
//! intermediate nodes are dropped as soon as they have been propagated.

use crate::op::Op;
use crate::storage::{BackendStorage, BinaryOp, UnaryOp};
use crate::tensor::no_grad;
use crate::{Error, Result, Tensor, TensorId};
use std::collections::HashMap;

/// A callback that receives a variable's final gradient.
pub type GradHook = Box<dyn FnMut(&Tensor) + Send>;

/// Gradients of the variables reached by a backward pass, by tensor id.
#[derive(Default)]
pub struct GradStore(HashMap<TensorId, Tensor>);

impl GradStore {
    pub fn get(&self, t: &Tensor) -> Option<&Tensor> {
        self.0.get(&t.id())
    }
    pub fn get_id(&self, id: TensorId) -> Option<&Tensor> {
        self.0.get(&id)
    }
    pub fn remove(&mut self, t: &Tensor) -> Option<Tensor> {
        self.0.remove(&t.id())
    }
    pub fn insert(&mut self, t: &Tensor, grad: Tensor) -> Option<Tensor> {
        self.0.insert(t.id(), grad)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The nodes that lead to `root` through differentiable edges, inputs before consumers.
fn topological_order(root: &Tensor) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut visited = std::collections::HashSet::new();
    // Iterative post-order DFS: deep graphs (long unrolled RNNs) must not overflow the stack.
    let mut stack: Vec<(Tensor, usize)> = vec![(root.clone(), 0)];
    visited.insert(root.id());
    while let Some((node, child)) = stack.pop() {
        let inputs: Vec<Tensor> = node
            .op()
            .map(|op| op.inputs().into_iter().cloned().collect())
            .unwrap_or_default();
        if let Some(next) = inputs.get(child) {
            stack.push((node.clone(), child + 1));
            if next.tracks_grad() && visited.insert(next.id()) {
                stack.push((next.clone(), 0));
            }
        } else {
            order.push(node);
        }
    }
    order
}

/// Calls `var`'s hooks with its final gradient. They are taken out of the list and called
/// without its lock, so a hook may register or clear hooks on its own variable (it would
/// deadlock otherwise), and a hook that panics does not poison the list for every later
/// backward: the hooks go back (unless one of them cleared the list) before the panic
/// continues.
fn fire_hooks(var: &Tensor, grad: &Tensor) -> Result<()> {
    use std::sync::atomic::Ordering;
    let lock = || {
        var.0
            .hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let cleared = var.0.hooks_cleared.load(Ordering::SeqCst);
    let mut taken = std::mem::take(&mut *lock());
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for hook in taken.iter_mut() {
            hook(grad);
        }
    }));
    {
        let mut hooks = lock();
        if var.0.hooks_cleared.load(Ordering::SeqCst) == cleared {
            // Registered while they ran: after them, in registration order.
            let added = std::mem::take(&mut *hooks);
            *hooks = taken;
            hooks.extend(added);
        }
    }
    if let Err(panic) = called {
        std::panic::resume_unwind(panic);
    }
    Ok(())
}

impl Tensor {
    /// Backpropagates from this scalar (one-element) tensor.
    pub fn backward(&self) -> Result<GradStore> {
        if self.elem_count() != 1 {
            return Err(Error::BadShape {
                op: "backward",
                msg: "needs a one-element loss; use backward_with_grad for other outputs".into(),
                shape: self.shape().clone(),
            });
        }
        self.backward_with_grad(&self.ones_like()?)
    }

    /// Backpropagates `grad` (the gradient of some scalar with respect to this tensor).
    pub fn backward_with_grad(&self, grad: &Tensor) -> Result<GradStore> {
        if grad.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op: "backward_with_grad",
                lhs: self.shape().clone(),
                rhs: grad.shape().clone(),
            });
        }
        no_grad(|| self.backward_inner(grad.clone()))
    }

    fn backward_inner(&self, seed: Tensor) -> Result<GradStore> {
        if !self.tracks_grad() {
            return Err(Error::msg("backward: this tensor does not depend on any variable (was it computed under no_grad?)"));
        }
        let order = topological_order(self);
        let mut pending: HashMap<TensorId, usize> = HashMap::new();
        for node in &order {
            if let Some(op) = node.op() {
                for input in op.inputs() {
                    if input.tracks_grad() {
                        *pending.entry(input.id()).or_default() += 1;
                    }
                }
            }
        }
        let mut grads: HashMap<TensorId, Tensor> = HashMap::new();
        let mut store = GradStore::default();
        grads.insert(self.id(), seed);
        if self.is_variable() {
            let g = grads
                .remove(&self.id())
                .ok_or_else(|| Error::msg("backward: lost the seed gradient"))?;
            fire_hooks(self, &g)?;
            store.insert(self, g);
            return Ok(store);
        }
        for node in order.iter().rev() {
            let Some(op) = node.op() else { continue };
            let grad = grads.remove(&node.id());
            let inputs = op.inputs();
            let input_grads = match &grad {
                Some(g) => {
                    let needs: Vec<bool> = inputs.iter().map(|t| t.tracks_grad()).collect();
                    input_grads(op, node, g, &needs)?
                }
                None => vec![None; inputs.len()],
            };
            for (input, g) in inputs.into_iter().zip(input_grads) {
                if !input.tracks_grad() {
                    continue;
                }
                if let Some(g) = g {
                    let g = if g.shape() != input.shape() {
                        g.reshape(input.shape().clone())?
                    } else {
                        g
                    };
                    match grads.remove(&input.id()) {
                        Some(acc) => grads.insert(input.id(), acc.add(&g)?),
                        None => grads.insert(input.id(), g),
                    };
                }
                let count = pending
                    .get_mut(&input.id())
                    .ok_or_else(|| Error::msg("backward: graph bookkeeping error"))?;
                *count -= 1;
                if *count == 0 && input.is_variable() {
                    // Final: every consumer has contributed. A variable that received no
                    // gradient (only non-differentiable paths) gets zeros, so each hook
                    // fires exactly once per backward.
                    let g = match grads.remove(&input.id()) {
                        Some(g) => g,
                        None => input.zeros_like()?,
                    };
                    fire_hooks(input, &g)?;
                    store.insert(input, g);
                }
            }
        }
        Ok(store)
    }
}

/// One gradient per `op.inputs()` entry (None where not needed or identically zero).
fn input_grads(op: &Op, node: &Tensor, g: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
    let need = |i: usize| needs.get(i).copied().unwrap_or(false);
    Ok(match op {
        Op::Unary(x, u) => vec![unary_grad(x, *u, node, g)?],
        Op::Binary(a, b, op) => binary_grads(a, b, *op, node, g, need(0), need(1))?,
        Op::Where(c, t, f) => {
            let zeros = g.zeros_like()?;
            vec![
                need(0)
                    .then(|| c.where_cond(g, &zeros)?.sum_to(t.shape()))
                    .transpose()?,
                need(1)
                    .then(|| c.where_cond(&zeros, g)?.sum_to(f.shape()))
                    .transpose()?,
            ]
        }
        Op::Sum(x) => vec![Some(g.broadcast_as(x.shape().clone())?)],
        // Ties share the gradient evenly, as PyTorch's amax/amin do, so that the gradient
        // sums to the upstream one whatever the number of ties. `node` has the keepdim
        // shape, so summing the mask back to it counts the ties of each output. Where the
        // extremum is NaN no element equals it: the count is clamped to 1 and the
        // gradient stays zero instead of 0/0.
        Op::Extremum(x) => {
            let mask = x.eq(&node.broadcast_as(x.shape().clone())?)?;
            let ties = mask.sum_to(node.shape())?.clamp(1.0, f64::INFINITY)?;
            let share = g.div(&ties)?;
            vec![Some(share.broadcast_as(x.shape().clone())?.mul(&mask)?)]
        }
        Op::Matmul(a, b) => matmul_grads(a, b, g, need(0), need(1))?,
        Op::Reshape(x) => vec![Some(g.reshape(x.shape().clone())?)],
        Op::Permute(_, perm) => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(g.permute(&inv)?)]
        }
        Op::Narrow(x, dim, start) => vec![Some(narrow_grad(x, *dim, *start, g)?)],
        Op::Broadcast(x) => vec![Some(g.sum_to(x.shape())?)],
        Op::Copy(_) => vec![Some(g.clone())],
        Op::ToDType(x) => vec![Some(g.to_dtype(x.dtype())?)],
        Op::ToDevice(x) => vec![Some(g.to_device(x.device())?)],
        Op::Conv2d {
            input,
            weight,
            params,
        } => conv2d_grads(input, weight, params, g, need(0), need(1))?,
        Op::Pool2d { input, params } => {
            let (x, g) = (input.contiguous()?, g.contiguous()?);
            let s = x.storage().pool2d_backward(&g.storage(), params)?;
            vec![Some(Tensor::from_storage(s, input.shape().clone(), None))]
        }
        Op::BatchNorm {
            input,
            weight,
            mean,
            invstd,
            training,
            params,
            ..
        } => {
            let [dx, dw, db] =
                crate::ops::batch_norm_grad(input, g, weight, (mean, invstd), *training, *params)?;
            vec![
                need(0).then_some(dx),
                need(1).then_some(dw),
                need(2).then_some(db),
            ]
        }
        // The forward's output is contiguous (it made it), so it is read as it is.
        Op::Softmax { log, .. } => vec![Some(crate::ops::softmax_grad(node, g, *log)?)],
        Op::CrossEntropy {
            logits,
            labels,
            probs,
            ignore_index,
            count,
        } => {
            // The upstream gradient stays on the device: reading it here would stall the
            // host until the forward pass had finished, in every step.
            let upstream = g.contiguous()?.to_dtype(logits.dtype())?;
            let grad =
                crate::ops::cross_entropy_grad(probs, labels, &upstream, count, *ignore_index)?;
            vec![Some(grad)]
        }
        Op::IndexSelect { arg, ids, dim } => {
            vec![Some(g.index_add_into(ids, *dim, arg.shape())?)]
        }
        Op::Custom { inputs, backward } => {
            let grads = backward(g)?;
            if grads.len() != inputs.len() {
                return Err(Error::msg(format!(
                    "custom op backward returned {} gradients for {} inputs",
                    grads.len(),
                    inputs.len()
                )));
            }
            grads
        }
        Op::Concat(xs, dim) => {
            let mut start = 0;
            let mut out = Vec::with_capacity(xs.len());
            for (i, x) in xs.iter().enumerate() {
                let len = x.dims()[*dim];
                out.push(if need(i) {
                    Some(g.narrow(*dim, start, len)?)
                } else {
                    None
                });
                start += len;
            }
            out
        }
    })
}

/// The gradient of a unary op's input: `g` times the op's derivative, written with the
/// output `node` where that is cheaper (exp, sqrt, tanh, sigmoid, recip); None where it is
/// zero almost everywhere (sign, step, the range mask).
fn unary_grad(x: &Tensor, u: UnaryOp, node: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
    Ok(match u {
        UnaryOp::Neg => Some(g.neg()?),
        UnaryOp::Abs => Some(g.mul(&x.sign()?)?),
        UnaryOp::Sign | UnaryOp::Step | UnaryOp::InRange { .. } => None,
        UnaryOp::Sqrt => Some(g.div(&node.affine(2.0, 0.0)?)?),
        UnaryOp::Exp => Some(g.mul(node)?),
        UnaryOp::Log => Some(g.div(x)?),
        UnaryOp::Tanh => Some(g.mul(&node.sqr()?.affine(-1.0, 1.0)?)?),
        UnaryOp::Sigmoid => Some(g.mul(&node.mul(&node.affine(-1.0, 1.0)?)?)?),
        UnaryOp::Relu => Some(g.mul(&x.unary_op(UnaryOp::Step)?)?),
        UnaryOp::Sqr => Some(g.mul(&x.affine(2.0, 0.0)?)?),
        UnaryOp::Recip => Some(g.mul(&node.sqr()?)?.neg()?),
        UnaryOp::Affine { mul, .. } => Some(g.affine(mul, 0.0)?),
        // x⁰ is constant: zeros, as PyTorch, where e·x^(e−1) is 0·∞ at x = 0.
        UnaryOp::Powf(0.0) => Some(g.zeros_like()?),
        UnaryOp::Powf(e) => Some(g.mul(&x.powf(e - 1.0)?.affine(e, 0.0)?)?),
        UnaryOp::Clamp { min, max } => Some(g.mul(&x.unary_op(UnaryOp::InRange { min, max })?)?),
    })
}

/// The gradients of a binary op's operands, each summed back to its operand's shape (they
/// broadcast); only the operands `need_a`/`need_b` are computed where that costs a
/// product.
fn binary_grads(
    a: &Tensor,
    b: &Tensor,
    op: BinaryOp,
    node: &Tensor,
    g: &Tensor,
    need_a: bool,
    need_b: bool,
) -> Result<Vec<Option<Tensor>>> {
    let (ga, gb) = match op {
        BinaryOp::Add => (Some(g.clone()), Some(g.clone())),
        BinaryOp::Sub => (Some(g.clone()), Some(g.neg()?)),
        BinaryOp::Mul => (
            need_a.then(|| g.mul(b)).transpose()?,
            need_b.then(|| g.mul(a)).transpose()?,
        ),
        BinaryOp::Div => (
            need_a.then(|| g.div(b)).transpose()?,
            need_b.then(|| g.mul(node)?.div(b)?.neg()).transpose()?,
        ),
        // Ties send the gradient to the left operand, as a mask of a >= b (a <= b).
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let mask = if op == BinaryOp::Maximum {
                a.ge(b)?
            } else {
                a.le(b)?
            };
            (Some(g.mul(&mask)?), Some(g.mul(&mask.affine(-1.0, 1.0)?)?))
        }
        _ => (None, None),
    };
    Ok(vec![
        ga.map(|t| t.sum_to(a.shape())).transpose()?,
        gb.map(|t| t.sum_to(b.shape())).transpose()?,
    ])
}

/// The gradient of a narrowed tensor: `g` in the narrowed range of `dim`, zeros around.
fn narrow_grad(x: &Tensor, dim: usize, start: usize, g: &Tensor) -> Result<Tensor> {
    let (size, len) = (x.dims()[dim], g.dims()[dim]);
    let mut parts = Vec::new();
    let zeros = |n: usize| {
        let mut d = x.dims().to_vec();
        d[dim] = n;
        Tensor::zeros(d, g.dtype(), g.device())
    };
    if start > 0 {
        parts.push(zeros(start)?);
    }
    parts.push(g.clone());
    if start + len < size {
        parts.push(zeros(size - start - len)?);
    }
    Tensor::cat(&parts, dim)
}

/// A convolution's gradients with respect to its input and its weight, each where needed.
fn conv2d_grads(
    input: &Tensor,
    weight: &Tensor,
    params: &crate::storage::Conv2dParams,
    g: &Tensor,
    need_x: bool,
    need_w: bool,
) -> Result<Vec<Option<Tensor>>> {
    let g = g.contiguous()?;
    let gs = g.storage();
    let gx = if need_x {
        let w = weight.contiguous()?;
        let s = gs.conv2d_backward_input(&w.storage(), params)?;
        Some(Tensor::from_storage(s, params.in_shape(), None))
    } else {
        None
    };
    let gw = if need_w {
        let x = input.contiguous()?;
        let s = x.storage().conv2d_backward_weight(&gs, params)?;
        Some(Tensor::from_storage(s, params.weight_shape(), None))
    } else {
        None
    };
    Ok(vec![gx, gw])
}

/// Gradients of `a @ b` for `a: [..., m, k]`, `b: [..., k, n]` or `b: [k, n]` (shared).
fn matmul_grads(
    a: &Tensor,
    b: &Tensor,
    g: &Tensor,
    need_a: bool,
    need_b: bool,
) -> Result<Vec<Option<Tensor>>> {
    let ga = need_a.then(|| g.matmul(&b.transpose_last()?)).transpose()?;
    let gb = if !need_b {
        None
    } else if b.rank() == 2 && a.rank() > 2 {
        // b was shared across the batch: fold the batch into the rows.
        let k = a.dims()[a.rank() - 1];
        let n = g.dims()[g.rank() - 1];
        let a2 = a.reshape(vec![a.elem_count() / k.max(1), k])?;
        let g2 = g.reshape(vec![g.elem_count() / n.max(1), n])?;
        Some(a2.transpose_last()?.matmul(&g2)?)
    } else {
        Some(a.transpose_last()?.matmul(g)?)
    };
    Ok(vec![ga, gb])
}
