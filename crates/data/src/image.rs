//! Labelled images kept as bytes (`[N, C, H, W]`, as the files store them) and turned into
//! normalised f32 batches on demand, with optional augmentation.

use crate::augment::Augment;
use crate::error::{DataError, Result};
use crate::loader::{Batch, Dataset};
use tensor::{Device, Rng, Tensor};

#[derive(Clone)]
pub struct ImageDataset {
    pixels: Vec<u8>,
    labels: Vec<u32>,
    /// `[C, H, W]` of one image.
    pub shape: [usize; 3],
    pub classes: usize,
    /// Per-channel mean and standard deviation of pixel/255, for normalisation.
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    pub augment: Augment,
}

impl ImageDataset {
    /// Checks that the pixel count matches `labels.len()` images of `shape` and that every
    /// label is below `classes`; normalisation statistics are computed from the pixels.
    pub fn new(
        pixels: Vec<u8>,
        labels: Vec<u32>,
        shape: [usize; 3],
        classes: usize,
    ) -> Result<Self> {
        let per = shape.iter().product::<usize>();
        if per == 0 || pixels.len() != labels.len() * per {
            return Err(DataError::Msg(format!(
                "{} pixel bytes do not make {} images of {shape:?}",
                pixels.len(),
                labels.len()
            )));
        }
        if let Some((i, &l)) = labels
            .iter()
            .enumerate()
            .find(|(_, &l)| l as usize >= classes)
        {
            return Err(DataError::Msg(format!(
                "label {l} of image {i} is out of range for {classes} classes"
            )));
        }
        let (mean, std) = channel_stats(&pixels, shape);
        Ok(ImageDataset {
            pixels,
            labels,
            shape,
            classes,
            mean,
            std,
            augment: Augment::none(),
        })
    }
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }
    /// The bytes of image `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        let per = self.shape.iter().product::<usize>();
        &self.pixels[i * per..(i + 1) * per]
    }
    pub fn with_augment(mut self, augment: Augment) -> Self {
        self.augment = augment;
        self
    }
    /// Uses these normalisation statistics (e.g. the training set's, for the test set).
    pub fn with_stats(mut self, mean: Vec<f32>, std: Vec<f32>) -> Self {
        self.mean = mean;
        self.std = std;
        self
    }
}

fn channel_stats(pixels: &[u8], shape: [usize; 3]) -> (Vec<f32>, Vec<f32>) {
    let (c, plane) = (shape[0], shape[1] * shape[2]);
    let mut sum = vec![0f64; c];
    let mut sq = vec![0f64; c];
    for (i, chunk) in pixels.chunks(plane).enumerate() {
        let ch = i % c;
        for &p in chunk {
            let v = p as f64 / 255.0;
            sum[ch] += v;
            sq[ch] += v * v;
        }
    }
    let n = (pixels.len() / c.max(1)).max(1) as f64;
    let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
    let std = sq
        .iter()
        .zip(&mean)
        .map(|(q, &m)| ((q / n - (m as f64).powi(2)).max(1e-12).sqrt()) as f32)
        .collect();
    (mean, std)
}

impl Dataset for ImageDataset {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn batch(&self, indices: &[usize], rng: &mut Rng) -> Result<Batch> {
        let [c, h, w] = self.shape;
        let mut out = Vec::with_capacity(indices.len() * c * h * w);
        let mut labels = Vec::with_capacity(indices.len());
        let mut scratch = vec![0f32; c * h * w];
        for &i in indices {
            if i >= self.len() {
                return Err(DataError::Msg(format!(
                    "sample index {i} out of range for {} images",
                    self.len()
                )));
            }
            for (s, &p) in scratch.iter_mut().zip(self.image(i)) {
                *s = p as f32 / 255.0;
            }
            self.augment.apply(&mut scratch, self.shape, rng);
            for ch in 0..c {
                let (m, sd) = (self.mean[ch], self.std[ch]);
                out.extend(
                    scratch[ch * h * w..(ch + 1) * h * w]
                        .iter()
                        .map(|&v| (v - m) / sd),
                );
            }
            labels.push(self.labels[i]);
        }
        let n = indices.len();
        Ok(Batch::new(
            Tensor::from_vec(out, vec![n, c, h, w], Device::Cpu)?,
            Tensor::from_vec(labels, n, Device::Cpu)?,
        ))
    }
}
