//! The stability experiment: the paper's generalization bounds rest on uniform stability, i.e.
//! on how far apart two models drift when trained from the same seed on data sets S and S⁽ⁱ⁾
//! that differ in one example. This measures it: per optimizer, runs in lockstep (same
//! initialisation, same minibatch order, same dropout masks), one on S and one on each S⁽ⁱ⁾
//! (example i replaced by a fresh one from outside S), and after every epoch (or every
//! `every_batches` minibatches) one row per S⁽ⁱ⁾
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
//! Several replaced examples share one θ(S): it is trained once per optimizer, each S⁽ⁱ⁾'s model
//! beside it. Every model's computation depends on its own data only, so a list gives the rows
//! that separate runs of its examples give.
//!
//! Files: with one replaced example, `RUN_DIR/<optimizer>/stability.csv` and
//! `RUN_DIR/figures/stability.png`; with several, the same under `RUN_DIR/replace<i>/` for each
//! example i. Beside them `stability.json`: the run's seed and replaced example, |S|, the
//! minibatches per epoch and per row (a row's `epoch` column counts rows, so that row r is
//! after r × that many steps), and per optimizer the smallest ρ = min v̂ its steps on S reported
//! (`null` for rules that report none), Theorem 1's ρ̂ less ε.
//!
//! The data sets:
//! - `digits-mlp`, `digits-cnn`: S is the shipped digits' training split but its last example,
//!   which is the fresh one (S of 1,437); the MLP or the CNN of the sweeps.
//! - `cifar10-vgg16`: the same on CIFAR-10 (VGG16 of the preset's variant or `--vgg`, S of
//!   49,999; augmentation draws depend on (seed, epoch, position) only, so both runs see the
//!   same crops).
//! - `wikitext2-quick`: the tiny Transformer LM on the shipped WikiText-2 validation split, cut
//!   into `batch` columns as `homeadam train wikitext2-quick` cuts it. S is what the run trains
//!   on: the first W windows of `bptt` tokens of each column (W the windows that fit, at most
//!   `max_batches`), with the one token after them that the last window predicts; an example is
//!   one window of one column, numbered in stream order (example i: column i / W, window
//!   i mod W), so |S| = batch × W. S⁽ⁱ⁾ replaces the `bptt` tokens of example i (the window's
//!   inputs; its targets are the same tokens shifted by one, so the last target of the window
//!   before it changes too) by the stream's last `bptt` tokens, which no column's first W
//!   windows reach. The windows come in order (no shuffling), so each model sees the replaced
//!   window at the same step of every epoch. Tested on the first 40,960 tokens of the test
//!   split, as the sweep.
//!
//! The losses are over all of S and of the test split, or with `eval_subset` over their leading
//! minibatches (in order: the LM's first windows of every column, the digits' first examples).
//! The rows and the decay mask are the experiment's preset's, or those of the preset file
//! `--preset` names (a sweep's `best.json`: stability at tuned settings); `--decay-mask`
//! overrides the mask.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor, D};

use super::data::{ClassificationData, LanguageData, TrainData};
use super::experiments::{needed, quick_lm_tokens, Experiment, ModelFactory};
use super::run::{evaluate_on, EvalSet};
use crate::data::batches::{Examples, Images};
use crate::data::digits::{self, FeatureSet};
use crate::data::wikitext::leading_rows;
use crate::data::{cifar10, ImageSet, Split};
use crate::models::{
    Cnn, CnnConfig, Mlp, MlpConfig, Model, TransformerConfig, TransformerLm, Vgg, VggConfig, VggVariant,
};
use crate::preset::{Augmentation, DecayMask, Preset};
use crate::progress::bar;
use crate::report::{draw_figures, StabilityRecord, StabilityWriter};
use homeadam_candle::VarOptimizer;

/// The experiments `homeadam stability` runs.
pub const SUPPORTED: [Experiment; 4] = [
    Experiment::DigitsMlp,
    Experiment::DigitsCnn,
    Experiment::WikiText2Quick,
    Experiment::Cifar10Vgg16,
];

