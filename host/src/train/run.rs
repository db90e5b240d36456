//! One optimizer's training run: epochs of minibatches, the test set after each epoch, one row
//! of `metrics.csv` per epoch, checkpoints every N steps, and `--resume` from the last one.
//!
//! Evaluations (eval mode: no dropout, no augmentation, BatchNorm's running statistics; they
//! change neither the model nor its generator, so they do not change the training run):
//! after every epoch the whole test split; with `eval_every` every N steps the test subset (the
//! leading test minibatches holding at least `eval_subset` predictions, in their fixed order);
//! with `eval_train` after every epoch the training split in file order, not augmented (its
//! first `max_batches` minibatches when given); with `grad_norm_every` the full-batch training
//! gradient's squared norm before the first step and every N steps.
//!
//! Files, under the run's folder (`RUN_DIR/<optimizer>/`, or `RUN_DIR/<optimizer>/seed-<s>/` in a
//! run of several seeds): `metrics.csv` and, with `log_every` or `eval_every`, `iterations.csv`
//! (see [`crate::report`]), with `grad_norm_every` `grad_norms.csv` ([`super::grad_norm`]),
//! `checkpoint.bin` (the latest checkpoint, replaced atomically) and `final.bin` (the model and
//! optimizer after the last epoch, in the same format).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use homeadam_core::{StepReport, Switch};

use super::checkpoint::{EpochProgress, RunCheckpoint, RunMeta};
use super::data::{Minibatch, TrainData};
use super::grad_norm::{full_gradient_norm_sq, GradNormWriter};
use super::prefetch::Pipeline;
use super::scores::{loss_and_correct, PendingScores};
use crate::models::Model;
use crate::progress::bar;
use crate::report::{
    EpochRecord, IterationColumns, IterationRecord, IterationWriter, MetricsColumns, MetricsWriter, Task,
};
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
    /// Evaluate the test subset every this many steps (a row of `iterations.csv` with its test
    /// loss and accuracy or perplexity).
    pub eval_every: Option<u64>,
    /// Predictions (examples or tokens) of the test subset (`None`: the preset's).
    pub eval_subset: Option<usize>,
    /// Evaluate the training split after every epoch (`metrics.csv`'s `clean_train_*` columns).
    pub eval_train: bool,
    /// Write ‖∇f(θ_t)‖², the full-batch training gradient's squared norm, before the first step
    /// and every this many steps (`grad_norms.csv`, [`super::grad_norm`]).
    pub grad_norm_every: Option<u64>,
    /// Draw progress bars.
    pub progress: bool,
}

impl RunSettings {
    /// `epochs` of every minibatch into `out_dir`, with progress bars and nothing else: no
    /// checkpoint but the epochs', no resume, no iteration log, no evaluation but the epochs'.
    pub fn new(epochs: u64, out_dir: PathBuf) -> Self {
        RunSettings {
            epochs,
            max_batches: None,
            out_dir,
            checkpoint_every: None,
            resume: false,
            log_every: None,
            eval_every: None,
            eval_subset: None,
            eval_train: false,
            grad_norm_every: None,
            progress: true,
        }
    }
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
    /// Whether the run is one of several seeds: its folder is then `seed-<seed>` inside the
    /// optimizer's.
    pub seed_folder: bool,
    /// Continue from the run's checkpoint (the runner decides per run; see
    /// [`super::runner::run_experiment`]).
    pub resume: bool,
    /// How it goes.
    pub settings: RunSettings,
}

impl RunOptions {
    /// `RUN_DIR/<optimizer>`, or `RUN_DIR/<optimizer>/seed-<seed>`.
    pub fn dir(&self) -> PathBuf {
        let dir = self.settings.out_dir.join(&self.optimizer);
        if self.seed_folder {
            dir.join(seed_folder(self.seed))
        } else {
            dir
        }
    }
}

/// The folder of seed `seed`'s run inside its optimizer's folder.
pub fn seed_folder(seed: u64) -> String {
    format!("seed-{seed}")
}

/// What an evaluation reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalSet {
    /// The whole test split.
    Test,
    /// The leading test minibatches holding at least this many predictions.
    TestSubset(usize),
    /// The first this many minibatches of the training split, in file order, not augmented.
    Train(usize),
}

