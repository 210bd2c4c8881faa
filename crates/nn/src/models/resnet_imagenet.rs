//! ResNet-50 for ImageNet in torchvision's layout and parameter names (v1.5: the stride of
//! a downsampling bottleneck sits on its 3×3 convolution). 25,557,032 parameters with
//! 1000 classes: the DGC paper's 97.49 MiB gradient.

use crate::layers::{BatchNorm, Conv2d, Linear};
use crate::module::{join, Ctx, Module, NamedTensor};
use tensor::{Conv2dOptions, Pool2dOptions, Result, Rng, Tensor};

fn conv(inputs: usize, outputs: usize, k: usize, stride: usize, rng: &mut Rng) -> Result<Conv2d> {
    Conv2d::kaiming(
        inputs,
        outputs,
        (k, k),
        Conv2dOptions {
            stride: (stride, stride),
            padding: (k / 2, k / 2),
            ..Default::default()
        },
        false,
        rng,
    )
}

struct Bottleneck {
    conv1: Conv2d,
    bn1: BatchNorm,
    conv2: Conv2d,
    bn2: BatchNorm,
    conv3: Conv2d,
    bn3: BatchNorm,
    downsample: Option<(Conv2d, BatchNorm)>,
}

impl Bottleneck {
    fn new(inputs: usize, width: usize, stride: usize, rng: &mut Rng) -> Result<Self> {
        let out = width * 4;
        Ok(Bottleneck {
            conv1: conv(inputs, width, 1, 1, rng)?,
            bn1: BatchNorm::new(width)?,
            conv2: conv(width, width, 3, stride, rng)?,
            bn2: BatchNorm::new(width)?,
            conv3: conv(width, out, 1, 1, rng)?,
            bn3: BatchNorm::new(out)?,
            downsample: if stride != 1 || inputs != out {
                Some((conv(inputs, out, 1, stride, rng)?, BatchNorm::new(out)?))
            } else {
                None
            },
        })
    }
}

impl Module for Bottleneck {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        let h = self
            .bn1
            .forward(&self.conv1.forward(x, ctx)?, ctx)?
            .relu()?;
        let h = self
            .bn2
            .forward(&self.conv2.forward(&h, ctx)?, ctx)?
            .relu()?;
        let h = self.bn3.forward(&self.conv3.forward(&h, ctx)?, ctx)?;
        let short = match &self.downsample {
            Some((c, b)) => b.forward(&c.forward(x, ctx)?, ctx)?,
            None => x.clone(),
        };
        h.add(&short)?.relu()
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        for (name, c, b) in [
            ("1", &self.conv1, &self.bn1),
            ("2", &self.conv2, &self.bn2),
            ("3", &self.conv3, &self.bn3),
        ] {
            c.params(&join(prefix, &format!("conv{name}")), out);
            b.params(&join(prefix, &format!("bn{name}")), out);
        }
        if let Some((c, b)) = &self.downsample {
            c.params(&join(prefix, "downsample.0"), out);
            b.params(&join(prefix, "downsample.1"), out);
        }
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        for (name, b) in [("bn1", &self.bn1), ("bn2", &self.bn2), ("bn3", &self.bn3)] {
            b.buffers(&join(prefix, name), out);
        }
        if let Some((_, b)) = &self.downsample {
            b.buffers(&join(prefix, "downsample.1"), out);
        }
    }
}

pub struct ResNet50 {
    conv1: Conv2d,
    bn1: BatchNorm,
    layers: Vec<Vec<Bottleneck>>,
    fc: Linear,
}

pub fn resnet50(classes: usize, rng: &mut Rng) -> Result<ResNet50> {
    let conv1 = Conv2d::kaiming(
        3,
        64,
        (7, 7),
        Conv2dOptions {
            stride: (2, 2),
            padding: (3, 3),
            ..Default::default()
        },
        false,
        rng,
    )?;
    let bn1 = BatchNorm::new(64)?;
    let mut layers = Vec::new();
    let mut inputs = 64;
    for (i, (width, blocks)) in [(64, 3), (128, 4), (256, 6), (512, 3)]
        .into_iter()
        .enumerate()
    {
        let mut layer = Vec::new();
        for b in 0..blocks {
            let stride = if i > 0 && b == 0 { 2 } else { 1 };
            layer.push(Bottleneck::new(inputs, width, stride, rng)?);
            inputs = width * 4;
        }
        layers.push(layer);
    }
    let fc = Linear::new(2048, classes, true, rng)?;
    Ok(ResNet50 {
        conv1,
        bn1,
        layers,
        fc,
    })
}

impl Module for ResNet50 {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        let h = self
            .bn1
            .forward(&self.conv1.forward(x, ctx)?, ctx)?
            .relu()?;
        let mut h = h.max_pool2d(Pool2dOptions {
            kernel: (3, 3),
            stride: (2, 2),
            padding: (1, 1),
        })?;
        for layer in &self.layers {
            for b in layer {
                h = b.forward(&h, ctx)?;
            }
        }
        self.fc.forward(&h.mean(&[2, 3], false)?, ctx)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.conv1.params(&join(prefix, "conv1"), out);
        self.bn1.params(&join(prefix, "bn1"), out);
        for (i, layer) in self.layers.iter().enumerate() {
            for (j, b) in layer.iter().enumerate() {
                b.params(&join(prefix, &format!("layer{}.{j}", i + 1)), out);
            }
        }
        self.fc.params(&join(prefix, "fc"), out);
    }
    fn buffers(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        self.bn1.buffers(&join(prefix, "bn1"), out);
        for (i, layer) in self.layers.iter().enumerate() {
            for (j, b) in layer.iter().enumerate() {
                b.buffers(&join(prefix, &format!("layer{}.{j}", i + 1)), out);
            }
        }
    }
}
