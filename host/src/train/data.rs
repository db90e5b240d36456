//! What a training loop consumes: minibatches of an epoch, addressed by (epoch, index) so that a
//! resumed run draws exactly the batches the killed one would have drawn.

use std::sync::Mutex;

use anyhow::{bail, Result};
use candle_core::{Device, Tensor};

use crate::data::batches::{minibatches, EpochOrder, Examples};
use crate::data::wikitext::{batchify, window};
use crate::report::Task;

/// One minibatch as tensors.
pub struct Minibatch {
    /// The model's input: `[batch, …example shape]` f32, or `[batch, len]` u32 token ids.
    pub input: Tensor,
    /// Class ids `[batch]` or next-token ids `[batch, len]`, u32.
    pub target: Tensor,
    /// Predictions the batch scores: examples, or tokens.
    pub predictions: usize,
}

/// A minibatch assembled (and augmented) on the host, before it goes to the device: what a
/// thread can prepare while the device trains on the previous one ([`super::prefetch`]).
pub struct HostBatch {
    pub(super) input: HostValues,
    pub(super) input_dims: Vec<usize>,
    pub(super) target: Vec<u32>,
    pub(super) target_dims: Vec<usize>,
    pub(super) predictions: usize,
}

/// A minibatch's input values: image or feature values, or token ids.
pub(super) enum HostValues {
    F32(Vec<f32>),
    U32(Vec<u32>),
}

impl HostBatch {
    /// The minibatch as tensors on `device`.
    pub fn upload(self, device: &Device) -> Result<Minibatch> {
        let input = match self.input {
            HostValues::F32(v) => Tensor::from_vec(v, self.input_dims, device)?,
            HostValues::U32(v) => Tensor::from_vec(v, self.input_dims, device)?,
        };
        Ok(Minibatch {
            input,
            target: Tensor::from_vec(self.target, self.target_dims, device)?,
            predictions: self.predictions,
        })
    }
}

/// A training set and a test set cut into minibatches (shared with the thread that prepares
/// the next minibatch, hence `Sync`).
pub trait TrainData: Sync {
    /// Classification (accuracy) or language modelling (perplexity).
    fn task(&self) -> Task;
    /// Minibatches in one training epoch.
    fn train_batches(&self) -> usize;
    /// The device the minibatches go to.
    fn device(&self) -> &Device;
    /// Minibatch `index` of epoch `epoch` of the run with seed `seed` (the seed of the data
    /// order and augmentation), on the host: a function of (seed, epoch, index) alone.
    fn train_host_batch(&self, seed: u64, epoch: u64, index: usize) -> Result<HostBatch>;
    /// [`TrainData::train_host_batch`] on the device.
    fn train_batch(&self, seed: u64, epoch: u64, index: usize) -> Result<Minibatch> {
        self.train_host_batch(seed, epoch, index)?.upload(self.device())
    }
    /// Minibatch `index` of the training split for a clean evaluation: in a fixed order, not
    /// augmented.
    fn clean_train_batch(&self, index: usize) -> Result<Minibatch>;
    /// Minibatches of the test set (fixed order).
    fn test_batches(&self) -> usize;
    /// Test minibatch `index`.
    fn test_batch(&self, index: usize) -> Result<Minibatch>;
}

/// Labelled examples (digits, images): shuffled every epoch by [`EpochOrder`], augmented when
/// asked.
pub struct ClassificationData<E: Examples> {
    train: E,
    test: E,
    shape: Vec<usize>,
    batch: usize,
    augment: bool,
    /// The last epoch's order, and the seed it was drawn for.
    order: Mutex<Option<(u64, EpochOrder)>>,
    device: Device,
}

impl<E: Examples> ClassificationData<E> {
    /// `shape` is one example's tensor shape (e.g. `[64]`, `[3, 32, 32]`).
    pub fn new(
        train: E,
        test: E,
        shape: Vec<usize>,
        batch: usize,
        augment: bool,
        device: &Device,
    ) -> Result<Self> {
        let len: usize = shape.iter().product();
        if batch == 0 || train.is_empty() || test.is_empty() {
            bail!(
                "need a positive batch size and non-empty sets (batch {batch}, {} train, {} test examples)",
                train.len(),
                test.len()
            );
        }
        if train.example_len() != len || test.example_len() != len {
            bail!(
                "examples of {} / {} values do not have the shape {shape:?}",
                train.example_len(),
                test.example_len()
            );
        }
        Ok(ClassificationData {
            train,
            test,
            shape,
            batch,
            augment,
            order: Mutex::new(None),
            device: device.clone(),
        })
    }

    /// Batch `index` of `set` in file order, not augmented.
    fn fixed_batch(&self, set: &E, index: usize, what: &str) -> Result<Minibatch> {
        // A sequential order draws nothing from its seed.
        let order = EpochOrder::sequential(set.len(), 0, 0);
        let Some(b) = minibatches(set, &order, self.batch, false, false, index)?.next() else {
            bail!("the {what} set has no batch {index}");
        };
        self.host_batch(b.x, b.labels).upload(&self.device)
    }

