//! AlexNet as in Caffe's BVLC reference model (the DGC paper's 232.56 MiB gradient):
//! 227×227 input, grouped conv2/conv4/conv5 (the original two-GPU split) and local
//! response normalisation after conv1 and conv2. 60,965,224 parameters with 1000 classes.
//! Initialisation follows the BVLC prototxt: weights N(0, 0.01) (fc6, fc7: N(0, 0.005)),
//! biases 0 for conv1, conv3 and fc8 and 0.1 for conv2, conv4, conv5, fc6 and fc7 (the
//! model's readme: "initializing non-zero biases to 0.1 instead of 1 (found necessary for
//! training, as initialization to 1 gave flat loss)"; Krizhevsky et al. used 1).

use crate::init;
use crate::layers::{Conv2d, Dropout, Linear, LocalResponseNorm};
use crate::module::{join, Ctx, Module, NamedTensor};
use tensor::{Conv2dOptions, Pool2dOptions, Result, Rng, Tensor};

pub struct AlexNet {
    convs: Vec<Conv2d>,
    fcs: Vec<Linear>,
    lrn: LocalResponseNorm,
    dropout: Dropout,
}

// One call per row of the paper's layer table reads best with positional arguments.
#[allow(clippy::too_many_arguments)]
fn conv(
    inputs: usize,
    outputs: usize,
    k: usize,
    stride: usize,
    pad: usize,
    groups: usize,
    bias: f64,
    rng: &mut Rng,
) -> Result<Conv2d> {
    let o = Conv2dOptions {
        stride: (stride, stride),
        padding: (pad, pad),
        groups,
        ..Default::default()
    };
    Ok(Conv2d {
        weight: init::normal(&[outputs, inputs / groups, k, k], 0.01, rng)?,
        bias: Some(init::constant(&[outputs], bias)?),
        options: o,
    })
}

fn fc(inputs: usize, outputs: usize, std: f64, bias: f64, rng: &mut Rng) -> Result<Linear> {
    let mut l = Linear::new(inputs, outputs, true, rng)?;
    l.weight = init::normal(&[outputs, inputs], std, rng)?;
    l.bias = Some(init::constant(&[outputs], bias)?);
    Ok(l)
}

pub fn alexnet_caffe(classes: usize, rng: &mut Rng) -> Result<AlexNet> {
    let convs = vec![
        conv(3, 96, 11, 4, 0, 1, 0.0, rng)?,
        conv(96, 256, 5, 1, 2, 2, 0.1, rng)?,
        conv(256, 384, 3, 1, 1, 1, 0.0, rng)?,
        conv(384, 384, 3, 1, 1, 2, 0.1, rng)?,
        conv(384, 256, 3, 1, 1, 2, 0.1, rng)?,
    ];
    let fcs = vec![
        fc(256 * 6 * 6, 4096, 0.005, 0.1, rng)?,
        fc(4096, 4096, 0.005, 0.1, rng)?,
        fc(4096, classes, 0.01, 0.0, rng)?,
    ];
    Ok(AlexNet {
        convs,
        fcs,
        lrn: LocalResponseNorm {
            size: 5,
            alpha: 1e-4,
            beta: 0.75,
            k: 1.0,
        },
        dropout: Dropout(0.5),
    })
}

impl Module for AlexNet {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx) -> Result<Tensor> {
        let pool = Pool2dOptions {
            kernel: (3, 3),
            stride: (2, 2),
            padding: (0, 0),
        };
        let c = &self.convs;
        let h = c[0].forward(x, ctx)?.relu()?;
        let h = self.lrn.forward(&h, ctx)?.max_pool2d(pool)?;
        let h = c[1].forward(&h, ctx)?.relu()?;
        let h = self.lrn.forward(&h, ctx)?.max_pool2d(pool)?;
        let h = c[2].forward(&h, ctx)?.relu()?;
        let h = c[3].forward(&h, ctx)?.relu()?;
        let h = c[4]
            .forward(&h, ctx)?
            .relu()?
            .max_pool2d(pool)?
            .flatten_from(1)?;
        let h = self
            .dropout
            .forward(&self.fcs[0].forward(&h, ctx)?.relu()?, ctx)?;
        let h = self
            .dropout
            .forward(&self.fcs[1].forward(&h, ctx)?.relu()?, ctx)?;
        self.fcs[2].forward(&h, ctx)
    }
    fn params(&self, prefix: &str, out: &mut Vec<NamedTensor>) {
        for (i, c) in self.convs.iter().enumerate() {
            c.params(&join(prefix, &format!("conv{}", i + 1)), out);
        }
        for (i, f) in self.fcs.iter().enumerate() {
            f.params(&join(prefix, &format!("fc{}", i + 6)), out);
        }
    }
}
