//! A run directory: where each optimizer's files live, and loading them all back.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::metrics::{read_iterations, read_metrics, EpochRecord, IterationRecord, Task};
use super::stability::{read_stability, StabilityRecord};

/// The per-epoch metrics file inside an optimizer's folder.
pub const METRICS_FILE: &str = "metrics.csv";
/// The every-N-steps file inside an optimizer's folder.
pub const ITERATIONS_FILE: &str = "iterations.csv";
/// The stability experiment's file inside an optimizer's folder.
pub const STABILITY_FILE: &str = "stability.csv";
/// The folder of the run directory that receives the figures.
pub const FIGURES_DIR: &str = "figures";

/// `RUN_DIR/<optimizer>/<file>`: where an optimizer's run writes `file`.
pub fn optimizer_file(run_dir: &Path, optimizer: &str, file: &str) -> PathBuf {
    run_dir.join(optimizer).join(file)
}

/// One seed's run of an optimizer.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedRun {
    /// The seed, for a run of several seeds (its `seed-<s>` folder); `None` for a run of one,
    /// whose files lie in the optimizer's folder.
    pub seed: Option<u64>,
    /// `metrics.csv`, one row per finished epoch.
    pub epochs: Vec<EpochRecord>,
    /// `iterations.csv`.
    pub iterations: Vec<IterationRecord>,
}

/// Everything one optimizer recorded. A file it has not written reads as no rows.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerRun {
    /// The optimizer's folder name, used as its label.
    pub name: String,
    /// Its runs, one per seed, in seed order (one when the run had a single seed).
    pub seeds: Vec<SeedRun>,
    /// `stability.csv`.
    pub stability: Vec<StabilityRecord>,
}

/// A whole run directory: one [`OptimizerRun`] per optimizer folder.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The experiment's name: the run directory's folder name.
    pub name: String,
    /// The task of the `metrics.csv` files (all must agree), or else of the test columns of the
    /// `iterations.csv` files; `None` when no file says.
    pub task: Option<Task>,
    /// The optimizers, sorted by name.
    pub optimizers: Vec<OptimizerRun>,
}

/// The seed of a `seed-<s>` folder name.
fn seed_of(name: &str) -> Option<u64> {
    name.strip_prefix("seed-")?.parse().ok()
}

/// Whether `dir` holds a run's files.
fn has_run_files(dir: &Path) -> bool {
    [METRICS_FILE, ITERATIONS_FILE]
        .iter()
        .any(|f| dir.join(f).is_file())
}

/// Keeps the first task met and refuses another.
fn agree(task: &mut Option<(Task, PathBuf)>, found: Task, path: &Path) -> Result<()> {
    match task {
        Some((first, from)) if *first != found => bail!(
            "{}: {found:?} metrics, but {} has {first:?} metrics",
            path.display(),
            from.display()
        ),
        Some(_) => Ok(()),
        None => {
            *task = Some((found, path.to_path_buf()));
            Ok(())
        }
    }
}

/// Reads one run's `metrics.csv` and `iterations.csv` in `dir`, noting their tasks.
fn load_seed(
    dir: &Path,
    seed: Option<u64>,
    metrics_task: &mut Option<(Task, PathBuf)>,
    iterations_task: &mut Option<(Task, PathBuf)>,
) -> Result<SeedRun> {
    let metrics = dir.join(METRICS_FILE);
    let iterations = dir.join(ITERATIONS_FILE);
    let mut run = SeedRun {
        seed,
        epochs: Vec::new(),
        iterations: Vec::new(),
    };
    if metrics.is_file() {
        let (t, rows) = read_metrics(&metrics)?;
        agree(metrics_task, t, &metrics)?;
        run.epochs = rows;
    }
    if iterations.is_file() {
        let (t, rows) = read_iterations(&iterations)?;
        if let Some(t) = t {
            agree(iterations_task, t, &iterations)?;
        }
        run.iterations = rows;
    }
    Ok(run)
}

/// Loads every optimizer folder of `run_dir`: each sub-folder holding at least one of
/// `metrics.csv`, `iterations.csv`, `stability.csv`, or `seed-<s>` folders holding
/// `metrics.csv` or `iterations.csv` (a run of several seeds; other entries, `figures/`
/// included, are ignored). Errors: an unreadable directory, a malformed file (naming file and
/// line), files of different tasks, a folder with both a single run's files and seed folders,
/// or no optimizer folder at all.
pub fn load_run(run_dir: &Path) -> Result<Run> {
    let entries = fs::read_dir(run_dir).with_context(|| format!("reading {}", run_dir.display()))?;
    let mut optimizers = Vec::new();
    let (mut metrics_task, mut iterations_task) = (None, None);
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", run_dir.display()))?;
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut seed_dirs: Vec<(u64, PathBuf)> = Vec::new();
        for sub in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let sub = sub.with_context(|| format!("reading {}", dir.display()))?.path();
            let seed = sub.file_name().and_then(|n| seed_of(&n.to_string_lossy()));
            if let Some(seed) = seed.filter(|_| sub.is_dir() && has_run_files(&sub)) {
                seed_dirs.push((seed, sub));
            }
        }
        seed_dirs.sort();
        let stability = dir.join(STABILITY_FILE);
        let single = has_run_files(&dir);
        if single && !seed_dirs.is_empty() {
            bail!(
                "{}: holds both a single run's files and seed-<s> folders (runs of different \
                 --seeds in one run directory; use another --out)",
                dir.display()
            );
        }
        if !(single || stability.is_file() || !seed_dirs.is_empty()) {
            continue;
        }
        let mut seeds = Vec::new();
        if single {
            seeds.push(load_seed(&dir, None, &mut metrics_task, &mut iterations_task)?);
        }
        for (seed, sub) in seed_dirs {
            seeds.push(load_seed(
                &sub,
                Some(seed),
                &mut metrics_task,
                &mut iterations_task,
            )?);
        }
        optimizers.push(OptimizerRun {
            seeds,
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
        task: metrics_task.or(iterations_task).map(|(t, _)| t),
        optimizers,
    })
}
