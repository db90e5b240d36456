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
//! travelled           ‖θ_t(S) − θ_0‖₂
//! train_loss          F_S(θ_t(S))
//! ```
//!
//! Optimizers whose steps differ in size drift apart in proportion to how far they move, so the
//! distance is also reported relative to the distance travelled, and at a matched training loss
//! ([`matched_loss`]).
//!
//! into `RUN_DIR/<optimizer>/stability.csv`, and `RUN_DIR/figures/stability.png`.
//! S is the training split but its last example, which is the fresh one: offline on the shipped
//! digits (MLP, S of 1,437), or on CIFAR-10 (VGG16 of the preset's variant or `--vgg`, S of
//! 49,999; augmentation draws depend on (seed, epoch, position) only, so both runs see the same
//! crops). The rows and the decay mask are the experiment's preset's, or those of the preset
//! file `--preset` names (a sweep's `best.json`: stability at tuned settings); `--decay-mask`
//! overrides the mask.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};

use super::data::{ClassificationData, TrainData};
use super::experiments::{needed, Experiment, ModelFactory};
use super::run::evaluate;
use crate::data::batches::{Examples, Images};
use crate::data::digits::{self, FeatureSet};
use crate::data::{cifar10, ImageSet, Split};
use crate::models::{Mlp, MlpConfig, Model, Vgg, VggConfig, VggVariant};
use crate::preset::{Augmentation, DecayMask, Preset};
use crate::progress::bar;
use crate::report::{draw_figures, StabilityRecord, StabilityWriter};
use homeadam_candle::VarOptimizer;

/// What to measure.
#[derive(Clone, Debug)]
pub struct StabilityOptions {
    /// `DigitsMlp` or `Cifar10Vgg16`.
    pub experiment: Experiment,
    /// An offline copy of the dataset (CIFAR-10).
    pub data_dir: Option<PathBuf>,
    /// A CPU-sized VGG (width / 16).
    pub small: bool,
    /// Overrides the preset's VGG variant.
    pub vgg: Option<VggVariant>,
    /// Overrides the preset's decay mask.
    pub decay_mask: Option<DecayMask>,
    /// A preset in place of the experiment's own (e.g. the `best.json` of `homeadam sweep`), so
    /// that stability is measured at tuned settings.
    pub preset: Option<Preset>,
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
    /// Where the models and minibatches live.
    pub device: Device,
}

/// One optimizer's rows, one per epoch (at least one).
#[derive(Clone, Debug)]
pub struct StabilitySummary {
    /// The optimizer.
    pub optimizer: String,
    /// Its rows.
    pub rows: Vec<StabilityRecord>,
}

impl StabilitySummary {
    /// The last epoch's row.
    pub fn last(&self) -> &StabilityRecord {
        self.rows.last().expect("a summary has at least one row")
    }

    /// The first epoch whose training loss is at most `loss`.
    pub fn at_loss(&self, loss: f64) -> Option<&StabilityRecord> {
        self.rows.iter().find(|r| r.train_loss.is_some_and(|l| l <= loss))
    }
}

/// The training loss every optimizer reached: the largest of their smallest training losses
/// (`None` without one).
pub fn matched_loss(summaries: &[StabilitySummary]) -> Option<f64> {
    summaries
        .iter()
        .map(|s| {
            s.rows
                .iter()
                .filter_map(|r| r.train_loss)
                .fold(f64::INFINITY, f64::min)
        })
        .filter(|l| l.is_finite())
        .reduce(f64::max)
}

/// S, S⁽ⁱ⁾ and the test split: the digits.
fn digit_sets(replace: usize) -> Result<(FeatureSet, FeatureSet, FeatureSet)> {
    let all = digits::load(&digits::shipped_path())?;
    let (train, test) = digits::split(&all, 0.2, 0)?;
    let n = check_replace(train.n, replace)?;
    let s = train.subset(&(0..n).collect::<Vec<_>>());
    let mut s_i = s.clone();
    s_i.x[replace * s.features..(replace + 1) * s.features].copy_from_slice(train.example(n));
    s_i.labels[replace] = train.labels[n];
    Ok((s, s_i, test))
}

/// S, S⁽ⁱ⁾ and the test split: CIFAR-10, normalised, S and S⁽ⁱ⁾ padded by `pad` for the
/// random crop.
fn cifar_sets(
    data_dir: Option<&std::path::Path>,
    replace: usize,
    pad: usize,
) -> Result<(Images, Images, Images)> {
    let mut train: ImageSet = cifar10::load(data_dir, Split::Train)?;
    let test = cifar10::load(data_dir, Split::Test)?;
    let n = check_replace(train.n, replace)?;
    let len = train.image_len();
    let fresh = train.image(n).to_vec();
    let fresh_label = train.labels[n];
    train.n = n;
    train.pixels.truncate(n * len);
    train.labels.truncate(n);
    let mut train_i = train.clone();
    train_i.pixels[replace * len..(replace + 1) * len].copy_from_slice(&fresh);
    train_i.labels[replace] = fresh_label;
    let norm = cifar10::normalization();
    Ok((
        Images::new(train, norm.clone(), pad)?,
        Images::new(train_i, norm.clone(), pad)?,
        Images::new(test, norm, 0)?,
    ))
}

/// The size of S (the split but its last example), if `replace` lies in it.
fn check_replace(split_len: usize, replace: usize) -> Result<usize> {
    let n = split_len.saturating_sub(1);
    if replace >= n {
        bail!("--replace {replace}: S has {n} examples");
    }
    Ok(n)
}

