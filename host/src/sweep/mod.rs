//! `homeadam sweep`: per optimizer, the same number of configurations drawn from the knobs its
//! rule reads, each trained on the training split less a validation split and scored on that
//! validation split; then the best configuration trained with several seeds on the whole
//! training split and evaluated on the test split.
//!
//! Files, under the sweep directory: `sweep.json` (the settings, checked when the command runs
//! again), `trials/trial-<i>/<optimizer>/` (each trial a run folder, as `train` writes),
//! `final/<optimizer>/seed-<s>/` (a run directory of the chosen configurations), `sweep.csv`
//! (every trial), `best.json` (the preset with the chosen configurations), `summary.md` and
//! `sweep.png` (validation score against each knob).
//!
//! Running the same command again skips the finished runs (a run with its `final.bin` and every
//! epoch's row; a final run only if `final/<optimizer>/chosen.json` names the trial chosen now)
//! and starts the others afresh, so a killed sweep continues and a finished one writes the same
//! `sweep.csv` again.

pub mod figure;
pub mod output;
pub mod redraw;
pub mod space;
pub mod stats;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use homeadam_candle::{OptimConfig, VarOptimizer};
use serde::Serialize;

use crate::preset::Preset;
use crate::progress::bar;
use crate::report::{read_metrics, Task};
use crate::train::experiments::{BuildOptions, EvalSplit, Experiment, Setup};
use crate::train::run::{seed_folder, train, RunOptions, RunSettings};
use space::{apply, bounds, draw, edges, search_seed, widen, Axis, Edge, Range, SearchSpace, Trial};

/// What to sweep and how.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// The experiment (one with a validation split and a preset `search` section).
    pub experiment: Experiment,
    /// The optimizers, by preset entry name.
    pub optimizers: Vec<String>,
    /// Configurations per optimizer (the equal budget).
    pub budget: usize,
    /// Also this many configurations per knob the optimizer's rule reads, when that is more
    /// than `budget` ([`trials_for`]): the best of the first `budget` is then reported too.
    pub budget_per_knob: Option<usize>,
    /// Rounds of widening: while the chosen trial has knobs in the outer tenth of their
    /// ranges ([`space::edges`]), at most this many times, those ranges are widened
    /// ([`space::widen`]) and as many trials again drawn from the widened ranges. A sweep run
    /// again with more rounds continues its directory.
    pub widen: usize,
    /// Seeds of the chosen configuration's runs on the test split.
    pub seeds: u64,
    /// The seed of every trial's initialisation and data order, of the draws (forked per
    /// experiment, [`space::search_seed`]), and the first of the final runs' seeds.
    pub seed: u64,
    /// Epochs of every run.
    pub epochs: u64,
    /// At most this many minibatches per epoch.
    pub max_batches: Option<usize>,
    /// The share of the training split held out for validation.
    pub validation_fraction: f64,
    /// Ranges that replace the preset's.
    pub ranges: Vec<(Axis, Range)>,
    /// Runs at a time.
    pub jobs: usize,
    /// The sweep directory.
    pub out_dir: PathBuf,
    /// Draw the progress bar.
    pub progress: bool,
    /// Data, model size, device.
    pub build: BuildOptions,
}

/// One finished trial.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialResult {
    /// The optimizer.
    pub optimizer: String,
    /// Its drawn knobs.
    pub trial: Trial,
    /// Validation loss after the last epoch.
    pub loss: f64,
    /// Validation accuracy or perplexity after the last epoch.
    pub quality: f64,
}

/// One optimizer's outcome: its trials, the chosen one and the final runs' test scores.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerOutcome {
    /// The optimizer.
    pub optimizer: String,
    /// Every trial, by index.
    pub trials: Vec<TrialResult>,
    /// The index of the chosen trial.
    pub best: usize,
    /// Per final seed, (seed, test loss, test accuracy or perplexity).
    pub finals: Vec<(u64, f64, f64)>,
    /// The chosen trial's knobs in the outer tenth of their log ranges.
    pub edges: Vec<Edge>,
    /// With more trials per round than the equal budget (`budget_per_knob`), the index of the
    /// best of its first `budget` (trials added by widening alone leave it `None`).
    pub equal_best: Option<usize>,
    /// The ranges widened, in the order of the rounds.
    pub widened: Vec<Widening>,
}

