//! In-memory labelled images (u8, channel-planar), their normalisation and augmentation.

use crate::rng::Rng;
use anyhow::{ensure, Result};

/// Labelled images, `n × channels × height × width` bytes, each channel a plane (as CIFAR-10
/// stores them and as a convolution wants them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSet {
    /// Number of images.
    pub n: usize,
    /// Channels per image (3: R, G, B).
    pub channels: usize,
    /// Rows per image.
    pub height: usize,
    /// Columns per image.
    pub width: usize,
    /// `n × channels × height × width` pixel values, image-major then channel planes.
    pub pixels: Vec<u8>,
    /// One class index per image, each `< classes`.
    pub labels: Vec<u32>,
    /// Number of classes.
    pub classes: usize,
}

impl ImageSet {
    /// An empty set of images of the given shape.
    pub fn empty(channels: usize, height: usize, width: usize, classes: usize) -> Self {
        ImageSet {
            n: 0,
            channels,
            height,
            width,
            pixels: Vec::new(),
            labels: Vec::new(),
            classes,
        }
    }

    /// Bytes per image.
    pub fn image_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// The pixels of image `i` (`i < n`).
    pub fn image(&self, i: usize) -> &[u8] {
        let len = self.image_len();
        &self.pixels[i * len..(i + 1) * len]
    }

    /// Appends `other`'s images (same shape and classes).
    pub fn append(&mut self, other: ImageSet) -> Result<()> {
        ensure!(
            (other.channels, other.height, other.width, other.classes)
                == (self.channels, self.height, self.width, self.classes),
            "cannot join images of shape {}x{}x{} ({} classes) to {}x{}x{} ({} classes)",
            other.channels,
            other.height,
            other.width,
            other.classes,
            self.channels,
            self.height,
            self.width,
            self.classes
        );
        self.n += other.n;
        self.pixels.extend_from_slice(&other.pixels);
        self.labels.extend_from_slice(&other.labels);
        Ok(())
    }

    /// Per-channel mean and standard deviation of the pixels scaled to [0, 1], over all images
    /// (for a dataset without published constants, computed once from its training split).
    pub fn channel_stats(&self) -> Normalize {
        let plane = self.height * self.width;
        let mut sum = vec![0f64; self.channels];
        let mut sum_sq = vec![0f64; self.channels];
        for img in self.pixels.chunks_exact(self.image_len().max(1)) {
            for (c, values) in img.chunks_exact(plane.max(1)).enumerate() {
                // Integer sums are exact; converting once per plane keeps f64 rounding out.
                let s: u64 = values.iter().map(|&v| v as u64).sum();
                let s2: u64 = values.iter().map(|&v| (v as u64) * (v as u64)).sum();
                sum[c] += s as f64;
                sum_sq[c] += s2 as f64;
            }
        }
        let count = (self.n * plane).max(1) as f64;
        let mut mean = Vec::with_capacity(self.channels);
        let mut std = Vec::with_capacity(self.channels);
        for c in 0..self.channels {
            let m = sum[c] / count / 255.0;
            let var = (sum_sq[c] / count / (255.0 * 255.0) - m * m).max(0.0);
            mean.push(m as f32);
            std.push(var.sqrt() as f32);
        }
        Normalize { mean, std }
    }

    /// Writes image `i` as `f32` into `out` (`image_len()` values): scaled to [0, 1], then
    /// normalised per channel; `crop` shifts and mirrors it first (see [`CropFlip`]).
    pub fn write_normalized(&self, i: usize, norm: &Normalize, crop: Option<CropFlip>, out: &mut [f32]) {
        let (h, w) = (self.height, self.width);
        let src = self.image(i);
        let crop = crop.unwrap_or_default();
        for c in 0..self.channels {
            // Per-channel constants hoisted: out = (v/255 - mean) / std = v*scale + shift.
            let scale = 1.0 / (255.0 * norm.std[c]);
            let shift = -norm.mean[c] / norm.std[c];
            let plane = &src[c * h * w..(c + 1) * h * w];
            let dst = &mut out[c * h * w..(c + 1) * h * w];
            for y in 0..h {
                // Source row of the padded image: y + dy - pad (outside → zero padding).
                let sy = (y + crop.dy).checked_sub(crop.pad).filter(|&sy| sy < h);
                for x in 0..w {
                    let xx = if crop.flip { w - 1 - x } else { x };
                    let sx = (xx + crop.dx).checked_sub(crop.pad).filter(|&sx| sx < w);
                    let v = match (sy, sx) {
                        (Some(sy), Some(sx)) => plane[sy * w + sx],
                        // torchvision pads the raw image with 0 before normalising.
                        _ => 0,
                    };
                    dst[y * w + x] = v as f32 * scale + shift;
                }
            }
        }
    }
}