/// ‖θ(a) − θ(b)‖₂: each variable's Σ d² in f64 on the device (d² of an f32 is exact in f64),
/// one read of the per-variable sums, added on the host in variable order.
fn distance(a: &dyn Model, b: &dyn Model) -> Result<f64> {
    let sums = a
        .vars()
        .iter()
        .zip(b.vars().iter())
        .map(|((_, x), (_, y))| {
            Ok((x.as_tensor() - y.as_tensor())?
                .to_dtype(DType::F64)?
                .sqr()?
                .sum_all()?)
        })
        .collect::<Result<Vec<Tensor>>>()?;
    if sums.is_empty() {
        return Ok(0.0);
    }
    let sum: f64 = Tensor::stack(&sums, 0)?.to_vec1::<f64>()?.iter().sum();
    Ok(sum.sqrt())
}

/// Runs the experiment for every optimizer; returns each one's last epoch and the figures.
pub fn run_stability(o: &StabilityOptions) -> Result<(Vec<StabilitySummary>, Vec<PathBuf>)> {
    let dev = o.device.clone();
    let preset = o.experiment.preset(o.preset.as_ref())?;
    match o.experiment {
        Experiment::DigitsMlp => {
            let (s, s_i, test) = digit_sets(o.replace)?;
            let factory: ModelFactory =
                Box::new(move |seed| Ok(Box::new(Mlp::new(MlpConfig::digits(), seed, &dev)?)));
            lockstep(o, preset, (s, s_i, test), vec![digits::FEATURES], false, factory)
        }
        Experiment::Cifar10Vgg16 => {
            let name = o.experiment.preset_name();
            let protocol = &preset.protocol;
            let augmentation = needed(name, "augmentation", &protocol.augmentation)?.value;
            let pad = augmentation.padding().unwrap_or(0);
            let (s, s_i, test) = cifar_sets(o.data_dir.as_deref(), o.replace, pad)?;
            let variant = match o.vgg {
                Some(v) => v,
                None => needed(name, "vgg", &protocol.vgg)?.value,
            };
            let config = VggConfig {
                width: if o.small { 1.0 / 16.0 } else { 1.0 },
                ..VggConfig::cifar10(variant)
            };
            let factory: ModelFactory = Box::new(move |seed| Ok(Box::new(Vgg::new(config, seed, &dev)?)));
            lockstep(
                o,
                preset,
                (s, s_i, test),
                cifar10::SHAPE.to_vec(),
                augmentation != Augmentation::None,
                factory,
            )
        }
        other => bail!(
            "stability: {} is not supported (digits-mlp or cifar10-vgg16)",
            other.name()
        ),
    }
}

/// The two runs of every optimizer, in lockstep, on S and S⁽ⁱ⁾.
fn lockstep<E: Examples + Clone>(
    o: &StabilityOptions,
    preset: Preset,
    (s, s_i, test): (E, E, E),
    shape: Vec<usize>,
    augment: bool,
    new_model: ModelFactory,
) -> Result<(Vec<StabilitySummary>, Vec<PathBuf>)> {
    let dev = &o.device;
    let batch = preset.batch_size;
    let on_s = ClassificationData::new(s.clone(), test.clone(), shape.clone(), batch, augment, dev)?;
    let on_s_i = ClassificationData::new(s_i, test, shape.clone(), batch, augment, dev)?;
    // The training loss F_S is the mean loss over S, evaluated as a "test set".
    let s_as_test = ClassificationData::new(s.clone(), s, shape, batch, false, dev)?;
    let mut summaries = Vec::new();
    let decay = o.decay_mask.unwrap_or(preset.protocol.decay_mask.value);
    for name in &o.optimizers {
        let steps_per_epoch = on_s.train_batches() as u64;
        let config = preset.optim_config(name, steps_per_epoch, decay)?;
        let models = [new_model(o.seed)?, new_model(o.seed)?];
        let initial = new_model(o.seed)?;
        let mut opts = [
            VarOptimizer::from_named(models[0].vars(), config.clone())?,
            VarOptimizer::from_named(models[1].vars(), config)?,
        ];
        let dir = o.out_dir.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut writer = StabilityWriter::create(&dir.join("stability.csv"), true)?;
        let batches = on_s.train_batches();
        let pb = bar(o.progress, o.epochs * batches as u64, format!("stability {name}"));
        let mut rows = Vec::new();
        for epoch in 0..o.epochs {
            for b in 0..batches {
                for (k, data) in [&on_s, &on_s_i].into_iter().enumerate() {
                    let mb = data.train_batch(o.seed, epoch, b)?;
                    let logits = models[k].forward(&mb.input, true)?;
                    let loss = candle_nn::loss::cross_entropy(&logits, &mb.target)?;
                    opts[k].step_with_report(&loss.backward()?)?;
                }
                pb.inc(1);
            }
            let (train_a, _) = evaluate(models[0].as_ref(), &s_as_test)?;
            let (train_b, _) = evaluate(models[1].as_ref(), &s_as_test)?;
            let (test_a, _) = evaluate(models[0].as_ref(), &on_s)?;
            let (test_b, _) = evaluate(models[1].as_ref(), &on_s)?;
            let row = StabilityRecord {
                epoch: u32::try_from(epoch + 1).context("too many epochs")?,
                param_distance: distance(models[0].as_ref(), models[1].as_ref())?,
                train_loss_gap: (train_a - train_b).abs(),
                test_loss_gap: (test_a - test_b).abs(),
                generalization_gap: test_a - train_a,
                travelled: Some(distance(models[0].as_ref(), initial.as_ref())?),
                train_loss: Some(train_a),
            };
            writer.append(&row)?;
            rows.push(row);
        }
        pb.finish_and_clear();
        if !rows.is_empty() {
            summaries.push(StabilitySummary {
                optimizer: name.clone(),
                rows,
            });
        }
    }
    Ok((summaries, draw_figures(&o.out_dir)?))
}
