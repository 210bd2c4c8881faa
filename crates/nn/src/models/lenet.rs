//! LeNet-5 as in Caffe's MNIST example (the SBC paper's "LeNet5-Caffe"): conv 20@5×5,
//! max-pool 2, conv 50@5×5, max-pool 2, fc 500, ReLU, fc 10, on 28×28 input. 431,080
//! parameters with one input channel and 10 classes.

use crate::layers::{Conv2d, Linear};
use crate::module::{join, Ctx, Module, NamedTensor};
use tensor::{Conv2dOptions, Pool2dOptions, Result, Rng, Tensor};

pub struct LeNet5 {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
}

pub fn lenet5_caffe(in_channels: usize, classes: usize, rng: &mut Rng) -> Result<LeNet5> {
    Ok(LeNet5 {
        conv1: Conv2d::new(in_channels, 20, (5, 5), Conv2dOptions::default(), true, rng)?,
        conv2: Conv2d::new(20, 50, (5, 5), Conv2dOptions::default(), true, rng)?,
        fc1: Linear::new(800, 500, true, rng)?,
        fc2: Linear::new(500, classes, true, rng)?,
    })
}

impl Module for LeNet5 {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        let h = self
            .conv1
            .forward(x, ctx)?
            .max_pool2d(Pool2dOptions::square(2))?;
        let h = self
            .conv2
            .forward(&h, ctx)?
            .max_pool2d(Pool2dOptions::square(2))?
            .flatten_from(1)?;
        let h = self.fc1.forward(&h, ctx)?.relu()?;
        self.fc2.forward(&h, ctx)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.conv1.params(&join(prefix, "conv1"), out);
        self.conv2.params(&join(prefix, "conv2"), out);
        self.fc1.params(&join(prefix, "fc1"), out);
        self.fc2.params(&join(prefix, "fc2"), out);
    }
}
