//! Deterministic epoch order and minibatches of `f32` features with their labels.
//!
//! Everything random here is a function of (seed, epoch, position) alone, not of a stream that
//! advanced through earlier batches, so a run resumed at batch `k` of epoch `e` sees exactly
//! the batches, and the augmentations, that the uninterrupted run saw.

use super::digits::FeatureSet;
use super::image_set::{CropFlip, ImageSet, Normalize};
use crate::rng::Rng;
use anyhow::{ensure, Result};

/// Decorrelates the augmentation streams from the order stream of the same (seed, epoch).
const AUGMENT_SALT: u64 = 0x6175_676d_656e_7421;

/// The order in which one epoch visits the examples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochOrder {
    seed: u64,
    epoch: u64,
    indices: Vec<usize>,
}

impl EpochOrder {
    /// `0..n` shuffled by a generator seeded from (`seed`, `epoch`) only.
    pub fn shuffled(n: usize, seed: u64, epoch: u64) -> Self {
        let mut indices: Vec<usize> = (0..n).collect();
        Rng::new(seed).fork(epoch).shuffle(&mut indices);
        EpochOrder { seed, epoch, indices }
    }

    /// `0..n` in order (evaluation); augmentation draws still depend on (`seed`, `epoch`).
    pub fn sequential(n: usize, seed: u64, epoch: u64) -> Self {
        EpochOrder {
            seed,
            epoch,
            indices: (0..n).collect(),
        }
    }

    /// The example indices in visiting order.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// The epoch this order is for.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Number of batches of size `batch`: the last, shorter one counts unless `drop_last`.
    pub fn num_batches(&self, batch: usize, drop_last: bool) -> usize {
        match (batch, drop_last) {
            (0, _) => 0,
            (b, true) => self.indices.len() / b,
            (b, false) => self.indices.len().div_ceil(b),
        }
    }

    /// The generator for the augmentation of the example at `position` in this order.
    fn augment_rng(&self, position: usize) -> Rng {
        Rng::new(self.seed ^ AUGMENT_SALT)
            .fork(self.epoch)
            .fork(position as u64)
    }
}

/// Something batches can be cut from: labelled examples of a fixed number of `f32` values
/// (`Sync`: the next minibatch is cut on another thread).
pub trait Examples: Sync {
    /// Number of examples.
    fn len(&self) -> usize;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `f32` values per example.
    fn example_len(&self) -> usize;

    /// The label of example `i`.
    fn label(&self, i: usize) -> u32;

    /// Writes example `i` into `out` (`example_len()` values), augmented with draws from `rng`
    /// when given and the data has an augmentation.
    fn write(&self, i: usize, rng: Option<&mut Rng>, out: &mut [f32]);
}

impl Examples for FeatureSet {
    fn len(&self) -> usize {
        self.n
    }

    fn example_len(&self) -> usize {
        self.features
    }

    fn label(&self, i: usize) -> u32 {
        self.labels[i]
    }

    /// The digits have no augmentation: `rng` is ignored.
    fn write(&self, i: usize, _rng: Option<&mut Rng>, out: &mut [f32]) {
        out.copy_from_slice(self.example(i));
    }
}

/// An image set as `f32` examples: normalised, and augmented by a random crop with `pad`
/// pixels of zero padding and a horizontal flip.
#[derive(Clone, Debug)]
pub struct Images {
    set: ImageSet,
    norm: Normalize,
    pad: usize,
}

impl Images {
    /// `set` normalised by `norm` (one positive, finite std per channel); `pad` is the random
    /// crop's padding (4 for CIFAR-10).
    pub fn new(set: ImageSet, norm: Normalize, pad: usize) -> Result<Self> {
        ensure!(
            norm.mean.len() == set.channels && norm.std.len() == set.channels,
            "normalisation for {} and {} channels given for images with {}",
            norm.mean.len(),
            norm.std.len(),
            set.channels
        );
        ensure!(
            norm.std.iter().all(|s| s.is_finite() && *s > 0.0) && norm.mean.iter().all(|m| m.is_finite()),
            "normalisation needs finite means and positive finite standard deviations, got {norm:?}"
        );
        ensure!(
            set.pixels.len() == set.n * set.image_len() && set.labels.len() == set.n,
            "image set of {} images holds {} bytes and {} labels",
            set.n,
            set.pixels.len(),
            set.labels.len()
        );
        Ok(Images { set, norm, pad })
    }
}

impl Examples for Images {
    fn len(&self) -> usize {
        self.set.n
    }

    fn example_len(&self) -> usize {
        self.set.image_len()
    }

    fn label(&self, i: usize) -> u32 {
        self.set.labels[i]
    }

    fn write(&self, i: usize, rng: Option<&mut Rng>, out: &mut [f32]) {
        let crop = rng.map(|r| CropFlip::draw(self.pad, r));
        self.set.write_normalized(i, &self.norm, crop, out);
    }
}

/// One minibatch.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Which batch of the epoch (0-based): resume with `index + 1`.
    pub index: usize,
    /// `len × example_len` values, example-major.
    pub x: Vec<f32>,
    /// One label per example.
    pub labels: Vec<u32>,
}

impl Batch {
    /// Examples in the batch.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the batch has no examples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// The batches of one epoch, from a given batch on.
pub struct Minibatches<'a, E: Examples + ?Sized> {
    examples: &'a E,
    order: &'a EpochOrder,
    batch: usize,
    augment: bool,
    next: usize,
    count: usize,
}

