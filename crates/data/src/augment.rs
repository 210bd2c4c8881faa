//! Image augmentation for CIFAR-style training: random crop from the image zero-padded by
//! `pad` pixels on each side, and random horizontal flip (He et al. 2016's recipe). Works
//! in place on one `[C, H, W]` image of values in [0, 1], before normalisation.

use tensor::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Augment {
    pub pad: usize,
    pub flip: bool,
}

impl Augment {
    pub fn none() -> Self {
        Augment {
            pad: 0,
            flip: false,
        }
    }
    /// Pad 4, random crop, random flip.
    pub fn cifar() -> Self {
        Augment { pad: 4, flip: true }
    }

    pub fn apply(&self, img: &mut [f32], [c, h, w]: [usize; 3], rng: &mut Rng) {
        if self.pad > 0 {
            let p = self.pad as isize;
            // Offset of the crop inside the padded image, relative to the original origin.
            let dy = rng.below(2 * self.pad + 1) as isize - p;
            let dx = rng.below(2 * self.pad + 1) as isize - p;
            let src = img.to_vec();
            for ch in 0..c {
                for y in 0..h {
                    for x in 0..w {
                        let (sy, sx) = (y as isize + dy, x as isize + dx);
                        img[(ch * h + y) * w + x] =
                            if sy >= 0 && sy < h as isize && sx >= 0 && sx < w as isize {
                                src[(ch * h + sy as usize) * w + sx as usize]
                            } else {
                                0.0
                            };
                    }
                }
            }
        }
        if self.flip && rng.below(2) == 1 {
            for row in img.chunks_mut(w) {
                row.reverse();
            }
        }
    }
}