/// Mean loss and accuracy (or perplexity) of `model` over the test set; the scores stay on the
/// device until the end (or until [`PendingScores`] is full).
pub fn evaluate(model: &dyn Model, data: &dyn TrainData) -> Result<(f64, f64)> {
    evaluate_on(model, data, EvalSet::Test)
}

/// Mean loss and accuracy (or perplexity) of `model` (in eval mode) over `set`; one read of the
/// device per [`PendingScores`] capacity.
pub fn evaluate_on(model: &dyn Model, data: &dyn TrainData, set: EvalSet) -> Result<(f64, f64)> {
    let mut sums = EpochProgress::default();
    let mut pending = PendingScores::default();
    let (count, limit) = match set {
        EvalSet::Test => (data.test_batches(), usize::MAX),
        EvalSet::TestSubset(n) => (data.test_batches(), n),
        EvalSet::Train(batches) => (batches.min(data.train_batches()), usize::MAX),
    };
    // Counted on the host (each minibatch says how many predictions it scores), so the subset
    // is fixed without reading the device.
    let mut taken = 0usize;
    for i in 0..count {
        if taken >= limit {
            break;
        }
        let Minibatch {
            input,
            target,
            predictions,
        } = match set {
            EvalSet::Train(_) => data.clean_train_batch(i)?,
            _ => data.test_batch(i)?,
        };
        taken += predictions;
        let logits = model.forward(&input, false)?.detach();
        let (loss, correct) = loss_and_correct(&logits, &target, data.task())?;
        pending.push(&loss, correct.as_ref(), predictions)?;
        if pending.is_full() {
            pending.drain()?.iter().for_each(|b| b.add_to(&mut sums));
        }
    }
    pending.drain()?.iter().for_each(|b| b.add_to(&mut sums));
    let loss = sums.mean_loss();
    Ok((loss, quality(data.task(), loss, sums.correct, sums.seen)))
}

fn quality(task: Task, mean_loss: f64, correct: u64, seen: u64) -> f64 {
    match task {
        Task::Classification => correct as f64 / seen.max(1) as f64,
        Task::LanguageModel => mean_loss.exp(),
    }
}

