//! An experiment with several optimizers: one run each from the same initial model, then the
//! figures and the summary table of the run directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::experiments::{BuildOptions, Experiment, Setup};
use super::run::{train, RunOptions};
use crate::optim::{OptimConfig, VarOptimizer};
use crate::report::{draw_figures, load_run, SummaryTable};

/// Every optimizer of the paper, plus the element-wise HomeAdam(W), by the core's names.
pub const ALL_OPTIMIZERS: [&str; 13] = [
    "sgd",
    "sgdm",
    "adam",
    "adamw",
    "adabelief",
    "swats",
    "miadam",
    "adam-srf",
    "adamw-srf",
    "homeadam",
    "homeadamw",
    "homeadam-ew",
    "homeadamw-ew",
];

/// One experiment, several optimizers.
#[derive(Clone, Debug)]
pub struct ExperimentRun {
    /// What to train.
    pub experiment: Experiment,
    /// Which optimizers, by name (each a run from the same initial model).
    pub optimizers: Vec<String>,
    /// Epochs per run.
    pub epochs: u64,
    /// At most this many minibatches per epoch.
    pub max_batches: Option<usize>,
    /// The run directory (one folder per optimizer, `figures/`).
    pub out_dir: PathBuf,
    /// Checkpoint every N steps.
    pub checkpoint_every: Option<u64>,
    /// Continue each optimizer's run from its checkpoint.
    pub resume: bool,
    /// Append to `iterations.csv` every N steps.
    pub log_every: Option<u64>,
    /// Draw progress bars.
    pub progress: bool,
    /// Data, model size, seed, device.
    pub build: BuildOptions,
}

/// The figures and table of a finished run directory.
pub struct Outcome {
    /// The figures written.
    pub figures: Vec<PathBuf>,
    /// The summary of every optimizer's last epoch.
    pub table: SummaryTable,
}

/// Trains every optimizer of `r` in turn, then draws the run directory's figures.
pub fn run_experiment(r: &ExperimentRun) -> Result<Outcome> {
    let Setup {
        data,
        new_model,
        preset,
    } = r.experiment.build(&r.build)?;
    for name in &r.optimizers {
        let model = new_model(r.build.seed)?;
        let config = OptimConfig::new(preset.config(name)?);
        let mut opt = VarOptimizer::from_named(model.vars(), config)?;
        let options = RunOptions {
            experiment: r.experiment.name().to_string(),
            optimizer: name.clone(),
            seed: r.build.seed,
            epochs: r.epochs,
            max_batches: r.max_batches,
            out_dir: r.out_dir.clone(),
            checkpoint_every: r.checkpoint_every,
            resume: r.resume,
            log_every: r.log_every,
            progress: r.progress,
        };
        train(model.as_ref(), data.as_ref(), &mut opt, &options)
            .with_context(|| format!("{} with {name}", r.experiment.name()))?;
    }
    outcome(&r.out_dir)
}

/// Redraws the figures of `run_dir` from its CSVs and summarises it.
pub fn outcome(run_dir: &Path) -> Result<Outcome> {
    let figures = draw_figures(run_dir)?;
    let table = SummaryTable::from_run(&load_run(run_dir)?);
    Ok(Outcome { figures, table })
}