/// What to measure.
#[derive(Clone, Debug)]
pub struct StabilityOptions {
    /// One of [`SUPPORTED`].
    pub experiment: Experiment,
    /// An offline copy of the dataset (CIFAR-10; WikiText-2 for `wikitext2-quick`).
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
    /// Seed of initialisation, data order and dropout (the same for every run).
    pub seed: u64,
    /// The examples of S that the S⁽ⁱ⁾ replace, one S⁽ⁱ⁾ each; distinct, at least one.
    pub replace: Vec<usize>,
    /// At most this many minibatches per epoch (`None`: all); on `wikitext2-quick`, S is the
    /// windows they read.
    pub max_batches: Option<usize>,
    /// A row every this many minibatches (`None`: after every epoch); it must divide an
    /// epoch's minibatches.
    pub every_batches: Option<usize>,
    /// The losses F_S and F_test on the leading minibatches of S and of the test split holding
    /// at least this many predictions (examples, or tokens), not on all (`None`).
    pub eval_subset: Option<usize>,
    /// The run directory.
    pub out_dir: PathBuf,
    /// Draw a progress bar.
    pub progress: bool,
    /// Where the models and minibatches live.
    pub device: Device,
}

impl StabilityOptions {
    /// Where the runs against S⁽ⁱ⁾ for `replace` = i write: the run directory itself with one
    /// replaced example, its `replace<i>` folder with several.
    pub fn run_dir(&self, replace: usize) -> PathBuf {
        if self.replace.len() == 1 {
            self.out_dir.clone()
        } else {
            self.out_dir.join(format!("replace{replace}"))
        }
    }
}

/// One optimizer's rows, one per epoch or `every_batches` (at least one).
#[derive(Clone, Debug)]
pub struct StabilitySummary {
    /// The optimizer.
    pub optimizer: String,
    /// Its rows.
    pub rows: Vec<StabilityRecord>,
}

impl StabilitySummary {
    /// The last row.
    pub fn last(&self) -> &StabilityRecord {
        self.rows.last().expect("a summary has at least one row")
    }

    /// The first row whose training loss is at most `loss`.
    pub fn at_loss(&self, loss: f64) -> Option<&StabilityRecord> {
        self.rows.iter().find(|r| r.train_loss.is_some_and(|l| l <= loss))
    }
}

