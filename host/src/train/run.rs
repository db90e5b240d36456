//! One optimizer's training run: epochs of minibatches, the test set after each epoch, one row
//! of `metrics.csv` per epoch, checkpoints every N steps, and `--resume` from the last one.
//!
//! Files, under `RUN_DIR/<optimizer>/`: `metrics.csv` and, with `log_every`, `iterations.csv`
//! (see [`crate::report`]),
//! `checkpoint.bin` (the latest checkpoint, replaced atomically) and `final.bin` (the model and
//! optimizer after the last epoch, in the same format).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Tensor, D};
use homeadam_core::StepReport;

use super::checkpoint::{EpochProgress, RunCheckpoint, RunMeta};
use super::data::{Minibatch, TrainData};
use crate::models::Model;
use crate::progress::bar;
use crate::report::{EpochRecord, IterationRecord, IterationWriter, MetricsWriter, Task};
use crate::rng::Rng;
use homeadam_candle::VarOptimizer;

/// How a run goes and where it writes; the same for every optimizer of an experiment.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Epochs to train.
    pub epochs: u64,
    /// At most this many minibatches per epoch (`None`: all), for short runs.
    pub max_batches: Option<usize>,
    /// The run directory (one folder per optimizer).
    pub out_dir: PathBuf,
    /// Write `checkpoint.bin` every this many steps (and after every epoch).
    pub checkpoint_every: Option<u64>,
    /// Continue from `checkpoint.bin` (an error if there is none or it is another run's).
    pub resume: bool,
    /// Append a row to `iterations.csv` every this many steps.
    pub log_every: Option<u64>,
    /// Draw progress bars.
    pub progress: bool,
}

/// One optimizer's run: what it is (recorded in, and checked against, checkpoints) and how.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The experiment's name.
    pub experiment: String,
    /// The optimizer's name: the run's folder under the run directory.
    pub optimizer: String,
    /// The seed of the model's initialisation and of the data order.
    pub seed: u64,
    /// How it goes.
    pub settings: RunSettings,
}

impl RunOptions {
    /// `RUN_DIR/<optimizer>`.
    pub fn dir(&self) -> PathBuf {
        self.settings.out_dir.join(&self.optimizer)
    }
}

/// Mean loss and the number of correct predictions of `logits` against `target`.
fn loss_and_correct(logits: &Tensor, target: &Tensor) -> Result<(Tensor, u64)> {
    let classes = logits.dim(D::Minus1)?;
    let logits = logits.reshape(((), classes))?;
    let target = target.flatten_all()?;
    let loss = candle_nn::loss::cross_entropy(&logits, &target)?;
    let correct = logits
        .argmax(D::Minus1)?
        .eq(&target)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()? as u64;
    Ok((loss, correct))
}

/// Mean loss and accuracy (or perplexity) of `model` over the test set.
pub fn evaluate(model: &dyn Model, data: &dyn TrainData) -> Result<(f64, f64)> {
    let (mut loss_sum, mut correct, mut seen) = (0.0, 0u64, 0u64);
    for i in 0..data.test_batches() {
        let Minibatch {
            input,
            target,
            predictions,
        } = data.test_batch(i)?;
        let logits = model.forward(&input, false)?.detach();
        let (loss, c) = loss_and_correct(&logits, &target)?;
        loss_sum += f64::from(loss.to_scalar::<f32>()?) * predictions as f64;
        correct += c;
        seen += predictions as u64;
    }
    let loss = loss_sum / seen.max(1) as f64;
    Ok((loss, quality(data.task(), loss, correct, seen)))
}

fn quality(task: Task, mean_loss: f64, correct: u64, seen: u64) -> f64 {
    match task {
        Task::Classification => correct as f64 / seen.max(1) as f64,
        Task::LanguageModel => mean_loss.exp(),
    }
}

/// Where a run starts: fresh, or from its checkpoint.
fn start(model: &dyn Model, opt: &mut VarOptimizer, o: &RunOptions) -> Result<RunMeta> {
    let path = o.dir().join("checkpoint.bin");
    if !o.settings.resume {
        return Ok(RunMeta {
            experiment: o.experiment.clone(),
            optimizer: o.optimizer.clone(),
            seed: o.seed,
            epoch: 0,
            batch: 0,
            step: 0,
            rng: model.rng().map_or(0, |r| r.state),
            progress: EpochProgress::default(),
            window: EpochProgress::default(),
        });
    }
    if !path.exists() {
        bail!(
            "--resume: no checkpoint at {} (start without --resume to train from scratch)",
            path.display()
        );
    }
    let ck = RunCheckpoint::load(&path)?;
    ck.check_matches(&o.experiment, &o.optimizer, o.seed)
        .with_context(|| format!("--resume from {}", path.display()))?;
    model
        .load_state(&ck.model)
        .with_context(|| format!("--resume from {}", path.display()))?;
    opt.load_state(&ck.optimizer)
        .with_context(|| format!("--resume from {}", path.display()))?;
    model.set_rng(Rng { state: ck.meta.rng });
    Ok(ck.meta)
}

