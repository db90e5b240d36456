//! The summary table of a run (what `homeadam quick` prints): per optimizer, the last epoch's
//! train loss, train accuracy / perplexity, test loss, test accuracy / perplexity, the share of
//! home steps over the run and the run's wall time. As aligned text or as Markdown.

use super::metrics::Task;
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

impl SummaryTable {
    /// Summarises `run`. Accuracies and the home share are shown in percent; the home share is the
    /// mean of the epochs' shares (every epoch has the same number of steps), `-` for rules that
    /// never take the home branch; the time is the sum of the epochs' seconds.
    pub fn from_run(run: &Run) -> Self {
        let task = run.task.unwrap_or(Task::Classification);
        let quality = match task {
            Task::Classification => "acc (%)",
            Task::LanguageModel => "ppl",
        };
        let headers = [
            "optimizer".to_string(),
            "epochs".to_string(),
            "train loss".to_string(),
            format!("train {quality}"),
            "test loss".to_string(),
            format!("test {quality}"),
            "home steps (%)".to_string(),
            "time (s)".to_string(),
        ];
        let show_quality = |q: f64| match task {
            Task::Classification => number(100.0 * q, 2),
            Task::LanguageModel => number(q, 2),
        };
        let rows = run
            .optimizers
            .iter()
            .map(|opt| {
                let mut row = vec![opt.name.clone(), opt.epochs.len().to_string()];
                match opt.epochs.last() {
                    Some(last) => row.extend([
                        number(last.train_loss, 4),
                        show_quality(last.train_quality),
                        number(last.test_loss, 4),
                        show_quality(last.test_quality),
                    ]),
                    None => row.extend(std::iter::repeat_n(MISSING.to_string(), 4)),
                }
                let shares: Vec<f64> = opt.epochs.iter().filter_map(|e| e.home_share).collect();
                row.push(if shares.is_empty() {
                    MISSING.to_string()
                } else {
                    number(100.0 * shares.iter().sum::<f64>() / shares.len() as f64, 1)
                });
                row.push(if opt.epochs.is_empty() {
                    MISSING.to_string()
                } else {
                    number(opt.epochs.iter().map(|e| e.seconds).sum(), 1)
                });
                row
            })
            .collect();
        SummaryTable {
            headers: headers.into(),
            rows,
        }
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
