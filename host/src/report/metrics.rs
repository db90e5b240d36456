//! `metrics.csv` (one row per epoch) and `iterations.csv` (one row every N steps) of one
//! optimizer's run.
//!
//! `RUN_DIR/<optimizer>/metrics.csv` has the header
//! `epoch,train_loss,train_acc,test_loss,test_acc,seconds,home_share,rho` for image classification
//! ([`Task::Classification`], accuracies as fractions in [0, 1]) and
//! `epoch,train_loss,train_ppl,test_loss,test_ppl,seconds,home_share,rho` for language modelling
//! ([`Task::LanguageModel`]); the header says which. A run with `--eval-train` adds the columns
//! `clean_train_loss,clean_train_acc` (or `_ppl`): the training split evaluated after the epoch
//! in eval mode. `RUN_DIR/<optimizer>/iterations.csv` has the header
//! `step,train_loss,home_share,rho`, and with `--eval-every` also `test_loss,test_acc` (or
//! `test_ppl`): the test subset's, on the rows where it was evaluated. See
//! [`crate::report::csv`] for the dialect, crash safety and resuming.

use std::path::Path;

use anyhow::Result;

use super::csv::{
    check_fraction, parse_float, parse_int, parse_optional, read_rows, CsvRow, CsvWriter, Field,
};

/// What a run trains; decides the quality columns of `metrics.csv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// Image classification: the quality is the accuracy, a fraction in [0, 1]
    /// (`train_acc`, `test_acc`).
    Classification,
    /// Language modelling: the quality is the perplexity, exp(mean token cross-entropy)
    /// (`train_ppl`, `test_ppl`).
    LanguageModel,
}

impl Task {
    /// Both tasks, in header-lookup order.
    pub const ALL: [Task; 2] = [Task::Classification, Task::LanguageModel];

    /// The column suffix of the quality: `acc` or `ppl`.
    pub fn quality_column(self) -> &'static str {
        match self {
            Task::Classification => "acc",
            Task::LanguageModel => "ppl",
        }
    }

    /// The quality's name in figures and tables: `accuracy` or `perplexity`.
    pub fn quality_name(self) -> &'static str {
        match self {
            Task::Classification => "accuracy",
            Task::LanguageModel => "perplexity",
        }
    }
}

/// The columns of a `metrics.csv`: the task's, and whether the clean training evaluation's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsColumns {
    /// The task (accuracy or perplexity columns).
    pub task: Task,
    /// The `clean_train_*` columns (`--eval-train`).
    pub clean_train: bool,
}

impl MetricsColumns {
    /// Every kind of file, in header-lookup order.
    fn all() -> impl Iterator<Item = MetricsColumns> {
        Task::ALL
            .into_iter()
            .flat_map(|task| [false, true].map(|clean_train| MetricsColumns { task, clean_train }))
    }
}

/// One finished epoch of one optimizer's run: a row of `metrics.csv`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochRecord {
    /// The epoch number, 1-based (0 may record the model before training). Strictly increasing.
    pub epoch: u32,
    /// Mean training loss over the epoch's mini-batches.
    pub train_loss: f64,
    /// Training accuracy (fraction in [0, 1]) or perplexity, by [`Task`].
    pub train_quality: f64,
    /// Loss on the test set after the epoch.
    pub test_loss: f64,
    /// Test accuracy (fraction in [0, 1]) or perplexity, by [`Task`].
    pub test_quality: f64,
    /// Wall-clock seconds of this epoch (training and evaluation), not cumulative.
    pub seconds: f64,
    /// HomeAdam(W) only: the share of the epoch's updates that took the home (SGDM) branch, in
    /// [0, 1] — summed `home_elements` over the epoch's steps divided by elements × steps, which
    /// for the global rule is the share of home steps. `None` (empty field) for other rules.
    pub home_share: Option<f64>,
    /// The smallest ρ_t = min_j (v̂_t)_j over the epoch's steps; `None` (empty field) for rules
    /// without a second moment (SGD, SGDM, …) or an epoch where every step lacked one.
    pub rho: Option<f64>,
    /// `--eval-train`: the mean loss over the training split, evaluated after the epoch in eval
    /// mode (no dropout or augmentation, BatchNorm's running statistics); `None` without.
    pub clean_train_loss: Option<f64>,
    /// `--eval-train`: the same evaluation's accuracy or perplexity.
    pub clean_train_quality: Option<f64>,
}

impl CsvRow for EpochRecord {
    type Kind = MetricsColumns;
    const KEY: &'static str = "epoch";

    fn header(c: MetricsColumns) -> String {
        let q = c.task.quality_column();
        let mut h = format!("epoch,train_loss,train_{q},test_loss,test_{q},seconds,home_share,rho");
        if c.clean_train {
            h.push_str(&format!(",clean_train_loss,clean_train_{q}"));
        }
        h
    }

    fn kind_of_header(header: &str) -> Option<MetricsColumns> {
        MetricsColumns::all().find(|&c| Self::header(c) == header)
    }

    fn key(&self) -> u64 {
        u64::from(self.epoch)
    }

    fn fields(&self, c: MetricsColumns) -> Vec<Field> {
        let mut fields = vec![
            Field::Int(self.key()),
            Field::Float(self.train_loss),
            Field::Float(self.train_quality),
            Field::Float(self.test_loss),
            Field::Float(self.test_quality),
            Field::Float(self.seconds),
            Field::Optional(self.home_share),
            Field::Optional(self.rho),
        ];
        if c.clean_train {
            fields.extend([
                Field::Optional(self.clean_train_loss),
                Field::Optional(self.clean_train_quality),
            ]);
        }
        fields
    }

