//! `homeadam plot SWEEP_DIR`: `sweep.png` drawn again from a sweep's `sweep.csv` and
//! `sweep.json` alone (every trial's knobs and validation scores, and the settings), so that a
//! committed sweep's figure follows the figure code without its run folders.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::space::{Axis, SearchSpace, Trial};
use super::{figure, OptimizerOutcome, SweepOutcome, TrialResult};
use crate::report::Task;

/// What the figure reads of `sweep.json`.
#[derive(Deserialize)]
struct Settings {
    experiment: String,
    epochs: u64,
    space: SearchSpace,
}

/// Whether `dir` is a sweep directory (it holds `sweep.csv`).
pub fn is_sweep(dir: &Path) -> bool {
    dir.join("sweep.csv").is_file()
}

/// Draws `dir/sweep.png` again from `dir/sweep.csv` and `dir/sweep.json`; returns its path.
/// Errors name the file and line that cannot be read.
pub fn redraw(dir: &Path) -> Result<PathBuf> {
    let json = dir.join("sweep.json");
    let text = std::fs::read_to_string(&json).with_context(|| format!("reading {}", json.display()))?;
    let settings: Settings = serde_json::from_str(&text).with_context(|| format!("{}", json.display()))?;
    let csv = dir.join("sweep.csv");
    let text = std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
    let outcome = read_sweep_csv(&text, settings.space).with_context(|| format!("{}", csv.display()))?;
    let path = dir.join("sweep.png");
    figure::draw(&path, &settings.experiment, settings.epochs, &outcome)?;
    Ok(path)
}