/// Iterates the batches of `order` over `examples`, starting at batch `start` (0 for a fresh
/// epoch, `k` to resume after `k` batches), augmenting when `augment`.
pub fn minibatches<'a, E: Examples + ?Sized>(
    examples: &'a E,
    order: &'a EpochOrder,
    batch: usize,
    drop_last: bool,
    augment: bool,
    start: usize,
) -> Result<Minibatches<'a, E>> {
    ensure!(batch > 0, "batch size must be positive");
    ensure!(
        order.indices.len() == examples.len(),
        "epoch order over {} examples used with {} examples",
        order.indices.len(),
        examples.len()
    );
    let count = order.num_batches(batch, drop_last);
    ensure!(
        start <= count,
        "cannot resume at batch {start}: the epoch has {count}"
    );
    Ok(Minibatches {
        examples,
        order,
        batch,
        augment,
        next: start,
        count,
    })
}

impl<E: Examples + ?Sized> Iterator for Minibatches<'_, E> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        if self.next >= self.count {
            return None;
        }
        let first = self.next * self.batch;
        let last = (first + self.batch).min(self.order.indices.len());
        let len = self.examples.example_len();
        let mut x = vec![0f32; (last - first) * len];
        let mut labels = Vec::with_capacity(last - first);
        for (position, out) in (first..last).zip(x.chunks_exact_mut(len.max(1))) {
            let i = self.order.indices[position];
            let mut rng = self.augment.then(|| self.order.augment_rng(position));
            self.examples.write(i, rng.as_mut(), out);
            labels.push(self.examples.label(i));
        }
        let index = self.next;
        self.next += 1;
        Some(Batch { index, x, labels })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count - self.next;
        (left, Some(left))
    }
}

impl<E: Examples + ?Sized> ExactSizeIterator for Minibatches<'_, E> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits_like(n: usize) -> FeatureSet {
        FeatureSet {
            n,
            features: 2,
            x: (0..n).flat_map(|i| [i as f32, -(i as f32)]).collect(),
            labels: (0..n).map(|i| (i % 3) as u32).collect(),
            classes: 3,
        }
    }

    #[test]
    fn order_depends_on_seed_and_epoch_only() {
        let a = EpochOrder::shuffled(100, 7, 3);
        assert_eq!(a, EpochOrder::shuffled(100, 7, 3));
        assert_ne!(a.indices(), EpochOrder::shuffled(100, 7, 4).indices());
        assert_ne!(a.indices(), EpochOrder::shuffled(100, 8, 3).indices());
        let mut sorted = a.indices().to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(EpochOrder::sequential(4, 0, 0).indices(), [0, 1, 2, 3]);
    }

    #[test]
    fn batches_cover_the_epoch_and_resume_identically() {
        let set = digits_like(10);
        let order = EpochOrder::shuffled(10, 1, 0);
        let all: Vec<Batch> = minibatches(&set, &order, 4, false, false, 0).unwrap().collect();
        assert_eq!(all.iter().map(Batch::len).collect::<Vec<_>>(), [4, 4, 2]);
        let seen: Vec<u32> = all.iter().flat_map(|b| b.labels.clone()).collect();
        let want: Vec<u32> = order.indices().iter().map(|&i| set.labels[i]).collect();
        assert_eq!(seen, want);
        assert_eq!(
            all[0].x[..2],
            [order.indices()[0] as f32, -(order.indices()[0] as f32)]
        );
        // Resuming after one batch, from (seed, epoch, 1) alone.
        let again = EpochOrder::shuffled(10, 1, 0);
        let resumed: Vec<Batch> = minibatches(&set, &again, 4, false, false, 1).unwrap().collect();
        assert_eq!(resumed, all[1..]);
        assert_eq!(minibatches(&set, &order, 4, true, false, 0).unwrap().len(), 2);
    }

    #[test]
    fn augmented_image_batches_resume_identically() {
        let set = ImageSet {
            n: 6,
            channels: 3,
            height: 8,
            width: 8,
            pixels: (0..6 * 192).map(|i| (i * 7 % 251) as u8).collect(),
            labels: vec![0, 1, 2, 3, 4, 5],
            classes: 6,
        };
        let images = Images {
            set: set.clone(),
            norm: Normalize::identity(3),
            pad: 2,
        };
        let order = EpochOrder::shuffled(6, 5, 2);
        let plain: Vec<Batch> = minibatches(&images, &order, 4, false, false, 0)
            .unwrap()
            .collect();
        let aug: Vec<Batch> = minibatches(&images, &order, 4, false, true, 0).unwrap().collect();
        assert_eq!(aug[0].x.len(), 4 * 192);
        assert_ne!(plain[0].x, aug[0].x);
        assert_eq!(plain[0].labels, aug[0].labels);
        let resumed: Vec<Batch> = minibatches(&images, &order, 4, false, true, 1).unwrap().collect();
        assert_eq!(resumed, aug[1..]);
        let first = plain[0].labels[0] as usize;
        assert_eq!(plain[0].x[5], set.image(first)[5] as f32 / 255.0);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let set = digits_like(5);
        let order = EpochOrder::shuffled(4, 0, 0);
        assert!(minibatches(&set, &order, 2, false, false, 0).is_err());
        let order = EpochOrder::shuffled(5, 0, 0);
        assert!(minibatches(&set, &order, 0, false, false, 0).is_err());
        assert!(minibatches(&set, &order, 2, false, false, 4).is_err());
        assert_eq!(minibatches(&set, &order, 2, false, false, 3).unwrap().count(), 0);
    }
}
