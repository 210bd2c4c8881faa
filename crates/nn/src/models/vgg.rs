//! VGG-16 for CIFAR-10, the gTop-k paper's VGG-16 experiments: the 13 3×3 convolutions of
//! configuration D (64, 64, M, 128, 128, M, 256 ×3, M, 512 ×3, M, 512 ×3, M), each with a
//! bias and followed by batch norm and ReLU, then one Linear(512 → classes). Names follow
//! a PyTorch `nn.Sequential`: `features.{i}` (conv i, its batch norm i+1) and `classifier`.
//! 14,728,266 parameters with 10 classes.

use crate::layers::{Activation, BatchNorm, Conv2d, Flatten, Linear, MaxPool2d};
use crate::module::{Ctx, Module, NamedTensor};
use crate::Sequential;
use tensor::{Conv2dOptions, Pool2dOptions, Result, Rng, Tensor};

const CONFIG: [usize; 18] = [
    64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0,
];

pub struct Vgg(Sequential);

pub fn vgg16_cifar(classes: usize, rng: &mut Rng) -> Result<Vgg> {
    let mut features = Sequential::new();
    let mut inputs = 3;
    for width in CONFIG {
        if width == 0 {
            features = features.push(MaxPool2d(Pool2dOptions::square(2)));
        } else {
            features = features
                .push(Conv2d::kaiming(
                    inputs,
                    width,
                    (3, 3),
                    Conv2dOptions {
                        padding: (1, 1),
                        ..Default::default()
                    },
                    true,
                    rng,
                )?)
                .push(BatchNorm::new(width)?)
                .push(Activation::Relu);
            inputs = width;
        }
    }
    let net = Sequential::new()
        .push_named("features", features)
        .push_named("flatten", Flatten)
        .push_named("classifier", Linear::new(512, classes, true, rng)?);
    Ok(Vgg(net))
}

impl Module for Vgg {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        self.0.forward(x, ctx)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.0.params(prefix, out)
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.0.buffers(prefix, out)
    }
}
