//! A sweep's files: `sweep.csv`, `best.json`, `summary.md` and the figure.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::space::{Axis, Trial};
use super::stats::Estimate;
use super::{OptimizerOutcome, SweepOptions, SweepOutcome};
use crate::preset::Preset;
use crate::report::Task;
use crate::train::checkpoint::write_atomically;

/// `sweep.csv`: one row per trial, optimizers in the order asked and trials by index; a knob
/// the rule does not read is left empty. Numbers are written as the shortest text that reads
/// back to the same value, so the file is a function of the trials' results alone.
pub fn sweep_csv(outcome: &SweepOutcome) -> String {
    let q = outcome.task.quality_column();
    let knobs: Vec<_> = Axis::ALL.iter().map(|k| k.name()).collect();
    let mut text = format!(
        "optimizer,trial,{},validation_loss,validation_{q},chosen\n",
        knobs.join(",")
    );
    for o in &outcome.optimizers {
        for (i, t) in o.trials.iter().enumerate() {
            let values: Vec<String> = Axis::ALL
                .iter()
                .map(|k| t.trial.knobs.get(k).map_or(String::new(), |v| number(*v)))
                .collect();
            let _ = writeln!(
                text,
                "{},{},{},{},{},{}",
                o.optimizer,
                t.trial.index,
                values.join(","),
                t.loss,
                t.quality,
                u8::from(i == o.best)
            );
        }
    }
    text
}

