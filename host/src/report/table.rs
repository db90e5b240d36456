//! The summary table of a run (what `homeadam quick` prints): per optimizer, the last epoch's
//! train loss, train accuracy / perplexity, test loss, test accuracy / perplexity, the share of
//! home steps over the run, the last epoch's τ (HomeAdam(W)) and the run's wall time. As aligned
//! text or as Markdown.
//!
//! An optimizer run with several seeds shows, in a `seeds` column, how many, and in every cell
//! `mean ± s`: the mean over its seeds and their sample standard deviation
//! s = √(Σ (x − mean)² / (n − 1)), at the last epoch every seed finished.

use super::metrics::{EpochRecord, Task};
use super::run::Run;

/// A rendered summary: column headers and one row of cells per optimizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryTable {
    /// Column headers.
    pub headers: Vec<String>,
    /// One row per optimizer, as many cells as headers; `-` where nothing was recorded.
    pub rows: Vec<Vec<String>>,
}

const MISSING: &str = "-";

fn number(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        // NaN, inf, -inf: a diverged run.
        format!("{value}")
    }
}

/// A value with three significant digits in scientific notation (τ spans many decades).
fn scientific(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.2e}")
    } else {
        format!("{value}")
    }
}

/// A column's cell over seeds: the value itself for one seed, `mean ± s` for several; `-`
/// when no seed has it.
fn cell(values: &[f64], show: impl Fn(f64) -> String) -> String {
    match values {
        [] => MISSING.to_string(),
        [v] => show(*v),
        _ => {
            let n = values.len() as f64;
            let mean = values.iter().sum::<f64>() / n;
            let s = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            format!("{} ± {}", show(mean), show(s))
        }
    }
}

/// A seed's share of home updates over its epochs (every epoch has the same number of steps),
/// if its rule takes the home branch.
fn home_share(epochs: &[EpochRecord]) -> Option<f64> {
    let shares: Vec<f64> = epochs.iter().filter_map(|e| e.home_share).collect();
    (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
}

impl SummaryTable {
    /// Summarises `run`. Accuracies and the home share are shown in percent; the home share is the
    /// mean of the epochs' shares (every epoch has the same number of steps), `-` for rules that
    /// never take the home branch; τ is the last epoch's (calibrated τ changes over a run), `-`
    /// for other rules; the time is the sum of the epochs' seconds. With several seeds, the row
    /// is over the epochs every seed finished.
    pub fn from_run(run: &Run) -> Self {
        let task = run.task.unwrap_or(Task::Classification);
        let quality = match task {
            Task::Classification => "acc (%)",
            Task::LanguageModel => "ppl",
        };
        let several = run.optimizers.iter().any(|o| o.seeds.len() > 1);
        let mut headers = vec!["optimizer".to_string()];
        if several {
            headers.push("seeds".to_string());
        }
        headers.extend([
            "epochs".to_string(),
            "train loss".to_string(),
            format!("train {quality}"),
            "test loss".to_string(),
            format!("test {quality}"),
            "home steps (%)".to_string(),
            "final τ".to_string(),
            "time (s)".to_string(),
        ]);
        let show_quality = |q: f64| match task {
            Task::Classification => number(100.0 * q, 2),
            Task::LanguageModel => number(q, 2),
        };
        let rows = run
            .optimizers
            .iter()
            .map(|opt| {
                let finished = opt.seeds.iter().map(|s| s.epochs.len()).min().unwrap_or(0);
                let common: Vec<&[EpochRecord]> = opt.seeds.iter().map(|s| &s.epochs[..finished]).collect();
                let over = |f: &dyn Fn(&[EpochRecord]) -> Option<f64>| -> Vec<f64> {
                    common.iter().filter_map(|e| f(e)).collect()
                };
                let last = |f: fn(&EpochRecord) -> f64| over(&|e: &[EpochRecord]| e.last().map(f));
                let mut row = vec![opt.name.clone()];
                if several {
                    row.push(opt.seeds.len().to_string());
                }
                row.push(finished.to_string());
                row.extend([
                    cell(&last(|e| e.train_loss), |v| number(v, 4)),
                    cell(&last(|e| e.train_quality), show_quality),
                    cell(&last(|e| e.test_loss), |v| number(v, 4)),
                    cell(&last(|e| e.test_quality), show_quality),
                    cell(&over(&home_share), |v| number(100.0 * v, 1)),
                    cell(
                        &over(&|e: &[EpochRecord]| e.last().and_then(|r| r.tau)),
                        scientific,
                    ),
                    cell(
                        &over(&|e: &[EpochRecord]| {
                            (!e.is_empty()).then(|| e.iter().map(|r| r.seconds).sum())
                        }),
                        |v| number(v, 1),
                    ),
                ]);
                row
            })
            .collect();
        SummaryTable { headers, rows }
    }

    fn widths(&self) -> Vec<usize> {
        (0..self.headers.len())
            .map(|c| {
                std::iter::once(&self.headers[c])
                    .chain(self.rows.iter().map(|r| &r[c]))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// One row's cells padded to `widths`: the name left-aligned, numbers right-aligned.
    fn padded(cells: &[String], widths: &[usize], escape: bool) -> Vec<String> {
        cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(c, (s, &w))| {
                let s = if escape { s.replace('|', "\\|") } else { s.clone() };
                if c == 0 {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect()
    }

    /// Aligned plain text: names left-aligned, numbers right-aligned, a rule under the header.
    pub fn to_text(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| {
            Self::padded(cells, &widths, false)
                .join("  ")
                .trim_end()
                .to_string()
        };
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        let mut lines = vec![line(&self.headers), rule.join("  ")];
        lines.extend(self.rows.iter().map(|r| line(r)));
        lines.join("\n") + "\n"
    }

    /// A GitHub-flavoured Markdown table (numbers right-aligned), for notes and READMEs.
    pub fn to_markdown(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| format!("| {} |", Self::padded(cells, &widths, true).join(" | "));
        let rule: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(c, &w)| {
                let dashes = "-".repeat(w.max(3) - 1);
                if c == 0 {
                    format!(":{dashes}")
                } else {
                    format!("{dashes}:")
                }
            })
            .collect();
        let mut lines = vec![line(&self.headers), format!("| {} |", rule.join(" | "))];
        lines.extend(self.rows.iter().map(|r| line(r)));
        lines.join("\n") + "\n"
    }
}
