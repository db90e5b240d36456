//! An experiment with several optimizers: one run each from the same initial model, then the
//! figures and the summary table of the run directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::experiments::{BuildOptions, Experiment, Setup};
use super::run::{train, RunOptions, RunSettings};
use crate::report::{draw_figures, load_run, SummaryTable};
use homeadam_candle::{OptimConfig, VarOptimizer};

/// One experiment, several optimizers.
#[derive(Clone, Debug)]
pub struct ExperimentRun {
    /// What to train.
    pub experiment: Experiment,
    /// Which optimizers, by name (each a run from the same initial model).
    pub optimizers: Vec<String>,
    /// How each run goes and where it writes.
    pub settings: RunSettings,
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
            settings: r.settings.clone(),
        };
        train(model.as_ref(), data.as_ref(), &mut opt, &options)
            .with_context(|| format!("{} with {name}", r.experiment.name()))?;
    }
    outcome(&r.settings.out_dir)
}

/// Redraws the figures of `run_dir` from its CSVs and writes its summary table to
/// `RUN_DIR/summary.md`.
pub fn outcome(run_dir: &Path) -> Result<Outcome> {
    let figures = draw_figures(run_dir)?;
    let table = SummaryTable::from_run(&load_run(run_dir)?);
    crate::replay::write_atomically(&run_dir.join("summary.md"), table.to_markdown().as_bytes())?;
    Ok(Outcome { figures, table })
}
