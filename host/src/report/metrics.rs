//! `metrics.csv` (one row per epoch) and `iterations.csv` (one row every N steps) of one
//! optimizer's run.
//!
//! `RUN_DIR/<optimizer>/metrics.csv` has the header
//! `epoch,train_loss,train_acc,test_loss,test_acc,seconds,home_share,rho,rho_active,tau` for image
//! classification ([`Task::Classification`], accuracies as fractions in [0, 1]) and
//! `epoch,train_loss,train_ppl,test_loss,test_ppl,seconds,home_share,rho,rho_active,tau` for
//! language modelling ([`Task::LanguageModel`]); the header says which. A run with `--eval-train`
//! adds the columns `clean_train_loss,clean_train_acc` (or `_ppl`): the training split evaluated
//! after the epoch in eval mode. `RUN_DIR/<optimizer>/iterations.csv` has the header
//! `step,train_loss,home_share,rho,rho_active,tau`, and with `--eval-every` also
//! `test_loss,test_acc` (or `test_ppl`): the test subset's, on the rows where it was evaluated.
//! Files written before `rho_active` and `tau` existed (`...,rho` without them) still read, their
//! rows without either value, and a resumed run keeps writing them in their own layout
//! ([`CsvRow::resumes_as`]). See [`crate::report::csv`] for the dialect, crash safety and resuming.

use std::path::Path;

use anyhow::Result;

use super::csv::{
    check_fraction, parse_float, parse_int, parse_optional, parse_optional_at, read_rows, CsvRow, CsvWriter,
    Field,
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

/// The ρ columns after `home_share`, in order; a file written before `rho_active` and `tau`
/// existed has only the first.
const RHO_COLUMNS: [&str; 3] = ["rho", "rho_active", "tau"];

/// How many of [`RHO_COLUMNS`] a file has.
fn rho_column_count(rho_active_tau: bool) -> usize {
    if rho_active_tau {
        RHO_COLUMNS.len()
    } else {
        1
    }
}

/// The header of the ρ columns.
fn rho_header(rho_active_tau: bool) -> String {
    RHO_COLUMNS[..rho_column_count(rho_active_tau)].join(",")
}

/// The fields of the ρ columns: (ρ, ρ_active, τ), as many as the file has.
fn rho_fields(values: [Option<f64>; 3], rho_active_tau: bool) -> impl Iterator<Item = Field> {
    values
        .into_iter()
        .take(rho_column_count(rho_active_tau))
        .map(Field::Optional)
}

/// Parses the ρ columns, which start at field `at`: (ρ, ρ_active, τ), `None` for those the
/// file lacks, and the index of the field after them.
fn parse_rho_fields(
    f: &[&str],
    at: usize,
    rho_active_tau: bool,
) -> Result<([Option<f64>; 3], usize), String> {
    let count = rho_column_count(rho_active_tau);
    let mut values = [None; 3];
    for (i, name) in RHO_COLUMNS[..count].iter().enumerate() {
        values[i] = parse_optional(name, f[at + i])?;
    }
    Ok((values, at + count))
}

/// The columns of a `metrics.csv`: the task's, whether the clean training evaluation's, and
/// whether `rho_active,tau`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsColumns {
    /// The task (accuracy or perplexity columns).
    pub task: Task,
    /// The `clean_train_*` columns (`--eval-train`).
    pub clean_train: bool,
    /// The `rho_active,tau` columns after `rho`: in every file written now, absent from files
    /// written before they existed.
    pub rho_active_tau: bool,
}

impl MetricsColumns {
    /// The columns a run of `task` writes now (`clean_train` with `--eval-train`).
    pub fn new(task: Task, clean_train: bool) -> Self {
        MetricsColumns {
            task,
            clean_train,
            rho_active_tau: true,
        }
    }

    /// Every kind of file, in header-lookup order.
    fn all() -> impl Iterator<Item = MetricsColumns> {
        Task::ALL.into_iter().flat_map(|task| {
            [(false, true), (true, true), (false, false), (true, false)].map(
                |(clean_train, rho_active_tau)| MetricsColumns {
                    task,
                    clean_train,
                    rho_active_tau,
                },
            )
        })
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
    /// Global and per-layer HomeAdam(W): the smallest ρ_t over the active elements,
    /// min over j with v_{t,j} > 0 of (v̂_t)_j (0 at a step without any), over the epoch's steps,
    /// whichever ρ the rule decides with; `None` for other rules and files without the column.
    pub rho_active: Option<f64>,
    /// HomeAdam(W): the τ the epoch's last applied step compared ρ with (it changes over a run
    /// when τ is calibrated); `None` for other rules and files without the column.
    pub tau: Option<f64>,
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
        let rho = rho_header(c.rho_active_tau);
        let mut h = format!("epoch,train_loss,train_{q},test_loss,test_{q},seconds,home_share,{rho}");
        if c.clean_train {
            h.push_str(&format!(",clean_train_loss,clean_train_{q}"));
        }
        h
    }

    fn kind_of_header(header: &str) -> Option<MetricsColumns> {
        MetricsColumns::all().find(|&c| Self::header(c) == header)
    }

