//! Image classification data and models: the datasets' shapes, the model/dataset fit,
//! the model zoo by name, and the train/test splits (with evaluation on a prefix).

use super::Split;
use crate::config::Config;
use anyhow::{bail, Context, Result};
use data::{Dataset, ImageDataset, SyntheticImages};
use nn::models::{Fit, Input, ModelInfo};
use std::path::PathBuf;
use std::sync::Arc;
use tensor::Rng;

/// `[C, H, W]` and the number of classes of an image dataset, without loading it
/// (synthetic data and ImageNet folders take the model's own input).
pub(super) fn image_shape(c: &Config, model: &ModelInfo) -> Result<([usize; 3], usize)> {
    let paper = || {
        model
            .paper_image()
            .with_context(|| format!("model {} has no image input shape", c.model))
    };
    Ok(match c.dataset.as_str() {
        "fashion-mnist" | "mnist" => ([1, 28, 28], 10),
        "cifar10" => ([3, 32, 32], 10),
        "synthetic" => (paper()?, model.outputs),
        "imagenet" => {
            // ImageNet-layout folders at the model's own resolution (227 for AlexNet, 224
            // for ResNet-50, 32 for the CIFAR networks, 28 for LeNet-5), always RGB.
            let [_, h, w] = paper()?;
            ([3, h, w], imagenet_classes(&image_dir(c)?)?.len())
        }
        d => {
            bail!("--dataset {d}: image models train on fashion-mnist, mnist, cifar10, imagenet or synthetic")
        }
    })
}

/// The class folders of an ImageNet-layout dataset: `DIR/train/<class>/` (sorted by
/// name, which fixes the labels), checked against `DIR/val/<class>/`, which must hold
/// the same classes (ImageNet's validation images sorted into class folders, as
/// torchvision's ImageFolder expects).
fn imagenet_classes(dir: &std::path::Path) -> Result<Vec<String>> {
    let classes = |split: &str| -> Result<Vec<String>> {
        let root = dir.join(split);
        if !root.is_dir() {
            bail!(
                "--dataset imagenet reads {}/{{train,val}}/<class>/<images>: cannot list {}",
                dir.display(),
                root.display()
            );
        }
        Ok(data::class_folders(&root)?)
    };
    let (train, val) = (classes("train")?, classes("val")?);
    if train != val {
        let missing: Vec<&String> = train.iter().filter(|c| !val.contains(c)).collect();
        let extra: Vec<&String> = val.iter().filter(|c| !train.contains(c)).collect();
        bail!(
            "{}: train/ has {} classes and val/ {}; the labels need the same folders \
             (only in train/: {:?}; only in val/: {:?})",
            dir.display(),
            train.len(),
            val.len(),
            &missing[..missing.len().min(5)],
            &extra[..extra.len().min(5)]
        );
    }
    Ok(train)
}

/// The dataset's images fit the model (its registry entry's [`Fit`]).
pub(super) fn check_image(c: &Config, model: &ModelInfo) -> Result<()> {
    let ([ch, h, w], _) = image_shape(c, model)?;
    let Input::Image { fit, .. } = model.input else {
        bail!("--model {} is not an image model", c.model);
    };
    match fit {
        Fit::Any => {}
        Fit::Exactly(want) if [ch, h, w] != want => bail!(
            "--model {} expects {:?} inputs, but --dataset {} gives {:?}",
            c.model,
            want,
            c.dataset,
            [ch, h, w]
        ),
        Fit::Size(wh, ww) if (h, w) != (wh, ww) => bail!(
            "--model {} expects {wh}×{ww} inputs, --dataset {} gives {h}×{w}",
            c.model,
            c.dataset
        ),
        Fit::Exactly(_) | Fit::Size(..) => {}
    }
    if c.dataset != "synthetic" {
        image_dir(c)?;
    }
    Ok(())
}

/// Where an image dataset's files are: `--data-dir`, else for Fashion-MNIST its Debian
/// package's directory; MNIST and CIFAR-10 have no default. Checked by `check_image`
/// before any worker starts, and used by the loader.
fn image_dir(c: &Config) -> Result<PathBuf> {
    if let Some(d) = &c.data_dir {
        return Ok(d.clone());
    }
    match c.dataset.as_str() {
        "fashion-mnist" => Ok(PathBuf::from(data::prepare::FASHION_MNIST_SYSTEM_DIR)),
        "mnist" => bail!("--dataset mnist needs --data-dir (the directory of its four IDX files, train-images-idx3-ubyte[.gz] ...)"),
        "imagenet" => bail!("--dataset imagenet needs --data-dir (a directory with train/<class>/ and val/<class>/ folders of JPEG or PNG images)"),
        d => bail!("--dataset {d} needs --data-dir (the directory of its binary batches, data_batch_1.bin ... test_batch.bin)"),
    }
}