/// The trials of a `sweep.csv` ([`super::output::sweep_csv`]), each optimizer's in its rows'
/// order; the final runs, the ranges and the equal budget's choice are not in the file.
fn read_sweep_csv(text: &str, space: SearchSpace) -> Result<SweepOutcome> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("an empty file")?.split(',').collect();
    let [first, second, knobs @ .., loss, quality, chosen] = header.as_slice() else {
        bail!("line 1: expected optimizer,trial,<knobs>,validation_loss,validation_<acc|ppl>,chosen");
    };
    let task = Task::ALL
        .into_iter()
        .find(|t| *quality == format!("validation_{}", t.quality_column()))
        .with_context(|| format!("line 1: {quality} is neither validation_acc nor validation_ppl"))?;
    if [*first, *second, *loss, *chosen] != ["optimizer", "trial", "validation_loss", "chosen"] {
        bail!("line 1: expected optimizer,trial,<knobs>,validation_loss,validation_<acc|ppl>,chosen");
    }
    let axes = knobs
        .iter()
        .map(|k| Axis::from_name(k))
        .collect::<Result<Vec<Axis>>>()
        .context("line 1")?;
    let mut optimizers: Vec<OptimizerOutcome> = Vec::new();
    for (n, line) in lines.enumerate() {
        let at = || format!("line {}", n + 2);
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != header.len() {
            bail!("{}: {} cells, the header has {}", at(), cells.len(), header.len());
        }
        let number = |cell: &str| {
            cell.parse::<f64>()
                .with_context(|| format!("{}: {cell:?} is not a number", at()))
        };
        let mut knobs = BTreeMap::new();
        for (axis, cell) in axes.iter().zip(&cells[2..]) {
            if !cell.is_empty() {
                knobs.insert(*axis, number(cell)?);
            }
        }
        let index = cells[1]
            .parse()
            .with_context(|| format!("{}: trial {:?}", at(), cells[1]))?;
        let trial = TrialResult {
            optimizer: cells[0].to_string(),
            trial: Trial { index, knobs },
            loss: number(cells[cells.len() - 3])?,
            quality: number(cells[cells.len() - 2])?,
        };
        let chosen = match cells[cells.len() - 1] {
            "1" => true,
            "0" => false,
            other => bail!("{}: chosen is {other:?}, not 0 or 1", at()),
        };
        let outcome = match optimizers.iter_mut().find(|o| o.optimizer == cells[0]) {
            Some(o) => o,
            None => {
                // The file has no ranges to place the chosen values in, nor the equal
                // budget's choice or the widenings: the figure reads none of them.
                optimizers.push(OptimizerOutcome {
                    optimizer: cells[0].to_string(),
                    trials: Vec::new(),
                    best: usize::MAX,
                    finals: Vec::new(),
                    edges: Vec::new(),
                    equal_best: None,
                    widened: Vec::new(),
                });
                optimizers.last_mut().expect("just pushed")
            }
        };
        if chosen {
            outcome.best = outcome.trials.len();
        }
        outcome.trials.push(trial);
    }
    if let Some(o) = optimizers.iter().find(|o| o.best == usize::MAX) {
        bail!("{} has no chosen trial", o.optimizer);
    }
    Ok(SweepOutcome {
        task,
        optimizers,
        space,
        files: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::output::sweep_csv;

    fn space() -> SearchSpace {
        serde_json::from_str(
            r#"{"source": "test", "ranges": {"lr": {"factor": 10}, "eps": {"factor": 100}}}"#,
        )
        .unwrap()
    }

    fn outcome() -> SweepOutcome {
        let trial = |optimizer: &str, index: usize, knobs: &[(Axis, f64)], quality: f64| TrialResult {
            optimizer: optimizer.to_string(),
            trial: Trial {
                index,
                knobs: knobs.iter().copied().collect(),
            },
            loss: 1.0 - quality,
            quality,
        };
        let sgdm = OptimizerOutcome {
            optimizer: "sgdm".into(),
            trials: vec![
                trial("sgdm", 0, &[(Axis::Lr, 0.1)], 0.9),
                trial("sgdm", 1, &[(Axis::Lr, 0.03)], 0.95),
            ],
            best: 1,
            finals: Vec::new(),
            edges: Vec::new(),
            equal_best: None,
            widened: Vec::new(),
        };
        let adam = OptimizerOutcome {
            optimizer: "adam".into(),
            trials: vec![trial("adam", 0, &[(Axis::Lr, 1e-3), (Axis::Eps, 1.5e-9)], 0.97)],
            best: 0,
            finals: Vec::new(),
            edges: Vec::new(),
            equal_best: None,
            widened: Vec::new(),
        };
        SweepOutcome {
            task: Task::Classification,
            optimizers: vec![sgdm, adam],
            space: space(),
            files: Vec::new(),
        }
    }

    #[test]
    fn a_sweep_csv_reads_back_to_its_trials_and_draws() {
        let written = outcome();
        let read = read_sweep_csv(&sweep_csv(&written), space()).unwrap();
        assert_eq!(read, written);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sweep.csv"), sweep_csv(&written)).unwrap();
        let settings = r#"{"experiment": "digits-mlp", "epochs": 3, "budget": 2,
            "space": {"source": "test", "ranges": {"lr": {"factor": 10}, "eps": {"factor": 100}}}}"#;
        std::fs::write(dir.path().join("sweep.json"), settings).unwrap();
        assert!(is_sweep(dir.path()));
        let png = redraw(dir.path()).unwrap();
        assert!(image::open(png).unwrap().width() > 500);
    }

    #[test]
    fn a_malformed_sweep_csv_is_an_error_naming_its_line() {
        let good = sweep_csv(&outcome());
        for (bad, needle) in [
            (good.replace("validation_acc", "validation_x"), "line 1"),
            (good.replace("chosen\n", "picked\n"), "line 1"),
            (good.replace(",lr,", ",beta,"), "line 1"),
            (good.replacen("0.1,", "x,", 1), "line 2"),
            (good.replacen(",1\n", ",2\n", 1), "line 3"),
            (good.replacen(",1\n", ",0\n", 1), "sgdm has no chosen trial"),
            (format!("{good}adam,1,0.1\n"), "line 5"),
        ] {
            let err = format!("{:#}", read_sweep_csv(&bad, space()).unwrap_err());
            assert!(err.contains(needle), "{needle}: {err}");
        }
        assert!(read_sweep_csv("", space()).is_err());
    }
}
