//! The next minibatch assembled (and augmented) on a thread of its own while the device
//! trains on the current one, so that the host's work on the data is not in series with the
//! device's; for a CUDA device that thread also stages it in page-locked memory, from which
//! its copy is asynchronous (`staging.rs`). A minibatch is a function of (seed, epoch,
//! index) alone, so the order and the augmentation draws are those of an unprefetched run.
//!
//! A [`Pipeline`] lasts a run and keeps the page-locked buffers across its epochs; each epoch
//! is a [`Prefetch`] whose threads live in that epoch's scope.

use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

use anyhow::{anyhow, Result};

use super::data::{HostBatch, Minibatch, TrainData};
use super::staging::{StagedBatch, Stager};

/// A minibatch prepared on the host: its values, or their page-locked copies.
enum Prepared {
    Host(HostBatch),
    Staged(StagedBatch),
}

/// A run's minibatches: its data, its seed and, on a CUDA device, the page-locked buffers
/// they are staged in.
pub struct Pipeline<'env> {
    data: &'env dyn TrainData,
    seed: u64,
    stager: Option<Arc<Stager>>,
}

impl<'env> Pipeline<'env> {
    /// Minibatches of `data` for seed `seed`.
    pub fn new(data: &'env dyn TrainData, seed: u64) -> Self {
        Pipeline {
            data,
            seed,
            stager: Stager::for_device(data.device()),
        }
    }

    /// Epoch `epoch`'s minibatches `0..count`, their threads spawned in `scope`.
    pub fn epoch<'scope>(
        &'env self,
        scope: &'scope Scope<'scope, 'env>,
        epoch: u64,
        count: usize,
    ) -> Prefetch<'scope, 'env> {
        Prefetch {
            scope,
            pipeline: self,
            epoch,
            count,
            next: None,
        }
    }

    /// Minibatch `index` of epoch `epoch`, staged when there is a stager.
    fn prepare(&self, epoch: u64, index: usize) -> Result<Prepared> {
        let host = self.data.train_host_batch(self.seed, epoch, index)?;
        Ok(match &self.stager {
            Some(stager) => Prepared::Staged(stager.stage(host)?),
            None => Prepared::Host(host),
        })
    }
}

/// One epoch's minibatches `0..count`, each prepared while the one before it trains.
pub struct Prefetch<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    pipeline: &'env Pipeline<'env>,
    epoch: u64,
    count: usize,
    next: Option<(usize, ScopedJoinHandle<'scope, Result<Prepared>>)>,
}

impl Prefetch<'_, '_> {
    /// Minibatch `index` on the data's device (the one prepared ahead if it is the one asked
    /// for, else assembled now); starts preparing `index + 1` when it is below `count`.
    pub fn batch(&mut self, index: usize) -> Result<Minibatch> {
        let data = self.pipeline.data;
        let batch = match self.next.take() {
            Some((prepared, thread)) if prepared == index => thread
                .join()
                .map_err(|_| anyhow!("the thread preparing minibatch {index} panicked"))??,
            _ => Prepared::Host(data.train_host_batch(self.pipeline.seed, self.epoch, index)?),
        };
        if index + 1 < self.count {
            let (pipeline, epoch) = (self.pipeline, self.epoch);
            let thread = self.scope.spawn(move || pipeline.prepare(epoch, index + 1));
            self.next = Some((index + 1, thread));
        }
        match batch {
            Prepared::Staged(staged) => staged.upload(),
            Prepared::Host(host) => host.upload(data.device()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::digits::FeatureSet;
    use crate::train::data::ClassificationData;
    use candle_core::Device;

    fn bits(mb: &Minibatch) -> (Vec<u32>, Vec<u32>) {
        let x: Vec<f32> = mb.input.flatten_all().unwrap().to_vec1().unwrap();
        let y: Vec<u32> = mb.target.to_vec1().unwrap();
        (x.iter().map(|v| v.to_bits()).collect(), y)
    }

    #[test]
    fn prefetched_minibatches_equal_direct_ones_in_any_order_of_requests() {
        // Shuffled every epoch by the seed: the order is what a prefetch must not change.
        let set = || FeatureSet {
            n: 50,
            features: 4,
            x: (0..50 * 4).map(|i| (i as f32 * 0.37).sin()).collect(),
            labels: (0..50).map(|i| i % 3).collect(),
            classes: 3,
        };
        let data = ClassificationData::new(set(), set(), vec![4], 8, false, &Device::Cpu).unwrap();
        let count = data.train_batches();
        let pipeline = Pipeline::new(&data, 9);
        for epoch in [0, 3] {
            let direct: Vec<_> = (0..count)
                .map(|i| bits(&data.train_batch(9, epoch, i).unwrap()))
                .collect();
            // In order (each prepared ahead), then skipping, repeating and going back.
            let requests: Vec<usize> = (0..count).chain([2, 2, 5, 0, count - 1]).collect();
            std::thread::scope(|scope| {
                let mut prefetch = pipeline.epoch(scope, epoch, count);
                for &i in &requests {
                    assert_eq!(
                        bits(&prefetch.batch(i).unwrap()),
                        direct[i],
                        "epoch {epoch}, batch {i}"
                    );
                }
            });
        }
    }
}
