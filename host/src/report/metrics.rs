//! `metrics.csv` (one row per epoch) and `iterations.csv` (one row every N steps) of one
//! optimizer's run.
//!
//! `RUN_DIR/<optimizer>/metrics.csv` has the header
//! `epoch,train_loss,train_acc,test_loss,test_acc,seconds,home_share,rho` for image classification
//! ([`Task::Classification`], accuracies as fractions in [0, 1]) and
//! `epoch,train_loss,train_ppl,test_loss,test_ppl,seconds,home_share,rho` for language modelling
//! ([`Task::LanguageModel`]); the header says which. `RUN_DIR/<optimizer>/iterations.csv` (language
//! models) has the header `step,train_loss,home_share,rho`. See [`crate::report::csv`] for the
//! dialect, crash safety and resuming.

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
}

impl CsvRow for EpochRecord {
    type Kind = Task;
    const KEY: &'static str = "epoch";

    fn header(task: Task) -> String {
        let q = task.quality_column();
        format!("epoch,train_loss,train_{q},test_loss,test_{q},seconds,home_share,rho")
    }

    fn kind_of_header(header: &str) -> Option<Task> {
        Task::ALL.into_iter().find(|&t| Self::header(t) == header)
    }

    fn key(&self) -> u64 {
        u64::from(self.epoch)
    }

    fn fields(&self) -> Vec<Field> {
        vec![
            Field::Int(self.key()),
            Field::Float(self.train_loss),
            Field::Float(self.train_quality),
            Field::Float(self.test_loss),
            Field::Float(self.test_quality),
            Field::Float(self.seconds),
            Field::Optional(self.home_share),
            Field::Optional(self.rho),
        ]
    }

    fn parse(f: &[&str], task: Task) -> Result<Self, String> {
        let q = task.quality_column();
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
        })
    }

    fn validate(&self, task: Task) -> Result<(), String> {
        if task == Task::Classification {
            check_fraction("train_acc", self.train_quality)?;
            check_fraction("test_acc", self.test_quality)?;
        }
        self.home_share
            .map_or(Ok(()), |s| check_fraction("home_share", s))
    }
}

/// One row of `iterations.csv`: the running state every N optimizer steps (language models,
/// whose figures may be drawn per iteration).
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
}

impl CsvRow for IterationRecord {
    type Kind = ();
    const KEY: &'static str = "step";

    fn header((): ()) -> String {
        "step,train_loss,home_share,rho".to_string()
    }

    fn kind_of_header(header: &str) -> Option<()> {
        (header == Self::header(())).then_some(())
    }

    fn key(&self) -> u64 {
        self.step
    }

    fn fields(&self) -> Vec<Field> {
        vec![
            Field::Int(self.step),
            Field::Float(self.train_loss),
            Field::Optional(self.home_share),
            Field::Optional(self.rho),
        ]
    }

    fn parse(f: &[&str], (): ()) -> Result<Self, String> {
        Ok(IterationRecord {
            step: parse_int("step", f[0])?,
            train_loss: parse_float("train_loss", f[1])?,
            home_share: parse_optional("home_share", f[2])?,
            rho: parse_optional("rho", f[3])?,
        })
    }

    fn validate(&self, (): ()) -> Result<(), String> {
        self.home_share
            .map_or(Ok(()), |s| check_fraction("home_share", s))
    }
}

/// Writes `metrics.csv`: `MetricsWriter::create(path, task)` for a new run,
/// `MetricsWriter::resume(path, task, last_finished_epoch)` for a resumed one, then `append` per
/// epoch.
pub type MetricsWriter = CsvWriter<EpochRecord>;

/// Writes `iterations.csv`: `IterationWriter::create(path, ())`,
/// `IterationWriter::resume(path, (), last_step)`, then `append` every N steps.
pub type IterationWriter = CsvWriter<IterationRecord>;

/// Reads a `metrics.csv`: its task (from the header) and its rows. Errors name the line.
pub fn read_metrics(path: &Path) -> Result<(Task, Vec<EpochRecord>)> {
    read_rows(path)
}

/// Reads an `iterations.csv`. Errors name the line.
pub fn read_iterations(path: &Path) -> Result<Vec<IterationRecord>> {
    read_rows(path).map(|((), rows)| rows)
}
