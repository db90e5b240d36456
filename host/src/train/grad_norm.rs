//! The full-batch training gradient's squared norm, ‖∇f(θ_t)‖² with f(θ) = (1/N) Σᵢ ℓ(θ; zᵢ)
//! over the N training examples: the paper's convergence bounds (Theorems 3–4) are on the mean
//! of ‖∇f(θ_t)‖ over t ≤ T (O(1/T^¼) for HomeAdam(W), O(ρ̆⁻¹/T^¼) for Adam(W)-srf), and the
//! smallest ‖∇f(θ_t)‖² over t ≤ T is read from the same rows.
//!
//! `grad_norms.csv`, in the run's folder: `step,grad_norm_sq`, one row before the first step
//! and one every `--grad-norm-every` steps after it.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::Tensor;

use super::data::{Minibatch, TrainData};
use super::scores::loss_and_correct;
use crate::models::Model;

/// ‖∇f(θ)‖² over the first `batches` minibatches of the training split in file order, not
/// augmented, in eval mode: each minibatch's mean-loss gradient weighted by its share of the
/// predictions, so that the sum is the gradient of the mean loss over all of them. It changes
/// neither the model nor its generator, so it does not change the training run.
pub fn full_gradient_norm_sq(model: &dyn Model, data: &dyn TrainData, batches: usize) -> Result<f64> {
    let vars = model.vars();
    let mut sums: Vec<Option<Tensor>> = vec![None; vars.len()];
    let mut seen = 0usize;
    for i in 0..batches.min(data.train_batches()) {
        let Minibatch {
            input,
            target,
            predictions,
        } = data.clean_train_batch(i)?;
        let logits = model.forward(&input, false)?;
        let (loss, _) = loss_and_correct(&logits, &target, data.task())?;
        let grads = crate::models::param_grads::backward(&loss)?;
        for ((name, var), sum) in vars.iter().zip(sums.iter_mut()) {
            let g = grads
                .get(var.as_tensor())
                .ok_or_else(|| anyhow!("the loss has no gradient for {name}"))?
                .affine(predictions as f64, 0.0)?;
            *sum = Some(match sum.take() {
                Some(s) => (s + g)?,
                None => g,
            });
        }
        seen += predictions;
    }
    if seen == 0 {
        bail!("no training minibatch to take the gradient over");
    }
    let mut total = 0.0;
    for sum in sums.into_iter().flatten() {
        let mean = sum.affine(1.0 / seen as f64, 0.0)?;
        total += f64::from(mean.sqr()?.sum_all()?.to_scalar::<f32>()?);
    }
    Ok(total)
}

/// `grad_norms.csv`, opened for appending rows.
pub struct GradNormWriter(std::fs::File);

impl GradNormWriter {
    /// A new `grad_norms.csv` at `path` with its header (an existing one is replaced).
    pub fn create(path: &Path) -> Result<Self> {
        let mut file =
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all(b"step,grad_norm_sq\n")?;
        Ok(GradNormWriter(file))
    }

    /// Appends the row of `step`.
    pub fn append(&mut self, step: u64, grad_norm_sq: f64) -> Result<()> {
        writeln!(self.0, "{step},{grad_norm_sq}").context("writing grad_norms.csv")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::experiments::{BuildOptions, Experiment};

    #[test]
    fn the_full_gradient_is_the_prediction_weighted_mean_of_the_minibatch_gradients() {
        let build = BuildOptions {
            batch_size: Some(500),
            ..BuildOptions::small_on(candle_core::Device::Cpu)
        };
        let setup = Experiment::DigitsMlp.build(&build).unwrap();
        let model = (setup.new_model)(0).unwrap();
        let data = setup.data.as_ref();
        let norm = full_gradient_norm_sq(model.as_ref(), data, usize::MAX).unwrap();
        // One minibatch of the whole split gives the same gradient as the weighted mean.
        let whole = BuildOptions {
            batch_size: Some(2000),
            ..build
        };
        let one = Experiment::DigitsMlp.build(&whole).unwrap();
        let single = full_gradient_norm_sq(model.as_ref(), one.data.as_ref(), usize::MAX).unwrap();
        assert!(norm > 0.0 && norm.is_finite());
        assert!((norm - single).abs() <= 1e-4 * single, "{norm} against {single}");
        // Evaluating twice gives the same value: the model is not changed.
        assert_eq!(
            full_gradient_norm_sq(model.as_ref(), data, usize::MAX).unwrap(),
            norm
        );
    }
}
