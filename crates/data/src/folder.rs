//! ImageNet-style datasets: a root with one sub-folder per class holding JPEG or PNG
//! files (`train/n01440764/*.JPEG`, …), decoded on demand (on the loader's prefetch
//! thread). Training transform: random resized crop (area 8–100 %, aspect 3/4–4/3, as
//! Inception/ResNet training) to `size`, random horizontal flip; evaluation: resize the
//! shorter side to `size · 8/7` and take the centre `size × size` crop. Normalisation
//! with the ImageNet channel statistics.

use crate::error::{DataError, Result};
use crate::loader::{Batch, Dataset};
use image::imageops::FilterType;
use image::RgbImage;
use std::path::{Path, PathBuf};
use tensor::{Device, Rng, Tensor};

const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const STD: [f32; 3] = [0.229, 0.224, 0.225];

pub struct ImageFolder {
    pub classes: Vec<String>,
    files: Vec<(PathBuf, u32)>,
    pub size: usize,
    pub train: bool,
}

/// The classes of an image-folder root: its sub-folders' names, sorted (the order fixes
/// the labels); an error if there are none. Cheap beside [`ImageFolder::open`], which
/// also lists every image, so a trainer can check a dataset before it starts workers.
pub fn class_folders(root: &Path) -> Result<Vec<String>> {
    let mut classes: Vec<String> = std::fs::read_dir(root)
        .map_err(|e| DataError::io(root, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    classes.sort();
    if classes.is_empty() {
        return Err(DataError::format(
            root,
            "no class sub-folders (expected root/<class>/<image files>)",
        ));
    }
    Ok(classes)
}

impl ImageFolder {
    /// Lists `root/<class>/*.{jpg,jpeg,png}` (case-insensitive); classes sorted by name.
    pub fn open(root: &Path, size: usize, train: bool) -> Result<Self> {
        let read = |p: &Path| std::fs::read_dir(p).map_err(|e| DataError::io(p, e));
        let classes = class_folders(root)?;
        let mut files = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let mut imgs: Vec<PathBuf> = read(&root.join(class))?
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|x| {
                        matches!(
                            x.to_string_lossy().to_lowercase().as_str(),
                            "jpg" | "jpeg" | "png"
                        )
                    })
                })
                .collect();
            imgs.sort();
            files.extend(imgs.into_iter().map(|p| (p, label as u32)));
        }
        if files.is_empty() {
            return Err(DataError::format(
                root,
                "no JPEG or PNG files in any class folder",
            ));
        }
        Ok(ImageFolder {
            classes,
            files,
            size,
            train,
        })
    }

    fn load(&self, i: usize, rng: &mut Rng) -> Result<RgbImage> {
        let (path, _) = &self.files[i];
        // The format from the content, not the extension: ILSVRC-2012's training set
        // holds a PNG named `.JPEG` (n02105855_2933), which `image::open` would decode as
        // JPEG and fail on, ending the run (PIL, under torchvision, reads it).
        let img = image::ImageReader::open(path)
            .map_err(|e| DataError::io(path, e))?
            .with_guessed_format()
            .map_err(|e| DataError::io(path, e))?
            .decode()
            .map_err(|e| DataError::format(path, format!("cannot decode image: {e}")))?
            .to_rgb8();
        let (w, h) = (img.width() as f64, img.height() as f64);
        let s = self.size as u32;
        if self.train {
            // Random resized crop; fall back to the centre crop after 10 tries, as torchvision.
            for _ in 0..10 {
                let area = w * h * (0.08 + 0.92 * rng.uniform());
                let ratio = ((3.0f64 / 4.0).ln()
                    + ((4.0f64 / 3.0).ln() - (3.0f64 / 4.0).ln()) * rng.uniform())
                .exp();
                let (cw, ch) = ((area * ratio).sqrt().round(), (area / ratio).sqrt().round());
                if cw >= 1.0 && ch >= 1.0 && cw <= w && ch <= h {
                    let x = rng.below((w - cw) as usize + 1) as u32;
                    let y = rng.below((h - ch) as usize + 1) as u32;
                    let crop =
                        image::imageops::crop_imm(&img, x, y, cw as u32, ch as u32).to_image();
                    let mut out = image::imageops::resize(&crop, s, s, FilterType::Triangle);
                    if rng.below(2) == 1 {
                        image::imageops::flip_horizontal_in_place(&mut out);
                    }
                    return Ok(out);
                }
            }
            // No crop of the sampled area and shape fits (an image far wider than tall,
            // say): the centre crop, still flipped at random, as torchvision does.
            let mut out = centre_crop(&img, self.size);
            if rng.below(2) == 1 {
                image::imageops::flip_horizontal_in_place(&mut out);
            }
            return Ok(out);
        }
        Ok(centre_crop(&img, self.size))
    }
}

