//! What is trained on what: the model built for the dataset's shape and classes, the
//! training and test sets, and how a batch becomes a loss and an evaluation metric.
//! Image classification today (accuracy); a model that does not fit the dataset's
//! shape is an error before any worker starts.

use crate::config::Config;
use anyhow::{bail, Context, Result};
use data::{Dataset, ImageDataset, SyntheticImages};
use nn::Module;
use std::path::PathBuf;
use std::sync::Arc;
use tensor::Rng;

pub struct Task {
    pub model: Box<dyn Module>,
    /// Where the model's parameters live and batches are sent.
    pub device: tensor::Device,
    pub train: Arc<dyn Dataset>,
    pub test: Arc<dyn Dataset>,
    pub metric_name: &'static str,
}

const IMAGE_MODELS: [&str; 9] = [
    "resnet20",
    "resnet32",
    "resnet44",
    "resnet56",
    "resnet110",
    "lenet5",
    "vgg16",
    "alexnet",
    "resnet50",
];

/// `[C, H, W]` and the number of classes of a dataset, without loading it.
fn dataset_shape(c: &Config) -> Result<([usize; 3], usize)> {
    Ok(match c.dataset.as_str() {
        "fashion-mnist" => ([1, 28, 28], 10),
        "cifar10" => ([3, 32, 32], 10),
        "synthetic" => {
            let s = nn::models::input_shape(&c.model)
                .with_context(|| format!("model {} has no image input shape", c.model))?;
            (
                [s[0], s[1], s[2]],
                if c.model == "resnet50" || c.model == "alexnet" {
                    1000
                } else {
                    10
                },
            )
        }
        d => bail!("--dataset {d}: expected fashion-mnist, cifar10 or synthetic"),
    })
}

/// The model/dataset combination is one we can build.
pub fn check(c: &Config) -> Result<()> {
    if !IMAGE_MODELS.contains(&c.model.as_str()) {
        bail!(
            "--model {}: the trainer runs image classification models: {}",
            c.model,
            IMAGE_MODELS.join(", ")
        );
    }
    let ([ch, h, w], _) = dataset_shape(c)?;
    let fixed = |want: [usize; 3]| -> Result<()> {
        if [ch, h, w] != want {
            bail!(
                "--model {} expects {:?} inputs, but --dataset {} gives {:?}",
                c.model,
                want,
                c.dataset,
                [ch, h, w]
            );
        }
        Ok(())
    };
    match c.model.as_str() {
        "vgg16" => fixed([3, 32, 32])?,
        "alexnet" => fixed([3, 227, 227])?,
        "resnet50" => fixed([3, 224, 224])?,
        "lenet5" if h != 28 || w != 28 => bail!(
            "--model lenet5 expects 28×28 inputs, --dataset {} gives {h}×{w}",
            c.dataset
        ),
        _ => {}
    }
    Ok(())
}

fn build_model(c: &Config, channels: usize, classes: usize) -> Result<Box<dyn Module>> {
    let mut rng = Rng::new(c.seed);
    let m: Box<dyn Module> = match c.model.as_str() {
        "lenet5" => Box::new(nn::models::lenet5_caffe(channels, classes, &mut rng)?),
        "vgg16" => Box::new(nn::models::vgg16_cifar(classes, &mut rng)?),
        "alexnet" => Box::new(nn::models::alexnet_caffe(classes, &mut rng)?),
        "resnet50" => Box::new(nn::models::resnet50(classes, &mut rng)?),
        name => {
            let depth: usize = name
                .strip_prefix("resnet")
                .and_then(|d| d.parse().ok())
                .with_context(|| format!("model {name}"))?;
            Box::new(nn::models::resnet_cifar(
                depth, channels, classes, &mut rng,
            )?)
        }
    };
    Ok(m)
}

fn limit(ds: ImageDataset, n: Option<usize>) -> Arc<dyn Dataset> {
    match n {
        Some(n) if n < ds.len() => Arc::new(Subset { inner: ds, n }),
        _ => Arc::new(ds),
    }
}

/// The first `n` samples of a dataset (evaluation on part of a test set).
struct Subset {
    inner: ImageDataset,
    n: usize,
}

impl Dataset for Subset {
    fn len(&self) -> usize {
        self.n
    }
    fn batch(&self, indices: &[usize], rng: &mut Rng) -> data::Result<data::Batch> {
        self.inner.batch(indices, rng)
    }
}

impl Task {
    /// The task of `c`, its model built on `device` (initial values are drawn on the CPU
    /// from the seed, so every device starts from the same model).
    pub fn new(c: &Config, device: tensor::Device) -> Result<Task> {
        check(c)?;
        let ([ch, h, w], classes) = dataset_shape(c)?;
        let model = nn::init::with_default_device(device, || build_model(c, ch, classes))
            .with_context(|| format!("building {} on {device:?}", c.model))?;
        let (train, test): (Arc<dyn Dataset>, Arc<dyn Dataset>) = match c.dataset.as_str() {
            "synthetic" => (
                Arc::new(SyntheticImages {
                    n: c.synthetic_samples,
                    shape: [ch, h, w],
                    classes,
                    seed: c.seed,
                }),
                Arc::new(SyntheticImages {
                    n: c.eval_samples.unwrap_or(1024),
                    shape: [ch, h, w],
                    classes,
                    seed: c.seed ^ 0x5EED,
                }),
            ),
            "fashion-mnist" => {
                let dir = c
                    .data_dir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(data::prepare::FASHION_MNIST_SYSTEM_DIR));
                let file = |n: &str| dir.join(n);
                let missing = || {
                    format!("Fashion-MNIST not found in {}: `apt-get install dataset-fashion-mnist`, or --data-dir DIR with the four IDX files", dir.display())
                };
                let train = data::read_mnist(
                    &file("train-images-idx3-ubyte.gz"),
                    &file("train-labels-idx1-ubyte.gz"),
                    10,
                )
                .with_context(missing)?;
                let test = data::read_mnist(
                    &file("t10k-images-idx3-ubyte.gz"),
                    &file("t10k-labels-idx1-ubyte.gz"),
                    10,
                )
                .with_context(missing)?
                .with_stats(train.mean.clone(), train.std.clone());
                (Arc::new(train), limit(test, c.eval_samples))
            }
            "cifar10" => {
                let dir = c.data_dir.clone().context("--dataset cifar10 needs --data-dir (the directory of data_batch_1.bin ... test_batch.bin)")?;
                let names: Vec<PathBuf> = (1..=5)
                    .map(|i| dir.join(format!("data_batch_{i}.bin")))
                    .collect();
                let refs: Vec<&std::path::Path> = names.iter().map(|p| p.as_path()).collect();
                let train = data::read_cifar10(&refs)?.with_augment(data::Augment::cifar());
                let test = data::read_cifar10(&[dir.join("test_batch.bin").as_path()])?
                    .with_stats(train.mean.clone(), train.std.clone());
                (Arc::new(train), limit(test, c.eval_samples))
            }
            d => bail!("--dataset {d}"),
        };
        Ok(Task {
            model,
            device,
            train,
            test,
            metric_name: "accuracy",
        })
    }
}