/// Where a run starts: fresh, or from its checkpoint (which may have been written on another
/// device: the checkpoint holds host values, so it loads anywhere, but the continuation then
/// computes in another order and does not reproduce the uninterrupted run's bits).
fn start(model: &dyn Model, opt: &mut VarOptimizer, o: &RunOptions, device: &str) -> Result<RunMeta> {
    let path = o.dir().join("checkpoint.bin");
    if !o.resume {
        return Ok(RunMeta {
            experiment: o.experiment.clone(),
            optimizer: o.optimizer.clone(),
            seed: o.seed,
            device: device.to_string(),
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
    if ck.meta.device != device {
        eprintln!(
            "note: {} was written on {}, resuming on {device}: the rest of the run will not be \
             bit-identical to an uninterrupted run on either",
            path.display(),
            ck.meta.device
        );
    }
    Ok(RunMeta {
        device: device.to_string(),
        ..ck.meta
    })
}

/// Adds one optimizer step's report to the sums of `p` (the minibatch's scores come later, from
/// [`PendingScores`]): the step count, the home share, the smallest ρ and ρ_active, the last τ.
/// A skipped step changes nothing.
fn count_step(p: &mut EpochProgress, report: &StepReport, params: f64) {
    if report.skipped {
        return;
    }
    let smallest = |min: Option<f64>, value: Option<f32>| match value.map(f64::from) {
        Some(v) => Some(min.map_or(v, |m| m.min(v))),
        None => min,
    };
    p.steps += 1;
    p.home_share_sum += report.home_elements as f64 / params;
    p.rho_min = smallest(p.rho_min, report.rho);
    p.rho_active_min = smallest(p.rho_active_min, report.rho_active);
    p.tau = report.tau.map(f64::from).or(p.tau);
}

/// Reads the held minibatch scores into the epoch's and the window's sums.
fn settle(pending: &mut PendingScores, meta: &mut RunMeta) -> Result<()> {
    for b in pending.drain()? {
        b.add_to(&mut meta.progress);
        b.add_to(&mut meta.window);
    }
    Ok(())
}

fn save(model: &dyn Model, opt: &VarOptimizer, meta: &RunMeta, path: &Path) -> Result<()> {
    RunCheckpoint {
        meta: meta.clone(),
        model: model.save_state()?,
        optimizer: opt.save_state()?,
    }
    .save(path)
}

/// How often the progress bar's loss is read back from the device while the bar is drawn.
const BAR_REFRESH: Duration = Duration::from_secs(1);

/// Trains `model` with `opt` on `data` as `o` says; returns the rows of `metrics.csv` written
/// by this call.
///
/// A step reads back only the optimizer's status: the minibatch losses and correct counts stay
/// on the device until an `iterations.csv` row, a checkpoint, the end of the epoch or the
/// progress bar (every `BAR_REFRESH`) needs them.
pub fn train(
    model: &dyn Model,
    data: &dyn TrainData,
    opt: &mut VarOptimizer,
    o: &RunOptions,
) -> Result<Vec<EpochRecord>> {
    let dir = o.dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let device = crate::device::name(&model.device());
    let mut meta = start(model, opt, o, &device)?;
    let s = &o.settings;
    let metrics = dir.join("metrics.csv");
    let columns = MetricsColumns::new(data.task(), s.eval_train);
    let mut writer = if o.resume {
        MetricsWriter::resume(&metrics, columns, meta.epoch)?
    } else {
        MetricsWriter::create(&metrics, columns)?
    };
    // The test columns exist only with `eval_every`, so that runs without it keep their format.
    let test_columns = IterationColumns::new(s.eval_every.map(|_| data.task()));
    let iterations_path = dir.join("iterations.csv");
    let mut iterations = match (s.log_every.or(s.eval_every), o.resume) {
        (Some(_), true) => Some(IterationWriter::resume(
            &iterations_path,
            test_columns,
            meta.step,
        )?),
        (Some(_), false) => Some(IterationWriter::create(&iterations_path, test_columns)?),
        (None, _) => None,
    };
    let mut grad_norms = match s.grad_norm_every {
        Some(0) => bail!("--grad-norm-every must be at least 1"),
        Some(_) if o.resume => bail!("--grad-norm-every starts grad_norms.csv afresh: it does not resume"),
        Some(_) => Some(GradNormWriter::create(&dir.join("grad_norms.csv"))?),
        None => None,
    };
    let batches = data.train_batches().min(s.max_batches.unwrap_or(usize::MAX));
    if let Some(w) = grad_norms.as_mut() {
        w.append(meta.step, full_gradient_norm_sq(model, data, batches)?)?;
    }
    let subset = EvalSet::TestSubset(s.eval_subset.unwrap_or(usize::MAX));
    let checkpoint = dir.join("checkpoint.bin");
    let params = model.param_count().max(1) as f64;
    let homeadam = opt.config().core.rule.switch().is_some();
    let mut pending = PendingScores::default();
    let mut rows = Vec::new();
    let first_step = meta.step;
    let pipeline = Pipeline::new(data, o.seed);
    while meta.epoch < s.epochs {
        let pb = bar(
            s.progress,
            batches as u64,
            format!("{} epoch {}/{}", o.optimizer, meta.epoch + 1, s.epochs),
        );
        pb.set_position(meta.batch);
        pb.set_message(format!("on {device}"));
        let clock = Instant::now();
        let mut last_read = clock;
        let seconds_before = meta.progress.seconds;
        std::thread::scope(|scope| -> Result<()> {
            let mut prefetch = pipeline.epoch(scope, meta.epoch, batches);
            while (meta.batch as usize) < batches {
                let mb = prefetch.batch(meta.batch as usize)?;
                let logits = model.forward(&mb.input, true)?;
                let (loss, correct) = loss_and_correct(&logits, &mb.target, data.task())?;
                let grads = crate::models::param_grads::backward(&loss)?;
                let report = opt.step_with_report(&grads)?.report;
                pending.push(&loss, correct.as_ref(), mb.predictions)?;
                count_step(&mut meta.progress, &report, params);
                count_step(&mut meta.window, &report, params);
                meta.batch += 1;
                meta.step += 1;
                meta.rng = model.rng().map_or(0, |r| r.state);
                meta.progress.seconds = seconds_before + clock.elapsed().as_secs_f64();
                pb.inc(1);
                let due = |every: Option<u64>| every.is_some_and(|n| n > 0 && meta.step % n == 0);
                let eval_now = due(s.eval_every);
                let log_now = due(s.log_every) || eval_now;
                let checkpoint_now = due(s.checkpoint_every);
                let grad_norm_now = due(s.grad_norm_every);
                let bar_now = !pb.is_hidden() && last_read.elapsed() >= BAR_REFRESH;
                if log_now || checkpoint_now || bar_now || pending.is_full() {
                    settle(&mut pending, &mut meta)?;
                    last_read = Instant::now();
                    let p = &meta.progress;
                    pb.set_message(format!(
                        "on {device} loss {:.4} {:.0} ex/s",
                        p.mean_loss(),
                        p.seen as f64 / clock.elapsed().as_secs_f64().max(1e-9)
                    ));
                }
                if let Some(writer) = iterations.as_mut().filter(|_| log_now) {
                    let test = if eval_now {
                        Some(evaluate_on(model, data, subset)?)
                    } else {
                        None
                    };
                    let w = std::mem::take(&mut meta.window);
                    writer.append(&IterationRecord {
                        step: meta.step,
                        train_loss: w.mean_loss(),
                        home_share: homeadam.then(|| w.mean_home_share()),
                        rho: w.rho_min,
                        rho_active: w.rho_active_min,
                        tau: w.tau,
                        test_loss: test.map(|t| t.0),
                        test_quality: test.map(|t| t.1),
                    })?;
                }
                if let Some(w) = grad_norms.as_mut().filter(|_| grad_norm_now) {
                    w.append(meta.step, full_gradient_norm_sq(model, data, batches)?)?;
                }
                if checkpoint_now {
                    save(model, opt, &meta, &checkpoint)?;
                }
            }
            Ok(())
        })?;
        settle(&mut pending, &mut meta)?;
        pb.finish_and_clear();
        let (test_loss, test_quality) = evaluate(model, data)?;
        let clean = if s.eval_train {
            Some(evaluate_on(model, data, EvalSet::Train(batches))?)
        } else {
            None
        };
        let p = meta.progress;
        let train_loss = p.mean_loss();
        let row = EpochRecord {
            epoch: u32::try_from(meta.epoch + 1).context("too many epochs")?,
            train_loss,
            train_quality: quality(data.task(), train_loss, p.correct, p.seen),
            test_loss,
            test_quality,
            seconds: seconds_before + clock.elapsed().as_secs_f64(),
            home_share: homeadam.then(|| p.mean_home_share()),
            rho: p.rho_min,
            rho_active: p.rho_active_min,
            tau: p.tau,
            clean_train_loss: clean.map(|c| c.0),
            clean_train_quality: clean.map(|c| c.1),
        };
        writer.append(&row)?;
        rows.push(row);
        meta.epoch += 1;
        meta.batch = 0;
        meta.progress = EpochProgress::default();
        save(model, opt, &meta, &checkpoint)?;
    }
    save(model, opt, &meta, &dir.join("final.bin"))?;
    if s.progress && opt.config().core.rule.switch() == Some(Switch::Global) {
        // How often the bounds on ρ_t left the decision to the exact pass over g and v.
        println!(
            "{}: the exact first pass decided {} of the {} steps of this run",
            o.optimizer,
            opt.exact_first_passes(),
            meta.step - first_step
        );
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_keeps_the_smallest_rho_and_rho_active_and_the_last_tau_of_applied_steps() {
        let step = |t, rho, rho_active, tau, home_elements| StepReport {
            rho,
            rho_active,
            tau,
            home_elements,
            ..StepReport::applied(t)
        };
        let mut p = EpochProgress::default();
        count_step(&mut p, &step(1, Some(0.0), Some(3e-8), Some(2e-9), 4), 4.0);
        count_step(&mut p, &step(2, Some(0.0), Some(1e-8), Some(4e-9), 0), 4.0);
        count_step(&mut p, &StepReport::skipped(2), 4.0);
        count_step(&mut p, &step(3, Some(0.0), Some(2e-8), Some(8e-9), 2), 4.0);
        assert_eq!(p.steps, 3);
        assert_eq!(p.home_share_sum, 1.5);
        assert_eq!(p.rho_min, Some(0.0));
        assert_eq!(p.rho_active_min, Some(f64::from(1e-8f32)));
        assert_eq!(p.tau, Some(f64::from(8e-9f32)));

        // Rules without ρ_active or τ leave them empty.
        let mut p = EpochProgress::default();
        count_step(&mut p, &step(1, Some(1e-6), None, None, 0), 4.0);
        assert_eq!(
            (p.rho_min, p.rho_active_min, p.tau),
            (Some(f64::from(1e-6f32)), None, None)
        );
    }
}