    fn parse(f: &[&str], c: MetricsColumns) -> Result<Self, String> {
        let q = c.task.quality_column();
        let optional = |i: usize, name: &str| match f.get(i) {
            Some(text) => parse_optional(name, text),
            None => Ok(None),
        };
        let epoch = parse_int("epoch", f[0])?;
        Ok(EpochRecord {
            epoch: u32::try_from(epoch).map_err(|_| format!("epoch {epoch} is too large"))?,
            train_loss: parse_float("train_loss", f[1])?,
            train_quality: parse_float(&format!("train_{q}"), f[2])?,
            test_loss: parse_float("test_loss", f[3])?,
            test_quality: parse_float(&format!("test_{q}"), f[4])?,
            seconds: parse_float("seconds", f[5])?,
            home_share: parse_optional("home_share", f[6])?,
            rho: parse_optional("rho", f[7])?,
            clean_train_loss: optional(8, "clean_train_loss")?,
            clean_train_quality: optional(9, &format!("clean_train_{q}"))?,
        })
    }

    fn validate(&self, c: MetricsColumns) -> Result<(), String> {
        if c.task == Task::Classification {
            check_fraction("train_acc", self.train_quality)?;
            check_fraction("test_acc", self.test_quality)?;
            self.clean_train_quality
                .map_or(Ok(()), |q| check_fraction("clean_train_acc", q))?;
        }
        self.home_share
            .map_or(Ok(()), |s| check_fraction("home_share", s))
    }
}

/// One row of `iterations.csv`: the running state every N optimizer steps, and the test
/// subset's scores every M (figures per iteration).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IterationRecord {
    /// The optimizer step t after which the row was recorded. Strictly increasing.
    pub step: u64,
    /// Mean training loss over the steps since the previous row.
    pub train_loss: f64,
    /// HomeAdam(W) only: the share of updates since the previous row that took the home branch
    /// (as [`EpochRecord::home_share`]); `None` for other rules.
    pub home_share: Option<f64>,
    /// The smallest ρ_t since the previous row; `None` without a second moment.
    pub rho: Option<f64>,
    /// `--eval-every`: the test subset's mean loss after this step; `None` on other rows.
    pub test_loss: Option<f64>,
    /// `--eval-every`: the test subset's accuracy or perplexity after this step.
    pub test_quality: Option<f64>,
}

/// The columns of an `iterations.csv`: `None` without the test subset's, `Some(task)` with them.
pub type IterationColumns = Option<Task>;

impl CsvRow for IterationRecord {
    type Kind = IterationColumns;
    const KEY: &'static str = "step";

    fn header(test: IterationColumns) -> String {
        let base = "step,train_loss,home_share,rho".to_string();
        match test {
            Some(task) => format!("{base},test_loss,test_{}", task.quality_column()),
            None => base,
        }
    }

    fn kind_of_header(header: &str) -> Option<IterationColumns> {
        [None, Some(Task::Classification), Some(Task::LanguageModel)]
            .into_iter()
            .find(|&c| Self::header(c) == header)
    }

    fn key(&self) -> u64 {
        self.step
    }

    fn fields(&self, test: IterationColumns) -> Vec<Field> {
        let mut fields = vec![
            Field::Int(self.step),
            Field::Float(self.train_loss),
            Field::Optional(self.home_share),
            Field::Optional(self.rho),
        ];
        if test.is_some() {
            fields.extend([
                Field::Optional(self.test_loss),
                Field::Optional(self.test_quality),
            ]);
        }
        fields
    }

    fn parse(f: &[&str], test: IterationColumns) -> Result<Self, String> {
        let q = test.map_or("", Task::quality_column);
        let optional = |i: usize, name: &str| match f.get(i) {
            Some(text) => parse_optional(name, text),
            None => Ok(None),
        };
        Ok(IterationRecord {
            step: parse_int("step", f[0])?,
            train_loss: parse_float("train_loss", f[1])?,
            home_share: parse_optional("home_share", f[2])?,
            rho: parse_optional("rho", f[3])?,
            test_loss: optional(4, "test_loss")?,
            test_quality: optional(5, &format!("test_{q}"))?,
        })
    }

    fn validate(&self, test: IterationColumns) -> Result<(), String> {
        if test == Some(Task::Classification) {
            self.test_quality
                .map_or(Ok(()), |q| check_fraction("test_acc", q))?;
        }
        self.home_share
            .map_or(Ok(()), |s| check_fraction("home_share", s))
    }
}

/// Writes `metrics.csv`: `MetricsWriter::create(path, columns)` for a new run,
/// `MetricsWriter::resume(path, columns, last_finished_epoch)` for a resumed one, then `append`
/// per epoch.
pub type MetricsWriter = CsvWriter<EpochRecord>;

/// Writes `iterations.csv`: `IterationWriter::create(path, columns)`,
/// `IterationWriter::resume(path, columns, last_step)`, then `append` every N steps.
pub type IterationWriter = CsvWriter<IterationRecord>;

/// Reads a `metrics.csv`: its task (from the header) and its rows. Errors name the line.
pub fn read_metrics(path: &Path) -> Result<(Task, Vec<EpochRecord>)> {
    read_rows(path).map(|(c, rows): (MetricsColumns, _)| (c.task, rows))
}

/// Reads an `iterations.csv`: the task of its test columns (`None` without them) and its rows.
/// Errors name the line.
pub fn read_iterations(path: &Path) -> Result<(IterationColumns, Vec<IterationRecord>)> {
    read_rows(path)
}
