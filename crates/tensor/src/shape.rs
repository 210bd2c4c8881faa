//! Shapes, strided layouts and the iteration over a layout's storage offsets.
//!
//! A `Layout` describes a view into a flat storage buffer: shape, strides (in elements,
//! never negative; 0 for broadcast dimensions) and a start offset. Views such as
//! reshape, transpose, narrow and broadcast only build new layouts; kernels receive the
//! layout and either walk it with `StridedIndex` or take the contiguous fast path.

use crate::{Error, Result};
use std::fmt;

#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<usize>);

impl Shape {
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    pub fn elem_count(&self) -> usize {
        self.0.iter().product()
    }
    /// The element count, or an error when it does not fit a `usize` (every shape a
    /// tensor is created with passes through this, so `elem_count` cannot wrap later).
    ///
    /// The product of the dimensions with zeros counted as ones must fit too: a shape
    /// such as `[0, 2³³, 2³³]` has no elements, but its strides (2⁶⁶) would wrap, and the
    /// check must not depend on where the zero stands.
    pub fn checked_elem_count(&self, op: &'static str) -> Result<usize> {
        let overflow = || Error::BadShape {
            op,
            msg: "the element count overflows".into(),
            shape: self.clone(),
        };
        self.0
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d.max(1)))
            .ok_or_else(overflow)?;
        Ok(self.0.iter().product())
    }
    /// Row-major (C-order) strides of a contiguous tensor of this shape.
    pub fn contiguous_strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.0.len()];
        let mut acc = 1;
        for (s, &d) in strides.iter_mut().zip(self.0.iter()).rev() {
            *s = acc;
            acc *= d;
        }
        strides
    }
    /// Checks that `dim` is a valid axis, naming `op` in the error otherwise.
    pub fn check_dim(&self, dim: usize, op: &'static str) -> Result<usize> {
        if dim < self.rank() {
            Ok(dim)
        } else {
            Err(Error::DimOutOfRange {
                op,
                dim,
                rank: self.rank(),
            })
        }
    }
    pub fn dim(&self, dim: usize) -> usize {
        self.0[dim]
    }
    /// NumPy broadcasting of two shapes.
    pub fn broadcast_with(&self, rhs: &Shape, op: &'static str) -> Result<Shape> {
        let (l, r) = (self.dims(), rhs.dims());
        let rank = l.len().max(r.len());
        let mut out = vec![0; rank];
        for i in 0..rank {
            let a = if i + l.len() >= rank {
                l[i + l.len() - rank]
            } else {
                1
            };
            let b = if i + r.len() >= rank {
                r[i + r.len() - rank]
            } else {
                1
            };
            out[i] = match (a, b) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => {
                    return Err(Error::BroadcastIncompatible {
                        op,
                        lhs: self.clone(),
                        rhs: rhs.clone(),
                    })
                }
            };
        }
        let out = Shape(out);
        out.checked_elem_count(op)?;
        Ok(out)
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}
impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(v)
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(v.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(v.to_vec())
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(vec![])
    }
}
impl From<usize> for Shape {
    fn from(d: usize) -> Self {
        Shape(vec![d])
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Shape,
    strides: Vec<usize>,
    offset: usize,
}

impl Layout {
    pub fn contiguous(shape: impl Into<Shape>) -> Self {
        let shape = shape.into();
        let strides = shape.contiguous_strides();
        Layout {
            shape,
            strides,
            offset: 0,
        }
    }
    pub fn new(shape: Shape, strides: Vec<usize>, offset: usize) -> Self {
        Layout {
            shape,
            strides,
            offset,
        }
    }
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn offset(&self) -> usize {
        self.offset
    }
    pub fn elem_count(&self) -> usize {
        self.shape.elem_count()
    }
    /// True when the elements are laid out in row-major order without gaps.
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for (&d, &s) in self.shape.dims().iter().zip(self.strides.iter()).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc *= d;
        }
        true
    }
    /// The storage range of a contiguous layout.
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        self.is_contiguous()
            .then(|| self.offset..self.offset + self.elem_count())
    }

    pub fn reshape(&self, shape: Shape) -> Option<Layout> {
        if !self.is_contiguous() {
            return None;
        }
        let strides = shape.contiguous_strides();
        Some(Layout {
            shape,
            strides,
            offset: self.offset,
        })
    }

    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        let rank = self.shape.rank();
        let mut seen = vec![false; rank];
        if perm.len() != rank
            || perm
                .iter()
                .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::BadShape {
                op: "permute",
                msg: format!("{perm:?} is not a permutation of 0..{rank}"),
                shape: self.shape.clone(),
            });
        }
        let dims = perm.iter().map(|&p| self.shape.dim(p)).collect::<Vec<_>>();
        let strides = perm.iter().map(|&p| self.strides[p]).collect();
        Ok(Layout {
            shape: Shape(dims),
            strides,
            offset: self.offset,
        })
    }

    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Layout> {
        self.shape.check_dim(dim, "narrow")?;
        let size = self.shape.dim(dim);
        if start.checked_add(len).is_none_or(|end| end > size) {
            let end = start
                .checked_add(len)
                .map_or(format!("{start}+{len}"), |e| e.to_string());
            return Err(Error::BadShape {
                op: "narrow",
                msg: format!("range {start}..{end} exceeds dimension {dim} of size {size}"),
                shape: self.shape.clone(),
            });
        }
        let mut dims = self.shape.dims().to_vec();
        dims[dim] = len;
        Ok(Layout {
            shape: Shape(dims),
            strides: self.strides.clone(),
            offset: self.offset + start * self.strides[dim],
        })
    }

    /// A view of this layout broadcast to `target` (stride 0 on the expanded dimensions).
    pub fn broadcast_as(&self, target: &Shape) -> Result<Layout> {
        let (src, dst) = (self.shape.dims(), target.dims());
        if dst.len() < src.len() {
            return Err(Error::BroadcastIncompatible {
                op: "broadcast_as",
                lhs: self.shape.clone(),
                rhs: target.clone(),
            });
        }
        let lead = dst.len() - src.len();
        let mut strides = vec![0; dst.len()];
        for i in 0..dst.len() {
            if i < lead {
                continue;
            }
            let (s, d) = (src[i - lead], dst[i]);
            if s == d {
                strides[i] = self.strides[i - lead];
            } else if s != 1 {
                return Err(Error::BroadcastIncompatible {
                    op: "broadcast_as",
                    lhs: self.shape.clone(),
                    rhs: target.clone(),
                });
            }
        }
        Ok(Layout {
            shape: target.clone(),
            strides,
            offset: self.offset,
        })
    }

    /// Iterator over the storage offsets of every element, in row-major order.
    pub fn strided_index(&self) -> StridedIndex<'_> {
        StridedIndex::new(self)
    }
}

