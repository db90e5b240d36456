//! Minibatch scores (mean loss, correct predictions) kept on the device until they are needed,
//! so that a training step reads nothing back but the optimizer's status: reading a scalar
//! waits for the device to finish the step, which on a GPU costs as much as a small kernel.
//!
//! The scores are read back one minibatch at a time, in the order taken, so the sums built
//! from them are the same bits as sums of per-step reads.

use anyhow::{ensure, Result};
use candle_core::{DType, Tensor, D};

use super::checkpoint::EpochProgress;
use crate::report::Task;

/// Scores held on the device at most: bounds the device memory they take (one small
/// allocation each) when nothing else asks for them.
const CAPACITY: usize = 1024;

/// One minibatch's scores, read back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchScore {
    /// The mean loss over the minibatch's predictions.
    pub loss: f32,
    /// Correct predictions (argmax = target) of a classification; 0 for a language model.
    pub correct: u64,
    /// Predictions the minibatch scores: examples, or tokens.
    pub predictions: usize,
}

impl BatchScore {
    /// Adds this minibatch to `p`: `loss_sum += loss · predictions`, `correct`, `seen`.
    pub fn add_to(&self, p: &mut EpochProgress) {
        p.loss_sum += f64::from(self.loss) * self.predictions as f64;
        p.correct += self.correct;
        p.seen += self.predictions as u64;
    }
}

/// The mean cross-entropy of `logits` against `target` and, for a classification, the number
/// of correct predictions (an f32 scalar), both on the logits' device. A language model is
/// scored by its loss alone (perplexity), so no argmax over its vocabulary is taken.
pub fn loss_and_correct(logits: &Tensor, target: &Tensor, task: Task) -> Result<(Tensor, Option<Tensor>)> {
    let classes = logits.dim(D::Minus1)?;
    let logits = logits.reshape(((), classes))?;
    let target = target.flatten_all()?;
    let loss = crate::models::cross_entropy::cross_entropy(&logits, &target)?;
    let correct = match task {
        Task::Classification => Some(
            logits
                .argmax(D::Minus1)?
                .eq(&target)?
                .to_dtype(DType::F32)?
                .sum_all()?,
        ),
        Task::LanguageModel => None,
    };
    Ok((loss, correct))
}

/// Minibatch scores on the device, in the order taken.
#[derive(Default)]
pub struct PendingScores {
    /// Per minibatch: its loss, then its correct count if it has one (f32 scalars, detached).
    values: Vec<Tensor>,
    /// Per minibatch: its predictions and whether a correct count follows its loss.
    batches: Vec<(usize, bool)>,
}

impl PendingScores {
    /// Holds one minibatch's scalars (no device→host read).
    pub fn push(&mut self, loss: &Tensor, correct: Option<&Tensor>, predictions: usize) -> Result<()> {
        let scalar = |t: &Tensor| t.elem_count() == 1;
        ensure!(
            scalar(loss) && correct.is_none_or(scalar),
            "a minibatch score is one loss and at most one count (got shapes {:?} and {:?})",
            loss.dims(),
            correct.map(Tensor::dims)
        );
        // Detached: a held loss must not keep the step's autograd graph alive.
        self.values.push(loss.detach().reshape(())?);
        if let Some(correct) = correct {
            self.values.push(correct.detach().reshape(())?);
        }
        self.batches.push((predictions, correct.is_some()));
        Ok(())
    }

    /// Whether enough are held that they should be read back now.
    pub fn is_full(&self) -> bool {
        self.batches.len() >= CAPACITY
    }