/// One range widened between two rounds of an optimizer's trials.
#[derive(Clone, Debug, PartialEq)]
pub struct Widening {
    /// The round whose trials were drawn from the widened range (the first round is 0).
    pub round: usize,
    /// The knob.
    pub knob: Axis,
    /// Its range before.
    pub from: (f64, f64),
    /// Its range after.
    pub to: (f64, f64),
}

/// The most rounds of widening a sweep takes (`--widen`): each moves a range's end by half its
/// log width, so a few rounds reach decades past the preset's range.
pub const MAX_WIDEN: usize = 4;

/// One optimizer's search while it runs: its ranges (widened between rounds), its trials so far.
struct Search {
    name: String,
    /// Trials per round.
    count: usize,
    ranges: Vec<(Axis, (f64, f64))>,
    results: Vec<TrialResult>,
    widened: Vec<Widening>,
}

impl Search {
    /// Widens the ranges of the best trial's edges for round `round`; whether any moved (and so
    /// whether the round runs).
    fn widen(&mut self, task: Task, round: usize) -> bool {
        let best = &self.results[best_index(task, &self.results)];
        let Some(wide) = widen(&self.ranges, &edges(&best.trial, &self.ranges)) else {
            return false;
        };
        for (&(knob, from), &(_, to)) in self.ranges.iter().zip(&wide) {
            if from != to {
                self.widened.push(Widening {
                    round,
                    knob,
                    from,
                    to,
                });
            }
        }
        self.ranges = wide;
        true
    }
}

/// The trials of an optimizer whose rule reads `knobs` knobs: the equal `budget`, or
/// `per_knob · knobs` when that is more, so that a rule with many knobs is not under-tuned
/// against one with a single knob.
pub fn trials_for(budget: usize, per_knob: Option<usize>, knobs: usize) -> usize {
    per_knob.map_or(budget, |m| budget.max(m * knobs))
}

impl OptimizerOutcome {
    /// The chosen trial.
    pub fn chosen(&self) -> &TrialResult {
        &self.trials[self.best]
    }
}

/// A whole sweep's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepOutcome {
    /// Classification or language modelling.
    pub task: Task,
    /// Per optimizer, in the order asked.
    pub optimizers: Vec<OptimizerOutcome>,
    /// The ranges the trials were drawn from.
    pub space: SearchSpace,
    /// The files written.
    pub files: Vec<PathBuf>,
}

/// The settings a sweep directory belongs to (`sweep.json`).
#[derive(Serialize)]
struct Manifest<'a> {
    experiment: &'a str,
    optimizers: &'a [String],
    budget: usize,
    budget_per_knob: Option<usize>,
    #[serde(skip_serializing_if = "is_zero")]
    widen: usize,
    seeds: u64,
    seed: u64,
    epochs: u64,
    max_batches: Option<usize>,
    validation_fraction: f64,
    batch_size: Option<usize>,
    small: bool,
    /// How the trials are drawn, so that a directory of sweeps drawn otherwise (before the
    /// draws were forked per experiment) is not continued with other draws.
    draws: &'static str,
    space: &'a SearchSpace,
}

/// Whether a count is 0 (a setting left out of `sweep.json` when off, so that directories of
/// sweeps written before it existed continue).
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Whether `a` scores better than `b` on validation: a higher accuracy (then a lower loss)
/// or a lower perplexity; a diverged run (loss not finite) is worse than any other.
pub fn better(task: Task, a: &TrialResult, b: &TrialResult) -> bool {
    match (a.loss.is_finite(), b.loss.is_finite()) {
        (true, false) => return true,
        (false, _) => return false,
        _ => {}
    }
    match task {
        Task::Classification => a.quality > b.quality || (a.quality == b.quality && a.loss < b.loss),
        Task::LanguageModel => a.loss < b.loss,
    }
}

/// The index of the best of `trials` (the first of equals).
pub fn best_index(task: Task, trials: &[TrialResult]) -> usize {
    (1..trials.len()).fold(0, |best, i| {
        if better(task, &trials[i], &trials[best]) {
            i
        } else {
            best
        }
    })
}

