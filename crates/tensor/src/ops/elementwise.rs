//! Elementwise ops: unary maps, broadcasting arithmetic, comparisons and `where`.

use crate::op::Op;
use crate::storage::{BackendStorage, BinaryOp, UnaryOp};
use crate::{DType, Result, Shape, Tensor};

impl Tensor {
    pub(crate) fn unary_op(&self, op: UnaryOp) -> Result<Tensor> {
        self.check_float("unary op")?;
        let s = self.storage().unary(self.layout(), op)?;
        Ok(Tensor::from_storage(
            s,
            self.shape().clone(),
            Some(Op::Unary(self.clone(), op)),
        ))
    }
    pub fn neg(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Neg)
    }
    pub fn abs(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Abs)
    }
    /// -1, 0 or 1; its gradient is zero.
    pub fn sign(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Sign)
    }
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Sqrt)
    }
    pub fn exp(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Exp)
    }
    pub fn log(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Log)
    }
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Tanh)
    }
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Sigmoid)
    }
    /// max(x, 0); the gradient at 0 is 0, as in PyTorch.
    pub fn relu(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Relu)
    }
    pub fn sqr(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Sqr)
    }
    pub fn recip(&self) -> Result<Tensor> {
        self.unary_op(UnaryOp::Recip)
    }
    /// `x * mul + add`.
    pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        self.unary_op(UnaryOp::Affine { mul, add })
    }
    pub fn scale(&self, s: f64) -> Result<Tensor> {
        self.affine(s, 0.0)
    }
    pub fn add_scalar(&self, s: f64) -> Result<Tensor> {
        self.affine(1.0, s)
    }
    pub fn powf(&self, e: f64) -> Result<Tensor> {
        self.unary_op(UnaryOp::Powf(e))
    }
    /// Clamps into `[min, max]`; the gradient passes where `min <= x <= max`.
    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        self.unary_op(UnaryOp::Clamp { min, max })
    }

    /// Both operands' layouts broadcast to their common shape.
    fn broadcast_pair(
        &self,
        rhs: &Tensor,
        op: &'static str,
    ) -> Result<(Shape, crate::Layout, crate::Layout)> {
        self.check_same_dtype(rhs, op)?;
        let shape = self.shape().broadcast_with(rhs.shape(), op)?;
        Ok((
            shape.clone(),
            self.layout().broadcast_as(&shape)?,
            rhs.layout().broadcast_as(&shape)?,
        ))
    }

    fn binary_op(&self, rhs: &Tensor, op: BinaryOp, name: &'static str) -> Result<Tensor> {
        self.check_float(name)?;
        let (shape, ll, rl) = self.broadcast_pair(rhs, name)?;
        let s = self.storage().binary(&ll, &rhs.storage(), &rl, op)?;
        let record = (!op.is_comparison()).then(|| Op::Binary(self.clone(), rhs.clone(), op));
        Ok(Tensor::from_storage(s, shape, record))
    }
    /// Broadcasting (NumPy rules) elementwise sum.
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Add, "add")
    }
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Sub, "sub")
    }
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Mul, "mul")
    }
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Div, "div")
    }
    pub fn maximum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Maximum, "maximum")
    }
    pub fn minimum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Minimum, "minimum")
    }
    /// Comparisons return 1.0 / 0.0 in the operands' dtype and are not differentiable.
    pub fn eq(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Eq, "eq")
    }
    pub fn ne(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Ne, "ne")
    }
    pub fn lt(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Lt, "lt")
    }
    pub fn le(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Le, "le")
    }
    pub fn gt(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Gt, "gt")
    }
    pub fn ge(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary_op(rhs, BinaryOp::Ge, "ge")
    }

    /// `on_true` where self (the condition) is non-zero, else `on_false`; all three broadcast.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        self.check_float("where_cond")?;
        let (shape, _, _) = on_true.broadcast_pair(on_false, "where_cond")?;
        let shape = self.shape().broadcast_with(&shape, "where_cond")?;
        self.check_same_dtype(on_true, "where_cond")?;
        let (cl, tl, fl) = (
            self.layout().broadcast_as(&shape)?,
            on_true.layout().broadcast_as(&shape)?,
            on_false.layout().broadcast_as(&shape)?,
        );
        let s =
            self.storage()
                .where_cond(&cl, &on_true.storage(), &tl, &on_false.storage(), &fl)?;
        Ok(Tensor::from_storage(
            s,
            shape,
            Some(Op::Where(self.clone(), on_true.clone(), on_false.clone())),
        ))
    }

    /// Converts the element type (differentiable between float types).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let s = self.storage().to_dtype(self.layout(), dtype)?;
        let record =
            (dtype.is_float() && self.dtype().is_float()).then(|| Op::ToDType(self.clone()));
        Ok(Tensor::from_storage(s, self.shape().clone(), record))
    }
}
