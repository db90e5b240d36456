//! An experiment with several optimizers and seeds: one run each (every optimizer of a seed
//! from the same initial model), then the figures and the summary table of the run directory.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::experiments::{BuildOptions, Experiment, Setup};
use super::run::{train, RunOptions, RunSettings};
use crate::preset::DecayMask;
use crate::report::{draw_figures, load_run, SummaryTable};
use homeadam_candle::VarOptimizer;

/// One experiment, several optimizers, one or more seeds.
#[derive(Clone, Debug)]
pub struct ExperimentRun {
    /// What to train.
    pub experiment: Experiment,
    /// Which optimizers, by name (each a run from the same initial model).
    pub optimizers: Vec<String>,
    /// The first seed of initialisation and data order.
    pub seed: u64,
    /// Runs per optimizer, with seeds `seed`, `seed + 1`, … (`None`: the preset's). With more
    /// than one, each run writes into `RUN_DIR/<optimizer>/seed-<s>/`.
    pub seeds: Option<u64>,
    /// Overrides the preset's decay mask.
    pub decay_mask: Option<DecayMask>,
    /// How each run goes and where it writes.
    pub settings: RunSettings,
    /// Data, model size, device.
    pub build: BuildOptions,
}

/// The figures and table of a finished run directory.
pub struct ExperimentOutcome {
    /// The figures written.
    pub figures: Vec<PathBuf>,
    /// The summary of every optimizer's last epoch.
    pub table: SummaryTable,
}

/// Trains every optimizer of `r` for every seed in turn, then draws the run directory's
/// figures.
///
/// With `resume`, each run continues from its checkpoint, and a run without one (it had not
/// started when the command was killed) starts from scratch; at least one run must have a
/// checkpoint, else `--resume` was given by mistake and nothing is trained.
pub fn run_experiment(r: &ExperimentRun) -> Result<ExperimentOutcome> {
    let Setup {
        data,
        new_model,
        preset,
    } = r.experiment.build(&r.build)?;
    let protocol = &preset.protocol;
    let seeds = r.seeds.unwrap_or(protocol.seeds.value);
    if seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let decay = r.decay_mask.unwrap_or(protocol.decay_mask.value);
    let mut settings = r.settings.clone();
    settings.eval_subset.get_or_insert(protocol.eval_subset.value);
    let steps_per_epoch = data
        .train_batches()
        .min(settings.max_batches.unwrap_or(usize::MAX)) as u64;
    let runs: Vec<RunOptions> = r
        .optimizers
        .iter()
        .flat_map(|name| {
            (0..seeds).map(|k| RunOptions {
                experiment: r.experiment.name().to_string(),
                optimizer: name.clone(),
                seed: r.seed.wrapping_add(k),
                seed_folder: seeds > 1,
                resume: settings.resume,
                settings: settings.clone(),
            })
        })
        .collect();
    let has_checkpoint = |o: &RunOptions| o.dir().join("checkpoint.bin").exists();
    if settings.resume && !runs.iter().any(has_checkpoint) {
        if let Some(first) = runs.first() {
            bail!(
                "--resume: no checkpoint at {} (start without --resume to train from scratch)",
                first.dir().join("checkpoint.bin").display()
            );
        }
    }
    for mut options in runs {
        options.resume = options.resume && has_checkpoint(&options);
        let name = &options.optimizer;
        let model = new_model(options.seed)?;
        let config = preset.optim_config(name, steps_per_epoch, decay)?;
        let mut opt = VarOptimizer::from_named(model.vars(), config)?;
        train(model.as_ref(), data.as_ref(), &mut opt, &options)
            .with_context(|| format!("{} with {name}, seed {}", r.experiment.name(), options.seed))?;
    }
    outcome(&r.settings.out_dir)
}

/// Redraws the figures of `run_dir` from its CSVs and writes its summary table to
/// `RUN_DIR/summary.md`.
pub fn outcome(run_dir: &Path) -> Result<ExperimentOutcome> {
    let figures = draw_figures(run_dir)?;
    let table = SummaryTable::from_run(&load_run(run_dir)?);
    super::checkpoint::write_atomically(&run_dir.join("summary.md"), table.to_markdown().as_bytes())?;
    Ok(ExperimentOutcome { figures, table })
}