/// One run of the sweep: a trial on the validation split or a final seed on the test split.
struct Job {
    optimizer: String,
    trial: Trial,
    seed: u64,
    /// `trials/trial-<i>` or `final`.
    run_dir: PathBuf,
    /// Whether the run writes into `seed-<s>` below its optimizer's folder.
    seed_folder: bool,
}

impl Job {
    fn options(&self, o: &SweepOptions) -> RunOptions {
        RunOptions {
            experiment: o.experiment.name().to_string(),
            optimizer: self.optimizer.clone(),
            seed: self.seed,
            seed_folder: self.seed_folder,
            resume: false,
            settings: RunSettings {
                max_batches: o.max_batches,
                progress: false,
                ..RunSettings::new(o.epochs, self.run_dir.clone())
            },
        }
    }
}

/// The last epoch's (loss, quality) of the run in `dir` when it finished all `epochs`.
fn finished(dir: &Path, epochs: u64) -> Result<Option<(Task, f64, f64)>> {
    if !dir.join("final.bin").exists() {
        return Ok(None);
    }
    let (task, rows) = read_metrics(&dir.join("metrics.csv"))?;
    Ok(match rows.last() {
        Some(last) if rows.len() as u64 == epochs => Some((task, last.test_loss, last.test_quality)),
        _ => None,
    })
}

/// The experiment's search space: the preset's ranges, those of `--range` in their place.
fn search_space(o: &SweepOptions, setup: &Setup) -> Result<SearchSpace> {
    let mut space = setup.preset.search.clone().unwrap_or_else(|| SearchSpace {
        source: String::new(),
        ranges: BTreeMap::new(),
    });
    for (knob, range) in &o.ranges {
        range.check(*knob)?;
        space.ranges.insert(*knob, *range);
        space.source = format!("{} (--range {knob} on the command line)", space.source);
    }
    if space.ranges.is_empty() {
        bail!(
            "preset {}.json has no search section: give every knob's range with --range",
            o.experiment.preset_name()
        );
    }
    Ok(space)
}

/// Checks the options that need no data.
fn check(o: &SweepOptions) -> Result<()> {
    if o.budget == 0 {
        bail!("--budget must be at least 1 (configurations per optimizer)");
    }
    if o.budget_per_knob == Some(0) {
        bail!("--budget-per-knob must be at least 1 (configurations per knob)");
    }
    if o.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if o.widen > MAX_WIDEN {
        bail!("--widen must be at most {MAX_WIDEN} (each round widens a range by half its log width)");
    }
    if o.jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    if o.optimizers.is_empty() {
        bail!("no optimizer given");
    }
    let mut seen = o.optimizers.clone();
    seen.sort();
    seen.dedup();
    if seen.len() != o.optimizers.len() {
        bail!("an optimizer is named twice in {}", o.optimizers.join(","));
    }
    Ok(())
}

/// The optimizer settings of trial `trial` of `name`: `preset`'s entry with the trial's knobs in
/// place, validated as any preset entry is (an error where the rule refuses the knobs).
fn trial_config(preset: &Preset, name: &str, trial: &Trial, steps_per_epoch: u64) -> Result<OptimConfig> {
    let mut preset = preset.clone();
    let entry = apply(&preset.optimizers[name], trial);
    preset.optimizers.insert(name.to_string(), entry);
    preset.optim_config(name, steps_per_epoch, preset.protocol.decay_mask.value)
}