    fn resumes_as(found: MetricsColumns, wanted: MetricsColumns) -> bool {
        (found.task, found.clean_train) == (wanted.task, wanted.clean_train)
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
        ];
        fields.extend(rho_fields(
            [self.rho, self.rho_active, self.tau],
            c.rho_active_tau,
        ));
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
        let epoch = parse_int("epoch", f[0])?;
        let ([rho, rho_active, tau], next) = parse_rho_fields(f, 7, c.rho_active_tau)?;
        Ok(EpochRecord {
            epoch: u32::try_from(epoch).map_err(|_| format!("epoch {epoch} is too large"))?,
            train_loss: parse_float("train_loss", f[1])?,
            train_quality: parse_float(&format!("train_{q}"), f[2])?,
            test_loss: parse_float("test_loss", f[3])?,
            test_quality: parse_float(&format!("test_{q}"), f[4])?,
            seconds: parse_float("seconds", f[5])?,
            home_share: parse_optional("home_share", f[6])?,
            rho,
            rho_active,
            tau,
            clean_train_loss: parse_optional_at(f, next, "clean_train_loss")?,
            clean_train_quality: parse_optional_at(f, next + 1, &format!("clean_train_{q}"))?,
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
    /// (as [`EpochRecord::home_share`]; with a row every step, that step's share); `None` for
    /// other rules.
    pub home_share: Option<f64>,
    /// The smallest ρ_t since the previous row; `None` without a second moment.
    pub rho: Option<f64>,
    /// The smallest ρ_t over the active elements since the previous row (as
    /// [`EpochRecord::rho_active`]).
    pub rho_active: Option<f64>,
    /// The τ of the last applied step since the previous row (as [`EpochRecord::tau`]).
    pub tau: Option<f64>,
    /// `--eval-every`: the test subset's mean loss after this step; `None` on other rows.
    pub test_loss: Option<f64>,
    /// `--eval-every`: the test subset's accuracy or perplexity after this step.
    pub test_quality: Option<f64>,
}

/// The columns of an `iterations.csv`: the test subset's, and whether `rho_active,tau`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IterationColumns {
    /// `--eval-every`: the task of the test subset's columns; `None` without them.
    pub test: Option<Task>,
    /// The `rho_active,tau` columns after `rho` (as [`MetricsColumns::rho_active_tau`]).
    pub rho_active_tau: bool,
}

impl IterationColumns {
    /// The columns a run writes now: with the test subset's of `test` (`--eval-every`).
    pub fn new(test: Option<Task>) -> Self {
        IterationColumns {
            test,
            rho_active_tau: true,
        }
    }
}

impl CsvRow for IterationRecord {
    type Kind = IterationColumns;
    const KEY: &'static str = "step";

    fn header(c: IterationColumns) -> String {
        let base = format!("step,train_loss,home_share,{}", rho_header(c.rho_active_tau));
        match c.test {
            Some(task) => format!("{base},test_loss,test_{}", task.quality_column()),
            None => base,
        }
    }

    fn kind_of_header(header: &str) -> Option<IterationColumns> {
        [true, false]
            .into_iter()
            .flat_map(|rho_active_tau| {
                [None, Some(Task::Classification), Some(Task::LanguageModel)]
                    .map(|test| IterationColumns { test, rho_active_tau })
            })
            .find(|&c| Self::header(c) == header)
    }

    fn resumes_as(found: IterationColumns, wanted: IterationColumns) -> bool {
        found.test == wanted.test
    }

    fn key(&self) -> u64 {
        self.step
    }

    fn fields(&self, c: IterationColumns) -> Vec<Field> {
        let mut fields = vec![
            Field::Int(self.step),
            Field::Float(self.train_loss),
            Field::Optional(self.home_share),
        ];
        fields.extend(rho_fields(
            [self.rho, self.rho_active, self.tau],
            c.rho_active_tau,
        ));
        if c.test.is_some() {
            fields.extend([
                Field::Optional(self.test_loss),
                Field::Optional(self.test_quality),
            ]);
        }
        fields
    }

    fn parse(f: &[&str], c: IterationColumns) -> Result<Self, String> {
        let q = c.test.map_or("", Task::quality_column);
        let ([rho, rho_active, tau], next) = parse_rho_fields(f, 3, c.rho_active_tau)?;
        Ok(IterationRecord {
            step: parse_int("step", f[0])?,
            train_loss: parse_float("train_loss", f[1])?,
            home_share: parse_optional("home_share", f[2])?,
            rho,
            rho_active,
            tau,
            test_loss: parse_optional_at(f, next, "test_loss")?,
            test_quality: parse_optional_at(f, next + 1, &format!("test_{q}"))?,
        })
    }

    fn validate(&self, c: IterationColumns) -> Result<(), String> {
        if c.test == Some(Task::Classification) {
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
pub fn read_iterations(path: &Path) -> Result<(Option<Task>, Vec<IterationRecord>)> {
    read_rows(path).map(|(c, rows): (IterationColumns, _)| (c.test, rows))
}
