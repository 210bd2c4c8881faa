//! CIFAR ResNets of He et al. 2016 (§4.2), depth 6n+2, with option-A shortcuts: when a
//! block halves the resolution and doubles the width, the shortcut takes every second
//! row and column and zero-pads the new channels (no parameters). Names follow the common
//! PyTorch implementation: `conv1`, `bn1`, `layer{1,2,3}.{i}.{conv1,bn1,conv2,bn2}`, `fc`.
//!
//! Parameter counts with 3 input channels and 10 classes: ResNet-20 269,722; ResNet-32
//! 464,154; ResNet-44 658,586; ResNet-56 853,018; ResNet-110 1,727,962 (≈ 1.73 M).

use crate::layers::{BatchNorm, Conv2d, Linear};
use crate::module::{join, Ctx, Module, NamedTensor};
use tensor::{Conv2dOptions, Error, Pool2dOptions, Result, Rng, Tensor};

fn conv3x3(inputs: usize, outputs: usize, stride: usize, rng: &mut Rng) -> Result<Conv2d> {
    Conv2d::kaiming(
        inputs,
        outputs,
        (3, 3),
        Conv2dOptions {
            stride: (stride, stride),
            padding: (1, 1),
            ..Default::default()
        },
        false,
        rng,
    )
}

pub struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm,
    conv2: Conv2d,
    bn2: BatchNorm,
    /// Zero channels added on each side by the option-A shortcut (None: identity).
    pad_channels: Option<usize>,
}

impl BasicBlock {
    fn new(inputs: usize, planes: usize, stride: usize, rng: &mut Rng) -> Result<Self> {
        Ok(BasicBlock {
            conv1: conv3x3(inputs, planes, stride, rng)?,
            bn1: BatchNorm::new(planes)?,
            conv2: conv3x3(planes, planes, 1, rng)?,
            bn2: BatchNorm::new(planes)?,
            pad_channels: (stride != 1 || inputs != planes).then_some(planes / 4),
        })
    }

    /// `x[:, :, ::2, ::2]` with `pad` zero channels before and after.
    fn shortcut(x: &Tensor, pad: usize) -> Result<Tensor> {
        let sub = x.max_pool2d(Pool2dOptions {
            kernel: (1, 1),
            stride: (2, 2),
            padding: (0, 0),
        })?;
        let mut zdims = sub.dims().to_vec();
        zdims[1] = pad;
        let zeros = Tensor::zeros(zdims, sub.dtype(), sub.device())?;
        Tensor::cat(&[zeros.clone(), sub, zeros], 1)
    }
}

impl Module for BasicBlock {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        let h = self
            .bn1
            .forward(&self.conv1.forward(x, ctx)?, ctx)?
            .relu()?;
        let h = self.bn2.forward(&self.conv2.forward(&h, ctx)?, ctx)?;
        let short = match self.pad_channels {
            Some(pad) => BasicBlock::shortcut(x, pad)?,
            None => x.clone(),
        };
        h.add(&short)?.relu()
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.conv1.params(&join(prefix, "conv1"), out);
        self.bn1.params(&join(prefix, "bn1"), out);
        self.conv2.params(&join(prefix, "conv2"), out);
        self.bn2.params(&join(prefix, "bn2"), out);
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.bn1.buffers(&join(prefix, "bn1"), out);
        self.bn2.buffers(&join(prefix, "bn2"), out);
    }
}

pub struct ResNetCifar {
    conv1: Conv2d,
    bn1: BatchNorm,
    layers: Vec<Vec<BasicBlock>>,
    fc: Linear,
}

/// ResNet-`depth` for CIFAR-sized input (`depth` = 6n + 2: 20, 32, 44, 56, 110, …).
pub fn resnet_cifar(
    depth: usize,
    in_channels: usize,
    classes: usize,
    rng: &mut Rng,
) -> Result<ResNetCifar> {
    if depth < 8 || !(depth - 2).is_multiple_of(6) {
        return Err(Error::msg(format!(
            "resnet_cifar: depth must be 6n+2 (20, 32, 44, 56, 110, …), got {depth}"
        )));
    }
    let n = (depth - 2) / 6;
    let conv1 = conv3x3(in_channels, 16, 1, rng)?;
    let bn1 = BatchNorm::new(16)?;
    let mut layers = Vec::new();
    let mut inputs = 16;
    for (i, planes) in [16, 32, 64].into_iter().enumerate() {
        let mut blocks = Vec::new();
        for b in 0..n {
            let stride = if i > 0 && b == 0 { 2 } else { 1 };
            blocks.push(BasicBlock::new(inputs, planes, stride, rng)?);
            inputs = planes;
        }
        layers.push(blocks);
    }
    let fc = Linear::new(64, classes, true, rng)?;
    Ok(ResNetCifar {
        conv1,
        bn1,
        layers,
        fc,
    })
}

impl Module for ResNetCifar {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        let mut h = self
            .bn1
            .forward(&self.conv1.forward(x, ctx)?, ctx)?
            .relu()?;
        for blocks in &self.layers {
            for b in blocks {
                h = b.forward(&h, ctx)?;
            }
        }
        self.fc.forward(&h.mean(&[2, 3], false)?, ctx)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.conv1.params(&join(prefix, "conv1"), out);
        self.bn1.params(&join(prefix, "bn1"), out);
        for (i, blocks) in self.layers.iter().enumerate() {
            for (j, b) in blocks.iter().enumerate() {
                b.params(&join(prefix, &format!("layer{}.{j}", i + 1)), out);
            }
        }
        self.fc.params(&join(prefix, "fc"), out);
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.bn1.buffers(&join(prefix, "bn1"), out);
        for (i, blocks) in self.layers.iter().enumerate() {
            for (j, b) in blocks.iter().enumerate() {
                b.buffers(&join(prefix, &format!("layer{}.{j}", i + 1)), out);
            }
        }
    }
}