/// Runs `jobs` on `o.jobs` threads, each with its own copy of the experiment built for `eval`
/// (a model and optimizer are not shared between threads); the first error stops the rest.
fn run_jobs(o: &SweepOptions, eval: EvalSplit, jobs: &[Job], pb: &indicatif::ProgressBar) -> Result<()> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let errors = Mutex::new(Vec::new());
    let worker = || -> Result<()> {
        let mut setup: Option<Setup> = None;
        loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(job) = jobs.get(i).filter(|_| !failed.load(Ordering::SeqCst)) else {
                return Ok(());
            };
            let setup = match &mut setup {
                Some(s) => s,
                None => setup.insert(o.experiment.build_for(&o.build, eval)?),
            };
            pb.set_message(format!(
                "{} trial {} seed {}",
                job.optimizer, job.trial.index, job.seed
            ));
            let max = o.max_batches.unwrap_or(usize::MAX);
            let steps_per_epoch = setup.data.train_batches().min(max) as u64;
            let config = trial_config(&setup.preset, &job.optimizer, &job.trial, steps_per_epoch)?;
            let model = (setup.new_model)(job.seed)?;
            let mut opt = VarOptimizer::from_named(model.vars(), config)?;
            train(model.as_ref(), setup.data.as_ref(), &mut opt, &job.options(o))
                .with_context(|| format!("{} trial {} seed {}", job.optimizer, job.trial.index, job.seed))?;
            pb.inc(1);
        }
    };
    std::thread::scope(|scope| {
        for _ in 0..o.jobs.min(jobs.len()) {
            scope.spawn(|| {
                if let Err(e) = worker() {
                    failed.store(true, Ordering::SeqCst);
                    errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                }
            });
        }
    });
    match errors
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .next()
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs the sweep (skipping what a previous run of the same command finished) and writes its
/// files.
pub fn run_sweep(o: &SweepOptions) -> Result<SweepOutcome> {
    check(o)?;
    let setup = o
        .experiment
        .build_for(&o.build, EvalSplit::Validation(o.validation_fraction))?;
    let space = search_space(o, &setup)?;
    let task = setup.data.task();
    let steps_per_epoch = setup
        .data
        .train_batches()
        .min(o.max_batches.unwrap_or(usize::MAX)) as u64;
    let draws = search_seed(o.seed, o.experiment.name());
    let preset = setup.preset.clone();
    // A draw the rule's config refuses (η·λ ≥ 1 once a range is widened, say) is drawn again.
    let check = |name: &str, trial: &Trial| trial_config(&preset, name, trial, steps_per_epoch).map(|_| ());
    let mut searches = Vec::new();
    for name in &o.optimizers {
        let config = setup.preset.config(name, steps_per_epoch)?;
        let ranges = bounds(&space, name, &config)?;
        let count = trials_for(o.budget, o.budget_per_knob, ranges.len());
        searches.push(Search {
            name: name.clone(),
            count,
            ranges,
            results: Vec::new(),
            widened: Vec::new(),
        });
    }
    drop(setup);
    claim(o, &space)?;

    let trial_dir = |i: usize| o.out_dir.join("trials").join(format!("trial-{i}"));
    let first_round: usize = searches.iter().map(|s| s.count).sum();
    let total = first_round as u64 + o.optimizers.len() as u64 * o.seeds;
    let pb = bar(o.progress, total, "sweep".to_string());
    let mut round_of: Vec<usize> = (0..searches.len()).collect();
    for round in 0..=o.widen {
        let mut trials = Vec::new();
        for &i in &round_of {
            let s = &searches[i];
            for index in round * s.count..(round + 1) * s.count {
                let trial = draw(&s.ranges, &s.name, draws, index, |t| check(&s.name, t))?;
                trials.push((i, trial));
            }
        }
        if round > 0 {
            pb.inc_length(trials.len() as u64);
        }
        let mut todo = Vec::new();
        for (i, trial) in &trials {
            let job = Job {
                optimizer: searches[*i].name.clone(),
                trial: trial.clone(),
                seed: o.seed,
                run_dir: trial_dir(trial.index),
                seed_folder: false,
            };
            if finished(&job.options(o).dir(), o.epochs)?.is_some() {
                pb.inc(1);
            } else {
                todo.push(job);
            }
        }
        run_jobs(o, EvalSplit::Validation(o.validation_fraction), &todo, &pb)?;
        for (i, trial) in trials {
            let s = &mut searches[i];
            let dir = trial_dir(trial.index).join(&s.name);
            let (_, loss, quality) = finished(&dir, o.epochs)?
                .with_context(|| format!("{}: the trial did not finish", dir.display()))?;
            s.results.push(TrialResult {
                optimizer: s.name.clone(),
                trial,
                loss,
                quality,
            });
        }
        round_of.retain(|&i| round < o.widen && searches[i].widen(task, round + 1));
    }

    let mut outcomes: Vec<OptimizerOutcome> = searches
        .into_iter()
        .map(|s| {
            let best = best_index(task, &s.results);
            let equal_best = (s.count > o.budget).then(|| best_index(task, &s.results[..o.budget]));
            OptimizerOutcome {
                optimizer: s.name,
                equal_best,
                edges: edges(&s.results[best].trial, &s.ranges),
                trials: s.results,
                best,
                finals: Vec::new(),
                widened: s.widened,
            }
        })
        .collect();

    let final_dir = o.out_dir.join("final");
    let mut todo = Vec::new();
    for outcome in &outcomes {
        claim_final(&final_dir.join(&outcome.optimizer), &outcome.chosen().trial)?;
        for seed in (0..o.seeds).map(|k| o.seed.wrapping_add(k)) {
            let job = Job {
                optimizer: outcome.optimizer.clone(),
                trial: outcome.chosen().trial.clone(),
                seed,
                run_dir: final_dir.clone(),
                seed_folder: true,
            };
            if finished(&job.options(o).dir(), o.epochs)?.is_some() {
                pb.inc(1);
            } else {
                todo.push(job);
            }
        }
    }
    run_jobs(o, EvalSplit::Test, &todo, &pb)?;
    pb.finish_and_clear();
    for outcome in &mut outcomes {
        for seed in (0..o.seeds).map(|k| o.seed.wrapping_add(k)) {
            let dir = final_dir.join(&outcome.optimizer).join(seed_folder(seed));
            let (_, loss, quality) = finished(&dir, o.epochs)?
                .with_context(|| format!("{}: the run did not finish", dir.display()))?;
            outcome.finals.push((seed, loss, quality));
        }
    }
    let mut outcome = SweepOutcome {
        task,
        optimizers: outcomes,
        space,
        files: Vec::new(),
    };
    outcome.files = output::write_all(o, &outcome)?;
    Ok(outcome)
}

