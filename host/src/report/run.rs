//! A run directory: where each optimizer's files live, and loading them all back.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::metrics::{read_iterations, read_metrics, EpochRecord, IterationRecord, Task};
use super::stability::{read_stability, StabilityRecord};

/// The per-epoch metrics file inside an optimizer's folder.
pub const METRICS_FILE: &str = "metrics.csv";
/// The every-N-steps file inside an optimizer's folder (language models).
pub const ITERATIONS_FILE: &str = "iterations.csv";
/// The stability experiment's file inside an optimizer's folder.
pub const STABILITY_FILE: &str = "stability.csv";
/// The folder of the run directory that receives the figures.
pub const FIGURES_DIR: &str = "figures";

/// `RUN_DIR/<optimizer>/<file>`: where an optimizer's run writes `file`.
pub fn optimizer_file(run_dir: &Path, optimizer: &str, file: &str) -> PathBuf {
    run_dir.join(optimizer).join(file)
}

/// Everything one optimizer's run recorded. A file it has not written reads as no rows.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerRun {
    /// The optimizer's folder name, used as its label.
    pub name: String,
    /// `metrics.csv`, one row per finished epoch.
    pub epochs: Vec<EpochRecord>,
    /// `iterations.csv`.
    pub iterations: Vec<IterationRecord>,
    /// `stability.csv`.
    pub stability: Vec<StabilityRecord>,
}

/// A whole run directory: one [`OptimizerRun`] per optimizer folder.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The experiment's name: the run directory's folder name.
    pub name: String,
    /// The task of the `metrics.csv` files (all must agree); `None` when no folder has one.
    pub task: Option<Task>,
    /// The optimizers, sorted by name.
    pub optimizers: Vec<OptimizerRun>,
}

/// Loads every optimizer folder of `run_dir`: each sub-folder holding at least one of
/// `metrics.csv`, `iterations.csv`, `stability.csv` (other entries, `figures/` included, are
/// ignored). Errors: an unreadable directory, a malformed file (naming file and line),
/// `metrics.csv` files of different tasks, or no optimizer folder at all.
pub fn load_run(run_dir: &Path) -> Result<Run> {
    let entries = fs::read_dir(run_dir).with_context(|| format!("reading {}", run_dir.display()))?;
    let mut optimizers = Vec::new();
    let mut task: Option<(Task, String)> = None;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", run_dir.display()))?;
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let metrics = dir.join(METRICS_FILE);
        let iterations = dir.join(ITERATIONS_FILE);
        let stability = dir.join(STABILITY_FILE);
        if !(metrics.is_file() || iterations.is_file() || stability.is_file()) {
            continue;
        }
        let mut epochs = Vec::new();
        if metrics.is_file() {
            let (t, rows) = read_metrics(&metrics)?;
            match &task {
                Some((first, from)) if *first != t => bail!(
                    "{}: {t:?} metrics, but {from} has {first:?} metrics",
                    metrics.display()
                ),
                Some(_) => {}
                None => task = Some((t, name.clone())),
            }
            epochs = rows;
        }
        optimizers.push(OptimizerRun {
            epochs,
            iterations: if iterations.is_file() {
                read_iterations(&iterations)?
            } else {
                Vec::new()
            },
            stability: if stability.is_file() {
                read_stability(&stability)?
            } else {
                Vec::new()
            },
            name,
        });
    }
    if optimizers.is_empty() {
        bail!(
            "{}: no <optimizer>/{METRICS_FILE}, {ITERATIONS_FILE} or {STABILITY_FILE}",
            run_dir.display()
        );
    }
    optimizers.sort_by(|a, b| a.name.cmp(&b.name));
    let name = run_dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| run_dir.display().to_string());
    Ok(Run {
        name,
        task: task.map(|(t, _)| t),
        optimizers,
    })
}