pub(super) fn limit<D: Dataset + 'static>(ds: D, n: Option<usize>) -> Arc<dyn Dataset> {
    match n {
        Some(n) if n < ds.len() => Arc::new(Subset { inner: ds, n }),
        _ => Arc::new(ds),
    }
}

/// `n` samples spread evenly over a dataset (evaluation on part of a test set): the i-th
/// is sample ⌊i·len/n⌋. A test set stored class by class (image folders: ImageNet's
/// validation set) is then sampled from every class, where its first `n` samples would
/// cover only the first classes.
struct Subset<D> {
    inner: D,
    n: usize,
}

impl<D: Dataset> Dataset for Subset<D> {
    fn len(&self) -> usize {
        self.n
    }
    fn batch(&self, indices: &[usize], rng: &mut Rng) -> data::Result<data::Batch> {
        let len = self.inner.len();
        let spread: Vec<usize> = indices.iter().map(|&i| i * len / self.n).collect();
        self.inner.batch(&spread, rng)
    }
}

pub(super) fn image_data(
    c: &Config,
    [ch, h, w]: [usize; 3],
    classes: usize,
) -> Result<(Split, Split)> {
    Ok(match c.dataset.as_str() {
        "synthetic" => (
            Split::Samples(Arc::new(SyntheticImages {
                n: c.synthetic_samples,
                shape: [ch, h, w],
                classes,
                seed: c.seed,
            })),
            Split::Samples(Arc::new(SyntheticImages {
                n: c.eval_samples.unwrap_or(1024),
                shape: [ch, h, w],
                classes,
                seed: c.seed ^ 0x5EED,
            })),
        ),
        // MNIST and Fashion-MNIST share the IDX layout and file names.
        "fashion-mnist" | "mnist" => {
            let fashion = c.dataset == "fashion-mnist";
            let dir = image_dir(c)?;
            let file = |n: &str| data::mnist_file(&dir, n);
            // Only a missing file gets the install hint; a damaged one is named as such
            // (DataError::in_corpus), since installing would not mend it.
            let (corpus, hint) = if fashion {
                ("Fashion-MNIST", "`apt-get install dataset-fashion-mnist`, or --data-dir DIR with the four IDX files")
            } else {
                ("MNIST", "--data-dir DIR with the four IDX files (train-images-idx3-ubyte[.gz] and the others)")
            };
            let read = |images: &str, labels: &str| {
                data::read_mnist(&file(images), &file(labels), 10)
                    .map_err(|e| e.in_corpus(corpus, &dir, hint))
            };
            let train = read("train-images-idx3-ubyte", "train-labels-idx1-ubyte")?;
            let test = read("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")?
                .with_stats(train.mean.clone(), train.std.clone());
            (
                Split::Samples(Arc::new(train)),
                Split::Samples(limit::<ImageDataset>(test, c.eval_samples)),
            )
        }
        "cifar10" => {
            let dir = image_dir(c)?;
            let names: Vec<PathBuf> = (1..=5)
                .map(|i| dir.join(format!("data_batch_{i}.bin")))
                .collect();
            let refs: Vec<&std::path::Path> = names.iter().map(|p| p.as_path()).collect();
            let train = data::read_cifar10(&refs)?.with_augment(data::Augment::cifar());
            let test = data::read_cifar10(&[dir.join("test_batch.bin").as_path()])?
                .with_stats(train.mean.clone(), train.std.clone());
            (
                Split::Samples(Arc::new(train)),
                Split::Samples(limit::<ImageDataset>(test, c.eval_samples)),
            )
        }
        "imagenet" => {
            let dir = image_dir(c)?;
            let train = data::ImageFolder::open(&dir.join("train"), h, true)?;
            let test = data::ImageFolder::open(&dir.join("val"), h, false)?;
            if train.classes != test.classes || train.classes.len() != classes {
                bail!(
                    "{}: the class folders changed while the job started",
                    dir.display()
                );
            }
            (
                Split::Samples(Arc::new(train)),
                Split::Samples(limit(test, c.eval_samples)),
            )
        }
        d => bail!("--dataset {d}"),
    })
}

#[cfg(test)]
mod tests {
    use data::ImageDataset;
    use tensor::Rng;

    /// A test set stored class by class, limited to 3 of its 6 samples, still holds both
    /// classes.
    #[test]
    fn a_limited_test_set_is_spread_over_the_whole_set() {
        let ds = ImageDataset::new(vec![0u8; 6], vec![0, 0, 0, 1, 1, 1], [1, 1, 1], 2).unwrap();
        let limited = super::limit(ds, Some(3));
        assert_eq!(limited.len(), 3);
        let b = limited.batch(&[0, 1, 2], &mut Rng::new(0)).unwrap();
        assert_eq!(b.labels.to_vec::<u32>().unwrap(), [0, 0, 1]);
    }
}