/// Keeps an optimizer's final runs in `dir` only if they ran the trial chosen now: `chosen.json`
/// names the trial they ran, and final runs of another trial (more rounds of widening can
/// choose another) or of an unnamed one are removed, to be run again.
fn claim_final(dir: &Path, chosen: &Trial) -> Result<()> {
    let path = dir.join("chosen.json");
    let text = serde_json::to_string_pretty(chosen)? + "\n";
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    crate::train::checkpoint::write_atomically(&path, text.as_bytes())
}

/// Writes `sweep.json`, after checking that the directory's, if any, is this command's but for
/// the rounds of widening.
fn claim(o: &SweepOptions, space: &SearchSpace) -> Result<()> {
    let manifest = Manifest {
        experiment: o.experiment.name(),
        optimizers: &o.optimizers,
        budget: o.budget,
        budget_per_knob: o.budget_per_knob,
        widen: o.widen,
        seeds: o.seeds,
        seed: o.seed,
        epochs: o.epochs,
        max_batches: o.max_batches,
        validation_fraction: o.validation_fraction,
        batch_size: o.build.batch_size,
        small: o.build.small,
        draws: "seed forked per experiment, then per optimizer and trial",
        space,
    };
    let text = serde_json::to_string_pretty(&manifest)? + "\n";
    let path = o.out_dir.join("sweep.json");
    if path.exists() {
        let old = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        // More (or fewer) rounds of widening continue a sweep: its earlier rounds are the same.
        let settings = |text: &str| -> Result<serde_json::Value> {
            let mut v: serde_json::Value = serde_json::from_str(text)?;
            if let Some(map) = v.as_object_mut() {
                map.remove("widen");
            }
            Ok(v)
        };
        if settings(&old).with_context(|| format!("reading {}", path.display()))? != settings(&text)? {
            bail!(
                "{} holds a sweep of other settings (see its sweep.json): run the same command to \
                 continue it, or give another --out",
                o.out_dir.display()
            );
        }
    }
    std::fs::create_dir_all(&o.out_dir).with_context(|| format!("cannot create {}", o.out_dir.display()))?;
    crate::train::checkpoint::write_atomically(&path, text.as_bytes())
}