/// Per-channel mean and standard deviation of pixel values in [0, 1].
#[derive(Clone, Debug, PartialEq)]
pub struct Normalize {
    /// Mean per channel.
    pub mean: Vec<f32>,
    /// Standard deviation per channel (> 0).
    pub std: Vec<f32>,
}

impl Normalize {
    /// No normalisation beyond scaling to [0, 1] (mean 0, std 1), for `channels` channels.
    pub fn identity(channels: usize) -> Self {
        Normalize {
            mean: vec![0.0; channels],
            std: vec![1.0; channels],
        }
    }
}

/// One draw of the standard augmentation: zero-pad by `pad`, crop back to the original size at
/// offset (`dy`, `dx`) in the padded image, then mirror left–right when `flip` (torchvision's
/// `RandomCrop(size, padding=pad)` then `RandomHorizontalFlip()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CropFlip {
    /// Padding on every side.
    pub pad: usize,
    /// Row offset in the padded image, `0..=2·pad`.
    pub dy: usize,
    /// Column offset in the padded image, `0..=2·pad`.
    pub dx: usize,
    /// Mirror left–right after cropping.
    pub flip: bool,
}

impl CropFlip {
    /// Draws offsets uniformly in `0..=2·pad` and a fair flip, in that order, from `rng`.
    pub fn draw(pad: usize, rng: &mut Rng) -> Self {
        let dy = rng.below(2 * pad + 1);
        let dx = rng.below(2 * pad + 1);
        let flip = rng.below(2) == 1;
        CropFlip { pad, dy, dx, flip }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp() -> ImageSet {
        // One 1×3×4 image: pixel value = 10·row + col + 1, so every source position is visible.
        let pixels: Vec<u8> = (0..3)
            .flat_map(|y| (0..4).map(move |x| (10 * y + x + 1) as u8))
            .collect();
        ImageSet {
            n: 1,
            channels: 1,
            height: 3,
            width: 4,
            pixels,
            labels: vec![0],
            classes: 1,
        }
    }

    fn raw(set: &ImageSet, crop: Option<CropFlip>) -> Vec<u8> {
        let mut out = vec![0.0; set.image_len()];
        // std = 1/255 makes the output the raw byte value.
        let norm = Normalize {
            mean: vec![0.0],
            std: vec![1.0 / 255.0],
        };
        set.write_normalized(0, &norm, crop, &mut out);
        out.iter().map(|&v| v.round() as u8).collect()
    }

    #[test]
    fn centre_crop_without_flip_is_the_image() {
        let set = ramp();
        assert_eq!(
            raw(
                &set,
                Some(CropFlip {
                    pad: 2,
                    dy: 2,
                    dx: 2,
                    flip: false
                })
            ),
            set.pixels
        );
        assert_eq!(raw(&set, None), set.pixels);
    }

    #[test]
    fn shift_pads_with_zero_and_flip_mirrors() {
        let set = ramp();
        // dy = dx = 0 with pad 1: the image moves down-right by one, zeros enter at top/left.
        let shifted = raw(
            &set,
            Some(CropFlip {
                pad: 1,
                dy: 0,
                dx: 0,
                flip: false,
            }),
        );
        assert_eq!(shifted, vec![0, 0, 0, 0, 0, 1, 2, 3, 0, 11, 12, 13]);
        let flipped = raw(
            &set,
            Some(CropFlip {
                pad: 1,
                dy: 1,
                dx: 1,
                flip: true,
            }),
        );
        assert_eq!(flipped, vec![4, 3, 2, 1, 14, 13, 12, 11, 24, 23, 22, 21]);
    }

    #[test]
    fn draws_are_in_range_and_deterministic() {
        let mut a = Rng::new(3);
        let mut b = Rng::new(3);
        for _ in 0..200 {
            let d = CropFlip::draw(4, &mut a);
            assert!(d.dy <= 8 && d.dx <= 8);
            assert_eq!(d, CropFlip::draw(4, &mut b));
        }
    }

    #[test]
    fn channel_stats_of_a_known_image() {
        let set = ImageSet {
            n: 2,
            channels: 2,
            height: 1,
            width: 2,
            pixels: vec![0, 255, 51, 51, 255, 0, 51, 51],
            labels: vec![0, 1],
            classes: 2,
        };
        let s = set.channel_stats();
        assert!((s.mean[0] - 0.5).abs() < 1e-6 && (s.std[0] - 0.5).abs() < 1e-6);
        assert!((s.mean[1] - 0.2).abs() < 1e-6 && s.std[1].abs() < 1e-4);
    }

    #[test]
    fn append_checks_the_shape() {
        let mut a = ramp();
        a.append(ramp()).unwrap();
        assert_eq!((a.n, a.pixels.len(), a.labels.len()), (2, 24, 2));
        let err = a.append(ImageSet::empty(3, 3, 4, 1)).unwrap_err();
        assert!(err.to_string().contains("cannot join"), "{err}");
    }
}