    /// Every held score, in the order pushed, with one device→host read; holds none after.
    pub fn drain(&mut self) -> Result<Vec<BatchScore>> {
        if self.batches.is_empty() {
            return Ok(Vec::new());
        }
        let values = Tensor::stack(&self.values, 0)?.to_vec1::<f32>()?;
        self.values.clear();
        let mut values = values.into_iter();
        let mut next = || values.next().expect("a value pushed per loss and per count");
        Ok(self
            .batches
            .drain(..)
            .map(|(predictions, counted)| BatchScore {
                loss: next(),
                // An exact count: the sum of at most 2²⁴ ones is exact in f32.
                correct: if counted { next() as u64 } else { 0 },
                predictions,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn drains_in_order_and_matches_per_step_reads() {
        let dev = Device::Cpu;
        let logits = Tensor::new(&[[2.0f32, 0.5, -1.0], [0.1, 0.2, 3.0], [1.0, 0.5, 0.0]], &dev).unwrap();
        let targets = [
            Tensor::new(&[0u32, 2, 1], &dev).unwrap(),
            Tensor::new(&[1u32, 0, 0], &dev).unwrap(),
        ];
        let mut pending = PendingScores::default();
        let mut expected = Vec::new();
        for (k, t) in targets.iter().enumerate() {
            let (loss, correct) = loss_and_correct(&logits, t, Task::Classification).unwrap();
            let correct = correct.expect("a classification counts");
            pending.push(&loss, Some(&correct), 3 + k).unwrap();
            expected.push(BatchScore {
                loss: loss.to_scalar::<f32>().unwrap(),
                correct: correct.to_scalar::<f32>().unwrap() as u64,
                predictions: 3 + k,
            });
        }
        assert!(!pending.is_full());
        let got = pending.drain().unwrap();
        assert_eq!(got, expected);
        assert_eq!(got[0].correct, 2);
        assert_eq!(got[1].correct, 1);
        assert!(pending.drain().unwrap().is_empty());

        let mut p = EpochProgress::default();
        got.iter().for_each(|s| s.add_to(&mut p));
        let sum = f64::from(expected[0].loss) * 3.0 + f64::from(expected[1].loss) * 4.0;
        assert_eq!((p.loss_sum.to_bits(), p.correct, p.seen), (sum.to_bits(), 3, 7));
    }

    #[test]
    fn fills_up_and_refuses_non_scalars() {
        let dev = Device::Cpu;
        let one = Tensor::new(1f32, &dev).unwrap();
        let mut pending = PendingScores::default();
        for _ in 0..CAPACITY {
            assert!(!pending.is_full());
            pending.push(&one, Some(&one), 1).unwrap();
        }
        assert!(pending.is_full());
        assert_eq!(pending.drain().unwrap().len(), CAPACITY);
        assert!(!pending.is_full());
        let two = Tensor::new(&[1f32, 2.0], &dev).unwrap();
        assert!(pending.push(&two, Some(&one), 1).is_err());
        assert!(pending.push(&one, Some(&two), 1).is_err());
        assert!(pending.push(&two, None, 1).is_err());
    }

    #[test]
    fn a_language_model_is_scored_by_its_loss_alone() {
        let dev = Device::Cpu;
        let logits = Tensor::new(&[[2.0f32, 0.5, -1.0], [0.1, 0.2, 3.0]], &dev).unwrap();
        let target = Tensor::new(&[0u32, 2], &dev).unwrap();
        let (lm_loss, counted) = loss_and_correct(&logits, &target, Task::LanguageModel).unwrap();
        assert!(counted.is_none());
        let (loss, correct) = loss_and_correct(&logits, &target, Task::Classification).unwrap();
        let bits = |t: &Tensor| t.to_scalar::<f32>().unwrap().to_bits();
        assert_eq!(bits(&lm_loss), bits(&loss));
        // Mixed in one drain, in the order pushed.
        let mut pending = PendingScores::default();
        pending.push(&lm_loss, None, 2).unwrap();
        pending.push(&loss, correct.as_ref(), 2).unwrap();
        pending.push(&lm_loss, None, 5).unwrap();
        let got = pending.drain().unwrap();
        let loss = loss.to_scalar::<f32>().unwrap();
        let score = |correct, predictions| BatchScore {
            loss,
            correct,
            predictions,
        };
        assert_eq!(got, [score(0, 2), score(2, 2), score(0, 5)]);
    }
}