    fn host_batch(&self, x: Vec<f32>, labels: Vec<u32>) -> HostBatch {
        let n = labels.len();
        let mut dims = vec![n];
        dims.extend(&self.shape);
        HostBatch {
            input: HostValues::F32(x),
            input_dims: dims,
            target: labels,
            target_dims: vec![n],
            predictions: n,
        }
    }
}

impl<E: Examples> TrainData for ClassificationData<E> {
    fn task(&self) -> Task {
        Task::Classification
    }

    fn train_batches(&self) -> usize {
        self.train.len().div_ceil(self.batch)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn train_host_batch(&self, seed: u64, epoch: u64, index: usize) -> Result<HostBatch> {
        let mut order = self
            .order
            .lock()
            .map_err(|_| anyhow::anyhow!("the epoch order's lock is poisoned"))?;
        if order
            .as_ref()
            .is_none_or(|(s, o)| *s != seed || o.epoch() != epoch)
        {
            *order = Some((seed, EpochOrder::shuffled(self.train.len(), seed, epoch)));
        }
        let (_, order) = order.as_ref().expect("set above");
        let Some(b) = minibatches(&self.train, order, self.batch, false, self.augment, index)?.next() else {
            bail!("epoch {epoch} has no batch {index}");
        };
        Ok(self.host_batch(b.x, b.labels))
    }

    fn clean_train_batch(&self, index: usize) -> Result<Minibatch> {
        self.fixed_batch(&self.train, index, "training")
    }

    fn test_batches(&self) -> usize {
        self.test.len().div_ceil(self.batch)
    }

    fn test_batch(&self, index: usize) -> Result<Minibatch> {
        self.fixed_batch(&self.test, index, "test")
    }
}

/// A token stream cut into `batch` columns and windows of `bptt` tokens, in order (as
/// pytorch/examples' word_language_model).
pub struct LanguageData {
    train: Vec<Vec<u32>>,
    test: Vec<Vec<u32>>,
    bptt: usize,
    device: Device,
}

impl LanguageData {
    /// `train` and `test` are token ids, each below `vocab` (checked here, on the host, so that
    /// the model need not read the ids back from the device); `batch` columns of `bptt`-token
    /// windows.
    pub fn new(
        train: &[u32],
        test: &[u32],
        vocab: usize,
        batch: usize,
        bptt: usize,
        device: &Device,
    ) -> Result<Self> {
        if batch == 0 || bptt == 0 {
            bail!("batch ({batch}) and sequence length ({bptt}) must be positive");
        }
        for (split, ids) in [("training", train), ("test", test)] {
            if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
                bail!("{split} token {i} has id {id}, outside the vocabulary of {vocab}");
            }
        }
        let (train, test) = (batchify(train, batch), batchify(test, batch));
        let rows = |c: &[Vec<u32>]| c.first().map_or(0, Vec::len);
        if rows(&train) < 2 || rows(&test) < 2 {
            bail!("too few tokens for {batch} columns of at least 2 tokens");
        }
        Ok(LanguageData {
            train,
            test,
            bptt,
            device: device.clone(),
        })
    }

    fn host_batch(&self, columns: &[Vec<u32>], index: usize) -> Result<HostBatch> {
        let Some(w) = window(columns, index * self.bptt, self.bptt) else {
            bail!("no window {index} of {} tokens", self.bptt);
        };
        Ok(HostBatch {
            input: HostValues::U32(w.input),
            input_dims: vec![w.batch, w.len],
            target: w.target,
            target_dims: vec![w.batch, w.len],
            predictions: w.batch * w.len,
        })
    }

    fn batch(&self, columns: &[Vec<u32>], index: usize) -> Result<Minibatch> {
        self.host_batch(columns, index)?.upload(&self.device)
    }

    fn count(&self, columns: &[Vec<u32>]) -> usize {
        (columns.first().map_or(0, Vec::len) - 1).div_ceil(self.bptt)
    }
}

impl TrainData for LanguageData {
    fn task(&self) -> Task {
        Task::LanguageModel
    }

    fn train_batches(&self) -> usize {
        self.count(&self.train)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    /// The windows come in order, whatever the seed and epoch (pytorch/examples' order).
    fn train_host_batch(&self, _seed: u64, _epoch: u64, index: usize) -> Result<HostBatch> {
        self.host_batch(&self.train, index)
    }

    fn clean_train_batch(&self, index: usize) -> Result<Minibatch> {
        self.batch(&self.train, index)
    }

    fn test_batches(&self) -> usize {
        self.count(&self.test)
    }

    fn test_batch(&self, index: usize) -> Result<Minibatch> {
        self.batch(&self.test, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ids_outside_the_vocabulary_are_refused_on_the_host() {
        let ids: Vec<u32> = (0..40).map(|i| i % 10).collect();
        let data = LanguageData::new(&ids, &ids, 10, 2, 5, &Device::Cpu).unwrap();
        let mb = data.train_batch(0, 0, 0).unwrap();
        assert_eq!(mb.input.dims(), &[2, 5]);
        let mut bad = ids.clone();
        bad[17] = 10;
        let err = LanguageData::new(&bad, &ids, 10, 2, 5, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("training token 17 has id 10") && err.contains("of 10"),
            "{err}"
        );
        let err = LanguageData::new(&ids, &bad, 10, 2, 5, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("test token 17"), "{err}");
    }
}
