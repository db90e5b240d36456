//! The stability experiment: the paper's generalization bounds rest on uniform stability, i.e.
//! on how far apart two models drift when trained from the same seed on data sets S and S⁽ⁱ⁾
//! that differ in one example. This measures it: per optimizer, two runs in lockstep (same
//! initialisation, same minibatch order), one on S and one on S⁽ⁱ⁾ (example i replaced by a
//! fresh one from outside S), and after every epoch
//!
//! ```text
//! param_distance      ‖θ_t(S) − θ_t(S⁽ⁱ⁾)‖₂
//! train_loss_gap      |F_S(θ_t(S)) − F_S(θ_t(S⁽ⁱ⁾))|
//! test_loss_gap       |F_test(θ_t(S)) − F_test(θ_t(S⁽ⁱ⁾))|
//! generalization_gap  F_test(θ_t(S)) − F_S(θ_t(S))
//! ```
//!
//! into `RUN_DIR/<optimizer>/stability.csv`, and `RUN_DIR/figures/stability.png`.
//! Offline, on the shipped digits (S: the 1,437 first training examples; the fresh example:
//! the last one).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};

use super::data::{ClassificationData, TrainData};
use super::run::evaluate;
use crate::data::digits::{self, FeatureSet};
use crate::models::{Mlp, MlpConfig, Model};
use crate::optim::{OptimConfig, Preset, VarOptimizer};
use crate::report::{draw_figures, StabilityRecord, StabilityWriter};

/// What to measure.
#[derive(Clone, Debug)]
pub struct StabilityOptions {
    /// Optimizers by name.
    pub optimizers: Vec<String>,
    /// Epochs.
    pub epochs: u64,
    /// Seed of initialisation and data order (the same for both runs).
    pub seed: u64,
    /// The example i of S that S⁽ⁱ⁾ replaces.
    pub replace: usize,
    /// The run directory.
    pub out_dir: PathBuf,
    /// Draw a progress bar.
    pub progress: bool,
}

/// One optimizer's last epoch.
#[derive(Clone, Debug)]
pub struct StabilitySummary {
    /// The optimizer.
    pub optimizer: String,
    /// Its last row.
    pub last: StabilityRecord,
}

/// S and S⁽ⁱ⁾ from the digits' training split, and the test split.
fn data_sets(replace: usize) -> Result<(FeatureSet, FeatureSet, FeatureSet)> {
    let all = digits::load(&digits::shipped_path())?;
    let (train, test) = digits::split(&all, 0.2, 0)?;
    let n = train.n - 1;
    if replace >= n {
        bail!("--replace {replace}: S has {n} examples");
    }
    let s = train.subset(&(0..n).collect::<Vec<_>>());
    let mut s_i = s.clone();
    let fresh = train.example(n);
    s_i.x[replace * s.features..(replace + 1) * s.features].copy_from_slice(fresh);
    s_i.labels[replace] = train.labels[n];
    Ok((s, s_i, test))
}

fn distance(a: &dyn Model, b: &dyn Model) -> Result<f64> {
    let mut sum = 0.0;
    for ((_, x), (_, y)) in a.vars().iter().zip(b.vars().iter()) {
        let d = (x.as_tensor() - y.as_tensor())?.flatten_all()?.to_vec1::<f32>()?;
        sum += d.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>();
    }
    Ok(sum.sqrt())
}

/// Runs the experiment for every optimizer; returns each one's last epoch and the figures.
pub fn run_stability(o: &StabilityOptions) -> Result<(Vec<StabilitySummary>, Vec<PathBuf>)> {
    let preset = Preset::load("digits_quick")?;
    let (s, s_i, test) = data_sets(o.replace)?;
    let dev = Device::Cpu;
    let shape = vec![digits::FEATURES];
    let batch = preset.batch_size;
    let on_s = ClassificationData::new(s.clone(), test.clone(), shape.clone(), batch, o.seed, false, &dev)?;
    let on_s_i = ClassificationData::new(s_i, test, shape.clone(), batch, o.seed, false, &dev)?;
    // The training loss F_S is the mean loss over S, evaluated as a "test set".
    let s_as_test = ClassificationData::new(s.clone(), s, shape, batch, o.seed, false, &dev)?;
    let mut summaries = Vec::new();
    for name in &o.optimizers {
        let config = OptimConfig::new(preset.config(name)?);
        let models = [
            Mlp::new(MlpConfig::digits(), o.seed, &dev)?,
            Mlp::new(MlpConfig::digits(), o.seed, &dev)?,
        ];
        let mut opts = [
            VarOptimizer::from_named(models[0].vars(), config.clone())?,
            VarOptimizer::from_named(models[1].vars(), config)?,
        ];
        let dir = o.out_dir.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut writer = StabilityWriter::create(&dir.join("stability.csv"), ())?;
        let batches = on_s.train_batches();
        let pb = if o.progress {
            let style = ProgressStyle::with_template("{prefix:>24} {bar:30} {pos}/{len} [{elapsed}<{eta}]")
                .expect("valid template");
            ProgressBar::new(o.epochs * batches as u64)
                .with_style(style)
                .with_prefix(format!("stability {name}"))
        } else {
            ProgressBar::hidden()
        };
        let mut last = None;
        for epoch in 0..o.epochs {
            for b in 0..batches {
                for (k, data) in [&on_s, &on_s_i].into_iter().enumerate() {
                    let mb = data.train_batch(epoch, b)?;
                    let logits = models[k].forward(&mb.input, true)?;
                    let loss = candle_nn::loss::cross_entropy(&logits, &mb.target)?;
                    opts[k].step_with_report(&loss.backward()?)?;
                }
                pb.inc(1);
            }
            let (train_a, _) = evaluate(&models[0], &s_as_test)?;
            let (train_b, _) = evaluate(&models[1], &s_as_test)?;
            let (test_a, _) = evaluate(&models[0], &on_s)?;
            let (test_b, _) = evaluate(&models[1], &on_s)?;
            let row = StabilityRecord {
                epoch: u32::try_from(epoch + 1).context("too many epochs")?,
                param_distance: distance(&models[0], &models[1])?,
                train_loss_gap: (train_a - train_b).abs(),
                test_loss_gap: (test_a - test_b).abs(),
                generalization_gap: test_a - train_a,
            };
            writer.append(&row)?;
            last = Some(row);
        }
        pb.finish_and_clear();
        if let Some(last) = last {
            summaries.push(StabilitySummary {
                optimizer: name.clone(),
                last,
            });
        }
    }
    Ok((summaries, draw_figures(&o.out_dir)?))
}