/// Walks the storage offsets of a strided layout in row-major order.
pub struct StridedIndex<'a> {
    next: Option<usize>,
    index: Vec<usize>,
    dims: &'a [usize],
    strides: &'a [usize],
}

impl<'a> StridedIndex<'a> {
    fn new(l: &'a Layout) -> Self {
        let next = if l.elem_count() == 0 {
            None
        } else {
            Some(l.offset)
        };
        StridedIndex {
            next,
            index: vec![0; l.dims().len()],
            dims: l.dims(),
            strides: &l.strides,
        }
    }
}

impl Iterator for StridedIndex<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        let current = self.next?;
        let mut next = current;
        let mut done = true;
        for d in (0..self.dims.len()).rev() {
            self.index[d] += 1;
            if self.index[d] < self.dims[d] {
                next += self.strides[d];
                done = false;
                break;
            }
            next -= (self.index[d] - 1) * self.strides[d];
            self.index[d] = 0;
        }
        self.next = if done { None } else { Some(next) };
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn strided_index_walks_a_transpose() {
        let l = Layout::contiguous([2, 3]).permute(&[1, 0]).unwrap();
        assert_eq!(
            l.strided_index().collect::<Vec<_>>(),
            vec![0, 3, 1, 4, 2, 5]
        );
        assert!(!l.is_contiguous());
    }
    #[test]
    fn broadcast_shapes() {
        let a = Shape::new([3, 1, 5]);
        let b = Shape::new([4, 1]);
        assert_eq!(a.broadcast_with(&b, "t").unwrap(), Shape::new([3, 4, 5]));
        assert!(Shape::new([3])
            .broadcast_with(&Shape::new([4]), "t")
            .is_err());
    }
}