/// The evaluation transform (and training's fallback): resize the shorter side to
/// `size · 8/7` (256 for 224), then take the centre `size × size` crop.
///
/// The centre square of the source (its side the shorter side) is cut first and only
/// that is resized, to `short × short`: resizing the whole image made an intermediate of
/// `short × short · aspect` pixels, 3.9 GB for a valid 1 × 20000 PNG at 224. The pixels
/// are those of resizing the whole image up to sub-pixel rounding of the crop's offset,
/// and the square keeps a margin around the final crop, so the resize filter still sees
/// each kept pixel's neighbours.
fn centre_crop(img: &RgbImage, size: usize) -> RgbImage {
    let s = size as u32;
    let short = ((size as f64 * 8.0 / 7.0).round() as u32).max(s);
    let (w, h) = img.dimensions();
    let m = w.min(h);
    let square = image::imageops::crop_imm(img, (w - m) / 2, (h - m) / 2, m, m).to_image();
    let resized = image::imageops::resize(&square, short, short, FilterType::Triangle);
    let off = (short - s) / 2;
    image::imageops::crop_imm(&resized, off, off, s, s).to_image()
}

impl Dataset for ImageFolder {
    fn len(&self) -> usize {
        self.files.len()
    }
    fn batch(&self, indices: &[usize], rng: &mut Rng) -> Result<Batch> {
        let s = self.size;
        let mut data = Vec::with_capacity(indices.len() * 3 * s * s);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            if i >= self.len() {
                return Err(DataError::Msg(format!(
                    "sample index {i} out of range for {} images",
                    self.len()
                )));
            }
            let img = self.load(i, rng)?;
            for c in 0..3 {
                data.extend(
                    img.pixels()
                        .map(|p| (p[c] as f32 / 255.0 - MEAN[c]) / STD[c]),
                );
            }
            labels.push(self.files[i].1);
        }
        let n = indices.len();
        Ok(Batch::new(
            Tensor::from_vec(data, vec![n, 3, s, s], Device::Cpu)?,
            Tensor::from_vec(labels, n, Device::Cpu)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The earlier transform, which resized the whole image: the reference for ordinary
    /// aspect ratios.
    fn resize_whole_then_crop(img: &RgbImage, size: usize) -> RgbImage {
        let (w, h) = (img.width() as f64, img.height() as f64);
        let s = size as u32;
        let short = (size as f64 * 8.0 / 7.0).round();
        let scale = short / w.min(h);
        let (rw, rh) = (
            ((w * scale).round() as u32).max(s),
            ((h * scale).round() as u32).max(s),
        );
        let resized = image::imageops::resize(img, rw, rh, FilterType::Triangle);
        image::imageops::crop_imm(&resized, (rw - s) / 2, (rh - s) / 2, s, s).to_image()
    }

    /// A smooth scene with texture, so that misalignment would show.
    fn scene(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| {
            let (u, v) = (x as f64 / w as f64, y as f64 / h as f64);
            let r = 128.0 + 100.0 * (6.0 * u + 2.0 * v).sin();
            let g = 128.0 + 100.0 * (5.0 * v - 3.0 * u).cos();
            let b = 128.0 + 100.0 * (40.0 * u).sin() * (30.0 * v).cos();
            image::Rgb([r as u8, g as u8, b as u8])
        })
    }

    /// Square images give the same pixels; ordinary aspect ratios the same up to the
    /// sub-pixel rounding of the crop's offset (about one grey level on average on a
    /// smooth scene at 224; the earlier transform also truncated odd margins to half a
    /// pixel off centre, and rounded the long side's size, which the square avoids).
    #[test]
    fn cropping_first_matches_resizing_the_whole_image() {
        for (w, h) in [(256, 256), (40, 40), (1000, 1000)] {
            for size in [16usize, 224] {
                let img = scene(w, h);
                assert!(
                    centre_crop(&img, size) == resize_whole_then_crop(&img, size),
                    "{w}x{h} at {size}"
                );
            }
        }
        for (w, h) in [
            (500, 375),
            (375, 500),
            (640, 480),
            (333, 500),
            (40, 30),
            (300, 299),
        ] {
            let img = scene(w, h);
            let (a, b) = (centre_crop(&img, 224), resize_whole_then_crop(&img, 224));
            assert_eq!(a.dimensions(), (224, 224));
            let diffs: Vec<f64> = a
                .as_raw()
                .iter()
                .zip(b.as_raw())
                .map(|(&p, &q)| (p as f64 - q as f64).abs())
                .collect();
            let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
            let max = diffs.iter().cloned().fold(0.0, f64::max);
            assert!(
                mean < 1.5 && max <= 10.0,
                "{w}x{h}: mean {mean:.3}, max {max}"
            );
        }
    }

    /// An image far wider than tall admits no random resized crop: the fallback centre
    /// crop is still flipped at random, so training sees both orientations.
    #[test]
    fn the_fallback_crop_is_flipped_at_random() {
        let root = std::env::temp_dir().join(format!("gradex-wide-{}", std::process::id()));
        std::fs::create_dir_all(root.join("a")).unwrap();
        scene(400, 10)
            .save(root.join("a").join("wide.png"))
            .unwrap();
        let ds = ImageFolder::open(&root, 8, true).unwrap();
        let crops: Vec<RgbImage> = (0..32)
            .map(|seed| ds.load(0, &mut Rng::new(seed)).unwrap())
            .collect();
        assert!(crops.iter().any(|c| *c != crops[0]), "every crop the same");
        let _ = std::fs::remove_dir_all(root);
    }
}