/// Adds one minibatch and its step to the sums of `p`.
fn accumulate(
    p: &mut EpochProgress,
    loss: f64,
    correct: u64,
    predictions: usize,
    report: &StepReport,
    params: f64,
) {
    p.loss_sum += loss * predictions as f64;
    p.correct += correct;
    p.seen += predictions as u64;
    if !report.skipped {
        p.steps += 1;
        p.home_share_sum += report.home_elements as f64 / params;
        if let Some(rho) = report.rho {
            let rho = f64::from(rho);
            p.rho_min = Some(p.rho_min.map_or(rho, |r| r.min(rho)));
        }
    }
}

fn save(model: &dyn Model, opt: &VarOptimizer, meta: &RunMeta, path: &Path) -> Result<()> {
    RunCheckpoint {
        meta: meta.clone(),
        model: model.save_state()?,
        optimizer: opt.save_state()?,
    }
    .save(path)
}

/// Trains `model` with `opt` on `data` as `o` says; returns the rows of `metrics.csv` written
/// by this call.
pub fn train(
    model: &dyn Model,
    data: &dyn TrainData,
    opt: &mut VarOptimizer,
    o: &RunOptions,
) -> Result<Vec<EpochRecord>> {
    let dir = o.dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut meta = start(model, opt, o)?;
    let s = &o.settings;
    let metrics = dir.join("metrics.csv");
    let mut writer = if s.resume {
        MetricsWriter::resume(&metrics, data.task(), meta.epoch)?
    } else {
        MetricsWriter::create(&metrics, data.task())?
    };
    let mut iterations = match s.log_every {
        Some(_) if s.resume => Some(IterationWriter::resume(
            &dir.join("iterations.csv"),
            (),
            meta.step,
        )?),
        Some(_) => Some(IterationWriter::create(&dir.join("iterations.csv"), ())?),
        None => None,
    };
    let checkpoint = dir.join("checkpoint.bin");
    let params = model.param_count().max(1) as f64;
    let homeadam = opt.config().core.rule.switch().is_some();
    let batches = data.train_batches().min(s.max_batches.unwrap_or(usize::MAX));
    let mut rows = Vec::new();
    while meta.epoch < s.epochs {
        let pb = bar(
            s.progress,
            batches as u64,
            format!("{} epoch {}/{}", o.optimizer, meta.epoch + 1, s.epochs),
        );
        pb.set_position(meta.batch);
        let clock = Instant::now();
        let seconds_before = meta.progress.seconds;
        while (meta.batch as usize) < batches {
            let mb = data.train_batch(meta.epoch, meta.batch as usize)?;
            let logits = model.forward(&mb.input, true)?;
            let (loss, correct) = loss_and_correct(&logits, &mb.target)?;
            let loss_value = f64::from(loss.to_scalar::<f32>()?);
            let grads = loss.backward()?;
            let report = opt.step_with_report(&grads)?.report;
            accumulate(
                &mut meta.progress,
                loss_value,
                correct,
                mb.predictions,
                &report,
                params,
            );
            accumulate(
                &mut meta.window,
                loss_value,
                correct,
                mb.predictions,
                &report,
                params,
            );
            let p = &mut meta.progress;
            meta.batch += 1;
            meta.step += 1;
            meta.rng = model.rng().map_or(0, |r| r.state);
            p.seconds = seconds_before + clock.elapsed().as_secs_f64();
            pb.inc(1);
            pb.set_message(format!(
                "loss {:.4} {:.0} ex/s",
                p.loss_sum / p.seen as f64,
                p.seen as f64 / clock.elapsed().as_secs_f64().max(1e-9)
            ));
            if let (Some(writer), Some(n)) = (iterations.as_mut(), s.log_every) {
                if n > 0 && meta.step % n == 0 {
                    let w = std::mem::take(&mut meta.window);
                    writer.append(&IterationRecord {
                        step: meta.step,
                        train_loss: w.loss_sum / w.seen.max(1) as f64,
                        home_share: homeadam.then(|| w.home_share_sum / w.steps.max(1) as f64),
                        rho: w.rho_min,
                    })?;
                }
            }
            if s.checkpoint_every.is_some_and(|n| n > 0 && meta.step % n == 0) {
                save(model, opt, &meta, &checkpoint)?;
            }
        }
        pb.finish_and_clear();
        let (test_loss, test_quality) = evaluate(model, data)?;
        let p = meta.progress;
        let train_loss = p.loss_sum / p.seen.max(1) as f64;
        let row = EpochRecord {
            epoch: u32::try_from(meta.epoch + 1).context("too many epochs")?,
            train_loss,
            train_quality: quality(data.task(), train_loss, p.correct, p.seen),
            test_loss,
            test_quality,
            seconds: seconds_before + clock.elapsed().as_secs_f64(),
            home_share: homeadam.then(|| p.home_share_sum / p.steps.max(1) as f64),
            rho: p.rho_min,
        };
        writer.append(&row)?;
        rows.push(row);
        meta.epoch += 1;
        meta.batch = 0;
        meta.progress = EpochProgress::default();
        save(model, opt, &meta, &checkpoint)?;
    }
    save(model, opt, &meta, &dir.join("final.bin"))?;
    Ok(rows)
}