/// Every optimizer's rows against one S⁽ⁱ⁾.
#[derive(Clone, Debug)]
pub struct ReplacedRun {
    /// The replaced example i.
    pub replace: usize,
    /// Where its files are ([`StabilityOptions::run_dir`]).
    pub dir: PathBuf,
    /// One per optimizer, in the order of the options.
    pub summaries: Vec<StabilitySummary>,
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

/// An experiment's data and network for the lockstep runs.
pub struct StabilitySets {
    /// S (its test split is the test set).
    pub on_s: Box<dyn TrainData>,
    /// One S⁽ⁱ⁾ per replaced example of the options, in their order.
    pub on_s_i: Vec<Box<dyn TrainData>>,
    /// S scored as a test set (clean, in order): F_S.
    pub s_as_test: Box<dyn TrainData>,
    /// |S|.
    pub examples: usize,
    /// A fresh network from a seed.
    pub new_model: ModelFactory,
    /// The rows: the experiment's preset or the one the options give.
    pub preset: Preset,
}

/// Loads S, the S⁽ⁱ⁾ and the test split of the options' experiment; checks the replaced
/// examples.
pub fn stability_sets(o: &StabilityOptions) -> Result<StabilitySets> {
    let dev = o.device.clone();
    let preset = o.experiment.preset(o.preset.as_ref())?;
    ensure!(!o.replace.is_empty(), "--replace: no example given");
    if let Some((_, i)) = o
        .replace
        .iter()
        .enumerate()
        .find(|&(k, i)| o.replace[..k].contains(i))
    {
        bail!("--replace: example {i} is given twice");
    }
    match o.experiment {
        Experiment::DigitsMlp | Experiment::DigitsCnn => {
            let (s, s_i, test) = digit_sets(&o.replace)?;
            let (shape, new_model): (_, ModelFactory) = if o.experiment == Experiment::DigitsMlp {
                let f: ModelFactory =
                    Box::new(move |seed| Ok(Box::new(Mlp::new(MlpConfig::digits(), seed, &dev)?)));
                (vec![digits::FEATURES], f)
            } else {
                let config = CnnConfig::digits();
                let f: ModelFactory = Box::new(move |seed| Ok(Box::new(Cnn::new(config, seed, &dev)?)));
                (vec![1, config.side, config.side], f)
            };
            classification_sets(o, (s, s_i, test), shape, false, new_model, preset)
        }
        Experiment::Cifar10Vgg16 => {
            let name = o.experiment.preset_name();
            let protocol = &preset.protocol;
            let augmentation = needed(name, "augmentation", &protocol.augmentation)?.value;
            let pad = augmentation.padding().unwrap_or(0);
            let sets = cifar_sets(o.data_dir.as_deref(), &o.replace, pad)?;
            let variant = match o.vgg {
                Some(v) => v,
                None => needed(name, "vgg", &protocol.vgg)?.value,
            };
            let config = VggConfig {
                width: if o.small { 1.0 / 16.0 } else { 1.0 },
                ..VggConfig::cifar10(variant)
            };
            let new_model: ModelFactory = Box::new(move |seed| Ok(Box::new(Vgg::new(config, seed, &dev)?)));
            let augment = augmentation != Augmentation::None;
            classification_sets(o, sets, cifar10::SHAPE.to_vec(), augment, new_model, preset)
        }
        Experiment::WikiText2Quick => lm_sets(o, preset),
        other => {
            let names: Vec<_> = SUPPORTED.iter().map(|e| e.name()).collect();
            bail!(
                "stability: {} is not supported (supported: {})",
                other.name(),
                names.join(", ")
            )
        }
    }
}

/// Runs the experiment for every optimizer; returns the rows per replaced example and the
/// figures.
pub fn run_stability(o: &StabilityOptions) -> Result<(Vec<ReplacedRun>, Vec<PathBuf>)> {
    lockstep(o, stability_sets(o)?)
}

/// S, the S⁽ⁱ⁾ and the test split: the digits.
fn digit_sets(replace: &[usize]) -> Result<(FeatureSet, Vec<FeatureSet>, FeatureSet)> {
    let all = digits::load(&digits::shipped_path())?;
    let (train, test) = digits::split(&all, digits::TEST_FRACTION, digits::TEST_SEED)?;
    let n = check_replace(train.n, replace)?;
    let s = train.subset(&(0..n).collect::<Vec<_>>());
    let s_i = replace
        .iter()
        .map(|&i| {
            let mut s_i = s.clone();
            s_i.x[i * s.features..(i + 1) * s.features].copy_from_slice(train.example(n));
            s_i.labels[i] = train.labels[n];
            s_i
        })
        .collect();
    Ok((s, s_i, test))
}

/// S, the S⁽ⁱ⁾ and the test split: CIFAR-10, normalised, S and the S⁽ⁱ⁾ padded by `pad` for
/// the random crop.
fn cifar_sets(
    data_dir: Option<&Path>,
    replace: &[usize],
    pad: usize,
) -> Result<(Images, Vec<Images>, Images)> {
    let mut train: ImageSet = cifar10::load(data_dir, Split::Train)?;
    let test = cifar10::load(data_dir, Split::Test)?;
    let n = check_replace(train.n, replace)?;
    let len = train.image_len();
    let fresh = train.image(n).to_vec();
    let fresh_label = train.labels[n];
    train.n = n;
    train.pixels.truncate(n * len);
    train.labels.truncate(n);
    let norm = cifar10::normalization();
    let s_i = replace
        .iter()
        .map(|&i| {
            let mut train_i = train.clone();
            train_i.pixels[i * len..(i + 1) * len].copy_from_slice(&fresh);
            train_i.labels[i] = fresh_label;
            Images::new(train_i, norm.clone(), pad)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((
        Images::new(train, norm.clone(), pad)?,
        s_i,
        Images::new(test, norm, 0)?,
    ))
}

/// The size of S (the split but its last example), if every replaced example lies in it.
fn check_replace(split_len: usize, replace: &[usize]) -> Result<usize> {
    let n = split_len.saturating_sub(1);
    if let Some(i) = replace.iter().find(|&&i| i >= n) {
        bail!("--replace {i}: S has {n} examples (0 to {})", n.saturating_sub(1));
    }
    Ok(n)
}

/// The minibatches of labelled examples.
fn classification_sets<E: Examples + Clone + 'static>(
    o: &StabilityOptions,
    (s, s_i, test): (E, Vec<E>, E),
    shape: Vec<usize>,
    augment: bool,
    new_model: ModelFactory,
    preset: Preset,
) -> Result<StabilitySets> {
    let dev = &o.device;
    let batch = preset.batch_size;
    let examples = s.len();
    let data = |train: E, test: E, augment| -> Result<Box<dyn TrainData>> {
        Ok(Box::new(ClassificationData::new(
            train,
            test,
            shape.clone(),
            batch,
            augment,
            dev,
        )?))
    };
    let on_s_i = s_i
        .into_iter()
        .map(|set| data(set, test.clone(), augment))
        .collect::<Result<Vec<_>>>()?;
    Ok(StabilitySets {
        on_s: data(s.clone(), test, augment)?,
        on_s_i,
        // The training loss F_S is the mean loss over S, evaluated as a "test set".
        s_as_test: data(s.clone(), s, false)?,
        examples,
        new_model,
        preset,
    })
}

/// The minibatches of `wikitext2-quick` (see the module for S and S⁽ⁱ⁾).
fn lm_sets(o: &StabilityOptions, preset: Preset) -> Result<StabilitySets> {
    let name = preset.experiment.clone();
    let protocol = &preset.protocol;
    let bptt = needed(&name, "sequence_length", &protocol.sequence_length)?.value;
    let vocabulary = needed(&name, "vocabulary", &protocol.vocabulary)?.value;
    let tokens = quick_lm_tokens(o.data_dir.as_deref(), vocabulary, None)?;
    let columns = preset.batch_size;
    let rows = tokens.train.len() / columns.max(1);
    // The fresh window (the stream's last `bptt` tokens) lies past the first `most` windows and
    // their last target of every column.
    let most = rows.saturating_sub(bptt + 1) / bptt.max(1);
    let windows = o.max_batches.map_or(most, |k| k.min(most));
    ensure!(
        windows > 0,
        "{name}: {} tokens in {columns} columns leave no window of {bptt} besides the fresh one",
        tokens.train.len()
    );
    let column_len = windows * bptt + 1;
    let s = leading_rows(&tokens.train, columns, column_len);
    let fresh = &tokens.train[tokens.train.len() - bptt..];
    let examples = columns * windows;
    if let Some(i) = o.replace.iter().find(|&&i| i >= examples) {
        bail!(
            "--replace {i}: S has {examples} windows ({columns} columns of {windows} windows of {bptt} tokens; 0 to {})",
            examples - 1
        );
    }
    let dev = &o.device;
    let data = |train: &[u32], test: &[u32]| -> Result<Box<dyn TrainData>> {
        Ok(Box::new(LanguageData::new(
            train,
            test,
            tokens.vocab,
            columns,
            bptt,
            dev,
        )?))
    };
    let on_s_i = o
        .replace
        .iter()
        .map(|&i| {
            let mut s_i = s.clone();
            let start = (i / windows) * column_len + (i % windows) * bptt;
            s_i[start..start + bptt].copy_from_slice(fresh);
            data(&s_i, &tokens.test)
        })
        .collect::<Result<Vec<_>>>()?;
    let config = TransformerConfig::tiny(tokens.vocab);
    let dev = dev.clone();
    Ok(StabilitySets {
        on_s: data(&s, &tokens.test)?,
        on_s_i,
        s_as_test: data(&s, &s)?,
        examples,
        new_model: Box::new(move |seed| Ok(Box::new(TransformerLm::new(config, seed, &dev)?))),
        preset,
    })
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

/// One training step of `model` on minibatch `index` of `data`; the ρ = min v̂ it reported.
fn train_step(
    model: &dyn Model,
    opt: &mut VarOptimizer,
    data: &dyn TrainData,
    seed: u64,
    epoch: u64,
    index: usize,
) -> Result<Option<f32>> {
    let mb = data.train_batch(seed, epoch, index)?;
    let logits = model.forward(&mb.input, true)?;
    // Classes last: `[batch, classes]` or the LM's `[batch, len, vocab]`.
    let classes = logits.dim(D::Minus1)?;
    let loss = candle_nn::loss::cross_entropy(&logits.reshape(((), classes))?, &mb.target.flatten_all()?)?;
    let grads = crate::models::param_grads::backward(&loss)?;
    Ok(opt.step_with_report(&grads)?.report.rho)
}

/// The runs of every optimizer, in lockstep: θ(S) and one model per S⁽ⁱ⁾.
pub fn lockstep(o: &StabilityOptions, sets: StabilitySets) -> Result<(Vec<ReplacedRun>, Vec<PathBuf>)> {
    ensure!(
        sets.on_s_i.len() == o.replace.len(),
        "{} data sets S(i) for {} replaced examples",
        sets.on_s_i.len(),
        o.replace.len()
    );
    let preset = &sets.preset;
    let batches = sets.on_s.train_batches().min(o.max_batches.unwrap_or(usize::MAX));
    let every = o.every_batches.unwrap_or(batches);
    if every == 0 || !batches.is_multiple_of(every) {
        bail!("--every-batches {every} must divide the {batches} minibatches of an epoch");
    }
    let decay = o.decay_mask.unwrap_or(preset.protocol.decay_mask.value);
    // S is scored as a test set (`s_as_test`), so both losses read the test minibatches.
    let scored = o.eval_subset.map_or(EvalSet::Test, EvalSet::TestSubset);
    let mut runs: Vec<ReplacedRun> = o
        .replace
        .iter()
        .map(|&i| ReplacedRun {
            replace: i,
            dir: o.run_dir(i),
            summaries: Vec::new(),
        })
        .collect();
    let mut min_v_hat = serde_json::Map::new();
    for name in &o.optimizers {
        let config = preset.optim_config(name, batches as u64, decay)?;
        let reference = (sets.new_model)(o.seed)?;
        let initial = (sets.new_model)(o.seed)?;
        let others = o
            .replace
            .iter()
            .map(|_| (sets.new_model)(o.seed))
            .collect::<Result<Vec<_>>>()?;
        let mut reference_opt = VarOptimizer::from_named(reference.vars(), config.clone())?;
        let mut opts = others
            .iter()
            .map(|m| VarOptimizer::from_named(m.vars(), config.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut writers = runs
            .iter()
            .map(|r| {
                let dir = r.dir.join(name);
                std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
                StabilityWriter::create(&dir.join("stability.csv"), true)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut rows: Vec<Vec<StabilityRecord>> = vec![Vec::new(); others.len()];
        let pb = bar(o.progress, o.epochs * batches as u64, format!("stability {name}"));
        let mut rho_min: Option<f32> = None;
        let mut step = 0usize;
        for epoch in 0..o.epochs {
            for b in 0..batches {
                let rho = train_step(
                    reference.as_ref(),
                    &mut reference_opt,
                    sets.on_s.as_ref(),
                    o.seed,
                    epoch,
                    b,
                )?;
                rho_min = match (rho_min, rho) {
                    (Some(a), Some(r)) => Some(a.min(r)),
                    (a, r) => a.or(r),
                };
                for ((model, opt), data) in others.iter().zip(&mut opts).zip(&sets.on_s_i) {
                    train_step(model.as_ref(), opt, data.as_ref(), o.seed, epoch, b)?;
                }
                step += 1;
                pb.inc(1);
                if !step.is_multiple_of(every) {
                    continue;
                }
                let row_number = u32::try_from(step / every).context("too many rows")?;
                let (train_a, _) = evaluate_on(reference.as_ref(), sets.s_as_test.as_ref(), scored)?;
                let (test_a, _) = evaluate_on(reference.as_ref(), sets.on_s.as_ref(), scored)?;
                let travelled = distance(reference.as_ref(), initial.as_ref())?;
                for (k, model) in others.iter().enumerate() {
                    let (train_b, _) = evaluate_on(model.as_ref(), sets.s_as_test.as_ref(), scored)?;
                    let (test_b, _) = evaluate_on(model.as_ref(), sets.on_s.as_ref(), scored)?;
                    let row = StabilityRecord {
                        epoch: row_number,
                        param_distance: distance(reference.as_ref(), model.as_ref())?,
                        train_loss_gap: (train_a - train_b).abs(),
                        test_loss_gap: (test_a - test_b).abs(),
                        generalization_gap: test_a - train_a,
                        travelled: Some(travelled),
                        train_loss: Some(train_a),
                    };
                    writers[k].append(&row)?;
                    rows[k].push(row);
                }
            }
        }
        pb.finish_and_clear();
        min_v_hat.insert(
            name.clone(),
            rho_min.map_or(serde_json::Value::Null, |r| f64::from(r).into()),
        );
        for (run, rows) in runs.iter_mut().zip(rows) {
            if !rows.is_empty() {
                run.summaries.push(StabilitySummary {
                    optimizer: name.clone(),
                    rows,
                });
            }
        }
        // After every optimizer, so that a stopped run still describes what it wrote.
        for run in &runs {
            let meta = serde_json::json!({
                "experiment": o.experiment.name(),
                "seed": o.seed,
                "replace": run.replace,
                "examples": sets.examples,
                "epochs": o.epochs,
                "steps_per_epoch": batches,
                "steps_per_row": every,
                "eval_subset": o.eval_subset,
                "min_v_hat": min_v_hat,
            });
            let text = serde_json::to_string_pretty(&meta)? + "\n";
            super::checkpoint::write_atomically(&run.dir.join("stability.json"), text.as_bytes())?;
        }
    }
    let mut figures = Vec::new();
    for run in &runs {
        figures.extend(draw_figures(&run.dir)?);
    }
    Ok((runs, figures))
}
