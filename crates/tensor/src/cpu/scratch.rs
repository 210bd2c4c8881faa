//! Per-thread scratch buffers for the CPU kernels' temporaries (im2col column matrices,
//! gathered gradient blocks). A buffer taken here comes from this thread's pool when one
//! is there and goes back to it when dropped, so a training step reuses the same memory
//! for every convolution instead of allocating, zeroing and page-faulting megabytes of
//! temporaries per call (perf on ResNet-20's CPU step: zeroing fresh conv buffers was 8 %
//! of the step's samples, the kernel's page clearing behind them 4 % more).
//!
//! The contents of a taken buffer are unspecified (zeros, or whatever an earlier kernel on
//! this thread left there): a kernel must write every element it later reads, as im2col
//! and a `gemm` with `accumulate = false` do.

use crate::Float;
use std::any::Any;
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Buffers kept per thread; a kernel holds at most three at once, so more would only be
/// memory nobody takes.
const POOL_LIMIT: usize = 4;

thread_local! {
    static POOL: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// `len` elements of scratch; see the module comment for what they hold on arrival.
pub(crate) struct Scratch<T: Float> {
    buf: Vec<T>,
    len: usize,
}

impl<T: Float> Scratch<T> {
    pub(crate) fn take(len: usize) -> Self {
        // The largest pooled buffer of this element type: it is the likeliest to need no
        // growth, and taking it keeps the pool from holding several copies of the peak.
        let pooled = POOL.with(|pool| {
            let mut pool = pool.borrow_mut();
            let best = pool
                .iter()
                .enumerate()
                .filter_map(|(i, b)| b.downcast_ref::<Vec<T>>().map(|v| (i, v.len())))
                .max_by_key(|&(_, n)| n)
                .map(|(i, _)| i)?;
            pool.swap_remove(best).downcast::<Vec<T>>().ok()
        });
        let mut buf = pooled.map(|b| *b).unwrap_or_default();
        if buf.len() < len {
            buf.resize(len, T::zero());
        }
        Scratch { buf, len }
    }
}

impl<T: Float> Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf[..self.len]
    }
}

impl<T: Float> DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf[..self.len]
    }
}

impl<T: Float> Drop for Scratch<T> {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // `try_with`: during thread teardown the pool may already be gone; the buffer is
        // then simply freed.
        let _ = POOL.try_with(|pool| {
            if let Ok(mut pool) = pool.try_borrow_mut() {
                if pool.len() < POOL_LIMIT {
                    pool.push(Box::new(buf));
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_buffer_is_reused_and_sized_to_the_request() {
        let first_ptr = {
            let mut s = Scratch::<f32>::take(1000);
            s[999] = 7.0;
            s.as_ptr()
        };
        // Smaller request: the same allocation comes back, cut to the asked length.
        let s = Scratch::<f32>::take(10);
        assert_eq!(s.len(), 10);
        assert_eq!(s.as_ptr(), first_ptr);
        // Held buffers are distinct; another element type gets its own.
        let t = Scratch::<f32>::take(10);
        assert_ne!(t.as_ptr(), s.as_ptr());
        let u = Scratch::<f64>::take(5);
        assert_eq!(u.len(), 5);
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_buffers() {
        let held: Vec<_> = (0..POOL_LIMIT + 3)
            .map(|_| Scratch::<f64>::take(4))
            .collect();
        drop(held);
        let kept = POOL.with(|p| p.borrow().iter().filter(|b| b.is::<Vec<f64>>()).count());
        assert!(kept <= POOL_LIMIT, "{kept} buffers pooled");
    }
}