/// A knob's value as the shortest text that reads back to it, in scientific notation when
/// small or large (`0.001`, `1.39e-9`).
fn number(v: f64) -> String {
    if (1e-3..1e4).contains(&v.abs()) {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

/// A range's end to four significant digits (a range around a preset's value, 1e-4 / 1e3, is
/// 1.0000000000000001e-7 in full).
fn range_end(v: f64) -> String {
    number(format!("{v:.3e}").parse().unwrap_or(v))
}

/// The knobs of `trial` as `lr=0.001 eps=1e-8`.
pub fn knob_text(trial: &Trial) -> String {
    let parts: Vec<String> = trial
        .knobs
        .iter()
        .map(|(k, v)| format!("{k}={}", number(*v)))
        .collect();
    parts.join(" ")
}

/// A score as the tables print it: accuracy with four decimals, perplexity with two.
fn score(task: Task, x: f64) -> String {
    match task {
        Task::Classification => format!("{x:.4}"),
        Task::LanguageModel => format!("{x:.2}"),
    }
}

/// The interval `(low, high)` as the tables print it, clipped to the values the score can take
/// (an accuracy in [0, 1], a perplexity of at least 1) and then marked `*`: the Student-t
/// interval assumes a normal spread over the seeds and, near a bound, reaches values no run
/// can score. Returns the text and whether it was clipped.
pub fn interval_text(task: Task, (low, high): (f64, f64)) -> (String, bool) {
    let (floor, ceiling) = match task {
        Task::Classification => (0.0, 1.0),
        Task::LanguageModel => (1.0, f64::INFINITY),
    };
    let clipped = low < floor || high > ceiling;
    let text = format!(
        "[{}, {}]{}",
        score(task, low.max(floor)),
        score(task, high.min(ceiling)),
        if clipped { "*" } else { "" }
    );
    (text, clipped)
}

/// The test scores' estimate of one optimizer.
pub fn estimate(o: &OptimizerOutcome) -> Estimate {
    Estimate::of(&o.finals.iter().map(|f| f.2).collect::<Vec<_>>())
}

/// The summary table (Markdown): per optimizer, the chosen trial and its validation score,
/// then the test score over the seeds: mean ± sample standard deviation and the 95 % Student-t
/// confidence interval of the mean.
pub fn summary_markdown(opts: &SweepOptions, outcome: &SweepOutcome) -> String {
    let task = outcome.task;
    let q = task.quality_name();
    let mut text = format!(
        "{}: {} configurations per optimizer, scored on a validation split ({} of the training \
         split) after {} epochs; the best then trained with {} seeds on the whole training split \
         and tested on the test split. Test {q}: mean ± sample std, 95 % CI of the mean (Student t, \
         n − 1 degrees of freedom).\n\n",
        opts.experiment.name(),
        opts.budget,
        opts.validation_fraction,
        opts.epochs,
        opts.seeds
    );
    let _ = writeln!(
        text,
        "| optimizer | trials | chosen | validation {q} | test {q} (mean ± std) | 95 % CI | seeds |"
    );
    text.push_str("|---|---:|---|---:|---:|---|---:|\n");
    let mut any_clipped = false;
    for o in &outcome.optimizers {
        let e = estimate(o);
        let spread = e.std.map_or(String::new(), |s| format!(" ± {}", score(task, s)));
        let ci = e.interval().map_or("–".to_string(), |interval| {
            let (text, clipped) = interval_text(task, interval);
            any_clipped |= clipped;
            text
        });
        let c = o.chosen();
        let _ = writeln!(
            text,
            "| {} | {} | #{}: {} | {} | {}{spread} | {ci} | {} |",
            o.optimizer,
            o.trials.len(),
            c.trial.index,
            knob_text(&c.trial),
            score(task, c.quality),
            score(task, e.mean),
            e.n
        );
    }
    if any_clipped {
        let _ = writeln!(
            text,
            "\n\\* clipped to the range of the {q}: the t interval of a few seeds reaches past it."
        );
    }
    text.push_str(&equal_budget_markdown(opts, outcome));
    text.push_str(&widened_markdown(outcome));
    text.push_str(&edges_markdown(opts, outcome));
    text
}

/// For the optimizers given more trials than the equal budget (`--budget-per-knob`), the trial
/// the equal budget alone would have chosen; empty when none was.
pub fn equal_budget_markdown(opts: &SweepOptions, outcome: &SweepOutcome) -> String {
    let task = outcome.task;
    let mut text = String::new();
    for o in &outcome.optimizers {
        if let Some(k) = o.equal_best {
            let t = &o.trials[k];
            let _ = writeln!(
                text,
                "- {}: of its first {} trials, #{}: {} (validation {}); of all {}, #{} (validation {})",
                o.optimizer,
                opts.budget,
                t.trial.index,
                knob_text(&t.trial),
                score(task, t.quality),
                o.trials.len(),
                o.chosen().trial.index,
                score(task, o.chosen().quality)
            );
        }
    }
    if text.is_empty() {
        return text;
    }
    format!(
        "\nThe equal budget ({} trials each) and the budget per knob ({} per knob its rule reads): \
         the final runs are the latter's choice.\n\n{text}",
        opts.budget,
        opts.budget_per_knob.unwrap_or(0)
    )
}

/// The ranges `--widen` widened, one line each with the round whose trials read the widened
/// range; empty when none was.
pub fn widened_markdown(outcome: &SweepOutcome) -> String {
    let mut text = String::new();
    for o in &outcome.optimizers {
        let per_round = o.trials.len() / (1 + o.widened.last().map_or(0, |w| w.round));
        for w in &o.widened {
            let _ = writeln!(
                text,
                "- {}: {} from {}..{} to {}..{} for trials #{}–#{}",
                o.optimizer,
                w.knob,
                range_end(w.from.0),
                range_end(w.from.1),
                range_end(w.to.0),
                range_end(w.to.1),
                w.round * per_round,
                (w.round + 1) * per_round - 1
            );
        }
    }
    if text.is_empty() {
        return text;
    }
    format!(
        "\nRanges widened (each time the best trial so far lay in the outer {:.0} % of a knob's \
         log range, that end moved by {:.0} % of the log width and as many trials drawn again):\n\n{text}",
        100.0 * super::space::EDGE,
        100.0 * super::space::WIDEN
    )
}

/// The chosen values in the outer tenth of their knob's log range (the last range searched),
/// where the optimum may lie outside it: one line each, with the range and what to do; empty
/// when none.
pub fn edges_markdown(opts: &SweepOptions, outcome: &SweepOutcome) -> String {
    let mut text = String::new();
    for o in &outcome.optimizers {
        for e in &o.edges {
            let _ = writeln!(
                text,
                "- {}: {}={} at {:.0} % of its log range {}..{}: the optimum may lie outside it \
                 ({})",
                o.optimizer,
                e.knob,
                number(e.value),
                100.0 * e.position,
                range_end(e.range.0),
                range_end(e.range.1),
                if opts.widen < super::MAX_WIDEN {
                    format!("run again with --widen {}", opts.widen + 1)
                } else {
                    format!("widen it with --range {}=LOW:HIGH and run again", e.knob)
                }
            );
        }
    }
    if text.is_empty() {
        return text;
    }
    format!(
        "\nChosen values in the outer {:.0} % of their knob's log range:\n\n{text}",
        100.0 * super::space::EDGE
    )
}

/// `best.json`: the experiment's preset with each swept optimizer's entry set to its chosen
/// configuration, its `source` saying how it was chosen; [`Preset::from_json`] reads it.
pub fn best_json(opts: &SweepOptions, outcome: &SweepOutcome) -> Result<String> {
    let name = opts.experiment.preset_name();
    let mut preset: Value = serde_json::from_str(Preset::json(name)?)?;
    let task = outcome.task;
    for o in &outcome.optimizers {
        let entry = preset["optimizers"]
            .get_mut(&o.optimizer)
            .with_context(|| format!("preset {name}: no entry {}", o.optimizer))?;
        let c = o.chosen();
        for (knob, &value) in &c.trial.knobs {
            match knob {
                Axis::HomeShare => entry["tau"]["home_share"] = json!(value),
                k => entry[k.name()] = json!(value),
            }
        }
        let e = estimate(o);
        entry["source"] = json!(format!(
            "ours: `homeadam sweep`, trial {} of {} ({}), the best validation {} ({}) after {} epochs \
             on {} of the training split held out; test {} over {} seeds {}{}",
            c.trial.index,
            o.trials.len(),
            knob_text(&c.trial),
            task.quality_name(),
            score(task, c.quality),
            opts.epochs,
            opts.validation_fraction,
            task.quality_name(),
            e.n,
            score(task, e.mean),
            e.std.map_or(String::new(), |s| format!(" ± {}", score(task, s))),
        ));
    }
    let text = serde_json::to_string_pretty(&preset)? + "\n";
    Preset::from_json(&text).context("best.json")?;
    Ok(text)
}

/// Writes `sweep.csv`, `best.json`, `summary.md` and `sweep.png`; returns their paths.
pub fn write_all(opts: &SweepOptions, outcome: &SweepOutcome) -> Result<Vec<PathBuf>> {
    let dir = &opts.out_dir;
    let files = [
        ("sweep.csv", sweep_csv(outcome)),
        ("best.json", best_json(opts, outcome)?),
        ("summary.md", summary_markdown(opts, outcome)),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        write_atomically(&path, text.as_bytes())?;
        written.push(path);
    }
    let figure = dir.join("sweep.png");
    super::figure::draw(&figure, opts.experiment.name(), opts.epochs, outcome)?;
    written.push(figure);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_past_a_bound_are_clipped_and_marked() {
        let within = interval_text(Task::Classification, (0.95, 0.99));
        assert_eq!(within, ("[0.9500, 0.9900]".to_string(), false));
        let above = interval_text(Task::Classification, (0.9582, 1.0028));
        assert_eq!(above, ("[0.9582, 1.0000]*".to_string(), true));
        let below = interval_text(Task::LanguageModel, (0.5, 120.0));
        assert_eq!(below, ("[1.00, 120.00]*".to_string(), true));
    }
}
